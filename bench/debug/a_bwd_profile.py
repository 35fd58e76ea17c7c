"""Where workload A's forward+backward from PyTorch spends its time (issue 20).

The forward from PyTorch is within ~10% of the tool; forward+backward is
~20% over (h100_2026-11-26_s15.md). This separates the backward's possible
causes, for the network of bench/torch_bench.py (fp16, input and weight
gradients, as torch_bench's forward+backward row):
  1. wall time (CUDA events) of forward-with-autograd and of backward, and
     the host time of each (perf_counter around the Python call, no sync);
  2. from one torch.profiler run: per phase, the GPU busy time, the idle
     gaps with the host op running then, and the GPU time per kernel name
     (so extra kernels -- fills, casts, copies -- or different algorithms
     show up next to the tool's per-op times);
  3. the tool's per-op medians from its --json layers (when --tool is
     given), summed per phase, for the same comparison.
A diagnostic, not a benchmark: the numbers to quote come from
bench/torch_bench.py.

    python3 bench/debug/a_bwd_profile.py [--data-dir D] [--tool build/voxconv]
"""
import argparse, collections, json, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import torch_bench as tb  # noqa: E402
from a_profile import busy_and_gaps as _busy_and_gaps, load_a_network, names  # noqa: E402


def host_per_module(net, coords, feats, dy, repeat):
    """Median host time of each module call in a forward with autograd
    (no sync inside), then the backward; ms."""
    labels = names(net)
    per = {n: [] for n in ["tensor"] + labels}
    for _ in range(repeat):
        leaf = feats.detach().clone().requires_grad_()
        torch.cuda.synchronize()
        t = time.perf_counter()
        x = tb.voxconv.SparseTensor(leaf, coords)
        per["tensor"].append(time.perf_counter() - t)
        for n, m in zip(labels, net):
            t = time.perf_counter()
            x = m(x)
            per[n].append(time.perf_counter() - t)
        x.feats.backward(dy)
        torch.cuda.synchronize()
        for p in net.parameters():
            p.grad = None
    med = {n: 1e3 * statistics.median(v) for n, v in per.items()}
    print(f"host ms per module with autograd (sum {sum(med.values()):.3f}): " +
          ", ".join(f"{n} {v:.3f}" for n, v in med.items()))


def phases(net, coords, feats, dy):
    """One forward+backward: (host fwd s, host bwd s, events)."""
    leaf = feats.detach().clone().requires_grad_()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    torch.cuda.synchronize()
    ev[0].record()
    t0 = time.perf_counter()
    y = net(tb.voxconv.SparseTensor(leaf, coords))
    t1 = time.perf_counter()
    ev[1].record()
    y.feats.backward(dy)
    t2 = time.perf_counter()
    ev[2].record()
    ev[2].synchronize()
    for p in net.parameters():
        p.grad = None
    return t1 - t0, t2 - t1, ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2])


def busy_and_gaps(kernels, a, b):
    """a_profile.busy_and_gaps over the spans starting in [a, b)."""
    return _busy_and_gaps([k for k in kernels if a <= k[0] < b])


def profile_once(net, coords, feats, dy, trace):
    from torch.profiler import profile, ProfilerActivity, record_function
    leaf = feats.detach().clone().requires_grad_()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("P.forward"):
            y = net(tb.voxconv.SparseTensor(leaf, coords))
        torch.cuda.synchronize()
        with record_function("P.backward"):
            y.feats.backward(dy)
        torch.cuda.synchronize()
    for p in net.parameters():
        p.grad = None
    prof.export_chrome_trace(trace)
    with open(trace) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    marks = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("cat") == "user_annotation" and e["name"].startswith("P.")}
    kernels = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    cpu_ops = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev
                     if e.get("cat") == "cpu_op")
    runtime = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]

    def op_at(ts):
        best = "-"
        for a, b, n in cpu_ops:
            if a <= ts <= b:
                best = n  # innermost (latest-starting) op containing ts
            elif a > ts:
                break
        return best

    for phase in ("P.forward", "P.backward"):
        if phase not in marks:
            continue
        a, _ = marks[phase]
        # the GPU runs behind the host: the phase's kernels run until the
        # next phase's host span starts (the sync in between ends them)
        b = marks["P.backward"][0] if phase == "P.forward" else float("inf")
        busy, gaps = busy_and_gaps(kernels, a, b)
        ks = [k for k in kernels if a <= k[0] < b]
        end = max((k[1] for k in ks), default=a)
        print(f"\n== {phase[2:]}: host span {(marks[phase][1] - a) / 1e3:.3f} ms, GPU "
              f"busy {busy / 1e3:.3f} ms, last kernel end +{(end - a) / 1e3:.3f} ms, "
              f"{len(ks)} kernels/copies")
        agg = collections.defaultdict(lambda: [0, 0.0])
        for s, e, n in ks:
            agg[n][0] += 1
            agg[n][1] += e - s
        print("  GPU time by kernel (count, ms):")
        for n, (c, d) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:25]:
            print(f"    {d / 1e3:8.3f} {c:4d}  {n[:110]}")
        big = [(s, e) for s, e in gaps if e - s >= 15]
        print(f"  idle gaps >= 15 us: {len(big)}, total "
              f"{sum(e - s for s, e in big) / 1e3:.3f} ms (all gaps "
              f"{sum(e - s for s, e in gaps) / 1e3:.3f} ms)")
        for s, e in big[:30]:
            print(f"    +{(s - a) / 1e3:7.3f} ms {e - s:7.1f} us  host in: {op_at(s)}")
        rt = collections.defaultdict(lambda: [0, 0.0])
        for r in runtime:
            if a <= r["ts"] < marks[phase][1]:
                rt[r["name"]][0] += 1
                rt[r["name"]][1] += r["dur"]
        print("  CUDA runtime calls on the host (count, us): " + ", ".join(
            f"{n} {c}/{d:.0f}" for n, (c, d) in sorted(rt.items(), key=lambda kv: -kv[1][1])[:8]))


def tool_phases(tool, data_dir, dtype, repeat):
    args = argparse.Namespace(tool=tool, dtype=dtype, repeat=repeat, warmup=3, settle_ms=200,
                              tool_arg=[], device=torch.device("cuda"))
    tj, _ = tb.run_tool(args, ["--workload", "A"], data_dir)
    print(f"\n== tool: forward {tj['forward_ms']:.3f} ms, backward {tj['backward_ms']:.3f} ms "
          "(end to end); per-op medians (synced around each op):")
    for phase in ("forward", "backward"):
        rows = [r for r in tj.get("layers", []) if r["phase"] == phase]
        by_op = collections.defaultdict(float)
        for r in rows:
            by_op[r["op"]] += r["ms"]
        print(f"  {phase}: sum {sum(r['ms'] for r in rows):.3f} ms; " + ", ".join(
            f"{k} {v:.3f}" for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])))
        for r in rows:
            print(f"    {r['layer'][:48]:48s} {r['op'][:28]:28s} n {r['n_in']:>8} -> "
                  f"{r['n_out']:>8} {r['cin']:>4}->{r['cout']:<4} {r['ms']:.3f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--tool", default=None)
    ap.add_argument("--trace", default="a_bwd_trace.json")
    args = ap.parse_args()
    dev = torch.device("cuda")
    net, coords, feats, counts = load_a_network(args.data_dir, tb.DTYPES[args.dtype], dev)
    print("levels", counts)
    g = torch.Generator(device=dev).manual_seed(1)
    dy = (torch.rand(counts[-1], tb.LEVEL_CHANNELS[-1], device=dev, generator=g) * 2 - 1
          ).to(feats.dtype)
    for _ in range(3):
        phases(net, coords, feats, dy)
    runs = [phases(net, coords, feats, dy) for _ in range(args.repeat)]
    med = [statistics.median(r[i] for r in runs) for i in range(4)]
    print(f"PyTorch, median of {args.repeat}: forward (autograd) host {1e3 * med[0]:.3f} ms, "
          f"GPU-to-GPU {med[2]:.3f} ms; backward host {1e3 * med[1]:.3f} ms, "
          f"GPU-to-GPU {med[3]:.3f} ms; total {med[2] + med[3]:.3f} ms")
    host_per_module(net, coords, feats, dy, args.repeat)
    profile_once(net, coords, feats, dy, args.trace)
    if args.tool:
        tool_phases(args.tool, args.data_dir, args.dtype, args.repeat)


if __name__ == "__main__":
    main()
