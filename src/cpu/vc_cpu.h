/* The CPU backend's kernels: a small register-blocked GEMM layer
 * (gemm_cpu.c), the gather-GEMM convolution (conv_cpu.c), depthwise
 * convolution (depthwise_cpu.c) and pooling (pool_cpu.c). Everything here
 * works on host memory and is called after validation. */
#ifndef VC_CPU_H
#define VC_CPU_H

#include "../ops/vc_algo.h"

#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GEMM micro-kernels (gemm_cpu.c) ----------------------------------- */
/* One register tile: for r < m (m <= mr) and t < nr,
 *   c[crow[r] * ldc + t] += sum over p < kdim, in order, of
 *                           arow[r][p] * b[p * ldb + t].
 * Rows of A come through pointers (gathered rows, or rows used in place),
 * rows of C through indices, so a tile can scatter into a block of
 * accumulators. Each element is one sequential chain over p (fused
 * multiply-add where the ISA has it), so results do not depend on how rows
 * are grouped into tiles. */
typedef void (*vc_gemm_tile_fn)(int m, int64_t kdim, const float *const *arow,
                                const float *b, int64_t ldb, float *c,
                                int64_t ldc, const int32_t *crow);

/* The tile used by weight gradients, with one A row and one B row per
 * reduction step p (the rows of a pair): for r < m, t < nr,
 *   c[r * ldc + t] += sum over p < kdim, in order, of
 *                     ap[p][aoff + r] * bp[p][boff + t]
 * (rows of C consecutive). */
typedef void (*vc_gemm_tile_pp_fn)(int m, int64_t kdim, const float *const *ap,
                                   int64_t aoff, const float *const *bp,
                                   int64_t boff, float *c, int64_t ldc);

typedef struct vc_gemm_kernel {
  const char *name; /* "portable", "avx2", "avx512" */
  int mr, nr;       /* rows and columns of one register tile */
  vc_gemm_tile_fn tile;
  vc_gemm_tile_pp_fn tile_pp;
} vc_gemm_kernel_t;

/* The kernel to use for a product with ncols output columns: the best
 * this CPU runs for that width, or the one named by the VOXCONV_CPU_ISA
 * environment variable (portable, avx2, avx512, auto). INVALID_ARGUMENT
 * (message on h) for an unknown name or one this CPU cannot run. */
voxconv_status_t vc_cpu_gemm_select(const voxconv_handle_t *h, int64_t ncols,
                                    const vc_gemm_kernel_t **kernel);
/* A kernel by name if this CPU can run it, else NULL. */
const vc_gemm_kernel_t *vc_cpu_gemm_kernel_named(const char *name);
/* Names of the kernels this CPU can run, best last; returns the count. */
int vc_cpu_gemm_available(const char **names, int max_names);

/* Exact conversion of n elements to f32 (vectorised where possible). */
void vc_cpu_load_f32(const void *src, voxconv_dtype_t dtype, int64_t n,
                     float *dst);
/* Round-to-nearest-even conversion of n f32 values to dtype (same values
 * as vc_store_f32; NaN stays NaN). */
void vc_cpu_store_f32(void *dst, voxconv_dtype_t dtype, int64_t n,
                      const float *src);

/* acc[e] += x[e] * w[e] and acc[e] += x[e] for e < n, f32, multiply and
 * add rounded separately (identical bits on every ISA variant). */
void vc_cpu_mul_acc(float *acc, const float *x, const float *w, int64_t n);
void vc_cpu_add_acc(float *acc, const float *x, int64_t n);

/* ---- convolution algorithms (conv_cpu.c, depthwise_cpu.c) -------------- */
/* vc_algo_cpu_gather_gemm and vc_algo_cpu_depthwise are declared in
 * vc_algo.h. */

/* ---- int8 convolution (conv_int8_cpu.c, int8_vnni.c) ------------------ */
/* A VNNI register tile: for r < m (m <= mr) and t < nr,
 *   c[crow[r] * ldc + t] += sum over g < kg, b < 4 of
 *                           (int32)bp[(g * nr + t) * 4 + b] *
 *                           (int32)arow[r][4 * g + b]
 * with bp unsigned (qw + 128) and arow signed, wrapping modulo 2^32. */
typedef void (*vc_int8_tile_fn)(int m, int64_t kg, const int8_t *const *arow,
                                const uint8_t *bp, int32_t *c, int64_t ldc,
                                const int32_t *crow);
/* One output row of the int8 epilogue (voxconv.h), n channels; m[c] =
 * x_scale * w_scale[c], b[c] the bias (0 when none); dt F32, F16, BF16 or
 * I8. Bit-identical to the portable one. */
typedef void (*vc_int8_epilogue_fn)(const int32_t *acc, int64_t n,
                                    const float *m, const float *b, int relu,
                                    float y_scale, voxconv_dtype_t dt,
                                    void *dst);
typedef struct vc_int8_simd {
  const char *name; /* "avx512_vnni", "avx_vnni" */
  int mr, nr;
  vc_int8_tile_fn tile;
  vc_int8_epilogue_fn epilogue; /* NULL: the portable one */
} vc_int8_simd_t;
/* The VNNI kernels of a family ("avx512": AVX-512 VNNI, else AVX-VNNI;
 * "avx2": AVX-VNNI) that this CPU runs, or NULL. */
const vc_int8_simd_t *vc_cpu_int8_simd(const char *family);

struct vc_int8_problem;
/* Runs a validated int8 problem on the CPU (src/ops/conv_int8.c). */
voxconv_status_t vc_cpu_conv_int8(voxconv_handle_t *h,
                                  const struct vc_int8_problem *p);
/* Name of the int8 path vc_cpu_conv_int8 would run for cout output
 * channels under VOXCONV_CPU_ISA ("portable", "avx512_vnni", "avx_vnni");
 * INVALID_ARGUMENT for a name the CPU cannot run. */
voxconv_status_t vc_cpu_int8_path(const voxconv_handle_t *h, int64_t cout,
                                  const char **name);

/* voxconv.h's I8 rounding of a binary32 value v at scale s (the int8
 * epilogue's step 5 and voxconv_quantize): t = v / s correctly rounded,
 * nearest integer with ties to even (the default rounding mode), clamped to
 * [-127, 127]; +-Inf saturate, NaN gives 0. */
static inline int8_t vc_i8_requantize(float v, float s) {
  const float r = nearbyintf(v / s);
  return (int8_t)(r != r ? 0 : r < -127.0f ? -127 : r > 127.0f ? 127 : (int)r);
}

/* ---- int8 feature conversion (quantize_cpu.c); validated by
 * src/ops/quantize.c: x float -> y I8 (dequantize 0) or x I8 -> y float -- */
voxconv_status_t vc_cpu_quantize(voxconv_handle_t *h, int dequantize,
                                 const voxconv_feats_t *x, float scale,
                                 const voxconv_feats_t *y);

/* ---- pooling (pool_cpu.c); arguments validated by src/ops/pool.c ------ */
voxconv_status_t vc_cpu_pool_forward(voxconv_handle_t *h,
                                     const voxconv_kmap_t *kmap,
                                     voxconv_pool_mode_t mode,
                                     const voxconv_feats_t *x,
                                     const voxconv_feats_t *y);
/* x and y are NULL unless mode is MAX. */
voxconv_status_t
vc_cpu_pool_backward(voxconv_handle_t *h, const voxconv_kmap_t *kmap,
                     voxconv_pool_mode_t mode, const voxconv_feats_t *x,
                     const voxconv_feats_t *y, const voxconv_feats_t *dy,
                     const voxconv_feats_t *dx);
voxconv_status_t vc_cpu_unpool_forward(voxconv_handle_t *h,
                                       const voxconv_kmap_t *kmap,
                                       const voxconv_feats_t *x,
                                       const voxconv_feats_t *y);
voxconv_status_t vc_cpu_unpool_backward(voxconv_handle_t *h,
                                        const voxconv_kmap_t *kmap,
                                        const voxconv_feats_t *dy,
                                        const voxconv_feats_t *dx);

#ifdef __cplusplus
}
#endif
#endif
