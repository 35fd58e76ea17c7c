#!/usr/bin/env bash
# Same-machine A/B of two builds' kernels (device side). Lent machines
# differ by a few percent, so a change is judged against its parent built
# and timed on the same GPU in the same call (scripts/ab_build.sh builds
# both):
#
#   scripts/ab_tiles.sh NEW_BUILD OLD_BUILD [bench_tiles args...]
#
# Runs bench_tiles NEW, OLD, NEW (the repeat shows the run-to-run spread)
# into $OUT/tiles_{A,B,A2}.txt and prints, per (algo, pass, C, params),
# both NEW times, the OLD time and min(NEW) / OLD.
set -uo pipefail
a=$1 b=$2
shift 2
O=${OUT:-/tmp}
$a/bench_tiles "$@" >"$O/tiles_A.txt" 2>&1
$b/bench_tiles "$@" >"$O/tiles_B.txt" 2>&1
$a/bench_tiles "$@" >"$O/tiles_A2.txt" 2>&1
python3 - "$O" <<'PY'
import sys
o = sys.argv[1]


def rows(name):
    d = {}
    for line in open(f"{o}/{name}"):
        p = line.split()
        if len(p) >= 6 and p[0].startswith("mask_gemm"):
            d[tuple(p[:4])] = float(p[4])
    return d


A, B, A2 = rows("tiles_A.txt"), rows("tiles_B.txt"), rows("tiles_A2.txt")
for k, t in A.items():
    if k in B:
        t2 = A2.get(k, t)
        print(" ".join(k), f"new {t:.3f}/{t2:.3f} old {B[k]:.3f}",
              f"ratio {min(t, t2) / B[k]:.3f}")
PY
