/* CPU ops: dtype paths, threading, validation and edge cases of conv,
 * depthwise, pooling and unpooling (the dense brute-force oracle lives in
 * test_dense_oracle.c).
 *
 *  1. The F64 path against an independent pair-list reference written
 *     here (loops over (i, o, k) pairs, not over neighbour tables).
 *  2. Every op in f32 / f16 / bf16, on every GEMM kernel this CPU runs
 *     (VOXCONV_CPU_ISA), against the F64 path on the same (rounded) inputs:
 *     the error of every element within the bound written below (output
 *     rounding of the dtype + f32 accumulation relative to the summed
 *     magnitude).
 *  3. Poisoned outputs are fully written; outputs without pairs are 0.
 *  4. Bitwise-identical results with 1, 2 and 3 threads, and with every
 *     block size of the algorithm's parameter space.
 *  5. NaN / Inf in an input make exactly the outputs a dense convolution
 *     would touch non-finite, and nothing else.
 *  6. One check per bad input (status + the words of the message).
 *  7. N = 0 and maps without pairs.
 *
 * Maps: random coordinates through voxconv_kmap_build (submanifold,
 * dilated, strided, transposed, generative) and hand-made random
 * matchings (arbitrary pairings, rows with no pairs, n_in != n_out).
 *
 * `test_ops_cpu --bench [scan.bin] [voxel_m] [floats_per_point] [threads]`
 * instead times the CPU conv
 * passes on a voxelised scan (default SemanticKITTI 00/000000 at 0.05 m)
 * and prints useful GFLOP/s = 2 * pairs * Cin * Cout / time. */
#include "vc_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "coords/vc_kmap.h"
#include "core/vc_core.h"
#include "cpu/vc_cpu.h"
#include "ops/vc_algo.h"
#include "ops/vc_validate.h"

static const voxconv_dtype_t F32 = VOXCONV_DTYPE_F32;
static const voxconv_dtype_t F16 = VOXCONV_DTYPE_F16;
static const voxconv_dtype_t BF16 = VOXCONV_DTYPE_BF16;
static const voxconv_dtype_t F64 = VOXCONV_DTYPE_F64;

/* ---- tolerances --------------------------------------------------------- */
/* ref = the F64 path on the same (rounded) inputs. f32 / f16 / bf16
 * accumulate in f32, so an element's accumulation error scales with the
 * magnitude of what was summed, S_e = sum of |terms| (computed exactly by
 * running the F64 path on |inputs|), not with |ref_e|: a cancelling sum
 * keeps the absolute error of its terms. The result is then rounded once to
 * the output dtype (half an ulp: 2^-24, 2^-11, 2^-8 relative; for f16
 * results in the subnormal range half the subnormal spacing, 2^-25,
 * absolute). Each element must satisfy
 *     |got - ref| <= U_OUT(dtype) * |ref| + SUB_OUT(dtype) + TOL_ACC * S_e
 * i.e. a relative error per element whose floor is S_e; the test reports
 * the worst ratio |got - ref| / bound. TOL_ACC = 1e-5 allows ~170 f32 ulps
 * of the summed magnitude (sequential sums of <= a few thousand terms).
 * MAX pooling forward selects an input: exact in every dtype. */
#define TOL_ACC 1e-5
#define U_F32 0x1p-24
#define U_F16 0x1p-11
#define U_BF16 0x1p-8
#define SUB_F16 0x1p-25
/* The F64 path against the pair-list reference: same sums, possibly in a
 * different association, all in f64 (rel with floor 1e-2 * rms). */
#define TOL_F64 1e-12
#define FLOOR 1e-2

static double u_out(voxconv_dtype_t dt) {
  return dt == F32 ? U_F32 : dt == F16 ? U_F16 : U_BF16;
}

static voxconv_handle_t *g_h;     /* 2 threads */
static voxconv_handle_t *g_ht[3]; /* 1, 2, 3 threads */

/* ---- maps -----------------------------------------------------------------
 */
typedef struct map_case {
  char name[96];
  voxconv_kmap_t *km;
  int hand; /* made here (free with free_hand_map), else by the API */
  /* host copies of the pairs (CSR by k, sorted by output row within k) */
  int64_t *po;
  int32_t *pin, *pout;
} map_case_t;

/* A random partial matching per offset: for each k, each output row gets an
 * input row with probability `density`, every input used at most once per
 * k (the invariant of a geometric map), pairs sorted by output row. */
static voxconv_kmap_t *hand_map(int64_t n_in, int64_t n_out, int kvol,
                                double density) {
  voxconv_kmap_t *km = (voxconv_kmap_t *)calloc(1, sizeof *km);
  km->backend = VOXCONV_BACKEND_CPU;
  km->kvol = kvol;
  km->desc.mode = VOXCONV_KMAP_STRIDED;
  km->desc.kernel_size[0] = kvol, km->desc.kernel_size[1] = 1,
  km->desc.kernel_size[2] = 1;
  km->n_in = n_in;
  km->n_out = n_out;
  km->nbr_out = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_out * kvol + 1));
  km->nbr_in = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_in * kvol + 1));
  for (int64_t e = 0; e < n_out * kvol; e++)
    km->nbr_out[e] = -1;
  for (int64_t e = 0; e < n_in * kvol; e++)
    km->nbr_in[e] = -1;
  km->pair_offsets = (int64_t *)calloc((size_t)kvol + 1, sizeof(int64_t));
  const int64_t cap = n_out * kvol + 1;
  km->in_rows = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
  km->out_rows = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
  int64_t np = 0;
  for (int k = 0; k < kvol; k++) {
    km->pair_offsets[k] = np;
    for (int64_t o = 0; o < n_out && n_in > 0; o++) {
      if (vc_rand_uniform() >= density)
        continue;
      for (int attempt = 0; attempt < 4; attempt++) {
        const int64_t i = vc_rand_range(0, n_in - 1);
        if (km->nbr_in[i * kvol + k] >= 0)
          continue;
        km->nbr_in[i * kvol + k] = (int32_t)o;
        km->nbr_out[o * kvol + k] = (int32_t)i;
        km->in_rows[np] = (int32_t)i;
        km->out_rows[np] = (int32_t)o;
        np++;
        break;
      }
    }
  }
  km->pair_offsets[kvol] = np;
  km->n_pairs = np;
  return km;
}

static void free_hand_map(voxconv_kmap_t *km) {
  free(km->nbr_out);
  free(km->nbr_in);
  free(km->pair_offsets);
  free(km->in_rows);
  free(km->out_rows);
  free(km);
}

static void fill_pairs(map_case_t *mc) {
  const voxconv_kmap_t *km = mc->km;
  mc->po = (int64_t *)malloc(sizeof(int64_t) * (size_t)(km->kvol + 1));
  mc->pin = (int32_t *)malloc(sizeof(int32_t) * (size_t)(km->n_pairs + 1));
  mc->pout = (int32_t *)malloc(sizeof(int32_t) * (size_t)(km->n_pairs + 1));
  if (mc->hand) {
    memcpy(mc->po, km->pair_offsets, sizeof(int64_t) * (size_t)(km->kvol + 1));
    memcpy(mc->pin, km->in_rows, sizeof(int32_t) * (size_t)km->n_pairs);
    memcpy(mc->pout, km->out_rows, sizeof(int32_t) * (size_t)km->n_pairs);
  } else {
    VC_EXPECT_STATUS(g_h,
                     voxconv_kmap_get_pairs(g_h, km, mc->po, mc->pin, mc->pout),
                     VOXCONV_STATUS_SUCCESS);
  }
}

static void free_case(map_case_t *mc) {
  if (mc->hand)
    free_hand_map(mc->km);
  else
    voxconv_kmap_destroy(g_h, mc->km);
  free(mc->po);
  free(mc->pin);
  free(mc->pout);
}

static voxconv_kmap_desc_t desc_of(voxconv_kmap_mode_t mode, int kx, int ky,
                                   int kz, int s, int d) {
  voxconv_kmap_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.mode = mode;
  desc.kernel_size[0] = kx, desc.kernel_size[1] = ky, desc.kernel_size[2] = kz;
  for (int a = 0; a < 3; a++)
    desc.stride[a] = s, desc.dilation[a] = d;
  return desc;
}

/* Builds the list of map cases; returns the count. */
static int make_cases(map_case_t *cases, int max) {
  int n = 0;
  int64_t nc = 0;
  int32_t *coords = vc_random_coords(900, 7, &nc);
  voxconv_coords_t in = {coords, nc, {1, 1, 1}};
  struct {
    const char *name;
    voxconv_kmap_desc_t d;
  } geo[] = {
      {"subm 3x3x3", desc_of(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1)},
      {"subm 2x3x1 dil 2", desc_of(VOXCONV_KMAP_SUBMANIFOLD, 2, 3, 1, 1, 2)},
      {"strided k2 s2", desc_of(VOXCONV_KMAP_STRIDED, 2, 2, 2, 2, 1)},
      {"strided k3 s2", desc_of(VOXCONV_KMAP_STRIDED, 3, 3, 3, 2, 1)},
      {"generative k2 s2", desc_of(VOXCONV_KMAP_GENERATIVE, 2, 2, 2, 2, 1)},
  };
  voxconv_kmap_t *strided = NULL;
  for (size_t g = 0; g < sizeof geo / sizeof geo[0] && n < max; g++) {
    voxconv_coords_t gin = in;
    if (geo[g].d.mode == VOXCONV_KMAP_GENERATIVE)
      gin.tensor_stride[0] = gin.tensor_stride[1] = gin.tensor_stride[2] = 2;
    voxconv_kmap_t *km = NULL;
    const voxconv_status_t st =
        voxconv_kmap_build(g_h, &geo[g].d, &gin, NULL, &km);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "build %s: %s: %s", geo[g].name,
              voxconv_status_string(st), voxconv_get_last_error(g_h));
    if (st != VOXCONV_STATUS_SUCCESS)
      continue;
    map_case_t *mc = &cases[n++];
    memset(mc, 0, sizeof *mc);
    snprintf(mc->name, sizeof mc->name, "%s (n_in %lld)", geo[g].name,
             (long long)nc);
    mc->km = km;
    if (geo[g].d.mode == VOXCONV_KMAP_STRIDED && !strided)
      strided = km;
  }
  /* TRANSPOSED back from the coarse level of the k2 s2 map. */
  if (strided && n < max) {
    const int32_t *oc = NULL;
    voxconv_kmap_out_coords(strided, &oc);
    voxconv_coords_t coarse = {oc, strided->n_out, {2, 2, 2}};
    voxconv_kmap_desc_t d = desc_of(VOXCONV_KMAP_TRANSPOSED, 2, 2, 2, 2, 1);
    voxconv_kmap_t *km = NULL;
    const voxconv_status_t st = voxconv_kmap_build(g_h, &d, &coarse, &in, &km);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "build transposed: %s: %s",
              voxconv_status_string(st), voxconv_get_last_error(g_h));
    if (st == VOXCONV_STATUS_SUCCESS) {
      map_case_t *mc = &cases[n++];
      memset(mc, 0, sizeof *mc);
      snprintf(mc->name, sizeof mc->name, "transposed k2 s2 (n_in %lld)",
               (long long)strided->n_out);
      mc->km = km;
    }
  }
  /* Hand-made matchings: uneven sizes, empty rows, kernel volumes that
   * are not cubes. */
  const struct {
    int64_t n_in, n_out;
    int kvol;
    double density;
  } hm[] = {{300, 500, 7, 0.5},
            {700, 200, 30, 0.25},
            {64, 64, 1, 0.9},
            {400, 333, 13, 0.05}};
  for (size_t t = 0; t < sizeof hm / sizeof hm[0] && n < max; t++) {
    map_case_t *mc = &cases[n++];
    memset(mc, 0, sizeof *mc);
    mc->km = hand_map(hm[t].n_in, hm[t].n_out, hm[t].kvol, hm[t].density);
    mc->hand = 1;
    snprintf(mc->name, sizeof mc->name,
             "hand matching n_in %lld n_out %lld kvol %d density %.2f",
             (long long)hm[t].n_in, (long long)hm[t].n_out, hm[t].kvol,
             hm[t].density);
  }
  for (int c = 0; c < n; c++)
    fill_pairs(&cases[c]);
  free(coords);
  return n;
}

/* ---- ops as data --------------------------------------------------------- */
typedef enum op {
  OP_CONV_FWD,
  OP_CONV_DGRAD,
  OP_CONV_WGRAD,
  OP_DW_FWD,
  OP_DW_DGRAD,
  OP_DW_WGRAD,
  OP_POOL_FWD_MAX,
  OP_POOL_FWD_AVG,
  OP_POOL_FWD_SUM,
  OP_POOL_BWD_MAX,
  OP_POOL_BWD_AVG,
  OP_POOL_BWD_SUM,
  OP_UNPOOL_FWD,
  OP_UNPOOL_BWD,
  OP_COUNT
} op_t;

static const char *const op_names[OP_COUNT] = {
    "conv_forward",      "conv_dgrad",        "conv_wgrad",
    "depthwise_forward", "depthwise_dgrad",   "depthwise_wgrad",
    "pool_forward MAX",  "pool_forward AVG",  "pool_forward SUM",
    "pool_backward MAX", "pool_backward AVG", "pool_backward SUM",
    "unpool_forward",    "unpool_backward"};

static int op_is_conv(op_t op) {
  return op <= OP_CONV_WGRAD;
}

/* Rows of a tensor: which map dimension they follow. */
typedef enum { R_IN, R_OUT, R_KVOL } rows_kind_t;

/* One tensor argument: feats [d0][d1], or conv weights [d0][d1][d2]. */
typedef struct targ {
  const char *name;
  rows_kind_t rows;
  int is_w; /* voxconv_weights_t */
  int64_t d0, d1, d2;
  voxconv_dtype_t dt;
  void *data;
} targ_t;

/* Inputs args[0..n_in), output args[n_in]. */
typedef struct io {
  op_t op;
  int n_in;
  targ_t a[4];
} io_t;

static int64_t targ_elems(const targ_t *t) {
  return t->d0 * t->d1 * (t->is_w ? t->d2 : 1);
}

static voxconv_feats_t as_feats(const targ_t *t) {
  voxconv_feats_t f = {t->data, t->d0, t->d1, t->dt};
  return f;
}
static voxconv_weights_t as_weights(const targ_t *t) {
  voxconv_weights_t w = {t->data, t->d0, t->d1, t->d2, t->dt};
  return w;
}

static targ_t T(const char *name, rows_kind_t rk, int64_t rows, int64_t ch) {
  targ_t t = {name, rk, 0, rows, ch, 1, F32, NULL};
  return t;
}
static targ_t TW(const char *name, int64_t kvol, int64_t cin, int64_t cout) {
  targ_t t = {name, R_KVOL, 1, kvol, cin, cout, F32, NULL};
  return t;
}

/* Shapes of op on map km (cin/cout for conv, c for the others). */
static io_t io_shape(op_t op, const voxconv_kmap_t *km, int64_t cin,
                     int64_t cout, int64_t c) {
  io_t io;
  memset(&io, 0, sizeof io);
  io.op = op;
  const int64_t ni = km->n_in, no = km->n_out, kv = km->kvol;
  switch (op) {
  case OP_CONV_FWD:
    io.n_in = 2;
    io.a[0] = T("x", R_IN, ni, cin), io.a[1] = TW("w", kv, cin, cout);
    io.a[2] = T("y", R_OUT, no, cout);
    break;
  case OP_CONV_DGRAD:
    io.n_in = 2;
    io.a[0] = T("dy", R_OUT, no, cout), io.a[1] = TW("w", kv, cin, cout);
    io.a[2] = T("dx", R_IN, ni, cin);
    break;
  case OP_CONV_WGRAD:
    io.n_in = 2;
    io.a[0] = T("x", R_IN, ni, cin), io.a[1] = T("dy", R_OUT, no, cout);
    io.a[2] = TW("dw", kv, cin, cout);
    break;
  case OP_DW_FWD:
    io.n_in = 2;
    io.a[0] = T("x", R_IN, ni, c), io.a[1] = T("w", R_KVOL, kv, c);
    io.a[2] = T("y", R_OUT, no, c);
    break;
  case OP_DW_DGRAD:
    io.n_in = 2;
    io.a[0] = T("dy", R_OUT, no, c), io.a[1] = T("w", R_KVOL, kv, c);
    io.a[2] = T("dx", R_IN, ni, c);
    break;
  case OP_DW_WGRAD:
    io.n_in = 2;
    io.a[0] = T("x", R_IN, ni, c), io.a[1] = T("dy", R_OUT, no, c);
    io.a[2] = T("dw", R_KVOL, kv, c);
    break;
  case OP_POOL_FWD_MAX:
  case OP_POOL_FWD_AVG:
  case OP_POOL_FWD_SUM:
    io.n_in = 1;
    io.a[0] = T("x", R_IN, ni, c), io.a[1] = T("y", R_OUT, no, c);
    break;
  case OP_POOL_BWD_MAX:
    io.n_in = 3;
    io.a[0] = T("x", R_IN, ni, c), io.a[1] = T("y", R_OUT, no, c);
    io.a[2] = T("dy", R_OUT, no, c), io.a[3] = T("dx", R_IN, ni, c);
    break;
  case OP_POOL_BWD_AVG:
  case OP_POOL_BWD_SUM:
    io.n_in = 1;
    io.a[0] = T("dy", R_OUT, no, c), io.a[1] = T("dx", R_IN, ni, c);
    break;
  case OP_UNPOOL_FWD:
    io.n_in = 1;
    io.a[0] = T("x", R_OUT, no, c), io.a[1] = T("y", R_IN, ni, c);
    break;
  case OP_UNPOOL_BWD:
    io.n_in = 1;
    io.a[0] = T("dy", R_IN, ni, c), io.a[1] = T("dx", R_OUT, no, c);
    break;
  default:
    break;
  }
  return io;
}

static voxconv_pool_mode_t pool_mode_of(op_t op) {
  switch (op) {
  case OP_POOL_FWD_MAX:
  case OP_POOL_BWD_MAX:
    return VOXCONV_POOL_MAX;
  case OP_POOL_FWD_AVG:
  case OP_POOL_BWD_AVG:
    return VOXCONV_POOL_AVG;
  default:
    return VOXCONV_POOL_SUM;
  }
}

/* Calls the public function of io.op; `nulls` bit j passes NULL for
 * argument j; mode_override >= 0 replaces the pool mode. */
static voxconv_status_t call_op_ex(voxconv_handle_t *h,
                                   const voxconv_kmap_t *km, const io_t *io,
                                   const voxconv_conv_options_t *opt,
                                   unsigned nulls, int mode_override) {
  voxconv_feats_t f[4];
  voxconv_weights_t w[4];
  const void *p[4];
  for (int j = 0; j <= io->n_in; j++) {
    f[j] = as_feats(&io->a[j]);
    w[j] = as_weights(&io->a[j]);
    p[j] = (nulls >> j) & 1u ? NULL
           : io->a[j].is_w   ? (const void *)&w[j]
                             : (const void *)&f[j];
  }
#define FP(j) ((const voxconv_feats_t *)p[j])
#define WP(j) ((const voxconv_weights_t *)p[j])
  voxconv_pool_mode_t mode = pool_mode_of(io->op);
  if (mode_override >= 0)
    mode = (voxconv_pool_mode_t)mode_override;
  switch (io->op) {
  case OP_CONV_FWD:
    return voxconv_conv_forward(h, km, FP(0), WP(1), FP(2), opt);
  case OP_CONV_DGRAD:
    return voxconv_conv_dgrad(h, km, FP(0), WP(1), FP(2), opt);
  case OP_CONV_WGRAD:
    return voxconv_conv_wgrad(h, km, FP(0), FP(1), WP(2), opt);
  case OP_DW_FWD:
    return voxconv_depthwise_forward(h, km, FP(0), FP(1), FP(2), opt);
  case OP_DW_DGRAD:
    return voxconv_depthwise_dgrad(h, km, FP(0), FP(1), FP(2), opt);
  case OP_DW_WGRAD:
    return voxconv_depthwise_wgrad(h, km, FP(0), FP(1), FP(2), opt);
  case OP_POOL_FWD_MAX:
  case OP_POOL_FWD_AVG:
  case OP_POOL_FWD_SUM:
    return voxconv_pool_forward(h, km, mode, FP(0), FP(1));
  case OP_POOL_BWD_MAX:
    return voxconv_pool_backward(h, km, mode, FP(0), FP(1), FP(2), FP(3));
  case OP_POOL_BWD_AVG:
  case OP_POOL_BWD_SUM:
    return voxconv_pool_backward(h, km, mode, NULL, NULL, FP(0), FP(1));
  case OP_UNPOOL_FWD:
    return voxconv_unpool_forward(h, km, FP(0), FP(1));
  case OP_UNPOOL_BWD:
    return voxconv_unpool_backward(h, km, FP(0), FP(1));
  default:
    return VOXCONV_STATUS_INTERNAL;
  }
#undef FP
#undef WP
}

static voxconv_status_t call_op(voxconv_handle_t *h, const voxconv_kmap_t *km,
                                const io_t *io) {
  return call_op_ex(h, km, io, NULL, 0, -1);
}

static void *alloc_targ(const targ_t *t) {
  return malloc((size_t)(targ_elems(t) + 1) * voxconv_dtype_size(t->dt));
}

/* Random inputs in dtype dt; for MAX backward y is the forward of x. */
static void io_alloc(io_t *io, const voxconv_kmap_t *km, voxconv_dtype_t dt) {
  for (int j = 0; j <= io->n_in; j++) {
    io->a[j].dt = dt;
    io->a[j].data = alloc_targ(&io->a[j]);
    if (j < io->n_in)
      vc_fill_normal(io->a[j].data, dt, targ_elems(&io->a[j]));
  }
  if (io->op == OP_POOL_BWD_MAX) {
    io_t fwd;
    memset(&fwd, 0, sizeof fwd);
    fwd.op = OP_POOL_FWD_MAX;
    fwd.n_in = 1;
    fwd.a[0] = io->a[0];
    fwd.a[1] = io->a[1];
    VC_EXPECT_STATUS(g_h, call_op(g_h, km, &fwd), VOXCONV_STATUS_SUCCESS);
  }
}

static void io_free(io_t *io) {
  for (int j = 0; j <= io->n_in; j++) {
    free(io->a[j].data);
    io->a[j].data = NULL;
  }
}

/* The same inputs converted to f64 (exactly), with an f64 output buffer. */
static io_t io_to_f64(const io_t *io) {
  io_t r = *io;
  for (int j = 0; j <= io->n_in; j++) {
    r.a[j].dt = F64;
    r.a[j].data = alloc_targ(&r.a[j]);
    if (j < io->n_in)
      vc_load_f64(io->a[j].data, io->a[j].dt, targ_elems(&io->a[j]),
                  (double *)r.a[j].data);
  }
  return r;
}

static targ_t *out_of(io_t *io) {
  return &io->a[io->n_in];
}

/* S_e of the tolerance: the op in f64 on |inputs| (MAX backward keeps x and
 * y, which only choose the winners, and takes |dy|). Exact for every op
 * here, which are all linear in the inputs made absolute. Malloc'd. */
static double *abs_scale(const voxconv_kmap_t *km, const io_t *io) {
  io_t a = io_to_f64(io);
  for (int j = 0; j < a.n_in; j++) {
    if (io->op == OP_POOL_BWD_MAX && j < 2)
      continue;
    double *d = (double *)a.a[j].data;
    for (int64_t e = 0; e < targ_elems(&a.a[j]); e++)
      d[e] = fabs(d[e]);
  }
  VC_EXPECT_STATUS(g_h, call_op(g_h, km, &a), VOXCONV_STATUS_SUCCESS);
  double *s = (double *)out_of(&a)->data;
  out_of(&a)->data = NULL;
  io_free(&a);
  return s;
}

typedef struct bound_stats {
  double worst; /* max |got - ref| / bound */
  int64_t at, nonfinite_mismatch;
} bound_stats_t;

/* |got - ref| <= u_out * |ref| + TOL_ACC * scale (exact: 0), per element;
 * non-finite values must match in kind (NaN, +Inf, -Inf). */
static bound_stats_t check_bound(const void *got, voxconv_dtype_t dt,
                                 const double *ref, const double *scale,
                                 int64_t n, int exact) {
  bound_stats_t b = {0, -1, 0};
  for (int64_t e = 0; e < n; e++) {
    const double g = vc_get(got, dt, e), r = ref[e];
    if (!isfinite(g) || !isfinite(r)) {
      const int same = (isnan(g) && isnan(r)) ||
                       (isinf(g) && isinf(r) && (g > 0) == (r > 0));
      if (!same) {
        b.nonfinite_mismatch++;
        if (b.at < 0)
          b.at = e;
        b.worst = INFINITY;
      }
      continue;
    }
    const double d = fabs(g - r);
    const double bound = exact ? 0.0
                               : u_out(dt) * fabs(r) +
                                     (dt == F16 ? SUB_F16 : 0.0) +
                                     TOL_ACC * fabs(scale[e]);
    const double ratio = d == 0.0 ? 0.0 : bound > 0.0 ? d / bound : INFINITY;
    if (ratio > b.worst) {
      b.worst = ratio;
      b.at = e;
    }
  }
  return b;
}

/* ---- independent f64 reference over the pair lists ----------------------- */
/* Direct transcription of voxconv.h over the pairs (i, o, k), in map
 * order. Returns a malloc'd output. */
static double *pairs_reference(const map_case_t *mc, const io_t *io) {
  const voxconv_kmap_t *km = mc->km;
  const targ_t *o = &io->a[io->n_in];
  const int64_t n = targ_elems(o);
  double *r = (double *)calloc((size_t)n + 1, sizeof(double));
  const double *A = (const double *)io->a[0].data;
  const double *B = io->n_in > 1 ? (const double *)io->a[1].data : NULL;
  const double *Cc = io->n_in > 2 ? (const double *)io->a[2].data : NULL;
  const int64_t kvol = km->kvol;
  int64_t *cnt = (int64_t *)calloc((size_t)km->n_out + 1, sizeof(int64_t));
  char *seen = (char *)calloc((size_t)(km->n_out * io->a[0].d1) + 1, 1);
  for (int64_t q = 0; q < km->n_pairs; q++)
    cnt[mc->pout[q]]++;
  for (int64_t k = 0; k < kvol; k++)
    for (int64_t q = mc->po[k]; q < mc->po[k + 1]; q++) {
      const int64_t i = mc->pin[q], oo = mc->pout[q];
      switch (io->op) {
      case OP_CONV_FWD: {
        const int64_t ci = io->a[0].d1, co = io->a[1].d2;
        for (int64_t a = 0; a < ci; a++)
          for (int64_t b = 0; b < co; b++)
            r[oo * co + b] += A[i * ci + a] * B[(k * ci + a) * co + b];
        break;
      }
      case OP_CONV_DGRAD: {
        const int64_t ci = io->a[1].d1, co = io->a[1].d2;
        for (int64_t a = 0; a < ci; a++)
          for (int64_t b = 0; b < co; b++)
            r[i * ci + a] += A[oo * co + b] * B[(k * ci + a) * co + b];
        break;
      }
      case OP_CONV_WGRAD: {
        const int64_t ci = io->a[0].d1, co = io->a[1].d1;
        for (int64_t a = 0; a < ci; a++)
          for (int64_t b = 0; b < co; b++)
            r[(k * ci + a) * co + b] += A[i * ci + a] * B[oo * co + b];
        break;
      }
      case OP_DW_FWD: {
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++)
          r[oo * c + e] += A[i * c + e] * B[k * c + e];
        break;
      }
      case OP_DW_DGRAD: {
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++)
          r[i * c + e] += A[oo * c + e] * B[k * c + e];
        break;
      }
      case OP_DW_WGRAD: {
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++)
          r[k * c + e] += A[i * c + e] * B[oo * c + e];
        break;
      }
      case OP_POOL_FWD_MAX: {
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++) {
          const double v = A[i * c + e];
          double *d = &r[oo * c + e];
          if (!seen[oo * c + e]) {
            *d = v;
            seen[oo * c + e] = 1;
          } else if (!isnan(*d) && (isnan(v) || v > *d)) {
            *d = v;
          }
        }
        break;
      }
      case OP_POOL_FWD_AVG:
      case OP_POOL_FWD_SUM: {
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++)
          r[oo * c + e] += A[i * c + e];
        break;
      }
      case OP_POOL_BWD_MAX: { /* A = x, B = y, Cc = dy; first match wins */
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++) {
          const double x = A[i * c + e], y = B[oo * c + e];
          if (!seen[oo * c + e] && (x == y || (isnan(x) && isnan(y)))) {
            seen[oo * c + e] = 1;
            r[i * c + e] += Cc[oo * c + e];
          }
        }
        break;
      }
      case OP_POOL_BWD_AVG:
      case OP_POOL_BWD_SUM: {
        const int64_t c = io->a[0].d1;
        const double div = io->op == OP_POOL_BWD_AVG ? (double)cnt[oo] : 1.0;
        for (int64_t e = 0; e < c; e++)
          r[i * c + e] += A[oo * c + e] / div;
        break;
      }
      case OP_UNPOOL_FWD: {
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++)
          r[i * c + e] += A[oo * c + e];
        break;
      }
      case OP_UNPOOL_BWD: {
        const int64_t c = io->a[0].d1;
        for (int64_t e = 0; e < c; e++)
          r[oo * c + e] += A[i * c + e];
        break;
      }
      default:
        break;
      }
    }
  if (io->op == OP_POOL_FWD_AVG) {
    const int64_t c = io->a[0].d1;
    for (int64_t oo = 0; oo < km->n_out; oo++)
      if (cnt[oo])
        for (int64_t e = 0; e < c; e++)
          r[oo * c + e] /= (double)cnt[oo];
  }
  free(cnt);
  free(seen);
  return r;
}

/* ---- GEMM kernel selection ----------------------------------------------- */
static const char *g_isas[4];
static int g_n_isas;

static void set_isa(const char *isa) {
  if (isa)
    setenv("VOXCONV_CPU_ISA", isa, 1);
  else
    unsetenv("VOXCONV_CPU_ISA");
}

/* ---- 1-4: accuracy, poison, threads ------------------------------------- */
static void check_outputs_without_pairs(const map_case_t *mc, io_t *io,
                                        const char *what) {
  /* Rows of the output that no pair reaches must be exactly 0. */
  const targ_t *o = out_of(io);
  if (o->rows == R_KVOL)
    return;
  const voxconv_kmap_t *km = mc->km;
  const int64_t n_rows = o->d0;
  char *hit = (char *)calloc((size_t)n_rows + 1, 1);
  for (int64_t q = 0; q < km->n_pairs; q++)
    hit[o->rows == R_OUT ? mc->pout[q] : mc->pin[q]] = 1;
  int64_t bad = 0, empty_rows = 0;
  for (int64_t r = 0; r < n_rows; r++) {
    if (hit[r])
      continue;
    empty_rows++;
    for (int64_t e = 0; e < o->d1; e++)
      bad += vc_get(o->data, o->dt, r * o->d1 + e) != 0.0;
  }
  VC_EXPECT(bad == 0, "%s: %lld elements of %lld rows without pairs are not 0",
            what, (long long)bad, (long long)empty_rows);
  free(hit);
}

static int64_t g_runs;
static double g_worst[4];
static char g_worst_what[4][256];

static void check_op_dtype(const map_case_t *mc, op_t op, voxconv_dtype_t dt,
                           int64_t cin, int64_t cout, int64_t c,
                           const char *isa) {
  const voxconv_kmap_t *km = mc->km;
  char what[256];
  snprintf(what, sizeof what, "%s %s %s cin %lld cout %lld c %lld isa %s [%s]",
           op_names[op], voxconv_dtype_name(dt), "", (long long)cin,
           (long long)cout, (long long)c, isa ? isa : "auto", mc->name);
  io_t io = io_shape(op, km, cin, cout, c);
  io_alloc(&io, km, dt);
  targ_t *o = out_of(&io);
  const int64_t n = targ_elems(o);

  /* F64 path on the same inputs. */
  io_t r64 = io_to_f64(&io);
  VC_EXPECT_STATUS(g_h, call_op(g_h, km, &r64), VOXCONV_STATUS_SUCCESS);

  /* Poisoned, then every element written. */
  vc_poison(o->data, dt, n);
  voxconv_status_t st = call_op(g_h, km, &io);
  g_runs++;
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: %s: %s", what,
            voxconv_status_string(st), voxconv_get_last_error(g_h));
  const int64_t left = vc_count_poison(o->data, dt, n);
  VC_EXPECT(left == 0, "%s: %lld of %lld outputs not written", what,
            (long long)left, (long long)n);
  check_outputs_without_pairs(mc, &io, what);

  /* Accuracy against the F64 path. */
  double *scale = abs_scale(km, &io);
  const double *ref = (const double *)out_of(&r64)->data;
  const bound_stats_t b =
      check_bound(o->data, dt, ref, scale, n, op == OP_POOL_FWD_MAX);
  VC_EXPECT(b.worst <= 1.0 && b.nonfinite_mismatch == 0,
            "%s: error %.3g x the bound at element %lld (got %.9g, ref %.9g, "
            "sum of |terms| %.4g), %lld non-finite mismatches",
            what, b.worst, (long long)b.at,
            b.at >= 0 ? vc_get(o->data, dt, b.at) : 0.0,
            b.at >= 0 ? ref[b.at] : 0.0, b.at >= 0 ? scale[b.at] : 0.0,
            (long long)b.nonfinite_mismatch);
  if (b.worst > g_worst[dt]) {
    g_worst[dt] = b.worst;
    snprintf(g_worst_what[dt], sizeof g_worst_what[dt], "%s", what);
  }
  free(scale);

  /* Thread-count independence: bitwise. */
  void *first = malloc((size_t)n * voxconv_dtype_size(dt) + 1);
  memcpy(first, o->data, (size_t)n * voxconv_dtype_size(dt));
  for (int t = 0; t < 3; t++) {
    vc_poison(o->data, dt, n);
    VC_EXPECT_STATUS(g_ht[t], call_op(g_ht[t], km, &io),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(memcmp(first, o->data, (size_t)n * voxconv_dtype_size(dt)) == 0,
              "%s: result with %d thread(s) differs bitwise from 2 threads",
              what, t + 1);
  }
  free(first);
  io_free(&r64);
  io_free(&io);
}

/* The F64 path against the pair-list transcription. */
static void check_f64_reference(const map_case_t *mc, op_t op, int64_t cin,
                                int64_t cout, int64_t c) {
  const voxconv_kmap_t *km = mc->km;
  io_t io = io_shape(op, km, cin, cout, c);
  io_alloc(&io, km, F64);
  targ_t *o = out_of(&io);
  const int64_t n = targ_elems(o);
  vc_poison(o->data, F64, n);
  VC_EXPECT_STATUS(g_h, call_op(g_h, km, &io), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(vc_count_poison(o->data, F64, n) == 0, "%s f64 [%s]: unwritten",
            op_names[op], mc->name);
  double *ref = pairs_reference(mc, &io);
  const vc_err_stats_t e = vc_compare(o->data, F64, ref, n, FLOOR);
  VC_EXPECT(e.max_rel <= TOL_F64 && e.n_nonfinite_mismatch == 0,
            "%s f64 vs pair-list reference [%s]: max_rel %.3g at %lld",
            op_names[op], mc->name, e.max_rel, (long long)e.worst_index);
  free(ref);
  io_free(&io);
}

/* Every block size / chunk of the algorithm's parameter space gives the
 * same bits (each element is one fixed-order sum). Runs the registry
 * record directly. */
static void check_params_invariance(const map_case_t *mc, voxconv_pass_t pass,
                                    voxconv_dtype_t dt, int64_t cin,
                                    int64_t cout) {
  const vc_algo_t *a = vc_algo_find("cpu_gather_gemm");
  VC_EXPECT(a != NULL, "cpu_gather_gemm is registered");
  if (!a)
    return;
  const vc_param_space_t *space = a->param_space(pass);
  VC_EXPECT(space != NULL && space->n == 1, "param space of pass %d",
            (int)pass);
  if (!space)
    return;
  const op_t op = pass == VOXCONV_PASS_CONV_FWD     ? OP_CONV_FWD
                  : pass == VOXCONV_PASS_CONV_DGRAD ? OP_CONV_DGRAD
                                                    : OP_CONV_WGRAD;
  io_t io = io_shape(op, mc->km, cin, cout, 0);
  io_alloc(&io, mc->km, dt);
  targ_t *o = out_of(&io);
  const int64_t n = targ_elems(o);
  const size_t bytes = (size_t)n * voxconv_dtype_size(dt);
  void *first = malloc(bytes + 1);
  for (int v = 0; v < space->n_values[0]; v++) {
    vc_conv_problem_t p = vc_conv_problem_make(pass, mc->km, dt, cin, cout,
                                          io.a[0].data, io.a[1].data, o->data);
    p.deterministic = 1;
    vc_algo_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.v[0] = space->values[0][v];
    const size_t ws_bytes = a->workspace_size(&p, &prm);
    void *ws = malloc(ws_bytes + 1);
    vc_poison(o->data, dt, n);
    VC_EXPECT_STATUS(g_h, a->run(g_h, &p, &prm, ws), VOXCONV_STATUS_SUCCESS);
    free(ws);
    if (v == 0)
      memcpy(first, o->data, bytes);
    else
      VC_EXPECT(memcmp(first, o->data, bytes) == 0,
                "pass %d %s [%s]: %s=%d differs bitwise from the default",
                (int)pass, voxconv_dtype_name(dt), mc->name, space->names[0],
                (int)space->values[0][v]);
  }
  free(first);
  io_free(&io);
}

static void test_accuracy_threads(map_case_t *cases, int n_cases) {
  const voxconv_dtype_t dts[3] = {F32, F16, BF16};
  /* Channel shapes chosen to hit tile edges: 1, odd, one more than a
   * panel (16 / 32), several panels. */
  const int64_t conv_shapes[][2] = {{3, 16}, {17, 33}, {40, 5}, {1, 70}};
  const int64_t cshapes[] = {1, 13, 40};
  for (int m = 0; m < n_cases; m++) {
    const map_case_t *mc = &cases[m];
    const int64_t s = m % 4;
    const int64_t cin = conv_shapes[s][0], cout = conv_shapes[s][1];
    const int64_t c = cshapes[m % 3];
    for (int op = 0; op < OP_COUNT; op++)
      check_f64_reference(mc, (op_t)op, cin, cout, c);
    for (int d = 0; d < 3; d++) {
      for (int op = 0; op < OP_COUNT; op++) {
        if (op_is_conv((op_t)op)) {
          for (int i = 0; i < g_n_isas; i++) {
            set_isa(g_isas[i]);
            check_op_dtype(mc, (op_t)op, dts[d], cin, cout, c, g_isas[i]);
          }
          set_isa(NULL);
        } else {
          check_op_dtype(mc, (op_t)op, dts[d], cin, cout, c, NULL);
        }
      }
    }
    check_params_invariance(mc, VOXCONV_PASS_CONV_FWD, F32, cin, cout);
    check_params_invariance(mc, VOXCONV_PASS_CONV_DGRAD, BF16, cin, cout);
    check_params_invariance(mc, VOXCONV_PASS_CONV_WGRAD, F16, cin, cout);
  }
  /* Wider channels, several register tiles and panels per block, on the
   * submanifold map (all kernels). */
  for (int i = 0; i < g_n_isas; i++) {
    set_isa(g_isas[i]);
    for (int op = OP_CONV_FWD; op <= OP_CONV_WGRAD; op++) {
      check_op_dtype(&cases[0], (op_t)op, F32, 64, 96, 0, g_isas[i]);
      check_op_dtype(&cases[0], (op_t)op, F16, 96, 64, 0, g_isas[i]);
    }
  }
  set_isa(NULL);
  check_params_invariance(&cases[0], VOXCONV_PASS_CONV_FWD, F16, 64, 96);
  check_params_invariance(&cases[0], VOXCONV_PASS_CONV_WGRAD, F32, 96, 64);
}

/* ---- 5. NaN / Inf ------------------------------------------------------- */
/* Index of the input that is the "features" for NaN injection. */
static int feature_input(op_t op) {
  return op == OP_POOL_BWD_MAX ? 2 : 0;
}

/* Expected non-finite outputs for one poisoned input element (row r,
 * channel ch of input slot 0), from the pair lists: what a dense
 * convolution would touch. */
static void mark_touched(const map_case_t *mc, const io_t *io, int64_t r,
                         int64_t ch, char *mask) {
  const targ_t *in = &io->a[0];
  const targ_t *o = &io->a[io->n_in];
  for (int64_t k = 0; k < mc->km->kvol; k++)
    for (int64_t q = mc->po[k]; q < mc->po[k + 1]; q++) {
      const int64_t i = mc->pin[q], oo = mc->pout[q];
      const int64_t src = in->rows == R_IN ? i : oo;
      const int64_t dst = o->rows == R_IN ? i : oo;
      if (src != r)
        continue;
      switch (io->op) {
      case OP_CONV_FWD:
      case OP_CONV_DGRAD: /* the whole destination row */
        for (int64_t e = 0; e < o->d1; e++)
          mask[dst * o->d1 + e] = 1;
        break;
      case OP_CONV_WGRAD: /* dW[k][ch][*] */
        for (int64_t e = 0; e < o->d2; e++)
          mask[(k * o->d1 + ch) * o->d2 + e] = 1;
        break;
      case OP_DW_WGRAD:
        mask[k * o->d1 + ch] = 1;
        break;
      default: /* channel-wise ops */
        mask[dst * o->d1 + ch] = 1;
        break;
      }
    }
}

static void test_nonfinite(map_case_t *cases, int n_cases) {
  const voxconv_dtype_t dts[3] = {F32, F16, BF16};
  for (int m = 0; m < n_cases; m++) {
    const map_case_t *mc = &cases[m];
    if (mc->km->n_pairs == 0)
      continue;
    for (int op = 0; op < OP_COUNT; op++) {
      if (op == OP_POOL_BWD_MAX)
        continue; /* only the winner's row: checked against f64 below */
      for (int d = 0; d < 3; d++) {
        const voxconv_dtype_t dt = dts[d];
        io_t io = io_shape((op_t)op, mc->km, 19, 21, 23);
        io_alloc(&io, mc->km, dt);
        targ_t *in = &io.a[feature_input((op_t)op)];
        targ_t *o = out_of(&io);
        const int64_t n = targ_elems(o);
        char *mask = (char *)calloc((size_t)n + 1, 1);
        /* A NaN and a +Inf in two random elements of rows that have pairs
         * (+Inf: a MAX pool must pick it). */
        const double bad[2] = {NAN, INFINITY};
        for (int b = 0; b < 2; b++) {
          const int64_t q = vc_rand_range(0, mc->km->n_pairs - 1);
          const int64_t row = in->rows == R_IN ? mc->pin[q] : mc->pout[q];
          const int64_t ch = vc_rand_range(0, in->d1 - 1);
          const float v = (float)bad[b];
          vc_store_f32((char *)in->data +
                           (size_t)(row * in->d1 + ch) * voxconv_dtype_size(dt),
                       dt, 1, &v);
          mark_touched(mc, &io, row, ch, mask);
        }
        vc_poison(o->data, dt, n);
        VC_EXPECT_STATUS(g_h, call_op(g_h, mc->km, &io),
                         VOXCONV_STATUS_SUCCESS);
        int64_t wrong = 0, first = -1, n_marked = 0;
        for (int64_t e = 0; e < n; e++) {
          const int nonfinite = !isfinite(vc_get(o->data, dt, e));
          n_marked += mask[e];
          if (nonfinite != mask[e]) {
            wrong++;
            if (first < 0)
              first = e;
          }
        }
        VC_EXPECT(wrong == 0 && n_marked > 0,
                  "%s %s [%s]: %lld outputs non-finite where they should not "
                  "be or finite where they should not be (first %lld, %lld "
                  "expected non-finite)",
                  op_names[op], voxconv_dtype_name(dt), mc->name,
                  (long long)wrong, (long long)first, (long long)n_marked);
        free(mask);
        io_free(&io);
      }
    }
    /* MAX backward and every op again: the non-finite pattern equals the
     * F64 path's (which was checked against the pair-list reference). */
    for (int op = 0; op < OP_COUNT; op++) {
      io_t io = io_shape((op_t)op, mc->km, 8, 9, 10);
      io_alloc(&io, mc->km, F32);
      targ_t *in = &io.a[feature_input((op_t)op)];
      const int64_t q = vc_rand_range(0, mc->km->n_pairs - 1);
      const int64_t row = in->rows == R_IN ? mc->pin[q] : mc->pout[q];
      ((float *)in->data)[row * in->d1 + vc_rand_range(0, in->d1 - 1)] = NAN;
      io_t r64 = io_to_f64(&io);
      VC_EXPECT_STATUS(g_h, call_op(g_h, mc->km, &r64), VOXCONV_STATUS_SUCCESS);
      VC_EXPECT_STATUS(g_h, call_op(g_h, mc->km, &io), VOXCONV_STATUS_SUCCESS);
      double *scale = abs_scale(mc->km, &io);
      const bound_stats_t b = check_bound(
          out_of(&io)->data, F32, (const double *)out_of(&r64)->data, scale,
          targ_elems(out_of(&io)), op == OP_POOL_FWD_MAX);
      VC_EXPECT(b.nonfinite_mismatch == 0 && b.worst <= 1.0,
                "%s f32 with a NaN [%s]: %lld non-finite mismatches, error "
                "%.3g x the bound at %lld",
                op_names[op], mc->name, (long long)b.nonfinite_mismatch,
                b.worst, (long long)b.at);
      free(scale);
      io_free(&r64);
      io_free(&io);
    }
  }
}

/* ---- MAX pooling semantics by hand -------------------------------------- */
static void test_max_pool_ties(void) {
  /* One output, three pairs (k = 0, 1, 2) from inputs 0, 1, 2. Ties go to
   * the first pair in map order; NaN wins; no pairs gives 0. */
  voxconv_kmap_t *km = (voxconv_kmap_t *)calloc(1, sizeof *km);
  km->backend = VOXCONV_BACKEND_CPU;
  km->kvol = 3;
  km->n_in = 3;
  km->n_out = 2; /* output 1 has no pairs */
  int32_t nbr_out[6] = {0, 1, 2, -1, -1, -1};
  int32_t nbr_in[9] = {0, -1, -1, -1, 0, -1, -1, -1, 0};
  int64_t po[4] = {0, 1, 2, 3};
  int32_t pin[3] = {0, 1, 2}, pout[3] = {0, 0, 0};
  km->nbr_out = nbr_out, km->nbr_in = nbr_in, km->pair_offsets = po;
  km->in_rows = pin, km->out_rows = pout, km->n_pairs = 3;
  /* channel 0: 5, 7, 7 -> winner input 1; channel 1: 2, NaN, 9 -> NaN from
   * input 1; channel 2: -1, -1, -3 -> input 0 */
  float x[9] = {5, 2, -1, 7, NAN, -1, 7, 9, -3};
  float y[6], dy[6] = {10, 20, 30, 40, 50, 60}, dx[9];
  const voxconv_feats_t fx = {x, 3, 3, F32}, fy = {y, 2, 3, F32};
  const voxconv_feats_t fdy = {dy, 2, 3, F32}, fdx = {dx, 3, 3, F32};
  vc_poison(y, F32, 6);
  VC_EXPECT_STATUS(g_h,
                   voxconv_pool_forward(g_h, km, VOXCONV_POOL_MAX, &fx, &fy),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(y[0] == 7 && isnan(y[1]) && y[2] == -1 && y[3] == 0 && y[4] == 0 &&
                y[5] == 0,
            "max pool: %g %g %g / %g %g %g", y[0], y[1], y[2], y[3], y[4],
            y[5]);
  vc_poison(dx, F32, 9);
  VC_EXPECT_STATUS(
      g_h,
      voxconv_pool_backward(g_h, km, VOXCONV_POOL_MAX, &fx, &fy, &fdy, &fdx),
      VOXCONV_STATUS_SUCCESS);
  const float want[9] = {0, 0, 30, 10, 20, 0, 0, 0, 0};
  VC_EXPECT(memcmp(dx, want, sizeof want) == 0,
            "max pool backward: %g %g %g | %g %g %g | %g %g %g", dx[0], dx[1],
            dx[2], dx[3], dx[4], dx[5], dx[6], dx[7], dx[8]);
  /* AVG: mean over present pairs; backward shares equally. */
  float ya[6];
  const voxconv_feats_t fya = {ya, 2, 3, F32};
  x[4] = 4;
  VC_EXPECT_STATUS(g_h,
                   voxconv_pool_forward(g_h, km, VOXCONV_POOL_AVG, &fx, &fya),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(ya[0] == 19.0f / 3 && ya[1] == 5 && ya[2] == -5.0f / 3 &&
                ya[3] == 0,
            "avg pool: %g %g %g %g", ya[0], ya[1], ya[2], ya[3]);
  VC_EXPECT_STATUS(
      g_h,
      voxconv_pool_backward(g_h, km, VOXCONV_POOL_AVG, NULL, NULL, &fdy, &fdx),
      VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(dx[0] == 10.0f / 3 && dx[4] == 20.0f / 3 && dx[8] == 30.0f / 3,
            "avg pool backward: %g %g %g", dx[0], dx[4], dx[8]);
  free(km);
}

/* ---- 6. bad inputs ------------------------------------------------------- */
static int has_word(const char *msg, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = msg; *p; p++)
    if (strncasecmp(p, word, n) == 0)
      return 1;
  return n == 0;
}

static void expect_fail(int line, const char *what, const voxconv_handle_t *h,
                        voxconv_status_t got, voxconv_status_t want,
                        const char *w1, const char *w2, const char *w3) {
  const char *msg = voxconv_get_last_error(h);
  const char *words[3] = {w1, w2, w3};
  vc_test_checks++;
  if (got != want) {
    vc_test_failures++;
    fprintf(stderr, "FAIL line %d: %s returned %s, want %s (\"%s\")\n", line,
            what, voxconv_status_string(got), voxconv_status_string(want), msg);
    return;
  }
  for (int i = 0; i < 3; i++)
    if (words[i] && !has_word(msg, words[i])) {
      vc_test_failures++;
      fprintf(stderr, "FAIL line %d: %s: message \"%s\" lacks \"%s\"\n", line,
              what, msg, words[i]);
      return;
    }
}
#define EXPECT_FAIL(h, call, want, w1, w2, w3)                                 \
  expect_fail(__LINE__, what, (h), (call), (want), (w1), (w2), (w3))

static void test_bad_inputs(const map_case_t *mc) {
  const voxconv_kmap_t *km = mc->km;
  char what[160], num[3][64];
  for (int op = 0; op < OP_COUNT; op++) {
    io_t io = io_shape((op_t)op, km, 4, 6, 5);
    io_alloc(&io, km, F32);
    const int nargs = io.n_in + 1;
    snprintf(what, sizeof what, "%s", op_names[op]);
    VC_EXPECT_STATUS(g_h, call_op(g_h, km, &io), VOXCONV_STATUS_SUCCESS);

    EXPECT_FAIL(NULL, call_op(NULL, km, &io), VOXCONV_STATUS_NULL_POINTER,
                "handle", NULL, NULL);
    EXPECT_FAIL(g_h, call_op(g_h, NULL, &io), VOXCONV_STATUS_NULL_POINTER,
                "kmap", NULL, NULL);
    for (int j = 0; j < nargs; j++) {
      io_t b = io;
      targ_t *t = &b.a[j];
      snprintf(what, sizeof what, "%s arg %s", op_names[op], t->name);
      EXPECT_FAIL(g_h, call_op_ex(g_h, km, &b, NULL, 1u << j, -1),
                  VOXCONV_STATUS_NULL_POINTER, t->name, "NULL", NULL);
      t->data = NULL;
      EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_NULL_POINTER,
                  t->name, "data", NULL);
      b = io;
      t->dt = (voxconv_dtype_t)7;
      EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_INVALID_ARGUMENT,
                  t->name, "dtype", "7");
      if (j > 0) { /* mismatch names both tensors and both dtypes */
        t->dt = F16;
        EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_DTYPE_MISMATCH,
                    io.a[0].name, t->name, "f16");
        EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_DTYPE_MISMATCH,
                    "f32", NULL, NULL);
      }
      b = io;
      t->d1 = 0;
      EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_INVALID_ARGUMENT,
                  t->name, "0", NULL);
      t->d1 = -3;
      EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_INVALID_ARGUMENT,
                  t->name, "-3", NULL);
      b = io;
      if (t->rows == R_KVOL) {
        t->d0 = km->kvol - 1;
        snprintf(num[0], sizeof num[0], "%lld", (long long)km->kvol);
        snprintf(num[1], sizeof num[1], "%lld", (long long)km->kvol - 1);
        EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_SHAPE_MISMATCH,
                    t->name, num[0], num[1]);
      } else {
        const int64_t want = t->rows == R_IN ? km->n_in : km->n_out;
        t->d0 = want + 1;
        snprintf(num[0], sizeof num[0], "kmap was built for %lld %s",
                 (long long)want, t->rows == R_IN ? "input" : "output");
        snprintf(num[1], sizeof num[1], "%s has %lld", t->name,
                 (long long)want + 1);
        EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_KMAP_MISMATCH,
                    num[0], num[1], NULL);
      }
      /* Channel mismatch (the weights' cin for conv, else channels). */
      b = io;
      t->d1 += 1;
      snprintf(num[2], sizeof num[2], "%lld", (long long)t->d1);
      EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_SHAPE_MISMATCH,
                  t->name, num[2], NULL);
      if (t->is_w) {
        b = io;
        t->d2 += 2;
        snprintf(num[2], sizeof num[2], "%lld", (long long)t->d2);
        EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_SHAPE_MISMATCH,
                    t->name, "cout", num[2]);
      }
    }
    /* Output written over an input. */
    {
      io_t b = io;
      snprintf(what, sizeof what, "%s in place", op_names[op]);
      b.a[io.n_in].data = b.a[0].data;
      if (targ_elems(&b.a[io.n_in]) > 0 && targ_elems(&b.a[0]) > 0)
        EXPECT_FAIL(g_h, call_op(g_h, km, &b), VOXCONV_STATUS_INVALID_ARGUMENT,
                    "overlap", b.a[io.n_in].name, NULL);
    }
    snprintf(what, sizeof what, "%s", op_names[op]);
    if (op >= OP_POOL_FWD_MAX && op <= OP_POOL_BWD_SUM)
      EXPECT_FAIL(g_h, call_op_ex(g_h, km, &io, NULL, 0, 7),
                  VOXCONV_STATUS_INVALID_ARGUMENT, "mode", "7", NULL);
    if (op <= OP_DW_WGRAD) {
      voxconv_conv_options_t o;
      memset(&o, 0, sizeof o);
      o.fp16_accum = (voxconv_tristate_t)5;
      EXPECT_FAIL(g_h, call_op_ex(g_h, km, &io, &o, 0, -1),
                  VOXCONV_STATUS_INVALID_ARGUMENT, "fp16_accum", "5", NULL);
      memset(&o, 0, sizeof o);
      o.deterministic = (voxconv_tristate_t)-1;
      EXPECT_FAIL(g_h, call_op_ex(g_h, km, &io, &o, 0, -1),
                  VOXCONV_STATUS_INVALID_ARGUMENT, "deterministic", NULL, NULL);
      memset(&o, 0, sizeof o);
      o.fp16_accum = VOXCONV_TRUE; /* valid on f32: ignored, f32 runs */
      o.deterministic = VOXCONV_TRUE;
      VC_EXPECT_STATUS(g_h, call_op_ex(g_h, km, &io, &o, 0, -1),
                       VOXCONV_STATUS_SUCCESS);
    }
    /* A map of another backend, and f64 on a CUDA handle: the handle's
     * backend is flipped by hand (validation fails before any work). */
    {
      voxconv_kmap_t fake = *km;
      fake.backend = VOXCONV_BACKEND_CUDA;
      EXPECT_FAIL(g_h, call_op(g_h, &fake, &io),
                  VOXCONV_STATUS_INVALID_ARGUMENT, "backend", "CUDA", "CPU");
      io_t b64 = io_to_f64(&io);
      g_h->backend = VOXCONV_BACKEND_CUDA;
      EXPECT_FAIL(g_h, call_op(g_h, km, &b64), VOXCONV_STATUS_UNSUPPORTED,
                  "f64", "CUDA", NULL);
      g_h->backend = VOXCONV_BACKEND_CPU;
      io_free(&b64);
    }
    io_free(&io);
  }
  /* MAX backward needs x and y; AVG/SUM take NULL. */
  snprintf(what, sizeof what, "pool_backward MAX without x/y");
  io_t io = io_shape(OP_POOL_BWD_MAX, km, 0, 0, 3);
  io_alloc(&io, km, F32);
  EXPECT_FAIL(g_h, call_op_ex(g_h, km, &io, NULL, 1u, -1),
              VOXCONV_STATUS_NULL_POINTER, "x", "MAX", NULL);
  EXPECT_FAIL(g_h, call_op_ex(g_h, km, &io, NULL, 2u, -1),
              VOXCONV_STATUS_NULL_POINTER, "y", "MAX", NULL);
  io_free(&io);

  /* fp16 accumulator resolution: never for f32, never for wgrad. */
  voxconv_conv_options_t o;
  memset(&o, 0, sizeof o);
  o.fp16_accum = VOXCONV_TRUE;
  VC_EXPECT(vc_resolve_fp16_accum(&o, F16, VOXCONV_PASS_CONV_FWD) == 1,
            "fp16_accum TRUE, f16 forward");
  VC_EXPECT(vc_resolve_fp16_accum(&o, BF16, VOXCONV_PASS_DEPTHWISE_DGRAD) == 1,
            "fp16_accum TRUE, bf16 depthwise dgrad");
  VC_EXPECT(vc_resolve_fp16_accum(&o, F32, VOXCONV_PASS_CONV_FWD) == 0,
            "f32 never runs in fp16");
  VC_EXPECT(vc_resolve_fp16_accum(&o, F16, VOXCONV_PASS_CONV_WGRAD) == 0 &&
                vc_resolve_fp16_accum(&o, F16, VOXCONV_PASS_DEPTHWISE_WGRAD) ==
                    0,
            "weight gradients always accumulate in f32");
  o.fp16_accum = VOXCONV_FALSE;
  VC_EXPECT(vc_resolve_fp16_accum(&o, F16, VOXCONV_PASS_CONV_FWD) == 0,
            "fp16_accum FALSE");
  o.deterministic = VOXCONV_UNSET;
  g_h->deterministic = 1;
  VC_EXPECT(vc_resolve_deterministic(g_h, &o) == 1 &&
                vc_resolve_deterministic(g_h, NULL) == 1,
            "UNSET deterministic takes the handle's");
  o.deterministic = VOXCONV_FALSE;
  VC_EXPECT(vc_resolve_deterministic(g_h, &o) == 0, "FALSE overrides");
  g_h->deterministic = 0;
  o.deterministic = VOXCONV_TRUE;
  VC_EXPECT(vc_resolve_deterministic(g_h, &o) == 1, "TRUE overrides");
}

/* ---- 7. empty -------------------------------------------------------------
 */
static void test_empty(void) {
  char what[128];
  /* n_in = n_out = 0: every op succeeds with NULL data; wgrad writes 0. */
  voxconv_kmap_t *e0 = hand_map(0, 0, 27, 0.5);
  /* Inputs and outputs but no pairs: outputs all 0. */
  voxconv_kmap_t *e1 = hand_map(20, 30, 8, 0.0);
  voxconv_kmap_t *maps[2] = {e0, e1};
  for (int mi = 0; mi < 2; mi++) {
    for (int op = 0; op < OP_COUNT; op++) {
      io_t io = io_shape((op_t)op, maps[mi], 3, 5, 4);
      io_alloc(&io, maps[mi], F32);
      snprintf(what, sizeof what, "%s on an empty map %d", op_names[op], mi);
      for (int j = 0; j <= io.n_in; j++)
        if (targ_elems(&io.a[j]) == 0) {
          free(io.a[j].data);
          io.a[j].data = NULL; /* allowed: no elements */
        }
      targ_t *o = out_of(&io);
      const int64_t n = targ_elems(o);
      if (o->data)
        vc_poison(o->data, F32, n);
      const voxconv_status_t st = call_op(g_h, maps[mi], &io);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: %s: %s", what,
                voxconv_status_string(st), voxconv_get_last_error(g_h));
      int64_t nonzero = 0;
      for (int64_t e = 0; e < n; e++)
        nonzero += ((const float *)o->data)[e] != 0.0f;
      VC_EXPECT(nonzero == 0, "%s: %lld of %lld outputs not 0", what,
                (long long)nonzero, (long long)n);
      io_free(&io);
    }
  }
  free_hand_map(e0);
  free_hand_map(e1);
}

/* ---- bench ------------------------------------------------------------- */
static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int run_bench(int argc, char **argv) {
  const char *path =
      argc > 2 ? argv[2] : vc_data_path("scans/semantickitti_00_000000.bin");
  const float voxel = argc > 3 ? (float)atof(argv[3]) : 0.05f;
  const int fields = argc > 4 ? atoi(argv[4]) : 4; /* KITTI: x y z r */
  size_t bytes = 0;
  float *pts = (float *)vc_read_file(path, &bytes);
  if (!pts) {
    fprintf(stderr, "bench: cannot read %s\n", path);
    return VC_TEST_SKIP;
  }
  int64_t nv = 0;
  int32_t *coords = vc_voxels_from_points(
      pts, (int64_t)(bytes / (4 * (size_t)fields)), fields, voxel, &nv);
  free(pts);
  voxconv_kmap_desc_t d = desc_of(VOXCONV_KMAP_SUBMANIFOLD, 3, 3, 3, 1, 1);
  voxconv_coords_t in = {coords, nv, {1, 1, 1}};
  voxconv_kmap_t *km = NULL;
  VC_REQUIRE_OK(g_h, voxconv_kmap_build(g_h, &d, &in, NULL, &km));
  const char *isa = vc_getenv("VOXCONV_CPU_ISA");
  printf("bench: %s at %.3f m: %lld voxels, %lld pairs (%.1f per voxel), "
         "%d threads, kernel %s\n",
         path, voxel, (long long)nv, (long long)km->n_pairs,
         (double)km->n_pairs / (double)nv, g_h->num_threads,
         isa ? isa : "auto");
  const int64_t chans[3] = {32, 64, 128};
  const voxconv_dtype_t dts[2] = {F32, F16};
  for (int di = 0; di < 2; di++)
    for (int ci = 0; ci < 3; ci++) {
      const int64_t c = chans[ci];
      printf("  %-4s C=%-4lld", voxconv_dtype_name(dts[di]), (long long)c);
      for (int op = OP_CONV_FWD; op <= OP_CONV_WGRAD; op++) {
        io_t io = io_shape((op_t)op, km, c, c, c);
        io_alloc(&io, km, dts[di]);
        VC_REQUIRE_OK(g_h, call_op(g_h, km, &io)); /* warm-up */
        /* Best of 5 by wall clock, and the CPU time of that run: on a
         * shared machine GFLOP per CPU-second shows what the code does on
         * the cycles it gets. */
        double best = 1e30, best_cpu = 0;
        for (int rep = 0; rep < 5; rep++) {
          const double t0 = clock_s(CLOCK_MONOTONIC);
          const double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
          VC_REQUIRE_OK(g_h, call_op(g_h, km, &io));
          const double t = clock_s(CLOCK_MONOTONIC) - t0;
          if (t < best) {
            best = t;
            best_cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
          }
        }
        const double gflop = 2.0 * (double)km->n_pairs * (double)(c * c) * 1e-9;
        printf("  %s %7.1f ms %6.1f GFLOP/s (%5.1f per CPU-s)",
               op == OP_CONV_FWD     ? "fwd"
               : op == OP_CONV_DGRAD ? "dgrad"
                                     : "wgrad",
               best * 1e3, gflop / best, gflop / best_cpu);
        io_free(&io);
      }
      printf("\n");
      fflush(stdout);
    }
  voxconv_kmap_destroy(g_h, km);
  free(coords);
  return 0;
}

int main(int argc, char **argv) {
  vc_test_init("test_ops_cpu");
  voxconv_handle_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.backend = VOXCONV_BACKEND_CPU;
  desc.num_threads = 2;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_h, &desc));
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
    if (argc > 5)
      g_h->num_threads = atoi(argv[5]);
    const int rc = run_bench(argc, argv);
    voxconv_destroy(g_h);
    return rc;
  }
  for (int t = 0; t < 3; t++) {
    desc.num_threads = t + 1;
    VC_REQUIRE_OK(NULL, voxconv_create(&g_ht[t], &desc));
  }
  g_n_isas = vc_cpu_gemm_available(g_isas, 4);
  printf("GEMM kernels on this CPU:");
  for (int i = 0; i < g_n_isas; i++)
    printf(" %s", g_isas[i]);
  printf("\n");
  /* An unknown kernel name is an error with the list of valid ones. */
  set_isa("sse9");
  {
    const char *what = "VOXCONV_CPU_ISA=sse9";
    map_case_t mc;
    memset(&mc, 0, sizeof mc);
    mc.km = hand_map(10, 10, 3, 0.5);
    io_t io = io_shape(OP_CONV_FWD, mc.km, 2, 2, 0);
    io_alloc(&io, mc.km, F32);
    EXPECT_FAIL(g_h, call_op(g_h, mc.km, &io), VOXCONV_STATUS_INVALID_ARGUMENT,
                "VOXCONV_CPU_ISA", "sse9", "portable");
    io_free(&io);
    free_hand_map(mc.km);
  }
  set_isa(NULL);

  map_case_t cases[16];
  const int n_cases = make_cases(cases, 16);
  for (int m = 0; m < n_cases; m++)
    printf("map %d: %s: n_out %lld, kvol %d, %lld pairs\n", m, cases[m].name,
           (long long)cases[m].km->n_out, (int)cases[m].km->kvol,
           (long long)cases[m].km->n_pairs);
  fflush(stdout);
  test_accuracy_threads(cases, n_cases);
  test_nonfinite(cases, n_cases);
  test_max_pool_ties();
  if (n_cases > 0)
    test_bad_inputs(&cases[0]);
  if (n_cases > 7)
    test_bad_inputs(&cases[7]); /* a hand-made map with n_in != n_out */
  test_empty();
  printf("%lld op runs checked against the f64 path; worst error / bound:\n",
         (long long)g_runs);
  for (int d = 0; d < 3; d++)
    printf("  %-4s %.3f (%s)\n", voxconv_dtype_name((voxconv_dtype_t)d),
           g_worst[d], g_worst_what[d]);
  for (int m = 0; m < n_cases; m++)
    free_case(&cases[m]);
  for (int t = 0; t < 3; t++)
    voxconv_destroy(g_ht[t]);
  voxconv_destroy(g_h);
  return vc_test_finish();
}
