/* explicit_gemm / explicit_gemm_det: gather -> cuBLAS GEMM per kernel
 * offset -> scatter.
 *
 * All pairs of the map are gathered at once into a [rows][ld] buffer (pairs
 * grouped by offset, each offset's block padded to whole chunks of rows, so
 * every chunk belongs to one offset and one batched GEMM covers them all;
 * the per-offset counts live on the host in kmap->pair_offsets, so no
 * device->host sync).
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
 *               raised only to keep the partials under 1 GiB): the rows of
 *               each offset are padded with zeros to whole chunks, one
 *               strided-batched GEMM writes an fp32 partial per chunk and a
 *               kernel sums each offset's partials in chunk order. Measured on
 *               the H200 (cuBLAS 13.0): one GemmEx over K = all pairs of
 *               an offset (thousands) gave elements off by up to 32x the
 *               1e-3*rms floor (norm 6e-3), mask_gemm's error also grew
 *               with its K per slice, while K <= 160 (fwd/dgrad) was exact
 *               to the output rounding: the tensor-core fp32 accumulator
 *               loses precision over long K. *
 * Narrow inputs (cin <= 8, e.g. the 3 channels of a network's first layer)
 * take an im2col route instead, through the neighbour tables:
 *   Xexp[o][k*cin + c] = x[nbr_out[o][k]][c] (0 where there is none),
 *   fwd:   y = Xexp . W            (W is [kvol*cin][cout] row-major)
 *   dgrad: Z = dy . W^T, dx[i][c] = sum_k Z[nbr_in[i][k]][k*cin + c]
 *   wgrad: dW = Xexp^T . dy        (K = n_out in chunks of 256, fp32
 *                                   partials summed in order)
 * Xexp has kvol*cin values per output row instead of the 8-byte-per-pair
 * x gather plus the cout-wide gathers and fp32 G buffers of the pair path:
 * for 3 -> 64 at workload A's level 0 that is ~0.15 GB instead of ~4 GB.
 *
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

/* ---- padded gather (tensor-core wgrad) ----------------------------------
 * Offset k's pairs go to rows [ppo[k], ppo[k] + P_k) of the buffer, and
 * ppo[k+1] - ppo[k] = ceil(P_k / L) * L, the rows in between are zero: then
 * every chunk of L rows belongs to one offset, and one strided-batched GEMM
 * over all chunks replaces two calls per offset (launch overhead dominated
 * the small levels). 5.5 KB by value: CUDA >= 12.1 allows 32 KB of
 * parameters. */
typedef struct eg_padded_offsets {
  int64_t po[VOXCONV_KERNEL_VOLUME_MAX + 1];
  int64_t ppo[VOXCONV_KERNEL_VOLUME_MAX + 1];
  int kvol;
} eg_padded_offsets_t;

static void eg_fill_padded(const voxconv_kmap_t *km, int64_t L,
                           eg_padded_offsets_t *o) {
  memset(o, 0, sizeof *o);
  o->kvol = km->kvol;
  for (int k = 0; k <= km->kvol; k++)
    o->po[k] = km->pair_offsets[k];
  for (int k = 0; k < km->kvol; k++)
    o->ppo[k + 1] = o->ppo[k] + (o->po[k + 1] - o->po[k] + L - 1) / L * L;
}

template <typename U>
__global__ void eg_gather_padded_kernel(const U *__restrict__ src,
                                        const int32_t *__restrict__ rows,
                                        U *__restrict__ dst, int64_t n_pairs,
                                        int units, int ld_units,
                                        const eg_padded_offsets_t off) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; p < n_pairs;
       p += (int64_t)gridDim.x * blockDim.y) {
    int lo = 0, hi = off.kvol - 1; /* largest k with po[k] <= p */
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (off.po[mid] <= p)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t s = __ldg(rows + p);
    const U *srow = src + s * units;
    U *drow = dst + (p - off.po[lo] + off.ppo[lo]) * ld_units;
    for (int u = threadIdx.x; u < units; u += 32)
      drow[u] = srow[u];
  }
}

/* Zeros the pad rows of every offset (grid.y = offset). */
template <typename U>
__global__ void eg_zero_pad_kernel(U *__restrict__ dst, int ld_units,
                                   const eg_padded_offsets_t off) {
  const int k = blockIdx.y;
  const int64_t end = off.ppo[k + 1];
  for (int64_t r = off.ppo[k] + (off.po[k + 1] - off.po[k]) +
                   (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
       r < end; r += (int64_t)gridDim.x * blockDim.y)
    for (int u = threadIdx.x; u < ld_units; u += 32)
      dst[r * ld_units + u] = U();
}

template <typename U>
voxconv_status_t gather_padded_as(voxconv_handle_t *h, const void *src,
                                  const int32_t *rows, void *dst,
                                  int64_t n_pairs, int64_t row_bytes,
                                  int64_t ld_bytes, int64_t L,
                                  const eg_padded_offsets_t *off,
                                  int zero_pad) {
  const dim3 block(32, 8);
  const cudaStream_t st = vc_cuda_stream(h);
  const int units = (int)(row_bytes / sizeof(U)),
            ld_units = (int)(ld_bytes / sizeof(U));
  if (n_pairs > 0) {
    eg_gather_padded_kernel<U><<<vc_grid_1d(n_pairs, 8, 1 << 16), block, 0, st>>>(
        (const U *)src, rows, (U *)dst, n_pairs, units, ld_units, *off);
    VC_CUDA_LAUNCH_CHECK(h, "eg_gather_padded_kernel");
  }
  if (zero_pad) {
    const dim3 zgrid((unsigned)vc_ceil_div<int64_t>(L, 8),
                     (unsigned)off->kvol);
    eg_zero_pad_kernel<U><<<zgrid, block, 0, st>>>((U *)dst, ld_units, *off);
    VC_CUDA_LAUNCH_CHECK(h, "eg_zero_pad_kernel");
  }
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t gather_rows_padded(voxconv_handle_t *h, const void *src,
                                    const int32_t *rows, void *dst,
                                    int64_t n_pairs, int64_t channels,
                                    int64_t ld, size_t es, int64_t L,
                                    const eg_padded_offsets_t *off,
                                    int zero_pad) {
  const int64_t rb = channels * (int64_t)es, lb = ld * (int64_t)es;
  const uintptr_t align = (uintptr_t)src | (uintptr_t)dst;
  if (rb % 16 == 0 && lb % 16 == 0 && align % 16 == 0)
    return gather_padded_as<uint4>(h, src, rows, dst, n_pairs, rb, lb, L, off, zero_pad);
  if (rb % 8 == 0 && lb % 8 == 0 && align % 8 == 0)
    return gather_padded_as<uint2>(h, src, rows, dst, n_pairs, rb, lb, L, off, zero_pad);
  if (rb % 4 == 0 && lb % 4 == 0 && align % 4 == 0)
    return gather_padded_as<uint32_t>(h, src, rows, dst, n_pairs, rb, lb, L,
                                      off, zero_pad);
  return gather_padded_as<uint16_t>(h, src, rows, dst, n_pairs, rb, lb, L, off, zero_pad);
}

/* ---- scatter ----------------------------------------------------------- */
/* Largest k with off.po[k] <= p: the offset of pair p. */
static __device__ __forceinline__ int eg_offset_of(const eg_padded_offsets_t &off,
                                                  int64_t p) {
  int lo = 0, hi = off.kvol - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (off.po[mid] <= p)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* acc[rows[p]][c] += g[padded(p)][c] (float atomics). */
__global__ void eg_scatter_add_kernel(const float *__restrict__ g,
                                      const int32_t *__restrict__ rows,
                                      float *__restrict__ acc, int64_t n_pairs,
                                      int channels, int64_t ldg,
                                      const eg_padded_offsets_t off) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; p < n_pairs;
       p += (int64_t)gridDim.x * blockDim.y) {
    const int k = eg_offset_of(off, p);
    const int64_t gp = p - off.po[k] + off.ppo[k];
    const int64_t r = __ldg(rows + p);
    for (int c = threadIdx.x; c < channels; c += 32)
      atomicAdd(acc + r * channels + c, g[gp * ldg + c]);
  }
}

/* pidx[rows[p] * kvol + k(p)] = padded(p), the G row of pair p. Each
 * (row, k) has at most one pair, so the writes never collide. */
__global__ void eg_pair_index_kernel(const int32_t *__restrict__ rows,
                                     const eg_padded_offsets_t off,
                                     int32_t *__restrict__ pidx,
                                     int64_t n_pairs) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n_pairs;
       p += (int64_t)gridDim.x * blockDim.x) {
    const int k = eg_offset_of(off, p);
    pidx[(int64_t)__ldg(rows + p) * off.kvol + k] =
        (int32_t)(p - off.po[k] + off.ppo[k]);
  }
}

/* Pointer arrays of the batched forward/dgrad GEMM: chunk c (rows
 * [c*L, (c+1)*L) of the padded buffers) uses the weights of its offset. */
__global__ void eg_fill_ptrs_kernel(const char *w, int64_t w_bytes_per_k,
                                    const char *a, int64_t a_bytes_per_chunk,
                                    float *g, int64_t g_elems_per_chunk,
                                    const eg_padded_offsets_t off, int64_t L,
                                    int64_t n_chunks, const void **A,
                                    const void **B, void **C) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n_chunks;
       c += (int64_t)gridDim.x * blockDim.x) {
    const int64_t pos = c * L;
    int lo = 0, hi = off.kvol - 1; /* largest k with ppo[k] <= pos */
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (off.ppo[mid] <= pos)
        lo = mid;
      else
        hi = mid - 1;
    }
    A[c] = w + lo * w_bytes_per_k;
    B[c] = a + c * a_bytes_per_chunk;
    C[c] = g + c * g_elems_per_chunk;
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

/* ---- im2col route (narrow inputs) ---------------------------------------- */
/* xe[o][k*cin + c] = x[nbr[o][k]][c] or 0; rows ld_e elements apart (the
 * pad columns are zeroed too, so a GEMM may read them). */
template <typename T>
__global__ void eg_im2col_kernel(const T *__restrict__ x,
                                 const int32_t *__restrict__ nbr,
                                 T *__restrict__ xe, int64_t n_rows, int kvol,
                                 int cin, int64_t ld_e) {
  const int64_t total = n_rows * ld_e;
  const int kc = kvol * cin;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = e / ld_e;
    const int j = (int)(e - o * ld_e);
    float v = 0.f;
    if (j < kc) {
      const int k = j / cin, c = j - k * cin;
      const int32_t s = __ldg(nbr + o * kvol + k);
      if (s >= 0)
        v = vcc_ld(x + (int64_t)s * cin + c);
    }
    vcc_st(xe + e, v);
  }
}

/* dx[i][c] = sum over k (in order) of z[nbr_in[i][k]][k*cin + c]. */
template <typename T>
__global__ void eg_col2im_kernel(const float *__restrict__ z,
                                 const int32_t *__restrict__ nbr,
                                 T *__restrict__ dx, int64_t n_rows, int kvol,
                                 int cin, int64_t ld_z) {
  const int64_t total = n_rows * cin;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / cin;
    const int c = (int)(e - i * cin);
    const int32_t *nr = nbr + i * kvol;
    float s = 0.f;
    for (int k = 0; k < kvol; k++) {
      const int32_t o = __ldg(nr + k);
      if (o >= 0)
        s += z[(int64_t)o * ld_z + k * cin + c];
    }
    vcc_st(dx + e, s);
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
  void **ptrs;     /* [3][chunks] batched-GEMM pointers (fwd, dgrad) */
  char *xexp;      /* im2col: [n_out][ld_e] dtype (fwd, wgrad) */
  float *z;        /* im2col: [n_out][ld_e] f32 (dgrad) */
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

/* Rows per batched GEMM of forward/dgrad: each offset's pairs are padded
 * to whole chunks and all chunks go to one cublasGemmBatchedEx (one launch
 * instead of one per offset, which dominated the small levels). */
int eg_per_offset(const voxconv_kmap_t *km);
int64_t eg_rows_chunk(const voxconv_kmap_t *km) {
  /* Per-offset GEMMs need no padding: chunk 1 makes the padded layout the
   * plain one (and the gather skips the offset search). */
  if (eg_per_offset(km))
    return 1;
  return km->n_pairs >= (int64_t)km->kvol * 4096 ? 1024 : 128;
}

/* The im2col route for narrow inputs (see the top comment). */
int eg_use_im2col(const vc_conv_problem_t *p) {
  return p->cin <= 8 && p->kmap->n_out <= 0x7FFFFFFF &&
         (int64_t)p->kmap->kvol * p->cin <= 0x7FFFFFF;
}
int64_t eg_im2col_ld(const vc_conv_problem_t *p) {
  return vcc_padded_ld((int64_t)p->kmap->kvol * p->cin);
}
constexpr int64_t kIm2colChunk = 256; /* output rows per wgrad K chunk */

/* Big maps: one GEMM per offset (large GEMMs run at full rate); small
 * ones: one batched call over padded chunks (launches dominate there). */
int eg_per_offset(const voxconv_kmap_t *km) {
  return km->n_pairs >= (int64_t)km->kvol * 16384;
}

/* Both workspace_size() and run() carve through this, so they agree. */
void eg_carve(const vc_conv_problem_t *p, int det, vcc_carver_t *c,
              eg_layout_t *L) {
  const voxconv_kmap_t *km = p->kmap;
  const int64_t P = km->n_pairs;
  const size_t es = vcc_dtype_bytes(p->dtype);
  const int f32 = p->dtype == VOXCONV_DTYPE_F32;
  memset(L, 0, sizeof *L);
  if (eg_use_im2col(p)) {
    const int64_t rows = km->n_out, ld_e = eg_im2col_ld(p);
    if (p->pass == VOXCONV_PASS_CONV_DGRAD) {
      L->z = (float *)vcc_take(c, (size_t)(rows * ld_e) * sizeof(float));
    } else {
      L->xexp = (char *)vcc_take(c, (size_t)(rows * ld_e) * es);
      if (p->pass == VOXCONV_PASS_CONV_FWD && !f32) /* fp32 product */
        L->acc = (float *)vcc_take(c, (size_t)(rows * p->cout) * sizeof(float));
      if (p->pass == VOXCONV_PASS_CONV_WGRAD && !f32)
        L->acc = (float *)vcc_take(
            c, (size_t)(((rows + kIm2colChunk - 1) / kIm2colChunk) *
                        km->kvol * p->cin * p->cout) *
                   sizeof(float));
    }
    return;
  }
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_CONV_DGRAD: {
    const int fwd = p->pass == VOXCONV_PASS_CONV_FWD;
    const int64_t r_ch = fwd ? p->cin : p->cout; /* reduction channels */
    const int64_t o_ch = fwd ? p->cout : p->cin; /* output channels */
    const int64_t n_rows = fwd ? km->n_out : km->n_in;
    const int64_t chunk = eg_rows_chunk(km);
    const int64_t chunks = vcc_total_chunks(km, chunk);
    L->gathered =
        (char *)vcc_take(c, (size_t)(chunks * chunk * vcc_padded_ld(r_ch)) * es);
    L->gemm_out = (float *)vcc_take(
        c, (size_t)(chunks * chunk * vcc_padded_ld(o_ch)) * sizeof(float));
    L->ptrs = (void **)vcc_take(c, (size_t)(3 * chunks) * sizeof(void *));
    if (det)
      L->pidx =
          (int32_t *)vcc_take(c, (size_t)(n_rows * km->kvol) * sizeof(int32_t));
    else if (!f32)
      L->acc = (float *)vcc_take(c, (size_t)(n_rows * o_ch) * sizeof(float));
    break;
  }
  case VOXCONV_PASS_CONV_WGRAD: {
    /* f16/bf16: rows padded per offset to whole chunks (see above) */
    const int64_t chunks = f32 ? 0 : vcc_total_chunks(km, eg_wgrad_chunk(p));
    const int64_t rows =
        f32 || eg_per_offset(km) ? P : chunks * eg_wgrad_chunk(p);
    L->gathered =
        (char *)vcc_take(c, (size_t)(rows * vcc_padded_ld(p->cin)) * es);
    L->gathered2 =
        (char *)vcc_take(c, (size_t)(rows * vcc_padded_ld(p->cout)) * es);
    if (!f32) /* chunk partials */
      L->acc = (float *)vcc_take(
          c, (size_t)(chunks * p->cin * p->cout) * sizeof(float));
    break;
  }
  default:
    break;
  }
}

size_t eg_workspace(const vc_conv_problem_t *p, int det) {
  /* A pending map's pair counts are not on the host yet: report none, and
   * run() (which waits for them first) allocates what it needs itself. */
  if (!p->kmap->pair_offsets)
    return 0;
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

  const int64_t chunk = eg_rows_chunk(km);
  eg_padded_offsets_t off;
  eg_fill_padded(km, chunk, &off);
  const int64_t n_chunks = off.ppo[km->kvol] / chunk;
  if (off.ppo[km->kvol] > 0x7FFFFFFF)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "explicit_gemm: %lld padded pairs exceed int32 indices",
                   (long long)off.ppo[km->kvol]);
  /* Pad rows stay uninitialised: their G rows are never read. */
  const int per_offset = eg_per_offset(km);
  if (per_offset)
    VC_CHECK(gather_rows(h, p->a, src_rows, L->gathered, P, r_ch, lda, es));
  else
    VC_CHECK(gather_rows_padded(h, p->a, src_rows, L->gathered, P, r_ch, lda,
                                es, chunk, &off, 0));
  const void **A = (const void **)L->ptrs;
  const void **B = (const void **)(L->ptrs + n_chunks);
  void **C = L->ptrs + 2 * n_chunks;
  if (!per_offset) {
    eg_fill_ptrs_kernel<<<vc_grid_1d(n_chunks, 256, 4096), 256, 0, st>>>(
        (const char *)p->b, (int64_t)(cin * cout * (int64_t)es), L->gathered,
        (int64_t)(chunk * lda * (int64_t)es), L->gemm_out, chunk * ldg, off,
        chunk, n_chunks, A, B, C);
    VC_CUDA_LAUNCH_CHECK(h, "eg_fill_ptrs_kernel");
  }

  cublasHandle_t cb = vc_cuda_cublas(h);
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t ty = cuda_type(p->dtype);
  const cublasComputeType_t ct = compute_type(p->dtype);
  /* fwd:   G_c[L][cout] = Xg_c[L][cin] W_k[cin][cout]
   * dgrad: G_c[L][cin]  = DYg_c[L][cout] W_k^T[cout][cin] */
  const int64_t max_batch = 32768;
  const cublasOperation_t opw = fwd ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublasStatus_t bs =
      per_offset ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
  for (int64_t c0 = 0; c0 < n_chunks && bs == CUBLAS_STATUS_SUCCESS;
       c0 += max_batch) {
    const int64_t nb = n_chunks - c0 < max_batch ? n_chunks - c0 : max_batch;
    bs = cublasGemmBatchedEx(cb, opw, CUBLAS_OP_N, (int)o_ch, (int)chunk,
                             (int)r_ch, &one, A + c0, ty, (int)cout, B + c0, ty,
                             (int)lda, &zero, C + c0, CUDA_R_32F, (int)ldg,
                             (int)nb, ct, CUBLAS_GEMM_DEFAULT);
  }
  if (bs == CUBLAS_STATUS_NOT_SUPPORTED) {
    /* Big maps (or a cuBLAS without this batched type combination): one
     * GEMM per offset over the same padded layout. */
    for (int k = 0; k < km->kvol; k++) {
      const int64_t rows = off.ppo[k + 1] - off.ppo[k];
      if (rows <= 0)
        continue;
      VC_CUBLAS_TRY(h, cublasGemmEx(
                           cb, opw, CUBLAS_OP_N, (int)o_ch, (int)rows, (int)r_ch,
                           &one, (const char *)p->b + (size_t)(k * cin * cout) * es,
                           ty, (int)cout,
                           L->gathered + (size_t)(off.ppo[k] * lda) * es, ty,
                           (int)lda, &zero, L->gemm_out + off.ppo[k] * ldg,
                           CUDA_R_32F, (int)ldg, ct, CUBLAS_GEMM_DEFAULT));
    }
  } else if (bs != CUBLAS_STATUS_SUCCESS) {
    return vc_cublas_fail(h, bs, "cublasGemmBatchedEx", __func__);
  }

  const dim3 block(32, 8);
  if (det) {
    VC_CUDA_TRY(h, cudaMemsetAsync(L->pidx, 0xFF,
                                   (size_t)(n_rows * km->kvol) * 4, st));
    eg_pair_index_kernel<<<vc_grid_1d(P, 256, 1 << 16), 256, 0, st>>>(
        dst_rows, off, L->pidx, P);
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
      L->gemm_out, dst_rows, acc, P, (int)o_ch, ldg, off);
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
  cublasHandle_t cb = vc_cuda_cublas(h);
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t ty = cuda_type(p->dtype);
  const cublasComputeType_t ct = compute_type(p->dtype);

  /* dW_k[cin][cout] = Xg_k^T[cin][pk] DYg_k[pk][cout]; column-major:
   * dW_k^T[cout][cin] = DYg_k^T[cout][pk] Xg_k[pk][cin]. */
  if (f32) {
    VC_CHECK(gather_rows(h, p->a, km->in_rows, L->gathered, P, cin, ldx, es));
    VC_CHECK(
        gather_rows(h, p->b, km->out_rows, L->gathered2, P, cout, ldy, es));
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
  const int per_offset = eg_per_offset(km);
  eg_padded_offsets_t off;
  eg_fill_padded(km, chunk, &off);
  const int64_t n_chunks = off.ppo[km->kvol] / chunk;
  const int64_t max_batch = 32768;
  if (per_offset) {
    /* Big maps: plain gathers, per offset one strided batch over its full
     * chunks and one GEMM for its tail (measured faster there than the
     * padded layout and a single batch). */
    VC_CHECK(gather_rows(h, p->a, km->in_rows, L->gathered, P, cin, ldx, es));
    VC_CHECK(
        gather_rows(h, p->b, km->out_rows, L->gathered2, P, cout, ldy, es));
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
                             (long long)(chunk * ldx), &zero,
                             L->acc + slot * slab, CUDA_R_32F, (int)cout,
                             (long long)slab, (int)nfull, ct,
                             CUBLAS_GEMM_DEFAULT));
      if (tail > 0)
        VC_CUBLAS_TRY(h, cublasGemmEx(
                             cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout, (int)cin,
                             (int)tail, &one,
                             yk + (size_t)(nfull * chunk * ldy) * es, ty,
                             (int)ldy, xk + (size_t)(nfull * chunk * ldx) * es,
                             ty, (int)ldx, &zero, L->acc + (slot + nfull) * slab,
                             CUDA_R_32F, (int)cout, ct, CUBLAS_GEMM_DEFAULT));
      slot += nfull + (tail > 0);
    }
  } else {
    /* Small maps: rows padded per offset to whole chunks, one batch. */
    VC_CHECK(gather_rows_padded(h, p->a, km->in_rows, L->gathered, P, cin,
                                ldx, es, chunk, &off, 1));
    VC_CHECK(gather_rows_padded(h, p->b, km->out_rows, L->gathered2, P, cout,
                                ldy, es, chunk, &off, 1));
  }
  for (int64_t c0 = 0; !per_offset && c0 < n_chunks; c0 += max_batch) {
    const int64_t nb = n_chunks - c0 < max_batch ? n_chunks - c0 : max_batch;
    VC_CUBLAS_TRY(h, cublasGemmStridedBatchedEx(
                         cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout, (int)cin,
                         (int)chunk, &one,
                         L->gathered2 + (size_t)(c0 * chunk * ldy) * es, ty,
                         (int)ldy, (long long)(chunk * ldy),
                         L->gathered + (size_t)(c0 * chunk * ldx) * es, ty,
                         (int)ldx, (long long)(chunk * ldx), &zero,
                         L->acc + c0 * slab, CUDA_R_32F, (int)cout,
                         (long long)slab, (int)nb, ct, CUBLAS_GEMM_DEFAULT));
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

template <typename T>
voxconv_status_t eg_im2col_t(voxconv_handle_t *h, const vc_conv_problem_t *p,
                             const eg_layout_t *L) {
  const voxconv_kmap_t *km = p->kmap;
  const cudaStream_t st = vc_cuda_stream(h);
  const int64_t cin = p->cin, cout = p->cout, n_out = km->n_out;
  const int kc = km->kvol * (int)cin;
  const int64_t ld_e = eg_im2col_ld(p);
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t ty = cuda_type(p->dtype);
  const cublasComputeType_t ct = compute_type(p->dtype);
  const int f32 = p->dtype == VOXCONV_DTYPE_F32;

  if (p->pass == VOXCONV_PASS_CONV_DGRAD) {
    if (km->n_in <= 0)
      return VOXCONV_STATUS_SUCCESS;
    if (n_out > 0) {
      /* Z[o][j] = sum_n dy[o][n] W[j][n]: column-major Z^T = W^T-op . dy */
      cublasHandle_t cb = vc_cuda_cublas(h);
      VC_CUBLAS_TRY(h, cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, kc,
                                    (int)n_out, (int)cout, &one, p->b, ty,
                                    (int)cout, p->a, ty, (int)cout, &zero, L->z,
                                    CUDA_R_32F, (int)ld_e, ct,
                                    CUBLAS_GEMM_DEFAULT));
    }
    const int64_t total = km->n_in * cin;
    eg_col2im_kernel<T><<<vc_grid_1d(total, 256, 1 << 18), 256, 0, st>>>(
        L->z, km->nbr_in, (T *)p->c, km->n_in, km->kvol, (int)cin, ld_e);
    VC_CUDA_LAUNCH_CHECK(h, "eg_col2im_kernel");
    return VOXCONV_STATUS_SUCCESS;
  }

  const int64_t wel = (int64_t)kc * cout;
  if (n_out <= 0) {
    if (p->pass == VOXCONV_PASS_CONV_WGRAD)
      VC_CUDA_TRY(h, cudaMemsetAsync(p->c, 0,
                                     (size_t)wel * vcc_dtype_bytes(p->dtype), st));
    return VOXCONV_STATUS_SUCCESS;
  }
  eg_im2col_kernel<T><<<vc_grid_1d(n_out * ld_e, 256, 1 << 18), 256, 0, st>>>(
      (const T *)p->a, km->nbr_out, (T *)L->xexp, n_out, km->kvol, (int)cin,
      ld_e);
  VC_CUDA_LAUNCH_CHECK(h, "eg_im2col_kernel");
  cublasHandle_t cb = vc_cuda_cublas(h);

  if (p->pass == VOXCONV_PASS_CONV_FWD) {
    /* y[n_out][cout] = Xexp[n_out][kc] W[kc][cout]. Always an fp32 product
     * first: written straight to bf16, cuBLAS (H200, 13.0) gave max_rel 2.8
     * at kvol 125 while f16 was fine (most likely split-K partials reduced
     * in the output type), so f16/bf16 are converted here. */
    float *y32 = f32 ? (float *)p->c : L->acc;
    VC_CUBLAS_TRY(h, cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_N, (int)cout,
                                  (int)n_out, kc, &one, p->b, ty, (int)cout,
                                  L->xexp, ty, (int)ld_e, &zero, y32,
                                  CUDA_R_32F, (int)cout, ct,
                                  CUBLAS_GEMM_DEFAULT));
    if (!f32)
      VC_CHECK(vcc_convert_f32<T>(h, y32, (T *)p->c, n_out * cout));
    return VOXCONV_STATUS_SUCCESS;
  }

  /* wgrad: dW[kc][cout] = Xexp^T dy; column-major dW^T = dy^T-op . Xexp */
  if (f32) {
    VC_CUBLAS_TRY(h, cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout, kc,
                                  (int)n_out, &one, p->b, ty, (int)cout,
                                  L->xexp, ty, (int)ld_e, &zero, p->c,
                                  CUDA_R_32F, (int)cout, ct,
                                  CUBLAS_GEMM_DEFAULT));
    return VOXCONV_STATUS_SUCCESS;
  }
  /* f16/bf16: K cut into chunks of kIm2colChunk rows (tensor-core
   * accumulation over long K is inexact), partials summed in order. */
  const int64_t Lc = kIm2colChunk, nfull = n_out / Lc, tail = n_out - nfull * Lc;
  const size_t es = vcc_dtype_bytes(p->dtype);
  if (nfull > 0)
    VC_CUBLAS_TRY(h, cublasGemmStridedBatchedEx(
                         cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout, kc, (int)Lc,
                         &one, p->b, ty, (int)cout, (long long)(Lc * cout),
                         L->xexp, ty, (int)ld_e, (long long)(Lc * ld_e), &zero,
                         L->acc, CUDA_R_32F, (int)cout, (long long)wel,
                         (int)nfull, ct, CUBLAS_GEMM_DEFAULT));
  if (tail > 0)
    VC_CUBLAS_TRY(h, cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_T, (int)cout, kc,
                                  (int)tail, &one,
                                  (const char *)p->b + (size_t)(nfull * Lc * cout) * es,
                                  ty, (int)cout,
                                  L->xexp + (size_t)(nfull * Lc * ld_e) * es, ty,
                                  (int)ld_e, &zero, L->acc + nfull * wel,
                                  CUDA_R_32F, (int)cout, ct,
                                  CUBLAS_GEMM_DEFAULT));
  /* One "offset" holding every chunk: the shared in-order chunk sum. */
  vcc_pair_offsets_t one_range;
  memset(&one_range, 0, sizeof one_range);
  one_range.po[1] = n_out;
  vcc_chunk_reduce_kernel<T><<<vc_grid_1d(wel, 256, 8192), 256, 0, st>>>(
      L->acc, (T *)p->c, one_range, 1, wel, Lc);
  VC_CUDA_LAUNCH_CHECK(h, "vcc_chunk_reduce_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t eg_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                        void *workspace, int det) {
  VC_CUDA_DEVICE_GUARD(h);
  const voxconv_kmap_t *km = p->kmap;
  /* per-offset GEMMs are sized on the host */
  const char *name = det ? "explicit_gemm_det" : "explicit_gemm";
  VC_CHECK(vc_kmap_wait(h, km, name));
  VC_CHECK(vc_cuda_kmap_pairs(h, km, name));
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
  if (eg_use_im2col(p))
    return VCC_DISPATCH_DTYPE(p->dtype, eg_im2col_t, h, p, &L);
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
    eg_run_nd,
    NULL};

extern "C" const vc_algo_t vc_algo_cuda_explicit_gemm_det = {
    {"explicit_gemm_det", VOXCONV_BACKEND_CUDA, kConvPasses, 1,
     "gather, cuBLAS GEMM per kernel offset (fp32 accumulation), gather-reduce "
     "per output row in offset order (bitwise reproducible)"},
    eg_supports_det,
    NULL,
    eg_ws_det,
    eg_run_det,
    NULL};
