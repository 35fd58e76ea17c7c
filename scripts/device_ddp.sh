#!/usr/bin/env bash
# Issue 20 item 5 on a two-GPU machine (nvidia-h100-x2), plus the
# compute-sanitizer runs of the kernels the issue touched (on GPU 1 while
# GPU 0 runs the one-GPU baseline): build; sanitizers || DDP 1 GPU; DDP on
# 2 GPUs with a cold cache, the same cache warm, and cold with --warmup;
# the Python asynchronous-path tests. Logs -> $OUT/logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_logs.sh
export PYTHONUNBUFFERED=1
B=build-gpu
nvidia-smi -L | tee "$OUT/gpu.txt"
stamp build
cmake -G Ninja -S . -B $B -DCMAKE_BUILD_TYPE=Release -DVOXCONV_DATA_DIR="$VOXCONV_DATA_DIR" \
  >"$OUT/cmake.txt" 2>&1 && cmake --build $B -j"$(nproc)" >"$OUT/build.txt" 2>&1 ||
  { grep error "$OUT/build.txt" | head; exit 1; }
export VOXCONV_LIBRARY=$PWD/$B/libvoxconv.so PYTHONPATH=$PWD/python

stamp "sanitizers on GPU 1 (background) + DDP on 1 GPU (GPU 0)"
(
  export CUDA_VISIBLE_DEVICES=1 VOXCONV_BENCHMARK_CACHE_DIR=$OUT/san-cache VOXCONV_TEST_SMALL=1
  CS=/usr/local/cuda/bin/compute-sanitizer
  for t in ${SAN_TESTS:-test_async "test_cuda_kmap --quick"}; do
    name=${t%% *}
    for tool in memcheck racecheck; do
      extra=""
      [ $tool = memcheck ] && extra="--report-api-errors no"
      [ $tool = racecheck ] && [ $name = test_cuda_kmap ] && continue
      VOXCONV_AUTOTUNE_RUNS=1 timeout ${SAN_TIMEOUT:-120} $CS --tool $tool $extra --error-exitcode 9 \
        $B/tests/$t >"$OUT/${tool}_$name.txt" 2>&1
      echo "$tool $name: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/${tool}_$name.txt" | tail -1)"
    done
  done
) >"$OUT/sanitize.txt" 2>&1 &
san=$!
DDP="python3 -m torch.distributed.run --standalone"
ARGS="examples/train_ddp.py --data-dir $VOXCONV_DATA_DIR --steps ${STEPS:-120} --log-every 40"
CUDA_VISIBLE_DEVICES=0 timeout 200 $DDP --nproc_per_node 1 $ARGS --cache-dir /tmp/ddp1 \
  --json "$OUT/ddp1_cold.json" >"$OUT/ddp1_cold.txt" 2>&1
echo "1 GPU cold: rc=$? $(grep -E 'median step|first step' "$OUT/ddp1_cold.txt" | tail -2 | tr '\n' ' ')"
wait $san
cat "$OUT/sanitize.txt"

for run in cold warm cold_warmup; do
  case $run in
    cold) cache=/tmp/ddp2; rm -rf $cache; extra="" ;;
    warm) cache=/tmp/ddp2; extra="" ;;
    cold_warmup) cache=/tmp/ddp2w; rm -rf $cache; extra="--warmup" ;;
  esac
  stamp "DDP 2 GPUs, $run"
  timeout 200 $DDP --nproc_per_node 2 $ARGS --cache-dir $cache $extra \
    --json "$OUT/ddp2_$run.json" >"$OUT/ddp2_$run.txt" 2>&1
  echo "rc=$?"; grep -E "rank|median|first step|identical|waited|constructor" "$OUT/ddp2_$run.txt" | tail -8
done
stamp "pytest test_async_cuda"
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -q tests/python/test_async_cuda.py \
  >"$OUT/pytest_async.txt" 2>&1
tail -5 "$OUT/pytest_async.txt"
stamp done
