/* Register-blocked GEMM tiles and dtype row conversions for the CPU
 * algorithms. Three tile kernels with the same contract (vc_cpu.h):
 *   portable  plain C the compiler vectorises for the build's baseline ISA
 *             (separate multiply and add: the library is built in ISO C
 *             mode, where GCC does not contract a*b+c)
 *   avx2      6 x 16 tile, 12 ymm accumulators, FMA
 *   avx512    12 x 32 tile, 24 zmm accumulators, FMA with embedded
 *             broadcasts
 * The x86 variants are compiled with target attributes and chosen at run
 * time (__builtin_cpu_supports), so one binary runs everywhere. */
#include "vc_cpu.h"

#include <stdatomic.h>
#include <string.h>
#include <strings.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define VC_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define VC_X86 0
#endif

#define VC_INLINE static inline __attribute__((always_inline))

/* ---- portable ----------------------------------------------------------- */
#define PORT_MR 4
#define PORT_NR 16

VC_INLINE void portable_body(const int M, int64_t kdim,
                             const float *const *arow, const float *b,
                             int64_t ldb, float *c, int64_t ldc,
                             const int32_t *crow) {
  float acc[PORT_MR][PORT_NR];
  for (int r = 0; r < M; r++) {
    const float *cr = c + (int64_t)crow[r] * ldc;
    for (int t = 0; t < PORT_NR; t++)
      acc[r][t] = cr[t];
  }
  for (int64_t p = 0; p < kdim; p++) {
    const float *bp = b + p * ldb;
    for (int r = 0; r < M; r++) {
      const float a = arow[r][p];
      for (int t = 0; t < PORT_NR; t++)
        acc[r][t] += a * bp[t];
    }
  }
  for (int r = 0; r < M; r++) {
    float *cr = c + (int64_t)crow[r] * ldc;
    for (int t = 0; t < PORT_NR; t++)
      cr[t] = acc[r][t];
  }
}

static void portable_tile(int m, int64_t kdim, const float *const *arow,
                          const float *b, int64_t ldb, float *c, int64_t ldc,
                          const int32_t *crow) {
  /* clang-format off: one line per tile height */
  switch (m) {
  case 4:
    portable_body(4, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 3:
    portable_body(3, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 2:
    portable_body(2, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 1:
    portable_body(1, kdim, arow, b, ldb, c, ldc, crow);
    break;
  default:
    break;
  }
  /* clang-format on */
}

VC_INLINE void portable_pp_body(const int M, int64_t kdim,
                                const float *const *ap, int64_t aoff,
                                const float *const *bp, int64_t boff, float *c,
                                int64_t ldc) {
  float acc[PORT_MR][PORT_NR];
  for (int r = 0; r < M; r++)
    for (int t = 0; t < PORT_NR; t++)
      acc[r][t] = c[r * ldc + t];
  for (int64_t p = 0; p < kdim; p++) {
    const float *a = ap[p] + aoff, *b = bp[p] + boff;
    for (int r = 0; r < M; r++) {
      const float av = a[r];
      for (int t = 0; t < PORT_NR; t++)
        acc[r][t] += av * b[t];
    }
  }
  for (int r = 0; r < M; r++)
    for (int t = 0; t < PORT_NR; t++)
      c[r * ldc + t] = acc[r][t];
}

static void portable_tile_pp(int m, int64_t kdim, const float *const *ap,
                             int64_t aoff, const float *const *bp, int64_t boff,
                             float *c, int64_t ldc) {
  /* clang-format off: one line per tile height */
  switch (m) {
  case 4:
    portable_pp_body(4, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 3:
    portable_pp_body(3, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 2:
    portable_pp_body(2, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 1:
    portable_pp_body(1, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  default:
    break;
  }
  /* clang-format on */
}

static const vc_gemm_kernel_t k_portable = {"portable", PORT_MR, PORT_NR,
                                            portable_tile, portable_tile_pp};

#if VC_X86
/* ---- AVX2 + FMA: 6 x 16 -------------------------------------------------- */
#define AVX2_MR 6
#define AVX2_NR 16
#define VC_AVX2 __attribute__((target("avx2,fma")))

VC_INLINE VC_AVX2 void avx2_body(const int M, int64_t kdim,
                                 const float *const *arow, const float *b,
                                 int64_t ldb, float *c, int64_t ldc,
                                 const int32_t *crow) {
  __m256 c0[AVX2_MR], c1[AVX2_MR];
  const float *a[AVX2_MR];
#pragma GCC unroll 8
  for (int r = 0; r < M; r++) {
    const float *cr = c + (int64_t)crow[r] * ldc;
    a[r] = arow[r];
    c0[r] = _mm256_loadu_ps(cr);
    c1[r] = _mm256_loadu_ps(cr + 8);
  }
  for (int64_t p = 0; p < kdim; p++) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
    b += ldb;
#pragma GCC unroll 8
    for (int r = 0; r < M; r++) {
      const __m256 av = _mm256_broadcast_ss(a[r] + p);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < M; r++) {
    float *cr = c + (int64_t)crow[r] * ldc;
    _mm256_storeu_ps(cr, c0[r]);
    _mm256_storeu_ps(cr + 8, c1[r]);
  }
}

VC_AVX2 static void avx2_tile(int m, int64_t kdim, const float *const *arow,
                              const float *b, int64_t ldb, float *c,
                              int64_t ldc, const int32_t *crow) {
  /* clang-format off: one line per tile height */
  switch (m) {
  case 6:
    avx2_body(6, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 5:
    avx2_body(5, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 4:
    avx2_body(4, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 3:
    avx2_body(3, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 2:
    avx2_body(2, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 1:
    avx2_body(1, kdim, arow, b, ldb, c, ldc, crow);
    break;
  default:
    break;
  }
  /* clang-format on */
}

VC_INLINE VC_AVX2 void avx2_pp_body(const int M, int64_t kdim,
                                    const float *const *ap, int64_t aoff,
                                    const float *const *bp, int64_t boff,
                                    float *c, int64_t ldc) {
  __m256 c0[AVX2_MR], c1[AVX2_MR];
#pragma GCC unroll 8
  for (int r = 0; r < M; r++) {
    c0[r] = _mm256_loadu_ps(c + r * ldc);
    c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
  }
  for (int64_t p = 0; p < kdim; p++) {
    const float *a = ap[p] + aoff, *b = bp[p] + boff;
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
    for (int r = 0; r < M; r++) {
      const __m256 av = _mm256_broadcast_ss(a + r);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < M; r++) {
    _mm256_storeu_ps(c + r * ldc, c0[r]);
    _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
  }
}

VC_AVX2 static void avx2_tile_pp(int m, int64_t kdim, const float *const *ap,
                                 int64_t aoff, const float *const *bp,
                                 int64_t boff, float *c, int64_t ldc) {
  /* clang-format off: one line per tile height */
  switch (m) {
  case 6:
    avx2_pp_body(6, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 5:
    avx2_pp_body(5, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 4:
    avx2_pp_body(4, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 3:
    avx2_pp_body(3, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 2:
    avx2_pp_body(2, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 1:
    avx2_pp_body(1, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  default:
    break;
  }
  /* clang-format on */
}

static const vc_gemm_kernel_t k_avx2 = {"avx2", AVX2_MR, AVX2_NR, avx2_tile,
                                        avx2_tile_pp};

/* ---- AVX-512F: 12 x 32 --------------------------------------------------- */
#define AVX512_MR 12
#define AVX512_NR 32
#define VC_AVX512 __attribute__((target("avx512f")))

VC_INLINE VC_AVX512 void avx512_body(const int M, int64_t kdim,
                                     const float *const *arow, const float *b,
                                     int64_t ldb, float *c, int64_t ldc,
                                     const int32_t *crow) {
  __m512 c0[AVX512_MR], c1[AVX512_MR];
  const float *a[AVX512_MR];
#pragma GCC unroll 16
  for (int r = 0; r < M; r++) {
    const float *cr = c + (int64_t)crow[r] * ldc;
    a[r] = arow[r];
    c0[r] = _mm512_loadu_ps(cr);
    c1[r] = _mm512_loadu_ps(cr + 16);
  }
  for (int64_t p = 0; p < kdim; p++) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
    b += ldb;
#pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
      const __m512 av = _mm512_set1_ps(a[r][p]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < M; r++) {
    float *cr = c + (int64_t)crow[r] * ldc;
    _mm512_storeu_ps(cr, c0[r]);
    _mm512_storeu_ps(cr + 16, c1[r]);
  }
}

VC_AVX512 static void avx512_tile(int m, int64_t kdim, const float *const *arow,
                                  const float *b, int64_t ldb, float *c,
                                  int64_t ldc, const int32_t *crow) {
  /* clang-format off: one line per tile height */
  switch (m) {
  case 12:
    avx512_body(12, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 11:
    avx512_body(11, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 10:
    avx512_body(10, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 9:
    avx512_body(9, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 8:
    avx512_body(8, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 7:
    avx512_body(7, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 6:
    avx512_body(6, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 5:
    avx512_body(5, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 4:
    avx512_body(4, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 3:
    avx512_body(3, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 2:
    avx512_body(2, kdim, arow, b, ldb, c, ldc, crow);
    break;
  case 1:
    avx512_body(1, kdim, arow, b, ldb, c, ldc, crow);
    break;
  default:
    break;
  }
  /* clang-format on */
}

VC_INLINE VC_AVX512 void avx512_pp_body(const int M, int64_t kdim,
                                        const float *const *ap, int64_t aoff,
                                        const float *const *bp, int64_t boff,
                                        float *c, int64_t ldc) {
  __m512 c0[AVX512_MR], c1[AVX512_MR];
#pragma GCC unroll 16
  for (int r = 0; r < M; r++) {
    c0[r] = _mm512_loadu_ps(c + r * ldc);
    c1[r] = _mm512_loadu_ps(c + r * ldc + 16);
  }
  for (int64_t p = 0; p < kdim; p++) {
    const float *a = ap[p] + aoff, *b = bp[p] + boff;
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
      const __m512 av = _mm512_set1_ps(a[r]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < M; r++) {
    _mm512_storeu_ps(c + r * ldc, c0[r]);
    _mm512_storeu_ps(c + r * ldc + 16, c1[r]);
  }
}

VC_AVX512 static void avx512_tile_pp(int m, int64_t kdim,
                                     const float *const *ap, int64_t aoff,
                                     const float *const *bp, int64_t boff,
                                     float *c, int64_t ldc) {
  /* clang-format off: one line per tile height */
  switch (m) {
  case 12:
    avx512_pp_body(12, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 11:
    avx512_pp_body(11, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 10:
    avx512_pp_body(10, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 9:
    avx512_pp_body(9, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 8:
    avx512_pp_body(8, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 7:
    avx512_pp_body(7, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 6:
    avx512_pp_body(6, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 5:
    avx512_pp_body(5, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 4:
    avx512_pp_body(4, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 3:
    avx512_pp_body(3, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 2:
    avx512_pp_body(2, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  case 1:
    avx512_pp_body(1, kdim, ap, aoff, bp, boff, c, ldc);
    break;
  default:
    break;
  }
  /* clang-format on */
}

static const vc_gemm_kernel_t k_avx512 = {"avx512", AVX512_MR, AVX512_NR,
                                          avx512_tile, avx512_tile_pp};

static int cpu_has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int cpu_has_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
static int cpu_has_f16c(void) {
  /* Not every compiler knows "f16c" for __builtin_cpu_supports: read the
   * CPUID bit; "avx" covers the OS saving the ymm state. */
  static atomic_int cached = -1; /* threads may race to fill it: same value */
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    __builtin_cpu_init();
    v = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) &&
        __builtin_cpu_supports("avx");
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}
#endif /* VC_X86 */

/* ---- selection ----------------------------------------------------------- */
int vc_cpu_gemm_available(const char **names, int max_names) {
  const vc_gemm_kernel_t *list[3];
  int n = 0;
  list[n++] = &k_portable;
#if VC_X86
  if (cpu_has_avx2())
    list[n++] = &k_avx2;
  if (cpu_has_avx512())
    list[n++] = &k_avx512;
#endif
  for (int i = 0; i < n && i < max_names; i++)
    names[i] = list[i]->name;
  return n;
}

const vc_gemm_kernel_t *vc_cpu_gemm_kernel_named(const char *name) {
  if (!name)
    return NULL;
  if (strcasecmp(name, "portable") == 0)
    return &k_portable;
#if VC_X86
  if (strcasecmp(name, "avx2") == 0 && cpu_has_avx2())
    return &k_avx2;
  if (strcasecmp(name, "avx512") == 0 && cpu_has_avx512())
    return &k_avx512;
#endif
  return NULL;
}

static const vc_gemm_kernel_t *best_kernel(void) {
#if VC_X86
  /* AVX-512 only pays when it doubles the vector width; on cores that
   * split 512-bit operations (AMD Zen 4) it still wins through its larger
   * register file (24 accumulators). */
  if (cpu_has_avx512())
    return &k_avx512;
  if (cpu_has_avx2())
    return &k_avx2;
#endif
  return &k_portable;
}

voxconv_status_t vc_cpu_gemm_select(const voxconv_handle_t *h, int64_t ncols,
                                    const vc_gemm_kernel_t **kernel) {
  const char *want = vc_getenv("VOXCONV_CPU_ISA");
  if (!want || strcasecmp(want, "auto") == 0) {
    *kernel = best_kernel();
#if VC_X86
    /* Narrow outputs (3 input channels in a dgrad, 48 columns, ...) waste
     * less of a 16-wide tile than of a 32-wide one. */
    if (*kernel == &k_avx512 && ncols > 0 && cpu_has_avx2()) {
      const int64_t pad512 = (ncols + AVX512_NR - 1) / AVX512_NR * AVX512_NR;
      const int64_t pad2 = (ncols + AVX2_NR - 1) / AVX2_NR * AVX2_NR;
      if (pad2 < pad512)
        *kernel = &k_avx2;
    }
#endif
    return VOXCONV_STATUS_SUCCESS;
  }
  *kernel = vc_cpu_gemm_kernel_named(want);
  if (*kernel)
    return VOXCONV_STATUS_SUCCESS;
  const char *names[4];
  const int n = vc_cpu_gemm_available(names, 4);
  char have[64] = "";
  for (int i = 0; i < n; i++) {
    strncat(have, names[i], sizeof have - strlen(have) - 1);
    if (i + 1 < n)
      strncat(have, ", ", sizeof have - strlen(have) - 1);
  }
  return vc_fail(h, VOXCONV_STATUS_INVALID_ARGUMENT,
                 "VOXCONV_CPU_ISA=%s: unknown or not supported by this CPU "
                 "(this CPU runs: auto, %s)",
                 want, have);
}

/* ---- element-wise accumulation ------------------------------------------ */
/* Separate multiply and add (never fused) in every variant, so the wider
 * variants give exactly the bits of the portable loop. */
static void mul_acc_portable(float *acc, const float *x, const float *w,
                             int64_t n) {
  for (int64_t e = 0; e < n; e++)
    acc[e] += x[e] * w[e];
}
static void add_acc_portable(float *acc, const float *x, int64_t n) {
  for (int64_t e = 0; e < n; e++)
    acc[e] += x[e];
}
#if VC_X86
__attribute__((target("avx"))) static void
mul_acc_avx(float *acc, const float *x, const float *w, int64_t n) {
  int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    _mm256_storeu_ps(acc + e,
                     _mm256_add_ps(_mm256_loadu_ps(acc + e),
                                   _mm256_mul_ps(_mm256_loadu_ps(x + e),
                                                 _mm256_loadu_ps(w + e))));
  for (; e < n; e++)
    acc[e] += x[e] * w[e];
}
__attribute__((target("avx"))) static void
add_acc_avx(float *acc, const float *x, int64_t n) {
  int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    _mm256_storeu_ps(acc + e, _mm256_add_ps(_mm256_loadu_ps(acc + e),
                                            _mm256_loadu_ps(x + e)));
  for (; e < n; e++)
    acc[e] += x[e];
}
static int cpu_has_avx(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx");
}
#endif

void vc_cpu_mul_acc(float *acc, const float *x, const float *w, int64_t n) {
#if VC_X86
  if (cpu_has_avx()) {
    mul_acc_avx(acc, x, w, n);
    return;
  }
#endif
  mul_acc_portable(acc, x, w, n);
}

void vc_cpu_add_acc(float *acc, const float *x, int64_t n) {
#if VC_X86
  if (cpu_has_avx()) {
    add_acc_avx(acc, x, n);
    return;
  }
#endif
  add_acc_portable(acc, x, n);
}

/* ---- conversions ------------------------------------------------------- */
#if VC_X86
__attribute__((target("avx,f16c"))) static void
load_f16_f16c(const uint16_t *src, int64_t n, float *dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  (const __m128i *)(const void *)(src + i))));
  for (; i < n; i++)
    dst[i] = vc_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void
store_f16_f16c(uint16_t *dst, int64_t n, const float *src) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        (__m128i *)(void *)(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; i++)
    dst[i] = vc_f32_to_f16(src[i]);
}
#endif

void vc_cpu_load_f32(const void *src, voxconv_dtype_t dtype, int64_t n,
                     float *dst) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    memcpy(dst, src, (size_t)n * sizeof(float));
    return;
  case VOXCONV_DTYPE_BF16: {
    /* bf16 is the top half of an f32: a shift, which vectorises. */
    const uint16_t *s = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i++) {
      const uint32_t u = (uint32_t)s[i] << 16;
      memcpy(&dst[i], &u, 4);
    }
    return;
  }
  case VOXCONV_DTYPE_F16:
#if VC_X86
    if (cpu_has_f16c()) {
      load_f16_f16c((const uint16_t *)src, n, dst);
      return;
    }
#endif
    vc_load_f32(src, dtype, n, dst);
    return;
  default:
    vc_load_f32(src, dtype, n, dst);
    return;
  }
}

void vc_cpu_store_f32(void *dst, voxconv_dtype_t dtype, int64_t n,
                      const float *src) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    memcpy(dst, src, (size_t)n * sizeof(float));
    return;
  case VOXCONV_DTYPE_BF16: {
    /* Round to nearest even on the bits; NaN becomes a quiet NaN. Written
     * branch-free so that it vectorises. */
    uint16_t *d = (uint16_t *)dst;
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, &src[i], 4);
      const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
      const uint32_t quiet = (u >> 16) | 0x40u;
      d[i] = (uint16_t)(((u & 0x7FFFFFFFu) > 0x7F800000u) ? quiet : rounded);
    }
    return;
  }
  case VOXCONV_DTYPE_F16:
#if VC_X86
    if (cpu_has_f16c()) {
      store_f16_f16c((uint16_t *)dst, n, src);
      return;
    }
#endif
    vc_store_f32(dst, dtype, n, src);
    return;
  default:
    vc_store_f32(dst, dtype, n, src);
    return;
  }
}
