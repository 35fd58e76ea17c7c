"""Peak GPU memory of workload A's forward from PyTorch (issue 20 / 23:
what inference holds). Runs the torch_bench network (fresh SparseTensor
per call, maps built inside) under no_grad and under autograd (forward +
backward), and prints torch's peak allocated and reserved bytes of one
call after warm-ups. The library allocates through torch's caching
allocator, so its maps, pair lists and temporaries are counted; the
library's block cache (VOXCONV_ALLOC_CACHE_MB) keeps freed blocks
allocated in torch's view, so the figures are an upper bound on what the
call needed. A diagnostic.

    python3 bench/debug/a_memory.py [--data-dir D] [--dtype f16]
"""
import argparse, os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402


def peak(fn):
    """(peak allocated, peak reserved) MiB of one fn() after a sync."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    del out
    mib = 1024.0 * 1024.0
    return (torch.cuda.max_memory_allocated() / mib,
            torch.cuda.max_memory_reserved() / mib)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES[args.dtype],
                                           torch.device("cuda"))

    def forward():
        with torch.no_grad():
            return net(voxconv.SparseTensor(feats, coords)).feats

    f = feats.clone().requires_grad_()

    def forward_backward():
        y = net(voxconv.SparseTensor(f, coords)).feats
        y.backward(torch.ones_like(y))
        f.grad = None
        for p in net.parameters():
            p.grad = None
        return y

    for name, fn in (("forward (no_grad)", forward), ("forward+backward", forward_backward)):
        for _ in range(args.warmup):
            fn()
        a, r = peak(fn)
        print(f"{name}: peak allocated {a:.0f} MiB, peak reserved {r:.0f} MiB")


if __name__ == "__main__":
    main()
