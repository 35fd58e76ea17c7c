/* voxconv_voxelize: points -> sorted unique voxels (+ reduced features).
 *
 * Indices are computed in float32, floorf((p - origin) / voxel_size), the
 * same arithmetic on every backend (a subtraction and a division cannot be
 * contracted into an FMA, so the CPU and GPU agree bit for bit). */
#include "vc_hash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

#define POINT_GRAIN 16384

static const char axis_names[3] = {'x', 'y', 'z'};

typedef struct {
  const voxconv_voxelize_desc_t *desc;
  const voxconv_points_t *points;
  uint64_t *keys;     /* [n]: VC_KEY_EMPTY when dropped */
  int64_t *first_bad; /* [n_chunks] lowest failing point of a chunk or -1 */
} voxel_key_ctx_t;

typedef enum {
  POINT_OK = 0,
  POINT_DROPPED,
  POINT_NONFINITE, /* axis in *axis */
  POINT_BAD_BATCH,
  POINT_BAD_INDEX /* axis in *axis */
} point_class_t;

/* Classifies point i and computes its key when it is kept. */
static point_class_t classify_point(const voxconv_voxelize_desc_t *d,
                                    const voxconv_points_t *pts, int64_t i,
                                    uint64_t *key, int *axis, float *value) {
  const float *p = pts->data + i * (int64_t)pts->fields;
  for (int a = 0; a < 3; a++)
    if (!isfinite(p[a])) {
      *axis = a;
      *value = p[a];
      return POINT_NONFINITE;
    }
  const int32_t b = pts->batch ? pts->batch[i] : d->batch;
  if (b < 0 || b > VOXCONV_BATCH_MAX)
    return POINT_BAD_BATCH;
  int32_t c[3];
  int dropped = 0;
  for (int a = 0; a < 3; a++) {
    const float t = floorf((p[a] - d->origin[a]) / d->voxel_size[a]);
    if (d->grid_size[a] > 0) {
      if (!(t >= 0.0f && t < (float)d->grid_size[a])) {
        dropped = 1; /* keep checking: a later axis may still be an error */
        continue;
      }
    } else if (!(t >= (float)VOXCONV_COORD_MIN &&
                 t <= (float)VOXCONV_COORD_MAX)) {
      *axis = a;
      *value = t;
      return POINT_BAD_INDEX;
    }
    c[a] = (int32_t)t;
  }
  if (dropped)
    return POINT_DROPPED;
  *key = vc_pack_key(b, c[0], c[1], c[2]);
  return POINT_OK;
}

static void voxel_key_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const voxel_key_ctx_t *c = (const voxel_key_ctx_t *)ctx;
  int64_t bad = -1;
  for (int64_t i = begin; i < end; i++) {
    uint64_t key = VC_KEY_EMPTY;
    int axis;
    float value;
    const point_class_t pc =
        classify_point(c->desc, c->points, i, &key, &axis, &value);
    if (pc != POINT_OK)
      key = VC_KEY_EMPTY;
    if (pc > POINT_DROPPED && bad < 0)
      bad = i;
    c->keys[i] = key;
  }
  c->first_bad[begin / POINT_GRAIN] = bad;
}

static voxconv_status_t point_error(voxconv_handle_t *h,
                                    const voxconv_voxelize_desc_t *d,
                                    const voxconv_points_t *pts, int64_t i) {
  static const char *const func = "voxconv_voxelize";
  uint64_t key;
  int axis = 0;
  float value = 0;
  switch (classify_point(d, pts, i, &key, &axis, &value)) {
  case POINT_NONFINITE:
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: point %lld: %c=%g is not finite", func, (long long)i,
                   axis_names[axis], (double)value);
  case POINT_BAD_BATCH:
    return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                   "%s: point %lld: batch=%d outside 0..%d", func, (long long)i,
                   (int)pts->batch[i], VOXCONV_BATCH_MAX);
  case POINT_BAD_INDEX:
    return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                   "%s: point %lld: voxel index %c=%.9g outside ±%d (no "
                   "grid_size bound on %c; set one to drop such points)",
                   func, (long long)i, axis_names[axis], (double)value,
                   VOXCONV_COORD_MAX, axis_names[axis]);
  default:
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "%s: point %lld flagged but valid", func, (long long)i);
  }
}

static voxconv_status_t
voxelize_cpu(voxconv_handle_t *h, const voxconv_voxelize_desc_t *d,
             const voxconv_points_t *pts, int32_t n_feat, int32_t *coords_out,
             float *feats_out, int64_t *n_voxels, int64_t *point_voxel) {
  const int64_t n = pts->n;
  const int64_t n_chunks = (n + POINT_GRAIN - 1) / POINT_GRAIN;
  uint64_t *keys = NULL;
  int64_t *rows = NULL, *first_bad = NULL;
  voxconv_status_t st =
      vc_alloc(h, (size_t)n * sizeof *keys, (void **)&keys, "voxel keys");
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_alloc(h, (size_t)n * sizeof *rows, (void **)&rows,
                  "voxel point rows");
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_host_alloc(h, (size_t)(n_chunks ? n_chunks : 1) * sizeof *first_bad,
                       (void **)&first_bad, "voxelize partials");
  if (st != VOXCONV_STATUS_SUCCESS)
    goto done;

  voxel_key_ctx_t kc = {d, pts, keys, first_bad};
  vc_parallel_for(h, n, POINT_GRAIN, voxel_key_task, &kc);
  for (int64_t c = 0; c < n_chunks; c++)
    if (first_bad[c] >= 0) {
      st = point_error(h, d, pts, first_bad[c]);
      goto done;
    }

  /* Kept points in input order; the stable sort keeps that order inside
   * each voxel, so the first point of a run is the first in input order. */
  int64_t n_kept = 0;
  for (int64_t i = 0; i < n; i++) {
    if (keys[i] == VC_KEY_EMPTY) {
      if (point_voxel)
        point_voxel[i] = -1;
      continue;
    }
    keys[n_kept] = keys[i];
    rows[n_kept++] = i;
  }
  st = vc_radix_sort_keys(h, keys, rows, n_kept);
  if (st != VOXCONV_STATUS_SUCCESS)
    goto done;

  const int32_t fields = pts->fields;
  const int want_feats = feats_out != NULL && n_feat > 0;
  int64_t v = -1;
  for (int64_t j = 0; j < n_kept;) {
    int64_t e = j + 1;
    while (e < n_kept && keys[e] == keys[j])
      e++;
    v++;
    vc_unpack_key(keys[j], coords_out + 4 * v);
    for (int64_t r = j; r < e; r++)
      if (point_voxel)
        point_voxel[rows[r]] = v;
    if (want_feats) {
      float *f = feats_out + v * (int64_t)n_feat;
      if (d->reduce == VOXCONV_REDUCE_FIRST) {
        memcpy(f, pts->data + rows[j] * (int64_t)fields,
               (size_t)n_feat * sizeof *f);
      } else {
        /* fp64 sums in input order: exact enough that the result is the
         * correctly rounded mean for any realistic count. */
        for (int32_t c = 0; c < n_feat; c++) {
          double sum = 0;
          for (int64_t r = j; r < e; r++)
            sum += pts->data[rows[r] * (int64_t)fields + c];
          f[c] = (float)(sum / (double)(e - j));
        }
      }
    }
    j = e;
  }
  *n_voxels = v + 1;
done:
  vc_free(h, keys);
  vc_free(h, rows);
  free(first_bad);
  return st;
}

voxconv_status_t voxconv_voxelize(voxconv_handle_t *h,
                                  const voxconv_voxelize_desc_t *desc,
                                  const voxconv_points_t *points,
                                  int32_t n_feat, int32_t *coords_out,
                                  float *feats_out, int64_t *n_voxels,
                                  int64_t *point_voxel) {
  static const char *const func = "voxconv_voxelize";
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, desc, "desc");
  VC_CHECK_NULL(h, points, "points");
  VC_CHECK_NULL(h, n_voxels, "n_voxels");
  for (int a = 0; a < 3; a++) {
    const float vs = desc->voxel_size[a];
    if (!(isfinite(vs) && vs > 0.0f))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: voxel_size[%d] (%c) = %g must be finite and > 0",
                     func, a, axis_names[a], (double)vs);
    if (!isfinite(desc->origin[a]))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: origin[%d] (%c) = %g is not finite", func, a,
                     axis_names[a], (double)desc->origin[a]);
    if (desc->grid_size[a] < 0)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: grid_size[%d] (%c) = %d is negative (0 = no bound)",
                     func, a, axis_names[a], (int)desc->grid_size[a]);
    /* Indices inside the grid must be valid coordinates, or they would be
     * packed into keys of other cells. */
    if (desc->grid_size[a] > VOXCONV_COORD_MAX + 1)
      return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                     "%s: grid_size[%d] (%c) = %d exceeds the coordinate "
                     "limit (indices 0..%d)",
                     func, a, axis_names[a], (int)desc->grid_size[a],
                     VOXCONV_COORD_MAX);
  }
  if (desc->reduce != VOXCONV_REDUCE_FIRST &&
      desc->reduce != VOXCONV_REDUCE_MEAN)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: reduce %d is not FIRST(0) or MEAN(1)", func,
                   (int)desc->reduce);
  if (points->fields < 3)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: points->fields=%d < 3 (x, y, z come first)", func,
                   (int)points->fields);
  if (n_feat < 0 || n_feat > points->fields)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: n_feat=%d outside 0..points->fields (%d)", func,
                   (int)n_feat, (int)points->fields);
  if (points->n < 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT, "%s: points->n=%lld < 0",
                   func, (long long)points->n);
  if (points->batch == NULL &&
      (desc->batch < 0 || desc->batch > VOXCONV_BATCH_MAX))
    return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                   "%s: desc->batch=%d outside 0..%d", func, (int)desc->batch,
                   VOXCONV_BATCH_MAX);
  *n_voxels = 0;
  if (points->n == 0)
    return VOXCONV_STATUS_SUCCESS;
  VC_CHECK_NULL(h, points->data, "points->data");
  VC_CHECK_NULL(h, coords_out, "coords_out");
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_voxelize(h, desc, points, n_feat, coords_out, feats_out,
                            n_voxels, point_voxel);
#endif
  return voxelize_cpu(h, desc, points, n_feat, coords_out, feats_out, n_voxels,
                      point_voxel);
}
