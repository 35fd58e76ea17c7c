/* Validation of the public ops' arguments (see vc_validate.h). The checks
 * run in a fixed order so that a call with several problems always reports
 * the same one: missing pointers, options, dtypes, backend, sign of the
 * sizes, rows against the kernel map, channel shapes, byte sizes, data
 * pointers, and finally outputs overlapping inputs. */
#include "vc_validate.h"

#include <math.h>
#include <stdint.h>

/* A tensor argument seen generically: its name in messages, dtype, data
 * and element count (rows * channels, or kvol * cin * cout). */
typedef struct vc_arg {
  const char *name;
  voxconv_dtype_t dtype;
  const void *data;
  int64_t dims[3]; /* unused trailing dims are 1 */
  int ndims;
} vc_arg_t;

static vc_arg_t arg_feats(const char *name, const voxconv_feats_t *f) {
  vc_arg_t a = {name, f->dtype, f->data, {f->rows, f->channels, 1}, 2};
  return a;
}

static vc_arg_t arg_weights(const char *name, const voxconv_weights_t *w) {
  vc_arg_t a = {name, w->dtype, w->data, {w->kvol, w->cin, w->cout}, 3};
  return a;
}

/* vc_resolve_fp16_accum is defined by the tuner (src/tune/accum.c), the
 * single place that applies the full precedence of voxconv.h. */

int vc_resolve_deterministic(const voxconv_handle_t *h,
                             const voxconv_conv_options_t *opt) {
  if (opt && opt->deterministic == VOXCONV_TRUE)
    return 1;
  if (opt && opt->deterministic == VOXCONV_FALSE)
    return 0;
  return h->deterministic ? 1 : 0;
}

voxconv_status_t vc_op_begin(voxconv_handle_t *h, const char *fn) {
  if (!h)
    return vc_fail(NULL, VOXCONV_STATUS_NULL_POINTER, "%s: handle is NULL", fn);
  vc_clear_error(h);
  return VOXCONV_STATUS_SUCCESS;
}

int64_t vc_feats_elems(const voxconv_feats_t *f) {
  if (!f || f->rows <= 0 || f->channels <= 0)
    return 0;
  return f->rows * f->channels;
}

static int tristate_valid(voxconv_tristate_t t) {
  return t == VOXCONV_UNSET || t == VOXCONV_FALSE || t == VOXCONV_TRUE;
}

voxconv_status_t vc_check_conv_options(voxconv_handle_t *h, const char *fn,
                                       const voxconv_conv_options_t *opt) {
  if (!opt)
    return VOXCONV_STATUS_SUCCESS;
  if (!tristate_valid(opt->fp16_accum))
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: opt->fp16_accum=%d is not VOXCONV_UNSET(0), "
                   "VOXCONV_FALSE(1) or VOXCONV_TRUE(2)",
                   fn, (int)opt->fp16_accum);
  if (!tristate_valid(opt->deterministic))
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: opt->deterministic=%d is not VOXCONV_UNSET(0), "
                   "VOXCONV_FALSE(1) or VOXCONV_TRUE(2)",
                   fn, (int)opt->deterministic);
  return VOXCONV_STATUS_SUCCESS;
}

/* dtype validity, equality between all tensors of the op, f64 only on CPU,
 * and the map's backend against the handle's. */
static voxconv_status_t check_dtypes_backend(voxconv_handle_t *h,
                                             const char *fn,
                                             const voxconv_kmap_t *kmap,
                                             const vc_arg_t *args, int n) {
  /* Integer dtypes are valid, but only the int8 ops take them: say so
   * rather than calling them invalid (and never reinterpret the bytes). */
  for (int i = 0; i < n; i++)
    if (args[i].dtype == VOXCONV_DTYPE_I8 ||
        args[i].dtype == VOXCONV_DTYPE_I32)
      return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                     "%s: %s is %s; this op takes f32, f16, bf16 or f64 "
                     "(int8 convolution is voxconv_conv_forward_int8 / "
                     "voxconv_depthwise_forward_int8)",
                     fn, args[i].name, voxconv_dtype_name(args[i].dtype));
  for (int i = 0; i < n; i++)
    if (!vc_dtype_valid(args[i].dtype))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: %s->dtype=%d is not a voxconv_dtype_t (F32=0, "
                     "F16=1, BF16=2, F64=3)",
                     fn, args[i].name, (int)args[i].dtype);
  for (int i = 1; i < n; i++)
    if (args[i].dtype != args[0].dtype)
      return vc_fail(h, VOXCONV_STATUS_DTYPE_MISMATCH,
                     "%s: %s is %s but %s is %s (x, W and y of one op share "
                     "a dtype)",
                     fn, args[0].name, voxconv_dtype_name(args[0].dtype),
                     args[i].name, voxconv_dtype_name(args[i].dtype));
  if (args[0].dtype == VOXCONV_DTYPE_F64 && h->backend != VOXCONV_BACKEND_CPU)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: f64 is the CPU reference path; the %s backend runs "
                   "f32, f16 and bf16",
                   fn, vc_backend_name(h->backend));
  return vc_check_kmap_usable(h, fn, kmap);
}

voxconv_status_t vc_check_kmap_usable(voxconv_handle_t *h, const char *fn,
                                      const voxconv_kmap_t *kmap) {
  /* (the allocator too: ops add buffers to the map, mask_gemm's row
   * orders, that its destroyer frees) */
  VC_CHECK(vc_kmap_check_handle(h, fn, kmap));
  /* A deferred STRIDED map (voxconv_kmap_build_async) whose output count
   * has not reached the host yet: the row checks and the launch need it,
   * so wait for the build (once per map; voxconv.h). Otherwise an
   * asynchronous build's verdict, if the GPU has delivered it: a map whose
   * coordinates were bad fails every op from then on (never waits). */
  if (kmap->n_out < 0)
    return vc_kmap_wait(h, kmap, fn);
  return vc_kmap_poll(h, kmap, fn);
}

static voxconv_status_t check_feats_sizes(voxconv_handle_t *h, const char *fn,
                                          const char *name,
                                          const voxconv_feats_t *f) {
  if (f->channels <= 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: %s->channels=%lld must be > 0", fn, name,
                   (long long)f->channels);
  if (f->rows < 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: %s->rows=%lld is negative", fn, name,
                   (long long)f->rows);
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t check_weights_sizes(voxconv_handle_t *h, const char *fn,
                                            const char *name,
                                            const voxconv_weights_t *w) {
  if (w->cin <= 0 || w->cout <= 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: %s has cin=%lld, cout=%lld; both must be > 0", fn, name,
                   (long long)w->cin, (long long)w->cout);
  return VOXCONV_STATUS_SUCCESS;
}

/* Rows of a feature tensor against the map's row count. */
static voxconv_status_t check_rows(voxconv_handle_t *h, const char *fn,
                                   const char *name, const voxconv_feats_t *f,
                                   int64_t want, const char *side) {
  if (f->rows != want)
    return vc_fail(h, VOXCONV_STATUS_KMAP_MISMATCH,
                   "%s: kmap was built for %lld %s rows, %s has %lld", fn,
                   (long long)want, side, name, (long long)f->rows);
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t check_channels(voxconv_handle_t *h, const char *fn,
                                       const char *name_a, const char *what_a,
                                       int64_t a, const char *name_b,
                                       const char *what_b, int64_t b) {
  if (a != b)
    return vc_fail(h, VOXCONV_STATUS_SHAPE_MISMATCH,
                   "%s: %s has %s=%lld but %s has %s=%lld", fn, name_a, what_a,
                   (long long)a, name_b, what_b, (long long)b);
  return VOXCONV_STATUS_SUCCESS;
}

/* Byte size of every tensor fits size_t (and int64 element counts), and
 * data is present unless the tensor is empty. */
static voxconv_status_t check_data(voxconv_handle_t *h, const char *fn,
                                   const vc_arg_t *args, int n) {
  for (int i = 0; i < n; i++) {
    const vc_arg_t *a = &args[i];
    uint64_t elems = 1;
    int empty = 0;
    for (int d = 0; d < a->ndims; d++) {
      if (a->dims[d] == 0)
        empty = 1;
      if (__builtin_mul_overflow(elems, (uint64_t)a->dims[d], &elems))
        elems = UINT64_MAX;
    }
    if (!empty) {
      uint64_t bytes;
      if (elems > (uint64_t)INT64_MAX ||
          __builtin_mul_overflow(elems, (uint64_t)voxconv_dtype_size(a->dtype),
                                 &bytes) ||
          bytes > (uint64_t)SIZE_MAX || bytes > (uint64_t)INT64_MAX)
        return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                       "%s: %s is too large (%lld x %lld x %lld elements of "
                       "%s overflow the address space)",
                       fn, a->name, (long long)a->dims[0],
                       (long long)a->dims[1], (long long)a->dims[2],
                       voxconv_dtype_name(a->dtype));
      if (a->data == NULL)
        return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                       "%s: %s->data is NULL but %s has %llu elements", fn,
                       a->name, a->name, (unsigned long long)elems);
    }
  }
  return VOXCONV_STATUS_SUCCESS;
}

static uint64_t arg_bytes(const vc_arg_t *a) {
  uint64_t e = voxconv_dtype_size(a->dtype);
  for (int d = 0; d < a->ndims; d++)
    e *= (uint64_t)a->dims[d];
  return e; /* sizes were checked by check_data */
}

/* Outputs are written while inputs are read, so an output overlapping an
 * input would give results that depend on the algorithm's order. */
static voxconv_status_t check_overlap(voxconv_handle_t *h, const char *fn,
                                      const vc_arg_t *out, const vc_arg_t *ins,
                                      int n_in) {
  uint64_t ob = arg_bytes(out);
  if (ob == 0 || !out->data)
    return VOXCONV_STATUS_SUCCESS;
  uintptr_t o0 = (uintptr_t)out->data, o1 = o0 + (uintptr_t)ob;
  for (int i = 0; i < n_in; i++) {
    uint64_t ib = arg_bytes(&ins[i]);
    if (ib == 0 || !ins[i].data)
      continue;
    uintptr_t i0 = (uintptr_t)ins[i].data, i1 = i0 + (uintptr_t)ib;
    if (o0 < i1 && i0 < o1)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: output %s overlaps input %s (in-place operation "
                     "is not supported)",
                     fn, out->name, ins[i].name);
  }
  return VOXCONV_STATUS_SUCCESS;
}

static void fill_problem(vc_conv_problem_t *p, voxconv_handle_t *h,
                         voxconv_pass_t pass, const voxconv_kmap_t *kmap,
                         voxconv_dtype_t dtype, int64_t cin, int64_t cout,
                         const void *a, const void *b, void *c,
                         const voxconv_conv_options_t *opt) {
  *p = vc_conv_problem_make(pass, kmap, dtype, cin, cout, a, b, c);
  p->fp16_accum = vc_resolve_fp16_accum(opt, dtype, pass);
  p->deterministic = vc_resolve_deterministic(h, opt);
}

#define NULL_ARG(ptr, name)                                                    \
  do {                                                                         \
    if ((ptr) == NULL)                                                         \
      return vc_fail(h, VOXCONV_STATUS_NULL_POINTER, "%s: %s is NULL", fn,     \
                     (name));                                                  \
  } while (0)

/* ---- regular convolution ---------------------------------------------- */
voxconv_status_t vc_validate_conv_forward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_weights_t *w, const voxconv_feats_t *y,
    const voxconv_conv_options_t *opt, vc_conv_problem_t *p) {
  const char *fn = "voxconv_conv_forward";
  NULL_ARG(kmap, "kmap");
  NULL_ARG(x, "x");
  NULL_ARG(w, "w");
  NULL_ARG(y, "y");
  VC_CHECK(vc_check_conv_options(h, fn, opt));
  const vc_arg_t args[3] = {arg_feats("x", x), arg_weights("w", w),
                            arg_feats("y", y)};
  VC_CHECK(check_dtypes_backend(h, fn, kmap, args, 3));
  VC_CHECK(check_feats_sizes(h, fn, "x", x));
  VC_CHECK(check_weights_sizes(h, fn, "w", w));
  VC_CHECK(check_feats_sizes(h, fn, "y", y));
  VC_CHECK(check_rows(h, fn, "x", x, kmap->n_in, "input"));
  VC_CHECK(check_rows(h, fn, "y", y, kmap->n_out, "output"));
  VC_CHECK(check_channels(h, fn, "w", "kvol", w->kvol, "kmap", "kernel volume",
                          kmap->kvol));
  VC_CHECK(
      check_channels(h, fn, "x", "channels", x->channels, "w", "cin", w->cin));
  VC_CHECK(check_channels(h, fn, "y", "channels", y->channels, "w", "cout",
                          w->cout));
  VC_CHECK(check_data(h, fn, args, 3));
  VC_CHECK(check_overlap(h, fn, &args[2], args, 2));
  fill_problem(p, h, VOXCONV_PASS_CONV_FWD, kmap, x->dtype, w->cin, w->cout,
               x->data, w->data, y->data, opt);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_validate_conv_dgrad(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *dy,
    const voxconv_weights_t *w, const voxconv_feats_t *dx,
    const voxconv_conv_options_t *opt, vc_conv_problem_t *p) {
  const char *fn = "voxconv_conv_dgrad";
  NULL_ARG(kmap, "kmap");
  NULL_ARG(dy, "dy");
  NULL_ARG(w, "w");
  NULL_ARG(dx, "dx");
  VC_CHECK(vc_check_conv_options(h, fn, opt));
  const vc_arg_t args[3] = {arg_feats("dy", dy), arg_weights("w", w),
                            arg_feats("dx", dx)};
  VC_CHECK(check_dtypes_backend(h, fn, kmap, args, 3));
  VC_CHECK(check_feats_sizes(h, fn, "dy", dy));
  VC_CHECK(check_weights_sizes(h, fn, "w", w));
  VC_CHECK(check_feats_sizes(h, fn, "dx", dx));
  VC_CHECK(check_rows(h, fn, "dy", dy, kmap->n_out, "output"));
  VC_CHECK(check_rows(h, fn, "dx", dx, kmap->n_in, "input"));
  VC_CHECK(check_channels(h, fn, "w", "kvol", w->kvol, "kmap", "kernel volume",
                          kmap->kvol));
  VC_CHECK(check_channels(h, fn, "dy", "channels", dy->channels, "w", "cout",
                          w->cout));
  VC_CHECK(check_channels(h, fn, "dx", "channels", dx->channels, "w", "cin",
                          w->cin));
  VC_CHECK(check_data(h, fn, args, 3));
  VC_CHECK(check_overlap(h, fn, &args[2], args, 2));
  fill_problem(p, h, VOXCONV_PASS_CONV_DGRAD, kmap, dy->dtype, w->cin, w->cout,
               dy->data, w->data, dx->data, opt);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_validate_conv_wgrad(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_feats_t *dy, const voxconv_weights_t *dw,
    const voxconv_conv_options_t *opt, vc_conv_problem_t *p) {
  const char *fn = "voxconv_conv_wgrad";
  NULL_ARG(kmap, "kmap");
  NULL_ARG(x, "x");
  NULL_ARG(dy, "dy");
  NULL_ARG(dw, "dw");
  VC_CHECK(vc_check_conv_options(h, fn, opt));
  const vc_arg_t args[3] = {arg_feats("x", x), arg_feats("dy", dy),
                            arg_weights("dw", dw)};
  VC_CHECK(check_dtypes_backend(h, fn, kmap, args, 3));
  VC_CHECK(check_feats_sizes(h, fn, "x", x));
  VC_CHECK(check_feats_sizes(h, fn, "dy", dy));
  VC_CHECK(check_weights_sizes(h, fn, "dw", dw));
  VC_CHECK(check_rows(h, fn, "x", x, kmap->n_in, "input"));
  VC_CHECK(check_rows(h, fn, "dy", dy, kmap->n_out, "output"));
  VC_CHECK(check_channels(h, fn, "dw", "kvol", dw->kvol, "kmap",
                          "kernel volume", kmap->kvol));
  VC_CHECK(check_channels(h, fn, "x", "channels", x->channels, "dw", "cin",
                          dw->cin));
  VC_CHECK(check_channels(h, fn, "dy", "channels", dy->channels, "dw", "cout",
                          dw->cout));
  VC_CHECK(check_data(h, fn, args, 3));
  VC_CHECK(check_overlap(h, fn, &args[2], args, 2));
  fill_problem(p, h, VOXCONV_PASS_CONV_WGRAD, kmap, x->dtype, dw->cin, dw->cout,
               x->data, dy->data, dw->data, opt);
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- depthwise convolution -------------------------------------------- */
voxconv_status_t
vc_validate_depthwise(voxconv_handle_t *h, voxconv_pass_t pass,
                      const voxconv_kmap_t *kmap, const voxconv_feats_t *a,
                      const voxconv_feats_t *b, const voxconv_feats_t *c,
                      const voxconv_conv_options_t *opt, vc_conv_problem_t *p) {
  /* Roles per pass (vc_algo.h): FWD a=x b=w c=y; DGRAD a=dy b=w c=dx;
   * WGRAD a=x b=dy c=dw. */
  const char *fn, *na, *nb, *nc;
  const voxconv_feats_t *w, *in_rows_t, *out_rows_t;
  const char *n_w, *n_in_t, *n_out_t;
  switch (pass) {
  case VOXCONV_PASS_DEPTHWISE_FWD:
    fn = "voxconv_depthwise_forward";
    na = "x", nb = "w", nc = "y";
    w = b, in_rows_t = a, out_rows_t = c;
    n_w = nb, n_in_t = na, n_out_t = nc;
    break;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    fn = "voxconv_depthwise_dgrad";
    na = "dy", nb = "w", nc = "dx";
    w = b, in_rows_t = c, out_rows_t = a;
    n_w = nb, n_in_t = nc, n_out_t = na;
    break;
  case VOXCONV_PASS_DEPTHWISE_WGRAD:
    fn = "voxconv_depthwise_wgrad";
    na = "x", nb = "dy", nc = "dw";
    w = c, in_rows_t = a, out_rows_t = b;
    n_w = nc, n_in_t = na, n_out_t = nb;
    break;
  default:
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "vc_validate_depthwise: pass %d is not a depthwise pass",
                   (int)pass);
  }
  NULL_ARG(kmap, "kmap");
  NULL_ARG(a, na);
  NULL_ARG(b, nb);
  NULL_ARG(c, nc);
  VC_CHECK(vc_check_conv_options(h, fn, opt));
  const vc_arg_t args[3] = {arg_feats(na, a), arg_feats(nb, b),
                            arg_feats(nc, c)};
  VC_CHECK(check_dtypes_backend(h, fn, kmap, args, 3));
  VC_CHECK(check_feats_sizes(h, fn, na, a));
  VC_CHECK(check_feats_sizes(h, fn, nb, b));
  VC_CHECK(check_feats_sizes(h, fn, nc, c));
  VC_CHECK(check_rows(h, fn, n_in_t, in_rows_t, kmap->n_in, "input"));
  VC_CHECK(check_rows(h, fn, n_out_t, out_rows_t, kmap->n_out, "output"));
  if (w->rows != kmap->kvol)
    return vc_fail(h, VOXCONV_STATUS_SHAPE_MISMATCH,
                   "%s: %s has rows=%lld but the kmap's kernel volume is %d "
                   "(depthwise weights are [kvol][C])",
                   fn, n_w, (long long)w->rows, (int)kmap->kvol);
  VC_CHECK(check_channels(h, fn, n_in_t, "channels", in_rows_t->channels, n_w,
                          "channels", w->channels));
  VC_CHECK(check_channels(h, fn, n_out_t, "channels", out_rows_t->channels, n_w,
                          "channels", w->channels));
  VC_CHECK(check_data(h, fn, args, 3));
  VC_CHECK(check_overlap(h, fn, &args[2], args, 2));
  fill_problem(p, h, pass, kmap, a->dtype, w->channels, w->channels, a->data,
               b->data, c->data, opt);
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- pooling ------------------------------------------------------------ */
static voxconv_status_t check_pool_mode(voxconv_handle_t *h, const char *fn,
                                        voxconv_pool_mode_t mode) {
  if (mode != VOXCONV_POOL_MAX && mode != VOXCONV_POOL_AVG &&
      mode != VOXCONV_POOL_SUM)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: mode=%d is not VOXCONV_POOL_MAX(0), AVG(1) or SUM(2)",
                   fn, (int)mode);
  return VOXCONV_STATUS_SUCCESS;
}

/* int8 features pool with MAX only: the maximum of int8 values is one of
 * them, exact and scale-free (it commutes with dequantisation by a
 * positive scale), while an average or a sum would need a rounding rule
 * and a scale. x and y are then both I8. */
static voxconv_status_t check_i8_pool(voxconv_handle_t *h, const char *fn,
                                      const voxconv_kmap_t *kmap,
                                      voxconv_pool_mode_t mode,
                                      const vc_arg_t args[2]) {
  if (mode != VOXCONV_POOL_MAX)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: int8 features pool with VOXCONV_POOL_MAX only (the "
                   "maximum of int8 values is exact; an average or a sum "
                   "needs a rounding rule and a scale)",
                   fn);
  for (int i = 0; i < 2; i++)
    if (args[i].dtype != VOXCONV_DTYPE_I8)
      return vc_fail(h, VOXCONV_STATUS_DTYPE_MISMATCH,
                     "%s: %s is %s but %s is i8 (int8 max pooling takes and "
                     "writes i8)",
                     fn, args[i].name, vc_dtype_valid(args[i].dtype) ||
                                               args[i].dtype == VOXCONV_DTYPE_I32
                                           ? voxconv_dtype_name(args[i].dtype)
                                           : "not a voxconv_dtype_t",
                     args[1 - i].name);
  return vc_check_kmap_usable(h, fn, kmap);
}

voxconv_status_t vc_validate_pool_forward(voxconv_handle_t *h,
                                          const voxconv_kmap_t *kmap,
                                          voxconv_pool_mode_t mode,
                                          const voxconv_feats_t *x,
                                          const voxconv_feats_t *y) {
  const char *fn = "voxconv_pool_forward";
  NULL_ARG(kmap, "kmap");
  NULL_ARG(x, "x");
  NULL_ARG(y, "y");
  VC_CHECK(check_pool_mode(h, fn, mode));
  const vc_arg_t args[2] = {arg_feats("x", x), arg_feats("y", y)};
  if (x->dtype == VOXCONV_DTYPE_I8 || y->dtype == VOXCONV_DTYPE_I8)
    VC_CHECK(check_i8_pool(h, fn, kmap, mode, args));
  else
    VC_CHECK(check_dtypes_backend(h, fn, kmap, args, 2));
  VC_CHECK(check_feats_sizes(h, fn, "x", x));
  VC_CHECK(check_feats_sizes(h, fn, "y", y));
  VC_CHECK(check_rows(h, fn, "x", x, kmap->n_in, "input"));
  VC_CHECK(check_rows(h, fn, "y", y, kmap->n_out, "output"));
  VC_CHECK(check_channels(h, fn, "x", "channels", x->channels, "y", "channels",
                          y->channels));
  VC_CHECK(check_data(h, fn, args, 2));
  VC_CHECK(check_overlap(h, fn, &args[1], args, 1));
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t
vc_validate_pool_backward(voxconv_handle_t *h, const voxconv_kmap_t *kmap,
                          voxconv_pool_mode_t mode, const voxconv_feats_t *x,
                          const voxconv_feats_t *y, const voxconv_feats_t *dy,
                          const voxconv_feats_t *dx) {
  const char *fn = "voxconv_pool_backward";
  NULL_ARG(kmap, "kmap");
  VC_CHECK(check_pool_mode(h, fn, mode));
  const int need_xy = mode == VOXCONV_POOL_MAX;
  if (need_xy) {
    if (!x)
      return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                     "%s: x is NULL (MAX pooling backward needs the "
                     "forward's x and y)",
                     fn);
    if (!y)
      return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                     "%s: y is NULL (MAX pooling backward needs the "
                     "forward's x and y)",
                     fn);
  }
  NULL_ARG(dy, "dy");
  NULL_ARG(dx, "dx");
  vc_arg_t args[4];
  int n = 0;
  if (need_xy) {
    args[n++] = arg_feats("x", x);
    args[n++] = arg_feats("y", y);
  }
  args[n++] = arg_feats("dy", dy);
  args[n++] = arg_feats("dx", dx);
  VC_CHECK(check_dtypes_backend(h, fn, kmap, args, n));
  VC_CHECK(check_feats_sizes(h, fn, "dy", dy));
  VC_CHECK(check_feats_sizes(h, fn, "dx", dx));
  if (need_xy) {
    VC_CHECK(check_feats_sizes(h, fn, "x", x));
    VC_CHECK(check_feats_sizes(h, fn, "y", y));
  }
  VC_CHECK(check_rows(h, fn, "dy", dy, kmap->n_out, "output"));
  VC_CHECK(check_rows(h, fn, "dx", dx, kmap->n_in, "input"));
  if (need_xy) {
    VC_CHECK(check_rows(h, fn, "x", x, kmap->n_in, "input"));
    VC_CHECK(check_rows(h, fn, "y", y, kmap->n_out, "output"));
  }
  VC_CHECK(check_channels(h, fn, "dx", "channels", dx->channels, "dy",
                          "channels", dy->channels));
  if (need_xy) {
    VC_CHECK(check_channels(h, fn, "x", "channels", x->channels, "dy",
                            "channels", dy->channels));
    VC_CHECK(check_channels(h, fn, "y", "channels", y->channels, "dy",
                            "channels", dy->channels));
  }
  VC_CHECK(check_data(h, fn, args, n));
  VC_CHECK(check_overlap(h, fn, &args[n - 1], args, n - 1));
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_validate_unpool(voxconv_handle_t *h, int backward,
                                    const voxconv_kmap_t *kmap,
                                    const voxconv_feats_t *src,
                                    const voxconv_feats_t *dst) {
  const char *fn =
      backward ? "voxconv_unpool_backward" : "voxconv_unpool_forward";
  const char *ns = backward ? "dy" : "x";
  const char *nd = backward ? "dx" : "y";
  NULL_ARG(kmap, "kmap");
  NULL_ARG(src, ns);
  NULL_ARG(dst, nd);
  const vc_arg_t args[2] = {arg_feats(ns, src), arg_feats(nd, dst)};
  VC_CHECK(check_dtypes_backend(h, fn, kmap, args, 2));
  VC_CHECK(check_feats_sizes(h, fn, ns, src));
  VC_CHECK(check_feats_sizes(h, fn, nd, dst));
  /* Forward goes coarse (map outputs) -> fine (map inputs); backward the
   * other way round. */
  if (!backward) {
    VC_CHECK(check_rows(h, fn, ns, src, kmap->n_out, "output (coarse)"));
    VC_CHECK(check_rows(h, fn, nd, dst, kmap->n_in, "input (fine)"));
  } else {
    VC_CHECK(check_rows(h, fn, ns, src, kmap->n_in, "input (fine)"));
    VC_CHECK(check_rows(h, fn, nd, dst, kmap->n_out, "output (coarse)"));
  }
  VC_CHECK(check_channels(h, fn, ns, "channels", src->channels, nd, "channels",
                          dst->channels));
  VC_CHECK(check_data(h, fn, args, 2));
  VC_CHECK(check_overlap(h, fn, &args[1], args, 1));
  return VOXCONV_STATUS_SUCCESS;
}

/* voxconv_quantize (dequantize = 0) and voxconv_dequantize: float <-> I8
 * feature tensors of one shape at one per-tensor scale. */
voxconv_status_t vc_validate_quantize(voxconv_handle_t *h, int dequantize,
                                      const voxconv_feats_t *x, float scale,
                                      const voxconv_feats_t *y) {
  const char *fn = dequantize ? "voxconv_dequantize" : "voxconv_quantize";
  NULL_ARG(x, "x");
  NULL_ARG(y, "y");
  if (!(isfinite(scale) && scale > 0.0f))
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: scale=%g must be finite and > 0", fn, (double)scale);
  const vc_arg_t args[2] = {arg_feats("x", x), arg_feats("y", y)};
  for (int i = 0; i < 2; i++)
    if (!vc_dtype_valid(args[i].dtype) && args[i].dtype != VOXCONV_DTYPE_I8 &&
        args[i].dtype != VOXCONV_DTYPE_I32)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: %s->dtype=%d is not a voxconv_dtype_t", fn,
                     args[i].name, (int)args[i].dtype);
  /* the float side: F32, F16 or BF16 (f64 is the conv ops' CPU oracle) */
  const vc_arg_t *fl = &args[dequantize ? 1 : 0], *q = &args[dequantize ? 0 : 1];
  if (q->dtype != VOXCONV_DTYPE_I8 ||
      (fl->dtype != VOXCONV_DTYPE_F32 && fl->dtype != VOXCONV_DTYPE_F16 &&
       fl->dtype != VOXCONV_DTYPE_BF16))
    return vc_fail(h, VOXCONV_STATUS_DTYPE_MISMATCH,
                   "%s: x is %s and y is %s; it converts %s", fn,
                   voxconv_dtype_name(x->dtype), voxconv_dtype_name(y->dtype),
                   dequantize ? "i8 to f32, f16 or bf16"
                              : "f32, f16 or bf16 to i8");
  VC_CHECK(check_feats_sizes(h, fn, "x", x));
  VC_CHECK(check_feats_sizes(h, fn, "y", y));
  if (x->rows != y->rows || x->channels != y->channels)
    return vc_fail(h, VOXCONV_STATUS_SHAPE_MISMATCH,
                   "%s: x is [%lld][%lld] but y is [%lld][%lld] (one shape)",
                   fn, (long long)x->rows, (long long)x->channels,
                   (long long)y->rows, (long long)y->channels);
  VC_CHECK(check_data(h, fn, args, 2));
  VC_CHECK(check_overlap(h, fn, &args[1], args, 1));
  return VOXCONV_STATUS_SUCCESS;
}
