"""What keeps a forward's kernel maps alive after its output is dropped
(issue 20, docs/perf-notes.md item 104). On CUDA (map stream, prefetch,
build worker) the maps of the last forward of workload A's network were
freed inside the next forward -- one flush of ~11 maps, 90-140 us of its
host time, and with pooled coordinates as the map's rows 7 flushes, ~1.1
ms -- while on the CPU every map goes at ``del y``. This runs forwards
(no_grad, a fresh SparseTensor each, as torch_bench), and after each
``del y`` prints how many KernelMaps are still alive, what refers to the
first few (type names, and for a dict or tuple what refers to that), and
how many a ``gc.collect()`` frees (i.e. how many were held by reference
cycles only). A diagnostic.

    python3 bench/debug/map_lifetime.py [--data-dir D] [--runs 3] [--small]

--small: a small random input and a two-level network instead of workload
A (quick; also on the CPU).
"""
import argparse, gc, os, sys, weakref
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import voxconv  # noqa: E402
from voxconv import kmap, nn as vnn  # noqa: E402


def describe(obj, depth=2):
    """Type names of what refers to obj, one level further for containers."""
    out = []
    for r in gc.get_referrers(obj):
        if r is obj or isinstance(r, type(sys._getframe())):
            continue
        name = type(r).__name__
        if depth > 1 and isinstance(r, (dict, tuple, list)):
            owners = sorted({type(x).__name__ for x in gc.get_referrers(r)
                             if not isinstance(x, type(sys._getframe()))})
            name += "<-" + "|".join(owners[:4])
        out.append(name)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        torch.manual_seed(0)
        coords = torch.randint(0, 40, (6000, 4), dtype=torch.int32)
        coords[:, 0] = 0
        coords = torch.unique(coords, dim=0).to(dev)
        net = torch.nn.Sequential(vnn.SparseConv3d(4, 8, 3), vnn.SparseMaxPool3d(2, 2),
                                  vnn.SparseConv3d(8, 8, 3)).to(dev)
        feats = torch.randn(len(coords), 4, device=dev)
    else:
        from a_profile import load_a_network
        import torch_bench as tb
        net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"], dev)
    made = []
    init = kmap.KernelMap.__init__

    def tracked(self, *a, **k):
        init(self, *a, **k)
        made.append(weakref.ref(self))

    kmap.KernelMap.__init__ = tracked
    for i in range(args.runs):
        start = len(made)
        with torch.no_grad():
            y = net(voxconv.SparseTensor(feats, coords))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        del y
        alive = [r() for r in made[start:] if r() is not None]
        print(f"forward {i}: {len(made) - start} maps made, {len(alive)} alive after del y "
              f"({len(kmap._dropped)} queued to be freed)")
        for km in alive[:4]:
            print(f"  {kmap.MODE_NAMES.get(km.mode, km.mode)} n_in {km.n_in}: held by "
                  f"{describe(km)}")
        km = None
        del alive
        freed = gc.collect()
        left = sum(1 for r in made[start:] if r() is not None)
        print(f"  gc.collect(): {freed} objects, {left} maps of this forward still alive")


if __name__ == "__main__":
    main()
