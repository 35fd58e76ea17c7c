/* CPU kernel-map builder for all five modes (see voxconv.h, "Modes"), and
 * the inverse of a STRIDED / EXPANDING map.
 *
 * Every mode reduces to the same hot loop: for each output row o and offset
 * k, compute the one input coordinate that would pair with (o, k) and look
 * it up in a hash of the inputs. That fills nbr_out[n_out][kvol] in
 * parallel over fixed chunks of outputs (each chunk also counts its pairs
 * per offset); a prefix sum over (offset, chunk) then gives every chunk its
 * write positions, so the pair lists come out grouped by offset and sorted
 * by output row with no sort and no atomics, identical for any number of
 * threads. Submanifold maps with odd kernels (the common case) look up only
 * the offsets before the centre and mirror the rest (pair (i, o) at k is
 * pair (o, i) at K-1-k), and get nbr_in as nbr_out with reversed rows.
 *
 * Level 0 of BENCHMARKS.md workload A (913,903 voxels, 3x3x3) spends its
 * time in the random hash probes and in the kernel zeroing the ~300 MB of
 * fresh map buffers; huge pages (vc_advise_huge_pages) cut both the TLB
 * misses of the probes and the page-fault count. */
#include "vc_hash.h"

#include <stdlib.h>
#include <string.h>

/* Outputs per lookup chunk: small enough to balance two threads on the
 * last levels of a network, large enough that per-chunk counters
 * ([n_chunks][kvol]) stay small. The chunk index is begin / grain, which
 * vc_parallel_for guarantees (chunks start at multiples of the grain). */
#define LOOKUP_GRAIN 1024
#define ROW_GRAIN 16384

static const char *const field_names[4] = {"batch", "x", "y", "z"};

/* ---- small parallel helpers ------------------------------------------ */
typedef struct {
  void *dst;
  const void *src;
  size_t elem;
  int fill_byte; /* < 0: copy src */
} bulk_ctx_t;

static void bulk_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const bulk_ctx_t *c = (const bulk_ctx_t *)ctx;
  char *dst = (char *)c->dst + (size_t)begin * c->elem;
  const size_t bytes = (size_t)(end - begin) * c->elem;
  if (c->fill_byte >= 0)
    memset(dst, c->fill_byte, bytes);
  else
    memcpy(dst, (const char *)c->src + (size_t)begin * c->elem, bytes);
}

/* Copies or fills with all threads: also spreads the first-touch page
 * faults of freshly allocated buffers, which dominate a plain memset. */
static void parallel_copy(const voxconv_handle_t *h, void *dst, const void *src,
                          int64_t n, size_t elem) {
  bulk_ctx_t c = {dst, src, elem, -1};
  vc_parallel_for(h, n, 65536, bulk_task, &c);
}

static void parallel_fill(const voxconv_handle_t *h, void *dst, int byte,
                          int64_t n, size_t elem) {
  bulk_ctx_t c = {dst, NULL, elem, byte};
  vc_parallel_for(h, n, 65536, bulk_task, &c);
}

/* ---- coordinate validation, keys and fingerprint --------------------- */
typedef struct {
  const int32_t *coords;
  uint64_t *keys;       /* may be NULL: validate / fingerprint only */
  int64_t *first_bad;   /* [n_chunks]: lowest bad row of the chunk or -1 */
  uint64_t *fp_partial; /* [n_chunks] */
} validate_ctx_t;

static void validate_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const validate_ctx_t *c = (const validate_ctx_t *)ctx;
  const int64_t chunk = begin / ROW_GRAIN;
  int64_t bad = -1;
  uint64_t fp = 0;
  for (int64_t i = begin; i < end; i++) {
    const int32_t *r = c->coords + 4 * i;
    const uint64_t key = vc_pack_key_any(r);
    fp += vc_fingerprint_mix((uint64_t)i, key);
    if (bad < 0 && vc_coord_row_bad_field(r) >= 0)
      bad = i;
    if (c->keys)
      c->keys[i] = key;
  }
  c->first_bad[chunk] = bad;
  c->fp_partial[chunk] = fp;
}

voxconv_status_t vc_cpu_coords_check(voxconv_handle_t *h, const char *func,
                                     const char *which, const int32_t *coords,
                                     int64_t n, uint64_t *keys,
                                     uint64_t *fingerprint, int check_range) {
  const int64_t n_chunks = (n + ROW_GRAIN - 1) / ROW_GRAIN;
  int64_t *first_bad = NULL;
  VC_CHECK(vc_host_alloc(h,
                         (size_t)(n_chunks ? n_chunks : 1) *
                             (sizeof(int64_t) + sizeof(uint64_t)),
                         (void **)&first_bad, "coordinate check partials"));
  uint64_t *fp_partial = (uint64_t *)(first_bad + n_chunks);
  validate_ctx_t c = {coords, keys, first_bad, fp_partial};
  vc_parallel_for(h, n, ROW_GRAIN, validate_task, &c);
  uint64_t fp = 0;
  int64_t bad = -1;
  for (int64_t k = 0; k < n_chunks; k++) {
    fp += fp_partial[k]; /* wrapping sum: order-free, as on the GPU */
    if (bad < 0 && first_bad[k] >= 0)
      bad = first_bad[k];
  }
  free(first_bad);
  if (fingerprint)
    *fingerprint = fp;
  if (check_range && bad >= 0) {
    const int32_t *r = coords + 4 * bad;
    const int f = vc_coord_row_bad_field(r);
    if (f == 0)
      return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                     "%s: %s row %lld: batch=%d outside 0..%d", func, which,
                     (long long)bad, (int)r[0], VOXCONV_BATCH_MAX);
    return vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                   "%s: %s row %lld: %s=%d outside ±%d", func, which,
                   (long long)bad, field_names[f], (int)r[f],
                   VOXCONV_COORD_MAX);
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* Inserts keys[i] -> i in order, so the first duplicate reported is the
 * lowest row that repeats an earlier one: the same answer on every run. */
static voxconv_status_t hash_rows(voxconv_handle_t *h, const char *func,
                                  const char *which, const int32_t *coords,
                                  const uint64_t *keys, int64_t n,
                                  vc_hash_t *table) {
  VC_CHECK(vc_hash_create(h, table, n, "coordinate hash table"));
  for (int64_t i = 0; i < n; i++) {
    const int32_t prev = vc_hash_insert(table, keys[i], (int32_t)i);
    if (prev >= 0) {
      const int32_t *r = coords + 4 * i;
      return vc_fail(h, VOXCONV_STATUS_DUPLICATE_COORDS,
                     "%s: %s rows %d and %lld are both (b,x,y,z) = "
                     "(%d,%d,%d,%d); merge them first "
                     "(voxconv_merge_duplicates)",
                     func, which, (int)prev, (long long)i, (int)r[0], (int)r[1],
                     (int)r[2], (int)r[3]);
    }
  }
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- output coordinates ---------------------------------------------- */
typedef struct {
  const int32_t *in;
  const int32_t *stride;
  uint64_t *keys;
} strided_ctx_t;

static void strided_keys_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const strided_ctx_t *c = (const strided_ctx_t *)ctx;
  for (int64_t i = begin; i < end; i++) {
    const int32_t *r = c->in + 4 * i;
    c->keys[i] = vc_pack_key(r[0], vc_floor_div(r[1], c->stride[0]),
                             vc_floor_div(r[2], c->stride[1]),
                             vc_floor_div(r[3], c->stride[2]));
  }
}

/* Sorted unique keys -> out_coords (backend memory) and n_out. */
static voxconv_status_t emit_out_coords(voxconv_handle_t *h, voxconv_kmap_t *m,
                                        uint64_t *keys, int64_t n_keys) {
  int64_t n_out = 0;
  for (int64_t i = 0; i < n_keys; i++)
    if (i == 0 || keys[i] != keys[n_out - 1])
      keys[n_out++] = keys[i];
  if (n_out > INT32_MAX)
    return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_kmap_build: %lld output rows exceed the int32 "
                   "row index",
                   (long long)n_out);
  VC_CHECK(vc_alloc(h, (size_t)n_out * 4 * sizeof(int32_t),
                    (void **)&m->out_coords, "kernel-map output coords"));
  uint64_t fp = 0;
  for (int64_t i = 0; i < n_out; i++) {
    vc_unpack_key(keys[i], m->out_coords + 4 * i);
    fp += vc_fingerprint_mix((uint64_t)i, keys[i]); /* valid keys: as _any */
  }
  m->out_fingerprint = fp;
  m->n_out = n_out;
  return VOXCONV_STATUS_SUCCESS;
}

static voxconv_status_t strided_outputs(voxconv_handle_t *h, voxconv_kmap_t *m,
                                        const int32_t *in) {
  uint64_t *keys = NULL;
  VC_CHECK(vc_alloc(h, (size_t)m->n_in * sizeof *keys, (void **)&keys,
                    "strided output keys"));
  strided_ctx_t c = {in, m->desc.stride, keys};
  vc_parallel_for(h, m->n_in, ROW_GRAIN, strided_keys_task, &c);
  voxconv_status_t st = vc_radix_sort_keys(h, keys, NULL, m->n_in);
  if (st == VOXCONV_STATUS_SUCCESS)
    st = emit_out_coords(h, m, keys, m->n_in);
  vc_free(h, keys);
  return st;
}

/* EXPANDING and GENERATIVE: the unique outputs the inputs reach
 * (vc_kmap_reach: the rule of voxconv.h, out_shape included). Sequential in
 * (row, offset) order, so the error reported is the first such cell, as the
 * GPU builder reports it. */
static voxconv_status_t reached_outputs(voxconv_handle_t *h, voxconv_kmap_t *m,
                                        const int32_t *in) {
  const int32_t *s = m->desc.stride;
  vc_hash_t set;
  /* GENERATIVE: along an axis, dense inputs generate about s cells each and
   * isolated ones k: start from n_in * prod min(k, s) (exact for the usual
   * k == s upsampling). EXPANDING: dense inputs make about n_in / s^3
   * outputs, isolated ones ceil(k/s)^3 each: start from n_in. The set grows
   * when the guess is low. */
  int64_t expect = m->n_in;
  if (m->desc.mode == VOXCONV_KMAP_GENERATIVE)
    for (int a = 0; a < 3; a++)
      expect *= m->desc.kernel_size[a] < s[a] ? m->desc.kernel_size[a] : s[a];
  VC_CHECK(vc_hash_create(h, &set, expect, "reached output set"));
  const char *mode = m->desc.mode == VOXCONV_KMAP_GENERATIVE ? "GENERATIVE"
                                                             : "EXPANDING";
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  for (int64_t i = 0; i < m->n_in && st == VOXCONV_STATUS_SUCCESS; i++) {
    const int32_t *r = in + 4 * i;
    for (int32_t k = 0; k < m->kvol; k++) {
      int32_t g[3];
      int bad = -1;
      int64_t bad_value = 0;
      const int reach = vc_kmap_reach(m, r, k, g, &bad, &bad_value);
      if (reach == 0)
        continue;
      if (reach < 0) {
        st = vc_fail(h, VOXCONV_STATUS_OUT_OF_RANGE,
                     "voxconv_kmap_build: %s output of in row %lld "
                     "(%d,%d,%d,%d) at offset %d: %s=%lld outside ±%d",
                     mode, (long long)i, (int)r[0], (int)r[1], (int)r[2],
                     (int)r[3], (int)k, field_names[bad + 1],
                     (long long)bad_value, VOXCONV_COORD_MAX);
        break;
      }
      int32_t existing;
      st = vc_hash_insert_grow(&set, vc_pack_key(r[0], g[0], g[1], g[2]), 0,
                               &existing);
      if (st != VOXCONV_STATUS_SUCCESS)
        break;
    }
  }
  uint64_t *keys = NULL;
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_alloc(h, (size_t)set.count * sizeof *keys, (void **)&keys,
                  "reached output keys");
  if (st == VOXCONV_STATUS_SUCCESS) {
    vc_hash_keys(&set, keys);
    const int64_t n_keys = set.count;
    vc_hash_destroy(&set); /* before the sort: peak memory */
    st = vc_radix_sort_keys(h, keys, NULL, n_keys);
    if (st == VOXCONV_STATUS_SUCCESS)
      st = emit_out_coords(h, m, keys, n_keys);
  }
  vc_hash_destroy(&set);
  vc_free(h, keys);
  return st;
}

/* ---- neighbour lookups (the hot loop) -------------------------------- */
typedef struct {
  const voxconv_kmap_t *m;
  const vc_hash_t *in_hash;
  int64_t *chunk_counts; /* [n_chunks][kvol] */
  int symmetric;         /* submanifold with an odd kernel */
} lookup_ctx_t;

/* Partner coordinate along one axis: the input coordinate paired with
 * output coordinate oc at axis offset off, per mode; 0 when there is none
 * (off the stride lattice, or outside the limits where no input exists). */
static inline int partner_axis(voxconv_kmap_mode_t mode, int32_t s, int32_t off,
                               int32_t oc, int32_t *v) {
  switch (mode) {
  case VOXCONV_KMAP_SUBMANIFOLD:
    *v = oc + off;
    break;
  case VOXCONV_KMAP_STRIDED:
  case VOXCONV_KMAP_EXPANDING:
    *v = s * oc + off;
    break;
  default: { /* TRANSPOSED, GENERATIVE: o = s*i + off */
    const int32_t d = oc - off;
    if (d % s != 0)
      return 0;
    *v = d / s;
  }
  }
  return vc_coord_in_range(*v);
}

/* Hashes the partners of output o at offsets [0, k_end) into keys[] /
 * slots[] and prefetches their slots. The partner is separable per axis,
 * so each axis's candidates are computed (and packed into their key bits)
 * once, not once per offset: a transposed map divides 3 * 3 times per
 * output for a 3x3x3 kernel instead of 3 * 27. */
static inline void lookup_prepare(const voxconv_kmap_t *m, const vc_hash_t *t,
                                  int64_t o, int32_t k_end, uint64_t *keys,
                                  uint64_t *slots) {
  const int32_t *oc = m->out_coords + 4 * o;
  const int32_t *ks = m->desc.kernel_size;
  /* Packed-key field of each axis candidate, VC_KEY_EMPTY if none. */
  uint64_t part[3][VOXCONV_KERNEL_SIZE_MAX];
  static const int shift[3] = {36, 18, 0};
  for (int a = 0; a < 3; a++) {
    const int32_t step = m->desc.dilation[a], first = -vc_kmap_pad(&m->desc, a);
    for (int32_t j = 0; j < ks[a]; j++) {
      int32_t v;
      part[a][j] = partner_axis(m->desc.mode, m->desc.stride[a],
                                first + j * step, oc[a + 1], &v)
                       ? (uint64_t)(uint32_t)(v + VC_COORD_BIAS) << shift[a]
                       : VC_KEY_EMPTY;
    }
  }
  const uint64_t batch = (uint64_t)(uint32_t)oc[0] << 54;
  /* Nested in the map's offset order (vc_kidx_of), so k just counts up
   * (no division per offset on this per-output path). */
  const int x_fastest = m->desc.offset_order == VOXCONV_OFFSET_ORDER_X_FASTEST;
  const int outer = x_fastest ? 2 : 0, inner = x_fastest ? 0 : 2;
  int32_t j[3], k = 0;
  for (j[outer] = 0; j[outer] < ks[outer]; j[outer]++)
    for (j[1] = 0; j[1] < ks[1]; j[1]++)
      for (j[inner] = 0; j[inner] < ks[inner]; j[inner]++, k++) {
        if (k >= k_end)
          return;
        const uint64_t px = part[0][j[0]], py = part[1][j[1]], pz = part[2][j[2]];
        if (px == VC_KEY_EMPTY || py == VC_KEY_EMPTY || pz == VC_KEY_EMPTY) {
          keys[k] = VC_KEY_EMPTY;
          continue;
        }
        keys[k] = batch | px | py | pz;
        slots[k] = vc_hash_slot_of(t, keys[k]);
        vc_hash_prefetch(t, slots[k]);
      }
}

/* Outputs hashed and prefetched ahead of the one being probed: the probes
 * are latency-bound random reads, so keeping the next neighbourhoods' misses
 * in flight is what sets the speed. Power of two. */
#define LOOKUP_AHEAD 4

/* Fills nbr_out rows [begin, end). General maps look up every offset and
 * count pairs per (chunk, offset). Symmetric maps (submanifold, odd
 * kernel) look up only the offsets before the centre: the centre pairs
 * every row with itself and the offsets after it are mirrored from the
 * looked-up half (mirror_task), which halves the random probes. */
static void lookup_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const lookup_ctx_t *c = (const lookup_ctx_t *)ctx;
  const voxconv_kmap_t *m = c->m;
  const vc_hash_t *t = c->in_hash;
  const int32_t kvol = m->kvol;
  const int32_t k_look = c->symmetric ? kvol / 2 : kvol;
  int64_t *counts = c->chunk_counts + (begin / LOOKUP_GRAIN) * kvol;
  memset(counts, 0, (size_t)kvol * sizeof *counts);
  uint64_t keys[LOOKUP_AHEAD][VOXCONV_KERNEL_VOLUME_MAX];
  uint64_t slots[LOOKUP_AHEAD][VOXCONV_KERNEL_VOLUME_MAX];
  for (int64_t o = begin; o < end && o < begin + LOOKUP_AHEAD - 1; o++)
    lookup_prepare(m, t, o, k_look, keys[o & (LOOKUP_AHEAD - 1)],
                   slots[o & (LOOKUP_AHEAD - 1)]);
  for (int64_t o = begin; o < end; o++) {
    const int64_t ahead = o + LOOKUP_AHEAD - 1;
    if (ahead < end)
      lookup_prepare(m, t, ahead, k_look, keys[ahead & (LOOKUP_AHEAD - 1)],
                     slots[ahead & (LOOKUP_AHEAD - 1)]);
    const uint64_t *ok = keys[o & (LOOKUP_AHEAD - 1)];
    const uint64_t *os = slots[o & (LOOKUP_AHEAD - 1)];
    int32_t *nbr = m->nbr_out + o * kvol;
    for (int32_t k = 0; k < k_look; k++) {
      int32_t i = -1;
      if (ok[k] != VC_KEY_EMPTY)
        i = vc_hash_find_at(t, ok[k], os[k]);
      nbr[k] = i;
      counts[k] += i >= 0;
    }
    if (c->symmetric) {
      nbr[k_look] = (int32_t)o;
      for (int32_t k = k_look + 1; k < kvol; k++)
        nbr[k] = -1;
    }
  }
}

/* Symmetric maps: pair (i, o) at k < centre is pair (o, i) at K-1-k.
 * Each written element (i, K-1-k) has exactly one writer (o = i -
 * off[K-1-k]) and no reader in this pass (readers touch k < centre), so
 * chunks never race. */
static void mirror_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const lookup_ctx_t *c = (const lookup_ctx_t *)ctx;
  const voxconv_kmap_t *m = c->m;
  const int32_t kvol = m->kvol;
  for (int64_t o = begin; o < end; o++) {
    const int32_t *nbr = m->nbr_out + o * kvol;
    for (int32_t k = 0; k < kvol / 2; k++)
      if (nbr[k] >= 0)
        m->nbr_out[(int64_t)nbr[k] * kvol + (kvol - 1 - k)] = (int32_t)o;
  }
}

/* Symmetric maps: per-(chunk, offset) pair counts of the finished rows. */
static void count_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const lookup_ctx_t *c = (const lookup_ctx_t *)ctx;
  const voxconv_kmap_t *m = c->m;
  const int32_t kvol = m->kvol;
  int64_t *counts = c->chunk_counts + (begin / LOOKUP_GRAIN) * kvol;
  for (int32_t k = kvol / 2; k < kvol; k++)
    counts[k] = 0;
  for (int64_t o = begin; o < end; o++) {
    const int32_t *nbr = m->nbr_out + o * kvol;
    for (int32_t k = kvol / 2; k < kvol; k++)
      counts[k] += nbr[k] >= 0;
  }
}

/* ---- pair lists and the reverse table -------------------------------- */
typedef struct {
  const voxconv_kmap_t *m;
  int64_t *chunk_pos; /* [n_chunks][kvol]: next write position */
  int scatter_nbr_in;
} fill_ctx_t;

static void fill_pairs_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const fill_ctx_t *c = (const fill_ctx_t *)ctx;
  const voxconv_kmap_t *m = c->m;
  const int32_t kvol = m->kvol;
  int64_t *pos = c->chunk_pos + (begin / LOOKUP_GRAIN) * kvol;
  for (int64_t o = begin; o < end; o++) {
    const int32_t *nbr = m->nbr_out + o * kvol;
    for (int32_t k = 0; k < kvol; k++) {
      const int32_t i = nbr[k];
      if (i < 0)
        continue;
      const int64_t p = pos[k]++;
      m->in_rows[p] = i;
      m->out_rows[p] = (int32_t)o;
      /* (i, k) determines o in every mode, so these writes never
       * collide between chunks. */
      if (c->scatter_nbr_in)
        m->nbr_in[(int64_t)i * kvol + k] = (int32_t)o;
    }
  }
}

/* Submanifold with an odd kernel: off[K-1-k] = -off[k] and inputs equal
 * outputs, so the output fed by (i, k) sits at i - off[k] = i + off[K-1-k]:
 * nbr_in[i][k] = nbr_out[i][K-1-k]. A sequential row reversal instead of a
 * random scatter. */
static void reverse_rows_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const voxconv_kmap_t *m = (const voxconv_kmap_t *)ctx;
  const int32_t kvol = m->kvol;
  for (int64_t i = begin; i < end; i++) {
    const int32_t *src = m->nbr_out + i * kvol;
    int32_t *dst = m->nbr_in + i * kvol;
    for (int32_t k = 0; k < kvol; k++)
      dst[k] = src[kvol - 1 - k];
  }
}

static voxconv_status_t build_pairs(voxconv_handle_t *h, voxconv_kmap_t *m,
                                    const vc_hash_t *in_hash) {
  const int32_t kvol = m->kvol;
  const int64_t n_out = m->n_out;
  const int64_t n_chunks = (n_out + LOOKUP_GRAIN - 1) / LOOKUP_GRAIN;
  VC_CHECK(vc_alloc(h, (size_t)n_out * kvol * sizeof(int32_t),
                    (void **)&m->nbr_out, "kernel-map nbr_out"));
  vc_advise_huge_pages(h, m->nbr_out, (size_t)n_out * kvol * sizeof(int32_t));
  VC_CHECK(vc_alloc(h, (size_t)m->n_in * kvol * sizeof(int32_t),
                    (void **)&m->nbr_in, "kernel-map nbr_in"));
  vc_advise_huge_pages(h, m->nbr_in, (size_t)m->n_in * kvol * sizeof(int32_t));
  VC_CHECK(vc_host_alloc(h, (size_t)(kvol + 1) * sizeof(int64_t),
                         (void **)&m->pair_offsets, "kernel-map pair offsets"));
  int64_t *chunk = NULL;
  VC_CHECK(vc_host_alloc(
      h, (size_t)(n_chunks ? n_chunks : 1) * kvol * sizeof(int64_t),
      (void **)&chunk, "kernel-map chunk counters"));

  const int symmetric = m->desc.mode == VOXCONV_KMAP_SUBMANIFOLD &&
                        vc_kmap_offsets_symmetric(&m->desc);
  lookup_ctx_t lc = {m, in_hash, chunk, symmetric};
  vc_parallel_for(h, n_out, LOOKUP_GRAIN, lookup_task, &lc);
  if (symmetric) {
    vc_parallel_for(h, n_out, LOOKUP_GRAIN, mirror_task, &lc);
    vc_parallel_for(h, n_out, LOOKUP_GRAIN, count_task, &lc);
  }

  /* Counts -> start positions, offset-major then chunk: pairs of offset k
   * are contiguous and ascend with the output row. */
  int64_t total = 0;
  for (int32_t k = 0; k < kvol; k++) {
    m->pair_offsets[k] = total;
    for (int64_t ch = 0; ch < n_chunks; ch++) {
      const int64_t cnt = chunk[ch * kvol + k];
      chunk[ch * kvol + k] = total;
      total += cnt;
    }
  }
  m->pair_offsets[kvol] = total;
  m->n_pairs = total;

  voxconv_status_t st = vc_alloc(h, (size_t)total * sizeof(int32_t),
                                 (void **)&m->in_rows, "kernel-map in_rows");
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_alloc(h, (size_t)total * sizeof(int32_t), (void **)&m->out_rows,
                  "kernel-map out_rows");
  if (st != VOXCONV_STATUS_SUCCESS) {
    free(chunk);
    return st;
  }
  vc_advise_huge_pages(h, m->in_rows, (size_t)total * sizeof(int32_t));
  vc_advise_huge_pages(h, m->out_rows, (size_t)total * sizeof(int32_t));
  const int reverse = symmetric;
  if (reverse)
    vc_parallel_for(h, m->n_in, LOOKUP_GRAIN, reverse_rows_task, m);
  else
    parallel_fill(h, m->nbr_in, 0xFF, m->n_in * kvol, sizeof(int32_t));
  fill_ctx_t fc = {m, chunk, !reverse};
  vc_parallel_for(h, n_out, LOOKUP_GRAIN, fill_pairs_task, &fc);
  free(chunk);
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- entry point ----------------------------------------------------- */
voxconv_status_t vc_cpu_kmap_build(voxconv_handle_t *h, voxconv_kmap_t *m,
                                   const voxconv_coords_t *in,
                                   const voxconv_coords_t *out) {
  static const char *const func = "voxconv_kmap_build";
  const int64_t n_in = in->n;
  uint64_t *in_keys = NULL;
  vc_hash_t in_hash = {0};
  voxconv_status_t st = vc_alloc(h, (size_t)n_in * sizeof *in_keys,
                                 (void **)&in_keys, "input coordinate keys");
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_cpu_coords_check(h, func, "in coords", in->data, n_in, in_keys,
                             &m->in_fingerprint, 1);
  if (st == VOXCONV_STATUS_SUCCESS)
    st = hash_rows(h, func, "in coords", in->data, in_keys, n_in, &in_hash);
  vc_free(h, in_keys);
  in_keys = NULL;
  if (st != VOXCONV_STATUS_SUCCESS)
    goto done;

  switch (m->desc.mode) {
  case VOXCONV_KMAP_SUBMANIFOLD:
    st = vc_alloc(h, (size_t)n_in * 4 * sizeof(int32_t),
                  (void **)&m->out_coords, "kernel-map output coords");
    if (st == VOXCONV_STATUS_SUCCESS) {
      parallel_copy(h, m->out_coords, in->data, n_in, 4 * sizeof(int32_t));
      m->n_out = n_in;
    }
    break;
  case VOXCONV_KMAP_STRIDED:
    st = strided_outputs(h, m, in->data);
    break;
  case VOXCONV_KMAP_EXPANDING:
  case VOXCONV_KMAP_GENERATIVE:
    st = reached_outputs(h, m, in->data);
    break;
  case VOXCONV_KMAP_TRANSPOSED: {
    /* The caller's outputs must be valid and distinct too: a repeated
     * output would be fed twice by the same (input, offset). */
    const int64_t n_out = out->n;
    uint64_t *out_keys = NULL;
    vc_hash_t out_hash = {0};
    st = vc_alloc(h, (size_t)n_out * sizeof *out_keys, (void **)&out_keys,
                  "output coordinate keys");
    if (st == VOXCONV_STATUS_SUCCESS)
      st = vc_cpu_coords_check(h, func, "out coords", out->data, n_out,
                               out_keys, NULL, 1);
    if (st == VOXCONV_STATUS_SUCCESS)
      st = hash_rows(h, func, "out coords", out->data, out_keys, n_out,
                     &out_hash);
    vc_hash_destroy(&out_hash);
    vc_free(h, out_keys);
    if (st == VOXCONV_STATUS_SUCCESS)
      st = vc_alloc(h, (size_t)n_out * 4 * sizeof(int32_t),
                    (void **)&m->out_coords, "kernel-map output coords");
    if (st == VOXCONV_STATUS_SUCCESS) {
      parallel_copy(h, m->out_coords, out->data, n_out, 4 * sizeof(int32_t));
      m->n_out = n_out;
    }
    break;
  }
  }
  /* The inverse map's outputs (voxconv_kmap_inverse). */
  if (st == VOXCONV_STATUS_SUCCESS && (m->desc.mode == VOXCONV_KMAP_STRIDED ||
                                       m->desc.mode == VOXCONV_KMAP_EXPANDING)) {
    st = vc_alloc(h, (size_t)n_in * 4 * sizeof(int32_t),
                  (void **)&m->in_coords, "kernel-map input coords");
    if (st == VOXCONV_STATUS_SUCCESS)
      parallel_copy(h, m->in_coords, in->data, n_in, 4 * sizeof(int32_t));
  }
  if (st == VOXCONV_STATUS_SUCCESS)
    st = build_pairs(h, m, &in_hash);
done:
  vc_hash_destroy(&in_hash);
  return st;
}

/* ---- inverse maps (voxconv_kmap_inverse) ----------------------------- */
/* Per-(chunk, offset) pair counts of every column of nbr_out. */
static void count_all_task(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const lookup_ctx_t *c = (const lookup_ctx_t *)ctx;
  const voxconv_kmap_t *m = c->m;
  const int32_t kvol = m->kvol;
  int64_t *counts = c->chunk_counts + (begin / LOOKUP_GRAIN) * kvol;
  memset(counts, 0, (size_t)kvol * sizeof *counts);
  for (int64_t o = begin; o < end; o++) {
    const int32_t *nbr = m->nbr_out + o * kvol;
    for (int32_t k = 0; k < kvol; k++)
      counts[k] += nbr[k] >= 0;
  }
}

/* (i, k) -> o in fwd is (o, k) -> i in the inverse: its neighbour tables
 * are fwd's swapped, and its pair lists come from its nbr_out as a build's
 * do (grouped by offset, ascending output row), with no lookups. */
voxconv_status_t vc_cpu_kmap_inverse(voxconv_handle_t *h,
                                     const voxconv_kmap_t *fwd,
                                     voxconv_kmap_t *m) {
  const int32_t kvol = m->kvol;
  const int64_t n_out = m->n_out, n_in = m->n_in;
  VC_CHECK(vc_alloc(h, (size_t)n_out * 4 * sizeof(int32_t),
                    (void **)&m->out_coords, "kernel-map output coords"));
  parallel_copy(h, m->out_coords, fwd->in_coords, n_out, 4 * sizeof(int32_t));
  VC_CHECK(vc_alloc(h, (size_t)n_out * kvol * sizeof(int32_t),
                    (void **)&m->nbr_out, "kernel-map nbr_out"));
  vc_advise_huge_pages(h, m->nbr_out, (size_t)n_out * kvol * sizeof(int32_t));
  parallel_copy(h, m->nbr_out, fwd->nbr_in, n_out * kvol, sizeof(int32_t));
  VC_CHECK(vc_alloc(h, (size_t)n_in * kvol * sizeof(int32_t),
                    (void **)&m->nbr_in, "kernel-map nbr_in"));
  vc_advise_huge_pages(h, m->nbr_in, (size_t)n_in * kvol * sizeof(int32_t));
  parallel_copy(h, m->nbr_in, fwd->nbr_out, n_in * kvol, sizeof(int32_t));

  const int64_t n_chunks = (n_out + LOOKUP_GRAIN - 1) / LOOKUP_GRAIN;
  int64_t *chunk = NULL;
  VC_CHECK(vc_host_alloc(
      h, (size_t)(n_chunks ? n_chunks : 1) * kvol * sizeof(int64_t),
      (void **)&chunk, "kernel-map chunk counters"));
  lookup_ctx_t lc = {m, NULL, chunk, 0};
  vc_parallel_for(h, n_out, LOOKUP_GRAIN, count_all_task, &lc);
  int64_t total = 0;
  for (int32_t k = 0; k < kvol; k++) {
    const int64_t begin = total;
    for (int64_t ch = 0; ch < n_chunks; ch++) {
      const int64_t cnt = chunk[ch * kvol + k];
      chunk[ch * kvol + k] = total;
      total += cnt;
    }
    if (begin != m->pair_offsets[k] || total != m->pair_offsets[k + 1]) {
      free(chunk);
      return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                     "voxconv_kmap_inverse: offset %d holds %lld pairs in "
                     "the forward map's nbr_in, %lld in its pair lists",
                     (int)k, (long long)(total - begin),
                     (long long)(m->pair_offsets[k + 1] - m->pair_offsets[k]));
    }
  }
  voxconv_status_t st = vc_alloc(h, (size_t)total * sizeof(int32_t),
                                 (void **)&m->in_rows, "kernel-map in_rows");
  if (st == VOXCONV_STATUS_SUCCESS)
    st = vc_alloc(h, (size_t)total * sizeof(int32_t), (void **)&m->out_rows,
                  "kernel-map out_rows");
  if (st == VOXCONV_STATUS_SUCCESS) {
    fill_ctx_t fc = {m, chunk, 0};
    vc_parallel_for(h, n_out, LOOKUP_GRAIN, fill_pairs_task, &fc);
  }
  free(chunk);
  return st;
}
