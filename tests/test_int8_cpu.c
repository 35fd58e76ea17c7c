/* int8 sparse convolution on the CPU (voxconv_conv_forward_int8,
 * voxconv_depthwise_forward_int8; voxconv.h "int8 (quantized) sparse
 * convolution"):
 *   1. int32 sums (y = I32) bitwise against a naive int64 sum over the
 *      map's pairs, every map mode (inverse maps too), odd channel counts,
 *      random coordinates and a crop of the real scan (workload A);
 *   2. the epilogue bitwise against the rule written out here with explicit
 *      float / fmaf calls (F32, F16, BF16, I8; bias, ReLU), and F32 within
 *      the documented bound of the float64 value;
 *   3. I8 output: ties to even and the symmetric clamp, from exact ties;
 *   4. the extreme accumulator (all -128 at kvol * cin = 131071) exact, one
 *      more refused;
 *   5. every VOXCONV_CPU_ISA path (portable, avx2 = AVX-VNNI, avx512 =
 *      AVX-512 VNNI, auto) and 1 vs 2 threads give identical bits, and
 *      weights in the KOI layout ([kvol][cout][cin]) the KIO ones' bits;
 *   6. bad input: each named status (a w_layout that is not KIO or KOI,
 *      KOI for depthwise); float ops refuse I8;
 *   7. int8 max pooling (voxconv_pool_forward, I8 in and out, MAX only)
 *      bitwise against the model on five map modes; AVG, SUM, mixed
 *      dtypes and the backward refused.
 * Fresh random inputs per run (seed printed; VOXCONV_TEST_SEED replays). */
#include "int8_model.h"

#include "cpu/vc_cpu.h" /* vc_cpu_int8_path: which path each name runs */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_isas[] = {"portable", "avx2", "avx512", "auto"};
#define N_ISAS 4

static void set_isa(const char *isa) {
  if (isa)
    setenv("VOXCONV_CPU_ISA", isa, 1);
  else
    unsetenv("VOXCONV_CPU_ISA");
}

/* k_isas[s] this CPU can run at all (a CPU without AVX-512 refuses
 * "avx512" with INVALID_ARGUMENT, voxconv.h); filled by main */
static int g_isa_ok[N_ISAS];

/* Selects k_isas[s]; 0 (and nothing to run) when the CPU cannot run it. */
static int use_isa(int s) {
  set_isa(k_isas[s]);
  return g_isa_ok[s];
}

/* koi: the regular conv's weights as p->wkoi, qp->w_layout KOI. */
static voxconv_status_t run_op(const prob_t *p, voxconv_dtype_t ydt, void *y,
                               int with_qp, int koi) {
  voxconv_feats_t x = {p->x, p->n_in, p->cin, VOXCONV_DTYPE_I8};
  voxconv_feats_t y_ = {y, p->n_out, p->cout, ydt};
  voxconv_quant_params_t qp = {
      p->xs, p->ws, p->bias, p->relu, ydt == VOXCONV_DTYPE_I8 ? p->ys : 0.0f,
      koi ? VOXCONV_INT8_WEIGHTS_KOI : VOXCONV_INT8_WEIGHTS_KIO};
  const voxconv_quant_params_t *q = with_qp ? &qp : NULL;
  if (p->depthwise) {
    voxconv_feats_t w = {p->w, p->kvol, p->cout, VOXCONV_DTYPE_I8};
    return voxconv_depthwise_forward_int8(p->h, p->km, &x, &w, q, &y_, NULL);
  }
  voxconv_weights_t w = {koi ? p->wkoi : p->w, p->kvol, p->cin, p->cout,
                         VOXCONV_DTYPE_I8};
  return voxconv_conv_forward_int8(p->h, p->km, &x, &w, q, &y_, NULL);
}

/* Runs p on every ISA and every output dtype; checks bits and bounds. */
static void check_problem(prob_t *p, const char *what) {
  int64_t n_out;
  int64_t *ref = naive_acc(p->h, p->km, p->x, p->w, p->cin, p->cout,
                           p->depthwise, &n_out);
  const int64_t ne = p->n_out * p->cout;
  const voxconv_dtype_t dts[5] = {VOXCONV_DTYPE_I32, VOXCONV_DTYPE_F32,
                                  VOXCONV_DTYPE_F16, VOXCONV_DTYPE_BF16,
                                  VOXCONV_DTYPE_I8};
  void *y = dr_xmalloc((size_t)ne * 4 + 1);
  void *first = dr_xmalloc((size_t)ne * 4 + 1);
  void *exp = dr_xmalloc((size_t)ne * 4 + 1);
  for (int d = 0; d < 5; d++) {
    const voxconv_dtype_t dt = dts[d];
    const size_t bytes = (size_t)ne * esz(dt);
    model_expected(p, ref, dt, exp);
    for (int s = 0; s < N_ISAS; s++) {
      if (!use_isa(s))
        continue;
      memset(y, 0x5A, bytes);
      const voxconv_status_t st = run_op(p, dt, y, dt != VOXCONV_DTYPE_I32, 0);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s %s isa=%s: %s: %s", what,
                voxconv_dtype_name(dt), k_isas[s], voxconv_status_string(st),
                voxconv_get_last_error(p->h));
      if (st != VOXCONV_STATUS_SUCCESS)
        continue;
      if (s == 0)
        memcpy(first, y, bytes);
      else
        VC_EXPECT(memcmp(first, y, bytes) == 0,
                  "%s %s: isa=%s differs from portable", what,
                  voxconv_dtype_name(dt), k_isas[s]);
      int64_t bad;
      const int64_t nbad = model_mismatches(y, exp, dt, ne, &bad);
      VC_EXPECT(nbad == 0,
                "%s %s isa=%s: %lld elements differ from the model, first "
                "%lld (acc %lld)",
                what, voxconv_dtype_name(dt), k_isas[s], (long long)nbad,
                (long long)bad, bad >= 0 ? (long long)ref[bad] : 0LL);
      /* the KOI weight layout (qp needed): the same bits, on the portable
       * loop and the auto-selected one (the VNNI packing on most CPUs) */
      if (!p->depthwise && dt != VOXCONV_DTYPE_I32 && (s == 0 || s == 3)) {
        memset(y, 0xA5, bytes);
        VC_EXPECT_STATUS(p->h, run_op(p, dt, y, 1, 1), VOXCONV_STATUS_SUCCESS);
        VC_EXPECT(memcmp(first, y, bytes) == 0,
                  "%s %s isa=%s: KOI weights give other bits than KIO", what,
                  voxconv_dtype_name(dt), k_isas[s]);
      }
    }
    set_isa(NULL);
    if (dt == VOXCONV_DTYPE_F32) {
      const int64_t nb = model_f32_outside_bound(p, ref, (const float *)first);
      VC_EXPECT(nb == 0, "%s: %lld F32 outputs outside the float64 bound",
                what, (long long)nb);
    }
  }
  free(y);
  free(first);
  free(exp);
  free(ref);
}

static void check_cpu(prob_t *p, const char *what, const void *ctx) {
  (void)ctx;
  check_problem(p, what);
}

static void run_case(voxconv_handle_t *h, const voxconv_kmap_t *km,
                     int depthwise, int64_t cin, int64_t cout,
                     const char *what) {
  prob_t p = model_prob(h, km, depthwise, cin, cout);
  model_variants(&p, 3, what, check_cpu, NULL);
  model_prob_free(&p);
}

/* ---- maps --------------------------------------------------------------- */
static voxconv_kmap_t *build(voxconv_handle_t *h, voxconv_kmap_mode_t mode,
                             int k, int s, const int32_t *in, int64_t n_in,
                             int in_ts, const int32_t *out, int64_t n_out,
                             int out_ts) {
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = mode;
  for (int a = 0; a < 3; a++) {
    d.kernel_size[a] = k;
    d.stride[a] = s;
  }
  voxconv_coords_t ci = {in, n_in, {in_ts, in_ts, in_ts}};
  voxconv_coords_t co = {out, n_out, {out_ts, out_ts, out_ts}};
  voxconv_kmap_t *km = NULL;
  const voxconv_status_t st =
      vc_test_kmap_build(h, &d, &ci, out ? &co : NULL, &km);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "kmap build mode %d: %s", (int)mode,
            voxconv_get_last_error(h));
  return st == VOXCONV_STATUS_SUCCESS ? km : NULL;
}

static void test_modes(voxconv_handle_t *h) {
  int64_t n;
  int32_t *fine = vc_random_coords(600, 7, &n);
  int64_t nc;
  int32_t *coarse = model_coarsen(fine, n, &nc);
  voxconv_kmap_t *maps[6] = {0};
  const char *names[6] = {"submanifold", "strided", "expanding",
                          "transposed", "generative", "inverse"};
  maps[0] = build(h, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, fine, n, 1, NULL, 0, 0);
  maps[1] = build(h, VOXCONV_KMAP_STRIDED, 2, 2, fine, n, 1, NULL, 0, 0);
  maps[2] = build(h, VOXCONV_KMAP_EXPANDING, 3, 2, fine, n, 1, NULL, 0, 0);
  maps[3] = build(h, VOXCONV_KMAP_TRANSPOSED, 3, 2, coarse, nc, 2, fine, n, 1);
  maps[4] = build(h, VOXCONV_KMAP_GENERATIVE, 2, 2, coarse, nc, 2, NULL, 0, 0);
  if (maps[2])
    VC_EXPECT(voxconv_kmap_inverse(h, maps[2], &maps[5]) ==
                  VOXCONV_STATUS_SUCCESS,
              "inverse: %s", voxconv_get_last_error(h));
  static const int64_t chans[5] = {1, 3, 17, 33, 130};
  for (int m = 0; m < 6; m++) {
    if (!maps[m])
      continue;
    for (int t = 0; t < 3; t++) {
      const int64_t cin = chans[vc_rand_range(0, 4)];
      const int64_t cout = chans[vc_rand_range(0, 4)];
      run_case(h, maps[m], 0, cin, cout, names[m]);
    }
    const int64_t ch = chans[vc_rand_range(0, 4)];
    run_case(h, maps[m], 1, ch, ch, names[m]);
  }
  /* every odd channel count at least once, both ops, submanifold */
  for (int c = 0; c < 5; c++) {
    run_case(h, maps[0], 0, chans[c], chans[4 - c], "submanifold all-ch");
    run_case(h, maps[0], 1, chans[c], chans[c], "submanifold all-ch");
  }
  for (int m = 0; m < 6; m++)
    voxconv_kmap_destroy(h, maps[m]);
  free(fine);
  free(coarse);
}

/* int8 max pooling (voxconv_pool_forward with I8 features, MAX only) on
 * every map mode and odd channel counts against the model; the other
 * modes, mixed dtypes and the backward are refused with named statuses. */
static void test_max_pool(voxconv_handle_t *h) {
  int64_t n;
  int32_t *fine = vc_random_coords(500, 7, &n);
  int64_t nc;
  int32_t *coarse = model_coarsen(fine, n, &nc);
  voxconv_kmap_t *maps[5] = {0};
  const char *names[5] = {"strided k2 s2", "strided k3 s2", "submanifold",
                          "transposed", "expanding"};
  maps[0] = build(h, VOXCONV_KMAP_STRIDED, 2, 2, fine, n, 1, NULL, 0, 0);
  maps[1] = build(h, VOXCONV_KMAP_STRIDED, 3, 2, fine, n, 1, NULL, 0, 0);
  maps[2] = build(h, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, fine, n, 1, NULL, 0, 0);
  maps[3] = build(h, VOXCONV_KMAP_TRANSPOSED, 3, 2, coarse, nc, 2, fine, n, 1);
  maps[4] = build(h, VOXCONV_KMAP_EXPANDING, 3, 2, fine, n, 1, NULL, 0, 0);
  static const int64_t chans[5] = {1, 3, 16, 33, 64};
  for (int m = 0; m < 5; m++)
    for (int c = 0; c < 5 && maps[m]; c++)
      model_check_max_pool(h, maps[m], chans[c], names[m]);
  if (maps[0]) {
    voxconv_kmap_info_t info;
    voxconv_kmap_get_info(maps[0], &info);
    int8_t *x8 = (int8_t *)dr_xcalloc((size_t)info.n_in * 4, 1);
    float *yf = (float *)dr_xcalloc((size_t)info.n_out * 4, sizeof(float));
    int8_t *y8 = (int8_t *)dr_xcalloc((size_t)info.n_out * 4, 1);
    voxconv_feats_t x = {x8, info.n_in, 4, VOXCONV_DTYPE_I8};
    voxconv_feats_t y = {y8, info.n_out, 4, VOXCONV_DTYPE_I8};
    voxconv_feats_t yff = {yf, info.n_out, 4, VOXCONV_DTYPE_F32};
    voxconv_feats_t xff = {yf, info.n_in, 4, VOXCONV_DTYPE_F32};
    VC_EXPECT_STATUS(h, voxconv_pool_forward(h, maps[0], VOXCONV_POOL_AVG, &x,
                                             &y),
                     VOXCONV_STATUS_UNSUPPORTED);
    VC_EXPECT_STATUS(h, voxconv_pool_forward(h, maps[0], VOXCONV_POOL_SUM, &x,
                                             &y),
                     VOXCONV_STATUS_UNSUPPORTED);
    VC_EXPECT_STATUS(h, voxconv_pool_forward(h, maps[0], VOXCONV_POOL_MAX, &x,
                                             &yff),
                     VOXCONV_STATUS_DTYPE_MISMATCH);
    VC_EXPECT_STATUS(h, voxconv_pool_forward(h, maps[0], VOXCONV_POOL_MAX, &xff,
                                             &y),
                     VOXCONV_STATUS_DTYPE_MISMATCH);
    VC_EXPECT_STATUS(h, voxconv_pool_backward(h, maps[0], VOXCONV_POOL_MAX, &x,
                                              &y, &y, &x),
                     VOXCONV_STATUS_UNSUPPORTED);
    free(x8);
    free(yf);
    free(y8);
  }
  for (int m = 0; m < 5; m++)
    voxconv_kmap_destroy(h, maps[m]);
  free(fine);
  free(coarse);
}

/* A crop of workload A (the real scan): ~20k voxels, C = 64 and 33. */
static void test_real_scan(voxconv_handle_t *h) {
  int64_t m;
  int32_t *c = model_scan_crop(&m);
  if (!c)
    return;
  voxconv_kmap_t *sub =
      build(h, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, m, 1, NULL, 0, 0);
  voxconv_kmap_t *str =
      build(h, VOXCONV_KMAP_STRIDED, 2, 2, c, m, 1, NULL, 0, 0);
  if (sub) {
    run_case(h, sub, 0, 64, 64, "scan submanifold");
    run_case(h, sub, 1, 64, 64, "scan submanifold");
  }
  if (str)
    run_case(h, str, 0, 33, 64, "scan strided");
  voxconv_kmap_destroy(h, sub);
  voxconv_kmap_destroy(h, str);
  free(c);
}

/* kvol 1 submanifold on n rows: y[r] = epilogue(x[r] * w). */
static voxconv_kmap_t *identity_map(voxconv_handle_t *h, int64_t n,
                                    int32_t **coords) {
  *coords = model_line_coords(n);
  return build(h, VOXCONV_KMAP_SUBMANIFOLD, 1, 1, *coords, n, 1, NULL, 0, 0);
}

static void test_ties_and_clamp(voxconv_handle_t *h) {
  /* x_scale = w_scale = 1, y_scale = 2, w = 1: v = acc, t = acc / 2.
   * Odd acc gives exact ties (1.5 -> 2, 2.5 -> 2, -0.5 -> -0, ...). */
  static const int8_t xv[] = {1,  3,  5,   -1,  -3,  -5, 7,
                              0,  127, -128, -127, 9, 11, -11};
  const int64_t n = (int64_t)(sizeof xv / sizeof xv[0]);
  static const int8_t want2[] = {0, 2, 2, 0, -2, -2, 4, 0, 64, -64, -64, 4,
                                 6, -6};
  int32_t *c;
  voxconv_kmap_t *km = identity_map(h, n, &c);
  if (!km)
    return;
  int8_t w1 = 1, y[16];
  float ws = 1.0f;
  voxconv_feats_t x = {(void *)xv, n, 1, VOXCONV_DTYPE_I8};
  voxconv_weights_t w = {&w1, 1, 1, 1, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {y, n, 1, VOXCONV_DTYPE_I8};
  voxconv_quant_params_t qp = {1.0f, &ws, NULL, 0, 2.0f,
                               VOXCONV_INT8_WEIGHTS_KIO};
  for (int s = 0; s < N_ISAS; s++) {
    if (!use_isa(s))
      continue;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &x, &w, &qp, &yf,
                                                  NULL),
                     VOXCONV_STATUS_SUCCESS);
    for (int64_t i = 0; i < n; i++)
      VC_EXPECT(y[i] == want2[i], "tie isa=%s: x=%d/2 -> %d, want %d",
                k_isas[s], xv[i], y[i], want2[i]);
    /* y_scale 0.5: t = 2 acc, clamps at +-127 (never -128) */
    qp.y_scale = 0.5f;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &x, &w, &qp, &yf,
                                                  NULL),
                     VOXCONV_STATUS_SUCCESS);
    for (int64_t i = 0; i < n; i++) {
      const int want = xv[i] * 2 > 127 ? 127 : (xv[i] * 2 < -127 ? -127
                                                                 : xv[i] * 2);
      VC_EXPECT(y[i] == want, "clamp isa=%s: x=%d*2 -> %d, want %d",
                k_isas[s], xv[i], y[i], want);
    }
    /* relu: negatives become 0 */
    qp.relu = 1;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &x, &w, &qp, &yf,
                                                  NULL),
                     VOXCONV_STATUS_SUCCESS);
    for (int64_t i = 0; i < n; i++)
      VC_EXPECT(y[i] == (xv[i] > 0 ? (xv[i] * 2 > 127 ? 127 : xv[i] * 2) : 0),
                "relu isa=%s: x=%d -> %d", k_isas[s], xv[i], y[i]);
    qp.relu = 0;
    qp.y_scale = 2.0f;
  }
  set_isa(NULL);
  voxconv_kmap_destroy(h, km);
  free(c);
}

/* All -128 at kvol * cin = 131071: acc = 131071 * 16384 = 2^31 - 2^14,
 * exact (the VNNI path's u8 offset wraps in between); 131072 refused. */
static void test_extreme_acc(voxconv_handle_t *h) {
  const int64_t n = 3, cin = 131071;
  int32_t *c;
  voxconv_kmap_t *km = identity_map(h, n, &c);
  if (!km)
    return;
  int8_t *x = (int8_t *)dr_xmalloc((size_t)(n * (cin + 1)));
  int8_t *w = (int8_t *)dr_xmalloc((size_t)(cin + 1) * 2);
  memset(x, 0x80, (size_t)(n * (cin + 1)));
  memset(w, 0x80, (size_t)(cin + 1) * 2);
  int32_t y[6];
  voxconv_feats_t xf = {x, n, cin, VOXCONV_DTYPE_I8};
  voxconv_weights_t wf = {w, 1, cin, 2, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {y, n, 2, VOXCONV_DTYPE_I32};
  for (int s = 0; s < N_ISAS; s++) {
    if (!use_isa(s))
      continue;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &xf, &wf, NULL, &yf,
                                                  NULL),
                     VOXCONV_STATUS_SUCCESS);
    for (int i = 0; i < 6; i++)
      VC_EXPECT(y[i] == 2147467264, "extreme isa=%s: y[%d]=%d", k_isas[s], i,
                y[i]);
  }
  set_isa(NULL);
  xf.channels = wf.cin = cin + 1;
  VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &xf, &wf, NULL, &yf,
                                                NULL),
                   VOXCONV_STATUS_UNSUPPORTED);
  free(x);
  free(w);
  voxconv_kmap_destroy(h, km);
  free(c);
}

static void test_bad_input(voxconv_handle_t *h) {
  const int64_t n = 4;
  int32_t *c;
  voxconv_kmap_t *km = identity_map(h, n, &c);
  if (!km)
    return;
  int8_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[4] = {1, 2, 3, 4};
  float ws[2] = {0.5f, 0.25f}, bias[2] = {0.0f, 1.0f}, yf32[8];
  int8_t y8[8];
  int32_t y32[8];
  voxconv_feats_t xf = {x, n, 2, VOXCONV_DTYPE_I8};
  voxconv_weights_t wf = {w, 1, 2, 2, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {yf32, n, 2, VOXCONV_DTYPE_F32};
  voxconv_feats_t yi = {y8, n, 2, VOXCONV_DTYPE_I8};
  voxconv_feats_t yr = {y32, n, 2, VOXCONV_DTYPE_I32};
  voxconv_quant_params_t qp = {0.1f, ws, bias, 0, 0.0f,
                               VOXCONV_INT8_WEIGHTS_KIO};
#define FWD(qq, yy) voxconv_conv_forward_int8(h, km, &xf, &wf, (qq), (yy), NULL)
  VC_EXPECT_STATUS(h, FWD(&qp, &yf), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(h, FWD(NULL, &yr), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(NULL, voxconv_conv_forward_int8(NULL, km, &xf, &wf, &qp,
                                                   &yf, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, FWD(NULL, &yf), VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, FWD(&qp, &yr), VOXCONV_STATUS_INVALID_ARGUMENT);
  const float bad_scales[4] = {0.0f, -1.0f, NAN, INFINITY};
  for (int i = 0; i < 4; i++) {
    voxconv_quant_params_t q = qp;
    q.x_scale = bad_scales[i];
    VC_EXPECT_STATUS(h, FWD(&q, &yf), VOXCONV_STATUS_INVALID_ARGUMENT);
    q = qp;
    float wsb[2] = {0.5f, bad_scales[i]};
    q.w_scale = wsb;
    VC_EXPECT_STATUS(h, FWD(&q, &yf), VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT(strstr(voxconv_get_last_error(h), "w_scale[1]") != NULL,
              "message names the channel: %s", voxconv_get_last_error(h));
    if (i >= 1) { /* y_scale 0 means unset: DTYPE_MISMATCH below */
      q = qp;
      q.y_scale = bad_scales[i];
      VC_EXPECT_STATUS(h, FWD(&q, &yi), VOXCONV_STATUS_INVALID_ARGUMENT);
    }
  }
  {
    voxconv_quant_params_t q = qp;
    float big[2] = {3e38f, 3e38f};
    q.x_scale = 10.0f;
    q.w_scale = big; /* the product overflows fp32 */
    VC_EXPECT_STATUS(h, FWD(&q, &yf), VOXCONV_STATUS_INVALID_ARGUMENT);
    q = qp;
    float bb[2] = {0.0f, NAN};
    q.bias = bb;
    VC_EXPECT_STATUS(h, FWD(&q, &yf), VOXCONV_STATUS_INVALID_ARGUMENT);
    q = qp;
    q.relu = 2;
    VC_EXPECT_STATUS(h, FWD(&q, &yf), VOXCONV_STATUS_INVALID_ARGUMENT);
    /* weight layouts: KIO (0), KOI (1), nothing else */
    const int32_t layouts[4] = {-1, 2, 0x7fffffff, 1};
    for (int i = 0; i < 4; i++) {
      q = qp;
      q.w_layout = layouts[i];
      VC_EXPECT_STATUS(h, FWD(&q, &yf),
                       i < 3 ? VOXCONV_STATUS_INVALID_ARGUMENT
                             : VOXCONV_STATUS_SUCCESS);
      if (i < 3)
        VC_EXPECT(strstr(voxconv_get_last_error(h), "w_layout") != NULL,
                  "message names w_layout: %s", voxconv_get_last_error(h));
    }
    q = qp;
    q.w_scale = NULL;
    VC_EXPECT_STATUS(h, FWD(&q, &yf), VOXCONV_STATUS_NULL_POINTER);
    /* pairing: i8 without y_scale, y_scale with f32 */
    VC_EXPECT_STATUS(h, FWD(&qp, &yi), VOXCONV_STATUS_DTYPE_MISMATCH);
    q = qp;
    q.y_scale = 1.0f;
    VC_EXPECT_STATUS(h, FWD(&q, &yf), VOXCONV_STATUS_DTYPE_MISMATCH);
    VC_EXPECT_STATUS(h, FWD(&q, &yi), VOXCONV_STATUS_SUCCESS);
  }
  {
    /* x i8 with w f16, x f32, y f64, bad enum */
    voxconv_weights_t w16 = wf;
    w16.dtype = VOXCONV_DTYPE_F16;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &xf, &w16, &qp, &yf,
                                                  NULL),
                     VOXCONV_STATUS_DTYPE_MISMATCH);
    voxconv_feats_t x32 = xf;
    x32.dtype = VOXCONV_DTYPE_F32;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &x32, &wf, &qp, &yf,
                                                  NULL),
                     VOXCONV_STATUS_DTYPE_MISMATCH);
    voxconv_feats_t y64 = yf;
    y64.dtype = VOXCONV_DTYPE_F64;
    VC_EXPECT_STATUS(h, FWD(&qp, &y64), VOXCONV_STATUS_DTYPE_MISMATCH);
    voxconv_feats_t ybad = yf;
    ybad.dtype = (voxconv_dtype_t)99;
    VC_EXPECT_STATUS(h, FWD(&qp, &ybad), VOXCONV_STATUS_INVALID_ARGUMENT);
  }
  {
    /* shapes, rows, algorithm names, overlap */
    voxconv_feats_t yc = yf;
    yc.channels = 3;
    VC_EXPECT_STATUS(h, FWD(&qp, &yc), VOXCONV_STATUS_SHAPE_MISMATCH);
    voxconv_feats_t yrow = yf;
    yrow.rows = n - 1;
    VC_EXPECT_STATUS(h, FWD(&qp, &yrow), VOXCONV_STATUS_KMAP_MISMATCH);
    voxconv_weights_t wk = wf;
    wk.kvol = 27;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &xf, &wk, &qp, &yf,
                                                  NULL),
                     VOXCONV_STATUS_SHAPE_MISMATCH);
    voxconv_conv_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.fwd_algo = "implicit_gemm";
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &xf, &wf, &qp, &yf,
                                                  &opt),
                     VOXCONV_STATUS_UNSUPPORTED);
    opt.fwd_algo = " Auto ";
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &xf, &wf, &qp, &yf,
                                                  &opt),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_feats_t yo = {x, n, 2, VOXCONV_DTYPE_I8};
    voxconv_quant_params_t q = qp;
    q.y_scale = 1.0f;
    VC_EXPECT_STATUS(h, FWD(&q, &yo), VOXCONV_STATUS_INVALID_ARGUMENT);
    voxconv_feats_t xn = xf;
    xn.data = NULL;
    VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, km, &xn, &wf, &qp, &yf,
                                                  NULL),
                     VOXCONV_STATUS_NULL_POINTER);
  }
  {
    /* depthwise: same rules */
    voxconv_feats_t wd = {w, 1, 2, VOXCONV_DTYPE_I8};
    VC_EXPECT_STATUS(h, voxconv_depthwise_forward_int8(h, km, &xf, &wd, &qp,
                                                       &yf, NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h, voxconv_depthwise_forward_int8(h, km, &xf, &wd, &qp,
                                                       &yi, NULL),
                     VOXCONV_STATUS_DTYPE_MISMATCH);
    voxconv_quant_params_t qk = qp; /* depthwise weights: KIO only */
    qk.w_layout = VOXCONV_INT8_WEIGHTS_KOI;
    VC_EXPECT_STATUS(h, voxconv_depthwise_forward_int8(h, km, &xf, &wd, &qk,
                                                       &yf, NULL),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    voxconv_feats_t wd3 = wd;
    wd3.rows = 3;
    VC_EXPECT_STATUS(h, voxconv_depthwise_forward_int8(h, km, &xf, &wd3, &qp,
                                                       &yf, NULL),
                     VOXCONV_STATUS_SHAPE_MISMATCH);
  }
  {
    /* voxconv_quant_params_check */
    VC_EXPECT_STATUS(h, voxconv_quant_params_check(h, &qp, 2,
                                                   VOXCONV_DTYPE_F16),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_quant_params_t q = qp;
    float wsb[2] = {1.0f, -2.0f};
    q.w_scale = wsb;
    VC_EXPECT_STATUS(h, voxconv_quant_params_check(h, &q, 2,
                                                   VOXCONV_DTYPE_F16),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT_STATUS(h, voxconv_quant_params_check(h, &qp, 2,
                                                   VOXCONV_DTYPE_I8),
                     VOXCONV_STATUS_DTYPE_MISMATCH);
  }
  {
    /* float ops refuse the integer dtypes with UNSUPPORTED */
    float xf32[8] = {0};
    voxconv_feats_t x32 = {xf32, n, 2, VOXCONV_DTYPE_F32};
    voxconv_weights_t w8 = wf;
    VC_EXPECT_STATUS(h, voxconv_conv_forward(h, km, &xf, &wf, &yi, NULL),
                     VOXCONV_STATUS_UNSUPPORTED);
    VC_EXPECT_STATUS(h, voxconv_conv_forward(h, km, &x32, &w8, &yf, NULL),
                     VOXCONV_STATUS_UNSUPPORTED);
    voxconv_feats_t wd = {w, 1, 2, VOXCONV_DTYPE_I8};
    VC_EXPECT_STATUS(h, voxconv_depthwise_forward(h, km, &xf, &wd, &yi, NULL),
                     VOXCONV_STATUS_UNSUPPORTED);
    /* (int8 max pooling is allowed: test_max_pool) */
    VC_EXPECT_STATUS(h, voxconv_pool_forward(h, km, VOXCONV_POOL_AVG, &xf,
                                             &yi),
                     VOXCONV_STATUS_UNSUPPORTED);
    VC_EXPECT_STATUS(h, voxconv_conv_dgrad(h, km, &yr, &wf, &xf, NULL),
                     VOXCONV_STATUS_UNSUPPORTED);
  }
  {
    /* an ISA name the CPU cannot run is INVALID_ARGUMENT, as for floats */
    set_isa("sse9");
    VC_EXPECT_STATUS(h, FWD(&qp, &yf), VOXCONV_STATUS_INVALID_ARGUMENT);
    set_isa(NULL);
  }
#undef FWD
  voxconv_kmap_destroy(h, km);
  free(c);
}

static void test_threads(void) {
  /* 1 and 2 threads: identical bits (the model check covers values). */
  int64_t n;
  int32_t *c = vc_random_coords(3000, 10, &n);
  voxconv_handle_t *h1 = NULL, *h2 = NULL;
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = 1;
  voxconv_create(&h1, &d);
  d.num_threads = 2;
  voxconv_create(&h2, &d);
  voxconv_kmap_t *k1 = build(h1, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, n, 1,
                             NULL, 0, 0);
  voxconv_kmap_t *k2 = build(h2, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, n, 1,
                             NULL, 0, 0);
  if (k1 && k2) {
    const int64_t cin = 33, cout = 47;
    int8_t *x = (int8_t *)dr_xmalloc((size_t)(n * cin));
    int8_t *w = (int8_t *)dr_xmalloc((size_t)(27 * cin * cout));
    fill_i8(x, n * cin, 1);
    fill_i8(w, 27 * cin * cout, 1);
    float *y1 = (float *)dr_xmalloc(sizeof(float) * (size_t)(n * cout));
    float *y2 = (float *)dr_xmalloc(sizeof(float) * (size_t)(n * cout));
    float ws[47];
    for (int i = 0; i < 47; i++)
      ws[i] = 0.01f * (float)(i + 1);
    voxconv_quant_params_t qp = {0.05f, ws, NULL, 1, 0.0f,
                                 VOXCONV_INT8_WEIGHTS_KIO};
    voxconv_feats_t xf = {x, n, cin, VOXCONV_DTYPE_I8};
    voxconv_weights_t wf = {w, 27, cin, cout, VOXCONV_DTYPE_I8};
    voxconv_feats_t f1 = {y1, n, cout, VOXCONV_DTYPE_F32};
    voxconv_feats_t f2 = {y2, n, cout, VOXCONV_DTYPE_F32};
    VC_EXPECT_STATUS(h1, voxconv_conv_forward_int8(h1, k1, &xf, &wf, &qp, &f1,
                                                   NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h2, voxconv_conv_forward_int8(h2, k2, &xf, &wf, &qp, &f2,
                                                   NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(memcmp(y1, y2, sizeof(float) * (size_t)(n * cout)) == 0,
              "1 vs 2 threads differ");
    free(x);
    free(w);
    free(y1);
    free(y2);
  }
  voxconv_kmap_destroy(h1, k1);
  voxconv_kmap_destroy(h2, k2);
  voxconv_destroy(h1);
  voxconv_destroy(h2);
  free(c);
}

int main(void) {
  vc_test_init("test_int8_cpu");
  {
    /* which paths this CPU really exercises (the others fall back) */
    __builtin_cpu_init();
    printf("cpu: avx512vnni=%d avx2=%d\n",
           __builtin_cpu_supports("avx512vnni") != 0,
           __builtin_cpu_supports("avx2") != 0);
  }
  voxconv_handle_t *h = NULL;
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  VC_REQUIRE_OK(NULL, voxconv_create(&h, &d));
  for (int s = 0; s < N_ISAS; s++) {
    const char *path = "?";
    set_isa(k_isas[s]);
    g_isa_ok[s] = vc_cpu_int8_path(h, 64, &path) == VOXCONV_STATUS_SUCCESS;
    if (g_isa_ok[s])
      printf("VOXCONV_CPU_ISA=%s: int8 path %s\n", k_isas[s], path);
    else
      printf("VOXCONV_CPU_ISA=%s: this CPU cannot run it; its cases are "
             "skipped (%s)\n", k_isas[s], voxconv_get_last_error(h));
    if (strcmp(k_isas[s], "avx512") == 0 &&
        __builtin_cpu_supports("avx512vnni"))
      VC_EXPECT(strcmp(path, "avx512_vnni") == 0, "avx512 runs %s", path);
  }
  set_isa(NULL);
  test_bad_input(h);
  test_ties_and_clamp(h);
  test_extreme_acc(h);
  test_modes(h);
  test_real_scan(h);
  test_max_pool(h);
  test_threads();
  voxconv_destroy(h);
  return vc_test_finish();
}
