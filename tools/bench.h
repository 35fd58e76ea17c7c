/* `voxconv bench`: times the network of BENCHMARKS.md workload A (and the
 * per-layer workload C and kernel-map workload D) through the public API,
 * on the CPU or a CUDA device, on a synthetic scene, a recorded scan or the
 * benchmark inputs. See vt_bench_usage for the options. */
#ifndef VOXCONV_TOOL_BENCH_H
#define VOXCONV_TOOL_BENCH_H

#include <stdio.h>

/* argv[0] is "bench". Returns a process exit code (tool_common.h). */
int vt_bench_main(int argc, char **argv);
void vt_bench_usage(FILE *out);
/* 1 if every algorithm named by an --algo value ("name", "[a,b]", "auto",
 * "all") is registered; otherwise 0 after saying on stderr which is not,
 * as "voxconv CMD: OPTION: ...", and listing the registry. */
int vt_bench_algo_known(const char *cmd, const char *option, const char *spec);
/* Convolutions the last vt_bench_main run tuned (benchmarked candidates
 * for, rather than reading the choice from the tuning cache). */
int vt_bench_tuned_count(void);

#endif
