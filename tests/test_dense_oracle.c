/* The independent oracle: every sparse op against a brute-force DENSE 3D
 * convolution / pooling in fp64, written only from include/voxconv.h.
 *
 * For each random case (grid 10..16 per axis, 1..3 batches, density 5..60%,
 * anisotropic kernels 1..5 and 7, strides 1..3, dilations 1..3,
 * coordinates that may be negative or sit at the coordinate limits):
 *   - the map's output coordinates are compared with the set the header
 *     defines (SUBMANIFOLD: the inputs in order; STRIDED: sorted unique
 *     floor(c/s); TRANSPOSED: the given ones; GENERATIVE: sorted unique
 *     s*i + off, and the dense transposed conv is zero everywhere else);
 *   - the map's pairs are compared element for element with the pair
 *     definitions and the documented order (offset k, then output row);
 *   - conv and depthwise forward / dgrad / wgrad, pooling MAX/AVG/SUM
 *     forward / backward (with and without ties) and unpooling forward /
 *     backward are compared with dense loops over the whole grid (inputs
 *     zero outside the active set, gradients by the adjoint loops), sampled
 *     at the active sites;
 *   - in f64 (1e-12 relative to sum |terms|), and one of f32 (1e-5), f16 or
 *     bf16 (reference from the rounded inputs, + 2 ulps of the output);
 *   - with the default path, the default path in deterministic mode, and
 *     every registered CPU algorithm named explicitly;
 *   - every output is poisoned before the call and must be fully written;
 *     inputs must come back unchanged.
 * A few large cases (24..40 per axis, 17..96 channels) use the pair list
 * from the definitions as the reference instead of a dense grid.
 * VOXCONV_ORACLE_CASES overrides the number of small random cases. */
#include "dense_ref.h"
#include "vc_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static voxconv_handle_t *g_h;
static unsigned long long g_seed;

/* ---- registered CPU algorithms ---------------------------------------- */
typedef struct algo_entry {
  const char *name;
  unsigned passes;
} algo_entry_t;
static algo_entry_t g_algos[64];
static int g_n_algos;

static void list_cpu_algos(void) {
  const int n = voxconv_algo_count();
  for (int i = 0; i < n && g_n_algos < 64; i++) {
    voxconv_algo_info_t info;
    if (voxconv_algo_get_info(i, &info) != VOXCONV_STATUS_SUCCESS)
      continue;
    if (info.backend != VOXCONV_BACKEND_CPU)
      continue;
    g_algos[g_n_algos].name = info.name;
    g_algos[g_n_algos].passes = info.passes;
    g_n_algos++;
  }
  printf("CPU algorithms:");
  for (int i = 0; i < g_n_algos; i++)
    printf(" %s(passes 0x%x)", g_algos[i].name, g_algos[i].passes);
  printf("\n");
}

/* ---- one case --------------------------------------------------------- */
typedef struct ocase {
  int id;
  voxconv_kmap_mode_t mode;
  voxconv_kmap_desc_t desc; /* as given (may hold 0 = 1) */
  int32_t k[3], s[3], d[3]; /* resolved */
  int kvol;
  int32_t off[VOXCONV_KERNEL_VOLUME_MAX][3];
  int transposed; /* pairs are o = s*i + off (TRANSPOSED, GENERATIVE) */
  int32_t *in_c;
  int64_t n_in;
  int32_t in_ts[3];
  int32_t *given_out; /* TRANSPOSED only */
  int64_t n_given;
  int32_t given_ts[3];
  int32_t *exp_out; /* expected output coordinates */
  int64_t n_out;
  dr_box_t inbox, outbox; /* dense boxes; row[] = active row or -1 */
  int64_t *exp_pair_off;
  int32_t *exp_in_rows, *exp_out_rows;
  int64_t exp_n_pairs;
  voxconv_kmap_t *kmap;
  /* Large cases: the reference walks the pair list derived above from the
   * definitions (validated against the dense grid on the small cases)
   * instead of a dense grid, whose cost would be prohibitive; arrays are
   * then indexed by row instead of by dense cell. */
  int by_rows;
  int64_t *ident_in, *ident_out;
  char tag[256];
} ocase_t;

static void case_free(ocase_t *c) {
  if (c->kmap)
    voxconv_kmap_destroy(g_h, c->kmap);
  free(c->in_c);
  free(c->given_out);
  free(c->exp_out);
  dr_box_free(&c->inbox);
  dr_box_free(&c->outbox);
  free(c->exp_pair_off);
  free(c->exp_in_rows);
  free(c->exp_out_rows);
  free(c->ident_in);
  free(c->ident_out);
  memset(c, 0, sizeof *c);
}

/* The dense relation over the boxes: every (input cell, output cell, k)
 * linked by the mode's pair rule, active or not. Direct modes walk the
 * output grid (in = s*o + off), transposed ones the input grid
 * (o = s*i + off) — the loops of a dense conv3d / conv_transpose3d. */
typedef void (*triple_fn)(void *ctx, int64_t icell, int64_t ocell, int k);

static void dense_relation(const ocase_t *c, triple_fn fn, void *ctx) {
  if (c->by_rows) {
    for (int k = 0; k < c->kvol; k++)
      for (int64_t p = c->exp_pair_off[k]; p < c->exp_pair_off[k + 1]; p++)
        fn(ctx, c->exp_in_rows[p], c->exp_out_rows[p], k);
    return;
  }
  if (!c->transposed) {
    const int64_t n = dr_box_cells(&c->outbox);
    for (int64_t oc = 0; oc < n; oc++) {
      int32_t o[4];
      dr_box_cell_coord(&c->outbox, oc, o);
      for (int k = 0; k < c->kvol; k++) {
        const int64_t ic = dr_box_cell(
            &c->inbox, o[0], c->s[0] * o[1] + c->off[k][0],
            c->s[1] * o[2] + c->off[k][1], c->s[2] * o[3] + c->off[k][2]);
        if (ic >= 0)
          fn(ctx, ic, oc, k);
      }
    }
  } else {
    const int64_t n = dr_box_cells(&c->inbox);
    for (int64_t ic = 0; ic < n; ic++) {
      int32_t i[4];
      dr_box_cell_coord(&c->inbox, ic, i);
      for (int k = 0; k < c->kvol; k++) {
        const int64_t oc = dr_box_cell(
            &c->outbox, i[0], c->s[0] * i[1] + c->off[k][0],
            c->s[1] * i[2] + c->off[k][1], c->s[2] * i[3] + c->off[k][2]);
        if (oc >= 0)
          fn(ctx, ic, oc, k);
      }
    }
  }
}

static int64_t count_relation_upper(const ocase_t *c) {
  return (c->transposed ? dr_box_cells(&c->inbox) : dr_box_cells(&c->outbox)) *
         c->kvol;
}

/* ---- geometry of a case ----------------------------------------------- */
static int32_t pick_kernel(void) {
  static const int32_t ks[] = {1, 2, 3, 3, 3, 5, 2, 4, 1, 3, 7};
  return ks[vc_rand_range(0, 10)];
}

static void make_tag(ocase_t *c) {
  snprintf(c->tag, sizeof c->tag,
           "[seed %llu case %d %s k=%dx%dx%d s=%dx%dx%d d=%dx%dx%d "
           "n_in=%lld n_out=%lld]",
           g_seed, c->id, dr_mode_str(c->mode), c->k[0], c->k[1], c->k[2],
           c->s[0], c->s[1], c->s[2], c->d[0], c->d[1], c->d[2],
           (long long)c->n_in, (long long)c->n_out);
}

/* Expected outputs and pairs from the header's definitions (no dense
 * grid): the map must match them element for element. */
static void expected_map(ocase_t *c) {
  switch (c->mode) {
  case VOXCONV_KMAP_SUBMANIFOLD:
    c->n_out = c->n_in;
    c->exp_out = (int32_t *)dr_xmalloc((size_t)c->n_in * 16);
    memcpy(c->exp_out, c->in_c, (size_t)c->n_in * 16);
    break;
  case VOXCONV_KMAP_STRIDED:
    c->exp_out = (int32_t *)dr_xmalloc((size_t)c->n_in * 16);
    for (int64_t i = 0; i < c->n_in; i++) {
      c->exp_out[4 * i] = c->in_c[4 * i];
      for (int a = 0; a < 3; a++)
        c->exp_out[4 * i + 1 + a] = dr_floordiv(c->in_c[4 * i + 1 + a], c->s[a]);
    }
    c->n_out = dr_sort_unique(c->exp_out, c->n_in);
    break;
  case VOXCONV_KMAP_TRANSPOSED:
    c->n_out = c->n_given;
    c->exp_out = (int32_t *)dr_xmalloc((size_t)c->n_given * 16 + 16);
    memcpy(c->exp_out, c->given_out, (size_t)c->n_given * 16);
    break;
  case VOXCONV_KMAP_GENERATIVE: {
    const int64_t m = c->n_in * c->kvol;
    c->exp_out = (int32_t *)dr_xmalloc((size_t)m * 16);
    for (int64_t i = 0; i < c->n_in; i++)
      for (int k = 0; k < c->kvol; k++) {
        int32_t *r = c->exp_out + 4 * (i * c->kvol + k);
        r[0] = c->in_c[4 * i];
        for (int a = 0; a < 3; a++)
          r[1 + a] = c->s[a] * c->in_c[4 * i + 1 + a] + c->off[k][a];
      }
    c->n_out = dr_sort_unique(c->exp_out, m);
    break;
  }
  default: /* EXPANDING and padded maps: tests/test_kmap_expanding.c */
    break;
  }
  /* Dense boxes. Inputs: their bounding box. Outputs: for direct modes
   * the bounding box of the outputs; for transposed modes everything the
   * input box reaches (plus the given outputs), so the dense transposed
   * conv is complete there. */
  int32_t lo[3], hi[3];
  int nb;
  dr_bbox(c->in_c, c->n_in, lo, hi, &nb);
  c->inbox = dr_box_make(nb, lo, hi, 0);
  dr_box_index(&c->inbox, c->in_c, c->n_in);
  int32_t olo[3], ohi[3];
  int onb = nb;
  if (!c->transposed) {
    dr_bbox(c->exp_out, c->n_out, olo, ohi, &onb);
  } else {
    for (int a = 0; a < 3; a++) {
      int32_t mn = INT32_MAX, mx = INT32_MIN;
      for (int k = 0; k < c->kvol; k++) {
        mn = c->off[k][a] < mn ? c->off[k][a] : mn;
        mx = c->off[k][a] > mx ? c->off[k][a] : mx;
      }
      olo[a] = c->s[a] * lo[a] + mn;
      ohi[a] = c->s[a] * hi[a] + mx;
    }
    if (c->mode == VOXCONV_KMAP_TRANSPOSED && c->n_given > 0) {
      int32_t glo[3], ghi[3];
      int gnb;
      dr_bbox(c->given_out, c->n_given, glo, ghi, &gnb);
      for (int a = 0; a < 3; a++) {
        olo[a] = glo[a] < olo[a] ? glo[a] : olo[a];
        ohi[a] = ghi[a] > ohi[a] ? ghi[a] : ohi[a];
      }
      onb = gnb > onb ? gnb : onb;
    }
  }
  c->outbox = dr_box_make(onb, olo, ohi, 0);
  dr_box_index(&c->outbox, c->exp_out, c->n_out);

  /* Pairs: per offset k, by ascending output row. */
  c->exp_pair_off = (int64_t *)dr_xcalloc((size_t)c->kvol + 1, sizeof(int64_t));
  const int64_t cap = c->n_out * c->kvol;
  c->exp_in_rows = (int32_t *)dr_xmalloc((size_t)cap * 4 + 4);
  c->exp_out_rows = (int32_t *)dr_xmalloc((size_t)cap * 4 + 4);
  int64_t np = 0;
  for (int k = 0; k < c->kvol; k++) {
    c->exp_pair_off[k] = np;
    for (int64_t o = 0; o < c->n_out; o++) {
      const int32_t *oc = c->exp_out + 4 * o;
      int32_t p[3];
      int ok = 1;
      for (int a = 0; a < 3; a++) {
        if (!c->transposed) {
          p[a] = c->s[a] * oc[1 + a] + c->off[k][a];
        } else {
          const int32_t q = oc[1 + a] - c->off[k][a];
          p[a] = dr_floordiv(q, c->s[a]);
          if (p[a] * c->s[a] != q)
            ok = 0;
        }
      }
      if (!ok)
        continue;
      const int64_t cell = dr_box_cell(&c->inbox, oc[0], p[0], p[1], p[2]);
      if (cell < 0 || c->inbox.row[cell] < 0)
        continue;
      c->exp_in_rows[np] = (int32_t)c->inbox.row[cell];
      c->exp_out_rows[np] = (int32_t)o;
      np++;
    }
  }
  c->exp_pair_off[c->kvol] = np;
  c->exp_n_pairs = np;
}

/* Random geometry; returns 0 when the dense work would be too large (the
 * caller draws again). */
static int make_case(ocase_t *c, int id, voxconv_kmap_mode_t mode,
                     int large) {
  memset(c, 0, sizeof *c);
  c->id = id;
  c->mode = mode;
  c->transposed =
      mode == VOXCONV_KMAP_TRANSPOSED || mode == VOXCONV_KMAP_GENERATIVE;
  const int iso = vc_rand_uniform() < 0.5;
  const int32_t k0 = pick_kernel();
  const int32_t s0 = (int32_t)vc_rand_range(1, 3);
  const int32_t d0 = vc_rand_uniform() < 0.1 ? 3 : (int32_t)vc_rand_range(1, 2);
  c->desc.mode = mode;
  for (int a = 0; a < 3; a++) {
    c->k[a] = iso ? k0 : pick_kernel();
    c->s[a] = iso ? s0 : (int32_t)vc_rand_range(1, 3);
    c->d[a] = iso ? d0 : (int32_t)vc_rand_range(1, 2);
    if (mode == VOXCONV_KMAP_SUBMANIFOLD)
      c->s[a] = 1;
    if (mode == VOXCONV_KMAP_STRIDED && a == 0 && iso && c->s[0] == 1)
      c->s[0] = c->s[1] = c->s[2] = 2; /* mostly real downsampling */
    c->desc.kernel_size[a] = c->k[a];
    /* 0 means 1: exercise that spelling now and then. */
    c->desc.stride[a] = (c->s[a] == 1 && vc_rand_uniform() < 0.3) ? 0 : c->s[a];
    c->desc.dilation[a] =
        (c->d[a] == 1 && vc_rand_uniform() < 0.3) ? 0 : c->d[a];
  }
  c->kvol = dr_kernel_offsets(&c->desc, c->off);

  const int B = (int)vc_rand_range(1, 3);
  int32_t dim[3], lo[3];
  const double density = large ? 0.03 + 0.12 * vc_rand_uniform()
                               : 0.05 + 0.55 * vc_rand_uniform();
  const double place = vc_rand_uniform();
  for (int a = 0; a < 3; a++) {
    dim[a] = large ? (int32_t)vc_rand_range(24, 40)
                   : (int32_t)vc_rand_range(10, 16);
    lo[a] = (int32_t)vc_rand_range(-20, 8);
  }
  /* Now and then sit against a coordinate limit: neighbours beyond it
   * simply do not exist (not for GENERATIVE, whose outputs would leave the
   * range). */
  if (mode != VOXCONV_KMAP_GENERATIVE && place < 0.1)
    lo[0] = VOXCONV_COORD_MAX - dim[0] + 1;
  else if (mode != VOXCONV_KMAP_GENERATIVE && place < 0.2)
    lo[2] = VOXCONV_COORD_MIN;

  const int32_t base = (int32_t)vc_rand_range(1, 2);
  if (mode == VOXCONV_KMAP_TRANSPOSED) {
    /* Coarse inputs = the downsampled fine level; outputs = the fine level
     * (the U-Net decoder), or sometimes an unrelated set of sites. */
    int64_t nf;
    int32_t *fine = dr_random_coords(B, lo, dim, density, &nf);
    c->in_c = dr_coarse_coords(fine, nf, c->s, &c->n_in);
    if (vc_rand_uniform() < 0.25) {
      free(fine);
      for (int a = 0; a < 3; a++) /* shifted, staying inside the limits */
        lo[a] += lo[a] - 2 >= VOXCONV_COORD_MIN ? -2 : 2;
      fine = dr_random_coords(B, lo, dim, density, &nf);
    }
    c->given_out = fine;
    c->n_given = nf;
    for (int a = 0; a < 3; a++) {
      c->given_ts[a] = base;
      c->in_ts[a] = base * c->s[a];
    }
  } else {
    c->in_c = dr_random_coords(B, lo, dim, density, &c->n_in);
    for (int a = 0; a < 3; a++)
      c->in_ts[a] = mode == VOXCONV_KMAP_GENERATIVE ? base * c->s[a] : base;
    if (base == 1 && mode != VOXCONV_KMAP_GENERATIVE &&
        vc_rand_uniform() < 0.5)
      c->in_ts[0] = c->in_ts[1] = c->in_ts[2] = 0; /* 0 means 1 */
  }
  /* Keep the dense loops affordable (also under sanitizers). */
  expected_map(c);
  if (!large && (count_relation_upper(c) > 1500000 ||
                 dr_box_cells(&c->outbox) > 400000)) {
    case_free(c);
    return 0;
  }
  if (large) {
    c->by_rows = 1;
    c->ident_in = (int64_t *)dr_xmalloc((size_t)c->n_in * 8 + 8);
    c->ident_out = (int64_t *)dr_xmalloc((size_t)c->n_out * 8 + 8);
    for (int64_t i = 0; i < c->n_in; i++)
      c->ident_in[i] = i;
    for (int64_t i = 0; i < c->n_out; i++)
      c->ident_out[i] = i;
  }
  make_tag(c);
  return 1;
}

/* ---- map checks ------------------------------------------------------- */
static int build_and_check_map(ocase_t *c) {
  voxconv_coords_t in = {c->in_c, c->n_in, {c->in_ts[0], c->in_ts[1], c->in_ts[2]}};
  voxconv_coords_t out = {c->given_out, c->n_given,
                          {c->given_ts[0], c->given_ts[1], c->given_ts[2]}};
  const voxconv_status_t st = voxconv_kmap_build(
      g_h, &c->desc, &in, c->mode == VOXCONV_KMAP_TRANSPOSED ? &out : NULL,
      &c->kmap);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s kmap_build: %s: %s", c->tag,
            voxconv_status_string(st), voxconv_get_last_error(g_h));
  if (st != VOXCONV_STATUS_SUCCESS) {
    c->kmap = NULL;
    return 0;
  }
  voxconv_kmap_info_t info;
  memset(&info, 0, sizeof info);
  VC_EXPECT_STATUS(g_h, voxconv_kmap_get_info(c->kmap, &info),
                   VOXCONV_STATUS_SUCCESS);
  int geom_ok = info.desc.mode == c->mode && info.kernel_volume == c->kvol &&
                info.n_in == c->n_in && info.n_out == c->n_out &&
                info.n_pairs == c->exp_n_pairs;
  for (int a = 0; a < 3; a++)
    geom_ok = geom_ok && info.desc.kernel_size[a] == c->k[a] &&
              info.desc.stride[a] == c->s[a] &&
              info.desc.dilation[a] == c->d[a];
  VC_EXPECT(geom_ok,
            "%s info: mode %d kvol %d n_in %lld n_out %lld (want %lld) "
            "n_pairs %lld (want %lld) k=%dx%dx%d s=%dx%dx%d d=%dx%dx%d",
            c->tag, (int)info.desc.mode, info.kernel_volume,
            (long long)info.n_in, (long long)info.n_out, (long long)c->n_out,
            (long long)info.n_pairs, (long long)c->exp_n_pairs,
            info.desc.kernel_size[0], info.desc.kernel_size[1],
            info.desc.kernel_size[2], info.desc.stride[0], info.desc.stride[1],
            info.desc.stride[2], info.desc.dilation[0], info.desc.dilation[1],
            info.desc.dilation[2]);
  /* Tensor strides: 0 reads as 1; STRIDED multiplies by s, TRANSPOSED
   * (and GENERATIVE, its pair rule) divides. */
  int ts_ok = 1;
  for (int a = 0; a < 3; a++) {
    const int32_t its = c->in_ts[a] ? c->in_ts[a] : 1;
    int32_t ots = its;
    if (c->mode == VOXCONV_KMAP_STRIDED)
      ots = its * c->s[a];
    else if (c->transposed)
      ots = its / c->s[a];
    ts_ok = ts_ok && info.in_tensor_stride[a] == its &&
            info.out_tensor_stride[a] == ots;
  }
  VC_EXPECT(ts_ok, "%s tensor strides in %d,%d,%d out %d,%d,%d", c->tag,
            info.in_tensor_stride[0], info.in_tensor_stride[1],
            info.in_tensor_stride[2], info.out_tensor_stride[0],
            info.out_tensor_stride[1], info.out_tensor_stride[2]);
  if (!geom_ok)
    return 0;

  /* Output coordinates: exact set and order. */
  const int32_t *oc = NULL;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_out_coords(c->kmap, &oc),
                   VOXCONV_STATUS_SUCCESS);
  if (c->n_out > 0) {
    int64_t bad = -1;
    for (int64_t i = 0; oc && i < c->n_out && bad < 0; i++)
      if (memcmp(oc + 4 * i, c->exp_out + 4 * i, 16) != 0)
        bad = i;
    VC_EXPECT(oc && bad < 0,
              "%s out coords row %lld: got (%d,%d,%d,%d) want (%d,%d,%d,%d)",
              c->tag, (long long)bad, oc && bad >= 0 ? oc[4 * bad] : 0,
              oc && bad >= 0 ? oc[4 * bad + 1] : 0,
              oc && bad >= 0 ? oc[4 * bad + 2] : 0,
              oc && bad >= 0 ? oc[4 * bad + 3] : 0,
              bad >= 0 ? c->exp_out[4 * bad] : 0,
              bad >= 0 ? c->exp_out[4 * bad + 1] : 0,
              bad >= 0 ? c->exp_out[4 * bad + 2] : 0,
              bad >= 0 ? c->exp_out[4 * bad + 3] : 0);
    if (!oc || bad >= 0)
      return 0;
  }

  /* Pairs: CSR offsets and both row arrays, element for element. */
  int64_t *po = (int64_t *)dr_xmalloc(((size_t)c->kvol + 1) * 8);
  int32_t *pin = (int32_t *)dr_xmalloc((size_t)c->exp_n_pairs * 4 + 4);
  int32_t *pout = (int32_t *)dr_xmalloc((size_t)c->exp_n_pairs * 4 + 4);
  VC_EXPECT_STATUS(g_h, voxconv_kmap_get_pairs(g_h, c->kmap, po, pin, pout),
                   VOXCONV_STATUS_SUCCESS);
  int ok = 1;
  for (int k = 0; k <= c->kvol && ok; k++)
    if (po[k] != c->exp_pair_off[k]) {
      VC_EXPECT(0, "%s pair offsets[%d] = %lld, want %lld", c->tag, k,
                (long long)po[k], (long long)c->exp_pair_off[k]);
      ok = 0;
    }
  for (int64_t p = 0; p < c->exp_n_pairs && ok; p++)
    if (pin[p] != c->exp_in_rows[p] || pout[p] != c->exp_out_rows[p]) {
      VC_EXPECT(0, "%s pair %lld: got (in %d, out %d) want (in %d, out %d)",
                c->tag, (long long)p, pin[p], pout[p], c->exp_in_rows[p],
                c->exp_out_rows[p]);
      ok = 0;
    }
  if (ok)
    VC_EXPECT(1, "pairs");
  free(po);
  free(pin);
  free(pout);
  return ok;
}

/* ---- comparison ------------------------------------------------------- */
/* Largest err / tolerance seen per dtype: how much margin the tolerances
 * leave (printed at the end). */
static double g_worst_ratio[4];

/* Every element written, finite and within tolerance of the reference. */
static void check_values(const char *tag, const char *what, const char *algo,
                         voxconv_dtype_t dt, const void *got,
                         const double *ref, const double *absref, int64_t n,
                         int64_t row_len, double rtol) {
  int64_t n_poison = 0, n_bad = 0, worst = -1;
  double worst_ratio = 0;
  for (int64_t i = 0; i < n; i++) {
    if (vc_is_poison(got, dt, i)) {
      if (n_poison++ == 0)
        fprintf(stderr, "  %s %s %s [%s]: element %lld (row %lld) not written\n",
                tag, what, dr_dtype_str(dt), algo, (long long)i,
                (long long)(i / row_len));
      continue;
    }
    const double g = dr_load(got, dt, i);
    /* rtol < 0: the op is a selection and must be exact. */
    const double tol = rtol < 0 ? 0.0 : dr_tolerance(ref[i], absref[i], dt, rtol);
    const double err = fabs(g - ref[i]);
    if (tol > 1e-300 && err / tol > g_worst_ratio[dt])
      g_worst_ratio[dt] = err / tol;
    if (!(err <= tol)) {
      n_bad++;
      const double ratio = isfinite(err) ? err / tol : INFINITY;
      if (worst < 0 || ratio > worst_ratio) {
        worst_ratio = ratio;
        worst = i;
      }
    }
  }
  VC_EXPECT(n_poison == 0, "%s %s %s [%s]: %lld of %lld elements not written",
            tag, what, dr_dtype_str(dt), algo, (long long)n_poison,
            (long long)n);
  VC_EXPECT(n_bad == 0,
            "%s %s %s [%s]: %lld of %lld elements wrong; worst element %lld "
            "(row %lld col %lld): got %.17g want %.17g (sum|terms| %.3g, "
            "err/tol %.3g)",
            tag, what, dr_dtype_str(dt), algo, (long long)n_bad, (long long)n,
            (long long)worst, (long long)(worst >= 0 ? worst / row_len : -1),
            (long long)(worst >= 0 ? worst % row_len : -1),
            worst >= 0 ? dr_load(got, dt, worst) : 0.0,
            worst >= 0 ? ref[worst] : 0.0, worst >= 0 ? absref[worst] : 0.0,
            worst_ratio);
}

static void check_unchanged(const char *tag, const char *what,
                            const void *now, const void *before,
                            size_t bytes) {
  VC_EXPECT(memcmp(now, before, bytes) == 0, "%s: op modified its input %s",
            tag, what);
}

static void *dup_bytes(const void *p, size_t n) {
  void *q = dr_xmalloc(n);
  memcpy(q, p, n);
  return q;
}

/* ---- regular conv ----------------------------------------------------- */
typedef struct conv_ctx {
  int64_t cin, cout;
  const int64_t *inrow;  /* active input row per input cell (-1: none) */
  const double *xd;      /* [in cells][cin] */
  const double *W;       /* [kvol][cin][cout] */
  const double *dyd;     /* [out cells][cout], zero off the output sites */
  double *yd, *yabs;     /* [out cells][cout] */
  double *dxd, *dxabs;   /* [in cells][cin] */
  double *dW, *dWabs;    /* [kvol][cin][cout] */
  unsigned char *reach;  /* [out cells]: an active input feeds it */
} conv_ctx_t;

static void conv_fwd_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  conv_ctx_t *t = (conv_ctx_t *)vctx;
  if (t->inrow[ic] >= 0)
    t->reach[oc] = 1;
  const double *x = t->xd + ic * t->cin;
  const double *w = t->W + (int64_t)k * t->cin * t->cout;
  double *y = t->yd + oc * t->cout, *ya = t->yabs + oc * t->cout;
  for (int64_t ci = 0; ci < t->cin; ci++)
    for (int64_t co = 0; co < t->cout; co++) {
      const double v = x[ci] * w[ci * t->cout + co];
      y[co] += v;
      ya[co] += fabs(v);
    }
}
static void conv_dgrad_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  conv_ctx_t *t = (conv_ctx_t *)vctx;
  const double *dy = t->dyd + oc * t->cout;
  const double *w = t->W + (int64_t)k * t->cin * t->cout;
  double *dx = t->dxd + ic * t->cin, *da = t->dxabs + ic * t->cin;
  for (int64_t ci = 0; ci < t->cin; ci++)
    for (int64_t co = 0; co < t->cout; co++) {
      const double v = w[ci * t->cout + co] * dy[co];
      dx[ci] += v;
      da[ci] += fabs(v);
    }
}
static void conv_wgrad_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  conv_ctx_t *t = (conv_ctx_t *)vctx;
  const double *x = t->xd + ic * t->cin;
  const double *dy = t->dyd + oc * t->cout;
  double *dw = t->dW + (int64_t)k * t->cin * t->cout;
  double *da = t->dWabs + (int64_t)k * t->cin * t->cout;
  for (int64_t ci = 0; ci < t->cin; ci++)
    for (int64_t co = 0; co < t->cout; co++) {
      const double v = x[ci] * dy[co];
      dw[ci * t->cout + co] += v;
      da[ci * t->cout + co] += fabs(v);
    }
}

/* Scatters rows of a [n][C] f64 array into a dense box by coordinates. */
static void scatter_rows(const dr_box_t *box, const int32_t *coords, int64_t n,
                         const double *rows, int64_t C, double *dense) {
  for (int64_t i = 0; i < n; i++) {
    const int32_t *c4 = coords + 4 * i;
    const int64_t cell = dr_box_cell(box, c4[0], c4[1], c4[2], c4[3]);
    if (cell >= 0)
      memcpy(dense + cell * C, rows + i * C, (size_t)C * sizeof(double));
  }
}
/* Samples a dense box at coordinates (zero outside the box). */
static void gather_rows(const dr_box_t *box, const int32_t *coords, int64_t n,
                        const double *dense, int64_t C, double *rows) {
  for (int64_t i = 0; i < n; i++) {
    const int32_t *c4 = coords + 4 * i;
    const int64_t cell = dr_box_cell(box, c4[0], c4[1], c4[2], c4[3]);
    for (int64_t ch = 0; ch < C; ch++)
      rows[i * C + ch] = cell >= 0 ? dense[cell * C + ch] : 0.0;
  }
}

/* The reference's index spaces: dense cells, or rows for by_rows cases. */
static int64_t ref_in_cells(const ocase_t *c) {
  return c->by_rows ? c->n_in : dr_box_cells(&c->inbox);
}
static int64_t ref_out_cells(const ocase_t *c) {
  return c->by_rows ? c->n_out : dr_box_cells(&c->outbox);
}
static const int64_t *ref_inrow(const ocase_t *c) {
  return c->by_rows ? c->ident_in : c->inbox.row;
}
static const int64_t *ref_outrow(const ocase_t *c) {
  return c->by_rows ? c->ident_out : c->outbox.row;
}
/* Reference index of output row o (-1: outside the dense box). */
static int64_t out_cell(const ocase_t *c, int64_t o) {
  if (c->by_rows)
    return o;
  const int32_t *c4 = c->exp_out + 4 * o;
  return dr_box_cell(&c->outbox, c4[0], c4[1], c4[2], c4[3]);
}
static void scatter_in(const ocase_t *c, const double *rows, int64_t C,
                       double *ref) {
  if (c->by_rows)
    memcpy(ref, rows, (size_t)(c->n_in * C) * sizeof(double));
  else
    scatter_rows(&c->inbox, c->in_c, c->n_in, rows, C, ref);
}
static void scatter_out(const ocase_t *c, const double *rows, int64_t C,
                        double *ref) {
  if (c->by_rows)
    memcpy(ref, rows, (size_t)(c->n_out * C) * sizeof(double));
  else
    scatter_rows(&c->outbox, c->exp_out, c->n_out, rows, C, ref);
}
static void gather_in(const ocase_t *c, const double *ref, int64_t C,
                      double *rows) {
  if (c->by_rows)
    memcpy(rows, ref, (size_t)(c->n_in * C) * sizeof(double));
  else
    gather_rows(&c->inbox, c->in_c, c->n_in, ref, C, rows);
}
static void gather_out(const ocase_t *c, const double *ref, int64_t C,
                       double *rows) {
  if (c->by_rows)
    memcpy(rows, ref, (size_t)(c->n_out * C) * sizeof(double));
  else
    gather_rows(&c->outbox, c->exp_out, c->n_out, ref, C, rows);
}

/* Variant names: NULL = the default path (no options), DET_VARIANT = the
 * default path with opt->deterministic = TRUE, else an algorithm name. */
static const char DET_VARIANT[] = "(deterministic)";

static voxconv_conv_options_t algo_opts(const char *name) {
  voxconv_conv_options_t o;
  memset(&o, 0, sizeof o);
  if (name == DET_VARIANT) {
    o.deterministic = VOXCONV_TRUE;
    return o;
  }
  o.fwd_algo = name;
  o.bwd_algo = name;
  o.dgrad_algo = name;
  o.wgrad_algo = name;
  return o;
}

static int g_n_conv_runs, g_n_unsupported;

/* Accounts for one run through the default path (name NULL) or a named
 * algorithm; returns 1 if it ran. A named algorithm may decline
 * (UNSUPPORTED); the default path must always run on the CPU. */
static int ran_variant(const ocase_t *c, voxconv_dtype_t dt, const char *name,
                       voxconv_status_t st, const char *what) {
  const int ran = st == VOXCONV_STATUS_SUCCESS;
  if (st == VOXCONV_STATUS_UNSUPPORTED && name != NULL && name != DET_VARIANT)
    g_n_unsupported++;
  else
    VC_EXPECT(ran, "%s %s %s [%s]: %s: %s", c->tag, what, dr_dtype_str(dt),
              name ? name : "default", voxconv_status_string(st),
              voxconv_get_last_error(g_h));
  g_n_conv_runs += ran;
  return ran;
}
#define RUN_VARIANT(name, call_expr, what)                                     \
  ran_variant(c, dt, (name), (call_expr), (what))

static int variant_count(voxconv_pass_t pass) {
  int n = 2;
  for (int i = 0; i < g_n_algos; i++)
    n += (g_algos[i].passes >> pass) & 1u;
  return n;
}
/* Variant v of a pass: 0 = default, 1 = deterministic default, then each
 * CPU algorithm that implements the pass, by name. */
static const char *variant_name(voxconv_pass_t pass, int v) {
  if (v == 0)
    return NULL;
  if (v == 1)
    return DET_VARIANT;
  v--;
  for (int i = 0; i < g_n_algos; i++)
    if ((g_algos[i].passes >> pass) & 1u)
      if (--v == 0)
        return g_algos[i].name;
  return NULL;
}

static void run_conv(ocase_t *c, voxconv_dtype_t dt, int64_t cin,
                     int64_t cout) {
  const size_t es = dr_dtype_bytes(dt);
  const int64_t nin = c->n_in, nout = c->n_out, kv = c->kvol;
  void *x = dr_xmalloc((size_t)(nin * cin) * es);
  void *W = dr_xmalloc((size_t)(kv * cin * cout) * es);
  void *dy = dr_xmalloc((size_t)(nout * cout) * es);
  double *xr = (double *)dr_xmalloc((size_t)(nin * cin) * 8 + 8);
  double *Wr = (double *)dr_xmalloc((size_t)(kv * cin * cout) * 8);
  double *dyr = (double *)dr_xmalloc((size_t)(nout * cout) * 8 + 8);
  dr_fill_normal(x, dt, nin * cin, xr);
  dr_fill_normal(W, dt, kv * cin * cout, Wr);
  dr_fill_normal(dy, dt, nout * cout, dyr);
  void *x0 = dup_bytes(x, (size_t)(nin * cin) * es);
  void *W0 = dup_bytes(W, (size_t)(kv * cin * cout) * es);
  void *dy0 = dup_bytes(dy, (size_t)(nout * cout) * es);

  /* Dense reference. */
  const int64_t icells = ref_in_cells(c), ocells = ref_out_cells(c);
  conv_ctx_t t;
  t.cin = cin;
  t.cout = cout;
  t.inrow = ref_inrow(c);
  double *xd = (double *)dr_xcalloc((size_t)(icells * cin), 8);
  double *dyd = (double *)dr_xcalloc((size_t)(ocells * cout), 8);
  scatter_in(c, xr, cin, xd);
  scatter_out(c, dyr, cout, dyd);
  t.xd = xd;
  t.W = Wr;
  t.dyd = dyd;
  t.yd = (double *)dr_xcalloc((size_t)(ocells * cout), 8);
  t.yabs = (double *)dr_xcalloc((size_t)(ocells * cout), 8);
  t.dxd = (double *)dr_xcalloc((size_t)(icells * cin), 8);
  t.dxabs = (double *)dr_xcalloc((size_t)(icells * cin), 8);
  t.dW = (double *)dr_xcalloc((size_t)(kv * cin * cout), 8);
  t.dWabs = (double *)dr_xcalloc((size_t)(kv * cin * cout), 8);
  t.reach = (unsigned char *)dr_xcalloc((size_t)ocells, 1);
  dense_relation(c, conv_fwd_fn, &t);
  dense_relation(c, conv_dgrad_fn, &t);
  dense_relation(c, conv_wgrad_fn, &t);

  /* GENERATIVE: the output set is exactly the reachable cells, and the
   * dense transposed conv is zero everywhere else. */
  if (c->mode == VOXCONV_KMAP_GENERATIVE && !c->by_rows) {
    int64_t bad = -1;
    for (int64_t oc = 0; oc < ocells && bad < 0; oc++) {
      const int is_out = c->outbox.row[oc] >= 0;
      if (is_out != (int)t.reach[oc])
        bad = oc;
      if (!is_out)
        for (int64_t co = 0; co < cout; co++)
          if (t.yd[oc * cout + co] != 0.0 || t.yabs[oc * cout + co] != 0.0)
            bad = oc;
    }
    int32_t b4[4] = {0, 0, 0, 0};
    if (bad >= 0)
      dr_box_cell_coord(&c->outbox, bad, b4);
    VC_EXPECT(bad < 0,
              "%s generative: dense cell (%d,%d,%d,%d) reachable=%d but in "
              "output set=%d",
              c->tag, b4[0], b4[1], b4[2], b4[3],
              bad >= 0 ? t.reach[bad] : 0,
              bad >= 0 ? (int)(c->outbox.row[bad] >= 0) : 0);
  }

  double *yref = (double *)dr_xmalloc((size_t)(nout * cout) * 8 + 8);
  double *yabs = (double *)dr_xmalloc((size_t)(nout * cout) * 8 + 8);
  double *dxref = (double *)dr_xmalloc((size_t)(nin * cin) * 8 + 8);
  double *dxabs = (double *)dr_xmalloc((size_t)(nin * cin) * 8 + 8);
  gather_out(c, t.yd, cout, yref);
  gather_out(c, t.yabs, cout, yabs);
  gather_in(c, t.dxd, cin, dxref);
  gather_in(c, t.dxabs, cin, dxabs);

  void *y = dr_xmalloc((size_t)(nout * cout) * es + es);
  void *dx = dr_xmalloc((size_t)(nin * cin) * es + es);
  void *dW = dr_xmalloc((size_t)(kv * cin * cout) * es);
  const voxconv_feats_t fx = {x, nin, cin, dt}, fy = {y, nout, cout, dt};
  const voxconv_feats_t fdy = {dy, nout, cout, dt}, fdx = {dx, nin, cin, dt};
  const voxconv_weights_t fw = {W, kv, cin, cout, dt};
  const voxconv_weights_t fdw = {dW, kv, cin, cout, dt};
  const double rtol = dr_rtol_accum(dt);
  char tag[320];
  snprintf(tag, sizeof tag, "%s conv cin=%lld cout=%lld", c->tag,
           (long long)cin, (long long)cout);

  for (int v = 0; v < variant_count(VOXCONV_PASS_CONV_FWD); v++) {
    const char *name = variant_name(VOXCONV_PASS_CONV_FWD, v);
    const voxconv_conv_options_t o = algo_opts(name);
    vc_poison(y, dt, nout * cout);
    if (RUN_VARIANT(name, voxconv_conv_forward(g_h, c->kmap, &fx, &fw, &fy,
                                               name ? &o : NULL),
                    "conv_forward"))
      check_values(tag, "forward y", name ? name : "default", dt, y, yref,
                   yabs, nout * cout, cout, rtol);
  }
  for (int v = 0; v < variant_count(VOXCONV_PASS_CONV_DGRAD); v++) {
    const char *name = variant_name(VOXCONV_PASS_CONV_DGRAD, v);
    const voxconv_conv_options_t o = algo_opts(name);
    vc_poison(dx, dt, nin * cin);
    if (RUN_VARIANT(name, voxconv_conv_dgrad(g_h, c->kmap, &fdy, &fw, &fdx,
                                             name ? &o : NULL),
                    "conv_dgrad"))
      check_values(tag, "dgrad dx", name ? name : "default", dt, dx, dxref,
                   dxabs, nin * cin, cin, rtol);
  }
  for (int v = 0; v < variant_count(VOXCONV_PASS_CONV_WGRAD); v++) {
    const char *name = variant_name(VOXCONV_PASS_CONV_WGRAD, v);
    const voxconv_conv_options_t o = algo_opts(name);
    vc_poison(dW, dt, kv * cin * cout);
    /* Many pairs per offset: allow a little more fp32 accumulation. */
    if (RUN_VARIANT(name, voxconv_conv_wgrad(g_h, c->kmap, &fx, &fdy, &fdw,
                                             name ? &o : NULL),
                    "conv_wgrad"))
      check_values(tag, "wgrad dW", name ? name : "default", dt, dW, t.dW,
                   t.dWabs, kv * cin * cout, cout,
                   dt == VOXCONV_DTYPE_F64 ? rtol : 3e-5);
  }
  check_unchanged(tag, "x", x, x0, (size_t)(nin * cin) * es);
  check_unchanged(tag, "W", W, W0, (size_t)(kv * cin * cout) * es);
  check_unchanged(tag, "dy", dy, dy0, (size_t)(nout * cout) * es);

  free(x), free(W), free(dy), free(xr), free(Wr), free(dyr);
  free(x0), free(W0), free(dy0), free(xd), free(dyd);
  free(t.yd), free(t.yabs), free(t.dxd), free(t.dxabs), free(t.dW),
      free(t.dWabs), free(t.reach);
  free(yref), free(yabs), free(dxref), free(dxabs), free(y), free(dx),
      free(dW);
}

/* ---- depthwise -------------------------------------------------------- */
typedef struct dw_ctx {
  int64_t C;
  const double *xd, *w, *dyd;
  double *yd, *yabs, *dxd, *dxabs, *dw, *dwabs;
} dw_ctx_t;

static void dw_fwd_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  dw_ctx_t *t = (dw_ctx_t *)vctx;
  for (int64_t ch = 0; ch < t->C; ch++) {
    const double v = t->xd[ic * t->C + ch] * t->w[k * t->C + ch];
    t->yd[oc * t->C + ch] += v;
    t->yabs[oc * t->C + ch] += fabs(v);
  }
}
static void dw_dgrad_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  dw_ctx_t *t = (dw_ctx_t *)vctx;
  for (int64_t ch = 0; ch < t->C; ch++) {
    const double v = t->dyd[oc * t->C + ch] * t->w[k * t->C + ch];
    t->dxd[ic * t->C + ch] += v;
    t->dxabs[ic * t->C + ch] += fabs(v);
  }
}
static void dw_wgrad_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  dw_ctx_t *t = (dw_ctx_t *)vctx;
  for (int64_t ch = 0; ch < t->C; ch++) {
    const double v = t->xd[ic * t->C + ch] * t->dyd[oc * t->C + ch];
    t->dw[k * t->C + ch] += v;
    t->dwabs[k * t->C + ch] += fabs(v);
  }
}

static void run_depthwise(ocase_t *c, voxconv_dtype_t dt, int64_t C) {
  const size_t es = dr_dtype_bytes(dt);
  const int64_t nin = c->n_in, nout = c->n_out, kv = c->kvol;
  void *x = dr_xmalloc((size_t)(nin * C) * es);
  void *w = dr_xmalloc((size_t)(kv * C) * es);
  void *dy = dr_xmalloc((size_t)(nout * C) * es + es);
  double *xr = (double *)dr_xmalloc((size_t)(nin * C) * 8);
  double *wr = (double *)dr_xmalloc((size_t)(kv * C) * 8);
  double *dyr = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
  dr_fill_normal(x, dt, nin * C, xr);
  dr_fill_normal(w, dt, kv * C, wr);
  dr_fill_normal(dy, dt, nout * C, dyr);
  void *x0 = dup_bytes(x, (size_t)(nin * C) * es);
  void *w0 = dup_bytes(w, (size_t)(kv * C) * es);

  const int64_t icells = ref_in_cells(c), ocells = ref_out_cells(c);
  dw_ctx_t t;
  t.C = C;
  double *xd = (double *)dr_xcalloc((size_t)(icells * C), 8);
  double *dyd = (double *)dr_xcalloc((size_t)(ocells * C), 8);
  scatter_in(c, xr, C, xd);
  scatter_out(c, dyr, C, dyd);
  t.xd = xd;
  t.w = wr;
  t.dyd = dyd;
  t.yd = (double *)dr_xcalloc((size_t)(ocells * C), 8);
  t.yabs = (double *)dr_xcalloc((size_t)(ocells * C), 8);
  t.dxd = (double *)dr_xcalloc((size_t)(icells * C), 8);
  t.dxabs = (double *)dr_xcalloc((size_t)(icells * C), 8);
  t.dw = (double *)dr_xcalloc((size_t)(kv * C), 8);
  t.dwabs = (double *)dr_xcalloc((size_t)(kv * C), 8);
  dense_relation(c, dw_fwd_fn, &t);
  dense_relation(c, dw_dgrad_fn, &t);
  dense_relation(c, dw_wgrad_fn, &t);
  double *yref = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
  double *yabs = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
  double *dxref = (double *)dr_xmalloc((size_t)(nin * C) * 8);
  double *dxabs = (double *)dr_xmalloc((size_t)(nin * C) * 8);
  gather_out(c, t.yd, C, yref);
  gather_out(c, t.yabs, C, yabs);
  gather_in(c, t.dxd, C, dxref);
  gather_in(c, t.dxabs, C, dxabs);

  void *y = dr_xmalloc((size_t)(nout * C) * es + es);
  void *dx = dr_xmalloc((size_t)(nin * C) * es);
  void *dw = dr_xmalloc((size_t)(kv * C) * es);
  const voxconv_feats_t fx = {x, nin, C, dt}, fy = {y, nout, C, dt};
  const voxconv_feats_t fdy = {dy, nout, C, dt}, fdx = {dx, nin, C, dt};
  const voxconv_feats_t fw = {w, kv, C, dt}, fdw = {dw, kv, C, dt};
  const double rtol = dr_rtol_accum(dt);
  char tag[320];
  snprintf(tag, sizeof tag, "%s depthwise C=%lld", c->tag, (long long)C);

  for (int v = 0; v < variant_count(VOXCONV_PASS_DEPTHWISE_FWD); v++) {
    const char *name = variant_name(VOXCONV_PASS_DEPTHWISE_FWD, v);
    const voxconv_conv_options_t o = algo_opts(name);
    vc_poison(y, dt, nout * C);
    if (RUN_VARIANT(name, voxconv_depthwise_forward(g_h, c->kmap, &fx, &fw, &fy,
                                                    name ? &o : NULL),
                    "depthwise_forward"))
      check_values(tag, "forward y", name ? name : "default", dt, y, yref,
                   yabs, nout * C, C, rtol);
  }
  for (int v = 0; v < variant_count(VOXCONV_PASS_DEPTHWISE_DGRAD); v++) {
    const char *name = variant_name(VOXCONV_PASS_DEPTHWISE_DGRAD, v);
    const voxconv_conv_options_t o = algo_opts(name);
    vc_poison(dx, dt, nin * C);
    if (RUN_VARIANT(name, voxconv_depthwise_dgrad(g_h, c->kmap, &fdy, &fw, &fdx,
                                                  name ? &o : NULL),
                    "depthwise_dgrad"))
      check_values(tag, "dgrad dx", name ? name : "default", dt, dx, dxref,
                   dxabs, nin * C, C, rtol);
  }
  for (int v = 0; v < variant_count(VOXCONV_PASS_DEPTHWISE_WGRAD); v++) {
    const char *name = variant_name(VOXCONV_PASS_DEPTHWISE_WGRAD, v);
    const voxconv_conv_options_t o = algo_opts(name);
    vc_poison(dw, dt, kv * C);
    if (RUN_VARIANT(name, voxconv_depthwise_wgrad(g_h, c->kmap, &fx, &fdy, &fdw,
                                                  name ? &o : NULL),
                    "depthwise_wgrad"))
      check_values(tag, "wgrad dw", name ? name : "default", dt, dw, t.dw,
                   t.dwabs, kv * C, C, dt == VOXCONV_DTYPE_F64 ? rtol : 3e-5);
  }
  check_unchanged(tag, "x", x, x0, (size_t)(nin * C) * es);
  check_unchanged(tag, "w", w, w0, (size_t)(kv * C) * es);

  free(x), free(w), free(dy), free(xr), free(wr), free(dyr), free(x0),
      free(w0), free(xd), free(dyd);
  free(t.yd), free(t.yabs), free(t.dxd), free(t.dxabs), free(t.dw),
      free(t.dwabs);
  free(yref), free(yabs), free(dxref), free(dxabs), free(y), free(dx),
      free(dw);
}

/* ---- pooling and unpooling -------------------------------------------- */
/* The window of an output is every dense cell the relation links to it;
 * pooling reduces over the ACTIVE cells of that window. */
typedef struct pool_ctx {
  int64_t C;
  const int64_t *inrow;
  const double *xd;   /* [in cells][C] */
  double *sum, *sabs, *mx; /* [out cells][C] */
  int64_t *count;     /* [out cells] */
  /* MAX backward: the winner = smallest k whose active input equals y */
  const double *yd;   /* forward result per out cell (the library's y) */
  int *win_k;         /* [out cells][C], kvol+1 when none */
  int64_t *win_cell;  /* [out cells][C] */
} pool_ctx_t;

static void pool_fwd_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  pool_ctx_t *t = (pool_ctx_t *)vctx;
  (void)k;
  if (t->inrow[ic] < 0)
    return; /* the window is restricted to active inputs */
  for (int64_t ch = 0; ch < t->C; ch++) {
    const double v = t->xd[ic * t->C + ch];
    const int64_t j = oc * t->C + ch;
    if (t->count[oc] == 0 || v > t->mx[j])
      t->mx[j] = v;
    t->sum[j] += v;
    t->sabs[j] += fabs(v);
  }
  t->count[oc]++;
}
static void pool_winner_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  pool_ctx_t *t = (pool_ctx_t *)vctx;
  if (t->inrow[ic] < 0)
    return;
  for (int64_t ch = 0; ch < t->C; ch++) {
    const int64_t j = oc * t->C + ch;
    if (t->xd[ic * t->C + ch] == t->yd[j] && k < t->win_k[j]) {
      t->win_k[j] = k;
      t->win_cell[j] = ic;
    }
  }
}

typedef struct unpool_ctx {
  int64_t C;
  const int64_t *inrow, *outrow;
  const double *src; /* forward: coarse [out cells]; backward: fine [in] */
  double *dst, *dabs;
  int backward;
} unpool_ctx_t;

static void unpool_fn(void *vctx, int64_t ic, int64_t oc, int k) {
  unpool_ctx_t *t = (unpool_ctx_t *)vctx;
  (void)k;
  /* Only real pairs: an active fine voxel and an output site. */
  if (t->inrow[ic] < 0 || t->outrow[oc] < 0)
    return;
  const int64_t s = t->backward ? ic : oc, d = t->backward ? oc : ic;
  for (int64_t ch = 0; ch < t->C; ch++) {
    t->dst[d * t->C + ch] += t->src[s * t->C + ch];
    t->dabs[d * t->C + ch] += fabs(t->src[s * t->C + ch]);
  }
}

static const char *pool_name(voxconv_pool_mode_t m) {
  return m == VOXCONV_POOL_MAX ? "MAX" : m == VOXCONV_POOL_AVG ? "AVG" : "SUM";
}

static void run_pool(ocase_t *c, voxconv_dtype_t dt, int64_t C) {
  const size_t es = dr_dtype_bytes(dt);
  const int64_t nin = c->n_in, nout = c->n_out;
  const int64_t icells = ref_in_cells(c), ocells = ref_out_cells(c);
  void *x = dr_xmalloc((size_t)(nin * C) * es);
  double *xr = (double *)dr_xmalloc((size_t)(nin * C) * 8);
  /* Half the time small integers: MAX then has ties in most windows, and
   * the backward must pick the documented winner (first pair in map
   * order, i.e. the smallest offset k). */
  const int ties = vc_rand_uniform() < 0.5;
  if (ties)
    for (int64_t i = 0; i < nin * C; i++)
      xr[i] = dr_store(x, dt, i, (double)vc_rand_range(-3, 3));
  else
    dr_fill_normal(x, dt, nin * C, xr);
  void *x0 = dup_bytes(x, (size_t)(nin * C) * es);
  void *dy = dr_xmalloc((size_t)(nout * C) * es + es);
  double *dyr = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
  dr_fill_normal(dy, dt, nout * C, dyr);
  void *y = dr_xmalloc((size_t)(nout * C) * es + es);
  void *dx = dr_xmalloc((size_t)(nin * C) * es);
  double *xd = (double *)dr_xcalloc((size_t)(icells * C), 8);
  scatter_in(c, xr, C, xd);

  pool_ctx_t t;
  memset(&t, 0, sizeof t);
  t.C = C;
  t.inrow = ref_inrow(c);
  t.xd = xd;
  t.sum = (double *)dr_xcalloc((size_t)(ocells * C), 8);
  t.sabs = (double *)dr_xcalloc((size_t)(ocells * C), 8);
  t.mx = (double *)dr_xcalloc((size_t)(ocells * C), 8);
  t.count = (int64_t *)dr_xcalloc((size_t)ocells, 8);
  dense_relation(c, pool_fwd_fn, &t);

  double *ref = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
  double *abs_ = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
  double *cnt = (double *)dr_xmalloc((size_t)nout * 8 + 8);
  double *dxref = (double *)dr_xmalloc((size_t)(nin * C) * 8);
  double *dxabs = (double *)dr_xmalloc((size_t)(nin * C) * 8);
  char tag[320];
  snprintf(tag, sizeof tag, "%s pool C=%lld%s", c->tag, (long long)C,
           ties ? " (integer inputs, ties)" : "");
  const double rtol = dr_rtol_accum(dt);

  for (int m = 0; m < 3; m++) {
    const voxconv_pool_mode_t mode = (voxconv_pool_mode_t)m;
    char what[64];
    for (int64_t o = 0; o < nout; o++) {
      const int64_t oc = out_cell(c, o);
      const int64_t n = oc >= 0 ? t.count[oc] : 0;
      cnt[o] = (double)n;
      for (int64_t ch = 0; ch < C; ch++) {
        const int64_t j = oc * C + ch;
        double r = 0, a = 0;
        if (n > 0) {
          if (mode == VOXCONV_POOL_MAX) {
            r = t.mx[j];
          } else if (mode == VOXCONV_POOL_SUM) {
            r = t.sum[j];
            a = t.sabs[j];
          } else {
            r = t.sum[j] / (double)n;
            a = t.sabs[j] / (double)n;
          }
        }
        ref[o * C + ch] = r;
        abs_[o * C + ch] = a;
      }
    }
    const voxconv_feats_t fx = {x, nin, C, dt}, fy = {y, nout, C, dt};
    const voxconv_feats_t fdy = {dy, nout, C, dt}, fdx = {dx, nin, C, dt};
    vc_poison(y, dt, nout * C);
    snprintf(what, sizeof what, "pool_forward %s", pool_name(mode));
    voxconv_status_t st = voxconv_pool_forward(g_h, c->kmap, mode, &fx, &fy);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s %s %s: %s: %s", tag, what,
              dr_dtype_str(dt), voxconv_status_string(st),
              voxconv_get_last_error(g_h));
    if (st != VOXCONV_STATUS_SUCCESS)
      continue;
    /* MAX is a selection: exact in every dtype. */
    check_values(tag, what, "-", dt, y, ref, abs_, nout * C, C,
                 mode == VOXCONV_POOL_MAX ? -1.0 : rtol);

    /* Backward reference by the adjoint of the dense pooling. */
    double *dxd = (double *)dr_xcalloc((size_t)(icells * C), 8);
    double *dxa = (double *)dr_xcalloc((size_t)(icells * C), 8);
    if (mode == VOXCONV_POOL_MAX) {
      double *yd = (double *)dr_xcalloc((size_t)(ocells * C), 8);
      double *ylib = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
      for (int64_t i = 0; i < nout * C; i++)
        ylib[i] = dr_load(y, dt, i);
      scatter_out(c, ylib, C, yd);
      t.yd = yd;
      t.win_k = (int *)dr_xmalloc((size_t)(ocells * C) * sizeof(int));
      t.win_cell = (int64_t *)dr_xmalloc((size_t)(ocells * C) * 8);
      for (int64_t j = 0; j < ocells * C; j++)
        t.win_k[j] = c->kvol + 1;
      dense_relation(c, pool_winner_fn, &t);
      for (int64_t o = 0; o < nout; o++) {
        const int64_t oc = out_cell(c, o);
        for (int64_t ch = 0; oc >= 0 && ch < C; ch++) {
          const int64_t j = oc * C + ch;
          if (t.win_k[j] <= c->kvol) {
            dxd[t.win_cell[j] * C + ch] += dyr[o * C + ch];
            dxa[t.win_cell[j] * C + ch] += fabs(dyr[o * C + ch]);
          }
        }
      }
      free(yd);
      free(ylib);
      free(t.win_k);
      free(t.win_cell);
    } else {
      /* dx[i] = sum over outputs o whose window holds i of dy[o] (/ n). */
      double *dyd = (double *)dr_xcalloc((size_t)(ocells * C), 8);
      double *dys = (double *)dr_xmalloc((size_t)(nout * C) * 8 + 8);
      for (int64_t o = 0; o < nout; o++)
        for (int64_t ch = 0; ch < C; ch++)
          dys[o * C + ch] = mode == VOXCONV_POOL_AVG
                                ? (cnt[o] > 0 ? dyr[o * C + ch] / cnt[o] : 0)
                                : dyr[o * C + ch];
      scatter_out(c, dys, C, dyd);
      unpool_ctx_t u = {C, ref_inrow(c), ref_outrow(c), dyd, dxd, dxa, 0};
      dense_relation(c, unpool_fn, &u);
      free(dyd);
      free(dys);
    }
    gather_in(c, dxd, C, dxref);
    gather_in(c, dxa, C, dxabs);
    free(dxd);
    free(dxa);
    vc_poison(dx, dt, nin * C);
    snprintf(what, sizeof what, "pool_backward %s", pool_name(mode));
    st = voxconv_pool_backward(g_h, c->kmap, mode,
                               mode == VOXCONV_POOL_MAX ? &fx : NULL,
                               mode == VOXCONV_POOL_MAX ? &fy : NULL, &fdy, &fdx);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s %s %s: %s: %s", tag, what,
              dr_dtype_str(dt), voxconv_status_string(st),
              voxconv_get_last_error(g_h));
    if (st == VOXCONV_STATUS_SUCCESS)
      check_values(tag, what, "-", dt, dx, dxref, dxabs, nin * C, C, rtol);
  }

  /* Unpooling: fine[i] = sum over pairs of coarse[o]; backward the adjoint. */
  {
    double *xcd = (double *)dr_xcalloc((size_t)(ocells * C), 8);
    double *yfd = (double *)dr_xcalloc((size_t)(icells * C), 8);
    double *yfa = (double *)dr_xcalloc((size_t)(icells * C), 8);
    scatter_out(c, dyr, C, xcd);
    unpool_ctx_t u = {C, ref_inrow(c), ref_outrow(c), xcd, yfd, yfa, 0};
    dense_relation(c, unpool_fn, &u);
    gather_in(c, yfd, C, dxref);
    gather_in(c, yfa, C, dxabs);
    const voxconv_feats_t fxc = {dy, nout, C, dt}, fyf = {dx, nin, C, dt};
    vc_poison(dx, dt, nin * C);
    voxconv_status_t st = voxconv_unpool_forward(g_h, c->kmap, &fxc, &fyf);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s unpool_forward %s: %s: %s", tag,
              dr_dtype_str(dt), voxconv_status_string(st),
              voxconv_get_last_error(g_h));
    if (st == VOXCONV_STATUS_SUCCESS)
      check_values(tag, "unpool_forward", "-", dt, dx, dxref, dxabs, nin * C,
                   C, rtol);
    free(xcd);
    free(yfd);
    free(yfa);

    double *dyf = (double *)dr_xcalloc((size_t)(icells * C), 8);
    double *dxc = (double *)dr_xcalloc((size_t)(ocells * C), 8);
    double *dxca = (double *)dr_xcalloc((size_t)(ocells * C), 8);
    scatter_in(c, xr, C, dyf);
    unpool_ctx_t ub = {C, ref_inrow(c), ref_outrow(c), dyf, dxc, dxca, 1};
    dense_relation(c, unpool_fn, &ub);
    gather_out(c, dxc, C, ref);
    gather_out(c, dxca, C, abs_);
    const voxconv_feats_t fdyf = {x, nin, C, dt}, fdxc = {y, nout, C, dt};
    vc_poison(y, dt, nout * C);
    st = voxconv_unpool_backward(g_h, c->kmap, &fdyf, &fdxc);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s unpool_backward %s: %s: %s",
              tag, dr_dtype_str(dt), voxconv_status_string(st),
              voxconv_get_last_error(g_h));
    if (st == VOXCONV_STATUS_SUCCESS)
      check_values(tag, "unpool_backward", "-", dt, y, ref, abs_, nout * C, C,
                   rtol);
    free(dyf);
    free(dxc);
    free(dxca);
  }
  check_unchanged(tag, "x", x, x0, (size_t)(nin * C) * es);

  free(x), free(xr), free(x0), free(dy), free(dyr), free(y), free(dx),
      free(xd);
  free(t.sum), free(t.sabs), free(t.mx), free(t.count);
  free(ref), free(abs_), free(cnt), free(dxref), free(dxabs);
}

/* ---- driver ----------------------------------------------------------- */
/* Channel counts in 1..16 with the dense work kept under a budget. */
static void pick_channels(const ocase_t *c, int64_t *cin, int64_t *cout) {
  *cin = vc_rand_range(1, 16);
  *cout = vc_rand_range(1, 16);
  const int64_t rel = count_relation_upper(c);
  while (*cin * *cout * rel > 2500000 && (*cin > 1 || *cout > 1)) {
    if (*cin >= *cout)
      (*cin)--;
    else
      (*cout)--;
  }
}

static int64_t env_cases(void) {
  const char *e = getenv("VOXCONV_ORACLE_CASES");
  return e && *e ? atoll(e) : 48;
}

/* Handwritten cases whose answer is known without any loop: a 1-D line of
 * voxels and kernel 3 along x, so every value can be checked by eye. */
static void test_hand_case(void) {
  /* x at (0,0,0,0) = 1, (0,1,0,0) = 2, (0,3,0,0) = 4; W[k] = 10^k scalar.
   * kernel 3x1x1 offsets along x: -1, 0, +1 (k = 0, 1, 2).
   * y[o] = x[o-1]*1 + x[o]*10 + x[o+1]*100 (cross-correlation). */
  const int32_t coords[12] = {0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0};
  const double xv[3] = {1, 2, 4}, wv[3] = {1, 10, 100};
  const double want[3] = {0 + 10 + 200, 1 + 20 + 0, 0 + 40 + 0};
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = VOXCONV_KMAP_SUBMANIFOLD;
  d.kernel_size[0] = 3;
  d.kernel_size[1] = d.kernel_size[2] = 1;
  voxconv_coords_t in = {coords, 3, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &d, &in, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  if (!m)
    return;
  double x[3], w[3], y[3];
  memcpy(x, xv, sizeof x);
  memcpy(w, wv, sizeof w);
  const voxconv_feats_t fx = {x, 3, 1, VOXCONV_DTYPE_F64},
                        fy = {y, 3, 1, VOXCONV_DTYPE_F64};
  const voxconv_weights_t fw = {w, 3, 1, 1, VOXCONV_DTYPE_F64};
  vc_poison(y, VOXCONV_DTYPE_F64, 3);
  VC_EXPECT_STATUS(g_h, voxconv_conv_forward(g_h, m, &fx, &fw, &fy, NULL),
                   VOXCONV_STATUS_SUCCESS);
  for (int i = 0; i < 3; i++)
    VC_EXPECT(y[i] == want[i], "hand case y[%d] = %g, want %g", i, y[i],
              want[i]);
  voxconv_kmap_destroy(g_h, m);

  /* Strided kernel 2 stride 2 along x on x = -3..2: outputs floor(x/2) =
   * -2,-1,0,1; output o takes inputs 2o (k=0) and 2o+1 (k=1). */
  const int32_t c2[24] = {0, -3, 0, 0, 0, -2, 0, 0, 0, -1, 0, 0,
                          0, 0,  0, 0, 0, 1,  0, 0, 0, 2,  0, 0};
  double x2[6] = {1, 2, 3, 4, 5, 6}, w2[2] = {1, 10}, y2[4];
  d.mode = VOXCONV_KMAP_STRIDED;
  d.kernel_size[0] = 2;
  d.stride[0] = 2;
  d.stride[1] = d.stride[2] = 1;
  voxconv_coords_t in2 = {c2, 6, {1, 1, 1}};
  VC_EXPECT_STATUS(g_h, voxconv_kmap_build(g_h, &d, &in2, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  if (!m)
    return;
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(m, &info);
  VC_EXPECT(info.n_out == 4, "strided hand case n_out %lld", (long long)info.n_out);
  const int32_t *oc = NULL;
  voxconv_kmap_out_coords(m, &oc);
  const int32_t want_x[4] = {-2, -1, 0, 1};
  /* y[-2] = x(-4)*1 + x(-3)*10 = 10; y[-1] = x(-2) + 10 x(-1) = 2 + 30;
   * y[0] = x(0) + 10 x(1) = 4 + 50; y[1] = x(2) + 10 x(3) = 6. */
  const double want2[4] = {10, 32, 54, 6};
  const voxconv_feats_t fx2 = {x2, 6, 1, VOXCONV_DTYPE_F64},
                        fy2 = {y2, 4, 1, VOXCONV_DTYPE_F64};
  const voxconv_weights_t fw2 = {w2, 2, 1, 1, VOXCONV_DTYPE_F64};
  vc_poison(y2, VOXCONV_DTYPE_F64, 4);
  if (info.n_out == 4) {
    VC_EXPECT_STATUS(g_h, voxconv_conv_forward(g_h, m, &fx2, &fw2, &fy2, NULL),
                     VOXCONV_STATUS_SUCCESS);
    for (int i = 0; i < 4; i++) {
      VC_EXPECT(oc && oc[4 * i + 1] == want_x[i], "strided out x[%d] = %d want %d",
                i, oc ? oc[4 * i + 1] : -999, want_x[i]);
      VC_EXPECT(y2[i] == want2[i], "strided hand y[%d] = %g want %g", i, y2[i],
                want2[i]);
    }
  }
  voxconv_kmap_destroy(g_h, m);
}

int main(void) {
  g_seed = (unsigned long long)vc_test_init("test_dense_oracle");
  voxconv_handle_desc_t hd;
  memset(&hd, 0, sizeof hd);
  hd.backend = VOXCONV_BACKEND_CPU;
  hd.num_threads = 2;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_h, &hd));
  list_cpu_algos();
  test_hand_case();

  static const voxconv_dtype_t low[3] = {VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16,
                                         VOXCONV_DTYPE_BF16};
  const int64_t n_cases = env_cases();
  int per_mode[4] = {0, 0, 0, 0};
  int64_t pairs_total = 0;
  for (int64_t id = 0; id < n_cases; id++) {
    const voxconv_kmap_mode_t mode = (voxconv_kmap_mode_t)(id % 4);
    ocase_t c;
    int tries = 0;
    while (!make_case(&c, (int)id, mode, 0) && ++tries < 100) {
    }
    if (tries >= 100)
      continue;
    per_mode[mode]++;
    pairs_total += c.exp_n_pairs;
    if (build_and_check_map(&c)) {
      const voxconv_dtype_t dts[2] = {VOXCONV_DTYPE_F64, low[id % 3]};
      for (int di = 0; di < 2; di++) {
        int64_t cin, cout;
        pick_channels(&c, &cin, &cout);
        run_conv(&c, dts[di], cin, cout);
      }
      if (id % 2 == 0 || mode == VOXCONV_KMAP_SUBMANIFOLD) {
        const int64_t C = vc_rand_range(1, 16);
        run_depthwise(&c, VOXCONV_DTYPE_F64, C);
        run_depthwise(&c, low[(id / 2) % 3], C);
      }
      if (id % 4 == 1 || id % 3 == 0) {
        const int64_t C = vc_rand_range(1, 12);
        run_pool(&c, VOXCONV_DTYPE_F64, C);
        run_pool(&c, low[(id + 1) % 3], C);
      }
    }
    case_free(&c);
  }
  /* The usual pooling geometry: kernel 2 stride 2 and kernel 3 stride 2. */
  for (int i = 0; i < 6; i++) {
    ocase_t c;
    int ok = 0;
    for (int tries = 0; tries < 100 && !ok; tries++) {
      ok = make_case(&c, 1000 + i, VOXCONV_KMAP_STRIDED, 0);
      if (!ok)
        continue;
      /* Rebuild as the standard pool geometry on the drawn coordinates. */
      const int32_t kk = i % 2 ? 3 : 2;
      int32_t *in_c = c.in_c;
      const int64_t n_in = c.n_in;
      c.in_c = NULL;
      case_free(&c);
      memset(&c, 0, sizeof c);
      c.id = 1000 + i;
      c.mode = VOXCONV_KMAP_STRIDED;
      c.desc.mode = VOXCONV_KMAP_STRIDED;
      for (int a = 0; a < 3; a++) {
        c.k[a] = c.desc.kernel_size[a] = kk;
        c.s[a] = c.desc.stride[a] = 2;
        c.d[a] = c.desc.dilation[a] = 1;
        c.in_ts[a] = 1;
      }
      c.kvol = dr_kernel_offsets(&c.desc, c.off);
      c.in_c = in_c;
      c.n_in = n_in;
      expected_map(&c);
      make_tag(&c);
    }
    if (!ok)
      continue;
    if (build_and_check_map(&c)) {
      const int64_t C = vc_rand_range(1, 16);
      run_pool(&c, VOXCONV_DTYPE_F64, C);
      run_pool(&c, low[i % 3], C);
    }
    case_free(&c);
  }
  /* Large, wide cases (pair-list reference): channel counts beyond one
   * register tile (17..96), thousands of voxels, every dtype. */
  for (int i = 0; i < 6; i++) {
    const voxconv_kmap_mode_t mode = (voxconv_kmap_mode_t)(i % 3);
    ocase_t c;
    int tries = 0;
    while (!make_case(&c, 2000 + i, mode, 1) && ++tries < 100) {
    }
    if (tries >= 100)
      continue;
    pairs_total += c.exp_n_pairs;
    if (build_and_check_map(&c)) {
      static const int64_t wide[] = {17, 24, 31, 32, 33, 48, 64, 65, 96};
      const voxconv_dtype_t dts[2] = {VOXCONV_DTYPE_F32, low[1 + i % 2]};
      for (int di = 0; di < 2; di++) {
        int64_t cin = wide[vc_rand_range(0, 8)], cout = wide[vc_rand_range(0, 8)];
        while (cin * cout * c.exp_n_pairs > 25000000 && (cin > 1 || cout > 1)) {
          if (cin >= cout)
            cin = cin * 3 / 4;
          else
            cout = cout * 3 / 4;
        }
        run_conv(&c, dts[di], cin, cout);
      }
      run_depthwise(&c, low[i % 3], wide[vc_rand_range(0, 8)]);
      run_pool(&c, low[i % 3], wide[vc_rand_range(0, 8)]);
    }
    case_free(&c);
  }
  printf("cases per mode: SUBM %d, STRIDED %d, TRANSPOSED %d, GENERATIVE %d; "
         "%lld pairs; %d conv/depthwise runs, %d named-algorithm declines\n",
         per_mode[0], per_mode[1], per_mode[2], per_mode[3],
         (long long)pairs_total, g_n_conv_runs, g_n_unsupported);
  printf("largest err/tolerance: f32 %.3g, f16 %.3g, bf16 %.3g, f64 %.3g\n",
         g_worst_ratio[VOXCONV_DTYPE_F32], g_worst_ratio[VOXCONV_DTYPE_F16],
         g_worst_ratio[VOXCONV_DTYPE_BF16], g_worst_ratio[VOXCONV_DTYPE_F64]);
  voxconv_destroy(g_h);
  return vc_test_finish();
}
