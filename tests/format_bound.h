/* The error bound that follows from the number formats, for tests that
 * compare an output of dtype dt with an fp64 reference (test_backend_ops,
 * test_mask_gemm, test_format_bound). It is the tuner's bound (voxconv.h
 * "tuning"), written again here so that the tests do not check the library
 * with itself:
 *
 *   |y_i - ref_i| <= spacing_dt(max(|y_i|, |ref_i|)) + lambda sqrt(n) u S_i
 *
 *  - spacing_dt(v): distance between adjacent values of the output format
 *    at v (the subnormal step below the normal range): covers the output's
 *    rounding to dt (half a spacing) with room to spare, since the fp64
 *    reference is not rounded;
 *  - S_i: the sum of |a| |b| over the products of element i, computed in
 *    fp64 from |x|, |w| (or |dy|) by the CPU reference;
 *  - n: products summed per element (an upper bound); u = 2^-23: fp32
 *    accumulation with one extra bit for tensor cores that truncate;
 *  - lambda = 8: Higham & Mary's probabilistic bound (SIAM J. Sci. Comput.
 *    2019): |error| <= lambda sqrt(n) u sum |a_j b_j| with probability >=
 *    1 - 2 exp(-lambda^2 / 2) ~ 1 - 2.5e-14 per element, so no seed makes a
 *    correct kernel fail. The fp64 reference's own error is negligible:
 *    factor 1 on that term (the tuner, comparing two fp32 sums, uses 2).
 *
 * The per-element bound sees every outlier cell (a dropped pair, offset or
 * channel; a scale error), but at long sums it is loose for errors that are
 * small in every element and systematic over all of them (TF32 products,
 * ~2^-11 per product). An aggregate gate covers those:
 *   ||y - ref|| <= ||spacing_dt(ref_i)||_2 + lambda sqrt(n) u ||ref||
 * the output rounding (half a spacing per element; a whole one gives room)
 * plus the accumulation error of sums of random-sign products under the
 * same model (about u sqrt(n) |y| each). */
#ifndef FORMAT_BOUND_H
#define FORMAT_BOUND_H

#include "vc_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define FB_LAMBDA 8.0

/* significand bits (with the implicit one) and smallest normal exponent */
static inline void fb_format(voxconv_dtype_t dt, int *prec, int *emin) {
  switch (dt) {
  case VOXCONV_DTYPE_F16:
    *prec = 11, *emin = -14;
    break;
  case VOXCONV_DTYPE_BF16:
    *prec = 8, *emin = -126;
    break;
  case VOXCONV_DTYPE_F32:
    *prec = 24, *emin = -126;
    break;
  default:
    *prec = 53, *emin = -1022;
    break;
  }
}

/* Spacing of dt's values in the binade of |v|. */
static inline double fb_spacing(voxconv_dtype_t dt, double v) {
  int prec, emin;
  fb_format(dt, &prec, &emin);
  v = fabs(v);
  int e = emin;
  if (v >= ldexp(1.0, emin) && isfinite(v))
    e = ilogb(v);
  return ldexp(1.0, e - (prec - 1));
}

/* n of the bound: the products summed per output element of a pass on map
 * km (channels cin -> cout): forward kvol cin, dgrad kvol cout, depthwise
 * forward and dgrad kvol, a weight gradient the most pairs of any one
 * offset (each dW element sums every pair of its offset). Where the pairs
 * cannot be read, min(n_in, n_out), which no offset exceeds. */
static inline int64_t fb_terms(voxconv_handle_t *h, const voxconv_kmap_t *km,
                               voxconv_pass_t pass, int64_t cin, int64_t cout) {
  voxconv_kmap_info_t info;
  if (voxconv_kmap_get_info(km, &info) != VOXCONV_STATUS_SUCCESS)
    return 1;
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
    return (int64_t)info.kernel_volume * cin;
  case VOXCONV_PASS_CONV_DGRAD:
    return (int64_t)info.kernel_volume * cout;
  case VOXCONV_PASS_DEPTHWISE_FWD:
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return info.kernel_volume;
  default:
    break;
  }
  int64_t most = info.n_in < info.n_out ? info.n_in : info.n_out;
  int64_t *po =
      (int64_t *)malloc(sizeof(int64_t) * (size_t)(info.kernel_volume + 1));
  if (po &&
      voxconv_kmap_get_pairs(h, km, po, NULL, NULL) == VOXCONV_STATUS_SUCCESS) {
    most = 0;
    for (int k = 0; k < info.kernel_volume; k++)
      if (po[k + 1] - po[k] > most)
        most = po[k + 1] - po[k];
  }
  free(po);
  return most;
}

/* lambda sqrt(n) u for fp32 accumulation of n products. */
static inline double fb_acc(int64_t terms) {
  return FB_LAMBDA * sqrt((double)(terms > 1 ? terms : 1)) * ldexp(1.0, -23);
}

typedef struct fb_result {
  double max_ratio;    /* max over i of |y_i - ref_i| / tol_i */
  int64_t worst;       /* its index (-1: none) */
  double worst_tol;    /* tol at that index */
  double norm_rel;     /* ||y - ref|| / ||ref|| over finite pairs */
  double norm_limit;   /* its limit (see above), relative to ||ref|| */
  int64_t n_nonfinite; /* elements non-finite on one side only */
} fb_result_t;

/* got: n elements of dt (host); ref, s: n fp64 values; acc: the factor of
 * S (fb_acc(n_terms)). */
static inline fb_result_t fb_check(const void *got, voxconv_dtype_t dt,
                                   const double *ref, const double *s,
                                   int64_t n, double acc) {
  fb_result_t r = {0, -1, 0, 0, 0, 0};
  double ss_d = 0, ss_r = 0, ss_sp = 0;
  for (int64_t i = 0; i < n; i++) {
    const double y = vc_get(got, dt, i);
    if (!isfinite(y) || !isfinite(ref[i])) {
      /* the same non-finite value on both sides is propagated alike */
      const int same = isnan(y) ? isnan(ref[i]) : y == ref[i];
      r.n_nonfinite += !same;
      continue;
    }
    const double d = fabs(y - ref[i]);
    const double m = fabs(y) > fabs(ref[i]) ? fabs(y) : fabs(ref[i]);
    const double tol = fb_spacing(dt, m) + acc * s[i];
    if (d / tol > r.max_ratio) {
      r.max_ratio = d / tol;
      r.worst = i;
      r.worst_tol = tol;
    }
    const double sp = fb_spacing(dt, ref[i]);
    ss_d += d * d;
    ss_r += ref[i] * ref[i];
    ss_sp += sp * sp;
  }
  r.norm_rel = ss_r > 0 ? sqrt(ss_d / ss_r) : (ss_d > 0 ? INFINITY : 0.0);
  /* acc / S-factor is lambda sqrt(n) u: the accumulation term */
  r.norm_limit = ss_r > 0 ? sqrt(ss_sp / ss_r) + acc : INFINITY;
  return r;
}

/* 1 when r passes: every element within its bound, the norm within its
 * limit, no non-finite mismatch. */
static inline int fb_passes(const fb_result_t *r) {
  return r->n_nonfinite == 0 && r->max_ratio <= 1.0 &&
         r->norm_rel <= r->norm_limit;
}

#endif
