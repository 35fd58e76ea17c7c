/* libFuzzer target for the PCD reader (tools/scan_pcd.c: ascii, binary,
 * binary_compressed) and its LZF decoder (tools/scan_io.c). The input is a
 * whole file, read as "f.pcd"; the same bytes also go to the LZF decoder
 * on their own, whose output must fit and decode again to the same bytes.
 * Built with -fsanitize=fuzzer,address,undefined by fuzz/CMakeLists.txt;
 * replay.c runs it over the seeds without libFuzzer. */
#include "fuzz_scan_common.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static void check_lzf(const unsigned char *data, size_t size) {
  static unsigned char out[1 << 16], again[1 << 16];
  const int64_t n = vt_lzf_decompress(data, size, out, sizeof out);
  FUZZ_CHECK(n >= -1 && n <= (int64_t)sizeof out, "lzf returned %lld",
             (long long)n);
  if (n < 0)
    return;
  /* Decoding is deterministic and needs no more room than it reported. */
  const int64_t m = vt_lzf_decompress(data, size, again, (size_t)n);
  FUZZ_CHECK(m == n && memcmp(out, again, (size_t)n) == 0,
             "lzf into %lld bytes gave %lld", (long long)n, (long long)m);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  fuzz_scan_check(data, size, "f.pcd", 0);
  check_lzf(data, size);
  return 0;
}
