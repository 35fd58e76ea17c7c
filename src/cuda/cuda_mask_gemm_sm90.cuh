/* Hopper (sm_90a) variants of the mask_gemm kernels, forward/dgrad
 * (wg_fwd_kernel) and wgrad (wg_wgrad_kernel, at the end of this file):
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
 *  - block = 2 warpgroups x 64 rows (BM = 128), BN in {64, 96, 128, 256},
 *    BK = 64 (BK = 32 in the 64-byte swizzle for the 128 x 256 tile with
 *    fp32 accumulators, whose fp32 sums take 128 KB of shared memory);
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
 * PROMOTE_CHANNELS reduction channels, as the mma.sync tiles do: wgmma's
 * accumulation also truncates (unpromoted 27 x 160 chains reached max_rel
 * 4e-3 at a 1e-3 * rms floor on the H200; docs/perf-notes.md item 14).
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

#include <type_traits>

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

/* Descriptor of a K-major tile of BK-half rows in the matching swizzle,
 * as two words. Low: start address >> 4 (bits 0-13), leading byte offset
 * 1 (bits 16-29; unused for swizzled K-major layouts). High: stride byte
 * offset >> 4 (bits 32-45: 8 rows between 8-row groups), swizzle mode
 * (bits 62-63; 1: 128 B, 2: 64 B). */
__device__ __forceinline__ unsigned wg_desc_lo(unsigned saddr) {
  return ((saddr & 0x3FFFFu) >> 4) | (1u << 16);
}
template <int BK> __host__ __device__ constexpr unsigned wg_desc_hi() {
  return (unsigned)(8 * BK * 2 >> 4) | ((BK == 64 ? 1u : 2u) << 30);
}

/* Register lists of the asm statements below. */
#define VC_WG_R16                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define VC_WG_R32                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"       \
  ", "                                                                         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31"
#define VC_WG_R24                                                              \
  VC_WG_R16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define VC_WG_R48                                                              \
  VC_WG_R32 ", "                                                               \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "     \
  "%46, %47"
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
#define VC_WG_R128                                                             \
  VC_WG_R64 ", "                                                               \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, " \
  "%76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, " \
  "%88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, " \
  "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, " \
  "%124, %125, %126, %127"
/* Operand lists of n accumulator registers d[0..n), constraint C ("+f"
 * for fp32, "+r" for packed f16 pairs); each doubles the one before. */
#define VC_WG_OPS8(C, d)                                                       \
  C((d)[0]), C((d)[1]), C((d)[2]), C((d)[3]), C((d)[4]), C((d)[5]),          \
      C((d)[6]), C((d)[7])
#define VC_WG_OPS16(C, d) VC_WG_OPS8(C, d), VC_WG_OPS8(C, (d) + 8)
#define VC_WG_OPS24(C, d) VC_WG_OPS16(C, d), VC_WG_OPS8(C, (d) + 16)
#define VC_WG_OPS32(C, d) VC_WG_OPS16(C, d), VC_WG_OPS16(C, (d) + 16)
#define VC_WG_OPS48(C, d) VC_WG_OPS32(C, d), VC_WG_OPS16(C, (d) + 32)
#define VC_WG_OPS64(C, d) VC_WG_OPS32(C, d), VC_WG_OPS32(C, (d) + 32)
#define VC_WG_OPS128(C, d) VC_WG_OPS64(C, d), VC_WG_OPS64(C, (d) + 64)

#define VC_WG_ASM(INSTR, NREG, IA, IB, C, TRA, TRB)                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" INSTR                \
               " {" VC_WG_R##NREG "}, " IA ", " IB ", p, 1, 1, " TRA ", " TRB  \
               ";\n}\n"                                                        \
               : VC_WG_OPS##NREG(C, d)                                         \
               : "l"(da), "l"(db))

/* Operand majorness of a wgmma (its two transpose immediates). */
enum WgMajor {
  WG_K = 0,    /* both operands K-major (forward/dgrad) */
  WG_MN = 1,   /* both MN-major (wgrad: gathered rows, channels contiguous) */
  WG_B_MN = 2, /* A K-major, B MN-major (forward reading W [k][cin][cout]
                  as stored: the output channels contiguous) */
};

/* One m64nNk16 wgmma of a warpgroup: d += A(da) * B(db), d being NREG
 * registers of REG_T (constraint C); IA / IB name the descriptor operands
 * (%NREG, %NREG+1). One specialization per (input type, accumulator, N,
 * operand majorness). */
template <typename T, bool ACC16, int N, int MAJOR = WG_K> struct Wgmma;
#define VC_WG_SPEC_MJ(T, ACC16, N, MJ, TRA, TRB, TYPES, REG_T, C, NREG, IA,   \
                      IB)                                                      \
  template <> struct Wgmma<T, ACC16, N, MJ> {                                  \
    static __device__ __forceinline__ void run(REG_T (&d)[NREG], uint64_t da,  \
                                               uint64_t db) {                  \
      VC_WG_ASM("wgmma.mma_async.sync.aligned.m64n" #N "k16." TYPES, NREG, IA, \
                IB, C, TRA, TRB);                                              \
    }                                                                          \
  };
#define VC_WG_SPEC_MN(T, ACC16, N, MN, TR, TYPES, REG_T, C, NREG, IA, IB)      \
  VC_WG_SPEC_MJ(T, ACC16, N, MN ? WG_MN : WG_K, TR, TR, TYPES, REG_T, C, NREG, \
                IA, IB)
#define VC_WG_SPEC(T, ACC16, N, TYPES, REG_T, C, NREG, IA, IB)                 \
  VC_WG_SPEC_MN(T, ACC16, N, false, "0", TYPES, REG_T, C, NREG, IA, IB)
VC_WG_SPEC(__half, false, 64, "f32.f16.f16", float, "+f", 32, "%32", "%33")
VC_WG_SPEC(__nv_bfloat16, false, 64, "f32.bf16.bf16", float, "+f", 32, "%32",
           "%33")
VC_WG_SPEC(__half, true, 64, "f16.f16.f16", uint32_t, "+r", 16, "%16", "%17")
VC_WG_SPEC(__half, false, 96, "f32.f16.f16", float, "+f", 48, "%48", "%49")
VC_WG_SPEC(__nv_bfloat16, false, 96, "f32.bf16.bf16", float, "+f", 48, "%48",
           "%49")
VC_WG_SPEC(__half, true, 96, "f16.f16.f16", uint32_t, "+r", 24, "%24", "%25")
VC_WG_SPEC(__half, false, 128, "f32.f16.f16", float, "+f", 64, "%64", "%65")
VC_WG_SPEC(__nv_bfloat16, false, 128, "f32.bf16.bf16", float, "+f", 64, "%64",
           "%65")
VC_WG_SPEC(__half, true, 128, "f16.f16.f16", uint32_t, "+r", 32, "%32", "%33")
VC_WG_SPEC(__half, false, 256, "f32.f16.f16", float, "+f", 128, "%128", "%129")
VC_WG_SPEC(__nv_bfloat16, false, 256, "f32.bf16.bf16", float, "+f", 128,
           "%128", "%129")
VC_WG_SPEC(__half, true, 256, "f16.f16.f16", uint32_t, "+r", 64, "%64", "%65")
VC_WG_SPEC_MN(__half, false, 64, true, "1", "f32.f16.f16", float, "+f", 32,
              "%32", "%33")
VC_WG_SPEC_MN(__nv_bfloat16, false, 64, true, "1", "f32.bf16.bf16", float,
              "+f", 32, "%32", "%33")
VC_WG_SPEC_MN(__half, false, 128, true, "1", "f32.f16.f16", float, "+f", 64,
              "%64", "%65")
VC_WG_SPEC_MN(__nv_bfloat16, false, 128, true, "1", "f32.bf16.bf16", float,
              "+f", 64, "%64", "%65")
VC_WG_SPEC_MN(__half, false, 256, true, "1", "f32.f16.f16", float, "+f", 128,
              "%128", "%129")
VC_WG_SPEC_MN(__nv_bfloat16, false, 256, true, "1", "f32.bf16.bf16", float,
              "+f", 128, "%128", "%129")
/* A K-major, B MN-major (WG_B_MN): the B_MN forward, which wg_b_mn runs
 * on 64-column tiles only (the kernel itself takes any multiple of 64 that
 * has a wrapper here) */
VC_WG_SPEC_MJ(__half, false, 64, WG_B_MN, "0", "1", "f32.f16.f16", float, "+f",
              32, "%32", "%33")
VC_WG_SPEC_MJ(__nv_bfloat16, false, 64, WG_B_MN, "0", "1", "f32.bf16.bf16",
              float, "+f", 32, "%32", "%33")
#undef VC_WG_SPEC
#undef VC_WG_SPEC_MN
#undef VC_WG_SPEC_MJ

/* Tile of the wgmma kernel: 2 warpgroups, each 64 rows x BN; stage rows
 * of BK halves (BK = 64: 128-byte rows, 128-byte swizzle; BK = 32: 64-byte
 * rows, 64-byte swizzle). SMEM_TOTAL: the fp32 sums of an fp32-accumulator
 * tile live in shared memory instead of registers (128 x 256 needs 128
 * accumulator registers per thread; a second register set would not fit). */
template <int BN_, int STAGES_, int BK_ = 64, bool SMEM_TOTAL_ = false,
          int MIN_BLOCKS_ = 1>
struct WgTile {
  static constexpr int BM = 128, BN = BN_, BK = BK_, STAGES = STAGES_;
  static constexpr bool SMEM_TOTAL = SMEM_TOTAL_;
  /* blocks per SM the registers must allow (__launch_bounds__) */
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int THREADS = 256;
  static constexpr int ROW_BYTES = BK * 2;
  static constexpr int A_STAGE = BM * ROW_BYTES, B_STAGE = BN * ROW_BYTES;
  static constexpr int TOTAL_BYTES = SMEM_TOTAL ? BM * BN * 4 : 0;
  static_assert(STAGES >= 3, "one stage computing, one wgmma group in "
                             "flight, at least one being loaded");
  static_assert(BN == 64 || BN == 96 || BN == 128 || BN == 256,
                "wgmma wrappers: N = 64, 96, 128, 256");
  static_assert(BK == 64 || BK == 32, "swizzle modes: 128 B and 64 B rows");
  /* every thread gathers and issues MMAs (see WgWsTile) */
  static constexpr int LOADERS = THREADS;
  static constexpr bool WS = false, HALF_SKIP = false;
  /* stages of A (the gathered operand); STAGES counts those of B */
  static constexpr int A_STAGES = STAGES;
};

/* setmaxnreg split of a 384-thread warp-specialised block (one gathering
 * warpgroup, two MMA warpgroups): the block's 384 x 168 registers are
 * moved between the sides, not added to. */
constexpr bool setmaxnreg_fits(int gather_regs, int mma_regs) {
  return gather_regs * 128 + mma_regs * 256 <= 65536 / 384 / 8 * 8 * 384;
}

/* Warp-specialised variant (wg_ws_pipeline): warpgroup 0 only gathers,
 * warpgroups 1-2 only issue wgmma; 64-row halves and layout as WgTile.
 * Forward/dgrad (wg_fwd_ws_kernel) read B as stage images, one bulk copy
 * per stage (WgFwdGather); wgrad (WgGradWsTile) gathers both operands. */
template <int BN_, int STAGES_, bool HALF_SKIP_ = false,
          bool HALF_SUMS_ = false, int A_STAGES_ = STAGES_>
struct WgWsTile : WgTile<BN_, STAGES_> {
  static constexpr int THREADS = 384, LOADERS = 128;
  static constexpr bool WS = true;
  /* each MMA warpgroup skips the wgmma of offsets none of its 64 rows has
   * (the stage's A rows of that half are all zero-filled then) */
  static constexpr bool HALF_SKIP = HALF_SKIP_;
  /* fp32 accumulators of a 128 x 256 tile (WgAccSplit): the 128 wgmma
   * registers per MMA thread leave room for only half of the promoted fp32
   * sums in registers; the other half lives in shared memory (64 KB), and
   * the warpgroups move registers from the gatherers with setmaxnreg
   * (GATHER_REGS / MMA_REGS; 0: not used). Both MMA warpgroups promote
   * at the same iterations: staggered promotions were slower (each drain
   * holds back a stage both must release; docs/perf-notes.md item 44). */
  static constexpr bool HALF_SUMS = HALF_SUMS_;
  static constexpr int TOTAL_BYTES = HALF_SUMS ? 128 * BN_ * 2 : 0;
  /* ptxas -v: the gathering side spills below 72 registers, the MMA side
   * below 208; the split is the one measured (eleventh session: 80 / 208,
   * within noise of 72 / 216) */
  static constexpr int GATHER_REGS = HALF_SUMS ? 80 : 0;
  static constexpr int MMA_REGS = HALF_SUMS ? 208 : 0;
  static_assert(!HALF_SUMS || setmaxnreg_fits(GATHER_REGS, MMA_REGS),
                "setmaxnreg: the warpgroups share the block's registers");
  /* A ring deeper than B's (forward/dgrad, wg_fwd_ws_kernel): A_STAGES
   * gathered stages, STAGES weight stages, each stage's weights loaded
   * B_LAG iterations after its A rows, so that both refills wait for the
   * release of the same iteration (A of it goes into the slot of
   * it - A_STAGES, B of it - B_LAG into the slot of it - B_LAG - STAGES).
   * Why: the gathers are the long-latency side (the MMA warps wait on
   * full stages 46% of their samples, docs/perf-notes.md item 48) and
   * the weights come from L2; 4 A stages of 16 KB and 3 weight stages of
   * 32 KB fit beside tile 7's 64 KB of sums, 4 whole stages do not. */
  static constexpr int A_STAGES = A_STAGES_;
  static constexpr int B_LAG = A_STAGES_ - STAGES_;
  static_assert(B_LAG >= 0, "B refills follow A's");
};

/* Build knob for the compute-sanitizer build (scripts/device_check.sh):
 * see its use in wg_wgrad_kernel. */
#ifndef VC_WGRAD_RACECHECK_ORDER
#define VC_WGRAD_RACECHECK_ORDER 0
#endif

/* Stages, the shared fp32 sums, and slack to align the stages to 1024 B
 * (the swizzle is a function of address bits 4-9). */
template <typename TL> constexpr int wg_smem_bytes() {
  return TL::A_STAGES * TL::A_STAGE + TL::STAGES * TL::B_STAGE +
         TL::TOTAL_BYTES + 1024;
}

/* Accumulators of one thread: the wgmma registers and, for fp32 tiles,
 * the plain fp32 sums they are promoted into (registers, or shared memory
 * at `sh`, thread-private with stride THREADS (256) so accesses are
 * conflict-free). value(i) is the fp32 result of register i. */
template <bool ACC16, int BN, bool SMEM_TOTAL> struct WgAcc;
template <int BN, bool SMEM_TOTAL> struct WgAcc<false, BN, SMEM_TOTAL> {
  static constexpr int R = BN / 2;
  float c[R];
  float total[SMEM_TOTAL ? 1 : R]; /* the sums in registers, or */
  float *sh; /* in shared memory: this thread's sum i at sh[i * 256] */
  __device__ __forceinline__ float &sum(int i) {
    if constexpr (SMEM_TOTAL)
      return sh[i * 256];
    else
      return total[i];
  }
  __device__ __forceinline__ void zero(float *s) {
    sh = s;
#pragma unroll
    for (int i = 0; i < R; i++) {
      c[i] = 0.f;
      sum(i) = 0.f;
    }
  }
  /* after wgmma_wait<0>() */
  __device__ __forceinline__ void promote() {
#pragma unroll
    for (int i = 0; i < R; i++) {
      pin(c[i]);
      sum(i) += c[i];
      c[i] = 0.f;
    }
  }
  __device__ __forceinline__ void pin_all() {
#pragma unroll
    for (int i = 0; i < R; i++)
      pin(c[i]);
  }
  __device__ __forceinline__ float value(int i) { return sum(i) + c[i]; }
};
/* fp32 accumulators of a 128 x 256 warp-specialised tile (WgWsTile with
 * HALF_SUMS): the promoted sums of registers 0 .. R/2-1 (columns 0-127)
 * in registers, those of R/2 .. R-1 in shared memory, four per float4 at
 * sh[q * 256] (256 MMA threads, so a warp's accesses are 512 consecutive
 * bytes: conflict-free). */
template <int BN> struct WgAccSplit {
  static constexpr int R = BN / 2, RH = R / 2;
  float c[R];
  float total[RH];
  float4 *sh;
  __device__ __forceinline__ void zero(float4 *s) {
    sh = s;
#pragma unroll
    for (int i = 0; i < R; i++)
      c[i] = 0.f;
#pragma unroll
    for (int i = 0; i < RH; i++)
      total[i] = 0.f;
#pragma unroll
    for (int q = 0; q < RH / 4; q++)
      sh[q * 256] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  /* After wgmma_wait<0>(). The shared-memory half goes through volatile
   * accesses, one float4 at a time: with plain loads the compiler hoisted
   * all 16 loads ahead (64 more live registers). */
  __device__ __forceinline__ void promote() {
#pragma unroll
    for (int i = 0; i < RH; i++) {
      pin(c[i]);
      total[i] += c[i];
      c[i] = 0.f;
    }
    const unsigned a = smem_addr(sh);
#pragma unroll
    for (int q = 0; q < RH / 4; q++) {
      float *x = c + RH + 4 * q;
      float v0, v1, v2, v3;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v0), "=f"(v1), "=f"(v2), "=f"(v3)
                   : "r"(a + q * 4096u)
                   : "memory");
      pin(x[0]);
      pin(x[1]);
      pin(x[2]);
      pin(x[3]);
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                       a + q * 4096u),
                   "f"(v0 + x[0]), "f"(v1 + x[1]), "f"(v2 + x[2]),
                   "f"(v3 + x[3])
                   : "memory");
      x[0] = x[1] = x[2] = x[3] = 0.f;
    }
  }
  __device__ __forceinline__ void pin_all() {
#pragma unroll
    for (int i = 0; i < R; i++)
      pin(c[i]);
  }
  __device__ __forceinline__ float value(int i) {
    if (i < RH)
      return total[i] + c[i];
    const float4 v = sh[(i - RH) / 4 * 256];
    const int e = (i - RH) % 4;
    return (e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w) + c[i];
  }
};
template <int BN> struct WgAcc<true, BN, false> {
  static constexpr int R = BN / 4;
  uint32_t c[R];
  __device__ __forceinline__ void zero(float *) {
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

/* Byte offset of 16-byte chunk c of row r in a swizzled tile of BK-half
 * rows: 128-byte rows XOR the chunk with r % 8, 64-byte rows with
 * (r / 2) % 4 (the 128 B and 64 B swizzle patterns: address bits 4-6 or
 * 4-5 XOR bits 7-9 or 7-8). */
template <int BK> __device__ __forceinline__ int swz(int r, int c) {
  if constexpr (BK == 64)
    return r * 128 + ((c ^ (r & 7)) << 4);
  else
    return r * 64 + ((c ^ ((r >> 1) & 3)) << 4);
}

/* The MN-major operand layout (wgrad's both operands, the B_MN forward's
 * weights): 64-channel blocks of ch_block bytes, each rows of 128 bytes
 * (64 channels) with the 128-byte swizzle. mn_off: the byte offset of
 * 16-byte chunk c (8 channels) of row r; mn_desc_lo: the low descriptor
 * word of a block starting at shared address saddr (start >> 4, leading
 * byte offset = the distance between channel blocks); the high word is
 * wg_desc_hi<64>() (1024 bytes between 8-row groups, 128-byte swizzle). */
__device__ __forceinline__ unsigned mn_off(int c, int r, int ch_block) {
  return (unsigned)((c >> 3) * ch_block + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
__device__ __forceinline__ unsigned mn_desc_lo(unsigned saddr, int ch_block) {
  return ((saddr & 0x3FFFFu) >> 4) | ((unsigned)(ch_block >> 4) << 16);
}

/* The main loop of both wgmma kernels: STAGES - 2 stages of copies in
 * flight, one wgmma group in flight across the barrier, so the stage
 * refilled at iteration it is the one read at it - 2. load(stage, it)
 * issues iteration it's cp.async copies into stage; mma(stage) issues
 * that stage's wgmma k-steps; promote() runs after a full wgmma drain
 * every PROMOTE iterations (0: never, fp16 accumulators). cp.async writes
 * are generic-proxy writes and wgmma reads through the async proxy: every
 * thread fences after its copies landed, before the barrier that
 * publishes the stage. Returns with every wgmma group complete. */
template <int STAGES, int PROMOTE, typename Load, typename Mma,
          typename Promote>
__device__ __forceinline__ void wg_pipeline(int iters, Load &&load, Mma &&mma,
                                            Promote &&promote) {
#pragma unroll
  for (int s = 0; s < STAGES - 2; s++) {
    if (s < iters)
      load(s, s);
    cp_async_commit();
  }
  int stage = 0, ld_stage = STAGES - 2;
  for (int it = 0; it < iters; it++) {
    cp_async_wait<STAGES - 3>();
    fence_proxy_async_smem();
    __syncthreads();
    /* A promotion drains the wgmma groups before this iteration's
     * gathers are issued, not after: measured on the H200 (same machine,
     * bench_tiles), wgrad at C = 256 3.92 -> 3.49 ms, forward 3.90 ->
     * 3.72-3.83; why is not established (docs/perf-notes.md item 35). The
     * MMAs stay after the gathers: issued first they were slower
     * everywhere (item 34). */
    if constexpr (PROMOTE > 0) {
      if (it > 0 && it % PROMOTE == 0) {
        wgmma_wait<0>();
        promote();
      }
    }
    /* Every warpgroup has passed wgmma_wait<1> of it - 1, so the group of
     * it - 2 is done and its stage can be refilled. */
    if (it + STAGES - 2 < iters)
      load(ld_stage, it + STAGES - 2);
    cp_async_commit();
    ld_stage = ld_stage == STAGES - 1 ? 0 : ld_stage + 1;
    mma(stage);
    wgmma_wait<1>();
    stage = stage == STAGES - 1 ? 0 : stage + 1;
  }
  wgmma_wait<0>();
}

/* ---- warp-specialised main loop (WgWsTile, WgGradWsTile) ---------------
 * Why: ncu of the wgmma kernels at C = 256 (docs/perf-notes.md, eighth
 * session) shows it latency-bound: 0.33 instructions issued per cycle per
 * scheduler, 0.45 of 2 warps eligible, the largest stall on global loads.
 * Every warp of wg_pipeline both gathers and issues MMAs, and one
 * block-wide barrier per stage keeps all of them in lock step, so a late index or
 * copy stalls the tensor cores too (item 35's 11% from moving one drain
 * shows how sensitive that is). Here warpgroup 0 only gathers and the two
 * consumer warpgroups only run wgmma:
 *  - full[s] (count LOADERS): every gathering thread arrives through
 *    cp.async.mbarrier.arrive.noinc once its copies into stage s have
 *    landed, so a gatherer never waits on its own copies;
 *  - empty[s] (count 8, one per consumer warp): a consumer warp arrives
 *    once its wgmma group reading stage s has completed (wgmma_wait<1> of
 *    the next stage);
 *  - cp.async writes through the generic proxy and wgmma reads through the
 *    async proxy: every consumer thread fences (fence.proxy.async) after
 *    its wait on full[s] and before the wgmma that reads s.
 * Phases: use u = it / STAGES of stage s completes phase u of full[s]; the
 * gatherer refilling s for use u >= 1 waits for phase u - 1 of empty[s]. */
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}
/* arrives once every cp.async this thread issued before has landed */
__device__ __forceinline__ void mbar_arrive_copies(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                   bar)
               : "memory");
}
/* the current phase of `bar` also waits for `bytes` of bulk copies */
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::
                   "r"(bar),
               "r"(bytes)
               : "memory");
}
/* one bulk copy global -> shared (16-byte aligned, bytes % 16 == 0) that
 * completes its bytes on `bar` */
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void *src,
                                              unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
/* returns once the phase of parity `parity` has completed */
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}

/* setmaxnreg: the gathering warpgroup gives registers back, the MMA
 * warpgroups take them (their .inc waits until the pool has them); each
 * side's code must not merge with the other's afterwards, or ptxas
 * allocates one count for both. */
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* arrives once and adds `bytes` of bulk copies to the current phase */
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar,
                                                      unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::
                   "r"(bar),
               "r"(bytes)
               : "memory");
}

struct NoLoadB {
  __device__ __forceinline__ void operator()(int) const {}
};

/* The warp-specialised main loop, gathering side: the gatherers
 * (warpgroup 0) run load(stage, it) for every iteration and return with
 * their copies landed. full0 / empty0: the shared addresses of the STAGES
 * full and empty barriers, initialised (wg_ws_init) and published by a
 * block barrier before the call. LAG > 0 (WgWsTile::B_LAG): B has its own
 * ring and barriers; load_b(j) loads the B of iteration j = it - LAG at
 * step it, after the wait for the release of it - STAGES that A's refill
 * needs too. */
template <int STAGES, int LAG = 0, typename Load, typename LoadB = NoLoadB>
__device__ __forceinline__ void wg_ws_produce(int iters, unsigned full0,
                                              unsigned empty0, Load &&load,
                                              LoadB &&load_b = LoadB{}) {
  for (int it = 0; it < iters + LAG; it++) {
    const int s = it % STAGES;
    const unsigned use = (unsigned)(it / STAGES);
    if (use > 0)
      mbar_wait(empty0 + 8 * s, (use - 1) & 1);
    if constexpr (LAG > 0) {
      if (it >= LAG) /* first: B is due LAG iterations before this A */
        load_b(it - LAG);
      if (it >= iters)
        continue;
    }
    load(s, it);
    mbar_arrive_copies(full0 + 8 * s);
  }
  cp_async_commit();
  cp_async_wait<0>(); /* nothing in flight when the thread leaves */
}
/* The MMA side: the MMA warpgroups run mma(a stage, b stage) and
 * promote() as wg_pipeline does and return with every wgmma group
 * complete. B_STAGES > 0: B's own ring of full barriers at fullb0 (else
 * the B stage is the A stage, on the same barrier). */
template <int STAGES, int PROMOTE, int B_STAGES = 0, typename Mma,
          typename Promote>
__device__ __forceinline__ void wg_ws_consume(int iters, unsigned full0,
                                              unsigned empty0, Mma &&mma,
                                              Promote &&promote,
                                              unsigned fullb0 = 0) {
  const int lane = threadIdx.x & 31;
  for (int it = 0; it < iters; it++) {
    const int s = it % STAGES;
    int sb = s;
    mbar_wait(full0 + 8 * s, (unsigned)(it / STAGES) & 1);
    if constexpr (B_STAGES > 0) {
      sb = it % B_STAGES;
      mbar_wait(fullb0 + 8 * sb, (unsigned)(it / B_STAGES) & 1);
    }
    fence_proxy_async_smem();
    if constexpr (PROMOTE > 0) {
      if (it > 0 && it % PROMOTE == 0) {
        wgmma_wait<0>();
        promote();
      }
    }
    mma(s, sb);
    wgmma_wait<1>(); /* the group of it - 1 is done: release its stage */
    if (it > 0 && lane == 0)
      mbar_arrive(empty0 + 8 * ((it - 1) % STAGES));
  }
  wgmma_wait<0>();
}
/* Both sides: `producer` threads gather, the others issue the MMAs. */
template <int STAGES, int PROMOTE, typename Load, typename Mma,
          typename Promote>
__device__ __forceinline__ void
wg_ws_pipeline(int iters, bool producer, unsigned full0, unsigned empty0,
               Load &&load, Mma &&mma, Promote &&promote) {
  if (producer) {
    wg_ws_produce<STAGES>(iters, full0, empty0, load);
    return;
  }
  wg_ws_consume<STAGES, PROMOTE>(iters, full0, empty0, mma, promote);
}
/* full[s]: one arrival per gathering thread; empty[s]: one per MMA warp;
 * B's own full barriers (B_STAGES > 0): one arrival, with the bytes */
template <int STAGES, int LOADERS, int THREADS, int B_STAGES = 0>
__device__ __forceinline__ void wg_ws_init(unsigned full0, unsigned empty0,
                                           unsigned fullb0 = 0) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(full0 + 8 * s, LOADERS);
      mbar_init(empty0 + 8 * s, (THREADS - LOADERS) / 32);
    }
    for (int s = 0; s < B_STAGES; s++)
      mbar_init(fullb0 + 8 * s, 1);
  }
}

/* One stage's wgmma k-steps for a forward/dgrad tile: A rows of this
 * warpgroup at descriptor da0 (stage 0), B at db0. B_MN: B is the MN-major
 * layout of wg_fwd_kernel's direct weight loads (64-channel blocks of BK
 * 128-byte rows, 128-byte swizzle whatever BK is), so a k-step of B moves
 * by 16 rows (2048 bytes) instead of 32 bytes along a row. */
template <typename T, typename TL, bool ACC16, bool B_MN = false, typename C>
__device__ __forceinline__ void wg_fwd_mma(C &c, unsigned da0, unsigned db0,
                                           int stage, int b_stage) {
  constexpr uint64_t dhi = (uint64_t)wg_desc_hi<TL::BK>() << 32;
  constexpr uint64_t dhb = B_MN ? (uint64_t)wg_desc_hi<64>() << 32 : dhi;
  constexpr unsigned bstep = B_MN ? 2048 >> 4 : 2;
  const unsigned da = da0 + stage * (TL::A_STAGE >> 4);
  const unsigned db = db0 + b_stage * (TL::B_STAGE >> 4);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < TL::BK / 16; ks++) /* A: 32 bytes per k-step */
    Wgmma<T, ACC16, TL::BN, B_MN ? WG_B_MN : WG_K>::run(
        c, dhi | (da + 2 * ks), dhb | (db + bstep * ks));
  wgmma_commit();
}

/* Epilogue of a forward/dgrad tile: rows 16 wq + g (+8) of warpgroup
 * mw's 64, every 8-column block j; each (row < n_dst, col < nb) written
 * once. */
template <typename T, typename TL, bool ACC16, typename Acc>
__device__ __forceinline__ void
wg_fwd_store(const FwdArgs &args, const TileOffsets<TL::BM> &tile, int n0,
             int rows, int mw, int wq, int lane, Acc &acc) {
  const int nb = args.nb;
  T *out = reinterpret_cast<T *>(args.out);
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int j = 0; j < TL::BN / 8; j++) {
    const int col = n0 + j * 8 + t4 * 2;
    if (col >= nb)
      continue;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = mw * 64 + wq * 16 + g + h * 8;
      if (r >= rows)
        continue;
      T *p = out + (int64_t)tile.rows[r] * nb + col;
      if constexpr (ACC16)
        Store2<T>::h16(p, acc.c[2 * j + h]);
      else
        Store2<T>::f32(p, acc.value(4 * j + 2 * h),
                       acc.value(4 * j + 2 * h + 1));
    }
  }
}

/* Epilogue through shared memory (the warp-specialised 128 x 256 tiles):
 * each warp writes its 16 rows' fragments into `stg` (rows of BN + 8
 * halves: a warp's 4-byte writes hit 32 banks), then copies each row out
 * with 16-byte stores, a whole 512-byte row per warp instruction. Why:
 * wg_fwd_store's 4-byte stores put 8 rows' 16-byte pieces in every warp
 * store, and a probe of tile 7 at C = 256 with no stages at all -- only
 * each tile's prologue and these stores -- ran 0.49 ms, 0.25 ms with this
 * epilogue (docs/perf-notes.md items 45, 46). Needs nb % 8 == 0 and a
 * 16-byte-aligned output (the caller checks), and `stg` free: every wgmma
 * of the block done. */
template <typename T, typename TL, bool ACC16, typename Acc>
__device__ __forceinline__ void
wg_fwd_store_staged(const FwdArgs &args, const TileOffsets<TL::BM> &tile,
                    int n0, int rows, int mw, int wq, int lane, Acc &acc,
                    T *stg) {
  constexpr int PITCH = TL::BN + 8;
  static_assert(TL::BM * PITCH * (int)sizeof(T) <=
                    TL::A_STAGES * TL::A_STAGE + TL::STAGES * TL::B_STAGE,
                "the staged tile fits in the stage buffers");
  static_assert(TL::BN % 256 == 0, "a warp's 32 lanes copy 256 columns");
  const int g = lane >> 2, t4 = lane & 3, r0 = mw * 64 + wq * 16;
#pragma unroll
  for (int j = 0; j < TL::BN / 8; j++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      T *p = stg + (r0 + g + h * 8) * PITCH + j * 8 + t4 * 2;
      if constexpr (ACC16)
        Store2<T>::h16(p, acc.c[2 * j + h]);
      else
        Store2<T>::f32(p, acc.value(4 * j + 2 * h),
                       acc.value(4 * j + 2 * h + 1));
    }
  __syncwarp(); /* the warp reads back only the rows it wrote */
  const int nb = args.nb;
  T *out = reinterpret_cast<T *>(args.out);
  for (int rr = 0; rr < 16; rr++) {
    const int r = r0 + rr;
    if (r >= rows)
      break;
    const int64_t row = tile.rows[r];
#pragma unroll
    for (int cc = lane * 8; cc < TL::BN; cc += 256)
      if (n0 + cc < nb)
        *reinterpret_cast<uint4 *>(out + row * nb + n0 + cc) =
            *reinterpret_cast<const uint4 *>(stg + r * PITCH + cc);
  }
}

/* Forward / dgrad tile on wgmma (WgTile: every thread gathers and issues
 * MMAs, wg_pipeline). args.w is K-major: B[kk][n] = W[k][n][kk]
 * ([kvol][nb][ka]); with B_MN (the forward, fp32 accumulators, BN a
 * multiple of 64) it is the weight as stored, B[kk][n] = W[k][kk][n]
 * ([kvol][ka][nb]), read MN-major: no transposed copy, and no launch to
 * make one before the tile (host time per call, docs/perf-notes.md item
 * 84). */
template <typename T, typename TL, bool ACC16, bool B_MN = false>
__global__ void __launch_bounds__(TL::THREADS, TL::MIN_BLOCKS)
    wg_fwd_kernel(const FwdArgs args) {
#ifdef VC_MG_SM90_BODY
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ TileOffsets<TL::BM> tile;
  const unsigned raw = smem_addr(smem_raw);
  unsigned char *const sA = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  unsigned char *const sB = sA + TL::STAGES * TL::A_STAGE;
  float *const s_total =
      reinterpret_cast<float *>(sB + TL::STAGES * TL::B_STAGE);

  const T *A = reinterpret_cast<const T *>(args.a);
  const T *W = reinterpret_cast<const T *>(args.w);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3; /* warpgroup, warp in it */
  const int kvol = args.kvol, ka = args.ka, nb = args.nb;
  const int64_t wsk = (int64_t)ka * nb;
  const TileSpan span = begin_tile<TL>(args, tile);
  const int n0 = span.n0, rows = span.rows, nchunk = span.nchunk,
            iters = span.iters;

  constexpr int AV = TL::BK / 8; /* 16-byte vectors per row */
  constexpr int AVPT = TL::BM * AV / TL::THREADS;
  constexpr int BVPT = TL::BN * AV / TL::THREADS;
  static_assert(TL::BM * AV % TL::THREADS == 0 &&
                    TL::BN * AV % TL::THREADS == 0,
                "every thread copies whole vectors of each stage");
  /* B_MN: a stage's B is BK rows (kk) of BN channels; vector v = tid + j
   * THREADS is chunk v % BV of row v / BV, so a thread's chunk is fixed and
   * its rows step by BR, a multiple of 8: one swizzle for all of them */
  constexpr int BV = TL::BN / 8, BR = TL::THREADS / BV;
  constexpr int CH_BLOCK = TL::BK * 128; /* 64 channels x BK rows */
  static_assert(!B_MN || (TL::BN % 64 == 0 && TL::THREADS % BV == 0 &&
                          BR % 8 == 0 && !ACC16),
                "B_MN: 64-channel blocks, whole swizzle groups, fp32 sums");
  RowGather<AVPT> gather;
  gather.template init<TL::THREADS, AV>(tid, rows, tile.rows, kvol);
  gather.fetch(args.nbr, tile, 0);
  /* The load path is most of the instructions a warp issues per stage
   * (ncu: ~200 per warp per stage before this layout), so everything that
   * does not change per stage is computed once: vector v = tid + j *
   * THREADS is chunk cv = v % AV of row v / AV (A: tile row, B: output
   * channel) in every stage; a B vector's source moves by a block-uniform
   * offset (offset k, chunk); an A vector's source row changes once per
   * active offset. */
  const int cv = tid % AV;
  unsigned a_soff[AVPT], b_soff[BVPT];
  const T *b_src[BVPT];
  bool b_ok[BVPT];
#pragma unroll
  for (int j = 0; j < AVPT; j++)
    a_soff[j] = swz<TL::BK>((tid + j * TL::THREADS) / AV, cv);
  int b_row[BVPT]; /* B_MN: the reduction row of each vector */
#pragma unroll
  for (int j = 0; j < BVPT; j++) {
    if constexpr (B_MN) {
      const int cb = tid % BV, r = tid / BV + j * BR;
      b_soff[j] = mn_off(cb, r, CH_BLOCK);
      b_ok[j] = n0 + cb * 8 < nb;
      b_row[j] = r;
      b_src[j] = W + (b_ok[j] ? (int64_t)r * nb + n0 + cb * 8 : 0);
    } else {
      const int n = (tid + j * TL::THREADS) / AV;
      b_soff[j] = swz<TL::BK>(n, cv);
      b_ok[j] = n0 + n < nb;
      b_row[j] = 0;
      b_src[j] = W + (b_ok[j] ? (n0 + n) * ka + cv * 8 : 0);
    }
  }
  const T *a_src[AVPT];
  bool a_ok[AVPT];
  const unsigned sa_base = smem_addr(sA), sb_base = smem_addr(sB);

  int ld_ai = 0, ld_chunk = 0;
  auto load_stage = [&](int stage, int) { /* stages come in order */
    if (ld_chunk == 0) { /* a new offset: its gathered rows */
#pragma unroll
      for (int j = 0; j < AVPT; j++) {
        const int src = gather.src[j];
        a_ok[j] = src >= 0;
        a_src[j] = A + (a_ok[j] ? (int64_t)src * ka + cv * 8 : 0);
      }
    }
    const int c0 = ld_chunk * TL::BK;
    const bool col_ok = c0 + cv * 8 < ka;
    /* B's source: offset k's slab plus the chunk's first row (B_MN: rows
     * of nb channels) or column (K-major) */
    const int64_t b_off =
        (int64_t)tile.act[ld_ai] * wsk + (B_MN ? (int64_t)c0 * nb : c0);
    const unsigned a_dst = sa_base + stage * TL::A_STAGE;
#pragma unroll
    for (int j = 0; j < AVPT; j++)
      cp_async16_s(a_dst + a_soff[j], a_src[j] + c0, a_ok[j] && col_ok);
    const unsigned b_dst = sb_base + stage * TL::B_STAGE;
#pragma unroll
    for (int j = 0; j < BVPT; j++)
      cp_async16_s(b_dst + b_soff[j], b_src[j] + b_off,
                   b_ok[j] && (B_MN ? c0 + b_row[j] < ka : col_ok));
    if (++ld_chunk == nchunk) {
      ld_chunk = 0;
      gather.fetch(args.nbr, tile, ++ld_ai); /* one offset ahead */
    }
  };

  WgAcc<ACC16, TL::BN, TL::SMEM_TOTAL> acc;
  acc.zero(s_total + tid);
  constexpr int promote_iters = PROMOTE_CHANNELS / TL::BK;
  /* Descriptor words: the low one (start address >> 4, leading byte
   * offset 1) moves by stage and k-step and stays below 2^14 (shared
   * addresses < 256 KB), so plain 32-bit adds build it; the high one is
   * constant. */
  const unsigned da0 = wg_desc_lo(sa_base + wg * 64 * TL::ROW_BYTES);
  const unsigned db0 =
      B_MN ? mn_desc_lo(sb_base, CH_BLOCK) : wg_desc_lo(sb_base);
  wg_pipeline<TL::STAGES, ACC16 ? 0 : promote_iters>(
      iters, load_stage,
      [&](int stage) {
        wg_fwd_mma<T, TL, ACC16, B_MN>(acc.c, da0, db0, stage, stage);
      },
      [&] { acc.promote(); });
  acc.pin_all();
  cp_async_wait<0>();

  wg_fwd_store<T, TL, ACC16>(args, tile, n0, rows, wg, wq, lane, acc);
#endif
}

/* The gathers of a warp-specialised forward/dgrad tile (WgWsTile), in
 * stage order: LOADERS threads (`lt` 0 .. LOADERS-1) copy the BM gathered
 * input rows of BK channels per stage, vector v = lt + j * LOADERS being
 * chunk cv = v % AV of tile row v / AV in every stage (so the shared
 * offsets are computed once and an A source changes once per offset), and
 * thread 0 moves the stage's B tile with one bulk copy from the stage
 * images (wg_stage_image_kernel; args.w = images [kvol][n tiles][chunks]),
 * completing on the stage's full barrier. Why bulk B: ncu source sampling
 * (ninth session, C = 256) found the gathering warpgroup busy ~80% of the
 * time, one warp per scheduler issuing ~180 instructions per stage, half
 * of them the weight rows' copies and addresses. */
template <typename T, typename TL> struct WgFwdGather {
  static constexpr int AV = TL::BK / 8; /* 16-byte vectors per row */
  static constexpr int AVPT = TL::BM * AV / TL::LOADERS;
  static_assert(TL::BM * AV % TL::LOADERS == 0,
                "every thread copies whole vectors of each stage");
  static constexpr int64_t IMG = TL::BN * TL::BK; /* elements per image */
  RowGather<AVPT> gather;
  const T *A;
  const T *a_src[AVPT];
  unsigned a_soff[AVPT];
  bool a_ok[AVPT];
  int cv, ld_ai, ld_chunk;
  const T *b_img; /* this column tile's first image */
  int64_t img_k;  /* elements between two offsets' images */
  int lb_ai, lb_chunk; /* the next B stage of load_b (B_LAG > 0) */

  __device__ __forceinline__ void init(const FwdArgs &args,
                                       const TileOffsets<TL::BM> &tile,
                                       const TileSpan &span, int lt) {
    A = reinterpret_cast<const T *>(args.a);
    gather.template init<TL::LOADERS, AV>(lt, span.rows, tile.rows,
                                          args.kvol);
    gather.fetch(args.nbr, tile, 0);
    cv = lt % AV;
#pragma unroll
    for (int j = 0; j < AVPT; j++)
      a_soff[j] = swz<TL::BK>((lt + j * TL::LOADERS) / AV, cv);
    const int ntiles = (args.nb + TL::BN - 1) / TL::BN;
    img_k = (int64_t)ntiles * span.nchunk * IMG;
    b_img = reinterpret_cast<const T *>(args.w) +
            (int64_t)(span.n0 / TL::BN) * span.nchunk * IMG;
    ld_ai = 0;
    ld_chunk = 0;
    lb_ai = 0;
    lb_chunk = 0;
  }
  /* the weight image of the stage of needed offset ai, chunk ch */
  __device__ __forceinline__ const T *b_src(const TileOffsets<TL::BM> &tile,
                                            int ai, int ch) const {
    return b_img + tile.act[ai] * img_k + ch * IMG;
  }
  /* the next stage's copies into a_stage / b_stage (shared addresses),
   * B completing on `full`; WITH_B false: A only (B_LAG > 0: load_b) */
  template <bool WITH_B = true>
  __device__ __forceinline__ void load(const FwdArgs &args,
                                       const TileOffsets<TL::BM> &tile,
                                       int nchunk, unsigned a_stage,
                                       unsigned b_stage, unsigned full,
                                       int lt) {
    const int ka = args.ka;
    if (ld_chunk == 0) { /* a new offset: its gathered rows */
#pragma unroll
      for (int j = 0; j < AVPT; j++) {
        const int src = gather.src[j];
        a_ok[j] = src >= 0;
        a_src[j] = A + (a_ok[j] ? (int64_t)src * ka + cv * 8 : 0);
      }
      /* the next offset's indices now, nchunk stages ahead of their use
       * (ncu: the gatherers waited on them 10% of the time when they were
       * fetched one stage ahead, as wg_fwd_kernel does) */
      gather.fetch(args.nbr, tile, ld_ai + 1);
    }
    if (WITH_B && lt == 0) {
      mbar_expect_tx(full, TL::B_STAGE);
      bulk_copy_g2s(b_stage, b_src(tile, ld_ai, ld_chunk), TL::B_STAGE,
                    full);
    }
    const int c0 = ld_chunk * TL::BK;
    const bool col_ok = c0 + cv * 8 < ka;
#pragma unroll
    for (int j = 0; j < AVPT; j++)
      cp_async16_s(a_stage + a_soff[j], a_src[j] + c0, a_ok[j] && col_ok);
    if (++ld_chunk == nchunk) {
      ld_chunk = 0;
      ld_ai++;
    }
  }
  /* B's own ring (B_LAG > 0; thread 0 only): the next B stage into
   * b_stage, completing on its barrier `fullb` */
  __device__ __forceinline__ void load_b(const TileOffsets<TL::BM> &tile,
                                         int nchunk, unsigned b_stage,
                                         unsigned fullb) {
    mbar_arrive_expect_tx(fullb, TL::B_STAGE);
    bulk_copy_g2s(b_stage, b_src(tile, lb_ai, lb_chunk), TL::B_STAGE, fullb);
    if (++lb_chunk == nchunk) {
      lb_chunk = 0;
      lb_ai++;
    }
  }
};

/* Warp-specialised forward / dgrad tile (WgWsTile): warpgroup 0 gathers
 * (WgFwdGather), MMA warpgroup mw = 0, 1 (warpgroups 1, 2) owns tile rows
 * 64 mw .. 64 mw + 63; stages handed over by wg_ws_pipeline. */
template <typename T, typename TL, bool ACC16>
__global__ void __launch_bounds__(TL::THREADS, TL::MIN_BLOCKS)
    wg_fwd_ws_kernel(const FwdArgs args) {
#ifdef VC_MG_SM90_BODY
  static_assert(TL::WS && !TL::SMEM_TOTAL, "WgWsTile only");
  constexpr bool SPLIT = TL::HALF_SUMS && !ACC16; /* WgAccSplit */
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ TileOffsets<TL::BM> tile;
  constexpr int SA = TL::A_STAGES, SB = TL::STAGES;
  constexpr int SBB = TL::B_LAG > 0 ? SB : 0; /* B's own full barriers */
  __shared__ __align__(8) uint64_t bars[2 * SA + SBB];
  const unsigned raw = smem_addr(smem_raw);
  unsigned char *const sA = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  unsigned char *const sB = sA + SA * TL::A_STAGE;
  float4 *const s_sums = reinterpret_cast<float4 *>(sB + SB * TL::B_STAGE);
  const unsigned sa_base = smem_addr(sA), sb_base = smem_addr(sB);
  const unsigned full0 = smem_addr(bars), empty0 = full0 + 8 * SA,
                 fullb0 = empty0 + 8 * SA;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3; /* warpgroup, warp in it */
  const bool producer = wg == 0;
  const int mw = wg - 1; /* MMA warpgroup */
  wg_ws_init<SA, TL::LOADERS, TL::THREADS, SBB>(full0, empty0, fullb0);
  /* ends with a block barrier, which also publishes the mbarriers */
  const TileSpan span = begin_tile<TL>(args, tile);
  const int nchunk = span.nchunk, iters = span.iters;
  /* HALF_SKIP: the offsets of each 64-row half (all of them without row
   * masks), OR-reduced per warp; warps 0-1 read rows 0-63, 2-3 rows
   * 64-127 */
  __shared__ unsigned half_mask[2];
  unsigned my_half = ~0u;
  if constexpr (TL::HALF_SKIP) {
    if (tid < 2)
      half_mask[tid] = args.row_mask ? 0u : ~0u;
    __syncthreads();
    if (args.row_mask && tid < TL::BM) {
      const unsigned m = __reduce_or_sync(
          0xffffffffu,
          tid < span.rows ? __ldg(args.row_mask + tile.rows[tid]) : 0u);
      if (lane == 0)
        atomicOr(&half_mask[tid / 64], m);
    }
    __syncthreads();
    my_half = half_mask[mw < 0 ? 0 : mw];
  }

  /* Past the last block barrier the two sides part for good: ptxas
   * allocates registers per side only when their code does not merge
   * again (setmaxnreg: the gatherers hand registers to the MMA
   * warpgroups, whose setmaxnreg.inc waits until the pool has them). */
  if (producer) {
    if constexpr (TL::MMA_REGS > 0)
      setmaxnreg_dec<TL::GATHER_REGS>();
    WgFwdGather<T, TL> gather;
    gather.init(args, tile, span, tid);
    if constexpr (TL::B_LAG > 0) {
      wg_ws_produce<SA, TL::B_LAG>(
          iters, full0, empty0,
          [&](int stage, int) {
            gather.template load<false>(args, tile, nchunk,
                                        sa_base + stage * TL::A_STAGE, 0u,
                                        0u, tid);
          },
          [&](int j) {
            if (tid == 0)
              gather.load_b(tile, nchunk, sb_base + (j % SB) * TL::B_STAGE,
                            fullb0 + 8 * (j % SB));
          });
    } else {
      wg_ws_produce<SA>(iters, full0, empty0, [&](int stage, int) {
        gather.load(args, tile, nchunk, sa_base + stage * TL::A_STAGE,
                    sb_base + stage * TL::B_STAGE, full0 + 8 * stage, tid);
      });
    }
    return;
  }
  if constexpr (TL::MMA_REGS > 0)
    setmaxnreg_inc<TL::MMA_REGS>();
  typename std::conditional<SPLIT, WgAccSplit<TL::BN>,
                            WgAcc<ACC16, TL::BN, false>>::type acc;
  if constexpr (SPLIT) /* the sums are the MMA threads' own */
    acc.zero(s_sums + (tid - 128));
  else
    acc.zero(nullptr);
  constexpr int promote_iters = ACC16 ? 0 : PROMOTE_CHANNELS / TL::BK;
  const unsigned da0 = wg_desc_lo(sa_base + mw * 64 * TL::ROW_BYTES);
  const unsigned db0 = wg_desc_lo(sb_base);
  int mma_ai = 0, mma_chunk = 0; /* the offset and chunk of the stage */
  wg_ws_consume<SA, promote_iters, SBB>(
      iters, full0, empty0,
      [&](int stage, int b_stage) {
        if constexpr (TL::HALF_SKIP) {
          const int k = tile.act[mma_ai];
          const bool need = k >= 32 || ((my_half >> k) & 1u);
          if (++mma_chunk == nchunk) {
            mma_chunk = 0;
            mma_ai++;
          }
          if (!need) {
            /* No group for this stage: drain the earlier ones, so the
             * pipeline's wgmma_wait<1> and release of stage it - 1 stay
             * right whether or not an empty commit would count as a
             * group. */
            wgmma_wait<0>();
            return;
          }
        }
        wg_fwd_mma<T, TL, ACC16>(acc.c, da0, db0, stage, b_stage);
      },
      [&] { acc.promote(); }, fullb0);
  acc.pin_all();
  if constexpr (TL::BN == 256) {
    if (args.nb % 8 == 0 && ((uintptr_t)args.out & 15) == 0) {
      /* both MMA warpgroups' wgmma have finished reading the stages, and
       * the gatherers' copies into them have all landed (every stage
       * consumed) */
      asm volatile("bar.sync 2, 256;\n" ::: "memory"); /* the 8 MMA warps */
      wg_fwd_store_staged<T, TL, ACC16>(args, tile, span.n0, span.rows, mw,
                                        wq, lane, acc,
                                        reinterpret_cast<T *>(sA));
      return;
    }
  }
  wg_fwd_store<T, TL, ACC16>(args, tile, span.n0, span.rows, mw, wq, lane,
                             acc);
#endif
}

/* ---- wgrad on wgmma ------------------------------------------------------
 * dW[k] (cin x cout) = sum over the pairs p of offset k of X[in(p)]^T
 * dY[out(p)]: M = cin, N = cout, the reduction runs over pairs. A stage
 * holds BK gathered pairs: X rows (cin contiguous) for A and dY rows (cout
 * contiguous) for B, so both operands are MN-major -- the layout wgmma
 * reads with its transpose immediates set (f16/bf16 only), which the
 * mma.sync wgrad_kernel reaches through ldmatrix.trans instead. Why a
 * wgmma wgrad: wgrad_kernel runs at ~180 TFLOP/s at C = 256 (5.3 ms on
 * workload C), latency-bound on the ldmatrix -> mma chain like the mma.sync
 * forward tiles were before wgmma_fwd (docs/perf-notes.md items 11, 27).
 *
 * Shared-memory layout of one operand of a stage (PTX "canonical layouts",
 * MN-major, 128-byte swizzle): channel blocks of 64 (128 bytes), each a
 * [BK pairs][128 B] region of BK * 128 bytes; 16-byte chunk c of pair row r
 * at chunk c ^ (r % 8). Descriptor: leading byte offset = the distance
 * between 64-channel blocks (BK * 128), stride byte offset = between groups
 * of 8 pair rows (1024); one k16 step moves 16 rows = 2048 bytes.
 * Warpgroup wg owns cin rows 64 wg .. 64 wg + 63 of the tile (one channel
 * block of A) and all BN columns. Same pipeline as wg_fwd_kernel; pair
 * indices two iterations ahead as in wgrad_kernel; fp32 promotion every
 * WGRAD_PROMOTE_ITERS x 32 pairs as there. */
template <int BN_, int STAGES_, int MIN_BLOCKS_ = 1> struct WgGradTile {
  static constexpr int BM = 128, BN = BN_, BK = 64, STAGES = STAGES_;
  static constexpr int A_STAGES = STAGES; /* as WgTile */
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_, THREADS = 256;
  /* threads that gather (all of them here; see WgGradWsTile) */
  static constexpr int LOADERS = THREADS;
  static constexpr int CH_BLOCK = BK * 128; /* bytes of 64 channels x BK */
  static constexpr int A_STAGE = BM / 64 * CH_BLOCK;
  static constexpr int B_STAGE = BN / 64 * CH_BLOCK;
  static constexpr int TOTAL_BYTES = 0; /* for wg_smem_bytes */
  static constexpr bool WS = false, HALF_SUMS = false;
  static constexpr int GATHER_REGS = 0, MMA_REGS = 0;
  static_assert(BN == 64 || BN == 128 || BN == 256,
                "MN-major wgmma wrappers: N = 64, 128, 256");
  static_assert(STAGES >= 3, "as WgTile");
};

/* Warp-specialised wgrad tile (wg_ws_pipeline): warpgroup 0 only gathers,
 * warpgroups 1-2 only issue wgmma; stages are handed over through
 * mbarriers instead of one block-wide barrier per stage. Same shapes and
 * shared-memory layout as WgGradTile. HALF_SUMS (BN = 256): the fp32 sums
 * as the forward's WgWsTile keeps them (WgAccSplit: half in registers,
 * half in 64 KB of shared memory, setmaxnreg moving registers from the
 * gatherers to the MMA warpgroups). */
template <int BN_, int STAGES_, bool HALF_SUMS_ = false>
struct WgGradWsTile : WgGradTile<BN_, STAGES_> {
  static constexpr int THREADS = 384, LOADERS = 128;
  static constexpr bool WS = true, HALF_SUMS = HALF_SUMS_;
  static constexpr int TOTAL_BYTES = HALF_SUMS ? 128 * BN_ * 2 : 0;
  /* ptxas -v: no spills at 72 / 216 (and 64 / 216); 88 / 208 spilled 16
   * bytes, 104 / 200 96 */
  static constexpr int GATHER_REGS = HALF_SUMS ? 72 : 0;
  static constexpr int MMA_REGS = HALF_SUMS ? 216 : 0;
  static_assert(STAGES_ >= 3, "a stage computing, one wgmma group in "
                              "flight, at least one being gathered");
  static_assert(HALF_SUMS == (BN_ == 256),
                "256 columns need the split sums, fewer do not");
  static_assert(!HALF_SUMS || setmaxnreg_fits(GATHER_REGS, MMA_REGS),
                "setmaxnreg: the warpgroups share the block's registers");
};

/* The gathers of one wgrad stage, shared by both wgrad kernels: LOADERS
 * threads (0 .. LOADERS-1, `lt`) copy BK pair rows of X (cin channels
 * m0..m0+BM) into A and of dY (cout channels n0..n0+BN) into B. Vector
 * v = lt + j * LOADERS of an operand is chunk v % V (8 channels) of pair
 * row v / V: a thread's chunk is fixed, its rows step by LOADERS / V, a
 * multiple of 8, so the swizzle of every row it writes is the same and
 * its shared offsets are one base plus constants. Pair -> row indices are
 * loaded two iterations ahead (see wgrad_kernel): a_src/b_src for the next
 * stage to issue, a_nx/b_nx for the one after. */
template <typename T, typename TL> struct WgradGather {
  static constexpr int AV = TL::BM / 8, BV = TL::BN / 8;
  static constexpr int AVPT = TL::BK * AV / TL::LOADERS;
  static constexpr int BVPT = TL::BK * BV / TL::LOADERS;
  static constexpr int RA = TL::LOADERS / AV, RB = TL::LOADERS / BV;
  static_assert(TL::BK * AV % TL::LOADERS == 0 &&
                    TL::BK * BV % TL::LOADERS == 0 &&
                    (RA % 8 == 0 || RA == 4) && (RB % 8 == 0 || RB == 4),
                "whole vectors per thread, row steps keep the swizzle or "
                "flip its bit 2");
  /* shared offset of a thread's j-th row of an operand whose rows step by
   * R (base: its first row's). R = 4 (256 columns: 32 vectors a row, 128
   * threads): row r + 4 j, r < 4, has swizzle (c ^ r) ^ 4 for odd j, so
   * the offset's chunk bit 2 (byte bit 6) flips. */
  template <int R>
  static __device__ __forceinline__ unsigned row_off(unsigned base, int j) {
    if constexpr (R % 8 == 0)
      return base + j * R * 128;
    else
      return (base ^ ((unsigned)(j & 1) << 6)) + j * R * 128;
  }
  /* SHFL (the 128 x 256 tile W3, whose gatherers have 72 registers): each
   * warp's threads need 16 A rows (two row groups of 16 lanes, 8 rows
   * each) and 16 B rows (one group, 16 rows) of a stage; lane l loads the
   * pair index of one of those 32 rows, and each copy takes its row's
   * index by a shuffle, instead of every thread holding 24 indices twice
   * over (48 registers: ptxas spilled ~200 bytes). */
  static constexpr bool SHFL = TL::HALF_SUMS;
  static_assert(!SHFL || (AV == 16 && BV == 32 && AVPT == 8 && BVPT == 16),
                "SHFL: 2 x 8 A rows and 16 B rows per warp, one per lane");
  const T *X, *DY, *xa, *dyb;
  const int *in_rows, *out_rows;
  int64_t p_begin, p_end;
  int cin, cout, ra, rb;
  unsigned a_soff, b_soff;
  bool a_col, b_col;
  int a_src[SHFL ? 1 : AVPT], b_src[SHFL ? 1 : BVPT], a_nx[SHFL ? 1 : AVPT],
      b_nx[SHFL ? 1 : BVPT];
  int lane_src, lane_nx; /* SHFL: the index this lane holds, stage it, it+1 */
  const int *lane_rows;
  int lane_row;

  /* SHFL: lane l < 16 holds A row (ra of lanes 0-15) + (l & 1) + RA (l/2)
   * of the warp, lane l >= 16 B row rb + RB (l - 16) */
  __device__ __forceinline__ int fetch_lane(int it) const {
    const int64_t p = p_begin + (int64_t)it * TL::BK + lane_row;
    return p < p_end ? __ldg(lane_rows + p) : -1;
  }
  __device__ __forceinline__ void fetch_rows(int it, int (&a)[SHFL ? 1 : AVPT],
                                             int (&b)[SHFL ? 1 : BVPT]) {
    const int64_t p0 = p_begin + (int64_t)it * TL::BK;
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int64_t p = p0 + ra + j * RA;
      a[j] = p < p_end ? __ldg(in_rows + p) : -1;
    }
#pragma unroll
    for (int j = 0; j < BVPT; j++) {
      const int64_t p = p0 + rb + j * RB;
      b[j] = p < p_end ? __ldg(out_rows + p) : -1;
    }
  }
  __device__ __forceinline__ void init(const WgradArgs &args,
                                       const WgradSlice &sl, int lt, int m0,
                                       int n0) {
    X = reinterpret_cast<const T *>(args.x);
    DY = reinterpret_cast<const T *>(args.dy);
    in_rows = args.in_rows;
    out_rows = args.out_rows;
    p_begin = sl.p_begin;
    p_end = sl.p_end;
    cin = args.cin;
    cout = args.cout;
    const int ca = lt % AV, cb = lt % BV;
    ra = lt / AV;
    rb = lt / BV;
    a_soff = mn_off(ca, ra, TL::CH_BLOCK);
    b_soff = mn_off(cb, rb, TL::CH_BLOCK);
    a_col = m0 + ca * 8 < cin;
    b_col = n0 + cb * 8 < cout;
    xa = X + (a_col ? m0 + ca * 8 : 0);
    dyb = DY + (b_col ? n0 + cb * 8 : 0);
    if constexpr (SHFL) {
      const int l = lt & 31, w = lt >> 5;
      lane_rows = l < 16 ? in_rows : out_rows;
      lane_row = l < 16 ? 2 * w + (l & 1) + RA * (l >> 1) : w + RB * (l - 16);
      lane_src = fetch_lane(0);
      lane_nx = fetch_lane(1);
    } else {
      fetch_rows(0, a_src, b_src);
      fetch_rows(1, a_nx, b_nx);
    }
  }
  /* issues iteration it's copies into the stage at a_stage / b_stage
   * (shared addresses), then loads the indices of it + 2 */
  __device__ __forceinline__ void load(unsigned a_stage, unsigned b_stage,
                                       int it) {
    const unsigned a_dst = a_stage + a_soff;
    const int hi = (threadIdx.x >> 4) & 1; /* SHFL: this lane's A group */
#pragma unroll
    for (int j = 0; j < AVPT; j++) {
      const int src = SHFL ? __shfl_sync(0xffffffffu, lane_src, 2 * j + hi)
                           : a_src[SHFL ? 0 : j];
      const bool ok = src >= 0 && a_col;
      cp_async16_s(row_off<RA>(a_dst, j), ok ? xa + (int64_t)src * cin : X,
                   ok);
    }
    const unsigned b_dst = b_stage + b_soff;
#pragma unroll
    for (int j = 0; j < BVPT; j++) {
      const int src = SHFL ? __shfl_sync(0xffffffffu, lane_src, 16 + j)
                           : b_src[SHFL ? 0 : j];
      const bool ok = src >= 0 && b_col;
      cp_async16_s(row_off<RB>(b_dst, j), ok ? dyb + (int64_t)src * cout : DY,
                   ok);
    }
    if constexpr (SHFL) {
      lane_src = lane_nx;
      lane_nx = fetch_lane(it + 2);
    } else {
#pragma unroll
      for (int j = 0; j < AVPT; j++)
        a_src[j] = a_nx[j];
#pragma unroll
      for (int j = 0; j < BVPT; j++)
        b_src[j] = b_nx[j];
      fetch_rows(it + 2, a_nx, b_nx);
    }
  }
};

/* The wgmma k-steps of one wgrad stage for warpgroup cwg (cin rows
 * 64 cwg .. 64 cwg + 63 of the tile). Descriptor low words: start >> 4,
 * leading byte offset (the distance between 64-channel blocks) >> 4; high
 * word: 1024-byte stride between 8-row groups, 128-byte swizzle (the
 * K-major tiles' high word). */
template <typename T, typename TL> struct WgradMma {
  unsigned da0, db0;
  __device__ __forceinline__ WgradMma(unsigned sa_base, unsigned sb_base,
                                      int cwg) {
    da0 = mn_desc_lo(sa_base + cwg * TL::CH_BLOCK, TL::CH_BLOCK);
    db0 = mn_desc_lo(sb_base, TL::CH_BLOCK);
  }
  template <int R>
  __device__ __forceinline__ void run(float (&c)[R], int stage) const {
    constexpr uint64_t dhi = (uint64_t)wg_desc_hi<64>() << 32;
    const unsigned da = da0 + stage * (TL::A_STAGE >> 4);
    const unsigned db = db0 + stage * (TL::B_STAGE >> 4);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < TL::BK / 16; ks++) /* 16 pair rows: 2048 B */
      Wgmma<T, false, TL::BN, WG_MN>::run(c, dhi | (da + 128 * ks),
                                         dhi | (db + 128 * ks));
    wgmma_commit();
  }
};

/* Writes warpgroup cwg's part of a wgrad tile: cin rows 64 cwg + 16 wq + g
 * (+8), cout columns 8 j + 2 t4 (+1); straight to dW (one split) or to the
 * split's fp32 partials. */
template <typename T, typename TL, typename Acc>
__device__ __forceinline__ void wg_wgrad_store(const WgradArgs &args,
                                               Acc &acc, int cwg, int wq,
                                               int lane, int k, int split,
                                               int m0, int n0) {
  const int g = lane >> 2, t4 = lane & 3;
  const int cin = args.cin, cout = args.cout;
  const int64_t wsk = (int64_t)cin * cout;
#pragma unroll
  for (int j = 0; j < TL::BN / 8; j++) {
    const int col = n0 + j * 8 + t4 * 2;
    if (col >= cout)
      continue;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = m0 + cwg * 64 + wq * 16 + g + h * 8;
      if (row >= cin)
        continue;
      const float a = acc.value(4 * j + 2 * h);
      const float b = acc.value(4 * j + 2 * h + 1);
      const int64_t off = (int64_t)k * wsk + (int64_t)row * cout + col;
      if (args.splits == 1)
        Store2<T>::f32(reinterpret_cast<T *>(args.dw) + off, a, b);
      else
        *reinterpret_cast<float2 *>(args.partial +
                                    (int64_t)split * args.kvol * wsk + off) =
            make_float2(a, b);
    }
  }
}

template <typename T, typename TL>
__global__ void __launch_bounds__(TL::THREADS, TL::MIN_BLOCKS)
    wg_wgrad_kernel(const WgradArgs args) {
#ifdef VC_MG_SM90_BODY
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[TL::WS ? 2 * TL::STAGES : 1];
  /* the swizzle is a function of address bits 4-9: 1024-byte aligned */
  const unsigned sa_base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned sb_base = sa_base + TL::STAGES * TL::A_STAGE;
  const unsigned full0 = smem_addr(bars), empty0 = full0 + 8 * TL::STAGES;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const bool producer = TL::WS && wg == 0;
  const int mw = TL::WS ? wg - 1 : wg; /* MMA warpgroup: cin rows 64 mw.. */
  const int n0 = blockIdx.x * TL::BN, m0 = blockIdx.y * TL::BM;
  const int k = blockIdx.z / args.splits, split = blockIdx.z % args.splits;
  const WgradSlice sl = wgrad_slice<TL::BK>(args, k, split);
  if constexpr (TL::WS) {
    wg_ws_init<TL::STAGES, TL::LOADERS, TL::THREADS>(full0, empty0);
    __syncthreads();
  }

  WgradGather<T, TL> gather;
  auto load_stage = [&](int stage, int it) {
    gather.load(sa_base + stage * TL::A_STAGE, sb_base + stage * TL::B_STAGE,
                it);
  };
  constexpr int promote_iters = WGRAD_PROMOTE_ITERS * 32 / TL::BK;
  static_assert(promote_iters >= 1, "promotion every 256 pairs");
  if constexpr (TL::HALF_SUMS) {
    /* as wg_fwd_ws_kernel: the sides part for good here, so that ptxas
     * allocates registers per side, and setmaxnreg moves them */
    if (producer) {
      setmaxnreg_dec<TL::GATHER_REGS>();
      gather.init(args, sl, tid, m0, n0);
      /* VC_WGRAD_RACECHECK_ORDER (a build knob, 0 by default): a
       * cp.async wait_group per stage for compute-sanitizer. With 24
       * copies per thread per stage (72 in flight) racecheck reports every
       * copy as a write-after-write hazard with the same thread's copy of
       * the slot's previous use (W2, 64 in flight, and the forward tiles
       * are clean; with --racecheck-memcpy-async no, 0 hazards). The
       * mbarrier protocol already orders them -- a slot is refilled only
       * after the MMA warps consumed it, so after its copies landed -- and
       * with the wait racecheck is clean, but the wait cost W3 14% on the
       * H200 (2.52 -> 2.86 ms at C = 256, same call), so only the
       * sanitizer build has it (twelfth session, docs/perf-notes.md item
       * 50). */
      wg_ws_produce<TL::STAGES>(sl.iters, full0, empty0,
                                [&](int stage, int it) {
                                  if constexpr (VC_WGRAD_RACECHECK_ORDER)
                                    cp_async_wait<TL::STAGES - 1>();
                                  load_stage(stage, it);
                                  if constexpr (VC_WGRAD_RACECHECK_ORDER)
                                    cp_async_commit();
                                });
      return;
    }
    setmaxnreg_inc<TL::MMA_REGS>();
    float4 *const s_sums = reinterpret_cast<float4 *>(
        smem_raw + (sb_base + TL::STAGES * TL::B_STAGE - smem_addr(smem_raw)));
    WgAccSplit<TL::BN> acc;
    acc.zero(s_sums + (tid - 128)); /* the MMA threads' own sums */
    const WgradMma<T, TL> mma(sa_base, sb_base, mw);
    wg_ws_consume<TL::STAGES, promote_iters>(
        sl.iters, full0, empty0,
        [&](int stage, int) { mma.run(acc.c, stage); },
        [&] { acc.promote(); });
    acc.pin_all();
    wg_wgrad_store<T, TL>(args, acc, mw, wq, lane, k, split, m0, n0);
    return;
  }
  if (!TL::WS || producer)
    gather.init(args, sl, tid, m0, n0);
  WgAcc<false, TL::BN, false> acc;
  acc.zero(nullptr);
  /* Puts the zeros into the accumulator registers here, before the
   * pipeline. Left free, the compiler sank them onto the no-iteration path
   * behind the loop, between its last wgmma and the final wait, and ptxas
   * then fenced every wgmma of the non-warp-specialised tiles alone
   * (C7515; docs/perf-notes.md item 92). */
  acc.pin_all();
  const WgradMma<T, TL> mma(sa_base, sb_base, mw);
  auto run_mma = [&](int stage, int = 0) { mma.run(acc.c, stage); };
  auto promote = [&] { acc.promote(); };
  if constexpr (TL::WS) {
    wg_ws_pipeline<TL::STAGES, promote_iters>(sl.iters, producer, full0,
                                              empty0, load_stage, run_mma,
                                              promote);
    if (producer)
      return;
  } else {
    wg_pipeline<TL::STAGES, promote_iters>(sl.iters, load_stage, run_mma,
                                           promote);
  }
  acc.pin_all();
  cp_async_wait<0>();
  wg_wgrad_store<T, TL>(args, acc, mw, wq, lane, k, split, m0, n0);
#endif
}

} // namespace vc_mask_gemm

#endif
