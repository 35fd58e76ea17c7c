/*
 * voxconv.h — spatially sparse 3D convolution on voxel grids.
 *
 * This header is the manual. Everything a program needs is declared and
 * documented here; nothing else is installed.
 *
 * ------------------------------------------------------------------------
 * Model
 * ------------------------------------------------------------------------
 * A sparse tensor is a set of N active voxels with int32 coordinates
 * (batch, x, y, z) stored row-major as coords[N*4], plus features feats[N*C]
 * (row-major, contiguous). Coordinates are integer voxel indices in the
 * tensor's own grid; `tensor_stride` records that grid's pitch in units of
 * the finest grid (1 for the input of a network, 2 after one stride-2
 * downsampling, ...). The library propagates and checks tensor strides but
 * never rescales coordinates by them.
 *
 * A kernel map (voxconv_kmap_t) says, for each kernel offset k, which input
 * rows feed which output rows. It is built once per (coordinates, geometry)
 * and reused by forward, both backward passes and every layer that shares
 * the geometry.
 *
 * Kernel offsets. Along an axis with kernel size k, dilation d and padding
 * P, the offsets are off(j) = j*d - P for j = 0..k-1. By default (desc
 * padded = 0) P = floor((k-1)/2)*d: centred for odd k ({-1,0,1} for k=3),
 * starting at 0 for k=2 ({0,1}), {-1,0,1,2} for k=4. With padded = 1, P is
 * the caller's padding[] (spconv's and PyTorch's `padding`). The flat
 * offset index is kidx = (jx*ky + jy)*kz + jz (x slowest), so weights are
 * [K][Cin][Cout] with K = kx*ky*kz in that order; off_k is the vector
 * (off(jx), off(jy), off(jz)). A map built with desc offset_order =
 * VOXCONV_OFFSET_ORDER_X_FASTEST numbers its offsets kidx = (jz*ky + jy)*kx
 * + jx instead (MinkowskiEngine's order), with the same pairs under the
 * other index, so weights stored in that order need no reordering.
 *
 * Modes (o = output voxel, i = input voxel, same batch, s = stride; every
 * relation holds per axis):
 *  SUBMANIFOLD  outputs = inputs;            pair (i,o,k) iff i = o + off_k
 *  STRIDED      outputs = unique floor(i/s); pair (i,o,k) iff i = s*o + off_k
 *  EXPANDING    outputs = every o some input reaches, i.e. i = s*o + off_k
 *               for some input i and offset k (inside out_shape when given);
 *                                            pair (i,o,k) iff i = s*o + off_k
 *               (spconv's SparseConv3d / a dense conv3d's active outputs)
 *  TRANSPOSED   outputs given by the caller (usually the encoder's finer
 *               coordinates);                pair (i,o,k) iff o = s*i + off_k
 *  GENERATIVE   outputs = unique {s*i + off_k} over all inputs and offsets
 *               (inside out_shape when given); pairs as TRANSPOSED
 *               (spconv's SparseConvTranspose3d with padded = 1).
 * The forward op is then  y[o] = sum over pairs (i,o,k) of x[i] * W[k]
 * (a cross-correlation: torch.nn.functional.conv3d for SUBMANIFOLD,
 * STRIDED and EXPANDING, conv_transpose3d for TRANSPOSED and GENERATIVE,
 * with padding P and the map's stride and dilation, evaluated at the output
 * sites). voxconv_kmap_inverse reverses a STRIDED or EXPANDING map
 * (spconv's SparseInverseConv3d). Details and limits: "kernel maps" below.
 *
 * Determinism of maps. Output coordinates of STRIDED, EXPANDING and
 * GENERATIVE maps are sorted ascending by (batch, x, y, z). Within offset
 * k, pairs are sorted by output row. Every backend produces the same map,
 * element for element.
 *
 * Coordinate limits. x, y, z must lie in [-131071, 131071]
 * (VOXCONV_COORD_MIN..VOXCONV_COORD_MAX) and batch in [0, 1023]
 * (VOXCONV_BATCH_MAX); this is what the 64-bit hash key holds. Neighbours that
 * fall outside the range simply do not exist; output coordinates that an
 * EXPANDING or GENERATIVE map would create outside it (on an axis without
 * out_shape) are an error (OUT_OF_RANGE naming the input row, offset and
 * value), never wrapped.
 *
 * ------------------------------------------------------------------------
 * Memory, backends, errors
 * ------------------------------------------------------------------------
 * The handle carries the backend (CPU, or one CUDA device and a stream).
 * Every data pointer given to an op lives in that backend's memory (host
 * memory for CPU, device memory for CUDA); voxconv_malloc / voxconv_memcpy
 * give backend-neutral access. The caller owns its buffers; outputs are
 * overwritten, never accumulated into. Objects the library creates (kernel
 * maps) are freed with the handle that created them.
 *
 * Every function returns voxconv_status_t. On failure the handle keeps a
 * message with context (voxconv_get_last_error); functions without a handle
 * (or given a NULL one) keep it per thread. The library never prints to
 * stdout, never exits and never aborts. A handle may be used by one thread at
 * a time; different handles are independent.
 *
 * Precision. Features and weights are f32, f16 or bf16 (f64 on the CPU, the
 * reference path). x, W and y of one op share a dtype. f16/bf16 accumulate in
 * f32 unless the fp16 accumulator is resolved on for a call (see
 * voxconv_conv_options_t); weight gradients always accumulate in f32.
 * NaN and Inf in features propagate as in a dense convolution.
 *
 * ------------------------------------------------------------------------
 * Environment variables (all optional; details next to each feature)
 * ------------------------------------------------------------------------
 *  VOXCONV_NUM_THREADS       CPU threads per handle (default: all cores)
 *  VOXCONV_CPU_ISA           CPU kernels: auto | avx512 | avx2 | portable
 *                            (an unknown or unsupported name makes the CPU
 *                            conv return INVALID_ARGUMENT)
 *  VOXCONV_FWD_ALGO_MODE, VOXCONV_BWD_ALGO_MODE, VOXCONV_DGRAD_ALGO_MODE,
 *  VOXCONV_WGRAD_ALGO_MODE, VOXCONV_DEPTHWISE_CONV_FWD_ALGO_MODE,
 *  VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE
 *                            default algorithm selection per pass (see
 *                            "Autotuning" below)
 *  VOXCONV_USE_FP16_ACCUM    initial global fp16-accumulator switch
 *  VOXCONV_F16ACC_SMALL_CH_CEIL  channels up to which fp16-accumulator
 *                            tiles join the pool anyway (default 0: never)
 *  VOXCONV_BENCHMARK_CACHE_DIR   tuning-cache folder (~/.cache/voxconv)
 *  VOXCONV_AUTOTUNE_LOG      0 silences the tuner's progress line (stderr)
 *  VOXCONV_AUTOTUNE_RUNS, VOXCONV_AUTOTUNE_WARMUP,
 *  VOXCONV_AUTOTUNE_MAX_CANDIDATES, VOXCONV_AUTOTUNE_MAX_REL
 *                            tuner effort and its correctness threshold
 *  VOXCONV_ALLOC_CACHE_MB    idle MiB a handle keeps from the caller's
 *                            allocator for reuse (default 1/16 of device
 *                            memory, at least 1024; 0: off; see
 *                            voxconv_allocator_t)
 *  VOXCONV_KMAP_SYNC         1: CUDA SUBMANIFOLD map builds wait for their
 *                            verdict, so bad coordinates fail the build
 *                            call itself (see Kernel maps)
 *  VOXCONV_CUDA_HASH_TINY    testing only: start GPU hash tables tiny to
 *                            exercise the overflow-and-retry path
 *  VOXCONV_KMAP_LEAN         tests and benchmarks: 0 builds CUDA maps the
 *                            longer way (multi-block scans and sorts on
 *                            small inputs; a STRIDED build with kernel =
 *                            stride hashes its input up front instead of,
 *                            from 65,536 rows, only on a duplicate row; the
 *                            row order of a map of at most 8,192 rows by
 *                            CUB instead of one block; the pair lists
 *                            written by the build, not on first need); the
 *                            maps, orders and errors are the same
 *  VOXCONV_CUDA_SMEM_LIMIT   testing only: shared memory per block a CUDA
 *                            handle assumes the GPU allows, in bytes
 *                            ("101376") or KiB ("99K", sm_86's limit); only
 *                            lowers the device's own figure; read at handle
 *                            creation. Tiles over it are not eligible (see
 *                            voxconv_kernel_info_t), as on a smaller GPU
 *  VOXCONV_INT8_TILE         tests and benchmarks: the mask_gemm_i8 tile ID
 *                            every CUDA int8 conv uses ("auto" or unset: the
 *                            int8 tuner's choice; see the int8 section)
 *  VOXCONV_INT8_SPLIT        tests and benchmarks, with VOXCONV_INT8_TILE:
 *                            split that tile's kernel offsets into 1-64
 *                            slices (split-K; the same bits; int8 section)
 */
#ifndef VOXCONV_H
#define VOXCONV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(VOXCONV_BUILDING_SHARED)
#define VOXCONV_API __declspec(dllexport)
#elif defined(__GNUC__)
#define VOXCONV_API __attribute__((visibility("default")))
#else
#define VOXCONV_API
#endif

/* ---- version ---------------------------------------------------------- */
#define VOXCONV_VERSION_MAJOR 0
#define VOXCONV_VERSION_MINOR 1
#define VOXCONV_VERSION_PATCH 0
#define VOXCONV_VERSION_NUMBER                                                 \
  (VOXCONV_VERSION_MAJOR * 10000 + VOXCONV_VERSION_MINOR * 100 +               \
   VOXCONV_VERSION_PATCH)
#define VOXCONV_VERSION_STRING "0.1.0"

/* Runtime version (VOXCONV_VERSION_NUMBER of the library actually linked). */
VOXCONV_API unsigned voxconv_version_number(void);
VOXCONV_API const char *voxconv_version_string(void);

/* ---- limits -----------------------------------------------------------
 * Every entry point checks these and returns VOXCONV_STATUS_OUT_OF_RANGE
 * (or INVALID_ARGUMENT for geometry) naming the row and value, e.g.
 * "voxconv_kmap_build: in coords row 17: x=140000 outside ±131071",
 * "voxconv_voxelize: point 3: batch=-1 outside 0..1023"; a batch index or
 * coordinate beyond int32 cannot be passed at all, so callers that hold
 * wider integers must range-check before narrowing (the Python package
 * does, with the same messages: python/README.md, "Limits"). Limits of
 * the layers around the library: the voxconv tool reads scan files of at
 * most 16 GiB and 2^30 points (VT_SCAN_MAX_BYTES, VT_SCAN_MAX_POINTS in
 * tools/scan_io.h); the Python SparseTensor.dense() makes at most 2^31
 * elements per batch item by default (its max_elements_per_item). */
#define VOXCONV_COORD_MIN (-131071)
#define VOXCONV_COORD_MAX 131071
#define VOXCONV_BATCH_MAX 1023
#define VOXCONV_KERNEL_SIZE_MAX 7 /* per axis */
#define VOXCONV_KERNEL_VOLUME_MAX 343
#define VOXCONV_STRIDE_MAX 64
#define VOXCONV_DILATION_MAX 64

/* ---- status ----------------------------------------------------------- */
typedef enum voxconv_status {
  VOXCONV_STATUS_SUCCESS = 0,
  VOXCONV_STATUS_NULL_POINTER = 1,     /* a required pointer was NULL */
  VOXCONV_STATUS_INVALID_ARGUMENT = 2, /* bad enum, size, option, name */
  VOXCONV_STATUS_OUT_OF_RANGE = 3,     /* coordinate/batch beyond limits */
  VOXCONV_STATUS_DUPLICATE_COORDS = 4, /* same (b,x,y,z) twice, no merge */
  VOXCONV_STATUS_SHAPE_MISMATCH = 5,   /* rows/channels/kernel volume */
  VOXCONV_STATUS_DTYPE_MISMATCH = 6,   /* x, W, y dtypes differ */
  VOXCONV_STATUS_KMAP_MISMATCH = 7,    /* map not built for these coords */
  VOXCONV_STATUS_UNSUPPORTED = 8,      /* valid but not on this backend */
  VOXCONV_STATUS_ALLOC_FAILED = 9,     /* host or device allocation */
  VOXCONV_STATUS_BACKEND_UNAVAILABLE = 10, /* e.g. CUDA not built/no GPU */
  VOXCONV_STATUS_CUDA_ERROR = 11,      /* a CUDA runtime/cuBLAS error */
  VOXCONV_STATUS_IO_ERROR = 12,        /* file access (tuning cache) */
  VOXCONV_STATUS_INTERNAL = 13         /* a bug: please report */
} voxconv_status_t;

/* Static name of a status code, e.g. "VOXCONV_STATUS_OUT_OF_RANGE". */
VOXCONV_API const char *voxconv_status_string(voxconv_status_t status);

/* ---- dtypes ----------------------------------------------------------- */
typedef enum voxconv_dtype {
  VOXCONV_DTYPE_F32 = 0,
  VOXCONV_DTYPE_F16 = 1,
  VOXCONV_DTYPE_BF16 = 2,
  VOXCONV_DTYPE_F64 = 3, /* CPU reference path only */
  /* Integer dtypes, for the int8 ops only (voxconv_conv_forward_int8,
   * voxconv_depthwise_forward_int8): I8 features and weights, I32 the raw
   * accumulators as an output. Every other op refuses them
   * (VOXCONV_STATUS_UNSUPPORTED). */
  VOXCONV_DTYPE_I8 = 4,
  VOXCONV_DTYPE_I32 = 5
} voxconv_dtype_t;

VOXCONV_API size_t voxconv_dtype_size(voxconv_dtype_t dtype); /* 0 if bad */
VOXCONV_API const char *voxconv_dtype_name(voxconv_dtype_t dtype);

/* ---- handle ----------------------------------------------------------- */
typedef enum voxconv_backend {
  VOXCONV_BACKEND_AUTO = 0, /* CUDA if built and a device exists, else CPU */
  VOXCONV_BACKEND_CPU = 1,
  VOXCONV_BACKEND_CUDA = 2
} voxconv_backend_t;

/* Optional allocator for every temporary (and kernel-map) buffer. On CUDA
 * `stream` is the handle's cudaStream_t; on CPU it is NULL. alloc returns
 * NULL on failure.
 *
 * The handle keeps the blocks it frees and hands them out again to its own
 * later requests (on its one stream, so no synchronisation is needed), up
 * to VOXCONV_ALLOC_CACHE_MB idle MiB (default: 1/16 of the device's
 * memory on CUDA, at least 1024; 1024 on the CPU; 0: no cache, every
 * request goes to `alloc`). Requests are rounded up to a size class (powers
 * of two up to 1 MiB, then 1/8 steps), so `alloc` sees class sizes. When
 * `alloc` fails the handle gives its idle blocks back (`free`) and asks
 * once more. While the handle's stream is being captured into a CUDA graph
 * nothing is taken from or put into the cache. voxconv_set_stream to a
 * different stream, voxconv_release_cached_memory and voxconv_destroy
 * give the idle blocks back. */
typedef struct voxconv_allocator {
  void *(*alloc)(void *ctx, size_t bytes, void *stream);
  void (*free)(void *ctx, void *ptr, void *stream);
  void *ctx;
} voxconv_allocator_t;

typedef struct voxconv_handle_desc {
  voxconv_backend_t backend;
  int device;      /* CUDA device ordinal (CUDA backend) */
  void *stream;    /* cudaStream_t; NULL = the legacy default stream */
  const voxconv_allocator_t *allocator; /* NULL = built-in (copied) */
  int num_threads; /* CPU threads; 0 = VOXCONV_NUM_THREADS env or all cores */
  int deterministic; /* 1: bitwise-reproducible ops (see Determinism) */
} voxconv_handle_desc_t;

typedef struct voxconv_handle voxconv_handle_t;

/* desc == NULL means all defaults (AUTO backend). */
VOXCONV_API voxconv_status_t voxconv_create(voxconv_handle_t **handle,
                                            const voxconv_handle_desc_t *desc);
/* destroy(NULL) is a no-op. Destroy waits for the handle's stream. Kernel
 * maps the handle built may outlive it: use and destroy them through
 * another handle of the same device. With the built-in allocator their
 * buffers stay in the destroyed handle's memory pool, which the library
 * frees once the last of them is destroyed (the memory goes back to the
 * driver at the next synchronisation). */
VOXCONV_API voxconv_status_t voxconv_destroy(voxconv_handle_t *handle);
VOXCONV_API voxconv_status_t voxconv_get_backend(const voxconv_handle_t *h,
                                                 voxconv_backend_t *backend);
VOXCONV_API voxconv_status_t voxconv_set_stream(voxconv_handle_t *h,
                                                void *stream);
VOXCONV_API voxconv_status_t voxconv_set_deterministic(voxconv_handle_t *h,
                                                       int deterministic);
/* Wait for all work queued on the handle's stream (no-op on CPU). */
VOXCONV_API voxconv_status_t voxconv_synchronize(voxconv_handle_t *h);

/* Streams for overlapping independent work, e.g. building the next level's
 * kernel maps while this level's convolutions run (a map build waits for
 * its own stream once, so on the stream the convolutions use it would
 * drain their queue; `voxconv bench --maps overlap` shows the pattern).
 * Use one handle per stream: a handle's temporaries are ordered on its
 * stream, so two streams must not share one handle concurrently.
 *   voxconv_stream_create   a new non-blocking CUDA stream on h's device
 *                           (*stream = NULL on CPU, where every call is
 *                           synchronous anyway); pass it to a handle's
 *                           desc.stream or voxconv_set_stream
 *   voxconv_stream_destroy  releases it once its queued work is done
 *                           (NULL: no-op); no handle may use it afterwards
 *   voxconv_stream_wait     work queued on h's stream after this call runs
 *                           after everything queued on `other` before it
 *                           (a CUDA event; the host does not wait). `other`
 *                           must be a stream of h's device (NULL: the legacy
 *                           default stream); a no-op on CPU.
 * Kernel maps may be built on one handle and used and destroyed on another
 * of the same device (order them with voxconv_stream_wait). Every buffer of
 * a map, including those a convolution adds to it (mask_gemm's row
 * orders), is freed through the destroying handle's allocator on its
 * stream: handles that share maps must share one allocator (the built-in
 * one, or the same custom one: equal alloc, free and ctx), and the
 * destroying stream must be ordered after every use. Any call that takes
 * the map with a handle (an op, wait, order, get_pairs, verify, inverse,
 * destroy) through a handle with another allocator (or of another backend
 * or CUDA device) returns INVALID_ARGUMENT and leaves the map as it was. */
VOXCONV_API voxconv_status_t voxconv_stream_create(voxconv_handle_t *h,
                                                   void **stream);
VOXCONV_API voxconv_status_t voxconv_stream_destroy(voxconv_handle_t *h,
                                                    void *stream);
VOXCONV_API voxconv_status_t voxconv_stream_wait(voxconv_handle_t *h,
                                                 void *other);

/* voxconv_stream_create with a scheduling priority. HIGH is the greatest
 * priority the device offers: as SMs free up, the block scheduler starts
 * the pending blocks of a high-priority stream before those of normal
 * ones, so short work there is not queued behind a long convolution's
 * blocks. Build kernel maps on one when they overlap convolutions: each
 * build ends with the host waiting for its result, so in a network's
 * forward the chain of map builds is the critical path (H200, workload A:
 * forward 5.9-6.9 ms with the map stream at normal priority, 4.9 ms at
 * high; docs/perf-notes.md item 53). INVALID_ARGUMENT for another value;
 * *stream = NULL on CPU. */
typedef enum voxconv_stream_priority {
  VOXCONV_STREAM_PRIORITY_NORMAL = 0,
  VOXCONV_STREAM_PRIORITY_HIGH = 1
} voxconv_stream_priority_t;
VOXCONV_API voxconv_status_t voxconv_stream_create_priority(
    voxconv_handle_t *h, voxconv_stream_priority_t priority, void **stream);

/* Timing library calls the way benchmarks should: on a CUDA handle a pair
 * of CUDA events on the handle's stream, so the result is the time the GPU
 * took from start to stop (host launch overhead before the first kernel and
 * the wake-up after the last one are not in it); on a CPU handle the
 * monotonic clock (CPU calls return when done).
 *   voxconv_timer_start   records the start on h's stream, returns a timer
 *   voxconv_timer_stop    records the stop, waits for it, sets *ms and
 *                         frees the timer (on failure too)
 *   voxconv_timer_discard frees a timer without measuring (NULL: no-op)
 * Start and stop must use the same handle, and its stream must not change
 * in between (VOXCONV_STATUS_INVALID_ARGUMENT; the timer is freed). Host
 * work inside the interval counts on CUDA only where the stream waits for
 * it (a call that synchronises internally, as a kernel-map build does). */
typedef struct voxconv_timer voxconv_timer_t;
VOXCONV_API voxconv_status_t voxconv_timer_start(voxconv_handle_t *h,
                                                 voxconv_timer_t **timer);
VOXCONV_API voxconv_status_t voxconv_timer_stop(voxconv_handle_t *h,
                                                voxconv_timer_t *timer,
                                                double *ms);
VOXCONV_API void voxconv_timer_discard(voxconv_handle_t *h,
                                       voxconv_timer_t *timer);
/* The message of the last failure on h (h == NULL: this thread's last
 * failure outside a handle). Never NULL; "" when there was none. */
VOXCONV_API const char *voxconv_get_last_error(const voxconv_handle_t *h);

/* ---- backend memory --------------------------------------------------- */
typedef enum voxconv_memcpy_kind {
  VOXCONV_MEMCPY_HOST_TO_BACKEND = 0,
  VOXCONV_MEMCPY_BACKEND_TO_HOST = 1,
  VOXCONV_MEMCPY_BACKEND_TO_BACKEND = 2
} voxconv_memcpy_kind_t;

VOXCONV_API voxconv_status_t voxconv_malloc(voxconv_handle_t *h, size_t bytes,
                                            void **ptr);
/* Gives the blocks the handle keeps idle (see voxconv_allocator_t) back to
 * the caller's allocator. A no-op without one. */
VOXCONV_API voxconv_status_t voxconv_release_cached_memory(voxconv_handle_t *h);
VOXCONV_API voxconv_status_t voxconv_free(voxconv_handle_t *h, void *ptr);
/* Ordered on the handle's stream; BACKEND_TO_HOST copies complete before
 * returning. */
VOXCONV_API voxconv_status_t voxconv_memcpy(voxconv_handle_t *h, void *dst,
                                            const void *src, size_t bytes,
                                            voxconv_memcpy_kind_t kind);

/* ---- devices ---------------------------------------------------------- */
typedef struct voxconv_device_info {
  char name[256];
  int cc_major, cc_minor;
  int sm_count;
  size_t total_memory;
} voxconv_device_info_t;

/* 0 devices (and SUCCESS) when CUDA is not built in or no GPU is present. */
VOXCONV_API voxconv_status_t voxconv_device_count(int *count);
VOXCONV_API voxconv_status_t voxconv_device_get_info(int device,
                                                     voxconv_device_info_t *i);
/* 1 if this library was compiled with the CUDA backend. */
VOXCONV_API int voxconv_has_cuda(void);
/* The CUDA targets compiled in, space-separated in nvcc's names: "sm_NN" is
 * machine code (runs on compute capability N.N and later minors of the same
 * major; "sm_90a" on 9.0 only), "compute_NN" is PTX that the driver compiles
 * at load time for any later GPU. E.g. "sm_80 sm_86 sm_89 sm_90a
 * compute_89" (the Python wheel's default); "" without CUDA. Never NULL. */
VOXCONV_API const char *voxconv_cuda_archs(void);

/* ---- sparse tensors --------------------------------------------------- */
typedef struct voxconv_coords {
  const int32_t *data; /* [n][4] = (batch, x, y, z), backend memory */
  int64_t n;
  int32_t tensor_stride[3]; /* 0 means 1 */
} voxconv_coords_t;

/* Dense row-major [rows][channels] features, backend memory. */
typedef struct voxconv_feats {
  void *data;
  int64_t rows;
  int64_t channels;
  voxconv_dtype_t dtype;
} voxconv_feats_t;

/* Regular conv weights [kvol][cin][cout], backend memory. */
typedef struct voxconv_weights {
  void *data;
  int64_t kvol;
  int64_t cin;
  int64_t cout;
  voxconv_dtype_t dtype;
} voxconv_weights_t;

/* ---- kernel maps ------------------------------------------------------ */
typedef enum voxconv_kmap_mode {
  VOXCONV_KMAP_SUBMANIFOLD = 0,
  VOXCONV_KMAP_STRIDED = 1,
  VOXCONV_KMAP_TRANSPOSED = 2,
  VOXCONV_KMAP_GENERATIVE = 3,
  VOXCONV_KMAP_EXPANDING = 4
} voxconv_kmap_mode_t;

/* Geometry of a map. Zero-initialise ({0} or memset) and set what you need:
 * the fields added after dilation (padded, padding, out_shape,
 * offset_order) keep their old meaning at 0, so older callers build the
 * same maps.
 *
 * Per axis a, with k = kernel_size[a], d = dilation[a], s = stride[a]:
 *   P = padded ? padding[a] : floor((k-1)/2) * d   (the effective padding)
 *   off(j) = j*d - P, j = 0..k-1                    (the axis offsets)
 * and the pairing rule and output set of each mode are those of "Modes" at
 * the top of this header:
 *   SUBMANIFOLD  outputs = inputs,      i = o + off(j)      (s must be 1)
 *   STRIDED      outputs = unique floor(i/s),   i = s*o + off(j)
 *   EXPANDING    outputs = {o : i = s*o + off(j) for an input i and some
 *                j on every axis, and 0 <= o < out_shape[a] on every axis
 *                with out_shape[a] > 0},        i = s*o + off(j)
 *   TRANSPOSED   outputs = the caller's,        o = s*i + off(j)
 *   GENERATIVE   outputs = {s*i + off(j) over inputs and j, kept only where
 *                0 <= o < out_shape[a] on every axis with out_shape[a] > 0},
 *                                               o = s*i + off(j)
 *
 * spconv / PyTorch in these terms (padded = 1, padding = their padding,
 * in_shape = the input's spatial shape, inputs in [0, in_shape)):
 *   SparseConv3d(k, s, p, d)           EXPANDING, out_shape = floor((in_shape
 *                                      + 2p - d(k-1) - 1)/s) + 1 (the caller
 *                                      computes it, as spconv does)
 *   SparseConvTranspose3d(k, s, p, d)  GENERATIVE, out_shape = (in_shape-1)*s
 *                                      - 2p + d(k-1) + 1 (+ output_padding)
 *   SparseInverseConv3d                voxconv_kmap_inverse of the
 *                                      SparseConv3d's map
 *   SubMConv3d, odd k                  SUBMANIFOLD, padded = 0
 * The forward op then equals torch conv3d / conv_transpose3d (with weight
 * [Cout][Cin][kx][ky][kz] resp. [Cin][Cout][kx][ky][kz] for our W[kidx]
 * [Cin][Cout]) at every output of the map; the dense result is 0 elsewhere.
 *
 * Limits (INVALID_ARGUMENT naming the field otherwise):
 *   offset_order VOXCONV_OFFSET_ORDER_X_SLOWEST or _X_FASTEST; every mode.
 *                The order changes only which index k a pair carries (and
 *                so which W[k] it meets), never the pairs or outputs.
 *   padded       0 or 1. With 0, padding[] must be all 0.
 *   padding[a]   0 .. d*(k-1) (any P beyond it pairs an output with cells
 *                wholly before it; shift the coordinates instead). With
 *                padded = 1 and padding[a] = floor((k-1)/2)*d the map is
 *                the centred one, element for element.
 *   out_shape[a] 0 (unbounded axis) or 1 .. VOXCONV_COORD_MAX + 1; only
 *                EXPANDING and GENERATIVE take it (it must be 0 for the
 *                other modes). On an unbounded axis an output beyond
 *                VOXCONV_COORD_MIN..MAX is an error (OUT_OF_RANGE, never
 *                wrapped or dropped): with s = 1 an EXPANDING output is
 *                i + P - j*d, so inputs within P of +VOXCONV_COORD_MAX (or
 *                d*(k-1) - P of VOXCONV_COORD_MIN) need out_shape. */
/* How a map numbers its kernel offsets (desc offset_order; see "Kernel
 * offsets" at the top of this header). */
typedef enum voxconv_offset_order {
  VOXCONV_OFFSET_ORDER_X_SLOWEST = 0, /* kidx = (jx*ky + jy)*kz + jz */
  VOXCONV_OFFSET_ORDER_X_FASTEST = 1  /* kidx = (jz*ky + jy)*kx + jx (ME) */
} voxconv_offset_order_t;

typedef struct voxconv_kmap_desc {
  voxconv_kmap_mode_t mode;
  int32_t kernel_size[3]; /* 1..7 per axis */
  int32_t stride[3];      /* 1..64; 0 means 1. SUBMANIFOLD needs 1. */
  int32_t dilation[3];    /* 1..64; 0 means 1 */
  int32_t padded;         /* 0: centred offsets (P above); 1: padding[] */
  int32_t padding[3];     /* with padded = 1: P per axis, 0 .. d*(k-1) */
  int32_t out_shape[3];   /* EXPANDING, GENERATIVE: output bound per axis,
                             outputs in 0..out_shape-1; 0 = unbounded */
  int32_t offset_order;   /* voxconv_offset_order_t; 0: x slowest */
} voxconv_kmap_desc_t;

typedef struct voxconv_kmap voxconv_kmap_t;

typedef struct voxconv_kmap_info {
  voxconv_kmap_desc_t desc; /* with 0s replaced by 1s */
  int32_t kernel_volume;
  int64_t n_in, n_out; /* n_out -1: a deferred STRIDED map not yet complete
                          (voxconv_kmap_build_async) */
  int64_t n_pairs; /* -1 while the map is pending (see below) */
  int32_t in_tensor_stride[3], out_tensor_stride[3];
} voxconv_kmap_info_t;

/* Duplicate input coordinates are an error (voxconv_merge_duplicates makes a
 * set). `out` is required for TRANSPOSED (the output coordinates, with
 * out->tensor_stride * stride == in->tensor_stride) and must be NULL
 * otherwise.
 *
 * Synchronisation. On the CPU every call is synchronous. On CUDA:
 *  - SUBMANIFOLD builds never wait for the GPU (outputs = inputs, so the
 *    host needs no result): the build only queues work on the handle's
 *    stream and can be captured into a CUDA graph. What the GPU finds out
 *    -- the pair counts and whether the coordinates are valid -- arrives
 *    later: the map is "pending" until then. Its pair lists, if written
 *    while it is pending (below), have room for every possible pair (8 *
 *    kvol * n_in bytes, the bound spconv uses too), since their exact
 *    length is known only on the device.
 *    A pending map is usable at once by every op.
 *  - Pair lists (in_rows / out_rows, voxconv_kmap_get_pairs) of CUDA maps
 *    are written the first time something needs them -- weight gradients,
 *    depthwise convolutions, explicit_gemm, voxconv_kmap_get_pairs --
 *    on the stream of the handle that asks, not by the build: inference
 *    (the tensor-core and int8 forward, dgrad, pooling read the neighbour
 *    tables) never pays their memory or time. Other streams' users of the
 *    lists wait for that write on the GPU. A first need inside a CUDA
 *    graph capture of a map built before the capture is UNSUPPORTED (the
 *    lists would exist only in the graph's replays): call
 *    voxconv_kmap_get_pairs(h, map, NULL, NULL, NULL) before capturing, or
 *    run a weight gradient on the map once eagerly.
 *  - Row orders. The tensor-core algorithms (mask_gemm with row_order 1,
 *    the int8 forward) sort a map's rows by neighbour pattern on their
 *    first use and keep the order, and its tile masks, with the map: made
 *    like the pair lists on the first user's stream, waited for on the GPU
 *    by other streams. A first use inside a CUDA graph capture of a map
 *    built before it makes them inside the graph on every replay and does
 *    not keep them (kept, they would exist only in the replays): run the
 *    network once before capturing, as the tuner also asks. Row orders and
 *    pair lists can also be made ahead, on the stream that built the map,
 *    with voxconv_kmap_prepare (below).
 *  - Bad coordinates (out of range, duplicates) in a build that does not
 *    wait (SUBMANIFOLD; voxconv_kmap_build_async below) are reported by
 *    the first call on the map made
 *    after the GPU has finished the build (any op or voxconv_kmap_wait
 *    returns the build's status, its message prefixed by the call's name),
 *    and by every later call; ops queued before that may have produced
 *    meaningless values (never out-of-bounds accesses). To get the error
 *    from the build call itself, set VOXCONV_KMAP_SYNC=1 (read at handle
 *    creation): every build then waits for its verdict.
 *  - STRIDED, EXPANDING, TRANSPOSED and GENERATIVE builds wait once for the
 *    GPU (their output count sizes the output tensor; EXPANDING and
 *    GENERATIVE learn their pair counts in the same wait), for the build's
 *    own work on the
 *    handle's stream. Build them on a second stream (voxconv_stream_create,
 *    one handle per stream) that the convolutions' stream waits on
 *    (voxconv_stream_wait), so that this wait does not drain the queue of
 *    convolutions: `voxconv bench --maps overlap` does so. A STRIDED map
 *    can also be built without any wait (voxconv_kmap_build_async below):
 *    its count is then read when it is first needed, by which time the GPU
 *    has usually delivered it. None of these builds can be captured into a
 *    CUDA graph (UNSUPPORTED while the stream is being captured).
 *  - Ops (conv, depthwise, pooling, unpooling) never wait for the GPU,
 *    except while the autotuner benchmarks a new configuration (see
 *    Autotuning) and in the algorithms that need a map's pair counts on the
 *    host (explicit_gemm, implicit_gemm, depthwise_explicit and the
 *    depthwise weight gradient): on a pending map those wait for the map's
 *    build (not for later work), once per map, and are not available while
 *    the stream is being captured. mask_gemm, mask_gemm_wgmma,
 *    mask_gemm_im2col and depthwise_implicit forward/dgrad need none.
 *  - voxconv_kmap_get_pairs, voxconv_kmap_verify and voxconv_kmap_wait wait
 *    for a pending map's build; voxconv_kmap_get_info never waits (n_pairs
 *    is -1 while the map is pending). */
VOXCONV_API voxconv_status_t voxconv_kmap_build(voxconv_handle_t *h,
                                                const voxconv_kmap_desc_t *desc,
                                                const voxconv_coords_t *in,
                                                const voxconv_coords_t *out,
                                                voxconv_kmap_t **kmap);
/* The same map as voxconv_kmap_build, built without waiting for the GPU
 * where the output count is the only reason to wait: on CUDA a STRIDED
 * build only queues its work (like a SUBMANIFOLD one) and returns a
 * pending map whose output count is not known on the host yet:
 *  - voxconv_kmap_get_info reports n_out = -1 (and n_pairs = -1) until the
 *    map completes; it never waits;
 *  - voxconv_kmap_wait completes it (waits for the build only, not for
 *    later work on the stream) and returns the build's status; n_out,
 *    n_pairs and the pairs are known afterwards;
 *  - an op on the map (conv, depthwise, pooling) needs the count to check
 *    its tensors' rows, so the first op on a map that has not completed
 *    waits for the build, once; later ops do not;
 *  - voxconv_kmap_out_coords gives the output coordinates at once: the
 *    buffer has room for n_in rows, of which the first n_out are valid
 *    once the GPU has finished the build (order the reading stream after
 *    it, as for an op);
 *  - bad input coordinates are reported by voxconv_kmap_wait or by the
 *    first op, as for a SUBMANIFOLD build.
 * Meant for building a network's next strided map early, on a map stream,
 * while the host goes on issuing the current level's convolutions: by the
 * time the count is needed the GPU has usually delivered it, and no host
 * wait remains. A deferred map's arrays are sized for n_in outputs (16 +
 * 4 * kernel_volume bytes a row more than a synchronous build's for the
 * outputs that do not exist, and pair lists of n_in * S entries, S the
 * taps per input that can reach the output lattice, e.g. 1 for k = s), and
 * its sizes that choose a summation order (the weight gradient's splits)
 * use those bounds, so results on it may differ in rounding from results
 * on a synchronously built map (each is deterministic). Other modes, and
 * every mode on the CPU, behave exactly as voxconv_kmap_build. */
VOXCONV_API voxconv_status_t voxconv_kmap_build_async(
    voxconv_handle_t *h, const voxconv_kmap_desc_t *desc,
    const voxconv_coords_t *in, const voxconv_coords_t *out,
    voxconv_kmap_t **kmap);
/* The least and greatest value of each field (batch, x, y, z) over the
 * rows of a coordinate set: lo[f] <= row[f] <= hi[f] for every row. */
typedef struct voxconv_coords_bounds {
  int32_t lo[4];
  int32_t hi[4];
} voxconv_coords_bounds_t;

/* A STRIDED build (defer 0: as voxconv_kmap_build, 1: as
 * voxconv_kmap_build_async) told the bounds of its input rows. The map is
 * the same, bit for bit, as without them; what changes is the cost. The
 * build sorts the inputs' strided cells to make its outputs (sorted by
 * (b, x, y, z)); without bounds it sorts 64-bit keys over every bit a
 * coordinate may use, with them (on CUDA) it sorts keys of only the bits
 * the bounds' extent needs -- 32-bit keys when that is <= 31 bits, e.g.
 * 1024 x 1024 x 64 cells of one batch -- in about half the radix passes
 * and a quarter of the bytes (docs/perf-notes.md item 109). Where the
 * bounds come from: voxconv_kmap_out_bounds of the map whose outputs the
 * rows are (a network's pooled levels), or the caller's own knowledge of
 * its points (the host copy of a scan, a voxel grid's size). They must
 * hold: lo[0] in 0..VOXCONV_BATCH_MAX, lo[1..3] >= VOXCONV_COORD_MIN,
 * hi[1..3] <= VOXCONV_COORD_MAX, lo <= hi (else INVALID_ARGUMENT), and
 * every row inside them: a row outside is OUT_OF_RANGE, reported the way
 * the build reports out-of-range coordinates (at once on the CPU and by a
 * synchronous build; by voxconv_kmap_wait or the map's first op for a
 * deferred one, whose results up to then are meaningless but never
 * out-of-bounds accesses). in_bounds NULL is the plain build.
 * INVALID_ARGUMENT for other modes (only a strided build sorts). */
VOXCONV_API voxconv_status_t voxconv_kmap_build_bounded(
    voxconv_handle_t *h, const voxconv_kmap_desc_t *desc,
    const voxconv_coords_t *in, const voxconv_coords_bounds_t *in_bounds,
    int defer, voxconv_kmap_t **kmap);
/* The bounds of a STRIDED map's output rows, as voxconv_kmap_build_bounded
 * takes them for the next level's strided build: computed by the build
 * with its output count (no extra pass, no wait). Needs the count: for a
 * deferred map whose count has not arrived (info.n_out -1) this is
 * INVALID_ARGUMENT (voxconv_kmap_wait first); never waits. A map with no
 * outputs gives lo = 0, hi = -1 (an empty range). INVALID_ARGUMENT for
 * other modes. */
VOXCONV_API voxconv_status_t voxconv_kmap_out_bounds(
    const voxconv_kmap_t *kmap, voxconv_coords_bounds_t *bounds);
VOXCONV_API voxconv_status_t voxconv_kmap_destroy(voxconv_handle_t *h,
                                                  voxconv_kmap_t *kmap);
/* Waits until the map's build has finished on the GPU (only the build: work
 * queued after it is not waited for) and returns its status: SUCCESS, or the
 * error the build found (out-of-range or duplicate coordinates). Afterwards
 * n_pairs and the pair offsets are known. Returns at once for a complete
 * map and on the CPU. UNSUPPORTED while h's stream is being captured into
 * a CUDA graph, and for a map whose build was captured (its results exist
 * only in the graph's replays). */
VOXCONV_API voxconv_status_t voxconv_kmap_wait(voxconv_handle_t *h,
                                               const voxconv_kmap_t *kmap);
VOXCONV_API voxconv_status_t voxconv_kmap_get_info(const voxconv_kmap_t *kmap,
                                                   voxconv_kmap_info_t *info);

/* The build worker (CUDA; off by default). With it on, h's asynchronous
 * builds -- SUBMANIFOLD through voxconv_kmap_build and STRIDED through
 * voxconv_kmap_build_async, while h's stream is not being captured -- are
 * issued by a library thread: the build call checks its arguments, returns
 * the map (its info as it would read without the worker) and leaves the
 * build's ~20-60 CUDA runtime calls to that thread. A caller that issues
 * maps ahead of the ops that use them (the Python package's map stream)
 * then overlaps that host work with its own. What changes:
 *   - Any other call on h (an op, a memcpy, another build the worker does
 *     not take, destroy, ...) first waits until the worker has issued what
 *     it was given, so the stream order is the order of the calls.
 *   - A use of such a map through any handle (an op, voxconv_kmap_wait,
 *     voxconv_kmap_out_coords, voxconv_kmap_order, destroy) first waits
 *     until its build has been issued.
 *   - An error the build finds on the host side (CUDA errors, out of
 *     memory, host coordinates, misalignment) is reported by the map's
 *     first use instead of the build call (every use then returns it), as
 *     bad coordinates already are for asynchronous builds.
 *   - The input coordinates must stay valid until the build has been
 *     issued: until any later call on h, or a use of the map, returns.
 * enable = 1 starts the worker, 0 stops it after it has issued its queue
 * (destroying the handle does the same); INVALID_ARGUMENT otherwise.
 * UNSUPPORTED on the CPU backend.
 * Read when the worker starts: VOXCONV_WORKER_WAIT_SPIN_US (a use of a map
 * the worker has not issued yet spins up to that long before it sleeps),
 * VOXCONV_WORKER_IDLE_SPIN_US (the worker spins that long for its next
 * job before it sleeps), both in microseconds and 0 by default (a value
 * that is not a number >= 0 is named in a warning on stderr and means 0):
 * spinning spares a sleeping thread's wake-up at the price of a busy
 * core; VOXCONV_WORKER_TRACE=1
 * (per build, how long it sat queued and took to issue; per waiting use,
 * how long it waited; a summary on stderr when the worker stops). */
VOXCONV_API voxconv_status_t voxconv_handle_set_build_worker(voxconv_handle_t *h,
                                                             int enable);
/* Makes h's stream wait (on the GPU, no host wait for the GPU) for the
 * map's build, which may have run on another stream: the way to use a map
 * built on a side stream, a build worker's included (this waits on the
 * host only until the worker has issued the build). Reports the build's
 * failure on the worker, if it failed. A no-op for a map built on h's own
 * stream or during a stream capture. */
VOXCONV_API voxconv_status_t voxconv_kmap_order(voxconv_handle_t *h,
                                                const voxconv_kmap_t *kmap);
/* Output coordinates [n_out][4] in backend memory, owned by the map. */
VOXCONV_API voxconv_status_t voxconv_kmap_out_coords(const voxconv_kmap_t *kmap,
                                                     const int32_t **coords);
/* Copies the pairs: offsets (HOST memory, kernel_volume+1 entries, CSR
 * style), in_rows and out_rows (backend memory, n_pairs each). Any pointer
 * may be NULL to skip it. On CUDA it first writes the map's pair lists if
 * nothing has needed them yet (see Synchronisation above): with all three
 * NULL it does only that. Waits for a pending map (voxconv_kmap_wait). */
VOXCONV_API voxconv_status_t voxconv_kmap_get_pairs(voxconv_handle_t *h,
                                                    const voxconv_kmap_t *kmap,
                                                    int64_t *offsets,
                                                    int32_t *in_rows,
                                                    int32_t *out_rows);
/* Tables of a CUDA map that ops otherwise make on their first use, made
 * now on h's stream (`what`, an OR of):
 *   VOXCONV_PREPARE_FORWARD  the row order and tile masks of the output
 *                            rows, which the tensor-core forward (mask_gemm
 *                            with row_order 1, the int8 forward) tiles over
 *   VOXCONV_PREPARE_DGRAD    the same for the input rows (dgrad; shared
 *                            with the forward's on symmetric SUBMANIFOLD
 *                            maps)
 *   VOXCONV_PREPARE_PAIRS    the pair lists (weight gradients, depthwise,
 *                            explicit / implicit gemm; as
 *                            voxconv_kmap_get_pairs(h, map, NULL, NULL,
 *                            NULL), but never waiting)
 * Meant for the stream a map is built on (see Synchronisation): called
 * there after the convolutions' stream has been ordered after the build
 * (voxconv_stream_wait / voxconv_kmap_order), the work runs beside the
 * first convolutions instead of in front of the first one that needs it
 * (a row order at workload A's level 0 is a ~0.1 ms sort); ops on other
 * streams wait for it on the GPU. Never waits for the GPU. With a build
 * worker the work is queued behind the worker's builds, like a build (the
 * call does not wait for the worker either). Tables already made are
 * skipped; so is FORWARD on a deferred STRIDED map whose output count has
 * not arrived (its first op makes it). A CPU map has every table already:
 * SUCCESS, nothing done. A failure on a build worker is not reported (the
 * op that needs the table makes it and reports its own).
 *   NULL_POINTER        h or kmap
 *   INVALID_ARGUMENT    `what` 0 or with other bits; a map h may not use
 *   UNSUPPORTED         inside a CUDA graph capture of a map built before
 *                       it (the tables would exist only in the replays) */
#define VOXCONV_PREPARE_FORWARD 1u
#define VOXCONV_PREPARE_DGRAD 2u
#define VOXCONV_PREPARE_PAIRS 4u
VOXCONV_API voxconv_status_t voxconv_kmap_prepare(voxconv_handle_t *h,
                                                  const voxconv_kmap_t *kmap,
                                                  unsigned what);
/* KMAP_MISMATCH unless `in` are exactly the coordinates the map was built
 * from (count and content). Ops check row counts themselves; this is the
 * full check for callers that cannot guarantee the pairing. */
VOXCONV_API voxconv_status_t voxconv_kmap_verify(voxconv_handle_t *h,
                                                 const voxconv_kmap_t *kmap,
                                                 const voxconv_coords_t *in);

/* The inverse of a STRIDED or EXPANDING map (spconv's SparseInverseConv3d:
 * back from the coarse outputs onto the exact input set). *inv has
 *   inputs  = fwd's outputs (n_in = fwd's n_out, tensor stride = fwd's
 *             output tensor stride),
 *   outputs = fwd's inputs, in fwd's input row order (n_out = fwd's n_in;
 *             voxconv_kmap_out_coords gives a copy of them),
 *   pairs   = (o, i, k) for every pair (i, o, k) of fwd: the same offset
 *             index k, so the same weights W[k] apply,
 * and is exactly the map voxconv_kmap_build(TRANSPOSED, desc of fwd, in =
 * fwd's output coordinates, out = fwd's input coordinates) would build, pair
 * for pair and in the same order; its info reports that desc (mode
 * TRANSPOSED, out_shape 0). It is complete (n_pairs known) and independent
 * of fwd, which may be destroyed first; every op takes it. Built from fwd's
 * tables, not from coordinates: on CUDA it queues copies and a compaction on
 * h's stream and never waits (fwd's build must be ordered before h's
 * stream, as for an op). STRIDED and EXPANDING maps keep a copy of their
 * input coordinates (16 bytes a row) for this. INVALID_ARGUMENT for other
 * modes (a SUBMANIFOLD map's inverse is itself with the kernel mirrored; a
 * TRANSPOSED or GENERATIVE one has no mode that describes it). */
VOXCONV_API voxconv_status_t voxconv_kmap_inverse(voxconv_handle_t *h,
                                                  const voxconv_kmap_t *fwd,
                                                  voxconv_kmap_t **inv);

/* Removes duplicate coordinates: writes the unique set (sorted by
 * (b,x,y,z)) to out_coords[*n_unique][4] and, if row_map is not NULL,
 * row_map[i] = unique row of input row i. out_coords has room for in->n. */
VOXCONV_API voxconv_status_t voxconv_merge_duplicates(voxconv_handle_t *h,
                                                      const voxconv_coords_t *in,
                                                      int32_t *out_coords,
                                                      int64_t *n_unique,
                                                      int64_t *row_map);

/* ---- options shared by the ops ---------------------------------------- */
/* Zero-initialise ({0}) for all defaults. Algorithm strings: NULL = the
 * environment default (VOXCONV_FWD_ALGO_MODE, ...) or "auto"; otherwise an
 * algorithm name, a list "[a,b]", "auto" or "all" (case-insensitive). */
typedef enum voxconv_tristate {
  VOXCONV_UNSET = 0,
  VOXCONV_FALSE = 1,
  VOXCONV_TRUE = 2
} voxconv_tristate_t;

typedef struct voxconv_conv_options {
  const char *fwd_algo;
  const char *bwd_algo;   /* default for dgrad and wgrad */
  const char *dgrad_algo; /* overrides bwd_algo for dgrad */
  const char *wgrad_algo; /* overrides bwd_algo for wgrad */
  voxconv_tristate_t fp16_accum;    /* per-call accumulator choice */
  voxconv_tristate_t deterministic; /* UNSET = the handle's setting */
  int inference; /* 1: the caller is in inference mode (no autograd) */
} voxconv_conv_options_t;

/* ---- regular sparse convolution -------------------------------------- */
/* y[n_out][cout] = sum over pairs (i,o,k) of x[i] * W[k].
 * x.rows == n_in, y.rows == n_out, w.kvol == kernel volume,
 * x.channels == w.cin, y.channels == w.cout. opt may be NULL. */
VOXCONV_API voxconv_status_t voxconv_conv_forward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_weights_t *w, const voxconv_feats_t *y,
    const voxconv_conv_options_t *opt);
/* dx[n_in][cin] = sum over pairs (i,o,k) of dy[o] * W[k]^T. */
VOXCONV_API voxconv_status_t voxconv_conv_dgrad(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *dy,
    const voxconv_weights_t *w, const voxconv_feats_t *dx,
    const voxconv_conv_options_t *opt);
/* dW[k] = sum over pairs (i,o,k) of x[i]^T * dy[o] (f32 accumulation). */
VOXCONV_API voxconv_status_t voxconv_conv_wgrad(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_feats_t *dy, const voxconv_weights_t *dw,
    const voxconv_conv_options_t *opt);

/* ---- depthwise sparse convolution ------------------------------------ */
/* Weights are [kvol][C] given as voxconv_feats_t {rows = kvol, channels =
 * C}. y[o][c] = sum over pairs (i,o,k) of x[i][c] * w[k][c]. */
VOXCONV_API voxconv_status_t voxconv_depthwise_forward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_feats_t *w, const voxconv_feats_t *y,
    const voxconv_conv_options_t *opt);
VOXCONV_API voxconv_status_t voxconv_depthwise_dgrad(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *dy,
    const voxconv_feats_t *w, const voxconv_feats_t *dx,
    const voxconv_conv_options_t *opt);
VOXCONV_API voxconv_status_t voxconv_depthwise_wgrad(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_feats_t *dy, const voxconv_feats_t *dw,
    const voxconv_conv_options_t *opt);

/* ---- int8 (quantized) sparse convolution ------------------------------ */
/* Inference with int8 features and weights, int32 accumulation and a fused
 * epilogue that dequantises, adds a bias, applies ReLU and writes int8
 * (requantised), f32, f16, bf16 or the raw int32 sums.
 *
 * Quantisation (symmetric everywhere; q = stored integer):
 *   real x[i][ci]      = x_scale     * qx[i][ci]      (one scale per tensor)
 *   real W[k][ci][c]   = w_scale[c]  * qw[k][ci][c]   (one per output channel)
 *   real y[o][c]       = y_scale     * qy[o][c]       (int8 output only)
 * Depthwise: W is [kvol][C], w_scale and bias have C entries.
 *
 * The epilogue, bit for bit (every backend computes exactly this; all
 * arithmetic is IEEE binary32 with round-to-nearest-even, subnormals kept,
 * never flushed):
 *   1. acc = sum over pairs (i,o,k) and ci of (int32)qx[i][ci] *
 *      (int32)qw[k][ci][c] (depthwise: of qx[i][c] * qw[k][c]), exact in
 *      int32 (the order does not matter: no sum can overflow, see below).
 *      Outputs without pairs have acc = 0 and go through steps 2-5 too.
 *   2. m  = x_scale * w_scale[c]             one fp32 multiplication
 *   3. v  = fmaf((float)acc, m, b)           b = bias ? bias[c] : +0.0f;
 *      (float)acc rounds to nearest even (inexact only for |acc| > 2^24);
 *      fmaf is the fused multiply-add, rounded once
 *   4. relu: if (v < 0) v = +0.0f            (v is never NaN: every input
 *      of steps 2-3 is finite)
 *   5. y, by y's dtype:
 *      F32   v (may be +-Inf when acc * m overflows)
 *      F16, BF16  v rounded to nearest even (overflow gives +-Inf)
 *      I8    t = v / y_scale (IEEE fp32 division, correctly rounded);
 *            r = t rounded to the nearest integer, ties to even
 *            (rintf/nearbyintf in the default mode, cvt.rni on CUDA);
 *            q = min(max(r, -127), 127). -128 is never written
 *            (symmetric, like the weights); +-Inf saturates.
 *      I32   acc itself: steps 2-5 are skipped and qp must be NULL.
 * CUDA reproduces this with __fmul_rn, __int2float_rn, __fmaf_rn and
 * cvt.rni (no --use_fast_math); its I8 quotient is the correctly rounded
 * one without a division where y_scale lies in 2^-100..2^100 and |v| <
 * 2^100 (Markstein: yi = 1.0f / y_scale on the host, q0 = v * yi, r =
 * fmaf(-q0, y_scale, v), t = fmaf(r, yi, q0)) and __fdiv_rn elsewhere,
 * so both backends agree bit for bit on every output dtype. Against the
 * same formula in exact
 * arithmetic (v* = acc * x_scale * w_scale[c] + b, before relu), the fp32
 * v obeys
 *   |v - v*| <= 2^-24 (2 |x_scale w_scale[c] acc| + |v|) (1 + 2^-22)
 *               + 2^-149 (1 + |acc|)
 * (the roundings of (float)acc, of m and of the fma; the last term covers
 * a subnormal m or v); relu and the F16/BF16/I8 conversions then add only
 * their own rounding (for I8 also that of the division, 2^-24 |t|).
 * tests/test_int8_cpu.c checks the bits and this bound.
 *
 * Overflow. |qx|, |qw| <= 128, so one product is at most 2^14 and an
 * output of a regular conv sums at most kvol * cin of them (a map pairs
 * each output with at most one input per offset). Problems with
 * kvol * cin > 131071 (2^31 / 2^14 - 1: e.g. cin 4854 at kvol 27, 382 at
 * kvol 343) are refused with VOXCONV_STATUS_UNSUPPORTED before any work;
 * all others are exact. Depthwise sums (at most 343 products) never
 * overflow.
 *
 * Weight layout (qp->w_layout; qp NULL: KIO). VOXCONV_INT8_WEIGHTS_KIO,
 * the default, is [kvol][cin][cout] as every op takes weights. The CUDA
 * tensor-core kernels read them K-major, [kvol][cout][cin] with each
 * output channel's cin bytes contiguous, so with KIO every call of a CUDA
 * tile kernel first copies w into that order (one small kernel, 4-7 us on
 * an H200 whatever the layer: 69 us of workload A's int8 forward). A
 * deployment that quantises its weights once can store them that way,
 * VOXCONV_INT8_WEIGHTS_KOI (e.g. from PyTorch's [K][cin][cout] tensor:
 * w.permute(0, 2, 1).contiguous()), and the regular conv on CUDA reads
 * them in place when cin is a multiple of 16 (other cin: one zero-padding
 * copy; a first layer, cin < 16: tile 18 reads either layout in place,
 * the im2col rows' weights are a reordered copy either way). The bits of
 * y do not depend on the layout, on any backend (the CPU reads both).
 * Depthwise weights ([kvol][C]) have one layout: KIO only.
 *
 * Where the parameters live. x_scale and y_scale are values in the
 * struct. w_scale and bias point to fp32 arrays in backend memory, like
 * the weights (host memory on the CPU, device memory on CUDA), so that a
 * GPU epilogue reads them without a copy per call and the call can be
 * captured into a CUDA graph. The CPU checks every element before any
 * work; a CUDA backend cannot read them without waiting for the GPU, so
 * there the host checks x_scale and y_scale, and the arrays must be
 * checked once with voxconv_quant_params_check (which waits), e.g. when a
 * layer is quantised.
 *
 * Bad input (first problem reported, with the argument's name and value):
 *   NULL_POINTER       kmap, x, w, y, qp (unless y is I32), qp->w_scale
 *   INVALID_ARGUMENT   x_scale, w_scale[c] or (for I8 output) y_scale not
 *                      finite and > 0; x_scale * w_scale[c] not finite in
 *                      fp32; bias[c] not finite; relu not 0 or 1; w_layout
 *                      not a voxconv_int8_weights_layout_t, or KOI for a
 *                      depthwise conv; qp given
 *                      with an I32 output; a dtype that is not a
 *                      voxconv_dtype_t; a map built on another backend or
 *                      CUDA device than the handle's; shapes and rows as
 *                      for voxconv_conv_forward (KMAP_MISMATCH,
 *                      SHAPE_MISMATCH)
 *   DTYPE_MISMATCH     x or w not I8; y not I8, F32, F16, BF16 or I32; y
 *                      I8 with y_scale 0 (unset); y_scale set (nonzero)
 *                      while y is not I8
 *   UNSUPPORTED        kvol * cin > 131071 (above); opt->fwd_algo naming
 *                      an algorithm (the int8 tiles are not in the float
 *                      registry: only NULL, blanks or "auto" are accepted;
 *                      the environment's VOXCONV_*_ALGO_MODE does not
 *                      apply); CUDA: more than 2^31 - 1 rows, kvol > 343
 *                      or cout * ceil16(cin) > 2^31 - 1 (regular conv), a
 *                      VOXCONV_INT8_TILE this GPU cannot run (the wgmma
 *                      tiles need sm_90a)
 *   INVALID_ARGUMENT   also: VOXCONV_INT8_TILE set to neither a tile ID nor
 *                      "auto"; VOXCONV_INT8_SPLIT not 1-64, or set above 1
 *                      without VOXCONV_INT8_TILE
 * Any cin and cout >= 1 work (no multiple of 4, 16 or 32 required).
 *
 * CUDA. The regular conv runs on the tensor cores (src/cuda/cuda_int8.cu,
 * docs/tiles.md "mask_gemm_i8"): int8 mma.sync on any sm_80+ GPU, int8
 * wgmma on sm_90a; tile IDs 0-20 in voxconv_kernel_get_info (algo
 * "mask_gemm_i8"; tile 18 runs first layers, cin <= 4 and kernel volume
 * <= 28, as one whole-row im2col kernel, and any other problem as the
 * default tile). The tile is VOXCONV_INT8_TILE when set (an ID; a test
 * and benchmark knob, read on every call, nothing measured); else the
 * int8 tuner's: the first call of a configuration (map sizes, mode and
 * stride, cin, cout, the output dtype, the device) runs every tile this
 * GPU can run (tile 18 only on first layers), checks that each gives the
 * reference tile's bits (a tile that does not is disqualified with a
 * warning naming it), times the
 * others (VOXCONV_AUTOTUNE_WARMUP, VOXCONV_AUTOTUNE_RUNS as for the float
 * tuner; one line on stderr unless VOXCONV_AUTOTUNE_LOG=0), records the
 * ranking in the tuning cache under its own namespace
 * (sparse_conv_forward_int8, below) and runs the fastest; later calls
 * take the decision from the handle's memo or the cache without
 * measuring. Split-K: where a tile's grid would fill at most half of
 * the GPU (a small problem: the deep levels of a backbone), the tuner
 * also measures that tile with its kernel offsets split into up to 8
 * slices (blocks of one output tile take different offsets and add their
 * exact int32 partial sums into a zeroed int32 buffer -- y itself for an
 * I32 output, else scratch of n_out * cout * 4 bytes -- and one more
 * kernel applies the epilogue); integer addition is exact, so a split
 * gives the unsplit tile's bits, and the cached row reads
 * "tile=N,split=S". Tile 18's own first-layer kernel never splits. The
 * first call waits for the GPU while it measures (about 18 x 6 runs of
 * the layer, more with splits); no later one does. During stream capture
 * an untuned configuration runs the reference tile (the one chosen by
 * channel counts), warned once, and is not cached. If no tile can run
 * (e.g. out of memory for every one) the call returns the last
 * failure's status and nothing is cached. Each call copies the weights once
 * into a K-major scratch copy (kvol * cout * ceil16(cin) bytes; none with
 * KOI weights and cin a multiple of 16: "Weight layout" above) and, when
 * cin is not a multiple of 16 or x is not 16-byte aligned, x into a
 * zero-padded one. With fewer than 16 input channels (a first layer) it
 * instead gathers every output's neighbours into one row of
 * ceil16(kvol * cin) bytes (im2col, n_out rows) and runs the tile on that
 * one-offset problem, when this at least halves the reduction (3 channels
 * at kvol 27: 96 bytes a row instead of 27 x 16). Depthwise runs one
 * thread per output row and 4
 * channels. No call waits for the GPU (w_scale and bias are read on the
 * device, unchecked: see "Where the parameters live"); every tile gives
 * the CPU's bits for every output dtype.
 *
 * CPU. Threaded over blocks of output rows (VOXCONV_NUM_THREADS); the
 * regular conv uses AVX-512 VNNI (vpdpbusd, with avx512bw) when the CPU
 * has it, else AVX-VNNI on 256-bit vectors, else portable C; VOXCONV_CPU_ISA
 * = avx512 | avx2 | portable picks the family (avx512 and avx2 fall back
 * to the next one down when the CPU lacks its VNNI extension; a name the
 * CPU cannot run at all is INVALID_ARGUMENT as for the float ops).
 * Integer sums are exact, so every path, thread count and block size gives
 * the same bits: int8 results are always deterministic. */
typedef enum voxconv_int8_weights_layout {
  VOXCONV_INT8_WEIGHTS_KIO = 0, /* [kvol][cin][cout] (the default) */
  VOXCONV_INT8_WEIGHTS_KOI = 1  /* [kvol][cout][cin]: K-major, no CUDA copy */
} voxconv_int8_weights_layout_t;

typedef struct voxconv_quant_params {
  float x_scale;        /* per-tensor activation scale, finite, > 0 */
  const float *w_scale; /* [cout] (depthwise [C]), backend memory, > 0 */
  const float *bias;    /* [cout] (depthwise [C]), backend memory; NULL: 0 */
  int32_t relu;         /* 1: max(v, 0) before the output conversion */
  float y_scale;        /* I8 output: its scale (finite, > 0); else 0 */
  /* voxconv_int8_weights_layout_t of w (above, "Weight layout"); 0, KIO,
   * for a struct zero-initialised before this field existed */
  int32_t w_layout;
} voxconv_quant_params_t;

/* Checks qp's values for an op with `channels` output channels (w_scale
 * and bias elements; copies them to the host and waits on CUDA) and
 * y_dtype's pairing with y_scale, as the ops do. SUCCESS or the status
 * the op would return for them. */
VOXCONV_API voxconv_status_t voxconv_quant_params_check(
    voxconv_handle_t *h, const voxconv_quant_params_t *qp, int64_t channels,
    voxconv_dtype_t y_dtype);

/* y[n_out][cout] = epilogue(sum over pairs (i,o,k) of qx[i] * qW[k]).
 * x: I8 [n_in][cin]; w: I8 [kvol][cin][cout] (w->kvol, cin, cout give the
 * shape; with qp->w_layout KOI its bytes are [kvol][cout][cin]); y: I8,
 * F32, F16, BF16 or I32 [n_out][cout]. Shapes as voxconv_conv_forward.
 * opt may be NULL. */
VOXCONV_API voxconv_status_t voxconv_conv_forward_int8(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_weights_t *w, const voxconv_quant_params_t *qp,
    const voxconv_feats_t *y, const voxconv_conv_options_t *opt);

/* y[o][c] = epilogue(sum over pairs (i,o,k) of qx[i][c] * qw[k][c]).
 * x: I8 [n_in][C]; w: I8 {rows = kvol, channels = C}; y as above. */
VOXCONV_API voxconv_status_t voxconv_depthwise_forward_int8(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_feats_t *w, const voxconv_quant_params_t *qp,
    const voxconv_feats_t *y, const voxconv_conv_options_t *opt);

/* ---- int8 features: quantise and dequantise --------------------------- */
/* Per-tensor conversion between float and int8 features in one pass: an
 * int8 network's entry and exit (between int8 layers an I8 output already
 * is the next layer's input). x and y: the same rows and channels, in
 * backend memory, not overlapping; no kernel map. scale: finite and > 0.
 * Both backends give the same bits; CUDA runs one kernel on the handle's
 * stream and never waits.
 *
 * voxconv_quantize: x F32, F16 or BF16 -> y I8, per element exactly the
 * epilogue's I8 step 5 with v = x (converted to binary32, exact):
 *   t = v / scale (IEEE fp32 division, correctly rounded); q = t rounded
 *   to the nearest integer, ties to even, clamped to [-127, 127]; +-Inf
 *   saturate to +-127; NaN gives 0 (int8 has no NaN).
 * So a float tensor quantised here and an int8 conv's output requantised
 * at the same scale agree bit for bit, and both equal
 * torch.round(x.float() / scale).clamp(-127, 127) for non-NaN x.
 *
 * voxconv_dequantize: x I8 -> y F32, F16 or BF16:
 *   v = scale * (float)q, one fp32 product rounded to nearest even, then
 *   rounded to y's dtype (nearest even; F32: v itself).
 *
 * Bad input: NULL_POINTER (x, y, data of a non-empty tensor);
 * INVALID_ARGUMENT (scale not finite and > 0, negative rows, channels
 * <= 0, y overlapping x, a dtype that is not a voxconv_dtype_t);
 * SHAPE_MISMATCH (rows or channels differ); DTYPE_MISMATCH (quantize: x
 * not F32/F16/BF16 or y not I8; dequantize: x not I8 or y not
 * F32/F16/BF16). */
VOXCONV_API voxconv_status_t voxconv_quantize(voxconv_handle_t *h,
                                              const voxconv_feats_t *x,
                                              float scale,
                                              const voxconv_feats_t *y);
VOXCONV_API voxconv_status_t voxconv_dequantize(voxconv_handle_t *h,
                                                const voxconv_feats_t *x,
                                                float scale,
                                                const voxconv_feats_t *y);

/* ---- pooling ---------------------------------------------------------- */
typedef enum voxconv_pool_mode {
  VOXCONV_POOL_MAX = 0, /* outputs with no pairs are 0; NaN propagates */
  VOXCONV_POOL_AVG = 1, /* mean over the pairs present (0 if none) */
  VOXCONV_POOL_SUM = 2
} voxconv_pool_mode_t;

/* y[o][c] = reduce over pairs (i,o,k) of x[i][c]; x.channels == y.channels.
 * Usually with a STRIDED map (e.g. kernel 2, stride 2). int8 features
 * (x and y both I8, e.g. between int8 convolutions with an I8 output) pool
 * with MAX only, on both backends: the maximum of int8 values is one of
 * them, exact, and commutes with dequantisation by the tensor's positive
 * scale, so y keeps x's scale. AVG and SUM of I8 are UNSUPPORTED (they
 * would need a rounding rule and a scale), I8 with another dtype is
 * DTYPE_MISMATCH, and the backward takes no I8. */
VOXCONV_API voxconv_status_t voxconv_pool_forward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, voxconv_pool_mode_t mode,
    const voxconv_feats_t *x, const voxconv_feats_t *y);
/* dx from dy. MAX needs the forward's x and y (the winner is the first pair
 * in map order whose x equals y, the same one the forward chose); AVG and
 * SUM ignore x and y (may be NULL). */
VOXCONV_API voxconv_status_t voxconv_pool_backward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, voxconv_pool_mode_t mode,
    const voxconv_feats_t *x, const voxconv_feats_t *y,
    const voxconv_feats_t *dy, const voxconv_feats_t *dx);
/* Unpooling through a pooling map, coarse -> fine: y_fine[i] = sum over
 * pairs (i,o,k) of x_coarse[o] (the adjoint of SUM pooling; with kernel ==
 * stride every fine voxel copies its parent). x.rows == n_out,
 * y.rows == n_in. */
VOXCONV_API voxconv_status_t voxconv_unpool_forward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *x,
    const voxconv_feats_t *y);
VOXCONV_API voxconv_status_t voxconv_unpool_backward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, const voxconv_feats_t *dy,
    const voxconv_feats_t *dx);

/* ---- voxelization ----------------------------------------------------- */
typedef enum voxconv_reduce {
  VOXCONV_REDUCE_FIRST = 0, /* features of the first point (input order) */
  VOXCONV_REDUCE_MEAN = 1   /* mean of the points' features */
} voxconv_reduce_t;

typedef struct voxconv_voxelize_desc {
  float voxel_size[3]; /* > 0 */
  float origin[3];     /* voxel index = floor((p - origin) / voxel_size) */
  /* > 0: points whose index is outside [0, grid_size) on that axis are
   * dropped; 0: no bound (the index must fit the coordinate limits). */
  int32_t grid_size[3];
  voxconv_reduce_t reduce;
  int32_t batch; /* batch of every point when points->batch is NULL */
} voxconv_voxelize_desc_t;

typedef struct voxconv_points {
  const float *data; /* [n][fields], x y z first, backend memory */
  int64_t n;
  int32_t fields;      /* floats per point, >= 3 */
  const int32_t *batch; /* optional per-point batch index, backend memory */
} voxconv_points_t;

/* Voxels come out sorted by (b,x,y,z). coords_out has room for points->n
 * rows of 4, feats_out (optional) for points->n rows of n_feat floats: the
 * first n_feat fields of each point, reduced per voxel. point_voxel
 * (optional, [points->n]) gets each point's voxel row, -1 if dropped.
 * Non-finite xyz is an error naming the point. One host sync on CUDA. */
VOXCONV_API voxconv_status_t voxconv_voxelize(
    voxconv_handle_t *h, const voxconv_voxelize_desc_t *desc,
    const voxconv_points_t *points, int32_t n_feat, int32_t *coords_out,
    float *feats_out, int64_t *n_voxels, int64_t *point_voxel);

/* ---- algorithms ------------------------------------------------------- */
typedef enum voxconv_pass {
  VOXCONV_PASS_CONV_FWD = 0,
  VOXCONV_PASS_CONV_DGRAD = 1,
  VOXCONV_PASS_CONV_WGRAD = 2,
  VOXCONV_PASS_DEPTHWISE_FWD = 3,
  VOXCONV_PASS_DEPTHWISE_DGRAD = 4,
  VOXCONV_PASS_DEPTHWISE_WGRAD = 5,
  VOXCONV_PASS_COUNT = 6
} voxconv_pass_t;

typedef struct voxconv_algo_info {
  const char *name;          /* e.g. "cpu_gather_gemm", "implicit_gemm" */
  voxconv_backend_t backend; /* where it runs */
  unsigned passes;           /* bit (1u << voxconv_pass_t) per pass */
  int deterministic;         /* 1: bitwise-reproducible */
  const char *description;
} voxconv_algo_info_t;

/* The algorithm registry that dispatch, the tuner and the tools share. */
VOXCONV_API int voxconv_algo_count(void);
VOXCONV_API voxconv_status_t voxconv_algo_get_info(int index,
                                                   voxconv_algo_info_t *info);

/* Compiled GPU kernel variants (tiles) with their resources, as the device
 * reports them (cudaFuncGetAttributes, occupancy calculator). Tile IDs are
 * stable: the tuner and its cache refer to them. 0 kernels on a CPU handle. */
typedef struct voxconv_kernel_info {
  char algo[32];        /* registry name, e.g. "mask_gemm" */
  voxconv_pass_t pass;  /* FWD covers DGRAD variants when dgrad is set */
  int dgrad;            /* 1: the transposed-weight (dgrad) variant */
  int tile_id;          /* stable ID within (algo, pass kind) */
  voxconv_dtype_t dtype;
  int acc16;            /* 1: fp16 accumulators */
  /* stages: the shared-memory pipeline's; where a tile's gathered rows
   * and its weights have rings of different depth (mask_gemm_wgmma tile 7,
   * fp32), the weights' (docs/tiles.md gives both) */
  int tile_m, tile_n, tile_k, stages, threads;
  int registers;        /* per thread */
  size_t smem_bytes;    /* static + dynamic per block */
  int blocks_per_sm;    /* theoretical, from the occupancy calculator */
  double occupancy;     /* active warps / max warps per SM */
  /* e.g. "kvol<=343; cin or cout % 8 != 0: zero-padded copies" */
  char constraints[64];
  /* Shared memory a block may use on this device (its opt-in per-block
   * limit: 99 KB on sm_86 / sm_89, 163 KB on sm_80, 227 KB on sm_90), and
   * whether this kernel fits it (smem_bytes <= smem_limit). A kernel that
   * does not (eligible 0; e.g. mask_gemm's 108 KB tiles 8 and 9 on sm_86)
   * never runs on this device: the tuner leaves its tile out, and running
   * it is VOXCONV_STATUS_UNSUPPORTED; blocks_per_sm and occupancy are 0. */
  size_t smem_limit;
  int eligible;
} voxconv_kernel_info_t;

VOXCONV_API voxconv_status_t voxconv_kernel_count(voxconv_handle_t *h,
                                                  int *count);
VOXCONV_API voxconv_status_t voxconv_kernel_get_info(voxconv_handle_t *h,
                                                     int index,
                                                     voxconv_kernel_info_t *i);

/* ---- tuning: algorithm choice, fp16 accumulator, tuning cache --------- */
/* (This section follows "algorithms" because it uses voxconv_pass_t.)
 *
 * Algorithm choice. Every conv/depthwise pass takes an algorithm string
 * from its options (fwd_algo; dgrad_algo or else bwd_algo; wgrad_algo or
 * else bwd_algo). NULL, "" or blanks mean "unset": the environment default
 * applies, else "auto":
 *   regular conv    VOXCONV_FWD_ALGO_MODE, VOXCONV_DGRAD_ALGO_MODE or else
 *                   VOXCONV_BWD_ALGO_MODE, VOXCONV_WGRAD_ALGO_MODE or else
 *                   VOXCONV_BWD_ALGO_MODE
 *   depthwise       VOXCONV_DEPTHWISE_CONV_FWD_ALGO_MODE,
 *                   VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE (dgrad and wgrad)
 * Forms (case-insensitive, blanks around names ignored): a registered
 * algorithm name ("implicit_gemm"), a list "[implicit_gemm, mask_gemm]",
 * "auto" or "all". Depthwise passes also accept "explicit" and "implicit"
 * for depthwise_explicit / depthwise_implicit. An unknown name, a name that
 * does not implement the pass, an empty list, "auto"/"all" inside a list,
 * a list without brackets or any other malformed text is
 * VOXCONV_STATUS_INVALID_ARGUMENT with a message that lists the valid
 * names. A valid algorithm this handle cannot run (another backend, the
 * problem's dtype/channels, not deterministic in deterministic mode) is
 * skipped with one warning on stderr saying why; when nothing of the list
 * is left, "auto" is used instead (also warned once).
 *
 * The string filters the search space; the tuner benchmarks each
 * configuration once and remembers it (cache below):
 *   name    every parameter combination of that algorithm
 *   list    every parameter combination of every listed algorithm
 *   auto    a reduced set: the candidates that came within 5% of the best
 *           on recorded "all" searches of similar channel sizes (see
 *           voxconv_cache_recommend), plus each runnable algorithm's
 *           default; with no such record, every combination of every
 *           runnable algorithm up to VOXCONV_AUTOTUNE_MAX_CANDIDATES,
 *           spread evenly over the algorithms, defaults first (default 24
 *           on CUDA; on the CPU one per algorithm, i.e. each algorithm's
 *           default, since CPU algorithms size themselves from the shape)
 *   all     everything runnable, fp16-accumulator tiles included (on
 *           f16/bf16 forward and dgrad only)
 * When a single candidate remains nothing is benchmarked or cached.
 * Benchmarking: 1 warm-up run (VOXCONV_AUTOTUNE_WARMUP), the median of
 * VOXCONV_AUTOTUNE_RUNS runs (default 5; 2 for runs over 20 ms; 1 for a
 * candidate whose warm-up is 4x slower than the best so far), candidates
 * within 10% of the best re-timed. Times are CUDA events on the handle's
 * stream, the monotonic clock on the CPU. Every candidate's output is
 * compared with a reference output (the first deterministic algorithm that
 * runs the problem, default parameters, fp32 accumulation, confirmed by the
 * next deterministic one; if those two disagree a third decides and the
 * odd one out is named in a warning; with no majority a candidate agreeing
 * with either passes) element by element against a bound that follows
 * from the number formats:
 *   |y_i - ref_i| <= spacing(max(|y_i|, |ref_i|))
 *                    + 8 sqrt(n) (u_y + u_ref) S_i
 * spacing(v) is the distance between adjacent values of the output dtype
 * at v (subnormal spacing included: 2^-24 for f16 below 2^-14), which
 * covers the two outputs' roundings to that dtype; S_i is the sum of
 * |a| |b| over the products of element i (computed once per benchmark in
 * fp32, f64 for f64 data, from |inputs| by the first algorithm in the
 * reference's order that runs that problem); n the products
 * per element (fwd kvol*cin, dgrad kvol*cout, wgrad min(n_in, n_out);
 * depthwise kvol, resp. min(n_in, n_out)); u the unit roundoff of each
 * side's accumulator with one extra bit for tensor cores that truncate
 * (fp32 2^-23, fp16 accumulators 2^-10, f64 2^-53). 8 sqrt(n) u S is
 * Higham & Mary's probabilistic rounding-error bound (SIAM J. Sci. Comput.
 * 2019), exceeded with probability below 2 exp(-32) ~ 2.5e-14 per element:
 * a correct kernel is not disqualified, also on data in the subnormal
 * range (gradients around 1e-5 in f16), while a dropped pair, offset or
 * channel or a scale error is off by orders of magnitude. The log line of
 * a disqualified candidate gives its error ratio (max over i of
 * |y_i - ref_i| over the bound; limit 1) and, for information, max_rel =
 * max |y - ref| / (|ref| + 0.01 rms(ref)), which the cache records.
 * fp16-accumulator tiles must also keep ||y - ref|| / ||ref|| <= 1e-2.
 * VOXCONV_AUTOTUNE_MAX_REL, when set, is an extra limit on max_rel. When S
 * cannot be computed (no algorithm runs the problem in fp32, out of
 * memory; said in the log) the relative check applies instead: max_rel
 * and norm within f64 1e-9 / 1e-10, f32 1e-3 / 1e-4, f16 1e-2 / 2e-3,
 * bf16 5e-2 / 1e-2, fp16-accumulator tiles 1.0 / 1e-2
 * (VOXCONV_AUTOTUNE_MAX_REL replaces the max_rel limit). A candidate that
 * fails, writes a non-finite value where the reference is finite, or
 * exceeds the bound is disqualified, logged and recorded, never fatal.
 * Benchmarks write scratch buffers: the
 * call's output ends up holding the winner's result (or the reference's,
 * which is then the winner), and inputs are never written. While tuning, a
 * progress line goes to stderr (VOXCONV_AUTOTUNE_LOG=0 silences it and the
 * per-candidate disqualification lines).
 *
 * CUDA graph capture. While the handle's stream is being captured nothing
 * may wait for the GPU and work is recorded, not run, so the tuner never
 * benchmarks then: a configuration the cache answers runs its recorded
 * winner as usual; any other runs, unmeasured, the first algorithm of its
 * search space that runs it with default parameters (fp32 accumulators
 * unless the call resolved the fp16 accumulator on), nothing is recorded
 * (voxconv_get_last_call_info: time_ms -1, from_cache 0), and a warning
 * is printed once per process: run the network once before capturing so
 * that the tuner can measure it.
 *
 * fp16 accumulator. For one call, in this order:
 *   1. f32/f64 data and weight gradients (wgrad passes): off, always;
 *   2. opt->fp16_accum TRUE or FALSE: that;
 *   3. the global value (initialised once from VOXCONV_USE_FP16_ACCUM =
 *      true|false|1|0|yes|no|on|off, a malformed value warns once and
 *      counts as false; changed by voxconv_set_fp16_accum) when true: on;
 *   4. opt->inference and f16/bf16 data: on (automatic in inference);
 *   5. off (fp32 accumulation). Plain "no grad" does not enable it.
 * When on, fp16-accumulator tiles (an algorithm parameter
 * "accumulator_type" = 1) join the candidates; when off only fp32 ones,
 * except under "all" or when max(cin, cout) <=
 * VOXCONV_F16ACC_SMALL_CH_CEIL (default 0). The resolved flag is part of
 * the cache key. */

/* Global fp16-accumulator setting (process-wide; nonzero = true). */
VOXCONV_API voxconv_status_t voxconv_set_fp16_accum(int enable);
VOXCONV_API int voxconv_get_fp16_accum(void);

/* The pure resolution above: *enabled gets 0/1 and *reason (may be NULL)
 * a static English sentence saying which rule decided. opt may be NULL.
 * INVALID_ARGUMENT for a bad dtype, pass or tri-state. */
VOXCONV_API voxconv_status_t voxconv_resolve_fp16_accum(
    voxconv_dtype_t dtype, voxconv_pass_t pass,
    const voxconv_conv_options_t *opt, int *enabled, const char **reason);

/* What the handle's last successful conv/depthwise call ran and why; the
 * int8 ops count too (algo "mask_gemm_i8" with params "tile=N" and, when
 * the int8 tuner measured it, its time; "depthwise_i8" on CUDA; "int8_cpu"
 * / "depthwise_i8_cpu" on the CPU; fp16_accum 0, deterministic 1). */
typedef struct voxconv_call_info {
  voxconv_pass_t pass;
  char algo[64];    /* algorithm name */
  char params[128]; /* "name=value,..." ("-" when it has none) */
  int fp16_accum;   /* the resolved flag (1: fp16 accumulators allowed) */
  char fp16_accum_reason[128];
  int deterministic; /* the resolved deterministic flag */
  double time_ms;    /* benchmarked median of the chosen candidate; -1 when
                        it was the only candidate or ran during stream
                        capture (not timed) */
  int from_cache;    /* 1: chosen from a tuning result already recorded
                        (this process or the cache file); 0: tuned now or
                        the only candidate */
} voxconv_call_info_t;

/* INVALID_ARGUMENT when the handle has made no conv/depthwise call yet. */
VOXCONV_API voxconv_status_t voxconv_get_last_call_info(
    const voxconv_handle_t *h, voxconv_call_info_t *info);

/* Tuning cache. One file per user and format version:
 * $VOXCONV_BENCHMARK_CACHE_DIR/tuning-cache-v1.txt, by default
 * ~/.cache/voxconv/tuning-cache-v1.txt. It is read at the first tuning
 * lookup (and re-read when another process changed it and a lookup
 * misses), written by a background thread shortly after new results and
 * at exit, always under an exclusive lock (flock on a ".lock" file beside
 * it) as read-merge-write into a temporary file renamed over the old one,
 * so concurrent processes never lose each other's entries and a killed
 * process never leaves a broken file. A file that does not parse is
 * reported once on stderr, renamed to "<file>.corrupt-<pid>-<time>" and
 * rebuilt. A file that cannot be read (permissions), a cache folder that is
 * not a directory and a path longer than PATH_MAX are reported once and
 * left alone: this process keeps its results in memory and
 * voxconv_cache_flush fails with the reason. A cache file that is a
 * symbolic link stays one: saves (and voxconv_cache_clear) act on the file
 * it points to. Temporary files of a writer killed mid-save are removed by
 * the next save once their process is gone (or after ten minutes).
 *
 * Entries are keyed by namespace (sparse_conv_forward, sparse_conv_dgrad,
 * sparse_conv_wgrad, depthwise_conv_forward, depthwise_conv_dgrad,
 * depthwise_conv_wgrad: algorithm selection; "<namespace>/<algo>": that
 * algorithm's parameter tuning; sparse_conv_forward_int8: the tile of an
 * int8 regular conv on CUDA, keyed with the output's dtype -- i8, i32,
 * f32, f16 or bf16 -- as its dtype, acc=0 det=0, read by no float
 * lookup), ceil(log2 n_in), ceil(log2 n_out), cin,
 * cout, kernel volume, dtype, resolved fp16 accumulator, deterministic,
 * map mode and stride, the device ("cpu:<model>:<threads>" or
 * "cuda:<name>:cc<major>.<minor>") and the library version. Each keeps every
 * benchmarked candidate, best first.
 *
 * Format (version 1, text, one record per line, '#' lines are comments):
 *   voxconv-tuning-cache 1
 *   entry NAMESPACE searched=auto,all,full device="cpu:X:2" lib=0.1.0
 *         nin=17 nout=17 cin=64 cout=64 kvol=27 dtype=f16 acc=0 det=0
 *         mode=submanifold stride=1,1,1          (one line)
 *   cand ALGO PARAMS TIME_MS STATUS MAX_REL      (its candidates, best
 *                                                 first; "-" = none)
 *   end N_ENTRIES
 * STATUS is ok, wrong, nonfinite or failed:VOXCONV_STATUS_...; searched
 * says which search spaces were covered (auto, all, full = every
 * combination of that algorithm). A file without the final end line is
 * truncated, hence corrupt. */

/* Full path of the cache file this process uses (need not exist yet).
 * INVALID_ARGUMENT when size is too small. */
VOXCONV_API voxconv_status_t voxconv_cache_path(char *path, size_t size);
/* Writes results not yet saved, now (the background thread would do it
 * within a second; at exit it is done anyway). IO_ERROR with the path and
 * reason when the file cannot be written (or read for the merge, or its
 * path is longer than PATH_MAX); the results then stay in memory. */
VOXCONV_API voxconv_status_t voxconv_cache_flush(void);
/* Deletes the cache file and forgets every result of this process. */
VOXCONV_API voxconv_status_t voxconv_cache_clear(void);

/* A read-only snapshot of a cache file for tools (voxconv cache inspect /
 * analyze). path NULL = voxconv_cache_path(). A missing file is an empty
 * snapshot; a corrupt one is IO_ERROR naming the line and the problem. */
typedef struct voxconv_cache voxconv_cache_t;

typedef struct voxconv_cache_entry_info {
  char namespace_name[96]; /* e.g. "sparse_conv_forward/implicit_gemm" */
  char algo_namespace[64]; /* the "/algo" part, "" for selection entries */
  char key[512];           /* canonical key text, as in the file */
  char device[128];
  char library_version[16];
  voxconv_pass_t pass;
  int n_in_log2, n_out_log2;
  int64_t cin, cout;
  int32_t kernel_volume;
  voxconv_dtype_t dtype;
  int fp16_accum, deterministic;
  voxconv_kmap_mode_t mode;
  int32_t stride[3];
  char searched[32]; /* "auto", "all", "full", comma-joined */
  int n_candidates;
} voxconv_cache_entry_info_t;

typedef struct voxconv_cache_candidate {
  char algo[64];
  char params[128];
  double time_ms; /* median; < 0 when not timed (failed) */
  char status[48]; /* ok, wrong, nonfinite, failed:VOXCONV_STATUS_... */
  double max_rel;  /* against the reference; < 0 when unknown */
} voxconv_cache_candidate_t;

VOXCONV_API voxconv_status_t voxconv_cache_open(const char *path,
                                                voxconv_cache_t **cache);
/* close(NULL) is a no-op. */
VOXCONV_API voxconv_status_t voxconv_cache_close(voxconv_cache_t *cache);
VOXCONV_API int voxconv_cache_entry_count(const voxconv_cache_t *cache);
VOXCONV_API voxconv_status_t voxconv_cache_get_entry(
    const voxconv_cache_t *cache, int index, voxconv_cache_entry_info_t *e);
/* rank 0 = best (ok candidates by time, then the disqualified ones). */
VOXCONV_API voxconv_status_t voxconv_cache_get_candidate(
    const voxconv_cache_t *cache, int index, int rank,
    voxconv_cache_candidate_t *cand);
/* The reduced candidate set that "auto" uses for configurations like
 * entry `index`: same namespace, device, library, dtype, accumulator and
 * deterministic flags, and the same ceil(log2) of cin and of cout. Over the
 * recorded "all" searches of that family, a greedy cover: the fewest
 * candidates (at most `max`) such that every search had one of them within
 * 5% of its best (fp16-accumulator tiles left out of fp32-accumulator
 * families, best = their best fp32 tile). *count = 0 when fewer than 2 such searches exist (auto
 * then falls back to its default pool). */
VOXCONV_API voxconv_status_t voxconv_cache_recommend(
    const voxconv_cache_t *cache, int index, voxconv_cache_candidate_t *cands,
    int max, int *count);

#ifdef __cplusplus
}
#endif
#endif /* VOXCONV_H */
