/* spconv's output sets, explicit padding and inverse maps (issue 21 item 1)
 * against dense references written only from include/voxconv.h:
 *
 *   - EXPANDING (SparseConv3d), GENERATIVE with out_shape (SparseConvTranspose3d),
 *     STRIDED / TRANSPOSED / SUBMANIFOLD with padded = 1, random kernels
 *     1..5 (even, anisotropic, (3,1,1) / (2,1,1)), strides 1..3, padding
 *     0..d(k-1), dilations 1..2, with and without out_shape, coordinates
 *     that may be negative;
 *   - the output set is enumerated over the whole candidate box from the
 *     dense definition (o active iff a window cell holds an input), the pair
 *     list from the definitions in the documented order;
 *   - conv forward / dgrad / wgrad (default, deterministic and every CPU
 *     algorithm), depthwise forward / dgrad / wgrad and MAX / AVG / SUM
 *     pooling in fp64 against dense gather/scatter loops over the grid;
 *   - voxconv_kmap_inverse: the reversed pairs exactly, the TRANSPOSED build
 *     of the same geometry pair for pair, verify, and its convolution
 *     against a dense conv_transpose3d;
 *   - the padded map with padding = floor((k-1)/2)*d equals the centred one;
 *   - bad geometry gets a named status and a message naming the field.
 * Fresh random cases every run; the seed is printed (VOXCONV_TEST_SEED
 * replays it). VOXCONV_EXPANDING_CASES overrides the case count. */
#include "dense_ref.h"
#include "vc_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static voxconv_handle_t *g_h;

typedef struct {
  const char *name;
  unsigned passes;
} algo_entry_t;
static algo_entry_t g_algos[64];
static int g_n_algos;

static void list_cpu_algos(void) {
  const int n = voxconv_algo_count();
  for (int i = 0; i < n && g_n_algos < 64; i++) {
    voxconv_algo_info_t info;
    if (voxconv_algo_get_info(i, &info) != VOXCONV_STATUS_SUCCESS ||
        info.backend != VOXCONV_BACKEND_CPU)
      continue;
    g_algos[g_n_algos].name = info.name;
    g_algos[g_n_algos].passes = info.passes;
    g_n_algos++;
  }
}

/* ---- a case ----------------------------------------------------------- */
typedef struct {
  char tag[200];
  voxconv_kmap_desc_t desc;
  voxconv_kmap_mode_t mode;
  int transposed; /* o = s*i + off (TRANSPOSED, GENERATIVE) */
  int32_t k[3], s[3], d[3], p[3];
  int K;
  int32_t off[VOXCONV_KERNEL_VOLUME_MAX][3];
  int32_t *in; /* [n_in][4], random order */
  int64_t n_in;
  int32_t *given; /* TRANSPOSED outputs */
  int64_t n_given;
  int32_t *exp_out; /* the output set from the definitions */
  int64_t n_out;
} xcase_t;

static void case_free(xcase_t *c) {
  free(c->in);
  free(c->given);
  free(c->exp_out);
  memset(c, 0, sizeof *c);
}

static int32_t ceil_div(int32_t a, int32_t b) { return -dr_floordiv(-a, b); }

/* Occupancy of a coordinate set: a box over its bounding box with the row
 * of each active cell. */
static dr_box_t index_of(const int32_t *c, int64_t n) {
  int32_t lo[3], hi[3];
  int nb;
  dr_bbox(c, n, lo, hi, &nb);
  dr_box_t b = dr_box_make(nb, lo, hi, 0);
  dr_box_index(&b, c, n);
  return b;
}
static int64_t row_at(const dr_box_t *b, int32_t bt, const int64_t *p) {
  for (int a = 0; a < 3; a++)
    if (p[a] < INT32_MIN || p[a] > INT32_MAX)
      return -1;
  const int64_t cell =
      dr_box_cell(b, bt, (int32_t)p[0], (int32_t)p[1], (int32_t)p[2]);
  return cell < 0 ? -1 : b->row[cell];
}

/* The partner input cell of output cell o at offset k (direct: s*o + off;
 * transposed: (o - off)/s when exact). Returns 0 when there is none. */
static int partner_of(const xcase_t *c, const int32_t *o, int k, int64_t *p) {
  for (int a = 0; a < 3; a++) {
    if (!c->transposed) {
      p[a] = (int64_t)c->s[a] * o[a] + c->off[k][a];
    } else {
      const int64_t t = (int64_t)o[a] - c->off[k][a];
      if (t % c->s[a] != 0)
        return 0;
      p[a] = t / c->s[a];
    }
  }
  return 1;
}

/* Output cells a dense conv (direct) / conv_transpose (transposed) can
 * reach from the input box, per axis, clipped to out_shape. */
static void candidate_box(const xcase_t *c, const dr_box_t *ib, int32_t lo[3],
                          int32_t hi[3]) {
  for (int a = 0; a < 3; a++) {
    int32_t mn = INT32_MAX, mx = INT32_MIN;
    for (int k = 0; k < c->K; k++) {
      mn = c->off[k][a] < mn ? c->off[k][a] : mn;
      mx = c->off[k][a] > mx ? c->off[k][a] : mx;
    }
    const int32_t ilo = ib->lo[a], ihi = ib->lo[a] + ib->dim[a] - 1;
    if (!c->transposed) {
      lo[a] = ceil_div(ilo - mx, c->s[a]);
      hi[a] = dr_floordiv(ihi - mn, c->s[a]);
    } else {
      lo[a] = c->s[a] * ilo + mn;
      hi[a] = c->s[a] * ihi + mx;
    }
    if (c->desc.out_shape[a] > 0) {
      lo[a] = lo[a] < 0 ? 0 : lo[a];
      hi[a] = hi[a] > c->desc.out_shape[a] - 1 ? c->desc.out_shape[a] - 1
                                                : hi[a];
    }
  }
}

/* The output set from the header's definition of each mode. */
static void expected_outputs(xcase_t *c) {
  dr_box_t ib = index_of(c->in, c->n_in);
  switch (c->mode) {
  case VOXCONV_KMAP_SUBMANIFOLD:
    c->exp_out = (int32_t *)dr_xmalloc((size_t)c->n_in * 16);
    memcpy(c->exp_out, c->in, (size_t)c->n_in * 16);
    c->n_out = c->n_in;
    break;
  case VOXCONV_KMAP_TRANSPOSED:
    c->exp_out = (int32_t *)dr_xmalloc((size_t)c->n_given * 16);
    memcpy(c->exp_out, c->given, (size_t)c->n_given * 16);
    c->n_out = c->n_given;
    break;
  case VOXCONV_KMAP_STRIDED:
    c->exp_out = (int32_t *)dr_xmalloc((size_t)c->n_in * 16);
    for (int64_t i = 0; i < c->n_in; i++) {
      c->exp_out[4 * i] = c->in[4 * i];
      for (int a = 0; a < 3; a++)
        c->exp_out[4 * i + 1 + a] = dr_floordiv(c->in[4 * i + 1 + a], c->s[a]);
    }
    c->n_out = dr_sort_unique(c->exp_out, c->n_in);
    break;
  default: { /* EXPANDING, GENERATIVE: every box cell some input reaches */
    int32_t lo[3], hi[3];
    candidate_box(c, &ib, lo, hi);
    int64_t cells = ib.B;
    for (int a = 0; a < 3; a++)
      cells *= hi[a] >= lo[a] ? hi[a] - lo[a] + 1 : 0;
    c->exp_out = (int32_t *)dr_xmalloc((size_t)cells * 16);
    int64_t n = 0;
    for (int b = 0; b < ib.B; b++)
      for (int32_t x = lo[0]; x <= hi[0]; x++)
        for (int32_t y = lo[1]; y <= hi[1]; y++)
          for (int32_t z = lo[2]; z <= hi[2]; z++) {
            const int32_t o[3] = {x, y, z};
            int hit = 0;
            for (int k = 0; k < c->K && !hit; k++) {
              int64_t p[3];
              hit = partner_of(c, o, k, p) && row_at(&ib, b, p) >= 0;
            }
            if (hit) {
              int32_t *r = c->exp_out + 4 * n++;
              r[0] = b, r[1] = x, r[2] = y, r[3] = z;
            }
          }
    c->n_out = n; /* generated in (b, x, y, z) order: sorted */
  }
  }
  dr_box_free(&ib);
}

static int32_t pick_k(void) { return (int32_t)vc_rand_range(1, 5); }

/* Random geometry and coordinates for mode; 0 if the draw is unusable. */
static int make_case(xcase_t *c, voxconv_kmap_mode_t mode, int id) {
  memset(c, 0, sizeof *c);
  c->mode = mode;
  c->transposed =
      mode == VOXCONV_KMAP_TRANSPOSED || mode == VOXCONV_KMAP_GENERATIVE;
  c->desc.mode = mode;
  const int shape_kind = (int)vc_rand_range(0, 3); /* 0: iso, 1: (k,1,1) */
  const int32_t k0 = pick_k(), s0 = (int32_t)vc_rand_range(1, 3);
  const int32_t d0 = (int32_t)vc_rand_range(1, 2);
  /* Centred offsets now and then (padded = 0) in the modes that had
   * them, to cover the mixed spellings. */
  c->desc.padded = vc_rand_uniform() < 0.85 ? 1 : 0;
  const int bounded = (mode == VOXCONV_KMAP_EXPANDING ||
                       mode == VOXCONV_KMAP_GENERATIVE) &&
                      vc_rand_uniform() < 0.5;
  int32_t in_shape[3], lo[3];
  for (int a = 0; a < 3; a++) {
    c->k[a] = shape_kind == 0 ? k0
              : shape_kind == 1 ? (a == 0 ? k0 : 1)
                                : pick_k();
    c->s[a] = shape_kind == 0 ? s0 : (int32_t)vc_rand_range(1, 3);
    c->d[a] = shape_kind == 0 ? d0 : (int32_t)vc_rand_range(1, 2);
    if (mode == VOXCONV_KMAP_SUBMANIFOLD)
      c->s[a] = 1;
    c->p[a] = c->desc.padded
                  ? (int32_t)vc_rand_range(0, c->d[a] * (c->k[a] - 1))
                  : (c->k[a] - 1) / 2 * c->d[a];
    c->desc.kernel_size[a] = c->k[a];
    c->desc.stride[a] = c->s[a] == 1 && vc_rand_uniform() < 0.3 ? 0 : c->s[a];
    c->desc.dilation[a] = c->d[a] == 1 && vc_rand_uniform() < 0.3 ? 0 : c->d[a];
    c->desc.padding[a] = c->desc.padded ? c->p[a] : 0;
    in_shape[a] = (int32_t)vc_rand_range(3, 9);
    lo[a] = bounded ? 0 : (int32_t)vc_rand_range(-9, 4);
    if (bounded) {
      /* spconv / torch output sizes, computed by the caller. */
      const int32_t span = c->d[a] * (c->k[a] - 1);
      int32_t os;
      if (mode == VOXCONV_KMAP_EXPANDING)
        os = dr_floordiv(in_shape[a] + 2 * c->p[a] - span - 1, c->s[a]) + 1;
      else
        os = (in_shape[a] - 1) * c->s[a] - 2 * c->p[a] + span + 1 +
             (int32_t)vc_rand_range(0, c->s[a] - 1); /* output_padding */
      if (os < 1)
        return 0;
      c->desc.out_shape[a] = os;
    }
  }
  c->K = dr_kernel_offsets(&c->desc, c->off);
  const int B = (int)vc_rand_range(1, 2);
  const double density = 0.1 + 0.5 * vc_rand_uniform();
  c->in = dr_random_coords(B, lo, in_shape, density, &c->n_in);
  if (mode == VOXCONV_KMAP_TRANSPOSED) {
    /* Outputs: a random part of every cell the inputs reach, plus cells
     * nothing reaches (they get no pairs and zero outputs). */
    dr_box_t ib = index_of(c->in, c->n_in);
    int32_t olo[3], ohi[3], dim[3];
    candidate_box(c, &ib, olo, ohi);
    for (int a = 0; a < 3; a++) {
      olo[a] -= 1;
      dim[a] = ohi[a] - olo[a] + 2;
    }
    c->given = dr_random_coords(ib.B, olo, dim, 0.3, &c->n_given);
    dr_box_free(&ib);
  }
  snprintf(c->tag, sizeof c->tag,
           "case %d %s k%dx%dx%d s%dx%dx%d d%dx%dx%d %s%dx%dx%d "
           "out_shape %d,%d,%d n_in %lld",
           id, dr_mode_str(mode), c->k[0], c->k[1], c->k[2], c->s[0], c->s[1],
           c->s[2], c->d[0], c->d[1], c->d[2],
           c->desc.padded ? "p" : "centred p", c->p[0], c->p[1], c->p[2],
           c->desc.out_shape[0], c->desc.out_shape[1], c->desc.out_shape[2],
           (long long)c->n_in);
  expected_outputs(c);
  return 1;
}

/* ---- pairs from the definitions --------------------------------------- */
typedef struct {
  int64_t offsets[VOXCONV_KERNEL_VOLUME_MAX + 1];
  int32_t *in_rows, *out_rows;
  int64_t n;
} pairs_t;

static void ref_pairs(const xcase_t *c, const int32_t *out, int64_t n_out,
                      pairs_t *r) {
  dr_box_t ib = index_of(c->in, c->n_in);
  r->in_rows = (int32_t *)dr_xmalloc((size_t)(n_out * c->K) * 4);
  r->out_rows = (int32_t *)dr_xmalloc((size_t)(n_out * c->K) * 4);
  r->n = 0;
  for (int k = 0; k < c->K; k++) {
    r->offsets[k] = r->n;
    for (int64_t o = 0; o < n_out; o++) {
      int64_t p[3];
      if (!partner_of(c, out + 4 * o + 1, k, p))
        continue;
      const int64_t i = row_at(&ib, out[4 * o], p);
      if (i < 0)
        continue;
      r->in_rows[r->n] = (int32_t)i;
      r->out_rows[r->n] = (int32_t)o;
      r->n++;
    }
  }
  r->offsets[c->K] = r->n;
  dr_box_free(&ib);
}

static void pairs_free(pairs_t *p) {
  free(p->in_rows);
  free(p->out_rows);
}

/* A map's pairs copied to the host (CPU maps: host memory already). */
static int get_pairs(const voxconv_kmap_t *m, pairs_t *p) {
  voxconv_kmap_info_t info;
  if (voxconv_kmap_get_info(m, &info) != VOXCONV_STATUS_SUCCESS)
    return 0;
  p->n = info.n_pairs;
  p->in_rows = (int32_t *)dr_xmalloc((size_t)p->n * 4);
  p->out_rows = (int32_t *)dr_xmalloc((size_t)p->n * 4);
  return voxconv_kmap_get_pairs(g_h, m, p->offsets, p->in_rows, p->out_rows) ==
         VOXCONV_STATUS_SUCCESS;
}

static void expect_same_pairs(const char *tag, const char *what, int K,
                              const pairs_t *got, const pairs_t *want) {
  int off_ok = 1;
  for (int k = 0; k <= K; k++)
    off_ok &= got->offsets[k] == want->offsets[k];
  VC_EXPECT(off_ok && got->n == want->n,
            "%s: %s: %lld pairs, want %lld (or offsets differ)", tag, what,
            (long long)got->n, (long long)want->n);
  if (!off_ok || got->n != want->n)
    return;
  int64_t bad = -1;
  for (int64_t i = 0; i < got->n && bad < 0; i++)
    if (got->in_rows[i] != want->in_rows[i] ||
        got->out_rows[i] != want->out_rows[i])
      bad = i;
  VC_EXPECT(bad < 0, "%s: %s: pair %lld is (%d,%d), want (%d,%d)", tag, what,
            (long long)bad, bad >= 0 ? got->in_rows[bad] : 0,
            bad >= 0 ? got->out_rows[bad] : 0,
            bad >= 0 ? want->in_rows[bad] : 0,
            bad >= 0 ? want->out_rows[bad] : 0);
}

/* ---- dense references -------------------------------------------------- */
/* A relation for the dense loops: direct (o gathers from s*o + off) or
 * transposed (i scatters to s*i + off), over the cells of the in / out
 * coordinate sets' boxes; features are zero at inactive cells. */
typedef struct {
  int transposed;
  const int32_t *s;
  const int32_t (*off)[3];
  int K;
  const int32_t *in, *out;
  int64_t n_in, n_out;
} rel_t;

/* Calls fn(i_row, o_row, k) for every (input cell, output cell, k) of the
 * dense relation where both cells are active, walking the dense grid:
 * direct relations over every output-box cell, transposed ones over every
 * input-box cell (inactive cells contribute zeros, so they are skipped). */
typedef void (*triple_fn)(void *ctx, int64_t i, int64_t o, int k);
static void dense_walk(const rel_t *r, triple_fn fn, void *ctx) {
  dr_box_t ib = index_of(r->in, r->n_in), ob = index_of(r->out, r->n_out);
  const dr_box_t *walk = r->transposed ? &ib : &ob;
  const dr_box_t *other = r->transposed ? &ob : &ib;
  const int64_t cells = dr_box_cells(walk);
  for (int64_t cell = 0; cell < cells; cell++) {
    const int64_t row = walk->row[cell];
    if (row < 0)
      continue;
    int32_t c4[4];
    dr_box_cell_coord(walk, cell, c4);
    for (int k = 0; k < r->K; k++) {
      int64_t p[3];
      for (int a = 0; a < 3; a++)
        p[a] = (int64_t)r->s[a] * c4[1 + a] + r->off[k][a];
      const int64_t q = row_at(other, c4[0], p);
      if (q < 0)
        continue;
      if (r->transposed)
        fn(ctx, row, q, k);
      else
        fn(ctx, q, row, k);
    }
  }
  dr_box_free(&ib);
  dr_box_free(&ob);
}

typedef struct {
  const double *x, *w, *dy;
  double *y, *abs_y; /* fwd result and sum |terms| */
  double *dx, *abs_dx;
  double *dw, *abs_dw;
  int64_t cin, cout;
  int depthwise;
} conv_ref_t;

static void conv_ref_fn(void *vctx, int64_t i, int64_t o, int k) {
  conv_ref_t *c = (conv_ref_t *)vctx;
  if (c->depthwise) {
    for (int64_t ch = 0; ch < c->cin; ch++) {
      const double x = c->x[i * c->cin + ch], w = c->w[k * c->cin + ch];
      const double dy = c->dy[o * c->cin + ch];
      c->y[o * c->cin + ch] += x * w;
      c->abs_y[o * c->cin + ch] += fabs(x * w);
      c->dx[i * c->cin + ch] += dy * w;
      c->abs_dx[i * c->cin + ch] += fabs(dy * w);
      c->dw[k * c->cin + ch] += x * dy;
      c->abs_dw[k * c->cin + ch] += fabs(x * dy);
    }
    return;
  }
  for (int64_t ci = 0; ci < c->cin; ci++)
    for (int64_t co = 0; co < c->cout; co++) {
      const double x = c->x[i * c->cin + ci];
      const double w = c->w[(k * c->cin + ci) * c->cout + co];
      const double dy = c->dy[o * c->cout + co];
      c->y[o * c->cout + co] += x * w;
      c->abs_y[o * c->cout + co] += fabs(x * w);
      c->dx[i * c->cin + ci] += dy * w;
      c->abs_dx[i * c->cin + ci] += fabs(dy * w);
      c->dw[(k * c->cin + ci) * c->cout + co] += x * dy;
      c->abs_dw[(k * c->cin + ci) * c->cout + co] += fabs(x * dy);
    }
}

static void expect_close(const char *tag, const char *what, const double *got,
                         const double *ref, const double *absref, int64_t n) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (!(fabs(got[i] - ref[i]) <= 1e-12 * absref[i] + 1e-300))
      bad = i;
  VC_EXPECT(bad < 0, "%s: %s element %lld of %lld: got %.17g want %.17g", tag,
            what, (long long)bad, (long long)n, bad >= 0 ? got[bad] : 0.0,
            bad >= 0 ? ref[bad] : 0.0);
}

static double *randn(int64_t n) {
  double *p = (double *)dr_xmalloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++)
    p[i] = vc_rand_normal();
  return p;
}
static double *poisoned(int64_t n) {
  double *p = (double *)dr_xmalloc((size_t)n * 8);
  vc_poison(p, VOXCONV_DTYPE_F64, n);
  return p;
}

static voxconv_conv_options_t opts_for(int variant, const char **name) {
  voxconv_conv_options_t o;
  memset(&o, 0, sizeof o);
  *name = variant == 0 ? "default" : variant == 1 ? "deterministic" : NULL;
  if (variant == 1)
    o.deterministic = VOXCONV_TRUE;
  if (variant >= 2) {
    *name = g_algos[variant - 2].name;
    o.fwd_algo = o.bwd_algo = o.dgrad_algo = o.wgrad_algo = *name;
  }
  return o;
}

/* Conv and depthwise forward / dgrad / wgrad of map m against the dense
 * relation, in fp64, through every variant. */
static void check_conv(const char *tag, const voxconv_kmap_t *m,
                       const rel_t *rel) {
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(m, &info);
  const int64_t n_in = info.n_in, n_out = info.n_out, K = info.kernel_volume;
  const int64_t cin = vc_rand_range(1, 4), cout = vc_rand_range(1, 4);
  double *x = randn(n_in * cin), *w = randn(K * cin * cout);
  double *dy = randn(n_out * cout);
  conv_ref_t r = {x, w, dy,
                  (double *)dr_xcalloc((size_t)(n_out * cout), 8),
                  (double *)dr_xcalloc((size_t)(n_out * cout), 8),
                  (double *)dr_xcalloc((size_t)(n_in * cin), 8),
                  (double *)dr_xcalloc((size_t)(n_in * cin), 8),
                  (double *)dr_xcalloc((size_t)(K * cin * cout), 8),
                  (double *)dr_xcalloc((size_t)(K * cin * cout), 8),
                  cin, cout, 0};
  dense_walk(rel, conv_ref_fn, &r);
  double *y = poisoned(n_out * cout), *dx = poisoned(n_in * cin);
  double *dw = poisoned(K * cin * cout);
  const voxconv_feats_t fx = {x, n_in, cin, VOXCONV_DTYPE_F64};
  const voxconv_feats_t fy = {y, n_out, cout, VOXCONV_DTYPE_F64};
  const voxconv_feats_t fdy = {dy, n_out, cout, VOXCONV_DTYPE_F64};
  const voxconv_feats_t fdx = {dx, n_in, cin, VOXCONV_DTYPE_F64};
  const voxconv_weights_t fw = {w, K, cin, cout, VOXCONV_DTYPE_F64};
  const voxconv_weights_t fdw = {dw, K, cin, cout, VOXCONV_DTYPE_F64};
  char what[160];
  for (int v = 0; v < 2 + g_n_algos; v++) {
    const char *name;
    const voxconv_conv_options_t o = opts_for(v, &name);
    const unsigned passes = v < 2 ? 7u : g_algos[v - 2].passes;
    voxconv_status_t st;
    if (passes & (1u << VOXCONV_PASS_CONV_FWD)) {
      st = voxconv_conv_forward(g_h, m, &fx, &fw, &fy, &o);
      snprintf(what, sizeof what, "conv forward [%s]", name);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS ||
                    (v >= 2 && st == VOXCONV_STATUS_UNSUPPORTED),
                "%s: %s: %s", tag, what, voxconv_get_last_error(g_h));
      if (st == VOXCONV_STATUS_SUCCESS)
        expect_close(tag, what, y, r.y, r.abs_y, n_out * cout);
    }
    if (passes & (1u << VOXCONV_PASS_CONV_DGRAD)) {
      st = voxconv_conv_dgrad(g_h, m, &fdy, &fw, &fdx, &o);
      snprintf(what, sizeof what, "conv dgrad [%s]", name);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS ||
                    (v >= 2 && st == VOXCONV_STATUS_UNSUPPORTED),
                "%s: %s: %s", tag, what, voxconv_get_last_error(g_h));
      if (st == VOXCONV_STATUS_SUCCESS)
        expect_close(tag, what, dx, r.dx, r.abs_dx, n_in * cin);
    }
    if (passes & (1u << VOXCONV_PASS_CONV_WGRAD)) {
      st = voxconv_conv_wgrad(g_h, m, &fx, &fdy, &fdw, &o);
      snprintf(what, sizeof what, "conv wgrad [%s]", name);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS ||
                    (v >= 2 && st == VOXCONV_STATUS_UNSUPPORTED),
                "%s: %s: %s", tag, what, voxconv_get_last_error(g_h));
      if (st == VOXCONV_STATUS_SUCCESS)
        expect_close(tag, what, dw, r.dw, r.abs_dw, K * cin * cout);
    }
  }
  free(r.y), free(r.abs_y), free(r.dx), free(r.abs_dx), free(r.dw),
      free(r.abs_dw);
  free(x), free(w), free(dy), free(y), free(dx), free(dw);

  /* Depthwise, default path. */
  const int64_t C = vc_rand_range(1, 5);
  x = randn(n_in * C), w = randn(K * C), dy = randn(n_out * C);
  conv_ref_t d = {x, w, dy,
                  (double *)dr_xcalloc((size_t)(n_out * C), 8),
                  (double *)dr_xcalloc((size_t)(n_out * C), 8),
                  (double *)dr_xcalloc((size_t)(n_in * C), 8),
                  (double *)dr_xcalloc((size_t)(n_in * C), 8),
                  (double *)dr_xcalloc((size_t)(K * C), 8),
                  (double *)dr_xcalloc((size_t)(K * C), 8),
                  C, C, 1};
  dense_walk(rel, conv_ref_fn, &d);
  y = poisoned(n_out * C), dx = poisoned(n_in * C), dw = poisoned(K * C);
  const voxconv_feats_t gx = {x, n_in, C, VOXCONV_DTYPE_F64};
  const voxconv_feats_t gw = {w, K, C, VOXCONV_DTYPE_F64};
  const voxconv_feats_t gy = {y, n_out, C, VOXCONV_DTYPE_F64};
  const voxconv_feats_t gdy = {dy, n_out, C, VOXCONV_DTYPE_F64};
  const voxconv_feats_t gdx = {dx, n_in, C, VOXCONV_DTYPE_F64};
  const voxconv_feats_t gdw = {dw, K, C, VOXCONV_DTYPE_F64};
  VC_EXPECT_STATUS(g_h, voxconv_depthwise_forward(g_h, m, &gx, &gw, &gy, NULL),
                   VOXCONV_STATUS_SUCCESS);
  expect_close(tag, "depthwise forward", y, d.y, d.abs_y, n_out * C);
  VC_EXPECT_STATUS(g_h, voxconv_depthwise_dgrad(g_h, m, &gdy, &gw, &gdx, NULL),
                   VOXCONV_STATUS_SUCCESS);
  expect_close(tag, "depthwise dgrad", dx, d.dx, d.abs_dx, n_in * C);
  VC_EXPECT_STATUS(g_h, voxconv_depthwise_wgrad(g_h, m, &gx, &gdy, &gdw, NULL),
                   VOXCONV_STATUS_SUCCESS);
  expect_close(tag, "depthwise wgrad", dw, d.dw, d.abs_dw, K * C);
  free(d.y), free(d.abs_y), free(d.dx), free(d.abs_dx), free(d.dw),
      free(d.abs_dw);
  free(x), free(w), free(dy), free(y), free(dx), free(dw);
}

/* ---- pooling ------------------------------------------------------------ */
typedef struct {
  const double *x;
  double *mx, *sum;
  int64_t *cnt;
  int64_t C;
} pool_ref_t;

static void pool_ref_fn(void *vctx, int64_t i, int64_t o, int k) {
  (void)k;
  pool_ref_t *p = (pool_ref_t *)vctx;
  for (int64_t c = 0; c < p->C; c++) {
    const double v = p->x[i * p->C + c];
    if (p->cnt[o] == 0 || v > p->mx[o * p->C + c])
      p->mx[o * p->C + c] = v;
    p->sum[o * p->C + c] += v;
  }
  p->cnt[o]++;
}

static void check_pool(const char *tag, const voxconv_kmap_t *m,
                       const rel_t *rel) {
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(m, &info);
  const int64_t n_in = info.n_in, n_out = info.n_out, C = vc_rand_range(1, 3);
  double *x = randn(n_in * C);
  pool_ref_t p = {x, (double *)dr_xcalloc((size_t)(n_out * C), 8),
                  (double *)dr_xcalloc((size_t)(n_out * C), 8),
                  (int64_t *)dr_xcalloc((size_t)n_out, 8), C};
  /* Count per output once, not per channel (pool_ref_fn counts pairs). */
  dense_walk(rel, pool_ref_fn, &p);
  double *y = poisoned(n_out * C);
  const voxconv_feats_t fx = {x, n_in, C, VOXCONV_DTYPE_F64};
  const voxconv_feats_t fy = {y, n_out, C, VOXCONV_DTYPE_F64};
  static const char *names[] = {"MAX", "AVG", "SUM"};
  for (int mode = 0; mode < 3; mode++) {
    vc_poison(y, VOXCONV_DTYPE_F64, n_out * C);
    VC_EXPECT_STATUS(g_h,
                     voxconv_pool_forward(g_h, m, (voxconv_pool_mode_t)mode,
                                          &fx, &fy),
                     VOXCONV_STATUS_SUCCESS);
    int64_t bad = -1;
    double want = 0;
    for (int64_t o = 0; o < n_out && bad < 0; o++)
      for (int64_t c = 0; c < C && bad < 0; c++) {
        const double s = p.sum[o * C + c];
        want = mode == 0   ? (p.cnt[o] ? p.mx[o * C + c] : 0.0)
               : mode == 1 ? (p.cnt[o] ? s / (double)p.cnt[o] : 0.0)
                           : s;
        if (!(fabs(y[o * C + c] - want) <= 1e-12 * (fabs(want) + 1) * 16))
          bad = o * C + c;
      }
    VC_EXPECT(bad < 0, "%s: pool %s element %lld: got %.17g want %.17g", tag,
              names[mode], (long long)bad, bad >= 0 ? y[bad] : 0.0, want);
  }
  free(p.mx), free(p.sum), free(p.cnt), free(x), free(y);
}

/* ---- the inverse -------------------------------------------------------- */
static void check_inverse(xcase_t *c, const voxconv_kmap_t *fwd,
                          const int32_t *out, int64_t n_out) {
  voxconv_kmap_t *inv = NULL;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_inverse(g_h, fwd, &inv),
                   VOXCONV_STATUS_SUCCESS);
  if (!inv)
    return;
  voxconv_kmap_info_t fi, ii;
  voxconv_kmap_get_info(fwd, &fi);
  voxconv_kmap_get_info(inv, &ii);
  VC_EXPECT(ii.n_in == fi.n_out && ii.n_out == fi.n_in &&
                ii.n_pairs == fi.n_pairs &&
                ii.kernel_volume == fi.kernel_volume &&
                ii.desc.mode == VOXCONV_KMAP_TRANSPOSED &&
                memcmp(ii.in_tensor_stride, fi.out_tensor_stride, 12) == 0 &&
                memcmp(ii.out_tensor_stride, fi.in_tensor_stride, 12) == 0,
            "%s: inverse info (n_in %lld n_out %lld pairs %lld mode %d)",
            c->tag, (long long)ii.n_in, (long long)ii.n_out,
            (long long)ii.n_pairs, (int)ii.desc.mode);
  const int32_t *ioc = NULL;
  voxconv_kmap_out_coords(inv, &ioc);
  VC_EXPECT(ioc && memcmp(ioc, c->in, (size_t)c->n_in * 16) == 0,
            "%s: the inverse's outputs are not fwd's inputs in order", c->tag);

  /* Pairs: fwd's reversed, offset by offset, in ascending (new) output
   * row; built directly from fwd's pair list. */
  pairs_t fp, ip, want;
  get_pairs(fwd, &fp);
  get_pairs(inv, &ip);
  const int K = c->K;
  want.n = fp.n;
  want.in_rows = (int32_t *)dr_xmalloc((size_t)fp.n * 4);
  want.out_rows = (int32_t *)dr_xmalloc((size_t)fp.n * 4);
  int32_t *slot = (int32_t *)dr_xmalloc((size_t)(c->n_in ? c->n_in : 1) * 4);
  for (int k = 0; k < K; k++) {
    want.offsets[k] = fp.offsets[k];
    for (int64_t i = 0; i < c->n_in; i++)
      slot[i] = -1;
    int dup = 0;
    for (int64_t q = fp.offsets[k]; q < fp.offsets[k + 1]; q++) {
      dup |= slot[fp.in_rows[q]] >= 0;
      slot[fp.in_rows[q]] = fp.out_rows[q];
    }
    VC_EXPECT(!dup, "%s: fwd pairs an input twice at offset %d", c->tag, k);
    int64_t w = fp.offsets[k];
    for (int64_t i = 0; i < c->n_in; i++)
      if (slot[i] >= 0) {
        want.in_rows[w] = slot[i];
        want.out_rows[w] = (int32_t)i;
        w++;
      }
  }
  want.offsets[K] = fp.n;
  free(slot);
  expect_same_pairs(c->tag, "inverse vs reversed pairs", K, &ip, &want);

  /* The TRANSPOSED build of the same geometry gives the same map. */
  voxconv_kmap_desc_t td = c->desc;
  td.mode = VOXCONV_KMAP_TRANSPOSED;
  memset(td.out_shape, 0, sizeof td.out_shape);
  voxconv_coords_t tin = {out, n_out, {0, 0, 0}};
  voxconv_coords_t tout = {c->in, c->n_in, {1, 1, 1}};
  for (int a = 0; a < 3; a++)
    tin.tensor_stride[a] = fi.out_tensor_stride[a];
  voxconv_kmap_t *tm = NULL;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &td, &tin, &tout, &tm),
                   VOXCONV_STATUS_SUCCESS);
  if (tm) {
    pairs_t tp;
    get_pairs(tm, &tp);
    expect_same_pairs(c->tag, "inverse vs TRANSPOSED build", K, &ip, &tp);
    pairs_free(&tp);
    voxconv_kmap_destroy(g_h, tm);
  }
  /* verify: fwd's outputs are the inverse's inputs. */
  VC_EXPECT_STATUS(g_h, voxconv_kmap_verify(g_h, inv, &tin),
                   VOXCONV_STATUS_SUCCESS);
  if (n_out > 1) {
    int32_t *mod = (int32_t *)dr_xmalloc((size_t)n_out * 16);
    memcpy(mod, out, (size_t)n_out * 16);
    mod[4 * (n_out / 2) + 2] += 7;
    voxconv_coords_t bad = tin;
    bad.data = mod;
    VC_EXPECT_STATUS(g_h, voxconv_kmap_verify(g_h, inv, &bad),
                     VOXCONV_STATUS_KMAP_MISMATCH);
    free(mod);
  }
  /* The inverse conv is a dense conv_transpose3d of fwd's geometry from
   * fwd's outputs onto fwd's inputs. */
  rel_t rel = {1, c->s, (const int32_t(*)[3])c->off, K, out, c->in, n_out,
               c->n_in};
  char tag[260];
  snprintf(tag, sizeof tag, "%s inverse", c->tag);
  check_conv(tag, inv, &rel);
  /* The inverse has no inverse (it is TRANSPOSED). */
  voxconv_kmap_t *ii_map = NULL;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_inverse(g_h, inv, &ii_map),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  pairs_free(&fp);
  pairs_free(&ip);
  pairs_free(&want);
  /* Independent of fwd: still usable after fwd is gone is checked by the
   * caller destroying fwd before this map (see run_case). */
  voxconv_kmap_destroy(g_h, inv);
}

/* ---- one case ----------------------------------------------------------- */
static void run_case(xcase_t *c) {
  voxconv_coords_t ci = {c->in, c->n_in, {1, 1, 1}};
  voxconv_coords_t co = {c->given, c->n_given, {1, 1, 1}};
  for (int a = 0; a < 3; a++)
    if (c->transposed)
      ci.tensor_stride[a] = c->s[a];
  voxconv_kmap_t *m = NULL;
  const voxconv_status_t st = voxconv_kmap_build(
      g_h, &c->desc, &ci, c->mode == VOXCONV_KMAP_TRANSPOSED ? &co : NULL, &m);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: build: %s: %s", c->tag,
            voxconv_status_string(st), voxconv_get_last_error(g_h));
  if (!m)
    return;
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(m, &info);
  const int32_t *oc = NULL;
  voxconv_kmap_out_coords(m, &oc);
  VC_EXPECT(info.n_out == c->n_out &&
                (c->n_out == 0 ||
                 memcmp(oc, c->exp_out, (size_t)c->n_out * 16) == 0),
            "%s: output set: %lld outputs, the definition gives %lld", c->tag,
            (long long)info.n_out, (long long)c->n_out);
  if (info.n_out != c->n_out) {
    voxconv_kmap_destroy(g_h, m);
    return;
  }
  VC_EXPECT(info.desc.padded == c->desc.padded &&
                memcmp(info.desc.padding, c->desc.padding, 12) == 0 &&
                memcmp(info.desc.out_shape, c->desc.out_shape, 12) == 0,
            "%s: info.desc does not echo padded / padding / out_shape",
            c->tag);
  pairs_t want, got;
  ref_pairs(c, c->exp_out, c->n_out, &want);
  get_pairs(m, &got);
  expect_same_pairs(c->tag, "pairs vs definition", c->K, &got, &want);
  pairs_free(&want);
  pairs_free(&got);

  /* The padded spelling of the centred offsets is the centred map. */
  if (c->desc.padded && c->mode != VOXCONV_KMAP_EXPANDING) {
    int centred = 1;
    for (int a = 0; a < 3; a++)
      centred &= c->p[a] == (c->k[a] - 1) / 2 * c->d[a];
    if (centred) {
      voxconv_kmap_desc_t cd = c->desc;
      cd.padded = 0;
      memset(cd.padding, 0, sizeof cd.padding);
      voxconv_kmap_t *cm = NULL;
      VC_EXPECT_STATUS(g_h,
                       voxconv_kmap_build(g_h, &cd, &ci,
                                          c->mode == VOXCONV_KMAP_TRANSPOSED
                                              ? &co
                                              : NULL,
                                          &cm),
                       VOXCONV_STATUS_SUCCESS);
      if (cm) {
        pairs_t a, b;
        get_pairs(m, &a);
        get_pairs(cm, &b);
        expect_same_pairs(c->tag, "padded == centred", c->K, &a, &b);
        pairs_free(&a);
        pairs_free(&b);
        voxconv_kmap_destroy(g_h, cm);
      }
    }
  }

  rel_t rel = {c->transposed, c->s, (const int32_t(*)[3])c->off, c->K,
               c->in, oc, c->n_in, c->n_out};
  check_conv(c->tag, m, &rel);
  check_pool(c->tag, m, &rel);
  if (c->mode == VOXCONV_KMAP_STRIDED || c->mode == VOXCONV_KMAP_EXPANDING) {
    int32_t *out = (int32_t *)dr_xmalloc((size_t)c->n_out * 16 + 16);
    memcpy(out, oc, (size_t)c->n_out * 16);
    /* The inverse must not depend on fwd once built: build it, then check
     * everything with fwd destroyed in between for half the cases. */
    if (vc_rand_uniform() < 0.5) {
      check_inverse(c, m, out, c->n_out);
      voxconv_kmap_destroy(g_h, m);
    } else {
      voxconv_kmap_t *inv = NULL;
      VC_EXPECT_STATUS(g_h, voxconv_kmap_inverse(g_h, m, &inv),
                       VOXCONV_STATUS_SUCCESS);
      pairs_t before;
      if (inv)
        get_pairs(inv, &before);
      voxconv_kmap_destroy(g_h, m);
      if (inv) {
        const int32_t *ioc = NULL;
        voxconv_kmap_out_coords(inv, &ioc);
        VC_EXPECT(memcmp(ioc, c->in, (size_t)c->n_in * 16) == 0,
                  "%s: inverse outputs changed after fwd was destroyed",
                  c->tag);
        rel_t irel = {1, c->s, (const int32_t(*)[3])c->off, c->K, out, c->in,
                      c->n_out, c->n_in};
        char tag[260];
        snprintf(tag, sizeof tag, "%s inverse (fwd destroyed)", c->tag);
        check_conv(tag, inv, &irel);
        pairs_free(&before);
        voxconv_kmap_destroy(g_h, inv);
      }
    }
    free(out);
    return;
  }
  if (c->mode != VOXCONV_KMAP_STRIDED) {
    voxconv_kmap_t *inv = NULL;
    VC_EXPECT_STATUS(g_h, voxconv_kmap_inverse(g_h, m, &inv),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
  }
  voxconv_kmap_destroy(g_h, m);
}

/* ---- bad geometry -------------------------------------------------------- */
static void expect_fail(const char *what, voxconv_status_t got,
                        voxconv_status_t want, const char *needle) {
  const char *msg = voxconv_get_last_error(g_h);
  VC_EXPECT(got == want && strstr(msg, needle) != NULL,
            "%s: got %s (%s), want %s mentioning \"%s\"", what,
            voxconv_status_string(got), msg, voxconv_status_string(want),
            needle);
}

static voxconv_kmap_desc_t geo(voxconv_kmap_mode_t mode, int k, int s) {
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = mode;
  for (int a = 0; a < 3; a++)
    d.kernel_size[a] = k, d.stride[a] = s, d.dilation[a] = 1;
  return d;
}

/* VC_REQUIRE_OK for void functions. */
#define REQUIRE_OK_VOID(call)                                                  \
  do {                                                                         \
    voxconv_status_t rq_ = (call);                                             \
    if (rq_ != VOXCONV_STATUS_SUCCESS) {                                       \
      VC_EXPECT(0, "%s returned %s: %s", #call, voxconv_status_string(rq_),   \
                voxconv_get_last_error(g_h));                                  \
      return;                                                                  \
    }                                                                          \
  } while (0)

static void bad_input(void) {
  int32_t rows[3][4] = {{0, 0, 0, 0}, {0, 1, 2, 3}, {1, -4, 5, 6}};
  voxconv_coords_t in = {&rows[0][0], 3, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  voxconv_kmap_desc_t d = geo(VOXCONV_KMAP_EXPANDING, 3, 2);
  d.padded = 2;
  expect_fail("padded = 2", voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "padded = 2");
  d = geo(VOXCONV_KMAP_EXPANDING, 3, 2);
  d.padding[1] = 1;
  expect_fail("padding without padded",
              voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "padding[1] (y) = 1");
  d = geo(VOXCONV_KMAP_STRIDED, 3, 2);
  d.padded = 1;
  d.padding[2] = -1;
  expect_fail("padding -1", voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "padding[2] (z) = -1 outside 0..2");
  d.padding[2] = 3;
  expect_fail("padding d(k-1)+1", voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "padding[2] (z) = 3 outside 0..2");
  d = geo(VOXCONV_KMAP_EXPANDING, 3, 2);
  d.dilation[0] = 2;
  d.padded = 1;
  d.padding[0] = 4; /* d(k-1) = 4: the largest allowed */
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &d, &in, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_kmap_destroy(g_h, m);
  m = NULL;
  d = geo(VOXCONV_KMAP_EXPANDING, 3, 2);
  d.out_shape[0] = -1;
  expect_fail("out_shape -1", voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "out_shape[0] (x) = -1");
  d.out_shape[0] = VOXCONV_COORD_MAX + 2;
  expect_fail("out_shape too large",
              voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "out_shape[0] (x) = 131073");
  d = geo(VOXCONV_KMAP_STRIDED, 3, 2);
  d.out_shape[2] = 8;
  expect_fail("out_shape on STRIDED",
              voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "only EXPANDING and GENERATIVE");
  d = geo(VOXCONV_KMAP_EXPANDING, 3, 2);
  d.mode = (voxconv_kmap_mode_t)5;
  expect_fail("mode 5", voxconv_kmap_build(g_h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "EXPANDING(4)");
  VC_EXPECT(m == NULL, "a failed build left a map");

  /* Unbounded outputs past the coordinate limits: an error naming the
   * cell; with out_shape the same inputs are fine. */
  int32_t edge[2][4] = {{0, 5, 5, 5}, {0, VOXCONV_COORD_MAX, 0, 0}};
  voxconv_coords_t ein = {&edge[0][0], 2, {1, 1, 1}};
  d = geo(VOXCONV_KMAP_EXPANDING, 3, 1);
  d.padded = 1;
  d.padding[0] = d.padding[1] = d.padding[2] = 2;
  expect_fail("EXPANDING past +max", voxconv_kmap_build(g_h, &d, &ein, NULL, &m),
              VOXCONV_STATUS_OUT_OF_RANGE,
              "EXPANDING output of in row 1 (0,131071,0,0) at offset 0: "
              "x=131073 outside ±131071");
  d.out_shape[0] = 100;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &d, &ein, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_kmap_destroy(g_h, m);
  m = NULL;
  int32_t low[1][4] = {{0, VOXCONV_COORD_MIN, 0, 0}};
  voxconv_coords_t lin = {&low[0][0], 1, {1, 1, 1}};
  d = geo(VOXCONV_KMAP_EXPANDING, 3, 1);
  d.padded = 1; /* P = 0: outputs i - j reach COORD_MIN - 2 */
  expect_fail("EXPANDING past -max", voxconv_kmap_build(g_h, &d, &lin, NULL, &m),
              VOXCONV_STATUS_OUT_OF_RANGE, "x=-131072 outside ±131071");
  d = geo(VOXCONV_KMAP_GENERATIVE, 3, 2);
  voxconv_coords_t gin = {&edge[0][0], 2, {2, 2, 2}};
  expect_fail("GENERATIVE past +max", voxconv_kmap_build(g_h, &d, &gin, NULL, &m),
              VOXCONV_STATUS_OUT_OF_RANGE, "GENERATIVE output of in row 1");
  d.out_shape[0] = 64;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &d, &gin, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_kmap_destroy(g_h, m);
  m = NULL;

  /* voxconv_kmap_inverse arguments. */
  voxconv_kmap_t *inv = NULL;
  d = geo(VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
  REQUIRE_OK_VOID(voxconv_kmap_build(g_h, &d, &in, NULL, &m));
  expect_fail("inverse of SUBMANIFOLD", voxconv_kmap_inverse(g_h, m, &inv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "SUBMANIFOLD map");
  VC_EXPECT(inv == NULL, "inverse of SUBMANIFOLD left a map");
  expect_fail("inverse NULL out", voxconv_kmap_inverse(g_h, m, NULL),
              VOXCONV_STATUS_NULL_POINTER, "inv");
  expect_fail("inverse NULL fwd", voxconv_kmap_inverse(g_h, NULL, &inv),
              VOXCONV_STATUS_NULL_POINTER, "fwd");
  VC_EXPECT_STATUS(NULL, voxconv_kmap_inverse(NULL, m, &inv),
                   VOXCONV_STATUS_NULL_POINTER);
  voxconv_kmap_destroy(g_h, m);
  m = NULL;
  d = geo(VOXCONV_KMAP_GENERATIVE, 2, 2);
  voxconv_coords_t in2 = {&rows[0][0], 3, {2, 2, 2}};
  REQUIRE_OK_VOID(voxconv_kmap_build(g_h, &d, &in2, NULL, &m));
  expect_fail("inverse of GENERATIVE", voxconv_kmap_inverse(g_h, m, &inv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "GENERATIVE map");
  voxconv_kmap_destroy(g_h, m);
  /* An empty input set: empty maps, empty inverse. */
  voxconv_coords_t none = {NULL, 0, {1, 1, 1}};
  d = geo(VOXCONV_KMAP_EXPANDING, 3, 2);
  m = NULL;
  REQUIRE_OK_VOID(voxconv_kmap_build(g_h, &d, &none, NULL, &m));
  VC_EXPECT_STATUS(g_h, voxconv_kmap_inverse(g_h, m, &inv),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_kmap_info_t info;
  if (inv) {
    voxconv_kmap_get_info(inv, &info);
    VC_EXPECT(info.n_in == 0 && info.n_out == 0 && info.n_pairs == 0,
              "empty inverse: %lld %lld %lld", (long long)info.n_in,
              (long long)info.n_out, (long long)info.n_pairs);
  }
  voxconv_kmap_destroy(g_h, inv);
  voxconv_kmap_destroy(g_h, m);
}

/* spconv's SparseConv3d(3, stride 2, padding 1) on a real scan: the output
 * count and set against the definition, computed here by sorting every
 * (input, offset) candidate. */
static void real_scan(void) {
  size_t bytes = 0;
  float *pts =
      (float *)vc_read_file(vc_data_path("scans/semantickitti_00_000000.bin"),
                            &bytes);
  if (!pts) {
    printf("real scan: data file missing, skipped\n");
    return;
  }
  int64_t n = 0;
  int32_t *v = vc_voxels_from_points(pts, (int64_t)(bytes / 16), 4, 0.1f, &n);
  free(pts);
  int32_t shape[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; i++)
    for (int a = 0; a < 3; a++)
      if (v[4 * i + 1 + a] + 1 > shape[a])
        shape[a] = v[4 * i + 1 + a] + 1;
  voxconv_kmap_desc_t d = geo(VOXCONV_KMAP_EXPANDING, 3, 2);
  d.padded = 1;
  for (int a = 0; a < 3; a++) {
    d.padding[a] = 1;
    d.out_shape[a] = (shape[a] + 2 - 2 - 1) / 2 + 1;
  }
  /* Reference: all (i, j) candidates with (c + 1 - j) even, in bounds. */
  int32_t *cand = (int32_t *)dr_xmalloc((size_t)n * 27 * 16);
  int64_t nc = 0;
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < 27; j++) {
      const int jj[3] = {j / 9, (j / 3) % 3, j % 3};
      int32_t o[3];
      int ok = 1;
      for (int a = 0; a < 3 && ok; a++) {
        const int32_t t = v[4 * i + 1 + a] + 1 - jj[a];
        ok = t % 2 == 0 && t / 2 >= 0 && t / 2 < d.out_shape[a];
        o[a] = t / 2;
      }
      if (ok) {
        int32_t *r = cand + 4 * nc++;
        r[0] = v[4 * i], r[1] = o[0], r[2] = o[1], r[3] = o[2];
      }
    }
  const int64_t n_ref = dr_sort_unique(cand, nc);
  voxconv_coords_t in = {v, n, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &d, &in, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  if (m) {
    voxconv_kmap_info_t info;
    voxconv_kmap_get_info(m, &info);
    const int32_t *oc = NULL;
    voxconv_kmap_out_coords(m, &oc);
    VC_EXPECT(info.n_out == n_ref &&
                  memcmp(oc, cand, (size_t)n_ref * 16) == 0,
              "semantickitti: %lld outputs, reference %lld",
              (long long)info.n_out, (long long)n_ref);
    printf("semantickitti_00_000000 at 0.1 m: %lld voxels -> SparseConv3d(3, "
           "s2, p1) %lld outputs (%lld pairs)\n",
           (long long)n, (long long)info.n_out, (long long)info.n_pairs);
    voxconv_kmap_destroy(g_h, m);
  }
  free(cand);
  free(v);
}

int main(void) {
  vc_test_init("test_kmap_expanding");
  voxconv_handle_desc_t hd;
  memset(&hd, 0, sizeof hd);
  hd.backend = VOXCONV_BACKEND_CPU;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_h, &hd));
  list_cpu_algos();
  int64_t cases = 60;
  const char *env = getenv("VOXCONV_EXPANDING_CASES");
  if (env && atoll(env) > 0)
    cases = atoll(env);
  static const voxconv_kmap_mode_t modes[] = {
      VOXCONV_KMAP_EXPANDING, VOXCONV_KMAP_EXPANDING, VOXCONV_KMAP_GENERATIVE,
      VOXCONV_KMAP_STRIDED,   VOXCONV_KMAP_TRANSPOSED, VOXCONV_KMAP_SUBMANIFOLD};
  int counts[6] = {0};
  for (int64_t i = 0; i < cases; i++) {
    const int mi = (int)(i % 6);
    xcase_t c;
    while (!make_case(&c, modes[mi], (int)i))
      case_free(&c);
    run_case(&c);
    counts[mi]++;
    case_free(&c);
  }
  printf("%lld random cases (EXPANDING %d, GENERATIVE %d, STRIDED %d, "
         "TRANSPOSED %d, SUBMANIFOLD %d)\n",
         (long long)cases, counts[0] + counts[1], counts[2], counts[3],
         counts[4], counts[5]);
  bad_input();
  real_scan();
  voxconv_destroy(g_h);
  return vc_test_finish();
}
