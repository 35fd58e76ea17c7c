/* Shared helpers for the CUDA backend (.cu files only): the per-handle CUDA
 * state, CUDA/cuBLAS error -> voxconv status conversion, launch checks, a
 * scoped device guard, ceil-div and typed workspace allocation through the
 * handle's allocator (vc_alloc / vc_free).
 *
 * Conventions
 *  - Every CUDA call whose failure matters goes through VC_CUDA_TRY (or
 *    VC_CUDA_TRY_GOTO in functions that must release resources first).
 *  - Every kernel launch is followed by VC_CUDA_LAUNCH_CHECK(h, "kernel").
 *  - Entry points that touch the device start with `VcDeviceGuard guard(h);`
 *    so the caller's current device is restored on every return path.
 *  - cudaErrorMemoryAllocation becomes VOXCONV_STATUS_ALLOC_FAILED, anything
 *    else VOXCONV_STATUS_CUDA_ERROR; the message names the CUDA error, the
 *    failing call and the function. Non-sticky errors are cleared
 *    (cudaGetLastError) so the library stays usable afterwards. */
#ifndef VC_CUDA_UTIL_CUH
#define VC_CUDA_UTIL_CUH

#include "vc_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

/* ---- per-handle CUDA state (h->cuda) ---------------------------------- */
/* Upper bound on the rows of cuda_mask_gemm.cu's kernel table (checked
 * there at compile time). */
#define VC_CUDA_KERNEL_ROWS_MAX 192

typedef struct vc_cuda_state {
  cublasHandle_t cublas; /* bound to h->stream before each use (see below) */
  int device;
  int sm_count;
  int cc_major, cc_minor;
  /* Shared memory a block may use (static + dynamic, opt-in): the device's
   * sharedMemPerBlockOptin (99 KB on sm_86/sm_89, 163 KB on sm_80, 227 KB
   * on sm_90), or less under the test knob VOXCONV_CUDA_SMEM_LIMIT (bytes,
   * or KiB with a K suffix; read at handle creation; it only lowers the
   * device's figure), which lets a larger GPU exercise what an sm_86 does
   * with tiles over its limit. Tiles that need more are not eligible here:
   * the tuner skips them and their run() is UNSUPPORTED (cuda_mask_gemm.cu). */
  size_t smem_optin;
  size_t smem_optin_device; /* the device's own figure */
  /* Static shared memory of each mask_gemm kernel variant (rows of
   * cuda_mask_gemm.cu's kernel table) as compiled for this device, plus 1;
   * 0 = not read yet. Read (cudaFuncGetAttributes) only for tiles whose
   * dynamic shared memory alone leaves the answer open. */
  int mg_static_smem[VC_CUDA_KERNEL_ROWS_MAX];
  /* Test knob: 1 = the GPU kernel-map builder starts its hash tables at 16
   * slots, so the overflow-and-retry path runs (VOXCONV_CUDA_HASH_TINY, read
   * at handle creation; see cuda_kmap.cu). 0 = the normal sizing. */
  int hash_debug_tiny;
  /* VOXCONV_KMAP_LEAN=0: the map builder's longer paths (no one-block
   * steps, direct STRIDED inputs hashed up front; cuda_kmap.cu) and the
   * CUB row order at every size (cuda_row_order.cu) */
  int kmap_lean_off;
  /* 1 = SUBMANIFOLD map builds wait for their own verdict instead of
   * completing asynchronously (VOXCONV_KMAP_SYNC, read at handle creation;
   * see voxconv.h, Kernel maps). */
  int kmap_sync;
  /* Stream-ordered pool of this handle (release threshold: keep all), so
   * temporaries are recycled without returning memory to the driver at
   * every synchronisation. Destroyed with the handle; allocations still
   * live then (kernel maps) keep it alive until they are freed. */
  cudaMemPool_t pool;
  /* Pinned host buffer for the one device->host read of a kernel-map build
   * (counts and error rows), allocated on first use. */
  void *host_status;
  size_t host_status_bytes;
  /* voxconv_stream_wait's event (no timing), created on first use; one is
   * enough: a wait takes the event's state when it is queued. */
  cudaEvent_t wait_event;
} vc_cuda_state_t;

static inline vc_cuda_state_t *vc_cuda_state(const voxconv_handle_t *h) {
  return (vc_cuda_state_t *)h->cuda;
}
static inline cudaStream_t vc_cuda_stream(const voxconv_handle_t *h) {
  return (cudaStream_t)h->stream;
}
/* The handle's cuBLAS handle bound to the handle's current stream (the
 * stream may change between calls through voxconv_set_stream). */
static inline cublasHandle_t vc_cuda_cublas(const voxconv_handle_t *h) {
  vc_cuda_state_t *s = vc_cuda_state(h);
  cublasSetStream(s->cublas, vc_cuda_stream(h));
  return s->cublas;
}

/* ---- dynamic shared memory above 48 KB --------------------------------- */
/* Lets fn take at least `smem` bytes of dynamic shared memory on the current
 * device (the caller's VcDeviceGuard has made it h's). The limits set are
 * remembered per (function, device) for the process and only ever raised,
 * so no handle lowers a limit another one launches under; a known limit
 * costs a table lookup instead of a cudaFuncSetAttribute, which took 2.7 us
 * of host time per launch on a lent H100 host (docs/perf-notes.md item 69).
 * Returns cudaFuncSetAttribute's error, if it was called and failed.
 * Defined in cuda_runtime.cu. */
extern "C" cudaError_t vc_cuda_smem_optin(const voxconv_handle_t *h,
                                          const void *fn, int smem);

/* ---- `voxconv info --kernels` ------------------------------------------- */
/* Fills the device-reported part of a kernel table row for kernel fn
 * launched with `threads` threads and dyn_smem bytes of dynamic shared
 * memory: registers, shared memory (static + dynamic), and, when
 * info->eligible is set (the caller's shared-memory fit), the opt-in above
 * 48 KB, blocks per SM and occupancy (0 otherwise). Both tile tables
 * (cuda_mask_gemm.cu, cuda_int8.cu) use it. The caller's VcDeviceGuard has
 * made h's device current. Defined in cuda_runtime.cu. */
extern "C" voxconv_status_t vc_cuda_kernel_resources(voxconv_handle_t *h,
                                                     const void *fn,
                                                     int threads, int dyn_smem,
                                                     voxconv_kernel_info_t *info);

/* ---- error conversion -------------------------------------------------- */
/* Records `err` (from `call` in `func`) on h and returns the matching status.
 * Clears the last-error slot so a non-sticky error does not resurface in a
 * later, unrelated check. Defined in cuda_runtime.cu. */
extern "C" voxconv_status_t vc_cuda_fail(const voxconv_handle_t *h,
                                         cudaError_t err, const char *call,
                                         const char *func);
extern "C" voxconv_status_t vc_cublas_fail(const voxconv_handle_t *h,
                                           cublasStatus_t st, const char *call,
                                           const char *func);
extern "C" const char *vc_cublas_status_name(cublasStatus_t st);

#define VC_CUDA_TRY(h, call)                                                   \
  do {                                                                         \
    cudaError_t vc_ce_ = (call);                                               \
    if (vc_ce_ != cudaSuccess)                                                 \
      return vc_cuda_fail((h), vc_ce_, #call, __func__);                       \
  } while (0)

/* For functions with cleanup: sets `st` and jumps to `label`. */
#define VC_CUDA_TRY_GOTO(h, st, label, call)                                   \
  do {                                                                         \
    cudaError_t vc_ce_ = (call);                                               \
    if (vc_ce_ != cudaSuccess) {                                               \
      (st) = vc_cuda_fail((h), vc_ce_, #call, __func__);                       \
      goto label;                                                              \
    }                                                                          \
  } while (0)

#define VC_CUBLAS_TRY(h, call)                                                 \
  do {                                                                         \
    cublasStatus_t vc_bs_ = (call);                                            \
    if (vc_bs_ != CUBLAS_STATUS_SUCCESS)                                       \
      return vc_cublas_fail((h), vc_bs_, #call, __func__);                     \
  } while (0)

/* After a <<<>>> launch: catches bad configurations (too much shared
 * memory, zero/oversized grids, missing kernel image). Does not
 * synchronise, so asynchronous faults surface at the next sync. */
#define VC_CUDA_LAUNCH_CHECK(h, kernel_name)                                   \
  do {                                                                         \
    cudaError_t vc_ce_ = cudaGetLastError();                                   \
    if (vc_ce_ != cudaSuccess)                                                 \
      return vc_cuda_fail((h), vc_ce_, "launch of " kernel_name, __func__);    \
  } while (0)

#define VC_CUDA_LAUNCH_CHECK_GOTO(h, st, label, kernel_name)                   \
  do {                                                                         \
    cudaError_t vc_ce_ = cudaGetLastError();                                   \
    if (vc_ce_ != cudaSuccess) {                                               \
      (st) = vc_cuda_fail((h), vc_ce_, "launch of " kernel_name, __func__);    \
      goto label;                                                              \
    }                                                                          \
  } while (0)

/* Propagates a voxconv status inside functions with cleanup. */
#define VC_CHECK_GOTO(st, label, expr)                                         \
  do {                                                                         \
    (st) = (expr);                                                             \
    if ((st) != VOXCONV_STATUS_SUCCESS)                                        \
      goto label;                                                              \
  } while (0)

/* ---- scoped device guard ----------------------------------------------- */
/* Makes h->device current for the scope and restores the caller's device
 * on exit (only touches the runtime when they differ). Check ok() / status
 * right after construction. */
class VcDeviceGuard {
public:
  explicit VcDeviceGuard(const voxconv_handle_t *h) : prev_(-1), err_() {
    err_ = cudaGetDevice(&prev_);
    if (err_ == cudaSuccess && prev_ != h->device) {
      err_ = cudaSetDevice(h->device);
      if (err_ != cudaSuccess)
        prev_ = -1;
    } else {
      prev_ = -1; /* nothing to restore */
    }
  }
  ~VcDeviceGuard() {
    if (prev_ >= 0)
      cudaSetDevice(prev_);
  }
  cudaError_t error() const { return err_; }
  VcDeviceGuard(const VcDeviceGuard &) = delete;
  VcDeviceGuard &operator=(const VcDeviceGuard &) = delete;

private:
  int prev_;
  cudaError_t err_;
};

/* Declares the guard and returns on failure. */
#define VC_CUDA_DEVICE_GUARD(h)                                                \
  VcDeviceGuard vc_guard_(h);                                                  \
  do {                                                                         \
    if (vc_guard_.error() != cudaSuccess)                                      \
      return vc_cuda_fail((h), vc_guard_.error(), "cudaSetDevice", __func__);  \
  } while (0)

/* ---- small helpers ------------------------------------------------------ */
template <typename T> static inline __host__ __device__ T vc_ceil_div(T a, T b) {
  return (a + b - 1) / b;
}
/* p is a multiple of `a` bytes (a power of two): the vector paths'
 * precondition (16-byte loads and stores of rows, 8-byte int8 groups). */
static inline __host__ __device__ bool vc_aligned(const void *p, unsigned a) {
  return ((uintptr_t)p & (uintptr_t)(a - 1)) == 0;
}
/* Grid size for n threads in blocks of `block`, clamped to a sane maximum
 * for grid-stride kernels. */
static inline unsigned vc_grid_1d(int64_t n, int block,
                                  int64_t max_blocks = 1 << 20) {
  int64_t g = (n + block - 1) / block;
  if (g < 1)
    g = 1;
  if (g > max_blocks)
    g = max_blocks;
  return (unsigned)g;
}

/* Runs `fn` (a CUDA call such as an event query or wait) with the
 * thread's stream-capture mode relaxed, restoring it after: an "unsafe"
 * call in global mode would invalidate a capture running meanwhile. */
template <typename F> static inline cudaError_t vc_relaxed(F fn) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t e = fn();
  cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}

/* ---- workspace through the handle's allocator ----------------------------
 * Typed allocation of n elements; the message names `what` and the bytes.
 * Overflowing sizes become ALLOC_FAILED, never a short buffer. */
template <typename T>
static inline voxconv_status_t vc_cuda_alloc_n(voxconv_handle_t *h, int64_t n,
                                               T **ptr, const char *what) {
  *ptr = NULL;
  if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(T))
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "%s: %lld elements of %zu bytes do not fit in size_t", what,
                   (long long)n, sizeof(T));
  void *p = NULL;
  voxconv_status_t st = vc_alloc(h, (size_t)n * sizeof(T), &p, what);
  *ptr = (T *)p;
  return st;
}

/* A scoped list of temporaries: every buffer taken through it is returned
 * with vc_free (stream-ordered on the default allocator) when the scope
 * ends, in reverse order. Up to 32 buffers. `release(p)` hands one out
 * of the scope (e.g. a kmap array that outlives the build). */
class VcWorkspace {
public:
  explicit VcWorkspace(voxconv_handle_t *h) : h_(h), n_(0) {}
  ~VcWorkspace() {
    for (int i = n_ - 1; i >= 0; --i)
      if (ptrs_[i])
        vc_free(h_, ptrs_[i]);
  }
  template <typename T>
  voxconv_status_t get(int64_t n, T **ptr, const char *what) {
    *ptr = NULL;
    if (n_ >= kMax)
      return vc_fail(h_, VOXCONV_STATUS_INTERNAL,
                     "VcWorkspace: more than %d buffers (%s)", kMax, what);
    voxconv_status_t st = vc_cuda_alloc_n<T>(h_, n, ptr, what);
    if (st == VOXCONV_STATUS_SUCCESS)
      ptrs_[n_++] = (void *)*ptr;
    return st;
  }
  /* Stops tracking p (the caller now owns it). */
  void release(const void *p) {
    for (int i = 0; i < n_; ++i)
      if (ptrs_[i] == p)
        ptrs_[i] = NULL;
  }
  /* Frees p now (e.g. before a retry with a larger size). */
  void drop(void *p) {
    for (int i = 0; i < n_; ++i)
      if (ptrs_[i] == p) {
        vc_free(h_, p);
        ptrs_[i] = NULL;
      }
  }
  VcWorkspace(const VcWorkspace &) = delete;
  VcWorkspace &operator=(const VcWorkspace &) = delete;

private:
  static const int kMax = 32;
  voxconv_handle_t *h_;
  int n_;
  void *ptrs_[kMax];
};

/* ---- device helpers ------------------------------------------------------ */
/* Dtype load/store for kernels: features are f32, f16 or bf16 in memory and
 * f32 in registers. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T> struct VcDtype;
template <> struct VcDtype<float> {
  static __device__ __forceinline__ float load(const float *p) { return *p; }
  static __device__ __forceinline__ void store(float *p, float v) { *p = v; }
};
template <> struct VcDtype<__half> {
  static __device__ __forceinline__ float load(const __half *p) {
    return __half2float(*p);
  }
  static __device__ __forceinline__ void store(__half *p, float v) {
    *p = __float2half_rn(v);
  }
};
template <> struct VcDtype<__nv_bfloat16> {
  static __device__ __forceinline__ float load(const __nv_bfloat16 *p) {
    return __bfloat162float(*p);
  }
  static __device__ __forceinline__ void store(__nv_bfloat16 *p, float v) {
    *p = __float2bfloat16_rn(v);
  }
};
/* int8 (max pooling only): exact both ways for the values it moves; a
 * store rounds to nearest even and saturates, as vc_store_f32 does. */
template <> struct VcDtype<int8_t> {
  static __device__ __forceinline__ float load(const int8_t *p) {
    return (float)*p;
  }
  static __device__ __forceinline__ void store(int8_t *p, float v) {
    *p = (int8_t)max(-128, min(127, __float2int_rn(v)));
  }
};

/* v / y correctly rounded (IEEE binary32), without a division where that
 * is safe: IEEE division (__fdiv_rn) is a ~20-instruction sequence that
 * cost as much as the int8 MMA gained (docs/perf-notes.md, item 78).
 * Markstein's correction: with yi = RN(1/y) (vc_div_inv, on the host) and
 * q0 = RN(v yi) within an ulp of v/y, r = v - q0 y is exact in one fma and
 * q0 + r yi, rounded once, is RN(v/y) -- unless an intermediate overflows
 * or underflows, which the bounds on y (yi = 0 outside them) and on |v|
 * (Inf, NaN and huge v) rule out; those take the division. (A v so small
 * that q0 underflows has |v/y| far below 1/2: the same integer, 0, after
 * rounding -- the int8 users' only need.) */
static __device__ __forceinline__ float vc_div_rn(float v, float y, float yi) {
  if (yi != 0.0f && fabsf(v) < 0x1p100f) {
    const float q0 = __fmul_rn(v, yi);
    const float r = __fmaf_rn(-q0, y, v);
    return __fmaf_rn(r, yi, q0);
  }
  return __fdiv_rn(v, y);
}
/* yi for vc_div_rn: 1.0f / y in binary32 on the host (correctly rounded,
 * SSE), or 0 (always divide) for y outside 2^-100..2^100. */
static inline float vc_div_inv(float y) {
  return y >= 0x1p-100f && y <= 0x1p100f ? 1.0f / y : 0.0f;
}

/* Device copy of vc_fingerprint_mix (vc_kmap.h; keep them identical). */
static __device__ __forceinline__ uint64_t vc_dev_fingerprint_mix(uint64_t i,
                                                                  uint64_t key) {
  uint64_t z = key ^ (i * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Device copy of vc_pack_key. */
static __device__ __forceinline__ uint64_t vc_dev_pack_key(int32_t b, int32_t x,
                                                           int32_t y,
                                                           int32_t z) {
  return ((uint64_t)(uint32_t)b << 54) |
         ((uint64_t)(uint32_t)(x + VC_COORD_BIAS) << 36) |
         ((uint64_t)(uint32_t)(y + VC_COORD_BIAS) << 18) |
         (uint64_t)(uint32_t)(z + VC_COORD_BIAS);
}

#endif
