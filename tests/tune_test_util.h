/* Helpers for the tuner tests (tests/test_tune_*.c): a private cache folder
 * per test, stderr capture, small random problems on the CPU, an fp64
 * reference for every conv/depthwise pass, and fake algorithm records with
 * known speed and known defects that the tuner sees as registered ones
 * (vc_tune_set_extra_algos). Header-only: each test includes it once. */
#ifndef TUNE_TEST_UTIL_H
#define TUNE_TEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "vc_test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coords/vc_kmap.h"
#include "core/vc_core.h"
#include "ops/vc_algo.h"
#include "tune/vc_tune.h"

/* ---- temporary cache folder ---------------------------------------------- */
static char tt_dir[256];

static inline int tt_rm_cb(const char *path, const struct stat *sb, int flag,
                           struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* A fresh cache folder for this test, set as VOXCONV_BENCHMARK_CACHE_DIR;
 * the process table is dropped so nothing of an earlier folder leaks in. */
static inline const char *tt_fresh_cache_dir(void) {
  if (tt_dir[0])
    nftw(tt_dir, tt_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  snprintf(tt_dir, sizeof tt_dir, "/tmp/voxconv-tune-test-XXXXXX");
  if (!mkdtemp(tt_dir)) {
    fprintf(stderr, "FATAL: mkdtemp: %s\n", strerror(errno));
    exit(1);
  }
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", tt_dir, 1);
  vc_cache_forget();
  return tt_dir;
}

static inline void tt_cleanup(void) {
  if (tt_dir[0])
    nftw(tt_dir, tt_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  tt_dir[0] = '\0';
}

static inline const char *tt_cache_file(void) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tt_dir, VC_CACHE_FILE_NAME);
  return path;
}

/* ---- stderr capture ----------------------------------------------------- */
static int tt_saved_stderr = -1;
static char tt_capture_path[300];

static inline void tt_capture_begin(void) {
  fflush(stderr);
  snprintf(tt_capture_path, sizeof tt_capture_path,
           "/tmp/voxconv-tune-stderr-%ld-XXXXXX", (long)getpid());
  int fd = mkstemp(tt_capture_path);
  tt_saved_stderr = dup(2);
  dup2(fd, 2);
  close(fd);
}

/* Returns what was written (malloc'd, NUL-terminated) and restores stderr. */
static inline char *tt_capture_end(void) {
  fflush(stderr);
  dup2(tt_saved_stderr, 2);
  close(tt_saved_stderr);
  tt_saved_stderr = -1;
  size_t n = 0;
  char *raw = (char *)vc_read_file(tt_capture_path, &n);
  unlink(tt_capture_path);
  char *s = (char *)malloc(n + 1);
  if (raw && n)
    memcpy(s, raw, n);
  s[n] = '\0';
  free(raw);
  return s;
}

static inline int tt_count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* ---- problems ------------------------------------------------------------ */
typedef struct tt_problem {
  voxconv_handle_t *h;
  voxconv_kmap_t *kmap;
  int32_t *coords;
  int64_t n;
  int64_t cin, cout; /* depthwise: cin == cout == C */
  voxconv_dtype_t dtype;
  void *x, *w, *dy; /* inputs: x [n][cin], w [kvol][cin][cout], dy [n][cout] */
  void *dw_w;       /* depthwise weights [kvol][C] */
  void *out;        /* room for the largest output */
  int64_t out_cap;
} tt_problem_t;

/* Random coordinates in a g^3 grid (density ~30%), submanifold 3^3 map on a
 * CPU handle with `threads` threads. */
static inline int tt_problem_make(tt_problem_t *t, int g, int64_t cin,
                                  int64_t cout, voxconv_dtype_t dtype,
                                  int threads) {
  memset(t, 0, sizeof *t);
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = threads;
  if (voxconv_create(&t->h, &d) != VOXCONV_STATUS_SUCCESS)
    return -1;
  t->coords = (int32_t *)malloc((size_t)g * g * g * 4 * sizeof(int32_t));
  for (int x = 0; x < g; x++)
    for (int y = 0; y < g; y++)
      for (int z = 0; z < g; z++)
        if (vc_rand_uniform() < 0.3) {
          int32_t *c = &t->coords[t->n++ * 4];
          c[0] = 0, c[1] = x, c[2] = y, c[3] = z;
        }
  voxconv_coords_t in = {t->coords, t->n, {1, 1, 1}};
  voxconv_kmap_desc_t kd = {.mode = VOXCONV_KMAP_SUBMANIFOLD,
                            .kernel_size = {3, 3, 3},
                            .stride = {1, 1, 1},
                            .dilation = {1, 1, 1}};
  if (vc_test_kmap_build(t->h, &kd, &in, NULL, &t->kmap) !=
      VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "kmap_build: %s\n", voxconv_get_last_error(t->h));
    return -1;
  }
  t->cin = cin;
  t->cout = cout;
  t->dtype = dtype;
  const size_t es = voxconv_dtype_size(dtype);
  const int64_t kvol = t->kmap->kvol;
  t->x = malloc((size_t)(t->n * cin) * es);
  t->w = malloc((size_t)(kvol * cin * cout) * es);
  t->dy = malloc((size_t)(t->n * cout) * es);
  t->dw_w = malloc((size_t)(kvol * cin) * es);
  vc_fill_normal(t->x, dtype, t->n * cin);
  vc_fill_normal(t->w, dtype, kvol * cin * cout);
  vc_fill_normal(t->dy, dtype, t->n * cout);
  vc_fill_normal(t->dw_w, dtype, kvol * cin);
  int64_t cap = t->n * (cin > cout ? cin : cout);
  if (kvol * cin * cout > cap)
    cap = kvol * cin * cout;
  t->out_cap = cap;
  t->out = malloc((size_t)cap * es);
  return 0;
}

static inline void tt_problem_free(tt_problem_t *t) {
  if (t->kmap)
    voxconv_kmap_destroy(t->h, t->kmap);
  voxconv_destroy(t->h);
  free(t->coords);
  free(t->x);
  free(t->w);
  free(t->dy);
  free(t->dw_w);
  free(t->out);
  memset(t, 0, sizeof *t);
}

static inline int tt_is_depthwise(voxconv_pass_t pass) {
  return pass >= VOXCONV_PASS_DEPTHWISE_FWD;
}

/* Output element count of a pass. */
static inline int64_t tt_out_elems(const tt_problem_t *t, voxconv_pass_t pass) {
  const int64_t kvol = t->kmap->kvol;
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
    return t->n * t->cout;
  case VOXCONV_PASS_CONV_DGRAD:
    return t->n * t->cin;
  case VOXCONV_PASS_CONV_WGRAD:
    return kvol * t->cin * t->cout;
  case VOXCONV_PASS_DEPTHWISE_FWD:
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return t->n * t->cin;
  default:
    return kvol * t->cin;
  }
}

/* Runs a pass through the public API into t->out. */
static inline voxconv_status_t tt_run(tt_problem_t *t, voxconv_pass_t pass,
                                      const voxconv_conv_options_t *opt) {
  const int64_t kvol = t->kmap->kvol;
  voxconv_feats_t x = {t->x, t->n, t->cin, t->dtype};
  voxconv_feats_t dy = {t->dy, t->n, t->cout, t->dtype};
  voxconv_weights_t w = {t->w, kvol, t->cin, t->cout, t->dtype};
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD: {
    voxconv_feats_t y = {t->out, t->n, t->cout, t->dtype};
    return voxconv_conv_forward(t->h, t->kmap, &x, &w, &y, opt);
  }
  case VOXCONV_PASS_CONV_DGRAD: {
    voxconv_feats_t dx = {t->out, t->n, t->cin, t->dtype};
    return voxconv_conv_dgrad(t->h, t->kmap, &dy, &w, &dx, opt);
  }
  case VOXCONV_PASS_CONV_WGRAD: {
    voxconv_weights_t dw = {t->out, kvol, t->cin, t->cout, t->dtype};
    return voxconv_conv_wgrad(t->h, t->kmap, &x, &dy, &dw, opt);
  }
  default:
    break;
  }
  /* depthwise: C = cin */
  voxconv_feats_t dx_ = {t->x, t->n, t->cin, t->dtype};
  voxconv_feats_t ddy = {t->dy, t->n, t->cin, t->dtype};
  voxconv_feats_t ww = {t->dw_w, kvol, t->cin, t->dtype};
  voxconv_feats_t o_rows = {t->out, t->n, t->cin, t->dtype};
  voxconv_feats_t o_w = {t->out, kvol, t->cin, t->dtype};
  if (pass == VOXCONV_PASS_DEPTHWISE_FWD)
    return voxconv_depthwise_forward(t->h, t->kmap, &dx_, &ww, &o_rows, opt);
  if (pass == VOXCONV_PASS_DEPTHWISE_DGRAD)
    return voxconv_depthwise_dgrad(t->h, t->kmap, &ddy, &ww, &o_rows, opt);
  return voxconv_depthwise_wgrad(t->h, t->kmap, &dx_, &ddy, &o_w, opt);
}

/* fp64 result of a problem given as vc_conv_problem_t (host buffers, any
 * dtype; the roles of a/b/c are those of vc_algo.h). */
static inline void tt_reference(const vc_conv_problem_t *p, double *out) {
  const voxconv_kmap_t *m = p->kmap;
  const int64_t ci = p->cin, co = p->cout;
  int64_t n_out;
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
    n_out = m->n_out * co;
    break;
  case VOXCONV_PASS_CONV_DGRAD:
    n_out = m->n_in * ci;
    break;
  case VOXCONV_PASS_CONV_WGRAD:
    n_out = (int64_t)m->kvol * ci * co;
    break;
  case VOXCONV_PASS_DEPTHWISE_FWD:
    n_out = m->n_out * ci;
    break;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    n_out = m->n_in * ci;
    break;
  default:
    n_out = (int64_t)m->kvol * ci;
    break;
  }
  memset(out, 0, (size_t)n_out * sizeof *out);
  for (int k = 0; k < m->kvol; k++) {
    for (int64_t j = m->pair_offsets[k]; j < m->pair_offsets[k + 1]; j++) {
      const int64_t i = m->in_rows[j], o = m->out_rows[j];
      switch (p->pass) {
      case VOXCONV_PASS_CONV_FWD:
        for (int64_t b = 0; b < co; b++) {
          double s = 0;
          for (int64_t a = 0; a < ci; a++)
            s += vc_get(p->a, p->dtype, i * ci + a) *
                 vc_get(p->b, p->dtype, (k * ci + a) * co + b);
          out[o * co + b] += s;
        }
        break;
      case VOXCONV_PASS_CONV_DGRAD:
        for (int64_t a = 0; a < ci; a++) {
          double s = 0;
          for (int64_t b = 0; b < co; b++)
            s += vc_get(p->a, p->dtype, o * co + b) *
                 vc_get(p->b, p->dtype, (k * ci + a) * co + b);
          out[i * ci + a] += s;
        }
        break;
      case VOXCONV_PASS_CONV_WGRAD:
        for (int64_t a = 0; a < ci; a++)
          for (int64_t b = 0; b < co; b++)
            out[(k * ci + a) * co + b] += vc_get(p->a, p->dtype, i * ci + a) *
                                          vc_get(p->b, p->dtype, o * co + b);
        break;
      case VOXCONV_PASS_DEPTHWISE_FWD:
        for (int64_t c = 0; c < ci; c++)
          out[o * ci + c] += vc_get(p->a, p->dtype, i * ci + c) *
                             vc_get(p->b, p->dtype, k * ci + c);
        break;
      case VOXCONV_PASS_DEPTHWISE_DGRAD:
        for (int64_t c = 0; c < ci; c++)
          out[i * ci + c] += vc_get(p->a, p->dtype, o * ci + c) *
                             vc_get(p->b, p->dtype, k * ci + c);
        break;
      default:
        for (int64_t c = 0; c < ci; c++)
          out[k * ci + c] += vc_get(p->a, p->dtype, i * ci + c) *
                             vc_get(p->b, p->dtype, o * ci + c);
        break;
      }
    }
  }
}

/* The problem of a public call on t, as the tuner sees it. */
static inline vc_conv_problem_t tt_as_problem(const tt_problem_t *t,
                                              voxconv_pass_t pass) {
  vc_conv_problem_t p;
  memset(&p, 0, sizeof p);
  p.pass = pass;
  p.kmap = t->kmap;
  p.dtype = t->dtype;
  p.cin = t->cin;
  p.cout = tt_is_depthwise(pass) ? t->cin : t->cout;
  p.c = t->out;
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
    p.a = t->x, p.b = t->w;
    break;
  case VOXCONV_PASS_CONV_DGRAD:
    p.a = t->dy, p.b = t->w;
    break;
  case VOXCONV_PASS_CONV_WGRAD:
    p.a = t->x, p.b = t->dy;
    break;
  case VOXCONV_PASS_DEPTHWISE_FWD:
    p.a = t->x, p.b = t->dw_w;
    break;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    p.a = t->dy, p.b = t->dw_w;
    break;
  default:
    p.a = t->x, p.b = t->dy;
    break;
  }
  return p;
}

/* ---- fake algorithms ----------------------------------------------------- */
/* Run counters per fake (index = order in tt_fakes below). */
static atomic_int tt_runs[16];
/* fp16-accumulator tiles run with a problem whose fp16_accum is 0. */
static atomic_int tt_acc_violations;

/* Virtual time (microseconds) for the fakes: with tt_virtual_clock(1) the
 * runner's clock reads this counter and a fake "taking" d ms advances it
 * by exactly d, so rankings do not depend on the machine's load. */
static atomic_llong tt_virtual_us;
static inline double tt_clock_ms(void) {
  return (double)atomic_load(&tt_virtual_us) / 1e3;
}
static inline void tt_virtual_clock(int on) {
  vc_tune_test_clock_ms = on ? tt_clock_ms : NULL;
}

static inline void tt_sleep_ms(double ms) {
  if (ms <= 0)
    return;
  if (vc_tune_test_clock_ms == tt_clock_ms) {
    atomic_fetch_add(&tt_virtual_us, (long long)(ms * 1e3));
    return;
  }
  struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static inline void tt_store(const vc_conv_problem_t *p, const double *v,
                            int64_t n) {
  vc_store_f64(p->c, p->dtype, n, v);
}

static inline int64_t tt_problem_out(const vc_conv_problem_t *p) {
  const voxconv_kmap_t *m = p->kmap;
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
    return m->n_out * p->cout;
  case VOXCONV_PASS_CONV_DGRAD:
    return m->n_in * p->cin;
  case VOXCONV_PASS_CONV_WGRAD:
    return (int64_t)m->kvol * p->cin * p->cout;
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return m->n_out * p->cin;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return m->n_in * p->cin;
  default:
    return (int64_t)m->kvol * p->cin;
  }
}

/* Behaviours */
enum { TT_CORRECT, TT_WRONG, TT_NAN, TT_FAIL };

static inline voxconv_status_t tt_fake_body(voxconv_handle_t *h,
                                            const vc_conv_problem_t *p,
                                            int index, int behaviour,
                                            double delay_ms, double noise) {
  atomic_fetch_add(&tt_runs[index], 1);
  const int64_t n = tt_problem_out(p);
  if (behaviour == TT_FAIL) {
    memset(p->c, 0xFF, (size_t)n * voxconv_dtype_size(p->dtype));
    return vc_fail(h, VOXCONV_STATUS_INTERNAL, "fake_fail: failing on purpose");
  }
  double *ref = (double *)malloc((size_t)n * sizeof *ref);
  tt_reference(p, ref);
  if (behaviour == TT_WRONG) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
      ss += ref[i] * ref[i];
    /* One outlier cell, off by at least twice the guard's relative
     * measure (|got - ref| / (|ref| + 0.01 rms)) whatever the cell held:
     * 3 rms + 1 alone gave 0.47 where |ref| was large (a CI seed). */
    ref[n / 2] += 3.0 * sqrt(ss / (double)n) + 1.0 + 2.0 * fabs(ref[n / 2]);
  }
  if (behaviour == TT_NAN)
    ref[n / 3] = NAN;
  if (noise > 0)
    for (int64_t i = 0; i < n; i++)
      ref[i] *= 1.0 + noise * (double)((i * 7919) % 17 - 8) / 8.0;
  tt_store(p, ref, n);
  free(ref);
  tt_sleep_ms(delay_ms);
  return VOXCONV_STATUS_SUCCESS;
}

static inline int tt_supports_cpu_regular(const voxconv_handle_t *h,
                                          const vc_conv_problem_t *p) {
  return h->backend == VOXCONV_BACKEND_CPU && !tt_is_depthwise(p->pass);
}
static inline int tt_supports_cpu_dw(const voxconv_handle_t *h,
                                     const vc_conv_problem_t *p) {
  return h->backend == VOXCONV_BACKEND_CPU && tt_is_depthwise(p->pass);
}
static inline int tt_supports_any(const voxconv_handle_t *h,
                                  const vc_conv_problem_t *p) {
  (void)h, (void)p;
  return 1;
}

#define TT_REGULAR                                                             \
  ((1u << VOXCONV_PASS_CONV_FWD) | (1u << VOXCONV_PASS_CONV_DGRAD) |           \
   (1u << VOXCONV_PASS_CONV_WGRAD))
#define TT_DEPTHWISE                                                           \
  ((1u << VOXCONV_PASS_DEPTHWISE_FWD) | (1u << VOXCONV_PASS_DEPTHWISE_DGRAD) | \
   (1u << VOXCONV_PASS_DEPTHWISE_WGRAD))

/* 0: fake_tiles, delay_ms in {6, 1, 3}: the 1 ms tile must win. */
static const vc_param_space_t tt_tiles_space = {
    1, {"delay_ms"}, {3}, {{6, 1, 3}}};
static inline const vc_param_space_t *tt_tiles_ps(voxconv_pass_t pass) {
  (void)pass;
  return &tt_tiles_space;
}
static inline voxconv_status_t tt_tiles_run(voxconv_handle_t *h,
                                            const vc_conv_problem_t *p,
                                            const vc_algo_params_t *params,
                                            void *ws) {
  (void)ws;
  return tt_fake_body(h, p, 0, TT_CORRECT, params->v[0], 0);
}
/* 1: fake_wrong (one outlier cell), 2: fake_nan, 3: fake_fail; none is
 * deterministic, so none is taken as a reference */
static inline voxconv_status_t tt_wrong_run(voxconv_handle_t *h,
                                            const vc_conv_problem_t *p,
                                            const vc_algo_params_t *params,
                                            void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 1, TT_WRONG, 0, 0);
}
static inline voxconv_status_t tt_nan_run(voxconv_handle_t *h,
                                          const vc_conv_problem_t *p,
                                          const vc_algo_params_t *params,
                                          void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 2, TT_NAN, 0, 0);
}
static inline voxconv_status_t tt_fail_run(voxconv_handle_t *h,
                                           const vc_conv_problem_t *p,
                                           const vc_algo_params_t *params,
                                           void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 3, TT_FAIL, 0, 0);
}
/* 4: fake_nondet: correct and fast, not deterministic */
static inline voxconv_status_t tt_nondet_run(voxconv_handle_t *h,
                                             const vc_conv_problem_t *p,
                                             const vc_algo_params_t *params,
                                             void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 4, TT_CORRECT, 0, 0);
}
/* 5: fake_acc: accumulator_type {0, 1} x delay_ms {4}; the fp16 tile is
 * faster and a little noisy (like a real one). */
/* spelled 16/32 as mask_gemm does: fp16 first, so "the default" must
 * skip it */
static const vc_param_space_t tt_acc_space = {
    2, {"delay_ms", VC_PARAM_ACCUMULATOR}, {1, 2}, {{4}, {16, 32}}};
static inline const vc_param_space_t *tt_acc_ps(voxconv_pass_t pass) {
  (void)pass;
  return &tt_acc_space;
}
static inline voxconv_status_t tt_acc_run(voxconv_handle_t *h,
                                          const vc_conv_problem_t *p,
                                          const vc_algo_params_t *params,
                                          void *ws) {
  (void)ws;
  const int f16 = params->v[1] == 16;
  if (f16 && !p->fp16_accum)
    atomic_fetch_add(&tt_acc_violations, 1);
  return tt_fake_body(h, p, 5, TT_CORRECT, f16 ? 0.5 : params->v[0],
                      f16 ? 2e-3 : 0);
}
/* 6: fake_gpu: a CUDA record (never runnable on a CPU handle) */
static inline voxconv_status_t tt_gpu_run(voxconv_handle_t *h,
                                          const vc_conv_problem_t *p,
                                          const vc_algo_params_t *params,
                                          void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 6, TT_CORRECT, 0, 0);
}
/* 7, 8: depthwise_explicit / depthwise_implicit stand-ins */
static inline voxconv_status_t tt_dwe_run(voxconv_handle_t *h,
                                          const vc_conv_problem_t *p,
                                          const vc_algo_params_t *params,
                                          void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 7, TT_CORRECT, 2, 0);
}
static inline voxconv_status_t tt_dwi_run(voxconv_handle_t *h,
                                          const vc_conv_problem_t *p,
                                          const vc_algo_params_t *params,
                                          void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 8, TT_CORRECT, 0, 0);
}
/* 9: fake_fast2: correct, two tiles of 2 and 4 ms */
static const vc_param_space_t tt_fast2_space = {1, {"tile"}, {2}, {{1, 2}}};
static inline const vc_param_space_t *tt_fast2_ps(voxconv_pass_t pass) {
  (void)pass;
  return &tt_fast2_space;
}
static inline voxconv_status_t tt_fast2_run(voxconv_handle_t *h,
                                            const vc_conv_problem_t *p,
                                            const vc_algo_params_t *params,
                                            void *ws) {
  (void)ws;
  return tt_fake_body(h, p, 9, TT_CORRECT, params->v[0] == 1 ? 2.0 : 4.0, 0);
}

/* 10: fake_close: tiles of 1.00, 1.05 and 3.00 ms (value in 1/100 ms):
 * the first two are within 10% of each other, so both are re-timed. */
static const vc_param_space_t tt_close_space = {
    1, {"centi_ms"}, {3}, {{100, 105, 300}}};
static inline const vc_param_space_t *tt_close_ps(voxconv_pass_t pass) {
  (void)pass;
  return &tt_close_space;
}
static inline voxconv_status_t tt_close_run(voxconv_handle_t *h,
                                            const vc_conv_problem_t *p,
                                            const vc_algo_params_t *params,
                                            void *ws) {
  (void)ws;
  return tt_fake_body(h, p, 10, TT_CORRECT, params->v[0] / 100.0, 0);
}

/* 11: fake_badref: deterministic but wrong (one outlier cell) */
static inline voxconv_status_t tt_badref_run(voxconv_handle_t *h,
                                             const vc_conv_problem_t *p,
                                             const vc_algo_params_t *params,
                                             void *ws) {
  (void)params, (void)ws;
  return tt_fake_body(h, p, 11, TT_WRONG, 0, 0);
}

#define TT_FAKE(name_, det_, passes_, backend_, sup_, ps_, run_)               \
  { {name_, backend_, passes_, det_, "test fake"}, sup_, ps_, NULL, run_, NULL }

static const vc_algo_t tt_fakes[] = {
    TT_FAKE("fake_tiles", 1, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, tt_tiles_ps, tt_tiles_run),
    TT_FAKE("fake_wrong", 0, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, NULL, tt_wrong_run),
    TT_FAKE("fake_nan", 0, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, NULL, tt_nan_run),
    TT_FAKE("fake_fail", 0, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, NULL, tt_fail_run),
    TT_FAKE("fake_nondet", 0, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, NULL, tt_nondet_run),
    TT_FAKE("fake_acc", 1, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, tt_acc_ps, tt_acc_run),
    TT_FAKE("fake_gpu", 1, TT_REGULAR, VOXCONV_BACKEND_CUDA, tt_supports_any,
            NULL, tt_gpu_run),
    TT_FAKE("depthwise_explicit", 0, TT_DEPTHWISE, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_dw, NULL, tt_dwe_run),
    TT_FAKE("depthwise_implicit", 1, TT_DEPTHWISE, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_dw, NULL, tt_dwi_run),
    TT_FAKE("fake_fast2", 1, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, tt_fast2_ps, tt_fast2_run),
    TT_FAKE("fake_close", 1, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, tt_close_ps, tt_close_run),
    TT_FAKE("fake_badref", 1, TT_REGULAR, VOXCONV_BACKEND_CPU,
            tt_supports_cpu_regular, NULL, tt_badref_run),
};
#define TT_N_FAKES ((int)(sizeof tt_fakes / sizeof tt_fakes[0]))
enum {
  TT_TILES,
  TT_WRONG_I,
  TT_NAN_I,
  TT_FAIL_I,
  TT_NONDET,
  TT_ACC,
  TT_GPU,
  TT_DWE,
  TT_DWI,
  TT_FAST2,
  TT_CLOSE,
  TT_BADREF
};

static const vc_algo_t *tt_fake_ptrs[TT_N_FAKES];

/* Registers the fakes whose indices are listed (-1 ends the list). */
static inline void tt_use_fakes(const int *which) {
  int n = 0;
  for (; which && which[n] >= 0; n++)
    tt_fake_ptrs[n] = &tt_fakes[which[n]];
  vc_tune_set_extra_algos(tt_fake_ptrs, n);
}

static inline void tt_reset_runs(void) {
  for (int i = 0; i < 16; i++)
    atomic_store(&tt_runs[i], 0);
  atomic_store(&tt_acc_violations, 0);
}

#endif
