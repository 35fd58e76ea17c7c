/* Pooling and unpooling: validate, then run on the handle's backend. These
 * ops have a single implementation per backend, so they bypass the
 * algorithm registry. */
#include "vc_validate.h"

#include "../cpu/vc_cpu.h"
#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

voxconv_status_t voxconv_pool_forward(voxconv_handle_t *h,
                                      const voxconv_kmap_t *kmap,
                                      voxconv_pool_mode_t mode,
                                      const voxconv_feats_t *x,
                                      const voxconv_feats_t *y) {
  VC_CHECK(vc_op_begin(h, "voxconv_pool_forward"));
  VC_CHECK(vc_validate_pool_forward(h, kmap, mode, x, y));
  if (vc_feats_elems(y) == 0)
    return VOXCONV_STATUS_SUCCESS;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_pool_forward(h, kmap, mode, x, y);
#endif
  return vc_cpu_pool_forward(h, kmap, mode, x, y);
}

voxconv_status_t
voxconv_pool_backward(voxconv_handle_t *h, const voxconv_kmap_t *kmap,
                      voxconv_pool_mode_t mode, const voxconv_feats_t *x,
                      const voxconv_feats_t *y, const voxconv_feats_t *dy,
                      const voxconv_feats_t *dx) {
  VC_CHECK(vc_op_begin(h, "voxconv_pool_backward"));
  VC_CHECK(vc_validate_pool_backward(h, kmap, mode, x, y, dy, dx));
  if (vc_feats_elems(dx) == 0)
    return VOXCONV_STATUS_SUCCESS;
  /* AVG and SUM ignore x and y (voxconv.h); backends get NULL for them so
   * that nothing reads tensors that were not validated. */
  if (mode != VOXCONV_POOL_MAX)
    x = y = NULL;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_pool_backward(h, kmap, mode, x, y, dy, dx);
#endif
  return vc_cpu_pool_backward(h, kmap, mode, x, y, dy, dx);
}

voxconv_status_t voxconv_unpool_forward(voxconv_handle_t *h,
                                        const voxconv_kmap_t *kmap,
                                        const voxconv_feats_t *x,
                                        const voxconv_feats_t *y) {
  VC_CHECK(vc_op_begin(h, "voxconv_unpool_forward"));
  VC_CHECK(vc_validate_unpool(h, 0, kmap, x, y));
  if (vc_feats_elems(y) == 0)
    return VOXCONV_STATUS_SUCCESS;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_unpool_forward(h, kmap, x, y);
#endif
  return vc_cpu_unpool_forward(h, kmap, x, y);
}

voxconv_status_t voxconv_unpool_backward(voxconv_handle_t *h,
                                         const voxconv_kmap_t *kmap,
                                         const voxconv_feats_t *dy,
                                         const voxconv_feats_t *dx) {
  VC_CHECK(vc_op_begin(h, "voxconv_unpool_backward"));
  VC_CHECK(vc_validate_unpool(h, 1, kmap, dy, dx));
  if (vc_feats_elems(dx) == 0)
    return VOXCONV_STATUS_SUCCESS;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_unpool_backward(h, kmap, dy, dx);
#endif
  return vc_cpu_unpool_backward(h, kmap, dy, dx);
}
