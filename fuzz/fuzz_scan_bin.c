/* libFuzzer target for the raw float32 .bin reader (tools/scan_io.c): the
 * field-count guess from the file name and the size, --fields, and the
 * content sniffing that sends PLY/PCD-looking data to those readers. The
 * first input byte picks the file name, the second the --fields value;
 * the rest is the file. Built with -fsanitize=fuzzer,address,undefined by
 * fuzz/CMakeLists.txt; replay.c runs it over the seeds without libFuzzer. */
#include "fuzz_scan_common.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  static const char *const names[8] = {"cloud.bin",
                                       "kitti_000000.bin",
                                       "n008__LIDAR_TOP.pcd.bin",
                                       "scannet_scene.bin",
                                       "points.xyz.bin",
                                       "velodyne/000001.bin",
                                       "sunrgbd_xyzrgb.bin",
                                       NULL};
  static const int fields[8] = {0, 3, 4, 5, 6, 2, 64, 65};
  if (size < 2)
    return 0;
  fuzz_scan_check(data + 2, size - 2, names[data[0] & 7], fields[data[1] & 7]);
  return 0;
}
