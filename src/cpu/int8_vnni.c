/* VNNI tiles and epilogue for the int8 convolution (conv_int8_cpu.c).
 *
 * vpdpbusd multiplies unsigned bytes by signed bytes, four per 32-bit
 * lane, and adds the four products to the lane (wrapping). The weights are
 * the unsigned side: packed as u8 = qw + 128, so each lane computes
 *   sum_b (qw_b + 128) * qx_b = sum_b qw_b qx_b + 128 * sum_b qx_b,
 * and the caller subtracts 128 * (sum of the row's qx) once per output row
 * (the row correction). The activations are the signed side, broadcast four
 * bytes at a time, so the inner loop is one weight load per 16 columns and
 * one vpdpbusd per (row, 16 columns, 4 input channels). Intermediate sums
 * may wrap (|(qw+128) qx| <= 32640); the final result is exact because it
 * fits int32 (voxconv.h) and wrapping arithmetic is modular.
 *
 *   avx512  AVX-512 VNNI (+BW): 12 rows x 32 columns, 24 zmm accumulators;
 *           its epilogue is vectorised with exactly the IEEE operations of
 *           the portable one (cvtdq2ps, vfmadd, vdivps, vrndscaleps with
 *           ties-to-even, vcvtps2ph), so the bits are identical.
 *   avx2    AVX-VNNI (VEX vpdpbusd on ymm): 6 rows x 16 columns, 12 ymm
 *           accumulators; the portable epilogue.
 * Compiled with target attributes and chosen at run time, like gemm_cpu.c. */
#include "vc_cpu.h"

#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) &&                               \
    (__GNUC__ >= 11 || defined(__clang__))
#define VC_I8_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define VC_I8_X86 0
#endif

#if VC_I8_X86
#define VC_INLINE static inline __attribute__((always_inline))
#define VC_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define VC_T256 __attribute__((target("avx2,avxvnni")))

static inline int32_t load_i32(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* ---- AVX-512 VNNI ------------------------------------------------------- */
#define I8_512_MR 12
#define I8_512_NR 32

VC_T512 VC_INLINE void tile512_body(const int M, int64_t kg,
                                    const int8_t *const *arow,
                                    const uint8_t *bp, int32_t *c, int64_t ldc,
                                    const int32_t *crow) {
  __m512i acc[I8_512_MR][2];
  for (int r = 0; r < M; r++) {
    int32_t *cr = c + (int64_t)crow[r] * ldc;
    acc[r][0] = _mm512_loadu_si512((const void *)cr);
    acc[r][1] = _mm512_loadu_si512((const void *)(cr + 16));
  }
  for (int64_t g = 0; g < kg; g++) {
    const __m512i b0 = _mm512_loadu_si512((const void *)(bp + g * 128));
    const __m512i b1 = _mm512_loadu_si512((const void *)(bp + g * 128 + 64));
    for (int r = 0; r < M; r++) {
      const __m512i a = _mm512_set1_epi32(load_i32(arow[r] + 4 * g));
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], b0, a);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], b1, a);
    }
  }
  for (int r = 0; r < M; r++) {
    int32_t *cr = c + (int64_t)crow[r] * ldc;
    _mm512_storeu_si512((void *)cr, acc[r][0]);
    _mm512_storeu_si512((void *)(cr + 16), acc[r][1]);
  }
}

VC_T512 static void tile512(int m, int64_t kg, const int8_t *const *arow,
                            const uint8_t *bp, int32_t *c, int64_t ldc,
                            const int32_t *crow) {
  /* clang-format off: one line per tile height */
  switch (m) {
  case 12: tile512_body(12, kg, arow, bp, c, ldc, crow); break;
  case 11: tile512_body(11, kg, arow, bp, c, ldc, crow); break;
  case 10: tile512_body(10, kg, arow, bp, c, ldc, crow); break;
  case 9: tile512_body(9, kg, arow, bp, c, ldc, crow); break;
  case 8: tile512_body(8, kg, arow, bp, c, ldc, crow); break;
  case 7: tile512_body(7, kg, arow, bp, c, ldc, crow); break;
  case 6: tile512_body(6, kg, arow, bp, c, ldc, crow); break;
  case 5: tile512_body(5, kg, arow, bp, c, ldc, crow); break;
  case 4: tile512_body(4, kg, arow, bp, c, ldc, crow); break;
  case 3: tile512_body(3, kg, arow, bp, c, ldc, crow); break;
  case 2: tile512_body(2, kg, arow, bp, c, ldc, crow); break;
  case 1: tile512_body(1, kg, arow, bp, c, ldc, crow); break;
  default: break;
  }
  /* clang-format on */
}

/* One output row of the epilogue (voxconv.h steps 2-5 with m = the
 * per-channel multipliers, already x_scale * w_scale[c] in fp32). Every
 * operation is the IEEE one of the portable loop, lane by lane. */
VC_T512 static void epilogue512(const int32_t *acc, int64_t n, const float *m,
                                const float *b, int relu, float y_scale,
                                voxconv_dtype_t dt, void *dst) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 ys = _mm512_set1_ps(y_scale);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k =
        n - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - c)) - 1u);
    const __m512 a = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k, acc + c));
    __m512 v = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(k, m + c),
                               _mm512_maskz_loadu_ps(k, b + c));
    if (relu) /* v < 0 -> +0; v is never NaN */
      v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
    switch (dt) {
    case VOXCONV_DTYPE_F32:
      _mm512_mask_storeu_ps((float *)dst + c, k, v);
      break;
    case VOXCONV_DTYPE_F16:
      _mm256_mask_storeu_epi16(
          (uint16_t *)dst + c, k,
          _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      break;
    case VOXCONV_DTYPE_BF16: {
      /* round to nearest even on the bits (no NaN can occur) */
      const __m512i u = _mm512_castps_si512(v);
      const __m512i lsb =
          _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      const __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                           lsb),
          16);
      _mm256_mask_storeu_epi16((uint16_t *)dst + c, k,
                               _mm512_cvtepi32_epi16(r));
      break;
    }
    case VOXCONV_DTYPE_I8: {
      __m512 t = _mm512_div_ps(v, ys);
      t = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT |
                                      _MM_FROUND_NO_EXC);
      t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);
      _mm_mask_storeu_epi8((int8_t *)dst + c, k,
                           _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t)));
      break;
    }
    default:
      break;
    }
  }
}

/* ---- AVX-VNNI (256-bit) ------------------------------------------------- */
#define I8_256_MR 6
#define I8_256_NR 16

VC_T256 VC_INLINE void tile256_body(const int M, int64_t kg,
                                    const int8_t *const *arow,
                                    const uint8_t *bp, int32_t *c, int64_t ldc,
                                    const int32_t *crow) {
  __m256i acc[I8_256_MR][2];
  for (int r = 0; r < M; r++) {
    int32_t *cr = c + (int64_t)crow[r] * ldc;
    acc[r][0] = _mm256_loadu_si256((const __m256i *)cr);
    acc[r][1] = _mm256_loadu_si256((const __m256i *)(cr + 8));
  }
  for (int64_t g = 0; g < kg; g++) {
    const __m256i b0 = _mm256_loadu_si256((const __m256i *)(bp + g * 64));
    const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + g * 64 + 32));
    for (int r = 0; r < M; r++) {
      const __m256i a = _mm256_set1_epi32(load_i32(arow[r] + 4 * g));
      acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], b0, a);
      acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], b1, a);
    }
  }
  for (int r = 0; r < M; r++) {
    int32_t *cr = c + (int64_t)crow[r] * ldc;
    _mm256_storeu_si256((__m256i *)cr, acc[r][0]);
    _mm256_storeu_si256((__m256i *)(cr + 8), acc[r][1]);
  }
}

VC_T256 static void tile256(int m, int64_t kg, const int8_t *const *arow,
                            const uint8_t *bp, int32_t *c, int64_t ldc,
                            const int32_t *crow) {
  /* clang-format off */
  switch (m) {
  case 6: tile256_body(6, kg, arow, bp, c, ldc, crow); break;
  case 5: tile256_body(5, kg, arow, bp, c, ldc, crow); break;
  case 4: tile256_body(4, kg, arow, bp, c, ldc, crow); break;
  case 3: tile256_body(3, kg, arow, bp, c, ldc, crow); break;
  case 2: tile256_body(2, kg, arow, bp, c, ldc, crow); break;
  case 1: tile256_body(1, kg, arow, bp, c, ldc, crow); break;
  default: break;
  }
  /* clang-format on */
}

static const vc_int8_simd_t k_i8_avx512 = {"avx512_vnni", I8_512_MR,
                                           I8_512_NR, tile512, epilogue512};
static const vc_int8_simd_t k_i8_avx2 = {"avx_vnni", I8_256_MR, I8_256_NR,
                                         tile256, NULL};

static int has_avx512_vnni(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}
static int has_avx_vnni(void) {
  /* CPUID.(EAX=7,ECX=1):EAX bit 4; not every compiler knows the name for
   * __builtin_cpu_supports. "avx2" covers the OS saving the ymm state. */
  unsigned a = 0, b = 0, c = 0, d = 0;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2"))
    return 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1u);
}
#endif /* VC_I8_X86 */

const vc_int8_simd_t *vc_cpu_int8_simd(const char *family) {
#if VC_I8_X86
  if (!family)
    return NULL;
  if (strcmp(family, "avx512") == 0 && has_avx512_vnni())
    return &k_i8_avx512;
  if ((strcmp(family, "avx512") == 0 || strcmp(family, "avx2") == 0) &&
      has_avx_vnni())
    return &k_i8_avx2;
#else
  (void)family;
#endif
  return NULL;
}
