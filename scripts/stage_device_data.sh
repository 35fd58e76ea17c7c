#!/usr/bin/env bash
# The lent GPU machine receives the repository only (../shared stays
# behind). This copies the recorded inputs that device tests and benchmarks
# read into the git-ignored folder .devdata/ (same layout as shared/data);
# carry ".devdata" in the device call and set VOXCONV_DATA_DIR=.devdata.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-../shared/data}
mkdir -p .devdata/bench .devdata/scans
cp -u "$src"/bench/*.bin .devdata/bench/
for f in semantickitti_00_000000.bin semantickitti_00_000000.label kitti_000008.bin \
         scannet_scene0000_00.bin kitti_000000.bin \
         nuscenes_n015-2018-07-24-11-22-45+0800__LIDAR_TOP__1532402927647951.pcd.bin; do
  cp -u "$src/scans/$f" .devdata/scans/
done
du -sh .devdata
