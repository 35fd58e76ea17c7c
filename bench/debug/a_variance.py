"""Why workload A's forward from PyTorch lands near the tool in some runs
and 1-2 ms above it in others (issue 20; bench/results/h100_2026-11-26_s17.md
§2). Runs the torch_bench network N times (no_grad, fresh SparseTensor per
call, output dropped after the end event, as torch_bench does) and records
per run: CUDA-event time, host issue time, host time per module, and
whether each pooling layer found its prefetched map complete. Prints the
fastest and slowest runs side by side. A diagnostic.

    python3 bench/debug/a_variance.py [--data-dir D] [--runs 30]
"""
import argparse, gc, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network, names  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    net, coords, feats, counts = load_a_network(args.data_dir, tb.DTYPES["f16"],
                                                torch.device("cuda"))
    labels = names(net)
    # which pooling calls found their map's count already on the host
    seen = []
    orig = voxconv.kmap.KernelMap.wait

    def wait(self):
        t = time.perf_counter()
        orig(self)
        seen.append(1e6 * (time.perf_counter() - t))
    voxconv.kmap.KernelMap.wait = wait
    rows = []
    for r in range(args.runs + 3):
        gc_count = gc.get_count()
        torch.cuda.synchronize()
        seen.clear()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        per = []
        s.record()
        t0 = time.perf_counter()
        with torch.no_grad():
            x = voxconv.SparseTensor(feats, coords)
            per.append(time.perf_counter() - t0)
            for m in net:
                a = time.perf_counter()
                x = m(x)
                per.append(time.perf_counter() - a)
        t1 = time.perf_counter()
        e.record()
        e.synchronize()
        del x
        if r >= 3:
            rows.append((s.elapsed_time(e), 1e3 * (t1 - t0), [1e3 * p for p in per],
                         list(seen), gc_count))
    in_order = list(rows)
    rows.sort(key=lambda t: t[0])
    print(f"{len(rows)} runs: GPU ms min {rows[0][0]:.3f} median "
          f"{statistics.median(r[0] for r in rows):.3f} max {rows[-1][0]:.3f}")
    for tag, r in (("fastest", rows[0]), ("median", rows[len(rows) // 2]),
                   ("slowest", rows[-1])):
        print(f"\n{tag}: events {r[0]:.3f} ms, host issue {r[1]:.3f} ms, gc counts {r[4]}")
        print("  host ms: " + ", ".join(f"{n} {v:.3f}" for n, v in
                                        zip(["tensor"] + labels, r[2])))
        print("  count waits (us): " + ", ".join(f"{w:.0f}" for w in r[3]))
    print("\nall runs in order (events ms / host ms):")
    print("  " + ", ".join(f"{r[0]:.2f}/{r[1]:.2f}" for r in in_order))


if __name__ == "__main__":
    main()
