#!/usr/bin/env bash
# Issue 20 (PyTorch speed, asynchronous path, AMP) on a lent GPU, in one
# call: build, the GPU tests of the C library and of the Python package,
# compute-sanitizer on the kernels this issue touched, and the benchmarks
# that compare the PyTorch path with the C path. Logs and JSON go to
# $OUT/logs.tar.gz (the device tool brings back few files); key lines to
# stdout.
#
#   scripts/device_issue20.sh [build] [ctest] [pytest] [sanitize] [bench]
#                             [train] (default: build ctest pytest bench)
#
# Inputs: .devdata (scripts/stage_device_data.sh), carried with the call.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_logs.sh
export VOXCONV_BENCHMARK_CACHE_DIR=$OUT/tuning-cache
export PYTHONUNBUFFERED=1
steps=${*:-build ctest pytest bench}
B=build-gpu
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
  --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)" |
  tee -a "$OUT/gpu.txt"

if has build; then
  stamp build
  cmake -G Ninja -S . -B $B -DCMAKE_BUILD_TYPE=Release \
    -DVOXCONV_DATA_DIR="$VOXCONV_DATA_DIR" >"$OUT/cmake.txt" 2>&1
  cmake --build $B -j"$(nproc)" >"$OUT/build.txt" 2>&1 ||
    { grep -E "error" "$OUT/build.txt" | head -30; exit 1; }
fi
export VOXCONV_LIBRARY=$PWD/$B/libvoxconv.so PYTHONPATH=$PWD/python

if has ctest; then
  stamp "GPU ctest"
  (cd $B && timeout ${CTEST_TIMEOUT:-420} ctest -j${CTEST_JOBS:-3} --output-on-failure \
     -R "${GPU_TESTS:-test_async|test_cuda_kmap|test_mask_gemm|test_backend_ops|test_deterministic|test_core|test_f16acc_gate|test_tune_guard|test_format_bound|tool_bench_smoke_cuda}") \
    >"$OUT/ctest_gpu.txt" 2>&1
  grep -E "tests passed|Passed|Failed|\*\*\*|Timeout|FAIL" "$OUT/ctest_gpu.txt" | head -40
fi

if has pytest; then
  stamp "pytest (CUDA)"
  timeout ${PYTEST_TIMEOUT:-420} python3 -m pytest -q -rs --durations=10 tests/python \
    >"$OUT/pytest.txt" 2>&1
  tail -30 "$OUT/pytest.txt"
fi

if has sanitize; then
  # The kernels this issue changed or added: the build's status detail
  # kernel and the async tail (test_async, test_cuda_kmap --quick), and
  # mask_gemm's wgrad reading device pair offsets (test_mask_gemm small).
  CS=/usr/local/cuda/bin/compute-sanitizer
  for t in test_async "test_cuda_kmap --quick" test_mask_gemm; do
    name=${t%% *}
    for tool in memcheck racecheck; do
      extra=""
      [ $tool = memcheck ] && extra="--report-api-errors no"
      stamp "$tool $name"
      VOXCONV_TEST_SMALL=1 timeout ${SAN_TIMEOUT:-300} $CS --tool $tool $extra \
        --error-exitcode 9 $B/tests/$t >"$OUT/${tool}_$name.txt" 2>&1
      echo "$tool $name: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/${tool}_$name.txt" | tail -1)"
    done
  done
fi

if has bench; then
  stamp "C path vs PyTorch path (bench/torch_bench.py)"
  timeout ${BENCH_TIMEOUT:-480} python3 bench/torch_bench.py --tool $B/voxconv \
    --data-dir "$VOXCONV_DATA_DIR" --json "$OUT/torch_bench.json" \
    ${BENCH_ARGS:-} >"$OUT/torch_bench.txt" 2>&1
  tail -30 "$OUT/torch_bench.txt"
fi

if has train; then
  stamp "training step: fp32 / autocast fp16 / autocast bf16 / half"
  timeout ${TRAIN_TIMEOUT:-480} python3 bench/train_step_bench.py \
    --data-dir "$VOXCONV_DATA_DIR" --json "$OUT/train_step.json" ${TRAIN_ARGS:-} \
    >"$OUT/train_step.txt" 2>&1
  tail -30 "$OUT/train_step.txt"
fi
stamp done
