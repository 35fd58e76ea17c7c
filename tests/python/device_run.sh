#!/usr/bin/env bash
# On a GPU machine: build libvoxconv with CUDA (build-cuda/, library target
# only), run the Python suite with CUDA tensors, and train the example for
# real. Results go to $OUT (default /tmp/voxconv-device).
#   tests/python/device_run.sh [build|test|train|all]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/voxconv-device}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
what=${1:-all}
export VOXCONV_LIBRARY=$PWD/build-cuda/libvoxconv.so PYTHONPATH=$PWD/python
export VOXCONV_BENCHMARK_CACHE_DIR=$OUT/tuning-cache
if [ "$what" = build ] || [ "$what" = all ]; then
  nvidia-smi -L
  $PY -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
  cmake -S . -B build-cuda -DVOXCONV_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-cuda -j"$(nproc)" --target voxconv 2>&1 | grep -E "error|Built target voxconv$" | tail -20
fi
if [ "$what" = test ] || [ "$what" = all ]; then
  $PY -m pytest -q -rs --durations=8 tests/python 2>&1 | tee "$OUT/pytest.txt" | tail -60
fi
if [ "$what" = train ] || [ "$what" = all ]; then
  $PY examples/train_segmentation.py --steps "${STEPS:-300}" --log-every 25 \
    --json "$OUT/train_segmentation.json" 2>&1 | tee "$OUT/train.txt" | tail -40
fi
