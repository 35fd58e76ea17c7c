/* Internal layout of a kernel map, shared by the CPU builder (src/coords),
 * the CUDA builder (src/cuda) and every algorithm. Both builders must fill
 * every field identically for the same input (see voxconv.h for the order
 * of output coordinates and pairs). */
#ifndef VC_KMAP_H
#define VC_KMAP_H

#include "../core/vc_core.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Packed 64-bit key of (b, x, y, z): b in bits 54..63, x+131071 in 36..53,
 * y+131071 in 18..35, z+131071 in 0..17
 * (each field <= 262142, so no valid key equals VC_KEY_EMPTY). Ascending keys are ascending
 * (b, x, y, z), which is the library's canonical coordinate order. */
#define VC_COORD_BIAS 131071
#define VC_KEY_EMPTY UINT64_MAX /* never a valid key: b <= 1023 */

static inline uint64_t vc_pack_key(int32_t b, int32_t x, int32_t y,
                                   int32_t z) {
  return ((uint64_t)(uint32_t)b << 54) |
         ((uint64_t)(uint32_t)(x + VC_COORD_BIAS) << 36) |
         ((uint64_t)(uint32_t)(y + VC_COORD_BIAS) << 18) |
         (uint64_t)(uint32_t)(z + VC_COORD_BIAS);
}
static inline int vc_coord_in_range(int32_t v) {
  return v >= VOXCONV_COORD_MIN && v <= VOXCONV_COORD_MAX;
}
static inline void vc_unpack_key(uint64_t k, int32_t *c4) {
  c4[0] = (int32_t)(k >> 54);
  c4[1] = (int32_t)((k >> 36) & 0x3FFFF) - VC_COORD_BIAS;
  c4[2] = (int32_t)((k >> 18) & 0x3FFFF) - VC_COORD_BIAS;
  c4[3] = (int32_t)(k & 0x3FFFF) - VC_COORD_BIAS;
}

/* Order-dependent fingerprint of a coordinate array: the wrapping sum over
 * rows i of vc_fingerprint_mix(i, key(row i)). A sum so that a GPU can
 * compute it with one integer reduction. */
static inline uint64_t vc_fingerprint_mix(uint64_t i, uint64_t key) {
  uint64_t z = key ^ (i * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Floor division for s >= 1: the strided output cell of a coordinate
 * (the CPU build, and the CUDA build's compact-key box). */
static inline int32_t vc_floor_div(int32_t a, int32_t s) {
  return a >= 0 ? a / s : -((-a + s - 1) / s);
}

/* The error of a row outside the bounds declared for a build
 * (voxconv_kmap_build_bounded), worded alike by both backends. */
static inline voxconv_status_t vc_bounds_violation(char *msg, size_t size,
                                                   unsigned long long row,
                                                   const int32_t r[4],
                                                   const voxconv_coords_bounds_t *b) {
  snprintf(msg, size,
           "voxconv_kmap_build: in coords row %llu (b,x,y,z) = (%d,%d,%d,%d) "
           "lies outside the declared in_bounds lo (%d,%d,%d,%d) hi "
           "(%d,%d,%d,%d)",
           row, (int)r[0], (int)r[1], (int)r[2], (int)r[3], (int)b->lo[0],
           (int)b->lo[1], (int)b->lo[2], (int)b->lo[3], (int)b->hi[0],
           (int)b->hi[1], (int)b->hi[2], (int)b->hi[3]);
  return VOXCONV_STATUS_OUT_OF_RANGE;
}

/* Whether row r lies inside b. */
static inline int vc_row_in_bounds(const int32_t r[4],
                                   const voxconv_coords_bounds_t *b) {
  for (int f = 0; f < 4; f++)
    if (r[f] < b->lo[f] || r[f] > b->hi[f])
      return 0;
  return 1;
}

struct voxconv_kmap {
  voxconv_backend_t backend;
  int device;
  voxconv_kmap_desc_t desc; /* zeros replaced by 1 */
  int32_t kvol;
  int32_t offsets[VOXCONV_KERNEL_VOLUME_MAX][3]; /* dilated, kidx order */
  int64_t n_in, n_out, n_pairs;
  int32_t in_ts[3], out_ts[3];
  uint64_t in_fingerprint;
  /* STRIDED / EXPANDING: fingerprint of out_coords (the inverse map's
   * in_fingerprint, so voxconv_kmap_inverse needs no pass over them). */
  uint64_t out_fingerprint;
  /* STRIDED maps: the input rows' bounds the caller declared
   * (voxconv_kmap_build_bounded; the CUDA build sorts compact keys with
   * them), and the output rows' bounds, set with n_out (from the device
   * status on CUDA: voxconv_kmap_out_bounds). */
  int has_in_bounds, has_out_bounds;
  voxconv_coords_bounds_t in_bounds, out_bounds;
  /* backend memory */
  int32_t *out_coords; /* [n_out][4] (a copy of the input for SUBMANIFOLD) */
  /* STRIDED / EXPANDING: a copy of the input coordinates (the outputs of
   * the inverse map); NULL for the other modes. */
  int32_t *in_coords; /* [n_in][4] */
  /* [n_pairs], grouped by offset k, sorted by out row. CUDA maps: NULL
   * until their first need (vc_cuda_kmap_pairs, which every reader calls). */
  int32_t *in_rows;
  int32_t *out_rows;   /* [n_pairs] */
  int32_t *nbr_out;    /* [n_out][kvol]: input row feeding (o,k) or -1 */
  int32_t *nbr_in;     /* [n_in][kvol]: output row fed by (i,k) or -1 */
  /* CUDA maps with kvol <= 32: bit k of row_mask_*[r] is set when
   * nbr_*[r][k] >= 0. Written by the build's neighbour query from the
   * results it already holds, so the tensor-core algorithm's row sort and
   * tile masks read one word per row instead of kvol table entries; NULL
   * on other maps (consumers then read the tables). */
  uint32_t *row_mask_out; /* [n_out] */
  uint32_t *row_mask_in;  /* [n_in] */
  /* Rows sorted by neighbour bitmask (stable), built lazily by the
   * tensor-core algorithm the first time it needs them and kept with the
   * map so every later layer reuses them; NULL until then. */
  int32_t *row_order_out; /* [n_out] */
  int32_t *row_order_in;  /* [n_in]; may be row_order_out (submanifold maps
                             with symmetric offsets, cuda_mask_gemm.cu) */
  /* For kvol <= 32, with those orders: bit k of tile_mask_*[t] is set when
   * a row of 128-row tile t needs offset k (built with the orders, so a
   * tile's blocks read one word instead of scanning 128 x kvol entries);
   * NULL until then. */
  uint32_t *tile_mask_out; /* [ceil(n_out / 128)] */
  uint32_t *tile_mask_in;  /* [ceil(n_in / 128)] */
  /* The allocator of the handle that built the map (has_allocator 0: the
   * built-in one). Every handle that uses or destroys the map frees and
   * adds its buffers through its own allocator, so it must be this one
   * (voxconv.h; vc_kmap_check_handle). */
  voxconv_allocator_t allocator;
  int has_allocator;
  /* host memory */
  int64_t *pair_offsets; /* [kvol+1], pairs of offset k in [po[k], po[k+1]) */
  void *backend_priv;    /* CUDA extras, freed by the CUDA backend */
  /* CUDA maps: the same [kvol+1] offsets in device memory (owned by the
   * CUDA extras), for kernels that must not depend on host counts. */
  const int64_t *pair_offsets_dev;
  /* 1 while an asynchronous build (CUDA SUBMANIFOLD, or STRIDED through
   * voxconv_kmap_build_async; voxconv.h) is not yet complete on the host:
   * n_out is known (a deferred STRIDED map: -1, its arrays sized for n_in
   * outputs), but n_pairs holds the capacity
   * of in_rows / out_rows (n_in * kvol, an upper bound), pair_offsets is
   * NULL, in_fingerprint is unset and whether the coordinates were valid
   * is not yet known. Only vc_kmap_poll / vc_kmap_wait end it. */
  int pending;
  /* n_pairs as the build left it: exact for synchronous builds, the pair
   * lists' capacity for asynchronous ones. Sizes that decide a summation
   * order (wgrad splits) use it, so results do not depend on when a
   * pending map completes. */
  int64_t pairs_bound;
  /* Builds given to a handle's build worker (kmap_worker.c): `issuing`
   * counts the map's jobs (its build, voxconv_kmap_prepare calls) from the
   * call that queued each until the worker has issued it (atomic);
   * `issuer` is that worker. Every use of the map first waits
   * for that (vc_kmap_issued). A build that failed on the worker leaves
   * its status and message here (its buffers freed), returned by every
   * later call on the map. */
  int issuing;
  struct vc_build_worker *issuer;
  double issued_ms; /* when the worker issued it (set only while tracing) */
  voxconv_status_t issue_status;
  char *issue_msg;
};

/* INVALID_ARGUMENT ("func: ...") unless h may use and free m: the same
 * backend (and CUDA device) as m's builder, and the allocator m was built
 * with (the built-in one on both, or the same alloc, free and ctx). Every
 * call that takes a map with a handle checks this first. */
voxconv_status_t vc_kmap_check_handle(voxconv_handle_t *h, const char *func,
                                      const voxconv_kmap_t *m);
/* Waits until m's build has been issued (no-op unless a build worker has
 * it), then returns the worker's failure, if the build failed there, as a
 * failure on h ("func: ..."). */
voxconv_status_t vc_kmap_issued(voxconv_handle_t *h, const voxconv_kmap_t *m,
                                const char *func);
/* Only the wait. */
void vc_kmap_issue_wait(const voxconv_kmap_t *m);
/* Queues the build of m (validated, shape preset) on h's build worker. */
voxconv_status_t vc_build_worker_submit(voxconv_handle_t *h, voxconv_kmap_t *m,
                                        const voxconv_coords_t *in,
                                        int flags);
/* Queues voxconv_kmap_prepare(h, m, what) on h's build worker, behind the
 * builds queued before it (m's among them, when the worker has it). */
voxconv_status_t vc_build_worker_prepare(voxconv_handle_t *h,
                                         voxconv_kmap_t *m, unsigned what);

/* Asynchronous builds (no-ops on complete maps; `func` prefixes messages).
 *   vc_kmap_poll  never waits: completes the map when its build has
 *                 finished on the GPU, and returns the build's error once
 *                 it is known (every call on a bad map then fails with it)
 *   vc_kmap_wait  waits for the build itself (an event; later work on the
 *                 stream is not waited for) and completes the map; needed
 *                 before reading pair_offsets, n_pairs or in_fingerprint.
 *                 UNSUPPORTED while h's stream is being captured, or for a
 *                 map built during a capture. */
/* "SUBMANIFOLD", "STRIDED", ... for messages. */
const char *vc_kmap_mode_name(voxconv_kmap_mode_t mode);

voxconv_status_t vc_kmap_poll(voxconv_handle_t *h, const voxconv_kmap_t *m,
                              const char *func);
voxconv_status_t vc_kmap_wait(voxconv_handle_t *h, const voxconv_kmap_t *m,
                              const char *func);

/* Effective padding P of axis a (voxconv.h, voxconv_kmap_desc_t): the
 * offsets are j*d - P. desc has its zeros replaced already. */
static inline int32_t vc_kmap_pad(const voxconv_kmap_desc_t *d, int a) {
  return d->padded ? d->padding[a]
                   : (d->kernel_size[a] - 1) / 2 * d->dilation[a];
}

/* Kernel offset index k <-> taps j[3] (j[a] = 0..ks[a]-1) in a map's
 * offset order (voxconv.h, "Kernel offsets"): x slowest, (jx*ky + jy)*kz +
 * jz, or x fastest (MinkowskiEngine), (jz*ky + jy)*kx + jx. Every builder,
 * CPU and CUDA, numbers offsets through these two, so the order is decided
 * here alone. Host and device (the CUDA query kernels call them). */
#ifdef __CUDACC__
#define VC_KIDX_FN static inline __host__ __device__
#else
#define VC_KIDX_FN static inline
#endif
VC_KIDX_FN void vc_kidx_taps(int32_t order, const int32_t ks[3], int32_t k,
                             int32_t j[3]) {
  if (order == VOXCONV_OFFSET_ORDER_X_FASTEST) {
    j[0] = k % ks[0];
    j[1] = (k / ks[0]) % ks[1];
    j[2] = k / (ks[0] * ks[1]);
  } else {
    j[2] = k % ks[2];
    j[1] = (k / ks[2]) % ks[1];
    j[0] = k / (ks[1] * ks[2]);
  }
}

VC_KIDX_FN int32_t vc_kidx_of(int32_t order, const int32_t ks[3],
                              const int32_t j[3]) {
  return order == VOXCONV_OFFSET_ORDER_X_FASTEST
             ? (j[2] * ks[1] + j[1]) * ks[0] + j[0]
             : (j[0] * ks[1] + j[1]) * ks[2] + j[2];
}
#undef VC_KIDX_FN

/* Odd kernel on every axis with centred offsets (off[K-1-k] = -off[k],
 * off[(K-1)/2] = 0): what the submanifold mirror shortcuts need. */
static inline int vc_kmap_offsets_symmetric(const voxconv_kmap_desc_t *d) {
  for (int a = 0; a < 3; a++)
    if (!(d->kernel_size[a] & 1) ||
        2 * vc_kmap_pad(d, a) != (d->kernel_size[a] - 1) * d->dilation[a])
      return 0;
  return 1;
}

/* EXPANDING / GENERATIVE: the output that input coordinate r (b,x,y,z)
 * reaches at offset k (voxconv.h's rules), shared by the CPU builder and
 * the CUDA builder's error report so both word the same cell. Returns 1
 * with o[3] set, 0 when there is none (off the stride lattice or outside
 * out_shape), -1 when it lies outside the coordinate limits on an unbounded
 * axis (*bad_axis, *bad_value: the first such axis, x first). */
static inline int vc_kmap_reach(const voxconv_kmap_t *m, const int32_t *r,
                                int k, int32_t o[3], int *bad_axis,
                                int64_t *bad_value) {
  int bad = -1;
  int64_t bv = 0;
  for (int a = 0; a < 3; a++) {
    const int64_t s = m->desc.stride[a], off = m->offsets[k][a];
    int64_t v;
    if (m->desc.mode == VOXCONV_KMAP_GENERATIVE) {
      v = s * r[a + 1] + off;
    } else {
      const int64_t t = (int64_t)r[a + 1] - off;
      if (t % s != 0)
        return 0;
      v = t / s;
    }
    const int32_t shape = m->desc.out_shape[a];
    if (shape > 0) {
      if (v < 0 || v >= shape)
        return 0;
    } else if (bad < 0 && (v < VOXCONV_COORD_MIN || v > VOXCONV_COORD_MAX)) {
      bad = a;
      bv = v;
    }
    o[a] = (int32_t)v; /* |v| <= 64 * 131071 + 384: fits */
  }
  if (bad >= 0) {
    *bad_axis = bad;
    *bad_value = bv;
    return -1;
  }
  return 1;
}

/* Fills kmap->offsets and kvol from kmap->desc. */
void vc_kmap_fill_offsets(voxconv_kmap_t *kmap);

/* CPU builders (src/coords/kmap_cpu.c). `kmap` arrives with desc, offsets,
 * kvol, n_in and tensor strides set and all pointers NULL; validation of
 * the arguments is done by the caller (kmap.c) except for checks that need
 * the coordinates themselves (range, duplicates), which builders report. */
voxconv_status_t vc_cpu_kmap_build(voxconv_handle_t *h, voxconv_kmap_t *kmap,
                                   const voxconv_coords_t *in,
                                   const voxconv_coords_t *out);
void vc_kmap_free_buffers(voxconv_handle_t *h, voxconv_kmap_t *kmap);

/* voxconv_kmap_inverse's builders. `inv` arrives with desc, offsets, kvol,
 * n_in, n_out, tensor strides, in_fingerprint, n_pairs and pair_offsets set
 * (kmap.c); they fill the backend arrays from fwd's. */
voxconv_status_t vc_cpu_kmap_inverse(voxconv_handle_t *h,
                                     const voxconv_kmap_t *fwd,
                                     voxconv_kmap_t *inv);
#ifdef VOXCONV_HAVE_CUDA
voxconv_status_t vc_cuda_kmap_inverse(voxconv_handle_t *h,
                                      const voxconv_kmap_t *fwd,
                                      voxconv_kmap_t *inv);
#endif

#ifdef __cplusplus
}
#endif
#endif
