/* Bad input, one test per case: each asserts the exact status AND that
 * voxconv_get_last_error names the problem (the argument, the offending
 * value or row). Also the valid corner cases next to them: N = 0, negative
 * coordinates, coordinates at the limits, merge_duplicates, NaN / Inf
 * propagation exactly as a dense convolution. CPU handle; written only
 * against include/voxconv.h. */
#include "dense_ref.h"
#include "vc_test.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static voxconv_handle_t *h;
static const voxconv_dtype_t F64 = VOXCONV_DTYPE_F64;
static const voxconv_dtype_t F32 = VOXCONV_DTYPE_F32;

/* Case-insensitive substring. */
static int has_word(const char *msg, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = msg; *p; p++) {
    size_t i = 0;
    while (i < n && p[i] &&
           tolower((unsigned char)p[i]) == tolower((unsigned char)word[i]))
      i++;
    if (i == n)
      return 1;
  }
  return n == 0;
}

/* Checks status and that the message (of `hh`, NULL = thread) holds every
 * key word of a NULL-terminated list. */
static void expect_fail_at(int line, const char *what,
                           const voxconv_handle_t *hh, voxconv_status_t got,
                           voxconv_status_t want, const char *const *words) {
  const char *msg = voxconv_get_last_error(hh);
  if (getenv("VOXCONV_TEST_VERBOSE"))
    printf("line %d: %s -> %s \"%s\"\n", line, what,
           voxconv_status_string(got), msg);
  vc_test_checks++;
  if (got != want) {
    vc_test_failures++;
    fprintf(stderr, "FAIL line %d: %s returned %s, want %s (message: \"%s\")\n",
            line, what, voxconv_status_string(got),
            voxconv_status_string(want), msg);
    return;
  }
  for (int i = 0; words && words[i]; i++)
    if (!has_word(msg, words[i])) {
      vc_test_failures++;
      fprintf(stderr,
              "FAIL line %d: %s: message \"%s\" does not name \"%s\"\n", line,
              what, msg, words[i]);
      return;
    }
}
#define EXPECT_FAIL(hh, call, want, ...)                                       \
  do {                                                                         \
    const char *const words_[] = {__VA_ARGS__, NULL};                          \
    expect_fail_at(__LINE__, #call, (hh), (call), (want), words_);             \
  } while (0)
#define EXPECT_OK(call) VC_EXPECT_STATUS(h, call, VOXCONV_STATUS_SUCCESS)

/* ---- fixtures --------------------------------------------------------- */
/* A small valid set: a 4x4x4 block of batch 0 with every other voxel. */
static int32_t g_coords[64 * 4];
static int64_t g_n;

static void make_coords(void) {
  g_n = 0;
  for (int x = 0; x < 4; x++)
    for (int y = 0; y < 4; y++)
      for (int z = 0; z < 4; z++)
        if ((x + y + z) % 2 == 0) {
          int32_t *r = g_coords + 4 * g_n++;
          r[0] = 0, r[1] = x, r[2] = y, r[3] = z;
        }
}

static voxconv_kmap_desc_t subm3(void) {
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = VOXCONV_KMAP_SUBMANIFOLD;
  d.kernel_size[0] = d.kernel_size[1] = d.kernel_size[2] = 3;
  return d;
}
static voxconv_kmap_desc_t strided(int32_t k, int32_t s) {
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = VOXCONV_KMAP_STRIDED;
  for (int a = 0; a < 3; a++) {
    d.kernel_size[a] = k;
    d.stride[a] = s;
  }
  return d;
}

static voxconv_kmap_t *build(const voxconv_kmap_desc_t *d, const int32_t *c,
                             int64_t n) {
  voxconv_coords_t in = {c, n, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  const voxconv_status_t st = voxconv_kmap_build(h, d, &in, NULL, &m);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "fixture kmap_build: %s: %s",
            voxconv_status_string(st), voxconv_get_last_error(h));
  return st == VOXCONV_STATUS_SUCCESS ? m : NULL;
}

static int64_t n_out_of(const voxconv_kmap_t *m) {
  voxconv_kmap_info_t info;
  if (voxconv_kmap_get_info(m, &info) != VOXCONV_STATUS_SUCCESS)
    return -1;
  return info.n_out;
}

/* ---- 1. NULL pointers ------------------------------------------------- */
static void test_null_pointers(void) {
  const voxconv_kmap_desc_t d = subm3();
  voxconv_coords_t in = {g_coords, g_n, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  /* Handle: the message goes to the thread. */
  EXPECT_FAIL(NULL, voxconv_kmap_build(NULL, &d, &in, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "handle");
  EXPECT_FAIL(h, voxconv_kmap_build(h, NULL, &in, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "desc");
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, NULL, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "in", "null");
  voxconv_coords_t in_nodata = {NULL, g_n, {1, 1, 1}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in_nodata, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "data", "null");
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "kmap", "null");

  m = build(&d, g_coords, g_n);
  if (!m)
    return;
  voxconv_kmap_info_t info;
  EXPECT_FAIL(NULL, voxconv_kmap_get_info(NULL, &info),
              VOXCONV_STATUS_NULL_POINTER, "kmap");
  EXPECT_FAIL(NULL, voxconv_kmap_get_info(m, NULL),
              VOXCONV_STATUS_NULL_POINTER, "info");
  EXPECT_FAIL(NULL, voxconv_kmap_out_coords(m, NULL),
              VOXCONV_STATUS_NULL_POINTER, "coords");
  EXPECT_FAIL(h, voxconv_kmap_verify(h, NULL, &in),
              VOXCONV_STATUS_NULL_POINTER, "kmap");
  EXPECT_FAIL(h, voxconv_kmap_verify(h, m, NULL),
              VOXCONV_STATUS_NULL_POINTER, "in");

  double x[32 * 2], w[27 * 2 * 3], y[32 * 3];
  memset(x, 0, sizeof x);
  memset(w, 0, sizeof w);
  const voxconv_feats_t fx = {x, g_n, 2, F64}, fy = {y, g_n, 3, F64};
  const voxconv_weights_t fw = {w, 27, 2, 3, F64};
  EXPECT_FAIL(NULL, voxconv_conv_forward(NULL, m, &fx, &fw, &fy, NULL),
              VOXCONV_STATUS_NULL_POINTER, "handle");
  EXPECT_FAIL(h, voxconv_conv_forward(h, NULL, &fx, &fw, &fy, NULL),
              VOXCONV_STATUS_NULL_POINTER, "kmap");
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, NULL, &fw, &fy, NULL),
              VOXCONV_STATUS_NULL_POINTER, "x", "null");
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, NULL, &fy, NULL),
              VOXCONV_STATUS_NULL_POINTER, "w", "null");
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "y", "null");
  const voxconv_feats_t fx0 = {NULL, g_n, 2, F64}, fy0 = {NULL, g_n, 3, F64};
  const voxconv_weights_t fw0 = {NULL, 27, 2, 3, F64};
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx0, &fw, &fy, NULL),
              VOXCONV_STATUS_NULL_POINTER, "x", "data");
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw0, &fy, NULL),
              VOXCONV_STATUS_NULL_POINTER, "w", "data");
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, &fy0, NULL),
              VOXCONV_STATUS_NULL_POINTER, "y", "data");
  /* Backward passes name their own arguments. */
  const voxconv_feats_t fdy = {y, g_n, 3, F64}, fdx = {x, g_n, 2, F64};
  EXPECT_FAIL(h, voxconv_conv_dgrad(h, m, NULL, &fw, &fdx, NULL),
              VOXCONV_STATUS_NULL_POINTER, "dy", "null");
  EXPECT_FAIL(h, voxconv_conv_dgrad(h, m, &fdy, &fw, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "dx", "null");
  EXPECT_FAIL(h, voxconv_conv_wgrad(h, m, &fx, &fdy, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "dw", "null");
  /* Depthwise and pooling. */
  const voxconv_feats_t fdw = {w, 27, 2, F64}, fy2 = {y, g_n, 2, F64};
  EXPECT_FAIL(h, voxconv_depthwise_forward(h, m, &fx, NULL, &fy2, NULL),
              VOXCONV_STATUS_NULL_POINTER, "w", "null");
  EXPECT_FAIL(h, voxconv_pool_forward(h, m, VOXCONV_POOL_MAX, NULL, &fy2),
              VOXCONV_STATUS_NULL_POINTER, "x", "null");
  /* MAX backward needs x and y; AVG and SUM do not. */
  EXPECT_FAIL(h, voxconv_pool_backward(h, m, VOXCONV_POOL_MAX, NULL, &fy2,
                                       &fy2, &fdx),
              VOXCONV_STATUS_NULL_POINTER, "x", "null");
  double dyb[32 * 2], dxb[32 * 2];
  memset(dyb, 0, sizeof dyb);
  const voxconv_feats_t fdy2 = {dyb, g_n, 2, F64}, fdx2 = {dxb, g_n, 2, F64};
  EXPECT_OK(voxconv_pool_backward(h, m, VOXCONV_POOL_AVG, NULL, NULL, &fdy2,
                                  &fdx2));
  EXPECT_FAIL(h, voxconv_unpool_forward(h, m, NULL, &fy2),
              VOXCONV_STATUS_NULL_POINTER, "x", "null");
  (void)fdw;
  /* merge_duplicates */
  int64_t nu = 0;
  int32_t outc[64 * 4];
  EXPECT_FAIL(h, voxconv_merge_duplicates(h, NULL, outc, &nu, NULL),
              VOXCONV_STATUS_NULL_POINTER, "in");
  EXPECT_FAIL(h, voxconv_merge_duplicates(h, &in, NULL, &nu, NULL),
              VOXCONV_STATUS_NULL_POINTER, "out_coords");
  EXPECT_FAIL(h, voxconv_merge_duplicates(h, &in, outc, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "n_unique");
  int64_t po[28];
  EXPECT_FAIL(NULL, voxconv_kmap_get_pairs(NULL, m, po, NULL, NULL),
              VOXCONV_STATUS_NULL_POINTER, "handle");
  /* All of offsets / in_rows / out_rows may be NULL (skipped). */
  EXPECT_OK(voxconv_kmap_get_pairs(h, m, NULL, NULL, NULL));
  voxconv_kmap_destroy(h, m);
}

/* ---- 2. N = 0 is valid ------------------------------------------------ */
static void test_empty(void) {
  const int32_t dummy[4] = {0, 0, 0, 0};
  for (int mode = 0; mode < 4; mode++) {
    voxconv_kmap_desc_t d = subm3();
    d.mode = (voxconv_kmap_mode_t)mode;
    if (mode != VOXCONV_KMAP_SUBMANIFOLD)
      d.stride[0] = d.stride[1] = d.stride[2] = 2;
    const int tr = mode == VOXCONV_KMAP_TRANSPOSED;
    voxconv_coords_t in = {dummy, 0, {tr ? 2 : 1, tr ? 2 : 1, tr ? 2 : 1}};
    if (mode == VOXCONV_KMAP_GENERATIVE)
      in.tensor_stride[0] = in.tensor_stride[1] = in.tensor_stride[2] = 2;
    /* TRANSPOSED: no inputs but three given outputs: they must come out 0. */
    const int32_t outs[12] = {0, 0, 0, 0, 0, 1, 0, 0, 1, 5, 5, 5};
    voxconv_coords_t out = {outs, tr ? 3 : 0, {1, 1, 1}};
    voxconv_kmap_t *m = NULL;
    voxconv_status_t st = voxconv_kmap_build(h, &d, &in, tr ? &out : NULL, &m);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "empty %s build: %s: %s",
              dr_mode_str(d.mode), voxconv_status_string(st),
              voxconv_get_last_error(h));
    if (st != VOXCONV_STATUS_SUCCESS)
      continue;
    voxconv_kmap_info_t info;
    EXPECT_OK(voxconv_kmap_get_info(m, &info));
    VC_EXPECT(info.n_in == 0 && info.n_out == (tr ? 3 : 0) && info.n_pairs == 0,
              "empty %s: n_in %lld n_out %lld n_pairs %lld", dr_mode_str(d.mode),
              (long long)info.n_in, (long long)info.n_out,
              (long long)info.n_pairs);
    int64_t po[28];
    EXPECT_OK(voxconv_kmap_get_pairs(h, m, po, NULL, NULL));
    VC_EXPECT(po[0] == 0 && po[27] == 0, "empty offsets %lld..%lld",
              (long long)po[0], (long long)po[27]);
    double x[1] = {0}, w[27 * 2 * 3], y[3 * 3], dw[27 * 2 * 3];
    for (int i = 0; i < 27 * 6; i++)
      w[i] = 1.0;
    const voxconv_feats_t fx = {x, 0, 2, F64}, fy = {y, info.n_out, 3, F64};
    const voxconv_weights_t fw = {w, 27, 2, 3, F64}, fdw = {dw, 27, 2, 3, F64};
    vc_poison(y, F64, 9);
    EXPECT_OK(voxconv_conv_forward(h, m, &fx, &fw, &fy, NULL));
    VC_EXPECT(info.n_out == 0 || (y[0] == 0 && y[4] == 0 && y[8] == 0),
              "outputs without pairs are 0: %g %g %g", y[0], y[4], y[8]);
    EXPECT_OK(voxconv_conv_dgrad(h, m, &fy, &fw, &fx, NULL));
    /* wgrad with no pairs: dW is all zero (written, not left alone). */
    vc_poison(dw, F64, 27 * 6);
    EXPECT_OK(voxconv_conv_wgrad(h, m, &fx, &fy, &fdw, NULL));
    int zeros = 1;
    for (int i = 0; i < 27 * 6; i++)
      zeros &= dw[i] == 0.0;
    VC_EXPECT(zeros, "empty %s wgrad: dW not all zero", dr_mode_str(d.mode));
    const voxconv_feats_t fyp = {y, info.n_out, 2, F64};
    EXPECT_OK(voxconv_pool_forward(h, m, VOXCONV_POOL_MAX, &fx, &fyp));
    EXPECT_OK(voxconv_depthwise_forward(
        h, m, &fx, &(voxconv_feats_t){w, 27, 2, F64}, &fyp, NULL));
    voxconv_kmap_destroy(h, m);
  }
  /* merge_duplicates of nothing. */
  voxconv_coords_t in = {dummy, 0, {1, 1, 1}};
  int32_t outc[4];
  int64_t nu = -1;
  EXPECT_OK(voxconv_merge_duplicates(h, &in, outc, &nu, NULL));
  VC_EXPECT(nu == 0, "merge of 0 rows gave %lld", (long long)nu);
}

/* ---- 3. coordinate range ---------------------------------------------- */
static void test_out_of_range(void) {
  const voxconv_kmap_desc_t d = subm3();
  struct {
    int col;
    int32_t v;
    const char *word;
  } bad[] = {{1, 131072, "131072"},   {1, -131072, "-131072"},
             {2, 131072, "131072"},   {2, -200000, "-200000"},
             {3, 131072, "131072"},   {3, -131072, "-131072"},
             {0, 1024, "1024"},       {0, -1, "-1"},
             {1, INT32_MAX, "2147483647"}, {3, INT32_MIN, "-2147483648"}};
  for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
    int32_t c[64 * 4];
    memcpy(c, g_coords, sizeof c);
    const int row = 7;
    c[4 * row + bad[t].col] = bad[t].v;
    voxconv_coords_t in = {c, g_n, {1, 1, 1}};
    voxconv_kmap_t *m = NULL;
    char what[96];
    snprintf(what, sizeof what, "kmap_build with column %d = %d", bad[t].col,
             bad[t].v);
    const char *const words[] = {bad[t].word, "row 7",
                                 bad[t].col == 0 ? "batch" : NULL, NULL};
    expect_fail_at(__LINE__, what, h, voxconv_kmap_build(h, &d, &in, NULL, &m),
                   VOXCONV_STATUS_OUT_OF_RANGE, words);
    VC_EXPECT(m == NULL, "no map on failure");
  }
  /* TRANSPOSED output coordinates are checked too. */
  voxconv_kmap_desc_t dt = subm3();
  dt.mode = VOXCONV_KMAP_TRANSPOSED;
  dt.stride[0] = dt.stride[1] = dt.stride[2] = 2;
  const int32_t coarse[4] = {0, 0, 0, 0};
  int32_t fine[8] = {0, 0, 0, 0, 0, 1, 140000, 1};
  voxconv_coords_t in = {coarse, 1, {2, 2, 2}}, out = {fine, 2, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &dt, &in, &out, &m),
              VOXCONV_STATUS_OUT_OF_RANGE, "140000", "row 1");
}

/* Negative coordinates and the exact limits are valid; neighbours beyond
 * the limits simply do not exist; generated outputs beyond them are an
 * error. */
static void test_limits(void) {
  const int32_t c[16] = {0,    VOXCONV_COORD_MIN, -5, VOXCONV_COORD_MAX,
                         1023, VOXCONV_COORD_MAX, 0,  VOXCONV_COORD_MIN,
                         0,    -1,                -1, -1,
                         0,    VOXCONV_COORD_MIN + 1, -5, VOXCONV_COORD_MAX};
  voxconv_kmap_desc_t d = subm3();
  voxconv_kmap_t *m = build(&d, c, 4);
  if (m) {
    /* Rows 0 and 3 are x-neighbours: pairs (0->3, k with dx=-1... ) only. */
    voxconv_kmap_info_t info;
    voxconv_kmap_get_info(m, &info);
    VC_EXPECT(info.n_pairs == 4 + 2, "limits: %lld pairs, want 6 (4 centre + "
              "rows 0<->3)", (long long)info.n_pairs);
    double x[4] = {1, 2, 3, 4}, w[27], y[4];
    for (int k = 0; k < 27; k++)
      w[k] = k + 1;
    const voxconv_feats_t fx = {x, 4, 1, F64}, fy = {y, 4, 1, F64};
    const voxconv_weights_t fw = {w, 27, 1, 1, F64};
    EXPECT_OK(voxconv_conv_forward(h, m, &fx, &fw, &fy, NULL));
    /* Centre k = 13 (w = 14). Row 0 (x=MIN) sees row 3 at dx=+1: k = 22
     * (w = 23); row 3 sees row 0 at dx=-1: k = 4 (w = 5). */
    VC_EXPECT(y[0] == 1 * 14 + 4 * 23 && y[1] == 2 * 14 && y[2] == 3 * 14 &&
                  y[3] == 4 * 14 + 1 * 5,
              "limits conv: %g %g %g %g", y[0], y[1], y[2], y[3]);
    voxconv_kmap_destroy(h, m);
  }
  /* STRIDED from negative coordinates: floor, not truncation. */
  const int32_t cn[8] = {0, -1, -1, -1, 0, -3, 0, 5};
  d = strided(1, 2);
  m = build(&d, cn, 2);
  if (m) {
    const int32_t *oc = NULL;
    voxconv_kmap_out_coords(m, &oc);
    VC_EXPECT(n_out_of(m) == 2 && oc && oc[1] == -2 && oc[2] == 0 &&
                  oc[3] == 2 && oc[5] == -1 && oc[6] == -1 && oc[7] == -1,
              "floor(-1/2) must be -1, floor(-3/2) -2");
    voxconv_kmap_destroy(h, m);
  }
  /* GENERATIVE from the limit: s*i + off = MAX + 1 is out of range. */
  voxconv_kmap_desc_t g = subm3();
  g.mode = VOXCONV_KMAP_GENERATIVE;
  const int32_t edge[4] = {0, VOXCONV_COORD_MAX, 0, 0};
  voxconv_coords_t in = {edge, 1, {1, 1, 1}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &g, &in, NULL, &m),
              VOXCONV_STATUS_OUT_OF_RANGE, "131072");
}

/* ---- 4. duplicates and merge ------------------------------------------ */
static void test_duplicates(void) {
  int32_t c[8 * 4] = {0, 1, 2, 3, 0, 5, 5, 5, 1, 1, 2, 3, 0, 1, 2, 3,
                      0, -4, 0, 0, 0, 5, 5, 5, 0, 0, 0, 0, 0, 5, 5, 5};
  const voxconv_kmap_desc_t d = subm3();
  voxconv_coords_t in = {c, 8, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  /* Rows 0 and 3 are the first repeated pair (also 1, 5, 7). */
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_DUPLICATE_COORDS, "duplicate");
  VC_EXPECT(m == NULL, "no map on duplicate");
  const voxconv_kmap_desc_t ds = strided(2, 2);
  EXPECT_FAIL(h, voxconv_kmap_build(h, &ds, &in, NULL, &m),
              VOXCONV_STATUS_DUPLICATE_COORDS, "duplicate");

  int32_t u[8 * 4];
  int64_t nu = -1, row_map[8];
  EXPECT_OK(voxconv_merge_duplicates(h, &in, u, &nu, row_map));
  /* Unique sorted set: (0,-4,0,0) (0,0,0,0) (0,1,2,3) (0,5,5,5) (1,1,2,3). */
  const int32_t want[20] = {0, -4, 0, 0, 0, 0, 0, 0, 0, 1,
                            2, 3,  0, 5, 5, 5, 1, 1, 2, 3};
  const int64_t want_map[8] = {2, 3, 4, 2, 0, 3, 1, 3};
  VC_EXPECT(nu == 5 && memcmp(u, want, sizeof want) == 0,
            "merge: %lld unique rows", (long long)nu);
  VC_EXPECT(memcmp(row_map, want_map, sizeof want_map) == 0,
            "merge row_map %lld %lld %lld %lld %lld %lld %lld %lld",
            (long long)row_map[0], (long long)row_map[1], (long long)row_map[2],
            (long long)row_map[3], (long long)row_map[4], (long long)row_map[5],
            (long long)row_map[6], (long long)row_map[7]);
  EXPECT_OK(voxconv_merge_duplicates(h, &in, u, &nu, NULL));
  voxconv_coords_t merged = {u, nu, {1, 1, 1}};
  m = NULL;
  EXPECT_OK(voxconv_kmap_build(h, &d, &merged, NULL, &m));
  if (m)
    voxconv_kmap_destroy(h, m);
  /* Duplicates among TRANSPOSED outputs are rejected too. */
  voxconv_kmap_desc_t dt = subm3();
  dt.mode = VOXCONV_KMAP_TRANSPOSED;
  dt.stride[0] = dt.stride[1] = dt.stride[2] = 2;
  const int32_t coarse[4] = {0, 0, 0, 0};
  const int32_t fine[8] = {0, 1, 1, 1, 0, 1, 1, 1};
  voxconv_coords_t cin = {coarse, 1, {2, 2, 2}}, cout = {fine, 2, {1, 1, 1}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &dt, &cin, &cout, &m),
              VOXCONV_STATUS_DUPLICATE_COORDS, "duplicate");
  /* merge also range-checks. */
  int32_t bad[4] = {0, 0, 131072, 0};
  voxconv_coords_t inb = {bad, 1, {1, 1, 1}};
  EXPECT_FAIL(h, voxconv_merge_duplicates(h, &inb, u, &nu, NULL),
              VOXCONV_STATUS_OUT_OF_RANGE, "131072");
}

/* ---- 5. shapes and dtypes --------------------------------------------- */
static void test_shapes(void) {
  const voxconv_kmap_desc_t d = subm3();
  voxconv_kmap_t *m = build(&d, g_coords, g_n);
  if (!m)
    return;
  static double x[32 * 8], w[27 * 8 * 8], y[32 * 8];
  memset(x, 0, sizeof x);
  memset(w, 0, sizeof w);
  const voxconv_feats_t fx = {x, g_n, 4, F64}, fy = {y, g_n, 5, F64};
  const voxconv_weights_t fw_cin = {w, 27, 3, 5, F64};
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw_cin, &fy, NULL),
              VOXCONV_STATUS_SHAPE_MISMATCH, "cin", "4", "3");
  const voxconv_weights_t fw_cout = {w, 27, 4, 6, F64};
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw_cout, &fy, NULL),
              VOXCONV_STATUS_SHAPE_MISMATCH, "cout", "5", "6");
  const voxconv_weights_t fw_k = {w, 26, 4, 5, F64};
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw_k, &fy, NULL),
              VOXCONV_STATUS_SHAPE_MISMATCH, "26", "27");
  /* dgrad / wgrad shapes. */
  const voxconv_weights_t fw = {w, 27, 4, 5, F64};
  const voxconv_feats_t fdy_bad = {y, g_n, 6, F64};
  EXPECT_FAIL(h, voxconv_conv_dgrad(h, m, &fdy_bad, &fw, &fx, NULL),
              VOXCONV_STATUS_SHAPE_MISMATCH, "6", "5");
  const voxconv_weights_t fdw_bad = {w, 27, 4, 4, F64};
  EXPECT_FAIL(h, voxconv_conv_wgrad(h, m, &fx, &fy, &fdw_bad, NULL),
              VOXCONV_STATUS_SHAPE_MISMATCH, "4", "5");
  /* Depthwise: w channels and rows. */
  const voxconv_feats_t fy4 = {y, g_n, 4, F64};
  const voxconv_feats_t dw_c = {w, 27, 3, F64}, dw_k = {w, 8, 4, F64};
  EXPECT_FAIL(h, voxconv_depthwise_forward(h, m, &fx, &dw_c, &fy4, NULL),
              VOXCONV_STATUS_SHAPE_MISMATCH, "3", "4");
  EXPECT_FAIL(h, voxconv_depthwise_forward(h, m, &fx, &dw_k, &fy4, NULL),
              VOXCONV_STATUS_SHAPE_MISMATCH, "8", "27");
  /* Pooling channels. */
  EXPECT_FAIL(h, voxconv_pool_forward(h, m, VOXCONV_POOL_SUM, &fx, &fy),
              VOXCONV_STATUS_SHAPE_MISMATCH, "4", "5");
  EXPECT_FAIL(h, voxconv_pool_forward(h, m, (voxconv_pool_mode_t)9, &fx, &fy4),
              VOXCONV_STATUS_INVALID_ARGUMENT, "9");
  /* Dtype mismatch in every position. */
  const voxconv_feats_t fx32 = {x, g_n, 4, F32}, fy32 = {y, g_n, 5, F32};
  const voxconv_weights_t fw32 = {w, 27, 4, 5, F32};
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx32, &fw, &fy, NULL),
              VOXCONV_STATUS_DTYPE_MISMATCH, "f32", "f64");
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw32, &fy, NULL),
              VOXCONV_STATUS_DTYPE_MISMATCH, "f32", "f64");
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, &fy32, NULL),
              VOXCONV_STATUS_DTYPE_MISMATCH, "f32", "f64");
  const voxconv_weights_t fdw32 = {w, 27, 4, 5, F32};
  EXPECT_FAIL(h, voxconv_conv_wgrad(h, m, &fx, &fy, &fdw32, NULL),
              VOXCONV_STATUS_DTYPE_MISMATCH, "f32", "f64");
  const voxconv_feats_t fxbad = {x, g_n, 4, (voxconv_dtype_t)11};
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fxbad, &fw, &fy, NULL),
              VOXCONV_STATUS_INVALID_ARGUMENT, "11");
  const voxconv_feats_t fyp = {y, g_n, 4, F32};
  EXPECT_FAIL(h, voxconv_pool_forward(h, m, VOXCONV_POOL_MAX, &fx, &fyp),
              VOXCONV_STATUS_DTYPE_MISMATCH, "f32", "f64");
  /* Algorithm strings (header, "Algorithm choice"): every malformed
   * choice is INVALID_ARGUMENT with a message listing the valid names. */
  static const char *const bad_algos[] = {
      "no_such_algo",                      /* unknown */
      "cpu_depthwise",                     /* does not implement conv fwd */
      "[]",                                /* empty list */
      "[auto]",                            /* auto inside a list */
      "[cpu_gather_gemm, all]",            /* all inside a list */
      "cpu_gather_gemm, cpu_gather_gemm",  /* list without brackets */
      "[cpu_gather_gemm",                  /* unclosed */
  };
  for (size_t i = 0; i < sizeof bad_algos / sizeof bad_algos[0]; i++) {
    voxconv_conv_options_t o;
    memset(&o, 0, sizeof o);
    o.fwd_algo = bad_algos[i];
    char what[96];
    snprintf(what, sizeof what, "conv_forward with fwd_algo \"%s\"",
             bad_algos[i]);
    const char *const words[] = {"cpu_gather_gemm", NULL};
    expect_fail_at(__LINE__, what, h,
                   voxconv_conv_forward(h, m, &fx, &fw, &fy, &o),
                   VOXCONV_STATUS_INVALID_ARGUMENT, words);
  }
  {
    voxconv_conv_options_t o;
    memset(&o, 0, sizeof o);
    o.fwd_algo = "no_such_algo";
    EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, &fy, &o),
                VOXCONV_STATUS_INVALID_ARGUMENT, "no_such_algo");
    /* Case and blanks do not matter; a valid name runs. */
    o.fwd_algo = "  CPU_Gather_GEMM ";
    EXPECT_OK(voxconv_conv_forward(h, m, &fx, &fw, &fy, &o));
    o.fwd_algo = "[ cpu_gather_gemm ]";
    EXPECT_OK(voxconv_conv_forward(h, m, &fx, &fw, &fy, &o));
    o.fwd_algo = NULL;
    o.fp16_accum = (voxconv_tristate_t)5;
    EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, &fy, &o),
                VOXCONV_STATUS_INVALID_ARGUMENT, "fp16_accum", "5");
    o.fp16_accum = VOXCONV_UNSET;
    o.deterministic = (voxconv_tristate_t)-1;
    EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, &fy, &o),
                VOXCONV_STATUS_INVALID_ARGUMENT, "deterministic", "-1");
  }
  /* Output aliasing an input (the header is silent; the library refuses
   * in-place operation, which is the safe answer). */
  const voxconv_feats_t fy_alias = {x, g_n, 5, F64};
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, &fy_alias, NULL),
              VOXCONV_STATUS_INVALID_ARGUMENT, "overlap");
  /* Depthwise dtype mismatch. */
  const voxconv_feats_t dw32 = {w, 27, 4, F32};
  EXPECT_FAIL(h, voxconv_depthwise_forward(h, m, &fx, &dw32, &fy4, NULL),
              VOXCONV_STATUS_DTYPE_MISMATCH, "f32", "f64");
  voxconv_kmap_destroy(h, m);
}

/* ---- 6. geometry descriptors ------------------------------------------ */
static void test_desc(void) {
  voxconv_coords_t in = {g_coords, g_n, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  voxconv_kmap_desc_t d = subm3();
  d.kernel_size[1] = 0;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "kernel", "0");
  d = subm3();
  d.kernel_size[2] = 8;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "kernel", "8");
  d = subm3();
  d.kernel_size[0] = -3;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "kernel", "-3");
  /* Stride with submanifold. */
  d = subm3();
  d.stride[1] = 2;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "stride", "2");
  d = strided(2, 65);
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "stride", "65");
  d = strided(2, -1);
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "stride", "-1");
  d = subm3();
  d.dilation[0] = 65;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "dilation", "65");
  d = subm3();
  d.mode = (voxconv_kmap_mode_t)5;
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "mode", "5");
  /* Negative row count. */
  voxconv_coords_t neg = {g_coords, -1, {1, 1, 1}};
  d = subm3();
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &neg, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "-1");
  /* Transposed without output coordinates: `out` is required. */
  d = subm3();
  d.mode = VOXCONV_KMAP_TRANSPOSED;
  d.stride[0] = d.stride[1] = d.stride[2] = 2;
  voxconv_coords_t in2 = {g_coords, g_n, {2, 2, 2}};
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in2, NULL, &m),
              VOXCONV_STATUS_NULL_POINTER, "out");
  /* ... and `out` must be NULL otherwise. */
  d = subm3();
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, &in, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "out");
  /* Transposed tensor strides must satisfy out * stride == in. */
  d.mode = VOXCONV_KMAP_TRANSPOSED;
  d.stride[0] = d.stride[1] = d.stride[2] = 2;
  voxconv_coords_t out1 = {g_coords, g_n, {1, 1, 1}};
  /* The header is silent on the status; the library answers
   * SHAPE_MISMATCH, which fits (a geometry mismatch between the levels). */
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &in, &out1, &m),
              VOXCONV_STATUS_SHAPE_MISMATCH, "tensor_stride", "1 * 2 != 1");
  EXPECT_OK(voxconv_kmap_build(h, &d, &in2, &out1, &m));
  if (m)
    voxconv_kmap_destroy(h, m);
  /* Negative tensor stride. */
  voxconv_coords_t badts = {g_coords, g_n, {1, -2, 1}};
  d = subm3();
  EXPECT_FAIL(h, voxconv_kmap_build(h, &d, &badts, NULL, &m),
              VOXCONV_STATUS_INVALID_ARGUMENT, "tensor", "-2");
}

/* ---- 7. maps used with other data ------------------------------------- */
static void test_kmap_mismatch(void) {
  const voxconv_kmap_desc_t d = subm3();
  voxconv_kmap_t *m = build(&d, g_coords, g_n);
  if (!m)
    return;
  static double x[40 * 2], w[27 * 2 * 2], y[40 * 2];
  memset(x, 0, sizeof x);
  memset(w, 0, sizeof w);
  const voxconv_weights_t fw = {w, 27, 2, 2, F64};
  const voxconv_feats_t fx_more = {x, g_n + 1, 2, F64};
  const voxconv_feats_t fx = {x, g_n, 2, F64}, fy = {y, g_n, 2, F64};
  const voxconv_feats_t fy_less = {y, g_n - 1, 2, F64};
  char nin[32], nmore[32], nless[32];
  snprintf(nin, sizeof nin, "%lld", (long long)g_n);
  snprintf(nmore, sizeof nmore, "%lld", (long long)g_n + 1);
  snprintf(nless, sizeof nless, "%lld", (long long)g_n - 1);
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx_more, &fw, &fy, NULL),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nmore);
  EXPECT_FAIL(h, voxconv_conv_forward(h, m, &fx, &fw, &fy_less, NULL),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nless);
  EXPECT_FAIL(h, voxconv_conv_dgrad(h, m, &fy, &fw, &fx_more, NULL),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nmore);
  EXPECT_FAIL(h, voxconv_conv_wgrad(h, m, &fx_more, &fy, &fw, NULL),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nmore);
  EXPECT_FAIL(h, voxconv_pool_forward(h, m, VOXCONV_POOL_AVG, &fx_more, &fy),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nmore);
  EXPECT_FAIL(h, voxconv_depthwise_forward(
                     h, m, &fx_more, &(voxconv_feats_t){w, 27, 2, F64}, &fy,
                     NULL),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nmore);
  /* Unpooling: coarse side has n_out rows, fine side n_in. */
  EXPECT_FAIL(h, voxconv_unpool_forward(h, m, &fy_less, &fx),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nless);
  EXPECT_FAIL(h, voxconv_unpool_backward(h, m, &fx_more, &fy),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nmore);
  EXPECT_FAIL(h, voxconv_pool_backward(h, m, VOXCONV_POOL_SUM, NULL, NULL,
                                       &fy_less, &fx),
              VOXCONV_STATUS_KMAP_MISMATCH, nin, nless);

  /* verify: the same coordinates pass; different ones of the same count,
   * a permutation, or another count fail. */
  voxconv_coords_t same = {g_coords, g_n, {1, 1, 1}};
  EXPECT_OK(voxconv_kmap_verify(h, m, &same));
  int32_t other[64 * 4];
  memcpy(other, g_coords, sizeof other);
  other[4 * 11 + 3] += 1; /* (x+y+z) odd now: a different, unique voxel */
  voxconv_coords_t diff = {other, g_n, {1, 1, 1}};
  EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &diff),
              VOXCONV_STATUS_KMAP_MISMATCH, "coord");
  memcpy(other, g_coords, sizeof other);
  int32_t t4[4];
  memcpy(t4, other, 16);
  memcpy(other, other + 4, 16);
  memcpy(other + 4, t4, 16);
  voxconv_coords_t perm = {other, g_n, {1, 1, 1}};
  EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &perm),
              VOXCONV_STATUS_KMAP_MISMATCH, "coord");
  voxconv_coords_t fewer = {g_coords, g_n - 1, {1, 1, 1}};
  EXPECT_FAIL(h, voxconv_kmap_verify(h, m, &fewer),
              VOXCONV_STATUS_KMAP_MISMATCH, nless, nin);
  voxconv_kmap_destroy(h, m);
}

/* ---- 8. NaN / Inf propagate exactly like a dense conv ------------------ */
/* For SUBMANIFOLD k=3 on the fixture, the outputs that the poisoned input
 * row r touches are the rows o with coords(o) = coords(r) - off_k for some
 * k, i.e. every active voxel in the 3x3x3 cube around r. */
static int touches(int64_t o, int64_t r) {
  for (int a = 1; a < 4; a++)
    if (abs(g_coords[4 * o + a] - g_coords[4 * r + a]) > 1)
      return 0;
  return g_coords[4 * o] == g_coords[4 * r];
}

static void test_nonfinite(void) {
  const voxconv_kmap_desc_t d = subm3();
  voxconv_kmap_t *m = build(&d, g_coords, g_n);
  if (!m)
    return;
  const int64_t cin = 3, cout = 2, r = 9, c_bad = 1;
  int n_algos = voxconv_algo_count();
  for (int dti = 0; dti < 2; dti++) {
    const voxconv_dtype_t dt = dti ? F32 : F64;
    for (int kind = 0; kind < 2; kind++) { /* NaN, +Inf */
      const double bad = kind ? INFINITY : NAN;
      void *x = dr_xmalloc((size_t)(g_n * cin) * 8);
      void *w = dr_xmalloc((size_t)(27 * cin * cout) * 8);
      void *y = dr_xmalloc((size_t)(g_n * cout) * 8);
      void *dw = dr_xmalloc((size_t)(27 * cin * cout) * 8);
      /* Positive finite data, so Inf cannot meet -Inf and turn into NaN
       * except where the weights flip its sign: use positive weights. */
      for (int64_t i = 0; i < g_n * cin; i++)
        dr_store(x, dt, i, 0.5 + vc_rand_uniform());
      for (int64_t i = 0; i < 27 * cin * cout; i++)
        dr_store(w, dt, i, 0.5 + vc_rand_uniform());
      dr_store(x, dt, r * cin + c_bad, bad);
      for (int v = -1; v < n_algos; v++) {
        voxconv_conv_options_t o;
        memset(&o, 0, sizeof o);
        const char *name = NULL;
        if (v >= 0) {
          voxconv_algo_info_t info;
          if (voxconv_algo_get_info(v, &info) != VOXCONV_STATUS_SUCCESS ||
              info.backend != VOXCONV_BACKEND_CPU ||
              !(info.passes & (1u << VOXCONV_PASS_CONV_FWD)))
            continue;
          name = info.name;
          o.fwd_algo = o.wgrad_algo = name;
        }
        const voxconv_feats_t fx = {x, g_n, cin, dt}, fy = {y, g_n, cout, dt};
        const voxconv_weights_t fw = {w, 27, cin, cout, dt};
        const voxconv_weights_t fdw = {dw, 27, cin, cout, dt};
        vc_poison(y, dt, g_n * cout);
        voxconv_status_t st = voxconv_conv_forward(h, m, &fx, &fw, &fy, &o);
        VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s forward [%s]: %s",
                  kind ? "Inf" : "NaN", name ? name : "default",
                  voxconv_get_last_error(h));
        if (st != VOXCONV_STATUS_SUCCESS)
          continue;
        int64_t wrong = 0;
        for (int64_t oo = 0; oo < g_n; oo++)
          for (int64_t co = 0; co < cout; co++) {
            const double v2 = dr_load(y, dt, oo * cout + co);
            const int want_bad = touches(oo, r);
            const int ok = want_bad ? (kind ? (isinf(v2) && v2 > 0) : isnan(v2))
                                    : isfinite(v2);
            wrong += !ok;
          }
        VC_EXPECT(wrong == 0, "%s %s forward [%s]: %lld outputs differ from "
                  "the dense pattern", dr_dtype_str(dt), kind ? "Inf" : "NaN",
                  name ? name : "default", (long long)wrong);
        /* wgrad with dy = 1: dW[k][c_bad][*] is non-finite exactly for the
         * offsets k through which row r feeds some output. */
        for (int64_t i = 0; i < g_n * cout; i++)
          dr_store(y, dt, i, 1.0);
        vc_poison(dw, dt, 27 * cin * cout);
        st = voxconv_conv_wgrad(h, m, &fx, &fy, &fdw, &o);
        VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "wgrad: %s",
                  voxconv_get_last_error(h));
        if (st != VOXCONV_STATUS_SUCCESS)
          continue;
        int32_t off[27][3];
        dr_kernel_offsets(&d, off);
        wrong = 0;
        for (int k = 0; k < 27; k++) {
          /* Does output r - off_k exist? (pair: i = o + off_k) */
          int exists = 0;
          for (int64_t oo = 0; oo < g_n; oo++)
            if (g_coords[4 * oo] == g_coords[4 * r] &&
                g_coords[4 * oo + 1] + off[k][0] == g_coords[4 * r + 1] &&
                g_coords[4 * oo + 2] + off[k][1] == g_coords[4 * r + 2] &&
                g_coords[4 * oo + 3] + off[k][2] == g_coords[4 * r + 3])
              exists = 1;
          for (int64_t ci = 0; ci < cin; ci++)
            for (int64_t co = 0; co < cout; co++) {
              const double v2 = dr_load(dw, dt, (k * cin + ci) * cout + co);
              const int want_bad = exists && ci == c_bad;
              const int ok =
                  want_bad ? (kind ? (isinf(v2) && v2 > 0) : isnan(v2))
                           : isfinite(v2);
              wrong += !ok;
            }
        }
        VC_EXPECT(wrong == 0, "%s %s wgrad [%s]: %lld dW entries differ from "
                  "the dense pattern", dr_dtype_str(dt), kind ? "Inf" : "NaN",
                  name ? name : "default", (long long)wrong);
      }
      /* MAX pooling: NaN propagates to every window holding it (channel
       * c_bad only); +Inf wins its windows. */
      {
        const voxconv_kmap_desc_t dp = strided(2, 2);
        voxconv_kmap_t *mp = build(&dp, g_coords, g_n);
        if (mp) {
          const int64_t no = n_out_of(mp);
          void *yp = dr_xmalloc((size_t)(no * cin) * 8);
          const voxconv_feats_t fx = {x, g_n, cin, dt}, fyp = {yp, no, cin, dt};
          vc_poison(yp, dt, no * cin);
          EXPECT_OK(voxconv_pool_forward(h, mp, VOXCONV_POOL_MAX, &fx, &fyp));
          const int32_t *oc = NULL;
          voxconv_kmap_out_coords(mp, &oc);
          int64_t wrong = 0;
          for (int64_t oo = 0; oc && oo < no; oo++)
            for (int64_t ch = 0; ch < cin; ch++) {
              const double v2 = dr_load(yp, dt, oo * cin + ch);
              int mine = ch == c_bad;
              for (int a = 1; a < 4; a++)
                mine = mine && oc[4 * oo + a] == dr_floordiv(g_coords[4 * r + a], 2);
              const int ok = mine ? (kind ? (isinf(v2) && v2 > 0) : isnan(v2))
                                  : isfinite(v2);
              wrong += !ok;
            }
          VC_EXPECT(wrong == 0, "%s %s MAX pool: %lld outputs differ",
                    dr_dtype_str(dt), kind ? "Inf" : "NaN", (long long)wrong);
          free(yp);
          voxconv_kmap_destroy(h, mp);
        }
      }
      free(x), free(w), free(y), free(dw);
    }
  }
  voxconv_kmap_destroy(h, m);
}

int main(void) {
  vc_test_init("test_bad_input");
  voxconv_handle_desc_t hd;
  memset(&hd, 0, sizeof hd);
  hd.backend = VOXCONV_BACKEND_CPU;
  hd.num_threads = 2;
  VC_REQUIRE_OK(NULL, voxconv_create(&h, &hd));
  make_coords();
  test_null_pointers();
  test_empty();
  test_out_of_range();
  test_limits();
  test_duplicates();
  test_shapes();
  test_desc();
  test_kmap_mismatch();
  test_nonfinite();
  voxconv_destroy(h);
  return vc_test_finish();
}
