/* CUDA algorithm records, listed into the registry (src/ops/algo.c). Add a
 * record here and to VC_CUDA_ALGO_LIST when adding a CUDA algorithm. */
#ifndef VC_CUDA_ALGOS_H
#define VC_CUDA_ALGOS_H

#include "../ops/vc_algo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Filled in by the CUDA backend. Empty until its algorithms exist. */
#define VC_CUDA_ALGO_LIST

#ifdef __cplusplus
}
#endif
#endif
