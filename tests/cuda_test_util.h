/* Device-memory helpers of the tests that call the CUDA runtime themselves
 * (test_async, test_build_worker; compiled with VC_TEST_CUDA_RUNTIME).
 * Header-only (static): each test is one translation unit. */
#ifndef CUDA_TEST_UTIL_H
#define CUDA_TEST_UTIL_H

#include "vc_test.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* A failed check that makes the rest of the function meaningless:
 * counted as a failure, then `return ret` (empty for void functions). */
#define REQUIRE_OR(ret, cond, ...)                                             \
  do {                                                                         \
    if (!(cond)) {                                                             \
      VC_EXPECT(cond, __VA_ARGS__);                                            \
      return ret;                                                              \
    }                                                                          \
  } while (0)
#define VC_REQUIRE(cond, ...) REQUIRE_OR(0, cond, __VA_ARGS__)
#define VC_REQUIRE_VOID(cond, ...) REQUIRE_OR(, cond, __VA_ARGS__)
#define CUDA_OK_VOID(call)                                                     \
  do {                                                                         \
    const cudaError_t e_ = (call);                                             \
    VC_REQUIRE_VOID(e_ == cudaSuccess, "%s: %s", #call,                       \
                    cudaGetErrorString(e_));                                   \
  } while (0)

static inline double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Holds a stream for 300 ms: work queued behind it cannot start. */
static inline void CUDART_CB hold_stream(void *arg) {
  (void)arg;
  usleep(300 * 1000);
}

static inline void *dev_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes) != cudaSuccess)
    return NULL;
  return p;
}

static inline void *dev_upload(const void *host, size_t bytes) {
  void *p = dev_alloc(bytes);
  if (p && cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    return NULL;
  return p;
}

static inline void *dev_random_f16(int64_t n) {
  uint16_t *h = (uint16_t *)malloc((size_t)n * 2);
  vc_fill_normal(h, VOXCONV_DTYPE_F16, n);
  void *d = dev_upload(h, (size_t)n * 2);
  free(h);
  return d;
}

/* n device f16 values on the host (synchronous copy); NULL on failure. */
static inline uint16_t *dev_download_u16(const void *d, int64_t n) {
  uint16_t *h = (uint16_t *)malloc((size_t)n * 2 + 2);
  if (h && cudaMemcpy(h, d, (size_t)n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
    free(h);
    return NULL;
  }
  return h;
}

/* Bitwise equality of n f16 values (0xFFFF is NaN in f16: a poisoned,
 * unwritten element never matches a finite reference value). */
static inline void expect_same_u16(const char *what, const uint16_t *a,
                                   const uint16_t *b, int64_t n) {
  int64_t bad = 0, first = -1;
  for (int64_t e = 0; e < n; e++)
    if (a[e] != b[e] && bad++ == 0)
      first = e;
  VC_EXPECT(bad == 0, "%s: %lld of %lld elements differ (first %lld: %04x vs "
            "%04x)", what, (long long)bad, (long long)n, (long long)first,
            first >= 0 ? a[first] : 0, first >= 0 ? b[first] : 0);
}

#endif
