/* int8 sparse convolution on the CPU: the reference for the int8 ops
 * (voxconv.h, "int8 (quantized) sparse convolution").
 *
 * Output rows are cut into blocks, one block per task (vc_parallel_for), so
 * every row is written once and no atomics are needed. A block finds its
 * pairs of offset k as one range of the pair list (within an offset, pairs
 * are sorted by output row in every map mode, inverse maps included), and
 * adds their products into an int32 accumulator block:
 *   portable   plain loops, qx[i][ci] * qw[k][ci][:] per pair (the
 *              compiler vectorises the row update)
 *   VNNI       the block's rows of offset k gathered (zero-padded to a
 *              multiple of 4 channels) and multiplied by the packed
 *              weights with register tiles (int8_vnni.c), plus the row
 *              correction of the u8 offset
 *   depthwise  acc[o][c] += qx[i][c] * qw[k][c], portable
 * Integer sums are exact, so the order is free and every path gives the
 * same accumulators. The epilogue (voxconv.h steps 2-5) then runs per row,
 * in fp32 with fmaf and an IEEE division, shared by every path (the
 * AVX-512 one is a lane-by-lane copy of it). */
#include "vc_cpu.h"

#include "../ops/vc_int8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define I8_ALIGN 64

static size_t i8_align_up(size_t n) {
  return (n + I8_ALIGN - 1) & ~(size_t)(I8_ALIGN - 1);
}
static int64_t i8_min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

/* ---- the epilogue, portable --------------------------------------------- */
static void epilogue_portable(const int32_t *acc, int64_t n, const float *m,
                              const float *b, int relu, float y_scale,
                              voxconv_dtype_t dt, void *dst) {
  for (int64_t c = 0; c < n; c++) {
    float v = fmaf((float)acc[c], m[c], b[c]);
    if (relu && v < 0.0f)
      v = 0.0f;
    switch (dt) {
    case VOXCONV_DTYPE_F32:
      ((float *)dst)[c] = v;
      break;
    case VOXCONV_DTYPE_F16:
      ((uint16_t *)dst)[c] = vc_f32_to_f16(v);
      break;
    case VOXCONV_DTYPE_BF16:
      ((uint16_t *)dst)[c] = vc_f32_to_bf16(v);
      break;
    case VOXCONV_DTYPE_I8:
      ((int8_t *)dst)[c] = vc_i8_requantize(v, y_scale);
      break;
    default:
      break;
    }
  }
}

/* ---- path selection ----------------------------------------------------- */
/* The VOXCONV_CPU_ISA family, validated by the float GEMM's selection so
 * that both accept and refuse the same names. */
static voxconv_status_t i8_select(const voxconv_handle_t *h, int64_t cout,
                                  const vc_int8_simd_t **simd) {
  const char *want = vc_getenv("VOXCONV_CPU_ISA");
  *simd = NULL;
  if (!want || strcasecmp(want, "auto") == 0) {
    const vc_int8_simd_t *narrow = vc_cpu_int8_simd("avx2");
    *simd = vc_cpu_int8_simd("avx512");
    /* 16-wide panels waste less on narrow outputs than 32-wide ones. */
    if (*simd && narrow && narrow != *simd &&
        (cout + narrow->nr - 1) / narrow->nr * narrow->nr <
            (cout + (*simd)->nr - 1) / (*simd)->nr * (*simd)->nr)
      *simd = narrow;
    return VOXCONV_STATUS_SUCCESS;
  }
  const vc_gemm_kernel_t *k;
  VC_CHECK(vc_cpu_gemm_select(h, cout, &k)); /* refuses unknown names */
  if (strcmp(k->name, "portable") != 0)
    *simd = vc_cpu_int8_simd(k->name);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_cpu_int8_path(const voxconv_handle_t *h, int64_t cout,
                                  const char **name) {
  const vc_int8_simd_t *s;
  VC_CHECK(i8_select(h, cout, &s));
  *name = s ? s->name : "portable";
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- the block walker ---------------------------------------------------- */
typedef struct i8_ctx {
  const vc_int8_problem_t *p;
  const voxconv_kmap_t *km;
  const vc_int8_simd_t *simd; /* NULL: portable (or depthwise) */
  vc_int8_epilogue_fn epilogue;
  int64_t ldc;    /* accumulator row stride (cout padded to the panels) */
  int64_t kg;     /* VNNI: groups of 4 input channels */
  int64_t npanel; /* VNNI: column panels of nr */
  const uint8_t *bpack; /* VNNI: [kvol][npanel][kg][nr][4], qw + 128 */
  const float *m, *b;   /* epilogue constants [cout] */
  int64_t block_rows;
  char *scratch;
  size_t scratch_stride;
} i8_ctx_t;

typedef struct i8_scratch {
  int32_t *acc;         /* [block_rows][ldc] */
  int32_t *loc;         /* [block_rows] local row of each pair */
  int32_t *corr;        /* [block_rows] VNNI: sum of qx over the row's pairs */
  int8_t *tile;         /* [block_rows][kg * 4] VNNI gathered rows */
  const int8_t **arow;  /* [block_rows] */
} i8_scratch_t;

#define I8_CARVE(field, type, count)                                           \
  do {                                                                         \
    if (base)                                                                  \
      s->field = (type)(void *)(base + off);                                   \
    off += i8_align_up((size_t)(count) * sizeof(*s->field));                   \
  } while (0)

/* With base == NULL only the size; with a base the same walk hands out the
 * pieces. */
static size_t i8_scratch_layout(const i8_ctx_t *c, char *base,
                                i8_scratch_t *s) {
  size_t off = 0;
  const int64_t br = c->block_rows;
  I8_CARVE(acc, int32_t *, br * c->ldc);
  I8_CARVE(loc, int32_t *, br);
  I8_CARVE(corr, int32_t *, br);
  I8_CARVE(tile, int8_t *, c->simd ? br * c->kg * 4 : 1);
  I8_CARVE(arow, const int8_t **, br);
  return off;
}

static int64_t i8_lower_bound(const int32_t *rows, int64_t lo, int64_t hi,
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

/* acc[loc[q]] += qx[src[q]] * qW[k] for the n pairs of offset k, portable. */
static void offset_portable(const i8_ctx_t *c, i8_scratch_t *s, int64_t k,
                            int64_t n, const int32_t *src) {
  const vc_int8_problem_t *p = c->p;
  const int64_t cin = p->cin, cout = p->cout;
  const int8_t *wk = p->w + k * cin * cout;
  /* element (ci, co) of offset k at wk[ci * sci + co * sco] */
  const int64_t sci = p->w_koi ? 1 : cout, sco = p->w_koi ? cin : 1;
  for (int64_t q = 0; q < n; q++) {
    const int8_t *xr = p->x + (int64_t)src[q] * cin;
    int32_t *ar = s->acc + (int64_t)s->loc[q] * c->ldc;
    for (int64_t ci = 0; ci < cin; ci++) {
      const int32_t xv = xr[ci];
      if (xv == 0)
        continue; /* exact sums: skipping zeros changes nothing */
      const int8_t *wr = wk + ci * sci;
      for (int64_t co = 0; co < cout; co++)
        ar[co] += xv * (int32_t)wr[co * sco];
    }
  }
}

/* Depthwise: acc[loc[q]][ch] += qx[src[q]][ch] * qw[k][ch]. */
static void offset_depthwise(const i8_ctx_t *c, i8_scratch_t *s, int64_t k,
                             int64_t n, const int32_t *src) {
  const vc_int8_problem_t *p = c->p;
  const int64_t ch = p->cout;
  const int8_t *wk = p->w + k * ch;
  for (int64_t q = 0; q < n; q++) {
    const int8_t *xr = p->x + (int64_t)src[q] * ch;
    int32_t *ar = s->acc + (int64_t)s->loc[q] * c->ldc;
    for (int64_t e = 0; e < ch; e++)
      ar[e] += (int32_t)xr[e] * (int32_t)wk[e];
  }
}

/* VNNI: gather the n rows (zero-padded), note their sums for the u8-offset
 * correction, then the register tiles panel by panel (the panel stays in
 * L1 while every tile of rows passes over it). */
static void offset_vnni(const i8_ctx_t *c, i8_scratch_t *s, int64_t k,
                        int64_t n, const int32_t *src) {
  const vc_int8_problem_t *p = c->p;
  const int64_t cin = p->cin, kw = c->kg * 4;
  const int mr = c->simd->mr;
  const int64_t nr = c->simd->nr;
  for (int64_t q = 0; q < n; q++) {
    const int8_t *xr = p->x + (int64_t)src[q] * cin;
    int8_t *t = s->tile + q * kw;
    int32_t sum = 0;
    for (int64_t ci = 0; ci < cin; ci++) {
      t[ci] = xr[ci];
      sum += xr[ci];
    }
    for (int64_t ci = cin; ci < kw; ci++)
      t[ci] = 0;
    s->corr[s->loc[q]] += sum;
    s->arow[q] = t;
  }
  const int64_t ntiles = (n + mr - 1) / mr;
  for (int64_t j = 0; j < c->npanel; j++) {
    const uint8_t *bp = c->bpack + (k * c->npanel + j) * c->kg * nr * 4;
    for (int64_t t = 0, q = 0; t < ntiles; t++) {
      /* balanced tiles keep every tile's accumulators busy */
      const int64_t len = (n - q + (ntiles - t) - 1) / (ntiles - t);
      c->simd->tile((int)len, c->kg, s->arow + q, bp, s->acc + j * nr, c->ldc,
                    s->loc + q);
      q += len;
    }
  }
}

static void i8_block(const i8_ctx_t *c, i8_scratch_t *s, int64_t blk) {
  const vc_int8_problem_t *p = c->p;
  const voxconv_kmap_t *km = c->km;
  const int64_t r0 = blk * c->block_rows;
  const int64_t nb = i8_min(c->block_rows, km->n_out - r0);
  memset(s->acc, 0, (size_t)(nb * c->ldc) * sizeof(int32_t));
  memset(s->corr, 0, (size_t)nb * sizeof(int32_t));
  for (int64_t k = 0; k < km->kvol; k++) {
    const int64_t lo = km->pair_offsets[k], hi = km->pair_offsets[k + 1];
    const int64_t q0 = i8_lower_bound(km->out_rows, lo, hi, r0);
    const int64_t q1 = i8_lower_bound(km->out_rows, q0, hi, r0 + nb);
    if (q1 == q0)
      continue;
    for (int64_t q = q0; q < q1; q++)
      s->loc[q - q0] = (int32_t)(km->out_rows[q] - r0);
    if (p->depthwise)
      offset_depthwise(c, s, k, q1 - q0, km->in_rows + q0);
    else if (c->simd)
      offset_vnni(c, s, k, q1 - q0, km->in_rows + q0);
    else
      offset_portable(c, s, k, q1 - q0, km->in_rows + q0);
  }
  const size_t esz = voxconv_dtype_size(p->y_dtype);
  for (int64_t r = 0; r < nb; r++) {
    int32_t *a = s->acc + r * c->ldc;
    if (c->simd) { /* remove 128 * sum(qx) of the u8 offset (modular) */
      const uint32_t corr = 128u * (uint32_t)s->corr[r];
      for (int64_t co = 0; co < p->cout; co++)
        a[co] = (int32_t)((uint32_t)a[co] - corr);
    }
    void *dst = (char *)p->y + (size_t)((r0 + r) * p->cout) * esz;
    if (p->y_dtype == VOXCONV_DTYPE_I32)
      memcpy(dst, a, (size_t)p->cout * sizeof(int32_t));
    else
      c->epilogue(a, p->cout, c->m, c->b, p->relu, p->y_scale, p->y_dtype,
                  dst);
  }
}

static void i8_task(void *vctx, int64_t b0, int64_t b1, int tid) {
  const i8_ctx_t *c = (const i8_ctx_t *)vctx;
  i8_scratch_t s;
  memset(&s, 0, sizeof s);
  i8_scratch_layout(c, c->scratch + (size_t)tid * c->scratch_stride, &s);
  for (int64_t b = b0; b < b1; b++)
    i8_block(c, &s, b);
}

/* ---- weight packing for the VNNI tiles ---------------------------------- */
typedef struct i8_pack_ctx {
  const vc_int8_problem_t *p;
  int64_t nr, kg, npanel;
  uint8_t *out;
} i8_pack_ctx_t;

static void i8_pack_task(void *vctx, int64_t k0, int64_t k1, int tid) {
  (void)tid;
  const i8_pack_ctx_t *c = (const i8_pack_ctx_t *)vctx;
  const size_t per_k = (size_t)(c->npanel * c->kg * c->nr * 4);
  for (int64_t k = k0; k < k1; k++) {
    uint8_t *bk = c->out + (size_t)k * per_k;
    memset(bk, 128, per_k); /* padding = weight 0 */
    for (int64_t ci = 0; ci < c->p->cin; ci++) {
      const int64_t g = ci / 4, bsub = ci % 4;
      for (int64_t co = 0; co < c->p->cout; co++) {
        const int64_t j = co / c->nr, t = co % c->nr;
        bk[((j * c->kg + g) * c->nr + t) * 4 + bsub] =
            (uint8_t)((int32_t)vc_int8_w_at(c->p, k, ci, co) + 128);
      }
    }
  }
}

static int64_t i8_block_rows(int64_t ldc, int64_t n_rows, int nthreads) {
  /* ~64 KB of accumulators (L2), a few blocks per thread for balance. The
   * block size never changes the results. */
  const int64_t want = 16384 / (ldc > 0 ? ldc : 1);
  int64_t br = 16;
  while (br * 2 <= want && br < 512)
    br *= 2;
  while (br > 16 && n_rows < br * 4 * (int64_t)nthreads)
    br /= 2;
  return br;
}

voxconv_status_t vc_cpu_conv_int8(voxconv_handle_t *h,
                                  const vc_int8_problem_t *p) {
  const voxconv_kmap_t *km = p->kmap;
  i8_ctx_t c;
  memset(&c, 0, sizeof c);
  c.p = p;
  c.km = km;
  c.epilogue = epilogue_portable;
  /* Depthwise has no VNNI tile (no reduction over channels), but it
   * validates VOXCONV_CPU_ISA the same way and shares the epilogue. */
  VC_CHECK(i8_select(h, p->cout, &c.simd));
  if (c.simd && c.simd->epilogue)
    c.epilogue = c.simd->epilogue;
  if (p->depthwise)
    c.simd = NULL;
  if (km->n_out == 0)
    return VOXCONV_STATUS_SUCCESS;

  void *bpack = NULL, *consts = NULL, *scratch = NULL;
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  if (c.simd) {
    c.kg = (p->cin + 3) / 4;
    c.npanel = (p->cout + c.simd->nr - 1) / c.simd->nr;
    c.ldc = c.npanel * c.simd->nr;
    const size_t bytes = (size_t)(km->kvol * c.npanel * c.kg * c.simd->nr * 4);
    st = vc_host_alloc(h, bytes, &bpack, "int8 packed weights");
    if (st != VOXCONV_STATUS_SUCCESS)
      goto done;
    i8_pack_ctx_t pc = {p, c.simd->nr, c.kg, c.npanel, (uint8_t *)bpack};
    st = vc_parallel_for(h, km->kvol, 1, i8_pack_task, &pc);
    if (st != VOXCONV_STATUS_SUCCESS)
      goto done;
    c.bpack = (const uint8_t *)bpack;
  } else {
    c.ldc = (p->cout + 15) / 16 * 16; /* aligned rows for the vectoriser */
  }

  /* Epilogue constants: m[c] = x_scale * w_scale[c], one fp32 rounding
   * (x86-64 evaluates float in float: FLT_EVAL_METHOD 0). Padded
   * to whole vectors so that masked loads never read past them. */
  if (p->y_dtype != VOXCONV_DTYPE_I32) {
    const int64_t nc = (p->cout + 15) / 16 * 16;
    st = vc_host_alloc(h, (size_t)nc * 2 * sizeof(float), &consts,
                       "int8 epilogue constants");
    if (st != VOXCONV_STATUS_SUCCESS)
      goto done;
    float *m = (float *)consts, *b = m + nc;
    for (int64_t co = 0; co < nc; co++) {
      m[co] = co < p->cout ? p->x_scale * p->w_scale[co] : 0.0f;
      b[co] = co < p->cout && p->bias ? p->bias[co] : 0.0f;
    }
    c.m = m;
    c.b = b;
  }

  c.block_rows = i8_block_rows(c.ldc, km->n_out, h->num_threads);
  {
    const int64_t nblocks = (km->n_out + c.block_rows - 1) / c.block_rows;
    int64_t nt = h->num_threads > 0 ? h->num_threads : 1;
    nt = i8_min(nt, nblocks);
    c.scratch_stride = i8_align_up(i8_scratch_layout(&c, NULL, NULL));
    st = vc_host_alloc(h, c.scratch_stride * (size_t)nt + I8_ALIGN, &scratch,
                       "int8 conv thread scratch");
    if (st != VOXCONV_STATUS_SUCCESS)
      goto done;
    c.scratch = (char *)(((uintptr_t)scratch + I8_ALIGN - 1) &
                         ~(uintptr_t)(I8_ALIGN - 1));
    st = vc_parallel_for(h, nblocks, 1, i8_task, &c);
  }
done:
  free(bpack);
  free(consts);
  free(scratch);
  return st;
}
