/* `voxconv bench`'s report: the per-layer table and totals for people,
 * the JSON record for scripts (torch_bench, the tool tests). */
#include "bench_state.h"

#include "tool_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double bench_median(const double *v, int n) {
  double *s = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!s || n <= 0) {
    free(s);
    return 0.0;
  }
  memcpy(s, v, (size_t)n * sizeof(double));
  for (int i = 1; i < n; i++) /* n is small: insertion sort */
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      const double t = s[j];
      s[j] = s[j - 1];
      s[j - 1] = t;
    }
  const double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

double bench_min_of(const double *v, int n) {
  double m = n > 0 ? v[0] : 0.0;
  for (int i = 1; i < n; i++)
    if (v[i] < m)
      m = v[i];
  return m;
}

int bench_forward_only(const bench_t *B) {
  return B->dtype == VOXCONV_DTYPE_I8;
}

/* ---- reporting ----------------------------------------------------------- */

static const char *backend_name(voxconv_backend_t b) {
  return b == VOXCONV_BACKEND_CUDA ? "cuda" : "cpu";
}

/* How the end-to-end forward builds its maps (NULL: no network run). */
static const char *maps_schedule(const bench_t *B) {
  if (B->o.workload == 'C' || B->o.workload == 'D')
    return NULL;
  return B->hm ? "overlap" : B->backend == VOXCONV_BACKEND_CUDA ? "serial"
                                                                : "inline";
}

static double row_rate(const row_t *r, double ms) {
  return ms > 0 ? r->flops / (ms * 1e-3) : 0.0; /* FLOP/s */
}

void bench_print_human(const bench_t *B, FILE *f) {
  const int cuda = B->backend == VOXCONV_BACKEND_CUDA;
  fprintf(f, "voxconv bench %s (library %s)\n", VOXCONV_VERSION_STRING,
          voxconv_version_string());
  fprintf(f, "backend   : %s\n", B->device_name);
  fprintf(f, "dtype     : %s; algo: %s%s%s\n", voxconv_dtype_name(B->dtype),
          B->o.algo ? B->o.algo : "default (auto)",
          B->o.deterministic ? "; deterministic" : "",
          B->o.fp16_accum == 1   ? "; fp16 accumulators on"
          : B->o.fp16_accum == 0 ? "; fp16 accumulators off"
                                 : "");
  fprintf(f, "input     : %s\n", B->input_desc);
  fprintf(f, "voxels    : %lld\n", (long long)B->n_voxels);
  fprintf(f, "timing    : median of %d run%s after %d warm-up%s; %s\n",
          B->repeat, B->repeat == 1 ? "" : "s", B->warmup,
          B->warmup == 1 ? "" : "s",
          cuda ? "rows: CUDA events around each op (voxconv_timer_*); "
                 "totals: separate end-to-end runs, one event pair"
               : "CPU monotonic clock");
  if (cuda && B->settle_ms > 0)
    fprintf(f, "            %d ms idle after a warm-up in which the autotuner "
               "ran (--settle-ms)\n", B->settle_ms);
  if (cuda && maps_schedule(B))
    fprintf(f, "maps      : %s%s\n", maps_schedule(B),
            B->hm ? (B->o.map_normal
                         ? " (end-to-end forward: maps built on a second "
                           "stream, normal priority, while the previous "
                           "convolutions run; rows in line)"
                         : " (end-to-end forward: maps built on a second "
                           "stream, high priority, while the previous "
                           "convolutions run; rows in line)")
                  : " (on the convolutions' stream)");
  if (cuda)
    fprintf(f,
            "ceilings  : %.0f TFLOP/s, %.2f TB/s%s\n",
            B->peak_flops / 1e12, B->peak_bw / 1e12,
            (B->o.peak_tflops > 0 || B->o.peak_tbps > 0)
                ? " (from --peak-tflops/--peak-tbps)"
                : " = ceilings of the H200 (BENCHMARKS.md), not necessarily "
                  "this device's");
  fprintf(f, "\n%-14s %-14s %21s %11s %11s %10s %10s%s\n", "layer", "op",
          "N_in -> N_out", "Cin->Cout", "pairs", "ms",
          cuda ? "TFLOP/s" : "GFLOP/s", cuda ? "  %peak  %roof" : "");
  for (int i = 0; i < B->n_rows; i++) {
    const row_t *r = &B->rows[i];
    const double ms = bench_median(r->ms, B->repeat);
    char nn[48], cc[24], rate[24] = "-", pct[32] = "";
    snprintf(nn, sizeof nn, "%lld -> %lld", (long long)r->n_in,
             (long long)r->n_out);
    if (r->cin)
      snprintf(cc, sizeof cc, "%lld->%lld", (long long)r->cin,
               (long long)r->cout);
    else
      snprintf(cc, sizeof cc, "-");
    if (r->flops > 0)
      snprintf(rate, sizeof rate, cuda ? "%.2f" : "%.1f",
               row_rate(r, ms) / (cuda ? 1e12 : 1e9));
    if (cuda && ms > 0) {
      const double t_floor =
          fmax(r->flops / B->peak_flops, r->bytes / B->peak_bw);
      if (r->flops > 0)
        snprintf(pct, sizeof pct, "  %5.1f  %5.1f",
                 100.0 * row_rate(r, ms) / B->peak_flops,
                 100.0 * t_floor / (ms * 1e-3));
      else
        snprintf(pct, sizeof pct, "      -  %5.1f",
                 100.0 * t_floor / (ms * 1e-3));
    }
    fprintf(f, "%-14s %-14s %21s %11s %11lld %10.3f %10s%s\n", r->name, r->op,
            nn, cc, (long long)r->pairs, ms, rate, pct);
    if (B->fwd_total && i + 1 < B->n_rows &&
        r->phase != B->rows[i + 1].phase)
      fprintf(f, "\n"); /* forward block, then backward block */
  }
  double fl[2] = {0, 0}, sum[2] = {0, 0};
  for (int i = 0; i < B->n_rows; i++) {
    fl[B->rows[i].phase] += B->rows[i].flops;
    sum[B->rows[i].phase] += bench_median(B->rows[i].ms, B->repeat);
  }
  fprintf(f, "\n");
  if (B->fwd_total) {
    const double fm = bench_median(B->fwd_total, B->repeat);
    const double bm = bench_median(B->bwd_total, B->repeat);
    const double unit = cuda ? 1e12 : 1e9;
    const char *uname = cuda ? "TFLOP/s" : "GFLOP/s";
    fprintf(f,
            "forward  : %10.3f ms (min %.3f; layer rows sum %.3f), %.3g "
            "GFLOP useful, %.2f %s\n",
            fm, bench_min_of(B->fwd_total, B->repeat), sum[0], fl[0] / 1e9,
            fm > 0 ? fl[0] / (fm * 1e-3) / unit : 0.0, uname);
    if (bench_forward_only(B))
      fprintf(f, "backward : none (--dtype i8 is inference)\n");
    else
      fprintf(f,
              "backward : %10.3f ms (min %.3f; layer rows sum %.3f), %.3g "
              "GFLOP useful, %.2f %s\n",
              bm, bench_min_of(B->bwd_total, B->repeat), sum[1], fl[1] / 1e9,
              bm > 0 ? fl[1] / (bm * 1e-3) / unit : 0.0, uname);
    if (B->fb_total)
      fprintf(f,
              "fwd+bwd  : %10.3f ms (min %.3f) back to back, one pair of "
              "events (the two series above sum to %.3f)\n",
              bench_median(B->fb_total, B->repeat), bench_min_of(B->fb_total, B->repeat),
              fm + bm);
  } else if (B->o.workload == 'C' && bench_forward_only(B)) {
    for (int i = 0; i < B->n_rows; i++)
      fprintf(f, "%-8s: forward %.3f ms\n", B->rows[i].name,
              bench_median(B->rows[i].ms, B->repeat));
  } else if (B->o.workload == 'C') {
    for (int i = 0; i + 3 < B->n_rows; i += 4)
      fprintf(f,
              "%-8s: forward %.3f ms, fwd+bwd %.3f ms back to back (the "
              "three rows sum to %.3f)\n",
              B->rows[i].name, bench_median(B->rows[i].ms, B->repeat),
              bench_median(B->rows[i + 3].ms, B->repeat),
              bench_median(B->rows[i].ms, B->repeat) +
                  bench_median(B->rows[i + 1].ms, B->repeat) +
                  bench_median(B->rows[i + 2].ms, B->repeat));
  } else if (B->o.workload == 'D' && B->n_rows) {
    fprintf(f, "kernel map: %.3f ms (min %.3f) for %lld voxels, %lld pairs\n",
            bench_median(B->rows[0].ms, B->repeat), bench_min_of(B->rows[0].ms, B->repeat),
            (long long)B->rows[0].n_in, (long long)B->rows[0].pairs);
  }
}

void bench_print_json(const bench_t *B, FILE *f) {
  const int cuda = B->backend == VOXCONV_BACKEND_CUDA;
  fprintf(f, "{\n  \"tool\": \"voxconv bench\",\n  \"version\": ");
  vt_json_string(f, voxconv_version_string());
  fprintf(f, ",\n  \"backend\": \"%s\",\n  \"device\": ",
          backend_name(B->backend));
  vt_json_string(f, B->device_name);
  fprintf(f, ",\n  \"dtype\": \"%s\",\n  \"algo\": ",
          voxconv_dtype_name(B->dtype));
  vt_json_string(f, B->o.algo ? B->o.algo : "auto");
  fprintf(f, ",\n  \"deterministic\": %s,\n",
          B->o.deterministic ? "true" : "false");
  if (B->o.threads)
    fprintf(f, "  \"threads\": %d,\n", B->o.threads);
  if (B->o.workload)
    fprintf(f, "  \"workload\": \"%c\",\n", B->o.workload);
  else
    fprintf(f, "  \"workload\": \"network-A\",\n");
  fprintf(f, "  \"input\": {\"kind\": ");
  vt_json_string(f, B->input_kind);
  fprintf(f, ", \"description\": ");
  vt_json_string(f, B->input_desc);
  fprintf(f, ", \"points\": %lld, \"voxels\": %lld, \"voxel_size\": %g},\n",
          (long long)B->n_points, (long long)B->n_voxels, B->voxel_size);
  fprintf(f, "  \"repeat\": %d,\n  \"warmup\": %d,\n", B->repeat, B->warmup);
  /* absent in older results: no rest after a tuning warm-up then */
  fprintf(f, "  \"settle_ms\": %d,\n", B->settle_ms);
  if (B->o.pass_idle_ms > 0) /* absent: no idle between workload C passes */
    fprintf(f, "  \"pass_idle_ms\": %d,\n", B->o.pass_idle_ms);
  if (B->o.pass_preheat_ms > 0) /* absent: no preheat */
    fprintf(f, "  \"pass_preheat_ms\": %d,\n", B->o.pass_preheat_ms);
  /* How the times were taken (results recorded before this key existed
   * used the host clock with a synchronize after each op). */
  fprintf(f, "  \"clock\": \"%s\",\n", cuda ? "cuda_events" : "monotonic");
  if (maps_schedule(B)) /* absent in older results: "serial" then */
    fprintf(f, "  \"maps\": \"%s\",\n", maps_schedule(B));
  if (B->hm) /* absent in older results: "normal" then */
    fprintf(f, "  \"map_priority\": \"%s\",\n",
            B->o.map_normal ? "normal" : "high");
  if (cuda)
    fprintf(f,
            "  \"ceilings\": {\"tflops\": %g, \"tbps\": %g, \"source\": "
            "\"%s\"},\n",
            B->peak_flops / 1e12, B->peak_bw / 1e12,
            (B->o.peak_tflops > 0 || B->o.peak_tbps > 0)
                ? "command line"
                : "H200, BENCHMARKS.md");
  fprintf(f, "  \"layers\": [\n");
  double fl[2] = {0, 0};
  for (int i = 0; i < B->n_rows; i++) {
    const row_t *r = &B->rows[i];
    const double ms = bench_median(r->ms, B->repeat);
    fl[r->phase] += r->flops;
    fprintf(f, "    {\"layer\": ");
    vt_json_string(f, r->name);
    fprintf(f,
            ", \"op\": \"%s\", \"phase\": \"%s\", \"n_in\": %lld, \"n_out\": "
            "%lld, \"cin\": %lld, \"cout\": %lld, \"pairs\": %lld, \"ms\": "
            "%.6g, \"ms_min\": %.6g, \"flops\": %.6g, \"gflops_per_s\": %.6g",
            r->op, r->phase ? "backward" : "forward", (long long)r->n_in,
            (long long)r->n_out, (long long)r->cin, (long long)r->cout,
            (long long)r->pairs, ms, bench_min_of(r->ms, B->repeat), r->flops,
            row_rate(r, ms) / 1e9);
    if (cuda && ms > 0) {
      const double t_floor =
          fmax(r->flops / B->peak_flops, r->bytes / B->peak_bw);
      fprintf(f, ", \"pct_peak_flops\": %.4g, \"pct_roofline\": %.4g",
              100.0 * row_rate(r, ms) / B->peak_flops,
              100.0 * t_floor / (ms * 1e-3));
    }
    /* Every timed run, in order: a drift across the runs (clocks settling
     * after the tuner's burst) shows here and not in the median. */
    fprintf(f, ", \"runs_ms\": [");
    for (int k = 0; k < B->repeat; k++)
      fprintf(f, "%s%.6g", k ? ", " : "", r->ms[k]);
    fprintf(f, "]}%s\n", i + 1 < B->n_rows ? "," : "");
  }
  fprintf(f, "  ]");
  if (B->fwd_total) {
    const double fm = bench_median(B->fwd_total, B->repeat);
    const double bm = bench_median(B->bwd_total, B->repeat);
    fprintf(f, ",\n  \"forward_ms\": %.6g,\n  \"forward_ms_min\": %.6g,\n",
            fm, bench_min_of(B->fwd_total, B->repeat));
    if (bench_forward_only(B)) /* --dtype i8: no backward */
      fprintf(f, "  \"backward_ms\": null,\n  \"backward_ms_min\": null,\n");
    else
      fprintf(f, "  \"backward_ms\": %.6g,\n  \"backward_ms_min\": %.6g,\n",
              bm, bench_min_of(B->bwd_total, B->repeat));
    fprintf(f,
            "  \"forward_gflop\": %.6g,\n  \"backward_gflop\": %.6g,\n"
            "  \"forward_runs_ms\": [",
            fl[0] / 1e9, fl[1] / 1e9);
    for (int i = 0; i < B->repeat; i++)
      fprintf(f, "%s%.6g", i ? ", " : "", B->fwd_total[i]);
    fprintf(f, "],\n  \"backward_runs_ms\": [");
    for (int i = 0; i < B->repeat && !bench_forward_only(B); i++)
      fprintf(f, "%s%.6g", i ? ", " : "", B->bwd_total[i]);
    fprintf(f, "]");
    if (B->out_hash_runs)
      fprintf(f,
              ",\n  \"forward_output_fnv1a\": \"%016llx\",\n"
              "  \"forward_output_same_every_run\": %s",
              (unsigned long long)B->out_hash,
              B->out_hash_differs ? "false" : "true");
    if (B->fb_total) {
      fprintf(f, ",\n  \"fwd_bwd_ms\": %.6g,\n  \"fwd_bwd_runs_ms\": [",
              bench_median(B->fb_total, B->repeat));
      for (int i = 0; i < B->repeat; i++)
        fprintf(f, "%s%.6g", i ? ", " : "", B->fb_total[i]);
      fprintf(f, "]");
    }
  } else if (B->o.workload == 'D' && B->n_rows) {
    fprintf(f, ",\n  \"kmap_ms\": %.6g,\n  \"pairs\": %lld",
            bench_median(B->rows[0].ms, B->repeat), (long long)B->rows[0].pairs);
  }
  fprintf(f, "\n}\n");
}

