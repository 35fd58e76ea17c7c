#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs `voxconv bench` on the
# built-in synthetic LiDAR scene (on the GPU when there is one, else on the
# CPU). Extra arguments go to `voxconv bench` (see `voxconv bench --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
exec ./build/voxconv bench "$@"
