/* The fuzz targets' invariant check: on failure it names the condition
 * and aborts, which libFuzzer and the replay runner (replay.c) report with
 * the input that caused it. */
#ifndef VOXCONV_FUZZ_CHECK_H
#define VOXCONV_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz check failed: %s: ", #cond);                       \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#endif
