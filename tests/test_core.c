/* Core contracts: handle lifecycle, status names, error messages, dtype
 * conversions (against hand-computed bit patterns), backend memory. */
#include "vc_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/vc_core.h"

static void test_status_names(void) {
  for (int s = 0; s <= VOXCONV_STATUS_INTERNAL; s++) {
    const char *n = voxconv_status_string((voxconv_status_t)s);
    VC_EXPECT(strncmp(n, "VOXCONV_STATUS_", 15) == 0 &&
                  strcmp(n, "VOXCONV_STATUS_UNKNOWN") != 0,
              "status %d has name %s", s, n);
  }
  VC_EXPECT(strcmp(voxconv_status_string((voxconv_status_t)999),
                   "VOXCONV_STATUS_UNKNOWN") == 0, "unknown code");
}

static void test_handle(void) {
  VC_EXPECT_STATUS(NULL, voxconv_destroy(NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(NULL, voxconv_create(NULL, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT(strstr(voxconv_get_last_error(NULL), "handle") != NULL,
            "message names the argument: %s", voxconv_get_last_error(NULL));
  voxconv_handle_t *h = NULL;
  voxconv_handle_desc_t d = {0};
  d.backend = (voxconv_backend_t)7;
  VC_EXPECT_STATUS(NULL, voxconv_create(&h, &d),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT(h == NULL, "no handle on failure");
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = 2;
  VC_EXPECT_STATUS(NULL, voxconv_create(&h, &d), VOXCONV_STATUS_SUCCESS);
  voxconv_backend_t b = VOXCONV_BACKEND_AUTO;
  VC_EXPECT_STATUS(h, voxconv_get_backend(h, &b), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(b == VOXCONV_BACKEND_CPU, "backend %d", (int)b);
  VC_EXPECT_STATUS(h, voxconv_set_stream(h, (void *)0x1),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT(strstr(voxconv_get_last_error(h), "stream") != NULL, "%s",
            voxconv_get_last_error(h));
  /* memory round trip */
  void *p = NULL;
  VC_EXPECT_STATUS(h, voxconv_malloc(h, 64, &p), VOXCONV_STATUS_SUCCESS);
  char src[64], dst[64];
  for (int i = 0; i < 64; i++)
    src[i] = (char)vc_rand_u64();
  VC_EXPECT_STATUS(h, voxconv_memcpy(h, p, src, 64, VOXCONV_MEMCPY_HOST_TO_BACKEND),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(h, voxconv_memcpy(h, dst, p, 64, VOXCONV_MEMCPY_BACKEND_TO_HOST),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(memcmp(src, dst, 64) == 0, "memcpy round trip");
  VC_EXPECT_STATUS(h, voxconv_memcpy(h, dst, p, 8, (voxconv_memcpy_kind_t)9),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  voxconv_free(h, p);
  voxconv_destroy(h);
  if (!voxconv_has_cuda()) {
    d.backend = VOXCONV_BACKEND_CUDA;
    VC_EXPECT_STATUS(NULL, voxconv_create(&h, &d),
                     VOXCONV_STATUS_BACKEND_UNAVAILABLE);
  }
}

/* The timer contract on one handle: a measured interval, and every misuse
 * answered with a status (never a crash or a leak: valgrind and ASan run
 * this test). */
static void timer_checks(voxconv_handle_t *h, const char *name) {
  voxconv_timer_t *t = NULL;
  double ms = -1;
  VC_EXPECT_STATUS(NULL, voxconv_timer_start(NULL, &t),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, voxconv_timer_start(h, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, voxconv_timer_stop(h, NULL, &ms),
                   VOXCONV_STATUS_NULL_POINTER);
  voxconv_timer_discard(h, NULL);
  /* an idle interval of 30 ms: both clocks see it (CUDA: the stop event is
   * queued after the sleep on an idle stream) */
  VC_EXPECT_STATUS(h, voxconv_timer_start(h, &t), VOXCONV_STATUS_SUCCESS);
  const struct timespec nap = {0, 30 * 1000 * 1000};
  nanosleep(&nap, NULL);
  VC_EXPECT_STATUS(h, voxconv_timer_stop(h, t, &ms), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(ms >= 29.0 && ms < 5000.0, "%s: a 30 ms sleep timed as %g ms",
            name, ms);
  /* work on the stream: a 64 MiB backend copy takes a positive time */
  void *a = NULL, *b = NULL;
  const size_t bytes = (size_t)64 << 20;
  if (voxconv_malloc(h, bytes, &a) == VOXCONV_STATUS_SUCCESS &&
      voxconv_malloc(h, bytes, &b) == VOXCONV_STATUS_SUCCESS) {
    ms = -1;
    VC_EXPECT_STATUS(h, voxconv_timer_start(h, &t), VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h, voxconv_memcpy(h, b, a, bytes,
                                       VOXCONV_MEMCPY_BACKEND_TO_BACKEND),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h, voxconv_timer_stop(h, t, &ms),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(ms > 0 && ms < 5000.0, "%s: a 64 MiB copy timed as %g ms",
              name, ms);
  }
  voxconv_free(h, a);
  voxconv_free(h, b);
  /* misuse after a start frees the timer */
  VC_EXPECT_STATUS(h, voxconv_timer_start(h, &t), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(h, voxconv_timer_stop(h, t, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  voxconv_handle_t *other = NULL;
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = 1;
  if (voxconv_create(&other, &d) == VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT_STATUS(h, voxconv_timer_start(h, &t), VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(other, voxconv_timer_stop(other, t, &ms),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT(strstr(voxconv_get_last_error(other), "another handle") != NULL,
              "%s", voxconv_get_last_error(other));
    voxconv_destroy(other);
  }
  VC_EXPECT_STATUS(h, voxconv_timer_start(h, &t), VOXCONV_STATUS_SUCCESS);
  voxconv_timer_discard(h, t);
}

static void test_timer(void) {
  voxconv_handle_t *h = NULL;
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = 1;
  VC_EXPECT_STATUS(NULL, voxconv_create(&h, &d), VOXCONV_STATUS_SUCCESS);
  if (h)
    timer_checks(h, "cpu");
  voxconv_destroy(h);
  /* The CUDA timer where a GPU exists (this test runs on the device too). */
  int n_dev = 0;
  if (voxconv_device_count(&n_dev) == VOXCONV_STATUS_SUCCESS && n_dev > 0) {
    d.backend = VOXCONV_BACKEND_CUDA;
    h = NULL;
    VC_EXPECT_STATUS(NULL, voxconv_create(&h, &d), VOXCONV_STATUS_SUCCESS);
    if (h)
      timer_checks(h, "cuda");
    voxconv_destroy(h);
  } else {
    printf("test_core: no GPU, CUDA timer not checked\n");
  }
}

/* Streams: the contract on CPU (no streams, every call answered), and on a
 * GPU that voxconv_stream_wait really orders two streams: stream A
 * poisons and recomputes Y many times, stream B copies Y out after waiting
 * for A; were the wait missing, B's copy would run beside A's work and see
 * Y poisoned or half written. */
static void test_streams(void) {
  voxconv_handle_t *h = NULL;
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = 1;
  void *s = (void *)1;
  VC_EXPECT_STATUS(NULL, voxconv_stream_create(NULL, &s),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_stream_wait(NULL, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_stream_destroy(NULL, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_handle_set_build_worker(NULL, 1),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_kmap_order(NULL, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_create(&h, &d), VOXCONV_STATUS_SUCCESS);
  if (h) {
    /* The build worker is CUDA's; turning it off is always allowed. */
    VC_EXPECT_STATUS(h, voxconv_handle_set_build_worker(h, 1),
                     VOXCONV_STATUS_UNSUPPORTED);
    VC_EXPECT(strstr(voxconv_get_last_error(h), "CUDA handles only") != NULL,
              "set_build_worker on CPU: %s", voxconv_get_last_error(h));
    VC_EXPECT_STATUS(h, voxconv_handle_set_build_worker(h, 0),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h, voxconv_kmap_order(h, NULL),
                     VOXCONV_STATUS_NULL_POINTER);
    VC_EXPECT_STATUS(h, voxconv_stream_create(h, NULL),
                     VOXCONV_STATUS_NULL_POINTER);
    VC_EXPECT_STATUS(h, voxconv_stream_create(h, &s), VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(s == NULL, "CPU stream_create gave %p, want NULL", s);
    s = (void *)1;
    VC_EXPECT_STATUS(h,
                     voxconv_stream_create_priority(
                         h, VOXCONV_STREAM_PRIORITY_HIGH, &s),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(s == NULL, "CPU stream_create_priority gave %p, want NULL", s);
    VC_EXPECT_STATUS(h,
                     voxconv_stream_create_priority(
                         h, (voxconv_stream_priority_t)2, &s),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT(strstr(voxconv_get_last_error(h), "priority 2") != NULL,
              "bad priority message: %s", voxconv_get_last_error(h));
    VC_EXPECT_STATUS(h,
                     voxconv_stream_create_priority(
                         h, VOXCONV_STREAM_PRIORITY_HIGH, NULL),
                     VOXCONV_STATUS_NULL_POINTER);
    VC_EXPECT_STATUS(h, voxconv_stream_wait(h, NULL), VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h, voxconv_stream_wait(h, (void *)1),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT_STATUS(h, voxconv_stream_destroy(h, NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h, voxconv_stream_destroy(h, (void *)1),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
  }
  voxconv_destroy(h);

  int n_dev = 0;
  if (voxconv_device_count(&n_dev) != VOXCONV_STATUS_SUCCESS || n_dev == 0) {
    printf("test_core: no GPU, CUDA streams not checked\n");
    return;
  }
  d.backend = VOXCONV_BACKEND_CUDA;
  voxconv_handle_t *ha = NULL, *hb = NULL;
  void *sa = NULL, *sb = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_create(&ha, &d), VOXCONV_STATUS_SUCCESS);
  if (!ha)
    return;
  VC_EXPECT_STATUS(ha, voxconv_stream_create(ha, &sa), VOXCONV_STATUS_SUCCESS);
  /* B at high priority: the ordering below must hold across priorities
   * (the bench builds its maps on such a stream) */
  VC_EXPECT_STATUS(ha,
                   voxconv_stream_create_priority(
                       ha, VOXCONV_STREAM_PRIORITY_HIGH, &sb),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(sa && sb && sa != sb, "two CUDA streams: %p %p", sa, sb);
  VC_EXPECT_STATUS(ha, voxconv_set_stream(ha, sa), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(ha, voxconv_stream_destroy(ha, sa),
                   VOXCONV_STATUS_INVALID_ARGUMENT); /* its own stream */
  VC_EXPECT_STATUS(ha, voxconv_stream_wait(ha, sa), VOXCONV_STATUS_SUCCESS);
  d.stream = sb;
  VC_EXPECT_STATUS(NULL, voxconv_create(&hb, &d), VOXCONV_STATUS_SUCCESS);
  /* Stream A's work is kernels: a 3x3x3 submanifold conv on a dense
   * 48^3 block (110,592 rows, 32 -> 32 channels, f32), run 16 times into Y,
   * each time after Y is poisoned. (Copies alone cannot show a missing
   * wait: device-to-device copies of two streams may share one copy
   * engine queue and run in order anyway.) */
  const int side = 48;
  const int64_t rows = (int64_t)side * side * side, ch = 32;
  const size_t fbytes = (size_t)rows * ch * sizeof(float);
  int32_t *hc = (int32_t *)malloc((size_t)rows * 4 * sizeof *hc);
  float *host = (float *)malloc(fbytes), *yfin = (float *)malloc(fbytes);
  void *c = NULL, *x = NULL, *w = NULL, *y = NULL, *p = NULL, *z = NULL;
  voxconv_kmap_t *map = NULL;
  if (hb && hc && host && yfin &&
      voxconv_malloc(ha, (size_t)rows * 4 * sizeof *hc, &c) ==
          VOXCONV_STATUS_SUCCESS &&
      voxconv_malloc(ha, fbytes, &x) == VOXCONV_STATUS_SUCCESS &&
      voxconv_malloc(ha, 27 * ch * ch * sizeof(float), &w) ==
          VOXCONV_STATUS_SUCCESS &&
      voxconv_malloc(ha, fbytes, &y) == VOXCONV_STATUS_SUCCESS &&
      voxconv_malloc(ha, fbytes, &p) == VOXCONV_STATUS_SUCCESS &&
      voxconv_malloc(ha, fbytes, &z) == VOXCONV_STATUS_SUCCESS) {
    for (int64_t i = 0; i < rows; i++) {
      hc[4 * i] = 0;
      hc[4 * i + 1] = (int32_t)(i % side);
      hc[4 * i + 2] = (int32_t)(i / side % side);
      hc[4 * i + 3] = (int32_t)(i / side / side);
    }
    uint32_t rng = (uint32_t)time(NULL) | 1u;
    for (int64_t i = 0; i < rows * ch; i++) {
      rng = rng * 1664525u + 1013904223u;
      host[i] = (float)(rng >> 8) / 16777216.0f - 0.5f;
    }
    VC_EXPECT_STATUS(ha, voxconv_memcpy(ha, c, hc, (size_t)rows * 16,
                                        VOXCONV_MEMCPY_HOST_TO_BACKEND),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(ha, voxconv_memcpy(ha, x, host, fbytes,
                                        VOXCONV_MEMCPY_HOST_TO_BACKEND),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(ha, voxconv_memcpy(ha, w, host,
                                        27 * ch * ch * sizeof(float),
                                        VOXCONV_MEMCPY_HOST_TO_BACKEND),
                     VOXCONV_STATUS_SUCCESS);
    for (int64_t i = 0; i < rows * ch; i++)
      host[i] = -12345.0f;
    VC_EXPECT_STATUS(ha, voxconv_memcpy(ha, p, host, fbytes,
                                        VOXCONV_MEMCPY_HOST_TO_BACKEND),
                     VOXCONV_STATUS_SUCCESS);
    const voxconv_coords_t cc = {(const int32_t *)c, rows, {1, 1, 1}};
    const voxconv_kmap_desc_t geo = {.mode = VOXCONV_KMAP_SUBMANIFOLD, .kernel_size = {3, 3, 3}};
    VC_EXPECT_STATUS(ha, voxconv_kmap_build(ha, &geo, &cc, NULL, &map),
                     VOXCONV_STATUS_SUCCESS);
    const voxconv_feats_t fx = {x, rows, ch, VOXCONV_DTYPE_F32},
                          fy = {y, rows, ch, VOXCONV_DTYPE_F32};
    const voxconv_weights_t fw = {w, 27, ch, ch, VOXCONV_DTYPE_F32};
    voxconv_conv_options_t opt = {0};
    /* no tuner; implicit_gemm waits once for the (asynchronously built)
     * map on its first call, after which nothing synchronises */
    opt.fwd_algo = "implicit_gemm";
    voxconv_status_t st = map ? VOXCONV_STATUS_SUCCESS
                              : VOXCONV_STATUS_INTERNAL;
    for (int k = 0; k < 16 && st == VOXCONV_STATUS_SUCCESS; k++)
      if ((st = voxconv_memcpy(ha, y, p, fbytes,
                               VOXCONV_MEMCPY_BACKEND_TO_BACKEND)) ==
          VOXCONV_STATUS_SUCCESS)
        st = voxconv_conv_forward(ha, map, &fx, &fw, &fy, &opt);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "work on stream A: %s",
              voxconv_get_last_error(ha));
    /* VC_TEST_STREAMS_NO_WAIT=1 leaves the wait out: this check must then
     * fail (run so once on a GPU to see that it can). */
    const char *no_wait = getenv("VC_TEST_STREAMS_NO_WAIT");
    if (!no_wait || strcmp(no_wait, "1") != 0)
      VC_EXPECT_STATUS(hb, voxconv_stream_wait(hb, sa),
                       VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(hb, voxconv_memcpy(hb, z, y, fbytes,
                                        VOXCONV_MEMCPY_BACKEND_TO_BACKEND),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(hb, voxconv_memcpy(hb, host, z, fbytes,
                                        VOXCONV_MEMCPY_BACKEND_TO_HOST),
                     VOXCONV_STATUS_SUCCESS);
    /* Y once A is done: every run wrote the same values. */
    VC_EXPECT_STATUS(ha, voxconv_memcpy(ha, yfin, y, fbytes,
                                        VOXCONV_MEMCPY_BACKEND_TO_HOST),
                     VOXCONV_STATUS_SUCCESS);
    int64_t bad = 0, first = -1, poisoned = 0;
    for (int64_t i = 0; i < rows * ch; i++) {
      poisoned += yfin[i] == -12345.0f;
      if (memcmp(&host[i], &yfin[i], sizeof(float)) != 0) {
        bad++;
        if (first < 0)
          first = i;
      }
    }
    VC_EXPECT(poisoned == 0, "Y still holds %lld poisoned values after the "
              "conv", (long long)poisoned);
    VC_EXPECT(bad == 0,
              "stream B read Y before stream A finished writing it: %lld of "
              "%lld values differ, first at %lld (%g, final %g)",
              (long long)bad, (long long)(rows * ch), (long long)first,
              first >= 0 ? host[first] : 0.0, first >= 0 ? yfin[first] : 0.0);
  }
  voxconv_kmap_destroy(ha, map);
  VC_EXPECT_STATUS(ha, voxconv_synchronize(ha), VOXCONV_STATUS_SUCCESS);
  voxconv_free(ha, c);
  voxconv_free(ha, x);
  voxconv_free(ha, w);
  voxconv_free(ha, y);
  voxconv_free(ha, p);
  voxconv_free(ha, z);
  free(hc);
  free(host);
  free(yfin);
  voxconv_destroy(hb);
  VC_EXPECT_STATUS(ha, voxconv_set_stream(ha, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(ha, voxconv_stream_destroy(ha, sa), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(ha, voxconv_stream_destroy(ha, sb), VOXCONV_STATUS_SUCCESS);
  voxconv_destroy(ha);
}

static void test_dtypes(void) {
  /* hand-computed IEEE half / bfloat16 bit patterns */
  VC_EXPECT(vc_f32_to_f16(1.0f) == 0x3C00, "1.0");
  VC_EXPECT(vc_f32_to_f16(-2.0f) == 0xC000, "-2.0");
  VC_EXPECT(vc_f32_to_f16(65504.0f) == 0x7BFF, "max half");
  VC_EXPECT(vc_f32_to_f16(65520.0f) == 0x7C00, "overflow to inf");
  VC_EXPECT(vc_f32_to_f16(5.9604644775390625e-8f) == 0x0001, "min subnormal");
  VC_EXPECT(vc_f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00, "tie to even down");
  VC_EXPECT(vc_f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02, "tie to even up");
  VC_EXPECT((vc_f32_to_f16(NAN) & 0x7C00) == 0x7C00 &&
                (vc_f32_to_f16(NAN) & 0x3FF) != 0, "nan");
  VC_EXPECT(vc_f16_to_f32(0x3555) == 0.333251953125f, "1/3 in half");
  VC_EXPECT(vc_f32_to_bf16(1.0f) == 0x3F80, "bf16 1.0");
  VC_EXPECT(vc_f32_to_bf16(1.00390625f) == 0x3F80, "bf16 tie even");
  VC_EXPECT(vc_bf16_to_f32(0xC040) == -3.0f, "bf16 -3");
  /* every f16 value survives f16 -> f32 -> f16 */
  int bad = 0;
  for (uint32_t u = 0; u < 65536; u++) {
    uint16_t x = (uint16_t)u;
    float f = vc_f16_to_f32(x);
    if (isnan(f))
      continue;
    if (vc_f32_to_f16(f) != x)
      bad++;
  }
  VC_EXPECT(bad == 0, "%d half values do not round trip", bad);
  VC_EXPECT(voxconv_dtype_size(VOXCONV_DTYPE_BF16) == 2 &&
                voxconv_dtype_size((voxconv_dtype_t)42) == 0, "sizes");
}

static void sum_task(void *ctx, int64_t b, int64_t e, int tid) {
  (void)tid;
  int64_t *out = (int64_t *)ctx;
  for (int64_t i = b; i < e; i++)
    out[i] = i * i;
}

static void test_threads(void) {
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = 4;
  voxconv_handle_t *h = NULL;
  if (voxconv_create(&h, &d) != VOXCONV_STATUS_SUCCESS)
    return;
  int64_t n = 100003;
  int64_t *v = (int64_t *)malloc(sizeof(int64_t) * n);
  memset(v, 0xFF, sizeof(int64_t) * n);
  vc_parallel_for(h, n, 977, sum_task, v);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i++)
    wrong += v[i] != i * i;
  VC_EXPECT(wrong == 0, "%lld elements wrong", (long long)wrong);
  free(v);
  voxconv_destroy(h);
}

/* The environment parsers: booleans, and the non-negative numbers of the
 * spin knobs (VOXCONV_WORKER_*_SPIN_US), which must refuse what atof
 * would half-read. */
static void test_env_parsers(void) {
  static const struct {
    const char *s;
    int want;
  } bools[] = {{"1", 1},     {" TRUE ", 1}, {"yes", 1}, {"On", 1},
               {"0", 0},     {"false", 0},  {"no", 0},  {" off", 0},
               {"2", -1},    {"tru", -1},   {"", -1},   {"onx", -1},
               {"1 0", -1}};
  for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
    VC_EXPECT(vc_parse_bool(bools[i].s) == bools[i].want,
              "vc_parse_bool('%s') = %d, want %d", bools[i].s,
              vc_parse_bool(bools[i].s), bools[i].want);
  VC_EXPECT(vc_parse_bool(NULL) == -1, "vc_parse_bool(NULL)");
  static const struct {
    const char *s;
    double want; /* < 0: malformed */
  } nums[] = {{"0", 0},      {"300", 300},  {"2.5", 2.5},  {"1e3", 1000},
              {" 40 ", 40},  {"-1", -1},    {"abc", -1},   {"12us", -1},
              {"", -1},      {"nan", -1},   {"inf", -1},   {"1e999", -1}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    double got = -7;
    const int rc = vc_parse_nonneg(nums[i].s, &got);
    if (nums[i].want < 0)
      VC_EXPECT(rc == -1 && got == -7, "vc_parse_nonneg('%s') accepted %g",
                nums[i].s, got);
    else
      VC_EXPECT(rc == 0 && got == nums[i].want,
                "vc_parse_nonneg('%s') = %d, %g; want %g", nums[i].s, rc, got,
                nums[i].want);
  }
  double untouched = 5;
  VC_EXPECT(vc_parse_nonneg(NULL, &untouched) == -1 && untouched == 5,
            "vc_parse_nonneg(NULL)");
}

int main(void) {
  vc_test_init("test_core");
  VC_EXPECT(voxconv_version_number() == VOXCONV_VERSION_NUMBER &&
                strcmp(voxconv_version_string(), VOXCONV_VERSION_STRING) == 0,
            "runtime version matches header");
  test_status_names();
  test_handle();
  test_timer();
  test_streams();
  test_dtypes();
  test_threads();
  test_env_parsers();
  return vc_test_finish();
}
