/* Device-memory helpers of the tests that call the CUDA runtime themselves
 * (test_async, test_build_worker; compiled with VC_TEST_CUDA_RUNTIME).
 * Header-only (static): each test is one translation unit. */
#ifndef CUDA_TEST_UTIL_H
#define CUDA_TEST_UTIL_H

#include "vc_test.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
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

/* One f16 convolution problem on a stream of its own: random coordinates
 * (about n_target voxels in a cube of side `extent`; VOXCONV_TEST_SMALL=1,
 * for compute-sanitizer runs, makes it ~3000 in 12 so that the autotuner's
 * candidates stay affordable under the tools), x, dy and 3x3x3 weights
 * with `channels` in and out, output buffers, a deterministic CUDA handle
 * and the tensor-core family only (the algorithms that need no pair counts
 * on the host). */
typedef struct conv_problem {
  voxconv_handle_t *h;
  cudaStream_t stream;
  int64_t n;
  int32_t *coords;            /* device */
  void *x, *w, *dy;           /* inputs, device, f16 */
  void *y, *dx, *dw;          /* outputs, device, f16 */
  voxconv_conv_options_t opt;
} conv_problem_t;

static inline int conv_problem_init(conv_problem_t *P, int channels,
                                    int64_t n_target, int extent) {
  const int64_t kv = 27;
  memset(P, 0, sizeof *P);
  VC_REQUIRE(cudaStreamCreateWithFlags(&P->stream, cudaStreamNonBlocking) ==
                 cudaSuccess,
             "stream");
  voxconv_handle_desc_t d = {VOXCONV_BACKEND_CUDA, 0, P->stream, NULL, 0, 1};
  VC_REQUIRE(voxconv_create(&P->h, &d) == VOXCONV_STATUS_SUCCESS,
             "voxconv_create: %s", voxconv_get_last_error(NULL));
  const char *small = getenv("VOXCONV_TEST_SMALL");
  const int is_small = small && strcmp(small, "1") == 0;
  int32_t *c = vc_random_coords(is_small ? 3000 : n_target,
                                is_small ? 12 : extent, &P->n);
  P->coords = (int32_t *)dev_upload(c, (size_t)P->n * 16);
  free(c);
  P->x = dev_random_f16(P->n * channels);
  P->dy = dev_random_f16(P->n * channels);
  P->w = dev_random_f16(kv * channels * channels);
  P->y = dev_alloc((size_t)P->n * channels * 2);
  P->dx = dev_alloc((size_t)P->n * channels * 2);
  P->dw = dev_alloc((size_t)(kv * channels * channels) * 2);
  VC_REQUIRE(P->coords && P->x && P->dy && P->w && P->y && P->dx && P->dw,
             "device buffers");
  P->opt.fwd_algo = "[mask_gemm, mask_gemm_wgmma]";
  P->opt.bwd_algo = "[mask_gemm, mask_gemm_wgmma]";
  return 1;
}

/* A centred, undilated map descriptor with kernel k and stride s on every
 * axis. */
static inline voxconv_kmap_desc_t desc3(voxconv_kmap_mode_t mode, int k,
                                        int s) {
  const voxconv_kmap_desc_t d = {.mode = mode,
                                 .kernel_size = {k, k, k},
                                 .stride = {s, s, s},
                                 .dilation = {1, 1, 1}};
  return d;
}

/* A map built by h while its stream `s` is being captured into a CUDA
 * graph, the graph instantiated and replayed once (synchronised): the
 * build, the end of the capture, the instantiation and the replay are each
 * checked (`what` names the case). Returns the map (NULL if the build
 * failed; destroy it through h) and in *exec the executable graph to
 * destroy after the map's last use (NULL when a step failed: the map's
 * tables were then never written). */
static inline voxconv_kmap_t *
captured_build_replayed(const char *what, voxconv_handle_t *h, cudaStream_t s,
                        const voxconv_kmap_desc_t *d,
                        const voxconv_coords_t *in, cudaGraphExec_t *exec) {
  voxconv_kmap_t *m = NULL;
  cudaGraph_t graph = NULL;
  *exec = NULL;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess) {
    VC_EXPECT(0, "%s: begin capture", what);
    return NULL;
  }
  const voxconv_status_t sb = voxconv_kmap_build(h, d, in, NULL, &m);
  const cudaError_t ec = cudaStreamEndCapture(s, &graph);
  VC_EXPECT(sb == VOXCONV_STATUS_SUCCESS && ec == cudaSuccess && graph,
            "%s: build while capturing: %s (%s), end capture %s", what,
            voxconv_status_string(sb), voxconv_get_last_error(h),
            cudaGetErrorString(ec));
  if (graph && m) {
    VC_EXPECT(cudaGraphInstantiate(exec, graph, 0) == cudaSuccess,
              "%s: instantiate the captured build", what);
    if (*exec)
      VC_EXPECT(cudaGraphLaunch(*exec, s) == cudaSuccess &&
                    cudaStreamSynchronize(s) == cudaSuccess,
                "%s: replay", what);
  }
  if (graph)
    cudaGraphDestroy(graph); /* the executable graph stays valid */
  return m;
}

#endif
