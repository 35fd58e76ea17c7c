/* dtype sizes, names and host-side conversions. f16 and bf16 conversions
 * are done in software so that the CPU reference path gives the same bits
 * on every host (no dependence on F16C or compiler _Float16 support). */
#include "vc_core.h"

#include <math.h>
#include <string.h>

int vc_dtype_valid(voxconv_dtype_t dtype) {
  return dtype == VOXCONV_DTYPE_F32 || dtype == VOXCONV_DTYPE_F16 ||
         dtype == VOXCONV_DTYPE_BF16 || dtype == VOXCONV_DTYPE_F64;
}

size_t voxconv_dtype_size(voxconv_dtype_t dtype) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32: return 4;
  case VOXCONV_DTYPE_F16: return 2;
  case VOXCONV_DTYPE_BF16: return 2;
  case VOXCONV_DTYPE_F64: return 8;
  case VOXCONV_DTYPE_I8: return 1;
  case VOXCONV_DTYPE_I32: return 4;
  }
  return 0;
}

const char *voxconv_dtype_name(voxconv_dtype_t dtype) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32: return "f32";
  case VOXCONV_DTYPE_F16: return "f16";
  case VOXCONV_DTYPE_BF16: return "bf16";
  case VOXCONV_DTYPE_F64: return "f64";
  case VOXCONV_DTYPE_I8: return "i8";
  case VOXCONV_DTYPE_I32: return "i32";
  }
  return "invalid";
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float vc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0) {
    if (man == 0)
      return bits_f32(sign);
    /* subnormal: value = man * 2^-24 exactly representable in f32 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31)
    return bits_f32(sign | 0x7F800000u | (man << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t vc_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7FFFFFFFu;
  if (absu >= 0x7F800000u) /* Inf or NaN (keep NaN quiet) */
    return (uint16_t)(sign | 0x7C00u | (absu > 0x7F800000u ? 0x200u : 0));
  if (absu >= 0x477FF000u) /* rounds to >= 65520: overflow to Inf */
    return (uint16_t)(sign | 0x7C00u);
  if (absu < 0x38800000u) { /* below 2^-14: subnormal or zero */
    /* scale to units of 2^-24 and round to nearest even via float math */
    float a = bits_f32(absu) * 16777216.0f; /* exact: power of two */
    float r = nearbyintf(a); /* default rounding mode is nearest-even */
    return (uint16_t)(sign | (uint32_t)r);
  }
  uint32_t mant = absu + 0xC8000000u; /* rebias exponent 127 -> 15 */
  uint32_t round = 0xFFFu + ((mant >> 13) & 1u);
  mant += round;
  return (uint16_t)(sign | (mant >> 13));
}

float vc_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t vc_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

void vc_load_f32(const void *src, voxconv_dtype_t dtype, int64_t n,
                 float *dst) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    break;
  case VOXCONV_DTYPE_F16:
    for (int64_t i = 0; i < n; i++)
      dst[i] = vc_f16_to_f32(((const uint16_t *)src)[i]);
    break;
  case VOXCONV_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++)
      dst[i] = vc_bf16_to_f32(((const uint16_t *)src)[i]);
    break;
  case VOXCONV_DTYPE_F64:
    for (int64_t i = 0; i < n; i++)
      dst[i] = (float)((const double *)src)[i];
    break;
  case VOXCONV_DTYPE_I8: /* int8 max pooling: exact */
    for (int64_t i = 0; i < n; i++)
      dst[i] = (float)((const int8_t *)src)[i];
    break;
  default: /* I32: only the int8 ops take it */
    break;
  }
}

void vc_store_f32(void *dst, voxconv_dtype_t dtype, int64_t n,
                  const float *src) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    break;
  case VOXCONV_DTYPE_F16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = vc_f32_to_f16(src[i]);
    break;
  case VOXCONV_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = vc_f32_to_bf16(src[i]);
    break;
  case VOXCONV_DTYPE_F64:
    for (int64_t i = 0; i < n; i++)
      ((double *)dst)[i] = src[i];
    break;
  case VOXCONV_DTYPE_I8: /* int8 max pooling: values that are int8 already;
                            others round to nearest even and saturate */
    for (int64_t i = 0; i < n; i++) {
      const float r = nearbyintf(src[i]);
      ((int8_t *)dst)[i] =
          (int8_t)(r != r ? 0 : r < -128.0f ? -128 : r > 127.0f ? 127 : (int)r);
    }
    break;
  default: /* I32: only the int8 ops take it */
    break;
  }
}

void vc_load_f64(const void *src, voxconv_dtype_t dtype, int64_t n,
                 double *dst) {
  if (dtype == VOXCONV_DTYPE_F64) {
    memcpy(dst, src, (size_t)n * 8);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float v;
    vc_load_f32((const char *)src + (size_t)i * voxconv_dtype_size(dtype),
                dtype, 1, &v);
    dst[i] = v;
  }
}

void vc_store_f64(void *dst, voxconv_dtype_t dtype, int64_t n,
                  const double *src) {
  if (dtype == VOXCONV_DTYPE_F64) {
    memcpy(dst, src, (size_t)n * 8);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float v = (float)src[i];
    vc_store_f32((char *)dst + (size_t)i * voxconv_dtype_size(dtype), dtype,
                 1, &v);
  }
}
