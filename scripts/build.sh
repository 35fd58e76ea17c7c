#!/usr/bin/env bash
# Configures and builds voxconv into $1 (default: build). Extra arguments go
# to cmake. The CUDA backend is compiled when nvcc is found (CUDA 13 at
# /usr/local/cuda), for the architectures in VOXCONV_CUDA_ARCHS (default 90a).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
