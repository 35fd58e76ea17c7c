/* The PLY reader (ascii, binary_little_endian, binary_big_endian): the
 * vertex element's x, y and z; every other element and property is read
 * past. */
#include "scan_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VT_PLY_MAX_ELEMENTS 16

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

int vt_parse_ply(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
                 char *err, size_t err_len) {
  size_t pos = 0;
  char line[VT_LINE_MAX];
  char *w[8];
  int r = vt_next_line(buf, bytes, &pos, line, sizeof line);
  if (r <= 0 || strcmp(line, "ply") != 0)
    return vt_scan_fail(err, err_len, "PLY: first line is not \"ply\"");
  int have_format = 0, ended = 0;
  ply_format_t fmt = PLY_ASCII;
  ply_element_t *elems =
      (ply_element_t *)calloc(VT_PLY_MAX_ELEMENTS, sizeof(ply_element_t));
  if (!elems)
    return vt_scan_fail(err, err_len, "PLY: out of memory");
  int n_elems = 0, line_no = 1;
  /* Formats before freeing: the message may name an element. */
#define PLY_FAIL(...)                                                          \
  do {                                                                         \
    vt_scan_fail(err, err_len, __VA_ARGS__);                                   \
    free(elems);                                                               \
    return -1;                                                                 \
  } while (0)
  while (!ended) {
    r = vt_next_line(buf, bytes, &pos, line, sizeof line);
    line_no++;
    if (r == 0)
      PLY_FAIL("PLY: header ended (line %d) without \"end_header\"", line_no);
    if (r < 0)
      PLY_FAIL("PLY: header line %d longer than %d characters", line_no,
               VT_LINE_MAX - 1);
    if (strncmp(line, "comment", 7) == 0 || strncmp(line, "obj_info", 8) == 0)
      continue;
    const int nw = vt_split_words(line, w, 8);
    if (nw <= 0)
      continue;
    if (strcmp(w[0], "end_header") == 0) {
      ended = 1;
    } else if (strcmp(w[0], "format") == 0) {
      if (nw != 3)
        PLY_FAIL("PLY line %d: \"format\" needs a type and a version", line_no);
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
        PLY_FAIL("PLY line %d: \"element\" needs a name and a count", line_no);
      if (n_elems == VT_PLY_MAX_ELEMENTS)
        PLY_FAIL("PLY line %d: more than %d elements", line_no,
                 VT_PLY_MAX_ELEMENTS);
      ply_element_t *e = &elems[n_elems++];
      snprintf(e->name, sizeof e->name, "%s", w[1]);
      if (!vt_parse_count(w[2], 0, INT64_C(1) << 40, &e->count))
        PLY_FAIL("PLY line %d: element \"%s\" has a bad count \"%s\"", line_no,
                 e->name, w[2]);
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
          PLY_FAIL("PLY line %d: unknown property type \"%s\"", line_no, w[1]);
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
  if (vt_scan_alloc(scan, v->count, 3, err, err_len)) {
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
    vt_scan_push(scan, xyz);
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
