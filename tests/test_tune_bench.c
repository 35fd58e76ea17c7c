/* The benchmark runner and the cached choice: ranking helpers (median,
 * leaders, tolerances, the reference check) against hand-computed values;
 * then, with fake algorithms of known speed and known defects registered
 * beside the library's own, that the fastest correct candidate wins, that
 * wrong / non-finite / failing candidates are disqualified and recorded
 * without breaking later ones, that the caller's output holds a correct
 * result and inputs are untouched, that a second call (and a fresh process)
 * answers from the cache, that search spaces are unified per configuration,
 * the fp16-accumulator admission rules, key isolation (accumulator, dtype,
 * device, deterministic), the progress line, and a real "all" search over
 * the CPU gather-GEMM's parameters. */
#include "format_bound.h"
#include "tune_test_util.h"

/* ---- pure helpers -------------------------------------------------------- */
static void test_helpers(void) {
  double v1[] = {5, 1, 3};
  VC_EXPECT(vc_median(v1, 3) == 3, "median odd");
  double v2[] = {4, 1, 3, 2};
  VC_EXPECT(vc_median(v2, 4) == 2.5, "median even");
  double v3[] = {7};
  VC_EXPECT(vc_median(v3, 1) == 7, "median one");
  VC_EXPECT(isnan(vc_median(v3, 0)), "median empty");

  const double times[] = {10.0, 10.9, 11.1, 9.0, 9.8, 1.0};
  const int ok[] = {1, 1, 1, 1, 1, 0}; /* the 1.0 is disqualified */
  int idx[6];
  const int n = vc_leaders(times, ok, 6, 0.10, idx);
  /* best 9.0 -> within 9.9: 9.0 and 9.8 */
  VC_EXPECT(n == 2 && idx[0] == 3 && idx[1] == 4, "leaders: n=%d", n);
  const int none[] = {0, 0, 0, 0, 0, 0};
  VC_EXPECT(vc_leaders(times, none, 6, 0.10, idx) == 0, "no leaders");

  vc_tolerance_t t32 = vc_tune_tolerance(VOXCONV_DTYPE_F32, 0);
  vc_tolerance_t t16 = vc_tune_tolerance(VOXCONV_DTYPE_F16, 0);
  vc_tolerance_t t16a = vc_tune_tolerance(VOXCONV_DTYPE_F16, 1);
  vc_tolerance_t t32a = vc_tune_tolerance(VOXCONV_DTYPE_F32, 1);
  VC_EXPECT(t32.max_rel < t16.max_rel && t16.max_rel < t16a.max_rel,
            "fallback tolerances ordered: %g %g %g", t32.max_rel, t16.max_rel,
            t16a.max_rel);
  VC_EXPECT(t32a.max_rel == t32.max_rel && !t32a.norm_gate,
            "f32 has no fp16-accumulator slack");
  VC_EXPECT(t16a.norm_gate && !t16.norm_gate && t16a.norm_rel == 1e-2,
            "fp16-accumulator tiles keep the norm gate");
  VC_EXPECT(isinf(t32.user_max_rel), "no user limit by default");
  setenv("VOXCONV_AUTOTUNE_MAX_REL", "0.25", 1);
  VC_EXPECT(vc_tune_tolerance(VOXCONV_DTYPE_F32, 0).user_max_rel == 0.25,
            "VOXCONV_AUTOTUNE_MAX_REL");
  unsetenv("VOXCONV_AUTOTUNE_MAX_REL");

  /* check: ref = {3, -4, 0, 0} -> rms = 2.5, floor 0.025 */
  float ref[] = {3, -4, 0, 0, NAN, INFINITY};
  float got[] = {3.03f, -4, 0.025f, 0, NAN, INFINITY};
  vc_check_t c = vc_check_host(got, ref, VOXCONV_DTYPE_F32, 6, NULL, 0);
  /* element 2: 0.025 / (0 + 0.01 * rms(finite ref) = 0.025) = 1.0 */
  VC_EXPECT(fabs(c.max_rel - 1.0) < 1e-5, "max_rel %g", c.max_rel);
  VC_EXPECT(c.max_ratio == -1, "no S, no ratio: %g", c.max_ratio);
  VC_EXPECT(c.n_nonfinite == 0, "same NaN/Inf on both sides is fine");
  VC_EXPECT(fabs(c.norm_rel - sqrt((0.03 * 0.03 + 0.025 * 0.025) / 25.0)) <
                1e-6,
            "norm_rel %g", c.norm_rel);
  got[4] = 1;         /* NaN -> finite */
  got[5] = -INFINITY; /* +Inf -> -Inf */
  got[1] = NAN;       /* finite -> NaN */
  c = vc_check_host(got, ref, VOXCONV_DTYPE_F32, 6, NULL, 0);
  VC_EXPECT(c.n_nonfinite == 3, "kind mismatches %lld",
            (long long)c.n_nonfinite);
  /* identical f16 buffers */
  uint16_t h[4] = {0x3C00, 0xC000, 0, 0x7BFF};
  c = vc_check_host(h, h, VOXCONV_DTYPE_F16, 4, NULL, 0);
  VC_EXPECT(c.max_rel == 0 && c.norm_rel == 0 && c.n_nonfinite == 0,
            "identical");
}

/* ---- the format-derived bound ---------------------------------------------
 */
static void test_bound_helpers(void) {
  const voxconv_dtype_t F16 = VOXCONV_DTYPE_F16, BF16 = VOXCONV_DTYPE_BF16;
  const voxconv_dtype_t F32 = VOXCONV_DTYPE_F32, F64 = VOXCONV_DTYPE_F64;
  /* hand values: normal spacing 2^(e - p + 1), subnormal 2^(emin - p + 1) */
  VC_EXPECT(vc_format_spacing(F16, 1.0) == ldexp(1, -10), "f16 at 1");
  VC_EXPECT(vc_format_spacing(F16, 1.999) == ldexp(1, -10), "f16 below 2");
  VC_EXPECT(vc_format_spacing(F16, -2.0) == ldexp(1, -9), "f16 at -2");
  VC_EXPECT(vc_format_spacing(F16, 65504) == 32, "f16 max");
  VC_EXPECT(vc_format_spacing(F16, 0) == ldexp(1, -24), "f16 at 0");
  VC_EXPECT(vc_format_spacing(F16, 1e-5) == ldexp(1, -24), "f16 subnormal");
  VC_EXPECT(vc_format_spacing(F16, ldexp(1, -14)) == ldexp(1, -24),
            "f16 smallest normal");
  VC_EXPECT(vc_format_spacing(F16, ldexp(1, -13)) == ldexp(1, -23),
            "f16 second binade");
  VC_EXPECT(vc_format_spacing(BF16, 1.0) == ldexp(1, -7), "bf16 at 1");
  VC_EXPECT(vc_format_spacing(BF16, 1e-39) == ldexp(1, -133), "bf16 subnormal");
  VC_EXPECT(vc_format_spacing(F32, 1.0) == ldexp(1, -23), "f32 at 1");
  VC_EXPECT(vc_format_spacing(F32, 0) == ldexp(1, -149), "f32 at 0");
  VC_EXPECT(vc_format_spacing(F64, 1.0) == ldexp(1, -52), "f64 at 1");
  VC_EXPECT(vc_format_spacing(F64, 0) == ldexp(1, -1074), "f64 at 0");
  /* against the formats themselves: the step to the next representable
   * value, for random values of every magnitude (subnormals included) */
  int bad16 = 0, bad32 = 0;
  for (int i = 0; i < 20000; i++) {
    const uint16_t b = (uint16_t)vc_rand_range(0, 0x7BFE); /* < max */
    const double v = vc_f16_to_f32(b), next = vc_f16_to_f32((uint16_t)(b + 1));
    bad16 += vc_format_spacing(F16, v) != next - v;
    const float f =
        (float)ldexp(vc_rand_uniform() + 0.5, (int)vc_rand_range(-150, 120));
    bad32 += vc_format_spacing(F32, f) != (double)nextafterf(f, INFINITY) - f;
  }
  VC_EXPECT(bad16 == 0 && bad32 == 0, "spacing != next step: %d f16, %d f32",
            bad16, bad32);

  VC_EXPECT(vc_tune_unit_roundoff_acc(F32, 0) == ldexp(1, -23) &&
                vc_tune_unit_roundoff_acc(F16, 0) == ldexp(1, -23) &&
                vc_tune_unit_roundoff_acc(F16, 1) == ldexp(1, -10) &&
                vc_tune_unit_roundoff_acc(F32, 1) == ldexp(1, -23) &&
                vc_tune_unit_roundoff_acc(F64, 0) == ldexp(1, -53),
            "accumulator unit roundoffs");
  voxconv_kmap_t m;
  memset(&m, 0, sizeof m);
  m.kvol = 27, m.n_in = 1000, m.n_out = 300;
  vc_conv_problem_t p =
      vc_conv_problem_make(VOXCONV_PASS_CONV_FWD, &m, F16, 16, 32, 0, 0, 0);
  VC_EXPECT(vc_tune_terms(&p) == 27 * 16, "fwd terms %lld",
            (long long)vc_tune_terms(&p));
  p.pass = VOXCONV_PASS_CONV_DGRAD;
  VC_EXPECT(vc_tune_terms(&p) == 27 * 32, "dgrad terms");
  p.pass = VOXCONV_PASS_CONV_WGRAD;
  VC_EXPECT(vc_tune_terms(&p) == 300, "wgrad terms");
  p.pass = VOXCONV_PASS_DEPTHWISE_FWD;
  VC_EXPECT(vc_tune_terms(&p) == 27, "depthwise terms");
  p.pass = VOXCONV_PASS_CONV_FWD;
  VC_EXPECT(fabs(vc_tune_acc_factor(&p, 0) -
                 8.0 * sqrt(27.0 * 16) * 2 * ldexp(1, -23)) < 1e-18,
            "acc factor %g", vc_tune_acc_factor(&p, 0));
  VC_EXPECT(fabs(vc_tune_acc_factor(&p, 1) -
                 8.0 * sqrt(27.0 * 16) * (ldexp(1, -10) + ldexp(1, -23))) <
                1e-15,
            "fp16-accumulator acc factor");

  /* the bound element-wise, f16: one spacing at the larger value plus
   * acc * S */
  const uint16_t one = 0x3C00, one_ulp = 0x3C01, one_2ulp = 0x3C02;
  uint16_t r16[4] = {one, 0, 3, 0xC000}; /* 1, 0, 3 * 2^-24, -2 */
  uint16_t g16[4] = {one_ulp, 1, 4, 0xC000};
  float s[4] = {0, 0, 0, 1000};
  vc_check_t c = vc_check_host(g16, r16, F16, 4, s, 0.0);
  VC_EXPECT(c.max_ratio == 1.0, "one ulp everywhere: ratio %g", c.max_ratio);
  g16[0] = one_2ulp;
  c = vc_check_host(g16, r16, F16, 4, s, 0.0);
  VC_EXPECT(c.max_ratio == 2.0, "two ulps at 1: ratio %g", c.max_ratio);
  s[0] = 4;
  c = vc_check_host(g16, r16, F16, 4, s, ldexp(1, -10) / 4);
  VC_EXPECT(c.max_ratio == 1.0, "acc * S adds one ulp at 1: ratio %g",
            c.max_ratio);
  /* verdicts */
  vc_tolerance_t t = vc_tune_tolerance(F16, 0);
  VC_EXPECT(vc_check_passes(&c, &t), "ratio 1 passes");
  g16[0] = 0x3C03;
  c = vc_check_host(g16, r16, F16, 4, s, ldexp(1, -10) / 4);
  VC_EXPECT(!vc_check_passes(&c, &t), "ratio 1.5 fails: %g", c.max_ratio);
  /* max_rel is reported beside: a subnormal ulp next to 0 is a large
   * relative error, and passes the bound */
  c = vc_check_host(g16 + 1, r16 + 1, F16, 1, s + 1, 0.0);
  VC_EXPECT(c.max_rel > 1e-2 && c.max_ratio == 1.0 && vc_check_passes(&c, &t),
            "subnormal ulp: max_rel %g ratio %g", c.max_rel, c.max_ratio);
  setenv("VOXCONV_AUTOTUNE_MAX_REL", "0.5", 1);
  t = vc_tune_tolerance(F16, 0);
  unsetenv("VOXCONV_AUTOTUNE_MAX_REL");
  VC_EXPECT(!vc_check_passes(&c, &t), "the user limit applies as well");
  const vc_tolerance_t t16 = vc_tune_tolerance(F16, 0);
  const vc_tolerance_t t16a = vc_tune_tolerance(F16, 1);
  const vc_tolerance_t t32 = vc_tune_tolerance(F32, 0);
  const vc_check_t n = {0.5, 0.02, 0.5, 0};
  VC_EXPECT(!vc_check_passes(&n, &t16a) && vc_check_passes(&n, &t16),
            "norm gate only for fp16-accumulator tiles");
  const vc_check_t fb = {5e-3, 1e-3, -1, 0};
  VC_EXPECT(vc_check_passes(&fb, &t16) && !vc_check_passes(&fb, &t32),
            "fallback: relative limits of the dtype");
  vc_check_t nf = {0, 0, 0, 1};
  VC_EXPECT(!vc_check_passes(&nf, &t), "non-finite mismatch fails");
}

/* ---- helpers for the runner tests -----------------------------------------
 */
static vc_cache_entry_t get_entry(const char *ns, tt_problem_t *t,
                                  voxconv_pass_t pass, int acc, int det,
                                  int *found) {
  vc_conv_problem_t p = tt_as_problem(t, pass);
  p.fp16_accum = acc;
  p.deterministic = det;
  vc_cache_key_t key;
  vc_tune_make_key(t->h, &p, &key);
  vc_cache_entry_t e;
  memset(&e, 0, sizeof e);
  *found = vc_cache_get(ns, &key, 0, &e);
  return e;
}

static const vc_cache_row_t *row_of(const vc_cache_entry_t *e, const char *algo,
                                    const char *params) {
  return vc_cache_entry_find_row(e, algo, params);
}

/* A copy of n elements of dtype with the sign bits cleared: |v| exactly. */
static void *abs_copy(const void *src, voxconv_dtype_t dtype, int64_t n) {
  const size_t es = voxconv_dtype_size(dtype);
  unsigned char *d = (unsigned char *)malloc((size_t)n * es);
  memcpy(d, src, (size_t)n * es);
  for (int64_t i = 0; i < n; i++) /* little-endian: the sign is the top byte */
    d[(size_t)i * es + es - 1] &= 0x7F;
  return d;
}

/* Output of the last call against the fp64 reference, under the bound that
 * follows from the formats (tests/format_bound.h: the output's spacing
 * plus lambda sqrt(n) u S, S the same pass over |inputs|). A fixed
 * relative limit (1e-4 for f32, as this test had) fails correct sums whose
 * terms cancel: seed 1795796791669771 gave a wgrad element at 1.1e-4. */
static void expect_correct(tt_problem_t *t, voxconv_pass_t pass,
                           const char *what) {
  vc_conv_problem_t p = tt_as_problem(t, pass);
  const int64_t n = tt_out_elems(t, pass);
  double *ref = (double *)malloc((size_t)n * sizeof *ref);
  double *s = (double *)malloc((size_t)n * sizeof *s);
  tt_reference(&p, ref);
  const int64_t kvol = t->kmap->kvol;
  tt_problem_t ta = *t;
  ta.x = abs_copy(t->x, t->dtype, t->n * t->cin);
  ta.dy = abs_copy(t->dy, t->dtype, t->n * t->cout);
  ta.w = abs_copy(t->w, t->dtype, kvol * t->cin * t->cout);
  ta.dw_w = abs_copy(t->dw_w, t->dtype, kvol * t->cin);
  const vc_conv_problem_t pa = tt_as_problem(&ta, pass);
  tt_reference(&pa, s);
  VC_EXPECT(vc_count_poison(t->out, t->dtype, n) == 0,
            "%s: %lld output elements not written", what,
            (long long)vc_count_poison(t->out, t->dtype, n));
  const fb_result_t r =
      fb_check(t->out, t->dtype, ref, s, n,
               fb_acc(fb_terms(t->h, t->kmap, pass, p.cin, p.cout)));
  VC_EXPECT(fb_passes(&r),
            "%s: error ratio %g (worst at %lld), norm %g against %g, %lld "
            "non-finite",
            what, r.max_ratio, (long long)r.worst, r.norm_rel, r.norm_limit,
            (long long)r.n_nonfinite);
  free(ta.x), free(ta.dy), free(ta.w), free(ta.dw_w);
  free(s);
  free(ref);
}

/* ---- runner: ranking, disqualification, output safety ---------------------
 */
static void test_runner(void) {
  tt_fresh_cache_dir();
  static const int fakes[] = {TT_FAIL_I, TT_WRONG_I, TT_NAN_I, TT_TILES, -1};
  tt_use_fakes(fakes);
  tt_problem_t t;
  if (tt_problem_make(&t, 8, 6, 7, VOXCONV_DTYPE_F32, 2) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  const size_t es = voxconv_dtype_size(t.dtype);
  void *x0 = malloc((size_t)(t.n * t.cin) * es);
  void *w0 = malloc((size_t)(t.kmap->kvol * t.cin * t.cout) * es);
  memcpy(x0, t.x, (size_t)(t.n * t.cin) * es);
  memcpy(w0, t.w, (size_t)(t.kmap->kvol * t.cin * t.cout) * es);

  const voxconv_pass_t passes[] = {
      VOXCONV_PASS_CONV_FWD, VOXCONV_PASS_CONV_DGRAD, VOXCONV_PASS_CONV_WGRAD};
  for (int pi = 0; pi < 3; pi++) {
    const voxconv_pass_t pass = passes[pi];
    const char *ns = vc_cache_pass_namespace((int)pass);
    tt_reset_runs();
    voxconv_conv_options_t opt = {0};
    /* The failing candidate comes first: it must not break the others. */
    opt.fwd_algo = opt.bwd_algo =
        "[fake_fail, fake_wrong, fake_nan, fake_tiles]";
    const int64_t n_out = tt_out_elems(&t, pass);
    vc_poison(t.out, t.dtype, n_out);
    tt_capture_begin();
    voxconv_status_t st = tt_run(&t, pass, &opt);
    char *err = tt_capture_end();
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: %s", ns,
              voxconv_get_last_error(t.h));
    VC_EXPECT(err[0] == '\0', "VOXCONV_AUTOTUNE_LOG=0 must silence: %s", err);
    free(err);
    VC_EXPECT(voxconv_get_last_error(t.h)[0] == '\0',
              "a successful call keeps no error message: %s",
              voxconv_get_last_error(t.h));
    voxconv_call_info_t info;
    voxconv_get_last_call_info(t.h, &info);
    VC_EXPECT(strcmp(info.algo, "fake_tiles") == 0 &&
                  strcmp(info.params, "delay_ms=1") == 0,
              "%s: winner %s %s, want fake_tiles delay_ms=1", ns, info.algo,
              info.params);
    VC_EXPECT(info.from_cache == 0 && info.time_ms == 1.0,
              "%s: from_cache %d time %g", ns, info.from_cache, info.time_ms);
    expect_correct(&t, pass, ns);
    VC_EXPECT(
        memcmp(x0, t.x, (size_t)(t.n * t.cin) * es) == 0 &&
            memcmp(w0, t.w, (size_t)(t.kmap->kvol * t.cin * t.cout) * es) == 0,
        "%s: inputs modified", ns);
    /* Each defective candidate ran once (warm-up) and no more. */
    VC_EXPECT(atomic_load(&tt_runs[TT_FAIL_I]) == 1 &&
                  atomic_load(&tt_runs[TT_WRONG_I]) == 1 &&
                  atomic_load(&tt_runs[TT_NAN_I]) == 1,
              "%s: defective candidates ran %d %d %d times", ns,
              atomic_load(&tt_runs[TT_FAIL_I]),
              atomic_load(&tt_runs[TT_WRONG_I]),
              atomic_load(&tt_runs[TT_NAN_I]));

    int found = 0;
    vc_cache_entry_t e = get_entry(ns, &t, pass, 0, 0, &found);
    VC_EXPECT(found && e.n_rows == 6, "%s: entry with %d rows", ns, e.n_rows);
    if (found && e.n_rows == 6) {
      const vc_cache_row_t *r;
      VC_EXPECT((r = row_of(&e, "fake_fail", "-")) &&
                    strcmp(r->status, "failed:VOXCONV_STATUS_INTERNAL") == 0,
                "fake_fail row");
      VC_EXPECT((r = row_of(&e, "fake_wrong", "-")) &&
                    strcmp(r->status, "wrong") == 0 && r->max_rel > 0.5,
                "fake_wrong row");
      VC_EXPECT((r = row_of(&e, "fake_nan", "-")) &&
                    strcmp(r->status, "nonfinite") == 0,
                "fake_nan row");
      /* ranked: delay 1, 3, 6, then the disqualified */
      VC_EXPECT(strcmp(e.rows[0].params, "delay_ms=1") == 0 &&
                    strcmp(e.rows[1].params, "delay_ms=3") == 0 &&
                    strcmp(e.rows[2].params, "delay_ms=6") == 0 &&
                    !vc_cache_row_ok(&e.rows[3]),
                "%s: ranking %s %s %s", ns, e.rows[0].params, e.rows[1].params,
                e.rows[2].params);
      VC_EXPECT(e.rows[0].time_ms == 1.0 && e.rows[1].time_ms == 3.0 &&
                    e.rows[2].time_ms == 6.0,
                "%s: times %g %g", ns, e.rows[0].time_ms, e.rows[2].time_ms);
      VC_EXPECT(e.coverage == 0, "a list search is not auto/all: %u",
                e.coverage);
    }
    vc_cache_entry_free(&e);
    /* per-algorithm namespaces: full parameter search of fake_tiles */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/fake_tiles", ns);
    e = get_entry(sub, &t, pass, 0, 0, &found);
    VC_EXPECT(found && e.n_rows == 3 && (e.coverage & VC_COVER_FULL),
              "%s: %d rows, coverage %u", sub, e.n_rows, e.coverage);
    vc_cache_entry_free(&e);

    /* Second call: from the cache, one run of the winner, nothing else. */
    tt_reset_runs();
    vc_poison(t.out, t.dtype, n_out);
    VC_EXPECT_STATUS(t.h, tt_run(&t, pass, &opt), VOXCONV_STATUS_SUCCESS);
    voxconv_get_last_call_info(t.h, &info);
    VC_EXPECT(info.from_cache == 1 && strcmp(info.params, "delay_ms=1") == 0,
              "%s: second call from_cache %d params %s", ns, info.from_cache,
              info.params);
    VC_EXPECT(atomic_load(&tt_runs[TT_TILES]) == 1 &&
                  atomic_load(&tt_runs[TT_FAIL_I]) == 0,
              "%s: cached call ran fake_tiles %d times", ns,
              atomic_load(&tt_runs[TT_TILES]));
    expect_correct(&t, pass, "cached call");
  }

  /* A fresh process: flush, forget, and the file answers. */
  VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
  vc_cache_forget();
  tt_reset_runs();
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = "[fake_fail, fake_wrong, fake_nan, fake_tiles]";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_call_info_t info;
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(info.from_cache == 1 && atomic_load(&tt_runs[TT_TILES]) == 1,
            "after reload: from_cache %d, %d runs", info.from_cache,
            atomic_load(&tt_runs[TT_TILES]));

  /* Every candidate disqualified: the reference output stands, warned
   * once, and the call succeeds. */
  opt.fwd_algo = "[fake_wrong, fake_nan, fake_fail]";
  vc_poison(t.out, t.dtype, t.n * t.cout);
  tt_capture_begin();
  voxconv_status_t st = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  vc_poison(t.out, t.dtype, t.n * t.cout);
  voxconv_status_t st2 = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  char *err = tt_capture_end();
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS && st2 == VOXCONV_STATUS_SUCCESS,
            "all disqualified: %s", voxconv_get_last_error(t.h));
  VC_EXPECT(tt_count(err, "passed the correctness check") == 1,
            "one warning: %s", err);
  free(err);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strcmp(info.algo, "cpu_gather_gemm") == 0, "reference ran: %s",
            info.algo);
  expect_correct(&t, VOXCONV_PASS_CONV_FWD, "all disqualified");
  free(x0);
  free(w0);
  tt_problem_free(&t);
  tt_use_fakes(NULL);
}

/* ---- leaders re-timed ------------------------------------------------------
 */
static void test_leaders_retimed(void) {
  tt_fresh_cache_dir();
  static const int fakes[] = {TT_CLOSE, -1};
  tt_use_fakes(fakes);
  tt_problem_t t;
  if (tt_problem_make(&t, 6, 4, 4, VOXCONV_DTYPE_F32, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  tt_reset_runs();
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = opt.bwd_algo = "fake_close";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  /* 1 warm-up + 5 timed runs each; the two leaders 5 more each; the
   * winner once more into the output (it is not the reference). */
  const int runs = atomic_load(&tt_runs[TT_CLOSE]);
  /* (+1: fake_close is deterministic, so it also gives the reference its
   * second opinion.) */
  VC_EXPECT(runs == 3 * 6 + 2 * 5 + 1 + 1, "fake_close ran %d times, want %d",
            runs, 3 * 6 + 2 * 5 + 1 + 1);
  voxconv_call_info_t info;
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strcmp(info.params, "centi_ms=100") == 0 && info.time_ms == 1.0,
            "winner %s %g", info.params, info.time_ms);
  /* VOXCONV_AUTOTUNE_RUNS and _WARMUP change the counts accordingly. */
  setenv("VOXCONV_AUTOTUNE_RUNS", "3", 1);
  setenv("VOXCONV_AUTOTUNE_WARMUP", "2", 1);
  tt_reset_runs();
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_DGRAD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(atomic_load(&tt_runs[TT_CLOSE]) == 3 * (2 + 3) + 2 * 3 + 1 + 1,
            "runs=3 warmup=2: %d runs", atomic_load(&tt_runs[TT_CLOSE]));
  unsetenv("VOXCONV_AUTOTUNE_RUNS");
  unsetenv("VOXCONV_AUTOTUNE_WARMUP");
  tt_problem_free(&t);
  tt_use_fakes(NULL);
}

/* ---- a wrong reference is outvoted --------------------------------------- */
static void test_reference_vote(void) {
  tt_fresh_cache_dir();
  /* fake_badref (deterministic, one wrong cell) comes first in the
   * registry, so it would be the reference; fake_tiles and cpu_gather_gemm
   * agree with each other and outvote it. */
  static const int fakes[] = {TT_BADREF, TT_TILES, -1};
  tt_use_fakes(fakes);
  vc_tune_extra_first = 1;
  tt_problem_t t;
  if (tt_problem_make(&t, 7, 5, 6, VOXCONV_DTYPE_F32, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    vc_tune_extra_first = 0;
    return;
  }
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = "[fake_badref, fake_tiles]";
  vc_poison(t.out, t.dtype, t.n * t.cout);
  tt_capture_begin();
  voxconv_status_t st = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  char *err = tt_capture_end();
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s", voxconv_get_last_error(t.h));
  VC_EXPECT(strstr(err, "fake_badref (default parameters) disagrees with "
                        "fake_tiles and cpu_gather_gemm") != NULL,
            "the outvoted reference is named: %s", err);
  free(err);
  voxconv_call_info_t info;
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strcmp(info.algo, "fake_tiles") == 0, "winner %s", info.algo);
  expect_correct(&t, VOXCONV_PASS_CONV_FWD, "after the vote");
  int found = 0;
  vc_cache_entry_t e =
      get_entry("sparse_conv_forward", &t, VOXCONV_PASS_CONV_FWD, 0, 0, &found);
  const vc_cache_row_t *r = found ? row_of(&e, "fake_badref", "-") : NULL;
  VC_EXPECT(r && strcmp(r->status, "wrong") == 0,
            "fake_badref disqualified against the agreed reference");
  vc_cache_entry_free(&e);
  /* Only the bad one and one good one: no majority. Candidates that agree
   * with either side pass, so the good algorithm still wins. */
  static const int two[] = {TT_BADREF, -1};
  tt_use_fakes(two);
  opt.fwd_algo = "cpu_gather_gemm";
  opt.fp16_accum = VOXCONV_FALSE; /* another key: tune again */
  opt.deterministic = VOXCONV_TRUE;
  tt_capture_begin();
  st = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  err = tt_capture_end();
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s", voxconv_get_last_error(t.h));
  VC_EXPECT(strstr(err, "reference algorithms disagree (fake_badref vs "
                        "cpu_gather_gemm") != NULL,
            "a split vote is reported: %s", err);
  free(err);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strcmp(info.algo, "cpu_gather_gemm") == 0, "split: winner %s",
            info.algo);
  expect_correct(&t, VOXCONV_PASS_CONV_FWD, "after a split vote");
  vc_tune_extra_first = 0;
  tt_problem_free(&t);
  tt_use_fakes(NULL);
}

/* ---- unified search spaces ------------------------------------------------
 */
static void test_unified(void) {
  tt_fresh_cache_dir();
  static const int fakes[] = {TT_TILES, TT_FAST2, -1};
  tt_use_fakes(fakes);
  tt_problem_t t;
  if (tt_problem_make(&t, 7, 4, 4, VOXCONV_DTYPE_F32, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = "fake_tiles";
  tt_reset_runs();
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  const int tiles_runs = atomic_load(&tt_runs[TT_TILES]);
  VC_EXPECT(tiles_runs >= 3 * 2, "fake_tiles benchmarked: %d runs", tiles_runs);
  /* Widening the list benchmarks only what is new. */
  tt_reset_runs();
  opt.fwd_algo = "[fake_tiles, fake_fast2]";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_call_info_t info;
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strcmp(info.algo, "fake_tiles") == 0 &&
                strcmp(info.params, "delay_ms=1") == 0,
            "winner across both: %s %s", info.algo, info.params);
  VC_EXPECT(atomic_load(&tt_runs[TT_FAST2]) >= 2 &&
                atomic_load(&tt_runs[TT_TILES]) == 2,
            "only fake_fast2 benchmarked (%d runs); fake_tiles ran %d (the "
            "reference's second opinion and the winner's final run only)",
            atomic_load(&tt_runs[TT_FAST2]), atomic_load(&tt_runs[TT_TILES]));
  /* Both covered now: a call naming only fake_fast2 picks its best tile
   * from the record without benchmarking. */
  tt_reset_runs();
  opt.fwd_algo = "fake_fast2";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(info.from_cache == 1 && strcmp(info.params, "tile=1") == 0 &&
                atomic_load(&tt_runs[TT_FAST2]) == 1,
            "fake_fast2 from the record: %s, from_cache %d, %d runs",
            info.params, info.from_cache, atomic_load(&tt_runs[TT_FAST2]));
  /* "all" is a new search space: benchmarks what was never measured
   * (cpu_gather_gemm's parameters) and records coverage all. */
  opt.fwd_algo = "all";
  tt_reset_runs();
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(atomic_load(&tt_runs[TT_TILES]) <= 2 &&
                atomic_load(&tt_runs[TT_FAST2]) <= 1,
            "all re-ran known candidates: %d %d",
            atomic_load(&tt_runs[TT_TILES]), atomic_load(&tt_runs[TT_FAST2]));
  int found = 0;
  vc_cache_entry_t e =
      get_entry("sparse_conv_forward", &t, VOXCONV_PASS_CONV_FWD, 0, 0, &found);
  VC_EXPECT(found && (e.coverage & VC_COVER_ALL) && e.n_rows == 3 + 2 + 5,
            "all: %d rows, coverage %u", e.n_rows, e.coverage);
  vc_cache_entry_free(&e);
  /* auto after all: answered from the record (all covers auto). */
  opt.fwd_algo = NULL;
  tt_reset_runs();
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(info.from_cache == 1, "auto after all from the record");
  expect_correct(&t, VOXCONV_PASS_CONV_FWD, "auto after all");
  tt_problem_free(&t);
  tt_use_fakes(NULL);
}

/* ---- fp16 accumulator admission -------------------------------------------
 */
static int count_acc_rows(const vc_cache_entry_t *e, int f16) {
  int n = 0;
  for (int i = 0; i < e->n_rows; i++)
    if (strcmp(e->rows[i].algo, "fake_acc") == 0 &&
        strstr(e->rows[i].params,
               f16 ? "accumulator_type=16" : "accumulator_type=32"))
      n++;
  return n;
}

static void test_accumulator(void) {
  tt_fresh_cache_dir();
  static const int fakes[] = {TT_ACC, -1};
  tt_use_fakes(fakes);
  tt_problem_t t;
  if (tt_problem_make(&t, 7, 8, 8, VOXCONV_DTYPE_F16, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  tt_reset_runs();
  voxconv_call_info_t info;
  voxconv_conv_options_t opt = {0};
  /* Off (default): only the f32 tile -> a single candidate, not tuned. */
  opt.fwd_algo = "fake_acc";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strstr(info.params, "accumulator_type=32") && info.time_ms < 0 &&
                info.fp16_accum == 0,
            "fp16 off: ran %s (time %g)", info.params, info.time_ms);
  /* Per-call on: both tiles, the faster fp16 one wins, and it runs with a
   * problem that allows fp16 accumulation. */
  opt.fp16_accum = VOXCONV_TRUE;
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strstr(info.params, "accumulator_type=16") && info.fp16_accum == 1,
            "fp16 on: ran %s", info.params);
  int found = 0;
  vc_cache_entry_t e =
      get_entry("sparse_conv_forward", &t, VOXCONV_PASS_CONV_FWD, 1, 0, &found);
  VC_EXPECT(found && count_acc_rows(&e, 1) == 1 && count_acc_rows(&e, 0) == 1,
            "fp16 on: rows f16 %d f32 %d", count_acc_rows(&e, 1),
            count_acc_rows(&e, 0));
  vc_cache_entry_free(&e);
  /* "all" admits fp16 tiles even when off; the key stays acc=0. */
  opt.fp16_accum = VOXCONV_UNSET;
  opt.fwd_algo = "all";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  e = get_entry("sparse_conv_forward", &t, VOXCONV_PASS_CONV_FWD, 0, 0, &found);
  VC_EXPECT(found && count_acc_rows(&e, 1) == 1,
            "all with fp16 off: f16 rows %d",
            found ? count_acc_rows(&e, 1) : -1);
  vc_cache_entry_free(&e);
  /* ... but auto with the same key must not pick that fp16 row. */
  opt.fwd_algo = "auto";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(!strstr(info.params, "accumulator_type=16"),
            "auto after all picked an fp16 tile: %s %s", info.algo,
            info.params);
  /* wgrad never: all on a wgrad records no fp16 tile. */
  opt.bwd_algo = "all";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_WGRAD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  e = get_entry("sparse_conv_wgrad", &t, VOXCONV_PASS_CONV_WGRAD, 0, 0, &found);
  VC_EXPECT(found && count_acc_rows(&e, 1) == 0 && count_acc_rows(&e, 0) == 1,
            "wgrad all: f16 rows %d", found ? count_acc_rows(&e, 1) : -1);
  vc_cache_entry_free(&e);
  /* Small-channel ceiling admits them for a list too. */
  setenv("VOXCONV_F16ACC_SMALL_CH_CEIL", "8", 1);
  opt.bwd_algo = "fake_acc";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_DGRAD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  e = get_entry("sparse_conv_dgrad", &t, VOXCONV_PASS_CONV_DGRAD, 0, 0, &found);
  VC_EXPECT(found && count_acc_rows(&e, 1) == 1 && count_acc_rows(&e, 0) == 1,
            "channels <= VOXCONV_F16ACC_SMALL_CH_CEIL admit fp16 tiles");
  vc_cache_entry_free(&e);
  opt.fwd_algo = "fake_acc";
  setenv("VOXCONV_F16ACC_SMALL_CH_CEIL", "7", 1);
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strstr(info.params, "accumulator_type=32") != NULL,
            "above the ceiling: %s", info.params);
  unsetenv("VOXCONV_F16ACC_SMALL_CH_CEIL");
  VC_EXPECT(atomic_load(&tt_acc_violations) == 0,
            "an fp16 tile ran with fp16_accum=0 (%d times)",
            atomic_load(&tt_acc_violations));
  tt_problem_free(&t);

  /* f32 data: fp16 tiles never, not even under all. */
  tt_problem_t t32;
  if (tt_problem_make(&t32, 7, 8, 8, VOXCONV_DTYPE_F32, 1) == 0) {
    opt.fp16_accum = VOXCONV_TRUE;
    opt.fwd_algo = "all";
    VC_EXPECT_STATUS(t32.h, tt_run(&t32, VOXCONV_PASS_CONV_FWD, &opt),
                     VOXCONV_STATUS_SUCCESS);
    e = get_entry("sparse_conv_forward", &t32, VOXCONV_PASS_CONV_FWD, 0, 0,
                  &found);
    VC_EXPECT(found && count_acc_rows(&e, 1) == 0, "f32 all: f16 rows %d",
              found ? count_acc_rows(&e, 1) : -1);
    vc_cache_entry_free(&e);
    tt_problem_free(&t32);
  }
  tt_use_fakes(NULL);
}

/* ---- key isolation ---------------------------------------------------------
 */
static void test_key_isolation(void) {
  tt_fresh_cache_dir();
  static const int fakes[] = {TT_TILES, -1};
  tt_use_fakes(fakes);
  tt_problem_t a;
  if (tt_problem_make(&a, 6, 4, 4, VOXCONV_DTYPE_F16, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = "fake_tiles";
  voxconv_call_info_t info;
  typedef struct variant {
    const char *what;
    voxconv_tristate_t acc, det;
  } variant_t;
  const variant_t vars[] = {{"base", VOXCONV_UNSET, VOXCONV_UNSET},
                            {"fp16 accumulator", VOXCONV_TRUE, VOXCONV_UNSET},
                            {"deterministic", VOXCONV_UNSET, VOXCONV_TRUE}};
  for (int v = 0; v < 3; v++) {
    opt.fp16_accum = vars[v].acc;
    opt.deterministic = vars[v].det;
    VC_EXPECT_STATUS(a.h, tt_run(&a, VOXCONV_PASS_CONV_FWD, &opt),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_get_last_call_info(a.h, &info);
    VC_EXPECT(info.from_cache == 0,
              "%s: must be tuned, not taken from an "
              "earlier key",
              vars[v].what);
    VC_EXPECT_STATUS(a.h, tt_run(&a, VOXCONV_PASS_CONV_FWD, &opt),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_get_last_call_info(a.h, &info);
    VC_EXPECT(info.from_cache == 1, "%s: second call from the record",
              vars[v].what);
  }
  /* Another device on the same problem: a second handle with another
   * thread count (part of the CPU identity), then another device name. */
  opt.fp16_accum = VOXCONV_UNSET;
  opt.deterministic = VOXCONV_UNSET;
  voxconv_handle_t *h1 = a.h, *h2 = NULL;
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = 2;
  VC_EXPECT_STATUS(NULL, voxconv_create(&h2, &d), VOXCONV_STATUS_SUCCESS);
  a.h = h2;
  VC_EXPECT_STATUS(h2, tt_run(&a, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(h2, &info);
  VC_EXPECT(info.from_cache == 0, "another device must not reuse a record");
  snprintf(h2->tune_device_key, sizeof h2->tune_device_key,
           "cuda:Imaginary GPU:cc9.9");
  VC_EXPECT_STATUS(h2, tt_run(&a, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(h2, &info);
  VC_EXPECT(info.from_cache == 0, "another device name");
  a.h = h1;
  voxconv_destroy(h2);
  /* Another dtype on the same coordinates and shapes. */
  a.dtype = VOXCONV_DTYPE_BF16;
  vc_fill_normal(a.x, a.dtype, a.n * a.cin);
  vc_fill_normal(a.w, a.dtype, a.kmap->kvol * a.cin * a.cout);
  VC_EXPECT_STATUS(a.h, tt_run(&a, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(a.h, &info);
  VC_EXPECT(info.from_cache == 0, "another dtype");
  tt_problem_free(&a);
  /* The keys differ exactly in the field that changed. */
  VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
  voxconv_cache_t *snap = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &snap),
                   VOXCONV_STATUS_SUCCESS);
  int n_sel = 0, n_acc = 0, n_det = 0, n_bf16 = 0, n_dev = 0, n_cpu2 = 0;
  for (int i = 0; i < voxconv_cache_entry_count(snap); i++) {
    voxconv_cache_entry_info_t e;
    voxconv_cache_get_entry(snap, i, &e);
    if (strcmp(e.namespace_name, "sparse_conv_forward") != 0)
      continue;
    n_sel++;
    n_acc += e.fp16_accum;
    n_det += e.deterministic;
    n_bf16 += e.dtype == VOXCONV_DTYPE_BF16;
    n_dev += strstr(e.device, "Imaginary") != NULL;
    const size_t len = strlen(e.device);
    n_cpu2 += len > 2 && strcmp(e.device + len - 2, ":2") == 0;
  }
  VC_EXPECT(n_sel == 6 && n_acc == 1 && n_det == 1 && n_bf16 == 1 &&
                n_dev == 1 && n_cpu2 == 1,
            "entries: %d (acc %d det %d bf16 %d dev %d cpu:2 %d)", n_sel, n_acc,
            n_det, n_bf16, n_dev, n_cpu2);
  voxconv_cache_close(snap);
  tt_use_fakes(NULL);
}

/* ---- progress line and a real search ---------------------------------------
 */
static void test_real_all_and_progress(void) {
  tt_fresh_cache_dir();
  tt_use_fakes(NULL);
  tt_problem_t t;
  if (tt_problem_make(&t, 10, 16, 24, VOXCONV_DTYPE_F32, 2) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  unsetenv("VOXCONV_AUTOTUNE_LOG");
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = opt.bwd_algo = "all";
  const voxconv_pass_t passes[] = {
      VOXCONV_PASS_CONV_FWD, VOXCONV_PASS_CONV_DGRAD, VOXCONV_PASS_CONV_WGRAD};
  for (int i = 0; i < 3; i++) {
    const char *ns = vc_cache_pass_namespace((int)passes[i]);
    vc_poison(t.out, t.dtype, tt_out_elems(&t, passes[i]));
    tt_capture_begin();
    voxconv_status_t st = tt_run(&t, passes[i], &opt);
    char *err = tt_capture_end();
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s all: %s", ns,
              voxconv_get_last_error(t.h));
    char want[96];
    snprintf(want, sizeof want, "voxconv: tuned %s", ns);
    VC_EXPECT(strstr(err, want) && strstr(err, "5 candidates benchmarked") &&
                  strstr(err, "[all]"),
              "progress line for %s: %s", ns, err);
    free(err);
    expect_correct(&t, passes[i], ns);
    int found = 0;
    vc_cache_entry_t e = get_entry(ns, &t, passes[i], 0, 0, &found);
    int ok = 0;
    for (int r = 0; found && r < e.n_rows; r++)
      ok += vc_cache_row_ok(&e.rows[r]);
    VC_EXPECT(found && e.n_rows == 5 && ok == 5,
              "%s: %d rows, %d ok (cpu_gather_gemm has 5 tiles)", ns, e.n_rows,
              ok);
    for (int r = 1; found && r < e.n_rows; r++)
      VC_EXPECT(e.rows[r - 1].time_ms <= e.rows[r].time_ms, "ranked");
    vc_cache_entry_free(&e);
  }
  setenv("VOXCONV_AUTOTUNE_LOG", "0", 1);
  tt_problem_free(&t);
}

int main(void) {
  vc_test_init("test_tune_bench");
  setenv("VOXCONV_AUTOTUNE_LOG", "0", 1);
  test_helpers();
  test_bound_helpers();
  /* The fakes take exact virtual time; the real algorithm real time. */
  tt_virtual_clock(1);
  test_runner();
  test_leaders_retimed();
  test_reference_vote();
  test_unified();
  test_accumulator();
  test_key_isolation();
  tt_virtual_clock(0);
  test_real_all_and_progress();
  tt_cleanup();
  return vc_test_finish();
}
