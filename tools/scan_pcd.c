/* The PCD v0.7 reader (ascii, binary, binary_compressed): x, y, z and the
 * packed rgb/rgba colour when present. */
#include "scan_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* COUNT of one field: a histogram or descriptor, never millions. */
#define PCD_MAX_COUNT (1 << 20)

typedef struct pcd_field {
  char name[32];
  int size;  /* bytes per element */
  char type; /* 'F', 'U', 'I' */
  int count; /* elements */
  vt_scalar_t st;
  size_t offset; /* within a point (binary) */
  size_t first;  /* index of its first value within a point (ascii) */
} pcd_field_t;

static vt_scalar_t pcd_scalar(char type, int size) {
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

/* Everything the header says, and the layout derived from it. */
typedef struct pcd_header {
  pcd_field_t fields[VT_MAX_FIELDS];
  int n_fields, n_size, n_type, n_count; /* entries per line; -1 = absent */
  int64_t width, height, points;         /* -1 = absent */
  char data_kind[32];                    /* ascii, binary, binary_compressed */
  size_t data_pos;                       /* first byte after the DATA line */
  size_t point_size;                     /* bytes per point (binary) */
  size_t values_per_point;               /* numbers per point (ascii) */
  int ix, iy, iz, irgb;                  /* field indices; irgb -1 = none */
} pcd_header_t;

/* WIDTH / HEIGHT / POINTS: a count (the product is checked later). */
static int pcd_count_line(pcd_header_t *h, char **w, int nw, int line_no,
                          char *err, size_t err_len) {
  int64_t v;
  if (nw != 2 || !vt_parse_count(w[1], 0, INT64_C(1) << 40, &v))
    return vt_scan_fail(err, err_len,
                        "PCD line %d: bad %s value (want one count in "
                        "0..2^40)",
                        line_no, w[0]);
  if (w[0][0] == 'W')
    h->width = v;
  else if (w[0][0] == 'H')
    h->height = v;
  else
    h->points = v;
  return 0;
}

/* SIZE, TYPE and COUNT: one entry per field. */
static int pcd_field_line(pcd_header_t *h, char **w, int nw, int line_no,
                          char *err, size_t err_len) {
  const char *key = w[0];
  for (int i = 0; i < nw - 1; i++) {
    const char *v = w[i + 1];
    pcd_field_t *f = &h->fields[i];
    int64_t n;
    if (key[0] == 'S') {
      if (!vt_parse_count(v, 1, 8, &n) || (n & (n - 1)))
        return vt_scan_fail(err, err_len,
                            "PCD line %d: SIZE \"%s\" (want 1, 2, 4 or 8)",
                            line_no, v);
      f->size = (int)n;
    } else if (key[0] == 'T') {
      if (strlen(v) != 1 || !strchr("FUI", v[0]))
        return vt_scan_fail(err, err_len,
                            "PCD line %d: TYPE \"%s\" (want F, U or I)",
                            line_no, v);
      f->type = v[0];
    } else {
      if (!vt_parse_count(v, 1, PCD_MAX_COUNT, &n))
        return vt_scan_fail(err, err_len,
                            "PCD line %d: COUNT \"%s\" (want 1..%d)", line_no,
                            v, PCD_MAX_COUNT);
      f->count = (int)n;
    }
  }
  if (key[0] == 'S')
    h->n_size = nw - 1;
  else if (key[0] == 'T')
    h->n_type = nw - 1;
  else
    h->n_count = nw - 1;
  return 0;
}

/* One header line split into words; sets data_kind at the DATA line. */
static int pcd_header_line(pcd_header_t *h, char **w, int nw, int line_no,
                           char *err, size_t err_len) {
  const char *key = w[0];
  if (strcmp(key, "VERSION") == 0 || strcmp(key, "VIEWPOINT") == 0)
    return 0; /* 0.7 in practice / a sensor pose: the points are already in
                 the cloud's frame */
  if (strcmp(key, "FIELDS") == 0 || strcmp(key, "COLUMNS") == 0) {
    h->n_fields = nw - 1;
    for (int i = 0; i < h->n_fields; i++)
      snprintf(h->fields[i].name, sizeof h->fields[i].name, "%s", w[i + 1]);
    return 0;
  }
  if (strcmp(key, "SIZE") == 0 || strcmp(key, "TYPE") == 0 ||
      strcmp(key, "COUNT") == 0)
    return pcd_field_line(h, w, nw, line_no, err, err_len);
  if (strcmp(key, "WIDTH") == 0 || strcmp(key, "HEIGHT") == 0 ||
      strcmp(key, "POINTS") == 0)
    return pcd_count_line(h, w, nw, line_no, err, err_len);
  if (strcmp(key, "DATA") != 0)
    return vt_scan_fail(err, err_len, "PCD line %d: unknown header key \"%s\"",
                        line_no, key);
  if (nw != 2)
    return vt_scan_fail(err, err_len, "PCD line %d: DATA needs one value",
                        line_no);
  if (strcmp(w[1], "ascii") != 0 && strcmp(w[1], "binary") != 0 &&
      strcmp(w[1], "binary_compressed") != 0)
    return vt_scan_fail(err, err_len,
                        "PCD line %d: DATA \"%s\" (want ascii, binary or "
                        "binary_compressed)",
                        line_no, w[1]);
  snprintf(h->data_kind, sizeof h->data_kind, "%s", w[1]);
  return 0;
}

static int pcd_read_header(const unsigned char *buf, size_t bytes,
                           pcd_header_t *h, char *err, size_t err_len) {
  memset(h, 0, sizeof *h);
  h->n_fields = h->n_size = h->n_type = h->n_count = -1;
  h->width = h->height = h->points = -1;
  int line_no = 0;
  char line[VT_LINE_MAX];
  char *w[VT_MAX_FIELDS + 1];
  while (!h->data_kind[0]) {
    const int r = vt_next_line(buf, bytes, &h->data_pos, line, sizeof line);
    line_no++;
    if (r == 0)
      return vt_scan_fail(err, err_len,
                          "PCD: header ended (line %d) without a DATA line",
                          line_no);
    if (r < 0)
      return vt_scan_fail(err, err_len,
                          "PCD: header line %d longer than %d characters",
                          line_no, VT_LINE_MAX - 1);
    if (line[0] == '#')
      continue;
    const int nw = vt_split_words(line, w, VT_MAX_FIELDS + 1);
    if (nw > VT_MAX_FIELDS + 1)
      return vt_scan_fail(err, err_len, "PCD line %d: %d fields (at most %d)",
                          line_no, nw - 1, VT_MAX_FIELDS);
    if (nw > 0 && pcd_header_line(h, w, nw, line_no, err, err_len))
      return -1;
  }
  return 0;
}

/* The point count: POINTS, which must equal WIDTH x HEIGHT (each up to
 * 2^40, so the product is computed with an overflow check). */
static int pcd_point_count(pcd_header_t *h, char *err, size_t err_len) {
  if (h->width < 0)
    return vt_scan_fail(err, err_len, "PCD: no WIDTH line");
  if (h->height < 0)
    h->height = 1;
  uint64_t wh;
  if (!vt_mul_u64((uint64_t)h->width, (uint64_t)h->height, &wh) ||
      wh > (uint64_t)INT64_MAX)
    return vt_scan_fail(err, err_len,
                        "PCD: WIDTH %lld x HEIGHT %lld overflows a 64-bit "
                        "point count",
                        (long long)h->width, (long long)h->height);
  if (h->points < 0)
    h->points = (int64_t)wh;
  if ((uint64_t)h->points != wh)
    return vt_scan_fail(
        err, err_len, "PCD: POINTS %lld != WIDTH %lld x HEIGHT %lld",
        (long long)h->points, (long long)h->width, (long long)h->height);
  return 0;
}

/* Field types, offsets and the x, y, z (and rgb) fields. Sizes cannot
 * overflow: at most 64 fields x 8 bytes x PCD_MAX_COUNT. */
static int pcd_layout(pcd_header_t *h, char *err, size_t err_len) {
  if (h->n_fields <= 0)
    return vt_scan_fail(err, err_len, "PCD: no FIELDS line before DATA");
  if (h->n_size != h->n_fields || h->n_type != h->n_fields)
    return vt_scan_fail(
        err, err_len, "PCD: FIELDS has %d entries but SIZE has %d and TYPE %d",
        h->n_fields, h->n_size, h->n_type);
  if (h->n_count >= 0 && h->n_count != h->n_fields)
    return vt_scan_fail(err, err_len, "PCD: FIELDS has %d entries but COUNT %d",
                        h->n_fields, h->n_count);
  h->ix = h->iy = h->iz = h->irgb = -1;
  for (int i = 0; i < h->n_fields; i++) {
    pcd_field_t *f = &h->fields[i];
    if (h->n_count < 0)
      f->count = 1;
    f->st = pcd_scalar(f->type, f->size);
    if (f->st == T_NONE)
      return vt_scan_fail(err, err_len,
                          "PCD: field \"%s\" has TYPE %c with SIZE %d", f->name,
                          f->type, f->size);
    f->offset = h->point_size;
    f->first = h->values_per_point;
    h->point_size += (size_t)f->size * (size_t)f->count;
    h->values_per_point += (size_t)f->count;
    const int scalar = f->count == 1;
    if (strcmp(f->name, "x") == 0 && scalar)
      h->ix = i;
    else if (strcmp(f->name, "y") == 0 && scalar)
      h->iy = i;
    else if (strcmp(f->name, "z") == 0 && scalar)
      h->iz = i;
    else if ((strcmp(f->name, "rgb") == 0 || strcmp(f->name, "rgba") == 0) &&
             scalar && f->size == 4)
      h->irgb = i;
  }
  if (h->ix < 0 || h->iy < 0 || h->iz < 0)
    return vt_scan_fail(err, err_len,
                        "PCD: needs scalar fields x, y and z (FIELDS has %d "
                        "fields)",
                        h->n_fields);
  return 0;
}

/* The bytes the header's points need, with an overflow check; says so
 * (naming the data kind) when they exceed 64 bits. */
static int pcd_data_size(const pcd_header_t *h, size_t per_point, uint64_t *out,
                         char *err, size_t err_len) {
  if (vt_mul_u64((uint64_t)h->points, per_point, out))
    return 0;
  return vt_scan_fail(err, err_len,
                      "PCD %s: %lld points x %zu %s per point overflows 64 "
                      "bits",
                      h->data_kind, (long long)h->points, per_point,
                      strcmp(h->data_kind, "ascii") == 0 ? "values" : "bytes");
}

/* binary and ascii: the data present must be able to hold the points (an
 * ascii value is at least one character and a separator). */
static int pcd_check_plain(const pcd_header_t *h, size_t data_bytes, char *err,
                           size_t err_len) {
  const int ascii = strcmp(h->data_kind, "ascii") == 0;
  uint64_t need;
  if (pcd_data_size(h, ascii ? h->values_per_point : h->point_size, &need, err,
                    err_len))
    return -1;
  if (ascii ? need > (data_bytes + 1) / 2 : need > data_bytes)
    return vt_scan_fail(err, err_len,
                        "PCD %s: %lld points x %zu %s do not fit the %zu bytes "
                        "of data",
                        h->data_kind, (long long)h->points,
                        ascii ? h->values_per_point : h->point_size,
                        ascii ? "values" : "bytes", data_bytes);
  return 0;
}

/* binary_compressed: the 8-byte size header, checked against the points
 * and the bytes present before anything is allocated, then LZF. The
 * unpacked data is field-major. */
static int pcd_unpack(const pcd_header_t *h, const unsigned char *data,
                      size_t data_bytes, unsigned char **out, char *err,
                      size_t err_len) {
  *out = NULL;
  if (data_bytes < 8)
    return vt_scan_fail(err, err_len,
                        "PCD binary_compressed: data shorter than its 8-byte "
                        "size header");
  const uint32_t comp = vt_read_u32_le(data);
  const uint32_t raw = vt_read_u32_le(data + 4);
  if ((size_t)comp > data_bytes - 8)
    return vt_scan_fail(err, err_len,
                        "PCD binary_compressed: compressed size %u exceeds "
                        "the %zu bytes present",
                        comp, data_bytes - 8);
  uint64_t need;
  if (pcd_data_size(h, h->point_size, &need, err, err_len))
    return -1;
  if ((uint64_t)raw != need)
    return vt_scan_fail(err, err_len,
                        "PCD binary_compressed: uncompressed size %u != %lld "
                        "points x %zu bytes",
                        raw, (long long)h->points, h->point_size);
  if ((uint64_t)raw > (uint64_t)comp * VT_LZF_MAX_RATIO)
    return vt_scan_fail(err, err_len,
                        "PCD binary_compressed: uncompressed size %u cannot "
                        "come from %u byte%s of LZF (at most %dx)",
                        raw, comp, comp == 1 ? "" : "s", VT_LZF_MAX_RATIO);
  *out = (unsigned char *)malloc(raw ? raw : 1);
  if (!*out)
    return vt_scan_fail(err, err_len, "PCD: out of memory (%u bytes)", raw);
  const int64_t got = vt_lzf_decompress(data + 8, comp, *out, raw);
  if (got != (int64_t)raw) {
    free(*out);
    *out = NULL;
    return vt_scan_fail(err, err_len,
                        "PCD binary_compressed: corrupt LZF stream (%lld of %u "
                        "bytes decoded)",
                        (long long)got, raw);
  }
  return 0;
}

/* Point i of binary data: point-major, or field-major (every point's value
 * of field 0, then of field 1, ...) as PCL writes binary_compressed. The
 * offsets stay inside the data, whose size was checked against points. */
static void pcd_binary_point(const pcd_header_t *h, const unsigned char *data,
                             int field_major, int64_t i, double *out) {
  const int ids[4] = {h->ix, h->iy, h->iz, h->irgb};
  for (int k = 0; k < 4; k++) {
    if (ids[k] < 0)
      continue;
    const pcd_field_t *f = &h->fields[ids[k]];
    const size_t at = field_major ? f->offset * (size_t)h->points +
                                        (size_t)i * (size_t)f->size
                                  : (size_t)i * h->point_size + f->offset;
    if (k < 3)
      out[k] = vt_read_scalar(data + at, f->st, 0);
    else
      unpack_rgb(vt_read_u32_le(data + at), out + 3);
  }
}

/* Point i of ascii data at *pos; row has room for values_per_point. */
static int pcd_ascii_point(const pcd_header_t *h, const unsigned char *buf,
                           size_t bytes, size_t *pos, int64_t i, double *row,
                           double *out, char *err, size_t err_len) {
  char tok[VT_TOKEN_MAX];
  for (size_t k = 0; k < h->values_per_point; k++) {
    const int len = vt_next_token(buf, bytes, pos, tok, sizeof tok);
    if (len <= 0 || !vt_parse_number(tok, &row[k]))
      return vt_scan_fail(err, err_len, "PCD ascii: point %lld value %zu: %s",
                          (long long)i, k,
                          len <= 0 ? "data ends early" : "not a number");
  }
  out[0] = row[h->fields[h->ix].first];
  out[1] = row[h->fields[h->iy].first];
  out[2] = row[h->fields[h->iz].first];
  if (h->irgb >= 0) {
    const double v = row[h->fields[h->irgb].first];
    uint32_t bits = 0;
    if (h->fields[h->irgb].type == 'F') { /* the float's bits are the colour */
      const float f = (float)v;
      memcpy(&bits, &f, 4);
    } else if (v >= 0 && v <= 4294967295.0) {
      bits = (uint32_t)v;
    }
    unpack_rgb(bits, out + 3);
  }
  return 0;
}

static int pcd_read_points(const pcd_header_t *h, const unsigned char *buf,
                           size_t bytes, const unsigned char *data,
                           int field_major, vt_scan_t *scan, char *err,
                           size_t err_len) {
  const int ascii = strcmp(h->data_kind, "ascii") == 0;
  /* values_per_point was bounded by the data size check */
  double *row = NULL;
  if (ascii && !(row = (double *)malloc(h->values_per_point * sizeof *row)))
    return vt_scan_fail(err, err_len, "PCD: out of memory");
  size_t apos = h->data_pos; /* ascii cursor */
  for (int64_t i = 0; i < h->points; i++) {
    double out[6];
    if (!ascii) {
      pcd_binary_point(h, data, field_major, i, out);
    } else if (pcd_ascii_point(h, buf, bytes, &apos, i, row, out, err,
                               err_len)) {
      free(row);
      return -1;
    }
    vt_scan_push(scan, out);
  }
  free(row);
  return 0;
}

int vt_parse_pcd(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
                 char *err, size_t err_len) {
  pcd_header_t h;
  if (pcd_read_header(buf, bytes, &h, err, err_len) ||
      pcd_point_count(&h, err, err_len) || pcd_layout(&h, err, err_len))
    return -1;
  const size_t data_bytes = bytes - h.data_pos;
  const unsigned char *data = buf + h.data_pos;
  unsigned char *unpacked = NULL;
  const int compressed = strcmp(h.data_kind, "binary_compressed") == 0;
  if (compressed ? pcd_unpack(&h, data, data_bytes, &unpacked, err, err_len)
                 : pcd_check_plain(&h, data_bytes, err, err_len))
    return -1;
  const int out_fields = h.irgb >= 0 ? 6 : 3;
  int rc = vt_scan_alloc(scan, h.points, out_fields, err, err_len);
  if (rc == 0)
    rc = pcd_read_points(&h, buf, bytes, compressed ? unpacked : data,
                         compressed, scan, err, err_len);
  free(unpacked);
  if (rc) {
    vt_scan_free(scan);
    return -1;
  }
  snprintf(scan->format, sizeof scan->format, "PCD %s", h.data_kind);
  snprintf(scan->field_names, sizeof scan->field_names, "%s",
           h.irgb >= 0 ? "x y z r g b" : "x y z");
  return 0;
}
