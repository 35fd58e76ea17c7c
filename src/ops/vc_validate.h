/* Argument validation of the public ops (conv, depthwise, pooling). Every
 * public op calls exactly one vc_validate_* function before any work; it
 * checks pointers, dtypes, backend, row counts against the kernel map and
 * channel shapes, and reports the first problem through vc_fail with the
 * argument's name and the numbers involved. Conv and depthwise validators
 * also resolve the per-call options and fill a vc_conv_problem_t ready for
 * vc_dispatch_conv. */
#ifndef VC_VALIDATE_H
#define VC_VALIDATE_H

#include "vc_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the fp16 accumulator is allowed for one call. The single place
 * that decides it (the tuner's full precedence replaces the body). */
int vc_resolve_fp16_accum(const voxconv_conv_options_t *opt,
                          voxconv_dtype_t dtype, voxconv_pass_t pass);
/* opt->deterministic, with UNSET meaning the handle's setting. */
int vc_resolve_deterministic(const voxconv_handle_t *h,
                             const voxconv_conv_options_t *opt);

/* The opening of every public op (conv, depthwise, pool, unpool): a NULL
 * handle is reported to the calling thread, since there is no handle to
 * carry the message; otherwise the handle's previous error is cleared so
 * that what the caller reads afterwards is about this call. `fn` is the
 * public function's name for the message. One function so that every op
 * reports a missing handle the same way. */
voxconv_status_t vc_op_begin(voxconv_handle_t *h, const char *fn);
/* The tristate fields of conv options (NULL options are valid), with fn's
 * name in the message; shared by the float and int8 entry points. */
voxconv_status_t vc_check_conv_options(voxconv_handle_t *h, const char *fn,
                                       const voxconv_conv_options_t *opt);

/* kmap usable by h: built on h's backend and (CUDA) device, and, for an
 * asynchronous build, complete enough: a deferred STRIDED map is waited
 * for (its output count), any other pending map's verdict is polled.
 * Shared by the float and int8 entry points. */
voxconv_status_t vc_check_kmap_usable(voxconv_handle_t *h, const char *fn,
                                      const voxconv_kmap_t *kmap);

/* Number of elements of a feature tensor (rows * channels), validated. */
int64_t vc_feats_elems(const voxconv_feats_t *f);

/* Regular convolution. `fn` is the public function's name for messages.
 * On success *p is filled (pass, kmap, dtype, channels, buffers, resolved
 * options). The caller still has to handle h == NULL before, with
 * vc_op_begin (the message then goes to the thread). */
voxconv_status_t vc_validate_conv_forward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_weights_t *w, const voxconv_feats_t *y,
    const voxconv_conv_options_t *opt, vc_conv_problem_t *p);
voxconv_status_t
vc_validate_conv_dgrad(voxconv_handle_t *h, const voxconv_kmap_t *kmap,
                       const voxconv_feats_t *dy, const voxconv_weights_t *w,
                       const voxconv_feats_t *dx,
                       const voxconv_conv_options_t *opt, vc_conv_problem_t *p);
voxconv_status_t
vc_validate_conv_wgrad(voxconv_handle_t *h, const voxconv_kmap_t *kmap,
                       const voxconv_feats_t *x, const voxconv_feats_t *dy,
                       const voxconv_weights_t *dw,
                       const voxconv_conv_options_t *opt, vc_conv_problem_t *p);

/* Depthwise convolution; weights are feats {rows = kvol, channels = C}. */
voxconv_status_t
vc_validate_depthwise(voxconv_handle_t *h, voxconv_pass_t pass,
                      const voxconv_kmap_t *kmap, const voxconv_feats_t *a,
                      const voxconv_feats_t *b, const voxconv_feats_t *c,
                      const voxconv_conv_options_t *opt, vc_conv_problem_t *p);

/* Pooling. x/y may be NULL for AVG and SUM backward. */
voxconv_status_t vc_validate_pool_forward(voxconv_handle_t *h,
                                          const voxconv_kmap_t *kmap,
                                          voxconv_pool_mode_t mode,
                                          const voxconv_feats_t *x,
                                          const voxconv_feats_t *y);
voxconv_status_t
vc_validate_pool_backward(voxconv_handle_t *h, const voxconv_kmap_t *kmap,
                          voxconv_pool_mode_t mode, const voxconv_feats_t *x,
                          const voxconv_feats_t *y, const voxconv_feats_t *dy,
                          const voxconv_feats_t *dx);
/* Unpooling: forward x = coarse (n_out rows), y = fine (n_in rows);
 * backward dy = fine (n_in rows), dx = coarse (n_out rows). */
voxconv_status_t vc_validate_unpool(voxconv_handle_t *h, int backward,
                                    const voxconv_kmap_t *kmap,
                                    const voxconv_feats_t *src,
                                    const voxconv_feats_t *dst);
/* voxconv_quantize (dequantize = 0) / voxconv_dequantize. */
voxconv_status_t vc_validate_quantize(voxconv_handle_t *h, int dequantize,
                                      const voxconv_feats_t *x, float scale,
                                      const voxconv_feats_t *y);

#ifdef __cplusplus
}
#endif
#endif
