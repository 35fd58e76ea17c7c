/* The int8 tuner (src/tune/tune_int8.c, issue 23 item 4) on the CPU, with
 * a fake tile table whose speed and defects are known (the real one is
 * CUDA's; test_cuda_int8 runs it there):
 *   1. the first call measures every usable tile, disqualifies a tile that
 *      gives other bits (the fastest one here) and one that fails, runs
 *      the fastest correct tile, and its output is the model's, bit for
 *      bit; a warning names the wrong tile;
 *   2. a repeat call on the handle runs only the winner (memo), another
 *      handle reads the cache, and so does a fresh process view of the
 *      saved file;
 *   3. the entry lives in namespace sparse_conv_forward_int8 with the
 *      output dtype as its key dtype: another output dtype is tuned on
 *      its own, and no float lookup (sparse_conv_forward, any dtype)
 *      sees it;
 *   4. VOXCONV_INT8_TILE forces a tile (nothing measured), and a bad or
 *      unusable value is a named status;
 *   5. when no tile runs (all fail) the failure's status is returned and
 *      nothing is cached;
 *   6. the real CPU int8 op records its call (algo, not from a cache);
 *   7. without memory for the check's copy the call runs the reference
 *      tile untimed, caches nothing, and the next call tunes;
 *   8. a tile that stands in for another (runs_as) is not measured, and
 *      runs when forced. */
#include "int8_model.h"
#include "tune_test_util.h"

#include "cpu/vc_cpu.h"
#include "tune/vc_tune_int8.h"

/* ---- the fake tile table ---------------------------------------------- */
#define N_FAKE 6
/* virtual ms per run; tile 3 is fastest but wrong, tile 0 fails, tile 4
 * cannot run here, tile 2 is the fastest correct one */
static const double k_ms[N_FAKE] = {0.5, 2.0, 1.0, 0.25, 0.1, 3.0};
static int g_runs[N_FAKE];
/* runs of each tile split (split > 1), and the last split tile 2 ran */
static int g_split_runs[N_FAKE];
static int g_last_split;
static int g_all_fail;
static double g_clock;

static double fake_clock(void) {
  return g_clock;
}

static int fake_usable(voxconv_handle_t *h, int t) {
  (void)h;
  return t != 4;
}

static int fake_default(voxconv_handle_t *h, const vc_int8_problem_t *p) {
  (void)h, (void)p;
  return 1;
}

/* A split run of a tile costs a quarter of its time (what splitting buys
 * a small problem on a GPU), with the same bits. */
static voxconv_status_t fake_run(voxconv_handle_t *h,
                                 const vc_int8_problem_t *p, int t,
                                 int split) {
  VC_EXPECT(t >= 0 && t < N_FAKE && t != 4 && split >= 1,
            "fake_run: tile %d split %d", t, split);
  if (t < 0 || t >= N_FAKE)
    return VOXCONV_STATUS_INTERNAL;
  if (split > 1) {
    g_split_runs[t]++;
    g_last_split = split;
  } else {
    g_runs[t]++;
  }
  g_clock += split > 1 ? k_ms[t] / 4 : k_ms[t];
  if (t == 0 || g_all_fail)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED, "fake tile %d fails", t);
  VC_CHECK(vc_cpu_conv_int8(h, p));
  if (t == 3) { /* one byte in the middle of the output */
    const size_t bytes = (size_t)p->kmap->n_out * (size_t)p->cout *
                         voxconv_dtype_size(p->y_dtype);
    ((unsigned char *)p->y)[bytes / 2] ^= 0x10;
  }
  return VOXCONV_STATUS_SUCCESS;
}

static const vc_int8_tiles_t k_fake = {"fake_i8",    N_FAKE,   fake_usable,
                                       fake_default, fake_run, NULL,
                                       NULL};

/* The same table offering a 3-way split of tile 2 only. */
static int fake_split_of(voxconv_handle_t *h, const vc_int8_problem_t *p,
                         int t) {
  (void)h, (void)p;
  return t == 2 ? 3 : 1;
}
static const vc_int8_tiles_t k_split = {"fake_i8",    N_FAKE,   fake_usable,
                                        fake_default, fake_run, NULL,
                                        fake_split_of};

/* The same table where tile 5 stands in for tile 2 (as CUDA's tile 18 runs
 * the default tile off first layers): 5 must not be measured. */
static int alias_runs_as(voxconv_handle_t *h, const vc_int8_problem_t *p,
                         int t) {
  (void)h, (void)p;
  return t == 5 ? 2 : t;
}
static const vc_int8_tiles_t k_alias = {
    "fake_i8", N_FAKE, fake_usable, fake_default, fake_run, alias_runs_as,
    NULL};

static voxconv_handle_t *cpu_handle(void) {
  voxconv_handle_desc_t dc;
  memset(&dc, 0, sizeof dc);
  dc.backend = VOXCONV_BACKEND_CPU;
  voxconv_handle_t *h = NULL;
  if (voxconv_create(&h, &dc) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "FATAL: voxconv_create: %s\n", voxconv_get_last_error(NULL));
    exit(1);
  }
  return h;
}

/* ---- one problem: the model's expected bits --------------------------- */
typedef struct {
  prob_t p;
  int64_t *acc;
  voxconv_kmap_t *km;
  int32_t *coords;
} fixture_t;

static void fixture_make(fixture_t *f, voxconv_handle_t *h) {
  int64_t n = 0;
  f->coords = vc_random_coords(400, 9, &n);
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = VOXCONV_KMAP_SUBMANIFOLD;
  for (int a = 0; a < 3; a++) {
    d.kernel_size[a] = 3;
    d.stride[a] = 1;
  }
  voxconv_coords_t ci = {f->coords, n, {1, 1, 1}};
  f->km = NULL;
  if (vc_test_kmap_build(h, &d, &ci, NULL, &f->km) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "FATAL: kmap build: %s\n", voxconv_get_last_error(h));
    exit(1);
  }
  f->p = model_prob(h, f->km, 0, 19, 24); /* odd channels */
  int64_t n_out;
  f->acc = naive_acc(h, f->km, f->p.x, f->p.w, f->p.cin, f->p.cout, 0,
                     &n_out);
}

static void fixture_free(fixture_t *f, voxconv_handle_t *h) {
  free(f->acc);
  model_prob_free(&f->p);
  voxconv_kmap_destroy(h, f->km);
  free(f->coords);
}

/* The validated problem the op would hand the tuner, writing y. */
static vc_int8_problem_t problem_of(const fixture_t *f, voxconv_dtype_t dt,
                                    void *y) {
  vc_int8_problem_t q;
  memset(&q, 0, sizeof q);
  q.kmap = f->km;
  q.cin = f->p.cin;
  q.cout = f->p.cout;
  q.x = f->p.x;
  q.w = f->p.w;
  q.y = y;
  q.y_dtype = dt;
  q.x_scale = f->p.xs;
  q.y_scale = dt == VOXCONV_DTYPE_I8 ? f->p.ys : 0.0f;
  q.w_scale = f->p.ws;
  q.bias = f->p.bias;
  q.relu = 0;
  return q;
}

/* The file's text, NUL-terminated (malloc'd), NULL when unreadable. */
static char *read_text(const char *path) {
  size_t n = 0;
  char *raw = (char *)vc_read_file(path, &n);
  if (!raw)
    return NULL;
  char *s = (char *)dr_xmalloc(n + 1);
  memcpy(s, raw, n);
  s[n] = '\0';
  free(raw);
  return s;
}

static void reset_runs(void) {
  memset(g_runs, 0, sizeof g_runs);
  memset(g_split_runs, 0, sizeof g_split_runs);
  g_last_split = 0;
}

/* Runs the fake table on dtype dt (poisoned output) and checks the bits
 * and the recorded decision. */
static void tune_call_on(voxconv_handle_t *h, const fixture_t *f,
                         const vc_int8_tiles_t *be, voxconv_dtype_t dt,
                         const char *want, int want_cached, const char *what) {
  const int64_t ne = f->p.n_out * f->p.cout;
  const size_t bytes = (size_t)ne * voxconv_dtype_size(dt);
  void *y = dr_xmalloc(bytes), *exp = dr_xmalloc(bytes);
  memset(y, 0xA5, bytes);
  model_expected(&f->p, f->acc, dt, exp);
  vc_int8_problem_t q = problem_of(f, dt, y);
  VC_EXPECT_STATUS(h, vc_tune_int8_tiles(h, &q, be), VOXCONV_STATUS_SUCCESS);
  int64_t first;
  const int64_t bad = model_mismatches(y, exp, dt, ne, &first);
  VC_EXPECT(bad == 0, "%s: %lld of %lld outputs differ from the model", what,
            (long long)bad, (long long)ne);
  voxconv_call_info_t ci;
  VC_EXPECT_STATUS(h, voxconv_get_last_call_info(h, &ci),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(strcmp(ci.algo, "fake_i8") == 0 && strcmp(ci.params, want) == 0,
            "%s: ran %s %s, want fake_i8 %s", what, ci.algo, ci.params, want);
  VC_EXPECT(ci.from_cache == want_cached && ci.pass == VOXCONV_PASS_CONV_FWD,
            "%s: from_cache %d (want %d), pass %d", what, ci.from_cache,
            want_cached, (int)ci.pass);
  free(y);
  free(exp);
}

static void tune_call(voxconv_handle_t *h, const fixture_t *f,
                      voxconv_dtype_t dt, int want_tile, int want_cached,
                      const char *what) {
  char want[32];
  snprintf(want, sizeof want, "tile=%d", want_tile);
  tune_call_on(h, f, &k_fake, dt, want, want_cached, what);
}

/* The fake clock, 1 warm-up + 3 timed runs a tile, no forced tile. */
static void measured_setup(void) {
  vc_tune_test_clock_ms = fake_clock;
  setenv("VOXCONV_AUTOTUNE_RUNS", "3", 1);
  setenv("VOXCONV_AUTOTUNE_WARMUP", "1", 1);
  unsetenv("VOXCONV_INT8_TILE");
}

static void test_tuning(voxconv_handle_t *h) {
  fixture_t f;
  fixture_make(&f, h);
  measured_setup();

  /* 1. measured: tile 3 (fastest) wrong, 0 failed, 4 unusable */
  reset_runs();
  tt_capture_begin();
  tune_call(h, &f, VOXCONV_DTYPE_I8, 2, 0, "first call");
  char *err = tt_capture_end();
  VC_EXPECT(tt_count(err, "fake_i8 tile 3 gives other bits") == 1,
            "the wrong tile is not named once on stderr:\n%s", err);
  VC_EXPECT(tt_count(err, "voxconv: tuned sparse_conv_forward_int8") == 1 &&
                tt_count(err, "4 disqualified") == 0 &&
                tt_count(err, "(1 disqualified)") == 1 &&
                tt_count(err, "best fake_i8 tile=2") == 1,
            "the tuning summary line is missing or wrong:\n%s", err);
  free(err);
  /* reference tile 1 and tile 2: 1 checked + 3 timed (+1 final run for 2);
   * tile 3 stops at its check, tile 0 at its failure, 4 never runs */
  VC_EXPECT(g_runs[1] == 4 && g_runs[2] == 5 && g_runs[3] == 1 &&
                g_runs[0] == 1 && g_runs[4] == 0 && g_runs[5] == 4,
            "runs per tile %d %d %d %d %d %d", g_runs[0], g_runs[1], g_runs[2],
            g_runs[3], g_runs[4], g_runs[5]);

  /* 2. memo, then cache from another handle */
  reset_runs();
  tune_call(h, &f, VOXCONV_DTYPE_I8, 2, 1, "repeat call (memo)");
  VC_EXPECT(g_runs[2] == 1 && g_runs[1] + g_runs[3] + g_runs[5] == 0,
            "the memo ran more than the winner: %d %d %d %d", g_runs[1],
            g_runs[2], g_runs[3], g_runs[5]);
  voxconv_handle_t *h2 = cpu_handle();
  reset_runs();
  tune_call(h2, &f, VOXCONV_DTYPE_I8, 2, 1, "another handle (cache)");
  VC_EXPECT(g_runs[2] == 1 && g_runs[1] == 0, "the cached call measured");

  /* 3. the entry: namespace, key dtype, rows */
  vc_cache_key_t key;
  const vc_int8_problem_t q = problem_of(&f, VOXCONV_DTYPE_I8, NULL);
  vc_tune_int8_key(h, &q, &key);
  VC_EXPECT(key.dtype == VOXCONV_DTYPE_I8 && key.cin == 19 && key.cout == 24,
            "int8 key: dtype %d cin %lld cout %lld", (int)key.dtype,
            (long long)key.cin, (long long)key.cout);
  vc_cache_entry_t e;
  const int found = vc_cache_get(VC_INT8_NS, &key, 0, &e);
  VC_EXPECT(found, "no int8 entry");
  if (found) {
    VC_EXPECT(e.n_rows == 5 && strcmp(e.rows[0].params, "tile=2") == 0 &&
                  vc_cache_row_ok(&e.rows[0]),
              "entry: %d rows, first %s %s", e.n_rows, e.rows[0].params,
              e.rows[0].status);
    int wrong = 0, failed = 0, absent4 = 1;
    for (int r = 0; r < e.n_rows; r++) {
      wrong += strcmp(e.rows[r].status, "wrong") == 0 &&
               strcmp(e.rows[r].params, "tile=3") == 0;
      failed += strncmp(e.rows[r].status, "failed:", 7) == 0 &&
                strcmp(e.rows[r].params, "tile=0") == 0;
      absent4 &= strcmp(e.rows[r].params, "tile=4") != 0;
    }
    VC_EXPECT(wrong == 1 && failed == 1 && absent4,
              "rows: tile 3 wrong %d, tile 0 failed %d, tile 4 absent %d",
              wrong, failed, absent4);
    vc_cache_entry_free(&e);
  }
  /* no float lookup sees it: the float namespace, any float dtype */
  for (int dt = 0; dt <= VOXCONV_DTYPE_I32; dt++) {
    vc_cache_key_t fk = key;
    fk.dtype = dt;
    VC_EXPECT(!vc_cache_get(vc_cache_pass_namespace(VOXCONV_PASS_CONV_FWD),
                            &fk, 1, &e),
              "a float lookup (dtype %d) found the int8 decision", dt);
  }
  /* another output dtype: its own entry, measured again */
  reset_runs();
  tune_call(h, &f, VOXCONV_DTYPE_F16, 2, 0, "f16 output (own entry)");
  VC_EXPECT(g_runs[1] == 4, "the f16 output was not measured");
  /* a fresh process view of the saved file */
  char msg[256];
  VC_EXPECT(vc_cache_save_now(msg, sizeof msg) == 0, "save: %s", msg);
  char *text = read_text(tt_cache_file());
  VC_EXPECT(text && tt_count(text, "entry sparse_conv_forward_int8") == 2 &&
                tt_count(text, "dtype=i8") == 1 &&
                tt_count(text, "dtype=f16") == 1,
            "saved file lacks the two int8 entries:\n%s", text ? text : "");
  free(text);
  vc_cache_forget();
  voxconv_destroy(h2);
  h2 = cpu_handle();
  reset_runs();
  tune_call(h2, &f, VOXCONV_DTYPE_I8, 2, 1, "after reload");
  VC_EXPECT(g_runs[1] == 0, "the reloaded cache was not used");

  /* 4. VOXCONV_INT8_TILE */
  setenv("VOXCONV_INT8_TILE", " 5", 1);
  reset_runs();
  tune_call(h2, &f, VOXCONV_DTYPE_I8, 5, 0, "VOXCONV_INT8_TILE=5");
  VC_EXPECT(g_runs[5] == 1 && g_runs[2] == 0, "a forced tile measured");
  static const struct {
    const char *v;
    voxconv_status_t st;
  } bad[] = {{"6", VOXCONV_STATUS_INVALID_ARGUMENT},
             {"-1", VOXCONV_STATUS_INVALID_ARGUMENT},
             {"2x", VOXCONV_STATUS_INVALID_ARGUMENT},
             {"4", VOXCONV_STATUS_UNSUPPORTED}};
  const size_t ybytes = (size_t)(f.p.n_out * f.p.cout);
  void *y = dr_xmalloc(ybytes);
  vc_int8_problem_t qy = problem_of(&f, VOXCONV_DTYPE_I8, y);
  for (int i = 0; i < 4; i++) {
    setenv("VOXCONV_INT8_TILE", bad[i].v, 1);
    VC_EXPECT_STATUS(h2, vc_tune_int8_tiles(h2, &qy, &k_fake), bad[i].st);
    VC_EXPECT(strstr(voxconv_get_last_error(h2), "VOXCONV_INT8_TILE") != NULL,
              "VOXCONV_INT8_TILE=%s: message %s", bad[i].v,
              voxconv_get_last_error(h2));
  }
  setenv("VOXCONV_INT8_TILE", "auto", 1);
  reset_runs();
  tune_call(h2, &f, VOXCONV_DTYPE_I8, 2, 1, "VOXCONV_INT8_TILE=auto");
  unsetenv("VOXCONV_INT8_TILE");

  /* 5. no tile runs (all fail, out of memory): the failure's status,
   * nothing cached, and the next call measures again */
  g_all_fail = 1;
  free(y);
  y = dr_xmalloc((size_t)(f.p.n_out * f.p.cout) * 4);
  qy = problem_of(&f, VOXCONV_DTYPE_F32, y);
  reset_runs();
  tt_capture_begin();
  VC_EXPECT_STATUS(h2, vc_tune_int8_tiles(h2, &qy, &k_fake),
                   VOXCONV_STATUS_ALLOC_FAILED);
  free(tt_capture_end());
  VC_EXPECT(strstr(voxconv_get_last_error(h2), "no tile ran") != NULL,
            "all tiles failing: %s", voxconv_get_last_error(h2));
  VC_EXPECT(g_runs[1] == 1 && g_runs[2] == 1 && g_runs[5] == 1,
            "every usable tile should have been tried once");
  g_all_fail = 0;
  vc_int8_problem_t qk = qy;
  vc_tune_int8_key(h2, &qk, &key);
  VC_EXPECT(!vc_cache_get(VC_INT8_NS, &key, 0, &e),
            "a configuration no tile ran was cached");
  reset_runs();
  tune_call(h2, &f, VOXCONV_DTYPE_F32, 2, 0, "f32 after the failures");
  free(y);
  vc_tune_test_clock_ms = NULL;
  voxconv_destroy(h2);
  fixture_free(&f, h);
}

/* 7. no memory for the check's reference copy: the call still succeeds
 * with the reference tile, untimed, and nothing is cached or memoised, so
 * the next call (memory back) tunes. The handle's allocator refuses
 * blocks of the output's size or more while g_refuse is set. */
static size_t g_refuse;

static void *picky_alloc(void *ctx, size_t bytes, void *stream) {
  (void)ctx, (void)stream;
  return g_refuse && bytes >= g_refuse ? NULL : malloc(bytes ? bytes : 1);
}

static void picky_free(void *ctx, void *ptr, void *stream) {
  (void)ctx, (void)stream;
  free(ptr);
}

static void test_no_memory_for_the_check(void) {
  voxconv_allocator_t al = {picky_alloc, picky_free, NULL};
  voxconv_handle_desc_t dc;
  memset(&dc, 0, sizeof dc);
  dc.backend = VOXCONV_BACKEND_CPU;
  dc.allocator = &al;
  voxconv_handle_t *h = NULL;
  if (voxconv_create(&h, &dc) != VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(0, "voxconv_create: %s", voxconv_get_last_error(NULL));
    return;
  }
  fixture_t f;
  fixture_make(&f, h);
  vc_tune_test_clock_ms = fake_clock;
  unsetenv("VOXCONV_INT8_TILE");
  tt_fresh_cache_dir();
  g_refuse = (size_t)(f.p.n_out * f.p.cout) * 2; /* the f16 output's bytes */
  reset_runs();
  tt_capture_begin();
  tune_call(h, &f, VOXCONV_DTYPE_F16, 1, 0, "no memory for the check");
  char *err = tt_capture_end();
  VC_EXPECT(tt_count(err, "no device memory for the int8 tuner") == 1,
            "the untuned run is not warned about:\n%s", err);
  free(err);
  VC_EXPECT(g_runs[1] == 1 && g_runs[2] == 0,
            "without memory only the reference tile should run once");
  voxconv_call_info_t ci;
  voxconv_get_last_call_info(h, &ci);
  VC_EXPECT(ci.time_ms < 0, "untuned run reports time %g", ci.time_ms);
  vc_cache_key_t key;
  vc_int8_problem_t q = problem_of(&f, VOXCONV_DTYPE_F16, NULL);
  vc_tune_int8_key(h, &q, &key);
  vc_cache_entry_t e;
  VC_EXPECT(!vc_cache_get(VC_INT8_NS, &key, 0, &e),
            "an untuned decision was cached");
  g_refuse = 0;
  reset_runs();
  tune_call(h, &f, VOXCONV_DTYPE_F16, 2, 0, "memory back: tunes");
  VC_EXPECT(g_runs[1] == 4, "the next call did not tune");
  vc_tune_test_clock_ms = NULL;
  fixture_free(&f, h);
  voxconv_destroy(h);
}

/* 6. the real op on the CPU records its call */
static void test_cpu_op_records(voxconv_handle_t *h) {
  fixture_t f;
  fixture_make(&f, h);
  const int64_t ne = f.p.n_out * f.p.cout;
  int32_t *y = (int32_t *)dr_xmalloc((size_t)ne * 4);
  voxconv_feats_t x = {f.p.x, f.p.n_in, f.p.cin, VOXCONV_DTYPE_I8};
  voxconv_weights_t w = {f.p.w, f.p.kvol, f.p.cin, f.p.cout, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {y, f.p.n_out, f.p.cout, VOXCONV_DTYPE_I32};
  VC_EXPECT_STATUS(h, voxconv_conv_forward_int8(h, f.km, &x, &w, NULL, &yf,
                                                NULL),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_call_info_t ci;
  VC_EXPECT_STATUS(h, voxconv_get_last_call_info(h, &ci),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(strcmp(ci.algo, "int8_cpu") == 0 && ci.from_cache == 0 &&
                ci.pass == VOXCONV_PASS_CONV_FWD,
            "CPU int8 call info: %s from_cache %d pass %d", ci.algo,
            ci.from_cache, (int)ci.pass);
  int64_t first;
  int32_t *exp = (int32_t *)dr_xmalloc((size_t)ne * 4);
  model_expected(&f.p, f.acc, VOXCONV_DTYPE_I32, exp);
  VC_EXPECT(model_mismatches(y, exp, VOXCONV_DTYPE_I32, ne, &first) == 0,
            "CPU int8 sums differ from the model (first %lld)",
            (long long)first);
  free(exp);
  free(y);
  fixture_free(&f, h);
}

/* 8. a tile that only stands in for another is not measured (it would
 * time that tile twice), yet still runs when forced. */
static void test_stand_in(voxconv_handle_t *h) {
  fixture_t f;
  fixture_make(&f, h);
  measured_setup();
  const size_t bytes = (size_t)(f.p.n_out * f.p.cout) * 4;
  void *y = dr_xmalloc(bytes);
  /* f32 output: a key no other part of this test tunes */
  vc_int8_problem_t q = problem_of(&f, VOXCONV_DTYPE_F32, y);
  reset_runs();
  tt_capture_begin();
  VC_EXPECT_STATUS(h, vc_tune_int8_tiles(h, &q, &k_alias),
                   VOXCONV_STATUS_SUCCESS);
  free(tt_capture_end());
  /* as in 1.: tile 2 checked + 3 timed + the final run, reference 1 + 3 */
  VC_EXPECT(g_runs[5] == 0 && g_runs[2] == 5 && g_runs[1] == 4,
            "runs: tile 5 %d (want 0), tile 2 %d (want 5), tile 1 %d (want 4)",
            g_runs[5], g_runs[2], g_runs[1]);
  vc_cache_key_t key;
  vc_tune_int8_key(h, &q, &key);
  vc_cache_entry_t e;
  VC_EXPECT(vc_cache_get(VC_INT8_NS, &key, 1, &e), "no f32 entry");
  int has5 = 0;
  for (int r = 0; r < e.n_rows; r++)
    has5 |= strcmp(e.rows[r].params, "tile=5") == 0;
  VC_EXPECT(!has5 && e.n_rows > 0 && strcmp(e.rows[0].params, "tile=2") == 0,
            "f32 entry: %d rows, first %s, a tile=5 row %d", e.n_rows,
            e.n_rows > 0 ? e.rows[0].params : "-", has5);
  vc_cache_entry_free(&e);
  setenv("VOXCONV_INT8_TILE", "5", 1);
  reset_runs();
  VC_EXPECT_STATUS(h, vc_tune_int8_tiles(h, &q, &k_alias),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(g_runs[5] == 1, "forced tile 5 ran %d times", g_runs[5]);
  unsetenv("VOXCONV_INT8_TILE");
  free(y);
  fixture_free(&f, h);
}

/* 9. split-K candidates: the split run of tile 2 is measured beside the
 * unsplit tiles, wins, is cached as "tile=2,split=3" and replayed from the
 * memo and from the cache with its split; VOXCONV_INT8_SPLIT forces one
 * with VOXCONV_INT8_TILE and is refused alone or out of range; a cache row
 * with a malformed split is passed over. */
static void test_split(voxconv_handle_t *h) {
  fixture_t f;
  fixture_make(&f, h);
  measured_setup();
  unsetenv("VOXCONV_INT8_SPLIT");
  /* bf16 output: a key no other part of this test tunes */
  const voxconv_dtype_t dt = VOXCONV_DTYPE_BF16;
  reset_runs();
  tt_capture_begin();
  tune_call_on(h, &f, &k_split, dt, "tile=2,split=3", 0, "split: first call");
  char *err = tt_capture_end();
  VC_EXPECT(tt_count(err, "best fake_i8 tile=2,split=3") == 1,
            "the summary does not name the split winner:\n%s", err);
  free(err);
  /* tile 2 unsplit: check + 3 timed; split: check + 3 timed + final run */
  VC_EXPECT(g_runs[2] == 4 && g_split_runs[2] == 5 && g_last_split == 3 &&
                g_split_runs[1] + g_split_runs[5] == 0,
            "split runs: tile 2 %d / %d (split %d), others %d", g_runs[2],
            g_split_runs[2], g_last_split, g_split_runs[1] + g_split_runs[5]);
  reset_runs();
  tune_call_on(h, &f, &k_split, dt, "tile=2,split=3", 1, "split: memo");
  VC_EXPECT(g_split_runs[2] == 1 && g_last_split == 3 && g_runs[2] == 0,
            "the memo did not replay the split (%d runs, split %d)",
            g_split_runs[2], g_last_split);
  voxconv_handle_t *h2 = cpu_handle();
  reset_runs();
  tune_call_on(h2, &f, &k_split, dt, "tile=2,split=3", 1, "split: cache");
  VC_EXPECT(g_split_runs[2] == 1 && g_last_split == 3,
            "the cache did not replay the split");
  vc_cache_key_t key;
  const vc_int8_problem_t q = problem_of(&f, dt, NULL);
  vc_tune_int8_key(h, &q, &key);
  vc_cache_entry_t e;
  if (vc_cache_get(VC_INT8_NS, &key, 0, &e)) {
    int split_rows = 0, plain2 = 0;
    for (int r = 0; r < e.n_rows; r++) {
      split_rows += strstr(e.rows[r].params, "split") != NULL;
      plain2 += strcmp(e.rows[r].params, "tile=2") == 0;
    }
    VC_EXPECT(split_rows == 1 && plain2 == 1 &&
                  strcmp(e.rows[0].params, "tile=2,split=3") == 0,
              "split entry: %d split rows, tile=2 %d, first %s", split_rows,
              plain2, e.rows[0].params);
    /* a malformed split row ranked first (faster) is passed over for the
     * next */
    static const char *bad_rows[] = {"tile=2,split=1", "tile=2,split=x",
                                     "tile=2,split=65", "tile=2,splat=3"};
    vc_cache_entry_t one = e;
    one.n_rows = 1;
    for (int b = 0; b < 4; b++) {
      vc_cache_row_t row = e.rows[0];
      snprintf(row.params, sizeof row.params, "%s", bad_rows[b]);
      row.time_ms = 1e-3 * (4 - b); /* each ahead of the last */
      one.rows = &row;
      vc_cache_put(&one);
      voxconv_destroy(h2);
      h2 = cpu_handle();
      reset_runs();
      voxconv_call_info_t ci;
      const size_t yb = (size_t)(f.p.n_out * f.p.cout) * 2;
      void *y = dr_xmalloc(yb);
      vc_int8_problem_t qy = problem_of(&f, dt, y);
      VC_EXPECT_STATUS(h2, vc_tune_int8_tiles(h2, &qy, &k_split),
                       VOXCONV_STATUS_SUCCESS);
      voxconv_get_last_call_info(h2, &ci);
      VC_EXPECT(ci.from_cache == 1 &&
                    strcmp(ci.params, "tile=2,split=3") == 0 &&
                    g_split_runs[2] + g_runs[1] + g_runs[2] + g_runs[5] == 1,
                "cache row %s: ran %s (from_cache %d)", bad_rows[b],
                ci.params, ci.from_cache);
      free(y);
    }
    vc_cache_entry_free(&e);
  } else {
    VC_EXPECT(0, "no split entry cached");
  }
  /* forced */
  setenv("VOXCONV_INT8_TILE", "5", 1);
  setenv("VOXCONV_INT8_SPLIT", "7", 1);
  reset_runs();
  tune_call_on(h2, &f, &k_split, dt, "tile=5,split=7", 0, "forced split");
  VC_EXPECT(g_split_runs[5] == 1 && g_last_split == 7, "forced split ran %d",
            g_split_runs[5]);
  setenv("VOXCONV_INT8_SPLIT", "1", 1);
  reset_runs();
  tune_call_on(h2, &f, &k_split, dt, "tile=5", 0, "forced split 1");
  const size_t yb = (size_t)(f.p.n_out * f.p.cout) * 2;
  void *y = dr_xmalloc(yb);
  vc_int8_problem_t qy = problem_of(&f, dt, y);
  static const char *bad[] = {"0", "65", "3x", "-2"};
  for (int b = 0; b < 4; b++) {
    setenv("VOXCONV_INT8_SPLIT", bad[b], 1);
    VC_EXPECT_STATUS(h2, vc_tune_int8_tiles(h2, &qy, &k_split),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT(strstr(voxconv_get_last_error(h2), "VOXCONV_INT8_SPLIT") != NULL,
              "VOXCONV_INT8_SPLIT=%s: %s", bad[b], voxconv_get_last_error(h2));
  }
  unsetenv("VOXCONV_INT8_TILE");
  setenv("VOXCONV_INT8_SPLIT", "3", 1);
  VC_EXPECT_STATUS(h2, vc_tune_int8_tiles(h2, &qy, &k_split),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT(strstr(voxconv_get_last_error(h2), "needs VOXCONV_INT8_TILE"),
            "a split without a tile: %s", voxconv_get_last_error(h2));
  unsetenv("VOXCONV_INT8_SPLIT");
  free(y);
  voxconv_destroy(h2);
  vc_tune_test_clock_ms = NULL;
  fixture_free(&f, h);
}

int main(void) {
  vc_test_init("test_tune_int8");
  tt_fresh_cache_dir();
  voxconv_handle_t *h = cpu_handle();
  test_tuning(h);
  test_cpu_op_records(h);
  test_no_memory_for_the_check();
  test_stand_in(h);
  test_split(h);
  voxconv_destroy(h);
  tt_cleanup();
  return vc_test_finish();
}
