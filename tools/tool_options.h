/* Command-line option parsing of `voxconv bench`, `tune` and `cache
 * inspect|analyze`, apart from the commands themselves: each parser only
 * fills a struct and writes its messages (usage errors, --help) to the
 * streams it is given; it opens no file, creates no handle and keeps no
 * state, so fuzz/fuzz_tool_options.c can run it on arbitrary argument
 * vectors. The only library calls are voxconv_algo_count/get_info (the
 * registry an --algo value is checked against).
 *
 * Every parser returns VT_PARSED (-1) when the command should run, or the
 * process exit code to return at once: VT_EXIT_OK after --help (usage on
 * `out`), VT_EXIT_USAGE after a message on `err`. */
#ifndef VOXCONV_TOOL_OPTIONS_H
#define VOXCONV_TOOL_OPTIONS_H

#include "synth_scene.h"
#include "voxconv.h"

#include <stdint.h>
#include <stdio.h>

#define VT_PARSED (-1)

#define VT_BENCH_MAX_REPEAT 100000
#define VT_BENCH_MAX_CHANNEL_LIST 16
#define VT_BENCH_MAX_CHANNELS 4096

typedef struct vt_bench_opts {
  voxconv_backend_t backend;
  int device;
  int threads;
  int dtype_set;
  voxconv_dtype_t dtype;
  int repeat, warmup; /* -1 = backend default */
  const char *algo;   /* points into argv */
  int deterministic;
  int fp16_accum; /* -1 unset, 0 off, 1 on */
  int size_set;
  vt_scene_size_t size;
  const char *scan; /* points into argv */
  int fields;
  double voxel;  /* 0 = default */
  char workload; /* 0 = the network on the chosen input; 'A'..'D' */
  int64_t channels[VT_BENCH_MAX_CHANNEL_LIST];
  int n_channels;
  int json, quiet;
  double peak_tflops, peak_tbps; /* 0 = defaults by dtype */
  uint64_t seed;
  int maps_serial; /* --maps serial: maps on the convolutions' stream */
  int map_normal;  /* --map-priority normal: the map stream not raised */
  int settle_ms;   /* -1 = default: rest after a warm-up that tuned */
  int pass_idle_ms; /* workload C: idle before each pass's warm-up (0) */
  int pass_preheat_ms; /* workload C: untimed runs after the warm-up (0) */
} vt_bench_opts_t;

/* `voxconv bench` (cmd "bench") or the options tune hands to bench (cmd
 * "tune"; messages then name tune). argv[0] is the command. */
int vt_bench_parse_options(const char *cmd, int argc, char **argv,
                           vt_bench_opts_t *o, FILE *out, FILE *err);
void vt_bench_usage(FILE *out);
/* 1 if every algorithm an --algo value names ("name", "[a,b]", "auto",
 * "all") is registered; otherwise 0 after saying on `err` which is not, as
 * "voxconv CMD: OPTION: ...", and listing the registry. */
int vt_bench_algo_check(FILE *err, const char *cmd, const char *option,
                        const char *spec);

typedef struct vt_cache_inspect_opts {
  const char *want_ns, *file; /* point into argv; NULL = all / default */
  long top_k;                 /* -1 = every candidate */
  char **terms;               /* SEARCH words (into argv); free() it */
  int n_terms;
} vt_cache_inspect_opts_t;

typedef struct vt_cache_analyze_opts {
  const char *want_ns, *output, *file; /* point into argv, or NULL */
  int markdown;
} vt_cache_analyze_opts_t;

/* argv[0] is "inspect" / "analyze". On VT_PARSED, o->terms must be
 * freed; on any other return nothing is left to free. */
int vt_cache_inspect_parse(int argc, char **argv, vt_cache_inspect_opts_t *o,
                           FILE *out, FILE *err);
int vt_cache_analyze_parse(int argc, char **argv, vt_cache_analyze_opts_t *o,
                           FILE *out, FILE *err);
void vt_cache_usage(FILE *out);

/* `voxconv tune`: argv[0] is "tune". On VT_PARSED, *mode is the search
 * space and *bench_argv (free() it; its strings point into argv or are
 * literals) the argument vector handed to bench: "tune", the options
 * tune does not take itself, then --algo MODE --repeat 1 --warmup 0
 * --quiet. VT_EXIT_FAIL: out of memory (said on err). */
int vt_tune_parse(int argc, char **argv, const char **mode, char ***bench_argv,
                  int *bench_argc, FILE *out, FILE *err);
void vt_tune_usage(FILE *out);

#endif
