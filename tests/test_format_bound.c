/* The format-derived bound of test_backend_ops (tests/format_bound.h) on the
 * CPU: it accepts correct outputs and rejects planted wrong ones. For f32,
 * f16 and bf16 outputs, the three conv passes, cin = cout = 16 and 64, on
 * random coordinates and on a SemanticKITTI crop (submanifold 3^3):
 *  - accepted: the library's own CPU result in that dtype (fp32
 *    accumulation) and the fp64 reference rounded to the dtype;
 *  - rejected by the per-element bound alone (error ratio > 1) and by the
 *    whole check: the result scaled by 1.01, and the result with one kernel
 *    offset's contribution missing (the reference with that offset's
 *    weights zeroed; for wgrad that offset's block of dW) -- the offset
 *    with the fewest pairs, the hardest to see;
 *  - f16 with gradient-sized inputs (1e-5, fp16 subnormals) and
 *    Kaiming-scaled weights: the CPU result is accepted (its old max_rel,
 *    which flagged such results, is printed for comparison).
 * Inputs are drawn in f64, rounded to the dtype and read back, so the
 * reference sees exactly the values the kernel sees. */
#include "format_bound.h"
#include "vc_test.h"

#include <stdlib.h>
#include <string.h>

#include "core/vc_core.h"

static voxconv_handle_t *g_h;

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_format_bound: out of memory\n");
    exit(2);
  }
  return p;
}

/* The format's own values: N(0,1) * scale rounded to dt, as f64. */
static double *draw(voxconv_dtype_t dt, int64_t n, double scale) {
  double *v = (double *)xmalloc((size_t)n * sizeof *v);
  void *tmp = xmalloc((size_t)n * voxconv_dtype_size(dt));
  for (int64_t i = 0; i < n; i++)
    v[i] = vc_rand_normal() * scale;
  vc_store_f64(tmp, dt, n, v);
  for (int64_t i = 0; i < n; i++)
    v[i] = vc_get(tmp, dt, i);
  free(tmp);
  return v;
}

static double *abs_of(const double *v, int64_t n) {
  double *a = (double *)xmalloc((size_t)n * sizeof *a);
  for (int64_t i = 0; i < n; i++)
    a[i] = fabs(v[i]);
  return a;
}

typedef struct problem {
  voxconv_kmap_t *kmap;
  int64_t n_in, n_out, kvol, cin, cout;
  int64_t *pair_offsets; /* [kvol + 1] */
} problem_t;

/* One pass on the CPU handle in dtype dt: a (x or dy), b (w or dy) given
 * as f64 values exact in dt, result converted to f64 into out. */
static void run_pass(const problem_t *pb, voxconv_pass_t pass,
                     voxconv_dtype_t dt, const double *a, const double *b,
                     int64_t na, int64_t nb, double *out, int64_t nc) {
  const size_t es = voxconv_dtype_size(dt);
  void *ta = xmalloc((size_t)na * es), *tb = xmalloc((size_t)nb * es);
  void *tc = xmalloc((size_t)nc * es);
  vc_store_f64(ta, dt, na, a);
  vc_store_f64(tb, dt, nb, b);
  voxconv_feats_t x = {ta, pb->n_in, pb->cin, dt};
  voxconv_feats_t dy = {ta, pb->n_out, pb->cout, dt};
  voxconv_weights_t w = {tb, pb->kvol, pb->cin, pb->cout, dt};
  voxconv_feats_t dyb = {tb, pb->n_out, pb->cout, dt};
  voxconv_status_t st = VOXCONV_STATUS_INTERNAL;
  if (pass == VOXCONV_PASS_CONV_FWD) {
    voxconv_feats_t y = {tc, pb->n_out, pb->cout, dt};
    st = voxconv_conv_forward(g_h, pb->kmap, &x, &w, &y, NULL);
  } else if (pass == VOXCONV_PASS_CONV_DGRAD) {
    voxconv_feats_t dx = {tc, pb->n_in, pb->cin, dt};
    st = voxconv_conv_dgrad(g_h, pb->kmap, &dy, &w, &dx, NULL);
  } else {
    voxconv_weights_t dw = {tc, pb->kvol, pb->cin, pb->cout, dt};
    st = voxconv_conv_wgrad(g_h, pb->kmap, &x, &dyb, &dw, NULL);
  }
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "run %s: %s", voxconv_dtype_name(dt),
            voxconv_get_last_error(g_h));
  for (int64_t i = 0; i < nc; i++)
    out[i] = vc_get(tc, dt, i);
  free(ta);
  free(tb);
  free(tc);
}

/* y rounded to dt, as a buffer of dt. */
static void *as_dtype(const double *y, int64_t n, voxconv_dtype_t dt,
                      double scale) {
  double *t = (double *)xmalloc((size_t)n * sizeof *t);
  for (int64_t i = 0; i < n; i++)
    t[i] = y[i] * scale;
  void *buf = xmalloc((size_t)n * voxconv_dtype_size(dt));
  vc_store_f64(buf, dt, n, t);
  free(t);
  return buf;
}

/* The offset with the fewest pairs (but some). */
static int sparsest_offset(const problem_t *pb) {
  int best = -1;
  for (int k = 0; k < pb->kvol; k++) {
    const int64_t n = pb->pair_offsets[k + 1] - pb->pair_offsets[k];
    if (n > 0 &&
        (best < 0 || n < pb->pair_offsets[best + 1] - pb->pair_offsets[best]))
      best = k;
  }
  return best;
}

static const char *pass_name(voxconv_pass_t p) {
  return p == VOXCONV_PASS_CONV_FWD     ? "fwd"
         : p == VOXCONV_PASS_CONV_DGRAD ? "dgrad"
                                        : "wgrad";
}

typedef struct verdicts {
  fb_result_t lib, rounded, scaled, dropped;
} verdicts_t;

/* Products per element of a pass (the bound's n; wgrad: the most pairs
 * of one offset), as the GPU tests count them. */
static int64_t terms_of(const problem_t *pb, voxconv_pass_t pass) {
  return fb_terms(g_h, pb->kmap, pass, pb->cin, pb->cout);
}

/* The four outputs of one (pass, dtype) case against the bound. */
static verdicts_t judge(const problem_t *pb, voxconv_pass_t pass,
                        voxconv_dtype_t dt, const double *a, const double *b,
                        int64_t na, int64_t nb, int64_t nc) {
  const voxconv_dtype_t F64 = VOXCONV_DTYPE_F64;
  double *ref = (double *)xmalloc((size_t)nc * sizeof *ref);
  double *s = (double *)xmalloc((size_t)nc * sizeof *s);
  double *lib = (double *)xmalloc((size_t)nc * sizeof *lib);
  double *drop = (double *)xmalloc((size_t)nc * sizeof *drop);
  run_pass(pb, pass, F64, a, b, na, nb, ref, nc);
  double *aa = abs_of(a, na), *ab = abs_of(b, nb);
  run_pass(pb, pass, F64, aa, ab, na, nb, s, nc);
  run_pass(pb, pass, dt, a, b, na, nb, lib, nc);
  /* one offset missing: its weights zeroed (fwd, dgrad) or its block of
   * the weight gradient (wgrad) */
  const int k = sparsest_offset(pb);
  const int64_t blk = pb->cin * pb->cout;
  if (pass == VOXCONV_PASS_CONV_WGRAD) {
    memcpy(drop, ref, (size_t)nc * sizeof *drop);
    memset(drop + k * blk, 0, (size_t)blk * sizeof *drop);
  } else {
    double *bz = (double *)xmalloc((size_t)nb * sizeof *bz);
    memcpy(bz, b, (size_t)nb * sizeof *bz);
    memset(bz + k * blk, 0, (size_t)blk * sizeof *bz);
    run_pass(pb, pass, F64, a, bz, na, nb, drop, nc);
    free(bz);
  }
  const double acc = fb_acc(terms_of(pb, pass));
  verdicts_t v;
  void *buf = as_dtype(lib, nc, dt, 1.0); /* exact: lib holds dt values */
  v.lib = fb_check(buf, dt, ref, s, nc, acc);
  free(buf);
  buf = as_dtype(ref, nc, dt, 1.0);
  v.rounded = fb_check(buf, dt, ref, s, nc, acc);
  free(buf);
  buf = as_dtype(ref, nc, dt, 1.01);
  v.scaled = fb_check(buf, dt, ref, s, nc, acc);
  free(buf);
  buf = as_dtype(drop, nc, dt, 1.0);
  v.dropped = fb_check(buf, dt, ref, s, nc, acc);
  free(buf);
  free(aa);
  free(ab);
  free(ref);
  free(s);
  free(lib);
  free(drop);
  return v;
}

/* Every pass and dtype on one map at cin = cout = ch. */
static void planted_cases(const char *name, problem_t *pb, int64_t ch) {
  static const voxconv_dtype_t dts[3] = {VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16,
                                         VOXCONV_DTYPE_BF16};
  pb->cin = pb->cout = ch;
  for (int di = 0; di < 3; di++) {
    const voxconv_dtype_t dt = dts[di];
    const int64_t nx = pb->n_in * ch, ny = pb->n_out * ch;
    const int64_t nw = pb->kvol * ch * ch;
    double *x = draw(dt, nx, 1.0), *w = draw(dt, nw, 1.0);
    double *dy = draw(dt, ny, 1.0);
    for (int pi = 0; pi < 3; pi++) {
      const voxconv_pass_t pass = (voxconv_pass_t)pi;
      const double *a = pi == 1 ? dy : x;
      const double *b = pi == 2 ? dy : w;
      const int64_t na = pi == 1 ? ny : nx, nb = pi == 2 ? ny : nw;
      const int64_t nc = pi == 0 ? ny : pi == 1 ? nx : nw;
      const verdicts_t v = judge(pb, pass, dt, a, b, na, nb, nc);
      char what[128];
      snprintf(what, sizeof what, "%s ch=%lld %s %s", name, (long long)ch,
               pass_name(pass), voxconv_dtype_name(dt));
      printf("%-40s ratio: library %.3g, rounded %.3g, x1.01 %.3g, "
             "offset dropped %.3g\n",
             what, v.lib.max_ratio, v.rounded.max_ratio, v.scaled.max_ratio,
             v.dropped.max_ratio);
      VC_EXPECT(fb_passes(&v.lib),
                "%s: the library's result rejected: ratio %.3g at %lld, "
                "norm %.3g (limit %.3g)",
                what, v.lib.max_ratio, (long long)v.lib.worst, v.lib.norm_rel,
                v.lib.norm_limit);
      VC_EXPECT(fb_passes(&v.rounded),
                "%s: the rounded reference rejected: ratio %.3g", what,
                v.rounded.max_ratio);
      VC_EXPECT(v.scaled.max_ratio > 1 && !fb_passes(&v.scaled),
                "%s: a 1%% scale error accepted: ratio %.3g", what,
                v.scaled.max_ratio);
      VC_EXPECT(v.dropped.max_ratio > 1 && !fb_passes(&v.dropped),
                "%s: a dropped offset accepted: ratio %.3g", what,
                v.dropped.max_ratio);
    }
    free(x);
    free(w);
    free(dy);
  }
}

/* f16 gradients in the subnormal range (1e-5) against Kaiming-scaled
 * weights and N(0,1) activations: the library's result is accepted. */
static void subnormal_case(const char *name, problem_t *pb, int64_t ch) {
  const voxconv_dtype_t dt = VOXCONV_DTYPE_F16;
  pb->cin = pb->cout = ch;
  const int64_t nx = pb->n_in * ch, ny = pb->n_out * ch;
  const int64_t nw = pb->kvol * ch * ch;
  double *x = draw(dt, nx, 1.0);
  double *w = draw(dt, nw, 1.0 / sqrt((double)(pb->kvol * ch)));
  double *dy = draw(dt, ny, 1e-5);
  for (int pi = 1; pi < 3; pi++) {
    const voxconv_pass_t pass = (voxconv_pass_t)pi;
    const double *a = pi == 1 ? dy : x;
    const double *b = pi == 2 ? dy : w;
    const int64_t na = pi == 1 ? ny : nx, nb = pi == 2 ? ny : nw;
    const int64_t nc = pi == 1 ? nx : nw;
    double *ref = (double *)xmalloc((size_t)nc * sizeof *ref);
    double *s = (double *)xmalloc((size_t)nc * sizeof *s);
    double *lib = (double *)xmalloc((size_t)nc * sizeof *lib);
    double *aa = abs_of(a, na), *ab = abs_of(b, nb);
    run_pass(pb, pass, VOXCONV_DTYPE_F64, a, b, na, nb, ref, nc);
    run_pass(pb, pass, VOXCONV_DTYPE_F64, aa, ab, na, nb, s, nc);
    run_pass(pb, pass, dt, a, b, na, nb, lib, nc);
    void *buf = as_dtype(lib, nc, dt, 1.0);
    const fb_result_t r =
        fb_check(buf, dt, ref, s, nc, fb_acc(terms_of(pb, pass)));
    const vc_err_stats_t old = vc_compare(buf, dt, ref, nc, 1e-3);
    int64_t n_sub = 0;
    for (int64_t i = 0; i < nc; i++)
      n_sub += lib[i] != 0 && fabs(lib[i]) < ldexp(1.0, -14);
    printf("%s ch=%lld %s f16 at 1e-5: ratio %.3g (old max_rel %.3g), %lld "
           "of %lld outputs subnormal\n",
           name, (long long)ch, pass_name(pass), r.max_ratio, old.max_rel,
           (long long)n_sub, (long long)nc);
    VC_EXPECT(fb_passes(&r),
              "%s ch=%lld %s f16 gradients: the library's result rejected: "
              "ratio %.3g at %lld, norm %.3g (limit %.3g)",
              name, (long long)ch, pass_name(pass), r.max_ratio,
              (long long)r.worst, r.norm_rel, r.norm_limit);
    free(buf);
    free(aa);
    free(ab);
    free(ref);
    free(s);
    free(lib);
  }
  free(x);
  free(w);
  free(dy);
}

/* The spacing against hand values and the formats' next values. */
static void test_spacing(void) {
  const voxconv_dtype_t F16 = VOXCONV_DTYPE_F16, BF16 = VOXCONV_DTYPE_BF16;
  VC_EXPECT(fb_spacing(F16, 0) == ldexp(1, -24), "f16 0");
  VC_EXPECT(fb_spacing(F16, 3e-6) == ldexp(1, -24), "f16 subnormal");
  VC_EXPECT(fb_spacing(F16, 1.0) == ldexp(1, -10), "f16 1");
  VC_EXPECT(fb_spacing(F16, 1000.0) == 0.5, "f16 1000");
  VC_EXPECT(fb_spacing(BF16, 1.0) == ldexp(1, -7), "bf16 1");
  VC_EXPECT(fb_spacing(VOXCONV_DTYPE_F32, 1.0) == ldexp(1, -23), "f32 1");
  int bad = 0;
  for (int i = 0; i < 4000; i++) {
    const double v =
        ldexp(vc_rand_uniform() + 1.0, (int)vc_rand_range(-30, 14));
    uint16_t b16;
    vc_store_f64(&b16, F16, 1, &v);
    const double lo = vc_get(&b16, F16, 0);
    const uint16_t up = (uint16_t)(b16 + 1);
    if ((b16 & 0x7C00) != 0x7C00)
      bad += fb_spacing(F16, lo) != vc_get(&up, F16, 0) - lo;
  }
  VC_EXPECT(bad == 0, "f16 spacing != step to the next value (%d)", bad);
}

static int make_problem(problem_t *pb, const int32_t *coords, int64_t n) {
  memset(pb, 0, sizeof *pb);
  voxconv_coords_t in = {coords, n, {1, 1, 1}};
  voxconv_kmap_desc_t kd = {.mode = VOXCONV_KMAP_SUBMANIFOLD, .kernel_size = {3, 3, 3}};
  if (voxconv_kmap_build(g_h, &kd, &in, NULL, &pb->kmap) !=
      VOXCONV_STATUS_SUCCESS)
    return 0;
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(pb->kmap, &info);
  pb->n_in = info.n_in;
  pb->n_out = info.n_out;
  pb->kvol = info.kernel_volume;
  pb->pair_offsets =
      (int64_t *)xmalloc((size_t)(pb->kvol + 1) * sizeof(int64_t));
  return voxconv_kmap_get_pairs(g_h, pb->kmap, pb->pair_offsets, NULL, NULL) ==
         VOXCONV_STATUS_SUCCESS;
}

static void problem_free(problem_t *pb) {
  voxconv_kmap_destroy(g_h, pb->kmap);
  free(pb->pair_offsets);
}

/* The middle `keep` voxels of a scan at 5 cm (NULL when missing). */
static int32_t *scan_crop(int64_t keep, int64_t *n) {
  size_t bytes = 0;
  float *pts = (float *)vc_read_file(
      vc_data_path("scans/semantickitti_00_000000.bin"), &bytes);
  if (!pts)
    return NULL;
  int32_t *c = vc_voxels_from_points(
      pts, (int64_t)(bytes / (4 * sizeof(float))), 4, 0.05f, n);
  free(pts);
  if (*n > keep) {
    memmove(c, c + (*n - keep) / 2 * 4, (size_t)keep * 16);
    *n = keep;
  }
  return c;
}

int main(void) {
  vc_test_init("test_format_bound");
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_h, &d));
  test_spacing();
  int64_t n = 0;
  int32_t *rnd = vc_random_coords(1200, 7, &n);
  problem_t pb;
  if (make_problem(&pb, rnd, n)) {
    planted_cases("random", &pb, 16);
    planted_cases("random", &pb, 64);
    subnormal_case("random", &pb, 16);
  } else {
    VC_EXPECT(0, "random map: %s", voxconv_get_last_error(g_h));
  }
  problem_free(&pb);
  free(rnd);
  int32_t *scan = scan_crop(1500, &n);
  if (scan && make_problem(&pb, scan, n)) {
    planted_cases("semantickitti", &pb, 16);
    subnormal_case("semantickitti", &pb, 64);
    problem_free(&pb);
  } else {
    printf("note: SemanticKITTI scan missing, real-scan cases skipped\n");
  }
  free(scan);
  voxconv_destroy(g_h);
  return vc_test_finish();
}
