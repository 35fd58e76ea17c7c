/* Does a second host thread issuing launches slow the first one down?
 * (issue 20: would a library worker thread issuing kernel-map builds off
 * the caller's thread contend with the caller's own launches in the
 * driver?) Each thread issues `n` rounds of a build-like mix (3 launches,
 * 1 memset, 2 cudaPeekAtLastError) on its own stream; measured alone and
 * with both threads at once. A diagnostic.
 *
 *   nvcc -O2 -o launch_contention bench/debug/launch_contention.cu -lpthread
 *   ./launch_contention [rounds] */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__global__ void tiny(int *p, int v) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && p)
    p[0] = v;
}

struct Job {
  cudaStream_t s;
  int *buf;
  int rounds;
  double us_per_call;
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static void *issue(void *arg) {
  Job *j = (Job *)arg;
  /* Timed in batches of 200 rounds with a sync between them (untimed),
   * so that the launch queue never fills (then the GPU would be timed). */
  double spent = 0, t0 = now_us();
  for (int r = 0; r < j->rounds; r++) {
    if (r % 200 == 0 && r > 0) {
      spent += now_us() - t0;
      cudaStreamSynchronize(j->s);
      t0 = now_us();
    }
    tiny<<<64, 128, 0, j->s>>>(j->buf, r);
    (void)cudaPeekAtLastError();
    cudaMemsetAsync(j->buf + 1, 0, 256, j->s);
    tiny<<<64, 128, 0, j->s>>>(j->buf, r + 1);
    (void)cudaPeekAtLastError();
    tiny<<<1, 32, 0, j->s>>>(j->buf, r + 2);
  }
  spent += now_us() - t0;
  j->us_per_call = spent / (j->rounds * 4.0);
  return NULL;
}

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 5000;
  Job j[2];
  for (int i = 0; i < 2; i++) {
    cudaStreamCreateWithFlags(&j[i].s, cudaStreamNonBlocking);
    cudaMalloc(&j[i].buf, 4096);
    j[i].rounds = rounds;
  }
  issue(&j[0]); /* warm-up */
  cudaDeviceSynchronize();
  for (int rep = 0; rep < 3; rep++) {
    issue(&j[0]);
    const double alone = j[0].us_per_call;
    cudaDeviceSynchronize();
    pthread_t t;
    pthread_create(&t, NULL, issue, &j[1]);
    issue(&j[0]);
    pthread_join(t, NULL);
    cudaDeviceSynchronize();
    printf("rep %d: alone %.2f us/call; together %.2f and %.2f us/call "
           "(launches + memsets, each thread)\n",
           rep, alone, j[0].us_per_call, j[1].us_per_call);
  }
  return 0;
}
