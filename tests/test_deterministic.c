/* Determinism on the GPU: every CUDA record flagged deterministic gives
 * bitwise-identical outputs over 5 runs, for every pass it implements,
 * every dtype and every point of its parameter space (fp32-accumulator
 * points), through record->run() and through the public API with the
 * handle in deterministic mode (algorithm forced by name, and "auto").
 *
 * The inputs are big enough for float atomics to reorder (a full
 * SemanticKITTI scan at 5 cm, ~92k voxels, or a random grid when the file
 * is missing): records flagged non-deterministic are run the same way and
 * the number of differing reruns is printed, which shows that this test
 * can see nondeterminism where it exists (informational, not gated: an
 * atomic kernel may happen to repeat itself).
 *
 * VOXCONV_TEST_SMALL=1 uses a small random grid; VOXCONV_TEST_ALGO=a,b
 * restricts the records. Exits 77 (skipped) without a GPU. */
#include "gpu_test_util.h"
#include "vc_test.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/vc_core.h"
#include "ops/vc_algo.h"

#define RUNS 5

static voxconv_handle_t *g_gpu;

static void *xmalloc(size_t b) {
  void *p = malloc(b ? b : 1);
  if (!p) {
    fprintf(stderr, "test_deterministic: out of host memory\n");
    exit(2);
  }
  return p;
}

static void *gpu_alloc(size_t bytes) {
  void *d = NULL;
  if (voxconv_malloc(g_gpu, bytes ? bytes : 1, &d) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "device allocation of %zu bytes: %s\n", bytes,
            voxconv_get_last_error(g_gpu));
    exit(2);
  }
  return d;
}

static void upload(void *dev, const void *host, size_t bytes) {
  if (voxconv_memcpy(g_gpu, dev, host, bytes, VOXCONV_MEMCPY_HOST_TO_BACKEND))
    exit(2);
}
static void download(void *host, const void *dev, size_t bytes) {
  if (voxconv_memcpy(g_gpu, host, dev, bytes, VOXCONV_MEMCPY_BACKEND_TO_HOST))
    exit(2);
}

static void *random_device(int64_t n, voxconv_dtype_t dt) {
  const size_t es = voxconv_dtype_size(dt);
  void *h = xmalloc((size_t)n * es);
  vc_fill_normal(h, dt, n);
  void *d = gpu_alloc((size_t)n * es);
  upload(d, h, (size_t)n * es);
  free(h);
  return d;
}

static void poison_device(void *dev, voxconv_dtype_t dt, int64_t n) {
  const size_t es = voxconv_dtype_size(dt);
  void *h = xmalloc((size_t)n * es);
  vc_poison(h, dt, n);
  upload(dev, h, (size_t)n * es);
  free(h);
}

typedef struct {
  voxconv_kmap_t *kmap;
  int64_t n_in, n_out;
  int kvol;
  const char *name;
} map_t;

static int64_t out_elems(const map_t *m, voxconv_pass_t pass, int64_t cin,
                         int64_t cout) {
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return m->n_out * cout;
  case VOXCONV_PASS_CONV_DGRAD:
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return m->n_in * cin;
  case VOXCONV_PASS_CONV_WGRAD:
    return (int64_t)m->kvol * cin * cout;
  default:
    return (int64_t)m->kvol * cin;
  }
}

/* Runs `run_fn` RUNS times into a poisoned output and counts the runs whose
 * bytes differ from the first one. Returns -1 on a failed run. */
typedef voxconv_status_t (*run_fn)(void *ctx, void *out);

static int count_differing(run_fn fn, void *ctx, void *out, voxconv_dtype_t dt,
                           int64_t n, const char *label) {
  const size_t bytes = (size_t)n * voxconv_dtype_size(dt);
  unsigned char *first = (unsigned char *)xmalloc(bytes);
  unsigned char *again = (unsigned char *)xmalloc(bytes);
  int differing = 0;
  for (int r = 0; r < RUNS; r++) {
    poison_device(out, dt, n);
    voxconv_status_t st = fn(ctx, out);
    if (st == VOXCONV_STATUS_SUCCESS)
      st = voxconv_synchronize(g_gpu);
    if (st != VOXCONV_STATUS_SUCCESS) {
      VC_EXPECT(0, "%s: run %d: %s: %s", label, r, voxconv_status_string(st),
                voxconv_get_last_error(g_gpu));
      differing = -1;
      break;
    }
    download(r == 0 ? first : again, out, bytes);
    if (r == 0) {
      VC_EXPECT(vc_count_poison(first, dt, n) == 0,
                "%s: %lld elements never written", label,
                (long long)vc_count_poison(first, dt, n));
    } else if (memcmp(first, again, bytes) != 0) {
      differing++;
    }
  }
  free(first);
  free(again);
  return differing;
}

/* ---- through the record ---------------------------------------------- */
typedef struct {
  const vc_algo_t *alg;
  vc_conv_problem_t p;
  vc_algo_params_t prm;
  void *ws;
} record_ctx_t;

static voxconv_status_t run_record(void *ctx, void *out) {
  record_ctx_t *c = (record_ctx_t *)ctx;
  c->p.c = out;
  return c->alg->run(g_gpu, &c->p, &c->prm, c->ws);
}

/* ---- through the public API -------------------------------------------- */
typedef struct {
  const map_t *m;
  voxconv_pass_t pass;
  voxconv_dtype_t dt;
  int64_t cin, cout;
  void *x, *w, *dy;
  const char *algo;
} public_ctx_t;

static voxconv_status_t run_public(void *ctx, void *out) {
  public_ctx_t *c = (public_ctx_t *)ctx;
  voxconv_conv_options_t opt;
  memset(&opt, 0, sizeof opt);
  opt.fwd_algo = c->algo;
  opt.bwd_algo = c->algo;
  const map_t *m = c->m;
  voxconv_feats_t x = {c->x, m->n_in, c->cin, c->dt};
  voxconv_feats_t dy = {c->dy, m->n_out, c->cout, c->dt};
  voxconv_weights_t w = {c->w, m->kvol, c->cin, c->cout, c->dt};
  voxconv_feats_t wd = {c->w, m->kvol, c->cin, c->dt};
  voxconv_feats_t y = {out, m->n_out, c->cout, c->dt};
  voxconv_feats_t dx = {out, m->n_in, c->cin, c->dt};
  voxconv_weights_t dw = {out, m->kvol, c->cin, c->cout, c->dt};
  voxconv_feats_t dwd = {out, m->kvol, c->cin, c->dt};
  switch (c->pass) {
  case VOXCONV_PASS_CONV_FWD:
    return voxconv_conv_forward(g_gpu, m->kmap, &x, &w, &y, &opt);
  case VOXCONV_PASS_CONV_DGRAD:
    return voxconv_conv_dgrad(g_gpu, m->kmap, &dy, &w, &dx, &opt);
  case VOXCONV_PASS_CONV_WGRAD:
    return voxconv_conv_wgrad(g_gpu, m->kmap, &x, &dy, &dw, &opt);
  case VOXCONV_PASS_DEPTHWISE_FWD:
    return voxconv_depthwise_forward(g_gpu, m->kmap, &x, &wd, &y, &opt);
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
    return voxconv_depthwise_dgrad(g_gpu, m->kmap, &dy, &wd, &dx, &opt);
  case VOXCONV_PASS_DEPTHWISE_WGRAD:
    return voxconv_depthwise_wgrad(g_gpu, m->kmap, &x, &dy, &dwd, &opt);
  default:
    return VOXCONV_STATUS_INTERNAL;
  }
}

static const char *pass_name(int pass) {
  static const char *n[] = {"conv_fwd",      "conv_dgrad",      "conv_wgrad",
                            "depthwise_fwd", "depthwise_dgrad", "depthwise_wgrad"};
  return pass >= 0 && pass < 6 ? n[pass] : "?";
}

static int g_det_runs, g_nondet_seen, g_nondet_runs;
/* points skipped as over this GPU's shared memory per block (e.g. mask_gemm
 * tiles 8 and 9 on sm_86; test_smem_limit tests that refusal) */
static int g_over_smem;

static void run_map(const map_t *m, int64_t cin, int64_t cout) {
  static const voxconv_dtype_t dts[3] = {VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16,
                                         VOXCONV_DTYPE_BF16};
  for (int di = 0; di < 3; di++) {
    const voxconv_dtype_t dt = dts[di];
    for (int pass = 0; pass < VOXCONV_PASS_COUNT; pass++) {
      const int dwise = pass >= VOXCONV_PASS_DEPTHWISE_FWD;
      const int64_t ci = cin, co = dwise ? cin : cout;
      const int64_t wel = (int64_t)m->kvol * ci * (dwise ? 1 : co);
      void *x = random_device(m->n_in * ci, dt);
      void *w = random_device(wel, dt);
      void *dy = random_device(m->n_out * co, dt);
      const int64_t n_c = out_elems(m, (voxconv_pass_t)pass, ci, co);
      void *out = gpu_alloc((size_t)n_c * voxconv_dtype_size(dt));
      for (int ai = 0; ai < vc_algo_table_size(); ai++) {
        const vc_algo_t *alg = vc_algo_at(ai);
        if (alg->info.backend != VOXCONV_BACKEND_CUDA ||
            !(alg->info.passes & (1u << pass)) ||
            !algo_selected(alg->info.name))
          continue;
        record_ctx_t rc;
        memset(&rc, 0, sizeof rc);
        rc.alg = alg;
        rc.p.pass = (voxconv_pass_t)pass;
        rc.p.kmap = m->kmap;
        rc.p.dtype = dt;
        rc.p.cin = ci;
        rc.p.cout = co;
        rc.p.a = pass == VOXCONV_PASS_CONV_DGRAD ||
                         pass == VOXCONV_PASS_DEPTHWISE_DGRAD
                     ? dy
                     : x;
        rc.p.b = pass == VOXCONV_PASS_CONV_WGRAD ||
                         pass == VOXCONV_PASS_DEPTHWISE_WGRAD
                     ? dy
                     : w;
        rc.p.deterministic = alg->info.deterministic;
        if (!alg->supports(g_gpu, &rc.p))
          continue;
        const vc_param_space_t *sp =
            alg->param_space ? alg->param_space((voxconv_pass_t)pass) : NULL;
        int npts = 1;
        if (sp)
          for (int i = 0; i < sp->n; i++)
            npts *= sp->n_values[i] > 0 ? sp->n_values[i] : 1;
        /* Non-deterministic records: their default point only. */
        if (!alg->info.deterministic)
          npts = 1;
        for (int pt = 0; pt < npts; pt++) {
          int idx = pt, skip = 0;
          char plabel[160] = "";
          size_t off = 0;
          memset(&rc.prm, 0, sizeof rc.prm);
          if (sp && alg->info.deterministic) {
            for (int i = 0; i < sp->n && i < VC_MAX_PARAMS; i++) {
              const int nv = sp->n_values[i] > 0 ? sp->n_values[i] : 1;
              rc.prm.v[i] = sp->values[i][idx % nv];
              idx /= nv;
              if (sp->names[i] &&
                  strcmp(sp->names[i], VC_PARAM_ACCUMULATOR) == 0 &&
                  rc.prm.v[i] != VC_ACCUM_F32 && rc.prm.v[i] != 32)
                skip = 1;
              if (off < sizeof plabel)
                off += (size_t)snprintf(plabel + off, sizeof plabel - off,
                                        "%s%s=%d", i ? "," : "",
                                        sp->names[i] ? sp->names[i] : "?",
                                        rc.prm.v[i]);
            }
          } else {
            vc_algo_default_params(alg, (voxconv_pass_t)pass, &rc.prm);
            snprintf(plabel, sizeof plabel, "default");
          }
          if (skip)
            continue;
          if (!vc_algo_params_supported(alg, g_gpu, &rc.p, &rc.prm)) {
            g_over_smem++;
            continue;
          }
          const size_t wsb =
              alg->workspace_size ? alg->workspace_size(&rc.p, &rc.prm) : 0;
          rc.ws = wsb ? gpu_alloc(wsb) : NULL;
          char label[400];
          snprintf(label, sizeof label, "%s %s[%s] %s %s cin=%lld cout=%lld",
                   m->name, alg->info.name, plabel, pass_name(pass),
                   voxconv_dtype_name(dt), (long long)ci, (long long)co);
          const int diff = count_differing(run_record, &rc, out, dt, n_c, label);
          voxconv_free(g_gpu, rc.ws);
          if (alg->info.deterministic) {
            g_det_runs++;
            VC_EXPECT(diff == 0, "%s: %d of %d reruns differ bitwise", label,
                      diff, RUNS - 1);
          } else if (diff >= 0) {
            g_nondet_runs++;
            if (diff > 0) {
              g_nondet_seen++;
              printf("  (expected possible) %s: %d of %d reruns differ\n",
                     label, diff, RUNS - 1);
            }
          }
        }
        /* Public API, deterministic handle, algorithm forced by name. */
        if (alg->info.deterministic) {
          public_ctx_t pc = {m, (voxconv_pass_t)pass, dt, ci, co, x, w, dy,
                             alg->info.name};
          char label[300];
          snprintf(label, sizeof label, "%s public %s %s %s", m->name,
                   alg->info.name, pass_name(pass), voxconv_dtype_name(dt));
          const int diff = count_differing(run_public, &pc, out, dt, n_c, label);
          VC_EXPECT(diff == 0, "%s: %d of %d reruns differ bitwise", label,
                    diff, RUNS - 1);
          g_det_runs++;
        }
      }
      /* Public API, deterministic handle, algorithm "auto". */
      if (!g_algo_filter) {
        public_ctx_t pc = {m, (voxconv_pass_t)pass, dt, ci, co, x, w, dy,
                           "auto"};
        char label[300];
        snprintf(label, sizeof label, "%s public auto %s %s", m->name,
                 pass_name(pass), voxconv_dtype_name(dt));
        const int diff = count_differing(run_public, &pc, out, dt, n_c, label);
        VC_EXPECT(diff == 0, "%s: %d of %d reruns differ bitwise", label, diff,
                  RUNS - 1);
        g_det_runs++;
      }
      voxconv_free(g_gpu, out);
      voxconv_free(g_gpu, x);
      voxconv_free(g_gpu, w);
      voxconv_free(g_gpu, dy);
    }
  }
}

int main(void) {
  vc_test_init("test_deterministic");
  if (gpu_test_no_device("test_deterministic"))
    return VC_TEST_SKIP;
  const int small = vc_parse_bool(vc_getenv("VOXCONV_TEST_SMALL")) == 1;
  g_algo_filter = vc_getenv("VOXCONV_TEST_ALGO");
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CUDA;
  d.deterministic = 1;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_gpu, &d));

  int32_t *coords = NULL;
  int64_t n = 0;
  const char *set_name = "random";
  if (!small) {
    size_t bytes = 0;
    float *pts = (float *)vc_read_file(
        vc_data_path("scans/semantickitti_00_000000.bin"), &bytes);
    if (pts) {
      coords = vc_voxels_from_points(pts, (int64_t)(bytes / 16), 4, 0.05f, &n);
      set_name = "semantickitti_0.05m";
      free(pts);
    }
  }
  if (!coords)
    coords = vc_random_coords(small ? 2000 : 60000, small ? 8 : 30, &n);
  printf("coordinates: %s, %lld voxels\n", set_name, (long long)n);

  int32_t *dcoords = (int32_t *)gpu_alloc((size_t)n * 16);
  upload(dcoords, coords, (size_t)n * 16);
  voxconv_coords_t in = {dcoords, n, {1, 1, 1}};

  static const struct {
    const char *name;
    voxconv_kmap_mode_t mode;
    int k, s;
  } geoms[2] = {{"subm3", VOXCONV_KMAP_SUBMANIFOLD, 3, 1},
                {"strided3s2", VOXCONV_KMAP_STRIDED, 3, 2}};
  for (int gi = 0; gi < 2; gi++) {
    voxconv_kmap_desc_t desc;
    memset(&desc, 0, sizeof desc);
    desc.mode = geoms[gi].mode;
    for (int a = 0; a < 3; a++) {
      desc.kernel_size[a] = geoms[gi].k;
      desc.stride[a] = geoms[gi].s;
      desc.dilation[a] = 1;
    }
    map_t m;
    memset(&m, 0, sizeof m);
    m.name = geoms[gi].name;
    VC_REQUIRE_OK(g_gpu, vc_test_kmap_build(g_gpu, &desc, &in, NULL, &m.kmap));
    voxconv_kmap_info_t info;
    voxconv_kmap_get_info(m.kmap, &info);
    m.n_in = info.n_in;
    m.n_out = info.n_out;
    m.kvol = info.kernel_volume;
    printf("map %s: %lld -> %lld, %lld pairs\n", m.name, (long long)m.n_in,
           (long long)m.n_out, (long long)info.n_pairs);
    fflush(stdout);
    run_map(&m, 32, 32);
    if (gi == 0)
      run_map(&m, 3, 16); /* narrow channels: other tiles and code paths */
    voxconv_kmap_destroy(g_gpu, m.kmap);
  }
  printf("deterministic checks: %d (each %d runs); non-deterministic records "
         "differed in %d of %d checks; points over this GPU's shared memory "
         "per block: %d\n",
         g_det_runs, RUNS, g_nondet_seen, g_nondet_runs, g_over_smem);
  VC_EXPECT(g_det_runs > 0, "no deterministic CUDA algorithm ran");
  voxconv_free(g_gpu, dcoords);
  free(coords);
  voxconv_destroy(g_gpu);
  return vc_test_finish();
}
