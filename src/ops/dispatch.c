/* Algorithm selection for one conv pass. This first version honours an
 * explicit algorithm name (or the first name of a list) and otherwise takes
 * the first registered algorithm that supports the problem; the autotuner
 * (src/tune) replaces the heuristic. */
#include "vc_algo.h"

#include <ctype.h>
#include <string.h>

static const char *pass_option(const voxconv_conv_options_t *opt,
                               voxconv_pass_t pass) {
  if (!opt)
    return NULL;
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return opt->fwd_algo;
  case VOXCONV_PASS_CONV_DGRAD:
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return opt->dgrad_algo ? opt->dgrad_algo : opt->bwd_algo;
  case VOXCONV_PASS_CONV_WGRAD:
  case VOXCONV_PASS_DEPTHWISE_WGRAD:
    return opt->wgrad_algo ? opt->wgrad_algo : opt->bwd_algo;
  default:
    return NULL;
  }
}

static voxconv_status_t run_algo(voxconv_handle_t *h, const vc_algo_t *a,
                                 vc_conv_problem_t *p) {
  vc_algo_params_t params;
  vc_algo_default_params(a, p->pass, &params);
  size_t ws_bytes = a->workspace_size ? a->workspace_size(p, &params) : 0;
  void *ws = NULL;
  if (ws_bytes)
    VC_CHECK(vc_alloc(h, ws_bytes, &ws, "algorithm workspace"));
  voxconv_status_t st = a->run(h, p, &params, ws);
  vc_free(h, ws);
  return st;
}

voxconv_status_t vc_dispatch_conv(voxconv_handle_t *h, vc_conv_problem_t *p,
                                  const voxconv_conv_options_t *opt) {
  const char *want = pass_option(opt, p->pass);
  if (want) {
    char name[64];
    size_t n = 0;
    const char *s = want;
    while (*s == '[' || isspace((unsigned char)*s))
      s++;
    while (*s && *s != ',' && *s != ']' && n + 1 < sizeof name)
      name[n++] = *s++;
    while (n > 0 && isspace((unsigned char)name[n - 1]))
      n--;
    name[n] = '\0';
    if (strcasecmp(name, "auto") != 0 && strcasecmp(name, "all") != 0) {
      const vc_algo_t *a = vc_algo_find(name);
      if (!a)
        return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                       "unknown algorithm '%s'", name);
      if (!(a->info.passes & (1u << p->pass)) || !a->supports(h, p))
        return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                       "algorithm '%s' cannot run this problem", name);
      return run_algo(h, a, p);
    }
  }
  for (int i = 0; i < vc_algo_table_size(); i++) {
    const vc_algo_t *a = vc_algo_at(i);
    if (!(a->info.passes & (1u << p->pass)))
      continue;
    if (p->deterministic && !a->info.deterministic)
      continue;
    if (a->supports(h, p))
      return run_algo(h, a, p);
  }
  return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                 "no algorithm supports pass %d with dtype %s, cin=%lld, "
                 "cout=%lld on this backend",
                 (int)p->pass, voxconv_dtype_name(p->dtype),
                 (long long)p->cin, (long long)p->cout);
}
