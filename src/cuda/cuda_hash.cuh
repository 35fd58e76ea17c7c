/* GPU open-addressing hash of packed coordinate keys (vc_pack_key) -> row,
 * used by the CUDA kernel-map builder.
 *
 * Layout: two arrays of `capacity` entries (a power of two), keys (u64,
 * VC_KEY_EMPTY when free) and vals (i32). Separate arrays rather than
 * interleaved slots: most lookups of a submanifold map miss (only ~31% of
 * the 27 neighbours of a LiDAR voxel exist), and a miss reads keys only, so
 * keeping keys dense puts four slots in each 32-byte sector.
 *
 * Slot function: keys that differ only in their two lowest z bits share an
 * aligned group of four slots (one sector); the rest of the key goes
 * through a 64-bit mixer. z-neighbours of an output then mostly hit a
 * sector that its other lookups already brought into L1/L2.
 *
 * Insertion is lock-free (atomicCAS on the key) and deterministic in what
 * it stores: the value of a key is the LOWEST row holding it (atomicMin),
 * whatever the thread schedule, so a later duplicate pass can name the
 * first repeat exactly as the CPU builder does. Probing is bounded by the
 * capacity; an insert that finds no free slot raises a device overflow flag
 * and the build is retried with a larger table (never truncated). */
#ifndef VC_CUDA_HASH_CUH
#define VC_CUDA_HASH_CUH

#include "vc_cuda_util.cuh"

#include <limits.h>

#define VC_GPU_HASH_GROUP_BITS 2

struct VcGpuHash {
  unsigned long long *keys;
  int32_t *vals;
  uint64_t mask; /* capacity - 1 */
};

static __device__ __forceinline__ uint64_t vc_dev_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

static __device__ __forceinline__ uint64_t vc_dev_hash_slot(const VcGpuHash &t,
                                                            uint64_t key) {
  const uint64_t low = key & ((1u << VC_GPU_HASH_GROUP_BITS) - 1u);
  return ((vc_dev_mix64(key >> VC_GPU_HASH_GROUP_BITS)
           << VC_GPU_HASH_GROUP_BITS) |
          low) &
         t.mask;
}

/* Inserts key -> row (keeping the lowest row for a repeated key). Returns 0
 * when the table had no free slot left (overflow). */
static __device__ __forceinline__ int vc_dev_hash_insert(const VcGpuHash &t,
                                                         uint64_t key,
                                                         int32_t row) {
  uint64_t s = vc_dev_hash_slot(t, key);
  /* A plain load first: occupied slots (clusters) are skipped without an
   * atomic (measured: CAS-first was ~15% slower on workload A). */
  for (uint64_t probe = 0; probe <= t.mask; ++probe) {
    unsigned long long cur = t.keys[s];
    if (cur == VC_KEY_EMPTY) {
      cur = atomicCAS(&t.keys[s], (unsigned long long)VC_KEY_EMPTY,
                      (unsigned long long)key);
      if (cur == VC_KEY_EMPTY)
        cur = key; /* we claimed it */
    }
    if (cur == key) {
      atomicMin(&t.vals[s], row);
      return 1;
    }
    s = (s + 1) & t.mask;
  }
  return 0;
}

/* Key-only use (a set: vals unused, may be NULL): adds key and says whether
 * this call stored it (exactly one caller per distinct key gets
 * VC_HASH_ADDED, whatever the schedule), found it stored already, or found
 * no free slot (VC_HASH_FULL: the caller raises its overflow flag). Same
 * probe as vc_dev_hash_insert; a stale plain load is harmless because keys
 * are never removed and the CAS decides every claim. */
enum { VC_HASH_FULL = 0, VC_HASH_PRESENT = 1, VC_HASH_ADDED = 2 };

static __device__ __forceinline__ int vc_dev_hash_add_key(const VcGpuHash &t,
                                                          uint64_t key) {
  uint64_t s = vc_dev_hash_slot(t, key);
  for (uint64_t probe = 0; probe <= t.mask; ++probe) {
    unsigned long long cur = t.keys[s];
    if (cur == VC_KEY_EMPTY) {
      cur = atomicCAS(&t.keys[s], (unsigned long long)VC_KEY_EMPTY,
                      (unsigned long long)key);
      if (cur == VC_KEY_EMPTY)
        return VC_HASH_ADDED;
    }
    if (cur == key)
      return VC_HASH_PRESENT;
    s = (s + 1) & t.mask;
  }
  return VC_HASH_FULL;
}

/* Row stored for key or -1. Reads through the read-only path: the table is
 * never written by the kernel that queries it. */
static __device__ __forceinline__ int32_t vc_dev_hash_find(const VcGpuHash &t,
                                                           uint64_t key) {
  uint64_t s = vc_dev_hash_slot(t, key);
  for (uint64_t probe = 0; probe <= t.mask; ++probe) {
    const unsigned long long cur = __ldg(&t.keys[s]);
    if (cur == key)
      return __ldg(&t.vals[s]);
    if (cur == VC_KEY_EMPTY)
      return -1;
    s = (s + 1) & t.mask;
  }
  return -1;
}

/* Smallest power of two >= v (v >= 1). */
static inline uint64_t vc_pow2_at_least(uint64_t v) {
  uint64_t c = 1;
  while (c < v)
    c <<= 1;
  return c;
}

#endif
