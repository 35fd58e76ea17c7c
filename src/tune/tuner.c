/* The autotuner: for one conv/depthwise pass it resolves the options,
 * builds the candidate pool from the registry, answers from the cache when
 * this configuration was already benchmarked over that search space, and
 * otherwise benchmarks the missing candidates (reference check, warm-up,
 * median, leaders re-timed), records them, and runs the winner into the
 * caller's output. Behaviour is documented in include/voxconv.h.
 *
 * Output safety: the reference algorithm writes the caller's output; every
 * candidate writes a scratch buffer; inputs are only ever read. When the
 * winner is not the reference run itself it is run once more into the
 * output, so a tuning call and a later cached call produce the same bits. */
#include "vc_tune.h"

#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VC_MAX_RUNS 100
#define VC_PARAM_COMBOS_MAX 4096
#define VC_LEADER_MARGIN 0.10
#define VC_SLOW_FACTOR 4.0
#define VC_LONG_RUN_MS 20.0
#define VC_AUTO_LEARNED_MAX 8
#define VC_POOL_MAX 8192

/* ---- small environment knobs ------------------------------------------ */
int vc_tune_env_int(const char *name, int lo, int hi, int dflt) {
  const char *v = vc_getenv(name);
  if (!v)
    return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (!end || *end != '\0' || x < lo || x > hi) {
    vc_tune_warn_once(name, "%s='%s' is not an integer in %d..%d; using %d",
                      name, v, lo, hi, dflt);
    return dflt;
  }
  return (int)x;
}

/* ---- device identity -------------------------------------------------- */
static void sanitize(char *s) {
  char *w = s;
  int space = 0;
  for (char *r = s; *r; r++) {
    char c = *r;
    if (c == '"' || (unsigned char)c < 0x20 || c == 0x7f)
      c = ' ';
    if (c == ' ') {
      if (space || w == s)
        continue;
      space = 1;
    } else {
      space = 0;
    }
    *w++ = c;
  }
  while (w > s && w[-1] == ' ')
    w--;
  *w = '\0';
}

static void cpu_model(char *buf, size_t size) {
  snprintf(buf, size, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0 &&
        strncmp(line, "Model", 5) != 0 && strncmp(line, "Hardware", 8) != 0)
      continue;
    char *colon = strchr(line, ':');
    if (!colon)
      continue;
    snprintf(buf, size, "%s", colon + 1);
    break;
  }
  fclose(f);
  sanitize(buf);
  if (!buf[0])
    snprintf(buf, size, "unknown");
}

static const char *device_key(voxconv_handle_t *h) {
  if (h->tune_device_key[0])
    return h->tune_device_key;
  char name[256];
  if (h->backend == VOXCONV_BACKEND_CUDA) {
    voxconv_device_info_t info;
    if (voxconv_device_get_info(h->device, &info) == VOXCONV_STATUS_SUCCESS) {
      snprintf(name, sizeof name, "%.100s", info.name);
      sanitize(name);
      snprintf(h->tune_device_key, sizeof h->tune_device_key,
               "cuda:%.100s:cc%d.%d", name, info.cc_major, info.cc_minor);
    } else {
      snprintf(h->tune_device_key, sizeof h->tune_device_key, "cuda:device%d",
               h->device);
    }
    vc_clear_error(NULL);
  } else {
    cpu_model(name, 101);
    snprintf(h->tune_device_key, sizeof h->tune_device_key, "cpu:%.100s:%d",
             name, h->num_threads);
  }
  return h->tune_device_key;
}

static int32_t ceil_log2(int64_t v) {
  int32_t r = 0;
  while (r < 62 && ((int64_t)1 << r) < v)
    r++;
  return r;
}

void vc_tune_key_of(voxconv_handle_t *h, const voxconv_kmap_t *m,
                    int64_t cin, int64_t cout, int32_t dtype, int acc, int det,
                    vc_cache_key_t *k) {
  memset(k, 0, sizeof *k);
  vc_copy_text(k->device, sizeof k->device, device_key(h));
  vc_copy_text(k->lib, sizeof k->lib, VOXCONV_VERSION_STRING);
  k->nin = ceil_log2(m->n_in);
  k->nout = ceil_log2(m->n_out);
  k->cin = cin;
  k->cout = cout;
  k->kvol = m->kvol;
  k->dtype = dtype;
  k->acc = acc ? 1 : 0;
  k->det = det ? 1 : 0;
  k->mode = (int32_t)m->desc.mode;
  for (int i = 0; i < 3; i++)
    k->stride[i] = m->desc.stride[i] > 0 ? m->desc.stride[i] : 1;
}

void vc_tune_make_key(voxconv_handle_t *h, const vc_conv_problem_t *p,
                      vc_cache_key_t *k) {
  vc_tune_key_of(h, p->kmap, p->cin, p->cout, (int32_t)p->dtype,
                 p->fp16_accum, p->deterministic, k);
}

/* ---- problem helpers --------------------------------------------------- */
static int is_wgrad(voxconv_pass_t pass) {
  return pass == VOXCONV_PASS_CONV_WGRAD ||
         pass == VOXCONV_PASS_DEPTHWISE_WGRAD;
}

static int64_t output_elems(const vc_conv_problem_t *p) {
  const voxconv_kmap_t *m = p->kmap;
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
    return m->n_out * p->cout;
  case VOXCONV_PASS_CONV_DGRAD:
    return m->n_in * p->cin;
  case VOXCONV_PASS_CONV_WGRAD:
    return (int64_t)m->kvol * p->cin * p->cout;
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return m->n_out * p->cout;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return m->n_in * p->cin;
  case VOXCONV_PASS_DEPTHWISE_WGRAD:
    return (int64_t)m->kvol * p->cin;
  default:
    return 0;
  }
}

/* May fp16-accumulator tiles take part (voxconv.h)? */
static int f16acc_admitted(const vc_conv_problem_t *p, vc_sel_mode_t mode) {
  if (p->dtype != VOXCONV_DTYPE_F16 && p->dtype != VOXCONV_DTYPE_BF16)
    return 0;
  if (is_wgrad(p->pass))
    return 0;
  if (p->fp16_accum || mode == VC_SEL_ALL)
    return 1;
  const int ceil = vc_tune_env_int("VOXCONV_F16ACC_SMALL_CH_CEIL", 0, 1 << 30, 0);
  const int64_t ch = p->cin > p->cout ? p->cin : p->cout;
  return ceil > 0 && ch <= ceil;
}

/* Why algorithm a cannot run p on h, or NULL when it can. */
static const char *cannot_run(const voxconv_handle_t *h, const vc_algo_t *a,
                              const vc_conv_problem_t *p) {
  if (!vc_algo_has_pass(a, p->pass))
    return "it does not implement this pass";
  if (a->info.backend != h->backend && a->info.backend != VOXCONV_BACKEND_AUTO)
    return a->info.backend == VOXCONV_BACKEND_CUDA
               ? "it runs on CUDA and this handle is CPU"
               : "it runs on the CPU and this handle is CUDA";
  if (p->deterministic && !a->info.deterministic)
    return "it is not deterministic and deterministic mode is on";
  if (!a->supports(h, p))
    return "it does not support this problem (dtype, channels or device)";
  return NULL;
}

/* ---- candidates -------------------------------------------------------- */
typedef enum { C_PENDING, C_OK, C_WRONG, C_NONFINITE, C_FAILED } cand_state_t;

typedef struct cand {
  const vc_algo_t *algo;
  vc_algo_params_t params;
  int f16acc;
  char params_text[VC_CACHE_PARAMS_MAX];
  cand_state_t state;
  voxconv_status_t fail_status;
  double times[VC_MAX_RUNS * 2 + 2];
  int n_times;
  double median_ms, max_rel;
} cand_t;

typedef struct pool {
  cand_t *c;
  int n, cap;
  const vc_algo_t *algos[VC_SEL_MAX_ALGOS * 4];
  int n_algos;
} pool_t;

static int pool_add(pool_t *pl, const vc_algo_t *a, voxconv_pass_t pass,
                    const vc_algo_params_t *params) {
  char text[VC_CACHE_PARAMS_MAX];
  vc_params_format(a, pass, params, text, sizeof text);
  for (int i = 0; i < pl->n; i++)
    if (pl->c[i].algo == a && strcmp(pl->c[i].params_text, text) == 0)
      return 0;
  if (pl->n >= VC_POOL_MAX)
    return 0;
  if (pl->n == pl->cap) {
    int cap = pl->cap ? pl->cap * 2 : 16;
    cand_t *nc = (cand_t *)realloc(pl->c, (size_t)cap * sizeof *nc);
    if (!nc)
      return -1;
    pl->c = nc;
    pl->cap = cap;
  }
  cand_t *c = &pl->c[pl->n++];
  memset(c, 0, sizeof *c);
  c->algo = a;
  c->params = *params;
  c->f16acc = vc_params_f16_accum(a, pass, params);
  snprintf(c->params_text, sizeof c->params_text, "%s", text);
  c->median_ms = -1;
  c->max_rel = -1;
  return 0;
}

/* The problem a candidate runs: the caller's, with the accumulator its
 * tile uses and the given output buffer. */
static vc_conv_problem_t cand_problem(const vc_conv_problem_t *p, int f16acc,
                                      void *out) {
  vc_conv_problem_t q = *p;
  if (f16acc)
    q.fp16_accum = 1;
  q.c = out;
  return q;
}

/* Admissible parameter combinations of a (accumulator rule, the
 * algorithm's own supports() for fp16-accumulator problems, and the points
 * this device can run: a->params_supported). */
static int admissible_combos(const voxconv_handle_t *h, const vc_algo_t *a,
                             const vc_conv_problem_t *p, vc_sel_mode_t mode,
                             vc_algo_params_t *out, int max) {
  /* Sized to the space (most algorithms have a handful of combinations,
   * and this runs on every call of a one-algorithm pool). */
  int total = 1;
  const vc_param_space_t *s = a->param_space ? a->param_space(p->pass) : NULL;
  for (int i = 0; s && i < s->n && i < VC_MAX_PARAMS; i++)
    if (s->n_values[i] > 1 && total < VC_PARAM_COMBOS_MAX)
      total *= s->n_values[i] < VC_MAX_PARAM_VALUES ? s->n_values[i]
                                                    : VC_MAX_PARAM_VALUES;
  if (total > VC_PARAM_COMBOS_MAX)
    total = VC_PARAM_COMBOS_MAX;
  vc_algo_params_t stack[8];
  vc_algo_params_t *all =
      total <= 8 ? stack
                 : (vc_algo_params_t *)malloc((size_t)total * sizeof *all);
  if (!all)
    return 0;
  const int n = vc_params_enumerate(a, p->pass, all, total);
  const int f16_ok = f16acc_admitted(p, mode);
  int f16_supported = -1;
  int k = 0;
  for (int i = 0; i < n && k < max; i++) {
    const int f16 = vc_params_f16_accum(a, p->pass, &all[i]);
    if (f16) {
      if (!f16_ok)
        continue;
      if (f16_supported < 0) {
        vc_conv_problem_t q = cand_problem(p, 1, p->c);
        f16_supported = a->supports(h, &q) ? 1 : 0;
      }
      if (!f16_supported)
        continue;
    }
    const vc_conv_problem_t q = cand_problem(p, f16, p->c);
    if (!vc_algo_params_supported(a, h, &q, &all[i]))
      continue;
    out[k++] = all[i];
  }
  if (all != stack)
    free(all);
  return k;
}

/* The default of a for p on h: its first values, with an fp32 accumulator
 * (the first accumulator value that is not fp16). Where this device cannot
 * run that point (a->params_supported, e.g. a tile over the GPU's shared
 * memory limit), the first point of the enumeration order (first parameter
 * fastest, so the next tile at the same other values) with an fp32
 * accumulator that it can run; the plain default when there is none (its
 * run then says why). */
static void default_params(const voxconv_handle_t *h, const vc_algo_t *a,
                           const vc_conv_problem_t *p,
                           vc_algo_params_t *params) {
  const voxconv_pass_t pass = p->pass;
  vc_algo_default_params(a, pass, params);
  const vc_param_space_t *s = a->param_space ? a->param_space(pass) : NULL;
  if (!s)
    return;
  for (int i = 0; i < s->n && i < VC_MAX_PARAMS; i++) {
    if (!s->names[i] || strcmp(s->names[i], VC_PARAM_ACCUMULATOR) != 0)
      continue;
    for (int j = 0; j < s->n_values[i] && j < VC_MAX_PARAM_VALUES; j++) {
      params->v[i] = s->values[i][j];
      if (!vc_params_f16_accum(a, pass, params))
        break;
    }
  }
  if (!a->params_supported)
    return;
  const vc_conv_problem_t q = cand_problem(p, 0, p->c);
  if (vc_algo_params_supported(a, h, &q, params))
    return;
  vc_algo_params_t *all =
      (vc_algo_params_t *)malloc(VC_PARAM_COMBOS_MAX * sizeof *all);
  if (!all)
    return;
  const int n = vc_params_enumerate(a, pass, all, VC_PARAM_COMBOS_MAX);
  for (int i = 0; i < n; i++)
    if (!vc_params_f16_accum(a, pass, &all[i]) &&
        vc_algo_params_supported(a, h, &q, &all[i])) {
      *params = all[i];
      break;
    }
  free(all);
}

/* ---- running ----------------------------------------------------------- */
double (*vc_tune_test_clock_ms)(void);

double vc_tune_now_ms(void) {
  if (vc_tune_test_clock_ms)
    return vc_tune_test_clock_ms();
  return vc_monotonic_ms();
}

voxconv_status_t vc_tune_timed(voxconv_handle_t *h,
                               voxconv_status_t (*fn)(void *ctx), void *ctx,
                               double *ms) {
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA && ms) {
    void *timer = NULL;
    VC_CHECK(vc_cuda_timer_start(h, &timer));
    voxconv_status_t st = fn(ctx);
    if (st != VOXCONV_STATUS_SUCCESS) {
      vc_cuda_timer_discard(h, timer);
      return st;
    }
    return vc_cuda_timer_stop(h, timer, ms);
  }
#else
  (void)h;
#endif
  const double t0 = ms ? vc_tune_now_ms() : 0;
  voxconv_status_t st = fn(ctx);
  if (ms)
    *ms = vc_tune_now_ms() - t0;
  return st;
}

typedef struct run_ctx {
  voxconv_handle_t *h;
  const vc_algo_t *a;
  const vc_conv_problem_t *q;
  const vc_algo_params_t *params;
  void *ws;
} run_ctx_t;

static voxconv_status_t run_ctx_call(void *v) {
  const run_ctx_t *c = (const run_ctx_t *)v;
  return c->a->run(c->h, c->q, c->params, c->ws);
}

/* One run of a with params; *ms (may be NULL) its time (vc_tune_timed). */
static voxconv_status_t run_once(voxconv_handle_t *h, const vc_algo_t *a,
                                 const vc_conv_problem_t *q,
                                 const vc_algo_params_t *params, void *ws,
                                 double *ms) {
  run_ctx_t c = {h, a, q, params, ws};
  return vc_tune_timed(h, run_ctx_call, &c, ms);
}

static voxconv_status_t run_with_workspace(voxconv_handle_t *h,
                                           const vc_algo_t *a,
                                           const vc_conv_problem_t *q,
                                           const vc_algo_params_t *params) {
  size_t ws_bytes = a->workspace_size ? a->workspace_size(q, params) : 0;
  void *ws = NULL;
  if (ws_bytes)
    VC_CHECK(vc_alloc(h, ws_bytes, &ws, "algorithm workspace"));
  voxconv_status_t st = a->run(h, q, params, ws);
  vc_free(h, ws);
  return st;
}

/* The reference check of `got` against `ref` (outputs of p, backend
 * memory) with the bound's S (NULL: relative check only) and factor acc. */
static voxconv_status_t check_output(voxconv_handle_t *h,
                                     const vc_conv_problem_t *p,
                                     const void *got, const void *ref,
                                     const void *s, double acc, vc_check_t *c) {
  const int64_t n = output_elems(p);
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_tune_check(h, got, ref, p->dtype, n, (const float *)s, acc,
                              &c->max_rel, &c->norm_rel, &c->max_ratio,
                              &c->n_nonfinite);
#else
  (void)h;
#endif
  *c = vc_check_host(got, ref, p->dtype, n, s, acc);
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- progress ---------------------------------------------------------- */
typedef struct progress {
  int enabled, tty;
  char what[192];
  double t0;
} progress_t;

static void progress_update(progress_t *pr, int i, int n, const cand_t *c,
                            double best_ms, const cand_t *best) {
  if (!pr->enabled || !pr->tty)
    return;
  char line[400];
  int len = snprintf(line, sizeof line, "voxconv: tuning %s: %d/%d %s(%s)",
                     pr->what, i, n, c->algo->info.name, c->params_text);
  if (best)
    len += snprintf(line + len, sizeof line - (size_t)len, "  best %s %.3f ms",
                    best->algo->info.name, best_ms);
  fprintf(vc_tune_stream(), "\r%-110.110s", line);
  fflush(vc_tune_stream());
  (void)len;
}

static void progress_done(progress_t *pr, int n_new, int n_bad,
                          const vc_cache_row_t *best) {
  if (!pr->enabled)
    return;
  if (pr->tty)
    fprintf(vc_tune_stream(), "\r%-110s\r", "");
  if (best)
    fprintf(vc_tune_stream(),
            "voxconv: tuned %s: %d candidates benchmarked (%d disqualified) "
            "in %.2f s; best %s %s %.4g ms\n",
            pr->what, n_new, n_bad, (vc_tune_now_ms() - pr->t0) / 1e3,
            best->algo, best->params, best->time_ms);
  else
    fprintf(vc_tune_stream(),
            "voxconv: tuned %s: %d candidates benchmarked, none usable "
            "(%d disqualified) in %.2f s\n",
            pr->what, n_new, n_bad, (vc_tune_now_ms() - pr->t0) / 1e3);
  fflush(vc_tune_stream());
}

static void log_line(const progress_t *pr, const char *fmt, ...)
    VC_PRINTF(2, 3);
static void log_line(const progress_t *pr, const char *fmt, ...) {
  if (!pr->enabled)
    return;
  if (pr->tty)
    fprintf(vc_tune_stream(), "\r%-110s\r", "");
  fprintf(vc_tune_stream(), "voxconv: tuning %s: ", pr->what);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(vc_tune_stream(), fmt, ap);
  va_end(ap);
  fputc('\n', vc_tune_stream());
  fflush(vc_tune_stream());
}

/* ---- the benchmark ------------------------------------------------------ */
typedef struct ref_state {
  const vc_algo_t *algo; /* NULL: none ran */
  vc_algo_params_t params;
  int ok;        /* p->c holds a correct output */
  int from_cand; /* the output came from candidate index (-1: reference) */
  /* When two reference algorithms disagree with no third to decide, the
   * second one's output (backend memory, freed by the caller): a candidate
   * that agrees with either is accepted. */
  void *alt;
  const vc_algo_t *alt_algo;
  /* The bound's S per output element (vc_bound_dtype, backend memory;
   * NULL: not computable, the check falls back to relative errors). */
  void *s;
} ref_state_t;

static voxconv_status_t
run_ref_algo(voxconv_handle_t *h, const vc_conv_problem_t *p,
             const vc_algo_t *a, const vc_algo_params_t *params, void *out) {
  vc_conv_problem_t q = cand_problem(p, 0, out);
  q.fp16_accum = 0;
  q.deterministic = 0;
  return run_with_workspace(h, a, &q, params);
}

/* The algorithms that can run p as a reference (fp32 accumulation, any
 * order), deterministic ones and the others apart, in registry order. */
static void ref_candidates(const voxconv_handle_t *h,
                           const vc_conv_problem_t *p, const vc_algo_t **det,
                           int *n_det, const vc_algo_t **any, int *n_any) {
  vc_conv_problem_t q = cand_problem(p, 0, p->c);
  q.fp16_accum = 0;
  q.deterministic = 0;
  *n_det = *n_any = 0;
  for (int i = 0; i < vc_tune_algo_count(); i++) {
    const vc_algo_t *a = vc_tune_algo_at(i);
    if (cannot_run(h, a, &q))
      continue;
    if (a->info.deterministic && *n_det < VC_SEL_MAX_ALGOS)
      det[(*n_det)++] = a;
    else if (!a->info.deterministic && *n_any < VC_SEL_MAX_ALGOS)
      any[(*n_any)++] = a;
  }
}

/* The next algorithm of order[*idx..] that runs p into out (default
 * parameters, fp32 accumulation); NULL when none does. `role` names the
 * run in the log. */
static const vc_algo_t *next_ref(voxconv_handle_t *h,
                                 const vc_conv_problem_t *p,
                                 const vc_algo_t *const *order, int n_order,
                                 int *idx, vc_algo_params_t *params, void *out,
                                 const progress_t *pr, const char *role) {
  while (*idx < n_order) {
    const vc_algo_t *a = order[(*idx)++];
    default_params(h, a, p, params);
    voxconv_status_t st = run_ref_algo(h, p, a, params, out);
    if (st == VOXCONV_STATUS_SUCCESS)
      return a;
    log_line(pr, "%s %s failed (%s): %s", role, a->info.name,
             voxconv_status_string(st), h->last_error);
  }
  return NULL;
}

/* ---- the bound's scale S ------------------------------------------------ */
/* Elements of input a (which = 0) or b (1) of p (roles of vc_algo.h). */
static int64_t input_elems(const vc_conv_problem_t *p, int which) {
  const voxconv_kmap_t *m = p->kmap;
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
    return which ? (int64_t)m->kvol * p->cin * p->cout : m->n_in * p->cin;
  case VOXCONV_PASS_CONV_DGRAD:
    return which ? (int64_t)m->kvol * p->cin * p->cout : m->n_out * p->cout;
  case VOXCONV_PASS_CONV_WGRAD:
    return which ? m->n_out * p->cout : m->n_in * p->cin;
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return which ? (int64_t)m->kvol * p->cin : m->n_in * p->cin;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return which ? (int64_t)m->kvol * p->cin : m->n_out * p->cin;
  case VOXCONV_PASS_DEPTHWISE_WGRAD:
    return which ? m->n_out * p->cin : m->n_in * p->cin;
  default:
    return 0;
  }
}

/* |src| (n elements of dtype, backend memory) into dst as sdt. */
static voxconv_status_t abs_copy(voxconv_handle_t *h, const void *src,
                                 voxconv_dtype_t dtype, int64_t n, void *dst,
                                 voxconv_dtype_t sdt) {
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return sdt == VOXCONV_DTYPE_F32
               ? vc_cuda_tune_abs_f32(h, src, dtype, n, (float *)dst)
               : vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                         "no f64 algorithms on CUDA");
#else
  (void)h;
#endif
  for (int64_t i = 0; i < n; i++) {
    const double v = fabs(vc_tune_load_elem(src, dtype, i));
    if (sdt == VOXCONV_DTYPE_F64)
      ((double *)dst)[i] = v;
    else
      ((float *)dst)[i] = (float)v;
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* S_i = sum of |a| * |b| over the products of output element i: p run on
 * |a| and |b| in fp32 (f64 for f64 problems) by the first algorithm that
 * can, in the reference's order (deterministic ones first). Returns the
 * buffer (backend memory) or NULL, after saying why in the log. */
static void *bound_scale(voxconv_handle_t *h, const vc_conv_problem_t *p,
                         const progress_t *pr) {
  const voxconv_dtype_t sdt = vc_bound_dtype(p->dtype);
  const size_t es = voxconv_dtype_size(sdt);
  const int64_t na = input_elems(p, 0), nb = input_elems(p, 1);
  const int64_t nc = output_elems(p);
  if (na <= 0 || nb <= 0 || nc <= 0)
    return NULL; /* nothing to compare */
  void *abs_a = NULL, *abs_b = NULL, *s = NULL;
  const char *why = NULL;
  if (vc_alloc(h, (size_t)na * es, &abs_a, "tuning bound |a|") ||
      vc_alloc(h, (size_t)nb * es, &abs_b, "tuning bound |b|") ||
      vc_alloc(h, (size_t)nc * es, &s, "tuning bound S"))
    why = "out of memory";
  else if (abs_copy(h, p->a, p->dtype, na, abs_a, sdt) ||
           abs_copy(h, p->b, p->dtype, nb, abs_b, sdt))
    why = "the |x| conversion failed";
  if (!why) {
    vc_conv_problem_t q = cand_problem(p, 0, s);
    q.dtype = sdt;
    q.a = abs_a;
    q.b = abs_b;
    const vc_algo_t *det[VC_SEL_MAX_ALGOS], *any[VC_SEL_MAX_ALGOS];
    int n_det, n_any, i = 0, j = 0;
    vc_algo_params_t params;
    ref_candidates(h, &q, det, &n_det, any, &n_any);
    if (!next_ref(h, &q, det, n_det, &i, &params, s, pr, "bound scale") &&
        !next_ref(h, &q, any, n_any, &j, &params, s, pr, "bound scale"))
      why = sdt == VOXCONV_DTYPE_F32 ? "no algorithm runs this problem in f32"
                                     : "no algorithm runs this problem";
  }
  vc_free(h, abs_a);
  vc_free(h, abs_b);
  if (why) {
    vc_free(h, s);
    log_line(pr,
             "the error bound's scale S could not be computed (%s): "
             "candidates are checked by relative error instead",
             why);
    return NULL;
  }
  return s;
}

/* The check of x against y for two fp32-accumulated outputs (a reference
 * and its second opinion); 1 when they agree. */
static int outputs_agree(voxconv_handle_t *h, const vc_conv_problem_t *p,
                         const void *x, const void *y, const void *s,
                         vc_check_t *c) {
  c->max_rel = c->max_ratio = INFINITY;
  if (check_output(h, p, x, y, s, vc_tune_acc_factor(p, 0), c) !=
      VOXCONV_STATUS_SUCCESS)
    return 0;
  const vc_tolerance_t tol = vc_tune_tolerance(p->dtype, 0);
  return vc_check_passes(c, &tol);
}

/* "error ratio R, max_rel M" (ratio only where the bound applies). */
static const char *check_text(const vc_check_t *c, char *buf, size_t size) {
  if (c->max_ratio >= 0)
    snprintf(buf, size, "error ratio %.3g, max_rel %.3g", c->max_ratio,
             c->max_rel);
  else
    snprintf(buf, size, "max_rel %.3g", c->max_rel);
  return buf;
}

/* When the first two references disagree: a third decides. Returns the
 * second output to keep as ref->alt (no majority), or NULL (freed or
 * adopted). */
static void *vote_reference(voxconv_handle_t *h, const vc_conv_problem_t *p,
                            ref_state_t *ref, const vc_algo_t *const *det,
                            int n_det, int *idx, void *second,
                            const vc_algo_t *a2, const vc_algo_params_t *p2,
                            const vc_check_t *c12, void *scratch,
                            const progress_t *pr) {
  const size_t bytes = (size_t)output_elems(p) * voxconv_dtype_size(p->dtype);
  const char *ns = vc_cache_pass_namespace((int)p->pass);
  char once[256], text[96];
  vc_algo_params_t p3;
  const vc_algo_t *a3 =
      next_ref(h, p, det, n_det, idx, &p3, scratch, pr, "reference");
  vc_check_t c13, c23;
  const int ag13 = a3 && outputs_agree(h, p, scratch, p->c, ref->s, &c13);
  const int ag23 = a3 && outputs_agree(h, p, scratch, second, ref->s, &c23);
  if (ag23 && !ag13) {
    /* The first reference is the odd one out: the other two are it. */
    snprintf(once, sizeof once, "refvote:%s:%s", ns, ref->algo->info.name);
    vc_tune_warn_once(once,
                      "%s: %s (default parameters) disagrees with %s and %s "
                      "(%s); they are used as the reference",
                      ns, ref->algo->info.name, a2->info.name, a3->info.name,
                      check_text(c12, text, sizeof text));
    if (voxconv_memcpy(h, p->c, second, bytes,
                       VOXCONV_MEMCPY_BACKEND_TO_BACKEND) ==
        VOXCONV_STATUS_SUCCESS) {
      ref->algo = a2;
      ref->params = *p2;
    }
  } else if (!ag13) {
    snprintf(once, sizeof once, "refsplit:%s:%s", ns, ref->algo->info.name);
    vc_tune_warn_once(once,
                      "%s: reference algorithms disagree (%s vs %s: %s%s%s); "
                      "candidates agreeing with either pass",
                      ns, ref->algo->info.name, a2->info.name,
                      check_text(c12, text, sizeof text),
                      a3 ? ", third opinion " : "", a3 ? a3->info.name : "");
    ref->alt_algo = a2;
    return second;
  }
  vc_free(h, second);
  return NULL;
}

/* Runs the reference into p->c: the first deterministic algorithm that runs
 * p (default parameters, fp32 accumulation), else the first one at all.
 * A single implementation is not trusted blindly: the next deterministic
 * algorithm gives a second opinion, and when the two disagree a third one
 * decides (the two that agree win). `scratch` (output-sized) is used for
 * the third opinion. ref->s (the bound) is kept. */
static void run_reference(voxconv_handle_t *h, const vc_conv_problem_t *p,
                          ref_state_t *ref, const progress_t *pr,
                          void *scratch) {
  void *s = ref->s;
  memset(ref, 0, sizeof *ref);
  ref->s = s;
  ref->from_cand = -1;
  const vc_algo_t *det[VC_SEL_MAX_ALGOS], *any[VC_SEL_MAX_ALGOS];
  int n_det = 0, n_any = 0;
  ref_candidates(h, p, det, &n_det, any, &n_any);
  int idx = 0;
  ref->algo =
      next_ref(h, p, det, n_det, &idx, &ref->params, p->c, pr, "reference");
  if (!ref->algo) {
    int j = 0;
    ref->algo =
        next_ref(h, p, any, n_any, &j, &ref->params, p->c, pr, "reference");
    ref->ok = ref->algo != NULL;
    return; /* no deterministic algorithm to confirm with */
  }
  ref->ok = 1;
  if (idx >= n_det)
    return;
  const size_t bytes = (size_t)output_elems(p) * voxconv_dtype_size(p->dtype);
  void *second = NULL;
  if (vc_alloc(h, bytes, &second, "tuning second reference") !=
      VOXCONV_STATUS_SUCCESS)
    return;
  vc_algo_params_t p2;
  const vc_algo_t *a2 =
      next_ref(h, p, det, n_det, &idx, &p2, second, pr, "reference");
  vc_check_t c12;
  if (!a2 || outputs_agree(h, p, second, p->c, ref->s, &c12)) {
    vc_free(h, second);
    return; /* confirmed (or nothing to confirm with) */
  }
  ref->alt = vote_reference(h, p, ref, det, n_det, &idx, second, a2, &p2, &c12,
                            scratch, pr);
}

/* The bound's scale, then the reference (the second opinion is checked
 * with the bound already). */
static void reference_with_bound(voxconv_handle_t *h,
                                 const vc_conv_problem_t *p, ref_state_t *ref,
                                 const progress_t *pr, void *scratch) {
  ref->s = bound_scale(h, p, pr);
  run_reference(h, p, ref, pr, scratch);
}

/* Frees what the reference keeps besides p->c. */
static void ref_release(voxconv_handle_t *h, ref_state_t *ref) {
  vc_free(h, ref->alt);
  vc_free(h, ref->s);
  ref->alt = NULL;
  ref->s = NULL;
}

static void row_from_cand(const cand_t *c, vc_cache_row_t *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->algo, sizeof r->algo, "%s", c->algo->info.name);
  snprintf(r->params, sizeof r->params, "%s", c->params_text);
  r->time_ms = c->state == C_OK ? c->median_ms : -1;
  r->max_rel = c->max_rel;
  switch (c->state) {
  case C_OK:
    snprintf(r->status, sizeof r->status, "ok");
    break;
  case C_WRONG:
    snprintf(r->status, sizeof r->status, "wrong");
    break;
  case C_NONFINITE:
    snprintf(r->status, sizeof r->status, "nonfinite");
    break;
  default:
    snprintf(r->status, sizeof r->status, "failed:%s",
             voxconv_status_string(c->fail_status));
    break;
  }
}

/* Logs why candidate c failed the check chk under tol. */
static void log_wrong(const progress_t *pr, const cand_t *c,
                      const vc_check_t *chk, const vc_tolerance_t *tol,
                      const ref_state_t *ref) {
  if (chk->max_ratio < 0) {
    log_line(pr,
             "%s(%s) disqualified: max_rel %.3g (limit %.3g), norm_rel %.3g "
             "(limit %.3g) against %s (relative check: no error bound)",
             c->algo->info.name, c->params_text, chk->max_rel,
             isfinite(tol->user_max_rel) ? tol->user_max_rel : tol->max_rel,
             chk->norm_rel, tol->norm_rel, ref->algo->info.name);
    return;
  }
  char user[48] = "", norm[48] = "";
  if (isfinite(tol->user_max_rel))
    snprintf(user, sizeof user, " (VOXCONV_AUTOTUNE_MAX_REL %.3g)",
             tol->user_max_rel);
  if (tol->norm_gate)
    snprintf(norm, sizeof norm, " (limit %.3g)", tol->norm_rel);
  log_line(pr,
           "%s(%s) disqualified: error ratio %.3g (limit 1: |y - ref| over "
           "the format's bound), max_rel %.3g%s, norm_rel %.3g%s against %s",
           c->algo->info.name, c->params_text, chk->max_ratio, chk->max_rel,
           user, chk->norm_rel, norm, ref->algo->info.name);
}

/* The reference check of candidate c, whose output is `got`: 1 when it
 * passes; otherwise c's state says why (and the log). */
static int check_candidate(voxconv_handle_t *h, const vc_conv_problem_t *p,
                           cand_t *c, const ref_state_t *ref, const void *got,
                           const progress_t *pr) {
  const vc_tolerance_t tol = vc_tune_tolerance(p->dtype, c->f16acc);
  const double acc = vc_tune_acc_factor(p, c->f16acc);
  vc_check_t chk, alt;
  voxconv_status_t st = check_output(h, p, got, p->c, ref->s, acc, &chk);
  if (st != VOXCONV_STATUS_SUCCESS) {
    c->state = C_FAILED;
    c->fail_status = st;
    return 0;
  }
  if (ref->alt && !vc_check_passes(&chk, &tol) &&
      check_output(h, p, got, ref->alt, ref->s, acc, &alt) ==
          VOXCONV_STATUS_SUCCESS &&
      vc_check_passes(&alt, &tol))
    chk = alt; /* agrees with the other side of a split reference */
  c->max_rel = chk.max_rel;
  if (chk.n_nonfinite > 0) {
    c->state = C_NONFINITE;
    log_line(pr,
             "%s(%s) disqualified: %lld non-finite values where the "
             "reference is finite (or the reverse)",
             c->algo->info.name, c->params_text, (long long)chk.n_nonfinite);
    return 0;
  }
  if (!vc_check_passes(&chk, &tol)) {
    c->state = C_WRONG;
    log_wrong(pr, c, &chk, &tol, ref);
    return 0;
  }
  return 1;
}

/* Warm-up and timed runs of a candidate that passed the check (t_first: its
 * first run). A candidate far behind the best on its first run is not
 * worth more runs; long runs get fewer repetitions. */
static voxconv_status_t time_candidate(voxconv_handle_t *h, cand_t *c,
                                       const vc_conv_problem_t *q, void *ws,
                                       double t_first, double best, int runs,
                                       int warmup) {
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  int n_runs = runs;
  if (isfinite(best) && t_first > VC_SLOW_FACTOR * best)
    n_runs = 0;
  else if (t_first > VC_LONG_RUN_MS)
    n_runs = runs < 2 ? runs : 2;
  c->n_times = 0;
  if (n_runs == 0 || warmup == 0)
    c->times[c->n_times++] = t_first;
  for (int w = 1; w < warmup && n_runs > 0 && st == VOXCONV_STATUS_SUCCESS; w++)
    st = run_once(h, c->algo, q, &c->params, ws, NULL);
  for (int r = (warmup == 0 ? 1 : 0);
       r < n_runs && st == VOXCONV_STATUS_SUCCESS; r++) {
    double ms = 0;
    st = run_once(h, c->algo, q, &c->params, ws, &ms);
    c->times[c->n_times++] = ms;
  }
  if (st != VOXCONV_STATUS_SUCCESS)
    return st;
  double tmp[VC_MAX_RUNS * 2 + 2];
  memcpy(tmp, c->times, (size_t)c->n_times * sizeof tmp[0]);
  c->median_ms = vc_median(tmp, c->n_times);
  return st;
}

/* Leaders within 10% of the best are timed again: a single noisy median
 * must not decide between near-equal kernels. */
static void retime_leaders(voxconv_handle_t *h, const vc_conv_problem_t *p,
                           pool_t *pl, const int *todo, int n_todo,
                           void *scratch, int runs) {
  int *idx = (int *)malloc((size_t)n_todo * 3 * sizeof *idx);
  double *times = (double *)malloc((size_t)n_todo * sizeof *times);
  if (!idx || !times) {
    free(idx);
    free(times);
    return;
  }
  int *ok = idx + n_todo, *leaders = idx + 2 * n_todo;
  for (int t = 0; t < n_todo; t++) {
    times[t] = pl->c[todo[t]].median_ms;
    ok[t] = pl->c[todo[t]].state == C_OK;
  }
  const int n_lead = vc_leaders(times, ok, n_todo, VC_LEADER_MARGIN, leaders);
  for (int l = 0; n_lead > 1 && l < n_lead; l++) {
    cand_t *c = &pl->c[todo[leaders[l]]];
    const vc_conv_problem_t q = cand_problem(p, c->f16acc, scratch);
    size_t ws_bytes =
        c->algo->workspace_size ? c->algo->workspace_size(&q, &c->params) : 0;
    void *ws = NULL;
    if (ws_bytes && vc_alloc(h, ws_bytes, &ws, "candidate workspace") !=
                        VOXCONV_STATUS_SUCCESS)
      continue;
    for (int r = 0; r < runs && c->n_times < VC_MAX_RUNS * 2 + 2; r++) {
      double ms = 0;
      if (run_once(h, c->algo, &q, &c->params, ws, &ms) !=
          VOXCONV_STATUS_SUCCESS)
        break;
      c->times[c->n_times++] = ms;
    }
    vc_free(h, ws);
    double tmp[VC_MAX_RUNS * 2 + 2];
    memcpy(tmp, c->times, (size_t)c->n_times * sizeof tmp[0]);
    c->median_ms = vc_median(tmp, c->n_times);
  }
  free(idx);
  free(times);
}

/* Marks c failed with st and logs it. */
static void cand_failed(const progress_t *pr, cand_t *c, voxconv_status_t st,
                        const char *msg) {
  c->state = C_FAILED;
  c->fail_status = st;
  log_line(pr, "%s(%s) disqualified: failed with %s: %s", c->algo->info.name,
           c->params_text, voxconv_status_string(st), msg);
}

/* Benchmarks pool candidates todo[0..n_todo) (indices into pl). p->c ends
 * holding the reference output (ref->ok) or nothing useful. */
static voxconv_status_t benchmark(voxconv_handle_t *h,
                                  const vc_conv_problem_t *p, pool_t *pl,
                                  const int *todo, int n_todo,
                                  double best_known_ms, ref_state_t *ref,
                                  progress_t *pr, int *n_bad) {
  const size_t bytes = (size_t)output_elems(p) * voxconv_dtype_size(p->dtype);
  void *scratch = NULL;
  VC_CHECK(vc_alloc(h, bytes, &scratch, "tuning scratch output"));
  const int runs = vc_tune_env_int("VOXCONV_AUTOTUNE_RUNS", 1, VC_MAX_RUNS, 5);
  const int warmup = vc_tune_env_int("VOXCONV_AUTOTUNE_WARMUP", 0, VC_MAX_RUNS, 1);

  reference_with_bound(h, p, ref, pr, scratch);
  double best = best_known_ms > 0 ? best_known_ms : INFINITY;
  const cand_t *best_c = NULL;
  *n_bad = 0;
  for (int t = 0; t < n_todo; t++) {
    cand_t *c = &pl->c[todo[t]];
    progress_update(pr, t + 1, n_todo, c, best, best_c);
    const vc_conv_problem_t q = cand_problem(p, c->f16acc, scratch);
    size_t ws_bytes =
        c->algo->workspace_size ? c->algo->workspace_size(&q, &c->params) : 0;
    void *ws = NULL;
    voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
    if (ws_bytes)
      st = vc_alloc(h, ws_bytes, &ws, "candidate workspace");
    double t_first = 0;
    if (st == VOXCONV_STATUS_SUCCESS)
      st = run_once(h, c->algo, &q, &c->params, ws, &t_first);
    if (st != VOXCONV_STATUS_SUCCESS) {
      cand_failed(pr, c, st, h->last_error);
      (*n_bad)++;
      vc_free(h, ws);
      continue;
    }
    if (!ref->ok) {
      /* No reference could run: the first candidate that runs becomes it
       * (so later ones are still compared with something). */
      st = voxconv_memcpy(h, p->c, scratch, bytes,
                          VOXCONV_MEMCPY_BACKEND_TO_BACKEND);
      if (st == VOXCONV_STATUS_SUCCESS) {
        ref->ok = 1;
        ref->algo = c->algo;
        ref->params = c->params;
        ref->from_cand = todo[t];
        log_line(pr, "no reference algorithm ran; comparing with %s(%s)",
                 c->algo->info.name, c->params_text);
      }
    }
    if (ref->ok && !check_candidate(h, p, c, ref, scratch, pr)) {
      (*n_bad)++;
      vc_free(h, ws);
      continue;
    }
    st = time_candidate(h, c, &q, ws, t_first, best, runs, warmup);
    vc_free(h, ws);
    if (st != VOXCONV_STATUS_SUCCESS) {
      c->state = C_FAILED;
      c->fail_status = st;
      (*n_bad)++;
      continue;
    }
    c->state = C_OK;
    if (c->median_ms < best) {
      best = c->median_ms;
      best_c = c;
    }
  }
  retime_leaders(h, p, pl, todo, n_todo, scratch, runs);
  vc_free(h, scratch);
  ref_release(h, ref);
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- dispatch ---------------------------------------------------------- */
void vc_tune_record(voxconv_handle_t *h, voxconv_pass_t pass,
                    const char *algo, const char *params, int fp16_accum,
                    const char *reason, int deterministic, double time_ms,
                    int from_cache) {
  voxconv_call_info_t *info = &h->last_call;
  info->pass = pass;
  vc_copy_text(info->algo, sizeof info->algo, algo);
  vc_copy_text(info->params, sizeof info->params, params);
  info->fp16_accum = fp16_accum;
  vc_copy_text(info->fp16_accum_reason, sizeof info->fp16_accum_reason, reason);
  info->deterministic = deterministic;
  info->time_ms = time_ms;
  info->from_cache = from_cache;
  h->has_last_call = 1;
}

static void record_call(voxconv_handle_t *h, const vc_conv_problem_t *p,
                        const char *algo, const char *params,
                        const char *reason, double time_ms, int from_cache) {
  vc_tune_record(h, p->pass, algo, params, p->fp16_accum, reason,
                 p->deterministic, time_ms, from_cache);
}

voxconv_status_t voxconv_get_last_call_info(const voxconv_handle_t *h,
                                            voxconv_call_info_t *info) {
  VC_CHECK_NULL(NULL, h, "handle");
  VC_CHECK_NULL(h, info, "info");
  if (!h->has_last_call)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_get_last_call_info: this handle has not run a "
                   "conv or depthwise pass yet");
  *info = h->last_call;
  return VOXCONV_STATUS_SUCCESS;
}

/* A cached row usable for this call (pool algorithm, current parameter
 * space, accumulator rule, a point this device runs). */
static const vc_algo_t *usable_row(const voxconv_handle_t *h,
                                   const vc_conv_problem_t *p, const pool_t *pl,
                                   vc_sel_mode_t mode, const vc_cache_row_t *r,
                                   vc_algo_params_t *params) {
  if (!vc_cache_row_ok(r))
    return NULL;
  for (int i = 0; i < pl->n_algos; i++) {
    const vc_algo_t *a = pl->algos[i];
    if (strcmp(a->info.name, r->algo) != 0)
      continue;
    if (!vc_params_parse(a, p->pass, r->params, params))
      return NULL;
    const int f16 = vc_params_f16_accum(a, p->pass, params);
    if (f16 && !f16acc_admitted(p, mode))
      return NULL;
    /* e.g. a row recorded before the device's limit was lowered
     * (VOXCONV_CUDA_SMEM_LIMIT): the device key does not tell them apart */
    const vc_conv_problem_t q = cand_problem(p, f16, p->c);
    if (!vc_algo_params_supported(a, h, &q, params))
      return NULL;
    return a;
  }
  return NULL;
}

static int coverage_hit(const vc_cache_entry_t *top, int have_top,
                        const vc_cache_key_t *key, const char *ns,
                        const pool_t *pl, vc_sel_mode_t mode) {
  if (!have_top)
    return 0;
  if (top->coverage & VC_COVER_ALL)
    return 1;
  if (mode == VC_SEL_AUTO)
    return (top->coverage & VC_COVER_AUTO) != 0;
  if (mode == VC_SEL_ALL)
    return 0;
  for (int i = 0; i < pl->n_algos; i++) {
    char sub[VC_CACHE_NS_MAX + VC_CACHE_ALGO_MAX];
    snprintf(sub, sizeof sub, "%s/%s", ns, pl->algos[i]->info.name);
    vc_cache_entry_t e;
    if (!vc_cache_get(sub, key, 0, &e))
      return 0;
    const int full = (e.coverage & (VC_COVER_FULL | VC_COVER_ALL)) != 0;
    vc_cache_entry_free(&e);
    if (!full)
      return 0;
  }
  return 1;
}

/* Builds the search space for `mode` over pl->algos. */
static void build_candidates(const voxconv_handle_t *h,
                             const vc_conv_problem_t *p, const char *ns,
                             const vc_cache_key_t *key, vc_sel_mode_t mode,
                             pool_t *pl) {
  vc_algo_params_t *combos =
      (vc_algo_params_t *)malloc(VC_PARAM_COMBOS_MAX * sizeof *combos);
  if (!combos)
    return;
  if (mode != VC_SEL_AUTO) {
    for (int i = 0; i < pl->n_algos; i++) {
      const int n = admissible_combos(h, pl->algos[i], p, mode, combos,
                                      VC_PARAM_COMBOS_MAX);
      for (int j = 0; j < n; j++)
        pool_add(pl, pl->algos[i], p->pass, &combos[j]);
    }
    free(combos);
    return;
  }
  /* auto: the recorded reduced set for this family plus every algorithm's
   * default; without records, an even spread over the algorithms. */
  vc_cache_row_t learned[VC_AUTO_LEARNED_MAX];
  const int n_learned =
      vc_cache_recommend_for(ns, key, learned, VC_AUTO_LEARNED_MAX);
  if (n_learned > 0) {
    for (int r = 0; r < n_learned; r++) {
      vc_algo_params_t params;
      const vc_algo_t *a = usable_row(h, p, pl, mode, &learned[r], &params);
      if (a)
        pool_add(pl, a, p->pass, &params);
    }
    for (int i = 0; i < pl->n_algos; i++) {
      vc_algo_params_t params;
      default_params(h, pl->algos[i], p, &params);
      pool_add(pl, pl->algos[i], p->pass, &params);
    }
    free(combos);
    return;
  }
  /* CPU algorithms pick their parameters from the shape by default (their
   * first value), and a CPU benchmark costs as much as the op: there auto
   * means each algorithm's default unless records say otherwise. */
  const int max =
      vc_tune_env_int("VOXCONV_AUTOTUNE_MAX_CANDIDATES", 1, VC_POOL_MAX,
              h->backend == VOXCONV_BACKEND_CUDA ? 24 : pl->n_algos);
  int counts[VC_SEL_MAX_ALGOS * 4];
  vc_algo_params_t *per[VC_SEL_MAX_ALGOS * 4];
  for (int i = 0; i < pl->n_algos; i++) {
    per[i] = (vc_algo_params_t *)malloc(VC_PARAM_COMBOS_MAX * sizeof **per);
    counts[i] = per[i] ? admissible_combos(h, pl->algos[i], p, mode, per[i],
                                           VC_PARAM_COMBOS_MAX)
                       : 0;
  }
  for (int j = 0; pl->n < max; j++) {
    int any = 0;
    for (int i = 0; i < pl->n_algos && pl->n < max; i++) {
      if (j >= counts[i])
        continue;
      any = 1;
      pool_add(pl, pl->algos[i], p->pass, &per[i][j]);
    }
    if (!any)
      break;
  }
  for (int i = 0; i < pl->n_algos; i++)
    free(per[i]);
  free(combos);
}

/* One call's state through dispatch. */
typedef struct tune_call {
  voxconv_handle_t *h;
  vc_conv_problem_t *p;
  const char *reason; /* which rule set the fp16 accumulator */
  const char *ns;     /* the pass's cache namespace */
  vc_algo_selection_t sel;
  vc_sel_mode_t mode;
  pool_t pl;
  vc_cache_key_t key;
  vc_cache_entry_t top; /* the selection entry recorded for key */
  int have_top;
} tune_call_t;

/* The resolved flags of the call: fp16 accumulator and determinism. */
static void resolve_flags(tune_call_t *tc, const voxconv_conv_options_t *opt) {
  vc_conv_problem_t *p = tc->p;
  tc->reason = "";
  p->fp16_accum =
      vc_resolve_fp16_accum_reason(opt, p->dtype, p->pass, &tc->reason);
  if (opt && opt->deterministic == VOXCONV_TRUE)
    p->deterministic = 1;
  else if (opt && opt->deterministic == VOXCONV_FALSE)
    p->deterministic = 0;
  else
    p->deterministic = tc->h->deterministic ? 1 : 0;
}

/* The algorithms of the search space that can run here (tc->pl.algos);
 * UNSUPPORTED when none. */
static voxconv_status_t pool_algos(tune_call_t *tc) {
  voxconv_handle_t *h = tc->h;
  const vc_conv_problem_t *p = tc->p;
  pool_t *pl = &tc->pl;
  if (tc->mode == VC_SEL_LIST) {
    for (int i = 0; i < tc->sel.n; i++) {
      const char *why = cannot_run(h, tc->sel.algos[i], p);
      if (why) {
        char key[160];
        snprintf(key, sizeof key, "skip:%s:%d:%s", tc->sel.algos[i]->info.name,
                 (int)p->pass, why);
        vc_tune_warn_once(key, "algorithm %s (from %s) skipped for %s: %s",
                          tc->sel.algos[i]->info.name, tc->sel.source, tc->ns,
                          why);
        continue;
      }
      pl->algos[pl->n_algos++] = tc->sel.algos[i];
    }
    if (pl->n_algos == 0) {
      char key[160];
      snprintf(key, sizeof key, "fallback:%s:%s", tc->sel.source, tc->ns);
      vc_tune_warn_once(key,
                        "none of the algorithms named by %s can run %s on "
                        "this handle; using auto",
                        tc->sel.source, tc->ns);
      tc->mode = VC_SEL_AUTO;
    }
  }
  if (tc->mode != VC_SEL_LIST) {
    for (int i = 0; i < vc_tune_algo_count(); i++) {
      const vc_algo_t *a = vc_tune_algo_at(i);
      if (!cannot_run(h, a, p) &&
          pl->n_algos < (int)(sizeof pl->algos / sizeof pl->algos[0]))
        pl->algos[pl->n_algos++] = a;
    }
  }
  if (pl->n_algos == 0)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: no algorithm can run dtype %s, cin=%lld, cout=%lld%s "
                   "on this %s handle",
                   tc->ns, voxconv_dtype_name(p->dtype), (long long)p->cin,
                   (long long)p->cout,
                   p->deterministic ? " deterministically" : "",
                   vc_backend_name(h->backend));
  return VOXCONV_STATUS_SUCCESS;
}

/* Runs candidate (a, params) into the caller's output and records the call
 * (time_ms -1: not timed). */
static voxconv_status_t run_untimed(tune_call_t *tc, const vc_algo_t *a,
                                    const vc_algo_params_t *params) {
  const vc_conv_problem_t q = cand_problem(
      tc->p, vc_params_f16_accum(a, tc->p->pass, params), tc->p->c);
  voxconv_status_t st = run_with_workspace(tc->h, a, &q, params);
  if (st == VOXCONV_STATUS_SUCCESS) {
    char text[VC_CACHE_PARAMS_MAX];
    vc_params_format(a, tc->p->pass, params, text, sizeof text);
    record_call(tc->h, tc->p, a->info.name, text, tc->reason, -1, 0);
  }
  return st;
}

/* A single algorithm with a single admissible point needs no benchmark and
 * no cache: 1 when that is the case (*st: the run's status). */
static int run_only_algo(tune_call_t *tc, voxconv_status_t *st) {
  if (tc->pl.n_algos != 1)
    return 0;
  vc_algo_params_t one[2];
  if (admissible_combos(tc->h, tc->pl.algos[0], tc->p, tc->mode, one, 2) != 1)
    return 0;
  *st = run_untimed(tc, tc->pl.algos[0], &one[0]);
  return 1;
}

/* The recorded answer when the cache covers this search space: 1 when a
 * recorded winner ran (*st success). */
static int run_cached(tune_call_t *tc, voxconv_status_t *st) {
  if (!coverage_hit(&tc->top, tc->have_top, &tc->key, tc->ns, &tc->pl,
                    tc->mode))
    return 0;
  for (int r = 0; r < tc->top.n_rows; r++) {
    vc_algo_params_t params;
    const vc_algo_t *a =
        usable_row(tc->h, tc->p, &tc->pl, tc->mode, &tc->top.rows[r], &params);
    if (!a)
      continue;
    const vc_conv_problem_t q = cand_problem(
        tc->p, vc_params_f16_accum(a, tc->p->pass, &params), tc->p->c);
    *st = run_with_workspace(tc->h, a, &q, &params);
    if (*st == VOXCONV_STATUS_SUCCESS) {
      record_call(tc->h, tc->p, a->info.name, tc->top.rows[r].params,
                  tc->reason, tc->top.rows[r].time_ms, 1);
      return 1;
    }
    /* A recorded winner that fails now (e.g. out of memory) gives way to
     * the next one. */
  }
  return 0; /* nothing recorded is usable: tune again */
}

/* While the handle's stream is captured into a CUDA graph nothing may wait
 * for the GPU and timings mean nothing (work is recorded, not run), so a
 * call the cache does not answer gets a choice that needs no GPU work: the
 * pool's algorithms in order, each with its default parameters (fp32
 * accumulators unless the call resolved fp16 on), the first that runs.
 * Nothing is recorded in the cache. */
static voxconv_status_t run_during_capture(tune_call_t *tc) {
  vc_conv_problem_t *p = tc->p;
  vc_tune_warn_once("capture-untuned",
                    "%s cin=%lld cout=%lld dtype %s met during CUDA graph "
                    "capture with no tuning record: it runs each algorithm's "
                    "default, unmeasured (this and any other such call); run "
                    "the network once before capturing so the tuner can "
                    "measure it",
                    tc->ns, (long long)p->cin, (long long)p->cout,
                    voxconv_dtype_name(p->dtype));
  voxconv_status_t st = VOXCONV_STATUS_UNSUPPORTED;
  for (int i = 0; i < tc->pl.n_algos; i++) {
    const vc_algo_t *a = tc->pl.algos[i];
    vc_algo_params_t params;
    if (!p->fp16_accum)
      default_params(tc->h, a, p, &params);
    else if (admissible_combos(tc->h, a, p, tc->mode, &params, 1) != 1)
      continue;
    st = run_untimed(tc, a, &params);
    if (st == VOXCONV_STATUS_SUCCESS)
      return st;
  }
  return vc_fail(tc->h, st,
                 "%s: no algorithm ran during stream capture; last error: %s",
                 tc->ns, tc->h->last_error[0] ? tc->h->last_error : "none");
}

/* Pool candidates not recorded before for this configuration (those keep
 * their record) into todo; *best_known: the best recorded time (-1). */
static int candidates_to_measure(const tune_call_t *tc, int *todo,
                                 double *best_known) {
  int n_todo = 0;
  *best_known = -1;
  for (int i = 0; i < tc->pl.n; i++) {
    const vc_cache_row_t *old =
        tc->have_top
            ? vc_cache_entry_find_row(&tc->top, tc->pl.c[i].algo->info.name,
                                      tc->pl.c[i].params_text)
            : NULL;
    if (old) {
      if (vc_cache_row_ok(old) &&
          (*best_known < 0 || old->time_ms < *best_known))
        *best_known = old->time_ms;
      continue;
    }
    todo[n_todo++] = i;
  }
  return n_todo;
}

static void progress_begin(progress_t *pr, const tune_call_t *tc) {
  const vc_conv_problem_t *p = tc->p;
  memset(pr, 0, sizeof *pr);
  pr->enabled = vc_tune_log_enabled();
  pr->tty = isatty(fileno(vc_tune_stream()));
  pr->t0 = vc_tune_now_ms();
  snprintf(pr->what, sizeof pr->what,
           "%s cin=%lld cout=%lld n_in=2^%d n_out=2^%d kvol=%d %s acc=%s%s "
           "[%s]",
           tc->ns, (long long)p->cin, (long long)p->cout, (int)tc->key.nin,
           (int)tc->key.nout, (int)tc->key.kvol, voxconv_dtype_name(p->dtype),
           p->fp16_accum ? "f16" : "f32", p->deterministic ? " det" : "",
           tc->mode == VC_SEL_AUTO  ? "auto"
           : tc->mode == VC_SEL_ALL ? "all"
                                    : "list");
}

/* Records the measured candidates (the selection entry gets every one,
 * each algorithm's entry its own; coverage says which search this was)
 * and returns in *rec the ranking over everything known for this
 * configuration. */
static void record_results(const tune_call_t *tc, const int *todo, int n_todo,
                           int ref_ok, vc_cache_entry_t *rec) {
  memset(rec, 0, sizeof *rec);
  snprintf(rec->ns, sizeof rec->ns, "%s", tc->ns);
  rec->key = tc->key;
  rec->coverage = tc->mode == VC_SEL_AUTO  ? VC_COVER_AUTO
                  : tc->mode == VC_SEL_ALL ? VC_COVER_ALL
                                           : 0;
  int any_ok = 0;
  for (int t = 0; t < n_todo; t++) {
    vc_cache_row_t row;
    row_from_cand(&tc->pl.c[todo[t]], &row);
    vc_cache_entry_put_row(rec, &row);
    any_ok |= tc->pl.c[todo[t]].state == C_OK;
  }
  /* Candidates that could not run at all (e.g. out of memory everywhere)
   * are not worth remembering: the next call tries again. */
  if (n_todo > 0 && (any_ok || ref_ok)) {
    vc_cache_entry_sort(rec);
    vc_cache_put(rec);
    for (int i = 0; i < tc->pl.n_algos; i++) {
      vc_cache_entry_t sub;
      memset(&sub, 0, sizeof sub);
      snprintf(sub.ns, sizeof sub.ns, "%s/%s", tc->ns,
               tc->pl.algos[i]->info.name);
      sub.key = tc->key;
      sub.coverage = tc->mode == VC_SEL_AUTO  ? VC_COVER_AUTO
                     : tc->mode == VC_SEL_ALL ? (VC_COVER_ALL | VC_COVER_FULL)
                                              : VC_COVER_FULL;
      for (int r = 0; r < rec->n_rows; r++)
        if (strcmp(rec->rows[r].algo, tc->pl.algos[i]->info.name) == 0)
          vc_cache_entry_put_row(&sub, &rec->rows[r]);
      vc_cache_entry_sort(&sub);
      vc_cache_put(&sub);
      vc_cache_entry_free(&sub);
    }
  }
  if (tc->have_top)
    vc_cache_entry_merge(rec, &tc->top, 0);
  vc_cache_entry_sort(rec);
}

/* Runs the winner (the first usable row of rec) into the caller's output,
 * or, with none, lets the reference's output stand. */
static voxconv_status_t run_winner(tune_call_t *tc, const vc_cache_entry_t *rec,
                                   int n_todo, ref_state_t *ref, progress_t *pr,
                                   int n_bad) {
  voxconv_handle_t *h = tc->h;
  vc_conv_problem_t *p = tc->p;
  const vc_cache_row_t *win = NULL;
  const vc_algo_t *win_algo = NULL;
  vc_algo_params_t win_params;
  for (int r = 0; r < rec->n_rows && !win; r++) {
    win_algo = usable_row(h, p, &tc->pl, tc->mode, &rec->rows[r], &win_params);
    if (win_algo)
      win = &rec->rows[r];
  }
  /* Nothing measured (every candidate was recorded before): no line. */
  if (n_todo > 0)
    progress_done(pr, n_todo, n_bad, win);
  if (!win && !ref->ok) {
    if (vc_stream_capturing(h))
      return run_during_capture(tc); /* no reference run may wait now */
    /* nothing usable was recorded: the reference output is the answer */
    void *scratch = NULL;
    const size_t bytes = (size_t)output_elems(p) * voxconv_dtype_size(p->dtype);
    if (vc_alloc(h, bytes, &scratch, "tuning scratch output") ==
        VOXCONV_STATUS_SUCCESS) {
      reference_with_bound(h, p, ref, pr, scratch);
      vc_free(h, scratch);
      ref_release(h, ref);
    }
  }
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  if (win) {
    const int win_f16 = vc_params_f16_accum(win_algo, p->pass, &win_params);
    const int same_as_output =
        n_todo > 0 && ref->ok && ref->algo == win_algo && !win_f16 &&
        !p->fp16_accum && win_algo->info.deterministic &&
        memcmp(&ref->params, &win_params, sizeof win_params) == 0;
    if (!same_as_output) {
      const vc_conv_problem_t q = cand_problem(p, win_f16, p->c);
      st = run_with_workspace(h, win_algo, &q, &win_params);
    }
    if (st == VOXCONV_STATUS_SUCCESS)
      record_call(h, p, win_algo->info.name, win->params, tc->reason,
                  win->time_ms, n_todo == 0);
  } else if (ref->ok && ref->algo) {
    /* Every candidate was disqualified: the reference output (already in
     * p->c) is correct, so the call still succeeds. */
    char text[VC_CACHE_PARAMS_MAX];
    vc_params_format(ref->algo, p->pass, &ref->params, text, sizeof text);
    char once[192];
    snprintf(once, sizeof once, "noneok:%s:%s", tc->ns, tc->sel.source);
    vc_tune_warn_once(once,
                      "%s: no candidate of %s passed the correctness check; "
                      "using the reference %s",
                      tc->ns, tc->sel.source, ref->algo->info.name);
    record_call(h, p, ref->algo->info.name, text, tc->reason, -1, 0);
  } else {
    st = vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                 "%s: every candidate failed (%d benchmarked); last error: %s",
                 tc->ns, n_todo, h->last_error[0] ? h->last_error : "none");
  }
  return st;
}

/* The candidates not measured yet are benchmarked (never during stream
 * capture), recorded, and the best known one runs into the output. */
static voxconv_status_t tune_and_run(tune_call_t *tc) {
  pool_t *pl = &tc->pl;
  int *todo = (int *)malloc((size_t)(pl->n ? pl->n : 1) * sizeof *todo);
  if (!todo)
    return vc_fail(tc->h, VOXCONV_STATUS_ALLOC_FAILED, "%s: out of host memory",
                   tc->ns);
  double best_known = -1;
  const int n_todo = candidates_to_measure(tc, todo, &best_known);
  if (n_todo > 0 && vc_stream_capturing(tc->h)) {
    free(todo);
    return run_during_capture(tc);
  }
  progress_t pr;
  progress_begin(&pr, tc);
  ref_state_t ref;
  memset(&ref, 0, sizeof ref);
  int n_bad = 0;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  if (n_todo > 0)
    st = benchmark(tc->h, tc->p, pl, todo, n_todo, best_known, &ref, &pr,
                   &n_bad);
  if (st == VOXCONV_STATUS_SUCCESS) {
    vc_cache_entry_t rec;
    record_results(tc, todo, n_todo, ref.ok, &rec);
    st = run_winner(tc, &rec, n_todo, &ref, &pr, n_bad);
    vc_cache_entry_free(&rec);
  }
  free(todo);
  return st;
}

/* Pool, cache, benchmark once the call's flags and key are known. */
static voxconv_status_t dispatch_pool(tune_call_t *tc) {
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  if (run_only_algo(tc, &st))
    return st;
  vc_tune_make_key(tc->h, tc->p, &tc->key);
  tc->have_top = vc_cache_get(tc->ns, &tc->key, 1, &tc->top);
  if (run_cached(tc, &st))
    return st;
  build_candidates(tc->h, tc->p, tc->ns, &tc->key, tc->mode, &tc->pl);
  const pool_t *pl = &tc->pl;
  if (pl->n == 1 && !(tc->have_top && vc_cache_entry_find_row(
                                          &tc->top, pl->c[0].algo->info.name,
                                          pl->c[0].params_text)))
    /* One candidate: nothing to compare, nothing worth recording. */
    return run_untimed(tc, pl->c[0].algo, &pl->c[0].params);
  if (pl->n == 0)
    return vc_fail(tc->h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: no parameter combination of the selected algorithms "
                   "is admissible for this call",
                   tc->ns);
  return tune_and_run(tc);
}

/* ---- the memo (memo.c): repeated calls skip the lookup ------------------ */
static void memo_key_of(const tune_call_t *tc, vc_tune_memo_key_t *k) {
  k->pass = (int)tc->p->pass;
  k->mode = (int)tc->sel.mode;
  k->n_sel = tc->sel.n;
  memcpy(k->sel, tc->sel.algos, (size_t)tc->sel.n * sizeof k->sel[0]);
  vc_tune_make_key(tc->h, tc->p, &k->key);
}

/* 1 when the memoised decision ran (*st success); a decision that fails
 * now is forgotten and the full lookup decides. */
static int run_memo(tune_call_t *tc, const vc_tune_memo_key_t *k,
                    voxconv_status_t *st) {
  vc_tune_memo_value_t v;
  if (!vc_tune_memo_find(tc->h, k, &v))
    return 0;
  const vc_conv_problem_t q = cand_problem(
      tc->p, vc_params_f16_accum(v.algo, tc->p->pass, &v.params), tc->p->c);
  *st = run_with_workspace(tc->h, v.algo, &q, &v.params);
  if (*st != VOXCONV_STATUS_SUCCESS) {
    vc_tune_memo_drop(tc->h, k);
    vc_clear_error(tc->h);
    return 0;
  }
  record_call(tc->h, tc->p, v.algo->info.name, v.params_text, tc->reason,
              v.time_ms, 1);
  return 1;
}

/* Remembers what the full lookup just ran (h->last_call). */
static void memo_store_last(tune_call_t *tc, const vc_tune_memo_key_t *k,
                            unsigned gen) {
  const voxconv_call_info_t *ci = &tc->h->last_call;
  vc_tune_memo_value_t v;
  memset(&v, 0, sizeof v);
  v.algo = vc_algo_find(ci->algo);
  if (!v.algo ||
      !vc_params_parse(v.algo, tc->p->pass, ci->params, &v.params))
    return;
  snprintf(v.params_text, sizeof v.params_text, "%s", ci->params);
  v.time_ms = ci->time_ms;
  vc_tune_memo_store(tc->h, k, &v, gen);
}

voxconv_status_t vc_tune_dispatch(voxconv_handle_t *h, vc_conv_problem_t *p,
                                  const voxconv_conv_options_t *opt) {
  tune_call_t tc;
  memset(&tc, 0, sizeof tc);
  tc.h = h;
  tc.p = p;
  resolve_flags(&tc, opt);
  VC_CHECK(vc_algo_selection_for(h, opt, p->pass, &tc.sel));
  tc.ns = vc_cache_pass_namespace((int)p->pass);
  tc.mode = tc.sel.mode;
  vc_tune_memo_key_t mk;
  memo_key_of(&tc, &mk);
  voxconv_status_t st;
  if (run_memo(&tc, &mk, &st)) {
    vc_clear_error(h);
    return st;
  }
  /* The generation the decision is made in (a change during the call,
   * e.g. this call's own tuning results, makes it stale: the next call
   * looks up again and memoises that). */
  const unsigned gen = vc_cache_generation();
  st = pool_algos(&tc);
  if (st == VOXCONV_STATUS_SUCCESS)
    st = dispatch_pool(&tc);
  if (st == VOXCONV_STATUS_SUCCESS) {
    vc_clear_error(h);
    /* not while capturing: the choice then may be the untuned default */
    if (!vc_stream_capturing(h))
      memo_store_last(&tc, &mk, gen);
  }
  vc_cache_entry_free(&tc.top);
  free(tc.pl.c);
  return st;
}
