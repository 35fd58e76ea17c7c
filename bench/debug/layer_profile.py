"""Where one cached-map conv call from PyTorch spends its time (issue 20:
the C = 64 layer measured 1.12-1.22x the tool forward with only ~24 us of
host time per call). For workload C's layer (bench/torch_bench.py's
torch_layer), prints:
  1. CUDA-event time of a single call after a sync (what torch_bench
     times) and of 20 calls queued back to back, per call (GPU-bound);
  2. from torch.profiler, for one single call: every CUDA runtime call
     (host us) and every kernel/copy/memset (GPU us, launch->start us), so
     the GPU time between the start and end events can be split into
     kernels and idle.
With --backward, the same for torch_bench's forward+backward (the forward
with autograd, then backward from a given gradient: the backward's
launches come from torch's autograd thread), with the GPU idle between
consecutive kernels summed.
A diagnostic; the numbers to quote come from bench/torch_bench.py.

    python3 bench/debug/layer_profile.py [--data-dir D] [--channels 64]
"""
import argparse, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from call_latency import layer_pieces, profiled_call, workload_c_layers  # noqa: E402


def timed(fn, n_calls, repeat=10):
    out = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n_calls):
            y = fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / n_calls)
        del y
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--channels", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--trace", default="layer_trace.json")
    ap.add_argument("--backward", action="store_true",
                    help="profile forward+backward instead of the forward")
    args = ap.parse_args()
    for c, (conv, x) in zip(args.channels, workload_c_layers(args.data_dir, args.channels)):

        def no_grad_fwd():
            with torch.no_grad():
                return conv(x)
        fwd = fwd_bwd(conv, x) if args.backward else no_grad_fwd
        for _ in range(20):
            fwd()
        one, many = timed(fwd, 1), timed(fwd, 20)
        what = "forward+backward" if args.backward else "forward"
        print(f"\nC = {c} {what}: single call {one:.4f} ms, 20 queued {many:.4f} ms per "
              f"call (difference {1e3 * (one - many):.1f} us)")
        # The same call with less Python around it: the eager op layer
        # (allocation + C call) and the C call alone (output preallocated).
        from voxconv import _ops
        km, cfg, feats, w, c_only = layer_pieces(conv, x)

        def op_layer():
            return _ops._conv_fwd(feats, w, km, cfg, False)

        pieces = ((("module", fwd),) if args.backward else
                  (("module", fwd), ("op layer", op_layer), ("C call", c_only)))
        for name, fn in pieces:
            for _ in range(5):
                fn()
            hosts, gpus = [], []
            for _ in range(20):
                torch.cuda.synchronize()
                s_ev = torch.cuda.Event(enable_timing=True)
                e_ev = torch.cuda.Event(enable_timing=True)
                s_ev.record()
                t0 = time.perf_counter()
                y = fn()
                t1 = time.perf_counter()
                e_ev.record()
                e_ev.synchronize()
                hosts.append(1e6 * (t1 - t0))
                gpus.append(s_ev.elapsed_time(e_ev))
                del y
            print(f"  {name:8s}: single call {statistics.median(gpus):.4f} ms (events), "
                  f"host {statistics.median(hosts):.1f} us")
        ev, a, b = profiled_call(fwd, args.trace.replace(".json", f"_c{c}.json"), repeat=3)
        print(f"  last call: {b - a:.1f} us of host time")
        launch = {}
        print("  host (CUDA runtime calls of the last call, us from its start):")
        for e in ev:
            if a <= e["ts"] <= b and e.get("cat") in ("cuda_runtime", "cuda_driver"):
                launch[e.get("args", {}).get("correlation")] = e["ts"]
                print(f"    +{e['ts'] - a:7.1f}  {e['dur']:6.1f}  {e['name']}")
        print("  GPU (kernels, copies, memsets of that call):")
        end, idle = None, 0.0
        for e in ev:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                c_id = e.get("args", {}).get("correlation")
                if c_id in launch:
                    gap = 0.0 if end is None else max(0.0, e["ts"] - end)
                    idle += gap
                    end = max(end or 0.0, e["ts"] + e["dur"])
                    print(f"    +{e['ts'] - a:7.1f}  {e['dur']:7.1f}  launch->start "
                          f"{e['ts'] - launch[c_id]:6.1f}  idle before {gap:6.1f}  "
                          f"{e['name'][:80]}")
        print(f"  GPU idle between that call's kernels: {idle:.1f} us")


def fwd_bwd(conv, x):
    """torch_bench's forward+backward of one layer (gradients cleared
    before each call, as its `before` hook does, untimed there too)."""
    g = torch.Generator(device="cuda").manual_seed(7)
    dy = (torch.rand(x.feats.shape[0], conv.out_channels, device="cuda", generator=g)
          * 2 - 1).to(x.feats.dtype)

    def run():
        x.feats.grad = None
        conv.weight.grad = None
        y = conv(x)
        y.feats.backward(dy)
        return y
    return run


if __name__ == "__main__":
    main()
