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

# ctest in build dir $1; on failure the end of each failed test's output is
# printed again last, since a CI summary keeps only the tail of the log
# (a fuzzer's crash input and report would otherwise scroll away).
run_ctest() {
  local dir=$1
  if (cd "$dir" && ctest --output-on-failure -j "$jobs"); then return 0; fi
  local failed=$dir/Testing/Temporary/LastTestsFailed.log
  local log=$dir/Testing/Temporary/LastTest.log
  if [ -f "$failed" ] && [ -f "$log" ]; then
    cut -d: -f2 "$failed" | while read -r name; do
      echo "== end of the output of failed test $name =="
      awk -v t="$name" '$0 ~ (" Testing: " t "$") {on=1}
        on && /^<end of output>/ {exit} on && out {print}
        on && /^Output:/ {out=1; getline}' "$log" | tail -40
    done
  fi
  return 1
}

echo "== build (release) =="
scripts/build.sh build
echo "== ctest (release) =="
run_ctest build

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
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_ctest build-asan

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
