/* implicit_gemm / implicit_gemm_det: fused gather-GEMM-scatter on the SIMT
 * units (fp32 FMA, fp32 accumulators), no materialised gather buffers.
 *
 * Forward  y[o]  = sum_k x[nbr_out[o][k]] . W[k]      (rows of y, no atomics)
 * Dgrad    dx[i] = sum_k dy[nbr_in[i][k]] . W[k]^T    (rows of dx, no atomics)
 * Wgrad    dW[k] = sum over pairs p of k: x[in[p]]^T dy[out[p]]
 *          every offset's pairs are cut into chunks of one common length L
 *          (so the blocks carry equal work although the centre offset has
 *          ~30x the pairs of a corner one); `split_k_factor` scales the
 *          number of chunks. Partial tiles are added with float atomics
 *          (implicit_gemm) or stored and summed in chunk order
 *          (implicit_gemm_det). L is capped, which also bounds the length
 *          of each thread's sequential fp32 sum (accuracy).
 *
 * Forward and dgrad share one kernel: a tile of BM gathered rows times BN
 * output channels per block, 256 threads each holding a TM x TN register
 * tile, the reduction walked in chunks of 16 channels through shared
 * memory. For every kernel offset the block first loads its rows'
 * neighbour indices; an offset where none of the BM rows has a neighbour is
 * skipped as a whole (about 70% of (row, offset) slots are empty on LiDAR
 * scans, and they cluster, because rows are sorted spatially). Dgrad uses a
 * transposed copy of W (kvol * cin * cout elements, workspace) so both
 * passes read their weights tile row by row. */
#include "cuda_conv_common.cuh"

namespace {

constexpr int kThreads = 256; /* 16 x 16 threads */
constexpr int kBK = 16;       /* reduction chunk (channels or pairs) */

/* Reads N consecutive floats from shared memory; 16-byte loads when the
 * compile-time shape allows (the address is then 16-byte aligned). */
template <int N>
static __device__ __forceinline__ void lds_row(const float *src, float *dst) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4 v = *reinterpret_cast<const float4 *>(src + i);
      dst[i] = v.x;
      dst[i + 1] = v.y;
      dst[i + 2] = v.z;
      dst[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; i++)
      dst[i] = src[i];
  }
}

/* out[r][n] = sum_k sum_c a[nbr[r*kvol+k]][c] * w[k][c][n]
 *   a [n_src][R], nbr [n_rows][kvol], w [kvol][R][N], out [n_rows][N].
 * Grid: x = row tiles of BM, y = column tiles of BN. */
template <typename T, int BM, int BN>
__global__ void __launch_bounds__(kThreads)
    igemm_rows_kernel(const T *__restrict__ a, const int32_t *__restrict__ nbr,
                      const T *__restrict__ w, T *__restrict__ out,
                      int64_t n_rows, int kvol, int R, int N) {
  constexpr int TM = BM / 16, TN = BN / 16;
  /* +4 floats per row: the transposed A store (16 channels of one row per
   * half-warp) then hits 2 banks per access instead of 1, and rows stay
   * 16-byte aligned for the vector reads. */
  __shared__ __align__(16) float As[kBK][BM + 4];
  __shared__ __align__(16) float Bs[kBK][BN + 4];
  __shared__ int32_t src_rows[BM];

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t m0 = (int64_t)blockIdx.x * BM;
  const int n0 = blockIdx.y * BN;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int j = 0; j < TN; j++)
      acc[i][j] = 0.f;

  for (int k = 0; k < kvol; k++) {
    int has_neighbour = 0;
    if (tid < BM) {
      const int64_t r = m0 + tid;
      const int32_t s = r < n_rows ? __ldg(nbr + r * kvol + k) : -1;
      src_rows[tid] = s;
      has_neighbour = s >= 0;
    }
    /* Also the barrier that publishes src_rows. */
    if (!__syncthreads_or(has_neighbour))
      continue;
    const T *wk = w + (int64_t)k * R * N;
    for (int c0 = 0; c0 < R; c0 += kBK) {
      /* A: BM rows x 16 channels, 16 consecutive threads per row. */
#pragma unroll
      for (int it = 0; it < BM * kBK / kThreads; it++) {
        const int i = tid + it * kThreads;
        const int r = i / kBK, c = i % kBK;
        const int32_t s = src_rows[r];
        float v = 0.f;
        if (s >= 0 && c0 + c < R)
          v = vcc_ld(a + (int64_t)s * R + c0 + c);
        As[c][r] = v;
      }
      /* B: 16 reduction rows x BN columns of W[k], row-contiguous. */
#pragma unroll
      for (int it = 0; it < kBK * BN / kThreads; it++) {
        const int i = tid + it * kThreads;
        const int c = i / BN, n = i % BN;
        float v = 0.f;
        if (c0 + c < R && n0 + n < N)
          v = vcc_ld(wk + (int64_t)(c0 + c) * N + n0 + n);
        Bs[c][n] = v;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kBK; kk++) {
        float av[TM], bv[TN];
        lds_row<TM>(&As[kk][ty * TM], av);
        lds_row<TN>(&Bs[kk][tx * TN], bv);
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
          for (int j = 0; j < TN; j++)
            acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
  }

#pragma unroll
  for (int i = 0; i < TM; i++) {
    const int64_t r = m0 + ty * TM + i;
    if (r >= n_rows)
      continue;
#pragma unroll
    for (int j = 0; j < TN; j++) {
      const int n = n0 + tx * TN + j;
      if (n < N)
        vcc_st(out + r * N + n, acc[i][j]);
    }
  }
}

/* wt[k][n][c] = w[k][c][n]: W^T per offset for dgrad. */
template <typename T>
__global__ void igemm_transpose_w_kernel(const T *__restrict__ w,
                                         T *__restrict__ wt, int kvol, int cin,
                                         int cout) {
  const int64_t total = (int64_t)kvol * cin * cout;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = e / ((int64_t)cin * cout);
    const int64_t rem = e - k * cin * cout;
    const int c = (int)(rem / cout), n = (int)(rem % cout);
    wt[k * cin * cout + (int64_t)n * cin + c] = w[e];
  }
}

/* Weight gradient, one (chunk of pairs, dW tile) per block:
 *   partial[m][n] = sum over the chunk's pairs p (all of one offset k)
 *                   x[in[p]][m0+m] * dy[out[p]][n0+n]
 * ATOMIC: added into dst [kvol][cin][cout] (f32) with atomicAdd.
 * else:   stored to dst [chunk][cin][cout]; every element of the tile is
 *         written. Grid: x = chunk, y = dW tile. */
template <typename T, int BM, int BN, bool ATOMIC>
__global__ void __launch_bounds__(kThreads)
    igemm_wgrad_kernel(const T *__restrict__ x, const T *__restrict__ dy,
                       const int32_t *__restrict__ in_rows,
                       const int32_t *__restrict__ out_rows,
                       const vcc_pair_offsets_t po, int kvol, int cin,
                       int cout, int64_t L, float *__restrict__ dst) {
  constexpr int TM = BM / 16, TN = BN / 16;
  __shared__ __align__(16) float As[kBK][BM + 4];
  __shared__ __align__(16) float Bs[kBK][BN + 4];
  __shared__ int32_t ir[kBK], orow[kBK];

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int tiles_m = (cin + BM - 1) / BM;
  const int m0 = (blockIdx.y % tiles_m) * BM;
  const int n0 = (blockIdx.y / tiles_m) * BN;
  const int64_t chunk = blockIdx.x;
  /* Which offset this chunk belongs to (a walk over <= 343 offsets). */
  int k = 0;
  int64_t first = 0;
  while (k < kvol - 1 && first + vcc_chunks_of(po, k, L) <= chunk) {
    first += vcc_chunks_of(po, k, L);
    k++;
  }
  const int64_t pb = po.po[k] + (chunk - first) * L;
  const int64_t pe = min(pb + L, po.po[k + 1]);

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int j = 0; j < TN; j++)
      acc[i][j] = 0.f;

  for (int64_t p0 = pb; p0 < pe; p0 += kBK) {
    if (tid < kBK) {
      const int64_t p = p0 + tid;
      ir[tid] = p < pe ? __ldg(in_rows + p) : -1;
    } else if (tid >= 32 && tid < 32 + kBK) {
      const int64_t p = p0 + tid - 32;
      orow[tid - 32] = p < pe ? __ldg(out_rows + p) : -1;
    }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < kBK * BM / kThreads; it++) {
      const int i = tid + it * kThreads;
      const int kk = i / BM, m = i % BM;
      const int32_t s = ir[kk];
      float v = 0.f;
      if (s >= 0 && m0 + m < cin)
        v = vcc_ld(x + (int64_t)s * cin + m0 + m);
      As[kk][m] = v;
    }
#pragma unroll
    for (int it = 0; it < kBK * BN / kThreads; it++) {
      const int i = tid + it * kThreads;
      const int kk = i / BN, n = i % BN;
      const int32_t s = orow[kk];
      float v = 0.f;
      if (s >= 0 && n0 + n < cout)
        v = vcc_ld(dy + (int64_t)s * cout + n0 + n);
      Bs[kk][n] = v;
    }
    __syncthreads();
    /* Two-level sum where registers allow (<= 16 outputs per thread): the
     * 16 products of a step are summed apart and then added, so the long
     * chain over the chunk has 16x fewer roundings at large magnitude. */
    float part[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
      for (int j = 0; j < TN; j++)
        part[i][j] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kBK; kk++) {
      float av[TM], bv[TN];
      lds_row<TM>(&As[kk][ty * TM], av);
      lds_row<TN>(&Bs[kk][tx * TN], bv);
#pragma unroll
      for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) {
          if constexpr (TM * TN <= 16)
            part[i][j] = fmaf(av[i], bv[j], part[i][j]);
          else
            acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
    }
    if constexpr (TM * TN <= 16) {
#pragma unroll
      for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++)
          acc[i][j] += part[i][j];
    }
    __syncthreads();
  }

  const int64_t slab = (int64_t)cin * cout;
  float *base = ATOMIC ? dst + (int64_t)k * slab : dst + chunk * slab;
#pragma unroll
  for (int i = 0; i < TM; i++) {
    const int m = m0 + ty * TM + i;
    if (m >= cin)
      continue;
#pragma unroll
    for (int j = 0; j < TN; j++) {
      const int n = n0 + tx * TN + j;
      if (n >= cout)
        continue;
      if (ATOMIC)
        atomicAdd(base + (int64_t)m * cout + n, acc[i][j]);
      else
        base[(int64_t)m * cout + n] = acc[i][j];
    }
  }
}

/* ---- parameters ---------------------------------------------------------
 * fwd_block_size b (fwd, dgrad): a block covers 4*b gathered rows
 *   (16, 64 or 128) times up to 64 output channels; small b suits small
 *   maps, large b amortises the weight tile over more rows.
 * gemm_block_size g (wgrad): a block covers a 4g x 4g tile of dW[k].
 * split_k_factor s (wgrad): the pairs are cut into about
 *   2 * 132 * s / tiles chunks (132 = an H100/H200's SMs, fixed so that
 *   the summation order does not depend on the device), each chunk of one
 *   offset and at most kMaxChunk pairs: about 2*s waves of blocks. */
const vc_param_space_t kRowsSpace = {
    1, {"fwd_block_size"}, {3}, {{16, 32, 4}}};
const vc_param_space_t kWgradSpace = {
    2, {"gemm_block_size", "split_k_factor"}, {3, 3}, {{16, 32, 4}, {4, 2, 8}}};

const vc_param_space_t *igemm_param_space(voxconv_pass_t pass) {
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_CONV_DGRAD:
    return &kRowsSpace;
  case VOXCONV_PASS_CONV_WGRAD:
    return &kWgradSpace;
  default:
    return NULL;
  }
}

int valid_block(int32_t b) { return b == 4 || b == 16 || b == 32; }
int valid_split(int32_t s) { return s == 2 || s == 4 || s == 8; }

constexpr int64_t kMaxChunk = 2048; /* pairs per wgrad block, at most */

int tile_of(int32_t g) { return g == 4 ? 16 : g == 16 ? 64 : 128; }

/* Common chunk length L of the wgrad pair chunks (see split_k_factor). */
int64_t wgrad_chunk_len(const voxconv_kmap_t *km, int64_t cin, int64_t cout,
                        int32_t g, int32_t split) {
  const int64_t B = tile_of(g);
  const int64_t tiles = ((cin + B - 1) / B) * ((cout + B - 1) / B);
  int64_t target = (2 * 132 * (int64_t)split + tiles - 1) / tiles;
  if (target < km->kvol)
    target = km->kvol;
  int64_t L = (km->n_pairs + target - 1) / target;
  if (L < 64)
    L = 64;
  if (L > kMaxChunk)
    L = kMaxChunk;
  return L;
}

int64_t wgrad_chunks(const voxconv_kmap_t *km, int64_t L) {
  return vcc_total_chunks(km, L);
}

/* Workspace: dgrad W^T; wgrad f32 accumulator (atomic, non-f32 dtypes) or
 * chunk partials (deterministic). */
size_t igemm_workspace(const vc_conv_problem_t *p,
                       const vc_algo_params_t *params, int deterministic) {
  /* A pending map's pair counts are not on the host yet: report none, and
   * run() (which waits for them first) allocates what it needs itself. */
  if (!p->kmap->pair_offsets)
    return 0;
  const int64_t wel = (int64_t)p->kmap->kvol * p->cin * p->cout;
  vcc_carver_t c = {NULL, 0};
  switch (p->pass) {
  case VOXCONV_PASS_CONV_DGRAD:
    vcc_take(&c, (size_t)wel * vcc_dtype_bytes(p->dtype));
    break;
  case VOXCONV_PASS_CONV_WGRAD: {
    if (deterministic) {
      const int64_t L = wgrad_chunk_len(p->kmap, p->cin, p->cout,
                                        params ? params->v[0] : 16,
                                        params ? params->v[1] : 4);
      vcc_take(&c, (size_t)(wgrad_chunks(p->kmap, L) * p->cin * p->cout) * 4);
    } else if (p->dtype != VOXCONV_DTYPE_F32)
      vcc_take(&c, (size_t)wel * 4);
    break;
  }
  default:
    break;
  }
  return c.used;
}

template <typename T, int BM>
voxconv_status_t launch_rows_bm(voxconv_handle_t *h, const T *a,
                                const int32_t *nbr, const T *w, T *out,
                                int64_t n_rows, int kvol, int R, int N) {
  const dim3 block(kThreads);
  const cudaStream_t st = vc_cuda_stream(h);
  if (N <= 16) {
    const dim3 grid((unsigned)vc_ceil_div<int64_t>(n_rows, BM),
                    (unsigned)vc_ceil_div(N, 16));
    igemm_rows_kernel<T, BM, 16>
        <<<grid, block, 0, st>>>(a, nbr, w, out, n_rows, kvol, R, N);
  } else if (N <= 32) {
    const dim3 grid((unsigned)vc_ceil_div<int64_t>(n_rows, BM),
                    (unsigned)vc_ceil_div(N, 32));
    igemm_rows_kernel<T, BM, 32>
        <<<grid, block, 0, st>>>(a, nbr, w, out, n_rows, kvol, R, N);
  } else {
    const dim3 grid((unsigned)vc_ceil_div<int64_t>(n_rows, BM),
                    (unsigned)vc_ceil_div(N, 64));
    igemm_rows_kernel<T, BM, 64>
        <<<grid, block, 0, st>>>(a, nbr, w, out, n_rows, kvol, R, N);
  }
  VC_CUDA_LAUNCH_CHECK(h, "igemm_rows_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T>
voxconv_status_t launch_rows(voxconv_handle_t *h, int32_t block_size,
                             const T *a, const int32_t *nbr, const T *w,
                             T *out, int64_t n_rows, int kvol, int R, int N) {
  if (n_rows <= 0)
    return VOXCONV_STATUS_SUCCESS;
  if (vc_ceil_div<int64_t>(n_rows, 16) > 0x7FFFFFFF)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "implicit_gemm: %lld rows exceed the grid limit",
                   (long long)n_rows);
  switch (block_size) {
  case 4:
    return launch_rows_bm<T, 16>(h, a, nbr, w, out, n_rows, kvol, R, N);
  case 16:
    return launch_rows_bm<T, 64>(h, a, nbr, w, out, n_rows, kvol, R, N);
  default:
    return launch_rows_bm<T, 128>(h, a, nbr, w, out, n_rows, kvol, R, N);
  }
}

template <typename T, int B>
voxconv_status_t launch_wgrad_b(voxconv_handle_t *h, const T *x, const T *dy,
                                 const voxconv_kmap_t *km, int cin, int cout,
                                 int64_t L, int atomic, float *dst) {
  const int64_t chunks = wgrad_chunks(km, L);
  if (chunks <= 0)
    return VOXCONV_STATUS_SUCCESS;
  if (chunks > 0x7FFFFFFF)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "implicit_gemm: %lld wgrad chunks exceed the grid limit",
                   (long long)chunks);
  vcc_pair_offsets_t po;
  vcc_fill_pair_offsets(km, &po);
  const int tiles = vc_ceil_div(cin, B) * vc_ceil_div(cout, B);
  const dim3 grid((unsigned)chunks, (unsigned)tiles);
  const cudaStream_t st = vc_cuda_stream(h);
  if (atomic)
    igemm_wgrad_kernel<T, B, B, true><<<grid, kThreads, 0, st>>>(
        x, dy, km->in_rows, km->out_rows, po, km->kvol, cin, cout, L, dst);
  else
    igemm_wgrad_kernel<T, B, B, false><<<grid, kThreads, 0, st>>>(
        x, dy, km->in_rows, km->out_rows, po, km->kvol, cin, cout, L, dst);
  VC_CUDA_LAUNCH_CHECK(h, "igemm_wgrad_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T>
voxconv_status_t igemm_run_t(voxconv_handle_t *h, const vc_conv_problem_t *p,
                             const vc_algo_params_t *params, char *ws,
                             int deterministic) {
  const voxconv_kmap_t *km = p->kmap;
  const int kvol = km->kvol;
  const int cin = (int)p->cin, cout = (int)p->cout;
  const cudaStream_t st = vc_cuda_stream(h);
  vcc_carver_t carve = {ws, 0};

  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
    return launch_rows<T>(h, params->v[0], (const T *)p->a, km->nbr_out,
                          (const T *)p->b, (T *)p->c, km->n_out, kvol, cin,
                          cout);
  case VOXCONV_PASS_CONV_DGRAD: {
    if (km->n_in <= 0)
      return VOXCONV_STATUS_SUCCESS;
    T *wt = (T *)vcc_take(&carve, (size_t)kvol * cin * cout * sizeof(T));
    const int64_t wel = (int64_t)kvol * cin * cout;
    igemm_transpose_w_kernel<T><<<vc_grid_1d(wel, 256, 4096), 256, 0, st>>>(
        (const T *)p->b, wt, kvol, cin, cout);
    VC_CUDA_LAUNCH_CHECK(h, "igemm_transpose_w_kernel");
    return launch_rows<T>(h, params->v[0], (const T *)p->a, km->nbr_in, wt,
                          (T *)p->c, km->n_in, kvol, cout, cin);
  }
  case VOXCONV_PASS_CONV_WGRAD: {
    VC_CHECK(vc_cuda_kmap_pairs(h, km, deterministic ? "implicit_gemm_det"
                                                     : "implicit_gemm"));
    const int32_t g = params->v[0], split = params->v[1];
    const int64_t wel = (int64_t)kvol * cin * cout;
    const int64_t L = wgrad_chunk_len(km, cin, cout, g, split);
    float *dst;
    if (deterministic) {
      dst = (float *)vcc_take(
          &carve, (size_t)(wgrad_chunks(km, L) * cin * cout) * 4);
    } else if (p->dtype == VOXCONV_DTYPE_F32) {
      dst = (float *)p->c;
    } else {
      dst = (float *)vcc_take(&carve, (size_t)wel * 4);
    }
    if (!deterministic)
      VC_CUDA_TRY(h, cudaMemsetAsync(dst, 0, (size_t)wel * 4, st));
    voxconv_status_t s;
    if (g == 4)
      s = launch_wgrad_b<T, 16>(h, (const T *)p->a, (const T *)p->b, km, cin,
                                cout, L, !deterministic, dst);
    else if (g == 16)
      s = launch_wgrad_b<T, 64>(h, (const T *)p->a, (const T *)p->b, km, cin,
                                cout, L, !deterministic, dst);
    else
      s = launch_wgrad_b<T, 128>(h, (const T *)p->a, (const T *)p->b, km, cin,
                                 cout, L, !deterministic, dst);
    VC_CHECK(s);
    if (deterministic) {
      vcc_pair_offsets_t po;
      vcc_fill_pair_offsets(km, &po);
      vcc_chunk_reduce_kernel<T><<<vc_grid_1d(wel, 256, 8192), 256, 0, st>>>(
          dst, (T *)p->c, po, kvol, (int64_t)cin * cout, L);
      VC_CUDA_LAUNCH_CHECK(h, "vcc_chunk_reduce_kernel");
    } else if (p->dtype != VOXCONV_DTYPE_F32) {
      VC_CHECK(vcc_convert_f32<T>(h, dst, (T *)p->c, wel));
    }
    return VOXCONV_STATUS_SUCCESS;
  }
  default:
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "implicit_gemm: pass %d is not a regular conv pass",
                   (int)p->pass);
  }
}

voxconv_status_t igemm_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                           const vc_algo_params_t *params, void *workspace,
                           int deterministic, const char *name) {
  VC_CUDA_DEVICE_GUARD(h);
  /* pair chunks are cut on the host */
  VC_CHECK(vc_kmap_wait(h, p->kmap, name));
  vc_algo_params_t prm;
  if (params) {
    prm = *params;
  } else {
    vc_algo_default_params(deterministic ? &vc_algo_cuda_implicit_gemm_det
                                         : &vc_algo_cuda_implicit_gemm,
                           p->pass, &prm);
  }
  if (p->pass == VOXCONV_PASS_CONV_WGRAD) {
    if (!valid_block(prm.v[0]) || !valid_split(prm.v[1]))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: gemm_block_size=%d split_k_factor=%d not in "
                     "{4,16,32} x {2,4,8}",
                     name, prm.v[0], prm.v[1]);
  } else if (!valid_block(prm.v[0])) {
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: fwd_block_size=%d not in {4,16,32}", name, prm.v[0]);
  }
  VcWorkspace scope(h);
  char *ws = NULL;
  VC_CHECK(vcc_workspace(scope, workspace,
                         igemm_workspace(p, &prm, deterministic), &ws));
  return VCC_DISPATCH_DTYPE(p->dtype, igemm_run_t, h, p, &prm, ws,
                            deterministic);
}

int igemm_supports_nd(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  return vcc_supports_common(&vc_algo_cuda_implicit_gemm, h, p) &&
         !vcc_is_depthwise(p->pass);
}
int igemm_supports_det(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  return vcc_supports_common(&vc_algo_cuda_implicit_gemm_det, h, p) &&
         !vcc_is_depthwise(p->pass);
}
size_t igemm_ws_nd(const vc_conv_problem_t *p, const vc_algo_params_t *prm) {
  return igemm_workspace(p, prm, 0);
}
size_t igemm_ws_det(const vc_conv_problem_t *p, const vc_algo_params_t *prm) {
  return igemm_workspace(p, prm, 1);
}
voxconv_status_t igemm_run_nd(voxconv_handle_t *h, const vc_conv_problem_t *p,
                              const vc_algo_params_t *prm, void *ws) {
  return igemm_run(h, p, prm, ws, 0, "implicit_gemm");
}
voxconv_status_t igemm_run_det(voxconv_handle_t *h, const vc_conv_problem_t *p,
                               const vc_algo_params_t *prm, void *ws) {
  return igemm_run(h, p, prm, ws, 1, "implicit_gemm_det");
}

constexpr unsigned kConvPasses = (1u << VOXCONV_PASS_CONV_FWD) |
                                 (1u << VOXCONV_PASS_CONV_DGRAD) |
                                 (1u << VOXCONV_PASS_CONV_WGRAD);

} // namespace

extern "C" const vc_algo_t vc_algo_cuda_implicit_gemm = {
    {"implicit_gemm", VOXCONV_BACKEND_CUDA, kConvPasses, 0,
     "fused gather-GEMM-scatter SIMT kernels (fp32 accumulation); wgrad "
     "split-K partials added with float atomics"},
    igemm_supports_nd,
    igemm_param_space,
    igemm_ws_nd,
    igemm_run_nd,
    NULL};

extern "C" const vc_algo_t vc_algo_cuda_implicit_gemm_det = {
    {"implicit_gemm_det", VOXCONV_BACKEND_CUDA, kConvPasses, 1,
     "implicit_gemm with wgrad chunk partials summed in a fixed order "
     "(bitwise reproducible)"},
    igemm_supports_det,
    igemm_param_space,
    igemm_ws_det,
    igemm_run_det,
    NULL};
