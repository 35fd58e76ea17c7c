/* Finite-difference checks of every backward pass, in f64 on the CPU.
 *
 * For a random scalar loss L = <y, g> (y the op's output, g random), the
 * gradients from dgrad / wgrad / pool_backward / unpool_backward must match
 * central differences (L(v + eps e_i) - L(v - eps e_i)) / (2 eps) on a
 * random subset of entries of every differentiated argument, to ~1e-6
 * relative. Regular conv is checked in all four map modes, depthwise in
 * all four, pooling AVG / SUM (any map) and MAX (distinct inputs whose gaps
 * are far larger than eps, so no perturbation crosses a tie), unpooling.
 * Written only against include/voxconv.h. */
#include "dense_ref.h"
#include "vc_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static voxconv_handle_t *g_h;
static unsigned long long g_seed;
static const voxconv_dtype_t F64 = VOXCONV_DTYPE_F64;

#define FD_EPS 1e-3
#define FD_RTOL 1e-6
#define FD_ENTRIES 10

typedef struct gcase {
  int id;
  voxconv_kmap_mode_t mode;
  voxconv_kmap_desc_t desc;
  int32_t *in_c, *out_c;
  int64_t n_in, n_given, n_out;
  int kvol;
  voxconv_kmap_t *kmap;
  char tag[200];
} gcase_t;

static int make_gcase(gcase_t *c, int id, voxconv_kmap_mode_t mode) {
  memset(c, 0, sizeof *c);
  c->id = id;
  c->mode = mode;
  c->desc.mode = mode;
  static const int32_t ks[] = {1, 2, 3, 3, 4, 5};
  for (int a = 0; a < 3; a++) {
    c->desc.kernel_size[a] = ks[vc_rand_range(0, 5)];
    c->desc.stride[a] =
        mode == VOXCONV_KMAP_SUBMANIFOLD ? 1 : (int32_t)vc_rand_range(1, 3);
    c->desc.dilation[a] = (int32_t)vc_rand_range(1, 2);
  }
  const int B = (int)vc_rand_range(1, 2);
  int32_t lo[3], dim[3];
  for (int a = 0; a < 3; a++) {
    lo[a] = (int32_t)vc_rand_range(-6, 3);
    dim[a] = (int32_t)vc_rand_range(5, 9);
  }
  const double density = 0.15 + 0.35 * vc_rand_uniform();
  int32_t ts[3], ots[3];
  for (int a = 0; a < 3; a++)
    ts[a] = ots[a] = 1;
  if (mode == VOXCONV_KMAP_TRANSPOSED) {
    int64_t nf;
    int32_t *fine = dr_random_coords(B, lo, dim, density, &nf);
    c->in_c = dr_coarse_coords(fine, nf, c->desc.stride, &c->n_in);
    c->out_c = fine;
    c->n_given = nf;
    for (int a = 0; a < 3; a++)
      ts[a] = c->desc.stride[a];
  } else {
    c->in_c = dr_random_coords(B, lo, dim, density, &c->n_in);
    if (mode == VOXCONV_KMAP_GENERATIVE)
      for (int a = 0; a < 3; a++)
        ts[a] = c->desc.stride[a];
  }
  voxconv_coords_t in = {c->in_c, c->n_in, {ts[0], ts[1], ts[2]}};
  voxconv_coords_t out = {c->out_c, c->n_given, {ots[0], ots[1], ots[2]}};
  const voxconv_status_t st = voxconv_kmap_build(
      g_h, &c->desc, &in, mode == VOXCONV_KMAP_TRANSPOSED ? &out : NULL,
      &c->kmap);
  snprintf(c->tag, sizeof c->tag,
           "[seed %llu case %d %s k=%dx%dx%d s=%dx%dx%d d=%dx%dx%d n_in=%lld]",
           g_seed, id, dr_mode_str(mode), c->desc.kernel_size[0],
           c->desc.kernel_size[1], c->desc.kernel_size[2], c->desc.stride[0],
           c->desc.stride[1], c->desc.stride[2], c->desc.dilation[0],
           c->desc.dilation[1], c->desc.dilation[2], (long long)c->n_in);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s kmap_build: %s: %s", c->tag,
            voxconv_status_string(st), voxconv_get_last_error(g_h));
  if (st != VOXCONV_STATUS_SUCCESS) {
    c->kmap = NULL;
    return 0;
  }
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(c->kmap, &info);
  c->n_out = info.n_out;
  c->kvol = info.kernel_volume;
  return 1;
}

static void free_gcase(gcase_t *c) {
  if (c->kmap)
    voxconv_kmap_destroy(g_h, c->kmap);
  free(c->in_c);
  free(c->out_c);
}

static double dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}
static double max_abs(const double *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fabs(a[i]) > m ? fabs(a[i]) : m;
  return m;
}

/* The loss as a function of one perturbed argument. */
typedef double (*loss_fn)(void *ctx);

/* Compares analytic[i] with the central difference over `param` for a
 * random subset of entries (always including the largest gradient). */
static void fd_check(const char *tag, const char *what, double *param,
                     int64_t n, const double *analytic, loss_fn L, void *ctx,
                     double eps) {
  if (n == 0)
    return;
  const double scale = max_abs(analytic, n);
  int64_t worst = -1;
  double worst_rel = 0, worst_fd = 0;
  int64_t argmax = 0;
  for (int64_t i = 0; i < n; i++)
    if (fabs(analytic[i]) == scale)
      argmax = i;
  for (int e = 0; e < FD_ENTRIES && e < n; e++) {
    const int64_t i = e == 0 ? argmax : vc_rand_range(0, n - 1);
    const double keep = param[i];
    param[i] = keep + eps;
    const double lp = L(ctx);
    param[i] = keep - eps;
    const double lm = L(ctx);
    param[i] = keep;
    const double fd = (lp - lm) / (2 * eps);
    /* Relative to the entry, floored by the gradient's scale so that
     * near-zero entries do not ask for impossible digits. */
    const double rel = fabs(fd - analytic[i]) /
                       (fabs(analytic[i]) + 1e-3 * scale + 1e-12);
    const double r = isnan(rel) ? INFINITY : rel;
    if (worst < 0 || r > worst_rel) {
      worst_rel = r;
      worst = i;
      worst_fd = fd;
    }
  }
  VC_EXPECT(worst_rel <= FD_RTOL,
            "%s %s: entry %lld analytic %.12g finite-difference %.12g "
            "(relative error %.3g)",
            tag, what, (long long)worst, analytic[worst], worst_fd, worst_rel);
}

/* ---- regular conv ----------------------------------------------------- */
typedef struct conv_loss {
  const gcase_t *c;
  int64_t cin, cout;
  double *x, *W, *g, *y;
  int depthwise;
} conv_loss_t;

static double conv_L(void *vctx) {
  conv_loss_t *t = (conv_loss_t *)vctx;
  const voxconv_feats_t fx = {t->x, t->c->n_in, t->cin, F64};
  const voxconv_feats_t fy = {t->y, t->c->n_out, t->cout, F64};
  voxconv_status_t st;
  if (t->depthwise) {
    const voxconv_feats_t fw = {t->W, t->c->kvol, t->cin, F64};
    st = voxconv_depthwise_forward(g_h, t->c->kmap, &fx, &fw, &fy, NULL);
  } else {
    const voxconv_weights_t fw = {t->W, t->c->kvol, t->cin, t->cout, F64};
    st = voxconv_conv_forward(g_h, t->c->kmap, &fx, &fw, &fy, NULL);
  }
  if (st != VOXCONV_STATUS_SUCCESS)
    return NAN;
  return dot(t->y, t->g, t->c->n_out * t->cout);
}

static void check_conv(const gcase_t *c, int depthwise) {
  conv_loss_t t;
  t.c = c;
  t.depthwise = depthwise;
  t.cin = vc_rand_range(1, 6);
  t.cout = depthwise ? t.cin : vc_rand_range(1, 6);
  const int64_t nx = c->n_in * t.cin, ny = c->n_out * t.cout;
  const int64_t nw = depthwise ? c->kvol * t.cin : c->kvol * t.cin * t.cout;
  t.x = (double *)dr_xmalloc((size_t)nx * 8);
  t.W = (double *)dr_xmalloc((size_t)nw * 8);
  t.g = (double *)dr_xmalloc((size_t)ny * 8 + 8);
  t.y = (double *)dr_xmalloc((size_t)ny * 8 + 8);
  double *dx = (double *)dr_xmalloc((size_t)nx * 8);
  double *dW = (double *)dr_xmalloc((size_t)nw * 8);
  dr_fill_normal(t.x, F64, nx, NULL);
  dr_fill_normal(t.W, F64, nw, NULL);
  dr_fill_normal(t.g, F64, ny, NULL);
  char tag[300];
  snprintf(tag, sizeof tag, "%s %s cin=%lld cout=%lld", c->tag,
           depthwise ? "depthwise" : "conv", (long long)t.cin,
           (long long)t.cout);

  const voxconv_feats_t fx = {t.x, c->n_in, t.cin, F64};
  const voxconv_feats_t fg = {t.g, c->n_out, t.cout, F64};
  const voxconv_feats_t fdx = {dx, c->n_in, t.cin, F64};
  voxconv_status_t s1, s2;
  vc_poison(dx, F64, nx);
  vc_poison(dW, F64, nw);
  if (depthwise) {
    const voxconv_feats_t fw = {t.W, c->kvol, t.cin, F64};
    const voxconv_feats_t fdw = {dW, c->kvol, t.cin, F64};
    s1 = voxconv_depthwise_dgrad(g_h, c->kmap, &fg, &fw, &fdx, NULL);
    s2 = voxconv_depthwise_wgrad(g_h, c->kmap, &fx, &fg, &fdw, NULL);
  } else {
    const voxconv_weights_t fw = {t.W, c->kvol, t.cin, t.cout, F64};
    const voxconv_weights_t fdw = {dW, c->kvol, t.cin, t.cout, F64};
    s1 = voxconv_conv_dgrad(g_h, c->kmap, &fg, &fw, &fdx, NULL);
    s2 = voxconv_conv_wgrad(g_h, c->kmap, &fx, &fg, &fdw, NULL);
  }
  VC_EXPECT(s1 == VOXCONV_STATUS_SUCCESS && s2 == VOXCONV_STATUS_SUCCESS,
            "%s dgrad %s wgrad %s: %s", tag, voxconv_status_string(s1),
            voxconv_status_string(s2), voxconv_get_last_error(g_h));
  if (s1 == VOXCONV_STATUS_SUCCESS && s2 == VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(vc_count_poison(dx, F64, nx) == 0 &&
                  vc_count_poison(dW, F64, nw) == 0,
              "%s gradients not fully written", tag);
    fd_check(tag, "dx", t.x, nx, dx, conv_L, &t, FD_EPS);
    fd_check(tag, "dW", t.W, nw, dW, conv_L, &t, FD_EPS);
  }
  free(t.x), free(t.W), free(t.g), free(t.y), free(dx), free(dW);
}

/* ---- pooling ---------------------------------------------------------- */
typedef struct pool_loss {
  const gcase_t *c;
  int64_t C;
  voxconv_pool_mode_t mode;
  double *x, *g, *y;
  int unpool; /* x is the coarse tensor, y the fine one */
} pool_loss_t;

static double pool_L(void *vctx) {
  pool_loss_t *t = (pool_loss_t *)vctx;
  const int64_t nx = t->unpool ? t->c->n_out : t->c->n_in;
  const int64_t ny = t->unpool ? t->c->n_in : t->c->n_out;
  const voxconv_feats_t fx = {t->x, nx, t->C, F64}, fy = {t->y, ny, t->C, F64};
  const voxconv_status_t st =
      t->unpool ? voxconv_unpool_forward(g_h, t->c->kmap, &fx, &fy)
                : voxconv_pool_forward(g_h, t->c->kmap, t->mode, &fx, &fy);
  return st == VOXCONV_STATUS_SUCCESS ? dot(t->y, t->g, ny * t->C) : NAN;
}

static void check_pool(const gcase_t *c, voxconv_pool_mode_t mode,
                       int unpool) {
  pool_loss_t t;
  t.c = c;
  t.mode = mode;
  t.unpool = unpool;
  t.C = vc_rand_range(1, 5);
  const int64_t nx = (unpool ? c->n_out : c->n_in) * t.C;
  const int64_t ny = (unpool ? c->n_in : c->n_out) * t.C;
  t.x = (double *)dr_xmalloc((size_t)nx * 8 + 8);
  t.g = (double *)dr_xmalloc((size_t)ny * 8 + 8);
  t.y = (double *)dr_xmalloc((size_t)ny * 8 + 8);
  double *dx = (double *)dr_xmalloc((size_t)nx * 8 + 8);
  double eps = FD_EPS;
  if (mode == VOXCONV_POOL_MAX && !unpool) {
    /* Distinct values spaced 1/nx apart in random order: no two entries
     * of a window are within 2*eps, so the winner never changes. */
    for (int64_t i = 0; i < nx; i++)
      t.x[i] = (double)i / (double)nx - 0.5;
    for (int64_t i = nx - 1; i > 0; i--) {
      const int64_t j = vc_rand_range(0, i);
      const double v = t.x[i];
      t.x[i] = t.x[j];
      t.x[j] = v;
    }
    eps = 0.1 / (double)nx;
  } else {
    dr_fill_normal(t.x, F64, nx, NULL);
  }
  dr_fill_normal(t.g, F64, ny, NULL);
  char tag[300];
  snprintf(tag, sizeof tag, "%s %s C=%lld", c->tag,
           unpool ? "unpool"
                  : mode == VOXCONV_POOL_MAX ? "pool MAX"
                                             : mode == VOXCONV_POOL_AVG ? "pool AVG"
                                                                        : "pool SUM",
           (long long)t.C);
  /* MAX backward needs the forward's x and y. */
  const double l0 = pool_L(&t);
  (void)l0;
  const voxconv_feats_t fx = {t.x, unpool ? c->n_out : c->n_in, t.C, F64};
  const voxconv_feats_t fy = {t.y, unpool ? c->n_in : c->n_out, t.C, F64};
  const voxconv_feats_t fg = {t.g, unpool ? c->n_in : c->n_out, t.C, F64};
  const voxconv_feats_t fdx = {dx, unpool ? c->n_out : c->n_in, t.C, F64};
  vc_poison(dx, F64, nx);
  const voxconv_status_t st =
      unpool ? voxconv_unpool_backward(g_h, c->kmap, &fg, &fdx)
             : voxconv_pool_backward(g_h, c->kmap, mode, &fx, &fy, &fg, &fdx);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s backward: %s: %s", tag,
            voxconv_status_string(st), voxconv_get_last_error(g_h));
  if (st == VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(vc_count_poison(dx, F64, nx) == 0, "%s dx not fully written",
              tag);
    fd_check(tag, "dx", t.x, nx, dx, pool_L, &t, eps);
  }
  free(t.x), free(t.g), free(t.y), free(dx);
}

int main(void) {
  g_seed = (unsigned long long)vc_test_init("test_gradients");
  voxconv_handle_desc_t hd;
  memset(&hd, 0, sizeof hd);
  hd.backend = VOXCONV_BACKEND_CPU;
  hd.num_threads = 2;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_h, &hd));
  int n_cases = 0;
  for (int id = 0; id < 24; id++) {
    const voxconv_kmap_mode_t mode = (voxconv_kmap_mode_t)(id % 4);
    gcase_t c;
    if (make_gcase(&c, id, mode) && c.n_out > 0) {
      n_cases++;
      check_conv(&c, 0);
      check_conv(&c, 1);
      check_pool(&c, VOXCONV_POOL_AVG, 0);
      check_pool(&c, VOXCONV_POOL_SUM, 0);
      check_pool(&c, VOXCONV_POOL_MAX, 0);
      check_pool(&c, VOXCONV_POOL_SUM, 1);
    }
    free_gcase(&c);
  }
  printf("%d map cases\n", n_cases);
  voxconv_destroy(g_h);
  return vc_test_finish();
}
