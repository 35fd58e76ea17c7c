"""Host cost of entering an autograd.Function: torch's Function.apply
against voxconv's _ops._fast_apply (issue 20, docs/perf-notes.md item 70),
and eight arguments against three. A trivial Function (forward returns its
input's alias, no kernel) on a 1-element CPU tensor requiring grad, so only
the entry is timed: the minimum over 7 repeats of N calls, per call, the
variants interleaved. A diagnostic for the perf notes, not a benchmark row.

    python3 bench/debug/apply_cost.py [--calls 20000]
"""
import argparse, os, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from voxconv import _ops  # noqa: E402


class Eight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, km, kind, cfg, which, inference, layout=None):
        ctx.km, ctx.kind, ctx.cfg, ctx.which, ctx.layout = km, kind, cfg, which, layout
        return a.view_as(a)

    @staticmethod
    def backward(ctx, g):
        return g, None, None, None, None, None, None, None


class Three(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, meta):
        ctx.meta = meta
        return a.view_as(a)

    @staticmethod
    def backward(ctx, g):
        return g, None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    n = ap.parse_args().calls
    a = torch.ones(1, requires_grad=True)
    b = torch.ones(1)
    cfg = (None, None, None, 0, 0)
    fast3, fast8 = _ops._fast_apply(Three), _ops._fast_apply(Eight)
    variants = {
        "Function.apply, 8 args": lambda: Eight.apply(a, b, None, "conv", cfg, 0, False, None),
        "Function.apply, 3 args": lambda: Three.apply(a, b, (None, "conv", cfg, 0, False, None)),
        "_fast_apply, 8 args": lambda: fast8(a, b, None, "conv", cfg, 0, False, None),
        "_fast_apply, 3 args": lambda: fast3(a, b, (None, "conv", cfg, 0, False, None)),
    }
    best = {k: float("inf") for k in variants}
    for _ in range(7):
        for k, fn in variants.items():
            for _ in range(200):
                fn()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            best[k] = min(best[k], 1e6 * (time.perf_counter() - t) / n)
    print(f"torch {torch.__version__}; fast path in use: {fast3 != Three.apply}")
    for k, v in best.items():
        print(f"  {k:26s} {v:6.2f} us per call (min of 7 x {n})")


if __name__ == "__main__":
    main()
