/* CUDA runtime side of the handle: device queries, handle init/fini (device
 * selection, cuBLAS handle), the default stream-ordered allocator, memcpy
 * and synchronisation, and the CUDA/cuBLAS error -> status conversion that
 * every .cu file uses through vc_cuda_util.cuh.
 *
 * No hidden global state: everything lives in h->cuda. The caller's current
 * device is restored by every entry point (VcDeviceGuard). */
#include "vc_cuda_util.cuh"

#include <errno.h>
#include <mutex>
#include <stdlib.h>
#include <string.h>

extern "C" const char *vc_cublas_status_name(cublasStatus_t st) {
  switch (st) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  default: return "CUBLAS_STATUS_<unknown>";
  }
}

extern "C" voxconv_status_t vc_cuda_fail(const voxconv_handle_t *h,
                                         cudaError_t err, const char *call,
                                         const char *func) {
  /* Non-sticky errors (OOM, invalid value, launch config) stay in the
   * last-error slot until read; read it so they do not resurface. A sticky
   * error (illegal address, ...) keeps failing every later call: the
   * context is lost and the message says so. */
  (void)cudaGetLastError();
  const voxconv_status_t st = err == cudaErrorMemoryAllocation
                                  ? VOXCONV_STATUS_ALLOC_FAILED
                                  : VOXCONV_STATUS_CUDA_ERROR;
  const int sticky = err == cudaErrorIllegalAddress ||
                     err == cudaErrorLaunchFailure ||
                     err == cudaErrorMisalignedAddress ||
                     err == cudaErrorIllegalInstruction ||
                     err == cudaErrorHardwareStackError ||
                     err == cudaErrorAssert;
  return vc_fail(h, st, "%s: %s failed: %s (%s)%s", func ? func : "cuda", call,
                 cudaGetErrorName(err), cudaGetErrorString(err),
                 sticky ? " [sticky: the CUDA context is unusable; recreate "
                          "the process]"
                        : "");
}

extern "C" voxconv_status_t vc_cublas_fail(const voxconv_handle_t *h,
                                           cublasStatus_t bs, const char *call,
                                           const char *func) {
  (void)cudaGetLastError();
  const voxconv_status_t st = bs == CUBLAS_STATUS_ALLOC_FAILED
                                  ? VOXCONV_STATUS_ALLOC_FAILED
                                  : VOXCONV_STATUS_CUDA_ERROR;
  return vc_fail(h, st, "%s: %s failed: %s", func ? func : "cublas", call,
                 vc_cublas_status_name(bs));
}

/* ---- dynamic shared memory above 48 KB ---------------------------------- */
/* vc_cuda_smem_optin's record: open addressing on (function, device), one
 * lock (taken once per launch that needs more than 48 KB; uncontended it
 * costs tens of nanoseconds). Full, it still sets the attribute, only
 * without remembering it. */
#define VC_SMEM_SLOTS 1024
struct vc_smem_slot {
  const void *fn;
  int device;
  int smem;
};
static vc_smem_slot vc_smem_slots[VC_SMEM_SLOTS];
static std::mutex vc_smem_lock;

extern "C" cudaError_t vc_cuda_smem_optin(const voxconv_handle_t *h,
                                          const void *fn, int smem) {
  const int device = vc_cuda_state(h)->device;
  std::lock_guard<std::mutex> guard(vc_smem_lock);
  uintptr_t k = (uintptr_t)fn ^ ((uintptr_t)device * 0x9E3779B97F4A7C15ull);
  k ^= k >> 17;
  vc_smem_slot *slot = NULL;
  for (unsigned i = 0; i < VC_SMEM_SLOTS; ++i) {
    vc_smem_slot *s = &vc_smem_slots[(k + i) % VC_SMEM_SLOTS];
    if (s->fn == fn && s->device == device) {
      if (s->smem >= smem)
        return cudaSuccess;
      slot = s;
      break;
    }
    if (s->fn == NULL) {
      slot = s;
      break;
    }
  }
  const cudaError_t e = cudaFuncSetAttribute(
      fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess && slot != NULL) {
    slot->fn = fn;
    slot->device = device;
    slot->smem = smem;
  }
  return e;
}

/* ---- devices ------------------------------------------------------------ */
extern "C" voxconv_status_t vc_cuda_device_count(int *count) {
  *count = 0;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return VOXCONV_STATUS_SUCCESS; /* "no GPU" is 0 devices, not an error */
  }
  if (e != cudaSuccess)
    return vc_cuda_fail(NULL, e, "cudaGetDeviceCount", "voxconv_device_count");
  *count = n;
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_device_info(int device,
                                                voxconv_device_info_t *info) {
  int n = 0;
  VC_CHECK(vc_cuda_device_count(&n));
  if (device < 0 || device >= n)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_device_get_info: device %d outside 0..%d (%d "
                   "CUDA devices)",
                   device, n - 1, n);
  cudaDeviceProp p;
  const cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess)
    return vc_cuda_fail(NULL, e, "cudaGetDeviceProperties",
                        "voxconv_device_get_info");
  memset(info, 0, sizeof *info);
  /* p.name is 256 bytes and NUL-terminated; copy with an explicit bound. */
  size_t len = strnlen(p.name, sizeof p.name);
  if (len > sizeof info->name - 1)
    len = sizeof info->name - 1;
  memcpy(info->name, p.name, len);
  info->name[len] = '\0';
  info->cc_major = p.major;
  info->cc_minor = p.minor;
  info->sm_count = p.multiProcessorCount;
  info->total_memory = p.totalGlobalMem;
  return VOXCONV_STATUS_SUCCESS;
}

/* The test knob VOXCONV_CUDA_SMEM_LIMIT (vc_cuda_state_t::smem_optin):
 * "101376" bytes or "99K" KiB. Unset, malformed, zero or not below the
 * device's figure: the device's figure (a limit above it would only turn
 * the tuner's skip into a launch failure). */
extern "C" size_t vc_smem_limit_from_env(const char *text, size_t device) {
  if (!text || text[0] < '0' || text[0] > '9')
    return device;
  char *end = NULL;
  errno = 0;
  const unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0)
    return device;
  unsigned long long bytes = v;
  if (*end == 'k' || *end == 'K') {
    if (v > (1ull << 40))
      return device;
    bytes = v * 1024ull;
    end++;
  }
  if (*end != '\0' || bytes == 0 || bytes >= (unsigned long long)device)
    return device;
  return (size_t)bytes;
}

/* ---- handle ------------------------------------------------------------- */
static voxconv_status_t vc_cuda_handle_init_body(voxconv_handle_t *h);
static void vc_pool_retire(cudaMemPool_t pool);

/* A handle may be created while some stream of the thread is being
 * captured into a CUDA graph (PyTorch makes one per stream, so the first
 * call on torch.cuda.graph's capture stream creates one). Its set-up calls
 * (cudaFree(0), the pool, cuBLAS) are not stream work, but in the default
 * (global) capture mode such "unsafe" calls would invalidate the capture:
 * they run with the thread's capture mode relaxed, restored after. */
extern "C" voxconv_status_t vc_cuda_handle_init(voxconv_handle_t *h) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const voxconv_status_t st = vc_cuda_handle_init_body(h);
  cudaThreadExchangeStreamCaptureMode(&mode);
  vc_cuda_reap_pools();
  return st;
}

static voxconv_status_t vc_cuda_handle_init_body(voxconv_handle_t *h) {
  int n = 0;
  VC_CHECK(vc_cuda_device_count(&n));
  if (n == 0)
    return vc_fail(h, VOXCONV_STATUS_BACKEND_UNAVAILABLE,
                   "voxconv_create: CUDA backend requested but no CUDA device "
                   "is visible (driver missing or CUDA_VISIBLE_DEVICES empty)");
  if (h->device < 0 || h->device >= n)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_create: device %d outside 0..%d (%d CUDA devices)",
                   h->device, n - 1, n);
  VC_CUDA_DEVICE_GUARD(h);

  cudaDeviceProp p;
  VC_CUDA_TRY(h, cudaGetDeviceProperties(&p, h->device));
  /* The kernels are compiled for the architectures in VOXCONV_CUDA_ARCHS; a
   * device without a matching image fails at its first launch with
   * cudaErrorNoKernelImageForDevice, which names the problem. We probe one
   * trivial runtime call here so context creation errors surface now. */
  VC_CUDA_TRY(h, cudaFree(0));

  vc_cuda_state_t *s = (vc_cuda_state_t *)calloc(1, sizeof *s);
  if (!s)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "voxconv_create: out of host memory (%zu bytes)", sizeof *s);
  s->device = h->device;
  s->sm_count = p.multiProcessorCount;
  s->cc_major = p.major;
  s->cc_minor = p.minor;
  s->smem_optin_device = p.sharedMemPerBlockOptin;
  s->smem_optin = vc_smem_limit_from_env(vc_getenv("VOXCONV_CUDA_SMEM_LIMIT"),
                                         s->smem_optin_device);
  /* Test knob (documented in cuda_kmap.cu): start the GPU hash table tiny to
   * exercise the overflow-and-retry path. */
  const char *tiny = vc_getenv("VOXCONV_CUDA_HASH_TINY");
  s->hash_debug_tiny = tiny ? (vc_parse_bool(tiny) == 1) : 0;
  /* A/B and test knob: the map builder's longer paths (multi-block steps
   * on small inputs, direct STRIDED inputs hashed up front). */
  const char *klean = vc_getenv("VOXCONV_KMAP_LEAN");
  s->kmap_lean_off = klean ? (vc_parse_bool(klean) == 0) : 0;
  const char *ksync = vc_getenv("VOXCONV_KMAP_SYNC");
  s->kmap_sync = ksync ? (vc_parse_bool(ksync) == 1) : 0;

  /* The handle's own stream-ordered pool: keeping freed memory (release
   * threshold = max) is what makes repeated builds and ops cheap; the
   * device's default pool would hand memory back at every sync. */
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = h->device;
  cudaError_t e = cudaMemPoolCreate(&s->pool, &props);
  if (e != cudaSuccess) {
    free(s);
    return vc_cuda_fail(h, e, "cudaMemPoolCreate", "voxconv_create");
  }
  uint64_t keep_all = UINT64_MAX;
  e = cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrReleaseThreshold,
                              &keep_all);
  if (e != cudaSuccess) {
    cudaMemPoolDestroy(s->pool);
    free(s);
    return vc_cuda_fail(h, e, "cudaMemPoolSetAttribute", "voxconv_create");
  }

  const cublasStatus_t bs = cublasCreate(&s->cublas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    cudaMemPoolDestroy(s->pool);
    free(s);
    return vc_cublas_fail(h, bs, "cublasCreate", "voxconv_create");
  }
  h->cuda = s;
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" void vc_cuda_handle_fini(voxconv_handle_t *h) {
  vc_cuda_state_t *s = vc_cuda_state(h);
  if (!s)
    return;
  VcDeviceGuard guard(h);
  /* Work queued on the stream may still use buffers the caller frees after
   * destroy; wait so destroy is a clean barrier. */
  cudaStreamSynchronize(vc_cuda_stream(h));
  cublasDestroy(s->cublas);
  if (s->host_status)
    cudaFreeHost(s->host_status);
  if (s->wait_event)
    cudaEventDestroy(s->wait_event);
  vc_pool_retire(s->pool);
  vc_cuda_reap_pools(); /* others whose maps have gone meanwhile */
  (void)cudaGetLastError();
  free(s);
  h->cuda = NULL;
}

/* ---- pools that outlive their handle ------------------------------------
 * Kernel maps may outlive the handle that built them (voxconv.h), and
 * their buffers come from that handle's pool. cudaMemPoolDestroy allows
 * that (the pool is "released automatically once there are no more
 * outstanding allocations"), but on the H100 with the CUDA 13 driver that
 * path corrupted the driver: a handle destroyed with 6 live maps, the maps
 * freed later through another handle, and within two such rounds a later
 * cuMemAllocFromPoolAsync or cuStreamSynchronize of the process died with
 * SIGSEGV inside libcuda (6 of 6 processes; 0 of 6 when the maps were
 * freed before the handle; docs/perf-notes.md item 99). So a pool is only
 * ever destroyed empty: a retired pool that still holds memory waits in
 * this list (its release threshold 0, so freed memory goes back to the
 * driver at the next synchronisation) until a later check finds it empty.
 * The checks run when a handle is created or destroyed and after a map is
 * destroyed; with no retired pool waiting they cost one atomic load. */
#define VC_RETIRED_MAX 256
static cudaMemPool_t g_retired[VC_RETIRED_MAX];
static int g_n_retired; /* read without the lock as a hint */
static std::mutex g_retired_lock;

/* Destroys `pool` if it holds no memory: trimmed, nothing reserved (an
 * allocation still in use, or a free not yet run on its stream, keeps
 * memory reserved). Relaxed capture mode: a map may be destroyed while
 * some stream of the thread is being captured. */
static int vc_pool_destroy_if_empty(cudaMemPool_t pool) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaMemPoolTrimTo(pool, 0);
  uint64_t reserved = 1;
  const cudaError_t e = cudaMemPoolGetAttribute(
      pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  const int empty = e == cudaSuccess && reserved == 0;
  if (empty)
    cudaMemPoolDestroy(pool);
  cudaThreadExchangeStreamCaptureMode(&mode);
  (void)cudaGetLastError();
  return empty;
}

static void vc_pool_retire(cudaMemPool_t pool) {
  if (vc_pool_destroy_if_empty(pool))
    return;
  uint64_t zero = 0;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero);
  std::lock_guard<std::mutex> guard(g_retired_lock);
  /* A full list leaks the pool object; its memory still goes back. */
  if (g_n_retired < VC_RETIRED_MAX) {
    g_retired[g_n_retired] = pool;
    __atomic_store_n(&g_n_retired, g_n_retired + 1, __ATOMIC_RELEASE);
  }
}

extern "C" void vc_cuda_reap_pools(void) {
  if (__atomic_load_n(&g_n_retired, __ATOMIC_ACQUIRE) == 0)
    return;
  std::lock_guard<std::mutex> guard(g_retired_lock);
  int kept = 0;
  for (int i = 0; i < g_n_retired; i++)
    if (!vc_pool_destroy_if_empty(g_retired[i]))
      g_retired[kept++] = g_retired[i];
  __atomic_store_n(&g_n_retired, kept, __ATOMIC_RELEASE);
}

extern "C" int vc_cuda_retired_pools(void) {
  std::lock_guard<std::mutex> guard(g_retired_lock);
  return g_n_retired;
}

/* ---- memory --------------------------------------------------------------
 * The built-in allocator is stream-ordered (cudaMallocFromPoolAsync /
 * cudaFreeAsync on the handle's stream, the handle's own pool), so
 * temporaries cost no synchronisation and are reused by the pool. Running out of memory is not
 * sticky: the error is cleared and the library stays usable. */
extern "C" voxconv_status_t vc_cuda_alloc(voxconv_handle_t *h, size_t bytes,
                                          void **ptr) {
  *ptr = NULL;
  VC_CUDA_DEVICE_GUARD(h);
  vc_cuda_state_t *s = vc_cuda_state(h);
  cudaError_t e = cudaMallocFromPoolAsync(ptr, bytes, s->pool,
                                          vc_cuda_stream(h));
  if (e == cudaErrorMemoryAllocation) {
    /* The pool keeps freed blocks; some may be waiting on the stream. Wait
     * for them, give everything unused back and try once more (only on
     * this out-of-memory path does an allocation synchronise). */
    (void)cudaGetLastError();
    cudaStreamSynchronize(vc_cuda_stream(h));
    cudaMemPoolTrimTo(s->pool, 0);
    (void)cudaGetLastError();
    e = cudaMallocFromPoolAsync(ptr, bytes, s->pool, vc_cuda_stream(h));
  }
  if (e != cudaSuccess) {
    *ptr = NULL;
    (void)cudaGetLastError();
    return vc_fail(h,
                   e == cudaErrorMemoryAllocation ? VOXCONV_STATUS_ALLOC_FAILED
                                                  : VOXCONV_STATUS_CUDA_ERROR,
                   "cudaMallocFromPoolAsync(%zu bytes) on device %d: %s", bytes,
                   h->device, cudaGetErrorName(e));
  }
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" void vc_cuda_free(voxconv_handle_t *h, void *ptr) {
  if (!ptr)
    return;
  VcDeviceGuard guard(h);
  if (cudaFreeAsync(ptr, vc_cuda_stream(h)) != cudaSuccess)
    (void)cudaGetLastError(); /* nothing to report through a void free */
}

extern "C" voxconv_status_t vc_cuda_memcpy(voxconv_handle_t *h, void *dst,
                                           const void *src, size_t bytes,
                                           voxconv_memcpy_kind_t kind) {
  VC_CUDA_DEVICE_GUARD(h);
  const cudaMemcpyKind k = kind == VOXCONV_MEMCPY_HOST_TO_BACKEND
                               ? cudaMemcpyHostToDevice
                           : kind == VOXCONV_MEMCPY_BACKEND_TO_HOST
                               ? cudaMemcpyDeviceToHost
                               : cudaMemcpyDeviceToDevice;
  VC_CUDA_TRY(h, cudaMemcpyAsync(dst, src, bytes, k, vc_cuda_stream(h)));
  /* Host-side buffers: the host pointer may be reused by the caller as soon
   * as we return (H2D from pageable memory is staged, but pinned memory is
   * not), and D2H must be complete by contract. */
  if (kind != VOXCONV_MEMCPY_BACKEND_TO_BACKEND)
    VC_CUDA_TRY(h, cudaStreamSynchronize(vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_synchronize(voxconv_handle_t *h) {
  VC_CUDA_DEVICE_GUARD(h);
  VC_CUDA_TRY(h, cudaStreamSynchronize(vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- streams --------------------------------------------------------------
 * Non-blocking, so a stream made here never synchronises implicitly with
 * the legacy default stream: ordering is only what voxconv_stream_wait
 * asks for. */
extern "C" voxconv_status_t vc_cuda_stream_create(voxconv_handle_t *h,
                                                  int high, void **stream) {
  VC_CUDA_DEVICE_GUARD(h);
  cudaStream_t st = NULL;
  /* CUDA numbers priorities downwards: the greatest is the range's low
   * end ("greatest" out parameter), normal is 0 */
  int least = 0, greatest = 0;
  if (high)
    VC_CUDA_TRY(h, cudaDeviceGetStreamPriorityRange(&least, &greatest));
  VC_CUDA_TRY(h, cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking,
                                              high ? greatest : 0));
  *stream = st;
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_stream_destroy(voxconv_handle_t *h,
                                                   void *stream) {
  VC_CUDA_DEVICE_GUARD(h);
  /* cudaStreamDestroy returns at once and lets queued work finish. */
  VC_CUDA_TRY(h, cudaStreamDestroy((cudaStream_t)stream));
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" int vc_cuda_stream_capturing(const voxconv_handle_t *h) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  /* Legal during a capture in every mode, on any stream: the query that
   * exists so libraries can tell recording from running. */
  if (cudaStreamIsCapturing(vc_cuda_stream(h), &cs) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return cs != cudaStreamCaptureStatusNone;
}

extern "C" size_t vc_cuda_device_memory(const voxconv_handle_t *h) {
  VcDeviceGuard guard(h);
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return total;
}

extern "C" voxconv_status_t vc_cuda_stream_wait(voxconv_handle_t *h,
                                                void *other) {
  VC_CUDA_DEVICE_GUARD(h);
  vc_cuda_state_t *s = vc_cuda_state(h);
  if (other == h->stream)
    return VOXCONV_STATUS_SUCCESS; /* a stream is ordered with itself */
  if (!s->wait_event)
    VC_CUDA_TRY(h, cudaEventCreateWithFlags(&s->wait_event,
                                            cudaEventDisableTiming));
  VC_CUDA_TRY(h, cudaEventRecord(s->wait_event, (cudaStream_t)other));
  VC_CUDA_TRY(h, cudaStreamWaitEvent(vc_cuda_stream(h), s->wait_event, 0));
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_kernel_resources(voxconv_handle_t *h,
                                                     const void *fn,
                                                     int threads, int dyn_smem,
                                                     voxconv_kernel_info_t *info) {
  if (info->eligible && dyn_smem > 48 * 1024)
    VC_CUDA_TRY(h, vc_cuda_smem_optin(h, fn, dyn_smem));
  cudaFuncAttributes fa;
  VC_CUDA_TRY(h, cudaFuncGetAttributes(&fa, fn));
  info->registers = fa.numRegs;
  info->smem_bytes = fa.sharedSizeBytes + (size_t)dyn_smem;
  int blocks = 0;
  if (info->eligible)
    VC_CUDA_TRY(h, cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                       &blocks, fn, threads, (size_t)dyn_smem));
  info->blocks_per_sm = blocks;
  int max_threads = 0;
  VC_CUDA_TRY(h, cudaDeviceGetAttribute(&max_threads,
                                        cudaDevAttrMaxThreadsPerMultiProcessor,
                                        h->device));
  info->occupancy =
      max_threads ? (double)(blocks * threads) / (double)max_threads : 0.0;
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" void vc_cuda_thread_init(const voxconv_handle_t *h) {
  cudaSetDevice(h->device);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  (void)cudaGetLastError();
}
