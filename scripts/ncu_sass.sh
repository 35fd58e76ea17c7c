#!/usr/bin/env bash
# Device side: Nsight Compute of single mask_gemm_wgmma kernels with SASS-level
# stall sampling, for finding where a kernel's warps wait (which loop, which
# barrier, which load). Builds bench_tiles, profiles each case of PROFS
# ("name:pass:kernel-regex:match[:channels]", channels default 256), and
# packs $OUT/prof.tar.gz: per case the details page (name.txt) and the
# per-instruction source page (name_sass.csv). Read the CSVs here with
# scripts/sass_hot.py. Example (device call, carry [".devdata"]):
#   PROFS="t5:fwd:wg_fwd_kernel:mma_tile=5,accumulator_type=32,row_order=1" \
#     scripts/ncu_sass.sh
set -uo pipefail
export VOXCONV_DATA_DIR=$PWD/.devdata
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j16 --target bench_tiles >"$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
date +%T
mkdir -p "$OUT/p"
prof() { # name pass kernel-regex match channels
  timeout 200 ncu --clock-control none -k regex:$3 --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section SourceCounters --section LaunchStats --section Occupancy \
    -o "$OUT/p/$1" build-gpu/bench_tiles --channels ${5:-256} --passes $2 --algos mask_gemm_wgmma \
    --match "$4" --repeat 1 >"$OUT/p/$1.log" 2>&1
  ncu -i "$OUT/p/$1.ncu-rep" --page details >"$OUT/p/$1.txt" 2>&1
  ncu -i "$OUT/p/$1.ncu-rep" --page source --csv --print-source sass >"$OUT/p/$1_sass.csv" 2>&1
  rm -f "$OUT/p/$1.ncu-rep"
  echo "== $1"; grep -E "Duration|No Eligible|Eligible Warps|Registers Per|L2 Hit|DRAM Through|Compute \(SM\)" "$OUT/p/$1.txt" | head -12
}
for spec in ${PROFS:-fwd_t5:fwd:wg_fwd_kernel:mma_tile=5,accumulator_type=32,row_order=1}; do
  IFS=: read -r n p k m c <<<"$spec"
  prof "$n" "$p" "$k" "$m" "$c"
done
tar -C "$OUT" -czf "$OUT/prof.tar.gz" p && rm -rf "$OUT/p"
date +%T
