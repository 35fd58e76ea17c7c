/* `voxconv bench`'s state, shared by the runner (bench.c) and its report
 * (bench_report.c): the parsed options, the network's levels and buffers,
 * the timed rows and end-to-end totals. Private to the tool. */
#ifndef VOXCONV_TOOL_BENCH_STATE_H
#define VOXCONV_TOOL_BENCH_STATE_H

#include "tool_options.h"

#include <stdint.h>
#include <stdio.h>

#include <voxconv.h>

#define NET_LEVELS 7
#define MAX_ROWS 128
#define MAX_ALLOCS 256

typedef enum input_kind {
  INPUT_SYNTHETIC = 0,
  INPUT_SCAN,
  INPUT_WORKLOAD_A,
  INPUT_WORKLOAD_B
} input_kind_t;

/* The parsed options (tool_options.h: parsing lives there, apart from
 * running, so that it can be fuzzed on its own). */
typedef vt_bench_opts_t bench_opts_t;

typedef struct row {
  char name[40];
  char op[24];
  int phase; /* 0 forward, 1 backward */
  int64_t n_in, n_out, cin, cout, pairs;
  double flops; /* useful: 2 * pairs * cin * cout for convolutions */
  double bytes; /* compulsory traffic (each tensor read/written once) */
  double *ms;   /* [repeat] */
} row_t;

typedef struct net_level {
  int64_t n, cin, c;
  int64_t pairs_subm, pairs_pool, n_next;
  void *x; /* level input [n][cin]: the features, or the previous pool out */
  void *a, *b;
  void *w1, *w2, *dw1, *dw2;
  void *gx, *ga, *gb;
  /* --dtype i8: the weights' scales as per-channel device arrays [c] */
  void *ws1, *ws2;
  voxconv_kmap_t *subm, *pool;
} net_level_t;

typedef struct bench {
  bench_opts_t o;
  voxconv_handle_t *h;
  /* --maps overlap on CUDA: the handle and stream the end-to-end forward
   * builds its kernel maps on (NULL otherwise). */
  voxconv_handle_t *hm;
  void *map_stream;
  /* ... and the handle and stream that prepare each submanifold map
   * (voxconv_kmap_prepare) once built: a third stream, so that the sorts
   * do not delay the map stream's next builds (the pool map's count, which
   * the host waits for; item 130). */
  voxconv_handle_t *hp;
  void *prep_stream;
  /* ... and the handle and stream of the pooled levels' strided maps,
   * built deferred (voxconv_kmap_build_bounded, defer = 1) right after the
   * level's convolutions are queued: on a stream of their own they do not
   * queue behind the level's submanifold build, and the host waits for a
   * pool map's count only once it has queued the level's convolutions
   * (item 141). */
  voxconv_handle_t *hq;
  void *pool_stream;
  voxconv_backend_t backend;
  char device_name[300];
  int n_threads_shown;
  voxconv_dtype_t dtype;
  size_t esize;
  /* --dtype i8 (inference: forward only): every activation's scale, the
   * input features' (the benchmark's weights keep magnitudes, so each
   * conv's output gets its input's scale and pooling keeps it) */
  float act_scale;
  int repeat, warmup;
  int settle_ms;
  int warming; /* in a warm-up run (not in the timed ones) */
  /* What an overlapped forward prepares of each submanifold map on
   * prep_stream (voxconv_kmap_prepare): the forward's row order, and for a
   * forward + backward also dgrad's and the pair lists; 0 with
   * VOXCONV_MAP_PREPARE=0. */
  unsigned prepare;
  int tuned;   /* an op of the current warm-up ran the autotuner */
  voxconv_conv_options_t conv_opt;
  FILE *human; /* table destination, NULL when quiet */
  /* input */
  char input_desc[10240]; /* holds paths of up to 4096 bytes */
  char input_kind[32];
  int64_t n_points, n_voxels;
  double voxel_size;
  int32_t *coords; /* backend [n][4] */
  void *feats;     /* backend [n][3] dtype */
  /* The level-0 rows' bounds when the input's voxelization had a grid
   * (batch 0, [0, grid) per axis): level 0's strided build sorts compact
   * keys with them, as the pooled levels do with their maps' bounds */
  voxconv_coords_bounds_t in_bounds;
  int has_in_bounds;
  /* network */
  net_level_t lv[NET_LEVELS];
  row_t rows[MAX_ROWS];
  int n_rows;
  double *fwd_total, *bwd_total; /* [repeat] end-to-end */
  /* [repeat] forward then backward between one pair of events (CUDA,
   * training networks): what a training step runs, and what PyTorch's
   * forward + backward row times (docs/perf-notes.md item 112) */
  double *fb_total;
  /* FNV-1a of the network's output (the last level's features) after each
   * end-to-end forward: equal across runs and --maps overlap / serial when
   * the ops are deterministic (--deterministic, or int8's exact sums) */
  uint64_t out_hash;
  int out_hash_runs, out_hash_differs;
  /* Timers in flight (see clock_start), freed by bench_cleanup when a call
   * between start and stop fails. */
  voxconv_timer_t *t_op, *t_total;
  double peak_flops, peak_bw;
  void *allocs[MAX_ALLOCS];
  int n_allocs;
  size_t bytes_allocated;
} bench_t;

/* The median / least of n values (0 when n <= 0). */
double bench_median(const double *v, int n);
double bench_min_of(const double *v, int n);
/* --dtype i8 is inference: no backward rows or runs. */
int bench_forward_only(const bench_t *B);
/* The result table (stderr or a file) and the JSON record (stdout). */
void bench_print_human(const bench_t *B, FILE *f);
void bench_print_json(const bench_t *B, FILE *f);

#endif
