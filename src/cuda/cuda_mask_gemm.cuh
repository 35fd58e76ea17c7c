/* Tensor-core fused gather-GEMM-scatter ("mask GEMM") for f16/bf16.
 *
 * Forward / dgrad: one thread block owns BM output rows x BN output
 * channels. It first ORs the neighbour-table rows of its tile into a bitmask
 * of kernel offsets that any of its rows needs, then loops over only those
 * offsets (and BK-wide chunks of the reduction channels): input rows are
 * gathered through the neighbour table with 16-byte cp.async into shared
 * memory (missing neighbours are zero-filled without touching memory),
 * STAGES chunks in flight, and multiplied with ldmatrix + mma.sync.m16n8k16.
 * Every output element is written exactly once, with no atomics, so the
 * result is deterministic. Dgrad is the same kernel over the reverse table
 * (kmap->nbr_in) with the weights read transposed.
 *
 * Wgrad: dW[k] = X_k^T dY_k per offset over its pair list, the pairs split
 * into `splits` contiguous slices whose fp32 partials are summed in a fixed
 * order (deterministic), accumulation always in fp32.
 *
 * Layouts of the mma fragments (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16"): lane = 4*g + t; A regs {a0a1,a2a3,a4a5,a6a7} = rows
 * {g, g+8, g, g+8} x cols {2t.., 2t.., 2t+8.., 2t+8..}; B regs {b0b1, b2b3} =
 * k rows {2t.., 2t+8..} x col g; C = rows {g, g, g+8, g+8} x cols {2t, 2t+1}.
 */
#ifndef VC_CUDA_MASK_GEMM_CUH
#define VC_CUDA_MASK_GEMM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "voxconv.h"

class VcWorkspace; /* vc_cuda_util.cuh */

namespace vc_mask_gemm {

/* ---- PTX wrappers ------------------------------------------------------- */
__device__ __forceinline__ unsigned smem_addr(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

/* 16-byte async copy to shared address saddr; src_bytes = 0 zero-fills
 * the destination without reading global memory (used for absent
 * neighbours and edges). */
__device__ __forceinline__ void cp_async16_s(unsigned saddr, const void *gmem,
                                             bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr),
               "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem,
                                           bool valid) {
  cp_async16_s(smem_addr(smem), gmem, valid);
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(smem_addr(p)));
}

/* Accumulator of one 16x8 mma tile: 4 floats, or 2 packed half2 for the
 * fp16-accumulator variant. */
template <bool ACC16> struct Acc;
template <> struct Acc<false> {
  float v[4];
  __device__ void zero() { v[0] = v[1] = v[2] = v[3] = 0.f; }
};
template <> struct Acc<true> {
  uint32_t v[2];
  __device__ void zero() { v[0] = v[1] = 0u; }
};

template <typename T, bool ACC16> struct Mma;
template <> struct Mma<__half, false> {
  static __device__ __forceinline__ void run(Acc<false> &c,
                                             const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
  }
};
template <> struct Mma<__nv_bfloat16, false> {
  static __device__ __forceinline__ void run(Acc<false> &c,
                                             const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
  }
};
template <> struct Mma<__half, true> {
  static __device__ __forceinline__ void run(Acc<true> &c,
                                             const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
                 "{%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
                 : "+r"(c.v[0]), "+r"(c.v[1])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
  }
};

/* Stores two adjacent outputs (row, col..col+1) from an accumulator. */
template <typename T> struct Store2;
template <> struct Store2<__half> {
  static __device__ void f32(__half *p, float a, float b) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
  }
  static __device__ void h16(__half *p, uint32_t v) {
    *reinterpret_cast<uint32_t *>(p) = v;
  }
};
template <> struct Store2<__nv_bfloat16> {
  static __device__ void f32(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
  }
  static __device__ void h16(__nv_bfloat16 *, uint32_t) {}
};


/* The accumulators of a warp tile. fp32-accumulator tiles: tensor-core
 * accumulation aligns and truncates (it is not a round-to-nearest fp32
 * sum), so a long chain drifts: over 27 offsets x C channels (162 mma steps
 * at C = 96) to ~3e-3 of rms, over 10^6 wgrad pairs to ~1.6e-2. The mma
 * accumulators therefore cover at most a few stages and promote() adds them
 * into `total` with ordinary fp32 adds. fp16-accumulator tiles keep their
 * single chain: being fp16 is their point. */
template <bool ACC16, int MI, int NI> struct WarpAcc {
  Acc<ACC16> c[MI][NI];
  float total[MI][NI][4];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
      for (int j = 0; j < NI; j++) {
        c[i][j].zero();
#pragma unroll
        for (int e = 0; e < 4; e++)
          total[i][j][e] = 0.f;
      }
  }
  __device__ __forceinline__ void promote() {
    if constexpr (!ACC16) {
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++) {
#pragma unroll
          for (int e = 0; e < 4; e++)
            total[i][j][e] += c[i][j].v[e];
          c[i][j].zero();
        }
    }
  }
  /* Element e (0..3, C-fragment order) of tile (i, j), fp32 tiles only. */
  __device__ __forceinline__ float f32(int i, int j, int e) const {
    return total[i][j][e] + c[i][j].v[e];
  }
};

/* The cp.async pipeline both kernels share: STAGES-1 stages in flight,
 * load(stage, it) issues the copies of iteration `it`, compute(stage, it)
 * consumes them. One barrier per iteration both publishes stage `it` and
 * retires stage it-1, whose buffer the prefetch then refills. */
template <int STAGES, typename Load, typename Compute>
__device__ __forceinline__ void run_pipeline(int iters, Load &&load,
                                             Compute &&compute) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < iters)
      load(s, s);
    cp_async_commit();
  }
  for (int it = 0; it < iters; it++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = it + STAGES - 1;
    if (next < iters)
      load(next % STAGES, next);
    cp_async_commit();
    compute(it % STAGES, it);
  }
  cp_async_wait<0>();
}

/* B fragments of NI n-tiles (two per ldmatrix.x4.trans) from a row-major
 * [k][n] shared tile: rows kk..kk+15, columns n_base.. */
template <typename T, int NI, int PITCH>
__device__ __forceinline__ void load_b_kn(uint32_t (&bfr)[NI][2], const T *b_s,
                                          int kk, int n_base, int lane) {
#pragma unroll
  for (int nj = 0; nj < NI; nj += 2) {
    uint32_t r4[4];
    const int kr = kk + (lane & 7) + ((lane >> 3) & 1) * 8;
    const int nc = n_base + nj * 8 + (lane >> 4) * 8;
    ldsm_x4_t(r4, b_s + kr * PITCH + nc);
    bfr[nj][0] = r4[0];
    bfr[nj][1] = r4[1];
    bfr[nj + 1][0] = r4[2];
    bfr[nj + 1][1] = r4[3];
  }
}

/* ---- forward / dgrad ---------------------------------------------------- */
#define VC_MG_MAX_KVOL 343
/* Reduction channels per tensor-core accumulator chain (fwd/dgrad): the
 * chain covers PROMOTE_CHANNELS / BK stages whatever the tile's BK, so every
 * tile has the same rounding behaviour. */
#define PROMOTE_CHANNELS 256
#define VC_MG_MASK_WORDS ((VC_MG_MAX_KVOL + 31) / 32)
/* Tile height of the precomputed per-tile offset masks (FwdArgs::tile_mask;
 * kmap tile_mask_out/in). */
#define VC_MG_MASK_TILE_ROWS 128

struct FwdArgs {
  const void *a;      /* gathered operand [n_src][ka]: x (fwd) or dy (dgrad) */
  const void *w;      /* weights [kvol][cin][cout] */
  const int32_t *nbr; /* [n_dst][kvol]: source row or -1 */
  const int32_t *order; /* tile row r -> output row order[m0+r]; NULL = r */
  /* offsets needed by each 128-row tile (kvol <= 32), or NULL: then (and
   * for other tile heights) the tile scans the neighbour table itself */
  const unsigned *tile_mask;
  void *out;          /* [n_dst][nb] */
  int n_dst, kvol, ka, nb;
  /* per output row, the offsets it has a neighbour at (kvol <= 32), or
   * NULL (the warp-specialised tiles that skip per 64-row half use it);
   * last, so the older kernels' parameter offsets did not move */
  const uint32_t *row_mask;
};

/* Compile-time tile shape. TRANS_W: B[kk][n] = W[k][n][kk] (dgrad),
 * else B[kk][n] = W[k][kk][n] (forward). */
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_,
                       STAGES = STAGES_;
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static constexpr int A_PITCH = BK + 8; /* halves; +16 B breaks conflicts */
  static constexpr int B_PITCH_N = BN + 8;
  static constexpr int B_PITCH_K = BK + 8;
  static_assert(NI % 2 == 0, "B fragments are loaded two n-tiles at a time");
  static_assert(BK % 16 == 0 && WM % 16 == 0, "mma shape");
};

template <typename TL, bool TRANS_W>
constexpr int fwd_smem_bytes() {
  return TL::STAGES * 2 *
         (TL::BM * TL::A_PITCH +
          (TRANS_W ? TL::BN * TL::B_PITCH_K : TL::BK * TL::B_PITCH_N));
}

/* The per-tile prologue both forward kernels share: which output row each
 * tile row is, and which kernel offsets any row of the tile needs. */
template <int BM> struct TileOffsets {
  unsigned mask[VC_MG_MASK_WORDS];
  int act[VC_MG_MAX_KVOL]; /* the needed offsets, ascending */
  int nact;
  int rows[BM]; /* output row of each tile row, or -1 */
};

/* Fills s for the tile at m0 (rows valid rows); ends with a barrier. With
 * a precomputed mask of the tile (128-row tiles) that is one word; else
 * each row's slice of the neighbour table is read (contiguous per row, and
 * with the natural order the whole tile's is, so these reads coalesce). */
template <int THREADS, int BM>
__device__ __forceinline__ void scan_tile_offsets(const FwdArgs &args, int m0,
                                                  int rows,
                                                  TileOffsets<BM> &s) {
  const int tid = threadIdx.x, kvol = args.kvol;
  const bool given = BM == VC_MG_MASK_TILE_ROWS && args.tile_mask != NULL;
  /* issued first, so its latency overlaps the row-index loads */
  const unsigned tm = given && tid == 0 ? __ldg(args.tile_mask + m0 / BM) : 0u;
  for (int r = tid; r < BM; r += THREADS)
    s.rows[r] = r < rows ? (args.order ? args.order[m0 + r] : m0 + r) : -1;
  if (given) {
    if (tid == 0) {
      int n = 0;
      for (unsigned m = tm; m; m &= m - 1)
        s.act[n++] = __ffs(m) - 1;
      s.nact = n;
    }
    __syncthreads();
    return;
  }
  for (int i = tid; i < VC_MG_MASK_WORDS; i += THREADS)
    s.mask[i] = 0u;
  __syncthreads();
  if (kvol <= 32) {
    /* Each thread ORs its entries into a register and each warp reduces
     * before one shared atomic: the loads are independent (no atomic
     * between them), so they are all in flight at once. */
    unsigned m = 0u;
#pragma unroll 4
    for (int i = tid; i < rows * kvol; i += THREADS) {
      const int r = i / kvol, k = i - r * kvol;
      m |= (__ldg(args.nbr + (int64_t)s.rows[r] * kvol + k) >= 0 ? 1u : 0u)
           << k;
    }
    m = __reduce_or_sync(0xffffffffu, m);
    if ((tid & 31) == 0 && m)
      atomicOr(&s.mask[0], m);
  } else {
    for (int i = tid; i < rows * kvol; i += THREADS) {
      const int r = i / kvol, k = i - r * kvol;
      if (args.nbr[(int64_t)s.rows[r] * kvol + k] >= 0)
        atomicOr(&s.mask[k >> 5], 1u << (k & 31));
    }
  }
  __syncthreads();
  if (tid == 0) {
    int n = 0;
    for (int w = 0; w < VC_MG_MASK_WORDS; w++) {
      unsigned m = s.mask[w];
      while (m) {
        s.act[n++] = w * 32 + (__ffs(m) - 1);
        m &= m - 1;
      }
    }
    s.nact = n;
  }
  __syncthreads();
}

/* Where a forward/dgrad block works (output columns n0.., tile rows
 * m0.. of which `rows` exist, blockIdx.y = tile) and how many (offset,
 * chunk) stages its loop runs; fills the tile's offsets. Both kernel
 * families start here, so their tiles agree with the per-tile masks. */
struct TileSpan {
  int n0, m0, rows, nchunk, iters;
};
template <typename TL>
__device__ __forceinline__ TileSpan begin_tile(const FwdArgs &args,
                                               TileOffsets<TL::BM> &tile) {
  TileSpan t;
  t.n0 = blockIdx.x * TL::BN;
  t.m0 = blockIdx.y * TL::BM;
  t.rows = min(TL::BM, args.n_dst - t.m0);
  scan_tile_offsets<TL::THREADS, TL::BM>(args, t.m0, t.rows, tile);
  t.nchunk = (args.ka + TL::BK - 1) / TL::BK;
  t.iters = tile.nact * t.nchunk;
  return t;
}

/* The gather indices of the next active offset, loaded into registers one
 * offset ahead (after the copies of the current one are issued), so a
 * cp.async never waits on a neighbour-table read: that dependent load was
 * on the critical path of every stage. A thread's rows are the same in
 * every iteration (vector j of thread tid is tile row (tid + j*THREADS) /
 * AV), so their table offsets are computed once. */
template <int AVPT> struct RowGather {
  int64_t row_base[AVPT];
  int src[AVPT]; /* source row of each of the thread's vectors, or -1 */
  template <int THREADS, int AV, int BM>
  __device__ __forceinline__ void init(int tid, int rows,
                                       const int (&tile_rows)[BM], int kvol) {
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int r = (tid + j * THREADS) / AV;
      row_base[j] = r < rows ? (int64_t)tile_rows[r] * kvol : -1;
    }
  }
  /* indices of active offset ai (-1 past the end) */
  template <int BM>
  __device__ __forceinline__ void fetch(const int32_t *nbr,
                                        const TileOffsets<BM> &s, int ai) {
    const bool live = ai < s.nact;
    const int k = live ? s.act[ai] : 0;
#pragma unroll
    for (int j = 0; j < AVPT; j++)
      src[j] = (live && row_base[j] >= 0) ? __ldg(nbr + row_base[j] + k) : -1;
  }
};

template <typename T, typename TL, bool TRANS_W, bool ACC16>
__global__ void __launch_bounds__(TL::THREADS)
    fwd_kernel(const FwdArgs args) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ TileOffsets<TL::BM> tile;

  T *sA = reinterpret_cast<T *>(smem_raw);
  T *sB = sA + TL::STAGES * TL::BM * TL::A_PITCH;
  constexpr int B_STAGE =
      TRANS_W ? TL::BN * TL::B_PITCH_K : TL::BK * TL::B_PITCH_N;

  const T *A = reinterpret_cast<const T *>(args.a);
  const T *W = reinterpret_cast<const T *>(args.w);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / TL::WARPS_N, wn = warp % TL::WARPS_N;
  const int kvol = args.kvol, ka = args.ka, nb = args.nb;
  const int64_t wsk = (int64_t)ka * nb;
  const TileSpan span = begin_tile<TL>(args, tile);
  const int n0 = span.n0, rows = span.rows, nchunk = span.nchunk,
            iters = span.iters;

  constexpr int AV = TL::BK / 8; /* 16-byte vectors per A row */
  constexpr int AVPT = (TL::BM * AV + TL::THREADS - 1) / TL::THREADS;
  RowGather<AVPT> gather;
  gather.template init<TL::THREADS, AV>(tid, rows, tile.rows, kvol);
  gather.fetch(args.nbr, tile, 0);

  /* B copies: a thread's vectors sit at the same place of every stage, so
   * their offsets (global, relative to the chunk; shared) and the
   * reduction index they test against ka are computed once. Non-transposed
   * B rows are reduction channels, transposed ones output channels. */
  constexpr int BVR = TRANS_W ? TL::BK / 8 : TL::BN / 8; /* vectors per row */
  constexpr int B_VECS = (TRANS_W ? TL::BN : TL::BK) * BVR;
  constexpr int BVPT = (B_VECS + TL::THREADS - 1) / TL::THREADS;
  int b_goff[BVPT], b_soff[BVPT], b_kidx[BVPT];
  bool b_nok[BVPT];
#pragma unroll
  for (int j = 0; j < BVPT; j++) {
    const int v = tid + j * TL::THREADS;
    const int row = v / BVR, vec = v % BVR;
    if (!TRANS_W) { /* row = kk, vec -> output channels */
      b_kidx[j] = row;
      b_nok[j] = v < B_VECS && n0 + vec * 8 < nb;
      b_goff[j] = row * nb + n0 + vec * 8;
      b_soff[j] = row * TL::B_PITCH_N + vec * 8;
    } else { /* row = output channel n, vec -> reduction channels */
      b_kidx[j] = vec * 8;
      b_nok[j] = v < B_VECS && n0 + row < nb;
      b_goff[j] = (n0 + row) * ka + vec * 8;
      b_soff[j] = row * TL::B_PITCH_K + vec * 8;
    }
  }

  /* Iterations run offset-major, chunk-minor, and load_stage is called for
   * it = 0, 1, 2, ... in order, so it tracks (active offset, chunk) with
   * counters instead of dividing by nchunk. */
  int ld_ai = 0, ld_chunk = 0;
  auto load_stage = [&](int stage, int) {
    const int k = tile.act[ld_ai];
    const int c0 = ld_chunk * TL::BK;
    T *a_dst = sA + stage * TL::BM * TL::A_PITCH;
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int v = tid + j * TL::THREADS;
      if (TL::BM * AV % TL::THREADS != 0 && v >= TL::BM * AV)
        break;
      const int r = v / AV, cv = v % AV;
      const int col = c0 + cv * 8;
      const int src = gather.src[j];
      const bool ok = src >= 0 && col < ka;
      const T *g = ok ? A + (int64_t)src * ka + col : A;
      cp_async16(a_dst + r * TL::A_PITCH + cv * 8, g, ok);
    }
    if (++ld_chunk == nchunk) {
      ld_chunk = 0;
      gather.fetch(args.nbr, tile, ++ld_ai); /* new indices, one ahead */
    }
    T *b_dst = sB + stage * B_STAGE;
    const T *wc = W + (int64_t)k * wsk + (TRANS_W ? c0 : c0 * nb);
#pragma unroll
    for (int j = 0; j < BVPT; j++) {
      /* a thread past the stage's vectors copies nothing (a zero-fill
       * would land outside the stage buffer) */
      if (B_VECS % TL::THREADS != 0 && tid + j * TL::THREADS >= B_VECS)
        break;
      const bool ok = b_nok[j] && c0 + b_kidx[j] < ka;
      cp_async16(b_dst + b_soff[j], ok ? wc + b_goff[j] : W, ok);
    }
  };

  WarpAcc<ACC16, TL::MI, TL::NI> acc;
  acc.zero();
  run_pipeline<TL::STAGES>(iters, load_stage, [&](int stage, int it) {
    constexpr int promote_iters =
        PROMOTE_CHANNELS / TL::BK > 0 ? PROMOTE_CHANNELS / TL::BK : 1;
    if (it % promote_iters == 0 && it > 0)
      acc.promote();
    const T *a_s = sA + stage * TL::BM * TL::A_PITCH;
    const T *b_s = sB + stage * B_STAGE;
#pragma unroll
    for (int kk = 0; kk < TL::BK; kk += 16) {
      uint32_t af[TL::MI][4];
#pragma unroll
      for (int mi = 0; mi < TL::MI; mi++) {
        const int r = wm * TL::WM + mi * 16 + (lane & 15);
        const int c = kk + (lane >> 4) * 8;
        ldsm_x4(af[mi], a_s + r * TL::A_PITCH + c);
      }
      uint32_t bfr[TL::NI][2];
      if constexpr (!TRANS_W) {
        load_b_kn<T, TL::NI, TL::B_PITCH_N>(bfr, b_s, kk, wn * TL::WN, lane);
      } else {
        /* B stored [n][k]: plain ldmatrix gives the "col" fragment. */
#pragma unroll
        for (int nj = 0; nj < TL::NI; nj += 2) {
          uint32_t r4[4];
          const int nr = wn * TL::WN + nj * 8 + (lane & 7) + (lane >> 4) * 8;
          const int kc = kk + ((lane >> 3) & 1) * 8;
          ldsm_x4(r4, b_s + nr * TL::B_PITCH_K + kc);
          bfr[nj][0] = r4[0];
          bfr[nj][1] = r4[1];
          bfr[nj + 1][0] = r4[2];
          bfr[nj + 1][1] = r4[3];
        }
      }
#pragma unroll
      for (int mi = 0; mi < TL::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < TL::NI; ni++)
          Mma<T, ACC16>::run(acc.c[mi][ni], af[mi], bfr[ni]);
    }
  });

  /* Epilogue: every (row < n_dst, col < nb) of the tile is written once,
   * rows with no neighbour at all get exact zeros. */
  T *out = reinterpret_cast<T *>(args.out);
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int mi = 0; mi < TL::MI; mi++)
#pragma unroll
    for (int ni = 0; ni < TL::NI; ni++) {
      const int col = n0 + wn * TL::WN + ni * 8 + t4 * 2;
      if (col >= nb)
        continue;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = wm * TL::WM + mi * 16 + g + h * 8;
        if (r >= rows)
          continue;
        T *p = out + (int64_t)tile.rows[r] * nb + col;
        if constexpr (ACC16)
          Store2<T>::h16(p, acc.c[mi][ni].v[h]);
        else
          Store2<T>::f32(p, acc.f32(mi, ni, 2 * h), acc.f32(mi, ni, 2 * h + 1));
      }
    }
}

/* ---- wgrad -------------------------------------------------------------- */
#define VC_MG_MAX_SPLITS 64
/* Stages (of BK pairs) per tensor-core accumulator chain in wgrad. */
#define WGRAD_PROMOTE_ITERS 8

struct WgradArgs {
  const void *x;        /* [n_in][cin] */
  const void *dy;       /* [n_out][cout] */
  const int32_t *in_rows, *out_rows;
  /* pair offsets [kvol+1] in device memory (kmap->pair_offsets_dev), so
   * no host counts are needed: an asynchronously built map can be used
   * before the host knows them, and inside a CUDA graph capture */
  const int64_t *po;
  float *partial;       /* [splits][kvol][cin][cout] when splits > 1 */
  void *dw;             /* [kvol][cin][cout] (dtype T) when splits == 1 */
  int kvol, cin, cout, splits;
};

/* The pairs of one wgrad block (blockIdx.z = k * splits + split: the
 * slices of one offset run together): offset k's slice `split` of
 * args.splits, [p_begin, p_end), in iters stages of BK pairs. */
struct WgradSlice {
  int64_t p_begin, p_end;
  int iters;
};
template <int BK>
__device__ __forceinline__ WgradSlice wgrad_slice(const WgradArgs &args, int k,
                                                  int split) {
  const int64_t pk0 = __ldg(args.po + k), len = __ldg(args.po + k + 1) - pk0;
  WgradSlice s;
  s.p_begin = pk0 + len * split / args.splits;
  s.p_end = pk0 + len * (split + 1) / args.splits;
  s.iters = (int)((s.p_end - s.p_begin + BK - 1) / BK);
  return s;
}

/* ---- forward, few input channels: whole-row im2col in shared memory ----
 * (algorithm mask_gemm_im2col). With cin <= 8 (zero-padded to 8) a row's
 * every offset fits one K = kvol x 8 <= 224 reduction, so a tile gathers
 * all its (row, offset) inputs at once -- one 16-byte cp.async each, one
 * barrier -- and runs 14 k-steps of mma.sync from shared memory. The offset
 * loop of fwd_kernel instead ran one pipeline stage per offset with 8 of
 * its BK channels real: ~18 barrier-bound stages per tile for a few MMAs
 * (workload A's 3 -> 64 first layer: 0.38 ms). Weights stay in shared
 * memory for the block's whole life: blocks loop over row tiles. */
struct Im2colTile {
  static constexpr int BM = 128, BN = 64, THREADS = 256, CP = 8;
  static constexpr int MAX_KVOL = 28;                 /* K <= 224 */
  /* gathers rows fastest (im2col_element): 16-byte rows, two to a
   * sector; workload A's 3 -> 64 0.268 -> 0.228 ms (perf-notes item 135) */
  static constexpr bool ROWS = true;
  static constexpr int KMAX = MAX_KVOL * CP;          /* 224 */
  static constexpr int A_PITCH = KMAX + 8;            /* halves; 464 B rows */
  static constexpr int B_PITCH = BN + 8;              /* [k][n] rows */
  static constexpr int SMEM =
      (BM * A_PITCH + KMAX * B_PITCH) * 2;            /* 91,648 B */
};

/* Element v of a whole-row im2col tile: (row r, offset k). k fastest
 * (ROWS false): a warp's lanes take one row's offsets. r fastest (ROWS):
 * a warp's lanes take one offset of 32 consecutive rows, whose
 * neighbours there are mostly consecutive input rows too (sorted
 * coordinates), so narrow gathers share 32-byte sectors. */
template <int BM, bool ROWS>
__device__ __forceinline__ void im2col_element(int v, int kvol, int *r,
                                               int *k) {
  if (ROWS) {
    *k = v / BM;
    *r = v - *k * BM;
  } else {
    *r = v / kvol;
    *k = v - *r * kvol;
  }
}

/* The whole-row im2col tile's gather sources (the int8 tile 18,
 * cuda_int8.cu, used this too until it read its table by flat index,
 * docs/perf-notes.md item 140): element v = tid + j * THREADS of row tile
 * `tile` is (r, k) = im2col_element<BM, ROWS>(v) of output row
 * order[m0 + r] (m0 + r without an order), src[j] its neighbour-table
 * entry, -1 past the rows or the tiles. LDG: read the table through the read-only path (__ldg).
 * Each kernel keeps the form it was measured fastest with, and they
 * differ (H200, workload A's 3 -> 64, s24 calls 6, 8, 9): the f16 kernel
 * 0.278 ms with plain loads and 0.408 with __ldg, the int8 tile 18 0.307
 * with __ldg and 0.369 with plain loads; the cause was not looked into
 * (the SASS order of the loads against the tile's cp.async wait is the
 * first suspect). */
template <int BM, int THREADS, bool LDG, bool ROWS = false, int GJ>
__device__ __forceinline__ void im2col_fetch(int32_t (&src)[GJ],
                                             const int32_t *nbr,
                                             const int32_t *order, int tile,
                                             int tiles, int kvol, int n_dst,
                                             int tid) {
  const int m0 = tile * BM;
#pragma unroll
  for (int j = 0; j < GJ; j++) {
    const int v = tid + j * THREADS;
    int r, k;
    im2col_element<BM, ROWS>(v, kvol, &r, &k);
    src[j] = -1;
    if (tile < tiles && v < BM * kvol && m0 + r < n_dst) {
      const int row = order ? order[m0 + r] : m0 + r;
      const int32_t *e = nbr + (int64_t)row * kvol + k;
      src[j] = LDG ? __ldg(e) : *e;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(Im2colTile::THREADS, 2)
    im2col_fwd_kernel(const FwdArgs args) {
  using TL = Im2colTile;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T *a_s = reinterpret_cast<T *>(smem_raw);
  T *b_s = a_s + TL::BM * TL::A_PITCH;
  const T *A = reinterpret_cast<const T *>(args.a);
  const T *W = reinterpret_cast<const T *>(args.w);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kvol = args.kvol, nb = args.nb;
  const int K = kvol * TL::CP, KP = (K + 15) & ~15;
  const int n0 = blockIdx.x * TL::BN;

  /* Weights: B[kk][n] = W[kk / 8][kk % 8][n0 + n], i.e. row kk of W seen
   * as [kvol * 8][nb]; rows K .. KP-1 and columns past nb are zeros. */
  for (int v = tid; v < KP * (TL::BN / 8); v += TL::THREADS) {
    const int kk = v / (TL::BN / 8), c8 = (v % (TL::BN / 8)) * 8;
    const bool ok = kk < K && n0 + c8 < nb;
    cp_async16(b_s + kk * TL::B_PITCH + c8,
               ok ? (const void *)(W + (int64_t)kk * nb + n0 + c8)
                  : (const void *)W,
               ok);
  }
  cp_async_commit();
  /* The A columns K .. KP-1 are never gathered into: zero them once. */
  for (int v = tid; v < TL::BM * (KP - K) / 8; v += TL::THREADS) {
    const int r = v / ((KP - K) / 8), c8 = K + (v % ((KP - K) / 8)) * 8;
    *reinterpret_cast<uint4 *>(a_s + r * TL::A_PITCH + c8) =
        make_uint4(0u, 0u, 0u, 0u);
  }

  /* Gather sources of a tile: element v = tid + j * THREADS is (r, k) =
   * (v % BM, v / BM), rows fastest (im2col_element), so a warp gathers one
   * offset of 32 consecutive rows. All GJ loads are independent and
   * the next tile's are issued before this tile's copies are waited for:
   * a thread's gathers no longer wait one after another on their table
   * entries (307 us at 3 -> 64 on workload A level 0 when they did). */
  constexpr int GJ = (TL::BM * TL::MAX_KVOL + TL::THREADS - 1) / TL::THREADS;
  const int tiles = (args.n_dst + TL::BM - 1) / TL::BM;
  int32_t src[GJ];
  auto fetch = [&](int tile) {
    im2col_fetch<TL::BM, TL::THREADS, false, TL::ROWS>(
        src, args.nbr, args.order, tile, tiles, kvol, args.n_dst, tid);
  };
  fetch(blockIdx.y);
  for (int tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int m0 = tile * TL::BM;
#pragma unroll
    for (int j = 0; j < GJ; j++) {
      const int v = tid + j * TL::THREADS;
      if (v < TL::BM * kvol) {
        int r, k;
        im2col_element<TL::BM, TL::ROWS>(v, kvol, &r, &k);
        cp_async16(a_s + r * TL::A_PITCH + k * TL::CP,
                   src[j] >= 0 ? (const void *)(A + (int64_t)src[j] * TL::CP)
                               : (const void *)A,
                   src[j] >= 0);
      }
    }
    fetch(tile + gridDim.y); /* in flight during the wait and the MMAs */
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    /* Warp w: rows 16 w .. 16 w + 15, all 64 columns (8 n-tiles). */
    Acc<false> acc[TL::BN / 8];
#pragma unroll
    for (int j = 0; j < TL::BN / 8; j++)
      acc[j].zero();
    for (int kk = 0; kk < KP; kk += 16) {
      uint32_t af[4];
      ldsm_x4(af, a_s + (warp * 16 + (lane & 15)) * TL::A_PITCH + kk +
                      (lane >> 4) * 8);
      uint32_t bfr[TL::BN / 8][2];
      load_b_kn<T, TL::BN / 8, TL::B_PITCH>(bfr, b_s, kk, 0, lane);
#pragma unroll
      for (int j = 0; j < TL::BN / 8; j++)
        Mma<T, false>::run(acc[j], af, bfr[j]);
    }

    T *out = reinterpret_cast<T *>(args.out);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = warp * 16 + (lane >> 2) + h * 8;
      if (m0 + r >= args.n_dst)
        continue;
      const int row = args.order ? args.order[m0 + r] : m0 + r;
#pragma unroll
      for (int j = 0; j < TL::BN / 8; j++) {
        const int col = n0 + j * 8 + (lane & 3) * 2;
        if (col < nb)
          Store2<T>::f32(out + (int64_t)row * nb + col, acc[j].v[2 * h],
                         acc[j].v[2 * h + 1]);
      }
    }
    __syncthreads(); /* a_s is gathered into again */
  }
  cp_async_wait<0>(); /* a block with no tile still waits for its B copies */
}

template <typename TL> constexpr int wgrad_smem_bytes() {
  return TL::STAGES * 2 *
         (TL::BK * (TL::BM + 8) + TL::BK * TL::B_PITCH_N);
}

/* M = cin, N = cout, reduction over the pairs of one offset. A is stored
 * as gathered rows [pair][cin] and read transposed by ldmatrix.trans. */
template <typename T, typename TL>
__global__ void __launch_bounds__(TL::THREADS)
    wgrad_kernel(const WgradArgs args) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int A_PITCH_M = TL::BM + 8;
  T *sA = reinterpret_cast<T *>(smem_raw);
  T *sB = sA + TL::STAGES * TL::BK * A_PITCH_M;

  const T *X = reinterpret_cast<const T *>(args.x);
  const T *DY = reinterpret_cast<const T *>(args.dy);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / TL::WARPS_N, wn = warp % TL::WARPS_N;
  const int n0 = blockIdx.x * TL::BN, m0 = blockIdx.y * TL::BM;
  const int k = blockIdx.z / args.splits, split = blockIdx.z % args.splits;
  const int cin = args.cin, cout = args.cout;
  const WgradSlice sl = wgrad_slice<TL::BK>(args, k, split);
  const int64_t p_begin = sl.p_begin, p_end = sl.p_end;
  const int iters = sl.iters;

  /* Pair -> row indices, loaded into registers two iterations ahead of the
   * gathers that use them (a_src/b_src: the next stage to issue; a_nx/b_nx:
   * the one after). Each BK-pair slice of in_rows/out_rows is a new cache
   * line, usually from DRAM; one iteration of MMAs (~0.3 us at BK = 32)
   * did not cover that latency. */
  constexpr int AV = TL::BM / 8, BV = TL::BN / 8;
  constexpr int AVPT = (TL::BK * AV + TL::THREADS - 1) / TL::THREADS;
  constexpr int BVPT = (TL::BK * BV + TL::THREADS - 1) / TL::THREADS;
  int a_src[AVPT], b_src[BVPT], a_nx[AVPT], b_nx[BVPT];
  auto fetch_rows = [&](int it, int(&a)[AVPT], int(&b)[BVPT]) {
    const int64_t p0 = p_begin + (int64_t)it * TL::BK;
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int64_t p = p0 + (tid + j * TL::THREADS) / AV;
      a[j] = p < p_end ? __ldg(args.in_rows + p) : -1;
    }
#pragma unroll
    for (int j = 0; j < BVPT; j++) {
      const int64_t p = p0 + (tid + j * TL::THREADS) / BV;
      b[j] = p < p_end ? __ldg(args.out_rows + p) : -1;
    }
  };
  fetch_rows(0, a_src, b_src);
  fetch_rows(1, a_nx, b_nx);

  auto load_stage = [&](int stage, int it) {
    T *a_dst = sA + stage * TL::BK * A_PITCH_M;
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int v = tid + j * TL::THREADS;
      if (TL::BK * AV % TL::THREADS != 0 && v >= TL::BK * AV)
        break;
      const int pr = v / AV, mv = v % AV;
      const int col = m0 + mv * 8;
      const bool ok = a_src[j] >= 0 && col < cin;
      const T *g = ok ? X + (int64_t)a_src[j] * cin + col : X;
      cp_async16(a_dst + pr * A_PITCH_M + mv * 8, g, ok);
    }
    T *b_dst = sB + stage * TL::BK * TL::B_PITCH_N;
#pragma unroll
    for (int j = 0; j < BVPT; j++) {
      const int v = tid + j * TL::THREADS;
      if (TL::BK * BV % TL::THREADS != 0 && v >= TL::BK * BV)
        break;
      const int pr = v / BV, nv = v % BV;
      const int col = n0 + nv * 8;
      const bool ok = b_src[j] >= 0 && col < cout;
      const T *g = ok ? DY + (int64_t)b_src[j] * cout + col : DY;
      cp_async16(b_dst + pr * TL::B_PITCH_N + nv * 8, g, ok);
    }
#pragma unroll
    for (int j = 0; j < AVPT; j++)
      a_src[j] = a_nx[j];
#pragma unroll
    for (int j = 0; j < BVPT; j++)
      b_src[j] = b_nx[j];
    fetch_rows(it + 2, a_nx, b_nx);
  };

  WarpAcc<false, TL::MI, TL::NI> acc;
  acc.zero();
  run_pipeline<TL::STAGES>(iters, load_stage, [&](int stage, int it) {
    if (it % WGRAD_PROMOTE_ITERS == 0 && it > 0)
      acc.promote();
    const T *a_s = sA + stage * TL::BK * A_PITCH_M;
    const T *b_s = sB + stage * TL::BK * TL::B_PITCH_N;
#pragma unroll
    for (int kk = 0; kk < TL::BK; kk += 16) {
      /* A stored [pair][cin]: ldmatrix.trans gives the row-major fragment. */
      uint32_t af[TL::MI][4];
#pragma unroll
      for (int mi = 0; mi < TL::MI; mi++) {
        const int mat = lane >> 3;
        const int kr = kk + (lane & 7) + (mat >> 1) * 8;
        const int mc = wm * TL::WM + mi * 16 + (mat & 1) * 8;
        ldsm_x4_t(af[mi], a_s + kr * A_PITCH_M + mc);
      }
      uint32_t bfr[TL::NI][2];
      load_b_kn<T, TL::NI, TL::B_PITCH_N>(bfr, b_s, kk, wn * TL::WN, lane);
#pragma unroll
      for (int mi = 0; mi < TL::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < TL::NI; ni++)
          Mma<T, false>::run(acc.c[mi][ni], af[mi], bfr[ni]);
    }
  });

  const int g = lane >> 2, t4 = lane & 3;
  const int64_t wsk = (int64_t)cin * cout;
#pragma unroll
  for (int mi = 0; mi < TL::MI; mi++)
#pragma unroll
    for (int ni = 0; ni < TL::NI; ni++) {
      const int col = n0 + wn * TL::WN + ni * 8 + t4 * 2;
      if (col >= cout)
        continue;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = m0 + wm * TL::WM + mi * 16 + g + h * 8;
        if (row >= cin)
          continue;
        const float a = acc.f32(mi, ni, 2 * h), b = acc.f32(mi, ni, 2 * h + 1);
        const int64_t off = (int64_t)k * wsk + (int64_t)row * cout + col;
        if (args.splits == 1) {
          Store2<T>::f32(reinterpret_cast<T *>(args.dw) + off, a, b);
        } else {
          float *p = args.partial + (int64_t)split * args.kvol * wsk + off;
          p[0] = a;
          p[1] = b;
        }
      }
    }
}

/* Sums the split partials in split order (bitwise reproducible). */
template <typename T>
__global__ void wgrad_reduce_kernel(const float *partial, T *dw, int64_t n,
                                    int splits) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float s = 0.f;
  for (int j = 0; j < splits; j++)
    s += partial[(int64_t)j * n + i];
  dw[i] = (T)s;
}

/* ---- operand copies (cuda_mask_gemm.cu; the int8 forward, cuda_int8.cu) */
/* Copies between a compact [A][B][C] array and its padded [A][Bp][Cp]
 * form: PAD fills the padded one (zeros outside B x C), !PAD copies the
 * leading B x C part of a padded one back. Over the destination without
 * an index division: a over blockIdx.y (A is 1 or a kernel volume), its
 * rows b over the x blocks and y threads, a row's elements over the x
 * threads (a warp writes whole rows). Three 64-bit divisions per element
 * made the copy compute-bound: 46-64 us for workload A's 3 -> 8 channel
 * input (7.3M elements; docs/perf-notes.md item 131). Launch with
 * repad3_launch. */
template <typename T, bool PAD>
__global__ void repad3_kernel(const T *__restrict__ src, T *__restrict__ dst,
                              int64_t A, int64_t B, int64_t C, int64_t Bp,
                              int64_t Cp) {
  const int64_t DB = PAD ? Bp : B, DC = PAD ? Cp : C; /* dst dims */
  for (int64_t a = blockIdx.y; a < A; a += gridDim.y)
    for (int64_t b = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; b < DB;
         b += (int64_t)gridDim.x * blockDim.y) {
      T *d = dst + (a * DB + b) * DC;
      for (int64_t c = threadIdx.x; c < DC; c += blockDim.x) {
        if (PAD)
          d[c] = b < B && c < C ? src[(a * B + b) * C + c] : (T)0.f;
        else
          d[c] = src[(a * Bp + b) * Cp + c];
      }
    }
}

/* The padded rows of one [B][C] array (A = 1) 16 bytes wide, e.g. 3 -> 8
 * halves: a thread builds a whole row in registers and stores it at once.
 * repad3_kernel, an element a thread, still took 38 us (75% of the SMs'
 * issue busy on index arithmetic) on workload A's 913,903 x 3 input (call
 * 5's ncu; docs/perf-notes.md item 131). */
template <typename T>
__global__ void repad_rows16_kernel(const T *__restrict__ src,
                                    uint4 *__restrict__ dst, int64_t B,
                                    int64_t C, int64_t Bp) {
  constexpr int W = 16 / sizeof(T);
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < Bp;
       r += (int64_t)gridDim.x * blockDim.x) {
    alignas(16) T e[W];
    const T *row = src + r * C;
#pragma unroll
    for (int j = 0; j < W; j++)
      e[j] = r < B && j < C ? row[j] : (T)0.f;
    dst[r] = *reinterpret_cast<const uint4 *>(e);
  }
}

/* A row's elements over the x threads (up to 32, a power of two), rows
 * over the 256 / x y threads; rows of 16 padded bytes by
 * repad_rows16_kernel (dst is a fresh, 16-byte aligned allocation). */
template <typename T, bool PAD>
inline void repad3_launch(cudaStream_t stream, const T *src, T *dst, int64_t A,
                          int64_t B, int64_t C, int64_t Bp, int64_t Cp) {
  const int64_t DC = PAD ? Cp : C, DB = PAD ? Bp : B;
  if (PAD && A == 1 && Cp * (int64_t)sizeof(T) == 16 && C <= Cp &&
      ((uintptr_t)dst & 15u) == 0) {
    int64_t g = (Bp + 255) / 256;
    g = g < 1 ? 1 : g > (1 << 20) ? (1 << 20) : g;
    repad_rows16_kernel<T><<<(unsigned)g, 256, 0, stream>>>(
        src, reinterpret_cast<uint4 *>(dst), B, C, Bp);
    return;
  }
  int bx = 1;
  while (bx < DC && bx < 32)
    bx <<= 1;
  const int by = 256 / bx;
  int64_t gx = (DB + by - 1) / by;
  gx = gx < 1 ? 1 : gx > (1 << 20) ? (1 << 20) : gx;
  const int64_t gy = A < 1 ? 1 : A > 65535 ? 65535 : A;
  repad3_kernel<T, PAD><<<dim3((unsigned)gx, (unsigned)gy), dim3(bx, by), 0,
                          stream>>>(src, dst, A, B, C, Bp, Cp);
}

/* Wt[k][n][c] = W[k][c][n] for c < cin and 0 for cin <= c < ka (Wt's rows
 * hold ka >= cin elements): the forward weights K-major, for the wgmma
 * tiles (ka = cin) and the int8 tiles (ka: cin rounded up to 16). One
 * 32 x 32 tile per block through shared memory, both sides coalesced; grid
 * (ceil(cout / 32), ceil(ka / 32), kvol). */
template <typename T>
__global__ void transpose_w_kernel(const T *__restrict__ w, T *__restrict__ wt,
                                   int cin, int cout, int ka) {
  __shared__ T t[32][33];
  const T *wk = w + (int64_t)blockIdx.z * cin * cout;
  T *wtk = wt + (int64_t)blockIdx.z * cout * ka;
  const int c0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int c = c0 + i, n = n0 + threadIdx.x;
    t[i][threadIdx.x] = c < cin && n < cout ? wk[(int64_t)c * cout + n] : (T)0.f;
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int n = n0 + i, c = c0 + threadIdx.x;
    if (c < ka && n < cout)
      wtk[(int64_t)n * ka + c] = t[threadIdx.x][i];
  }
}

/* The rows of m sorted by neighbour bitmask, for dgrad over the input
 * side's table (cached on the map: the f16 kernels' row_order 1 and the
 * int8 forward use them). row_order gives the order alone (the im2col
 * family, which runs every offset), sorted_rows also the 128-row tile
 * masks of that order for kvol <= 32 (else NULL). `local`, the op's
 * workspace, takes them instead of the map on a first use inside a CUDA
 * graph capture of a map built before it (the graph makes them on every
 * replay). cuda_row_order.cu. */
voxconv_status_t row_order(voxconv_handle_t *h, const voxconv_kmap_t *m,
                           bool dgrad, VcWorkspace *local,
                           const int32_t **order);
voxconv_status_t sorted_rows(voxconv_handle_t *h, const voxconv_kmap_t *m,
                             bool dgrad, VcWorkspace *local,
                             const int32_t **order,
                             const unsigned **tile_mask);

} // namespace vc_mask_gemm

#endif
