/* The PCD v0.7 reader (ascii, binary, binary_compressed): x, y, z and the
 * packed rgb/rgba colour when present. */
#include "scan_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int vt_parse_pcd(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
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
    const int r = vt_next_line(buf, bytes, &pos, line, sizeof line);
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
    if (nw < 0)
      return vt_scan_fail(err, err_len, "PCD line %d: more than %d fields",
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
        if (!vt_parse_count(w[i + 1], 1, 8, &s) || (s & (s - 1)))
          return vt_scan_fail(err, err_len,
                              "PCD line %d: SIZE \"%s\" (want 1, 2, 4 or 8)",
                              line_no, w[i + 1]);
        fields[i].size = (int)s;
      }
    } else if (strcmp(key, "TYPE") == 0) {
      n_type = nw - 1;
      for (int i = 0; i < n_type; i++) {
        if (strlen(w[i + 1]) != 1 || !strchr("FUI", w[i + 1][0]))
          return vt_scan_fail(err, err_len,
                              "PCD line %d: TYPE \"%s\" (want F, U or I)",
                              line_no, w[i + 1]);
        fields[i].type = w[i + 1][0];
      }
    } else if (strcmp(key, "COUNT") == 0) {
      n_count = nw - 1;
      for (int i = 0; i < n_count; i++) {
        int64_t c;
        if (!vt_parse_count(w[i + 1], 1, 1 << 20, &c))
          return vt_scan_fail(err, err_len,
                              "PCD line %d: COUNT \"%s\" (want >= 1)", line_no,
                              w[i + 1]);
        fields[i].count = (int)c;
      }
    } else if (strcmp(key, "WIDTH") == 0 || strcmp(key, "HEIGHT") == 0 ||
               strcmp(key, "POINTS") == 0) {
      int64_t v;
      if (nw != 2 || !vt_parse_count(w[1], 0, INT64_C(1) << 40, &v))
        return vt_scan_fail(err, err_len, "PCD line %d: bad %s value", line_no,
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
        return vt_scan_fail(err, err_len, "PCD line %d: DATA needs one value",
                            line_no);
      if (strcmp(w[1], "ascii") != 0 && strcmp(w[1], "binary") != 0 &&
          strcmp(w[1], "binary_compressed") != 0)
        return vt_scan_fail(err, err_len,
                            "PCD line %d: DATA \"%s\" (want ascii, binary or "
                            "binary_compressed)",
                            line_no, w[1]);
      snprintf(data_kind, sizeof data_kind, "%s", w[1]);
    } else {
      return vt_scan_fail(
          err, err_len, "PCD line %d: unknown header key \"%s\"", line_no, key);
    }
  }
  if (n_fields <= 0)
    return vt_scan_fail(err, err_len, "PCD: no FIELDS line before DATA");
  if (n_size != n_fields || n_type != n_fields)
    return vt_scan_fail(
        err, err_len, "PCD: FIELDS has %d entries but SIZE has %d and TYPE %d",
        n_fields, n_size, n_type);
  if (n_count >= 0 && n_count != n_fields)
    return vt_scan_fail(err, err_len, "PCD: FIELDS has %d entries but COUNT %d",
                        n_fields, n_count);
  if (width < 0)
    return vt_scan_fail(err, err_len, "PCD: no WIDTH line");
  if (height < 0)
    height = 1;
  if (points < 0)
    points = width * height;
  if (points != width * height)
    return vt_scan_fail(err, err_len,
                        "PCD: POINTS %lld != WIDTH %lld x HEIGHT "
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
      return vt_scan_fail(err, err_len,
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
    return vt_scan_fail(err, err_len,
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
      return vt_scan_fail(err, err_len,
                          "PCD binary: %lld points x %zu bytes do not fit the "
                          "%zu bytes of data",
                          (long long)points, point_size, data_bytes);
  } else if (strcmp(data_kind, "binary_compressed") == 0) {
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
    if ((uint64_t)raw != (uint64_t)points * point_size)
      return vt_scan_fail(err, err_len,
                          "PCD binary_compressed: uncompressed size %u != %lld "
                          "points x %zu bytes",
                          raw, (long long)points, point_size);
    unpacked = (unsigned char *)malloc(raw ? raw : 1);
    if (!unpacked)
      return vt_scan_fail(err, err_len, "PCD: out of memory (%u bytes)", raw);
    const int64_t got = vt_lzf_decompress(data + 8, comp, unpacked, raw);
    if (got != (int64_t)raw) {
      free(unpacked);
      return vt_scan_fail(
          err, err_len,
          "PCD binary_compressed: corrupt LZF stream (%lld of %u "
          "bytes decoded)",
          (long long)got, raw);
    }
    data = unpacked;
    field_major = 1;
  } else { /* ascii: at least two characters per value */
    if (points > 0 && values_per_point > 0 &&
        (size_t)points > data_bytes / (2 * values_per_point) + 1)
      return vt_scan_fail(
          err, err_len,
          "PCD ascii: %lld points declared but only %zu bytes of "
          "data",
          (long long)points, data_bytes);
  }
  if (vt_scan_alloc(scan, points, out_fields, err, err_len)) {
    free(unpacked);
    return -1;
  }
  double *row = (double *)malloc((values_per_point ? values_per_point : 1) *
                                 sizeof(double));
  if (!row) {
    free(unpacked);
    vt_scan_free(scan);
    return vt_scan_fail(err, err_len, "PCD: out of memory");
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
          out[k] = vt_read_scalar(data + at, f->st, 0);
        else
          unpack_rgb(vt_read_u32_le(data + at), out + 3);
      }
    } else {
      char tok[VT_TOKEN_MAX];
      for (size_t k = 0; k < values_per_point; k++) {
        const int len = vt_next_token(buf, bytes, &apos, tok, sizeof tok);
        if (len <= 0 || !vt_parse_number(tok, &row[k])) {
          status = vt_scan_fail(
              err, err_len, "PCD ascii: point %lld value %zu: %s", (long long)i,
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
    vt_scan_push(scan, out);
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
