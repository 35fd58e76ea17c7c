/* Backend-ops test (ggml style): every CUDA op x algorithm x parameter set
 * x dtype x pass on the GPU against the CPU F64 path, through the public
 * API (CPU handle, F64 features) for the reference.
 *
 * For each case (coordinates, map geometry, channels):
 *  - the same map is built on a CPU handle and on a CUDA handle (counts
 *    must agree: outputs are compared row by row, which voxconv.h allows
 *    since both backends produce the same map);
 *  - inputs are N(0,1) rounded to bf16 precision (tiny values redrawn), so
 *    they are exact in f32, f16 and bf16 alike and one F64 reference serves
 *    all dtypes: every error measured is the algorithm's, not the input
 *    rounding's;
 *  - every CUDA record of the registry that supports the problem runs every
 *    point of its parameter space (fp16-accumulator points excluded: they
 *    are not fp32-accumulation algorithms and have their own test) through
 *    record->run() on a poisoned output; once per record and pass the
 *    default point also runs through the public entry point with the
 *    algorithm forced by name (voxconv_conv_options_t.fwd_algo/bwd_algo);
 *  - pooling and unpooling (MAX, AVG, SUM; forward and backward) on CUDA
 *    against the CPU F64 path.
 *
 * Pass/fail (tests/format_bound.h): every element within the bound that
 * follows from the formats, |got - ref| <= spacing_dt(max(|got|, |ref|)) +
 * 8 sqrt(n) 2^-23 S with S = sum |a| |b| per element (an fp64 CPU run on
 * |inputs|) and n the products per element, so that no seed can fail a
 * correct kernel (Higham & Mary's probabilistic bound: a failure
 * probability of ~2.5e-14 per element), plus the aggregate limit
 * ||got - ref|| <= ||spacing_dt(ref)|| + 8 sqrt(n) 2^-23 ||ref||, which
 * catches errors small in every element but systematic (TF32 products). A wrong pair, row, offset or scale gives
 * error ratios far above 1 (test_format_bound plants such bugs).
 * Reported beside it, as before: rel_i = |got - ref| / (|ref| + 1e-3
 * rms(ref)), max over elements, and norm = ||got - ref|| / ||ref||.
 *
 * Environment: VOXCONV_TEST_SMALL=1 runs only the small cases (sanitizer
 * runs); VOXCONV_TEST_MAX_CASES=n stops after n conv/pool cases (racecheck);
 * VOXCONV_TEST_ALGO=a,b restricts the algorithms to those names;
 * VOXCONV_TEST_SEED replays a seed. Exits 77 (skipped) without a GPU. */
#include "format_bound.h"
#include "gpu_test_util.h"
#include "vc_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/vc_core.h"
#include "ops/vc_algo.h"

#define FLOOR 1e-3

static voxconv_handle_t *g_cpu, *g_gpu;
static int g_small;

static const voxconv_dtype_t k_dtypes[3] = {
    VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16, VOXCONV_DTYPE_BF16};

/* ---- summary per (algorithm, pass, dtype) ------------------------------ */
typedef struct {
  char algo[64];
  int pass;
  voxconv_dtype_t dt;
  int runs, failures;
  double worst_ratio, worst_max_rel, worst_norm;
} summary_t;
#define MAX_SUMMARY 512
static summary_t g_sum[MAX_SUMMARY];
static int g_nsum;

static summary_t *summary(const char *algo, int pass, voxconv_dtype_t dt) {
  for (int i = 0; i < g_nsum; i++)
    if (g_sum[i].pass == pass && g_sum[i].dt == dt &&
        strcmp(g_sum[i].algo, algo) == 0)
      return &g_sum[i];
  if (g_nsum == MAX_SUMMARY)
    return &g_sum[MAX_SUMMARY - 1];
  summary_t *s = &g_sum[g_nsum++];
  memset(s, 0, sizeof *s);
  snprintf(s->algo, sizeof s->algo, "%s", algo);
  s->pass = pass;
  s->dt = dt;
  return s;
}

static const char *pass_name(int pass) {
  static const char *n[] = {"conv_fwd",      "conv_dgrad",     "conv_wgrad",
                            "depthwise_fwd", "depthwise_dgrad", "depthwise_wgrad",
                            "pool_fwd",      "pool_bwd",       "unpool_fwd",
                            "unpool_bwd"};
  return pass >= 0 && pass < 10 ? n[pass] : "?";
}
#define PASS_POOL_FWD 6
#define PASS_POOL_BWD 7
#define PASS_UNPOOL_FWD 8
#define PASS_UNPOOL_BWD 9

/* ---- host/device helpers ---------------------------------------------- */
static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_backend_ops: out of host memory (%zu bytes)\n",
            bytes);
    exit(2);
  }
  return p;
}

static void *gpu_alloc(size_t bytes) {
  void *d = NULL;
  if (voxconv_malloc(g_gpu, bytes ? bytes : 1, &d) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "test_backend_ops: device allocation of %zu bytes: %s\n",
            bytes, voxconv_get_last_error(g_gpu));
    exit(2);
  }
  return d;
}

static void *gpu_upload(const void *host, size_t bytes) {
  void *d = gpu_alloc(bytes);
  if (bytes &&
      voxconv_memcpy(g_gpu, d, host, bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND) !=
          VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "upload: %s\n", voxconv_get_last_error(g_gpu));
    exit(2);
  }
  return d;
}

static void gpu_download(void *host, const void *dev, size_t bytes) {
  if (bytes &&
      voxconv_memcpy(g_gpu, host, dev, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST) !=
          VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "download: %s\n", voxconv_get_last_error(g_gpu));
    exit(2);
  }
}

/* N(0,1) rounded to bf16 precision, |v| >= 2^-10: exact in every dtype. */
static void fill_exact(double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double r;
    do {
      r = (double)vc_bf16_to_f32(vc_f32_to_bf16((float)vc_rand_normal()));
    } while (fabs(r) < 1.0 / 1024);
    v[i] = r;
  }
}

/* A device copy of f64 host values converted to dt. */
static void *upload_as(const double *v, int64_t n, voxconv_dtype_t dt) {
  const size_t es = voxconv_dtype_size(dt);
  void *h = xmalloc((size_t)n * es);
  vc_store_f64(h, dt, n, v);
  void *d = gpu_upload(h, (size_t)n * es);
  free(h);
  return d;
}

static void poison_device(void *dev, voxconv_dtype_t dt, int64_t n) {
  const size_t es = voxconv_dtype_size(dt);
  void *h = xmalloc((size_t)n * es);
  vc_poison(h, dt, n);
  if (n && voxconv_memcpy(g_gpu, dev, h, (size_t)n * es,
                          VOXCONV_MEMCPY_HOST_TO_BACKEND) !=
               VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "poison: %s\n", voxconv_get_last_error(g_gpu));
    exit(2);
  }
  free(h);
}

/* Downloads dev (n elements of dt), checks every element was written and
 * compares with ref under the format-derived bound (s: S per element,
 * terms: products per element). Returns 1 when within it. */
static int check_output(const void *dev, voxconv_dtype_t dt, const double *ref,
                        const double *s, int64_t n, int64_t terms,
                        const char *algo, int pass, const char *label) {
  const size_t es = voxconv_dtype_size(dt);
  void *h = xmalloc((size_t)n * es);
  gpu_download(h, dev, (size_t)n * es);
  const int64_t unwritten = vc_count_poison(h, dt, n);
  const vc_err_stats_t e = vc_compare(h, dt, ref, n, FLOOR);
  const fb_result_t b = fb_check(h, dt, ref, s, n, fb_acc(terms));
  const double worst_got = b.worst >= 0 ? vc_get(h, dt, b.worst) : 0;
  free(h);
  summary_t *sm = summary(algo, pass, dt);
  sm->runs++;
  if (b.max_ratio > sm->worst_ratio)
    sm->worst_ratio = b.max_ratio;
  if (e.max_rel > sm->worst_max_rel)
    sm->worst_max_rel = e.max_rel;
  if (e.norm_rel > sm->worst_norm)
    sm->worst_norm = e.norm_rel;
  const int ok = unwritten == 0 && fb_passes(&b);
  VC_EXPECT(unwritten == 0, "%s %s %s: %lld of %lld elements never written",
            label, pass_name(pass), voxconv_dtype_name(dt),
            (long long)unwritten, (long long)n);
  VC_EXPECT(fb_passes(&b),
            "%s %s %s: error ratio %.3g at %lld (got %.9g, ref %.9g, bound "
            "%.3g, S %.3g, %lld terms), norm %.3g (limit %.3g), %lld "
            "non-finite mismatches; max_rel %.3g",
            label, pass_name(pass), voxconv_dtype_name(dt), b.max_ratio,
            (long long)b.worst, worst_got, b.worst >= 0 ? ref[b.worst] : 0.0,
            b.worst_tol, b.worst >= 0 ? s[b.worst] : 0.0, (long long)terms,
            b.norm_rel, b.norm_limit, (long long)b.n_nonfinite, e.max_rel);
  if (!ok)
    sm->failures++;
  return ok;
}

/* ---- coordinate sets ---------------------------------------------------- */
typedef struct {
  const char *name;
  int32_t *coords; /* host [n][4] */
  int64_t n;
} coordset_t;

/* The middle `keep` rows of a sorted voxel set: an x-slab through the
 * sensor, where a LiDAR scan is densest. */
static coordset_t scan_set(const char *file, int fields, float voxel,
                           int64_t keep, const char *name) {
  coordset_t s = {name, NULL, 0};
  size_t bytes = 0;
  float *pts = (float *)vc_read_file(vc_data_path(file), &bytes);
  if (!pts) {
    fprintf(stderr, "note: %s missing, case skipped\n", vc_data_path(file));
    return s;
  }
  int64_t n = 0;
  int32_t *c = vc_voxels_from_points(
      pts, (int64_t)(bytes / (sizeof(float) * (size_t)fields)), fields, voxel,
      &n);
  free(pts);
  if (keep > 0 && n > keep) {
    const int64_t first = (n - keep) / 2;
    memmove(c, c + first * 4, (size_t)keep * 16);
    n = keep;
  }
  s.coords = c;
  s.n = n;
  return s;
}

/* ---- maps -------------------------------------------------------------- */
typedef struct {
  const char *name;
  voxconv_kmap_desc_t desc;
  int transposed_from_strided; /* TRANSPOSED: coarse = strided map's out;
                                  2: voxconv_kmap_inverse of desc's map */
} geometry_t;

typedef struct {
  voxconv_kmap_t *cpu, *gpu;
  voxconv_kmap_t *cpu_aux, *gpu_aux; /* the strided map of a TRANSPOSED case */
  int32_t *gpu_coords; /* the uploaded coordinates (fine side) */
  int64_t n_in, n_out, n_pairs;
  int kvol;
} mapping_t;

static void mapping_free(mapping_t *m) {
  voxconv_kmap_destroy(g_cpu, m->cpu);
  voxconv_kmap_destroy(g_gpu, m->gpu);
  voxconv_kmap_destroy(g_cpu, m->cpu_aux);
  voxconv_kmap_destroy(g_gpu, m->gpu_aux);
  voxconv_free(g_gpu, m->gpu_coords);
  memset(m, 0, sizeof *m);
}

static int build_mapping(const coordset_t *cs, const geometry_t *g,
                         mapping_t *m) {
  memset(m, 0, sizeof *m);
  int32_t *dcoords = (int32_t *)gpu_upload(cs->coords, (size_t)cs->n * 16);
  m->gpu_coords = dcoords; /* freed by mapping_free */
  voxconv_coords_t cin_cpu = {cs->coords, cs->n, {1, 1, 1}};
  voxconv_coords_t cin_gpu = {dcoords, cs->n, {1, 1, 1}};
  voxconv_status_t a, b;
  if (g->transposed_from_strided == 2) {
    /* The inverse of an EXPANDING / STRIDED map (SparseInverseConv3d). */
    a = voxconv_kmap_build(g_cpu, &g->desc, &cin_cpu, NULL, &m->cpu_aux);
    b = vc_test_kmap_build(g_gpu, &g->desc, &cin_gpu, NULL, &m->gpu_aux);
    if (a == VOXCONV_STATUS_SUCCESS)
      a = voxconv_kmap_inverse(g_cpu, m->cpu_aux, &m->cpu);
    if (b == VOXCONV_STATUS_SUCCESS)
      b = voxconv_kmap_inverse(g_gpu, m->gpu_aux, &m->gpu);
  } else if (!g->transposed_from_strided) {
    a = voxconv_kmap_build(g_cpu, &g->desc, &cin_cpu, NULL, &m->cpu);
    b = vc_test_kmap_build(g_gpu, &g->desc, &cin_gpu, NULL, &m->gpu);
  } else {
    /* Coarse coordinates from a stride-s map, then the transposed map
     * coarse -> fine (the decoder side of a U-Net). */
    voxconv_kmap_desc_t sd = g->desc;
    sd.mode = VOXCONV_KMAP_STRIDED;
    a = voxconv_kmap_build(g_cpu, &sd, &cin_cpu, NULL, &m->cpu_aux);
    b = vc_test_kmap_build(g_gpu, &sd, &cin_gpu, NULL, &m->gpu_aux);
    VC_EXPECT(a == VOXCONV_STATUS_SUCCESS && b == VOXCONV_STATUS_SUCCESS,
              "%s/%s: strided aux map: %s / %s", cs->name, g->name,
              voxconv_get_last_error(g_cpu), voxconv_get_last_error(g_gpu));
    if (a || b) {
      mapping_free(m);
      return 0;
    }
    voxconv_kmap_info_t ai;
    voxconv_kmap_get_info(m->cpu_aux, &ai);
    const int32_t *coarse_cpu = NULL, *coarse_gpu = NULL;
    voxconv_kmap_out_coords(m->cpu_aux, &coarse_cpu);
    voxconv_kmap_out_coords(m->gpu_aux, &coarse_gpu);
    const int32_t s0 = g->desc.stride[0], s1 = g->desc.stride[1],
                  s2 = g->desc.stride[2];
    voxconv_coords_t coarse_c = {coarse_cpu, ai.n_out, {s0, s1, s2}};
    voxconv_coords_t coarse_g = {coarse_gpu, ai.n_out, {s0, s1, s2}};
    a = voxconv_kmap_build(g_cpu, &g->desc, &coarse_c, &cin_cpu, &m->cpu);
    b = vc_test_kmap_build(g_gpu, &g->desc, &coarse_g, &cin_gpu, &m->gpu);
  }
  VC_EXPECT(a == VOXCONV_STATUS_SUCCESS, "%s/%s: CPU map: %s", cs->name,
            g->name, voxconv_get_last_error(g_cpu));
  VC_EXPECT(b == VOXCONV_STATUS_SUCCESS, "%s/%s: CUDA map: %s", cs->name,
            g->name, voxconv_get_last_error(g_gpu));
  if (a || b) {
    mapping_free(m);
    return 0;
  }
  voxconv_kmap_info_t ic, ig;
  voxconv_kmap_get_info(m->cpu, &ic);
  voxconv_kmap_get_info(m->gpu, &ig);
  VC_EXPECT(ic.n_in == ig.n_in && ic.n_out == ig.n_out &&
                ic.n_pairs == ig.n_pairs,
            "%s/%s: CPU map (%lld in, %lld out, %lld pairs) != CUDA map "
            "(%lld, %lld, %lld)",
            cs->name, g->name, (long long)ic.n_in, (long long)ic.n_out,
            (long long)ic.n_pairs, (long long)ig.n_in, (long long)ig.n_out,
            (long long)ig.n_pairs);
  if (ic.n_in != ig.n_in || ic.n_out != ig.n_out || ic.n_pairs != ig.n_pairs) {
    mapping_free(m);
    return 0;
  }
  m->n_in = ic.n_in;
  m->n_out = ic.n_out;
  m->n_pairs = ic.n_pairs;
  m->kvol = ic.kernel_volume;
  return 1;
}

/* desc_of with stride s, dilation 1 and explicit padding p (padded = 1). */
static voxconv_kmap_desc_t padded_of(voxconv_kmap_mode_t mode, int k, int s,
                                     int p) {
  voxconv_kmap_desc_t g;
  memset(&g, 0, sizeof g);
  g.mode = mode;
  g.padded = 1;
  for (int a = 0; a < 3; a++) {
    g.kernel_size[a] = k;
    g.stride[a] = s;
    g.dilation[a] = 1;
    g.padding[a] = p;
  }
  return g;
}

/* ---- parameter points --------------------------------------------------- */
static int space_points(const vc_param_space_t *s) {
  if (!s)
    return 1;
  int n = 1;
  for (int i = 0; i < s->n; i++)
    n *= s->n_values[i] > 0 ? s->n_values[i] : 1;
  return n;
}

/* Point `idx` of the space (mixed radix); 0 if it uses an fp16
 * accumulator (excluded here). */
static int space_point(const vc_param_space_t *s, int idx,
                       vc_algo_params_t *prm, char *label, size_t label_size) {
  memset(prm, 0, sizeof *prm);
  size_t off = 0;
  label[0] = '\0';
  if (!s)
    return 1;
  for (int i = 0; i < s->n && i < VC_MAX_PARAMS; i++) {
    const int nv = s->n_values[i] > 0 ? s->n_values[i] : 1;
    prm->v[i] = s->values[i][idx % nv];
    idx /= nv;
    /* fp32 accumulators only: VC_ACCUM_F32, or 32 where a record spells
     * the accumulator by its width. */
    if (s->names[i] && strcmp(s->names[i], VC_PARAM_ACCUMULATOR) == 0 &&
        prm->v[i] != VC_ACCUM_F32 && prm->v[i] != 32)
      return 0;
    if (off < label_size)
      off += (size_t)snprintf(label + off, label_size - off, "%s%s=%d",
                              i ? "," : "", s->names[i] ? s->names[i] : "?",
                              prm->v[i]);
  }
  return 1;
}

/* ---- conv / depthwise through the records ------------------------------- */
typedef struct {
  const mapping_t *m;
  const char *case_name;
  int64_t cin, cout;
  int depthwise;
  /* F64 host inputs and references */
  const double *x, *w, *dy;        /* x [n_in][cin], w, dy [n_out][cout] */
  const double *y_ref, *dx_ref, *dw_ref;
  /* S of the bound: the same passes on |x|, |w|, |dy| */
  const double *y_s, *dx_s, *dw_s;
} conv_case_t;

static int64_t out_elems(const conv_case_t *c, voxconv_pass_t pass) {
  const int64_t kv = c->m->kvol;
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return c->m->n_out * c->cout;
  case VOXCONV_PASS_CONV_DGRAD:
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return c->m->n_in * c->cin;
  case VOXCONV_PASS_CONV_WGRAD:
    return kv * c->cin * c->cout;
  default:
    return kv * c->cin;
  }
}

static voxconv_status_t run_public(const conv_case_t *c, voxconv_pass_t pass,
                                   voxconv_dtype_t dt, const char *name,
                                   void *a, void *b, void *out) {
  voxconv_conv_options_t opt;
  memset(&opt, 0, sizeof opt);
  opt.fwd_algo = name;
  opt.bwd_algo = name;
  opt.deterministic = VOXCONV_FALSE;
  const mapping_t *m = c->m;
  voxconv_feats_t x = {a, m->n_in, c->cin, dt};
  voxconv_feats_t dy = {a, m->n_out, c->cout, dt};
  voxconv_weights_t w = {b, m->kvol, c->cin, c->cout, dt};
  voxconv_feats_t wd = {b, m->kvol, c->cin, dt}; /* depthwise weights */
  voxconv_feats_t y = {out, m->n_out, c->cout, dt};
  voxconv_feats_t dx = {out, m->n_in, c->cin, dt};
  voxconv_weights_t dw = {out, m->kvol, c->cin, c->cout, dt};
  voxconv_feats_t dwd = {out, m->kvol, c->cin, dt};
  voxconv_feats_t dy2 = {b, m->n_out, c->cout, dt}; /* wgrad: b = dy */
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
    return voxconv_conv_forward(g_gpu, m->gpu, &x, &w, &y, &opt);
  case VOXCONV_PASS_CONV_DGRAD:
    return voxconv_conv_dgrad(g_gpu, m->gpu, &dy, &w, &dx, &opt);
  case VOXCONV_PASS_CONV_WGRAD:
    return voxconv_conv_wgrad(g_gpu, m->gpu, &x, &dy2, &dw, &opt);
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return voxconv_depthwise_forward(g_gpu, m->gpu, &x, &wd, &y, &opt);
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return voxconv_depthwise_dgrad(g_gpu, m->gpu, &dy, &wd, &dx, &opt);
  case VOXCONV_PASS_DEPTHWISE_WGRAD:
    return voxconv_depthwise_wgrad(g_gpu, m->gpu, &x, &dy2, &dwd, &opt);
  default:
    return VOXCONV_STATUS_INTERNAL;
  }
}

static int g_param_points, g_public_runs, g_unsupported, g_case_counter;
/* points skipped as over this GPU's shared memory per block (e.g. mask_gemm
 * tiles 8 and 9 on sm_86; test_smem_limit tests that refusal) */
static int g_over_smem;
static int g_pool_checks; /* pooling cases run */
#define MAX_POINTS 12

static void run_conv_case(const conv_case_t *c) {
  const voxconv_pass_t passes[3] = {
      c->depthwise ? VOXCONV_PASS_DEPTHWISE_FWD : VOXCONV_PASS_CONV_FWD,
      c->depthwise ? VOXCONV_PASS_DEPTHWISE_DGRAD : VOXCONV_PASS_CONV_DGRAD,
      c->depthwise ? VOXCONV_PASS_DEPTHWISE_WGRAD : VOXCONV_PASS_CONV_WGRAD};
  const mapping_t *m = c->m;
  const int64_t wel = m->kvol * c->cin * (c->depthwise ? 1 : c->cout);
  g_case_counter++;
  for (int di = 0; di < 3; di++) {
    const voxconv_dtype_t dt = k_dtypes[di];
    void *dx_in = upload_as(c->x, m->n_in * c->cin, dt);
    void *dw_in = upload_as(c->w, wel, dt);
    void *ddy_in = upload_as(c->dy, m->n_out * c->cout, dt);
    for (int pi = 0; pi < 3; pi++) {
      const voxconv_pass_t pass = passes[pi];
      const int64_t n_c = out_elems(c, pass);
      const double *ref = pi == 0 ? c->y_ref : pi == 1 ? c->dx_ref : c->dw_ref;
      const double *sb = pi == 0 ? c->y_s : pi == 1 ? c->dx_s : c->dw_s;
      /* products per output element (the tolerance grows with it) */
      const int64_t terms = fb_terms(g_cpu, m->cpu, pass, c->cin, c->cout);
      void *a = pi == 1 ? ddy_in : dx_in;
      void *b = pi == 2 ? ddy_in : dw_in;
      void *out = gpu_alloc((size_t)n_c * voxconv_dtype_size(dt));
      for (int ai = 0; ai < vc_algo_table_size(); ai++) {
        const vc_algo_t *alg = vc_algo_at(ai);
        if (alg->info.backend != VOXCONV_BACKEND_CUDA ||
            !(alg->info.passes & (1u << pass)) ||
            !algo_selected(alg->info.name))
          continue;
        vc_conv_problem_t p =
            vc_conv_problem_make(pass, m->gpu, dt, c->cin, c->cout, a, b, out);
        if (!alg->supports(g_gpu, &p)) {
          g_unsupported++;
          continue;
        }
        const vc_param_space_t *sp =
            alg->param_space ? alg->param_space(pass) : NULL;
        const int npts = space_points(sp);
        /* Spaces up to MAX_POINTS run whole; larger ones run MAX_POINTS
         * points spread over the space, shifted from case to case so that
         * the cases together cover it. */
        const int nrun = npts <= MAX_POINTS ? npts : MAX_POINTS;
        for (int ri = 0; ri < nrun; ri++) {
          const int pt = npts <= MAX_POINTS
                             ? ri
                             : (int)(((int64_t)ri * npts / MAX_POINTS +
                                      g_case_counter) %
                                     npts);
          vc_algo_params_t prm;
          char plabel[160];
          if (!space_point(sp, pt, &prm, plabel, sizeof plabel))
            continue;
          if (!vc_algo_params_supported(alg, g_gpu, &p, &prm)) {
            g_over_smem++;
            continue;
          }
          char label[400];
          snprintf(label, sizeof label, "%s %s[%s] cin=%lld cout=%lld",
                   c->case_name, alg->info.name, plabel, (long long)c->cin,
                   (long long)c->cout);
          poison_device(out, dt, n_c);
          const size_t wsb =
              alg->workspace_size ? alg->workspace_size(&p, &prm) : 0;
          void *ws = wsb ? gpu_alloc(wsb) : NULL;
          voxconv_status_t st = alg->run(g_gpu, &p, &prm, ws);
          if (st == VOXCONV_STATUS_SUCCESS)
            st = voxconv_synchronize(g_gpu);
          VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s %s %s: run: %s: %s",
                    label, pass_name(pass), voxconv_dtype_name(dt),
                    voxconv_status_string(st), voxconv_get_last_error(g_gpu));
          voxconv_free(g_gpu, ws);
          g_param_points++;
          if (st == VOXCONV_STATUS_SUCCESS)
            check_output(out, dt, ref, sb, n_c, terms, alg->info.name, pass,
                         label);
        }
        /* The public entry point with the algorithm forced by name. */
        {
          char label[300];
          snprintf(label, sizeof label, "%s %s[public] cin=%lld cout=%lld",
                   c->case_name, alg->info.name, (long long)c->cin,
                   (long long)c->cout);
          poison_device(out, dt, n_c);
          voxconv_status_t st =
              run_public(c, pass, dt, alg->info.name, a, b, out);
          if (st == VOXCONV_STATUS_SUCCESS)
            st = voxconv_synchronize(g_gpu);
          VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s %s %s: %s: %s", label,
                    pass_name(pass), voxconv_dtype_name(dt),
                    voxconv_status_string(st), voxconv_get_last_error(g_gpu));
          g_public_runs++;
          if (st == VOXCONV_STATUS_SUCCESS)
            check_output(out, dt, ref, sb, n_c, terms, alg->info.name, pass,
                         label);
        }
      }
      voxconv_free(g_gpu, out);
    }
    voxconv_free(g_gpu, dx_in);
    voxconv_free(g_gpu, dw_in);
    voxconv_free(g_gpu, ddy_in);
  }
}

/* CPU F64 references of the three passes. */
static void cpu_references(const mapping_t *m, int depthwise, int64_t cin,
                           int64_t cout, const double *x, const double *w,
                           const double *dy, double *y, double *dx,
                           double *dw) {
  const voxconv_dtype_t F = VOXCONV_DTYPE_F64;
  voxconv_feats_t fx = {(void *)x, m->n_in, cin, F};
  voxconv_feats_t fdy = {(void *)dy, m->n_out, cout, F};
  voxconv_feats_t fy = {y, m->n_out, cout, F};
  voxconv_feats_t fdx = {dx, m->n_in, cin, F};
  if (depthwise) {
    voxconv_feats_t fw = {(void *)w, m->kvol, cin, F};
    voxconv_feats_t fdw = {dw, m->kvol, cin, F};
    VC_EXPECT_STATUS(g_cpu, voxconv_depthwise_forward(g_cpu, m->cpu, &fx, &fw,
                                                      &fy, NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu, voxconv_depthwise_dgrad(g_cpu, m->cpu, &fdy, &fw,
                                                    &fdx, NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu, voxconv_depthwise_wgrad(g_cpu, m->cpu, &fx, &fdy,
                                                    &fdw, NULL),
                     VOXCONV_STATUS_SUCCESS);
  } else {
    voxconv_weights_t fw = {(void *)w, m->kvol, cin, cout, F};
    voxconv_weights_t fdw = {dw, m->kvol, cin, cout, F};
    VC_EXPECT_STATUS(g_cpu,
                     voxconv_conv_forward(g_cpu, m->cpu, &fx, &fw, &fy, NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu,
                     voxconv_conv_dgrad(g_cpu, m->cpu, &fdy, &fw, &fdx, NULL),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu,
                     voxconv_conv_wgrad(g_cpu, m->cpu, &fx, &fdy, &fdw, NULL),
                     VOXCONV_STATUS_SUCCESS);
  }
}

static int g_max_cases; /* VOXCONV_TEST_MAX_CASES: 0 = all */

static int case_budget_left(void) {
  return !g_max_cases || g_case_counter < g_max_cases;
}

/* |v| of n values (a new array). */
static double *abs_copy(const double *v, int64_t n) {
  double *a = (double *)xmalloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++)
    a[i] = fabs(v[i]);
  return a;
}

static void conv_case(const mapping_t *m, const char *case_name, int depthwise,
                      int64_t cin, int64_t cout) {
  if (!case_budget_left())
    return;
  const int64_t wel = m->kvol * cin * (depthwise ? 1 : cout);
  const int64_t nx = m->n_in * cin, ny = m->n_out * cout;
  double *x = (double *)xmalloc(sizeof(double) * (size_t)nx);
  double *w = (double *)xmalloc(sizeof(double) * (size_t)wel);
  double *dy = (double *)xmalloc(sizeof(double) * (size_t)ny);
  double *y = (double *)xmalloc(sizeof(double) * (size_t)ny);
  double *dx = (double *)xmalloc(sizeof(double) * (size_t)nx);
  double *dw = (double *)xmalloc(sizeof(double) * (size_t)wel);
  double *ys = (double *)xmalloc(sizeof(double) * (size_t)ny);
  double *dxs = (double *)xmalloc(sizeof(double) * (size_t)nx);
  double *dws = (double *)xmalloc(sizeof(double) * (size_t)wel);
  fill_exact(x, nx);
  fill_exact(w, wel);
  fill_exact(dy, ny);
  cpu_references(m, depthwise, cin, cout, x, w, dy, y, dx, dw);
  double *ax = abs_copy(x, nx), *aw = abs_copy(w, wel), *ady = abs_copy(dy, ny);
  cpu_references(m, depthwise, cin, cout, ax, aw, ady, ys, dxs, dws);
  free(ax);
  free(aw);
  free(ady);
  conv_case_t c = {m,  case_name, cin, cout, depthwise, x,   w,
                   dy, y,         dx,  dw,   ys,        dxs, dws};
  run_conv_case(&c);
  free(x);
  free(w);
  free(dy);
  free(y);
  free(dx);
  free(dw);
  free(ys);
  free(dxs);
  free(dws);
}

/* ---- pooling ------------------------------------------------------------ */
static void pool_case(const mapping_t *m, const char *case_name, int64_t C) {
  if (!case_budget_left())
    return;
  g_case_counter++;
  g_pool_checks++;
  static const voxconv_pool_mode_t modes[3] = {VOXCONV_POOL_MAX,
                                               VOXCONV_POOL_AVG,
                                               VOXCONV_POOL_SUM};
  static const char *mode_names[3] = {"max", "avg", "sum"};
  const voxconv_dtype_t F = VOXCONV_DTYPE_F64;
  const int64_t nin = m->n_in * C, nout = m->n_out * C;
  double *x = (double *)xmalloc(sizeof(double) * (size_t)nin);
  double *dy = (double *)xmalloc(sizeof(double) * (size_t)nout);
  double *y = (double *)xmalloc(sizeof(double) * (size_t)nout);
  double *dx = (double *)xmalloc(sizeof(double) * (size_t)nin);
  double *uy = (double *)xmalloc(sizeof(double) * (size_t)nin);  /* unpool */
  double *udx = (double *)xmalloc(sizeof(double) * (size_t)nout);
  /* S of the bound: the same ops on |inputs| (max pooling backward routes
   * |dy| by x's maxima) */
  double *ys = (double *)xmalloc(sizeof(double) * (size_t)nout);
  double *dxs = (double *)xmalloc(sizeof(double) * (size_t)nin);
  double *uys = (double *)xmalloc(sizeof(double) * (size_t)nin);
  double *udxs = (double *)xmalloc(sizeof(double) * (size_t)nout);
  fill_exact(x, nin);
  fill_exact(dy, nout);
  double *ax = abs_copy(x, nin), *ady = abs_copy(dy, nout);
  for (int mi = 0; mi < 3; mi++) {
    voxconv_feats_t fx = {x, m->n_in, C, F}, fy = {y, m->n_out, C, F};
    voxconv_feats_t fdy = {dy, m->n_out, C, F}, fdx = {dx, m->n_in, C, F};
    voxconv_feats_t fax = {ax, m->n_in, C, F}, fys = {ys, m->n_out, C, F};
    voxconv_feats_t fady = {ady, m->n_out, C, F}, fdxs = {dxs, m->n_in, C, F};
    VC_EXPECT_STATUS(g_cpu,
                     voxconv_pool_forward(g_cpu, m->cpu, modes[mi], &fx, &fy),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu,
                     voxconv_pool_backward(g_cpu, m->cpu, modes[mi], &fx, &fy,
                                           &fdy, &fdx),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu,
                     voxconv_pool_forward(g_cpu, m->cpu, modes[mi], &fax, &fys),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(
        g_cpu,
        voxconv_pool_backward(g_cpu, m->cpu, modes[mi], &fx, &fy, &fady, &fdxs),
        VOXCONV_STATUS_SUCCESS);
    for (int di = 0; di < 3; di++) {
      const voxconv_dtype_t dt = k_dtypes[di];
      const size_t es = voxconv_dtype_size(dt);
      void *gx = upload_as(x, nin, dt), *gdy = upload_as(dy, nout, dt);
      void *gy = gpu_alloc((size_t)nout * es), *gdx = gpu_alloc((size_t)nin * es);
      voxconv_feats_t hx = {gx, m->n_in, C, dt}, hy = {gy, m->n_out, C, dt};
      voxconv_feats_t hdy = {gdy, m->n_out, C, dt}, hdx = {gdx, m->n_in, C, dt};
      char label[200];
      snprintf(label, sizeof label, "%s pool_%s C=%lld", case_name,
               mode_names[mi], (long long)C);
      poison_device(gy, dt, nout);
      voxconv_status_t st = voxconv_pool_forward(g_gpu, m->gpu, modes[mi], &hx, &hy);
      if (st == VOXCONV_STATUS_SUCCESS)
        st = voxconv_synchronize(g_gpu);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s fwd %s: %s", label,
                voxconv_dtype_name(dt), voxconv_get_last_error(g_gpu));
      if (st == VOXCONV_STATUS_SUCCESS)
        check_output(gy, dt, y, ys, nout, m->kvol, mode_names[mi],
                     PASS_POOL_FWD, label);
      poison_device(gdx, dt, nin);
      st = voxconv_pool_backward(g_gpu, m->gpu, modes[mi], &hx, &hy, &hdy, &hdx);
      if (st == VOXCONV_STATUS_SUCCESS)
        st = voxconv_synchronize(g_gpu);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s bwd %s: %s", label,
                voxconv_dtype_name(dt), voxconv_get_last_error(g_gpu));
      if (st == VOXCONV_STATUS_SUCCESS)
        check_output(gdx, dt, dx, dxs, nin, m->kvol, mode_names[mi],
                     PASS_POOL_BWD, label);
      voxconv_free(g_gpu, gx);
      voxconv_free(g_gpu, gdy);
      voxconv_free(g_gpu, gy);
      voxconv_free(g_gpu, gdx);
    }
  }
  /* Unpooling coarse -> fine and its adjoint. */
  {
    voxconv_feats_t cx = {dy, m->n_out, C, F}, fy = {uy, m->n_in, C, F};
    voxconv_feats_t fdy = {x, m->n_in, C, F}, cdx = {udx, m->n_out, C, F};
    VC_EXPECT_STATUS(g_cpu, voxconv_unpool_forward(g_cpu, m->cpu, &cx, &fy),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu, voxconv_unpool_backward(g_cpu, m->cpu, &fdy, &cdx),
                     VOXCONV_STATUS_SUCCESS);
    voxconv_feats_t acx = {ady, m->n_out, C, F}, fys = {uys, m->n_in, C, F};
    voxconv_feats_t afdy = {ax, m->n_in, C, F}, cdxs = {udxs, m->n_out, C, F};
    VC_EXPECT_STATUS(g_cpu, voxconv_unpool_forward(g_cpu, m->cpu, &acx, &fys),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT_STATUS(g_cpu,
                     voxconv_unpool_backward(g_cpu, m->cpu, &afdy, &cdxs),
                     VOXCONV_STATUS_SUCCESS);
    for (int di = 0; di < 3; di++) {
      const voxconv_dtype_t dt = k_dtypes[di];
      const size_t es = voxconv_dtype_size(dt);
      void *gc = upload_as(dy, nout, dt), *gf = upload_as(x, nin, dt);
      void *gfy = gpu_alloc((size_t)nin * es), *gcdx = gpu_alloc((size_t)nout * es);
      voxconv_feats_t hcx = {gc, m->n_out, C, dt}, hfy = {gfy, m->n_in, C, dt};
      voxconv_feats_t hfdy = {gf, m->n_in, C, dt}, hcdx = {gcdx, m->n_out, C, dt};
      char label[200];
      snprintf(label, sizeof label, "%s unpool C=%lld", case_name, (long long)C);
      poison_device(gfy, dt, nin);
      voxconv_status_t st = voxconv_unpool_forward(g_gpu, m->gpu, &hcx, &hfy);
      if (st == VOXCONV_STATUS_SUCCESS)
        st = voxconv_synchronize(g_gpu);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s fwd %s: %s", label,
                voxconv_dtype_name(dt), voxconv_get_last_error(g_gpu));
      if (st == VOXCONV_STATUS_SUCCESS)
        check_output(gfy, dt, uy, uys, nin, m->kvol, "unpool", PASS_UNPOOL_FWD,
                     label);
      poison_device(gcdx, dt, nout);
      st = voxconv_unpool_backward(g_gpu, m->gpu, &hfdy, &hcdx);
      if (st == VOXCONV_STATUS_SUCCESS)
        st = voxconv_synchronize(g_gpu);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s bwd %s: %s", label,
                voxconv_dtype_name(dt), voxconv_get_last_error(g_gpu));
      if (st == VOXCONV_STATUS_SUCCESS)
        check_output(gcdx, dt, udx, udxs, nout, m->kvol, "unpool",
                     PASS_UNPOOL_BWD, label);
      voxconv_free(g_gpu, gc);
      voxconv_free(g_gpu, gf);
      voxconv_free(g_gpu, gfy);
      voxconv_free(g_gpu, gcdx);
    }
  }
  free(x);
  free(dy);
  free(y);
  free(dx);
  free(uy);
  free(udx);
  free(ys);
  free(dxs);
  free(uys);
  free(udxs);
  free(ax);
  free(ady);
}

/* supports() of every CUDA record must refuse CPU handles/maps and F64. */
static void check_supports_refusals(const mapping_t *m) {
  for (int ai = 0; ai < vc_algo_table_size(); ai++) {
    const vc_algo_t *alg = vc_algo_at(ai);
    if (alg->info.backend != VOXCONV_BACKEND_CUDA)
      continue;
    for (int pass = 0; pass < VOXCONV_PASS_COUNT; pass++) {
      if (!(alg->info.passes & (1u << pass)))
        continue;
      vc_conv_problem_t p;
      memset(&p, 0, sizeof p);
      p.pass = (voxconv_pass_t)pass;
      p.cin = p.cout = 16;
      p.dtype = VOXCONV_DTYPE_F32;
      p.kmap = m->cpu;
      VC_EXPECT(!alg->supports(g_cpu, &p), "%s accepts a CPU handle (%s)",
                alg->info.name, pass_name(pass));
      p.kmap = m->gpu;
      p.dtype = VOXCONV_DTYPE_F64;
      VC_EXPECT(!alg->supports(g_gpu, &p), "%s accepts F64 (%s)",
                alg->info.name, pass_name(pass));
    }
  }
}

/* ---- the cases ------------------------------------------------------------ */
static voxconv_kmap_desc_t desc_of(voxconv_kmap_mode_t mode, int k, int s,
                                   int d) {
  voxconv_kmap_desc_t g;
  memset(&g, 0, sizeof g);
  g.mode = mode;
  for (int a = 0; a < 3; a++) {
    g.kernel_size[a] = k;
    g.stride[a] = s;
    g.dilation[a] = d;
  }
  return g;
}

typedef struct {
  int64_t cin, cout;
} chans_t;

int main(void) {
  vc_test_init("test_backend_ops");
  if (gpu_test_no_device("test_backend_ops"))
    return VC_TEST_SKIP;
  g_small = vc_parse_bool(vc_getenv("VOXCONV_TEST_SMALL")) == 1;
  g_algo_filter = vc_getenv("VOXCONV_TEST_ALGO");
  if (vc_getenv("VOXCONV_TEST_MAX_CASES"))
    g_max_cases = atoi(vc_getenv("VOXCONV_TEST_MAX_CASES"));
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CPU;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_cpu, &d));
  d.backend = VOXCONV_BACKEND_CUDA;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_gpu, &d));
  voxconv_device_info_t info;
  if (voxconv_device_get_info(0, &info) == VOXCONV_STATUS_SUCCESS)
    printf("device: %s (cc %d.%d, %d SMs)\n", info.name, info.cc_major,
           info.cc_minor, info.sm_count);

  /* Coordinate sets: random grids (two batches) and real scans. */
  coordset_t sets[4];
  int nsets = 0;
  {
    int64_t n = 0;
    int32_t *c = vc_random_coords(g_small ? 600 : 3000, g_small ? 6 : 12, &n);
    sets[nsets++] = (coordset_t){"random_sparse", c, n};
    c = vc_random_coords(g_small ? 800 : 6000, g_small ? 5 : 9, &n);
    sets[nsets++] = (coordset_t){"random_dense", c, n};
  }
  {
    coordset_t s = scan_set("scans/semantickitti_00_000000.bin", 4, 0.05f,
                            g_small ? 1500 : 24000, "semantickitti_0.05m");
    if (s.coords)
      sets[nsets++] = s;
    if (!g_small) {
      s = scan_set("scans/kitti_000000.bin", 4, 0.05f, 16000,
                   "kitti000000_0.05m");
      if (s.coords)
        sets[nsets++] = s;
    }
  }
  for (int i = 0; i < nsets; i++)
    printf("coords %-22s %lld voxels\n", sets[i].name, (long long)sets[i].n);

  const geometry_t geoms[] = {
      {"subm3", desc_of(VOXCONV_KMAP_SUBMANIFOLD, 3, 1, 1), 0},
      {"strided2s2", desc_of(VOXCONV_KMAP_STRIDED, 2, 2, 1), 0},
      {"strided3s2", desc_of(VOXCONV_KMAP_STRIDED, 3, 2, 1), 0},
      {"transposed2s2", desc_of(VOXCONV_KMAP_TRANSPOSED, 2, 2, 1), 1},
      {"generative3", desc_of(VOXCONV_KMAP_GENERATIVE, 3, 1, 1), 0},
      {"subm3d2", desc_of(VOXCONV_KMAP_SUBMANIFOLD, 3, 1, 2), 0},
      {"subm5", desc_of(VOXCONV_KMAP_SUBMANIFOLD, 5, 1, 1), 0},
      /* spconv's sets (voxconv.h): SparseConv3d(3, s2, p1), its inverse,
       * and an anchored (non-centred) kernel. */
      {"expanding3s2p1", padded_of(VOXCONV_KMAP_EXPANDING, 3, 2, 1), 0},
      {"inverse3s2p1", padded_of(VOXCONV_KMAP_EXPANDING, 3, 2, 1), 2},
      {"generative3p0", padded_of(VOXCONV_KMAP_GENERATIVE, 3, 1, 0), 0},
  };
  const int ngeoms = (int)(sizeof geoms / sizeof geoms[0]);
  /* Channel pairs (3, 96, 160 are not multiples of 8 or 16 tiles). */
  const chans_t chans_full[] = {{3, 16}, {16, 32}, {32, 3}, {96, 160}, {160, 96}};
  const chans_t chans_small[] = {{3, 16}, {32, 32}, {96, 40}};
  const int64_t dw_full[] = {3, 16, 96, 160};
  const int64_t dw_small[] = {3, 40};

  int supports_checked = 0;
  for (int si = 0; si < nsets; si++) {
    const coordset_t *cs = &sets[si];
    const int real = si >= 2;
    for (int gi = 0; gi < ngeoms; gi++) {
      const geometry_t *g = &geoms[gi];
      /* Real scans: the geometries of a network (subm3, down, up); random
       * sets: all of them. */
      if (real && gi != 0 && gi != 2 && gi != 3)
        continue;
      if (g_small && gi >= 5)
        continue;
      mapping_t m;
      if (!build_mapping(cs, g, &m))
        continue;
      char case_name[160];
      snprintf(case_name, sizeof case_name, "%s/%s", cs->name, g->name);
      printf("case %-36s n_in %lld n_out %lld pairs %lld kvol %d\n", case_name,
             (long long)m.n_in, (long long)m.n_out, (long long)m.n_pairs,
             m.kvol);
      fflush(stdout);
      if (!supports_checked) {
        check_supports_refusals(&m);
        supports_checked = 1;
      }
      const chans_t *ch = g_small ? chans_small : chans_full;
      const int nch = g_small ? 3 : 5;
      for (int ci = 0; ci < nch; ci++) {
        /* Wide channels (96, 160) on the submanifold maps only: the other
         * geometries exercise the indexing, which narrow channels do. */
        if (!g_small && gi != 0 && (ch[ci].cin >= 96 || ch[ci].cout >= 96))
          continue;
        conv_case(&m, case_name, 0, ch[ci].cin, ch[ci].cout);
      }
      const int64_t *dw = g_small ? dw_small : dw_full;
      const int ndw = g_small ? 2 : 4;
      for (int ci = 0; ci < ndw; ci++)
        if (!(real && gi != 0) && (g_small || gi == 0 || dw[ci] < 96))
          conv_case(&m, case_name, 1, dw[ci], dw[ci]);
      if (g->desc.mode == VOXCONV_KMAP_STRIDED && algo_selected("pool")) {
        pool_case(&m, case_name, 3);
        pool_case(&m, case_name, g_small ? 16 : 96);
      }
      mapping_free(&m);
    }
  }

  printf("\n%-22s %-16s %-5s %5s %5s %10s %10s %10s\n", "algorithm", "pass",
         "dtype", "runs", "fail", "ratio", "max_rel", "norm");
  for (int i = 0; i < g_nsum; i++) {
    const summary_t *s = &g_sum[i];
    printf("%-22s %-16s %-5s %5d %5d %10.3g %10.3g %10.3g\n", s->algo,
           pass_name(s->pass), voxconv_dtype_name(s->dt), s->runs, s->failures,
           s->worst_ratio, s->worst_max_rel, s->worst_norm);
  }
  printf("parameter points run: %d, public calls: %d, unsupported "
         "(record, problem) pairs: %d, points over this GPU's shared memory "
         "per block: %d\n",
         g_param_points, g_public_runs, g_unsupported, g_over_smem);
  /* A VOXCONV_TEST_ALGO=pool run (the sanitizers') runs no conv. */
  VC_EXPECT(g_param_points > 0 || (g_algo_filter && g_pool_checks > 0),
            "no CUDA algorithm ran at all");
  for (int i = 0; i < nsets; i++)
    free(sets[i].coords);
  voxconv_destroy(g_gpu);
  voxconv_destroy(g_cpu);
  return vc_test_finish();
}
