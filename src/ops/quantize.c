/* voxconv_quantize / voxconv_dequantize: validate, then convert on the
 * handle's backend. One implementation per backend (element-wise, no
 * algorithm to choose), so no registry or tuner. */
#include "vc_validate.h"

#include "../cpu/vc_cpu.h"
#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

static voxconv_status_t convert(voxconv_handle_t *h, int dequantize,
                                const char *fn, const voxconv_feats_t *x,
                                float scale, const voxconv_feats_t *y) {
  VC_CHECK(vc_op_begin(h, fn));
  VC_CHECK(vc_validate_quantize(h, dequantize, x, scale, y));
  if (vc_feats_elems(y) == 0)
    return VOXCONV_STATUS_SUCCESS;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_quantize(h, dequantize, x, scale, y);
#endif
  return vc_cpu_quantize(h, dequantize, x, scale, y);
}

voxconv_status_t voxconv_quantize(voxconv_handle_t *h, const voxconv_feats_t *x,
                                  float scale, const voxconv_feats_t *y) {
  return convert(h, 0, "voxconv_quantize", x, scale, y);
}

voxconv_status_t voxconv_dequantize(voxconv_handle_t *h,
                                    const voxconv_feats_t *x, float scale,
                                    const voxconv_feats_t *y) {
  return convert(h, 1, "voxconv_dequantize", x, scale, y);
}
