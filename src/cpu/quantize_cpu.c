/* Per-tensor float <-> int8 feature conversion on the CPU
 * (voxconv_quantize / voxconv_dequantize; voxconv.h gives the rounding).
 * Element-wise, threaded over chunks of the flat tensor; every element
 * sees the same operations whatever the chunking, so thread counts do not
 * change the bits. */
#include "vc_cpu.h"

#include "../core/vc_core.h"

/* elements per task, and per stack buffer of one conversion step */
#define VC_Q_GRAIN ((int64_t)1 << 16)
#define VC_Q_BUF 512

typedef struct q_ctx {
  const void *x;
  void *y;
  voxconv_dtype_t fdt; /* the float side's dtype */
  size_t fsz;          /* its element size */
  float scale;
  int dequantize;
} q_ctx_t;

static void q_task(void *vctx, int64_t b0, int64_t b1, int tid) {
  (void)tid;
  const q_ctx_t *c = (const q_ctx_t *)vctx;
  float buf[VC_Q_BUF];
  for (int64_t i = b0; i < b1; i += VC_Q_BUF) {
    const int64_t n = b1 - i < VC_Q_BUF ? b1 - i : VC_Q_BUF;
    if (!c->dequantize) {
      int8_t *y = (int8_t *)c->y + i;
      vc_load_f32((const char *)c->x + (size_t)i * c->fsz, c->fdt, n, buf);
      for (int64_t j = 0; j < n; j++)
        y[j] = vc_i8_requantize(buf[j], c->scale);
    } else {
      const int8_t *x = (const int8_t *)c->x + i;
      for (int64_t j = 0; j < n; j++)
        buf[j] = c->scale * (float)x[j]; /* one binary32 product */
      vc_store_f32((char *)c->y + (size_t)i * c->fsz, c->fdt, n, buf);
    }
  }
}

voxconv_status_t vc_cpu_quantize(voxconv_handle_t *h, int dequantize,
                                 const voxconv_feats_t *x, float scale,
                                 const voxconv_feats_t *y) {
  q_ctx_t c;
  c.x = x->data;
  c.y = y->data;
  c.fdt = dequantize ? y->dtype : x->dtype;
  c.fsz = voxconv_dtype_size(c.fdt);
  c.scale = scale;
  c.dequantize = dequantize;
  return vc_parallel_for(h, x->rows * x->channels, VC_Q_GRAIN, q_task, &c);
}
