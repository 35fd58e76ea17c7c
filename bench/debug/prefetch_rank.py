"""Which map a set's prefetch queues first on the map stream, measured on
workload A from PyTorch (docs/perf-notes.md item 108 chose strided maps
first with the build worker, on s30's library; item 130 revisits it): the
same network, rounds alternating the rank of kmap._prefetch_rank ("strided"
first, the package's order with the worker, or "subm" first), --repeat
forwards a round (no_grad) and as many forward + backward, CUDA events, one
sync a run; medians per round, then over rounds, with the host probe. A
diagnostic: the package's order is not changed by it.

    python3 bench/debug/prefetch_rank.py [--data-dir D] [--rounds 4] [--repeat 20]
"""
import argparse, os, statistics, sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402
from voxconv import _lib, kmap  # noqa: E402

RANKS = {"strided": lambda mode, worker: mode != _lib.KMAP_STRIDED,
         "subm": lambda mode, worker: mode == _lib.KMAP_STRIDED}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"], dev)
    leaf = feats.detach().clone().requires_grad_()
    dy = torch.full((), 0.01, device=dev, dtype=torch.float16)  # expanded to the output

    def forward():
        with torch.no_grad():
            return net(voxconv.SparseTensor(feats, coords, bounds=tb.A_BOUNDS))

    def forward_backward():
        y = net(voxconv.SparseTensor(leaf, coords, bounds=tb.A_BOUNDS))
        y.feats.backward(dy.expand_as(y.feats))
        return y

    def timed(fn):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        out = fn()
        e.record()
        e.synchronize()
        del out
        return s.elapsed_time(e)

    res = {k: {"fwd": [], "fb": []} for k in RANKS}
    for name in RANKS:  # warm both orders (plans, tuning)
        kmap._prefetch_rank = RANKS[name]
        for _ in range(5):
            timed(forward), timed(forward_backward)
    for r in range(args.rounds):
        for name in (RANKS if r % 2 == 0 else list(RANKS)[::-1]):
            kmap._prefetch_rank = RANKS[name]
            for _ in range(3):
                timed(forward)
            f = statistics.median(timed(forward) for _ in range(args.repeat))
            for _ in range(2):
                timed(forward_backward)
            fb = statistics.median(timed(forward_backward) for _ in range(args.repeat))
            res[name]["fwd"].append(f)
            res[name]["fb"].append(fb)
            print(f"round {r} {name:8s} forward {f:.3f} ms  fwd+bwd {fb:.3f} ms  "
                  f"host probe {tb.host_probe_us():.0f} us", flush=True)
    for name, v in res.items():
        print(f"{name:8s} forward {min(v['fwd']):.3f}-{max(v['fwd']):.3f} "
              f"(median {statistics.median(v['fwd']):.3f}) ms, fwd+bwd "
              f"{min(v['fb']):.3f}-{max(v['fb']):.3f} (median {statistics.median(v['fb']):.3f})")


if __name__ == "__main__":
    main()
