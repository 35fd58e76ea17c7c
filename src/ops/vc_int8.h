/* int8 sparse convolution (voxconv_conv_forward_int8,
 * voxconv_depthwise_forward_int8): the validated problem that the entry
 * (src/ops/conv_int8.c) hands to a backend. Kept apart from
 * vc_conv_problem_t on purpose: int8 problems carry quantisation
 * parameters and must never reach the float algorithm registry or the
 * tuner's float candidate pools: the int8 tuner (src/tune/tune_int8.c)
 * decides their tiles, under its own cache namespace. */
#ifndef VC_INT8_H
#define VC_INT8_H

#include "vc_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvol * cin above this could overflow an int32 accumulator (voxconv.h). */
#define VC_INT8_MAX_KVOL_CIN 131071
/* The most slices a regular conv's kernel offsets are split into (split-K,
 * CUDA: partial int32 sums added, then the epilogue; the tuner's
 * "tile=N,split=S" and VOXCONV_INT8_SPLIT). */
#define VC_INT8_MAX_SPLIT 64

typedef struct vc_int8_problem {
  int depthwise;            /* 1: w is [kvol][C], cin == cout == C */
  const voxconv_kmap_t *kmap;
  int64_t cin, cout;
  const int8_t *x;          /* [n_in][cin] */
  const int8_t *w;          /* [kvol][cin][cout] or [kvol][C] */
  int w_koi;                /* 1: w is [kvol][cout][cin] (KOI; regular) */
  void *y;                  /* [n_out][cout] in y_dtype */
  voxconv_dtype_t y_dtype;  /* I8, F32, F16, BF16 or I32 */
  /* Epilogue (unused for I32): host pointers on the CPU. */
  float x_scale, y_scale;
  const float *w_scale;     /* [cout] */
  const float *bias;        /* [cout] or NULL */
  int relu;
} vc_int8_problem_t;

/* qW[k][ci][co] whatever w's layout. */
static inline int8_t vc_int8_w_at(const vc_int8_problem_t *p, int64_t k,
                                  int64_t ci, int64_t co) {
  const int64_t base = k * p->cin * p->cout;
  return p->w[base + (p->w_koi ? co * p->cin + ci : ci * p->cout + co)];
}

#ifdef __cplusplus
}
#endif
#endif
