/* The cache tools as users run them: the built `voxconv` binary (next to
 * this test's folder) on a cache this test writes with known contents:
 * `cache path`, `cache inspect` (tree, counts, ranked lists, namespace and
 * free-text filters, --best-only, --top-k), `cache analyze` (win rates,
 * top-3 rates, groups, margins, recommended sets; text, markdown, --output),
 * `cache clear`, usage errors, and `voxconv tune` on the tiny scene. */
#include "tune_test_util.h"

#include <libgen.h>
#include <signal.h>
#include <sys/wait.h>

static char g_tool[4096];
static char g_out[300], g_err[300];

/* Runs the tool with arguments (shell-quoted by the caller); returns the
 * exit code and leaves stdout in *out (malloc'd). */
static int run_tool(const char *args, char **out) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", g_tool, args, g_out, g_err);
  fflush(stdout);
  fflush(stderr);
  const int status = system(cmd);
  size_t n = 0;
  char *raw = (char *)vc_read_file(g_out, &n);
  *out = (char *)calloc(n + 1, 1);
  if (raw && n)
    memcpy(*out, raw, n);
  free(raw);
  if (!WIFEXITED(status))
    return -1;
  const int rc = WEXITSTATUS(status);
  if (rc != 0) {
    char *err = (char *)vc_read_file(g_err, &n);
    if (err) {
      fprintf(stderr, "[%s] stderr: %.*s\n", args, (int)n, err);
      free(err);
    }
  }
  return rc;
}

static void put(const char *ns, int64_t cin, int64_t cout, int nin,
                unsigned coverage, const char *const *algos, const double *ms,
                int n) {
  vc_cache_entry_t e;
  memset(&e, 0, sizeof e);
  snprintf(e.ns, sizeof e.ns, "%s", ns);
  snprintf(e.key.device, sizeof e.key.device, "cuda:Test GPU:cc9.0");
  snprintf(e.key.lib, sizeof e.key.lib, "%s", VOXCONV_VERSION_STRING);
  e.key.nin = e.key.nout = nin;
  e.key.cin = cin;
  e.key.cout = cout;
  e.key.kvol = 27;
  e.key.dtype = VOXCONV_DTYPE_F16;
  e.key.stride[0] = e.key.stride[1] = e.key.stride[2] = 1;
  e.coverage = coverage;
  for (int i = 0; i < n; i++) {
    vc_cache_row_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.algo, sizeof r.algo, "%s", algos[i]);
    snprintf(r.params, sizeof r.params, "tile=%d", i);
    r.time_ms = ms[i];
    snprintf(r.status, sizeof r.status, "%s", ms[i] < 0 ? "wrong" : "ok");
    r.max_rel = ms[i] < 0 ? 0.5 : 1e-4;
    vc_cache_entry_put_row(&e, &r);
  }
  vc_cache_put(&e);
  vc_cache_entry_free(&e);
}

/* Three forward configurations (B wins twice, A once), one dgrad, and a
 * parameter-tuning entry for mask_gemm. */
static void write_known_cache(void) {
  const char *const abc[] = {"algo_b", "algo_a", "algo_c"};
  const double t1[] = {1.0, 1.02, 3.0};
  put("sparse_conv_forward", 64, 64, 17, VC_COVER_ALL, abc, t1, 3);
  const char *const ba[] = {"algo_b", "algo_a"};
  const double t2[] = {2.0, 2.5};
  put("sparse_conv_forward", 48, 64, 17, VC_COVER_ALL, ba, t2, 2);
  const char *const acw[] = {"algo_a", "algo_c", "algo_w"};
  const double t3[] = {0.5, 0.9, -1};
  put("sparse_conv_forward", 64, 40, 15, VC_COVER_ALL, acw, t3, 3);
  const char *const d[] = {"algo_d"};
  const double t4[] = {4.0};
  put("sparse_conv_dgrad", 96, 96, 12, VC_COVER_AUTO, d, t4, 1);
  const char *const mg[] = {"mask_gemm", "mask_gemm"};
  const double t5[] = {0.3, 0.4};
  put("sparse_conv_forward/mask_gemm", 64, 64, 17, VC_COVER_FULL, mg, t5, 2);
  if (voxconv_cache_flush() != VOXCONV_STATUS_SUCCESS)
    VC_EXPECT(0, "flush: %s", voxconv_get_last_error(NULL));
}

static int contains(const char *hay, const char *needle, const char *what) {
  const int ok = strstr(hay, needle) != NULL;
  VC_EXPECT(ok, "%s: output lacks \"%s\":\n%s", what, needle, hay);
  return ok;
}

static int lacks(const char *hay, const char *needle, const char *what) {
  const int ok = strstr(hay, needle) == NULL;
  VC_EXPECT(ok, "%s: output must not contain \"%s\":\n%s", what, needle, hay);
  return ok;
}

static void test_inspect(void) {
  char *out = NULL;
  VC_EXPECT(run_tool("cache path", &out) == 0, "cache path");
  char want[600];
  snprintf(want, sizeof want, "%s\n", tt_cache_file());
  VC_EXPECT(strcmp(out, want) == 0, "path: %s", out);
  free(out);

  VC_EXPECT(run_tool("cache inspect", &out) == 0, "inspect");
  snprintf(want, sizeof want, "cache file : %s", tt_cache_file());
  contains(out, want, "inspect");
  struct stat st;
  stat(tt_cache_file(), &st);
  snprintf(want, sizeof want, "size       : %lld bytes", (long long)st.st_size);
  contains(out, want, "inspect");
  contains(out, "modified   : ", "inspect");
  contains(out, "entries    : 5", "inspect");
  /* the tree: selection namespaces and their parameter-tuning children */
  snprintf(want, sizeof want, "  %-40s %6d entries", "sparse_conv_forward", 3);
  contains(out, want, "tree");
  snprintf(want, sizeof want, "    %-38s %6d entry", "mask_gemm", 1);
  contains(out, want, "tree");
  snprintf(want, sizeof want, "  %-40s %6d entry", "sparse_conv_dgrad", 1);
  contains(out, want, "tree");
  /* ranked lists */
  contains(out, "[sparse_conv_forward] searched=all", "inspect");
  contains(out, "cin=48 cout=64", "inspect");
  contains(out, "    1. algo_b ", "inspect");
  contains(out, "    3. algo_w ", "inspect");
  contains(out, "wrong", "inspect");
  contains(out, "5 of 5 entries shown", "inspect");
  free(out);

  VC_EXPECT(run_tool("cache inspect namespace=sparse_conv_dgrad", &out) == 0,
            "inspect namespace=");
  contains(out, "[sparse_conv_dgrad]", "namespace filter");
  lacks(out, "[sparse_conv_forward]", "namespace filter");
  contains(out, "1 of 5 entries shown", "namespace filter");
  free(out);
  VC_EXPECT(run_tool("cache inspect namespace=sparse_conv_forward", &out) == 0,
            "inspect namespace= with children");
  contains(out, "[sparse_conv_forward/mask_gemm]", "namespace children");
  contains(out, "4 of 5 entries shown", "namespace children");
  free(out);

  VC_EXPECT(run_tool("cache inspect --best-only", &out) == 0, "best-only");
  contains(out, "    1. algo_b ", "best-only");
  lacks(out, "    2. ", "best-only");
  contains(out, "... 2 more", "best-only");
  free(out);

  VC_EXPECT(run_tool("cache inspect --top-k 2 CIN=48 algo_a", &out) == 0,
            "top-k + search");
  contains(out, "cin=48 cout=64", "search");
  contains(out, "    2. algo_a ", "search");
  lacks(out, "cin=64 cout=40", "search");
  contains(out, "1 of 5 entries shown", "search");
  free(out);
  VC_EXPECT(run_tool("cache inspect nothing-matches-this", &out) == 0,
            "search without hits");
  contains(out, "0 of 5 entries shown", "no hits");
  free(out);

  VC_EXPECT(run_tool("cache inspect --top-k 0", &out) == 2, "--top-k 0");
  free(out);
  VC_EXPECT(run_tool("cache inspect --bogus", &out) == 2, "unknown option");
  free(out);
  VC_EXPECT(run_tool("cache frobnicate", &out) == 2, "unknown command");
  free(out);
  VC_EXPECT(run_tool("cache", &out) == 2, "no command");
  free(out);
}

static void test_analyze(void) {
  char *out = NULL;
  VC_EXPECT(run_tool("cache analyze", &out) == 0, "analyze");
  contains(out, "== sparse_conv_forward: 3 configurations", "analyze");
  contains(out, "== sparse_conv_dgrad: 1 configurations", "analyze");
  lacks(out, "== sparse_conv_forward/mask_gemm", "analyze");
  /* algorithm level: algo_b wins 2 of 3, algo_a 1; algo_a is in every
   * configuration's top 3, algo_c in 2 */
  char want[600];
  snprintf(want, sizeof want, "  %-52s %8s %8s %8s", "algo_b", "2", "66.7",
           "66.7");
  contains(out, want, "win rates");
  snprintf(want, sizeof want, "  %-52s %8s %8s %8s", "algo_a", "1", "33.3",
           "100.0");
  contains(out, want, "win rates");
  /* candidates: (algo_a, tile=1) is a different candidate from tile=0 */
  snprintf(want, sizeof want, "  %-52s %8s %8s %8s", "algo_a tile=1", "0",
           "0.0", "66.7");
  contains(out, want, "candidate win rates");
  contains(out, "-- wins by channel pair (cin -> cout)", "groups");
  snprintf(want, sizeof want, "  %-18s %-48s %6d", "48 -> 64", "algo_b tile=0",
           1);
  contains(out, want, "channel groups");
  snprintf(want, sizeof want, "  %-18s %-48s %6d", "kvol 27", "algo_b tile=0",
           2);
  contains(out, want, "kernel groups");
  snprintf(want, sizeof want, "  %-18s %-48s %6d", "n_out <= 2^15",
           "algo_a tile=0", 1);
  contains(out, want, "size groups");
  /* margins: 2% (E1), 25% (E2), 80% (E3) */
  snprintf(want, sizeof want, "  %-8s %6d", "1-5%", 1);
  contains(out, want, "margins");
  snprintf(want, sizeof want, "  %-8s %6d", ">= 25%", 2);
  contains(out, want, "margins");
  contains(out, "median margin 25.0%", "margins");
  /* recommended sets: fwd cin<=64 cout<=64 has 3 searches; B covers E1
   * (1.02 <= 1.05) and E2, A covers E1 and E3: B first (mean 1.0 vs
   * A's 1.2) */
  contains(out,
           "cin<=64 cout<=64:\n    algo_b tile=0 (x1.000), algo_a tile=0 "
           "(x1.000)\n",
           "recommended");
  contains(out, "(fewer than 2 'all' searches recorded", "recommended");
  free(out);

  VC_EXPECT(run_tool("cache analyze --namespace sparse_conv_dgrad", &out) == 0,
            "analyze --namespace");
  contains(out, "== sparse_conv_dgrad: 1 configurations", "namespace");
  lacks(out, "== sparse_conv_forward", "namespace");
  contains(out, "no configuration has a runner-up", "namespace");
  free(out);

  char md_path[400], args[600];
  snprintf(md_path, sizeof md_path, "%s/analysis.md", tt_dir);
  snprintf(args, sizeof args, "cache analyze --markdown --output '%s'",
           md_path);
  VC_EXPECT(run_tool(args, &out) == 0, "analyze --markdown --output");
  contains(out, "written to", "--output");
  free(out);
  size_t n = 0;
  char *md = (char *)vc_read_file(md_path, &n);
  char *text = (char *)calloc(n + 1, 1);
  if (md && n)
    memcpy(text, md, n);
  free(md);
  VC_EXPECT(strncmp(text, "# voxconv tuning cache analysis", 31) == 0,
            "markdown title");
  contains(text, "## sparse_conv_forward: 3 configurations", "markdown");
  contains(text, "| algorithm | wins | win % | top-3 % |", "markdown");
  contains(text, "| algo_b | 2 | 66.7 | 66.7 |", "markdown");
  contains(text, "| 48 -> 64 | algo_b tile=0 | 1 |", "markdown");
  contains(text, "| margin | configs |", "markdown");
  contains(text, "* `cuda:Test GPU:cc9.0", "markdown");
  free(text);
  VC_EXPECT(run_tool("cache analyze --output", &out) == 2,
            "--output without a file");
  free(out);
}

static void test_clear(void) {
  char *out = NULL;
  char want[600];
  VC_EXPECT(run_tool("cache clear", &out) == 0, "clear");
  snprintf(want, sizeof want, "removed %s", tt_cache_file());
  contains(out, want, "clear");
  free(out);
  struct stat st;
  VC_EXPECT(stat(tt_cache_file(), &st) != 0, "file still there");
  VC_EXPECT(run_tool("cache clear", &out) == 0, "clear again");
  contains(out, "nothing to remove", "clear again");
  free(out);
  VC_EXPECT(run_tool("cache inspect", &out) == 0, "inspect without a file");
  contains(out, "(no file yet)", "no file");
  contains(out, "entries    : 0", "no file");
  free(out);
  VC_EXPECT(run_tool("cache analyze", &out) == 0, "analyze without a file");
  contains(out, "no benchmarked configurations", "no file");
  free(out);
}

static int g_first_tune_new = -1; /* "(N new" of the first tune run */

static void test_tune(void) {
  char *out = NULL;
  /* Two candidates per layer, one timed run each, so the tiny network is
   * tuned in seconds even under sanitizers. */
  setenv("VOXCONV_AUTOTUNE_MAX_CANDIDATES", "2", 1);
  setenv("VOXCONV_AUTOTUNE_RUNS", "1", 1);
  setenv("VOXCONV_AUTOTUNE_WARMUP", "0", 1);
  VC_EXPECT(run_tool("tune --size tiny --backend cpu --threads 2", &out) == 0,
            "tune");
  contains(out, "tuned the network (search space auto)", "tune");
  contains(out, "entries (", "tune");
  const char *p = strstr(out, "entries (");
  const int fresh = p ? atoi(p + 9) : 0;
  g_first_tune_new = fresh;
  VC_EXPECT(fresh >= 3 * 7,
            "tune added %d entries (every conv layer's "
            "forward, dgrad and wgrad)",
            fresh);
  free(out);
  /* A second run adds nothing: every configuration is recorded. */
  VC_EXPECT(run_tool("tune --size tiny --backend cpu --threads 2", &out) == 0,
            "tune again");
  contains(out, "(0 new:", "tune again");
  free(out);
  VC_EXPECT(run_tool("cache inspect --best-only cpu_gather_gemm", &out) == 0,
            "inspect after tune");
  contains(out, "[sparse_conv_wgrad] searched=auto", "inspect after tune");
  free(out);
  VC_EXPECT(run_tool("tune --repeat 3", &out) == 2, "tune --repeat refused");
  free(out);
  unsetenv("VOXCONV_AUTOTUNE_MAX_CANDIDATES");
  unsetenv("VOXCONV_AUTOTUNE_RUNS");
  unsetenv("VOXCONV_AUTOTUNE_WARMUP");
}

/* Issue 22 item 8: `tune` counted every entry that appeared in the file
 * while it ran, other processes' included. Another process writes entries
 * (of another GPU) the whole time; tune must still report exactly what it
 * tuned, the same count as alone on an empty cache. */
static void test_tune_counts_only_its_own(void) {
  tt_fresh_cache_dir();
  snprintf(g_out, sizeof g_out, "%s/stdout.txt", tt_dir);
  snprintf(g_err, sizeof g_err, "%s/stderr.txt", tt_dir);
  setenv("VOXCONV_AUTOTUNE_MAX_CANDIDATES", "2", 1);
  setenv("VOXCONV_AUTOTUNE_RUNS", "1", 1);
  setenv("VOXCONV_AUTOTUNE_WARMUP", "0", 1);
  fflush(stdout);
  fflush(stderr);
  const pid_t writer = fork();
  if (writer == 0) {
    vc_cache_forget();
    const char *const other[] = {"other_algo"};
    const double ms[] = {1.0};
    for (int i = 0;; i++) {
      put("sparse_conv_forward", 1000 + i, 16, 10, VC_COVER_AUTO, other, ms, 1);
      usleep(5000);
    }
  }
  char *out = NULL;
  const int rc = run_tool("tune --size tiny --backend cpu --threads 2", &out);
  kill(writer, SIGKILL);
  waitpid(writer, NULL, 0);
  VC_EXPECT(rc == 0, "tune beside another writer");
  const char *p = strstr(out, "entries (");
  const int fresh = p ? atoi(p + 9) : -1;
  VC_EXPECT(fresh == g_first_tune_new,
            "tune reported %d new entries beside another writer, %d alone:\n%s",
            fresh, g_first_tune_new, out);
  free(out);
  voxconv_cache_t *c = NULL;
  int others = 0;
  if (voxconv_cache_open(NULL, &c) == VOXCONV_STATUS_SUCCESS) {
    for (int i = 0; i < voxconv_cache_entry_count(c); i++) {
      voxconv_cache_entry_info_t e;
      if (voxconv_cache_get_entry(c, i, &e) == VOXCONV_STATUS_SUCCESS &&
          e.cin >= 1000)
        others++;
    }
    voxconv_cache_close(c);
  }
  VC_EXPECT(others > 0, "the other writer wrote nothing: the test proves "
                        "nothing");
  unsetenv("VOXCONV_AUTOTUNE_MAX_CANDIDATES");
  unsetenv("VOXCONV_AUTOTUNE_RUNS");
  unsetenv("VOXCONV_AUTOTUNE_WARMUP");
}

int main(void) {
  vc_test_init("test_tune_tools");
  setenv("VOXCONV_AUTOTUNE_LOG", "0", 1);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "cannot find this test's own path\n");
    return 1;
  }
  self[n] = '\0';
  snprintf(g_tool, sizeof g_tool, "%s/../voxconv", dirname(self));
  if (access(g_tool, X_OK) != 0) {
    fprintf(stderr, "FAIL: the voxconv tool is not built at %s\n", g_tool);
    return 1;
  }
  tt_fresh_cache_dir();
  snprintf(g_out, sizeof g_out, "%s/stdout.txt", tt_dir);
  snprintf(g_err, sizeof g_err, "%s/stderr.txt", tt_dir);
  write_known_cache();
  test_inspect();
  test_analyze();
  test_clear();
  test_tune();
  test_tune_counts_only_its_own();
  tt_cleanup();
  return vc_test_finish();
}
