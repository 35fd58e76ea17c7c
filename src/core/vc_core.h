/* Internal core: the handle, error reporting, memory, dtype conversion and
 * the CPU thread pool. Every room of src/ includes this; tools/ and python/
 * never do (they use include/voxconv.h only). */
#ifndef VC_CORE_H
#define VC_CORE_H

#include "voxconv.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define VC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VC_PRINTF(a, b)
#endif

#define VC_ERROR_MAX 1024

struct voxconv_handle {
  voxconv_backend_t backend; /* resolved: CPU or CUDA, never AUTO */
  int device;
  void *stream;
  voxconv_allocator_t allocator;
  int has_allocator;
  int num_threads;
  int deterministic;
  void *cuda; /* CUDA backend private state (cuBLAS handle, ...) */
  /* Tuner (src/tune): what the last conv/depthwise call ran, and this
   * handle's device identity in the tuning cache key (filled lazily). */
  voxconv_call_info_t last_call;
  int has_last_call;
  char tune_device_key[160];
  /* The tuner's memo of this handle's recent decisions (src/tune/memo.c,
   * plain malloc; NULL until the first conv). */
  void *tune_memo;
  /* Idle blocks kept in front of the caller's allocator (alloc_cache.c;
   * NULL without a caller's allocator or with the cache off). */
  struct vc_alloc_cache *alloc_cache;
  /* vc_capture_scope_begin / _end: depth of the open scopes, and the
   * capture state read when the outermost one opened. */
  int capture_depth, capture_memo;
  /* The build worker (src/coords/kmap_worker.c; NULL when off), which
   * issues this handle's asynchronous kernel-map builds on a library
   * thread: every public call on the handle but a build first waits until
   * the worker has issued what it was given (vc_clear_error does). */
  struct vc_build_worker *worker;
  /* Last: the worker copies the fields above into its own handle without
   * this buffer, which the caller's thread may be writing meanwhile. */
  char last_error[VC_ERROR_MAX];
};

/* The build worker of h (kmap_worker.c). drain: returns once the worker
 * has issued every build queued on h (no-op without one); stop: drains,
 * joins the thread and frees it (handle destruction). */
void vc_build_worker_drain(voxconv_handle_t *h);
void vc_build_worker_stop(voxconv_handle_t *h);

/* "CPU", "CUDA" or "AUTO", for messages. */
const char *vc_backend_name(voxconv_backend_t b);

typedef struct vc_alloc_cache vc_alloc_cache_t;
/* alloc_cache.c: init at handle creation, destroy at handle destruction,
 * release = give every idle block back to the caller's allocator; get/put
 * replace the caller's alloc/free (get returns NULL when it fails). */
void vc_alloc_cache_init(voxconv_handle_t *h);
void vc_alloc_cache_destroy(voxconv_handle_t *h);
void vc_alloc_cache_release(voxconv_handle_t *h);
void *vc_alloc_cache_get(voxconv_handle_t *h, size_t bytes);
void vc_alloc_cache_put(voxconv_handle_t *h, void *ptr);

/* Records a failure with context on h (or the calling thread when h is NULL)
 * and returns `status`, so call sites read `return vc_fail(h, ...)`. */
voxconv_status_t vc_fail(const voxconv_handle_t *h, voxconv_status_t status,
                         const char *fmt, ...) VC_PRINTF(3, 4);
voxconv_status_t vc_failv(const voxconv_handle_t *h, voxconv_status_t status,
                          const char *fmt, va_list ap);
/* Clears the last error (called at the start of each public call); on a
 * handle with a build worker, first waits until the worker has issued its
 * queued builds, so the call's work is ordered after them on the stream
 * and the worker no longer uses the handle's state. */
void vc_clear_error(const voxconv_handle_t *h);
/* The same without that wait: only a kernel-map build that the worker
 * takes may start so (it queues work for the worker, nothing else). */
void vc_clear_error_only(const voxconv_handle_t *h);

#define VC_CHECK(expr)                                                         \
  do {                                                                         \
    voxconv_status_t vc_st_ = (expr);                                          \
    if (vc_st_ != VOXCONV_STATUS_SUCCESS)                                      \
      return vc_st_;                                                           \
  } while (0)

#define VC_CHECK_NULL(h, ptr, name)                                            \
  do {                                                                         \
    if ((ptr) == NULL)                                                         \
      return vc_fail((h), VOXCONV_STATUS_NULL_POINTER, "%s: %s is NULL",      \
                     __func__, (name));                                        \
  } while (0)

/* Backend memory through the handle's allocator (or the built-in one). The
 * error message names `what` and the size asked. */
voxconv_status_t vc_alloc(voxconv_handle_t *h, size_t bytes, void **ptr,
                          const char *what);
void vc_free(voxconv_handle_t *h, void *ptr);
/* 1 when the handle's stream is being captured into a CUDA graph
 * (cudaStreamIsCapturing): work queued now is recorded, not run, so
 * nothing may wait for it (no host synchronisation, no benchmark). 0 on
 * CPU and when the query fails. */
int vc_stream_capturing(const voxconv_handle_t *h);
/* A library call that asks vc_stream_capturing many times (every block of
 * a kernel-map build's workspace is taken from and given back to the
 * allocation cache, each asking) reads the state once: inside a scope the
 * answer read when the outermost scope opened is returned. The state
 * cannot change within one library call: only the caller begins or ends a
 * capture, between calls. Why: ~500 cudaStreamIsCapturing calls per
 * workload-A forward, 0.22-0.27 ms of host time on the lent H200 host
 * (docs/perf-notes.md item 93). Scopes nest; every begin needs its end. */
void vc_capture_scope_begin(voxconv_handle_t *h);
void vc_capture_scope_end(voxconv_handle_t *h);
/* Host scratch memory (plain malloc with a proper error). */
voxconv_status_t vc_host_alloc(const voxconv_handle_t *h, size_t bytes,
                               void **ptr, const char *what);

/* The monotonic clock in milliseconds (CPU timing: voxconv_timer_*, the
 * tuner). */
double vc_monotonic_ms(void);

/* ---- dtype conversion (host) ----------------------------------------- */
float vc_f16_to_f32(uint16_t h);
uint16_t vc_f32_to_f16(float f); /* round to nearest even */
float vc_bf16_to_f32(uint16_t h);
uint16_t vc_f32_to_bf16(float f); /* round to nearest even, NaN kept */
/* Converts n elements of src (dtype) to float / double and back. */
void vc_load_f32(const void *src, voxconv_dtype_t dtype, int64_t n,
                 float *dst);
void vc_store_f32(void *dst, voxconv_dtype_t dtype, int64_t n,
                  const float *src);
void vc_load_f64(const void *src, voxconv_dtype_t dtype, int64_t n,
                 double *dst);
void vc_store_f64(void *dst, voxconv_dtype_t dtype, int64_t n,
                  const double *src);
int vc_dtype_valid(voxconv_dtype_t dtype);

/* ---- CPU threads ------------------------------------------------------ */
/* fn(ctx, begin, end, tid) is called over [0, n) in chunks of `grain`
 * (dynamically scheduled over h->num_threads threads, tid < num_threads).
 * Chunks must write disjoint outputs; results then never depend on the
 * schedule. Runs inline when n <= grain or one thread is configured. */
typedef void (*vc_task_fn)(void *ctx, int64_t begin, int64_t end, int tid);
voxconv_status_t vc_parallel_for(const voxconv_handle_t *h, int64_t n,
                                 int64_t grain, vc_task_fn fn, void *ctx);
int vc_cpu_count(void);

/* ---- text ------------------------------------------------------------- */
/* snprintf(dst, cap, "%s", src) without the format machinery (cap > 0; a
 * NULL src gives ""): the dispatch of every op copies a few names, and
 * those snprintf calls were the largest item in a cached call's instruction
 * count outside the work (callgrind, docs/perf-notes.md item 69). */
static inline void vc_copy_text(char *dst, size_t cap, const char *src) {
  size_t n = 0;
  if (src)
    while (n + 1 < cap && src[n])
      n++;
  for (size_t i = 0; i < n; i++)
    dst[i] = src[i];
  dst[n] = '\0';
}

/* ---- environment ------------------------------------------------------ */
/* Returns the variable or NULL when unset or empty. */
const char *vc_getenv(const char *name);
/* Parses true/false/1/0/yes/no/on/off (case-insensitive, spaces trimmed):
 * 1, 0, or -1 when malformed. */
int vc_parse_bool(const char *s);
/* Parses a finite number >= 0 (strtod, spaces after it allowed) into *out:
 * 0, or -1 when malformed (*out untouched). */
int vc_parse_nonneg(const char *s, double *out);

#ifdef __cplusplus
}
#endif
#endif
