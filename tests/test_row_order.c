/* The row order of a CUDA kernel map and its tile masks (cuda_row_order.cu:
 * what mask_gemm's row_order 1 and the int8 forward tile over), on the GPU
 * against a host restatement of the rule that file documents:
 *
 *   - offsets 0 .. b-1, b = min(kvol, 32), ordered stably by
 *     |dx| + |dy| + |dz|: bit j of a row's permuted mask is offset perm[j]
 *     of its neighbour bitmask; the row's key is the Gray-code rank of that
 *     mask (bit j = XOR of the mask's bits j and above);
 *   - rows sorted stably by key bits [lo, b): lo = 0 for b <= 16, else
 *     b - 16 up to 65,536 rows and b - 24 above;
 *   - tile mask t (kvol <= 32): the OR of the unpermuted bitmasks of rows
 *     order[128 t .. 128 t + 127].
 *
 * Both ways the library makes them are checked, bit for bit: the one-block
 * kernel (maps of at most 8,192 rows, the default) and the key kernel + CUB
 * sort + mask kernel (every size; VOXCONV_KMAP_LEAN=0 forces it), on maps
 * of 1 to 65,537 rows -- both sides of 512, 2,048, 8,192 and 65,536 --, for
 * submanifold 3^3 (dgrad shares the forward's order), 2^3 (each direction
 * its own), 5^3 (kvol 125: 32 key bits, no masks) and strided 2^3 maps
 * (n_in != n_out), with the order asked for alone and its masks later,
 * both at once, and both directions made ahead by voxconv_kmap_prepare
 * (then found, not made again, by the ops' way of asking). Fresh random
 * coordinates every run. */
#include "vc_test.h"

#include <stdlib.h>
#include <string.h>

#include "coords/vc_kmap.h"
#include "cuda/vc_cuda.h"

/* Defined by the CUDA backend only. A CUDA build references it strongly,
 * so that the linker takes its object from the static library (a weak
 * reference would not, and the test would skip); a CPU-only build weakly,
 * so that it links (the test then exits 77 before any use). */
#ifdef VC_TEST_CUDA_RUNTIME
#define HAVE_ROW_ORDER 1
#else
#pragma weak vc_cuda_row_order
#define HAVE_ROW_ORDER 0
#endif

static voxconv_handle_t *g_lean, *g_full; /* one-block kernel / CUB path */

/* ---- the host restatement --------------------------------------------- */
static int g_sort_lo; /* qsort has no context argument */
static const uint32_t *g_sort_key;

static int cmp_rows(const void *a, const void *b) {
  const int32_t ra = *(const int32_t *)a, rb = *(const int32_t *)b;
  const uint32_t ka = g_sort_key[ra] >> g_sort_lo,
                 kb = g_sort_key[rb] >> g_sort_lo;
  if (ka != kb)
    return ka < kb ? -1 : 1;
  return ra < rb ? -1 : (ra > rb); /* stable: by row */
}

static uint32_t row_bits(const int32_t *nbr, int64_t row, int kvol) {
  const int b = kvol < 32 ? kvol : 32;
  uint32_t m = 0;
  for (int k = 0; k < b; k++)
    if (nbr[row * kvol + k] >= 0)
      m |= 1u << k;
  return m;
}

/* order[n] by the keys of table key_nbr[n][kvol] and, for kvol <= 32,
 * masks[ceil(n / 128)] of table nbr[n][kvol] over that order (the two
 * tables differ where dgrad shares the forward's order) */
static void reference(const int32_t *key_nbr, const int32_t *nbr, int64_t n,
                      int kvol, const int32_t (*off)[3], int32_t *order,
                      uint32_t *masks) {
  const int b = kvol < 32 ? kvol : 32;
  int perm[32], cls[32];
  for (int k = 0; k < b; k++) {
    cls[k] = abs(off[k][0]) + abs(off[k][1]) + abs(off[k][2]);
    perm[k] = k;
  }
  for (int i = 1; i < b; i++) /* stable by class */
    for (int j = i; j > 0 && cls[perm[j - 1]] > cls[perm[j]]; j--) {
      const int t = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = t;
    }
  uint32_t *key = (uint32_t *)malloc((size_t)(n > 0 ? n : 1) * 4);
  for (int64_t r = 0; r < n; r++) {
    const uint32_t w = row_bits(key_nbr, r, kvol);
    uint32_t g = 0, acc = 0;
    for (int j = b - 1; j >= 0; j--) {
      acc ^= (w >> perm[j]) & 1u;
      g |= acc << j;
    }
    key[r] = g;
    order[r] = (int32_t)r;
  }
  g_sort_lo = b <= 16 ? 0 : b - (n <= 65536 ? 16 : 24);
  g_sort_key = key;
  qsort(order, (size_t)n, sizeof *order, cmp_rows);
  if (masks && kvol <= 32)
    for (int64_t t = 0; t * 128 < n; t++) {
      uint32_t m = 0;
      for (int64_t p = t * 128; p < n && p < t * 128 + 128; p++)
        m |= row_bits(nbr, order[p], kvol);
      masks[t] = m;
    }
  free(key);
}

/* ---- cases ---------------------------------------------------------------- */
static void *to_host(voxconv_handle_t *h, const void *dev, size_t bytes) {
  void *p = malloc(bytes > 0 ? bytes : 1);
  if (bytes > 0 && voxconv_memcpy(h, p, dev, bytes,
                                  VOXCONV_MEMCPY_BACKEND_TO_HOST) !=
                       VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(0, "copy to host: %s", voxconv_get_last_error(h));
    memset(p, 0xff, bytes);
  }
  return p;
}

/* One direction of map m on h: asks for the order (want_masks as given),
 * then compares it (and the masks, if asked) with the reference; with
 * `shared`, dgrad's order is the forward's (sorted by the forward table's
 * keys), its masks still dgrad's. Returns the order's device pointer. */
static const int32_t *check_direction(voxconv_handle_t *h, voxconv_kmap_t *m,
                                      int dgrad, int shared, int want_masks,
                                      const char *label) {
  const int64_t n = dgrad ? m->n_in : m->n_out;
  const int32_t *d_order = NULL;
  const uint32_t *d_mask = NULL;
  voxconv_status_t st =
      vc_cuda_row_order(h, m, dgrad, want_masks, &d_order, &d_mask);
  if (st == VOXCONV_STATUS_SUCCESS)
    st = voxconv_synchronize(h);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "%s: %s", label,
            voxconv_get_last_error(h));
  if (st != VOXCONV_STATUS_SUCCESS)
    return NULL;
  const int want = want_masks && m->kvol <= 32;
  VC_EXPECT(d_order != NULL && (d_mask != NULL) == want,
            "%s: order %p, masks %p (want masks: %d)", label,
            (const void *)d_order, (const void *)d_mask, want);
  if (!d_order || (want && !d_mask))
    return d_order;
  const int64_t tiles = (n + 127) / 128;
  int32_t *nbr = (int32_t *)to_host(h, dgrad ? m->nbr_in : m->nbr_out,
                                    (size_t)n * m->kvol * 4);
  int32_t *key_nbr = dgrad && shared ? (int32_t *)to_host(h, m->nbr_out,
                                                          (size_t)n * m->kvol * 4)
                                     : nbr;
  int32_t *got = (int32_t *)to_host(h, d_order, (size_t)n * 4);
  uint32_t *gmask = want ? (uint32_t *)to_host(h, d_mask, (size_t)tiles * 4) : NULL;
  int32_t *ref = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * 4);
  uint32_t *rmask = (uint32_t *)malloc((size_t)(tiles > 0 ? tiles : 1) * 4);
  reference(key_nbr, nbr, n, m->kvol, (const int32_t(*)[3])m->offsets, ref,
            want ? rmask : NULL);
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (got[i] != ref[i])
      bad = i;
  VC_EXPECT(bad < 0, "%s: %lld rows, order differs first at rank %lld: row "
            "%d, want %d", label, (long long)n, (long long)bad,
            bad < 0 ? 0 : got[bad], bad < 0 ? 0 : ref[bad]);
  bad = -1;
  for (int64_t t = 0; want && t < tiles && bad < 0; t++)
    if (gmask[t] != rmask[t])
      bad = t;
  VC_EXPECT(bad < 0, "%s: tile mask %lld is 0x%08x, want 0x%08x", label,
            (long long)bad, bad < 0 ? 0u : gmask[bad],
            bad < 0 ? 0u : rmask[bad]);
  if (key_nbr != nbr)
    free(key_nbr);
  free(nbr);
  free(got);
  free(gmask);
  free(ref);
  free(rmask);
  return d_order;
}

/* Exactly n unique random rows (a prefix of a larger sorted set: rows near
 * each other in space, so most have neighbours). */
static int32_t *exact_coords(int64_t n) {
  int extent = 2;
  while (2.0 * (2 * extent + 1) * (2 * extent + 1) * (2 * extent + 1) <
         2.5 * (double)n)
    extent++;
  for (;;) {
    int64_t got = 0;
    int32_t *c = vc_random_coords(2 * n + 8, extent, &got);
    if (got >= n)
      return c;
    free(c);
    extent++;
  }
}

static voxconv_kmap_t *build(voxconv_handle_t *h, const int32_t *coords,
                             int64_t n, voxconv_kmap_mode_t mode, int k,
                             int s) {
  voxconv_kmap_desc_t d = vc_test_kmap_desc(mode, k, k, k, s, 1);
  int32_t *dev = NULL;
  voxconv_kmap_t *m = NULL;
  if (voxconv_malloc(h, (size_t)n * 16, (void **)&dev) != VOXCONV_STATUS_SUCCESS ||
      voxconv_memcpy(h, dev, coords, (size_t)n * 16,
                     VOXCONV_MEMCPY_HOST_TO_BACKEND) != VOXCONV_STATUS_SUCCESS) {
    VC_EXPECT(0, "upload: %s", voxconv_get_last_error(h));
    voxconv_free(h, dev);
    return NULL;
  }
  voxconv_coords_t in = {dev, n, {1, 1, 1}};
  const voxconv_status_t st = vc_test_kmap_build(h, &d, &in, NULL, &m);
  VC_EXPECT(st == VOXCONV_STATUS_SUCCESS, "map %d^3 mode %d on %lld rows: %s",
            k, (int)mode, (long long)n, voxconv_get_last_error(h));
  voxconv_synchronize(h);
  voxconv_free(h, dev);
  return st == VOXCONV_STATUS_SUCCESS ? m : NULL;
}

static int g_small_runs, g_cub_runs; /* directions checked on each path */

static void map_case(voxconv_handle_t *h, const char *path,
                     const int32_t *coords, int64_t n,
                     voxconv_kmap_mode_t mode, int k, int s) {
  char label[160];
  static const char *const variants[3] = {
      "order and masks at once", "order alone, then masks",
      "prepared by voxconv_kmap_prepare"};
  for (int variant = 0; variant < 3; variant++) {
    voxconv_kmap_t *m = build(h, coords, n, mode, k, s);
    if (!m)
      return;
    const int shares = mode == VOXCONV_KMAP_SUBMANIFOLD && (k & 1);
    /* variant 2: both directions' orders and masks (and the pair lists)
     * made ahead; the checks below must find them, not make them */
    const int32_t *prepared[2] = {NULL, NULL};
    if (variant == 2) {
      voxconv_status_t st = voxconv_kmap_prepare(
          h, m,
          VOXCONV_PREPARE_FORWARD | VOXCONV_PREPARE_DGRAD |
              VOXCONV_PREPARE_PAIRS);
      if (st == VOXCONV_STATUS_SUCCESS)
        st = voxconv_synchronize(h);
      const int masks = m->kvol <= 32;
      VC_EXPECT(st == VOXCONV_STATUS_SUCCESS && m->row_order_out &&
                    m->row_order_in && m->in_rows && m->out_rows &&
                    (!masks || (m->tile_mask_out && m->tile_mask_in)),
                "%s, %d^3 mode %d, %lld rows: prepare: %s; order %p / %p, "
                "masks %p / %p, pairs %p",
                path, k, (int)mode, (long long)n, voxconv_get_last_error(h),
                (const void *)m->row_order_out, (const void *)m->row_order_in,
                (const void *)m->tile_mask_out, (const void *)m->tile_mask_in,
                (const void *)m->in_rows);
      prepared[0] = m->row_order_out;
      prepared[1] = m->row_order_in;
    }
    for (int dgrad = 0; dgrad < 2; dgrad++) {
      const int64_t rows = dgrad ? m->n_in : m->n_out;
      snprintf(label, sizeof label, "%s, %s %d^3 s%d, %lld rows, %s, %s",
               path, mode == VOXCONV_KMAP_SUBMANIFOLD ? "submanifold" : "strided",
               k, s, (long long)rows, dgrad ? "dgrad" : "forward",
               variants[variant]);
      /* variant 1: the order alone first (im2col's way), masks later; in
       * variant 0 that way round for dgrad, so both directions see both */
      const int alone_first = variant < 2 && (variant ^ dgrad);
      const int32_t *o1 = NULL;
      if (alone_first)
        o1 = check_direction(h, m, dgrad, shares, 0, label);
      const int32_t *o2 = check_direction(h, m, dgrad, shares, 1, label);
      VC_EXPECT(!alone_first || o1 == o2,
                "%s: the order was made twice (%p, then %p)", label,
                (const void *)o1, (const void *)o2);
      VC_EXPECT(variant < 2 || o2 == prepared[dgrad],
                "%s: the prepared order was not used (%p, then %p)", label,
                (const void *)prepared[dgrad], (const void *)o2);
      if (dgrad && shares)
        VC_EXPECT(m->row_order_in == m->row_order_out,
                  "%s: dgrad did not share the forward's order", label);
      if (!(dgrad && shares)) {
        if (h == g_lean && rows > 0 && rows <= 8192)
          g_small_runs++;
        else
          g_cub_runs++;
      }
    }
    voxconv_kmap_destroy(h, m);
  }
}

int main(void) {
  vc_test_init("test_row_order");
  int ndev = 0;
  voxconv_device_count(&ndev);
  if (!voxconv_has_cuda() || ndev == 0 || !HAVE_ROW_ORDER) {
    printf("test_row_order: SKIPPED: no CUDA device (built with CUDA: %d)\n",
           voxconv_has_cuda());
    return VC_TEST_SKIP;
  }
  voxconv_handle_desc_t dg = {0};
  dg.backend = VOXCONV_BACKEND_CUDA;
  VC_REQUIRE_OK(NULL, voxconv_create(&g_lean, &dg));
  setenv("VOXCONV_KMAP_LEAN", "0", 1); /* read at handle creation */
  const voxconv_status_t st = voxconv_create(&g_full, &dg);
  unsetenv("VOXCONV_KMAP_LEAN");
  VC_REQUIRE_OK(NULL, st);

  /* the one-block kernel's three block sizes end at 512, 2,048 and 8,192
   * rows; the key's low bits are dropped above 65,536 */
  static const int64_t sizes[] = {1,    2,    300,  512,  513,   2048,  2049,
                                  5000, 8191, 8192, 8193, 20000, 65536, 65537};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    const int64_t n = sizes[i];
    int32_t *c = exact_coords(n);
    for (int p = 0; p < 2; p++) {
      voxconv_handle_t *h = p ? g_full : g_lean;
      const char *path = p ? "CUB path" : "default";
      map_case(h, path, c, n, VOXCONV_KMAP_SUBMANIFOLD, 3, 1);
      map_case(h, path, c, n, VOXCONV_KMAP_SUBMANIFOLD, 2, 1);
      if (n <= 20000) /* 125 offsets a row: the larger sets add nothing */
        map_case(h, path, c, n, VOXCONV_KMAP_SUBMANIFOLD, 5, 1);
      map_case(h, path, c, n, VOXCONV_KMAP_STRIDED, 2, 2);
    }
    free(c);
  }
  printf("test_row_order: %d directions on the one-block kernel, %d on the "
         "CUB path\n", g_small_runs, g_cub_runs);
  VC_EXPECT(g_small_runs >= 40 && g_cub_runs >= 40,
            "too few directions ran: %d one-block, %d CUB", g_small_runs,
            g_cub_runs);
  voxconv_destroy(g_lean);
  voxconv_destroy(g_full);
  return vc_test_finish();
}
