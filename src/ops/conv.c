/* Regular sparse convolution: the three public passes. Each validates its
 * arguments (validate.c), then hands the problem to dispatch, which picks
 * the algorithm (registry, tuner). */
#include "vc_validate.h"

voxconv_status_t voxconv_conv_forward(voxconv_handle_t *h,
                                      const voxconv_kmap_t *kmap,
                                      const voxconv_feats_t *x,
                                      const voxconv_weights_t *w,
                                      const voxconv_feats_t *y,
                                      const voxconv_conv_options_t *opt) {
  VC_CHECK(vc_op_begin(h, "voxconv_conv_forward"));
  vc_conv_problem_t p;
  VC_CHECK(vc_validate_conv_forward(h, kmap, x, w, y, opt, &p));
  /* An empty output has nothing to write; no algorithm needs to see it. */
  if (vc_feats_elems(y) == 0)
    return VOXCONV_STATUS_SUCCESS;
  return vc_dispatch_conv(h, &p, opt);
}

voxconv_status_t voxconv_conv_dgrad(voxconv_handle_t *h,
                                    const voxconv_kmap_t *kmap,
                                    const voxconv_feats_t *dy,
                                    const voxconv_weights_t *w,
                                    const voxconv_feats_t *dx,
                                    const voxconv_conv_options_t *opt) {
  VC_CHECK(vc_op_begin(h, "voxconv_conv_dgrad"));
  vc_conv_problem_t p;
  VC_CHECK(vc_validate_conv_dgrad(h, kmap, dy, w, dx, opt, &p));
  if (vc_feats_elems(dx) == 0)
    return VOXCONV_STATUS_SUCCESS;
  return vc_dispatch_conv(h, &p, opt);
}

voxconv_status_t voxconv_conv_wgrad(voxconv_handle_t *h,
                                    const voxconv_kmap_t *kmap,
                                    const voxconv_feats_t *x,
                                    const voxconv_feats_t *dy,
                                    const voxconv_weights_t *dw,
                                    const voxconv_conv_options_t *opt) {
  VC_CHECK(vc_op_begin(h, "voxconv_conv_wgrad"));
  vc_conv_problem_t p;
  VC_CHECK(vc_validate_conv_wgrad(h, kmap, x, dy, dw, opt, &p));
  /* dW is never empty (kvol, cin, cout > 0): an empty map writes zeros,
   * which the algorithm does. */
  return vc_dispatch_conv(h, &p, opt);
}
