/* Pieces shared by the GPU tests (test_backend_ops, test_deterministic):
 * the VOXCONV_TEST_ALGO restriction and the skip without a device. Moved
 * here verbatim from the two tests so that both read the environment and
 * report a skip the same way. Header-only (static): each test is one
 * translation unit, and both use everything below. */
#ifndef GPU_TEST_UTIL_H
#define GPU_TEST_UTIL_H

#include "vc_test.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* VOXCONV_TEST_ALGO: comma-separated algorithm names (case-insensitive) the
 * test is restricted to; NULL = every algorithm. */
static const char *g_algo_filter;

static inline int algo_selected(const char *name) {
  if (!g_algo_filter)
    return 1;
  const char *s = g_algo_filter;
  const size_t n = strlen(name);
  while (*s) {
    const char *e = strchr(s, ',');
    const size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == n && strncasecmp(s, name, n) == 0)
      return 1;
    if (!e)
      break;
    s = e + 1;
  }
  return 0;
}

/* 1 when there is no CUDA device to test on, after printing
 * "<test_name>: SKIPPED: <why>"; the caller then returns VC_TEST_SKIP. */
static inline int gpu_test_no_device(const char *test_name) {
  int ndev = 0;
  if (!voxconv_has_cuda() ||
      voxconv_device_count(&ndev) != VOXCONV_STATUS_SUCCESS || ndev == 0) {
    printf("%s: SKIPPED: %s\n", test_name,
           voxconv_has_cuda() ? "no CUDA device visible"
                              : "library built without CUDA");
    return 1;
  }
  return 0;
}

#endif
