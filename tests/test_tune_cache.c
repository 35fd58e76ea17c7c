/* The persistent tuning cache: text round trip (library and snapshot API),
 * the strict reader (every malformed form, every truncation, garbage and
 * mutated files), corrupt files on disk reported once, set aside and
 * rebuilt, 8 concurrent processes x 200 updates with nothing lost, a
 * process killed in the middle of a save, clear / path, the snapshot API's
 * errors, and the recommended reduced sets (greedy cover) that feed auto. */
#include "tune_test_util.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>

static vc_cache_key_t make_key(const char *device, int64_t cin, int64_t cout) {
  vc_cache_key_t k;
  memset(&k, 0, sizeof k);
  snprintf(k.device, sizeof k.device, "%s", device);
  snprintf(k.lib, sizeof k.lib, "%s", VOXCONV_VERSION_STRING);
  k.nin = 12;
  k.nout = 12;
  k.cin = cin;
  k.cout = cout;
  k.kvol = 27;
  k.dtype = VOXCONV_DTYPE_F16;
  k.mode = VOXCONV_KMAP_SUBMANIFOLD;
  k.stride[0] = k.stride[1] = k.stride[2] = 1;
  return k;
}

static vc_cache_row_t make_row(const char *algo, const char *params, double ms,
                               const char *status, double max_rel) {
  vc_cache_row_t r;
  memset(&r, 0, sizeof r);
  snprintf(r.algo, sizeof r.algo, "%s", algo);
  snprintf(r.params, sizeof r.params, "%s", params);
  r.time_ms = ms;
  snprintf(r.status, sizeof r.status, "%s", status);
  r.max_rel = max_rel;
  return r;
}

static int write_text(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  fwrite(text, 1, len, f);
  return fclose(f);
}

/* ---- round trip ------------------------------------------------------------
 */
static void random_db(vc_cache_db_t *db, int n_entries) {
  static const char *const devices[] = {
      "cpu:AMD EPYC 7B13 64-Core Processor:2", "cuda:NVIDIA H200:cc9.0",
      "cuda:Tesla (prototype) #2 / rev:cc8.6"};
  static const char *const statuses[] = {
      "ok",    "ok",        "ok",
      "wrong", "nonfinite", "failed:VOXCONV_STATUS_CUDA_ERROR"};
  vc_cache_db_init(db);
  for (int i = 0; i < n_entries; i++) {
    const int pass = (int)vc_rand_range(0, VOXCONV_PASS_COUNT - 1);
    char ns[96];
    if (vc_rand_range(0, 1))
      snprintf(ns, sizeof ns, "%s", vc_cache_pass_namespace(pass));
    else
      snprintf(ns, sizeof ns, "%s/algo_%d", vc_cache_pass_namespace(pass),
               (int)vc_rand_range(0, 3));
    vc_cache_key_t k = make_key(devices[vc_rand_range(0, 2)],
                                vc_rand_range(1, 4096), vc_rand_range(1, 512));
    k.nin = (int32_t)vc_rand_range(0, 40);
    k.nout = (int32_t)vc_rand_range(0, 40);
    k.kvol = (int32_t)vc_rand_range(1, 343);
    k.dtype = (int32_t)vc_rand_range(0, 3);
    k.acc = (int32_t)vc_rand_range(0, 1);
    k.det = (int32_t)vc_rand_range(0, 1);
    k.mode = (int32_t)vc_rand_range(0, 3);
    for (int s = 0; s < 3; s++)
      k.stride[s] = (int32_t)vc_rand_range(1, 64);
    vc_cache_entry_t *e = vc_cache_db_upsert(db, ns, &k);
    if (!e)
      continue;
    e->coverage = (unsigned)vc_rand_range(0, 7);
    const int rows = (int)vc_rand_range(0, 12);
    for (int r = 0; r < rows; r++) {
      char algo[32], params[64];
      snprintf(algo, sizeof algo, "algo_%d", (int)vc_rand_range(0, 3));
      if (vc_rand_range(0, 3) == 0)
        snprintf(params, sizeof params, "-");
      else
        snprintf(params, sizeof params, "tile=%d,split_k=%d,%s=%d",
                 (int)vc_rand_range(0, 9), (int)vc_rand_range(1, 8),
                 VC_PARAM_ACCUMULATOR, (int)vc_rand_range(0, 1));
      const char *st = statuses[vc_rand_range(0, 5)];
      const int ok = strcmp(st, "ok") == 0;
      const double ms =
          ok || vc_rand_range(0, 1) ? vc_rand_uniform() * 1000.0 : -1;
      const double rel = vc_rand_range(0, 4) ? vc_rand_uniform() * 1e-2 : -1;
      vc_cache_row_t row = make_row(algo, params, ms, st, rel);
      vc_cache_entry_put_row(e, &row);
    }
    vc_cache_entry_sort(e);
  }
}

static int close_rel(double a, double b, double tol) {
  if (a < 0 || b < 0)
    return a < 0 && b < 0;
  return fabs(a - b) <= tol * fabs(b) + 1e-300;
}

static void test_round_trip(void) {
  vc_cache_db_t db, back;
  random_db(&db, 60);
  size_t len = 0;
  char *text = vc_cache_db_serialize(&db, &len);
  VC_EXPECT(text && len == strlen(text), "serialize");
  char err[256];
  VC_EXPECT(vc_cache_db_parse(&back, text, len, err, sizeof err) == 0,
            "parse back: %s", err);
  VC_EXPECT(back.n == db.n, "entries %d vs %d", back.n, db.n);
  for (int i = 0; i < db.n && i < back.n; i++) {
    const vc_cache_entry_t *a = &db.entries[i], *b = &back.entries[i];
    VC_EXPECT(strcmp(a->ns, b->ns) == 0 &&
                  vc_cache_key_equal(&a->key, &b->key) &&
                  a->coverage == b->coverage && a->n_rows == b->n_rows,
              "entry %d differs after the round trip", i);
    for (int r = 0; r < a->n_rows && r < b->n_rows; r++) {
      const vc_cache_row_t *x = &a->rows[r], *y = &b->rows[r];
      VC_EXPECT(strcmp(x->algo, y->algo) == 0 &&
                    strcmp(x->params, y->params) == 0 &&
                    strcmp(x->status, y->status) == 0 &&
                    close_rel(y->time_ms, x->time_ms, 1e-5) &&
                    close_rel(y->max_rel, x->max_rel, 1e-3),
                "entry %d row %d: %s %s %g %s %g vs %s %s %g %s %g", i, r,
                x->algo, x->params, x->time_ms, x->status, x->max_rel, y->algo,
                y->params, y->time_ms, y->status, y->max_rel);
    }
  }
  /* Text is a fixed point after one round. */
  size_t len2 = 0;
  char *text2 = vc_cache_db_serialize(&back, &len2);
  VC_EXPECT(text2 && len2 == len && memcmp(text, text2, len) == 0,
            "serialize(parse(text)) != text");

  /* The same through a file and the public snapshot API. */
  tt_fresh_cache_dir();
  VC_EXPECT(write_text(tt_cache_file(), text, len) == 0, "write");
  voxconv_cache_t *c = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &c), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(voxconv_cache_entry_count(c) == db.n, "snapshot entries %d",
            voxconv_cache_entry_count(c));
  for (int i = 0; c && i < db.n; i++) {
    voxconv_cache_entry_info_t e;
    VC_EXPECT_STATUS(NULL, voxconv_cache_get_entry(c, i, &e),
                     VOXCONV_STATUS_SUCCESS);
    const vc_cache_entry_t *a = &db.entries[i];
    char algo[64];
    const int pass = vc_cache_ns_pass(a->ns, algo, sizeof algo);
    VC_EXPECT(strcmp(e.namespace_name, a->ns) == 0 && (int)e.pass == pass &&
                  strcmp(e.algo_namespace, algo) == 0 &&
                  strcmp(e.device, a->key.device) == 0 && e.cin == a->key.cin &&
                  e.cout == a->key.cout && e.kernel_volume == a->key.kvol &&
                  (int)e.dtype == a->key.dtype && e.fp16_accum == a->key.acc &&
                  e.deterministic == a->key.det && (int)e.mode == a->key.mode &&
                  e.stride[2] == a->key.stride[2] &&
                  e.n_in_log2 == a->key.nin && e.n_candidates == a->n_rows,
              "snapshot entry %d", i);
    for (int r = 0; r < a->n_rows; r++) {
      voxconv_cache_candidate_t cand;
      VC_EXPECT_STATUS(NULL, voxconv_cache_get_candidate(c, i, r, &cand),
                       VOXCONV_STATUS_SUCCESS);
      VC_EXPECT(strcmp(cand.algo, a->rows[r].algo) == 0 &&
                    strcmp(cand.params, a->rows[r].params) == 0 &&
                    strcmp(cand.status, a->rows[r].status) == 0 &&
                    close_rel(cand.time_ms, a->rows[r].time_ms, 1e-5),
                "snapshot entry %d candidate %d", i, r);
    }
  }
  voxconv_cache_close(c);
  free(text);
  free(text2);
  vc_cache_db_free(&db);
  vc_cache_db_free(&back);
}

/* ---- the strict reader ------------------------------------------------------
 */
static const char k_valid[] =
    "voxconv-tuning-cache 1\n"
    "# a comment\n"
    "\n"
    "entry sparse_conv_forward searched=auto,all device=\"cpu:X Y:2\" "
    "lib=0.1.0 nin=10 nout=10 cin=64 cout=64 kvol=27 dtype=f16 acc=0 det=0 "
    "mode=submanifold stride=1,1,1\n"
    "  cand mask_gemm tile=3,accumulator_type=0 0.25 ok 1.0e-03\n"
    "  cand implicit_gemm - 0.5 ok -\n"
    "  cand broken - - failed:VOXCONV_STATUS_CUDA_ERROR -\n"
    "end 1\n";

/* Magnitudes at the edges of double: the writer prints times exactly (the
 * shortest text that reads back the same) and max_rel with "%.3e", which
 * can turn a normal value into a subnormal
 * one (2.2250738585072014e-308 -> 2.22507e-308) or DBL_MAX into an
 * overflow (1.798e+308), and a wrong candidate's max_rel is infinite when
 * its reference is all zeros. The reader must take back whatever the
 * writer printed, and what it reads must print the same. */
static void test_extreme_measures(void) {
  static const double vals[] = {
      2.2250738585072014e-308, 1e-310,  4.9e-324, 0, 1e300,
      1.7976931348623157e308,  INFINITY};
  const int n = (int)(sizeof vals / sizeof vals[0]);
  vc_cache_db_t db, back;
  vc_cache_db_init(&db);
  const vc_cache_key_t key = make_key("cpu:edge", 8, 8);
  vc_cache_entry_t *e = vc_cache_db_upsert(&db, "sparse_conv_forward", &key);
  VC_EXPECT(e != NULL, "upsert");
  for (int i = 0; e && i < n; i++) {
    char params[32];
    snprintf(params, sizeof params, "tile=%d", i);
    vc_cache_row_t row =
        make_row("edge_algo", params, vals[i], "ok", vals[n - 1 - i]);
    VC_EXPECT(vc_cache_entry_put_row(e, &row) == 0, "put row %d", i);
  }
  if (e)
    vc_cache_entry_sort(e); /* written ranked, as the tuner does */
  size_t len = 0, len2 = 0;
  char *text = vc_cache_db_serialize(&db, &len);
  char err[256] = "";
  const int rc =
      text ? vc_cache_db_parse(&back, text, len, err, sizeof err) : -1;
  VC_EXPECT(rc == 0, "extreme measures do not read back: %s", err);
  /* A file from before the ceiling: a wrong candidate's "inf" max_rel. */
  {
    const char *old_file =
        "voxconv-tuning-cache 1\n"
        "entry sparse_conv_forward searched=all device=\"cpu:edge\" "
        "lib=0.1.0 nin=12 nout=12 cin=8 cout=8 kvol=27 dtype=f16 acc=0 "
        "det=0 mode=submanifold stride=1,1,1\n"
        "  cand a - 0.5 ok 1.0e-04\n  cand b - - wrong inf\nend 1\n";
    vc_cache_db_t odb;
    const int orc =
        vc_cache_db_parse(&odb, old_file, strlen(old_file), err, sizeof err);
    VC_EXPECT(orc == 0 && odb.n == 1 && odb.entries[0].n_rows == 2 &&
                  odb.entries[0].rows[1].max_rel == VC_CACHE_MEASURE_MAX,
              "an 'inf' max_rel from an older writer: %s", orc ? err : "");
    if (orc == 0)
      vc_cache_db_free(&odb);
  }
  if (rc == 0) {
    VC_EXPECT(back.n == 1 && back.entries[0].n_rows == n, "rows read back");
    char *text2 = vc_cache_db_serialize(&back, &len2);
    VC_EXPECT(text2 && len2 == len && memcmp(text, text2, len) == 0,
              "serialize(parse(text)) differs:\n%s---\n%s", text,
              text2 ? text2 : "(null)");
    free(text2);
    vc_cache_db_free(&back);
  }
  free(text);
  vc_cache_db_free(&db);
}

/* Found by fuzz_cache_reader: times printed with 6 digits made two
 * candidates 3.94489 and 3.944895 ms tie when read back, and the tie
 * (broken by name) swapped their ranks, so the file changed on every
 * rewrite. Times are written exactly (shortest text that reads back the
 * same double), so a written ranking reads back unchanged. */
static void test_rank_survives_round_trip(void) {
  vc_cache_db_t db, back;
  vc_cache_db_init(&db);
  const vc_cache_key_t key = make_key("cpu:ties", 8, 8);
  vc_cache_entry_t *e = vc_cache_db_upsert(&db, "sparse_conv_forward", &key);
  vc_cache_row_t fast = make_row("zeta", "-", 3.94489, "ok", 0);
  vc_cache_row_t slow = make_row("alpha", "-", 3.944895, "ok", 0);
  vc_cache_entry_put_row(e, &slow);
  vc_cache_entry_put_row(e, &fast);
  vc_cache_entry_sort(e);
  size_t len = 0, len2 = 0;
  char *text = vc_cache_db_serialize(&db, &len);
  char err[256] = "";
  VC_EXPECT(text && vc_cache_db_parse(&back, text, len, err, sizeof err) == 0,
            "parse: %s", err);
  VC_EXPECT(back.n == 1 && strcmp(back.entries[0].rows[0].algo, "zeta") == 0 &&
                back.entries[0].rows[1].time_ms == 3.944895,
            "ranking or time changed by the round trip: %s %.17g",
            back.n ? back.entries[0].rows[0].algo : "-",
            back.n ? back.entries[0].rows[1].time_ms : 0.0);
  char *text2 = vc_cache_db_serialize(&back, &len2);
  VC_EXPECT(text2 && len2 == len && memcmp(text, text2, len) == 0,
            "serialize(parse(text)) differs:\n%s---\n%s", text,
            text2 ? text2 : "(null)");
  VC_EXPECT(text && strstr(text, "3.944895 ok"),
            "times are not written as typed:\n%s", text);
  free(text);
  free(text2);
  vc_cache_db_free(&back);
  vc_cache_db_free(&db);
}

static void test_reader(void) {
  vc_cache_db_t db;
  char err[256];
  VC_EXPECT(vc_cache_db_parse(&db, k_valid, strlen(k_valid), err, sizeof err) ==
                    0 &&
                db.n == 1 && db.entries[0].n_rows == 3 &&
                db.entries[0].coverage == (VC_COVER_AUTO | VC_COVER_ALL),
            "valid text: %s", err);
  vc_cache_db_free(&db);
  /* CRLF line ends are accepted (a file edited on Windows). */
  char crlf[2048];
  size_t m = 0;
  for (const char *p = k_valid; *p; p++) {
    if (*p == '\n')
      crlf[m++] = '\r';
    crlf[m++] = *p;
  }
  VC_EXPECT(vc_cache_db_parse(&db, crlf, m, err, sizeof err) == 0, "CRLF: %s",
            err);
  vc_cache_db_free(&db);

  /* Every proper prefix is a truncated file. */
  const size_t n = strlen(k_valid);
  int accepted = 0;
  for (size_t cut = 0; cut < n; cut++) {
    if (vc_cache_db_parse(&db, k_valid, cut, err, sizeof err) == 0) {
      accepted++;
      fprintf(stderr, "prefix of %zu bytes accepted\n", cut);
    }
    vc_cache_db_free(&db);
  }
  VC_EXPECT(accepted == 0, "%d truncations accepted", accepted);

  typedef struct bad {
    const char *from, *to; /* replace `from` in k_valid by `to` */
    const char *why;
  } bad_t;
  const bad_t bad[] = {
      {"voxconv-tuning-cache 1", "voxconv-tuning-cache 2", "version"},
      {"voxconv-tuning-cache 1", "voxconv-tuning-cache x", "version"},
      {"voxconv-tuning-cache 1", "voxconv-tuning-kache 1", "first line"},
      {"entry sparse_conv_forward", "entry sparse_conv_sideways", "namespace"},
      {"entry sparse_conv_forward", "entry sparse_conv_forward/", "namespace"},
      {"entry sparse_conv_forward", "entry sparse_conv_forward/a b",
       "without '='"},
      {"entry sparse_conv_forward", "entry sparse_conv_forward/a:b",
       "namespace"},
      {" nin=10", "", "missing"},
      {" nin=10", " nin=10 nin=10", "twice"},
      {" nin=10", " nin=10 colour=blue", "unknown key field"},
      {" nin=10", " nin", "without '='"},
      {"nin=10", "nin=64", "nin"},
      {"nin=10", "nin=-1", "nin"},
      {"cin=64", "cin=0", "cin"},
      {"cin=64", "cin=6x4", "cin"},
      {"kvol=27", "kvol=344", "kvol"},
      {"dtype=f16", "dtype=f8", "dtype"},
      {"acc=0", "acc=2", "acc"},
      {"det=0", "det=yes", "det"},
      {"mode=submanifold", "mode=dense", "mode"},
      {"stride=1,1,1", "stride=1,1", "stride"},
      {"stride=1,1,1", "stride=1,1,1,1", "stride"},
      {"stride=1,1,1", "stride=1,0,1", "stride"},
      {"stride=1,1,1", "stride=1,,1", "stride"},
      {"device=\"cpu:X Y:2\"", "device=cpu", "quoted"},
      {"device=\"cpu:X Y:2\"", "device=\"\"", "empty"},
      {"device=\"cpu:X Y:2\"", "device=\"cpu:X\tY\"", "control"},
      {"device=\"cpu:X Y:2\"", "device=\"cpu:X Y:2", "quotes"},
      {"searched=auto,all", "searched=auto,,all", "searched"},
      {"searched=auto,all", "searched=most", "searched"},
      {"lib=0.1.0", "lib=0.1 0", "without '='"},
      {"lib=0.1.0", "lib=0.1/0", "lib"},
      {"  cand mask_gemm tile=3,accumulator_type=0 0.25 ok 1.0e-03",
       "  cand mask_gemm tile=3 0.25 ok", "5 fields"},
      {"0.25 ok", "0.25 maybe", "status"},
      {"0.25 ok", "nan ok", "time"},
      {"0.25 ok", "inf ok", "time"},
      {"0.25 ok", "-1 ok", "time"},
      {"0.25 ok", "1e999 ok", "time"},
      {"1.0e-03", "1e999", "max_rel"},
      {"0.25 ok", "- ok", "without a time"},
      {"1.0e-03", "1.0e-0x", "max_rel"},
      {"cand mask_gemm", "cand mask/gemm", "algorithm"},
      {"tile=3,accumulator_type=0", "tile=3;x", "parameters"},
      {"  cand implicit_gemm - 0.5 ok -\n",
       "  cand implicit_gemm - 0.5 ok -\n  cand implicit_gemm - 0.7 ok -\n",
       "twice"},
      {"end 1", "end 2", "count"},
      {"end 1", "end", "end line"},
      {"end 1\n", "end 1\nentry x\n", "after the end"},
      {"end 1\n", "", "no end line"},
      {"end 1\n", "end 1", "newline"},
      {"# a comment\n", "# a comment\ncand x - 1 ok -\n", "before any entry"},
      {"# a comment\n", "# a comment\nhello\n", "unknown record"},
  };
  char text[4096];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *at = strstr(k_valid, bad[i].from);
    if (!at) {
      VC_EXPECT(0, "case %zu: '%s' not in the valid text", i, bad[i].from);
      continue;
    }
    const size_t pre = (size_t)(at - k_valid);
    snprintf(text, sizeof text, "%.*s%s%s", (int)pre, k_valid, bad[i].to,
             at + strlen(bad[i].from));
    const int rc = vc_cache_db_parse(&db, text, strlen(text), err, sizeof err);
    VC_EXPECT(rc != 0 && db.n == 0 && strstr(err, "line ") &&
                  strstr(err, bad[i].why),
              "case %zu ('%s' -> '%s') rc %d, message '%s' lacks '%s'", i,
              bad[i].from, bad[i].to, rc, err, bad[i].why);
    vc_cache_db_free(&db);
  }
  /* The same entry twice. */
  {
    const char *end_line = strstr(k_valid, "end 1");
    const char *entry = strstr(k_valid, "entry");
    const size_t head = (size_t)(end_line - k_valid);
    const size_t body = (size_t)(end_line - entry);
    memcpy(text, k_valid, head);
    memcpy(text + head, entry, body);
    snprintf(text + head + body, sizeof text - head - body, "end 2\n");
  }
  VC_EXPECT(vc_cache_db_parse(&db, text, strlen(text), err, sizeof err) != 0 &&
                strstr(err, "twice"),
            "duplicate entry: %s", err);
  vc_cache_db_free(&db);
  /* A NUL byte and an over-long line. */
  memcpy(text, k_valid, n + 1);
  text[30] = '\0';
  VC_EXPECT(vc_cache_db_parse(&db, text, n, err, sizeof err) != 0 &&
                strstr(err, "NUL"),
            "NUL: %s", err);
  vc_cache_db_free(&db);
  char *longtext = (char *)malloc(8192);
  snprintf(longtext, 8192, "voxconv-tuning-cache 1\n#");
  memset(longtext + strlen(longtext), 'x', 2000);
  longtext[24 + 2000] = '\0';
  strcat(longtext, "\nend 0\n");
  VC_EXPECT(vc_cache_db_parse(&db, longtext, strlen(longtext), err,
                              sizeof err) != 0 &&
                strstr(err, "too long"),
            "long line: %s", err);
  vc_cache_db_free(&db);
  free(longtext);
  /* Empty file, garbage, and random mutations of a valid file. */
  VC_EXPECT(vc_cache_db_parse(&db, "", 0, err, sizeof err) != 0, "empty");
  unsigned char junk[512];
  int junk_ok = 0;
  for (int round = 0; round < 200; round++) {
    const size_t len = (size_t)vc_rand_range(1, sizeof junk);
    for (size_t i = 0; i < len; i++)
      junk[i] = (unsigned char)vc_rand_u64();
    junk_ok +=
        vc_cache_db_parse(&db, (const char *)junk, len, err, sizeof err) == 0;
    vc_cache_db_free(&db);
  }
  VC_EXPECT(junk_ok == 0, "%d garbage buffers parsed", junk_ok);
  int mutated_ok = 0;
  for (int round = 0; round < 2000; round++) {
    memcpy(text, k_valid, n);
    const int flips = (int)vc_rand_range(1, 3);
    for (int f = 0; f < flips; f++)
      text[vc_rand_range(0, (int64_t)n - 1)] = (char)vc_rand_u64();
    if (vc_cache_db_parse(&db, text, n, err, sizeof err) == 0) {
      /* Whatever is accepted must survive its own round trip. */
      mutated_ok++;
      size_t l2 = 0;
      char *t2 = vc_cache_db_serialize(&db, &l2);
      vc_cache_db_t db2;
      VC_EXPECT(t2 && vc_cache_db_parse(&db2, t2, l2, err, sizeof err) == 0 &&
                    db2.n == db.n,
                "accepted mutation does not round-trip: %s", err);
      vc_cache_db_free(&db2);
      free(t2);
    }
    vc_cache_db_free(&db);
  }
  printf("reader: %d of 2000 mutations still valid (comments, numbers)\n",
         mutated_ok);
}

/* ---- corrupt files on disk
 * --------------------------------------------------- */
static void put_one(const char *ns, int64_t cin, const char *algo, double ms) {
  vc_cache_entry_t e;
  memset(&e, 0, sizeof e);
  snprintf(e.ns, sizeof e.ns, "%s", ns);
  e.key = make_key("cpu:test:1", cin, 16);
  e.coverage = VC_COVER_AUTO;
  vc_cache_row_t row = make_row(algo, "-", ms, "ok", 0);
  vc_cache_entry_put_row(&e, &row);
  vc_cache_put(&e);
  vc_cache_entry_free(&e);
}

static int has_entry(int64_t cin) {
  vc_cache_key_t k = make_key("cpu:test:1", cin, 16);
  vc_cache_entry_t e;
  const int found = vc_cache_get("sparse_conv_forward", &k, 0, &e);
  if (found)
    vc_cache_entry_free(&e);
  return found;
}

static int count_files(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL)
    n += strstr(de->d_name, part) != NULL;
  if (d)
    closedir(d);
  return n;
}

static void corrupt_case(const char *what, const char *content, size_t len,
                         int at_save) {
  tt_fresh_cache_dir();
  if (at_save)
    put_one("sparse_conv_forward", 5, "before", 1.0); /* loads (no file) */
  VC_EXPECT(write_text(tt_cache_file(), content, len) == 0, "write");
  tt_capture_begin();
  if (at_save)
    VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
  else
    VC_EXPECT(!has_entry(5), "%s: nothing read from a corrupt file", what);
  vc_cache_forget();
  VC_EXPECT(at_save ? has_entry(5) : !has_entry(5), "%s: after reload", what);
  char *err = tt_capture_end();
  VC_EXPECT(tt_count(err, "is corrupt") == 1 && strstr(err, "moved to"),
            "%s: one report naming where it went:\n%s", what, err);
  free(err);
  VC_EXPECT(count_files(tt_dir, ".corrupt-") == 1, "%s: set aside", what);
  /* Rebuilt: new results save into a valid file. */
  put_one("sparse_conv_forward", 6, "after", 2.0);
  VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
  voxconv_cache_t *c = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &c), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(voxconv_cache_entry_count(c) == (at_save ? 2 : 1),
            "%s: rebuilt file has %d entries", what,
            voxconv_cache_entry_count(c));
  voxconv_cache_close(c);
  /* Reported once: the same path going bad again stays quiet. */
  VC_EXPECT(write_text(tt_cache_file(), content, len) == 0, "write");
  vc_cache_forget();
  tt_capture_begin();
  has_entry(6);
  err = tt_capture_end();
  VC_EXPECT(strstr(err, "corrupt") == NULL, "%s: reported twice: %s", what,
            err);
  free(err);
}

static void test_corrupt_files(void) {
  corrupt_case("garbage", "\x01\x02garbage\xff\n", 11, 0);
  const size_t half = strlen(k_valid) / 2;
  corrupt_case("truncated", k_valid, half, 0);
  corrupt_case("corrupt at save", "voxconv-tuning-cache 1\nentry\n", 29, 1);
  /* The snapshot API says what is wrong and leaves the file alone. */
  tt_fresh_cache_dir();
  VC_EXPECT(write_text(tt_cache_file(), k_valid, half) == 0, "write");
  voxconv_cache_t *c = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &c), VOXCONV_STATUS_IO_ERROR);
  VC_EXPECT(strstr(voxconv_get_last_error(NULL), "line") &&
                strstr(voxconv_get_last_error(NULL), tt_dir),
            "open message: %s", voxconv_get_last_error(NULL));
  VC_EXPECT(count_files(tt_dir, ".corrupt-") == 0, "open sets nothing aside");
}

/* ---- many processes -------------------------------------------------------
 */
#define N_PROCS 8
#define N_UPDATES 200

static void child_updates(int child) {
  vc_cache_forget();
  for (int j = 0; j < N_UPDATES; j++) {
    put_one("sparse_conv_forward", 1000 * (child + 1) + j, "solo", j + 1);
    char algo[32];
    snprintf(algo, sizeof algo, "child%d", child);
    put_one("sparse_conv_forward", 7, algo, j + 1); /* one shared entry */
    if (j % 10 == 9 && voxconv_cache_flush() != VOXCONV_STATUS_SUCCESS)
      _exit(3);
  }
  exit(0); /* the rest is saved at exit */
}

static void test_concurrent_processes(void) {
  tt_fresh_cache_dir();
  fflush(stdout);
  fflush(stderr);
  pid_t pids[N_PROCS];
  for (int c = 0; c < N_PROCS; c++) {
    pids[c] = fork();
    if (pids[c] == 0)
      child_updates(c);
  }
  for (int c = 0; c < N_PROCS; c++) {
    int status = 0;
    waitpid(pids[c], &status, 0);
    VC_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child %d status %d", c, status);
  }
  voxconv_cache_t *snap = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &snap),
                   VOXCONV_STATUS_SUCCESS);
  const int n = voxconv_cache_entry_count(snap);
  VC_EXPECT(n == N_PROCS * N_UPDATES + 1, "%d entries, want %d", n,
            N_PROCS * N_UPDATES + 1);
  char *seen = (char *)calloc(N_PROCS * N_UPDATES, 1);
  int shared_ok = 0;
  for (int i = 0; i < n; i++) {
    voxconv_cache_entry_info_t e;
    voxconv_cache_get_entry(snap, i, &e);
    if (e.cin == 7) {
      /* every child's row, each with its last value */
      int good = e.n_candidates == N_PROCS;
      for (int r = 0; good && r < e.n_candidates; r++) {
        voxconv_cache_candidate_t cand;
        voxconv_cache_get_candidate(snap, i, r, &cand);
        good = strncmp(cand.algo, "child", 5) == 0 && cand.time_ms == N_UPDATES;
      }
      shared_ok = good;
      continue;
    }
    const int64_t child = e.cin / 1000 - 1, j = e.cin % 1000;
    if (child >= 0 && child < N_PROCS && j < N_UPDATES)
      seen[child * N_UPDATES + j]++;
  }
  int missing = 0, doubled = 0;
  for (int i = 0; i < N_PROCS * N_UPDATES; i++) {
    missing += seen[i] == 0;
    doubled += seen[i] > 1;
  }
  VC_EXPECT(missing == 0 && doubled == 0, "%d lost, %d doubled entries",
            missing, doubled);
  VC_EXPECT(shared_ok, "the shared entry lost a child's last update");
  VC_EXPECT(count_files(tt_dir, ".tmp.") == 0, "temporary files left");
  free(seen);
  voxconv_cache_close(snap);
}

/* ---- killed mid-save --------------------------------------------------------
 */
static void test_killed_mid_save(void) {
  int rounds_mid_write = 0;
  for (int round = 0; round < 2; round++) {
    tt_fresh_cache_dir();
    int fds[2];
    fflush(stdout);
    fflush(stderr);
    if (pipe(fds) != 0) {
      VC_EXPECT(0, "pipe");
      return;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      vc_cache_forget();
      vc_cache_test_slow_write_us = 300000; /* 0.3 s inside each write */
      for (int i = 0;; i++) {
        put_one("sparse_conv_forward", 100 + i, "k", 1.0 + i);
        if (voxconv_cache_flush() != VOXCONV_STATUS_SUCCESS)
          _exit(3);
        if (write(fds[1], &i, sizeof i) != (ssize_t)sizeof i)
          _exit(4);
      }
    }
    close(fds[1]);
    int last = -1, got;
    while (last < 1 && read(fds[0], &got, sizeof got) == (ssize_t)sizeof got)
      last = got;
    /* The next save is now writing its temporary file: kill it there. */
    usleep(150000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    VC_EXPECT(WIFSIGNALED(status), "child was not killed (status %d)", status);
    rounds_mid_write += count_files(tt_dir, ".tmp.") > 0;
    voxconv_cache_t *snap = NULL;
    VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &snap),
                     VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(voxconv_cache_entry_count(snap) >= last + 1,
              "round %d: %d entries readable, %d were saved", round,
              voxconv_cache_entry_count(snap), last + 1);
    voxconv_cache_close(snap);
    /* And the next writer is not blocked by the dead one's lock. */
    vc_cache_forget();
    put_one("sparse_conv_forward", 9, "after", 1.0);
    VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
    VC_EXPECT(has_entry(9) && has_entry(100), "after the kill");
    VC_EXPECT(count_files(tt_dir, ".tmp.") == 0,
              "round %d: the killed writer's temporary file outlived the next "
              "save",
              round);
  }
  VC_EXPECT(rounds_mid_write >= 1,
            "no round killed a save in the middle of its write");
}

/* ---- issue 22 item 8: file edge cases ----------------------------------
 */
static int snapshot_count(const char *path) {
  voxconv_cache_t *c = NULL;
  if (voxconv_cache_open(path, &c) != VOXCONV_STATUS_SUCCESS)
    return -1;
  const int n = voxconv_cache_entry_count(c);
  voxconv_cache_close(c);
  return n;
}

static int is_symlink(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* A cache file that is a symbolic link (dotfiles kept elsewhere) keeps
 * being one: saves go to the link's target, through every link of a
 * chain, relative or absolute, existing or not yet. */
static void test_symlinked_file(void) {
  static const char *const targets[3] = {"real/cache.txt", "ABS", "missing"};
  for (int t = 0; t < 3; t++) {
    tt_fresh_cache_dir();
    char real_dir[512], target[600], via[600];
    snprintf(real_dir, sizeof real_dir, "%s/real", tt_dir);
    mkdir(real_dir, 0755);
    snprintf(target, sizeof target, "%s/%s", tt_dir,
             t == 1 ? "real/abs.txt" : targets[t]);
    if (t == 0) /* relative link, target with entries already */
      VC_EXPECT(write_text(target, k_valid, strlen(k_valid)) == 0, "write");
    /* t == 1: a chain file -> via -> target, absolute; t == 2: dangling */
    const char *link_to = t == 0 ? targets[0] : target;
    if (t == 1) {
      snprintf(via, sizeof via, "%s/via", tt_dir);
      VC_EXPECT(symlink(target, via) == 0, "symlink via");
      link_to = via;
    }
    VC_EXPECT(symlink(link_to, tt_cache_file()) == 0, "symlink");
    const int base = t == 0 ? 1 : 0;
    for (int round = 0; round < 2; round++) {
      put_one("sparse_conv_forward", 40 + round, "k", 1.0);
      VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
      VC_EXPECT(is_symlink(tt_cache_file()),
                "case %d round %d: the link was replaced by a file", t, round);
      VC_EXPECT(snapshot_count(target) == base + round + 1,
                "case %d round %d: the target holds %d entries, want %d", t,
                round, snapshot_count(target), base + round + 1);
    }
    VC_EXPECT(t != 1 || is_symlink(via), "the chain's middle link is kept");
    VC_EXPECT(count_files(tt_dir, ".tmp.") == 0 &&
                  count_files(real_dir, ".tmp.") == 0,
              "case %d: temporary files left", t);
    /* clear deletes what the link points to and keeps the link */
    VC_EXPECT_STATUS(NULL, voxconv_cache_clear(), VOXCONV_STATUS_SUCCESS);
    struct stat st;
    VC_EXPECT(is_symlink(tt_cache_file()) && stat(target, &st) != 0,
              "case %d: clear through the link", t);
  }
}

/* Runs fn in a child as an unprivileged user when this process is root
 * (root reads any file, so EACCES needs another user); the child's failed
 * checks fail the test. */
static void run_unprivileged(void (*fn)(void), const char *what) {
  if (geteuid() != 0) {
    fn();
    return;
  }
  chmod(tt_dir, 0777);
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0)
      _exit(77);
    vc_test_failures = 0;
    fn();
    _exit(vc_test_failures ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  VC_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) != 1,
            "%s: the unprivileged child failed (status %d)", what, status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    printf("%s: skipped (cannot switch to uid 65534)\n", what);
}

static void unreadable_scenario(void) {
  vc_cache_forget();
  struct stat before;
  stat(tt_cache_file(), &before);
  tt_capture_begin();
  put_one("sparse_conv_forward", 5, "mine", 1.0);
  const voxconv_status_t st = voxconv_cache_flush();
  char *err = tt_capture_end();
  VC_EXPECT(st == VOXCONV_STATUS_IO_ERROR, "flush of an unreadable file: %s",
            voxconv_status_string(st));
  VC_EXPECT(strstr(voxconv_get_last_error(NULL), tt_cache_file()) &&
                strstr(voxconv_get_last_error(NULL), "Permission denied"),
            "flush message: %s", voxconv_get_last_error(NULL));
  VC_EXPECT(strstr(err, "Permission denied") && !strstr(err, "corrupt"),
            "warning: %s", err);
  free(err);
  VC_EXPECT(has_entry(5), "the result stays in memory");
  VC_EXPECT(count_files(tt_dir, ".corrupt-") == 0, "set aside as corrupt");
  struct stat after;
  VC_EXPECT(stat(tt_cache_file(), &after) == 0 &&
                after.st_ino == before.st_ino &&
                after.st_size == before.st_size,
            "the unreadable file was replaced");
  vc_cache_forget();
}

/* A file this user may not read is not corrupt: it stays where it is (its
 * entries belong to someone), the problem is reported, and results stay
 * in memory. */
static void test_unreadable_file(void) {
  tt_fresh_cache_dir();
  VC_EXPECT(write_text(tt_cache_file(), k_valid, strlen(k_valid)) == 0, "w");
  chmod(tt_cache_file(), 0200);
  run_unprivileged(unreadable_scenario, "unreadable cache file");
  chmod(tt_cache_file(), 0644);
  VC_EXPECT(snapshot_count(tt_cache_file()) == 1, "the file is intact");
}

/* The cache folder is a regular file: said so, not "corrupt". */
static void test_folder_is_a_file(void) {
  tt_fresh_cache_dir();
  char file_dir[600];
  snprintf(file_dir, sizeof file_dir, "%s/not-a-dir", tt_dir);
  VC_EXPECT(write_text(file_dir, "x\n", 2) == 0, "write");
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", file_dir, 1);
  vc_cache_forget();
  tt_capture_begin();
  put_one("sparse_conv_forward", 6, "mine", 1.0);
  const voxconv_status_t st = voxconv_cache_flush();
  char *err = tt_capture_end();
  char want[700];
  snprintf(want, sizeof want, "%s is not a directory", file_dir);
  VC_EXPECT(st == VOXCONV_STATUS_IO_ERROR &&
                strstr(voxconv_get_last_error(NULL), want),
            "flush: %s: %s", voxconv_status_string(st),
            voxconv_get_last_error(NULL));
  VC_EXPECT(strstr(err, want) && !strstr(err, "corrupt") &&
                !strstr(err, "overwritten"),
            "warning: %s", err);
  free(err);
  VC_EXPECT(has_entry(6), "the result stays in memory");
  voxconv_cache_t *c = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &c), VOXCONV_STATUS_IO_ERROR);
  VC_EXPECT(strstr(voxconv_get_last_error(NULL), want), "open: %s",
            voxconv_get_last_error(NULL));
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", tt_dir, 1);
  vc_cache_forget();
}

/* A location longer than PATH_MAX can never be opened: flush says so
 * instead of returning SUCCESS, and results stay in memory. */
static void test_path_too_long(void) {
  tt_fresh_cache_dir();
  size_t n = (size_t)PATH_MAX + 200;
  char *dir = (char *)malloc(n + 1);
  int at = snprintf(dir, n + 1, "%s", tt_dir);
  while ((size_t)at < n)
    at += snprintf(dir + at, n + 1 - (size_t)at, "/deep");
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", dir, 1);
  vc_cache_forget();
  tt_capture_begin();
  put_one("sparse_conv_forward", 7, "mine", 1.0);
  const voxconv_status_t st = voxconv_cache_flush();
  char *err = tt_capture_end();
  VC_EXPECT(st == VOXCONV_STATUS_IO_ERROR &&
                strstr(voxconv_get_last_error(NULL), "PATH_MAX"),
            "flush: %s: %s", voxconv_status_string(st),
            voxconv_get_last_error(NULL));
  VC_EXPECT(strstr(err, "PATH_MAX"), "a warning: %s", err);
  free(err);
  VC_EXPECT(has_entry(7), "the result stays in memory");
  char path[64];
  VC_EXPECT_STATUS(NULL, voxconv_cache_path(path, sizeof path),
                   VOXCONV_STATUS_IO_ERROR);
  VC_EXPECT(strstr(voxconv_get_last_error(NULL), "PATH_MAX"), "path: %s",
            voxconv_get_last_error(NULL));
  free(dir);
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", tt_dir, 1);
  vc_cache_forget();
}

static void touch_aged(const char *name, long age_s) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", tt_dir, name);
  write_text(path, "partial", 7);
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= age_s;
  ts[1] = ts[0];
  utimensat(AT_FDCWD, path, ts, 0);
}

static int exists_in_dir(const char *name) {
  char path[600];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", tt_dir, name);
  return stat(path, &st) == 0;
}

/* Temporary files of writers killed mid-save are removed by the next save:
 * those of a process that is gone, and any older than ten minutes (the pid
 * may have been reused); a live writer's recent one stays. */
static void test_stale_temporaries(void) {
  tt_fresh_cache_dir();
  fflush(stdout);
  const pid_t gone = fork();
  if (gone == 0)
    _exit(0);
  waitpid(gone, NULL, 0);
  char dead[128], old_live[128], live[128];
  snprintf(dead, sizeof dead, "%s.tmp.%ld.0", VC_CACHE_FILE_NAME, (long)gone);
  snprintf(old_live, sizeof old_live, "%s.tmp.%ld.3", VC_CACHE_FILE_NAME,
           (long)getppid());
  snprintf(live, sizeof live, "%s.tmp.%ld.4", VC_CACHE_FILE_NAME,
           (long)getppid());
  touch_aged(dead, 0);
  touch_aged(old_live, 3600);
  touch_aged(live, 0);
  touch_aged("other.txt.tmp.1.0", 3600);            /* not ours */
  touch_aged(VC_CACHE_FILE_NAME ".tmp.x1.0", 3600); /* no pid */
  put_one("sparse_conv_forward", 8, "k", 1.0);
  VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(!exists_in_dir(dead), "a dead writer's temporary file is kept");
  VC_EXPECT(!exists_in_dir(old_live), "an hour-old temporary file is kept");
  VC_EXPECT(exists_in_dir(live), "a live writer's recent file was removed");
  VC_EXPECT(exists_in_dir("other.txt.tmp.1.0") &&
                exists_in_dir(VC_CACHE_FILE_NAME ".tmp.x1.0"),
            "files that are not the cache's temporaries were removed");
}

/* ---- clear, path, snapshot API errors ---------------------------------------
 */
static void test_path_clear_api(void) {
  tt_fresh_cache_dir();
  char path[512];
  VC_EXPECT_STATUS(NULL, voxconv_cache_path(path, sizeof path),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(strcmp(path, tt_cache_file()) == 0, "path %s", path);
  VC_EXPECT_STATUS(NULL, voxconv_cache_path(path, 8),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(NULL, voxconv_cache_path(NULL, 8),
                   VOXCONV_STATUS_NULL_POINTER);
  /* Default location under HOME. */
  char *saved = strdup(getenv("VOXCONV_BENCHMARK_CACHE_DIR"));
  const char *home = getenv("HOME");
  char *saved_home = home ? strdup(home) : NULL;
  unsetenv("VOXCONV_BENCHMARK_CACHE_DIR");
  setenv("HOME", "/nonexistent-home", 1);
  VC_EXPECT_STATUS(NULL, voxconv_cache_path(path, sizeof path),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(
      strcmp(path, "/nonexistent-home/.cache/voxconv/tuning-cache-v1.txt") == 0,
      "default path %s", path);
  if (saved_home)
    setenv("HOME", saved_home, 1);
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", saved, 1);
  free(saved);
  free(saved_home);

  /* clear */
  put_one("sparse_conv_forward", 11, "a", 1);
  VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
  struct stat st;
  VC_EXPECT(stat(tt_cache_file(), &st) == 0, "file written");
  VC_EXPECT_STATUS(NULL, voxconv_cache_clear(), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(stat(tt_cache_file(), &st) != 0, "file removed");
  VC_EXPECT(!has_entry(11), "memory forgotten");
  VC_EXPECT_STATUS(NULL, voxconv_cache_clear(), VOXCONV_STATUS_SUCCESS);
  /* flush with nothing to do writes nothing */
  VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(stat(tt_cache_file(), &st) != 0, "no file for nothing");

  /* An unwritable location is an IO_ERROR naming it. */
  setenv("VOXCONV_BENCHMARK_CACHE_DIR", "/proc/voxconv-no-such-dir", 1);
  put_one("sparse_conv_forward", 12, "a", 1);
  VC_EXPECT_STATUS(NULL, voxconv_cache_flush(), VOXCONV_STATUS_IO_ERROR);
  VC_EXPECT(strstr(voxconv_get_last_error(NULL), "/proc/voxconv-no-such-dir"),
            "%s", voxconv_get_last_error(NULL));
  vc_cache_forget();
  tt_fresh_cache_dir();

  /* snapshot errors */
  voxconv_cache_t *c = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &c), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(voxconv_cache_entry_count(c) == 0, "missing file = empty");
  voxconv_cache_entry_info_t e;
  voxconv_cache_candidate_t cand;
  int count = -1;
  VC_EXPECT_STATUS(NULL, voxconv_cache_get_entry(c, 0, &e),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(NULL, voxconv_cache_get_candidate(c, 0, 0, &cand),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(NULL, voxconv_cache_recommend(c, 0, &cand, 1, &count),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  voxconv_cache_close(c);
  VC_EXPECT(write_text(tt_cache_file(), k_valid, strlen(k_valid)) == 0, "w");
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &c), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT_STATUS(NULL, voxconv_cache_get_candidate(c, 0, 3, &cand),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(NULL, voxconv_cache_get_candidate(c, 0, -1, &cand),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(NULL, voxconv_cache_get_candidate(c, 0, 0, NULL),
                   VOXCONV_STATUS_NULL_POINTER);
  VC_EXPECT_STATUS(NULL, voxconv_cache_recommend(c, 0, NULL, 2, &count),
                   VOXCONV_STATUS_INVALID_ARGUMENT);
  VC_EXPECT_STATUS(NULL, voxconv_cache_recommend(c, 0, &cand, 1, &count),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(count == 0, "one entry: no recommendation");
  VC_EXPECT_STATUS(NULL, voxconv_cache_get_candidate(c, 0, 0, &cand),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(strcmp(cand.algo, "mask_gemm") == 0 && cand.time_ms == 0.25 &&
                fabs(cand.max_rel - 1e-3) < 1e-9,
            "best candidate %s %g", cand.algo, cand.time_ms);
  voxconv_cache_close(c);
  VC_EXPECT_STATUS(NULL, voxconv_cache_close(NULL), VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(voxconv_cache_entry_count(NULL) == 0, "count(NULL)");
}

/* ---- recommended sets
 * --------------------------------------------------------- */
static void add_all_entry(vc_cache_db_t *db, const char *ns,
                          const vc_cache_key_t *k, const char *const *algos,
                          const double *ms, int n) {
  vc_cache_entry_t *e = vc_cache_db_upsert(db, ns, k);
  e->coverage = VC_COVER_ALL;
  for (int i = 0; i < n; i++) {
    vc_cache_row_t r = make_row(algos[i], "-", ms[i], "ok", 0);
    vc_cache_entry_put_row(e, &r);
  }
  vc_cache_entry_sort(e);
}

static void test_recommend(void) {
  vc_cache_db_t db;
  vc_cache_db_init(&db);
  const char *ns = "sparse_conv_forward";
  /* Three configurations of one family (cin, cout in (32, 64]):
   *   E1: A 1.00  B 1.03  C 2.00
   *   E2: B 1.00  A 1.20
   *   E3: C 1.00  A 1.04
   * Within 5%: A covers E1, E3; B covers E1, E2; C covers E3. Greedy with
   * ties broken by mean ratio: B (1.015) before A (1.08), then A (1.08)
   * before C (1.5). */
  const char *const a3[] = {"A", "B", "C"};
  const double e1[] = {1.00, 1.03, 2.00};
  vc_cache_key_t k1 = make_key("cuda:G:cc9.0", 64, 64);
  add_all_entry(&db, ns, &k1, a3, e1, 3);
  const char *const a2[] = {"B", "A"};
  const double e2[] = {1.00, 1.20};
  vc_cache_key_t k2 = make_key("cuda:G:cc9.0", 48, 64);
  add_all_entry(&db, ns, &k2, a2, e2, 2);
  const char *const a2b[] = {"C", "A"};
  const double e3[] = {1.00, 1.04};
  vc_cache_key_t k3 = make_key("cuda:G:cc9.0", 64, 40);
  add_all_entry(&db, ns, &k3, a2b, e3, 2);
  /* Not of the family: other device, other bucket, not an "all" search,
   * other accumulator. */
  const char *const z[] = {"Z"};
  const double z1[] = {0.1};
  vc_cache_key_t kz = make_key("cuda:Other:cc8.0", 64, 64);
  add_all_entry(&db, ns, &kz, z, z1, 1);
  kz = make_key("cuda:G:cc9.0", 128, 64);
  add_all_entry(&db, ns, &kz, z, z1, 1);
  kz = make_key("cuda:G:cc9.0", 60, 60);
  add_all_entry(&db, ns, &kz, z, z1, 1);
  db.entries[db.n - 1].coverage = VC_COVER_AUTO;
  kz = make_key("cuda:G:cc9.0", 60, 60);
  kz.acc = 1;
  add_all_entry(&db, ns, &kz, z, z1, 1);

  vc_cache_row_t out[8];
  vc_cache_key_t like = make_key("cuda:G:cc9.0", 33, 50);
  int n = vc_cache_recommend(&db, ns, &like, 0.05, 2, out, 8);
  VC_EXPECT(n == 2 && strcmp(out[0].algo, "B") == 0 &&
                strcmp(out[1].algo, "A") == 0,
            "recommended %d: %s %s", n, n > 0 ? out[0].algo : "",
            n > 1 ? out[1].algo : "");
  VC_EXPECT(n >= 1 && fabs(out[0].time_ms - 1.015) < 1e-9, "mean ratio %g",
            n >= 1 ? out[0].time_ms : -1);
  n = vc_cache_recommend(&db, ns, &like, 0.05, 2, out, 1);
  VC_EXPECT(n == 1 && strcmp(out[0].algo, "B") == 0, "capped at max");
  n = vc_cache_recommend(&db, ns, &like, 0.05, 4, out, 8);
  VC_EXPECT(n == 0, "fewer entries than min_entries");
  like = make_key("cuda:G:cc9.0", 200, 50);
  VC_EXPECT(vc_cache_recommend(&db, ns, &like, 0.05, 2, out, 8) == 0,
            "other bucket");
  /* With 25% slack A alone covers E1 (1.0), E2 (1.2) and E3 (1.04). */
  n = vc_cache_recommend(&db, ns, &k1, 0.25, 2, out, 8);
  VC_EXPECT(n == 1 && strcmp(out[0].algo, "A") == 0, "wider slack: %d", n);

  /* fp16-accumulator tiles (from "all" searches) are left out of an fp32
   * family's set, and the best is then the best fp32 tile. */
  {
    vc_cache_db_t d2;
    vc_cache_db_init(&d2);
    for (int i = 0; i < 2; i++) {
      vc_cache_key_t k = make_key("cuda:G:cc9.0", 64, 64 - 8 * i);
      vc_cache_entry_t *e = vc_cache_db_upsert(&d2, ns, &k);
      e->coverage = VC_COVER_ALL;
      vc_cache_row_t r16 =
          make_row("mg", "tile=1,accumulator_type=16", 0.5, "ok", 0.2);
      vc_cache_row_t r32 =
          make_row("mg", "tile=1,accumulator_type=32", 1.0, "ok", 0);
      vc_cache_row_t r32b =
          make_row("mg", "tile=2,accumulator_type=32", 1.04, "ok", 0);
      vc_cache_entry_put_row(e, &r16);
      vc_cache_entry_put_row(e, &r32);
      vc_cache_entry_put_row(e, &r32b);
      vc_cache_entry_sort(e);
    }
    vc_cache_key_t fam32 = make_key("cuda:G:cc9.0", 64, 64);
    n = vc_cache_recommend(&d2, ns, &fam32, 0.05, 2, out, 8);
    VC_EXPECT(n == 1 &&
                  strcmp(out[0].params, "tile=1,accumulator_type=32") == 0,
              "fp32 family: %d, %s", n, n ? out[0].params : "");
    vc_cache_row_t probe = make_row("x", "a=1,accumulator_type=1", 1, "ok", 0);
    VC_EXPECT(vc_cache_row_f16acc(&probe), "value 1 is fp16");
    probe = make_row("x", "xaccumulator_type=16", 1, "ok", 0);
    VC_EXPECT(!vc_cache_row_f16acc(&probe), "only the exact parameter name");
    probe = make_row("x", "accumulator_type=160", 1, "ok", 0);
    VC_EXPECT(!vc_cache_row_f16acc(&probe), "only the exact value");
    vc_cache_db_free(&d2);
  }

  /* Through a file and the public API, as the analyze tool sees it. */
  tt_fresh_cache_dir();
  size_t len = 0;
  char *text = vc_cache_db_serialize(&db, &len);
  write_text(tt_cache_file(), text, len);
  free(text);
  voxconv_cache_t *c = NULL;
  VC_EXPECT_STATUS(NULL, voxconv_cache_open(NULL, &c), VOXCONV_STATUS_SUCCESS);
  voxconv_cache_candidate_t cands[8];
  int count = 0;
  VC_EXPECT_STATUS(NULL, voxconv_cache_recommend(c, 0, cands, 8, &count),
                   VOXCONV_STATUS_SUCCESS);
  VC_EXPECT(count == 2 && strcmp(cands[0].algo, "B") == 0 &&
                strcmp(cands[1].algo, "A") == 0,
            "public recommend: %d", count);
  voxconv_cache_close(c);
  vc_cache_db_free(&db);
}

/* auto takes the recorded reduced set (plus each algorithm's default). */
static void test_auto_uses_recommendation(void) {
  tt_fresh_cache_dir();
  static const int fakes[] = {TT_TILES, -1};
  tt_use_fakes(fakes);
  tt_virtual_clock(1);
  tt_problem_t t;
  if (tt_problem_make(&t, 7, 8, 8, VOXCONV_DTYPE_F32, 1) != 0) {
    VC_EXPECT(0, "problem setup failed");
    return;
  }
  vc_conv_problem_t p = tt_as_problem(&t, VOXCONV_PASS_CONV_FWD);
  vc_cache_key_t key;
  vc_tune_make_key(t.h, &p, &key);
  /* Two recorded "all" searches of the same family (other sizes) where
   * fake_tiles delay_ms=3 came out best. */
  for (int i = 0; i < 2; i++) {
    vc_cache_entry_t e;
    memset(&e, 0, sizeof e);
    snprintf(e.ns, sizeof e.ns, "sparse_conv_forward");
    e.key = key;
    e.key.nin = e.key.nout = 20 + i;
    e.coverage = VC_COVER_ALL;
    vc_cache_row_t r1 = make_row("fake_tiles", "delay_ms=3", 1.0, "ok", 0);
    vc_cache_row_t r2 = make_row("fake_tiles", "delay_ms=1", 1.5, "ok", 0);
    vc_cache_entry_put_row(&e, &r1);
    vc_cache_entry_put_row(&e, &r2);
    vc_cache_put(&e);
    vc_cache_entry_free(&e);
  }
  voxconv_conv_options_t opt = {0}; /* auto */
  VC_EXPECT_STATUS(t.h, tt_run(&t, VOXCONV_PASS_CONV_FWD, &opt),
                   VOXCONV_STATUS_SUCCESS);
  vc_cache_entry_t e;
  VC_EXPECT(vc_cache_get("sparse_conv_forward", &key, 0, &e), "tuned entry");
  VC_EXPECT(
      vc_cache_entry_find_row(&e, "fake_tiles", "delay_ms=3") &&
          vc_cache_entry_find_row(&e, "fake_tiles", "delay_ms=6") &&
          vc_cache_entry_find_row(&e, "cpu_gather_gemm", "block_rows=0") &&
          !vc_cache_entry_find_row(&e, "fake_tiles", "delay_ms=1") &&
          e.n_rows == 3 && (e.coverage & VC_COVER_AUTO),
      "auto pool = recorded set + defaults: %d rows", e.n_rows);
  vc_cache_entry_free(&e);
  tt_problem_free(&t);
  tt_virtual_clock(0);
  tt_use_fakes(NULL);
}

/* Key i of test_db_index: distinct per i, sharing devices and cin. */
static vc_cache_key_t index_key(int i) {
  vc_cache_key_t k;
  memset(&k, 0, sizeof k);
  snprintf(k.device, sizeof k.device, "dev%d", i % 7);
  k.cin = 8 + (i % 97);
  k.cout = i;
  k.kvol = 27;
  return k;
}

/* The in-memory index: thousands of distinct keys (several index rebuilds),
 * each found as the entry upsert returned, same-hash-prefix neighbours and
 * absent keys not found, keys differing only in namespace kept apart. */
static void test_db_index(void) {
  vc_cache_db_t db;
  vc_cache_db_init(&db);
  const int n = 5000;
  vc_cache_entry_t **got =
      (vc_cache_entry_t **)malloc(sizeof(vc_cache_entry_t *) * (size_t)n);
  int ok = 1;
  for (int i = 0; i < n; i++) {
    vc_cache_key_t k = index_key(i);
    got[i] = vc_cache_db_upsert(
        &db, i % 2 ? "sparse_conv_forward" : "sparse_conv_dgrad", &k);
    ok &= got[i] != NULL;
  }
  VC_EXPECT(ok && db.n == n, "%d entries after %d upserts", db.n, n);
  int found = 0, absent_found = 0, wrong_ns = 0;
  for (int i = 0; i < n; i++) {
    vc_cache_key_t k = index_key(i);
    const char *ns = i % 2 ? "sparse_conv_forward" : "sparse_conv_dgrad";
    const char *other = i % 2 ? "sparse_conv_dgrad" : "sparse_conv_forward";
    /* entries may have moved (realloc): compare contents, not pointers */
    vc_cache_entry_t *e = vc_cache_db_find(&db, ns, &k);
    found += e && e->key.cout == i && strcmp(e->ns, ns) == 0;
    wrong_ns += vc_cache_db_find(&db, other, &k) != NULL;
    k.cout = n + i; /* never inserted */
    absent_found += vc_cache_db_find(&db, ns, &k) != NULL;
  }
  VC_EXPECT(found == n, "%d of %d keys found", found, n);
  VC_EXPECT(absent_found == 0, "%d absent keys found", absent_found);
  VC_EXPECT(wrong_ns == 0, "%d keys found under the other namespace", wrong_ns);
  /* upsert of an existing key returns the same entry, adds nothing */
  vc_cache_key_t k0;
  memset(&k0, 0, sizeof k0);
  snprintf(k0.device, sizeof k0.device, "dev%d", 0);
  k0.cin = 8;
  k0.cout = 0;
  k0.kvol = 27;
  vc_cache_entry_t *again = vc_cache_db_upsert(&db, "sparse_conv_dgrad", &k0);
  VC_EXPECT(again == vc_cache_db_find(&db, "sparse_conv_dgrad", &k0) &&
                db.n == n,
            "re-upsert added an entry (n=%d)", db.n);
  free(got);
  vc_cache_db_free(&db);
  VC_EXPECT(db.n == 0 && db.index == NULL, "free resets the index");
}

int main(void) {
  vc_test_init("test_tune_cache");
  test_db_index();
  setenv("VOXCONV_AUTOTUNE_LOG", "0", 1);
  test_round_trip();
  test_extreme_measures();
  test_rank_survives_round_trip();
  test_reader();
  test_corrupt_files();
  test_concurrent_processes();
  test_killed_mid_save();
  test_path_clear_api();
  test_symlinked_file();
  test_unreadable_file();
  test_folder_is_a_file();
  test_path_too_long();
  test_stale_temporaries();
  test_recommend();
  test_auto_uses_recommendation();
  tt_cleanup();
  return vc_test_finish();
}
