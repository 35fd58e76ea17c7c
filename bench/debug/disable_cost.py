"""Host cost of torch.compiler.disable on voxconv's eager path (issue 20):
one SparseConv3d call (C = 64, map cached, GPU kept busy so nothing waits)
with the module forward disabled (as shipped) against it undecorated, and
against a second disabled layer around conv_geometry (as 7623bc6 had). Median host us per call, no_grad and autograd.

    python3 bench/debug/disable_cost.py
"""
import os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
import voxconv  # noqa: E402
from voxconv import nn as vnn, functional as F  # noqa: E402
import ref  # noqa: E402


def per_call_us(fn, n=400):
    torch.cuda._sleep(int(3e8))
    t = []
    for _ in range(n):
        a = time.perf_counter()
        fn()
        t.append(time.perf_counter() - a)
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    return 1e6 * statistics.median(t), busy


def main():
    dev = torch.device("cuda")
    coords = ref.rand_coords(20000, 40, 1).to(dev)
    x = voxconv.SparseTensor(torch.randn(len(coords), 64, device=dev, dtype=torch.float16),
                             coords)
    conv = vnn.SparseConv3d(64, 64, 3, bias=False).to(dev).half()
    for _ in range(5):
        conv(x)
    torch.cuda.synchronize()
    cls = type(conv)
    shipped = (cls.forward, F.conv_geometry)
    plain = (getattr(cls.forward, "__wrapped__", cls.forward), F.conv_geometry)
    nested = (cls.forward, torch.compiler.disable(F.conv_geometry))
    for rnd in range(2):
        for name, (fwd, geo) in (("disabled (shipped)", shipped), ("undecorated", plain),
                                 ("two disabled layers", nested)):
            cls.forward, F.conv_geometry = fwd, geo
            with torch.no_grad():
                ng, b1 = per_call_us(lambda: conv(x))
            ag, b2 = per_call_us(lambda: conv(x))
            print(f"round {rnd}: {name:20s} no_grad {ng:6.2f} us  autograd {ag:6.2f} us"
                  f"  (GPU busy throughout: {b1 and b2})")
    cls.forward, F.conv_geometry = shipped


if __name__ == "__main__":
    main()
