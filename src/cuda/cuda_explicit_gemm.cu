/* explicit_gemm / explicit_gemm_det: gather -> cuBLAS GEMM per kernel
 * offset -> scatter.
 *
 * All pairs of the map are gathered at once into a [P][ld] buffer (pairs
 * grouped by offset, so offset k's rows are the contiguous block
 * [po[k], po[k+1]) and its GEMM needs only a pointer offset: the per-offset
 * counts live on the host in kmap->pair_offsets, so no device->host sync).
 * Each GEMM writes fp32 (CUBLAS_COMPUTE_32F; PEDANTIC for f32 inputs so no
 * TF32 ever enters), so the only rounding to a 16-bit dtype is the final
 * store: the sum over offsets happens in fp32 too.
 *
 *  scatter (explicit_gemm):      out[row[p]] += G[p] with float atomics,
 *                                into the output (f32) or an f32
 *                                accumulator (f16/bf16); order varies.
 *  gather-reduce (_det):         pidx[row][k] = p (a table in the
 *                                workspace), then every output row sums its
 *                                G rows in offset order: written once,
 *                                bitwise reproducible.
 *  wgrad (both):                 dW[k] = Xg_k^T DYg_k with fp32 results;
 *                                cuBLAS GEMMs are reproducible run to run,
 *                                so both records are.
 *    f32:       one SGEMM (PEDANTIC) per offset, K = the offset's pairs.
 *    f16/bf16:  tensor cores, but K cut into chunks of L pairs (L = 256,
 *               raised only to keep the partials under 1 GiB): one
 *               strided-batched GEMM per offset writes an fp32 partial per
 *               chunk and a kernel sums them in chunk order. Measured on
 *               the H200 (cuBLAS 13.0): one GemmEx over K = all pairs of
 *               an offset (thousands) gave elements off by up to 32x the
 *               1e-3*rms floor (norm 6e-3), mask_gemm's error also grew
 *               with its K per slice, while K <= 160 (fwd/dgrad) was exact
 *               to the output rounding: the tensor-core fp32 accumulator
 *               loses precision over long K. *
 * Row-major A[M][K] B[K][N] = C[M][N] is the column-major product
 * C^T = B^T A^T: every cuBLAS call below swaps the operands accordingly. */
#include "cuda_conv_common.cuh"

namespace {

/* ---- gather ------------------------------------------------------------ */
/* dst[p][0..C) = src[rows[p]][0..C), rows of dst `ld` elements apart, in
 * units of U (a 2-, 4-, 8- or 16-byte type dividing both row sizes). A
 * block is 32 lanes over a row's units times 8 rows. */
template <typename U>
__global__ void eg_gather_kernel(const U *__restrict__ src,
                                 const int32_t *__restrict__ rows,
                                 U *__restrict__ dst, int64_t n_pairs,
                                 int units, int ld_units) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; p < n_pairs;
       p += (int64_t)gridDim.x * blockDim.y) {
    const int64_t s = __ldg(rows + p);
    const U *srow = src + s * units;
    U *drow = dst + p * ld_units;
    for (int u = threadIdx.x; u < units; u += 32)
      drow[u] = srow[u];
  }
}

template <typename U>
voxconv_status_t gather_as(voxconv_handle_t *h, const void *src,
                           const int32_t *rows, void *dst, int64_t n_pairs,
                           int64_t row_bytes, int64_t ld_bytes) {
  const dim3 block(32, 8);
  const unsigned grid = vc_grid_1d(n_pairs, 8, 1 << 16);
  eg_gather_kernel<U><<<grid, block, 0, vc_cuda_stream(h)>>>(
      (const U *)src, rows, (U *)dst, n_pairs, (int)(row_bytes / sizeof(U)),
      (int)(ld_bytes / sizeof(U)));
  VC_CUDA_LAUNCH_CHECK(h, "eg_gather_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* Gathers rows of `channels` elements of `es` bytes with the widest copy
 * unit that the row sizes and the source alignment allow. */
voxconv_status_t gather_rows(voxconv_handle_t *h, const void *src,
                             const int32_t *rows, void *dst, int64_t n_pairs,
                             int64_t channels, int64_t ld, size_t es) {
  if (n_pairs <= 0)
    return VOXCONV_STATUS_SUCCESS;
  const int64_t rb = channels * (int64_t)es, lb = ld * (int64_t)es;
  const uintptr_t align = (uintptr_t)src | (uintptr_t)dst;
  if (rb % 16 == 0 && lb % 16 == 0 && align % 16 == 0)
    return gather_as<uint4>(h, src, rows, dst, n_pairs, rb, lb);
  if (rb % 8 == 0 && lb % 8 == 0 && align % 8 == 0)
    return gather_as<uint2>(h, src, rows, dst, n_pairs, rb, lb);
  if (rb % 4 == 0 && lb % 4 == 0 && align % 4 == 0)
    return gather_as<uint32_t>(h, src, rows, dst, n_pairs, rb, lb);
  return gather_as<uint16_t>(h, src, rows, dst, n_pairs, rb, lb);
}

/* ---- scatter ----------------------------------------------------------- */
/* acc[rows[p]][c] += g[p][c] (float atomics). */
__global__ void eg_scatter_add_kernel(const float *__restrict__ g,
                                      const int32_t *__restrict__ rows,
                                      float *__restrict__ acc, int64_t n_pairs,
                                      int channels, int64_t ldg) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; p < n_pairs;
       p += (int64_t)gridDim.x * blockDim.y) {
    const int64_t r = __ldg(rows + p);
    for (int c = threadIdx.x; c < channels; c += 32)
      atomicAdd(acc + r * channels + c, g[p * ldg + c]);
  }
}

/* pidx[rows[p] * kvol + k(p)] = p, k(p) found in the offsets by bisection.
 * Each (row, k) has at most one pair, so the writes never collide. */
__global__ void eg_pair_index_kernel(const int32_t *__restrict__ rows,
                                     const vcc_pair_offsets_t po, int kvol,
                                     int32_t *__restrict__ pidx,
                                     int64_t n_pairs) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n_pairs;
       p += (int64_t)gridDim.x * blockDim.x) {
    int lo = 0, hi = kvol - 1; /* largest k with po[k] <= p */
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (po.po[mid] <= p)
        lo = mid;
      else
        hi = mid - 1;
    }
    pidx[(int64_t)__ldg(rows + p) * kvol + lo] = (int32_t)p;
  }
}

/* out[r][c] = sum over k = 0..kvol-1 (in order) of g[pidx[r][k]][c]. */
template <typename T>
__global__ void eg_gather_reduce_kernel(const float *__restrict__ g,
                                        const int32_t *__restrict__ pidx,
                                        T *__restrict__ out, int64_t n_rows,
                                        int kvol, int channels, int64_t ldg) {
  for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < n_rows;
       r += (int64_t)gridDim.x * blockDim.y) {
    const int32_t *pr = pidx + r * kvol;
    for (int c0 = 0; c0 < channels; c0 += 32) {
      const int c = c0 + threadIdx.x;
      float s = 0.f;
      for (int k = 0; k < kvol; k++) {
        const int32_t p = __ldg(pr + k);
        if (p >= 0 && c < channels)
          s += g[(int64_t)p * ldg + c];
      }
      if (c < channels)
        vcc_st(out + r * channels + c, s);
    }
  }
}

/* The same with 4 channels per thread (channels % 4 == 0, G rows 16-byte
 * aligned since ldg % 8 == 0): one thread per (row, 4 channels), the 27
 * (pidx, G) loads of a row independent of each other. */
template <typename T>
__global__ void eg_gather_reduce4_kernel(const float *__restrict__ g,
                                         const int32_t *__restrict__ pidx,
                                         T *__restrict__ out, int64_t n_rows,
                                         int kvol, int channels, int64_t ldg) {
  const int vec = channels / 4;
  const int64_t total = n_rows * vec;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / vec;
    const int c = (int)(e - r * vec) * 4;
    const int32_t *pr = pidx + r * kvol;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 9
    for (int k = 0; k < kvol; k++) {
      const int32_t p = __ldg(pr + k);
      if (p >= 0) {
        const float4 v =
            __ldg(reinterpret_cast<const float4 *>(g + (int64_t)p * ldg + c));
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
    }
    T *o = out + r * channels + c;
    vcc_st(o, s.x);
    vcc_st(o + 1, s.y);
    vcc_st(o + 2, s.z);
    vcc_st(o + 3, s.w);
  }
}

/* ---- cuBLAS ------------------------------------------------------------- */
cudaDataType_t cuda_type(voxconv_dtype_t dt) {
  return dt == VOXCONV_DTYPE_F32   ? CUDA_R_32F
         : dt == VOXCONV_DTYPE_F16 ? CUDA_R_16F
                                   : CUDA_R_16BF;
}
/* fp32 accumulation always; PEDANTIC for f32 so that neither the math mode
 * nor NVIDIA_TF32_OVERRIDE can route it through TF32 tensor cores. */
cublasComputeType_t compute_type(voxconv_dtype_t dt) {
  return dt == VOXCONV_DTYPE_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC
                                 : CUBLAS_COMPUTE_32F;
}

/* ---- the three passes ---------------------------------------------------- */
typedef struct eg_layout {
  char *gathered;  /* [P][lda] dtype: x (fwd), dy (dgrad), x (wgrad) */
  char *gathered2; /* [P][ldb] dtype: dy (wgrad) */
  float *gemm_out; /* [P][ldg] f32 (fwd, dgrad) */
  int32_t *pidx;   /* [rows][kvol] (det fwd/dgrad) */
  float *acc;      /* f32 accumulator (atomic fwd/dgrad, f16/bf16; wgrad) */
} eg_layout_t;

/* Pairs per tensor-core wgrad chunk: 256, doubled while the partials
 * (one cin x cout fp32 slab per chunk) would exceed 1 GiB. */
int64_t eg_wgrad_chunk(const vc_conv_problem_t *p) {
  const int64_t slab = p->cin * p->cout * (int64_t)sizeof(float);
  const int64_t budget = (int64_t)1 << 30;
  int64_t L = 256;
  while ((p->kmap->n_pairs / L + p->kmap->kvol) * slab > budget &&
         L < ((int64_t)1 << 30))
    L *= 2;
  return L;
}

/* Both workspace_size() and run() carve through this, so they agree. */
void eg_carve(const vc_conv_problem_t *p, int det, vcc_carver_t *c,
              eg_layout_t *L) {
  const voxconv_kmap_t *km = p->kmap;
  const int64_t P = km->n_pairs;
  const size_t es = vcc_dtype_bytes(p->dtype);
  const int f32 = p->dtype == VOXCONV_DTYPE_F32;
  memset(L, 0, sizeof *L);
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_CONV_DGRAD: {
    const int fwd = p->pass == VOXCONV_PASS_CONV_FWD;
    const int64_t r_ch = fwd ? p->cin : p->cout; /* reduction channels */
    const int64_t o_ch = fwd ? p->cout : p->cin; /* output channels */
    const int64_t n_rows = fwd ? km->n_out : km->n_in;
    L->gathered = (char *)vcc_take(c, (size_t)(P * vcc_padded_ld(r_ch)) * es);
    L->gemm_out =
        (float *)vcc_take(c, (size_t)(P * vcc_padded_ld(o_ch)) * sizeof(float));
    if (det)
      L->pidx =
          (int32_t *)vcc_take(c, (size_t)(n_rows * km->kvol) * sizeof(int32_t));
    else if (!f32)
      L->acc = (float *)vcc_take(c, (size_t)(n_rows * o_ch) * sizeof(float));
    break;
  }
  case VOXCONV_PASS_CONV_WGRAD:
    L->gathered = (char *)vcc_take(c, (size_t)(P * vcc_padded_ld(p->cin)) * es);
    L->gathered2 =
        (char *)vcc_take(c, (size_t)(P * vcc_padded_ld(p->cout)) * es);
    if (!f32) /* chunk partials */
      L->acc = (float *)vcc_take(
          c, (size_t)(vcc_total_chunks(km, eg_wgrad_chunk(p)) * p->cin *
                      p->cout) *
                 sizeof(float));
    break;
  default:
    break;
  }
}

size_t eg_workspace(const vc_conv_problem_t *p, int det) {
  vcc_carver_t c = {NULL, 0};
  eg_layout_t L;
  eg_carve(p, det, &c, &L);
  return c.used;
}

voxconv_status_t eg_fwd_dgrad(voxconv_handle_t *h, const vc_conv_problem_t *p,
                              const eg_layout_t *L, int det) {
  const voxconv_kmap_t *km = p->kmap;
  const cudaStream_t st = vc_cuda_stream(h);
  const int fwd = p->pass == VOXCONV_PASS_CONV_FWD;
  const int64_t cin = p->cin, cout = p->cout;
  const int64_t r_ch = fwd ? cin : cout, o_ch = fwd ? cout : cin;
  const int64_t lda = vcc_padded_ld(r_ch), ldg = vcc_padded_ld(o_ch);
  const int64_t n_rows = fwd ? km->n_out : km->n_in;
  const int32_t *src_rows = fwd ? km->in_rows : km->out_rows;
  const int32_t *dst_rows = fwd ? km->out_rows : km->in_rows;
  const int64_t P = km->n_pairs;
  const size_t es = vcc_dtype_bytes(p->dtype);
  const int f32 = p->dtype == VOXCONV_DTYPE_F32;

  if (n_rows <= 0)
    return VOXCONV_STATUS_SUCCESS;
  if (P <= 0) { /* nothing reaches any output: zeros */
    VC_CUDA_TRY(h, cudaMemsetAsync(p->c, 0, (size_t)(n_rows * o_ch) * es, st));
    return VOXCONV_STATUS_SUCCESS;
  }

  VC_CHECK(gather_rows(h, p->a, src_rows, L->gathered, P, r_ch, lda, es));

  cublasHandle_t cb = vc_cuda_cublas(h);
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t ty = cuda_type(p->dtype);
  const cublasComputeType_t ct = compute_type(p->dtype);
  for (int k = 0; k < km->kvol; k++) {
    const int64_t p0 = km->pair_offsets[k];
    const int64_t pk = km->pair_offsets[k + 1] - p0;
    if (pk <= 0)
      continue;
    const char *wk = (const char *)p->b + (size_t)(k * cin * cout) * es;
    const char *ak = L->gathered + (size_t)(p0 * lda) * es;
    float *gk = L->gemm_out + p0 * ldg;
    if (fwd) /* G_k[pk][cout] = Xg_k[pk][cin] W_k[cin][cout] */
      VC_CUBLAS_TRY(h, cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_N, (int)cout,
                                    (int)pk, (int)cin, &one, wk, ty, (int)cout,
                                    ak, ty, (int)lda, &zero, gk, CUDA_R_32F,
                                    (int)ldg, ct, CUBLAS_GEMM_DEFAULT));
    else /* G_k[pk][cin] = DYg_k[pk][cout] W_k^T[cout][cin] */
      VC_CUBLAS_TRY(h, cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, (int)cin,
                                    (int)pk, (int)cout, &one, wk, ty, (int)cout,
                                    ak, ty, (int)lda, &zero, gk, CUDA_R_32F,
                                    (int)ldg, ct, CUBLAS_GEMM_DEFAULT));
  }

  const dim3 block(32, 8);
  if (det) {
    VC_CUDA_TRY(h, cudaMemsetAsync(L->pidx, 0xFF,
                                   (size_t)(n_rows * km->kvol) * 4, st));
    vcc_pair_offsets_t po;
    vcc_fill_pair_offsets(km, &po);
    eg_pair_index_kernel<<<vc_grid_1d(P, 256, 1 << 16), 256, 0, st>>>(
        dst_rows, po, km->kvol, L->pidx, P);
    VC_CUDA_LAUNCH_CHECK(h, "eg_pair_index_kernel");
#define EG_REDUCE(T)                                                           \
  do {                                                                         \
    if (o_ch % 4 == 0)                                                         \
      eg_gather_reduce4_kernel<T>                                              \
          <<<vc_grid_1d(n_rows * (o_ch / 4), 256, 1 << 18), 256, 0, st>>>(     \
              L->gemm_out, L->pidx, (T *)p->c, n_rows, km->kvol, (int)o_ch,    \
              ldg);                                                            \
    else                                                                       \
      eg_gather_reduce_kernel<T>                                               \
          <<<vc_grid_1d(n_rows, 8, 1 << 16), block, 0, st>>>(                  \
              L->gemm_out, L->pidx, (T *)p->c, n_rows, km->kvol, (int)o_ch,    \
              ldg);                                                            \
  } while (0)
    if (p->dtype == VOXCONV_DTYPE_F32)
      EG_REDUCE(float);
    else if (p->dtype == VOXCONV_DTYPE_F16)
      EG_REDUCE(__half);
    else
      EG_REDUCE(__nv_bfloat16);
#undef EG_REDUCE
    VC_CUDA_LAUNCH_CHECK(h, "eg_gather_reduce_kernel");
    return VOXCONV_STATUS_SUCCESS;
  }

  float *acc = f32 ? (float *)p->c : L->acc;
  VC_CUDA_TRY(h, cudaMemsetAsync(acc, 0, (size_t)(n_rows * o_ch) * 4, st));
  eg_scatter_add_kernel<<<vc_grid_1d(P, 8, 1 << 16), block, 0, st>>>(
      L->gemm_out, dst_rows, acc, P, (int)o_ch, ldg);
  VC_CUDA_LAUNCH_CHECK(h, "eg_scatter_add_kernel");
  if (!f32) {
    if (p->dtype == VOXCONV_DTYPE_F16)
      VC_CHECK(vcc_convert_f32<__half>(h, acc, (__half *)p->c, n_rows * o_ch));
    else
      VC_CHECK(vcc_convert_f32<__nv_bfloat16>(h, acc, (__nv_bfloat16 *)p->c,
                                              n_rows * o_ch));
  }
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t eg_wgrad(voxconv_handle_t *h, const vc_conv_problem_t *p,
                          const eg_layout_t *L) {
  const voxconv_kmap_t *km = p->kmap;
  const cudaStream_t st = vc_cuda_stream(h);
  const int64_t cin = p->cin, cout = p->cout;
  const int64_t ldx = vcc_padded_ld(cin), ldy = vcc_padded_ld(cout);
  const int64_t P = km->n_pairs;
  const size_t es = vcc_dtype_bytes(p->dtype);
  const int64_t slab = cin * cout, wel = (int64_t)km->kvol * slab;
  const int f32 = p->dtype == VOXCONV_DTYPE_F32;

  if (P <= 0) {
    VC_CUDA_TRY(h, cudaMemsetAsync(p->c, 0, (size_t)wel * es, st));
    return VOXCONV_STATUS_SUCCESS;
  }
  VC_CHECK(gather_rows(h, p->a, km->in_rows, L->gathered, P, cin, ldx, es));
  VC_CHECK(gather_rows(h, p->b, km->out_rows, L->gathered2, P, cout, ldy, es));
  cublasHandle_t cb = vc_cuda_cublas(h);
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t ty = cuda_type(p->dtype);
  const cublasComputeType_t ct = compute_type(p->dtype);

  /* dW_k[cin][cout] = Xg_k^T[cin][pk] DYg_k[pk][cout]; column-major:
   * dW_k^T[cout][cin] = DYg_k^T[cout][pk] Xg_k[pk][cin]. */
  if (f32) {
    float *dw = (float *)p->c;
    /* Offsets without pairs get zeros; the GEMMs overwrite the others. */
    VC_CUDA_TRY(h, cudaMemsetAsync(dw, 0, (size_t)wel * 4, st));
    for (int k = 0; k < km->kvol; k++) {
      const int64_t p0 = km->pair_offsets[k];
      const int64_t pk = km->pair_offsets[k + 1] - p0;
      if (pk <= 0)
        continue;
      const char *xk = L->gathered + (size_t)(p0 * ldx) * es;
      const char *yk = L->gathered2 + (size_t)(p0 * ldy) * es;
      VC_CUBLAS_TRY(h, cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout,
                                    (int)cin, (int)pk, &one, yk, ty, (int)ldy,
                                    xk, ty, (int)ldx, &zero, dw + k * slab,
                                    CUDA_R_32F, (int)cout, ct,
                                    CUBLAS_GEMM_DEFAULT));
    }
    return VOXCONV_STATUS_SUCCESS;
  }

  const int64_t chunk = eg_wgrad_chunk(p);
  int64_t slot = 0;
  for (int k = 0; k < km->kvol; k++) {
    const int64_t p0 = km->pair_offsets[k];
    const int64_t pk = km->pair_offsets[k + 1] - p0;
    const int64_t nfull = pk / chunk, tail = pk - nfull * chunk;
    const char *xk = L->gathered + (size_t)(p0 * ldx) * es;
    const char *yk = L->gathered2 + (size_t)(p0 * ldy) * es;
    if (nfull > 0)
      VC_CUBLAS_TRY(h, cublasGemmStridedBatchedEx(
                           cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout, (int)cin,
                           (int)chunk, &one, yk, ty, (int)ldy,
                           (long long)(chunk * ldy), xk, ty, (int)ldx,
                           (long long)(chunk * ldx), &zero, L->acc + slot * slab,
                           CUDA_R_32F, (int)cout, (long long)slab, (int)nfull,
                           ct, CUBLAS_GEMM_DEFAULT));
    if (tail > 0)
      VC_CUBLAS_TRY(
          h, cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout, (int)cin,
                          (int)tail, &one, yk + (size_t)(nfull * chunk * ldy) * es,
                          ty, (int)ldy, xk + (size_t)(nfull * chunk * ldx) * es,
                          ty, (int)ldx, &zero, L->acc + (slot + nfull) * slab,
                          CUDA_R_32F, (int)cout, ct, CUBLAS_GEMM_DEFAULT));
    slot += nfull + (tail > 0);
  }
  vcc_pair_offsets_t po;
  vcc_fill_pair_offsets(km, &po);
  if (p->dtype == VOXCONV_DTYPE_F16)
    vcc_chunk_reduce_kernel<__half><<<vc_grid_1d(wel, 256, 8192), 256, 0, st>>>(
        L->acc, (__half *)p->c, po, km->kvol, slab, chunk);
  else
    vcc_chunk_reduce_kernel<__nv_bfloat16>
        <<<vc_grid_1d(wel, 256, 8192), 256, 0, st>>>(
            L->acc, (__nv_bfloat16 *)p->c, po, km->kvol, slab, chunk);
  VC_CUDA_LAUNCH_CHECK(h, "vcc_chunk_reduce_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t eg_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                        void *workspace, int det) {
  VC_CUDA_DEVICE_GUARD(h);
  const voxconv_kmap_t *km = p->kmap;
  for (int k = 0; k < km->kvol; k++)
    if (km->pair_offsets[k + 1] - km->pair_offsets[k] > 0x7FFFFFFF)
      return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                     "explicit_gemm: offset %d has more than 2^31-1 pairs", k);
  if (km->n_pairs > 0x7FFFFFFF && det)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "explicit_gemm_det: %lld pairs do not fit int32 indices",
                   (long long)km->n_pairs);
  VcWorkspace scope(h);
  char *ws = NULL;
  VC_CHECK(vcc_workspace(scope, workspace, eg_workspace(p, det), &ws));
  vcc_carver_t c = {ws, 0};
  eg_layout_t L;
  eg_carve(p, det, &c, &L);
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_CONV_DGRAD:
    return eg_fwd_dgrad(h, p, &L, det);
  case VOXCONV_PASS_CONV_WGRAD:
    return eg_wgrad(h, p, &L);
  default:
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "explicit_gemm: pass %d is not a regular conv pass",
                   (int)p->pass);
  }
}

int eg_supports_nd(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  return vcc_supports_common(&vc_algo_cuda_explicit_gemm, h, p) &&
         !vcc_is_depthwise(p->pass) && p->cin <= 0x7FFFFFF &&
         p->cout <= 0x7FFFFFF;
}
int eg_supports_det(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  return vcc_supports_common(&vc_algo_cuda_explicit_gemm_det, h, p) &&
         !vcc_is_depthwise(p->pass) && p->cin <= 0x7FFFFFF &&
         p->cout <= 0x7FFFFFF && p->kmap->n_pairs <= 0x7FFFFFFF;
}
size_t eg_ws_nd(const vc_conv_problem_t *p, const vc_algo_params_t *prm) {
  (void)prm;
  return eg_workspace(p, 0);
}
size_t eg_ws_det(const vc_conv_problem_t *p, const vc_algo_params_t *prm) {
  (void)prm;
  return eg_workspace(p, 1);
}
voxconv_status_t eg_run_nd(voxconv_handle_t *h, const vc_conv_problem_t *p,
                           const vc_algo_params_t *prm, void *ws) {
  (void)prm;
  return eg_run(h, p, ws, 0);
}
voxconv_status_t eg_run_det(voxconv_handle_t *h, const vc_conv_problem_t *p,
                            const vc_algo_params_t *prm, void *ws) {
  (void)prm;
  return eg_run(h, p, ws, 1);
}

constexpr unsigned kConvPasses = (1u << VOXCONV_PASS_CONV_FWD) |
                                 (1u << VOXCONV_PASS_CONV_DGRAD) |
                                 (1u << VOXCONV_PASS_CONV_WGRAD);

} // namespace

extern "C" const vc_algo_t vc_algo_cuda_explicit_gemm = {
    {"explicit_gemm", VOXCONV_BACKEND_CUDA, kConvPasses, 0,
     "gather, cuBLAS GEMM per kernel offset (fp32 accumulation), scatter-add "
     "with float atomics"},
    eg_supports_nd,
    NULL,
    eg_ws_nd,
    eg_run_nd};

extern "C" const vc_algo_t vc_algo_cuda_explicit_gemm_det = {
    {"explicit_gemm_det", VOXCONV_BACKEND_CUDA, kConvPasses, 1,
     "gather, cuBLAS GEMM per kernel offset (fp32 accumulation), gather-reduce "
     "per output row in offset order (bitwise reproducible)"},
    eg_supports_det,
    NULL,
    eg_ws_det,
    eg_run_det};
