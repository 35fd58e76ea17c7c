/* Declared input bounds of STRIDED builds (voxconv_kmap_build_bounded) and
 * the outputs' bounds (voxconv_kmap_out_bounds), voxconv.h. Written from
 * the header only, on the CPU and, when there is one, on a GPU:
 *
 *   - a map built with bounds is the map built without, bit for bit:
 *     n_out, the output rows, every pair list (offsets, in_rows, out_rows),
 *     for fresh random row sets in shuffled order with negative
 *     coordinates and several batches, strides 1-3 (anisotropic too),
 *     exact and loose bounds -- boxes whose strided cells need <= 31 bits
 *     (the CUDA build's 32-bit keys), 32-63 bits (compact 64-bit keys) and
 *     64 bits (full keys), synchronous and deferred;
 *   - voxconv_kmap_out_bounds equals the least and greatest field of the
 *     output rows computed here, every field written (poisoned first);
 *     an empty map gives lo 0, hi -1; a deferred map before its count is
 *     INVALID_ARGUMENT on CUDA; other modes INVALID_ARGUMENT;
 *   - the bounds of one level's outputs build the next level (the way the
 *     Python package chains a network's pooled levels) to the plain map;
 *   - a row outside the declared bounds is OUT_OF_RANGE naming the lowest
 *     such row: at once when synchronous, from voxconv_kmap_wait when
 *     deferred;
 *   - bad arguments: lo > hi, a field outside its limits, bounds for a
 *     non-STRIDED mode, defer outside {0, 1}, NULL pointers;
 *   - the CUDA build's one-block sort at its size limit (8,192 and 8,193
 *     inputs), and the multi-block steps on a small set. */
#include "vc_test.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  voxconv_handle_t *h;
  int cuda;
  const char *name;
} backend_t;

typedef struct {
  int64_t n_out, n_pairs;
  int K;
  int32_t *coords; /* [n_out][4] */
  int64_t *offsets;
  int32_t *in_rows, *out_rows;
} host_map_t;

static void host_map_free(host_map_t *m) {
  free(m->coords);
  free(m->offsets);
  free(m->in_rows);
  free(m->out_rows);
  memset(m, 0, sizeof *m);
}

/* Backend copy of host rows (the caller frees it with put_free). */
static int32_t *put(const backend_t *b, const int32_t *host, int64_t n) {
  const size_t bytes = (size_t)(n > 0 ? n : 1) * 16;
  if (!b->cuda) {
    int32_t *c = (int32_t *)malloc(bytes);
    if (n > 0)
      memcpy(c, host, (size_t)n * 16);
    return c;
  }
  void *d = NULL;
  if (voxconv_malloc(b->h, bytes, &d) != VOXCONV_STATUS_SUCCESS)
    return NULL;
  if (n > 0 && voxconv_memcpy(b->h, d, host, (size_t)n * 16,
                              VOXCONV_MEMCPY_HOST_TO_BACKEND) !=
                   VOXCONV_STATUS_SUCCESS)
    return NULL;
  return (int32_t *)d;
}

static void put_free(const backend_t *b, void *p) {
  if (b->cuda)
    voxconv_free(b->h, p);
  else
    free(p);
}

static void get(const backend_t *b, void *dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return;
  if (b->cuda)
    voxconv_memcpy(b->h, dst, src, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST);
  else
    memcpy(dst, src, bytes);
}

/* Everything the map holds that a caller can read, on the host. */
static int fetch(const backend_t *b, voxconv_kmap_t *m, host_map_t *out) {
  memset(out, 0, sizeof *out);
  if (voxconv_kmap_wait(b->h, m) != VOXCONV_STATUS_SUCCESS)
    return 0;
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(m, &info);
  out->n_out = info.n_out;
  out->n_pairs = info.n_pairs;
  out->K = info.kernel_volume;
  const int32_t *oc = NULL;
  voxconv_kmap_out_coords(m, &oc);
  out->coords = (int32_t *)malloc((size_t)(out->n_out + 1) * 16);
  get(b, out->coords, oc, (size_t)out->n_out * 16);
  out->offsets = (int64_t *)malloc((size_t)(out->K + 1) * sizeof(int64_t));
  out->in_rows = (int32_t *)malloc((size_t)(out->n_pairs + 1) * 4);
  out->out_rows = (int32_t *)malloc((size_t)(out->n_pairs + 1) * 4);
  int32_t *d_in = out->in_rows, *d_out = out->out_rows;
  if (b->cuda) {
    void *pi = NULL, *po = NULL;
    const size_t bytes = (size_t)(out->n_pairs + 1) * 4;
    voxconv_malloc(b->h, bytes, &pi);
    voxconv_malloc(b->h, bytes, &po);
    d_in = (int32_t *)pi, d_out = (int32_t *)po;
  }
  const voxconv_status_t st =
      voxconv_kmap_get_pairs(b->h, m, out->offsets, d_in, d_out);
  if (b->cuda) {
    get(b, out->in_rows, d_in, (size_t)out->n_pairs * 4);
    get(b, out->out_rows, d_out, (size_t)out->n_pairs * 4);
    voxconv_free(b->h, d_in);
    voxconv_free(b->h, d_out);
  }
  return st == VOXCONV_STATUS_SUCCESS;
}

static void expect_same_map(const char *tag, const host_map_t *a,
                            const host_map_t *b) {
  VC_EXPECT(a->n_out == b->n_out && a->n_pairs == b->n_pairs && a->K == b->K,
            "%s: n_out %lld / %lld, n_pairs %lld / %lld", tag,
            (long long)a->n_out, (long long)b->n_out, (long long)a->n_pairs,
            (long long)b->n_pairs);
  if (a->n_out != b->n_out || a->n_pairs != b->n_pairs || a->K != b->K)
    return;
  VC_EXPECT(memcmp(a->coords, b->coords, (size_t)a->n_out * 16) == 0,
            "%s: output rows differ", tag);
  VC_EXPECT(memcmp(a->offsets, b->offsets, (size_t)(a->K + 1) * 8) == 0,
            "%s: pair offsets differ", tag);
  VC_EXPECT(memcmp(a->in_rows, b->in_rows, (size_t)a->n_pairs * 4) == 0 &&
                memcmp(a->out_rows, b->out_rows, (size_t)a->n_pairs * 4) == 0,
            "%s: pair lists differ", tag);
}

static voxconv_coords_bounds_t bounds_of(const int32_t *c, int64_t n) {
  voxconv_coords_bounds_t bb;
  for (int f = 0; f < 4; f++)
    bb.lo[f] = 0, bb.hi[f] = -1;
  for (int64_t i = 0; i < n; i++)
    for (int f = 0; f < 4; f++) {
      if (i == 0 || c[4 * i + f] < bb.lo[f])
        bb.lo[f] = c[4 * i + f];
      if (i == 0 || c[4 * i + f] > bb.hi[f])
        bb.hi[f] = c[4 * i + f];
    }
  return bb;
}

static void expect_out_bounds(const char *tag, voxconv_kmap_t *m,
                              const host_map_t *hm) {
  voxconv_coords_bounds_t got;
  memset(&got, 0x5A, sizeof got); /* poison: every field must be written */
  VC_EXPECT_STATUS(NULL, voxconv_kmap_out_bounds(m, &got),
                   VOXCONV_STATUS_SUCCESS);
  const voxconv_coords_bounds_t want = bounds_of(hm->coords, hm->n_out);
  VC_EXPECT(memcmp(&got, &want, sizeof got) == 0,
            "%s: out bounds lo (%d,%d,%d,%d) hi (%d,%d,%d,%d), want lo "
            "(%d,%d,%d,%d) hi (%d,%d,%d,%d)",
            tag, got.lo[0], got.lo[1], got.lo[2], got.lo[3], got.hi[0],
            got.hi[1], got.hi[2], got.hi[3], want.lo[0], want.lo[1],
            want.lo[2], want.lo[3], want.hi[0], want.hi[1], want.hi[2],
            want.hi[3]);
}

/* n unique rows, batches 0..nb-1, each axis in [o - e, o + e], shuffled. */
static int32_t *random_rows(int64_t n, int nb, int32_t o, int32_t e,
                            int64_t *n_out) {
  int32_t *c = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * 16);
  for (int64_t i = 0; i < n; i++) {
    c[4 * i] = (int32_t)vc_rand_range(0, nb - 1);
    for (int a = 1; a < 4; a++)
      c[4 * i + a] = o + (int32_t)vc_rand_range(-e, e);
  }
  n = vc_sort_unique_coords(c, n);
  for (int64_t i = n - 1; i > 0; i--) { /* the build must sort them */
    const int64_t j = vc_rand_range(0, i);
    int32_t t[4];
    memcpy(t, c + 4 * i, 16);
    memcpy(c + 4 * i, c + 4 * j, 16);
    memcpy(c + 4 * j, t, 16);
  }
  *n_out = n;
  return c;
}

static voxconv_kmap_desc_t strided_desc(int k, int sx, int sy, int sz) {
  voxconv_kmap_desc_t d = vc_test_kmap_desc(VOXCONV_KMAP_STRIDED, k, k, k, 1, 1);
  d.stride[0] = sx, d.stride[1] = sy, d.stride[2] = sz;
  return d;
}

/* One row set: plain against bounded (exact and the given loose bounds;
 * both defer modes), the outputs' bounds, and the next level chained. */
static void check_set(const backend_t *b, const char *what, const int32_t *rows,
                      int64_t n, const voxconv_kmap_desc_t *d,
                      const voxconv_coords_bounds_t *loose) {
  char tag[192];
  int32_t *dev = put(b, rows, n);
  voxconv_coords_t in = {dev, n, {1, 1, 1}};
  voxconv_kmap_t *plain = NULL;
  host_map_t ref;
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build(b->h, d, &in, NULL, &plain),
                   VOXCONV_STATUS_SUCCESS);
  if (!plain || !fetch(b, plain, &ref)) {
    VC_EXPECT(0, "%s %s: plain build failed", b->name, what);
    put_free(b, dev);
    return;
  }
  snprintf(tag, sizeof tag, "%s %s plain", b->name, what);
  expect_out_bounds(tag, plain, &ref);
  const voxconv_coords_bounds_t exact = bounds_of(rows, n);
  const voxconv_coords_bounds_t *which[2] = {&exact, loose};
  for (int w = 0; w < 2; w++)
    for (int defer = 0; defer < 2; defer++) {
      voxconv_kmap_t *m = NULL;
      snprintf(tag, sizeof tag, "%s %s %s bounds, defer %d", b->name, what,
               w ? "loose" : "exact", defer);
      VC_EXPECT_STATUS(b->h,
                       voxconv_kmap_build_bounded(b->h, d, &in, which[w],
                                                  defer, &m),
                       VOXCONV_STATUS_SUCCESS);
      if (!m)
        continue;
      if (defer && b->cuda && n > 0) {
        /* Nothing has asked for the count yet. */
        voxconv_coords_bounds_t early;
        VC_EXPECT_STATUS(NULL, voxconv_kmap_out_bounds(m, &early),
                         VOXCONV_STATUS_INVALID_ARGUMENT);
      }
      host_map_t got;
      VC_EXPECT(fetch(b, m, &got), "%s: fetch", tag);
      expect_same_map(tag, &ref, &got);
      expect_out_bounds(tag, m, &got);
      host_map_free(&got);
      voxconv_kmap_destroy(b->h, m);
    }
  /* The next level, built from this one's outputs with their bounds. */
  if (ref.n_out > 0) {
    voxconv_coords_bounds_t ob;
    voxconv_kmap_out_bounds(plain, &ob);
    const int32_t *oc = NULL;
    voxconv_kmap_out_coords(plain, &oc);
    voxconv_coords_t next = {oc, ref.n_out, {d->stride[0], d->stride[1],
                                             d->stride[2]}};
    voxconv_kmap_t *p2 = NULL, *m2 = NULL;
    host_map_t r2, g2;
    VC_EXPECT_STATUS(b->h, voxconv_kmap_build(b->h, d, &next, NULL, &p2),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, d, &next, &ob, 1, &m2),
                     VOXCONV_STATUS_SUCCESS);
    if (p2 && m2 && fetch(b, p2, &r2) && fetch(b, m2, &g2)) {
      snprintf(tag, sizeof tag, "%s %s next level", b->name, what);
      expect_same_map(tag, &r2, &g2);
      host_map_free(&r2);
      host_map_free(&g2);
    }
    voxconv_kmap_destroy(b->h, p2);
    voxconv_kmap_destroy(b->h, m2);
  }
  host_map_free(&ref);
  voxconv_kmap_destroy(b->h, plain);
  put_free(b, dev);
}

/* Bounds the rows break: one field of a random row, and the lowest row
 * outside them is the one reported. */
static void check_violation(const backend_t *b, const int32_t *rows, int64_t n,
                            const voxconv_kmap_desc_t *d) {
  voxconv_coords_bounds_t bb = bounds_of(rows, n);
  const int64_t r = vc_rand_range(0, n - 1);
  const int f = (int)vc_rand_range(1, 3);
  /* Shrink the box to end just below row r's value in field f. */
  bb.hi[f] = rows[4 * r + f] - 1;
  if (bb.hi[f] < bb.lo[f]) { /* r is the least there: cut from below */
    bb.hi[f] = bounds_of(rows, n).hi[f];
    bb.lo[f] = rows[4 * r + f] + 1;
  }
  int64_t first = -1;
  for (int64_t i = 0; i < n && first < 0; i++)
    if (rows[4 * i + f] < bb.lo[f] || rows[4 * i + f] > bb.hi[f])
      first = i;
  char row_text[48];
  snprintf(row_text, sizeof row_text, "row %lld ", (long long)first);
  int32_t *dev = put(b, rows, n);
  voxconv_coords_t in = {dev, n, {1, 1, 1}};
  for (int defer = 0; defer < 2; defer++) {
    voxconv_kmap_t *m = NULL;
    voxconv_status_t st = voxconv_kmap_build_bounded(b->h, d, &in, &bb, defer, &m);
    if (st == VOXCONV_STATUS_SUCCESS && m) {
      VC_EXPECT(defer && b->cuda,
                "%s defer %d: a violated bound passed a build that checks "
                "at once",
                b->name, defer);
      st = voxconv_kmap_wait(b->h, m);
    }
    VC_EXPECT(st == VOXCONV_STATUS_OUT_OF_RANGE,
              "%s defer %d: %s (want OUT_OF_RANGE): %s", b->name, defer,
              voxconv_status_string(st), voxconv_get_last_error(b->h));
    const char *msg = voxconv_get_last_error(b->h);
    VC_EXPECT(strstr(msg, "in_bounds") && strstr(msg, row_text),
              "%s defer %d: message does not name the bounds and %s: %s",
              b->name, defer, row_text, msg);
    if (m)
      voxconv_kmap_destroy(b->h, m);
  }
  put_free(b, dev);
}

static void check_arguments(const backend_t *b, const int32_t *rows, int64_t n) {
  int32_t *dev = put(b, rows, n);
  voxconv_coords_t in = {dev, n, {1, 1, 1}};
  const voxconv_kmap_desc_t d = strided_desc(2, 2, 2, 2);
  const voxconv_coords_bounds_t ok = bounds_of(rows, n);
  voxconv_kmap_t *m = NULL;
  voxconv_coords_bounds_t bad = ok;
  bad.lo[2] = bad.hi[2] + 1;
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, &bad, 0, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  bad = ok;
  bad.lo[0] = -1;
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, &bad, 0, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  bad = ok;
  bad.hi[0] = VOXCONV_BATCH_MAX + 1;
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, &bad, 0, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  bad = ok;
  bad.hi[3] = VOXCONV_COORD_MAX + 1;
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, &bad, 1, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  bad = ok;
  bad.lo[1] = VOXCONV_COORD_MIN - 1;
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, &bad, 1, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, &ok, 2, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT(m == NULL, "%s: a refused build returned a map", b->name);
  const voxconv_kmap_desc_t sd =
      vc_test_kmap_desc(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1);
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &sd, &in, &ok, 0, &m),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, &ok, 0, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  /* NULL bounds: the plain build. */
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &in, NULL, 0, &m),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_coords_bounds_t out;
  VC_EXPECT_STATUS(NULL, voxconv_kmap_out_bounds(m, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_kmap_out_bounds(NULL, &out),
                   VOXCONV_STATUS_NULL_POINTER);
  voxconv_kmap_destroy(b->h, m);
  m = NULL;
  VC_EXPECT_STATUS(b->h, vc_test_kmap_build(b->h, &sd, &in, NULL, &m),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(NULL, voxconv_kmap_out_bounds(m, &out),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  voxconv_kmap_destroy(b->h, m);
  /* No rows: any valid bounds; the outputs' bounds are empty. */
  voxconv_coords_t none = {dev, 0, {1, 1, 1}};
  m = NULL;
  VC_EXPECT_STATUS(b->h, voxconv_kmap_build_bounded(b->h, &d, &none, &ok, 1, &m),
                   VOXCONV_STATUS_SUCCESS);
  if (m) {
    VC_EXPECT_STATUS(b->h, voxconv_kmap_wait(b->h, m), VOXCONV_STATUS_SUCCESS);
    memset(&out, 0x5A, sizeof out);
    VC_EXPECT_STATUS(NULL, voxconv_kmap_out_bounds(m, &out),
                     VOXCONV_STATUS_SUCCESS);
    int empty = 1;
    for (int f = 0; f < 4; f++)
      empty &= out.lo[f] == 0 && out.hi[f] == -1;
    VC_EXPECT(empty, "%s: an empty map's bounds are not lo 0 hi -1", b->name);
    voxconv_kmap_destroy(b->h, m);
  }
  put_free(b, dev);
}

static void run(const backend_t *b) {
  char what[160];
  static const int strides[][3] = {{2, 2, 2}, {3, 3, 3}, {2, 1, 3}, {1, 1, 1}};
  for (int t = 0; t < 4; t++) {
    const int k = t == 1 ? 3 : 2;
    const voxconv_kmap_desc_t d =
        strided_desc(k, strides[t][0], strides[t][1], strides[t][2]);
    /* A small box (32-bit keys), a wide one (compact 64-bit keys) and
     * bounds of the whole coordinate range (full keys). */
    int64_t n = 0;
    const int32_t o = (int32_t)vc_rand_range(-20000, 20000);
    int32_t *rows = random_rows(vc_rand_range(300, 3000), 3, o,
                                (int32_t)vc_rand_range(5, 40), &n);
    voxconv_coords_bounds_t loose = bounds_of(rows, n);
    for (int f = 1; f < 4; f++) {
      loose.lo[f] -= (int32_t)vc_rand_range(0, 9);
      loose.hi[f] += (int32_t)vc_rand_range(0, 9);
    }
    snprintf(what, sizeof what, "small box s%d%d%d", strides[t][0],
             strides[t][1], strides[t][2]);
    check_set(b, what, rows, n, &d, &loose);
    check_violation(b, rows, n, &d);
    if (t == 0)
      check_arguments(b, rows, n);
    free(rows);

    rows = random_rows(vc_rand_range(500, 4000), 1, o, 6000, &n);
    loose = bounds_of(rows, n);
    loose.lo[0] = 0, loose.hi[0] = VOXCONV_BATCH_MAX;
    snprintf(what, sizeof what, "wide box s%d%d%d", strides[t][0],
             strides[t][1], strides[t][2]);
    check_set(b, what, rows, n, &d, &loose);
    for (int f = 1; f < 4; f++) /* every coordinate allowed */
      loose.lo[f] = VOXCONV_COORD_MIN, loose.hi[f] = VOXCONV_COORD_MAX;
    snprintf(what, sizeof what, "whole range s%d%d%d", strides[t][0],
             strides[t][1], strides[t][2]);
    check_set(b, what, rows, n, &d, &loose);
    free(rows);
  }
  /* The CUDA build sorts up to 8,192 inputs with 32-bit keys in one block
   * (src/cuda/cuda_kmap_small.cuh) and larger sets with CUB: both sides of
   * that limit, against the plain build (full keys: always CUB). */
  for (int64_t want = 8192; want <= 8193; want++) {
    int64_t n = 0;
    int32_t *rows = random_rows(want + 3000, 3, -7, 40, &n);
    VC_EXPECT(n >= want, "only %lld unique rows for %lld", (long long)n,
              (long long)want);
    n = n < want ? n : want; /* shuffled: a prefix is a random subset */
    const voxconv_kmap_desc_t d = strided_desc(2, 2, 2, 2);
    voxconv_coords_bounds_t loose = bounds_of(rows, n);
    loose.hi[3] += 3;
    snprintf(what, sizeof what, "one-block sort limit n=%lld", (long long)n);
    check_set(b, what, rows, n, &d, &loose);
    free(rows);
  }
  /* Workload A's level 0 when the data is there: a real scan's extent. */
  int64_t na = 0;
  int32_t *a = vc_workload_a_coords(&na);
  if (a && b->cuda) {
    const voxconv_kmap_desc_t d = strided_desc(2, 2, 2, 2);
    const voxconv_coords_bounds_t exact = bounds_of(a, na);
    check_set(b, "workload A level 0", a, na, &d, &exact);
  }
  free(a);
}

int main(void) {
  vc_test_init("test_kmap_bounds");
  backend_t cpu = {NULL, 0, "cpu"};
  voxconv_handle_desc_t hd = {0};
  hd.backend = VOXCONV_BACKEND_CPU;
  VC_REQUIRE_OK(NULL, voxconv_create(&cpu.h, &hd));
  run(&cpu);
  voxconv_destroy(cpu.h);
  int devices = 0;
  if (voxconv_has_cuda() && voxconv_device_count(&devices) ==
                                VOXCONV_STATUS_SUCCESS &&
      devices > 0) {
    backend_t gpu = {NULL, 1, "cuda"};
    hd.backend = VOXCONV_BACKEND_CUDA;
    VC_REQUIRE_OK(NULL, voxconv_create(&gpu.h, &hd));
    run(&gpu);
    /* The build worker issues deferred builds from the map it is given:
     * the bounds travel with it. */
    VC_REQUIRE_OK(gpu.h, voxconv_handle_set_build_worker(gpu.h, 1));
    gpu.name = "cuda worker";
    int64_t n = 0;
    int32_t *rows = random_rows(2000, 2, -300, 30, &n);
    const voxconv_kmap_desc_t d = strided_desc(2, 2, 2, 2);
    const voxconv_coords_bounds_t exact = bounds_of(rows, n);
    check_set(&gpu, "small box s222", rows, n, &d, &exact);
    check_violation(&gpu, rows, n, &d);
    voxconv_destroy(gpu.h);
    /* The multi-block steps on the same small set (VOXCONV_KMAP_LEAN=0,
     * read at handle creation), as every set took them before the
     * one-block kernels. */
    setenv("VOXCONV_KMAP_LEAN", "0", 1);
    VC_REQUIRE_OK(NULL, voxconv_create(&gpu.h, &hd));
    unsetenv("VOXCONV_KMAP_LEAN");
    gpu.name = "cuda multi-block";
    check_set(&gpu, "small box s222", rows, n, &d, &exact);
    check_violation(&gpu, rows, n, &d);
    free(rows);
    voxconv_destroy(gpu.h);
  } else {
    printf("test_kmap_bounds: no GPU, the CUDA half skipped (the CPU half "
           "ran)\n");
  }
  return vc_test_finish();
}
