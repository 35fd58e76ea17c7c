#!/usr/bin/env bash
# Everything a GPU change must pass, in one go, on a machine with an NVIDIA
# GPU (the lent H100/H200): build with CUDA, run the GPU tests, run
# compute-sanitizer (memcheck, racecheck) on reduced cases, and record the
# benchmarks of BENCHMARKS.md. Results and logs go to $OUT.
#
#   scripts/device_check.sh [build] [test] [sanitize] [bench] [profile] [kprof]
#   (default: build test sanitize bench)
#
# profile: Nsight Compute sections of single kernels, PROFILE_CASES="C:match
# C:match[:pass[:algo]] ..." (match as bench_tiles --match, e.g.
# 64:mma_tile=0,acc; pass fwd/dgrad/wgrad, algo default mask_gemm).
#
# sanitize: memcheck on the default build, racecheck on build-racecheck
# (-DVC_WGRAD_RACECHECK_ORDER=1, see below).
#
# Knobs: GPU_TESTS (ctest -R regex), SANITIZE_TESTS, SAN_BACKEND_ALGOS
# (test_backend_ops' algorithms under the sanitizers), TILES=0 (skip
# bench_tiles), TILE_ALGOS, TILE_REPEAT, TEST_TIMEOUT, SAN_TIMEOUT.
#
# kprof: the duration of every kernel of one workload-A forward + backward
# (ncu, serialised), to split each layer's time into kernels and launch
# gaps; run after bench (it reuses the tuning cache bench filled).
#
# The device tool brings back only a few files, so the logs are packed into
# $OUT/logs.tar.gz at exit; the key lines go to stdout.
#
# Inputs: VOXCONV_DATA_DIR (default .devdata, filled by
# scripts/stage_device_data.sh, since ../shared does not travel).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_logs.sh
export VOXCONV_BENCHMARK_CACHE_DIR=$OUT/tuning-cache
steps=${*:-build test sanitize bench}
B=build-gpu
CS=/usr/local/cuda/bin/compute-sanitizer
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
  --format=csv,noheader | tee "$OUT/gpu.txt"
git log -1 --format='commit %H %cd' 2>/dev/null | tee "$OUT/commit.txt"

if has build; then
  stamp build
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.txt" 2>&1
  cmake --build $B -j"$(nproc)" >"$OUT/build.txt" 2>&1 ||
    { grep -E "error" "$OUT/build.txt" | head -20; exit 1; }
fi

# racecheck runs on its own build with VC_WGRAD_RACECHECK_ORDER=1: the
# wgrad tile W3 then waits for its own earlier copies of a slot explicitly
# (a no-op under its mbarrier protocol, 14% slower), without which
# racecheck reports them as same-thread write-after-write hazards
# (src/cuda/cuda_mask_gemm_sm90.cuh, docs/perf-notes.md item 50).
# memcheck runs on the default build. Built before the tests start, so the
# compile does not share the CPUs with them.
RB=build-racecheck
SAN_TESTS=${SANITIZE_TESTS:-test_mask_gemm test_cuda_kmap test_backend_ops}
if has sanitize; then
  stamp "racecheck build"
  cmake -S . -B $RB -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_FLAGS=-DVC_WGRAD_RACECHECK_ORDER=1 >"$OUT/cmake_racecheck.txt" 2>&1
  cmake --build $RB -j"$(nproc)" --target $SAN_TESTS >"$OUT/build_racecheck.txt" 2>&1 ||
    { grep -E "error" "$OUT/build_racecheck.txt" | head -20; exit 1; }
fi

# The GPU tests and the compute-sanitizer runs are independent, so they run
# concurrently (device time is the scarce resource); results are printed
# once all have finished.
pids=""
if has test; then
  stamp "GPU tests (background)"
  (cd $B && VOXCONV_REPORT="$OUT/precision.md" timeout ${TEST_TIMEOUT:-540} \
     ctest --output-on-failure \
     -R "${GPU_TESTS:-test_core|test_backend_ops|test_deterministic|test_cuda_kmap|test_mask_gemm|test_f16acc_gate|tool_bench_smoke_cuda|tool_info_kernels}") \
    >"$OUT/ctest_gpu.txt" 2>&1 &
  pids="$pids $!"
fi

if has sanitize; then
  # Each test's reduced mode: VOXCONV_TEST_SMALL for test_mask_gemm and
  # test_backend_ops, --quick for test_cuda_kmap. test_backend_ops runs
  # only the algorithms of SAN_BACKEND_ALGOS (default: pool and
  # mask_gemm_im2col, on every map geometry; test_mask_gemm covers the
  # other tensor-core kernels); all of them under either tool run past
  # 7 minutes. memcheck
  # leaves CUDA API errors out: test_cuda_kmap asks for an impossible
  # allocation on purpose (the library checks and reports every API status;
  # the tests assert them).
  stamp "compute-sanitizer memcheck + racecheck (background)"
  for t in $SAN_TESTS; do
    args=""
    [ "$t" = test_cuda_kmap ] && args="--quick"
    for tool in memcheck racecheck; do
      extra="" bin=$RB
      [ $tool = memcheck ] && extra="--report-api-errors no" bin=$B
      VOXCONV_TEST_ALGO=${SAN_BACKEND_ALGOS:-pool,mask_gemm_im2col} VOXCONV_TEST_SMALL=1 timeout ${SAN_TIMEOUT:-420} $CS --tool $tool $extra \
        --error-exitcode 9 $bin/tests/$t $args >"$OUT/${tool}_$t.txt" 2>&1 &
      pids="$pids $!"
    done
  done
fi
[ -n "$pids" ] && wait $pids
if has test; then
  stamp "GPU tests"
  grep -E "tests passed|Passed|Failed|\*\*\*|Timeout" "$OUT/ctest_gpu.txt" | tail -12
  # test_core's stream-ordering check must be able to fail: without its
  # voxconv_stream_wait it has to see the race.
  VC_TEST_STREAMS_NO_WAIT=1 $B/tests/test_core >"$OUT/test_core_no_wait.txt" 2>&1 &&
    echo "test_core without the stream wait PASSED: its ordering check cannot fail" ||
    echo "test_core without the stream wait fails as it must: $(grep -m1 'stream B read' "$OUT/test_core_no_wait.txt" | cut -c1-160)"
fi
if has sanitize; then
  for t in $SAN_TESTS; do
    for tool in memcheck racecheck; do
      echo "$tool $t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' \
        "$OUT/${tool}_$t.txt" | tail -2 | tr '\n' ' ')"
    done
  done
fi

if has bench; then
  if [ "${TILES:-1}" != 0 ]; then # TILES=0: only the workload benches
    stamp "tiles (workload C, D)"
    $B/bench_tiles --channels 32,64,128,256 --repeat "${TILE_REPEAT:-20}" \
      ${TILE_ALGOS:+--algos $TILE_ALGOS} >"$OUT/bench_tiles.txt" 2>&1
    grep -E "kmap build" "$OUT/bench_tiles.txt"
  fi
  stamp "first-run autotuning of workload A (empty cache)"
  rm -rf "$VOXCONV_BENCHMARK_CACHE_DIR"
  t0=$(date +%s.%N)
  $B/voxconv tune --workload A >"$OUT/tune_A.txt" 2>&1
  echo "first-run tune of workload A: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s wall" |
    tee -a "$OUT/tune_A.txt"
  for w in A B C D; do
    stamp "voxconv bench --workload $w"
    $B/voxconv bench --workload $w --json >"$OUT/bench_$w.json" \
      2>"$OUT/bench_$w.txt"
    grep -E "forward|backward|kmap|total" "$OUT/bench_$w.txt" | tail -6
    case $w in A | B) # the same network with its maps on the conv stream
      $B/voxconv bench --workload $w --maps serial --json \
        >"$OUT/bench_${w}_serial.json" 2>"$OUT/bench_${w}_serial.txt"
      echo "--maps serial: $(grep -E '^forward' "$OUT/bench_${w}_serial.txt")" ;;
    esac
  done
fi
if has profile; then
  # case: C:match[:pass[:algo]] (pass fwd, dgrad or wgrad; default fwd on
  # mask_gemm); the profiled kernel is the pass's (fwd and dgrad share one).
  for case in ${PROFILE_CASES:-64:mma_tile=0,accumulator_type=32,row_order=1}; do
    IFS=: read -r c m pass algo <<<"$case"
    pass=${pass:-fwd} algo=${algo:-mask_gemm}
    kern=fwd_kernel
    [ "$pass" = wgrad ] && kern=wgrad_kernel
    log="$OUT/ncu_${pass}_${algo}_C${c}_${m//[=,]/_}.txt"
    stamp "ncu $pass $algo C=$c $m"
    timeout 300 ncu --clock-control none -k regex:$kern --launch-skip 3 \
      --launch-count 1 --section SpeedOfLight --section WarpStateStats \
      --section SchedulerStats --section Occupancy \
      --section MemoryWorkloadAnalysis --section LaunchStats \
      $B/bench_tiles --channels "$c" --passes "$pass" --algos "$algo" \
      --match "$m" --repeat 1 >"$log" 2>&1
    grep -E "Duration|Throughput|Stall|Warp Cycles|Achieved Occupancy|Registers|Issued|Hit Rate|Eligible|No Eligible" \
      "$log" | head -40
  done
fi
if has kprof; then
  stamp "ncu kernel durations, workload A (one run)"
  timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/kprof_A.csv" $B/voxconv bench --workload A --repeat 1 \
    --warmup 0 --quiet >/dev/null 2>"$OUT/kprof_A.txt"
  echo "kprof: $(grep -c gpu__time_duration "$OUT/kprof_A.csv") kernels"
fi
stamp done
