"""Two quantized subm3 layers in a row on workload A's level 0 (913,903
voxels), C = 64 and 256, f16 input and output: quantize(model, chain=False)
against chain=True (the first layer hands int8 features to the second at
its x_scale: no dequantise, no second quantise). CUDA events around the
model's forward, median of --repeat after warm-ups, the two variants
alternated. A diagnostic for docs/perf-notes.md item 85; the numbers to
quote for the PyTorch int8 path otherwise come from bench/torch_bench.py.

    python3 bench/debug/int8_chain.py [--data-dir D] [--channels 64,256]
"""
import argparse, os, statistics, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402
from voxconv import nn as vnn, quantization as Q  # noqa: E402


def timed(timer, fn, repeat):
    """Median of `repeat` single calls (torch_bench's Timer: CUDA events on
    the GPU, the host clock on the CPU)."""
    return statistics.median(timer.run(fn)[0] for _ in range(repeat))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--channels", default="64,256")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    pts = tb.workload_a_points(args.data_dir)
    if dev == "cpu":  # a smoke run: a slice of the scan
        pts = pts[:20000]
    coords, _, _ = voxconv.voxelize(
        torch.from_numpy(pts).to(dev), 0.1, origin=(-80.0, -80.0, -2.0),
        grid_size=(1600, 1600, 80), reduce="first", n_feat=3)
    torch.manual_seed(0)
    for c in [int(v) for v in args.channels.split(",")]:
        dt = torch.float16 if dev == "cuda" else torch.float32
        x = voxconv.SparseTensor(torch.randn(len(coords), c, device=dev).to(dt), coords)
        m = vnn.Sequential(vnn.SparseConv3d(c, c, 3, bias=False),
                           vnn.SparseConv3d(c, c, 3, bias=False)).to(dev, dt).eval()
        qs = {chain: Q.quantize(m, [x], out_dtype=dt, chain=chain)
              for chain in (False, True)}
        assert qs[True][0].int8_out and not qs[False][0].int8_out
        res = {False: [], True: []}
        timer = tb.Timer(torch.device(dev))
        with torch.inference_mode():
            for chain in (False, True):  # warm-up: maps, tuning
                for _ in range(3):
                    qs[chain](x)
            for _ in range(2):
                for chain in (False, True):
                    res[chain].append(timed(timer, lambda: qs[chain](x), args.repeat))
            same = torch.equal(qs[False](x).feats, qs[True](x).feats)
        # bitwise equal with float32 between the layers (CPU run); with f16
        # the unchained first output is rounded to f16 before its quantise
        print(f"C = {c} ({dev}, {len(coords)} voxels): two quantized layers, forward ms "
              f"(two rounds of {args.repeat}): unchained "
              f"{[round(v, 4) for v in res[False]]}, chained "
              f"{[round(v, 4) for v in res[True]]}; outputs bitwise equal: {same}", flush=True)


if __name__ == "__main__":
    main()
