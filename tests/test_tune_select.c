/* Algorithm selection and fp16-accumulator resolution: every accepted form
 * of an algorithm string and every malformed one, where each pass takes its
 * string from (per-call fields, environment variables, default), skipped
 * algorithms and their warnings, and the whole fp16-accumulator precedence
 * table (per-call x global (env / API) x inference x dtype x pass), checked
 * through the pure resolver, through real calls (voxconv_get_last_call_info)
 * and, for the environment's initial value, in fresh processes. */
#include "tune_test_util.h"

#include <sys/wait.h>

static const char *pass_name(voxconv_pass_t p) {
  return vc_cache_pass_namespace((int)p);
}

/* ---- grammar ------------------------------------------------------------- */
typedef struct form {
  const char *text;
  voxconv_pass_t pass;
  vc_sel_mode_t mode;
  const char *algos[3]; /* expected list, NULL-terminated */
} form_t;

static void test_grammar(void) {
  static const int fakes[] = {TT_TILES, TT_FAST2, TT_GPU, TT_DWE, TT_DWI, -1};
  tt_use_fakes(fakes);
  const voxconv_pass_t F = VOXCONV_PASS_CONV_FWD;
  const voxconv_pass_t DW = VOXCONV_PASS_DEPTHWISE_FWD;
  const form_t ok[] = {
      {NULL, F, VC_SEL_AUTO, {NULL}},
      {"", F, VC_SEL_AUTO, {NULL}},
      {"   \t", F, VC_SEL_AUTO, {NULL}},
      {"auto", F, VC_SEL_AUTO, {NULL}},
      {" AUTO ", F, VC_SEL_AUTO, {NULL}},
      {"Auto", VOXCONV_PASS_CONV_WGRAD, VC_SEL_AUTO, {NULL}},
      {"all", F, VC_SEL_ALL, {NULL}},
      {"\tALL ", VOXCONV_PASS_CONV_DGRAD, VC_SEL_ALL, {NULL}},
      {"cpu_gather_gemm", F, VC_SEL_LIST, {"cpu_gather_gemm"}},
      {"  CPU_Gather_GEMM ", F, VC_SEL_LIST, {"cpu_gather_gemm"}},
      {"[cpu_gather_gemm]", F, VC_SEL_LIST, {"cpu_gather_gemm"}},
      {" [ fake_tiles , cpu_gather_gemm ] ",
       F,
       VC_SEL_LIST,
       {"fake_tiles", "cpu_gather_gemm"}},
      {"[fake_tiles,fake_tiles]", F, VC_SEL_LIST, {"fake_tiles"}},
      {"[FAKE_TILES,\tfake_fast2]",
       VOXCONV_PASS_CONV_WGRAD,
       VC_SEL_LIST,
       {"fake_tiles", "fake_fast2"}},
      {"fake_gpu", F, VC_SEL_LIST, {"fake_gpu"}},
      {"explicit", DW, VC_SEL_LIST, {"depthwise_explicit"}},
      {"IMPLICIT",
       VOXCONV_PASS_DEPTHWISE_WGRAD,
       VC_SEL_LIST,
       {"depthwise_implicit"}},
      {"[explicit, implicit]",
       DW,
       VC_SEL_LIST,
       {"depthwise_explicit", "depthwise_implicit"}},
      {"depthwise_implicit",
       VOXCONV_PASS_DEPTHWISE_DGRAD,
       VC_SEL_LIST,
       {"depthwise_implicit"}},
      {"[cpu_depthwise, explicit]",
       DW,
       VC_SEL_LIST,
       {"cpu_depthwise", "depthwise_explicit"}},
      {"all", DW, VC_SEL_ALL, {NULL}},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    vc_algo_selection_t sel;
    voxconv_status_t st =
        vc_parse_algo_mode(NULL, ok[i].text, ok[i].pass, "test", &sel);
    VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "'%s' (%s) rejected: %s",
              ok[i].text ? ok[i].text : "(null)", pass_name(ok[i].pass),
              voxconv_get_last_error(NULL));
    if (st != VOXCONV_STATUS_SUCCESS)
      continue;
    VC_EXPECT(sel.mode == ok[i].mode, "'%s': mode %d want %d", ok[i].text,
              (int)sel.mode, (int)ok[i].mode);
    int n = 0;
    while (n < 3 && ok[i].algos[n])
      n++;
    VC_EXPECT(sel.n == (ok[i].mode == VC_SEL_LIST ? n : 0),
              "'%s': %d algorithms, want %d", ok[i].text, sel.n, n);
    for (int k = 0; k < n && k < sel.n; k++)
      VC_EXPECT(strcmp(sel.algos[k]->info.name, ok[i].algos[k]) == 0,
                "'%s': algorithm %d is %s, want %s", ok[i].text, k,
                sel.algos[k]->info.name, ok[i].algos[k]);
  }

  typedef struct bad {
    const char *text;
    voxconv_pass_t pass;
    const char *says; /* part of the message */
  } bad_t;
  char long_name[120];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  const bad_t bad[] = {
      {"[cpu_gather_gemm", F, "closing"},
      {"cpu_gather_gemm]", F, "']'"},
      {"[]", F, "empty list"},
      {"[ ]", F, "empty list"},
      {"[,]", F, "empty algorithm name"},
      {"[cpu_gather_gemm,]", F, "empty algorithm name"},
      {"[,cpu_gather_gemm]", F, "empty algorithm name"},
      {"[cpu_gather_gemm,,fake_tiles]", F, "empty algorithm name"},
      {"[[cpu_gather_gemm]]", F, "brackets"},
      {"[auto]", F, "cannot be list elements"},
      {"[all]", F, "cannot be list elements"},
      {"[cpu_gather_gemm, auto]", F, "cannot be list elements"},
      {"cpu_gather_gemm,fake_tiles", F, "[a,b]"},
      {"nope", F, "unknown algorithm 'nope'"},
      {"NOPE", VOXCONV_PASS_CONV_WGRAD, "unknown algorithm 'NOPE'"},
      {"cpu_depthwise", F, "does not implement"},
      {"explicit", F, "unknown algorithm 'explicit'"},
      {"cpu_gather_gemm", DW, "does not implement"},
      {"cpu gather gemm", F, "cannot appear"},
      {"cpu_gather_gemm;", F, "cannot appear"},
      {"auto all", F, "cannot appear"},
      {"[cpu_gather_gemm] x", F, "closing"},
      {"x[cpu_gather_gemm]", F, "']'"},
      {"[cpu_gather_gemm fake_tiles]", F, "cannot appear"},
      {long_name, F, "too long"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    vc_algo_selection_t sel;
    voxconv_status_t st =
        vc_parse_algo_mode(NULL, bad[i].text, bad[i].pass, "SOURCE_X", &sel);
    const char *msg = voxconv_get_last_error(NULL);
    VC_EXPECT(st == VOXCONV_STATUS_INVALID_ARGUMENT,
              "'%s' (%s) gave %s, want INVALID_ARGUMENT", bad[i].text,
              pass_name(bad[i].pass), voxconv_status_string(st));
    VC_EXPECT(strstr(msg, bad[i].says) != NULL, "'%s': message lacks '%s': %s",
              bad[i].text, bad[i].says, msg);
    VC_EXPECT(strstr(msg, "SOURCE_X") && strstr(msg, "valid:") &&
                  strstr(msg, "auto") && strstr(msg, "all"),
              "'%s': message does not name the source and valid forms: %s",
              bad[i].text, msg);
    /* The valid names of that pass, and only those. */
    const char *names = strstr(msg, "with names");
    names = names ? names : "";
    if (tt_is_depthwise(bad[i].pass))
      VC_EXPECT(strstr(names, "cpu_depthwise") && strstr(names, "explicit") &&
                    strstr(names, "implicit") &&
                    !strstr(names, "cpu_gather_gemm"),
                "'%s': depthwise names: %s", bad[i].text, msg);
    else
      VC_EXPECT(strstr(names, "cpu_gather_gemm") &&
                    strstr(names, "fake_tiles") &&
                    !strstr(names, "cpu_depthwise"),
                "'%s': conv names: %s", bad[i].text, msg);
  }
  /* Without the depthwise records the aliases are unknown. A CUDA build
   * registers real depthwise_* records, so there the alias stays valid. */
  tt_use_fakes(NULL);
  vc_algo_selection_t sel;
  const int real_dw = vc_algo_find("depthwise_explicit") != NULL;
  VC_EXPECT(vc_parse_algo_mode(NULL, "explicit", DW, "x", &sel) ==
                (real_dw ? VOXCONV_STATUS_SUCCESS
                         : VOXCONV_STATUS_INVALID_ARGUMENT),
            "alias %s its record", real_dw ? "with" : "without");
}

/* ---- where each pass reads its string ------------------------------------ */
static const char *const k_env_vars[] = {
    "VOXCONV_FWD_ALGO_MODE",
    "VOXCONV_BWD_ALGO_MODE",
    "VOXCONV_DGRAD_ALGO_MODE",
    "VOXCONV_WGRAD_ALGO_MODE",
    "VOXCONV_DEPTHWISE_CONV_FWD_ALGO_MODE",
    "VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE"};

static void unset_all_env(void) {
  for (size_t i = 0; i < sizeof k_env_vars / sizeof k_env_vars[0]; i++)
    unsetenv(k_env_vars[i]);
}

static void test_sources(void) {
  /* For each pass, every source in precedence order, highest first. A
   * source is "opt:<field>" or an environment variable. */
  static const char *const order[VOXCONV_PASS_COUNT][5] = {
      {"opt:fwd", "VOXCONV_FWD_ALGO_MODE", NULL},
      {"opt:dgrad", "opt:bwd", "VOXCONV_DGRAD_ALGO_MODE",
       "VOXCONV_BWD_ALGO_MODE", NULL},
      {"opt:wgrad", "opt:bwd", "VOXCONV_WGRAD_ALGO_MODE",
       "VOXCONV_BWD_ALGO_MODE", NULL},
      {"opt:fwd", "VOXCONV_DEPTHWISE_CONV_FWD_ALGO_MODE", NULL},
      {"opt:dgrad", "opt:bwd", "VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE", NULL},
      {"opt:wgrad", "opt:bwd", "VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE", NULL},
  };
  for (int pass = 0; pass < VOXCONV_PASS_COUNT; pass++) {
    for (int blank = 0; blank < 2; blank++) {
      /* Set every source to its own name (and every other variable too,
       * which must be ignored), then drop them from the top. */
      unset_all_env();
      for (size_t i = 0; i < sizeof k_env_vars / sizeof k_env_vars[0]; i++)
        setenv(k_env_vars[i], k_env_vars[i], 1);
      voxconv_conv_options_t opt = {0};
      opt.fwd_algo = "opt:fwd";
      opt.bwd_algo = "opt:bwd";
      opt.dgrad_algo = "opt:dgrad";
      opt.wgrad_algo = "opt:wgrad";
      int n = 0;
      while (n < 5 && order[pass][n])
        n++;
      for (int top = 0; top <= n; top++) {
        const char *src = NULL;
        const char *text = vc_algo_mode_text(&opt, (voxconv_pass_t)pass, &src);
        const char *want = top < n ? order[pass][top] : NULL;
        if (want) {
          VC_EXPECT(text && strcmp(text, want) == 0,
                    "%s level %d: text '%s', want '%s'",
                    pass_name((voxconv_pass_t)pass), top, text ? text : "",
                    want);
        } else {
          /* Variables of other passes must not leak in. */
          VC_EXPECT(text == NULL && strcmp(src, "default") == 0,
                    "%s: after removing every source got '%s' from %s",
                    pass_name((voxconv_pass_t)pass), text ? text : "(null)",
                    src);
          break;
        }
        /* remove the current top source (blank string = unset too) */
        const char *cur = order[pass][top];
        const char *gone = blank ? "  " : NULL;
        if (strcmp(cur, "opt:fwd") == 0)
          opt.fwd_algo = gone;
        else if (strcmp(cur, "opt:bwd") == 0)
          opt.bwd_algo = gone;
        else if (strcmp(cur, "opt:dgrad") == 0)
          opt.dgrad_algo = gone;
        else if (strcmp(cur, "opt:wgrad") == 0)
          opt.wgrad_algo = gone;
        else if (blank)
          setenv(cur, " ", 1);
        else
          unsetenv(cur);
        /* Other passes' per-call fields must not matter either. */
      }
      /* The other variables are still set: clear them for the next pass. */
      for (int k = 0; k < n; k++)
        if (strncmp(order[pass][k], "VOXCONV_", 8) == 0)
          unsetenv(order[pass][k]);
    }
  }
  unset_all_env();
  /* opt == NULL reads only the environment. */
  setenv("VOXCONV_BWD_ALGO_MODE", "all", 1);
  const char *src = NULL;
  const char *t = vc_algo_mode_text(NULL, VOXCONV_PASS_CONV_WGRAD, &src);
  VC_EXPECT(t && strcmp(t, "all") == 0 &&
                strcmp(src, "VOXCONV_BWD_ALGO_MODE") == 0,
            "opt NULL: '%s' from %s", t ? t : "", src);
  unset_all_env();
}

/* ---- strings through real calls ------------------------------------------ */
static void test_env_through_ops(void) {
  tt_fresh_cache_dir();
  static const int fakes[] = {TT_NONDET, TT_DWI, -1};
  tt_use_fakes(fakes);
  /* The CPU fake "depthwise_implicit" must win over a CUDA build's record
   * of that name, so both builds run the same cases. */
  vc_tune_extra_first = 1;
  tt_problem_t t;
  if (tt_problem_make(&t, 7, 3, 5, VOXCONV_DTYPE_F32, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  typedef struct envcase {
    const char *var;
    voxconv_pass_t pass;
    const char *good; /* a name runnable here for that pass */
  } envcase_t;
  const envcase_t cases[] = {
      {"VOXCONV_FWD_ALGO_MODE", VOXCONV_PASS_CONV_FWD, "fake_nondet"},
      {"VOXCONV_BWD_ALGO_MODE", VOXCONV_PASS_CONV_DGRAD, "fake_nondet"},
      {"VOXCONV_BWD_ALGO_MODE", VOXCONV_PASS_CONV_WGRAD, "fake_nondet"},
      {"VOXCONV_DGRAD_ALGO_MODE", VOXCONV_PASS_CONV_DGRAD, "fake_nondet"},
      {"VOXCONV_WGRAD_ALGO_MODE", VOXCONV_PASS_CONV_WGRAD, "fake_nondet"},
      {"VOXCONV_DEPTHWISE_CONV_FWD_ALGO_MODE", VOXCONV_PASS_DEPTHWISE_FWD,
       "implicit"},
      {"VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE", VOXCONV_PASS_DEPTHWISE_DGRAD,
       "implicit"},
      {"VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE", VOXCONV_PASS_DEPTHWISE_WGRAD,
       "implicit"},
  };
  const char *const malformed[] = {"[cpu_gather_gemm", "nope", "[]",
                                   "[auto]",           "a,b",  "cpu gather"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const envcase_t *ec = &cases[c];
    const int64_t n_out = tt_out_elems(&t, ec->pass);
    for (size_t m = 0; m < sizeof malformed / sizeof malformed[0]; m++) {
      unset_all_env();
      setenv(ec->var, malformed[m], 1);
      vc_poison(t.out, t.dtype, n_out);
      voxconv_status_t st = tt_run(&t, ec->pass, NULL);
      const char *msg = voxconv_get_last_error(t.h);
      VC_EXPECT(st == VOXCONV_STATUS_INVALID_ARGUMENT,
                "%s='%s' (%s): %s, want INVALID_ARGUMENT", ec->var,
                malformed[m], pass_name(ec->pass), voxconv_status_string(st));
      VC_EXPECT(strstr(msg, ec->var) && strstr(msg, "valid:"),
                "%s='%s': message does not name the variable: %s", ec->var,
                malformed[m], msg);
      VC_EXPECT(vc_count_poison(t.out, t.dtype, n_out) == n_out,
                "%s='%s': output written although the call failed", ec->var,
                malformed[m]);
    }
    /* Valid forms run, and a named algorithm is the one that ran. */
    const char *const good_forms[] = {"auto", "ALL", ec->good};
    for (size_t g = 0; g < 3; g++) {
      unset_all_env();
      setenv(ec->var, good_forms[g], 1);
      vc_poison(t.out, t.dtype, n_out);
      voxconv_status_t st = tt_run(&t, ec->pass, NULL);
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s='%s' (%s): %s: %s", ec->var,
                good_forms[g], pass_name(ec->pass), voxconv_status_string(st),
                voxconv_get_last_error(t.h));
      VC_EXPECT(vc_count_poison(t.out, t.dtype, n_out) == 0,
                "%s='%s': output not fully written", ec->var, good_forms[g]);
      voxconv_call_info_t info;
      VC_EXPECT_STATUS(t.h, voxconv_get_last_call_info(t.h, &info),
                       VOXCONV_STATUS_SUCCESS);
      VC_EXPECT(info.pass == ec->pass, "info.pass %d", (int)info.pass);
      if (g == 2) {
        const char *want =
            strcmp(ec->good, "implicit") == 0 ? "depthwise_implicit" : ec->good;
        VC_EXPECT(strcmp(info.algo, want) == 0, "%s=%s ran %s", ec->var,
                  ec->good, info.algo);
        /* A per-call string beats the environment. */
        voxconv_conv_options_t opt = {0};
        const char *other =
            tt_is_depthwise(ec->pass) ? "cpu_depthwise" : "cpu_gather_gemm";
        if (ec->pass == VOXCONV_PASS_CONV_FWD ||
            ec->pass == VOXCONV_PASS_DEPTHWISE_FWD)
          opt.fwd_algo = other;
        else
          opt.bwd_algo = other;
        VC_EXPECT_STATUS(t.h, tt_run(&t, ec->pass, &opt),
                         VOXCONV_STATUS_SUCCESS);
        voxconv_get_last_call_info(t.h, &info);
        VC_EXPECT(strcmp(info.algo, other) == 0,
                  "per-call %s did not win over %s=%s: ran %s", other, ec->var,
                  ec->good, info.algo);
      }
    }
  }
  unset_all_env();
  /* A malformed per-call string names its field. */
  voxconv_conv_options_t opt = {0};
  opt.dgrad_algo = "[x";
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_DGRAD, &opt),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT(strstr(voxconv_get_last_error(t.h), "opt->dgrad_algo") != NULL,
            "%s", voxconv_get_last_error(t.h));
  tt_problem_free(&t);
  vc_tune_extra_first = 0;
  tt_use_fakes(NULL);
}

/* ---- skipped algorithms -------------------------------------------------- */
static void test_skip_warnings(void) {
  tt_fresh_cache_dir();
  tt_problem_t t;
  if (tt_problem_make(&t, 7, 4, 4, VOXCONV_DTYPE_F32, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  static const int fakes[] = {TT_GPU, TT_NONDET, -1};
  tt_use_fakes(fakes);
  voxconv_conv_options_t opt = {0};
  opt.fwd_algo = "[fake_gpu, fake_nondet]";
  tt_capture_begin();
  voxconv_status_t st1 = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  voxconv_status_t st2 = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  char *err = tt_capture_end();
  VC_EXPECT(st1 == VOXCONV_STATUS_SUCCESS && st2 == VOXCONV_STATUS_SUCCESS,
            "list with an unrunnable algorithm: %s",
            voxconv_get_last_error(t.h));
  VC_EXPECT(tt_count(err, "fake_gpu") == 1 && strstr(err, "CUDA") &&
                strstr(err, "skipped"),
            "want exactly one warning naming fake_gpu and why:\n%s", err);
  free(err);
  voxconv_call_info_t info;
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strcmp(info.algo, "fake_nondet") == 0, "ran %s", info.algo);

  /* Nothing of the list can run: auto, warned once. Only fake_gpu is
   * registered besides the library's own, so auto is cpu_gather_gemm. */
  static const int only_gpu[] = {TT_GPU, -1};
  tt_use_fakes(only_gpu);
  opt.fwd_algo = "fake_gpu";
  tt_capture_begin();
  st1 = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  st2 = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  err = tt_capture_end();
  VC_EXPECT(st1 == VOXCONV_STATUS_SUCCESS && st2 == VOXCONV_STATUS_SUCCESS,
            "fallback to auto failed: %s", voxconv_get_last_error(t.h));
  VC_EXPECT(tt_count(err, "using auto") == 1, "want one fallback warning:\n%s",
            err);
  free(err);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(strcmp(info.algo, "cpu_gather_gemm") == 0, "auto ran %s",
            info.algo);

  /* Deterministic mode skips a non-deterministic algorithm, saying why. */
  tt_use_fakes(fakes);
  opt.fwd_algo = "fake_nondet";
  opt.deterministic = VOXCONV_TRUE;
  tt_capture_begin();
  st1 = tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt);
  err = tt_capture_end();
  VC_EXPECT(st1 == VOXCONV_STATUS_SUCCESS, "%s", voxconv_get_last_error(t.h));
  VC_EXPECT(strstr(err, "not deterministic") != NULL, "warning: %s", err);
  free(err);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(
      info.deterministic == 1 && strcmp(info.algo, "cpu_gather_gemm") == 0,
      "deterministic call ran %s (det %d)", info.algo, info.deterministic);
  /* The handle's setting applies when the call leaves it unset. */
  opt.deterministic = VOXCONV_UNSET;
  voxconv_set_deterministic(t.h, 1);
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(info.deterministic == 1 && strcmp(info.algo, "fake_nondet") != 0,
            "handle deterministic: ran %s", info.algo);
  opt.deterministic = VOXCONV_FALSE;
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  voxconv_get_last_call_info(t.h, &info);
  VC_EXPECT(info.deterministic == 0 && strcmp(info.algo, "fake_nondet") == 0,
            "per-call FALSE over handle: ran %s det %d", info.algo,
            info.deterministic);
  tt_problem_free(&t);
  tt_use_fakes(NULL);
}

/* ---- fp16 accumulator ---------------------------------------------------- */
typedef enum {
  G_ENV_UNSET,
  G_ENV_TRUE,
  G_ENV_FALSE,
  G_ENV_ON,
  G_ENV_ZERO,
  G_ENV_BAD,
  G_SET_TRUE,
  G_SET_FALSE,
  G_COUNT
} global_t;

static const char *global_name(global_t g) {
  static const char *const n[] = {"env unset",  "env true", "env false",
                                  "env ' On '", "env 0",    "env garbage",
                                  "set(1)",     "set(0)"};
  return n[g];
}

/* Puts the global setting in state g; returns the expected global value. */
static int set_global(global_t g) {
  switch (g) {
  case G_ENV_UNSET:
    unsetenv("VOXCONV_USE_FP16_ACCUM");
    break;
  case G_ENV_TRUE:
    setenv("VOXCONV_USE_FP16_ACCUM", "true", 1);
    break;
  case G_ENV_FALSE:
    setenv("VOXCONV_USE_FP16_ACCUM", "false", 1);
    break;
  case G_ENV_ON:
    setenv("VOXCONV_USE_FP16_ACCUM", " On ", 1);
    break;
  case G_ENV_ZERO:
    setenv("VOXCONV_USE_FP16_ACCUM", "0", 1);
    break;
  case G_ENV_BAD:
    setenv("VOXCONV_USE_FP16_ACCUM", "perhaps", 1);
    break;
  default:
    break;
  }
  if (g <= G_ENV_BAD) {
    vc_fp16_accum_reset_from_env();
    return g == G_ENV_TRUE || g == G_ENV_ON;
  }
  voxconv_set_fp16_accum(g == G_SET_TRUE ? 7 : 0); /* nonzero = true */
  return g == G_SET_TRUE;
}

static int expected_fp16(voxconv_tristate_t call, int global, int inference,
                         voxconv_dtype_t dt, voxconv_pass_t pass,
                         const char **keyword) {
  if (dt != VOXCONV_DTYPE_F16 && dt != VOXCONV_DTYPE_BF16) {
    *keyword = "f32/f64";
    return 0;
  }
  if (pass == VOXCONV_PASS_CONV_WGRAD || pass == VOXCONV_PASS_DEPTHWISE_WGRAD) {
    *keyword = "weight gradients";
    return 0;
  }
  if (call != VOXCONV_UNSET) {
    *keyword = "per-call";
    return call == VOXCONV_TRUE;
  }
  if (global) {
    *keyword = "global";
    return 1;
  }
  if (inference) {
    *keyword = "inference";
    return 1;
  }
  *keyword = "default";
  return 0;
}

static void test_precedence_table(void) {
  const voxconv_tristate_t calls[] = {VOXCONV_UNSET, VOXCONV_FALSE,
                                      VOXCONV_TRUE};
  const voxconv_dtype_t dtypes[] = {VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16,
                                    VOXCONV_DTYPE_BF16, VOXCONV_DTYPE_F64};
  int checked = 0;
  tt_capture_begin();
  for (int g = 0; g < G_COUNT; g++) {
    const int global = set_global((global_t)g);
    VC_EXPECT(voxconv_get_fp16_accum() == global, "%s: get_fp16_accum %d",
              global_name((global_t)g), voxconv_get_fp16_accum());
    for (int c = 0; c < 3; c++)
      for (int inf = 0; inf < 2; inf++)
        for (int d = 0; d < 4; d++)
          for (int pass = 0; pass < VOXCONV_PASS_COUNT; pass++)
            for (int null_opt = 0; null_opt < 2; null_opt++) {
              if (null_opt && (c != 0 || inf != 0))
                continue; /* NULL options = unset, not inference */
              voxconv_conv_options_t opt = {0};
              opt.fp16_accum = calls[c];
              opt.inference = inf;
              const char *kw = NULL;
              const int want = expected_fp16(calls[c], global, inf, dtypes[d],
                                             (voxconv_pass_t)pass, &kw);
              int got = -1;
              const char *reason = NULL;
              voxconv_status_t st = voxconv_resolve_fp16_accum(
                  dtypes[d], (voxconv_pass_t)pass, null_opt ? NULL : &opt, &got,
                  &reason);
              checked++;
              VC_EXPECT(
                  st == VOXCONV_STATUS_SUCCESS && got == want && reason &&
                      strstr(reason, kw) &&
                      strncmp(reason, want ? "on:" : "off:", want ? 3 : 4) == 0,
                  "%s, call %d, inference %d, %s, %s%s: got %d (%s), "
                  "want %d (%s)",
                  global_name((global_t)g), (int)calls[c], inf,
                  voxconv_dtype_name(dtypes[d]),
                  pass_name((voxconv_pass_t)pass), null_opt ? ", opt NULL" : "",
                  got, reason ? reason : "(null)", want, kw);
              /* The reason names the API when the API set the global. */
              if (want && strcmp(kw, "global") == 0)
                VC_EXPECT(strstr(reason, g >= G_SET_TRUE
                                             ? "voxconv_set_fp16_accum"
                                             : "VOXCONV_USE_FP16_ACCUM") !=
                              NULL,
                          "global source in '%s'", reason);
            }
  }
  char *err = tt_capture_end();
  VC_EXPECT(tt_count(err, "VOXCONV_USE_FP16_ACCUM='perhaps'") == 1,
            "a malformed VOXCONV_USE_FP16_ACCUM warns exactly once:\n%s", err);
  free(err);
  printf("precedence table: %d resolutions checked\n", checked);

  /* bad arguments */
  int en = 0;
  VC_EXPECT_STATUS(NULL,
                   voxconv_resolve_fp16_accum(VOXCONV_DTYPE_F16,
                                              VOXCONV_PASS_CONV_FWD, NULL, NULL,
                                              NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL,
                   voxconv_resolve_fp16_accum((voxconv_dtype_t)9,
                                              VOXCONV_PASS_CONV_FWD, NULL, &en,
                                              NULL),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(NULL,
                   voxconv_resolve_fp16_accum(
                       VOXCONV_DTYPE_F16, VOXCONV_PASS_COUNT, NULL, &en, NULL),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  voxconv_conv_options_t bad = {0};
  bad.fp16_accum = (voxconv_tristate_t)7;
  VC_EXPECT_STATUS(NULL,
                   voxconv_resolve_fp16_accum(VOXCONV_DTYPE_F16,
                                              VOXCONV_PASS_CONV_FWD, &bad, &en,
                                              NULL),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  unsetenv("VOXCONV_USE_FP16_ACCUM");
  vc_fp16_accum_reset_from_env();
}

/* The same table through real calls: what the call resolved to and why. */
static void test_precedence_calls(void) {
  tt_fresh_cache_dir();
  tt_use_fakes(NULL);
  const voxconv_dtype_t dtypes[] = {VOXCONV_DTYPE_F32, VOXCONV_DTYPE_F16,
                                    VOXCONV_DTYPE_BF16};
  const global_t globals[] = {G_ENV_TRUE, G_ENV_FALSE, G_SET_TRUE, G_SET_FALSE};
  int calls_made = 0;
  for (int d = 0; d < 3; d++) {
    tt_problem_t t;
    if (tt_problem_make(&t, 6, 4, 4, dtypes[d], 1) != 0) {
      VC_EXPECT(0, "problem setup failed");
      return;
    }
    voxconv_call_info_t info;
    VC_EXPECT_STATUS(t.h, voxconv_get_last_call_info(t.h, &info),
                     VOXCONV_STATUS_INVALID_ARGUMENT);
    for (size_t g = 0; g < sizeof globals / sizeof globals[0]; g++) {
      const int global = set_global(globals[g]);
      for (int c = 0; c < 3; c++)
        for (int inf = 0; inf < 2; inf++)
          for (int pass = 0; pass < VOXCONV_PASS_COUNT; pass++) {
            voxconv_conv_options_t opt = {0};
            opt.fp16_accum = (voxconv_tristate_t)c;
            opt.inference = inf;
            const char *kw = NULL;
            const int want =
                expected_fp16(opt.fp16_accum, global, inf, dtypes[d],
                              (voxconv_pass_t)pass, &kw);
            const int64_t n_out = tt_out_elems(&t, (voxconv_pass_t)pass);
            vc_poison(t.out, t.dtype, n_out);
            voxconv_status_t st = tt_run(&t, (voxconv_pass_t)pass, &opt);
            calls_made++;
            VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s %s: %s",
                      voxconv_dtype_name(dtypes[d]),
                      pass_name((voxconv_pass_t)pass),
                      voxconv_get_last_error(t.h));
            VC_EXPECT(vc_count_poison(t.out, t.dtype, n_out) == 0,
                      "output not written");
            memset(&info, 0, sizeof info);
            VC_EXPECT_STATUS(t.h, voxconv_get_last_call_info(t.h, &info),
                             VOXCONV_STATUS_SUCCESS);
            VC_EXPECT(
                info.pass == (voxconv_pass_t)pass && info.fp16_accum == want &&
                    strstr(info.fp16_accum_reason, kw) && info.algo[0] &&
                    info.deterministic == 0,
                "%s, call %d, inference %d, %s, %s: info fp16 %d "
                "(%s), algo '%s', want %d (%s)",
                global_name(globals[g]), c, inf, voxconv_dtype_name(dtypes[d]),
                pass_name((voxconv_pass_t)pass), info.fp16_accum,
                info.fp16_accum_reason, info.algo, want, kw);
          }
    }
    tt_problem_free(&t);
  }
  printf("precedence through calls: %d calls checked\n", calls_made);
  unsetenv("VOXCONV_USE_FP16_ACCUM");
  vc_fp16_accum_reset_from_env();
}

/* The environment sets the initial value of a fresh process. */
static int child_env_check(void) {
  const char *want = getenv("TT_EXPECT");
  const int got = voxconv_get_fp16_accum();
  return (want && atoi(want) == got) ? 0 : 3;
}

static void test_env_initial_value(const char *self) {
  typedef struct envinit {
    const char *value; /* NULL = unset */
    int want;
    int warns;
  } envinit_t;
  const envinit_t cases[] = {{NULL, 0, 0},    {"true", 1, 0},  {"false", 0, 0},
                             {" YES ", 1, 0}, {"off", 0, 0},   {"1", 1, 0},
                             {"2", 0, 1},     {"truee", 0, 1}, {"", 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char err_path[] = "/tmp/voxconv-tune-env-XXXXXX";
    int fd = mkstemp(err_path);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fd, 2);
      if (cases[i].value)
        setenv("VOXCONV_USE_FP16_ACCUM", cases[i].value, 1);
      else
        unsetenv("VOXCONV_USE_FP16_ACCUM");
      char want[8];
      snprintf(want, sizeof want, "%d", cases[i].want);
      setenv("TT_EXPECT", want, 1);
      execl(self, self, "--child-env-check", (char *)NULL);
      _exit(4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    size_t n = 0;
    char *err = (char *)vc_read_file(err_path, &n);
    unlink(err_path);
    char *text = (char *)calloc(n + 1, 1);
    if (err && n)
      memcpy(text, err, n);
    free(err);
    VC_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "VOXCONV_USE_FP16_ACCUM='%s' at start: want %d (child status "
              "%d)",
              cases[i].value ? cases[i].value : "(unset)", cases[i].want,
              status);
    VC_EXPECT(
        (strstr(text, "VOXCONV_USE_FP16_ACCUM") != NULL) == cases[i].warns,
        "VOXCONV_USE_FP16_ACCUM='%s': warning expected %d, stderr: %s",
        cases[i].value ? cases[i].value : "(unset)", cases[i].warns, text);
    free(text);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child-env-check") == 0)
    return child_env_check();
  vc_test_init("test_tune_select");
  setenv("VOXCONV_AUTOTUNE_LOG", "0", 1);
  unset_all_env();
  test_grammar();
  test_sources();
  test_env_through_ops();
  test_skip_warnings();
  test_precedence_table();
  test_precedence_calls();
  test_env_initial_value("/proc/self/exe");
  tt_cleanup();
  return vc_test_finish();
}
