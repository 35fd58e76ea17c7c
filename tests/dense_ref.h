/* Independent reference helpers for the oracle tests (test_dense_oracle.c,
 * test_gradients.c, test_bad_input.c). Written only from the definitions in
 * include/voxconv.h: nothing here includes or calls library internals, so a
 * misunderstanding inside the library cannot leak into its own oracle.
 * Header-only (static inline) because every tests/test_*.c is compiled as
 * its own executable. */
#ifndef DENSE_REF_H
#define DENSE_REF_H

#include "voxconv.h"
#include "vc_test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation that never returns NULL (tests just stop) ------------- */
static inline void *dr_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "dense_ref: out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}
static inline void *dr_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "dense_ref: out of memory (%zu x %zu bytes)\n", n, size);
    exit(2);
  }
  return p;
}

/* ---- dtypes: our own rounding and bit layouts ------------------------- */
/* Significand bits (with the implicit one) and minimum normal exponent. */
static inline int dr_dtype_precision(voxconv_dtype_t dt) {
  switch (dt) {
  case VOXCONV_DTYPE_F64: return 53;
  case VOXCONV_DTYPE_F32: return 24;
  case VOXCONV_DTYPE_F16: return 11;
  case VOXCONV_DTYPE_BF16: return 8;

  case VOXCONV_DTYPE_I8:
  case VOXCONV_DTYPE_I32: /* not float formats: the fallback below */
    break;
  }
  return 53;
}
static inline int dr_dtype_emin(voxconv_dtype_t dt) {
  switch (dt) {
  case VOXCONV_DTYPE_F64: return -1022;
  case VOXCONV_DTYPE_F32: return -126;
  case VOXCONV_DTYPE_F16: return -14;
  case VOXCONV_DTYPE_BF16: return -126;

  case VOXCONV_DTYPE_I8:
  case VOXCONV_DTYPE_I32: /* not float formats: the fallback below */
    break;
  }
  return -1022;
}
static inline double dr_dtype_max(voxconv_dtype_t dt) {
  switch (dt) {
  case VOXCONV_DTYPE_F64: return 1.7976931348623157e308;
  case VOXCONV_DTYPE_F32: return 3.4028234663852886e38;
  case VOXCONV_DTYPE_F16: return 65504.0;
  case VOXCONV_DTYPE_BF16: return 3.3895313892515355e38;

  case VOXCONV_DTYPE_I8:
  case VOXCONV_DTYPE_I32: /* not float formats: the fallback below */
    break;
  }
  return 0;
}
static inline size_t dr_dtype_bytes(voxconv_dtype_t dt) {
  return dt == VOXCONV_DTYPE_F64 ? 8 : dt == VOXCONV_DTYPE_F32 ? 4 : 2;
}

/* Unit in the last place of the dtype at magnitude a (the subnormal spacing
 * below the normal range). */
static inline double dr_ulp(double a, voxconv_dtype_t dt) {
  a = fabs(a);
  int e = dr_dtype_emin(dt);
  if (a > 0 && isfinite(a)) {
    int fe;
    frexp(a, &fe); /* a = m * 2^fe, m in [0.5, 1) */
    if (fe - 1 > e)
      e = fe - 1;
  }
  return ldexp(1.0, e - (dr_dtype_precision(dt) - 1));
}

/* Rounds v to the nearest value of dtype (ties to even, overflow to Inf).
 * Doing it in double arithmetic is exact: the scaled value fits 53 bits. */
static inline double dr_round(double v, voxconv_dtype_t dt) {
  if (dt == VOXCONV_DTYPE_F64 || !isfinite(v) || v == 0)
    return v;
  if (dt == VOXCONV_DTYPE_F32)
    return (double)(float)v;
  const double u = dr_ulp(v, dt);
  double q = nearbyint(fabs(v) / u) * u;
  /* Values at or past max + ulp/2 round to Inf (IEEE overflow). */
  const double mx = dr_dtype_max(dt);
  if (q > mx)
    q = INFINITY;
  return v < 0 ? -q : q;
}

static inline uint16_t dr_f16_bits(double v) { /* v already an f16 value */
  uint16_t sign = (uint16_t)(signbit(v) ? 0x8000u : 0);
  double a = fabs(v);
  if (isnan(v))
    return (uint16_t)(sign | 0x7E00u);
  if (isinf(v))
    return (uint16_t)(sign | 0x7C00u);
  if (a < ldexp(1.0, -14)) /* subnormal: multiples of 2^-24 */
    return (uint16_t)(sign | (uint16_t)(a * 16777216.0));
  int fe;
  const double m = frexp(a, &fe); /* a = m * 2^fe */
  const int e = fe - 1;           /* a = 1.f * 2^e */
  const uint16_t mant = (uint16_t)((m * 2.0 - 1.0) * 1024.0);
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | mant);
}
static inline double dr_f16_value(uint16_t b) {
  const int sign = b >> 15, ex = (b >> 10) & 0x1F, man = b & 0x3FF;
  double v;
  if (ex == 0)
    v = ldexp((double)man, -24);
  else if (ex == 31)
    v = man ? NAN : INFINITY;
  else
    v = ldexp((double)(man | 0x400), ex - 25);
  return sign ? -v : v;
}

/* Stores v rounded to dtype at element i; returns the rounded value. */
static inline double dr_store(void *p, voxconv_dtype_t dt, int64_t i,
                              double v) {
  const double r = dr_round(v, dt);
  switch (dt) {
  case VOXCONV_DTYPE_F64: ((double *)p)[i] = r; break;
  case VOXCONV_DTYPE_F32: ((float *)p)[i] = (float)r; break;
  case VOXCONV_DTYPE_F16: ((uint16_t *)p)[i] = dr_f16_bits(r); break;
  case VOXCONV_DTYPE_BF16: {
    /* r is a bf16 value, so it is an f32 whose low 16 bits are zero. */
    const float f = (float)r;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(r))
      u = 0x7FC00000u;
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    break;
  }
  case VOXCONV_DTYPE_I8:
  case VOXCONV_DTYPE_I32: /* not float formats: never stored here */
    break;
  }
  return r;
}
static inline double dr_load(const void *p, voxconv_dtype_t dt, int64_t i) {
  switch (dt) {
  case VOXCONV_DTYPE_F64: return ((const double *)p)[i];
  case VOXCONV_DTYPE_F32: return ((const float *)p)[i];
  case VOXCONV_DTYPE_F16: return dr_f16_value(((const uint16_t *)p)[i]);
  case VOXCONV_DTYPE_BF16: {
    const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case VOXCONV_DTYPE_I8:
  case VOXCONV_DTYPE_I32: /* not float formats */
    break;
  }
  return NAN;
}

static inline const char *dr_dtype_str(voxconv_dtype_t dt) {
  switch (dt) {
  case VOXCONV_DTYPE_F64: return "f64";
  case VOXCONV_DTYPE_F32: return "f32";
  case VOXCONV_DTYPE_F16: return "f16";
  case VOXCONV_DTYPE_BF16: return "bf16";

  case VOXCONV_DTYPE_I8:
  case VOXCONV_DTYPE_I32: /* not float formats: the fallback below */
    break;
  }
  return "?";
}

/* Fills a buffer of dtype with N(0,1) values; ref (optional) gets the
 * rounded values in f64. */
static inline void dr_fill_normal(void *p, voxconv_dtype_t dt, int64_t n,
                                  double *ref) {
  for (int64_t i = 0; i < n; i++) {
    const double r = dr_store(p, dt, i, vc_rand_normal());
    if (ref)
      ref[i] = r;
  }
}

/* ---- geometry --------------------------------------------------------- */
static inline const char *dr_mode_str(voxconv_kmap_mode_t m) {
  switch (m) {
  case VOXCONV_KMAP_SUBMANIFOLD: return "SUBMANIFOLD";
  case VOXCONV_KMAP_STRIDED: return "STRIDED";
  case VOXCONV_KMAP_TRANSPOSED: return "TRANSPOSED";
  case VOXCONV_KMAP_GENERATIVE: return "GENERATIVE";
  case VOXCONV_KMAP_EXPANDING: return "EXPANDING";
  }
  return "?";
}

/* Floor division for any sign of a (b > 0): -1/2 is -1, not 0. */
static inline int32_t dr_floordiv(int32_t a, int32_t b) {
  int32_t q = a / b;
  if ((a % b) != 0 && (a < 0))
    q--;
  return q;
}

/* The header's kernel offsets: along an axis of size k, dilation d, the
 * offsets are j*d - P with P = floor((k-1)/2) * d (padded = 0) or
 * padding[a] (padded = 1); kidx = (jx*ky + jy)*kz + jz. Zeros in the desc
 * mean 1. Returns the kernel volume. */
static inline int dr_kernel_offsets(const voxconv_kmap_desc_t *desc,
                                    int32_t (*off)[3]) {
  int32_t k[3], d[3], p[3];
  for (int a = 0; a < 3; a++) {
    k[a] = desc->kernel_size[a];
    d[a] = desc->dilation[a] ? desc->dilation[a] : 1;
    p[a] = desc->padded ? desc->padding[a] : (k[a] - 1) / 2 * d[a];
  }
  int n = 0;
  for (int jx = 0; jx < k[0]; jx++)
    for (int jy = 0; jy < k[1]; jy++)
      for (int jz = 0; jz < k[2]; jz++) {
        const int j[3] = {jx, jy, jz};
        for (int a = 0; a < 3; a++)
          off[n][a] = j[a] * d[a] - p[a];
        n++;
      }
  return n;
}

/* ---- coordinate sets -------------------------------------------------- */
static inline int dr_coord_cmp(const void *pa, const void *pb) {
  const int32_t *a = (const int32_t *)pa, *b = (const int32_t *)pb;
  for (int c = 0; c < 4; c++)
    if (a[c] != b[c])
      return a[c] < b[c] ? -1 : 1;
  return 0;
}
/* Sorts rows by (b,x,y,z) and drops repeats; returns the new count. */
static inline int64_t dr_sort_unique(int32_t *c, int64_t n) {
  if (n == 0)
    return 0;
  qsort(c, (size_t)n, 4 * sizeof(int32_t), dr_coord_cmp);
  int64_t m = 1;
  for (int64_t i = 1; i < n; i++)
    if (dr_coord_cmp(c + 4 * i, c + 4 * (m - 1)) != 0) {
      memcpy(c + 4 * m, c + 4 * i, 4 * sizeof(int32_t));
      m++;
    }
  return m;
}
static inline void dr_shuffle_rows(int32_t *c, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    const int64_t j = vc_rand_range(0, i);
    int32_t t[4];
    memcpy(t, c + 4 * i, sizeof t);
    memcpy(c + 4 * i, c + 4 * j, sizeof t);
    memcpy(c + 4 * j, t, sizeof t);
  }
}

/* Random set: each cell of batches [0,B) x box [lo, lo+dim) is active with
 * probability `density`; at least one voxel. Rows in random order. */
static inline int32_t *dr_random_coords(int B, const int32_t lo[3],
                                        const int32_t dim[3], double density,
                                        int64_t *n_out) {
  const int64_t cells = (int64_t)B * dim[0] * dim[1] * dim[2];
  int32_t *c = (int32_t *)dr_xmalloc((size_t)cells * 4 * sizeof(int32_t));
  int64_t n = 0;
  for (int b = 0; b < B; b++)
    for (int32_t x = 0; x < dim[0]; x++)
      for (int32_t y = 0; y < dim[1]; y++)
        for (int32_t z = 0; z < dim[2]; z++)
          if (vc_rand_uniform() < density) {
            int32_t *r = c + 4 * n++;
            r[0] = b;
            r[1] = lo[0] + x;
            r[2] = lo[1] + y;
            r[3] = lo[2] + z;
          }
  if (n == 0) {
    c[0] = 0;
    c[1] = lo[0];
    c[2] = lo[1];
    c[3] = lo[2];
    n = 1;
  }
  dr_shuffle_rows(c, n);
  *n_out = n;
  return c;
}

/* The coarse level of fine rows [nf][4] under stride s: batch kept,
 * floor(coordinate / s) per axis, made unique and shuffled (the inputs of a
 * TRANSPOSED map whose outputs are the fine level, the U-Net decoder).
 * Shared by the tests that build such maps so that they derive the coarse
 * set the same way. Returns the rows (nf allocated), *n_coarse of them. */
static inline int32_t *dr_coarse_coords(const int32_t *fine, int64_t nf,
                                        const int32_t s[3], int64_t *n_coarse) {
  int32_t *c = (int32_t *)dr_xmalloc((size_t)nf * 16);
  for (int64_t i = 0; i < nf; i++) {
    c[4 * i] = fine[4 * i];
    for (int a = 0; a < 3; a++)
      c[4 * i + 1 + a] = dr_floordiv(fine[4 * i + 1 + a], s[a]);
  }
  *n_coarse = dr_sort_unique(c, nf);
  dr_shuffle_rows(c, *n_coarse);
  return c;
}

/* Bounding box of a coordinate set: lo and hi inclusive, max batch + 1. */
static inline void dr_bbox(const int32_t *c, int64_t n, int32_t lo[3],
                           int32_t hi[3], int *nbatch) {
  *nbatch = 0;
  for (int a = 0; a < 3; a++) {
    lo[a] = n ? INT32_MAX : 0;
    hi[a] = n ? INT32_MIN : -1;
  }
  for (int64_t i = 0; i < n; i++) {
    if (c[4 * i] + 1 > *nbatch)
      *nbatch = c[4 * i] + 1;
    for (int a = 0; a < 3; a++) {
      if (c[4 * i + 1 + a] < lo[a])
        lo[a] = c[4 * i + 1 + a];
      if (c[4 * i + 1 + a] > hi[a])
        hi[a] = c[4 * i + 1 + a];
    }
  }
}

/* ---- dense boxes ------------------------------------------------------ */
/* A dense grid over batches [0,B) x [lo, lo+dim) holding C doubles per
 * cell, or (when C == 0) only the row index of an active voxel (-1 if
 * none). Everything outside the box reads as zero / inactive. */
typedef struct dr_box {
  int B;
  int32_t lo[3], dim[3];
  int64_t C;
  double *v;    /* [cells][C] */
  int64_t *row; /* [cells] */
} dr_box_t;

static inline int64_t dr_box_cells(const dr_box_t *b) {
  return (int64_t)b->B * b->dim[0] * b->dim[1] * b->dim[2];
}
static inline dr_box_t dr_box_make(int B, const int32_t lo[3],
                                   const int32_t hi[3], int64_t C) {
  dr_box_t b;
  b.B = B;
  for (int a = 0; a < 3; a++) {
    b.lo[a] = lo[a];
    b.dim[a] = hi[a] >= lo[a] ? hi[a] - lo[a] + 1 : 0;
  }
  b.C = C;
  const int64_t cells = dr_box_cells(&b);
  b.v = C ? (double *)dr_xcalloc((size_t)(cells * C), sizeof(double)) : NULL;
  b.row = (int64_t *)dr_xmalloc((size_t)cells * sizeof(int64_t));
  for (int64_t i = 0; i < cells; i++)
    b.row[i] = -1;
  return b;
}
static inline void dr_box_free(dr_box_t *b) {
  free(b->v);
  free(b->row);
  b->v = NULL;
  b->row = NULL;
}
/* Flat cell index of (b,x,y,z) or -1 if outside the box. */
static inline int64_t dr_box_cell(const dr_box_t *bx, int32_t b, int32_t x,
                                  int32_t y, int32_t z) {
  const int32_t p[3] = {x, y, z};
  if (b < 0 || b >= bx->B)
    return -1;
  int64_t idx = b;
  for (int a = 0; a < 3; a++) {
    const int64_t r = (int64_t)p[a] - bx->lo[a];
    if (r < 0 || r >= bx->dim[a])
      return -1;
    idx = idx * bx->dim[a] + r;
  }
  return idx;
}
static inline void dr_box_cell_coord(const dr_box_t *bx, int64_t cell,
                                     int32_t c4[4]) {
  for (int a = 2; a >= 0; a--) {
    c4[1 + a] = bx->lo[a] + (int32_t)(cell % bx->dim[a]);
    cell /= bx->dim[a];
  }
  c4[0] = (int32_t)cell;
}
/* Marks rows of a coordinate set in the box (row index per cell). Returns
 * the number of rows that fell outside the box. */
static inline int64_t dr_box_index(dr_box_t *bx, const int32_t *c,
                                   int64_t n) {
  int64_t outside = 0;
  for (int64_t i = 0; i < n; i++) {
    const int64_t cell =
        dr_box_cell(bx, c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]);
    if (cell < 0)
      outside++;
    else
      bx->row[cell] = i;
  }
  return outside;
}

/* ---- tolerance -------------------------------------------------------- */
/* A result of dtype `dt` computed with fp32 (or, for f64, fp64)
 * accumulation against an fp64 reference from the same (rounded) inputs:
 * allowed error = rounding of the output to dt (a couple of ulps) +
 * accumulation error bounded relative to sum |terms| (absref). */
static inline double dr_tolerance(double ref, double absref,
                                  voxconv_dtype_t dt, double rtol_accum) {
  double t = rtol_accum * absref;
  if (dt == VOXCONV_DTYPE_F16 || dt == VOXCONV_DTYPE_BF16)
    t += 2.0 * dr_ulp(fabs(ref) + t, dt);
  else if (dt == VOXCONV_DTYPE_F32)
    t += dr_ulp(fabs(ref), dt);
  return t + 1e-300;
}
static inline double dr_rtol_accum(voxconv_dtype_t dt) {
  return dt == VOXCONV_DTYPE_F64 ? 1e-12 : 1e-5;
}

#endif
