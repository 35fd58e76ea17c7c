#!/usr/bin/env python3
"""BENCHMARKS.md workload F: the PyTorch path next to the C path, on the
same device, in one run, for workloads A, B and C.

* C path: the `voxconv bench --workload A|B|C --json` tool (tools/bench.c),
  run as a subprocess with this script's repeat/warm-up/settle settings,
  its JSON parsed; for workload C one tool run per channel count, right
  before that count's PyTorch rows, and both sides idle --pass-idle-ms
  (1 s) before each row's warm-up (the tool's --pass-idle-ms), so that
  every row of either path starts from an idle GPU's power state: the
  power cap lowers the clock after a C = 256 load, and without the idle a
  row's time depended on which row ran before it (s24: the PyTorch C =
  256 forward 3.04-3.07 ms right after the tool's back-to-back series,
  against the tool's 2.88 measured first). --pass-preheat-ms N (both
  sides, default 0) also runs each row untimed for N ms after its warm-ups:
  the timed runs then all see the sustained, power-capped clock instead of
  dropping to it part-way through the series (C = 256 forward + backward).
* PyTorch path: workload A's network written with voxconv.nn modules
  (SparseConv3d(bias=False) x 2 per level, SparseMaxPool3d(2, 2) between
  levels, 7 levels 64..256 channels), a fresh voxconv.SparseTensor per call
  from the same coordinates and features, so the kernel maps are built
  inside the timed forward; "forward" runs under torch.no_grad(), "forward
  + backward" builds the graph and back-propagates a random output gradient
  (gradients for the input features and every weight, as the tool's
  backward); the tool's "forward + backward" is its back-to-back series
  (fwd_bwd_ms: forward then backward between one pair of events, as
  PyTorch runs them; a tool without it falls back to the sum), the sum of
  its separate forward and backward series kept as fwd_bwd_sum_ms
  (docs/perf-notes.md item 112). Where torch has the switch (2.0 and
  later, CUDA), the forward + backward is timed again with the backward on
  the calling thread (voxconv.caller_thread_backward; row "fwd+bwd,
  caller-thread bwd"). Workload B: the same network on spconv-basic's voxels
  ((b, z, y, x) rows reordered to (b, x, y, z), as the tool does). Workload
  C: one SparseConv3d subm 3^3 per channel count on A's level-0
  coordinates, one SparseTensor reused across calls (map cached): forward,
  and forward + backward (dgrad + wgrad); the tool's "forward + backward"
  is its conv_fwd_bwd row (the three passes back to back, one series, as
  PyTorch runs them); the sum of its three separately timed passes, which
  the power cap makes smaller, is kept as c_fwd_bwd_sum_ms.
* --int8: workload C's layer also through voxconv.quantization (int8
  layer calibrated on its input, the output in the run's dtype from the
  library's epilogue), forward under torch.inference_mode(), next to
  `voxconv bench --workload C --dtype i8` (int8 in and out): rows "C=N
  int8 forward" (float input, quantised per call by voxconv_quantize) and
  "C=N int8 fwd, int8 in" (int8 features, as an int8 pipeline carries
  them; the tool's row writes int8, this one the run's float dtype).
* Host time to issue one layer's forward from Python: perf_counter around
  each of --host-calls calls of the C = 64 layer (map cached) while the GPU
  is held busy by a sleep kernel queued first, so no call can wait for the
  GPU; checked afterwards (the sleep must still be running when the last
  call returns). On the CPU: the wall time of a call on a 64-voxel input.

Protocol (BENCHMARKS.md): CUDA events around the Python calls with one
synchronisation after each run (as the tool's end-to-end runs), --warmup
runs first (the autotuner runs there), then --settle-ms idle when the
autotuner ran in them, as the tool does (the H200's power cap lowers the
clock for about a second after a tuning burst; torch_bench tells by the
tuning cache file changing, see measure()), then the median of --repeat
runs. On the CPU the host clock. Voxel counts of the
two paths are compared (per level for A and B) and a difference is fatal.

    # GPU: everything, ~2-4 minutes on an H100/H200 with an empty tuning cache
    python3 bench/torch_bench.py --json torch_bench.json
    # CPU smoke test (subsampled inputs)
    /usr/bin/python3 bench/torch_bench.py --device cpu --small --repeat 1 --warmup 1

--small subsamples A's points (1/256) and B's voxels (1/32); both paths then
voxelize the same subsample through the tool's --scan rules. Workload C's
tool input cannot be reduced, so under --small its two paths time
different inputs (the JSON says same_input: false).
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from bench_common import resolve_device, run_header  # noqa: E402  (bench/ is the script folder)
try:
    import voxconv
except ImportError:  # run from a source tree without installing
    sys.path.insert(0, os.path.join(REPO, "python"))
    import voxconv
from voxconv import nn as vnn  # noqa: E402
from voxconv import quantization as Q  # noqa: E402

LEVEL_CHANNELS = [64, 96, 128, 160, 192, 224, 256]  # BENCHMARKS.md workload A
A_VOXELS = 913903
# A's voxels: batch 0 in the 1600 x 1600 x 80 grid (the tool gives its
# level-0 strided build the same box, tools/bench.c build_map)
A_BOUNDS = ((0, 0, 0, 0), (0, 1599, 1599, 79))
B_VOXELS = 125562
A_NEIGHBOURS = 7676993 / A_VOXELS  # pairs per voxel of A's level-0 subm3 map
SMALL_A_STRIDE, SMALL_B_STRIDE = 256, 32
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def progress(msg):
    print(f"[torch_bench] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"torch_bench: error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


# ---- inputs ------------------------------------------------------------------------

def workload_a_points(data_dir):
    """BENCHMARKS.md workload A's points, exactly as tools/bench.c builds
    them: 8 copies, copy c shifted +c m in y (float32 arithmetic), cropped
    to [-80,80) x [-80,80) x [-2,6), copies in order."""
    path = os.path.join(data_dir, "bench", "spconv_benchmark_pc.xyz.f32.bin")
    if not os.path.exists(path):
        fail(f"{path} not found (--data-dir or $VOXCONV_DATA_DIR: the folder holding bench/)")
    pc = np.fromfile(path, dtype="<f4").reshape(-1, 3)
    copies = []
    for c in range(8):
        p = pc.copy()
        p[:, 1] += np.float32(c)
        keep = ((p[:, 0] >= -80) & (p[:, 0] < 80) & (p[:, 1] >= -80) & (p[:, 1] < 80)
                & (p[:, 2] >= -2) & (p[:, 2] < 6))
        copies.append(p[keep])
    return np.ascontiguousarray(np.concatenate(copies))


def workload_b_voxels(data_dir):
    """spconv-basic: int32 rows (b, z, y, x) -> (b, x, y, z) as the tool
    reorders them; float32 x 3 features."""
    cpath = os.path.join(data_dir, "bench", "spconv_basic.bzyx.i32.bin")
    fpath = os.path.join(data_dir, "bench", "spconv_basic.feat3.f32.bin")
    for p in (cpath, fpath):
        if not os.path.exists(p):
            fail(f"{p} not found (--data-dir or $VOXCONV_DATA_DIR: the folder holding bench/)")
    bzyx = np.fromfile(cpath, dtype="<i4").reshape(-1, 4)
    feats = np.fromfile(fpath, dtype="<f4").reshape(-1, 3)
    if len(bzyx) != len(feats):
        fail(f"{cpath} has {len(bzyx)} rows but {fpath} {len(feats)}")
    return np.ascontiguousarray(bzyx[:, [0, 3, 2, 1]]), feats


def voxelize_as_tool_scan(points, voxel, device):
    """The tool's `--scan` input rule (prepare_scan in tools/bench.c):
    origin = the points' min corner, no grid bound, first point per cell,
    features x, y, z. Returns (coords, feats float32) on device."""
    origin = tuple(float(v) for v in points.min(0))
    coords, feats, _ = voxconv.voxelize(torch.from_numpy(points).to(device), voxel,
                                        origin=origin, reduce="first", n_feat=3)
    return coords, feats


def write_points(points, directory, name):
    path = os.path.join(directory, name)
    np.ascontiguousarray(points, dtype="<f4").tofile(path)
    return path


# ---- the C path --------------------------------------------------------------------

def default_tool():
    """The tool beside the library this process loaded, else build-gpu/,
    build-cuda/, build/ of this tree (the first that exists)."""
    cands = [os.path.join(os.path.dirname(os.path.realpath(voxconv.library_path)), "voxconv")]
    cands += [os.path.join(REPO, d, "voxconv") for d in ("build-gpu", "build-cuda", "build")]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def run_tool(args, tool_args, data_dir, dtype=None):
    """Runs `voxconv bench <tool_args> --json` with this run's device and
    protocol (and dtype, unless `dtype` says another: "i8" for the int8
    rows); returns its parsed JSON. The tool's progress lines are shown as
    they come; its table (stderr under --json) only on failure."""
    cmd = [args.tool, "bench", *tool_args, "--json", "--dtype", dtype or args.dtype,
           "--repeat", str(args.repeat), "--warmup", str(args.warmup),
           "--settle-ms", str(args.settle_ms), *args.tool_arg]
    if args.device.type == "cuda":
        cmd += ["--backend", "cuda", "--device", str(args.device.index or 0)]
    else:
        cmd += ["--backend", "cpu"]
    progress("C path: " + " ".join(cmd))
    env = dict(os.environ, VOXCONV_DATA_DIR=data_dir)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err_lines = []

    def pump():
        for line in p.stderr:
            err_lines.append(line)
            if line.startswith("[bench]") or "WARNING" in line or "warning" in line:
                print("    " + line.rstrip(), file=sys.stderr, flush=True)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    out = p.stdout.read()
    rc = p.wait()
    t.join()
    if rc != 0:
        fail(f"{' '.join(cmd)} exited with {rc}:\n{''.join(err_lines[-40:])}")
    try:
        return json.loads(out), cmd
    except json.JSONDecodeError as e:
        fail(f"{' '.join(cmd)}: output is not JSON ({e}):\n{out[:2000]}")


def tool_level_counts(tool_json):
    """Voxels per level of the tool's network run: level 0, then each max
    pool's output."""
    layers = tool_json.get("layers", [])
    counts = [l["n_in"] for l in layers if l["layer"] == "L0.conv1" and l["op"] == "conv_fwd"]
    counts += [l["n_out"] for l in layers if l["op"] == "maxpool_fwd"]
    return counts


# ---- the PyTorch path --------------------------------------------------------------

def workload_a_net(device, dtype):
    layers, cin = [], 3
    for level, c in enumerate(LEVEL_CHANNELS):
        layers += [vnn.SparseConv3d(cin, c, 3, bias=False), vnn.SparseConv3d(c, c, 3, bias=False)]
        if level + 1 < len(LEVEL_CHANNELS):
            layers.append(vnn.SparseMaxPool3d(2, 2))
        cin = c
    return nn.Sequential(*layers).to(device=device, dtype=dtype)


def rms(t):
    return float(t.float().pow(2).mean().sqrt())


@torch.no_grad()
def scale_and_count(net, coords, feats):
    """Untimed: scales every conv's weights so that its output has the rms of
    its input (as the tool's variance-preserving init: fp16 activations stay
    O(1) through 14 layers instead of decaying into subnormals), and returns
    the voxel count of every level."""
    for m in net:
        if isinstance(m, vnn.SparseConv3d):
            bound = (3.0 / (A_NEIGHBOURS * m.in_channels)) ** 0.5
            nn.init.uniform_(m.weight, -bound, bound)
    x = voxconv.SparseTensor(feats, coords)
    counts = [len(x)]
    for m in net:
        y = m(x)
        if isinstance(m, vnn.SparseConv3d):
            r = rms(y.feats)
            if r > 0:
                m.weight.mul_(rms(x.feats) / r)
                y = m(x)
        else:
            counts.append(len(y))
        x = y
    return counts


class Timer:
    """CUDA events around the Python calls on a GPU (one sync after each
    run, like the tool's end-to-end runs), the host clock on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.device = device

    @property
    def clock(self):
        return "cuda_events" if self.cuda else "perf_counter"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def run(self, fn):
        """(ms of fn, host ms of dropping what fn returned). The result --
        the network's output, which holds its coordinate sets and maps --
        is dropped after the clock stops, as the tool releases its maps
        after its timed runs (tools/bench.c release_maps); its teardown is
        timed on its own."""
        self.sync()
        if self.cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            out = fn()
            e.record()
            e.synchronize()
            ms = s.elapsed_time(e)
        else:
            t = time.perf_counter()
            out = fn()
            ms = 1e3 * (time.perf_counter() - t)
        t = time.perf_counter()
        del out
        return ms, 1e3 * (time.perf_counter() - t)


def spin(ms):
    """ms of GPU idle with this host thread running (see settle)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def settle(args):
    """--settle-ms of GPU idle. --settle-host spin (default) keeps this
    thread running meanwhile: after a sleeping settle the first Python-issued
    runs came back slow and took ~10 runs to recover (H100, eighteenth
    session: C = 64 forward runs 2.40, 1.01, 0.90 ... 0.75 ms against
    0.52 ms queued; A forward 9.1 falling to 6.0 ms), the host thread's
    warm-up, not the GPU's. A training loop never idles its host that way.
    --settle-host sleep is the old behaviour."""
    if args.settle_host == "sleep":
        time.sleep(args.settle_ms / 1e3)
        return
    spin(args.settle_ms)


def tuning_cache_stamp():
    """(mtime_ns, size) of the tuning cache file once this process's
    unsaved results are written (voxconv_cache_flush), None when it cannot
    be told. A stamp that changes across a warm-up means the autotuner ran
    in it."""
    cdll = voxconv._lib.lib.cdll
    buf = ctypes.create_string_buffer(4096)
    if (cdll.voxconv_cache_flush() != 0
            or cdll.voxconv_cache_path(buf, ctypes.c_size_t(len(buf))) != 0):
        return None
    try:
        st = os.stat(buf.value.decode())
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def host_probe_us(reps=7):
    """How fast this host runs Python right now: the fastest of `reps`
    timings of a fixed pure-Python loop, in us. The lent hosts switch
    between a fast and a slower state, between processes and within one
    (s25 calls 3-4: the host time of a layer call 17.5-18.1 us in some
    processes, 26.6-29.1 in others, pinned or not; this probe ~290-320 us
    against ~500-650 on the H200's host); the PyTorch rows,
    whose host work is on the critical path, follow it. Recorded with
    every PyTorch row, so that a ratio can be read with its host state."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        d = {}
        for i in range(4000):
            d[i & 63] = d.get(i & 31, 0) + i
        best = min(best, time.perf_counter() - t)
    return 1e6 * best


def preheat(timer, fn, before, ms):
    """--pass-preheat-ms: fn run untimed for ms, each run as a timed one
    (events, a wait at its end), right before the timed runs, as the
    tool's --pass-preheat-ms: the timed runs then all see the sustained
    clock (see parse_args). Returns the runs made."""
    end, n = time.perf_counter() + ms / 1e3, 0
    while time.perf_counter() < end:
        if before:
            before()
        timer.run(fn)
        n += 1
    return n


def measure(timer, fn, args, what, before=None, idle_ms=0, preheat_ms=0):
    """first call (wall, to completion: tuning included when the cache is
    cold), further warm-ups, settle, then --repeat timed runs. The settle
    only follows a warm-up in which the autotuner ran (the tuning cache
    changed, or it cannot be told), as the tool's settle does: an idle
    before the timed runs costs them a ramp-up of their own (C = 64
    forward+backward runs 4.71, 2.66, 1.94, then 1.79-1.91 ms after the
    settle, eighteenth session)."""
    stamp = tuning_cache_stamp() if args.settle_ms and timer.cuda else None
    if before:
        before()
    timer.sync()
    if idle_ms and timer.cuda:  # --pass-idle-ms: start from an idle GPU
        spin(idle_ms)
    t = time.perf_counter()
    fn()
    timer.sync()
    first_ms = 1e3 * (time.perf_counter() - t)
    for _ in range(args.warmup - 1):
        if before:
            before()
        fn()
    timer.sync()
    settled = False
    if args.settle_ms and timer.cuda and (stamp is None or tuning_cache_stamp() != stamp):
        settle(args)
        settled = True
    preheat_runs = preheat(timer, fn, before, preheat_ms) if preheat_ms and timer.cuda else 0
    runs, teardown = [], []
    for _ in range(args.repeat):
        if before:
            before()
        ms, td = timer.run(fn)
        runs.append(ms)
        teardown.append(td)
    probe = host_probe_us() if timer.cuda else None
    med = statistics.median(runs)
    td = statistics.median(teardown)
    progress(f"PyTorch {what}: median {med:.3f} ms (first call {first_ms:.1f} ms; "
             f"dropping the result afterwards {td:.3f} ms of host time)")
    return {"first_call_ms": first_ms, "ms": med, "ms_min": min(runs), "runs_ms": runs,
            "teardown_host_ms": td, "settled": settled, "preheat_runs": preheat_runs,
            "host_probe_us": probe}


def torch_network(args, timer, coords, feats, bounds=None):
    """Workload A's network from Python on these voxels (A or B); bounds:
    the voxels' box when the tool knows it too (A's grid: its first
    strided map sorts compact keys in both paths)."""
    dtype = DTYPES[args.dtype]
    net = workload_a_net(args.device, dtype)
    feats = feats.to(dtype)
    counts = scale_and_count(net, coords, feats)
    leaf = feats.detach().clone().requires_grad_()
    g = torch.Generator(device=args.device).manual_seed(args.seed)
    dy = (torch.rand(counts[-1], LEVEL_CHANNELS[-1], device=args.device, generator=g)
          * 2 - 1).to(dtype)

    def forward():
        with torch.no_grad():
            return net(voxconv.SparseTensor(feats, coords, bounds=bounds))

    def forward_backward(caller=False):
        """caller: the backward on this thread (item 112)"""
        y = net(voxconv.SparseTensor(leaf, coords, bounds=bounds))
        with voxconv.caller_thread_backward(caller):
            y.feats.backward(dy)
        return y

    def clear_grads():  # outside the timed region: no accumulation into old grads
        leaf.grad = None
        for p in net.parameters():
            p.grad = None

    fwd = measure(timer, forward, args, "forward")
    fb = measure(timer, forward_backward, args, "forward+backward", before=clear_grads)
    fbc = None
    if timer.cuda and hasattr(torch.autograd, "set_multithreading_enabled"):
        fbc = measure(timer, lambda: forward_backward(caller=True), args,
                      "forward+backward (backward on the calling thread)", before=clear_grads)
    return counts, fwd, fb, fbc


def torch_layer(args, timer, coords, channels):
    """Workload C: one subm3 conv, SparseTensor reused (map cached)."""
    dtype = DTYPES[args.dtype]
    g = torch.Generator(device=args.device).manual_seed(args.seed + channels)
    conv = vnn.SparseConv3d(channels, channels, 3, bias=False).to(args.device, dtype)
    bound = (3.0 / (A_NEIGHBOURS * channels)) ** 0.5
    with torch.no_grad():  # the tool's scale: uniform +-sqrt(3 / (pairs/N * C))
        conv.weight.copy_((torch.rand(conv.weight.shape, device=args.device, generator=g)
                           * 2 - 1) * bound)
    feats = ((torch.rand(len(coords), channels, device=args.device, generator=g) * 2 - 1)
             .to(dtype).requires_grad_())
    dy = (torch.rand(len(coords), channels, device=args.device, generator=g) * 2 - 1).to(dtype)
    x = voxconv.SparseTensor(feats, coords)

    def forward():
        with torch.no_grad():
            return conv(x)

    def forward_backward():
        y = conv(x)
        y.feats.backward(dy)
        return y

    def clear_grads():
        feats.grad = None
        conv.weight.grad = None

    fwd = measure(timer, forward, args, f"C={channels} forward", idle_ms=args.pass_idle_ms,
                  preheat_ms=args.pass_preheat_ms)
    fb = measure(timer, forward_backward, args, f"C={channels} forward+backward",
                 before=clear_grads, idle_ms=args.pass_idle_ms,
                 preheat_ms=args.pass_preheat_ms)
    return conv, x, fwd, fb


def torch_layer_int8(args, timer, conv, x, channels):
    """--int8: the same layer through voxconv.quantization (calibrated on x,
    min/max), forward under torch.inference_mode(): each call quantises
    the float input (quantize_tensor), runs the library's int8 op and
    writes the output in the run's dtype (f32 on the CPU) from the
    epilogue -- what a PyTorch user of a quantized model runs."""
    out = DTYPES[args.dtype] if args.dtype in ("f16", "bf16") else torch.float32
    q = Q.quantize(conv, [x], out_dtype=out)
    # int8 features as an int8 pipeline carries them (taken at the layer's
    # x_scale): the library's int8 op alone, as the tool times it
    xq = voxconv.SparseTensor._wrap(Q.quantize_tensor(x.feats, q.x_scale), x._set)

    def forward():
        with torch.inference_mode():
            return q(x)

    def forward_int8_in():
        with torch.inference_mode():
            return q(xq)

    return (measure(timer, forward, args, f"C={channels} int8 forward"),
            measure(timer, forward_int8_in, args, f"C={channels} int8 forward, int8 in"))


def gpu_sleep(ms, device):
    """Queues about `ms` of GPU work that needs no host: torch.cuda._sleep
    (a spin kernel, calibrated here), else a chain of matmuls."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        sleep(1_000_000)
        e.record()
        e.synchronize()
        cycles_per_ms = 1_000_000 / max(s.elapsed_time(e), 1e-3)
        sleep(int(ms * cycles_per_ms))
        return
    a = torch.randn(4096, 4096, device=device, dtype=torch.float16)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    a @ a
    e.record()
    e.synchronize()
    for _ in range(int(ms / max(s.elapsed_time(e), 1e-3)) + 1):
        a @ a


def host_issue_time(args, conv, x):
    """Median host time of one layer-forward call from Python, the GPU
    kept busy (see the module doc)."""
    out = {"calls": args.host_calls, "channels": conv.in_channels}
    for mode in ("no_grad", "grad"):
        ctx = torch.no_grad() if mode == "no_grad" else torch.enable_grad()
        with ctx:
            conv(x)
            if args.device.type == "cuda":
                torch.cuda.synchronize(args.device)
                # longer than all the calls' host time together, by far
                gpu_sleep(max(500.0, 5.0 * args.host_calls), args.device)
                busy = torch.cuda.Event()
                busy.record()
            times = []
            for _ in range(args.host_calls):
                t = time.perf_counter()
                y = conv(x)
                times.append(1e6 * (time.perf_counter() - t))
                del y
            still_busy = not busy.query() if args.device.type == "cuda" else None
            if args.device.type == "cuda":
                torch.cuda.synchronize(args.device)
        out[f"forward_{mode}_us"] = statistics.median(times)
        out[f"forward_{mode}_runs_us"] = times
        if still_busy is not None:
            out[f"forward_{mode}_gpu_busy_throughout"] = still_busy
            if not still_busy:
                progress(f"warning: the GPU drained during the {mode} host-time calls: they "
                         f"waited for it somewhere (a synchronising call?); times include GPU "
                         f"time")
    out["host_probe_us"] = host_probe_us()
    out["method"] = ("perf_counter per call while a sleep kernel queued first keeps the GPU busy"
                     if args.device.type == "cuda" else
                     "perf_counter per call (CPU: includes the compute on this input)")
    progress(f"host time per layer forward: {out['forward_no_grad_us']:.1f} us (no_grad), "
             f"{out['forward_grad_us']:.1f} us (grad); host probe {out['host_probe_us']:.0f} us")
    return out


# ---- driver ------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if seen)")
    ap.add_argument("--tool", default=None,
                    help="the voxconv tool (default: beside the loaded library, else "
                         "build-gpu/, build-cuda/, build/)")
    ap.add_argument("--no-tool", action="store_true", help="time the PyTorch path only")
    ap.add_argument("--tool-arg", action="append", default=[],
                    help="extra argument for every `voxconv bench` run (repeatable), e.g. "
                         "--tool-arg=--maps --tool-arg=serial")
    ap.add_argument("--workloads", default="A,B,C", help="subset of A,B,C (default all)")
    ap.add_argument("--channels", default=None,
                    help="workload C channel counts (default 32,64,128,256; --small 8)")
    ap.add_argument("--dtype", choices=list(DTYPES), default=None,
                    help="default f16 on CUDA (BENCHMARKS.md), f32 on the CPU")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed runs, median reported (default 10 CUDA, 3 CPU)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed runs first, >= 1 (default 3 CUDA, 1 CPU)")
    ap.add_argument("--settle-host", choices=("spin", "sleep"), default="spin",
                    help="what this (host) thread does during --settle-ms: spin (default) "
                         "or sleep (see settle())")
    ap.add_argument("--settle-ms", type=int, default=None,
                    help="idle after the warm-ups (default 2000 on CUDA, 0 on the CPU)")
    ap.add_argument("--pass-idle-ms", type=int, default=None,
                    help="workload C: idle before each row's warm-up, here and in the "
                         "tool (its --pass-idle-ms), so both paths' rows start from an "
                         "idle GPU's power state (default 1000 on CUDA, 0 on the CPU)")
    ap.add_argument("--pass-preheat-ms", type=int, default=0,
                    help="workload C: after each row's warm-ups, run it untimed for this "
                         "long, here and in the tool (its --pass-preheat-ms), so that every "
                         "timed run sees the sustained, power-capped clock: a C = 256 "
                         "forward + backward series otherwise drops clock after ~6 runs on "
                         "both paths and its median says where the drop fell (default 0)")
    ap.add_argument("--host-calls", type=int, default=200,
                    help="calls timed for the host issue time (default 200)")
    ap.add_argument("--small", action="store_true",
                    help="subsampled inputs (CPU smoke test; see the module doc)")
    ap.add_argument("--data-dir", default=None,
                    help="folder holding bench/ (default $VOXCONV_DATA_DIR, else ../shared/data "
                         "beside the repository)")
    ap.add_argument("--int8", action="store_true",
                    help="workload C also through voxconv.quantization (int8 layer, float "
                         "input quantised per call) next to `voxconv bench --dtype i8`")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None, help="write everything here")
    args = ap.parse_args(argv)
    dev = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.device = resolve_device(ap, dev)
    cuda = args.device.type == "cuda"
    args.workloads = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    if not args.workloads or any(w not in ("A", "B", "C") for w in args.workloads):
        ap.error("--workloads: want a subset of A,B,C")
    try:
        args.channels = [int(c) for c in (args.channels or
                                          ("8" if args.small else "32,64,128,256")).split(",")]
    except ValueError:
        ap.error("--channels: want comma-separated integers")
    if not args.channels or min(args.channels) < 1 or max(args.channels) > 4096:
        ap.error("--channels: want counts in 1..4096")
    args.dtype = args.dtype or ("f16" if cuda else "f32")
    args.repeat = args.repeat if args.repeat is not None else (10 if cuda else 3)
    args.warmup = args.warmup if args.warmup is not None else (3 if cuda else 1)
    args.settle_ms = args.settle_ms if args.settle_ms is not None else (2000 if cuda else 0)
    args.pass_idle_ms = (args.pass_idle_ms if args.pass_idle_ms is not None
                         else (1000 if cuda else 0))
    if args.pass_idle_ms < 0:
        ap.error("--pass-idle-ms: want >= 0")
    if not 0 <= args.pass_preheat_ms <= 60000:
        ap.error("--pass-preheat-ms: want 0..60000 (the tool's range)")
    if args.repeat < 1:
        ap.error("--repeat: want at least 1")
    if args.warmup < 1:
        ap.error("--warmup: want at least 1 (the first call builds and tunes)")
    if args.settle_ms < 0 or args.host_calls < 1:
        ap.error("--settle-ms >= 0 and --host-calls >= 1, please")
    if cuda and args.repeat < 10:
        progress(f"note: --repeat {args.repeat}: BENCHMARKS.md asks for the median of >= 10")
    args.data_dir = args.data_dir or os.environ.get(
        "VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
    if args.no_tool:
        args.tool = None
    else:
        args.tool = args.tool or default_tool()
        if args.tool is None:
            progress("no voxconv tool found (build it, or pass --tool); C path skipped")
        elif not (os.path.isfile(args.tool) and os.access(args.tool, os.X_OK)):
            ap.error(f"--tool {args.tool}: not an executable file")
    return args


def check_counts(what, mine, theirs):
    if mine != theirs:
        fail(f"workload {what}: the PyTorch path has {mine} voxels per level but the tool "
             f"{theirs}: the two paths do not time the same input")


def ratio(a, b):
    return a / b if a and b else None


def main(argv=None):
    args = parse_args(argv)
    cuda = args.device.type == "cuda"
    timer = Timer(args.device)
    rec = {**run_header("bench/torch_bench.py", args.device, REPO),
           "custom_ops": voxconv.custom_ops_enabled(),
           "tool": {"path": args.tool}, "dtype": args.dtype, "small": args.small,
           "protocol": {"repeat": args.repeat, "warmup": args.warmup,
                        "settle_ms": args.settle_ms, "settle_host": args.settle_host,
                        "pass_idle_ms": args.pass_idle_ms,
                        "pass_preheat_ms": args.pass_preheat_ms,
                        "clock": timer.clock,
                        "forward": "torch.no_grad(), fresh SparseTensor per call (A, B); "
                                   "SparseTensor reused (C)",
                        "forward_backward": "forward with autograd + backward of a random "
                                            "output gradient (input and weight gradients)",
                        "teardown": "the output (with its coordinate sets and kernel maps) "
                                    "is dropped after the end event, as the tool releases "
                                    "its maps after its timed runs; its host time is "
                                    "teardown_host_ms"},
           "workloads": {}, "rows": []}
    progress(f"device {rec['device_name']}; torch {torch.__version__}; voxconv "
             f"{rec['voxconv']} ({voxconv.library_path}); tool {args.tool}; dtype {args.dtype}")
    rows = rec["rows"]
    tmp = tempfile.TemporaryDirectory(prefix="torch_bench_")
    a_coords = None

    def add_row(name, c_ms, t, same_input=True):
        rows.append({"name": name, "c_ms": c_ms, "torch_ms": t["ms"],
                     "ratio": ratio(t["ms"], c_ms), "same_input": same_input,
                     "host_probe_us": t.get("host_probe_us")})

    def load_a():
        pts = workload_a_points(args.data_dir)
        if args.small:
            pts = np.ascontiguousarray(pts[::SMALL_A_STRIDE])
            coords, feats = voxelize_as_tool_scan(pts, 0.1, args.device)
        else:
            coords, feats, _ = voxconv.voxelize(
                torch.from_numpy(pts).to(args.device), 0.1, origin=(-80.0, -80.0, -2.0),
                grid_size=(1600, 1600, 80), reduce="first", n_feat=3)
            if len(coords) != A_VOXELS:
                progress(f"warning: workload A gave {len(coords)} voxels, BENCHMARKS.md "
                         f"expects {A_VOXELS}")
            return pts, coords, feats, A_BOUNDS
        return pts, coords, feats, None

    for w in args.workloads:
        if w in ("A", "B"):
            if w == "A":
                pts, coords, feats, bounds = load_a()
                a_coords = coords
                tool_args = (["--scan", write_points(pts, tmp.name, "workload_a_small.bin"),
                              "--fields", "3", "--voxel", "0.1"] if args.small
                             else ["--workload", "A"])
            else:
                bxyz, bfeat = workload_b_voxels(args.data_dir)
                if args.small:
                    # integer-valued points at voxel 1.0 voxelize exactly to
                    # the rows (shifted to the min corner): the tool's --scan
                    # can take the same input
                    pts = bxyz[::SMALL_B_STRIDE, 1:].astype(np.float32)
                    coords, feats = voxelize_as_tool_scan(pts, 1.0, args.device)
                    tool_args = ["--scan", write_points(pts, tmp.name, "workload_b_small.bin"),
                                 "--fields", "3", "--voxel", "1"]
                else:
                    coords = torch.from_numpy(bxyz).to(args.device)
                    feats = torch.from_numpy(bfeat).to(args.device)
                    tool_args = ["--workload", "B"]
            progress(f"workload {w}: {len(coords)} voxels")
            entry = {"voxels": len(coords), "same_input": True}
            tj = None
            if args.tool:
                tj, cmd = run_tool(args, tool_args, args.data_dir)
                rec["tool"]["version"] = tj.get("version")
                fb_sum = tj["forward_ms"] + tj["backward_ms"]
                entry["c_path"] = {"cmd": cmd, "forward_ms": tj["forward_ms"],
                                   "backward_ms": tj["backward_ms"],
                                   "fwd_bwd_ms": tj.get("fwd_bwd_ms", fb_sum),
                                   "fwd_bwd_sum_ms": fb_sum,
                                   "tool_json": tj}
                if tj["input"]["voxels"] != len(coords):
                    check_counts(w, [len(coords)], [tj["input"]["voxels"]])
            counts, fwd, fb, fbc = torch_network(args, timer, coords, feats,
                                                 bounds if w == "A" else None)
            entry["levels"] = counts
            if tj is not None:
                check_counts(w, counts, tool_level_counts(tj))
            entry["torch"] = {"forward": fwd, "fwd_bwd": fb, "fwd_bwd_caller": fbc}
            rec["workloads"][w] = entry
            c = entry.get("c_path", {})
            add_row(f"{w} forward", c.get("forward_ms"), fwd)
            add_row(f"{w} forward+backward", c.get("fwd_bwd_ms"), fb)
            if c.get("fwd_bwd_sum_ms") != c.get("fwd_bwd_ms"):
                add_row(f"{w} fwd+bwd vs the tool's sum", c.get("fwd_bwd_sum_ms"), fb)
            if fbc is not None:
                add_row(f"{w} fwd+bwd, caller-thread bwd", c.get("fwd_bwd_ms"), fbc)
        else:  # C
            if a_coords is None:
                _, a_coords, _, _ = load_a()
            same = not args.small
            entry = {"voxels": len(a_coords), "same_input": same, "channels": {}}
            if args.tool:
                entry["c_path"] = {"runs": {}}
            layer_for_host = None
            for ch in args.channels:
                # The tool's run of this channel count comes right before
                # the PyTorch one, so both start from the GPU state the
                # same load left (one tool run for every count put the
                # PyTorch C = 64 rows behind the tool's C = 256 load, a
                # power-capped, clock-lowered GPU: s24 call 2's C = 64
                # forward runs fell 0.596 -> 0.532 ms while the tool's ran
                # first, on a cool GPU, at 0.498).
                tj = tj8 = None
                if args.tool:
                    protocol = []  # the tool's side of --pass-idle-ms / -preheat-ms
                    if args.pass_idle_ms and cuda:
                        protocol += ["--pass-idle-ms", str(args.pass_idle_ms)]
                    if args.pass_preheat_ms and cuda:
                        protocol += ["--pass-preheat-ms", str(args.pass_preheat_ms)]
                    tj, cmd = run_tool(args, ["--workload", "C", "--channels", str(ch),
                                              *protocol], args.data_dir)
                    rec["tool"]["version"] = tj.get("version")
                    run = entry["c_path"]["runs"][str(ch)] = {"cmd": cmd, "tool_json": tj}
                    if same and tj["input"]["voxels"] != len(a_coords):
                        check_counts("C", [len(a_coords)], [tj["input"]["voxels"]])
                    if args.int8:
                        tj8, cmd8 = run_tool(args, ["--workload", "C", "--channels", str(ch)],
                                             args.data_dir, dtype="i8")
                        run.update({"cmd_int8": cmd8, "tool_json_int8": tj8})
                conv, x, fwd, fb = torch_layer(args, timer, a_coords, ch)
                if layer_for_host is None or ch == 64:
                    layer_for_host = (conv, x)
                c_fwd = c_fb = c_sum = None
                if tj is not None:
                    ms = {l["op"]: l["ms"] for l in tj["layers"] if l["layer"] == f"C={ch}"}
                    c_fwd = ms.get("conv_fwd")
                    if c_fwd is not None:
                        c_sum = c_fwd + ms["conv_dgrad"] + ms["conv_wgrad"]
                        # the three passes back to back as one series, as
                        # the PyTorch row runs them (a tool without the row:
                        # the sum of the three series)
                        c_fb = ms.get("conv_fwd_bwd", c_sum)
                entry["channels"][str(ch)] = {"c_forward_ms": c_fwd, "c_fwd_bwd_ms": c_fb,
                                              "c_fwd_bwd_sum_ms": c_sum,
                                              "torch": {"forward": fwd, "fwd_bwd": fb}}
                add_row(f"C={ch} forward", c_fwd, fwd, same)
                add_row(f"C={ch} forward+backward", c_fb, fb, same)
                if args.int8:
                    i8, i8_in = torch_layer_int8(args, timer, conv, x, ch)
                    c_i8 = None
                    if tj8 is not None:
                        c_i8 = next((l["ms"] for l in tj8["layers"]
                                     if l["layer"] == f"C={ch}" and l["op"] == "conv_fwd"), None)
                    entry["channels"][str(ch)].update(
                        {"c_int8_forward_ms": c_i8, "torch_int8_forward": i8,
                         "torch_int8_forward_int8_in": i8_in,
                         "torch_int8_vs_float": ratio(fwd["ms"], i8["ms"])})
                    add_row(f"C={ch} int8 forward", c_i8, i8, same)
                    add_row(f"C={ch} int8 fwd, int8 in", c_i8, i8_in, same)
            rec["workloads"]["C"] = entry
            if cuda:
                rec["host_issue_us"] = host_issue_time(args, *layer_for_host)

    if "host_issue_us" not in rec:
        # CPU, or no workload C: a 64-voxel input, where the call's own
        # work is small next to its overhead.
        coords = torch.zeros(64, 4, dtype=torch.int32, device=args.device)
        coords[:, 1] = torch.arange(64, device=args.device)
        conv = vnn.SparseConv3d(8, 8, 3, bias=False).to(args.device, DTYPES[args.dtype])
        x = voxconv.SparseTensor(torch.rand(64, 8, device=args.device,
                                            dtype=DTYPES[args.dtype]), coords)
        rec["host_issue_us"] = host_issue_time(args, conv, x)
    tmp.cleanup()

    print(f"\n{rec['device_name']}, torch {torch.__version__}, voxconv {rec['voxconv']}, "
          f"commit {rec['commit']}, {args.dtype}, median of {args.repeat} "
          f"({timer.clock}){', --small' if args.small else ''}")
    print(f"{'workload':<24} {'C path ms':>10} {'PyTorch ms':>11} {'PyTorch/C':>10} "
          f"{'host probe us':>14}")
    for r in rows:
        c = f"{r['c_ms']:.3f}" if r["c_ms"] is not None else "-"
        rt = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        hp = f"{r['host_probe_us']:.0f}" if r["host_probe_us"] is not None else "-"
        mark = "" if r["same_input"] else "  (different inputs: --small)"
        print(f"{r['name']:<24} {c:>10} {r['torch_ms']:>11.3f} {rt:>10} {hp:>14}{mark}")
    h = rec["host_issue_us"]
    print(f"host time per layer forward call (C={h['channels']}, median of {h['calls']}): "
          f"{h['forward_no_grad_us']:.1f} us under no_grad, {h['forward_grad_us']:.1f} us with "
          f"autograd (host probe {h['host_probe_us']:.0f} us: see host_probe_us)")
    if cuda:
        # torch's allocator next to voxconv's: whether the library's block
        # cache (VOXCONV_ALLOC_CACHE_MB) made torch go back to the driver
        ms = torch.cuda.memory_stats(args.device)
        rec["torch_memory"] = {k: ms.get(k) for k in (
            "num_alloc_retries", "num_device_alloc", "num_device_free",
            "reserved_bytes.all.peak", "allocated_bytes.all.peak")}
        rec["alloc_cache_mb"] = os.environ.get("VOXCONV_ALLOC_CACHE_MB")
        print("torch allocator: " + ", ".join(f"{k} {v}" for k, v in rec["torch_memory"].items())
              + f" (VOXCONV_ALLOC_CACHE_MB={rec['alloc_cache_mb']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)
        progress(f"wrote {args.json}")
    return rec


if __name__ == "__main__":
    main()
