#!/usr/bin/env bash
# Device-side A/B set-up: configures build-gpu (the working tree) and
# build-ab, and builds both concurrently; then
# scripts/ab_tiles.sh build-gpu build-ab ... compares them on one machine.
# build-ab is either the same tree with AB_FLAGS added to the CUDA flags
# (e.g. AB_FLAGS=-DVC_SOME_KNOB=5), or another source tree AB_TREE, e.g. a
# revision exported here before the call and carried with it:
#   git archive main | (mkdir -p .abtree && tar -x -C .abtree)
#   (run: carry [".devdata", ".abtree"]; AB_TREE=.abtree scripts/ab_build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ -n "${AB_TREE:-}" ]; then
  cmake -S "$AB_TREE" -B build-ab -DCMAKE_BUILD_TYPE=Release >/dev/null
else
  cmake -S . -B build-ab -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CUDA_FLAGS=${AB_FLAGS:?AB_FLAGS or AB_TREE}" >/dev/null
fi
cmake --build build-gpu -j10 >"${OUT:-/tmp}/build_gpu.txt" 2>&1 &
p=$!
cmake --build build-ab -j6 --target bench_tiles >"${OUT:-/tmp}/build_ab.txt" 2>&1
wait $p
