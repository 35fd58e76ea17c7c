"""What Python's cyclic garbage collector sees of workload A's forward from
PyTorch (issue 20, docs/perf-notes.md item 113): the GC-tracked objects
alive when a forward (no_grad, then with autograd) returns, by type, and
the collections of each generation per forward + backward. A collection
runs when the tracked objects allocated and not yet freed pass a
threshold (700 for generation 0), so what a forward keeps alive until its
end decides how often one runs inside it. A diagnostic.

    python3 bench/debug/gc_census.py [--data-dir D] [--device cuda|cpu] [--small]
"""
import argparse, collections, gc, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402


def census(objs):
    c = collections.Counter()
    for o in objs:
        t = type(o).__name__
        c[t + (str(len(o)) if isinstance(o, tuple) else "")] += 1
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="random voxels instead of workload A")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    dev = torch.device(args.device)
    dtype = tb.DTYPES["f16" if dev.type == "cuda" else "f32"]
    if args.small:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
        import ref
        coords = ref.rand_coords(3000, 64, 1).to(dev)
        feats = torch.randn(len(coords), 3, device=dev).to(dtype)
    else:
        from a_profile import load_a_network
        _, coords, feats, _ = load_a_network(args.data_dir, dtype, dev)
    net = tb.workload_a_net(dev, dtype)
    leaf = feats.detach().clone().requires_grad_()

    def fwd():
        with torch.no_grad():
            return net(voxconv.SparseTensor(feats, coords))

    def fwd_grad():
        return net(voxconv.SparseTensor(leaf, coords))

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for f in (fwd, fwd_grad):
        for _ in range(3):
            f()
        sync()
        gc.collect()
        gc.disable()
        y = f()
        young = gc.get_objects(generation=0)
        c = census(young)
        print(f"{f.__name__}: {len(young)} tracked objects made by the forward and alive at "
              f"its end: " + ", ".join(f"{k} {v}" for k, v in c.most_common(30)))
        del young, c
        del y
        gc.enable()
    times = collections.defaultdict(list)
    counts = [0, 0, 0]
    t0 = [0.0]

    def cb(phase, info):
        if phase == "start":
            counts[info["generation"]] += 1
            t0[0] = time.perf_counter()
        else:
            times[info["generation"]].append(1e6 * (time.perf_counter() - t0[0]))
    gc.callbacks.append(cb)
    for _ in range(args.runs):
        y = fwd_grad()
        y.feats.backward(torch.ones_like(y.feats))
        del y
        leaf.grad = None
        for p in net.parameters():
            p.grad = None
    sync()
    gc.callbacks.remove(cb)
    print(f"collections per forward + backward ({args.runs} runs): " + ", ".join(
        f"gen{g} {counts[g] / args.runs:.2f} (median {statistics.median(times[g]):.0f} us)"
        for g in range(3) if times[g]))
    print(f"gc thresholds {gc.get_threshold()}, tracked objects in all {len(gc.get_objects())}")


if __name__ == "__main__":
    main()
