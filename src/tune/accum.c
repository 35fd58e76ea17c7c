/* fp16-accumulator resolution (voxconv.h, "fp16 accumulator"): the global
 * setting, its environment initialisation, and the per-call precedence.
 * This is the single place that decides; src/ops/validate.c and the tuner
 * both call it. */
#include "../ops/vc_validate.h"
#include "vc_tune.h"

#include <pthread.h>
#include <stdatomic.h>

static atomic_int g_fp16_global;     /* 0/1 */
static atomic_int g_fp16_global_set; /* 1: last set by the API */
static pthread_once_t g_fp16_once = PTHREAD_ONCE_INIT;

static void fp16_init_from_env(void) {
  const char *v = vc_getenv("VOXCONV_USE_FP16_ACCUM");
  int on = 0;
  if (v) {
    int b = vc_parse_bool(v);
    if (b < 0)
      vc_tune_warn_once("VOXCONV_USE_FP16_ACCUM",
                        "VOXCONV_USE_FP16_ACCUM='%s' is not true or false; "
                        "using false",
                        v);
    on = b == 1;
  }
  atomic_store(&g_fp16_global, on);
  atomic_store(&g_fp16_global_set, 0);
}

static void fp16_ensure_init(void) {
  pthread_once(&g_fp16_once, fp16_init_from_env);
}

void vc_fp16_accum_reset_from_env(void) {
  fp16_ensure_init(); /* so that a later first use cannot re-run it */
  fp16_init_from_env();
}

voxconv_status_t voxconv_set_fp16_accum(int enable) {
  fp16_ensure_init();
  atomic_store(&g_fp16_global, enable ? 1 : 0);
  atomic_store(&g_fp16_global_set, 1);
  return VOXCONV_STATUS_SUCCESS;
}

int voxconv_get_fp16_accum(void) {
  fp16_ensure_init();
  return atomic_load(&g_fp16_global);
}

static int is_wgrad(voxconv_pass_t pass) {
  return pass == VOXCONV_PASS_CONV_WGRAD ||
         pass == VOXCONV_PASS_DEPTHWISE_WGRAD;
}

int vc_resolve_fp16_accum_reason(const voxconv_conv_options_t *opt,
                                 voxconv_dtype_t dtype, voxconv_pass_t pass,
                                 const char **reason) {
  const char *why;
  int on;
  const voxconv_tristate_t call = opt ? opt->fp16_accum : VOXCONV_UNSET;
  if (dtype != VOXCONV_DTYPE_F16 && dtype != VOXCONV_DTYPE_BF16) {
    /* f32 input never silently runs in fp16 (DESIGN.md §3). */
    on = 0;
    why = call == VOXCONV_TRUE
              ? "off: f32/f64 data never accumulates in fp16 (per-call true "
                "ignored)"
              : "off: f32/f64 data never accumulates in fp16";
  } else if (is_wgrad(pass)) {
    on = 0;
    why = call == VOXCONV_TRUE
              ? "off: weight gradients always accumulate in fp32 (per-call "
                "true ignored)"
              : "off: weight gradients always accumulate in fp32";
  } else if (call == VOXCONV_TRUE) {
    on = 1;
    why = "on: per-call fp16_accum=true";
  } else if (call == VOXCONV_FALSE) {
    on = 0;
    why = "off: per-call fp16_accum=false";
  } else if (voxconv_get_fp16_accum()) {
    on = 1;
    why = atomic_load(&g_fp16_global_set)
              ? "on: global setting true (voxconv_set_fp16_accum)"
              : "on: global setting true (VOXCONV_USE_FP16_ACCUM)";
  } else if (opt && opt->inference) {
    on = 1;
    why = "on: inference mode with f16/bf16 data (automatic; global "
          "setting false)";
  } else {
    on = 0;
    why = "off: default fp32 accumulator (per-call unset, global false, "
          "not inference)";
  }
  if (reason)
    *reason = why;
  return on;
}

int vc_resolve_fp16_accum(const voxconv_conv_options_t *opt,
                          voxconv_dtype_t dtype, voxconv_pass_t pass) {
  return vc_resolve_fp16_accum_reason(opt, dtype, pass, NULL);
}

voxconv_status_t voxconv_resolve_fp16_accum(voxconv_dtype_t dtype,
                                            voxconv_pass_t pass,
                                            const voxconv_conv_options_t *opt,
                                            int *enabled, const char **reason) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, enabled, "enabled");
  if (!vc_dtype_valid(dtype))
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_resolve_fp16_accum: dtype=%d is not a "
                   "voxconv_dtype_t",
                   (int)dtype);
  if ((int)pass < 0 || pass >= VOXCONV_PASS_COUNT)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_resolve_fp16_accum: pass=%d outside 0..%d",
                   (int)pass, VOXCONV_PASS_COUNT - 1);
  if (opt && opt->fp16_accum != VOXCONV_UNSET &&
      opt->fp16_accum != VOXCONV_FALSE && opt->fp16_accum != VOXCONV_TRUE)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_resolve_fp16_accum: opt->fp16_accum=%d is not "
                   "VOXCONV_UNSET(0), VOXCONV_FALSE(1) or VOXCONV_TRUE(2)",
                   (int)opt->fp16_accum);
  *enabled = vc_resolve_fp16_accum_reason(opt, dtype, pass, reason);
  return VOXCONV_STATUS_SUCCESS;
}
