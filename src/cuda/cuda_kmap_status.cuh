/* What a CUDA kernel-map build leaves for the host to read, shared by the
 * builder (cuda_kmap.cu) and the completion of asynchronous builds
 * (cuda_kmap_async.cu).
 *
 * Every build writes a device status block (VcKmapStatus) that lives as
 * long as the map: its pair_offsets[] is the map's device copy of the pair
 * ranges (kmap->pair_offsets_dev), which kernels read instead of host
 * counts. A synchronous build (STRIDED, EXPANDING, TRANSPOSED, GENERATIVE, and
 * SUBMANIFOLD when asked to check at once) copies the block to the host and
 * waits for it. An asynchronous build (SUBMANIFOLD) queues the same copy
 * into a pinned slot and records an event; the host reads the slot when the
 * event has completed (vc_cuda_kmap_poll), never earlier. */
#ifndef VC_CUDA_KMAP_STATUS_CUH
#define VC_CUDA_KMAP_STATUS_CUH

#include "cuda_hash.cuh"

#include <pthread.h>

#define VC_NO_ROW ULLONG_MAX

/* Device-side results. Rows are "lowest offending", VC_NO_ROW when none.
 * pair_offsets must stay the last member: copies stop after entry K. */
struct VcKmapStatus {
  unsigned long long fingerprint;
  unsigned long long bad_in_row;
  unsigned long long dup_in_row;
  unsigned long long bad_out_row;
  unsigned long long dup_out_row;
  unsigned long long gen_bad; /* lowest i*K + k with an out-of-range cell */
  unsigned int overflow_in, overflow_out;
  /* Direct STRIDED tables: set when two input rows claimed one (output,
   * offset) slot, i.e. the input has a duplicate row; only then is the
   * input hashed to find which (vc_neighbours). */
  unsigned int dup_hint;
  unsigned int reserved; /* 0: no padding bytes copied uninitialised */
  long long n_out; /* STRIDED / EXPANDING / GENERATIVE: unique outputs */
  /* STRIDED / EXPANDING: fingerprint of the output keys (kmap
   * out_fingerprint, the inverse map's in_fingerprint). */
  unsigned long long out_fingerprint;
  /* Asynchronous builds: what the error message needs, gathered on the
   * device after the checks (the caller's coordinates may be gone by the
   * time the host reads the verdict). */
  int32_t bad_in_coords[4];
  int32_t dup_in_coords[4];
  long long dup_prev_row;
  /* STRIDED with declared input bounds: the lowest row outside them and
   * its coordinates (asynchronous builds); the outputs' bounds per field
   * (INT32_MAX / INT32_MIN while there are none). */
  unsigned long long bounds_bad_row;
  int32_t bounds_bad_coords[4];
  int32_t out_lo[4], out_hi[4];
  long long pair_offsets[VOXCONV_KERNEL_VOLUME_MAX + 1];
};

/* A STRIDED map's output bounds from its status (with n_out). */
static inline void vc_take_out_bounds(voxconv_kmap_t *m, const VcKmapStatus *st) {
  if (m->desc.mode != VOXCONV_KMAP_STRIDED)
    return;
  for (int f = 0; f < 4; f++) {
    m->out_bounds.lo[f] = st->n_out > 0 ? st->out_lo[f] : 0;
    m->out_bounds.hi[f] = st->n_out > 0 ? st->out_hi[f] : -1;
  }
  m->has_out_bounds = 1;
}

/* Bytes of a status block up to and including pair_offsets[K]. */
static inline size_t vc_kmap_status_bytes(int K) {
  return offsetof(VcKmapStatus, pair_offsets) +
         (size_t)(K + 1) * sizeof(long long);
}

/* The CUDA extras of a map (kmap->backend_priv). */
struct VcKmapPriv {
  int hash_retries;
  VcKmapStatus *d_status; /* device, the map's lifetime */
  /* Asynchronous (submanifold) builds: the pinned copy of d_status (NULL
   * once read), the event recorded after the copy (NULL when the build was
   * captured into a CUDA graph: then only the graph's replays run it).
   * EXPANDING builds: the same pair carries the output fingerprint, which
   * is known only after the post-sync sort; the slot is held until the
   * first voxconv_kmap_inverse reads it, or the map is destroyed
   * (vc_defer_out_fingerprint in cuda_kmap.cu). */
  VcKmapStatus *h_status;
  cudaEvent_t ready;
  int captured;
  /* 1 when `ready` follows the whole build (asynchronous builds), so that
   * voxconv_kmap_order can make another stream wait for it; other maps
   * are ordered through the stream they were built on (`stream`). */
  int ready_is_build;
  cudaStream_t stream;
  /* The verdict, once known: SUCCESS, or the build's error with its
   * message (every later call on the map returns it). */
  voxconv_status_t verdict;
  char *verdict_msg;
  /* Completion, and the tables written on first need, may be asked for
   * by two threads that share the map. */
  pthread_mutex_t lock;
  /* Pair lists written on first need (vc_cuda_kmap_pairs): the build's
   * scanned per-tile counts [K * pair_nb + 1] (kept until the map is
   * destroyed: a consumer's stream may still read them when another
   * stream would reuse the block), the rows of nbr_out they cover, the
   * device row count of a deferred STRIDED build (else NULL); NULL scan:
   * the lists were written by the build (VOXCONV_KMAP_LEAN=0). With a
   * scan, kmap->in_rows stays NULL until the lists are written. */
  long long *pair_scan;
  int64_t pair_nb, pair_rows;
  const long long *pair_n_dev;
  /* The tables written on first need -- pair lists, row orders, tile
   * masks -- each on the stream of the handle that needed it: lazy_done
   * is recorded on lazy_stream after the latest such write (outside a
   * capture), and follows every earlier one (a write on another stream
   * first waits for the previous event: vc_cuda_kmap_lazy_lock). Users on
   * other streams wait for it. */
  cudaEvent_t lazy_done;
  /* Streams by cudaStreamGetId (a destroyed stream's handle value may come
   * back for another): the writer of the latest record; lazy_done's
   * records so far, and the last other stream ordered after one of them
   * (and which), where a later use needs no new wait. */
  unsigned long long lazy_stream, lazy_seen;
  unsigned lazy_gen, lazy_seen_gen;
};

/* Pinned status slots (process-wide pool, cuda_kmap_async.cu). A slot whose
 * copy may still be in flight is released with the event that orders it
 * (NULL: none in flight); it is reused only once that event has completed.
 * Returns 1 when the pool took ownership of `after` (the caller must not
 * destroy it then). get returns NULL with a message on h when no pinned
 * memory is left. */
VcKmapStatus *vc_pinned_status_get(voxconv_handle_t *h);
int vc_pinned_status_release(VcKmapStatus *slot, cudaEvent_t after);

/* Formats the first error of a host status block, in the CPU builder's
 * order and words, from the block alone (asynchronous builds). Returns
 * SUCCESS when the block reports none. */
voxconv_status_t vc_kmap_status_message(const voxconv_kmap_t *m,
                                        const VcKmapStatus *st, char *msg,
                                        size_t size);

#endif
