"""How often the library calls back into Python (torch's allocator through
the handle's allocator callbacks) per workload A forward, and from which
thread: the map stream's build worker must take the GIL for each call it
makes (issue 20, docs/perf-notes.md item 98). Counts per worker mode over
--runs forwards after a warm-up. A diagnostic.

    python3 bench/debug/worker_callbacks.py [--data-dir D] [--runs 10]
"""
import argparse, collections, os, sys, threading
import torch

counts = collections.Counter()
for name in ("_cuda_cudaCachingAllocator_raw_alloc", "_cuda_cudaCachingAllocator_raw_delete"):
    fn = getattr(torch._C, name)

    def wrapped(*a, _fn=fn, _name=name.rsplit("_", 1)[1]):
        main = threading.current_thread() is threading.main_thread()
        counts[(_name, "caller" if main else "other thread")] += 1
        return _fn(*a)
    setattr(torch._C, name, wrapped)  # before any handle takes them

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402
from voxconv import kmap  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    dev = torch.device("cuda")
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"], dev)
    for mode in (True, False):
        kmap._set_map_worker(dev, mode)
        for _ in range(5):
            with torch.no_grad():
                net(voxconv.SparseTensor(feats, coords))
        torch.cuda.synchronize()
        counts.clear()
        for _ in range(args.runs):
            with torch.no_grad():
                net(voxconv.SparseTensor(feats, coords))
        torch.cuda.synchronize()
        per = {k: v / args.runs for k, v in sorted(counts.items())}
        print(f"worker mode {mode}: allocator callbacks per forward {per}")


if __name__ == "__main__":
    main()
