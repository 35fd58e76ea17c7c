/* Tuning cache data: parse, serialize, merge, rank, recommend. See
 * vc_cache_db.h; the format itself is documented in include/voxconv.h.
 * The parser is strict (any deviation makes the whole file corrupt, which
 * the caller sets aside): a file this library wrote always parses, and a
 * value read back always fits the fixed-size fields. */
#include "vc_cache_db.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ------------------------------------------------------------ */
/* voxconv_dtype_t order; i8 and i32 appear only as the output dtype of
 * int8 entries (VC_INT8_NS, vc_tune_int8.h) */
static const char *const dtype_names[] = {"f32", "f16", "bf16",
                                          "f64", "i8",  "i32"};
#define N_DTYPES 6
static const char *const mode_names[] = {"submanifold", "strided", "transposed",
                                         "generative", "expanding"};
#define N_MODES 5 /* voxconv_kmap_mode_t */
static const char *const pass_namespaces[] = {
    "sparse_conv_forward",    "sparse_conv_dgrad",    "sparse_conv_wgrad",
    "depthwise_conv_forward", "depthwise_conv_dgrad", "depthwise_conv_wgrad"};
#define N_PASSES 6
/* Namespaces of their own that belong to a pass: the int8 tuner's
 * (VC_INT8_NS in vc_tune_int8.h; this file stays free of library
 * headers for the fuzz target), the forward of a regular conv. */
static const struct {
  const char *ns;
  int pass;
} extra_namespaces[] = {{"sparse_conv_forward_int8", 0}};
#define N_EXTRA_NS 1

const char *vc_cache_dtype_name(int dtype) {
  return (dtype >= 0 && dtype < N_DTYPES) ? dtype_names[dtype] : NULL;
}
int vc_cache_dtype_parse(const char *s) {
  for (int i = 0; i < N_DTYPES; i++)
    if (strcmp(s, dtype_names[i]) == 0)
      return i;
  return -1;
}
const char *vc_cache_mode_name(int mode) {
  return (mode >= 0 && mode < N_MODES) ? mode_names[mode] : NULL;
}
int vc_cache_mode_parse(const char *s) {
  for (int i = 0; i < N_MODES; i++)
    if (strcmp(s, mode_names[i]) == 0)
      return i;
  return -1;
}
const char *vc_cache_pass_namespace(int pass) {
  return (pass >= 0 && pass < N_PASSES) ? pass_namespaces[pass] : NULL;
}

static int algo_char(int c) {
  return isalnum(c) || c == '_' || c == '-' || c == '.';
}

int vc_cache_ns_pass(const char *ns, char *algo_out, size_t algo_size) {
  if (algo_out && algo_size)
    algo_out[0] = '\0';
  for (int i = 0; i < N_EXTRA_NS; i++)
    if (strcmp(ns, extra_namespaces[i].ns) == 0)
      return extra_namespaces[i].pass;
  const char *slash = strchr(ns, '/');
  size_t head = slash ? (size_t)(slash - ns) : strlen(ns);
  for (int p = 0; p < N_PASSES; p++) {
    if (strlen(pass_namespaces[p]) != head ||
        strncmp(ns, pass_namespaces[p], head) != 0)
      continue;
    if (!slash)
      return p;
    const char *algo = slash + 1;
    size_t n = strlen(algo);
    if (n == 0 || n >= VC_CACHE_ALGO_MAX)
      return -1;
    for (size_t i = 0; i < n; i++)
      if (!algo_char((unsigned char)algo[i]))
        return -1;
    if (algo_out && algo_size > n)
      memcpy(algo_out, algo, n + 1);
    return p;
  }
  return -1;
}

/* ---- db basics -------------------------------------------------------- */
void vc_cache_db_init(vc_cache_db_t *db) {
  memset(db, 0, sizeof *db);
}

void vc_cache_entry_free(vc_cache_entry_t *e) {
  free(e->rows);
  e->rows = NULL;
  e->n_rows = e->cap_rows = 0;
}

void vc_cache_db_free(vc_cache_db_t *db) {
  for (int i = 0; i < db->n; i++)
    vc_cache_entry_free(&db->entries[i]);
  free(db->entries);
  free(db->index);
  vc_cache_db_init(db);
}

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

uint64_t vc_cache_hash(const char *ns, const vc_cache_key_t *k) {
  uint64_t h = 0xCBF29CE484222325ull;
  h = fnv_bytes(h, ns, strlen(ns) + 1);
  h = fnv_bytes(h, k->device, strlen(k->device) + 1);
  h = fnv_bytes(h, k->lib, strlen(k->lib) + 1);
  const int64_t v[] = {k->nin,  k->nout,      k->cin,       k->cout,
                       k->kvol, k->dtype,     k->acc,       k->det,
                       k->mode, k->stride[0], k->stride[1], k->stride[2]};
  return fnv_bytes(h, v, sizeof v);
}

int vc_cache_key_equal(const vc_cache_key_t *a, const vc_cache_key_t *b) {
  return strcmp(a->device, b->device) == 0 && strcmp(a->lib, b->lib) == 0 &&
         a->nin == b->nin && a->nout == b->nout && a->cin == b->cin &&
         a->cout == b->cout && a->kvol == b->kvol && a->dtype == b->dtype &&
         a->acc == b->acc && a->det == b->det && a->mode == b->mode &&
         a->stride[0] == b->stride[0] && a->stride[1] == b->stride[1] &&
         a->stride[2] == b->stride[2];
}

int vc_cache_key_format(const vc_cache_key_t *k, char *buf, size_t size) {
  const char *dt = vc_cache_dtype_name(k->dtype);
  const char *mode = vc_cache_mode_name(k->mode);
  return snprintf(buf, size,
                  "device=\"%s\" lib=%s nin=%d nout=%d cin=%lld cout=%lld "
                  "kvol=%d dtype=%s acc=%d det=%d mode=%s stride=%d,%d,%d",
                  k->device, k->lib, (int)k->nin, (int)k->nout,
                  (long long)k->cin, (long long)k->cout, (int)k->kvol,
                  dt ? dt : "?", (int)k->acc, (int)k->det, mode ? mode : "?",
                  (int)k->stride[0], (int)k->stride[1], (int)k->stride[2]);
}

const char *vc_cache_coverage_format(unsigned cov, char *buf, size_t size) {
  static const char *const names[] = {"auto", "all", "full"};
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < 3; i++) {
    if (!(cov & (1u << i)))
      continue;
    int n =
        snprintf(buf + used, size - used, "%s%s", used ? "," : "", names[i]);
    if (n < 0 || (size_t)n >= size - used)
      break;
    used += (size_t)n;
  }
  if (!used)
    snprintf(buf, size, "-");
  return buf;
}

static int entry_matches(const vc_cache_entry_t *e, uint64_t h, const char *ns,
                         const vc_cache_key_t *key) {
  return e->hash == h && strcmp(e->ns, ns) == 0 &&
         vc_cache_key_equal(&e->key, key);
}

/* Places entry i in the index (the caller guarantees a free slot). */
static void index_insert(vc_cache_db_t *db, int i) {
  const unsigned mask = (unsigned)db->index_cap - 1u;
  unsigned s = (unsigned)db->entries[i].hash & mask;
  while (db->index[s] != 0)
    s = (s + 1u) & mask;
  db->index[s] = i + 1;
}

/* Keeps the index at load <= 1/2 for n_needed entries; 0 on success. On
 * allocation failure the old index stays valid (lookups fall back to the
 * scan only if there never was one). */
static int index_reserve(vc_cache_db_t *db, int n_needed) {
  if (db->index && 2 * n_needed <= db->index_cap)
    return 0;
  int cap = 64;
  while (cap < 2 * n_needed)
    cap *= 2;
  int32_t *idx = (int32_t *)calloc((size_t)cap, sizeof *idx);
  if (!idx)
    return -1;
  free(db->index);
  db->index = idx;
  db->index_cap = cap;
  for (int i = 0; i < db->n; i++)
    index_insert(db, i);
  return 0;
}

vc_cache_entry_t *vc_cache_db_find(const vc_cache_db_t *db, const char *ns,
                                   const vc_cache_key_t *key) {
  const uint64_t h = vc_cache_hash(ns, key);
  if (!db->index) { /* no index (empty db or an allocation failed) */
    for (int i = 0; i < db->n; i++)
      if (entry_matches(&db->entries[i], h, ns, key))
        return &db->entries[i];
    return NULL;
  }
  const unsigned mask = (unsigned)db->index_cap - 1u;
  for (unsigned s = (unsigned)h & mask; db->index[s] != 0;
       s = (s + 1u) & mask) {
    vc_cache_entry_t *e = &db->entries[db->index[s] - 1];
    if (entry_matches(e, h, ns, key))
      return e;
  }
  return NULL;
}

vc_cache_entry_t *vc_cache_db_upsert(vc_cache_db_t *db, const char *ns,
                                     const vc_cache_key_t *key) {
  vc_cache_entry_t *e = vc_cache_db_find(db, ns, key);
  if (e)
    return e;
  if (strlen(ns) >= VC_CACHE_NS_MAX || db->n >= VC_CACHE_MAX_ENTRIES)
    return NULL;
  /* An entry the index cannot cover would be invisible to find(). */
  if (index_reserve(db, db->n + 1) != 0)
    return NULL;
  if (db->n == db->cap) {
    int cap = db->cap ? db->cap * 2 : 16;
    vc_cache_entry_t *ne =
        (vc_cache_entry_t *)realloc(db->entries, (size_t)cap * sizeof *ne);
    if (!ne)
      return NULL;
    db->entries = ne;
    db->cap = cap;
  }
  e = &db->entries[db->n++];
  memset(e, 0, sizeof *e);
  memcpy(e->ns, ns, strlen(ns) + 1);
  e->key = *key;
  e->hash = vc_cache_hash(ns, key);
  index_insert(db, db->n - 1);
  return e;
}

const vc_cache_row_t *vc_cache_entry_find_row(const vc_cache_entry_t *e,
                                              const char *algo,
                                              const char *params) {
  for (int i = 0; i < e->n_rows; i++)
    if (strcmp(e->rows[i].algo, algo) == 0 &&
        strcmp(e->rows[i].params, params) == 0)
      return &e->rows[i];
  return NULL;
}

int vc_cache_entry_put_row(vc_cache_entry_t *e, const vc_cache_row_t *row) {
  vc_cache_row_t *old =
      (vc_cache_row_t *)vc_cache_entry_find_row(e, row->algo, row->params);
  if (old) {
    *old = *row;
    return 0;
  }
  if (e->n_rows >= VC_CACHE_MAX_ROWS)
    return -1;
  if (e->n_rows == e->cap_rows) {
    int cap = e->cap_rows ? e->cap_rows * 2 : 8;
    vc_cache_row_t *nr =
        (vc_cache_row_t *)realloc(e->rows, (size_t)cap * sizeof *nr);
    if (!nr)
      return -1;
    e->rows = nr;
    e->cap_rows = cap;
  }
  e->rows[e->n_rows++] = *row;
  return 0;
}

int vc_cache_row_compare(const void *pa, const void *pb) {
  const vc_cache_row_t *a = (const vc_cache_row_t *)pa;
  const vc_cache_row_t *b = (const vc_cache_row_t *)pb;
  const int oka = vc_cache_row_ok(a) && a->time_ms >= 0;
  const int okb = vc_cache_row_ok(b) && b->time_ms >= 0;
  if (oka != okb)
    return oka ? -1 : 1;
  if (oka && a->time_ms != b->time_ms)
    return a->time_ms < b->time_ms ? -1 : 1;
  int c = strcmp(a->algo, b->algo);
  if (c)
    return c;
  return strcmp(a->params, b->params);
}

void vc_cache_entry_sort(vc_cache_entry_t *e) {
  if (e->n_rows > 1)
    qsort(e->rows, (size_t)e->n_rows, sizeof e->rows[0], vc_cache_row_compare);
}

int vc_cache_entry_merge(vc_cache_entry_t *dst, const vc_cache_entry_t *src,
                         int src_wins) {
  for (int i = 0; i < src->n_rows; i++) {
    const vc_cache_row_t *r = &src->rows[i];
    if (!src_wins && vc_cache_entry_find_row(dst, r->algo, r->params))
      continue;
    if (vc_cache_entry_put_row(dst, r) != 0)
      return -1;
  }
  dst->coverage |= src->coverage;
  vc_cache_entry_sort(dst);
  return 0;
}

int vc_cache_entry_merge_saved(vc_cache_entry_t *dst,
                               const vc_cache_entry_t *src) {
  for (int i = 0; i < src->n_rows; i++) {
    const vc_cache_row_t *r = &src->rows[i];
    const vc_cache_row_t *mine =
        vc_cache_entry_find_row(dst, r->algo, r->params);
    if (mine && mine->dirty)
      continue;
    vc_cache_row_t clean = *r;
    clean.dirty = 0;
    if (vc_cache_entry_put_row(dst, &clean) != 0)
      return -1;
  }
  dst->coverage |= src->coverage;
  vc_cache_entry_sort(dst);
  return 0;
}

int vc_cache_db_merge(vc_cache_db_t *dst, const vc_cache_db_t *src,
                      int src_wins, int only_dirty) {
  for (int i = 0; i < src->n; i++) {
    const vc_cache_entry_t *s = &src->entries[i];
    if (only_dirty && !s->dirty)
      continue;
    vc_cache_entry_t *d = vc_cache_db_upsert(dst, s->ns, &s->key);
    if (!d || vc_cache_entry_merge(d, s, src_wins) != 0)
      return -1;
  }
  return 0;
}

int vc_cache_entry_copy(vc_cache_entry_t *dst, const vc_cache_entry_t *src) {
  *dst = *src;
  dst->rows = NULL;
  dst->cap_rows = 0;
  if (src->n_rows) {
    dst->rows =
        (vc_cache_row_t *)malloc((size_t)src->n_rows * sizeof *dst->rows);
    if (!dst->rows) {
      dst->n_rows = 0;
      return -1;
    }
    memcpy(dst->rows, src->rows, (size_t)src->n_rows * sizeof *dst->rows);
    dst->cap_rows = src->n_rows;
  }
  return 0;
}

/* ---- serialize -------------------------------------------------------- */
typedef struct {
  char *buf;
  size_t len, cap;
  int oom;
} sbuf_t;

static void sb_printf(sbuf_t *s, const char *fmt, ...) {
  if (s->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      s->oom = 1;
      return;
    }
    if ((size_t)n < s->cap - s->len) {
      s->len += (size_t)n;
      return;
    }
    size_t cap = s->cap * 2 + (size_t)n + 256;
    char *nb = (char *)realloc(s->buf, cap);
    if (!nb) {
      s->oom = 1;
      return;
    }
    s->buf = nb;
    s->cap = cap;
  }
}

/* A time or max_rel as the reader takes it back: "-" when absent
 * (negative). A wrong candidate's max_rel is infinite when the reference is
 * all zeros, and "%.3e" rounds values near DBL_MAX up to an overflow; both
 * would print as something parse_measure refuses, making the whole file
 * unreadable, so anything beyond VC_CACHE_MEASURE_MAX is written as that. */
static void format_measure(char *buf, size_t size, const char *fmt, double v) {
  if (v < 0) {
    snprintf(buf, size, "-");
    return;
  }
  if (!(v <= VC_CACHE_MEASURE_MAX))
    v = VC_CACHE_MEASURE_MAX;
  snprintf(buf, size, fmt, v);
}

/* A time as the shortest text that reads back as the same double (6
 * significant digits when they suffice, as before). Times rank the
 * candidates: rounded ones could tie when read back and the tie, broken by
 * name, would reorder the file on every rewrite. */
static void format_time(char *buf, size_t size, double v) {
  if (v < 0 || !(v <= VC_CACHE_MEASURE_MAX)) {
    format_measure(buf, size, "%.6g", v);
    return;
  }
  for (int digits = 6; digits <= 17; digits++) {
    snprintf(buf, size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v)
      return;
  }
}

char *vc_cache_db_serialize(const vc_cache_db_t *db, size_t *len) {
  sbuf_t s = {NULL, 0, 0, 0};
  s.cap = 4096;
  s.buf = (char *)malloc(s.cap);
  if (!s.buf)
    return NULL;
  s.buf[0] = '\0';
  sb_printf(&s, "%s %d\n", VC_CACHE_MAGIC, VC_CACHE_FORMAT_VERSION);
  sb_printf(&s, "# voxconv autotuning results (format in voxconv.h, \"Tuning "
                "cache\").\n# entry NAMESPACE searched=... KEY, then its "
                "candidates best first:\n#   cand ALGO PARAMS TIME_MS STATUS "
                "MAX_REL\n");
  char key[512], cov[32];
  for (int i = 0; i < db->n; i++) {
    const vc_cache_entry_t *e = &db->entries[i];
    vc_cache_key_format(&e->key, key, sizeof key);
    sb_printf(&s, "entry %s searched=%s %s\n", e->ns,
              vc_cache_coverage_format(e->coverage, cov, sizeof cov), key);
    for (int r = 0; r < e->n_rows; r++) {
      const vc_cache_row_t *row = &e->rows[r];
      char t[32], m[32];
      format_time(t, sizeof t, row->time_ms);
      format_measure(m, sizeof m, "%.3e", row->max_rel);
      sb_printf(&s, "  cand %s %s %s %s %s\n", row->algo, row->params, t,
                row->status, m);
    }
  }
  sb_printf(&s, "end %d\n", db->n);
  if (s.oom) {
    free(s.buf);
    return NULL;
  }
  if (len)
    *len = s.len;
  return s.buf;
}

/* ---- parse ------------------------------------------------------------ */
#define MAX_TOKENS 24

typedef struct {
  char *tok[MAX_TOKENS];
  int n;
} tokens_t;

/* Splits a line (modified in place) at blanks; a double-quoted run (no
 * escapes) stays inside its token. -1 on an unterminated quote or too many
 * tokens. */
static int tokenize(char *line, tokens_t *t) {
  t->n = 0;
  char *p = line;
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (!*p)
      return 0;
    if (t->n == MAX_TOKENS)
      return -1;
    t->tok[t->n++] = p;
    int quoted = 0;
    while (*p && (quoted || (*p != ' ' && *p != '\t'))) {
      if (*p == '"')
        quoted = !quoted;
      p++;
    }
    if (quoted)
      return -1;
    if (*p)
      *p++ = '\0';
  }
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!*s || !(isdigit((unsigned char)*s) || *s == '-'))
    return 0;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi)
    return 0;
  *out = v;
  return 1;
}

static int parse_i32(const char *s, int32_t lo, int32_t hi, int32_t *out) {
  int64_t v;
  if (!parse_i64(s, lo, hi, &v))
    return 0;
  *out = (int32_t)v;
  return 1;
}

/* A finite, non-negative number or "-" (-1). */
static int parse_measure(const char *s, double *out) {
  if (strcmp(s, "-") == 0) {
    *out = -1;
    return 1;
  }
  if (!isdigit((unsigned char)*s) && *s != '.')
    return 0;
  char *end = NULL;
  double v = strtod(s, &end);
  /* errno is not consulted: strtod reports underflow (a subnormal or zero
   * result) as ERANGE, and the writer's "%.6g" / "%.3e" can print such a
   * value (2.2250738585072014e-308 becomes 2.22507e-308), so rejecting
   * underflow would refuse a file we wrote. Overflow yields inf, refused. */
  if (end == s || *end || !isfinite(v) || v < 0)
    return 0;
  *out = v;
  return 1;
}

static int token_chars_ok(const char *s, const char *extra) {
  if (!*s)
    return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr(extra, *s))
      return 0;
  return 1;
}

static int copy_field(char *dst, size_t size, const char *src) {
  size_t n = strlen(src);
  if (n >= size)
    return 0;
  memcpy(dst, src, n + 1);
  return 1;
}

/* "k=v" tokens of an entry line into key and coverage. Returns NULL or a
 * static description of the problem. */
static const char *parse_entry_fields(tokens_t *t, int first, vc_cache_key_t *k,
                                      unsigned *coverage) {
  enum {
    F_SEARCHED,
    F_DEVICE,
    F_LIB,
    F_NIN,
    F_NOUT,
    F_CIN,
    F_COUT,
    F_KVOL,
    F_DTYPE,
    F_ACC,
    F_DET,
    F_MODE,
    F_STRIDE,
    F_COUNT
  };
  static const char *const names[F_COUNT] = {
      "searched", "device", "lib", "nin", "nout", "cin",   "cout",
      "kvol",     "dtype",  "acc", "det", "mode", "stride"};
  int seen[F_COUNT] = {0};
  memset(k, 0, sizeof *k);
  *coverage = 0;
  for (int i = first; i < t->n; i++) {
    char *tok = t->tok[i];
    char *eq = strchr(tok, '=');
    if (!eq)
      return "a key field without '='";
    *eq = '\0';
    const char *v = eq + 1;
    int f = -1;
    for (int j = 0; j < F_COUNT; j++)
      if (strcmp(tok, names[j]) == 0)
        f = j;
    if (f < 0)
      return "an unknown key field";
    if (seen[f]++)
      return "a key field given twice";
    int64_t x;
    switch (f) {
    case F_SEARCHED: {
      if (strcmp(v, "-") == 0)
        break;
      char tmp[64];
      if (!copy_field(tmp, sizeof tmp, v))
        return "searched= too long";
      char *part = tmp;
      for (;;) {
        char *comma = strchr(part, ',');
        if (comma)
          *comma = '\0';
        if (strcmp(part, "auto") == 0)
          *coverage |= VC_COVER_AUTO;
        else if (strcmp(part, "all") == 0)
          *coverage |= VC_COVER_ALL;
        else if (strcmp(part, "full") == 0)
          *coverage |= VC_COVER_FULL;
        else
          return "searched= has an unknown or empty search space";
        if (!comma)
          break;
        part = comma + 1;
      }
      break;
    }
    case F_DEVICE: {
      size_t n = strlen(v);
      if (n < 2 || v[0] != '"' || v[n - 1] != '"')
        return "device= is not a quoted string";
      if (n - 2 >= VC_CACHE_DEVICE_MAX || n - 2 == 0)
        return "device= is empty or too long";
      for (size_t j = 1; j + 1 < n; j++)
        if (v[j] == '"' || (unsigned char)v[j] < 0x20)
          return "device= holds a quote or control character";
      memcpy(k->device, v + 1, n - 2);
      k->device[n - 2] = '\0';
      break;
    }
    case F_LIB:
      if (!token_chars_ok(v, ".-+") || !copy_field(k->lib, sizeof k->lib, v))
        return "lib= is not a version";
      break;
    case F_NIN:
      if (!parse_i32(v, 0, 63, &k->nin))
        return "nin= is not in 0..63";
      break;
    case F_NOUT:
      if (!parse_i32(v, 0, 63, &k->nout))
        return "nout= is not in 0..63";
      break;
    case F_CIN:
      if (!parse_i64(v, 1, (int64_t)1 << 30, &x))
        return "cin= is not a channel count";
      k->cin = x;
      break;
    case F_COUT:
      if (!parse_i64(v, 1, (int64_t)1 << 30, &x))
        return "cout= is not a channel count";
      k->cout = x;
      break;
    case F_KVOL:
      if (!parse_i32(v, 1, 343, &k->kvol))
        return "kvol= is not in 1..343";
      break;
    case F_DTYPE:
      if ((k->dtype = vc_cache_dtype_parse(v)) < 0)
        return "dtype= is not f32, f16, bf16 or f64";
      break;
    case F_ACC:
      if (!parse_i32(v, 0, 1, &k->acc))
        return "acc= is not 0 or 1";
      break;
    case F_DET:
      if (!parse_i32(v, 0, 1, &k->det))
        return "det= is not 0 or 1";
      break;
    case F_MODE:
      if ((k->mode = vc_cache_mode_parse(v)) < 0)
        return "mode= is not a kernel-map mode";
      break;
    case F_STRIDE: {
      char tmp[48];
      if (!copy_field(tmp, sizeof tmp, v))
        return "stride= too long";
      char *parts[3];
      char *p = tmp;
      for (int j = 0; j < 3; j++) {
        parts[j] = p;
        char *c = strchr(p, ',');
        if (j < 2) {
          if (!c)
            return "stride= does not have 3 parts";
          *c = '\0';
          p = c + 1;
        } else if (c) {
          return "stride= has more than 3 parts";
        }
        if (!parse_i32(parts[j], 1, 64, &k->stride[j]))
          return "stride= part is not in 1..64";
      }
      break;
    }
    }
  }
  for (int j = 0; j < F_COUNT; j++)
    if (!seen[j])
      return "a key field is missing";
  return NULL;
}

static const char *parse_cand(tokens_t *t, vc_cache_row_t *row) {
  if (t->n != 6)
    return "a cand line needs 5 fields (algo params time status max_rel)";
  memset(row, 0, sizeof *row);
  if (!token_chars_ok(t->tok[1], "_-.") ||
      !copy_field(row->algo, sizeof row->algo, t->tok[1]))
    return "bad algorithm name";
  if (strcmp(t->tok[2], "-") != 0 && !token_chars_ok(t->tok[2], "_=,.-"))
    return "bad parameters";
  if (!copy_field(row->params, sizeof row->params, t->tok[2]))
    return "parameters too long";
  if (!parse_measure(t->tok[3], &row->time_ms))
    return "bad time";
  if (!token_chars_ok(t->tok[4], "_:") ||
      !copy_field(row->status, sizeof row->status, t->tok[4]))
    return "bad status";
  if (strcmp(row->status, "ok") != 0 && strcmp(row->status, "wrong") != 0 &&
      strcmp(row->status, "nonfinite") != 0 &&
      strncmp(row->status, "failed:", 7) != 0)
    return "unknown status";
  /* "inf": what writers before VC_CACHE_MEASURE_MAX printed for a wrong
   * candidate whose reference was all zeros; read as that ceiling so those
   * files stay readable. */
  if (strcmp(t->tok[5], "inf") == 0)
    row->max_rel = VC_CACHE_MEASURE_MAX;
  else if (!parse_measure(t->tok[5], &row->max_rel))
    return "bad max_rel";
  if (vc_cache_row_ok(row) && row->time_ms < 0)
    return "an ok candidate without a time";
  return NULL;
}

static int fail_at(char *err, size_t size, int line, const char *what) {
  if (err && size)
    snprintf(err, size, "line %d: %s", line, what);
  return -1;
}

int vc_cache_db_parse(vc_cache_db_t *db, const char *text, size_t len,
                      char *err, size_t err_size) {
  vc_cache_db_init(db);
  if (err && err_size)
    err[0] = '\0';
  char line[VC_CACHE_LINE_MAX + 1];
  size_t pos = 0;
  int lineno = 0, have_header = 0, ended = 0;
  vc_cache_entry_t *cur = NULL;
  const char *why = NULL;
  while (pos < len) {
    size_t end = pos;
    while (end < len && text[end] != '\n')
      end++;
    lineno++;
    if (end == len) {
      why = "the last line has no newline (truncated file)";
      goto fail;
    }
    size_t n = end - pos;
    if (n && text[end - 1] == '\r')
      n--;
    if (n > VC_CACHE_LINE_MAX) {
      why = "line too long";
      goto fail;
    }
    memcpy(line, text + pos, n);
    line[n] = '\0';
    pos = end + 1;
    if (memchr(line, '\0', n)) {
      why = "a NUL byte";
      goto fail;
    }
    char *p = line;
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p == '\0' || *p == '#')
      continue;
    if (ended) {
      why = "text after the end line";
      goto fail;
    }
    tokens_t t;
    if (tokenize(p, &t) != 0 || t.n == 0) {
      why = "unbalanced quotes or too many fields";
      goto fail;
    }
    if (!have_header) {
      int32_t ver;
      if (t.n != 2 || strcmp(t.tok[0], VC_CACHE_MAGIC) != 0) {
        why = "not a voxconv tuning cache (bad first line)";
        goto fail;
      }
      if (!parse_i32(t.tok[1], 0, 1000000, &ver) ||
          ver != VC_CACHE_FORMAT_VERSION) {
        why = "unsupported format version";
        goto fail;
      }
      have_header = 1;
      continue;
    }
    if (strcmp(t.tok[0], "entry") == 0) {
      if (t.n < 3) {
        why = "an entry line without namespace and key";
        goto fail;
      }
      if (strlen(t.tok[1]) >= VC_CACHE_NS_MAX ||
          vc_cache_ns_pass(t.tok[1], NULL, 0) < 0) {
        why = "unknown namespace";
        goto fail;
      }
      vc_cache_key_t key;
      unsigned cov;
      if ((why = parse_entry_fields(&t, 2, &key, &cov)) != NULL)
        goto fail;
      if (vc_cache_db_find(db, t.tok[1], &key)) {
        why = "the same entry twice";
        goto fail;
      }
      cur = vc_cache_db_upsert(db, t.tok[1], &key);
      if (!cur) {
        why = "out of memory or too many entries";
        goto fail;
      }
      cur->coverage = cov;
    } else if (strcmp(t.tok[0], "cand") == 0) {
      if (!cur) {
        why = "a cand line before any entry";
        goto fail;
      }
      vc_cache_row_t row;
      if ((why = parse_cand(&t, &row)) != NULL)
        goto fail;
      if (vc_cache_entry_find_row(cur, row.algo, row.params)) {
        why = "the same candidate twice in one entry";
        goto fail;
      }
      if (vc_cache_entry_put_row(cur, &row) != 0) {
        why = "out of memory or too many candidates";
        goto fail;
      }
    } else if (strcmp(t.tok[0], "end") == 0) {
      int32_t count;
      if (t.n != 2 || !parse_i32(t.tok[1], 0, VC_CACHE_MAX_ENTRIES, &count)) {
        why = "a malformed end line";
        goto fail;
      }
      if (count != db->n) {
        why = "the end line's entry count does not match";
        goto fail;
      }
      ended = 1;
    } else {
      why = "unknown record (expected entry, cand or end)";
      goto fail;
    }
  }
  if (!have_header) {
    why = "empty file (no header)";
    goto fail;
  }
  if (!ended) {
    why = "no end line (truncated file)";
    goto fail;
  }
  /* Files are written ranked; re-rank anyway so that a hand-edited file
   * cannot make a slower candidate win. */
  for (int i = 0; i < db->n; i++)
    vc_cache_entry_sort(&db->entries[i]);
  return 0;
fail:
  vc_cache_db_free(db);
  return fail_at(err, err_size, lineno, why);
}

/* ---- recommendation --------------------------------------------------- */
static int ceil_log2_i64(int64_t v) {
  int r = 0;
  while (r < 62 && ((int64_t)1 << r) < v)
    r++;
  return r;
}

/* An fp16-accumulator tile: parameter "accumulator_type" (VC_PARAM_ACCUMULATOR
 * in vc_algo.h) with value 16 or 1. */
int vc_cache_row_f16acc(const vc_cache_row_t *r) {
  static const char name[] = "accumulator_type=";
  for (const char *p = strstr(r->params, name); p; p = strstr(p + 1, name)) {
    if (p != r->params && p[-1] != ',')
      continue;
    const char *v = p + sizeof name - 1;
    size_t n = strcspn(v, ",");
    if ((n == 2 && strncmp(v, "16", 2) == 0) || (n == 1 && v[0] == '1'))
      return 1;
  }
  return 0;
}

/* Rows auto may use for a family: ok, and no fp16-accumulator tile when
 * the family's accumulator is fp32 (such rows come from "all" searches). */
static int rec_usable(const vc_cache_key_t *like, const vc_cache_row_t *r) {
  return vc_cache_row_ok(r) && (like->acc || !vc_cache_row_f16acc(r));
}

static const vc_cache_row_t *first_usable(const vc_cache_entry_t *e,
                                          const vc_cache_key_t *like) {
  for (int i = 0; i < e->n_rows; i++)
    if (rec_usable(like, &e->rows[i]))
      return &e->rows[i];
  return NULL;
}

/* Whether entry e belongs to the family vc_cache_recommend learns from for
 * `like`: namespace ns, a search over all candidates, the same device,
 * library, dtype, accumulator and determinism, channel counts in the same
 * power-of-two buckets (lci, lco: ceil_log2 of like's), and at least one
 * usable row. One predicate so that counting the family and collecting it
 * cannot disagree. */
static int in_rec_family(const vc_cache_entry_t *e, const char *ns,
                         const vc_cache_key_t *like, int lci, int lco) {
  if (strcmp(e->ns, ns) != 0 || !(e->coverage & VC_COVER_ALL))
    return 0;
  const vc_cache_key_t *k = &e->key;
  if (strcmp(k->device, like->device) || strcmp(k->lib, like->lib) ||
      k->dtype != like->dtype || k->acc != like->acc || k->det != like->det ||
      ceil_log2_i64(k->cin) != lci || ceil_log2_i64(k->cout) != lco)
    return 0;
  return first_usable(e, like) != NULL;
}

typedef struct {
  const vc_cache_row_t *row; /* identity (algo, params) */
  int n_cover;
  double ratio_sum;
  int ratio_n;
} rec_cand_t;

int vc_cache_recommend(const vc_cache_db_t *db, const char *ns,
                       const vc_cache_key_t *like, double slack,
                       int min_entries, vc_cache_row_t *out, int max) {
  if (max <= 0)
    return 0;
  const int lci = ceil_log2_i64(like->cin), lco = ceil_log2_i64(like->cout);
  int n_fam = 0;
  for (int i = 0; i < db->n; i++)
    if (in_rec_family(&db->entries[i], ns, like, lci, lco))
      n_fam++;
  if (n_fam < min_entries || n_fam == 0)
    return 0;
  int *fam = (int *)malloc((size_t)n_fam * sizeof *fam);
  char *covered = (char *)calloc((size_t)n_fam, 1);
  int cap = 64, n_c = 0;
  rec_cand_t *cands = (rec_cand_t *)malloc((size_t)cap * sizeof *cands);
  int n_out = 0;
  if (!fam || !covered || !cands)
    goto done;
  n_fam = 0;
  for (int i = 0; i < db->n; i++)
    if (in_rec_family(&db->entries[i], ns, like, lci, lco))
      fam[n_fam++] = i;
  /* The distinct ok candidates of the family with their mean ratio. */
  for (int f = 0; f < n_fam; f++) {
    const vc_cache_entry_t *e = &db->entries[fam[f]];
    const double b = first_usable(e, like)->time_ms;
    const double best = b > 0 ? b : 1e-9;
    for (int r = 0; r < e->n_rows; r++) {
      const vc_cache_row_t *row = &e->rows[r];
      if (!rec_usable(like, row))
        continue;
      int c = 0;
      while (c < n_c && (strcmp(cands[c].row->algo, row->algo) ||
                         strcmp(cands[c].row->params, row->params)))
        c++;
      if (c == n_c) {
        if (n_c == cap) {
          cap *= 2;
          rec_cand_t *nc =
              (rec_cand_t *)realloc(cands, (size_t)cap * sizeof *nc);
          if (!nc)
            goto done;
          cands = nc;
        }
        memset(&cands[n_c], 0, sizeof cands[n_c]);
        cands[n_c++].row = row;
      }
      cands[c].ratio_sum += row->time_ms / best;
      cands[c].ratio_n++;
    }
  }
  for (;;) {
    if (n_out == max)
      break;
    int best_c = -1;
    for (int c = 0; c < n_c; c++) {
      int cover = 0;
      for (int f = 0; f < n_fam; f++) {
        if (covered[f])
          continue;
        const vc_cache_entry_t *e = &db->entries[fam[f]];
        const vc_cache_row_t *row = vc_cache_entry_find_row(
            e, cands[c].row->algo, cands[c].row->params);
        if (row && rec_usable(like, row) &&
            row->time_ms <= first_usable(e, like)->time_ms * (1.0 + slack))
          cover++;
      }
      cands[c].n_cover = cover;
      if (cover == 0)
        continue;
      if (best_c < 0 || cover > cands[best_c].n_cover)
        best_c = c;
      else if (cover == cands[best_c].n_cover) {
        double mc = cands[c].ratio_sum / cands[c].ratio_n;
        double mb = cands[best_c].ratio_sum / cands[best_c].ratio_n;
        if (mc < mb || (mc == mb && vc_cache_row_compare(
                                        cands[c].row, cands[best_c].row) < 0))
          best_c = c;
      }
    }
    if (best_c < 0)
      break;
    for (int f = 0; f < n_fam; f++) {
      const vc_cache_entry_t *e = &db->entries[fam[f]];
      const vc_cache_row_t *row = vc_cache_entry_find_row(
          e, cands[best_c].row->algo, cands[best_c].row->params);
      if (row && rec_usable(like, row) &&
          row->time_ms <= first_usable(e, like)->time_ms * (1.0 + slack))
        covered[f] = 1;
    }
    vc_cache_row_t *o = &out[n_out++];
    *o = *cands[best_c].row;
    o->time_ms = cands[best_c].ratio_sum / cands[best_c].ratio_n;
    o->max_rel = -1;
    /* never pick it again */
    cands[best_c] = cands[--n_c];
  }
done:
  free(fam);
  free(covered);
  free(cands);
  return n_out;
}
