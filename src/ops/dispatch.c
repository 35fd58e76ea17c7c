/* Algorithm selection for one conv pass: the autotuner decides (options and
 * environment, persistent cache, benchmarks; see src/tune/tuner.c and
 * voxconv.h "tuning"). Kept as the ops' single entry into selection. */
#include "vc_algo.h"

#include "../tune/vc_tune.h"

voxconv_status_t vc_dispatch_conv(voxconv_handle_t *h, vc_conv_problem_t *p,
                                  const voxconv_conv_options_t *opt) {
  vc_capture_scope_begin(h);
  const voxconv_status_t st = vc_tune_dispatch(h, p, opt);
  vc_capture_scope_end(h);
  return st;
}
