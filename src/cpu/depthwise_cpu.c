/* cpu_depthwise: depthwise sparse convolution on the CPU (weights [kvol][C]).
 *
 *   forward  y[o][c]  = sum_k x[nbr_out[o][k]][c] * w[k][c]
 *   dgrad    dx[i][c] = sum_k dy[nbr_in[i][k]][c] * w[k][c]
 *   wgrad    dw[k][c] = sum over the pairs of k (map order) x[in][c]*dy[out][c]
 *
 * Forward and dgrad are one routine over a neighbour table, parallel over
 * blocks of destination rows (each row written once). Wgrad is parallel
 * over (k, channel group) with each element one sequential sum in pair
 * order. f32/f16/bf16 accumulate in f32, f64 in f64; results never depend
 * on the thread count. */
#include "vc_cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static int64_t imin64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
static int64_t imax64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

static int dw_supports(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  if (!h || h->backend != VOXCONV_BACKEND_CPU || !p->kmap ||
      p->kmap->backend != VOXCONV_BACKEND_CPU)
    return 0;
  if (p->pass != VOXCONV_PASS_DEPTHWISE_FWD &&
      p->pass != VOXCONV_PASS_DEPTHWISE_DGRAD &&
      p->pass != VOXCONV_PASS_DEPTHWISE_WGRAD)
    return 0;
  return vc_dtype_valid(p->dtype) && p->cin > 0 && p->cin == p->cout;
}

/* Forward/dgrad keep w as f32 (or f64) in the workspace. */
static size_t dw_workspace_size(const vc_conv_problem_t *p,
                                const vc_algo_params_t *params) {
  (void)params;
  if (p->pass == VOXCONV_PASS_DEPTHWISE_WGRAD)
    return 0;
  const size_t el =
      p->dtype == VOXCONV_DTYPE_F64 ? sizeof(double) : sizeof(float);
  return (size_t)(p->kmap->kvol * p->cin) * el;
}

typedef struct dw_ctx {
  const voxconv_kmap_t *km;
  const int32_t *nbr;
  int64_t n_rows, kvol, ch;
  voxconv_dtype_t dtype;
  const void *src, *src2; /* wgrad: x and dy */
  const void *w;          /* f32 or f64 weights, [kvol][ch] */
  void *dst;
  int64_t groups, group_width; /* wgrad channel groups */
  char *scratch;               /* per thread: 3 rows of ch floats/doubles */
  size_t scratch_stride;
} dw_ctx_t;

#define DW_ROWS_GRAIN 64
#define DW_PREFETCH_PAIRS 8

static inline void prefetch_row(const char *p, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64)
    __builtin_prefetch(p + b);
}

static void dw_rows_f32(void *vctx, int64_t r0, int64_t r1, int tid) {
  const dw_ctx_t *c = (const dw_ctx_t *)vctx;
  const int64_t ch = c->ch, kvol = c->kvol;
  const size_t esz = voxconv_dtype_size(c->dtype);
  float *acc = (float *)(void *)(c->scratch + (size_t)tid * c->scratch_stride);
  float *tmp = acc + ch;
  const float *w = (const float *)c->w;
  for (int64_t r = r0; r < r1; r++) {
    for (int64_t e = 0; e < ch; e++)
      acc[e] = 0.0f;
    for (int64_t k = 0; k < kvol; k++) {
      const int32_t i = c->nbr[r * kvol + k];
      if (i < 0)
        continue;
      const float *xr;
      if (c->dtype == VOXCONV_DTYPE_F32) {
        xr = (const float *)c->src + (int64_t)i * ch;
      } else {
        vc_cpu_load_f32((const char *)c->src + (size_t)((int64_t)i * ch) * esz,
                        c->dtype, ch, tmp);
        xr = tmp;
      }
      vc_cpu_mul_acc(acc, xr, w + k * ch, ch);
    }
    vc_cpu_store_f32((char *)c->dst + (size_t)(r * ch) * esz, c->dtype, ch,
                     acc);
  }
}

static void dw_rows_f64(void *vctx, int64_t r0, int64_t r1, int tid) {
  (void)tid;
  const dw_ctx_t *c = (const dw_ctx_t *)vctx;
  const int64_t ch = c->ch, kvol = c->kvol;
  const double *w = (const double *)c->w;
  for (int64_t r = r0; r < r1; r++) {
    double *y = (double *)c->dst + r * ch;
    for (int64_t e = 0; e < ch; e++)
      y[e] = 0.0;
    for (int64_t k = 0; k < kvol; k++) {
      const int32_t i = c->nbr[r * kvol + k];
      if (i < 0)
        continue;
      const double *xr = (const double *)c->src + (int64_t)i * ch;
      const double *wk = w + k * ch;
      for (int64_t e = 0; e < ch; e++)
        y[e] += xr[e] * wk[e];
    }
  }
}

static void dw_wgrad_task(void *vctx, int64_t t0, int64_t t1, int tid) {
  const dw_ctx_t *c = (const dw_ctx_t *)vctx;
  const int64_t ch = c->ch;
  const size_t esz = voxconv_dtype_size(c->dtype);
  const int is64 = c->dtype == VOXCONV_DTYPE_F64;
  char *base = c->scratch + (size_t)tid * c->scratch_stride;
  for (int64_t t = t0; t < t1; t++) {
    const int64_t k = t / c->groups, g = t % c->groups;
    const int64_t e0 = g * c->group_width;
    const int64_t cw = imin64(c->group_width, ch - e0);
    if (cw <= 0)
      continue;
    const int64_t q0 = c->km->pair_offsets[k], q1 = c->km->pair_offsets[k + 1];
    if (is64) {
      double *dw = (double *)c->dst + k * ch + e0;
      for (int64_t e = 0; e < cw; e++)
        dw[e] = 0.0;
      for (int64_t q = q0; q < q1; q++) {
        const double *x =
            (const double *)c->src + (int64_t)c->km->in_rows[q] * ch + e0;
        const double *dy =
            (const double *)c->src2 + (int64_t)c->km->out_rows[q] * ch + e0;
        for (int64_t e = 0; e < cw; e++)
          dw[e] += x[e] * dy[e];
      }
      continue;
    }
    float *acc = (float *)(void *)base;
    float *tx = acc + ch, *td = tx + ch;
    for (int64_t e = 0; e < cw; e++)
      acc[e] = 0.0f;
    for (int64_t q = q0; q < q1; q++) {
      const int64_t i = c->km->in_rows[q], o = c->km->out_rows[q];
      if (q + DW_PREFETCH_PAIRS < q1) {
        const int64_t pi = c->km->in_rows[q + DW_PREFETCH_PAIRS];
        const int64_t po = c->km->out_rows[q + DW_PREFETCH_PAIRS];
        prefetch_row((const char *)c->src + (size_t)(pi * ch + e0) * esz,
                     (size_t)cw * esz);
        prefetch_row((const char *)c->src2 + (size_t)(po * ch + e0) * esz,
                     (size_t)cw * esz);
      }
      const float *x, *dy;
      if (c->dtype == VOXCONV_DTYPE_F32) {
        x = (const float *)c->src + i * ch + e0;
        dy = (const float *)c->src2 + o * ch + e0;
      } else {
        vc_cpu_load_f32((const char *)c->src + (size_t)(i * ch + e0) * esz,
                        c->dtype, cw, tx);
        vc_cpu_load_f32((const char *)c->src2 + (size_t)(o * ch + e0) * esz,
                        c->dtype, cw, td);
        x = tx;
        dy = td;
      }
      vc_cpu_mul_acc(acc, x, dy, cw);
    }
    vc_cpu_store_f32((char *)c->dst + (size_t)(k * ch + e0) * esz, c->dtype, cw,
                     acc);
  }
}

static voxconv_status_t dw_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                               const vc_algo_params_t *params, void *ws) {
  (void)params;
  const voxconv_kmap_t *km = p->kmap;
  dw_ctx_t c;
  memset(&c, 0, sizeof c);
  c.km = km;
  c.kvol = km->kvol;
  c.ch = p->cin;
  c.dtype = p->dtype;
  const int is64 = p->dtype == VOXCONV_DTYPE_F64;
  const size_t el = is64 ? sizeof(double) : sizeof(float);
  c.scratch_stride = ((size_t)(3 * c.ch) * el + 63) & ~(size_t)63;
  const int64_t nt = h->num_threads > 0 ? h->num_threads : 1;

  int64_t ntasks, grain;
  vc_task_fn fn;
  if (p->pass == VOXCONV_PASS_DEPTHWISE_WGRAD) {
    c.src = p->a;
    c.src2 = p->b;
    c.dst = p->c;
    /* Channel groups give more tasks than offsets when threads are many;
     * grouping never changes the per-element summation order. */
    const int64_t want = (4 * nt + c.kvol - 1) / c.kvol;
    c.groups = imax64(1, imin64(want, (c.ch + 15) / 16));
    c.group_width = (c.ch + c.groups - 1) / c.groups;
    c.groups = (c.ch + c.group_width - 1) / c.group_width;
    ntasks = c.kvol * c.groups;
    grain = 1;
    fn = dw_wgrad_task;
  } else {
    const int fwd = p->pass == VOXCONV_PASS_DEPTHWISE_FWD;
    if (!ws)
      return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                     "cpu_depthwise: no workspace for the weights");
    c.nbr = fwd ? km->nbr_out : km->nbr_in;
    c.n_rows = fwd ? km->n_out : km->n_in;
    c.src = p->a;
    c.dst = p->c;
    if (is64)
      memcpy(ws, p->b, (size_t)(c.kvol * c.ch) * sizeof(double));
    else
      vc_cpu_load_f32(p->b, p->dtype, c.kvol * c.ch, (float *)ws);
    c.w = ws;
    ntasks = c.n_rows;
    grain = DW_ROWS_GRAIN;
    fn = is64 ? dw_rows_f64 : dw_rows_f32;
  }
  if (ntasks == 0)
    return VOXCONV_STATUS_SUCCESS;
  const int64_t chunks = (ntasks + grain - 1) / grain;
  const int64_t nth = imax64(1, imin64(nt, chunks));
  void *scratch = NULL;
  VC_CHECK(vc_host_alloc(h, c.scratch_stride * (size_t)nth, &scratch,
                         "cpu_depthwise thread scratch"));
  c.scratch = (char *)scratch;
  voxconv_status_t st = vc_parallel_for(h, ntasks, grain, fn, &c);
  free(scratch);
  return st;
}

const vc_algo_t vc_algo_cpu_depthwise = {
    {"cpu_depthwise", VOXCONV_BACKEND_CPU,
     (1u << VOXCONV_PASS_DEPTHWISE_FWD) | (1u << VOXCONV_PASS_DEPTHWISE_DGRAD) |
         (1u << VOXCONV_PASS_DEPTHWISE_WGRAD),
     1,
     "CPU depthwise conv: per destination row over the neighbour table; "
     "wgrad per (offset, channel group) in pair order; f32 accumulation, "
     "f64 reference path"},
    dw_supports,
    NULL,
    dw_workspace_size,
    dw_run,
    NULL};
