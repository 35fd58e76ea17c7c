/* The int8 ops (voxconv.h, "int8 (quantized) sparse convolution"):
 * validation in a fixed order (pointers, options, dtypes and their pairing
 * with the quantisation parameters, backend, sizes, rows against the map,
 * channels, the int32 overflow bound, the parameters' values, data and
 * overlap), then the int8 tuner (src/tune/tune_int8.c), which runs the CPU
 * kernels or picks the CUDA tile (src/cuda/cuda_int8.cu). They never reach
 * the float registry or the float tuner (vc_int8.h says why). */
#include "vc_int8.h"
#include "vc_validate.h"

#include "../tune/vc_tune_int8.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NULL_ARG(ptr, name)                                                    \
  do {                                                                         \
    if ((ptr) == NULL)                                                         \
      return vc_fail(h, VOXCONV_STATUS_NULL_POINTER, "%s: %s is NULL", fn,     \
                     (name));                                                  \
  } while (0)

static int dtype_known(voxconv_dtype_t d) {
  return d == VOXCONV_DTYPE_F32 || d == VOXCONV_DTYPE_F16 ||
         d == VOXCONV_DTYPE_BF16 || d == VOXCONV_DTYPE_F64 ||
         d == VOXCONV_DTYPE_I8 || d == VOXCONV_DTYPE_I32;
}

static int y_dtype_ok(voxconv_dtype_t d) {
  return d == VOXCONV_DTYPE_I8 || d == VOXCONV_DTYPE_F32 ||
         d == VOXCONV_DTYPE_F16 || d == VOXCONV_DTYPE_BF16 ||
         d == VOXCONV_DTYPE_I32;
}

static int scale_ok(float s) {
  return isfinite(s) && s > 0.0f;
}

/* Blank, NULL or "auto" (case-insensitive, blanks around it ignored). */
static int algo_is_auto(const char *s) {
  if (!s)
    return 1;
  while (*s == ' ' || *s == '\t')
    s++;
  if (!*s)
    return 1;
  const char *a = "auto";
  for (int i = 0; i < 4; i++, s++)
    if (!*s || (*s | 0x20) != a[i])
      return 0;
  while (*s == ' ' || *s == '\t')
    s++;
  return *s == 0;
}

static voxconv_status_t check_opt(voxconv_handle_t *h, const char *fn,
                                  const voxconv_conv_options_t *opt) {
  if (!opt)
    return VOXCONV_STATUS_SUCCESS;
  VC_CHECK(vc_check_conv_options(h, fn, opt));
  if (!algo_is_auto(opt->fwd_algo))
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: opt->fwd_algo=\"%s\": int8 algorithms are not in the "
                   "registry yet (pass NULL or \"auto\")",
                   fn, opt->fwd_algo);
  return VOXCONV_STATUS_SUCCESS;
}

/* The dtypes of x, w, y and their pairing with qp (y_scale, I32). */
static voxconv_status_t check_dtypes(voxconv_handle_t *h, const char *fn,
                                     voxconv_dtype_t xd, voxconv_dtype_t wd,
                                     voxconv_dtype_t yd,
                                     const voxconv_quant_params_t *qp) {
  const struct {
    const char *name;
    voxconv_dtype_t d;
  } a[3] = {{"x", xd}, {"w", wd}, {"y", yd}};
  for (int i = 0; i < 3; i++)
    if (!dtype_known(a[i].d))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: %s->dtype=%d is not a voxconv_dtype_t (F32=0, "
                     "F16=1, BF16=2, F64=3, I8=4, I32=5)",
                     fn, a[i].name, (int)a[i].d);
  for (int i = 0; i < 2; i++)
    if (a[i].d != VOXCONV_DTYPE_I8)
      return vc_fail(h, VOXCONV_STATUS_DTYPE_MISMATCH,
                     "%s: %s is %s; the int8 ops take i8 features and "
                     "weights (quantise them first)",
                     fn, a[i].name, voxconv_dtype_name(a[i].d));
  if (!y_dtype_ok(yd))
    return vc_fail(h, VOXCONV_STATUS_DTYPE_MISMATCH,
                   "%s: y is %s; int8 ops write i8, f32, f16, bf16 or i32", fn,
                   voxconv_dtype_name(yd));
  if (yd == VOXCONV_DTYPE_I32) {
    if (qp)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: y is i32, the raw accumulators: no epilogue "
                     "applies, so qp must be NULL",
                     fn);
    return VOXCONV_STATUS_SUCCESS;
  }
  NULL_ARG(qp, "qp");
  if (yd == VOXCONV_DTYPE_I8 && qp->y_scale == 0.0f)
    return vc_fail(h, VOXCONV_STATUS_DTYPE_MISMATCH,
                   "%s: y is i8 but qp->y_scale is 0 (unset); an int8 output "
                   "needs its scale",
                   fn);
  if (yd != VOXCONV_DTYPE_I8 && qp->y_scale != 0.0f)
    return vc_fail(h, VOXCONV_STATUS_DTYPE_MISMATCH,
                   "%s: qp->y_scale=%g is set but y is %s (only an i8 output "
                   "is requantised; leave y_scale 0)",
                   fn, (double)qp->y_scale, voxconv_dtype_name(yd));
  return VOXCONV_STATUS_SUCCESS;
}

/* Scalars of qp (host values on every backend). */
static voxconv_status_t check_qp_scalars(voxconv_handle_t *h, const char *fn,
                                         const voxconv_quant_params_t *qp,
                                         voxconv_dtype_t yd) {
  if (!scale_ok(qp->x_scale))
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: qp->x_scale=%g must be finite and > 0", fn,
                   (double)qp->x_scale);
  if (yd == VOXCONV_DTYPE_I8 && !scale_ok(qp->y_scale))
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: qp->y_scale=%g must be finite and > 0", fn,
                   (double)qp->y_scale);
  if (qp->relu != 0 && qp->relu != 1)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: qp->relu=%d must be 0 or 1", fn, (int)qp->relu);
  NULL_ARG(qp->w_scale, "qp->w_scale");
  if (qp->w_layout != VOXCONV_INT8_WEIGHTS_KIO &&
      qp->w_layout != VOXCONV_INT8_WEIGHTS_KOI)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: qp->w_layout=%d is not a voxconv_int8_weights_layout_t "
                   "(KIO=0: [kvol][cin][cout], KOI=1: [kvol][cout][cin])",
                   fn, (int)qp->w_layout);
  return VOXCONV_STATUS_SUCCESS;
}

/* The arrays of qp, in host memory. */
static voxconv_status_t check_qp_arrays(voxconv_handle_t *h, const char *fn,
                                        const voxconv_quant_params_t *qp,
                                        const float *w_scale, const float *bias,
                                        int64_t channels) {
  for (int64_t c = 0; c < channels; c++) {
    if (!scale_ok(w_scale[c]))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: qp->w_scale[%lld]=%g must be finite and > 0", fn,
                     (long long)c, (double)w_scale[c]);
    const float m = qp->x_scale * w_scale[c];
    if (!isfinite(m))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: qp->x_scale * qp->w_scale[%lld] = %g * %g overflows "
                     "fp32",
                     fn, (long long)c, (double)qp->x_scale,
                     (double)w_scale[c]);
    if (bias && !isfinite(bias[c]))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: qp->bias[%lld]=%g is not finite", fn, (long long)c,
                     (double)bias[c]);
  }
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t check_backend(voxconv_handle_t *h, const char *fn,
                                      const voxconv_kmap_t *kmap) {
#ifndef VOXCONV_HAVE_CUDA
  if (h->backend != VOXCONV_BACKEND_CPU)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: this library was built without CUDA", fn);
#endif
  return vc_check_kmap_usable(h, fn, kmap);
}

static voxconv_status_t check_feats(voxconv_handle_t *h, const char *fn,
                                    const char *name, const voxconv_feats_t *f,
                                    int64_t want_rows, const char *side) {
  if (f->channels <= 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: %s->channels=%lld must be > 0", fn, name,
                   (long long)f->channels);
  if (f->rows < 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: %s->rows=%lld is negative", fn, name,
                   (long long)f->rows);
  if (want_rows >= 0 && f->rows != want_rows)
    return vc_fail(h, VOXCONV_STATUS_KMAP_MISMATCH,
                   "%s: kmap was built for %lld %s rows, %s has %lld", fn,
                   (long long)want_rows, side, name, (long long)f->rows);
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t check_channels(voxconv_handle_t *h, const char *fn,
                                       const char *a, int64_t va, const char *b,
                                       int64_t vb) {
  if (va != vb)
    return vc_fail(h, VOXCONV_STATUS_SHAPE_MISMATCH, "%s: %s=%lld but %s=%lld",
                   fn, a, (long long)va, b, (long long)vb);
  return VOXCONV_STATUS_SUCCESS;
}

typedef struct span {
  const char *name;
  const void *p;
  uint64_t bytes;
} span_t;

/* Byte sizes fit, data present unless empty, the output overlaps nothing. */
static voxconv_status_t check_spans(voxconv_handle_t *h, const char *fn,
                                    const char *const names[3],
                                    const void *const data[3],
                                    const int64_t elems[3][2],
                                    const size_t esz[3]) {
  span_t s[3];
  for (int i = 0; i < 3; i++) {
    uint64_t n, bytes;
    if (__builtin_mul_overflow((uint64_t)elems[i][0], (uint64_t)elems[i][1],
                               &n) ||
        __builtin_mul_overflow(n, (uint64_t)esz[i], &bytes) ||
        bytes > (uint64_t)INT64_MAX || bytes > (uint64_t)SIZE_MAX)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: %s is too large (%lld x %lld elements overflow the "
                     "address space)",
                     fn, names[i], (long long)elems[i][0],
                     (long long)elems[i][1]);
    if (bytes && !data[i])
      return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                     "%s: %s->data is NULL but %s has %llu elements", fn,
                     names[i], names[i], (unsigned long long)n);
    s[i].name = names[i];
    s[i].p = data[i];
    s[i].bytes = bytes;
  }
  const uintptr_t o0 = (uintptr_t)s[2].p, o1 = o0 + (uintptr_t)s[2].bytes;
  for (int i = 0; i < 2 && s[2].bytes; i++) {
    const uintptr_t i0 = (uintptr_t)s[i].p, i1 = i0 + (uintptr_t)s[i].bytes;
    if (s[i].bytes && o0 < i1 && i0 < o1)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: output y overlaps input %s (in-place operation is "
                     "not supported)",
                     fn, s[i].name);
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* Shared by both ops: w_dtype/w_data/kvol/cin/cout describe the weights
 * whatever their struct. */
static voxconv_status_t int8_op(voxconv_handle_t *h, const char *fn,
                                int depthwise, const voxconv_kmap_t *kmap,
                                const voxconv_feats_t *x, const void *wstruct,
                                const voxconv_quant_params_t *qp,
                                const voxconv_feats_t *y,
                                const voxconv_conv_options_t *opt) {
  VC_CHECK(vc_op_begin(h, fn));
  NULL_ARG(kmap, "kmap");
  NULL_ARG(x, "x");
  NULL_ARG(wstruct, "w");
  NULL_ARG(y, "y");
  VC_CHECK(check_opt(h, fn, opt));
  const voxconv_weights_t *wr = (const voxconv_weights_t *)wstruct;
  const voxconv_feats_t *wd = (const voxconv_feats_t *)wstruct;
  const voxconv_dtype_t w_dtype = depthwise ? wd->dtype : wr->dtype;
  const void *w_data = depthwise ? wd->data : wr->data;
  VC_CHECK(check_dtypes(h, fn, x->dtype, w_dtype, y->dtype, qp));
  if (qp)
    VC_CHECK(check_qp_scalars(h, fn, qp, y->dtype));
  if (depthwise && qp && qp->w_layout != VOXCONV_INT8_WEIGHTS_KIO)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: qp->w_layout=%d (KOI): depthwise weights [kvol][C] "
                   "have one layout, KIO (0)",
                   fn, (int)qp->w_layout);
  VC_CHECK(check_backend(h, fn, kmap));
  VC_CHECK(check_feats(h, fn, "x", x, kmap->n_in, "input"));
  VC_CHECK(check_feats(h, fn, "y", y, kmap->n_out, "output"));
  int64_t kvol, cin, cout;
  if (depthwise) {
    VC_CHECK(check_feats(h, fn, "w", wd, -1, NULL));
    kvol = wd->rows;
    cin = cout = wd->channels;
    VC_CHECK(check_channels(h, fn, "w->rows", kvol, "the kmap's kernel volume",
                            kmap->kvol));
  } else {
    if (wr->cin <= 0 || wr->cout <= 0)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: w has cin=%lld, cout=%lld; both must be > 0", fn,
                     (long long)wr->cin, (long long)wr->cout);
    kvol = wr->kvol;
    cin = wr->cin;
    cout = wr->cout;
    VC_CHECK(check_channels(h, fn, "w->kvol", kvol, "the kmap's kernel volume",
                            kmap->kvol));
  }
  VC_CHECK(check_channels(h, fn, "x->channels", x->channels,
                          depthwise ? "w->channels" : "w->cin", cin));
  VC_CHECK(check_channels(h, fn, "y->channels", y->channels,
                          depthwise ? "w->channels" : "w->cout", cout));
  if (!depthwise && kvol * cin > VC_INT8_MAX_KVOL_CIN)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: kvol * cin = %lld * %lld = %lld exceeds %d: an int32 "
                   "accumulator could overflow (|qx|, |qw| <= 128)",
                   fn, (long long)kvol, (long long)cin,
                   (long long)(kvol * cin), VC_INT8_MAX_KVOL_CIN);
  /* Device arrays cannot be read without waiting: on CUDA they are
   * checked once by voxconv_quant_params_check (voxconv.h). */
  if (qp && h->backend == VOXCONV_BACKEND_CPU)
    VC_CHECK(check_qp_arrays(h, fn, qp, qp->w_scale, qp->bias, cout));
  {
    const char *const names[3] = {"x", "w", "y"};
    const void *const data[3] = {x->data, w_data, y->data};
    const int64_t elems[3][2] = {{x->rows, x->channels},
                                 {kvol, depthwise ? cout : cin * cout},
                                 {y->rows, y->channels}};
    const size_t esz[3] = {1, 1, voxconv_dtype_size(y->dtype)};
    VC_CHECK(check_spans(h, fn, names, data, elems, esz));
  }
  if (y->rows == 0)
    return VOXCONV_STATUS_SUCCESS;

  vc_int8_problem_t p;
  memset(&p, 0, sizeof p);
  p.depthwise = depthwise;
  p.kmap = kmap;
  p.cin = cin;
  p.cout = cout;
  p.x = (const int8_t *)x->data;
  p.w = (const int8_t *)w_data;
  p.y = y->data;
  p.y_dtype = y->dtype;
  if (qp) {
    p.x_scale = qp->x_scale;
    p.y_scale = qp->y_scale;
    p.w_scale = qp->w_scale;
    p.bias = qp->bias;
    p.relu = qp->relu;
    p.w_koi = qp->w_layout == VOXCONV_INT8_WEIGHTS_KOI;
  }
  return vc_tune_int8(h, &p);
}

voxconv_status_t voxconv_conv_forward_int8(voxconv_handle_t *h,
                                           const voxconv_kmap_t *kmap,
                                           const voxconv_feats_t *x,
                                           const voxconv_weights_t *w,
                                           const voxconv_quant_params_t *qp,
                                           const voxconv_feats_t *y,
                                           const voxconv_conv_options_t *opt) {
  return int8_op(h, "voxconv_conv_forward_int8", 0, kmap, x, w, qp, y, opt);
}

voxconv_status_t voxconv_depthwise_forward_int8(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_feats_t *w, const voxconv_quant_params_t *qp,
    const voxconv_feats_t *y, const voxconv_conv_options_t *opt) {
  return int8_op(h, "voxconv_depthwise_forward_int8", 1, kmap, x, w, qp, y,
                 opt);
}

voxconv_status_t voxconv_quant_params_check(voxconv_handle_t *h,
                                            const voxconv_quant_params_t *qp,
                                            int64_t channels,
                                            voxconv_dtype_t y_dtype) {
  const char *fn = "voxconv_quant_params_check";
  VC_CHECK(vc_op_begin(h, fn));
  if (channels <= 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: channels=%lld must be > 0", fn, (long long)channels);
  VC_CHECK(check_dtypes(h, fn, VOXCONV_DTYPE_I8, VOXCONV_DTYPE_I8, y_dtype,
                        qp));
  if (!qp)
    return VOXCONV_STATUS_SUCCESS; /* I32 output: nothing to check */
  VC_CHECK(check_qp_scalars(h, fn, qp, y_dtype));
  if (h->backend == VOXCONV_BACKEND_CPU)
    return check_qp_arrays(h, fn, qp, qp->w_scale, qp->bias, channels);
  /* Device arrays: copy them to the host (the copy waits). */
  const size_t bytes = (size_t)channels * sizeof(float);
  void *host = NULL;
  VC_CHECK(vc_host_alloc(h, 2 * bytes, &host, "quantisation parameters"));
  float *ws = (float *)host, *bs = ws + channels;
  voxconv_status_t st = voxconv_memcpy(h, ws, qp->w_scale, bytes,
                                       VOXCONV_MEMCPY_BACKEND_TO_HOST);
  if (st == VOXCONV_STATUS_SUCCESS && qp->bias)
    st = voxconv_memcpy(h, bs, qp->bias, bytes,
                        VOXCONV_MEMCPY_BACKEND_TO_HOST);
  if (st == VOXCONV_STATUS_SUCCESS)
    st = check_qp_arrays(h, fn, qp, ws, qp->bias ? bs : NULL, channels);
  free(host);
  return st;
}
