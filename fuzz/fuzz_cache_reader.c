/* libFuzzer target for the tuning-cache reader (src/tune/cache_format.c):
 * any input must parse or be rejected without crashing, leaking or reading
 * out of bounds; whatever is accepted must serialize and parse back to the
 * same text (the reader never accepts what the writer cannot reproduce),
 * and the recommendation pass over it must hold up too. Built with
 * -fsanitize=fuzzer,address,undefined by fuzz/CMakeLists.txt; replay.c runs
 * the same entry point over the seed corpus without libFuzzer. */
#include "../src/tune/vc_cache_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  vc_cache_db_t db;
  char err[256];
  if (vc_cache_db_parse(&db, (const char *)data, size, err, sizeof err) != 0) {
    if (strncmp(err, "line ", 5) != 0) {
      fprintf(stderr, "rejection without a line number: %s\n", err);
      abort();
    }
    return 0;
  }
  size_t len = 0;
  char *text = vc_cache_db_serialize(&db, &len);
  if (!text)
    abort();
  vc_cache_db_t again;
  if (vc_cache_db_parse(&again, text, len, err, sizeof err) != 0) {
    fprintf(stderr, "accepted input does not round-trip: %s\n", err);
    abort();
  }
  size_t len2 = 0;
  char *text2 = vc_cache_db_serialize(&again, &len2);
  if (!text2 || len2 != len || memcmp(text, text2, len) != 0) {
    fprintf(stderr, "serialize(parse(serialize(x))) differs\n");
    abort();
  }
  /* The recommendation pass reads every entry: as each family. */
  vc_cache_row_t rec[8];
  for (int i = 0; i < db.n && i < 16; i++)
    (void)vc_cache_recommend(&db, db.entries[i].ns, &db.entries[i].key, 0.05, 1,
                             rec, 8);
  free(text);
  free(text2);
  vc_cache_db_free(&again);
  vc_cache_db_free(&db);
  return 0;
}
