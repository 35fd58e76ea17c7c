/* cpu_gather_gemm: regular sparse convolution on the CPU.
 *
 * Forward and dgrad are the same computation seen from different sides:
 * every destination row d (output row for forward, input row for dgrad) is
 *   dst[d] = sum over k of src[s_k(d)] * B[k]
 * with B = W (forward) or W^T (dgrad) and s_k(d) the row paired with d at
 * offset k. Destination rows are cut into blocks; one block is one task,
 * so each row is written exactly once (rows without pairs as 0) and no
 * atomics are needed. A block finds its pairs of offset k as one range of
 * the pair list when the destination rows are sorted within each offset
 * (always for forward: pairs are sorted by output row; for dgrad when the
 * input rows are too, e.g. submanifold maps of sorted coordinates), else
 * by one pass over its rows of kmap->nbr_in. The block's rows of offset k
 * are multiplied by the packed B[k] with register tiles (f32 rows read in
 * place, f16/bf16 rows converted into a tile) into an f32 accumulator
 * block, converted and stored at the end. Every output element is one
 * sequential sum over k ascending, then over the channel ascending, so the
 * results depend neither on the block size nor on the number of threads.
 *
 * Wgrad: dW[k] = X_k^T DY_k over the pairs of offset k, in map order. A
 * task owns (k, a range of input channels) and runs over all pairs of k in
 * chunks, so each dW element is again one sequential sum in pair order,
 * whatever the split or the thread count.
 *
 * The tiles use fused multiply-add on AVX2/AVX-512 (and separate multiply
 * and add on the portable path), so bits differ between kernels but never
 * between runs or thread counts on one machine.
 *
 * f64 is the reference path: plain loops with the textbook summation
 * order and no fused multiply-add. */
#include "vc_cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
/* The f64 oracle must not be contracted into FMAs (GCC in ISO C mode does
 * not contract; clang needs to be told). */
#pragma STDC FP_CONTRACT OFF
#endif

#define VC_ALIGN 64

static size_t align_up(size_t n) {
  return (n + VC_ALIGN - 1) & ~(size_t)(VC_ALIGN - 1);
}

static int64_t imin64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
static int64_t imax64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/* ---- parameter spaces ---------------------------------------------------- */
/* 0 = chosen from the channel counts and the number of rows. Neither
 * parameter changes the results, only the speed. */
static const vc_param_space_t rows_space = {
    1, {"block_rows"}, {5}, {{0, 64, 128, 256, 512}}};
static const vc_param_space_t wgrad_space = {
    1, {"pair_chunk"}, {5}, {{0, 64, 128, 256, 512}}};

static const vc_param_space_t *gg_param_space(voxconv_pass_t pass) {
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_CONV_DGRAD:
    return &rows_space;
  case VOXCONV_PASS_CONV_WGRAD:
    return &wgrad_space;
  default:
    return NULL;
  }
}

static int gg_supports(const voxconv_handle_t *h, const vc_conv_problem_t *p) {
  if (!h || h->backend != VOXCONV_BACKEND_CPU || !p->kmap ||
      p->kmap->backend != VOXCONV_BACKEND_CPU)
    return 0;
  if (p->pass != VOXCONV_PASS_CONV_FWD && p->pass != VOXCONV_PASS_CONV_DGRAD &&
      p->pass != VOXCONV_PASS_CONV_WGRAD)
    return 0;
  return vc_dtype_valid(p->dtype) && p->cin > 0 && p->cout > 0;
}

/* Packed B for forward ([K][npanel][Cin][nr], columns = Cout) or dgrad
 * ([K][npanel][Cout][nr], columns = Cin), padded with zeros. */
static size_t packed_b_floats(const vc_conv_problem_t *p, int64_t nr) {
  const int64_t kvol = p->kmap->kvol;
  const int64_t kdim = p->pass == VOXCONV_PASS_CONV_FWD ? p->cin : p->cout;
  const int64_t ncols = p->pass == VOXCONV_PASS_CONV_FWD ? p->cout : p->cin;
  const int64_t npanel = (ncols + nr - 1) / nr;
  return (size_t)(kvol * npanel * kdim * nr);
}

static size_t gg_workspace_size(const vc_conv_problem_t *p,
                                const vc_algo_params_t *params) {
  (void)params;
  if (p->pass == VOXCONV_PASS_CONV_WGRAD)
    return 0;
  if (p->dtype == VOXCONV_DTYPE_F64) /* W^T for the f64 dgrad */
    return p->pass == VOXCONV_PASS_CONV_DGRAD
               ? (size_t)(p->kmap->kvol * p->cin * p->cout) * sizeof(double)
               : 0;
  /* Every kernel's tile width divides 32, so padding to 32 columns is an
   * upper bound whichever kernel run() picks. */
  return packed_b_floats(p, 32) * sizeof(float);
}

/* ---- weight packing ------------------------------------------------------ */
typedef struct pack_ctx {
  const void *w;
  voxconv_dtype_t dtype;
  int64_t cin, cout, nr, npanel;
  int transpose; /* dgrad: columns are Cin, reduction over Cout */
  float *out;
  float *rows; /* per-task row buffer: [kvol][cout] */
} pack_ctx_t;

static void pack_task(void *vctx, int64_t k0, int64_t k1, int tid) {
  (void)tid;
  const pack_ctx_t *c = (const pack_ctx_t *)vctx;
  const size_t esz = voxconv_dtype_size(c->dtype);
  const int64_t kdim = c->transpose ? c->cout : c->cin;
  for (int64_t k = k0; k < k1; k++) {
    float *row = c->rows + k * c->cout;
    float *bk = c->out + k * c->npanel * kdim * c->nr;
    memset(bk, 0, (size_t)(c->npanel * kdim * c->nr) * sizeof(float));
    for (int64_t ci = 0; ci < c->cin; ci++) {
      vc_cpu_load_f32((const char *)c->w +
                          (size_t)((k * c->cin + ci) * c->cout) * esz,
                      c->dtype, c->cout, row);
      if (!c->transpose) {
        for (int64_t co = 0; co < c->cout; co++)
          bk[((co / c->nr) * kdim + ci) * c->nr + co % c->nr] = row[co];
      } else {
        float *dst = bk + (ci / c->nr) * kdim * c->nr + ci % c->nr;
        for (int64_t co = 0; co < c->cout; co++)
          dst[co * c->nr] = row[co];
      }
    }
  }
}

static voxconv_status_t pack_weights(voxconv_handle_t *h, const void *w,
                                     voxconv_dtype_t dtype, int64_t kvol,
                                     int64_t cin, int64_t cout, int64_t nr,
                                     int transpose, float *out) {
  const int64_t ncols = transpose ? cin : cout;
  pack_ctx_t c = {w,         dtype, cin, cout, nr, (ncols + nr - 1) / nr,
                  transpose, out,   NULL};
  void *rows = NULL;
  VC_CHECK(vc_host_alloc(h, (size_t)(kvol * cout) * sizeof(float), &rows,
                         "weight packing rows"));
  c.rows = (float *)rows;
  voxconv_status_t st = vc_parallel_for(h, kvol, 1, pack_task, &c);
  free(rows);
  return st;
}

/* ---- forward / dgrad: blocks of destination rows ------------------------- */
typedef struct rows_ctx {
  const vc_gemm_kernel_t *kern;
  const voxconv_kmap_t *km;
  /* Rows of a block come from the pair lists when the destination rows
   * (dst_rows) are sorted within every offset: always for forward (pairs
   * are sorted by output row), for dgrad when the input rows happen to be
   * too (e.g. submanifold maps of sorted coordinates). Otherwise from the
   * neighbour table nbr [n_rows][kvol]. */
  int by_pairs;
  const int32_t *dst_rows, *src_rows;
  const int32_t *nbr;
  int64_t n_rows;
  int64_t kvol;
  const void *src; /* [*][kdim] in dtype */
  voxconv_dtype_t dtype;
  int64_t kdim;
  const float *bpack; /* [kvol][npanel][kdim][nr] */
  int64_t npanel;
  void *dst; /* [n_rows][ncols] in dtype */
  int64_t ncols, ldc;
  int64_t block_rows;
  char *scratch;
  size_t scratch_stride;
} rows_ctx_t;

typedef struct rows_scratch {
  float *acc;         /* [block_rows][ldc] */
  float *tile;        /* [block_rows][kdim], gathered rows (non-f32) */
  const float **arow; /* [block_rows] */
  int32_t *count;     /* [kvol] rows of the block per offset */
  int32_t *loc;       /* [kvol][block_rows] local destination row */
  int32_t *srcrow;    /* [kvol][block_rows] source row (dgrad) */
} rows_scratch_t;

/* Scratch layouts: with base == NULL only the size is computed, with a base
 * the same walk hands out the aligned pieces (one code path for both, so they
 * cannot disagree). Used inside functions with `base`, `off` and `s`. */
#define CARVE(field, type, count)                                              \
  do {                                                                         \
    if (base)                                                                  \
      s->field = (type)(void *)(base + off);                                   \
    off += align_up((size_t)(count) * sizeof(*s->field));                      \
  } while (0)

static size_t rows_scratch_layout(const rows_ctx_t *c, char *base,
                                  rows_scratch_t *s) {
  size_t off = 0;
  const int64_t br = c->block_rows;
  CARVE(acc, float *, br * c->ldc);
  CARVE(tile, float *, c->dtype == VOXCONV_DTYPE_F32 ? 1 : br * c->kdim);
  CARVE(arow, const float **, br);
  CARVE(count, int32_t *, c->kvol);
  CARVE(loc, int32_t *, c->by_pairs ? br : br * c->kvol);
  CARVE(srcrow, int32_t *, c->by_pairs ? 1 : br * c->kvol);
  return off;
}

/* Rows of the next register tile when `left` rows remain for `tiles`
 * tiles: balanced tiles (28 rows with 12-row tiles: 10, 9, 9 rather than
 * 12, 12, 4) keep enough independent accumulators in every tile. Tiling
 * never changes the results. */
static int64_t tile_len(int64_t left, int64_t tiles) {
  return (left + tiles - 1) / tiles;
}

/* First index in [lo, hi) of the sorted rows[] that is >= v. */
static int64_t lower_bound_i32(const int32_t *rows, int64_t lo, int64_t hi,
                               int64_t v) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (rows[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* acc[loc[q]] += src[srcrow[q]] * B[k] for the m rows of offset k. */
static void rows_block_offset(const rows_ctx_t *c, rows_scratch_t *s, int64_t k,
                              int64_t m, const int32_t *srcrow,
                              const int32_t *loc) {
  const size_t esz = voxconv_dtype_size(c->dtype);
  const int mr = c->kern->mr;
  const int64_t nr = c->kern->nr;
  if (c->dtype == VOXCONV_DTYPE_F32) {
    /* f32 rows are used in place: a gathered copy would only add traffic */
    for (int64_t q = 0; q < m; q++)
      s->arow[q] = (const float *)c->src + (int64_t)srcrow[q] * c->kdim;
  } else {
    for (int64_t q = 0; q < m; q++) {
      float *t = s->tile + q * c->kdim;
      vc_cpu_load_f32((const char *)c->src +
                          (size_t)((int64_t)srcrow[q] * c->kdim) * esz,
                      c->dtype, c->kdim, t);
      s->arow[q] = t;
    }
  }
  /* Panel-outer: the B panel (kdim x nr) stays in L1 while every tile of
   * rows passes over it; the gathered rows are reused per panel. */
  for (int64_t j = 0; j < c->npanel; j++) {
    const float *bp = c->bpack + (k * c->npanel + j) * c->kdim * nr;
    float *cj = s->acc + j * nr;
    const int64_t ntiles = (m + mr - 1) / mr;
    for (int64_t t = 0, q = 0; t < ntiles; t++) {
      const int64_t len = tile_len(m - q, ntiles - t);
      c->kern->tile((int)len, c->kdim, s->arow + q, bp, nr, cj, c->ldc,
                    loc + q);
      q += len;
    }
  }
}

static void rows_block(const rows_ctx_t *c, rows_scratch_t *s, int64_t blk) {
  const int64_t kvol = c->kvol;
  const int64_t r0 = blk * c->block_rows;
  const int64_t nb = imin64(c->block_rows, c->n_rows - r0);
  const size_t esz = voxconv_dtype_size(c->dtype);

  memset(s->acc, 0, (size_t)(nb * c->ldc) * sizeof(float));
  if (c->by_pairs) {
    /* Within offset k the destination rows are sorted, so the block's
     * pairs of k are one contiguous range of the pair list. */
    const voxconv_kmap_t *km = c->km;
    for (int64_t k = 0; k < kvol; k++) {
      const int64_t lo = km->pair_offsets[k], hi = km->pair_offsets[k + 1];
      const int64_t q0 = lower_bound_i32(c->dst_rows, lo, hi, r0);
      const int64_t q1 = lower_bound_i32(c->dst_rows, q0, hi, r0 + nb);
      if (q1 == q0)
        continue;
      for (int64_t q = q0; q < q1; q++)
        s->loc[q - q0] = (int32_t)(c->dst_rows[q] - r0);
      rows_block_offset(c, s, k, q1 - q0, c->src_rows + q0, s->loc);
    }
  } else {
    /* Dgrad: one pass over the block's neighbour table groups its rows by
     * offset (in ascending row order). */
    const int32_t *nbr = c->nbr + r0 * kvol;
    const int64_t br = c->block_rows;
    memset(s->count, 0, (size_t)kvol * sizeof(int32_t));
    for (int64_t r = 0; r < nb; r++)
      for (int64_t k = 0; k < kvol; k++) {
        const int32_t i = nbr[r * kvol + k];
        if (i >= 0) {
          const int64_t q = k * br + s->count[k]++;
          s->loc[q] = (int32_t)r;
          s->srcrow[q] = i;
        }
      }
    for (int64_t k = 0; k < kvol; k++)
      if (s->count[k])
        rows_block_offset(c, s, k, s->count[k], s->srcrow + k * br,
                          s->loc + k * br);
  }
  for (int64_t r = 0; r < nb; r++)
    vc_cpu_store_f32((char *)c->dst + (size_t)((r0 + r) * c->ncols) * esz,
                     c->dtype, c->ncols, s->acc + r * c->ldc);
}

static void rows_task(void *vctx, int64_t b0, int64_t b1, int tid) {
  const rows_ctx_t *c = (const rows_ctx_t *)vctx;
  rows_scratch_t s = {0};
  rows_scratch_layout(c, c->scratch + (size_t)tid * c->scratch_stride, &s);
  for (int64_t b = b0; b < b1; b++)
    rows_block(c, &s, b);
}

/* 1 if rows[] is strictly increasing within every offset's pair range. */
static int pairs_sorted_by(const voxconv_kmap_t *km, const int32_t *rows) {
  for (int64_t k = 0; k < km->kvol; k++)
    for (int64_t q = km->pair_offsets[k] + 1; q < km->pair_offsets[k + 1]; q++)
      if (rows[q] <= rows[q - 1])
        return 0;
  return 1;
}

static int64_t auto_block_rows(int64_t ldc, int64_t n_rows, int nthreads) {
  /* Aim at a ~128 KB accumulator block (L2-resident, big enough that each
   * offset of a sparse map still contributes full register tiles), but
   * keep a few blocks per thread for load balance. The block size never
   * changes the results. */
  const int64_t want = 32768 / imax64(ldc, 1);
  int64_t br = 32;
  while (br * 2 <= want && br < 512)
    br *= 2;
  while (br > 32 && n_rows < br * 4 * (int64_t)nthreads)
    br /= 2;
  return br;
}

static int scratch_threads(const voxconv_handle_t *h, int64_t tasks) {
  /* vc_parallel_for hands out tids below min(num_threads, tasks). */
  int64_t nt = h->num_threads > 0 ? h->num_threads : 1;
  return (int)imax64(1, imin64(nt, tasks));
}

static voxconv_status_t rows_gemm(voxconv_handle_t *h,
                                  const vc_conv_problem_t *p,
                                  const vc_algo_params_t *params, void *ws) {
  const voxconv_kmap_t *km = p->kmap;
  const int fwd = p->pass == VOXCONV_PASS_CONV_FWD;
  const vc_gemm_kernel_t *kern;
  VC_CHECK(vc_cpu_gemm_select(h, fwd ? p->cout : p->cin, &kern));
  if (!ws)
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "cpu_gather_gemm: no workspace for the packed weights");
  rows_ctx_t c;
  memset(&c, 0, sizeof c);
  c.kern = kern;
  c.km = km;
  c.by_pairs = fwd || pairs_sorted_by(km, km->in_rows);
  c.dst_rows = fwd ? km->out_rows : km->in_rows;
  c.src_rows = fwd ? km->in_rows : km->out_rows;
  c.nbr = km->nbr_in;
  c.n_rows = fwd ? km->n_out : km->n_in;
  c.kvol = km->kvol;
  c.src = p->a;
  c.dtype = p->dtype;
  c.kdim = fwd ? p->cin : p->cout;
  c.ncols = fwd ? p->cout : p->cin;
  c.npanel = (c.ncols + kern->nr - 1) / kern->nr;
  c.ldc = c.npanel * kern->nr;
  c.dst = p->c;
  c.bpack = (const float *)ws;
  c.block_rows = params && params->v[0] > 0
                     ? params->v[0]
                     : auto_block_rows(c.ldc, c.n_rows, h->num_threads);
  if (c.n_rows == 0)
    return VOXCONV_STATUS_SUCCESS;
  VC_CHECK(pack_weights(h, p->b, p->dtype, km->kvol, p->cin, p->cout, kern->nr,
                        !fwd, (float *)ws));
  const int64_t nblocks = (c.n_rows + c.block_rows - 1) / c.block_rows;
  const int nt = scratch_threads(h, nblocks);
  c.scratch_stride = align_up(rows_scratch_layout(&c, NULL, NULL));
  void *scratch = NULL;
  VC_CHECK(vc_host_alloc(h, c.scratch_stride * (size_t)nt + VC_ALIGN, &scratch,
                         "cpu_gather_gemm thread scratch"));
  c.scratch = (char *)(((uintptr_t)scratch + VC_ALIGN - 1) &
                       ~(uintptr_t)(VC_ALIGN - 1));
  voxconv_status_t st = vc_parallel_for(h, nblocks, 1, rows_task, &c);
  free(scratch);
  return st;
}

/* ---- wgrad ------------------------------------------------------------- */
/* One wgrad task: dW[k][c0 .. c0 + cw) over all pairs of k. */
typedef struct wgrad_task {
  int32_t k;
  int32_t c0, cw;
  int64_t work; /* pairs * cw, for ordering */
} wgrad_task_t;

typedef struct wgrad_ctx {
  const vc_gemm_kernel_t *kern;
  const voxconv_kmap_t *km;
  const void *x, *dy;
  void *dw;
  voxconv_dtype_t dtype;
  int64_t cin, cout, ldc, npanel;
  const wgrad_task_t *tasks; /* (offset, input-channel range), big first */
  int64_t group_width;       /* widest channel range of a task */
  int64_t chunk;             /* pairs per gathered chunk */
  char *scratch;
  size_t scratch_stride;
} wgrad_ctx_t;

typedef struct wgrad_scratch {
  float *acc;          /* [group_width][ldc] */
  float *x;            /* [chunk][group_width]: converted x (non-f32) */
  float *d;            /* [chunk][ldc]: converted dy (non-f32) */
  float *dtail;        /* [chunk][nr]: f32 dy columns of a ragged last panel */
  const float **ap;    /* [chunk] x row of each pair (this task's channels) */
  const float **bp;    /* [chunk] dy row of each pair */
  const float **btail; /* [chunk] rows of dtail */
} wgrad_scratch_t;

static size_t wgrad_scratch_layout(const wgrad_ctx_t *c, char *base,
                                   wgrad_scratch_t *s) {
  size_t off = 0;
  const int f32 = c->dtype == VOXCONV_DTYPE_F32;
  CARVE(acc, float *, c->group_width * c->ldc);
  CARVE(x, float *, f32 ? 1 : c->chunk * c->group_width);
  CARVE(d, float *, f32 ? 1 : c->chunk * c->ldc);
  CARVE(dtail, float *, f32 ? c->chunk * c->kern->nr : 1);
  CARVE(ap, const float **, c->chunk);
  CARVE(bp, const float **, c->chunk);
  CARVE(btail, const float **, c->chunk);
  return off;
}

static void wgrad_one(const wgrad_ctx_t *c, wgrad_scratch_t *s,
                      const wgrad_task_t *task) {
  const voxconv_kmap_t *km = c->km;
  const int64_t k = task->k, c0 = task->c0, cw = task->cw;
  const int f32 = c->dtype == VOXCONV_DTYPE_F32;
  const size_t esz = voxconv_dtype_size(c->dtype);
  const int mr = c->kern->mr;
  const int64_t nr = c->kern->nr;
  /* f32 rows are read in place, except the columns of a last panel that
   * would run past the end of a dy row: those are copied, zero-padded. */
  const int64_t tail0 = (c->cout / nr) * nr;
  const int ragged = f32 && tail0 < c->cout;
  const int64_t p_begin = km->pair_offsets[k], p_end = km->pair_offsets[k + 1];

  memset(s->acc, 0, (size_t)(cw * c->ldc) * sizeof(float));
  for (int64_t p0 = p_begin; p0 < p_end; p0 += c->chunk) {
    const int64_t n = imin64(c->chunk, p_end - p0);
    for (int64_t q = 0; q < n; q++) {
      const int64_t i = km->in_rows[p0 + q], o = km->out_rows[p0 + q];
      const char *xr = (const char *)c->x + (size_t)(i * c->cin + c0) * esz;
      const char *dr = (const char *)c->dy + (size_t)(o * c->cout) * esz;
      if (f32) {
        /* Rows are scattered: start fetching them all before the tiles
         * sweep over the chunk. */
        for (int64_t b = 0; b < cw * 4; b += 64)
          __builtin_prefetch(xr + b);
        for (int64_t b = 0; b < c->cout * 4; b += 64)
          __builtin_prefetch(dr + b);
        s->ap[q] = (const float *)(const void *)xr;
        s->bp[q] = (const float *)(const void *)dr;
        if (ragged) {
          float *t = s->dtail + q * nr;
          memcpy(t, s->bp[q] + tail0, (size_t)(c->cout - tail0) * 4);
          s->btail[q] = t;
        }
      } else {
        vc_cpu_load_f32(xr, c->dtype, cw, s->x + q * cw);
        vc_cpu_load_f32(dr, c->dtype, c->cout, s->d + q * c->ldc);
        s->ap[q] = s->x + q * cw;
        s->bp[q] = s->d + q * c->ldc;
      }
    }
    /* dW[k][c0 + r][j*nr + t] += sum_q x[q][r] * dy[q][j*nr + t] */
    const int64_t ntiles = (cw + mr - 1) / mr;
    for (int64_t j = 0; j < c->npanel; j++) {
      const int tail = ragged && j * nr == tail0;
      const float *const *b = tail ? s->btail : s->bp;
      const int64_t boff = tail ? 0 : j * nr;
      for (int64_t t = 0, r = 0; t < ntiles; t++) {
        const int64_t len = tile_len(cw - r, ntiles - t);
        c->kern->tile_pp((int)len, n, s->ap, r, b, boff,
                         s->acc + r * c->ldc + j * nr, c->ldc);
        r += len;
      }
    }
  }
  for (int64_t r = 0; r < cw; r++)
    vc_cpu_store_f32((char *)c->dw +
                         (size_t)((k * c->cin + c0 + r) * c->cout) * esz,
                     c->dtype, c->cout, s->acc + r * c->ldc);
}

static void wgrad_task(void *vctx, int64_t t0, int64_t t1, int tid) {
  const wgrad_ctx_t *c = (const wgrad_ctx_t *)vctx;
  wgrad_scratch_t s = {0};
  char *base = c->scratch + (size_t)tid * c->scratch_stride;
  wgrad_scratch_layout(c, base, &s);
  /* Padding columns of the copied dy stay zero: they only feed padding
   * columns of acc, which are never stored, but uninitialised memory
   * there would be read. */
  if (c->dtype == VOXCONV_DTYPE_F32)
    memset(s.dtail, 0, (size_t)(c->chunk * c->kern->nr) * sizeof(float));
  else
    memset(s.d, 0, (size_t)(c->chunk * c->ldc) * sizeof(float));
  for (int64_t t = t0; t < t1; t++)
    wgrad_one(c, &s, &c->tasks[t]);
}

/* Largest work first (then offset, channel: a total order, so the task
 * list is the same on every run). */
static int wgrad_task_cmp(const void *pa, const void *pb) {
  const wgrad_task_t *a = (const wgrad_task_t *)pa,
                     *b = (const wgrad_task_t *)pb;
  if (a->work != b->work)
    return a->work > b->work ? -1 : 1;
  if (a->k != b->k)
    return a->k < b->k ? -1 : 1;
  return a->c0 < b->c0 ? -1 : a->c0 > b->c0;
}

static voxconv_status_t wgrad_gemm(voxconv_handle_t *h,
                                   const vc_conv_problem_t *p,
                                   const vc_algo_params_t *params) {
  const voxconv_kmap_t *km = p->kmap;
  const vc_gemm_kernel_t *kern;
  VC_CHECK(vc_cpu_gemm_select(h, p->cout, &kern));
  wgrad_ctx_t c;
  memset(&c, 0, sizeof c);
  c.kern = kern;
  c.km = km;
  c.x = p->a;
  c.dy = p->b;
  c.dw = p->c;
  c.dtype = p->dtype;
  c.cin = p->cin;
  c.cout = p->cout;
  c.npanel = (c.cout + kern->nr - 1) / kern->nr;
  c.ldc = c.npanel * kern->nr;
  c.chunk = params && params->v[0] > 0 ? params->v[0] : 256;
  /* Tasks: each offset's input channels split into groups so that no task
   * holds much more than 1/(4 * threads) of the work (the centre offset of
   * a submanifold map has ~1/4 of all pairs), largest first. Any split
   * gives the same bits: each dW element is one sequential sum over the
   * pairs of its offset. */
  const int64_t nt = h->num_threads > 0 ? h->num_threads : 1;
  const int64_t max_groups = (c.cin + kern->mr - 1) / kern->mr;
  const int64_t target =
      nt == 1 ? imax64(1, km->n_pairs) : imax64(1, km->n_pairs / (4 * nt));
  int64_t ntasks = 0;
  for (int64_t k = 0; k < km->kvol; k++) {
    const int64_t pk = km->pair_offsets[k + 1] - km->pair_offsets[k];
    ntasks += imax64(1, imin64(max_groups, (pk + target - 1) / target));
  }
  void *tmem = NULL;
  VC_CHECK(vc_host_alloc(h, (size_t)ntasks * sizeof(wgrad_task_t), &tmem,
                         "cpu_gather_gemm wgrad tasks"));
  wgrad_task_t *tasks = (wgrad_task_t *)tmem;
  ntasks = 0;
  c.group_width = 1;
  for (int64_t k = 0; k < km->kvol; k++) {
    const int64_t pk = km->pair_offsets[k + 1] - km->pair_offsets[k];
    const int64_t groups =
        imax64(1, imin64(max_groups, (pk + target - 1) / target));
    for (int64_t g = 0, c0 = 0; g < groups; g++) {
      const int64_t cw = tile_len(c.cin - c0, groups - g);
      wgrad_task_t t = {(int32_t)k, (int32_t)c0, (int32_t)cw, pk * cw};
      tasks[ntasks++] = t;
      c.group_width = imax64(c.group_width, cw);
      c0 += cw;
    }
  }
  qsort(tasks, (size_t)ntasks, sizeof *tasks, wgrad_task_cmp);
  c.tasks = tasks;
  const int nth = scratch_threads(h, ntasks);
  c.scratch_stride = align_up(wgrad_scratch_layout(&c, NULL, NULL));
  void *scratch = NULL;
  voxconv_status_t ast =
      vc_host_alloc(h, c.scratch_stride * (size_t)nth + VC_ALIGN, &scratch,
                    "cpu_gather_gemm wgrad scratch");
  if (ast != VOXCONV_STATUS_SUCCESS) {
    free(tmem);
    return ast;
  }
  c.scratch = (char *)(((uintptr_t)scratch + VC_ALIGN - 1) &
                       ~(uintptr_t)(VC_ALIGN - 1));
  voxconv_status_t st = vc_parallel_for(h, ntasks, 1, wgrad_task, &c);
  free(scratch);
  free(tmem);
  return st;
}

/* ---- f64 reference path ------------------------------------------------ */
/* dst[r][j] = sum_k sum_i src[nbr[r][k]][i] * w[k][i][j], k then i
 * ascending. Forward (dst y, nbr_out, src x, W [kvol][cin][cout]) and dgrad
 * (dst dx, nbr_in, src dy, W^T [kvol][cout][cin]) are both this gathered
 * product, so one task serves the two passes with one summation order. */
typedef struct f64_gather_ctx {
  int64_t kvol;
  const int32_t *nbr; /* [rows][kvol]: source row of (r, k), or -1 */
  const double *src;  /* [*][src_w] */
  const double *w;    /* [kvol][src_w][dst_w] */
  double *dst;        /* [rows][dst_w] */
  int64_t src_w, dst_w;
} f64_gather_ctx_t;

static void f64_gather_task(void *vctx, int64_t r0, int64_t r1, int tid) {
  (void)tid;
  const f64_gather_ctx_t *c = (const f64_gather_ctx_t *)vctx;
  const int64_t kvol = c->kvol, src_w = c->src_w, dst_w = c->dst_w;
  for (int64_t r = r0; r < r1; r++) {
    double *d = c->dst + r * dst_w;
    for (int64_t j = 0; j < dst_w; j++)
      d[j] = 0.0;
    for (int64_t k = 0; k < kvol; k++) {
      const int32_t s = c->nbr[r * kvol + k];
      if (s < 0)
        continue;
      const double *src = c->src + (int64_t)s * src_w;
      const double *w = c->w + k * src_w * dst_w;
      for (int64_t i = 0; i < src_w; i++) {
        const double sv = src[i];
        const double *wr = w + i * dst_w;
        for (int64_t j = 0; j < dst_w; j++)
          d[j] += sv * wr[j];
      }
    }
  }
}

typedef struct f64_wgrad_ctx {
  const voxconv_kmap_t *km;
  const double *x, *dy;
  double *dw;
  int64_t cin, cout;
} f64_wgrad_ctx_t;

/* dW[k][ci][co] = sum over the pairs of k, in map order, of
 * x[in][ci] * dy[out][co]. */
static void f64_wgrad_task(void *vctx, int64_t k0, int64_t k1, int tid) {
  (void)tid;
  const f64_wgrad_ctx_t *c = (const f64_wgrad_ctx_t *)vctx;
  const int64_t cin = c->cin, cout = c->cout;
  for (int64_t k = k0; k < k1; k++) {
    double *dw = c->dw + k * cin * cout;
    for (int64_t e = 0; e < cin * cout; e++)
      dw[e] = 0.0;
    for (int64_t q = c->km->pair_offsets[k]; q < c->km->pair_offsets[k + 1];
         q++) {
      const double *x = c->x + (int64_t)c->km->in_rows[q] * cin;
      const double *dy = c->dy + (int64_t)c->km->out_rows[q] * cout;
      for (int64_t ci = 0; ci < cin; ci++) {
        const double xv = x[ci];
        double *dr = dw + ci * cout;
        for (int64_t co = 0; co < cout; co++)
          dr[co] += xv * dy[co];
      }
    }
  }
}

static voxconv_status_t run_f64(voxconv_handle_t *h, const vc_conv_problem_t *p,
                                void *ws) {
  const voxconv_kmap_t *km = p->kmap;
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD: {
    f64_gather_ctx_t c = {.kvol = km->kvol,
                          .nbr = km->nbr_out,
                          .src = (const double *)p->a,
                          .w = (const double *)p->b,
                          .dst = (double *)p->c,
                          .src_w = p->cin,
                          .dst_w = p->cout};
    return vc_parallel_for(h, km->n_out, 64, f64_gather_task, &c);
  }
  case VOXCONV_PASS_CONV_DGRAD: {
    if (!ws)
      return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                     "cpu_gather_gemm: no workspace for W^T");
    double *wt = (double *)ws;
    const double *w = (const double *)p->b;
    for (int64_t k = 0; k < km->kvol; k++)
      for (int64_t ci = 0; ci < p->cin; ci++)
        for (int64_t co = 0; co < p->cout; co++)
          wt[(k * p->cout + co) * p->cin + ci] =
              w[(k * p->cin + ci) * p->cout + co];
    f64_gather_ctx_t c = {.kvol = km->kvol,
                          .nbr = km->nbr_in,
                          .src = (const double *)p->a,
                          .w = wt,
                          .dst = (double *)p->c,
                          .src_w = p->cout,
                          .dst_w = p->cin};
    return vc_parallel_for(h, km->n_in, 64, f64_gather_task, &c);
  }
  case VOXCONV_PASS_CONV_WGRAD: {
    f64_wgrad_ctx_t c = {km,
                         (const double *)p->a,
                         (const double *)p->b,
                         (double *)p->c,
                         p->cin,
                         p->cout};
    return vc_parallel_for(h, km->kvol, 1, f64_wgrad_task, &c);
  }
  default:
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "cpu_gather_gemm: pass %d is not a conv pass", (int)p->pass);
  }
}

static voxconv_status_t gg_run(voxconv_handle_t *h, const vc_conv_problem_t *p,
                               const vc_algo_params_t *params, void *ws) {
  if (p->dtype == VOXCONV_DTYPE_F64)
    return run_f64(h, p, ws);
  switch (p->pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_CONV_DGRAD:
    return rows_gemm(h, p, params, ws);
  case VOXCONV_PASS_CONV_WGRAD:
    return wgrad_gemm(h, p, params);
  default:
    return vc_fail(h, VOXCONV_STATUS_INTERNAL,
                   "cpu_gather_gemm: pass %d is not a conv pass", (int)p->pass);
  }
}

const vc_algo_t vc_algo_cpu_gather_gemm = {
    {"cpu_gather_gemm", VOXCONV_BACKEND_CPU,
     (1u << VOXCONV_PASS_CONV_FWD) | (1u << VOXCONV_PASS_CONV_DGRAD) |
         (1u << VOXCONV_PASS_CONV_WGRAD),
     1,
     "CPU: per block of destination rows, gather the rows of each offset "
     "and multiply them by the packed weights with register tiles "
     "(AVX-512/AVX2/portable); wgrad per (offset, channel group); "
     "f32 accumulation, f64 reference path"},
    gg_supports,
    gg_param_space,
    gg_workspace_size,
    gg_run,
    NULL};
