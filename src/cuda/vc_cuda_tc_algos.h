/* Tensor-core CUDA algorithm records (issue: tensor-core implicit GEMM),
 * listed into the registry ahead of the SIMT ones (src/ops/algo.c).
 *
 *  mask_gemm   fused gather-GEMM-scatter on tensor cores (mma.sync
 *              m16n8k16, cp.async gather, per-tile offset skipping);
 *              f16/bf16 with channels % 8 == 0. Forward/dgrad write each
 *              output once (no atomics); wgrad reduces split partials in a
 *              fixed order. Deterministic. Params: mma_tile,
 *              accumulator_type (fwd/dgrad), split_k_slices (wgrad).
 *  mask_gemm_wgmma  the same algorithm on Hopper warpgroup MMA (wgmma,
 *              sm_90a only; supports() is false elsewhere). Params:
 *              mma_tile, accumulator_type, row_order (fwd/dgrad);
 *              mma_tile, split_k_slices (wgrad, fp32 accumulators).
 *  mask_gemm_im2col  forward with cin <= 8 and kvol <= 28 (first layers):
 *              every (row, offset) input of a tile gathered at once into
 *              a whole-row im2col tile, one mma.sync chain. Params:
 *              row_order. */
#ifndef VC_CUDA_TC_ALGOS_H
#define VC_CUDA_TC_ALGOS_H

#include "../ops/vc_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const vc_algo_t vc_algo_cuda_mask_gemm;
extern const vc_algo_t vc_algo_cuda_mask_gemm_wgmma;
extern const vc_algo_t vc_algo_cuda_mask_gemm_im2col;

/* Shared memory of the tiles (cuda_mask_gemm.cu). A tile whose block needs
 * more than the device allows (vc_cuda_state_t::smem_optin: 99 KB on sm_86 /
 * sm_89) is not eligible there: params_supported() is 0 for it, run()
 * returns UNSUPPORTED, `voxconv info --kernels` shows eligible 0. Both
 * functions are pure (no device), for tests. */
/* Dynamic shared memory in bytes of the tile of algo ("mask_gemm",
 * "mask_gemm_wgmma", "mask_gemm_im2col"; "mask_gemm_i8": the int8 forward
 * tiles of cuda_int8.cu, pass FWD, acc16 0) for pass (FWD, DGRAD, WGRAD),
 * tile ID and accumulator (acc16 1: fp16, forward / dgrad); -1 when there is
 * no such tile (im2col: tile 0, forward, fp32 only). */
long vc_mask_gemm_tile_dyn_smem(const char *algo, voxconv_pass_t pass, int tile,
                                int acc16);
/* The same for the int8 tiles alone (cuda_int8.cu); -1 outside 0..17. */
long vc_int8_tile_dyn_smem(int tile);
/* Whether a kernel with dyn bytes of dynamic shared memory fits a limit of
 * `limit` bytes per block: 1 yes, 0 no, -1 only its static shared memory
 * (ptxas's figure for the device's image, at most a few KB) can tell. */
int vc_smem_fit(size_t dyn, size_t limit);

#define VC_CUDA_TC_ALGO_LIST                                                  \
  &vc_algo_cuda_mask_gemm, &vc_algo_cuda_mask_gemm_wgmma,                    \
      &vc_algo_cuda_mask_gemm_im2col,

#ifdef __cplusplus
}
#endif
#endif
