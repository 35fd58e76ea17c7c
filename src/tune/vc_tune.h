/* The tuner (DESIGN.md §3 "find vs get"): algorithm selection from option
 * strings and environment, fp16-accumulator resolution, the benchmark
 * runner, and the process-wide view of the persistent tuning cache.
 * Public behaviour is documented in include/voxconv.h ("tuning"). */
#ifndef VC_TUNE_H
#define VC_TUNE_H

#include "../ops/vc_algo.h"
#include "vc_cache_db.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- logging ---------------------------------------------------------- */
/* 0 when VOXCONV_AUTOTUNE_LOG is false/0/off/no (read on every call). */
int vc_tune_log_enabled(void);
/* Prints "voxconv: warning: ..." on stderr once per distinct `once_key`
 * (NULL: the formatted text itself) for the life of the process. */
void vc_tune_warn_once(const char *once_key, const char *fmt, ...)
    VC_PRINTF(2, 3);
/* Where warnings and progress go (stderr; tests may redirect). */
FILE *vc_tune_stream(void);

/* ---- fp16 accumulator (accum.c) --------------------------------------- */
/* Full precedence (voxconv.h); *reason gets a static sentence. The 3-arg
 * vc_resolve_fp16_accum (declared in src/ops/vc_validate.h) is the same
 * without the reason. */
int vc_resolve_fp16_accum_reason(const voxconv_conv_options_t *opt,
                                 voxconv_dtype_t dtype, voxconv_pass_t pass,
                                 const char **reason);
/* Re-reads VOXCONV_USE_FP16_ACCUM as if the process just started (tests). */
void vc_fp16_accum_reset_from_env(void);

/* ---- algorithm registry view (algo_select.c) -------------------------- */
/* The registry plus algorithms added by tests (vc_tune_set_extra_algos),
 * which the tuner treats exactly like registered ones. */
int vc_tune_algo_count(void);
const vc_algo_t *vc_tune_algo_at(int index);
/* Case-insensitive; for depthwise passes "explicit"/"implicit" name
 * depthwise_explicit/depthwise_implicit. NULL when unknown. */
const vc_algo_t *vc_tune_algo_find(const char *name, voxconv_pass_t pass);
/* Tests only: extra records (NULL/0 removes them). Not thread-safe. */
void vc_tune_set_extra_algos(const vc_algo_t *const *algos, int n);
/* Tests only: 1 puts those records before the registry's. */
extern int vc_tune_extra_first;

static inline int vc_algo_has_pass(const vc_algo_t *a, voxconv_pass_t pass) {
  return (a->info.passes & (1u << (unsigned)pass)) != 0;
}

/* ---- algorithm selection (algo_select.c) ------------------------------ */
typedef enum vc_sel_mode {
  VC_SEL_AUTO = 0,
  VC_SEL_ALL = 1,
  VC_SEL_LIST = 2
} vc_sel_mode_t;

#define VC_SEL_MAX_ALGOS 64

typedef struct vc_algo_selection {
  vc_sel_mode_t mode;
  int n; /* LIST: the algorithms named, in order, without repeats */
  const vc_algo_t *algos[VC_SEL_MAX_ALGOS];
  char source[64]; /* "opt->fwd_algo", "VOXCONV_FWD_ALGO_MODE", "default" */
} vc_algo_selection_t;

/* The text that applies to a pass (per-call field, else environment
 * variable, else NULL = auto) and where it came from. Blank strings count
 * as unset. */
const char *vc_algo_mode_text(const voxconv_conv_options_t *opt,
                              voxconv_pass_t pass, const char **source);
/* Parses one mode string for a pass. INVALID_ARGUMENT (on h) with the
 * valid names when malformed or unknown. */
voxconv_status_t vc_parse_algo_mode(const voxconv_handle_t *h, const char *text,
                                    voxconv_pass_t pass, const char *source,
                                    vc_algo_selection_t *sel);
/* Both of the above. */
voxconv_status_t vc_algo_selection_for(const voxconv_handle_t *h,
                                       const voxconv_conv_options_t *opt,
                                       voxconv_pass_t pass,
                                       vc_algo_selection_t *sel);
/* "a, b, c" of every algorithm implementing the pass (plus aliases). */
void vc_valid_algo_names(voxconv_pass_t pass, char *buf, size_t size);

/* ---- parameters (algo_select.c) --------------------------------------- */
/* "name=v,name=v" ("-" when the algorithm has no parameters). */
void vc_params_format(const vc_algo_t *a, voxconv_pass_t pass,
                      const vc_algo_params_t *params, char *buf, size_t size);
/* Inverse of vc_params_format against the algorithm's current space: 1 on
 * success, 0 when the text does not match it (e.g. a stale cache row). */
int vc_params_parse(const vc_algo_t *a, voxconv_pass_t pass, const char *text,
                    vc_algo_params_t *params);
/* 1 when params select an fp16-accumulator tile. */
int vc_params_f16_accum(const vc_algo_t *a, voxconv_pass_t pass,
                        const vc_algo_params_t *params);
/* Every combination of a's parameter space for the pass (the cartesian
 * product, first parameter fastest, so the first combinations cover every
 * value of the first parameter), at most max; returns the count. */
int vc_params_enumerate(const vc_algo_t *a, voxconv_pass_t pass,
                        vc_algo_params_t *out, int max);

/* ---- ranking helpers (tune_check.c; pure, unit-tested) ---------------- */
/* Median of n values (sorts v in place); NAN when n == 0. */
double vc_median(double *v, int n);
/* Indices i with ok[i] and times[i] <= best * (1 + margin), written to idx;
 * returns their count (0 when nothing is ok). */
int vc_leaders(const double *times, const int *ok, int n, double margin,
               int *idx);
/* ---- the reference check (tune_check.c; pure, unit-tested) ------------ */
/* A candidate y agrees with the reference r when every element satisfies
 *   |y_i - r_i| <= spacing(max(|y_i|, |r_i|)) + acc * S_i
 * (voxconv.h "tuning"): spacing is the distance between adjacent values of
 * the output format there (subnormal spacing included), S_i the sum of
 * |a| * |b| over the products that make element i, and acc =
 * lambda * sqrt(n) * (u_y + u_r) the probabilistic rounding-error bound of
 * the two accumulations (vc_tune_acc_factor). */
#define VC_BOUND_LAMBDA 8.0

/* Distance between the two values of `dtype` around |v| (the spacing of
 * the binade of |v|; the smallest subnormal step below the normal range). */
double vc_format_spacing(voxconv_dtype_t dtype, double v);
/* Unit roundoff of the accumulator a tile of this dtype uses, with one
 * extra bit for tensor cores that truncate: f64 2^-53; fp16 accumulators
 * (f16/bf16 data, f16_accum) 2^-10; every other (fp32) 2^-23. */
double vc_tune_unit_roundoff_acc(voxconv_dtype_t dtype, int f16_accum);
/* Upper bound on the products summed into one output element of p: fwd
 * kvol * cin, dgrad kvol * cout, wgrad min(n_in, n_out) (one pair per row
 * and offset); depthwise kvol, resp. min(n_in, n_out). At least 1. */
int64_t vc_tune_terms(const vc_conv_problem_t *p);
/* acc of the bound for a candidate (f16acc: its tile accumulates in fp16)
 * against an fp32-accumulated reference. */
double vc_tune_acc_factor(const vc_conv_problem_t *p, int f16acc);
/* The dtype S is kept in: F64 for f64 problems, F32 otherwise (sums of
 * |a||b| of f16/bf16 data overflow f16). */
static inline voxconv_dtype_t vc_bound_dtype(voxconv_dtype_t dtype) {
  return dtype == VOXCONV_DTYPE_F64 ? VOXCONV_DTYPE_F64 : VOXCONV_DTYPE_F32;
}

/* Limits of the reference check for a candidate. With the bound (S known)
 * a candidate passes when max_ratio <= 1, plus norm_rel <= norm_rel for
 * fp16-accumulator tiles (norm_gate: their elementwise bound is loose),
 * plus max_rel <= user_max_rel. Without S (fallback) it passes when
 * max_rel <= max_rel (user_max_rel instead when set) and norm_rel <=
 * norm_rel: the relative check of earlier versions. */
typedef struct vc_tolerance {
  double max_rel, norm_rel;
  double user_max_rel; /* VOXCONV_AUTOTUNE_MAX_REL; INFINITY when unset */
  int norm_gate;
} vc_tolerance_t;
vc_tolerance_t vc_tune_tolerance(voxconv_dtype_t dtype, int f16_accum);
/* Error of got against ref (both n elements of dtype, host memory):
 * max_rel = max over i of |got-ref| / (|ref| + 0.01 rms(ref)), the norm
 * ratio, max_ratio = max over i of |got-ref| / tol_i with the bound above
 * (s: n elements of vc_bound_dtype(dtype), acc its factor; -1 when s is
 * NULL), and how many elements are non-finite where the other is not (or
 * differ in kind: NaN vs Inf vs finite, Inf of another sign). */
typedef struct vc_check {
  double max_rel, norm_rel, max_ratio;
  int64_t n_nonfinite;
} vc_check_t;
vc_check_t vc_check_host(const void *got, const void *ref,
                         voxconv_dtype_t dtype, int64_t n, const void *s,
                         double acc);
/* 1 when c passes under t (see vc_tolerance_t). */
int vc_check_passes(const vc_check_t *c, const vc_tolerance_t *t);
/* Element i of p (dtype: f32, f16, bf16, f64) as a double. */
double vc_tune_load_elem(const void *p, voxconv_dtype_t dtype, int64_t i);

/* ---- the tuner (tuner.c) ---------------------------------------------- */
/* Resolves options, picks (cache / benchmark) and runs an algorithm for p,
 * and records the handle's last-call info. Called by vc_dispatch_conv. */
voxconv_status_t vc_tune_dispatch(voxconv_handle_t *h, vc_conv_problem_t *p,
                                  const voxconv_conv_options_t *opt);
/* The cache key of p on h (device identity, library version, shapes). */
void vc_tune_make_key(voxconv_handle_t *h, const vc_conv_problem_t *p,
                      vc_cache_key_t *key);
/* The same from its parts (map m's sizes, mode and stride; dtype, acc and
 * det as stored): the int8 tuner's keys. */
void vc_tune_key_of(voxconv_handle_t *h, const voxconv_kmap_t *m,
                    int64_t cin, int64_t cout, int32_t dtype, int acc, int det,
                    vc_cache_key_t *key);
/* Sets h's last-call info (voxconv_get_last_call_info). */
void vc_tune_record(voxconv_handle_t *h, voxconv_pass_t pass,
                    const char *algo, const char *params, int fp16_accum,
                    const char *reason, int deterministic, double time_ms,
                    int from_cache);
/* An integer knob from the environment in lo..hi (else dflt, warned once
 * when set to something else). */
int vc_tune_env_int(const char *name, int lo, int hi, int dflt);
/* The benchmark runner's CPU clock in ms (vc_tune_test_clock_ms when set). */
double vc_tune_now_ms(void);
/* fn(ctx) once; *ms (may be NULL) its time: CUDA events on h's stream
 * (waits for it), the clock above on the CPU (the call is synchronous
 * there). */
voxconv_status_t vc_tune_timed(voxconv_handle_t *h,
                               voxconv_status_t (*fn)(void *ctx), void *ctx,
                               double *ms);

/* ---- the process-wide cache (cache.c) --------------------------------- */
/* Path of the cache file now (re-evaluated each call: the environment may
 * change). 0 when no location can be determined (no HOME). */
int vc_cache_current_path(char *buf, size_t size);
/* Copies the entry (ns, key) into *out (rows malloc'd; free with
 * vc_cache_entry_free). 1 when found. Loads the file at first use and
 * re-reads it when it changed on disk since (only when `reload_on_miss`
 * and the entry is missing from memory). */
int vc_cache_get(const char *ns, const vc_cache_key_t *key, int reload_on_miss,
                 vc_cache_entry_t *out);
/* Merges e into the process table (its rows win), marks it for saving and
 * wakes the background saver. */
void vc_cache_put(const vc_cache_entry_t *e);
/* Reduced set for auto (vc_cache_recommend over the process table). */
int vc_cache_recommend_for(const char *ns, const vc_cache_key_t *like,
                           vc_cache_row_t *out, int max);
/* Synchronous read-merge-write of unsaved entries; 0 or -1 with msg. */
int vc_cache_save_now(char *msg, size_t msg_size);
/* Tests: drop the process table without saving (as a fresh process). */
void vc_cache_forget(void);
/* Changes whenever the table's answers may have changed (see cache.c). */
unsigned vc_cache_generation(void);

/* ---- per-handle memo of decisions (memo.c) ---------------------------- */
/* A call repeats one seen before on the same handle when its pass, cache
 * key (shapes, flags, device), search mode and the algorithms named are
 * the same: the memo hands back what ran then, without the pool, the
 * cache lookup or the admissible-combination scan (which dominated the
 * host time of a cached call: a 64 KB scratch allocation, a stat of the
 * cache file). A memo entry holds only while the cache's generation is
 * the one it was made in. */
typedef struct vc_tune_memo_key {
  int pass;
  int mode; /* vc_sel_mode_t */
  int n_sel;
  const vc_algo_t *sel[VC_SEL_MAX_ALGOS];
  vc_cache_key_t key;
} vc_tune_memo_key_t;

typedef struct vc_tune_memo_value {
  const vc_algo_t *algo;
  vc_algo_params_t params;
  char params_text[VC_CACHE_PARAMS_MAX];
  double time_ms;
} vc_tune_memo_value_t;

/* 1 and *v when k is memoised (and still valid) on h. */
int vc_tune_memo_find(const voxconv_handle_t *h, const vc_tune_memo_key_t *k,
                      vc_tune_memo_value_t *v);
/* Remembers v for k (made in generation `gen`); silently does nothing when
 * out of memory. */
void vc_tune_memo_store(voxconv_handle_t *h, const vc_tune_memo_key_t *k,
                        const vc_tune_memo_value_t *v, unsigned gen);
/* Forgets k (its algorithm failed when replayed). */
void vc_tune_memo_drop(voxconv_handle_t *h, const vc_tune_memo_key_t *k);
/* Tests: replaces the CPU clock of the benchmark runner (NULL = the
 * monotonic clock), so that fake algorithms can take exact virtual time. */
extern double (*vc_tune_test_clock_ms)(void);
/* Tests: microseconds to sleep between writing halves of the temporary
 * file, to make "killed mid-save" reproducible. */
extern volatile int vc_cache_test_slow_write_us;

#ifdef __cplusplus
}
#endif
#endif
