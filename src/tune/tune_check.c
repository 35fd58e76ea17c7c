/* The tuner's pure numerics (vc_tune.h): ranking of measured times and
 * the reference check -- the bound that follows from the number formats
 * and the comparison of a candidate's output with the reference on the
 * host. No library state: test_tune_guard and test_format_bound call
 * these directly, and cuda_tune.cu restates vc_check_host on the device. */
#include "vc_tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ranking helpers -------------------------------------------------- */
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double vc_median(double *v, int n) {
  if (n <= 0)
    return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return (n & 1) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int vc_leaders(const double *times, const int *ok, int n, double margin,
               int *idx) {
  double best = INFINITY;
  for (int i = 0; i < n; i++)
    if (ok[i] && times[i] < best)
      best = times[i];
  if (!isfinite(best))
    return 0;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (ok[i] && times[i] <= best * (1.0 + margin))
      idx[k++] = i;
  return k;
}

/* ---- the reference check ----------------------------------------------- */
/* Why the bound of vc_tune.h holds for every correct kernel. A sum of n
 * products computed in floating point with unit roundoff u is within
 * lambda * sqrt(n) * u * sum |a_j b_j| of the exact sum with probability at
 * least 1 - 2 exp(-lambda^2 / 2) per element, whatever the order of the
 * additions (Higham & Mary, "A new approach to probabilistic rounding error
 * analysis", SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4). lambda = 8 makes
 * that failure probability 2 exp(-32) ~ 2.5e-14 per element: over 1e9
 * output elements a correct kernel fails once in ~40,000 tunings of such a
 * problem, and the worst-case bound (n * u * S) would be sqrt(n) times
 * looser for no gain. The model takes rounding errors as mean-independent
 * with mean zero: true of round-to-nearest; tensor cores that truncate are
 * given one more bit, which covers their bias as long as the partial sums
 * change sign or the reduction is not extremely long (one rounding per
 * 16-product MMA step: a one-signed sum would need over ~250k products
 * per output to exceed it). Both outputs carry such an error (hence u_y + u_r),
 * and both are rounded to the output format at the end: two half-spacings,
 * i.e. one spacing at the larger of the two values. A dropped pair, offset
 * or channel, or a scale error, moves elements by a sizeable fraction of
 * |y| instead, far above both terms (test_tune_guard, test_format_bound). */
double vc_format_spacing(voxconv_dtype_t dtype, double v) {
  int prec, emin; /* significand bits (with the implicit one), min exponent */
  switch (dtype) {
  case VOXCONV_DTYPE_F16:
    prec = 11, emin = -14;
    break;
  case VOXCONV_DTYPE_BF16:
    prec = 8, emin = -126;
    break;
  case VOXCONV_DTYPE_F32:
    prec = 24, emin = -126;
    break;
  default:
    prec = 53, emin = -1022;
    break;
  }
  int e = emin;
  v = fabs(v);
  if (v > 0 && isfinite(v)) {
    int x;
    (void)frexp(v, &x); /* v = m 2^x, m in [0.5, 1): floor(log2 v) = x - 1 */
    if (x - 1 > e)
      e = x - 1;
  }
  return ldexp(1.0, e - (prec - 1));
}

double vc_tune_unit_roundoff_acc(voxconv_dtype_t dtype, int f16_accum) {
  if (dtype == VOXCONV_DTYPE_F64)
    return ldexp(1.0, -53);
  if (f16_accum && (dtype == VOXCONV_DTYPE_F16 || dtype == VOXCONV_DTYPE_BF16))
    return ldexp(1.0, -10);
  return ldexp(1.0, -23);
}

int64_t vc_tune_terms(const vc_conv_problem_t *p) {
  const voxconv_kmap_t *m = p->kmap;
  const int64_t rows = m->n_in < m->n_out ? m->n_in : m->n_out;
  int64_t n;
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
    n = (int64_t)m->kvol * p->cin;
    break;
  case VOXCONV_PASS_CONV_DGRAD:
    n = (int64_t)m->kvol * p->cout;
    break;
  case VOXCONV_PASS_DEPTHWISE_FWD:
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    n = m->kvol;
    break;
  default: /* weight gradients: the pairs of one offset */
    n = rows;
    break;
  }
  return n > 1 ? n : 1;
}

double vc_tune_acc_factor(const vc_conv_problem_t *p, int f16acc) {
  return VC_BOUND_LAMBDA * sqrt((double)vc_tune_terms(p)) *
         (vc_tune_unit_roundoff_acc(p->dtype, f16acc) +
          vc_tune_unit_roundoff_acc(p->dtype, 0));
}

vc_tolerance_t vc_tune_tolerance(voxconv_dtype_t dtype, int f16_accum) {
  vc_tolerance_t t;
  /* The relative limits apply only where S could not be computed (the
   * fallback): loose enough for any correct summation order of that
   * precision on well-scaled data, tight enough that a kernel that drops
   * or repeats pairs fails by orders of magnitude. */
  switch (dtype) {
  case VOXCONV_DTYPE_F64:
    t.max_rel = 1e-9, t.norm_rel = 1e-10;
    break;
  case VOXCONV_DTYPE_F32:
    t.max_rel = 1e-3, t.norm_rel = 1e-4;
    break;
  case VOXCONV_DTYPE_F16:
    t.max_rel = 1e-2, t.norm_rel = 2e-3;
    break;
  default:
    t.max_rel = 5e-2, t.norm_rel = 1e-2;
    break;
  }
  t.norm_gate = 0;
  /* fp16-accumulator tiles are noisy per cell by nature (see
   * BENCHMARKS.md): their norm is gated with the bound as well. */
  if (f16_accum &&
      (dtype == VOXCONV_DTYPE_F16 || dtype == VOXCONV_DTYPE_BF16)) {
    t.max_rel = 1.0, t.norm_rel = 1e-2;
    t.norm_gate = 1;
  }
  t.user_max_rel = INFINITY;
  const char *env = vc_getenv("VOXCONV_AUTOTUNE_MAX_REL");
  if (env) {
    char *end = NULL;
    double v = strtod(env, &end);
    if (end && *end == '\0' && v > 0 && isfinite(v))
      t.user_max_rel = v;
    else
      vc_tune_warn_once("VOXCONV_AUTOTUNE_MAX_REL",
                        "VOXCONV_AUTOTUNE_MAX_REL='%s' is not a positive "
                        "number; ignored",
                        env);
  }
  return t;
}

int vc_check_passes(const vc_check_t *c, const vc_tolerance_t *t) {
  if (c->n_nonfinite > 0)
    return 0;
  if (c->max_ratio < 0) /* no bound: the relative check */
    return c->max_rel <=
               (isfinite(t->user_max_rel) ? t->user_max_rel : t->max_rel) &&
           c->norm_rel <= t->norm_rel;
  return c->max_ratio <= 1.0 && c->max_rel <= t->user_max_rel &&
         (!t->norm_gate || c->norm_rel <= t->norm_rel);
}

double vc_tune_load_elem(const void *p, voxconv_dtype_t dtype, int64_t i) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    return ((const float *)p)[i];
  case VOXCONV_DTYPE_F16:
    return vc_f16_to_f32(((const uint16_t *)p)[i]);
  case VOXCONV_DTYPE_BF16:
    return vc_bf16_to_f32(((const uint16_t *)p)[i]);
  default:
    return ((const double *)p)[i];
  }
}

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf */
static int fp_kind(double v) {
  if (isnan(v))
    return 1;
  if (isinf(v))
    return v > 0 ? 2 : 3;
  return 0;
}

/* Mirrored by vc_check_pass2 in src/cuda/cuda_tune.cu: keep both the same. */
vc_check_t vc_check_host(const void *got, const void *ref,
                         voxconv_dtype_t dtype, int64_t n, const void *s,
                         double acc) {
  vc_check_t c = {0, 0, s ? 0.0 : -1.0, 0};
  double ss_ref = 0;
  int64_t n_finite = 0;
  for (int64_t i = 0; i < n; i++) {
    const double r = vc_tune_load_elem(ref, dtype, i);
    if (isfinite(r)) {
      ss_ref += r * r;
      n_finite++;
    }
  }
  const double floor_abs =
      n_finite ? 0.01 * sqrt(ss_ref / (double)n_finite) : 0.0;
  const voxconv_dtype_t sdt = vc_bound_dtype(dtype);
  double ss_diff = 0;
  for (int64_t i = 0; i < n; i++) {
    const double g = vc_tune_load_elem(got, dtype, i);
    const double r = vc_tune_load_elem(ref, dtype, i);
    const int kg = fp_kind(g), kr = fp_kind(r);
    if (kg != kr) {
      c.n_nonfinite++;
      continue;
    }
    if (kg != 0)
      continue; /* the same NaN/Inf on both sides: propagated alike */
    const double d = fabs(g - r);
    const double denom = fabs(r) + floor_abs;
    const double rel = denom > 0 ? d / denom : (d > 0 ? INFINITY : 0.0);
    if (rel > c.max_rel)
      c.max_rel = rel;
    if (s) {
      /* tol > 0 always (the spacing is); a NaN S (Inf * 0 in the inputs)
       * makes a NaN ratio, which no comparison counts, as on the GPU. */
      const double m = fabs(g) > fabs(r) ? fabs(g) : fabs(r);
      const double tol =
          vc_format_spacing(dtype, m) + acc * vc_tune_load_elem(s, sdt, i);
      const double ratio = d / tol;
      if (ratio > c.max_ratio)
        c.max_ratio = ratio;
    }
    ss_diff += d * d;
  }
  c.norm_rel =
      ss_ref > 0 ? sqrt(ss_diff / ss_ref) : (ss_diff > 0 ? INFINITY : 0.0);
  return c;
}
