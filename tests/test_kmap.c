/* Kernel maps, merge_duplicates and voxelize on the CPU backend.
 *
 * Every map is compared with references written here straight from the
 * definitions in voxconv.h, sharing no code with the library:
 *   - brute force: for each offset k, output o and input i, test the mode's
 *     pair relation (O(K * n_out * n_in)) -- small random sets;
 *   - sorted array + binary search of each (o, k)'s partner -- large sets
 *     that span many of the builder's work chunks.
 * Random sets vary density, batches (1-3), sign of the coordinates, and
 * sometimes touch the coordinate limits; kernels 1..5 per axis (odd, even,
 * anisotropic), strides 1..3, dilations 1..2. */
#include "vc_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coords/vc_kmap.h"

static voxconv_handle_t *make_handle(int threads) {
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  d.num_threads = threads;
  voxconv_handle_t *h = NULL;
  if (voxconv_create(&h, &d) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "cannot create a CPU handle: %s\n",
            voxconv_get_last_error(NULL));
    exit(1);
  }
  return h;
}

static const char *mode_names[4] = {"SUBMANIFOLD", "STRIDED", "TRANSPOSED",
                                    "GENERATIVE"};

/* ---- coordinate sets ------------------------------------------------ */
static void shuffle_rows(int32_t *rows, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    const int64_t j = vc_rand_range(0, i);
    int32_t t[4];
    memcpy(t, rows + 4 * i, sizeof t);
    memcpy(rows + 4 * i, rows + 4 * j, sizeof t);
    memcpy(rows + 4 * j, t, sizeof t);
  }
}

/* Up to n distinct rows in batches [0, batches) and the box lo + [0, ext),
 * in random order. Returns the count (less than n when the box is full). */
static int64_t random_set(int32_t *rows, int64_t n, int batches,
                          const int32_t lo[3], const int32_t ext[3]) {
  int64_t cap = batches;
  for (int a = 0; a < 3; a++)
    cap *= ext[a];
  if (n > cap)
    n = cap;
  int64_t have = 0;
  /* Draw with repeats, then dedupe: a few rounds reach n. */
  while (have < n) {
    for (int64_t i = have; i < n; i++) {
      int32_t *r = rows + 4 * i;
      r[0] = (int32_t)vc_rand_range(0, batches - 1);
      for (int a = 0; a < 3; a++)
        r[a + 1] = lo[a] + (int32_t)vc_rand_range(0, ext[a] - 1);
    }
    have = vc_sort_unique_coords(rows, n);
  }
  shuffle_rows(rows, n);
  return n;
}

/* ---- reference map (brute force) ------------------------------------ */
typedef struct {
  int status_error; /* 1: the reference expects OUT_OF_RANGE */
  int32_t kvol;
  int32_t off[VOXCONV_KERNEL_VOLUME_MAX][3];
  int32_t *out;
  int64_t n_out;
  int64_t offsets[VOXCONV_KERNEL_VOLUME_MAX + 1];
  int32_t *in_rows, *out_rows;
  int64_t n_pairs;
} ref_map_t;

static void ref_offsets(const voxconv_kmap_desc_t *d, ref_map_t *r) {
  int32_t ks[3], dil[3];
  for (int a = 0; a < 3; a++) {
    ks[a] = d->kernel_size[a];
    dil[a] = d->dilation[a] ? d->dilation[a] : 1;
  }
  r->kvol = ks[0] * ks[1] * ks[2];
  for (int jx = 0; jx < ks[0]; jx++)
    for (int jy = 0; jy < ks[1]; jy++)
      for (int jz = 0; jz < ks[2]; jz++) {
        const int k = (jx * ks[1] + jy) * ks[2] + jz;
        /* (j - floor((k-1)/2)) * d; k >= 1 so the division is a floor. */
        r->off[k][0] = (jx - (ks[0] - 1) / 2) * dil[0];
        r->off[k][1] = (jy - (ks[1] - 1) / 2) * dil[1];
        r->off[k][2] = (jz - (ks[2] - 1) / 2) * dil[2];
      }
}

static int32_t floor_div_ref(int32_t a, int32_t s) {
  return (int32_t)floor((double)a / (double)s);
}

static int pair_holds(voxconv_kmap_mode_t mode, const int32_t *s,
                      const int32_t *off, const int32_t *i, const int32_t *o) {
  if (i[0] != o[0])
    return 0;
  for (int a = 0; a < 3; a++) {
    int64_t lhs, rhs;
    switch (mode) {
    case VOXCONV_KMAP_SUBMANIFOLD:
      lhs = i[a + 1];
      rhs = (int64_t)o[a + 1] + off[a];
      break;
    case VOXCONV_KMAP_STRIDED:
      lhs = i[a + 1];
      rhs = (int64_t)s[a] * o[a + 1] + off[a];
      break;
    default:
      lhs = o[a + 1];
      rhs = (int64_t)s[a] * i[a + 1] + off[a];
      break;
    }
    if (lhs != rhs)
      return 0;
  }
  return 1;
}

static void ref_build(const voxconv_kmap_desc_t *d, const int32_t *in,
                      int64_t n_in, const int32_t *tout, int64_t n_tout,
                      ref_map_t *r) {
  memset(r, 0, sizeof *r);
  ref_offsets(d, r);
  int32_t s[3];
  for (int a = 0; a < 3; a++)
    s[a] = d->stride[a] ? d->stride[a] : 1;
  switch (d->mode) {
  case VOXCONV_KMAP_SUBMANIFOLD:
    r->out = malloc((size_t)(n_in ? n_in : 1) * 16);
    memcpy(r->out, in, (size_t)n_in * 16);
    r->n_out = n_in;
    break;
  case VOXCONV_KMAP_TRANSPOSED:
    r->out = malloc((size_t)(n_tout ? n_tout : 1) * 16);
    memcpy(r->out, tout, (size_t)n_tout * 16);
    r->n_out = n_tout;
    break;
  case VOXCONV_KMAP_STRIDED:
    r->out = malloc((size_t)(n_in ? n_in : 1) * 16);
    for (int64_t i = 0; i < n_in; i++) {
      r->out[4 * i] = in[4 * i];
      for (int a = 0; a < 3; a++)
        r->out[4 * i + a + 1] = floor_div_ref(in[4 * i + a + 1], s[a]);
    }
    r->n_out = vc_sort_unique_coords(r->out, n_in);
    break;
  case VOXCONV_KMAP_GENERATIVE: {
    const int64_t n = n_in * r->kvol;
    r->out = malloc((size_t)(n ? n : 1) * 16);
    for (int64_t i = 0; i < n_in; i++)
      for (int k = 0; k < r->kvol; k++) {
        int32_t *g = r->out + 4 * (i * r->kvol + k);
        g[0] = in[4 * i];
        for (int a = 0; a < 3; a++) {
          const int64_t v = (int64_t)s[a] * in[4 * i + a + 1] + r->off[k][a];
          if (v < VOXCONV_COORD_MIN || v > VOXCONV_COORD_MAX)
            r->status_error = 1;
          g[a + 1] = (int32_t)v;
        }
      }
    r->n_out = vc_sort_unique_coords(r->out, n);
    break;
  }
  default: /* EXPANDING: tests/test_kmap_expanding.c */
    break;
  }
  int64_t cap = 64, n_pairs = 0;
  r->in_rows = malloc((size_t)cap * 4);
  r->out_rows = malloc((size_t)cap * 4);
  for (int k = 0; k < r->kvol; k++) {
    r->offsets[k] = n_pairs;
    for (int64_t o = 0; o < r->n_out; o++)
      for (int64_t i = 0; i < n_in; i++)
        if (pair_holds(d->mode, s, r->off[k], in + 4 * i, r->out + 4 * o)) {
          if (n_pairs == cap) {
            cap *= 2;
            r->in_rows = realloc(r->in_rows, (size_t)cap * 4);
            r->out_rows = realloc(r->out_rows, (size_t)cap * 4);
          }
          r->in_rows[n_pairs] = (int32_t)i;
          r->out_rows[n_pairs] = (int32_t)o;
          n_pairs++;
        }
  }
  r->offsets[r->kvol] = n_pairs;
  r->n_pairs = n_pairs;
}

static void ref_free(ref_map_t *r) {
  free(r->out);
  free(r->in_rows);
  free(r->out_rows);
}

/* ---- comparing a built map with a reference ------------------------- */
static int compare_map(voxconv_handle_t *h, const voxconv_kmap_t *m,
                       const ref_map_t *r, int64_t n_in, const char *what) {
  const int before = vc_test_failures;
  voxconv_kmap_info_t info;
  VC_EXPECT_STATUS(h, voxconv_kmap_get_info(m, &info), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(info.kernel_volume == r->kvol, "%s: kvol %d want %d", what,
            info.kernel_volume, r->kvol);
  VC_EXPECT(
      info.n_in == n_in && info.n_out == r->n_out && info.n_pairs == r->n_pairs,
      "%s: n_in %lld n_out %lld n_pairs %lld, want %lld %lld %lld", what,
      (long long)info.n_in, (long long)info.n_out, (long long)info.n_pairs,
      (long long)n_in, (long long)r->n_out, (long long)r->n_pairs);
  if (vc_test_failures != before)
    return 0;
  const int32_t *oc = NULL;
  VC_EXPECT_STATUS(h, voxconv_kmap_out_coords(m, &oc), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(r->n_out == 0 || memcmp(oc, r->out, (size_t)r->n_out * 16) == 0,
            "%s: output coordinates or their order differ", what);
  int64_t offs[VOXCONV_KERNEL_VOLUME_MAX + 1];
  memset(offs, 0xAB, sizeof offs);
  const int64_t np = r->n_pairs ? r->n_pairs : 1;
  int32_t *ir = malloc((size_t)np * 4), *orr = malloc((size_t)np * 4);
  memset(ir, 0xAB, (size_t)np * 4);
  memset(orr, 0xAB, (size_t)np * 4);
  VC_EXPECT_STATUS(h, voxconv_kmap_get_pairs(h, m, offs, ir, orr),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(memcmp(offs, r->offsets, (size_t)(r->kvol + 1) * 8) == 0,
            "%s: pair offsets differ", what);
  int64_t bad = -1;
  for (int64_t p = 0; p < r->n_pairs && bad < 0; p++)
    if (ir[p] != r->in_rows[p] || orr[p] != r->out_rows[p])
      bad = p;
  VC_EXPECT(bad < 0, "%s: pair %lld is (%d,%d), want (%d,%d)", what,
            (long long)bad, bad >= 0 ? ir[bad] : 0, bad >= 0 ? orr[bad] : 0,
            bad >= 0 ? r->in_rows[bad] : 0, bad >= 0 ? r->out_rows[bad] : 0);
  free(ir);
  free(orr);
  /* Neighbour tables: exactly the pairs, -1 elsewhere. */
  const int32_t K = r->kvol;
  int32_t *no = malloc((size_t)(r->n_out * K + 1) * 4);
  int32_t *ni = malloc((size_t)(n_in * K + 1) * 4);
  for (int64_t x = 0; x < r->n_out * K; x++)
    no[x] = -1;
  for (int64_t x = 0; x < n_in * K; x++)
    ni[x] = -1;
  for (int k = 0; k < K; k++)
    for (int64_t p = r->offsets[k]; p < r->offsets[k + 1]; p++) {
      no[(int64_t)r->out_rows[p] * K + k] = r->in_rows[p];
      ni[(int64_t)r->in_rows[p] * K + k] = r->out_rows[p];
    }
  VC_EXPECT(memcmp(no, m->nbr_out, (size_t)(r->n_out * K) * 4) == 0,
            "%s: nbr_out differs", what);
  VC_EXPECT(memcmp(ni, m->nbr_in, (size_t)(n_in * K) * 4) == 0,
            "%s: nbr_in differs", what);
  free(no);
  free(ni);
  return vc_test_failures == before;
}

/* Pair (i, j) at k <=> pair (j, i) at K-1-k, for odd submanifold kernels. */
static void check_symmetry(const voxconv_kmap_t *m, const char *what) {
  const int32_t K = m->kvol;
  int64_t bad = -1;
  for (int64_t o = 0; o < m->n_out && bad < 0; o++)
    for (int k = 0; k < K; k++) {
      const int32_t i = m->nbr_out[o * K + k];
      if (i >= 0 && m->nbr_out[(int64_t)i * K + (K - 1 - k)] != o)
        bad = o;
    }
  VC_EXPECT(bad < 0, "%s: pair at output %lld has no mirror", what,
            (long long)bad);
  for (int k = 0; k < K; k++)
    VC_EXPECT(m->pair_offsets[k + 1] - m->pair_offsets[k] ==
                  m->pair_offsets[K - k] - m->pair_offsets[K - 1 - k],
              "%s: offsets %d and %d have different pair counts", what, k,
              K - 1 - k);
}

/* ---- random small maps against brute force -------------------------- */
static void random_desc(voxconv_kmap_desc_t *d, voxconv_kmap_mode_t mode) {
  memset(d, 0, sizeof *d);
  d->mode = mode;
  for (int a = 0; a < 3; a++) {
    d->kernel_size[a] = (int32_t)vc_rand_range(1, 5);
    d->stride[a] = mode == VOXCONV_KMAP_SUBMANIFOLD
                       ? (int32_t)vc_rand_range(0, 1) /* 0 means 1 */
                       : (int32_t)vc_rand_range(1, 3);
    d->dilation[a] = (int32_t)vc_rand_range(0, 2);
  }
}

static void test_random_maps(voxconv_handle_t *h) {
  int n_cases = 0, n_error_cases = 0;
  int64_t total_pairs = 0;
  for (int iter = 0; iter < 240; iter++) {
    const voxconv_kmap_mode_t mode = (voxconv_kmap_mode_t)(iter % 4);
    voxconv_kmap_desc_t d;
    random_desc(&d, mode);
    if (iter % 16 == 1) { /* the anisotropic case named in the spec */
      d.kernel_size[0] = 3;
      d.kernel_size[1] = 1;
      d.kernel_size[2] = 2;
    }
    const int kvol = d.kernel_size[0] * d.kernel_size[1] * d.kernel_size[2];
    const int batches = (int)vc_rand_range(1, 3);
    int32_t lo[3], ext[3];
    const int edge = (int)vc_rand_range(0, 9); /* 0: next to a limit */
    for (int a = 0; a < 3; a++) {
      ext[a] = (int32_t)vc_rand_range(1, 9);
      lo[a] = (int32_t)vc_rand_range(-12, 4);
    }
    if (edge == 0) {
      const int a = (int)vc_rand_range(0, 2);
      lo[a] = vc_rand_range(0, 1) ? VOXCONV_COORD_MAX - ext[a] + 1
                                  : VOXCONV_COORD_MIN;
    }
    int64_t n_max = mode == VOXCONV_KMAP_GENERATIVE ? 4000 / kvol + 2 : 120;
    int64_t n_in = vc_rand_range(0, n_max);
    int32_t *in = malloc((size_t)(n_in + 1) * 16);
    n_in = random_set(in, n_in, batches, lo, ext);
    voxconv_coords_t cin = {in, n_in, {0, 0, 0}};
    int32_t *tout = NULL;
    int64_t n_tout = 0;
    voxconv_coords_t cout = {NULL, 0, {0, 0, 0}};
    if (mode == VOXCONV_KMAP_TRANSPOSED) {
      /* Fine outputs around the coarse inputs' upsampled box. */
      int32_t olo[3], oext[3];
      for (int a = 0; a < 3; a++) {
        const int32_t s = d.stride[a];
        int64_t a_lo = (int64_t)s * lo[a] - 3;
        int64_t a_hi = (int64_t)s * (lo[a] + ext[a] - 1) + 3;
        /* clamping is monotone, so a_lo <= a_hi still holds */
        a_lo = a_lo < VOXCONV_COORD_MIN   ? VOXCONV_COORD_MIN
               : a_lo > VOXCONV_COORD_MAX ? VOXCONV_COORD_MAX
                                          : a_lo;
        a_hi = a_hi < VOXCONV_COORD_MIN   ? VOXCONV_COORD_MIN
               : a_hi > VOXCONV_COORD_MAX ? VOXCONV_COORD_MAX
                                          : a_hi;
        olo[a] = (int32_t)a_lo;
        oext[a] = (int32_t)(a_hi - a_lo + 1);
        cin.tensor_stride[a] = 2 * s; /* out stride 2: 2 * s == 2s */
        cout.tensor_stride[a] = 2;
      }
      n_tout = vc_rand_range(0, 150);
      tout = malloc((size_t)(n_tout + 1) * 16);
      n_tout = random_set(tout, n_tout, batches, olo, oext);
      cout.data = tout;
      cout.n = n_tout;
    }
    if (mode == VOXCONV_KMAP_GENERATIVE)
      for (int a = 0; a < 3; a++)
        cin.tensor_stride[a] = d.stride[a] * (int32_t)vc_rand_range(1, 2);
    ref_map_t r;
    ref_build(&d, in, n_in, tout, n_tout, &r);
    voxconv_kmap_t *m = (voxconv_kmap_t *)0x1;
    /* Every other block of cases through voxconv_kmap_build_async, which
     * the CPU backend serves exactly as voxconv_kmap_build. */
    const voxconv_status_t st = (iter & 8 ? voxconv_kmap_build_async
                                          : voxconv_kmap_build)(
        h, &d, &cin, mode == VOXCONV_KMAP_TRANSPOSED ? &cout : NULL, &m);
    char what[200];
    snprintf(what, sizeof what,
             "case %d %s k=%dx%dx%d s=%d,%d,%d d=%d,%d,%d n_in=%lld", iter,
             mode_names[mode], d.kernel_size[0], d.kernel_size[1],
             d.kernel_size[2], d.stride[0], d.stride[1], d.stride[2],
             d.dilation[0], d.dilation[1], d.dilation[2], (long long)n_in);
    if (r.status_error) {
      n_error_cases++;
      VC_EXPECT(st == VOXCONV_STATUS_OUT_OF_RANGE && m == NULL &&
                    strstr(voxconv_get_last_error(h), "GENERATIVE output"),
                "%s: want OUT_OF_RANGE for generated cells past the limit, "
                "got %s: %s",
                what, voxconv_status_string(st), voxconv_get_last_error(h));
    } else {
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: %s: %s", what,
                voxconv_status_string(st), voxconv_get_last_error(h));
      if (st == VOXCONV_STATUS_SUCCESS) {
        n_cases++;
        total_pairs += r.n_pairs;
        compare_map(h, m, &r, n_in, what);
        voxconv_kmap_info_t info;
        voxconv_kmap_get_info(m, &info);
        for (int a = 0; a < 3; a++) {
          const int32_t s = d.stride[a] ? d.stride[a] : 1;
          const int32_t its = cin.tensor_stride[a] ? cin.tensor_stride[a] : 1;
          const int32_t want = mode == VOXCONV_KMAP_STRIDED      ? its * s
                               : mode == VOXCONV_KMAP_GENERATIVE ? its / s
                               : mode == VOXCONV_KMAP_TRANSPOSED
                                   ? cout.tensor_stride[a]
                                   : its;
          VC_EXPECT(info.in_tensor_stride[a] == its &&
                        info.out_tensor_stride[a] == want,
                    "%s: tensor strides axis %d: in %d out %d, want %d %d",
                    what, a, info.in_tensor_stride[a],
                    info.out_tensor_stride[a], its, want);
          VC_EXPECT(info.desc.stride[a] == s && info.desc.dilation[a] >= 1,
                    "%s: info.desc keeps 0 instead of 1", what);
        }
        int odd = 1;
        for (int a = 0; a < 3; a++)
          odd &= d.kernel_size[a] & 1;
        if (mode == VOXCONV_KMAP_SUBMANIFOLD && odd)
          check_symmetry(m, what);
        VC_EXPECT_STATUS(h, voxconv_kmap_verify(h, m, &cin),
                         VOXCONV_STATUS_SUCCESS);
      }
    }
    voxconv_kmap_destroy(h, st == VOXCONV_STATUS_SUCCESS ? m : NULL);
    ref_free(&r);
    free(in);
    free(tout);
  }
  printf("random maps: %d compared with brute force (%lld pairs), %d "
         "generative cases past the limit rejected\n",
         n_cases, (long long)total_pairs, n_error_cases);
}

/* ---- large maps: threads and many chunks ---------------------------- */
/* Reference for large sets: sorted inputs and a binary search for each
 * (output, offset)'s partner input. */
static int64_t find_row(const int32_t *sorted, const int64_t *rows, int64_t n,
                        const int32_t *key) {
  const int64_t at = vc_find_coord(sorted, n, key);
  return at < 0 ? -1 : rows[at];
}

typedef struct {
  int32_t c[4];
  int64_t row;
} keyed_row_t;

static int cmp_keyed(const void *a, const void *b) {
  return vc_cmp_coord(((const keyed_row_t *)a)->c, ((const keyed_row_t *)b)->c);
}

static void check_large_map(const voxconv_kmap_t *m,
                            const voxconv_kmap_desc_t *d, const int32_t *in,
                            int64_t n_in, const char *what) {
  ref_map_t r;
  memset(&r, 0, sizeof r);
  ref_offsets(d, &r);
  int32_t s[3];
  for (int a = 0; a < 3; a++)
    s[a] = d->stride[a] ? d->stride[a] : 1;
  keyed_row_t *kr = malloc((size_t)(n_in + 1) * sizeof *kr);
  for (int64_t i = 0; i < n_in; i++) {
    memcpy(kr[i].c, in + 4 * i, 16);
    kr[i].row = i;
  }
  qsort(kr, (size_t)n_in, sizeof *kr, cmp_keyed);
  int32_t *sorted = malloc((size_t)(n_in + 1) * 16);
  int64_t *rows = malloc((size_t)(n_in + 1) * 8);
  for (int64_t i = 0; i < n_in; i++) {
    memcpy(sorted + 4 * i, kr[i].c, 16);
    rows[i] = kr[i].row;
  }
  free(kr);
  const int32_t K = r.kvol;
  const int64_t n_out = m->n_out;
  const int32_t *out = m->out_coords; /* output set checked by the caller */
  int64_t *counts = calloc((size_t)K, 8);
  int64_t bad = -1;
  for (int64_t o = 0; o < n_out && bad < 0; o++)
    for (int k = 0; k < K; k++) {
      int32_t p[4] = {out[4 * o], 0, 0, 0};
      int ok = 1;
      for (int a = 0; a < 3; a++) {
        const int32_t oc = out[4 * o + a + 1];
        if (d->mode == VOXCONV_KMAP_SUBMANIFOLD)
          p[a + 1] = oc + r.off[k][a];
        else if (d->mode == VOXCONV_KMAP_STRIDED)
          p[a + 1] = s[a] * oc + r.off[k][a];
        else if ((oc - r.off[k][a]) % s[a] == 0)
          p[a + 1] = (oc - r.off[k][a]) / s[a];
        else
          ok = 0;
      }
      const int64_t want = ok ? find_row(sorted, rows, n_in, p) : -1;
      if (m->nbr_out[o * K + k] != want)
        bad = o;
      if (want >= 0) {
        counts[k]++;
        if (m->nbr_in[want * K + k] != o)
          bad = o;
      }
    }
  VC_EXPECT(bad < 0,
            "%s: neighbours of output %lld differ from the "
            "binary-search reference",
            what, (long long)bad);
  int64_t total = 0;
  for (int k = 0; k < K; k++) {
    VC_EXPECT(m->pair_offsets[k] == total, "%s: pair_offsets[%d]", what, k);
    total += counts[k];
  }
  VC_EXPECT(m->n_pairs == total, "%s: %lld pairs, want %lld", what,
            (long long)m->n_pairs, (long long)total);
  /* Pairs: grouped by k, ascending output row, consistent with nbr_out. */
  int64_t bad_pair = -1;
  for (int k = 0; k < K && bad_pair < 0; k++)
    for (int64_t p = m->pair_offsets[k]; p < m->pair_offsets[k + 1]; p++) {
      const int32_t o = m->out_rows[p];
      if ((p > m->pair_offsets[k] && m->out_rows[p - 1] >= o) ||
          m->nbr_out[(int64_t)o * K + k] != m->in_rows[p]) {
        bad_pair = p;
        break;
      }
    }
  VC_EXPECT(bad_pair < 0, "%s: pair list wrong at %lld", what,
            (long long)bad_pair);
  free(counts);
  free(sorted);
  free(rows);
}

static int maps_identical(const voxconv_kmap_t *a, const voxconv_kmap_t *b) {
  if (a->n_out != b->n_out || a->n_pairs != b->n_pairs || a->kvol != b->kvol ||
      a->in_fingerprint != b->in_fingerprint)
    return 0;
  const size_t K = (size_t)a->kvol;
  return memcmp(a->out_coords, b->out_coords, (size_t)a->n_out * 16) == 0 &&
         memcmp(a->in_rows, b->in_rows, (size_t)a->n_pairs * 4) == 0 &&
         memcmp(a->out_rows, b->out_rows, (size_t)a->n_pairs * 4) == 0 &&
         memcmp(a->nbr_out, b->nbr_out, (size_t)a->n_out * K * 4) == 0 &&
         memcmp(a->nbr_in, b->nbr_in, (size_t)a->n_in * K * 4) == 0 &&
         memcmp(a->pair_offsets, b->pair_offsets, (K + 1) * 8) == 0;
}

static void test_large_and_threads(void) {
  voxconv_handle_t *h1 = make_handle(1), *h2 = make_handle(2),
                   *h3 = make_handle(3);
  /* A shell-like surface (what scans look like) plus a dense blob, two
   * batches, negative coordinates: enough rows for dozens of chunks. */
  const int64_t cap = 40000;
  int32_t *in = malloc((size_t)cap * 16);
  int64_t n = 0;
  for (int64_t t = 0; t < cap; t++) {
    const double u = vc_rand_uniform() * 6.283185307,
                 v = vc_rand_uniform() * 3.14159265;
    const double rad = 28.0;
    int32_t *r = in + 4 * n++;
    r[0] = (int32_t)(t & 1);
    r[1] = (int32_t)floor(rad * cos(u) * sin(v));
    r[2] = (int32_t)floor(rad * sin(u) * sin(v));
    r[3] = (int32_t)floor(rad * cos(v)) - 5;
  }
  n = vc_sort_unique_coords(in, n);
  {
    int32_t lo[3] = {-6, -6, -6}, ext[3] = {12, 12, 12};
    int32_t *blob = malloc(1500 * 16);
    int64_t nb = random_set(blob, 1500, 2, lo, ext);
    memcpy(in + 4 * n, blob, (size_t)nb * 16);
    n = vc_sort_unique_coords(in, n + nb);
    free(blob);
  }
  shuffle_rows(in, n);
  voxconv_coords_t cin = {in, n, {2, 2, 2}};

  static const struct {
    voxconv_kmap_mode_t mode;
    int k[3], s[3], d[3];
  } cases[] = {
      {VOXCONV_KMAP_SUBMANIFOLD, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
      {VOXCONV_KMAP_SUBMANIFOLD, {5, 3, 1}, {1, 1, 1}, {1, 2, 1}},
      {VOXCONV_KMAP_SUBMANIFOLD, {2, 2, 4}, {1, 1, 1}, {1, 1, 2}},
      {VOXCONV_KMAP_STRIDED, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}},
      {VOXCONV_KMAP_STRIDED, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {VOXCONV_KMAP_STRIDED, {3, 1, 2}, {3, 1, 2}, {1, 1, 1}},
      {VOXCONV_KMAP_GENERATIVE, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}},
      {VOXCONV_KMAP_GENERATIVE, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
      {VOXCONV_KMAP_TRANSPOSED, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}},
      {VOXCONV_KMAP_TRANSPOSED, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    voxconv_kmap_desc_t d;
    memset(&d, 0, sizeof d);
    d.mode = cases[c].mode;
    for (int a = 0; a < 3; a++) {
      d.kernel_size[a] = cases[c].k[a];
      d.stride[a] = cases[c].s[a];
      d.dilation[a] = cases[c].d[a];
    }
    char what[128];
    snprintf(what, sizeof what, "large %s k=%dx%dx%d s=%d", mode_names[d.mode],
             d.kernel_size[0], d.kernel_size[1], d.kernel_size[2], d.stride[0]);
    voxconv_coords_t cout = {NULL, 0, {2, 2, 2}};
    int32_t *fine = NULL;
    if (d.mode == VOXCONV_KMAP_TRANSPOSED) {
      /* Outputs: the strided children of the inputs (an encoder's finer
       * level), plus some unrelated cells. */
      fine = malloc((size_t)(n * 3 + 1) * 16);
      int64_t nf = 0;
      for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < 3; j++) {
          int32_t *r = fine + 4 * nf++;
          r[0] = in[4 * i];
          for (int a = 0; a < 3; a++)
            r[a + 1] = in[4 * i + a + 1] * d.stride[a] +
                       (int32_t)vc_rand_range(-1, d.stride[a]);
        }
      nf = vc_sort_unique_coords(fine, nf);
      shuffle_rows(fine, nf);
      cout.data = fine;
      cout.n = nf;
      for (int a = 0; a < 3; a++)
        cin.tensor_stride[a] = 2 * d.stride[a];
    } else {
      for (int a = 0; a < 3; a++)
        cin.tensor_stride[a] = 2;
    }
    const voxconv_coords_t *po =
        d.mode == VOXCONV_KMAP_TRANSPOSED ? &cout : NULL;
    voxconv_kmap_t *m1 = NULL, *m2 = NULL, *m3 = NULL;
    VC_EXPECT_STATUS(h1, voxconv_kmap_build(h1, &d, &cin, po, &m1),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h2, voxconv_kmap_build(h2, &d, &cin, po, &m2),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(h3, voxconv_kmap_build(h3, &d, &cin, po, &m3),
                     VOXCONV_STATUS_SUCCESS);
    if (m1 && m2 && m3) {
      VC_EXPECT(m1->n_out > 2 * 1024,
                "%s: only %lld outputs, want several "
                "chunks",
                what, (long long)m1->n_out);
      VC_EXPECT(maps_identical(m1, m2), "%s: 1 and 2 threads differ", what);
      VC_EXPECT(maps_identical(m1, m3), "%s: 1 and 3 threads differ", what);
      /* Output set: independent definitions. */
      if (d.mode == VOXCONV_KMAP_SUBMANIFOLD) {
        VC_EXPECT(memcmp(m2->out_coords, in, (size_t)n * 16) == 0,
                  "%s: outputs are not the inputs in input order", what);
      } else if (d.mode == VOXCONV_KMAP_TRANSPOSED) {
        VC_EXPECT(memcmp(m2->out_coords, fine, (size_t)cout.n * 16) == 0,
                  "%s: outputs are not the given ones", what);
      } else {
        ref_map_t r;
        memset(&r, 0, sizeof r);
        ref_offsets(&d, &r);
        const int64_t cap2 = d.mode == VOXCONV_KMAP_STRIDED ? n : n * r.kvol;
        int32_t *o = malloc((size_t)cap2 * 16);
        int64_t no = 0;
        for (int64_t i = 0; i < n; i++)
          for (int k = 0; k < (d.mode == VOXCONV_KMAP_STRIDED ? 1 : r.kvol);
               k++) {
            int32_t *g = o + 4 * no++;
            g[0] = in[4 * i];
            for (int a = 0; a < 3; a++)
              g[a + 1] = d.mode == VOXCONV_KMAP_STRIDED
                             ? floor_div_ref(in[4 * i + a + 1], d.stride[a])
                             : d.stride[a] * in[4 * i + a + 1] + r.off[k][a];
          }
        no = vc_sort_unique_coords(o, no);
        VC_EXPECT(no == m2->n_out &&
                      memcmp(o, m2->out_coords, (size_t)no * 16) == 0,
                  "%s: output set differs (%lld vs %lld)", what,
                  (long long)m2->n_out, (long long)no);
        free(o);
      }
      check_large_map(m2, &d, in, n, what);
      int odd = d.kernel_size[0] & d.kernel_size[1] & d.kernel_size[2] & 1;
      if (d.mode == VOXCONV_KMAP_SUBMANIFOLD && odd)
        check_symmetry(m2, what);
    }
    voxconv_kmap_destroy(h1, m1);
    voxconv_kmap_destroy(h2, m2);
    voxconv_kmap_destroy(h3, m3);
    free(fine);
  }
  printf("large maps: %lld inputs, %zu geometries, 1/2/3 threads identical\n",
         (long long)n, sizeof cases / sizeof cases[0]);
  free(in);
  voxconv_destroy(h1);
  voxconv_destroy(h2);
  voxconv_destroy(h3);
}

/* ---- bad inputs: status and a message that names the problem -------- */
#define EXPECT_FAIL(h, call, status, needle)                                   \
  do {                                                                         \
    VC_EXPECT_STATUS(h, call, status);                                         \
    VC_EXPECT(strstr(voxconv_get_last_error(h), needle) != NULL,               \
              "message of %s lacks \"%s\": %s", #call, needle,                 \
              voxconv_get_last_error(h));                                      \
  } while (0)

static voxconv_kmap_desc_t desc_of(voxconv_kmap_mode_t mode, int k, int s) {
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = mode;
  for (int a = 0; a < 3; a++) {
    d.kernel_size[a] = k;
    d.stride[a] = s;
    d.dilation[a] = 1;
  }
  return d;
}

static void test_bad_inputs(voxconv_handle_t *h) {
  int32_t rows[8 * 4] = {0, 0, 0, 0, 0, 1, 0, 0, 0, 0,  1,  0,  0, 0, 0, 1,
                         1, 0, 0, 0, 1, 5, 5, 5, 0, -3, -2, -1, 0, 2, 2, 2};
  voxconv_coords_t in = {rows, 8, {0, 0, 0}};
  voxconv_kmap_desc_t sub = desc_of(VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
  voxconv_kmap_t *m = (voxconv_kmap_t *)0x1;

  /* NULL pointers */
  EXPECT_FAIL(NULL, voxconv_kmap_build(NULL, &sub, &in, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "handle");
  EXPECT_FAIL(h, voxconv_kmap_build(h, NULL, &in, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "desc");
  VC_EXPECT(m == NULL, "*kmap is NULL after a failure");
  EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, NULL, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "in is NULL");
  EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, &in, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "kmap");
  voxconv_coords_t nodata = {NULL, 3, {0, 0, 0}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, &nodata, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "in->data");
  voxconv_coords_t negn = {rows, -1, {0, 0, 0}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, &negn, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "in->n=-1");
  voxconv_coords_t negts = {rows, 8, {1, -2, 1}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, &negts, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "tensor_stride[1]");

  /* desc */
  voxconv_kmap_desc_t d = sub;
  d.mode = (voxconv_kmap_mode_t)9;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "mode 9");
  d = sub;
  d.kernel_size[1] = 0;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "kernel_size[1] (y) = 0");
  d = sub;
  d.kernel_size[2] = 8;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "kernel_size[2] (z) = 8");
  voxconv_kmap_desc_t st = desc_of(VOXCONV_KMAP_STRIDED, 2, 0);
  VC_EXPECT_STATUS(h, voxconv_kmap_build(h, &st, &in, NULL, &m),
                   VOXCONV_STATUS_SUCCESS); /* stride 0 means 1 */
  voxconv_kmap_info_t info;
  if (m && voxconv_kmap_get_info(m, &info) == VOXCONV_STATUS_SUCCESS)
    VC_EXPECT(info.desc.stride[0] == 1 && info.n_out == 8 &&
                  info.out_tensor_stride[0] == 1,
              "stride 0 -> 1: stride %d n_out %lld", info.desc.stride[0],
              (long long)info.n_out);
  voxconv_kmap_destroy(h, m);
  st.stride[2] = 65;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &st, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "stride[2] (z) = 65");
  st.stride[2] = -1;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &st, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "stride[2] (z) = -1");
  st = desc_of(VOXCONV_KMAP_STRIDED, 2, 2);
  st.dilation[0] = 65;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &st, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "dilation[0] (x) = 65");
  d = sub;
  d.stride[1] = 2;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "SUBMANIFOLD needs stride 1");
  voxconv_kmap_desc_t tr = desc_of(VOXCONV_KMAP_TRANSPOSED, 2, 2);
  EXPECT_FAIL(h, voxconv_kmap_build(h, &tr, &in, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "TRANSPOSED needs");
  voxconv_coords_t out = {rows, 8, {0, 0, 0}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, &in, &out, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "out must be NULL");
  voxconv_kmap_desc_t ge = desc_of(VOXCONV_KMAP_GENERATIVE, 2, 2);
  EXPECT_FAIL(h, voxconv_kmap_build(h, &ge, &in, &out, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "out must be NULL");
  /* transposed stride consistency: out ts 1 * stride 2 != in ts 1 */
  EXPECT_FAIL(h, voxconv_kmap_build(h, &tr, &in, &out, &m),
              VOXCONV_STATUS_SHAPE_MISMATCH, "out->tensor_stride * stride");
  voxconv_coords_t in4 = {rows, 8, {4, 4, 4}}, out2 = {rows, 8, {2, 2, 3}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &tr, &in4, &out2, &m),
              VOXCONV_STATUS_SHAPE_MISMATCH, "on z 3 * 2 != 4");
  out2.tensor_stride[2] = 2;
  VC_EXPECT_STATUS(h, voxconv_kmap_build(h, &tr, &in4, &out2, &m),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_kmap_destroy(h, m);
  /* generative needs a tensor stride divisible by the stride */
  voxconv_coords_t in3 = {rows, 8, {4, 3, 4}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &ge, &in3, NULL, &m),
              VOXCONV_STATUS_SHAPE_MISMATCH, "tensor_stride y = 3");

  /* coordinates out of range: x, y, z, batch */
  static const struct {
    int field;
    int32_t value;
    const char *needle;
  } oor[] = {{1, 140000, "row 3: x=140000 outside ±131071"},
             {2, -131072, "row 3: y=-131072 outside ±131071"},
             {3, 131072, "row 3: z=131072 outside ±131071"},
             {0, 1024, "row 3: batch=1024 outside 0..1023"},
             {0, -1, "row 3: batch=-1 outside 0..1023"}};
  for (size_t t = 0; t < sizeof oor / sizeof oor[0]; t++) {
    int32_t r2[8 * 4];
    memcpy(r2, rows, sizeof r2);
    r2[4 * 3 + oor[t].field] = oor[t].value;
    r2[4 * 6 + 1] = 999999; /* a later bad row: the first one is named */
    voxconv_coords_t c = {r2, 8, {0, 0, 0}};
    EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, &c, NULL, &m),
                VOXCONV_STATUS_OUT_OF_RANGE, oor[t].needle);
    VC_EXPECT(m == NULL, "no map on failure");
    /* the same check on the given outputs of a transposed map */
    voxconv_coords_t cin = {rows, 8, {2, 2, 2}}, cout = {r2, 8, {1, 1, 1}};
    EXPECT_FAIL(h, voxconv_kmap_build(h, &tr, &cin, &cout, &m),
                VOXCONV_STATUS_OUT_OF_RANGE, oor[t].needle);
    VC_EXPECT(strstr(voxconv_get_last_error(h), "out coords") != NULL,
              "names the output set: %s", voxconv_get_last_error(h));
  }
  /* the limits themselves are valid */
  {
    int32_t lim[2 * 4] = {VOXCONV_BATCH_MAX,
                          VOXCONV_COORD_MAX,
                          VOXCONV_COORD_MIN,
                          VOXCONV_COORD_MAX,
                          0,
                          VOXCONV_COORD_MIN,
                          VOXCONV_COORD_MAX,
                          VOXCONV_COORD_MIN};
    voxconv_coords_t c = {lim, 2, {2, 2, 2}};
    VC_EXPECT_STATUS(h, voxconv_kmap_build(h, &sub, &c, NULL, &m),
                     VOXCONV_STATUS_SUCCESS);
    if (m)
      VC_EXPECT(m->n_pairs == 2, "limit coords: %lld pairs (centre only)",
                (long long)m->n_pairs);
    voxconv_kmap_destroy(h, m);
    /* Neighbours past a limit do not exist, even where the packed key of
     * the cell past the limit would carry into the next field: y = MAX + 2
     * would read as (x + 1, y = MIN), z = MAX + 2 as (y + 1, z = MIN). */
    int32_t wrap[4 * 4] = {
        0, 5, VOXCONV_COORD_MAX, 0, 0, 6, VOXCONV_COORD_MIN, 0, 0,
        5, 0, VOXCONV_COORD_MAX, 0, 5, 1, VOXCONV_COORD_MIN};
    voxconv_coords_t cw = {wrap, 4, {0, 0, 0}};
    voxconv_kmap_desc_t dw = desc_of(VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
    dw.kernel_size[0] = 1;
    dw.dilation[1] = dw.dilation[2] = 2;
    VC_EXPECT_STATUS(h, voxconv_kmap_build(h, &dw, &cw, NULL, &m),
                     VOXCONV_STATUS_SUCCESS);
    if (m)
      VC_EXPECT(m->n_pairs == 4,
                "cells past the limit alias real ones: "
                "%lld pairs, want 4 (centres)",
                (long long)m->n_pairs);
    voxconv_kmap_destroy(h, m);
    /* generated cells past the limit are an error */
    EXPECT_FAIL(h, voxconv_kmap_build(h, &ge, &c, NULL, &m),
                VOXCONV_STATUS_OUT_OF_RANGE, "GENERATIVE output of in row 0");
  }
  /* duplicates */
  {
    int32_t r2[8 * 4];
    memcpy(r2, rows, sizeof r2);
    memcpy(r2 + 4 * 6, r2 + 4 * 2, 16); /* row 6 repeats row 2 */
    memcpy(r2 + 4 * 7, r2 + 4 * 1, 16); /* row 7 repeats row 1 */
    voxconv_coords_t c = {r2, 8, {0, 0, 0}};
    EXPECT_FAIL(h, voxconv_kmap_build(h, &sub, &c, NULL, &m),
                VOXCONV_STATUS_DUPLICATE_COORDS, "rows 2 and 6");
    voxconv_kmap_desc_t s2 = desc_of(VOXCONV_KMAP_STRIDED, 2, 2);
    EXPECT_FAIL(h, voxconv_kmap_build(h, &s2, &c, NULL, &m),
                VOXCONV_STATUS_DUPLICATE_COORDS, "(0,0,1,0)");
    voxconv_coords_t cin = {rows, 8, {2, 2, 2}}, cout = {r2, 8, {1, 1, 1}};
    EXPECT_FAIL(h, voxconv_kmap_build(h, &tr, &cin, &cout, &m),
                VOXCONV_STATUS_DUPLICATE_COORDS, "out coords rows 2 and 6");
  }
  /* N = 0 is a valid, empty map in every mode */
  for (int mode = 0; mode < 4; mode++) {
    voxconv_kmap_desc_t e = desc_of((voxconv_kmap_mode_t)mode, 3,
                                    mode == VOXCONV_KMAP_SUBMANIFOLD ? 1 : 2);
    voxconv_coords_t empty = {NULL, 0, {2, 2, 2}};
    voxconv_coords_t cout = {rows, 8, {1, 1, 1}};
    VC_EXPECT_STATUS(
        h,
        voxconv_kmap_build(h, &e, &empty,
                           mode == VOXCONV_KMAP_TRANSPOSED ? &cout : NULL, &m),
        VOXCONV_STATUS_SUCCESS);
    if (!m)
      continue;
    voxconv_kmap_get_info(m, &info);
    const int64_t want_out = mode == VOXCONV_KMAP_TRANSPOSED ? 8 : 0;
    VC_EXPECT(info.n_in == 0 && info.n_out == want_out && info.n_pairs == 0 &&
                  info.kernel_volume == 27,
              "empty %s map: n_out %lld pairs %lld", mode_names[mode],
              (long long)info.n_out, (long long)info.n_pairs);
    int64_t offs[28];
    memset(offs, 0x55, sizeof offs);
    VC_EXPECT_STATUS(h, voxconv_kmap_get_pairs(h, m, offs, NULL, NULL),
                     VOXCONV_STATUS_SUCCESS);
    int zero = 1;
    for (int k = 0; k < 28; k++)
      zero &= offs[k] == 0;
    VC_EXPECT(zero, "empty %s map: pair offsets all 0", mode_names[mode]);
    if (mode == VOXCONV_KMAP_TRANSPOSED)
      for (int64_t o = 0; o < 8 * 27; o++)
        VC_EXPECT(m->nbr_out[o] == -1, "empty transposed nbr_out[%lld]",
                  (long long)o);
    VC_EXPECT_STATUS(h, voxconv_kmap_verify(h, m, &empty),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_kmap_destroy(h, m);
  }
  /* queries */
  VC_EXPECT_STATUS(NULL, voxconv_kmap_get_info(NULL, &info),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(h, voxconv_kmap_destroy(h, NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(h, voxconv_kmap_build(h, &sub, &in, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  EXPECT_FAIL(h, voxconv_kmap_get_pairs(h, NULL, NULL, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "kmap");
  /* prepare: a CPU map has every table (nothing to do); bad words and
   * pointers are named */
  VC_EXPECT_STATUS(h, voxconv_kmap_prepare(h, m, VOXCONV_PREPARE_FORWARD |
                                                     VOXCONV_PREPARE_DGRAD |
                                                     VOXCONV_PREPARE_PAIRS),
                   VOXCONV_STATUS_SUCCESS);
  EXPECT_FAIL(h, voxconv_kmap_prepare(h, m, 0),
              VOXCONV_STATUS_INVALID_ARGUMENT, "what = 0x0");
  EXPECT_FAIL(h, voxconv_kmap_prepare(h, m, 9),
              VOXCONV_STATUS_INVALID_ARGUMENT, "what = 0x9");
  EXPECT_FAIL(h, voxconv_kmap_prepare(h, NULL, 1), VOXCONV_STATUS_NULL_POINTER,
              "kmap");
  EXPECT_FAIL(NULL, voxconv_kmap_prepare(NULL, m, 1),
              VOXCONV_STATUS_NULL_POINTER, "handle");
  EXPECT_FAIL(NULL, voxconv_kmap_out_coords(m, NULL),
              VOXCONV_STATUS_NULL_POINTER, "coords");
  EXPECT_FAIL(NULL, voxconv_kmap_destroy(NULL, m), VOXCONV_STATUS_NULL_POINTER,
              "handle");

  /* verify: same coordinates pass; anything else is KMAP_MISMATCH */
  VC_EXPECT_STATUS(h, voxconv_kmap_verify(h, m, &in), VOXCONV_STATUS_SUCCESS);
  {
    int32_t r2[8 * 4];
    memcpy(r2, rows, sizeof r2);
    r2[4 * 5 + 3] += 1; /* one coordinate of one row */
    voxconv_coords_t c = {r2, 8, {0, 0, 0}};
    EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &c), VOXCONV_STATUS_KMAP_MISMATCH,
                "differ");
    memcpy(r2, rows, sizeof r2);
    memcpy(r2, rows + 4, 16); /* rows 0 and 1 swapped: same set, new order */
    memcpy(r2 + 4, rows, 16);
    EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &c), VOXCONV_STATUS_KMAP_MISMATCH,
                "differ");
    memcpy(r2, rows, sizeof r2);
    r2[4 * 7 + 1] = 1 << 30; /* not even valid coordinates */
    EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &c), VOXCONV_STATUS_KMAP_MISMATCH,
                "differ");
    voxconv_coords_t fewer = {rows, 7, {0, 0, 0}};
    EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &fewer),
                VOXCONV_STATUS_KMAP_MISMATCH,
                "built from 8 input rows, given 7");
    voxconv_coords_t other_ts = {rows, 8, {2, 2, 2}};
    EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &other_ts),
                VOXCONV_STATUS_KMAP_MISMATCH, "tensor stride");
    EXPECT_FAIL(h, voxconv_kmap_verify(h, m, NULL), VOXCONV_STATUS_NULL_POINTER,
                "in is NULL");
  }
  voxconv_kmap_destroy(h, m);
}

/* ---- a caller's allocator serves every map buffer ------------------- */
typedef struct {
  int live, total;
  void *ptrs[256];
} counting_alloc_t;

static void *count_alloc(void *ctx, size_t bytes, void *stream) {
  (void)stream;
  counting_alloc_t *c = (counting_alloc_t *)ctx;
  void *p = malloc(bytes);
  if (p) {
    c->live++;
    if (c->total < 256)
      c->ptrs[c->total] = p;
    c->total++;
  }
  return p;
}

static void count_free(void *ctx, void *ptr, void *stream) {
  (void)stream;
  counting_alloc_t *c = (counting_alloc_t *)ctx;
  c->live--;
  free(ptr);
}

static int allocated_by(const counting_alloc_t *c, const void *p) {
  for (int i = 0; i < c->total && i < 256; i++)
    if (c->ptrs[i] == p)
      return 1;
  return 0;
}

static void test_allocator(void) {
  counting_alloc_t counter;
  memset(&counter, 0, sizeof counter);
  voxconv_allocator_t a = {count_alloc, count_free, &counter};
  voxconv_handle_desc_t hd;
  memset(&hd, 0, sizeof hd);
  hd.backend = VOXCONV_BACKEND_CPU;
  hd.allocator = &a;
  hd.num_threads = 2;
  voxconv_handle_t *h = NULL;
  /* The handle's block cache (VOXCONV_ALLOC_CACHE_MB, read at creation)
   * would keep freed blocks from the counting allocator: this test counts
   * what the map itself holds, so without it. */
  setenv("VOXCONV_ALLOC_CACHE_MB", "0", 1);
  VC_EXPECT_STATUS(NULL, voxconv_create(&h, &hd), VOXCONV_STATUS_SUCCESS);
  unsetenv("VOXCONV_ALLOC_CACHE_MB");
  if (!h)
    return;
  int32_t lo[3] = {-5, -5, -5}, ext[3] = {10, 10, 10};
  int32_t *in = malloc(600 * 16);
  const int64_t n = random_set(in, 600, 2, lo, ext);
  voxconv_coords_t c = {in, n, {0, 0, 0}};
  for (int mode = 0; mode < 4; mode++) {
    voxconv_kmap_desc_t d = desc_of((voxconv_kmap_mode_t)mode, 3,
                                    mode == VOXCONV_KMAP_SUBMANIFOLD ? 1 : 2);
    voxconv_coords_t cin = c, cout = c;
    cin.tensor_stride[0] = cin.tensor_stride[1] = cin.tensor_stride[2] = 2;
    voxconv_kmap_t *m = NULL;
    VC_EXPECT_STATUS(
        h,
        voxconv_kmap_build(h, &d, &cin,
                           mode == VOXCONV_KMAP_TRANSPOSED ? &cout : NULL, &m),
        VOXCONV_STATUS_SUCCESS);
    if (!m)
      continue;
    VC_EXPECT(allocated_by(&counter, m->out_coords) &&
                  allocated_by(&counter, m->in_rows) &&
                  allocated_by(&counter, m->out_rows) &&
                  allocated_by(&counter, m->nbr_out) &&
                  allocated_by(&counter, m->nbr_in),
              "%s: map buffers come from the caller's allocator",
              mode_names[mode]);
    /* STRIDED maps also keep their input coordinates (the inverse's
     * outputs). */
    const int want = mode == VOXCONV_KMAP_STRIDED ? 6 : 5;
    if (mode == VOXCONV_KMAP_STRIDED)
      VC_EXPECT(allocated_by(&counter, m->in_coords),
                "STRIDED: in_coords come from the caller's allocator");
    VC_EXPECT(counter.live == want,
              "%s: %d live allocations after the build "
              "(want the map's %d; temporaries returned)",
              mode_names[mode], counter.live, want);
    voxconv_kmap_destroy(h, m);
    VC_EXPECT(counter.live == 0, "%s: %d allocations leaked", mode_names[mode],
              counter.live);
    counter.total = 0;
  }
  /* failures return every temporary too */
  memcpy(in + 4 * 9, in + 4 * 3, 16);
  voxconv_kmap_t *m = NULL;
  voxconv_kmap_desc_t d = desc_of(VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
  VC_EXPECT_STATUS(h, voxconv_kmap_build(h, &d, &c, NULL, &m),
                   VOXCONV_STATUS_DUPLICATE_COORDS);
  VC_EXPECT(counter.live == 0, "%d allocations leaked by a failed build",
            counter.live);
  free(in);
  voxconv_destroy(h);
}

/* ---- merge_duplicates ----------------------------------------------- */
static void test_merge_duplicates(voxconv_handle_t *h) {
  for (int iter = 0; iter < 20; iter++) {
    const int64_t n = vc_rand_range(0, 3000);
    int32_t lo[3], ext[3];
    for (int a = 0; a < 3; a++) {
      lo[a] = (int32_t)vc_rand_range(-40, 10);
      ext[a] = (int32_t)vc_rand_range(1, 12);
    }
    int32_t *in = malloc((size_t)(n + 1) * 16);
    for (int64_t i = 0; i < n; i++) { /* with many repeats */
      in[4 * i] = (int32_t)vc_rand_range(0, 2);
      for (int a = 0; a < 3; a++)
        in[4 * i + a + 1] = lo[a] + (int32_t)vc_rand_range(0, ext[a] - 1);
    }
    int32_t *ref = malloc((size_t)(n + 1) * 16);
    memcpy(ref, in, (size_t)n * 16);
    const int64_t n_ref = vc_sort_unique_coords(ref, n);
    int32_t *out = malloc((size_t)(n + 1) * 16);
    int64_t *row_map = malloc((size_t)(n + 1) * 8);
    memset(out, 0x7F, (size_t)(n + 1) * 16);
    for (int64_t i = 0; i < n; i++)
      row_map[i] = -7;
    int64_t nu = -1;
    voxconv_coords_t c = {in, n, {0, 0, 0}};
    VC_EXPECT_STATUS(h, voxconv_merge_duplicates(h, &c, out, &nu, row_map),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(nu == n_ref && memcmp(out, ref, (size_t)n_ref * 16) == 0,
              "merge %d: %lld unique, want %lld (or content differs)", iter,
              (long long)nu, (long long)n_ref);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
      if (row_map[i] < 0 || row_map[i] >= nu ||
          memcmp(out + 4 * row_map[i], in + 4 * i, 16) != 0)
        bad = i;
    VC_EXPECT(bad < 0, "merge %d: row_map[%lld] wrong", iter, (long long)bad);
    /* in place (out_coords == in->data), no row map */
    int64_t nu2 = -1;
    VC_EXPECT_STATUS(h, voxconv_merge_duplicates(h, &c, in, &nu2, NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(nu2 == n_ref && memcmp(in, ref, (size_t)n_ref * 16) == 0,
              "merge %d in place", iter);
    free(in);
    free(ref);
    free(out);
    free(row_map);
  }
  int32_t bad_rows[3 * 4] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 200000, 3};
  int32_t out[3 * 4];
  int64_t nu = 0;
  voxconv_coords_t c = {bad_rows, 3, {0, 0, 0}};
  EXPECT_FAIL(h, voxconv_merge_duplicates(h, &c, out, &nu, NULL),
              VOXCONV_STATUS_OUT_OF_RANGE, "row 2: y=200000");
  EXPECT_FAIL(h, voxconv_merge_duplicates(h, &c, NULL, &nu, NULL),
              VOXCONV_STATUS_NULL_POINTER, "out_coords");
  EXPECT_FAIL(h, voxconv_merge_duplicates(h, NULL, out, &nu, NULL),
              VOXCONV_STATUS_NULL_POINTER, "in is NULL");
  c.n = 2;
  VC_EXPECT_STATUS(h, voxconv_merge_duplicates(h, &c, out, &nu, NULL),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(nu == 1, "two equal rows merge to one (%lld)", (long long)nu);
}

/* ---- voxelize -------------------------------------------------------- */
typedef struct {
  int32_t c[4];
  int64_t point;
} vox_ref_t;

static int cmp_vox_ref(const void *a, const void *b) {
  const vox_ref_t *p = (const vox_ref_t *)a, *q = (const vox_ref_t *)b;
  const int c = vc_cmp_coord(p->c, q->c);
  if (c)
    return c;
  return p->point < q->point ? -1 : p->point > q->point;
}

static void test_voxelize_random(voxconv_handle_t *h) {
  for (int iter = 0; iter < 24; iter++) {
    const int64_t n = vc_rand_range(1, 4000);
    const int32_t fields = (int32_t)vc_rand_range(3, 6);
    const int32_t n_feat = (int32_t)vc_rand_range(0, fields);
    const int use_batch = (int)vc_rand_range(0, 1);
    const voxconv_reduce_t reduce = (voxconv_reduce_t)(iter & 1);
    voxconv_voxelize_desc_t d;
    memset(&d, 0, sizeof d);
    for (int a = 0; a < 3; a++) {
      d.voxel_size[a] = (float)(0.05 + vc_rand_uniform() * 0.5);
      d.origin[a] = (float)(vc_rand_uniform() * 4 - 2);
      /* some axes bounded (points outside dropped), some not */
      d.grid_size[a] = vc_rand_range(0, 2) ? 0 : (int32_t)vc_rand_range(1, 12);
    }
    d.reduce = reduce;
    d.batch = (int32_t)vc_rand_range(0, VOXCONV_BATCH_MAX);
    float *pts = malloc((size_t)n * fields * sizeof(float));
    int32_t *batch = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
      for (int f = 0; f < fields; f++)
        pts[i * fields + f] = (float)(vc_rand_uniform() * 6 - 3);
      batch[i] = (int32_t)vc_rand_range(0, 2);
    }
    voxconv_points_t P = {pts, n, fields, use_batch ? batch : NULL};
    /* reference: same float32 formula, sort by (cell, point index) */
    vox_ref_t *vr = malloc((size_t)n * sizeof *vr);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
      int32_t c[4] = {use_batch ? batch[i] : d.batch, 0, 0, 0};
      int keep = 1;
      for (int a = 0; a < 3; a++) {
        const float t =
            floorf((pts[i * fields + a] - d.origin[a]) / d.voxel_size[a]);
        if (d.grid_size[a] > 0 && (t < 0 || t >= (float)d.grid_size[a]))
          keep = 0;
        c[a + 1] = (int32_t)t;
      }
      if (keep) {
        memcpy(vr[kept].c, c, 16);
        vr[kept++].point = i;
      }
    }
    qsort(vr, (size_t)kept, sizeof *vr, cmp_vox_ref);
    int32_t *coords = malloc((size_t)n * 16);
    float *feats = malloc((size_t)n * (n_feat ? n_feat : 1) * sizeof(float));
    int64_t *pv = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n * 4; i++)
      coords[i] = INT32_MIN;
    vc_poison(feats, VOXCONV_DTYPE_F32, n * (n_feat ? n_feat : 1));
    for (int64_t i = 0; i < n; i++)
      pv[i] = -99;
    int64_t nv = -1;
    VC_EXPECT_STATUS(
        h, voxconv_voxelize(h, &d, &P, n_feat, coords, feats, &nv, pv),
        VOXCONV_STATUS_SUCCESS);
    int64_t v = -1, bad = -1;
    for (int64_t j = 0; j < kept && bad < 0; j++) {
      const int first = j == 0 || vc_cmp_coord(vr[j].c, vr[j - 1].c) != 0;
      if (first) {
        v++;
        if (v >= nv || memcmp(coords + 4 * v, vr[j].c, 16) != 0) {
          bad = j;
          break;
        }
        int64_t e = j;
        while (e < kept && vc_cmp_coord(vr[e].c, vr[j].c) == 0)
          e++;
        for (int f = 0; f < n_feat; f++) {
          double want;
          if (reduce == VOXCONV_REDUCE_FIRST) {
            want = pts[vr[j].point * fields + f];
          } else {
            double s = 0;
            for (int64_t q = j; q < e; q++)
              s += pts[vr[q].point * fields + f];
            want = s / (double)(e - j);
          }
          const double got = feats[v * n_feat + f];
          if (!(fabs(got - want) <= 1e-6 * (fabs(want) + 1e-3)))
            bad = j;
        }
      }
      if (pv[vr[j].point] != v)
        bad = j;
    }
    VC_EXPECT(bad < 0 && nv == v + 1,
              "voxelize %d (%s): mismatch at sorted point %lld; %lld voxels "
              "want %lld",
              iter, reduce ? "MEAN" : "FIRST", (long long)bad, (long long)nv,
              (long long)(v + 1));
    int64_t unwritten = 0, marked_dropped = 0;
    for (int64_t i = 0; i < n; i++) {
      unwritten += pv[i] == -99;
      marked_dropped += pv[i] == -1;
    }
    VC_EXPECT(unwritten == 0 && marked_dropped == n - kept,
              "voxelize %d: point_voxel: %lld unwritten, %lld marked dropped, "
              "want %lld",
              iter, (long long)unwritten, (long long)marked_dropped,
              (long long)(n - kept));
    VC_EXPECT(vc_count_poison(feats, VOXCONV_DTYPE_F32, nv * n_feat) == 0,
              "voxelize %d: features not all written", iter);
    free(vr);
    free(coords);
    free(feats);
    free(pv);
    free(pts);
    free(batch);
  }
}

static void test_voxelize_errors(voxconv_handle_t *h) {
  float pts[6 * 4];
  for (int i = 0; i < 24; i++)
    pts[i] = (float)(i % 7) * 0.3f;
  voxconv_points_t P = {pts, 6, 4, NULL};
  voxconv_voxelize_desc_t d;
  memset(&d, 0, sizeof d);
  d.voxel_size[0] = d.voxel_size[1] = d.voxel_size[2] = 0.1f;
  int32_t coords[6 * 4];
  float feats[6 * 4];
  int64_t nv = 0, pv[6];
  VC_EXPECT_STATUS(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
                   VOXCONV_STATUS_SUCCESS);
  pts[4 * 5 + 1] = NAN;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "point 5: y=nan is not finite");
  pts[4 * 2 + 2] = INFINITY; /* the lowest bad point is named */
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "point 2: z=inf");
  pts[4 * 5 + 1] = 0.5f;
  pts[4 * 2 + 2] = 0.5f;
  pts[4 * 3 + 3] = NAN; /* NaN in a feature field is data, not an error */
  VC_EXPECT_STATUS(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
                   VOXCONV_STATUS_SUCCESS);
  pts[4 * 3 + 3] = 0;
  /* index past the limits with no grid bound */
  pts[4 * 4 + 0] = 20000.0f; /* / 0.1 = 200000 > 131071 */
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_OUT_OF_RANGE, "point 4: voxel index x=");
  d.grid_size[0] = 100; /* with a bound it is dropped instead */
  VC_EXPECT_STATUS(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(pv[4] == -1, "point beyond grid_size dropped (%lld)",
            (long long)pv[4]);
  d.grid_size[0] = 0;
  pts[4 * 4 + 0] = 0.2f;
  /* batches */
  int32_t batch[6] = {0, 1, 1024, 0, 2, 3};
  voxconv_points_t Pb = {pts, 6, 4, batch};
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &Pb, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_OUT_OF_RANGE, "point 2: batch=1024");
  d.batch = -1;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_OUT_OF_RANGE, "desc->batch=-1");
  d.batch = 0;
  /* descriptor and argument checks */
  d.voxel_size[1] = 0;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "voxel_size[1] (y) = 0");
  d.voxel_size[1] = NAN;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "voxel_size[1]");
  d.voxel_size[1] = -0.1f;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "voxel_size[1]");
  d.voxel_size[1] = INFINITY;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "voxel_size[1]");
  d.voxel_size[1] = 0.1f;
  voxconv_points_t P2 = {pts, 6, 2, NULL};
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P2, 0, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "fields=2");
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 5, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "n_feat=5");
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, -1, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "n_feat=-1");
  d.reduce = (voxconv_reduce_t)5;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "reduce 5");
  d.reduce = VOXCONV_REDUCE_FIRST;
  d.grid_size[2] = -4;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "grid_size[2] (z) = -4");
  /* a grid larger than the coordinate range would let in-grid indices
   * overflow their key fields (regression: used to return garbage) */
  d.grid_size[2] = VOXCONV_COORD_MAX + 2;
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_OUT_OF_RANGE, "grid_size[2] (z) = 131073");
  d.grid_size[2] = 0;
  EXPECT_FAIL(h, voxconv_voxelize(h, NULL, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_NULL_POINTER, "desc");
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, NULL, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_NULL_POINTER, "points");
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, NULL, feats, &nv, pv),
              VOXCONV_STATUS_NULL_POINTER, "coords_out");
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &P, 4, coords, feats, NULL, pv),
              VOXCONV_STATUS_NULL_POINTER, "n_voxels");
  EXPECT_FAIL(NULL, voxconv_voxelize(NULL, &d, &P, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_NULL_POINTER, "handle");
  voxconv_points_t Pn = {NULL, 6, 4, NULL};
  EXPECT_FAIL(h, voxconv_voxelize(h, &d, &Pn, 4, coords, feats, &nv, pv),
              VOXCONV_STATUS_NULL_POINTER, "points->data");
  voxconv_points_t P0 = {NULL, 0, 4, NULL};
  nv = 77;
  VC_EXPECT_STATUS(h, voxconv_voxelize(h, &d, &P0, 4, NULL, NULL, &nv, NULL),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(nv == 0, "no points, no voxels (%lld)", (long long)nv);
  /* hand-computed: two points share a cell, MEAN of their features */
  {
    float q[3 * 4] = {0.05f,  0.05f, 0.05f, 1.0f,  /* cell (0,0,0) */
                      -0.05f, 0.0f,  0.0f,  5.0f,  /* cell (-1,0,0) */
                      0.09f,  0.01f, 0.02f, 2.0f}; /* cell (0,0,0) */
    voxconv_points_t Q = {q, 3, 4, NULL};
    d.reduce = VOXCONV_REDUCE_MEAN;
    int32_t qc[12];
    float qf[12];
    int64_t qv[3];
    VC_EXPECT_STATUS(h, voxconv_voxelize(h, &d, &Q, 4, qc, qf, &nv, qv),
                     VOXCONV_STATUS_SUCCESS);
    const int32_t want_c[8] = {0, -1, 0, 0, 0, 0, 0, 0};
    VC_EXPECT(nv == 2 && memcmp(qc, want_c, sizeof want_c) == 0 &&
                  qf[3] == 5.0f && qf[7] == 1.5f && qv[0] == 1 && qv[1] == 0 &&
                  qv[2] == 1,
              "hand case: %lld voxels, feats %g %g", (long long)nv,
              (double)qf[3], (double)qf[7]);
    d.reduce = VOXCONV_REDUCE_FIRST;
    VC_EXPECT_STATUS(h, voxconv_voxelize(h, &d, &Q, 4, qc, qf, &nv, qv),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(qf[7] == 1.0f && qf[4] == 0.05f, "FIRST takes point 0 (%g)",
              (double)qf[7]);
  }
}

/* A map of another backend or device: every call that takes a map with a
 * handle refuses it with one message (vc_kmap_check_handle) before doing
 * anything -- destroy included, which would otherwise free the map's
 * buffers through the wrong backend. The fakes are copies of a real CPU
 * map with the backend or device changed by hand. */
static void test_foreign_maps(voxconv_handle_t *h) {
  int32_t rows[3 * 4] = {0, 0, 0, 0, 0, 1, 0, 0, 0, 5, 5, 5};
  voxconv_coords_t in = {rows, 3, {1, 1, 1}};
  voxconv_kmap_desc_t st = desc_of(VOXCONV_KMAP_STRIDED, 2, 2);
  voxconv_kmap_t *m = NULL;
  VC_EXPECT_STATUS(h, voxconv_kmap_build(h, &st, &in, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  if (!m)
    return;
  voxconv_kmap_t cuda = *m, dev1 = *m;
  cuda.backend = VOXCONV_BACKEND_CUDA;
  dev1.device = 1; /* ignored on the CPU backend, checked on CUDA */
  int64_t po[9] = {0};
  voxconv_kmap_t *inv = NULL;
  EXPECT_FAIL(h, voxconv_kmap_wait(h, &cuda), VOXCONV_STATUS_INVALID_ARGUMENT,
              "voxconv_kmap_wait: kmap was built on the CUDA backend but the "
              "handle is CPU");
  EXPECT_FAIL(h, voxconv_kmap_get_pairs(h, &cuda, po, NULL, NULL),
              VOXCONV_STATUS_INVALID_ARGUMENT, "CUDA backend");
  EXPECT_FAIL(h, voxconv_kmap_inverse(h, &cuda, &inv),
              VOXCONV_STATUS_INVALID_ARGUMENT, "CUDA backend");
  EXPECT_FAIL(h, voxconv_kmap_prepare(h, &cuda, 1),
              VOXCONV_STATUS_INVALID_ARGUMENT, "CUDA backend");
  EXPECT_FAIL(h, voxconv_kmap_destroy(h, &cuda), VOXCONV_STATUS_INVALID_ARGUMENT,
              "CUDA backend");
  VC_EXPECT(inv == NULL, "a refused inverse returned a map");
  VC_EXPECT_STATUS(h, voxconv_kmap_wait(h, &dev1), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(h, voxconv_kmap_destroy(h, m), VOXCONV_STATUS_SUCCESS);
}

int main(void) {
  vc_test_init("test_kmap");
  voxconv_handle_t *h = make_handle(2);
  test_bad_inputs(h);
  test_foreign_maps(h);
  test_random_maps(h);
  test_large_and_threads();
  test_allocator();
  test_merge_duplicates(h);
  test_voxelize_random(h);
  test_voxelize_errors(h);
  voxconv_destroy(h);
  return vc_test_finish();
}
