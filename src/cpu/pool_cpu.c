/* Pooling and unpooling on the CPU.
 *
 * Every op here is a reduction over a neighbour table, parallel over
 * destination rows (each row written once, no atomics):
 *   pool forward      y[o]  = reduce_k x[nbr_out[o][k]]        (MAX/AVG/SUM)
 *   pool backward     dx[i] = sum_k g(dy[nbr_in[i][k]])        (AVG: /count,
 *                     MAX: only where (o, c) chose this pair)
 *   unpool forward    y[i]  = sum_k x[nbr_in[i][k]]    (= SUM pool backward)
 *   unpool backward   dx[o] = sum_k dy[nbr_out[o][k]]  (= SUM pool forward)
 * "Map order" for one output row is k ascending (pairs are grouped by k),
 * which is the order the nbr_out row lists them in. f32/f16/bf16 compute
 * in f32 (MAX is exact in any type), f64 in f64. */
#include "vc_cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define POOL_GRAIN 64

static int64_t imin64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
static int64_t imax64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

typedef enum { RED_SUM, RED_AVG, RED_MAX } reduce_t;

typedef struct pool_ctx {
  const int32_t *nbr; /* [n_rows][kvol] */
  int64_t n_rows, kvol, ch;
  voxconv_dtype_t dtype;
  reduce_t red;
  const void *src;      /* rows gathered through nbr */
  void *dst;            /* [n_rows][ch] */
  const int32_t *count; /* AVG backward: pairs of each source row */
  /* MAX backward */
  const int16_t *winner; /* [n_src][ch]: k of the winning pair, -1 none */
  const void *x, *y;
  int16_t *winner_out;
  const int32_t *nbr_out;
  char *scratch;
  size_t scratch_stride;
} pool_ctx_t;

static int64_t nthreads_for(const voxconv_handle_t *h, int64_t chunks) {
  const int64_t nt = h->num_threads > 0 ? h->num_threads : 1;
  return imax64(1, imin64(nt, chunks));
}

static voxconv_status_t run_rows(voxconv_handle_t *h, pool_ctx_t *c,
                                 vc_task_fn fn, size_t scratch_bytes) {
  if (c->n_rows == 0)
    return VOXCONV_STATUS_SUCCESS;
  const int64_t chunks = (c->n_rows + POOL_GRAIN - 1) / POOL_GRAIN;
  c->scratch_stride = (scratch_bytes + 63) & ~(size_t)63;
  void *scratch = NULL;
  VC_CHECK(vc_host_alloc(h, c->scratch_stride * (size_t)nthreads_for(h, chunks),
                         &scratch, "pooling thread scratch"));
  c->scratch = (char *)scratch;
  voxconv_status_t st = vc_parallel_for(h, c->n_rows, POOL_GRAIN, fn, c);
  free(scratch);
  return st;
}

/* ---- reductions over a neighbour table (f32 compute) -------------------- */
static inline float max_step(float acc, float v) {
  /* NaN wins and stays; otherwise a strictly larger value replaces, so
   * the first maximum in map order is kept. */
  if (acc != acc)
    return acc;
  return (v != v || v > acc) ? v : acc;
}

static void reduce_f32(void *vctx, int64_t r0, int64_t r1, int tid) {
  const pool_ctx_t *c = (const pool_ctx_t *)vctx;
  const int64_t ch = c->ch, kvol = c->kvol;
  const size_t esz = voxconv_dtype_size(c->dtype);
  float *acc = (float *)(void *)(c->scratch + (size_t)tid * c->scratch_stride);
  float *row = acc + ch;
  for (int64_t r = r0; r < r1; r++) {
    int64_t n = 0;
    for (int64_t e = 0; e < ch; e++)
      acc[e] = 0.0f;
    for (int64_t k = 0; k < kvol; k++) {
      const int32_t s = c->nbr[r * kvol + k];
      if (s < 0)
        continue;
      const float *v;
      if (c->dtype == VOXCONV_DTYPE_F32) {
        v = (const float *)c->src + (int64_t)s * ch;
      } else {
        vc_cpu_load_f32((const char *)c->src + (size_t)((int64_t)s * ch) * esz,
                        c->dtype, ch, row);
        v = row;
      }
      if (c->red == RED_MAX) {
        if (n == 0)
          memcpy(acc, v, (size_t)ch * sizeof(float));
        else
          for (int64_t e = 0; e < ch; e++)
            acc[e] = max_step(acc[e], v[e]);
      } else if (c->count) { /* AVG backward: dy[o] / count[o] */
        const float cnt = (float)c->count[s];
        for (int64_t e = 0; e < ch; e++)
          acc[e] += v[e] / cnt;
      } else {
        vc_cpu_add_acc(acc, v, ch);
      }
      n++;
    }
    if (c->red == RED_AVG && n > 0) {
      const float cnt = (float)n;
      for (int64_t e = 0; e < ch; e++)
        acc[e] /= cnt;
    }
    vc_cpu_store_f32((char *)c->dst + (size_t)(r * ch) * esz, c->dtype, ch,
                     acc);
  }
}

static inline double max_step64(double acc, double v) {
  if (acc != acc)
    return acc;
  return (v != v || v > acc) ? v : acc;
}

static void reduce_f64(void *vctx, int64_t r0, int64_t r1, int tid) {
  (void)tid;
  const pool_ctx_t *c = (const pool_ctx_t *)vctx;
  const int64_t ch = c->ch, kvol = c->kvol;
  for (int64_t r = r0; r < r1; r++) {
    double *acc = (double *)c->dst + r * ch;
    int64_t n = 0;
    for (int64_t e = 0; e < ch; e++)
      acc[e] = 0.0;
    for (int64_t k = 0; k < kvol; k++) {
      const int32_t s = c->nbr[r * kvol + k];
      if (s < 0)
        continue;
      const double *v = (const double *)c->src + (int64_t)s * ch;
      if (c->red == RED_MAX) {
        if (n == 0)
          memcpy(acc, v, (size_t)ch * sizeof(double));
        else
          for (int64_t e = 0; e < ch; e++)
            acc[e] = max_step64(acc[e], v[e]);
      } else if (c->count) {
        const double cnt = (double)c->count[s];
        for (int64_t e = 0; e < ch; e++)
          acc[e] += v[e] / cnt;
      } else {
        for (int64_t e = 0; e < ch; e++)
          acc[e] += v[e];
      }
      n++;
    }
    if (c->red == RED_AVG && n > 0)
      for (int64_t e = 0; e < ch; e++)
        acc[e] /= (double)n;
  }
}

static voxconv_status_t reduce_rows(voxconv_handle_t *h, const int32_t *nbr,
                                    int64_t n_rows, int64_t kvol, reduce_t red,
                                    const int32_t *count,
                                    const voxconv_feats_t *src,
                                    const voxconv_feats_t *dst) {
  pool_ctx_t c;
  memset(&c, 0, sizeof c);
  c.nbr = nbr;
  c.n_rows = n_rows;
  c.kvol = kvol;
  c.ch = dst->channels;
  c.dtype = dst->dtype;
  c.red = red;
  c.count = count;
  c.src = src->data;
  c.dst = dst->data;
  const int is64 = c.dtype == VOXCONV_DTYPE_F64;
  return run_rows(h, &c, is64 ? reduce_f64 : reduce_f32,
                  is64 ? 0 : (size_t)(2 * c.ch) * sizeof(float));
}

/* ---- pair counts per output row (AVG backward) -------------------------- */
typedef struct count_ctx {
  const int32_t *nbr_out;
  int64_t kvol;
  int32_t *count;
} count_ctx_t;

static void count_task(void *vctx, int64_t o0, int64_t o1, int tid) {
  (void)tid;
  const count_ctx_t *c = (const count_ctx_t *)vctx;
  for (int64_t o = o0; o < o1; o++) {
    int32_t n = 0;
    for (int64_t k = 0; k < c->kvol; k++)
      n += c->nbr_out[o * c->kvol + k] >= 0;
    c->count[o] = n;
  }
}

/* ---- MAX backward -------------------------------------------------------- */
/* acc[e] += win[e] == k ? v[e] : +0.0. Unconditional loads and restrict
 * let the compiler vectorise it (a load inside the condition would be
 * control flow). */
static void select_add(float *restrict acc, const float *restrict v,
                       const int16_t *restrict win, int16_t k, int64_t n) {
  for (int64_t e = 0; e < n; e++) {
    const float t = v[e];
    acc[e] += win[e] == k ? t : 0.0f;
  }
}

/* win[e] = k where x[e] matches y[e] (equal, or both NaN). */
static void mark_matches(int16_t *restrict win, const float *restrict x,
                         const float *restrict y, int16_t k, int64_t n) {
  for (int64_t e = 0; e < n; e++) {
    const float a = x[e], b = y[e];
    const int hit = (a == b) | ((a != a) & (b != b));
    win[e] = hit ? k : win[e];
  }
}

/* Phase 1, per output row: the k of the first pair (map order) whose x
 * equals y, for every channel (NaN matches NaN: the forward let the first
 * NaN win), -1 where none does. Offsets are visited last to first so that
 * a plain select leaves the first match: branch-free, because which pair
 * wins is data-dependent and would defeat branch prediction. */
static void winner_task(void *vctx, int64_t o0, int64_t o1, int tid) {
  const pool_ctx_t *c = (const pool_ctx_t *)vctx;
  const int64_t ch = c->ch, kvol = c->kvol;
  const int is64 = c->dtype == VOXCONV_DTYPE_F64;
  const size_t esz = voxconv_dtype_size(c->dtype);
  float *yrow = (float *)(void *)(c->scratch + (size_t)tid * c->scratch_stride);
  float *xrow = yrow + ch;
  for (int64_t o = o0; o < o1; o++) {
    int16_t *win = c->winner_out + o * ch;
    for (int64_t e = 0; e < ch; e++)
      win[e] = -1;
    const double *y64 = (const double *)c->y + o * ch;
    const float *y32 = yrow;
    if (!is64) {
      if (c->dtype == VOXCONV_DTYPE_F32)
        y32 = (const float *)c->y + o * ch;
      else
        vc_cpu_load_f32((const char *)c->y + (size_t)(o * ch) * esz, c->dtype,
                        ch, yrow);
    }
    for (int64_t k = kvol - 1; k >= 0; k--) {
      const int32_t i = c->nbr_out[o * kvol + k];
      if (i < 0)
        continue;
      const int16_t kk = (int16_t)k;
      if (is64) {
        const double *x = (const double *)c->x + (int64_t)i * ch;
        for (int64_t e = 0; e < ch; e++) {
          const double a = x[e], b = y64[e];
          const int hit = (a == b) | ((a != a) & (b != b));
          win[e] = hit ? kk : win[e];
        }
      } else {
        const float *x = xrow;
        if (c->dtype == VOXCONV_DTYPE_F32)
          x = (const float *)c->x + (int64_t)i * ch;
        else
          vc_cpu_load_f32((const char *)c->x + (size_t)((int64_t)i * ch) * esz,
                          c->dtype, ch, xrow);
        mark_matches(win, x, y32, kk, ch);
      }
    }
  }
}

/* Phase 2, per input row: dx[i][c] = sum over k (ascending) of dy[o][c]
 * where o = nbr_in[i][k] chose pair k for channel c. Non-winners add +0.0,
 * which leaves the sum's bits unchanged (it starts at +0.0 and so is never
 * -0.0) and keeps a NaN of a non-winning dy out, as a branch would. */
static void max_grad_task(void *vctx, int64_t i0, int64_t i1, int tid) {
  const pool_ctx_t *c = (const pool_ctx_t *)vctx;
  const int64_t ch = c->ch, kvol = c->kvol;
  const int is64 = c->dtype == VOXCONV_DTYPE_F64;
  const size_t esz = voxconv_dtype_size(c->dtype);
  char *base = c->scratch + (size_t)tid * c->scratch_stride;
  for (int64_t i = i0; i < i1; i++) {
    if (is64) {
      double *acc = (double *)c->dst + i * ch;
      for (int64_t e = 0; e < ch; e++)
        acc[e] = 0.0;
      for (int64_t k = 0; k < kvol; k++) {
        const int32_t o = c->nbr[i * kvol + k];
        if (o < 0)
          continue;
        const int16_t *win = c->winner + (int64_t)o * ch;
        const double *dy = (const double *)c->src + (int64_t)o * ch;
        for (int64_t e = 0; e < ch; e++) {
          const double t = dy[e];
          acc[e] += win[e] == k ? t : 0.0;
        }
      }
      continue;
    }
    float *acc = (float *)(void *)base;
    float *row = acc + ch;
    for (int64_t e = 0; e < ch; e++)
      acc[e] = 0.0f;
    for (int64_t k = 0; k < kvol; k++) {
      const int32_t o = c->nbr[i * kvol + k];
      if (o < 0)
        continue;
      const float *dy = row;
      if (c->dtype == VOXCONV_DTYPE_F32)
        dy = (const float *)c->src + (int64_t)o * ch;
      else
        vc_cpu_load_f32((const char *)c->src + (size_t)((int64_t)o * ch) * esz,
                        c->dtype, ch, row);
      select_add(acc, dy, c->winner + (int64_t)o * ch, (int16_t)k, ch);
    }
    vc_cpu_store_f32((char *)c->dst + (size_t)(i * ch) * esz, c->dtype, ch,
                     acc);
  }
}

static voxconv_status_t
max_backward(voxconv_handle_t *h, const voxconv_kmap_t *km,
             const voxconv_feats_t *x, const voxconv_feats_t *y,
             const voxconv_feats_t *dy, const voxconv_feats_t *dx) {
  const int64_t ch = dx->channels;
  void *winner = NULL;
  VC_CHECK(vc_host_alloc(h, (size_t)(km->n_out * ch) * sizeof(int16_t), &winner,
                         "MAX pooling winners"));
  pool_ctx_t c;
  memset(&c, 0, sizeof c);
  c.kvol = km->kvol;
  c.ch = ch;
  c.dtype = dx->dtype;
  c.x = x->data;
  c.y = y->data;
  c.nbr_out = km->nbr_out;
  c.winner_out = (int16_t *)winner;
  c.n_rows = km->n_out;
  voxconv_status_t st =
      run_rows(h, &c, winner_task, (size_t)(2 * ch) * sizeof(float));
  if (st == VOXCONV_STATUS_SUCCESS) {
    c.n_rows = km->n_in;
    c.nbr = km->nbr_in;
    c.winner = (const int16_t *)winner;
    c.src = dy->data;
    c.dst = dx->data;
    st = run_rows(h, &c, max_grad_task, (size_t)(2 * ch) * sizeof(float));
  }
  free(winner);
  return st;
}

/* ---- entry points -------------------------------------------------------- */
voxconv_status_t vc_cpu_pool_forward(voxconv_handle_t *h,
                                     const voxconv_kmap_t *kmap,
                                     voxconv_pool_mode_t mode,
                                     const voxconv_feats_t *x,
                                     const voxconv_feats_t *y) {
  const reduce_t red = mode == VOXCONV_POOL_MAX   ? RED_MAX
                       : mode == VOXCONV_POOL_AVG ? RED_AVG
                                                  : RED_SUM;
  return reduce_rows(h, kmap->nbr_out, kmap->n_out, kmap->kvol, red, NULL, x,
                     y);
}

voxconv_status_t
vc_cpu_pool_backward(voxconv_handle_t *h, const voxconv_kmap_t *kmap,
                     voxconv_pool_mode_t mode, const voxconv_feats_t *x,
                     const voxconv_feats_t *y, const voxconv_feats_t *dy,
                     const voxconv_feats_t *dx) {
  if (mode == VOXCONV_POOL_MAX)
    return max_backward(h, kmap, x, y, dy, dx);
  if (mode == VOXCONV_POOL_SUM)
    return reduce_rows(h, kmap->nbr_in, kmap->n_in, kmap->kvol, RED_SUM, NULL,
                       dy, dx);
  /* AVG: each output's gradient is shared equally by its pairs. */
  void *count = NULL;
  VC_CHECK(vc_host_alloc(h, (size_t)kmap->n_out * sizeof(int32_t) + 1, &count,
                         "AVG pooling counts"));
  count_ctx_t cc = {kmap->nbr_out, kmap->kvol, (int32_t *)count};
  voxconv_status_t st = vc_parallel_for(h, kmap->n_out, 1024, count_task, &cc);
  if (st == VOXCONV_STATUS_SUCCESS)
    st = reduce_rows(h, kmap->nbr_in, kmap->n_in, kmap->kvol, RED_SUM,
                     (const int32_t *)count, dy, dx);
  free(count);
  return st;
}

voxconv_status_t vc_cpu_unpool_forward(voxconv_handle_t *h,
                                       const voxconv_kmap_t *kmap,
                                       const voxconv_feats_t *x,
                                       const voxconv_feats_t *y) {
  return reduce_rows(h, kmap->nbr_in, kmap->n_in, kmap->kvol, RED_SUM, NULL, x,
                     y);
}

voxconv_status_t vc_cpu_unpool_backward(voxconv_handle_t *h,
                                        const voxconv_kmap_t *kmap,
                                        const voxconv_feats_t *dy,
                                        const voxconv_feats_t *dx) {
  return reduce_rows(h, kmap->nbr_out, kmap->n_out, kmap->kvol, RED_SUM, NULL,
                     dy, dx);
}
