/* Depthwise sparse convolution (weights [kvol][C]): validate, then dispatch
 * through the same registry as regular convolution (depthwise passes). */
#include "vc_validate.h"

static voxconv_status_t depthwise_op(voxconv_handle_t *h, voxconv_pass_t pass,
                                     const char *fn, const voxconv_kmap_t *kmap,
                                     const voxconv_feats_t *a,
                                     const voxconv_feats_t *b,
                                     const voxconv_feats_t *c,
                                     const voxconv_conv_options_t *opt) {
  VC_CHECK(vc_op_begin(h, fn));
  vc_conv_problem_t p;
  VC_CHECK(vc_validate_depthwise(h, pass, kmap, a, b, c, opt, &p));
  /* Empty outputs have nothing to write (dw is never empty). */
  if (vc_feats_elems(c) == 0)
    return VOXCONV_STATUS_SUCCESS;
  return vc_dispatch_conv(h, &p, opt);
}

voxconv_status_t voxconv_depthwise_forward(voxconv_handle_t *h,
                                           const voxconv_kmap_t *kmap,
                                           const voxconv_feats_t *x,
                                           const voxconv_feats_t *w,
                                           const voxconv_feats_t *y,
                                           const voxconv_conv_options_t *opt) {
  return depthwise_op(h, VOXCONV_PASS_DEPTHWISE_FWD,
                      "voxconv_depthwise_forward", kmap, x, w, y, opt);
}

voxconv_status_t voxconv_depthwise_dgrad(voxconv_handle_t *h,
                                         const voxconv_kmap_t *kmap,
                                         const voxconv_feats_t *dy,
                                         const voxconv_feats_t *w,
                                         const voxconv_feats_t *dx,
                                         const voxconv_conv_options_t *opt) {
  return depthwise_op(h, VOXCONV_PASS_DEPTHWISE_DGRAD,
                      "voxconv_depthwise_dgrad", kmap, dy, w, dx, opt);
}

voxconv_status_t voxconv_depthwise_wgrad(voxconv_handle_t *h,
                                         const voxconv_kmap_t *kmap,
                                         const voxconv_feats_t *x,
                                         const voxconv_feats_t *dy,
                                         const voxconv_feats_t *dw,
                                         const voxconv_conv_options_t *opt) {
  return depthwise_op(h, VOXCONV_PASS_DEPTHWISE_WGRAD,
                      "voxconv_depthwise_wgrad", kmap, x, dy, dw, opt);
}
