/* int8 against f16 on workload C of BENCHMARKS.md (level-0 coordinates of
 * workload A, submanifold 3x3x3, Cin = Cout = C, map prebuilt), forward,
 * in one process so that both run on the same GPU in the same state
 * (issue 23's targets: C = 256 >= 1.6x, C = 64 >= 1.3x faster than f16).
 *
 *   f16        voxconv_conv_forward, f16 in and out, the tuner's choice
 *              (tuned during the warm-up, as `voxconv bench` does)
 *   i8 tile N  voxconv_conv_forward_int8 with VOXCONV_INT8_TILE=N, int8 in,
 *              f16 out (dequantised) and int8 out (requantised)
 *   i8 auto    the library's own choice
 *   depthwise  f16 and int8 (one kernel), C channels
 * CUDA events around each call, warm-up first, median of N; the rounds of
 * the variants interleave (round r of every variant before round r + 1),
 * so a drifting clock moves them alike.
 *
 * usage: bench_int8 [--channels 32,64,128,256] [--repeat N] [--tiles 9,18]
 *   --tiles: the int8 tiles timed one by one (default: every tile the
 *   library lists) */
#include "vc_test.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VARIANTS 40

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

typedef struct variant {
  char name[32];
  int kind; /* 0 f16 conv, 1 int8 conv, 2 f16 depthwise, 3 int8 depthwise */
  int tile; /* int8 conv: -1 auto */
  voxconv_dtype_t ydt;
  float *t;
  voxconv_status_t st;
} variant_t;

typedef struct bufs {
  voxconv_handle_t *h;
  const voxconv_kmap_t *km;
  int64_t n, C, kvol;
  void *x16, *w16, *y16, *dw16;
  void *x8, *w8, *y8, *dw8, *ws, *bias;
} bufs_t;

static voxconv_status_t run(const bufs_t *b, const variant_t *v) {
  voxconv_feats_t x16 = {b->x16, b->n, b->C, VOXCONV_DTYPE_F16};
  voxconv_feats_t x8 = {b->x8, b->n, b->C, VOXCONV_DTYPE_I8};
  voxconv_feats_t y = {v->kind == 0 || v->kind == 2 ? b->y16 : b->y8, b->n,
                       b->C, v->ydt};
  /* the regular conv's random weights read as KOI ([kvol][cout][cin]),
   * as a deployment stores them: no per-call reordering copy */
  voxconv_quant_params_t qp = {
      0.05f, (const float *)b->ws, (const float *)b->bias, 1,
      v->ydt == VOXCONV_DTYPE_I8 ? 0.2f : 0.0f,
      v->kind == 1 ? VOXCONV_INT8_WEIGHTS_KOI : VOXCONV_INT8_WEIGHTS_KIO};
  switch (v->kind) {
  case 0: {
    voxconv_weights_t w = {b->w16, b->kvol, b->C, b->C, VOXCONV_DTYPE_F16};
    return voxconv_conv_forward(b->h, b->km, &x16, &w, &y, NULL);
  }
  case 1: {
    voxconv_weights_t w = {b->w8, b->kvol, b->C, b->C, VOXCONV_DTYPE_I8};
    if (v->tile < 0) {
      unsetenv("VOXCONV_INT8_TILE");
    } else {
      char t[16];
      snprintf(t, sizeof t, "%d", v->tile);
      setenv("VOXCONV_INT8_TILE", t, 1);
    }
    return voxconv_conv_forward_int8(b->h, b->km, &x8, &w, &qp, &y, NULL);
  }
  case 2: {
    voxconv_feats_t w = {b->dw16, b->kvol, b->C, VOXCONV_DTYPE_F16};
    return voxconv_depthwise_forward(b->h, b->km, &x16, &w, &y, NULL);
  }
  default: {
    voxconv_feats_t w = {b->dw8, b->kvol, b->C, VOXCONV_DTYPE_I8};
    return voxconv_depthwise_forward_int8(b->h, b->km, &x8, &w, &qp, &y,
                                          NULL);
  }
  }
}

static void *dev_random(voxconv_handle_t *h, voxconv_dtype_t dt, int64_t n) {
  const size_t bytes = (size_t)n * voxconv_dtype_size(dt);
  void *host = malloc(bytes ? bytes : 1), *d = NULL;
  if (dt == VOXCONV_DTYPE_I8) {
    for (int64_t i = 0; i < n; i++)
      ((int8_t *)host)[i] = (int8_t)vc_rand_range(-127, 127);
  } else if (dt == VOXCONV_DTYPE_F32) { /* scales: positive */
    for (int64_t i = 0; i < n; i++)
      ((float *)host)[i] = (float)(0.001 + 0.01 * vc_rand_uniform());
  } else {
    vc_fill_normal(host, dt, n);
  }
  voxconv_malloc(h, bytes ? bytes : 1, &d);
  voxconv_memcpy(h, d, host, bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  free(host);
  return d;
}

/* The number of int8 tiles the library lists (voxconv_kernel_get_info). */
static int int8_tile_count(voxconv_handle_t *h) {
  int n = 0, tiles = 0;
  voxconv_kernel_count(h, &n);
  for (int i = 0; i < n; i++) {
    voxconv_kernel_info_t ki;
    if (voxconv_kernel_get_info(h, i, &ki) == VOXCONV_STATUS_SUCCESS &&
        !strcmp(ki.algo, "mask_gemm_i8"))
      tiles++;
  }
  return tiles;
}

/* 1 when tile t is in the --tiles list (NULL: every tile). */
static int tile_listed(const char *list, int t) {
  if (!list)
    return 1;
  for (const char *c = list; *c;) {
    char *end;
    const long v = strtol(c, &end, 10);
    if (end == c)
      return 0;
    if (v == t)
      return 1;
    c = *end == ',' ? end + 1 : end;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *channels = "32,64,128,256", *tiles = NULL;
  int repeat = 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--channels") && i + 1 < argc)
      channels = argv[++i];
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
      repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tiles") && i + 1 < argc)
      tiles = argv[++i];
    else {
      fprintf(stderr, "usage: see the comment at the top of bench_int8.c\n");
      return 2;
    }
  }
  if (repeat < 1)
    repeat = 1;
  vc_test_init("bench_int8");
  int ndev = 0;
  voxconv_device_count(&ndev);
  if (ndev == 0) {
    fprintf(stderr, "bench_int8: no CUDA device\n");
    return 77;
  }
  voxconv_device_info_t di;
  voxconv_device_get_info(0, &di);
  voxconv_handle_t *h = NULL;
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CUDA;
  if (voxconv_create(&h, &d) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "bench_int8: %s\n", voxconv_get_last_error(NULL));
    return 1;
  }
  int64_t n = 0;
  int32_t *coords = vc_workload_a_coords(&n);
  if (!coords) {
    fprintf(stderr, "bench_int8: workload A input missing under %s\n",
            vc_data_path("bench"));
    return 1;
  }
  int32_t *dc = NULL;
  voxconv_malloc(h, (size_t)n * 16, (void **)&dc);
  voxconv_memcpy(h, dc, coords, (size_t)n * 16,
                 VOXCONV_MEMCPY_HOST_TO_BACKEND);
  voxconv_coords_t in = {dc, n, {1, 1, 1}};
  const voxconv_kmap_desc_t geo =
      vc_test_kmap_desc(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1);
  voxconv_kmap_t *map = NULL;
  if (voxconv_kmap_build(h, &geo, &in, NULL, &map) != VOXCONV_STATUS_SUCCESS ||
      voxconv_kmap_wait(h, map) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "kmap build: %s\n", voxconv_get_last_error(h));
    return 1;
  }
  voxconv_kmap_info_t info;
  voxconv_kmap_get_info(map, &info);
  printf("device: %s (cc %d.%d, %d SMs); workload C: %lld voxels, %lld "
         "pairs; median of %d\n",
         di.name, di.cc_major, di.cc_minor, di.sm_count, (long long)n,
         (long long)info.n_pairs, repeat);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);

  const char *cp = channels;
  while (*cp) {
    const int64_t C = strtol(cp, (char **)&cp, 10);
    if (*cp == ',')
      cp++;
    if (C <= 0)
      break;
    bufs_t b;
    memset(&b, 0, sizeof b);
    b.h = h;
    b.km = map;
    b.n = n;
    b.C = C;
    b.kvol = info.kernel_volume;
    b.x16 = dev_random(h, VOXCONV_DTYPE_F16, n * C);
    b.w16 = dev_random(h, VOXCONV_DTYPE_F16, b.kvol * C * C);
    b.dw16 = dev_random(h, VOXCONV_DTYPE_F16, b.kvol * C);
    b.y16 = dev_random(h, VOXCONV_DTYPE_F16, n * C);
    b.x8 = dev_random(h, VOXCONV_DTYPE_I8, n * C);
    b.w8 = dev_random(h, VOXCONV_DTYPE_I8, b.kvol * C * C);
    b.dw8 = dev_random(h, VOXCONV_DTYPE_I8, b.kvol * C);
    b.y8 = dev_random(h, VOXCONV_DTYPE_F16, n * C); /* room for f16 out */
    b.ws = dev_random(h, VOXCONV_DTYPE_F32, C);
    b.bias = dev_random(h, VOXCONV_DTYPE_F32, C);

    variant_t v[MAX_VARIANTS];
    int nv = 0;
    memset(v, 0, sizeof v);
    snprintf(v[nv].name, sizeof v[nv].name, "f16");
    v[nv].kind = 0;
    v[nv++].ydt = VOXCONV_DTYPE_F16;
    const int n_tiles = int8_tile_count(h);
    for (int t = -1; t < n_tiles; t++)
      for (int o = 0; o < 2; o++) {
        if (t >= 0 && (o == 1 || !tile_listed(tiles, t)))
          continue; /* i8 output: the default tile only */
        variant_t *q = &v[nv++];
        q->kind = 1;
        q->tile = t;
        q->ydt = o ? VOXCONV_DTYPE_I8 : VOXCONV_DTYPE_F16;
        if (t < 0)
          snprintf(q->name, sizeof q->name, "i8 auto -> %s",
                   o ? "i8" : "f16");
        else
          snprintf(q->name, sizeof q->name, "i8 tile %d -> f16", t);
      }
    snprintf(v[nv].name, sizeof v[nv].name, "depthwise f16");
    v[nv].kind = 2;
    v[nv++].ydt = VOXCONV_DTYPE_F16;
    snprintf(v[nv].name, sizeof v[nv].name, "depthwise i8 -> f16");
    v[nv].kind = 3;
    v[nv++].ydt = VOXCONV_DTYPE_F16;

    for (int i = 0; i < nv; i++) {
      v[i].t = (float *)calloc((size_t)repeat, sizeof(float));
      /* warm-up: tunes f16, raises smem limits, sorts the map's rows */
      for (int r = 0; r < 5 && v[i].st == VOXCONV_STATUS_SUCCESS; r++)
        v[i].st = run(&b, &v[i]);
      if (v[i].st != VOXCONV_STATUS_SUCCESS)
        printf("C=%lld %s: %s\n", (long long)C, v[i].name,
               voxconv_get_last_error(h));
      voxconv_call_info_t ci; /* the tuner's tile of an auto row */
      if (v[i].kind == 1 && v[i].tile < 0 &&
          v[i].st == VOXCONV_STATUS_SUCCESS &&
          voxconv_get_last_call_info(h, &ci) == VOXCONV_STATUS_SUCCESS)
        snprintf(v[i].name, sizeof v[i].name, "i8 auto %.8s -> %s",
                 ci.params + 5 /* "tile=" */,
                 v[i].ydt == VOXCONV_DTYPE_I8 ? "i8" : "f16");
    }
    voxconv_synchronize(h);
    for (int r = 0; r < repeat; r++)
      for (int i = 0; i < nv; i++) {
        if (v[i].st != VOXCONV_STATUS_SUCCESS)
          continue;
        cudaEventRecord(e0, NULL);
        v[i].st = run(&b, &v[i]);
        cudaEventRecord(e1, NULL);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&v[i].t[r], e0, e1);
      }
    unsetenv("VOXCONV_INT8_TILE");
    const double gop = 2.0 * (double)info.n_pairs * (double)(C * C) / 1e9;
    float f16_ms = 0.0f, dw16_ms = 0.0f;
    printf("\nC = %lld (%.1f GOP)\n%-24s %9s %9s %8s\n", (long long)C, gop,
           "variant", "ms", "TOP/s", "vs f16");
    for (int i = 0; i < nv; i++) {
      if (v[i].st != VOXCONV_STATUS_SUCCESS) {
        printf("%-24s   failed\n", v[i].name);
        continue;
      }
      qsort(v[i].t, (size_t)repeat, sizeof(float), cmp_float);
      const float med = v[i].t[repeat / 2];
      if (v[i].kind == 0)
        f16_ms = med;
      if (v[i].kind == 2)
        dw16_ms = med;
      const float base = v[i].kind >= 2 ? dw16_ms : f16_ms;
      printf("%-24s %9.3f %9.1f %7.2fx\n", v[i].name, med,
             v[i].kind >= 2 ? 0.0 : gop / med, base > 0 ? base / med : 0.0);
      free(v[i].t);
    }
    fflush(stdout);
    voxconv_free(h, b.x16);
    voxconv_free(h, b.w16);
    voxconv_free(h, b.dw16);
    voxconv_free(h, b.y16);
    voxconv_free(h, b.x8);
    voxconv_free(h, b.w8);
    voxconv_free(h, b.dw8);
    voxconv_free(h, b.y8);
    voxconv_free(h, b.ws);
    voxconv_free(h, b.bias);
  }
  voxconv_kmap_destroy(h, map);
  voxconv_free(h, dc);
  voxconv_destroy(h);
  free(coords);
  return 0;
}
