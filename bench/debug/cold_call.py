"""The first call after a synchronisation ("cold"), several ways of making
the same C = 64 layer call, interleaved in shuffled order each round so
that every variant meets every host state (issue 20: torch_bench's C = 64
forward row is one such call per run, and s31's call_latency measured the
module call under no_grad at 92 us cold against 34 us for conv.forward).
Per variant: host us of the call and the CUDA-event ms around it (what
torch_bench's row measures), p10 / median / p90. A diagnostic.

    python3 bench/debug/cold_call.py [--data-dir D] [--rounds 100]
"""
import argparse, gc, os, random, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from call_latency import layer_pieces, workload_c_layers  # noqa: E402


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args()
    conv, x = workload_c_layers(args.data_dir, [args.channels])[0]
    _, _, _, _, c_call = layer_pieces(conv, x)

    def module():
        with torch.no_grad():
            return conv(x)

    def forward():
        with torch.no_grad():
            return conv.forward(x)

    def module_outside():  # no_grad entered before the clock
        return conv(x)

    variants = {"C call": (c_call, False), "forward": (forward, False),
                "module": (module, False), "module, no_grad outside": (module_outside, True),
                "autograd module": (lambda: conv(x), False)}
    for fn, inside in variants.values():
        for _ in range(5):
            if inside:
                with torch.no_grad():
                    fn()
            else:
                fn()
    res = {k: ([], []) for k in variants}
    names = list(variants)
    gc.disable()
    for _ in range(args.rounds):
        random.shuffle(names)
        for name in names:
            fn, outside = variants[name]
            ctx = torch.no_grad() if outside else torch.enable_grad()
            with ctx:
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                t = time.perf_counter()
                y = fn()
                h = 1e6 * (time.perf_counter() - t)
                e.record()
                e.synchronize()
            res[name][0].append(h)
            res[name][1].append(s.elapsed_time(e))
            del y
    gc.enable()
    print(f"C = {args.channels}, cold calls (a synchronisation before each), {args.rounds} "
          f"rounds, variants shuffled per round")
    print(f"  {'variant':26s} {'host us p10 / p50 / p90':>26s}   {'event ms p10 / p50 / p90':>26s}")
    for name in variants:
        h, g = res[name]
        print(f"  {name:26s} {q(h, .1):7.1f} {statistics.median(h):7.1f} {q(h, .9):7.1f}"
              f"     {q(g, .1):7.4f} {statistics.median(g):7.4f} {q(g, .9):7.4f}")


if __name__ == "__main__":
    main()
