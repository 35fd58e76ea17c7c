/* The int8 ops' independent model (voxconv.h, "int8 (quantized) sparse
 * convolution"), shared by test_int8_cpu.c and test_cuda_int8.c: int64
 * sums over a map's pairs (read back through the public API, so the same
 * for a CPU and a CUDA map) and the epilogue written out with explicit
 * float / fmaf calls. Nothing here calls the int8 ops. Header-only, as
 * dense_ref.h, because every tests/test_*.c is its own executable. */
#ifndef INT8_MODEL_H
#define INT8_MODEL_H

#include "dense_ref.h"
#include "vc_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- independent model ------------------------------------------------- */
/* int64 sums over the pairs: acc[o][c]. */
/* km's pairs on the host: in rows ir[q] and out rows orow[q] (offset k's
 * pairs at q in off[k]..off[k+1]); copied into backend memory (device
 * memory for a CUDA map), then to the host. Free the three with free(). */
static inline void model_read_pairs(voxconv_handle_t *h,
                                    const voxconv_kmap_t *km,
                                    voxconv_kmap_info_t *info, int64_t **off,
                                    int32_t **ir, int32_t **orow) {
  voxconv_kmap_get_info(km, info);
  *off = (int64_t *)dr_xmalloc(sizeof(int64_t) *
                               (size_t)(info->kernel_volume + 1));
  const size_t bytes =
      sizeof(int32_t) * (size_t)(info->n_pairs ? info->n_pairs : 1);
  *ir = (int32_t *)dr_xmalloc(bytes);
  *orow = (int32_t *)dr_xmalloc(bytes);
  void *bir = NULL, *borow = NULL;
  if (voxconv_malloc(h, bytes, &bir) != VOXCONV_STATUS_SUCCESS ||
      voxconv_malloc(h, bytes, &borow) != VOXCONV_STATUS_SUCCESS ||
      voxconv_kmap_get_pairs(h, km, *off, (int32_t *)bir, (int32_t *)borow) !=
          VOXCONV_STATUS_SUCCESS ||
      voxconv_memcpy(h, *ir, bir, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST) !=
          VOXCONV_STATUS_SUCCESS ||
      voxconv_memcpy(h, *orow, borow, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST) !=
          VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "model_read_pairs: %s\n", voxconv_get_last_error(h));
    exit(2);
  }
  voxconv_free(h, bir);
  voxconv_free(h, borow);
}

static inline int64_t *naive_acc(voxconv_handle_t *h, const voxconv_kmap_t *km,
                                 const int8_t *x, const int8_t *w, int64_t cin,
                                 int64_t cout, int depthwise, int64_t *n_out) {
  voxconv_kmap_info_t info;
  int64_t *off;
  int32_t *ir, *orow;
  model_read_pairs(h, km, &info, &off, &ir, &orow);
  int64_t *acc =
      (int64_t *)dr_xcalloc((size_t)(info.n_out * cout), sizeof(int64_t));
  for (int k = 0; k < info.kernel_volume; k++)
    for (int64_t q = off[k]; q < off[k + 1]; q++) {
      const int8_t *xr = x + (int64_t)ir[q] * cin;
      int64_t *a = acc + (int64_t)orow[q] * cout;
      if (depthwise) {
        for (int64_t c = 0; c < cout; c++)
          a[c] += (int64_t)xr[c] * w[k * cout + c];
      } else {
        for (int64_t ci = 0; ci < cin; ci++)
          for (int64_t c = 0; c < cout; c++)
            a[c] += (int64_t)xr[ci] * w[(k * cin + ci) * cout + c];
      }
    }
  *n_out = info.n_out;
  free(off);
  free(ir);
  free(orow);
  return acc;
}

/* int8 max pooling over km's pairs: y[o][c] = the largest x[i][c] paired
 * with o, 0 for an output without pairs (malloc'd [n_out][C]). */
static inline int8_t *model_max_pool(voxconv_handle_t *h,
                                     const voxconv_kmap_t *km,
                                     const int8_t *x, int64_t C) {
  voxconv_kmap_info_t info;
  int64_t *off;
  int32_t *ir, *orow;
  model_read_pairs(h, km, &info, &off, &ir, &orow);
  int8_t *y = (int8_t *)dr_xcalloc((size_t)(info.n_out * C) + 1, 1);
  char *seen = (char *)dr_xcalloc((size_t)info.n_out + 1, 1);
  for (int64_t q = 0; q < info.n_pairs; q++) {
    const int8_t *xr = x + (int64_t)ir[q] * C;
    int8_t *yr = y + (int64_t)orow[q] * C;
    for (int64_t c = 0; c < C; c++)
      yr[c] = !seen[orow[q]] || xr[c] > yr[c] ? xr[c] : yr[c];
    seen[orow[q]] = 1;
  }
  free(seen);
  free(off);
  free(ir);
  free(orow);
  return y;
}

/* voxconv_pool_forward(MAX) on int8 features of C channels over km (either
 * backend: the buffers go through voxconv_malloc / voxconv_memcpy), the
 * output poisoned first, against model_max_pool bit for bit. */
static inline void model_check_max_pool(voxconv_handle_t *h,
                                        const voxconv_kmap_t *km, int64_t C,
                                        const char *what) {
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(km, &info);
  const size_t xb = (size_t)(info.n_in * C), yb = (size_t)(info.n_out * C);
  int8_t *x = (int8_t *)dr_xmalloc(xb + 1), *y = (int8_t *)dr_xmalloc(yb + 1);
  for (size_t i = 0; i < xb; i++)
    x[i] = (int8_t)vc_rand_range(-128, 127);
  memset(y, 0x5A, yb + 1);
  void *dx = NULL, *dy = NULL;
  if (voxconv_malloc(h, xb + 1, &dx) != VOXCONV_STATUS_SUCCESS ||
      voxconv_malloc(h, yb + 1, &dy) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "model_check_max_pool: %s\n", voxconv_get_last_error(h));
    exit(2);
  }
  voxconv_memcpy(h, dx, x, xb + 1, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  voxconv_memcpy(h, dy, y, yb + 1, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  voxconv_feats_t xf = {dx, info.n_in, C, VOXCONV_DTYPE_I8};
  voxconv_feats_t yf = {dy, info.n_out, C, VOXCONV_DTYPE_I8};
  VC_EXPECT_STATUS(h, voxconv_pool_forward(h, km, VOXCONV_POOL_MAX, &xf, &yf),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_memcpy(h, y, dy, yb + 1, VOXCONV_MEMCPY_BACKEND_TO_HOST);
  int8_t *want = model_max_pool(h, km, x, C);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < yb; i++)
    if (y[i] != want[i]) {
      bad++;
      first = first < 0 ? (int64_t)i : first;
    }
  VC_EXPECT(bad == 0 && y[yb] == 0x5A,
            "int8 max pool %s C=%lld: %lld of %zu differ (first %lld: %d, "
            "want %d); guard byte %d",
            what, (long long)C, (long long)bad, yb, (long long)first,
            first >= 0 ? y[first] : 0, first >= 0 ? want[first] : 0, y[yb]);
  voxconv_free(h, dx);
  voxconv_free(h, dy);
  free(x);
  free(y);
  free(want);
}

/* The epilogue as voxconv.h states it, fp32 with explicit calls. */
static inline float model_v(int64_t acc, float xs, float ws, float b, int relu) {
  const float m = xs * ws;
  float v = fmaf((float)(int32_t)acc, m, b);
  if (relu && v < 0.0f)
    v = 0.0f;
  return v;
}
static inline int8_t model_i8(float v, float ys) {
  const float t = v / ys;
  float r = nearbyintf(t);
  if (r < -127.0f)
    r = -127.0f;
  if (r > 127.0f)
    r = 127.0f;
  return (int8_t)r;
}

/* Expected bits of element (o, c) into exp (y's dtype). */
static inline void model_store(void *exp, voxconv_dtype_t dt, int64_t i, float v,
                        float ys) {
  if (dt == VOXCONV_DTYPE_I8)
    ((int8_t *)exp)[i] = model_i8(v, ys);
  else
    dr_store(exp, dt, i, (double)v); /* RNE from the exact value */
}

static inline size_t esz(voxconv_dtype_t dt) {
  return voxconv_dtype_size(dt);
}

/* ---- one problem -------------------------------------------------------- */
typedef struct prob {
  voxconv_handle_t *h;
  const voxconv_kmap_t *km;
  int depthwise;
  int64_t n_in, n_out, kvol, cin, cout;
  int8_t *x, *w;
  int8_t *wkoi; /* regular conv: w as [kvol][cout][cin] (KOI layout) */
  float xs, ys, *ws, *bias;
  int relu;
} prob_t;

static inline void fill_i8(int8_t *d, int64_t n, int full_range) {
  for (int64_t i = 0; i < n; i++)
    d[i] = (int8_t)(full_range ? vc_rand_range(-128, 127)
                               : vc_rand_range(-20, 20));
}

static inline void random_qparams(prob_t *p) {
  p->xs = (float)(0.01 + 0.1 * vc_rand_uniform());
  p->ys = (float)(0.5 + 20.0 * vc_rand_uniform());
  p->ws = (float *)dr_xmalloc(sizeof(float) * (size_t)p->cout);
  p->bias = (float *)dr_xmalloc(sizeof(float) * (size_t)p->cout);
  for (int64_t c = 0; c < p->cout; c++) {
    p->ws[c] = (float)(0.001 + 0.05 * vc_rand_uniform());
    p->bias[c] = (float)(4.0 * vc_rand_normal());
  }
}

/* Expected bits of every output of p in dtype dt from the sums ref. */
static inline void model_expected(const prob_t *p, const int64_t *ref,
                                  voxconv_dtype_t dt, void *exp) {
  for (int64_t o = 0; o < p->n_out; o++)
    for (int64_t c = 0; c < p->cout; c++) {
      const int64_t i = o * p->cout + c;
      if (dt == VOXCONV_DTYPE_I32) {
        ((int32_t *)exp)[i] = (int32_t)ref[i];
        continue;
      }
      const float b = p->bias ? p->bias[c] : 0.0f;
      model_store(exp, dt, i, model_v(ref[i], p->xs, p->ws[c], b, p->relu),
                  p->ys);
    }
}

/* Elements whose bits differ from exp (*first: the first, or -1). */
static inline int64_t model_mismatches(const void *got, const void *exp,
                                       voxconv_dtype_t dt, int64_t ne,
                                       int64_t *first) {
  int64_t nbad = 0;
  *first = -1;
  for (int64_t i = 0; i < ne; i++)
    if (memcmp((const char *)got + i * esz(dt), (const char *)exp + i * esz(dt),
               esz(dt)) != 0) {
      if (*first < 0)
        *first = i;
      nbad++;
    }
  return nbad;
}

/* F32 outputs outside voxconv.h's bound around the float64 value. */
static inline int64_t model_f32_outside_bound(const prob_t *p,
                                              const int64_t *ref,
                                              const float *y) {
  int64_t nb = 0;
  const int64_t ne = p->n_out * p->cout;
  for (int64_t i = 0; i < ne; i++) {
    const int64_t c = i % p->cout;
    const double a = (double)ref[i];
    const double mexact = (double)p->xs * (double)p->ws[c];
    double vs = a * mexact + (p->bias ? (double)p->bias[c] : 0.0);
    const double v = y[i];
    /* relu is 1-Lipschitz: the same bound holds after it (|v| before
     * relu >= |v| after, so the bound uses the pre-relu magnitude) */
    const double vpre = fabs(v) > fabs(vs) ? fabs(v) : fabs(vs) * 1.001;
    if (p->relu && vs < 0)
      vs = 0.0;
    const double bound = ldexp(2.0 * fabs(mexact * a) + vpre, -24) *
                             (1.0 + ldexp(1.0, -22)) +
                         ldexp(1.0, -149) * (1.0 + fabs(a)) +
                         ldexp(fabs(vs), -50);
    if (fabs(v - vs) > bound)
      nb++;
  }
  return nb;
}

/* ---- a random problem ------------------------------------------------------ */
/* On map km (handle h): x int8 in a small or the full range (at random), w
 * full range, random scales and bias (random_qparams). Free with
 * model_prob_free. */
static inline prob_t model_prob(voxconv_handle_t *h, const voxconv_kmap_t *km,
                                int depthwise, int64_t cin, int64_t cout) {
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(km, &info);
  prob_t p;
  memset(&p, 0, sizeof p);
  p.h = h;
  p.km = km;
  p.depthwise = depthwise;
  p.n_in = info.n_in;
  p.n_out = info.n_out;
  p.kvol = info.kernel_volume;
  p.cin = cin;
  p.cout = cout;
  const int64_t wn = depthwise ? p.kvol * cout : p.kvol * cin * cout;
  p.x = (int8_t *)dr_xmalloc((size_t)(p.n_in * cin) + 1);
  p.w = (int8_t *)dr_xmalloc((size_t)wn);
  fill_i8(p.x, p.n_in * cin, (int)vc_rand_range(0, 1));
  fill_i8(p.w, wn, 1);
  if (!depthwise) {
    p.wkoi = (int8_t *)dr_xmalloc((size_t)wn);
    for (int64_t k = 0; k < p.kvol; k++)
      for (int64_t ci = 0; ci < cin; ci++)
        for (int64_t co = 0; co < cout; co++)
          p.wkoi[(k * cout + co) * cin + ci] = p.w[(k * cin + ci) * cout + co];
  }
  random_qparams(&p);
  return p;
}

static inline void model_prob_free(prob_t *p) {
  free(p->x);
  free(p->w);
  free(p->wkoi);
  free(p->ws);
  free(p->bias);
}

/* check(p, label, ctx) for the first n of the epilogue variants: no ReLU;
 * ReLU; ReLU without bias. */
static inline void model_variants(prob_t *p, int n, const char *what,
                                  void (*check)(prob_t *, const char *,
                                                const void *),
                                  const void *ctx) {
  char buf[160];
  for (int variant = 0; variant < n && variant < 3; variant++) {
    p->relu = variant >= 1;
    float *keep = p->bias;
    if (variant == 2)
      p->bias = NULL;
    snprintf(buf, sizeof buf, "%s %s cin=%lld cout=%lld relu=%d bias=%d",
             what, p->depthwise ? "depthwise" : "conv", (long long)p->cin,
             (long long)p->cout, p->relu, p->bias != NULL);
    check(p, buf, ctx);
    p->bias = keep;
  }
}

/* ---- coordinates the int8 tests share ----------------------------------- */
/* c with x, y, z halved (floor) and duplicates removed: a stride-2 level. */
static inline int32_t *model_coarsen(const int32_t *c, int64_t n, int64_t *nc) {
  int32_t *o = (int32_t *)dr_xmalloc(sizeof(int32_t) * 4 * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) {
    o[i * 4] = c[i * 4];
    for (int a = 1; a < 4; a++)
      o[i * 4 + a] = dr_floordiv(c[i * 4 + a], 2);
  }
  *nc = vc_sort_unique_coords(o, n);
  return o;
}

/* n voxels on a line, far apart: a kvol-1 submanifold map over them is
 * y[r] = epilogue(x[r] . w), for hand-computed cases. */
static inline int32_t *model_line_coords(int64_t n) {
  int32_t *c = (int32_t *)dr_xmalloc(sizeof(int32_t) * 4 * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    c[i * 4] = 0;
    c[i * 4 + 1] = (int32_t)i;
    c[i * 4 + 2] = 0;
    c[i * 4 + 3] = 0;
  }
  return c;
}

/* A crop of workload A (the real scan): up to 20,000 voxels of the slab
 * 800 <= x < 840, in the recording's order; NULL (after saying so) when
 * the data is missing. */
static inline int32_t *model_scan_crop(int64_t *m) {
  int64_t n;
  int32_t *c = vc_workload_a_coords(&n);
  if (!c) {
    printf("workload A data missing: real-scan case skipped\n");
    return NULL;
  }
  *m = 0;
  for (int64_t i = 0; i < n && *m < 20000; i++)
    if (c[i * 4 + 1] >= 800 && c[i * 4 + 1] < 840) {
      memmove(c + *m * 4, c + i * 4, 16);
      (*m)++;
    }
  printf("real scan crop: %lld voxels\n", (long long)*m);
  return c;
}

#endif
