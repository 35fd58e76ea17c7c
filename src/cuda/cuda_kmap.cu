/* CUDA kernel-map builder for all five modes, and the inverse of STRIDED /
 * EXPANDING maps (voxconv_kmap_inverse). Produces, element for
 * element, the map of the CPU builder (src/coords/kmap_cpu.c): outputs in
 * ascending packed-key order, pairs grouped by offset and sorted by output
 * row, nbr_out / nbr_in tables, pair_offsets on the host, the input
 * fingerprint, and the same statuses and messages for bad coordinates.
 *
 * Pipeline (n = rows, K = kernel volume; every step is one kernel or one
 * CUB call on the handle's stream):
 *   1. pack + check: coords -> packed keys, range flag (lowest bad row via
 *      atomicMin), fingerprint (wrapping integer sum: order-free, so
 *      deterministic), insert into a GPU hash (cuda_hash.cuh).
 *   2. duplicate pass: a row whose key maps to a lower row is a repeat; the
 *      lowest such row is reported, as the CPU does. STRIDED builds with
 *      kernel = stride (direct tables, step 4) of at least 65,536 rows skip
 *      steps 1's insert and 2: two equal rows claim the same table slot
 *      there, and only then are the inputs hashed and checked, so the
 *      report names the same rows (vc_hash_on_dup; docs/perf-notes.md
 *      items 127-128).
 *   3. outputs: SUBMANIFOLD = inputs; TRANSPOSED = the caller's (packed,
 *      checked and hashed like the inputs); STRIDED = CUB radix sort +
 *      unique of floor(c/s); GENERATIVE = sort + unique of s*c + off_k;
 *      EXPANDING = (c - off_k)/s where exact (both inside out_shape when
 *      given), from a compact candidate layout (only the taps that can
 *      land on the lattice), deduplicated in a key-only GPU hash set as
 *      they are made (vc_expand_keys_kernel); the distinct keys are sorted
 *      after the sync.
 *   4. neighbour queries, one thread per (row, k), writes coalesced:
 *      nbr_out[o][k] by lookups in the input hash (and per-offset counts of
 *      each block of 32 outputs), nbr_in[i][k] by lookups in the output
 *      hash -- or, for submanifold maps with odd kernels (symmetric
 *      offsets), mirrored from the same lookup: nbr_in[i][k] =
 *      nbr_out[i][K-1-k]. Lookups rather than a scatter: no memset, no
 *      random 4-byte writes.
 *   5. exclusive scan of the counts laid out [k][block] (CUB, or one block
 *      up to 65,536 counts): each block's write position per offset,
 *      offsets grouped, blocks in output order.
 *   -- THE one host synchronisation: a pinned status block with the error
 *      rows, the hash-overflow flags, n_out and pair_offsets[K+1] is read
 *      back. Everything after it is asynchronous.
 *   6. the pair lists, on first need (vc_cuda_kmap_pairs; the build keeps
 *      the scanned counts): allocated (n_pairs known by then, or its
 *      bound), then written: each warp reloads its 32 rows of nbr_out
 *      into shared memory and compacts every offset column with a ballot
 *      (stable: output order). VOXCONV_KMAP_LEAN=0 writes them here.
 *
 * GENERATIVE and EXPANDING differ in where the sync sits: every (input,
 * offset) candidate that lands on an output is a pair (an out-of-range one
 * on an unbounded axis is an error), so the candidate kernel counts the
 * pairs of each offset on its way; the sync happens right after the unique
 * output count is known and brings those counts along, and steps 4-6 then
 * run with exact sizes and no other sync. EXPANDING learns n_out without
 * sorting (the hash set counts the keys it stores) and sorts exactly n_out
 * keys after the sync; its output fingerprint, a function of that order,
 * therefore reaches the host later, through a pinned slot behind an event
 * that voxconv_kmap_inverse, its only reader, waits for
 * (vc_defer_out_fingerprint).
 * STRIDED learns n_out on the device, so its step 4 runs over n_in rows (an
 * upper bound) with the real count read from device memory, and nbr_out /
 * out_coords are cut to size after the sync. A deferred STRIDED build
 * (voxconv_kmap_build_async) has no sync at all: the map keeps those
 * upper-bound arrays, the pair writer stops at the device count, and
 * n_out reaches the host with the verdict (vc_finish_async), as a
 * SUBMANIFOLD build's pair counts do.
 *
 * The kernels and device helpers are in cuda_kmap_kernels.cuh, one-block
 * versions of steps 3 (STRIDED keys, up to 8,192 inputs) and 5 for small
 * inputs in cuda_kmap_small.cuh; this file queues them.
 *
 * Hash overflow: tables are sized >= 4x (power of two) their keys, so an
 * insert cannot fail; the device still counts failed inserts and the build
 * retries with room for all keys when the count is non-zero, so a table
 * too small (the VOXCONV_CUDA_HASH_TINY=1 test knob starts them at 16
 * slots) costs a retry, never a truncated map. The exception is EXPANDING's
 * output-key set, whose key count is only bounded by n_in * S: it is sized
 * from an estimate (vc_cuda_kmap_build) and can fill; it reports through
 * overflow_out, and the retry gives it room for every possible key.
 * Post-sync tables (the GENERATIVE / EXPANDING output hash) are sized from
 * the exact count and ignore the knob, so they never overflow. */
#include "cuda_kmap_kernels.cuh"
#include "cuda_kmap_status.cuh"
#include "cuda_kmap_small.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <limits.h>
#include <stdlib.h>
#include <string.h>


static const char *const vc_field_names[4] = {"batch", "x", "y", "z"};

extern "C" int vc_cuda_kmap_hash_retries(const voxconv_kmap_t *kmap) {
  const VcKmapPriv *p = (const VcKmapPriv *)kmap->backend_priv;
  return p ? p->hash_retries : -1;
}

extern "C" void vc_cuda_kmap_free_priv(voxconv_handle_t *h,
                                       voxconv_kmap_t *kmap) {
  VcKmapPriv *p = (VcKmapPriv *)kmap->backend_priv;
  if (!p)
    return;
  VcDeviceGuard guard(h);
  /* A captured build's slot is written by every replay of its graph, which
   * may outlive the map: it is never handed to another map. */
  if (p->h_status && !p->captured &&
      vc_pinned_status_release(p->h_status, p->ready))
    p->ready = NULL; /* the pool destroys it once the copy has landed */
  if (p->ready)
    cudaEventDestroy(p->ready);
  if (p->lazy_done)
    cudaEventDestroy(p->lazy_done);
  vc_free(h, p->pair_scan);
  vc_free(h, p->d_status);
  free(p->verdict_msg);
  pthread_mutex_destroy(&p->lock);
  free(p);
  kmap->backend_priv = NULL;
  kmap->pair_offsets_dev = NULL;
  (void)cudaGetLastError();
}

/* ---- host side ------------------------------------------------------------ */
static const int kBlock = 256;
/* Input rows from which a direct STRIDED build hashes its input only on a
 * duplicate (vc_input_side). */
static const int64_t VC_HASH_ON_DUP_MIN = 65536;

static unsigned vc_grid_rows(voxconv_handle_t *h, int64_t n) {
  /* Grid-stride kernels: enough blocks to fill the GPU several times. */
  const vc_cuda_state_t *s = vc_cuda_state(h);
  const int64_t cap = (int64_t)s->sm_count * 16;
  return vc_grid_1d(n, kBlock, cap > 0 ? cap : 1024);
}

/* Everything one attempt allocates or reads back. */
struct VcBuild {
  voxconv_handle_t *h;
  voxconv_kmap_t *m;
  const voxconv_coords_t *in, *out;
  VcGeom g;
  uint64_t cap_in, cap_out; /* pre-sync hash capacities */
  uint64_t cap_keys;        /* EXPANDING: the output-key set's capacity */
  int overflowed;           /* set after the sync */
  int keys_overflowed;      /* ... by the output-key set (EXPANDING) */
  int async;                /* SUBMANIFOLD, deferred STRIDED: no host wait */
  int preset;               /* pending, n_out, n_pairs set by the caller */
};

/* The geometry of a map's descriptor (the build's kernels take it). */
static VcGeom vc_geom_of(const voxconv_kmap_t *m) {
  VcGeom g;
  memset(&g, 0, sizeof g);
  for (int a = 0; a < 3; a++) {
    g.ks[a] = m->desc.kernel_size[a];
    g.dil[a] = m->desc.dilation[a];
    g.s[a] = m->desc.stride[a];
    g.pad[a] = vc_kmap_pad(&m->desc, a);
    g.out_shape[a] = m->desc.out_shape[a];
  }
  g.K = m->kvol;
  g.order = m->desc.offset_order;
  return g;
}

/* What the host knows of an asynchronous build before the GPU has run it
 * (voxconv_kmap_t.pending): n_out (-1 for a deferred STRIDED map) and the
 * pair lists' capacity. */
static void vc_async_shape(voxconv_kmap_t *m) {
  const int64_t n = m->n_in;
  const int K = m->kvol;
  if (m->desc.mode == VOXCONV_KMAP_STRIDED) {
    const int3 sl = vc_expand_slots(vc_geom_of(m));
    const int64_t taps = (int64_t)sl.x * sl.y * sl.z;
    m->n_out = -1;
    m->n_pairs = n * (taps < K ? taps : K);
  } else {
    m->n_out = n;
    m->n_pairs = n * K;
  }
  m->pending = 1;
}

/* Whether the build of m would be asynchronous (see b.async below). */
static int vc_build_is_async(voxconv_handle_t *h, const voxconv_kmap_t *m,
                             int defer) {
  return (m->desc.mode == VOXCONV_KMAP_SUBMANIFOLD ||
          (defer && m->desc.mode == VOXCONV_KMAP_STRIDED)) &&
         !vc_cuda_state(h)->hash_debug_tiny && !vc_cuda_state(h)->kmap_sync;
}

extern "C" int vc_cuda_kmap_preset_async(voxconv_handle_t *h,
                                         voxconv_kmap_t *m, int defer) {
  if (!vc_build_is_async(h, m, defer & VC_BUILD_DEFER))
    return 0;
  vc_async_shape(m);
  return 1;
}

/* A table of cap slots, emptied now -- or, with `later`, left for
 * vc_hash_on_dup to empty if it is ever needed; init_st: also initialise
 * that status block (the attempt's first table: its clear is the
 * attempt's first kernel, a one-block one when nothing is cleared). */
static voxconv_status_t vc_make_hash(VcWorkspace &ws, voxconv_handle_t *h,
                                     uint64_t cap, VcGpuHash *t,
                                     const char *what,
                                     VcKmapStatus *init_st = NULL,
                                     bool later = false) {
  VC_CHECK(ws.get<unsigned long long>((int64_t)cap, &t->keys, what));
  VC_CHECK(ws.get<int32_t>((int64_t)cap, &t->vals, what));
  t->mask = cap - 1;
  if (later && !init_st)
    return VOXCONV_STATUS_SUCCESS;
  const uint64_t n = later ? 0 : cap;
  vc_hash_clear_kernel<<<later ? 1 : vc_grid_rows(h, (int64_t)cap), kBlock, 0,
                         vc_cuda_stream(h)>>>(t->keys, t->vals, n, init_st,
                                              NULL);
  VC_CUDA_LAUNCH_CHECK(h, "vc_hash_clear_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* Keys of the rows, range checks, fingerprint; with insert, the rows into
 * table t too. */
static voxconv_status_t vc_pack_coords(voxconv_handle_t *h, const int32_t *coords,
                                       int64_t n, unsigned long long *keys,
                                       const VcGpuHash &t,
                                       unsigned long long *bad_row,
                                       unsigned int *overflow,
                                       unsigned long long *fingerprint,
                                       int insert = 1) {
  if (n == 0)
    return VOXCONV_STATUS_SUCCESS;
  vc_pack_insert_kernel<<<vc_grid_rows(h, n), kBlock, 0, vc_cuda_stream(h)>>>(
      coords, n, keys, t, insert, bad_row, overflow, fingerprint);
  VC_CUDA_LAUNCH_CHECK(h, "vc_pack_insert_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t vc_dup_check(voxconv_handle_t *h,
                                     const unsigned long long *keys, int64_t n,
                                     const VcGpuHash &t,
                                     unsigned long long *dup_row) {
  if (n == 0)
    return VOXCONV_STATUS_SUCCESS;
  vc_dup_check_kernel<<<vc_grid_rows(h, n), kBlock, 0, vc_cuda_stream(h)>>>(
      keys, n, t, dup_row, NULL);
  VC_CUDA_LAUNCH_CHECK(h, "vc_dup_check_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* Warps per block for the warp-per-tile kernels: as many 32 x K int32
 * slices as fit in 48 KB next to the offsets (8 for K = 27, 1 for 7^3). */
static int vc_tile_warps(int K) {
  const size_t slice = (size_t)32 * (K | 1) * sizeof(int32_t);
  const size_t room = 48 * 1024 - (size_t)3 * K * sizeof(int32_t);
  size_t w = room / slice;
  if (w < 1)
    w = 1;
  if (w > VC_Q_WARPS_MAX)
    w = VC_Q_WARPS_MAX;
  return (int)w;
}

static voxconv_status_t vc_query(voxconv_handle_t *h, int dir,
                                 const VcQuery &q, const VcGeom &g) {
  const int64_t tiles = vc_ceil_div<int64_t>(q.n_src, 32);
  if (tiles == 0)
    return VOXCONV_STATUS_SUCCESS;
  const int warps = vc_tile_warps(g.K);
  const int64_t blocks64 = vc_ceil_div<int64_t>(tiles, warps);
  const unsigned blocks =
      blocks64 > (int64_t)INT32_MAX ? (unsigned)INT32_MAX : (unsigned)blocks64;
  const size_t smem =
      ((size_t)3 * g.K + (size_t)warps * 32 * (g.K | 1)) * sizeof(int32_t);
  if (dir == VC_Q_MULADD) {
    vc_query_kernel<VC_Q_MULADD><<<blocks, warps * 32, smem,
                                   vc_cuda_stream(h)>>>(q, g);
    VC_CUDA_LAUNCH_CHECK(h, "vc_query_kernel<MULADD>");
  } else {
    vc_query_kernel<VC_Q_SUBDIV><<<blocks, warps * 32, smem,
                                   vc_cuda_stream(h)>>>(q, g);
    VC_CUDA_LAUNCH_CHECK(h, "vc_query_kernel<SUBDIV>");
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* Whether the one-block kernels (cuda_kmap_small.cuh) run the steps they
 * can on n items (VOXCONV_KMAP_LEAN=0: never, for A/B runs and tests). */
static bool vc_small(voxconv_handle_t *h, int64_t n, int64_t max) {
  return n <= max && !vc_cuda_state(h)->kmap_lean_off;
}

/* Whether the pair counts [K * n_blocks + 1] are scanned by one block
 * (vc_scan_counts; vc_clear_count_tail must agree). */
static bool vc_scan_small(voxconv_handle_t *h, int64_t n_blocks, int K) {
  return vc_small(h, (int64_t)K * n_blocks + 1, VC_SMALL_SCAN_MAX);
}

/* The pair counts' last slot before the query: the CUB scan reads it (as
 * 0), the one-block scan does not. */
static voxconv_status_t vc_clear_count_tail(voxconv_handle_t *h,
                                            long long *counts, int64_t n_blocks,
                                            int K) {
  if (vc_scan_small(h, n_blocks, K))
    return VOXCONV_STATUS_SUCCESS;
  VC_CUDA_TRY(h, cudaMemsetAsync(counts + (int64_t)K * n_blocks, 0,
                                 sizeof(long long), vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

/* counts[K*n_blocks + 1] -> exclusive prefix in place, and
 * pair_offsets[K+1] (device) from it: one block when small. */
static voxconv_status_t vc_scan_counts(VcWorkspace &ws, voxconv_handle_t *h,
                                       long long *counts, int64_t n_blocks,
                                       int K, long long *pair_offsets) {
  const int64_t n = (int64_t)K * n_blocks + 1;
  if (vc_scan_small(h, n_blocks, K)) {
    vc_small_scan_counts_kernel<<<1, VC_SMALL_THREADS, 0, vc_cuda_stream(h)>>>(
        counts, n, n_blocks, K, pair_offsets);
    VC_CUDA_LAUNCH_CHECK(h, "vc_small_scan_counts_kernel");
    return VOXCONV_STATUS_SUCCESS;
  }
  size_t tmp_bytes = 0;
  VC_CUDA_TRY(h, cub::DeviceScan::ExclusiveSum(NULL, tmp_bytes, counts, counts,
                                               n, vc_cuda_stream(h)));
  unsigned char *tmp = NULL;
  VC_CHECK(ws.get<unsigned char>((int64_t)tmp_bytes, &tmp, "CUB scan workspace"));
  VC_CUDA_TRY(h, cub::DeviceScan::ExclusiveSum(tmp, tmp_bytes, counts, counts,
                                               n, vc_cuda_stream(h)));
  vc_pair_offsets_kernel<<<1, 256, 0, vc_cuda_stream(h)>>>(counts, n_blocks, K,
                                                          pair_offsets);
  VC_CUDA_LAUNCH_CHECK(h, "vc_pair_offsets_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* Sorted unique keys of keys[n] into uniq (n_unique on the device), by
 * the keys' bits [0, end_bit): the bits above must be 0, except in the
 * all-ones "no key" of a row the build rejects (its place in the order
 * does not matter then: the build fails). The input keys are consumed
 * (sorted in a scratch copy). */
template <typename KeyT>
static voxconv_status_t vc_sort_unique(VcWorkspace &ws, voxconv_handle_t *h,
                                       const KeyT *keys, int64_t n, KeyT *uniq,
                                       long long *n_unique,
                                       int end_bit = 8 * (int)sizeof(KeyT)) {
  KeyT *sorted = NULL;
  VC_CHECK(ws.get<KeyT>(n, &sorted, "sorted output keys"));
  size_t sort_bytes = 0, uniq_bytes = 0;
  VC_CUDA_TRY(h, cub::DeviceRadixSort::SortKeys(NULL, sort_bytes, keys, sorted,
                                                n, 0, end_bit,
                                                vc_cuda_stream(h)));
  VC_CUDA_TRY(h, cub::DeviceSelect::Unique(NULL, uniq_bytes, sorted, uniq,
                                           n_unique, n, vc_cuda_stream(h)));
  const size_t tmp_bytes = sort_bytes > uniq_bytes ? sort_bytes : uniq_bytes;
  unsigned char *tmp = NULL;
  VC_CHECK(ws.get<unsigned char>((int64_t)tmp_bytes, &tmp, "CUB sort workspace"));
  size_t b = tmp_bytes;
  VC_CUDA_TRY(h, cub::DeviceRadixSort::SortKeys(tmp, b, keys, sorted, n, 0,
                                                end_bit, vc_cuda_stream(h)));
  b = tmp_bytes;
  VC_CUDA_TRY(h, cub::DeviceSelect::Unique(tmp, b, sorted, uniq, n_unique, n,
                                           vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

/* Sorts keys[n] (distinct; n known on the host). The result is in keys or
 * in a workspace buffer of the same length: *sorted says which. */
static voxconv_status_t vc_sort_keys(VcWorkspace &ws, voxconv_handle_t *h,
                                     unsigned long long *keys, int64_t n,
                                     unsigned long long **sorted) {
  *sorted = keys;
  if (n < 2)
    return VOXCONV_STATUS_SUCCESS;
  unsigned long long *alt = NULL;
  VC_CHECK(ws.get<unsigned long long>(n, &alt, "sorted output keys"));
  cub::DoubleBuffer<unsigned long long> db(keys, alt);
  size_t tmp_bytes = 0;
  VC_CUDA_TRY(h, cub::DeviceRadixSort::SortKeys(NULL, tmp_bytes, db, n, 0, 64,
                                                vc_cuda_stream(h)));
  unsigned char *tmp = NULL;
  VC_CHECK(
      ws.get<unsigned char>((int64_t)tmp_bytes, &tmp, "CUB sort workspace"));
  VC_CUDA_TRY(h, cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, db, n, 0, 64,
                                                vc_cuda_stream(h)));
  *sorted = db.Current();
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t vc_write_pairs(voxconv_handle_t *h, const int32_t *nbr,
                                       int64_t n, int K, const long long *scanned,
                                       int64_t n_blocks, int32_t *in_rows,
                                       int32_t *out_rows,
                                       const long long *n_dev = NULL) {
  const int64_t tiles = vc_ceil_div<int64_t>(n, 32);
  if (tiles == 0)
    return VOXCONV_STATUS_SUCCESS;
  const int warps = vc_tile_warps(K);
  const int64_t blocks64 = vc_ceil_div<int64_t>(tiles, warps);
  const unsigned blocks =
      blocks64 > (int64_t)INT32_MAX ? (unsigned)INT32_MAX : (unsigned)blocks64;
  const size_t smem = (size_t)warps * 32 * (K | 1) * sizeof(int32_t);
  vc_write_pairs_kernel<<<blocks, warps * 32, smem, vc_cuda_stream(h)>>>(
      nbr, n, n_dev, K, scanned, n_blocks, in_rows, out_rows);
  VC_CUDA_LAUNCH_CHECK(h, "vc_write_pairs_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t vc_unpack_keys(voxconv_handle_t *h,
                                       const unsigned long long *keys, int64_t n,
                                       int32_t *coords,
                                       const long long *n_dev = NULL) {
  if (n == 0)
    return VOXCONV_STATUS_SUCCESS;
  vc_unpack_keys_kernel<<<vc_grid_rows(h, n), kBlock, 0, vc_cuda_stream(h)>>>(
      keys, n, n_dev, coords);
  VC_CUDA_LAUNCH_CHECK(h, "vc_unpack_keys_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* The pinned status block of the handle (grown on first use). */
static voxconv_status_t vc_host_status(voxconv_handle_t *h, VcKmapStatus **out) {
  vc_cuda_state_t *s = vc_cuda_state(h);
  if (!s->host_status) {
    VC_CUDA_TRY(h, cudaMallocHost(&s->host_status, sizeof(VcKmapStatus)));
    s->host_status_bytes = sizeof(VcKmapStatus);
  }
  *out = (VcKmapStatus *)s->host_status;
  return VOXCONV_STATUS_SUCCESS;
}

/* THE synchronisation of a build: status header + pair_offsets[0..K]. */
static voxconv_status_t vc_read_status(voxconv_handle_t *h,
                                       const VcKmapStatus *dev, int K,
                                       VcKmapStatus **host) {
  VC_CHECK(vc_host_status(h, host));
  const size_t bytes =
      offsetof(VcKmapStatus, pair_offsets) + (size_t)(K + 1) * sizeof(long long);
  VC_CUDA_TRY(h, cudaMemcpyAsync(*host, dev, bytes, cudaMemcpyDeviceToHost,
                                 vc_cuda_stream(h)));
  VC_CUDA_TRY(h, cudaStreamSynchronize(vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- error reports (failure paths only: these may synchronise again) ---- */
static voxconv_status_t vc_copy_row(voxconv_handle_t *h, const int32_t *coords,
                                    int64_t row, int32_t r[4]) {
  VC_CUDA_TRY(h, cudaMemcpyAsync(r, coords + 4 * row, 4 * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, vc_cuda_stream(h)));
  VC_CUDA_TRY(h, cudaStreamSynchronize(vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t vc_report_range(voxconv_handle_t *h, const char *func,
                                        const char *which, const int32_t *coords,
                                        int64_t row) {
  int32_t r[4];
  VC_CHECK(vc_copy_row(h, coords, row, r));
  if (r[0] < 0 || r[0] > VOXCONV_BATCH_MAX)
    return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                   "%s: %s row %lld: batch=%d outside 0..%d", func, which,
                   (long long)row, (int)r[0], VOXCONV_BATCH_MAX);
  for (int f = 1; f < 4; f++)
    if (r[f] < VOXCONV_COORD_MIN || r[f] > VOXCONV_COORD_MAX)
      return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                     "%s: %s row %lld: %s=%d outside ±%d", func, which,
                     (long long)row, vc_field_names[f], (int)r[f],
                     VOXCONV_COORD_MAX);
  return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                 "%s: %s row %lld was flagged out of range but reads back as "
                 "(%d,%d,%d,%d)",
                 func, which, (long long)row, r[0], r[1], r[2], r[3]);
}

static voxconv_status_t vc_report_dup(voxconv_handle_t *h, const char *func,
                                      const char *which, const int32_t *coords,
                                      const unsigned long long *keys,
                                      const VcGpuHash &t, int64_t row) {
  int32_t r[4];
  VC_CHECK(vc_copy_row(h, coords, row, r));
  VcWorkspace ws(h);
  int32_t *d_prev = NULL;
  VC_CHECK(ws.get<int32_t>(1, &d_prev, "duplicate report"));
  vc_hash_find_one_kernel<<<1, 1, 0, vc_cuda_stream(h)>>>(t, keys, row, d_prev);
  VC_CUDA_LAUNCH_CHECK(h, "vc_hash_find_one_kernel");
  int32_t prev = -1;
  VC_CUDA_TRY(h, cudaMemcpyAsync(&prev, d_prev, sizeof prev,
                                 cudaMemcpyDeviceToHost, vc_cuda_stream(h)));
  VC_CUDA_TRY(h, cudaStreamSynchronize(vc_cuda_stream(h)));
  return vc_fail(h, VOXCONV_STATUS_DUPLICATE_COORDS,
                 "%s: %s rows %d and %lld are both (b,x,y,z) = "
                 "(%d,%d,%d,%d); merge them first "
                 "(voxconv_merge_duplicates)",
                 func, which, (int)prev, (long long)row, (int)r[0], (int)r[1],
                 (int)r[2], (int)r[3]);
}

static voxconv_status_t vc_report_generative(voxconv_handle_t *h,
                                             const voxconv_kmap_t *m,
                                             const int32_t *coords,
                                             unsigned long long flat) {
  const int64_t i = (int64_t)(flat / (unsigned long long)m->kvol);
  const int k = (int)(flat % (unsigned long long)m->kvol);
  const char *mode =
      m->desc.mode == VOXCONV_KMAP_GENERATIVE ? "GENERATIVE" : "EXPANDING";
  int32_t r[4], o[3];
  VC_CHECK(vc_copy_row(h, coords, i, r));
  int bad = -1;
  int64_t v = 0;
  if (vc_kmap_reach(m, r, k, o, &bad, &v) < 0)
    return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                   "voxconv_kmap_build: %s output of in row %lld "
                   "(%d,%d,%d,%d) at offset %d: %s=%lld outside ±%d",
                   mode, (long long)i, (int)r[0], (int)r[1], (int)r[2],
                   (int)r[3], k, vc_field_names[bad + 1], (long long)v,
                   VOXCONV_COORD_MAX);
  return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                 "voxconv_kmap_build: %s cell of in row %lld offset %d "
                 "flagged out of range but is not",
                 mode, (long long)i, k);
}

/* The in -> out neighbour query filling m->nbr_in and its row masks (the
 * second direction of a build: no counts, no duplicate check). */
static voxconv_status_t vc_query_in_rows(voxconv_handle_t *h, int dir,
                                         const unsigned long long *in_keys,
                                         int64_t n_in, const VcGpuHash &out_hash,
                                         voxconv_kmap_t *m, const VcGeom &g) {
  VcQuery q;
  memset(&q, 0, sizeof q);
  q.center_k = -1;
  q.src_keys = in_keys;
  q.n_src = n_in;
  q.dst = out_hash;
  q.nbr = m->nbr_in;
  q.mask = m->row_mask_in;
  return vc_query(h, dir, q, g);
}

/* ---- one attempt per mode ------------------------------------------------ */
/* Odd kernel with centred offsets: the submanifold mirror and fused
 * duplicate check apply (vc_kmap_offsets_symmetric). */
static int vc_offsets_symmetric(const voxconv_kmap_t *m) {
  return vc_kmap_offsets_symmetric(&m->desc);
}

/* STRIDED with kernel = stride and offsets 0 .. s-1 on every axis, in
 * the (x, y, z) index order the direct kernel computes: every input row
 * lies in exactly one output's window (vc_strided_direct_kernel). */
static int vc_strided_direct(const voxconv_kmap_t *m) {
  const voxconv_kmap_desc_t &d = m->desc;
  if (d.mode != VOXCONV_KMAP_STRIDED)
    return 0;
  for (int a = 0; a < 3; a++)
    if (d.kernel_size[a] != d.stride[a] || d.dilation[a] != 1)
      return 0;
  /* offsets j*1 - 0: the taps themselves, in the map's order (the kernel
   * numbers them with vc_kidx_of) */
  const int32_t K = d.kernel_size[0] * d.kernel_size[1] * d.kernel_size[2];
  for (int32_t k = 0; k < K; k++) {
    int32_t j[3];
    vc_kidx_taps(d.offset_order, d.kernel_size, k, j);
    if (m->offsets[k][0] != j[0] || m->offsets[k][1] != j[1] ||
        m->offsets[k][2] != j[2])
      return 0;
  }
  return K == m->kvol;
}

static voxconv_status_t vc_alloc_pair_lists(voxconv_handle_t *h,
                                            voxconv_kmap_t *m) {
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, m->n_pairs, &m->in_rows,
                                    "kernel-map in_rows"));
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, m->n_pairs, &m->out_rows,
                                    "kernel-map out_rows"));
  return VOXCONV_STATUS_SUCCESS;
}

/* The end of every build's step 6: the pair lists (in_rows / out_rows)
 * are written on first need (vc_cuda_kmap_pairs), not here. Most
 * consumers never read them -- mask_gemm's forward and dgrad, the int8
 * ops and pooling use the neighbour tables -- while writing them cost ~75
 * us of GPU time at workload A's level 0 and an asynchronous build's
 * n_in * K bound (197 MB there) of memory (docs/perf-notes.md item 129).
 * The map keeps the scanned counts they are written from; `rows` rows of
 * nbr_out (n_dev: a deferred STRIDED build's device count) are covered.
 * VOXCONV_KMAP_LEAN=0 writes them here, as before. */
static voxconv_status_t vc_pairs_at_build(VcWorkspace &ws, voxconv_handle_t *h,
                                          voxconv_kmap_t *m, long long *counts,
                                          int64_t nb, int64_t rows,
                                          const long long *n_dev = NULL) {
  if (vc_cuda_state(h)->kmap_lean_off) {
    VC_CHECK(vc_alloc_pair_lists(h, m));
    return vc_write_pairs(h, m->nbr_out, rows, m->kvol, counts, nb,
                          m->in_rows, m->out_rows, n_dev);
  }
  VcKmapPriv *p = (VcKmapPriv *)m->backend_priv;
  vc_free(h, p->pair_scan); /* an earlier attempt's, if any */
  ws.release(counts);
  p->pair_scan = counts;
  p->pair_nb = nb;
  p->pair_rows = rows;
  p->pair_n_dev = n_dev;
  return VOXCONV_STATUS_SUCCESS;
}

/* The lazy write: the lists get the map's current n_pairs (an
 * asynchronous map's bound while it is pending) and are written on h's
 * stream. (Inside a capture the caller writes only a map built in that
 * capture, whose lists then exist in the graph's replays like the rest of
 * it; a map built before the capture would get lists no eager call could
 * read.) */
static voxconv_status_t vc_pairs_write(voxconv_handle_t *h, voxconv_kmap_t *m,
                                       VcKmapPriv *p) {
  voxconv_status_t st = vc_alloc_pair_lists(h, m);
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_write_pairs(h, m->nbr_out, p->pair_rows, m->kvol, p->pair_scan,
                        p->pair_nb, m->in_rows, m->out_rows, p->pair_n_dev);
  if (st != VOXCONV_STATUS_SUCCESS) { /* a later need tries again */
    vc_free(h, m->in_rows);
    vc_free(h, m->out_rows);
    m->in_rows = m->out_rows = NULL;
  }
  return st;
}

/* vc_cuda.h. */
extern "C" voxconv_status_t vc_cuda_kmap_pairs(voxconv_handle_t *h,
                                               const voxconv_kmap_t *km,
                                               const char *func) {
  voxconv_kmap_t *m = (voxconv_kmap_t *)km;
  VcKmapPriv *p = (VcKmapPriv *)m->backend_priv;
  if (!p || !p->pair_scan)
    return VOXCONV_STATUS_SUCCESS; /* written by the build */
  VC_CUDA_DEVICE_GUARD(h);
  int keep = 0;
  VC_CHECK(vc_cuda_kmap_lazy_lock(h, m, func, &keep));
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  const bool write = !m->in_rows; /* a failed write leaves it NULL */
  if (write && !keep)
    st = vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                 "%s: this map's pair lists are written on first need, and "
                 "that is inside a CUDA graph capture while the map was "
                 "built before it; write them before the capture with "
                 "voxconv_kmap_get_pairs(h, map, NULL, NULL, NULL), or run "
                 "the op once outside the capture",
                 func);
  else if (write)
    st = vc_pairs_write(h, m, p);
  const voxconv_status_t su =
      vc_cuda_kmap_lazy_unlock(h, m, write && st == VOXCONV_STATUS_SUCCESS);
  return st != VOXCONV_STATUS_SUCCESS ? st : su;
}

/* A row-mask array of n rows for the query to fill (maps with kvol <= 32;
 * NULL otherwise, and consumers fall back to the neighbour tables). */
static voxconv_status_t vc_alloc_row_mask(voxconv_handle_t *h,
                                          const voxconv_kmap_t *m, int64_t n,
                                          uint32_t **mask, const char *what) {
  *mask = NULL;
  if (m->kvol > 32)
    return VOXCONV_STATUS_SUCCESS;
  return vc_cuda_alloc_n<uint32_t>(h, n > 0 ? n : 1, mask, what);
}

static voxconv_status_t vc_host_pair_offsets(voxconv_handle_t *h,
                                             voxconv_kmap_t *m) {
  return vc_host_alloc(h, (size_t)(m->kvol + 1) * sizeof(int64_t),
                       (void **)&m->pair_offsets, "kernel-map pair offsets");
}

/* Reports the first error of the status block in the CPU builder's order:
 * input range, input duplicates, output range, output duplicates,
 * generated range. */
static voxconv_status_t vc_check_status(VcBuild &b, const VcKmapStatus *st,
                                        const unsigned long long *in_keys,
                                        const VcGpuHash &in_hash,
                                        const unsigned long long *out_keys,
                                        const VcGpuHash &out_hash) {
  static const char *const func = "voxconv_kmap_build";
  voxconv_handle_t *h = b.h;
  if (st->bad_in_row != VC_NO_ROW)
    return vc_report_range(h, func, "in coords", b.in->data,
                           (int64_t)st->bad_in_row);
  if (st->dup_in_row != VC_NO_ROW)
    return vc_report_dup(h, func, "in coords", b.in->data, in_keys, in_hash,
                         (int64_t)st->dup_in_row);
  if (st->bad_out_row != VC_NO_ROW)
    return vc_report_range(h, func, "out coords", b.out->data,
                           (int64_t)st->bad_out_row);
  if (st->dup_out_row != VC_NO_ROW)
    return vc_report_dup(h, func, "out coords", b.out->data, out_keys, out_hash,
                         (int64_t)st->dup_out_row);
  if (st->gen_bad != VC_NO_ROW)
    return vc_report_generative(h, b.m, b.in->data, st->gen_bad);
  if (st->bounds_bad_row != VC_NO_ROW) {
    int32_t r[4];
    char msg[VC_ERROR_MAX];
    VC_CHECK(vc_copy_row(h, b.in->data, (int64_t)st->bounds_bad_row, r));
    const voxconv_status_t e = vc_bounds_violation(
        msg, sizeof msg, st->bounds_bad_row, r, &b.m->in_bounds);
    return vc_fail(h, e, "%s", msg);
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* STRIDED and EXPANDING maps keep a copy of their input coordinates: the
 * outputs of their inverse (voxconv_kmap_inverse). */
static voxconv_status_t vc_keep_in_coords(voxconv_handle_t *h,
                                          voxconv_kmap_t *m,
                                          const voxconv_coords_t *in) {
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, in->n * 4, &m->in_coords,
                                    "kernel-map input coords"));
  if (in->n > 0)
    VC_CUDA_TRY(h, cudaMemcpyAsync(m->in_coords, in->data,
                                   (size_t)in->n * 4 * sizeof(int32_t),
                                   cudaMemcpyDeviceToDevice, vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

/* The end of an asynchronous build (SUBMANIFOLD, or STRIDED through
 * voxconv_kmap_build_async): everything the sync would have waited for
 * stays on the device. SUBMANIFOLD outputs are the inputs (n_out known);
 * a deferred STRIDED map's n_out stays -1 until the verdict arrives, and
 * its output arrays (coordinates, nbr_out, row masks: the map's own, not
 * copies) have room for n_in outputs, the most unique floor(c / s) can
 * give. The pair lists, when written (on first need), get room for every
 * possible pair (n_in * K for SUBMANIFOLD, as spconv's indice pairs do;
 * n_in * S for STRIDED, S the taps per input that can hit the output
 * lattice) if the exact length is not yet on the host; the verdict
 * (checks, counts, n_out, fingerprints) is copied into a pinned slot
 * behind an event for vc_cuda_kmap_poll. Nothing here waits. */
static voxconv_status_t vc_finish_async(VcBuild &b, VcWorkspace &ws,
                                        VcKmapStatus *d_st,
                                        const unsigned long long *in_keys,
                                        const VcGpuHash &in_hash,
                                        long long *counts, int64_t nb,
                                        const unsigned long long *out_keys) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  VcKmapPriv *priv = (VcKmapPriv *)m->backend_priv;
  const cudaStream_t stream = vc_cuda_stream(h);
  const int K = m->kvol;
  const int64_t n = b.in->n;
  vc_status_detail_kernel<<<1, 32, 0, stream>>>(d_st, b.in->data, in_keys,
                                                in_hash);
  VC_CUDA_LAUNCH_CHECK(h, "vc_status_detail_kernel");
  /* A build the worker issues had these set by the caller's thread, which
   * may read them now (voxconv_kmap_get_info). */
  if (!b.preset)
    vc_async_shape(m);
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n * 4, &m->out_coords,
                                    "kernel-map output coords"));
  const int deferred = m->desc.mode == VOXCONV_KMAP_STRIDED;
  if (deferred) {
    VC_CHECK(vc_unpack_keys(h, out_keys, n, m->out_coords, &d_st->n_out));
    VC_CHECK(vc_keep_in_coords(h, m, b.in));
  } else {
    if (n > 0)
      VC_CUDA_TRY(h, cudaMemcpyAsync(m->out_coords, b.in->data,
                                     (size_t)n * 4 * sizeof(int32_t),
                                     cudaMemcpyDeviceToDevice, stream));
  }
  VC_CHECK(vc_pairs_at_build(ws, h, m, counts, nb, n,
                             deferred ? &d_st->n_out : NULL));
  priv->h_status = vc_pinned_status_get(h);
  if (!priv->h_status)
    return VOXCONV_STATUS_ALLOC_FAILED; /* message set by the pool */
  VC_CUDA_TRY(h, cudaMemcpyAsync(priv->h_status, d_st, vc_kmap_status_bytes(K),
                                 cudaMemcpyDeviceToHost, stream));
  if (vc_stream_capturing(h)) {
    priv->captured = 1;
    return VOXCONV_STATUS_SUCCESS;
  }
  VC_CUDA_TRY(h, cudaEventCreateWithFlags(&priv->ready, cudaEventDisableTiming));
  VC_CUDA_TRY(h, cudaEventRecord(priv->ready, stream));
  priv->ready_is_build = 1;
  return VOXCONV_STATUS_SUCCESS;
}

/* EXPANDING: the fingerprint of the sorted output keys (the inverse map's
 * in_fingerprint). The keys are sorted after the build's one sync, so the
 * value cannot travel with it, and a second wait would stall the host on
 * the rest of the build. Instead the kernel writes it into the status
 * block, a copy queued behind it lands in a pinned slot, and an event
 * marks the copy; voxconv_kmap_inverse, its only reader, takes it from
 * there (vc_out_fingerprint: the event is long past by then, as a rule).
 * Until then m->out_fingerprint reads 0. */
static voxconv_status_t vc_defer_out_fingerprint(VcBuild &b, VcKmapStatus *d_st,
                                                 const unsigned long long *keys,
                                                 int64_t n) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  const cudaStream_t stream = vc_cuda_stream(h);
  m->out_fingerprint = 0; /* the final value when there are no rows */
  if (n == 0)
    return VOXCONV_STATUS_SUCCESS;
  vc_keys_fingerprint_kernel<<<vc_grid_rows(h, n), kBlock, 0, stream>>>(
      keys, n, &d_st->n_out, &d_st->out_fingerprint);
  VC_CUDA_LAUNCH_CHECK(h, "vc_keys_fingerprint_kernel");
  VcKmapPriv *priv = (VcKmapPriv *)m->backend_priv;
  /* The event first: a slot is released with it (vc_cuda_kmap_free_priv). */
  VC_CUDA_TRY(h,
              cudaEventCreateWithFlags(&priv->ready, cudaEventDisableTiming));
  priv->h_status = vc_pinned_status_get(h);
  if (!priv->h_status)
    return VOXCONV_STATUS_ALLOC_FAILED; /* message set by the pool */
  VC_CUDA_TRY(h, cudaMemcpyAsync(&priv->h_status->out_fingerprint,
                                 &d_st->out_fingerprint,
                                 sizeof d_st->out_fingerprint,
                                 cudaMemcpyDeviceToHost, stream));
  VC_CUDA_TRY(h, cudaEventRecord(priv->ready, stream));
  return VOXCONV_STATUS_SUCCESS;
}

/* Step 3 for GENERATIVE and EXPANDING (see the file comment): the output
 * set and each offset's pair count, then the sync, then steps 4-6 with
 * exact sizes. */
static voxconv_status_t vc_attempt_derived(VcBuild &b, VcWorkspace &ws,
                                           VcKmapStatus *d_st,
                                           const unsigned long long *in_keys,
                                           const VcGpuHash &in_hash) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  const cudaStream_t stream = vc_cuda_stream(h);
  const int K = m->kvol;
  const int64_t n_in = b.in->n;
  const voxconv_kmap_mode_t mode = m->desc.mode;
  VcGpuHash out_hash = {NULL, NULL, 0};
  VcKmapStatus *hs = NULL;
  VcQuery q;
  memset(&q, 0, sizeof q);
  q.center_k = -1;
  /* 3: the output set and the pair count of each offset, then the sync
   * (n_out and the counts). GENERATIVE: candidates for every (i, k),
   * sort, unique. EXPANDING: compact candidates into a key-only set, the
   * distinct keys appended unsorted (vc_expand_keys_kernel); only those
   * are sorted, after the sync. */
  const int expanding = mode == VOXCONV_KMAP_EXPANDING;
  unsigned long long *uniq = NULL; /* sorted output keys, n_out of them */
  VC_CUDA_TRY(h, cudaMemsetAsync(d_st->pair_offsets, 0,
                                 (size_t)(K + 1) * sizeof(long long), stream));
  if (expanding) {
    const int3 slots = vc_expand_slots(b.g);
    const int64_t n_cand = n_in * (int64_t)(slots.x * slots.y * slots.z);
    /* Every appended key holds a slot of its own, and there are at most
     * n_cand distinct candidates. */
    const int64_t uniq_cap =
        (uint64_t)n_cand < b.cap_keys ? n_cand : (int64_t)b.cap_keys;
    if (n_cand > 0) {
      VcGpuHash set = {NULL, NULL, b.cap_keys - 1};
      VC_CHECK(ws.get<unsigned long long>((int64_t)b.cap_keys, &set.keys,
                                          "output key set"));
      VC_CHECK(
          ws.get<unsigned long long>(uniq_cap, &uniq, "reached output keys"));
      VC_CUDA_TRY(h, cudaMemsetAsync(set.keys, 0xFF,
                                     (size_t)b.cap_keys * sizeof *set.keys,
                                     stream)); /* VC_KEY_EMPTY */
      vc_expand_keys_kernel<<<vc_grid_rows(h, n_cand), kBlock,
                              (size_t)K * sizeof(unsigned int), stream>>>(
          in_keys, n_in, b.g, slots, set, uniq, uniq_cap,
          (unsigned long long *)&d_st->n_out, &d_st->overflow_out,
          &d_st->gen_bad, d_st->pair_offsets);
      VC_CUDA_LAUNCH_CHECK(h, "vc_expand_keys_kernel");
    }
  } else {
    const int64_t n_cand = n_in * K;
    unsigned long long *cand = NULL;
    VC_CHECK(
        ws.get<unsigned long long>(n_cand, &cand, "candidate cell keys"));
    VC_CHECK(
        ws.get<unsigned long long>(n_cand, &uniq, "reached output keys"));
    if (n_cand > 0) {
      const size_t smem = (size_t)4 * K * sizeof(int32_t);
      vc_reach_keys_kernel<<<vc_grid_rows(h, n_cand), kBlock, smem,
                             stream>>>(in_keys, n_in, b.g, cand,
                                       &d_st->gen_bad, d_st->pair_offsets);
      VC_CUDA_LAUNCH_CHECK(h, "vc_reach_keys_kernel");
      VC_CHECK(vc_sort_unique(ws, h, cand, n_cand, uniq, &d_st->n_out));
      vc_drop_empty_tail_kernel<<<1, 32, 0, stream>>>(uniq, &d_st->n_out);
      VC_CUDA_LAUNCH_CHECK(h, "vc_drop_empty_tail_kernel");
    }
  }
  VC_CHECK(vc_read_status(h, d_st, K, &hs));
  /* EXPANDING's overflow_out is its output-key set (its output hash is
   * built after the sync, sized from n_out). */
  if (hs->overflow_in || (expanding && hs->overflow_out)) {
    b.overflowed = 1;
    b.keys_overflowed = expanding && hs->overflow_out;
    return VOXCONV_STATUS_SUCCESS;
  }
  VC_CHECK(vc_check_status(b, hs, in_keys, in_hash, NULL, out_hash));
  m->in_fingerprint = hs->fingerprint;
  if (!expanding)
    m->out_fingerprint = hs->out_fingerprint;
  const int64_t n_out = hs->n_out;
  if (n_out > INT32_MAX)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_kmap_build: %lld output rows exceed the int32 "
                   "row index",
                   (long long)n_out);
  m->n_out = n_out;
  VC_CHECK(vc_host_pair_offsets(h, m));
  int64_t total = 0;
  for (int k = 0; k < K; k++) {
    m->pair_offsets[k] = total;
    total += hs->pair_offsets[k];
  }
  m->pair_offsets[K] = total;
  m->n_pairs = total;
  if (expanding) {
    /* Exactly the n_out distinct keys, then their fingerprint, which the
     * host learns later (vc_defer_out_fingerprint). */
    VC_CHECK(vc_sort_keys(ws, h, uniq, n_out, &uniq));
    VC_CHECK(vc_defer_out_fingerprint(b, d_st, uniq, n_out));
  }

  /* 4-6 with exact sizes; the output hash is sized from n_out, so it
   * cannot overflow (no later sync needed to find out). */
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_out * 4, &m->out_coords,
                                    "kernel-map output coords"));
  VC_CHECK(vc_unpack_keys(h, uniq, n_out, m->out_coords));
  if (expanding)
    VC_CHECK(vc_keep_in_coords(h, m, b.in));
  VC_CHECK(vc_make_hash(ws, h,
                        vc_pow2_at_least(VC_HASH_SLOTS_PER_KEY *
                                             (uint64_t)n_out + 2),
                        &out_hash, "output coordinate hash"));
  if (n_out > 0) {
    vc_insert_rows_kernel<<<vc_grid_rows(h, n_out), kBlock, 0, stream>>>(
        uniq, n_out, NULL, out_hash, &d_st->overflow_out, NULL);
    VC_CUDA_LAUNCH_CHECK(h, "vc_insert_rows_kernel");
  }
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_out * K, &m->nbr_out,
                                    "kernel-map nbr_out"));
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_in * K, &m->nbr_in,
                                    "kernel-map nbr_in"));
  const int64_t nb = vc_ceil_div<int64_t>(n_out, VC_ROWS_PER_BLOCK);
  long long *counts = NULL;
  VC_CHECK(ws.get<long long>((int64_t)K * nb + 1, &counts, "pair counts"));
  VC_CHECK(vc_clear_count_tail(h, counts, nb, K));
  q.src_keys = uniq;
  q.n_src = n_out;
  q.dst = in_hash;
  q.nbr = m->nbr_out;
  VC_CHECK(vc_alloc_row_mask(h, m, n_out, &m->row_mask_out,
                             "kernel-map row_mask_out"));
  q.mask = m->row_mask_out;
  q.counts = counts;
  q.n_blocks = nb;
  /* out -> in: GENERATIVE (o - off)/s, EXPANDING s*o + off; in -> out
   * the other way round. */
  VC_CHECK(vc_query(h, expanding ? VC_Q_MULADD : VC_Q_SUBDIV, q, b.g));
  VC_CHECK(vc_alloc_row_mask(h, m, n_in, &m->row_mask_in,
                             "kernel-map row_mask_in"));
  VC_CHECK(vc_query_in_rows(h, expanding ? VC_Q_SUBDIV : VC_Q_MULADD,
                            in_keys, n_in, out_hash, m, b.g));
  VC_CHECK(vc_scan_counts(ws, h, counts, nb, K, d_st->pair_offsets));
  return vc_pairs_at_build(ws, h, m, counts, nb, n_out);
}

/* The compact keys of a STRIDED build told its inputs' bounds (see
 * VcCompact): the box of strided cells those bounds allow, and the bits
 * each field needs. Full keys without bounds, or when the box needs 64
 * bits (then "no key" could not be told from a key). */
static VcCompact vc_compact_plan(const voxconv_kmap_t *m) {
  VcCompact cp;
  memset(&cp, 0, sizeof cp);
  if (!m->has_in_bounds)
    return cp;
  int shift = 0;
  for (int f = 3; f >= 0; f--) { /* z lowest, batch highest: the full key's order */
    const int32_t s = f == 0 ? 1 : m->desc.stride[f - 1];
    const int32_t lo = vc_floor_div(m->in_bounds.lo[f], s);
    const int32_t hi = vc_floor_div(m->in_bounds.hi[f], s);
    int w = 0;
    while (w < 32 && ((uint64_t)(hi - lo) >> w) != 0)
      w++;
    cp.in_lo[f] = m->in_bounds.lo[f];
    cp.in_hi[f] = m->in_bounds.hi[f];
    cp.lo[f] = lo;
    cp.width[f] = w;
    cp.shift[f] = shift;
    shift += w;
  }
  cp.bits = shift;
  cp.compact = cp.bits < 64;
  return cp;
}

/* A STRIDED build's output keys: the sorted unique strided cells of the
 * inputs, as full keys in `uniq` (n_out on the device), their fingerprint
 * and bounds in the status. KeyT: 32-bit compact keys, or 64-bit ones
 * (compact or full). */
template <typename KeyT>
static voxconv_status_t vc_strided_unique(VcBuild &b, VcWorkspace &ws,
                                          VcKmapStatus *d_st,
                                          const unsigned long long *in_keys,
                                          const VcCompact &cp,
                                          unsigned long long *uniq) {
  voxconv_handle_t *h = b.h;
  const cudaStream_t stream = vc_cuda_stream(h);
  const int64_t n = b.in->n;
  /* At least one bit: a box of one cell still sorts (trivially). */
  const int end_bit = cp.compact ? (cp.bits > 0 ? cp.bits : 1)
                                 : 8 * (int)sizeof(KeyT);
  if (sizeof(KeyT) == 4 && vc_small(h, n, VC_SMALL_SORT_MAX)) {
    vc_small_strided_unique_kernel<<<1, VC_SMALL_THREADS, 0, stream>>>(
        in_keys, n, make_int3(b.g.s[0], b.g.s[1], b.g.s[2]), cp, end_bit, uniq,
        d_st);
    VC_CUDA_LAUNCH_CHECK(h, "vc_small_strided_unique_kernel");
    return VOXCONV_STATUS_SUCCESS;
  }
  KeyT *cand = NULL, *sorted_uniq = NULL;
  VC_CHECK(ws.get<KeyT>(n, &cand, "strided output keys"));
  /* 64-bit keys need no conversion: the sort writes the map's keys. */
  const bool convert = sizeof(KeyT) < sizeof(unsigned long long) || cp.compact;
  if (convert)
    VC_CHECK(ws.get<KeyT>(n, &sorted_uniq, "strided compact unique keys"));
  else
    sorted_uniq = (KeyT *)uniq;
  vc_strided_keys_kernel<KeyT><<<vc_grid_rows(h, n), kBlock, 0, stream>>>(
      in_keys, n, make_int3(b.g.s[0], b.g.s[1], b.g.s[2]), cp, cand,
      &d_st->bounds_bad_row);
  VC_CUDA_LAUNCH_CHECK(h, "vc_strided_keys_kernel");
  VC_CHECK(vc_sort_unique<KeyT>(ws, h, cand, n, sorted_uniq, &d_st->n_out,
                                end_bit));
  vc_strided_out_kernel<KeyT><<<vc_grid_rows(h, n), kBlock, 0, stream>>>(
      sorted_uniq, n, &d_st->n_out, cp, uniq, d_st);
  VC_CUDA_LAUNCH_CHECK(h, "vc_strided_out_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* What one attempt's steps hand each other: device arrays, most of them
 * in the attempt's workspace. */
struct VcSides {
  /* steps 1-2 */
  unsigned long long *in_keys;
  VcGpuHash in_hash;
  int fused_dup_check; /* the query checks duplicates (odd submanifold) */
  int hash_on_dup;     /* direct STRIDED: in_hash filled only on a duplicate */
  /* step 3: the outputs, known before the sync (on the host or, for
   * STRIDED, as a device count) */
  int64_t n_out_bound;
  const long long *n_out_dev;
  unsigned long long *out_keys;
  VcGpuHash out_hash;
  int32_t *nbr_out;   /* the map's array, or an upper-bound temp */
  uint32_t *mask_out; /* likewise for its row masks */
  unsigned long long *strided_uniq;
  /* step 4 */
  long long *counts; /* [K * nb + 1] */
  int64_t nb;
};

/* Steps 1-2: input keys, range checks, fingerprint, hash; the duplicate
 * check unless the query does it. */
static voxconv_status_t vc_input_side(VcBuild &b, VcWorkspace &ws,
                                      VcKmapStatus *d_st, VcSides &s) {
  voxconv_handle_t *h = b.h;
  const int64_t n_in = b.in->n;
  VC_CHECK(ws.get<unsigned long long>(n_in, &s.in_keys,
                                      "input coordinate keys"));
  /* Direct STRIDED tables need no input hash: two equal rows claim one
   * table slot, which vc_strided_direct_kernel notices (dup_hint), and
   * only then is the input hashed to name the rows (vc_neighbours). That
   * saves hashing level 0's rows a second time in workload A (clear,
   * insert, duplicate check: ~80 us; docs/perf-notes.md item 127). On
   * fewer rows that work is a few microseconds, less than the two launches
   * the lean path adds (a status launch, and three kernels queued for the
   * error path against the up-front hash's clear and check; item 128). */
  s.hash_on_dup = vc_strided_direct(b.m) && n_in >= VC_HASH_ON_DUP_MIN &&
                  !vc_cuda_state(h)->kmap_lean_off;
  VC_CHECK(vc_make_hash(ws, h, b.cap_in, &s.in_hash, "input coordinate hash",
                        d_st, s.hash_on_dup));
  VC_CHECK(vc_pack_coords(h, b.in->data, n_in, s.in_keys, s.in_hash,
                          &d_st->bad_in_row, &d_st->overflow_in,
                          &d_st->fingerprint, !s.hash_on_dup));
  /* Odd submanifold maps detect duplicates inside the neighbour query. */
  s.fused_dup_check = b.m->desc.mode == VOXCONV_KMAP_SUBMANIFOLD &&
                      vc_offsets_symmetric(b.m);
  if (!s.fused_dup_check && !s.hash_on_dup)
    VC_CHECK(vc_dup_check(h, s.in_keys, n_in, s.in_hash, &d_st->dup_in_row));
  return VOXCONV_STATUS_SUCCESS;
}

/* Step 3 for STRIDED: the sorted unique strided cells (n_out on the
 * device), their hash, and nbr_out / row masks sized for n_in outputs --
 * the map's own arrays when deferred (no copy to the exact size, which
 * would need n_out on the host), temporaries otherwise. */
static voxconv_status_t vc_strided_outputs(VcBuild &b, VcWorkspace &ws,
                                           VcKmapStatus *d_st, VcSides &s) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  const int64_t n_in = b.in->n;
  const int K = m->kvol;
  VC_CHECK(ws.get<unsigned long long>(n_in, &s.strided_uniq,
                                      "strided unique keys"));
  if (n_in > 0) {
    const VcCompact cp = vc_compact_plan(m);
    if (cp.compact && cp.bits < 32)
      VC_CHECK(vc_strided_unique<uint32_t>(b, ws, d_st, s.in_keys, cp,
                                           s.strided_uniq));
    else
      VC_CHECK(vc_strided_unique<unsigned long long>(b, ws, d_st, s.in_keys,
                                                     cp, s.strided_uniq));
  }
  s.n_out_dev = &d_st->n_out;
  s.out_keys = s.strided_uniq;
  VC_CHECK(vc_make_hash(ws, h, b.cap_out, &s.out_hash, "output coordinate hash"));
  if (n_in > 0) {
    vc_insert_rows_kernel<<<vc_grid_rows(h, n_in), kBlock, 0,
                            vc_cuda_stream(h)>>>(s.strided_uniq, n_in,
                                                 s.n_out_dev, s.out_hash,
                                                 &d_st->overflow_out, NULL);
    VC_CUDA_LAUNCH_CHECK(h, "vc_insert_rows_kernel");
  }
  if (b.async) {
    VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_in * K, &m->nbr_out,
                                      "kernel-map nbr_out"));
    s.nbr_out = m->nbr_out;
    VC_CHECK(vc_alloc_row_mask(h, m, n_in, &m->row_mask_out,
                               "kernel-map row_mask_out"));
    s.mask_out = m->row_mask_out;
  } else {
    VC_CHECK(ws.get<int32_t>(n_in * K, &s.nbr_out, "upper-bound nbr_out"));
    if (K <= 32)
      VC_CHECK(ws.get<uint32_t>(n_in > 0 ? n_in : 1, &s.mask_out,
                                "upper-bound row_mask_out"));
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* Step 3 for SUBMANIFOLD (outputs = inputs), TRANSPOSED (the given
 * outputs, checked and hashed) and STRIDED. */
static voxconv_status_t vc_output_side(VcBuild &b, VcWorkspace &ws,
                                       VcKmapStatus *d_st, VcSides &s) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  const int K = m->kvol;
  s.n_out_bound = b.in->n;
  if (m->desc.mode == VOXCONV_KMAP_STRIDED)
    return vc_strided_outputs(b, ws, d_st, s);
  if (m->desc.mode == VOXCONV_KMAP_SUBMANIFOLD) {
    s.out_keys = s.in_keys;
    s.out_hash = s.in_hash;
  } else { /* TRANSPOSED */
    s.n_out_bound = b.out->n;
    VC_CHECK(ws.get<unsigned long long>(s.n_out_bound, &s.out_keys,
                                        "output coordinate keys"));
    VC_CHECK(vc_make_hash(ws, h, b.cap_out, &s.out_hash,
                          "output coordinate hash"));
    VC_CHECK(vc_pack_coords(h, b.out->data, s.n_out_bound, s.out_keys,
                            s.out_hash, &d_st->bad_out_row,
                            &d_st->overflow_out, NULL));
    VC_CHECK(vc_dup_check(h, s.out_keys, s.n_out_bound, s.out_hash,
                          &d_st->dup_out_row));
  }
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, s.n_out_bound * K, &m->nbr_out,
                                    "kernel-map nbr_out"));
  s.nbr_out = m->nbr_out;
  VC_CHECK(vc_alloc_row_mask(h, m, s.n_out_bound, &m->row_mask_out,
                             "kernel-map row_mask_out"));
  s.mask_out = m->row_mask_out;
  return VOXCONV_STATUS_SUCCESS;
}

/* A direct STRIDED build's input hash and duplicate check, which do their
 * work only when the table write found a duplicate (d_st->dup_hint): then
 * the verdict names the rows as a build with the hash up front does. */
static voxconv_status_t vc_hash_on_dup(voxconv_handle_t *h, const VcSides &s,
                                       int64_t n_in, VcKmapStatus *d_st) {
  const cudaStream_t stream = vc_cuda_stream(h);
  const uint64_t cap = s.in_hash.mask + 1;
  vc_hash_clear_kernel<<<vc_grid_rows(h, (int64_t)cap), kBlock, 0, stream>>>(
      s.in_hash.keys, s.in_hash.vals, cap, NULL, &d_st->dup_hint);
  VC_CUDA_LAUNCH_CHECK(h, "vc_hash_clear_kernel");
  vc_insert_rows_kernel<<<vc_grid_rows(h, n_in), kBlock, 0, stream>>>(
      s.in_keys, n_in, NULL, s.in_hash, &d_st->overflow_in, &d_st->dup_hint);
  VC_CUDA_LAUNCH_CHECK(h, "vc_insert_rows_kernel");
  vc_dup_check_kernel<<<vc_grid_rows(h, n_in), kBlock, 0, stream>>>(
      s.in_keys, n_in, s.in_hash, &d_st->dup_in_row, &d_st->dup_hint);
  VC_CUDA_LAUNCH_CHECK(h, "vc_dup_check_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* Step 4: the neighbour tables of both directions, their row masks, and
 * each (offset, row tile)'s pair count. */
static voxconv_status_t vc_neighbours(VcBuild &b, VcWorkspace &ws,
                                      VcKmapStatus *d_st, VcSides &s) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  const cudaStream_t stream = vc_cuda_stream(h);
  const int K = m->kvol;
  const int64_t n_in = b.in->n;
  const voxconv_kmap_mode_t mode = m->desc.mode;
  s.nb = vc_ceil_div<int64_t>(s.n_out_bound, VC_ROWS_PER_BLOCK);
  VC_CHECK(ws.get<long long>((int64_t)K * s.nb + 1, &s.counts, "pair counts"));
  /* Blocks past a device-side n_out still write their (zero) counts; only
   * the extra total slot needs clearing. */
  VC_CHECK(vc_clear_count_tail(h, s.counts, s.nb, K));
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_in * K, &m->nbr_in, "kernel-map nbr_in"));
  VC_CHECK(vc_alloc_row_mask(h, m, n_in, &m->row_mask_in,
                             "kernel-map row_mask_in"));
  if (vc_strided_direct(m)) {
    /* One lookup per input row (see the kernel); then the counts and masks
     * the query would have produced. */
    if (n_in > 0) {
      VC_CUDA_TRY(h, cudaMemsetAsync(s.nbr_out, 0xFF,
                                     (size_t)s.n_out_bound * K * sizeof(int32_t),
                                     stream));
      unsigned int *hint = s.hash_on_dup ? &d_st->dup_hint : NULL;
      vc_strided_direct_kernel<<<vc_grid_rows(h, n_in), kBlock, 0, stream>>>(
          s.in_keys, n_in, s.out_hash, make_int3(b.g.s[0], b.g.s[1], b.g.s[2]),
          make_int3(b.g.ks[0], b.g.ks[1], b.g.ks[2]), K, b.g.order, m->nbr_in,
          s.nbr_out, m->row_mask_in, hint);
      VC_CUDA_LAUNCH_CHECK(h, "vc_strided_direct_kernel");
      if (hint)
        VC_CHECK(vc_hash_on_dup(h, s, n_in, d_st));
      vc_nbr_counts_kernel<<<vc_grid_rows(h, s.nb * 32), kBlock, 0, stream>>>(
          s.nbr_out, s.n_out_bound, s.n_out_dev, K, s.counts, s.nb, s.mask_out);
      VC_CUDA_LAUNCH_CHECK(h, "vc_nbr_counts_kernel");
    }
    return VOXCONV_STATUS_SUCCESS;
  }
  const int mirror = mode == VOXCONV_KMAP_SUBMANIFOLD && vc_offsets_symmetric(m);
  VcQuery q;
  memset(&q, 0, sizeof q);
  q.center_k = -1;
  q.src_keys = s.out_keys;
  q.n_src = s.n_out_bound;
  q.n_dev = s.n_out_dev;
  q.dst = s.in_hash;
  q.nbr = s.nbr_out;
  q.mirror = mirror ? m->nbr_in : NULL;
  q.mask = s.mask_out;
  q.mirror_mask = mirror ? m->row_mask_in : NULL;
  q.counts = s.counts;
  q.n_blocks = s.nb;
  if (s.fused_dup_check) {
    q.center_k = (K - 1) / 2;
    q.dup_row = &d_st->dup_in_row;
  }
  /* out -> in: SUBMANIFOLD o + off, STRIDED s*o + off (MULADD, s = 1 for
   * submanifold); TRANSPOSED (o - off) / s. */
  VC_CHECK(vc_query(h, mode == VOXCONV_KMAP_TRANSPOSED ? VC_Q_SUBDIV : VC_Q_MULADD,
                    q, b.g));
  if (!mirror) {
    /* in -> out: SUBMANIFOLD i - off, STRIDED (i - off) / s (SUBDIV);
     * TRANSPOSED s*i + off. The hit count of each direction is the same
     * pair set, so only the first one counts. */
    VC_CHECK(vc_query_in_rows(
        h, mode == VOXCONV_KMAP_TRANSPOSED ? VC_Q_MULADD : VC_Q_SUBDIV,
        s.in_keys, n_in, s.out_hash, m, b.g));
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* The synchronous end of a build: THE one wait (the status), the checks,
 * then step 6 -- exact-size arrays and the pair lists, all asynchronous. */
static voxconv_status_t vc_finish_sync(VcBuild &b, VcWorkspace &ws,
                                       VcKmapStatus *d_st, const VcSides &s) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  const cudaStream_t stream = vc_cuda_stream(h);
  const int K = m->kvol;
  const voxconv_kmap_mode_t mode = m->desc.mode;
  VcKmapStatus *hs = NULL;
  VC_CHECK(vc_read_status(h, d_st, K, &hs));
  if (hs->overflow_in || hs->overflow_out) {
    b.overflowed = 1;
    return VOXCONV_STATUS_SUCCESS;
  }
  VC_CHECK(vc_check_status(b, hs, s.in_keys, s.in_hash, s.out_keys, s.out_hash));
  m->in_fingerprint = hs->fingerprint;
  m->out_fingerprint = hs->out_fingerprint;
  const int64_t n_out = mode == VOXCONV_KMAP_STRIDED ? hs->n_out : s.n_out_bound;
  m->n_out = n_out;
  vc_take_out_bounds(m, hs);
  VC_CHECK(vc_host_pair_offsets(h, m));
  for (int k = 0; k <= K; k++)
    m->pair_offsets[k] = hs->pair_offsets[k];
  m->n_pairs = m->pair_offsets[K];

  /* 6: everything below is asynchronous. */
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_out * 4, &m->out_coords,
                                    "kernel-map output coords"));
  if (mode == VOXCONV_KMAP_STRIDED) {
    VC_CHECK(vc_unpack_keys(h, s.strided_uniq, n_out, m->out_coords));
    VC_CHECK(vc_keep_in_coords(h, m, b.in));
    VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_out * K, &m->nbr_out,
                                      "kernel-map nbr_out"));
    if (n_out > 0)
      VC_CUDA_TRY(h, cudaMemcpyAsync(m->nbr_out, s.nbr_out,
                                     (size_t)n_out * K * sizeof(int32_t),
                                     cudaMemcpyDeviceToDevice, stream));
    if (s.mask_out) {
      VC_CHECK(vc_alloc_row_mask(h, m, n_out, &m->row_mask_out,
                                 "kernel-map row_mask_out"));
      if (n_out > 0)
        VC_CUDA_TRY(h, cudaMemcpyAsync(m->row_mask_out, s.mask_out,
                                       (size_t)n_out * sizeof(uint32_t),
                                       cudaMemcpyDeviceToDevice, stream));
    }
  } else if (n_out > 0) {
    const int32_t *src = mode == VOXCONV_KMAP_SUBMANIFOLD ? b.in->data
                                                          : b.out->data;
    VC_CUDA_TRY(h, cudaMemcpyAsync(m->out_coords, src,
                                   (size_t)n_out * 4 * sizeof(int32_t),
                                   cudaMemcpyDeviceToDevice, stream));
  }
  return vc_pairs_at_build(ws, h, m, s.counts, s.nb, n_out);
}

/* One attempt at a build (the caller retries with larger tables when one
 * overflowed): steps 1-5, then the asynchronous or the synchronous end;
 * GENERATIVE and EXPANDING go their own way after step 2. */
static voxconv_status_t vc_build_attempt(VcBuild &b) {
  voxconv_handle_t *h = b.h;
  voxconv_kmap_t *m = b.m;
  const voxconv_kmap_mode_t mode = m->desc.mode;
  VcWorkspace ws(h);
  b.overflowed = b.keys_overflowed = 0;

  /* Initialised by the input table's clear (vc_input_side), before any
   * step writes it. */
  VcKmapStatus *d_st = ((VcKmapPriv *)m->backend_priv)->d_status;

  VcSides s;
  memset(&s, 0, sizeof s);
  VC_CHECK(vc_input_side(b, ws, d_st, s));
  if (mode == VOXCONV_KMAP_GENERATIVE || mode == VOXCONV_KMAP_EXPANDING)
    return vc_attempt_derived(b, ws, d_st, s.in_keys, s.in_hash);
  VC_CHECK(vc_output_side(b, ws, d_st, s));
  VC_CHECK(vc_neighbours(b, ws, d_st, s));
  /* 5: positions. */
  VC_CHECK(vc_scan_counts(ws, h, s.counts, s.nb, m->kvol, d_st->pair_offsets));
  if (b.async)
    return vc_finish_async(b, ws, d_st, s.in_keys, s.in_hash, s.counts, s.nb,
                           s.strided_uniq);
  return vc_finish_sync(b, ws, d_st, s);
}

/* INVALID_ARGUMENT when c's rows are pageable host memory, which the GPU
 * cannot read (pinned and managed memory it can). */
static voxconv_status_t host_coords_refused(voxconv_handle_t *h,
                                            const voxconv_coords_t *c,
                                            const char *name) {
  if (c->n <= 0)
    return VOXCONV_STATUS_SUCCESS;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, c->data) != cudaSuccess) {
    cudaGetLastError(); /* an unknown pointer: left to the build */
    return VOXCONV_STATUS_SUCCESS;
  }
  if (a.type != cudaMemoryTypeUnregistered)
    return VOXCONV_STATUS_SUCCESS;
  return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                 "voxconv_kmap_build: %s->data=%p is host memory, but this "
                 "handle is CUDA: coordinates, features and weights must be "
                 "device memory (voxconv_malloc + voxconv_memcpy), or use a "
                 "CPU handle",
                 name, (const void *)c->data);
}

extern "C" voxconv_status_t vc_cuda_kmap_build(voxconv_handle_t *h,
                                               voxconv_kmap_t *m,
                                               const voxconv_coords_t *in,
                                               const voxconv_coords_t *out,
                                               int flags) {
  VC_CUDA_DEVICE_GUARD(h);
  /* int4 row loads need 16-byte rows at a 16-byte aligned base (every CUDA
   * allocation is; an offset view into one may not be). */
  if ((in->n > 0 && ((uintptr_t)in->data & 15u) != 0) ||
      (out && out->n > 0 && ((uintptr_t)out->data & 15u) != 0))
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_kmap_build: CUDA coordinates must be 16-byte "
                   "aligned (rows of 4 int32); in->data=%p out->data=%p",
                   (const void *)in->data, out ? (const void *)out->data : NULL);
  /* Host arrays given to a CUDA handle (e.g. the README's example run
   * with a CUDA handle) would fail deep inside the build with a bare
   * cudaErrorInvalidValue or an illegal address; one attribute query per
   * build names the mistake instead. */
  VC_CHECK(host_coords_refused(h, in, "in"));
  if (out)
    VC_CHECK(host_coords_refused(h, out, "out"));
  VcBuild b;
  memset(&b, 0, sizeof b);
  b.h = h;
  b.m = m;
  b.in = in;
  b.out = out;
  b.g = vc_geom_of(m);
  b.preset = (flags & VC_BUILD_PRESET) != 0;
  const int defer = (flags & VC_BUILD_DEFER) != 0;
  const int64_t n_out_keys =
      m->desc.mode == VOXCONV_KMAP_TRANSPOSED ? out->n : in->n;
  const uint64_t full_in =
      vc_pow2_at_least(VC_HASH_SLOTS_PER_KEY * (uint64_t)in->n + 2);
  const uint64_t full_out =
      vc_pow2_at_least(VC_HASH_SLOTS_PER_KEY * (uint64_t)n_out_keys + 2);
  const int tiny = vc_cuda_state(h)->hash_debug_tiny;
  b.cap_in = tiny ? VC_HASH_TINY_SLOTS : full_in;
  b.cap_out = tiny ? VC_HASH_TINY_SLOTS : full_out;
  /* EXPANDING's output-key set (vc_expand_keys_kernel). Its keys are
   * bounded only by n_cand = n_in * S (S candidate slots per input, all
   * distinct for isolated voxels), yet in any real cloud neighbouring
   * inputs reach the same outputs. A table 4x that bound would be large
   * (k3 s2: 32 slots per input, 256 MB of keys for workload A, far past
   * L2) and huge for stride 1 (S = K = 27: 108 slots per input), so it is
   * sized like the other tables, 4 slots a key, for min(n_cand, E) keys,
   * E an estimate from measured outputs per input:
   *   S <= 8 (stride >= 2 on every axis: k3 s2, k4 s2, k2 s2 where S = 1
   *   and E = n_cand is exact): 0.82 (workload A level 0, k3 s2 p1),
   *   1.1-1.6 (SemanticKITTI at 10 / 5 cm, k3 s2), 2.8 (5 cm, k4 s2):
   *   E = n_in, i.e. >= 2.5 slots a key for k3 s2 on those clouds, and 32
   *   MB of keys for workload A (4M slots: L2-resident on an H100);
   *   S > 8 (stride 1 on some axis; 27 for k3): 9-12.5 (the scans, k3
   *   s1): E = n_in * ceil(S / 4) (7 for k3: >= 2.2 slots a key).
   * The set only fails when full (load 1), i.e. beyond 4-8 x E keys
   * (pow2 rounding), which is possible only for 4 < S <= 8 (otherwise 4E
   * >= n_cand): k3 s2 on voxels whose outputs barely overlap (every
   * coordinate odd, with p = 1). An insert that finds no slot raises the
   * overflow flag, the attempt is dropped at the sync, and the retry sizes
   * the set at 2 slots for every possible key (keys_all: load <= 1/2, it
   * cannot fill). Between E and the full table the build stays exact,
   * only its probes get longer. */
  uint64_t est_keys = 0, keys_all = 2;
  if (m->desc.mode == VOXCONV_KMAP_EXPANDING) {
    const int3 sl = vc_expand_slots(b.g);
    const uint64_t S = (uint64_t)sl.x * sl.y * sl.z;
    const uint64_t n_cand = (uint64_t)in->n * S;
    est_keys = (uint64_t)in->n * (S <= 8 ? 1 : (S + 3) / 4);
    if (est_keys > n_cand)
      est_keys = n_cand;
    keys_all = vc_pow2_at_least(2 * n_cand + 2);
  }
  const uint64_t full_keys =
      vc_pow2_at_least(VC_HASH_SLOTS_PER_KEY * est_keys + 2);
  b.cap_keys = tiny ? VC_HASH_TINY_SLOTS : full_keys;

  /* Their output count sizes the map's arrays: the synchronous build
   * waits for it (not allowed while capturing) and a deferred one could
   * never deliver it (a captured build's results exist only in replays). */
  if (m->desc.mode != VOXCONV_KMAP_SUBMANIFOLD && vc_stream_capturing(h))
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "voxconv_kmap_build: a %s map's output count sizes its "
                   "arrays, so its build cannot be captured into a CUDA "
                   "graph; build it before the capture (SUBMANIFOLD builds "
                   "can be captured)",
                   vc_kmap_mode_name(m->desc.mode));
  VcKmapPriv *priv = (VcKmapPriv *)calloc(1, sizeof *priv);
  if (!priv)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "voxconv_kmap_build: out of host memory (%zu bytes)",
                   sizeof *priv);
  pthread_mutex_init(&priv->lock, NULL);
  m->backend_priv = priv;
  VC_CHECK(vc_cuda_alloc_n<VcKmapStatus>(h, 1, &priv->d_status,
                                         "kernel-map status"));
  m->pair_offsets_dev = (const int64_t *)priv->d_status->pair_offsets;
  /* SUBMANIFOLD outputs are the inputs, so nothing the host must size
   * depends on the GPU's results: no wait (unless asked to check at once,
   * or under the tiny-table test knob, whose overflow needs the retry that
   * only a synchronous build can make). A deferred STRIDED build
   * (voxconv_kmap_build_async) leaves its output count on the device too:
   * every table is sized for every key, so it cannot overflow either. */
  b.async = vc_build_is_async(h, m, defer);
  priv->stream = vc_cuda_stream(h);
  for (int attempt = 0;; attempt++) {
    VC_CHECK(vc_build_attempt(b));
    if (!b.overflowed)
      break;
    /* A table ran out of slots: drop this attempt's map arrays and retry
     * with room for every key (a second attempt cannot overflow). */
    vc_kmap_free_buffers(h, m);
    priv->hash_retries++;
    if (attempt >= 2)
      return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                     "voxconv_kmap_build: GPU hash still overflowing after "
                     "%d retries (capacity %llu for %lld keys; output-key "
                     "set %llu slots)",
                     attempt + 1, (unsigned long long)b.cap_in,
                     (long long)in->n, (unsigned long long)b.cap_keys);
    b.cap_in = b.cap_in * 8 > full_in ? b.cap_in * 8 : full_in;
    b.cap_out = b.cap_out * 8 > full_out ? b.cap_out * 8 : full_out;
    /* A full output-key set: room for every possible key at once. */
    const uint64_t keys_floor = b.keys_overflowed ? keys_all : full_keys;
    b.cap_keys = b.cap_keys * 8 > keys_floor ? b.cap_keys * 8 : keys_floor;
  }
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_coords_fingerprint(voxconv_handle_t *h,
                                                       const int32_t *coords,
                                                       int64_t n,
                                                       uint64_t *fingerprint) {
  VC_CUDA_DEVICE_GUARD(h);
  *fingerprint = 0;
  if (n == 0)
    return VOXCONV_STATUS_SUCCESS;
  if (((uintptr_t)coords & 15u) != 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_kmap_verify: CUDA coordinates must be 16-byte "
                   "aligned; got %p",
                   (const void *)coords);
  VcWorkspace ws(h);
  unsigned long long *d_fp = NULL;
  VC_CHECK(ws.get<unsigned long long>(1, &d_fp, "fingerprint"));
  VC_CUDA_TRY(h, cudaMemsetAsync(d_fp, 0, sizeof *d_fp, vc_cuda_stream(h)));
  vc_fingerprint_kernel<<<vc_grid_rows(h, n), kBlock, 0, vc_cuda_stream(h)>>>(
      coords, n, d_fp);
  VC_CUDA_LAUNCH_CHECK(h, "vc_fingerprint_kernel");
  unsigned long long fp = 0;
  VC_CUDA_TRY(h, cudaMemcpyAsync(&fp, d_fp, sizeof fp, cudaMemcpyDeviceToHost,
                                 vc_cuda_stream(h)));
  VC_CUDA_TRY(h, cudaStreamSynchronize(vc_cuda_stream(h)));
  *fingerprint = fp;
  return VOXCONV_STATUS_SUCCESS;
}

/* fwd's output fingerprint on the host. A CUDA EXPANDING map's arrives
 * after its build (vc_defer_out_fingerprint): the first call waits for the
 * copy's event, stores the value in the map and returns the slot to the
 * pool; later calls read the map. The map is const to its users, but this
 * completes a field of its build (as vc_cuda_kmap_poll completes an
 * asynchronous build), under the map's lock. */
static voxconv_status_t vc_out_fingerprint(voxconv_handle_t *h,
                                           const voxconv_kmap_t *cfwd,
                                           uint64_t *fp) {
  voxconv_kmap_t *fwd = (voxconv_kmap_t *)cfwd;
  VcKmapPriv *p = (VcKmapPriv *)fwd->backend_priv;
  if (!p || fwd->desc.mode != VOXCONV_KMAP_EXPANDING) {
    *fp = fwd->out_fingerprint;
    return VOXCONV_STATUS_SUCCESS;
  }
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&p->lock);
  if (p->h_status) {
    /* Relaxed capture mode: the wait is legal while a stream of this
     * thread is being captured (an EXPANDING build never is: it waits for
     * its status, so the event was recorded outside any capture). */
    e = vc_relaxed([&] { return cudaEventSynchronize(p->ready); });
    if (e == cudaSuccess) {
      fwd->out_fingerprint = p->h_status->out_fingerprint;
      vc_pinned_status_release(p->h_status, NULL); /* the copy has landed */
      p->h_status = NULL;
      cudaEventDestroy(p->ready);
      p->ready = NULL;
    }
  }
  *fp = fwd->out_fingerprint;
  pthread_mutex_unlock(&p->lock);
  if (e != cudaSuccess)
    return vc_cuda_fail(h, e, "cudaEventSynchronize", "voxconv_kmap_inverse");
  return VOXCONV_STATUS_SUCCESS;
}

/* voxconv_kmap_inverse: (i, k) -> o in fwd is (o, k) -> i here, so the
 * neighbour tables and row masks are fwd's swapped (copies), and the pair
 * lists come from the new nbr_out by the build's own counting, scan and
 * compaction (grouped by offset, ascending output row): the map a
 * TRANSPOSED build would make, with no lookups and no host wait (but for an
 * EXPANDING fwd's first inverse, which waits for the event of fwd's output
 * fingerprint: vc_out_fingerprint). kmap.c set the host fields (n_in,
 * n_out, n_pairs, pair_offsets, ...). */
extern "C" voxconv_status_t vc_cuda_kmap_inverse(voxconv_handle_t *h,
                                                 const voxconv_kmap_t *fwd,
                                                 voxconv_kmap_t *m) {
  VC_CUDA_DEVICE_GUARD(h);
  const cudaStream_t stream = vc_cuda_stream(h);
  const int K = m->kvol;
  const int64_t n_in = m->n_in, n_out = m->n_out;
  uint64_t fwd_fp = 0;
  VC_CHECK(vc_out_fingerprint(h, fwd, &fwd_fp));
  m->in_fingerprint = fwd_fp;
  VcKmapPriv *priv = (VcKmapPriv *)calloc(1, sizeof *priv);
  if (!priv)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "voxconv_kmap_inverse: out of host memory (%zu bytes)",
                   sizeof *priv);
  pthread_mutex_init(&priv->lock, NULL);
  /* made inside a capture, it exists in the replays, so its pair lists
   * may be written there too (vc_pairs_write) */
  priv->captured = vc_stream_capturing(h);
  m->backend_priv = priv;
  VC_CHECK(vc_cuda_alloc_n<VcKmapStatus>(h, 1, &priv->d_status,
                                         "kernel-map status"));
  VC_CUDA_TRY(h, cudaMemsetAsync(priv->d_status, 0, sizeof(VcKmapStatus),
                                 stream));
  m->pair_offsets_dev = (const int64_t *)priv->d_status->pair_offsets;

  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_out * 4, &m->out_coords,
                                    "kernel-map output coords"));
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_out * K, &m->nbr_out,
                                    "kernel-map nbr_out"));
  VC_CHECK(vc_cuda_alloc_n<int32_t>(h, n_in * K, &m->nbr_in,
                                    "kernel-map nbr_in"));
  if (n_out > 0) {
    VC_CUDA_TRY(h, cudaMemcpyAsync(m->out_coords, fwd->in_coords,
                                   (size_t)n_out * 4 * sizeof(int32_t),
                                   cudaMemcpyDeviceToDevice, stream));
    VC_CUDA_TRY(h, cudaMemcpyAsync(m->nbr_out, fwd->nbr_in,
                                   (size_t)n_out * K * sizeof(int32_t),
                                   cudaMemcpyDeviceToDevice, stream));
  }
  if (n_in > 0)
    VC_CUDA_TRY(h, cudaMemcpyAsync(m->nbr_in, fwd->nbr_out,
                                   (size_t)n_in * K * sizeof(int32_t),
                                   cudaMemcpyDeviceToDevice, stream));
  /* Row masks exist exactly when K <= 32, on both maps. */
  if (fwd->row_mask_in) {
    VC_CHECK(vc_alloc_row_mask(h, m, n_out, &m->row_mask_out,
                               "kernel-map row_mask_out"));
    if (n_out > 0)
      VC_CUDA_TRY(h, cudaMemcpyAsync(m->row_mask_out, fwd->row_mask_in,
                                     (size_t)n_out * sizeof(uint32_t),
                                     cudaMemcpyDeviceToDevice, stream));
  }
  if (fwd->row_mask_out) {
    VC_CHECK(vc_alloc_row_mask(h, m, n_in, &m->row_mask_in,
                               "kernel-map row_mask_in"));
    if (n_in > 0)
      VC_CUDA_TRY(h, cudaMemcpyAsync(m->row_mask_in, fwd->row_mask_out,
                                     (size_t)n_in * sizeof(uint32_t),
                                     cudaMemcpyDeviceToDevice, stream));
  }

  VcWorkspace ws(h);
  const int64_t nb = vc_ceil_div<int64_t>(n_out, VC_ROWS_PER_BLOCK);
  long long *counts = NULL;
  VC_CHECK(ws.get<long long>((int64_t)K * nb + 1, &counts, "pair counts"));
  VC_CHECK(vc_clear_count_tail(h, counts, nb, K));
  if (nb > 0) {
    vc_nbr_counts_kernel<<<vc_grid_rows(h, nb * 32), kBlock, 0, stream>>>(
        m->nbr_out, n_out, NULL, K, counts, nb, NULL);
    VC_CUDA_LAUNCH_CHECK(h, "vc_nbr_counts_kernel");
  }
  VC_CHECK(vc_scan_counts(ws, h, counts, nb, K, priv->d_status->pair_offsets));
  return vc_pairs_at_build(ws, h, m, counts, nb, n_out);
}
