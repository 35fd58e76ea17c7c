/* Internals shared by the point-cloud readers of the tool: scan_io.c (raw
 * .bin, LZF, the helpers below, the entry points), scan_pcd.c and
 * scan_ply.c. Not an interface: scan_io.h is what the tool and the tests
 * use. */
#ifndef VOXCONV_TOOL_SCAN_PARSE_H
#define VOXCONV_TOOL_SCAN_PARSE_H

#include "scan_io.h"

#include <stddef.h>
#include <stdint.h>

#define VT_LINE_MAX 8192
#define VT_TOKEN_MAX 128
#define VT_MAX_FIELDS 64
/* LZF's largest expansion: a 3-byte back-reference yields 264 bytes. */
#define VT_LZF_MAX_RATIO 88

/* a * b into *out; 0 when the product does not fit 64 bits. Every size
 * computed from header fields goes through this. */
static inline int vt_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* Scalar types shared by PLY and PCD. */
typedef enum vt_scalar {
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
} vt_scalar_t;

/* Formats the message into err; returns -1 (for `return vt_scan_fail(...)`). */
int vt_scan_fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

size_t vt_scalar_size(vt_scalar_t t);
/* Reads one scalar stored with the given byte order as a double. */
double vt_read_scalar(const unsigned char *p, vt_scalar_t t, int big_endian);
uint32_t vt_read_u32_le(const unsigned char *p);

/* Copies the next line (without its \n or \r\n) into line. Returns 1, 0 at
 * the end of the buffer, -1 if the line is longer than line_cap - 1. */
int vt_next_line(const unsigned char *buf, size_t bytes, size_t *pos,
                 char *line, size_t line_cap);
/* Next whitespace-separated token. Returns its length, 0 at the end, -1 if
 * it does not fit tok_cap - 1 characters. */
int vt_next_token(const unsigned char *buf, size_t bytes, size_t *pos,
                  char *tok, size_t tok_cap);
/* Splits a header line into words in place; returns how many there are,
 * of which the first max_words are stored. */
int vt_split_words(char *line, char **words, int max_words);
int vt_parse_number(const char *tok, double *out);
int vt_parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Allocates the output rows for n_points of `fields` floats; more than
 * VT_SCAN_MAX_POINTS is an error. */
int vt_scan_alloc(vt_scan_t *scan, int64_t n_points, int32_t fields, char *err,
                  size_t err_len);
/* Appends one point if its coordinates are finite as float32; else counts
 * it in n_nonfinite. */
void vt_scan_push(vt_scan_t *scan, const double *values);

/* The readers: 0, or -1 with a message (scan then holds nothing to free). */
int vt_parse_ply(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
                 char *err, size_t err_len);
int vt_parse_pcd(const unsigned char *buf, size_t bytes, vt_scan_t *scan,
                 char *err, size_t err_len);

#endif
