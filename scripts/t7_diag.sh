#!/usr/bin/env bash
# device: tile 7 check -- bench_tiles of tiles 0/5/7 at C = 128/256, the
# SASS of tile 7's fp32 kernel (where its spills are), then test_mask_gemm
# and the sanitizers.
export VOXCONV_DATA_DIR=$PWD/.devdata
T0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j16 >$OUT/build.txt 2>&1 || { grep error $OUT/build.txt | head; exit 1; }
echo "build $(( $(date +%s)-T0 ))s"
for C in 256 128; do
  timeout 90 build-gpu/bench_tiles --algos mask_gemm_wgmma --channels $C --passes fwd,dgrad --match row_order=1 2>&1 | grep "^mask" | grep -E "mma_tile=[057]," | awk '{print $2,$3,$4,$5}' | sed 's/accumulator_type=/a/;s/,row_order=1//'
done
CO=$(ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || which cuobjdump)
if [ -n "$CO" ]; then
  O=$(find build-gpu -name "cuda_mask_gemm.cu.o" | head -1)
  $CO -sass -fun '_ZN12vc_mask_gemm16wg_fwd_ws_kernelI6__halfNS_8WgWsTileILi256ELi3ELb0ELb1EEELb0EEEvNS_7FwdArgsE' $O > $OUT/t7f.sass 2>&1
  echo "sass lines $(wc -l < $OUT/t7f.sass); STL/LDL:"; grep -n "STL\|LDL\|SETMAXREG\|WARPGROUP.ARRIVE\|HGMMA.*gsb0 ;\|BRA\|EXIT" $OUT/t7f.sass | head -60
fi
echo "bench done $(( $(date +%s)-T0 ))s"
GPU_TESTS=test_mask_gemm SANITIZE_TESTS=test_mask_gemm TEST_TIMEOUT=330 SAN_TIMEOUT=330 scripts/device_check.sh test sanitize 2>&1 | tail -8
echo "total $(( $(date +%s)-T0 ))s"
