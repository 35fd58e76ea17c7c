/* Readers for recorded point clouds: headerless float32 .bin (KITTI,
 * SemanticKITTI, nuScenes, ScanNet style), PLY (ascii, binary little and
 * big endian) and PCD v0.7 (ascii, binary, binary_compressed). Everything
 * comes out as host float32 rows [n][fields] with x, y, z first; points with
 * a non-finite x, y or z (or a float64 one beyond the float32 range) are
 * dropped (and counted), because a voxel grid has no place for them.
 *
 * Pure host code with no dependency on the library, so the parsers can be
 * tested and fuzzed on their own. */
#ifndef VOXCONV_TOOL_SCAN_IO_H
#define VOXCONV_TOOL_SCAN_IO_H

#include <stddef.h>
#include <stdint.h>

/* Limits of the readers; beyond them a read fails with a message naming
 * the limit. A file (or buffer) holds at most VT_SCAN_MAX_BYTES bytes and
 * at most VT_SCAN_MAX_POINTS points. Counts and sizes a header declares are
 * checked against the bytes actually present (with overflow-checked
 * arithmetic) before anything is allocated from them. */
#define VT_SCAN_MAX_BYTES (INT64_C(1) << 34)  /* 16 GiB */
#define VT_SCAN_MAX_POINTS (INT64_C(1) << 30) /* 1,073,741,824 */

typedef struct vt_scan {
  float *data;          /* [n][fields], malloc'd; x y z first */
  int64_t n;            /* points kept (finite x, y, z) */
  int32_t fields;       /* floats per point */
  int64_t n_in_file;    /* points the file holds */
  int64_t n_nonfinite;  /* points dropped for a NaN/Inf coordinate */
  char format[64];      /* e.g. "PCD binary_compressed", "bin float32 x4" */
  char field_names[96]; /* e.g. "x y z r g b" */
  char note[160];       /* how fields were chosen, when guessed; else "" */
} vt_scan_t;

/* Reads a point cloud. The format is recognised by content (PLY magic,
 * PCD header) and, failing that, is a raw float32 .bin.
 *
 * fields: floats per point of a raw .bin; 0 = guess (from the file name:
 * nuScenes 5, ScanNet / SUN RGB-D / "xyzrgb" 6, KITTI 4, ".xyz." 3; else
 * the only count of 3..6 that divides the size). Ambiguous sizes are an
 * error asking for --fields. PLY and PCD describe themselves, so `fields`
 * is ignored for them.
 *
 * PLY gives x y z (other vertex properties and elements are skipped).
 * PCD gives x y z, plus r g b (0..255) when it has an "rgb"/"rgba" field.
 *
 * Returns 0 on success; otherwise -1 and a message in err (never crashes
 * on malformed input). On failure *scan holds nothing to free. */
int vt_scan_read_file(const char *path, int fields, vt_scan_t *scan, char *err,
                      size_t err_len);

/* The same on a buffer already in memory; `name` (may be NULL) stands in
 * for the file name when guessing the field count of a raw .bin. */
int vt_scan_parse(const unsigned char *buf, size_t bytes, const char *name,
                  int fields, vt_scan_t *scan, char *err, size_t err_len);

void vt_scan_free(vt_scan_t *scan);

/* LZF decompression (the codec of PCD binary_compressed), written from the
 * format description: a control byte c < 32 is a run of c+1 literal bytes;
 * otherwise a back-reference of length (c >> 5) + 2 (c >> 5 == 7 adds the
 * next byte) at distance ((c & 31) << 8 | next byte) + 1. Returns the number
 * of bytes written, or -1 if the stream is corrupt or does not fit out. */
int64_t vt_lzf_decompress(const unsigned char *in, size_t in_len,
                          unsigned char *out, size_t out_len);

#endif
