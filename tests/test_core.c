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

int main(void) {
  vc_test_init("test_core");
  VC_EXPECT(voxconv_version_number() == VOXCONV_VERSION_NUMBER &&
                strcmp(voxconv_version_string(), VOXCONV_VERSION_STRING) == 0,
            "runtime version matches header");
  test_status_names();
  test_handle();
  test_timer();
  test_dtypes();
  test_threads();
  return vc_test_finish();
}
