/* Handle lifecycle, backend memory and device queries. CUDA specifics live
 * behind src/cuda/vc_cuda.h; a CPU-only build answers CUDA requests with
 * VOXCONV_STATUS_BACKEND_UNAVAILABLE. */
#include "vc_core.h"

#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <time.h>

int voxconv_has_cuda(void) {
#ifdef VOXCONV_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

/* VC_CUDA_ARCHS_STRING is set for this file by CMakeLists.txt from
 * VOXCONV_CUDA_ARCHS. */
const char *voxconv_cuda_archs(void) {
#if defined(VOXCONV_HAVE_CUDA) && defined(VC_CUDA_ARCHS_STRING)
  return VC_CUDA_ARCHS_STRING;
#else
  return "";
#endif
}

voxconv_status_t voxconv_device_count(int *count) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, count, "count");
  *count = 0;
#ifdef VOXCONV_HAVE_CUDA
  return vc_cuda_device_count(count);
#else
  return VOXCONV_STATUS_SUCCESS;
#endif
}

voxconv_status_t voxconv_device_get_info(int device,
                                         voxconv_device_info_t *info) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, info, "info");
#ifdef VOXCONV_HAVE_CUDA
  return vc_cuda_device_info(device, info);
#else
  (void)device;
  return vc_fail(NULL, VOXCONV_STATUS_BACKEND_UNAVAILABLE,
                 "voxconv_device_get_info: this library was built without "
                 "CUDA (VOXCONV_CUDA=OFF or no nvcc at build time)");
#endif
}

static int env_num_threads(void) {
  const char *v = vc_getenv("VOXCONV_NUM_THREADS");
  if (!v)
    return 0;
  char *end = NULL;
  long n = strtol(v, &end, 10);
  return (end && *end == '\0' && n > 0 && n <= 256) ? (int)n : 0;
}

voxconv_status_t voxconv_create(voxconv_handle_t **handle,
                                const voxconv_handle_desc_t *desc) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, handle, "handle");
  *handle = NULL;
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  if (desc)
    d = *desc;
  if (d.backend != VOXCONV_BACKEND_AUTO && d.backend != VOXCONV_BACKEND_CPU &&
      d.backend != VOXCONV_BACKEND_CUDA)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_create: backend %d is not AUTO(0), CPU(1) or "
                   "CUDA(2)",
                   (int)d.backend);
  if (d.num_threads < 0 || d.num_threads > 256)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_create: num_threads=%d outside 0..256",
                   d.num_threads);
  if (d.allocator && (!d.allocator->alloc || !d.allocator->free))
    return vc_fail(NULL, VOXCONV_STATUS_NULL_POINTER,
                   "voxconv_create: allocator given without alloc and free");

  voxconv_backend_t backend = d.backend;
  if (backend == VOXCONV_BACKEND_AUTO) {
    int count = 0;
#ifdef VOXCONV_HAVE_CUDA
    if (vc_cuda_device_count(&count) != VOXCONV_STATUS_SUCCESS)
      count = 0;
#endif
    backend = count > 0 ? VOXCONV_BACKEND_CUDA : VOXCONV_BACKEND_CPU;
    vc_clear_error(NULL);
  }
#ifndef VOXCONV_HAVE_CUDA
  if (backend == VOXCONV_BACKEND_CUDA)
    return vc_fail(NULL, VOXCONV_STATUS_BACKEND_UNAVAILABLE,
                   "voxconv_create: CUDA backend requested but this library "
                   "was built without CUDA");
#endif

  voxconv_handle_t *h = (voxconv_handle_t *)calloc(1, sizeof *h);
  if (!h)
    return vc_fail(NULL, VOXCONV_STATUS_ALLOC_FAILED,
                   "voxconv_create: out of host memory (%zu bytes)",
                   sizeof *h);
  h->backend = backend;
  h->device = d.device;
  h->stream = d.stream;
  if (d.allocator) {
    h->allocator = *d.allocator;
    h->has_allocator = 1;
  }
  h->num_threads = d.num_threads ? d.num_threads : env_num_threads();
  if (h->num_threads == 0)
    h->num_threads = vc_cpu_count();
  h->deterministic = d.deterministic ? 1 : 0;
#ifdef VOXCONV_HAVE_CUDA
  if (backend == VOXCONV_BACKEND_CUDA) {
    voxconv_status_t st = vc_cuda_handle_init(h);
    if (st != VOXCONV_STATUS_SUCCESS) {
      vc_fail(NULL, st, "%s", h->last_error);
      free(h);
      return st;
    }
  }
#endif
  vc_alloc_cache_init(h);
  *handle = h;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_destroy(voxconv_handle_t *h) {
  if (!h)
    return VOXCONV_STATUS_SUCCESS;
  vc_build_worker_stop(h); /* issues what it was given first */
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    vc_cuda_handle_fini(h);
#endif
  vc_alloc_cache_destroy(h);
  free(h->tune_memo);
  free(h);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_get_backend(const voxconv_handle_t *h,
                                     voxconv_backend_t *backend) {
  VC_CHECK_NULL(NULL, h, "handle");
  VC_CHECK_NULL(h, backend, "backend");
  *backend = h->backend;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_set_stream(voxconv_handle_t *h, void *stream) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  if (h->backend != VOXCONV_BACKEND_CUDA && stream != NULL)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_set_stream: the CPU backend has no streams");
  /* Cached blocks are ordered on the old stream only. */
  if (stream != h->stream)
    vc_alloc_cache_release(h);
  h->stream = stream;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_set_deterministic(voxconv_handle_t *h,
                                           int deterministic) {
  VC_CHECK_NULL(NULL, h, "handle");
  h->deterministic = deterministic ? 1 : 0;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_synchronize(voxconv_handle_t *h) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_synchronize(h);
#endif
  return VOXCONV_STATUS_SUCCESS;
}

static int stream_capturing_now(const voxconv_handle_t *h) {
#ifdef VOXCONV_HAVE_CUDA
  if (h && h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_stream_capturing(h);
#else
  (void)h;
#endif
  return 0;
}

int vc_stream_capturing(const voxconv_handle_t *h) {
  if (h && h->capture_depth > 0)
    return h->capture_memo;
  return stream_capturing_now(h);
}

void vc_capture_scope_begin(voxconv_handle_t *h) {
  if (h->capture_depth++ == 0)
    h->capture_memo = stream_capturing_now(h);
}

void vc_capture_scope_end(voxconv_handle_t *h) {
  if (h->capture_depth > 0)
    h->capture_depth--;
}

voxconv_status_t voxconv_stream_create_priority(
    voxconv_handle_t *h, voxconv_stream_priority_t priority, void **stream) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, stream, "stream");
  *stream = NULL;
  if (priority != VOXCONV_STREAM_PRIORITY_NORMAL &&
      priority != VOXCONV_STREAM_PRIORITY_HIGH)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_stream_create_priority: priority %d is neither "
                   "VOXCONV_STREAM_PRIORITY_NORMAL (0) nor _HIGH (1)",
                   (int)priority);
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_stream_create(h, priority == VOXCONV_STREAM_PRIORITY_HIGH,
                                 stream);
#endif
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_stream_create(voxconv_handle_t *h, void **stream) {
  return voxconv_stream_create_priority(h, VOXCONV_STREAM_PRIORITY_NORMAL,
                                        stream);
}

voxconv_status_t voxconv_stream_destroy(voxconv_handle_t *h, void *stream) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  if (!stream)
    return VOXCONV_STATUS_SUCCESS;
  if (h->backend != VOXCONV_BACKEND_CUDA)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_stream_destroy: the CPU backend has no streams");
  if (stream == h->stream)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_stream_destroy: the stream is this handle's own "
                   "(voxconv_set_stream another one first)");
#ifdef VOXCONV_HAVE_CUDA
  return vc_cuda_stream_destroy(h, stream);
#else
  return VOXCONV_STATUS_SUCCESS;
#endif
}

voxconv_status_t voxconv_stream_wait(voxconv_handle_t *h, void *other) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  if (h->backend != VOXCONV_BACKEND_CUDA) {
    if (other)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "voxconv_stream_wait: the CPU backend has no streams");
    return VOXCONV_STATUS_SUCCESS;
  }
#ifdef VOXCONV_HAVE_CUDA
  return vc_cuda_stream_wait(h, other);
#else
  return VOXCONV_STATUS_SUCCESS;
#endif
}

/* ---- timing on the handle's stream ------------------------------------ */
struct voxconv_timer {
  const voxconv_handle_t *h; /* the handle it was started on */
  void *stream;              /* ... and that handle's stream then */
  double t0_ms;              /* CPU: the monotonic clock at start */
  void *cuda;                /* CUDA: the event pair (vc_cuda_timer_*) */
};

double vc_monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

voxconv_status_t voxconv_timer_start(voxconv_handle_t *h,
                                     voxconv_timer_t **timer) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, timer, "timer");
  *timer = NULL;
  voxconv_timer_t *t = (voxconv_timer_t *)calloc(1, sizeof *t);
  if (!t)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "voxconv_timer_start: out of host memory");
  t->h = h;
  t->stream = h->stream;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA) {
    const voxconv_status_t st = vc_cuda_timer_start(h, &t->cuda);
    if (st != VOXCONV_STATUS_SUCCESS) {
      free(t);
      return st;
    }
  }
#endif
  t->t0_ms = vc_monotonic_ms();
  *timer = t;
  return VOXCONV_STATUS_SUCCESS;
}

void voxconv_timer_discard(voxconv_handle_t *h, voxconv_timer_t *timer) {
  (void)h;
  if (!timer)
    return;
#ifdef VOXCONV_HAVE_CUDA
  if (timer->cuda)
    vc_cuda_timer_discard((voxconv_handle_t *)timer->h, timer->cuda);
#endif
  free(timer);
}

voxconv_status_t voxconv_timer_stop(voxconv_handle_t *h,
                                    voxconv_timer_t *timer, double *ms) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  if (!timer)
    return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                   "voxconv_timer_stop: timer is NULL");
  if (!ms) {
    voxconv_timer_discard(h, timer);
    return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                   "voxconv_timer_stop: ms is NULL");
  }
  if (timer->h != h || timer->stream != h->stream) {
    voxconv_timer_discard(h, timer);
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_timer_stop: the timer was started on another "
                   "handle or stream");
  }
#ifdef VOXCONV_HAVE_CUDA
  if (timer->cuda) {
    void *events = timer->cuda;
    free(timer);
    return vc_cuda_timer_stop(h, events, ms); /* frees the events */
  }
#endif
  *ms = vc_monotonic_ms() - timer->t0_ms;
  free(timer);
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- memory ----------------------------------------------------------- */
voxconv_status_t vc_host_alloc(const voxconv_handle_t *h, size_t bytes,
                               void **ptr, const char *what) {
  *ptr = malloc(bytes ? bytes : 1);
  if (!*ptr)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "out of host memory allocating %zu bytes for %s", bytes,
                   what);
  return VOXCONV_STATUS_SUCCESS;
}

const char *vc_backend_name(voxconv_backend_t b) {
  switch (b) {
  case VOXCONV_BACKEND_CPU:
    return "CPU";
  case VOXCONV_BACKEND_CUDA:
    return "CUDA";
  default:
    return "AUTO";
  }
}

voxconv_status_t vc_alloc(voxconv_handle_t *h, size_t bytes, void **ptr,
                          const char *what) {
  *ptr = NULL;
  if (bytes == 0)
    bytes = 1; /* a valid, unique pointer even for empty tensors */
  if (h->has_allocator) {
    *ptr = vc_alloc_cache_get(h, bytes);
    if (!*ptr)
      return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                     "the caller's allocator returned NULL for %zu bytes (%s)",
                     bytes, what);
    return VOXCONV_STATUS_SUCCESS;
  }
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA) {
    voxconv_status_t st = vc_cuda_alloc(h, bytes, ptr);
    if (st != VOXCONV_STATUS_SUCCESS)
      return vc_fail(h, st, "device allocation of %zu bytes for %s failed: %s",
                     bytes, what, h->last_error);
    return st;
  }
#endif
  return vc_host_alloc(h, bytes, ptr, what);
}

void vc_free(voxconv_handle_t *h, void *ptr) {
  if (!ptr)
    return;
  if (h->has_allocator) {
    vc_alloc_cache_put(h, ptr);
    return;
  }
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA) {
    vc_cuda_free(h, ptr);
    return;
  }
#endif
  free(ptr);
}

voxconv_status_t voxconv_malloc(voxconv_handle_t *h, size_t bytes,
                                void **ptr) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, ptr, "ptr");
  return vc_alloc(h, bytes, ptr, "voxconv_malloc");
}

voxconv_status_t voxconv_free(voxconv_handle_t *h, void *ptr) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_free(h, ptr);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_memcpy(voxconv_handle_t *h, void *dst,
                                const void *src, size_t bytes,
                                voxconv_memcpy_kind_t kind) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  if (bytes == 0)
    return VOXCONV_STATUS_SUCCESS;
  VC_CHECK_NULL(h, dst, "dst");
  VC_CHECK_NULL(h, src, "src");
  if (kind != VOXCONV_MEMCPY_HOST_TO_BACKEND &&
      kind != VOXCONV_MEMCPY_BACKEND_TO_HOST &&
      kind != VOXCONV_MEMCPY_BACKEND_TO_BACKEND)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_memcpy: kind %d is not a voxconv_memcpy_kind_t",
                   (int)kind);
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_memcpy(h, dst, src, bytes, kind);
#endif
  memmove(dst, src, bytes);
  return VOXCONV_STATUS_SUCCESS;
}
