#!/usr/bin/env bash
# One device call for a kernel change: build the working tree (build-gpu)
# and a baseline (build-ab: AB_TREE, another revision's source exported
# before the call, or AB_FLAGS on this tree; see scripts/ab_build.sh), run
# the GPU tests and both compute-sanitizer tools on the new build, then
# time both builds' kernels on the same GPU (scripts/ab_tiles.sh). Logs go
# to $OUT; the key lines to stdout.
#
#   local:  git archive main | (mkdir -p .abtree && tar -x -C .abtree)
#   device: (carry [".devdata", ".abtree"])
#           AB_TREE=.abtree scripts/device_ab.sh [bench_tiles args...]
#
# Knobs as scripts/device_check.sh (GPU_TESTS, SANITIZE_TESTS, ...);
# default bench_tiles args: --algos mask_gemm_wgmma --channels 128,256.
set -uo pipefail
cd "$(dirname "$0")/.."
export VOXCONV_DATA_DIR=${VOXCONV_DATA_DIR:-$PWD/.devdata}
export OUT=${OUT:-/tmp/voxconv-device}
mkdir -p "$OUT"
echo "== build both ($(date +%T))"
scripts/ab_build.sh || {
  tail -20 "$OUT"/build_*.txt
  exit 1
}
echo "== tests and sanitizers on the new build ($(date +%T))"
scripts/device_check.sh test sanitize 2>&1 | tail -16
echo "== same-machine A/B, new against baseline ($(date +%T))"
if [ $# -eq 0 ]; then
  set -- --algos mask_gemm_wgmma --channels 128,256
fi
scripts/ab_tiles.sh build-gpu build-ab "$@"
echo "new build's rows without a baseline twin (new tiles):"
awk 'NR == FNR { if ($1 ~ /^mask_gemm/) old[$1 " " $2 " " $3 " " $4] = 1; next }
     $1 ~ /^mask_gemm/ && !(($1 " " $2 " " $3 " " $4) in old)' \
  "$OUT/tiles_B.txt" "$OUT/tiles_A.txt"
echo "== done ($(date +%T))"
