/* Pooling and unpooling on the GPU: the same reductions over the kernel
 * map's neighbour tables as src/cpu/pool_cpu.c, with the same float
 * operation order, so f32 results match the CPU bit for bit:
 *   pool forward      y[o]  = reduce_k x[nbr_out[o][k]]      (MAX/AVG/SUM)
 *   pool backward     dx[i] = sum_k g(dy[nbr_in[i][k]])      (AVG: / count,
 *                     MAX: only where (o, c) chose this pair)
 *   unpool forward    y[i]  = sum_k x[nbr_in[i][k]]
 *   unpool backward   dx[o] = sum_k dy[nbr_out[o][k]]
 * One thread per (destination row, V channels), k ascending ("map order" of
 * a row): every output written once, no atomics, deterministic. f16 / bf16
 * load to f32, accumulate in f32, round to nearest even on store. V is 16
 * bytes of channels (8 f16/bf16, 4 f32) when the channel count and the
 * buffers allow 16-byte accesses, else 1: each element still sees the same
 * operations in the same order, so the two widths give identical bits. The
 * one-channel version moved 2 bytes per load and did a 64-bit division per
 * element; workload A's pools ran at 13-19% of the memory roofline. */
#include "vc_cuda_util.cuh"

typedef enum { VC_RED_SUM = 0, VC_RED_AVG = 1, VC_RED_MAX = 2 } vc_red_t;

/* NaN wins and stays; otherwise a strictly larger value replaces, so the
 * first maximum in map order is kept (pool_cpu.c max_step). */
static __device__ __forceinline__ float vc_max_step(float acc, float v) {
  if (acc != acc)
    return acc;
  return (v != v || v > acc) ? v : acc;
}

/* Every (row, group of V channels) of a kernel, rows over the y threads
 * and blocks, a row's groups over the x threads (launch: vc_rows_launch):
 * no index division. Dividing a flat index by the group count, a 64-bit
 * division per thread, made the level-0 pooling of workload A compute-
 * bound (docs/perf-notes.md item 131). */
#define VC_POOL_ROWS(r, n_rows, g, groups)                                     \
  for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;             \
       r < (n_rows); r += (int64_t)gridDim.x * blockDim.y)                     \
    for (int64_t g = threadIdx.x; g < (groups); g += blockDim.x)

/* V consecutive channels of one row as floats: one 16-byte access when
 * V * sizeof(T) == 16 (the host checks the alignment), else element-wise. */
template <typename T, int V> struct VcLanes {
  float v[V];
  __device__ __forceinline__ void load(const T *p) {
    if (V * sizeof(T) == 16) {
      alignas(16) T e[V];
      *reinterpret_cast<uint4 *>(e) = __ldg(reinterpret_cast<const uint4 *>(p));
#pragma unroll
      for (int j = 0; j < V; j++)
        v[j] = VcDtype<T>::load(e + j);
    } else {
#pragma unroll
      for (int j = 0; j < V; j++)
        v[j] = VcDtype<T>::load(p + j);
    }
  }
  __device__ __forceinline__ void store(T *p) const {
    if (V * sizeof(T) == 16) {
      alignas(16) T e[V];
#pragma unroll
      for (int j = 0; j < V; j++)
        VcDtype<T>::store(e + j, v[j]);
      *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(e);
    } else {
#pragma unroll
      for (int j = 0; j < V; j++)
        VcDtype<T>::store(p + j, v[j]);
    }
  }
};

/* V consecutive channels of one row as loaded, 16 bytes in one access
 * when V * sizeof(T) == 16 (4 registers for 8 halves, where VcLanes holds
 * 8 floats): what the unrolled reduce keeps in flight per offset. */
template <typename T, int V> struct VcRaw {
  alignas(16) T e[V];
  __device__ __forceinline__ void load(const T *p) {
    if (V * sizeof(T) == 16) {
      *reinterpret_cast<uint4 *>(e) = __ldg(reinterpret_cast<const uint4 *>(p));
    } else {
#pragma unroll
      for (int j = 0; j < V; j++)
        e[j] = p[j];
    }
  }
  __device__ __forceinline__ float at(int j) const {
    return VcDtype<T>::load(e + j);
  }
};

/* acc (n terms so far) and one more term x, the same operations in the
 * same order for every width and both loops below. */
template <typename T, int V, typename X>
__device__ __forceinline__ void vc_reduce_step(VcLanes<T, V> &acc, int n,
                                               const X &x, int red,
                                               float cnt, bool count) {
#pragma unroll
  for (int j = 0; j < V; j++) {
    const float v = x.at(j);
    if (red == VC_RED_MAX)
      acc.v[j] = n == 0 ? v : vc_max_step(acc.v[j], v);
    else if (count)
      acc.v[j] += v / cnt;
    else
      acc.v[j] += v;
  }
}

/* dst[r][c] = reduce over k of src[nbr[r][k]][c] (count: AVG backward,
 * dividing each term by the source row's pair count). KT > 0: K == KT
 * known at compile time (2^3 pooling), and a thread issues its row's KT
 * index loads, then its KT gathers, before it reduces. Meant to keep more
 * gathers in flight than the runtime-K loop; measured alone it gained
 * nothing (level-0 pool 117 us either way: the index division, removed
 * since, was the limit; docs/perf-notes.md item 131), and it has not been
 * measured against the runtime-K loop without that division. */
template <typename T, int V, int KT>
__global__ void vc_pool_reduce_kernel(const int32_t *__restrict__ nbr,
                                      int64_t n_rows, int K, int64_t C,
                                      int red, const int32_t *__restrict__ count,
                                      const T *__restrict__ src,
                                      T *__restrict__ dst) {
  const int64_t groups = C / V;
  if (KT > 0)
    K = KT;
  VC_POOL_ROWS(r, n_rows, g, groups) {
    const int64_t c = g * V;
    const int32_t *row = nbr + r * K;
    VcLanes<T, V> acc;
#pragma unroll
    for (int j = 0; j < V; j++)
      acc.v[j] = 0.0f;
    int n = 0;
    if (KT > 0) {
      constexpr int KK = KT > 0 ? KT : 1;
      int32_t s[KK];
      VcRaw<T, V> x[KK];
#pragma unroll
      for (int k = 0; k < KK; k++)
        s[k] = __ldg(row + k);
#pragma unroll
      for (int k = 0; k < KK; k++)
        if (s[k] >= 0)
          x[k].load(src + (int64_t)s[k] * C + c);
#pragma unroll
      for (int k = 0; k < KK; k++) {
        if (s[k] < 0)
          continue;
        vc_reduce_step<T, V>(acc, n, x[k], red,
                             count ? (float)count[s[k]] : 1.0f, count);
        n++;
      }
    } else {
      for (int k = 0; k < K; k++) {
        const int32_t s = row[k];
        if (s < 0)
          continue;
        VcRaw<T, V> x;
        x.load(src + (int64_t)s * C + c);
        vc_reduce_step<T, V>(acc, n, x, red, count ? (float)count[s] : 1.0f,
                             count);
        n++;
      }
    }
    if (red == VC_RED_AVG && n > 0) {
#pragma unroll
      for (int j = 0; j < V; j++)
        acc.v[j] /= (float)n;
    }
    acc.store(dst + r * C + c);
  }
}

/* int8 MAX forward, 16 channels a thread as four packed words: __vmaxs4
 * takes the signed bytewise maximum of four channels in one instruction,
 * where vc_pool_reduce_kernel converts every byte to float and back (16
 * conversions a clock per SM against 128 FP32 operations: workload A's
 * int8 level-0 pool moved half the bytes of the f16 one in nine tenths of
 * its time, docs/perf-notes.md item 139). Integers have no NaN and their
 * maximum is exact, so the bits are the float path's: the maximum of the
 * present rows, 0 for a row with none. An absent pair gathers nothing and
 * counts as -128, max's identity.
 * KT > 0: the K known at compile time, all KT index loads, then all
 * gathers, then the reduction (loads in flight, as the float kernel). */
__device__ __forceinline__ void vc_vmax16(uint4 &acc, const uint4 x) {
  /* acc = the signed bytewise maximum of acc and x, 16 int8 channels */
  acc.x = __vmaxs4(acc.x, x.x);
  acc.y = __vmaxs4(acc.y, x.y);
  acc.z = __vmaxs4(acc.z, x.z);
  acc.w = __vmaxs4(acc.w, x.w);
}

template <int KT>
__global__ void vc_pool_max_i8_kernel(const int32_t *__restrict__ nbr,
                                      int64_t n_rows, int K, int64_t C,
                                      const int8_t *__restrict__ src,
                                      int8_t *__restrict__ dst) {
  const int64_t groups = C / 16;
  if (KT > 0)
    K = KT;
  const uint32_t lowest = 0x80808080u; /* -128 in every byte */
  VC_POOL_ROWS(r, n_rows, g, groups) {
    const int64_t c = g * 16;
    const int32_t *row = nbr + r * K;
    uint4 acc = make_uint4(lowest, lowest, lowest, lowest);
    bool any = false;
    if (KT > 0) {
      constexpr int KK = KT > 0 ? KT : 1;
      int32_t s[KK];
      uint4 x[KK];
#pragma unroll
      for (int k = 0; k < KK; k++)
        s[k] = __ldg(row + k);
#pragma unroll
      for (int k = 0; k < KK; k++)
        x[k] = s[k] >= 0 ? __ldg(reinterpret_cast<const uint4 *>(
                               src + (int64_t)s[k] * C + c))
                         : acc;
#pragma unroll
      for (int k = 0; k < KK; k++) {
        any = any || s[k] >= 0;
        vc_vmax16(acc, x[k]);
      }
    } else {
      for (int k = 0; k < K; k++) {
        const int32_t s = row[k];
        if (s < 0)
          continue;
        const uint4 x =
            __ldg(reinterpret_cast<const uint4 *>(src + (int64_t)s * C + c));
        any = true;
        vc_vmax16(acc, x);
      }
    }
    *reinterpret_cast<uint4 *>(dst + r * C + c) =
        any ? acc : make_uint4(0, 0, 0, 0);
  }
}

/* Pairs of each output row (AVG backward). */
__global__ void vc_pool_count_kernel(const int32_t *__restrict__ nbr_out,
                                     int64_t n_out, int K,
                                     int32_t *__restrict__ count) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n_out;
       o += (int64_t)gridDim.x * blockDim.x) {
    int32_t n = 0;
    for (int k = 0; k < K; k++)
      n += nbr_out[o * K + k] >= 0;
    count[o] = n;
  }
}

/* V int16 winner slots: one 16- or 8-byte access for V = 8 / 4. */
template <int V> struct VcWinners {
  alignas(16) int16_t w[V];
  __device__ __forceinline__ void load(const int16_t *p) {
    if (V == 8)
      *reinterpret_cast<uint4 *>(w) = __ldg(reinterpret_cast<const uint4 *>(p));
    else if (V == 4)
      *reinterpret_cast<uint2 *>(w) = __ldg(reinterpret_cast<const uint2 *>(p));
    else
      for (int j = 0; j < V; j++)
        w[j] = p[j];
  }
  __device__ __forceinline__ void store(int16_t *p) const {
    if (V == 8)
      *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(w);
    else if (V == 4)
      *reinterpret_cast<uint2 *>(p) = *reinterpret_cast<const uint2 *>(w);
    else
      for (int j = 0; j < V; j++)
        p[j] = w[j];
  }
};

/* MAX backward, phase 1: the k of the first pair (map order) whose x equals
 * y for each (o, c); NaN matches NaN (the forward let the first NaN win). */
template <typename T, int V>
__global__ void vc_pool_winner_kernel(const int32_t *__restrict__ nbr_out,
                                      int64_t n_out, int K, int64_t C,
                                      const T *__restrict__ x,
                                      const T *__restrict__ y,
                                      int16_t *__restrict__ winner) {
  const int64_t groups = C / V;
  VC_POOL_ROWS(o, n_out, g, groups) {
    const int64_t c = g * V;
    VcLanes<T, V> yv;
    yv.load(y + o * C + c);
    VcWinners<V> win;
#pragma unroll
    for (int j = 0; j < V; j++)
      win.w[j] = -1;
    int open = V; /* channels still without a winner */
    for (int k = 0; k < K && open > 0; k++) {
      const int32_t i = nbr_out[o * K + k];
      if (i < 0)
        continue;
      VcLanes<T, V> xv;
      xv.load(x + (int64_t)i * C + c);
#pragma unroll
      for (int j = 0; j < V; j++)
        if (win.w[j] < 0 && (xv.v[j] == yv.v[j] ||
                             (xv.v[j] != xv.v[j] && yv.v[j] != yv.v[j]))) {
          win.w[j] = (int16_t)k;
          open--;
        }
    }
    win.store(winner + o * C + c);
  }
}

/* MAX backward, phase 2: dx[i][c] = sum over k ascending of dy[o][c] where
 * o = nbr_in[i][k] chose pair k for channel c. */
template <typename T, int V>
__global__ void vc_pool_max_grad_kernel(const int32_t *__restrict__ nbr_in,
                                        int64_t n_in, int K, int64_t C,
                                        const int16_t *__restrict__ winner,
                                        const T *__restrict__ dy,
                                        T *__restrict__ dx) {
  const int64_t groups = C / V;
  VC_POOL_ROWS(i, n_in, g, groups) {
    const int64_t c = g * V;
    VcLanes<T, V> acc;
#pragma unroll
    for (int j = 0; j < V; j++)
      acc.v[j] = 0.0f;
    for (int k = 0; k < K; k++) {
      const int32_t o = nbr_in[i * K + k];
      if (o < 0)
        continue;
      VcWinners<V> w;
      w.load(winner + (int64_t)o * C + c);
      bool any = false;
      bool mine[V];
#pragma unroll
      for (int j = 0; j < V; j++) {
        mine[j] = w.w[j] == k;
        any = any || mine[j];
      }
      if (!any) /* most pairs: this row's value lost in every channel */
        continue;
      VcLanes<T, V> g;
      g.load(dy + (int64_t)o * C + c);
#pragma unroll
      for (int j = 0; j < V; j++)
        if (mine[j])
          acc.v[j] += g.v[j];
    }
    acc.store(dx + i * C + c);
  }
}

/* ---- host ---------------------------------------------------------------- */
static const int kPoolBlock = 256;

static unsigned vc_pool_grid(const voxconv_handle_t *h, int64_t n) {
  const int64_t cap = (int64_t)vc_cuda_state(h)->sm_count * 32;
  return vc_grid_1d(n, kPoolBlock, cap > 0 ? cap : 4096);
}

/* The launch shape of a VC_POOL_ROWS kernel: x threads the power of two
 * >= a row's groups (at most 32), y threads the rest of kPoolBlock. */
struct VcRowsLaunch {
  unsigned grid;
  dim3 block;
};
static VcRowsLaunch vc_rows_launch(const voxconv_handle_t *h, int64_t rows,
                                   int64_t groups) {
  int bx = 1;
  while (bx < groups && bx < 32)
    bx <<= 1;
  const int by = kPoolBlock / bx;
  return VcRowsLaunch{vc_pool_grid(h, rows * bx),
                      dim3((unsigned)bx, (unsigned)by)};
}

static voxconv_status_t vc_check_dtype(voxconv_handle_t *h, const char *func,
                                       voxconv_dtype_t dt) {
  if (dt == VOXCONV_DTYPE_F32 || dt == VOXCONV_DTYPE_F16 ||
      dt == VOXCONV_DTYPE_BF16)
    return VOXCONV_STATUS_SUCCESS;
  return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                 "%s: dtype %s is not supported on CUDA (f32, f16, bf16; f64 "
                 "is the CPU reference path)",
                 func, voxconv_dtype_name(dt));
}

/* Channels per thread: 16 bytes of them when C allows it and every buffer
 * the kernel reads or writes per row is 16-byte aligned (an offset view of
 * a CUDA allocation may not be), else 1. */
template <typename T>
static int vc_pool_lanes(int64_t C, const void *a, const void *b,
                         const void *c = NULL, const void *d = NULL) {
  const int V = (int)(16 / sizeof(T));
  const uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
  return C % V == 0 && (any & 15u) == 0 ? V : 1;
}

template <typename T, int V>
static voxconv_status_t vc_reduce_launch(voxconv_handle_t *h,
                                         const int32_t *nbr, int64_t n_rows,
                                         int K, int64_t C, int red,
                                         const int32_t *count, const void *src,
                                         void *dst) {
  const VcRowsLaunch l = vc_rows_launch(h, n_rows, C / V);
  if (K == 8)
    vc_pool_reduce_kernel<T, V, 8><<<l.grid, l.block, 0, vc_cuda_stream(h)>>>(
        nbr, n_rows, K, C, red, count, (const T *)src, (T *)dst);
  else
    vc_pool_reduce_kernel<T, V, 0><<<l.grid, l.block, 0, vc_cuda_stream(h)>>>(
        nbr, n_rows, K, C, red, count, (const T *)src, (T *)dst);
  VC_CUDA_LAUNCH_CHECK(h, "vc_pool_reduce_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T>
static voxconv_status_t vc_reduce_t(voxconv_handle_t *h, const int32_t *nbr,
                                    int64_t n_rows, int K, int64_t C, int red,
                                    const int32_t *count, const void *src,
                                    void *dst) {
  if (n_rows * C == 0)
    return VOXCONV_STATUS_SUCCESS;
  if (vc_pool_lanes<T>(C, src, dst) > 1)
    return vc_reduce_launch<T, 16 / sizeof(T)>(h, nbr, n_rows, K, C, red,
                                               count, src, dst);
  return vc_reduce_launch<T, 1>(h, nbr, n_rows, K, C, red, count, src, dst);
}

/* int8 MAX forward: packed bytes (vc_pool_max_i8_kernel) when 16-byte
 * lanes apply, else the float kernel one channel a thread. */
static voxconv_status_t vc_max_i8(voxconv_handle_t *h, const int32_t *nbr,
                                  int64_t n_rows, int K, int64_t C,
                                  const void *src, void *dst) {
  if (n_rows * C == 0)
    return VOXCONV_STATUS_SUCCESS;
  if (vc_pool_lanes<int8_t>(C, src, dst) == 1)
    return vc_reduce_launch<int8_t, 1>(h, nbr, n_rows, K, C, VC_RED_MAX, NULL,
                                       src, dst);
  const VcRowsLaunch l = vc_rows_launch(h, n_rows, C / 16);
  if (K == 8)
    vc_pool_max_i8_kernel<8><<<l.grid, l.block, 0, vc_cuda_stream(h)>>>(
        nbr, n_rows, K, C, (const int8_t *)src, (int8_t *)dst);
  else
    vc_pool_max_i8_kernel<0><<<l.grid, l.block, 0, vc_cuda_stream(h)>>>(
        nbr, n_rows, K, C, (const int8_t *)src, (int8_t *)dst);
  VC_CUDA_LAUNCH_CHECK(h, "vc_pool_max_i8_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t vc_reduce(voxconv_handle_t *h, const char *func,
                                  const int32_t *nbr, int64_t n_rows, int K,
                                  int red, const int32_t *count,
                                  const voxconv_feats_t *src,
                                  const voxconv_feats_t *dst) {
  const int64_t C = dst->channels;
  switch (dst->dtype) {
  case VOXCONV_DTYPE_F32:
    return vc_reduce_t<float>(h, nbr, n_rows, K, C, red, count, src->data,
                              dst->data);
  case VOXCONV_DTYPE_F16:
    return vc_reduce_t<__half>(h, nbr, n_rows, K, C, red, count, src->data,
                               dst->data);
  case VOXCONV_DTYPE_BF16:
    return vc_reduce_t<__nv_bfloat16>(h, nbr, n_rows, K, C, red, count,
                                      src->data, dst->data);
  case VOXCONV_DTYPE_I8: /* max pooling only (validated) */
    if (red == VC_RED_MAX && !count)
      return vc_max_i8(h, nbr, n_rows, K, C, src->data, dst->data);
    return vc_check_dtype(h, func, dst->dtype);
  default:
    return vc_check_dtype(h, func, dst->dtype);
  }
}

template <typename T, int V>
static voxconv_status_t vc_max_backward_launch(voxconv_handle_t *h,
                                               const voxconv_kmap_t *km,
                                               int64_t C, const void *x,
                                               const void *y, const void *dy,
                                               void *dx, int16_t *winner) {
  if (km->n_out * C > 0) {
    const VcRowsLaunch l = vc_rows_launch(h, km->n_out, C / V);
    vc_pool_winner_kernel<T, V><<<l.grid, l.block, 0, vc_cuda_stream(h)>>>(
        km->nbr_out, km->n_out, km->kvol, C, (const T *)x, (const T *)y,
        winner);
    VC_CUDA_LAUNCH_CHECK(h, "vc_pool_winner_kernel");
  }
  if (km->n_in * C > 0) {
    const VcRowsLaunch l = vc_rows_launch(h, km->n_in, C / V);
    vc_pool_max_grad_kernel<T, V><<<l.grid, l.block, 0, vc_cuda_stream(h)>>>(
        km->nbr_in, km->n_in, km->kvol, C, winner, (const T *)dy, (T *)dx);
    VC_CUDA_LAUNCH_CHECK(h, "vc_pool_max_grad_kernel");
  }
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T>
static voxconv_status_t vc_max_backward_t(voxconv_handle_t *h,
                                          const voxconv_kmap_t *km, int64_t C,
                                          const void *x, const void *y,
                                          const void *dy, void *dx) {
  VcWorkspace ws(h);
  int16_t *winner = NULL; /* a fresh allocation: 16-byte aligned */
  VC_CHECK(ws.get<int16_t>(km->n_out * C, &winner, "MAX pooling winners"));
  if (vc_pool_lanes<T>(C, x, y, dy, dx) > 1)
    return vc_max_backward_launch<T, 16 / sizeof(T)>(h, km, C, x, y, dy, dx,
                                                     winner);
  return vc_max_backward_launch<T, 1>(h, km, C, x, y, dy, dx, winner);
}

extern "C" voxconv_status_t vc_cuda_pool_forward(voxconv_handle_t *h,
                                                 const voxconv_kmap_t *kmap,
                                                 voxconv_pool_mode_t mode,
                                                 const voxconv_feats_t *x,
                                                 const voxconv_feats_t *y) {
  VC_CUDA_DEVICE_GUARD(h);
  const int red = mode == VOXCONV_POOL_MAX   ? VC_RED_MAX
                  : mode == VOXCONV_POOL_AVG ? VC_RED_AVG
                                             : VC_RED_SUM;
  return vc_reduce(h, "voxconv_pool_forward", kmap->nbr_out, kmap->n_out,
                   kmap->kvol, red, NULL, x, y);
}

extern "C" voxconv_status_t vc_cuda_pool_backward(
    voxconv_handle_t *h, const voxconv_kmap_t *kmap, voxconv_pool_mode_t mode,
    const voxconv_feats_t *x, const voxconv_feats_t *y,
    const voxconv_feats_t *dy, const voxconv_feats_t *dx) {
  static const char *const func = "voxconv_pool_backward";
  VC_CUDA_DEVICE_GUARD(h);
  VC_CHECK(vc_check_dtype(h, func, dx->dtype));
  if (mode == VOXCONV_POOL_MAX) {
    const int64_t C = dx->channels;
    switch (dx->dtype) {
    case VOXCONV_DTYPE_F32:
      return vc_max_backward_t<float>(h, kmap, C, x->data, y->data, dy->data,
                                      dx->data);
    case VOXCONV_DTYPE_F16:
      return vc_max_backward_t<__half>(h, kmap, C, x->data, y->data, dy->data,
                                       dx->data);
    default:
      return vc_max_backward_t<__nv_bfloat16>(h, kmap, C, x->data, y->data,
                                              dy->data, dx->data);
    }
  }
  if (mode == VOXCONV_POOL_SUM)
    return vc_reduce(h, func, kmap->nbr_in, kmap->n_in, kmap->kvol, VC_RED_SUM,
                     NULL, dy, dx);
  /* AVG: each output's gradient is shared equally by its pairs. */
  VcWorkspace ws(h);
  int32_t *count = NULL;
  VC_CHECK(ws.get<int32_t>(kmap->n_out, &count, "AVG pooling counts"));
  if (kmap->n_out > 0) {
    vc_pool_count_kernel<<<vc_pool_grid(h, kmap->n_out), kPoolBlock, 0,
                           vc_cuda_stream(h)>>>(kmap->nbr_out, kmap->n_out,
                                                kmap->kvol, count);
    VC_CUDA_LAUNCH_CHECK(h, "vc_pool_count_kernel");
  }
  return vc_reduce(h, func, kmap->nbr_in, kmap->n_in, kmap->kvol, VC_RED_SUM,
                   count, dy, dx);
}

extern "C" voxconv_status_t vc_cuda_unpool_forward(voxconv_handle_t *h,
                                                   const voxconv_kmap_t *kmap,
                                                   const voxconv_feats_t *x,
                                                   const voxconv_feats_t *y) {
  VC_CUDA_DEVICE_GUARD(h);
  return vc_reduce(h, "voxconv_unpool_forward", kmap->nbr_in, kmap->n_in,
                   kmap->kvol, VC_RED_SUM, NULL, x, y);
}

extern "C" voxconv_status_t vc_cuda_unpool_backward(voxconv_handle_t *h,
                                                    const voxconv_kmap_t *kmap,
                                                    const voxconv_feats_t *dy,
                                                    const voxconv_feats_t *dx) {
  VC_CUDA_DEVICE_GUARD(h);
  return vc_reduce(h, "voxconv_unpool_backward", kmap->nbr_out, kmap->n_out,
                   kmap->kvol, VC_RED_SUM, NULL, dy, dx);
}
