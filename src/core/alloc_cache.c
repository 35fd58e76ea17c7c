/* A per-handle cache of blocks in front of the caller's allocator.
 *
 * Why: a caller's allocator can be expensive per call. The Python package
 * hands the library torch's caching allocator through ctypes callbacks
 * (GIL, argument conversion, torch's device guard: ~5 us per call), and one
 * kernel-map build makes ~20 allocations: on workload A's forward from
 * PyTorch they cost more host time than the build's kernel launches (see
 * docs/perf-notes.md, item 58). The built-in allocator needs no cache (it
 * is a stream-ordered pool already).
 *
 * Why it is safe without events: a handle has one stream, and a block
 * freed into the cache is handed out again only by the same handle, so the
 * next user is queued behind the previous one on that stream (the same
 * argument as the stream-ordered allocators'). Switching the handle's
 * stream (voxconv_set_stream) empties the cache first.
 *
 * CUDA graph capture: allocations made while the handle's stream is being
 * captured bypass the cache in both directions. A block baked into a graph
 * must stay the caller's allocator's business (torch gives captures a
 * private pool), and a cached block handed to a capture could be handed
 * to eager work later while replays still use it. Blocks that were
 * allocated from the cache and are freed during a capture go back to the
 * caller's allocator as well.
 *
 * Blocks freed through another handle than the one that allocated them
 * (the library does that by design: a map's lazily built tables are
 * allocated by the op's handle and freed by the map's, see voxconv.h) go
 * to the freeing handle's allocator, as the API promises, and never into
 * a cache. So the record of which block came from which cache, and of its
 * class, is one process-wide table (a mutex; handles live on many
 * threads) keyed by pointer: a per-handle record would keep stale entries
 * for blocks freed elsewhere, and a pointer the caller's allocator later
 * reuses for another size would then be filed under the old size.
 *
 * Size classes: up to 1 MiB powers of two (from 512 B); above, eight
 * classes per power of two (<= 12.5% rounding). The allocator is asked for
 * the class size, so a cached block fits any request of its class.
 *
 * Bound: VOXCONV_ALLOC_CACHE_MB (read at handle creation; default 1/16 of
 * the device's memory on CUDA, at least 1024; 1024 on the CPU; 0 turns
 * the cache off) caps the bytes held idle per handle; a free that
 * would exceed it goes straight to the caller's allocator. When the
 * caller's allocator fails, the cache is emptied and the request retried
 * once. voxconv_release_cached_memory empties it on demand. */
#include "vc_core.h"
#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define VC_CLASSES 256
#define VC_SMALL_BITS 9  /* smallest class: 512 B */
#define VC_POW2_BITS 20  /* powers of two up to 1 MiB */
#define VC_SUBSTEPS 8
#define VC_MAX_BITS 48

typedef struct {
  void *ptr; /* NULL: empty slot; VC_TOMB: deleted */
  uint64_t owner; /* id of the cache that handed it out */
  int cls;
} vc_live_t;

#define VC_TOMB ((void *)(uintptr_t)1)

struct vc_alloc_cache {
  uint64_t id;         /* process-unique, never reused */
  size_t cap;          /* bytes held idle at most */
  size_t idle_bytes;   /* bytes held idle now */
  void **idle[VC_CLASSES];
  int n_idle[VC_CLASSES], cap_idle[VC_CLASSES];
};

/* The process-wide record of blocks handed out by any cache. */
static pthread_mutex_t g_live_lock = PTHREAD_MUTEX_INITIALIZER;
static vc_live_t *g_live;
static size_t g_live_cap, g_live_used; /* used = entries + tombstones */
static uint64_t g_next_id = 1;

/* ---- size classes ---------------------------------------------------------- */
static int bit_length(size_t v) {
  int n = 0;
  while (v) {
    ++n;
    v >>= 1;
  }
  return n;
}

/* Class of a request (-1: too large to cache) and the class's byte size. */
static int class_of(size_t bytes, size_t *class_bytes) {
  if (bytes <= ((size_t)1 << VC_SMALL_BITS)) {
    *class_bytes = (size_t)1 << VC_SMALL_BITS;
    return 0;
  }
  const int e = bit_length(bytes - 1); /* 2^(e-1) < bytes <= 2^e */
  if (e <= VC_POW2_BITS) {
    *class_bytes = (size_t)1 << e;
    return e - VC_SMALL_BITS;
  }
  if (e > VC_MAX_BITS)
    return -1;
  const size_t base = (size_t)1 << (e - 1), step = base / VC_SUBSTEPS;
  const size_t k = (bytes - base + step - 1) / step; /* 1..8 */
  *class_bytes = base + k * step;
  return (VC_POW2_BITS - VC_SMALL_BITS) + 1 + (e - VC_POW2_BITS - 1) * VC_SUBSTEPS +
         (int)(k - 1);
}

static size_t class_bytes_of(int cls) {
  if (cls <= VC_POW2_BITS - VC_SMALL_BITS)
    return (size_t)1 << (cls + VC_SMALL_BITS);
  const int r = cls - (VC_POW2_BITS - VC_SMALL_BITS) - 1;
  const int e = VC_POW2_BITS + 1 + r / VC_SUBSTEPS;
  const size_t base = (size_t)1 << (e - 1);
  return base + (size_t)(r % VC_SUBSTEPS + 1) * (base / VC_SUBSTEPS);
}

/* ---- the live table (open addressing, linear probing) ---------------------- */
static size_t hash_ptr(const void *p, size_t mask) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & mask;
}

static int live_grow(void) {
  /* Rehash; double only when live entries (not tombstones) fill a quarter,
   * so a steady churn of frees does not grow the table without bound. */
  size_t n_live = 0;
  for (size_t i = 0; i < g_live_cap; ++i)
    n_live += g_live[i].ptr && g_live[i].ptr != VC_TOMB;
  size_t ncap = g_live_cap ? g_live_cap : 256;
  if (4 * (n_live + 1) > ncap)
    ncap *= 2;
  vc_live_t *t = (vc_live_t *)calloc(ncap, sizeof *t);
  if (!t)
    return 0;
  for (size_t i = 0; i < g_live_cap; ++i) {
    void *p = g_live[i].ptr;
    if (!p || p == VC_TOMB)
      continue;
    size_t j = hash_ptr(p, ncap - 1);
    while (t[j].ptr)
      j = (j + 1) & (ncap - 1);
    t[j] = g_live[i];
  }
  free(g_live);
  g_live = t;
  g_live_cap = ncap;
  g_live_used = n_live;
  return 1;
}

/* Slot of p, or NULL. Caller holds g_live_lock. */
static vc_live_t *live_find(const void *p) {
  if (!g_live_cap)
    return NULL;
  size_t j = hash_ptr(p, g_live_cap - 1);
  while (g_live[j].ptr) {
    if (g_live[j].ptr == p)
      return &g_live[j];
    j = (j + 1) & (g_live_cap - 1);
  }
  return NULL;
}

/* Records p as handed out by cache `owner` (replacing any record of the
 * same address). 0 when the table cannot grow. */
static int live_add(void *p, uint64_t owner, int cls) {
  pthread_mutex_lock(&g_live_lock);
  vc_live_t *e = live_find(p);
  if (!e) {
    if (4 * (g_live_used + 1) > 3 * g_live_cap && !live_grow()) {
      pthread_mutex_unlock(&g_live_lock);
      return 0;
    }
    size_t j = hash_ptr(p, g_live_cap - 1);
    while (g_live[j].ptr && g_live[j].ptr != VC_TOMB)
      j = (j + 1) & (g_live_cap - 1);
    if (!g_live[j].ptr)
      ++g_live_used;
    e = &g_live[j];
    e->ptr = p;
  }
  e->owner = owner;
  e->cls = cls;
  pthread_mutex_unlock(&g_live_lock);
  return 1;
}

/* Removes the record of p; returns its class when cache `owner` handed it
 * out, else -1 (not recorded, or another cache's). */
static int live_take(void *p, uint64_t owner) {
  int cls = -1;
  pthread_mutex_lock(&g_live_lock);
  vc_live_t *e = live_find(p);
  if (e) {
    if (e->owner == owner)
      cls = e->cls;
    e->ptr = VC_TOMB;
  }
  pthread_mutex_unlock(&g_live_lock);
  return cls;
}

/* ---- the cache ---------------------------------------------------------- */
/* The default bound: 1/16 of the device's memory on CUDA (a workload's
 * kernel maps are sized by its point count: workload A's hold ~2 GiB, and
 * a bound below what one forward frees makes every forward miss), 1 GiB on
 * the CPU and when the size is unknown. */
static size_t default_cap_bytes(const voxconv_handle_t *h) {
  size_t cap = (size_t)1024 << 20;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA) {
    const size_t total = vc_cuda_device_memory(h);
    if (total / 16 > cap)
      cap = total / 16;
  }
#else
  (void)h;
#endif
  return cap;
}

static size_t env_cap_bytes(const voxconv_handle_t *h) {
  const char *v = vc_getenv("VOXCONV_ALLOC_CACHE_MB");
  if (!v || !*v)
    return default_cap_bytes(h);
  char *end = NULL;
  const long long mb = strtoll(v, &end, 10);
  if (!end || *end != '\0' || mb < 0)
    return default_cap_bytes(h); /* documented: a bad value keeps the default */
  return (size_t)mb << 20;
}

void vc_alloc_cache_init(voxconv_handle_t *h) {
  h->alloc_cache = NULL;
  if (!h->has_allocator)
    return;
  const size_t cap = env_cap_bytes(h);
  if (cap == 0)
    return;
  vc_alloc_cache_t *c = (vc_alloc_cache_t *)calloc(1, sizeof *c);
  if (!c)
    return; /* no cache: every call goes to the caller's allocator */
  c->cap = cap;
  pthread_mutex_lock(&g_live_lock);
  c->id = g_next_id++;
  pthread_mutex_unlock(&g_live_lock);
  h->alloc_cache = c;
}

static void user_free(voxconv_handle_t *h, void *p) {
  h->allocator.free(h->allocator.ctx, p, h->stream);
}

void vc_alloc_cache_release(voxconv_handle_t *h) {
  vc_alloc_cache_t *c = h->alloc_cache;
  if (!c)
    return;
  for (int k = 0; k < VC_CLASSES; ++k) {
    for (int i = 0; i < c->n_idle[k]; ++i)
      user_free(h, c->idle[k][i]);
    c->n_idle[k] = 0;
  }
  c->idle_bytes = 0;
}

void vc_alloc_cache_destroy(voxconv_handle_t *h) {
  vc_alloc_cache_t *c = h->alloc_cache;
  if (!c)
    return;
  vc_alloc_cache_release(h);
  for (int k = 0; k < VC_CLASSES; ++k)
    free(c->idle[k]);
  free(c);
  h->alloc_cache = NULL;
}

static void *user_alloc_retry(voxconv_handle_t *h, size_t bytes) {
  void *p = h->allocator.alloc(h->allocator.ctx, bytes, h->stream);
  if (!p && h->alloc_cache && ((vc_alloc_cache_t *)h->alloc_cache)->idle_bytes) {
    vc_alloc_cache_release(h);
    p = h->allocator.alloc(h->allocator.ctx, bytes, h->stream);
  }
  return p;
}

void *vc_alloc_cache_get(voxconv_handle_t *h, size_t bytes) {
  vc_alloc_cache_t *c = h->alloc_cache;
  size_t cb = 0;
  const int cls = c ? class_of(bytes, &cb) : -1;
  if (cls < 0 || vc_stream_capturing(h))
    return user_alloc_retry(h, bytes);
  void *p = NULL;
  if (c->n_idle[cls] > 0) {
    p = c->idle[cls][--c->n_idle[cls]];
    c->idle_bytes -= cb;
  } else {
    p = user_alloc_retry(h, cb);
    if (!p)
      return NULL;
  }
  if (!live_add(p, c->id, cls)) {
    /* No room to remember it: hand it out untracked (its free then goes
     * to the caller's allocator, which owns it either way). */
  }
  return p;
}

void vc_alloc_cache_put(voxconv_handle_t *h, void *p) {
  vc_alloc_cache_t *c = h->alloc_cache;
  /* Always drop the record (also on handles without a cache), so that no
   * record outlives its block. */
  const int cls = live_take(p, c ? c->id : 0);
  if (cls < 0) {
    user_free(h, p);
    return;
  }
  const size_t cb = class_bytes_of(cls);
  if (c->idle_bytes + cb > c->cap || vc_stream_capturing(h)) {
    user_free(h, p);
    return;
  }
  if (c->n_idle[cls] == c->cap_idle[cls]) {
    const int ncap = c->cap_idle[cls] ? 2 * c->cap_idle[cls] : 8;
    void **t = (void **)realloc(c->idle[cls], (size_t)ncap * sizeof *t);
    if (!t) {
      user_free(h, p);
      return;
    }
    c->idle[cls] = t;
    c->cap_idle[cls] = ncap;
  }
  c->idle[cls][c->n_idle[cls]++] = p;
  c->idle_bytes += cb;
}

voxconv_status_t voxconv_release_cached_memory(voxconv_handle_t *h) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  vc_alloc_cache_release(h);
  return VOXCONV_STATUS_SUCCESS;
}
