#!/usr/bin/env python3
"""Train a small MinkUNet-style network for LiDAR semantic segmentation on
one SemanticKITTI scan (../shared/data/scans/semantickitti_00_000000.bin
and .label) with voxconv, then print the per-class IoU on that scan.

This is a demonstration that the whole stack trains (kernel maps shared
between layers, strided 2x2x2 downsampling, transposed upsampling back onto
the encoder's coordinates, skip connections, BatchNorm/ReLU from torch):
the network fits the one scan it sees, so the IoU measures fitting, not
generalisation.

    # GPU (if present), full resolution (5 cm voxels), 300 steps
    python3 examples/train_segmentation.py
    # CPU, CI-sized (40 cm voxels, narrow network): well under a minute
    /usr/bin/python3 examples/train_segmentation.py --small --steps 20 --device cpu

Prints "step N loss L" lines, then one IoU line per class present in the
scan and the mean IoU; ``--json FILE`` also writes the loss curve, the IoUs
and timings.
"""

import argparse
import json
import os
import sys
import time

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

DATA = os.environ.get("VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))

# SemanticKITTI raw label -> 19 training classes (semantic-kitti.yaml
# learning_map; moving classes folded into their static class); -1 = ignore.
CLASSES = ["car", "bicycle", "motorcycle", "truck", "other-vehicle", "person", "bicyclist",
           "motorcyclist", "road", "parking", "sidewalk", "other-ground", "building",
           "fence", "vegetation", "trunk", "terrain", "pole", "traffic-sign"]
LEARNING_MAP = {10: 0, 11: 1, 13: 4, 15: 2, 16: 4, 18: 3, 20: 4, 30: 5, 31: 6, 32: 7, 40: 8,
                44: 9, 48: 10, 49: 11, 50: 12, 51: 13, 60: 8, 70: 14, 71: 15, 72: 16, 80: 17,
                81: 18, 252: 0, 253: 6, 254: 5, 255: 7, 256: 4, 257: 4, 258: 3, 259: 4}
IGNORE = -1


def load_scan(scan, labels):
    pts = np.fromfile(scan, dtype="<f4").reshape(-1, 4)
    raw = np.fromfile(labels, dtype="<u4") & 0xFFFF
    if len(raw) != len(pts):
        raise SystemExit(f"{labels}: {len(raw)} labels for {len(pts)} points")
    lut = np.full(65536, IGNORE, dtype=np.int64)
    for k, v in LEARNING_MAP.items():
        lut[k] = v
    return torch.from_numpy(pts.copy()), torch.from_numpy(lut[raw])


def voxel_labels(point_voxel, point_labels, n_vox, n_classes):
    """Majority label per voxel over its labelled points (IGNORE if none)."""
    keep = (point_voxel >= 0) & (point_labels != IGNORE)
    votes = torch.bincount(point_voxel[keep] * n_classes + point_labels[keep],
                           minlength=n_vox * n_classes).reshape(n_vox, n_classes)
    lab = votes.argmax(1)
    lab[votes.sum(1) == 0] = IGNORE
    return lab


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scan", default=os.path.join(DATA, "scans", "semantickitti_00_000000.bin"))
    ap.add_argument("--labels", default=None, help="default: the scan's .label file")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--small", action="store_true",
                    help="CI size: 40 cm voxels, widths 8-16-24-32 (CPU: seconds)")
    ap.add_argument("--voxel", type=float, default=None, help="voxel size in m (default 0.05)")
    ap.add_argument("--widths", default=None, help="comma-separated level widths")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=1)
    ap.add_argument("--json", default=None, help="write losses, IoUs and timings here")
    args = ap.parse_args(argv)
    voxel = args.voxel or (0.4 if args.small else 0.05)
    widths = [int(w) for w in (args.widths or ("8,16,24,32" if args.small else
                                               "32,64,128,256,256")).split(",")]
    lr = args.lr or (2e-2 if args.small else 1e-2)
    labels_path = args.labels or os.path.splitext(args.scan)[0] + ".label"
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    pts, point_labels = load_scan(args.scan, labels_path)
    origin = tuple(pts[:, :3].min(0).values.tolist())
    coords, feats, point_voxel = voxconv.voxelize(pts.to(device), voxel, origin=origin)
    point_voxel, point_labels = point_voxel.cpu(), point_labels
    n_vox, n_cls = len(coords), len(CLASSES)
    target = voxel_labels(point_voxel, point_labels, n_vox, n_cls).to(device)
    # inputs: centred/scaled xyz and remission
    feats = torch.cat([(feats[:, :3] - feats[:, :3].mean(0)) / 20.0, feats[:, 3:]], 1)
    x = voxconv.SparseTensor(feats, coords)
    print(f"voxconv {voxconv.library_version()} ({voxconv.library_path}); device {device}; "
          f"{len(pts)} points -> {n_vox} voxels at {voxel} m; widths {widths}", flush=True)

    model = MiniMinkUNet(feats.shape[1], n_cls, widths).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, args.steps))
    loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)
    losses, t0 = [], time.perf_counter()
    for step in range(args.steps):
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step} loss {losses[-1]:.4f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t0

    model.eval()
    t1 = time.perf_counter()
    with torch.inference_mode():
        pred_vox = model(x).argmax(1).cpu()
    if device.type == "cuda":
        torch.cuda.synchronize()
    infer_ms = (time.perf_counter() - t1) * 1e3
    pred_pts = torch.where(point_voxel >= 0, pred_vox[point_voxel.clamp_min(0)],
                           torch.full_like(point_voxel, IGNORE))
    ious = iou_per_class(pred_pts, point_labels, n_cls)
    print(f"{'class':<14} IoU (points of this scan)")
    for name, v in ious.items():
        print(f"{name:<14} {100 * v:6.1f}")
    miou = sum(ious.values()) / max(1, len(ious))
    print(f"mIoU {100 * miou:.1f} over {len(ious)} classes; first loss {losses[0]:.4f}, "
          f"last loss {losses[-1]:.4f}; train {train_s:.1f} s "
          f"({1e3 * train_s / max(1, args.steps):.1f} ms/step), inference {infer_ms:.1f} ms",
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "device_name": torch.cuda.get_device_name(device)
                       if device.type == "cuda" else "cpu", "torch": torch.__version__,
                       "voxel_size": voxel, "points": len(pts), "voxels": n_vox,
                       "widths": widths, "steps": args.steps, "lr": lr, "loss": losses,
                       "iou": ious, "miou": miou, "train_s": train_s,
                       "ms_per_step": 1e3 * train_s / max(1, args.steps),
                       "inference_ms": infer_ms}, f, indent=1)
    return losses, ious


if __name__ == "__main__":
    main()
