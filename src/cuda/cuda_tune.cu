/* Tuner support on the GPU (see vc_cuda.h): event timers on the handle's
 * stream, and the reference check of a candidate's output computed on the
 * device so that tuning never copies whole outputs to the host. The check
 * mirrors vc_check_host (src/tune/tuner.c): rel = |y - ref| / (|ref| +
 * 0.01 rms(ref)) over elements finite on both sides, the norm ratio, and the
 * count of elements whose kind (finite, NaN, +Inf, -Inf) differs. */
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

template <typename T>
__global__ void vc_check_pass2(const T *got, const T *ref, int64_t n,
                               vc_check_acc_t *acc) {
  __shared__ double s_ss[VC_CHECK_BLOCK];
  __shared__ double s_max[VC_CHECK_BLOCK];
  __shared__ unsigned long long s_bad[VC_CHECK_BLOCK];
  const double floor_abs =
      acc->n_finite ? 0.01 * sqrt(acc->ss_ref / (double)acc->n_finite) : 0.0;
  double ss = 0, mx = 0;
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
    ss += d * d;
  }
  s_ss[threadIdx.x] = ss;
  s_max[threadIdx.x] = mx;
  s_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      s_ss[threadIdx.x] += s_ss[threadIdx.x + s];
      s_max[threadIdx.x] = fmax(s_max[threadIdx.x], s_max[threadIdx.x + s]);
      s_bad[threadIdx.x] += s_bad[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(&acc->ss_diff, s_ss[0]);
    atomicMax(&acc->max_rel_bits,
              (unsigned long long)__double_as_longlong(s_max[0]));
    atomicAdd(&acc->n_nonfinite, s_bad[0]);
  }
}

template <typename T>
static voxconv_status_t launch_check(voxconv_handle_t *h, const void *got,
                                     const void *ref, int64_t n,
                                     vc_check_acc_t *acc) {
  const cudaStream_t stream = vc_cuda_stream(h);
  const vc_cuda_state_t *s = vc_cuda_state(h);
  const int64_t max_blocks =
      s && s->sm_count > 0 ? (int64_t)s->sm_count * 8 : 1024;
  const unsigned grid = vc_grid_1d(n, VC_CHECK_BLOCK, max_blocks);
  vc_check_pass1<T>
      <<<grid, VC_CHECK_BLOCK, 0, stream>>>((const T *)ref, n, acc);
  VC_CUDA_LAUNCH_CHECK(h, "vc_check_pass1");
  vc_check_pass2<T><<<grid, VC_CHECK_BLOCK, 0, stream>>>(
      (const T *)got, (const T *)ref, n, acc);
  VC_CUDA_LAUNCH_CHECK(h, "vc_check_pass2");
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t
vc_cuda_tune_check(voxconv_handle_t *h, const void *got, const void *ref,
                   voxconv_dtype_t dtype, int64_t n, double *max_rel,
                   double *norm_rel, int64_t *n_nonfinite) {
  VC_CUDA_DEVICE_GUARD(h);
  *max_rel = 0;
  *norm_rel = 0;
  *n_nonfinite = 0;
  if (n <= 0)
    return VOXCONV_STATUS_SUCCESS;
  const cudaStream_t stream = vc_cuda_stream(h);
  void *dev = NULL;
  VC_CHECK(vc_alloc(h, sizeof(vc_check_acc_t), &dev, "tuner check sums"));
  vc_check_acc_t *acc = (vc_check_acc_t *)dev;
  vc_check_acc_t host;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  VC_CUDA_TRY_GOTO(h, st, done, cudaMemsetAsync(acc, 0, sizeof *acc, stream));
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    st = launch_check<float>(h, got, ref, n, acc);
    break;
  case VOXCONV_DTYPE_F16:
    st = launch_check<__half>(h, got, ref, n, acc);
    break;
  case VOXCONV_DTYPE_BF16:
    st = launch_check<__nv_bfloat16>(h, got, ref, n, acc);
    break;
  default:
    st = launch_check<double>(h, got, ref, n, acc);
    break;
  }
  if (st != VOXCONV_STATUS_SUCCESS)
    goto done;
  VC_CUDA_TRY_GOTO(
      h, st, done,
      cudaMemcpyAsync(&host, acc, sizeof host, cudaMemcpyDeviceToHost, stream));
  VC_CUDA_TRY_GOTO(h, st, done, cudaStreamSynchronize(stream));
  {
    double mr;
    memcpy(&mr, &host.max_rel_bits, sizeof mr);
    *max_rel = mr;
    *norm_rel = host.ss_ref > 0 ? sqrt(host.ss_diff / host.ss_ref)
                                : (host.ss_diff > 0 ? INFINITY : 0.0);
    *n_nonfinite = (int64_t)host.n_nonfinite;
  }
done:
  vc_free(h, dev);
  return st;
}
