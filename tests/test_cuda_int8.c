/* int8 sparse convolution on the GPU (voxconv_conv_forward_int8,
 * voxconv_depthwise_forward_int8 on a CUDA handle; src/cuda/cuda_int8.cu):
 *   1. every tile (VOXCONV_INT8_TILE = 0..N_TILES-1), each also with its
 *      kernel offsets split (VOXCONV_INT8_SPLIT 2, 5 or 64: partial sums
 *      added, then the epilogue; 64 leaves slices empty), and the default
 *      choice, every output dtype (I32 raw sums, F32, F16, BF16, I8), with
 *      and without bias / ReLU: bitwise against the independent model of
 *      tests/int8_model.h (int64 sums over the GPU map's own pairs, the
 *      epilogue as voxconv.h writes it), every map mode, channel counts
 *      that are not multiples of 16 or 32, random and real-scan coordinates;
 *      outputs poisoned before each call and checked fully written; F32
 *      and I8 also with the weights in the KOI layout ([kvol][cout][cin]:
 *      read in place, repadded, or reordered for im2col rows by cin);
 *   2. the same problems on a CPU handle with a CPU map (submanifold: the
 *      same row order): GPU == CPU bit for bit, the "bitwise CPU-GPU
 *      agreement";
 *   3. exact ties (round half to even) and the symmetric clamp of the I8
 *      output, hand-computed;
 *   4. the extreme accumulator (all -128 at kvol * cin = 131071) exact;
 *   5. a bad VOXCONV_INT8_TILE is INVALID_ARGUMENT; a CPU map on a CUDA
 *      handle is refused.
 * Needs a CUDA device: exits 77 (skipped) without one.
 *   test_cuda_int8 --quick   fewer problems (compute-sanitizer memcheck)
 *   test_cuda_int8 --race    the ties and one small problem of each op on
 *                            every tile (compute-sanitizer racecheck, whose
 *                            cost grows with every shared-memory access)
 *   test_cuda_int8 --pool    the max-pooling cases alone (memcheck of the
 *                            pooling kernels)
 * Fresh random inputs per run (seed printed; VOXCONV_TEST_SEED replays). */
#include "int8_model.h"

#include "tune/vc_tune.h"
#include "tune/vc_tune_int8.h"

#include <stdio.h>

#define N_TILES 21 /* cuda_int8.cu VC_I8_TILES */
#define IM2COL_TILE 18 /* cuda_int8.cu VC_I8_IM2COL_TILE */

static voxconv_handle_t *g_cpu, *g_gpu;
static int g_quick, g_race, g_pool_only;
/* tiles this GPU runs (voxconv_kernel_get_info: the wgmma tiles need
 * sm_90a); the others are checked to be refused by name */
static int g_tile_ok[N_TILES];
static int g_sm90; /* compute capability 9.0 (the wgmma tiles' device) */

static const voxconv_dtype_t k_dts[5] = {VOXCONV_DTYPE_I32, VOXCONV_DTYPE_F32,
                                         VOXCONV_DTYPE_F16, VOXCONV_DTYPE_BF16,
                                         VOXCONV_DTYPE_I8};

static void find_tiles(void) {
  int n = 0, seen = 0;
  voxconv_kernel_count(g_gpu, &n);
  for (int i = 0; i < n; i++) {
    voxconv_kernel_info_t ki;
    if (voxconv_kernel_get_info(g_gpu, i, &ki) != VOXCONV_STATUS_SUCCESS ||
        strcmp(ki.algo, "mask_gemm_i8") != 0)
      continue;
    VC_EXPECT(ki.tile_id == seen && ki.dtype == VOXCONV_DTYPE_I8,
              "int8 tile %d listed as %d", seen, ki.tile_id);
    /* eligible: the shared memory fits; a wgmma tile also needs sm_90a
     * (its constraints say so) */
    const int wg = strstr(ki.constraints, "sm_90a") != NULL;
    if (ki.tile_id >= 0 && ki.tile_id < N_TILES)
      g_tile_ok[ki.tile_id] = ki.eligible && (!wg || g_sm90);
    printf("mask_gemm_i8 tile %2d: %3dx%3dx%3d, %3d threads, %3d regs, %6zu "
           "B smem, %d blocks/SM, eligible %d (%s)\n",
           ki.tile_id, ki.tile_m, ki.tile_n, ki.tile_k, ki.threads,
           ki.registers, ki.smem_bytes, ki.blocks_per_sm, ki.eligible,
           ki.constraints);
    seen++;
  }
  VC_EXPECT(seen == N_TILES, "%d int8 tiles listed, want %d", seen, N_TILES);
}

static void set_tile(int t) {
  if (t < 0) {
    unsetenv("VOXCONV_INT8_TILE");
    return;
  }
  char buf[16];
  snprintf(buf, sizeof buf, "%d", t);
  setenv("VOXCONV_INT8_TILE", buf, 1);
}

/* VOXCONV_INT8_SPLIT (with a forced tile); s <= 1 unsets it */
static void set_split(int s) {
  if (s <= 1) {
    unsetenv("VOXCONV_INT8_SPLIT");
    return;
  }
  char buf[16];
  snprintf(buf, sizeof buf, "%d", s);
  setenv("VOXCONV_INT8_SPLIT", buf, 1);
}

/* the split tried with tile t, output dtype number di: every split size
 * meets every tile across the dtypes */
static int split_for(int t, int di) {
  static const int k_splits[3] = {2, 5, 64};
  return k_splits[(t + di) % 3];
}

/* ---- device copies --------------------------------------------------- */
static void *to_dev(const void *src, size_t bytes) {
  void *d = NULL;
  if (voxconv_malloc(g_gpu, bytes ? bytes : 1, &d) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "voxconv_malloc(%zu): %s\n", bytes,
            voxconv_get_last_error(g_gpu));
    exit(2);
  }
  if (bytes && src)
    voxconv_memcpy(g_gpu, d, src, bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  return d;
}

/* p's operands in device memory (x, w, w_scale, bias). */
typedef struct dev_prob {
  int8_t *x, *w, *wkoi; /* wkoi: regular conv's KOI weights, else NULL */
  float *ws, *bias;
} dev_prob_t;

static dev_prob_t upload(const prob_t *p) {
  dev_prob_t d;
  const int64_t wn = p->depthwise ? p->kvol * p->cout
                                  : p->kvol * p->cin * p->cout;
  d.x = (int8_t *)to_dev(p->x, (size_t)(p->n_in * p->cin));
  d.w = (int8_t *)to_dev(p->w, (size_t)wn);
  d.wkoi = p->wkoi ? (int8_t *)to_dev(p->wkoi, (size_t)wn) : NULL;
  d.ws = (float *)to_dev(p->ws, sizeof(float) * (size_t)p->cout);
  d.bias = (float *)to_dev(p->bias, sizeof(float) * (size_t)p->cout);
  return d;
}

static void release(dev_prob_t *d) {
  voxconv_free(g_gpu, d->x);
  voxconv_free(g_gpu, d->w);
  voxconv_free(g_gpu, d->wkoi);
  voxconv_free(g_gpu, d->ws);
  voxconv_free(g_gpu, d->bias);
}

/* Runs p on handle h with operands (x, w, ws, bias) in h's memory; koi:
 * w is in the KOI layout ([kvol][cout][cin]). */
static voxconv_status_t run_op_w(voxconv_handle_t *h, const voxconv_kmap_t *km,
                                 const prob_t *p, const int8_t *x,
                                 const int8_t *w, int koi, const float *ws,
                                 const float *bias, voxconv_dtype_t ydt,
                                 void *y) {
  voxconv_feats_t xf = {(void *)x, p->n_in, p->cin, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {y, p->n_out, p->cout, ydt};
  voxconv_quant_params_t qp = {
      p->xs, ws, bias, p->relu, ydt == VOXCONV_DTYPE_I8 ? p->ys : 0.0f,
      koi ? VOXCONV_INT8_WEIGHTS_KOI : VOXCONV_INT8_WEIGHTS_KIO};
  const voxconv_quant_params_t *q = ydt == VOXCONV_DTYPE_I32 ? NULL : &qp;
  if (p->depthwise) {
    voxconv_feats_t wf = {(void *)w, p->kvol, p->cout, VOXCONV_DTYPE_I8};
    return voxconv_depthwise_forward_int8(h, km, &xf, &wf, q, &yf, NULL);
  }
  voxconv_weights_t wf = {(void *)w, p->kvol, p->cin, p->cout,
                          VOXCONV_DTYPE_I8};
  return voxconv_conv_forward_int8(h, km, &xf, &wf, q, &yf, NULL);
}

static voxconv_status_t run_op(voxconv_handle_t *h, const voxconv_kmap_t *km,
                               const prob_t *p, const int8_t *x,
                               const int8_t *w, const float *ws,
                               const float *bias, voxconv_dtype_t ydt,
                               void *y) {
  return run_op_w(h, km, p, x, w, 0, ws, bias, ydt, y);
}

/* ---- one problem on every tile and dtype ------------------------------ */
/* cpu_km: the same problem's CPU map with the same output rows, or NULL. */
static void check_problem(prob_t *p, const voxconv_kmap_t *cpu_km,
                          const char *what) {
  int64_t n_out;
  int64_t *ref = naive_acc(g_gpu, p->km, p->x, p->w, p->cin, p->cout,
                           p->depthwise, &n_out);
  const int64_t ne = p->n_out * p->cout;
  void *y = dr_xmalloc((size_t)ne * 4 + 1);
  void *exp = dr_xmalloc((size_t)ne * 4 + 1);
  void *ycpu = dr_xmalloc((size_t)ne * 4 + 1);
  void *yd = to_dev(NULL, (size_t)ne * 4 + 1);
  dev_prob_t d = upload(p);
  /* depthwise has one kernel; the regular conv every tile and the default */
  const int t_last = p->depthwise ? -1 : N_TILES - 1;
  for (int di = 0; di < 5; di++) {
    const voxconv_dtype_t dt = k_dts[di];
    const size_t bytes = (size_t)ne * esz(dt);
    model_expected(p, ref, dt, exp);
    if (cpu_km) {
      memset(ycpu, 0x5A, bytes);
      const voxconv_status_t st = run_op(g_cpu, cpu_km, p, p->x, p->w, p->ws,
                                         p->bias, dt, ycpu);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s %s cpu: %s", what,
                voxconv_dtype_name(dt), voxconv_get_last_error(g_cpu));
    }
    /* each tile unsplit, then split (regular conv); for F32 and I8 each
     * again with the weights in the KOI layout (the same bits) */
    const int layouts = d.wkoi && (di == 1 || di == 4) ? 2 : 1;
    for (int run = -1; run <= 2 * t_last + 1; run++)
      for (int koi = 0; koi < layouts; koi++) {
        const int t = run < 0 ? -1 : run / 2; /* run -1: the default */
        const int split = run >= 0 && (run & 1) ? split_for(t, di) : 1;
        set_tile(t);
        set_split(split);
        /* Poison, alternating 0x5A / 0xA5 from run to run: an element left
         * unwritten keeps it and differs from the model, unless the model's
         * value is that pattern, which it cannot be for both. */
        memset(y, ((run ^ koi) & 1) ? 0xA5 : 0x5A, bytes);
        voxconv_memcpy(g_gpu, yd, y, bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
        const voxconv_status_t st =
            run_op_w(g_gpu, p->km, p, d.x, koi ? d.wkoi : d.w, koi, d.ws,
                     p->bias ? d.bias : NULL, dt, yd);
        if (t >= 0 && !g_tile_ok[t]) {
          VC_EXPECT(st == VOXCONV_STATUS_UNSUPPORTED,
                    "%s tile %d (not eligible here): %s", what, t,
                    voxconv_status_string(st));
          continue;
        }
        VC_EXPECT(st == VOXCONV_STATUS_SUCCESS,
                  "%s %s tile %d split %d%s: %s: %s", what,
                  voxconv_dtype_name(dt), t, split, koi ? " KOI" : "",
                  voxconv_status_string(st), voxconv_get_last_error(g_gpu));
        if (st != VOXCONV_STATUS_SUCCESS)
          continue;
        voxconv_memcpy(g_gpu, y, yd, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST);
        int64_t bad;
        const int64_t nbad = model_mismatches(y, exp, dt, ne, &bad);
        VC_EXPECT(nbad == 0,
                  "%s %s tile %d split %d%s: %lld of %lld elements differ from "
                  "the model, first %lld (row %lld col %lld, acc %lld)",
                  what, voxconv_dtype_name(dt), t, split, koi ? " KOI" : "",
                  (long long)nbad, (long long)ne, (long long)bad,
                  bad >= 0 ? (long long)(bad / p->cout) : -1LL,
                  bad >= 0 ? (long long)(bad % p->cout) : -1LL,
                  bad >= 0 ? (long long)ref[bad] : 0LL);
        if (cpu_km)
          VC_EXPECT(memcmp(y, ycpu, bytes) == 0,
                    "%s %s tile %d split %d: GPU != CPU", what,
                    voxconv_dtype_name(dt), t, split);
        if (dt == VOXCONV_DTYPE_F32) {
          const int64_t nb = model_f32_outside_bound(p, ref, (const float *)y);
          VC_EXPECT(nb == 0, "%s tile %d: %lld F32 outputs outside the bound",
                    what, t, (long long)nb);
        }
      }
    set_tile(-1);
    set_split(1);
  }
  release(&d);
  voxconv_free(g_gpu, yd);
  free(y);
  free(exp);
  free(ycpu);
  free(ref);
}

static void check_gpu(prob_t *p, const char *what, const void *cpu_km) {
  check_problem(p, (const voxconv_kmap_t *)cpu_km, what);
}

static void run_case(const voxconv_kmap_t *km, const voxconv_kmap_t *cpu_km,
                     int depthwise, int64_t cin, int64_t cout,
                     const char *what) {
  prob_t p = model_prob(g_gpu, km, depthwise, cin, cout);
  model_variants(&p, g_quick ? 1 : 3, what, check_gpu, cpu_km);
  model_prob_free(&p);
}

/* ---- maps ---------------------------------------------------------------- */
static voxconv_kmap_t *build(voxconv_handle_t *h, voxconv_kmap_mode_t mode,
                             int k, int s, const int32_t *in, int64_t n_in,
                             int in_ts, const int32_t *out, int64_t n_out,
                             int out_ts) {
  voxconv_kmap_desc_t d = vc_test_kmap_desc(mode, k, k, k, s, 1);
  /* coordinates live in the handle's memory */
  const int gpu = h == g_gpu;
  const int32_t *din = gpu ? (const int32_t *)to_dev(in, (size_t)n_in * 16)
                           : in;
  const int32_t *dout =
      gpu && out ? (const int32_t *)to_dev(out, (size_t)n_out * 16) : out;
  voxconv_coords_t ci = {din, n_in, {in_ts, in_ts, in_ts}};
  voxconv_coords_t co = {dout, n_out, {out_ts, out_ts, out_ts}};
  voxconv_kmap_t *km = NULL;
  const voxconv_status_t st =
      vc_test_kmap_build(h, &d, &ci, out ? &co : NULL, &km);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "kmap build mode %d: %s", (int)mode,
            voxconv_get_last_error(h));
  if (gpu) { /* the map keeps its own copies */
    voxconv_free(g_gpu, (void *)din);
    if (dout)
      voxconv_free(g_gpu, (void *)dout);
  }
  return st == VOXCONV_STATUS_SUCCESS ? km : NULL;
}

static void test_modes(void) {
  int64_t n;
  int32_t *fine = vc_random_coords(g_quick ? 300 : 1500, 9, &n);
  int64_t nc;
  int32_t *coarse = model_coarsen(fine, n, &nc);
  voxconv_kmap_t *maps[6] = {0};
  const char *names[6] = {"submanifold", "strided", "expanding",
                          "transposed", "generative", "inverse"};
  maps[0] = build(g_gpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, fine, n, 1, NULL, 0, 0);
  maps[1] = build(g_gpu, VOXCONV_KMAP_STRIDED, 2, 2, fine, n, 1, NULL, 0, 0);
  maps[2] = build(g_gpu, VOXCONV_KMAP_EXPANDING, 3, 2, fine, n, 1, NULL, 0, 0);
  maps[3] = build(g_gpu, VOXCONV_KMAP_TRANSPOSED, 3, 2, coarse, nc, 2, fine, n,
                  1);
  maps[4] = build(g_gpu, VOXCONV_KMAP_GENERATIVE, 2, 2, coarse, nc, 2, NULL, 0,
                  0);
  if (maps[2])
    VC_EXPECT(voxconv_kmap_inverse(g_gpu, maps[2], &maps[5]) ==
                  VOXCONV_STATUS_SUCCESS,
              "inverse: %s", voxconv_get_last_error(g_gpu));
  voxconv_kmap_t *cpu_sub =
      build(g_cpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, fine, n, 1, NULL, 0, 0);
  /* 1 and 3: a first layer; 17, 33, 130: not multiples of 16 or 32 */
  static const int64_t chans[7] = {1, 3, 17, 33, 64, 130, 256};
  for (int m = 0; m < 6; m++) {
    if (!maps[m])
      continue;
    for (int t = 0; t < (g_quick ? 1 : 2); t++)
      run_case(maps[m], m == 0 ? cpu_sub : NULL, 0,
               chans[vc_rand_range(0, 6)], chans[vc_rand_range(0, 6)],
               names[m]);
    const int64_t ch = chans[vc_rand_range(0, 6)];
    run_case(maps[m], m == 0 ? cpu_sub : NULL, 1, ch, ch, names[m]);
  }
  if (!g_quick && maps[0])
    for (int c = 0; c < 7; c++) { /* every channel count, both ops */
      run_case(maps[0], cpu_sub, 0, chans[c], chans[6 - c], "all-ch");
      run_case(maps[0], cpu_sub, 1, chans[c], chans[c], "all-ch");
    }
  for (int m = 0; m < 6; m++)
    voxconv_kmap_destroy(g_gpu, maps[m]);
  voxconv_kmap_destroy(g_cpu, cpu_sub);
  free(fine);
  free(coarse);
}

/* A crop of workload A (the real scan): ~20k voxels, C = 64, and 33 -> 64
 * through a strided map. */
static void test_real_scan(void) {
  int64_t m;
  int32_t *c = model_scan_crop(&m);
  if (!c)
    return;
  voxconv_kmap_t *sub =
      build(g_gpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, m, 1, NULL, 0, 0);
  voxconv_kmap_t *csub =
      build(g_cpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, m, 1, NULL, 0, 0);
  voxconv_kmap_t *str =
      build(g_gpu, VOXCONV_KMAP_STRIDED, 2, 2, c, m, 1, NULL, 0, 0);
  if (sub) {
    run_case(sub, csub, 0, 64, 64, "scan submanifold");
    run_case(sub, csub, 1, 64, 64, "scan submanifold");
  }
  if (str)
    run_case(str, NULL, 0, 33, 64, "scan strided");
  voxconv_kmap_destroy(g_gpu, sub);
  voxconv_kmap_destroy(g_cpu, csub);
  voxconv_kmap_destroy(g_gpu, str);
  free(c);
}

/* kvol 1 submanifold on n rows: y[r] = epilogue(x[r] . w). */
static voxconv_kmap_t *identity_map(int64_t n, int32_t **coords) {
  *coords = model_line_coords(n);
  return build(g_gpu, VOXCONV_KMAP_SUBMANIFOLD, 1, 1, *coords, n, 1, NULL, 0,
               0);
}

/* Exact ties: x_scale = w_scale = 1, w = 1, y_scale = 2: t = acc / 2, so odd
 * acc gives ties (1.5 -> 2, 2.5 -> 2, -0.5 -> 0); y_scale 0.5 clamps at
 * +-127, never -128; relu zeroes negatives. On every tile. */
static void test_ties_and_clamp(void) {
  static const int8_t xv[] = {1, 3, 5, -1, -3, -5, 7, 0, 127, -128, -127, 9,
                              11, -11};
  static const int8_t want_half[] = {0, 2, 2, 0, -2, -2, 4, 0, 64, -64, -64,
                                     4, 6, -6};
  const int64_t n = (int64_t)(sizeof xv / sizeof xv[0]);
  int32_t *c;
  voxconv_kmap_t *km = identity_map(n, &c);
  if (!km)
    return;
  const int8_t w1 = 1;
  const float one = 1.0f;
  int8_t *dx = (int8_t *)to_dev(xv, (size_t)n);
  int8_t *dw = (int8_t *)to_dev(&w1, 1);
  float *dws = (float *)to_dev(&one, sizeof one);
  int8_t *dy = (int8_t *)to_dev(NULL, (size_t)n);
  voxconv_feats_t x = {dx, n, 1, VOXCONV_DTYPE_I8};
  voxconv_weights_t w = {dw, 1, 1, 1, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {dy, n, 1, VOXCONV_DTYPE_I8};
  for (int t = -1; t < N_TILES; t++) {
    if (t >= 0 && !g_tile_ok[t])
      continue;
    set_tile(t);
    for (int mode = 0; mode < 3; mode++) {
      /* 0: y_scale 2 (ties), 1: y_scale 0.5 (clamp), 2: 0.5 with relu */
      voxconv_quant_params_t qp = {1.0f, dws, NULL, mode == 2,
                                   mode == 0 ? 2.0f : 0.5f,
                                   VOXCONV_INT8_WEIGHTS_KIO};
      int8_t y[16];
      memset(y, 0x5A, sizeof y);
      voxconv_memcpy(g_gpu, dy, y, (size_t)n, VOXCONV_MEMCPY_HOST_TO_BACKEND);
      VC_EXPECT_STATUS(g_gpu, voxconv_conv_forward_int8(g_gpu, km, &x, &w, &qp,
                                                        &yf, NULL),
                       VOXCONV_STATUS_SUCCESS);
      voxconv_memcpy(g_gpu, y, dy, (size_t)n, VOXCONV_MEMCPY_BACKEND_TO_HOST);
      for (int64_t i = 0; i < n; i++) {
        int want = xv[i] * 2;
        want = want > 127 ? 127 : (want < -127 ? -127 : want);
        if (mode == 0)
          want = want_half[i];
        if (mode == 2 && want < 0)
          want = 0;
        VC_EXPECT(y[i] == want, "tile %d mode %d: x=%d -> %d, want %d", t,
                  mode, xv[i], y[i], want);
      }
    }
  }
  set_tile(-1);
  voxconv_free(g_gpu, dx);
  voxconv_free(g_gpu, dw);
  voxconv_free(g_gpu, dws);
  voxconv_free(g_gpu, dy);
  voxconv_kmap_destroy(g_gpu, km);
  free(c);
}

/* The int8 output's division (voxconv.h step 5: t = v / y_scale correctly
 * rounded, then rounded to an integer), which the kernels compute without
 * a division where y_scale lies in 2^-100..2^100 and |v| < 2^100
 * (Markstein's correction, src/cuda/cuda_int8.cu i8_quotient) and with
 * __fdiv_rn elsewhere. y_scale over every binade from 2^-126 to 2^120
 * (both sides of those bounds), per channel c a scale m_c and bias b_c
 * drawn so that v / y_scale spreads over [-140, 140] -- where the integer
 * depends on the quotient's last bits -- plus one channel whose |v| is
 * past 2^100 when y_scale allows it. cin = 1, w = 1 and x_scale = 1 on an
 * identity map, so v = fmaf(x, w_scale[c], b_c); against the model's
 * division, bit for bit, on every tile. */
static void test_division(void) {
  const int64_t n = 512, C = 64;
  int32_t *c;
  voxconv_kmap_t *km = identity_map(n, &c);
  if (!km)
    return;
  int8_t xv[512], w1 = 1, got[512 * 64], want[512 * 64];
  float ws[64], bias[64];
  for (int64_t i = 0; i < n; i++)
    xv[i] = (int8_t)vc_rand_range(-128, 127);
  int8_t *dx = (int8_t *)to_dev(xv, (size_t)n);
  int8_t *dw = (int8_t *)to_dev(NULL, (size_t)C);
  float *dws = (float *)to_dev(NULL, sizeof ws);
  float *db = (float *)to_dev(NULL, sizeof bias);
  int8_t *dy = (int8_t *)to_dev(NULL, sizeof got);
  int8_t wrow[64];
  memset(wrow, w1, sizeof wrow);
  voxconv_memcpy(g_gpu, dw, wrow, (size_t)C, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  voxconv_feats_t x = {dx, n, 1, VOXCONV_DTYPE_I8};
  voxconv_weights_t w = {dw, 1, 1, C, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {dy, n, C, VOXCONV_DTYPE_I8};
  const int step = g_quick ? 9 : 1;
  /* to 2^120: bias and x m_c (up to ~140 y_scale) stay finite */
  for (int e = -126; e <= 120; e += step) {
    const float ys = ldexpf((float)(1.0 + vc_rand_uniform()), e);
    for (int64_t k = 0; k < C; k++) {
      /* |x m_c| + |b_c| reaches about 140 y_scale */
      ws[k] = ys * (float)(0.01 + 0.9 * vc_rand_uniform());
      bias[k] = ys * (float)(30.0 * (2.0 * vc_rand_uniform() - 1.0));
    }
    if (ys < 0x1p90f) { /* |v| past 2^100: t saturates, via __fdiv_rn */
      ws[C - 1] = 0x1p100f;
      bias[C - 1] = -0x1p101f;
    }
    voxconv_memcpy(g_gpu, dws, ws, sizeof ws, VOXCONV_MEMCPY_HOST_TO_BACKEND);
    voxconv_memcpy(g_gpu, db, bias, sizeof bias,
                   VOXCONV_MEMCPY_HOST_TO_BACKEND);
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < C; k++)
        model_store(want, VOXCONV_DTYPE_I8, i * C + k,
                    model_v(xv[i], 1.0f, ws[k], bias[k], 0), ys);
    voxconv_quant_params_t qp = {1.0f, dws, db, 0, ys,
                                 VOXCONV_INT8_WEIGHTS_KIO};
    for (int t = -1; t < N_TILES; t++) {
      if (t >= 0 && !g_tile_ok[t])
        continue;
      set_tile(t);
      memset(got, 0x5A, sizeof got);
      voxconv_memcpy(g_gpu, dy, got, sizeof got,
                     VOXCONV_MEMCPY_HOST_TO_BACKEND);
      VC_EXPECT_STATUS(g_gpu, voxconv_conv_forward_int8(g_gpu, km, &x, &w, &qp,
                                                        &yf, NULL),
                       VOXCONV_STATUS_SUCCESS);
      voxconv_memcpy(g_gpu, got, dy, sizeof got,
                     VOXCONV_MEMCPY_BACKEND_TO_HOST);
      int64_t first;
      const int64_t bad =
          model_mismatches(got, want, VOXCONV_DTYPE_I8, n * C, &first);
      VC_EXPECT(bad == 0,
                "division, tile %d, y_scale %a: %lld of %lld differ (first "
                "[%lld][%lld]: %d, want %d)",
                t, (double)ys, (long long)bad, (long long)(n * C),
                (long long)(first < 0 ? 0 : first / C),
                (long long)(first < 0 ? 0 : first % C),
                first < 0 ? 0 : got[first], first < 0 ? 0 : want[first]);
    }
  }
  set_tile(-1);
  voxconv_free(g_gpu, dx);
  voxconv_free(g_gpu, dw);
  voxconv_free(g_gpu, dws);
  voxconv_free(g_gpu, db);
  voxconv_free(g_gpu, dy);
  voxconv_kmap_destroy(g_gpu, km);
  free(c);
}

/* All -128 at kvol * cin = 131071: acc = 131071 * 16384 = 2^31 - 2^14,
 * exact in int32 on the tensor cores too. */
static void test_extreme_acc(void) {
  const int64_t n = 3, cin = 131071;
  int32_t *c;
  voxconv_kmap_t *km = identity_map(n, &c);
  if (!km)
    return;
  int8_t *x = (int8_t *)dr_xmalloc((size_t)(n * cin));
  int8_t *w = (int8_t *)dr_xmalloc((size_t)cin * 2);
  memset(x, 0x80, (size_t)(n * cin));
  memset(w, 0x80, (size_t)cin * 2);
  int8_t *dx = (int8_t *)to_dev(x, (size_t)(n * cin));
  int8_t *dw = (int8_t *)to_dev(w, (size_t)cin * 2);
  int32_t *dy = (int32_t *)to_dev(NULL, sizeof(int32_t) * 6);
  voxconv_feats_t xf = {dx, n, cin, VOXCONV_DTYPE_I8};
  voxconv_weights_t wf = {dw, 1, cin, 2, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {dy, n, 2, VOXCONV_DTYPE_I32};
  /* every tile unsplit and split 3 ways (one offset: two slices empty) */
  for (int run = -1; run < 2 * N_TILES; run++) {
    const int t = run < 0 ? -1 : run / 2;
    if (t >= 0 && !g_tile_ok[t])
      continue;
    set_tile(t);
    set_split(run >= 0 && (run & 1) ? 3 : 1);
    int32_t y[6];
    memset(y, 0x5A, sizeof y);
    voxconv_memcpy(g_gpu, dy, y, sizeof y, VOXCONV_MEMCPY_HOST_TO_BACKEND);
    VC_EXPECT_STATUS(g_gpu, voxconv_conv_forward_int8(g_gpu, km, &xf, &wf,
                                                      NULL, &yf, NULL),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_memcpy(g_gpu, y, dy, sizeof y, VOXCONV_MEMCPY_BACKEND_TO_HOST);
    for (int i = 0; i < 6; i++)
      VC_EXPECT(y[i] == 2147467264, "extreme tile %d run %d: y[%d]=%d", t,
                run, i, y[i]);
  }
  set_tile(-1);
  set_split(1);
  voxconv_free(g_gpu, dx);
  voxconv_free(g_gpu, dw);
  voxconv_free(g_gpu, dy);
  free(x);
  free(w);
  voxconv_kmap_destroy(g_gpu, km);
  free(c);
}

static void test_bad_input(void) {
  const int64_t n = 4;
  int32_t *c;
  voxconv_kmap_t *km = identity_map(n, &c);
  voxconv_kmap_t *cpu_km =
      build(g_cpu, VOXCONV_KMAP_SUBMANIFOLD, 1, 1, c, n, 1, NULL, 0, 0);
  if (!km || !cpu_km)
    return;
  int8_t *dx = (int8_t *)to_dev(NULL, (size_t)n);
  int8_t *dw = (int8_t *)to_dev(NULL, 1);
  int32_t *dy = (int32_t *)to_dev(NULL, sizeof(int32_t) * (size_t)n);
  voxconv_memcpy(g_gpu, dx, "\1\2\3\4", 4, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  voxconv_memcpy(g_gpu, dw, "\1", 1, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  voxconv_feats_t xf = {dx, n, 1, VOXCONV_DTYPE_I8};
  voxconv_weights_t wf = {dw, 1, 1, 1, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {dy, n, 1, VOXCONV_DTYPE_I32};
  setenv("VOXCONV_INT8_TILE", "99", 1);
  VC_EXPECT_STATUS(g_gpu, voxconv_conv_forward_int8(g_gpu, km, &xf, &wf, NULL,
                                                    &yf, NULL),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT(strstr(voxconv_get_last_error(g_gpu), "VOXCONV_INT8_TILE") != NULL,
            "message names the knob: %s", voxconv_get_last_error(g_gpu));
  setenv("VOXCONV_INT8_TILE", "auto", 1);
  VC_EXPECT_STATUS(g_gpu, voxconv_conv_forward_int8(g_gpu, km, &xf, &wf, NULL,
                                                    &yf, NULL),
                   VOXCONV_STATUS_SUCCESS);
  set_tile(-1);
  VC_EXPECT_STATUS(g_gpu, voxconv_conv_forward_int8(g_gpu, cpu_km, &xf, &wf,
                                                    NULL, &yf, NULL),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  voxconv_free(g_gpu, dx);
  voxconv_free(g_gpu, dw);
  voxconv_free(g_gpu, dy);
  voxconv_kmap_destroy(g_gpu, km);
  voxconv_kmap_destroy(g_cpu, cpu_km);
  free(c);
}

/* One small submanifold problem of each op (the --race run). */
/* The int8 tuner on the GPU (src/tune/tune_int8.c): in a fresh cache, the
 * first call of a configuration measures every tile this device runs --
 * each checked bit for bit against the reference tile, so a row "ok" for
 * every usable tile is the GPU's own statement that all tiles agree on a
 * real-scan problem -- and runs the fastest; the repeat call comes from
 * the memo; the output is the model's. */
static void test_tuner(void) {
  int64_t m;
  int32_t *c = model_scan_crop(&m);
  if (!c)
    c = vc_random_coords(20000, 60, &m);
  voxconv_kmap_t *km =
      build(g_gpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, m, 1, NULL, 0, 0);
  if (!km) {
    free(c);
    return;
  }
  char dir[] = "/tmp/voxconv-int8-tune-XXXXXX";
  if (!mkdtemp(dir)) {
    VC_EXPECT(0, "mkdtemp failed");
    return;
  }
  char *saved = getenv("VOXCONV_BENCHMARK_CACHE_DIR");
  saved = saved ? strdup(saved) : NULL;
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", dir, 1);
  vc_cache_forget();
  set_tile(-1);
  prob_t p = model_prob(g_gpu, km, 0, 64, 64);
  int64_t n_out;
  int64_t *ref = naive_acc(g_gpu, km, p.x, p.w, p.cin, p.cout, 0, &n_out);
  const int64_t ne = p.n_out * p.cout;
  void *exp = dr_xmalloc((size_t)ne * 2), *got = dr_xmalloc((size_t)ne * 2);
  model_expected(&p, ref, VOXCONV_DTYPE_F16, exp);
  dev_prob_t d = upload(&p);
  void *dy = to_dev(NULL, (size_t)ne * 2);
  /* Tile 18's own kernel takes first layers only; at cin 64 it would run
   * the default tile, so the tuner leaves it out (runs_as). */
  int usable = 0;
  for (int t = 0; t < N_TILES; t++)
    usable += g_tile_ok[t] && t != IM2COL_TILE;
  for (int call = 0; call < 2; call++) {
    memset(got, 0x5A, (size_t)ne * 2);
    voxconv_memcpy(g_gpu, dy, got, (size_t)ne * 2,
                   VOXCONV_MEMCPY_HOST_TO_BACKEND);
    VC_EXPECT_STATUS(g_gpu, run_op(g_gpu, km, &p, d.x, d.w, d.ws, d.bias,
                                   VOXCONV_DTYPE_F16, dy),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_memcpy(g_gpu, got, dy, (size_t)ne * 2,
                   VOXCONV_MEMCPY_BACKEND_TO_HOST);
    int64_t first;
    const int64_t bad =
        model_mismatches(got, exp, VOXCONV_DTYPE_F16, ne, &first);
    voxconv_call_info_t ci;
    voxconv_get_last_call_info(g_gpu, &ci);
    int tile = -1;
    sscanf(ci.params, "tile=%d", &tile);
    VC_EXPECT(bad == 0, "tuner call %d (%s): %lld outputs differ", call,
              ci.params, (long long)bad);
    VC_EXPECT(strcmp(ci.algo, "mask_gemm_i8") == 0 && tile >= 0 &&
                  tile < N_TILES && g_tile_ok[tile] &&
                  ci.from_cache == (call > 0) && ci.time_ms > 0,
              "tuner call %d: %s %s from_cache %d time %g", call, ci.algo,
              ci.params, ci.from_cache, ci.time_ms);
    printf("int8 tuner, scan crop %lld rows, C 64 -> f16: call %d ran %s %s "
           "(%.4f ms, from_cache %d)\n",
           (long long)p.n_out, call, ci.algo, ci.params, ci.time_ms,
           ci.from_cache);
  }
  vc_cache_key_t key;
  vc_int8_problem_t q;
  memset(&q, 0, sizeof q);
  q.kmap = km;
  q.cin = p.cin;
  q.cout = p.cout;
  q.y_dtype = VOXCONV_DTYPE_F16;
  vc_tune_int8_key(g_gpu, &q, &key);
  vc_cache_entry_t e;
  const int found = vc_cache_get(VC_INT8_NS, &key, 0, &e);
  VC_EXPECT(found, "no int8 cache entry after tuning");
  if (found) {
    /* each usable tile once unsplit; split rows (small problems) besides */
    int ok = 0, stand_in = 0, split_rows = 0, split_ok = 0;
    for (int r = 0; r < e.n_rows; r++) {
      const int split = strstr(e.rows[r].params, ",split=") != NULL;
      split_rows += split;
      ok += !split && vc_cache_row_ok(&e.rows[r]);
      split_ok += split && vc_cache_row_ok(&e.rows[r]);
      stand_in += strncmp(e.rows[r].params, "tile=18", 7) == 0;
      printf("  %s %s %.4f ms %s\n", e.rows[r].algo, e.rows[r].params,
             e.rows[r].time_ms, e.rows[r].status);
    }
    VC_EXPECT(e.n_rows - split_rows == usable && ok == usable &&
                  split_ok == split_rows && !stand_in,
              "tuned %d tiles (%d split, %d of them ok), %d unsplit ok; %d "
              "usable (tile 18 listed: %d)",
              e.n_rows, split_rows, split_ok, ok, usable, stand_in);
    vc_cache_entry_free(&e);
  }
  release(&d);
  voxconv_free(g_gpu, dy);
  free(exp);
  free(got);
  free(ref);
  model_prob_free(&p);
  voxconv_kmap_destroy(g_gpu, km);
  free(c);
  if (saved) {
    setenv("VOXCONV_BENCHMARK_CACHE_DIR", saved, 1);
    free(saved);
  } else {
    unsetenv("VOXCONV_BENCHMARK_CACHE_DIR");
  }
  vc_cache_forget();
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

/* int8 max pooling on the GPU against the model over the GPU map's own
 * pairs: packed 16-channel lanes (C % 16 == 0, vc_pool_max_i8_kernel) and
 * single channels (the float kernel's int8 instantiation), a 2^3 map (the
 * unrolled K = 8 loop) and a 3^3 one (the runtime-K loop). */
static void test_max_pool(void) {
  int64_t n;
  int32_t *c = vc_random_coords(g_quick ? 300 : 3000, 9, &n);
  voxconv_kmap_t *st =
      build(g_gpu, VOXCONV_KMAP_STRIDED, 2, 2, c, n, 1, NULL, 0, 0);
  voxconv_kmap_t *sub =
      build(g_gpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, n, 1, NULL, 0, 0);
  static const int64_t chans[4] = {1, 17, 32, 64};
  for (int i = 0; i < 4; i++) {
    if (st)
      model_check_max_pool(g_gpu, st, chans[i], "GPU strided k2 s2");
    if (sub) /* 27 offsets: the kernels' runtime-K loops */
      model_check_max_pool(g_gpu, sub, chans[i], "GPU submanifold");
  }
  voxconv_kmap_destroy(g_gpu, st);
  voxconv_kmap_destroy(g_gpu, sub);
  free(c);
}

/* Tile 18's kernel runs at most 2 blocks a SM, each looping over row
 * tiles of 128 with the next tile's gathers in the other buffer (item
 * 133): only a first layer of more than 2 x SMs x 128 rows makes blocks
 * loop, and the problems above are smaller. Tile 18 (and the default,
 * which is tile 18 here) on such a layer, F16 and I8 outputs, against the
 * model. `rows` is the number of random coordinates asked for. */
static void test_first_layer_loop(int64_t rows) {
  int64_t n;
  int32_t *c = vc_random_coords(rows, 80, &n);
  voxconv_kmap_t *km =
      build(g_gpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, n, 1, NULL, 0, 0);
  if (!km) {
    free(c);
    return;
  }
  prob_t p = model_prob(g_gpu, km, 0, 3, 64);
  int64_t n_out;
  int64_t *ref = naive_acc(g_gpu, p.km, p.x, p.w, p.cin, p.cout, 0, &n_out);
  const int64_t ne = p.n_out * p.cout;
  void *y = dr_xmalloc((size_t)ne * 2), *exp = dr_xmalloc((size_t)ne * 2);
  void *yd = to_dev(NULL, (size_t)ne * 2);
  dev_prob_t d = upload(&p);
  static const voxconv_dtype_t dts[2] = {VOXCONV_DTYPE_F16, VOXCONV_DTYPE_I8};
  for (int di = 0; di < 2; di++) {
    const size_t bytes = (size_t)ne * esz(dts[di]);
    model_expected(&p, ref, dts[di], exp);
    for (int t = -1; t <= IM2COL_TILE; t += IM2COL_TILE + 1) {
      set_tile(t);
      memset(y, di ? 0xA5 : 0x5A, bytes);
      voxconv_memcpy(g_gpu, yd, y, bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
      VC_EXPECT_STATUS(g_gpu,
                       run_op(g_gpu, p.km, &p, d.x, d.w, d.ws, d.bias,
                              dts[di], yd),
                       VOXCONV_STATUS_SUCCESS);
      voxconv_memcpy(g_gpu, y, yd, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST);
      int64_t first;
      const int64_t bad = model_mismatches(y, exp, dts[di], ne, &first);
      VC_EXPECT(bad == 0,
                "first layer, %lld rows, %s, tile %d: %lld of %lld outputs "
                "differ from the model (first %lld)",
                (long long)p.n_out, voxconv_dtype_name(dts[di]), t,
                (long long)bad, (long long)ne, (long long)first);
    }
    set_tile(-1);
  }
  printf("first layer 3 -> 64 over %lld rows (tile 18's blocks loop over "
         "row tiles)\n",
         (long long)p.n_out);
  release(&d);
  voxconv_free(g_gpu, yd);
  free(y);
  free(exp);
  free(ref);
  model_prob_free(&p);
  voxconv_kmap_destroy(g_gpu, km);
  free(c);
}

static void test_race(void) {
  int64_t n;
  int32_t *c = vc_random_coords(200, 6, &n);
  voxconv_kmap_t *km =
      build(g_gpu, VOXCONV_KMAP_SUBMANIFOLD, 3, 1, c, n, 1, NULL, 0, 0);
  if (km) {
    run_case(km, NULL, 0, 33, 40, "race");
    run_case(km, NULL, 0, 3, 24, "race im2col"); /* cin < 16: im2col rows */
    run_case(km, NULL, 1, 24, 24, "race");
  }
  voxconv_kmap_destroy(g_gpu, km);
  free(c);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      g_quick = 1;
    if (strcmp(argv[i], "--race") == 0)
      g_race = g_quick = 1;
    if (strcmp(argv[i], "--pool") == 0) /* the pooling cases alone */
      g_pool_only = 1;
  }
  vc_test_init("test_cuda_int8");
  /* the default-tile cases tune: one timed run per tile keeps the
   * sanitizer runs (--quick, --race) short */
  if (g_quick)
    setenv("VOXCONV_AUTOTUNE_RUNS", "1", 0);
  int devices = 0;
  if (voxconv_device_count(&devices) != VOXCONV_STATUS_SUCCESS ||
      devices == 0) {
    printf("test_cuda_int8: SKIPPED: no CUDA device (voxconv_has_cuda()=%d, "
           "voxconv_device_count=%d)\n",
           voxconv_has_cuda(), devices);
    return VC_TEST_SKIP;
  }
  voxconv_handle_desc_t dc, dg;
  memset(&dc, 0, sizeof dc);
  memset(&dg, 0, sizeof dg);
  dc.backend = VOXCONV_BACKEND_CPU;
  dg.backend = VOXCONV_BACKEND_CUDA;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_cpu, &dc));
  VC_REQUIRE_OK(NULL, voxconv_create(&g_gpu, &dg));
  {
    voxconv_device_info_t di;
    if (voxconv_device_get_info(0, &di) == VOXCONV_STATUS_SUCCESS)
      g_sm90 = di.cc_major == 9 && di.cc_minor == 0;
  }
  find_tiles();
  if (g_pool_only) {
    test_max_pool();
  } else if (g_race) {
    test_bad_input();
    test_ties_and_clamp();
    test_max_pool();
    test_race();
    /* two or three row tiles a block on a 132-SM GPU */
    test_first_layer_loop(80000);
  } else {
    test_bad_input();
    test_ties_and_clamp();
    test_max_pool();
    test_first_layer_loop(300000);
    test_division();
    test_tuner();
    test_extreme_acc();
    test_modes();
    test_real_scan();
  }
  voxconv_destroy(g_gpu);
  voxconv_destroy(g_cpu);
  return vc_test_finish();
}
