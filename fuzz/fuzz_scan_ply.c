/* libFuzzer target for the PLY reader (tools/scan_ply.c: ascii,
 * binary_little_endian, binary_big_endian). The input is a whole file,
 * read as "f.ply". Built with -fsanitize=fuzzer,address,undefined by
 * fuzz/CMakeLists.txt; replay.c runs it over the seeds without libFuzzer. */
#include "fuzz_scan_common.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  fuzz_scan_check(data, size, "f.ply", 0);
  return 0;
}
