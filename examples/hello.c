/* The README's C example, built and run by ctest (example_hello) so the
 * README stays true; readme_example checks that the two are identical. */
#include <voxconv.h>
#include <stdio.h>

int main(void) {
  /* A CPU handle: the arrays below are host memory. A CUDA handle takes
   * device memory (voxconv_malloc, voxconv_memcpy) for every array. */
  voxconv_handle_desc_t cpu = {.backend = VOXCONV_BACKEND_CPU};
  voxconv_handle_t *h;
  if (voxconv_create(&h, &cpu) != VOXCONV_STATUS_SUCCESS) return 1;
  int32_t coords[3][4] = {{0, 0, 0, 0}, {0, 1, 0, 0}, {0, 5, 5, 5}};
  float x[3][2] = {{1, 2}, {3, 4}, {5, 6}}, y[3][4], w[27][2][4];
  for (int i = 0; i < 27 * 2 * 4; i++) ((float *)w)[i] = 0.01f * i;
  voxconv_coords_t in = {&coords[0][0], 3, {1, 1, 1}};
  voxconv_kmap_desc_t geo = {.mode = VOXCONV_KMAP_SUBMANIFOLD, .kernel_size = {3, 3, 3}};
  voxconv_kmap_t *map;
  voxconv_status_t st = voxconv_kmap_build(h, &geo, &in, NULL, &map);
  voxconv_feats_t fx = {x, 3, 2, VOXCONV_DTYPE_F32}, fy = {y, 3, 4, VOXCONV_DTYPE_F32};
  voxconv_weights_t fw = {w, 27, 2, 4, VOXCONV_DTYPE_F32};
  if (st == VOXCONV_STATUS_SUCCESS)
    st = voxconv_conv_forward(h, map, &fx, &fw, &fy, NULL);
  if (st != VOXCONV_STATUS_SUCCESS)
    fprintf(stderr, "%s: %s\n", voxconv_status_string(st), voxconv_get_last_error(h));
  else
    printf("y[0] = %g %g %g %g\n", y[0][0], y[0][1], y[0][2], y[0][3]);
  voxconv_kmap_destroy(h, map);
  voxconv_destroy(h);
  return st != VOXCONV_STATUS_SUCCESS;
}
