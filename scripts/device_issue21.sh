#!/usr/bin/env bash
# Issue 21 (spconv / MinkowskiEngine compatibility, expanding and inverse
# maps) on a lent GPU: build, the GPU tests of the new map modes, the compat
# test suites on CUDA, compute-sanitizer on the kernels this issue added,
# and the two measurements of its targets (bench/kmap_bench.py: expanding
# map build <= 1.5 x today's strided map on workload A's level 0;
# bench/compat_bench.py: compat layers <= 1.05 x the host time of native
# voxconv modules). Logs go to $OUT/logs.tar.gz (the device tool brings
# back few files); the two JSON results also to $OUT itself; key lines to
# stdout.
#
#   scripts/device_issue21.sh [build] [ctest] [pytest] [sanitize] [bench]
#                             (default: build ctest pytest bench)
#
# One device call runs at most 10 minutes; the build folder stays on a warm
# machine between calls, so split it, e.g.
#   scripts/device_issue21.sh build ctest
#   scripts/device_issue21.sh pytest sanitize
#   scripts/device_issue21.sh bench
#
# Knobs: GPU_TESTS (ctest -R regex), CTEST_TIMEOUT, CTEST_JOBS, PYTEST_TESTS,
# PYTEST_TIMEOUT, SAN_TESTS, SAN_TIMEOUT, SAN_BACKEND_ALGOS, BENCH_TIMEOUT,
# KMAP_ARGS / COMPAT_ARGS (extra arguments of the two benchmarks).
#
# Inputs: .devdata (scripts/stage_device_data.sh), carried with the call.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_logs.sh
export VOXCONV_BENCHMARK_CACHE_DIR=$OUT/tuning-cache
export PYTHONUNBUFFERED=1
steps=${*:-build ctest pytest bench}
B=build-gpu
CS=/usr/local/cuda/bin/compute-sanitizer
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
for s in $steps; do
  case $s in build | ctest | pytest | sanitize | bench) ;;
  *) echo "unknown step '$s' (build ctest pytest sanitize bench)"; exit 2 ;;
  esac
done

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
  --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)" |
  tee -a "$OUT/gpu.txt"
git log -1 --format='commit %H %cd' 2>/dev/null | tee -a "$OUT/gpu.txt"

if has build; then
  stamp build
  cmake -G Ninja -S . -B $B -DCMAKE_BUILD_TYPE=Release \
    -DVOXCONV_DATA_DIR="$VOXCONV_DATA_DIR" >"$OUT/cmake.txt" 2>&1
  cmake --build $B -j"$(nproc)" >"$OUT/build.txt" 2>&1 ||
    { grep -E "error" "$OUT/build.txt" | head -30; exit 1; }
fi
if [ ! -f $B/libvoxconv.so ]; then
  echo "$B/libvoxconv.so missing: run the build step first (on this warm machine)"
  exit 1
fi
export VOXCONV_LIBRARY=$PWD/$B/libvoxconv.so PYTHONPATH=$PWD/python

if has ctest; then
  # The new map modes on both backends (test_kmap_expanding: CPU against
  # dense references; test_cuda_kmap: GPU == CPU element for element,
  # EXPANDING / padding / out_shape / inverse included; test_backend_ops:
  # every op on the expanding map and its inverse, GPU against CPU), plus
  # the GPU tests the maps' users rely on.
  stamp "GPU ctest"
  (cd $B && timeout ${CTEST_TIMEOUT:-480} ctest -j${CTEST_JOBS:-3} --output-on-failure \
     -R "${GPU_TESTS:-test_cuda_kmap|test_kmap_expanding|test_kmap\$|test_backend_ops|test_dense_oracle|test_mask_gemm|test_deterministic|test_core|tool_bench_smoke_cuda}") \
    >"$OUT/ctest_gpu.txt" 2>&1
  echo "ctest rc=$?"
  grep -E "tests passed|Passed|Failed|\*\*\*|Timeout|FAIL" "$OUT/ctest_gpu.txt" | head -40
fi

if has pytest; then
  stamp "pytest (CUDA): compat suites, expanding, friction, package"
  timeout ${PYTEST_TIMEOUT:-480} python3 -m pytest -q -rs --durations=10 \
    ${PYTEST_TESTS:-tests/python/test_compat_spconv.py tests/python/test_compat_minkowski.py tests/python/test_expanding.py tests/python/test_friction.py tests/python/test_package.py} \
    -s >"$OUT/pytest.txt" 2>&1
  echo "pytest rc=$?"
  # per-level voxel counts and dense-reference differences the suites print
  grep -E "^\[compat\.spconv\]|MinkUNet14" "$OUT/pytest.txt" | head -30
  tail -15 "$OUT/pytest.txt"
fi

if has sanitize; then
  # Reduced cases, run concurrently: test_kmap_expanding with a few cases
  # (note: it drives the CPU backend only, so the sanitizers see no kernel
  # of its own; the GPU expanding / inverse map kernels are exercised by
  # test_cuda_kmap --quick), test_cuda_kmap --quick, and test_backend_ops
  # with VOXCONV_TEST_SMALL=1 on SAN_BACKEND_ALGOS (pool and
  # mask_gemm_im2col, as scripts/device_check.sh: the sm90 wgrad tile needs
  # the racecheck build of device_check.sh). memcheck leaves CUDA API
  # errors out: test_cuda_kmap asks for an impossible allocation on purpose.
  stamp "compute-sanitizer memcheck + racecheck"
  san_tests=${SAN_TESTS:-test_kmap_expanding test_cuda_kmap test_backend_ops}
  pids=""
  for t in $san_tests; do
    args=""
    [ "$t" = test_cuda_kmap ] && args="--quick"
    for tool in memcheck racecheck; do
      extra=""
      [ $tool = memcheck ] && extra="--report-api-errors no"
      VOXCONV_EXPANDING_CASES=${SAN_EXPANDING_CASES:-12} VOXCONV_TEST_SMALL=1 \
        VOXCONV_TEST_ALGO=${SAN_BACKEND_ALGOS:-pool,mask_gemm_im2col} \
        timeout ${SAN_TIMEOUT:-420} $CS --tool $tool $extra --error-exitcode 9 \
        $B/tests/$t $args >"$OUT/${tool}_$t.txt" 2>&1 &
      pids="$pids $!"
    done
  done
  wait $pids
  for t in $san_tests; do
    for tool in memcheck racecheck; do
      echo "$tool $t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks|FAIL' \
        "$OUT/${tool}_$t.txt" | tail -2 | tr '\n' ' ')"
    done
  done
fi

if has bench; then
  stamp "kernel map builds: expanding / strided / inverse (bench/kmap_bench.py)"
  timeout ${BENCH_TIMEOUT:-240} python3 bench/kmap_bench.py --data-dir "$VOXCONV_DATA_DIR" \
    --json "$OUT/kmap_bench.json" ${KMAP_ARGS:-} >"$OUT/kmap_bench.txt" 2>&1
  echo "kmap_bench rc=$?"
  tail -40 "$OUT/kmap_bench.txt"
  stamp "compat layers vs native modules (bench/compat_bench.py)"
  timeout ${BENCH_TIMEOUT:-240} python3 bench/compat_bench.py --data-dir "$VOXCONV_DATA_DIR" \
    --json "$OUT/compat_bench.json" ${COMPAT_ARGS:-} >"$OUT/compat_bench.txt" 2>&1
  echo "compat_bench rc=$?"
  tail -20 "$OUT/compat_bench.txt"
  cp "$OUT"/kmap_bench.json "$OUT"/compat_bench.json "$FINAL"/ 2>/dev/null
fi
stamp done
