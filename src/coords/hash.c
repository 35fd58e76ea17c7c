/* Open-addressing hash of packed coordinate keys and the radix sort of keys
 * (see vc_hash.h). Linear probing at load <= 0.5: with 16-byte slots and
 * the block-preserving slot function a lookup is usually one cache line. */
#include "vc_hash.h"

#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Tables above this size are cleared by all threads: the clear is also the
 * first touch of fresh pages, whose faults otherwise serialise. */
#define VC_HASH_PARALLEL_CLEAR_SLOTS (1 << 16)

typedef struct {
  vc_hash_slot_t *slots;
} vc_clear_ctx_t;

static void clear_slots_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  vc_clear_ctx_t *c = (vc_clear_ctx_t *)ctx;
  /* All-ones bytes: key = VC_KEY_EMPTY, val = -1. */
  memset(c->slots + begin, 0xFF, (size_t)(end - begin) * sizeof *c->slots);
}

void vc_advise_huge_pages(const voxconv_handle_t *h, void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t huge = (uintptr_t)2 << 20;
  if (h->has_allocator || h->backend != VOXCONV_BACKEND_CPU || bytes < 4 * huge)
    return;
  const uintptr_t begin = ((uintptr_t)p + huge - 1) & ~(huge - 1);
  const uintptr_t end = ((uintptr_t)p + bytes) & ~(huge - 1);
  if (end > begin)
    (void)madvise((void *)begin, end - begin, MADV_HUGEPAGE);
#else
  (void)h;
  (void)p;
  (void)bytes;
#endif
}

static voxconv_status_t alloc_table(voxconv_handle_t *h, vc_hash_t *t,
                                    uint64_t capacity, const char *what) {
  void *p = NULL;
  VC_CHECK(vc_alloc(h, (size_t)capacity * sizeof(vc_hash_slot_t), &p, what));
  t->slots = (vc_hash_slot_t *)p;
  vc_advise_huge_pages(h, p, (size_t)capacity * sizeof(vc_hash_slot_t));
  t->mask = capacity - 1;
  t->count = 0;
  t->h = h;
  vc_clear_ctx_t c = {t->slots};
  if (capacity >= VC_HASH_PARALLEL_CLEAR_SLOTS)
    return vc_parallel_for(h, (int64_t)capacity, 1 << 15, clear_slots_task, &c);
  clear_slots_task(&c, 0, (int64_t)capacity, 0);
  return VOXCONV_STATUS_SUCCESS;
}

static uint64_t capacity_for(int64_t max_keys) {
  uint64_t cap = 16;
  while (cap < 2u * (uint64_t)max_keys)
    cap <<= 1;
  return cap;
}

voxconv_status_t vc_hash_create(voxconv_handle_t *h, vc_hash_t *t,
                                int64_t max_keys, const char *what) {
  memset(t, 0, sizeof *t);
  if (max_keys < 0)
    max_keys = 0;
  if ((uint64_t)max_keys > (UINT64_C(1) << 40))
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "hash table for %lld keys (%s) is too large",
                   (long long)max_keys, what);
  return alloc_table(h, t, capacity_for(max_keys), what);
}

void vc_hash_destroy(vc_hash_t *t) {
  if (t->slots)
    vc_free(t->h, t->slots);
  t->slots = NULL;
  t->count = 0;
}

voxconv_status_t vc_hash_insert_grow(vc_hash_t *t, uint64_t key, int32_t val,
                                     int32_t *existing) {
  if ((uint64_t)(t->count + 1) * 2 > t->mask + 1) {
    vc_hash_t bigger;
    VC_CHECK(alloc_table(t->h, &bigger, (t->mask + 1) * 2, "hash table"));
    for (uint64_t s = 0; s <= t->mask; s++)
      if (t->slots[s].key != VC_KEY_EMPTY)
        vc_hash_insert(&bigger, t->slots[s].key, t->slots[s].val);
    vc_hash_destroy(t);
    *t = bigger;
  }
  *existing = vc_hash_insert(t, key, val);
  return VOXCONV_STATUS_SUCCESS;
}

void vc_hash_keys(const vc_hash_t *t, uint64_t *keys) {
  int64_t j = 0;
  for (uint64_t s = 0; s <= t->mask; s++)
    if (t->slots[s].key != VC_KEY_EMPTY)
      keys[j++] = t->slots[s].key;
}

/* ---- radix sort ------------------------------------------------------- */
voxconv_status_t vc_radix_sort_keys(voxconv_handle_t *h, uint64_t *keys,
                                    int64_t *payload, int64_t n) {
  if (n <= 1)
    return VOXCONV_STATUS_SUCCESS;
  /* One counting pass histograms all eight bytes at once. */
  int64_t(*hist)[256] = NULL;
  VC_CHECK(vc_host_alloc(h, 8 * 256 * sizeof(int64_t), (void **)&hist,
                         "radix sort histograms"));
  memset(hist, 0, 8 * 256 * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++) {
    const uint64_t k = keys[i];
    for (int b = 0; b < 8; b++)
      hist[b][(k >> (8 * b)) & 0xFF]++;
  }
  int passes[8], n_passes = 0;
  for (int b = 0; b < 8; b++) {
    /* A byte on which every key agrees cannot change the order. */
    if (hist[b][(keys[0] >> (8 * b)) & 0xFF] != n)
      passes[n_passes++] = b;
  }
  if (n_passes == 0) {
    free(hist);
    return VOXCONV_STATUS_SUCCESS;
  }
  uint64_t *tmp_keys = NULL;
  int64_t *tmp_payload = NULL;
  voxconv_status_t st = vc_alloc(h, (size_t)n * sizeof *keys,
                                 (void **)&tmp_keys, "radix sort keys");
  if (st == VOXCONV_STATUS_SUCCESS && payload)
    st = vc_alloc(h, (size_t)n * sizeof *payload, (void **)&tmp_payload,
                  "radix sort payload");
  if (st != VOXCONV_STATUS_SUCCESS) {
    vc_free(h, tmp_keys);
    free(hist);
    return st;
  }
  uint64_t *src_k = keys, *dst_k = tmp_keys;
  int64_t *src_p = payload, *dst_p = tmp_payload;
  for (int p = 0; p < n_passes; p++) {
    const int b = passes[p];
    int64_t pos[256], sum = 0;
    for (int d = 0; d < 256; d++) {
      pos[d] = sum;
      sum += hist[b][d];
    }
    const int shift = 8 * b;
    if (src_p) {
      for (int64_t i = 0; i < n; i++) {
        const int64_t at = pos[(src_k[i] >> shift) & 0xFF]++;
        dst_k[at] = src_k[i];
        dst_p[at] = src_p[i];
      }
    } else {
      for (int64_t i = 0; i < n; i++)
        dst_k[pos[(src_k[i] >> shift) & 0xFF]++] = src_k[i];
    }
    uint64_t *tk = src_k;
    src_k = dst_k;
    dst_k = tk;
    int64_t *tp = src_p;
    src_p = dst_p;
    dst_p = tp;
  }
  if (src_k != keys) { /* odd number of passes: result is in the scratch */
    memcpy(keys, src_k, (size_t)n * sizeof *keys);
    if (payload)
      memcpy(payload, src_p, (size_t)n * sizeof *payload);
  }
  vc_free(h, tmp_keys);
  vc_free(h, tmp_payload);
  free(hist);
  return VOXCONV_STATUS_SUCCESS;
}
