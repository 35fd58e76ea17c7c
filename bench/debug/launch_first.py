"""Launch first, record after (docs/perf-notes.md item 90): the GPU time of
one forward + backward from PyTorch with the convolution's forward pass
issued before its autograd node is made (_ops._Launched*, the default)
against the old order (the pass issued from inside Function.apply), in one
process, the two alternated round by round so that host drift falls on
both alike. The old order is what _ops runs under a functorch transform,
forced here by replacing _ops._transforms_active.

Rows: workload C's layer (C = 64 and 256, map cached, one sync per run as
torch_bench times it) and workload A's network forward + backward (fresh
SparseTensor per run). Also the host time of one layer call under grad
with the GPU kept busy (the order changes where the time falls, not how
much there is). A diagnostic for the perf notes; the numbers to quote
against the tool come from bench/torch_bench.py.

    python3 bench/debug/launch_first.py [--data-dir D] [--rounds 6] [--runs 10]
"""
import argparse, json, os, statistics, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch_bench as tb  # noqa: E402
sys.path.insert(0, os.path.dirname(__file__))
import call_latency  # noqa: E402
from a_profile import load_a_network  # noqa: E402
import voxconv  # noqa: E402
from voxconv import _ops  # noqa: E402

ORIG = _ops._transforms_active


def use(order):
    _ops._transforms_active = ORIG if order == "launch_first" else (lambda: True)


TIMER = tb.Timer(torch.device("cuda"))


def gpu_ms(fn, before):
    """One run as torch_bench times it (CUDA events, a sync around it)."""
    before()
    return TIMER.run(fn)[0]


def alternate(name, fn, before, rounds, runs, variants):
    """Times fn under each variant ({label: function that switches to it}),
    the order alternated round by round so that host drift falls on all
    alike; prints the medians and the round medians. The last variant's
    switch is left in force, so list the default last."""
    res = {label: [] for label in variants}
    for label, switch in variants.items():  # warm each
        switch()
        for _ in range(3):
            gpu_ms(fn, before)
    labels = list(variants)
    for r in range(rounds):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            variants[label]()
            res[label] += [gpu_ms(fn, before) for _ in range(runs)]
    variants[labels[-1]]()
    med = {label: statistics.median(v) for label, v in res.items()}
    a, b = labels[0], labels[1]
    print(f"{name:28s} " + "   ".join(f"{label} {m:8.3f} ms" for label, m in med.items())
          + f"   ({1e3 * (med[b] - med[a]):+.1f} us {b} - {a})", flush=True)
    for label, runs_ms in res.items():  # round medians: is the gap larger than the drift?
        print(f"    {label:12s} by round: " + " ".join(
            f"{statistics.median(runs_ms[i:i + runs]):.3f}"
            for i in range(0, len(runs_ms), runs)), flush=True)
    return {**{f"{label}_ms": m for label, m in med.items()}, "runs": res}


def ab(name, fn, before, rounds, runs):
    return alternate(name, fn, before, rounds, runs,
                     {"in_apply": lambda: use("in_apply"),
                      "launch_first": lambda: use("launch_first")})


def host_us(conv, x, calls=200):
    """Host us of one layer call under grad, the GPU kept busy
    (call_latency.hot), in either order."""
    out = {}
    for order in ("launch_first", "in_apply"):
        use(order)
        out[order] = call_latency.hot(lambda: conv(x), calls)[0]
    use("launch_first")
    print(f"host us per layer call under grad: launch first {out['launch_first']:.1f}, "
          f"in apply {out['in_apply']:.1f}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", default=None, help="write every run here")
    args = ap.parse_args()
    rec = {}
    targs = tb.parse_args(["--data-dir", args.data_dir, "--repeat", "3", "--warmup", "2",
                           "--settle-ms", "0", "--pass-idle-ms", "0"])
    targs.device = torch.device("cuda")
    net, coords, f16, counts = load_a_network(args.data_dir, torch.float16, targs.device)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{len(coords)} voxels", flush=True)
    for c in (64, 256):
        conv, x, _, _ = tb.torch_layer(targs, tb.Timer(targs.device), coords, c)
        dy = torch.rand(len(coords), c, device="cuda", dtype=x.feats.dtype)

        def fb():
            y = conv(x)
            y.feats.backward(dy)
            return y

        def clear():
            x.feats.grad = None
            conv.weight.grad = None
        rec[f"C={c} forward+backward"] = ab(f"C={c} forward+backward", fb, clear,
                                            args.rounds, args.runs)
        if c == 64:
            rec["host_us_grad"] = host_us(conv, x)
    leaf = f16.detach().clone().requires_grad_()
    dy = torch.rand(counts[-1], tb.LEVEL_CHANNELS[-1], device="cuda", dtype=torch.float16)

    def a_fb():
        y = net(voxconv.SparseTensor(leaf, coords))
        y.feats.backward(dy)
        return y

    def a_clear():
        leaf.grad = None
        for p in net.parameters():
            p.grad = None
    rec["A forward+backward"] = ab("A forward+backward", a_fb, a_clear, args.rounds,
                                   args.runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
