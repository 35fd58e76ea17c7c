/* The row order of a kernel map that the tensor-core convolutions tile
 * over (mask_gemm's row_order 1, the int8 forward): rows sorted by their
 * neighbour bitmask so that a 128-row tile needs few kernel offsets, and
 * the per-tile offset masks of that order. Both are derived data cached on
 * the map the first time a convolution asks for them (per direction, dgrad
 * sharing the forward's order where it can), freed with the map
 * (vc_kmap_free_buffers).
 *
 * Two ways to build them, with the same result: a key kernel, a CUB radix
 * sort and a mask kernel (any size), or one block that does all three for
 * maps of at most VC_ROW_SMALL_MAX rows. On those (workload A's deep
 * levels) the first way's cost was its ~13 runtime calls -- workspace
 * allocations and frees, CUB's size query, three launches -- at 3-6 us of
 * the issuing thread each on the lent hosts: the one block took 15-38 us
 * off a level's first convolution, with as little GPU time or less
 * (docs/perf-notes.md item 128).
 * VOXCONV_KMAP_LEAN=0 keeps the first way at every size (tests, A/B). */
#include "cuda_mask_gemm.cuh"
#include "vc_cuda.h"
#include "vc_cuda_util.cuh"

#include <cub/block/block_radix_sort.cuh>
#include <cub/cub.cuh>

#include <stdlib.h>

using namespace vc_mask_gemm;

namespace {

/* Bit permutation of the row sort key: bit j of the key is offset perm[j]
 * of the neighbour bitmask (offsets >= 32 are left out: the order is only a
 * grouping heuristic, any order is correct). */
struct RowKeyPerm {
  int8_t perm[32];
  int bits;
};

/* Bit k: row `row` has a neighbour at offset k, for k < min(kvol, 32).
 * From the map's bitmask where it has one (one word instead of kvol
 * entries). */
__device__ __forceinline__ unsigned row_offsets(const int32_t *__restrict__ nbr,
                                                const uint32_t *__restrict__ row_mask,
                                                int64_t row, int kvol) {
  if (row_mask)
    return row_mask[row];
  const int bits = kvol < 32 ? kvol : 32;
  unsigned m = 0u;
  for (int k = 0; k < bits; k++)
    m |= (nbr[row * kvol + k] >= 0 ? 1u : 0u) << k;
  return m;
}

/* Sort key of a row: the Gray-code rank of its permuted neighbour bitmask.
 * The permutation puts the offsets a row has least often (corners, then
 * edges, then faces: larger |dx|+|dy|+|dz|) in the high bits, and the Gray
 * rank makes masks that differ in one bit sort next to each other. On
 * workload A level 0 this cuts tile x offset iterations of 64-row tiles by
 * 8% against sorting the raw mask (efficiency 0.621 -> 0.670 of the MMA
 * rows doing useful work, CPU analysis in docs/perf-notes.md). */
__device__ __forceinline__ unsigned row_key(const int32_t *__restrict__ nbr,
                                            const uint32_t *__restrict__ row_mask,
                                            int64_t row, int kvol,
                                            const RowKeyPerm &kp) {
  const unsigned w = row_offsets(nbr, row_mask, row, kvol);
  unsigned m = 0u;
#pragma unroll /* constant indices: kp stays in registers, not on the stack */
  for (int j = 0; j < 32; j++)
    if (j < kp.bits)
      m |= ((w >> kp.perm[j]) & 1u) << j;
  m ^= m >> 1; /* inverse Gray code: prefix XOR from the top bit down */
  m ^= m >> 2;
  m ^= m >> 4;
  m ^= m >> 8;
  m ^= m >> 16;
  return m;
}

__global__ void row_key_kernel(const int32_t *__restrict__ nbr,
                               const uint32_t *__restrict__ row_mask, int n,
                               int kvol, RowKeyPerm kp,
                               unsigned *__restrict__ key,
                               int32_t *__restrict__ idx) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  key[i] = row_key(nbr, row_mask, i, kvol, kp);
  idx[i] = i;
}

/* Offsets ordered by (|dx|+|dy|+|dz|, index): rarest last, in the key's
 * high bits. Data-independent, so the same for every map of a geometry. */
RowKeyPerm row_key_perm(const voxconv_kmap_t *m) {
  RowKeyPerm kp;
  kp.bits = m->kvol < 32 ? m->kvol : 32;
  int cls[32];
  for (int k = 0; k < kp.bits; k++) {
    cls[k] = abs(m->offsets[k][0]) + abs(m->offsets[k][1]) +
             abs(m->offsets[k][2]);
    kp.perm[k] = (int8_t)k;
  }
  for (int a = 1; a < kp.bits; a++) /* insertion sort, stable */
    for (int b = a; b > 0 && cls[kp.perm[b - 1]] > cls[kp.perm[b]]; b--) {
      const int8_t t = kp.perm[b];
      kp.perm[b] = kp.perm[b - 1];
      kp.perm[b - 1] = t;
    }
  return kp;
}

/* Lowest key bit the row sort looks at. The low bits hold the offsets
 * nearly every row has (centre, faces), which split few tiles, and each 8
 * bits dropped is one radix pass less (11-16 us on the H200, paid per map
 * and direction, forward and backward). A CPU analysis of workload A's
 * seven levels (docs/perf-notes.md, item 19) counted tile x offset
 * iterations against the full 27-bit key: 24 bits (3 passes) +1.4% at
 * level 0 and +0.3% at level 1, 16 bits (2 passes) +15% at level 0 but
 * +0.45% at level 3 (33,925 rows) and +0.0% below. So: 16 bits up to 64k
 * rows, 24 above; kernels with at most 16 offset bits sort all of them. */
int row_key_begin_bit(int bits, int n) {
  if (bits <= 16)
    return 0;
  const int keep = n <= 65536 ? 16 : 24;
  return bits > keep ? bits - keep : 0;
}

/* Whether dgrad on m may use the forward's row order. A submanifold map's
 * input and output rows are the same voxels, and with a point-symmetric
 * offset set (offsets[K-1-k] == -offsets[k]: every odd kernel size) row r's
 * dgrad neighbour mask is its forward mask mirrored (bit k <-> bit K-1-k).
 * Rows grouped by one mask are grouped by the other, so every 128-row tile
 * needs exactly as many offsets either way, and the backward's key pass and
 * 2-3 pass radix sort per map (host and GPU time in every training step;
 * docs/perf-notes.md item 103) buy nothing. The tile masks stay per
 * direction (built from the dgrad row masks over the shared order). The
 * order moves dgrad's rounding a little (which rows share a tile changes
 * how a tile's sums are grouped: at most an ulp here and there, within the
 * format bound test_mask_gemm checks); it is the forward's whichever pass
 * comes first, so a map's dgrad result does not depend on call order. */
bool dgrad_shares_forward_order(const voxconv_kmap_t *m) {
  return m->desc.mode == VOXCONV_KMAP_SUBMANIFOLD && m->n_in == m->n_out &&
         vc_kmap_offsets_symmetric(&m->desc);
}

/* ---- one block for small maps ------------------------------------------- */
#define VC_ROW_SMALL_THREADS 1024
#define VC_ROW_SMALL_ITEMS 8 /* rows a thread, in registers */
#define VC_ROW_SMALL_MAX (VC_ROW_SMALL_THREADS * VC_ROW_SMALL_ITEMS)
static_assert(VC_MG_MASK_TILE_ROWS % VC_ROW_SMALL_ITEMS == 0 &&
                  VC_MG_MASK_TILE_ROWS / VC_ROW_SMALL_ITEMS <= 32,
              "a tile's rows are held by the lanes of one warp");

/* What row_key_kernel, the CUB sort and tile_mask_kernel do, for n <=
 * THREADS x VC_ROW_SMALL_ITEMS rows, in one block. Both sorts are stable
 * radix sorts of (key bits [begin_bit, begin_bit + key_bits), row) pairs,
 * so the order is the same. Blocked arrangement (thread t holds ranks 8t .. 8t+7): the
 * input order is the row order, which stability keeps among equal keys,
 * and the 16 lanes of a 128-row tile OR their rows' masks by shuffles.
 * Padding (ranks >= n) has the largest key and the last positions, so it
 * stays behind every row. tile_mask may be NULL (kvol > 32: no masks). */
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    small_row_order_kernel(const int32_t *__restrict__ nbr,
                           const uint32_t *__restrict__ row_mask, int n,
                           int kvol, RowKeyPerm kp, int begin_bit, int key_bits,
                           int32_t *__restrict__ order,
                           unsigned *__restrict__ tile_mask) {
  typedef cub::BlockRadixSort<uint32_t, THREADS, VC_ROW_SMALL_ITEMS, int32_t>
      Sort;
  __shared__ typename Sort::TempStorage tmp;
  const int p0 = threadIdx.x * VC_ROW_SMALL_ITEMS;
  uint32_t k[VC_ROW_SMALL_ITEMS];
  int32_t row[VC_ROW_SMALL_ITEMS];
#pragma unroll
  for (int j = 0; j < VC_ROW_SMALL_ITEMS; j++) {
    const int p = p0 + j;
    k[j] = p < n ? row_key(nbr, row_mask, p, kvol, kp) >> begin_bit : ~0u;
    row[j] = p;
  }
  Sort(tmp).Sort(k, row, 0, key_bits);
  unsigned tm = 0u;
#pragma unroll
  for (int j = 0; j < VC_ROW_SMALL_ITEMS; j++) {
    const int p = p0 + j;
    if (p < n) {
      order[p] = row[j];
      if (tile_mask)
        tm |= row_offsets(nbr, row_mask, row[j], kvol);
    }
  }
  if (tile_mask) {
    constexpr int LANES = VC_MG_MASK_TILE_ROWS / VC_ROW_SMALL_ITEMS;
#pragma unroll
    for (int d = 1; d < LANES; d <<= 1)
      tm |= __shfl_xor_sync(0xFFFFFFFFu, tm, d);
    if (threadIdx.x % LANES == 0 && p0 < n)
      tile_mask[p0 / VC_MG_MASK_TILE_ROWS] = tm;
  }
}

/* Bit k of mask[t]: a row of tile t (rows order[VC_MG_MASK_TILE_ROWS * t
 * ..]) has a neighbour at offset k (kvol <= 32). One block per tile, one
 * row per thread, OR-reduced per warp then across the warps. */
__global__ void tile_mask_kernel(const int32_t *__restrict__ nbr,
                                 const uint32_t *__restrict__ row_mask,
                                 const int32_t *__restrict__ order, int n,
                                 int kvol, unsigned *__restrict__ mask) {
  constexpr int WARPS = VC_MG_MASK_TILE_ROWS / 32;
  __shared__ unsigned part[WARPS];
  const int r = blockIdx.x * VC_MG_MASK_TILE_ROWS + threadIdx.x;
  const unsigned m = r < n ? row_offsets(nbr, row_mask, order[r], kvol) : 0u;
  const unsigned w = __reduce_or_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0)
    part[threadIdx.x >> 5] = w;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned all = 0u;
    for (int i = 0; i < WARPS; i++)
      all |= part[i];
    mask[blockIdx.x] = all;
  }
}

int mask_tiles(int n) {
  return (int)vc_ceil_div<int64_t>(n, VC_MG_MASK_TILE_ROWS);
}

/* Where a table made now goes: into the map (local NULL), or into the
 * caller's workspace `local`, freed after its op, on a first use inside a
 * CUDA graph capture of a map built before the capture. Kept there, it
 * would exist only in the graph's replays: an eager call before the first
 * replay would read memory never written. Left out of the map, every
 * replay makes it again (voxconv.h: CUDA graph capture). */
template <typename T>
voxconv_status_t table_get(VcWorkspace &own, VcWorkspace *local, int64_t n,
                           T **out, const char *what) {
  return (local ? *local : own).get<T>(n, out, what);
}

/* The order (and, with want_masks and kvol <= 32, the direction's tile
 * masks, *masks; else NULL) of one direction by the one-block kernel; the
 * slots are empty. */
voxconv_status_t small_row_order(voxconv_handle_t *h, voxconv_kmap_t *m,
                                 bool dgrad, bool want_masks,
                                 VcWorkspace *local, const int32_t **out,
                                 const unsigned **masks) {
  const int n = (int)(dgrad ? m->n_in : m->n_out);
  const bool make_masks = want_masks && m->kvol <= 32 &&
                          !(dgrad ? m->tile_mask_in : m->tile_mask_out);
  VcWorkspace ws(h);
  int32_t *order = NULL;
  uint32_t *mask = NULL;
  VC_CHECK(table_get(ws, local, n, &order, "mask_gemm row order"));
  if (make_masks)
    VC_CHECK(table_get(ws, local, mask_tiles(n), &mask,
                       "mask_gemm tile masks"));
  const RowKeyPerm kp = row_key_perm(m);
  const int begin_bit = row_key_begin_bit(kp.bits, n);
  /* The smallest block that holds n: padding costs as much to sort as
   * rows (one 1,024-thread size took 16 us of GPU time for 301 rows, the
   * CUB path 12; docs/perf-notes.md item 128). */
  const int32_t *nbr = dgrad ? m->nbr_in : m->nbr_out;
  const uint32_t *rmask = dgrad ? m->row_mask_in : m->row_mask_out;
  const int key_bits = kp.bits - begin_bit;
  const cudaStream_t stream = vc_cuda_stream(h);
  if (n <= 64 * VC_ROW_SMALL_ITEMS)
    small_row_order_kernel<64><<<1, 64, 0, stream>>>(
        nbr, rmask, n, m->kvol, kp, begin_bit, key_bits, order, mask);
  else if (n <= 256 * VC_ROW_SMALL_ITEMS)
    small_row_order_kernel<256><<<1, 256, 0, stream>>>(
        nbr, rmask, n, m->kvol, kp, begin_bit, key_bits, order, mask);
  else
    small_row_order_kernel<VC_ROW_SMALL_THREADS>
        <<<1, VC_ROW_SMALL_THREADS, 0, stream>>>(nbr, rmask, n, m->kvol, kp,
                                                 begin_bit, key_bits, order,
                                                 mask);
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm small_row_order_kernel");
  *out = order;
  *masks = mask;
  if (local)
    return VOXCONV_STATUS_SUCCESS;
  ws.release(order);
  ws.release(mask);
  (dgrad ? m->row_order_in : m->row_order_out) = order;
  if (make_masks)
    (dgrad ? m->tile_mask_in : m->tile_mask_out) = mask;
  return VOXCONV_STATUS_SUCCESS;
}

/* Rows sorted (stably, so deterministically) by that key, cached on the
 * map: the map is logically const to callers but owns this cache, like the
 * rest of its derived tables. Costs one key pass and one radix sort the
 * first time a map is used by this algorithm (per direction, except where
 * dgrad shares the forward's: above; vc_kmap_free_buffers frees a shared
 * order once). Small maps take the one-block kernel, which also makes the
 * tile masks when want_masks (*masks; else NULL). */
voxconv_status_t ensure_row_order(voxconv_handle_t *h, voxconv_kmap_t *m,
                                  bool dgrad, bool want_masks,
                                  VcWorkspace *local, const int32_t **order,
                                  const unsigned **masks) {
  *masks = NULL;
  int32_t **slot = dgrad ? &m->row_order_in : &m->row_order_out;
  if (*slot) {
    *order = *slot;
    return VOXCONV_STATUS_SUCCESS;
  }
  if (dgrad && dgrad_shares_forward_order(m)) {
    /* the forward's masks are not dgrad's: not made here */
    const unsigned *fwd_masks = NULL;
    VC_CHECK(ensure_row_order(h, m, false, false, local, order, &fwd_masks));
    if (!local)
      *slot = (int32_t *)*order;
    return VOXCONV_STATUS_SUCCESS;
  }
  const int n = (int)(dgrad ? m->n_in : m->n_out);
  if (n > 0 && n <= VC_ROW_SMALL_MAX && !vc_cuda_state(h)->kmap_lean_off)
    return small_row_order(h, m, dgrad, want_masks, local, order, masks);
  const int32_t *nbr = dgrad ? m->nbr_in : m->nbr_out;
  VcWorkspace ws(h);
  unsigned *key = NULL, *key_sorted = NULL;
  int32_t *idx = NULL, *res = NULL;
  VC_CHECK(ws.get<unsigned>(n, &key, "mask_gemm row keys"));
  VC_CHECK(ws.get<unsigned>(n, &key_sorted, "mask_gemm sorted keys"));
  VC_CHECK(ws.get<int32_t>(n, &idx, "mask_gemm row index"));
  VC_CHECK(table_get(ws, local, n, &res, "mask_gemm row order"));
  if (n > 0) {
    const RowKeyPerm kp = row_key_perm(m);
    row_key_kernel<<<vc_grid_1d(n, 256, INT32_MAX), 256, 0,
                     vc_cuda_stream(h)>>>(
        nbr, dgrad ? m->row_mask_in : m->row_mask_out, n, m->kvol, kp, key,
        idx);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm row_key_kernel");
    const int end_bit = kp.bits;
    const int begin_bit = row_key_begin_bit(kp.bits, n);
    size_t temp_bytes = 0;
    VC_CUDA_TRY(h, cub::DeviceRadixSort::SortPairs(
                       NULL, temp_bytes, key, key_sorted, idx, res, n,
                       begin_bit, end_bit, vc_cuda_stream(h)));
    unsigned char *temp = NULL;
    VC_CHECK(ws.get<unsigned char>((int64_t)temp_bytes, &temp,
                                   "mask_gemm sort scratch"));
    VC_CUDA_TRY(h, cub::DeviceRadixSort::SortPairs(
                       temp, temp_bytes, key, key_sorted, idx, res, n,
                       begin_bit, end_bit, vc_cuda_stream(h)));
  }
  *order = res;
  if (!local) {
    ws.release(res);
    *slot = res;
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* The 128-row tile masks of the sorted order, cached on the map beside
 * it (the kernels' per-tile scan of 128 x kvol neighbour entries, two
 * barriers and a serial list build become one word read). */
voxconv_status_t ensure_tile_masks(voxconv_handle_t *h, voxconv_kmap_t *m,
                                   bool dgrad, const int32_t *order,
                                   VcWorkspace *local, const unsigned **out) {
  uint32_t **slot = dgrad ? &m->tile_mask_in : &m->tile_mask_out;
  if (*slot) {
    *out = *slot;
    return VOXCONV_STATUS_SUCCESS;
  }
  const int n = (int)(dgrad ? m->n_in : m->n_out);
  const int tiles = mask_tiles(n);
  VcWorkspace ws(h); /* frees the masks on a failed launch */
  uint32_t *mask = NULL;
  VC_CHECK(table_get(ws, local, tiles > 0 ? tiles : 1, &mask,
                     "mask_gemm tile masks"));
  if (tiles > 0) {
    tile_mask_kernel<<<tiles, VC_MG_MASK_TILE_ROWS, 0, vc_cuda_stream(h)>>>(
        dgrad ? m->nbr_in : m->nbr_out,
        dgrad ? m->row_mask_in : m->row_mask_out, order, n, m->kvol, mask);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm tile_mask_kernel");
  }
  *out = mask;
  if (!local) {
    ws.release(mask);
    *slot = mask;
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* One direction's order, and with want_masks (kvol <= 32) its tile masks,
 * under the map's lock (two threads may share the map) and after what
 * other streams wrote of its tables (vc_cuda_kmap_lazy_lock). */
voxconv_status_t rows_of(voxconv_handle_t *h, voxconv_kmap_t *m, bool dgrad,
                         bool want_masks, VcWorkspace *local,
                         const int32_t **order, const unsigned **tile_mask) {
  int keep = 1;
  VC_CHECK(vc_cuda_kmap_lazy_lock(h, m, "mask_gemm row order", &keep));
  const int32_t *order_was = dgrad ? m->row_order_in : m->row_order_out;
  const uint32_t *mask_was = dgrad ? m->tile_mask_in : m->tile_mask_out;
  VcWorkspace *to = keep ? NULL : local;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  if (!keep && !local)
    st = vc_fail(h, VOXCONV_STATUS_INTERNAL,
                 "mask_gemm row order: a first use inside a capture needs "
                 "a workspace for it");
  const unsigned *made = NULL;
  if (st == VOXCONV_STATUS_SUCCESS)
    st = ensure_row_order(h, m, dgrad, want_masks, to, order, &made);
  *tile_mask = made;
  if (st == VOXCONV_STATUS_SUCCESS && want_masks && m->kvol <= 32 && !made)
    st = ensure_tile_masks(h, m, dgrad, *order, to, tile_mask);
  const bool wrote =
      order_was != (dgrad ? m->row_order_in : m->row_order_out) ||
      mask_was != (dgrad ? m->tile_mask_in : m->tile_mask_out);
  const voxconv_status_t su = vc_cuda_kmap_lazy_unlock(h, m, wrote);
  return st != VOXCONV_STATUS_SUCCESS ? st : su;
}

} // namespace

voxconv_status_t vc_mask_gemm::row_order(voxconv_handle_t *h,
                                         const voxconv_kmap_t *m, bool dgrad,
                                         VcWorkspace *local,
                                         const int32_t **order) {
  const unsigned *none = NULL;
  return rows_of(h, (voxconv_kmap_t *)m, dgrad, false, local, order, &none);
}

voxconv_status_t vc_mask_gemm::sorted_rows(voxconv_handle_t *h,
                                           const voxconv_kmap_t *m, bool dgrad,
                                           VcWorkspace *local,
                                           const int32_t **order,
                                           const unsigned **tile_mask) {
  return rows_of(h, (voxconv_kmap_t *)m, dgrad, true, local, order,
                 tile_mask);
}

/* vc_cuda.h. FORWARD needs the output count on the host: a deferred
 * STRIDED map still without it is left to its first op. */
extern "C" voxconv_status_t vc_cuda_kmap_prepare(voxconv_handle_t *h,
                                                 const voxconv_kmap_t *kmap,
                                                 unsigned what,
                                                 const char *func) {
  if (vc_stream_capturing(h) && !vc_cuda_kmap_captured(kmap))
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: inside a CUDA graph capture of a map built before "
                   "it, the tables would exist only in the graph's replays; "
                   "prepare the map before the capture",
                   func);
  VC_CUDA_DEVICE_GUARD(h);
  if (what & VOXCONV_PREPARE_PAIRS)
    VC_CHECK(vc_cuda_kmap_pairs(h, kmap, func));
  const int32_t *order = NULL;
  const unsigned *masks = NULL;
  voxconv_kmap_t *m = (voxconv_kmap_t *)kmap;
  if ((what & VOXCONV_PREPARE_FORWARD) && m->n_out >= 0)
    VC_CHECK(rows_of(h, m, false, true, NULL, &order, &masks));
  if (what & VOXCONV_PREPARE_DGRAD)
    VC_CHECK(rows_of(h, m, true, true, NULL, &order, &masks));
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_row_order(voxconv_handle_t *h,
                                              const voxconv_kmap_t *kmap,
                                              int dgrad, int want_masks,
                                              const int32_t **order,
                                              const uint32_t **tile_mask) {
  *tile_mask = NULL;
  if (want_masks)
    return vc_mask_gemm::sorted_rows(h, kmap, dgrad != 0, NULL, order,
                                     (const unsigned **)tile_mask);
  return vc_mask_gemm::row_order(h, kmap, dgrad != 0, NULL, order);
}
