/* Completion of asynchronous kernel-map builds (see cuda_kmap_status.cuh):
 * the pool of pinned status slots, the non-blocking poll and the blocking
 * wait that read a build's verdict, and the wording of its errors; and how
 * other streams are ordered after a map's work: its build
 * (voxconv_kmap_order) and the tables made on first need on some stream
 * (vc_cuda_kmap_lazy_lock / _unlock).
 *
 * Why a process-wide pool: a slot is written by a copy queued on the
 * building stream and read by whichever handle next uses the map (maps may
 * move between handles of one device), and it may have to outlive the
 * building handle. Pinned memory is costly to allocate (a driver call that
 * may serialise with other work), so slots come from chunks that are never
 * returned before exit.
 *
 * Stream capture: while any capture is running, the thread's capture mode
 * may forbid "unsafe" calls (cudaEventQuery, cudaHostAlloc), and such a call
 * would invalidate the user's capture. The few calls here run in relaxed
 * mode (cudaThreadExchangeStreamCaptureMode, push-pop), and nothing waits
 * while the handle's own stream is capturing. */
#include "cuda_kmap_status.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pinned slots ---------------------------------------------------------- */
#define VC_SLOTS_PER_CHUNK 32
#define VC_ZOMBIES_MAX 256

struct VcZombie {
  VcKmapStatus *slot;
  cudaEvent_t after; /* the slot may be reused once this has completed */
};

static pthread_mutex_t g_slot_lock = PTHREAD_MUTEX_INITIALIZER;
static VcKmapStatus *g_free[VC_SLOTS_PER_CHUNK * 64];
static int g_n_free;
static int g_n_chunks;
static VcZombie g_zombies[VC_ZOMBIES_MAX];
static int g_n_zombies;

/* Moves zombies whose copy has landed back to the free list (lock held). */
static void vc_reclaim_zombies(void) {
  int kept = 0;
  for (int i = 0; i < g_n_zombies; i++) {
    VcZombie z = g_zombies[i];
    const cudaError_t e = vc_relaxed([&] { return cudaEventQuery(z.after); });
    if (e == cudaSuccess && g_n_free < (int)(sizeof g_free / sizeof g_free[0])) {
      cudaEventDestroy(z.after);
      g_free[g_n_free++] = z.slot;
    } else {
      if (e != cudaErrorNotReady)
        (void)cudaGetLastError();
      g_zombies[kept++] = z;
    }
  }
  g_n_zombies = kept;
}

VcKmapStatus *vc_pinned_status_get(voxconv_handle_t *h) {
  pthread_mutex_lock(&g_slot_lock);
  if (g_n_free == 0 && g_n_zombies > 0)
    vc_reclaim_zombies();
  if (g_n_free == 0 &&
      g_n_chunks < (int)(sizeof g_free / sizeof g_free[0]) / VC_SLOTS_PER_CHUNK) {
    const size_t slot = (sizeof(VcKmapStatus) + 63) & ~(size_t)63;
    void *chunk = NULL;
    const cudaError_t e = vc_relaxed([&] {
      return cudaHostAlloc(&chunk, slot * VC_SLOTS_PER_CHUNK,
                           cudaHostAllocPortable);
    });
    if (e == cudaSuccess) {
      g_n_chunks++;
      for (int i = 0; i < VC_SLOTS_PER_CHUNK; i++)
        g_free[g_n_free++] = (VcKmapStatus *)((char *)chunk + slot * i);
    } else {
      (void)cudaGetLastError();
    }
  }
  VcKmapStatus *s = g_n_free > 0 ? g_free[--g_n_free] : NULL;
  pthread_mutex_unlock(&g_slot_lock);
  if (!s)
    vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
            "voxconv_kmap_build: no pinned host memory for the build's "
            "status (%d slots in use; destroy kernel maps that are no "
            "longer needed)",
            g_n_chunks * VC_SLOTS_PER_CHUNK);
  return s;
}

int vc_pinned_status_release(VcKmapStatus *slot, cudaEvent_t after) {
  if (!slot)
    return 0;
  int took = 0;
  pthread_mutex_lock(&g_slot_lock);
  const cudaError_t e =
      after ? vc_relaxed([&] { return cudaEventQuery(after); }) : cudaSuccess;
  if (e == cudaErrorNotReady && g_n_zombies < VC_ZOMBIES_MAX) {
    g_zombies[g_n_zombies].slot = slot;
    g_zombies[g_n_zombies].after = after;
    g_n_zombies++;
    took = 1;
  } else if (e == cudaSuccess &&
             g_n_free < (int)(sizeof g_free / sizeof g_free[0])) {
    g_free[g_n_free++] = slot;
  }
  /* Otherwise (a failed query, a full zombie list) the slot is leaked
   * rather than risk a late copy landing in another map's status. */
  (void)cudaGetLastError();
  pthread_mutex_unlock(&g_slot_lock);
  return took;
}

/* ---- the verdict ------------------------------------------------------------ */
voxconv_status_t vc_kmap_status_message(const voxconv_kmap_t *m,
                                        const VcKmapStatus *st, char *msg,
                                        size_t size) {
  static const char *const names[4] = {"batch", "x", "y", "z"};
  if (st->bad_in_row != VC_NO_ROW) {
    const int32_t *r = st->bad_in_coords;
    if (r[0] < 0 || r[0] > VOXCONV_BATCH_MAX) {
      snprintf(msg, size,
               "voxconv_kmap_build: in coords row %llu: batch=%d outside 0..%d",
               st->bad_in_row, (int)r[0], VOXCONV_BATCH_MAX);
      return VOXCONV_STATUS_OUT_OF_RANGE;
    }
    for (int f = 1; f < 4; f++)
      if (r[f] < VOXCONV_COORD_MIN || r[f] > VOXCONV_COORD_MAX) {
        snprintf(msg, size,
                 "voxconv_kmap_build: in coords row %llu: %s=%d outside ±%d",
                 st->bad_in_row, names[f], (int)r[f], VOXCONV_COORD_MAX);
        return VOXCONV_STATUS_OUT_OF_RANGE;
      }
    snprintf(msg, size,
             "voxconv_kmap_build: in coords row %llu was flagged out of range "
             "but reads back as (%d,%d,%d,%d)",
             st->bad_in_row, r[0], r[1], r[2], r[3]);
    return VOXCONV_STATUS_INTERNAL;
  }
  if (st->dup_in_row != VC_NO_ROW) {
    const int32_t *r = st->dup_in_coords;
    snprintf(msg, size,
             "voxconv_kmap_build: in coords rows %lld and %llu are both "
             "(b,x,y,z) = (%d,%d,%d,%d); merge them first "
             "(voxconv_merge_duplicates)",
             st->dup_prev_row, st->dup_in_row, (int)r[0], (int)r[1], (int)r[2],
             (int)r[3]);
    return VOXCONV_STATUS_DUPLICATE_COORDS;
  }
  if (st->bounds_bad_row != VC_NO_ROW)
    return vc_bounds_violation(msg, size, st->bounds_bad_row,
                               st->bounds_bad_coords, &m->in_bounds);
  if (st->overflow_in || st->overflow_out) {
    /* Asynchronous builds size their tables for every key, so an insert
     * cannot run out of slots; this would be a bug. */
    snprintf(msg, size,
             "voxconv_kmap_build: GPU hash table overflow (%u input, %u "
             "output inserts failed) in a table sized for every key",
             st->overflow_in, st->overflow_out);
    return VOXCONV_STATUS_INTERNAL;
  }
  msg[0] = '\0';
  return VOXCONV_STATUS_SUCCESS;
}

/* Reads a finished build's slot into the map (lock held). */
static voxconv_status_t vc_complete_locked(voxconv_kmap_t *m, VcKmapPriv *p) {
  const VcKmapStatus *st = p->h_status;
  const int K = m->kvol;
  int64_t *po = (int64_t *)malloc((size_t)(K + 1) * sizeof *po);
  char msg[VC_ERROR_MAX];
  if (!po)
    return VOXCONV_STATUS_ALLOC_FAILED;
  for (int k = 0; k <= K; k++)
    po[k] = st->pair_offsets[k];
  m->pair_offsets = po;
  m->n_pairs = po[K];
  m->in_fingerprint = st->fingerprint;
  if (m->n_out < 0) { /* a deferred STRIDED build: its count arrives now */
    m->n_out = st->n_out;
    m->out_fingerprint = st->out_fingerprint;
    vc_take_out_bounds(m, st);
  }
  p->verdict = vc_kmap_status_message(m, st, msg, sizeof msg);
  if (p->verdict != VOXCONV_STATUS_SUCCESS) {
    p->verdict_msg = (char *)malloc(strlen(msg) + 1);
    if (p->verdict_msg)
      memcpy(p->verdict_msg, msg, strlen(msg) + 1);
  }
  /* The copy has landed (the caller saw the event complete). */
  vc_pinned_status_release(p->h_status, NULL);
  p->h_status = NULL;
  __atomic_store_n(&m->pending, 0, __ATOMIC_RELEASE);
  return VOXCONV_STATUS_SUCCESS;
}

/* Whether the build's event has completed; 0 while capturing or pending.
 * `wait`: block for it (an error while h's stream is capturing). */
static voxconv_status_t vc_build_done(voxconv_handle_t *h, VcKmapPriv *p,
                                      int wait, const char *func, int *done) {
  *done = 0;
  if (p->captured)
    return wait ? vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                          "%s: this kernel map was built while its stream was "
                          "being captured into a CUDA graph; its pair counts "
                          "and the check of its coordinates exist only in "
                          "the graph's replays",
                          func)
                : VOXCONV_STATUS_SUCCESS;
  if (vc_stream_capturing(h))
    return wait ? vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                          "%s: needs the kernel map's pair counts on the host, "
                          "which cannot be waited for while the stream is "
                          "being captured into a CUDA graph (complete the map "
                          "with voxconv_kmap_wait before the capture)",
                          func)
                : VOXCONV_STATUS_SUCCESS;
  cudaError_t e;
  if (wait) {
    VcDeviceGuard guard(h);
    e = cudaEventSynchronize(p->ready);
  } else {
    e = vc_relaxed([&] { return cudaEventQuery(p->ready); });
  }
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return VOXCONV_STATUS_SUCCESS;
  }
  if (e != cudaSuccess)
    return vc_cuda_fail(h, e, wait ? "cudaEventSynchronize" : "cudaEventQuery",
                        func);
  *done = 1;
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_kmap_poll(voxconv_handle_t *h,
                                              const voxconv_kmap_t *cm,
                                              int wait, const char *func) {
  /* Maps are const to the ops, but completing one is part of its build
   * (as the tensor-core algorithm's row orders are part of its use). */
  voxconv_kmap_t *m = (voxconv_kmap_t *)cm;
  VcKmapPriv *p = (VcKmapPriv *)m->backend_priv;
  if (!p || (!__atomic_load_n(&m->pending, __ATOMIC_ACQUIRE) &&
             p->verdict == VOXCONV_STATUS_SUCCESS))
    return VOXCONV_STATUS_SUCCESS;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  pthread_mutex_lock(&p->lock);
  if (m->pending) {
    int done = 0;
    st = vc_build_done(h, p, wait, func, &done);
    if (st == VOXCONV_STATUS_SUCCESS && done && vc_complete_locked(m, p) !=
                                                    VOXCONV_STATUS_SUCCESS)
      st = vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "%s: out of host memory completing a kernel map", func);
  }
  const voxconv_status_t verdict = m->pending ? VOXCONV_STATUS_SUCCESS
                                              : p->verdict;
  pthread_mutex_unlock(&p->lock);
  if (st != VOXCONV_STATUS_SUCCESS)
    return st;
  if (verdict != VOXCONV_STATUS_SUCCESS)
    return vc_fail(h, verdict,
                   "%s: the kernel map's build failed (it completed "
                   "asynchronously, so its error is reported here): %s",
                   func, p->verdict_msg ? p->verdict_msg : "(no message)");
  return VOXCONV_STATUS_SUCCESS;
}

/* voxconv_kmap_order: h's stream waits for the map's build. The caller has
 * waited for the build to be issued (vc_kmap_issued). */
extern "C" voxconv_status_t vc_cuda_kmap_order(voxconv_handle_t *h,
                                               const voxconv_kmap_t *m) {
  VcKmapPriv *p = (VcKmapPriv *)m->backend_priv;
  if (!p || p->captured || p->stream == vc_cuda_stream(h))
    return VOXCONV_STATUS_SUCCESS; /* built on h's stream: in order */
  VcDeviceGuard guard(h);
  if (p->ready && p->ready_is_build) {
    VC_CUDA_TRY(h, cudaStreamWaitEvent(vc_cuda_stream(h), p->ready, 0));
    return VOXCONV_STATUS_SUCCESS;
  }
  /* A synchronous build: everything it queued is on its stream before
   * now, so an event recorded there now follows it (and perhaps more). */
  cudaEvent_t e;
  VC_CUDA_TRY(h, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(e, p->stream);
  if (err == cudaSuccess)
    err = cudaStreamWaitEvent(vc_cuda_stream(h), e, 0);
  cudaEventDestroy(e);
  if (err != cudaSuccess)
    return vc_cuda_fail(h, err, "cudaStreamWaitEvent", "voxconv_kmap_order");
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" int vc_cuda_kmap_captured(const voxconv_kmap_t *m) {
  const VcKmapPriv *p = (const VcKmapPriv *)m->backend_priv;
  return p && p->captured;
}

/* vc_cuda.h. The wait comes first also for a writer: its event then
 * follows the earlier writes too, so one event serves every table. */
extern "C" voxconv_status_t vc_cuda_kmap_lazy_lock(voxconv_handle_t *h,
                                                   const voxconv_kmap_t *m,
                                                   const char *func,
                                                   int *keep) {
  VcKmapPriv *p = (VcKmapPriv *)m->backend_priv;
  const int capturing = vc_stream_capturing(h);
  if (keep)
    *keep = !capturing || p->captured;
  pthread_mutex_lock(&p->lock);
  if (!p->lazy_done)
    return VOXCONV_STATUS_SUCCESS;
  const char *call = "cudaEventSynchronize";
  cudaError_t e;
  if (capturing) {
    VcDeviceGuard guard(h);
    /* cudaStreamGetId is refused on a capturing stream, and the graph
     * cannot wait for an outside event: the host waits (cheap when the
     * writer is this stream, whose work before the capture has run). */
    e = vc_relaxed([&] { return cudaEventSynchronize(p->lazy_done); });
  } else {
    const cudaStream_t s = vc_cuda_stream(h);
    unsigned long long id = 0;
    call = "cudaStreamGetId";
    e = cudaStreamGetId(s, &id);
    if (e == cudaSuccess &&
        (p->lazy_stream == id ||
         (p->lazy_seen == id && p->lazy_seen_gen == p->lazy_gen)))
      return VOXCONV_STATUS_SUCCESS;
    if (e == cudaSuccess) { /* (the common case returned above, with no
                               device switch: every conv call on a map
                               passes here) */
      VcDeviceGuard guard(h);
      call = "cudaStreamWaitEvent";
      e = cudaStreamWaitEvent(s, p->lazy_done, 0);
    }
    if (e == cudaSuccess) {
      p->lazy_seen = id;
      p->lazy_seen_gen = p->lazy_gen;
    }
  }
  if (e == cudaSuccess)
    return VOXCONV_STATUS_SUCCESS;
  pthread_mutex_unlock(&p->lock);
  return vc_cuda_fail(h, e, call, func);
}

/* vc_cuda.h. Inside a capture nothing is recorded: a captured map's
 * tables are written by every replay, in the graph's order. */
extern "C" voxconv_status_t vc_cuda_kmap_lazy_unlock(voxconv_handle_t *h,
                                                     const voxconv_kmap_t *m,
                                                     int wrote) {
  VcKmapPriv *p = (VcKmapPriv *)m->backend_priv;
  cudaError_t e = cudaSuccess;
  if (wrote && !vc_stream_capturing(h)) {
    VcDeviceGuard guard(h);
    unsigned long long id = 0;
    e = cudaStreamGetId(vc_cuda_stream(h), &id);
    if (e == cudaSuccess && !p->lazy_done)
      e = cudaEventCreateWithFlags(&p->lazy_done, cudaEventDisableTiming);
    if (e == cudaSuccess)
      e = cudaEventRecord(p->lazy_done, vc_cuda_stream(h));
    if (e == cudaSuccess) {
      p->lazy_stream = id;
      p->lazy_gen++;
    }
  }
  pthread_mutex_unlock(&p->lock);
  if (e != cudaSuccess)
    return vc_cuda_fail(h, e, "cudaEventRecord / cudaStreamGetId",
                        "a kernel map's table written on first need");
  return VOXCONV_STATUS_SUCCESS;
}
