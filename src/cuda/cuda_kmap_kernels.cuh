/* Device side of the CUDA kernel-map builder (cuda_kmap.cu, the only
 * file that includes this): the packed-key helpers, the geometry of the
 * offsets and every kernel of its pipeline (see cuda_kmap.cu's file comment
 * for the steps). Kept apart from the host orchestration so that each file
 * reads as one thing: what runs on the GPU here, what is queued and when
 * in cuda_kmap.cu. */
#ifndef VC_CUDA_KMAP_KERNELS_CUH
#define VC_CUDA_KMAP_KERNELS_CUH

#include "cuda_kmap_status.cuh"

#include <limits.h>
#include <stdint.h>

#define VC_ROWS_PER_BLOCK 32 /* rows per tile (one warp) of the query and compaction */
#define VC_HASH_TINY_SLOTS 16
/* Table capacity: the power of two >= this many slots per key, i.e. load
 * <= 0.25 (12 bytes a slot: 48-96 bytes of scratch per key). Most
 * submanifold lookups miss (69% on workload A) and a miss walks to an empty
 * slot: on workload A, 2 slots/key gave 3.07 probes per miss and a 0.71 ms
 * build, 4 slots/key 1.60 probes and 0.56 ms (H200); 8 would give 1.24
 * probes for twice the memory. */
#ifndef VC_HASH_SLOTS_PER_KEY
#define VC_HASH_SLOTS_PER_KEY 4
#endif

/* ---- device helpers ------------------------------------------------------ */
struct VcCoord {
  int32_t b, x, y, z;
};

static __device__ __forceinline__ VcCoord vc_dev_unpack(uint64_t k) {
  VcCoord c;
  c.b = (int32_t)(k >> 54);
  c.x = (int32_t)((k >> 36) & 0x3FFFF) - VC_COORD_BIAS;
  c.y = (int32_t)((k >> 18) & 0x3FFFF) - VC_COORD_BIAS;
  c.z = (int32_t)(k & 0x3FFFF) - VC_COORD_BIAS;
  return c;
}

static __device__ __forceinline__ bool vc_dev_in_range(int32_t v) {
  return v >= VOXCONV_COORD_MIN && v <= VOXCONV_COORD_MAX;
}

/* vc_pack_key_any (vc_hash.h): equal to the packed key for valid rows,
 * defined for any int32 values (fingerprints of untrusted coordinates). */
static __device__ __forceinline__ uint64_t vc_dev_pack_key_any(int4 r) {
  return ((uint64_t)(uint32_t)r.x << 54) ^
         ((uint64_t)((uint32_t)r.y + (uint32_t)VC_COORD_BIAS) << 36) ^
         ((uint64_t)((uint32_t)r.z + (uint32_t)VC_COORD_BIAS) << 18) ^
         (uint64_t)((uint32_t)r.w + (uint32_t)VC_COORD_BIAS);
}

static __device__ __forceinline__ bool vc_dev_row_valid(int4 r) {
  return r.x >= 0 && r.x <= VOXCONV_BATCH_MAX && vc_dev_in_range(r.y) &&
         vc_dev_in_range(r.z) && vc_dev_in_range(r.w);
}

/* vc_floor_div (vc_kmap.h) on the device. */
static __device__ __forceinline__ int32_t vc_dev_floor_div(int32_t a,
                                                           int32_t s) {
  return a >= 0 ? a / s : -((-a + s - 1) / s);
}

/* Block-wide reductions ending in ONE atomic per block and target.
 * Atomics on one address serialise in L2: with one per warp and target,
 * vc_strided_out_kernel took 92 us for 420k rows on workload A's level 0
 * (16.9k warps x 9 targets; 15 us with one per block) and
 * vc_pack_insert_kernel 99 us for 913k (59 us; docs/perf-notes.md item
 * 121). Every thread of the block must call these (they hold a
 * barrier); blockDim.x a multiple of 32, <= 1024. */
static __device__ __forceinline__ unsigned long long
vc_dev_warp_sum_u64(unsigned long long v) {
  for (int d = 16; d > 0; d >>= 1)
    v += __shfl_down_sync(0xFFFFFFFFu, v, d);
  return v;
}

/* Wrapping u64 sum of the block added to *dst (a zero sum adds nothing). */
static __device__ __forceinline__ void
vc_dev_block_add_u64(unsigned long long *dst, unsigned long long v) {
  __shared__ unsigned long long part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = vc_dev_warp_sum_u64(v);
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0ull;
    v = vc_dev_warp_sum_u64(v);
    if (lane == 0 && v != 0ull)
      atomicAdd(dst, v);
  }
}

/* Kernel geometry shared by the query kernels. Offsets are recomputed on
 * the device from the same formula as vc_kmap_fill_offsets (kidx through
 * vc_kidx_taps in the map's offset order, off = j*d - pad, pad =
 * vc_kmap_pad), which keeps the launch parameters small; the tests compare
 * every map against the CPU's. */
struct VcGeom {
  int32_t ks[3];
  int32_t dil[3];
  int32_t s[3];
  int32_t pad[3];
  int32_t out_shape[3]; /* EXPANDING / GENERATIVE bounds, 0 = none */
  int32_t K;
  int32_t order; /* desc offset_order */
};

static __device__ __forceinline__ void vc_dev_load_offsets(const VcGeom &g,
                                                           int32_t *off3) {
  for (int k = threadIdx.x; k < g.K; k += blockDim.x) {
    int32_t j[3];
    vc_kidx_taps(g.order, g.ks, k, j);
    for (int a = 0; a < 3; a++)
      off3[3 * k + a] = j[a] * g.dil[a] - g.pad[a];
  }
}

/* ---- kernels ------------------------------------------------------------- */
/* A build's status block before its first step. */
static __device__ __forceinline__ void vc_dev_status_init(VcKmapStatus *st) {
  st->fingerprint = 0;
  st->bad_in_row = st->dup_in_row = VC_NO_ROW;
  st->bad_out_row = st->dup_out_row = VC_NO_ROW;
  st->gen_bad = VC_NO_ROW;
  st->overflow_in = st->overflow_out = 0;
  st->dup_hint = st->reserved = 0;
  st->n_out = 0;
  st->out_fingerprint = 0;
  st->dup_prev_row = -1;
  /* Copied to the host whole (asynchronous builds): written even when no
   * error fills them (compute-sanitizer initcheck). */
  st->bounds_bad_row = VC_NO_ROW;
  for (int i = 0; i < 4; i++) {
    st->bad_in_coords[i] = st->dup_in_coords[i] = 0;
    st->bounds_bad_coords[i] = 0;
    st->out_lo[i] = INT32_MAX;
    st->out_hi[i] = INT32_MIN;
  }
}

/* Empties a hash table; with st, also initialises the build's status block
 * (the build's first kernel: one launch less per build than a kernel of
 * its own, which on workload A's deep levels is a visible share of a
 * build; docs/perf-notes.md item 126). With only_if, nothing is cleared
 * while *only_if is 0 (a table needed only on an error path). */
__global__ void vc_hash_clear_kernel(unsigned long long *keys, int32_t *vals,
                                     uint64_t cap, VcKmapStatus *st,
                                     const unsigned int *only_if) {
  if (st && blockIdx.x == 0 && threadIdx.x == 0)
    vc_dev_status_init(st);
  if (only_if && *only_if == 0)
    return;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < cap;
       i += (uint64_t)gridDim.x * blockDim.x) {
    keys[i] = VC_KEY_EMPTY;
    vals[i] = INT32_MAX;
  }
}

/* Asynchronous builds: copies what an error message needs into the status
 * block (the offending rows' coordinates and the earlier row of a
 * duplicate), so the host can word the error from the block alone. */
__global__ void vc_status_detail_kernel(VcKmapStatus *st,
                                        const int32_t *__restrict__ coords,
                                        const unsigned long long *keys,
                                        VcGpuHash table) {
  if (threadIdx.x != 0)
    return;
  if (st->bad_in_row != VC_NO_ROW) {
    const int4 r = reinterpret_cast<const int4 *>(coords)[st->bad_in_row];
    st->bad_in_coords[0] = r.x, st->bad_in_coords[1] = r.y;
    st->bad_in_coords[2] = r.z, st->bad_in_coords[3] = r.w;
  }
  if (st->dup_in_row != VC_NO_ROW) {
    const int4 r = reinterpret_cast<const int4 *>(coords)[st->dup_in_row];
    st->dup_in_coords[0] = r.x, st->dup_in_coords[1] = r.y;
    st->dup_in_coords[2] = r.z, st->dup_in_coords[3] = r.w;
    st->dup_prev_row = vc_dev_hash_find(table, keys[st->dup_in_row]);
  }
  if (st->bounds_bad_row != VC_NO_ROW) {
    const int4 r = reinterpret_cast<const int4 *>(coords)[st->bounds_bad_row];
    st->bounds_bad_coords[0] = r.x, st->bounds_bad_coords[1] = r.y;
    st->bounds_bad_coords[2] = r.z, st->bounds_bad_coords[3] = r.w;
  }
}

/* Step 1: keys, range check, optional fingerprint and hash insert. Keys of
 * invalid rows are VC_KEY_EMPTY so later steps skip them (the build fails
 * with OUT_OF_RANGE anyway). */
__global__ void vc_pack_insert_kernel(const int32_t *__restrict__ coords,
                                      int64_t n,
                                      unsigned long long *__restrict__ keys,
                                      VcGpuHash table, int insert,
                                      unsigned long long *bad_row,
                                      unsigned int *overflow,
                                      unsigned long long *fingerprint) {
  unsigned long long fp = 0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  /* Every thread of a warp runs the same trip count, so the warp shuffle
   * in vc_dev_warp_add_u64 below sees the whole warp. */
  const int64_t base0 = (int64_t)blockIdx.x * blockDim.x;
  for (int64_t base = base0; base < n; base += stride) {
    const int64_t i = base + threadIdx.x;
    if (i < n) {
      const int4 r = reinterpret_cast<const int4 *>(coords)[i];
      if (fingerprint)
        fp += vc_dev_fingerprint_mix((uint64_t)i, vc_dev_pack_key_any(r));
      uint64_t key = VC_KEY_EMPTY;
      if (vc_dev_row_valid(r)) {
        key = vc_dev_pack_key(r.x, r.y, r.z, r.w);
        if (insert && !vc_dev_hash_insert(table, key, (int32_t)i))
          atomicAdd(overflow, 1u);
      } else {
        atomicMin(bad_row, (unsigned long long)i);
      }
      keys[i] = key;
    }
  }
  if (fingerprint)
    vc_dev_block_add_u64(fingerprint, fp);
}

/* Step 2: the lowest row whose key is stored under a lower row (nothing
 * while only_if is given and *only_if is 0). */
__global__ void vc_dup_check_kernel(const unsigned long long *__restrict__ keys,
                                    int64_t n, VcGpuHash table,
                                    unsigned long long *dup_row,
                                    const unsigned int *only_if) {
  if (only_if && *only_if == 0)
    return;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t key = keys[i];
    if (key == VC_KEY_EMPTY)
      continue;
    if (vc_dev_hash_find(table, key) != (int32_t)i)
      atomicMin(dup_row, (unsigned long long)i);
  }
}

/* Inserts keys[i] -> i for i < n (n read from the device when n_dev;
 * nothing while only_if is given and *only_if is 0). */
__global__ void vc_insert_rows_kernel(const unsigned long long *__restrict__ keys,
                                      int64_t n_max, const long long *n_dev,
                                      VcGpuHash table, unsigned int *overflow,
                                      const unsigned int *only_if) {
  if (only_if && *only_if == 0)
    return;
  const int64_t n = n_dev ? (int64_t)*n_dev : n_max;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t key = keys[i];
    if (key != VC_KEY_EMPTY && !vc_dev_hash_insert(table, key, (int32_t)i))
      atomicAdd(overflow, 1u);
  }
}

/* A STRIDED build's sort keys. Without declared input bounds: the full
 * packed key of each strided cell. With them (voxconv_kmap_build_bounded)
 * the cells lie in a known box, so each field minus the box's least value
 * fits in `width` bits, packed batch-most-significant like the full key:
 * the same order in fewer bits (32-bit keys when they fit), so fewer radix
 * passes. All ones is "no key" in either form (a compact key leaves at
 * least one bit unused: VcCompact.bits < the key's width). */
struct VcCompact {
  int compact;                /* 0: full keys (no bounds) */
  int32_t in_lo[4], in_hi[4]; /* the declared input bounds */
  int32_t lo[4];              /* the box's least strided cell */
  int32_t width[4], shift[4]; /* bits and position of each field */
  int bits;                   /* the sum of the widths */
};

static __device__ __forceinline__ bool vc_dev_in_box(const VcCoord &c,
                                                     const VcCompact &cp) {
  return c.b >= cp.in_lo[0] && c.b <= cp.in_hi[0] && c.x >= cp.in_lo[1] &&
         c.x <= cp.in_hi[1] && c.y >= cp.in_lo[2] && c.y <= cp.in_hi[2] &&
         c.z >= cp.in_lo[3] && c.z <= cp.in_hi[3];
}

/* STRIDED output candidate of input row i (packed key `key`): floor(c / s)
 * as a KeyT key (see VcCompact). A row outside the declared bounds gets no
 * key and is reported (the lowest such row); so does an unkeyed row. */
template <typename KeyT>
static __device__ __forceinline__ KeyT
vc_dev_strided_key(uint64_t key, int64_t i, int3 s, const VcCompact &cp,
                   unsigned long long *bounds_bad_row) {
  const KeyT none = (KeyT)~(KeyT)0;
  if (key == VC_KEY_EMPTY)
    return none;
  const VcCoord c = vc_dev_unpack(key);
  const int32_t v[4] = {c.b, vc_dev_floor_div(c.x, s.x),
                        vc_dev_floor_div(c.y, s.y), vc_dev_floor_div(c.z, s.z)};
  if (!cp.compact)
    return (KeyT)vc_dev_pack_key(v[0], v[1], v[2], v[3]);
  if (!vc_dev_in_box(c, cp)) {
    atomicMin(bounds_bad_row, (unsigned long long)i);
    return none;
  }
  KeyT k = 0;
  for (int f = 0; f < 4; f++)
    k |= (KeyT)(uint32_t)(v[f] - cp.lo[f]) << cp.shift[f];
  return k;
}

/* The packed (full) key of a STRIDED output key k: k itself for full keys,
 * else the compact fields put back (VC_KEY_EMPTY for "no key"). */
template <typename KeyT>
static __device__ __forceinline__ uint64_t vc_dev_full_key(KeyT k,
                                                           const VcCompact &cp) {
  if (!cp.compact)
    return k;
  if (k == (KeyT)~(KeyT)0)
    return VC_KEY_EMPTY;
  int32_t v[4];
  for (int f = 0; f < 4; f++)
    v[f] = cp.lo[f] + (int32_t)((k >> cp.shift[f]) &
                                (((KeyT)1 << cp.width[f]) - 1));
  return vc_dev_pack_key(v[0], v[1], v[2], v[3]);
}

/* STRIDED output candidates of every input row (vc_dev_strided_key). */
template <typename KeyT>
__global__ void vc_strided_keys_kernel(const unsigned long long *__restrict__ in_keys,
                                       int64_t n, int3 s, VcCompact cp,
                                       KeyT *__restrict__ out,
                                       unsigned long long *bounds_bad_row) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = vc_dev_strided_key<KeyT>(in_keys[i], i, s, cp, bounds_bad_row);
}

/* Min / max per field over the block, then one atomic per field (see
 * vc_dev_block_add_u64; fields no thread saw are left alone). */
static __device__ __forceinline__ void vc_dev_block_bounds(int32_t lo[4],
                                                           int32_t hi[4],
                                                           int32_t *dst_lo,
                                                           int32_t *dst_hi) {
  __shared__ int32_t part[32][8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int f = 0; f < 4; f++)
    for (int d = 16; d > 0; d >>= 1) {
      lo[f] = min(lo[f], __shfl_down_sync(0xFFFFFFFFu, lo[f], d));
      hi[f] = max(hi[f], __shfl_down_sync(0xFFFFFFFFu, hi[f], d));
    }
  if (lane == 0)
    for (int f = 0; f < 4; f++)
      part[warp][f] = lo[f], part[warp][4 + f] = hi[f];
  __syncthreads();
  if (warp != 0)
    return;
  const int warps = (int)(blockDim.x >> 5);
  for (int f = 0; f < 4; f++) {
    int32_t l = lane < warps ? part[lane][f] : INT32_MAX;
    int32_t u = lane < warps ? part[lane][4 + f] : INT32_MIN;
    for (int d = 16; d > 0; d >>= 1) {
      l = min(l, __shfl_down_sync(0xFFFFFFFFu, l, d));
      u = max(u, __shfl_down_sync(0xFFFFFFFFu, u, d));
    }
    if (lane == 0) {
      if (l != INT32_MAX)
        atomicMin(dst_lo + f, l);
      if (u != INT32_MIN)
        atomicMax(dst_hi + f, u);
    }
  }
}

/* Output row i's share of the STRIDED outputs' fingerprint (the value
 * vc_keys_fingerprint_kernel gives) and bounds. */
static __device__ __forceinline__ void vc_dev_out_key_stats(uint64_t i,
                                                            uint64_t key,
                                                            unsigned long long *fp,
                                                            int32_t lo[4],
                                                            int32_t hi[4]) {
  *fp += vc_dev_fingerprint_mix(i, key);
  if (key == VC_KEY_EMPTY)
    return;
  const VcCoord c = vc_dev_unpack(key);
  const int32_t v[4] = {c.b, c.x, c.y, c.z};
  for (int f = 0; f < 4; f++) {
    lo[f] = min(lo[f], v[f]);
    hi[f] = max(hi[f], v[f]);
  }
}

/* A STRIDED build's sorted unique keys [0, *n_dev) -> the full keys (into
 * `full`, for compact keys; full keys are left where they are), their
 * fingerprint (vc_keys_fingerprint_kernel's value) and the outputs'
 * bounds per field. */
template <typename KeyT>
__global__ void vc_strided_out_kernel(const KeyT *__restrict__ uniq,
                                      int64_t n_max, const long long *n_dev,
                                      VcCompact cp,
                                      unsigned long long *__restrict__ full,
                                      VcKmapStatus *st) {
  const int64_t n = *n_dev < n_max ? (int64_t)*n_dev : n_max;
  unsigned long long fp = 0;
  int32_t lo[4] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
  int32_t hi[4] = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  /* The same trip count for the whole block (the reductions below). */
  for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < n;
       base += stride) {
    const int64_t i = base + threadIdx.x;
    if (i >= n)
      continue;
    const uint64_t key = vc_dev_full_key<KeyT>(uniq[i], cp);
    if (cp.compact)
      full[i] = key;
    vc_dev_out_key_stats((uint64_t)i, key, &fp, lo, hi);
  }
  vc_dev_block_add_u64(&st->out_fingerprint, fp);
  vc_dev_block_bounds(lo, hi, st->out_lo, st->out_hi);
}

/* GENERATIVE output candidates for every (i, k), flat index i*K + k:
 * s*c + off_k; VC_KEY_EMPTY where there is none (outside out_shape:
 * vc_kmap_reach's rule). A candidate outside the coordinate limits on an
 * unbounded axis is an error: the lowest flat index is recorded (the CPU
 * reports the first in (i, k) order). Every candidate kept is a pair, so
 * each offset's count (pair_counts[k], zeroed before) is that offset's
 * pair count: summed per block in shared memory, then one atomic per
 * (block, offset). EXPANDING has its own compact layout
 * (vc_expand_keys_kernel). */
__global__ void vc_reach_keys_kernel(const unsigned long long *__restrict__ in_keys,
                                     int64_t n_in, VcGeom g,
                                     unsigned long long *__restrict__ out,
                                     unsigned long long *gen_bad,
                                     long long *pair_counts) {
  extern __shared__ int32_t smem[];
  int32_t *off3 = smem;                      /* [K][3] */
  unsigned int *cnt = (unsigned int *)(smem + 3 * g.K); /* [K] */
  vc_dev_load_offsets(g, off3);
  for (int k = threadIdx.x; k < g.K; k += blockDim.x)
    cnt[k] = 0u;
  __syncthreads();
  const int64_t total = n_in * g.K;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = t / g.K;
    const int k = (int)(t - i * g.K);
    const uint64_t key = in_keys[i];
    uint64_t o = VC_KEY_EMPTY;
    if (key != VC_KEY_EMPTY) {
      const VcCoord c = vc_dev_unpack(key);
      const int32_t cc[3] = {c.x, c.y, c.z};
      int32_t v[3];
      bool exists = true, bad = false;
#pragma unroll
      for (int a = 0; a < 3; a++) {
        const int32_t w = g.s[a] * cc[a] + off3[3 * k + a];
        if (g.out_shape[a] > 0)
          exists = exists && w >= 0 && w < g.out_shape[a];
        else
          bad = bad || !vc_dev_in_range(w);
        v[a] = w;
      }
      if (exists && bad)
        atomicMin(gen_bad, (unsigned long long)t);
      else if (exists) {
        o = vc_dev_pack_key(c.b, v[0], v[1], v[2]);
        atomicAdd(&cnt[k], 1u);
      }
    }
    out[t] = o;
  }
  __syncthreads();
  for (int k = threadIdx.x; k < g.K; k += blockDim.x)
    if (cnt[k])
      atomicAdd((unsigned long long *)&pair_counts[k],
                (unsigned long long)cnt[k]);
}

/* After the sorted unique of candidates that may hold VC_KEY_EMPTY (the
 * largest key, so the last unique one if present): drops it from the
 * count. */
__global__ void vc_drop_empty_tail_kernel(const unsigned long long *uniq,
                                          long long *n_unique) {
  if (threadIdx.x == 0 && *n_unique > 0 && uniq[*n_unique - 1] == VC_KEY_EMPTY)
    --*n_unique;
}

/* EXPANDING candidates in a compact layout: an input c reaches output o
 * on axis a through tap j only where c - (j*dil - pad) is a multiple of s,
 * so at most m_a = ceil(k_a / (s_a / gcd(dil_a, s_a))) taps per axis can
 * (vc_expand_slots). Each input gets S = m_0*m_1*m_2 candidate slots instead
 * of K (k = 3, s = 2: 8 instead of 27), slot (t0, t1, t2) standing for the
 * t_a-th such tap per axis; one thread per slot.
 *
 * Each candidate that exists goes into `set`, a key-only GPU hash; the one
 * thread whose insert stores a key appends it to `uniq` (unsorted), so the
 * sort after the sync sees only the n_out distinct outputs, not n_in * S
 * slots that are mostly empty or repeated (the 64-bit sort of all slots
 * dominated the build). Appends are aggregated per block: a ballot per
 * warp, one shared atomicAdd per warp for its place in the block's round,
 * one global atomicAdd per block and round on *n_unique (the map's n_out)
 * -- a single counter hit by every warp would serialise. Rounds are block
 * uniform (every thread runs the same trip count), so the ballots and
 * barriers see whole warps and blocks; two barriers a round.
 *
 * An insert that finds the set full, or an append past uniq_cap (which
 * cannot happen: every appended key holds its own slot and uniq_cap >=
 * min(capacity, n_in * S)), raises *overflow: the build retries with a set
 * sized for every possible key, and a truncated output set is never used.
 * Pair counts per offset and the lowest bad (i, k) index are as the (i, k)
 * layout had them. */
__global__ void
vc_expand_keys_kernel(const unsigned long long *__restrict__ in_keys,
                      int64_t n_in, VcGeom g, int3 m, VcGpuHash set,
                      unsigned long long *__restrict__ uniq, int64_t uniq_cap,
                      unsigned long long *n_unique, unsigned int *overflow,
                      unsigned long long *gen_bad, long long *pair_counts) {
  extern __shared__ int32_t smem[];
  unsigned int *cnt = (unsigned int *)smem; /* [K] */
  __shared__ unsigned int round_keys;       /* keys the block adds this round */
  __shared__ unsigned long long round_base; /* ... and where they go */
  for (int k = threadIdx.x; k < g.K; k += blockDim.x)
    cnt[k] = 0u;
  if (threadIdx.x == 0)
    round_keys = 0u;
  __syncthreads();
  const int S = m.x * m.y * m.z;
  const int64_t total = n_in * S;
  const int lane = threadIdx.x & 31;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < total;
       base += stride) {
    const int64_t t = base + threadIdx.x;
    uint64_t o = VC_KEY_EMPTY;
    if (t < total) {
      const int64_t i = t / S;
      const int slot = (int)(t - i * S);
      const int sl[3] = {slot / (m.y * m.z), (slot / m.z) % m.y, slot % m.z};
      const uint64_t key = in_keys[i];
      if (key != VC_KEY_EMPTY) {
        const VcCoord c = vc_dev_unpack(key);
        const int32_t cc[3] = {c.x, c.y, c.z};
        int32_t v[3], jj[3];
        bool exists = true, bad = false;
#pragma unroll
        for (int a = 0; a < 3; a++) {
          /* the sl[a]-th tap j (ascending) with c - off_j on the lattice */
          int found = -1, seen = 0;
          for (int j = 0; j < g.ks[a] && found < 0; j++) {
            const int32_t d = cc[a] - (j * g.dil[a] - g.pad[a]);
            if (d % g.s[a] == 0 && seen++ == sl[a])
              found = j;
          }
          exists = exists && found >= 0;
          const int j = found < 0 ? 0 : found;
          const int32_t w = (cc[a] - (j * g.dil[a] - g.pad[a])) / g.s[a];
          if (g.out_shape[a] > 0)
            exists = exists && w >= 0 && w < g.out_shape[a];
          else
            bad = bad || !vc_dev_in_range(w);
          v[a] = w;
          jj[a] = j;
        }
        const int k = vc_kidx_of(g.order, g.ks, jj);
        if (exists && bad)
          atomicMin(gen_bad, (unsigned long long)(i * g.K + k));
        else if (exists) {
          o = vc_dev_pack_key(c.b, v[0], v[1], v[2]);
          atomicAdd(&cnt[k], 1u);
        }
      }
    }
    int added = 0;
    if (o != VC_KEY_EMPTY) {
      const int r = vc_dev_hash_add_key(set, o);
      if (r == VC_HASH_FULL)
        atomicAdd(overflow, 1u);
      added = r == VC_HASH_ADDED;
    }
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, added);
    unsigned warp_at = 0u;
    if (lane == 0 && ballot)
      warp_at = atomicAdd(&round_keys, (unsigned)__popc(ballot));
    warp_at = __shfl_sync(0xFFFFFFFFu, warp_at, 0);
    __syncthreads(); /* every warp has its place */
    if (threadIdx.x == 0) {
      const unsigned n_new = round_keys;
      round_keys = 0u; /* the next round counts after the barrier below */
      round_base =
          n_new ? atomicAdd(n_unique, (unsigned long long)n_new) : 0ull;
    }
    __syncthreads(); /* the base is known; the next write of it comes after
                      * the next round's first barrier, so after every read
                      * below */
    if (added) {
      const unsigned long long at =
          round_base + warp_at + __popc(ballot & ((1u << lane) - 1u));
      if (at < (unsigned long long)uniq_cap)
        uniq[at] = o;
      else
        atomicAdd(overflow, 1u);
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < g.K; k += blockDim.x)
    if (cnt[k])
      atomicAdd((unsigned long long *)&pair_counts[k],
                (unsigned long long)cnt[k]);
}

/* Per axis, the most taps j in [0, k) that can put one input on the output
 * lattice: j*dil = c + pad (mod s) has solutions spaced s / gcd(dil, s)
 * apart. */
static int3 vc_expand_slots(const VcGeom &g) {
  int m[3];
  for (int a = 0; a < 3; a++) {
    int x = g.dil[a], y = g.s[a];
    while (y) {
      const int r = x % y;
      x = y;
      y = r;
    }
    const int step = g.s[a] / x; /* x = gcd(dil, s) */
    m[a] = (g.ks[a] + step - 1) / step;
  }
  return make_int3(m[0], m[1], m[2]);
}

/* Fingerprint (vc_fingerprint_mix) of sorted output keys [0, *n_dev): the
 * same value vc_fingerprint_kernel gives for the unpacked coordinates. */
__global__ void vc_keys_fingerprint_kernel(const unsigned long long *__restrict__ keys,
                                           int64_t n_max, const long long *n_dev,
                                           unsigned long long *out) {
  const int64_t n = *n_dev < n_max ? (int64_t)*n_dev : n_max;
  unsigned long long fp = 0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < n;
       base += stride) {
    const int64_t i = base + threadIdx.x;
    if (i < n)
      fp += vc_dev_fingerprint_mix((uint64_t)i, keys[i]);
  }
  vc_dev_block_add_u64(out, fp);
}

/* Step 4. Neighbour query. One WARP per tile of 32 rows (lane = row): the
 * warp walks the K offsets, looks up the partner coordinate of its rows in
 * the dst hash, stages the 32 x K results in its own shared-memory slice and
 * then writes them out as one contiguous, coalesced run of nbr[tile rows].
 * No block-wide barrier: a block-per-tile design spent most of its time
 * waiting at __syncthreads for the slowest lookup (measured 0.76 ms of a
 * 0.85 ms build). Lookups are issued VC_Q_ILP offsets at a time (first
 * probes, then the rare extra probes, then the values of the hits), so each
 * lane keeps several independent memory requests in flight.
 *   MULADD: partner = s*c + off_k;  SUBDIV: partner = (c - off_k) / s when
 *   exact. `mirror` (optional) gets the result at [row][K-1-k]; `counts`
 *   (optional, [K][n_blocks] + 1) the hits of each (offset, tile): a ballot,
 *   written by lane 0 -- a plain store, no atomics. */
enum { VC_Q_MULADD = 0, VC_Q_SUBDIV = 1 };
#define VC_Q_ILP 4
#define VC_Q_WARPS_MAX 8

struct VcQuery {
  const unsigned long long *src_keys;
  int64_t n_src;          /* host-known row count (an upper bound with...) */
  const long long *n_dev; /* ...the real count on the device, or NULL */
  VcGpuHash dst;
  int32_t *nbr;
  int32_t *mirror;
  /* Optional (K <= 32): each row's hit bitmask, bit k for nbr[row][k] >= 0,
   * and for the mirror table the same bits reversed (bit K-1-k). */
  uint32_t *mask;
  uint32_t *mirror_mask;
  long long *counts;
  int64_t n_blocks; /* tiles of the count layout */
  /* Submanifold, odd kernel: the centre lookup (offset 0) of row o finds
   * the lowest row holding o's key, so a mismatch is a duplicate; this
   * replaces the separate duplicate pass. -1 = off. */
  int center_k;
  unsigned long long *dup_row;
};

/* Partner key of coordinate c at offset k, VC_KEY_EMPTY when there is none
 * (off the stride lattice or outside the coordinate limits). */
template <int DIR>
static __device__ __forceinline__ uint64_t
vc_dev_partner_key(const VcCoord &c, const int32_t *off, const VcGeom &g) {
  const int32_t cc[3] = {c.x, c.y, c.z};
  int32_t p[3];
  bool ok = true;
#pragma unroll
  for (int a = 0; a < 3; a++) {
    int32_t v;
    if (DIR == VC_Q_MULADD) {
      v = g.s[a] * cc[a] + off[a];
    } else {
      const int32_t d = cc[a] - off[a];
      ok = ok && (d % g.s[a] == 0);
      v = d / g.s[a];
    }
    ok = ok && vc_dev_in_range(v);
    p[a] = v;
  }
  return ok ? vc_dev_pack_key(c.b, p[0], p[1], p[2]) : VC_KEY_EMPTY;
}

template <int DIR>
__global__ void __launch_bounds__(VC_Q_WARPS_MAX * 32)
    vc_query_kernel(VcQuery q, VcGeom g) {
  extern __shared__ int32_t smem[];
  const int K = g.K;
  const int pitch = K | 1; /* odd: lane-strided slice accesses hit distinct banks */
  int32_t *off3 = smem;    /* [K][3] */
  vc_dev_load_offsets(g, off3);
  __syncthreads(); /* the only block barrier */

  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  const int warp = threadIdx.x >> 5;
  int32_t *stage = smem + 3 * K + warp * 32 * pitch;
  const int64_t n = q.n_dev ? (int64_t)*q.n_dev : q.n_src;
  const int64_t n_tiles = (q.n_src + 31) / 32;
  for (int64_t tile = (int64_t)blockIdx.x * warps + warp; tile < n_tiles;
       tile += (int64_t)gridDim.x * warps) {
    const int64_t row0 = tile * 32;
    const int64_t row = row0 + lane;
    const uint64_t key = row < n ? q.src_keys[row] : VC_KEY_EMPTY;
    const VcCoord c = vc_dev_unpack(key);
    for (int k0 = 0; k0 < K; k0 += VC_Q_ILP) {
      uint64_t want[VC_Q_ILP], slot[VC_Q_ILP];
      unsigned long long cur[VC_Q_ILP];
      /* 1: partner keys and first probes, all independent. */
#pragma unroll
      for (int u = 0; u < VC_Q_ILP; u++) {
        const int k = k0 + u;
        want[u] = (key != VC_KEY_EMPTY && k < K)
                      ? vc_dev_partner_key<DIR>(c, off3 + 3 * k, g)
                      : VC_KEY_EMPTY;
        slot[u] = vc_dev_hash_slot(q.dst, want[u]);
        cur[u] = want[u] != VC_KEY_EMPTY ? __ldg(&q.dst.keys[slot[u]])
                                         : VC_KEY_EMPTY;
      }
      /* 2: continue the probes that hit another key (bounded). */
      int hit[VC_Q_ILP];
#pragma unroll
      for (int u = 0; u < VC_Q_ILP; u++) {
        hit[u] = 0;
        if (want[u] == VC_KEY_EMPTY)
          continue;
        uint64_t sl = slot[u];
        unsigned long long cu = cur[u];
        for (uint64_t probe = 0; probe < q.dst.mask && cu != want[u] &&
                                 cu != VC_KEY_EMPTY;
             ++probe) {
          sl = (sl + 1) & q.dst.mask;
          cu = __ldg(&q.dst.keys[sl]);
        }
        hit[u] = cu == want[u];
        slot[u] = sl;
      }
      /* 3: values of the hits, independent again. */
#pragma unroll
      for (int u = 0; u < VC_Q_ILP; u++) {
        const int k = k0 + u;
        const int32_t found = hit[u] ? __ldg(&q.dst.vals[slot[u]]) : -1;
        if (k < K) {
          stage[lane * pitch + k] = found;
          if (q.counts) {
            const unsigned hits = __ballot_sync(0xFFFFFFFFu, found >= 0);
            if (lane == 0)
              q.counts[(int64_t)k * q.n_blocks + tile] = __popc(hits);
          }
          if (k == q.center_k && key != VC_KEY_EMPTY && found != (int32_t)row)
            atomicMin(q.dup_row, (unsigned long long)row);
        }
      }
    }
    __syncwarp();
    const int64_t left = n - row0;
    const int rows = left <= 0 ? 0 : left < 32 ? (int)left : 32;
    if (q.mask && lane < rows) {
      uint32_t bits = 0u, rev = 0u;
      for (int k = 0; k < K; k++) {
        const uint32_t hit = stage[lane * pitch + k] >= 0 ? 1u : 0u;
        bits |= hit << k;
        rev |= hit << (K - 1 - k);
      }
      q.mask[row] = bits;
      if (q.mirror_mask)
        q.mirror_mask[row] = rev;
    }
    int32_t *dst = q.nbr + row0 * K;
    int32_t *mir = q.mirror ? q.mirror + row0 * K : NULL;
    /* Streaming stores (evict-first): ~200 MB of tables pass through L2
     * during this kernel and would otherwise push the hash table out. */
    for (int i = lane; i < rows * K; i += 32) {
      const int r = i / K;
      const int col = i - r * K;
      __stcs(dst + i, stage[r * pitch + col]);
      if (mir)
        __stcs(mir + i, stage[r * pitch + (K - 1 - col)]);
    }
    __syncwarp();
  }
}

/* Step 4 for non-overlapping STRIDED maps (kernel = stride on every axis,
 * offsets 0 .. s-1, e.g. the 2x2x2 stride-2 pooling / downsampling of
 * U-Nets): input c feeds exactly one pair, output floor(c / s) at the
 * offset of c mod s, so both neighbour tables follow from one lookup per
 * input row instead of K per input and K per output row. nbr_in rows are
 * written whole; nbr_out (filled with -1 before) gets one scattered entry
 * per input. Rows with VC_KEY_EMPTY (invalid input, the build fails) or
 * whose output is missing (an overflowed table, the build retries) get
 * none. */
__global__ void vc_strided_direct_kernel(const unsigned long long *__restrict__ in_keys,
                                         int64_t n_in, VcGpuHash out_hash,
                                         int3 s, int3 ks, int K, int order,
                                         int32_t *__restrict__ nbr_in,
                                         int32_t *__restrict__ nbr_out,
                                         uint32_t *__restrict__ mask_in,
                                         unsigned int *dup_hint) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_in;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t key = in_keys[i];
    int32_t o = -1;
    int k = -1;
    if (key != VC_KEY_EMPTY) {
      const VcCoord c = vc_dev_unpack(key);
      const int32_t ox = vc_dev_floor_div(c.x, s.x),
                    oy = vc_dev_floor_div(c.y, s.y),
                    oz = vc_dev_floor_div(c.z, s.z);
      const int32_t j[3] = {c.x - ox * s.x, c.y - oy * s.y, c.z - oz * s.z};
      const int32_t ka[3] = {ks.x, ks.y, ks.z};
      k = vc_kidx_of(order, ka, j);
      o = vc_dev_hash_find(out_hash, vc_dev_pack_key(c.b, ox, oy, oz));
    }
    int32_t *row = nbr_in + i * K;
    for (int kk = 0; kk < K; kk++)
      row[kk] = (kk == k && o >= 0) ? o : -1;
    if (o >= 0) {
      int32_t *slot = nbr_out + (int64_t)o * K + k;
      /* Distinct rows have distinct (output, offset) slots: a taken one
       * means a duplicate row (the build then fails; which rows is found
       * with the input hash, only then). */
      if (!dup_hint)
        *slot = (int32_t)i;
      else if (atomicCAS(slot, -1, (int32_t)i) != -1)
        *dup_hint = 1u;
    }
    if (mask_in)
      mask_in[i] = o >= 0 ? 1u << k : 0u;
  }
}

/* The query's by-products for a table written another way: per (offset,
 * 32-row tile) hit counts (lane 0 of a warp, a ballot; rows past the
 * device-side n count nothing) and each row's bitmask (K <= 32). */
__global__ void vc_nbr_counts_kernel(const int32_t *__restrict__ nbr,
                                     int64_t n_bound,
                                     const long long *__restrict__ n_dev, int K,
                                     long long *__restrict__ counts,
                                     int64_t n_blocks,
                                     uint32_t *__restrict__ mask) {
  const int lane = threadIdx.x & 31;
  const int64_t n = n_dev && *n_dev < n_bound ? *n_dev : n_bound;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t tile = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
       tile < n_blocks; tile += warps) {
    const int64_t row = tile * 32 + lane;
    uint32_t bits = 0u;
    for (int k = 0; k < K; k++) {
      const bool hit = row < n && nbr[row * K + k] >= 0;
      const unsigned b = __ballot_sync(0xFFFFFFFFu, hit);
      if (lane == 0)
        counts[(int64_t)k * n_blocks + tile] = __popc(b);
      if (hit && k < 32)
        bits |= 1u << k;
    }
    if (mask && row < n)
      mask[row] = bits;
  }
}

/* pair_offsets[k] = scanned[k * n_blocks], pair_offsets[K] = total (the
 * scan ran over one extra zero element at the end). */
__global__ void vc_pair_offsets_kernel(const long long *__restrict__ scanned,
                                       int64_t n_blocks, int K,
                                       long long *pair_offsets) {
  for (int k = threadIdx.x; k <= K; k += blockDim.x)
    pair_offsets[k] = scanned[(int64_t)k * n_blocks];
}

/* Step 6. Stable compaction of each offset column of nbr_out, one WARP per
 * tile of 32 output rows (no block barrier): the tile goes to the warp's
 * shared slice (coalesced read, odd pitch), then for each offset a ballot
 * ranks the hits of the column (output order) and `scanned` gives the
 * tile's start for that offset; lane j pre-loads the start of offset
 * k0 + j so those loads overlap. */
__global__ void __launch_bounds__(VC_Q_WARPS_MAX * 32)
    vc_write_pairs_kernel(const int32_t *__restrict__ nbr, int64_t n,
                          const long long *n_dev, int K,
                          const long long *__restrict__ scanned,
                          int64_t n_blocks, int32_t *__restrict__ in_rows,
                          int32_t *__restrict__ out_rows) {
  extern __shared__ int32_t smem[];
  /* A deferred STRIDED build: rows past the device count were never
   * written by the neighbour query (their table entries are garbage). */
  if (n_dev && *n_dev < n)
    n = *n_dev;
  const int pitch = K | 1;
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  int32_t *stage = smem + (threadIdx.x >> 5) * 32 * pitch;
  const int64_t n_tiles = (n + 31) / 32;
  for (int64_t tile = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5);
       tile < n_tiles; tile += (int64_t)gridDim.x * warps) {
    const int64_t row0 = tile * 32;
    const int64_t left = n - row0;
    const int rows = left < 32 ? (int)left : 32;
    const int32_t *src = nbr + row0 * K;
    for (int i = lane; i < rows * K; i += 32) {
      const int r = i / K;
      stage[r * pitch + (i - r * K)] = src[i];
    }
    __syncwarp();
    for (int k0 = 0; k0 < K; k0 += 32) {
      const long long my_base =
          k0 + lane < K ? scanned[(int64_t)(k0 + lane) * n_blocks + tile] : 0;
      const int kn = K - k0 < 32 ? K - k0 : 32;
      for (int j = 0; j < kn; j++) {
        const int k = k0 + j;
        const int32_t v = lane < rows ? stage[lane * pitch + k] : -1;
        const unsigned hits = __ballot_sync(0xFFFFFFFFu, v >= 0);
        const long long base = __shfl_sync(0xFFFFFFFFu, my_base, j);
        if (v >= 0) {
          const int64_t pos = base + __popc(hits & ((1u << lane) - 1u));
          __stcs(in_rows + pos, v);
          __stcs(out_rows + pos, (int32_t)(row0 + lane));
        }
      }
    }
    __syncwarp();
  }
}

__global__ void vc_unpack_keys_kernel(const unsigned long long *__restrict__ keys,
                                      int64_t n, const long long *n_dev,
                                      int32_t *__restrict__ coords) {
  if (n_dev && *n_dev < n) /* a deferred build: only the rows that exist */
    n = *n_dev;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const VcCoord c = vc_dev_unpack(keys[i]);
    reinterpret_cast<int4 *>(coords)[i] = make_int4(c.b, c.x, c.y, c.z);
  }
}

__global__ void vc_fingerprint_kernel(const int32_t *__restrict__ coords,
                                      int64_t n, unsigned long long *out) {
  unsigned long long fp = 0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < n;
       base += stride) {
    const int64_t i = base + threadIdx.x;
    if (i < n) {
      const int4 r = reinterpret_cast<const int4 *>(coords)[i];
      fp += vc_dev_fingerprint_mix((uint64_t)i, vc_dev_pack_key_any(r));
    }
  }
  vc_dev_block_add_u64(out, fp);
}

__global__ void vc_hash_find_one_kernel(VcGpuHash table,
                                        const unsigned long long *keys,
                                        int64_t row, int32_t *out) {
  *out = vc_dev_hash_find(table, keys[row]);
}

#endif /* VC_CUDA_KMAP_KERNELS_CUH */
