/* One-block versions of kernel-map build steps, for small inputs
 * (cuda_kmap.cu, the only file that includes this; after
 * cuda_kmap_kernels.cuh).
 *
 * Why: on a small input a build step's time is its launches, not its work.
 * A multi-block CUB scan is a size query, a scratch allocation and two
 * launches; a CUB sort plus unique is up to ten runtime calls. Each costs
 * the issuing host thread 3-6 us on the lent (virtualised) hosts, and
 * workload A's deep levels (301-7,167 voxels) spent 0.1-0.25 ms per map
 * build while their GPU work was a few microseconds (docs/perf-notes.md
 * item 126). One block of 1,024 threads does these steps here in one
 * launch with the same results: the same exclusive prefix, and the same
 * sorted unique keys, since both sorts are stable radix sorts over the
 * same key bits. The sizes are bounded so that a block's registers and
 * static shared memory hold the data; larger inputs take the CUB path. */
#ifndef VC_CUDA_KMAP_SMALL_CUH
#define VC_CUDA_KMAP_SMALL_CUH

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#define VC_SMALL_THREADS 1024
/* Scan: per chunk 16 counts a thread; a few chunks stay cheaper than the
 * CUB scan's launches (workload A's level 3: 28,648 counts, two chunks). */
#define VC_SMALL_SCAN_ITEMS 16
#define VC_SMALL_SCAN_MAX (4 * VC_SMALL_THREADS * VC_SMALL_SCAN_ITEMS)
/* Sort: 8 32-bit keys a thread, in registers; the sort's exchange buffer
 * (32 KB) fits the 48 KB of static shared memory. */
#define VC_SMALL_SORT_ITEMS 8
#define VC_SMALL_SORT_MAX (VC_SMALL_THREADS * VC_SMALL_SORT_ITEMS)

/* Inclusive prefix sum across the warp (every lane gets its own). */
static __device__ __forceinline__ long long
vc_dev_warp_inclusive_sum(long long x) {
  const int lane = threadIdx.x & 31;
  for (int d = 1; d < 32; d <<= 1) {
    const long long y = __shfl_up_sync(0xFFFFFFFFu, x, d);
    if (lane >= d)
      x += y;
  }
  return x;
}

/* counts[0 .. n-2] -> their exclusive prefix in counts[0 .. n-1] (the last
 * slot, the total, is not read: it need not be cleared), then
 * pair_offsets[k] = counts[k * n_blocks] for k <= K. One block; per chunk
 * each warp owns 32 x 16 consecutive counts and reads and writes them a
 * row of 32 at a time (coalesced: with 16 consecutive counts per thread
 * instead, every warp access touched 32 lines, and one SM's L1 / L2
 * transaction rate made each chunk ~20 us; item 126). */
__global__ void __launch_bounds__(VC_SMALL_THREADS)
    vc_small_scan_counts_kernel(long long *counts, int64_t n, int64_t n_blocks,
                                int K, long long *pair_offsets) {
  constexpr int WARPS = VC_SMALL_THREADS / 32;
  constexpr int SEG = 32 * VC_SMALL_SCAN_ITEMS; /* counts per warp and chunk */
  __shared__ long long warp_base[WARPS];
  __shared__ long long next_carry;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long carry = 0; /* the prefix before this chunk */
  for (int64_t base = 0; base < n; base += (int64_t)WARPS * SEG) {
    const int64_t seg = base + (int64_t)warp * SEG;
    long long v[VC_SMALL_SCAN_ITEMS];
    long long sum = 0;
#pragma unroll
    for (int j = 0; j < VC_SMALL_SCAN_ITEMS; j++) {
      const int64_t i = seg + j * 32 + lane;
      v[j] = i < n - 1 ? counts[i] : 0;
      sum += v[j];
    }
    sum = (long long)vc_dev_warp_sum_u64((unsigned long long)sum);
    __syncwarp(); /* the warp's lanes read its slot (last chunk) before this */
    if (lane == 0)
      warp_base[warp] = sum;
    __syncthreads();
    if (warp == 0) { /* the warps' sums -> their exclusive prefix + carry */
      const long long w = warp_base[lane];
      const long long x = vc_dev_warp_inclusive_sum(w);
      warp_base[lane] = carry + x - w;
      if (lane == 31)
        next_carry = carry + x;
    }
    __syncthreads();
    /* Each warp reads only its own slot: its lane 0 writes it again after
     * a __syncwarp (above), and warp 0 only after the next chunk's first
     * barrier, which every warp passes after these reads. */
    long long run = warp_base[warp];
    carry = next_carry;
#pragma unroll
    for (int j = 0; j < VC_SMALL_SCAN_ITEMS; j++) {
      const long long x = vc_dev_warp_inclusive_sum(v[j]);
      const int64_t i = seg + j * 32 + lane;
      if (i < n)
        counts[i] = run + x - v[j];
      run += __shfl_sync(0xFFFFFFFFu, x, 31);
    }
  }
  __syncthreads(); /* the prefix was written by other threads of the block */
  for (int k = threadIdx.x; k <= K; k += blockDim.x)
    pair_offsets[k] = counts[(int64_t)k * n_blocks];
}

/* A STRIDED build's output keys for n <= VC_SMALL_SORT_MAX inputs, 32-bit
 * compact keys: what vc_strided_keys_kernel, the CUB sort and unique and
 * vc_strided_out_kernel do (the same keys, reports, count, fingerprint and
 * bounds, into the same places: full keys in `full`, st->n_out). Sorted by
 * bits [0, end_bit) like the CUB sort; the stable order puts the padding
 * (positions >= n) after every real key, and a "no key" row fails the
 * build, so where it lands does not matter (as there). One block. */
__global__ void __launch_bounds__(VC_SMALL_THREADS)
    vc_small_strided_unique_kernel(const unsigned long long *__restrict__ in_keys,
                                   int64_t n, int3 s, VcCompact cp, int end_bit,
                                   unsigned long long *__restrict__ full,
                                   VcKmapStatus *st) {
  typedef cub::BlockRadixSort<uint32_t, VC_SMALL_THREADS, VC_SMALL_SORT_ITEMS>
      Sort;
  typedef cub::BlockScan<int, VC_SMALL_THREADS> Scan;
  __shared__ union {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ uint32_t last[VC_SMALL_THREADS];
  const int t = threadIdx.x;
  const int64_t p0 = (int64_t)t * VC_SMALL_SORT_ITEMS; /* blocked: stable */
  uint32_t k[VC_SMALL_SORT_ITEMS];
#pragma unroll
  for (int j = 0; j < VC_SMALL_SORT_ITEMS; j++)
    k[j] = p0 + j < n ? vc_dev_strided_key<uint32_t>(in_keys[p0 + j], p0 + j,
                                                      s, cp, &st->bounds_bad_row)
                      : ~0u;
  Sort(tmp.sort).Sort(k, 0, end_bit);
  last[t] = k[VC_SMALL_SORT_ITEMS - 1];
  __syncthreads(); /* last[] written; tmp.sort done before tmp.scan */
  /* The first of each run of equal keys among the first n positions. */
  int first = 0;
  uint32_t prev = t > 0 ? last[t - 1] : 0u;
#pragma unroll
  for (int j = 0; j < VC_SMALL_SORT_ITEMS; j++) {
    const bool head = p0 + j < n && (p0 + j == 0 || k[j] != prev);
    first |= (head ? 1 : 0) << j;
    prev = k[j];
  }
  int out, total;
  Scan(tmp.scan).ExclusiveSum(__popc(first), out, total);
  unsigned long long fp = 0;
  int32_t lo[4] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
  int32_t hi[4] = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
#pragma unroll
  for (int j = 0; j < VC_SMALL_SORT_ITEMS; j++)
    if (first >> j & 1) {
      const uint64_t key = vc_dev_full_key<uint32_t>(k[j], cp);
      full[out] = key;
      vc_dev_out_key_stats((uint64_t)out, key, &fp, lo, hi);
      out++;
    }
  vc_dev_block_add_u64(&st->out_fingerprint, fp);
  vc_dev_block_bounds(lo, hi, st->out_lo, st->out_hi);
  if (t == 0)
    st->n_out = total;
}

#endif
