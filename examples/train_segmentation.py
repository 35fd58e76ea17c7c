#!/usr/bin/env python3
"""Train a small MinkUNet-style network for LiDAR semantic segmentation on
one SemanticKITTI scan (../shared/data/scans/semantickitti_00_000000.bin
and .label) with voxconv, then print the per-class IoU on that scan.

This is a demonstration that the whole stack trains (kernel maps shared
between layers, strided 2x2x2 downsampling, transposed upsampling back onto
the encoder's coordinates, skip connections, BatchNorm/ReLU from torch):
the network fits the one scan it sees, so the IoU measures fitting, not
generalisation. It is also BENCHMARKS.md workload G (the training step):
``--amp fp16|bf16`` trains under ``torch.autocast`` (with a GradScaler for
fp16), ``--half`` converts the model to float16, and the first-step time
(autotuning included) and the median step time are reported
(bench/train_step_bench.py runs every mode back to back).

    # GPU (if present), full resolution (5 cm voxels), 300 steps
    python3 examples/train_segmentation.py
    # the same under automatic mixed precision
    python3 examples/train_segmentation.py --amp fp16 --json amp.json
    # CPU, CI-sized (40 cm voxels, narrow network): well under a minute
    /usr/bin/python3 examples/train_segmentation.py --small --steps 20 --device cpu

Prints "step N loss L" lines, then one IoU line per class present in the
scan and the mean IoU; ``--json FILE`` also writes the loss curve, the IoUs
and timings.

The model and data helpers (load_scan, voxelize_scan, MiniMinkUNet,
autocast, grad_scaler, ...) are importable: examples/train_ddp.py trains
the same network on several GPUs.
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
try:
    import voxconv
except ImportError:  # run from a source tree without installing
    sys.path.insert(0, os.path.join(REPO, "python"))
    import voxconv


def default_data_dir():
    """$VOXCONV_DATA_DIR, else ../shared/data beside the repository (the
    GPU machine sets VOXCONV_DATA_DIR or passes --data-dir ./.devdata)."""
    return os.environ.get("VOXCONV_DATA_DIR",
                          os.path.join(os.path.dirname(REPO), "shared", "data"))


DATA = default_data_dir()
DEFAULT_SCAN = os.path.join("scans", "semantickitti_00_000000.bin")

# SemanticKITTI raw label -> 19 training classes (semantic-kitti.yaml
# learning_map; moving classes folded into their static class); -1 = ignore.
CLASSES = ["car", "bicycle", "motorcycle", "truck", "other-vehicle", "person", "bicyclist",
           "motorcyclist", "road", "parking", "sidewalk", "other-ground", "building",
           "fence", "vegetation", "trunk", "terrain", "pole", "traffic-sign"]
LEARNING_MAP = {10: 0, 11: 1, 13: 4, 15: 2, 16: 4, 18: 3, 20: 4, 30: 5, 31: 6, 32: 7, 40: 8,
                44: 9, 48: 10, 49: 11, 50: 12, 51: 13, 60: 8, 70: 14, 71: 15, 72: 16, 80: 17,
                81: 18, 252: 0, 253: 6, 254: 5, 255: 7, 256: 4, 257: 4, 258: 3, 259: 4}
IGNORE = -1


def _learning_lut():
    lut = np.full(65536, IGNORE, dtype=np.int64)
    for k, v in LEARNING_MAP.items():
        lut[k] = v
    return lut


def _require(path, option):
    if not os.path.exists(path):
        raise SystemExit(f"{path}: not found (set --data-dir or $VOXCONV_DATA_DIR to the "
                         f"folder holding scans/, or pass {option})")


def read_points(scan, option="--scan"):
    """points float32 [n, 4] (x, y, z, remission) of a KITTI-format .bin
    (SemanticKITTI and KITTI object scans alike); `option` names the
    command-line option that sets the path, for the error."""
    _require(scan, option)
    pts = np.fromfile(scan, dtype="<f4")
    if pts.size % 4:
        raise SystemExit(f"{scan}: {pts.size} floats is not a whole number of 4-float points")
    return torch.from_numpy(pts.reshape(-1, 4).copy())


def load_scan(scan, labels):
    """(points float32 [n, 4] x, y, z, remission; labels int64 [n] in
    0..18 or IGNORE) from a SemanticKITTI .bin and its .label file."""
    _require(labels, "--labels")
    pts = read_points(scan)
    raw = np.fromfile(labels, dtype="<u4") & 0xFFFF
    if len(raw) != len(pts):
        raise SystemExit(f"{labels}: {len(raw)} labels for {len(pts)} points")
    return pts, torch.from_numpy(_learning_lut()[raw])


def synthetic_scan(n_points=40000, seed=0):
    """A labelled stand-in for a LiDAR sweep when no scan is at hand (tests,
    first tries): a road plane, building walls, poles, cars and bushes
    around the origin. Same layout as load_scan: (points float32 [n, 4],
    labels int64 [n])."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g)  # noqa: E731
    parts, labels = [], []

    def add(xyz, cls):
        rem = u(len(xyz), 1)
        parts.append(torch.cat([xyz, rem], 1))
        labels.append(torch.full((len(xyz),), CLASSES.index(cls), dtype=torch.int64))

    n = n_points
    road = torch.stack([u(n // 2) * 80 - 40, u(n // 2) * 16 - 8, -1.7 + 0.02 * u(n // 2)], 1)
    add(road, "road")
    for side in (-1, 1):  # a wall along each side of the road
        m = n // 8
        add(torch.stack([u(m) * 80 - 40, side * (12 + 0.1 * u(m)), u(m) * 8 - 1.7], 1),
            "building")
    for i in range(8):  # poles
        m = n // 80
        x0, y0 = -35 + 10 * i, 9.0 * (1 if i % 2 else -1)
        add(torch.stack([x0 + 0.1 * u(m), y0 + 0.1 * u(m), u(m) * 5 - 1.7], 1), "pole")
    for i in range(5):  # cars: boxes 4 x 1.8 x 1.5 m
        m = n // 40
        x0, y0 = -30 + 14 * i, -3.0 if i % 2 else 3.0
        add(torch.stack([x0 + 4 * u(m), y0 + 1.8 * u(m), -1.7 + 1.5 * u(m)], 1), "car")
    m = n - sum(len(p) for p in parts)  # bushes fill up to n points
    add(torch.stack([u(m) * 80 - 40, 9.5 + 2 * u(m), -1.7 + 1.2 * u(m)], 1), "vegetation")
    return torch.cat(parts).float().contiguous(), torch.cat(labels)


def voxel_labels(point_voxel, point_labels, n_vox, n_classes):
    """Majority label per voxel over its labelled points (IGNORE if none)."""
    keep = (point_voxel >= 0) & (point_labels != IGNORE)
    votes = torch.bincount(point_voxel[keep] * n_classes + point_labels[keep],
                           minlength=n_vox * n_classes).reshape(n_vox, n_classes)
    lab = votes.argmax(1)
    lab[votes.sum(1) == 0] = IGNORE
    return lab


def voxelize_scan(pts, point_labels, voxel, device, origin=None):
    """Points + labels -> (SparseTensor input, voxel targets int64 [V] on
    device, point -> voxel row int64 [n] on the CPU). Input features:
    centred xyz / 20 m and remission. origin defaults to the points' min
    corner."""
    if origin is None:
        origin = tuple(pts[:, :3].min(0).values.tolist())
    coords, feats, point_voxel = voxconv.voxelize(pts.to(device), voxel, origin=origin)
    point_voxel = point_voxel.cpu()
    n_vox = len(coords)
    target = voxel_labels(point_voxel, point_labels.cpu(), n_vox, len(CLASSES)).to(device)
    feats = torch.cat([(feats[:, :3] - feats[:, :3].mean(0)) / 20.0, feats[:, 3:]], 1)
    return voxconv.SparseTensor(feats, coords), target, point_voxel


def block(cin, cout, **conv):
    return nn.Sequential(voxconv.nn.SparseConv3d(cin, cout, bias=False, **conv),
                         voxconv.nn.SparseBatchNorm(cout), voxconv.nn.SparseReLU(True))


class MiniMinkUNet(nn.Module):
    """Encoder: stem (two submanifold 3^3 convs), then per level a strided
    2^3 conv (stride 2) and a submanifold 3^3 conv. Decoder: per level a
    transposed 2^3 conv (stride 2, onto the encoder's coordinates), concat
    with the encoder's features (skip), a submanifold 3^3 conv. Linear head."""

    def __init__(self, in_ch, n_classes, widths):
        super().__init__()
        w0 = widths[0]
        self.stem = nn.Sequential(block(in_ch, w0, kernel_size=3), block(w0, w0, kernel_size=3))
        self.down = nn.ModuleList()
        self.up = nn.ModuleList()
        self.fuse = nn.ModuleList()
        for a, b in zip(widths[:-1], widths[1:]):
            self.down.append(nn.Sequential(block(a, b, kernel_size=2, stride=2),
                                           block(b, b, kernel_size=3)))
        for a, b in zip(reversed(widths[1:]), reversed(widths[:-1])):
            self.up.append(block(a, b, kernel_size=2, stride=2, transposed=True))
            self.fuse.append(block(2 * b, b, kernel_size=3))
        self.head = nn.Linear(w0, n_classes)

    def forward(self, x):
        x = self.stem(x)
        skips = []
        for down in self.down:
            skips.append(x)
            x = down(x)
        for up, fuse, skip in zip(self.up, self.fuse, reversed(skips)):
            x = up(x)  # lands on skip's coordinates (same coordinate manager)
            x = fuse(voxconv.cat([x, skip]))
        return self.head(x.feats)


def parse_widths(text):
    try:
        widths = [int(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--widths {text!r}: want comma-separated integers")
    if len(widths) < 2 or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"--widths {text!r}: want at least 2 positive widths")
    return widths


# ---- precision modes -------------------------------------------------------------

AMP_DTYPES = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def precision_unsupported(device, amp="none", half=False):
    """None when this torch can train in the mode on device, else a reason
    (so callers can skip a mode with an explanation instead of failing
    halfway). The probes are tiny ops, run once."""
    device = torch.device(device)
    if amp not in AMP_DTYPES:
        return f"--amp {amp!r}: want one of {', '.join(AMP_DTYPES)}"
    if half and amp != "none":
        return "--half and --amp are alternatives (autocast keeps float32 parameters)"
    if amp != "none":
        try:
            with warnings.catch_warnings():  # torch warns where it disables autocast
                warnings.simplefilter("ignore")
                with torch.autocast(device.type, dtype=AMP_DTYPES[amp]):
                    a = torch.ones(2, 2, device=device)
                    got = (a @ a).dtype  # matmul runs in the autocast dtype where it is on
        except RuntimeError as e:  # torch 1.13's CPU autocast is bfloat16 only
            return f"torch {torch.__version__} cannot autocast to {amp} on {device.type}: {e}"
        if got != AMP_DTYPES[amp]:
            return (f"torch {torch.__version__} does not autocast to {amp} on {device.type} "
                    f"(a matmul under it gave {got})")
        if amp == "fp16" and device.type != "cuda" and not hasattr(torch.amp, "GradScaler"):
            return (f"--amp fp16 on {device.type} needs torch.amp.GradScaler "
                    f"(torch >= 2.3); torch {torch.__version__} has only the CUDA one")
    if half:
        try:
            z = torch.zeros(2, 1, dtype=torch.float16, device=device)
            torch.nn.functional.batch_norm(z, None, None, training=True)
        except RuntimeError as e:  # e.g. torch 1.13 on the CPU
            return (f"--half: torch {torch.__version__} has no float16 BatchNorm on "
                    f"{device.type}: {e}")
    return None


def autocast(device, amp):
    """torch.autocast in the --amp dtype, or a no-op context for "none".
    The sparse convolutions follow autocast by themselves where the
    library supports it; nothing here casts their inputs by hand."""
    dtype = AMP_DTYPES[amp]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def grad_scaler(device, amp):
    """A GradScaler for fp16 autocast (fp16 gradients underflow without
    loss scaling); None for the other modes. torch >= 2.3 has the
    device-generic torch.amp.GradScaler; older torch the CUDA one."""
    if amp != "fp16":
        return None
    dev = torch.device(device).type
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(dev)
    return torch.cuda.amp.GradScaler()


def make_optimizer(name, params, lr, momentum=0.9, weight_decay=0.0):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer {name!r}: want sgd or adam")


class StepClock:
    """Per-step times without a host synchronisation per step: CUDA events
    on the current stream on a GPU (the loop may run ahead of the device,
    as in real training), the host clock on the CPU. times_ms() syncs once."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks = []

    @property
    def name(self):
        return "cuda_events" if self.cuda else "perf_counter"

    def _mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def start(self):
        self.marks.append([self._mark(), None])

    def stop(self):
        self.marks[-1][1] = self._mark()

    def times_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self.marks]
        return [1e3 * (b - a) for a, b in self.marks]


def synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def iou_per_class(pred, target, n_classes):
    keep = target != IGNORE
    pred, target = pred[keep], target[keep]
    out = {}
    for c in range(n_classes):
        inter = int(((pred == c) & (target == c)).sum())
        union = int(((pred == c) | (target == c)).sum())
        if int((target == c).sum()):
            out[CLASSES[c]] = inter / union
    return out


def tuning_cache_dir():
    """The tuning-cache folder the library uses (voxconv.h: tuning cache)."""
    return os.environ.get("VOXCONV_BENCHMARK_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "voxconv")


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None,
                    help="folder holding scans/ (default $VOXCONV_DATA_DIR, else "
                         "../shared/data beside the repository)")
    ap.add_argument("--scan", default=None,
                    help=f"point file (default DATA/{DEFAULT_SCAN})")
    ap.add_argument("--labels", default=None, help="default: the scan's .label file")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--small", action="store_true",
                    help="CI size: 40 cm voxels, widths 8-16-24-32 (CPU: seconds)")
    ap.add_argument("--voxel", type=float, default=None, help="voxel size in m (default 0.05)")
    ap.add_argument("--widths", type=parse_widths, default=None,
                    help="comma-separated level widths (default 32,64,128,256,256)")
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam",
                    help="adam (default) or sgd with --momentum (BENCHMARKS.md workload G "
                         "uses sgd)")
    ap.add_argument("--lr", type=float, default=None,
                    help="learning rate (default: adam 1e-2, sgd 5e-2; --small adam 2e-2)")
    ap.add_argument("--momentum", type=float, default=0.9, help="sgd momentum")
    ap.add_argument("--amp", choices=list(AMP_DTYPES), default="none",
                    help="train under torch.autocast in this dtype (fp16 adds a GradScaler)")
    ap.add_argument("--half", action="store_true",
                    help="model.half() and float16 input features (no loss scaling)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backward-thread", choices=["caller", "torch"], default="caller",
                    help="run each backward on this thread (voxconv.caller_thread_backward, "
                         "default) or on torch's CUDA device thread")
    ap.add_argument("--settle-ms", type=int, default=0,
                    help="idle this long after the first step before the others (a GPU "
                         "runs at a lowered clock right after the autotuner's burst; "
                         "bench/train_step_bench.py passes 2000)")
    ap.add_argument("--no-eval", action="store_true", help="skip the IoU evaluation")
    ap.add_argument("--log-every", type=int, default=1,
                    help="print the loss every N steps (each print waits for the GPU)")
    ap.add_argument("--json", default=None, help="write losses, IoUs and timings here")
    return ap


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: want at least 1")
    if args.log_every < 1:
        ap.error(f"--log-every {args.log_every}: want at least 1")
    if args.settle_ms < 0:
        ap.error(f"--settle-ms {args.settle_ms}: want >= 0")
    if args.voxel is not None and not args.voxel > 0:
        ap.error(f"--voxel {args.voxel}: want a size in metres > 0")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU")
    why = precision_unsupported(device, args.amp, args.half)
    if why:
        ap.error(why)
    data_dir = args.data_dir or DATA
    scan = args.scan or os.path.join(data_dir, DEFAULT_SCAN)
    voxel = args.voxel or (0.4 if args.small else 0.05)
    widths = args.widths or ([8, 16, 24, 32] if args.small else [32, 64, 128, 256, 256])
    lr = args.lr or (5e-2 if args.optimizer == "sgd" else 2e-2 if args.small else 1e-2)
    labels_path = args.labels or os.path.splitext(scan)[0] + ".label"
    torch.manual_seed(args.seed)
    # A GradScaler that skips a step (inf gradients while it finds its scale)
    # makes the scheduler step before the optimizer: expected, not a bug.
    warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")

    pts, point_labels = load_scan(scan, labels_path)
    x, target, point_voxel = voxelize_scan(pts, point_labels, voxel, device)
    n_vox, n_cls = len(x), len(CLASSES)
    mode = ("half" if args.half else "fp32") if args.amp == "none" else f"amp-{args.amp}"
    print(f"voxconv {voxconv.library_version()} ({voxconv.library_path}); device {device}; "
          f"{len(pts)} points -> {n_vox} voxels at {voxel} m; widths {widths}; {mode}; "
          f"{args.optimizer} lr {lr}", flush=True)

    model = MiniMinkUNet(x.num_channels, n_cls, widths).to(device)
    if args.half:
        model.half()
        x = x.half()
    opt = make_optimizer(args.optimizer, model.parameters(), lr, args.momentum)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, args.steps))
    scaler = grad_scaler(device, args.amp)
    loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)
    clock = StepClock(device)
    losses, first_step_ms, settle_s = [], None, 0.0
    synchronize(device)
    t0 = time.perf_counter()
    for step in range(args.steps):
        clock.start()
        model.train()
        opt.zero_grad(set_to_none=True)
        with autocast(device, args.amp):
            # float32 logits for the loss: --half would otherwise take the
            # log-softmax in float16 (autocast does this cast by itself).
            loss = loss_fn(model(x).float(), target)
        # the backward on this thread, not torch's CUDA device thread,
        # which must first wake (python/README.md, "The backward on your
        # own thread")
        with voxconv.caller_thread_backward(args.backward_thread == "caller"):
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        sched.step()
        clock.stop()
        losses.append(loss.detach())
        if step == 0:
            # The first step builds the maps and autotunes every new layer
            # shape: timed on its own, to completion.
            synchronize(device)
            first_step_ms = 1e3 * (time.perf_counter() - t0)
            if args.settle_ms and device.type == "cuda":
                settle_s = args.settle_ms / 1e3
                time.sleep(settle_s)
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    synchronize(device)
    t_end = time.perf_counter()
    train_s = t_end - t0 - settle_s
    step_ms = clock.times_ms()
    losses = torch.stack(losses).float().cpu().tolist()
    median_step_ms = statistics.median(step_ms[1:]) if len(step_ms) > 1 else None
    if not all(math.isfinite(v) for v in losses):
        print(f"warning: non-finite loss at step "
              f"{next(i for i, v in enumerate(losses) if not math.isfinite(v))}", flush=True)

    ious, miou, infer_ms = {}, None, None
    if not args.no_eval:
        model.eval()
        t1 = time.perf_counter()
        with torch.inference_mode(), autocast(device, args.amp):
            pred_vox = model(x).argmax(1).cpu()
        synchronize(device)
        infer_ms = (time.perf_counter() - t1) * 1e3
        pred_pts = torch.where(point_voxel >= 0, pred_vox[point_voxel.clamp_min(0)],
                               torch.full_like(point_voxel, IGNORE))
        ious = iou_per_class(pred_pts, point_labels, n_cls)
        print(f"{'class':<14} IoU (points of this scan)")
        for name, v in ious.items():
            print(f"{name:<14} {100 * v:6.1f}")
        miou = sum(ious.values()) / max(1, len(ious))
        print(f"mIoU {100 * miou:.1f} over {len(ious)} classes", flush=True)
    med = f"{median_step_ms:.2f} ms" if median_step_ms is not None else "-"
    print(f"first loss {losses[0]:.4f}, last loss {losses[-1]:.4f}; train {train_s:.1f} s; "
          f"first step {first_step_ms:.1f} ms (autotuning included), median step {med} "
          f"({clock.name}){'' if infer_ms is None else f'; inference {infer_ms:.1f} ms'}",
          flush=True)
    if args.json:
        rec = {"device": str(device),
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
               else "cpu", "torch": torch.__version__, "voxconv": voxconv.library_version(),
               "library_path": voxconv.library_path, "scan": scan, "voxel_size": voxel,
               "points": len(pts), "voxels": n_vox, "widths": widths, "steps": args.steps,
               "mode": mode, "amp": args.amp, "half": args.half,
               "optimizer": args.optimizer, "lr": lr,
               "momentum": args.momentum if args.optimizer == "sgd" else None,
               "seed": args.seed, "tuning_cache_dir": tuning_cache_dir(),
               "loss": losses, "iou": ious, "miou": miou, "train_s": train_s,
               "ms_per_step": 1e3 * train_s / args.steps,
               "first_step_ms": first_step_ms, "median_step_ms": median_step_ms,
               "step_ms": step_ms, "clock": clock.name, "settle_ms": args.settle_ms,
               "inference_ms": infer_ms}
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)
    return losses, ious


if __name__ == "__main__":
    main()
