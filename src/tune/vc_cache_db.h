/* The tuning cache as data: entries, their candidates, the text format
 * (parse / serialize) and merging. Pure C11 + libc, no library state and no
 * vc_core dependency, so that the fuzz target (fuzz/) can compile
 * cache_format.c on its own. File locking, the background saver and the
 * process-wide table live in cache.c; the format is documented in
 * include/voxconv.h ("Tuning cache"). */
#ifndef VC_CACHE_DB_H
#define VC_CACHE_DB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VC_CACHE_MAGIC "voxconv-tuning-cache"
#define VC_CACHE_FORMAT_VERSION 1
#define VC_CACHE_FILE_NAME "tuning-cache-v1.txt"

/* Field sizes; the parser rejects anything longer (so a value read back is
 * always one that could have been written). */
#define VC_CACHE_NS_MAX 96
#define VC_CACHE_ALGO_MAX 64
#define VC_CACHE_PARAMS_MAX 128
#define VC_CACHE_STATUS_MAX 48
#define VC_CACHE_DEVICE_MAX 128
#define VC_CACHE_LIB_MAX 16
/* The largest time or max_rel written (larger or infinite ones are
 * written as this; see format_measure in cache_format.c). */
#define VC_CACHE_MEASURE_MAX 1e300
#define VC_CACHE_LINE_MAX 1024
/* Sanity bounds against absurd files (and the fuzzer). */
#define VC_CACHE_MAX_ENTRIES 1000000
#define VC_CACHE_MAX_ROWS 65536

/* Coverage bits ("searched="): which search spaces were benchmarked. */
#define VC_COVER_AUTO 1u /* the auto pool */
#define VC_COVER_ALL 2u  /* everything, fp16-accumulator tiles included */
#define VC_COVER_FULL                                                          \
  4u /* (per-algorithm entries) every combination                              \
        admissible without "all" */

/* The configuration part of a key (the namespace is kept beside it). */
typedef struct vc_cache_key {
  char device[VC_CACHE_DEVICE_MAX];
  char lib[VC_CACHE_LIB_MAX];
  int32_t nin, nout; /* ceil(log2 rows) */
  int64_t cin, cout;
  int32_t kvol;
  int32_t dtype; /* voxconv_dtype_t */
  int32_t acc;   /* resolved fp16 accumulator 0/1 */
  int32_t det;   /* deterministic 0/1 */
  int32_t mode;  /* voxconv_kmap_mode_t */
  int32_t stride[3];
} vc_cache_key_t;

typedef struct vc_cache_row {
  char algo[VC_CACHE_ALGO_MAX];
  char params[VC_CACHE_PARAMS_MAX]; /* "name=v,..." or "-" */
  double time_ms;                   /* < 0: not timed */
  char status[VC_CACHE_STATUS_MAX]; /* ok | wrong | nonfinite | failed:X */
  double max_rel;                   /* < 0: unknown */
  int dirty; /* in memory only: measured by this process, not yet saved */
} vc_cache_row_t;

typedef struct vc_cache_entry {
  char ns[VC_CACHE_NS_MAX];
  vc_cache_key_t key;
  uint64_t hash; /* of (ns, key), for fast lookups */
  unsigned coverage;
  int n_rows, cap_rows;
  vc_cache_row_t *rows; /* ranked, best first */
  int dirty;            /* in memory only: changed since the last save */
} vc_cache_entry_t;

typedef struct vc_cache_db {
  int n, cap;
  vc_cache_entry_t *entries;
  /* Open-addressing index over `entries` by hash (slot = entry index + 1,
   * 0 = empty; capacity a power of two, load <= 1/2), so that the lookup on
   * every conv call does not scan a large cache. NULL when empty. */
  int32_t *index;
  int index_cap;
} vc_cache_db_t;

void vc_cache_db_init(vc_cache_db_t *db);
void vc_cache_db_free(vc_cache_db_t *db);

/* Parses a whole file. 0 on success; -1 when the text is not a complete,
 * well-formed cache (db is then left empty and err says which line and
 * why). Never reads outside text[0, len). */
int vc_cache_db_parse(vc_cache_db_t *db, const char *text, size_t len,
                      char *err, size_t err_size);
/* The file text (malloc'd, NUL-terminated, *len without the NUL); NULL when
 * out of memory. Entries are written in db order, rows in stored order. */
char *vc_cache_db_serialize(const vc_cache_db_t *db, size_t *len);

uint64_t vc_cache_hash(const char *ns, const vc_cache_key_t *key);
int vc_cache_key_equal(const vc_cache_key_t *a, const vc_cache_key_t *b);
/* The key as written after the namespace and coverage in an entry line. */
int vc_cache_key_format(const vc_cache_key_t *key, char *buf, size_t size);
/* "auto,all,full" or "-"; returns buf. */
const char *vc_cache_coverage_format(unsigned coverage, char *buf, size_t size);

vc_cache_entry_t *vc_cache_db_find(const vc_cache_db_t *db, const char *ns,
                                   const vc_cache_key_t *key);
/* Finds or appends (empty) an entry; NULL when out of memory or ns too
 * long. Pointers into db are invalidated by the next upsert. */
vc_cache_entry_t *vc_cache_db_upsert(vc_cache_db_t *db, const char *ns,
                                     const vc_cache_key_t *key);
/* Replaces the row with the same (algo, params) or appends; -1 on OOM. */
int vc_cache_entry_put_row(vc_cache_entry_t *e, const vc_cache_row_t *row);
const vc_cache_row_t *vc_cache_entry_find_row(const vc_cache_entry_t *e,
                                              const char *algo,
                                              const char *params);
/* Ranks rows: "ok" by time (ties by algo, params), then the rest. */
void vc_cache_entry_sort(vc_cache_entry_t *e);
/* Merges src's entry into dst: rows of src replace equal rows of dst
 * (src_wins) or only fill gaps; coverage ORed; rows re-ranked. -1 on OOM. */
int vc_cache_entry_merge(vc_cache_entry_t *dst, const vc_cache_entry_t *src,
                         int src_wins);
/* Merges what another process saved (src, from the file) into this
 * process's entry: src replaces every row except those still unsaved here
 * (dirty), coverage ORed, rows re-ranked. -1 on OOM. */
int vc_cache_entry_merge_saved(vc_cache_entry_t *dst,
                               const vc_cache_entry_t *src);
/* Merges every entry of src into dst (entries marked dirty in src only when
 * only_dirty). -1 on OOM. */
int vc_cache_db_merge(vc_cache_db_t *dst, const vc_cache_db_t *src,
                      int src_wins, int only_dirty);
/* Deep copy of one entry (rows malloc'd); -1 on OOM. */
int vc_cache_entry_copy(vc_cache_entry_t *dst, const vc_cache_entry_t *src);
void vc_cache_entry_free(vc_cache_entry_t *e);

/* Row ranking order (qsort comparator over vc_cache_row_t). */
int vc_cache_row_compare(const void *a, const void *b);
static inline int vc_cache_row_ok(const vc_cache_row_t *r) {
  return r->status[0] == 'o' && r->status[1] == 'k' && r->status[2] == '\0';
}

/* 1 when the row's parameters select an fp16-accumulator tile
 * ("accumulator_type" = 16 or 1; see VC_PARAM_ACCUMULATOR in vc_algo.h).
 * Recommendations for fp32-accumulator families leave such rows out. */
int vc_cache_row_f16acc(const vc_cache_row_t *r);

/* Names used in the file. NULL / -1 when unknown. */
const char *vc_cache_dtype_name(int dtype);
int vc_cache_dtype_parse(const char *s);
const char *vc_cache_mode_name(int mode);
int vc_cache_mode_parse(const char *s);
/* Pass of a namespace ("sparse_conv_forward" or ".../algo"); -1 if none.
 * algo_out (may be NULL) gets the part after '/', "" when none. */
int vc_cache_ns_pass(const char *ns, char *algo_out, size_t algo_size);
const char *vc_cache_pass_namespace(int pass);

/* Recommended reduced set for configurations of the family of `like`
 * (namespace, device, lib, dtype, acc, det, ceil-log2 of cin and cout):
 * greedy set cover over the family's "all"-covered entries, each covered by
 * a candidate within `slack` (0.05) of its best. Writes up to max rows
 * (algo, params, time_ms = mean ratio to best, max_rel unused) and returns
 * the count; 0 when fewer than min_entries such entries exist. */
int vc_cache_recommend(const vc_cache_db_t *db, const char *ns,
                       const vc_cache_key_t *like, double slack,
                       int min_entries, vc_cache_row_t *out, int max);

#ifdef __cplusplus
}
#endif
#endif
