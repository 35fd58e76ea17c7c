/* The PLY reader (ascii, binary_little_endian, binary_big_endian): the
 * vertex element's x, y and z; every other element and property is read
 * past. */
#include "scan_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VT_PLY_MAX_ELEMENTS 16
/* Words kept of a header line: more than any valid line has (5), so that
 * a longer one is reported with its count. */
#define PLY_MAX_WORDS 8

typedef struct ply_prop {
  char name[32];
  vt_scalar_t type;       /* value type (list items for lists) */
  vt_scalar_t count_type; /* T_NONE unless a list */
} ply_prop_t;

typedef struct ply_element {
  char name[32];
  int64_t count;
  int n_props;
  ply_prop_t props[VT_MAX_FIELDS];
} ply_element_t;

static vt_scalar_t ply_type(const char *s) {
  static const struct {
    const char *name;
    vt_scalar_t t;
  } names[] = {{"char", T_I8},    {"int8", T_I8},     {"uchar", T_U8},
               {"uint8", T_U8},   {"short", T_I16},   {"int16", T_I16},
               {"ushort", T_U16}, {"uint16", T_U16},  {"int", T_I32},
               {"int32", T_I32},  {"uint", T_U32},    {"uint32", T_U32},
               {"float", T_F32},  {"float32", T_F32}, {"double", T_F64},
               {"float64", T_F64}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i].name) == 0)
      return names[i].t;
  return T_NONE;
}

typedef enum ply_format { PLY_ASCII, PLY_BIN_LE, PLY_BIN_BE } ply_format_t;

/* Reads one value of a PLY item, binary or ascii, advancing *pos. */
static int ply_read_value(const unsigned char *buf, size_t bytes, size_t *pos,
                          ply_format_t fmt, vt_scalar_t t, double *out) {
  if (fmt == PLY_ASCII) {
    char tok[VT_TOKEN_MAX];
    if (vt_next_token(buf, bytes, pos, tok, sizeof tok) <= 0)
      return 0;
    return vt_parse_number(tok, out);
  }
  const size_t n = vt_scalar_size(t);
  if (n > bytes - *pos)
    return 0;
  *out = vt_read_scalar(buf + *pos, t, fmt == PLY_BIN_BE);
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
        const size_t skip = (size_t)items * vt_scalar_size(pr->type);
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

/* Everything the header says. */
typedef struct ply_header {
  ply_format_t fmt;
  int have_format;
  int n_elems;
  ply_element_t elems[VT_PLY_MAX_ELEMENTS];
} ply_header_t;

/* "property TYPE NAME" or "property list COUNT_TYPE ITEM_TYPE NAME". */
static int ply_property_line(ply_header_t *h, char **w, int nw,
                             const char *text, int line_no, char *err,
                             size_t err_len) {
  if (h->n_elems == 0)
    return vt_scan_fail(err, err_len,
                        "PLY line %d: property before any element", line_no);
  ply_element_t *e = &h->elems[h->n_elems - 1];
  if (e->n_props == VT_MAX_FIELDS)
    return vt_scan_fail(err, err_len,
                        "PLY line %d: element \"%s\" has more than %d "
                        "properties",
                        line_no, e->name, VT_MAX_FIELDS);
  ply_prop_t *pr = &e->props[e->n_props];
  if (nw == 5 && strcmp(w[1], "list") == 0) {
    pr->count_type = ply_type(w[2]);
    pr->type = ply_type(w[3]);
    if (pr->count_type == T_NONE || pr->type == T_NONE ||
        pr->count_type == T_F32 || pr->count_type == T_F64)
      return vt_scan_fail(err, err_len, "PLY line %d: bad list types \"%s %s\"",
                          line_no, w[2], w[3]);
    snprintf(pr->name, sizeof pr->name, "%s", w[4]);
  } else if (nw == 3) {
    pr->count_type = T_NONE;
    pr->type = ply_type(w[1]);
    if (pr->type == T_NONE)
      return vt_scan_fail(err, err_len,
                          "PLY line %d: unknown property type \"%s\"", line_no,
                          w[1]);
    snprintf(pr->name, sizeof pr->name, "%s", w[2]);
  } else {
    return vt_scan_fail(err, err_len,
                        "PLY line %d: \"%.80s\": want \"property TYPE NAME\" "
                        "or \"property list COUNT_TYPE ITEM_TYPE NAME\"",
                        line_no, text);
  }
  e->n_props++;
  return 0;
}

static int ply_format_line(ply_header_t *h, char **w, int nw, int line_no,
                           char *err, size_t err_len) {
  if (nw != 3)
    return vt_scan_fail(err, err_len,
                        "PLY line %d: \"format\" needs a type and a version",
                        line_no);
  if (strcmp(w[1], "ascii") == 0)
    h->fmt = PLY_ASCII;
  else if (strcmp(w[1], "binary_little_endian") == 0)
    h->fmt = PLY_BIN_LE;
  else if (strcmp(w[1], "binary_big_endian") == 0)
    h->fmt = PLY_BIN_BE;
  else
    return vt_scan_fail(err, err_len,
                        "PLY line %d: unknown format \"%s\" (want ascii, "
                        "binary_little_endian or binary_big_endian)",
                        line_no, w[1]);
  h->have_format = 1;
  return 0;
}

static int ply_element_line(ply_header_t *h, char **w, int nw, int line_no,
                            char *err, size_t err_len) {
  if (nw != 3)
    return vt_scan_fail(err, err_len,
                        "PLY line %d: \"element\" needs a name and a count",
                        line_no);
  if (h->n_elems == VT_PLY_MAX_ELEMENTS)
    return vt_scan_fail(err, err_len, "PLY line %d: more than %d elements",
                        line_no, VT_PLY_MAX_ELEMENTS);
  ply_element_t *e = &h->elems[h->n_elems++];
  snprintf(e->name, sizeof e->name, "%s", w[1]);
  if (!vt_parse_count(w[2], 0, INT64_C(1) << 40, &e->count))
    return vt_scan_fail(err, err_len,
                        "PLY line %d: element \"%s\" has a bad count \"%s\"",
                        line_no, e->name, w[2]);
  return 0;
}

/* One header line; 1 at end_header. Every word is counted: no valid line
 * has more than 5, and a line cut short would misalign the data. */
static int ply_header_line(ply_header_t *h, char *line, int line_no, char *err,
                           size_t err_len) {
  char text[96]; /* the start of the line, for messages */
  const size_t len = strnlen(line, sizeof text - 1);
  memcpy(text, line, len);
  text[len] = '\0';
  char *w[PLY_MAX_WORDS];
  const int nw = vt_split_words(line, w, PLY_MAX_WORDS);
  if (nw == 0)
    return 0;
  if (nw > PLY_MAX_WORDS)
    return vt_scan_fail(err, err_len,
                        "PLY line %d: \"%.60s%s\" has %d words (a header line "
                        "has at most 5)",
                        line_no, text, len > 60 ? "..." : "", nw);
  if (strcmp(w[0], "end_header") == 0)
    return 1;
  if (strcmp(w[0], "format") == 0)
    return ply_format_line(h, w, nw, line_no, err, err_len);
  if (strcmp(w[0], "element") == 0)
    return ply_element_line(h, w, nw, line_no, err, err_len);
  if (strcmp(w[0], "property") == 0)
    return ply_property_line(h, w, nw, text, line_no, err, err_len);
  return vt_scan_fail(err, err_len,
                      "PLY line %d: unknown header keyword \"%s\" (is "
                      "\"end_header\" missing?)",
                      line_no, w[0]);
}

/* Reads the header up to end_header; *pos is then at the data. */
static int ply_read_header(const unsigned char *buf, size_t bytes, size_t *pos,
                           ply_header_t *h, char *err, size_t err_len) {
  char line[VT_LINE_MAX];
  int r = vt_next_line(buf, bytes, pos, line, sizeof line);
  if (r <= 0 || strcmp(line, "ply") != 0)
    return vt_scan_fail(err, err_len, "PLY: first line is not \"ply\"");
  for (int line_no = 2;; line_no++) {
    r = vt_next_line(buf, bytes, pos, line, sizeof line);
    if (r == 0)
      return vt_scan_fail(err, err_len,
                          "PLY: header ended (line %d) without \"end_header\"",
                          line_no);
    if (r < 0)
      return vt_scan_fail(err, err_len,
                          "PLY: header line %d longer than %d characters",
                          line_no, VT_LINE_MAX - 1);
    if (strncmp(line, "comment", 7) == 0 || strncmp(line, "obj_info", 8) == 0)
      continue;
    r = ply_header_line(h, line, line_no, err, err_len);
    if (r < 0)
      return -1;
    if (r == 1)
      break;
  }
  if (!h->have_format)
    return vt_scan_fail(err, err_len, "PLY: no \"format\" line in the header");
  return 0;
}

/* The fewest bytes one item of e can take: binary, each scalar's size and
 * each list's count (an empty list); ascii, a character and a separator
 * per property. */
static size_t ply_min_item_bytes(const ply_element_t *e, ply_format_t fmt) {
  size_t n = 0;
  for (int p = 0; p < e->n_props; p++) {
    const ply_prop_t *pr = &e->props[p];
    n += fmt == PLY_ASCII
             ? 2
             : vt_scalar_size(pr->count_type != T_NONE ? pr->count_type
                                                       : pr->type);
  }
  return n;
}

/* Refuses an element whose declared items cannot fit the bytes left, so
 * no count is trusted beyond the data (nor allocated from). */
static int ply_check_count(const ply_element_t *e, ply_format_t fmt,
                           size_t left, char *err, size_t err_len) {
  const size_t min_item = ply_min_item_bytes(e, fmt);
  uint64_t need;
  /* ascii: the last item needs no separator after it */
  const size_t room = fmt == PLY_ASCII ? left + 1 : left;
  if (vt_mul_u64((uint64_t)e->count, min_item, &need) && need <= room)
    return 0;
  return vt_scan_fail(err, err_len,
                      "PLY: element \"%s\": %lld items declared of at least "
                      "%zu bytes each, but only %zu bytes of data are left "
                      "(truncated file?)",
                      e->name, (long long)e->count, min_item, left);
}

/* Reads past element e. An element without properties holds no bytes, so
 * its items are not walked one by one (2^40 of them would take hours). */
static int ply_skip_element(const unsigned char *buf, size_t bytes, size_t *pos,
                            ply_format_t fmt, const ply_element_t *e, char *err,
                            size_t err_len) {
  if (e->n_props == 0)
    return 0;
  if (ply_check_count(e, fmt, bytes - *pos, err, err_len))
    return -1;
  for (int64_t k = 0; k < e->count; k++)
    if (!ply_read_item(buf, bytes, pos, fmt, e, NULL, NULL))
      return vt_scan_fail(err, err_len,
                          "PLY: data ends inside element \"%s\" item %lld",
                          e->name, (long long)k);
  return 0;
}

static int ply_read_vertices(const unsigned char *buf, size_t bytes,
                             size_t *pos, ply_format_t fmt,
                             const ply_element_t *v, vt_scan_t *scan, char *err,
                             size_t err_len) {
  int want[3] = {-1, -1, -1};
  static const char *const axis[3] = {"x", "y", "z"};
  for (int p = 0; p < v->n_props; p++)
    for (int c = 0; c < 3; c++)
      if (strcmp(v->props[p].name, axis[c]) == 0 &&
          v->props[p].count_type == T_NONE)
        want[c] = p;
  for (int c = 0; c < 3; c++)
    if (want[c] < 0)
      return vt_scan_fail(err, err_len,
                          "PLY: vertex element has no scalar property \"%s\"",
                          axis[c]);
  if (ply_check_count(v, fmt, bytes - *pos, err, err_len) ||
      vt_scan_alloc(scan, v->count, 3, err, err_len))
    return -1;
  for (int64_t k = 0; k < v->count; k++) {
    double xyz[3] = {0, 0, 0};
    if (!ply_read_item(buf, bytes, pos, fmt, v, want, xyz)) {
      vt_scan_free(scan);
      return vt_scan_fail(err, err_len,
                          "PLY: vertex %lld of %lld is truncated or not a "
                          "number",
                          (long long)k, (long long)v->count);
    }
    vt_scan_push(scan, xyz);
  }
  return 0;
}

int vt_parse_ply(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
                 char *err, size_t err_len) {
  /* ~40 KiB: on the heap, not the stack */
  ply_header_t *h = (ply_header_t *)calloc(1, sizeof *h);
  if (!h)
    return vt_scan_fail(err, err_len, "PLY: out of memory");
  size_t pos = 0;
  int rc = ply_read_header(buf, bytes, &pos, h, err, err_len);
  int vi = -1;
  for (int i = 0; rc == 0 && i < h->n_elems; i++)
    if (strcmp(h->elems[i].name, "vertex") == 0)
      vi = i;
  if (rc == 0 && vi < 0)
    rc = vt_scan_fail(err, err_len, "PLY: no \"vertex\" element");
  for (int i = 0; rc == 0 && i < vi; i++) /* elements before the vertices */
    rc = ply_skip_element(buf, bytes, &pos, h->fmt, &h->elems[i], err, err_len);
  if (rc == 0)
    rc = ply_read_vertices(buf, bytes, &pos, h->fmt, &h->elems[vi], scan, err,
                           err_len);
  if (rc == 0) {
    snprintf(scan->format, sizeof scan->format, "PLY %s",
             h->fmt == PLY_ASCII    ? "ascii"
             : h->fmt == PLY_BIN_LE ? "binary_little_endian"
                                    : "binary_big_endian");
    snprintf(scan->field_names, sizeof scan->field_names, "x y z");
  }
  free(h);
  return rc ? -1 : 0;
}
