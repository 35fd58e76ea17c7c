"""The map thread (python/voxconv/_worker.py, docs/perf-notes.md item 95):
workload A's network from PyTorch (fresh SparseTensor per run, maps built
inside) with the prefetched map builds issued by the map thread
(VOXCONV_MAP_THREAD=1, the default) against issued in line by the caller's
thread (=0), in one process, alternated round by round (launch_first.py's
`alternate`). Rows: A forward (no_grad) and A forward + backward, GPU time
as torch_bench measures it; then each variant's host issue time of one
forward (the time to return from the forward, started from an idle GPU),
and the host
probe (torch_bench.host_probe_us) before and after, which says the host
state (item 93: ~300 us fast, ~500-650 us slow).

    python3 bench/debug/map_thread.py [--data-dir D] [--rounds 6] [--runs 10]
"""
import argparse, json, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch_bench as tb  # noqa: E402
sys.path.insert(0, os.path.dirname(__file__))
from launch_first import alternate  # noqa: E402
import voxconv  # noqa: E402


def thread(on):
    def switch():
        voxconv.kmap.drain()
        os.environ["VOXCONV_MAP_THREAD"] = "1" if on else "0"
    return switch


VARIANTS = {"in_line": thread(False), "thread": thread(True)}


def host_issue_ms(fn, reps=20):
    """Median time for fn() to return, from an idle GPU (synchronised
    before; not after: the GPU may still be working when it returns). The
    caller's thread waits only where the map builds make it wait (a
    strided count the map thread has not delivered, or, in line, the
    counts themselves); a sleep queued before fn would hold those builds
    too (the map stream waits for the input coordinates' stream)."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", default=None, help="write every run here")
    args = ap.parse_args()
    pts = tb.workload_a_points(args.data_dir)
    coords, feats, _ = voxconv.voxelize(
        torch.from_numpy(pts).cuda(), 0.1, origin=(-80.0, -80.0, -2.0),
        grid_size=(1600, 1600, 80), reduce="first", n_feat=3)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{len(coords)} voxels; host probe {tb.host_probe_us():.0f} us", flush=True)
    net = tb.workload_a_net(torch.device("cuda"), torch.float16)
    f16 = feats.to(torch.float16)
    counts = tb.scale_and_count(net, coords, f16)
    leaf = f16.detach().clone().requires_grad_()
    dy = torch.rand(counts[-1], tb.LEVEL_CHANNELS[-1], device="cuda", dtype=torch.float16)

    def a_fwd():
        with torch.no_grad():
            return net(voxconv.SparseTensor(f16, coords))

    def a_fb():
        y = net(voxconv.SparseTensor(leaf, coords))
        y.feats.backward(dy)
        return y

    def a_clear():
        leaf.grad = None
        for p in net.parameters():
            p.grad = None

    rec = {"device": torch.cuda.get_device_name(), "voxels": len(coords)}
    rec["A forward"] = alternate("A forward", a_fwd, lambda: None, args.rounds, args.runs,
                                 VARIANTS)
    rec["A forward+backward"] = alternate("A forward+backward", a_fb, a_clear, args.rounds,
                                          args.runs, VARIANTS)
    for label, switch in VARIANTS.items():
        switch()
        a_fwd()
        rec[f"host_issue_ms_{label}"] = h = host_issue_ms(a_fwd)
        print(f"host issue of one A forward, {label}: {h:.3f} ms", flush=True)
    rec["host_probe_us_end"] = tb.host_probe_us()
    print(f"host probe at the end {rec['host_probe_us_end']:.0f} us", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
