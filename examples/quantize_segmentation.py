#!/usr/bin/env python3
"""Post-training int8 quantization of the segmentation example, judged on
a scan it was not calibrated on (issue 23's accuracy figures).

Trains examples/train_segmentation.py's MiniMinkUNet on the SemanticKITTI
scan (float32, as that example does; ``--augment``: a randomly rotated,
mirrored and scaled copy each step), calibrates ``voxconv.quantization``
on the same scan (plus ``--calibrate-extra`` recordings and
``--calibrate-augmented`` augmented copies), and then runs the float32
model, the same model in float16 (``model.half()``: the "fp16
predictions" int8 is compared with) and the int8 model on

* the training scan, and
* a held-out scan (default: KITTI object frame 000000, another sensor
  recording the network never saw, neither in training nor calibration).

Prints, for each scan: the per-layer SQNR of the int8 layers against the
float layers (``voxconv.quantization.sqnr_report``: each layer fed the
float model's input), its minimum and median, and the share of voxels
whose predicted class (argmax) the int8 model shares with the fp16 model
and with the fp32 model; also how often fp16 and fp32 themselves agree,
the floor of what a lower precision can be expected to reach. Per layer
also the share of its input past the calibrated range (clipped); with
``--time N`` each model's forward time on the held-out scan.

    # GPU, the example's full network at 5 cm, 300 training steps
    python3 examples/quantize_segmentation.py --json quant.json
    # both observers (min/max and the 99.99th percentile)
    python3 examples/quantize_segmentation.py --observer minmax,percentile
    # the first layer kept float, and instead its input equalised per channel
    python3 examples/quantize_segmentation.py --keep-float stem.0.0 --equalize stem.0.0
    # what met issue 23's accuracy targets (H200, 5 seeds: held out
    # 99.13-99.52 % with the first layer float and the others equalised;
    # docs/perf-notes.md item 118)
    python3 examples/quantize_segmentation.py --augment --keep-float stem.0.0 \
        --equalize all --calibrate-extra scans/kitti_000008.bin --calibrate-augmented 8
    # CPU, CI-sized (40 cm voxels, narrow network)
    /usr/bin/python3 examples/quantize_segmentation.py --small --steps 30 --device cpu

On the CPU the fp16 model is skipped where torch has no half-precision
BatchNorm there (Debian's torch 1.13); agreement is then reported against
fp32 only.
"""

import argparse
import copy
import json
import math
import os
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)

import voxconv  # noqa: E402
from voxconv import quantization as Q  # noqa: E402
import train_segmentation as ex  # noqa: E402

DEFAULT_HELDOUT = os.path.join("scans", "kitti_000000.bin")


def names(text):
    """'a, b' -> ('a', 'b')."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def conv_layers(model):
    """Names of every sparse conv layer of model (what --equalize all
    means)."""
    return tuple(n for n, m in model.named_modules()
                 if isinstance(m, (voxconv.nn.SparseConv3d, voxconv.nn.SparseDepthwiseConv3d)))


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None,
                    help="folder holding scans/ (default $VOXCONV_DATA_DIR, else ../shared/data)")
    ap.add_argument("--scan", default=None,
                    help="training and calibration scan (default scans/semantickitti_00_000000.bin)")
    ap.add_argument("--heldout", default=None,
                    help="held-out scan, float32 x y z remission (default scans/kitti_000000.bin)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--small", action="store_true",
                    help="0.4 m voxels, widths 8,16,24,32 (CPU-sized)")
    ap.add_argument("--voxel", type=float, default=None, help="voxel size in m (default 0.05)")
    ap.add_argument("--widths", type=ex.parse_widths, default=None,
                    help="encoder widths (default 32,64,128,256,256)")
    ap.add_argument("--lr", type=float, default=None, help="AdamW learning rate")
    ap.add_argument("--observer", default="minmax",
                    help="comma-separated: minmax, percentile, mse (default minmax)")
    ap.add_argument("--percentile", type=float, default=99.99)
    ap.add_argument("--keep-float", default="",
                    help="comma-separated conv layers left in float (e.g. stem.0.0, the "
                         "4-channel first layer); each run is also made with none kept")
    ap.add_argument("--equalize", default="",
                    help="comma-separated conv layers whose input is equalised per channel "
                         "(quantize(equalize=...)), or 'all'; a run of its own beside the "
                         "others, and with --keep-float one more with both (the kept "
                         "layers float, the others equalised)")
    ap.add_argument("--calibrate-extra", default="",
                    help="comma-separated further scans (float32 x y z remission, as "
                         "--heldout) added to the calibration batches; never the held-out "
                         "scan")
    ap.add_argument("--calibrate-augmented", type=int, default=0, metavar="N",
                    help="also calibrate on N augmented copies of the training scan "
                         "(as --augment draws them)")
    ap.add_argument("--augment", action="store_true",
                    help="train on a randomly rotated (about z), mirrored and scaled copy "
                         "of the scan each step, as LiDAR segmenters are trained, instead "
                         "of the one scan as recorded")
    ap.add_argument("--chain", action="store_true",
                    help="quantize(chain=True): int8 handed from layer to layer where one "
                         "feeds the next alone (the model's output keeps its bits)")
    ap.add_argument("--time", type=int, default=0, metavar="N",
                    help="also time N forwards of each model on the held-out scan, a fresh "
                         "SparseTensor each (maps built inside), median ms")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the figures here")
    return ap


def train(model, batch, steps, lr):
    """AdamW with a cosine schedule, float32, as train_segmentation's
    default, on batch() = (SparseTensor, targets) each step; returns the
    last loss."""
    opt = torch.optim.AdamW(model.parameters(), lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
    loss_fn = nn.CrossEntropyLoss(ignore_index=ex.IGNORE)
    loss = None
    for _ in range(steps):
        x, target = batch()
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    return float(loss.detach())


def augmented(pts, g):
    """pts (x y z remission) rotated about z by a uniform angle, x mirrored
    with probability 1/2 and scaled by U(0.95, 1.05): the usual LiDAR
    segmentation augmentation, drawn from generator g."""
    a = float(torch.rand((), generator=g)) * 2 * math.pi
    k = 0.95 + 0.1 * float(torch.rand((), generator=g))
    fx = -1.0 if float(torch.rand((), generator=g)) < 0.5 else 1.0
    c, s = math.cos(a) * k, math.sin(a) * k
    rot = torch.tensor([[c * fx, s * fx, 0.0], [-s, c, 0.0], [0.0, 0.0, k]])
    out = pts.clone()
    out[:, :3] = pts[:, :3] @ rot
    return out


def half_model(model, device):
    """model in float16 (a copy), or None where torch cannot run it."""
    if ex.precision_unsupported(device, "none", True):
        return None
    return copy.deepcopy(model).half()


def time_forward(model, x, runs, dtype=None):
    """Median ms of `runs` forwards of model on a fresh SparseTensor of x's
    points each (kernel maps built inside, as for a new scan), after 3
    untimed ones, each from an idle device (train_segmentation's StepClock:
    CUDA events on the GPU). Under torch.inference_mode."""
    feats = x.feats if dtype is None else x.feats.to(dtype)
    clock = ex.StepClock(feats.device)
    with torch.inference_mode():
        for i in range(runs + 3):
            xi = voxconv.SparseTensor(feats, x.coords)
            ex.synchronize(feats.device)
            clock.start()
            model(xi)
            clock.stop()
    times = sorted(clock.times_ms()[3:])
    return times[len(times) // 2]


def evaluate(name, model, m16, qm, x):
    """Per-layer SQNR and argmax agreement on one scan (a dict)."""
    rep = Q.sqnr_report(model, qm, x)
    dbs = sorted(db for _n, _k, db in rep)
    with torch.inference_mode():
        p32 = model(x).argmax(1)
        p8 = qm(x).argmax(1)
        p16 = m16(x.half()).argmax(1) if m16 is not None else None
    out = {
        "voxels": len(x),
        "sqnr_db": rep.as_dict(),
        "clipped": rep.clipped,
        "sqnr_min_db": dbs[0],
        "sqnr_median_db": dbs[len(dbs) // 2],
        "model_output_sqnr_db": rep.model_sqnr,
        "agree_int8_fp32": float((p8 == p32).float().mean()),
    }
    if p16 is not None:
        out["agree_int8_fp16"] = float((p8 == p16).float().mean())
        out["agree_fp16_fp32"] = float((p16 == p32).float().mean())
    print(f"\n{name} ({len(x)} voxels)\n{rep}")
    line = (f"{name}: SQNR min {out['sqnr_min_db']:.2f} dB, median "
            f"{out['sqnr_median_db']:.2f} dB; argmax agreement int8/fp32 "
            f"{100 * out['agree_int8_fp32']:.2f} %")
    if p16 is not None:
        line += (f", int8/fp16 {100 * out['agree_int8_fp16']:.2f} %, fp16/fp32 "
                 f"{100 * out['agree_fp16_fp32']:.2f} %")
    print(line, flush=True)
    return out


def unlabelled(pts, voxel, device):
    """The SparseTensor of a scan without labels (as voxelize_scan makes it)."""
    return ex.voxelize_scan(pts, torch.full((len(pts),), ex.IGNORE), voxel, device)[0]


def check_args(ap, args):
    """Refuses bad values by name (argparse's exit); returns the observers."""
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: want at least 1")
    observers = [o.strip() for o in args.observer.split(",") if o.strip()]
    bad = [o for o in observers if o not in ("minmax", "percentile", "mse")]
    if bad or not observers:
        ap.error(f"--observer {args.observer!r}: want minmax, percentile and/or mse")
    if args.time < 0:
        ap.error(f"--time {args.time}: want N >= 0")
    if args.calibrate_augmented < 0:
        ap.error(f"--calibrate-augmented {args.calibrate_augmented}: want N >= 0")
    if not 0 < args.percentile <= 100:
        ap.error(f"--percentile {args.percentile}: want a value in (0, 100]")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU")
    return observers


def calibration_batches(ap, args, x, pts, labels, data_dir, heldout, voxel, device):
    """[x, --calibrate-extra scans, --calibrate-augmented copies of pts]
    and the extra scans' paths; the held-out scan is refused."""
    extra = [os.path.join(data_dir, e) if not os.path.isabs(e) and not os.path.exists(e)
             else e for e in names(args.calibrate_extra)]
    if any(os.path.realpath(e) == os.path.realpath(heldout) for e in extra):
        ap.error("--calibrate-extra: the held-out scan must not be calibrated on")
    calib = [x]
    for e in extra:
        calib.append(unlabelled(ex.read_points(e, "--calibrate-extra"), voxel, device))
    gc = torch.Generator().manual_seed(args.seed + 7919)  # not training's draws
    for _ in range(args.calibrate_augmented):
        calib.append(ex.voxelize_scan(augmented(pts, gc), labels, voxel, device)[0])
    return calib, extra


def quantize_variants(args, model):
    """quantize() keywords of each run, with its tag's suffix: none, the
    kept-float layers, the equalised ones, and both together."""
    variants = [({}, "")]
    kf = names(args.keep_float)
    if kf:
        variants.append(({"keep_float": kf}, f", float: {','.join(kf)}"))
    if args.equalize:
        every = args.equalize == "all"
        eq = conv_layers(model) if every else names(args.equalize)
        variants.append(({"equalize": eq},
                         ", equalised: " + ("all" if every else ",".join(eq))))
        rest = tuple(n for n in eq if n not in kf)
        if kf and rest:  # the kept layers float, the others equalised
            variants.append(({"keep_float": kf, "equalize": rest},
                             f", float: {','.join(kf)}, equalised: "
                             + ("all others" if every else ",".join(rest))))
    return variants


def run_variant(args, model, m16, qm, x, x2):
    """The figures of one quantized model (a dict for the JSON)."""
    qlayers = [m for m in qm.modules() if isinstance(m, Q._QuantizedConvBase)]
    out = {
        "calibration": evaluate("calibration scan", model, m16, qm, x),
        "heldout": evaluate("held-out scan", model, m16, qm, x2),
        # layers handing int8 on (chain) / with the layer before's
        # equalisation folded in (fold_equalization)
        "chained_layers": sum(bool(getattr(m, "int8_out", False)) for m in qlayers),
        "folded_layers": sum(getattr(m, "input_factor", None) is not None for m in qlayers),
    }
    if args.time:
        out["forward_ms"] = time_forward(qm, x2, args.time)
        print(f"int8 forward on the held-out scan: {out['forward_ms']:.3f} ms", flush=True)
    return out


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    observers = check_args(ap, args)
    device = torch.device(args.device)
    data_dir = args.data_dir or ex.DATA
    scan = args.scan or os.path.join(data_dir, ex.DEFAULT_SCAN)
    heldout = args.heldout or os.path.join(data_dir, DEFAULT_HELDOUT)
    voxel = args.voxel or (0.4 if args.small else 0.05)
    widths = args.widths or ([8, 16, 24, 32] if args.small else [32, 64, 128, 256, 256])
    lr = args.lr or (2e-2 if args.small else 1e-2)
    torch.manual_seed(args.seed)

    pts, labels = ex.load_scan(scan, os.path.splitext(scan)[0] + ".label")
    x, target, _ = ex.voxelize_scan(pts, labels, voxel, device)
    x2 = unlabelled(ex.read_points(heldout, "--heldout"), voxel, device)
    calib, extra = calibration_batches(ap, args, x, pts, labels, data_dir, heldout, voxel,
                                       device)
    print(f"voxconv {voxconv.library_version()}; device {device}; {len(x)} voxels "
          f"(training scan) / {len(x2)} (held out) at {voxel} m; widths {widths}; "
          f"calibration: {' + '.join(str(len(c)) for c in calib)} voxels", flush=True)
    model = ex.MiniMinkUNet(x.num_channels, len(ex.CLASSES), widths).to(device)
    g = torch.Generator().manual_seed(args.seed)
    if args.augment:
        def batch():
            return ex.voxelize_scan(augmented(pts, g), labels, voxel, device)[:2]
    else:
        def batch():
            return x, target
    t0 = time.perf_counter()
    loss = train(model, batch, args.steps, lr)
    print(f"trained {args.steps} steps{' (augmented)' if args.augment else ''} in "
          f"{time.perf_counter() - t0:.1f} s, last loss {loss:.4f}", flush=True)
    m16 = half_model(model, device)
    result = {"device": str(device), "voxel_m": voxel, "widths": widths,
              "steps": args.steps, "final_loss": loss, "scan": scan, "heldout": heldout,
              "augment": args.augment, "calibrate_extra": extra,
              "calibrate_augmented": args.calibrate_augmented, "chain": args.chain,
              "calibration_voxels": [len(c) for c in calib],
              "observers": {}}
    if args.time:
        result["forward_ms"] = {"fp32": time_forward(model, x2, args.time)}
        if m16 is not None:
            result["forward_ms"]["fp16"] = time_forward(m16, x2, args.time, torch.float16)
        print(f"forward on the held-out scan (maps built inside, median of {args.time}): "
              + ", ".join(f"{k} {v:.3f} ms" for k, v in result["forward_ms"].items()),
              flush=True)
    for obs in observers:
        for kw, suffix in quantize_variants(args, model):
            qm = Q.quantize(model, calib, observer=obs, percentile=args.percentile,
                            chain=args.chain, **kw)
            tag = (f"percentile {args.percentile}" if obs == "percentile" else obs) + suffix
            print(f"\n==== observer: {tag}", flush=True)
            result["observers"][tag] = run_variant(args, model, m16, qm, x, x2)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
