/* Hopper (sm_90a) variant of the mask_gemm forward/dgrad kernel:
 * warpgroup MMA (wgmma.mma_async) with both operands read by the tensor
 * cores straight from shared memory.
 *
 * Why a second kernel: on the mma.sync tiles every k-step is a chain
 * ldmatrix -> registers -> mma, and ncu shows that chain (short-scoreboard
 * stalls) and the issue slots it costs as the first limit at C >= 128
 * (tensor pipe 35% active at C = 256). wgmma issues one instruction per
 * 64 x N x 16 block for a whole warpgroup and runs asynchronously, so the
 * warps are free to issue the next stage's gathers meanwhile.
 *
 * Same algorithm as fwd_kernel (cuda_mask_gemm.cuh): the tile scans which
 * kernel offsets its rows need, gathers input rows through the neighbour
 * table with 16-byte cp.async, writes every output once. Differences:
 *  - block = 2 warpgroups x 64 rows (BM = 128), BN in {64, 128}, BK = 64;
 *  - B must be K-major ([n][k], k contiguous): dgrad's weights are already
 *    ([k][cin][cout] read as B[cout][cin]); the forward weights are
 *    transposed into a scratch copy first (cuda_mask_gemm.cu);
 *  - shared-memory rows of 64 halves (128 bytes) in the 128-byte swizzle
 *    (16-byte chunk c of row r at chunk c ^ (r % 8)), which is what the
 *    matrix descriptors name, so the tensor cores read without bank
 *    conflicts; the stage buffers are 1024-byte aligned (the swizzle is a
 *    function of address bits 4-9);
 *  - cp.async writes are generic-proxy writes and wgmma reads through the
 *    async proxy: every thread fences (fence.proxy.async) after its copies
 *    landed and before the barrier that publishes the stage;
 *  - one wgmma group stays in flight across the barrier, so the stage
 *    refilled at iteration it is the one read at it - 2 (STAGES - 2 stages
 *    of gathers in flight).
 * fp32-accumulator tiles promote into plain fp32 sums every
 * PROMOTE_CHANNELS reduction channels, as the mma.sync tiles do (the
 * tensor cores' accumulation truncates).
 *
 * PTX: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (matrix
 * descriptor: start >> 4 in bits 0-13, leading byte offset >> 4 in 16-29
 * (unused for swizzled K-major), stride byte offset >> 4 in 32-45 = 1024 B
 * between 8-row groups, swizzle mode in 62-63, 1 = 128 B). Accumulator
 * fragment of m64nNk16: warp w of the warpgroup holds rows 16w..16w+15;
 * lane 4g+t holds, for each 8-column block j, rows {g, g+8} x columns
 * {8j+2t, 8j+2t+1}: f32 regs 4j..4j+3 (row g: 4j, 4j+1), f16 regs 2j
 * (row g) and 2j+1 (row g+8), two halves each. */
#ifndef VC_CUDA_MASK_GEMM_SM90_CUH
#define VC_CUDA_MASK_GEMM_SM90_CUH

#include "cuda_mask_gemm.cuh"

/* wgmma exists only in the arch-specific sm_90a target; other targets of a
 * multi-arch build compile an empty kernel that the host never launches
 * (the algorithm's supports() requires compute capability 9.0 and a build
 * with 90a). */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VC_MG_SM90_BODY 1
#endif

namespace vc_mask_gemm {

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Pins a register at this point of the program: the compiler sees the
 * wgmma asm as reading and writing the accumulators at issue, so without
 * this it could move their later reads above wgmma.wait_group. */
__device__ __forceinline__ void pin(float &r) {
  asm volatile("" : "+f"(r)::"memory");
}
__device__ __forceinline__ void pin(uint32_t &r) {
  asm volatile("" : "+r"(r)::"memory");
}

/* Descriptor of a K-major tile of rows of 128 bytes, 128-byte swizzle. */
__device__ __forceinline__ uint64_t wg_desc(unsigned saddr) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) |
         ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* Register lists of the asm statements below. */
#define VC_WG_R16                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define VC_WG_R32                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"       \
  ", "                                                                         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31"
#define VC_WG_R64                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"       \
  ", "                                                                         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31"                                                                   \
  ", "                                                                         \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47"                                                                   \
  ", "                                                                         \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "     \
  "%62, %63"
#define VC_WG_OPS16U(d)                                                        \
  "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),      \
      "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]),             \
      "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
#define VC_WG_OPS32U(d)                                                        \
  "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),      \
      "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]),             \
      "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),         \
      "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]),         \
      "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]),         \
      "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]),         \
      "+r"(d[31])
#define VC_WG_OPS32F(d)                                                        \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),      \
      "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),             \
      "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),         \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),         \
      "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),         \
      "+f"(d[31])
#define VC_WG_OPS64F(d)                                                        \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),      \
      "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),             \
      "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),         \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),         \
      "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),         \
      "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),         \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),         \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),         \
      "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),         \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),         \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),         \
      "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define VC_WG_ASM(INSTR, REGS, IA, IB, OPS)                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" INSTR " {" REGS      \
               "}, " IA ", " IB ", p, 1, 1, 0, 0;\n}\n"                        \
               : OPS(d)                                                        \
               : "l"(da), "l"(db))

/* One m64nNk16 wgmma of a warpgroup: d += A(da) * B(db). */
template <typename T, bool ACC16, int N> struct Wgmma;
template <> struct Wgmma<__half, false, 128> {
  static __device__ __forceinline__ void run(float (&d)[64], uint64_t da,
                                             uint64_t db) {
    VC_WG_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", VC_WG_R64,
              "%64", "%65", VC_WG_OPS64F);
  }
};
template <> struct Wgmma<__nv_bfloat16, false, 128> {
  static __device__ __forceinline__ void run(float (&d)[64], uint64_t da,
                                             uint64_t db) {
    VC_WG_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
              VC_WG_R64, "%64", "%65", VC_WG_OPS64F);
  }
};
template <> struct Wgmma<__half, true, 128> {
  static __device__ __forceinline__ void run(uint32_t (&d)[32], uint64_t da,
                                             uint64_t db) {
    VC_WG_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f16.f16.f16", VC_WG_R32,
              "%32", "%33", VC_WG_OPS32U);
  }
};
template <> struct Wgmma<__half, false, 64> {
  static __device__ __forceinline__ void run(float (&d)[32], uint64_t da,
                                             uint64_t db) {
    VC_WG_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", VC_WG_R32,
              "%32", "%33", VC_WG_OPS32F);
  }
};
template <> struct Wgmma<__nv_bfloat16, false, 64> {
  static __device__ __forceinline__ void run(float (&d)[32], uint64_t da,
                                             uint64_t db) {
    VC_WG_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", VC_WG_R32,
              "%32", "%33", VC_WG_OPS32F);
  }
};
template <> struct Wgmma<__half, true, 64> {
  static __device__ __forceinline__ void run(uint32_t (&d)[16], uint64_t da,
                                             uint64_t db) {
    VC_WG_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16", VC_WG_R16,
              "%16", "%17", VC_WG_OPS16U);
  }
};

/* Tile of the wgmma kernel: 2 warpgroups, each 64 rows x BN. */
template <int BN_, int STAGES_> struct WgTile {
  static constexpr int BM = 128, BN = BN_, BK = 64, STAGES = STAGES_;
  static constexpr int THREADS = 256;
  static constexpr int A_STAGE = BM * BK * 2, B_STAGE = BN * BK * 2; /* B */
  static_assert(STAGES >= 3, "one stage computing, one wgmma group in "
                             "flight, at least one being loaded");
  static_assert(BN == 64 || BN == 128, "wgmma wrappers exist for N = 64, 128");
};

template <typename TL> constexpr int wg_smem_bytes() {
  return TL::STAGES * (TL::A_STAGE + TL::B_STAGE) + 1024; /* + alignment */
}

/* Accumulators of one thread: the wgmma registers and, for fp32 tiles,
 * the plain fp32 sums they are promoted into. */
template <bool ACC16, int BN> struct WgAcc;
template <int BN> struct WgAcc<false, BN> {
  static constexpr int R = BN / 2;
  float c[R], total[R];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < R; i++)
      c[i] = total[i] = 0.f;
  }
  /* after wgmma_wait<0>() */
  __device__ __forceinline__ void promote() {
#pragma unroll
    for (int i = 0; i < R; i++) {
      pin(c[i]);
      total[i] += c[i];
      c[i] = 0.f;
    }
  }
  __device__ __forceinline__ void pin_all() {
#pragma unroll
    for (int i = 0; i < R; i++)
      pin(c[i]);
  }
};
template <int BN> struct WgAcc<true, BN> {
  static constexpr int R = BN / 4;
  uint32_t c[R];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < R; i++)
      c[i] = 0u;
  }
  __device__ __forceinline__ void promote() {}
  __device__ __forceinline__ void pin_all() {
#pragma unroll
    for (int i = 0; i < R; i++)
      pin(c[i]);
  }
};

/* Byte offset of 16-byte chunk c of row r in a swizzled 128-byte-row tile. */
__device__ __forceinline__ int swz(int r, int c) {
  return r * 128 + ((c ^ (r & 7)) << 4);
}

/* args.w is K-major: B[kk][n] = W[k][n][kk] ([kvol][nb][ka]). */
template <typename T, typename TL, bool ACC16>
__global__ void __launch_bounds__(TL::THREADS, 1)
    wg_fwd_kernel(const FwdArgs args) {
#ifdef VC_MG_SM90_BODY
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ TileOffsets<TL::BM> tile;
  const unsigned raw = smem_addr(smem_raw);
  unsigned char *const sA = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  unsigned char *const sB = sA + TL::STAGES * TL::A_STAGE;

  const T *A = reinterpret_cast<const T *>(args.a);
  const T *W = reinterpret_cast<const T *>(args.w);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3; /* warpgroup, warp in it */
  const int n0 = blockIdx.x * TL::BN;
  const int m0 = blockIdx.y * TL::BM;
  const int kvol = args.kvol, ka = args.ka, nb = args.nb;
  const int rows = min(TL::BM, args.n_dst - m0);
  const int64_t wsk = (int64_t)ka * nb;

  scan_tile_offsets<TL::THREADS, TL::BM>(args, m0, rows, tile);
  const int nchunk = (ka + TL::BK - 1) / TL::BK;
  const int iters = tile.nact * nchunk;

  constexpr int AV = TL::BK / 8; /* 16-byte vectors per row: 8 */
  constexpr int AVPT = TL::BM * AV / TL::THREADS;
  constexpr int BVPT = TL::BN * AV / TL::THREADS;
  static_assert(TL::BM * AV % TL::THREADS == 0 &&
                    TL::BN * AV % TL::THREADS == 0,
                "every thread copies whole vectors of each stage");
  RowGather<AVPT> gather;
  gather.template init<TL::THREADS, AV>(tid, rows, tile.rows, kvol);
  gather.fetch(args.nbr, tile, 0);
  /* A thread's vectors are at the same place of every stage: vector
   * v = tid + j * THREADS is chunk v % 8 of row v / 8 (A: tile row, B:
   * output channel), so the chunk index is the same for all j. */
  const int cv = tid % AV;
  int a_soff[AVPT], b_soff[BVPT], b_goff[BVPT];
  bool b_nok[BVPT];
#pragma unroll
  for (int j = 0; j < AVPT; j++)
    a_soff[j] = swz((tid + j * TL::THREADS) / AV, cv);
#pragma unroll
  for (int j = 0; j < BVPT; j++) {
    const int n = (tid + j * TL::THREADS) / AV;
    b_soff[j] = swz(n, cv);
    b_nok[j] = n0 + n < nb;
    b_goff[j] = (n0 + n) * ka + cv * 8;
  }

  int ld_ai = 0, ld_chunk = 0;
  auto load_stage = [&](int stage) {
    const int k = tile.act[ld_ai];
    const int col = ld_chunk * TL::BK + cv * 8;
    const bool col_ok = col < ka;
    unsigned char *a_dst = sA + stage * TL::A_STAGE;
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int src = gather.src[j];
      const bool ok = src >= 0 && col_ok;
      cp_async16(a_dst + a_soff[j], ok ? A + (int64_t)src * ka + col : A, ok);
    }
    const T *wc = W + (int64_t)k * wsk + ld_chunk * TL::BK;
    if (++ld_chunk == nchunk) {
      ld_chunk = 0;
      gather.fetch(args.nbr, tile, ++ld_ai);
    }
    unsigned char *b_dst = sB + stage * TL::B_STAGE;
#pragma unroll
    for (int j = 0; j < BVPT; j++) {
      const bool ok = b_nok[j] && col_ok;
      cp_async16(b_dst + b_soff[j], ok ? wc + b_goff[j] : W, ok);
    }
  };

  WgAcc<ACC16, TL::BN> acc;
  acc.zero();
  constexpr int promote_iters = PROMOTE_CHANNELS / TL::BK;
  const unsigned a_base = smem_addr(sA) + wg * 64 * 128;
  const unsigned b_base = smem_addr(sB);
#pragma unroll
  for (int s = 0; s < TL::STAGES - 2; s++) {
    if (s < iters)
      load_stage(s);
    cp_async_commit();
  }
  for (int it = 0; it < iters; it++) {
    cp_async_wait<TL::STAGES - 3>();
    fence_proxy_async_smem();
    __syncthreads();
    /* Every warpgroup has passed wgmma_wait<1> of it - 1, so the group of
     * it - 2 is done and its stage can be refilled. */
    const int next = it + TL::STAGES - 2;
    if (next < iters)
      load_stage(next % TL::STAGES);
    cp_async_commit();
    if (!ACC16 && it > 0 && it % promote_iters == 0) {
      wgmma_wait<0>();
      acc.promote();
    }
    const int stage = it % TL::STAGES;
    const uint64_t da = wg_desc(a_base + stage * TL::A_STAGE);
    const uint64_t db = wg_desc(b_base + stage * TL::B_STAGE);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < TL::BK / 16; ks++) /* 32 bytes per k-step */
      Wgmma<T, ACC16, TL::BN>::run(acc.c, da + 2 * ks, db + 2 * ks);
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  acc.pin_all();
  cp_async_wait<0>();

  /* Epilogue: rows 16 wq + g (+8) of this warpgroup's 64, every 8-column
   * block j; each (row < n_dst, col < nb) written once. */
  T *out = reinterpret_cast<T *>(args.out);
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int j = 0; j < TL::BN / 8; j++) {
    const int col = n0 + j * 8 + t4 * 2;
    if (col >= nb)
      continue;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = wg * 64 + wq * 16 + g + h * 8;
      if (r >= rows)
        continue;
      T *p = out + (int64_t)tile.rows[r] * nb + col;
      if constexpr (ACC16)
        Store2<T>::h16(p, acc.c[2 * j + h]);
      else
        Store2<T>::f32(p, acc.total[4 * j + 2 * h] + acc.c[4 * j + 2 * h],
                       acc.total[4 * j + 2 * h + 1] + acc.c[4 * j + 2 * h + 1]);
    }
  }
#endif
}

} // namespace vc_mask_gemm

#endif
