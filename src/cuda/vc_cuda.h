/* The boundary between the C host code and the CUDA backend: every function
 * here is extern "C", defined in a .cu file of src/cuda, and only called
 * when VOXCONV_HAVE_CUDA is defined. Each returns a voxconv status; a CUDA
 * error becomes VOXCONV_STATUS_CUDA_ERROR (or ALLOC_FAILED) with the CUDA
 * error name in the handle's message. */
#ifndef VC_CUDA_H
#define VC_CUDA_H

#include "../coords/vc_kmap.h"
#include "../core/vc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* device / handle (cuda_runtime.cu) */
voxconv_status_t vc_cuda_device_count(int *count);
voxconv_status_t vc_cuda_device_info(int device, voxconv_device_info_t *info);
voxconv_status_t vc_cuda_handle_init(voxconv_handle_t *h);
void vc_cuda_handle_fini(voxconv_handle_t *h);
voxconv_status_t vc_cuda_alloc(voxconv_handle_t *h, size_t bytes, void **ptr);
void vc_cuda_free(voxconv_handle_t *h, void *ptr);
voxconv_status_t vc_cuda_memcpy(voxconv_handle_t *h, void *dst,
                                const void *src, size_t bytes,
                                voxconv_memcpy_kind_t kind);
voxconv_status_t vc_cuda_synchronize(voxconv_handle_t *h);
voxconv_status_t vc_cuda_stream_create(voxconv_handle_t *h, int high,
                                       void **stream);
voxconv_status_t vc_cuda_stream_destroy(voxconv_handle_t *h, void *stream);
voxconv_status_t vc_cuda_stream_wait(voxconv_handle_t *h, void *other);
/* 1 while h's stream is being captured into a CUDA graph (see
 * vc_stream_capturing in vc_core.h). */
int vc_cuda_stream_capturing(const voxconv_handle_t *h);
/* Bytes of memory of h's device (0 when the query fails). */
size_t vc_cuda_device_memory(const voxconv_handle_t *h);
/* The per-block shared-memory limit a handle uses given the text of the
 * test knob VOXCONV_CUDA_SMEM_LIMIT (NULL: unset) and the device's opt-in
 * figure: bytes ("101376") or KiB ("99K"), only ever lower than the
 * device's; anything else leaves the device's. Pure (tests). */
size_t vc_smem_limit_from_env(const char *text, size_t device);

/* coordinates (cuda_kmap.cu, cuda_voxelize.cu) */
/* flags: VC_BUILD_DEFER, voxconv_kmap_build_async (a STRIDED build leaves
 * n_out on the device until the map completes); VC_BUILD_PRESET, the
 * build worker's: the caller's thread has set what the host knows of the
 * asynchronous build (vc_cuda_kmap_preset_async), which the build then
 * leaves alone (that thread may read it meanwhile). */
#define VC_BUILD_DEFER 1
#define VC_BUILD_PRESET 2
voxconv_status_t vc_cuda_kmap_build(voxconv_handle_t *h, voxconv_kmap_t *kmap,
                                    const voxconv_coords_t *in,
                                    const voxconv_coords_t *out, int flags);
/* 1 when the build of kmap (desc, n_in and kvol set) on h would be
 * asynchronous: then sets pending, n_out and n_pairs as that build would.
 * 0 (nothing set) otherwise. */
int vc_cuda_kmap_preset_async(voxconv_handle_t *h, voxconv_kmap_t *kmap,
                              int flags);
/* Makes kmap's pair lists (in_rows / out_rows) usable on h's stream:
 * writes them on their first need (a build leaves them to it: cuda_kmap.cu
 * step 6), else makes h's stream wait for their write if another stream
 * made it. Every reader of in_rows / out_rows calls this first. `func`
 * prefixes messages; UNSUPPORTED for a first need inside a CUDA graph
 * capture of a map built before the capture. */
voxconv_status_t vc_cuda_kmap_pairs(voxconv_handle_t *h,
                                    const voxconv_kmap_t *kmap,
                                    const char *func);
/* The tables of a map written on first need (pair lists, row orders,
 * tile masks), each on the stream of the handle that needs it.
 * vc_cuda_kmap_lazy_lock takes the map's lock (on failure it is released)
 * and orders h's stream after every such table written on another stream
 * (inside a capture, which cannot wait on an event recorded outside it,
 * the host waits once). *keep (if not NULL): 1 when a table written now
 * may be kept with the map, 0 inside a capture of a map built before it
 * (the table would exist only in the graph's replays, and eager calls
 * would read memory never written). vc_cuda_kmap_lazy_unlock releases the
 * lock; `wrote`: h's stream has just queued a table's write (outside a
 * capture, an event recorded after it orders the other streams' users). */
/* 1 for a map built while its stream was being captured. */
int vc_cuda_kmap_captured(const voxconv_kmap_t *kmap);
/* voxconv_kmap_prepare on CUDA (cuda_row_order.cu): the checks of the
 * public call are done, the map is issued. */
voxconv_status_t vc_cuda_kmap_prepare(voxconv_handle_t *h,
                                      const voxconv_kmap_t *kmap,
                                      unsigned what, const char *func);
voxconv_status_t vc_cuda_kmap_lazy_lock(voxconv_handle_t *h,
                                        const voxconv_kmap_t *kmap,
                                        const char *func, int *keep);
voxconv_status_t vc_cuda_kmap_lazy_unlock(voxconv_handle_t *h,
                                          const voxconv_kmap_t *kmap,
                                          int wrote);
/* h's stream waits on the GPU for kmap's build (voxconv_kmap_order). */
voxconv_status_t vc_cuda_kmap_order(voxconv_handle_t *h,
                                    const voxconv_kmap_t *kmap);
/* Prepares the calling thread (a library thread) to issue work for h:
 * h's device current, stream-capture mode relaxed (its calls must not
 * invalidate a capture another thread runs meanwhile). */
void vc_cuda_thread_init(const voxconv_handle_t *h);
void vc_cuda_kmap_free_priv(voxconv_handle_t *h, voxconv_kmap_t *kmap);
/* Pools of destroyed handles that still held memory (maps outliving their
 * handle; cuda_runtime.cu) are destroyed once empty: reap checks them (one
 * atomic load when there are none; called after a map is destroyed and at
 * handle creation and destruction), retired_pools counts them (tests). */
void vc_cuda_reap_pools(void);
int vc_cuda_retired_pools(void);
/* Completes an asynchronous build when it has finished (wait = 0: never
 * blocks; 1: waits for the build's event) and returns its verdict
 * (cuda_kmap_async.cu; vc_kmap_poll / vc_kmap_wait in vc_kmap.h). */
voxconv_status_t vc_cuda_kmap_poll(voxconv_handle_t *h,
                                   const voxconv_kmap_t *kmap, int wait,
                                   const char *func);
/* How many times the build of `kmap` had to retry after a GPU hash table
 * overflow (0 normally; > 0 under VOXCONV_CUDA_HASH_TINY=1), -1 when the
 * map has no CUDA extras. For tests. */
int vc_cuda_kmap_hash_retries(const voxconv_kmap_t *kmap);
voxconv_status_t vc_cuda_coords_fingerprint(voxconv_handle_t *h,
                                            const int32_t *coords, int64_t n,
                                            uint64_t *fingerprint);
voxconv_status_t vc_cuda_merge_duplicates(voxconv_handle_t *h,
                                          const voxconv_coords_t *in,
                                          int32_t *out_coords,
                                          int64_t *n_unique, int64_t *row_map);
voxconv_status_t vc_cuda_voxelize(voxconv_handle_t *h,
                                  const voxconv_voxelize_desc_t *desc,
                                  const voxconv_points_t *points,
                                  int32_t n_feat, int32_t *coords_out,
                                  float *feats_out, int64_t *n_voxels,
                                  int64_t *point_voxel);

/* int8 feature conversion (cuda_quantize.cu); validated by the caller:
 * x float -> y I8 (dequantize 0) or x I8 -> y float */
voxconv_status_t vc_cuda_quantize(voxconv_handle_t *h, int dequantize,
                                  const voxconv_feats_t *x, float scale,
                                  const voxconv_feats_t *y);

/* pooling (cuda_pool.cu); validation done by the caller */
voxconv_status_t vc_cuda_pool_forward(voxconv_handle_t *h,
                                      const voxconv_kmap_t *kmap,
                                      voxconv_pool_mode_t mode,
                                      const voxconv_feats_t *x,
                                      const voxconv_feats_t *y);
voxconv_status_t vc_cuda_pool_backward(voxconv_handle_t *h,
                                       const voxconv_kmap_t *kmap,
                                       voxconv_pool_mode_t mode,
                                       const voxconv_feats_t *x,
                                       const voxconv_feats_t *y,
                                       const voxconv_feats_t *dy,
                                       const voxconv_feats_t *dx);
voxconv_status_t vc_cuda_unpool_forward(voxconv_handle_t *h,
                                        const voxconv_kmap_t *kmap,
                                        const voxconv_feats_t *x,
                                        const voxconv_feats_t *y);
voxconv_status_t vc_cuda_unpool_backward(voxconv_handle_t *h,
                                         const voxconv_kmap_t *kmap,
                                         const voxconv_feats_t *dy,
                                         const voxconv_feats_t *dx);

/* compiled kernel variants for `voxconv info --kernels` (cuda_mask_gemm.cu) */
int vc_cuda_kernel_count(void);
voxconv_status_t vc_cuda_kernel_info(voxconv_handle_t *h, int index,
                                     voxconv_kernel_info_t *info);

/* int8 convolution (cuda_int8.cu): the validated problem of
 * voxconv_conv_forward_int8 / voxconv_depthwise_forward_int8 (vc_int8.h),
 * and its tensor-core tiles for `voxconv info --kernels` (listed after
 * the float kernels). */
struct vc_int8_problem;
/* Runs p: depthwise ignores `tile` and `split`; the regular conv runs
 * mask_gemm_i8 tile `tile` (the int8 tuner's choice; UNSUPPORTED when this
 * device cannot run it) with its kernel offsets split `split` ways (1..
 * VC_INT8_MAX_SPLIT; 1 = none): the same bits either way. */
voxconv_status_t vc_cuda_conv_int8(voxconv_handle_t *h,
                                   const struct vc_int8_problem *p, int tile,
                                   int split);
/* The split worth trying for tile on p (its grid fills at most half of
 * the GPU), or 1. */
int vc_cuda_int8_split_of(voxconv_handle_t *h,
                          const struct vc_int8_problem *p, int tile);
/* 1 when tile runs on h's device (sm_90a for the wgmma tiles, shared
 * memory); the table's untuned choice for p (by channel counts). */
int vc_cuda_int8_tile_usable(voxconv_handle_t *h, int tile);
int vc_cuda_int8_default_tile(voxconv_handle_t *h,
                              const struct vc_int8_problem *p);
/* The tile whose kernel runs `tile` on p (tile 18 off the problems its
 * own kernel takes runs pick_tile's). */
int vc_cuda_int8_tile_runs_as(voxconv_handle_t *h,
                              const struct vc_int8_problem *p, int tile);
int vc_cuda_int8_tile_count(void);
voxconv_status_t vc_cuda_int8_tile_info(voxconv_handle_t *h, int tile,
                                        voxconv_kernel_info_t *info);

/* tuner support (cuda_tune.cu, owned by the tuner). A timer is a pair of
 * CUDA events on the handle's stream: start records the first, stop records
 * the second, waits for it and returns the elapsed milliseconds (and frees
 * the timer); discard frees it without waiting. tune_check compares two
 * device buffers of n elements (dtype) as vc_check_host does (src/tune),
 * with the bound's S (n floats, may be NULL) and factor acc, and returns
 * the four numbers to the host (one synchronisation; *max_ratio = -1 when
 * s is NULL). tune_abs_f32 writes |src| as floats into dst (n elements,
 * queued on the stream). */
voxconv_status_t vc_cuda_timer_start(voxconv_handle_t *h, void **timer);
voxconv_status_t vc_cuda_timer_stop(voxconv_handle_t *h, void *timer,
                                    double *ms);
void vc_cuda_timer_discard(voxconv_handle_t *h, void *timer);
voxconv_status_t vc_cuda_tune_check(voxconv_handle_t *h, const void *got,
                                    const void *ref, voxconv_dtype_t dtype,
                                    int64_t n, const float *s, double acc,
                                    double *max_rel, double *norm_rel,
                                    double *max_ratio, int64_t *n_nonfinite);
voxconv_status_t vc_cuda_tune_abs_f32(voxconv_handle_t *h, const void *src,
                                      voxconv_dtype_t dtype, int64_t n,
                                      float *dst);
/* *n_diff = how many of the `bytes` bytes of a and b (device memory)
 * differ; waits for the stream (the int8 tuner's bitwise check). */
voxconv_status_t vc_cuda_count_diff(voxconv_handle_t *h, const void *a,
                                    const void *b, int64_t bytes,
                                    int64_t *n_diff);

/* The cached row order of kmap's output side (dgrad = 1: input side) that
 * the tensor-core convolutions tile over, made if absent, and with
 * want_masks the 128-row tile masks of that order (*tile_mask NULL for
 * kvol > 32 or without want_masks); queued on h's stream
 * (cuda_row_order.cu). For tests; not inside a CUDA graph capture of a
 * map built before it (INTERNAL: such tables live in an op's workspace). */
voxconv_status_t vc_cuda_row_order(voxconv_handle_t *h,
                                   const voxconv_kmap_t *kmap, int dgrad,
                                   int want_masks, const int32_t **order,
                                   const uint32_t **tile_mask);

/* Registered CUDA algorithms (see vc_algo.h for the record type). The
 * registry in src/ops/algo.c lists them when VOXCONV_HAVE_CUDA is set. */

#ifdef __cplusplus
}
#endif
#endif
