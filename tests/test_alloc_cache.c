/* The handle's block cache in front of a caller's allocator (alloc_cache.c,
 * voxconv_allocator_t in voxconv.h), on the CPU backend with a counting
 * allocator that mallocs exactly what it is asked (so ASan sees any write
 * past a class size the cache handed out):
 *  - repeated map builds and convolutions stop calling the allocator once
 *    the cache is warm, and give the same bits as with the cache off;
 *  - the sizes asked are the documented classes (recomputed here);
 *  - release / destroy give every block back; the idle bound holds;
 *  - a failing allocator makes the handle give its idle blocks back and
 *    retry;
 *  - handles that share a kernel map must share its allocator: another
 *    one (or the built-in one) is refused with a named status. */
#include "vc_test.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t allocs, frees, live, fail_above; /* fail_above: live-bytes limit */
  int64_t live_bytes, last_request;
  /* Every block: pointer and size (a small table is enough here). */
  void *ptr[4096];
  int64_t size[4096];
} counting_t;

static void *c_alloc(void *ctx, size_t bytes, void *stream) {
  counting_t *c = (counting_t *)ctx;
  (void)stream;
  c->last_request = (int64_t)bytes;
  if (c->fail_above && c->live_bytes + (int64_t)bytes > c->fail_above)
    return NULL;
  void *p = malloc(bytes);
  if (!p)
    return NULL;
  for (int i = 0; i < 4096; ++i)
    if (!c->ptr[i]) {
      c->ptr[i] = p;
      c->size[i] = (int64_t)bytes;
      break;
    }
  c->allocs++;
  c->live++;
  c->live_bytes += (int64_t)bytes;
  return p;
}

static void c_free(void *ctx, void *p, void *stream) {
  counting_t *c = (counting_t *)ctx;
  (void)stream;
  for (int i = 0; i < 4096; ++i)
    if (c->ptr[i] == p) {
      c->live_bytes -= c->size[i];
      c->ptr[i] = NULL;
      break;
    }
  c->frees++;
  c->live--;
  free(p);
}

/* An allocator that hands the most recently freed address out again for
 * any size (every chunk holds 1 MiB) and remembers the size it was last
 * asked for: the way a caching allocator reuses addresses, made certain. */
#define RECYCLE_CHUNK ((size_t)1 << 20)
typedef struct {
  void *stack[64];
  int n;
  void *ptr[256];
  size_t size[256];
} recycling_t;

static void *r_alloc(void *ctx, size_t bytes, void *stream) {
  recycling_t *r = (recycling_t *)ctx;
  (void)stream;
  if (bytes > RECYCLE_CHUNK)
    return NULL;
  void *p = r->n ? r->stack[--r->n] : malloc(RECYCLE_CHUNK);
  for (int i = 0; p && i < 256; ++i)
    if (!r->ptr[i] || r->ptr[i] == p) {
      r->ptr[i] = p;
      r->size[i] = bytes;
      break;
    }
  return p;
}

static void r_free(void *ctx, void *p, void *stream) {
  recycling_t *r = (recycling_t *)ctx;
  (void)stream;
  if (r->n < 64)
    r->stack[r->n++] = p;
  else
    free(p);
}

static size_t r_size(const recycling_t *r, const void *p) {
  for (int i = 0; i < 256; ++i)
    if (r->ptr[i] == p)
      return r->size[i];
  return 0;
}

static voxconv_handle_t *make_handle_with(voxconv_allocator_t a) {
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  d.allocator = &a;
  voxconv_handle_t *h = NULL;
  return voxconv_create(&h, &d) == VOXCONV_STATUS_SUCCESS ? h : NULL;
}

/* A block freed through another handle, whose address the allocator then
 * hands back for a smaller request: the cache must size it by the new
 * request (a record left from the first life would file the small block
 * under the large class and hand it out for a large request). */
static void check_address_reuse_across_handles(void) {
  recycling_t *r = (recycling_t *)calloc(1, sizeof *r);
  voxconv_allocator_t a = {r_alloc, r_free, r};
  voxconv_handle_t *h1 = make_handle_with(a), *h2 = make_handle_with(a);
  VC_EXPECT(h1 && h2, "create failed");
  if (h1 && h2) {
    void *p = NULL, *q = NULL, *big = NULL;
    voxconv_malloc(h1, 600000, &p);
    voxconv_free(h2, p);            /* to the allocator: p on its stack */
    voxconv_malloc(h1, 1000, &q);   /* the allocator returns p again */
    VC_EXPECT(q == p, "the recycling allocator did not reuse the address");
    voxconv_free(h1, q);            /* kept by h1: a 1 KiB block */
    voxconv_malloc(h1, 600000, &big);
    VC_EXPECT(big && r_size(r, big) >= 600000,
              "a 600000-byte request got a block the allocator sized %zu",
              big ? r_size(r, big) : (size_t)0);
    voxconv_free(h1, big);
  }
  voxconv_destroy(h1);
  voxconv_destroy(h2);
  for (int i = 0; i < r->n; ++i)
    free(r->stack[i]);
  free(r);
}

/* Handles that share kernel maps must share one allocator (voxconv.h): a
 * map used or destroyed through a handle with another one (the built-in
 * one, or another ctx) is refused, and freed once, by its own. */
static void check_maps_need_one_allocator(const int32_t *coords, int64_t n) {
  counting_t *c = (counting_t *)calloc(1, sizeof *c);
  counting_t *other = (counting_t *)calloc(1, sizeof *other);
  const voxconv_allocator_t a = {c_alloc, c_free, c};
  const voxconv_allocator_t b = {c_alloc, c_free, other};
  voxconv_handle_t *h1 = make_handle_with(a), *h2 = make_handle_with(a);
  voxconv_handle_t *hb = make_handle_with(b), *hn = NULL;
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  VC_EXPECT(h1 && h2 && hb && voxconv_create(&hn, &d) == VOXCONV_STATUS_SUCCESS,
            "create failed");
  voxconv_kmap_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.mode = VOXCONV_KMAP_SUBMANIFOLD;
  desc.kernel_size[0] = desc.kernel_size[1] = desc.kernel_size[2] = 3;
  const voxconv_coords_t in = {coords, n, {1, 1, 1}};
  voxconv_kmap_t *m = NULL, *mn = NULL;
  if (h1 && h2 && hb && hn &&
      voxconv_kmap_build(h1, &desc, &in, NULL, &m) == VOXCONV_STATUS_SUCCESS &&
      voxconv_kmap_build(hn, &desc, &in, NULL, &mn) == VOXCONV_STATUS_SUCCESS) {
    float *x = (float *)calloc((size_t)n * 4, sizeof(float));
    float *w = (float *)calloc(27 * 4 * 4, sizeof(float));
    float *y = (float *)calloc((size_t)n * 4, sizeof(float));
    const voxconv_feats_t fx = {x, n, 4, VOXCONV_DTYPE_F32};
    const voxconv_weights_t fw = {w, 27, 4, 4, VOXCONV_DTYPE_F32};
    const voxconv_feats_t fy = {y, n, 4, VOXCONV_DTYPE_F32};
    VC_EXPECT_STATUS(h2, voxconv_conv_forward(h2, m, &fx, &fw, &fy, NULL),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_handle_t *wrong[2] = {hn, hb};
    for (int i = 0; i < 2; i++) {
      voxconv_handle_t *h = wrong[i];
      VC_EXPECT_STATUS(h, voxconv_conv_forward(h, m, &fx, &fw, &fy, NULL),
                       VOXCONV_STATUS_INVALID_ARGUMENT);
      VC_EXPECT(strstr(voxconv_get_last_error(h), "share one allocator") != NULL,
                "message: %s", voxconv_get_last_error(h));
      VC_EXPECT_STATUS(h, voxconv_kmap_wait(h, m),
                       VOXCONV_STATUS_INVALID_ARGUMENT);
      VC_EXPECT_STATUS(h, voxconv_kmap_destroy(h, m),
                       VOXCONV_STATUS_INVALID_ARGUMENT);
    }
    /* A built-in allocator's map through a custom one. */
    VC_EXPECT_STATUS(h1, voxconv_conv_forward(h1, mn, &fx, &fw, &fy, NULL),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT_STATUS(h1, voxconv_kmap_destroy(h1, mn),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT(other->allocs == 0 && other->frees == 0,
              "the other allocator saw %lld allocs, %lld frees",
              (long long)other->allocs, (long long)other->frees);
    VC_EXPECT_STATUS(h2, voxconv_kmap_destroy(h2, m), VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(hn, voxconv_kmap_destroy(hn, mn), VOXCONV_STATUS_SUCCESS);
    free(x), free(w), free(y);
  }
  voxconv_destroy(h1);
  voxconv_destroy(h2);
  voxconv_destroy(hb);
  voxconv_destroy(hn);
  VC_EXPECT(c->live == 0, "%lld blocks of the shared allocator left live",
            (long long)c->live);
  free(c);
  free(other);
}

static voxconv_handle_t *make_handle(counting_t *c) {
  voxconv_allocator_t a = {c_alloc, c_free, c};
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  d.allocator = &a; /* copied by voxconv_create */
  d.num_threads = 2;
  voxconv_handle_t *h = NULL;
  if (voxconv_create(&h, &d) != VOXCONV_STATUS_SUCCESS)
    return NULL;
  return h;
}

/* Independent statement of the documented classes. */
static size_t expected_class(size_t bytes) {
  if (bytes <= 512)
    return 512;
  size_t p = 1;
  while (p < bytes)
    p <<= 1;
  if (p <= ((size_t)1 << 20))
    return p;
  const size_t base = p / 2, step = base / 8;
  for (size_t k = 1; k <= 8; ++k)
    if (base + k * step >= bytes)
      return base + k * step;
  return p;
}

/* One submanifold map + forward conv on the coordinates; output in y. */
static voxconv_status_t run_once(voxconv_handle_t *h, const int32_t *coords,
                                 int64_t n, const float *x, const float *w,
                                 float *y, int cin, int cout) {
  voxconv_kmap_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.mode = VOXCONV_KMAP_SUBMANIFOLD;
  desc.kernel_size[0] = desc.kernel_size[1] = desc.kernel_size[2] = 3;
  voxconv_coords_t in = {coords, n, {1, 1, 1}};
  voxconv_kmap_t *m = NULL;
  voxconv_status_t st = voxconv_kmap_build(h, &desc, &in, NULL, &m);
  if (st != VOXCONV_STATUS_SUCCESS)
    return st;
  voxconv_feats_t fx = {(void *)x, n, cin, VOXCONV_DTYPE_F32};
  voxconv_weights_t fw = {(void *)w, 27, cin, cout, VOXCONV_DTYPE_F32};
  voxconv_feats_t fy = {y, n, cout, VOXCONV_DTYPE_F32};
  st = voxconv_conv_forward(h, m, &fx, &fw, &fy, NULL);
  voxconv_kmap_destroy(h, m);
  return st;
}

int main(void) {
  vc_test_init("test_alloc_cache");
  const int cin = 8, cout = 16;
  int64_t n = 0;
  int32_t *coords = vc_random_coords(3000 + vc_rand_range(0, 2000), 12, &n);
  float *x = (float *)malloc(sizeof(float) * (size_t)(n * cin));
  float *w = (float *)malloc(sizeof(float) * 27 * cin * cout);
  float *y_ref = (float *)malloc(sizeof(float) * (size_t)(n * cout));
  float *y = (float *)malloc(sizeof(float) * (size_t)(n * cout));
  vc_fill_normal(x, VOXCONV_DTYPE_F32, n * cin);
  vc_fill_normal(w, VOXCONV_DTYPE_F32, 27 * cin * cout);

  /* Reference: the cache off. */
  setenv("VOXCONV_ALLOC_CACHE_MB", "0", 1);
  counting_t *off = (counting_t *)calloc(1, sizeof *off);
  voxconv_handle_t *h0 = make_handle(off);
  VC_EXPECT(h0 != NULL, "create failed");
  if (!h0)
    return vc_test_finish();
  VC_REQUIRE_OK(h0, run_once(h0, coords, n, x, w, y_ref, cin, cout));
  const int64_t per_run = off->allocs;
  VC_REQUIRE_OK(h0, run_once(h0, coords, n, x, w, y_ref, cin, cout));
  VC_EXPECT(off->allocs == 2 * per_run, "cache off: %lld allocations for two "
            "runs, %lld for one", (long long)off->allocs, (long long)per_run);
  VC_EXPECT(off->live == 0, "cache off: %lld blocks live after the runs",
            (long long)off->live);
  voxconv_destroy(h0);
  VC_EXPECT(per_run > 0, "the run made no allocation: the test proves nothing");

  /* The cache on (default bound): the second and later runs allocate
   * nothing and give the same bits. */
  unsetenv("VOXCONV_ALLOC_CACHE_MB");
  counting_t *on = (counting_t *)calloc(1, sizeof *on);
  voxconv_handle_t *h = make_handle(on);
  VC_EXPECT(h != NULL, "create failed");
  if (!h)
    return vc_test_finish();
  for (int run = 0; run < 4; ++run) {
    vc_poison(y, VOXCONV_DTYPE_F32, n * cout);
    const int64_t before = on->allocs;
    VC_REQUIRE_OK(h, run_once(h, coords, n, x, w, y, cin, cout));
    VC_EXPECT(memcmp(y, y_ref, sizeof(float) * (size_t)(n * cout)) == 0,
              "run %d: output differs from the cache-off run", run);
    if (run > 0)
      VC_EXPECT(on->allocs == before, "run %d asked the allocator %lld times "
                "with a warm cache", run, (long long)(on->allocs - before));
  }
  VC_EXPECT(on->frees == 0, "blocks went back to the allocator (%lld) under "
            "the bound", (long long)on->frees);

  /* Sizes asked are the classes. */
  const size_t asks[] = {1, 300, 512, 513, 4097, (size_t)1 << 20,
                         ((size_t)1 << 20) + 1, 3000000, 5u << 20};
  for (size_t i = 0; i < sizeof asks / sizeof *asks; ++i) {
    void *p = NULL;
    const int64_t before = on->allocs;
    VC_REQUIRE_OK(h, voxconv_malloc(h, asks[i], &p));
    if (on->allocs > before)
      VC_EXPECT((size_t)on->last_request == expected_class(asks[i]),
                "%zu bytes: the allocator was asked %lld, class %zu", asks[i],
                (long long)on->last_request, expected_class(asks[i]));
    memset(p, 0xAB, asks[i]); /* ASan: the block holds the request */
    VC_REQUIRE_OK(h, voxconv_free(h, p));
  }

  /* A block freed through another handle (sharing the allocator, as the
   * API asks) goes straight to the allocator, never into either cache: a
   * map's lazily built tables come from the op's handle and are freed by
   * the map's. */
  {
    voxconv_handle_t *h2 = make_handle(on);
    VC_EXPECT(h2 != NULL, "second handle");
    if (h2) {
      void *p = NULL, *q = NULL;
      VC_REQUIRE_OK(h, voxconv_malloc(h, 70000, &p));
      const int64_t frees = on->frees, live = on->live;
      VC_REQUIRE_OK(h2, voxconv_free(h2, p));
      VC_EXPECT(on->frees == frees + 1 && on->live == live - 1,
                "a block freed through another handle was kept (frees %lld -> "
                "%lld)", (long long)frees, (long long)on->frees);
      /* Same-handle frees are kept; the other handle's are not reused. */
      VC_REQUIRE_OK(h, voxconv_malloc(h, 70000, &q));
      VC_REQUIRE_OK(h, voxconv_free(h, q));
      VC_EXPECT(on->frees == frees + 1, "a same-handle free reached the "
                "allocator");
      voxconv_destroy(h2);
    }
  }

  /* Release gives everything idle back. */
  VC_REQUIRE_OK(h, voxconv_release_cached_memory(h));
  VC_EXPECT(on->live == 0, "%lld blocks still held after release",
            (long long)on->live);

  /* A failing allocator: fill the cache, then ask for more than the limit
   * leaves: the handle must give back its idle blocks and retry. */
  VC_REQUIRE_OK(h, run_once(h, coords, n, x, w, y, cin, cout));
  const int64_t idle = on->live_bytes;
  VC_EXPECT(idle > 0 && on->live > 0, "nothing cached after a run");
  on->fail_above = idle + 4096 + (idle / 2);
  void *big = NULL;
  const size_t want = (size_t)(idle / 2) + (size_t)((size_t)1 << 20);
  VC_EXPECT_STATUS(h, voxconv_malloc(h, want, &big), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(big != NULL && on->live == 1, "after the retry %lld blocks live "
            "(want only the new one)", (long long)on->live);
  if (big)
    voxconv_free(h, big);
  on->fail_above = 0;
  voxconv_destroy(h);
  VC_EXPECT(on->live == 0, "%lld blocks leaked by destroy", (long long)on->live);

  /* The idle bound: 1 MiB. */
  setenv("VOXCONV_ALLOC_CACHE_MB", "1", 1);
  counting_t *small = (counting_t *)calloc(1, sizeof *small);
  voxconv_handle_t *hs = make_handle(small);
  if (hs) {
    for (int run = 0; run < 2; ++run)
      VC_REQUIRE_OK(hs, run_once(hs, coords, n, x, w, y, cin, cout));
    VC_EXPECT(small->live_bytes <= ((int64_t)1 << 20),
              "%lld bytes idle over a 1 MiB bound", (long long)small->live_bytes);
    voxconv_destroy(hs);
    VC_EXPECT(small->live == 0, "leaked %lld blocks", (long long)small->live);
  }
  unsetenv("VOXCONV_ALLOC_CACHE_MB");
  check_address_reuse_across_handles();
  check_maps_need_one_allocator(coords, n);
  free(off);
  free(on);
  free(small);
  free(coords);
  free(x);
  free(w);
  free(y_ref);
  free(y);
  return vc_test_finish();
}
