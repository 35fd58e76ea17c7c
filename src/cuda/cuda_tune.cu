/* Tuner support on the GPU (see vc_cuda.h): event timers on the handle's
 * stream, the element-wise |x| conversion the tuner's bound needs, and the
 * reference check of a candidate's output computed on the device so that
 * tuning never copies whole outputs to the host. The check mirrors
 * vc_check_host (src/tune/tuner.c): over elements finite on both sides,
 * rel = |y - ref| / (|ref| + 0.01 rms(ref)), ratio = |y - ref| /
 * (spacing(max(|y|, |ref|)) + acc * S), the norm ratio, and the count of
 * elements whose kind (finite, NaN, +Inf, -Inf) differs. */
#include "vc_cuda_util.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>
#include <stdlib.h>

typedef struct vc_cuda_timer {
  cudaEvent_t start, stop;
} vc_cuda_timer_t;

extern "C" voxconv_status_t vc_cuda_timer_start(voxconv_handle_t *h,
                                                void **timer) {
  VC_CUDA_DEVICE_GUARD(h);
  *timer = NULL;
  vc_cuda_timer_t *t = (vc_cuda_timer_t *)calloc(1, sizeof *t);
  if (!t)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "vc_cuda_timer_start: out of host memory");
  cudaError_t e = cudaEventCreate(&t->start);
  if (e == cudaSuccess) {
    e = cudaEventCreate(&t->stop);
    if (e != cudaSuccess)
      cudaEventDestroy(t->start);
  }
  if (e != cudaSuccess) {
    free(t);
    return vc_cuda_fail(h, e, "cudaEventCreate", __func__);
  }
  e = cudaEventRecord(t->start, vc_cuda_stream(h));
  if (e != cudaSuccess) {
    cudaEventDestroy(t->start);
    cudaEventDestroy(t->stop);
    free(t);
    return vc_cuda_fail(h, e, "cudaEventRecord", __func__);
  }
  *timer = t;
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" void vc_cuda_timer_discard(voxconv_handle_t *h, void *timer) {
  (void)h;
  vc_cuda_timer_t *t = (vc_cuda_timer_t *)timer;
  if (!t)
    return;
  cudaEventDestroy(t->start);
  cudaEventDestroy(t->stop);
  free(t);
}

extern "C" voxconv_status_t vc_cuda_timer_stop(voxconv_handle_t *h, void *timer,
                                               double *ms) {
  VC_CUDA_DEVICE_GUARD(h);
  vc_cuda_timer_t *t = (vc_cuda_timer_t *)timer;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  float f = 0;
  VC_CUDA_TRY_GOTO(h, st, done, cudaEventRecord(t->stop, vc_cuda_stream(h)));
  VC_CUDA_TRY_GOTO(h, st, done, cudaEventSynchronize(t->stop));
  VC_CUDA_TRY_GOTO(h, st, done, cudaEventElapsedTime(&f, t->start, t->stop));
  *ms = (double)f;
done:
  vc_cuda_timer_discard(h, t);
  return st;
}

/* ---- reference check ------------------------------------------------------
 */
typedef struct vc_check_acc {
  double ss_ref;
  unsigned long long n_finite;
  double ss_diff;
  unsigned long long max_rel_bits; /* non-negative doubles order as bits */
  unsigned long long max_ratio_bits;
  unsigned long long n_nonfinite;
} vc_check_acc_t;

template <typename T>
__device__ __forceinline__ double vc_load_d(const T *p, int64_t i);
template <>
__device__ __forceinline__ double vc_load_d<float>(const float *p, int64_t i) {
  return (double)p[i];
}
template <>
__device__ __forceinline__ double vc_load_d<double>(const double *p,
                                                    int64_t i) {
  return p[i];
}
template <>
__device__ __forceinline__ double vc_load_d<__half>(const __half *p,
                                                    int64_t i) {
  return (double)__half2float(p[i]);
}
template <>
__device__ __forceinline__ double
vc_load_d<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i) {
  return (double)__bfloat162float(p[i]);
}

__device__ __forceinline__ int vc_fp_kind(double v) {
  if (isnan(v))
    return 1;
  if (isinf(v))
    return v > 0 ? 2 : 3;
  return 0;
}

#define VC_CHECK_BLOCK 256

/* Grid-stride launches: enough blocks to fill the GPU, no more. */
static unsigned check_grid(voxconv_handle_t *h, int64_t n) {
  const vc_cuda_state_t *s = vc_cuda_state(h);
  const int64_t max_blocks =
      s && s->sm_count > 0 ? (int64_t)s->sm_count * 8 : 1024;
  return vc_grid_1d(n, VC_CHECK_BLOCK, max_blocks);
}

template <typename T>
__global__ void vc_check_pass1(const T *ref, int64_t n, vc_check_acc_t *acc) {
  __shared__ double s_ss[VC_CHECK_BLOCK];
  __shared__ unsigned long long s_n[VC_CHECK_BLOCK];
  double ss = 0;
  unsigned long long cnt = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double r = vc_load_d(ref, i);
    if (isfinite(r)) {
      ss += r * r;
      cnt++;
    }
  }
  s_ss[threadIdx.x] = ss;
  s_n[threadIdx.x] = cnt;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      s_ss[threadIdx.x] += s_ss[threadIdx.x + s];
      s_n[threadIdx.x] += s_n[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(&acc->ss_ref, s_ss[0]);
    atomicAdd(&acc->n_finite, s_n[0]);
  }
}

/* vc_format_spacing (src/tune/tuner.c) for the output type T. */
template <typename T> struct VcFormat;
template <> struct VcFormat<__half> {
  static constexpr int prec = 11, emin = -14;
};
template <> struct VcFormat<__nv_bfloat16> {
  static constexpr int prec = 8, emin = -126;
};
template <> struct VcFormat<float> {
  static constexpr int prec = 24, emin = -126;
};
template <> struct VcFormat<double> {
  static constexpr int prec = 53, emin = -1022;
};

template <typename T> __device__ __forceinline__ double vc_spacing(double v) {
  int e = VcFormat<T>::emin;
  v = fabs(v);
  if (v > 0 && isfinite(v)) {
    int x;
    (void)frexp(v, &x);
    e = max(e, x - 1);
  }
  return ldexp(1.0, e - (VcFormat<T>::prec - 1));
}

/* s: S per element (NULL: no bound, max_ratio stays 0 and the host reports
 * -1); acc: the bound's factor. */
template <typename T>
__global__ void vc_check_pass2(const T *got, const T *ref, const float *s,
                               double acc, int64_t n, vc_check_acc_t *sums) {
  __shared__ double s_ss[VC_CHECK_BLOCK];
  __shared__ double s_max[VC_CHECK_BLOCK];
  __shared__ double s_ratio[VC_CHECK_BLOCK];
  __shared__ unsigned long long s_bad[VC_CHECK_BLOCK];
  const double floor_abs =
      sums->n_finite ? 0.01 * sqrt(sums->ss_ref / (double)sums->n_finite) : 0.0;
  double ss = 0, mx = 0, mratio = 0;
  unsigned long long bad = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double g = vc_load_d(got, i), r = vc_load_d(ref, i);
    const int kg = vc_fp_kind(g), kr = vc_fp_kind(r);
    if (kg != kr) {
      bad++;
      continue;
    }
    if (kg != 0)
      continue;
    const double d = fabs(g - r);
    const double denom = fabs(r) + floor_abs;
    const double rel = denom > 0 ? d / denom : (d > 0 ? INFINITY : 0.0);
    mx = fmax(mx, rel);
    if (s) {
      /* fmax drops a NaN ratio (NaN S), as the host's comparison does */
      const double tol =
          vc_spacing<T>(fmax(fabs(g), fabs(r))) + acc * (double)s[i];
      mratio = fmax(mratio, d / tol);
    }
    ss += d * d;
  }
  s_ss[threadIdx.x] = ss;
  s_max[threadIdx.x] = mx;
  s_ratio[threadIdx.x] = mratio;
  s_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int st = blockDim.x / 2; st > 0; st >>= 1) {
    if ((int)threadIdx.x < st) {
      s_ss[threadIdx.x] += s_ss[threadIdx.x + st];
      s_max[threadIdx.x] = fmax(s_max[threadIdx.x], s_max[threadIdx.x + st]);
      s_ratio[threadIdx.x] =
          fmax(s_ratio[threadIdx.x], s_ratio[threadIdx.x + st]);
      s_bad[threadIdx.x] += s_bad[threadIdx.x + st];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(&sums->ss_diff, s_ss[0]);
    atomicMax(&sums->max_rel_bits,
              (unsigned long long)__double_as_longlong(s_max[0]));
    atomicMax(&sums->max_ratio_bits,
              (unsigned long long)__double_as_longlong(s_ratio[0]));
    atomicAdd(&sums->n_nonfinite, s_bad[0]);
  }
}

template <typename T>
static voxconv_status_t
launch_check(voxconv_handle_t *h, const void *got, const void *ref,
             const float *s, double acc, int64_t n, vc_check_acc_t *sums) {
  const cudaStream_t stream = vc_cuda_stream(h);
  const unsigned grid = check_grid(h, n);
  vc_check_pass1<T>
      <<<grid, VC_CHECK_BLOCK, 0, stream>>>((const T *)ref, n, sums);
  VC_CUDA_LAUNCH_CHECK(h, "vc_check_pass1");
  vc_check_pass2<T><<<grid, VC_CHECK_BLOCK, 0, stream>>>(
      (const T *)got, (const T *)ref, s, acc, n, sums);
  VC_CUDA_LAUNCH_CHECK(h, "vc_check_pass2");
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t
vc_cuda_tune_check(voxconv_handle_t *h, const void *got, const void *ref,
                   voxconv_dtype_t dtype, int64_t n, const float *s, double acc,
                   double *max_rel, double *norm_rel, double *max_ratio,
                   int64_t *n_nonfinite) {
  VC_CUDA_DEVICE_GUARD(h);
  *max_rel = 0;
  *norm_rel = 0;
  *max_ratio = s ? 0 : -1;
  *n_nonfinite = 0;
  if (n <= 0)
    return VOXCONV_STATUS_SUCCESS;
  const cudaStream_t stream = vc_cuda_stream(h);
  void *dev = NULL;
  VC_CHECK(vc_alloc(h, sizeof(vc_check_acc_t), &dev, "tuner check sums"));
  vc_check_acc_t *sums = (vc_check_acc_t *)dev;
  vc_check_acc_t host;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  VC_CUDA_TRY_GOTO(h, st, done, cudaMemsetAsync(sums, 0, sizeof *sums, stream));
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    st = launch_check<float>(h, got, ref, s, acc, n, sums);
    break;
  case VOXCONV_DTYPE_F16:
    st = launch_check<__half>(h, got, ref, s, acc, n, sums);
    break;
  case VOXCONV_DTYPE_BF16:
    st = launch_check<__nv_bfloat16>(h, got, ref, s, acc, n, sums);
    break;
  default:
    st = launch_check<double>(h, got, ref, s, acc, n, sums);
    break;
  }
  if (st != VOXCONV_STATUS_SUCCESS)
    goto done;
  VC_CUDA_TRY_GOTO(h, st, done,
                   cudaMemcpyAsync(&host, sums, sizeof host,
                                   cudaMemcpyDeviceToHost, stream));
  VC_CUDA_TRY_GOTO(h, st, done, cudaStreamSynchronize(stream));
  {
    double mr, mq;
    memcpy(&mr, &host.max_rel_bits, sizeof mr);
    memcpy(&mq, &host.max_ratio_bits, sizeof mq);
    *max_rel = mr;
    if (s)
      *max_ratio = mq;
    *norm_rel = host.ss_ref > 0 ? sqrt(host.ss_diff / host.ss_ref)
                                : (host.ss_diff > 0 ? INFINITY : 0.0);
    *n_nonfinite = (int64_t)host.n_nonfinite;
  }
done:
  vc_free(h, dev);
  return st;
}

/* ---- |x| in fp32 ---------------------------------------------------------
 * The bound's S is a conv of |a| and |b| run in fp32 (f16 sums of products
 * overflow), so the tuner needs fp32 copies of the absolute values. */
template <typename T>
__global__ void vc_abs_f32_kernel(const T *src, int64_t n, float *dst) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = (float)fabs(vc_load_d(src, i));
}

extern "C" voxconv_status_t vc_cuda_tune_abs_f32(voxconv_handle_t *h,
                                                 const void *src,
                                                 voxconv_dtype_t dtype,
                                                 int64_t n, float *dst) {
  VC_CUDA_DEVICE_GUARD(h);
  if (n <= 0)
    return VOXCONV_STATUS_SUCCESS;
  const cudaStream_t stream = vc_cuda_stream(h);
  const unsigned grid = check_grid(h, n);
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    vc_abs_f32_kernel<<<grid, VC_CHECK_BLOCK, 0, stream>>>((const float *)src,
                                                           n, dst);
    break;
  case VOXCONV_DTYPE_F16:
    vc_abs_f32_kernel<<<grid, VC_CHECK_BLOCK, 0, stream>>>((const __half *)src,
                                                           n, dst);
    break;
  case VOXCONV_DTYPE_BF16:
    vc_abs_f32_kernel<<<grid, VC_CHECK_BLOCK, 0, stream>>>(
        (const __nv_bfloat16 *)src, n, dst);
    break;
  default:
    vc_abs_f32_kernel<<<grid, VC_CHECK_BLOCK, 0, stream>>>((const double *)src,
                                                           n, dst);
    break;
  }
  VC_CUDA_LAUNCH_CHECK(h, "vc_abs_f32_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- bitwise comparison (the int8 tuner) ----------------------------------
 * Every int8 tile must give the same bits (voxconv.h), so its check is a
 * count of differing bytes; a grid-stride pass, one atomic per block. */
__global__ void vc_count_diff_kernel(const unsigned char *a,
                                     const unsigned char *b, int64_t bytes,
                                     unsigned long long *n) {
  unsigned long long c = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes;
       i += (int64_t)gridDim.x * blockDim.x)
    c += a[i] != b[i];
  for (int o = 16; o > 0; o >>= 1)
    c += __shfl_down_sync(0xffffffffu, c, o);
  __shared__ unsigned long long s_c[VC_CHECK_BLOCK / 32];
  if ((threadIdx.x & 31) == 0)
    s_c[threadIdx.x >> 5] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t = 0;
    for (int w = 0; w < VC_CHECK_BLOCK / 32; w++)
      t += s_c[w];
    if (t)
      atomicAdd(n, t);
  }
}

extern "C" voxconv_status_t vc_cuda_count_diff(voxconv_handle_t *h,
                                               const void *a, const void *b,
                                               int64_t bytes,
                                               int64_t *n_diff) {
  VC_CUDA_DEVICE_GUARD(h);
  *n_diff = 0;
  if (bytes <= 0)
    return VOXCONV_STATUS_SUCCESS;
  const cudaStream_t stream = vc_cuda_stream(h);
  void *dev = NULL;
  VC_CHECK(vc_alloc(h, sizeof(unsigned long long), &dev, "tuner diff count"));
  unsigned long long host = 0;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  VC_CUDA_TRY_GOTO(h, st, done,
                   cudaMemsetAsync(dev, 0, sizeof(unsigned long long), stream));
  vc_count_diff_kernel<<<check_grid(h, bytes), VC_CHECK_BLOCK, 0, stream>>>(
      (const unsigned char *)a, (const unsigned char *)b, bytes,
      (unsigned long long *)dev);
  VC_CUDA_LAUNCH_CHECK_GOTO(h, st, done, "vc_count_diff_kernel");
  VC_CUDA_TRY_GOTO(h, st, done,
                   cudaMemcpyAsync(&host, dev, sizeof host,
                                   cudaMemcpyDeviceToHost, stream));
  VC_CUDA_TRY_GOTO(h, st, done, cudaStreamSynchronize(stream));
  *n_diff = (int64_t)host;
done:
  vc_free(h, dev);
  return st;
}
