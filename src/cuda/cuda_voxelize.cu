/* Voxelization and duplicate merging on the GPU, matching the CPU paths
 * (src/coords/voxelize.c, kmap.c merge_cpu) element for element:
 *   1. one thread per point / row: key (VC_KEY_EMPTY when dropped), lowest
 *      failing row via atomicMin;
 *   2. CUB radix sort of (key, row): stable, so inside one voxel rows keep
 *      their input order, and dropped points (EMPTY = max key) go last;
 *   3. run heads -> inclusive scan (CUB) -> voxel id of every sorted row;
 *      heads write the coordinates and run starts, run ends their end;
 *   4. features: FIRST copies the run's first row, MEAN sums the run in
 *      row order in fp64 (as the CPU does), so the result is bit-identical.
 * Every writing kernel first checks the device error flag, so outputs stay
 * untouched when the input is invalid. One host sync per call, to read the
 * count and the error flag. */
#include "vc_cuda_util.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <limits.h>
#include <math.h>
#include <string.h>

#define VC_NO_ROW ULLONG_MAX

static const char vc_axis_names[3] = {'x', 'y', 'z'};

struct VcVoxStatus {
  unsigned long long bad; /* lowest failing point / row */
  long long n_unique;
};

__global__ void vc_vox_status_init_kernel(VcVoxStatus *st) {
  st->bad = VC_NO_ROW;
  st->n_unique = 0;
}

/* Point classification, identical to voxelize.c classify_point. */
enum {
  VC_PT_OK = 0,
  VC_PT_DROPPED,
  VC_PT_NONFINITE,
  VC_PT_BAD_BATCH,
  VC_PT_BAD_INDEX
};

struct VcVoxDesc {
  float vs[3], origin[3];
  int32_t grid[3];
  int32_t batch;
  int32_t fields;
};

/* Host and device: the same float arithmetic on both sides (used on the
 * host only to rebuild the error message of the failing point). */
static __host__ __device__ __forceinline__ int
vc_classify_point(const VcVoxDesc &d, const float *p, int32_t b, uint64_t *key,
                  int *axis, float *value) {
  for (int a = 0; a < 3; a++)
    if (!isfinite(p[a])) {
      *axis = a;
      *value = p[a];
      return VC_PT_NONFINITE;
    }
  if (b < 0 || b > VOXCONV_BATCH_MAX)
    return VC_PT_BAD_BATCH;
  int32_t c[3] = {0, 0, 0};
  int dropped = 0;
  for (int a = 0; a < 3; a++) {
    const float t = floorf((p[a] - d.origin[a]) / d.vs[a]);
    if (d.grid[a] > 0) {
      if (!(t >= 0.0f && t < (float)d.grid[a])) {
        dropped = 1; /* a later axis may still be an error */
        continue;
      }
    } else if (!(t >= (float)VOXCONV_COORD_MIN &&
                 t <= (float)VOXCONV_COORD_MAX)) {
      *axis = a;
      *value = t;
      return VC_PT_BAD_INDEX;
    }
    c[a] = (int32_t)t;
  }
  if (dropped)
    return VC_PT_DROPPED;
  *key = ((uint64_t)(uint32_t)b << 54) |
         ((uint64_t)(uint32_t)(c[0] + VC_COORD_BIAS) << 36) |
         ((uint64_t)(uint32_t)(c[1] + VC_COORD_BIAS) << 18) |
         (uint64_t)(uint32_t)(c[2] + VC_COORD_BIAS);
  return VC_PT_OK;
}

__global__ void vc_voxel_keys_kernel(const float *__restrict__ pts, int64_t n,
                                     const int32_t *__restrict__ batch,
                                     VcVoxDesc d,
                                     unsigned long long *__restrict__ keys,
                                     int32_t *__restrict__ rows,
                                     unsigned long long *bad) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float *p = pts + i * d.fields;
    const float xyz[3] = {p[0], p[1], p[2]};
    const int32_t b = batch ? batch[i] : d.batch;
    uint64_t key = VC_KEY_EMPTY;
    int axis;
    float value;
    const int pc = vc_classify_point(d, xyz, b, &key, &axis, &value);
    if (pc != VC_PT_OK)
      key = VC_KEY_EMPTY;
    if (pc > VC_PT_DROPPED)
      atomicMin(bad, (unsigned long long)i);
    keys[i] = key;
    rows[i] = (int32_t)i;
  }
}

/* merge_duplicates: packed keys of valid rows, lowest out-of-range row. */
__global__ void vc_merge_keys_kernel(const int32_t *__restrict__ coords,
                                     int64_t n,
                                     unsigned long long *__restrict__ keys,
                                     int32_t *__restrict__ rows,
                                     unsigned long long *bad) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int4 r = reinterpret_cast<const int4 *>(coords)[i];
    const bool ok = r.x >= 0 && r.x <= VOXCONV_BATCH_MAX &&
                    r.y >= VOXCONV_COORD_MIN && r.y <= VOXCONV_COORD_MAX &&
                    r.z >= VOXCONV_COORD_MIN && r.z <= VOXCONV_COORD_MAX &&
                    r.w >= VOXCONV_COORD_MIN && r.w <= VOXCONV_COORD_MAX;
    if (!ok)
      atomicMin(bad, (unsigned long long)i);
    keys[i] = ok ? vc_dev_pack_key(r.x, r.y, r.z, r.w) : VC_KEY_EMPTY;
    rows[i] = (int32_t)i;
  }
}

/* head[j] = 1 where a run of equal non-EMPTY keys starts. */
__global__ void vc_run_heads_kernel(const unsigned long long *__restrict__ keys,
                                    int64_t n, int32_t *__restrict__ head) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;
       j += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t k = keys[j];
    head[j] = k != VC_KEY_EMPTY && (j == 0 || keys[j - 1] != k);
  }
}

/* With id[j] = inclusive scan of heads (voxel id + 1): coordinates, run
 * bounds, per-row voxel, and the unique count. */
__global__ void vc_runs_kernel(const unsigned long long *__restrict__ keys,
                               const int32_t *__restrict__ rows,
                               const int32_t *__restrict__ id, int64_t n,
                               const VcVoxStatus *st, int32_t *__restrict__ coords,
                               int32_t *__restrict__ run_start,
                               int32_t *__restrict__ run_end,
                               int64_t *__restrict__ row_voxel,
                               long long *n_unique) {
  if (st->bad != VC_NO_ROW)
    return; /* invalid input: leave every output untouched */
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;
       j += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t k = keys[j];
    if (k == VC_KEY_EMPTY) {
      if (row_voxel)
        row_voxel[rows[j]] = -1;
      continue;
    }
    const int32_t v = id[j] - 1;
    if (row_voxel)
      row_voxel[rows[j]] = v;
    if (j == 0 || keys[j - 1] != k) {
      reinterpret_cast<int4 *>(coords)[v] =
          make_int4((int32_t)(k >> 54), (int32_t)((k >> 36) & 0x3FFFF) - VC_COORD_BIAS,
                    (int32_t)((k >> 18) & 0x3FFFF) - VC_COORD_BIAS,
                    (int32_t)(k & 0x3FFFF) - VC_COORD_BIAS);
      if (run_start)
        run_start[v] = (int32_t)j;
    }
    const bool last = j == n - 1 || keys[j + 1] != k;
    if (last) {
      if (run_end)
        run_end[v] = (int32_t)(j + 1);
      if (j == n - 1 || keys[j + 1] == VC_KEY_EMPTY)
        *n_unique = v + 1; /* the last non-EMPTY row */
    }
  }
}

/* Features of voxel v, channel c: FIRST = the run's first point (input
 * order), MEAN = fp64 sum over the run in input order / count. */
__global__ void vc_voxel_feats_kernel(const float *__restrict__ pts, int32_t fields,
                                      const int32_t *__restrict__ rows,
                                      const int32_t *__restrict__ run_start,
                                      const int32_t *__restrict__ run_end,
                                      int64_t n_max, const VcVoxStatus *st,
                                      int32_t n_feat, int mean,
                                      float *__restrict__ feats) {
  if (st->bad != VC_NO_ROW)
    return;
  const int64_t n_vox = st->n_unique;
  const int64_t total = n_vox * n_feat;
  (void)n_max;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t v = t / n_feat;
    const int32_t c = (int32_t)(t - v * n_feat);
    const int32_t s = run_start[v], e = run_end[v];
    if (!mean) {
      feats[t] = pts[(int64_t)rows[s] * fields + c];
      continue;
    }
    double sum = 0;
    for (int32_t r = s; r < e; r++)
      sum += pts[(int64_t)rows[r] * fields + c];
    feats[t] = (float)(sum / (double)(e - s));
  }
}

/* ---- host ---------------------------------------------------------------- */
static const int kVoxBlock = 256;

static unsigned vc_vox_grid(const voxconv_handle_t *h, int64_t n) {
  const int64_t cap = (int64_t)vc_cuda_state(h)->sm_count * 16;
  return vc_grid_1d(n, kVoxBlock, cap > 0 ? cap : 2048);
}

/* Sort (keys, rows) by key, stable; then heads, scan and runs. keys/rows
 * are consumed; sorted copies stay in *skeys / *srows. */
static voxconv_status_t vc_sort_runs(VcWorkspace &ws, voxconv_handle_t *h,
                                     unsigned long long *keys, int32_t *rows,
                                     int64_t n, VcVoxStatus *d_st,
                                     int32_t *coords_out, int32_t **run_start,
                                     int32_t **run_end, int64_t *row_voxel,
                                     unsigned long long **skeys,
                                     int32_t **srows) {
  const cudaStream_t stream = vc_cuda_stream(h);
  VC_CHECK(ws.get<unsigned long long>(n, skeys, "sorted keys"));
  VC_CHECK(ws.get<int32_t>(n, srows, "sorted rows"));
  int32_t *head = NULL;
  VC_CHECK(ws.get<int32_t>(n, &head, "run heads"));
  size_t sort_bytes = 0, scan_bytes = 0;
  VC_CUDA_TRY(h, cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, keys, *skeys,
                                                 rows, *srows, n, 0, 64, stream));
  VC_CUDA_TRY(h, cub::DeviceScan::InclusiveSum(NULL, scan_bytes, head, head, n,
                                               stream));
  const size_t tmp_bytes = sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
  unsigned char *tmp = NULL;
  VC_CHECK(ws.get<unsigned char>((int64_t)tmp_bytes, &tmp, "CUB workspace"));
  size_t b = tmp_bytes;
  VC_CUDA_TRY(h, cub::DeviceRadixSort::SortPairs(tmp, b, keys, *skeys, rows,
                                                 *srows, n, 0, 64, stream));
  vc_run_heads_kernel<<<vc_vox_grid(h, n), kVoxBlock, 0, stream>>>(*skeys, n,
                                                                   head);
  VC_CUDA_LAUNCH_CHECK(h, "vc_run_heads_kernel");
  b = tmp_bytes;
  VC_CUDA_TRY(h, cub::DeviceScan::InclusiveSum(tmp, b, head, head, n, stream));
  if (run_start) {
    VC_CHECK(ws.get<int32_t>(n, run_start, "run starts"));
    VC_CHECK(ws.get<int32_t>(n, run_end, "run ends"));
  }
  vc_runs_kernel<<<vc_vox_grid(h, n), kVoxBlock, 0, stream>>>(
      *skeys, *srows, head, n, d_st, coords_out, run_start ? *run_start : NULL,
      run_end ? *run_end : NULL, row_voxel, &d_st->n_unique);
  VC_CUDA_LAUNCH_CHECK(h, "vc_runs_kernel");
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t vc_read_vox_status(voxconv_handle_t *h,
                                           const VcVoxStatus *d_st,
                                           VcVoxStatus *hs) {
  VC_CUDA_TRY(h, cudaMemcpyAsync(hs, d_st, sizeof *hs, cudaMemcpyDeviceToHost,
                                 vc_cuda_stream(h)));
  VC_CUDA_TRY(h, cudaStreamSynchronize(vc_cuda_stream(h)));
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_voxelize(
    voxconv_handle_t *h, const voxconv_voxelize_desc_t *desc,
    const voxconv_points_t *points, int32_t n_feat, int32_t *coords_out,
    float *feats_out, int64_t *n_voxels, int64_t *point_voxel) {
  static const char *const func = "voxconv_voxelize";
  VC_CUDA_DEVICE_GUARD(h);
  const int64_t n = points->n;
  if (n > INT32_MAX)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: %lld points exceed the CUDA path's int32 point index",
                   func, (long long)n);
  if (((uintptr_t)coords_out & 15u) != 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: coords_out must be 16-byte aligned on CUDA; got %p",
                   func, (void *)coords_out);
  const cudaStream_t stream = vc_cuda_stream(h);
  VcVoxDesc d;
  for (int a = 0; a < 3; a++) {
    d.vs[a] = desc->voxel_size[a];
    d.origin[a] = desc->origin[a];
    d.grid[a] = desc->grid_size[a];
  }
  d.batch = desc->batch;
  d.fields = points->fields;

  VcWorkspace ws(h);
  VcVoxStatus *d_st = NULL;
  unsigned long long *keys = NULL, *skeys = NULL;
  int32_t *rows = NULL, *srows = NULL, *run_start = NULL, *run_end = NULL;
  VC_CHECK(ws.get<VcVoxStatus>(1, &d_st, "voxelize status"));
  VC_CHECK(ws.get<unsigned long long>(n, &keys, "voxel keys"));
  VC_CHECK(ws.get<int32_t>(n, &rows, "voxel point rows"));
  vc_vox_status_init_kernel<<<1, 1, 0, stream>>>(d_st);
  VC_CUDA_LAUNCH_CHECK(h, "vc_vox_status_init_kernel");
  vc_voxel_keys_kernel<<<vc_vox_grid(h, n), kVoxBlock, 0, stream>>>(
      points->data, n, points->batch, d, keys, rows, &d_st->bad);
  VC_CUDA_LAUNCH_CHECK(h, "vc_voxel_keys_kernel");
  const int want_feats = feats_out != NULL && n_feat > 0;
  VC_CHECK(vc_sort_runs(ws, h, keys, rows, n, d_st, coords_out,
                        want_feats ? &run_start : NULL,
                        want_feats ? &run_end : NULL, point_voxel, &skeys,
                        &srows));
  if (want_feats) {
    vc_voxel_feats_kernel<<<vc_vox_grid(h, n * n_feat), kVoxBlock, 0, stream>>>(
        points->data, points->fields, srows, run_start, run_end, n, d_st,
        n_feat, desc->reduce == VOXCONV_REDUCE_MEAN, feats_out);
    VC_CUDA_LAUNCH_CHECK(h, "vc_voxel_feats_kernel");
  }
  VcVoxStatus hs;
  VC_CHECK(vc_read_vox_status(h, d_st, &hs));
  if (hs.bad != VC_NO_ROW) {
    /* Rebuild the CPU's message from the failing point (failure path:
     * a second small read-back). */
    const int64_t i = (int64_t)hs.bad;
    float p[3];
    int32_t b = desc->batch;
    VC_CUDA_TRY(h, cudaMemcpyAsync(p, points->data + i * points->fields,
                                   sizeof p, cudaMemcpyDeviceToHost, stream));
    if (points->batch)
      VC_CUDA_TRY(h, cudaMemcpyAsync(&b, points->batch + i, sizeof b,
                                     cudaMemcpyDeviceToHost, stream));
    VC_CUDA_TRY(h, cudaStreamSynchronize(stream));
    uint64_t key;
    int axis = 0;
    float value = 0;
    switch (vc_classify_point(d, p, b, &key, &axis, &value)) {
    case VC_PT_NONFINITE:
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: point %lld: %c=%g is not finite", func, (long long)i,
                     vc_axis_names[axis], (double)value);
    case VC_PT_BAD_BATCH:
      return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                     "%s: point %lld: batch=%d outside 0..%d", func,
                     (long long)i, (int)b, VOXCONV_BATCH_MAX);
    case VC_PT_BAD_INDEX:
      return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                     "%s: point %lld: voxel index %c=%.9g outside ±%d (no "
                     "grid_size bound on %c; set one to drop such points)",
                     func, (long long)i, vc_axis_names[axis], (double)value,
                     VOXCONV_COORD_MAX, vc_axis_names[axis]);
    default:
      return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                     "%s: point %lld flagged on the GPU but valid on the host",
                     func, (long long)i);
    }
  }
  *n_voxels = hs.n_unique;
  return VOXCONV_STATUS_SUCCESS;
}

extern "C" voxconv_status_t vc_cuda_merge_duplicates(voxconv_handle_t *h,
                                                     const voxconv_coords_t *in,
                                                     int32_t *out_coords,
                                                     int64_t *n_unique,
                                                     int64_t *row_map) {
  static const char *const func = "voxconv_merge_duplicates";
  static const char *const field_names[4] = {"batch", "x", "y", "z"};
  VC_CUDA_DEVICE_GUARD(h);
  const int64_t n = in->n;
  if (n > INT32_MAX)
    return vc_fail(h, VOXCONV_STATUS_UNSUPPORTED,
                   "%s: %lld rows exceed the CUDA path's int32 row index", func,
                   (long long)n);
  if ((((uintptr_t)in->data | (uintptr_t)out_coords) & 15u) != 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: coordinates must be 16-byte aligned on CUDA; in=%p "
                   "out=%p",
                   func, (const void *)in->data, (void *)out_coords);
  const cudaStream_t stream = vc_cuda_stream(h);
  VcWorkspace ws(h);
  VcVoxStatus *d_st = NULL;
  unsigned long long *keys = NULL, *skeys = NULL;
  int32_t *rows = NULL, *srows = NULL;
  VC_CHECK(ws.get<VcVoxStatus>(1, &d_st, "merge status"));
  VC_CHECK(ws.get<unsigned long long>(n, &keys, "merge keys"));
  VC_CHECK(ws.get<int32_t>(n, &rows, "merge rows"));
  vc_vox_status_init_kernel<<<1, 1, 0, stream>>>(d_st);
  VC_CUDA_LAUNCH_CHECK(h, "vc_vox_status_init_kernel");
  /* All reads of in->data happen here, before any write of out_coords, so
   * the two may alias (as on the CPU). */
  vc_merge_keys_kernel<<<vc_vox_grid(h, n), kVoxBlock, 0, stream>>>(
      in->data, n, keys, rows, &d_st->bad);
  VC_CUDA_LAUNCH_CHECK(h, "vc_merge_keys_kernel");
  VC_CHECK(vc_sort_runs(ws, h, keys, rows, n, d_st, out_coords, NULL, NULL,
                        row_map, &skeys, &srows));
  VcVoxStatus hs;
  VC_CHECK(vc_read_vox_status(h, d_st, &hs));
  if (hs.bad != VC_NO_ROW) {
    const int64_t i = (int64_t)hs.bad;
    int32_t r[4];
    VC_CUDA_TRY(h, cudaMemcpyAsync(r, in->data + 4 * i, sizeof r,
                                   cudaMemcpyDeviceToHost, stream));
    VC_CUDA_TRY(h, cudaStreamSynchronize(stream));
    if (r[0] < 0 || r[0] > VOXCONV_BATCH_MAX)
      return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                     "%s: %s row %lld: batch=%d outside 0..%d", func, "coords",
                     (long long)i, (int)r[0], VOXCONV_BATCH_MAX);
    for (int f = 1; f < 4; f++)
      if (r[f] < VOXCONV_COORD_MIN || r[f] > VOXCONV_COORD_MAX)
        return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                       "%s: %s row %lld: %s=%d outside ±%d", func, "coords",
                       (long long)i, field_names[f], (int)r[f],
                       VOXCONV_COORD_MAX);
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "%s: row %lld flagged on the GPU but valid on the host", func,
                   (long long)i);
  }
  *n_unique = hs.n_unique;
  return VOXCONV_STATUS_SUCCESS;
}
