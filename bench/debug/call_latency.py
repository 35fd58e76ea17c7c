"""Where the host time of one cached-map conv call from PyTorch goes, piece
by piece (issue 20: <= 20 us per call, and the C = 64 single call within
1.05x of the tool).

For workload C's C = 64 layer, each of these is timed alone, as host time
(perf_counter) both hot (the GPU held busy by a sleep kernel, calls back to
back: the steady state torch_bench's host-time row measures) and cold (a
synchronisation before each call: what torch_bench's single-call layer
rows pay), median of N:
  ctypes   a trivial C call (voxconv_version_number): the ctypes floor
  empty    x.new_empty of the output: torch's allocator
  handle   _runtime.handle_for_tensor: the stream and handle lookup
  no_grad  entering and leaving torch.no_grad()
  autocast? functional._autocast when autocast is off
  geometry functional._geometry: the cached kernel-map lookup
  C call   _ops._launch of voxconv_conv_forward on a preallocated output
  op       _ops._conv_fwd (allocation + C call)
  _ops.conv, conv_geom, cached (functional.conv_cached, the modules' path once
           the map is cached), fwd raw (the module forward without its
           torch.compiler.disable wrapper), forward, module: each layer
           above the last, under no_grad
  op grad, geom grad, autograd: _ops.conv, conv_geometry and the module
           with the parameters requiring grad
Then, from torch.profiler, the CUDA runtime calls of one cold C call and
one cold module call with their offsets, so the gaps (host code between
them) can be placed. A diagnostic; the numbers to quote come from
bench/torch_bench.py.

    python3 bench/debug/call_latency.py [--data-dir D] [--calls 200]
"""
import argparse, gc, json, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402
from voxconv import _ops, _runtime, functional as F, nn as vnn  # noqa: E402
from voxconv._lib import lib  # noqa: E402


def hot(fn, calls):
    torch.cuda.synchronize()
    tb.gpu_sleep(max(300.0, 1.0 * calls), torch.device("cuda"))
    busy = torch.cuda.Event()
    busy.record()
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        y = fn()
        ts.append(1e6 * (time.perf_counter() - t))
        del y
    # every call queues real GPU work (0.5 ms at C = 64): keep --calls at a
    # few hundred, or the launch queue fills and calls wait for the GPU
    drained = busy.query()
    torch.cuda.synchronize()
    return statistics.median(ts), drained


def cold(fn, calls):
    ts, gpu = [], []
    for _ in range(calls):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t = time.perf_counter()
        y = fn()
        ts.append(1e6 * (time.perf_counter() - t))
        e.record()
        e.synchronize()
        gpu.append(s.elapsed_time(e))
        del y
    return statistics.median(ts), statistics.median(gpu)


def workload_c_layers(data_dir, channels):
    """[(conv, x)] per channel count: workload C's layer on A's level 0 as
    torch_bench's torch_layer makes it (CUDA, map cached after its short
    warm-up). Shared by the debug scripts that study one layer."""
    targs = tb.parse_args(["--data-dir", data_dir, "--repeat", "3", "--warmup", "2",
                           "--settle-ms", "0"])
    targs.device = torch.device("cuda")
    pts = tb.workload_a_points(data_dir)
    coords, _, _ = voxconv.voxelize(
        torch.from_numpy(pts).cuda(), 0.1, origin=(-80.0, -80.0, -2.0),
        grid_size=(1600, 1600, 80), reduce="first", n_feat=3)
    out = []
    for c in channels:
        conv, x, _, _ = tb.torch_layer(targs, tb.Timer(targs.device), coords, c)
        out.append((conv, x))
    return out


def layer_pieces(conv, x):
    """For layer `conv` (a submanifold 3^3 SparseConv3d) on `x`: its cached
    map, options, detached features and weight, and a function that issues
    the C call alone on a preallocated output (returned). Also used by
    layer_profile.py."""
    km, _ = x.manager.kernel_map(x.coordinate_set, voxconv._lib.KMAP_SUBMANIFOLD,
                                 (3, 3, 3), (1, 1, 1), (1, 1, 1))
    cfg = vnn._cfg(conv)
    feats, w = x.feats.detach(), conv.weight.detach()
    y_pre = _ops._conv_fwd(feats, w, km, cfg, False)
    opt = _ops._opt_ref(cfg, False)

    def c_call():
        _ops._launch(lib.voxconv_conv_forward, "voxconv_conv_forward", km, feats, w, y_pre,
                     True, False, opt)
        return y_pre
    return km, cfg, feats, w, c_call


def profiled_call(fn, trace_path, repeat=4):
    """fn run `repeat` times under torch.profiler, a synchronisation around
    each: (the trace's complete events sorted by start, start and end of
    the last run's "one_call" range). Also used by layer_profile.py."""
    from torch.profiler import profile, ProfilerActivity, record_function
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            torch.cuda.synchronize()
            with record_function("one_call"):
                y = fn()
            torch.cuda.synchronize()
            del y
    prof.export_chrome_trace(trace_path)
    with open(trace_path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    ev.sort(key=lambda e: e["ts"])
    last = [e for e in ev if e.get("name") == "one_call"][-1]
    return ev, last["ts"], last["ts"] + last["dur"]


def runtime_calls(fn, label):
    ev, a, b = profiled_call(fn, f"/tmp/call_latency_{label}.json")
    print(f"\n{label}: one cold call under the profiler, {b - a:.1f} us; CUDA runtime calls "
          f"(offset us, duration us):")
    for e in ev:
        if a <= e["ts"] <= b and e.get("cat") in ("cuda_runtime", "cuda_driver", "cpu_op"):
            print(f"    +{e['ts'] - a:7.1f}  {e['dur']:6.1f}  {e.get('cat')[:8]:8s} {e['name'][:70]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    conv, x = workload_c_layers(args.data_dir, [args.channels])[0]
    km, cfg, feats, w, c_call = layer_pieces(conv, x)
    n_out, cout = km.n_out, w.shape[2]

    def module_no_grad():
        with torch.no_grad():
            return conv(x)

    ks, st, dl = conv.kernel_size, conv.stride, conv.dilation
    raw_forward = getattr(type(conv).forward, "__wrapped__", None)
    # the cached-map path of the module forwards (functional.conv_cached)
    plan = vnn._call_plan(conv) if hasattr(F, "conv_cached") else None

    def no_grad(fn):
        def run():
            with torch.no_grad():
                return fn()
        return run

    pieces = [
        ("ctypes", lambda: lib.voxconv_version_number()),
        ("empty", lambda: feats.new_empty((n_out, cout))),
        ("handle", lambda: _runtime.handle_for_tensor(feats)),
        ("no_grad", no_grad(lambda: None)),
        ("autocast?", lambda: F._autocast(feats, w, None)),
        ("geometry", lambda: F._geometry(x, ks, st, dl, False, False, None)),
        ("C call", c_call),
        ("op", lambda: _ops._conv_fwd(feats, w, km, cfg, False)),
        ("_ops.conv", no_grad(lambda: _ops.conv(feats, conv.weight, km, *cfg))),
        ("conv_geom", no_grad(lambda: F.conv_geometry(x, conv.weight, None, ks, st, dl, False,
                                                      False, None, cfg, False))),
        ("cached", no_grad(lambda: F.conv_cached(x, conv.weight, None, cfg, plan[1], plan[2],
                                                 False)) if plan else None),
        ("fwd raw", no_grad(lambda: raw_forward(conv, x)) if raw_forward else None),
        ("forward", no_grad(lambda: conv.forward(x))),
        ("module", module_no_grad),
        ("op grad", lambda: _ops.conv(x.feats, conv.weight, km, *cfg)),
        ("geom grad", lambda: F.conv_geometry(x, conv.weight, None, ks, st, dl, False, False,
                                              None, cfg, False)),
        ("autograd", lambda: conv(x)),
    ]
    pieces = [p for p in pieces if p[1] is not None]
    for _, fn in pieces:
        for _ in range(10):
            fn()
    torch.cuda.synchronize()
    print(f"C = {args.channels}, {x.feats.shape[0]} voxels; host us per piece, median of "
          f"{args.calls} (hot) / 30 (cold):")
    print(f"  {'piece':9s} {'hot':>8s} {'cold':>8s} {'cold events ms':>15s}")
    res = {}
    gc.disable()  # a collection inside one timed call is noise here
    for name, fn in pieces:
        h, drained = hot(fn, args.calls)
        c, g = cold(fn, 30)
        res[name] = {"hot_us": h, "cold_us": c, "cold_event_ms": g, "drained": drained}
        print(f"  {name:9s} {h:8.2f} {c:8.2f} {g:15.4f}" + ("  (GPU drained!)" if drained else ""))
    gc.enable()
    runtime_calls(c_call, "C_call")
    runtime_calls(module_no_grad, "module")
    with open("call_latency.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
