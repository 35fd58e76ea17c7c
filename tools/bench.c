/* `voxconv bench` (see bench.h and vt_bench_usage).
 *
 * Everything goes through the public API: memory through voxconv_malloc /
 * voxconv_memcpy, so one code path serves the CPU and CUDA backends. Timing
 * uses CUDA events on CUDA (voxconv_timer_*), the monotonic clock on the
 * CPU; every per-layer row is a run of its own op between syncs, and the
 * forward/backward totals are measured separately end to end with one
 * synchronisation at the end, so the per-layer syncs do not inflate them.
 * On CUDA the end-to-end forward builds the kernel maps on side handles
 * and streams (--maps overlap, the default): the submanifold maps on one,
 * the pooled levels' strided maps, queued without waiting for their output
 * counts, on another, so that the host waits for a count only once the
 * level's convolutions are queued; on the convolutions' stream those
 * waits would drain their queue at every level. */
#include "bench.h"
#include "bench_state.h"

#include "scan_io.h"
#include "synth_scene.h"
#include "tool_common.h"
#include "tool_options.h"

#include <float.h>
#include <stdarg.h>
#include <strings.h>
#include <unistd.h>

/* BENCHMARKS.md workload A: the channels of the 7 levels. */
static const int64_t k_level_channels[NET_LEVELS] = {64,  96,  128, 160,
                                                     192, 224, 256};
static const int64_t k_input_channels = 3;
static const int64_t k_workload_a_voxels = 913903;
static const int64_t k_workload_a_pairs = 7676993;
static const int64_t k_workload_b_voxels = 125562;

/* ---- options ----------------------------------------------------------- */

/* The command being run: "bench", or "tune", which hands its options to
 * bench; messages name what the user typed. */
static const char *g_cmd = "bench";

int vt_bench_algo_known(const char *cmd, const char *option, const char *spec) {
  return vt_bench_algo_check(stderr, cmd, option, spec);
}


/* A failed library call, with the message the library kept on the handle
 * it was made through (h; NULL: the calling thread's, as for create). */
static int lib_fail_on(const voxconv_handle_t *h, const char *what,
                       voxconv_status_t st) {
  fprintf(stderr, "voxconv bench: %s failed: %s: %s\n", what,
          voxconv_status_string(st), voxconv_get_last_error(h));
  return VT_EXIT_FAIL;
}

static int lib_fail(bench_t *B, const char *what, voxconv_status_t st) {
  return lib_fail_on(B ? B->h : NULL, what, st);
}

/* TRY: a call through B->h; TRY_ON: through another handle h (the map
 * handle), whose message is the one to print. */
#define TRY_ON(h, what, call)                                                  \
  do {                                                                         \
    const voxconv_status_t st_ = (call);                                       \
    if (st_ != VOXCONV_STATUS_SUCCESS)                                         \
      return lib_fail_on((h), (what), st_);                                    \
  } while (0)
#define TRY(B, what, call) TRY_ON((B)->h, what, call)

/* Timing follows BENCHMARKS.md: CUDA events on the handle's stream (the
 * library's voxconv_timer_*), the monotonic clock on the CPU. The timer in
 * flight lives in *slot so that bench_cleanup frees it if a call between
 * start and stop fails. */
static int clock_start(bench_t *B, voxconv_timer_t **slot) {
  TRY(B, "voxconv_timer_start", voxconv_timer_start(B->h, slot));
  return 0;
}

static int clock_stop(bench_t *B, voxconv_timer_t **slot, double *ms) {
  voxconv_timer_t *t = *slot;
  *slot = NULL;
  TRY(B, "voxconv_timer_stop", voxconv_timer_stop(B->h, t, ms));
  return 0;
}

static void progress(const bench_t *B, const char *fmt, ...) {
  if (B->o.quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[bench] ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  va_end(ap);
}

/* Convolutions this process tuned (for `voxconv tune`, which must not
 * count what other processes wrote to the cache meanwhile). */
static int g_tuned_calls;

int vt_bench_tuned_count(void) {
  return g_tuned_calls;
}

/* After an op: did it run the autotuner (its choice was not read from the
 * tuning cache)? Counted, and flags a warm-up that tuned. Only
 * convolutions leave a call record: after a map or pooling op the record
 * would be the last convolution's again. */
static void note_tuning(bench_t *B, const char *what) {
  if (strncmp(what, "voxconv_conv_", 13) != 0 &&
      strncmp(what, "voxconv_depthwise_", 18) != 0)
    return;
  voxconv_call_info_t ci;
  if (voxconv_get_last_call_info(B->h, &ci) == VOXCONV_STATUS_SUCCESS &&
      !ci.from_cache && ci.time_ms >= 0) {
    g_tuned_calls++;
    if (B->warming)
      B->tuned = 1;
  }
}

/* After a warm-up in which the autotuner ran (CUDA only). Why: tuning
 * times every candidate back to back for seconds, and on an H200 that
 * holds the board at its power limit; the power controller then keeps the
 * SM clock down (nvidia-smi: clocks_event_reasons 0x4, SW power cap) for
 * about a second after the load ends, so runs timed right away measured
 * 3-8% slower than the same kernels read from the cache
 * (bench/results/h200_2026-11-21_s13.md). The rest puts a tuning run's
 * timed runs in the state a cached run starts from. */
static void settle_after_tuning(bench_t *B) {
  if (!B->tuned || B->settle_ms <= 0)
    return;
  B->tuned = 0;
  progress(B, "the autotuner ran in this warm-up: idle %d ms before timing "
              "(--settle-ms)", B->settle_ms);
  struct timespec ts = {B->settle_ms / 1000,
                        (long)(B->settle_ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* --pass-idle-ms (workload C, CUDA): the GPU idles before each pass, so
 * each row starts from the power state an idle GPU has, whatever ran
 * before it (torch_bench idles as long before each of its PyTorch rows).
 * The host thread spins meanwhile, as a training loop's never sleeps
 * (a sleeping host came back slow, docs/perf-notes.md item 71). */
static void pass_idle(bench_t *B) {
  if (B->backend != VOXCONV_BACKEND_CUDA || B->o.pass_idle_ms <= 0)
    return;
  const double end = vt_now_ms() + (double)B->o.pass_idle_ms;
  while (vt_now_ms() < end) {
  }
}

/* Backend buffer, recorded so that cleanup frees everything. */
static int balloc(bench_t *B, size_t bytes, void **ptr, const char *what) {
  *ptr = NULL;
  if (B->n_allocs == MAX_ALLOCS) {
    fprintf(stderr, "voxconv bench: too many buffers (%s)\n", what);
    return VT_EXIT_FAIL;
  }
  const voxconv_status_t st =
      voxconv_malloc(B->h, bytes ? bytes : 1, ptr);
  if (st != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr,
            "voxconv bench: cannot allocate %.1f MiB for %s (%.1f MiB held "
            "already): %s: %s\n",
            (double)bytes / 1048576.0, what,
            (double)B->bytes_allocated / 1048576.0,
            voxconv_status_string(st), voxconv_get_last_error(B->h));
    return VT_EXIT_FAIL;
  }
  B->allocs[B->n_allocs++] = *ptr;
  B->bytes_allocated += bytes;
  return 0;
}

static void bfree_all(bench_t *B) {
  for (int i = B->n_allocs - 1; i >= 0; i--)
    voxconv_free(B->h, B->allocs[i]);
  B->n_allocs = 0;
  B->bytes_allocated = 0;
}

/* src as the bench dtype into dst (host); the int8 quantisation's scale
 * (vt_quantize_i8), 1 for the float dtypes. */
static float to_bench_dtype(const bench_t *B, const float *src, void *dst,
                            int64_t n) {
  if (B->dtype == VOXCONV_DTYPE_I8)
    return vt_quantize_i8(src, (int8_t *)dst, n);
  vt_convert_from_f32(src, dst, B->dtype, n);
  return 1.0f;
}

/* The int8 weights [kvol][cin][cout] in src reordered into dst as
 * [kvol][cout][cin]: VOXCONV_INT8_WEIGHTS_KOI, which the CUDA int8 conv
 * reads without a per-call copy (as a deployment stores them). */
static void to_koi(const int8_t *src, int8_t *dst, int64_t n, int64_t cin,
                   int64_t cout) {
  const int64_t kvol = n / (cin * cout);
  for (int64_t k = 0; k < kvol; k++)
    for (int64_t ci = 0; ci < cin; ci++)
      for (int64_t co = 0; co < cout; co++)
        dst[(k * cout + co) * cin + ci] = src[(k * cin + ci) * cout + co];
}

/* Uploads n random values, uniform in [-scale, scale), as the bench dtype;
 * *qscale (may be NULL) gets the int8 scale. cin > 0: weights [n / (cin *
 * cout)][cin][cout], which --dtype i8 uploads in the KOI layout (to_koi):
 * the same values, so the same outputs. */
static int upload_values(bench_t *B, void *dst, int64_t n, double scale,
                         vt_rng_t *rng, float *qscale, int64_t cin,
                         int64_t cout) {
  float *tmp = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  void *conv = malloc((size_t)(n > 0 ? n : 1) * B->esize);
  if (!tmp || !conv) {
    free(tmp);
    free(conv);
    fprintf(stderr, "voxconv bench: out of host memory\n");
    return VT_EXIT_FAIL;
  }
  for (int64_t i = 0; i < n; i++)
    tmp[i] = (float)((2.0 * vt_rng_uniform(rng) - 1.0) * scale);
  const float q = to_bench_dtype(B, tmp, conv, n);
  if (qscale)
    *qscale = q;
  if (cin > 0 && B->dtype == VOXCONV_DTYPE_I8) {
    /* tmp (n floats) has room for the n reordered bytes */
    to_koi((const int8_t *)conv, (int8_t *)tmp, n, cin, cout);
    memcpy(conv, tmp, (size_t)n);
  }
  const voxconv_status_t st = voxconv_memcpy(
      B->h, dst, conv, (size_t)n * B->esize, VOXCONV_MEMCPY_HOST_TO_BACKEND);
  free(tmp);
  free(conv);
  TRY(B, "voxconv_memcpy (upload)", st);
  return 0;
}

static int upload_random(bench_t *B, void *dst, int64_t n, double scale,
                         vt_rng_t *rng, float *qscale) {
  return upload_values(B, dst, n, scale, rng, qscale, 0, 0);
}

static row_t *add_row(bench_t *B, const char *name, const char *op, int phase,
                      int64_t n_in, int64_t n_out, int64_t cin, int64_t cout,
                      int64_t pairs) {
  if (B->n_rows == MAX_ROWS)
    return NULL;
  row_t *r = &B->rows[B->n_rows++];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->op, sizeof r->op, "%s", op);
  r->phase = phase;
  r->n_in = n_in, r->n_out = n_out, r->cin = cin, r->cout = cout;
  r->pairs = pairs;
  const double es = (double)B->esize;
  const int is_conv = strncmp(op, "conv", 4) == 0;
  const int is_kmap = strncmp(op, "kmap", 4) == 0;
  if (is_conv) {
    r->flops = 2.0 * (double)pairs * (double)cin * (double)cout;
    const double kvol = strstr(op, "pool") ? 8.0 : 27.0;
    r->bytes = es * ((double)n_in * (double)cin + (double)n_out * (double)cout +
                     kvol * (double)cin * (double)cout);
    if (strcmp(op, "conv_wgrad") == 0) /* dW accumulates in f32 */
      r->bytes += (4.0 - es) * kvol * (double)cin * (double)cout;
  } else if (is_kmap) {
    /* coordinates in and out, two int32 per pair */
    r->bytes = 16.0 * (double)(n_in + n_out) + 8.0 * (double)pairs;
  } else if (strcmp(op, "maxpool_fwd") == 0) {
    r->bytes = es * (double)cin * (double)(n_in + n_out);
  } else { /* maxpool_bwd: x, y, dy read, dx written */
    r->bytes = es * (double)cin * 2.0 * (double)(n_in + n_out);
  }
  r->ms = (double *)calloc((size_t)B->repeat, sizeof(double));
  return r->ms ? r : NULL;
}

/* Workload C's conv_fwd_bwd row: forward, dgrad and wgrad of one layer run
 * back to back, so three times the forward's useful FLOPs, and the three
 * passes' bytes. */
static row_t *add_fwd_bwd_row(bench_t *B, const char *name, int64_t n,
                              int64_t C, int64_t pairs) {
  row_t *r = add_row(B, name, "conv_fwd_bwd", 1, n, n, C, C, pairs);
  if (r) {
    r->flops *= 3.0;
    r->bytes = 3.0 * r->bytes +
               (4.0 - (double)B->esize) * 27.0 * (double)C * (double)C;
  }
  return r;
}

/* ---- input preparation -------------------------------------------------- */

/* Voxelizes host points [n][fields] on the backend; features are the first
 * three fields (x, y, z), the first point of each cell (workload A). */
static int voxelize_points(bench_t *B, const float *pts, int64_t n,
                           int32_t fields, const float origin[3], float voxel,
                           const int32_t grid[3]) {
  void *d_pts = NULL, *d_coords = NULL, *d_feats = NULL;
  int rc;
  if ((rc = balloc(B, (size_t)n * (size_t)fields * sizeof(float), &d_pts,
                   "points")) ||
      (rc = balloc(B, (size_t)n * 4 * sizeof(int32_t), &d_coords,
                   "voxel coordinates")) ||
      (rc = balloc(B, (size_t)n * 3 * sizeof(float), &d_feats,
                   "voxel features")))
    return rc;
  TRY(B, "voxconv_memcpy (points)",
      voxconv_memcpy(B->h, d_pts, pts, (size_t)n * (size_t)fields * 4,
                     VOXCONV_MEMCPY_HOST_TO_BACKEND));
  voxconv_voxelize_desc_t vd;
  memset(&vd, 0, sizeof vd);
  for (int a = 0; a < 3; a++) {
    vd.voxel_size[a] = voxel;
    vd.origin[a] = origin[a];
    vd.grid_size[a] = grid ? grid[a] : 0;
  }
  vd.reduce = VOXCONV_REDUCE_FIRST;
  voxconv_points_t vp = {(const float *)d_pts, n, fields, NULL};
  int64_t n_vox = 0;
  TRY(B, "voxconv_voxelize",
      voxconv_voxelize(B->h, &vd, &vp, 3, (int32_t *)d_coords,
                       (float *)d_feats, &n_vox, NULL));
  B->n_voxels = n_vox;
  B->coords = (int32_t *)d_coords;
  /* vd.batch 0 for every point; a grid bounds each axis to [0, grid) */
  B->has_in_bounds = grid && grid[0] > 0 && grid[1] > 0 && grid[2] > 0;
  for (int f = 0; f < 4 && B->has_in_bounds; f++) {
    B->in_bounds.lo[f] = 0;
    B->in_bounds.hi[f] = f == 0 ? 0 : grid[f - 1] - 1;
  }
  /* Features to the bench dtype through the host (the API converts no
   * dtypes; this is outside every timed region). */
  float *h_feats = (float *)malloc((size_t)(n_vox > 0 ? n_vox : 1) * 12);
  void *h_conv = malloc((size_t)(n_vox > 0 ? n_vox : 1) * 3 * B->esize);
  if (!h_feats || !h_conv) {
    free(h_feats);
    free(h_conv);
    fprintf(stderr, "voxconv bench: out of host memory\n");
    return VT_EXIT_FAIL;
  }
  voxconv_status_t st =
      voxconv_memcpy(B->h, h_feats, d_feats, (size_t)n_vox * 12,
                     VOXCONV_MEMCPY_BACKEND_TO_HOST);
  if (st == VOXCONV_STATUS_SUCCESS) {
    B->act_scale = to_bench_dtype(B, h_feats, h_conv, n_vox * 3);
    if (B->dtype == VOXCONV_DTYPE_F32) {
      B->feats = d_feats;
    } else if ((rc = balloc(B, (size_t)n_vox * 3 * B->esize, &B->feats,
                            "input features")) == 0) {
      st = voxconv_memcpy(B->h, B->feats, h_conv,
                          (size_t)n_vox * 3 * B->esize,
                          VOXCONV_MEMCPY_HOST_TO_BACKEND);
    }
  }
  free(h_feats);
  free(h_conv);
  if (rc)
    return rc;
  TRY(B, "voxconv_memcpy (features)", st);
  return 0;
}

/* Resolves a --scan argument: as given, else in DATA/scans/, else DATA/. */
static void resolve_data_file(const char *arg, const char *subdir, char *out,
                              size_t out_len) {
  snprintf(out, out_len, "%s", arg);
  if (access(out, R_OK) == 0 || strchr(arg, '/'))
    return;
  snprintf(out, out_len, "%s/%s/%s", vt_data_dir(), subdir, arg);
  if (access(out, R_OK) == 0)
    return;
  snprintf(out, out_len, "%s/%s", vt_data_dir(), arg);
  if (access(out, R_OK) == 0)
    return;
  snprintf(out, out_len, "%s", arg); /* the error names what was given */
}

static int prepare_synthetic(bench_t *B) {
  float *xyz = NULL;
  int64_t n = 0;
  char desc[512];
  if (vt_synth_scene(B->o.size, &xyz, &n, desc, sizeof desc)) {
    fprintf(stderr, "voxconv bench: out of memory generating the scene\n");
    return VT_EXIT_FAIL;
  }
  const float voxel = B->o.voxel > 0 ? (float)B->o.voxel : VT_SCENE_VOXEL;
  const float origin[3] = {VT_SCENE_ORIGIN_X, VT_SCENE_ORIGIN_Y,
                           VT_SCENE_ORIGIN_Z};
  /* The grid covers the scene box [-80,80) x [-80,80) x [-2,6) m. */
  const double cells = ceil(160.0 / voxel - 1e-6);
  if (cells > (double)VOXCONV_COORD_MAX) {
    free(xyz);
    fprintf(stderr,
            "voxconv bench: --voxel %g: the 160 m scene needs %.0f cells per "
            "axis, beyond the coordinate limit %d\n",
            (double)voxel, cells, VOXCONV_COORD_MAX);
    return VT_EXIT_USAGE;
  }
  const int32_t grid[3] = {(int32_t)cells, (int32_t)cells,
                           (int32_t)ceil(8.0 / voxel - 1e-6)};
  const int rc = voxelize_points(B, xyz, n, 3, origin, voxel, grid);
  free(xyz);
  if (rc)
    return rc;
  B->n_points = n;
  B->voxel_size = voxel;
  snprintf(B->input_kind, sizeof B->input_kind, "synthetic-%s",
           vt_scene_size_name(B->o.size));
  snprintf(B->input_desc, sizeof B->input_desc,
           "%s; voxel %g m%s, origin (-80,-80,-2), features x,y,z", desc,
           (double)voxel, B->o.voxel > 0 ? " (--voxel)" : " (workload A)");
  return 0;
}

/* x rounded up to two significant digits, for a suggested value that is
 * enough when printed. */
static double round_up_2(double x) {
  const double mag = pow(10.0, floor(log10(x)) - 1.0);
  return ceil(x / mag) * mag;
}

/* 1 if the scan's extent at this voxel size fits the coordinate limit;
 * otherwise says so with the CLI's option (the library's own message
 * would speak of grid_size, which the CLI does not expose). The voxel
 * index of a point is floor((p - min) / voxel), as voxconv_voxelize
 * computes it in float. */
static int scan_fits_grid(const bench_t *B, const float lo[3],
                          const float hi[3], float voxel) {
  for (int a = 0; a < 3; a++) {
    const double cells = floor((double)((hi[a] - lo[a]) / voxel));
    if (cells <= (double)VOXCONV_COORD_MAX)
      continue;
    const double extent = (double)hi[a] - (double)lo[a];
    fprintf(stderr,
            "voxconv %s: --voxel %g%s: the scan spans %.3f m along %c (%.3f "
            "to %.3f), %.0f cells, beyond the coordinate limit %d; use "
            "--voxel %g or larger\n",
            g_cmd, (double)voxel, B->o.voxel > 0 ? "" : " (the default)",
            extent, "xyz"[a], (double)lo[a], (double)hi[a], cells,
            VOXCONV_COORD_MAX, round_up_2(extent / (double)VOXCONV_COORD_MAX));
    return 0;
  }
  return 1;
}

static int prepare_scan(bench_t *B) {
  char path[4096];
  resolve_data_file(B->o.scan, "scans", path, sizeof path);
  vt_scan_t scan;
  char err[1024];
  if (vt_scan_read_file(path, B->o.fields, &scan, err, sizeof err)) {
    fprintf(stderr, "voxconv bench: %s\n", err);
    return VT_EXIT_FAIL;
  }
  if (scan.n == 0) {
    fprintf(stderr, "voxconv bench: %s has no finite points\n", path);
    vt_scan_free(&scan);
    return VT_EXIT_FAIL;
  }
  float lo[3] = {INFINITY, INFINITY, INFINITY};
  float hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int64_t i = 0; i < scan.n; i++)
    for (int a = 0; a < 3; a++) {
      const float v = scan.data[i * scan.fields + a];
      lo[a] = v < lo[a] ? v : lo[a];
      hi[a] = v > hi[a] ? v : hi[a];
    }
  const float voxel = B->o.voxel > 0 ? (float)B->o.voxel : 0.1f;
  if (!scan_fits_grid(B, lo, hi, voxel)) {
    vt_scan_free(&scan);
    return VT_EXIT_USAGE;
  }
  const int rc = voxelize_points(B, scan.data, scan.n, scan.fields, lo, voxel,
                                 NULL);
  if (rc == 0) {
    B->n_points = scan.n;
    B->voxel_size = voxel;
    snprintf(B->input_kind, sizeof B->input_kind, "scan");
    char extra[256] = "";
    if (scan.n_nonfinite)
      snprintf(extra, sizeof extra, ", %lld non-finite dropped",
               (long long)scan.n_nonfinite);
    snprintf(B->input_desc, sizeof B->input_desc,
             "scan %s (%s, %s; %lld points%s)%s%s; voxel %g m%s, origin = min "
             "corner (%.3f, %.3f, %.3f), features x,y,z",
             path, scan.format, scan.field_names, (long long)scan.n, extra,
             scan.note[0] ? "; " : "", scan.note, (double)voxel,
             B->o.voxel > 0 ? "" : " (default)", (double)lo[0], (double)lo[1],
             (double)lo[2]);
  }
  vt_scan_free(&scan);
  return rc;
}

static int prepare_workload_a(bench_t *B) {
  char path[4096];
  snprintf(path, sizeof path, "%s/bench/spconv_benchmark_pc.xyz.f32.bin",
           vt_data_dir());
  vt_scan_t pc;
  char err[1024];
  if (vt_scan_read_file(path, 3, &pc, err, sizeof err)) {
    fprintf(stderr, "voxconv bench: workload A input: %s\n", err);
    return VT_EXIT_FAIL;
  }
  /* BENCHMARKS.md: replicate 8x, copy i shifted +i m in y, keep
   * [-80,80) x [-80,80) x [-2,6). */
  float *pts = (float *)malloc((size_t)pc.n * 8 * 3 * sizeof(float));
  if (!pts) {
    vt_scan_free(&pc);
    fprintf(stderr, "voxconv bench: out of host memory\n");
    return VT_EXIT_FAIL;
  }
  int64_t n = 0;
  for (int c = 0; c < 8; c++)
    for (int64_t i = 0; i < pc.n; i++) {
      const float x = pc.data[3 * i], y = pc.data[3 * i + 1] + (float)c,
                  z = pc.data[3 * i + 2];
      if (x >= -80.f && x < 80.f && y >= -80.f && y < 80.f && z >= -2.f &&
          z < 6.f) {
        pts[3 * n] = x, pts[3 * n + 1] = y, pts[3 * n + 2] = z;
        n++;
      }
    }
  const int64_t n_src = pc.n;
  vt_scan_free(&pc);
  const float origin[3] = {-80.f, -80.f, -2.f};
  const int32_t grid[3] = {1600, 1600, 80};
  const int rc = voxelize_points(B, pts, n, 3, origin, 0.1f, grid);
  free(pts);
  if (rc)
    return rc;
  B->n_points = n;
  B->voxel_size = 0.1;
  snprintf(B->input_kind, sizeof B->input_kind, "workload-A");
  snprintf(B->input_desc, sizeof B->input_desc,
           "workload A (spconv-large): %s, %lld points x8 copies shifted +i m "
           "in y, cropped to [-80,80)x[-80,80)x[-2,6) m = %lld points; voxel "
           "0.1 m, grid 1600x1600x80, features x,y,z; %lld voxels (BENCHMARKS.md "
           "expects %lld)",
           path, (long long)n_src, (long long)n, (long long)B->n_voxels,
           (long long)k_workload_a_voxels);
  if (B->n_voxels != k_workload_a_voxels)
    fprintf(stderr,
            "voxconv bench: WARNING: workload A gave %lld voxels, "
            "BENCHMARKS.md expects %lld\n",
            (long long)B->n_voxels, (long long)k_workload_a_voxels);
  return 0;
}

static int prepare_workload_b(bench_t *B) {
  char cpath[4096], fpath[4096];
  snprintf(cpath, sizeof cpath, "%s/bench/spconv_basic.bzyx.i32.bin",
           vt_data_dir());
  snprintf(fpath, sizeof fpath, "%s/bench/spconv_basic.feat3.f32.bin",
           vt_data_dir());
  int32_t *bzyx = NULL;
  float *feat = NULL;
  size_t cbytes = 0, fbytes = 0;
  int rc = VT_EXIT_FAIL;
  FILE *f = fopen(cpath, "rb");
  FILE *g = fopen(fpath, "rb");
  if (!f || !g) {
    fprintf(stderr, "voxconv bench: workload B: cannot open %s: %s\n",
            !f ? cpath : fpath, strerror(errno));
    goto done;
  }
  fseek(f, 0, SEEK_END);
  fseek(g, 0, SEEK_END);
  cbytes = (size_t)ftell(f);
  fbytes = (size_t)ftell(g);
  rewind(f);
  rewind(g);
  if (cbytes % 16 || fbytes % 12 || cbytes / 16 != fbytes / 12) {
    fprintf(stderr,
            "voxconv bench: workload B: %s (%zu bytes) and %s (%zu bytes) do "
            "not hold the same number of int32x4 / float32x3 rows\n",
            cpath, cbytes, fpath, fbytes);
    goto done;
  }
  bzyx = (int32_t *)malloc(cbytes ? cbytes : 1);
  feat = (float *)malloc(fbytes ? fbytes : 1);
  if (!bzyx || !feat || fread(bzyx, 1, cbytes, f) != cbytes ||
      fread(feat, 1, fbytes, g) != fbytes) {
    fprintf(stderr, "voxconv bench: workload B: cannot read the inputs\n");
    goto done;
  }
  {
    const int64_t n = (int64_t)(cbytes / 16);
    /* spconv stores (b, z, y, x); voxconv wants (b, x, y, z). */
    for (int64_t i = 0; i < n; i++) {
      int32_t *r = bzyx + 4 * i;
      const int32_t z = r[1];
      r[1] = r[3];
      r[3] = z;
    }
    void *conv = malloc((size_t)n * 3 * B->esize + 1);
    if (!conv) {
      fprintf(stderr, "voxconv bench: out of host memory\n");
      goto done;
    }
    B->act_scale = to_bench_dtype(B, feat, conv, n * 3);
    void *dc = NULL, *dfe = NULL;
    if ((rc = balloc(B, cbytes, &dc, "coordinates")) ||
        (rc = balloc(B, (size_t)n * 3 * B->esize, &dfe, "features"))) {
      free(conv);
      goto done;
    }
    voxconv_status_t st = voxconv_memcpy(B->h, dc, bzyx, cbytes,
                                         VOXCONV_MEMCPY_HOST_TO_BACKEND);
    if (st == VOXCONV_STATUS_SUCCESS)
      st = voxconv_memcpy(B->h, dfe, conv, (size_t)n * 3 * B->esize,
                          VOXCONV_MEMCPY_HOST_TO_BACKEND);
    free(conv);
    if (st != VOXCONV_STATUS_SUCCESS) {
      rc = lib_fail(B, "voxconv_memcpy (workload B)", st);
      goto done;
    }
    B->coords = (int32_t *)dc;
    B->feats = dfe;
    B->n_voxels = n;
    B->n_points = 0;
    B->voxel_size = 0.1;
    snprintf(B->input_kind, sizeof B->input_kind, "workload-B");
    snprintf(B->input_desc, sizeof B->input_desc,
             "workload B (spconv-basic): %s (b,z,y,x reordered to b,x,y,z) + "
             "%s; %lld voxels (BENCHMARKS.md expects %lld)",
             cpath, fpath, (long long)n, (long long)k_workload_b_voxels);
    rc = 0;
  }
done:
  if (f)
    fclose(f);
  if (g)
    fclose(g);
  free(bzyx);
  free(feat);
  return rc;
}

/* ---- the network -------------------------------------------------------- */

static voxconv_kmap_desc_t subm3_desc(void) {
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = VOXCONV_KMAP_SUBMANIFOLD;
  for (int a = 0; a < 3; a++)
    d.kernel_size[a] = 3, d.stride[a] = 1, d.dilation[a] = 1;
  return d;
}

static voxconv_kmap_desc_t pool2_desc(void) {
  voxconv_kmap_desc_t d;
  memset(&d, 0, sizeof d);
  d.mode = VOXCONV_KMAP_STRIDED;
  for (int a = 0; a < 3; a++)
    d.kernel_size[a] = 2, d.stride[a] = 2, d.dilation[a] = 1;
  return d;
}

static voxconv_coords_t level_coords(const int32_t *data, int64_t n,
                                     int level) {
  voxconv_coords_t c;
  memset(&c, 0, sizeof c);
  c.data = data;
  c.n = n;
  for (int a = 0; a < 3; a++)
    c.tensor_stride[a] = 1 << level;
  return c;
}

static voxconv_feats_t feats_of(const bench_t *B, void *data, int64_t rows,
                                int64_t channels) {
  voxconv_feats_t f = {data, rows, channels, B->dtype};
  return f;
}

static voxconv_weights_t weights_of(const bench_t *B, void *data,
                                    int64_t cin, int64_t cout) {
  voxconv_weights_t w = {data, 27, cin, cout, B->dtype};
  return w;
}

static void release_maps(bench_t *B) {
  for (int l = 0; l < NET_LEVELS; l++) {
    if (B->lv[l].subm)
      voxconv_kmap_destroy(B->h, B->lv[l].subm);
    if (B->lv[l].pool)
      voxconv_kmap_destroy(B->h, B->lv[l].pool);
    B->lv[l].subm = B->lv[l].pool = NULL;
  }
}

/* An on-by-default switch: off when the variable reads 0, false, off or
 * no (any case), the words the Python package's switches take. */
static int env_on(const char *name) {
  const char *v = getenv(name);
  static const char *const off[] = {"0", "false", "off", "no"};
  for (size_t i = 0; v && i < sizeof off / sizeof off[0]; i++)
    if (strcasecmp(v, off[i]) == 0)
      return 0;
  return 1;
}

/* A pool map's sizes, waiting for a deferred build's count first: the
 * next level's row count; checked against the plan when `check`. */
static int pool_map_sizes(bench_t *B, voxconv_handle_t *h, int l,
                          int check) {
  net_level_t *L = &B->lv[l];
  voxconv_kmap_info_t info;
  TRY(B, "voxconv_kmap_get_info", voxconv_kmap_get_info(L->pool, &info));
  if (info.n_out < 0) {
    TRY_ON(h, "voxconv_kmap_wait", voxconv_kmap_wait(h, L->pool));
    TRY(B, "voxconv_kmap_get_info", voxconv_kmap_get_info(L->pool, &info));
  }
  if (check && (info.n_pairs != L->pairs_pool || info.n_out != L->n_next)) {
    fprintf(stderr,
            "voxconv bench: level %d pool map changed size between runs\n", l);
    return VT_EXIT_FAIL;
  }
  L->pairs_pool = info.n_pairs;
  L->n_next = info.n_out;
  return 0;
}

/* build_map (below) with `defer`: a pool map queued without waiting for
 * its output count (voxconv_kmap_build_bounded's defer), which
 * pool_map_sizes then waits for. */
static int build_map_ex(bench_t *B, voxconv_handle_t *h, int l,
                        const int32_t *coords, int64_t n, int pool, int check,
                        int timed, int defer, double *ms) {
  net_level_t *L = &B->lv[l];
  const voxconv_coords_t c = level_coords(coords, n, l);
  const voxconv_kmap_desc_t d = pool ? pool2_desc() : subm3_desc();
  voxconv_kmap_t **map = pool ? &L->pool : &L->subm;
  char what[64];
  int rc;
  snprintf(what, sizeof what, "voxconv_kmap_build (level %d %s)", l,
           pool ? "pool 2/2" : "subm3");
  *ms = 0;
  /* A pooled level's rows are the last pool map's outputs, whose bounds
   * that build computed: the strided build sorts compact keys with them
   * (voxconv_kmap_build_bounded; the Python package does the same). Level
   * 0's are the voxelization grid's when it had one. VOXCONV_STRIDED_BOUNDS=0
   * builds without (the same maps). */
  voxconv_coords_bounds_t bounds = B->in_bounds;
  const int bounded =
      pool && env_on("VOXCONV_STRIDED_BOUNDS") &&
      (l == 0 ? B->has_in_bounds
              : B->lv[l - 1].pool &&
                    voxconv_kmap_out_bounds(B->lv[l - 1].pool, &bounds) ==
                        VOXCONV_STATUS_SUCCESS);
  if (timed && (rc = clock_start(B, &B->t_op)))
    return rc;
  TRY_ON(h, what,
         bounded || defer
             ? voxconv_kmap_build_bounded(h, &d, &c, bounded ? &bounds : NULL,
                                          defer, map)
             : voxconv_kmap_build(h, &d, &c, NULL, map));
  if (timed && (rc = clock_stop(B, &B->t_op, ms)))
    return rc;
  if (pool)
    return defer ? 0 : pool_map_sizes(B, h, l, check);
  voxconv_kmap_info_t info;
  TRY(B, "voxconv_kmap_get_info", voxconv_kmap_get_info(*map, &info));
  /* A CUDA submanifold build does not wait for the GPU, so its pair count
   * is not known yet (-1). Timed runs leave it so (waiting would put a host
   * synchronisation into the measured forward; the plan checked the count
   * once); untimed ones, which size the plan and the FLOP counts, wait. */
  if (info.n_pairs < 0) {
    if (check)
      return 0;
    TRY_ON(h, "voxconv_kmap_wait", voxconv_kmap_wait(h, *map));
    TRY(B, "voxconv_kmap_get_info", voxconv_kmap_get_info(*map, &info));
  }
  if (check && info.n_pairs != L->pairs_subm) {
    fprintf(stderr,
            "voxconv bench: level %d map has %lld pairs, %lld before: maps "
            "are not deterministic\n",
            l, (long long)info.n_pairs, (long long)L->pairs_subm);
    return VT_EXIT_FAIL;
  }
  L->pairs_subm = info.n_pairs;
  return 0;
}

/* Builds one map of level l on coords (n rows) through handle h: the
 * submanifold map, or (pool) the 2/2 pool map, which also gives the next
 * level's size. Timed into *ms when `timed` (else *ms = 0); checks the size
 * against the plan when `check` (maps are deterministic, so a change is a
 * bug). */
static int build_map(bench_t *B, voxconv_handle_t *h, int l,
                     const int32_t *coords, int64_t n, int pool, int check,
                     int timed, double *ms) {
  return build_map_ex(B, h, l, coords, n, pool, check, timed, 0, ms);
}

/* --dtype i8: a weight tensor's scale q as the per-channel array [c] the
 * int8 op reads (backend memory). */
static int upload_scales(bench_t *B, int64_t c, float q, void **dst) {
  float *h = (float *)malloc((size_t)c * sizeof(float));
  if (!h) {
    fprintf(stderr, "voxconv bench: out of host memory\n");
    return VT_EXIT_FAIL;
  }
  for (int64_t i = 0; i < c; i++)
    h[i] = q;
  int rc = balloc(B, (size_t)c * sizeof(float), dst, "int8 weight scales");
  const voxconv_status_t st =
      rc ? VOXCONV_STATUS_SUCCESS
         : voxconv_memcpy(B->h, *dst, h, (size_t)c * sizeof(float),
                          VOXCONV_MEMCPY_HOST_TO_BACKEND);
  free(h);
  if (rc)
    return rc;
  TRY(B, "voxconv_memcpy (scales)", st);
  return 0;
}


/* One convolution's forward: the float op, or with --dtype i8 the int8 op
 * with an int8 output at the activations' scale (ws: the weights' scales;
 * the weights in the KOI layout, upload_values). No bias, no ReLU:
 * BENCHMARKS.md's network has neither. */
static voxconv_status_t conv_forward(bench_t *B, const voxconv_kmap_t *m,
                                     const voxconv_feats_t *x,
                                     const voxconv_weights_t *w,
                                     const voxconv_feats_t *y,
                                     const void *ws) {
  if (B->dtype != VOXCONV_DTYPE_I8)
    return voxconv_conv_forward(B->h, m, x, w, y, &B->conv_opt);
  const voxconv_quant_params_t qp = {B->act_scale, (const float *)ws, NULL, 0,
                                     B->act_scale, VOXCONV_INT8_WEIGHTS_KOI};
  return voxconv_conv_forward_int8(B->h, m, x, w, &qp, y, NULL);
}

/* Untimed first pass: learns every level's size, allocates all buffers,
 * initialises weights and the output gradient, and lays out the rows. */
static int plan_network(bench_t *B) {
  const int32_t *coords = B->coords;
  int64_t n = B->n_voxels;
  int rc;
  progress(B, "planning: building the maps once to size the buffers");
  for (int l = 0; l < NET_LEVELS; l++) {
    net_level_t *L = &B->lv[l];
    L->n = n;
    L->cin = l == 0 ? k_input_channels : k_level_channels[l - 1];
    L->c = k_level_channels[l];
    double ms;
    if ((rc = build_map(B, B->h, l, coords, n, 0, 0, 0, &ms)))
      return rc;
    if (l + 1 < NET_LEVELS) {
      if ((rc = build_map(B, B->h, l, coords, n, 1, 0, 0, &ms)))
        return rc;
      TRY(B, "voxconv_kmap_out_coords",
          voxconv_kmap_out_coords(L->pool, &coords));
      n = L->n_next;
    }
  }
  release_maps(B);

  vt_rng_t rng = {0x0BE7C4ull ^ (B->o.seed * 0x9E3779B97F4A7C15ull)};
  for (int l = 0; l < NET_LEVELS; l++) {
    net_level_t *L = &B->lv[l];
    const size_t es = B->esize;
    const size_t wbytes1 = 27u * (size_t)L->cin * (size_t)L->c * es;
    const size_t wbytes2 = 27u * (size_t)L->c * (size_t)L->c * es;
    const size_t act = (size_t)L->n * (size_t)L->c * es;
    const size_t in = (size_t)L->n * (size_t)L->cin * es;
    if (l == 0) /* for l > 0, x is the pool output allocated at l - 1 */
      L->x = B->feats;
    if ((rc = balloc(B, act, &L->a, "activations")) ||
        (rc = balloc(B, act, &L->b, "activations")) ||
        (rc = balloc(B, wbytes1, &L->w1, "weights")) ||
        (rc = balloc(B, wbytes2, &L->w2, "weights")))
      return rc;
    if (!bench_forward_only(B) &&
        ((rc = balloc(B, wbytes1, &L->dw1, "weight gradients")) ||
         (rc = balloc(B, wbytes2, &L->dw2, "weight gradients")) ||
         (rc = balloc(B, in, &L->gx, "gradients")) ||
         (rc = balloc(B, act, &L->ga, "gradients")) ||
         (rc = balloc(B, act, &L->gb, "gradients"))))
      return rc;
    if (l + 1 < NET_LEVELS) {
      /* The pool output is the next level's input [n_next][c]. */
      if ((rc = balloc(B, (size_t)L->n_next * (size_t)L->c * es,
                       &B->lv[l + 1].x, "pool output")))
        return rc;
    }
    /* Variance-preserving scale: each output sums ~pairs/n neighbours of
     * cin inputs, so activations stay O(input) and f16 cannot overflow. */
    const double neigh =
        L->n > 0 ? (double)L->pairs_subm / (double)L->n : 1.0;
    const double s1 = sqrt(3.0 / (fmax(neigh, 1.0) * (double)L->cin));
    const double s2 = sqrt(3.0 / (fmax(neigh, 1.0) * (double)L->c));
    float q1, q2;
    if ((rc = upload_values(B, L->w1, 27 * L->cin * L->c, s1, &rng, &q1, L->cin,
                            L->c)) ||
        (rc = upload_values(B, L->w2, 27 * L->c * L->c, s2, &rng, &q2, L->c,
                            L->c)))
      return rc;
    if (B->dtype == VOXCONV_DTYPE_I8 &&
        ((rc = upload_scales(B, L->c, q1, &L->ws1)) ||
         (rc = upload_scales(B, L->c, q2, &L->ws2))))
      return rc;
  }
  /* The random output gradient of the last level. */
  net_level_t *last = &B->lv[NET_LEVELS - 1];
  if (!bench_forward_only(B) &&
      (rc = upload_random(B, last->gb, last->n * last->c, 1.0, &rng, NULL)))
    return rc;

  /* Rows in execution order. */
  char name[40];
  for (int l = 0; l < NET_LEVELS; l++) {
    net_level_t *L = &B->lv[l];
    snprintf(name, sizeof name, "L%d.map_subm3", l);
    if (!add_row(B, name, "kmap_subm3", 0, L->n, L->n, 0, 0, L->pairs_subm))
      return VT_EXIT_FAIL;
    snprintf(name, sizeof name, "L%d.conv1", l);
    if (!add_row(B, name, "conv_fwd", 0, L->n, L->n, L->cin, L->c,
                 L->pairs_subm))
      return VT_EXIT_FAIL;
    snprintf(name, sizeof name, "L%d.conv2", l);
    if (!add_row(B, name, "conv_fwd", 0, L->n, L->n, L->c, L->c,
                 L->pairs_subm))
      return VT_EXIT_FAIL;
    if (l + 1 < NET_LEVELS) {
      snprintf(name, sizeof name, "L%d.map_pool2", l);
      if (!add_row(B, name, "kmap_strided2", 0, L->n, L->n_next, 0, 0,
                   L->pairs_pool))
        return VT_EXIT_FAIL;
      snprintf(name, sizeof name, "L%d.maxpool", l);
      if (!add_row(B, name, "maxpool_fwd", 0, L->n, L->n_next, L->c, L->c,
                   L->pairs_pool))
        return VT_EXIT_FAIL;
    }
  }
  for (int l = NET_LEVELS - 1; l >= 0 && !bench_forward_only(B); l--) {
    net_level_t *L = &B->lv[l];
    if (l + 1 < NET_LEVELS) {
      snprintf(name, sizeof name, "L%d.maxpool", l);
      if (!add_row(B, name, "maxpool_bwd", 1, L->n, L->n_next, L->c, L->c,
                   L->pairs_pool))
        return VT_EXIT_FAIL;
    }
    snprintf(name, sizeof name, "L%d.conv2", l);
    if (!add_row(B, name, "conv_dgrad", 1, L->n, L->n, L->c, L->c,
                 L->pairs_subm) ||
        !add_row(B, name, "conv_wgrad", 1, L->n, L->n, L->c, L->c,
                 L->pairs_subm))
      return VT_EXIT_FAIL;
    snprintf(name, sizeof name, "L%d.conv1", l);
    if (!add_row(B, name, "conv_dgrad", 1, L->n, L->n, L->cin, L->c,
                 L->pairs_subm) ||
        !add_row(B, name, "conv_wgrad", 1, L->n, L->n, L->cin, L->c,
                 L->pairs_subm))
      return VT_EXIT_FAIL;
  }
  return 0;
}

/* Runs one op, timing it into row r of run rep (rep < 0: not recorded). */
#define TIMED_OP(B, r, rep, sync, what, call)                                  \
  do {                                                                         \
    double ms_ = 0;                                                            \
    int rc_;                                                                   \
    if ((sync) && (rc_ = clock_start((B), &(B)->t_op)))                        \
      return rc_;                                                              \
    TRY((B), (what), (call));                                                  \
    if ((sync) && (rc_ = clock_stop((B), &(B)->t_op, &ms_)))                   \
      return rc_;                                                              \
    if ((rep) >= 0)                                                            \
      (B)->rows[(r)].ms[(rep)] = ms_;                                          \
    note_tuning((B), (what));                                                  \
    (r)++;                                                                     \
  } while (0)

/* Queues level l's two convolutions (rows *r, *r + 1 of run rec when rec >=
 * 0; per_layer: each between syncs). */
static int level_convs(bench_t *B, int l, int *r_io, int rec, int per_layer) {
  net_level_t *L = &B->lv[l];
  int r = *r_io;
  const voxconv_feats_t x = feats_of(B, L->x, L->n, L->cin);
  const voxconv_feats_t a = feats_of(B, L->a, L->n, L->c);
  const voxconv_feats_t b = feats_of(B, L->b, L->n, L->c);
  const voxconv_weights_t w1 = weights_of(B, L->w1, L->cin, L->c);
  const voxconv_weights_t w2 = weights_of(B, L->w2, L->c, L->c);
  TIMED_OP(B, r, rec, per_layer, "voxconv_conv_forward (conv1)",
           conv_forward(B, L->subm, &x, &w1, &a, L->ws1));
  TIMED_OP(B, r, rec, per_layer, "voxconv_conv_forward (conv2)",
           conv_forward(B, L->subm, &a, &w2, &b, L->ws2));
  *r_io = r;
  return 0;
}

/* VOXCONV_BENCH_TRACE=1 (a diagnostic; the usage text names it): each
 * overlapped end-to-end forward prints on stderr the host clock, in ms
 * from its start event, at every step it issues -- when the host got past
 * each map build (the pooled levels' builds wait for their output count)
 * and queued each level's work -- to be read beside the per-layer rows:
 * a level's convolutions queued later than the GPU could have started
 * them mean the GPU waited on the host (docs/perf-notes.md item 141). */
enum { k_trace_max = 64 };
static struct {
  int on;     /* VOXCONV_BENCH_TRACE=1 */
  int active; /* in an overlapped end-to-end forward */
  int n;
  double t0, at[k_trace_max];
  const char *what[k_trace_max];
  int level[k_trace_max];
} g_trace;

static void trace_mark(const char *what, int level) {
  if (!g_trace.active || g_trace.n >= k_trace_max)
    return;
  g_trace.what[g_trace.n] = what;
  g_trace.level[g_trace.n] = level;
  g_trace.at[g_trace.n++] = vt_now_ms() - g_trace.t0;
}

static void trace_begin(int overlap, const double *total) {
  static int checked;
  if (!checked) {
    const char *v = getenv("VOXCONV_BENCH_TRACE");
    g_trace.on = v && strcmp(v, "1") == 0;
    checked = 1;
  }
  g_trace.active = g_trace.on && overlap && total;
  g_trace.n = 0;
  g_trace.t0 = vt_now_ms();
}

static void trace_print(double total) {
  if (!g_trace.active)
    return;
  fprintf(stderr, "[trace] forward %.3f ms:", total);
  for (int i = 0; i < g_trace.n; i++)
    fprintf(stderr, " L%d.%s %.3f", g_trace.level[i], g_trace.what[i],
            g_trace.at[i]);
  fputc('\n', stderr);
}

/* Forward from coordinates + features. per_layer: sync after every op and
 * record rows into run rep; otherwise only the end-to-end time (total
 * NULL: the caller times the run). overlap
 * (end to end only): submanifold maps are built on B->hm (B->map_stream),
 * pool maps deferred on B->hq (B->pool_stream), and the convolution
 * stream waits for each map just before its first use, so a level's pool
 * map and the next level's submanifold map are built while this level's
 * convolutions run. */
static int net_forward(bench_t *B, int rep, int per_layer, int overlap,
                       double *total) {
  const int rec = per_layer ? rep : -1;
  overlap = overlap && !per_layer && B->hm;
  voxconv_handle_t *hm = overlap ? B->hm : B->h;
  int r = 0, rc;
  if (total && (rc = clock_start(B, &B->t_total)))
    return rc;
  trace_begin(overlap, total);
  /* Map work starts after the start event (and after the last run's use of
   * the map stream's memory). */
  if (overlap) {
    TRY_ON(hm, "voxconv_stream_wait",
           voxconv_stream_wait(hm, NULL)); /* B->h: legacy stream */
    TRY_ON(B->hq, "voxconv_stream_wait", voxconv_stream_wait(B->hq, NULL));
  }
  const int32_t *coords = B->coords;
  for (int l = 0; l < NET_LEVELS; l++) {
    net_level_t *L = &B->lv[l];
    const int has_pool = l + 1 < NET_LEVELS;
    double ms_subm = 0, ms_pool = 0;
    const int r_subm = r++;
    /* Per-layer runs build the level's pool map here too, so its row sits
     * before the convolutions' as in the table. Overlapped runs queue it
     * deferred on the pool stream right after the level's convolutions
     * (on the GPU it runs beside the submanifold build and them) and then
     * wait for its count. This level's rows are the last pool map's
     * outputs, written on the pool stream. Measured against queuing it
     * before the convolutions, and level 0's after the submanifold build:
     * A int8 3.07-3.09 against 3.12-3.28 ms; with both map handles' builds
     * issued by build workers (voxconv_handle_set_build_worker) and each
     * pool map queued first, int8 3.10-3.16 and f16 0.09 ms slower
     * (docs/perf-notes.md item 141). */
    if (overlap && l > 0)
      TRY_ON(hm, "voxconv_kmap_order",
             voxconv_kmap_order(hm, B->lv[l - 1].pool));
    if ((rc = build_map(B, hm, l, coords, L->n, 0, 1, per_layer, &ms_subm)) ||
        (has_pool && !overlap &&
         (rc = build_map(B, hm, l, coords, L->n, 1, 1, per_layer, &ms_pool))))
      return rc;
    trace_mark("subm", l);
    if (overlap) {
      TRY(B, "voxconv_kmap_order", voxconv_kmap_order(B->h, L->subm));
      /* On the preparation stream, after the build: the sort runs beside
       * the level's first convs and the map stream's next builds, and only
       * the first conv that tiles over the order waits for it (item 130). */
      if (B->prepare) {
        TRY_ON(B->hp, "voxconv_kmap_order",
               voxconv_kmap_order(B->hp, L->subm));
        TRY_ON(B->hp, "voxconv_kmap_prepare",
               voxconv_kmap_prepare(B->hp, L->subm, B->prepare));
      }
    }
    if ((rc = level_convs(B, l, &r, rec, per_layer)))
      return rc;
    trace_mark("convs", l);
    if (overlap && has_pool) {
      if ((rc = build_map_ex(B, B->hq, l, coords, L->n, 1, 1, 0, 1,
                             &ms_pool)))
        return rc;
      trace_mark("pool_queued", l);
    }
    const voxconv_feats_t b = feats_of(B, L->b, L->n, L->c);
    if (rec >= 0)
      B->rows[r_subm].ms[rec] = ms_subm;
    if (has_pool) {
      if (overlap) {
        if ((rc = pool_map_sizes(B, B->hq, l, 1)))
          return rc;
        trace_mark("pool_map", l);
        TRY(B, "voxconv_kmap_order", voxconv_kmap_order(B->h, L->pool));
      }
      if (rec >= 0)
        B->rows[r].ms[rec] = ms_pool;
      r++;
      const voxconv_feats_t y = feats_of(B, B->lv[l + 1].x, L->n_next, L->c);
      TIMED_OP(B, r, rec, per_layer, "voxconv_pool_forward (max 2/2)",
               voxconv_pool_forward(B->h, L->pool, VOXCONV_POOL_MAX, &b, &y));
      TRY(B, "voxconv_kmap_out_coords",
          voxconv_kmap_out_coords(L->pool, &coords));
      trace_mark("maxpool", l);
    }
  }
  if (!total)
    return 0;
  trace_mark("end", NET_LEVELS - 1);
  if ((rc = clock_stop(B, &B->t_total, total)))
    return rc;
  trace_mark("synced", NET_LEVELS - 1);
  trace_print(*total);
  return 0;
}

/* Backward through the maps the forward of this run built (total NULL:
 * the caller times the run). */
static int net_backward(bench_t *B, int rep, int per_layer, double *total) {
  if (total)
    *total = 0;
  if (bench_forward_only(B))
    return 0;
  const int rec = per_layer ? rep : -1;
  int r = 0;
  while (r < B->n_rows && B->rows[r].phase == 0)
    r++;
  int rc;
  if (total && (rc = clock_start(B, &B->t_total)))
    return rc;
  for (int l = NET_LEVELS - 1; l >= 0; l--) {
    net_level_t *L = &B->lv[l];
    const voxconv_feats_t x = feats_of(B, L->x, L->n, L->cin);
    const voxconv_feats_t a = feats_of(B, L->a, L->n, L->c);
    const voxconv_feats_t b = feats_of(B, L->b, L->n, L->c);
    const voxconv_feats_t gx = feats_of(B, L->gx, L->n, L->cin);
    const voxconv_feats_t ga = feats_of(B, L->ga, L->n, L->c);
    const voxconv_feats_t gb = feats_of(B, L->gb, L->n, L->c);
    const voxconv_weights_t w1 = weights_of(B, L->w1, L->cin, L->c);
    const voxconv_weights_t w2 = weights_of(B, L->w2, L->c, L->c);
    const voxconv_weights_t dw1 = weights_of(B, L->dw1, L->cin, L->c);
    const voxconv_weights_t dw2 = weights_of(B, L->dw2, L->c, L->c);
    if (l + 1 < NET_LEVELS) {
      const net_level_t *N = &B->lv[l + 1];
      const voxconv_feats_t y = feats_of(B, N->x, L->n_next, L->c);
      const voxconv_feats_t gy = feats_of(B, N->gx, L->n_next, L->c);
      TIMED_OP(B, r, rec, per_layer, "voxconv_pool_backward (max 2/2)",
               voxconv_pool_backward(B->h, L->pool, VOXCONV_POOL_MAX, &b, &y,
                                     &gy, &gb));
    }
    TIMED_OP(B, r, rec, per_layer, "voxconv_conv_dgrad (conv2)",
             voxconv_conv_dgrad(B->h, L->subm, &gb, &w2, &ga, &B->conv_opt));
    TIMED_OP(B, r, rec, per_layer, "voxconv_conv_wgrad (conv2)",
             voxconv_conv_wgrad(B->h, L->subm, &a, &gb, &dw2, &B->conv_opt));
    TIMED_OP(B, r, rec, per_layer, "voxconv_conv_dgrad (conv1)",
             voxconv_conv_dgrad(B->h, L->subm, &ga, &w1, &gx, &B->conv_opt));
    TIMED_OP(B, r, rec, per_layer, "voxconv_conv_wgrad (conv1)",
             voxconv_conv_wgrad(B->h, L->subm, &x, &ga, &dw1, &B->conv_opt));
  }
  return total ? clock_stop(B, &B->t_total, total) : 0;
}

/* One forward + backward end to end between one pair of events: the two
 * back to back, as a training step runs them, without the idle GPU and the
 * synchronisation between the separate series (whose sum is not the same
 * load: under the power cap, and with the backward's start no longer
 * waiting on the host). */
static int net_forward_backward(bench_t *B, double *total) {
  int rc;
  const unsigned forward_only = B->prepare;
  if (forward_only) /* the backward's tables too */
    B->prepare |= VOXCONV_PREPARE_DGRAD | VOXCONV_PREPARE_PAIRS;
  rc = clock_start(B, &B->t_total);
  if (!rc)
    rc = net_forward(B, -1, 0, 1, NULL);
  B->prepare = forward_only;
  if (rc || (rc = net_backward(B, -1, 0, NULL)))
    return rc;
  return clock_stop(B, &B->t_total, total);
}

/* Hashes the network's output after an end-to-end forward (outside the
 * timed region) into B->out_hash, noting whether a run differed. */
static int hash_output(bench_t *B) {
  const net_level_t *L = &B->lv[NET_LEVELS - 1];
  const size_t bytes = (size_t)L->n * (size_t)L->c * B->esize;
  unsigned char *host = (unsigned char *)malloc(bytes ? bytes : 1);
  if (!host)
    return VT_EXIT_FAIL;
  voxconv_status_t st =
      voxconv_memcpy(B->h, host, L->b, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST);
  if (st != VOXCONV_STATUS_SUCCESS) {
    free(host);
    return lib_fail(B, "voxconv_memcpy (output hash)", st);
  }
  uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a 64: offset basis, prime */
  for (size_t i = 0; i < bytes; i++)
    h = (h ^ host[i]) * 0x100000001B3ull;
  free(host);
  if (B->out_hash_runs++ && h != B->out_hash)
    B->out_hash_differs = 1;
  B->out_hash = h;
  return 0;
}

static int run_network(bench_t *B) {
  int rc;
  if ((rc = plan_network(B)))
    return rc;
  progress(B, "%lld voxels at level 0, %lld at level 6; %.1f MiB of buffers",
           (long long)B->lv[0].n, (long long)B->lv[NET_LEVELS - 1].n,
           (double)B->bytes_allocated / 1048576.0);
  B->fwd_total = (double *)calloc((size_t)B->repeat, sizeof(double));
  B->bwd_total = (double *)calloc((size_t)B->repeat, sizeof(double));
  if (!B->fwd_total || !B->bwd_total)
    return VT_EXIT_FAIL;
  const int cuda = B->backend == VOXCONV_BACKEND_CUDA;
  double f, b;
  /* The first warm-up tunes (on an empty cache): in line, so no map build
   * runs beside the candidates being timed. */
  for (int i = 0; i < B->warmup; i++) {
    B->warming = 1;
    if ((rc = net_forward(B, -1, 0, i > 0, &f)) ||
        (rc = net_backward(B, -1, 0, &b)))
      return rc;
    B->warming = 0;
    release_maps(B);
    progress(B, "warm-up %d/%d: forward %.2f ms, backward %.2f ms", i + 1,
             B->warmup, f, b);
    settle_after_tuning(B);
  }
  /* On the CPU a per-layer run is also an end-to-end run (nothing is
   * asynchronous); on CUDA the per-layer syncs would inflate the totals,
   * so those come from separate runs with one sync at the end. */
  for (int i = 0; i < B->repeat; i++) {
    if ((rc = net_forward(B, i, 1, 0, &f)) ||
        (rc = net_backward(B, i, 1, &b)))
      return rc;
    release_maps(B);
    if (!cuda)
      B->fwd_total[i] = f, B->bwd_total[i] = b;
    progress(B, "run %d/%d%s: forward %.2f ms, backward %.2f ms", i + 1,
             B->repeat, cuda ? " (per-layer syncs)" : "", f, b);
  }
  if (cuda)
    for (int i = 0; i < B->repeat; i++) {
      if ((rc = net_forward(B, i, 0, 1, &B->fwd_total[i])) ||
          (rc = hash_output(B)) ||
          (rc = net_backward(B, i, 0, &B->bwd_total[i])))
        return rc;
      release_maps(B);
      progress(B, "run %d/%d (end to end): forward %.2f ms, backward %.2f ms",
               i + 1, B->repeat, B->fwd_total[i], B->bwd_total[i]);
    }
  if (cuda)
    progress(B, "forward output FNV-1a %016llx, %s", (unsigned long long)B->out_hash,
             B->out_hash_differs ? "not the same every run"
                                 : "the same every run");
  if (cuda && !bench_forward_only(B)) {
    B->fb_total = (double *)calloc((size_t)B->repeat, sizeof(double));
    if (!B->fb_total)
      return VT_EXIT_FAIL;
    for (int i = 0; i < B->repeat; i++) {
      if ((rc = net_forward_backward(B, &B->fb_total[i])))
        return rc;
      release_maps(B);
      progress(B, "run %d/%d (back to back): forward + backward %.2f ms",
               i + 1, B->repeat, B->fb_total[i]);
    }
  }
  return 0;
}

/* ---- workloads C and D --------------------------------------------------- */

/* Workload C's layer: its map and buffers. */
typedef struct c_layer {
  const voxconv_kmap_t *km;
  voxconv_feats_t x, y, dy, dx;
  voxconv_weights_t w, dw;
  const void *ws; /* --dtype i8: the weights' scales */
} c_layer_t;

/* Workload C's pass `pass` (0 forward, 1 dgrad, 2 wgrad) of layer c, on
 * B->h; *what names the library call (for messages and note_tuning). */
static voxconv_status_t c_pass(bench_t *B, const c_layer_t *c, int pass,
                               const char **what) {
  if (pass == 0) {
    *what = "voxconv_conv_forward";
    return conv_forward(B, c->km, &c->x, &c->w, &c->y, c->ws);
  }
  if (pass == 1) {
    *what = "voxconv_conv_dgrad";
    return voxconv_conv_dgrad(B->h, c->km, &c->dy, &c->w, &c->dx,
                              &B->conv_opt);
  }
  *what = "voxconv_conv_wgrad";
  return voxconv_conv_wgrad(B->h, c->km, &c->x, &c->dy, &c->dw, &B->conv_opt);
}

/* One timed run of workload C's row `pass`: passes 0-2 each alone, pass 3
 * (conv_fwd_bwd) the three back to back between one pair of events. */
static int c_timed_run(bench_t *B, const c_layer_t *c, int pass, int r,
                       int rep) {
  const int first = pass < 3 ? pass : 0, last = pass < 3 ? pass : 2;
  int rc;
  if ((rc = clock_start(B, &B->t_op)))
    return rc;
  const char *what = "";
  for (int p = first; p <= last; p++) {
    const voxconv_status_t st = c_pass(B, c, p, &what);
    if (st != VOXCONV_STATUS_SUCCESS)
      return lib_fail(B, what, st);
  }
  double ms = 0;
  if ((rc = clock_stop(B, &B->t_op, &ms)))
    return rc;
  if (rep >= 0)
    B->rows[r].ms[rep] = ms;
  if (pass < 3) /* the back-to-back row runs what the three rows tuned */
    note_tuning(B, what);
  return 0;
}

/* --pass-preheat-ms (workload C, CUDA): row `pass` runs untimed, each run
 * as a timed one (events, a wait at its end), until N ms have passed; then
 * its timed runs follow at once. A series that outlasts the GPU's burst
 * (C = 256 forward + backward: ~6 runs on an H100 or H200 under their
 * 700 W cap) otherwise switches clock mid-series, and its median says
 * only where the switch fell (docs/perf-notes.md item 91). torch_bench
 * preheats its PyTorch rows the same way. */
static int pass_preheat(bench_t *B, const c_layer_t *c, int pass, int r) {
  if (B->backend != VOXCONV_BACKEND_CUDA || B->o.pass_preheat_ms <= 0)
    return 0;
  const double end = vt_now_ms() + (double)B->o.pass_preheat_ms;
  while (vt_now_ms() < end) {
    const int rc = c_timed_run(B, c, pass, r, -1);
    if (rc)
      return rc;
  }
  return 0;
}

static int run_workload_c(bench_t *B) {
  net_level_t *L = &B->lv[0];
  L->n = B->n_voxels;
  int rc;
  progress(B, "workload C: building the level-0 subm3 map (untimed)");
  double ms;
  if ((rc = build_map(B, B->h, 0, B->coords, L->n, 0, 0, 0, &ms)))
    return rc;
  if (L->pairs_subm != k_workload_a_pairs)
    fprintf(stderr,
            "voxconv bench: WARNING: level-0 map has %lld pairs, "
            "BENCHMARKS.md expects %lld\n",
            (long long)L->pairs_subm, (long long)k_workload_a_pairs);
  vt_rng_t rng = {0xC0FFEEull ^ (B->o.seed * 0x9E3779B97F4A7C15ull)};
  for (int ci = 0; ci < B->o.n_channels; ci++) {
    const int64_t C = B->o.channels[ci];
    const size_t act = (size_t)L->n * (size_t)C * B->esize;
    const size_t wb = 27u * (size_t)C * (size_t)C * B->esize;
    void *x, *y, *dy, *dx, *w, *dw;
    const int first_alloc = B->n_allocs;
    if ((rc = balloc(B, act, &x, "x")) || (rc = balloc(B, act, &y, "y")) ||
        (rc = balloc(B, act, &dy, "dy")) || (rc = balloc(B, act, &dx, "dx")) ||
        (rc = balloc(B, wb, &w, "W")) || (rc = balloc(B, wb, &dw, "dW")))
      return rc;
    const double neigh = (double)L->pairs_subm / (double)(L->n ? L->n : 1);
    float qw = 1.0f;
    void *ws = NULL;
    if ((rc = upload_random(B, x, L->n * C, 1.0, &rng, &B->act_scale)) ||
        (rc = upload_random(B, dy, L->n * C, 1.0, &rng, NULL)) ||
        (rc = upload_values(B, w, 27 * C * C,
                            sqrt(3.0 / (fmax(neigh, 1.0) * (double)C)), &rng,
                            &qw, C, C)) ||
        (B->dtype == VOXCONV_DTYPE_I8 &&
         (rc = upload_scales(B, C, qw, &ws))))
      return rc;
    const c_layer_t cl = {L->subm,
                          feats_of(B, x, L->n, C),
                          feats_of(B, y, L->n, C),
                          feats_of(B, dy, L->n, C),
                          feats_of(B, dx, L->n, C),
                          weights_of(B, w, C, C),
                          weights_of(B, dw, C, C),
                          ws};
    char name[40];
    snprintf(name, sizeof name, "C=%lld", (long long)C);
    const int r0 = B->n_rows;
    /* Pass 3 (conv_fwd_bwd) runs the three passes back to back as one
     * timed series: what a training step (or PyTorch's forward +
     * backward) asks of the GPU, power state included. Under the H200 /
     * H100 power cap three separately timed series sum to less than the
     * same work run back to back (docs/perf-notes.md item 87). */
    const int passes = bench_forward_only(B) ? 1 : 4;
    if (!add_row(B, name, "conv_fwd", 0, L->n, L->n, C, C, L->pairs_subm) ||
        (passes > 1 &&
         (!add_row(B, name, "conv_dgrad", 1, L->n, L->n, C, C,
                   L->pairs_subm) ||
          !add_row(B, name, "conv_wgrad", 1, L->n, L->n, C, C,
                   L->pairs_subm) ||
          !add_fwd_bwd_row(B, name, L->n, C, L->pairs_subm))))
      return VT_EXIT_FAIL;
    for (int pass = 0; pass < passes; pass++) {
      pass_idle(B);
      for (int i = -B->warmup; i < B->repeat; i++) {
        B->warming = i < 0;
        if (i == 0 && (rc = pass_preheat(B, &cl, pass, r0 + pass)))
          return rc;
        if ((rc = c_timed_run(B, &cl, pass, r0 + pass, i < 0 ? -1 : i)))
          return rc;
        if (i < 0)
          settle_after_tuning(B);
      }
      B->warming = 0;
      progress(B, "C=%lld %s: median %.3f ms", (long long)C,
               B->rows[r0 + pass].op,
               bench_median(B->rows[r0 + pass].ms, B->repeat));
    }
    /* Free this C's buffers before the next (they are the last ones). */
    while (B->n_allocs > first_alloc) {
      B->n_allocs--;
      voxconv_free(B->h, B->allocs[B->n_allocs]);
    }
  }
  release_maps(B);
  return 0;
}

static int run_workload_d(bench_t *B) {
  net_level_t *L = &B->lv[0];
  L->n = B->n_voxels;
  int rc;
  double ms0;
  if ((rc = build_map(B, B->h, 0, B->coords, L->n, 0, 0, 1, &ms0)))
    return rc;
  release_maps(B);
  if (L->pairs_subm != k_workload_a_pairs)
    fprintf(stderr,
            "voxconv bench: WARNING: level-0 map has %lld pairs, "
            "BENCHMARKS.md expects %lld\n",
            (long long)L->pairs_subm, (long long)k_workload_a_pairs);
  if (!add_row(B, "L0.map_subm3", "kmap_subm3", 0, L->n, L->n, 0, 0,
               L->pairs_subm))
    return VT_EXIT_FAIL;
  for (int i = -B->warmup; i < B->repeat; i++) {
    double ms = 0;
    TRY(B, "voxconv_synchronize", voxconv_synchronize(B->h));
    if ((rc = build_map(B, B->h, 0, B->coords, L->n, 0, 1, 1, &ms)))
      return rc;
    release_maps(B);
    if (i >= 0)
      B->rows[0].ms[i] = ms;
  }
  return 0;
}

/* ---- main ---------------------------------------------------------------- */

static void bench_cleanup(bench_t *B) {
  release_maps(B);
  for (int i = 0; i < B->n_rows; i++)
    free(B->rows[i].ms);
  free(B->fwd_total);
  free(B->bwd_total);
  free(B->fb_total);
  if (B->h) {
    voxconv_timer_discard(B->h, B->t_op);
    voxconv_timer_discard(B->h, B->t_total);
    bfree_all(B);
    voxconv_destroy(B->hm); /* waits for its stream */
    voxconv_stream_destroy(B->h, B->map_stream);
    voxconv_destroy(B->hp);
    voxconv_stream_destroy(B->h, B->prep_stream);
    voxconv_destroy(B->hq);
    voxconv_stream_destroy(B->h, B->pool_stream);
    voxconv_destroy(B->h);
  }
}

/* A stream at the maps' priority (--map-priority) and a handle like hd on
 * it, for the overlapped forward's map work. */
static int side_stream(bench_t *B, voxconv_handle_desc_t *hd, void **stream,
                       voxconv_handle_t **h, const char *what) {
  TRY(B, "voxconv_stream_create_priority",
      voxconv_stream_create_priority(B->h,
                                     B->o.map_normal
                                         ? VOXCONV_STREAM_PRIORITY_NORMAL
                                         : VOXCONV_STREAM_PRIORITY_HIGH,
                                     stream));
  hd->backend = VOXCONV_BACKEND_CUDA;
  hd->stream = *stream;
  char call[64];
  snprintf(call, sizeof call, "voxconv_create (%s)", what);
  TRY_ON(NULL, call, voxconv_create(h, hd));
  return 0;
}

static int bench_setup(bench_t *B) {
  voxconv_handle_desc_t hd;
  memset(&hd, 0, sizeof hd);
  hd.backend = B->o.backend;
  hd.device = B->o.device;
  hd.num_threads = B->o.threads;
  hd.deterministic = B->o.deterministic;
  voxconv_status_t st = voxconv_create(&B->h, &hd);
  if (st != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "voxconv bench: cannot create a %s handle: %s: %s\n",
            B->o.backend == VOXCONV_BACKEND_CUDA  ? "CUDA"
            : B->o.backend == VOXCONV_BACKEND_CPU ? "CPU"
                                                  : "default",
            voxconv_status_string(st), voxconv_get_last_error(NULL));
    B->h = NULL;
    return VT_EXIT_FAIL;
  }
  TRY(B, "voxconv_get_backend", voxconv_get_backend(B->h, &B->backend));
  const int cuda = B->backend == VOXCONV_BACKEND_CUDA;
  if (cuda && !B->o.maps_serial && B->o.workload != 'C' &&
      B->o.workload != 'D') {
    int rc;
    if ((rc = side_stream(B, &hd, &B->map_stream, &B->hm, "map handle")) ||
        (rc = side_stream(B, &hd, &B->prep_stream, &B->hp,
                          "map preparation handle")) ||
        (rc = side_stream(B, &hd, &B->pool_stream, &B->hq,
                          "pool map handle")))
      return rc;
  }
  if (cuda) {
    voxconv_device_info_t di;
    memset(&di, 0, sizeof di);
    if (voxconv_device_get_info(B->o.device, &di) == VOXCONV_STATUS_SUCCESS)
      snprintf(B->device_name, sizeof B->device_name,
               "CUDA device %d: %s (cc %d.%d, %d SMs, %.1f GiB)", B->o.device,
               di.name, di.cc_major, di.cc_minor, di.sm_count,
               (double)di.total_memory / 1073741824.0);
    else
      snprintf(B->device_name, sizeof B->device_name, "CUDA device %d",
               B->o.device);
  } else {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("VOXCONV_NUM_THREADS");
    if (B->o.threads)
      snprintf(B->device_name, sizeof B->device_name,
               "CPU, %d threads (--threads), %ld cores online", B->o.threads,
               cores);
    else if (env && *env)
      snprintf(B->device_name, sizeof B->device_name,
               "CPU, VOXCONV_NUM_THREADS=%s, %ld cores online", env, cores);
    else
      snprintf(B->device_name, sizeof B->device_name,
               "CPU, library default threads (all %ld cores online)", cores);
  }
  B->dtype = B->o.dtype_set ? B->o.dtype
                            : (cuda ? VOXCONV_DTYPE_F16 : VOXCONV_DTYPE_F32);
  B->esize = voxconv_dtype_size(B->dtype);
  B->repeat = B->o.repeat > 0 ? B->o.repeat : (cuda ? 10 : 3);
  B->warmup = B->o.warmup >= 0 ? B->o.warmup : (cuda ? 3 : 1);
  /* the CPU's timings do not depend on a power controller's history */
  B->settle_ms = !cuda ? 0 : B->o.settle_ms >= 0 ? B->o.settle_ms : 2000;
  if (!B->o.size_set)
    B->o.size = cuda ? VT_SCENE_LARGE : VT_SCENE_SMALL;
  memset(&B->conv_opt, 0, sizeof B->conv_opt);
  B->conv_opt.fwd_algo = B->o.algo;
  B->conv_opt.bwd_algo = B->o.algo;
  B->conv_opt.deterministic = B->o.deterministic ? VOXCONV_TRUE : VOXCONV_UNSET;
  B->conv_opt.fp16_accum = B->o.fp16_accum == 1   ? VOXCONV_TRUE
                           : B->o.fp16_accum == 0 ? VOXCONV_FALSE
                                                  : VOXCONV_UNSET;
  /* BENCHMARKS.md, H200: 771 (f16), 799 (bf16), 51 (f32, no TF32) TFLOP/s
   * dense GEMM, 4.27 TB/s copy. */
  const double def_tflops = B->dtype == VOXCONV_DTYPE_BF16  ? 799.0
                            : B->dtype == VOXCONV_DTYPE_F16 ? 771.0
                                                            : 51.0;
  B->peak_flops = 1e12 * (B->o.peak_tflops > 0 ? B->o.peak_tflops : def_tflops);
  B->peak_bw = 1e12 * (B->o.peak_tbps > 0 ? B->o.peak_tbps : 4.27);
  B->human = B->o.quiet ? NULL : (B->o.json ? stderr : stdout);
  return 0;
}

int vt_bench_main(int argc, char **argv) {
  bench_t *B = (bench_t *)calloc(1, sizeof *B);
  if (!B) {
    fprintf(stderr, "voxconv bench: out of memory\n");
    return VT_EXIT_FAIL;
  }
  g_cmd = argc > 0 && strcmp(argv[0], "tune") == 0 ? "tune" : "bench";
  g_tuned_calls = 0;
  int rc = vt_bench_parse_options(g_cmd, argc, argv, &B->o, stdout, stderr);
  if (rc != VT_PARSED) {
    free(B);
    return rc;
  }
  if ((rc = bench_setup(B)))
    goto out;
  /* VOXCONV_MAP_PREPARE=0: the convolutions make the tables (A/B runs) */
  B->prepare = env_on("VOXCONV_MAP_PREPARE") ? VOXCONV_PREPARE_FORWARD : 0;
  progress(B, "backend: %s, dtype %s", B->device_name,
           voxconv_dtype_name(B->dtype));
  switch (B->o.workload) {
  case 'A':
  case 'C':
  case 'D':
    rc = prepare_workload_a(B);
    break;
  case 'B':
    rc = prepare_workload_b(B);
    break;
  default:
    rc = B->o.scan ? prepare_scan(B) : prepare_synthetic(B);
  }
  if (rc)
    goto out;
  progress(B, "input: %s", B->input_desc);
  progress(B, "voxels: %lld", (long long)B->n_voxels);
  if (B->n_voxels == 0) {
    fprintf(stderr, "voxconv bench: the input has no voxels\n");
    rc = VT_EXIT_FAIL;
    goto out;
  }
  rc = B->o.workload == 'C'   ? run_workload_c(B)
       : B->o.workload == 'D' ? run_workload_d(B)
                              : run_network(B);
  if (rc)
    goto out;
  if (B->human)
    bench_print_human(B, B->human);
  if (B->o.json)
    bench_print_json(B, stdout);
out:
  bench_cleanup(B);
  free(B);
  return rc;
}
