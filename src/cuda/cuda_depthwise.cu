/* depthwise_explicit / depthwise_implicit: depthwise sparse convolution,
 * weights [kvol][C], y[o][c] = sum over pairs (i,o,k) of x[i][c] * w[k][c].
 *
 *  depthwise_implicit  forward over output rows (nbr_out), dgrad over input
 *                      rows (nbr_in): each output element is one thread's
 *                      fp32 sum in offset order, written once. wgrad: per
 *                      offset, the pair list is cut into S fixed ranges
 *                      (S from the largest offset's pair count), each block
 *                      sums its range in a fixed order, and the S partials
 *                      are added in order: bitwise reproducible.
 *  depthwise_explicit  pair-parallel: every (pair, channel) adds its product
 *                      into the output with a float atomic (into an fp32
 *                      accumulator for f16/bf16); wgrad blocks add their
 *                      partials with atomics. Good load balance on maps with
 *                      very uneven neighbour counts; not deterministic. */
#include "cuda_conv_common.cuh"

namespace {

/* out[r][c] = sum_k a[nbr[r][k]][c] * w[k][c]   (forward / dgrad) */
template <typename T>
__global__ void dw_rows_kernel(const T *__restrict__ a,
                               const int32_t *__restrict__ nbr,
                               const T *__restrict__ w, T *__restrict__ out,
                               int64_t n_rows, int kvol, int C) {
  const int64_t total = n_rows * C;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / C;
    const int c = (int)(e - r * C);
    const int32_t *nr = nbr + r * kvol;
    float s = 0.f;
    for (int k = 0; k < kvol; k++) {
      const int32_t src = __ldg(nr + k);
      if (src >= 0)
        s = fmaf(vcc_ld(a + (int64_t)src * C + c), vcc_ld(w + k * C + c), s);
    }
    vcc_st(out + e, s);
  }
}

/* Largest k with po[k] <= p. */
static __device__ __forceinline__ int offset_of_pair(
    const vcc_pair_offsets_t &po, int kvol, int64_t p) {
  int lo = 0, hi = kvol - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (po.po[mid] <= p)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* acc[dst[p]][c] += a[src[p]][c] * w[k(p)][c]   (explicit forward / dgrad) */
template <typename T>
__global__ void dw_pairs_atomic_kernel(const T *__restrict__ a,
                                       const int32_t *__restrict__ src_rows,
                                       const int32_t *__restrict__ dst_rows,
                                       const T *__restrict__ w,
                                       const vcc_pair_offsets_t po, int kvol,
                                       float *__restrict__ acc, int64_t n_pairs,
                                       int C) {
  const int64_t total = n_pairs * C;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = e / C;
    const int c = (int)(e - p * C);
    const int k = offset_of_pair(po, kvol, p);
    const float v = vcc_ld(a + (int64_t)__ldg(src_rows + p) * C + c) *
                    vcc_ld(w + (int64_t)k * C + c);
    atomicAdd(acc + (int64_t)__ldg(dst_rows + p) * C + c, v);
  }
}

/* Weight gradient partials. Block (32 channels x 8 lanes) for offset
 * k = blockIdx.y, range z = blockIdx.z of S: lane ly sums pairs
 * pb+ly, pb+ly+8, ... then the 8 lane sums are added in lane order.
 * ATOMIC: atomicAdd into dst[k][c]; else dst[z][k][c] = partial. */
template <typename T, bool ATOMIC>
__global__ void __launch_bounds__(256)
    dw_wgrad_kernel(const T *__restrict__ x, const T *__restrict__ dy,
                    const int32_t *__restrict__ in_rows,
                    const int32_t *__restrict__ out_rows,
                    const vcc_pair_offsets_t po, int kvol, int C, int S,
                    float *__restrict__ dst) {
  __shared__ float part[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int k = blockIdx.y, z = blockIdx.z;
  const int64_t begin = po.po[k], count = po.po[k + 1] - begin;
  const int64_t chunk = (count + S - 1) / S;
  const int64_t pb = begin + z * chunk;
  const int64_t pe = min(pb + chunk, begin + count);
  float s = 0.f;
  if (c < C)
    for (int64_t p = pb + threadIdx.y; p < pe; p += 8)
      s = fmaf(vcc_ld(x + (int64_t)__ldg(in_rows + p) * C + c),
               vcc_ld(dy + (int64_t)__ldg(out_rows + p) * C + c), s);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C)
    return;
  float t = 0.f;
#pragma unroll
  for (int l = 0; l < 8; l++)
    t += part[l][threadIdx.x];
  if (ATOMIC) {
    if (pb < pe)
      atomicAdd(dst + (int64_t)k * C + c, t);
  } else {
    dst[((int64_t)z * kvol + k) * C + c] = t;
  }
}

template <typename T>
__global__ void dw_wgrad_reduce_kernel(const float *__restrict__ part,
                                       T *__restrict__ dw, int64_t elems,
                                       int S) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < elems;
       e += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int z = 0; z < S; z++)
      s += part[(int64_t)z * elems + e];
    vcc_st(dw + e, s);
  }
}

/* Ranges per offset for wgrad: about 2048 pairs each, at most 64. Depends
 * only on the map, so the summation order is fixed for a given map. */
int wgrad_splits(const voxconv_kmap_t *km) {
  const int64_t m = vcc_max_pairs_per_offset(km);
  int64_t s = (m + 2047) / 2048;
  if (s < 1)
    s = 1;
  if (s > 64)
    s = 64;
  return (int)s;
}

size_t dw_workspace(const vc_conv_problem_t *p, int implicit) {
  const voxconv_kmap_t *km = p->kmap;
  /* Pending map, pair-list path: as eg_workspace (run() waits, then sizes
   * its own workspace). */
  if (!km->pair_offsets &&
      (!implicit || p->pass == VOXCONV_PASS_DEPTHWISE_WGRAD))
    return 0;
  const int64_t C = p->cin;
  const int f32 = p->dtype == VOXCONV_DTYPE_F32;
  vcc_carver_t c = {NULL, 0};
  switch (p->pass) {
  case VOXCONV_PASS_DEPTHWISE_FWD:
    if (!implicit && !f32)
      vcc_take(&c, (size_t)(km->n_out * C) * 4);
    break;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    if (!implicit && !f32)
      vcc_take(&c, (size_t)(km->n_in * C) * 4);
    break;
  case VOXCONV_PASS_DEPTHWISE_WGRAD:
    if (implicit)
      vcc_take(&c, (size_t)((int64_t)wgrad_splits(km) * km->kvol * C) * 4);
    else if (!f32)
      vcc_take(&c, (size_t)((int64_t)km->kvol * C) * 4);
    break;
  default:
    break;
  }
  return c.used;
}

template <typename T>
voxconv_status_t dw_run_t(voxconv_handle_t *h, const vc_conv_problem_t *p,
                          char *ws, int implicit) {
  const voxconv_kmap_t *km = p->kmap;
  const cudaStream_t st = vc_cuda_stream(h);
  const int C = (int)p->cin, kvol = km->kvol;
  const int f32 = p->dtype == VOXCONV_DTYPE_F32;
  vcc_carver_t carve = {ws, 0};
  vcc_pair_offsets_t po;
  vcc_fill_pair_offsets(km, &po);

  if (p->pass == VOXCONV_PASS_DEPTHWISE_WGRAD) {
    const int64_t wel = (int64_t)kvol * C;
    const int S = wgrad_splits(km);
    const dim3 grid((unsigned)vc_ceil_div(C, 32), (unsigned)kvol, (unsigned)S);
    const dim3 block(32, 8);
    if (implicit) {
      float *part =
          (float *)vcc_take(&carve, (size_t)((int64_t)S * wel) * sizeof(float));
      dw_wgrad_kernel<T, false><<<grid, block, 0, st>>>(
          (const T *)p->a, (const T *)p->b, km->in_rows, km->out_rows, po,
          kvol, C, S, part);
      VC_CUDA_LAUNCH_CHECK(h, "dw_wgrad_kernel");
      dw_wgrad_reduce_kernel<T><<<vc_grid_1d(wel, 256, 4096), 256, 0, st>>>(
          part, (T *)p->c, wel, S);
      VC_CUDA_LAUNCH_CHECK(h, "dw_wgrad_reduce_kernel");
      return VOXCONV_STATUS_SUCCESS;
    }
    float *acc = f32 ? (float *)p->c
                     : (float *)vcc_take(&carve, (size_t)wel * sizeof(float));
    VC_CUDA_TRY(h, cudaMemsetAsync(acc, 0, (size_t)wel * 4, st));
    dw_wgrad_kernel<T, true><<<grid, block, 0, st>>>(
        (const T *)p->a, (const T *)p->b, km->in_rows, km->out_rows, po, kvol,
        C, S, acc);
    VC_CUDA_LAUNCH_CHECK(h, "dw_wgrad_kernel");
    if (!f32)
      VC_CHECK(vcc_convert_f32<T>(h, acc, (T *)p->c, wel));
    return VOXCONV_STATUS_SUCCESS;
  }

  const int fwd = p->pass == VOXCONV_PASS_DEPTHWISE_FWD;
  const int64_t n_rows = fwd ? km->n_out : km->n_in;
  if (n_rows <= 0)
    return VOXCONV_STATUS_SUCCESS;
  const int64_t total = n_rows * C;
  if (implicit) {
    dw_rows_kernel<T><<<vc_grid_1d(total, 256, 1 << 18), 256, 0, st>>>(
        (const T *)p->a, fwd ? km->nbr_out : km->nbr_in, (const T *)p->b,
        (T *)p->c, n_rows, kvol, C);
    VC_CUDA_LAUNCH_CHECK(h, "dw_rows_kernel");
    return VOXCONV_STATUS_SUCCESS;
  }
  float *acc = f32 ? (float *)p->c
                   : (float *)vcc_take(&carve, (size_t)total * sizeof(float));
  VC_CUDA_TRY(h, cudaMemsetAsync(acc, 0, (size_t)total * 4, st));
  const int64_t work = km->n_pairs * C;
  if (work > 0) {
    dw_pairs_atomic_kernel<T><<<vc_grid_1d(work, 256, 1 << 18), 256, 0, st>>>(
        (const T *)p->a, fwd ? km->in_rows : km->out_rows,
        fwd ? km->out_rows : km->in_rows, (const T *)p->b, po, kvol, acc,
        km->n_pairs, C);
    VC_CUDA_LAUNCH_CHECK(h, "dw_pairs_atomic_kernel");
  }
  if (!f32)
    VC_CHECK(vcc_convert_f32<T>(h, acc, (T *)p->c, total));
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t dw_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                        void *workspace, int implicit) {
  VC_CUDA_DEVICE_GUARD(h);
  /* the pair-list paths (explicit, and every weight gradient) are sized on
   * the host; the implicit forward and dgrad read the neighbour tables */
  if (!implicit || p->pass == VOXCONV_PASS_DEPTHWISE_WGRAD) {
    const char *name = implicit ? "depthwise_implicit" : "depthwise_explicit";
    VC_CHECK(vc_kmap_wait(h, p->kmap, name));
    VC_CHECK(vc_cuda_kmap_pairs(h, p->kmap, name));
  }
  VcWorkspace scope(h);
  char *ws = NULL;
  VC_CHECK(vcc_workspace(scope, workspace, dw_workspace(p, implicit), &ws));
  return VCC_DISPATCH_DTYPE(p->dtype, dw_run_t, h, p, ws, implicit);
}

int dw_supports_common(const vc_algo_t *a, const voxconv_handle_t *h,
                       const vc_conv_problem_t *p) {
  return vcc_supports_common(a, h, p) && vcc_is_depthwise(p->pass) &&
         p->cin == p->cout && p->cin <= 0x7FFFFFF;
}
int dw_supports_explicit(const voxconv_handle_t *h,
                         const vc_conv_problem_t *p) {
  return dw_supports_common(&vc_algo_cuda_depthwise_explicit, h, p);
}
int dw_supports_implicit(const voxconv_handle_t *h,
                         const vc_conv_problem_t *p) {
  return dw_supports_common(&vc_algo_cuda_depthwise_implicit, h, p);
}
size_t dw_ws_explicit(const vc_conv_problem_t *p, const vc_algo_params_t *q) {
  (void)q;
  return dw_workspace(p, 0);
}
size_t dw_ws_implicit(const vc_conv_problem_t *p, const vc_algo_params_t *q) {
  (void)q;
  return dw_workspace(p, 1);
}
voxconv_status_t dw_run_explicit(voxconv_handle_t *h,
                                 const vc_conv_problem_t *p,
                                 const vc_algo_params_t *q, void *ws) {
  (void)q;
  return dw_run(h, p, ws, 0);
}
voxconv_status_t dw_run_implicit(voxconv_handle_t *h,
                                 const vc_conv_problem_t *p,
                                 const vc_algo_params_t *q, void *ws) {
  (void)q;
  return dw_run(h, p, ws, 1);
}

constexpr unsigned kDepthwisePasses = (1u << VOXCONV_PASS_DEPTHWISE_FWD) |
                                      (1u << VOXCONV_PASS_DEPTHWISE_DGRAD) |
                                      (1u << VOXCONV_PASS_DEPTHWISE_WGRAD);

} // namespace

extern "C" const vc_algo_t vc_algo_cuda_depthwise_explicit = {
    {"depthwise_explicit", VOXCONV_BACKEND_CUDA, kDepthwisePasses, 0,
     "pair-parallel depthwise conv, products added with float atomics"},
    dw_supports_explicit,
    NULL,
    dw_ws_explicit,
    dw_run_explicit,
    NULL};

extern "C" const vc_algo_t vc_algo_cuda_depthwise_implicit = {
    {"depthwise_implicit", VOXCONV_BACKEND_CUDA, kDepthwisePasses, 1,
     "row-parallel depthwise conv over the neighbour tables, fixed-order "
     "weight-gradient sums (bitwise reproducible)"},
    dw_supports_implicit,
    NULL,
    dw_ws_implicit,
    dw_run_implicit,
    NULL};
