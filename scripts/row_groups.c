/* Offline analysis of mask_gemm's row grouping (no GPU, no library):
 * rebuilds workload A level 0 (BENCHMARKS.md: the spconv benchmark cloud x8
 * shifted +i m in y, cropped, 0.1 m voxels: 913,903 voxels) and its 3x3x3
 * submanifold neighbour bitmasks, then reports for row orderings the
 * fraction of MMA rows doing useful work in tiles of 64 and 128 rows
 * (useful: the row has a neighbour at the offset; executed: every row of a
 * tile for every offset any of its rows needs) and the tile x offset
 * iterations (each loads one weight slice).
 *
 *   cc -O2 -o /tmp/row_groups scripts/row_groups.c -lm
 *   /tmp/row_groups ../shared/data/bench/spconv_benchmark_pc.xyz.f32.bin
 *
 * Orderings: natural (voxel order), the row key of ensure_row_order
 * (cuda_mask_gemm.cu: Gray rank of the mask with offsets permuted by
 * |dx|+|dy|+|dz|, top 24 bits at this size), the same on all 27 bits, and
 * on all 27 bits with offsets permuted by their measured frequency. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_rows;
static uint32_t *mask;

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}
static uint64_t pack(int x, int y, int z) {
  return ((uint64_t)x << 32) | ((uint64_t)y << 16) | (uint64_t)z;
}
static int present(const uint64_t *k, int64_t n, uint64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t m = (lo + hi) / 2;
    if (k[m] < v)
      lo = m + 1;
    else
      hi = m;
  }
  return lo < n && k[lo] == v;
}

typedef struct {
  uint32_t key;
  int idx;
} kv_t;
static int cmp_kv(const void *a, const void *b) {
  const kv_t *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->idx - y->idx; /* stable, as the GPU radix sort */
}

/* Gray rank of the mask with bit j = offset perm[j], top `keep` bits */
static uint32_t row_key(uint32_t w, const int *perm, int keep) {
  uint32_t m = 0;
  for (int j = 0; j < 27; j++)
    m |= ((w >> perm[j]) & 1u) << j;
  m ^= m >> 1;
  m ^= m >> 2;
  m ^= m >> 4;
  m ^= m >> 8;
  m ^= m >> 16;
  return m >> (27 - keep);
}

static void report(const char *name, const int *order) {
  printf("%-34s", name);
  for (int tile = 64; tile <= 128; tile *= 2) {
    double useful = 0, exec = 0, iters = 0;
    for (int t = 0; t < n_rows; t += tile) {
      uint32_t u = 0;
      const int e = t + tile < n_rows ? t + tile : n_rows;
      for (int r = t; r < e; r++) {
        u |= mask[order[r]];
        useful += __builtin_popcount(mask[order[r]]);
      }
      exec += (double)tile * __builtin_popcount(u);
      iters += __builtin_popcount(u);
    }
    printf("  %d rows: useful %.3f, %.0f tile x offset", tile, useful / exec,
           iters);
  }
  printf("\n");
}

static void sorted_report(const char *name, const int *perm, int keep,
                          kv_t *kv, int *order) {
  for (int i = 0; i < n_rows; i++) {
    kv[i].key = row_key(mask[i], perm, keep);
    kv[i].idx = i;
  }
  qsort(kv, n_rows, sizeof *kv, cmp_kv);
  for (int i = 0; i < n_rows; i++)
    order[i] = kv[i].idx;
  report(name, order);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s spconv_benchmark_pc.xyz.f32.bin\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  const long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  const int np = (int)(bytes / 12);
  float *p = malloc((size_t)bytes);
  uint64_t *keys = malloc(sizeof *keys * (size_t)np * 8);
  if (!p || !keys || fread(p, 12, (size_t)np, f) != (size_t)np) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  fclose(f);
  /* as tools/bench.c prepare_workload_a and the library's voxelizer
   * (floorf((p - origin) / voxel) in float32) */
  int64_t n = 0;
  for (int c = 0; c < 8; c++)
    for (int i = 0; i < np; i++) {
      const float x = p[3 * i], y = p[3 * i + 1] + (float)c, z = p[3 * i + 2];
      if (!(x >= -80.f && x < 80.f && y >= -80.f && y < 80.f && z >= -2.f &&
            z < 6.f))
        continue;
      const int ix = (int)floorf((x + 80.f) / 0.1f);
      const int iy = (int)floorf((y + 80.f) / 0.1f);
      const int iz = (int)floorf((z + 2.f) / 0.1f);
      if (ix >= 0 && ix < 1600 && iy >= 0 && iy < 1600 && iz >= 0 && iz < 80)
        keys[n++] = pack(ix, iy, iz);
    }
  qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
  int64_t u = 0;
  for (int64_t i = 0; i < n; i++)
    if (u == 0 || keys[i] != keys[u - 1])
      keys[u++] = keys[i];
  n_rows = (int)u;
  mask = calloc((size_t)n_rows, sizeof *mask);
  long pairs = 0, freq[27] = {0};
  for (int i = 0; i < n_rows; i++) {
    const int x = (int)(keys[i] >> 32), y = (int)((keys[i] >> 16) & 0xffff),
              z = (int)(keys[i] & 0xffff);
    int k = 0; /* offsets in the library's order: dx, then dy, then dz */
    for (int dx = -1; dx <= 1; dx++)
      for (int dy = -1; dy <= 1; dy++)
        for (int dz = -1; dz <= 1; dz++, k++)
          if (x + dx >= 0 && y + dy >= 0 && z + dz >= 0 &&
              present(keys, u, pack(x + dx, y + dy, z + dz))) {
            mask[i] |= 1u << k;
            pairs++;
            freq[k]++;
          }
  }
  printf("voxels %d, pairs %ld (BENCHMARKS.md: 913903, 7676993)\n", n_rows,
         pairs);

  int cls_perm[27], cls[27], freq_perm[27];
  for (int k = 0; k < 27; k++) {
    cls[k] = abs(k / 9 - 1) + abs(k / 3 % 3 - 1) + abs(k % 3 - 1);
    cls_perm[k] = freq_perm[k] = k;
  }
  for (int a = 1; a < 27; a++) /* stable insertion sorts */
    for (int b = a; b > 0; b--) {
      if (cls[cls_perm[b - 1]] > cls[cls_perm[b]]) {
        const int t = cls_perm[b];
        cls_perm[b] = cls_perm[b - 1];
        cls_perm[b - 1] = t;
      }
      if (freq[freq_perm[b - 1]] < freq[freq_perm[b]]) {
        const int t = freq_perm[b];
        freq_perm[b] = freq_perm[b - 1];
        freq_perm[b - 1] = t;
      }
    }
  kv_t *kv = malloc(sizeof *kv * (size_t)n_rows);
  int *order = malloc(sizeof *order * (size_t)n_rows);
  for (int i = 0; i < n_rows; i++)
    order[i] = i;
  report("natural order", order);
  sorted_report("key, 24 bits (the library's)", cls_perm, 24, kv, order);
  sorted_report("key, 27 bits", cls_perm, 27, kv, order);
  sorted_report("key, 27 bits, frequency order", freq_perm, 27, kv, order);
  return 0;
}
