/* int8 sparse convolution on the GPU (voxconv.h, "int8 (quantized) sparse
 * convolution"; issue 23): int8 features and weights, exact int32 sums on
 * the tensor cores, and the epilogue voxconv.h specifies bit for bit.
 *
 * Regular conv (`mask_gemm_i8`): the f16 mask_gemm's forward scheme
 * (cuda_mask_gemm.cuh: one block per BM output rows x BN output channels,
 * only the kernel offsets some row of the tile needs, rows gathered through
 * the neighbour table with 16-byte cp.async, STAGES chunks in flight, rows
 * sorted by neighbour bitmask) with mma.sync.m16n8k32.s8 instead of
 * m16n8k16.f16: a 16-byte vector now carries 16 channels and one MMA twice
 * the reduction depth, for twice the f16 rate. The int32 sums are exact
 * (voxconv.h bounds kvol * cin), so the order of the reduction does not
 * matter and every tile gives the CPU reference's bits.
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8): lane =
 * 4g + t; A regs {a0..a3} = rows {g, g+8, g, g+8} x bytes {4t.., 4t..,
 * 16+4t.., 16+4t..} of a 16 x 32 row-major tile; B regs {b0, b1} = column g
 * x k bytes {4t.., 16+4t..}; C = rows {g, g, g+8, g+8} x cols {2t, 2t+1}.
 * ldmatrix (b16) moves 8 rows of 16 bytes per matrix, each lane getting the
 * 4 bytes at (row lane/4, bytes 4(lane%4)..): exactly a0 for a row-major A
 * tile and b0 for B stored [n][k] (k contiguous). So B must be K-major, and
 * ldmatrix cannot transpose bytes: the weights [kvol][cin][cout] are copied
 * once per call into [kvol][cout][ka] (ka = cin rounded up to 16, zero
 * padded), a small kernel beside the main one (kvol * cout * ka bytes).
 * Inputs whose channel count is not a multiple of 16 (or not 16-byte
 * aligned) run on a zero-padded copy: zero channels add exact zeros.
 *
 * Depthwise (`depthwise_i8`): one thread per (output row, 4 channels),
 * int32 sums over the row's neighbours, the same epilogue.
 *
 * The tile a call uses is the int8 tuner's (src/tune/tune_int8.c: every
 * usable tile timed once per configuration and cached); pick_tile below is
 * its reference tile and its choice where it cannot measure (stream
 * capture). */
#include "cuda_mask_gemm_sm90.cuh"
#include "vc_cuda.h"
#include "vc_cuda_tc_algos.h"
#include "vc_cuda_util.cuh"

#include "../ops/vc_int8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace vc_mask_gemm;

namespace {

/* ---- the epilogue (voxconv.h, steps 2-5) -------------------------------- */
/* I8Epilogue::dtype of a split block (split-K over kernel offsets, see
 * i8_split_slice): its int32 partial sums are added into an int32 buffer
 * (red.global.add), and i8_split_finish_kernel applies the epilogue once
 * every slice is in. Integer addition is exact and associative, and each
 * partial is bounded as the whole sum is (voxconv.h), so the sums, and the
 * outputs, are the unsplit tile's bits whatever order the adds land in. */
#define VC_I8_ACC_ADD 0x7ff0
struct I8Epilogue {
  const float *w_scale; /* [cout], device */
  const float *bias;    /* [cout] or NULL */
  float x_scale, y_scale;
  /* RN(1 / y_scale) for the I8 output's division (i8_quotient), or 0 when
   * y_scale lies outside 2^-100..2^100 and every division is __fdiv_rn */
  float y_inv;
  int relu;
  int dtype; /* voxconv_dtype_t of y */
};

/* t = v / y_scale, correctly rounded (voxconv.h step 5, I8), with one
 * multiply and two FMAs where that is exact (vc_div_rn). */
__device__ __forceinline__ float i8_quotient(const I8Epilogue &e, float v) {
  return vc_div_rn(v, e.y_scale, e.y_inv);
}

/* m and b of column c (step 2 and the bias): one fp32 product, rounded. */
__device__ __forceinline__ void i8_column(const I8Epilogue &e, int c, float &m,
                                          float &b) {
  m = __fmul_rn(e.x_scale, __ldg(e.w_scale + c));
  b = e.bias ? __ldg(e.bias + c) : 0.0f;
}

__device__ __forceinline__ int i8_esz(int dtype) {
  return dtype == VC_I8_ACC_ADD ? 4 : dtype == VOXCONV_DTYPE_I8
             ? 1
             : (dtype == VOXCONV_DTYPE_F16 || dtype == VOXCONV_DTYPE_BF16 ? 2
                                                                         : 4);
}

/* ---- the epilogue with y's type known at compile time -------------------
 * Deciding y's type, the ReLU and the staging for every element, unrolled
 * over a tile's accumulators, cost ~40 instructions an element: 36-41% of
 * the int8 kernels' instructions (ncu, H200: tile 11 at C = 64, tile 19 at
 * C = 256) against 8% for the f16 kernels' epilogue. The kernels branch on
 * y's type once (i8_by_dtype) and write a fragment's adjacent columns as
 * one pair (docs/perf-notes.md item 116). Each element follows the steps
 * of voxconv.h, each rounded as there. */
template <int DT> struct I8Out;
template <> struct I8Out<VOXCONV_DTYPE_F32> {
  typedef float T;
  typedef float2 T2;
  static __device__ __forceinline__ T2 two(T a, T b) { return make_float2(a, b); }
};
template <> struct I8Out<VOXCONV_DTYPE_F16> {
  typedef __half T;
  typedef __half2 T2;
  static __device__ __forceinline__ T2 two(T a, T b) {
    return __halves2half2(a, b);
  }
};
template <> struct I8Out<VOXCONV_DTYPE_BF16> {
  typedef __nv_bfloat16 T;
  typedef __nv_bfloat162 T2;
  static __device__ __forceinline__ T2 two(T a, T b) {
    return __halves2bfloat162(a, b);
  }
};
template <> struct I8Out<VOXCONV_DTYPE_I8> {
  typedef int8_t T;
  typedef char2 T2;
  static __device__ __forceinline__ T2 two(T a, T b) {
    return make_char2((char)a, (char)b);
  }
};
template <> struct I8Out<VOXCONV_DTYPE_I32> {
  typedef int32_t T;
  typedef int2 T2;
  static __device__ __forceinline__ T2 two(T a, T b) { return make_int2(a, b); }
};
template <> struct I8Out<VC_I8_ACC_ADD> : I8Out<VOXCONV_DTYPE_I32> {};

/* Steps 3-5 for one element, as y's type DT. */
template <int DT>
__device__ __forceinline__ typename I8Out<DT>::T
i8_typed(const I8Epilogue &e, int32_t acc, float m, float b) {
  if constexpr (DT == VOXCONV_DTYPE_I32 || DT == VC_I8_ACC_ADD) {
    return acc;
  } else {
    float v = __fmaf_rn(__int2float_rn(acc), m, b);
    if (e.relu && v < 0.0f)
      v = 0.0f;
    if constexpr (DT == VOXCONV_DTYPE_F32)
      return v;
    else if constexpr (DT == VOXCONV_DTYPE_F16)
      return __float2half_rn(v);
    else if constexpr (DT == VOXCONV_DTYPE_BF16)
      return __float2bfloat16_rn(v);
    else { /* I8: round half to even, clamp to [-127, 127] */
      const int r = __float2int_rn(i8_quotient(e, v)); /* cvt.rni */
      return (int8_t)max(-127, min(127, r));
    }
  }
}

/* m and b of columns c and c + 1 (c + 1 < nb, else 0): what the pair of
 * a fragment needs; nothing for an I32 output. */
template <int DT> struct I8ColPair {
  float m0 = 0.0f, b0 = 0.0f, m1 = 0.0f, b1 = 0.0f;
  __device__ __forceinline__ I8ColPair(const I8Epilogue &e, int c, int nb) {
    if constexpr (DT != VOXCONV_DTYPE_I32 && DT != VC_I8_ACC_ADD) {
      i8_column(e, c, m0, b0);
      if (c + 1 < nb)
        i8_column(e, c + 1, m1, b1);
    }
  }
};

/* y[row][c] and y[row][c + 1] (c even; the second only where c + 1 < nb)
 * straight to global memory, as one store when `pair` (nb even and y
 * aligned to two elements). */
template <int DT>
__device__ __forceinline__ void i8_put2_direct(const I8Epilogue &e, void *out,
                                               int64_t row, int nb, int c,
                                               bool pair,
                                               const I8ColPair<DT> &k,
                                               int32_t a0, int32_t a1) {
  typedef I8Out<DT> O;
  typename O::T *y = static_cast<typename O::T *>(out) + row * nb + c;
  if constexpr (DT == VC_I8_ACC_ADD) { /* a split's partial sums */
    if (a0)
      atomicAdd(y, a0);
    if (a1 && c + 1 < nb)
      atomicAdd(y + 1, a1);
    return;
  }
  const typename O::T y0 = i8_typed<DT>(e, a0, k.m0, k.b0);
  if (pair) {
    *reinterpret_cast<typename O::T2 *>(y) =
        O::two(y0, i8_typed<DT>(e, a1, k.m1, k.b1));
    return;
  }
  y[0] = y0;
  if (c + 1 < nb)
    y[1] = i8_typed<DT>(e, a1, k.m1, k.b1);
}

template <int DT> struct I8Dtype {
  static constexpr int value = DT;
};
/* f(I8Dtype<y's type>()): one branch on the type for a whole epilogue.
 * SPLIT: the kernel runs split (VC_I8_ACC_ADD), the tile kernels only: an
 * instance more in the first-layer kernel made it spill. Also on the host,
 * to pick i8_split_finish_kernel's instance. */
template <bool SPLIT = false, typename F>
__host__ __device__ __forceinline__ void i8_by_dtype(int dtype, F &&f) {
  if constexpr (SPLIT) {
    if (dtype == VC_I8_ACC_ADD) {
      f(I8Dtype<VC_I8_ACC_ADD>());
      return;
    }
  }
  switch (dtype) {
  case VOXCONV_DTYPE_F16:
    f(I8Dtype<VOXCONV_DTYPE_F16>());
    break;
  case VOXCONV_DTYPE_BF16:
    f(I8Dtype<VOXCONV_DTYPE_BF16>());
    break;
  case VOXCONV_DTYPE_F32:
    f(I8Dtype<VOXCONV_DTYPE_F32>());
    break;
  case VOXCONV_DTYPE_I32:
    f(I8Dtype<VOXCONV_DTYPE_I32>());
    break;
  default:
    f(I8Dtype<VOXCONV_DTYPE_I8>());
  }
}

/* ---- the epilogue through shared memory -----------------------------------
 * Stores straight from the MMA fragments put 8 rows' pieces of 2-8 bytes
 * in every warp store; the f16 wgmma kernels measured such an epilogue at
 * twice the cost of one staged through shared memory (docs/perf-notes.md
 * items 45-46). Staged: every thread writes its fragment's values (the
 * epilogue applied) into a [BM][BN] tile of y's type in the idle stage
 * buffers (row pitch BN * esz + 16 bytes: the 8 rows of a fragment fall on
 * different banks), then the block copies whole rows out with 16-byte
 * stores, consecutive threads along a row. It needs the tile to fit the
 * stage buffers and 16-byte-aligned output rows; else the direct stores.
 * ENABLE = false compiles the direct stores only: with both paths in the
 * kernel, the tiles with the most accumulators a thread (128 on the wgmma
 * 128 x 256 tiles, 64 on mma.sync tiles 0 and 7) keep them on the stack,
 * and ptxas serialises the wgmma of the former. */
template <bool ENABLE> struct I8Staging {
  unsigned char *buf;
  int esz, pitch;
  bool on;
  __device__ I8Staging(unsigned char *b, const FwdArgs &a, const I8Epilogue &e,
                       int bm, int bn, int bytes)
      : buf(b), esz(i8_esz(e.dtype)), pitch(bn * i8_esz(e.dtype) + 16),
        on(ENABLE && e.dtype != VC_I8_ACC_ADD &&
           bm * (bn * i8_esz(e.dtype) + 16) <= bytes &&
           ((a.nb * i8_esz(e.dtype)) & 15) == 0 && vc_aligned(a.out, 16)) {}
  /* elements (tile row r, tile columns c and c + 1; c even) from sums a0
   * and a1, y of type DT. Staged, the pair is one store (the staged rows
   * hold a multiple of 16 bytes, so c + 1 < nb with c, and rows past the
   * tile's end are not copied out); direct, each element is checked. */
  template <int DT>
  __device__ __forceinline__ void put2(const I8Epilogue &e, const FwdArgs &a,
                                       const int *rows, int nrows, int n0,
                                       int r, int c, const I8ColPair<DT> &k,
                                       int32_t a0, int32_t a1) const {
    typedef I8Out<DT> O;
    if (on) {
      *reinterpret_cast<typename O::T2 *>(buf + r * pitch +
                                          c * (int)sizeof(typename O::T)) =
          O::two(i8_typed<DT>(e, a0, k.m0, k.b0),
                 i8_typed<DT>(e, a1, k.m1, k.b1));
      return;
    }
    if (r < nrows)
      i8_put2_direct<DT>(e, a.out, rows[r], a.nb, n0 + c, false, k, a0, a1);
  }
  /* after every put of the block and a barrier */
  template <int THREADS>
  __device__ __forceinline__ void copy_out(const FwdArgs &a, const int *rows,
                                           int n0, int nrows) const {
    const int cols = min(pitch - 16, (a.nb - n0) * esz); /* bytes */
    const int cpr = cols >> 4;
    unsigned char *out = static_cast<unsigned char *>(a.out);
    for (int i = threadIdx.x; i < nrows * cpr; i += THREADS) {
      const int r = i / cpr, c = i - r * cpr;
      *reinterpret_cast<uint4 *>(out + ((int64_t)rows[r] * a.nb + n0) * esz +
                                 c * 16) =
          *reinterpret_cast<const uint4 *>(buf + r * pitch + c * 16);
    }
  }
};

/* ---- split-K over kernel offsets -------------------------------------------
 * A small problem (deep levels: a few thousand output rows) gives fewer
 * blocks than the GPU runs at once, and each block walks every active
 * offset of its tile in turn: ~0.5 us a step, latency-bound (workload A's
 * levels 4-6 ran 40-60 us a conv, int8 no faster than f16). With a grid of
 * gridDim.z > 1 slices, block z of a tile takes active offsets
 * [n z / Z, n (z + 1) / Z) only and adds its partial sums (VC_I8_ACC_ADD).
 * Called after begin_tile by every thread; returns the block's iterations
 * and sets *a0 to its first active offset. tile.nact becomes the slice's
 * end, which is where RowGather::fetch stops. */
template <int BM>
__device__ __forceinline__ int i8_split_slice(TileOffsets<BM> &tile,
                                              int nchunk, int *a0) {
  const int n = tile.nact, z = (int)blockIdx.z, nz = (int)gridDim.z;
  const int lo = n * z / nz, hi = n * (z + 1) / nz; /* n <= 343, z < 64 */
  __syncthreads(); /* every thread has read tile.nact */
  if (threadIdx.x == 0)
    tile.nact = hi;
  __syncthreads();
  *a0 = lo;
  return (hi - lo) * nchunk;
}

/* begin_tile, then the block's slice when the grid is split: *span's
 * iters are the slice's, *a0 its first active offset (0 unsplit). false:
 * a split block with nothing to add, which returns at once (the same in
 * every thread of the block). */
template <typename TL>
__device__ __forceinline__ bool i8_begin_tile(const FwdArgs &args,
                                              TileOffsets<TL::BM> &tile,
                                              TileSpan *span, int *a0) {
  *span = begin_tile<TL>(args, tile);
  *a0 = 0;
  if (gridDim.z > 1) {
    span->iters = i8_split_slice(tile, span->nchunk, a0);
    if (span->iters == 0)
      return false;
  }
  return true;
}

/* y = epilogue(acc) for a split problem, once all its slices were added
 * into acc [n][nb]: one thread a (row, column pair). */
template <int DT>
__global__ void i8_split_finish_kernel(const int32_t *__restrict__ acc,
                                       void *out, int64_t n, int nb,
                                       const I8Epilogue ep, bool pair) {
  const int np = (nb + 1) / 2;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
       i < n * np; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / np;
    const int c = (int)(i - row * np) * 2;
    const int32_t *a = acc + row * nb + c;
    const I8ColPair<DT> k(ep, c, nb);
    i8_put2_direct<DT>(ep, out, row, nb, c, pair, k, a[0],
                       c + 1 < nb ? a[1] : 0);
  }
}

/* ---- the regular conv's tensor-core kernel ------------------------------- */
/* BM x BN output tile, BK reduction bytes (channels) per stage, warp tile
 * WM x WN: (WM / 16) * (WN / 8) * 4 int32 accumulators per thread. */
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_>
struct I8Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_,
                       STAGES = STAGES_;
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static constexpr int ACC = MI * NI * 4;
  /* +16 bytes a row: the 8 rows one ldmatrix reads then fall on 8
   * different 4-bank groups (pitches of 48 and 80 bytes both do) */
  static constexpr int PITCH = BK + 16;
  static constexpr int SMEM = STAGES * (BM + BN) * PITCH;
  static constexpr bool WG = false;
  static_assert(BK % 32 == 0 && WM % 16 == 0, "mma shape");
  static_assert(NI % 2 == 0, "B fragments are loaded two n-tiles at a time");
};

__device__ __forceinline__ void mma_s8(int32_t (&c)[4], const uint32_t (&a)[4],
                                       uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}

/* y[o][n] = epilogue(sum_k sum_c x[nbr[o][k]][c] * wt[k][n][c]).
 * args: a = x [n_in][ka] (ka % 16 == 0, 16-byte aligned), w = wt
 * [kvol][nb][ka], out = y [n_dst][nb] in ep.dtype. */
template <typename TL>
__global__ void __launch_bounds__(TL::THREADS)
    i8_fwd_kernel(const FwdArgs args, const I8Epilogue ep) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ TileOffsets<TL::BM> tile;

  int8_t *sA = reinterpret_cast<int8_t *>(smem_raw);
  int8_t *sB = sA + TL::STAGES * TL::BM * TL::PITCH;
  const int8_t *A = static_cast<const int8_t *>(args.a);
  const int8_t *W = static_cast<const int8_t *>(args.w);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / TL::WARPS_N, wn = warp % TL::WARPS_N;
  const int kvol = args.kvol, ka = args.ka, nb = args.nb;
  const int64_t wsk = (int64_t)ka * nb;
  TileSpan span;
  int a0;
  if (!i8_begin_tile<TL>(args, tile, &span, &a0))
    return;
  const int n0 = span.n0, rows = span.rows, nchunk = span.nchunk,
            iters = span.iters;

  constexpr int AV = TL::BK / 16; /* 16-byte vectors per row and stage */
  constexpr int AVPT = (TL::BM * AV + TL::THREADS - 1) / TL::THREADS;
  RowGather<AVPT> gather;
  gather.template init<TL::THREADS, AV>(tid, rows, tile.rows, kvol);
  gather.fetch(args.nbr, tile, a0);

  /* B: BN rows (output channels) of BK bytes; a thread's vectors sit at
   * the same place of every stage. */
  constexpr int B_VECS = TL::BN * AV;
  constexpr int BVPT = (B_VECS + TL::THREADS - 1) / TL::THREADS;
  int b_goff[BVPT], b_soff[BVPT], b_kidx[BVPT];
  bool b_nok[BVPT];
#pragma unroll
  for (int j = 0; j < BVPT; j++) {
    const int v = tid + j * TL::THREADS;
    const int row = v / AV, vec = v % AV;
    b_kidx[j] = vec * 16;
    b_nok[j] = v < B_VECS && n0 + row < nb;
    b_goff[j] = (n0 + row) * ka + vec * 16;
    b_soff[j] = row * TL::PITCH + vec * 16;
  }

  int ld_ai = a0, ld_chunk = 0;
  auto load_stage = [&](int stage, int) {
    const int k = tile.act[ld_ai];
    const int c0 = ld_chunk * TL::BK;
    int8_t *a_dst = sA + stage * TL::BM * TL::PITCH;
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int v = tid + j * TL::THREADS;
      if (TL::BM * AV % TL::THREADS != 0 && v >= TL::BM * AV)
        break;
      const int r = v / AV, cv = v % AV;
      const int col = c0 + cv * 16;
      const int src = gather.src[j];
      const bool ok = src >= 0 && col < ka;
      cp_async16(a_dst + r * TL::PITCH + cv * 16,
                 ok ? A + (int64_t)src * ka + col : A, ok);
    }
    if (++ld_chunk == nchunk) {
      ld_chunk = 0;
      gather.fetch(args.nbr, tile, ++ld_ai);
    }
    int8_t *b_dst = sB + stage * TL::BN * TL::PITCH;
    const int8_t *wc = W + (int64_t)k * wsk + c0;
#pragma unroll
    for (int j = 0; j < BVPT; j++) {
      if (B_VECS % TL::THREADS != 0 && tid + j * TL::THREADS >= B_VECS)
        break;
      const bool ok = b_nok[j] && c0 + b_kidx[j] < ka;
      cp_async16(b_dst + b_soff[j], ok ? wc + b_goff[j] : W, ok);
    }
  };

  int32_t acc[TL::MI][TL::NI][4];
#pragma unroll
  for (int mi = 0; mi < TL::MI; mi++)
#pragma unroll
    for (int ni = 0; ni < TL::NI; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        acc[mi][ni][e] = 0;

  run_pipeline<TL::STAGES>(iters, load_stage, [&](int stage, int) {
    const int8_t *a_s = sA + stage * TL::BM * TL::PITCH;
    const int8_t *b_s = sB + stage * TL::BN * TL::PITCH;
#pragma unroll
    for (int kk = 0; kk < TL::BK; kk += 32) {
      uint32_t af[TL::MI][4];
#pragma unroll
      for (int mi = 0; mi < TL::MI; mi++) {
        const int r = wm * TL::WM + mi * 16 + (lane & 15);
        ldsm_x4(af[mi], a_s + r * TL::PITCH + kk + (lane >> 4) * 16);
      }
      uint32_t bf[TL::NI][2];
#pragma unroll
      for (int nj = 0; nj < TL::NI; nj += 2) {
        uint32_t r4[4];
        const int nr = wn * TL::WN + nj * 8 + (lane & 7) + (lane >> 4) * 8;
        ldsm_x4(r4, b_s + nr * TL::PITCH + kk + ((lane >> 3) & 1) * 16);
        bf[nj][0] = r4[0];
        bf[nj][1] = r4[1];
        bf[nj + 1][0] = r4[2];
        bf[nj + 1][1] = r4[3];
      }
#pragma unroll
      for (int mi = 0; mi < TL::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < TL::NI; ni++)
          mma_s8(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
  });

  /* Every (row < n_dst, col < nb) of the tile is written once; rows
   * without neighbours get the epilogue of a zero sum. */
  /* 64 accumulators a thread (tiles 0, 7): both epilogue paths in one
   * kernel put the accumulators on the stack (measured slower, item 77) */
  const I8Staging<(TL::ACC <= 32)> stg(smem_raw, args, ep, TL::BM, TL::BN,
                                       TL::SMEM);
  if (stg.on)
    __syncthreads(); /* every warp is done reading the stages */
  const int g = lane >> 2, t4 = lane & 3;
  i8_by_dtype<true>(ep.dtype, [&](auto dt) {
    constexpr int DT = decltype(dt)::value;
#pragma unroll
    for (int ni = 0; ni < TL::NI; ni++) {
      const int c = wn * TL::WN + ni * 8 + t4 * 2;
      if (n0 + c >= nb)
        continue;
      const I8ColPair<DT> k(ep, n0 + c, nb);
#pragma unroll
      for (int mi = 0; mi < TL::MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++)
          stg.template put2<DT>(ep, args, tile.rows, rows, n0,
                                wm * TL::WM + mi * 16 + g + h * 8, c, k,
                                acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
    }
  });
  if (stg.on) {
    __syncthreads();
    stg.copy_out<TL::THREADS>(args, tile.rows, n0, rows);
  }
}

/* ---- the same on Hopper warpgroup MMA (sm_90a) ---------------------------
 * wgmma.mma_async.m64nNk32.s32.s8.s8 (integer wgmma has no transpose and no
 * input scales: both operands K-major, which A's gathered rows and the
 * K-major weight copy are). Two warpgroups of 64 rows, stage rows of BK
 * bytes (channels) in the f16 kernels' swizzled layout: a 128-byte int8
 * row is laid out as a 64-half row (128-byte swizzle), a 64-byte row as a
 * 32-half one (64-byte swizzle), and one k-step (32 int8) spans the same
 * 32 bytes as an f16 k-step (16 halves), so the f16 descriptors and
 * swizzle helpers (cuda_mask_gemm_sm90.cuh) apply unchanged. Each stage
 * carries twice the multiply-adds of an f16 stage of the same bytes. */
template <int BN_, int STAGES_, int BK_, int MIN_BLOCKS_ = 1, int WGN_ = 1>
struct I8WgTile {
  static constexpr int BM = 128, BN = BN_, BK = BK_, STAGES = STAGES_;
  /* warpgroups along N: WGN = 2 gives each of the 4 warpgroups 64 rows x
   * BN / 2 columns, so a block's gathered rows feed BN columns with 64
   * accumulators a thread (tiles 19-20; item 114) */
  static constexpr int WGN = WGN_, WN = BN / WGN_;
  static constexpr int THREADS = 256 * WGN_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;
  /* + 1024: the stages start 1024-aligned (the swizzle reads address bits
   * 4-9) */
  static constexpr int SMEM = STAGES * (A_STAGE + B_STAGE) + 1024;
  static constexpr int SWZ = BK / 2; /* the f16 helpers' row length */
  static constexpr int ACC = WN / 2; /* int32 accumulators per thread */
  static_assert(WN * WGN == BN && (WN == 64 || WN == 128 || WN == 256),
                "warpgroups of a wgmma N each");
  static constexpr bool WG = true;
  static_assert(BK == 64 || BK == 128, "64- or 128-byte swizzled rows");
  /* (also a use of SWZ where the kernel body is compiled out: the non-90a
   * targets of a multi-arch build would warn about an unused member) */
  static_assert(SWZ * 2 == BK, "an f16 row of SWZ halves spans BK bytes");
  static_assert(STAGES >= 3, "wg_pipeline keeps one wgmma group in flight");
};

/* Only where the wgmma kernel bodies are compiled (sm_90a): elsewhere
 * nothing calls them. */
#ifdef VC_MG_SM90_BODY
#define VC_I8_WG_SPEC(N, NREG, IA, IB)                                         \
  template <> struct WgmmaI8<N> {                                              \
    static __device__ __forceinline__ void run(uint32_t (&d)[NREG],            \
                                               uint64_t da, uint64_t db) {     \
      asm volatile("wgmma.mma_async.sync.aligned.m64n" #N                      \
                   "k32.s32.s8.s8 {" VC_WG_R##NREG "}, " IA ", " IB ", 1;\n"   \
                   : VC_WG_OPS##NREG("+r", d)                                  \
                   : "l"(da), "l"(db));                                        \
    }                                                                          \
  };
template <int N> struct WgmmaI8;
VC_I8_WG_SPEC(64, 32, "%32", "%33")
VC_I8_WG_SPEC(128, 64, "%64", "%65")
VC_I8_WG_SPEC(256, 128, "%128", "%129")
#undef VC_I8_WG_SPEC
#endif

template <typename TL>
__global__ void __launch_bounds__(TL::THREADS, TL::MIN_BLOCKS)
    i8_wg_fwd_kernel(const FwdArgs args, const I8Epilogue ep) {
#ifdef VC_MG_SM90_BODY
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ TileOffsets<TL::BM> tile;
  const unsigned raw = smem_addr(smem_raw);
  const unsigned sa_base = (raw + 1023u) & ~1023u;
  const unsigned sb_base = sa_base + TL::STAGES * TL::A_STAGE;

  const int8_t *A = static_cast<const int8_t *>(args.a);
  const int8_t *W = static_cast<const int8_t *>(args.w);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  /* warpgroup wg: rows 64 wm.., columns WN wn.. of the tile */
  const int wg = warp >> 2, wq = warp & 3, wm = wg & 1, wn = wg >> 1;
  const int kvol = args.kvol, ka = args.ka, nb = args.nb;
  const int64_t wsk = (int64_t)ka * nb;
  TileSpan span;
  int a0;
  if (!i8_begin_tile<TL>(args, tile, &span, &a0))
    return;
  const int n0 = span.n0, rows = span.rows, nchunk = span.nchunk,
            iters = span.iters;

  constexpr int AV = TL::BK / 16; /* 16-byte vectors per row */
  constexpr int AVPT = TL::BM * AV / TL::THREADS;
  constexpr int BVPT = TL::BN * AV / TL::THREADS;
  static_assert(TL::BM * AV % TL::THREADS == 0 &&
                    TL::BN * AV % TL::THREADS == 0,
                "every thread copies whole vectors of each stage");
  RowGather<AVPT> gather;
  gather.template init<TL::THREADS, AV>(tid, rows, tile.rows, kvol);
  gather.fetch(args.nbr, tile, a0);
  /* vector v = tid + j * THREADS is chunk cv of row v / AV in every stage
   * (the f16 wgmma kernel's layout): shared offsets computed once */
  const int cv = tid % AV;
  unsigned a_soff[AVPT], b_soff[BVPT];
  const int8_t *b_src[BVPT];
  bool b_ok[BVPT];
#pragma unroll
  for (int j = 0; j < AVPT; j++)
    a_soff[j] = swz<TL::SWZ>((tid + j * TL::THREADS) / AV, cv);
#pragma unroll
  for (int j = 0; j < BVPT; j++) {
    const int n = (tid + j * TL::THREADS) / AV;
    b_soff[j] = swz<TL::SWZ>(n, cv);
    b_ok[j] = n0 + n < nb;
    b_src[j] = W + (b_ok[j] ? (n0 + n) * ka + cv * 16 : 0);
  }
  const int8_t *a_src[AVPT];
  bool a_ok[AVPT];

  int ld_ai = a0, ld_chunk = 0;
  auto load_stage = [&](int stage, int) {
    if (ld_chunk == 0) {
#pragma unroll
      for (int j = 0; j < AVPT; j++) {
        const int src = gather.src[j];
        a_ok[j] = src >= 0;
        a_src[j] = A + (a_ok[j] ? (int64_t)src * ka + cv * 16 : 0);
      }
    }
    const int c0 = ld_chunk * TL::BK;
    const bool col_ok = c0 + cv * 16 < ka;
    const int64_t b_off = (int64_t)tile.act[ld_ai] * wsk + c0;
    const unsigned a_dst = sa_base + stage * TL::A_STAGE;
#pragma unroll
    for (int j = 0; j < AVPT; j++)
      cp_async16_s(a_dst + a_soff[j], a_src[j] + c0, a_ok[j] && col_ok);
    const unsigned b_dst = sb_base + stage * TL::B_STAGE;
#pragma unroll
    for (int j = 0; j < BVPT; j++)
      cp_async16_s(b_dst + b_soff[j], b_src[j] + b_off, b_ok[j] && col_ok);
    if (++ld_chunk == nchunk) {
      ld_chunk = 0;
      gather.fetch(args.nbr, tile, ++ld_ai);
    }
  };

  uint32_t acc[TL::ACC];
#pragma unroll
  for (int i = 0; i < TL::ACC; i++)
    acc[i] = 0u;
  constexpr uint64_t dhi = (uint64_t)wg_desc_hi<TL::SWZ>() << 32;
  const unsigned da0 = wg_desc_lo(sa_base + wm * 64 * TL::BK);
  /* B rows are output columns; WN of them (a multiple of the swizzle's
   * 8-row atom) start the warpgroup's part */
  const unsigned db0 = wg_desc_lo(sb_base + wn * TL::WN * TL::BK);
  wg_pipeline<TL::STAGES, 0>(
      iters, load_stage,
      [&](int stage) {
        const unsigned da = da0 + stage * (TL::A_STAGE >> 4);
        const unsigned db = db0 + stage * (TL::B_STAGE >> 4);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < TL::BK / 32; ks++) /* 32 bytes a k-step */
          WgmmaI8<TL::WN>::run(acc, dhi | (da + 2 * ks), dhi | (db + 2 * ks));
        wgmma_commit();
      },
      [] {});
#pragma unroll
  for (int i = 0; i < TL::ACC; i++)
    pin(acc[i]);
  cp_async_wait<0>();

  /* D of m64nN: per 8 columns j, registers 4j + 2h + e hold row
   * 16 wq + g + 8h, column 8j + 2t + e of the warpgroup's 64 rows and WN
   * columns */
  const I8Staging<(TL::ACC <= 64)> stg(
      smem_raw + (sa_base - raw), args, ep, TL::BM, TL::BN,
      TL::STAGES * (TL::A_STAGE + TL::B_STAGE));
  if (stg.on)
    __syncthreads(); /* both warpgroups' wgmma are done with the stages */
  const int g = lane >> 2, t4 = lane & 3;
  i8_by_dtype<true>(ep.dtype, [&](auto dt) {
    constexpr int DT = decltype(dt)::value;
#pragma unroll
    for (int j = 0; j < TL::WN / 8; j++) {
      const int c = wn * TL::WN + j * 8 + t4 * 2;
      if (n0 + c >= nb)
        continue;
      const I8ColPair<DT> k(ep, n0 + c, nb);
#pragma unroll
      for (int h = 0; h < 2; h++)
        stg.template put2<DT>(ep, args, tile.rows, rows, n0,
                              wm * 64 + wq * 16 + g + h * 8, c, k,
                              (int32_t)acc[4 * j + 2 * h],
                              (int32_t)acc[4 * j + 2 * h + 1]);
    }
  });
  if (stg.on) {
    __syncthreads();
    stg.copy_out<TL::THREADS>(args, tile.rows, n0, rows);
  }
#endif
}

/* ---- few input channels: whole-row im2col in shared memory -------------
 * (tile 18; mask_gemm_im2col's scheme, cuda_mask_gemm.cuh, in int8). With
 * cin <= 4 and kvol <= 28 (each row zero-padded to 4 bytes) a row's every
 * offset fits one K = kvol x 4 <= 112-byte reduction, so a tile gathers
 * all its (row, offset) inputs at once -- one 4-byte cp.async each, one
 * barrier -- and runs K / 32 k-steps of mma.sync.m16n8k32 from shared
 * memory, with the weights staged once per block and blocks looping over
 * row tiles. The im2col rows of the tile path (i8_im2col_kernel, then a
 * one-offset tile over 96-byte rows) cost ~0.42 ms at workload A's 3 -> 64
 * against the f16 im2col kernel's 0.28: ~7,000 short tiles, each a
 * pipeline fill and an epilogue for three k-steps (docs/perf-notes.md
 * items 81, 89). */
struct I8Im2colTile {
  /* two A buffers: a tile's gathers fly while the previous tile's MMAs
   * and epilogue run (docs/perf-notes.md item 133) */
  static constexpr int BM = 128, BN = 64, BK = 128, STAGES = 2;
  static constexpr int THREADS = 256, CP = 4, MAX_KVOL = 28; /* K <= 112 */
  static constexpr int PITCH = BK + 16; /* 144 B: ldmatrix conflict-free */
  static constexpr int ACC = 32;        /* 8 n-tiles x 4 per thread */
  static constexpr int SMEM = (STAGES * BM + BN) * PITCH; /* 46,080 B */
  static constexpr bool WG = false;
  /* offsets fastest: the rows-fastest order that sped the f16 kernel up
   * gained nothing here (4-byte gathers; perf-notes item 135) */
  static constexpr bool ROWS = false;
};

/* Elements v = tid, tid + THREADS, tid + 2 THREADS, ... of a whole-row
 * im2col tile in turn as (row r, offset k), offsets fastest, with one
 * division by kvol a walk: stepping v by THREADS moves r by THREADS / kvol
 * and k by THREADS % kvol, carrying a row when k passes kvol. */
struct Im2colWalk {
  int r, k, kvol, dr, dk;
  __device__ __forceinline__ Im2colWalk(int tid, int threads, int kv)
      : kvol(kv) {
    r = tid / kvol;
    k = tid - r * kvol;
    dr = threads / kvol;
    dk = threads - dr * kvol;
  }
  __device__ __forceinline__ void next() {
    r += dr;
    k += dk;
    if (k >= kvol) {
      k -= kvol;
      r++;
    }
  }
};

struct I8Im2colArgs {
  const int8_t *x;    /* [n_in][4], zero-padded past cin */
  const int32_t *nbr; /* [n_out][kvol] */
  const int8_t *w;    /* [kvol][cin][cout] as stored, or KOI [kvol][cout][cin] */
  void *out;          /* [n_out][cout] in ep.dtype */
  int n_dst, kvol, cin, cout;
  bool w_koi;
};

__global__ void __launch_bounds__(I8Im2colTile::THREADS, 2)
    i8_im2col_fwd_kernel(const I8Im2colArgs args, const I8Epilogue ep) {
  using TL = I8Im2colTile;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int8_t *a_buf = reinterpret_cast<int8_t *>(smem_raw); /* STAGES x BM rows */
  int8_t *b_s = a_buf + TL::STAGES * TL::BM * TL::PITCH;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kvol = args.kvol, nb = args.cout;
  const int K = kvol * TL::CP, KP = (K + 31) & ~31;
  const int n0 = blockIdx.x * TL::BN;

  /* B[n][kk] = W[kk / 4][kk % 4][n0 + n] for kk % 4 < cin, else 0 (x's
   * pad bytes are zeros too): K-major, as mma.sync's s8 B fragments (and
   * ldmatrix, which cannot transpose bytes) need. Once per block. */
  for (int v = tid; v < TL::BN * KP; v += TL::THREADS) {
    const int n = v / KP, kk = v - n * KP;
    const int k = kk >> 2, c = kk & 3;
    int8_t b = 0;
    if (kk < K && c < args.cin && n0 + n < nb)
      b = args.w[args.w_koi ? ((int64_t)k * nb + n0 + n) * args.cin + c
                            : ((int64_t)k * args.cin + c) * nb + n0 + n];
    b_s[n * TL::PITCH + kk] = b;
  }
  /* A's columns K .. KP-1 are never gathered into: zeros, once (rows of
   * both buffers) */
  for (int v = tid; v < TL::STAGES * TL::BM * (KP - K); v += TL::THREADS) {
    const int r = v / (KP - K);
    a_buf[r * TL::PITCH + K + (v - r * (KP - K))] = 0;
  }

  /* Gather sources of a tile, element v = tid + j * THREADS = (r, k), k
   * fastest, fetched one tile ahead, as the f16 kernel does. Row m0 + r's
   * entry k is entry m0 * kvol + v of the table: one bound and one load an
   * element, none past the rows (a tile past the last has none). */
  constexpr int GJ = (TL::BM * TL::MAX_KVOL + TL::THREADS - 1) / TL::THREADS;
  const int tiles = (args.n_dst + TL::BM - 1) / TL::BM;
  int32_t src[GJ];
  auto fetch = [&](int tile) {
    const int64_t first = (int64_t)tile * TL::BM * kvol + tid;
    const int64_t end =
        (int64_t)min(tile * TL::BM + TL::BM, args.n_dst) * kvol;
    const int32_t *e = args.nbr + first;
#pragma unroll
    for (int j = 0; j < GJ; j++)
      src[j] = first + j * TL::THREADS < end ? __ldg(e + j * TL::THREADS) : -1;
  };
  /* The gathers of a tile (src holds its table entries) into the buffer
   * at shared address a_dst, one 4-byte cp.async an element (zero-filling
   * absent neighbours), predicated rather than branched: per element the
   * compiler had made a branch, a convergence barrier and a generic-to-
   * shared conversion around each copy, ~24 instructions for one
   * (docs/perf-notes.md item 140). */
  static_assert(!TL::ROWS, "the gathers walk offsets fastest");
  const int n_el = TL::BM * kvol;
  auto gather = [&](unsigned a_dst) {
    Im2colWalk walk(tid, TL::THREADS, kvol);
#pragma unroll
    for (int j = 0; j < GJ; j++, walk.next()) {
      const unsigned dst = a_dst + walk.r * TL::PITCH + walk.k * TL::CP;
      const int s = src[j];
      const int8_t *from = args.x + (s >= 0 ? (int64_t)s * TL::CP : 0);
      asm volatile("{\n\t.reg .pred p;\n\t"
                   "setp.lt.s32 p, %3, %4;\n\t"
                   "@p cp.async.ca.shared.global [%0], [%1], 4, %2;\n\t}\n"
                   ::"r"(dst), "l"(from), "r"(s >= 0 ? 4 : 0),
                   "r"(tid + j * TL::THREADS), "r"(n_el));
    }
  };
  const unsigned a_sh = smem_addr(a_buf);
  /* Two buffers: tile i's gathers were issued during tile i - 1's MMAs
   * and epilogue; one barrier a tile both publishes tile i's rows and
   * tells every thread is past tile i - 1's MMAs, whose buffer tile i + 1
   * is then gathered into. */
  fetch(blockIdx.y);
  if (blockIdx.y < tiles)
    gather(a_sh);
  fetch(blockIdx.y + gridDim.y); /* in flight during the first wait */
  cp_async_commit();
  const int g = lane >> 2, t4 = lane & 3;
  int buf = 0;
  for (int tile = blockIdx.y; tile < tiles; tile += gridDim.y, buf ^= 1) {
    const int m0 = tile * TL::BM;
    const int8_t *a_s = a_buf + buf * TL::BM * TL::PITCH;
    cp_async_wait<0>();
    __syncthreads();
    if (tile + gridDim.y < tiles)
      gather(a_sh + (buf ^ 1) * TL::BM * TL::PITCH);
    fetch(tile + 2 * gridDim.y); /* in flight during the MMAs */
    cp_async_commit();

    /* warp w: rows 16 w .. 16 w + 15, all 64 columns (8 n-tiles) */
    int32_t acc[TL::BN / 8][4];
#pragma unroll
    for (int j = 0; j < TL::BN / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        acc[j][e] = 0;
    for (int kk = 0; kk < KP; kk += 32) {
      uint32_t af[4];
      ldsm_x4(af, a_s + (warp * 16 + (lane & 15)) * TL::PITCH + kk +
                      (lane >> 4) * 16);
#pragma unroll
      for (int nj = 0; nj < TL::BN / 8; nj += 2) {
        uint32_t r4[4];
        const int nr = nj * 8 + (lane & 7) + (lane >> 4) * 8;
        ldsm_x4(r4, b_s + nr * TL::PITCH + kk + ((lane >> 3) & 1) * 16);
        mma_s8(acc[nj], af, r4[0], r4[1]);
        mma_s8(acc[nj + 1], af, r4[2], r4[3]);
      }
    }
    i8_by_dtype(ep.dtype, [&](auto dt) {
      constexpr int DT = decltype(dt)::value;
      /* a fragment's two adjacent columns as one store */
      const bool pair =
          (nb & 1) == 0 &&
          ((uintptr_t)args.out & (2 * sizeof(typename I8Out<DT>::T) - 1)) == 0;
#pragma unroll
      for (int j = 0; j < TL::BN / 8; j++) {
        const int c = n0 + j * 8 + t4 * 2;
        if (c >= nb)
          continue;
        const I8ColPair<DT> k(ep, c, nb);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int row = m0 + warp * 16 + g + h * 8;
          if (row < args.n_dst)
            i8_put2_direct<DT>(ep, args.out, row, nb, c, pair, k,
                               acc[j][2 * h], acc[j][2 * h + 1]);
        }
      }
    });
  }
  cp_async_wait<0>(); /* a block with no tile: nothing in flight at exit */
}

/* ---- depthwise ------------------------------------------------------------ */
/* y[o][c] = epilogue(sum_k x[nbr[o][k]][c] * w[k][c]); one thread per
 * (row, group of VEC channels); VEC = 4 when C % 4 == 0 and the buffers
 * are 4-byte aligned (char4 loads), else 1. */
template <int VEC>
__global__ void i8_dw_kernel(const int8_t *__restrict__ x,
                             const int32_t *__restrict__ nbr,
                             const int8_t *__restrict__ w, void *y,
                             int64_t n_rows, int kvol, int C,
                             const I8Epilogue ep) {
  const int groups = C / VEC;
  const int64_t total = n_rows * groups;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / groups;
    const int c = (int)(e - r * groups) * VEC;
    const int32_t *nr = nbr + r * kvol;
    int32_t s[VEC];
#pragma unroll
    for (int v = 0; v < VEC; v++)
      s[v] = 0;
    for (int k = 0; k < kvol; k++) {
      const int32_t src = __ldg(nr + k);
      if (src < 0)
        continue;
      if constexpr (VEC == 4) {
        const char4 a = *reinterpret_cast<const char4 *>(x + (int64_t)src * C + c);
        const char4 b = __ldg(reinterpret_cast<const char4 *>(w + (int64_t)k * C + c));
        s[0] += (int32_t)a.x * b.x;
        s[1] += (int32_t)a.y * b.y;
        s[2] += (int32_t)a.z * b.z;
        s[3] += (int32_t)a.w * b.w;
      } else {
        s[0] += (int32_t)x[(int64_t)src * C + c] * (int32_t)w[(int64_t)k * C + c];
      }
    }
    i8_by_dtype(ep.dtype, [&](auto dt) {
      constexpr int DT = decltype(dt)::value;
      typename I8Out<DT>::T *yr =
          static_cast<typename I8Out<DT>::T *>(y) + r * C + c;
#pragma unroll
      for (int v = 0; v < VEC; v++) {
        float m = 0.0f, b = 0.0f;
        if constexpr (DT != VOXCONV_DTYPE_I32)
          i8_column(ep, c + v, m, b);
        yr[v] = i8_typed<DT>(ep, s[v], m, b);
      }
    });
  }
}

/* ---- tile table ------------------------------------------------------------
 * Stable IDs (docs/tiles.md, "mask_gemm_i8"). Pairs of the same block shape
 * with half the int32 accumulators per thread (twice the warps) let a
 * problem trade registers for occupancy, as the f16 tiles do. */
typedef I8Tile<128, 128, 64, 64, 32, 4> Q0; /* 8 warps, 64 acc/thread */
typedef I8Tile<128, 128, 64, 32, 32, 4> Q1; /* 16 warps, 32 acc */
typedef I8Tile<128, 64, 64, 32, 32, 4> Q2;  /* 8 warps, 32 acc */
typedef I8Tile<128, 64, 64, 32, 16, 4> Q3;  /* 16 warps, 16 acc */
typedef I8Tile<64, 64, 64, 32, 32, 4> Q4;   /* 4 warps, 32 acc */
typedef I8Tile<64, 64, 64, 32, 16, 4> Q5;   /* 8 warps, 16 acc */
typedef I8Tile<64, 32, 32, 32, 16, 4> Q6;   /* small channels: 4 warps, 16 */
typedef I8Tile<128, 256, 64, 64, 32, 3> Q7; /* C > 128: 16 warps, 64 acc */
/* wgmma (sm_90a): 2 warpgroups of 64 rows x BN; BK bytes a stage */
typedef I8WgTile<128, 4, 128> Q8;     /* 64 acc, 129 KB: 1 block a SM */
typedef I8WgTile<128, 3, 128, 2> Q9;  /* 64 acc, 97 KB: 2 blocks */
typedef I8WgTile<256, 3, 128> Q10;    /* 128 acc: each row feeds 256 cols */
typedef I8WgTile<64, 4, 64, 3> Q11;   /* C <= 64: 32 acc, 64-byte rows, 3 blocks */
typedef I8WgTile<128, 4, 64, 2> Q12;  /* 64 acc, 64-byte rows */
typedef I8WgTile<64, 4, 128, 2> Q13;  /* 32 acc, 128-byte rows */
/* Deeper pipelines. Tiles 8-13 keep 1-2 stages of gathers in flight per
 * block, 64 KB or less per SM; the rows are random L2 / DRAM reads and a
 * stage waits for its gather about once per iteration (int8 ran no faster
 * than f16 with half the bytes), so these keep more bytes in flight. */
typedef I8WgTile<128, 6, 128> Q14;    /* 4 stages in flight, 193 KB */
typedef I8WgTile<64, 8, 64, 2> Q15;   /* C <= 64: 2 blocks x 6 in flight */
typedef I8WgTile<128, 12, 64> Q16;    /* 10 in flight of 16 KB */
typedef I8WgTile<256, 4, 128> Q17;    /* 2 in flight of 48 KB */
/* 18: cin <= 4 (kvol <= 28) runs i8_im2col_fwd_kernel; any other problem
 * runs pick_tile's tile (so the tuner and the tests may run 18 anywhere) */
#define VC_I8_IM2COL_TILE 18
/* 128 x 256 tiles of 4 warpgroups (2 along N), 64 accumulators a thread:
 * each gathered row feeds 256 columns (tile 9 gathers it once per 128),
 * one block a SM of 16 warps (item 114) */
typedef I8WgTile<256, 4, 128, 1, 2> Q19; /* 193 KB */
typedef I8WgTile<256, 6, 64, 1, 2> Q20;  /* 145 KB, 4 stages in flight */
#define VC_I8_TILES 21

template <typename TL> auto kernel_of() {
  if constexpr (TL::WG)
    return i8_wg_fwd_kernel<TL>;
  else
    return i8_fwd_kernel<TL>;
}

/* split: slices of the kernel offsets (grid z; 1 = none, see
 * i8_split_slice; ep then adds partial sums) */
template <typename TL>
voxconv_status_t launch_i8(voxconv_handle_t *h, const FwdArgs &a,
                           const I8Epilogue &ep, int split) {
  auto kern = kernel_of<TL>();
  if (TL::SMEM > 48 * 1024)
    VC_CUDA_TRY(h, vc_cuda_smem_optin(h, (const void *)kern, TL::SMEM));
  const dim3 grid((unsigned)vc_ceil_div(a.nb, TL::BN),
                  (unsigned)vc_ceil_div(a.n_dst, TL::BM), (unsigned)split);
  kern<<<grid, TL::THREADS, TL::SMEM, vc_cuda_stream(h)>>>(a, ep);
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 forward kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* One row per tile ID: its kernel, launcher and resources (the one list
 * of the tiles; the ID is the row's index). */
struct TileRow {
  const void *fn;
  voxconv_status_t (*launch)(voxconv_handle_t *, const FwdArgs &,
                             const I8Epilogue &, int);
  int bm, bn, bk, stages, threads, acc, smem;
  bool wg; /* wgmma: sm_90a only */
};
template <typename TL> TileRow tile_row() {
  return {(const void *)kernel_of<TL>(), launch_i8<TL>, TL::BM, TL::BN,
          TL::BK, TL::STAGES, TL::THREADS, TL::ACC, TL::SMEM, TL::WG};
}
/* tile 18's row: its own launch (run_im2col_fused); launch stays NULL */
TileRow im2col_row() {
  using TL = I8Im2colTile;
  return {(const void *)i8_im2col_fwd_kernel, NULL, TL::BM, TL::BN, TL::BK,
          TL::STAGES, TL::THREADS, TL::ACC, TL::SMEM, TL::WG};
}
const TileRow &tile_info(int t) {
  static const TileRow rows[VC_I8_TILES] = {
      tile_row<Q0>(), tile_row<Q1>(), tile_row<Q2>(), tile_row<Q3>(),
      tile_row<Q4>(), tile_row<Q5>(), tile_row<Q6>(), tile_row<Q7>(),
      tile_row<Q8>(), tile_row<Q9>(), tile_row<Q10>(), tile_row<Q11>(),
      tile_row<Q12>(), tile_row<Q13>(), tile_row<Q14>(), tile_row<Q15>(),
      tile_row<Q16>(), tile_row<Q17>(), im2col_row(),  tile_row<Q19>(),
      tile_row<Q20>()};
  return rows[t];
}

/* Whether h's device runs the wgmma tiles: an sm_90a image and a compute
 * capability 9.0 device (wgmma is not on later architectures either). */
bool has_wgmma(const voxconv_handle_t *h) {
#ifdef VC_HAVE_SM90A
  const vc_cuda_state_t *s = vc_cuda_state(h);
  return s->cc_major == 9 && s->cc_minor == 0;
#else
  (void)h;
  return false;
#endif
}

/* 1 when tile t's shared memory (static + dynamic) fits a block on h's
 * device, as voxconv_kernel_info_t's `eligible` means it; the static part
 * (the tile's offset list, ~2 KB) is read from the kernel only when the
 * dynamic part alone leaves the answer open (vc_smem_fit). */
int tile_fits_smem(const voxconv_handle_t *h, int t) {
  const TileRow &r = tile_info(t);
  const size_t limit = vc_cuda_state(h)->smem_optin;
  const int fit = vc_smem_fit((size_t)r.smem, limit);
  if (fit >= 0)
    return fit;
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, r.fn) != cudaSuccess) {
    cudaGetLastError(); /* not left behind for an unrelated check */
    return 0;
  }
  return (size_t)r.smem + fa.sharedSizeBytes <= limit;
}

/* 1 when tile t can run on h's device; else 0 and *why says what is
 * missing (a static sentence). */
int tile_usable(const voxconv_handle_t *h, int t, const char **why) {
  if (tile_info(t).wg && !has_wgmma(h)) {
    *why = "a wgmma tile needs an sm_90a build and a compute capability 9.0 "
           "GPU";
    return 0;
  }
  if (!tile_fits_smem(h, t)) {
    *why = "the tile needs more shared memory a block than this GPU allows";
    return 0;
  }
  return 1;
}

/* The tile for a problem without a VOXCONV_INT8_TILE: by output channels
 * (wider tiles reuse each gathered row for more outputs; narrow problems
 * need small tiles to fill the GPU) and reduction depth (64-byte stage
 * rows for cin <= 64, so that a stage is not half zeros); measured in
 * docs/perf-notes.md. */
int pick_tile(const voxconv_handle_t *h, int64_t cin, int64_t cout) {
  if (has_wgmma(h)) {
    if (cout <= 64)
      return 11;
    if (cin <= 64)
      return 12;
    /* one gathered row for 256 columns (workload C, C = 256: 2.13 ms
     * against tile 9's 2.36; at C = 128 a 256-wide tile is half idle) */
    return cout > 128 ? 19 : 9;
  }
  if (cout <= 32)
    return 2;
  if (cout <= 64)
    return 3;
  return 0;
}

I8Epilogue epilogue_of(const vc_int8_problem_t *p) {
  I8Epilogue ep;
  ep.w_scale = p->w_scale;
  ep.bias = p->bias;
  ep.x_scale = p->x_scale;
  ep.y_scale = p->y_scale;
  /* 1.0f / y_scale in binary32 on the host: correctly rounded (SSE) */
  ep.y_inv = vc_div_inv(p->y_scale);
  ep.relu = p->relu;
  ep.dtype = (int)p->y_dtype;
  return ep;
}

voxconv_status_t run_depthwise(voxconv_handle_t *h, const vc_int8_problem_t *p,
                               const I8Epilogue &ep) {
  const voxconv_kmap_t *m = p->kmap;
  const int C = (int)p->cout;
  const bool vec = C % 4 == 0 && ((uintptr_t)p->x & 3u) == 0 &&
                   ((uintptr_t)p->w & 3u) == 0;
  const int64_t threads = m->n_out * (vec ? C / 4 : C);
  const unsigned grid = vc_grid_1d(threads, 256);
  if (vec)
    i8_dw_kernel<4><<<grid, 256, 0, vc_cuda_stream(h)>>>(
        p->x, m->nbr_out, p->w, p->y, m->n_out, m->kvol, C, ep);
  else
    i8_dw_kernel<1><<<grid, 256, 0, vc_cuda_stream(h)>>>(
        p->x, m->nbr_out, p->w, p->y, m->n_out, m->kvol, C, ep);
  VC_CUDA_LAUNCH_CHECK(h, "depthwise_i8 kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- few input channels: one row per output (im2col) ---------------------
 * xc[o][j] = x[nbr[o][k]][c] for j = k * cin + c < kvol * cin (0 where o has
 * no neighbour at offset k), 0 for kvol * cin <= j < kcol: every offset's
 * input channels of one output side by side, the rows a one-offset problem
 * with kcol reduction bytes gathers. A lane writes one 16-byte chunk of a
 * row (kcol % 16 == 0), a warp 32 / chunks rows at a time, with 32-bit
 * index arithmetic stepped along the chunk: the first version indexed
 * every byte with a 64-bit division and cost as much as the padded path
 * it replaced (docs/perf-notes.md item 81). */
__global__ void i8_im2col_kernel(const int8_t *__restrict__ x,
                                 const int32_t *__restrict__ nbr,
                                 int8_t *__restrict__ xc, int64_t n_out,
                                 int kvol, int cin, int kcol) {
  const int lane = threadIdx.x & 31;
  const int chunks = kcol >> 4;
  const int rpw = chunks >= 32 ? 1 : 32 / chunks; /* rows per warp pass */
  const int sub = chunks >= 32 ? 0 : lane / chunks;
  const int q0 = chunks >= 32 ? lane : lane % chunks;
  const int qstep = chunks >= 32 ? 32 : chunks;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  if (sub >= rpw)
    return; /* lanes past the last whole row of a pass */
  for (int64_t o = warp * rpw + sub; o < n_out; o += warps * rpw) {
    const int32_t *nrow = nbr + o * kvol;
    uint4 *dst = reinterpret_cast<uint4 *>(xc + o * kcol);
    for (int q = q0; q < chunks; q += qstep) {
      alignas(16) int8_t v[16];
      int k = (q * 16) / cin, c = q * 16 - k * cin;
      int32_t src = k < kvol ? __ldg(nrow + k) : -1;
#pragma unroll
      for (int b = 0; b < 16; b++) {
        v[b] = src >= 0 ? __ldg(x + (int64_t)src * cin + c) : (int8_t)0;
        if (++c == cin) { /* the next offset's row (past kvol: padding) */
          c = 0;
          ++k;
          src = k < kvol ? __ldg(nrow + k) : -1;
        }
      }
      dst[q] = *reinterpret_cast<const uint4 *>(v);
    }
  }
}

/* ids[o] = o: the one-offset problem's neighbour table (row o gathers its
 * own im2col row). */
__global__ void i8_iota_kernel(int32_t *__restrict__ ids, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    ids[i] = (int32_t)i;
}

/* The row widths of p (bytes): ka = cin rounded up to 16 (an offset's
 * padded row), kcol = kvol * cin rounded up to 16 (an im2col row). */
int padded_cin(const vc_int8_problem_t *p) {
  return (int)((p->cin + 15) / 16 * 16);
}
int im2col_width(const vc_int8_problem_t *p) {
  const int64_t kc = p->kmap->kvol * p->cin; /* <= VC_INT8_MAX_KVOL_CIN */
  return (int)((kc + 15) / 16 * 16);
}

/* 1 when p runs as the one-offset im2col problem: few input channels (each
 * offset's row padded to 16 bytes would leave most of a 32-byte k-step
 * zero) and the im2col rows at most half the padded reduction. Workload
 * A's first layer (3 -> 64, kvol 27): 96 reduction bytes instead of 432. */
bool use_im2col(const vc_int8_problem_t *p) {
  const int64_t ka = padded_cin(p), kcol = im2col_width(p);
  return p->cin < 16 && kcol * 2 <= p->kmap->kvol * ka &&
         p->cout * kcol <= INT32_MAX; /* 32-bit weight offsets */
}

/* 1 when tile 18 runs a regular conv with cin input channels and kvol
 * offsets as its own kernel (else it runs the default tile). */
bool im2col_fused_takes(int64_t cin, int64_t kvol) {
  return cin <= I8Im2colTile::CP && kvol <= I8Im2colTile::MAX_KVOL;
}

/* xp[r] = x[r][0 .. cin-1] zero-padded to 4 bytes, one 4-byte store a row
 * (repad3_kernel's 64-bit index division per byte cost as much as the
 * layer it fed, docs/perf-notes.md item 81). */
__global__ void i8_pad4_kernel(const int8_t *__restrict__ x,
                               uint32_t *__restrict__ xp, int64_t n, int cin) {
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < n;
       r += (int64_t)gridDim.x * blockDim.x) {
    uint32_t v = 0;
    for (int c = 0; c < cin; c++) /* little-endian: byte c at bits 8c */
      v |= (uint32_t)(uint8_t)__ldg(x + r * cin + c) << (8 * c);
    xp[r] = v;
  }
}

/* Tile 18 on a problem it takes (cin <= 4, kvol <= 28): x zero-padded to
 * 4-byte rows when it is not already, then i8_im2col_fwd_kernel over
 * min(row tiles, 2 blocks a SM) blocks a column tile. */
voxconv_status_t run_im2col_fused(voxconv_handle_t *h,
                                  const vc_int8_problem_t *p,
                                  const I8Epilogue &ep) {
  using TL = I8Im2colTile;
  const voxconv_kmap_t *m = p->kmap;
  VcWorkspace ws(h);
  const int8_t *x = p->x;
  if (p->cin != TL::CP || !vc_aligned(x, 4)) {
    int8_t *xp = NULL;
    VC_CHECK(ws.get<int8_t>(m->n_in * TL::CP, &xp, "int8 4-byte rows"));
    if (m->n_in > 0) {
      i8_pad4_kernel<<<vc_grid_1d(m->n_in, 256), 256, 0, vc_cuda_stream(h)>>>(
          p->x, reinterpret_cast<uint32_t *>(xp), m->n_in, (int)p->cin);
      VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 i8_pad4_kernel");
    }
    x = xp;
  }
  I8Im2colArgs a;
  a.x = x;
  a.nbr = m->nbr_out;
  a.w = p->w;
  a.w_koi = p->w_koi != 0;
  a.out = p->y;
  a.n_dst = (int)m->n_out;
  a.kvol = (int)m->kvol;
  a.cin = (int)p->cin;
  a.cout = (int)p->cout;
  const int64_t tiles = vc_ceil_div<int64_t>(m->n_out, TL::BM);
  const int64_t blocks = 2 * (int64_t)vc_cuda_state(h)->sm_count;
  const dim3 grid((unsigned)vc_ceil_div<int64_t>(p->cout, TL::BN),
                  (unsigned)(tiles < blocks ? tiles : blocks));
  i8_im2col_fwd_kernel<<<grid, TL::THREADS, TL::SMEM, vc_cuda_stream(h)>>>(
      a, ep);
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 i8_im2col_fwd_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* The tile's kernel on a, with the offsets split `split` ways when split
 * > 1: partial sums added into a zeroed int32 buffer (y itself for an I32
 * output), then the epilogue over it (i8_split_finish_kernel). */
voxconv_status_t launch_split(voxconv_handle_t *h, const vc_int8_problem_t *p,
                              int tile, FwdArgs a, const I8Epilogue &ep,
                              int split, VcWorkspace &ws) {
  if (split <= 1)
    return tile_info(tile).launch(h, a, ep, 1);
  const int64_t ne = (int64_t)a.n_dst * a.nb;
  int32_t *acc = NULL;
  if (p->y_dtype == VOXCONV_DTYPE_I32)
    acc = static_cast<int32_t *>(p->y);
  else
    VC_CHECK(ws.get<int32_t>(ne, &acc, "int8 split-K sums"));
  VC_CUDA_TRY(h, cudaMemsetAsync(acc, 0, (size_t)ne * sizeof(int32_t),
                                 vc_cuda_stream(h)));
  I8Epilogue add = ep;
  add.dtype = VC_I8_ACC_ADD;
  a.out = acc;
  VC_CHECK(tile_info(tile).launch(h, a, add, split));
  if (p->y_dtype == VOXCONV_DTYPE_I32)
    return VOXCONV_STATUS_SUCCESS;
  const bool pair = (a.nb & 1) == 0 &&
                    vc_aligned(p->y, 2 * voxconv_dtype_size(p->y_dtype));
  const int64_t work = (int64_t)a.n_dst * ((a.nb + 1) / 2);
  const unsigned grid = vc_grid_1d(work, 256);
  cudaStream_t st = vc_cuda_stream(h);
  i8_by_dtype((int)p->y_dtype, [&](auto dt) { /* picks the instance */
    constexpr int DT = decltype(dt)::value;
    i8_split_finish_kernel<DT><<<grid, 256, 0, st>>>(acc, p->y, a.n_dst, a.nb,
                                                     ep, pair);
  });
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 i8_split_finish_kernel");
  return VOXCONV_STATUS_SUCCESS;
}


} // namespace

extern "C" int vc_cuda_int8_tile_count(void) { return VC_I8_TILES; }

extern "C" long vc_int8_tile_dyn_smem(int tile) {
  return tile >= 0 && tile < VC_I8_TILES ? (long)tile_info(tile).smem : -1;
}

extern "C" voxconv_status_t vc_cuda_int8_tile_info(voxconv_handle_t *h,
                                                   int tile,
                                                   voxconv_kernel_info_t *info) {
  VC_CUDA_DEVICE_GUARD(h);
  const TileRow &r = tile_info(tile);
  memset(info, 0, sizeof *info);
  snprintf(info->algo, sizeof info->algo, "mask_gemm_i8");
  info->pass = VOXCONV_PASS_CONV_FWD;
  info->tile_id = tile;
  info->dtype = VOXCONV_DTYPE_I8;
  info->tile_m = r.bm;
  info->tile_n = r.bn;
  info->tile_k = r.bk;
  info->stages = r.stages;
  info->threads = r.threads;
  if (tile == VC_I8_IM2COL_TILE)
    /* (63 characters fit: the full story is in docs/tiles.md) */
    snprintf(info->constraints, sizeof info->constraints,
             "cin <= 4, kvol <= 28: im2col; else default tile; %d acc/thread",
             r.acc);
  else
    snprintf(info->constraints, sizeof info->constraints,
             "%s%d int32 acc/thread; cin %% 16 != 0: padded copy",
             r.wg ? "sm_90a; " : "", r.acc);
  info->smem_limit = vc_cuda_state(h)->smem_optin;
  /* eligible: the shared memory fits (voxconv.h), as for the float tiles;
   * that a wgmma tile also needs sm_90a is in `constraints` */
  info->eligible = tile_fits_smem(h, tile);
  return vc_cuda_kernel_resources(h, r.fn, r.threads, r.smem, info);
}

extern "C" int vc_cuda_int8_tile_usable(voxconv_handle_t *h, int tile) {
  const char *why = NULL;
  return tile >= 0 && tile < VC_I8_TILES && tile_usable(h, tile, &why);
}

extern "C" int vc_cuda_int8_tile_runs_as(voxconv_handle_t *h,
                                         const vc_int8_problem_t *p,
                                         int tile) {
  /* the substitution vc_cuda_conv_int8 makes, and the tuner reads */
  if (tile == VC_I8_IM2COL_TILE && !p->depthwise &&
      !im2col_fused_takes(p->cin, p->kmap->kvol))
    return pick_tile(h, (int)p->cin, (int)p->cout);
  return tile;
}

extern "C" int vc_cuda_int8_default_tile(voxconv_handle_t *h,
                                         const vc_int8_problem_t *p) {
  /* a first layer: tile 18's own kernel (0.31 ms at workload A's 3 -> 64
   * on the H200, pick_tile's 0.40; docs/perf-notes.md item 89) */
  if (!p->depthwise && im2col_fused_takes(p->cin, p->kmap->kvol))
    return VC_I8_IM2COL_TILE;
  return pick_tile(h, p->cin, p->cout);
}


extern "C" int vc_cuda_int8_split_of(voxconv_handle_t *h,
                                     const vc_int8_problem_t *p, int tile) {
  /* Worth trying where the tile's grid fills at most half of what the GPU
   * runs at once: enough slices to fill it, at most 8 (each slice adds
   * its partial sums once more) and at most the offsets. The tuner
   * measures whether it pays. */
  if (p->depthwise || tile < 0 || tile >= VC_I8_TILES ||
      vc_cuda_int8_tile_runs_as(h, p, tile) != tile ||
      tile == VC_I8_IM2COL_TILE || p->kmap->kvol < 2 || use_im2col(p))
    return 1;
  VcDeviceGuard guard(h); /* the occupancy of h's device */
  const TileRow &r = tile_info(tile);
  int per_sm = 0;
  /* a kernel over 48 KB counts 0 blocks until its opt-in is set */
  if (guard.error() != cudaSuccess ||
      (r.smem > 48 * 1024 &&
       vc_cuda_smem_optin(h, r.fn, r.smem) != cudaSuccess) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, r.fn, r.threads,
                                                    (size_t)r.smem) !=
          cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return 1;
  }
  const int64_t resident = (int64_t)per_sm * vc_cuda_state(h)->sm_count;
  const int64_t blocks = vc_ceil_div<int64_t>(p->cout, r.bn) *
                         vc_ceil_div<int64_t>(p->kmap->n_out, r.bm);
  if (blocks < 1 || 2 * blocks > resident)
    return 1;
  int64_t split = resident / blocks;
  split = split < 8 ? split : 8;
  split = split < p->kmap->kvol ? split : p->kmap->kvol;
  return split >= 2 ? (int)split : 1;
}

namespace {

/* From KOI weights [kvol][cout][cin]: each row [cin] zero-padded to ka
 * bytes, or (im2col) the one-offset weights [cout][ka] whose column j = k *
 * cin + ci (zero past kvol * cin). One thread a byte of the result. */
__global__ void i8_koi_weights_kernel(const int8_t *__restrict__ w,
                                      int8_t *__restrict__ wt, int kvol,
                                      int cout, int cin, int ka, bool im2col) {
  const int64_t rows = im2col ? cout : (int64_t)kvol * cout;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
       i < rows * ka; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / ka;
    const int j = (int)(i - r * ka);
    int8_t v = 0;
    if (im2col) {
      const int k = j / cin, ci = j - k * cin;
      if (k < kvol)
        v = w[((int64_t)k * cout + r) * cin + ci];
    } else if (j < cin) {
      v = w[r * cin + j];
    }
    wt[i] = v;
  }
}

/* *wk_out = the weights K-major, [kvol][cout][ka] (kvol 1 and ka = the
 * im2col width when the problem runs as im2col rows, wk = kvol * cin):
 * p->w itself when it is KOI with cin == ka and not im2col, else a
 * scratch copy in ws made by one kernel (transpose_w_kernel from KIO,
 * seen as [kvol][wk][cout]; i8_koi_weights_kernel from KOI). */
voxconv_status_t kmajor_weights(voxconv_handle_t *h,
                                const vc_int8_problem_t *p, bool im2col,
                                int kvol, int wk, int ka, VcWorkspace *ws,
                                const void **wk_out) {
  const int cout = (int)p->cout;
  if (p->w_koi && !im2col && ka == p->cin) {
    *wk_out = p->w;
    return VOXCONV_STATUS_SUCCESS;
  }
  int8_t *wt = NULL;
  VC_CHECK(ws->get<int8_t>((int64_t)kvol * cout * ka, &wt,
                           "int8 K-major weights"));
  if (p->w_koi) {
    i8_koi_weights_kernel<<<vc_grid_1d((int64_t)kvol * cout * ka, 256), 256,
                            0, vc_cuda_stream(h)>>>(
        p->w, wt, (int)p->kmap->kvol, cout, (int)p->cin, ka, im2col);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 i8_koi_weights_kernel");
  } else {
    const dim3 grid((unsigned)vc_ceil_div(cout, 32),
                    (unsigned)vc_ceil_div(ka, 32), (unsigned)kvol);
    transpose_w_kernel<int8_t><<<grid, dim3(32, 8), 0, vc_cuda_stream(h)>>>(
        p->w, wt, wk, cout, ka);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 transpose_w_kernel");
  }
  *wk_out = wt;
  return VOXCONV_STATUS_SUCCESS;
}

} // namespace

extern "C" voxconv_status_t vc_cuda_conv_int8(voxconv_handle_t *h,
                                              const vc_int8_problem_t *p,
                                              int tile, int split) {
  VC_CUDA_DEVICE_GUARD(h);
  const voxconv_kmap_t *m = p->kmap;
  const I8Epilogue ep = epilogue_of(p);
  if (m->n_out == 0)
    return VOXCONV_STATUS_SUCCESS;
  if (m->n_in > INT32_MAX || m->n_out > INT32_MAX)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "int8 conv: %lld input / %lld output rows; the CUDA int8 "
                   "kernels index rows with 32 bits",
                   (long long)m->n_in, (long long)m->n_out);
  if (p->depthwise)
    return run_depthwise(h, p, ep);
  if (m->kvol > VC_MG_MAX_KVOL)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "mask_gemm_i8: kernel volume %d above %d", (int)m->kvol,
                   VC_MG_MAX_KVOL);
  if (tile < 0 || tile >= VC_I8_TILES)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "mask_gemm_i8: tile %d outside 0..%d", tile,
                   VC_I8_TILES - 1);
  if (split < 1 || split > VC_INT8_MAX_SPLIT)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "mask_gemm_i8: split %d outside 1..%d", split,
                   VC_INT8_MAX_SPLIT);
  const char *why = NULL;
  if (!tile_usable(h, tile, &why))
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "mask_gemm_i8: tile %d (%d bytes of shared memory) cannot "
                   "run here: %s",
                   tile, tile_info(tile).smem, why);

  const int cin = (int)p->cin, cout = (int)p->cout;
  if (tile == VC_I8_IM2COL_TILE && im2col_fused_takes(cin, m->kvol))
    return run_im2col_fused(h, p, ep);
  tile = vc_cuda_int8_tile_runs_as(h, p, tile); /* tile 18 elsewhere */
  const int ka = padded_cin(p);
  /* the kernels address one offset's [cout][ka] weights with 32 bits */
  if ((int64_t)cout * ka > INT32_MAX)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "mask_gemm_i8: cout * cin (rounded up to 16) = %lld * %d "
                   "exceeds 2^31 - 1 bytes per kernel offset",
                   (long long)cout, ka);
  VcWorkspace ws(h); /* stream-ordered frees at return */
  FwdArgs a;
  memset(&a, 0, sizeof a);
  a.out = p->y;
  a.n_dst = (int)m->n_out;
  a.nb = cout;
  const int kcol = im2col_width(p);
  int wk; /* the weights' reduction rows per offset, before padding */
  const bool im2col = use_im2col(p);
  if (im2col) {
    /* the same int32 sums (exact, in any order) as a one-offset problem
     * over im2col rows: W viewed as [1][kvol * cin][cout] */
    int8_t *xc = NULL;
    int32_t *ids = NULL;
    VC_CHECK(ws.get<int8_t>(m->n_out * kcol, &xc, "int8 im2col rows"));
    VC_CHECK(ws.get<int32_t>(m->n_out, &ids, "int8 im2col row ids"));
    i8_im2col_kernel<<<vc_grid_1d(m->n_out * 32, 256), 256, 0,
                       vc_cuda_stream(h)>>>(p->x, m->nbr_out, xc, m->n_out,
                                            m->kvol, cin, kcol);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 i8_im2col_kernel");
    i8_iota_kernel<<<vc_grid_1d(m->n_out, 256), 256, 0, vc_cuda_stream(h)>>>(
        ids, m->n_out);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 i8_iota_kernel");
    a.a = xc;
    a.nbr = ids; /* order, tile_mask, row_mask NULL: every row, one offset */
    a.kvol = 1;
    a.ka = kcol;
    wk = (int)(m->kvol * cin); /* kvol * cin rows of W */
  } else {
    const int8_t *x = p->x;
    if (ka != cin || !vc_aligned(x, 16)) {
      int8_t *xp = NULL;
      VC_CHECK(ws.get<int8_t>(m->n_in * ka, &xp, "int8 padded input"));
      if (m->n_in > 0) {
        repad3_launch<int8_t, true>(vc_cuda_stream(h), x, xp, 1, m->n_in,
                                    cin, m->n_in, ka);
        VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_i8 repad3_kernel");
      }
      x = xp;
    }
    a.a = x;
    a.nbr = m->nbr_out;
    VC_CHECK(sorted_rows(h, m, false, &ws, &a.order, &a.tile_mask));
    a.row_mask = m->kvol <= 32 ? m->row_mask_out : NULL;
    a.kvol = m->kvol;
    a.ka = ka;
    wk = cin;
  }
  VC_CHECK(kmajor_weights(h, p, im2col, a.kvol, wk, a.ka, &ws, &a.w));
  return launch_split(h, p, tile, a, ep, split, ws);
}
