/* voxconv_quantize / voxconv_dequantize (voxconv.h, "int8 features"):
 *   1. random tensors of every float dtype -- normal values across the
 *      clamp, exact ties, +-0, +-Inf, NaN, subnormals, huge values -- at
 *      scales from 2^-40 to 2^40 (and a subnormal one), against an
 *      independent model: the quotient in binary64 rounded once to binary32
 *      (innocuous double rounding for division: 53 >= 2 * 24 + 2), ties to
 *      even by hand, the clamp, NaN -> 0; outputs poisoned first, every
 *      element checked;
 *   2. dequantize of every int8 value (-128 included) against the exact
 *      product rounded to binary32, then to the output dtype (dense_ref.h's
 *      rounding from the exact value);
 *   3. hand-computed cases (ties to even, the symmetric clamp, NaN);
 *   4. bad input gets its named status;
 *   5. on a CUDA device, when there is one: the same tensors in device
 *      memory, aligned (vector path) and one element off (element path),
 *      give the CPU's bits.
 * The CPU part runs everywhere; the CUDA part says SKIPPED without a GPU.
 * Fresh random inputs per run (seed printed; VOXCONV_TEST_SEED replays). */
#include "dense_ref.h"
#include "vc_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static voxconv_handle_t *g_cpu, *g_gpu;

/* A call every later check depends on: on failure report and stop. */
#define MUST(h, call)                                                          \
  do {                                                                         \
    voxconv_status_t st_ = (call);                                             \
    if (st_ != VOXCONV_STATUS_SUCCESS) {                                       \
      fprintf(stderr, "FATAL %s:%d: %s returned %s: %s\n", __FILE__,          \
              __LINE__, #call, voxconv_status_string(st_),                     \
              voxconv_get_last_error(h));                                      \
      vc_test_failures++;                                                      \
      exit(vc_test_finish());                                                  \
    }                                                                          \
  } while (0)

static const voxconv_dtype_t k_float[3] = {
    VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16, VOXCONV_DTYPE_BF16};

/* ---- the independent model --------------------------------------------- */
static int8_t model_quantize(double v, float s) {
  if (isnan(v))
    return 0;
  /* binary64 quotient, then one rounding to binary32: the correctly
   * rounded binary32 quotient (v and s are binary32 values) */
  const double t = (double)(float)(v / (double)s);
  if (t >= 127.0)
    return 127;
  if (t <= -127.0)
    return -127;
  const double f = floor(t), d = t - f; /* exact for |t| < 2^52 */
  double r = f;
  if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0))
    r = f + 1.0;
  return (int8_t)r;
}

/* expected bits of dequantize(q) in dt at element i of exp */
static void model_dequantize(void *exp, voxconv_dtype_t dt, int64_t i, int8_t q,
                             float s) {
  const float v = (float)((double)s * (double)q); /* exact product, rounded */
  dr_store(exp, dt, i, (double)v);
}

/* ---- inputs ------------------------------------------------------------- */
static double special_value(float s) {
  switch (vc_rand_range(0, 9)) {
  case 0: return INFINITY;
  case 1: return -INFINITY;
  case 2: return NAN;
  case 3: return 0.0;
  case 4: return -0.0;
  case 5: return 1e-42;                                /* f32 subnormal */
  case 6: return 3e38;                                 /* huge */
  case 7: return ((double)vc_rand_range(-130, 130) + 0.5) * s; /* tie-ish */
  case 8: return (double)vc_rand_range(-127, 127) * s;  /* exact level */
  default: return -3e38;
  }
}

/* n values in dt at scale s: mostly normal around the clamp range */
static void fill_values(void *x, voxconv_dtype_t dt, int64_t n, float s) {
  for (int64_t i = 0; i < n; i++) {
    const double v = vc_rand_range(0, 7) == 0 ? special_value(s)
                                              : vc_rand_normal() * 60.0 * s;
    dr_store(x, dt, i, v);
  }
}

static float random_scale(void) {
  if (vc_rand_range(0, 15) == 0)
    return 1e-40f; /* subnormal: most quotients saturate */
  return (float)ldexp(1.0 + vc_rand_uniform(), (int)vc_rand_range(-40, 40));
}

static voxconv_feats_t feats(void *d, int64_t r, int64_t c, voxconv_dtype_t t) {
  voxconv_feats_t f = {d, r, c, t};
  return f;
}

/* ---- CPU against the model ---------------------------------------------- */
static void check_quantize(voxconv_handle_t *h, const void *x,
                           voxconv_dtype_t dt, int64_t rows, int64_t ch,
                           float s, const char *what) {
  const int64_t n = rows * ch;
  int8_t *y = (int8_t *)malloc((size_t)(n ? n : 1));
  memset(y, 0x80, (size_t)n); /* -128: quantize never writes it */
  const voxconv_feats_t fx = feats((void *)x, rows, ch, dt),
                        fy = feats(y, rows, ch, VOXCONV_DTYPE_I8);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &fx, s, &fy), VOXCONV_STATUS_SUCCESS);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (y[i] != model_quantize(vc_get(x, dt, i), s) && bad++ == 0)
      first = i;
  VC_EXPECT(bad == 0,
            "%s quantize %s [%lld x %lld] s=%a: %lld of %lld differ (first %lld:"
            " x=%a got %d want %d)",
            what, voxconv_dtype_name(dt), (long long)rows, (long long)ch,
            (double)s, (long long)bad, (long long)n, (long long)first,
            first >= 0 ? vc_get(x, dt, first) : 0.0, first >= 0 ? y[first] : 0,
            first >= 0 ? model_quantize(vc_get(x, dt, first), s) : 0);
  free(y);
}

static void check_dequantize(voxconv_handle_t *h, const int8_t *q,
                             voxconv_dtype_t dt, int64_t rows, int64_t ch,
                             float s, const char *what) {
  const int64_t n = rows * ch;
  const size_t es = voxconv_dtype_size(dt);
  void *y = malloc((size_t)(n ? n : 1) * es), *exp = malloc((size_t)(n ? n : 1) * es);
  vc_poison(y, dt, n);
  for (int64_t i = 0; i < n; i++)
    model_dequantize(exp, dt, i, q[i], s);
  const voxconv_feats_t fx = feats((void *)q, rows, ch, VOXCONV_DTYPE_I8),
                        fy = feats(y, rows, ch, dt);
  VC_EXPECT_STATUS(h, voxconv_dequantize(h, &fx, s, &fy),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(n == 0 || memcmp(y, exp, (size_t)n * es) == 0,
            "%s dequantize to %s [%lld x %lld] s=%a: bits differ", what,
            voxconv_dtype_name(dt), (long long)rows, (long long)ch, (double)s);
  free(y);
  free(exp);
}

static void test_random_cpu(void) {
  for (int it = 0; it < 60; it++) {
    const voxconv_dtype_t dt = k_float[it % 3];
    const int64_t rows = vc_rand_range(0, it < 3 ? 0 : 2000),
                  ch = vc_rand_range(1, 70), n = rows * ch;
    const float s = random_scale();
    void *x = malloc((size_t)(n ? n : 1) * voxconv_dtype_size(dt));
    fill_values(x, dt, n, s);
    check_quantize(g_cpu, x, dt, rows, ch, s, "cpu");
    int8_t *q = (int8_t *)malloc((size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
      q[i] = (int8_t)vc_rand_range(-128, 127);
    check_dequantize(g_cpu, q, dt, rows, ch, s, "cpu");
    free(q);
    free(x);
  }
  /* every int8 value at a few scales, and the F32 round trip: RN(s q) / s
   * is within half an ulp of q, so it quantizes back to q (|q| <= 127) */
  int8_t all[256];
  for (int i = 0; i < 256; i++)
    all[i] = (int8_t)(i - 128);
  const float scales[4] = {1.0f, 0.1f, 3.0e-5f, 1e-40f};
  for (int k = 0; k < 4; k++) {
    for (int d = 0; d < 3; d++)
      check_dequantize(g_cpu, all, k_float[d], 16, 16, scales[k], "all values");
    float v[256];
    int8_t back[256];
    voxconv_feats_t fq = feats(all, 1, 256, VOXCONV_DTYPE_I8),
                    fv = feats(v, 1, 256, VOXCONV_DTYPE_F32),
                    fb = feats(back, 1, 256, VOXCONV_DTYPE_I8);
    MUST(g_cpu, voxconv_dequantize(g_cpu, &fq, scales[k], &fv));
    MUST(g_cpu, voxconv_quantize(g_cpu, &fv, scales[k], &fb));
    int bad = 0;
    for (int i = 1; i < 256; i++) /* -128 clamps to -127 */
      bad += back[i] != all[i];
    VC_EXPECT(bad == 0 && back[0] == -127,
              "round trip at s=%g: %d differ, -128 -> %d", (double)scales[k],
              bad, back[0]);
  }
}

/* ---- hand-computed ------------------------------------------------------ */
static void test_hand(void) {
  const float x[12] = {0.5f,  1.5f,    2.5f,   -2.5f, -0.5f, 126.5f,
                       127.5f, -200.0f, INFINITY, NAN,  -0.0f, 3.4999998f};
  const int8_t want[12] = {0, 2, 2, -2, 0, 126, 127, -127, 127, 0, 0, 3};
  int8_t y[12];
  memset(y, 0x55, sizeof y);
  voxconv_feats_t fx = feats((void *)x, 3, 4, VOXCONV_DTYPE_F32),
                  fy = feats(y, 3, 4, VOXCONV_DTYPE_I8);
  MUST(g_cpu, voxconv_quantize(g_cpu, &fx, 1.0f, &fy));
  for (int i = 0; i < 12; i++)
    VC_EXPECT(y[i] == want[i], "quantize(%g, 1) = %d, want %d", (double)x[i],
              y[i], want[i]);
  /* at scale 0.5: 0.25 / 0.5 = 0.5 -> 0, 0.75 / 0.5 = 1.5 -> 2 */
  const float x2[2] = {0.25f, 0.75f};
  fx = feats((void *)x2, 1, 2, VOXCONV_DTYPE_F32);
  fy = feats(y, 1, 2, VOXCONV_DTYPE_I8);
  MUST(g_cpu, voxconv_quantize(g_cpu, &fx, 0.5f, &fy));
  VC_EXPECT(y[0] == 0 && y[1] == 2, "ties at scale 0.5: %d %d, want 0 2", y[0],
            y[1]);
  /* dequantize: 3 * 0.1f is rounded once in binary32 */
  const int8_t q[3] = {3, -128, 127};
  float v[3];
  fx = feats((void *)q, 1, 3, VOXCONV_DTYPE_I8);
  fy = feats(v, 1, 3, VOXCONV_DTYPE_F32);
  MUST(g_cpu, voxconv_dequantize(g_cpu, &fx, 0.1f, &fy));
  VC_EXPECT(v[0] == 3.0f * 0.1f && v[1] == -128.0f * 0.1f &&
                v[2] == 127.0f * 0.1f,
            "dequantize(3, -128, 127; 0.1) = %a %a %a", (double)v[0],
            (double)v[1], (double)v[2]);
}

/* ---- bad input ---------------------------------------------------------- */
static void test_bad_input(void) {
  voxconv_handle_t *h = g_cpu;
  float xf[8] = {0};
  int8_t xq[8] = {0};
  double xd[8] = {0};
  const voxconv_feats_t f32 = feats(xf, 2, 4, VOXCONV_DTYPE_F32),
                        i8 = feats(xq, 2, 4, VOXCONV_DTYPE_I8),
                        f64 = feats(xd, 2, 4, VOXCONV_DTYPE_F64),
                        f16 = feats(xf, 2, 4, VOXCONV_DTYPE_F16),
                        i8_short = feats(xq, 1, 4, VOXCONV_DTYPE_I8),
                        i8_wide = feats(xq, 1, 8, VOXCONV_DTYPE_I8),
                        f32_null = feats(NULL, 2, 4, VOXCONV_DTYPE_F32),
                        f32_neg = feats(xf, -1, 4, VOXCONV_DTYPE_F32),
                        f32_c0 = feats(xf, 2, 0, VOXCONV_DTYPE_F32),
                        f32_bad = feats(xf, 2, 4, (voxconv_dtype_t)99),
                        i8_on_f32 = feats(xf, 2, 4, VOXCONV_DTYPE_I8),
                        empty = feats(NULL, 0, 4, VOXCONV_DTYPE_F32),
                        empty_q = feats(NULL, 0, 4, VOXCONV_DTYPE_I8);
  VC_EXPECT_STATUS(NULL, voxconv_quantize(NULL, &f32, 1.0f, &i8),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, NULL, 1.0f, &i8),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, voxconv_dequantize(h, &i8, 1.0f, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32_null, 1.0f, &i8),
                   VOXCONV_STATUS_NULL_POINTER);
  const float bad_scales[5] = {0.0f, -1.0f, NAN, INFINITY, -0.0f};
  for (int i = 0; i < 5; i++) {
    VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32, bad_scales[i], &i8),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT_STATUS(h, voxconv_dequantize(h, &i8, bad_scales[i], &f32),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
  }
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32_bad, 1.0f, &i8),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32, 1.0f, &f16),
                   VOXCONV_STATUS_DTYPE_MISMATCH);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &i8, 1.0f, &i8),
                   VOXCONV_STATUS_DTYPE_MISMATCH);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f64, 1.0f, &i8),
                   VOXCONV_STATUS_DTYPE_MISMATCH);
  VC_EXPECT_STATUS(h, voxconv_dequantize(h, &f32, 1.0f, &f16),
                   VOXCONV_STATUS_DTYPE_MISMATCH);
  VC_EXPECT_STATUS(h, voxconv_dequantize(h, &i8, 1.0f, &f64),
                   VOXCONV_STATUS_DTYPE_MISMATCH);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32, 1.0f, &i8_short),
                   VOXCONV_STATUS_SHAPE_MISMATCH);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32, 1.0f, &i8_wide),
                   VOXCONV_STATUS_SHAPE_MISMATCH);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32_neg, 1.0f, &i8),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32_c0, 1.0f, &i8),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &f32, 1.0f, &i8_on_f32),
                   VOXCONV_STATUS_INVALID_ARGUMENT); /* overlap */
  VC_EXPECT_STATUS(h, voxconv_quantize(h, &empty, 1.0f, &empty_q),
                   VOXCONV_STATUS_SUCCESS);
}

/* ---- CUDA against the CPU ----------------------------------------------- */
static void *to_device(const void *src, size_t bytes, size_t pad) {
  void *d = NULL;
  MUST(g_gpu, voxconv_malloc(g_gpu, bytes + pad + 16, &d));
  MUST(g_gpu, voxconv_memcpy(g_gpu, (char *)d + pad, src, bytes,
                                      VOXCONV_MEMCPY_HOST_TO_BACKEND));
  return d;
}

static void test_cuda(void) {
  int devices = 0;
  if (voxconv_device_count(&devices) != VOXCONV_STATUS_SUCCESS || !devices) {
    printf("test_quantize: CUDA part SKIPPED: no CUDA device "
           "(voxconv_has_cuda()=%d)\n", voxconv_has_cuda());
    return;
  }
  voxconv_handle_desc_t dg;
  memset(&dg, 0, sizeof dg);
  dg.backend = VOXCONV_BACKEND_CUDA;
  MUST(NULL, voxconv_create(&g_gpu, &dg));
  for (int it = 0; it < 48; it++) {
    const voxconv_dtype_t dt = k_float[it % 3];
    const size_t es = voxconv_dtype_size(dt);
    /* odd element offsets force the element-by-element kernels */
    const size_t off = (it / 3) % 2 ? 1 : 0;
    const int64_t rows = it < 6 ? 1 + it : vc_rand_range(1, 40000),
                  ch = vc_rand_range(1, 96), n = rows * ch;
    const float s = random_scale();
    void *x = malloc((size_t)n * es), *yq = malloc((size_t)n),
         *yc = malloc((size_t)n), *vf = malloc((size_t)n * es),
         *vc = malloc((size_t)n * es);
    fill_values(x, dt, n, s);
    voxconv_feats_t cx = feats(x, rows, ch, dt),
                    cy = feats(yc, rows, ch, VOXCONV_DTYPE_I8);
    MUST(g_cpu, voxconv_quantize(g_cpu, &cx, s, &cy));
    void *dx = to_device(x, (size_t)n * es, off * es);
    memset(yq, 0x80, (size_t)n); /* -128: never written */
    void *dy = to_device(yq, (size_t)n, off);
    voxconv_feats_t gx = feats((char *)dx + off * es, rows, ch, dt),
                    gy = feats((char *)dy + off, rows, ch, VOXCONV_DTYPE_I8);
    MUST(g_gpu, voxconv_quantize(g_gpu, &gx, s, &gy));
    MUST(g_gpu, voxconv_memcpy(g_gpu, yq, (char *)dy + off, (size_t)n,
                                        VOXCONV_MEMCPY_BACKEND_TO_HOST));
    VC_EXPECT(memcmp(yq, yc, (size_t)n) == 0,
              "cuda quantize %s [%lld x %lld] offset %zu s=%a: differs from "
              "the CPU",
              voxconv_dtype_name(dt), (long long)rows, (long long)ch, off,
              (double)s);
    /* dequantize the CPU's int8 back on both */
    voxconv_feats_t cq = feats(yc, rows, ch, VOXCONV_DTYPE_I8),
                    cv = feats(vc, rows, ch, dt);
    MUST(g_cpu, voxconv_dequantize(g_cpu, &cq, s, &cv));
    MUST(g_gpu, voxconv_memcpy(g_gpu, (char *)dy + off, yc, (size_t)n,
                                        VOXCONV_MEMCPY_HOST_TO_BACKEND));
    vc_poison(vf, dt, n);
    MUST(g_gpu, voxconv_memcpy(g_gpu, (char *)dx + off * es, vf,
                                        (size_t)n * es,
                                        VOXCONV_MEMCPY_HOST_TO_BACKEND));
    voxconv_feats_t gq = feats((char *)dy + off, rows, ch, VOXCONV_DTYPE_I8),
                    gv = feats((char *)dx + off * es, rows, ch, dt);
    MUST(g_gpu, voxconv_dequantize(g_gpu, &gq, s, &gv));
    MUST(g_gpu, voxconv_memcpy(g_gpu, vf, (char *)dx + off * es,
                                        (size_t)n * es,
                                        VOXCONV_MEMCPY_BACKEND_TO_HOST));
    VC_EXPECT(memcmp(vf, vc, (size_t)n * es) == 0,
              "cuda dequantize to %s [%lld x %lld] offset %zu s=%a: differs "
              "from the CPU",
              voxconv_dtype_name(dt), (long long)rows, (long long)ch, off,
              (double)s);
    voxconv_free(g_gpu, dx);
    voxconv_free(g_gpu, dy);
    free(x);
    free(yq);
    free(yc);
    free(vf);
    free(vc);
  }
  voxconv_destroy(g_gpu);
}

int main(void) {
  vc_test_init("test_quantize");
  voxconv_handle_desc_t dc;
  memset(&dc, 0, sizeof dc);
  dc.backend = VOXCONV_BACKEND_CPU;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_cpu, &dc));
  test_hand();
  test_bad_input();
  test_random_cpu();
  test_cuda();
  voxconv_destroy(g_cpu);
  return vc_test_finish();
}
