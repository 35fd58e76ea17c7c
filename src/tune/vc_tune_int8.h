/* The int8 tuner (tune_int8.c): which tile runs an int8 convolution.
 *
 * int8 problems keep out of the float tuner on purpose (vc_int8.h): their
 * candidates are the tiles of one algorithm that must all give the same
 * bits, so the check is bitwise equality with a reference tile, not the
 * float tuner's rounding bound, and their decisions live in their own
 * cache namespace (VC_INT8_NS), keyed by the output dtype, which no float
 * lookup reads. Public behaviour: include/voxconv.h, "int8 (quantized)
 * sparse convolution", CUDA. */
#ifndef VC_TUNE_INT8_H
#define VC_TUNE_INT8_H

#include "../ops/vc_int8.h"
#include "vc_cache_db.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cache namespace of int8 regular-conv forward decisions. */
#define VC_INT8_NS "sparse_conv_forward_int8"

/* What a backend offers for the regular int8 conv: tiles 0..n_tiles-1 of
 * one algorithm. The CUDA backend's is mask_gemm_i8 (cuda_int8.cu); tests
 * substitute their own. */
typedef struct vc_int8_tiles {
  const char *algo;
  int n_tiles;
  /* 1 when tile t runs on h's device */
  int (*usable)(voxconv_handle_t *h, int t);
  /* the reference tile (the untuned choice, also used while capturing) */
  int (*default_tile)(voxconv_handle_t *h, const vc_int8_problem_t *p);
  /* runs tile t with its kernel offsets split `split` ways (1: none) */
  voxconv_status_t (*run)(voxconv_handle_t *h, const vc_int8_problem_t *p,
                          int t, int split);
  /* The tile whose kernel runs tile t on p: t, or the tile t stands in for
   * where its own kernel does not apply (CUDA's tile 18 off first layers).
   * The tuner measures such a t only through that tile. NULL: always t. */
  int (*runs_as)(voxconv_handle_t *h, const vc_int8_problem_t *p, int t);
  /* The split (split-K over the kernel offsets) worth measuring for tile t
   * on p beside the unsplit tile, or 1 for none. Every split gives the
   * unsplit tile's bits. NULL: no splits. */
  int (*split_of)(voxconv_handle_t *h, const vc_int8_problem_t *p, int t);
} vc_int8_tiles_t;

/* Runs p (validated by src/ops/conv_int8.c) on h's backend: the CPU
 * kernels, CUDA depthwise, or the CUDA regular conv through
 * vc_tune_int8_tiles. Records the handle's last-call info. */
voxconv_status_t vc_tune_int8(voxconv_handle_t *h, const vc_int8_problem_t *p);

/* The tile decision for a regular conv p on tiles `be`, and the run:
 * VOXCONV_INT8_TILE when set; else the handle's memo, else the cache
 * (VC_INT8_NS), else every usable tile is run, checked bit for bit against
 * the reference tile's output and timed, the ranking cached, the fastest
 * run. During stream capture nothing is measured: a cached decision or
 * the reference tile. */
voxconv_status_t vc_tune_int8_tiles(voxconv_handle_t *h,
                                    const vc_int8_problem_t *p,
                                    const vc_int8_tiles_t *be);

/* The cache key of p (y's dtype as the key's dtype). */
void vc_tune_int8_key(voxconv_handle_t *h, const vc_int8_problem_t *p,
                      vc_cache_key_t *key);

#ifdef __cplusplus
}
#endif
#endif
