/* The build worker (voxconv_handle_set_build_worker): a library thread per
 * handle that issues the handle's asynchronous kernel-map builds, so that
 * the caller's thread gets the map back after the argument checks instead
 * of after the build's ~20-60 CUDA runtime calls (docs/perf-notes.md item
 * 98: a PyTorch forward of workload A spends 1.7 ms of its host time in
 * them on a slow host).
 *
 * Contract (voxconv.h):
 *  - Only builds that would be asynchronous anyway go to the worker
 *    (SUBMANIFOLD, deferred STRIDED; not while h's stream is captured):
 *    what the host knows of such a build before the GPU runs it (n_out,
 *    the pair capacity, `pending`) does not depend on the build, so the
 *    caller's thread sets it (vc_cuda_kmap_preset_async) and the map's
 *    info reads the same with or without the worker.
 *  - voxconv_kmap_prepare of a map the worker builds is a job too, run
 *    after the build (FIFO); the map's uses wait for it as for the build.
 *  - Every other public call on the handle first drains the worker
 *    (vc_clear_error): work the caller queues on the stream comes after
 *    the builds it queued before, and the worker's use of the handle's
 *    state (allocation cache, workspace) never overlaps the caller's.
 *  - Every use of a map queued here, on any handle, first waits until the
 *    worker has issued it (vc_kmap_issued, called by the map's poll, wait,
 *    destroy, out_coords and order).
 *  - The worker builds on a copy of the handle with its own error buffer;
 *    a build that fails there leaves its status and message in the map,
 *    and every later call on the map returns them.
 *  - The caller's buffers (the input coordinates) must stay valid until
 *    the build has been issued: until voxconv_kmap_order, a use of the map,
 *    or any call on the handle returns. */
#include "vc_kmap.h"
#include "../tune/vc_tune.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

typedef struct vc_build_job {
  voxconv_kmap_t *m;
  voxconv_coords_t in;
  int flags;
  unsigned prepare; /* 0: a build; else voxconv_kmap_prepare's `what` */
  double queued_ms;
  struct vc_build_job *next;
} vc_build_job_t;

/* VOXCONV_WORKER_TRACE=1 (a diagnostic, docs/perf-notes.md item 108): the
 * worker keeps, per job, how long it sat queued and how long issuing it
 * took, and per waiting use of a map how long the caller waited and how
 * long after the issue it woke; a summary goes to stderr when the worker
 * stops. Up to TRACE_MAX of each. */
#define TRACE_MAX 4096
typedef struct vc_worker_trace {
  int n_jobs, n_waits;
  float queued_us[TRACE_MAX], issue_us[TRACE_MAX];
  int mode[TRACE_MAX];
  float wait_us[TRACE_MAX], wake_us[TRACE_MAX];
} vc_worker_trace_t;

struct vc_build_worker {
  voxconv_handle_t *h;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake; /* a job was queued, or stop */
  pthread_cond_t done; /* a job was issued */
  vc_build_job_t *head, *tail;
  int unissued; /* queued or being issued */
  int stop;
  /* How long a waiting use of a map spins before it sleeps, and how long
   * the worker spins for its next job after one (ms; 0: sleep at once):
   * VOXCONV_WORKER_WAIT_SPIN_US, VOXCONV_WORKER_IDLE_SPIN_US, read when the
   * worker starts (item 108). A sleeping thread's wake-up took longer than
   * the issue itself on the lent host. */
  double wait_spin_ms, idle_spin_ms;
  vc_worker_trace_t *trace; /* NULL unless VOXCONV_WORKER_TRACE */
  /* The handle the builds run on: h's fields but the error buffer, taken
   * afresh for each job (h's settings may change between drains). */
  voxconv_handle_t shadow;
};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* "median / p90 / max" of v[0..n) (sorted in place). */
static void trace_line(const char *what, float *v, int n) {
  if (n <= 0)
    return;
  qsort(v, (size_t)n, sizeof *v, cmp_float);
  fprintf(stderr,
          "voxconv: build worker: %-32s n %5d  median %8.1f  p90 %8.1f  "
          "max %8.1f us\n",
          what, n, v[n / 2], v[(n * 9) / 10], v[n - 1]);
}

static void trace_report(struct vc_build_worker *w) {
  vc_worker_trace_t *t = w->trace;
  float *q = (float *)malloc(2 * TRACE_MAX * sizeof *q);
  if (!q)
    return;
  float *is = q + TRACE_MAX;
  for (int pass = 0; pass < 2; pass++) {
    const int mode = pass ? VOXCONV_KMAP_STRIDED : VOXCONV_KMAP_SUBMANIFOLD;
    int n = 0;
    for (int i = 0; i < t->n_jobs; i++)
      if (t->mode[i] == mode) {
        q[n] = t->queued_us[i];
        is[n++] = t->issue_us[i];
      }
    trace_line(pass ? "strided: queued" : "submanifold: queued", q, n);
    trace_line(pass ? "strided: issuing" : "submanifold: issuing", is, n);
  }
  free(q);
  trace_line("use of a map: waited", t->wait_us, t->n_waits);
  trace_line("use of a map: woke after the issue", t->wake_us, t->n_waits);
}

static void finish_job(struct vc_build_worker *w, vc_build_job_t *job,
                       voxconv_status_t st) {
  voxconv_kmap_t *m = job->m;
  if (w->trace) /* read by a traced wait after `issuing` drops */
    m->issued_ms = vc_monotonic_ms();
  /* A failed prepare is only a missed head start: the op that needs the
   * table makes it and reports its own failure. */
  if (st != VOXCONV_STATUS_SUCCESS && !job->prepare) {
    /* The map stays (the caller holds it) without buffers, and reports
     * this from now on. */
    const size_t len = strlen(w->shadow.last_error);
    m->issue_msg = (char *)malloc(len + 1);
    if (m->issue_msg)
      memcpy(m->issue_msg, w->shadow.last_error, len + 1);
    m->issue_status = st;
#ifdef VOXCONV_HAVE_CUDA
    vc_cuda_kmap_free_priv(&w->shadow, m);
#endif
    vc_kmap_free_buffers(&w->shadow, m);
  }
  free(job);
  pthread_mutex_lock(&w->lock);
  __atomic_sub_fetch(&m->issuing, 1, __ATOMIC_RELEASE);
  w->unissued--;
  pthread_cond_broadcast(&w->done);
  pthread_mutex_unlock(&w->lock);
}

static void *worker_main(void *arg) {
  struct vc_build_worker *w = (struct vc_build_worker *)arg;
#ifdef VOXCONV_HAVE_CUDA
  vc_cuda_thread_init(w->h);
#endif
  pthread_mutex_lock(&w->lock);
  for (;;) {
    if (!w->head && !w->stop && w->idle_spin_ms > 0) {
      pthread_mutex_unlock(&w->lock);
      const double until = vc_monotonic_ms() + w->idle_spin_ms;
      while (!__atomic_load_n(&w->head, __ATOMIC_ACQUIRE) &&
             !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE) &&
             vc_monotonic_ms() < until)
        cpu_relax();
      pthread_mutex_lock(&w->lock);
    }
    while (!w->head && !w->stop)
      pthread_cond_wait(&w->wake, &w->lock);
    if (!w->head)
      break; /* stop, and nothing left */
    vc_build_job_t *job = w->head;
    w->head = job->next;
    if (!w->head)
      w->tail = NULL;
    pthread_mutex_unlock(&w->lock);
    /* h is the caller's while it waits for no build: the fields the
     * builds read are only changed by calls that drained first. */
    memcpy(&w->shadow, w->h, offsetof(voxconv_handle_t, last_error));
    w->shadow.worker = NULL; /* its calls must not wait for themselves */
    w->shadow.capture_depth = 0;
    w->shadow.last_error[0] = '\0';
    voxconv_status_t st = VOXCONV_STATUS_UNSUPPORTED;
    const double t0 = w->trace ? vc_monotonic_ms() : 0;
#ifdef VOXCONV_HAVE_CUDA
    if (job->prepare) {
      /* behind its map's build (FIFO), unless that failed */
      if (job->m->issue_status == VOXCONV_STATUS_SUCCESS)
        st = vc_cuda_kmap_prepare(&w->shadow, job->m, job->prepare,
                                  "voxconv_kmap_prepare");
    } else {
      vc_capture_scope_begin(&w->shadow);
      st = vc_cuda_kmap_build(&w->shadow, job->m, &job->in, NULL,
                              job->flags | VC_BUILD_PRESET);
      vc_capture_scope_end(&w->shadow);
    }
#endif
    if (w->trace && !job->prepare && w->trace->n_jobs < TRACE_MAX) {
      vc_worker_trace_t *t = w->trace;
      t->queued_us[t->n_jobs] = (float)((t0 - job->queued_ms) * 1e3);
      t->issue_us[t->n_jobs] = (float)((vc_monotonic_ms() - t0) * 1e3);
      t->mode[t->n_jobs++] = job->m->desc.mode;
    }
    finish_job(w, job, st);
    pthread_mutex_lock(&w->lock);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

void vc_build_worker_drain(voxconv_handle_t *h) {
  struct vc_build_worker *w = h->worker;
  if (!w)
    return;
  pthread_mutex_lock(&w->lock);
  while (w->unissued > 0)
    pthread_cond_wait(&w->done, &w->lock);
  pthread_mutex_unlock(&w->lock);
}

void vc_build_worker_stop(voxconv_handle_t *h) {
  struct vc_build_worker *w = h->worker;
  if (!w)
    return;
  pthread_mutex_lock(&w->lock);
  __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->lock);
  pthread_join(w->thread, NULL); /* it issues what is queued first */
  h->worker = NULL;
  if (w->trace) {
    trace_report(w);
    free(w->trace);
  }
  pthread_cond_destroy(&w->wake);
  pthread_cond_destroy(&w->done);
  pthread_mutex_destroy(&w->lock);
  free(w);
}

/* Queues a job on h's worker. `issuing` counts the map's jobs not yet
 * issued: a build's is published with the map pointer, a prepare's added
 * under the lock, before the job can run and take it off again. */
static voxconv_status_t submit_job(voxconv_handle_t *h, voxconv_kmap_t *m,
                                   const voxconv_coords_t *in, int flags,
                                   unsigned prepare, const char *func) {
  struct vc_build_worker *w = h->worker;
  vc_build_job_t *job = (vc_build_job_t *)calloc(1, sizeof *job);
  if (!job)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "%s: out of host memory (%zu bytes)", func, sizeof *job);
  job->m = m;
  if (in)
    job->in = *in;
  job->flags = flags;
  job->prepare = prepare;
  job->queued_ms = w->trace ? vc_monotonic_ms() : 0;
  if (!prepare) {
    m->issuer = w;
    m->issuing = 1; /* published to other threads with the map pointer */
  }
  pthread_mutex_lock(&w->lock);
  if (prepare)
    __atomic_add_fetch(&m->issuing, 1, __ATOMIC_RELEASE);
  if (w->tail)
    w->tail->next = job;
  else /* (read without the lock by the worker's idle spin) */
    __atomic_store_n(&w->head, job, __ATOMIC_RELEASE);
  w->tail = job;
  w->unissued++;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->lock);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_build_worker_submit(voxconv_handle_t *h, voxconv_kmap_t *m,
                                        const voxconv_coords_t *in,
                                        int flags) {
  return submit_job(h, m, in, flags, 0, "voxconv_kmap_build");
}

voxconv_status_t vc_build_worker_prepare(voxconv_handle_t *h,
                                         voxconv_kmap_t *m, unsigned what) {
  return submit_job(h, m, NULL, 0, what, "voxconv_kmap_prepare");
}

void vc_kmap_issue_wait(const voxconv_kmap_t *m) {
  if (!__atomic_load_n(&m->issuing, __ATOMIC_ACQUIRE))
    return;
  struct vc_build_worker *w = m->issuer;
  const double t0 = (w->trace || w->wait_spin_ms > 0) ? vc_monotonic_ms() : 0;
  if (w->wait_spin_ms > 0) {
    const double until = t0 + w->wait_spin_ms;
    while (__atomic_load_n(&m->issuing, __ATOMIC_ACQUIRE) &&
           vc_monotonic_ms() < until)
      cpu_relax();
  }
  pthread_mutex_lock(&w->lock);
  while (__atomic_load_n(&m->issuing, __ATOMIC_ACQUIRE))
    pthread_cond_wait(&w->done, &w->lock);
  if (w->trace && w->trace->n_waits < TRACE_MAX) {
    vc_worker_trace_t *t = w->trace;
    const double now = vc_monotonic_ms();
    t->wait_us[t->n_waits] = (float)((now - t0) * 1e3);
    t->wake_us[t->n_waits++] = (float)((now - m->issued_ms) * 1e3);
  }
  pthread_mutex_unlock(&w->lock);
}

voxconv_status_t vc_kmap_issued(voxconv_handle_t *h, const voxconv_kmap_t *m,
                                const char *func) {
  vc_kmap_issue_wait(m);
  if (m->issue_status != VOXCONV_STATUS_SUCCESS)
    return vc_fail(h, m->issue_status,
                   "%s: the kernel map's build failed on the handle's build "
                   "worker (reported at the map's first use): %s",
                   func, m->issue_msg ? m->issue_msg : "(no message)");
  return VOXCONV_STATUS_SUCCESS;
}

/* A spin knob in microseconds (unset: 0). A malformed or negative value
 * is named in a warning and means 0, the default, rather than whatever a
 * partial parse would give. */
static double env_spin_ms(const char *name) {
  const char *v = vc_getenv(name);
  double us = 0;
  if (v && vc_parse_nonneg(v, &us) != 0) /* us stays 0 */
    vc_tune_warn_once(name,
                      "%s='%s' is not a number of microseconds >= 0; "
                      "using 0 (no spin)",
                      name, v);
  return us * 1e-3;
}

voxconv_status_t voxconv_handle_set_build_worker(voxconv_handle_t *h,
                                                 int enable) {
  static const char *const func = "voxconv_handle_set_build_worker";
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h); /* drains a running worker */
  if (!enable) {
    vc_build_worker_stop(h);
    return VOXCONV_STATUS_SUCCESS;
  }
  if (h->backend != VOXCONV_BACKEND_CUDA)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: the CPU backend builds kernel maps synchronously; a "
                   "build worker exists for CUDA handles only",
                   func);
  if (enable != 1)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: enable = %d is not 0 (off) or 1 (on)", func, enable);
  if (h->worker)
    return VOXCONV_STATUS_SUCCESS;
  struct vc_build_worker *w =
      (struct vc_build_worker *)calloc(1, sizeof *w);
  if (!w)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "%s: out of host memory (%zu bytes)", func, sizeof *w);
  w->h = h;
  w->wait_spin_ms = env_spin_ms("VOXCONV_WORKER_WAIT_SPIN_US");
  w->idle_spin_ms = env_spin_ms("VOXCONV_WORKER_IDLE_SPIN_US");
  if (vc_parse_bool(vc_getenv("VOXCONV_WORKER_TRACE")) == 1)
    w->trace = (vc_worker_trace_t *)calloc(1, sizeof *w->trace);
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->wake, NULL);
  pthread_cond_init(&w->done, NULL);
  const int e = pthread_create(&w->thread, NULL, worker_main, w);
  if (e != 0) {
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->lock);
    free(w->trace);
    free(w);
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "%s: cannot start the worker thread (error %d)", func, e);
  }
  h->worker = w;
  return VOXCONV_STATUS_SUCCESS;
}
