#!/usr/bin/env bash
# Installs what building and testing voxconv needs on Debian 12 (CI and a
# fresh developer machine). Idempotent: skips apt when everything is there.
set -euo pipefail
pkgs=(build-essential cmake pkg-config valgrind clang libclang-rt-14-dev
      python3 python3-torch python3-pytest python3-numpy)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
