"""Which CUDA runtime calls each library call of workload A's forward from
PyTorch makes (no_grad, fresh SparseTensor, map stream on), and of freeing
the maps it drops: every library function is wrapped in a torch.profiler
range named after it, and the runtime calls (cudaLaunchKernel,
cudaMemsetAsync, ...) inside each range on the same thread are counted,
with the kernels they launched, per call of that function, beside the
host time of a call under the profiler. What a host-cost reduction would
have to remove (docs/perf-notes.md item 96). A diagnostic.

    python3 bench/debug/a_launches.py [--data-dir D] [--runs 3] [--backward]

--backward: forward with autograd and backward (a random output gradient
for the input features and every weight, as torch_bench's forward +
backward row), so the backward's library calls (dgrad, wgrad, pooling
backward, on the autograd thread) are counted too.
"""
import argparse, bisect, collections, gc, os, sys
import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402

PREFIX = "vclib:"


def t0(e):  # ns (torch 2.x: start_ns; older: start_us)
    return e.start_ns() if hasattr(e, "start_ns") else 1000 * e.start_us()


def t1(e):
    return t0(e) + (e.duration_ns() if hasattr(e, "duration_ns") else 1000 * e.duration_us())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backward", action="store_true")
    args = ap.parse_args()
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"],
                                           torch.device("cuda"))
    lib = voxconv._lib.lib
    for name in list(vars(lib)):
        fn = getattr(lib, name)
        if name.startswith("voxconv_") and callable(fn):
            def wrapped(*a, _fn=fn, _name=PREFIX + name):
                with record_function(_name):
                    return _fn(*a)
            setattr(lib, name, wrapped)

    x = feats.clone().requires_grad_(args.backward)

    def forward():
        with torch.set_grad_enabled(args.backward):
            y = net(voxconv.SparseTensor(x, coords))
        if args.backward:
            y.feats.backward(torch.randn_like(y.feats))
        torch.cuda.synchronize()
        del y
        gc.collect()
        voxconv.kmap.flush_dropped()  # the maps it dropped, freed in this run
        torch.cuda.synchronize()

    for _ in range(5):
        forward()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.runs):
            forward()
    # kineto's raw events: runtime calls and kernels share a correlation id
    raw = list(prof.profiler.kineto_results.events())
    # (CPU ranges only: with CUDA activity each range also has a GPU-side
    # annotation of the same name)
    ranges = [e for e in raw if e.name().startswith(PREFIX) and e.device_type().name == "CPU"]
    runtime = [e for e in raw if e.name().startswith("cuda") and e.device_type().name == "CPU"]
    kern_of = {e.correlation_id(): e.name() for e in raw  # (not the GPU-side annotations)
               if e.device_type().name == "CUDA" and e.correlation_id()
               and not e.name().startswith(PREFIX)}
    calls = collections.Counter(r.name() for r in ranges)
    api = collections.defaultdict(collections.Counter)
    kernels = collections.defaultdict(collections.Counter)
    host_us = collections.Counter()
    runtime.sort(key=t0)
    starts = [t0(e) for e in runtime]
    for r in ranges:
        lo, hi = t0(r), t1(r)
        host_us[r.name()] += (hi - lo) / 1e3
        for e in runtime[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]:
            if t1(e) <= hi and e.start_thread_id() == r.start_thread_id():
                api[r.name()][e.name()] += 1
                k = kern_of.get(e.correlation_id())
                if k is not None and "Launch" in e.name():
                    kernels[r.name()][k[:90]] += 1
    total = collections.Counter(e.name() for e in runtime)
    print("runtime calls per forward (all): " + ", ".join(
        f"{k} {v / args.runs:.0f}" for k, v in total.most_common(8)))
    for name, n in calls.most_common():
        per = n / args.runs
        print(f"\n== {name[len(PREFIX):]}: {per:.0f} calls per forward, "
              f"{host_us[name] / n:.1f} us each under the profiler")
        for k, v in api[name].most_common():
            print(f"    {k:28s} {v / n:6.1f} per call")
        for k, v in kernels[name].most_common(30):
            print(f"      kernel {v / n:5.1f}x {k}")


if __name__ == "__main__":
    main()
