/* The public kernel-map API: argument validation, tensor-stride rules and
 * dispatch to the CPU builder (kmap_cpu.c) or the CUDA one (src/cuda);
 * queries, verification and voxconv_merge_duplicates. */
#include "vc_hash.h"

#include <stdlib.h>
#include <string.h>

#ifdef VOXCONV_HAVE_CUDA
#include "../cuda/vc_cuda.h"
#endif

static const char axis_names[3] = {'x', 'y', 'z'};

const char *vc_kmap_mode_name(voxconv_kmap_mode_t mode) {
  switch (mode) {
  case VOXCONV_KMAP_SUBMANIFOLD:
    return "SUBMANIFOLD";
  case VOXCONV_KMAP_STRIDED:
    return "STRIDED";
  case VOXCONV_KMAP_TRANSPOSED:
    return "TRANSPOSED";
  case VOXCONV_KMAP_GENERATIVE:
    return "GENERATIVE";
  case VOXCONV_KMAP_EXPANDING:
    return "EXPANDING";
  }
  return "?";
}

void vc_kmap_fill_offsets(voxconv_kmap_t *kmap) {
  const int32_t *ks = kmap->desc.kernel_size;
  const int32_t *d = kmap->desc.dilation;
  const int32_t p[3] = {vc_kmap_pad(&kmap->desc, 0),
                        vc_kmap_pad(&kmap->desc, 1),
                        vc_kmap_pad(&kmap->desc, 2)};
  const int32_t K = ks[0] * ks[1] * ks[2];
  for (int32_t k = 0; k < K; k++) {
    int32_t j[3];
    vc_kidx_taps(kmap->desc.offset_order, ks, k, j);
    for (int a = 0; a < 3; a++)
      kmap->offsets[k][a] = j[a] * d[a] - p[a];
  }
  kmap->kvol = K;
}

void vc_kmap_free_buffers(voxconv_handle_t *h, voxconv_kmap_t *kmap) {
  vc_free(h, kmap->out_coords);
  vc_free(h, kmap->in_coords);
  kmap->in_coords = NULL;
  vc_free(h, kmap->in_rows);
  vc_free(h, kmap->out_rows);
  vc_free(h, kmap->nbr_out);
  vc_free(h, kmap->nbr_in);
  vc_free(h, kmap->row_mask_out);
  vc_free(h, kmap->row_mask_in);
  kmap->row_mask_out = kmap->row_mask_in = NULL;
  vc_free(h, kmap->row_order_out);
  if (kmap->row_order_in != kmap->row_order_out) /* dgrad may share it */
    vc_free(h, kmap->row_order_in);
  kmap->row_order_out = kmap->row_order_in = NULL;
  vc_free(h, kmap->tile_mask_out);
  vc_free(h, kmap->tile_mask_in);
  kmap->tile_mask_out = kmap->tile_mask_in = NULL;
  free(kmap->pair_offsets); /* host memory from vc_host_alloc (malloc) */
  kmap->out_coords = kmap->in_rows = kmap->out_rows = NULL;
  kmap->nbr_out = kmap->nbr_in = NULL;
  kmap->pair_offsets = NULL;
}

/* A coordinate set's row count and data pointer. */
static voxconv_status_t check_coords_arg(voxconv_handle_t *h, const char *func,
                                         const char *name,
                                         const voxconv_coords_t *c) {
  if (c->n < 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT, "%s: %s->n=%lld < 0",
                   func, name, (long long)c->n);
  if (c->n > INT32_MAX)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: %s->n=%lld exceeds the int32 row index of kernel "
                   "maps (max %d)",
                   func, name, (long long)c->n, INT32_MAX);
  if (c->n > 0 && c->data == NULL)
    return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                   "%s: %s->data is NULL with %s->n=%lld", func, name, name,
                   (long long)c->n);
  return VOXCONV_STATUS_SUCCESS;
}

/* Tensor stride with 0 meaning 1; negative is an error. */
static voxconv_status_t tensor_stride_of(voxconv_handle_t *h, const char *func,
                                         const char *name,
                                         const voxconv_coords_t *c,
                                         int32_t ts[3]) {
  for (int a = 0; a < 3; a++) {
    if (c->tensor_stride[a] < 0)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: %s->tensor_stride[%d] (%c) = %d is negative", func,
                     name, a, axis_names[a], (int)c->tensor_stride[a]);
    ts[a] = c->tensor_stride[a] ? c->tensor_stride[a] : 1;
  }
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t check_allocator(voxconv_handle_t *h, const char *func,
                                       const voxconv_kmap_t *m) {
  if (h->has_allocator == m->has_allocator &&
      (!m->has_allocator || (h->allocator.alloc == m->allocator.alloc &&
                             h->allocator.free == m->allocator.free &&
                             h->allocator.ctx == m->allocator.ctx)))
    return VOXCONV_STATUS_SUCCESS;
  /* Freeing the map's blocks through another allocator would hand them to
   * code that never gave them out (a crash, or a corrupted pool). */
  return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                 "%s: the map was built by a handle with %s allocator, this "
                 "handle has %s: handles that share kernel maps must share "
                 "one allocator (the built-in one, or one voxconv_allocator_t "
                 "with the same alloc, free and ctx)",
                 func, m->has_allocator ? "a custom" : "the built-in",
                 !h->has_allocator ? "the built-in one"
                 : m->has_allocator ? "another"
                                    : "a custom one");
}

voxconv_status_t vc_kmap_check_handle(voxconv_handle_t *h, const char *func,
                                      const voxconv_kmap_t *m) {
  if (m->backend != h->backend)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: kmap was built on the %s backend but the handle is "
                   "%s (build the map with a handle of the same backend)",
                   func, vc_backend_name(m->backend),
                   vc_backend_name(h->backend));
  if (h->backend == VOXCONV_BACKEND_CUDA && m->device != h->device)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: kmap lives on CUDA device %d but the handle uses "
                   "device %d",
                   func, m->device, h->device);
  return check_allocator(h, func, m);
}

/* A new map records its building handle's allocator. */
static void take_allocator(voxconv_kmap_t *m, const voxconv_handle_t *h) {
  m->allocator = h->allocator;
  m->has_allocator = h->has_allocator;
}

/* A map whose build (or inversion) failed: everything it holds is freed
 * and the build's status returned. */
static voxconv_status_t discard_failed(voxconv_handle_t *h, voxconv_kmap_t *m,
                                       voxconv_status_t st) {
  vc_kmap_free_buffers(h, m);
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    vc_cuda_kmap_free_priv(h, m);
#endif
  free(m);
  return st;
}

/* voxconv_kmap_build_bounded's bounds: in range and ordered. */
static voxconv_status_t check_bounds_arg(voxconv_handle_t *h, const char *func,
                                        const voxconv_coords_bounds_t *b) {
  static const char *const names[4] = {"batch", "x", "y", "z"};
  for (int f = 0; f < 4; f++) {
    const int32_t least = f == 0 ? 0 : VOXCONV_COORD_MIN;
    const int32_t most = f == 0 ? VOXCONV_BATCH_MAX : VOXCONV_COORD_MAX;
    if (b->lo[f] < least || b->hi[f] > most || b->lo[f] > b->hi[f])
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: in_bounds %s lo=%d hi=%d: needs %d <= lo <= hi <= "
                     "%d",
                     func, names[f], (int)b->lo[f], (int)b->hi[f], (int)least,
                     (int)most);
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* CPU maps: the declared bounds hold for every input row (checked after
 * the build, so that out-of-range and duplicate rows are reported first,
 * as the CUDA build does), and the outputs' bounds. */
static voxconv_status_t cpu_bounds(voxconv_handle_t *h, voxconv_kmap_t *m,
                                   const voxconv_coords_t *in) {
  if (m->has_in_bounds)
    for (int64_t i = 0; i < in->n; i++)
      if (!vc_row_in_bounds(in->data + 4 * i, &m->in_bounds)) {
        char msg[VC_ERROR_MAX];
        const voxconv_status_t st = vc_bounds_violation(
            msg, sizeof msg, (unsigned long long)i, in->data + 4 * i,
            &m->in_bounds);
        return vc_fail(h, st, "%s", msg);
      }
  if (m->desc.mode != VOXCONV_KMAP_STRIDED)
    return VOXCONV_STATUS_SUCCESS;
  voxconv_coords_bounds_t *o = &m->out_bounds;
  for (int f = 0; f < 4; f++) {
    o->lo[f] = 0;
    o->hi[f] = -1;
  }
  for (int64_t i = 0; i < m->n_out; i++)
    for (int f = 0; f < 4; f++) {
      const int32_t v = m->out_coords[4 * i + f];
      if (i == 0 || v < o->lo[f])
        o->lo[f] = v;
      if (i == 0 || v > o->hi[f])
        o->hi[f] = v;
    }
  m->has_out_bounds = 1;
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t kmap_build(voxconv_handle_t *h,
                                   const voxconv_kmap_desc_t *desc,
                                   const voxconv_coords_t *in,
                                   const voxconv_coords_t *out,
                                   const voxconv_coords_bounds_t *in_bounds,
                                   voxconv_kmap_t **kmap, int defer) {
  static const char *const func = "voxconv_kmap_build";
  VC_CHECK_NULL(NULL, h, "handle");
  /* No wait for the build worker yet: a build it takes only queues. */
  vc_clear_error_only(h);
  VC_CHECK_NULL(h, kmap, "kmap");
  *kmap = NULL;
  VC_CHECK_NULL(h, desc, "desc");
  VC_CHECK_NULL(h, in, "in");

  voxconv_kmap_desc_t d = *desc;
  if (d.mode != VOXCONV_KMAP_SUBMANIFOLD && d.mode != VOXCONV_KMAP_STRIDED &&
      d.mode != VOXCONV_KMAP_TRANSPOSED && d.mode != VOXCONV_KMAP_GENERATIVE &&
      d.mode != VOXCONV_KMAP_EXPANDING)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: mode %d is not SUBMANIFOLD(0), STRIDED(1), "
                   "TRANSPOSED(2), GENERATIVE(3) or EXPANDING(4)",
                   func, (int)d.mode);
  if (d.padded != 0 && d.padded != 1)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: padded = %d is not 0 (centred offsets) or 1 "
                   "(padding[])",
                   func, (int)d.padded);
  if (d.offset_order != VOXCONV_OFFSET_ORDER_X_SLOWEST &&
      d.offset_order != VOXCONV_OFFSET_ORDER_X_FASTEST)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: offset_order = %d is not X_SLOWEST(0) or "
                   "X_FASTEST(1)",
                   func, (int)d.offset_order);
  for (int a = 0; a < 3; a++) {
    if (d.kernel_size[a] < 1 || d.kernel_size[a] > VOXCONV_KERNEL_SIZE_MAX)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: kernel_size[%d] (%c) = %d outside 1..%d", func, a,
                     axis_names[a], (int)d.kernel_size[a],
                     VOXCONV_KERNEL_SIZE_MAX);
    if (d.stride[a] == 0)
      d.stride[a] = 1;
    if (d.stride[a] < 1 || d.stride[a] > VOXCONV_STRIDE_MAX)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: stride[%d] (%c) = %d outside 1..%d (0 means 1)", func,
                     a, axis_names[a], (int)d.stride[a], VOXCONV_STRIDE_MAX);
    if (d.dilation[a] == 0)
      d.dilation[a] = 1;
    if (d.dilation[a] < 1 || d.dilation[a] > VOXCONV_DILATION_MAX)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: dilation[%d] (%c) = %d outside 1..%d (0 means 1)",
                     func, a, axis_names[a], (int)d.dilation[a],
                     VOXCONV_DILATION_MAX);
    const int32_t pmax = d.dilation[a] * (d.kernel_size[a] - 1);
    if (!d.padded && d.padding[a] != 0)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: padding[%d] (%c) = %d but padded = 0 (centred "
                     "offsets): set padded = 1 to use padding[]",
                     func, a, axis_names[a], (int)d.padding[a]);
    if (d.padded && (d.padding[a] < 0 || d.padding[a] > pmax))
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: padding[%d] (%c) = %d outside 0..%d "
                     "(dilation * (kernel_size - 1))",
                     func, a, axis_names[a], (int)d.padding[a], (int)pmax);
    if (d.out_shape[a] < 0 || d.out_shape[a] > VOXCONV_COORD_MAX + 1)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: out_shape[%d] (%c) = %d outside 0..%d (0 = "
                     "unbounded)",
                     func, a, axis_names[a], (int)d.out_shape[a],
                     VOXCONV_COORD_MAX + 1);
    if (d.out_shape[a] != 0 && d.mode != VOXCONV_KMAP_EXPANDING &&
        d.mode != VOXCONV_KMAP_GENERATIVE)
      return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                     "%s: out_shape[%d] (%c) = %d, but only EXPANDING and "
                     "GENERATIVE maps take out_shape (%s needs 0)",
                     func, a, axis_names[a], (int)d.out_shape[a],
                     vc_kmap_mode_name(d.mode));
  }
  if (d.mode == VOXCONV_KMAP_SUBMANIFOLD)
    for (int a = 0; a < 3; a++)
      if (d.stride[a] != 1)
        return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                       "%s: SUBMANIFOLD needs stride 1, got stride[%d] (%c) "
                       "= %d",
                       func, a, axis_names[a], (int)d.stride[a]);
  if (d.mode == VOXCONV_KMAP_TRANSPOSED && out == NULL)
    return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                   "%s: TRANSPOSED needs the output coordinates (out is "
                   "NULL)",
                   func);
  if (d.mode != VOXCONV_KMAP_TRANSPOSED && out != NULL)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: out must be NULL for %s (the map computes its "
                   "outputs; only TRANSPOSED takes them)",
                   func, vc_kmap_mode_name(d.mode));
  VC_CHECK(check_coords_arg(h, func, "in", in));
  if (out)
    VC_CHECK(check_coords_arg(h, func, "out", out));
  if (in_bounds && d.mode != VOXCONV_KMAP_STRIDED)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: in_bounds are for STRIDED builds (the only ones that "
                   "sort their outputs); this is %s: pass NULL",
                   func, vc_kmap_mode_name(d.mode));
  if (in_bounds)
    VC_CHECK(check_bounds_arg(h, func, in_bounds));

  int32_t in_ts[3], out_ts[3];
  VC_CHECK(tensor_stride_of(h, func, "in", in, in_ts));
  switch (d.mode) {
  case VOXCONV_KMAP_SUBMANIFOLD:
    memcpy(out_ts, in_ts, sizeof out_ts);
    break;
  case VOXCONV_KMAP_STRIDED:
  case VOXCONV_KMAP_EXPANDING:
    for (int a = 0; a < 3; a++) {
      const int64_t t = (int64_t)in_ts[a] * d.stride[a];
      if (t > INT32_MAX)
        return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                       "%s: output tensor stride %c = %d * %d overflows "
                       "int32",
                       func, axis_names[a], (int)in_ts[a], (int)d.stride[a]);
      out_ts[a] = (int32_t)t;
    }
    break;
  case VOXCONV_KMAP_GENERATIVE:
    for (int a = 0; a < 3; a++) {
      if (in_ts[a] % d.stride[a] != 0)
        return vc_fail(h, VOXCONV_STATUS_SHAPE_MISMATCH,
                       "%s: GENERATIVE upsamples by the stride, but "
                       "in->tensor_stride %c = %d is not divisible by "
                       "stride %d",
                       func, axis_names[a], (int)in_ts[a], (int)d.stride[a]);
      out_ts[a] = in_ts[a] / d.stride[a];
    }
    break;
  case VOXCONV_KMAP_TRANSPOSED:
    VC_CHECK(tensor_stride_of(h, func, "out", out, out_ts));
    for (int a = 0; a < 3; a++)
      if ((int64_t)out_ts[a] * d.stride[a] != in_ts[a])
        return vc_fail(h, VOXCONV_STATUS_SHAPE_MISMATCH,
                       "%s: TRANSPOSED needs out->tensor_stride * stride == "
                       "in->tensor_stride, but on %c %d * %d != %d",
                       func, axis_names[a], (int)out_ts[a], (int)d.stride[a],
                       (int)in_ts[a]);
    break;
  }

  voxconv_kmap_t *m = (voxconv_kmap_t *)calloc(1, sizeof *m);
  if (!m)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "%s: out of host memory (%zu bytes for the map)", func,
                   sizeof *m);
  m->backend = h->backend;
  m->device = h->device;
  take_allocator(m, h);
  m->desc = d;
  vc_kmap_fill_offsets(m);
  m->n_in = in->n;
  memcpy(m->in_ts, in_ts, sizeof in_ts);
  memcpy(m->out_ts, out_ts, sizeof out_ts);
  if (in_bounds) {
    m->has_in_bounds = 1;
    m->in_bounds = *in_bounds;
  }

  voxconv_status_t st;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA) {
    const int flags = defer ? VC_BUILD_DEFER : 0;
    /* A build the worker takes (kmap_worker.c): the host-side results are
     * set here, the launches are the worker's. */
    if (h->worker && !vc_stream_capturing(h) &&
        vc_cuda_kmap_preset_async(h, m, flags)) {
      st = vc_build_worker_submit(h, m, in, flags);
      if (st != VOXCONV_STATUS_SUCCESS)
        return discard_failed(h, m, st);
      m->pairs_bound = m->n_pairs;
      *kmap = m;
      return VOXCONV_STATUS_SUCCESS;
    }
    vc_build_worker_drain(h); /* after the builds queued before it */
    vc_capture_scope_begin(h);
    st = vc_cuda_kmap_build(h, m, in, out, flags);
    vc_capture_scope_end(h);
  } else
#endif
  {
    (void)defer; /* CPU builds are synchronous */
    st = vc_cpu_kmap_build(h, m, in, out);
    if (st == VOXCONV_STATUS_SUCCESS)
      st = cpu_bounds(h, m, in);
  }
  if (st != VOXCONV_STATUS_SUCCESS)
    return discard_failed(h, m, st);
  m->pairs_bound = m->n_pairs;
  *kmap = m;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_build(voxconv_handle_t *h,
                                    const voxconv_kmap_desc_t *desc,
                                    const voxconv_coords_t *in,
                                    const voxconv_coords_t *out,
                                    voxconv_kmap_t **kmap) {
  return kmap_build(h, desc, in, out, NULL, kmap, 0);
}

voxconv_status_t voxconv_kmap_build_async(voxconv_handle_t *h,
                                          const voxconv_kmap_desc_t *desc,
                                          const voxconv_coords_t *in,
                                          const voxconv_coords_t *out,
                                          voxconv_kmap_t **kmap) {
  return kmap_build(h, desc, in, out, NULL, kmap, 1);
}

voxconv_status_t voxconv_kmap_build_bounded(
    voxconv_handle_t *h, const voxconv_kmap_desc_t *desc,
    const voxconv_coords_t *in, const voxconv_coords_bounds_t *in_bounds,
    int defer, voxconv_kmap_t **kmap) {
  if (h && defer != 0 && defer != 1) {
    vc_clear_error(h);
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_kmap_build_bounded: defer = %d is not 0 "
                   "(voxconv_kmap_build) or 1 (voxconv_kmap_build_async)",
                   defer);
  }
  return kmap_build(h, desc, in, NULL, in_bounds, kmap, defer);
}

voxconv_status_t voxconv_kmap_inverse(voxconv_handle_t *h,
                                      const voxconv_kmap_t *fwd,
                                      voxconv_kmap_t **inv) {
  static const char *const func = "voxconv_kmap_inverse";
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, inv, "inv");
  *inv = NULL;
  VC_CHECK_NULL(h, fwd, "fwd");
  VC_CHECK(vc_kmap_check_handle(h, func, fwd));
  if (fwd->desc.mode != VOXCONV_KMAP_STRIDED &&
      fwd->desc.mode != VOXCONV_KMAP_EXPANDING)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: fwd is a %s map; only STRIDED and EXPANDING maps have "
                   "an inverse (spconv's SparseInverseConv3d inverts a "
                   "SparseConv3d)",
                   func, vc_kmap_mode_name(fwd->desc.mode));
  /* Both modes build synchronously; a no-op kept for any future
   * asynchronous build of them. */
  VC_CHECK(vc_kmap_wait(h, fwd, func));
  if (fwd->n_in > 0 && fwd->in_coords == NULL)
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "%s: the %s map kept no input coordinates", func,
                   vc_kmap_mode_name(fwd->desc.mode));
  voxconv_kmap_t *m = (voxconv_kmap_t *)calloc(1, sizeof *m);
  if (!m)
    return vc_fail(h, VOXCONV_STATUS_ALLOC_FAILED,
                   "%s: out of host memory (%zu bytes for the map)", func,
                   sizeof *m);
  m->backend = fwd->backend;
  m->device = fwd->device;
  take_allocator(m, h);
  /* The TRANSPOSED map of the same geometry pairs exactly the reversed
   * relation (o' = s*i' + off_k is fwd's i = s*o + off_k), so that is what
   * the inverse reports (and how the tuner keys it). */
  m->desc = fwd->desc;
  m->desc.mode = VOXCONV_KMAP_TRANSPOSED;
  memset(m->desc.out_shape, 0, sizeof m->desc.out_shape);
  vc_kmap_fill_offsets(m);
  m->n_in = fwd->n_out;
  m->n_out = fwd->n_in;
  memcpy(m->in_ts, fwd->out_ts, sizeof m->in_ts);
  memcpy(m->out_ts, fwd->in_ts, sizeof m->out_ts);
  m->in_fingerprint = fwd->out_fingerprint;
  m->n_pairs = fwd->n_pairs;
  voxconv_status_t st =
      vc_host_alloc(h, (size_t)(m->kvol + 1) * sizeof(int64_t),
                    (void **)&m->pair_offsets, "kernel-map pair offsets");
  if (st == VOXCONV_STATUS_SUCCESS) {
    memcpy(m->pair_offsets, fwd->pair_offsets,
           (size_t)(m->kvol + 1) * sizeof(int64_t));
#ifdef VOXCONV_HAVE_CUDA
    if (h->backend == VOXCONV_BACKEND_CUDA)
      st = vc_cuda_kmap_inverse(h, fwd, m);
    else
#endif
      st = vc_cpu_kmap_inverse(h, fwd, m);
  }
  if (st != VOXCONV_STATUS_SUCCESS)
    return discard_failed(h, m, st);
  m->pairs_bound = m->n_pairs;
  *inv = m;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_kmap_poll(voxconv_handle_t *h, const voxconv_kmap_t *m,
                              const char *func) {
  VC_CHECK(vc_kmap_issued(h, m, func));
#ifdef VOXCONV_HAVE_CUDA
  if (m->backend == VOXCONV_BACKEND_CUDA && m->backend_priv)
    return vc_cuda_kmap_poll(h, m, 0, func);
#else
  (void)h, (void)m, (void)func;
#endif
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_kmap_wait(voxconv_handle_t *h, const voxconv_kmap_t *m,
                              const char *func) {
  VC_CHECK(vc_kmap_issued(h, m, func));
#ifdef VOXCONV_HAVE_CUDA
  if (m->backend == VOXCONV_BACKEND_CUDA && m->backend_priv)
    return vc_cuda_kmap_poll(h, m, 1, func);
#else
  (void)h, (void)m, (void)func;
#endif
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_wait(voxconv_handle_t *h,
                                   const voxconv_kmap_t *kmap) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, kmap, "kmap");
  VC_CHECK(vc_kmap_check_handle(h, "voxconv_kmap_wait", kmap));
  return vc_kmap_wait(h, kmap, "voxconv_kmap_wait");
}

voxconv_status_t voxconv_kmap_order(voxconv_handle_t *h,
                                    const voxconv_kmap_t *kmap) {
  static const char *const func = "voxconv_kmap_order";
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, kmap, "kmap");
  VC_CHECK(vc_kmap_check_handle(h, func, kmap));
  VC_CHECK(vc_kmap_issued(h, kmap, func));
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_kmap_order(h, kmap);
#endif
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_destroy(voxconv_handle_t *h,
                                      voxconv_kmap_t *kmap) {
  if (!kmap)
    return VOXCONV_STATUS_SUCCESS;
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  /* Freeing through a handle of another backend would hand device
   * pointers to free() (or host pointers to cudaFree). */
  VC_CHECK(vc_kmap_check_handle(h, "voxconv_kmap_destroy", kmap));
  vc_kmap_issue_wait(kmap); /* built by another handle's worker */
  free(kmap->issue_msg);
  /* Each freed block asks the allocation cache whether the stream is
   * being captured: one query for the map's ~9 blocks (perf-notes 96). */
  vc_capture_scope_begin(h);
#ifdef VOXCONV_HAVE_CUDA
  if (kmap->backend == VOXCONV_BACKEND_CUDA)
    vc_cuda_kmap_free_priv(h, kmap);
#endif
  vc_kmap_free_buffers(h, kmap);
  vc_capture_scope_end(h);
#ifdef VOXCONV_HAVE_CUDA
  if (kmap->backend == VOXCONV_BACKEND_CUDA)
    vc_cuda_reap_pools(); /* its buffers may be a destroyed handle's last */
#endif
  free(kmap);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_get_info(const voxconv_kmap_t *kmap,
                                       voxconv_kmap_info_t *info) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, kmap, "kmap");
  VC_CHECK_NULL(NULL, info, "info");
  memset(info, 0, sizeof *info);
  info->desc = kmap->desc;
  info->kernel_volume = kmap->kvol;
  info->n_in = kmap->n_in;
  /* Read once: a completion on another thread may end `pending` now (and
   * set a deferred map's n_out before it does). */
  const int pending = __atomic_load_n(&kmap->pending, __ATOMIC_ACQUIRE);
  info->n_out = pending && kmap->n_out < 0 ? -1 : kmap->n_out;
  info->n_pairs = pending ? -1 : kmap->n_pairs;
  memcpy(info->in_tensor_stride, kmap->in_ts, sizeof kmap->in_ts);
  memcpy(info->out_tensor_stride, kmap->out_ts, sizeof kmap->out_ts);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_out_bounds(const voxconv_kmap_t *kmap,
                                         voxconv_coords_bounds_t *bounds) {
  static const char *const func = "voxconv_kmap_out_bounds";
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, kmap, "kmap");
  VC_CHECK_NULL(NULL, bounds, "bounds");
  if (kmap->desc.mode != VOXCONV_KMAP_STRIDED)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: a %s map; only STRIDED maps record their outputs' "
                   "bounds",
                   func, vc_kmap_mode_name(kmap->desc.mode));
  /* Set with n_out (vc_cuda_kmap_poll publishes both before `pending`). */
  if (__atomic_load_n(&kmap->pending, __ATOMIC_ACQUIRE) ||
      !kmap->has_out_bounds)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: the map's output count has not arrived yet "
                   "(voxconv_kmap_wait first; this call never waits)",
                   func);
  *bounds = kmap->out_bounds;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_out_coords(const voxconv_kmap_t *kmap,
                                         const int32_t **coords) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, kmap, "kmap");
  VC_CHECK_NULL(NULL, coords, "coords");
  VC_CHECK(vc_kmap_issued(NULL, kmap, "voxconv_kmap_out_coords"));
  *coords = kmap->out_coords;
  return VOXCONV_STATUS_SUCCESS;
}

/* Backend-to-backend copy of map data (both sides backend memory). */
static voxconv_status_t copy_backend(voxconv_handle_t *h, void *dst,
                                     const void *src, size_t bytes) {
  if (bytes == 0)
    return VOXCONV_STATUS_SUCCESS;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_memcpy(h, dst, src, bytes,
                          VOXCONV_MEMCPY_BACKEND_TO_BACKEND);
#else
  (void)h;
#endif
  memcpy(dst, src, bytes);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_get_pairs(voxconv_handle_t *h,
                                        const voxconv_kmap_t *kmap,
                                        int64_t *offsets, int32_t *in_rows,
                                        int32_t *out_rows) {
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, kmap, "kmap");
  VC_CHECK(vc_kmap_check_handle(h, "voxconv_kmap_get_pairs", kmap));
  VC_CHECK(vc_kmap_wait(h, kmap, "voxconv_kmap_get_pairs"));
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    VC_CHECK(vc_cuda_kmap_pairs(h, kmap, "voxconv_kmap_get_pairs"));
#endif
  if (offsets)
    memcpy(offsets, kmap->pair_offsets,
           (size_t)(kmap->kvol + 1) * sizeof *offsets);
  const size_t bytes = (size_t)kmap->n_pairs * sizeof(int32_t);
  if (in_rows)
    VC_CHECK(copy_backend(h, in_rows, kmap->in_rows, bytes));
  if (out_rows)
    VC_CHECK(copy_backend(h, out_rows, kmap->out_rows, bytes));
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_kmap_prepare(voxconv_handle_t *h,
                                      const voxconv_kmap_t *kmap,
                                      unsigned what) {
  static const char *const func = "voxconv_kmap_prepare";
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error_only(h); /* a worker's builds are not waited for */
  VC_CHECK_NULL(h, kmap, "kmap");
  const unsigned all = VOXCONV_PREPARE_FORWARD | VOXCONV_PREPARE_DGRAD |
                       VOXCONV_PREPARE_PAIRS;
  if (what == 0 || (what & ~all))
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: what = 0x%x; want an OR of VOXCONV_PREPARE_FORWARD "
                   "(1), _DGRAD (2) and _PAIRS (4)",
                   func, what);
  VC_CHECK(vc_kmap_check_handle(h, func, kmap));
  if (h->backend != VOXCONV_BACKEND_CUDA)
    return VOXCONV_STATUS_SUCCESS; /* a CPU map has every table */
#ifdef VOXCONV_HAVE_CUDA
  voxconv_kmap_t *m = (voxconv_kmap_t *)kmap;
  if (h->worker && m->issuer == h->worker && !vc_stream_capturing(h))
    return vc_build_worker_prepare(h, m, what);
  vc_clear_error(h); /* now after the builds h's worker has queued */
  VC_CHECK(vc_kmap_issued(h, kmap, func));
  VC_CHECK(vc_kmap_poll(h, kmap, func)); /* completes it if it is done */
  return vc_cuda_kmap_prepare(h, m, what, func);
#else
  return VOXCONV_STATUS_SUCCESS;
#endif
}

voxconv_status_t voxconv_kmap_verify(voxconv_handle_t *h,
                                     const voxconv_kmap_t *kmap,
                                     const voxconv_coords_t *in) {
  static const char *const func = "voxconv_kmap_verify";
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, kmap, "kmap");
  VC_CHECK_NULL(h, in, "in");
  VC_CHECK(vc_kmap_check_handle(h, func, kmap));
  VC_CHECK(vc_kmap_wait(h, kmap, func));
  if (in->n != kmap->n_in)
    return vc_fail(h, VOXCONV_STATUS_KMAP_MISMATCH,
                   "%s: the map was built from %lld input rows, given %lld",
                   func, (long long)kmap->n_in, (long long)in->n);
  if (in->n > 0 && in->data == NULL)
    return vc_fail(h, VOXCONV_STATUS_NULL_POINTER,
                   "%s: in->data is NULL with in->n=%lld", func,
                   (long long)in->n);
  for (int a = 0; a < 3; a++) {
    const int32_t ts = in->tensor_stride[a] ? in->tensor_stride[a] : 1;
    if (ts != kmap->in_ts[a])
      return vc_fail(h, VOXCONV_STATUS_KMAP_MISMATCH,
                     "%s: the map was built for input tensor stride %c = %d, "
                     "given %d",
                     func, axis_names[a], (int)kmap->in_ts[a], (int)ts);
  }
  uint64_t fp = 0;
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    VC_CHECK(vc_cuda_coords_fingerprint(h, in->data, in->n, &fp));
  else
#endif
    VC_CHECK(vc_cpu_coords_check(h, func, "in coords", in->data, in->n, NULL,
                                 &fp, 0));
  if (fp != kmap->in_fingerprint)
    return vc_fail(h, VOXCONV_STATUS_KMAP_MISMATCH,
                   "%s: the %lld input coordinates differ from those the map "
                   "was built from (fingerprint %016llx, map %016llx)",
                   func, (long long)in->n, (unsigned long long)fp,
                   (unsigned long long)kmap->in_fingerprint);
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- merge duplicates -------------------------------------------------- */
static voxconv_status_t merge_cpu(voxconv_handle_t *h,
                                  const voxconv_coords_t *in,
                                  int32_t *out_coords, int64_t *n_unique,
                                  int64_t *row_map) {
  const int64_t n = in->n;
  uint64_t *keys = NULL;
  int64_t *rows = NULL;
  voxconv_status_t st =
      vc_alloc(h, (size_t)n * sizeof *keys, (void **)&keys, "merge keys");
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_alloc(h, (size_t)n * sizeof *rows, (void **)&rows, "merge rows");
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_cpu_coords_check(h, "voxconv_merge_duplicates", "coords", in->data,
                             n, keys, NULL, 1);
  if (st == VOXCONV_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n; i++)
      rows[i] = i;
    st = vc_radix_sort_keys(h, keys, rows, n);
  }
  if (st == VOXCONV_STATUS_SUCCESS) {
    /* Output comes from the keys alone, so out_coords may alias in->data. */
    int64_t u = -1;
    for (int64_t i = 0; i < n; i++) {
      if (i == 0 || keys[i] != keys[i - 1])
        vc_unpack_key(keys[i], out_coords + 4 * ++u);
      if (row_map)
        row_map[rows[i]] = u;
    }
    *n_unique = u + 1;
  }
  vc_free(h, keys);
  vc_free(h, rows);
  return st;
}

voxconv_status_t voxconv_merge_duplicates(voxconv_handle_t *h,
                                          const voxconv_coords_t *in,
                                          int32_t *out_coords,
                                          int64_t *n_unique, int64_t *row_map) {
  static const char *const func = "voxconv_merge_duplicates";
  VC_CHECK_NULL(NULL, h, "handle");
  vc_clear_error(h);
  VC_CHECK_NULL(h, in, "in");
  VC_CHECK_NULL(h, n_unique, "n_unique");
  if (in->n < 0)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT, "%s: in->n=%lld < 0",
                   func, (long long)in->n);
  *n_unique = 0;
  if (in->n == 0)
    return VOXCONV_STATUS_SUCCESS;
  VC_CHECK_NULL(h, in->data, "in->data");
  VC_CHECK_NULL(h, out_coords, "out_coords");
#ifdef VOXCONV_HAVE_CUDA
  if (h->backend == VOXCONV_BACKEND_CUDA)
    return vc_cuda_merge_duplicates(h, in, out_coords, n_unique, row_map);
#endif
  return merge_cpu(h, in, out_coords, n_unique, row_map);
}
