/* Shared helpers for the C tests: a seeded RNG (the seed is printed and can
 * be replayed with VOXCONV_TEST_SEED), poisoning, checks that count
 * failures, and access to the recorded scans. */
#ifndef VC_TEST_H
#define VC_TEST_H

#include "voxconv.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exit code for "skipped" (ctest SKIP_RETURN_CODE). */
#define VC_TEST_SKIP 77

extern int vc_test_failures;
extern int vc_test_checks;

/* Seeds the RNG from VOXCONV_TEST_SEED or the clock and prints the seed. */
uint64_t vc_test_init(const char *test_name);
uint64_t vc_rand_u64(void);
double vc_rand_uniform(void);            /* [0, 1) */
double vc_rand_normal(void);             /* N(0, 1) */
int64_t vc_rand_range(int64_t lo, int64_t hi); /* [lo, hi] inclusive */

/* Fills n elements of dtype with N(0,1) values (rounded to dtype). */
void vc_fill_normal(void *data, voxconv_dtype_t dtype, int64_t n);
/* Writes NaN with a recognisable payload into every element. */
void vc_poison(void *data, voxconv_dtype_t dtype, int64_t n);
/* 1 if element i still holds the poison pattern (so was not written). */
int vc_is_poison(const void *data, voxconv_dtype_t dtype, int64_t i);
/* Counts the poisoned elements left in [0, n). */
int64_t vc_count_poison(const void *data, voxconv_dtype_t dtype, int64_t n);
double vc_get(const void *data, voxconv_dtype_t dtype, int64_t i);

/* Error statistics of got (dtype) against ref (f64):
 * rel_i = |got-ref| / (|ref| + floor * rms(ref)); norm = ||d|| / ||ref||. */
typedef struct vc_err_stats {
  double max_rel, norm_rel, max_abs;
  int64_t worst_index, n_nonfinite_mismatch;
} vc_err_stats_t;
vc_err_stats_t vc_compare(const void *got, voxconv_dtype_t dtype,
                          const double *ref, int64_t n, double floor);

/* Reads a whole file; NULL if missing. *bytes gets the size. */
void *vc_read_file(const char *path, size_t *bytes);
/* Path of a file in the shared data folder (static buffer). */
const char *vc_data_path(const char *relative);

/* Orders two coordinate rows [4] by (b,x,y,z): qsort comparator. */
int vc_cmp_coord(const void *a, const void *b);
/* Sorts coordinate rows [n][4] by (b,x,y,z) and removes duplicates in
 * place; returns the number of unique rows. */
int64_t vc_sort_unique_coords(int32_t *coords, int64_t n);
/* Index of row key in coordinate rows [n][4] sorted by (b,x,y,z) (binary
 * search), or -1 if absent. */
int64_t vc_find_coord(const int32_t *sorted, int64_t n, const int32_t *key);
/* Unique voxels floor((p - min(p)) / voxel) of points [n][fields] (finite
 * xyz only), batch 0, sorted; *n_out rows (malloc'd). */
int32_t *vc_voxels_from_points(const float *pts, int64_t n, int fields,
                               float voxel, int64_t *n_out);
/* Workload A level 0 of BENCHMARKS.md (913,903 voxels expected), built from
 * data/bench/spconv_benchmark_pc.xyz.f32.bin; NULL if the file is missing. */
int32_t *vc_workload_a_coords(int64_t *n_out);
/* n random rows in [-extent, extent]^3, batches 0..1, made unique. */
int32_t *vc_random_coords(int64_t n, int extent, int64_t *n_out);

/* Prints and exits with 0 when no check failed, 1 otherwise. */
int vc_test_finish(void);

/* voxconv_kmap_build followed by voxconv_kmap_wait: the map complete on the
 * host (n_pairs known) and the build's verdict returned, for tests that
 * inspect a map right after building it on CUDA (a SUBMANIFOLD build there
 * does not wait for the GPU). The same as the build on the CPU. */
voxconv_status_t vc_test_kmap_build(voxconv_handle_t *h,
                                    const voxconv_kmap_desc_t *desc,
                                    const voxconv_coords_t *in,
                                    const voxconv_coords_t *out,
                                    voxconv_kmap_t **kmap);

/* A zeroed map description: mode, kernel kx*ky*kz, the same stride s and
 * dilation d on every axis (the other fields at their defaults). */
voxconv_kmap_desc_t vc_test_kmap_desc(voxconv_kmap_mode_t mode, int kx, int ky,
                                      int kz, int s, int d);

#define VC_EXPECT(cond, ...)                                                   \
  do {                                                                         \
    vc_test_checks++;                                                          \
    if (!(cond)) {                                                             \
      vc_test_failures++;                                                      \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
  } while (0)

/* Asserts a call returned `expected`; on mismatch prints the message. */
#define VC_EXPECT_STATUS(h, call, expected)                                    \
  do {                                                                         \
    voxconv_status_t vc_got_ = (call);                                         \
    VC_EXPECT(vc_got_ == (expected), "%s returned %s (want %s): %s", #call,    \
              voxconv_status_string(vc_got_),                                  \
              voxconv_status_string(expected), voxconv_get_last_error(h));     \
  } while (0)

#define VC_REQUIRE_OK(h, call)                                                 \
  do {                                                                         \
    voxconv_status_t vc_got_ = (call);                                         \
    if (vc_got_ != VOXCONV_STATUS_SUCCESS) {                                   \
      fprintf(stderr, "FATAL %s:%d: %s returned %s: %s\n", __FILE__,          \
              __LINE__, #call, voxconv_status_string(vc_got_),                 \
              voxconv_get_last_error(h));                                      \
      vc_test_failures++;                                                      \
      return vc_test_finish();                                                 \
    }                                                                          \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
