/* Point-cloud readers: raw float32 .bin, PLY, PCD (see scan_io.h).
 *
 * Every read is bounds-checked against the buffer: a truncated or malformed
 * file is a message, never a crash. Sizes from headers are checked for
 * overflow before anything is allocated from them. */
#include "scan_io.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define VT_LINE_MAX 8192
#define VT_TOKEN_MAX 128
#define VT_MAX_FIELDS 64
#define VT_PLY_MAX_ELEMENTS 16

static int scan_fail(char *err, size_t err_len, const char *fmt, ...) {
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

/* ---- scalar types shared by PLY and PCD ------------------------------ */

typedef enum scalar_type {
  T_NONE = 0,
  T_I8,
  T_U8,
  T_I16,
  T_U16,
  T_I32,
  T_U32,
  T_I64,
  T_U64,
  T_F32,
  T_F64
} scalar_type_t;

static size_t scalar_size(scalar_type_t t) {
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
static double read_scalar(const unsigned char *p, scalar_type_t t,
                          int big_endian) {
  unsigned char b[8];
  const size_t n = scalar_size(t);
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

static uint32_t read_u32_le(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

/* ---- text helpers ----------------------------------------------------- */

/* Copies the next line (without its \n or \r\n) into line. Returns 1, 0 at
 * the end of the buffer, -1 if the line is longer than line_cap - 1. */
static int next_line(const unsigned char *buf, size_t bytes, size_t *pos,
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
static int next_token(const unsigned char *buf, size_t bytes, size_t *pos,
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

/* Splits a header line into at most max_words words (in place). */
static int split_words(char *line, char **words, int max_words) {
  int n = 0;
  char *p = line;
  while (*p) {
    while (*p && isspace((unsigned char)*p))
      p++;
    if (!*p)
      break;
    if (n == max_words)
      return -1;
    words[n++] = p;
    while (*p && !isspace((unsigned char)*p))
      p++;
    if (*p)
      *p++ = '\0';
  }
  return n;
}

static int parse_number(const char *tok, double *out) {
  char *end = NULL;
  const double v = strtod(tok, &end);
  if (!end || end == tok || *end != '\0')
    return 0;
  *out = v;
  return 1;
}

static int parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  const long long v = strtoll(s, &end, 10);
  if (!end || end == s || *end != '\0' || v < lo || v > hi)
    return 0;
  *out = (int64_t)v;
  return 1;
}

/* Allocates the output rows; the n_in_file * fields product is bounded by
 * the caller's check that the file is big enough to hold that many points. */
static int scan_alloc(vt_scan_t *scan, int64_t n_points, int32_t fields,
                      char *err, size_t err_len) {
  const size_t count = (size_t)(n_points > 0 ? n_points : 1) * (size_t)fields;
  scan->data = (float *)malloc(count * sizeof(float));
  if (!scan->data)
    return scan_fail(err, err_len, "out of memory for %lld points x %d floats",
                     (long long)n_points, (int)fields);
  scan->fields = fields;
  scan->n_in_file = n_points;
  scan->n = 0;
  scan->n_nonfinite = 0;
  return 0;
}

/* Appends one point if its coordinates are finite. */
static void scan_push(vt_scan_t *scan, const double *values) {
  if (!isfinite(values[0]) || !isfinite(values[1]) || !isfinite(values[2])) {
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
    return scan_fail(err, err_len, "raw .bin: the file is empty");
  if (fields != 0 && (fields < 3 || fields > VT_MAX_FIELDS))
    return scan_fail(err, err_len,
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
        return scan_fail(err, err_len,
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
        return scan_fail(err, err_len,
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
    return scan_fail(err, err_len,
                     "raw .bin: %zu bytes is not a multiple of %d fields x 4 "
                     "bytes (%zu bytes left over); wrong --fields?",
                     bytes, fields, bytes % point_bytes);
  const int64_t n = (int64_t)(bytes / point_bytes);
  if (scan_alloc(scan, n, fields, err, err_len))
    return -1;
  double values[VT_MAX_FIELDS];
  for (int64_t i = 0; i < n; i++) {
    const unsigned char *p = buf + (size_t)i * point_bytes;
    for (int f = 0; f < fields; f++)
      values[f] = read_scalar(p + 4 * (size_t)f, T_F32, 0);
    scan_push(scan, values);
  }
  snprintf(scan->format, sizeof scan->format, "raw float32 .bin, %d fields",
           fields);
  snprintf(scan->field_names, sizeof scan->field_names, "x y z%s",
           fields > 3 ? " + extra fields" : "");
  return 0;
}

/* ---- PLY ------------------------------------------------------------- */

typedef struct ply_prop {
  char name[32];
  scalar_type_t type;       /* value type (list items for lists) */
  scalar_type_t count_type; /* T_NONE unless a list */
} ply_prop_t;

typedef struct ply_element {
  char name[32];
  int64_t count;
  int n_props;
  ply_prop_t props[VT_MAX_FIELDS];
} ply_element_t;

static scalar_type_t ply_type(const char *s) {
  static const struct {
    const char *name;
    scalar_type_t t;
  } names[] = {{"char", T_I8},     {"int8", T_I8},     {"uchar", T_U8},
               {"uint8", T_U8},    {"short", T_I16},   {"int16", T_I16},
               {"ushort", T_U16},  {"uint16", T_U16},  {"int", T_I32},
               {"int32", T_I32},   {"uint", T_U32},    {"uint32", T_U32},
               {"float", T_F32},   {"float32", T_F32}, {"double", T_F64},
               {"float64", T_F64}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i].name) == 0)
      return names[i].t;
  return T_NONE;
}

typedef enum ply_format { PLY_ASCII, PLY_BIN_LE, PLY_BIN_BE } ply_format_t;

/* Reads one value of a PLY item, binary or ascii, advancing *pos. */
static int ply_read_value(const unsigned char *buf, size_t bytes, size_t *pos,
                          ply_format_t fmt, scalar_type_t t, double *out) {
  if (fmt == PLY_ASCII) {
    char tok[VT_TOKEN_MAX];
    if (next_token(buf, bytes, pos, tok, sizeof tok) <= 0)
      return 0;
    return parse_number(tok, out);
  }
  const size_t n = scalar_size(t);
  if (n > bytes - *pos)
    return 0;
  *out = read_scalar(buf + *pos, t, fmt == PLY_BIN_BE);
  *pos += n;
  return 1;
}

/* Reads (or skips) one item of an element; vertex coordinates land in xyz
 * when the property indices say so. */
static int ply_read_item(const unsigned char *buf, size_t bytes, size_t *pos,
                         ply_format_t fmt, const ply_element_t *e,
                         const int *want, double *xyz) {
  for (int p = 0; p < e->n_props; p++) {
    const ply_prop_t *pr = &e->props[p];
    double v;
    if (pr->count_type != T_NONE) {
      if (!ply_read_value(buf, bytes, pos, fmt, pr->count_type, &v) ||
          !(v >= 0) || v > 1e9)
        return 0;
      const int64_t items = (int64_t)v;
      if (fmt != PLY_ASCII) {
        const size_t skip = (size_t)items * scalar_size(pr->type);
        if (skip > bytes - *pos)
          return 0;
        *pos += skip;
      } else {
        for (int64_t k = 0; k < items; k++)
          if (!ply_read_value(buf, bytes, pos, fmt, pr->type, &v))
            return 0;
      }
      continue;
    }
    if (!ply_read_value(buf, bytes, pos, fmt, pr->type, &v))
      return 0;
    if (want)
      for (int c = 0; c < 3; c++)
        if (want[c] == p)
          xyz[c] = v;
  }
  return 1;
}

static int parse_ply(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
                     char *err, size_t err_len) {
  size_t pos = 0;
  char line[VT_LINE_MAX];
  char *w[8];
  int r = next_line(buf, bytes, &pos, line, sizeof line);
  if (r <= 0 || strcmp(line, "ply") != 0)
    return scan_fail(err, err_len, "PLY: first line is not \"ply\"");
  int have_format = 0, ended = 0;
  ply_format_t fmt = PLY_ASCII;
  ply_element_t *elems =
      (ply_element_t *)calloc(VT_PLY_MAX_ELEMENTS, sizeof(ply_element_t));
  if (!elems)
    return scan_fail(err, err_len, "PLY: out of memory");
  int n_elems = 0, line_no = 1;
  /* Formats before freeing: the message may name an element. */
#define PLY_FAIL(...)                                                          \
  do {                                                                         \
    scan_fail(err, err_len, __VA_ARGS__);                                      \
    free(elems);                                                               \
    return -1;                                                                 \
  } while (0)
  while (!ended) {
    r = next_line(buf, bytes, &pos, line, sizeof line);
    line_no++;
    if (r == 0)
      PLY_FAIL("PLY: header ended (line %d) without \"end_header\"", line_no);
    if (r < 0)
      PLY_FAIL("PLY: header line %d longer than %d characters", line_no,
               VT_LINE_MAX - 1);
    if (strncmp(line, "comment", 7) == 0 || strncmp(line, "obj_info", 8) == 0)
      continue;
    const int nw = split_words(line, w, 8);
    if (nw <= 0)
      continue;
    if (strcmp(w[0], "end_header") == 0) {
      ended = 1;
    } else if (strcmp(w[0], "format") == 0) {
      if (nw != 3)
        PLY_FAIL("PLY line %d: \"format\" needs a type and a version",
                 line_no);
      if (strcmp(w[1], "ascii") == 0)
        fmt = PLY_ASCII;
      else if (strcmp(w[1], "binary_little_endian") == 0)
        fmt = PLY_BIN_LE;
      else if (strcmp(w[1], "binary_big_endian") == 0)
        fmt = PLY_BIN_BE;
      else
        PLY_FAIL("PLY line %d: unknown format \"%s\" (want ascii, "
                 "binary_little_endian or binary_big_endian)",
                 line_no, w[1]);
      have_format = 1;
    } else if (strcmp(w[0], "element") == 0) {
      if (nw != 3)
        PLY_FAIL("PLY line %d: \"element\" needs a name and a count",
                 line_no);
      if (n_elems == VT_PLY_MAX_ELEMENTS)
        PLY_FAIL("PLY line %d: more than %d elements", line_no,
                 VT_PLY_MAX_ELEMENTS);
      ply_element_t *e = &elems[n_elems++];
      snprintf(e->name, sizeof e->name, "%s", w[1]);
      if (!parse_count(w[2], 0, INT64_C(1) << 40, &e->count))
        PLY_FAIL("PLY line %d: element \"%s\" has a bad count \"%s\"",
                 line_no, e->name, w[2]);
    } else if (strcmp(w[0], "property") == 0) {
      if (n_elems == 0)
        PLY_FAIL("PLY line %d: property before any element", line_no);
      ply_element_t *e = &elems[n_elems - 1];
      if (e->n_props == VT_MAX_FIELDS)
        PLY_FAIL("PLY line %d: element \"%s\" has more than %d properties",
                 line_no, e->name, VT_MAX_FIELDS);
      ply_prop_t *pr = &e->props[e->n_props];
      if (nw == 5 && strcmp(w[1], "list") == 0) {
        pr->count_type = ply_type(w[2]);
        pr->type = ply_type(w[3]);
        if (pr->count_type == T_NONE || pr->type == T_NONE ||
            pr->count_type == T_F32 || pr->count_type == T_F64)
          PLY_FAIL("PLY line %d: bad list types \"%s %s\"", line_no, w[2],
                   w[3]);
        snprintf(pr->name, sizeof pr->name, "%s", w[4]);
      } else if (nw == 3) {
        pr->count_type = T_NONE;
        pr->type = ply_type(w[1]);
        if (pr->type == T_NONE)
          PLY_FAIL("PLY line %d: unknown property type \"%s\"", line_no,
                   w[1]);
        snprintf(pr->name, sizeof pr->name, "%s", w[2]);
      } else {
        PLY_FAIL("PLY line %d: malformed property line", line_no);
      }
      e->n_props++;
    } else {
      PLY_FAIL("PLY line %d: unknown header keyword \"%s\" (is "
               "\"end_header\" missing?)",
               line_no, w[0]);
    }
  }
  if (!have_format)
    PLY_FAIL("PLY: no \"format\" line in the header");
  int vi = -1;
  for (int i = 0; i < n_elems; i++)
    if (strcmp(elems[i].name, "vertex") == 0)
      vi = i;
  if (vi < 0)
    PLY_FAIL("PLY: no \"vertex\" element");
  const ply_element_t *v = &elems[vi];
  int want[3] = {-1, -1, -1};
  static const char *const axis[3] = {"x", "y", "z"};
  for (int p = 0; p < v->n_props; p++)
    for (int c = 0; c < 3; c++)
      if (strcmp(v->props[p].name, axis[c]) == 0 &&
          v->props[p].count_type == T_NONE)
        want[c] = p;
  for (int c = 0; c < 3; c++)
    if (want[c] < 0)
      PLY_FAIL("PLY: vertex element has no scalar property \"%s\"", axis[c]);
  /* A binary vertex item is at least one byte per property, an ascii one
   * at least two characters: bound the count before allocating. */
  const size_t min_item = fmt == PLY_ASCII ? 2u * (size_t)v->n_props : 1u;
  if (v->count > 0 && (size_t)v->count > (bytes - pos) / min_item + 1)
    PLY_FAIL("PLY: %lld vertices declared but only %zu bytes of data",
             (long long)v->count, bytes - pos);
  if (scan_alloc(scan, v->count, 3, err, err_len)) {
    free(elems);
    return -1;
  }
  for (int i = 0; i < vi; i++) /* elements stored before the vertices */
    for (int64_t k = 0; k < elems[i].count; k++)
      if (!ply_read_item(buf, bytes, &pos, fmt, &elems[i], NULL, NULL)) {
        vt_scan_free(scan);
        PLY_FAIL("PLY: data ends inside element \"%s\" item %lld",
                 elems[i].name, (long long)k);
      }
  for (int64_t k = 0; k < v->count; k++) {
    double xyz[3] = {0, 0, 0};
    if (!ply_read_item(buf, bytes, &pos, fmt, v, want, xyz)) {
      vt_scan_free(scan);
      PLY_FAIL("PLY: vertex %lld of %lld is truncated or not a number",
               (long long)k, (long long)v->count);
    }
    scan_push(scan, xyz);
  }
  snprintf(scan->format, sizeof scan->format, "PLY %s",
           fmt == PLY_ASCII    ? "ascii"
           : fmt == PLY_BIN_LE ? "binary_little_endian"
                               : "binary_big_endian");
  snprintf(scan->field_names, sizeof scan->field_names, "x y z");
  free(elems);
#undef PLY_FAIL
  return 0;
}

/* ---- PCD ------------------------------------------------------------- */

typedef struct pcd_field {
  char name[32];
  int size;  /* bytes per element */
  char type; /* 'F', 'U', 'I' */
  int count; /* elements */
  scalar_type_t st;
  size_t offset; /* within a point (binary) */
  size_t first;  /* index of its first value within a point (ascii) */
} pcd_field_t;

static scalar_type_t pcd_scalar(char type, int size) {
  if (type == 'F')
    return size == 4 ? T_F32 : size == 8 ? T_F64 : T_NONE;
  if (type == 'U')
    return size == 1   ? T_U8
           : size == 2 ? T_U16
           : size == 4 ? T_U32
           : size == 8 ? T_U64
                       : T_NONE;
  if (type == 'I')
    return size == 1   ? T_I8
           : size == 2 ? T_I16
           : size == 4 ? T_I32
           : size == 8 ? T_I64
                       : T_NONE;
  return T_NONE;
}

/* The packed colour of PCL: the 32 bits of the field hold 0x00RRGGBB
 * (alpha in the top byte for rgba), stored as a float or a uint. */
static void unpack_rgb(uint32_t bits, double *rgb) {
  rgb[0] = (double)((bits >> 16) & 0xFFu);
  rgb[1] = (double)((bits >> 8) & 0xFFu);
  rgb[2] = (double)(bits & 0xFFu);
}

static int parse_pcd(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
                     char *err, size_t err_len) {
  pcd_field_t fields[VT_MAX_FIELDS];
  memset(fields, 0, sizeof fields);
  int n_fields = -1, n_size = -1, n_type = -1, n_count = -1;
  int64_t width = -1, height = -1, points = -1;
  char data_kind[32] = "";
  size_t pos = 0;
  int line_no = 0;
  char line[VT_LINE_MAX];
  char *w[VT_MAX_FIELDS + 1];
  while (!data_kind[0]) {
    const int r = next_line(buf, bytes, &pos, line, sizeof line);
    line_no++;
    if (r == 0)
      return scan_fail(err, err_len,
                       "PCD: header ended (line %d) without a DATA line",
                       line_no);
    if (r < 0)
      return scan_fail(err, err_len,
                       "PCD: header line %d longer than %d characters",
                       line_no, VT_LINE_MAX - 1);
    if (line[0] == '#')
      continue;
    const int nw = split_words(line, w, VT_MAX_FIELDS + 1);
    if (nw < 0)
      return scan_fail(err, err_len, "PCD line %d: more than %d fields",
                       line_no, VT_MAX_FIELDS);
    if (nw == 0)
      continue;
    const char *key = w[0];
    if (strcmp(key, "VERSION") == 0) {
      continue; /* 0.7 in practice; older files differ only in keys we check */
    } else if (strcmp(key, "FIELDS") == 0 || strcmp(key, "COLUMNS") == 0) {
      n_fields = nw - 1;
      for (int i = 0; i < n_fields; i++)
        snprintf(fields[i].name, sizeof fields[i].name, "%s", w[i + 1]);
    } else if (strcmp(key, "SIZE") == 0) {
      n_size = nw - 1;
      for (int i = 0; i < n_size; i++) {
        int64_t s;
        if (!parse_count(w[i + 1], 1, 8, &s) || (s & (s - 1)))
          return scan_fail(err, err_len,
                           "PCD line %d: SIZE \"%s\" (want 1, 2, 4 or 8)",
                           line_no, w[i + 1]);
        fields[i].size = (int)s;
      }
    } else if (strcmp(key, "TYPE") == 0) {
      n_type = nw - 1;
      for (int i = 0; i < n_type; i++) {
        if (strlen(w[i + 1]) != 1 || !strchr("FUI", w[i + 1][0]))
          return scan_fail(err, err_len,
                           "PCD line %d: TYPE \"%s\" (want F, U or I)",
                           line_no, w[i + 1]);
        fields[i].type = w[i + 1][0];
      }
    } else if (strcmp(key, "COUNT") == 0) {
      n_count = nw - 1;
      for (int i = 0; i < n_count; i++) {
        int64_t c;
        if (!parse_count(w[i + 1], 1, 1 << 20, &c))
          return scan_fail(err, err_len,
                           "PCD line %d: COUNT \"%s\" (want >= 1)", line_no,
                           w[i + 1]);
        fields[i].count = (int)c;
      }
    } else if (strcmp(key, "WIDTH") == 0 || strcmp(key, "HEIGHT") == 0 ||
               strcmp(key, "POINTS") == 0) {
      int64_t v;
      if (nw != 2 || !parse_count(w[1], 0, INT64_C(1) << 40, &v))
        return scan_fail(err, err_len, "PCD line %d: bad %s value", line_no,
                         key);
      if (key[0] == 'W')
        width = v;
      else if (key[0] == 'H')
        height = v;
      else
        points = v;
    } else if (strcmp(key, "VIEWPOINT") == 0) {
      continue; /* a sensor pose; points are already in the cloud's frame */
    } else if (strcmp(key, "DATA") == 0) {
      if (nw != 2)
        return scan_fail(err, err_len, "PCD line %d: DATA needs one value",
                         line_no);
      if (strcmp(w[1], "ascii") != 0 && strcmp(w[1], "binary") != 0 &&
          strcmp(w[1], "binary_compressed") != 0)
        return scan_fail(err, err_len,
                         "PCD line %d: DATA \"%s\" (want ascii, binary or "
                         "binary_compressed)",
                         line_no, w[1]);
      snprintf(data_kind, sizeof data_kind, "%s", w[1]);
    } else {
      return scan_fail(err, err_len, "PCD line %d: unknown header key \"%s\"",
                       line_no, key);
    }
  }
  if (n_fields <= 0)
    return scan_fail(err, err_len, "PCD: no FIELDS line before DATA");
  if (n_size != n_fields || n_type != n_fields)
    return scan_fail(err, err_len,
                     "PCD: FIELDS has %d entries but SIZE has %d and TYPE %d",
                     n_fields, n_size, n_type);
  if (n_count >= 0 && n_count != n_fields)
    return scan_fail(err, err_len, "PCD: FIELDS has %d entries but COUNT %d",
                     n_fields, n_count);
  if (width < 0)
    return scan_fail(err, err_len, "PCD: no WIDTH line");
  if (height < 0)
    height = 1;
  if (points < 0)
    points = width * height;
  if (points != width * height)
    return scan_fail(err, err_len, "PCD: POINTS %lld != WIDTH %lld x HEIGHT "
                     "%lld",
                     (long long)points, (long long)width, (long long)height);
  size_t point_size = 0, values_per_point = 0;
  int ix = -1, iy = -1, iz = -1, irgb = -1;
  for (int i = 0; i < n_fields; i++) {
    pcd_field_t *f = &fields[i];
    if (n_count < 0)
      f->count = 1;
    f->st = pcd_scalar(f->type, f->size);
    if (f->st == T_NONE)
      return scan_fail(err, err_len,
                       "PCD: field \"%s\" has TYPE %c with SIZE %d", f->name,
                       f->type, f->size);
    f->offset = point_size;
    f->first = values_per_point;
    point_size += (size_t)f->size * (size_t)f->count;
    values_per_point += (size_t)f->count;
    const int scalar = f->count == 1;
    if (strcmp(f->name, "x") == 0 && scalar)
      ix = i;
    else if (strcmp(f->name, "y") == 0 && scalar)
      iy = i;
    else if (strcmp(f->name, "z") == 0 && scalar)
      iz = i;
    else if ((strcmp(f->name, "rgb") == 0 || strcmp(f->name, "rgba") == 0) &&
             scalar && f->size == 4)
      irgb = i;
  }
  if (ix < 0 || iy < 0 || iz < 0)
    return scan_fail(err, err_len,
                     "PCD: needs scalar fields x, y and z (FIELDS has %d "
                     "fields)",
                     n_fields);
  const int out_fields = irgb >= 0 ? 6 : 3;
  const size_t data_bytes = bytes - pos;
  const unsigned char *data = buf + pos;
  unsigned char *unpacked = NULL;
  int field_major = 0;

  if (strcmp(data_kind, "binary") == 0) {
    if ((size_t)points > data_bytes / (point_size ? point_size : 1))
      return scan_fail(err, err_len,
                       "PCD binary: %lld points x %zu bytes do not fit the "
                       "%zu bytes of data",
                       (long long)points, point_size, data_bytes);
  } else if (strcmp(data_kind, "binary_compressed") == 0) {
    if (data_bytes < 8)
      return scan_fail(err, err_len,
                       "PCD binary_compressed: data shorter than its 8-byte "
                       "size header");
    const uint32_t comp = read_u32_le(data);
    const uint32_t raw = read_u32_le(data + 4);
    if ((size_t)comp > data_bytes - 8)
      return scan_fail(err, err_len,
                       "PCD binary_compressed: compressed size %u exceeds "
                       "the %zu bytes present",
                       comp, data_bytes - 8);
    if ((uint64_t)raw != (uint64_t)points * point_size)
      return scan_fail(err, err_len,
                       "PCD binary_compressed: uncompressed size %u != %lld "
                       "points x %zu bytes",
                       raw, (long long)points, point_size);
    unpacked = (unsigned char *)malloc(raw ? raw : 1);
    if (!unpacked)
      return scan_fail(err, err_len, "PCD: out of memory (%u bytes)", raw);
    const int64_t got = vt_lzf_decompress(data + 8, comp, unpacked, raw);
    if (got != (int64_t)raw) {
      free(unpacked);
      return scan_fail(err, err_len,
                       "PCD binary_compressed: corrupt LZF stream (%lld of %u "
                       "bytes decoded)",
                       (long long)got, raw);
    }
    data = unpacked;
    field_major = 1;
  } else { /* ascii: at least two characters per value */
    if (points > 0 && values_per_point > 0 &&
        (size_t)points > data_bytes / (2 * values_per_point) + 1)
      return scan_fail(err, err_len,
                       "PCD ascii: %lld points declared but only %zu bytes of "
                       "data",
                       (long long)points, data_bytes);
  }
  if (scan_alloc(scan, points, out_fields, err, err_len)) {
    free(unpacked);
    return -1;
  }
  double *row = (double *)malloc((values_per_point ? values_per_point : 1) *
                                 sizeof(double));
  if (!row) {
    free(unpacked);
    vt_scan_free(scan);
    return scan_fail(err, err_len, "PCD: out of memory");
  }
  size_t apos = pos; /* ascii cursor */
  int status = 0;
  for (int64_t i = 0; i < points && status == 0; i++) {
    double out[6];
    if (field_major || strcmp(data_kind, "binary") == 0) {
      const int ids[4] = {ix, iy, iz, irgb};
      for (int k = 0; k < 4; k++) {
        if (ids[k] < 0)
          continue;
        const pcd_field_t *f = &fields[ids[k]];
        /* binary: point-major; compressed: field-major (every point's value
         * of field 0, then of field 1, ...), as PCL writes it. */
        size_t at;
        if (field_major) {
          size_t start = 0;
          for (int j = 0; j < ids[k]; j++)
            start += (size_t)fields[j].size * (size_t)fields[j].count *
                     (size_t)points;
          at = start + (size_t)i * (size_t)f->size;
        } else {
          at = (size_t)i * point_size + f->offset;
        }
        if (k < 3)
          out[k] = read_scalar(data + at, f->st, 0);
        else
          unpack_rgb(read_u32_le(data + at), out + 3);
      }
    } else {
      char tok[VT_TOKEN_MAX];
      for (size_t k = 0; k < values_per_point; k++) {
        const int len = next_token(buf, bytes, &apos, tok, sizeof tok);
        if (len <= 0 || !parse_number(tok, &row[k])) {
          status = scan_fail(err, err_len,
                             "PCD ascii: point %lld value %zu: %s", (long long)i,
                             k, len <= 0 ? "data ends early" : "not a number");
          break;
        }
      }
      if (status)
        break;
      out[0] = row[fields[ix].first];
      out[1] = row[fields[iy].first];
      out[2] = row[fields[iz].first];
      if (irgb >= 0) {
        const double v = row[fields[irgb].first];
        uint32_t bits = 0;
        if (fields[irgb].type == 'F') { /* the float's bits are the colour */
          const float f = (float)v;
          memcpy(&bits, &f, 4);
        } else if (v >= 0 && v <= 4294967295.0) {
          bits = (uint32_t)v;
        }
        unpack_rgb(bits, out + 3);
      }
    }
    scan_push(scan, out);
  }
  free(row);
  free(unpacked);
  if (status) {
    vt_scan_free(scan);
    return -1;
  }
  snprintf(scan->format, sizeof scan->format, "PCD %s", data_kind);
  snprintf(scan->field_names, sizeof scan->field_names, "%s",
           irgb >= 0 ? "x y z r g b" : "x y z");
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
    return scan_fail(err, err_len, "no output given");
  memset(scan, 0, sizeof *scan);
  if (!buf && bytes)
    return scan_fail(err, err_len, "no data");
  int r;
  /* Content first: a nuScenes file is named *.pcd.bin yet is raw floats. */
  if (starts_with(buf, bytes, "ply\n") || starts_with(buf, bytes, "ply\r\n"))
    r = parse_ply(buf, bytes, scan, err, err_len);
  else if (starts_with(buf, bytes, "# .PCD") ||
           starts_with(buf, bytes, "VERSION") ||
           starts_with(buf, bytes, "FIELDS") || ends_with_ci(name, ".pcd"))
    r = parse_pcd(buf, bytes, scan, err, err_len);
  else if (ends_with_ci(name, ".ply"))
    r = scan_fail(err, err_len, "PLY: first line is not \"ply\"");
  else
    r = parse_bin(buf, bytes, name, fields, scan, err, err_len);
  if (r)
    memset(scan, 0, sizeof *scan);
  return r;
}

int vt_scan_read_file(const char *path, int fields, vt_scan_t *scan,
                      char *err, size_t err_len) {
  if (scan)
    memset(scan, 0, sizeof *scan);
  FILE *f = fopen(path, "rb");
  if (!f)
    return scan_fail(err, err_len, "cannot open %s: %s", path,
                     strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return scan_fail(err, err_len, "cannot seek in %s", path);
  }
  const long size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return scan_fail(err, err_len, "cannot size %s (not a regular file?)",
                     path);
  }
  unsigned char *buf = (unsigned char *)malloc((size_t)size + 1);
  if (!buf) {
    fclose(f);
    return scan_fail(err, err_len, "out of memory reading %s (%ld bytes)",
                     path, size);
  }
  const size_t got = fread(buf, 1, (size_t)size, f);
  fclose(f);
  if (got != (size_t)size) {
    free(buf);
    return scan_fail(err, err_len, "short read of %s (%zu of %ld bytes)", path,
                     got, size);
  }
  char inner[512];
  const int r = vt_scan_parse(buf, (size_t)size, path, fields, scan, inner,
                              sizeof inner);
  free(buf);
  if (r)
    return scan_fail(err, err_len, "%s: %s", path, inner);
  return 0;
}
