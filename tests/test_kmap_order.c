/* Kernel offset order (desc offset_order, voxconv.h "Kernel offsets"): a
 * map built with VOXCONV_OFFSET_ORDER_X_FASTEST (MinkowskiEngine's order,
 * kidx = (jz*ky + jy)*kx + jx) has exactly the pairs and outputs of the
 * default map, under the other index. Written from the header only:
 *
 *   - every mode (SUBMANIFOLD, STRIDED, EXPANDING, TRANSPOSED, GENERATIVE),
 *     centred and padded, odd / even / anisotropic kernels, dilations and
 *     strides, on fresh random coordinates: same n_out, same output
 *     coordinates, and for each x-fastest index kf the pair set of the
 *     default map at the x-slowest index of the same taps (the permutation
 *     is computed here from the two formulas);
 *   - the offset order survives voxconv_kmap_get_info and
 *     voxconv_kmap_inverse;
 *   - a convolution through the x-fastest map with weights stored in that
 *     order equals the default map's with the same weights reordered (CPU
 *     fp64, forward, dgrad and wgrad, within the fp64 rounding bound of the
 *     two summation orders);
 *   - offset_order outside {0, 1} is INVALID_ARGUMENT naming the field.
 * test_cuda_kmap runs every mode in the x-fastest order on the GPU against
 * the CPU. */
#include "vc_test.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static voxconv_handle_t *g_h;

/* The default (x-slowest) index of the taps whose x-fastest index is kf. */
static int32_t slowest_of_fastest(const int32_t ks[3], int32_t kf) {
  const int32_t jx = kf % ks[0], jy = (kf / ks[0]) % ks[1],
                jz = kf / (ks[0] * ks[1]);
  return (jx * ks[1] + jy) * ks[2] + jz;
}

typedef struct {
  int64_t *offsets;
  int32_t *in_rows, *out_rows;
  int64_t n_pairs, n_out;
  int32_t K;
} pairs_t;

static int get_pairs(const voxconv_kmap_t *m, pairs_t *p) {
  voxconv_kmap_info_t info;
  if (voxconv_kmap_get_info(m, &info) != VOXCONV_STATUS_SUCCESS)
    return 0;
  p->K = info.kernel_volume;
  p->n_pairs = info.n_pairs;
  p->n_out = info.n_out;
  p->offsets = (int64_t *)malloc((size_t)(p->K + 1) * sizeof *p->offsets);
  p->in_rows = (int32_t *)malloc((size_t)(p->n_pairs + 1) * 4);
  p->out_rows = (int32_t *)malloc((size_t)(p->n_pairs + 1) * 4);
  return voxconv_kmap_get_pairs(g_h, m, p->offsets, p->in_rows, p->out_rows) ==
         VOXCONV_STATUS_SUCCESS;
}

static void pairs_free(pairs_t *p) {
  free(p->offsets);
  free(p->in_rows);
  free(p->out_rows);
}

static int cmp_pair(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* The (in, out) pairs of segment k, packed and sorted (malloc'd). */
static int64_t *segment(const pairs_t *p, int32_t k, int64_t *n) {
  const int64_t lo = p->offsets[k], hi = p->offsets[k + 1];
  *n = hi - lo;
  int64_t *s = (int64_t *)malloc((size_t)(*n + 1) * sizeof *s);
  for (int64_t q = lo; q < hi; q++)
    s[q - lo] = ((int64_t)p->in_rows[q] << 32) | (uint32_t)p->out_rows[q];
  qsort(s, (size_t)*n, sizeof *s, cmp_pair);
  return s;
}

static double *randn(int64_t n) {
  double *v = (double *)malloc((size_t)(n + 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = vc_rand_normal();
  return v;
}

/* |got - want| <= 4 * terms * eps * (|x|.|w| sums): two fp64 summations of
 * the same products in different orders. */
static void expect_close(const char *tag, const char *what, const double *got,
                         const double *want, const double *mag, int64_t n,
                         int64_t terms) {
  int64_t bad = 0, worst = -1;
  for (int64_t i = 0; i < n; i++) {
    const double tol = 4.0 * (double)terms * DBL_EPSILON * mag[i];
    if (!(fabs(got[i] - want[i]) <= tol)) {
      bad++;
      if (worst < 0)
        worst = i;
    }
  }
  VC_EXPECT(bad == 0, "%s: %s: %lld of %lld elements off (first %lld: %g vs %g)",
            tag, what, (long long)bad, (long long)n, (long long)worst,
            worst >= 0 ? got[worst] : 0.0, worst >= 0 ? want[worst] : 0.0);
}

static voxconv_feats_t feats(double *d, int64_t rows, int64_t ch) {
  voxconv_feats_t f = {d, rows, ch, VOXCONV_DTYPE_F64};
  return f;
}

/* Forward, dgrad and wgrad through both maps: W_f[kf] = W_s[perm(kf)]. */
static void check_conv(const char *tag, const voxconv_kmap_t *ms,
                       const voxconv_kmap_t *mf, const int32_t ks[3]) {
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(ms, &info);
  const int64_t n_in = info.n_in, n_out = info.n_out, K = info.kernel_volume;
  const int64_t ci = vc_rand_range(1, 5), co = vc_rand_range(1, 5);
  double *x = randn(n_in * ci), *ws = randn(K * ci * co), *dy = randn(n_out * co);
  double *wf = (double *)malloc((size_t)(K * ci * co + 1) * sizeof *wf);
  for (int32_t kf = 0; kf < K; kf++)
    memcpy(wf + kf * ci * co, ws + slowest_of_fastest(ks, kf) * ci * co,
           (size_t)(ci * co) * sizeof *wf);
  double *xa = (double *)malloc((size_t)(n_in * ci + 1) * sizeof *xa);
  double *wa = (double *)malloc((size_t)(K * ci * co + 1) * sizeof *wa);
  double *dya = (double *)malloc((size_t)(n_out * co + 1) * sizeof *dya);
  for (int64_t i = 0; i < n_in * ci; i++)
    xa[i] = fabs(x[i]);
  for (int64_t i = 0; i < K * ci * co; i++)
    wa[i] = fabs(ws[i]);
  for (int64_t i = 0; i < n_out * co; i++)
    dya[i] = fabs(dy[i]);
  const int64_t ny = n_out * co, nx = n_in * ci, nw = K * ci * co;
  double *ys = (double *)malloc((size_t)(ny + 1) * 8), *yf = (double *)malloc((size_t)(ny + 1) * 8),
         *ya = (double *)malloc((size_t)(ny + 1) * 8);
  double *dxs = (double *)malloc((size_t)(nx + 1) * 8), *dxf = (double *)malloc((size_t)(nx + 1) * 8),
         *dxa = (double *)malloc((size_t)(nx + 1) * 8);
  double *dws = (double *)malloc((size_t)(nw + 1) * 8), *dwf = (double *)malloc((size_t)(nw + 1) * 8),
         *dwa = (double *)malloc((size_t)(nw + 1) * 8), *dwf_s = (double *)malloc((size_t)(nw + 1) * 8);
  voxconv_weights_t Ws = {ws, K, ci, co, VOXCONV_DTYPE_F64},
                    Wf = {wf, K, ci, co, VOXCONV_DTYPE_F64},
                    Wa = {wa, K, ci, co, VOXCONV_DTYPE_F64},
                    dWs = {dws, K, ci, co, VOXCONV_DTYPE_F64},
                    dWf = {dwf, K, ci, co, VOXCONV_DTYPE_F64},
                    dWa = {dwa, K, ci, co, VOXCONV_DTYPE_F64};
  voxconv_feats_t X = feats(x, n_in, ci), XA = feats(xa, n_in, ci),
                  DY = feats(dy, n_out, co), DYA = feats(dya, n_out, co);
  voxconv_feats_t Ys = feats(ys, n_out, co), Yf = feats(yf, n_out, co),
                  YA = feats(ya, n_out, co), DXs = feats(dxs, n_in, ci),
                  DXf = feats(dxf, n_in, ci), DXA = feats(dxa, n_in, ci);
  VC_EXPECT_STATUS(g_h, voxconv_conv_forward(g_h, ms, &X, &Ws, &Ys, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g_h, voxconv_conv_forward(g_h, mf, &X, &Wf, &Yf, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g_h, voxconv_conv_forward(g_h, ms, &XA, &Wa, &YA, NULL), VOXCONV_STATUS_SUCCESS);
  expect_close(tag, "forward", yf, ys, ya, ny, K * ci);
  VC_EXPECT_STATUS(g_h, voxconv_conv_dgrad(g_h, ms, &DY, &Ws, &DXs, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g_h, voxconv_conv_dgrad(g_h, mf, &DY, &Wf, &DXf, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g_h, voxconv_conv_dgrad(g_h, ms, &DYA, &Wa, &DXA, NULL), VOXCONV_STATUS_SUCCESS);
  expect_close(tag, "dgrad", dxf, dxs, dxa, nx, K * co);
  VC_EXPECT_STATUS(g_h, voxconv_conv_wgrad(g_h, ms, &X, &DY, &dWs, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g_h, voxconv_conv_wgrad(g_h, mf, &X, &DY, &dWf, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g_h, voxconv_conv_wgrad(g_h, ms, &XA, &DYA, &dWa, NULL), VOXCONV_STATUS_SUCCESS);
  /* dW_f back in the default order before comparing */
  for (int32_t kf = 0; kf < K; kf++)
    memcpy(dwf_s + slowest_of_fastest(ks, kf) * ci * co, dwf + kf * ci * co,
           (size_t)(ci * co) * sizeof *dwf);
  expect_close(tag, "wgrad", dwf_s, dws, dwa, nw, n_out > 0 ? n_out : 1);
  free(x); free(ws); free(wf); free(dy); free(xa); free(wa); free(dya);
  free(ys); free(yf); free(ya); free(dxs); free(dxf); free(dxa);
  free(dws); free(dwf); free(dwa); free(dwf_s);
}

/* Builds desc in both orders on in (and out for TRANSPOSED); compares.
 * Returns the default-order map when keep (else destroys it). */
static voxconv_kmap_t *check_case(const char *tag, voxconv_kmap_desc_t d,
                                  const voxconv_coords_t *in,
                                  const voxconv_coords_t *out, int keep) {
  voxconv_kmap_t *ms = NULL, *mf = NULL;
  d.offset_order = VOXCONV_OFFSET_ORDER_X_SLOWEST;
  const voxconv_status_t ss = vc_test_kmap_build(g_h, &d, in, out, &ms);
  d.offset_order = VOXCONV_OFFSET_ORDER_X_FASTEST;
  const voxconv_status_t sf = vc_test_kmap_build(g_h, &d, in, out, &mf);
  VC_EXPECT(ss == VOXCONV_STATUS_SUCCESS && sf == VOXCONV_STATUS_SUCCESS,
            "%s: builds %s / %s: %s", tag, voxconv_status_string(ss),
            voxconv_status_string(sf), voxconv_get_last_error(g_h));
  if (ss != VOXCONV_STATUS_SUCCESS || sf != VOXCONV_STATUS_SUCCESS) {
    voxconv_kmap_destroy(g_h, ms);
    voxconv_kmap_destroy(g_h, mf);
    return NULL;
  }
  voxconv_kmap_info_t is, inf;
  voxconv_kmap_get_info(ms, &is);
  voxconv_kmap_get_info(mf, &inf);
  VC_EXPECT(is.desc.offset_order == 0 && inf.desc.offset_order == 1,
            "%s: info offset_order %d / %d", tag, is.desc.offset_order,
            inf.desc.offset_order);
  pairs_t ps, pf;
  VC_EXPECT(get_pairs(ms, &ps) && get_pairs(mf, &pf), "%s: get_pairs", tag);
  VC_EXPECT(ps.n_out == pf.n_out && ps.n_pairs == pf.n_pairs && ps.K == pf.K,
            "%s: n_out %lld / %lld, pairs %lld / %lld", tag, (long long)ps.n_out,
            (long long)pf.n_out, (long long)ps.n_pairs, (long long)pf.n_pairs);
  if (ps.n_out == pf.n_out && ps.n_out > 0) {
    const int32_t *cs = NULL, *cf = NULL;
    voxconv_kmap_out_coords(ms, &cs);
    voxconv_kmap_out_coords(mf, &cf);
    VC_EXPECT(memcmp(cs, cf, (size_t)ps.n_out * 16) == 0,
              "%s: output coordinates differ", tag);
  }
  int bad_k = -1;
  if (ps.K == pf.K && ps.n_pairs == pf.n_pairs)
    for (int32_t kf = 0; kf < pf.K && bad_k < 0; kf++) {
      int64_t na, nb;
      int64_t *a = segment(&pf, kf, &na);
      int64_t *b = segment(&ps, slowest_of_fastest(d.kernel_size, kf), &nb);
      if (na != nb || memcmp(a, b, (size_t)na * sizeof *a) != 0)
        bad_k = kf;
      free(a);
      free(b);
    }
  VC_EXPECT(bad_k < 0, "%s: the pairs of x-fastest offset %d differ", tag,
            bad_k);
  if (d.mode == VOXCONV_KMAP_STRIDED || d.mode == VOXCONV_KMAP_EXPANDING) {
    voxconv_kmap_t *inv = NULL;
    VC_EXPECT_STATUS(g_h, voxconv_kmap_inverse(g_h, mf, &inv),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_kmap_info_t ii;
    if (inv && voxconv_kmap_get_info(inv, &ii) == VOXCONV_STATUS_SUCCESS)
      VC_EXPECT(ii.desc.offset_order == 1, "%s: inverse offset_order %d", tag,
                ii.desc.offset_order);
    voxconv_kmap_destroy(g_h, inv);
  }
  if (ps.n_pairs > 0)
    check_conv(tag, ms, mf, d.kernel_size);
  pairs_free(&ps);
  pairs_free(&pf);
  voxconv_kmap_destroy(g_h, mf);
  if (!keep) {
    voxconv_kmap_destroy(g_h, ms);
    return NULL;
  }
  return ms;
}

int main(void) {
  vc_test_init("test_kmap_order");
  voxconv_handle_desc_t hd = {0};
  hd.backend = VOXCONV_BACKEND_CPU;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_h, &hd));
  int64_t n = 0;
  int32_t *c = vc_random_coords(vc_rand_range(400, 1500), (int)vc_rand_range(6, 10), &n);
  voxconv_coords_t in = {c, n, {1, 1, 1}};
  char tag[128];

  static const int subm[][4] = {{3, 3, 3, 1}, {2, 3, 4, 1}, {5, 1, 3, 2},
                                {3, 3, 3, 2}, {4, 4, 2, 1}};
  for (int t = 0; t < 5; t++) {
    snprintf(tag, sizeof tag, "subm k%dx%dx%d d%d", subm[t][0], subm[t][1],
             subm[t][2], subm[t][3]);
    check_case(tag, vc_test_kmap_desc(VOXCONV_KMAP_SUBMANIFOLD, subm[t][0], subm[t][1],
                            subm[t][2], 1, subm[t][3]),
               &in, NULL, 0);
  }
  static const int strided[][5] = {
      {2, 2, 2, 2, 1}, {3, 2, 1, 2, 1}, {3, 3, 3, 2, 1}, {2, 3, 4, 3, 1}};
  for (int t = 0; t < 4; t++) {
    voxconv_kmap_desc_t d = vc_test_kmap_desc(VOXCONV_KMAP_STRIDED, strided[t][0],
                                    strided[t][1], strided[t][2],
                                    strided[t][3], strided[t][4]);
    snprintf(tag, sizeof tag, "strided k%dx%dx%d s%d", strided[t][0],
             strided[t][1], strided[t][2], strided[t][3]);
    voxconv_kmap_t *ms = check_case(tag, d, &in, NULL, 1);
    if (!ms)
      continue;
    voxconv_kmap_info_t info;
    voxconv_kmap_get_info(ms, &info);
    const int32_t *oc = NULL;
    voxconv_kmap_out_coords(ms, &oc);
    const int s = strided[t][3];
    voxconv_coords_t coarse = {oc, info.n_out, {s, s, s}};
    voxconv_kmap_desc_t dt = d;
    dt.mode = VOXCONV_KMAP_TRANSPOSED;
    snprintf(tag, sizeof tag, "transposed k%dx%dx%d s%d", strided[t][0],
             strided[t][1], strided[t][2], s);
    check_case(tag, dt, &coarse, &in, 0);
    voxconv_kmap_desc_t dg = d;
    dg.mode = VOXCONV_KMAP_GENERATIVE;
    snprintf(tag, sizeof tag, "generative k%dx%dx%d s%d", strided[t][0],
             strided[t][1], strided[t][2], s);
    check_case(tag, dg, &coarse, NULL, 0);
    voxconv_kmap_destroy(g_h, ms);
  }
  /* spconv's regular convolution (EXPANDING) with padding, and a padded
   * submanifold map (ME's even kernels anchored at 0) */
  voxconv_kmap_desc_t de = vc_test_kmap_desc(VOXCONV_KMAP_EXPANDING, 3, 2, 3, 2, 1);
  de.padded = 1;
  de.padding[0] = 1;
  de.padding[2] = 2;
  check_case("expanding k3x2x3 s2 p1,0,2", de, &in, NULL, 0);
  voxconv_kmap_desc_t dp = vc_test_kmap_desc(VOXCONV_KMAP_SUBMANIFOLD, 4, 2, 3, 1, 1);
  dp.padded = 1;
  check_case("subm k4x2x3 padded 0", dp, &in, NULL, 0);

  /* offset_order outside {0, 1}: a named status and the field's name */
  voxconv_kmap_desc_t bad = vc_test_kmap_desc(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1);
  bad.offset_order = 2;
  voxconv_kmap_t *m = NULL;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &bad, &in, NULL, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT(strstr(voxconv_get_last_error(g_h), "offset_order") != NULL,
            "message: %s", voxconv_get_last_error(g_h));
  VC_EXPECT(m == NULL, "a failed build returned a map");
  free(c);
  voxconv_destroy(g_h);
  return vc_test_finish();
}
