/* The int8 tuner (vc_tune_int8.h): the tile of a CUDA int8 regular conv,
 * measured once per configuration, cached under its own namespace, kept
 * in the handle's memo.
 *
 * Why a tuner of its own: the float tuner's candidates are algorithms whose
 * results differ by rounding, checked against a bound; the int8 tiles all
 * compute exact int32 sums and one specified epilogue, so any difference
 * from the reference tile is a wrong kernel, and the check is bitwise. The
 * table's choice by channel counts (pick_tile) is the fastest tile on the
 * shapes it was set on (workload C with an f16 output) but not elsewhere:
 * with an int8 output at C = 64 and on small problems the tuner measured
 * other tiles faster (docs/perf-notes.md item 79). */
#include "vc_tune_int8.h"
#include "vc_tune.h"

#include "../cpu/vc_cpu.h"
#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

#include <stdlib.h>
#include <string.h>

/* The memo's pass for int8 decisions: outside voxconv_pass_t, so that no
 * float decision can match one. */
#define VC_MEMO_PASS_INT8 (1 << 16)
#define VC_INT8_MAX_TILES 64
#define VC_INT8_MAX_RUNS 64

void vc_tune_int8_key(voxconv_handle_t *h, const vc_int8_problem_t *p,
                      vc_cache_key_t *key) {
  vc_tune_key_of(h, p->kmap, p->cin, p->cout, (int32_t)p->y_dtype, 0, 0, key);
}

/* "tile=N", or "tile=N,split=S" for a split-K run (S > 1) */
static void params_text(int tile, int split, char *buf, size_t size) {
  if (split > 1)
    snprintf(buf, size, "tile=%d,split=%d", tile, split);
  else
    snprintf(buf, size, "tile=%d", tile);
}

/* The tile and split of a cache row's parameters (params_text's forms),
 * or -1 when malformed. */
static int row_tile(const vc_cache_row_t *r, int n_tiles, int *split) {
  int t = -1, sp = 1, len = 0, len2 = 0;
  if (sscanf(r->params, "tile=%d%n", &t, &len) != 1 || t < 0 || t >= n_tiles)
    return -1;
  if (r->params[len] != '\0' &&
      (sscanf(r->params + len, ",split=%d%n", &sp, &len2) != 1 ||
       r->params[len + len2] != '\0' || sp < 2 || sp > VC_INT8_MAX_SPLIT))
    return -1;
  *split = sp;
  return t;
}

static size_t out_bytes(const vc_int8_problem_t *p) {
  return (size_t)p->kmap->n_out * (size_t)p->cout *
         voxconv_dtype_size(p->y_dtype);
}

typedef struct tile_run {
  voxconv_handle_t *h;
  const vc_int8_problem_t *p;
  const vc_int8_tiles_t *be;
  int t, split;
} tile_run_t;

static voxconv_status_t tile_run_call(void *v) {
  const tile_run_t *c = (const tile_run_t *)v;
  return c->be->run(c->h, c->p, c->t, c->split);
}

/* One run of tile t split `split` ways; *ms (may be NULL) its time
 * (vc_tune_timed). */
static voxconv_status_t run_tile(voxconv_handle_t *h,
                                 const vc_int8_problem_t *p,
                                 const vc_int8_tiles_t *be, int t, int split,
                                 double *ms) {
  tile_run_t c = {h, p, be, t, split};
  return vc_tune_timed(h, tile_run_call, &c, ms);
}

/* How many bytes of a and b (backend memory, `bytes` long) differ. */
static voxconv_status_t count_diff(voxconv_handle_t *h, const void *a,
                                   const void *b, size_t bytes, int64_t *n) {
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_count_diff(h, a, b, (int64_t)bytes, n);
#else
  (void)h;
#endif
  const unsigned char *x = (const unsigned char *)a,
                      *y = (const unsigned char *)b;
  int64_t c = 0;
  for (size_t i = 0; i < bytes; i++)
    c += x[i] != y[i];
  *n = c;
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t run_recorded(voxconv_handle_t *h,
                                     const vc_int8_problem_t *p,
                                     const vc_int8_tiles_t *be, int t,
                                     int split, double time_ms,
                                     int from_cache) {
  VC_CHECK(be->run(h, p, t, split));
  char text[32];
  params_text(t, split, text, sizeof text);
  vc_tune_record(h, VOXCONV_PASS_CONV_FWD, be->algo, text, 0, "", 1, time_ms,
                 from_cache);
  return VOXCONV_STATUS_SUCCESS;
}

/* VOXCONV_INT8_TILE: -1 unset, blank or "auto"; else the ID; -2 not one. */
static int tile_from_env(int n_tiles) {
  const char *s = vc_getenv("VOXCONV_INT8_TILE");
  while (s && (*s == ' ' || *s == '\t'))
    s++;
  if (!s || !*s || strcmp(s, "auto") == 0)
    return -1;
  char *end = NULL;
  const long t = strtol(s, &end, 10);
  if (*end || t < 0 || t >= n_tiles)
    return -2;
  return (int)t;
}

/* VOXCONV_INT8_SPLIT (with VOXCONV_INT8_TILE): 1 unset or blank; else the
 * split 1..VC_INT8_MAX_SPLIT; -2 not one. */
static int split_from_env(void) {
  const char *s = vc_getenv("VOXCONV_INT8_SPLIT");
  while (s && (*s == ' ' || *s == '\t'))
    s++;
  if (!s || !*s)
    return 1;
  char *end = NULL;
  const long v = strtol(s, &end, 10);
  if (*end || v < 1 || v > VC_INT8_MAX_SPLIT)
    return -2;
  return (int)v;
}

/* ---- the measurement ------------------------------------------------------ */
typedef struct i8cand {
  int tile, split;
  double ms;     /* median; < 0 when not timed */
  char status[VC_CACHE_STATUS_MAX];
  voxconv_status_t failure; /* of a tile that failed to run */
  char message[160];
} i8cand_t;

/* Runs tile c->tile `warmup` times (the first run's output checked against
 * ref unless ref is NULL) and times `runs` more; c->ms their median. A
 * failing or wrong tile gets its status; only a failure to check is an
 * error. */
static voxconv_status_t measure(voxconv_handle_t *h, const vc_int8_problem_t *p,
                                const vc_int8_tiles_t *be, const void *ref,
                                int warmup, int runs, i8cand_t *c) {
  c->ms = -1;
  c->failure = VOXCONV_STATUS_SUCCESS;
  double t[VC_INT8_MAX_RUNS];
  int n = 0;
  for (int r = 0; r < warmup + runs; r++) {
    double ms = 0;
    const voxconv_status_t st =
        run_tile(h, p, be, c->tile, c->split, r >= warmup ? &ms : NULL);
    if (st != VOXCONV_STATUS_SUCCESS) {
      snprintf(c->status, sizeof c->status, "failed:%s",
               voxconv_status_string(st));
      c->failure = st;
      snprintf(c->message, sizeof c->message, "%.159s", h->last_error);
      vc_clear_error(h);
      return VOXCONV_STATUS_SUCCESS;
    }
    if (r == 0 && ref) {
      int64_t bad = 0;
      VC_CHECK(count_diff(h, p->y, ref, out_bytes(p), &bad));
      if (bad) {
        char split_note[24] = "";
        if (c->split > 1)
          snprintf(split_note, sizeof split_note, " split %d", c->split);
        snprintf(c->status, sizeof c->status, "wrong");
        vc_tune_warn_once(NULL,
                          "%s tile %d%s gives other bits than the "
                          "reference tile on %s cin=%lld cout=%lld (%lld of "
                          "%zu output bytes differ): disqualified; please "
                          "report",
                          be->algo, c->tile, split_note, VC_INT8_NS,
                          (long long)p->cin,
                          (long long)p->cout, (long long)bad, out_bytes(p));
        return VOXCONV_STATUS_SUCCESS;
      }
    }
    if (r >= warmup)
      t[n++] = ms;
  }
  c->ms = n ? vc_median(t, n) : 0;
  snprintf(c->status, sizeof c->status, "ok");
  return VOXCONV_STATUS_SUCCESS;
}

static void cache_results(const vc_cache_key_t *key, const vc_int8_tiles_t *be,
                          const i8cand_t *c, int n) {
  vc_cache_entry_t e;
  memset(&e, 0, sizeof e);
  snprintf(e.ns, sizeof e.ns, "%s", VC_INT8_NS);
  e.key = *key;
  e.coverage = VC_COVER_ALL;
  for (int i = 0; i < n; i++) {
    vc_cache_row_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.algo, sizeof r.algo, "%s", be->algo);
    params_text(c[i].tile, c[i].split, r.params, sizeof r.params);
    r.time_ms = c[i].ms;
    snprintf(r.status, sizeof r.status, "%s", c[i].status);
    r.max_rel = vc_cache_row_ok(&r) ? 0.0 : -1.0; /* ok: bit-identical */
    if (vc_cache_entry_put_row(&e, &r) != 0)
      break; /* out of memory: cache what fits */
  }
  vc_cache_entry_sort(&e);
  vc_cache_put(&e);
  vc_cache_entry_free(&e);
}

/* 1 when tile t would run another usable tile's kernel on p: measuring it
 * would time that tile twice, and could cache t as the winner. */
static int stand_in(voxconv_handle_t *h, const vc_int8_problem_t *p,
                    const vc_int8_tiles_t *be, int t, int n_tiles) {
  if (!be->runs_as)
    return 0;
  const int a = be->runs_as(h, p, t);
  return a != t && a >= 0 && a < n_tiles && be->usable(h, a);
}

/* Tile t as a candidate, then t split as be->split_of proposes, if it
 * does (a small problem: the tile's grid leaves the GPU half idle). */
static int add_candidates(voxconv_handle_t *h, const vc_int8_problem_t *p,
                          const vc_int8_tiles_t *be, int t, i8cand_t *c,
                          int n) {
  c[n].tile = t;
  c[n++].split = 1;
  const int s = be->split_of ? be->split_of(h, p, t) : 1;
  if (s > 1 && s <= VC_INT8_MAX_SPLIT) {
    c[n].tile = t;
    c[n++].split = s;
  }
  return n;
}

/* Every usable tile measured (with its split variant, see add_candidates),
 * the reference tile unsplit first (its output is the one the others must
 * reproduce). *best / *best_split the winner, *best -1 when none ran;
 * *best_ms < 0 when nothing could be measured (no memory for the check's
 * copy: *best is then the reference tile). */
static voxconv_status_t benchmark(voxconv_handle_t *h,
                                  const vc_int8_problem_t *p,
                                  const vc_int8_tiles_t *be,
                                  const vc_cache_key_t *key, int *best,
                                  int *best_split, double *best_ms) {
  const int n_tiles =
      be->n_tiles < VC_INT8_MAX_TILES ? be->n_tiles : VC_INT8_MAX_TILES;
  i8cand_t c[2 * VC_INT8_MAX_TILES];
  int n = 0;
  const int ref_tile = be->default_tile(h, p);
  if (ref_tile >= 0 && ref_tile < n_tiles && be->usable(h, ref_tile))
    n = add_candidates(h, p, be, ref_tile, c, n);
  for (int t = 0; t < n_tiles; t++)
    if (t != ref_tile && be->usable(h, t) && !stand_in(h, p, be, t, n_tiles))
      n = add_candidates(h, p, be, t, c, n);
  *best = -1;
  *best_split = 1;
  *best_ms = -1;
  if (n == 0)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: no tile can run on this device", be->algo);
  const int runs = vc_tune_env_int("VOXCONV_AUTOTUNE_RUNS", 1,
                                   VC_INT8_MAX_RUNS / 2, 5);
  /* the first untimed run is also the checked one, so at least one */
  int warmup = vc_tune_env_int("VOXCONV_AUTOTUNE_WARMUP", 0,
                               VC_INT8_MAX_RUNS / 2, 1);
  warmup = warmup < 1 ? 1 : warmup;
  const double t0 = vc_tune_now_ms();
  const size_t bytes = out_bytes(p);
  void *ref = NULL;
  int have_ref = 0, n_bad = 0, last_failed = -1;
  if (vc_alloc(h, bytes ? bytes : 1, &ref, "int8 tuner reference output") !=
      VOXCONV_STATUS_SUCCESS) {
    /* The check needs a copy of the output; without memory for it the call
     * runs the reference tile rather than fail, and nothing is cached or
     * memoised (a later call may have the memory). */
    vc_clear_error(h);
    vc_tune_warn_once("int8-tune-oom",
                      "%s: no device memory for the int8 tuner's reference "
                      "copy (%zu bytes): running the reference tile, "
                      "untuned",
                      VC_INT8_NS, bytes);
    *best = c[0].tile;
    *best_split = c[0].split;
    return VOXCONV_STATUS_SUCCESS;
  }
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  for (int i = 0; i < n && st == VOXCONV_STATUS_SUCCESS; i++) {
    st = measure(h, p, be, have_ref ? ref : NULL, warmup, runs, &c[i]);
    if (st != VOXCONV_STATUS_SUCCESS)
      break;
    if (strcmp(c[i].status, "ok") != 0) {
      n_bad += strcmp(c[i].status, "wrong") == 0;
      if (c[i].failure != VOXCONV_STATUS_SUCCESS)
        last_failed = i;
      continue;
    }
    if (!have_ref) { /* the first tile that ran is the reference */
      st = voxconv_memcpy(h, ref, p->y, bytes,
                          VOXCONV_MEMCPY_BACKEND_TO_BACKEND);
      have_ref = st == VOXCONV_STATUS_SUCCESS;
    }
    if (*best < 0 || c[i].ms < *best_ms) {
      *best = c[i].tile;
      *best_split = c[i].split;
      *best_ms = c[i].ms;
    }
  }
  vc_free(h, ref);
  if (st != VOXCONV_STATUS_SUCCESS)
    return st;
  if (*best >= 0)
    cache_results(key, be, c, n);
  if (vc_tune_log_enabled()) {
    char what[64], won[32];
    snprintf(what, sizeof what, "%s", voxconv_dtype_name(p->y_dtype));
    params_text(*best, *best_split, won, sizeof won);
    if (*best >= 0)
      fprintf(vc_tune_stream(),
              "voxconv: tuned %s cin=%lld cout=%lld n_out=%lld y=%s: %d "
              "tiles benchmarked (%d disqualified) in %.2f s; best %s "
              "%s %.4g ms\n",
              VC_INT8_NS, (long long)p->cin, (long long)p->cout,
              (long long)p->kmap->n_out, what, n, n_bad,
              (vc_tune_now_ms() - t0) / 1e3, be->algo, won, *best_ms);
    else
      fprintf(vc_tune_stream(),
              "voxconv: tuned %s cin=%lld cout=%lld y=%s: no tile ran (%d "
              "disqualified)\n",
              VC_INT8_NS, (long long)p->cin, (long long)p->cout, what, n_bad);
    fflush(vc_tune_stream());
  }
  if (*best < 0) /* nothing cached: the next call tries again */
    return vc_fail(h,
                   last_failed >= 0 ? c[last_failed].failure
                                    : VOXCONV_STATUS_UNSUPPORTED,
                   "%s: no tile ran this problem (%d of %d gave wrong bits; "
                   "last failure: %s)",
                   be->algo, n_bad, n,
                   last_failed >= 0 ? c[last_failed].message : "none");
  return VOXCONV_STATUS_SUCCESS;
}

/* The best ok row of the cached entry whose tile runs here, -1 if none;
 * *split its split. */
static int cached_tile(voxconv_handle_t *h, const vc_cache_key_t *key,
                       const vc_int8_tiles_t *be, int *split, double *ms) {
  vc_cache_entry_t e;
  if (!vc_cache_get(VC_INT8_NS, key, 1, &e))
    return -1;
  int tile = -1;
  for (int r = 0; r < e.n_rows && tile < 0; r++) {
    const vc_cache_row_t *row = &e.rows[r];
    int sp = 1;
    const int t = row_tile(row, be->n_tiles, &sp);
    if (vc_cache_row_ok(row) && strcmp(row->algo, be->algo) == 0 && t >= 0 &&
        be->usable(h, t)) {
      tile = t;
      *split = sp;
      *ms = row->time_ms;
    }
  }
  vc_cache_entry_free(&e);
  return tile;
}

voxconv_status_t vc_tune_int8_tiles(voxconv_handle_t *h,
                                    const vc_int8_problem_t *p,
                                    const vc_int8_tiles_t *be) {
  const int forced = tile_from_env(be->n_tiles);
  if (forced == -2)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "VOXCONV_INT8_TILE=\"%s\": not a tile ID (0..%d) or auto",
                   vc_getenv("VOXCONV_INT8_TILE"), be->n_tiles - 1);
  const int forced_split = split_from_env();
  if (forced_split == -2)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "VOXCONV_INT8_SPLIT=\"%s\": not a split count 1..%d",
                   vc_getenv("VOXCONV_INT8_SPLIT"), VC_INT8_MAX_SPLIT);
  if (forced_split > 1 && forced < 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "VOXCONV_INT8_SPLIT=\"%s\": needs VOXCONV_INT8_TILE (the "
                   "split of which tile?)",
                   vc_getenv("VOXCONV_INT8_SPLIT"));
  if (forced >= 0) {
    if (!be->usable(h, forced))
      return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                     "VOXCONV_INT8_TILE=%d: %s tile %d cannot run on this "
                     "device (voxconv info --kernels: eligible, constraints)",
                     forced, be->algo, forced);
    return run_recorded(h, p, be, forced, forced_split, -1, 0);
  }
  vc_tune_memo_key_t mk;
  memset(&mk, 0, sizeof mk);
  mk.pass = VC_MEMO_PASS_INT8;
  vc_tune_int8_key(h, p, &mk.key);
  vc_tune_memo_value_t v;
  if (vc_tune_memo_find(h, &mk, &v)) {
    if (run_recorded(h, p, be, v.params.v[0], v.params.v[1], v.time_ms, 1) ==
        VOXCONV_STATUS_SUCCESS)
      return VOXCONV_STATUS_SUCCESS;
    vc_tune_memo_drop(h, &mk); /* e.g. out of memory now: decide again */
    vc_clear_error(h);
  }
  const unsigned gen = vc_cache_generation();
  double ms = -1;
  int split = 1;
  int tile = cached_tile(h, &mk.key, be, &split, &ms);
  int from_cache = tile >= 0;
  const int capturing = vc_stream_capturing(h);
  if (tile < 0 && capturing) {
    vc_tune_warn_once("capture-untuned-int8",
                      "%s cin=%lld cout=%lld met during CUDA graph capture "
                      "with no tuning record: it runs the reference tile, "
                      "unmeasured; run the model once before capturing",
                      VC_INT8_NS, (long long)p->cin, (long long)p->cout);
    return run_recorded(h, p, be, be->default_tile(h, p), 1, -1, 0);
  }
  if (tile < 0) {
    VC_CHECK(benchmark(h, p, be, &mk.key, &tile, &split, &ms));
    from_cache = 0;
  }
  /* The winner runs last, so y holds its output (a disqualified tile may
   * have been the last to write it). */
  VC_CHECK(run_recorded(h, p, be, tile, split, ms, from_cache));
  if (!capturing && (from_cache || ms >= 0)) { /* ms < 0: not measured */
    memset(&v, 0, sizeof v);
    v.params.v[0] = tile;
    v.params.v[1] = split;
    params_text(tile, split, v.params_text, sizeof v.params_text);
    v.time_ms = ms;
    vc_tune_memo_store(h, &mk, &v, from_cache ? gen : vc_cache_generation());
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- the backends ---------------------------------------------------------- */
#ifdef VOXCONV_HAVE_CUDA
static voxconv_status_t cuda_run(voxconv_handle_t *h,
                                 const vc_int8_problem_t *p, int t,
                                 int split) {
  return vc_cuda_conv_int8(h, p, t, split);
}

static const vc_int8_tiles_t k_cuda_tiles = {
    "mask_gemm_i8",
    0 /* vc_cuda_int8_tile_count() */,
    vc_cuda_int8_tile_usable,
    vc_cuda_int8_default_tile,
    cuda_run,
    vc_cuda_int8_tile_runs_as,
    vc_cuda_int8_split_of};
#endif

voxconv_status_t vc_tune_int8(voxconv_handle_t *h, const vc_int8_problem_t *p) {
  const voxconv_pass_t pass =
      p->depthwise ? VOXCONV_PASS_DEPTHWISE_FWD : VOXCONV_PASS_CONV_FWD;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA) {
    if (!p->depthwise) {
      vc_int8_tiles_t be = k_cuda_tiles;
      be.n_tiles = vc_cuda_int8_tile_count();
      return vc_tune_int8_tiles(h, p, &be);
    }
    VC_CHECK(vc_cuda_conv_int8(h, p, -1, 1));
    vc_tune_record(h, pass, "depthwise_i8", "-", 0, "", 1, -1, 0);
    return VOXCONV_STATUS_SUCCESS;
  }
#endif
  VC_CHECK(vc_cpu_conv_int8(h, p));
  vc_tune_record(h, pass, p->depthwise ? "depthwise_i8_cpu" : "int8_cpu", "-",
                 0, "", 1, -1, 0);
  return VOXCONV_STATUS_SUCCESS;
}
