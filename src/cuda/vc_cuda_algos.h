/* CUDA algorithm records, listed into the registry (src/ops/algo.c). Add a
 * record here and to VC_CUDA_ALGO_LIST when adding a CUDA algorithm.
 *
 *  explicit_gemm       gather -> cuBLAS GEMMs over the kernel offsets (fp32
 *                      products) -> scatter-add with float atomics (fwd,
 *                      dgrad); wgrad gathers both operands, tensor-core
 *                      GEMMs over chunks of 256 pairs, fp32 partials summed
 *                      in order. cin <= 8 goes through im2col on the
 *                      neighbour tables instead. Not deterministic (atomic
 *                      scatter order).
 *  explicit_gemm_det   the same GEMMs; the scatter is a gather-reduce per
 *                      output row in kernel-offset order. Deterministic.
 *  implicit_gemm       fused gather-GEMM-scatter SIMT kernels (fp32 FMA):
 *                      forward over output rows (nbr_out), dgrad over input
 *                      rows (nbr_in) with W^T, wgrad over equal-length
 *                      chunks of each offset's pairs, partials added with
 *                      float atomics.
 *                      Params: fwd_block_size (fwd/dgrad), gemm_block_size
 *                      and split_k_factor (wgrad). Not deterministic.
 *  implicit_gemm_det   the same, wgrad chunk partials summed in a fixed
 *                      order through a workspace. Deterministic.
 *  depthwise_explicit  pair-parallel depthwise conv with float atomics.
 *  depthwise_implicit  row-parallel depthwise conv (nbr tables), wgrad with
 *                      fixed-order partial sums. Deterministic. */
#ifndef VC_CUDA_ALGOS_H
#define VC_CUDA_ALGOS_H

#include "../ops/vc_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const vc_algo_t vc_algo_cuda_explicit_gemm;
extern const vc_algo_t vc_algo_cuda_explicit_gemm_det;
extern const vc_algo_t vc_algo_cuda_implicit_gemm;
extern const vc_algo_t vc_algo_cuda_implicit_gemm_det;
extern const vc_algo_t vc_algo_cuda_depthwise_explicit;
extern const vc_algo_t vc_algo_cuda_depthwise_implicit;

/* Order = the heuristic's last tie-breaker (dispatch takes the first record
 * that supports a problem when nothing else decides): explicit_gemm_det
 * first, measured fastest of these on workload A/C (H200, all dtypes) and
 * deterministic; the SIMT implicit kernels last (they need no large
 * workspace, but compute every (row, offset) slot of a non-empty tile). */
#define VC_CUDA_ALGO_LIST                                                      \
  &vc_algo_cuda_explicit_gemm_det, &vc_algo_cuda_explicit_gemm,                \
      &vc_algo_cuda_implicit_gemm_det, &vc_algo_cuda_implicit_gemm,            \
      &vc_algo_cuda_depthwise_implicit, &vc_algo_cuda_depthwise_explicit,

#ifdef __cplusplus
}
#endif
#endif
