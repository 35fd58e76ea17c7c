/* Coordinate hashing and key sorting for the CPU coordinate room: an
 * open-addressing table of packed (b,x,y,z) keys (vc_pack_key) -> row, and
 * an LSD radix sort of packed keys. Used by the kernel-map builders,
 * voxelize and merge_duplicates. */
#ifndef VC_HASH_H
#define VC_HASH_H

#include "vc_kmap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One slot: 16 bytes so that four slots fill one 64-byte cache line. */
typedef struct vc_hash_slot {
  uint64_t key; /* VC_KEY_EMPTY when free */
  int32_t val;
  int32_t pad_;
} vc_hash_slot_t;

typedef struct vc_hash {
  vc_hash_slot_t *slots;
  uint64_t mask; /* capacity - 1, capacity a power of two */
  int64_t count;
  voxconv_handle_t *h; /* whose allocator owns `slots` */
} vc_hash_t;

/* Locality-preserving slot function. Keys that differ only in their two
 * lowest z bits (z-neighbours inside an aligned block of four) land in the
 * same cache line, and the block index goes through a full 64-bit mixer so
 * blocks spread uniformly. A 3x3x3 neighbourhood then touches about a third
 * of the lines a fully scrambled hash would, and consecutive outputs in
 * sorted order share most of those lines. */
#define VC_HASH_BLOCK_BITS 2

static inline uint64_t vc_hash_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

static inline uint64_t vc_hash_slot_of(const vc_hash_t *t, uint64_t key) {
  const uint64_t low = key & ((1u << VC_HASH_BLOCK_BITS) - 1u);
  return ((vc_hash_mix64(key >> VC_HASH_BLOCK_BITS) << VC_HASH_BLOCK_BITS) |
          low) &
         t->mask;
}

/* Table for up to max_keys keys at load <= 0.5 (grows past that on insert
 * with vc_hash_insert_grow). Memory comes from the handle's allocator. */
voxconv_status_t vc_hash_create(voxconv_handle_t *h, vc_hash_t *t,
                                int64_t max_keys, const char *what);
void vc_hash_destroy(vc_hash_t *t);

/* Inserts key -> val unless the key is present. Returns the value already
 * stored for the key, or -1 after inserting. The table must have room
 * (count < capacity / 2, guaranteed when sized by vc_hash_create). */
static inline int32_t vc_hash_insert(vc_hash_t *t, uint64_t key, int32_t val) {
  uint64_t s = vc_hash_slot_of(t, key);
  for (;;) {
    vc_hash_slot_t *slot = &t->slots[s];
    if (slot->key == VC_KEY_EMPTY) {
      slot->key = key;
      slot->val = val;
      t->count++;
      return -1;
    }
    if (slot->key == key)
      return slot->val;
    s = (s + 1) & t->mask;
  }
}

/* As vc_hash_insert, doubling the table first when it would pass load 0.5
 * (for key sets of unknown size, e.g. generated outputs). *existing gets
 * the stored value or -1. */
voxconv_status_t vc_hash_insert_grow(vc_hash_t *t, uint64_t key, int32_t val,
                                     int32_t *existing);

/* Row stored for key, or -1. */
static inline int32_t vc_hash_find(const vc_hash_t *t, uint64_t key) {
  uint64_t s = vc_hash_slot_of(t, key);
  for (;;) {
    const vc_hash_slot_t *slot = &t->slots[s];
    if (slot->key == key)
      return slot->val;
    if (slot->key == VC_KEY_EMPTY)
      return -1;
    s = (s + 1) & t->mask;
  }
}

/* Same as vc_hash_find starting from a precomputed slot (so a caller can
 * prefetch a batch of slots before probing them). */
static inline int32_t vc_hash_find_at(const vc_hash_t *t, uint64_t key,
                                      uint64_t s) {
  for (;;) {
    const vc_hash_slot_t *slot = &t->slots[s];
    if (slot->key == key)
      return slot->val;
    if (slot->key == VC_KEY_EMPTY)
      return -1;
    s = (s + 1) & t->mask;
  }
}

static inline void vc_hash_prefetch(const vc_hash_t *t, uint64_t s) {
#if defined(__GNUC__)
  __builtin_prefetch(&t->slots[s], 0, 1);
#else
  (void)t;
  (void)s;
#endif
}

/* Asks for transparent huge pages on the 2 MiB-aligned interior of a large
 * fresh host buffer (Linux; a no-op elsewhere, for small buffers, and for
 * memory from a caller's allocator, which may manage its pages itself).
 * Random probes of a large table then rarely miss the TLB, and filling a
 * large map buffer takes one page fault per 2 MiB instead of per 4 KiB. */
void vc_advise_huge_pages(const voxconv_handle_t *h, void *p, size_t bytes);

/* Copies the stored keys (in slot order, i.e. unordered) to keys[count]. */
void vc_hash_keys(const vc_hash_t *t, uint64_t *keys);

/* Stable LSD radix sort of keys[n] ascending, permuting payload[n] (may be
 * NULL) alongside. Bytes on which all keys agree are skipped, so typical
 * coordinate sets take 4-6 passes. Scratch from the handle's allocator. */
voxconv_status_t vc_radix_sort_keys(voxconv_handle_t *h, uint64_t *keys,
                                    int64_t *payload, int64_t n);

/* Key of a coordinate row that may be out of range: equal to vc_pack_key
 * for valid coordinates, computed without signed overflow for any int32
 * values (used for fingerprints of untrusted coordinates). */
static inline uint64_t vc_pack_key_any(const int32_t *c4) {
  return ((uint64_t)(uint32_t)c4[0] << 54) ^
         ((uint64_t)((uint32_t)c4[1] + (uint32_t)VC_COORD_BIAS) << 36) ^
         ((uint64_t)((uint32_t)c4[2] + (uint32_t)VC_COORD_BIAS) << 18) ^
         (uint64_t)((uint32_t)c4[3] + (uint32_t)VC_COORD_BIAS);
}

/* Range check of one (b,x,y,z) row: -1 when valid, else the index of the
 * first field out of range (0 = batch, 1..3 = x, y, z). */
static inline int vc_coord_row_bad_field(const int32_t *c4) {
  if (c4[0] < 0 || c4[0] > VOXCONV_BATCH_MAX)
    return 0;
  for (int a = 1; a < 4; a++)
    if (!vc_coord_in_range(c4[a]))
      return a;
  return -1;
}

/* CPU pass over a coordinate array (kmap_cpu.c): keys[i] (if keys is not
 * NULL) and the order-dependent fingerprint (if fingerprint is not NULL) of
 * every row, in parallel. With check_range, a row outside the limits is
 * OUT_OF_RANGE: "<func>: <which> row R: x=V outside ±131071" for the lowest
 * such row. Keys of out-of-range rows are vc_pack_key_any values. */
voxconv_status_t vc_cpu_coords_check(voxconv_handle_t *h, const char *func,
                                     const char *which, const int32_t *coords,
                                     int64_t n, uint64_t *keys,
                                     uint64_t *fingerprint, int check_range);

#ifdef __cplusplus
}
#endif
#endif
