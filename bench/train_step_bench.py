#!/usr/bin/env python3
"""BENCHMARKS.md workload G: the MiniMinkUNet training step of
examples/train_segmentation.py in every precision mode, back to back.

Runs the example once per mode, each in a fresh process (its own CUDA
context and allocator; by default its own empty tuning cache, so every
mode's first step includes its autotuning):

    fp32        float32
    fp32-s1     float32 with another initialisation seed: the run-to-run
                noise that the other modes' losses are judged against
    amp-fp16    torch.autocast(float16) + GradScaler
    amp-bf16    torch.autocast(bfloat16)
    half        model.half(), float16 input, no loss scaling

and prints: mode, first step (autotuning included), median step, speed-up
over fp32, final loss, mean +- std of the loss over the last --last steps,
its distance from fp32's, and the IoU on the scan. A mode's loss counts as
within noise when its last-steps mean is within 2x the distance between the
two fp32 seeds (a small sample: read the numbers too).

    # GPU: 5 runs of 300 steps, about 1-2 minutes on an H100/H200
    python3 bench/train_step_bench.py --json train_step.json
    # CPU smoke (the modes this torch supports on the CPU)
    /usr/bin/python3 bench/train_step_bench.py --device cpu --small --steps 8 --last 4

BENCHMARKS.md workload G: SGD (momentum 0.9, lr 0.05, cosine decay), 5 cm
voxels, widths 32,64,128,256,256; the example's defaults otherwise. Under
AMP the sparse convolutions follow torch.autocast by themselves (with a
library that predates that they run in float32); nothing here casts by hand.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from bench_common import commit_id  # noqa: E402  (bench/ is the script folder)
EXAMPLE = os.path.join(REPO, "examples", "train_segmentation.py")
sys.path.insert(0, os.path.join(REPO, "examples"))
import train_segmentation as ts  # noqa: E402  (precision_unsupported, voxconv)

# name -> (example arguments, seed)
MODES = {
    "fp32": ([], 0),
    "fp32-s1": ([], 1),
    "amp-fp16": (["--amp", "fp16"], 0),
    "amp-bf16": (["--amp", "bf16"], 0),
    "half": (["--half"], 0),
}
NOISE_FACTOR = 2.0


def progress(msg):
    print(f"[train_step_bench] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated subset of {','.join(MODES)} (default all)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--last", type=int, default=50,
                    help="loss statistics over the last N steps (default 50)")
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    ap.add_argument("--lr", type=float, default=None, help="default: the example's")
    ap.add_argument("--small", action="store_true", help="the example's CI size")
    ap.add_argument("--data-dir", default=None, help="passed to the example")
    ap.add_argument("--scan", default=None, help="passed to the example")
    ap.add_argument("--cache", choices=["cold", "shared"], default="cold",
                    help="cold: every run starts from an empty tuning cache of its own "
                         "(default; first step = full autotuning); shared: the user's cache")
    ap.add_argument("--settle-ms", type=int, default=None,
                    help="idle after the first step (default 2000 on CUDA, 0 on the CPU)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--json", default=None, help="write everything here")
    args = ap.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        ap.error(f"--modes: unknown {bad}; want a subset of {','.join(MODES)}")
    if args.steps < 2:
        ap.error("--steps: want at least 2 (the first step is timed apart)")
    if not 1 <= args.last <= args.steps:
        ap.error(f"--last {args.last}: want 1..--steps")
    if args.settle_ms is None:
        args.settle_ms = 2000 if args.device.startswith("cuda") else 0
    return args


def run_mode(args, name, tmp):
    extra, seed = MODES[name]
    out = os.path.join(tmp, f"{name}.json")
    cmd = [sys.executable, EXAMPLE, "--device", args.device, "--steps", str(args.steps),
           "--optimizer", args.optimizer, "--seed", str(seed), "--settle-ms",
           str(args.settle_ms), "--log-every", str(args.log_every), "--json", out, *extra]
    for flag, value in (("--lr", args.lr), ("--data-dir", args.data_dir),
                        ("--scan", args.scan)):
        if value is not None:
            cmd += [flag, str(value)]
    if args.small:
        cmd.append("--small")
    env = dict(os.environ)
    if args.cache == "cold":
        env["VOXCONV_BENCHMARK_CACHE_DIR"] = os.path.join(tmp, f"cache-{name}")
    progress(f"{name}: {' '.join(cmd)}")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith(("step ", "first loss", "mIoU", "voxconv ")) or "rror" in line:
            print(f"    {line.rstrip()}", file=sys.stderr, flush=True)
    if p.wait() != 0:
        raise SystemExit(f"train_step_bench: {name} failed ({' '.join(cmd)}):\n"
                         + "".join(lines[-40:]))
    with open(out) as f:
        rec = json.load(f)
    rec["cmd"] = cmd
    return rec


def summarise(rec, last):
    tail = rec["loss"][-last:]
    return {"first_step_ms": rec["first_step_ms"], "median_step_ms": rec["median_step_ms"],
            "final_loss": rec["loss"][-1], "last_mean": statistics.fmean(tail),
            "last_std": statistics.pstdev(tail), "miou": rec.get("miou"),
            "nonfinite_losses": sum(1 for v in rec["loss"] if v != v or abs(v) == float("inf"))}


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    res = {"script": "bench/train_step_bench.py",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit_id(REPO), "device": args.device,
           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
           else f"CPU ({os.cpu_count()} cores online)",
           "torch": torch.__version__, "python": platform.python_version(),
           "voxconv": ts.voxconv.library_version(), "library_path": ts.voxconv.library_path,
           "steps": args.steps, "last": args.last, "optimizer": args.optimizer,
           "cache": args.cache, "settle_ms": args.settle_ms, "small": args.small,
           "modes": {}, "skipped": {}, "rows": []}
    with tempfile.TemporaryDirectory(prefix="train_step_bench_") as tmp:
        for name in args.modes:
            extra = MODES[name][0]
            amp = extra[1] if extra[:1] == ["--amp"] else "none"
            why = ts.precision_unsupported(device, amp, "--half" in extra)
            if why:
                progress(f"{name}: skipped: {why}")
                res["skipped"][name] = why
                continue
            rec = run_mode(args, name, tmp)
            res["modes"][name] = {"summary": summarise(rec, args.last), "record": rec}

    s = {k: v["summary"] for k, v in res["modes"].items()}
    base = s.get("fp32")
    noise = abs(s["fp32-s1"]["last_mean"] - base["last_mean"]) if base and "fp32-s1" in s else None
    res["noise"] = {"fp32_seed_delta": noise, "factor": NOISE_FACTOR}
    print(f"\n{res['device_name']}, torch {torch.__version__}, voxconv {res['voxconv']}, commit "
          f"{res['commit']}; {args.steps} steps, {args.optimizer}, cache {args.cache}")
    print(f"{'mode':<10} {'first step ms':>13} {'median ms':>10} {'speed-up':>8} "
          f"{'final loss':>10} {f'loss last {args.last}':>20} {'vs fp32':>9} {'mIoU':>6}")
    for name, v in s.items():
        speed = base["median_step_ms"] / v["median_step_ms"] if base else None
        delta = v["last_mean"] - base["last_mean"] if base else None
        verdict = None
        if delta is not None and noise is not None and name not in ("fp32", "fp32-s1"):
            verdict = abs(delta) <= NOISE_FACTOR * noise
        row = dict(mode=name, speedup=speed, delta_vs_fp32=delta, within_noise=verdict, **v)
        res["rows"].append(row)
        fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
        note = {True: "  within noise", False: "  OUTSIDE noise", None: ""}[verdict]
        if v["nonfinite_losses"]:
            note += f"  ({v['nonfinite_losses']} non-finite losses)"
        print(f"{name:<10} {v['first_step_ms']:>13.1f} {v['median_step_ms']:>10.2f} "
              f"{fmt(speed, '.2f'):>8} {v['final_loss']:>10.4f} "
              f"{v['last_mean']:>11.4f} ± {v['last_std']:<6.4f} {fmt(delta, '+.4f'):>9} "
              f"{fmt(None if v['miou'] is None else 100 * v['miou'], '.1f'):>6}{note}")
    if noise is not None:
        print(f"noise: |mean(fp32-s1) - mean(fp32)| over the last {args.last} steps = "
              f"{noise:.4f}; 'within noise' = |vs fp32| <= {NOISE_FACTOR:g} x that")
    for name, why in res["skipped"].items():
        print(f"{name:<10} skipped: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        progress(f"wrote {args.json}")
    return res


if __name__ == "__main__":
    main()
