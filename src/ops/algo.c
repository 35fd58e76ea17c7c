/* The algorithm table. Order matters only for display and as the last
 * tie-breaker of the heuristic; selection itself is dispatch's job. */
#include "vc_algo.h"

#include <strings.h>

#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda_algos.h"
#include "../cuda/vc_cuda.h"
#include "../cuda/vc_cuda_tc_algos.h"
#endif

static const vc_algo_t *const vc_algo_table[] = {
    &vc_algo_cpu_gather_gemm,
    &vc_algo_cpu_depthwise,
#ifdef VOXCONV_HAVE_CUDA
    VC_CUDA_TC_ALGO_LIST VC_CUDA_ALGO_LIST
#endif
};

int vc_algo_table_size(void) {
  return (int)(sizeof vc_algo_table / sizeof vc_algo_table[0]);
}

const vc_algo_t *vc_algo_at(int index) {
  if (index < 0 || index >= vc_algo_table_size())
    return NULL;
  return vc_algo_table[index];
}

const vc_algo_t *vc_algo_find(const char *name) {
  if (!name)
    return NULL;
  for (int i = 0; i < vc_algo_table_size(); i++)
    if (strcasecmp(vc_algo_table[i]->info.name, name) == 0)
      return vc_algo_table[i];
  return NULL;
}

void vc_algo_default_params(const vc_algo_t *a, voxconv_pass_t pass,
                            vc_algo_params_t *params) {
  for (int i = 0; i < VC_MAX_PARAMS; i++)
    params->v[i] = 0;
  const vc_param_space_t *s = a->param_space ? a->param_space(pass) : NULL;
  if (!s)
    return;
  for (int i = 0; i < s->n && i < VC_MAX_PARAMS; i++)
    params->v[i] = s->n_values[i] > 0 ? s->values[i][0] : 0;
}

int voxconv_algo_count(void) { return vc_algo_table_size(); }

voxconv_status_t voxconv_algo_get_info(int index, voxconv_algo_info_t *info) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, info, "info");
  const vc_algo_t *a = vc_algo_at(index);
  if (!a)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_algo_get_info: index %d outside 0..%d", index,
                   vc_algo_table_size() - 1);
  *info = a->info;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kernel_count(voxconv_handle_t *h, int *count) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, count, "count");
  *count = 0;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    *count = vc_cuda_kernel_count() + vc_cuda_int8_tile_count();
#endif
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kernel_get_info(voxconv_handle_t *h, int index,
                                         voxconv_kernel_info_t *info) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, info, "info");
  int count = 0;
  VC_CHECK(voxconv_kernel_count(h, &count));
  if (index < 0 || index >= count)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_kernel_get_info: index %d outside 0..%d", index,
                   count - 1);
#ifdef VOXCONV_HAVE_CUDA
  const int floats = vc_cuda_kernel_count();
  return index < floats ? vc_cuda_kernel_info(h, index, info)
                        : vc_cuda_int8_tile_info(h, index - floats, info);
#else
  return VOXCONV_STATUS_INTERNAL;
#endif
}
