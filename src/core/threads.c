/* A small parallel-for over pthreads. Threads are created per call: the
 * CPU backend's ops are coarse (milliseconds), so a persistent pool would
 * save little and add shutdown and fork-safety problems. Work is handed
 * out in chunks through an atomic counter; callers write disjoint outputs,
 * so results never depend on which thread ran which chunk. */
#include "vc_core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

int vc_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

typedef struct {
  vc_task_fn fn;
  void *ctx;
  int64_t n, grain;
  atomic_llong next;
} vc_pool_job_t;

typedef struct {
  vc_pool_job_t *job;
  int tid;
} vc_pool_arg_t;

static void *vc_pool_worker(void *p) {
  vc_pool_arg_t *arg = (vc_pool_arg_t *)p;
  vc_pool_job_t *job = arg->job;
  for (;;) {
    int64_t b = atomic_fetch_add(&job->next, job->grain);
    if (b >= job->n)
      break;
    int64_t e = b + job->grain < job->n ? b + job->grain : job->n;
    job->fn(job->ctx, b, e, arg->tid);
  }
  return NULL;
}

#define VC_MAX_THREADS 256

voxconv_status_t vc_parallel_for(const voxconv_handle_t *h, int64_t n,
                                 int64_t grain, vc_task_fn fn, void *ctx) {
  if (n <= 0)
    return VOXCONV_STATUS_SUCCESS;
  if (grain < 1)
    grain = 1;
  int nt = h ? h->num_threads : 1;
  int64_t chunks = (n + grain - 1) / grain;
  if (nt > chunks)
    nt = (int)chunks;
  if (nt > VC_MAX_THREADS)
    nt = VC_MAX_THREADS;
  if (nt <= 1) {
    for (int64_t b = 0; b < n; b += grain)
      fn(ctx, b, b + grain < n ? b + grain : n, 0);
    return VOXCONV_STATUS_SUCCESS;
  }
  vc_pool_job_t job = {fn, ctx, n, grain, 0};
  atomic_init(&job.next, 0);
  pthread_t th[VC_MAX_THREADS];
  vc_pool_arg_t args[VC_MAX_THREADS];
  int started = 0;
  for (int t = 1; t < nt; t++) {
    args[t].job = &job;
    args[t].tid = t;
    if (pthread_create(&th[t], NULL, vc_pool_worker, &args[t]) != 0)
      break; /* fewer threads is still correct */
    started = t;
  }
  args[0].job = &job;
  args[0].tid = 0;
  vc_pool_worker(&args[0]);
  for (int t = 1; t <= started; t++)
    pthread_join(th[t], NULL);
  return VOXCONV_STATUS_SUCCESS;
}
