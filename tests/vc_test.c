#include "vc_test.h"

#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/vc_core.h"

int vc_test_failures = 0;
int vc_test_checks = 0;
static uint64_t vc_rng_state = 0x12345678u;
static const char *vc_test_name = "test";

/* VOXCONV_TEST_BACKTRACE=1: a crash prints the stack (addresses as
 * binary(+offset): addr2line -e <unstripped binary> turns them into lines)
 * before dying with the signal, for crashes seen only on a lent machine or
 * under a tool. Opt-in: ASan installs its own handler, which this would
 * replace. */
static void vc_test_crash(int sig) {
  void *frames[64];
  const int n = backtrace(frames, 64);
  static const char head[] = "\n*** test crashed; backtrace:\n";
  if (write(2, head, sizeof head - 1) < 0) {
    /* nothing more to do */
  }
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

uint64_t vc_test_init(const char *test_name) {
  vc_test_name = test_name;
  const char *bt = getenv("VOXCONV_TEST_BACKTRACE");
  if (bt && strcmp(bt, "1") == 0) {
    signal(SIGSEGV, vc_test_crash);
    signal(SIGBUS, vc_test_crash);
    signal(SIGABRT, vc_test_crash);
  }
  const char *env = getenv("VOXCONV_TEST_SEED");
  uint64_t seed;
  if (env && *env) {
    seed = strtoull(env, NULL, 0);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
  }
  vc_rng_state = seed;
  printf("%s: seed %llu (replay with VOXCONV_TEST_SEED=%llu)\n", test_name,
         (unsigned long long)seed, (unsigned long long)seed);
  fflush(stdout);
  return seed;
}

uint64_t vc_rand_u64(void) { /* splitmix64 */
  uint64_t z = (vc_rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double vc_rand_uniform(void) {
  return (double)(vc_rand_u64() >> 11) * (1.0 / 9007199254740992.0);
}

double vc_rand_normal(void) {
  double u1 = vc_rand_uniform(), u2 = vc_rand_uniform();
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t vc_rand_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(vc_rand_u64() % (uint64_t)(hi - lo + 1));
}

void vc_fill_normal(void *data, voxconv_dtype_t dtype, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double v = vc_rand_normal();
    if (dtype == VOXCONV_DTYPE_F64) {
      ((double *)data)[i] = v;
    } else {
      float f = (float)v;
      vc_store_f32((char *)data + i * (int64_t)voxconv_dtype_size(dtype),
                   dtype, 1, &f);
    }
  }
}

/* Distinct NaN payloads per dtype, unlikely to come out of arithmetic. */
#define POISON_F32 0x7FC0DEADu
#define POISON_16 0x7DEAu /* f16 NaN */
#define POISON_BF16 0x7FDEu
#define POISON_F64 0x7FF8DEADBEEFDEADull

void vc_poison(void *data, voxconv_dtype_t dtype, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    switch (dtype) {
    case VOXCONV_DTYPE_F32: ((uint32_t *)data)[i] = POISON_F32; break;
    case VOXCONV_DTYPE_F16: ((uint16_t *)data)[i] = POISON_16; break;
    case VOXCONV_DTYPE_BF16: ((uint16_t *)data)[i] = POISON_BF16; break;
    case VOXCONV_DTYPE_F64: ((uint64_t *)data)[i] = POISON_F64; break;
    case VOXCONV_DTYPE_I8:
    case VOXCONV_DTYPE_I32: /* integers have no NaN: int8 tests poison themselves */
      break;
    }
  }
}

int vc_is_poison(const void *data, voxconv_dtype_t dtype, int64_t i) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32: return ((const uint32_t *)data)[i] == POISON_F32;
  case VOXCONV_DTYPE_F16: return ((const uint16_t *)data)[i] == POISON_16;
  case VOXCONV_DTYPE_BF16: return ((const uint16_t *)data)[i] == POISON_BF16;
  case VOXCONV_DTYPE_F64: return ((const uint64_t *)data)[i] == POISON_F64;
  case VOXCONV_DTYPE_I8:
  case VOXCONV_DTYPE_I32:
    break;
  }
  return 0;
}

int64_t vc_count_poison(const void *data, voxconv_dtype_t dtype, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; i++)
    c += vc_is_poison(data, dtype, i);
  return c;
}

double vc_get(const void *data, voxconv_dtype_t dtype, int64_t i) {
  if (dtype == VOXCONV_DTYPE_F64)
    return ((const double *)data)[i];
  float f;
  vc_load_f32((const char *)data + i * (int64_t)voxconv_dtype_size(dtype),
              dtype, 1, &f);
  return f;
}

vc_err_stats_t vc_compare(const void *got, voxconv_dtype_t dtype,
                          const double *ref, int64_t n, double floor) {
  vc_err_stats_t s = {0, 0, 0, -1, 0};
  double ss = 0, sd = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(ref[i]))
      ss += ref[i] * ref[i];
  double rms = n ? sqrt(ss / (double)n) : 0;
  for (int64_t i = 0; i < n; i++) {
    double g = vc_get(got, dtype, i), r = ref[i];
    if (!isfinite(r) || !isfinite(g)) {
      /* Non-finite must match in kind: NaN with NaN, +Inf with +Inf. */
      int same = (isnan(r) && isnan(g)) || (isinf(r) && isinf(g) && (r > 0) == (g > 0));
      if (!same) {
        s.n_nonfinite_mismatch++;
        if (s.worst_index < 0)
          s.worst_index = i;
        s.max_rel = INFINITY;
      }
      continue;
    }
    double d = fabs(g - r);
    sd += d * d;
    double rel = d / (fabs(r) + floor * rms + 1e-300);
    if (d > s.max_abs)
      s.max_abs = d;
    if (rel > s.max_rel) {
      s.max_rel = rel;
      s.worst_index = i;
    }
  }
  s.norm_rel = ss > 0 ? sqrt(sd / ss) : sqrt(sd);
  return s;
}

void *vc_read_file(const char *path, size_t *bytes) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = malloc(n > 0 ? (size_t)n : 1);
  if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf && bytes)
    *bytes = (size_t)n;
  return buf;
}

const char *vc_data_path(const char *relative) {
  static char path[4096];
  const char *dir = getenv("VOXCONV_DATA_DIR");
  if (!dir || !*dir)
    dir = VOXCONV_TEST_DATA_DIR;
  snprintf(path, sizeof path, "%s/%s", dir, relative);
  return path;
}

int vc_test_finish(void) {
  printf("%s: %d checks, %d failed\n", vc_test_name, vc_test_checks,
         vc_test_failures);
  return vc_test_failures ? 1 : 0;
}

int vc_cmp_coord(const void *a, const void *b) {
  const int32_t *x = (const int32_t *)a, *y = (const int32_t *)b;
  for (int i = 0; i < 4; i++)
    if (x[i] != y[i])
      return x[i] < y[i] ? -1 : 1;
  return 0;
}

int64_t vc_sort_unique_coords(int32_t *c, int64_t n) {
  if (n == 0) /* c may be NULL then, which qsort must not see */
    return 0;
  qsort(c, (size_t)n, 16, vc_cmp_coord);
  int64_t u = 0;
  for (int64_t i = 0; i < n; i++)
    if (u == 0 || vc_cmp_coord(c + i * 4, c + (u - 1) * 4) != 0) {
      memmove(c + u * 4, c + i * 4, 16);
      u++;
    }
  return u;
}

int64_t vc_find_coord(const int32_t *sorted, int64_t n, const int32_t *key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    const int c = vc_cmp_coord(sorted + 4 * mid, key);
    if (c == 0)
      return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

int32_t *vc_voxels_from_points(const float *pts, int64_t n, int fields,
                               float voxel, int64_t *n_out) {
  int32_t *c = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)(n ? n : 1));
  float mn[3] = {INFINITY, INFINITY, INFINITY};
  for (int64_t i = 0; i < n; i++)
    for (int a = 0; a < 3; a++)
      if (pts[i * fields + a] < mn[a])
        mn[a] = pts[i * fields + a];
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    const float *p = pts + i * fields;
    if (!isfinite(p[0]) || !isfinite(p[1]) || !isfinite(p[2]))
      continue;
    c[m * 4] = 0;
    for (int a = 0; a < 3; a++)
      c[m * 4 + 1 + a] = (int32_t)floorf((p[a] - mn[a]) / voxel);
    m++;
  }
  *n_out = vc_sort_unique_coords(c, m);
  return c;
}

int32_t *vc_workload_a_coords(int64_t *n_out) {
  size_t bytes = 0;
  float *pc = (float *)vc_read_file(
      vc_data_path("bench/spconv_benchmark_pc.xyz.f32.bin"), &bytes);
  *n_out = 0;
  if (!pc)
    return NULL;
  int64_t n = (int64_t)(bytes / 12);
  int32_t *c = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)n * 8);
  int64_t m = 0;
  for (int r = 0; r < 8; r++)
    for (int64_t i = 0; i < n; i++) {
      float x = pc[i * 3], y = pc[i * 3 + 1] + (float)r, z = pc[i * 3 + 2];
      if (x < -80 || x >= 80 || y < -80 || y >= 80 || z < -2 || z >= 6)
        continue;
      c[m * 4] = 0;
      c[m * 4 + 1] = (int32_t)floorf((x + 80.f) / 0.1f);
      c[m * 4 + 2] = (int32_t)floorf((y + 80.f) / 0.1f);
      c[m * 4 + 3] = (int32_t)floorf((z + 2.f) / 0.1f);
      m++;
    }
  free(pc);
  *n_out = vc_sort_unique_coords(c, m);
  return c;
}

int32_t *vc_random_coords(int64_t n, int extent, int64_t *n_out) {
  int32_t *c = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    c[i * 4] = (int32_t)vc_rand_range(0, 1);
    for (int a = 1; a < 4; a++)
      c[i * 4 + a] = (int32_t)vc_rand_range(-extent, extent);
  }
  *n_out = vc_sort_unique_coords(c, n);
  return c;
}

voxconv_status_t vc_test_kmap_build(voxconv_handle_t *h,
                                    const voxconv_kmap_desc_t *desc,
                                    const voxconv_coords_t *in,
                                    const voxconv_coords_t *out,
                                    voxconv_kmap_t **kmap) {
  const voxconv_status_t st = voxconv_kmap_build(h, desc, in, out, kmap);
  if (st != VOXCONV_STATUS_SUCCESS)
    return st;
  return voxconv_kmap_wait(h, *kmap);
}

voxconv_kmap_desc_t vc_test_kmap_desc(voxconv_kmap_mode_t mode, int kx, int ky,
                                      int kz, int s, int d) {
  voxconv_kmap_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.mode = mode;
  desc.kernel_size[0] = kx;
  desc.kernel_size[1] = ky;
  desc.kernel_size[2] = kz;
  for (int a = 0; a < 3; a++) {
    desc.stride[a] = s;
    desc.dilation[a] = d;
  }
  return desc;
}
