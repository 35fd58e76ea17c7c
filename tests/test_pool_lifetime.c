/* Kernel maps that outlive the handle that built them (voxconv.h allows
 * it: a map may be used and destroyed through another handle of its
 * device). Their buffers come from the destroyed handle's memory pool.
 * Destroying a pool that still held them corrupted the CUDA 13 driver on
 * the H100: in test_build_worker's sequence, repeated, a later allocation
 * or stream synchronisation of the process died with SIGSEGV inside
 * libcuda (6 of 6 processes; s28 call 1, docs/perf-notes.md item 99). The
 * library now keeps such a pool, retired, until it is empty
 * (cuda_runtime.cu). This test checks that mechanism directly (the old
 * path, planted, fails 3 checks per run; it did not crash in this test's
 * 6 runs, so test_build_worker repeats its own sequence to catch that).
 *
 * Three rounds, the build worker on in the middle one:
 *  1. a handle h2 on a stream of its own builds SUBMANIFOLD and deferred
 *     STRIDED maps, then is destroyed: its pool is retired, not destroyed
 *     (vc_cuda_retired_pools counts it);
 *  2. through another handle the maps give the same forward bits and
 *     counts as maps built there, and are destroyed; once their frees have
 *     run, the next check destroys the pool (the count goes back);
 *  3. allocation-heavy work after it: a build captured into a CUDA graph
 *     (graph memory nodes), replayed, its map used for a forward, compared
 *     bitwise with the eager map.
 * Needs a GPU (exit 77 = skipped without one). */
#include "gpu_test_util.h"

#include <stdlib.h>
#include <string.h>

#ifdef VC_TEST_CUDA_RUNTIME
#include "cuda/vc_cuda.h"
#include "cuda_test_util.h"

#define C 32
#define KV 27
#define NMAPS 6

/* Forward of P's problem on map m through h (poisoned output first), read
 * back; NULL when the call fails. */
static uint16_t *forward_bits(conv_problem_t *P, voxconv_handle_t *h,
                              const voxconv_kmap_t *m) {
  cudaMemsetAsync(P->y, 0xFF, (size_t)P->n * C * 2, P->stream);
  const voxconv_feats_t x = {P->x, P->n, C, VOXCONV_DTYPE_F16};
  const voxconv_feats_t y = {P->y, P->n, C, VOXCONV_DTYPE_F16};
  const voxconv_weights_t w = {P->w, KV, C, C, VOXCONV_DTYPE_F16};
  const voxconv_status_t st = voxconv_conv_forward(h, m, &x, &w, &y, &P->opt);
  cudaStreamSynchronize(P->stream);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "forward: %s",
            voxconv_get_last_error(h));
  return st == VOXCONV_STATUS_SUCCESS ? dev_download_u16(P->y, P->n * C)
                                      : NULL;
}

static int counts_equal(const voxconv_kmap_t *a, const voxconv_kmap_t *b) {
  voxconv_kmap_info_t ia, ib;
  voxconv_kmap_get_info(a, &ia);
  voxconv_kmap_get_info(b, &ib);
  return ia.n_out == ib.n_out && ia.n_pairs == ib.n_pairs;
}

/* 1 and 2: maps of a destroyed handle, used and destroyed through P->h. */
static void orphaned_maps(conv_problem_t *P, int round, int worker,
                          const uint16_t *ref_y, const voxconv_kmap_t *ref_t) {
  const voxconv_kmap_desc_t ds = desc3(VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
  const voxconv_kmap_desc_t dt = desc3(VOXCONV_KMAP_STRIDED, 2, 2);
  const voxconv_coords_t in = {P->coords, P->n, {1, 1, 1}};
  cudaStream_t s2 = NULL;
  CUDA_OK_VOID(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  voxconv_handle_desc_t d = {VOXCONV_BACKEND_CUDA, 0, s2, NULL, 0, 1};
  voxconv_handle_t *h2 = NULL;
  VC_REQUIRE_VOID(voxconv_create(&h2, &d) == VOXCONV_STATUS_SUCCESS &&
                      voxconv_handle_set_build_worker(h2, worker) ==
                          VOXCONV_STATUS_SUCCESS,
                  "round %d: second handle: %s", round,
                  voxconv_get_last_error(h2));
  voxconv_kmap_t *m[NMAPS] = {0};
  int built = 0;
  for (int i = 0; i < NMAPS; i++)
    built += (i % 3 == 2 ? voxconv_kmap_build_async(h2, &dt, &in, NULL, &m[i])
                         : voxconv_kmap_build(h2, &ds, &in, NULL, &m[i])) ==
             VOXCONV_STATUS_SUCCESS;
  VC_EXPECT(built == NMAPS, "round %d: %d of %d builds on h2: %s", round,
            built, NMAPS, voxconv_get_last_error(h2));
  const int retired0 = vc_cuda_retired_pools();
  VC_EXPECT(voxconv_destroy(h2) == VOXCONV_STATUS_SUCCESS,
            "round %d: destroying h2", round);
  VC_EXPECT(vc_cuda_retired_pools() == retired0 + 1,
            "round %d: h2's pool, holding its maps' buffers, should wait "
            "retired: %d retired, was %d", round, vc_cuda_retired_pools(),
            retired0);
  for (int i = 0; i < NMAPS; i++) {
    if (!m[i])
      continue;
    VC_EXPECT(voxconv_kmap_wait(P->h, m[i]) == VOXCONV_STATUS_SUCCESS,
              "round %d: map %d after its handle: %s", round, i,
              voxconv_get_last_error(P->h));
    if (i % 3 == 2) {
      VC_EXPECT(counts_equal(m[i], ref_t), "round %d: strided map %d's "
                "counts differ from P's own", round, i);
    } else if (i == 0) {
      uint16_t *y = forward_bits(P, P->h, m[i]);
      if (y)
        expect_same_u16("forward on a map of a destroyed handle", y, ref_y,
                        P->n * C);
      free(y);
    }
    VC_EXPECT(voxconv_kmap_destroy(P->h, m[i]) == VOXCONV_STATUS_SUCCESS,
              "round %d: destroy map %d: %s", round, i,
              voxconv_get_last_error(P->h));
  }
  cudaStreamSynchronize(P->stream); /* the maps' frees have run */
  vc_cuda_reap_pools();
  VC_EXPECT(vc_cuda_retired_pools() == retired0,
            "round %d: h2's pool is empty but still retired (%d, was %d)",
            round, vc_cuda_retired_pools(), retired0);
  cudaStreamDestroy(s2);
}

/* 3: a build captured on P's stream, replayed, its map used. */
static void captured_build(conv_problem_t *P, int round,
                           const uint16_t *ref_y) {
  const voxconv_kmap_desc_t ds = desc3(VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
  const voxconv_coords_t in = {P->coords, P->n, {1, 1, 1}};
  char what[32];
  snprintf(what, sizeof what, "round %d", round);
  cudaGraphExec_t exec = NULL;
  voxconv_kmap_t *mc =
      captured_build_replayed(what, P->h, P->stream, &ds, &in, &exec);
  if (exec) {
    uint16_t *y = forward_bits(P, P->h, mc);
    if (y)
      expect_same_u16("forward on the replayed map", y, ref_y, P->n * C);
    free(y);
    cudaGraphExecDestroy(exec);
  }
  voxconv_kmap_destroy(P->h, mc);
}

int main(void) {
  vc_test_init("test_pool_lifetime");
  if (gpu_test_no_device("test_pool_lifetime"))
    return VC_TEST_SKIP;
  conv_problem_t P;
  if (!conv_problem_init(&P, C, 40000, 36))
    return vc_test_finish();
  printf("%lld voxels, C = %d, f16\n", (long long)P.n, C);
  const voxconv_kmap_desc_t ds = desc3(VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
  const voxconv_kmap_desc_t dt = desc3(VOXCONV_KMAP_STRIDED, 2, 2);
  const voxconv_coords_t in = {P.coords, P.n, {1, 1, 1}};
  voxconv_kmap_t *ref_s = NULL, *ref_t = NULL;
  if (voxconv_kmap_build(P.h, &ds, &in, NULL, &ref_s) !=
          VOXCONV_STATUS_SUCCESS ||
      voxconv_kmap_build(P.h, &dt, &in, NULL, &ref_t) !=
          VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(0, "reference maps: %s", voxconv_get_last_error(P.h));
    return vc_test_finish();
  }
  uint16_t *ref_y = forward_bits(&P, P.h, ref_s);
  if (ref_y)
    for (int round = 0; round < 3; round++) {
      orphaned_maps(&P, round, round == 1, ref_y, ref_t);
      captured_build(&P, round, ref_y);
    }
  free(ref_y);
  voxconv_kmap_destroy(P.h, ref_s);
  voxconv_kmap_destroy(P.h, ref_t);
  voxconv_destroy(P.h);
  cudaStreamDestroy(P.stream);
  return vc_test_finish();
}

#else /* no CUDA runtime headers: nothing to test here */
int main(void) {
  vc_test_init("test_pool_lifetime");
  printf("test_pool_lifetime: SKIPPED: built without the CUDA backend\n");
  return VC_TEST_SKIP;
}
#endif
