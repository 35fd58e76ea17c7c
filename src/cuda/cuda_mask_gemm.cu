/* Algorithm `mask_gemm`: tensor-core fused gather-GEMM-scatter for f16 and
 * bf16 (kernels in cuda_mask_gemm.cuh). This file holds the tile table (the
 * stable IDs that the tuner, the cache and `voxconv info --kernels` use),
 * the template instantiations (all in one place) and the registry record.
 */
#include "cuda_mask_gemm_sm90.cuh"
#include "vc_cuda_tc_algos.h"
#include "vc_cuda_util.cuh"

#include <cub/cub.cuh>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace vc_mask_gemm;

namespace {

/* ---- tile table --------------------------------------------------------
 * Forward/dgrad tiles: BM x BN x BK, warp tile WM x WN, stages. Variants of
 * the same block shape with half the accumulators per thread (more warps)
 * let the tuner trade registers for occupancy per problem. */
typedef Tile<64, 64, 32, 32, 32, 3> F0;   /* 4 warps, 32 f32 acc/thread */
typedef Tile<64, 32, 32, 32, 16, 3> F1;   /* 4 warps, 16 acc */
typedef Tile<128, 64, 32, 32, 32, 3> F2;  /* 8 warps, 32 acc */
typedef Tile<128, 128, 32, 64, 32, 3> F3; /* 8 warps, 64 acc */
typedef Tile<128, 128, 32, 32, 32, 3> F4; /* 16 warps, 32 acc */
typedef Tile<64, 16, 16, 16, 16, 4> F5;   /* small channels, 8 acc */
typedef Tile<128, 32, 32, 32, 16, 3> F6;  /* 8 warps, 16 acc */
/* BK = 64, deeper pipelines: half the barriers per mma step (the BK = 32
 * tiles are latency-bound at C <= 64). */
typedef Tile<64, 64, 64, 32, 32, 4> F7;   /* 4 warps, 32 acc, 4 stages */
typedef Tile<128, 64, 64, 32, 32, 4> F8;  /* 8 warps, 32 acc, 4 stages */
typedef Tile<128, 128, 64, 32, 32, 3> F9; /* 16 warps, 32 acc */
#define VC_MG_FWD_TILES 10

/* Hopper wgmma tiles (algorithm mask_gemm_wgmma, forward/dgrad): 128 rows
 * (2 warpgroups) x BN x BK, stages. Tile 1 (3 stages, 97 KB) fits twice on
 * an SM with fp16 accumulators (fp32 ones keep a second register set for
 * the promotion, see WgAcc); tile 2 (BN = 64) always does. Tile 3 is
 * 128 x 256: fp16 accumulators in registers, BK = 64; fp32 accumulators
 * need all 128 registers per thread for the wgmma accumulators, so its fp32
 * sums live in shared memory (128 KB) and the stages are BK = 32 to fit
 * beside them. Tile 4 is 128 x 96 for the 96-, 160- and 224-channel layers
 * of spconv-style networks: 64- or 128-wide tiles pad 96 output channels
 * to 128 (a quarter of the MMAs wasted) and, at BN = 64, gather every input
 * row twice, once per column block. fp32 accumulators: 4 stages, one
 * block per SM (two would spill: 128 registers); fp16 ones: 3 stages
 * (85 KB) and two blocks. */
typedef WgTile<128, 4> H0;
typedef WgTile<128, 3> H1;
typedef WgTile<64, 4, 64, false, 2> H2;
typedef WgTile<256, 4> H3h;
typedef WgTile<256, 4, 32, true> H3f;
typedef WgTile<96, 4> H4f;
typedef WgTile<96, 3, 64, false, 2> H4h;
/* Stages of the warp-specialised forward/dgrad tiles (an A/B knob): their
 * gatherers wait out the memory latency between a stage's release and its
 * refill, so more stages should help them more than tile 0. Measured (H200,
 * ninth session, same machine, 6 against 4): C = 256 tile 5 -1%, tile 6
 * -3%; C = 128 +1% / 0%; the wgrad tile W2 +3% (it keeps 4). */
#ifndef VC_WS_STAGES
#define VC_WS_STAGES 6
#endif
/* H5: H0's shape, warp-specialised (wg_fwd_ws_kernel: one gathering
 * warpgroup, two wgmma warpgroups, mbarrier hand-over per stage, weight
 * tiles as stage images). */
typedef WgWsTile<128, VC_WS_STAGES> H5;
/* H6: H5 whose MMA warpgroups also skip the offsets their own 64 rows lack
 * (docs/perf-notes.md item 39: 0.617 -> ~0.67 useful MMA rows). */
typedef WgWsTile<128, VC_WS_STAGES, true> H6;
/* H7: 128 x 256, warp-specialised (as H5), for C > 128: every gathered
 * row feeds 256 output channels, so the L2 -> SM bytes per MMA drop by a
 * quarter against 128 x 128 (whose two column tiles gather every row
 * twice). fp32 accumulators: half the promoted sums in shared memory and
 * registers moved to the MMA warpgroups (WgAccSplit, setmaxnreg); beside
 * the 64 KB of sums, VC_T7F_A_STAGES (an A/B knob; 3: the coupled ring)
 * stages of gathered rows and 3 of weights (docs/perf-notes.md item 49).
 * fp16 ones: 4 coupled stages (5 of rows beside 4 of weights gained
 * nothing, item 49). */
#ifndef VC_T7F_A_STAGES
#define VC_T7F_A_STAGES 4
#endif
typedef WgWsTile<256, 3, false, true, VC_T7F_A_STAGES> H7f;
typedef WgWsTile<256, 4> H7h;
#define VC_MG_WG_TILES 8

/* Wgrad tiles: M = cin, N = cout, BK = pairs per stage. */
typedef Tile<64, 64, 32, 32, 32, 3> G0;
typedef Tile<32, 32, 32, 16, 16, 3> G1;
typedef Tile<128, 128, 32, 64, 32, 3> G2;
typedef Tile<64, 128, 32, 32, 32, 3> G3;
/* 64 x 64 (C = 32-64 layers) with half the barriers per pair (BK = 64), or
 * twice the warps per block (8 warps of 32 x 16, half the accumulators per
 * thread), or both: G0's pipeline is latency-bound at 4 blocks of 4 warps
 * per SM (128 registers). */
typedef Tile<64, 64, 64, 32, 32, 3> G4;
typedef Tile<64, 64, 32, 32, 16, 3> G5;
typedef Tile<64, 64, 64, 32, 16, 3> G6;
#define VC_MG_WGRAD_TILES 7

/* Hopper wgmma wgrad tiles (mask_gemm_wgmma, wgrad): M = cin in 128 rows
 * (2 warpgroups), N = cout, 64 pairs per stage, 4 stages. W0 (129 KB) runs
 * one block per SM: 64 wgmma accumulators plus their 64 fp32 sums per
 * thread; W1 (97 KB, half the accumulators) two. Five and six stages
 * (3-4 in flight) were tried and ran no faster (docs/perf-notes.md). */
typedef WgGradTile<128, 4> W0;
typedef WgGradTile<64, 4, 2> W1;
/* W2: W0's shape, warp-specialised (wg_ws_pipeline: one gathering
 * warpgroup, two wgmma warpgroups, mbarrier hand-over per stage). */
typedef WgGradWsTile<128, 4> W2;
/* W3: 128 x 256, warp-specialised, for C > 128: the forward's tile 7
 * scheme (WgAccSplit sums, setmaxnreg) on wgrad. At C = 256 a 128 x 128
 * tile gathers every dY row twice and every X row twice; here each X row
 * twice and each dY row once, 48 KB per 4.2 MFLOP stage instead of 32 KB
 * per 2.1 (the forward's 128 x 256 tile 7 gained 12% on that,
 * docs/perf-notes.md item 44). 3 stages beside the 64 KB of sums. */
typedef WgGradWsTile<256, 3, true> W3;
#define VC_MG_WG_WGRAD_TILES 4

/* Launches a forward/dgrad kernel (either family) over the output tiles.
 * The dynamic shared-memory limit is raised through vc_cuda_smem_optin,
 * which remembers what it set. */
template <typename TL, typename Kernel>
voxconv_status_t launch_tiles(voxconv_handle_t *h, Kernel kern, int smem,
                              const FwdArgs &a) {
  if (smem > 48 * 1024)
    VC_CUDA_TRY(h, vc_cuda_smem_optin(h, (const void *)kern, smem));
  dim3 grid((unsigned)vc_ceil_div(a.nb, TL::BN),
            (unsigned)vc_ceil_div(a.n_dst, TL::BM));
  if (grid.y == 0)
    return VOXCONV_STATUS_SUCCESS;
  kern<<<grid, TL::THREADS, smem, vc_cuda_stream(h)>>>(a);
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm forward/dgrad kernel");
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T, typename TL, bool TRANS_W, bool ACC16>
voxconv_status_t launch_fwd(voxconv_handle_t *h, const FwdArgs &a) {
  auto kern = fwd_kernel<T, TL, TRANS_W, ACC16>;
  return launch_tiles<TL>(h, kern, fwd_smem_bytes<TL, TRANS_W>(), a);
}

template <typename T, bool TRANS_W, bool ACC16>
voxconv_status_t launch_fwd_tile(voxconv_handle_t *h, int tile,
                                 const FwdArgs &a) {
  switch (tile) {
  case 0: return launch_fwd<T, F0, TRANS_W, ACC16>(h, a);
  case 1: return launch_fwd<T, F1, TRANS_W, ACC16>(h, a);
  case 2: return launch_fwd<T, F2, TRANS_W, ACC16>(h, a);
  case 3: return launch_fwd<T, F3, TRANS_W, ACC16>(h, a);
  case 4: return launch_fwd<T, F4, TRANS_W, ACC16>(h, a);
  case 5: return launch_fwd<T, F5, TRANS_W, ACC16>(h, a);
  case 6: return launch_fwd<T, F6, TRANS_W, ACC16>(h, a);
  case 7: return launch_fwd<T, F7, TRANS_W, ACC16>(h, a);
  case 8: return launch_fwd<T, F8, TRANS_W, ACC16>(h, a);
  case 9: return launch_fwd<T, F9, TRANS_W, ACC16>(h, a);
  }
  return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                 "mask_gemm: forward tile %d outside 0..%d", tile,
                 VC_MG_FWD_TILES - 1);
}

/* A wgmma tile whose forward reads W as stored ([kvol][cin][cout], B
 * MN-major: wg_fwd_kernel's B_MN) instead of a transposed copy: not warp-
 * specialised, fp32 sums (the MN-major wgmma wrappers), and 64 columns.
 * The kernel takes any multiple of 64, but tile 0 (128 columns) measured
 * 1.5-2.5% slower that way at C = 128 (1.217 -> 1.237 ms tuned, H100,
 * docs/perf-notes.md item 84), more than the launch it saves; tile 2 (64
 * columns, the tuner's choice at C = 64) lost nothing. */
template <typename TL, bool ACC16> constexpr bool wg_b_mn() {
  return !TL::WS && !ACC16 && TL::BN == 64;
}

/* the forward (dgrad false) or dgrad kernel of a wgmma tile */
template <typename T, typename TL, bool ACC16>
auto wg_fwd_kernel_of(bool dgrad) {
  if constexpr (TL::WS)
    return wg_fwd_ws_kernel<T, TL, ACC16>;
  else if constexpr (wg_b_mn<TL, ACC16>())
    return dgrad ? wg_fwd_kernel<T, TL, ACC16, false>
                 : wg_fwd_kernel<T, TL, ACC16, true>;
  else
    return wg_fwd_kernel<T, TL, ACC16>;
}

/* The B operand of the warp-specialised wgmma tiles (WgWsTile, tiles 5,
 * 6 and 7): for every offset k, column tile nt (BN output channels) and
 * reduction chunk kc (BK channels), the BN x BK stage tile exactly as a
 * stage holds it in shared memory (16-byte vector cv of row n at swz<BK>(n, cv)), zero-padded past
 * nb and ka, images ordered [kvol][n tiles][chunks]; one bulk copy then
 * fills a stage. B[kk][n] = W[k][kk][n] in the forward (ka = cin, nb =
 * cout) and W[k][n][kk] in dgrad (ka = cout, nb = cin); W is [kvol][cin]
 * [cout]. One thread per 16-byte vector; consecutive threads take
 * consecutive n, so the forward's reads coalesce. */
template <typename T, int BN, int BK>
__global__ void wg_stage_image_kernel(const T *__restrict__ w,
                                      T *__restrict__ img, int kvol, int ka,
                                      int nb, bool dgrad) {
  constexpr int AV = BK / 8;
  const int ntiles = (nb + BN - 1) / BN, nchunk = (ka + BK - 1) / BK;
  const int64_t total = (int64_t)kvol * ntiles * nchunk * BN * AV;
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < total;
       v += (int64_t)gridDim.x * blockDim.x) {
    const int n = (int)(v % BN);
    int64_t r = v / BN;
    const int cv = (int)(r % AV);
    r /= AV; /* the image: (k * ntiles + nt) * nchunk + kc */
    const int kc = (int)(r % nchunk);
    const int nt = (int)(r / nchunk % ntiles);
    const int k = (int)(r / nchunk / ntiles);
    const int nn = nt * BN + n;
    T *dst = img + r * (BN * BK) + swz<BK>(n, cv) / 2;
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const int kk = kc * BK + cv * 8 + e;
      T x = T(0.0f);
      if (nn < nb && kk < ka)
        x = dgrad ? w[((int64_t)k * nb + nn) * ka + kk]
                  : w[((int64_t)k * ka + kk) * nb + nn];
      dst[e] = x;
    }
  }
}

/* Launches a wgrad kernel (either family): one block per (cout tile, cin
 * tile, offset x split), as wgrad_slice() decodes blockIdx.z. The caller
 * checks the launch (VC_CUDA_LAUNCH_CHECK names the kernel). */
template <typename TL, typename Kernel>
voxconv_status_t launch_wgrad_grid(voxconv_handle_t *h, Kernel kern, int smem,
                                   const WgradArgs &a) {
  if (smem > 48 * 1024)
    VC_CUDA_TRY(h, vc_cuda_smem_optin(h, (const void *)kern, smem));
  dim3 grid((unsigned)vc_ceil_div(a.cout, TL::BN),
            (unsigned)vc_ceil_div(a.cin, TL::BM),
            (unsigned)(a.kvol * a.splits));
  kern<<<grid, TL::THREADS, smem, vc_cuda_stream(h)>>>(a);
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T, typename TL>
voxconv_status_t launch_wgrad(voxconv_handle_t *h, const WgradArgs &a) {
  VC_CHECK(launch_wgrad_grid<TL>(h, wgrad_kernel<T, TL>,
                                 wgrad_smem_bytes<TL>(), a));
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm wgrad_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T>
voxconv_status_t launch_wgrad_tile(voxconv_handle_t *h, int tile,
                                   const WgradArgs &a) {
  switch (tile) {
  case 0: return launch_wgrad<T, G0>(h, a);
  case 1: return launch_wgrad<T, G1>(h, a);
  case 2: return launch_wgrad<T, G2>(h, a);
  case 3: return launch_wgrad<T, G3>(h, a);
  case 4: return launch_wgrad<T, G4>(h, a);
  case 5: return launch_wgrad<T, G5>(h, a);
  case 6: return launch_wgrad<T, G6>(h, a);
  }
  return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                 "mask_gemm: wgrad tile %d outside 0..%d", tile,
                 VC_MG_WGRAD_TILES - 1);
}

template <typename T, typename TL>
voxconv_status_t launch_wg_wgrad(voxconv_handle_t *h, const WgradArgs &a) {
  VC_CHECK(launch_wgrad_grid<TL>(h, wg_wgrad_kernel<T, TL>,
                                 wg_smem_bytes<TL>(), a));
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_wgmma wg_wgrad_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

template <typename T>
voxconv_status_t launch_wg_wgrad_tile(voxconv_handle_t *h, int tile,
                                      const WgradArgs &a) {
  switch (tile) {
  case 0: return launch_wg_wgrad<T, W0>(h, a);
  case 1: return launch_wg_wgrad<T, W1>(h, a);
  case 2: return launch_wg_wgrad<T, W2>(h, a);
  case 3: return launch_wg_wgrad<T, W3>(h, a);
  }
  return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                 "mask_gemm_wgmma: wgrad tile %d outside 0..%d", tile,
                 VC_MG_WG_WGRAD_TILES - 1);
}

/* ---- the registry record ----------------------------------------------- */
/* Channel counts that are not multiples of 8 (a first layer's 3 or 4 input
 * features) are run on zero-padded copies: the kernels move 8 channels per
 * 16-byte cp.async, and zero channels add exact zeros to every sum, so the
 * padded problem has the same result. Each operand (a, b, c as in
 * vc_conv_problem_t) is an [A][B][C] array that the kernels see as
 * [A][Bp][Cp]; it needs a copy where the two differ. */
struct OperandDims {
  int64_t A, B, C, Bp, Cp;
  bool padded() const { return B != Bp || C != Cp; }
};
struct PadPlan {
  int64_t cin_p, cout_p;
  OperandDims a, b, c;
  bool any() const { return a.padded() || b.padded() || c.padded(); }
};
PadPlan pad_plan(const vc_conv_problem_t *p) {
  const voxconv_kmap_t *m = p->kmap;
  const int64_t ci = p->cin, co = p->cout, kv = m->kvol;
  const int64_t cip = (ci + 7) / 8 * 8, cop = (co + 7) / 8 * 8;
  const OperandDims w = {kv, ci, co, cip, cop}; /* W [kvol][cin][cout] */
  PadPlan pp;
  pp.cin_p = cip;
  pp.cout_p = cop;
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD: /* x [n_in][cin], W, y [n_out][cout] */
    pp.a = {1, m->n_in, ci, m->n_in, cip};
    pp.b = w;
    pp.c = {1, m->n_out, co, m->n_out, cop};
    break;
  case VOXCONV_PASS_CONV_DGRAD: /* dy [n_out][cout], W, dx [n_in][cin] */
    pp.a = {1, m->n_out, co, m->n_out, cop};
    pp.b = w;
    pp.c = {1, m->n_in, ci, m->n_in, cip};
    break;
  default: /* wgrad: x [n_in][cin], dy [n_out][cout], dW like W */
    pp.a = {1, m->n_in, ci, m->n_in, cip};
    pp.b = {1, m->n_out, co, m->n_out, cop};
    pp.c = w;
    break;
  }
  return pp;
}

/* The problem the kernels see: p with padded channel counts. */
vc_conv_problem_t padded_problem(const vc_conv_problem_t *p,
                                 const PadPlan &pp) {
  vc_conv_problem_t q = *p;
  q.cin = pp.cin_p;
  q.cout = pp.cout_p;
  return q;
}

template <typename T, bool PAD>
voxconv_status_t repad3(voxconv_handle_t *h, const void *src, T *dst,
                        int64_t A, int64_t B, int64_t C, int64_t Bp,
                        int64_t Cp) {
  repad3_launch<T, PAD>(vc_cuda_stream(h), (const T *)src, dst, A, B, C, Bp,
                        Cp);
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm repad3_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* A zero-padded copy of operand src (dims d) in a new buffer of ws. */
template <typename T>
voxconv_status_t pad_copy(voxconv_handle_t *h, VcWorkspace &ws,
                          const void *src, const OperandDims &d, T **dst) {
  VC_CHECK(ws.get<T>(d.A * d.Bp * d.Cp, dst, "mask_gemm padded operand"));
  return repad3<T, true>(h, src, *dst, d.A, d.B, d.C, d.Bp, d.Cp);
}

int mg_supports(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  if (h->backend != VOXCONV_BACKEND_CUDA)
    return 0;
  if (p->dtype != VOXCONV_DTYPE_F16 && p->dtype != VOXCONV_DTYPE_BF16)
    return 0; /* f32 inputs never silently run in half precision */
  if (p->pass != VOXCONV_PASS_CONV_FWD && p->pass != VOXCONV_PASS_CONV_DGRAD &&
      p->pass != VOXCONV_PASS_CONV_WGRAD)
    return 0;
  if (p->kmap->kvol > VC_MG_MAX_KVOL)
    return 0;
  /* weight offsets inside one offset's [cin][cout] block are 32-bit */
  if (p->cin * p->cout > INT32_MAX)
    return 0;
  /* Operands used in place must be 16-byte aligned (cp.async); the padded
   * ones are copies (see PadPlan). */
  const PadPlan pp = pad_plan(p);
  if ((!pp.a.padded() && !vc_aligned(p->a, 16)) ||
      (!pp.b.padded() && !vc_aligned(p->b, 16)) ||
      (!pp.c.padded() && !vc_aligned(p->c, 16)))
    return 0;
  if (p->kmap->n_in > INT32_MAX || p->kmap->n_out > INT32_MAX)
    return 0;
  return 1;
}

/* row_order 1: tiles take rows sorted by neighbour bitmask (fewer offsets
 * per tile), 0: the map's natural order. */
const vc_param_space_t mg_space_fwd = {
    3,
    {"mma_tile", "accumulator_type", "row_order"},
    {VC_MG_FWD_TILES, 2, 2},
    {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {32, 16}, {1, 0}}};
/* split_k_slices 0 = adaptive (wgrad_splits). The other values run from
 * many slices to few: the tuner's reduced search takes the first values of
 * each tile first, and many slices won on the H200 (C = 32: 64 slices
 * 0.40 ms against 1.33 ms for the adaptive count of that time).
 * Tiles are listed best-first for the same reason: with mask_gemm_wgmma
 * also in the wgrad pool, auto's 24 candidates give mask_gemm six, the
 * first six tiles at split 0; in ID order that left out tile 6, the best
 * at C = 64 (0.49 ms against 0.52 for tile 4; C = 64 fwd+bwd 1.46 ->
 * 1.49 ms on the H200). Order from the H200 sweep: 6 (C = 64), 4 (C = 32),
 * 0, 3 (C = 128), 2 (C = 256), 1 (few channels), 5. */
const vc_param_space_t mg_space_wgrad = {
    2,
    {"mma_tile", "split_k_slices"},
    {VC_MG_WGRAD_TILES, 8},
    {{6, 4, 0, 3, 2, 1, 5}, {0, 64, 32, 16, 8, 4, 2, 1}}};

/* Wgrad tile shapes (M = cin, N = cout), indexed by tile ID: mask_gemm's
 * and mask_gemm_wgmma's. */
const int kWgradTileMN[VC_MG_WGRAD_TILES][2] = {
    {64, 64}, {32, 32}, {128, 128}, {64, 128}, {64, 64}, {64, 64}, {64, 64}};
const int kWgWgradTileMN[VC_MG_WG_WGRAD_TILES][2] = {
    {128, 128}, {128, 64}, {128, 128}, {128, 256}};

/* Which kernel family runs a problem (one record each). */
enum MgFamily { MG_FAM_MMA = 0, MG_FAM_WGMMA = 1, MG_FAM_IM2COL = 2 };

/* Adaptive split count for a GPU with `sms` multiprocessors (monotone in
 * sms, so the workspace is sized with an upper bound on it).
 *
 * Without splitting a layer has only kvol x tiles blocks (27 at C = 64). The
 * H200 sweep of every tile x split count (bench/results/
 * h200_2026-11-21_s3_bench_tiles.txt, workload C) puts the best count where
 * the layer has about 13 blocks per SM (1,728 blocks on 132 SMs: 64 slices at
 * C = 32 and 64, 16-32 at C = 128, 4-16 at C = 256 by tile): a block's
 * pairs run as one latency-bound pipeline, and the offsets' pair counts are
 * uneven (the centre offset pairs every row), so more, shorter slices keep
 * the SMs busy to the end. The earlier target of 2 blocks per SM ran
 * 1.3-2.9x slower. The partial sums are capped at kWgradAdaptiveWsBytes so a
 * default call at large C does not take hundreds of MB: 128 MB, so at
 * C = 256 (7.1 MB of fp32 partials per slice) 18 slices. It was 64 MB
 * (9 slices) until the 128 x 256 tile W3, which runs 16 slices in
 * 2.46-2.48 ms against 2.73-2.91 at 9 and 2.60 / 2.67 at 32 / 64 (H200,
 * twelfth session; 54 tiles x 9 slices are 3.7 blocks per SM, so the
 * long centre-offset slices set the end; see kWgWgradBlocksPerSm). */
const int kMaxSmsForWorkspace = 512;
const int kWgradBlocksPerSm = 13;
/* The wgmma tiles (one 128-row block per SM) want about half as many: W2
 * at C = 128 ran 0.99 ms at 36 slices (7.4 blocks per SM) and 1.05 at 64
 * (13); W3 at C = 256 2.46-2.48 at 16 (6.5), 2.60 at 32 (13), 2.73-2.91 at
 * 9 (3.7) (H200, twelfth session). */
const int kWgWgradBlocksPerSm = 7;
const int64_t kWgradAdaptiveWsBytes = (int64_t)128 << 20;

int wgrad_splits(int sms, const vc_conv_problem_t *p,
                 const vc_algo_params_t *prm, int family) {
  if (prm->v[1] >= 1)
    return prm->v[1];
  const bool wg = family == MG_FAM_WGMMA;
  const int nt = wg ? VC_MG_WG_WGRAD_TILES : VC_MG_WGRAD_TILES;
  const int t = prm->v[0] >= 0 && prm->v[0] < nt ? prm->v[0] : 0;
  const int *mn = wg ? kWgWgradTileMN[t] : kWgradTileMN[t];
  const int64_t tiles = vc_ceil_div<int64_t>(p->cin, mn[0]) *
                        vc_ceil_div<int64_t>(p->cout, mn[1]) *
                        p->kmap->kvol;
  const int per_sm = wg ? kWgWgradBlocksPerSm : kWgradBlocksPerSm;
  int64_t s = vc_ceil_div<int64_t>(per_sm * (int64_t)sms, tiles);
  /* keep at least ~512 pairs per slice on average (pairs_bound: fixed at
   * the build, so the split -- and the summation order -- does not depend
   * on when a pending map completes) */
  const int64_t max_by_pairs =
      p->kmap->pairs_bound / (512 * (int64_t)p->kmap->kvol) + 1;
  if (s > max_by_pairs)
    s = max_by_pairs;
  const int64_t slice_bytes =
      (int64_t)p->kmap->kvol * p->cin * p->cout * (int64_t)sizeof(float);
  const int64_t max_by_ws = kWgradAdaptiveWsBytes / slice_bytes;
  if (s > max_by_ws)
    s = max_by_ws;
  if (s > VC_MG_MAX_SPLITS)
    s = VC_MG_MAX_SPLITS;
  return s < 1 ? 1 : (int)s;
}

const vc_param_space_t *mg_param_space(voxconv_pass_t pass) {
  return pass == VOXCONV_PASS_CONV_WGRAD ? &mg_space_wgrad : &mg_space_fwd;
}

/* The handle (so the SM count) is not known here: sized for the split
 * count of the largest GPU we size for; run() never exceeds it. */
size_t wgrad_workspace(const vc_conv_problem_t *p, const vc_algo_params_t *prm,
                       int family) {
  if (p->pass != VOXCONV_PASS_CONV_WGRAD)
    return 0;
  const vc_conv_problem_t q = padded_problem(p, pad_plan(p));
  const int splits = wgrad_splits(kMaxSmsForWorkspace, &q, prm, family);
  if (splits <= 1)
    return 0;
  return (size_t)splits * (size_t)p->kmap->kvol * (size_t)q.cin *
         (size_t)q.cout * sizeof(float);
}

size_t mg_workspace(const vc_conv_problem_t *p, const vc_algo_params_t *prm) {
  return wgrad_workspace(p, prm, MG_FAM_MMA);
}

/* Forward with cin <= 8 (padded to 8) on the whole-row im2col kernel;
 * blocks loop over row tiles, two per SM (91.6 KB each). */
template <typename T>
voxconv_status_t launch_im2col(voxconv_handle_t *h, const FwdArgs &a) {
  typedef Im2colTile TL;
  if (a.ka != TL::CP || a.kvol > TL::MAX_KVOL || a.nb % 8 != 0)
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "mask_gemm_im2col: needs %d (padded) input channels and "
                   "kvol <= %d, got %d and %d",
                   TL::CP, TL::MAX_KVOL, a.ka, a.kvol);
  auto kern = im2col_fwd_kernel<T>;
  VC_CUDA_TRY(h, vc_cuda_smem_optin(h, (const void *)kern, TL::SMEM));
  const int64_t tiles = vc_ceil_div<int64_t>(a.n_dst, TL::BM);
  if (tiles == 0)
    return VOXCONV_STATUS_SUCCESS;
  const int64_t resident = 2 * (int64_t)vc_cuda_state(h)->sm_count;
  const int64_t col_blocks = vc_ceil_div<int64_t>(a.nb, TL::BN);
  int64_t rows = vc_ceil_div<int64_t>(resident, col_blocks);
  rows = rows < 1 ? 1 : rows > tiles ? tiles : rows;
  dim3 grid((unsigned)col_blocks, (unsigned)rows);
  kern<<<grid, TL::THREADS, TL::SMEM, vc_cuda_stream(h)>>>(a);
  VC_CUDA_LAUNCH_CHECK(h, "mask_gemm_im2col kernel");
  return VOXCONV_STATUS_SUCCESS;
}

/* Launches wgmma tile TL after laying out its B operand: the warp-
 * specialised tiles read stage images of the weights (BN x BK tiles as a
 * stage holds them); the others read dgrad's weights as they are (K-major)
 * and the forward's as they are too where wg_b_mn (MN-major), else
 * through a transposed scratch copy (3.5 MB at C = 256) made by a kernel
 * launched first (docs/perf-notes.md item 84). */
template <typename T, typename TL, bool ACC16>
voxconv_status_t launch_wg(voxconv_handle_t *h, FwdArgs a, bool dgrad) {
  const T *w = (const T *)a.w;
  VcWorkspace tmp(h); /* stream-ordered frees once the kernel is queued */
  if constexpr (TL::WS) {
    const int64_t n = (int64_t)a.kvol * vc_ceil_div(a.nb, TL::BN) *
                      vc_ceil_div(a.ka, TL::BK) * (TL::BN * TL::BK);
    T *img = NULL;
    VC_CHECK(tmp.get<T>(n, &img, "mask_gemm_wgmma weight stage images"));
    wg_stage_image_kernel<T, TL::BN, TL::BK>
        <<<vc_grid_1d(n / 8, 256, 4 * 1024), 256, 0, vc_cuda_stream(h)>>>(
            w, img, a.kvol, a.ka, a.nb, dgrad);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm wg_stage_image_kernel");
    a.w = img;
  } else if (!dgrad && !wg_b_mn<TL, ACC16>()) { /* cin = ka, cout = nb */
    T *wt = NULL;
    VC_CHECK(tmp.get<T>((int64_t)a.kvol * a.ka * a.nb, &wt,
                        "mask_gemm_wgmma transposed weights"));
    dim3 grid((unsigned)vc_ceil_div(a.nb, 32), (unsigned)vc_ceil_div(a.ka, 32),
              (unsigned)a.kvol);
    transpose_w_kernel<T><<<grid, dim3(32, 8), 0, vc_cuda_stream(h)>>>(
        w, wt, a.ka, a.nb, a.ka);
    VC_CUDA_LAUNCH_CHECK(h, "mask_gemm transpose_w_kernel");
    a.w = wt;
  }
  return launch_tiles<TL>(h, wg_fwd_kernel_of<T, TL, ACC16>(dgrad),
                          wg_smem_bytes<TL>(), a);
}

/* A tile whose fp32- and fp16-accumulator shapes differ (TLF, TLH). */
template <typename T, typename TLF, typename TLH, bool ACC16>
voxconv_status_t launch_wg2(voxconv_handle_t *h, const FwdArgs &a,
                            bool dgrad) {
  if constexpr (ACC16)
    return launch_wg<T, TLH, true>(h, a, dgrad);
  else
    return launch_wg<T, TLF, false>(h, a, dgrad);
}

/* Forward/dgrad on the wgmma kernel: tile's shape for the accumulator. */
template <typename T, bool ACC16>
voxconv_status_t launch_wg_tile(voxconv_handle_t *h, int tile,
                                const FwdArgs &a, bool dgrad) {
  switch (tile) {
  case 0: return launch_wg<T, H0, ACC16>(h, a, dgrad);
  case 1: return launch_wg<T, H1, ACC16>(h, a, dgrad);
  case 2: return launch_wg<T, H2, ACC16>(h, a, dgrad);
  case 3: return launch_wg2<T, H3f, H3h, ACC16>(h, a, dgrad);
  case 4: return launch_wg2<T, H4f, H4h, ACC16>(h, a, dgrad);
  case 5: return launch_wg<T, H5, ACC16>(h, a, dgrad);
  case 6: return launch_wg<T, H6, ACC16>(h, a, dgrad);
  case 7: return launch_wg2<T, H7f, H7h, ACC16>(h, a, dgrad);
  }
  return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                 "mask_gemm_wgmma: tile %d outside 0..%d", tile,
                 VC_MG_WG_TILES - 1);
}

template <typename T>
voxconv_status_t mg_run_typed(voxconv_handle_t *h, const vc_conv_problem_t *p,
                              const vc_algo_params_t *prm, void *ws,
                              int family) {
  const voxconv_kmap_t *m = p->kmap;
  const int tile = prm->v[0];
  if (p->pass == VOXCONV_PASS_CONV_WGRAD) {
    const int sms = vc_cuda_state(h)->sm_count;
    const int splits = wgrad_splits(
        sms < kMaxSmsForWorkspace ? sms : kMaxSmsForWorkspace, p, prm, family);
    if (splits > VC_MG_MAX_SPLITS)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "mask_gemm: split_k_slices=%d above %d", splits,
                     VC_MG_MAX_SPLITS);
    if (splits > 1 && !ws)
      return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                     "mask_gemm: wgrad with %d splits needs a workspace",
                     splits);
    VC_CHECK(vc_cuda_kmap_pairs(h, m, "mask_gemm wgrad"));
    WgradArgs a;
    memset(&a, 0, sizeof a);
    a.x = p->a;
    a.dy = p->b;
    a.in_rows = m->in_rows;
    a.out_rows = m->out_rows;
    a.po = m->pair_offsets_dev;
    a.partial = (float *)ws;
    a.dw = p->c;
    a.kvol = m->kvol;
    a.cin = (int)p->cin;
    a.cout = (int)p->cout;
    a.splits = splits;
    VC_CHECK(family == MG_FAM_WGMMA ? launch_wg_wgrad_tile<T>(h, tile, a)
                                    : launch_wgrad_tile<T>(h, tile, a));
    if (splits > 1) {
      const int64_t n = (int64_t)m->kvol * p->cin * p->cout;
      wgrad_reduce_kernel<T><<<vc_grid_1d(n, 256, INT32_MAX), 256, 0,
                               vc_cuda_stream(h)>>>((const float *)ws,
                                                    (T *)p->c, n, splits);
      VC_CUDA_LAUNCH_CHECK(h, "mask_gemm wgrad_reduce_kernel");
    }
    return VOXCONV_STATUS_SUCCESS;
  }
  const bool dgrad = p->pass == VOXCONV_PASS_CONV_DGRAD;
  const bool acc16 = prm->v[1] == 16;
  FwdArgs a;
  a.a = p->a;
  a.w = p->b;
  a.nbr = dgrad ? m->nbr_in : m->nbr_out;
  a.order = NULL;
  a.tile_mask = NULL;
  a.row_mask = m->kvol <= 32 ? (dgrad ? m->row_mask_in : m->row_mask_out)
                             : NULL;
  /* the row order when a capture makes it (cuda_mask_gemm.cuh), freed
   * after the launch */
  VcWorkspace graph_local(h);
  if (prm->v[2] == 1) {
    if (family == MG_FAM_IM2COL) /* im2col: every offset, no tile masks */
      VC_CHECK(row_order(h, m, dgrad, &graph_local, &a.order));
    else
      VC_CHECK(
          sorted_rows(h, m, dgrad, &graph_local, &a.order, &a.tile_mask));
  }
  a.out = p->c;
  a.n_dst = (int)(dgrad ? m->n_in : m->n_out);
  a.kvol = m->kvol;
  a.ka = (int)(dgrad ? p->cout : p->cin);
  a.nb = (int)(dgrad ? p->cin : p->cout);
  /* the tensor cores have f16 accumulators for f16 inputs only */
  if (acc16 && p->dtype != VOXCONV_DTYPE_F16)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "mask_gemm: fp16 accumulators need f16 inputs, not %s",
                   voxconv_dtype_name(p->dtype));
  if (family == MG_FAM_WGMMA)
    return acc16 ? launch_wg_tile<__half, true>(h, tile, a, dgrad)
                 : launch_wg_tile<T, false>(h, tile, a, dgrad);
  if (family == MG_FAM_IM2COL)
    return launch_im2col<T>(h, a);
  if (acc16)
    return dgrad ? launch_fwd_tile<__half, true, true>(h, tile, a)
                 : launch_fwd_tile<__half, false, true>(h, tile, a);
  return dgrad ? launch_fwd_tile<T, true, false>(h, tile, a)
               : launch_fwd_tile<T, false, false>(h, tile, a);
}

/* Runs p on zero-padded copies of the operands PadPlan names, then copies
 * the written part of the padded output back. */
template <typename T>
voxconv_status_t mg_run_padded(voxconv_handle_t *h, const vc_conv_problem_t *p,
                               const vc_algo_params_t *prm, void *ws,
                               const PadPlan &pp, int family) {
  VcWorkspace tmp(h);
  vc_conv_problem_t q = padded_problem(p, pp);
  T *buf = NULL;
  if (pp.a.padded()) {
    VC_CHECK(pad_copy<T>(h, tmp, p->a, pp.a, &buf));
    q.a = buf;
  }
  if (pp.b.padded()) {
    VC_CHECK(pad_copy<T>(h, tmp, p->b, pp.b, &buf));
    q.b = buf;
  }
  const OperandDims &c = pp.c;
  if (c.padded()) {
    VC_CHECK(tmp.get<T>(c.A * c.Bp * c.Cp, &buf, "mask_gemm padded output"));
    q.c = buf;
  }
  VC_CHECK(mg_run_typed<T>(h, &q, prm, ws, family));
  if (c.padded()) {
    const voxconv_status_t st =
        repad3<T, false>(h, q.c, (T *)p->c, c.A, c.B, c.C, c.Bp, c.Cp);
    if (st != VOXCONV_STATUS_SUCCESS)
      return st;
  }
  return VOXCONV_STATUS_SUCCESS; /* tmp's buffers are stream-ordered frees */
}

template <typename T>
voxconv_status_t mg_run_any(voxconv_handle_t *h, const vc_conv_problem_t *p,
                            const vc_algo_params_t *prm, void *ws, int family) {
  const PadPlan pp = pad_plan(p);
  if (pp.any())
    return mg_run_padded<T>(h, p, prm, ws, pp, family);
  return mg_run_typed<T>(h, p, prm, ws, family);
}

/* Shared-memory eligibility of the tile prm selects (defined with the
 * kernel table below): 1 when it can launch on h's device, and the run's
 * refusal (UNSUPPORTED, with the bytes needed and allowed) when not. */
int tile_fits(const voxconv_handle_t *h, const vc_conv_problem_t *p,
              const vc_algo_params_t *prm, int family);
voxconv_status_t check_tile_fits(voxconv_handle_t *h,
                                 const vc_conv_problem_t *p,
                                 const vc_algo_params_t *prm, int family);

/* mg_run_any for the problem's dtype (f16 or bf16: supports() checked),
 * after the shared-memory check: a tile over this GPU's per-block limit
 * (mma.sync tiles 8 and 9 on sm_86 / sm_89) is refused by name before
 * anything is padded or launched, never left to fail as a launch. */
voxconv_status_t mg_run_dtype(voxconv_handle_t *h, const vc_conv_problem_t *p,
                              const vc_algo_params_t *prm, void *ws,
                              int family) {
  VC_CHECK(check_tile_fits(h, p, prm, family));
  if (p->dtype == VOXCONV_DTYPE_F16)
    return mg_run_any<__half>(h, p, prm, ws, family);
  return mg_run_any<__nv_bfloat16>(h, p, prm, ws, family);
}

voxconv_status_t mg_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                        const vc_algo_params_t *prm, void *ws) {
  VC_CUDA_DEVICE_GUARD(h);
  return mg_run_dtype(h, p, prm, ws, MG_FAM_MMA);
}

int mg_params_supported(const voxconv_handle_t *h, const vc_conv_problem_t *p,
                        const vc_algo_params_t *prm) {
  return tile_fits(h, p, prm, MG_FAM_MMA);
}

/* ---- mask_gemm_wgmma: the Hopper variant -------------------------------- */
int wg_supports(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
#ifdef VC_HAVE_SM90A
  if (!mg_supports(h, p))
    return 0;
  /* wgmma is sm_90a only: not on later architectures either */
  const vc_cuda_state_t *s = vc_cuda_state(h);
  return s->cc_major == 9 && s->cc_minor == 0;
#else
  (void)h;
  (void)p;
  return 0; /* built without the 90a target */
#endif
}

const vc_param_space_t wg_space = {
    3,
    {"mma_tile", "accumulator_type", "row_order"},
    {VC_MG_WG_TILES, 2, 2},
    {{5, 6, 0, 7, 1, 2, 3, 4}, {32, 16}, {1, 0}}};
/* wgrad: split counts as mask_gemm's (wgrad_splits) */
const vc_param_space_t wg_space_wgrad = {
    2,
    {"mma_tile", "split_k_slices"},
    {VC_MG_WG_WGRAD_TILES, 8},
    {{2, 0, 1, 3}, {0, 64, 32, 16, 8, 4, 2, 1}}};

const vc_param_space_t *wg_param_space(voxconv_pass_t pass) {
  return pass == VOXCONV_PASS_CONV_WGRAD ? &wg_space_wgrad : &wg_space;
}

size_t wg_workspace(const vc_conv_problem_t *p, const vc_algo_params_t *prm) {
  return wgrad_workspace(p, prm, MG_FAM_WGMMA);
}

voxconv_status_t wg_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                        const vc_algo_params_t *prm, void *ws) {
  VC_CUDA_DEVICE_GUARD(h);
  if (!wg_supports(h, p))
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "mask_gemm_wgmma: needs an sm_90 GPU, a build with the "
                   "90a target, and a problem mask_gemm supports");
  return mg_run_dtype(h, p, prm, ws, MG_FAM_WGMMA);
}

int wg_params_supported(const voxconv_handle_t *h, const vc_conv_problem_t *p,
                        const vc_algo_params_t *prm) {
  return tile_fits(h, p, prm, MG_FAM_WGMMA);
}

/* mask_gemm_im2col: forward with cin <= 8 (after zero padding) and
 * kvol <= 28, e.g. the 3 -> 64 first layer of a point-cloud network. */
int ic_supports(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  return p->pass == VOXCONV_PASS_CONV_FWD && mg_supports(h, p) &&
         p->cin <= Im2colTile::CP && p->kmap->kvol <= Im2colTile::MAX_KVOL;
}

const vc_param_space_t ic_space = {1, {"row_order"}, {2}, {{1, 0}}};

const vc_param_space_t *ic_param_space(voxconv_pass_t) { return &ic_space; }

voxconv_status_t ic_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                        const vc_algo_params_t *prm, void *ws) {
  VC_CUDA_DEVICE_GUARD(h);
  if (!ic_supports(h, p))
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "mask_gemm_im2col: forward only, with cin <= %d and a "
                   "kernel of at most %d offsets (got pass %d, cin %lld, "
                   "kvol %d)",
                   Im2colTile::CP, Im2colTile::MAX_KVOL, (int)p->pass,
                   (long long)p->cin, (int)p->kmap->kvol);
  /* mg_run_typed reads (tile, accumulator, row_order). */
  vc_algo_params_t full;
  memset(&full, 0, sizeof full);
  full.v[0] = 0;
  full.v[1] = 32;
  full.v[2] = prm->v[0];
  return mg_run_dtype(h, p, &full, ws, MG_FAM_IM2COL);
}

/* One tile (91.6 KB): eligible wherever the device allows that much (every
 * GPU the library targets; not under a lower VOXCONV_CUDA_SMEM_LIMIT). */
int ic_params_supported(const voxconv_handle_t *h, const vc_conv_problem_t *p,
                        const vc_algo_params_t *prm) {
  return tile_fits(h, p, prm, MG_FAM_IM2COL);
}

} // namespace

extern "C" const vc_algo_t vc_algo_cuda_mask_gemm = {
    {"mask_gemm", VOXCONV_BACKEND_CUDA,
     (1u << VOXCONV_PASS_CONV_FWD) | (1u << VOXCONV_PASS_CONV_DGRAD) |
         (1u << VOXCONV_PASS_CONV_WGRAD),
     1,
     "tensor-core fused gather-GEMM-scatter (mma.sync m16n8k16, cp.async "
     "gather, per-tile offset skipping); f16/bf16; channel counts that are "
     "not multiples of 8 run on zero-padded copies"},
    mg_supports,
    mg_param_space,
    mg_workspace,
    mg_run,
    mg_params_supported};

extern "C" const vc_algo_t vc_algo_cuda_mask_gemm_wgmma = {
    {"mask_gemm_wgmma", VOXCONV_BACKEND_CUDA,
     (1u << VOXCONV_PASS_CONV_FWD) | (1u << VOXCONV_PASS_CONV_DGRAD) |
         (1u << VOXCONV_PASS_CONV_WGRAD),
     1,
     "mask_gemm on Hopper warpgroup MMA (wgmma, sm_90a): operands read by "
     "the tensor cores from swizzled shared memory (wgrad: both MN-major, "
     "split over pairs like mask_gemm's); f16/bf16"},
    wg_supports,
    wg_param_space,
    wg_workspace, /* wgrad split partials */
    wg_run,
    wg_params_supported};

extern "C" const vc_algo_t vc_algo_cuda_mask_gemm_im2col = {
    {"mask_gemm_im2col", VOXCONV_BACKEND_CUDA, 1u << VOXCONV_PASS_CONV_FWD, 1,
     "mask_gemm forward for few input channels (cin <= 8, kvol <= 28): each "
     "tile gathers every (row, offset) input at once into a whole-row "
     "im2col tile in shared memory and multiplies it in one K <= 224 "
     "mma.sync chain; f16/bf16, fp32 accumulators"},
    ic_supports,
    ic_param_space,
    NULL, /* no scratch */
    ic_run,
    ic_params_supported};

/* ---- kernel table for `voxconv info --kernels` -------------------------- */
namespace {

struct KernelRow {
  const char *algo;
  const void *fn;
  voxconv_pass_t pass;
  int dgrad, tile_id;
  voxconv_dtype_t dtype;
  int acc16, bm, bn, bk, stages, threads, dyn_smem;
  int family; /* MgFamily */
};

/* The family of a record's name; -1 for another algorithm. */
int family_of(const char *algo) {
  if (strcmp(algo, "mask_gemm") == 0)
    return MG_FAM_MMA;
  if (strcmp(algo, "mask_gemm_wgmma") == 0)
    return MG_FAM_WGMMA;
  if (strcmp(algo, "mask_gemm_im2col") == 0)
    return MG_FAM_IM2COL;
  return -1;
}

/* A kernel-table row of tile TL. */
template <typename TL>
KernelRow tile_row(const char *algo, const void *fn, voxconv_pass_t pass,
                   bool dgrad, int tile_id, voxconv_dtype_t dt, bool acc16,
                   int dyn_smem) {
  return KernelRow{algo,      fn,       pass,      dgrad ? 1 : 0,
                   tile_id,   dt,       acc16 ? 1 : 0,
                   TL::BM,    TL::BN,   TL::BK,    TL::STAGES,
                   TL::THREADS, dyn_smem, family_of(algo)};
}

template <typename T, typename TL, bool TRANS_W, bool ACC16>
KernelRow fwd_row(int tile_id, voxconv_dtype_t dt) {
  return tile_row<TL>("mask_gemm",
                      (const void *)fwd_kernel<T, TL, TRANS_W, ACC16>,
                      VOXCONV_PASS_CONV_FWD, TRANS_W, tile_id, dt, ACC16,
                      fwd_smem_bytes<TL, TRANS_W>());
}
template <typename T, typename TL> KernelRow wgrad_row(int tile_id,
                                                       voxconv_dtype_t dt) {
  return tile_row<TL>("mask_gemm", (const void *)wgrad_kernel<T, TL>,
                      VOXCONV_PASS_CONV_WGRAD, false, tile_id, dt, false,
                      wgrad_smem_bytes<TL>());
}

/* A wgmma tile's forward or dgrad kernel (one kernel for both where the
 * forward reads a transposed copy or stage images, see wg_b_mn). */
template <typename T, typename TL, bool ACC16>
KernelRow wg_row(int tile_id, voxconv_dtype_t dt, bool dgrad) {
  return tile_row<TL>("mask_gemm_wgmma",
                      (const void *)wg_fwd_kernel_of<T, TL, ACC16>(dgrad),
                      VOXCONV_PASS_CONV_FWD, dgrad, tile_id, dt, ACC16,
                      wg_smem_bytes<TL>());
}
template <typename T, typename TL> KernelRow wg_wgrad_row(int tile_id,
                                                          voxconv_dtype_t dt) {
  return tile_row<TL>("mask_gemm_wgmma", (const void *)wg_wgrad_kernel<T, TL>,
                      VOXCONV_PASS_CONV_WGRAD, false, tile_id, dt, false,
                      wg_smem_bytes<TL>());
}
template <typename TL> void add_wg_wgrad_tile(KernelRow *rows, int &n, int id) {
  rows[n++] = wg_wgrad_row<__half, TL>(id, VOXCONV_DTYPE_F16);
  rows[n++] = wg_wgrad_row<__nv_bfloat16, TL>(id, VOXCONV_DTYPE_BF16);
}
/* TLF: the tile's shape for fp32 accumulators, TLH for fp16 ones. */
template <typename TLF, typename TLH>
void add_wg_tile(KernelRow *rows, int &n, int id) {
  for (int d = 0; d < 2; d++) {
    rows[n++] = wg_row<__half, TLF, false>(id, VOXCONV_DTYPE_F16, d);
    rows[n++] = wg_row<__nv_bfloat16, TLF, false>(id, VOXCONV_DTYPE_BF16, d);
    rows[n++] = wg_row<__half, TLH, true>(id, VOXCONV_DTYPE_F16, d);
  }
}

/* The variants of one forward tile: f16, bf16, f16 with fp16 accumulators,
 * each as forward and dgrad. */
template <typename TL> void add_fwd_tile(KernelRow *rows, int &n, int id) {
  rows[n++] = fwd_row<__half, TL, false, false>(id, VOXCONV_DTYPE_F16);
  rows[n++] = fwd_row<__nv_bfloat16, TL, false, false>(id, VOXCONV_DTYPE_BF16);
  rows[n++] = fwd_row<__half, TL, false, true>(id, VOXCONV_DTYPE_F16);
  rows[n++] = fwd_row<__half, TL, true, false>(id, VOXCONV_DTYPE_F16);
  rows[n++] = fwd_row<__nv_bfloat16, TL, true, false>(id, VOXCONV_DTYPE_BF16);
  rows[n++] = fwd_row<__half, TL, true, true>(id, VOXCONV_DTYPE_F16);
}
template <typename TL> void add_wgrad_tile(KernelRow *rows, int &n, int id) {
  rows[n++] = wgrad_row<__half, TL>(id, VOXCONV_DTYPE_F16);
  rows[n++] = wgrad_row<__nv_bfloat16, TL>(id, VOXCONV_DTYPE_BF16);
}

/* The im2col kernel: one tile shape, forward only (K up to 224). */
template <typename T> KernelRow im2col_row(voxconv_dtype_t dt) {
  typedef Im2colTile TL;
  return KernelRow{"mask_gemm_im2col", (const void *)im2col_fwd_kernel<T>,
                   VOXCONV_PASS_CONV_FWD, 0, 0, dt, 0, TL::BM, TL::BN,
                   TL::KMAX, 1, TL::THREADS, TL::SMEM, MG_FAM_IM2COL};
}

const int kKernelRows = 6 * VC_MG_FWD_TILES + 2 * VC_MG_WGRAD_TILES +
                        6 * VC_MG_WG_TILES + 2 * VC_MG_WG_WGRAD_TILES + 2;

static_assert(kKernelRows <= VC_CUDA_KERNEL_ROWS_MAX,
              "vc_cuda_state_t::mg_static_smem has a slot per row");

struct KernelTable {
  KernelRow rows[kKernelRows];
};

KernelTable build_kernel_table() {
  KernelTable t;
  KernelRow *rows = t.rows;
  {
    int n = 0;
    add_fwd_tile<F0>(rows, n, 0);
    add_fwd_tile<F1>(rows, n, 1);
    add_fwd_tile<F2>(rows, n, 2);
    add_fwd_tile<F3>(rows, n, 3);
    add_fwd_tile<F4>(rows, n, 4);
    add_fwd_tile<F5>(rows, n, 5);
    add_fwd_tile<F6>(rows, n, 6);
    add_fwd_tile<F7>(rows, n, 7);
    add_fwd_tile<F8>(rows, n, 8);
    add_fwd_tile<F9>(rows, n, 9);
    add_wgrad_tile<G0>(rows, n, 0);
    add_wgrad_tile<G1>(rows, n, 1);
    add_wgrad_tile<G2>(rows, n, 2);
    add_wgrad_tile<G3>(rows, n, 3);
    add_wgrad_tile<G4>(rows, n, 4);
    add_wgrad_tile<G5>(rows, n, 5);
    add_wgrad_tile<G6>(rows, n, 6);
    add_wg_tile<H0, H0>(rows, n, 0);
    add_wg_tile<H1, H1>(rows, n, 1);
    add_wg_tile<H2, H2>(rows, n, 2);
    add_wg_tile<H3f, H3h>(rows, n, 3);
    add_wg_tile<H4f, H4h>(rows, n, 4);
    add_wg_tile<H5, H5>(rows, n, 5);
    add_wg_tile<H6, H6>(rows, n, 6);
    add_wg_tile<H7f, H7h>(rows, n, 7);
    add_wg_wgrad_tile<W0>(rows, n, 0);
    add_wg_wgrad_tile<W1>(rows, n, 1);
    add_wg_wgrad_tile<W2>(rows, n, 2);
    add_wg_wgrad_tile<W3>(rows, n, 3);
    rows[n++] = im2col_row<__half>(VOXCONV_DTYPE_F16);
    rows[n++] = im2col_row<__nv_bfloat16>(VOXCONV_DTYPE_BF16);
  }
  return t;
}

/* The table, built once (a function-local static: thread-safe
 * initialisation, and the tuner now reads it from any thread). */
const KernelRow *kernel_rows() {
  static const KernelTable table = build_kernel_table();
  return table.rows;
}

/* ---- shared-memory eligibility -------------------------------------------
 * A block may use sharedMemPerBlockOptin bytes of shared memory, static
 * plus dynamic: 99 KB on sm_86 / sm_89, 163 KB on sm_80, 227 KB on sm_90.
 * The mma.sync tiles 8 and 9 (BK = 64, 108 / 105 KB of stages) exceed the
 * first, where cudaFuncSetAttribute or the launch would fail; the wgmma
 * tiles (sm_90 only) stay within the last, tiles 3 and 7 (fp32) by 112 and
 * 16 bytes. Such tiles are not eligible on the device: the tuner leaves
 * them out (params_supported), run() refuses them (check_tile_fits), and
 * `voxconv info --kernels` marks them. */

/* Every kernel's static shared memory is below this (the most, ~2 KB: a
 * 128-row TileOffsets and the mbarriers of the warp-specialised tiles;
 * test_smem_limit checks each row against cudaFuncGetAttributes), so
 * the dynamic bytes decide on their own unless they come within it of
 * the limit. */
const size_t kStaticSmemBound = 4096;

/* The row that runs variant (family, pass, tile, dtype, acc16), or -1. For
 * im2col, tile is 0. */
int find_row(int family, voxconv_pass_t pass, int tile, voxconv_dtype_t dt,
             bool acc16) {
  const bool wgrad = pass == VOXCONV_PASS_CONV_WGRAD;
  const int dgrad = pass == VOXCONV_PASS_CONV_DGRAD ? 1 : 0;
  if (!wgrad && !dgrad && pass != VOXCONV_PASS_CONV_FWD)
    return -1;
  const KernelRow *rows = kernel_rows();
  for (int i = 0; i < kKernelRows; i++) {
    const KernelRow &r = rows[i];
    if (r.family == family && r.tile_id == tile && r.dtype == dt &&
        r.acc16 == (acc16 ? 1 : 0) &&
        (wgrad ? r.pass == VOXCONV_PASS_CONV_WGRAD
               : r.pass == VOXCONV_PASS_CONV_FWD && r.dgrad == dgrad))
      return i;
  }
  return -1;
}

/* The row of the tile that prm selects for p (as mg_run_typed reads prm:
 * v[0] the tile, v[1] == 16 fp16 accumulators in forward / dgrad; im2col
 * has one tile), or -1 (a tile out of range, fp16 accumulators on bf16:
 * the launchers name those). */
int row_of(const vc_conv_problem_t *p, const vc_algo_params_t *prm,
           int family) {
  if (family == MG_FAM_IM2COL)
    return find_row(family, p->pass, 0, p->dtype, false);
  const bool acc16 = p->pass != VOXCONV_PASS_CONV_WGRAD && prm->v[1] == 16;
  return find_row(family, p->pass, prm->v[0], p->dtype, acc16);
}

/* ptxas's static shared memory of row r as built for h's device (read once
 * per handle), or -1 when it cannot be read (no image for this device). */
long row_static_smem(const voxconv_handle_t *h, int r) {
  vc_cuda_state_t *s = vc_cuda_state(h);
  const int known = __atomic_load_n(&s->mg_static_smem[r], __ATOMIC_RELAXED);
  if (known > 0)
    return known - 1;
  VcDeviceGuard guard(h);
  cudaFuncAttributes fa;
  if (guard.error() != cudaSuccess ||
      cudaFuncGetAttributes(&fa, kernel_rows()[r].fn) != cudaSuccess) {
    cudaGetLastError(); /* not left behind for an unrelated check */
    return -1;
  }
  /* threads sharing h may race here: they store the same value */
  __atomic_store_n(&s->mg_static_smem[r], (int)fa.sharedSizeBytes + 1,
                   __ATOMIC_RELAXED);
  return (long)fa.sharedSizeBytes;
}

/* 1 when row r's kernel launches on h's device. *need (may be NULL): its
 * shared memory per block, static + dynamic (the dynamic part alone when
 * the static figure cannot be read). */
int row_fits(const voxconv_handle_t *h, int r, size_t *need) {
  const size_t dyn = (size_t)kernel_rows()[r].dyn_smem;
  const size_t limit = vc_cuda_state(h)->smem_optin;
  const int fit = vc_smem_fit(dyn, limit);
  long st = -1;
  if (fit < 0 || need)
    st = row_static_smem(h, r);
  if (need)
    *need = dyn + (st > 0 ? (size_t)st : 0);
  if (fit >= 0)
    return fit;
  return st >= 0 && dyn + (size_t)st <= limit;
}

const char *pass_word(voxconv_pass_t pass) {
  return pass == VOXCONV_PASS_CONV_WGRAD   ? "wgrad"
         : pass == VOXCONV_PASS_CONV_DGRAD ? "dgrad"
                                           : "forward";
}

} // namespace

extern "C" int vc_smem_fit(size_t dyn, size_t limit) {
  if (dyn > limit)
    return 0;
  if (limit - dyn >= kStaticSmemBound)
    return 1;
  return -1;
}

extern "C" long vc_mask_gemm_tile_dyn_smem(const char *algo,
                                           voxconv_pass_t pass, int tile,
                                           int acc16) {
  if (algo && strcmp(algo, "mask_gemm_i8") == 0)
    return pass == VOXCONV_PASS_CONV_FWD && !acc16 ? vc_int8_tile_dyn_smem(tile)
                                                   : -1;
  const int family = algo ? family_of(algo) : -1;
  if (family < 0)
    return -1;
  const int r = find_row(family, pass, tile, VOXCONV_DTYPE_F16, acc16 != 0);
  return r < 0 ? -1 : (long)kernel_rows()[r].dyn_smem;
}

namespace {

int tile_fits(const voxconv_handle_t *h, const vc_conv_problem_t *p,
              const vc_algo_params_t *prm, int family) {
  if (h->backend != VOXCONV_BACKEND_CUDA || !h->cuda)
    return 1; /* supports() says no there */
  const int r = row_of(p, prm, family);
  return r < 0 || row_fits(h, r, NULL); /* r < 0: run() says why */
}

voxconv_status_t check_tile_fits(voxconv_handle_t *h,
                                 const vc_conv_problem_t *p,
                                 const vc_algo_params_t *prm, int family) {
  const int r = row_of(p, prm, family);
  size_t need = 0;
  if (r < 0 || row_fits(h, r, &need))
    return VOXCONV_STATUS_SUCCESS;
  const KernelRow &k = kernel_rows()[r];
  const vc_cuda_state_t *s = vc_cuda_state(h);
  char tile[16] = "";
  if (family != MG_FAM_IM2COL)
    snprintf(tile, sizeof tile, " tile %d", k.tile_id);
  return vc_fail(
      h, VOXCONV_STATUS_UNSUPPORTED,
      "%s: %s%s (%s, %s accumulators) needs %zu bytes of shared memory per "
      "block; this GPU (compute capability %d.%d) allows %zu%s, so the tuner "
      "leaves it out here (`voxconv info --kernels` marks which tiles fit)",
      k.algo, pass_word(p->pass), tile, voxconv_dtype_name(k.dtype),
      k.acc16 ? "fp16" : "fp32", need, s->cc_major, s->cc_minor, s->smem_optin,
      s->smem_optin < s->smem_optin_device
          ? " (lowered from the device's by VOXCONV_CUDA_SMEM_LIMIT)"
          : "");
}

} // namespace

extern "C" int vc_cuda_kernel_count(void) { return kKernelRows; }

extern "C" voxconv_status_t vc_cuda_kernel_info(voxconv_handle_t *h,
                                                int index,
                                                voxconv_kernel_info_t *info) {
  VC_CUDA_DEVICE_GUARD(h);
  const KernelRow &r = kernel_rows()[index];
  memset(info, 0, sizeof *info);
  snprintf(info->algo, sizeof info->algo, "%s", r.algo);
  info->pass = r.pass;
  info->dgrad = r.dgrad;
  info->tile_id = r.tile_id;
  info->dtype = r.dtype;
  info->acc16 = r.acc16;
  info->tile_m = r.bm;
  info->tile_n = r.bn;
  info->tile_k = r.bk;
  info->stages = r.stages;
  info->threads = r.threads;
  snprintf(info->constraints, sizeof info->constraints,
           "%skvol<=%d; cin or cout %% 8 != 0: zero-padded copies",
           strcmp(r.algo, "mask_gemm_wgmma") == 0 ? "sm_90a; " : "",
           VC_MG_MAX_KVOL);
  /* A kernel over the device's shared-memory limit cannot be given its
   * dynamic size (cudaFuncSetAttribute fails on that GPU): listed with its
   * registers and bytes, eligible 0, no occupancy. */
  info->smem_limit = vc_cuda_state(h)->smem_optin;
  info->eligible = row_fits(h, index, NULL);
  return vc_cuda_kernel_resources(h, r.fn, r.threads, r.dyn_smem, info);
}
