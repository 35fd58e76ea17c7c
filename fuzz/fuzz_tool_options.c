/* libFuzzer target for the voxconv tool's option parsing
 * (tools/tool_options.c): `bench`, `tune` (which forwards to bench) and
 * `cache inspect|analyze`. The first input byte picks the command, the
 * rest is its argument vector, arguments separated by NUL bytes; the
 * bytes 0x01 N C stand for the character C repeated 4 N times.
 *
 * Checks, whatever the arguments:
 *  - the parser returns "run", --help's 0 or the usage code 2, and writes
 *    accordingly: nothing when the command runs, the usage on `out` for
 *    --help, a message naming the command on `err` for a usage error;
 *  - it leaves argv as it was and keeps no state (a second parse of the
 *    same vector gives the same result, byte for byte);
 *  - what it accepted is what the arguments say: every field within its
 *    documented range, the cross-option rules held, --scan/--algo pointing
 *    at their argument, and the --channels list and --algo names equal to
 *    an independent reading of the value (no length limit, no buffer);
 *  - tune's vector for bench ends in the options tune forces, and bench
 *    accepts it with exactly those.
 * The library's algorithm registry is replaced by a fixed one here, so
 * the target needs no libvoxconv. Built with -fsanitize=fuzzer,address,
 * undefined by fuzz/CMakeLists.txt; replay.c runs it without libFuzzer. */
#include "../tools/tool_common.h"
#include "../tools/tool_options.h"
#include "fuzz_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* ---- a fixed algorithm registry in place of the library's ---------------- */
static const char *const k_algos[] = {"cpu_gather_gemm", "explicit_gemm_det",
                                      "mask_gemm", "implicit_gemm"};
#define N_ALGOS ((int)(sizeof k_algos / sizeof k_algos[0]))

int voxconv_algo_count(void) {
  return N_ALGOS;
}

voxconv_status_t voxconv_algo_get_info(int index, voxconv_algo_info_t *info) {
  if (index < 0 || index >= N_ALGOS || !info)
    return VOXCONV_STATUS_OUT_OF_RANGE;
  memset(info, 0, sizeof *info);
  info->name = k_algos[index];
  return VOXCONV_STATUS_SUCCESS;
}

/* ---- independent readings of list values ----------------------------------
 */

/* The next comma-separated token of [*p, end): empty tokens are skipped
 * (as the tool has always done), so ",1,,2," is the list 1, 2. */
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

/* --channels: 1..16 counts in 1..4096, each token a whole strtol number. */
static int ref_channels(const char *v, int64_t *out, int *n) {
  const char *p = v, *end = v + strlen(v), *tok;
  size_t len;
  *n = 0;
  while (next_token(&p, end, &tok, &len)) {
    char *num = strndup(tok, len);
    long c = 0;
    const int ok = num && vt_parse_long(num, 1, 4096, &c);
    free(num);
    if (!ok || *n == VT_BENCH_MAX_CHANNEL_LIST)
      return 0;
    out[(*n)++] = c;
  }
  return *n > 0;
}

/* --algo: "name", "[a,b]", "auto", "all"; names trimmed of spaces and
 * compared without case; auto/all not inside a list. */
static int ref_algo(const char *spec) {
  const char *p = spec, *end = spec + strlen(spec), *tok;
  size_t len;
  const int in_list = end - p >= 2 && p[0] == '[' && end[-1] == ']';
  if (in_list) {
    p++;
    end--;
  }
  while (next_token(&p, end, &tok, &len)) {
    while (len && *tok == ' ')
      tok++, len--;
    while (len && tok[len - 1] == ' ')
      len--;
    if ((len == 4 && strncasecmp(tok, "auto", 4) == 0) ||
        (len == 3 && strncasecmp(tok, "all", 3) == 0)) {
      if (in_list)
        return 0;
      continue;
    }
    int found = 0;
    for (int i = 0; i < N_ALGOS; i++)
      if (strlen(k_algos[i]) == len && strncasecmp(k_algos[i], tok, len) == 0)
        found = 1;
    if (!found)
      return 0;
  }
  return 1;
}

/* ---- captured output --------------------------------------------------- */
typedef struct capture {
  char *out_buf, *err_buf;
  size_t out_len, err_len;
  FILE *out, *err;
} capture_t;

static void capture_open(capture_t *c) {
  memset(c, 0, sizeof *c);
  c->out = open_memstream(&c->out_buf, &c->out_len);
  c->err = open_memstream(&c->err_buf, &c->err_len);
  FUZZ_CHECK(c->out && c->err, "open_memstream failed");
}

static void capture_close(capture_t *c) {
  fclose(c->out);
  fclose(c->err);
}

static void capture_free(capture_t *c) {
  free(c->out_buf);
  free(c->err_buf);
}

static int has_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
      return 1;
  return 0;
}

/* rc and what was written agree; `prefix` starts every error message. */
static void check_outcome(int rc, const capture_t *c, const char *prefix,
                          int may_fail, int argc, char **argv) {
  FUZZ_CHECK(rc == VT_PARSED || rc == VT_EXIT_OK || rc == VT_EXIT_USAGE ||
                 (may_fail && rc == VT_EXIT_FAIL),
             "return %d", rc);
  if (rc == VT_PARSED) {
    FUZZ_CHECK(c->out_len == 0 && c->err_len == 0,
               "parsed, yet wrote %zu + %zu bytes", c->out_len, c->err_len);
  } else if (rc == VT_EXIT_OK) {
    FUZZ_CHECK(c->out_len > 0 && c->err_len == 0, "--help wrote %zu + %zu",
               c->out_len, c->err_len);
    FUZZ_CHECK(strncmp(c->out_buf, "usage: voxconv ", 15) == 0,
               "--help printed \"%.40s\"", c->out_buf);
    FUZZ_CHECK(has_help(argc, argv), "exit 0 without --help");
  } else {
    FUZZ_CHECK(c->out_len == 0 && c->err_len > 0, "usage error wrote %zu + %zu",
               c->out_len, c->err_len);
    FUZZ_CHECK(strncmp(c->err_buf, prefix, strlen(prefix)) == 0,
               "message \"%.80s\" does not start with \"%s\"", c->err_buf,
               prefix);
  }
}

/* ---- bench ------------------------------------------------------------- */
static int bench_takes_value(const char *a) {
  static const char *const with_value[] = {
      "--backend",    "--device",    "--dtype",    "--repeat",
      "--warmup",     "--settle-ms", "--algo",     "--threads",
      "--fp16-accum", "--size",      "--scan",     "--fields",
      "--voxel",      "--workload",  "--channels", "--peak-tflops",
      "--peak-tbps",  "--seed",      "--maps",     "--map-priority"};
  for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
    if (strcmp(a, with_value[i]) == 0)
      return 1;
  return 0;
}

/* The accepted options against the arguments (rc == VT_PARSED). */
static void check_bench(const vt_bench_opts_t *o, int argc, char **argv) {
  FUZZ_CHECK(o->backend == VOXCONV_BACKEND_AUTO ||
                 o->backend == VOXCONV_BACKEND_CPU ||
                 o->backend == VOXCONV_BACKEND_CUDA,
             "backend %d", (int)o->backend);
  FUZZ_CHECK(o->device >= 0 && o->device <= 1024, "device %d", o->device);
  FUZZ_CHECK(o->threads >= 0 && o->threads <= 256, "threads %d", o->threads);
  FUZZ_CHECK(o->repeat == -1 ||
                 (o->repeat >= 1 && o->repeat <= VT_BENCH_MAX_REPEAT),
             "repeat %d", o->repeat);
  FUZZ_CHECK(o->warmup >= -1 && o->warmup <= VT_BENCH_MAX_REPEAT, "warmup %d",
             o->warmup);
  FUZZ_CHECK(o->settle_ms >= -1 && o->settle_ms <= 60000, "settle %d",
             o->settle_ms);
  FUZZ_CHECK(o->fp16_accum >= -1 && o->fp16_accum <= 1, "fp16 %d",
             o->fp16_accum);
  FUZZ_CHECK(o->fields == 0 || (o->fields >= 3 && o->fields <= 64 && o->scan),
             "fields %d", o->fields);
  FUZZ_CHECK(o->voxel == 0 || (o->voxel > 0 && o->voxel <= 1e4 &&
                               isnormal((float)o->voxel) && !o->workload),
             "voxel %g", o->voxel);
  FUZZ_CHECK(o->workload == 0 || (o->workload >= 'A' && o->workload <= 'D'),
             "workload %d", o->workload);
  FUZZ_CHECK(!(o->scan && o->workload) &&
                 !(o->size_set && (o->scan || o->workload)),
             "input choices combined");
  FUZZ_CHECK(o->n_channels >= 1 && o->n_channels <= VT_BENCH_MAX_CHANNEL_LIST,
             "%d channels", o->n_channels);
  for (int c = 0; c < o->n_channels; c++)
    FUZZ_CHECK(o->channels[c] >= 1 && o->channels[c] <= 4096, "channel %lld",
               (long long)o->channels[c]);
  FUZZ_CHECK(isfinite(o->peak_tflops) && o->peak_tflops >= 0 &&
                 isfinite(o->peak_tbps) && o->peak_tbps >= 0,
             "peaks %g %g", o->peak_tflops, o->peak_tbps);
  FUZZ_CHECK(o->seed <= 2147483647u, "seed %llu", (unsigned long long)o->seed);
  /* Walk the arguments as the parser must have: every --algo and
   * --channels value was checked, and the last --scan, --algo and
   * --channels values are the ones in effect. */
  const char *scan = NULL, *algo = NULL, *channels = NULL;
  for (int i = 1; i < argc; i++) {
    if (!bench_takes_value(argv[i]))
      continue;
    FUZZ_CHECK(i + 1 < argc, "%s accepted without a value", argv[i]);
    const char *v = argv[i + 1];
    int64_t want[VT_BENCH_MAX_CHANNEL_LIST];
    int n = 0;
    if (strcmp(argv[i], "--scan") == 0) {
      scan = v;
    } else if (strcmp(argv[i], "--algo") == 0) {
      FUZZ_CHECK(ref_algo(v), "--algo \"%s\" accepted", v);
      algo = v;
    } else if (strcmp(argv[i], "--channels") == 0) {
      FUZZ_CHECK(ref_channels(v, want, &n), "--channels \"%s\" accepted", v);
      channels = v;
    }
    i++;
  }
  FUZZ_CHECK(o->scan == scan, "scan %p, argument %p", (const void *)o->scan,
             (const void *)scan);
  FUZZ_CHECK(o->algo == algo, "algo %p, argument %p", (const void *)o->algo,
             (const void *)algo);
  if (channels) {
    int64_t want[VT_BENCH_MAX_CHANNEL_LIST];
    int n = 0;
    ref_channels(channels, want, &n);
    FUZZ_CHECK(n == o->n_channels &&
                   memcmp(want, o->channels, (size_t)n * sizeof want[0]) == 0,
               "--channels \"%s\": %d values parsed, %d read", channels,
               o->n_channels, n);
  }
}

/* A refused --channels or --algo value (the parser stops at the first
 * bad argument and names it) is one the independent reading refuses. */
static void check_bench_refusal(const capture_t *c, const char *cmd, int argc,
                                char **argv) {
  char head[64];
  snprintf(head, sizeof head, "voxconv %s: --algo: ", cmd);
  if (strncmp(c->err_buf, head, strlen(head)) == 0) {
    int refused = 0;
    for (int i = 1; i + 1 < argc; i++)
      if (bench_takes_value(argv[i]))
        refused |= strcmp(argv[i], "--algo") == 0 && !ref_algo(argv[++i]);
    FUZZ_CHECK(refused, "an --algo value refused: %.120s", c->err_buf);
  }
  for (int i = 1; i + 1 < argc; i++) {
    if (!bench_takes_value(argv[i]))
      continue;
    const char *v = argv[++i];
    if (strcmp(argv[i - 1], "--channels") != 0)
      continue;
    const size_t len = strlen(head) + strlen(v) + 64;
    char *want = (char *)malloc(len);
    FUZZ_CHECK(want != NULL, "out of memory");
    snprintf(want, len, "voxconv %s: --channels %s: want up to", cmd, v);
    const int named = strncmp(c->err_buf, want, strlen(want)) == 0;
    free(want);
    if (named) {
      int64_t got[VT_BENCH_MAX_CHANNEL_LIST];
      int n = 0;
      FUZZ_CHECK(!ref_channels(v, got, &n), "--channels \"%s\" refused", v);
      break;
    }
  }
}

static void fuzz_bench(const char *cmd, int argc, char **argv) {
  vt_bench_opts_t o1, o2;
  capture_t c1, c2;
  capture_open(&c1);
  const int rc = vt_bench_parse_options(cmd, argc, argv, &o1, c1.out, c1.err);
  capture_close(&c1);
  char prefix[32];
  snprintf(prefix, sizeof prefix, "voxconv %s: ", cmd);
  check_outcome(rc, &c1, prefix, 0, argc, argv);
  if (rc == VT_PARSED)
    check_bench(&o1, argc, argv);
  else if (rc == VT_EXIT_USAGE)
    check_bench_refusal(&c1, cmd, argc, argv);
  /* No hidden state: the same vector parses the same way again. */
  capture_open(&c2);
  const int rc2 = vt_bench_parse_options(cmd, argc, argv, &o2, c2.out, c2.err);
  capture_close(&c2);
  FUZZ_CHECK(rc2 == rc && c1.err_len == c2.err_len &&
                 memcmp(c1.err_buf, c2.err_buf, c1.err_len) == 0,
             "second parse differs (%d vs %d)", rc, rc2);
  if (rc == VT_PARSED)
    FUZZ_CHECK(memcmp(&o1, &o2, sizeof o1) == 0, "second parse differs");
  capture_free(&c1);
  capture_free(&c2);
}

/* ---- tune -------------------------------------------------------------- */
static void fuzz_tune(int argc, char **argv) {
  const char *mode = NULL;
  char **bargv = NULL;
  int bargc = 0;
  capture_t c;
  capture_open(&c);
  const int rc = vt_tune_parse(argc, argv, &mode, &bargv, &bargc, c.out, c.err);
  capture_close(&c);
  check_outcome(rc, &c, "voxconv tune: ", 1, argc, argv);
  capture_free(&c);
  if (rc != VT_PARSED) {
    FUZZ_CHECK(bargv == NULL, "bench argv left after %d", rc);
    return;
  }
  static const char *const forced[] = {"--algo",   NULL, "--repeat", "1",
                                       "--warmup", "0",  "--quiet"};
  FUZZ_CHECK(bargc >= 8 && bargc <= argc + 7, "bench argc %d of %d", bargc,
             argc);
  FUZZ_CHECK(strcmp(bargv[0], "tune") == 0, "argv[0] %s", bargv[0]);
  FUZZ_CHECK(ref_algo(mode), "mode \"%s\" accepted", mode);
  for (int k = 0; k < 7; k++) {
    const char *want = forced[k] ? forced[k] : mode;
    FUZZ_CHECK(strcmp(bargv[bargc - 7 + k], want) == 0, "bench arg %d: %s",
               bargc - 7 + k, bargv[bargc - 7 + k]);
  }
  /* What tune forwards, bench parses (or refuses) as tune; accepted,
   * it runs exactly once, untimed warm-up off, with the mode. */
  vt_bench_opts_t o;
  capture_t b;
  capture_open(&b);
  const int brc =
      vt_bench_parse_options("tune", bargc, bargv, &o, b.out, b.err);
  capture_close(&b);
  check_outcome(brc, &b, "voxconv tune: ", 0, bargc, bargv);
  FUZZ_CHECK(brc != VT_EXIT_OK, "tune's vector printed bench's --help");
  if (brc == VT_PARSED) {
    check_bench(&o, bargc, bargv);
    FUZZ_CHECK(o.repeat == 1 && o.warmup == 0 && o.quiet && !o.json &&
                   o.algo == bargv[bargc - 6],
               "tune ran bench with repeat %d warmup %d quiet %d json %d",
               o.repeat, o.warmup, o.quiet, o.json);
  }
  capture_free(&b);
  free(bargv);
}

/* ---- cache inspect / analyze ------------------------------------------- */
static int in_argv(const char *p, int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (p >= argv[i] && p <= argv[i] + strlen(argv[i]))
      return 1;
  return 0;
}

static void fuzz_inspect(int argc, char **argv) {
  vt_cache_inspect_opts_t o;
  capture_t c;
  capture_open(&c);
  const int rc = vt_cache_inspect_parse(argc, argv, &o, c.out, c.err);
  capture_close(&c);
  check_outcome(rc, &c, "voxconv cache inspect: ", 1, argc, argv);
  capture_free(&c);
  if (rc != VT_PARSED) {
    FUZZ_CHECK(o.terms == NULL, "terms left after %d", rc);
    return;
  }
  FUZZ_CHECK(o.top_k == -1 || (o.top_k >= 1 && o.top_k <= 1000000), "top_k %ld",
             o.top_k);
  FUZZ_CHECK(o.n_terms >= 0 && o.n_terms < argc, "%d terms", o.n_terms);
  for (int t = 0; t < o.n_terms; t++)
    FUZZ_CHECK(in_argv(o.terms[t], argc, argv) &&
                   strncmp(o.terms[t], "--", 2) != 0,
               "term %s", o.terms[t]);
  FUZZ_CHECK(!o.want_ns || in_argv(o.want_ns, argc, argv), "namespace");
  FUZZ_CHECK(!o.file || in_argv(o.file, argc, argv), "file");
  free(o.terms);
}

static void fuzz_analyze(int argc, char **argv) {
  vt_cache_analyze_opts_t o;
  capture_t c;
  capture_open(&c);
  const int rc = vt_cache_analyze_parse(argc, argv, &o, c.out, c.err);
  capture_close(&c);
  check_outcome(rc, &c, "voxconv cache analyze: ", 0, argc, argv);
  capture_free(&c);
  if (rc != VT_PARSED)
    return;
  FUZZ_CHECK(o.markdown == 0 || o.markdown == 1, "markdown %d", o.markdown);
  FUZZ_CHECK(!o.want_ns || in_argv(o.want_ns, argc, argv), "namespace");
  FUZZ_CHECK(!o.file || in_argv(o.file, argc, argv), "file");
  FUZZ_CHECK(!o.output || in_argv(o.output, argc, argv), "output");
}

/* ---- entry ------------------------------------------------------------- */
#define MAX_ARGS 128
#define MAX_EXPANDED (1 << 16)

/* Copies [in, in + n) to out, expanding each run escape 0x01 COUNT CHAR
 * into CHAR repeated 4 * COUNT times (up to 1020). Length-dependent bugs
 * (a value cut to a fixed buffer) need arguments of hundreds of bytes of
 * one shape, which byte mutations rarely build; with the escape a few
 * bytes do (the --channels and --algo cuts were out of reach of 17 M runs
 * without it). Returns the length written, at most MAX_EXPANDED. */
static size_t expand_runs(const unsigned char *in, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n && o < MAX_EXPANDED; i++) {
    if (in[i] == 0x01 && i + 2 < n) {
      for (size_t r = 4u * in [i + 1]; r && o < MAX_EXPANDED; r--)
        out[o++] = (char)in[i + 2];
      i += 2;
      continue;
    }
    out[o++] = (char)in[i];
  }
  return o;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  static const char *const commands[4] = {"bench", "tune", "inspect",
                                          "analyze"};
  if (size < 1)
    return 0;
  const int which = data[0] & 3;
  /* Arguments are NUL-separated, run escapes expanded; a copy, so each is
   * a C string and the parsers' pointers into argv can be checked. */
  char *buf = (char *)malloc(MAX_EXPANDED + 1);
  FUZZ_CHECK(buf != NULL, "out of memory");
  const size_t len = expand_runs(data + 1, size - 1, buf);
  buf[len] = '\0';
  char *argv[MAX_ARGS + 1];
  int argc = 0;
  argv[argc++] = (char *)commands[which];
  for (size_t i = 0; i < len && argc < MAX_ARGS;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  /* The parsers must leave argv (pointers and strings) as it was. */
  const size_t size_buf = len + 1;
  char *saved = (char *)malloc(size_buf);
  FUZZ_CHECK(saved != NULL, "out of memory");
  memcpy(saved, buf, size_buf);
  char *argv_saved[MAX_ARGS + 1];
  memcpy(argv_saved, argv, sizeof argv);
  switch (which) {
  case 0:
    fuzz_bench("bench", argc, argv);
    break;
  case 1:
    fuzz_tune(argc, argv);
    break;
  case 2:
    fuzz_inspect(argc, argv);
    break;
  default:
    fuzz_analyze(argc, argv);
  }
  FUZZ_CHECK(memcmp(saved, buf, size_buf) == 0 &&
                 memcmp(argv_saved, argv, sizeof argv) == 0,
             "the parser changed argv");
  free(saved);
  free(buf);
  return 0;
}
