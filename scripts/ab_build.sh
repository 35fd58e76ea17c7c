#!/usr/bin/env bash
# Device-side A/B set-up: configures build-gpu (the working tree) and
# build-ab (the same tree with AB_FLAGS added to the CUDA flags, e.g.
# -DVC_SOME_EXPERIMENT) and builds both concurrently; then
# scripts/ab_tiles.sh build-gpu build-ab ... compares them on one machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake -S . -B build-ab -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_FLAGS=${AB_FLAGS:?}" >/dev/null
cmake --build build-gpu -j10 >"${OUT:-/tmp}/build_gpu.txt" 2>&1 &
p=$!
cmake --build build-ab -j6 --target bench_tiles >"${OUT:-/tmp}/build_ab.txt" 2>&1
wait $p
