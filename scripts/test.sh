#!/usr/bin/env bash
# Runs every test that this machine can run: installs dependencies, builds
# (CUDA code compiled when nvcc exists), runs ctest (GPU tests skip without
# a GPU), the Python suite, an ASan+UBSan build of the CPU path with its
# ctest, and valgrind on the core CPU tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/deps.sh
jobs=$(nproc)

echo "== build (release) =="
scripts/build.sh build
echo "== ctest (release) =="
(cd build && ctest --output-on-failure -j "$jobs")

echo "== install + pkg-config (shared and static) =="
inst=$(mktemp -d)
cmake --install build --prefix "$inst" >/dev/null
pc=$(find "$inst" -name voxconv.pc -printf "%h\n" | head -1)
cc examples/hello.c $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs voxconv) \
  -o "$inst/hello_shared"
LD_LIBRARY_PATH=$(dirname "$pc") "$inst/hello_shared" | grep -q "y\[0\] = 15.68"
cc examples/hello.c $(PKG_CONFIG_PATH=$pc pkg-config --cflags voxconv) \
  "$(dirname "$pc")/libvoxconv.a" \
  $(PKG_CONFIG_PATH=$pc pkg-config --static --libs-only-other --libs-only-L voxconv) \
  $(PKG_CONFIG_PATH=$pc pkg-config --static --libs-only-l voxconv | sed 's/-lvoxconv//') \
  -o "$inst/hello_static"
"$inst/hello_static" | grep -q "y\[0\] = 15.68"
rm -rf "$inst"
echo "installed library works through pkg-config (shared and static)"

echo "== pytest =="
if [ -d tests/python ]; then
  VOXCONV_LIBRARY="$root/build/libvoxconv.so" PYTHONPATH="$root/python" \
    /usr/bin/python3 -m pytest -q tests/python
fi

echo "== ASan + UBSan (CPU path) =="
scripts/build.sh build-asan -DVOXCONV_SANITIZE=ON -DVOXCONV_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j "$jobs")

echo "== valgrind (CPU path) =="
scripts/build.sh build-vg -DVOXCONV_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
for t in test_core test_kmap test_ops_cpu test_bad_input; do
  if [ -x "build-vg/tests/$t" ]; then
    echo "valgrind $t"
    VOXCONV_TEST_SMALL=1 valgrind -q --error-exitcode=3 --leak-check=full \
      --errors-for-leak-kinds=definite "build-vg/tests/$t" >/dev/null
  fi
done
echo "all test stages passed"
