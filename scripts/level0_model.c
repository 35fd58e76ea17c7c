/* Offline models of workload A level 0 for mask_gemm (no GPU, no
 * library): rebuilds the level (BENCHMARKS.md: the spconv benchmark cloud
 * x8 shifted +i m in y, cropped, 0.1 m voxels: 913,903 voxels), its 3x3x3
 * submanifold neighbour bitmasks and its pair lists, then
 *
 *   rows: scores row orderings for the forward/dgrad tiles -- the fraction
 *         of MMA rows doing useful work in tiles of 64 and 128 rows
 *         (useful: the row has a neighbour at the offset; executed: every
 *         row of a tile for every offset any of its rows needs) and the
 *         tile x offset iterations (each loads one weight slice). Orderings:
 *         natural, the row key of ensure_row_order (cuda_mask_gemm.cu: Gray
 *         rank of the mask with offsets permuted by |dx|+|dy|+|dz|, top 24
 *         bits at this size), the same on 27 bits, and on 27 bits with the
 *         offsets in their measured frequency order.
 *   l2:   replays the wgrad W0 kernel's gathers at C = 256 (tiles of 128 x
 *         128 channels: each block reads half rows of X and dY, 2 lines of
 *         128 B each per pair, 64 pairs per step) through an LRU cache of
 *         L2_MB (default 50), 132 blocks resident, every resident block
 *         advancing one stage per step, blocks started in grid order:
 *         offset-major (blockIdx.z = k * splits + split, as the kernel) or
 *         split-major. Prints the lines read, the misses (DRAM bytes) and
 *         the steps (a load-balance proxy).
 *   fwd:  row orders sorted by key within segments of consecutive rows
 *         against the forward's A gathers at C = 256 (see fwd_model).
 *
 *   cc -O2 -o /tmp/level0_model scripts/level0_model.c -lm
 *   /tmp/level0_model rows ../shared/data/bench/spconv_benchmark_pc.xyz.f32.bin
 *   /tmp/level0_model l2 ../shared/data/bench/spconv_benchmark_pc.xyz.f32.bin [L2_MB]
 */
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
static int64_t present(const uint64_t *k, int64_t n, uint64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t m = (lo + hi) / 2;
    if (k[m] < v)
      lo = m + 1;
    else
      hi = m;
  }
  return lo < n && k[lo] == v ? lo : -1;
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

/* The level's voxels (sorted packed keys, returned) and row masks. */
static uint64_t *build_level(const char *path, long *pairs_out,
                             long freq[27]) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  const long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  const int np = (int)(bytes / 12);
  float *p = malloc((size_t)bytes);
  uint64_t *keys = malloc(sizeof *keys * (size_t)np * 8);
  if (!p || !keys || fread(p, 12, (size_t)np, f) != (size_t)np) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
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
  free(p);
  qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
  int64_t u = 0;
  for (int64_t i = 0; i < n; i++)
    if (u == 0 || keys[i] != keys[u - 1])
      keys[u++] = keys[i];
  n_rows = (int)u;
  mask = calloc((size_t)n_rows, sizeof *mask);
  long pairs = 0;
  for (int i = 0; i < n_rows; i++) {
    const int x = (int)(keys[i] >> 32), y = (int)((keys[i] >> 16) & 0xffff),
              z = (int)(keys[i] & 0xffff);
    int k = 0; /* offsets in the library's order: dx, then dy, then dz */
    for (int dx = -1; dx <= 1; dx++)
      for (int dy = -1; dy <= 1; dy++)
        for (int dz = -1; dz <= 1; dz++, k++)
          if (x + dx >= 0 && y + dy >= 0 && z + dz >= 0 &&
              present(keys, u, pack(x + dx, y + dy, z + dz)) >= 0) {
            mask[i] |= 1u << k;
            pairs++;
            freq[k]++;
          }
  }
  *pairs_out = pairs;
  return keys;
}

/* The library's key permutation (row_key_perm): offsets by |dx|+|dy|+|dz|,
 * stably, rarest last. */
static void class_perm(int perm[27]) {
  int cls[27];
  for (int k = 0; k < 27; k++) {
    cls[k] = abs(k / 9 - 1) + abs(k / 3 % 3 - 1) + abs(k % 3 - 1);
    perm[k] = k;
  }
  for (int a = 1; a < 27; a++) /* stable insertion sort */
    for (int b = a; b > 0 && cls[perm[b - 1]] > cls[perm[b]]; b--) {
      const int t = perm[b];
      perm[b] = perm[b - 1];
      perm[b - 1] = t;
    }
}

static void rows_model(const long freq[27]) {
  int cls_perm[27], freq_perm[27];
  class_perm(cls_perm);
  for (int k = 0; k < 27; k++)
    freq_perm[k] = k;
  for (int a = 1; a < 27; a++) /* stable insertion sort */
    for (int b = a; b > 0; b--) {
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
}

/* ---- l2: LRU replay of the wgrad gathers ---- */
static int32_t *where;             /* line -> node, or -1 */
static uint32_t *node_line;
static int32_t *node_prev, *node_next;
static int64_t lru_cap, lru_used, lru_head = -1, lru_tail = -1;
static long n_access, n_miss;

static void lru_unlink(int32_t i) {
  if (node_prev[i] >= 0)
    node_next[node_prev[i]] = node_next[i];
  else
    lru_head = node_next[i];
  if (node_next[i] >= 0)
    node_prev[node_next[i]] = node_prev[i];
  else
    lru_tail = node_prev[i];
}
static void lru_front(int32_t i) {
  node_prev[i] = -1;
  node_next[i] = (int32_t)lru_head;
  if (lru_head >= 0)
    node_prev[lru_head] = i;
  lru_head = i;
  if (lru_tail < 0)
    lru_tail = i;
}
static void touch(uint32_t line) {
  n_access++;
  int32_t i = where[line];
  if (i >= 0) {
    lru_unlink(i);
    lru_front(i);
    return;
  }
  n_miss++;
  if (lru_used < lru_cap) {
    i = (int32_t)lru_used++;
  } else {
    i = (int32_t)lru_tail;
    lru_unlink(i);
    where[node_line[i]] = -1;
  }
  node_line[i] = line;
  where[line] = i;
  lru_front(i);
}

/* The cache's tables for l2_mb of 128-byte lines over the level's X and
 * dY rows (8 lines per row at C = 256), then an empty cache. */
static void lru_alloc(double l2_mb) {
  where = malloc(sizeof *where * (size_t)n_rows * 8);
  const int64_t cap_max = (int64_t)(l2_mb * 1024 * 1024 / 128) + 1;
  node_line = malloc(sizeof *node_line * (size_t)cap_max);
  node_prev = malloc(sizeof *node_prev * (size_t)cap_max);
  node_next = malloc(sizeof *node_next * (size_t)cap_max);
}
static void lru_reset(double l2_mb) {
  lru_cap = (int64_t)(l2_mb * 1024 * 1024 / 128);
  lru_used = 0;
  lru_head = lru_tail = -1;
  n_access = n_miss = 0;
  for (int64_t i = 0; i < (int64_t)n_rows * 8; i++)
    where[i] = -1;
}

typedef struct {
  int m, n;
  int64_t p, end;
} block_t;

static void l2_replay(const int64_t *po, const int32_t *in_rows,
                      const int32_t *out_rows, int splits, int split_major,
                      double l2_mb) {
  const int sms = 132, nb = 27 * splits * 4;
  lru_reset(l2_mb);
  block_t *grid = malloc(sizeof *grid * (size_t)nb), *run = malloc(
                                                          sizeof *run * sms);
  int t = 0;
  for (int a = 0; a < (split_major ? splits : 27); a++)
    for (int b = 0; b < (split_major ? 27 : splits); b++)
      for (int m = 0; m < 2; m++)
        for (int n = 0; n < 2; n++) {
          const int k = split_major ? b : a, s = split_major ? a : b;
          const int64_t len = po[k + 1] - po[k];
          grid[t++] = (block_t){m, n, po[k] + len * s / splits,
                                po[k] + len * (s + 1) / splits};
        }
  int n_run = 0, next = 0;
  long steps = 0;
  while (next < nb || n_run > 0) {
    while (n_run < sms && next < nb)
      run[n_run++] = grid[next++];
    for (int a = 0; a < n_run; a++) {
      block_t *b = &run[a];
      const int64_t e = b->p + 64 < b->end ? b->p + 64 : b->end;
      for (int64_t q = b->p; q < e; q++) {
        /* lines of 128 B: X row r at 4 r .. 4 r + 3, dY after X */
        const uint32_t xl = (uint32_t)in_rows[q] * 4 + 2 * b->m;
        const uint32_t yl =
            (uint32_t)n_rows * 4 + (uint32_t)out_rows[q] * 4 + 2 * b->n;
        touch(xl);
        touch(xl + 1);
        touch(yl);
        touch(yl + 1);
      }
      b->p = e;
    }
    steps++;
    for (int a = 0; a < n_run;)
      if (run[a].p >= run[a].end)
        run[a] = run[--n_run];
      else
        a++;
  }
  printf("%-12s splits %3d, L2 %.0f MB: %5ld steps, %.1f GB read from L2, "
         "%.1f GB missed (hit rate %.1f%%)\n",
         split_major ? "split-major" : "offset-major", splits, l2_mb, steps,
         n_access * 128 / 1e9, n_miss * 128 / 1e9,
         100.0 * (double)(n_access - n_miss) / (double)n_access);
  free(grid);
  free(run);
}

static void l2_model(const uint64_t *keys, long pairs, double l2_mb) {
  /* pairs of each offset sorted by output row, as the map's lists */
  int64_t po[28];
  int32_t *in_rows = malloc(sizeof *in_rows * (size_t)pairs);
  int32_t *out_rows = malloc(sizeof *out_rows * (size_t)pairs);
  int64_t q = 0;
  for (int k = 0; k < 27; k++) {
    const int dx = k / 9 - 1, dy = k / 3 % 3 - 1, dz = k % 3 - 1;
    po[k] = q;
    for (int i = 0; i < n_rows; i++) {
      if (!((mask[i] >> k) & 1u))
        continue;
      const int x = (int)(keys[i] >> 32), y = (int)((keys[i] >> 16) & 0xffff),
                z = (int)(keys[i] & 0xffff);
      in_rows[q] = (int32_t)present(keys, n_rows, pack(x + dx, y + dy, z + dz));
      out_rows[q++] = i;
    }
  }
  po[27] = q;
  lru_alloc(l2_mb);
  static const int split_counts[] = {9, 32, 64};
  for (int major = 0; major < 2; major++)
    for (int j = 0; j < 3; j++)
      l2_replay(po, in_rows, out_rows, split_counts[j], major, l2_mb);
}

/* ---- fwd: orderings against the forward's gathers ----
 * Row order = (segment, row key) with segments of 2^seg consecutive rows
 * (natural order: voxels sorted by (x, y, z), so a segment is a slab of
 * the scan) -- seg = 0: the library's global sort. Per ordering: useful
 * MMA rows and tile x offset iterations of 128-row tiles, then an LRU
 * replay of tile 7's A gathers at C = 256 (each needed row's 512 B = 4
 * lines per active offset of its tile; 132 resident blocks in grid order,
 * each advancing one offset per step): the lines that miss are DRAM
 * bytes. */
static void fwd_replay(const uint64_t *keys, const int *order, double l2_mb) {
  const int sms = 132, tiles = (n_rows + 127) / 128;
  lru_reset(l2_mb);
  int *run = malloc(sizeof *run * sms);
  uint32_t *um = malloc(sizeof *um * sms);
  int n_run = 0, next = 0;
  while (next < tiles || n_run > 0) {
    while (n_run < sms && next < tiles) {
      uint32_t u = 0;
      for (int r = next * 128; r < next * 128 + 128 && r < n_rows; r++)
        u |= mask[order[r]];
      run[n_run] = next++;
      um[n_run++] = u;
    }
    for (int a = 0; a < n_run; a++) {
      const int k = __builtin_ctz(um[a]);
      const int dx = k / 9 - 1, dy = k / 3 % 3 - 1, dz = k % 3 - 1;
      for (int r = run[a] * 128; r < run[a] * 128 + 128 && r < n_rows; r++) {
        const int row = order[r];
        if (!((mask[row] >> k) & 1u))
          continue;
        const int x = (int)(keys[row] >> 32),
                  y = (int)((keys[row] >> 16) & 0xffff),
                  z = (int)(keys[row] & 0xffff);
        const int64_t src =
            present(keys, n_rows, pack(x + dx, y + dy, z + dz));
        for (int l = 0; l < 4; l++)
          touch((uint32_t)src * 4 + l);
      }
      um[a] &= um[a] - 1;
    }
    for (int a = 0; a < n_run;)
      if (!um[a]) {
        run[a] = run[--n_run];
        um[a] = um[n_run];
      } else
        a++;
  }
  printf("    L2 %.0f MB: %.2f GB gathered, %.2f GB missed (hit %.1f%%)\n",
         l2_mb, n_access * 128 / 1e9, n_miss * 128 / 1e9,
         100.0 * (double)(n_access - n_miss) / (double)n_access);
  free(run);
  free(um);
}

static void fwd_model(const uint64_t *keys, double l2_mb) {
  int perm[27];
  class_perm(perm);
  lru_alloc(l2_mb);
  kv_t *kv = malloc(sizeof *kv * (size_t)n_rows);
  int *order = malloc(sizeof *order * (size_t)n_rows);
  static const int segs[] = {0, 19, 18, 17, 16, 15};
  for (int j = 0; j < 6; j++) {
    for (int i = 0; i < n_rows; i++) {
      const uint32_t seg = segs[j] ? (uint32_t)i >> segs[j] : 0u;
      kv[i].key = (seg << 24) | row_key(mask[i], perm, 24);
      kv[i].idx = i;
    }
    qsort(kv, n_rows, sizeof *kv, cmp_kv);
    for (int i = 0; i < n_rows; i++)
      order[i] = kv[i].idx;
    char name[64];
    snprintf(name, sizeof name, "segments of 2^%d rows", segs[j]);
    report(segs[j] ? name : "global sort (the library's)", order);
    fwd_replay(keys, order, l2_mb);
  }
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "rows") && strcmp(argv[1], "l2") &&
                    strcmp(argv[1], "fwd"))) {
    fprintf(stderr, "usage: %s rows|l2|fwd spconv_benchmark_pc.xyz.f32.bin "
                    "[L2_MB]\n", argv[0]);
    return 2;
  }
  long pairs = 0, freq[27] = {0};
  const uint64_t *keys = build_level(argv[2], &pairs, freq);
  printf("voxels %d, pairs %ld (BENCHMARKS.md: 913903, 7676993)\n", n_rows,
         pairs);
  if (!strcmp(argv[1], "rows"))
    rows_model(freq);
  else if (!strcmp(argv[1], "fwd"))
    fwd_model(keys, argc > 3 ? atof(argv[3]) : 40.0);
  else
    l2_model(keys, pairs, argc > 3 ? atof(argv[3]) : 50.0);
  return 0;
}
