/* Shared pieces of the CUDA convolution algorithms (explicit GEMM, implicit
 * GEMM, depthwise): the common supports() test, typed dispatch over the
 * three feature dtypes, kernel-map offsets passed by value to kernels, a
 * carve-up of one workspace block into aligned sub-buffers, and small
 * device helpers. Included by cuda_explicit_gemm.cu, cuda_implicit_gemm.cu
 * and cuda_depthwise.cu only. */
#ifndef VC_CUDA_CONV_COMMON_CUH
#define VC_CUDA_CONV_COMMON_CUH

#include "vc_cuda_algos.h"
#include "vc_cuda_util.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdint.h>
#include <string.h>

/* ---- which problems a CUDA conv algorithm can take ---------------------- */
/* Common conditions of every CUDA conv record: a CUDA handle, a map built on
 * that backend, an f32/f16/bf16 problem (F64 is the CPU reference path), a
 * pass the record implements, and (when the caller asked for determinism)
 * a record that is bitwise reproducible. fp16 accumulators are never used
 * by these algorithms: fp16_accum only permits them, so it is ignored. */
static inline int vcc_supports_common(const vc_algo_t *a,
                                      const voxconv_handle_t *h,
                                      const vc_conv_problem_t *p) {
  if (!h || !p || !p->kmap || h->backend != VOXCONV_BACKEND_CUDA || !h->cuda)
    return 0;
  if (p->kmap->backend != VOXCONV_BACKEND_CUDA)
    return 0;
  if (p->dtype != VOXCONV_DTYPE_F32 && p->dtype != VOXCONV_DTYPE_F16 &&
      p->dtype != VOXCONV_DTYPE_BF16)
    return 0;
  if (!(a->info.passes & (1u << p->pass)))
    return 0;
  if (p->deterministic && !a->info.deterministic)
    return 0;
  if (p->cin <= 0 || p->cout <= 0)
    return 0;
  return 1;
}

static inline int vcc_is_depthwise(voxconv_pass_t pass) {
  return pass == VOXCONV_PASS_DEPTHWISE_FWD ||
         pass == VOXCONV_PASS_DEPTHWISE_DGRAD ||
         pass == VOXCONV_PASS_DEPTHWISE_WGRAD;
}

/* ---- kernel-map offsets by value ---------------------------------------
 * Pair ranges per kernel offset live on the host (kmap->pair_offsets);
 * kernels that need them get this struct as a by-value parameter (2.7 KB,
 * under the 4 KB parameter limit), which needs no copy and no sync. */
typedef struct vcc_pair_offsets {
  int64_t po[VOXCONV_KERNEL_VOLUME_MAX + 1];
} vcc_pair_offsets_t;

static inline void vcc_fill_pair_offsets(const voxconv_kmap_t *kmap,
                                         vcc_pair_offsets_t *o) {
  memset(o, 0, sizeof *o);
  if (!kmap->pair_offsets)
    return; /* pending: callers wait for the map first (vc_kmap_wait) */
  for (int k = 0; k <= kmap->kvol; k++)
    o->po[k] = kmap->pair_offsets[k];
}

/* Largest pair count of any single offset. */
static inline int64_t vcc_max_pairs_per_offset(const voxconv_kmap_t *kmap) {
  int64_t m = 0;
  for (int k = 0; k < kmap->kvol; k++) {
    const int64_t c = kmap->pair_offsets[k + 1] - kmap->pair_offsets[k];
    if (c > m)
      m = c;
  }
  return m;
}

/* ---- pair chunks (weight gradients) -------------------------------------
 * Offset k's pairs are cut into ceil(P_k / L) chunks of L pairs (the last
 * one shorter); chunks are numbered offset by offset. A weight gradient
 * computes one fp32 partial per chunk and sums them in chunk order, which
 * bounds every sequential (or tensor-core) accumulation chain to L pairs
 * and makes the result independent of scheduling. */
static __host__ __device__ __forceinline__ int64_t
vcc_chunks_of(const vcc_pair_offsets_t &po, int k, int64_t L) {
  return (po.po[k + 1] - po.po[k] + L - 1) / L;
}

static inline int64_t vcc_total_chunks(const voxconv_kmap_t *km, int64_t L) {
  int64_t n = 0;
  for (int k = 0; k < km->kvol; k++)
    n += (km->pair_offsets[k + 1] - km->pair_offsets[k] + L - 1) / L;
  return n;
}

/* dw[k][e] = sum over offset k's chunks c (in chunk order) of
 * part[c][e] (slab = cin * cout elements per chunk); offsets without
 * pairs get 0. */
template <typename T>
static __global__ void vcc_chunk_reduce_kernel(const float *__restrict__ part,
                                               T *__restrict__ dw,
                                               const vcc_pair_offsets_t po,
                                               int kvol, int64_t slab,
                                               int64_t L) {
  const int64_t elems = (int64_t)kvol * slab;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < elems;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int k = (int)(e / slab);
    const int64_t within = e - (int64_t)k * slab;
    int64_t first = 0;
    for (int j = 0; j < k; j++)
      first += vcc_chunks_of(po, j, L);
    const int64_t n = vcc_chunks_of(po, k, L);
    float s = 0.f;
    for (int64_t c = 0; c < n; c++)
      s += part[(first + c) * slab + within];
    VcDtype<T>::store(dw + e, s);
  }
}

/* ---- one workspace block, several aligned sub-buffers ------------------
 * workspace_size() and run() both walk the same sequence of take() calls:
 * with base == NULL it only measures, so the two can never disagree. */
typedef struct vcc_carver {
  char *base;
  size_t used;
} vcc_carver_t;

static inline void *vcc_take(vcc_carver_t *c, size_t bytes) {
  const size_t align = 256;
  c->used = (c->used + align - 1) / align * align;
  void *p = c->base ? (void *)(c->base + c->used) : NULL;
  c->used += bytes;
  return p;
}

/* Row stride (elements) of gathered buffers: rounded to 8 elements so that
 * each row starts 16-byte aligned (cuBLAS tensor-core kernels need it). */
static inline int64_t vcc_padded_ld(int64_t channels) {
  return (channels + 7) / 8 * 8;
}

/* ---- typed dispatch ------------------------------------------------------ */
/* Calls F<T>::run(args...) with T the C++ type of dtype. */
#define VCC_DISPATCH_DTYPE(dtype, FN, ...)                                     \
  ((dtype) == VOXCONV_DTYPE_F32    ? FN<float>(__VA_ARGS__)                    \
   : (dtype) == VOXCONV_DTYPE_F16  ? FN<__half>(__VA_ARGS__)                   \
   : (dtype) == VOXCONV_DTYPE_BF16 ? FN<__nv_bfloat16>(__VA_ARGS__)            \
                                   : VOXCONV_STATUS_INTERNAL)

static inline size_t vcc_dtype_bytes(voxconv_dtype_t dt) {
  return dt == VOXCONV_DTYPE_F32 ? 4 : 2;
}

/* ---- device helpers ---------------------------------------------------- */
template <typename T> static __device__ __forceinline__ float vcc_ld(const T *p) {
  return VcDtype<T>::load(p);
}
template <typename T>
static __device__ __forceinline__ void vcc_st(T *p, float v) {
  VcDtype<T>::store(p, v);
}

/* Converts an f32 buffer to dtype T (grid-stride). */
template <typename T>
static __global__ void vcc_convert_f32_kernel(const float *__restrict__ src,
                                              T *__restrict__ dst, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    vcc_st(dst + i, src[i]);
}

template <typename T>
static inline voxconv_status_t vcc_convert_f32(voxconv_handle_t *h,
                                               const float *src, T *dst,
                                               int64_t n) {
  if (n <= 0)
    return VOXCONV_STATUS_SUCCESS;
  vcc_convert_f32_kernel<T>
      <<<vc_grid_1d(n, 256, 65536), 256, 0, vc_cuda_stream(h)>>>(src, dst, n);
  VC_CUDA_LAUNCH_CHECK(h, "vcc_convert_f32_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* A workspace of at least `need` bytes: the caller's one, or a temporary
 * one from `scope` when the caller passed none (direct callers of run()). */
static inline voxconv_status_t vcc_workspace(VcWorkspace &scope, void *given,
                                             size_t need, char **out) {
  *out = (char *)given;
  if (need == 0 || given)
    return VOXCONV_STATUS_SUCCESS;
  return scope.get<char>((int64_t)need, out, "conv algorithm workspace");
}

#endif
