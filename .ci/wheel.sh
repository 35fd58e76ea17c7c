#!/usr/bin/env bash
# CI step: the installable package. Builds the wheel the way a user does
# (python3 -m build --wheel: setup.py runs CMake, CUDA when nvcc is here),
# checks its contents (.ci/check_wheel.py: platform tag, the library inside,
# the CUDA targets its device code holds), installs it into a fresh virtual
# environment outside the source tree (--system-site-packages: Debian's
# torch) and runs the Python suite from outside the tree against it,
# failing unless the suite imported the installed package and library.
#
# To keep CI short the wheel is built for sm_90a only (VOXCONV_CI_CUDA_ARCHS,
# default 90a: about 1.5 min on 2 cores instead of about 6 for the default
# 80;86;89;90a;89-virtual of a user's build).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=/usr/bin/python3

pkgs=(python3-venv python3-pip python3-setuptools python3-wheel python3-build)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "wheel: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$(mktemp -d /tmp/voxconv-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export VOXCONV_CUDA=1 VOXCONV_CUDA_ARCHS=${VOXCONV_CI_CUDA_ARCHS:-90a}
  # the nvcc names the library must hold: NN -> sm_NN, NN-virtual -> compute_NN
  expect=$($py -c 'import re, sys
a = [x for x in re.split(r"[;, ]", sys.argv[1]) if x]
print(" ".join(["sm_" + x.replace("-real", "") for x in a if not x.endswith("-virtual")]
               + ["compute_" + x[:-8] for x in a if x.endswith("-virtual")]))' "$VOXCONV_CUDA_ARCHS")
else
  export VOXCONV_CUDA=0
  expect=""
fi
echo "wheel: VOXCONV_CUDA=$VOXCONV_CUDA VOXCONV_CUDA_ARCHS=${VOXCONV_CUDA_ARCHS:-}"

start=$SECONDS
VOXCONV_BUILD_DIR="$work/cmake" $py -m build --wheel --no-isolation --outdir "$work/dist" . \
  >"$work/build.log" 2>&1 || { tail -60 "$work/build.log"; exit 1; }
grep "^voxconv: " "$work/build.log"
echo "wheel: built in $((SECONDS - start)) s"
wheel=$(ls "$work"/dist/voxconv-*.whl)
$py .ci/check_wheel.py "$wheel" --expect "$expect"

$py -m venv --system-site-packages "$work/venv"
venv_py="$work/venv/bin/python"
"$venv_py" -m pip install -q --no-index --disable-pip-version-check "$wheel"

# From outside the source tree, with nothing pointing back into it.
cd "$work"
unset VOXCONV_LIBRARY PYTHONPATH
"$venv_py" - "$work/venv" "$expect" <<'PY'
import os, sys
import voxconv
venv, expect = os.path.realpath(sys.argv[1]) + os.sep, sys.argv[2].split()
for what, path in (("voxconv.__file__", voxconv.__file__),
                   ("voxconv.library_path", voxconv.library_path)):
    assert os.path.realpath(path).startswith(venv), f"{what} = {path}: not in {venv}"
assert voxconv.cuda_archs() == expect, (voxconv.cuda_archs(), expect)
print(f"wheel: installed voxconv {voxconv.__file__}, library {voxconv.library_path}, "
      f"CUDA targets {voxconv.cuda_archs()}")
PY
"$venv_py" -m voxconv
start=$SECONDS
VOXCONV_CI_VENV="$work/venv" PYTHONPATH="$root/.ci" \
  "$venv_py" -m pytest -q -p no:cacheprovider -p pytest_installed_package "$root/tests/python"
echo "wheel: Python suite against the installed wheel passed in $((SECONDS - start)) s"
