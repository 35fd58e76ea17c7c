/* Checks shared by the point-cloud reader fuzz targets (fuzz_scan_*.c):
 * whatever the input, vt_scan_parse either fails with a message and
 * leaves nothing to free, or returns points whose counts add up, whose
 * coordinates are finite, and whose number the input's size can account
 * for (no header count is trusted beyond the bytes present: binary
 * data is at least one byte per point, LZF expands at most 88x). Any
 * violation aborts, which libFuzzer and the replay runner report with the
 * input. */
#ifndef VOXCONV_FUZZ_SCAN_COMMON_H
#define VOXCONV_FUZZ_SCAN_COMMON_H

#include "../tools/scan_io.h"
#include "fuzz_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses buf as `name` with `fields` and checks the outcome. The content
 * decides the reader (a .ply name with a PCD header is read as PCD), so
 * any of the three formats may come back. */
static inline void fuzz_scan_check(const unsigned char *buf, size_t size,
                                   const char *name, int fields) {
  vt_scan_t s;
  char err[512];
  memset(err, 0x55, sizeof err); /* a rejection must write a message */
  err[sizeof err - 1] = '\0';
  if (vt_scan_parse(buf, size, name, fields, &s, err, sizeof err) != 0) {
    FUZZ_CHECK(err[0] != '\0' && err[0] != 0x55, "rejection without a "
                                                 "message");
    FUZZ_CHECK(s.data == NULL && s.n == 0, "a failed parse left data");
    return;
  }
  FUZZ_CHECK(s.data != NULL, "success without data");
  FUZZ_CHECK(s.fields >= 3 && s.fields <= 64, "fields %d", (int)s.fields);
  FUZZ_CHECK(s.n >= 0 && s.n_nonfinite >= 0 &&
                 s.n + s.n_nonfinite == s.n_in_file,
             "n %lld + nonfinite %lld != in file %lld", (long long)s.n,
             (long long)s.n_nonfinite, (long long)s.n_in_file);
  FUZZ_CHECK(s.n_in_file <= (int64_t)size * 88 + 1,
             "%lld points from %zu bytes", (long long)s.n_in_file, size);
  FUZZ_CHECK(strncmp(s.format, "PCD ", 4) == 0 ||
                 strncmp(s.format, "PLY ", 4) == 0 ||
                 strncmp(s.format, "raw float32", 11) == 0,
             "format \"%s\"", s.format);
  for (int64_t i = 0; i < s.n; i++)
    for (int a = 0; a < 3; a++)
      FUZZ_CHECK(isfinite(s.data[i * s.fields + a]), "point %lld axis %d",
                 (long long)i, a);
  vt_scan_free(&s);
  FUZZ_CHECK(s.data == NULL && s.n == 0, "free left data");
}

#endif
