# Sourced by the device scripts (device_check.sh, device_issue20.sh,
# device_ddp.sh) from the repository root. The device tool brings back only
# a few files, so every log goes under $OUT/logs and is packed into
# $OUT/logs.tar.gz at exit; `stamp` prints a timed step header (the reply
# shows only the end of stdout, where these headers locate each step).
FINAL=${OUT:-/tmp/voxconv-device}
OUT=$FINAL/logs
mkdir -p "$OUT"
trap 'tar -C "$FINAL" -czf "$FINAL/logs.tar.gz" logs && rm -rf "$OUT"' EXIT
export VOXCONV_DATA_DIR=${VOXCONV_DATA_DIR:-$PWD/.devdata}
stamp() { echo "== $1 ($(date +%T))"; }
