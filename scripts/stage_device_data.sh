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
# every scan: the tool tests (ctest tool_*) read the PLY, PCD and SUN RGB-D
# ones too; configure the device build with -DVOXCONV_DATA_DIR=$PWD/.devdata
cp -u "$src"/scans/* .devdata/scans/
du -sh .devdata
