/* The algorithm registry (DESIGN.md §3): one record per algorithm, read by
 * dispatch, the tuner and the tools alike. Adding an algorithm is adding a
 * record here (vc_algo_table in algo.c) and its kernels. */
#ifndef VC_ALGO_H
#define VC_ALGO_H

#include "../coords/vc_kmap.h"
#include "../core/vc_core.h"

#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One convolution pass on concrete buffers (backend memory).
 *   FWD:   a = x  [n_in][cin],   b = W [kvol][cin][cout], c = y  [n_out][cout]
 *   DGRAD: a = dy [n_out][cout], b = W,                   c = dx [n_in][cin]
 *   WGRAD: a = x,                b = dy,                  c = dW [kvol][cin][cout]
 * Depthwise passes use the same roles with cin == cout == C and W / dW of
 * shape [kvol][C]. Validation is done before an algorithm sees a problem. */
typedef struct vc_conv_problem {
  voxconv_pass_t pass;
  const voxconv_kmap_t *kmap;
  voxconv_dtype_t dtype;
  int64_t cin, cout;
  const void *a;
  const void *b;
  void *c;
  int fp16_accum;    /* resolved: 1 = fp16 accumulators allowed */
  int deterministic; /* resolved: 1 = no float atomics, fixed order */
} vc_conv_problem_t;

/* A problem with these roles; the resolved flags (fp16_accum,
 * deterministic) start at 0 for the caller to set. */
static inline vc_conv_problem_t
vc_conv_problem_make(voxconv_pass_t pass, const voxconv_kmap_t *kmap,
                voxconv_dtype_t dtype, int64_t cin, int64_t cout,
                const void *a, const void *b, void *c) {
  vc_conv_problem_t p;
  memset(&p, 0, sizeof p);
  p.pass = pass;
  p.kmap = kmap;
  p.dtype = dtype;
  p.cin = cin;
  p.cout = cout;
  p.a = a;
  p.b = b;
  p.c = c;
  return p;
}

#define VC_MAX_PARAMS 4
#define VC_MAX_PARAM_VALUES 16

/* A parameter with this name selects the accumulator of a tile: fp32 is
 * VC_ACCUM_F32 (0) or 32, fp16 is VC_ACCUM_F16 (1) or 16 (both spellings
 * are recognised). The tuner admits fp16 values only when the fp16
 * accumulator is allowed for the call (and then hands the algorithm a
 * problem with fp16_accum = 1); see voxconv.h. */
#define VC_PARAM_ACCUMULATOR "accumulator_type"
#define VC_ACCUM_F32 0
#define VC_ACCUM_F16 1

/* The tunable parameters of one algorithm for one pass. */
typedef struct vc_param_space {
  int n;
  const char *names[VC_MAX_PARAMS];
  int n_values[VC_MAX_PARAMS];
  int32_t values[VC_MAX_PARAMS][VC_MAX_PARAM_VALUES];
} vc_param_space_t;

/* A point in that space: v[i] is a value (not an index) of parameter i. */
typedef struct vc_algo_params {
  int32_t v[VC_MAX_PARAMS];
} vc_algo_params_t;

typedef struct vc_algo {
  voxconv_algo_info_t info;
  /* 1 if it can run p (pass, dtype, channels, backend, determinism). */
  int (*supports)(const voxconv_handle_t *h, const vc_conv_problem_t *p);
  /* Parameter space for a pass; NULL = no parameters. */
  const vc_param_space_t *(*param_space)(voxconv_pass_t pass);
  /* Scratch bytes (backend memory) for p with params; NULL = none. */
  size_t (*workspace_size)(const vc_conv_problem_t *p,
                           const vc_algo_params_t *params);
  voxconv_status_t (*run)(voxconv_handle_t *h, const vc_conv_problem_t *p,
                          const vc_algo_params_t *params, void *workspace);
  /* NULL when every point of the parameter space runs wherever supports()
   * holds. Otherwise 0 for a point that cannot run p on h's device although
   * the algorithm can (e.g. a tile needing more shared memory per block than
   * the GPU allows): the tuner leaves such points out of its candidates,
   * defaults and cached answers, and run() refuses them with
   * VOXCONV_STATUS_UNSUPPORTED and a message, before any launch. */
  int (*params_supported)(const voxconv_handle_t *h, const vc_conv_problem_t *p,
                          const vc_algo_params_t *params);
} vc_algo_t;

/* 1 when a can run p with params on h as far as its parameter point goes
 * (a->params_supported; supports() is asked separately). */
static inline int vc_algo_params_supported(const vc_algo_t *a,
                                           const voxconv_handle_t *h,
                                           const vc_conv_problem_t *p,
                                           const vc_algo_params_t *params) {
  return !a->params_supported || a->params_supported(h, p, params);
}

int vc_algo_table_size(void);
const vc_algo_t *vc_algo_at(int index);
const vc_algo_t *vc_algo_find(const char *name); /* case-insensitive */
/* Default parameters: the first value of each parameter. */
void vc_algo_default_params(const vc_algo_t *a, voxconv_pass_t pass,
                            vc_algo_params_t *params);

/* Picks an algorithm for p under opt (tuner/cache/heuristic) and runs it.
 * Lives in src/ops/dispatch.c. */
voxconv_status_t vc_dispatch_conv(voxconv_handle_t *h, vc_conv_problem_t *p,
                                  const voxconv_conv_options_t *opt);

/* Registered algorithms (defined next to their kernels). */
extern const vc_algo_t vc_algo_cpu_gather_gemm;
extern const vc_algo_t vc_algo_cpu_depthwise;

#ifdef __cplusplus
}
#endif
#endif
