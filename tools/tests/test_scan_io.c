/* Tests of the tool's point-cloud readers (tools/scan_io.c): the recorded
 * PCD (binary_compressed) and PLY against the flat .bin copies converted by
 * an independent reader, raw .bin field guessing, tiny hand-made ascii and
 * binary files written to temp files, the LZF decoder on hand-assembled
 * streams, and malformed headers that must be rejected with a message. */
#include "../scan_io.h"
#include "vc_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes bytes to a fresh temp file whose name ends with suffix. */
static const char *write_temp(const char *suffix, const void *data,
                              size_t bytes) {
  static char path[256];
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/vc_scan_io_XXXXXX%s",
           (dir && *dir) ? dir : "/tmp", suffix);
  const int fd = mkstemps(path, (int)strlen(suffix));
  if (fd < 0)
    return NULL;
  const ssize_t w = write(fd, data, bytes);
  close(fd);
  return w == (ssize_t)bytes ? path : NULL;
}

static int read_temp(const char *suffix, const void *data, size_t bytes,
                     int fields, vt_scan_t *scan, char *err, size_t err_len) {
  const char *path = write_temp(suffix, data, bytes);
  if (!path) {
    snprintf(err, err_len, "cannot write a temp file");
    return -2;
  }
  const int r = vt_scan_read_file(path, fields, scan, err, err_len);
  unlink(path);
  return r;
}

/* Exact float comparison of a scan against a flat float32 file. */
static void compare_with_bin(const vt_scan_t *scan, const char *bin_rel,
                             int32_t bin_fields, int64_t want_points,
                             double tol_rel) {
  size_t bytes = 0;
  float *ref = (float *)vc_read_file(vc_data_path(bin_rel), &bytes);
  VC_EXPECT(ref != NULL, "cannot read %s", vc_data_path(bin_rel));
  if (!ref)
    return;
  const int64_t n_ref = (int64_t)(bytes / (4u * (size_t)bin_fields));
  VC_EXPECT(n_ref == want_points, "%s holds %lld points, want %lld", bin_rel,
            (long long)n_ref, (long long)want_points);
  VC_EXPECT(scan->n == n_ref, "scan has %lld points, %s has %lld",
            (long long)scan->n, bin_rel, (long long)n_ref);
  const int32_t f_cmp = scan->fields < bin_fields ? scan->fields : bin_fields;
  int64_t mismatches = 0, first_bad = -1;
  for (int64_t i = 0; i < n_ref && i < scan->n; i++)
    for (int32_t f = 0; f < f_cmp; f++) {
      const double a = scan->data[i * scan->fields + f];
      const double b = ref[i * bin_fields + f];
      if (fabs(a - b) > tol_rel * fabs(b)) {
        if (first_bad < 0)
          first_bad = i;
        mismatches++;
      }
    }
  VC_EXPECT(mismatches == 0, "%lld values differ from %s (first at point %lld)",
            (long long)mismatches, bin_rel, (long long)first_bad);
  free(ref);
}

static void test_recorded_pcd(void) {
  vt_scan_t s;
  char err[512];
  const int r = vt_scan_read_file(vc_data_path("scans/pcl_office1.pcd"), 0, &s,
                                  err, sizeof err);
  VC_EXPECT(r == 0, "pcl_office1.pcd: %s", err);
  if (r)
    return;
  VC_EXPECT(strcmp(s.format, "PCD binary_compressed") == 0, "format %s",
            s.format);
  VC_EXPECT(s.n_in_file == 307200, "n_in_file %lld", (long long)s.n_in_file);
  VC_EXPECT(s.n == 254456, "finite points %lld", (long long)s.n);
  VC_EXPECT(s.n_nonfinite == 307200 - 254456, "dropped %lld",
            (long long)s.n_nonfinite);
  VC_EXPECT(s.fields == 6, "fields %d (x y z r g b)", s.fields);
  /* xyz bit-exact and rgb exact: the decoder must get every field right. */
  compare_with_bin(&s, "scans/pcl_office1.xyzrgb.f32.bin", 6, 254456, 0.0);
  vt_scan_free(&s);
}

static void test_recorded_ply(void) {
  vt_scan_t s;
  char err[512];
  const int r = vt_scan_read_file(
      vc_data_path("scans/stanford_bunny_bun000.ply"), 0, &s, err, sizeof err);
  VC_EXPECT(r == 0, "bun000.ply: %s", err);
  if (r)
    return;
  VC_EXPECT(strcmp(s.format, "PLY ascii") == 0, "format %s", s.format);
  VC_EXPECT(s.n == 40256 && s.n_nonfinite == 0, "points %lld dropped %lld",
            (long long)s.n, (long long)s.n_nonfinite);
  VC_EXPECT(s.fields == 3, "fields %d", s.fields);
  /* Decimal text -> double -> float may differ from a direct decimal ->
   * float rounding by one ulp in rare halfway cases, hence 1.2e-7. */
  compare_with_bin(&s, "scans/stanford_bunny_bun000.xyz.f32.bin", 3, 40256,
                   1.2e-7);
  vt_scan_free(&s);
}

static void test_recorded_bins(void) {
  static const struct {
    const char *file;
    int fields_arg, want_fields;
    int64_t want_points;
  } cases[] = {
      {"scans/kitti_000000.bin", 0, 4, 115384},
      {"scans/kitti_000008.bin", 0, 4, 17238},
      {"scans/semantickitti_00_000000.bin", 0, 4, 124668},
      {"scans/semantickitti_00_000000.bin", 4, 4, 124668},
      {"scans/nuscenes_n015-2018-07-24-11-22-45+0800__LIDAR_TOP__"
       "1532402927647951.pcd.bin",
       0, 5, 34688},
      {"scans/scannet_scene0000_00.bin", 0, 6, 81369},
      {"scans/sunrgbd_000017.bin", 0, 6, 50000},
      {"bench/spconv_benchmark_pc.xyz.f32.bin", 0, 3, 198130},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    vt_scan_t s;
    char err[512];
    const int r = vt_scan_read_file(vc_data_path(cases[c].file),
                                    cases[c].fields_arg, &s, err, sizeof err);
    VC_EXPECT(r == 0, "%s: %s", cases[c].file, err);
    if (r)
      continue;
    VC_EXPECT(s.fields == cases[c].want_fields && s.n == cases[c].want_points,
              "%s: %d fields, %lld points (want %d, %lld)", cases[c].file,
              s.fields, (long long)s.n, cases[c].want_fields,
              (long long)cases[c].want_points);
    vt_scan_free(&s);
  }
  /* 1,846,144 bytes is not a whole number of 5-float points. */
  vt_scan_t s;
  char err[512];
  VC_EXPECT(vt_scan_read_file(vc_data_path("scans/kitti_000000.bin"), 5, &s,
                              err, sizeof err) != 0 &&
                strstr(err, "multiple") != NULL,
            "--fields 5 on a KITTI file must fail: %s", err);
  VC_EXPECT(vt_scan_read_file(vc_data_path("scans/no_such_file.bin"), 4, &s,
                              err, sizeof err) != 0 &&
                strstr(err, "cannot open") != NULL,
            "missing file: %s", err);
}

static void test_bin_guessing(void) {
  vt_scan_t s;
  char err[512];
  /* 48 bytes fits 3, 4 and 6 floats per point: ambiguous without a hint. */
  float f48[12];
  for (int i = 0; i < 12; i++)
    f48[i] = (float)i;
  VC_EXPECT(read_temp(".bin", f48, sizeof f48, 0, &s, err, sizeof err) != 0 &&
                strstr(err, "--fields") != NULL,
            "ambiguous size must ask for --fields: %s", err);
  /* The same bytes with --fields 4: three points, values in place. */
  int r = read_temp(".bin", f48, sizeof f48, 4, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 3 && s.fields == 4 && s.data[4 * 2 + 3] == 11.0f,
            "--fields 4: %s", err);
  if (r == 0)
    vt_scan_free(&s);
  /* 84 bytes = 7 points of 3 floats, and no other count of 3..6 fits. */
  float f84[21];
  for (int i = 0; i < 21; i++)
    f84[i] = (float)(i * 0.5);
  f84[3 * 2 + 1] = NAN; /* point 2 is dropped */
  r = read_temp(".bin", f84, sizeof f84, 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.fields == 3 && s.n == 6 && s.n_nonfinite == 1 &&
                s.data[3 * 2] == f84[3 * 3],
            "84-byte file: r=%d fields=%d n=%lld: %s", r, s.fields,
            (long long)s.n, err);
  if (r == 0)
    vt_scan_free(&s);
  VC_EXPECT(read_temp(".bin", f84, 0, 0, &s, err, sizeof err) != 0,
            "an empty .bin must fail");
  VC_EXPECT(read_temp(".bin", f84, sizeof f84, 2, &s, err, sizeof err) != 0,
            "--fields 2 must fail (x y z needed): %s", err);
}

static void test_ascii_pcd(void) {
  /* Includes a COUNT 3 field before x, an integer field, a NaN point and a
   * packed float rgb (the colour is the float's bit pattern, printed with
   * enough digits to round-trip). */
  uint32_t bits = 0x00C08040u; /* r=192 g=128 b=64 */
  float rgb;
  memcpy(&rgb, &bits, 4);
  char text[1024];
  snprintf(text, sizeof text,
           "# .PCD v0.7 - Point Cloud Data file format\n"
           "VERSION 0.7\n"
           "FIELDS normal x y z label rgb\n"
           "SIZE 4 4 4 4 2 4\n"
           "TYPE F F F F U F\n"
           "COUNT 3 1 1 1 1 1\n"
           "WIDTH 3\n"
           "HEIGHT 1\n"
           "VIEWPOINT 0 0 0 1 0 0 0\n"
           "POINTS 3\n"
           "DATA ascii\n"
           "0 0 1 1.5 -2.25 3 7 %.9g\n"
           "0 0 1 nan nan nan 7 %.9g\r\n"
           "0 1 0 -0.125 1e2 4 65535 %.9g\n",
           (double)rgb, (double)rgb, (double)rgb);
  vt_scan_t s;
  char err[512];
  const int r = read_temp(".pcd", text, strlen(text), 0, &s, err, sizeof err);
  VC_EXPECT(r == 0, "ascii PCD: %s", err);
  if (r)
    return;
  VC_EXPECT(s.n == 2 && s.n_in_file == 3 && s.n_nonfinite == 1 && s.fields == 6,
            "n=%lld in_file=%lld nonfinite=%lld fields=%d", (long long)s.n,
            (long long)s.n_in_file, (long long)s.n_nonfinite, s.fields);
  const float want[2][6] = {{1.5f, -2.25f, 3.f, 192.f, 128.f, 64.f},
                            {-0.125f, 100.f, 4.f, 192.f, 128.f, 64.f}};
  for (int i = 0; i < 2 && i < s.n; i++)
    for (int f = 0; f < 6; f++)
      VC_EXPECT(s.data[i * 6 + f] == want[i][f], "point %d field %d: %g vs %g",
                i, f, (double)s.data[i * 6 + f], (double)want[i][f]);
  vt_scan_free(&s);
}

/* Appends bytes to a growing buffer. */
static size_t put(unsigned char *buf, size_t at, const void *v, size_t n) {
  memcpy(buf + at, v, n);
  return at + n;
}

static void test_binary_pcd(void) {
  const char *hdr = "VERSION .7\nFIELDS intensity z y x\nSIZE 1 8 4 4\n"
                    "TYPE U F F F\nWIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA binary\n";
  unsigned char buf[512];
  size_t at = put(buf, 0, hdr, strlen(hdr));
  const double zs[2] = {0.5, -7.75};
  const float ys[2] = {2.f, 3.f}, xs[2] = {-1.f, 9.5f};
  for (int i = 0; i < 2; i++) {
    const unsigned char inten = (unsigned char)(10 * i);
    at = put(buf, at, &inten, 1);
    at = put(buf, at, &zs[i], 8);
    at = put(buf, at, &ys[i], 4);
    at = put(buf, at, &xs[i], 4);
  }
  vt_scan_t s;
  char err[512];
  int r = read_temp(".pcd", buf, at, 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 2 && s.fields == 3, "binary PCD: %s", err);
  if (r == 0) {
    VC_EXPECT(s.data[0] == -1.f && s.data[1] == 2.f && s.data[2] == 0.5f &&
                  s.data[3] == 9.5f && s.data[4] == 3.f && s.data[5] == -7.75f,
              "binary PCD values");
    vt_scan_free(&s);
  }
  /* One byte short of two points: rejected, not read past the end. */
  r = read_temp(".pcd", buf, at - 1, 0, &s, err, sizeof err);
  VC_EXPECT(r != 0 && strstr(err, "do not fit") != NULL, "truncated: %s", err);

  /* binary_compressed, field-major, the LZF stream made of literal runs
   * (control byte = run length - 1). */
  const char *hdr2 = "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\n"
                     "COUNT 1 1 1\nWIDTH 2\nHEIGHT 1\nPOINTS 2\n"
                     "DATA binary_compressed\n";
  const float raw[6] = {1.f, 4.f, 2.f, 5.f, 3.f, NAN}; /* x0 x1 y0 y1 z0 z1 */
  unsigned char comp[64];
  size_t c = 0;
  comp[c++] = 23; /* 24 literal bytes */
  c = put(comp, c, raw, 24);
  at = put(buf, 0, hdr2, strlen(hdr2));
  const uint32_t sizes[2] = {(uint32_t)c, 24};
  at = put(buf, at, sizes, 8);
  at = put(buf, at, comp, c);
  r = read_temp(".pcd", buf, at, 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 1 && s.n_nonfinite == 1,
            "binary_compressed PCD: %s", err);
  if (r == 0) {
    VC_EXPECT(s.data[0] == 1.f && s.data[1] == 2.f && s.data[2] == 3.f,
              "field-major order: %g %g %g", (double)s.data[0],
              (double)s.data[1], (double)s.data[2]);
    vt_scan_free(&s);
  }
  /* Corrupt the stream: a literal run longer than the data. */
  buf[at - c] = 30;
  r = read_temp(".pcd", buf, at, 0, &s, err, sizeof err);
  VC_EXPECT(r != 0 && strstr(err, "LZF") != NULL, "corrupt LZF: %s", err);
}

/* Parses text (+ optional binary tail) as name; returns the status and
 * leaves the message in err. */
static int parse_bytes(const char *name, const void *data, size_t bytes,
                       char *err, size_t err_len, vt_scan_t *s) {
  err[0] = '\0';
  const int r = vt_scan_parse((const unsigned char *)data, bytes, name, 0, s,
                              err, err_len);
  if (r == 0)
    vt_scan_free(s);
  return r;
}

/* Issue 22 item 1: a point of 2^24 bytes times WIDTH 2^40 is 2^64, which
 * wrapped to 0 and matched the 0-byte uncompressed size; the reader then
 * allocated for 2^40 points and read far outside the buffer. */
static void test_pcd_size_overflow(void) {
  char err[512];
  vt_scan_t s;
  unsigned char buf[512];
  const char *hdr = "VERSION 0.7\nFIELDS x y z a b\nSIZE 8 8 8 8 8\n"
                    "TYPE F F F F F\nCOUNT 1 1 1 1048576 1048573\n"
                    "WIDTH 1099511627776\nHEIGHT 1\nDATA binary_compressed\n";
  const uint32_t zero[2] = {0, 0};
  size_t at = put(buf, 0, hdr, strlen(hdr));
  at = put(buf, at, zero, 8);
  int r = parse_bytes("o.pcd", buf, at, err, sizeof err, &s);
  VC_EXPECT(r != 0 && strstr(err, "binary_compressed") &&
                strstr(err, "1099511627776 points x 16777216 bytes") &&
                strstr(err, "overflow"),
            "2^40 points of 2^24 bytes: %s", err);
  /* The same product with DATA binary and ascii: named, not a crash. */
  const char *kinds[2] = {"binary", "ascii"};
  for (int k = 0; k < 2; k++) {
    char text[512];
    snprintf(text, sizeof text,
             "FIELDS x y z a b\nSIZE 8 8 8 8 8\nTYPE F F F F F\n"
             "COUNT 1 1 1 1048576 1048573\nWIDTH 1099511627776\n"
             "DATA %s\n1 2 3\n",
             kinds[k]);
    r = parse_bytes("o.pcd", text, strlen(text), err, sizeof err, &s);
    VC_EXPECT(r != 0 && strstr(err, kinds[k]) &&
                  strstr(err, "1099511627776 points"),
              "DATA %s: %s", kinds[k], err);
  }
  /* A 3 GiB uncompressed size from an empty LZF stream is refused before
   * anything is allocated: LZF expands at most 88x (3 bytes -> 264). */
  const char *hdr2 = "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 268435456\n"
                     "DATA binary_compressed\n";
  const uint32_t sizes[2] = {1, 3221225472u};
  at = put(buf, 0, hdr2, strlen(hdr2));
  at = put(buf, at, sizes, 8);
  buf[at++] = 0;
  r = parse_bytes("o.pcd", buf, at, err, sizeof err, &s);
  VC_EXPECT(r != 0 && strstr(err, "3221225472") &&
                strstr(err, "cannot come from 1 byte"),
            "LZF expansion bound: %s", err);
}

/* Issue 22 item 2: WIDTH 2^40 x HEIGHT 2^40 overflowed int64 (UBSan) and
 * the release build read the file as 0 points. */
static void test_pcd_width_height_overflow(void) {
  char err[512];
  vt_scan_t s;
  const char *text = "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\n"
                     "WIDTH 1099511627776\nHEIGHT 1099511627776\n"
                     "DATA ascii\n1 2 3\n";
  int r = parse_bytes("o.pcd", text, strlen(text), err, sizeof err, &s);
  VC_EXPECT(r != 0 &&
                strstr(err, "WIDTH 1099511627776 x HEIGHT 1099511627776") &&
                strstr(err, "overflow"),
            "WIDTH x HEIGHT overflow: %s", err);
  /* In range but inconsistent with POINTS: still named. */
  const char *t2 = "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 2147483648\n"
                   "HEIGHT 2147483648\nPOINTS 0\nDATA ascii\n";
  r = parse_bytes("o.pcd", t2, strlen(t2), err, sizeof err, &s);
  VC_EXPECT(r != 0 &&
                strstr(err, "POINTS 0 != WIDTH 2147483648 x HEIGHT 2147483648"),
            "POINTS vs WIDTH x HEIGHT: %s", err);
}

/* Issue 22 item 3: elements read past before the vertices are bounded by
 * the bytes present. One without properties holds no bytes (2^40 of them
 * took 80 minutes to skip); one with properties cannot declare more items
 * than the data could hold. */
static void test_ply_element_bounds(void) {
  char err[512];
  vt_scan_t s;
  unsigned char buf[512];
  const float xyz[3] = {1.f, 2.f, 3.f};
  const char *bin = "ply\nformat binary_little_endian 1.0\n"
                    "element junk 1099511627776\nelement vertex 1\n"
                    "property float x\nproperty float y\nproperty float z\n"
                    "end_header\n";
  size_t at = put(buf, 0, bin, strlen(bin));
  at = put(buf, at, xyz, sizeof xyz);
  int r = vt_scan_parse(buf, at, "j.ply", 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 1 && s.data[0] == 1.f && s.data[2] == 3.f,
            "binary, element without properties: %s", err);
  if (r == 0)
    vt_scan_free(&s);
  const char *ascii = "ply\nformat ascii 1.0\nelement junk 1099511627776\n"
                      "element vertex 1\nproperty float x\nproperty float y\n"
                      "property float z\nend_header\n1 2 3\n";
  r = vt_scan_parse((const unsigned char *)ascii, strlen(ascii), "j.ply", 0, &s,
                    err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 1 && s.data[1] == 2.f,
            "ascii, element without properties: %s", err);
  if (r == 0)
    vt_scan_free(&s);
  /* With a property each item is at least its bytes: refused up front. */
  const char *big = "ply\nformat binary_big_endian 1.0\n"
                    "element junk 1099511627776\nproperty list uchar int v\n"
                    "property short s\nelement vertex 1\nproperty float x\n"
                    "property float y\nproperty float z\nend_header\n";
  at = put(buf, 0, big, strlen(big));
  at = put(buf, at, xyz, sizeof xyz);
  r = parse_bytes("j.ply", buf, at, err, sizeof err, &s);
  VC_EXPECT(
      r != 0 && strstr(err, "element \"junk\"") &&
          strstr(err, "1099511627776 items declared of at least 3 bytes") &&
          strstr(err, "only 12 bytes"),
      "absurd binary count: %s", err);
  const char *big_ascii = "ply\nformat ascii 1.0\nelement junk 5\n"
                          "property uchar a\nproperty uchar b\n"
                          "element vertex 1\nproperty float x\n"
                          "property float y\nproperty float z\n"
                          "end_header\n1 2 3\n";
  r = parse_bytes("j.ply", big_ascii, strlen(big_ascii), err, sizeof err, &s);
  VC_EXPECT(r != 0 && strstr(err, "element \"junk\"") &&
                strstr(err, "5 items declared of at least 4 bytes"),
            "absurd ascii count: %s", err);
  /* The vertex count is bounded by the real item size (3 floats = 12
   * bytes), not 1 byte per item. */
  const char *vert = "ply\nformat binary_little_endian 1.0\n"
                     "element vertex 2\nproperty float x\nproperty float y\n"
                     "property float z\nend_header\n";
  at = put(buf, 0, vert, strlen(vert));
  at = put(buf, at, xyz, sizeof xyz);
  r = parse_bytes("j.ply", buf, at, err, sizeof err, &s);
  VC_EXPECT(r != 0 && strstr(err, "element \"vertex\"") &&
                strstr(err, "2 items declared of at least 12 bytes"),
            "vertex count: %s", err);
}

/* Issue 22 item 4: a header line of more than 8 words was skipped without
 * a word; a skipped property misaligned every binary vertex. */
static void test_header_word_limits(void) {
  char err[512];
  vt_scan_t s;
  unsigned char buf[4096];
  const char *hdr = "ply\nformat binary_little_endian 1.0\n"
                    "element vertex 100\nproperty float x\nproperty float y\n"
                    "property float z\nproperty   float   a b c d e f g\n"
                    "end_header\n";
  size_t at = put(buf, 0, hdr, strlen(hdr));
  for (int i = 0; i < 100; i++) {
    const float v[4] = {(float)i, 2.f * (float)i, 3.f * (float)i, 7.f};
    at = put(buf, at, v, sizeof v);
  }
  int r = parse_bytes("w.ply", buf, at, err, sizeof err, &s);
  VC_EXPECT(r != 0 && strstr(err, "PLY line 7") && strstr(err, "9 words"),
            "9-word property line: %s", err);
  /* Every other keyword: its own word count, named. */
  const char *cases[][2] = {
      {"ply\nformat ascii 1.0 extra words here and more of them\n", "line 2"},
      {"ply\nformat ascii 1.0\nelement vertex 1 2 3 4 5 6 7 8\n", "line 3"},
      {"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x y\n",
       "PLY line 4: \"property float x y\""},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    r = parse_bytes("w.ply", cases[c][0], strlen(cases[c][0]), err, sizeof err,
                    &s);
    VC_EXPECT(r != 0 && strstr(err, cases[c][1]), "case %zu: %s", c, err);
  }
  /* PCD: FIELDS of 65 names is refused naming the line, not skipped. */
  char text[1024] = "FIELDS x y z";
  for (int i = 0; i < 62; i++)
    strcat(text, " f");
  strcat(text, "\nSIZE 4 4 4\nTYPE F F F\nWIDTH 1\nDATA ascii\n1 2 3\n");
  r = parse_bytes("w.pcd", text, strlen(text), err, sizeof err, &s);
  VC_EXPECT(r != 0 && strstr(err, "PCD line 1: 65 fields"), "65 fields: %s",
            err);
}

/* Issue 22 item 5: a directory was "out of memory (9223372036854775807
 * bytes)" and a FIFO blocked forever; both are named without reading. */
static void test_not_regular_files(void) {
  char err[512];
  vt_scan_t s;
  char dir[] = "/tmp/vc_scan_dir_XXXXXX";
  VC_EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
  int r = vt_scan_read_file(dir, 0, &s, err, sizeof err);
  VC_EXPECT(r != 0 && strstr(err, dir) && strstr(err, "is a directory") &&
                !strstr(err, "9223372036854775807"),
            "directory: %s", err);
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/cloud.bin", dir);
  VC_EXPECT(mkfifo(fifo, 0600) == 0, "mkfifo");
  alarm(20); /* a reader that blocks on the FIFO fails the test */
  r = vt_scan_read_file(fifo, 4, &s, err, sizeof err);
  alarm(0);
  VC_EXPECT(r != 0 && strstr(err, fifo) &&
                strstr(err, "is not a regular file (a FIFO)"),
            "FIFO: %s", err);
  unlink(fifo);
  rmdir(dir);
  VC_EXPECT(vt_scan_read_file("/dev/null", 4, &s, err, sizeof err) != 0 &&
                strstr(err, "/dev/null is not a regular file"),
            "character device: %s", err);
}

/* Found by fuzz_scan_ply / fuzz_scan_pcd: a float64 coordinate beyond the
 * float32 range became inf in the output (an undefined conversion), a
 * point the voxelizer then refused. Such points are dropped and counted
 * like NaN ones. */
static void test_f64_beyond_float(void) {
  char err[512];
  vt_scan_t s;
  unsigned char buf[512];
  const char *hdr = "ply\nformat binary_little_endian 1.0\n"
                    "element vertex 3\nproperty double x\n"
                    "property double y\nproperty double z\nend_header\n";
  size_t at = put(buf, 0, hdr, strlen(hdr));
  const double v[3][3] = {{1, 2, 3}, {1, -1e300, 3}, {3.4e38, 4, 5}};
  at = put(buf, at, v, sizeof v);
  int r = vt_scan_parse(buf, at, "f.ply", 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 2 && s.n_nonfinite == 1 && s.data[3] == 3.4e38f,
            "PLY float64 beyond float32: r=%d n=%lld dropped=%lld: %s", r,
            (long long)s.n, (long long)s.n_nonfinite, err);
  if (r == 0)
    vt_scan_free(&s);
  const char *text = "FIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nWIDTH 2\n"
                     "DATA ascii\n1 2 1e39\n4 5 6\n";
  r = vt_scan_parse((const unsigned char *)text, strlen(text), "f.pcd", 0, &s,
                    err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 1 && s.n_nonfinite == 1 && s.data[0] == 4.f,
            "PCD 1e39: r=%d n=%lld: %s", r, (long long)s.n, err);
  if (r == 0)
    vt_scan_free(&s);
}

static void test_lzf(void) {
  /* "abc" literally, then a back-reference of 9 bytes at distance 3:
   * control (7 << 5) | 0 means "length 7 + next byte + 2". */
  const unsigned char stream[] = {2, 'a', 'b', 'c', 0xE0, 0, 2};
  unsigned char out[16];
  memset(out, 0, sizeof out);
  int64_t n = vt_lzf_decompress(stream, sizeof stream, out, sizeof out);
  VC_EXPECT(n == 12 && memcmp(out, "abcabcabcabc", 12) == 0,
            "lzf overlap copy: n=%lld", (long long)n);
  /* A short back-reference: control (1 << 5) = length 3, distance 1. */
  const unsigned char s2[] = {0, 'z', 0x20, 0};
  n = vt_lzf_decompress(s2, sizeof s2, out, sizeof out);
  VC_EXPECT(n == 4 && memcmp(out, "zzzz", 4) == 0, "lzf run: n=%lld",
            (long long)n);
  VC_EXPECT(vt_lzf_decompress(stream, sizeof stream, out, 11) < 0,
            "output overflow must fail");
  const unsigned char far_ref[] = {0, 'a', 0x20, 5}; /* distance 6 > 1 */
  VC_EXPECT(vt_lzf_decompress(far_ref, sizeof far_ref, out, sizeof out) < 0,
            "reference before the start must fail");
  const unsigned char cut[] = {5, 'a', 'b'};
  VC_EXPECT(vt_lzf_decompress(cut, sizeof cut, out, sizeof out) < 0,
            "truncated literal must fail");
  const unsigned char cut2[] = {0, 'a', 0x20};
  VC_EXPECT(vt_lzf_decompress(cut2, sizeof cut2, out, sizeof out) < 0,
            "truncated back-reference must fail");
}

static void test_ply(void) {
  /* ascii, with an element before the vertices, a list property inside
   * them and faces after them. */
  const char *ascii =
      "ply\r\nformat ascii 1.0\r\ncomment made by hand\r\n"
      "element camera 1\r\nproperty float fov\r\n"
      "property list uchar int ids\r\n"
      "element vertex 3\r\nproperty uchar red\r\n"
      "property double z\r\nproperty list uchar float w\r\n"
      "property float x\r\nproperty float y\r\n"
      "element face 1\r\nproperty list uchar int vertex_indices\r\n"
      "end_header\r\n"
      "60 2 5 6\r\n"
      "255 1.5 2 0.1 0.2 10 20\r\n"
      "0 -3 0 11 21\r\n"
      "7 inf 1 9 12 22\r\n"
      "3 0 1 2\r\n";
  vt_scan_t s;
  char err[512];
  int r = read_temp(".ply", ascii, strlen(ascii), 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 2 && s.n_nonfinite == 1 && s.fields == 3,
            "ascii PLY: %s", err);
  if (r == 0) {
    VC_EXPECT(s.data[0] == 10.f && s.data[1] == 20.f && s.data[2] == 1.5f &&
                  s.data[3] == 11.f && s.data[4] == 21.f && s.data[5] == -3.f,
              "ascii PLY values");
    vt_scan_free(&s);
  }
  /* binary big endian: double x y z plus a uchar, after a skipped element
   * holding a list. */
  const char *hdr = "ply\nformat binary_big_endian 1.0\n"
                    "element meta 1\nproperty list uchar short v\n"
                    "element vertex 2\nproperty double x\n"
                    "property double y\nproperty double z\n"
                    "property uchar q\nend_header\n";
  unsigned char buf[512];
  size_t at = put(buf, 0, hdr, strlen(hdr));
  const unsigned char meta[] = {2, 0, 1, 0, 2};
  at = put(buf, at, meta, sizeof meta);
  const double v[2][3] = {{1.25, -2.5, 1e3}, {0.1, 0.2, 0.3}};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 3; k++) {
      unsigned char b[8];
      memcpy(b, &v[i][k], 8);
      for (int j = 0; j < 8; j++) /* host is little endian: reverse */
        buf[at + (size_t)j] = b[7 - j];
      at += 8;
    }
    buf[at++] = 42;
  }
  r = read_temp(".ply", buf, at, 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 2, "big-endian PLY: %s", err);
  if (r == 0) {
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 3; k++)
        VC_EXPECT(s.data[i * 3 + k] == (float)v[i][k],
                  "big-endian PLY point %d axis %d: %g", i, k,
                  (double)s.data[i * 3 + k]);
    vt_scan_free(&s);
  }
  /* little endian float with a truncated last vertex */
  const char *hdr_le = "ply\nformat binary_little_endian 1.0\n"
                       "element vertex 2\nproperty float x\n"
                       "property float y\nproperty float z\nend_header\n";
  at = put(buf, 0, hdr_le, strlen(hdr_le));
  const float le[6] = {1, 2, 3, 4, 5, 6};
  at = put(buf, at, le, sizeof le);
  r = read_temp(".ply", buf, at, 0, &s, err, sizeof err);
  VC_EXPECT(r == 0 && s.n == 2 && s.data[5] == 6.f, "LE PLY: %s", err);
  if (r == 0)
    vt_scan_free(&s);
  r = read_temp(".ply", buf, at - 2, 0, &s, err, sizeof err);
  VC_EXPECT(r != 0 && strstr(err, "truncated") != NULL, "truncated PLY: %s",
            err);
}

static void test_malformed(void) {
  static const struct {
    const char *name, *text, *must_say;
  } cases[] = {
      {"a.pcd", "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 1\n",
       "without a DATA"},
      {"a.pcd",
       "VERSION 0.7\nFIELDS x y z\nSIZE 4 4\nTYPE F F F\nWIDTH 1\n"
       "DATA ascii\n1 2 3\n",
       "SIZE has 2"},
      {"a.pcd", "FIELDS x y z\nSIZE 4 4 4\nTYPE F Q F\nWIDTH 1\nDATA ascii\n",
       "TYPE"},
      {"a.pcd", "FIELDS x y z\nSIZE 4 4 3\nTYPE F F F\nWIDTH 1\nDATA ascii\n",
       "SIZE"},
      {"a.pcd",
       "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 2\nHEIGHT 2\n"
       "POINTS 3\nDATA ascii\n",
       "POINTS 3"},
      {"a.pcd",
       "FIELDS x y w\nSIZE 4 4 4\nTYPE F F F\nWIDTH 1\nDATA ascii\n"
       "1 2 3\n",
       "x, y and z"},
      {"a.pcd", "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 1\nDATA lzma\n",
       "DATA"},
      {"a.pcd",
       "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 2\nDATA ascii\n"
       "1 2 3\n4 5 six\n",
       "not a number"},
      {"a.pcd",
       "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 2\nDATA ascii\n"
       "1 2 3\n4 5.000\n",
       "data ends early"},
      {"a.pcd",
       "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 1\nBOGUS 1\n"
       "DATA ascii\n1 2 3\n",
       "unknown header key"},
      {"a.ply",
       "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n"
       "property float y\nproperty float z\n1 2 3\n",
       "end_header"},
      {"a.ply",
       "ply\nformat ascii 1.0\nelement face 1\n"
       "property list uchar int vertex_indices\nend_header\n0\n",
       "no \"vertex\""},
      {"a.ply", "ply\nformat binary_middle_endian 1.0\nend_header\n",
       "unknown format"},
      {"a.ply",
       "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n"
       "property float y\nend_header\n1 2\n",
       "\"z\""},
      {"a.ply",
       "ply\nformat ascii 1.0\nelement vertex 1\n"
       "property quad x\nend_header\n",
       "unknown property type"},
      {"a.ply",
       "ply\nelement vertex 1\nproperty float x\nproperty float y\n"
       "property float z\nend_header\n1 2 3\n",
       "format"},
      {"a.ply",
       "ply\nformat ascii 1.0\nelement vertex 1000000\n"
       "property float x\nproperty float y\nproperty float z\n"
       "end_header\n1 2 3\n",
       "declared"},
      {"a.ply", "PLY\nformat ascii 1.0\n", "first line"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    vt_scan_t s;
    char err[512] = "";
    const int r = vt_scan_parse((const unsigned char *)cases[c].text,
                                strlen(cases[c].text), cases[c].name, 0, &s,
                                err, sizeof err);
    VC_EXPECT(r != 0, "case %zu must be rejected", c);
    VC_EXPECT(strstr(err, cases[c].must_say) != NULL,
              "case %zu: message \"%s\" should mention \"%s\"", c, err,
              cases[c].must_say);
    if (r == 0)
      vt_scan_free(&s);
  }
}

/* Random byte flips and truncations over valid files of every format
 * (ascii PCD, binary_compressed PCD, binary and ascii PLY): every outcome
 * must be a clean success or a message (this test runs under ASan+UBSan in
 * the sanitizer build, which turns any out-of-bounds read into a failure). */
static void test_fuzz_smoke(void) {
  unsigned char templates[4][512];
  size_t lens[4];
  const char *names[4] = {"f.pcd", "f.pcd", "f.ply", "f.ply"};
  const char *pcd = "VERSION 0.7\nFIELDS x y z rgb\nSIZE 4 4 4 4\n"
                    "TYPE F F F U\nCOUNT 1 1 1 1\nWIDTH 2\nHEIGHT 1\n"
                    "POINTS 2\nDATA ascii\n1 2 3 255\n4 5 6 65280\n";
  lens[0] = strlen(pcd);
  memcpy(templates[0], pcd, lens[0]);
  /* binary_compressed: a literal run then a back-reference (the 8 bytes
   * of z repeat the 8 bytes of y). */
  const char *hdr = "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 2\n"
                    "DATA binary_compressed\n";
  size_t at = put(templates[1], 0, hdr, strlen(hdr));
  const float xy[4] = {1.f, 2.f, 3.f, 4.f};
  unsigned char comp[32];
  size_t c = 0;
  comp[c++] = 15;
  c = put(comp, c, xy, 16);
  comp[c++] = (6u << 5) | 0u; /* length 6 + 2 = 8 */
  comp[c++] = 7;              /* distance 8 */
  const uint32_t sizes[2] = {(uint32_t)c, 24};
  at = put(templates[1], at, sizes, 8);
  lens[1] = put(templates[1], at, comp, c);
  const char *ply = "ply\nformat binary_little_endian 1.0\n"
                    "element vertex 2\nproperty float x\nproperty float y\n"
                    "property float z\nproperty list uchar int idx\n"
                    "end_header\n";
  at = put(templates[2], 0, ply, strlen(ply));
  for (int i = 0; i < 2; i++) {
    at = put(templates[2], at, xy, 12);
    const unsigned char one = 1;
    const int32_t idx = 7;
    at = put(templates[2], at, &one, 1);
    at = put(templates[2], at, &idx, 4);
  }
  lens[2] = at;
  const char *aply = "ply\nformat ascii 1.0\nelement vertex 2\n"
                     "property float x\nproperty float y\nproperty float z\n"
                     "element face 1\nproperty list uchar int v\n"
                     "end_header\n1 2 3\n4 5 6\n2 0 1\n";
  lens[3] = strlen(aply);
  memcpy(templates[3], aply, lens[3]);

  /* The unmutated templates must parse (else the fuzzing proves little). */
  for (int t = 0; t < 4; t++) {
    vt_scan_t s;
    char err[256] = "";
    const int r =
        vt_scan_parse(templates[t], lens[t], names[t], 0, &s, err, sizeof err);
    VC_EXPECT(r == 0 && s.n == 2, "template %d: %s", t, err);
    if (r == 0) {
      if (t == 1)
        VC_EXPECT(s.data[2] == 3.f && s.data[5] == 4.f,
                  "back-referenced z: %g %g", (double)s.data[2],
                  (double)s.data[5]);
      vt_scan_free(&s);
    }
  }
  unsigned char buf[512];
  int ok = 0, silent = 0;
  const int trials = 8000;
  for (int trial = 0; trial < trials; trial++) {
    const int t = trial % 4;
    memcpy(buf, templates[t], lens[t]);
    const int flips = 1 + (int)vc_rand_range(0, 3);
    for (int k = 0; k < flips; k++)
      buf[vc_rand_range(0, (int64_t)lens[t] - 1)] =
          (unsigned char)vc_rand_range(0, 255);
    const size_t cut =
        (size_t)vc_rand_range((int64_t)lens[t] / 2, (int64_t)lens[t]);
    vt_scan_t s;
    char err[256] = "";
    if (vt_scan_parse(buf, cut, names[t], 0, &s, err, sizeof err) == 0) {
      ok++;
      vt_scan_free(&s);
    } else if (!err[0]) {
      silent++;
    }
  }
  VC_EXPECT(silent == 0, "%d of %d mutated files rejected without a message",
            silent, trials);
  printf("fuzz smoke: %d of %d mutated files still parse\n", ok, trials);
}

int main(void) {
  vc_test_init("test_scan_io");
  test_lzf();
  test_recorded_pcd();
  test_recorded_ply();
  test_recorded_bins();
  test_bin_guessing();
  test_not_regular_files();
  test_ascii_pcd();
  test_binary_pcd();
  test_pcd_size_overflow();
  test_pcd_width_height_overflow();
  test_ply();
  test_ply_element_bounds();
  test_header_word_limits();
  test_f64_beyond_float();
  test_malformed();
  test_fuzz_smoke();
  return vc_test_finish();
}
