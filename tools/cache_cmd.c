/* `voxconv cache inspect|analyze|clear|path` and `voxconv tune`: the tools of
 * the persistent tuning cache. They read the cache through the public
 * snapshot API (voxconv_cache_open and friends, voxconv.h), so what they
 * show is exactly what the library reads; `tune` runs the bench network
 * once with the chosen search space so that every layer gets tuned. */
#include "bench.h"
#include "tool_common.h"
#include "tool_options.h"

#include <stdarg.h>
#include <strings.h>
#include <sys/stat.h>

int vc_tool_cache_main(int argc, char **argv);
int vc_tool_tune_main(int argc, char **argv);

/* ---- helpers ------------------------------------------------------------ */
static int fail(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "voxconv %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return VT_EXIT_FAIL;
}

static int ci_contains(const char *hay, const char *needle) {
  const size_t n = strlen(needle);
  if (n == 0)
    return 1;
  for (const char *p = hay; *p; p++)
    if (strncasecmp(p, needle, n) == 0)
      return 1;
  return 0;
}

static int ns_matches(const char *ns, const char *want) {
  if (!want)
    return 1;
  const size_t n = strlen(want);
  return strcmp(ns, want) == 0 || (strncmp(ns, want, n) == 0 && ns[n] == '/');
}

static void format_ms(double ms, char *buf, size_t size) {
  if (ms < 0)
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%.4g ms", ms);
}

static int open_cache(const char *cmd, const char *file, voxconv_cache_t **c,
                      char *path, size_t path_size) {
  if (file) {
    snprintf(path, path_size, "%s", file);
  } else if (voxconv_cache_path(path, path_size) != VOXCONV_STATUS_SUCCESS) {
    return fail(cmd, "%s", voxconv_get_last_error(NULL));
  }
  if (voxconv_cache_open(path, c) != VOXCONV_STATUS_SUCCESS)
    return fail(cmd, "%s", voxconv_get_last_error(NULL));
  return VT_EXIT_OK;
}

/* ---- inspect ------------------------------------------------------------ */
static int entry_matches_search(const voxconv_cache_t *c, int i,
                                const voxconv_cache_entry_info_t *e,
                                char **terms, int n_terms) {
  for (int t = 0; t < n_terms; t++) {
    int hit = ci_contains(e->namespace_name, terms[t]) ||
              ci_contains(e->key, terms[t]);
    for (int r = 0; !hit && r < e->n_candidates; r++) {
      voxconv_cache_candidate_t cand;
      if (voxconv_cache_get_candidate(c, i, r, &cand) ==
              VOXCONV_STATUS_SUCCESS &&
          (ci_contains(cand.algo, terms[t]) ||
           ci_contains(cand.params, terms[t])))
        hit = 1;
    }
    if (!hit)
      return 0;
  }
  return 1;
}

typedef struct ns_count {
  char name[96];
  int n;
} ns_count_t;

static int cmd_inspect(int argc, char **argv) {
  vt_cache_inspect_opts_t opts;
  const int parsed = vt_cache_inspect_parse(argc, argv, &opts, stdout, stderr);
  if (parsed != VT_PARSED)
    return parsed;
  const char *want_ns = opts.want_ns, *file = opts.file;
  const long top_k = opts.top_k;
  char **terms = opts.terms;
  const int n_terms = opts.n_terms;
  char path[4096];
  voxconv_cache_t *c = NULL;
  int rc = open_cache("cache inspect", file, &c, path, sizeof path);
  if (rc != VT_EXIT_OK) {
    free(terms);
    return rc;
  }
  struct stat st;
  printf("cache file : %s\n", path);
  if (stat(path, &st) == 0) {
    char when[64];
    struct tm tm;
    localtime_r(&st.st_mtime, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", &tm);
    printf("size       : %lld bytes\nmodified   : %s\n", (long long)st.st_size,
           when);
  } else {
    printf("size       : (no file yet)\n");
  }
  const int n = voxconv_cache_entry_count(c);
  printf("entries    : %d\n", n);

  /* The namespace tree: selection namespaces with their per-algorithm
   * parameter-tuning children. */
  ns_count_t *counts = (ns_count_t *)calloc((size_t)n + 1, sizeof *counts);
  int n_ns = 0;
  for (int i = 0; counts && i < n; i++) {
    voxconv_cache_entry_info_t e;
    if (voxconv_cache_get_entry(c, i, &e) != VOXCONV_STATUS_SUCCESS ||
        !ns_matches(e.namespace_name, want_ns))
      continue;
    int j = 0;
    while (j < n_ns && strcmp(counts[j].name, e.namespace_name) != 0)
      j++;
    if (j == n_ns)
      snprintf(counts[n_ns++].name, sizeof counts[0].name, "%s",
               e.namespace_name);
    counts[j].n++;
  }
  printf("\nnamespaces%s%s:\n", want_ns ? " under " : "",
         want_ns ? want_ns : "");
  for (int j = 0; j < n_ns; j++) {
    if (strchr(counts[j].name, '/'))
      continue;
    printf("  %-40s %6d entr%s\n", counts[j].name, counts[j].n,
           counts[j].n == 1 ? "y" : "ies");
    const size_t len = strlen(counts[j].name);
    for (int k = 0; k < n_ns; k++)
      if (strncmp(counts[k].name, counts[j].name, len) == 0 &&
          counts[k].name[len] == '/')
        printf("    %-38s %6d entr%s\n", counts[k].name + len + 1, counts[k].n,
               counts[k].n == 1 ? "y" : "ies");
  }
  /* Children whose parent has no entry of its own. */
  for (int k = 0; k < n_ns; k++) {
    const char *slash = strchr(counts[k].name, '/');
    if (!slash)
      continue;
    int parent = 0;
    for (int j = 0; j < n_ns; j++)
      if (!strchr(counts[j].name, '/') &&
          strlen(counts[j].name) == (size_t)(slash - counts[k].name) &&
          strncmp(counts[j].name, counts[k].name,
                  (size_t)(slash - counts[k].name)) == 0)
        parent = 1;
    if (!parent)
      printf("  %-40s %6d entr%s\n", counts[k].name, counts[k].n,
             counts[k].n == 1 ? "y" : "ies");
  }
  free(counts);

  int shown = 0;
  for (int i = 0; i < n; i++) {
    voxconv_cache_entry_info_t e;
    if (voxconv_cache_get_entry(c, i, &e) != VOXCONV_STATUS_SUCCESS ||
        !ns_matches(e.namespace_name, want_ns) ||
        !entry_matches_search(c, i, &e, terms, n_terms))
      continue;
    shown++;
    printf("\n[%s] searched=%s\n  %s\n", e.namespace_name, e.searched, e.key);
    const int limit =
        top_k > 0 && top_k < e.n_candidates ? (int)top_k : e.n_candidates;
    for (int r = 0; r < limit; r++) {
      voxconv_cache_candidate_t cand;
      if (voxconv_cache_get_candidate(c, i, r, &cand) != VOXCONV_STATUS_SUCCESS)
        break;
      char ms[32], rel[32];
      format_ms(cand.time_ms, ms, sizeof ms);
      if (cand.max_rel >= 0)
        snprintf(rel, sizeof rel, "max_rel %.2e", cand.max_rel);
      else
        snprintf(rel, sizeof rel, "max_rel -");
      printf("  %3d. %-24s %-36s %12s  %-10s %s\n", r + 1, cand.algo,
             cand.params, ms, cand.status, rel);
    }
    if (limit < e.n_candidates)
      printf("       ... %d more\n", e.n_candidates - limit);
  }
  printf("\n%d of %d entries shown\n", shown, n);
  voxconv_cache_close(c);
  free(terms);
  return VT_EXIT_OK;
}

/* ---- analyze ------------------------------------------------------------ */
typedef struct stat_row {
  char name[200]; /* algo or "algo params" */
  int wins, top3, seen;
} stat_row_t;

typedef struct stat_table {
  stat_row_t *rows;
  int n, cap;
} stat_table_t;

static stat_row_t *stat_get(stat_table_t *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (strcmp(t->rows[i].name, name) == 0)
      return &t->rows[i];
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 16;
    stat_row_t *nr = (stat_row_t *)realloc(t->rows, (size_t)cap * sizeof *nr);
    if (!nr)
      return NULL;
    t->rows = nr;
    t->cap = cap;
  }
  stat_row_t *r = &t->rows[t->n++];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  return r;
}

static int stat_cmp(const void *a, const void *b) {
  const stat_row_t *x = (const stat_row_t *)a, *y = (const stat_row_t *)b;
  if (x->wins != y->wins)
    return y->wins - x->wins;
  if (x->top3 != y->top3)
    return y->top3 - x->top3;
  return strcmp(x->name, y->name);
}

typedef struct out_ctx {
  FILE *f;
  int md;
} out_ctx_t;

static void heading(out_ctx_t *o, int level, const char *text) {
  if (o->md)
    fprintf(o->f, "\n%s %s\n\n", level == 1 ? "##" : "###", text);
  else
    fprintf(o->f, "\n%s%s\n", level == 1 ? "== " : "-- ", text);
}

static void table_head(out_ctx_t *o, const char *c1, const char *c2,
                       const char *c3, const char *c4) {
  if (o->md)
    fprintf(o->f, "| %s | %s | %s | %s |\n|---|---:|---:|---:|\n", c1, c2, c3,
            c4);
  else
    fprintf(o->f, "  %-52s %8s %8s %8s\n", c1, c2, c3, c4);
}

static void table_row(out_ctx_t *o, const char *c1, const char *c2,
                      const char *c3, const char *c4) {
  if (o->md)
    fprintf(o->f, "| %s | %s | %s | %s |\n", c1, c2, c3, c4);
  else
    fprintf(o->f, "  %-52s %8s %8s %8s\n", c1, c2, c3, c4);
}

static void print_rates(out_ctx_t *o, stat_table_t *t, int n_configs,
                        const char *what) {
  qsort(t->rows, (size_t)t->n, sizeof t->rows[0], stat_cmp);
  table_head(o, what, "wins", "win %", "top-3 %");
  for (int i = 0; i < t->n; i++) {
    char w[32], wp[32], tp[32];
    snprintf(w, sizeof w, "%d", t->rows[i].wins);
    snprintf(wp, sizeof wp, "%.1f", 100.0 * t->rows[i].wins / n_configs);
    snprintf(tp, sizeof tp, "%.1f", 100.0 * t->rows[i].top3 / n_configs);
    table_row(o, t->rows[i].name, w, wp, tp);
  }
}

/* Wins grouped by a label (channel pair, kernel volume, size). */
typedef struct group_row {
  long long order[2]; /* numeric sort key of the label */
  char label[64];
  char winner[200];
  int wins, configs;
} group_row_t;

static void group_add(group_row_t **rows, int *n, int *cap, const char *label,
                      long long o1, long long o2, const char *winner) {
  for (int i = 0; i < *n; i++)
    if (strcmp((*rows)[i].label, label) == 0 &&
        strcmp((*rows)[i].winner, winner) == 0) {
      (*rows)[i].wins++;
      return;
    }
  if (*n == *cap) {
    int c = *cap ? *cap * 2 : 32;
    group_row_t *nr = (group_row_t *)realloc(*rows, (size_t)c * sizeof *nr);
    if (!nr)
      return;
    *rows = nr;
    *cap = c;
  }
  group_row_t *r = &(*rows)[(*n)++];
  memset(r, 0, sizeof *r);
  snprintf(r->label, sizeof r->label, "%s", label);
  snprintf(r->winner, sizeof r->winner, "%s", winner);
  r->order[0] = o1;
  r->order[1] = o2;
  r->wins = 1;
}

static int group_cmp(const void *a, const void *b) {
  const group_row_t *x = (const group_row_t *)a, *y = (const group_row_t *)b;
  for (int i = 0; i < 2; i++)
    if (x->order[i] != y->order[i])
      return x->order[i] < y->order[i] ? -1 : 1;
  if (x->wins != y->wins)
    return y->wins - x->wins;
  return strcmp(x->winner, y->winner);
}

static void print_groups(out_ctx_t *o, group_row_t *rows, int n,
                         const char *what) {
  qsort(rows, (size_t)n, sizeof rows[0], group_cmp);
  if (o->md)
    fprintf(o->f, "| %s | winner | wins |\n|---|---|---:|\n", what);
  else
    fprintf(o->f, "  %-18s %-48s %6s\n", what, "winner", "wins");
  for (int i = 0; i < n; i++) {
    if (o->md)
      fprintf(o->f, "| %s | %s | %d |\n", rows[i].label, rows[i].winner,
              rows[i].wins);
    else
      fprintf(o->f, "  %-18s %-48s %6d\n", rows[i].label, rows[i].winner,
              rows[i].wins);
  }
}

static int ceil_log2_ll(long long v) {
  int r = 0;
  while (r < 62 && (1LL << r) < v)
    r++;
  return r;
}

static int analyze_namespace(out_ctx_t *o, const voxconv_cache_t *c,
                             const char *ns) {
  const int n = voxconv_cache_entry_count(c);
  stat_table_t algos = {0}, cands = {0};
  group_row_t *by_ch = NULL, *by_k = NULL, *by_n = NULL;
  int n_ch = 0, cap_ch = 0, n_k = 0, cap_k = 0, n_n = 0, cap_n = 0;
  int n_configs = 0;
  int margin_hist[5] = {0};
  static const char *const margin_names[5] = {"< 1%", "1-5%", "5-10%", "10-25%",
                                              ">= 25%"};
  double *margins = (double *)malloc(((size_t)n + 1) * sizeof *margins);
  int n_margins = 0;
  for (int i = 0; i < n; i++) {
    voxconv_cache_entry_info_t e;
    if (voxconv_cache_get_entry(c, i, &e) != VOXCONV_STATUS_SUCCESS ||
        strcmp(e.namespace_name, ns) != 0)
      continue;
    voxconv_cache_candidate_t best, second;
    if (e.n_candidates < 1 ||
        voxconv_cache_get_candidate(c, i, 0, &best) != VOXCONV_STATUS_SUCCESS ||
        strcmp(best.status, "ok") != 0)
      continue;
    n_configs++;
    char label[200];
    snprintf(label, sizeof label, "%s %s", best.algo, best.params);
    /* Algorithm-level: the best candidate of each algorithm counts once. */
    char seen_algos[16][64];
    int n_seen = 0;
    int ok_rank = 0;
    for (int r = 0; r < e.n_candidates; r++) {
      voxconv_cache_candidate_t cand;
      if (voxconv_cache_get_candidate(c, i, r, &cand) !=
              VOXCONV_STATUS_SUCCESS ||
          strcmp(cand.status, "ok") != 0)
        continue;
      char cl[200];
      snprintf(cl, sizeof cl, "%s %s", cand.algo, cand.params);
      stat_row_t *sr = stat_get(&cands, cl);
      if (sr) {
        sr->seen++;
        if (ok_rank == 0)
          sr->wins++;
        if (ok_rank < 3)
          sr->top3++;
      }
      int dup = 0;
      for (int s = 0; s < n_seen; s++)
        if (strcmp(seen_algos[s], cand.algo) == 0)
          dup = 1;
      if (!dup) {
        stat_row_t *ar = stat_get(&algos, cand.algo);
        if (ar) {
          ar->seen++;
          if (n_seen == 0)
            ar->wins++;
          if (n_seen < 3)
            ar->top3++;
        }
        if (n_seen < 16)
          snprintf(seen_algos[n_seen++], sizeof seen_algos[0], "%s", cand.algo);
      }
      ok_rank++;
    }
    char g[64];
    snprintf(g, sizeof g, "%lld -> %lld", (long long)e.cin, (long long)e.cout);
    group_add(&by_ch, &n_ch, &cap_ch, g, e.cin, e.cout, label);
    snprintf(g, sizeof g, "kvol %d", (int)e.kernel_volume);
    group_add(&by_k, &n_k, &cap_k, g, e.kernel_volume, 0, label);
    snprintf(g, sizeof g, "n_out <= 2^%02d", e.n_out_log2);
    group_add(&by_n, &n_n, &cap_n, g, e.n_out_log2, 0, label);
    if (e.n_candidates > 1 &&
        voxconv_cache_get_candidate(c, i, 1, &second) ==
            VOXCONV_STATUS_SUCCESS &&
        strcmp(second.status, "ok") == 0 && best.time_ms > 0) {
      const double m = second.time_ms / best.time_ms - 1.0;
      if (margins)
        margins[n_margins++] = m;
      margin_hist[m < 0.01   ? 0
                  : m < 0.05 ? 1
                  : m < 0.10 ? 2
                  : m < 0.25 ? 3
                             : 4]++;
    }
  }
  if (n_configs == 0) {
    free(margins);
    free(algos.rows);
    free(cands.rows);
    return 0;
  }
  char title[160];
  snprintf(title, sizeof title, "%s: %d configurations", ns, n_configs);
  heading(o, 1, title);
  heading(o, 2, "algorithm win rates");
  print_rates(o, &algos, n_configs, "algorithm");
  heading(o, 2, "candidate win rates (algorithm and parameters)");
  print_rates(o, &cands, n_configs, "candidate");
  heading(o, 2, "wins by channel pair (cin -> cout)");
  print_groups(o, by_ch, n_ch, "channels");
  heading(o, 2, "wins by kernel volume");
  print_groups(o, by_k, n_k, "kernel");
  heading(o, 2, "wins by problem size");
  print_groups(o, by_n, n_n, "size");
  heading(o, 2, "margin of the runner-up over the best");
  if (n_margins == 0) {
    fprintf(o->f, "  no configuration has a runner-up\n");
  } else {
    for (int b = 0; b < 5; b++) {
      if (o->md)
        fprintf(o->f, "%s| %s | %d |\n",
                b == 0 ? "| margin | configs |\n|---|---:|\n" : "",
                margin_names[b], margin_hist[b]);
      else
        fprintf(o->f, "  %-8s %6d\n", margin_names[b], margin_hist[b]);
    }
    /* median */
    for (int a = 1; a < n_margins; a++)
      for (int b = a; b > 0 && margins[b - 1] > margins[b]; b--) {
        double t = margins[b];
        margins[b] = margins[b - 1];
        margins[b - 1] = t;
      }
    const double med =
        (n_margins & 1)
            ? margins[n_margins / 2]
            : 0.5 * (margins[n_margins / 2 - 1] + margins[n_margins / 2]);
    fprintf(o->f,
            "%smedian margin %.1f%% over %d configurations; %d within "
            "5%% (a cheaper search would rarely lose much there)\n",
            o->md ? "\n" : "  ", 100.0 * med, n_margins,
            margin_hist[0] + margin_hist[1]);
  }

  heading(o, 2, "recommended reduced candidate sets (what 'auto' uses)");
  /* One line per family: device, dtype, accumulator, deterministic and the
   * ceil(log2) channel buckets, represented by its first entry. */
  char(*families)[256] = (char(*)[256])calloc((size_t)n + 1, 256);
  int n_fam = 0, printed = 0;
  for (int i = 0; families && i < n; i++) {
    voxconv_cache_entry_info_t e;
    if (voxconv_cache_get_entry(c, i, &e) != VOXCONV_STATUS_SUCCESS ||
        strcmp(e.namespace_name, ns) != 0)
      continue;
    char fam[256];
    snprintf(fam, sizeof fam, "%s %s %s acc=%d det=%d cin<=%lld cout<=%lld",
             e.device, e.library_version, voxconv_dtype_name(e.dtype),
             e.fp16_accum, e.deterministic, 1LL << ceil_log2_ll(e.cin),
             1LL << ceil_log2_ll(e.cout));
    int dup = 0;
    for (int f = 0; f < n_fam; f++)
      if (strcmp(families[f], fam) == 0)
        dup = 1;
    if (dup)
      continue;
    snprintf(families[n_fam++], 256, "%s", fam);
    voxconv_cache_candidate_t rec[8];
    int n_rec = 0;
    if (voxconv_cache_recommend(c, i, rec, 8, &n_rec) != VOXCONV_STATUS_SUCCESS)
      continue;
    if (o->md)
      fprintf(o->f, "* `%s`: ", fam);
    else
      fprintf(o->f, "  %s:\n    ", fam);
    if (n_rec == 0) {
      fprintf(o->f, "(fewer than 2 'all' searches recorded: auto uses its "
                    "default pool)\n");
      continue;
    }
    for (int r = 0; r < n_rec; r++)
      fprintf(o->f, "%s%s %s (x%.3f)", r ? ", " : "", rec[r].algo,
              rec[r].params, rec[r].time_ms);
    fprintf(o->f, "\n");
    printed++;
  }
  if (o->md)
    fprintf(o->f, "\n");
  fprintf(o->f,
          "%s%d of %d families have a recommended set (xR = mean time "
          "relative to the best)\n",
          o->md ? "" : "  ", printed, n_fam);
  free(families);
  free(margins);
  free(algos.rows);
  free(cands.rows);
  free(by_ch);
  free(by_k);
  free(by_n);
  return n_configs;
}

static int cmd_analyze(int argc, char **argv) {
  vt_cache_analyze_opts_t opts;
  const int parsed = vt_cache_analyze_parse(argc, argv, &opts, stdout, stderr);
  if (parsed != VT_PARSED)
    return parsed;
  const char *want_ns = opts.want_ns, *output = opts.output;
  const char *file = opts.file;
  const int md = opts.markdown;
  char path[4096];
  voxconv_cache_t *c = NULL;
  int rc = open_cache("cache analyze", file, &c, path, sizeof path);
  if (rc != VT_EXIT_OK)
    return rc;
  out_ctx_t o = {stdout, md};
  if (output) {
    o.f = fopen(output, "w");
    if (!o.f) {
      voxconv_cache_close(c);
      return fail("cache analyze", "cannot write %s: %s", output,
                  strerror(errno));
    }
  }
  if (md)
    fprintf(o.f, "# voxconv tuning cache analysis\n\nFile: `%s` (%d entries)\n",
            path, voxconv_cache_entry_count(c));
  else
    fprintf(o.f, "voxconv tuning cache analysis\nfile: %s (%d entries)\n", path,
            voxconv_cache_entry_count(c));
  /* The selection namespaces present (or the one asked for). */
  const int n = voxconv_cache_entry_count(c);
  char(*done)[96] = (char(*)[96])calloc((size_t)n + 1, 96);
  int n_done = 0, total = 0;
  for (int i = 0; done && i < n; i++) {
    voxconv_cache_entry_info_t e;
    if (voxconv_cache_get_entry(c, i, &e) != VOXCONV_STATUS_SUCCESS)
      continue;
    if (want_ns ? strcmp(e.namespace_name, want_ns) != 0
                : strchr(e.namespace_name, '/') != NULL)
      continue;
    int dup = 0;
    for (int d = 0; d < n_done; d++)
      if (strcmp(done[d], e.namespace_name) == 0)
        dup = 1;
    if (dup)
      continue;
    snprintf(done[n_done++], 96, "%s", e.namespace_name);
    total += analyze_namespace(&o, c, e.namespace_name);
  }
  free(done);
  if (total == 0)
    fprintf(o.f, "\nno benchmarked configurations%s%s\n",
            want_ns ? " in namespace " : "", want_ns ? want_ns : "");
  if (output) {
    if (fclose(o.f) != 0) {
      voxconv_cache_close(c);
      return fail("cache analyze", "cannot write %s", output);
    }
    printf("analysis of %d configurations written to %s\n", total, output);
  }
  voxconv_cache_close(c);
  return VT_EXIT_OK;
}

int vc_tool_cache_main(int argc, char **argv) {
  if (argc < 2) {
    vt_cache_usage(stderr);
    return VT_EXIT_USAGE;
  }
  const char *sub = argv[1];
  if (strcmp(sub, "inspect") == 0)
    return cmd_inspect(argc - 1, argv + 1);
  if (strcmp(sub, "analyze") == 0)
    return cmd_analyze(argc - 1, argv + 1);
  if (strcmp(sub, "path") == 0 || strcmp(sub, "clear") == 0) {
    if (argc != 2) {
      fprintf(stderr, "voxconv cache %s: takes no arguments\n", sub);
      return VT_EXIT_USAGE;
    }
    char path[4096];
    if (voxconv_cache_path(path, sizeof path) != VOXCONV_STATUS_SUCCESS)
      return fail("cache", "%s", voxconv_get_last_error(NULL));
    if (sub[0] == 'p') {
      printf("%s\n", path);
      return VT_EXIT_OK;
    }
    struct stat st;
    const int existed = stat(path, &st) == 0;
    if (voxconv_cache_clear() != VOXCONV_STATUS_SUCCESS)
      return fail("cache clear", "%s", voxconv_get_last_error(NULL));
    printf("%s %s\n", existed ? "removed" : "nothing to remove at", path);
    return VT_EXIT_OK;
  }
  if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0 ||
      strcmp(sub, "help") == 0) {
    vt_cache_usage(stdout);
    return VT_EXIT_OK;
  }
  fprintf(stderr, "voxconv cache: unknown command \"%s\"\n\n", sub);
  vt_cache_usage(stderr);
  return VT_EXIT_USAGE;
}

/* ---- tune --------------------------------------------------------------- */
int vc_tool_tune_main(int argc, char **argv) {
  const char *mode = NULL;
  char **bargv = NULL;
  int bargc = 0;
  const int parsed =
      vt_tune_parse(argc, argv, &mode, &bargv, &bargc, stdout, stderr);
  if (parsed != VT_PARSED)
    return parsed;

  char path[4096];
  if (voxconv_cache_path(path, sizeof path) != VOXCONV_STATUS_SUCCESS) {
    free(bargv);
    return fail("tune", "%s", voxconv_get_last_error(NULL));
  }

  const double t0 = vt_now_ms();
  const int rc = vt_bench_main(bargc, bargv);
  const double secs = (vt_now_ms() - t0) / 1e3;
  free(bargv);
  if (rc != VT_EXIT_OK)
    return rc;
  if (voxconv_cache_flush() != VOXCONV_STATUS_SUCCESS)
    return fail("tune", "%s", voxconv_get_last_error(NULL));
  voxconv_cache_t *c = NULL;
  if (voxconv_cache_open(path, &c) != VOXCONV_STATUS_SUCCESS)
    return fail("tune", "%s", voxconv_get_last_error(NULL));
  const int after = voxconv_cache_entry_count(c);
  voxconv_cache_close(c);
  /* New = what this process tuned; the file's growth would also count
   * what other processes (training ranks, other tune runs) wrote. */
  printf("tuned the network (search space %s) in %.2f s\n", mode, secs);
  printf("cache %s: %d entries (%d new: the configurations this run "
         "tuned)\n",
         path, after, vt_bench_tuned_count());
  return VT_EXIT_OK;
}
