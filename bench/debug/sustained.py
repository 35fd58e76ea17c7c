"""Does a long back-to-back series slow the GPU (power or clock limits)?
Workload C's layer from Python (torch_bench's torch_layer), forward +
backward at --channels, timed with CUDA events per run, in three series
in one process: back to back (torch_bench's protocol since 5a5c221 when
the cache is warm), each run after --gap-ms of idle, and back to back after
a --settle-ms idle (the protocol before). The SM clock and power draw are
read with nvidia-smi between series. A diagnostic for the C = 256
forward+backward row (1.01 of the tool with a settle, 1.11 without).

    python3 bench/debug/sustained.py [--channels 256] [--runs 10]
"""
import argparse, os, statistics, subprocess, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from call_latency import workload_c_layers  # noqa: E402
from layer_profile import fwd_bwd  # noqa: E402


def smi():
    q = "clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi: {e}"


def series(fn, runs, gap_ms):
    out = []
    for _ in range(runs):
        if gap_ms:
            time.sleep(gap_ms / 1e3)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y = fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
        del y
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--gap-ms", type=float, default=200.0)
    ap.add_argument("--settle-ms", type=float, default=2000.0)
    args = ap.parse_args()
    conv, x = workload_c_layers(args.data_dir, [args.channels])[0]
    fb = fwd_bwd(conv, x)

    series(fb, 3, 0)
    for rnd in range(2):
        for name, gap, settle in (("back to back", 0, 0), (f"{args.gap_ms:.0f} ms gaps",
                                                            args.gap_ms, 0),
                                  (f"after {args.settle_ms:.0f} ms idle", 0, args.settle_ms)):
            if settle:
                time.sleep(settle / 1e3)
            before = smi()
            ms = series(fb, args.runs, gap)
            after = smi()
            print(f"round {rnd} {name:22s} median {statistics.median(ms):.3f} ms  runs "
                  f"{' '.join(f'{v:.2f}' for v in ms)}\n    smi before [{before}] after "
                  f"[{after}]", flush=True)


if __name__ == "__main__":
    main()
