#!/usr/bin/env bash
# device, tenth session: tile 7 -- bench_tiles of tiles 0/5/7 (C = 128,
# 256), test_mask_gemm with the sanitizers, then voxconv bench C and A.
export VOXCONV_DATA_DIR=$PWD/.devdata
export VOXCONV_BENCHMARK_CACHE_DIR=$OUT/tuning-cache
T0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j16 >$OUT/build.txt 2>&1 || { grep error $OUT/build.txt | head; exit 1; }
echo "build $(( $(date +%s)-T0 ))s"
for C in 256 128; do
  timeout 90 build-gpu/bench_tiles --algos mask_gemm_wgmma --channels $C --passes fwd,dgrad --match row_order=1 2>&1 | grep "^mask" | grep -E "mma_tile=[0357]," | awk '{print $2,$3,$4,$5}' | sed 's/accumulator_type=/a/;s/,row_order=1//' | tee -a $OUT/tiles.txt
done
echo "tiles done $(( $(date +%s)-T0 ))s"
GPU_TESTS=test_mask_gemm SANITIZE_TESTS=test_mask_gemm TEST_TIMEOUT=330 SAN_TIMEOUT=330 scripts/device_check.sh test sanitize 2>&1 | tail -6
echo "tests done $(( $(date +%s)-T0 ))s"
for w in C A; do
  timeout 150 build-gpu/voxconv bench --workload $w --json >$OUT/bench_$w.json 2>$OUT/bench_$w.txt
  grep -E "C=256|forward|backward|total" $OUT/bench_$w.txt | tail -8
done
echo "total $(( $(date +%s)-T0 ))s"
