/* voxconv: the command-line tool. Subcommands:
 *   info [--algos | --kernels]   version, backends, devices, algorithm
 *                    registry, or the compiled GPU kernel variants
 *   bench ...        network / layer / kernel-map benchmarks (bench.c)
 *   tune ...         autotuning (tools/cache_cmd.c, when built in)
 *   cache ...        the persistent tuning cache (tools/cache_cmd.c)
 * Uses only the public header. Exit codes: 0 ok, 1 failure, 2 usage. */
#include "bench.h"
#include "tool_common.h"

/* Provided by tools/cache_cmd.c when that file is part of the build; weak so
 * that the tool links (and says so at run time) without it. */
int vc_tool_cache_main(int argc, char **argv) __attribute__((weak));
int vc_tool_tune_main(int argc, char **argv) __attribute__((weak));

static void usage(FILE *out) {
  fprintf(out,
          "usage: voxconv <command> [options]\n"
          "\n"
          "commands:\n"
          "  info [--algos | --kernels]\n"
          "                   library version, backends, devices; --algos lists\n"
          "                   the algorithm registry, --kernels the GPU tiles\n"
          "                   (registers, shared memory, occupancy)\n"
          "  bench [...]      benchmark the workload-A network (and workloads\n"
          "                   A-D of BENCHMARKS.md); see `voxconv bench --help`\n"
          "  tune [...]       autotune a network's convolutions\n"
          "  cache [...]      inspect or edit the tuning cache\n"
          "  help             this text\n"
          "  version          print the version\n");
}

static const char *backend_str(voxconv_backend_t b) {
  switch (b) {
  case VOXCONV_BACKEND_CPU:
    return "cpu";
  case VOXCONV_BACKEND_CUDA:
    return "cuda";
  default:
    return "auto";
  }
}

static void pass_list(unsigned passes, char *out, size_t len) {
  static const char *const names[VOXCONV_PASS_COUNT] = {
      "fwd", "dgrad", "wgrad", "dw_fwd", "dw_dgrad", "dw_wgrad"};
  out[0] = '\0';
  for (int p = 0; p < VOXCONV_PASS_COUNT; p++)
    if (passes & (1u << p)) {
      if (out[0])
        strncat(out, ",", len - strlen(out) - 1);
      strncat(out, names[p], len - strlen(out) - 1);
    }
  if (!out[0])
    snprintf(out, len, "-");
}

/* `voxconv info --kernels`: the compiled GPU kernel variants with the
 * resources the device reports (registers, shared memory, occupancy) and
 * whether each fits the device's shared memory per block ("fits" no: the
 * tuner never picks that tile on this GPU). */
static int print_kernels(int json) {
  int n_dev = 0;
  if (voxconv_device_count(&n_dev) != VOXCONV_STATUS_SUCCESS || n_dev == 0) {
    if (json)
      printf("{\"kernels\": []}\n");
    else
      printf("kernels: none to list (no CUDA device%s)\n",
             voxconv_has_cuda() ? " found" : "; CUDA not built in");
    return VT_EXIT_OK;
  }
  voxconv_handle_desc_t d;
  memset(&d, 0, sizeof d);
  d.backend = VOXCONV_BACKEND_CUDA;
  voxconv_handle_t *h = NULL;
  if (voxconv_create(&h, &d) != VOXCONV_STATUS_SUCCESS) {
    fprintf(stderr, "voxconv info: %s\n", voxconv_get_last_error(NULL));
    return VT_EXIT_FAIL;
  }
  int n = 0;
  voxconv_kernel_count(h, &n);
  if (json)
    printf("{\"kernels\": [");
  else
    printf("%-16s %-6s %4s %-5s %-4s %-12s %6s %7s %5s %9s %4s %7s %6s  %s\n",
           "algo", "pass", "tile", "dtype", "acc", "MxNxK", "stages", "threads",
           "regs", "smem(B)", "fits", "blk/SM", "occ", "constraints");
  int n_over = 0;
  size_t limit = 0;
  for (int i = 0; i < n; i++) {
    voxconv_kernel_info_t k;
    if (voxconv_kernel_get_info(h, i, &k) != VOXCONV_STATUS_SUCCESS) {
      fprintf(stderr, "voxconv info: kernel %d: %s\n", i,
              voxconv_get_last_error(h));
      continue;
    }
    const char *pass = k.pass == VOXCONV_PASS_CONV_WGRAD ? "wgrad"
                       : k.dgrad                        ? "dgrad"
                                                        : "fwd";
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%dx%d", k.tile_m, k.tile_n, k.tile_k);
    /* int8 tiles sum in int32 */
    const char *acc = k.dtype == VOXCONV_DTYPE_I8 ? "i32"
                      : k.acc16                   ? "f16"
                                                  : "f32";
    n_over += !k.eligible;
    limit = k.smem_limit;
    if (json)
      printf("%s\n  {\"algo\": \"%s\", \"pass\": \"%s\", \"tile\": %d, "
             "\"dtype\": \"%s\", \"acc\": \"%s\", \"shape\": \"%s\", "
             "\"stages\": %d, \"threads\": %d, \"registers\": %d, "
             "\"smem_bytes\": %zu, \"smem_limit\": %zu, \"eligible\": %s, "
             "\"blocks_per_sm\": %d, \"occupancy\": %.3f}",
             i ? "," : "", k.algo, pass, k.tile_id, voxconv_dtype_name(k.dtype),
             acc, shape, k.stages, k.threads, k.registers,
             k.smem_bytes, k.smem_limit, k.eligible ? "true" : "false",
             k.blocks_per_sm, k.occupancy);
    else
      printf("%-16s %-6s %4d %-5s %-4s %-12s %6d %7d %5d %9zu %4s %7d %5.0f%%  "
             "%s\n",
             k.algo, pass, k.tile_id, voxconv_dtype_name(k.dtype),
             acc, shape, k.stages, k.threads, k.registers,
             k.smem_bytes, k.eligible ? "yes" : "no", k.blocks_per_sm,
             100.0 * k.occupancy, k.constraints);
  }
  if (json)
    printf("\n]}\n");
  else if (n > 0 && n_over == 0)
    printf("shared memory per block on this device: %zu bytes; every kernel "
           "fits\n",
           limit);
  else if (n > 0)
    printf("shared memory per block on this device: %zu bytes; %d kernel%s "
           "over it (fits: no) never run%s here: the tuner leaves those "
           "tiles out\n",
           limit, n_over, n_over == 1 ? "" : "s", n_over == 1 ? "s" : "");
  voxconv_destroy(h);
  return VT_EXIT_OK;
}

/* 1 when a target in voxconv_cuda_archs() runs on compute capability
 * major.minor: sm_XY machine code on X.Y and later minors of X (sm_XYa on
 * X.Y only), compute_XY PTX on any later GPU. */
static int archs_run_on(const char *archs, int major, int minor) {
  const int cc = major * 10 + minor;
  for (const char *p = archs; *p; p += strspn(p, " ")) {
    int v = 0, n = 0;
    if (sscanf(p, "sm_%d%n", &v, &n) == 1) {
      if (v / 10 == major && (p[n] == 'a' ? v == cc : v <= cc))
        return 1;
    } else if (sscanf(p, "compute_%d%n", &v, &n) == 1) {
      if (p[n] == 'a' ? v == cc : v <= cc)
        return 1;
    }
    p += strcspn(p, " ");
  }
  return 0;
}

static int cmd_info(int argc, char **argv) {
  int algos = 0, json = 0, kernels = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--kernels") == 0) {
      kernels = 1;
    } else if (strcmp(argv[i], "--algos") == 0) {
      algos = 1;
    } else if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: voxconv info [--algos | --kernels] [--json]\n");
      return VT_EXIT_OK;
    } else {
      fprintf(stderr, "voxconv info: unknown option \"%s\"\n"
                      "usage: voxconv info [--algos | --kernels] [--json]\n",
              argv[i]);
      return VT_EXIT_USAGE;
    }
  }
  if (kernels)
    return print_kernels(json);
  const unsigned rt = voxconv_version_number();
  int n_dev = 0;
  const voxconv_status_t dst = voxconv_device_count(&n_dev);
  const char *dev_err =
      dst == VOXCONV_STATUS_SUCCESS ? NULL : voxconv_get_last_error(NULL);
  if (json) {
    printf("{\n  \"version\": ");
    vt_json_string(stdout, voxconv_version_string());
    printf(",\n  \"version_number\": %u,\n  \"header_version\": \"%s\",\n",
           rt, VOXCONV_VERSION_STRING);
    printf("  \"backends\": [\"cpu\"%s],\n",
           voxconv_has_cuda() ? ", \"cuda\"" : "");
    printf("  \"cuda_archs\": [");
    const char *a = voxconv_cuda_archs();
    for (int first = 1; *(a += strspn(a, " ")); first = 0) {
      const size_t len = strcspn(a, " ");
      printf("%s\"%.*s\"", first ? "" : ", ", (int)len, a);
      a += len;
    }
    printf("],\n");
    printf("  \"devices\": [");
    for (int d = 0; d < n_dev; d++) {
      voxconv_device_info_t di;
      memset(&di, 0, sizeof di);
      if (voxconv_device_get_info(d, &di) != VOXCONV_STATUS_SUCCESS)
        continue;
      printf("%s\n    {\"index\": %d, \"name\": ", d ? "," : "", d);
      vt_json_string(stdout, di.name);
      printf(", \"cc\": \"%d.%d\", \"sms\": %d, \"memory_bytes\": %zu, "
             "\"code_for_it\": %s}",
             di.cc_major, di.cc_minor, di.sm_count, di.total_memory,
             archs_run_on(voxconv_cuda_archs(), di.cc_major, di.cc_minor)
                 ? "true"
                 : "false");
    }
    printf("%s]", n_dev ? "\n  " : "");
    if (algos) {
      printf(",\n  \"algorithms\": [");
      const int n = voxconv_algo_count();
      for (int i = 0; i < n; i++) {
        voxconv_algo_info_t ai;
        if (voxconv_algo_get_info(i, &ai) != VOXCONV_STATUS_SUCCESS)
          continue;
        char passes[96];
        pass_list(ai.passes, passes, sizeof passes);
        printf("%s\n    {\"name\": ", i ? "," : "");
        vt_json_string(stdout, ai.name);
        printf(", \"backend\": \"%s\", \"passes\": \"%s\", "
               "\"deterministic\": %s, \"description\": ",
               backend_str(ai.backend), passes,
               ai.deterministic ? "true" : "false");
        vt_json_string(stdout, ai.description);
        printf("}");
      }
      printf("\n  ]");
    }
    printf("\n}\n");
    return VT_EXIT_OK;
  }
  printf("voxconv %s (library runtime %s, number %u; built against header "
         "%s)\n",
         VOXCONV_VERSION_STRING, voxconv_version_string(), rt,
         VOXCONV_VERSION_STRING);
  if (rt != VOXCONV_VERSION_NUMBER)
    printf("WARNING: the linked library (%u) is not the header's version "
           "(%u)\n",
           rt, (unsigned)VOXCONV_VERSION_NUMBER);
  printf("backends compiled: cpu%s\n",
         voxconv_has_cuda() ? ", cuda" : " (no CUDA in this build)");
  if (voxconv_has_cuda())
    printf("CUDA targets: %s\n", voxconv_cuda_archs());
  if (dev_err)
    printf("devices: query failed: %s: %s\n", voxconv_status_string(dst),
           dev_err);
  else if (n_dev == 0)
    printf("CUDA devices: none%s\n",
           voxconv_has_cuda() ? " found" : " (CUDA not built in)");
  else
    printf("CUDA devices: %d\n", n_dev);
  for (int d = 0; d < n_dev; d++) {
    voxconv_device_info_t di;
    memset(&di, 0, sizeof di);
    const voxconv_status_t st = voxconv_device_get_info(d, &di);
    if (st != VOXCONV_STATUS_SUCCESS) {
      printf("  [%d] query failed: %s: %s\n", d, voxconv_status_string(st),
             voxconv_get_last_error(NULL));
      continue;
    }
    printf("  [%d] %s, compute capability %d.%d, %d SMs, %.1f GiB%s\n", d,
           di.name, di.cc_major, di.cc_minor, di.sm_count,
           (double)di.total_memory / 1073741824.0,
           archs_run_on(voxconv_cuda_archs(), di.cc_major, di.cc_minor)
               ? ""
               : " (no code for it in this build: see VOXCONV_CUDA_ARCHS)");
  }
  printf("data folder: %s%s\n", vt_data_dir(),
         getenv("VOXCONV_DATA_DIR") ? " ($VOXCONV_DATA_DIR)" : "");
  if (!algos) {
    printf("algorithms: %d registered (voxconv info --algos lists them)\n",
           voxconv_algo_count());
    return VT_EXIT_OK;
  }
  const int n = voxconv_algo_count();
  printf("\nalgorithm registry (%d):\n", n);
  printf("  %-24s %-7s %-40s %-5s %s\n", "name", "backend", "passes", "det",
         "description");
  for (int i = 0; i < n; i++) {
    voxconv_algo_info_t ai;
    const voxconv_status_t st = voxconv_algo_get_info(i, &ai);
    if (st != VOXCONV_STATUS_SUCCESS) {
      printf("  [%d] %s: %s\n", i, voxconv_status_string(st),
             voxconv_get_last_error(NULL));
      continue;
    }
    char passes[96];
    pass_list(ai.passes, passes, sizeof passes);
    printf("  %-24s %-7s %-40s %-5s %s\n", ai.name ? ai.name : "?",
           backend_str(ai.backend), passes, ai.deterministic ? "yes" : "no",
           ai.description ? ai.description : "");
  }
  return VT_EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return VT_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  /* Subcommands see argv[0] = their own name. */
  int sub_argc = argc - 1;
  char **sub_argv = argv + 1;
  if (strcmp(cmd, "info") == 0)
    return cmd_info(sub_argc, sub_argv);
  if (strcmp(cmd, "bench") == 0)
    return vt_bench_main(sub_argc, sub_argv);
  if (strcmp(cmd, "cache") == 0 || strcmp(cmd, "tune") == 0) {
    int (*fn)(int, char **) =
        cmd[0] == 'c' ? vc_tool_cache_main : vc_tool_tune_main;
    if (!fn) {
      fprintf(stderr, "voxconv %s: not available in this build\n", cmd);
      return VT_EXIT_FAIL;
    }
    return fn(sub_argc, sub_argv);
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("voxconv %s\n", voxconv_version_string());
    return VT_EXIT_OK;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "-h") == 0 ||
      strcmp(cmd, "--help") == 0) {
    usage(stdout);
    return VT_EXIT_OK;
  }
  fprintf(stderr, "voxconv: unknown command \"%s\"\n\n", cmd);
  usage(stderr);
  return VT_EXIT_USAGE;
}
