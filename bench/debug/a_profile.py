"""Where workload A's forward from PyTorch spends its time (issue 20).

Prints, for the network of bench/torch_bench.py under no_grad with a fresh
SparseTensor per call:
  1. the host issue time of every module (no sync inside the forward) and
     the wall time to completion, median of N;
  2. the GPU time of every module run alone (sync around each);
  3. from torch.profiler: the CUDA runtime calls that took longest (host
     waits show up as cudaStreamSynchronize / cudaEventSynchronize), the GPU
     busy time and the idle gaps, each gap with the module being issued
     while the GPU idled.
Each with the map stream on and off (VOXCONV_MAP_STREAM). Not a benchmark:
a diagnostic; the numbers to quote come from bench/torch_bench.py.

    python3 bench/debug/a_profile.py [--data-dir D] [--repeat N] [--trace out.json]
"""
import argparse, json, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402


def names(net):
    out, level = [], 0
    for m in net:
        if isinstance(m, voxconv.nn.SparseMaxPool3d):
            out.append(f"L{level}.pool")
            level += 1
        else:
            out.append(f"L{level}.conv{sum(1 for n in out if n.startswith(f'L{level}.conv'))}")
    return out


def host_timeline(net, labels, feats, coords, repeat):
    per = {n: [] for n in ["tensor"] + labels}
    walls, issues = [], []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            x = voxconv.SparseTensor(feats, coords)
            t1 = time.perf_counter()
            per["tensor"].append(t1 - t0)
            for n, m in zip(labels, net):
                a = time.perf_counter()
                x = m(x)
                per[n].append(time.perf_counter() - a)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        issues.append(t2 - t0)
        walls.append(time.perf_counter() - t0)
        del x
    med = {n: 1e3 * statistics.median(v) for n, v in per.items()}
    return med, 1e3 * statistics.median(issues), 1e3 * statistics.median(walls)


def gpu_alone(net, labels, feats, coords, repeat):
    per = {n: [] for n in labels}
    for _ in range(repeat):
        with torch.no_grad():
            x = voxconv.SparseTensor(feats, coords)
            for n, m in zip(labels, net):
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                x = m(x)
                e.record()
                e.synchronize()
                per[n].append(s.elapsed_time(e))
    return {n: statistics.median(v) for n, v in per.items()}


def busy_and_gaps(kernels):
    """(busy us, [(gap start, gap end)]) of (start, end, name) GPU spans."""
    ks = sorted(kernels)
    if not ks:
        return 0.0, []
    busy, gaps = 0.0, []
    cur_a, cur_b = ks[0][0], ks[0][1]
    for a, b, _ in ks[1:]:
        if a > cur_b:
            busy += cur_b - cur_a
            gaps.append((cur_b, a))
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return busy + cur_b - cur_a, gaps


def profile_once(net, labels, feats, coords, trace):
    from torch.profiler import profile, ProfilerActivity, record_function
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            with record_function("A.tensor"):
                x = voxconv.SparseTensor(feats, coords)
            for n, m in zip(labels, net):
                with record_function("A." + n):
                    x = m(x)
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    with open(trace) as f:
        ev = json.load(f)["traceEvents"]
    ev = [e for e in ev if e.get("ph") == "X"]
    spans = sorted((e["ts"], e["ts"] + e["dur"], e["name"][2:]) for e in ev
                   if e.get("cat") == "user_annotation" and e["name"].startswith("A."))
    kernels = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev
                     if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    runtime = [e for e in ev if e.get("cat") == "cuda_runtime" or e.get("cat") == "cuda_driver"]

    def module_at(ts):
        for a, b, n in spans:
            if a <= ts <= b:
                return n
        return "-"

    print("\n  CUDA runtime calls >= 30 us (host side):")
    agg = {}
    for e in runtime:
        agg.setdefault(e["name"], [0, 0.0])
        agg[e["name"]][0] += 1
        agg[e["name"]][1] += e["dur"]
    for e in sorted(runtime, key=lambda e: -e["dur"])[:25]:
        if e["dur"] < 30:
            break
        print(f"    {e['name']:32s} {e['dur']:8.1f} us  in {module_at(e['ts'])}")
    print("  runtime totals (count, us):")
    for k, (c, d) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"    {k:32s} {c:5d} {d:9.1f}")
    if not kernels:
        print("  no GPU activity recorded")
        return
    busy, gaps = busy_and_gaps(kernels)
    cur_b = max(k[1] for k in kernels)
    t0 = spans[0][0] if spans else kernels[0][0]
    print(f"  GPU: first kernel +{(kernels[0][0] - t0) / 1e3:.3f} ms, last end "
          f"+{(cur_b - t0) / 1e3:.3f} ms, busy {busy / 1e3:.3f} ms, "
          f"{len(kernels)} kernels/copies")
    print("  GPU idle gaps >= 20 us (start after t0, length, module being issued then):")
    for a, b in gaps:
        if b - a >= 20:
            print(f"    +{(a - t0) / 1e3:7.3f} ms  {(b - a):7.1f} us  {module_at(a)}")
    print("  host span of each module (us):")
    print("    " + ", ".join(f"{n} {(b - a):.0f}" for a, b, n in spans))
    attribute_kernels(ev, module_at, t0)


def attribute_kernels(ev, module_at, t0):
    """Each kernel/copy/memset to the module that launched it (the runtime
    call with the same correlation id), per stream: count, GPU time, and
    the wait between launch and start (long waits: queued behind other
    work or an event; short: the GPU was waiting for this launch)."""
    launch = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = e.get("args", {}).get("correlation")
            if c is not None:
                launch[c] = e["ts"]
    rows = {}
    for e in ev:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        args = e.get("args", {})
        ts_launch = launch.get(args.get("correlation"))
        mod = module_at(ts_launch) if ts_launch is not None else "?"
        key = (mod, args.get("stream", "?"))
        r = rows.setdefault(key, [0, 0.0, 0.0, float("inf"), 0.0])
        r[0] += 1
        r[1] += e["dur"]
        if ts_launch is not None:
            r[2] += e["ts"] - ts_launch
        r[3] = min(r[3], e["ts"])
        r[4] = max(r[4], e["ts"] + e["dur"])
    print("  kernels by launching module and stream: count, GPU us, mean launch->start us,"
          " first start / last end (ms after t0):")
    for (mod, stream), (n, gpu, wait, a, b) in sorted(rows.items(), key=lambda kv: kv[1][3]):
        print(f"    {mod:10s} stream {stream!s:>4}  {n:4d}  {gpu:8.1f}  {wait / n:8.1f}"
              f"  +{(a - t0) / 1e3:.3f} / +{(b - t0) / 1e3:.3f}")


def load_a_network(data_dir, dtype, dev):
    """Workload A's voxels (as bench/torch_bench.py makes them) and its
    network with scaled weights: (net, coords, feats, level counts)."""
    pts = tb.workload_a_points(data_dir)
    coords, feats, _ = voxconv.voxelize(
        torch.from_numpy(pts).to(dev), 0.1, origin=(-80.0, -80.0, -2.0),
        grid_size=(1600, 1600, 80), reduce="first", n_feat=3)
    net = tb.workload_a_net(dev, dtype)
    feats = feats.to(dtype)
    return net, coords, feats, tb.scale_and_count(net, coords, feats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--trace", default="a_trace.json")
    args = ap.parse_args()
    net, coords, feats, counts = load_a_network(args.data_dir, tb.DTYPES[args.dtype],
                                                torch.device("cuda"))
    print("levels", counts)
    labels = names(net)
    for ms in ("1", "0"):
        os.environ["VOXCONV_MAP_STREAM"] = ms
        host_timeline(net, labels, feats, coords, 3)  # warm
        med, issue, wall = host_timeline(net, labels, feats, coords, args.repeat)
        print(f"\n== map stream {ms}: host issue {issue:.3f} ms, wall {wall:.3f} ms "
              f"(host probe {tb.host_probe_us():.0f} us: ~300 fast state, ~550 slow)")
        print("  host ms per module: " + ", ".join(f"{n} {v:.3f}" for n, v in med.items()))
        g = gpu_alone(net, labels, feats, coords, 5)
        print(f"  GPU alone (sync around each), sum {sum(g.values()):.3f} ms: "
              + ", ".join(f"{n} {v:.3f}" for n, v in g.items()))
        profile_once(net, labels, feats, coords, args.trace.replace(".json", f"_ms{ms}.json"))


if __name__ == "__main__":
    main()
