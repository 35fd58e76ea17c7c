/* Per-algorithm, per-parameter timing of the conv passes on workload C of
 * BENCHMARKS.md (level-0 coordinates of workload A, submanifold 3x3x3,
 * Cin = Cout = C, map prebuilt) plus the workload-D map build. An internal
 * benchmark (it calls algorithm records directly to time every tile); the
 * user-facing numbers come from `voxconv bench`.
 *
 * usage: bench_tiles [--channels 32,64,128,256] [--dtype f16|bf16|f32]
 *                    [--algos mask_gemm,implicit_gemm,...] [--repeat N]
 *                    [--passes fwd,dgrad,wgrad] [--match TEXT]
 * --match keeps the parameter sets whose text (as printed) contains TEXT,
 * e.g. "mma_tile=3,accumulator_type=32" (used to profile one kernel).
 * CUDA events around each run, warm-up first, median of N. */
#include "vc_test.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/vc_core.h"
#include "ops/vc_algo.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static int in_list(const char *list, const char *name) {
  if (!list)
    return 1;
  size_t n = strlen(name);
  const char *p = list;
  while ((p = strstr(p, name)) != NULL) {
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
      return 1;
    p += n;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *channels = "32,64,128,256", *algos = NULL;
  const char *passes = "fwd,dgrad,wgrad", *match = NULL;
  voxconv_dtype_t dt = VOXCONV_DTYPE_F16;
  int repeat = 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--channels") && i + 1 < argc)
      channels = argv[++i];
    else if (!strcmp(argv[i], "--algos") && i + 1 < argc)
      algos = argv[++i];
    else if (!strcmp(argv[i], "--passes") && i + 1 < argc)
      passes = argv[++i];
    else if (!strcmp(argv[i], "--match") && i + 1 < argc)
      match = argv[++i];
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
      repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
      ++i;
      dt = !strcmp(argv[i], "bf16")  ? VOXCONV_DTYPE_BF16
           : !strcmp(argv[i], "f32") ? VOXCONV_DTYPE_F32
                                     : VOXCONV_DTYPE_F16;
    } else {
      fprintf(stderr, "usage: see the comment at the top of bench_tiles.c\n");
      return 2;
    }
  }
  if (repeat < 1)
    repeat = 1;
  int ndev = 0;
  voxconv_device_count(&ndev);
  if (ndev == 0) {
    fprintf(stderr, "bench_tiles: no CUDA device\n");
    return 77;
  }
  voxconv_device_info_t di;
  voxconv_device_get_info(0, &di);
  voxconv_handle_t *h = NULL;
  voxconv_handle_desc_t d = {0};
  d.backend = VOXCONV_BACKEND_CUDA;
  if (voxconv_create(&h, &d) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "bench_tiles: %s\n", voxconv_get_last_error(NULL));
    return 1;
  }
  int64_t n = 0;
  int32_t *coords = vc_workload_a_coords(&n);
  if (!coords) {
    fprintf(stderr, "bench_tiles: workload A input missing under %s\n",
            vc_data_path("bench"));
    return 1;
  }
  printf("device: %s (cc %d.%d, %d SMs); workload A level 0: %lld voxels; "
         "dtype %s\n",
         di.name, di.cc_major, di.cc_minor, di.sm_count, (long long)n,
         voxconv_dtype_name(dt));
  int32_t *dc = NULL;
  voxconv_malloc(h, (size_t)n * 16, (void **)&dc);
  voxconv_memcpy(h, dc, coords, (size_t)n * 16,
                 VOXCONV_MEMCPY_HOST_TO_BACKEND);
  voxconv_coords_t in = {dc, n, {1, 1, 1}};
  voxconv_kmap_desc_t geo = {.mode = VOXCONV_KMAP_SUBMANIFOLD,
                             .kernel_size = {3, 3, 3},
                             .stride = {1, 1, 1},
                             .dilation = {1, 1, 1}};
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float *times = (float *)malloc(sizeof(float) * (size_t)repeat);

  /* workload D: the map build, map destroyed each time */
  voxconv_kmap_t *map = NULL;
  for (int r = 0; r < repeat + 3; r++) {
    if (map)
      voxconv_kmap_destroy(h, map);
    map = NULL;
    cudaEventRecord(e0, NULL);
    voxconv_status_t st = voxconv_kmap_build(h, &geo, &in, NULL, &map);
    cudaEventRecord(e1, NULL);
    cudaEventSynchronize(e1);
    if (st != VOXCONV_STATUS_SUCCESS) {
      fprintf(stderr, "kmap build: %s\n", voxconv_get_last_error(h));
      return 1;
    }
    if (r >= 3)
      cudaEventElapsedTime(&times[r - 3], e0, e1);
  }
  qsort(times, (size_t)repeat, sizeof(float), cmp_float);
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(map, &info);
  printf("workload D kmap build: median %.3f ms (min %.3f), pairs %lld\n",
         times[repeat / 2], times[0], (long long)info.n_pairs);
  printf("%-18s %-6s %5s %-28s %9s %9s\n", "algo", "pass", "C", "params",
         "ms", "TFLOP/s");

  const size_t es = voxconv_dtype_size(dt);
  const char *cp = channels;
  while (*cp) {
    int64_t C = strtol(cp, (char **)&cp, 10);
    if (*cp == ',')
      cp++;
    if (C <= 0)
      break;
    const size_t feat_bytes = (size_t)n * (size_t)C * es;
    const size_t w_bytes = (size_t)info.kernel_volume * (size_t)(C * C) * es;
    void *hx = malloc(feat_bytes), *hw = malloc(w_bytes);
    vc_fill_normal(hx, dt, n * C);
    vc_fill_normal(hw, dt, info.kernel_volume * C * C);
    void *x = NULL, *y = NULL, *w = NULL;
    voxconv_malloc(h, feat_bytes, &x);
    voxconv_malloc(h, feat_bytes, &y);
    voxconv_malloc(h, w_bytes, &w);
    voxconv_memcpy(h, x, hx, feat_bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
    voxconv_memcpy(h, y, hx, feat_bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
    voxconv_memcpy(h, w, hw, w_bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
    const double gflop = 2.0 * (double)info.n_pairs * (double)(C * C) / 1e9;
    for (int pi = 0; pi < 3; pi++) {
      static const char *pname[3] = {"fwd", "dgrad", "wgrad"};
      if (!in_list(passes, pname[pi]))
        continue;
      voxconv_pass_t pass = (voxconv_pass_t)pi;
      for (int ai = 0; ai < vc_algo_table_size(); ai++) {
        const vc_algo_t *a = vc_algo_at(ai);
        if (!in_list(algos, a->info.name) || !(a->info.passes & (1u << pass)))
          continue;
        /* write targets must not alias inputs: use dedicated buffers */
        void *out = NULL;
        voxconv_malloc(h, pass == VOXCONV_PASS_CONV_WGRAD ? w_bytes
                                                          : feat_bytes,
                       &out);
        vc_conv_problem_t p = vc_conv_problem_make(
            pass, map, dt, C, C, pass == VOXCONV_PASS_CONV_DGRAD ? y : x,
            pass == VOXCONV_PASS_CONV_WGRAD ? y : w, out);
        if (!a->supports(h, &p)) {
          voxconv_free(h, out);
          continue;
        }
        const vc_param_space_t *sp = a->param_space ? a->param_space(pass)
                                                    : NULL;
        int counts[VC_MAX_PARAMS] = {1, 1, 1, 1}, np = sp ? sp->n : 0;
        for (int i = 0; i < np; i++)
          counts[i] = sp->n_values[i];
        int total = 1;
        for (int i = 0; i < np; i++)
          total *= counts[i];
        for (int combo = 0; combo < total; combo++) {
          vc_algo_params_t prm = {{0, 0, 0, 0}};
          char ptxt[96] = "";
          int rem = combo;
          for (int i = 0; i < np; i++) {
            prm.v[i] = sp->values[i][rem % counts[i]];
            rem /= counts[i];
            char one[32];
            snprintf(one, sizeof one, "%s%s=%d", i ? "," : "", sp->names[i],
                     prm.v[i]);
            strncat(ptxt, one, sizeof ptxt - strlen(ptxt) - 1);
          }
          if (match && !strstr(ptxt, match))
            continue;
          p.fp16_accum = np > 1 && !strcmp(sp->names[1], "accumulator_type") &&
                         prm.v[1] == 16;
          size_t wsb = a->workspace_size ? a->workspace_size(&p, &prm) : 0;
          void *ws = NULL;
          if (wsb && voxconv_malloc(h, wsb, &ws) != VOXCONV_STATUS_SUCCESS)
            continue;
          voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
          for (int r = 0; r < 3 && st == VOXCONV_STATUS_SUCCESS; r++)
            st = a->run(h, &p, &prm, ws);
          for (int r = 0; r < repeat && st == VOXCONV_STATUS_SUCCESS; r++) {
            cudaEventRecord(e0, NULL);
            st = a->run(h, &p, &prm, ws);
            cudaEventRecord(e1, NULL);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&times[r], e0, e1);
          }
          if (st == VOXCONV_STATUS_SUCCESS)
            st = voxconv_synchronize(h);
          if (st != VOXCONV_STATUS_SUCCESS) {
            printf("%-18s %-6s %5lld %-28s   failed: %s\n", a->info.name,
                   pname[pi], (long long)C, ptxt, voxconv_get_last_error(h));
          } else {
            qsort(times, (size_t)repeat, sizeof(float), cmp_float);
            float med = times[repeat / 2];
            printf("%-18s %-6s %5lld %-28s %9.3f %9.1f\n", a->info.name,
                   pname[pi], (long long)C, ptxt, med, gflop / med);
          }
          fflush(stdout);
          voxconv_free(h, ws);
        }
        voxconv_free(h, out);
      }
    }
    voxconv_free(h, x);
    voxconv_free(h, y);
    voxconv_free(h, w);
    free(hx);
    free(hw);
  }
  voxconv_kmap_destroy(h, map);
  voxconv_free(h, dc);
  voxconv_destroy(h);
  free(coords);
  free(times);
  return 0;
}
