export VOXCONV_DATA_DIR=$PWD/.devdata
export VOXCONV_BENCHMARK_CACHE_DIR=$OUT/tuning-cache
T0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j16 >$OUT/build.txt 2>&1 || { grep error $OUT/build.txt | head; exit 1; }
echo "build $(( $(date +%s)-T0 ))s"
(cd build-gpu && timeout 280 ctest --output-on-failure -R "test_core|test_backend_ops|test_deterministic|test_cuda_kmap|test_f16acc_gate|tool_bench_smoke_cuda|tool_info_kernels" -j3 >$OUT/gpu_tests.txt 2>&1; tail -12 $OUT/gpu_tests.txt)
echo "tests $(( $(date +%s)-T0 ))s"
build-gpu/voxconv info --kernels > $OUT/info_kernels.txt 2>&1; grep -E "mask_gemm_wgmma.* 7 " $OUT/info_kernels.txt | head -6
for w in C A; do
  timeout 100 build-gpu/voxconv bench --workload $w --json >$OUT/bench_$w.json 2>$OUT/bench_$w.txt
  grep -E "^C=|forward|backward" $OUT/bench_$w.txt | tail -6
done
echo "total $(( $(date +%s)-T0 ))s"
