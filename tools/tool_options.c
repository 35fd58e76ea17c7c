/* Option parsing of `voxconv bench`, `tune` and `cache inspect|analyze`
 * (see tool_options.h): parsing only, so that the commands and the fuzz
 * target fuzz/fuzz_tool_options.c share one implementation. */
#include "tool_options.h"
#include "tool_common.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <strings.h>

/* ---- bench ------------------------------------------------------------- */
void vt_bench_usage(FILE *out) {
  fprintf(
      out,
      "usage: voxconv bench [options]\n"
      "\n"
      "Times the network of BENCHMARKS.md workload A (spconv-large): 7 levels\n"
      "of two submanifold 3x3x3 convolutions (3->64->64, 64->96->96, ...,\n"
      "224->256->256) with a 2x2x2 stride-2 max pool between levels; the two\n"
      "convolutions of a level share one kernel map. Forward starts from\n"
      "coordinates and features (maps are built inside the timed region);\n"
      "backward = dgrad + wgrad of every convolution and the pool backward.\n"
      "On CUDA, \"fwd+bwd\" also times the two back to back between one pair\n"
      "of events, as a training step (and PyTorch) runs them.\n"
      "\n"
      "input (default: built-in synthetic lidar scene):\n"
      "  --size tiny|small|medium|large  synthetic scene size (default: small\n"
      "                        on CPU, large (~0.9M voxels) on CUDA)\n"
      "  --scan FILE           a recorded scan: raw float32 .bin, PLY or PCD;\n"
      "                        a bare name is also looked up in DATA/scans/\n"
      "  --fields N            floats per point of a raw .bin (KITTI 4,\n"
      "                        nuScenes 5, ScanNet 6); guessed if omitted\n"
      "  --voxel V             voxel size in metres (default 0.1)\n"
      "  --workload A|B|C|D    BENCHMARKS.md workloads: A = spconv-large "
      "input,\n"
      "                        B = spconv-basic input, C = one subm3 layer "
      "per\n"
      "                        --channels on A's level 0 (map prebuilt; fwd,\n"
      "                        dgrad, wgrad, and the three back to back as one\n"
      "                        series), D = kernel-map build of A level 0\n"
      "  --channels LIST       workload C channel counts (default "
      "32,64,128,256)\n"
      "execution:\n"
      "  --backend cpu|cuda|auto  (default auto)\n"
      "  --device N            CUDA device ordinal (default 0)\n"
      "  --dtype f32|f16|bf16|f64|i8  (default f16 on CUDA, f32 on CPU;\n"
      "                    i8: the int8 ops, forward only, int8 activations\n"
      "                    between layers and int8 max pooling)\n"
      "  --algo NAME           fwd_algo and bwd_algo (a name, [a,b], auto)\n"
      "  --threads N           CPU threads (default VOXCONV_NUM_THREADS or "
      "all)\n"
      "  --deterministic       bitwise-reproducible ops\n"
      "  --fp16-accum on|off   fp16 accumulators (default: library default)\n"
      "  --repeat N            timed runs, median reported (default 3 CPU, 10 "
      "CUDA)\n"
      "  --warmup N            untimed runs first (default 1 CPU, 3 CUDA)\n"
      "  --settle-ms N         CUDA: idle N ms after a warm-up in which the\n"
      "                        autotuner ran (default 2000; 0: none), so the\n"
      "                        tuning burst's power draw does not lower the\n"
      "                        clock of the timed runs\n"
      "  --pass-idle-ms N      CUDA, workload C: idle N ms before each pass\n"
      "                        (forward, dgrad, wgrad, back to back) and its\n"
      "                        warm-up, so every row starts from the same\n"
      "                        power state (default 0)\n"
      "  --pass-preheat-ms N   CUDA, workload C: after each pass's warm-up,\n"
      "                        run it untimed for N ms, so that its timed\n"
      "                        runs all see the sustained (power-capped)\n"
      "                        clock instead of switching to it mid-series\n"
      "                        (default 0)\n"
      "  --seed N              weights/gradients seed (default 1)\n"
      "  --maps overlap|serial  CUDA end-to-end forward: build kernel maps\n"
      "                        on side streams (submanifold maps on one,\n"
      "                        pool maps queued without waiting for their\n"
      "                        counts on another), overlapping the level's\n"
      "                        convolutions (default), or in line\n"
      "  --map-priority high|normal  the overlapped maps' streams' priority\n"
      "                        (default high: the host waits for each pool\n"
      "                        map's count, so the map chain is near the\n"
      "                        forward's critical path and should not queue\n"
      "                        behind convolutions)\n"
      "output:\n"
      "  --json                JSON on stdout (the table goes to stderr)\n"
      "  --quiet               no table or progress on stderr\n"
      "  --peak-tflops X       compute ceiling for %% of peak (default: H200\n"
      "                        from BENCHMARKS.md, 771 f16 / 799 bf16 / 51 "
      "f32)\n"
      "  --peak-tbps X         bandwidth ceiling (default 4.27, H200)\n"
      "\n"
      "Pooled levels' strided maps are built with the last level's output\n"
      "bounds (compact sort keys; the same maps): VOXCONV_STRIDED_BOUNDS=0\n"
      "(or false, off, no) builds them without.\n"
      "Overlapped runs prepare each submanifold map (its row order, and for\n"
      "a forward + backward dgrad's and its pair lists) on a stream of its own\n"
      "once built (voxconv_kmap_prepare): VOXCONV_MAP_PREPARE=0 leaves them\n"
      "to the convolutions.\n"
      "VOXCONV_BENCH_TRACE=1 prints on stderr, for each overlapped end-to-end\n"
      "forward, the host clock (ms from its start) at every step it issues:\n"
      "whether the GPU waited on the host.\n"
      "Data folder: $VOXCONV_DATA_DIR, else %s\n",
      VOXCONV_DEFAULT_DATA_DIR);
}

/* Where a parser writes: the command's name for messages, --help's
 * stream and the error stream. */
typedef struct parse_io {
  const char *cmd;
  FILE *out, *err;
} parse_io_t;

static int usage_error(const parse_io_t *io, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const parse_io_t *io, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(io->err, "voxconv %s: ", io->cmd);
  vfprintf(io->err, fmt, ap);
  fprintf(io->err, "\n\n");
  va_end(ap);
  if (strcmp(io->cmd, "bench") == 0)
    vt_bench_usage(io->err);
  else
    fprintf(io->err,
            "voxconv %s takes the options of `voxconv bench --help` "
            "(see `voxconv %s --help`)\n",
            io->cmd, io->cmd);
  return VT_EXIT_USAGE;
}

static int parse_dtype(const char *s, voxconv_dtype_t *d) {
  static const struct {
    const char *name;
    voxconv_dtype_t d;
  } names[] = {{"f32", VOXCONV_DTYPE_F32},   {"fp32", VOXCONV_DTYPE_F32},
               {"f16", VOXCONV_DTYPE_F16},   {"fp16", VOXCONV_DTYPE_F16},
               {"bf16", VOXCONV_DTYPE_BF16}, {"f64", VOXCONV_DTYPE_F64},
               {"fp64", VOXCONV_DTYPE_F64},  {"i8", VOXCONV_DTYPE_I8},
               {"int8", VOXCONV_DTYPE_I8}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i].name) == 0) {
      *d = names[i].d;
      return 1;
    }
  return 0;
}

/* The next comma-separated token of [*p, end) as (*tok, *len); empty
 * tokens are skipped (",1,,2," is the list 1, 2). Lists are read in place:
 * a copy into a fixed buffer once cut long values short, so the part that
 * was checked was not the value used (fuzz/regress/fuzz_tool_options/). */
static int next_token(const char **p, const char *end, const char **tok,
                      size_t *len) {
  while (*p < end && **p == ',')
    (*p)++;
  if (*p >= end)
    return 0;
  *tok = *p;
  while (*p < end && **p != ',')
    (*p)++;
  *len = (size_t)(*p - *tok);
  return 1;
}

static int parse_channel_list(const char *s, vt_bench_opts_t *o) {
  const char *p = s, *end = s + strlen(s), *tok;
  size_t len;
  o->n_channels = 0;
  while (next_token(&p, end, &tok, &len)) {
    /* vt_parse_long's rules on the token alone: the whole token, no
     * overflow, within range */
    char *stop = NULL;
    errno = 0;
    const long c = strtol(tok, &stop, 10);
    if (o->n_channels == VT_BENCH_MAX_CHANNEL_LIST || stop == tok ||
        stop != tok + len || errno || c < 1 || c > VT_BENCH_MAX_CHANNELS)
      return 0;
    o->channels[o->n_channels++] = c;
  }
  return o->n_channels > 0;
}

/* 1 if every name in an --algo value ("name", "[a,b]", "auto", "all") is
 * in the registry; otherwise lists the registry on err, naming the
 * command and option the value came from. Checked up front so that a typo
 * is a usage error, not a failure halfway through a run. */
int vt_bench_algo_check(FILE *err, const char *cmd, const char *option,
                        const char *spec) {
  const char *p = spec, *end = spec + strlen(spec), *tok;
  size_t len;
  const int in_list = end - p >= 2 && p[0] == '[' && end[-1] == ']';
  if (in_list) {
    p++;
    end--;
  }
  int ok = 1;
  while (next_token(&p, end, &tok, &len)) {
    while (len && *tok == ' ')
      tok++, len--;
    while (len && tok[len - 1] == ' ')
      len--;
    const int n = len > INT_MAX ? INT_MAX : (int)len; /* for %.*s */
    if ((len == 4 && strncasecmp(tok, "auto", 4) == 0) ||
        (len == 3 && strncasecmp(tok, "all", 3) == 0)) {
      if (in_list) {
        fprintf(err,
                "voxconv %s: %s: \"%.*s\" cannot be a list "
                "element\n",
                cmd, option, n, tok);
        ok = 0;
      }
      continue;
    }
    int found = 0;
    for (int i = 0; i < voxconv_algo_count() && !found; i++) {
      voxconv_algo_info_t ai;
      if (voxconv_algo_get_info(i, &ai) == VOXCONV_STATUS_SUCCESS && ai.name &&
          strlen(ai.name) == len && strncasecmp(ai.name, tok, len) == 0)
        found = 1;
    }
    if (!found) {
      fprintf(err, "voxconv %s: %s: unknown algorithm \"%.*s\"\n", cmd, option,
              n, tok);
      ok = 0;
    }
  }
  if (!ok) {
    fprintf(err, "known algorithms (voxconv info --algos):");
    for (int i = 0; i < voxconv_algo_count(); i++) {
      voxconv_algo_info_t ai;
      if (voxconv_algo_get_info(i, &ai) == VOXCONV_STATUS_SUCCESS)
        fprintf(err, " %s", ai.name);
    }
    fprintf(err, ", auto, all\n");
  }
  return ok;
}

int vt_bench_parse_options(const char *cmd, int argc, char **argv,
                           vt_bench_opts_t *o, FILE *out, FILE *err) {
  const parse_io_t io_ = {cmd, out, err}, *io = &io_;
  memset(o, 0, sizeof *o);
  o->backend = VOXCONV_BACKEND_AUTO;
  o->repeat = o->warmup = o->settle_ms = -1;
  o->fp16_accum = -1;
  o->seed = 1;
  int channels_set = 0, maps_set = 0, prio_set = 0, pass_idle_set = 0,
      preheat_set = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n;
    double d;
#define NEED_VALUE()                                                           \
  do {                                                                         \
    if (!v)                                                                    \
      return usage_error(io, "%s needs a value", a);                           \
    i++;                                                                       \
  } while (0)
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      vt_bench_usage(out);
      return VT_EXIT_OK;
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
      o->quiet = 1;
    } else if (strcmp(a, "--deterministic") == 0) {
      o->deterministic = 1;
    } else if (strcmp(a, "--backend") == 0) {
      NEED_VALUE();
      if (strcmp(v, "cpu") == 0)
        o->backend = VOXCONV_BACKEND_CPU;
      else if (strcmp(v, "cuda") == 0 || strcmp(v, "gpu") == 0)
        o->backend = VOXCONV_BACKEND_CUDA;
      else if (strcmp(v, "auto") == 0)
        o->backend = VOXCONV_BACKEND_AUTO;
      else
        return usage_error(io, "--backend %s: want cpu, cuda or auto", v);
    } else if (strcmp(a, "--device") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 0, 1024, &n))
        return usage_error(io, "--device %s: want a device ordinal", v);
      o->device = (int)n;
    } else if (strcmp(a, "--dtype") == 0) {
      NEED_VALUE();
      if (!parse_dtype(v, &o->dtype))
        return usage_error(io, "--dtype %s: want f32, f16, bf16, f64 or i8",
                           v);
      o->dtype_set = 1;
    } else if (strcmp(a, "--repeat") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 1, VT_BENCH_MAX_REPEAT, &n))
        return usage_error(io, "--repeat %s: want 1..%d", v,
                           VT_BENCH_MAX_REPEAT);
      o->repeat = (int)n;
    } else if (strcmp(a, "--warmup") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 0, VT_BENCH_MAX_REPEAT, &n))
        return usage_error(io, "--warmup %s: want 0..%d", v,
                           VT_BENCH_MAX_REPEAT);
      o->warmup = (int)n;
    } else if (strcmp(a, "--settle-ms") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 0, 60000, &n))
        return usage_error(io, "--settle-ms %s: want 0..60000", v);
      o->settle_ms = (int)n;
    } else if (strcmp(a, "--pass-idle-ms") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 0, 60000, &n))
        return usage_error(io, "--pass-idle-ms %s: want 0..60000", v);
      o->pass_idle_ms = (int)n;
      pass_idle_set = 1;
    } else if (strcmp(a, "--pass-preheat-ms") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 0, 60000, &n))
        return usage_error(io, "--pass-preheat-ms %s: want 0..60000", v);
      o->pass_preheat_ms = (int)n;
      preheat_set = 1;
    } else if (strcmp(a, "--algo") == 0) {
      NEED_VALUE();
      if (!vt_bench_algo_check(err, cmd, "--algo", v))
        return VT_EXIT_USAGE;
      o->algo = v;
    } else if (strcmp(a, "--threads") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 1, 256, &n))
        return usage_error(io, "--threads %s: want 1..256", v);
      o->threads = (int)n;
    } else if (strcmp(a, "--fp16-accum") == 0) {
      NEED_VALUE();
      if (strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
        o->fp16_accum = 1;
      else if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
        o->fp16_accum = 0;
      else
        return usage_error(io, "--fp16-accum %s: want on or off", v);
    } else if (strcmp(a, "--size") == 0) {
      NEED_VALUE();
      if (!vt_scene_size_from_name(v, &o->size))
        return usage_error(io, "--size %s: want tiny, small, medium or large",
                           v);
      o->size_set = 1;
    } else if (strcmp(a, "--scan") == 0) {
      NEED_VALUE();
      o->scan = v;
    } else if (strcmp(a, "--fields") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 3, 64, &n))
        return usage_error(io, "--fields %s: want 3..64 floats per point", v);
      o->fields = (int)n;
    } else if (strcmp(a, "--voxel") == 0) {
      NEED_VALUE();
      /* The library takes a float: 1e-46 would arrive as 0, and a
       * subnormal size loses its precision. */
      if (!vt_parse_double(v, &d) || !(d > 0 && d <= 1e4) ||
          !isnormal((float)d))
        return usage_error(io,
                           "--voxel %s: want a size in metres, a normal "
                           "float32 in [%g, 10000]",
                           v, (double)FLT_MIN);
      o->voxel = d;
    } else if (strcmp(a, "--workload") == 0) {
      NEED_VALUE();
      if (strlen(v) != 1 || !strchr("ABCDabcd", v[0]))
        return usage_error(io, "--workload %s: want A, B, C or D", v);
      o->workload = (char)(v[0] & ~0x20);
    } else if (strcmp(a, "--channels") == 0) {
      NEED_VALUE();
      if (!parse_channel_list(v, o))
        return usage_error(io,
                           "--channels %s: want up to %d comma-separated "
                           "counts in 1..4096",
                           v, VT_BENCH_MAX_CHANNEL_LIST);
      channels_set = 1;
    } else if (strcmp(a, "--peak-tflops") == 0) {
      NEED_VALUE();
      if (!vt_parse_double(v, &d) || d <= 0)
        return usage_error(io, "--peak-tflops %s: want a positive number", v);
      o->peak_tflops = d;
    } else if (strcmp(a, "--peak-tbps") == 0) {
      NEED_VALUE();
      if (!vt_parse_double(v, &d) || d <= 0)
        return usage_error(io, "--peak-tbps %s: want a positive number", v);
      o->peak_tbps = d;
    } else if (strcmp(a, "--seed") == 0) {
      NEED_VALUE();
      if (!vt_parse_long(v, 0, 2147483647L, &n))
        return usage_error(io, "--seed %s: want 0..2147483647", v);
      o->seed = (uint64_t)n;
    } else if (strcmp(a, "--maps") == 0) {
      NEED_VALUE();
      if (strcmp(v, "overlap") == 0)
        o->maps_serial = 0;
      else if (strcmp(v, "serial") == 0)
        o->maps_serial = 1;
      else
        return usage_error(io, "--maps %s: want overlap or serial", v);
      maps_set = 1;
    } else if (strcmp(a, "--map-priority") == 0) {
      NEED_VALUE();
      if (strcmp(v, "high") == 0)
        o->map_normal = 0;
      else if (strcmp(v, "normal") == 0)
        o->map_normal = 1;
      else
        return usage_error(io, "--map-priority %s: want high or normal", v);
      prio_set = 1;
    } else {
      return usage_error(io, "unknown option \"%s\"", a);
    }
#undef NEED_VALUE
  }
  if (o->scan && o->workload)
    return usage_error(io, "--scan and --workload are alternatives");
  if (o->size_set && (o->scan || o->workload))
    return usage_error(io, "--size selects the synthetic scene; it does not "
                           "combine with --scan or --workload");
  if (o->fields && !o->scan)
    return usage_error(io, "--fields applies to --scan");
  if (o->voxel > 0 && o->workload)
    return usage_error(io, "--workload %c fixes its voxel size (0.1 m)",
                       o->workload);
  if (maps_set && (o->workload == 'C' || o->workload == 'D'))
    return usage_error(io, "--maps applies to the network, not --workload %c",
                       o->workload);
  if (prio_set && (o->maps_serial || o->workload == 'C' || o->workload == 'D'))
    return usage_error(io, "--map-priority applies to the network's --maps "
                           "overlap");
  if (pass_idle_set && o->workload != 'C')
    return usage_error(io, "--pass-idle-ms applies to --workload C");
  if (preheat_set && o->workload != 'C')
    return usage_error(io, "--pass-preheat-ms applies to --workload C");
  if (channels_set && o->workload != 'C')
    return usage_error(io, "--channels applies to --workload C");
  /* int8 has no algorithm strings or accumulator choice: its tiles are the
   * int8 tuner's (VOXCONV_INT8_TILE forces one), its sums exact int32 */
  if (o->dtype_set && o->dtype == VOXCONV_DTYPE_I8 &&
      (o->algo || o->fp16_accum >= 0))
    return usage_error(io, "%s does not apply to --dtype i8 (the int8 tiles "
                           "are the int8 tuner's; VOXCONV_INT8_TILE forces "
                           "one)",
                       o->algo ? "--algo" : "--fp16-accum");
  if (!channels_set) {
    static const int64_t def[4] = {32, 64, 128, 256};
    o->n_channels = 4;
    memcpy(o->channels, def, sizeof def);
  }
  return VT_PARSED;
}

/* ---- cache inspect / analyze -------------------------------------------- */
void vt_cache_usage(FILE *f) {
  fprintf(f,
          "usage: voxconv cache COMMAND [options]\n"
          "  inspect [namespace=NAME] [--best-only] [--top-k K] [--file F] "
          "[SEARCH ...]\n"
          "      file location, size and time; the namespace tree with entry\n"
          "      counts; every configuration with its ranked candidates.\n"
          "      SEARCH words (all must match, case-insensitive) filter on\n"
          "      namespace, key and candidate names.\n"
          "  analyze [--namespace NAME] [--markdown] [--output FILE] "
          "[--file F]\n"
          "      win rates, top-3 rates, wins by channel pair, kernel volume\n"
          "      and problem size, runner-up margins, and the reduced\n"
          "      candidate sets that 'auto' uses.\n"
          "  clear      delete the cache file\n"
          "  path       print the cache file's path\n"
          "The file is $VOXCONV_BENCHMARK_CACHE_DIR/tuning-cache-v1.txt, by\n"
          "default ~/.cache/voxconv/ (--file reads another one).\n");
}

/* For an option that takes a value: 1 with *value set (and *i moved past
 * it), or 0 after saying the option needs one. */
static int option_value(FILE *err, const char *cmd, int argc, char **argv,
                        int *i, const char **value) {
  if (*i + 1 >= argc) {
    fprintf(err, "voxconv %s: %s needs a value\n", cmd, argv[*i]);
    return 0;
  }
  *value = argv[++*i];
  return 1;
}

int vt_cache_inspect_parse(int argc, char **argv, vt_cache_inspect_opts_t *o,
                           FILE *out, FILE *err) {
  memset(o, 0, sizeof *o);
  o->top_k = -1;
  int best_only = 0;
  o->terms = (char **)calloc((size_t)argc + 1, sizeof *o->terms);
  if (!o->terms) {
    fprintf(err, "voxconv cache inspect: out of memory\n");
    return VT_EXIT_FAIL;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = NULL;
    if (strncmp(a, "namespace=", 10) == 0) {
      o->want_ns = a + 10;
    } else if (strcmp(a, "--namespace") == 0 || strcmp(a, "--file") == 0 ||
               strcmp(a, "--top-k") == 0) {
      if (!option_value(err, "cache inspect", argc, argv, &i, &v))
        goto usage;
      if (a[2] == 'n')
        o->want_ns = v;
      else if (a[2] == 'f')
        o->file = v;
      else if (!vt_parse_long(v, 1, 1000000, &o->top_k)) {
        fprintf(err, "voxconv cache inspect: --top-k wants a count >= 1\n");
        goto usage;
      }
    } else if (strcmp(a, "--best-only") == 0) {
      best_only = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      free(o->terms);
      o->terms = NULL;
      vt_cache_usage(out);
      return VT_EXIT_OK;
    } else if (a[0] == '-' && a[1] == '-') {
      fprintf(err, "voxconv cache inspect: unknown option %s\n\n", a);
      vt_cache_usage(err);
      goto usage;
    } else {
      o->terms[o->n_terms++] = argv[i];
    }
  }
  if (best_only)
    o->top_k = 1;
  return VT_PARSED;
usage:
  free(o->terms);
  o->terms = NULL;
  o->n_terms = 0;
  return VT_EXIT_USAGE;
}

int vt_cache_analyze_parse(int argc, char **argv, vt_cache_analyze_opts_t *o,
                           FILE *out, FILE *err) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = NULL;
    if (strcmp(a, "--namespace") == 0 || strcmp(a, "--output") == 0 ||
        strcmp(a, "--file") == 0) {
      if (!option_value(err, "cache analyze", argc, argv, &i, &v))
        return VT_EXIT_USAGE;
      if (a[2] == 'n')
        o->want_ns = v;
      else if (a[2] == 'o')
        o->output = v;
      else
        o->file = v;
    } else if (strncmp(a, "namespace=", 10) == 0)
      o->want_ns = a + 10;
    else if (strcmp(a, "--markdown") == 0)
      o->markdown = 1;
    else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      vt_cache_usage(out);
      return VT_EXIT_OK;
    } else {
      fprintf(err, "voxconv cache analyze: unexpected argument %s\n\n", a);
      vt_cache_usage(err);
      return VT_EXIT_USAGE;
    }
  }
  return VT_PARSED;
}

/* ---- tune --------------------------------------------------------------- */
void vt_tune_usage(FILE *f) {
  fprintf(f,
          "usage: voxconv tune [--mode auto|all|NAME|[A,B]] [bench options]\n"
          "  Runs the bench network (workload A's layers; see `voxconv bench\n"
          "  --help` for --workload, --scan, --size, --dtype, --backend,\n"
          "  --channels, --fp16-accum, --deterministic, --threads) once,\n"
          "  forward and backward, with the given search space (default\n"
          "  auto), so that every layer's configuration is benchmarked and\n"
          "  recorded; then saves the cache and reports what it added.\n");
}

int vt_tune_parse(int argc, char **argv, const char **mode, char ***bench_argv,
                  int *bench_argc, FILE *out, FILE *err) {
  *mode = "auto";
  *bench_argv = NULL;
  *bench_argc = 0;
  /* bench argv: "tune" + forwarded options + ours */
  char **bargv = (char **)calloc((size_t)argc + 12, sizeof *bargv);
  if (!bargv) {
    fprintf(err, "voxconv tune: out of memory\n");
    return VT_EXIT_FAIL;
  }
  int bargc = 0;
  /* "tune" as argv[0]: bench's usage errors then name this command */
  bargv[bargc++] = (char *)"tune";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--mode") == 0 || strcmp(argv[i], "--algo") == 0) {
      const char *opt = argv[i];
      if (!option_value(err, "tune", argc, argv, &i, mode) ||
          !vt_bench_algo_check(err, "tune", opt, *mode)) {
        free(bargv);
        return VT_EXIT_USAGE;
      }
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      free(bargv);
      vt_tune_usage(out);
      return VT_EXIT_OK;
    } else if (strcmp(argv[i], "--repeat") == 0 ||
               strcmp(argv[i], "--warmup") == 0 ||
               strcmp(argv[i], "--json") == 0) {
      free(bargv);
      fprintf(err, "voxconv tune: %s is decided by tune itself\n", argv[i]);
      return VT_EXIT_USAGE;
    } else {
      bargv[bargc++] = argv[i];
    }
  }
  bargv[bargc++] = (char *)"--algo";
  bargv[bargc++] = (char *)*mode;
  bargv[bargc++] = (char *)"--repeat";
  bargv[bargc++] = (char *)"1";
  bargv[bargc++] = (char *)"--warmup";
  bargv[bargc++] = (char *)"0";
  bargv[bargc++] = (char *)"--quiet";
  *bench_argv = bargv;
  *bench_argc = bargc;
  return VT_PARSED;
}
