/* Point-cloud readers: raw float32 .bin, PLY, PCD (see scan_io.h); this
 * file has the helpers the readers share (scan_parse.h), LZF, the raw .bin
 * reader and the entry points; PLY and PCD are in scan_ply.c and
 * scan_pcd.c.
 *
 * Every read is bounds-checked against the buffer: a truncated or malformed
 * file is a message, never a crash. Sizes from headers are checked for
 * overflow before anything is allocated from them. */
#include "scan_parse.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int vt_scan_fail(char *err, size_t err_len, const char *fmt, ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

void vt_scan_free(vt_scan_t *scan) {
  if (!scan)
    return;
  free(scan->data);
  memset(scan, 0, sizeof *scan);
}

/* ---- LZF ------------------------------------------------------------- */

int64_t vt_lzf_decompress(const unsigned char *in, size_t in_len,
                          unsigned char *out, size_t out_len) {
  size_t ip = 0, op = 0;
  while (ip < in_len) {
    const unsigned ctrl = in[ip++];
    if (ctrl < 32) { /* literal run of ctrl + 1 bytes */
      const size_t run = (size_t)ctrl + 1;
      if (run > in_len - ip || run > out_len - op)
        return -1;
      memcpy(out + op, in + ip, run);
      ip += run;
      op += run;
    } else { /* back-reference */
      size_t len = ctrl >> 5;
      if (len == 7) {
        if (ip >= in_len)
          return -1;
        len += in[ip++];
      }
      len += 2;
      if (ip >= in_len)
        return -1;
      const size_t dist = (((size_t)ctrl & 0x1Fu) << 8) + in[ip++] + 1;
      if (dist > op || len > out_len - op)
        return -1;
      /* Byte by byte on purpose: the source may overlap the bytes being
       * written (a run of repeats), which memcpy/memmove would not repeat. */
      const unsigned char *ref = out + op - dist;
      for (size_t i = 0; i < len; i++)
        out[op + i] = ref[i];
      op += len;
    }
  }
  return (int64_t)op;
}

size_t vt_scalar_size(vt_scalar_t t) {
  switch (t) {
  case T_I8:
  case T_U8:
    return 1;
  case T_I16:
  case T_U16:
    return 2;
  case T_I32:
  case T_U32:
  case T_F32:
    return 4;
  case T_I64:
  case T_U64:
  case T_F64:
    return 8;
  default:
    return 0;
  }
}

/* Reads one scalar stored with the given byte order as a double. */
double vt_read_scalar(const unsigned char *p, vt_scalar_t t, int big_endian) {
  unsigned char b[8];
  const size_t n = vt_scalar_size(t);
  for (size_t i = 0; i < n; i++) /* to little endian (host, x86/arm64) */
    b[i] = big_endian ? p[n - 1 - i] : p[i];
  uint64_t u = 0;
  for (size_t i = 0; i < n; i++)
    u |= (uint64_t)b[i] << (8 * i);
  switch (t) {
  case T_I8:
    return (double)(int8_t)u;
  case T_U8:
    return (double)(uint8_t)u;
  case T_I16:
    return (double)(int16_t)u;
  case T_U16:
    return (double)(uint16_t)u;
  case T_I32:
    return (double)(int32_t)u;
  case T_U32:
    return (double)(uint32_t)u;
  case T_I64:
    return (double)(int64_t)u;
  case T_U64:
    return (double)u;
  case T_F32: {
    const uint32_t v = (uint32_t)u;
    float f;
    memcpy(&f, &v, 4);
    return (double)f;
  }
  case T_F64: {
    double d;
    memcpy(&d, &u, 8);
    return d;
  }
  default:
    return NAN;
  }
}

uint32_t vt_read_u32_le(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

/* ---- text helpers ----------------------------------------------------- */

/* Copies the next line (without its \n or \r\n) into line. Returns 1, 0 at
 * the end of the buffer, -1 if the line is longer than line_cap - 1. */
int vt_next_line(const unsigned char *buf, size_t bytes, size_t *pos,
                 char *line, size_t line_cap) {
  if (*pos >= bytes)
    return 0;
  size_t n = 0;
  while (*pos < bytes && buf[*pos] != '\n') {
    if (n + 1 >= line_cap)
      return -1;
    line[n++] = (char)buf[(*pos)++];
  }
  if (*pos < bytes)
    (*pos)++; /* the '\n' */
  if (n > 0 && line[n - 1] == '\r')
    n--;
  line[n] = '\0';
  return 1;
}

/* Next whitespace-separated token. Returns its length, 0 at the end, -1 if
 * it does not fit tok_cap - 1 characters. */
int vt_next_token(const unsigned char *buf, size_t bytes, size_t *pos,
                  char *tok, size_t tok_cap) {
  while (*pos < bytes && isspace(buf[*pos]))
    (*pos)++;
  size_t n = 0;
  while (*pos < bytes && !isspace(buf[*pos])) {
    if (n + 1 >= tok_cap)
      return -1;
    tok[n++] = (char)buf[(*pos)++];
  }
  tok[n] = '\0';
  return (int)n;
}

/* Every word is NUL-terminated in place and counted, so a caller can
 * name a line with too many words instead of silently dropping the rest. */
int vt_split_words(char *line, char **words, int max_words) {
  int n = 0;
  char *p = line;
  while (*p) {
    while (*p && isspace((unsigned char)*p))
      p++;
    if (!*p)
      break;
    if (n < max_words)
      words[n] = p;
    n++;
    while (*p && !isspace((unsigned char)*p))
      p++;
    if (*p)
      *p++ = '\0';
  }
  return n;
}

int vt_parse_number(const char *tok, double *out) {
  char *end = NULL;
  const double v = strtod(tok, &end);
  if (!end || end == tok || *end != '\0')
    return 0;
  *out = v;
  return 1;
}

int vt_parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  const long long v = strtoll(s, &end, 10);
  if (!end || end == s || *end != '\0' || v < lo || v > hi)
    return 0;
  *out = (int64_t)v;
  return 1;
}

/* The callers have checked that the data can hold n_points; the limit
 * keeps the product below any overflow (2^30 x 64 floats). */
int vt_scan_alloc(vt_scan_t *scan, int64_t n_points, int32_t fields, char *err,
                  size_t err_len) {
  if (n_points > VT_SCAN_MAX_POINTS)
    return vt_scan_fail(err, err_len,
                        "%lld points, more than the reader's limit of %lld",
                        (long long)n_points, (long long)VT_SCAN_MAX_POINTS);
  const size_t count = (size_t)(n_points > 0 ? n_points : 1) * (size_t)fields;
  scan->data = (float *)malloc(count * sizeof(float));
  if (!scan->data)
    return vt_scan_fail(err, err_len,
                        "out of memory for %lld points x %d floats",
                        (long long)n_points, (int)fields);
  scan->fields = fields;
  scan->n_in_file = n_points;
  scan->n = 0;
  scan->n_nonfinite = 0;
  return 0;
}

/* Appends one point if its coordinates are finite. */
/* Finite once stored as float32: a float64 beyond FLT_MAX would become
 * inf (and converting it is undefined behaviour). */
static int finite_as_float(double v) {
  return isfinite(v) && fabs(v) <= (double)FLT_MAX;
}

void vt_scan_push(vt_scan_t *scan, const double *values) {
  if (!finite_as_float(values[0]) || !finite_as_float(values[1]) ||
      !finite_as_float(values[2])) {
    scan->n_nonfinite++;
    return;
  }
  float *row = scan->data + (size_t)scan->n * (size_t)scan->fields;
  for (int32_t f = 0; f < scan->fields; f++)
    row[f] = (float)values[f];
  scan->n++;
}

/* ---- raw float32 .bin ------------------------------------------------ */

static int contains_ci(const char *hay, const char *needle) {
  if (!hay)
    return 0;
  const size_t n = strlen(needle);
  for (const char *p = hay; *p; p++)
    if (strncasecmp(p, needle, n) == 0)
      return 1;
  return 0;
}

static int parse_bin(const unsigned char *buf, size_t bytes, const char *name,
                     int fields, vt_scan_t *scan, char *err, size_t err_len) {
  if (bytes == 0)
    return vt_scan_fail(err, err_len, "raw .bin: the file is empty");
  if (fields != 0 && (fields < 3 || fields > VT_MAX_FIELDS))
    return vt_scan_fail(err, err_len,
                        "raw .bin: --fields %d (want 3..%d floats per point, "
                        "x y z first)",
                        fields, VT_MAX_FIELDS);
  const char *base = name ? strrchr(name, '/') : NULL;
  base = base ? base + 1 : name;
  if (fields == 0) {
    /* The file name is the only description a headerless file has. */
    int hinted = 0;
    const char *why = NULL;
    if (contains_ci(base, "nuscenes") || contains_ci(base, ".pcd.bin"))
      hinted = 5, why = "nuScenes name";
    else if (contains_ci(base, "scannet") || contains_ci(base, "sunrgbd") ||
             contains_ci(base, "xyzrgb"))
      hinted = 6, why = "ScanNet/SUN RGB-D/xyzrgb name";
    else if (contains_ci(base, "kitti") || contains_ci(base, "velodyne"))
      hinted = 4, why = "KITTI name";
    else if (contains_ci(base, ".xyz.") || contains_ci(base, "_xyz."))
      hinted = 3, why = "xyz name";
    if (hinted && bytes % (4u * (size_t)hinted) == 0) {
      fields = hinted;
      snprintf(scan->note, sizeof scan->note,
               "--fields %d guessed from the %s (pass --fields to override)",
               fields, why);
    } else {
      int candidates[4], n_cand = 0;
      for (int f = 3; f <= 6; f++)
        if (bytes % (4u * (size_t)f) == 0)
          candidates[n_cand++] = f;
      if (n_cand == 0)
        return vt_scan_fail(err, err_len,
                            "raw .bin: %zu bytes is not a whole number of "
                            "points of 3, 4, 5 or 6 float32; is it a point "
                            "cloud? (pass --fields N)",
                            bytes);
      if (n_cand > 1) {
        char list[64] = "";
        for (int i = 0; i < n_cand; i++) {
          char one[8];
          snprintf(one, sizeof one, "%s%d", i ? ", " : "", candidates[i]);
          strncat(list, one, sizeof list - strlen(list) - 1);
        }
        return vt_scan_fail(err, err_len,
                            "raw .bin: %zu bytes fits %s floats per point; say "
                            "which with --fields (KITTI/SemanticKITTI 4, "
                            "nuScenes 5, ScanNet 6)",
                            bytes, list);
      }
      fields = candidates[0];
      snprintf(scan->note, sizeof scan->note,
               "--fields %d: the only count of 3..6 that divides %zu bytes",
               fields, bytes);
    }
  }
  const size_t point_bytes = 4u * (size_t)fields;
  if (bytes % point_bytes != 0)
    return vt_scan_fail(
        err, err_len,
        "raw .bin: %zu bytes is not a multiple of %d fields x 4 "
        "bytes (%zu bytes left over); wrong --fields?",
        bytes, fields, bytes % point_bytes);
  const int64_t n = (int64_t)(bytes / point_bytes);
  if (vt_scan_alloc(scan, n, fields, err, err_len))
    return -1;
  double values[VT_MAX_FIELDS];
  for (int64_t i = 0; i < n; i++) {
    const unsigned char *p = buf + (size_t)i * point_bytes;
    for (int f = 0; f < fields; f++)
      values[f] = vt_read_scalar(p + 4 * (size_t)f, T_F32, 0);
    vt_scan_push(scan, values);
  }
  snprintf(scan->format, sizeof scan->format, "raw float32 .bin, %d fields",
           fields);
  snprintf(scan->field_names, sizeof scan->field_names, "x y z%s",
           fields > 3 ? " + extra fields" : "");
  return 0;
}

/* ---- entry points ----------------------------------------------------- */

static int starts_with(const unsigned char *buf, size_t bytes,
                       const char *prefix) {
  const size_t n = strlen(prefix);
  return bytes >= n && memcmp(buf, prefix, n) == 0;
}

static int ends_with_ci(const char *s, const char *suffix) {
  if (!s)
    return 0;
  const size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

int vt_scan_parse(const unsigned char *buf, size_t bytes, const char *name,
                  int fields, vt_scan_t *scan, char *err, size_t err_len) {
  if (err && err_len)
    err[0] = '\0';
  if (!scan)
    return vt_scan_fail(err, err_len, "no output given");
  memset(scan, 0, sizeof *scan);
  if (!buf && bytes)
    return vt_scan_fail(err, err_len, "no data");
  if ((uint64_t)bytes > (uint64_t)VT_SCAN_MAX_BYTES)
    return vt_scan_fail(err, err_len,
                        "%zu bytes, more than the readers' limit of %lld",
                        bytes, (long long)VT_SCAN_MAX_BYTES);
  int r;
  /* Content first: a nuScenes file is named *.pcd.bin yet is raw floats. */
  if (starts_with(buf, bytes, "ply\n") || starts_with(buf, bytes, "ply\r\n"))
    r = vt_parse_ply(buf, bytes, scan, err, err_len);
  else if (starts_with(buf, bytes, "# .PCD") ||
           starts_with(buf, bytes, "VERSION") ||
           starts_with(buf, bytes, "FIELDS") || ends_with_ci(name, ".pcd"))
    r = vt_parse_pcd(buf, bytes, scan, err, err_len);
  else if (ends_with_ci(name, ".ply"))
    r = vt_scan_fail(err, err_len, "PLY: first line is not \"ply\"");
  else
    r = parse_bin(buf, bytes, name, fields, scan, err, err_len);
  if (r)
    memset(scan, 0, sizeof *scan);
  return r;
}

/* What a non-regular file is, for the message. */
static const char *file_kind(mode_t mode) {
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a file";
}

/* Opens path for reading if it is a regular file within the size limit.
 * O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can
 * say what it is. Returns the descriptor or -1 with a message. */
static int open_regular(const char *path, int64_t *size, char *err,
                        size_t err_len) {
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return vt_scan_fail(err, err_len, "cannot open %s: %s", path,
                        strerror(errno));
  struct stat st;
  int bad = 1;
  if (fstat(fd, &st) != 0)
    vt_scan_fail(err, err_len, "cannot stat %s: %s", path, strerror(errno));
  else if (S_ISDIR(st.st_mode))
    vt_scan_fail(err, err_len, "%s is a directory, not a point-cloud file",
                 path);
  else if (!S_ISREG(st.st_mode))
    vt_scan_fail(err, err_len,
                 "%s is not a regular file (%s); the readers take regular "
                 "files only",
                 path, file_kind(st.st_mode));
  else if ((int64_t)st.st_size > VT_SCAN_MAX_BYTES)
    vt_scan_fail(err, err_len,
                 "%s is %lld bytes, more than the readers' limit of %lld", path,
                 (long long)st.st_size, (long long)VT_SCAN_MAX_BYTES);
  else
    bad = 0;
  if (bad) {
    close(fd);
    return -1;
  }
  *size = (int64_t)st.st_size;
  return fd;
}

/* Reads exactly size bytes (a regular file may still shrink under us). */
static int read_all(int fd, const char *path, unsigned char *buf, size_t size,
                    char *err, size_t err_len) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return vt_scan_fail(
          err, err_len, "short read of %s (%zu of %zu bytes%s%s)", path, got,
          size, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
    got += (size_t)n;
  }
  return 0;
}

int vt_scan_read_file(const char *path, int fields, vt_scan_t *scan, char *err,
                      size_t err_len) {
  if (scan)
    memset(scan, 0, sizeof *scan);
  int64_t size = 0;
  const int fd = open_regular(path, &size, err, err_len);
  if (fd < 0)
    return -1;
  unsigned char *buf = (unsigned char *)malloc((size_t)size + 1);
  if (!buf) {
    close(fd);
    return vt_scan_fail(err, err_len, "out of memory reading %s (%lld bytes)",
                        path, (long long)size);
  }
  const int rc = read_all(fd, path, buf, (size_t)size, err, err_len);
  close(fd);
  if (rc) {
    free(buf);
    return -1;
  }
  char inner[512];
  const int r =
      vt_scan_parse(buf, (size_t)size, path, fields, scan, inner, sizeof inner);
  free(buf);
  if (r)
    return vt_scan_fail(err, err_len, "%s: %s", path, inner);
  return 0;
}
