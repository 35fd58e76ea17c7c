#!/usr/bin/env python3
"""Issue 21, target (a): the build time of the expanding kernel map (spconv's
SparseConv3d output set) against today's strided maps, and of the inverse
map (SparseInverseConv3d), on workload A's level 0 (BENCHMARKS.md: 913,903
voxels, built exactly as bench/torch_bench.py and bench/debug/a_profile.py
build them: workload_a_points + voxconv.voxelize, voxel 0.1 m, origin
(-80, -80, -2), grid 1600 x 1600 x 80, first point per cell).

Maps timed (kernel offsets as include/voxconv.h defines them):

  subm k3              SUBMANIFOLD 3^3 (workload D, for scale)
  strided k2 s2        STRIDED 2^3 stride 2: workload A's max-pooling map
                       ("today's strided map" of the target)
  strided k3 s2        STRIDED 3^3 stride 2 (centred offsets)
  expanding k3 s2 p1   EXPANDING 3^3 stride 2 padding 1 with spconv's output
                       bound out_shape = (in + 2p - k) // s + 1 = (800, 800, 40):
                       SparseConv3d(k=3, s=2, p=1) as voxconv.compat.spconv asks
  expanding k3 s2 p1 unbounded   the same without out_shape
  expanding k2 s2 p0   EXPANDING 2^3 stride 2 padding 0, out_shape (800, 800, 40)
                       (SpUNet's downsampling: same set and pairs as strided k2 s2)
  inverse of ...       voxconv_kmap_inverse of that forward map (forward
                       built first, untimed)

Two paths per map:
  C        voxconv.kmap.KernelMap on the current stream's handle: one
           voxconv_kmap_build (or voxconv_kmap_inverse) + get_info, nothing cached
           (the map object is made by the call).
  manager  a fresh voxconv.kmap.CoordinateManager per build, then
           CoordinateManager.kernel_map / inverse_kernel_map as a forward pass asks
           for them (includes copying the output coordinates into a tensor and
           registering the new set). VOXCONV_MAP_STREAM=0 for these, so that
           the build runs on the stream the CUDA events are recorded on.
One row "cache hit" times kernel_map on a manager that already holds the map,
to show what a cached lookup costs next to a build.

No build may be a cache hit: every timed call must return a map object not
seen before (KernelMap.id), the input set's cache must be empty before a
manager build, pair and output counts must be the same in every repetition,
and a median under 2 us is reported as suspicious. Forward/inverse counts are
cross-checked (inverse: n_out = forward n_in, same pairs; expanding k2 s2 p0 =
strided k2 s2).

Protocol (BENCHMARKS.md): CUDA events around each build on the GPU (one sync
after), --warmup rounds first, the median of --repeat; the variants run
round-robin within each round so that clock drift hits them alike. On the
CPU the host clock (perf_counter). Host time (perf_counter around the call)
is reported on both.

    python3 bench/kmap_bench.py --json kmap_bench.json          # GPU
    python3 bench/kmap_bench.py --device cpu --subsample 64 --repeat 3 --warmup 1
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from bench_common import resolve_device, run_header  # noqa: E402  (bench/ is the script folder)
try:
    import voxconv
except ImportError:  # run from a source tree without installing
    sys.path.insert(0, os.path.join(REPO, "python"))
    import voxconv
import torch_bench as tb  # noqa: E402  (workload A's points, as torch_bench makes them)
from voxconv import _lib, _runtime  # noqa: E402
from voxconv import kmap as vkmap  # noqa: E402

A_ORIGIN = (-80.0, -80.0, -2.0)
A_GRID = (1600, 1600, 80)
SUSPICIOUS_MS = 0.002  # a real level-0 build takes far longer than 2 us

STRIDED, SUBM, EXPANDING = _lib.KMAP_STRIDED, _lib.KMAP_SUBMANIFOLD, vkmap.KMAP_EXPANDING


def progress(msg):
    print(f"[kmap_bench] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"kmap_bench: error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def conv_out_shape(shape, k, s, p):
    return tuple((n + 2 * p - k) // s + 1 for n in shape)


class Geo:
    """One map's geometry; `inverse_of`: the Geo whose inverse this is."""

    def __init__(self, name, mode, k, s, padding=None, out_shape=None, inverse_of=None):
        self.name, self.mode = name, mode
        self.ks, self.st, self.dl = (k,) * 3, (s,) * 3, (1, 1, 1)
        self.padding = None if padding is None else (padding,) * 3
        self.out_shape = out_shape
        self.inverse_of = inverse_of

    def describe(self):
        if self.inverse_of is not None:
            return {"inverse_of": self.inverse_of.name}
        return {"mode": vkmap.MODE_NAMES[self.mode], "kernel_size": self.ks,
                "stride": self.st, "padding": self.padding, "out_shape": self.out_shape}


def geometries():
    spconv_bound = conv_out_shape(A_GRID, 3, 2, 1)  # SparseConv3d(3, 2, 1): (800, 800, 40)
    k2_bound = conv_out_shape(A_GRID, 2, 2, 0)
    subm = Geo("subm k3", SUBM, 3, 1)
    s2 = Geo("strided k2 s2", STRIDED, 2, 2)
    s3 = Geo("strided k3 s2", STRIDED, 3, 2)
    e3 = Geo("expanding k3 s2 p1", EXPANDING, 3, 2, 1, spconv_bound)
    e3u = Geo("expanding k3 s2 p1 unbounded", EXPANDING, 3, 2, 1)
    e2 = Geo("expanding k2 s2 p0", EXPANDING, 2, 2, 0, k2_bound)
    inv = [Geo(f"inverse of {g.name}", _lib.KMAP_TRANSPOSED, g.ks[0], g.st[0], inverse_of=g)
           for g in (s2, s3, e3, e2)]
    return [subm, s2, s3, e3, e3u, e2] + inv


# ---- timing ------------------------------------------------------------------------

class Clock:
    """CUDA events around a call on the GPU (one sync after), perf_counter on
    the CPU; the host time of the call on both."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.name = "CUDA events" if self.cuda else "perf_counter"

    def run(self, fn):
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            t0 = time.perf_counter()
            out = fn()
            t1 = time.perf_counter()
            e.record()
            e.synchronize()
            return out, s.elapsed_time(e), 1e3 * (t1 - t0)
        t0 = time.perf_counter()
        out = fn()
        ms = 1e3 * (time.perf_counter() - t0)
        return out, ms, ms


def build_c(device, coords, g):
    """The map of `g` built through KernelMap (one library call, no cache)."""
    h = _runtime.handle_for(device)
    return vkmap.KernelMap(h, g.mode, g.ks, g.st, g.dl, coords, (1, 1, 1),
                           padding=g.padding, out_shape=g.out_shape)


def measure(clock, device, coords, g, path, prepared=None):
    """One timed build of `g` on `path` ("C", "manager", "cache hit").
    Returns (kmap, ms, host_ms, keepalive)."""
    if path == "C":
        if g.inverse_of is None:
            fn = lambda: build_c(device, coords, g)  # noqa: E731
            keep = None
        else:
            fwd = build_c(device, coords, g.inverse_of)
            fwd.n_pairs  # finished before the clock starts
            h = _runtime.handle_for(device)
            fn = lambda: vkmap.KernelMap(h, _lib.KMAP_TRANSPOSED, g.ks, g.st, g.dl,  # noqa
                                         None, None, inverse_of=fwd)
            keep = fwd
        km, ms, host = clock.run(fn)
        return km, ms, host, keep
    mgr = vkmap.CoordinateManager(device)
    s = mgr.add(coords, (1, 1, 1))
    f = g.inverse_of or g
    if path == "cache hit":
        first = mgr.kernel_map(s, f.mode, f.ks, f.st, f.dl, None, f.padding, f.out_shape)
        first[0].n_pairs
        (km, out), ms, host = clock.run(lambda: mgr.kernel_map(
            s, f.mode, f.ks, f.st, f.dl, None, f.padding, f.out_shape))
        if km is not first[0]:
            fail("cache hit row: the second kernel_map call built a new map")
        return km, ms, host, (mgr, s, out, first)
    if s.kmaps:
        fail(f"{g.name}: a fresh coordinate set already holds maps")
    if g.inverse_of is None:
        (km, out), ms, host = clock.run(lambda: mgr.kernel_map(
            s, g.mode, g.ks, g.st, g.dl, None, g.padding, g.out_shape))
        return km, ms, host, (mgr, s, out)
    fwd, out = mgr.kernel_map(s, f.mode, f.ks, f.st, f.dl, None, f.padding, f.out_shape)
    fwd.n_pairs
    (km, _), ms, host = clock.run(lambda: mgr.inverse_kernel_map(
        s, f.mode, f.ks, f.st, f.dl, f.padding, f.out_shape))
    return km, ms, host, (mgr, s, out, fwd)


# ---- main --------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--data-dir", default=None,
                    help="folder holding bench/ (default $VOXCONV_DATA_DIR, else "
                         "../shared/data beside the repository)")
    ap.add_argument("--subsample", type=int, default=1,
                    help="keep every n-th point of workload A before voxelizing (CPU smoke "
                         "test; default 1 = the real level 0)")
    ap.add_argument("--repeat", type=int, default=None, help="timed rounds (GPU 20, CPU 5)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed rounds (GPU 3, CPU 1)")
    ap.add_argument("--paths", default="C,manager",
                    help="comma list of C, manager (default both)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    dev = args.device or ("cuda" if torch.cuda.is_available() and voxconv.has_cuda()
                          else "cpu")
    args.device = resolve_device(ap, dev)
    cuda = args.device.type == "cuda"
    args.repeat = args.repeat if args.repeat is not None else (20 if cuda else 5)
    args.warmup = args.warmup if args.warmup is not None else (3 if cuda else 1)
    if args.repeat < 1 or args.warmup < 1 or args.subsample < 1:
        ap.error("--repeat, --warmup and --subsample want at least 1")
    if cuda and args.repeat < 10:
        progress(f"note: --repeat {args.repeat}: BENCHMARKS.md asks for the median of >= 10")
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not args.paths or any(p not in ("C", "manager") for p in args.paths):
        ap.error("--paths: want a subset of C,manager")
    args.data_dir = args.data_dir or os.environ.get(
        "VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
    return args


def level0(data_dir, device, subsample):
    pts = tb.workload_a_points(data_dir)
    if subsample > 1:
        pts = pts[::subsample].copy()
    coords, _, _ = voxconv.voxelize(torch.from_numpy(pts).to(device), 0.1, origin=A_ORIGIN,
                                    grid_size=A_GRID, reduce="first", n_feat=3)
    return coords.contiguous()


def ratio(a, b):
    return a / b if a and b else None


def main(argv=None):
    args = parse_args(argv)
    # The manager path must build on the stream the events are recorded on.
    os.environ["VOXCONV_MAP_STREAM"] = "0"
    cuda = args.device.type == "cuda"
    clock = Clock(args.device)
    coords = level0(args.data_dir, args.device, args.subsample)
    n = coords.shape[0]
    if args.subsample == 1 and n != tb.A_VOXELS:
        fail(f"workload A level 0 has {n} voxels, BENCHMARKS.md says {tb.A_VOXELS}")
    rec = {**run_header("bench/kmap_bench.py", args.device, REPO),
           "input": {"workload": "A level 0", "voxels": n, "subsample": args.subsample},
           "protocol": {"repeat": args.repeat, "warmup": args.warmup, "clock": clock.name,
                        "order": "round-robin over the variants within each round",
                        "manager_path": "fresh CoordinateManager per build, "
                                        "VOXCONV_MAP_STREAM=0"},
           "rows": [], "ratios": {}}
    progress(f"device {rec['device_name']}; {n:,} voxels; {args.repeat} timed rounds after "
             f"{args.warmup} warm-up; clock {clock.name}")

    geos = geometries()
    jobs = [(g, p) for p in args.paths for g in geos]
    if "manager" in args.paths:
        hit = [g for g in geos if g.name == "expanding k3 s2 p1"][0]
        jobs.append((hit, "cache hit"))
    samples = {(g.name, p): [] for g, p in jobs}
    seen = {(g.name, p): {} for g, p in jobs}  # counts per job
    ids = set()
    for rnd in range(args.warmup + args.repeat):
        for g, p in jobs:
            km, ms, host, keep = measure(clock, args.device, coords, g, p)
            counts = (km.n_in, km.n_out, km.n_pairs)
            if p != "cache hit":
                if km.id in ids:
                    fail(f"{g.name} ({p}): the build returned a map seen before "
                         f"(#{km.id}): a cache hit, not a build")
                ids.add(km.id)
            s = seen[(g.name, p)]
            if s.setdefault("counts", counts) != counts:
                fail(f"{g.name} ({p}): counts {counts} differ from the first round's "
                     f"{s['counts']}")
            if counts[2] <= 0 and n > 0:
                fail(f"{g.name} ({p}): no pairs")
            if rnd >= args.warmup:
                samples[(g.name, p)].append((ms, host))
            del km, keep
    results = {}
    for g, p in jobs:
        ms = [a for a, _ in samples[(g.name, p)]]
        host = [b for _, b in samples[(g.name, p)]]
        n_in, n_out, n_pairs = seen[(g.name, p)]["counts"]
        row = {"map": g.name, "path": p, **g.describe(), "n_in": n_in, "n_out": n_out,
               "n_pairs": n_pairs, "median_ms": statistics.median(ms), "min_ms": min(ms),
               "max_ms": max(ms), "host_median_ms": statistics.median(host)}
        row["suspicious"] = p != "cache hit" and row["median_ms"] < SUSPICIOUS_MS
        if row["suspicious"]:
            progress(f"warning: {g.name} ({p}) took {row['median_ms'] * 1e3:.2f} us: "
                     f"too fast for a real build")
        rec["rows"].append(row)
        results[(g.name, p)] = row

    # cross-checks between maps (same path)
    for p in args.paths:
        r = {name: results[(name, p)] for name, q in results if q == p}
        for name, row in r.items():
            if name.startswith("inverse of "):
                f = r[name[len("inverse of "):]]
                if (row["n_out"], row["n_in"], row["n_pairs"]) != (f["n_in"], f["n_out"],
                                                                   f["n_pairs"]):
                    fail(f"{name} ({p}): n_in/n_out/pairs {row['n_in']}/{row['n_out']}/"
                         f"{row['n_pairs']} are not the forward's reversed")
        a, b = r["expanding k2 s2 p0"], r["strided k2 s2"]
        if (a["n_out"], a["n_pairs"]) != (b["n_out"], b["n_pairs"]):
            fail(f"expanding k2 s2 p0 ({p}) has {a['n_out']} outputs / {a['n_pairs']} pairs, "
                 f"strided k2 s2 {b['n_out']} / {b['n_pairs']}: they should be the same map")

    # table
    unit = "GPU ms (events)" if cuda else "ms (perf_counter)"
    print(f"\nkernel map builds, workload A level 0 ({n:,} voxels), {rec['device_name']}, "
          f"median of {args.repeat}")
    print(f"{'map':32s} {'path':9s} {'n_out':>10s} {'pairs':>11s} {unit:>17s} "
          f"{'min':>8s} {'host ms':>8s}")
    for row in rec["rows"]:
        print(f"{row['map']:32s} {row['path']:9s} {row['n_out']:10,d} {row['n_pairs']:11,d} "
              f"{row['median_ms']:17.4f} {row['min_ms']:8.4f} {row['host_median_ms']:8.4f}"
              + ("  SUSPICIOUS" if row["suspicious"] else ""))

    print("\nratios (median / median):")
    pairs = [("expanding k3 s2 p1", "strided k2 s2", "target (a): <= 1.5"),
             ("expanding k3 s2 p1", "strided k3 s2", ""),
             ("expanding k3 s2 p1 unbounded", "expanding k3 s2 p1", "cost of the bound"),
             ("expanding k2 s2 p0", "strided k2 s2", "same map, two modes"),
             ("inverse of expanding k3 s2 p1", "expanding k3 s2 p1", ""),
             ("inverse of strided k3 s2", "strided k3 s2", ""),
             ("inverse of expanding k2 s2 p0", "expanding k2 s2 p0", "")]
    for p in args.paths:
        for a, b, note in pairs:
            q = ratio(results[(a, p)]["median_ms"], results[(b, p)]["median_ms"])
            key = f"{a} / {b} ({p})"
            rec["ratios"][key] = q
            print(f"  {key:72s} {q:7.3f}" + (f"   {note}" if note else ""))
    target = {}
    for p in args.paths:
        q = rec["ratios"][f"expanding k3 s2 p1 / strided k2 s2 ({p})"]
        target[p] = {"ratio": q, "limit": 1.5, "pass": q is not None and q <= 1.5}
    rec["target_a"] = {"what": "expanding k3 s2 p1 (spconv SparseConv3d, out_shape) build "
                               "time / strided k2 s2 (workload A's pooling map)",
                       "on_gpu": cuda, "full_level0": args.subsample == 1, **target}
    print("\ntarget (a), expanding k3 s2 p1 <= 1.5 x strided k2 s2: " + ", ".join(
        f"{p} {t['ratio']:.3f} {'PASS' if t['pass'] else 'FAIL'}" for p, t in target.items())
        + ("" if cuda and args.subsample == 1 else
           "  (not the target's measurement: it is defined on the GPU, full level 0)"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)
        progress(f"wrote {args.json}")


if __name__ == "__main__":
    main()
