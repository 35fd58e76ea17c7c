"""Host time to free the kernel maps one workload-A forward from PyTorch
drops (docs/perf-notes.md item 96): batched (kmap.flush_dropped, the
default: one event per using stream for the whole batch) against one map
at a time (each map with its own event, as every finalizer did before),
alternated round by round, on the same kind of batch (the maps a forward
drops, queued by their finalizers). Only the freeing is timed, not the
garbage collection that finds the maps. A diagnostic.

    python3 bench/debug/drop_cost.py [--data-dir D] [--rounds 6] [--runs 10]
"""
import argparse, gc, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402
from voxconv import kmap  # noqa: E402

def free_one_at_a_time():
    """What each map's finalizer did before batching: its own event and
    wait (with the streams cached, as flush_dropped has them: the old code
    also made its torch Stream objects each time, so this understates the
    old cost)."""
    items, kmap._dropped = kmap._dropped, []
    for handle, ptr, users in items:
        kmap._destroy_batch(handle, [(ptr, users)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"],
                                           torch.device("cuda"))
    res = {"batched": [], "one_at_a_time": []}
    flush = kmap.flush_dropped
    free = {"batched": flush, "one_at_a_time": free_one_at_a_time}
    for r in range(args.rounds + 1):
        for mode in (list(free) if r % 2 == 0 else list(free)[::-1]):
            for _ in range(args.runs):
                with torch.no_grad():
                    y = net(voxconv.SparseTensor(feats, coords))
                torch.cuda.synchronize()
                flush()
                # the maps join kmap._dropped (the input set's __del__, which
                # would free them at once, is held back to time that alone)
                kmap.flush_dropped = lambda: None
                del y
                gc.collect()
                kmap.flush_dropped = flush
                n = len(kmap._dropped)
                t = time.perf_counter()
                free[mode]()
                spent = time.perf_counter() - t
                if r:  # round 0 warms both
                    res[mode].append((1e6 * spent, n))
    print(f"host probe {tb.host_probe_us():.0f} us")
    for mode, v in res.items():
        us = [x for x, _ in v]
        print(f"{mode:14s} us to free one forward's {v[0][1]} maps: median "
              f"{statistics.median(us):7.1f}  (min {min(us):.1f}, max {max(us):.1f}, "
              f"n {len(us)})")


if __name__ == "__main__":
    main()
