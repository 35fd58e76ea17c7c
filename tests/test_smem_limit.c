/* Tiles over the GPU's shared memory per block (issue 21 item 7: machine
 * code for sm_80, sm_86, sm_89 and sm_90a). mask_gemm's mma.sync tiles 8
 * and 9 take ~110 KB of shared memory, sm_86 / sm_89 allow 99 KB per block
 * (sm_80 163 KB, sm_90 227 KB); such a tile must never be tuned or
 * launched there, and running it by hand must give a named status.
 *
 *  1. Host only, any build: the tuner honours a record's params_supported.
 *     A CPU fake whose fastest tiles are "over the limit": they are never
 *     run (as candidates, as the reference's default, from a cached row
 *     that names them), never recorded, and with no eligible tile left the
 *     call is UNSUPPORTED.
 *  2. Host only, CUDA build (no GPU needed): the dynamic shared memory of
 *     every tile (the table in cuda_mask_gemm.cu), the fit rule at 99, 163
 *     and 227 KB, and the parser of the test knob VOXCONV_CUDA_SMEM_LIMIT.
 *  3. GPU (skipped without one): a handle created with
 *     VOXCONV_CUDA_SMEM_LIMIT=99K behaves as an sm_86 would: `voxconv info
 *     --kernels`' data marks tiles 8 and 9 (and every kernel over 99 KB) not
 *     eligible, with each row's static shared memory below the bound the
 *     rule assumes; running tile 8 / 9 by hand is VOXCONV_STATUS_UNSUPPORTED
 *     with a message and leaves the handle usable; a cached row naming
 *     tile 8 is passed over; tuning (one algorithm, auto, all; forward,
 *     dgrad, wgrad) never picks or records an ineligible point, and the
 *     results match the CPU fp64 reference. A handle without the knob
 *     finds every kernel eligible on an sm_90 (wgmma tiles 3 and 7 fit by
 *     112 and 16 bytes there).
 *
 * On the GPU machine: ctest -R test_smem_limit (or run
 * <build>/tests/test_smem_limit). */
#include "tune_test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* CUDA-build internals (src/cuda): absent in a CPU-only build. */
long vc_mask_gemm_tile_dyn_smem(const char *algo, voxconv_pass_t pass, int tile,
                                int acc16);
int vc_smem_fit(size_t dyn, size_t limit);
size_t vc_smem_limit_from_env(const char *text, size_t device);
#pragma weak vc_mask_gemm_tile_dyn_smem
#pragma weak vc_smem_fit
#pragma weak vc_smem_limit_from_env

#define KB99 101376u  /* sm_86 / sm_89: sharedMemPerBlockOptin */
#define KB163 166912u /* sm_80 */
#define KB227 232448u /* sm_90 */

/* ---- 1. the tuner and params_supported (CPU fake) ------------------------ */
/* fake_smem: tile t takes delay[t] virtual ms and needs smem[t] KB; the
 * fastest tiles (3, then 1) are over the fake limit. Its first value (the
 * plain default) is tile 3. */
static const int k_delay_ms[4] = {5, 2, 3, 1};
static const int k_smem_kb[4] = {40, 110, 60, 120};
static int g_fake_limit_kb = 99;
static int g_over_runs;    /* runs of a tile over the limit: must stay 0 */
#define FAKE_SMEM_INDEX 15 /* its slot in tt_runs */

static const vc_param_space_t fake_smem_space = {
    1, {"mma_tile"}, {4}, {{3, 0, 1, 2}}};
static const vc_param_space_t *fake_smem_ps(voxconv_pass_t pass) {
  (void)pass;
  return &fake_smem_space;
}
static int fake_smem_fits(const voxconv_handle_t *h, const vc_conv_problem_t *p,
                          const vc_algo_params_t *prm) {
  (void)h, (void)p;
  return prm->v[0] >= 0 && prm->v[0] < 4 &&
         k_smem_kb[prm->v[0]] <= g_fake_limit_kb;
}
static voxconv_status_t fake_smem_run(voxconv_handle_t *h,
                                      const vc_conv_problem_t *p,
                                      const vc_algo_params_t *prm, void *ws) {
  (void)ws;
  if (!fake_smem_fits(h, p, prm)) {
    g_over_runs++;
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "fake_smem: tile %d over the shared memory limit",
                   prm->v[0]);
  }
  return tt_fake_body(h, p, FAKE_SMEM_INDEX, TT_CORRECT, k_delay_ms[prm->v[0]],
                      0);
}
static const vc_algo_t fake_smem = {{"fake_smem", VOXCONV_BACKEND_CPU,
                                     TT_REGULAR, 1,
                                     "test: tiles over a shared-memory limit"},
                                    tt_supports_cpu_regular,
                                    fake_smem_ps,
                                    NULL,
                                    fake_smem_run,
                                    fake_smem_fits};

/* Every row of entry (ns, key of p) names an eligible point. */
static void expect_rows_eligible(const char *ns, const voxconv_handle_t *h,
                                 const vc_conv_problem_t *p, const char *what) {
  vc_cache_key_t key;
  vc_tune_make_key((voxconv_handle_t *)h, p, &key);
  vc_cache_entry_t e;
  memset(&e, 0, sizeof e);
  if (!vc_cache_get(ns, &key, 0, &e)) {
    VC_EXPECT(0, "%s: no cache entry %s", what, ns);
    return;
  }
  for (int r = 0; r < e.n_rows; r++) {
    const vc_algo_t *a = vc_tune_algo_find(e.rows[r].algo, p->pass);
    vc_algo_params_t prm;
    if (!a || !vc_params_parse(a, p->pass, e.rows[r].params, &prm))
      continue; /* not ours to judge */
    vc_conv_problem_t q = *p;
    q.fp16_accum = vc_params_f16_accum(a, p->pass, &prm);
    VC_EXPECT(vc_algo_params_supported(a, h, &q, &prm),
              "%s: %s records %s(%s), a point over the limit", what, ns,
              e.rows[r].algo, e.rows[r].params);
  }
  vc_cache_entry_free(&e);
}

/* A cached answer (selection entry and fake_smem's own, both full) ranking
 * the ineligible tile 3 first. */
static void put_cached_answer(const char *ns, const vc_cache_key_t *key,
                              const char *algo, const char *bad_params,
                              const char *good_params) {
  for (int sub = 0; sub < 2; sub++) {
    vc_cache_entry_t e;
    memset(&e, 0, sizeof e);
    if (sub)
      snprintf(e.ns, sizeof e.ns, "%s/%s", ns, algo);
    else
      snprintf(e.ns, sizeof e.ns, "%s", ns);
    e.key = *key;
    e.coverage = sub ? VC_COVER_FULL : 0;
    vc_cache_row_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.algo, sizeof r.algo, "%s", algo);
    snprintf(r.status, sizeof r.status, "ok");
    r.max_rel = 1e-4;
    snprintf(r.params, sizeof r.params, "%s", bad_params);
    r.time_ms = 0.001;
    vc_cache_entry_put_row(&e, &r);
    snprintf(r.params, sizeof r.params, "%s", good_params);
    r.time_ms = 1.0;
    vc_cache_entry_put_row(&e, &r);
    vc_cache_entry_sort(&e);
    vc_cache_put(&e);
    vc_cache_entry_free(&e);
  }
}

static void test_tuner_skips_ineligible(void) {
  tt_fresh_cache_dir();
  static const vc_algo_t *extra[1] = {&fake_smem};
  vc_tune_set_extra_algos(extra, 1);
  vc_tune_extra_first = 1; /* fake_smem is the reference: its default runs */
  tt_virtual_clock(1);
  tt_problem_t t;
  if (tt_problem_make(&t, 8, 6, 7, VOXCONV_DTYPE_F32, 2) != 0) {
    VC_EXPECT(0, "problem setup failed");
    goto done;
  }
  const voxconv_pass_t passes[] = {
      VOXCONV_PASS_CONV_FWD, VOXCONV_PASS_CONV_DGRAD, VOXCONV_PASS_CONV_WGRAD};
  for (int pi = 0; pi < 3; pi++) {
    const voxconv_pass_t pass = passes[pi];
    const char *ns = vc_cache_pass_namespace((int)pass);
    const vc_conv_problem_t p = tt_as_problem(&t, pass);
    const int64_t n_out = tt_out_elems(&t, pass);
    static const char *const modes[] = {"fake_smem", "all", NULL};
    for (int mi = 0; mi < 3; mi++) {
      g_over_runs = 0;
      voxconv_conv_options_t opt = {0};
      opt.fwd_algo = opt.bwd_algo = modes[mi];
      vc_poison(t.out, t.dtype, n_out);
      VC_EXPECT_STATUS(t.h, tt_run(&t, pass, &opt), VOXCONV_STATUS_SUCCESS);
      voxconv_call_info_t info;
      voxconv_get_last_call_info(t.h, &info);
      VC_EXPECT(g_over_runs == 0,
                "%s %s: a tile over the limit ran %d times (candidate or "
                "default)",
                ns, modes[mi] ? modes[mi] : "auto", g_over_runs);
      if (mi == 0)
        VC_EXPECT(strcmp(info.algo, "fake_smem") == 0 &&
                      strcmp(info.params, "mma_tile=2") == 0,
                  "%s: winner %s(%s), want the fastest eligible tile 2", ns,
                  info.algo, info.params);
      VC_EXPECT(strcmp(info.algo, "fake_smem") != 0 ||
                    (strcmp(info.params, "mma_tile=3") != 0 &&
                     strcmp(info.params, "mma_tile=1") != 0),
                "%s %s: picked %s", ns, modes[mi] ? modes[mi] : "auto",
                info.params);
      VC_EXPECT(vc_count_poison(t.out, t.dtype, n_out) == 0,
                "%s: output not written", ns);
      expect_rows_eligible(ns, t.h, &p, "cpu fake");
    }
    char sub[96];
    snprintf(sub, sizeof sub, "%s/fake_smem", ns);
    expect_rows_eligible(sub, t.h, &p, "cpu fake");

    /* A cached answer naming tile 3 (a limit lowered since it was
     * recorded): passed over for the next row, from the cache. */
    tt_fresh_cache_dir();
    vc_cache_key_t key;
    vc_tune_make_key(t.h, &p, &key);
    put_cached_answer(ns, &key, "fake_smem", "mma_tile=3", "mma_tile=0");
    g_over_runs = 0;
    voxconv_conv_options_t opt = {0};
    opt.fwd_algo = opt.bwd_algo = "fake_smem";
    VC_EXPECT_STATUS(t.h, tt_run(&t, pass, &opt), VOXCONV_STATUS_SUCCESS);
    voxconv_call_info_t info;
    voxconv_get_last_call_info(t.h, &info);
    VC_EXPECT(g_over_runs == 0 && info.from_cache == 1 &&
                  strcmp(info.params, "mma_tile=0") == 0,
              "%s: cached tile 3 ran %d times; call from_cache %d params %s",
              ns, g_over_runs, info.from_cache, info.params);

    /* No tile within the limit: the named status, nothing run. */
    g_fake_limit_kb = 10;
    g_over_runs = 0;
    tt_fresh_cache_dir();
    VC_EXPECT_STATUS(t.h, tt_run(&t, pass, &opt), VOXCONV_STATUS_UNSUPPORTED);
    VC_EXPECT(g_over_runs == 0, "%s: with no tile eligible %d ran", ns,
              g_over_runs);
    g_fake_limit_kb = 99;
    tt_fresh_cache_dir();
  }
  tt_problem_free(&t);
done:
  tt_virtual_clock(0);
  vc_tune_extra_first = 0;
  vc_tune_set_extra_algos(NULL, 0);
}

/* ---- 2. the tile table and the fit rule (no GPU) ------------------------ */
/* Dynamic shared memory per tile, from the tile templates: mma.sync
 * STAGES * 2 B * (BM (BK + 8) + B stage), B stage BK (BN + 8) forward, BN
 * (BK + 8) dgrad; wgrad STAGES * 2 B * BK (BM + 8 + BN + 8); wgmma A and B
 * stages (+ fp32 sums) + 1 KB alignment slack. docs/tiles.md lists these
 * plus the static part. */
static const long k_fwd[10] = {29184, 23040, 44544, 56832,  56832,
                               15360, 38400, 73728, 110592, 107520};
static const long k_dgrad[10] = {30720, 23040, 46080, 61440,  61440,
                                 15360, 38400, 73728, 110592, 110592};
static const long k_wgrad[7] = {27648, 15360, 52224, 39936,
                                55296, 27648, 55296};
static const long k_wg_f32[8] = {132096, 99328,  99328,  230400,
                                 115712, 197632, 197632, 230400};
static const long k_wg_f16[8] = {132096, 99328,  99328,  197632,
                                 87040,  197632, 197632, 197632};
static const long k_wg_wgrad[4] = {132096, 99328, 132096, 214016};

static void test_tile_table(void) {
  if (!vc_mask_gemm_tile_dyn_smem || !vc_smem_fit) {
    printf("test_smem_limit: tile table: not in this build (no CUDA)\n");
    return;
  }
  const voxconv_pass_t F = VOXCONV_PASS_CONV_FWD, D = VOXCONV_PASS_CONV_DGRAD,
                       W = VOXCONV_PASS_CONV_WGRAD;
  printf("  tile table (dynamic shared memory, bytes; fit at 99 / 163 / 227 "
         "KB: 1 yes, 0 no, -1 by the static part):\n");
  for (int t = 0; t < 10; t++)
    for (int acc = 0; acc < 2; acc++) {
      const long f = vc_mask_gemm_tile_dyn_smem("mask_gemm", F, t, acc);
      const long d = vc_mask_gemm_tile_dyn_smem("mask_gemm", D, t, acc);
      VC_EXPECT(f == k_fwd[t] && d == k_dgrad[t],
                "mask_gemm tile %d acc16 %d: fwd %ld dgrad %ld, want %ld %ld",
                t, acc, f, d, k_fwd[t], k_dgrad[t]);
      /* 99 KB (sm_86, sm_89): tiles 8 and 9 never fit, the others always
       * (whatever their few KB of static shared memory) */
      const int over = t >= 8;
      VC_EXPECT(vc_smem_fit((size_t)f, KB99) == !over &&
                    vc_smem_fit((size_t)d, KB99) == !over,
                "mask_gemm tile %d at 99 KB: fit %d / %d", t,
                vc_smem_fit((size_t)f, KB99), vc_smem_fit((size_t)d, KB99));
      VC_EXPECT(vc_smem_fit((size_t)f, KB163) == 1 &&
                    vc_smem_fit((size_t)d, KB163) == 1,
                "mask_gemm tile %d fits sm_80", t);
      if (acc == 0)
        printf("    mask_gemm fwd/dgrad %d: %6ld / %6ld  %2d %2d %2d\n", t, f,
               d, vc_smem_fit((size_t)(f > d ? f : d), KB99),
               vc_smem_fit((size_t)(f > d ? f : d), KB163),
               vc_smem_fit((size_t)(f > d ? f : d), KB227));
    }
  for (int t = 0; t < 7; t++) {
    const long w = vc_mask_gemm_tile_dyn_smem("mask_gemm", W, t, 0);
    VC_EXPECT(w == k_wgrad[t], "mask_gemm wgrad tile %d: %ld, want %ld", t, w,
              k_wgrad[t]);
    VC_EXPECT(vc_smem_fit((size_t)w, KB99) == 1,
              "mask_gemm wgrad tile %d fits sm_86", t);
    printf("    mask_gemm wgrad %d:      %6ld  %2d %2d %2d\n", t, w,
           vc_smem_fit((size_t)w, KB99), vc_smem_fit((size_t)w, KB163),
           vc_smem_fit((size_t)w, KB227));
  }
  VC_EXPECT(vc_mask_gemm_tile_dyn_smem("mask_gemm", W, 0, 1) == -1 &&
                vc_mask_gemm_tile_dyn_smem("mask_gemm", F, 10, 0) == -1 &&
                vc_mask_gemm_tile_dyn_smem("implicit_gemm", F, 0, 0) == -1,
            "tiles that do not exist");
  const long ic = vc_mask_gemm_tile_dyn_smem("mask_gemm_im2col", F, 0, 0);
  VC_EXPECT(ic == 91648 && vc_smem_fit((size_t)ic, KB99) == 1,
            "im2col: %ld bytes, fits sm_86", ic);
  printf("    mask_gemm_im2col fwd:     %6ld  %2d %2d %2d\n", ic,
         vc_smem_fit((size_t)ic, KB99), vc_smem_fit((size_t)ic, KB163),
         vc_smem_fit((size_t)ic, KB227));
  for (int t = 0; t < 8; t++)
    for (int acc = 0; acc < 2; acc++) {
      const long want = acc ? k_wg_f16[t] : k_wg_f32[t];
      for (int d = 0; d < 2; d++) {
        const long v =
            vc_mask_gemm_tile_dyn_smem("mask_gemm_wgmma", d ? D : F, t, acc);
        VC_EXPECT(v == want, "wgmma tile %d acc16 %d %s: %ld, want %ld", t, acc,
                  d ? "dgrad" : "fwd", v, want);
      }
      /* sm_90 (the only GPU it runs on): never "no"; tiles 3 and 7 with
       * fp32 accumulators are within the static bound of the limit */
      const int fit = vc_smem_fit((size_t)want, KB227);
      VC_EXPECT(fit == ((t == 3 || t == 7) && !acc ? -1 : 1),
                "wgmma tile %d acc16 %d at 227 KB: fit %d", t, acc, fit);
      printf("    mask_gemm_wgmma %d %s:    %6ld  %2d %2d %2d\n", t,
             acc ? "f16" : "f32", want, vc_smem_fit((size_t)want, KB99),
             vc_smem_fit((size_t)want, KB163), fit);
    }
  for (int t = 0; t < 4; t++) {
    const long v = vc_mask_gemm_tile_dyn_smem("mask_gemm_wgmma", W, t, 0);
    VC_EXPECT(v == k_wg_wgrad[t] && vc_smem_fit((size_t)v, KB227) == 1,
              "wgmma wgrad tile %d: %ld, want %ld", t, v, k_wg_wgrad[t]);
    printf("    mask_gemm_wgmma wgrad %d: %6ld  %2d %2d %2d\n", t, v,
           vc_smem_fit((size_t)v, KB99), vc_smem_fit((size_t)v, KB163),
           vc_smem_fit((size_t)v, KB227));
  }
  /* the rule itself, at the edges */
  VC_EXPECT(vc_smem_fit(KB99 + 1, KB99) == 0 && vc_smem_fit(KB99, KB99) == -1 &&
                vc_smem_fit(KB99 - 4096, KB99) == 1 &&
                vc_smem_fit(KB99 - 4095, KB99) == -1 && vc_smem_fit(0, 0) == -1,
            "vc_smem_fit edges");
}

static void test_knob_parser(void) {
  if (!vc_smem_limit_from_env) {
    printf("test_smem_limit: VOXCONV_CUDA_SMEM_LIMIT parser: not in this "
           "build (no CUDA)\n");
    return;
  }
  static const struct {
    const char *text;
    size_t want;
  } cases[] = {{NULL, KB227},
               {"99K", KB99},
               {"99k", KB99},
               {"101376", KB99},
               {"163K", KB163},
               {"0", KB227},
               {"0K", KB227},
               {"227K", KB227},
               {"300000", KB227},
               {"-5", KB227},
               {" 99K", KB227},
               {"99KB", KB227},
               {"99 K", KB227},
               {"abc", KB227},
               {"", KB227},
               {"1", 1},
               {"99K ", KB227},
               {"+99K", KB227},
               {"99999999999999999999", KB227}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const size_t got = vc_smem_limit_from_env(cases[i].text, KB227);
    VC_EXPECT(got == cases[i].want,
              "VOXCONV_CUDA_SMEM_LIMIT='%s': %zu, want %zu",
              cases[i].text ? cases[i].text : "(unset)", got, cases[i].want);
  }
}

/* ---- 3. on the GPU ------------------------------------------------------- */
static voxconv_pass_t kernel_pass(const voxconv_kernel_info_t *k) {
  return k->pass == VOXCONV_PASS_CONV_WGRAD ? VOXCONV_PASS_CONV_WGRAD
         : k->dgrad                         ? VOXCONV_PASS_CONV_DGRAD
                                            : VOXCONV_PASS_CONV_FWD;
}

/* The kernel table of h: eligibility against the limit, the static part
 * below the rule's bound. want_limit 0: not checked. Returns how many rows
 * are not eligible; *over_89 counts the mask_gemm fwd/dgrad tile 8 / 9 rows
 * among them. */
static int check_kernel_table(voxconv_handle_t *h, size_t want_limit,
                              const char *what, int *over_89, int *n_rows) {
  int n = 0, n_over = 0;
  *over_89 = 0;
  VC_EXPECT_STATUS(h, voxconv_kernel_count(h, &n), VOXCONV_STATUS_SUCCESS);
  *n_rows = n;
  for (int i = 0; i < n; i++) {
    voxconv_kernel_info_t k;
    const voxconv_status_t st = voxconv_kernel_get_info(h, i, &k);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: kernel %d: %s: %s", what, i,
              voxconv_status_string(st), voxconv_get_last_error(h));
    if (st != VOXCONV_STATUS_SUCCESS)
      continue;
    const voxconv_pass_t pass = kernel_pass(&k);
    const long dyn =
        vc_mask_gemm_tile_dyn_smem(k.algo, pass, k.tile_id, k.acc16);
    VC_EXPECT(dyn > 0 && (long)k.smem_bytes >= dyn &&
                  (long)k.smem_bytes - dyn < 4096,
              "%s: %s %d tile %d acc16 %d: smem %zu, dynamic %ld: the static "
              "part breaks the 4 KB bound the fit rule assumes",
              what, k.algo, (int)pass, k.tile_id, k.acc16, k.smem_bytes, dyn);
    if (want_limit)
      VC_EXPECT(k.smem_limit == want_limit, "%s: smem_limit %zu, want %zu",
                what, k.smem_limit, want_limit);
    VC_EXPECT(k.eligible == (k.smem_bytes <= k.smem_limit),
              "%s: %s tile %d (%s, acc16 %d, dgrad %d): %zu bytes, limit %zu, "
              "eligible %d",
              what, k.algo, k.tile_id, voxconv_dtype_name(k.dtype), k.acc16,
              k.dgrad, k.smem_bytes, k.smem_limit, k.eligible);
    VC_EXPECT(!k.eligible || k.blocks_per_sm > 0,
              "%s: eligible %s tile %d with no block per SM", what, k.algo,
              k.tile_id);
    if (!k.eligible) {
      n_over++;
      if (strcmp(k.algo, "mask_gemm") == 0 && pass != VOXCONV_PASS_CONV_WGRAD &&
          k.tile_id >= 8)
        ++*over_89;
      else if (strcmp(k.algo, "mask_gemm") == 0 ||
               strcmp(k.algo, "mask_gemm_im2col") == 0)
        VC_EXPECT(0, "%s: %s %d tile %d not eligible (%zu > %zu)", what, k.algo,
                  (int)pass, k.tile_id, k.smem_bytes, k.smem_limit);
    }
  }
  return n_over;
}

typedef struct gpu_problem {
  voxconv_handle_t *h, *cpu;
  voxconv_kmap_t *kg, *kc;
  int64_t n, cin, cout;
  int kvol;
  void *hx, *hw, *hdy; /* host f16 inputs */
  void *dx, *dw, *ddy; /* device copies */
  void *dout, *hout;   /* output, device and host */
  double *ref[3];      /* CPU fp64 results per pass */
} gpu_problem_t;

static void *upload(voxconv_handle_t *h, const void *src, size_t bytes) {
  void *d = NULL;
  if (voxconv_malloc(h, bytes, &d) != VOXCONV_STATUS_SUCCESS)
    return NULL;
  voxconv_memcpy(h, d, src, bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  return d;
}

static int64_t out_elems(const gpu_problem_t *g, int pi) {
  return pi == 0   ? g->n * g->cout
         : pi == 1 ? g->n * g->cin
                   : (int64_t)g->kvol * g->cin * g->cout;
}

static double *f64_copy(const void *src, int64_t n) {
  double *d = (double *)malloc((size_t)n * sizeof *d);
  for (int64_t i = 0; i < n; i++)
    d[i] = vc_get(src, VOXCONV_DTYPE_F16, i);
  return d;
}

/* Random coordinates, maps on the GPU handle and the CPU, f16 inputs, and
 * the CPU fp64 result of each pass on the same (rounded) inputs. */
static int gpu_problem_make(gpu_problem_t *g, voxconv_handle_t *h, int64_t c) {
  memset(g, 0, sizeof *g);
  g->h = h;
  voxconv_handle_desc_t dc = {0};
  dc.backend = VOXCONV_BACKEND_CPU;
  if (voxconv_create(&g->cpu, &dc) != VOXCONV_STATUS_SUCCESS)
    return -1;
  int32_t *coords = vc_random_coords(3000, 9, &g->n);
  voxconv_kmap_desc_t geo = {.mode = VOXCONV_KMAP_SUBMANIFOLD,
                             .kernel_size = {3, 3, 3}};
  voxconv_coords_t in = {coords, g->n, {1, 1, 1}};
  VC_EXPECT_STATUS(g->cpu, voxconv_kmap_build(g->cpu, &geo, &in, NULL, &g->kc),
                   VOXCONV_STATUS_SUCCESS);
  int32_t *dcoords = (int32_t *)upload(h, coords, (size_t)g->n * 16);
  voxconv_coords_t ing = {dcoords, g->n, {1, 1, 1}};
  VC_EXPECT_STATUS(h, vc_test_kmap_build(h, &geo, &ing, NULL, &g->kg),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_free(h, dcoords);
  free(coords);
  if (!g->kc || !g->kg)
    return -1;
  g->cin = g->cout = c;
  g->kvol = 27;
  const int64_t nx = g->n * c, nw = (int64_t)g->kvol * c * c;
  g->hx = malloc((size_t)nx * 2);
  g->hdy = malloc((size_t)nx * 2);
  g->hw = malloc((size_t)nw * 2);
  vc_fill_normal(g->hx, VOXCONV_DTYPE_F16, nx);
  vc_fill_normal(g->hdy, VOXCONV_DTYPE_F16, nx);
  vc_fill_normal(g->hw, VOXCONV_DTYPE_F16, nw);
  g->dx = upload(h, g->hx, (size_t)nx * 2);
  g->ddy = upload(h, g->hdy, (size_t)nx * 2);
  g->dw = upload(h, g->hw, (size_t)nw * 2);
  const int64_t cap = nx > nw ? nx : nw;
  g->hout = malloc((size_t)cap * 2);
  if (voxconv_malloc(h, (size_t)cap * 2, &g->dout) != VOXCONV_STATUS_SUCCESS)
    return -1;
  double *x = f64_copy(g->hx, nx), *dy = f64_copy(g->hdy, nx),
         *w = f64_copy(g->hw, nw);
  for (int pi = 0; pi < 3; pi++)
    g->ref[pi] = (double *)malloc((size_t)out_elems(g, pi) * sizeof(double));
  voxconv_feats_t fx = {x, g->n, c, VOXCONV_DTYPE_F64};
  voxconv_feats_t fdy = {dy, g->n, c, VOXCONV_DTYPE_F64};
  voxconv_weights_t fw = {w, g->kvol, c, c, VOXCONV_DTYPE_F64};
  voxconv_feats_t y = {g->ref[0], g->n, c, VOXCONV_DTYPE_F64};
  voxconv_feats_t dx = {g->ref[1], g->n, c, VOXCONV_DTYPE_F64};
  voxconv_weights_t dw = {g->ref[2], g->kvol, c, c, VOXCONV_DTYPE_F64};
  VC_EXPECT_STATUS(g->cpu,
                   voxconv_conv_forward(g->cpu, g->kc, &fx, &fw, &y, NULL),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g->cpu,
                   voxconv_conv_dgrad(g->cpu, g->kc, &fdy, &fw, &dx, NULL),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(g->cpu,
                   voxconv_conv_wgrad(g->cpu, g->kc, &fx, &fdy, &dw, NULL),
                   VOXCONV_STATUS_SUCCESS);
  free(x);
  free(dy);
  free(w);
  return 0;
}

static void gpu_problem_free(gpu_problem_t *g) {
  if (g->kg)
    voxconv_kmap_destroy(g->h, g->kg);
  if (g->kc)
    voxconv_kmap_destroy(g->cpu, g->kc);
  voxconv_free(g->h, g->dx);
  voxconv_free(g->h, g->ddy);
  voxconv_free(g->h, g->dw);
  voxconv_free(g->h, g->dout);
  voxconv_destroy(g->cpu);
  free(g->hx);
  free(g->hdy);
  free(g->hw);
  free(g->hout);
  for (int i = 0; i < 3; i++)
    free(g->ref[i]);
}

static const voxconv_pass_t k_passes[3] = {
    VOXCONV_PASS_CONV_FWD, VOXCONV_PASS_CONV_DGRAD, VOXCONV_PASS_CONV_WGRAD};

/* The problem of pass pi on g as the algorithm records see it. */
static vc_conv_problem_t record_problem(const gpu_problem_t *g, int pi) {
  const void *a = pi == 1 ? g->ddy : g->dx;
  const void *b = pi == 2 ? g->ddy : g->dw;
  return vc_conv_problem_make(k_passes[pi], g->kg, VOXCONV_DTYPE_F16, g->cin,
                              g->cout, a, b, g->dout);
}

/* The output in g->dout against the CPU fp64 result of pass pi. */
static void expect_matches_cpu(gpu_problem_t *g, int pi, int f16acc,
                               const char *what) {
  const int64_t n = out_elems(g, pi);
  voxconv_synchronize(g->h);
  voxconv_memcpy(g->h, g->hout, g->dout, (size_t)n * 2,
                 VOXCONV_MEMCPY_BACKEND_TO_HOST);
  VC_EXPECT(vc_count_poison(g->hout, VOXCONV_DTYPE_F16, n) == 0,
            "%s: %lld outputs not written", what,
            (long long)vc_count_poison(g->hout, VOXCONV_DTYPE_F16, n));
  const vc_err_stats_t e =
      vc_compare(g->hout, VOXCONV_DTYPE_F16, g->ref[pi], n, 0.01);
  /* f16 with fp32 accumulators: a few fp16 ulps (test_mask_gemm's gate is
   * 2e-3); an fp16-accumulator winner ("all") only within its own gate */
  const double max_tol = f16acc ? 1.0 : 4e-3, norm_tol = f16acc ? 1e-2 : 1e-3;
  VC_EXPECT(e.n_nonfinite_mismatch == 0 && e.max_rel <= max_tol &&
                e.norm_rel <= norm_tol,
            "%s: against the CPU fp64 result max_rel %.3e norm %.3e", what,
            e.max_rel, e.norm_rel);
}

/* Running a tile over the limit by hand: UNSUPPORTED, a message naming the
 * bytes, no launch, the handle still usable. */
static void expect_refused(gpu_problem_t *g, const char *algo, int pi,
                           vc_algo_params_t prm, const char *what) {
  const vc_algo_t *a = vc_algo_find(algo);
  vc_conv_problem_t p = record_problem(g, pi);
  p.fp16_accum = pi != 2 && prm.v[1] == 16;
  if (!a || !a->supports(g->h, &p))
    return;
  VC_EXPECT(!vc_algo_params_supported(a, g->h, &p, &prm),
            "%s: params_supported says it fits", what);
  const int64_t n = out_elems(g, pi);
  vc_poison(g->hout, VOXCONV_DTYPE_F16, n);
  voxconv_memcpy(g->h, g->dout, g->hout, (size_t)n * 2,
                 VOXCONV_MEMCPY_HOST_TO_BACKEND);
  const voxconv_status_t st = a->run(g->h, &p, &prm, NULL);
  const char *msg = voxconv_get_last_error(g->h);
  printf("  %s: %s: %s\n", what, voxconv_status_string(st), msg);
  VC_EXPECT(st == VOXCONV_STATUS_UNSUPPORTED && strstr(msg, "shared memory") &&
                strstr(msg, "101376"),
            "%s: %s: %s", what, voxconv_status_string(st), msg);
  VC_EXPECT_STATUS(g->h, voxconv_synchronize(g->h), VOXCONV_STATUS_SUCCESS);
  voxconv_memcpy(g->h, g->hout, g->dout, (size_t)n * 2,
                 VOXCONV_MEMCPY_BACKEND_TO_HOST);
  VC_EXPECT(vc_count_poison(g->hout, VOXCONV_DTYPE_F16, n) == n,
            "%s: the refused run wrote the output", what);
}

/* A public call of pass pi on g with algorithm string mode (NULL: auto). */
static voxconv_status_t run_public(gpu_problem_t *g, int pi, const char *mode) {
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = opt.dgrad_algo = opt.wgrad_algo = mode;
  const int64_t c = g->cin;
  voxconv_feats_t x = {g->dx, g->n, c, VOXCONV_DTYPE_F16};
  voxconv_feats_t dy = {g->ddy, g->n, c, VOXCONV_DTYPE_F16};
  voxconv_weights_t w = {g->dw, g->kvol, c, c, VOXCONV_DTYPE_F16};
  if (pi == 0) {
    voxconv_feats_t y = {g->dout, g->n, c, VOXCONV_DTYPE_F16};
    return voxconv_conv_forward(g->h, g->kg, &x, &w, &y, &opt);
  }
  if (pi == 1) {
    voxconv_feats_t dx = {g->dout, g->n, c, VOXCONV_DTYPE_F16};
    return voxconv_conv_dgrad(g->h, g->kg, &dy, &w, &dx, &opt);
  }
  voxconv_weights_t dw = {g->dout, g->kvol, c, c, VOXCONV_DTYPE_F16};
  return voxconv_conv_wgrad(g->h, g->kg, &x, &dy, &dw, &opt);
}

static void poison_output(gpu_problem_t *g, int pi) {
  const int64_t n = out_elems(g, pi);
  vc_poison(g->hout, VOXCONV_DTYPE_F16, n);
  voxconv_memcpy(g->h, g->dout, g->hout, (size_t)n * 2,
                 VOXCONV_MEMCPY_HOST_TO_BACKEND);
}

/* The handle's last call ran an eligible point (and, for mask_gemm's
 * forward / dgrad, not tile 8 or 9); 1 when its accumulator is fp16. */
static int expect_last_call_eligible(gpu_problem_t *g, int pi,
                                     const char *what) {
  voxconv_call_info_t info;
  VC_EXPECT_STATUS(g->h, voxconv_get_last_call_info(g->h, &info),
                   VOXCONV_STATUS_SUCCESS);
  printf("  %s: %s(%s)%s\n", what, info.algo, info.params,
         info.from_cache ? " [cache]" : "");
  const vc_algo_t *a = vc_tune_algo_find(info.algo, k_passes[pi]);
  vc_algo_params_t prm;
  if (!a || !vc_params_parse(a, k_passes[pi], info.params, &prm))
    return 0;
  vc_conv_problem_t p = record_problem(g, pi);
  const int f16 = vc_params_f16_accum(a, k_passes[pi], &prm);
  p.fp16_accum = f16;
  VC_EXPECT(vc_algo_params_supported(a, g->h, &p, &prm),
            "%s: the tuner picked %s(%s), over the shared-memory limit", what,
            info.algo, info.params);
  VC_EXPECT(strcmp(info.algo, "mask_gemm") != 0 || pi == 2 || prm.v[0] < 8,
            "%s: the tuner picked mask_gemm tile %d on a 99 KB GPU", what,
            prm.v[0]);
  return f16;
}

static void test_gpu(void) {
  int ndev = 0;
  if (!voxconv_has_cuda() ||
      voxconv_device_count(&ndev) != VOXCONV_STATUS_SUCCESS || ndev == 0) {
    printf("test_smem_limit: GPU part SKIPPED: %s\n",
           voxconv_has_cuda() ? "no CUDA device visible"
                              : "library built without CUDA");
    return;
  }
  voxconv_device_info_t di;
  VC_EXPECT_STATUS(NULL, voxconv_device_get_info(0, &di),
                   VOXCONV_STATUS_SUCCESS);
  printf("test_smem_limit: GPU %s (cc %d.%d)\n", di.name, di.cc_major,
         di.cc_minor);
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CUDA;

  /* The device as it is. */
  unsetenv("VOXCONV_CUDA_SMEM_LIMIT");
  voxconv_handle_t *hdev = NULL;
  if (voxconv_create(&hdev, &d) != VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(0, "voxconv_create: %s", voxconv_get_last_error(NULL));
    return;
  }
  int over89 = 0, rows = 0;
  voxconv_kernel_info_t k0;
  size_t dev_limit = 0;
  if (voxconv_kernel_get_info(hdev, 0, &k0) == VOXCONV_STATUS_SUCCESS)
    dev_limit = k0.smem_limit;
  const int n_over_dev =
      check_kernel_table(hdev, 0, "device limit", &over89, &rows);
  printf("  device limit %zu bytes: %d of %d kernels not eligible (%d of them "
         "mask_gemm tiles 8/9)\n",
         dev_limit, n_over_dev, rows, over89);
  if (di.cc_major == 9 && di.cc_minor == 0)
    VC_EXPECT(n_over_dev == 0 && dev_limit == KB227,
              "sm_90: %d kernels not eligible (limit %zu): every tile must "
              "fit there",
              n_over_dev, dev_limit);
  if (di.cc_major == 8 && (di.cc_minor == 6 || di.cc_minor == 9))
    VC_EXPECT(over89 == 12,
              "sm_8%d: %d mask_gemm tile 8/9 rows not "
              "eligible, want 12",
              di.cc_minor, over89);
  voxconv_destroy(hdev);

  /* The same GPU told it has 99 KB, as an sm_86 / sm_89. */
  setenv("VOXCONV_CUDA_SMEM_LIMIT", "99K", 1);
  voxconv_handle_t *h = NULL;
  const voxconv_status_t cst = voxconv_create(&h, &d);
  unsetenv("VOXCONV_CUDA_SMEM_LIMIT");
  if (cst != VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(0, "voxconv_create: %s", voxconv_get_last_error(NULL));
    return;
  }
  const size_t lim = dev_limit && dev_limit < KB99 ? dev_limit : KB99;
  const int n_over = check_kernel_table(h, lim, "99K", &over89, &rows);
  printf("  VOXCONV_CUDA_SMEM_LIMIT=99K: %d of %d kernels not eligible (%d of "
         "them mask_gemm tiles 8/9)\n",
         n_over, rows, over89);
  /* tiles 8 and 9 x f16/bf16/f16-acc x fwd/dgrad */
  VC_EXPECT(over89 == 12,
            "99K: %d mask_gemm tile 8/9 rows not eligible, "
            "want 12",
            over89);

  gpu_problem_t g;
  if (gpu_problem_make(&g, h, 64) != 0) {
    VC_EXPECT(0, "problem setup failed");
    gpu_problem_free(&g);
    voxconv_destroy(h);
    return;
  }

  /* By hand: the named status, nothing launched, the handle usable. */
  const vc_algo_params_t t8 = {{8, 32, 1, 0}}, t9 = {{9, 32, 0, 0}},
                         t9h = {{9, 16, 1, 0}}, t0 = {{0, 32, 1, 0}};
  expect_refused(&g, "mask_gemm", 0, t8, "mask_gemm fwd tile 8 by hand");
  expect_refused(&g, "mask_gemm", 1, t9, "mask_gemm dgrad tile 9 by hand");
  expect_refused(&g, "mask_gemm", 0, t9h, "mask_gemm fwd tile 9 fp16 acc");
  const vc_algo_params_t w0 = {{0, 32, 1, 0}}, ww0 = {{0, 1, 0, 0}};
  expect_refused(&g, "mask_gemm_wgmma", 0, w0, "wgmma fwd tile 0 by hand");
  expect_refused(&g, "mask_gemm_wgmma", 2, ww0, "wgmma wgrad tile 0 by hand");
  {
    const vc_algo_t *a = vc_algo_find("mask_gemm");
    vc_conv_problem_t p = record_problem(&g, 0);
    VC_EXPECT(a && vc_algo_params_supported(a, h, &p, &t0),
              "mask_gemm tile 0 is eligible at 99 KB");
    poison_output(&g, 0);
    VC_EXPECT_STATUS(h, a->run(h, &p, &t0, NULL), VOXCONV_STATUS_SUCCESS);
    expect_matches_cpu(&g, 0, 0, "tile 0 after the refusals");
  }

  /* A cached answer naming tile 8 first (recorded on this GPU model
   * without the lower limit: the cache key cannot tell): passed over. */
  tt_fresh_cache_dir();
  {
    vc_conv_problem_t p = record_problem(&g, 0);
    vc_cache_key_t key;
    vc_tune_make_key(h, &p, &key);
    put_cached_answer(vc_cache_pass_namespace(VOXCONV_PASS_CONV_FWD), &key,
                      "mask_gemm", "mma_tile=8,accumulator_type=32,row_order=1",
                      "mma_tile=0,accumulator_type=32,row_order=1");
    poison_output(&g, 0);
    VC_EXPECT_STATUS(h, run_public(&g, 0, "mask_gemm"), VOXCONV_STATUS_SUCCESS);
    voxconv_call_info_t info;
    voxconv_get_last_call_info(h, &info);
    VC_EXPECT(info.from_cache == 1 &&
                  strcmp(info.params,
                         "mma_tile=0,accumulator_type=32,row_order=1") == 0,
              "cached tile 8: ran %s(%s), from_cache %d", info.algo,
              info.params, info.from_cache);
    expect_matches_cpu(&g, 0, 0, "cached answer after tile 8");
  }

  /* Tuning: one algorithm (all its points), auto, all. */
  static const char *const modes[] = {"mask_gemm", NULL, "all"};
  for (int mi = 0; mi < 3; mi++) {
    tt_fresh_cache_dir();
    for (int pi = 0; pi < 3; pi++) {
      char what[96];
      snprintf(what, sizeof what, "%s %s", modes[mi] ? modes[mi] : "auto",
               vc_cache_pass_namespace((int)k_passes[pi]));
      poison_output(&g, pi);
      const voxconv_status_t st = run_public(&g, pi, modes[mi]);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: %s: %s", what,
                voxconv_status_string(st), voxconv_get_last_error(h));
      if (st != VOXCONV_STATUS_SUCCESS)
        continue;
      const int f16 = expect_last_call_eligible(&g, pi, what);
      expect_matches_cpu(&g, pi, f16, what);
      /* every candidate recorded is eligible: none over the limit was
       * even benchmarked */
      vc_conv_problem_t p = record_problem(&g, pi);
      expect_rows_eligible(vc_cache_pass_namespace((int)k_passes[pi]), h, &p,
                           what);
      /* a second call answers from the cache with the same choice */
      poison_output(&g, pi);
      VC_EXPECT_STATUS(h, run_public(&g, pi, modes[mi]),
                       VOXCONV_STATUS_SUCCESS);
      expect_last_call_eligible(&g, pi, what);
      expect_matches_cpu(&g, pi, f16, what);
    }
  }
  gpu_problem_free(&g);
  voxconv_destroy(h);
}

int main(void) {
  vc_test_init("test_smem_limit");
  setenv("VOXCONV_AUTOTUNE_LOG", "0", 1);
  test_tuner_skips_ineligible();
  test_tile_table();
  test_knob_parser();
  test_gpu();
  tt_cleanup();
  return vc_test_finish();
}
