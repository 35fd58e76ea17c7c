"""The host timeline of workload A's backward (and forward) from PyTorch
(issue 20).

a_bwd_profile.py (s29 call 1) showed the backward's GPU work as the tool's
(7.3 ms busy against the tool's 7.58 ms end to end) but ~1.2 ms longer from
PyTorch, with the idle gaps in its first half (the small levels, where
each op's GPU time is 20-100 us). This times, without torch.profiler (which
slows the host), every backward node on the autograd thread: when it
started after backward() was called, how long its Python took, and how
much of that was the library calls (dgrad, wgrad, pool backward), so the
small levels' host time per node can be set beside the tool's GPU time per
op. Median over --repeat backward passes. Also, per module of the forward
(with autograd), its host span and the library calls inside it (the map
waits and orders, the ops), and Python's cyclic collections (gc) where
they fall. A diagnostic.

    python3 bench/debug/a_bwd_host.py [--data-dir D] [--repeat 20]
"""
import argparse, collections, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import torch_bench as tb  # noqa: E402
from a_profile import load_a_network, names  # noqa: E402
from voxconv import _ops  # noqa: E402

clock = time.perf_counter
marks = []  # (label, start, end) of the current backward


def timed(label, fn):
    def wrapper(*a, **k):
        s = clock()
        try:
            return fn(*a, **k)
        finally:
            marks.append((label, s, clock()))
    return wrapper


_gc_start = [0.0]


def _gc_mark(phase, info):
    """Python's cyclic collections as marks (the first backward node starts
    ~175 us after backward() against ~30 us for a one-node graph: a
    collection there would show as a "gc" mark before it)."""
    if phase == "start":
        _gc_start[0] = clock()
    else:
        marks.append((f"gc{info.get('generation', '?')}", _gc_start[0], clock()))


def instrument():
    for cls, label in ((_ops._LaunchedPassFn, "node.conv"), (_ops._LaunchedPoolFn, "node.pool")):
        cls.backward = staticmethod(timed(label, cls.backward))
    kinds = _ops._PASSES["conv"]
    _ops._PASSES["conv"] = (kinds[0], timed("dgrad", kinds[1]), timed("wgrad", kinds[2]))
    _ops._pool_bwd = timed("pool_bwd", _ops._pool_bwd)
    # the library call alone (inside _launch / _launch_feats / handle.call)
    for name in ("voxconv_conv_dgrad", "voxconv_conv_wgrad", "voxconv_pool_backward",
                 "voxconv_conv_forward", "voxconv_pool_forward", "voxconv_kmap_order",
                 "voxconv_kmap_wait", "voxconv_kmap_build", "voxconv_kmap_build_async"):
        if hasattr(_ops.lib, name):
            setattr(_ops.lib, name, timed("lib." + name[8:], getattr(_ops.lib, name)))


def instrument_python():
    """Inclusive host time of the Python around the maps (pool layers)."""
    from voxconv import functional as F, kmap as K
    for cls, names_ in ((K.CoordinateManager, ("kernel_map", "_adopt", "_derive", "add",
                                               "_prefetch", "_map_stream_waits")),
                        (K.KernelMap, ("__init__", "mark_ready", "out_coords", "use_on")),
                        (K.CoordinateSet, ("__init__",))):
        for n_ in names_:
            setattr(cls, n_, timed(f"py.{cls.__name__[:5]}.{n_}", getattr(cls, n_)))
    dc = K.CoordinateManager._derived_coords
    K.CoordinateManager._derived_coords = staticmethod(timed("py.derived_coords", dc))
    for n_ in ("_geometry", "_output"):
        setattr(F, n_, timed("py.F." + n_, getattr(F, n_)))
    _ops.pool = timed("py.ops.pool", _ops.pool)


def hook_modules(net, labels):
    """A mark per module call of the forward (its host span)."""
    for m, lab in zip(net, labels):
        m.register_forward_pre_hook(lambda mod, _i, lab=lab: marks.append(("start", lab, clock())))
        m.register_forward_hook(lambda mod, _i, _o, lab=lab: marks.append(("end", lab, clock())))


def forward_split(fmarks):
    """Per module: its host span and the library time inside it, by call."""
    rows, cur, t_in = [], None, 0.0
    for mk in fmarks:
        if mk[0] == "start":
            cur, t_in, lib = mk[1], mk[2], collections.defaultdict(float)
        elif mk[0] == "end":
            rows.append((cur, mk[2] - t_in, dict(lib)))
            cur = None
        elif cur is not None and mk[0].startswith(("lib.", "py.", "gc")):
            lib[mk[0]] += mk[2] - mk[1]
    return rows


class _Ident(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        marks.append(("ref.node", clock(), clock()))
        return g


def engine_start_us(dev, repeat, idle_s=0.0, caller=False):
    """Time from backward() to a one-node graph's backward on this host
    (torch's own start latency, for the network's first node beside it),
    back to back or after the engine's device thread idled idle_s (as it
    does through a forward: a sleeping thread may wake slowly); caller:
    the backward on the calling thread (set_multithreading_enabled(False))."""
    x = torch.ones(8, device=dev, requires_grad=True)
    g = torch.ones(8, device=dev)
    out = []
    for _ in range(repeat + 3):
        y = _Ident.apply(x)
        torch.cuda.synchronize()
        if idle_s:
            time.sleep(idle_s)
        marks.clear()
        t0 = clock()
        with tb.voxconv.caller_thread_backward(caller):
            y.backward(g)
        out.append((marks[0][1] - t0) * 1e6)
    return statistics.median(out[3:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--python", action="store_true",
                    help="also time the Python around the maps (adds its own overhead)")
    ap.add_argument("--caller", action="store_true",
                    help="run the backward on the calling thread "
                         "(torch.autograd.set_multithreading_enabled(False); item 112)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    net, coords, feats, counts = load_a_network(args.data_dir, tb.DTYPES["f16"], dev)
    g = torch.Generator(device=dev).manual_seed(1)
    dy = (torch.rand(counts[-1], tb.LEVEL_CHANNELS[-1], device=dev, generator=g) * 2 - 1
          ).to(feats.dtype)
    print(f"torch's start latency (a one-node graph): {engine_start_us(dev, args.repeat):.1f} us "
          f"back to back, {engine_start_us(dev, args.repeat, 0.005):.1f} us after 5 ms idle; "
          f"on the calling thread {engine_start_us(dev, args.repeat, caller=True):.1f} / "
          f"{engine_start_us(dev, args.repeat, 0.005, caller=True):.1f} us")
    instrument()
    import gc
    gc.callbacks.append(_gc_mark)
    if args.python:
        instrument_python()
    hook_modules(net, names(net))
    fwd = []
    for p in net.parameters():  # when the engine hands each weight its grad
        p.register_post_accumulate_grad_hook(lambda _p: marks.append(("acc", clock(), clock())))
    runs, walls, gcs = [], [], []
    for i in range(args.repeat + 3):
        leaf = feats.detach().clone().requires_grad_()
        marks.clear()
        y = net(tb.voxconv.SparseTensor(leaf, coords))
        if i >= 3:
            fwd.append(forward_split(list(marks)))
        # when the engine reaches the first node (before its Python runs)
        y.feats.grad_fn.register_prehook(lambda _g: marks.append(("prehook", clock(), clock())))
        y.feats.register_hook(lambda _g: marks.append(("tensor hook", clock(), clock())))
        torch.cuda.synchronize()
        marks.clear()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        t0 = clock()
        with tb.voxconv.caller_thread_backward(args.caller):
            y.feats.backward(dy)
        t1 = clock()
        e1.record()
        e1.synchronize()
        for p in net.parameters():
            p.grad = None
        if i >= 3:
            # collections happen at no fixed point: apart, so that the
            # nodes of every run line up
            gcs.append([(lab, s - t0, e - t0) for lab, s, e in marks if lab.startswith("gc")])
            runs.append([(lab, s - t0, e - t0) for lab, s, e in marks
                         if not lab.startswith("gc")] + [("end", t1 - t0, t1 - t0)])
            walls.append(e0.elapsed_time(e1))
    # node i of every run lines up (same graph each time)
    n = min(len(r) for r in runs)
    print(f"backward GPU-to-GPU median {statistics.median(walls):.3f} ms, host "
          f"{1e3 * statistics.median(r[-1][1] for r in runs):.3f} ms ({args.repeat} runs)")
    print(f"{'mark':28s} {'start us':>9s} {'dur us':>8s}")
    for k in range(n):
        lab = runs[0][k][0]
        st = statistics.median(r[k][1] for r in runs) * 1e6
        du = statistics.median(r[k][2] - r[k][1] for r in runs) * 1e6
        print(f"{lab:28s} {st:9.1f} {du:8.1f}")
    print("forward with autograd, per module (median us): host span | library calls")
    for k in range(min(len(f) for f in fwd)):
        lab = fwd[0][k][0]
        span = statistics.median(f[k][1] for f in fwd) * 1e6
        libs = collections.defaultdict(list)
        for f in fwd:
            for n_, v in f[k][2].items():
                libs[n_].append(v)
        print(f"  {lab:10s} {span:7.1f} | " + ", ".join(
            f"{n_} {1e6 * statistics.median(v):.1f}" for n_, v in libs.items()))
    with_gc = [g for g in gcs if g]
    print(f"cyclic collections during the backward: in {len(with_gc)} of {len(gcs)} runs"
          + (", e.g. " + ", ".join(f"{lab} at +{1e6 * a:.0f} us for {1e6 * (b - a):.0f} us"
                                   for lab, a, b in with_gc[0]) if with_gc else ""))
    tot = collections.defaultdict(list)
    for r in runs:
        acc = collections.defaultdict(float)
        for lab, s, e in r:
            acc[lab] += e - s
        for lab, v in acc.items():
            tot[lab].append(v)
    print("per backward, summed (median us): " + ", ".join(
        f"{lab} {1e6 * statistics.median(v):.0f}" for lab, v in tot.items()))


if __name__ == "__main__":
    main()
