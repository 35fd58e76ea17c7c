/* CUDA coordinate machinery against the CPU, element for element:
 * kernel maps (all modes, kernel sizes, strides, dilations, batches, random
 * and recorded scans, unsorted inputs; spconv's sets: EXPANDING, explicit
 * padding, out_shape, and voxconv_kmap_inverse against the CPU's inverse and
 * the TRANSPOSED build), error statuses and messages for bad
 * coordinates, the GPU hash overflow-and-retry path, both offset orders
 * (x slowest and MinkowskiEngine's x fastest), voxelize, merge of
 * duplicates, and pooling / unpooling (GPU == CPU bit for bit in the same
 * dtype, and within tolerance of the CPU's fp64 path). Every GPU output is
 * poisoned before the call and checked to be fully written.
 *
 * Needs a CUDA device: exits 77 (skipped) when voxconv_device_count is 0.
 *   test_cuda_kmap            full run
 *   test_cuda_kmap --quick    small cases only (for compute-sanitizer)
 *   test_cuda_kmap --bench    + times the workload D map build (BENCHMARKS.md:
 *                             level-0 submanifold 3^3 map of workload A)
 *   test_cuda_kmap --bench-only   the timing alone (for profilers)
 * The overflow path uses the VOXCONV_CUDA_HASH_TINY=1 knob (read when a
 * handle is created): GPU hash tables start at 16 slots, must overflow and
 * be retried with full size; vc_cuda_kmap_hash_retries reports the count. */
#include "vc_test.h"

#include "coords/vc_kmap.h"
#include "cuda/vc_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Defined by the CUDA backend only: weak, so that a CPU-only build links
 * (the test then exits 77 before any use). */
#pragma weak vc_cuda_kmap_hash_retries

static voxconv_handle_t *g_cpu, *g_gpu;
static int g_quick;
/* offset_order of every desc make_desc returns: one pass of all_modes runs
 * with MinkowskiEngine's order (x fastest), GPU against CPU as always;
 * test_kmap_order checks the CPU's order against the default one. */
static int32_t g_order = VOXCONV_OFFSET_ORDER_X_SLOWEST;

#define POISON_I32 0x7EADBEEF
#define VC_HASH_TINY_SLOTS_TEST 16 /* cuda_kmap.cu VC_HASH_TINY_SLOTS */

/* VC_REQUIRE_OK for void helpers: count the failure and leave the helper. */
#define REQUIRE_OK_VOID(h, call)                                               \
  do {                                                                         \
    voxconv_status_t rq_ = (call);                                             \
    if (rq_ != VOXCONV_STATUS_SUCCESS) {                                       \
      VC_EXPECT(0, "%s returned %s: %s", #call, voxconv_status_string(rq_),   \
                voxconv_get_last_error(h));                                    \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* ---- small helpers ------------------------------------------------------ */
static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

static void *gpu_alloc(size_t bytes) {
  void *p = NULL;
  if (voxconv_malloc(g_gpu, bytes, &p) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "voxconv_malloc(%zu) failed: %s\n", bytes,
            voxconv_get_last_error(g_gpu));
    exit(1);
  }
  return p;
}

static void *gpu_upload(const void *src, size_t bytes) {
  void *p = gpu_alloc(bytes);
  if (bytes && voxconv_memcpy(g_gpu, p, src, bytes,
                              VOXCONV_MEMCPY_HOST_TO_BACKEND) !=
                   VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "upload failed: %s\n", voxconv_get_last_error(g_gpu));
    exit(1);
  }
  return p;
}

static void *gpu_download(const void *src, size_t bytes) {
  void *p = xmalloc(bytes);
  if (bytes && voxconv_memcpy(g_gpu, p, src, bytes,
                              VOXCONV_MEMCPY_BACKEND_TO_HOST) !=
                   VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "download failed: %s\n", voxconv_get_last_error(g_gpu));
    exit(1);
  }
  return p;
}

/* A device buffer of n int32 holding the poison pattern. */
static int32_t *gpu_poisoned_i32(int64_t n) {
  int32_t *h = (int32_t *)xmalloc((size_t)(n ? n : 1) * 4);
  for (int64_t i = 0; i < n; i++)
    h[i] = POISON_I32;
  int32_t *d = (int32_t *)gpu_upload(h, (size_t)n * 4);
  free(h);
  return d;
}

static int64_t count_i32(const int32_t *a, int64_t n, int32_t v) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; i++)
    c += a[i] == v;
  return c;
}

/* First index where a and b differ, -1 if equal. */
static int64_t first_diff_i32(const int32_t *a, const int32_t *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (a[i] != b[i])
      return i;
  return -1;
}

static void shuffle_rows(int32_t *c, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    const int64_t j = vc_rand_range(0, i);
    int32_t t[4];
    memcpy(t, c + 4 * i, 16);
    memcpy(c + 4 * i, c + 4 * j, 16);
    memcpy(c + 4 * j, t, 16);
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static voxconv_kmap_desc_t make_desc(voxconv_kmap_mode_t mode, int kx, int ky,
                                     int kz, int s, int d) {
  voxconv_kmap_desc_t desc = vc_test_kmap_desc(mode, kx, ky, kz, s, d);
  desc.offset_order = g_order;
  return desc;
}

/* ---- map comparison ------------------------------------------------------ */
static void compare_i32_dev(const char *label, const char *what,
                            const int32_t *cpu, const int32_t *gpu_dev,
                            int64_t n) {
  int32_t *g = (int32_t *)gpu_download(gpu_dev, (size_t)n * 4);
  const int64_t d = first_diff_i32(cpu, g, n);
  VC_EXPECT(d < 0, "%s: %s differs at %lld of %lld: cpu %d gpu %d", label,
            what, (long long)d, (long long)n, d >= 0 ? cpu[d] : 0,
            d >= 0 ? g[d] : 0);
  free(g);
}

/* The GPU map's row bitmasks (kvol <= 32) against ones computed here from
 * the CPU map's neighbour table: bit k set iff nbr[r][k] >= 0. */
static void compare_row_masks(const char *label, const char *what,
                              const int32_t *nbr_cpu, const uint32_t *mask_dev,
                              int64_t n, int K) {
  if (K > 32) {
    VC_EXPECT(mask_dev == NULL, "%s: %s built for kvol %d > 32", label, what,
              K);
    return;
  }
  VC_EXPECT(mask_dev != NULL, "%s: %s missing (kvol %d)", label, what, K);
  if (!mask_dev || n == 0)
    return;
  uint32_t *g = (uint32_t *)gpu_download(mask_dev, (size_t)n * 4);
  int64_t bad = -1;
  uint32_t want = 0;
  for (int64_t r = 0; r < n && bad < 0; r++) {
    want = 0;
    for (int k = 0; k < K; k++)
      want |= (nbr_cpu[r * K + k] >= 0 ? 1u : 0u) << k;
    if (g[r] != want)
      bad = r;
  }
  VC_EXPECT(bad < 0, "%s: %s row %lld of %lld: gpu %08x, table says %08x",
            label, what, (long long)bad, (long long)n,
            bad >= 0 ? g[bad] : 0u, want);
  free(g);
}

static void compare_maps(const char *label, const voxconv_kmap_t *mc,
                         const voxconv_kmap_t *mg) {
  voxconv_kmap_info_t ic, ig;
  voxconv_kmap_get_info(mc, &ic);
  voxconv_kmap_get_info(mg, &ig);
  VC_EXPECT(ic.n_in == ig.n_in && ic.n_out == ig.n_out &&
                ic.n_pairs == ig.n_pairs &&
                ic.kernel_volume == ig.kernel_volume,
            "%s: info cpu (n_in %lld n_out %lld pairs %lld K %d) gpu (%lld "
            "%lld %lld %d)",
            label, (long long)ic.n_in, (long long)ic.n_out,
            (long long)ic.n_pairs, ic.kernel_volume, (long long)ig.n_in,
            (long long)ig.n_out, (long long)ig.n_pairs, ig.kernel_volume);
  VC_EXPECT(memcmp(ic.out_tensor_stride, ig.out_tensor_stride, 12) == 0,
            "%s: out tensor stride differs", label);
  VC_EXPECT(mc->in_fingerprint == mg->in_fingerprint,
            "%s: fingerprint cpu %016llx gpu %016llx", label,
            (unsigned long long)mc->in_fingerprint,
            (unsigned long long)mg->in_fingerprint);
  if (ic.n_out != ig.n_out || ic.n_pairs != ig.n_pairs)
    return;
  const int K = ic.kernel_volume;
  compare_i32_dev(label, "out_coords", mc->out_coords, mg->out_coords,
                  4 * ic.n_out);
  compare_i32_dev(label, "nbr_out", mc->nbr_out, mg->nbr_out, ic.n_out * K);
  compare_i32_dev(label, "nbr_in", mc->nbr_in, mg->nbr_in, ic.n_in * K);
  compare_row_masks(label, "row_mask_out", mc->nbr_out, mg->row_mask_out,
                    ic.n_out, K);
  compare_row_masks(label, "row_mask_in", mc->nbr_in, mg->row_mask_in,
                    ic.n_in, K);

  int64_t *oc = (int64_t *)xmalloc((size_t)(K + 1) * 8);
  int64_t *og = (int64_t *)xmalloc((size_t)(K + 1) * 8);
  int32_t *in_c = (int32_t *)xmalloc((size_t)ic.n_pairs * 4);
  int32_t *out_c = (int32_t *)xmalloc((size_t)ic.n_pairs * 4);
  REQUIRE_OK_VOID(g_cpu, voxconv_kmap_get_pairs(g_cpu, mc, oc, in_c, out_c));
  int32_t *in_g = gpu_poisoned_i32(ig.n_pairs);
  int32_t *out_g = gpu_poisoned_i32(ig.n_pairs);
  for (int k = 0; k <= K; k++)
    og[k] = -7;
  VC_EXPECT_STATUS(g_gpu, voxconv_kmap_get_pairs(g_gpu, mg, og, in_g, out_g),
                   VOXCONV_STATUS_SUCCESS);
  int off_ok = 1;
  for (int k = 0; k <= K; k++)
    off_ok &= oc[k] == og[k];
  VC_EXPECT(off_ok, "%s: pair_offsets differ", label);
  compare_i32_dev(label, "in_rows", in_c, in_g, ic.n_pairs);
  compare_i32_dev(label, "out_rows", out_c, out_g, ic.n_pairs);
  voxconv_free(g_gpu, in_g);
  voxconv_free(g_gpu, out_g);
  free(oc);
  free(og);
  free(in_c);
  free(out_c);
}

/* Builds desc on both backends (in/out host coords; out NULL unless
 * TRANSPOSED) and compares statuses, messages and maps. With keep, the CPU
 * map is returned (the caller destroys it). */
static voxconv_kmap_t *run_case(const char *label,
                                const voxconv_kmap_desc_t *desc,
                                const int32_t *in, int64_t n_in, int in_ts,
                                const int32_t *out, int64_t n_out, int out_ts,
                                voxconv_handle_t *gpu, int expect_retry,
                                int keep) {
  voxconv_coords_t ci = {in, n_in, {in_ts, in_ts, in_ts}};
  voxconv_coords_t co = {out, n_out, {out_ts, out_ts, out_ts}};
  voxconv_kmap_t *mc = NULL, *mg = NULL;
  const voxconv_status_t sc =
      voxconv_kmap_build(g_cpu, desc, &ci, out ? &co : NULL, &mc);
  char cpu_msg[VC_ERROR_MAX];
  snprintf(cpu_msg, sizeof cpu_msg, "%s", voxconv_get_last_error(g_cpu));

  int32_t *din = (int32_t *)gpu_upload(in, (size_t)n_in * 16);
  int32_t *dout = out ? (int32_t *)gpu_upload(out, (size_t)n_out * 16) : NULL;
  voxconv_coords_t gi = {din, n_in, {in_ts, in_ts, in_ts}};
  voxconv_coords_t go = {dout, n_out, {out_ts, out_ts, out_ts}};
  const voxconv_status_t sg =
      vc_test_kmap_build(gpu, desc, &gi, out ? &go : NULL, &mg);
  VC_EXPECT(sc == sg, "%s: cpu %s (%s) gpu %s (%s)", label,
            voxconv_status_string(sc), cpu_msg, voxconv_status_string(sg),
            voxconv_get_last_error(gpu));
  /* An asynchronous build's error comes from voxconv_kmap_wait, whose
   * message quotes the build's: the CPU builder's words end it. */
  if (sc != VOXCONV_STATUS_SUCCESS && sg != VOXCONV_STATUS_SUCCESS) {
    const char *gm = voxconv_get_last_error(gpu);
    const size_t lc = strlen(cpu_msg), lg = strlen(gm);
    VC_EXPECT(lg >= lc && strcmp(gm + lg - lc, cpu_msg) == 0,
              "%s: messages differ:\n  cpu: %s\n  gpu: %s", label, cpu_msg,
              gm);
  }
  if (sc == VOXCONV_STATUS_SUCCESS && sg == VOXCONV_STATUS_SUCCESS) {
    compare_maps(label, mc, mg);
    if (desc->mode == VOXCONV_KMAP_STRIDED) {
      /* The deferred build (voxconv_kmap_build_async), once complete, is
       * the same map. */
      voxconv_kmap_t *md = NULL;
      voxconv_status_t sd = voxconv_kmap_build_async(gpu, desc, &gi, NULL, &md);
      if (sd == VOXCONV_STATUS_SUCCESS)
        sd = voxconv_kmap_wait(gpu, md);
      VC_EXPECT(sd == VOXCONV_STATUS_SUCCESS, "%s: deferred build: %s (%s)",
                label, voxconv_status_string(sd), voxconv_get_last_error(gpu));
      if (sd == VOXCONV_STATUS_SUCCESS) {
        char dl[300];
        snprintf(dl, sizeof dl, "%s (deferred)", label);
        compare_maps(dl, mc, md);
      }
      voxconv_kmap_destroy(gpu, md);
    }
    const int retries =
        vc_cuda_kmap_hash_retries ? vc_cuda_kmap_hash_retries(mg) : -1;
    if (expect_retry)
      VC_EXPECT(retries > 0, "%s: expected a hash overflow retry, got %d",
                label, retries);
    else
      VC_EXPECT(retries == 0, "%s: unexpected hash retries %d", label,
                retries);
    /* verify: the same coordinates pass, a changed row fails. */
    VC_EXPECT_STATUS(gpu, voxconv_kmap_verify(gpu, mg, &gi),
                     VOXCONV_STATUS_SUCCESS);
    if (n_in > 1) {
      int32_t *mod = (int32_t *)xmalloc((size_t)n_in * 16);
      memcpy(mod, in, (size_t)n_in * 16);
      mod[4 * (n_in / 2) + 3] += 1;
      int32_t *dmod = (int32_t *)gpu_upload(mod, (size_t)n_in * 16);
      voxconv_coords_t gm = gi;
      gm.data = dmod;
      VC_EXPECT_STATUS(gpu, voxconv_kmap_verify(gpu, mg, &gm),
                       VOXCONV_STATUS_KMAP_MISMATCH);
      voxconv_free(gpu, dmod);
      free(mod);
    }
  }
  voxconv_kmap_destroy(gpu, mg);
  voxconv_free(gpu, din);
  voxconv_free(gpu, dout);
  if (!keep || sc != VOXCONV_STATUS_SUCCESS) {
    voxconv_kmap_destroy(g_cpu, mc);
    return NULL;
  }
  return mc;
}

static void spconv_modes(const char *name, const int32_t *c, int64_t n,
                         voxconv_handle_t *gpu, int expect_retry);

/* Every mode on one coordinate set (host, any order): submanifold with odd
 * / even / anisotropic / dilated kernels, strided, transposed back onto the
 * finer set, generative. */
static void all_modes(const char *name, const int32_t *c, int64_t n,
                      voxconv_handle_t *gpu, int expect_retry, int heavy) {
  char label[256];
  static const int subm[][4] = {{3, 3, 3, 1}, {2, 2, 2, 1}, {3, 1, 5, 1},
                                {5, 5, 5, 2}, {1, 1, 1, 1}, {4, 3, 2, 3},
                                {7, 7, 7, 1}};
  const int n_subm = heavy ? 7 : 6;
  for (int t = 0; t < n_subm; t++) {
    voxconv_kmap_desc_t d = make_desc(VOXCONV_KMAP_SUBMANIFOLD, subm[t][0],
                                      subm[t][1], subm[t][2], 1, subm[t][3]);
    snprintf(label, sizeof label, "%s subm k%dx%dx%d d%d", name, subm[t][0],
             subm[t][1], subm[t][2], subm[t][3]);
    run_case(label, &d, c, n, 1, NULL, 0, 0, gpu, expect_retry, 0);
  }
  static const int strided[][5] = {
      {2, 2, 2, 2, 1}, {3, 3, 3, 2, 1}, {2, 3, 1, 3, 1}, {3, 3, 3, 2, 2}};
  for (int t = 0; t < 4; t++) {
    voxconv_kmap_desc_t d =
        make_desc(VOXCONV_KMAP_STRIDED, strided[t][0], strided[t][1],
                  strided[t][2], strided[t][3], strided[t][4]);
    snprintf(label, sizeof label, "%s strided k%dx%dx%d s%d d%d", name,
             strided[t][0], strided[t][1], strided[t][2], strided[t][3],
             strided[t][4]);
    voxconv_kmap_t *mc =
        run_case(label, &d, c, n, 1, NULL, 0, 0, gpu, expect_retry, 1);
    if (!mc)
      continue;
    /* The coarse set back onto the fine one: TRANSPOSED with the same
     * geometry, and GENERATIVE from the coarse set. */
    voxconv_kmap_desc_t dt = d;
    dt.mode = VOXCONV_KMAP_TRANSPOSED;
    const int s = strided[t][3];
    snprintf(label, sizeof label, "%s transposed k%dx%dx%d s%d d%d", name,
             strided[t][0], strided[t][1], strided[t][2], s, strided[t][4]);
    run_case(label, &dt, mc->out_coords, mc->n_out, s, c, n, 1, gpu,
             expect_retry, 0);
    voxconv_kmap_desc_t dg = d;
    dg.mode = VOXCONV_KMAP_GENERATIVE;
    snprintf(label, sizeof label, "%s generative k%dx%dx%d s%d d%d", name,
             strided[t][0], strided[t][1], strided[t][2], s, strided[t][4]);
    run_case(label, &dg, mc->out_coords, mc->n_out, s, NULL, 0, 0, gpu,
             expect_retry, 0);
    voxconv_kmap_destroy(g_cpu, mc);
  }
  /* Non-overlapping windows with a different size per axis (kernel =
   * stride (2,1,3)): the GPU builds these tables from one lookup per input
   * row instead of the neighbour queries (vc_strided_direct_kernel), so
   * the anisotropic index order needs its own case beside k2x2x2 s2. */
  voxconv_kmap_desc_t da = make_desc(VOXCONV_KMAP_STRIDED, 2, 1, 3, 1, 1);
  da.stride[0] = 2;
  da.stride[1] = 1;
  da.stride[2] = 3;
  snprintf(label, sizeof label, "%s strided k2x1x3 s2x1x3", name);
  voxconv_kmap_t *ma = run_case(label, &da, c, n, 1, NULL, 0, 0, gpu,
                                expect_retry, 1);
  if (ma)
    voxconv_kmap_destroy(g_cpu, ma);
  /* GENERATIVE with stride 1 on the fine set (tensor stride 1). */
  voxconv_kmap_desc_t dg = make_desc(VOXCONV_KMAP_GENERATIVE, 3, 3, 3, 1, 1);
  snprintf(label, sizeof label, "%s generative k3 s1", name);
  run_case(label, &dg, c, n, 1, NULL, 0, 0, gpu, expect_retry, 0);
  spconv_modes(name, c, n, gpu, expect_retry);
}

/* Rows at the coordinate limits: x near VOXCONV_COORD_MAX, y near
 * VOXCONV_COORD_MIN, z around 0, so some partners of a row fall outside the
 * limits on one axis and some on two: the GPU query's per-axis range
 * checks (and any shortcut for rows whose every partner is in range, as
 * tried in docs/perf-notes.md item 142) must give the CPU builder's
 * tables. */
static void edge_cases(voxconv_handle_t *gpu) {
  int64_t n = 0;
  int32_t *c = vc_random_coords(g_quick ? 300 : 3000, 6, &n);
  for (int64_t i = 0; i < n; i++) {
    c[4 * i + 1] = VOXCONV_COORD_MAX - 6 + (c[4 * i + 1] + 6) / 2; /* ..MAX */
    c[4 * i + 2] = VOXCONV_COORD_MIN + (c[4 * i + 2] + 6) / 2;     /* MIN.. */
  }
  n = vc_sort_unique_coords(c, n);
  shuffle_rows(c, n);
  static const int subm[][4] = {
      {3, 3, 3, 1}, {5, 5, 5, 2}, {2, 2, 2, 1}, {4, 3, 2, 3}};
  char label[96];
  for (int t = 0; t < 4; t++) {
    voxconv_kmap_desc_t d = make_desc(VOXCONV_KMAP_SUBMANIFOLD, subm[t][0],
                                      subm[t][1], subm[t][2], 1, subm[t][3]);
    snprintf(label, sizeof label, "edges subm k%dx%dx%d d%d", subm[t][0],
             subm[t][1], subm[t][2], subm[t][3]);
    run_case(label, &d, c, n, 1, NULL, 0, 0, gpu, 0, 0);
  }
  voxconv_kmap_desc_t d = make_desc(VOXCONV_KMAP_STRIDED, 3, 3, 3, 2, 1);
  voxconv_kmap_t *mc = run_case("edges strided k3x3x3 s2", &d, c, n, 1, NULL,
                                0, 0, gpu, 0, 1);
  if (mc)
    voxconv_kmap_destroy(g_cpu, mc);
  free(c);
}

/* ---- spconv's sets (issue 21): padding, EXPANDING, out_shape, inverse --- */
static voxconv_kmap_desc_t padded_desc(voxconv_kmap_mode_t mode, int kx,
                                       int ky, int kz, int s, int d, int p) {
  voxconv_kmap_desc_t desc = make_desc(mode, kx, ky, kz, s, d);
  desc.padded = 1;
  for (int a = 0; a < 3; a++) {
    const int pmax = d * (desc.kernel_size[a] - 1);
    desc.padding[a] = p < pmax ? p : pmax;
  }
  return desc;
}

/* spconv's SparseConv3d output size along each axis of the set's extent. */
static void conv_out_shape(const int32_t *c, int64_t n,
                           voxconv_kmap_desc_t *d) {
  for (int a = 0; a < 3; a++) {
    int32_t hi = 0;
    for (int64_t i = 0; i < n; i++)
      hi = c[4 * i + 1 + a] > hi ? c[4 * i + 1 + a] : hi;
    const int32_t span = d->dilation[a] * (d->kernel_size[a] - 1);
    const int32_t os =
        (hi + 1 + 2 * d->padding[a] - span - 1) / d->stride[a] + 1;
    d->out_shape[a] = os > 0 ? os : 1;
  }
}

/* The inverse of fwd on both backends: the GPU inverse against the CPU
 * inverse (element for element, fingerprints included), and the CPU
 * inverse against the CPU TRANSPOSED build of the same geometry. */
static void inverse_case(const char *label, const voxconv_kmap_desc_t *desc,
                         const int32_t *in, int64_t n_in,
                         voxconv_handle_t *gpu) {
  voxconv_coords_t ci = {in, n_in, {1, 1, 1}};
  int32_t *din = (int32_t *)gpu_upload(in, (size_t)n_in * 16);
  voxconv_coords_t gi = {din, n_in, {1, 1, 1}};
  voxconv_kmap_t *fc = NULL, *fg = NULL, *ic = NULL, *ig = NULL, *tc = NULL;
  VC_EXPECT_STATUS(g_cpu, voxconv_kmap_build(g_cpu, desc, &ci, NULL, &fc),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(gpu, vc_test_kmap_build(gpu, desc, &gi, NULL, &fg),
                   VOXCONV_STATUS_SUCCESS);
  if (fc && fg) {
    VC_EXPECT_STATUS(g_cpu, voxconv_kmap_inverse(g_cpu, fc, &ic),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(gpu, voxconv_kmap_inverse(gpu, fg, &ig),
                     VOXCONV_STATUS_SUCCESS);
    /* The GPU inverse must not depend on its forward map. */
    voxconv_kmap_destroy(gpu, fg);
    fg = NULL;
  }
  char l2[300];
  if (ic && ig) {
    snprintf(l2, sizeof l2, "%s inverse", label);
    compare_maps(l2, ic, ig);
    /* verify against the forward map's outputs (uploaded from the CPU's:
     * the same coordinates). */
    voxconv_kmap_info_t fi;
    voxconv_kmap_get_info(fc, &fi);
    int32_t *dout = (int32_t *)gpu_upload(fc->out_coords,
                                          (size_t)fi.n_out * 16 + 16);
    voxconv_coords_t go = {dout, fi.n_out,
                           {fi.out_tensor_stride[0], fi.out_tensor_stride[1],
                            fi.out_tensor_stride[2]}};
    VC_EXPECT_STATUS(gpu, voxconv_kmap_verify(gpu, ig, &go),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_free(gpu, dout);
    /* The CPU TRANSPOSED build of fwd's geometry is the same map. */
    voxconv_kmap_desc_t td = *desc;
    td.mode = VOXCONV_KMAP_TRANSPOSED;
    memset(td.out_shape, 0, sizeof td.out_shape);
    voxconv_coords_t to = {fc->out_coords, fi.n_out,
                           {fi.out_tensor_stride[0], fi.out_tensor_stride[1],
                            fi.out_tensor_stride[2]}};
    VC_EXPECT_STATUS(g_cpu, voxconv_kmap_build(g_cpu, &td, &to, &ci, &tc),
                     VOXCONV_STATUS_SUCCESS);
    if (tc) {
      snprintf(l2, sizeof l2, "%s inverse vs TRANSPOSED build", label);
      compare_maps(l2, tc, ig);
    }
  }
  voxconv_kmap_destroy(g_cpu, tc);
  voxconv_kmap_destroy(g_cpu, ic);
  voxconv_kmap_destroy(gpu, ig);
  voxconv_kmap_destroy(g_cpu, fc);
  voxconv_kmap_destroy(gpu, fg);
  voxconv_free(gpu, din);
}

/* EXPANDING (bounded and not), padded STRIDED / TRANSPOSED / SUBMANIFOLD,
 * GENERATIVE with padding and out_shape, and inverses, on one set. */
static void spconv_modes(const char *name, const int32_t *c, int64_t n,
                         voxconv_handle_t *gpu, int expect_retry) {
  char label[256];
  /* {kx, ky, kz, s, d, p, bounded} */
  static const int ex[][7] = {{3, 3, 3, 2, 1, 1, 1}, {3, 3, 3, 2, 1, 1, 0},
                              {2, 2, 2, 2, 1, 0, 1}, {3, 3, 3, 1, 1, 1, 1},
                              {3, 1, 1, 2, 1, 1, 0}, {2, 1, 1, 2, 1, 0, 1},
                              {4, 4, 4, 2, 1, 1, 1}, {3, 3, 3, 2, 2, 2, 0},
                              {5, 3, 1, 3, 1, 2, 1}};
  const int n_ex = g_quick ? 4 : 9;
  for (int t = 0; t < n_ex; t++) {
    voxconv_kmap_desc_t d =
        padded_desc(VOXCONV_KMAP_EXPANDING, ex[t][0], ex[t][1], ex[t][2],
                    ex[t][3], ex[t][4], ex[t][5]);
    if (ex[t][1] == 1) /* anisotropic: stride only along x */
      d.stride[1] = d.stride[2] = 1;
    if (ex[t][6])
      conv_out_shape(c, n, &d);
    snprintf(label, sizeof label, "%s expanding k%dx%dx%d s%d d%d p%d%s", name,
             ex[t][0], ex[t][1], ex[t][2], ex[t][3], ex[t][4], ex[t][5],
             ex[t][6] ? " bounded" : "");
    voxconv_kmap_t *mc =
        run_case(label, &d, c, n, 1, NULL, 0, 0, gpu, expect_retry, 1);
    if (!mc)
      continue;
    if (!expect_retry)
      inverse_case(label, &d, c, n, gpu);
    /* SparseConvTranspose3d back from the coarse set: GENERATIVE with
     * padding and out_shape (the fine set's extent). */
    voxconv_kmap_desc_t dg = d;
    dg.mode = VOXCONV_KMAP_GENERATIVE;
    for (int a = 0; a < 3; a++)
      dg.out_shape[a] =
          ex[t][6] ? (d.out_shape[a] * d.stride[a] + 1 > VOXCONV_COORD_MAX + 1
                          ? VOXCONV_COORD_MAX + 1
                          : d.out_shape[a] * d.stride[a] + 1)
                   : 0;
    snprintf(label, sizeof label, "%s generative k%dx%dx%d s%d p%d%s", name,
             ex[t][0], ex[t][1], ex[t][2], ex[t][3], ex[t][5],
             ex[t][6] ? " bounded" : "");
    run_case(label, &dg, mc->out_coords, mc->n_out, ex[t][3], NULL, 0, 0, gpu,
             expect_retry, 0);
    voxconv_kmap_destroy(g_cpu, mc);
  }
  /* Padded spellings of the older modes. */
  voxconv_kmap_desc_t ds = padded_desc(VOXCONV_KMAP_STRIDED, 3, 3, 3, 2, 1, 0);
  snprintf(label, sizeof label, "%s strided k3 s2 p0", name);
  voxconv_kmap_t *mc = run_case(label, &ds, c, n, 1, NULL, 0, 0, gpu,
                                expect_retry, 1);
  if (mc) {
    if (!expect_retry)
      inverse_case(label, &ds, c, n, gpu);
    voxconv_kmap_desc_t dt = ds;
    dt.mode = VOXCONV_KMAP_TRANSPOSED;
    dt.padding[0] = dt.padding[1] = dt.padding[2] = 2;
    snprintf(label, sizeof label, "%s transposed k3 s2 p2", name);
    run_case(label, &dt, mc->out_coords, mc->n_out, 2, c, n, 1, gpu,
             expect_retry, 0);
    voxconv_kmap_destroy(g_cpu, mc);
  }
  /* Non-overlapping windows through the padded spelling (the GPU's direct
   * strided kernel must still recognise them). */
  ds = padded_desc(VOXCONV_KMAP_STRIDED, 2, 2, 2, 2, 1, 0);
  snprintf(label, sizeof label, "%s strided k2 s2 p0", name);
  run_case(label, &ds, c, n, 1, NULL, 0, 0, gpu, expect_retry, 0);
  /* Submanifold: spconv's even-kernel anchoring (p = k/2), a centred
   * padded odd kernel (the mirror path) and an off-centre odd one. */
  static const int sm[][3] = {{2, 1, 1}, {3, 1, 1}, {3, 1, 0}, {4, 1, 2}};
  for (int t = 0; t < 4; t++) {
    voxconv_kmap_desc_t d = padded_desc(VOXCONV_KMAP_SUBMANIFOLD, sm[t][0],
                                        sm[t][0], sm[t][0], 1, sm[t][1],
                                        sm[t][2]);
    snprintf(label, sizeof label, "%s subm k%d p%d", name, sm[t][0], sm[t][2]);
    run_case(label, &d, c, n, 1, NULL, 0, 0, gpu, expect_retry, 0);
  }
}

/* EXPANDING / GENERATIVE outputs past the coordinate limits: the same
 * status and words on both backends; with out_shape they are dropped. */
static void spconv_error_cases(void) {
  int32_t edge[4 * 3] = {0, 5, 5, 5, 1, 131071, -3, 2, 0, -131071, 7, 7};
  voxconv_kmap_desc_t d = padded_desc(VOXCONV_KMAP_EXPANDING, 3, 3, 3, 1, 1, 2);
  run_case("expanding past +max", &d, edge, 3, 1, NULL, 0, 0, g_gpu, 0, 0);
  d.padding[0] = 0;
  run_case("expanding past -max", &d, edge, 3, 1, NULL, 0, 0, g_gpu, 0, 0);
  d.out_shape[0] = 200;
  run_case("expanding bounded at the rim", &d, edge, 3, 1, NULL, 0, 0, g_gpu,
           0, 0);
  voxconv_kmap_desc_t dg =
      padded_desc(VOXCONV_KMAP_GENERATIVE, 3, 3, 3, 2, 1, 1);
  run_case("generative padded past max", &dg, edge, 3, 2, NULL, 0, 0, g_gpu,
           0, 0);
  dg.out_shape[0] = dg.out_shape[1] = dg.out_shape[2] = 64;
  run_case("generative bounded", &dg, edge, 3, 2, NULL, 0, 0, g_gpu, 0, 0);
  /* An input set whose EXPANDING outputs are all off the lattice / out of
   * bounds: an empty map, and its (empty) inverse. */
  int32_t one[4] = {0, 1, 1, 1};
  voxconv_kmap_desc_t de = padded_desc(VOXCONV_KMAP_EXPANDING, 1, 1, 1, 2, 1, 0);
  run_case("expanding empty", &de, one, 1, 1, NULL, 0, 0, g_gpu, 0, 0);
  inverse_case("expanding empty", &de, one, 1, g_gpu);
}

/* The CUDA EXPANDING build deduplicates its outputs in a GPU hash set sized
 * from an estimate (cuda_kmap.cu, vc_cuda_kmap_build: 4 slots a key for
 * n_in keys when S <= 8 candidate slots per input), which fills only when
 * the outputs barely overlap; a full set must cost a retry, never a
 * truncated map. Isolated voxels with all-odd coordinates give k3 s2 p1
 * all 8 outputs each (1728 keys for 216 inputs, in a 1024-slot set). On
 * the tiny-table handle, 3 inputs keep the input hash (16 slots) from
 * overflowing, so the retry there comes from the output-key set alone. */
static void expanding_key_set_cases(voxconv_handle_t *tiny) {
  int32_t iso[4 * 216];
  int64_t n = 0;
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++)
      for (int l = 0; l < 6; l++, n++) {
        iso[4 * n + 0] = 0;
        iso[4 * n + 1] = 8 * i - 23;
        iso[4 * n + 2] = 8 * j - 23;
        iso[4 * n + 3] = 8 * l + 1;
      }
  shuffle_rows(iso, n);
  voxconv_kmap_desc_t d = padded_desc(VOXCONV_KMAP_EXPANDING, 3, 3, 3, 2, 1, 1);
  voxconv_kmap_t *mc = run_case("expanding isolated k3 s2 p1 (full key set)",
                                &d, iso, n, 1, NULL, 0, 0, g_gpu, 1, 1);
  if (mc) {
    voxconv_kmap_info_t info;
    voxconv_kmap_get_info(mc, &info);
    VC_EXPECT(info.n_out == 8 * n,
              "isolated k3 s2 p1: %lld outputs, want %lld (8 per input)",
              (long long)info.n_out, (long long)(8 * n));
    voxconv_kmap_destroy(g_cpu, mc);
  }
  inverse_case("expanding isolated k3 s2 p1", &d, iso, n, g_gpu);
  voxconv_kmap_desc_t d1 =
      padded_desc(VOXCONV_KMAP_EXPANDING, 3, 3, 3, 1, 1, 1);
  run_case("expanding isolated k3 s1 p1", &d1, iso, n, 1, NULL, 0, 0, g_gpu, 0,
           0);
  /* Three inputs, 81 (s1) and 24 (s2) outputs, 16-slot tables. */
  run_case("tiny key set k3 s1 p1", &d1, iso, 3, 1, NULL, 0, 0, tiny, 1, 0);
  run_case("tiny key set k3 s2 p1", &d, iso, 3, 1, NULL, 0, 0, tiny, 1, 0);
}

/* ---- error statuses ------------------------------------------------------ */
/* A deferred STRIDED build (voxconv_kmap_build_async) of bad rows: its
 * wait returns the CPU build's status, and its message ends with the CPU's
 * words. */
static void deferred_error_case(const char *label, const voxconv_kmap_desc_t *d,
                                const int32_t *rows, int64_t n) {
  voxconv_coords_t ci = {rows, n, {1, 1, 1}};
  voxconv_kmap_t *mc = NULL;
  const voxconv_status_t sc = voxconv_kmap_build(g_cpu, d, &ci, NULL, &mc);
  char cpu_msg[VC_ERROR_MAX];
  snprintf(cpu_msg, sizeof cpu_msg, "%s", voxconv_get_last_error(g_cpu));
  voxconv_kmap_destroy(g_cpu, mc);
  int32_t *dev = (int32_t *)gpu_upload(rows, (size_t)n * 16);
  voxconv_coords_t gi = {dev, n, {1, 1, 1}};
  voxconv_kmap_t *md = NULL;
  voxconv_status_t sg = voxconv_kmap_build_async(g_gpu, d, &gi, NULL, &md);
  if (sg == VOXCONV_STATUS_SUCCESS)
    sg = voxconv_kmap_wait(g_gpu, md);
  VC_EXPECT(sc != VOXCONV_STATUS_SUCCESS && sg == sc, "%s: cpu %s, gpu %s (%s)",
            label, voxconv_status_string(sc), voxconv_status_string(sg),
            voxconv_get_last_error(g_gpu));
  const char *gm = voxconv_get_last_error(g_gpu);
  const size_t lc = strlen(cpu_msg), lg = strlen(gm);
  VC_EXPECT(lg >= lc && strcmp(gm + lg - lc, cpu_msg) == 0,
            "%s: messages differ:\n  cpu: %s\n  gpu: %s", label, cpu_msg, gm);
  voxconv_kmap_destroy(g_gpu, md);
  voxconv_free(g_gpu, dev);
}

static void error_cases(void) {
  int64_t n = 0;
  int32_t *c = vc_random_coords(3000, 40, &n);
  shuffle_rows(c, n);
  int32_t *bad = (int32_t *)xmalloc((size_t)n * 16);
  const voxconv_kmap_desc_t ds = make_desc(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1);
  const voxconv_kmap_desc_t dst = make_desc(VOXCONV_KMAP_STRIDED, 2, 2, 2, 2, 1);
  static const struct {
    int row_frac, field, value;
  } range[] = {{7, 1, 140000},   {3, 2, -131072}, {5, 3, 131072},
               {2, 0, 1024},     {9, 0, -1},      {1, 1, INT32_MIN}};
  char label[128];
  for (int t = 0; t < 6; t++) {
    memcpy(bad, c, (size_t)n * 16);
    const int64_t r1 = n * range[t].row_frac / 10;
    const int64_t r2 = r1 + 1 + n / 20; /* a later bad row: not reported */
    bad[4 * r1 + range[t].field] = range[t].value;
    bad[4 * r2 + 1] = 500000;
    snprintf(label, sizeof label, "range error %d (subm)", t);
    run_case(label, &ds, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);
    snprintf(label, sizeof label, "range error %d (strided)", t);
    run_case(label, &dst, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);
  }
  /* Duplicates: rows 10 and 400 repeat earlier rows; also with a range
   * error later (range is reported first on both). */
  memcpy(bad, c, (size_t)n * 16);
  memcpy(bad + 4 * 400, bad + 4 * 13, 16);
  memcpy(bad + 4 * 10, bad + 4 * 2500, 16);
  run_case("duplicate (subm)", &ds, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);
  run_case("duplicate (strided)", &dst, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);
  /* The same verdict deferred, and for a row repeated three times. A
   * kernel = stride build of this size hashes its input up front; from
   * 65,536 rows it finds duplicates through its table writes and hashes
   * its input only then (cuda_kmap.cu, vc_hash_on_dup): small_step_cases
   * runs these cases at that limit. */
  deferred_error_case("duplicate (strided, deferred)", &dst, bad, n);
  memcpy(bad + 4 * 1700, bad + 4 * 13, 16);
  memcpy(bad + 4 * 60, bad + 4 * 13, 16);
  run_case("duplicate x3 (strided)", &dst, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);
  deferred_error_case("duplicate x3 (strided, deferred)", &dst, bad, n);
  bad[4 * (n - 1) + 2] = -200000;
  run_case("duplicate + range", &ds, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);

  /* TRANSPOSED: bad and duplicate output coordinates. */
  voxconv_kmap_t *mc = run_case("transposed base", &dst, c, n, 1, NULL, 0, 0,
                                g_gpu, 0, 1);
  if (mc) {
    voxconv_kmap_desc_t dt = dst;
    dt.mode = VOXCONV_KMAP_TRANSPOSED;
    memcpy(bad, c, (size_t)n * 16);
    bad[4 * 77 + 3] = 131072;
    run_case("transposed out range", &dt, mc->out_coords, mc->n_out, 2, bad,
             n, 1, g_gpu, 0, 0);
    memcpy(bad, c, (size_t)n * 16);
    memcpy(bad + 4 * 91, bad + 4 * 5, 16);
    run_case("transposed out duplicate", &dt, mc->out_coords, mc->n_out, 2,
             bad, n, 1, g_gpu, 0, 0);
    voxconv_kmap_destroy(g_cpu, mc);
  }
  /* GENERATIVE cells beyond the limits. */
  int32_t edge[4 * 4] = {0, 0, 0, 0,         1, 5, 5, 5,
                         0, 65535, -3, 2,    0, 65536, 1, 1};
  const voxconv_kmap_desc_t dg = make_desc(VOXCONV_KMAP_GENERATIVE, 3, 3, 3, 2, 1);
  run_case("generative out of range", &dg, edge, 4, 2, NULL, 0, 0, g_gpu, 0, 0);
  /* Neighbours beyond the limits simply do not exist. */
  int32_t rim[4 * 6] = {0, 131071, 131071, 131071, 0, 131070, 131071, 131071,
                        0, -131071, 0, 0,          0, -131070, 1, 0,
                        1023, 131071, -131071, 5,  1023, 131071, -131070, 5};
  all_modes("rim", rim, 6, g_gpu, 0, 0);
  /* Host coordinates on a CUDA handle: named, not a CUDA error. The
   * malloc'd rows are 16-byte aligned, so only the memory kind is wrong. */
  {
    voxconv_coords_t hc = {c, n, {1, 1, 1}};
    voxconv_kmap_t *km = NULL;
    VC_EXPECT_STATUS(g_gpu, voxconv_kmap_build(g_gpu, &ds, &hc, NULL, &km),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    VC_EXPECT(km == NULL && strstr(voxconv_get_last_error(g_gpu),
                                   "host memory") != NULL,
              "host coordinates: km=%p, message: %s", (void *)km,
              voxconv_get_last_error(g_gpu));
    /* the handle stays usable */
    run_case("after host coords", &ds, c, n, 1, NULL, 0, 0, g_gpu, 0, 0);
  }
  free(bad);
  free(c);
}

/* ---- voxelize ------------------------------------------------------------ */
static void voxelize_case(const char *label, const float *pts, int64_t n,
                          int fields, const int32_t *batch,
                          const voxconv_voxelize_desc_t *d, int n_feat) {
  voxconv_points_t pc = {pts, n, fields, batch};
  int32_t *cc = (int32_t *)xmalloc((size_t)n * 16);
  float *fc = (float *)xmalloc((size_t)n * n_feat * 4 + 4);
  int64_t *pvc = (int64_t *)xmalloc((size_t)n * 8);
  int64_t nvc = -1, nvg = -1;
  const voxconv_status_t sc =
      voxconv_voxelize(g_cpu, d, &pc, n_feat, cc, fc, &nvc, pvc);
  char cpu_msg[VC_ERROR_MAX];
  snprintf(cpu_msg, sizeof cpu_msg, "%s", voxconv_get_last_error(g_cpu));

  float *dp = (float *)gpu_upload(pts, (size_t)n * fields * 4);
  int32_t *db = batch ? (int32_t *)gpu_upload(batch, (size_t)n * 4) : NULL;
  int32_t *dc = gpu_poisoned_i32(4 * n);
  float *df = (float *)gpu_poisoned_i32((int64_t)n * n_feat);
  int64_t *dpv = (int64_t *)gpu_poisoned_i32(2 * n);
  voxconv_points_t pg = {dp, n, fields, db};
  const voxconv_status_t sg =
      voxconv_voxelize(g_gpu, d, &pg, n_feat, dc, df, &nvg, dpv);
  VC_EXPECT(sc == sg, "%s: cpu %s (%s) gpu %s (%s)", label,
            voxconv_status_string(sc), cpu_msg, voxconv_status_string(sg),
            voxconv_get_last_error(g_gpu));
  if (sc != VOXCONV_STATUS_SUCCESS && sg != VOXCONV_STATUS_SUCCESS)
    VC_EXPECT(strcmp(cpu_msg, voxconv_get_last_error(g_gpu)) == 0,
              "%s: messages differ:\n  cpu: %s\n  gpu: %s", label, cpu_msg,
              voxconv_get_last_error(g_gpu));
  if (sc == VOXCONV_STATUS_SUCCESS && sg == VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(nvc == nvg, "%s: n_voxels cpu %lld gpu %lld", label,
              (long long)nvc, (long long)nvg);
    if (nvc == nvg) {
      int32_t *gc = (int32_t *)gpu_download(dc, (size_t)nvg * 16);
      VC_EXPECT(count_i32(gc, 4 * nvg, POISON_I32) == 0,
                "%s: coords not all written", label);
      const int64_t dd = first_diff_i32(cc, gc, 4 * nvg);
      VC_EXPECT(dd < 0, "%s: coords differ at %lld", label, (long long)dd);
      float *gf = (float *)gpu_download(df, (size_t)nvg * n_feat * 4);
      VC_EXPECT(vc_count_poison(gf, VOXCONV_DTYPE_F32, nvg * n_feat) == 0,
                "%s: features not all written", label);
      VC_EXPECT(memcmp(gf, fc, (size_t)nvg * n_feat * 4) == 0,
                "%s: features differ (bitwise)", label);
      int64_t *gpv = (int64_t *)gpu_download(dpv, (size_t)n * 8);
      VC_EXPECT(memcmp(gpv, pvc, (size_t)n * 8) == 0,
                "%s: point_voxel differs", label);
      free(gc);
      free(gf);
      free(gpv);
    }
  }
  voxconv_free(g_gpu, dp);
  voxconv_free(g_gpu, db);
  voxconv_free(g_gpu, dc);
  voxconv_free(g_gpu, df);
  voxconv_free(g_gpu, dpv);
  free(cc);
  free(fc);
  free(pvc);
}

static void voxelize_cases(const float *pts, int64_t n, int fields) {
  voxconv_voxelize_desc_t d;
  memset(&d, 0, sizeof d);
  for (int a = 0; a < 3; a++)
    d.voxel_size[a] = 0.05f;
  d.reduce = VOXCONV_REDUCE_FIRST;
  voxelize_case("voxelize first, unbounded", pts, n, fields, NULL, &d, fields);
  d.reduce = VOXCONV_REDUCE_MEAN;
  voxelize_case("voxelize mean, unbounded", pts, n, fields, NULL, &d, fields);
  d.origin[0] = -20;
  d.origin[1] = -15;
  d.origin[2] = -2;
  d.grid_size[0] = 600;
  d.grid_size[1] = 500;
  d.grid_size[2] = 60;
  d.voxel_size[2] = 0.1f;
  int32_t *batch = (int32_t *)xmalloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++)
    batch[i] = (int32_t)vc_rand_range(0, 3);
  voxelize_case("voxelize mean, grid, batches", pts, n, fields, batch, &d, 3);
  d.reduce = VOXCONV_REDUCE_FIRST;
  voxelize_case("voxelize first, grid, batches", pts, n, fields, batch, &d, 2);
  voxelize_case("voxelize coords only", pts, n, fields, batch, &d, 0);
  /* Errors: a bad batch, non-finite points, an index beyond the limits. */
  batch[n / 3] = 1024;
  batch[n / 2] = -1;
  voxelize_case("voxelize bad batch", pts, n, fields, batch, &d, 3);
  float *bad = (float *)xmalloc((size_t)n * fields * 4);
  memcpy(bad, pts, (size_t)n * fields * 4);
  bad[(n / 4) * fields + 1] = NAN;
  bad[(n / 2) * fields + 0] = INFINITY;
  voxelize_case("voxelize NaN", bad, n, fields, NULL, &d, 3);
  memcpy(bad, pts, (size_t)n * fields * 4);
  voxconv_voxelize_desc_t tiny = d;
  memset(tiny.grid_size, 0, sizeof tiny.grid_size);
  for (int a = 0; a < 3; a++)
    tiny.voxel_size[a] = 1e-4f; /* indices far beyond ±131071 */
  voxelize_case("voxelize index range", bad, n, fields, NULL, &tiny, 3);
  free(bad);
  free(batch);
}

/* ---- merge_duplicates ----------------------------------------------------- */
static void merge_case(const char *label, const int32_t *c, int64_t n) {
  voxconv_coords_t ci = {c, n, {1, 1, 1}};
  int32_t *oc = (int32_t *)xmalloc((size_t)n * 16);
  int64_t *rc = (int64_t *)xmalloc((size_t)n * 8);
  int64_t uc = -1, ug = -1;
  const voxconv_status_t sc = voxconv_merge_duplicates(g_cpu, &ci, oc, &uc, rc);
  char cpu_msg[VC_ERROR_MAX];
  snprintf(cpu_msg, sizeof cpu_msg, "%s", voxconv_get_last_error(g_cpu));
  int32_t *din = (int32_t *)gpu_upload(c, (size_t)n * 16);
  int32_t *dout = gpu_poisoned_i32(4 * n);
  int64_t *drow = (int64_t *)gpu_poisoned_i32(2 * n);
  voxconv_coords_t gi = {din, n, {1, 1, 1}};
  const voxconv_status_t sg =
      voxconv_merge_duplicates(g_gpu, &gi, dout, &ug, drow);
  VC_EXPECT(sc == sg, "%s: cpu %s gpu %s (%s)", label,
            voxconv_status_string(sc), voxconv_status_string(sg),
            voxconv_get_last_error(g_gpu));
  if (sc != VOXCONV_STATUS_SUCCESS && sg != VOXCONV_STATUS_SUCCESS)
    VC_EXPECT(strcmp(cpu_msg, voxconv_get_last_error(g_gpu)) == 0,
              "%s: messages differ:\n  cpu: %s\n  gpu: %s", label, cpu_msg,
              voxconv_get_last_error(g_gpu));
  if (sc == VOXCONV_STATUS_SUCCESS && sg == VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(uc == ug, "%s: n_unique cpu %lld gpu %lld", label,
              (long long)uc, (long long)ug);
    if (uc == ug) {
      int32_t *go = (int32_t *)gpu_download(dout, (size_t)ug * 16);
      VC_EXPECT(first_diff_i32(oc, go, 4 * ug) < 0, "%s: unique coords differ",
                label);
      int64_t *gr = (int64_t *)gpu_download(drow, (size_t)n * 8);
      VC_EXPECT(memcmp(gr, rc, (size_t)n * 8) == 0, "%s: row_map differs",
                label);
      free(go);
      free(gr);
    }
  }
  /* In place (out_coords aliasing the input), as the API allows. */
  if (sc == VOXCONV_STATUS_SUCCESS) {
    int64_t u2 = -1;
    VC_EXPECT_STATUS(g_gpu,
                     voxconv_merge_duplicates(g_gpu, &gi, din, &u2, NULL),
                     VOXCONV_STATUS_SUCCESS);
    int32_t *go = (int32_t *)gpu_download(din, (size_t)u2 * 16);
    VC_EXPECT(u2 == uc && first_diff_i32(oc, go, 4 * uc) < 0,
              "%s: in-place merge differs", label);
    free(go);
  }
  voxconv_free(g_gpu, din);
  voxconv_free(g_gpu, dout);
  voxconv_free(g_gpu, drow);
  free(oc);
  free(rc);
}

static void merge_cases(void) {
  const int64_t n = g_quick ? 2000 : 60000;
  int32_t *c = (int32_t *)xmalloc((size_t)n * 16);
  for (int64_t i = 0; i < n; i++) {
    c[4 * i] = (int32_t)vc_rand_range(0, 2);
    for (int a = 1; a < 4; a++)
      c[4 * i + a] = (int32_t)vc_rand_range(-12, 12); /* many repeats */
  }
  merge_case("merge random", c, n);
  c[4 * (n / 3) + 2] = 131072;
  c[4 * (n / 2)] = 1024;
  merge_case("merge out of range", c, n);
  free(c);
}

/* ---- pooling --------------------------------------------------------------- */
static double tol_of(voxconv_dtype_t dt) {
  /* f32: sums of up to K terms with cancellation, measured against
   * |ref| + 0.01 rms(ref): ~2e-5 seen, 1e-4 allowed. */
  return dt == VOXCONV_DTYPE_F32 ? 1e-4 : dt == VOXCONV_DTYPE_F16 ? 4e-3 : 3e-2;
}

/* got (dtype, host) equal to want (dtype, host) bit for bit, NaN == NaN. */
static void expect_same(const char *label, const void *got, const void *want,
                        voxconv_dtype_t dt, int64_t n) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++) {
    const double a = vc_get(got, dt, i), b = vc_get(want, dt, i);
    if (!(a == b || (a != a && b != b)))
      bad = i;
  }
  VC_EXPECT(bad < 0, "%s: gpu %g != cpu %g at %lld of %lld", label,
            bad >= 0 ? vc_get(got, dt, bad) : 0.0,
            bad >= 0 ? vc_get(want, dt, bad) : 0.0, (long long)bad,
            (long long)n);
}

/* Runs one pooling op on CPU (dtype and f64) and GPU; compares. op: 0 pool
 * fwd, 1 pool bwd, 2 unpool fwd, 3 unpool bwd. */
static void pool_op(const char *label, int op, voxconv_pool_mode_t mode,
                    const voxconv_kmap_t *mc, const voxconv_kmap_t *mg,
                    voxconv_dtype_t dt, int64_t C) {
  const size_t es = voxconv_dtype_size(dt);
  /* Row counts: pool fwd x[n_in] -> y[n_out]; bwd dy[n_out] -> dx[n_in];
   * unpool fwd x[n_out] -> y[n_in]; bwd dy[n_in] -> dx[n_out]. */
  const int64_t n_src = (op == 0 || op == 3) ? mc->n_in : mc->n_out;
  const int64_t n_dst = (op == 0 || op == 3) ? mc->n_out : mc->n_in;
  const int64_t ns = n_src * C, nd = n_dst * C;
  const int64_t nx = mc->n_in * C, ny = mc->n_out * C;
  void *src = xmalloc((size_t)ns * es), *dst_c = xmalloc((size_t)nd * es);
  double *src64 = (double *)xmalloc((size_t)ns * 8);
  double *dst64 = (double *)xmalloc((size_t)nd * 8);
  vc_fill_normal(src, dt, ns);
  /* MAX ties and NaN: repeat values inside pooling windows, add NaNs. */
  if (mode == VOXCONV_POOL_MAX && op <= 1) {
    for (int64_t i = 0; i < ns / 7; i++) {
      const int64_t a = vc_rand_range(0, ns - 1), b = vc_rand_range(0, ns - 1);
      memcpy((char *)src + a * es, (char *)src + b * es, es);
    }
    double nanv = NAN;
    for (int64_t i = 0; i < 3 && ns > 0; i++)
      vc_store_f64((char *)src + vc_rand_range(0, ns - 1) * es, dt, 1, &nanv);
  }
  vc_load_f64(src, dt, ns, src64);
  /* MAX backward also needs x and y of the forward. */
  void *x = NULL, *y = NULL;
  double *x64 = NULL, *y64 = NULL;
  if (op == 1 && mode == VOXCONV_POOL_MAX) {
    x = xmalloc((size_t)nx * es);
    y = xmalloc((size_t)ny * es);
    x64 = (double *)xmalloc((size_t)nx * 8);
    y64 = (double *)xmalloc((size_t)ny * 8);
    vc_fill_normal(x, dt, nx);
    for (int64_t i = 0; i < nx / 5; i++) { /* ties */
      const int64_t a = vc_rand_range(0, nx - 1), b = vc_rand_range(0, nx - 1);
      memcpy((char *)x + a * es, (char *)x + b * es, es);
    }
    double nanv = NAN;
    if (nx > 0)
      vc_store_f64((char *)x + vc_rand_range(0, nx - 1) * es, dt, 1, &nanv);
    vc_load_f64(x, dt, nx, x64);
    voxconv_feats_t fx = {x, mc->n_in, C, dt}, fy = {y, mc->n_out, C, dt};
    REQUIRE_OK_VOID(g_cpu, voxconv_pool_forward(g_cpu, mc, mode, &fx, &fy));
    /* The f64 reference uses the rounded y so its winners agree. */
    vc_load_f64(y, dt, ny, y64);
  }
  voxconv_feats_t fs = {src, n_src, C, dt}, fd = {dst_c, n_dst, C, dt};
  voxconv_feats_t fs64 = {src64, n_src, C, VOXCONV_DTYPE_F64};
  voxconv_feats_t fd64 = {dst64, n_dst, C, VOXCONV_DTYPE_F64};
  voxconv_feats_t fx = {x, mc->n_in, C, dt}, fy = {y, mc->n_out, C, dt};
  voxconv_feats_t fx64 = {x64, mc->n_in, C, VOXCONV_DTYPE_F64};
  voxconv_feats_t fy64 = {y64, mc->n_out, C, VOXCONV_DTYPE_F64};
  voxconv_status_t s1 = VOXCONV_STATUS_SUCCESS, s2 = VOXCONV_STATUS_SUCCESS;
  switch (op) {
  case 0:
    s1 = voxconv_pool_forward(g_cpu, mc, mode, &fs, &fd);
    s2 = voxconv_pool_forward(g_cpu, mc, mode, &fs64, &fd64);
    break;
  case 1:
    s1 = voxconv_pool_backward(g_cpu, mc, mode, &fx, &fy, &fs, &fd);
    s2 = voxconv_pool_backward(g_cpu, mc, mode, &fx64, &fy64, &fs64, &fd64);
    break;
  case 2:
    s1 = voxconv_unpool_forward(g_cpu, mc, &fs, &fd);
    s2 = voxconv_unpool_forward(g_cpu, mc, &fs64, &fd64);
    break;
  default:
    s1 = voxconv_unpool_backward(g_cpu, mc, &fs, &fd);
    s2 = voxconv_unpool_backward(g_cpu, mc, &fs64, &fd64);
  }
  VC_EXPECT(s1 == VOXCONV_STATUS_SUCCESS && s2 == VOXCONV_STATUS_SUCCESS,
            "%s: CPU reference failed: %s", label,
            voxconv_get_last_error(g_cpu));

  void *dsrc = gpu_upload(src, (size_t)ns * es);
  void *ddst = gpu_alloc((size_t)nd * es + 1);
  void *pz = xmalloc((size_t)nd * es + 1);
  vc_poison(pz, dt, nd);
  voxconv_memcpy(g_gpu, ddst, pz, (size_t)nd * es, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  free(pz);
  void *dx_ = x ? gpu_upload(x, (size_t)nx * es) : NULL;
  void *dy_ = y ? gpu_upload(y, (size_t)ny * es) : NULL;
  voxconv_feats_t gs = {dsrc, n_src, C, dt}, gd = {ddst, n_dst, C, dt};
  voxconv_feats_t gx = {dx_, mc->n_in, C, dt}, gy = {dy_, mc->n_out, C, dt};
  voxconv_status_t sg;
  switch (op) {
  case 0: sg = voxconv_pool_forward(g_gpu, mg, mode, &gs, &gd); break;
  case 1:
    sg = voxconv_pool_backward(g_gpu, mg, mode, x ? &gx : NULL, y ? &gy : NULL,
                               &gs, &gd);
    break;
  case 2: sg = voxconv_unpool_forward(g_gpu, mg, &gs, &gd); break;
  default: sg = voxconv_unpool_backward(g_gpu, mg, &gs, &gd);
  }
  VC_EXPECT(sg == VOXCONV_STATUS_SUCCESS, "%s: gpu %s: %s", label,
            voxconv_status_string(sg), voxconv_get_last_error(g_gpu));
  if (sg == VOXCONV_STATUS_SUCCESS) {
    void *got = gpu_download(ddst, (size_t)nd * es);
    VC_EXPECT(vc_count_poison(got, dt, nd) == 0, "%s: %lld outputs not written",
              label, (long long)vc_count_poison(got, dt, nd));
    expect_same(label, got, dst_c, dt, nd);
    const vc_err_stats_t e = vc_compare(got, dt, dst64, nd, 1e-2);
    VC_EXPECT(e.max_rel <= tol_of(dt) && e.n_nonfinite_mismatch == 0,
              "%s: vs fp64 max_rel %.3g (tol %.1g) at %lld, nonfinite "
              "mismatches %lld",
              label, e.max_rel, tol_of(dt), (long long)e.worst_index,
              (long long)e.n_nonfinite_mismatch);
    free(got);
  }
  voxconv_free(g_gpu, dsrc);
  voxconv_free(g_gpu, ddst);
  voxconv_free(g_gpu, dx_);
  voxconv_free(g_gpu, dy_);
  free(src);
  free(dst_c);
  free(src64);
  free(dst64);
  free(x);
  free(y);
  free(x64);
  free(y64);
}

static void pool_cases(const int32_t *c, int64_t n) {
  static const int geo[][2] = {{2, 2}, {3, 2}};
  static const voxconv_dtype_t dts[] = {VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16,
                                        VOXCONV_DTYPE_BF16};
  static const int64_t chans[] = {1, 3, 16, 33};
  static const char *const mode_names[] = {"max", "avg", "sum"};
  static const char *const op_names[] = {"pool fwd", "pool bwd", "unpool fwd",
                                         "unpool bwd"};
  int32_t *dc = (int32_t *)gpu_upload(c, (size_t)n * 16);
  for (int g = 0; g < 2; g++) {
    voxconv_kmap_desc_t d =
        make_desc(VOXCONV_KMAP_STRIDED, geo[g][0], geo[g][0], geo[g][0],
                  geo[g][1], 1);
    voxconv_coords_t ci = {c, n, {1, 1, 1}}, gi = {dc, n, {1, 1, 1}};
    voxconv_kmap_t *mc = NULL, *mg = NULL;
    REQUIRE_OK_VOID(g_cpu, voxconv_kmap_build(g_cpu, &d, &ci, NULL, &mc));
    REQUIRE_OK_VOID(g_gpu, vc_test_kmap_build(g_gpu, &d, &gi, NULL, &mg));
    for (int t = 0; t < 3; t++)
      for (int ci_ = 0; ci_ < 4; ci_++) {
        if (g_quick && ci_ != 1)
          continue;
        for (int op = 0; op < 4; op++)
          for (int mode = 0; mode < 3; mode++) {
            if (op >= 2 && mode > 0)
              continue; /* unpooling has no mode */
            char label[160];
            snprintf(label, sizeof label, "k%d s%d %s %s %s C=%lld", geo[g][0],
                     geo[g][1], op_names[op], op < 2 ? mode_names[mode] : "",
                     voxconv_dtype_name(dts[t]), (long long)chans[ci_]);
            pool_op(label, op, (voxconv_pool_mode_t)mode, mc, mg, dts[t],
                    chans[ci_]);
          }
      }
    voxconv_kmap_destroy(g_cpu, mc);
    voxconv_kmap_destroy(g_gpu, mg);
  }
  voxconv_free(g_gpu, dc);
}

/* ---- runtime: out of memory is a status, and the handle stays usable ----- */
static void runtime_cases(void) {
  void *p = NULL;
  VC_EXPECT_STATUS(g_gpu, voxconv_malloc(g_gpu, (size_t)1 << 50, &p),
                   VOXCONV_STATUS_ALLOC_FAILED);
  VC_EXPECT(p == NULL, "failed allocation returned %p", p);
  VC_EXPECT(strstr(voxconv_get_last_error(g_gpu), "1125899906842624") != NULL,
            "OOM message does not name the size: %s",
            voxconv_get_last_error(g_gpu));
  int32_t host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8] = {0};
  int32_t *d = (int32_t *)gpu_upload(host, sizeof host);
  VC_EXPECT_STATUS(g_gpu, voxconv_memcpy(g_gpu, back, d, sizeof back,
                                         VOXCONV_MEMCPY_BACKEND_TO_HOST),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(memcmp(host, back, sizeof host) == 0, "round trip after OOM");
  voxconv_free(g_gpu, d);
  voxconv_device_info_t info;
  VC_EXPECT_STATUS(NULL, voxconv_device_get_info(0, &info),
                   VOXCONV_STATUS_SUCCESS);
  printf("device 0: %s, cc %d.%d, %d SMs, %.1f GiB\n", info.name,
         info.cc_major, info.cc_minor, info.sm_count,
         (double)info.total_memory / (1u << 30));
  VC_EXPECT_STATUS(NULL, voxconv_device_get_info(99, &info),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
}

/* ---- workload D timing ------------------------------------------------------ */
static void bench_workload_d(void) {
  int64_t n = 0;
  int32_t *c = vc_workload_a_coords(&n);
  if (!c) {
    printf("bench: workload A input missing (%s); skipped\n",
           vc_data_path("bench/spconv_benchmark_pc.xyz.f32.bin"));
    return;
  }
  printf("bench: workload D: level-0 submanifold 3x3x3 map of workload A, "
         "%lld voxels\n",
         (long long)n);
  int32_t *dc = (int32_t *)gpu_upload(c, (size_t)n * 16);
  const voxconv_kmap_desc_t d = make_desc(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1);
  voxconv_coords_t gi = {dc, n, {1, 1, 1}};
  enum { WARM = 5, RUNS = 30 };
  double t[RUNS];
  int64_t pairs = 0;
  for (int r = 0; r < WARM + RUNS; r++) {
    voxconv_kmap_t *m = NULL;
    voxconv_synchronize(g_gpu);
    const double t0 = now_ms();
    const voxconv_status_t st = vc_test_kmap_build(g_gpu, &d, &gi, NULL, &m);
    voxconv_synchronize(g_gpu); /* the asynchronous tail of the build */
    const double t1 = now_ms();
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "bench build: %s",
              voxconv_get_last_error(g_gpu));
    if (r >= WARM)
      t[r - WARM] = t1 - t0;
    if (m)
      pairs = m->n_pairs;
    voxconv_kmap_destroy(g_gpu, m);
  }
  qsort(t, RUNS, sizeof t[0], cmp_double);
  printf("bench: GPU kmap build (wall clock, build + final sync): median "
         "%.3f ms, min %.3f ms, max %.3f ms over %d runs; %lld pairs\n",
         t[RUNS / 2], t[0], t[RUNS - 1], RUNS, (long long)pairs);
  /* The same stretched to 4 batches (3.66 M voxels) for scaling. */
  int32_t *c4 = (int32_t *)xmalloc((size_t)n * 64);
  for (int b = 0; b < 4; b++)
    for (int64_t i = 0; i < n; i++) {
      memcpy(c4 + 4 * (b * n + i), c + 4 * i, 16);
      c4[4 * (b * n + i)] = b;
    }
  int32_t *dc4 = (int32_t *)gpu_upload(c4, (size_t)n * 64);
  voxconv_coords_t g4 = {dc4, 4 * n, {1, 1, 1}};
  for (int r = 0; r < 3 + 10; r++) {
    voxconv_kmap_t *m = NULL;
    voxconv_synchronize(g_gpu);
    const double t0 = now_ms();
    vc_test_kmap_build(g_gpu, &d, &g4, NULL, &m);
    voxconv_synchronize(g_gpu);
    if (r >= 3)
      t[r - 3] = now_ms() - t0;
    voxconv_kmap_destroy(g_gpu, m);
  }
  qsort(t, 10, sizeof t[0], cmp_double);
  printf("bench: GPU kmap build, 4 batches (%lld voxels): median %.3f ms\n",
         (long long)(4 * n), t[5]);
  /* CPU for reference (this machine's cores). */
  voxconv_coords_t ci = {c, n, {1, 1, 1}};
  for (int r = 0; r < 3; r++) {
    voxconv_kmap_t *m = NULL;
    const double t0 = now_ms();
    voxconv_kmap_build(g_cpu, &d, &ci, NULL, &m);
    t[r] = now_ms() - t0;
    voxconv_kmap_destroy(g_cpu, m);
  }
  qsort(t, 3, sizeof t[0], cmp_double);
  printf("bench: CPU kmap build (%d threads): median %.3f ms\n",
         vc_cpu_count(), t[1]);
  voxconv_free(g_gpu, dc);
  voxconv_free(g_gpu, dc4);
  free(c4);
  free(c);
}

/* ---- main ------------------------------------------------------------------- */
static float *load_scan(const char *name, int fields, int64_t *n) {
  size_t bytes = 0;
  float *p = (float *)vc_read_file(vc_data_path(name), &bytes);
  *n = p ? (int64_t)(bytes / (4 * (size_t)fields)) : 0;
  return p;
}

/* The one-block build steps (src/cuda/cuda_kmap_small.cuh) against the
 * CPU at their limits, and the multi-block steps they replace on a small
 * set (a handle made with VOXCONV_KMAP_LEAN=0). The pair-count scan runs
 * in one block up to 65,536 counts (K x row tiles of 32, + 1): a k3
 * submanifold map of 77,664 rows has 27 x 2,427 + 1 = 65,530 (one block,
 * four chunks), one of 77,665 rows 65,557 (CUB). */
static void small_step_cases(const voxconv_handle_desc_t *dg) {
  const int64_t sizes[2] = {77664, 77665};
  int64_t n_all = 0;
  int32_t *c = vc_random_coords(110000, 40, &n_all);
  shuffle_rows(c, n_all);
  const voxconv_kmap_desc_t d = make_desc(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1);
  for (int i = 0; i < (g_quick ? 1 : 2); i++) {
    VC_EXPECT(n_all >= sizes[i], "only %lld random rows", (long long)n_all);
    const int64_t n = n_all < sizes[i] ? n_all : sizes[i];
    char label[96];
    snprintf(label, sizeof label, "one-block scan limit n=%lld", (long long)n);
    run_case(label, &d, c, n, 1, NULL, 0, 0, g_gpu, 0, 0);
  }
  /* A kernel = stride build hashes its input only on a duplicate from
   * 65,536 rows, up front below: on both sides, a row twice and then three
   * times (the lowest later row is named whichever copy wrote the table
   * first), synchronous and deferred, the CPU's verdict and words. */
  const voxconv_kmap_desc_t dst = make_desc(VOXCONV_KMAP_STRIDED, 2, 2, 2, 2, 1);
  int32_t *bad = (int32_t *)xmalloc((size_t)65536 * 16);
  for (int64_t n = 65535; n <= 65536 && n <= n_all; n++) {
    memcpy(bad, c, (size_t)n * 16);
    memcpy(bad + 4 * (n - 7), bad + 4 * (n / 3), 16);
    char label[96];
    snprintf(label, sizeof label, "duplicate (strided, n=%lld)", (long long)n);
    run_case(label, &dst, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);
    deferred_error_case(label, &dst, bad, n);
    memcpy(bad + 4 * (n / 2), bad + 4 * (n / 3), 16);
    snprintf(label, sizeof label, "duplicate x3 (strided, n=%lld)", (long long)n);
    run_case(label, &dst, bad, n, 1, NULL, 0, 0, g_gpu, 0, 0);
    deferred_error_case(label, &dst, bad, n);
  }
  free(bad);
  free(c);
  setenv("VOXCONV_KMAP_LEAN", "0", 1);
  voxconv_handle_t *multi = NULL;
  const voxconv_status_t st = voxconv_create(&multi, dg);
  unsetenv("VOXCONV_KMAP_LEAN");
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "handle with VOXCONV_KMAP_LEAN=0: %s",
            voxconv_status_string(st));
  if (st != VOXCONV_STATUS_SUCCESS)
    return;
  int64_t n = 0;
  int32_t *s = vc_random_coords(g_quick ? 300 : 2000, 8, &n);
  shuffle_rows(s, n);
  all_modes("multi-block steps", s, n, multi, 0, 0);
  /* The up-front input hash of a kernel = stride build (here at every
   * size) finds the same duplicate as the table writes. */
  memcpy(s + 4 * (n / 2), s + 4 * 3, 16);
  run_case("duplicate (strided, input hashed up front)", &dst, s, n, 1, NULL, 0,
           0, multi, 0, 0);
  free(s);
  voxconv_destroy(multi);
}

int main(int argc, char **argv) {
  int bench = 0, bench_only = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      g_quick = 1;
    else if (strcmp(argv[i], "--bench") == 0)
      bench = 1;
    else if (strcmp(argv[i], "--bench-only") == 0)
      bench = bench_only = 1;
  }
  vc_test_init("test_cuda_kmap");
  int devices = 0;
  if (voxconv_device_count(&devices) != VOXCONV_STATUS_SUCCESS || devices == 0) {
    printf("test_cuda_kmap: SKIPPED: no CUDA device (voxconv_has_cuda()=%d, "
           "voxconv_device_count=%d)\n",
           voxconv_has_cuda(), devices);
    return VC_TEST_SKIP;
  }
  voxconv_handle_desc_t dc = {0}, dg = {0};
  dc.backend = VOXCONV_BACKEND_CPU;
  dg.backend = VOXCONV_BACKEND_CUDA;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_cpu, &dc));
  VC_REQUIRE_OK(NULL, voxconv_create(&g_gpu, &dg));
  /* A second GPU handle whose hash tables start tiny (overflow + retry). */
  setenv("VOXCONV_CUDA_HASH_TINY", "1", 1);
  voxconv_handle_t *g_tiny = NULL;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_tiny, &dg));
  unsetenv("VOXCONV_CUDA_HASH_TINY");
  if (bench_only) {
    bench_workload_d();
    voxconv_destroy(g_tiny);
    voxconv_destroy(g_gpu);
    voxconv_destroy(g_cpu);
    return vc_test_finish();
  }

  runtime_cases();

  /* Random sets, rows shuffled (maps must not depend on sorted input). */
  static const struct {
    int64_t n;
    int extent;
  } sets[] = {{0, 5}, {1, 5}, {37, 3}, {700, 6}, {5000, 12}, {40000, 60}};
  const int n_sets = g_quick ? 5 : 6;
  for (int s = 0; s < n_sets; s++) {
    int64_t n = 0;
    int32_t *c = vc_random_coords(sets[s].n, sets[s].extent, &n);
    shuffle_rows(c, n);
    char name[64];
    snprintf(name, sizeof name, "random n=%lld e=%d", (long long)n,
             sets[s].extent);
    all_modes(name, c, n, g_gpu, 0, s == 3);
    free(c);
  }
  {
    int64_t n = 0;
    int32_t *c = vc_random_coords(g_quick ? 300 : 3000, 8, &n);
    shuffle_rows(c, n);
    all_modes("tiny-hash", c, n, g_tiny, n > VC_HASH_TINY_SLOTS_TEST, 0);
    free(c);
  }
  {
    /* Every mode again in MinkowskiEngine's offset order (x fastest): the
     * anisotropic kernels and the direct strided tables are where an order
     * mix-up shows. */
    int64_t n = 0;
    int32_t *c = vc_random_coords(g_quick ? 700 : 5000, 12, &n);
    shuffle_rows(c, n);
    g_order = VOXCONV_OFFSET_ORDER_X_FASTEST;
    all_modes("x-fastest", c, n, g_gpu, 0, 0);
    g_order = VOXCONV_OFFSET_ORDER_X_SLOWEST;
    free(c);
  }
  edge_cases(g_gpu);
  small_step_cases(&dg);
  error_cases();
  spconv_error_cases();
  expanding_key_set_cases(g_tiny);
  merge_cases();

  /* Recorded scans: SemanticKITTI (and KITTI as batch 1) at 5 cm. */
  int64_t np = 0, np2 = 0;
  float *pts = load_scan("scans/semantickitti_00_000000.bin", 4, &np);
  float *pts2 = load_scan("scans/kitti_000000.bin", 4, &np2);
  if (!pts || !pts2) {
    printf("test_cuda_kmap: scans missing under %s: scan cases skipped\n",
           vc_data_path("scans"));
    VC_EXPECT(0, "recorded scans missing (set VOXCONV_DATA_DIR)");
  } else {
    if (g_quick)
      np = np > 8000 ? 8000 : np;
    int64_t nv = 0, nv2 = 0;
    int32_t *v = vc_voxels_from_points(pts, np, 4, 0.05f, &nv);
    int32_t *v2 = vc_voxels_from_points(pts2, g_quick ? 4000 : np2, 4, 0.05f,
                                        &nv2);
    printf("semantickitti: %lld points -> %lld voxels at 5 cm\n",
           (long long)np, (long long)nv);
    int32_t *both = (int32_t *)xmalloc((size_t)(nv + nv2) * 16);
    memcpy(both, v, (size_t)nv * 16);
    for (int64_t i = 0; i < nv2; i++) {
      memcpy(both + 4 * (nv + i), v2 + 4 * i, 16);
      both[4 * (nv + i)] = 1;
    }
    shuffle_rows(both, nv + nv2);
    all_modes("scan", v, nv, g_gpu, 0, 0);
    all_modes("scan batch2 shuffled", both, nv + nv2, g_gpu, 0, 0);
    voxelize_cases(pts, np, 4);
    pool_cases(v, nv);
    free(v);
    free(v2);
    free(both);
  }
  free(pts);
  free(pts2);

  if (bench)
    bench_workload_d();
  voxconv_destroy(g_tiny);
  voxconv_destroy(g_gpu);
  voxconv_destroy(g_cpu);
  return vc_test_finish();
}
