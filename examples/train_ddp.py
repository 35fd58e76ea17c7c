#!/usr/bin/env python3
"""Data-parallel training of examples/train_segmentation.py's MiniMinkUNet:
one process per GPU under torchrun, DistributedDataParallel over NCCL (or
CPU processes with --backend gloo), every rank on its own views of the scan.

    # 2 GPUs, 5 cm voxels, a warm-up step per rank before the first collective
    torchrun --standalone --nproc_per_node 2 examples/train_ddp.py --warmup --json ddp.json
    # the same under autocast fp16 with a GradScaler
    torchrun --standalone --nproc_per_node 2 examples/train_ddp.py --warmup --amp fp16
    # CPU, two processes, CI size
    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 \\
        examples/train_ddp.py --backend gloo --device cpu --small --steps 5

Data: rank r trains at step s on view (r + world * s) mod --views of the
labelled scan, as a DistributedSampler would hand out a list of scans; view
i is the scan rotated about z by i times the golden angle and cropped to a
radius between 20 and 80 m, so the ranks see different voxel counts at
every step. Each step builds a fresh voxconv.SparseTensor (kernel maps are
built inside the step, as with a new scan per step).

Model: nothing about voxconv needs special treatment in DDP. A SparseTensor
is not a torch.Tensor, so DDP does not scatter or move it (every rank builds
its own input and DDP passes it through untouched); the model returns a
plain tensor (the head's logits), from which DDP's backward hooks all-reduce
the gradients; every parameter is used at every step, so
find_unused_parameters stays False (checked after the first step).
BatchNorm: plain BatchNorm1d on the features (voxconv.nn.SparseBatchNorm),
statistics per rank, by default: each rank's batch is a whole scan of tens of
thousands of voxels, so its statistics are already well estimated, and
SyncBatchNorm would put two all-reduces per BN layer inside the forward and
backward, where a rank that is still autotuning stalls every other rank at
every layer. --sync-bn converts them (CUDA + NCCL only: torch's
SyncBatchNorm has no CPU kernels).

Autotuning and the tuning cache: see "Multi-GPU training" in
python/README.md. All ranks use one cache folder (--cache-dir, default
$VOXCONV_BENCHMARK_CACHE_DIR or ~/.cache/voxconv); the library's cache file
is safe under concurrent processes. --warmup runs a forward and backward on
each of the rank's views before DDP is constructed, so the autotuning of a
cold cache happens before any collective and the timed steps start warm.

Prints per rank the first-step time (autotuning included unless --warmup)
and the median of the later steps, then checks that all ranks hold
identical parameters (bit for bit; exit status 1 otherwise). --json FILE
(rank 0) records everything.
"""

import argparse
import datetime
import math
import os
import socket
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None,
                    help="folder holding scans/ (default $VOXCONV_DATA_DIR, else "
                         "../shared/data beside the repository)")
    ap.add_argument("--scan", default=None,
                    help="labelled point file (default DATA/scans/semantickitti_00_000000.bin)")
    ap.add_argument("--labels", default=None, help="default: the scan's .label file")
    ap.add_argument("--synthetic", action="store_true",
                    help="a generated labelled scene instead of the scan (no data needed)")
    ap.add_argument("--views", type=int, default=8,
                    help="rotated/cropped views of the scan shared out over the ranks "
                         "(default 8)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None,
                    help="default: cuda when torch sees a GPU (one per local rank)")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None,
                    help="default: nccl on GPUs, gloo on the CPU")
    ap.add_argument("--timeout-s", type=float, default=None,
                    help="collective timeout (default: torch's, 10 min for NCCL, 30 for gloo)")
    ap.add_argument("--cache-dir", default=None,
                    help="tuning-cache folder shared by all ranks (sets "
                         "VOXCONV_BENCHMARK_CACHE_DIR; default: that variable, else "
                         "~/.cache/voxconv)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", action="store_true",
                    help="forward+backward on each of this rank's views before wrapping the "
                         "model in DDP (autotuning before the first collective)")
    ap.add_argument("--amp", choices=["none", "fp16", "bf16"], default="none",
                    help="torch.autocast dtype (fp16 adds a GradScaler)")
    ap.add_argument("--sync-bn", action="store_true",
                    help="SyncBatchNorm instead of per-rank BatchNorm (CUDA + NCCL)")
    ap.add_argument("--small", action="store_true",
                    help="CI size: 40 cm voxels, widths 8-16-24-32")
    ap.add_argument("--voxel", type=float, default=None, help="voxel size in m (default 0.05)")
    ap.add_argument("--widths", default=None,
                    help="comma-separated level widths (default 32,64,128,256,256)")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0, help="model initialisation seed")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--save-params", default=None,
                    help="each rank saves its final parameters (torch.save of a name -> "
                         "tensor dict) to this path; '{rank}' in it is replaced by the rank, "
                         "else '.rank<r>' is appended")
    ap.add_argument("--json", default=None, help="rank 0 writes the record here")
    return ap


def parse_args(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: want at least 1")
    if args.views < 1:
        ap.error(f"--views {args.views}: want at least 1")
    if args.log_every < 1:
        ap.error(f"--log-every {args.log_every}: want at least 1")
    if args.voxel is not None and not args.voxel > 0:
        ap.error(f"--voxel {args.voxel}: want a size in metres > 0")
    if args.timeout_s is not None and not args.timeout_s > 0:
        ap.error(f"--timeout-s {args.timeout_s}: want seconds > 0")
    if args.synthetic and (args.scan or args.labels):
        ap.error("--synthetic and --scan/--labels are alternatives")
    args.voxel = args.voxel or (0.4 if args.small else 0.05)
    try:
        args.widths = [int(w) for w in (args.widths or ("8,16,24,32" if args.small else
                                                        "32,64,128,256,256")).split(",")]
    except ValueError:
        ap.error(f"--widths {args.widths!r}: want comma-separated integers")
    if len(args.widths) < 2 or min(args.widths) < 1:
        ap.error(f"--widths {args.widths}: want at least 2 positive widths")
    return ap, args


import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

# The environment must be settled before voxconv (through train_segmentation)
# is imported: the library reads its tuning-cache folder and thread count
# from it, and torchrun's per-process OMP_NUM_THREADS=1 does not limit
# voxconv's own CPU threads.
_ap, _args = (None, None)
if __name__ == "__main__":
    _ap, _args = parse_args()
    if _args.cache_dir:
        os.environ["VOXCONV_BENCHMARK_CACHE_DIR"] = os.path.abspath(_args.cache_dir)
    _cpu = (_args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cpu"
    if _cpu and "VOXCONV_NUM_THREADS" not in os.environ:
        # CPU ranks of one host share its cores.
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        os.environ["VOXCONV_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // local_world))

sys.path.insert(0, HERE)
import train_segmentation as ts  # noqa: E402  (the model and data helpers)

voxconv = ts.voxconv
GOLDEN_TURN = (math.sqrt(5) - 1) / 2  # of a turn: successive views spread evenly


def load_points(args):
    """(points float32 [n, 4], labels int64 [n]) on the CPU."""
    if args.synthetic:
        return ts.synthetic_scan(40000 if args.small else 200000, seed=1)
    data_dir = args.data_dir or ts.DATA
    scan = args.scan or os.path.join(data_dir, ts.DEFAULT_SCAN)
    return ts.load_scan(scan, args.labels or os.path.splitext(scan)[0] + ".label")


def view_radius(i):
    """Crop radius of view i: 20..80 m, spread by the golden ratio."""
    return 20.0 + 60.0 * ((i * GOLDEN_TURN) % 1.0)


def make_view(pts, labels, i, voxel, device):
    """View i of the scan: rotated about z by i golden angles, cropped to
    view_radius(i) around the sensor, voxelized. Returns (coords int32
    [V, 4], feats float32 [V, C], target int64 [V]) on device."""
    a = 2 * math.pi * ((i * GOLDEN_TURN) % 1.0)
    c, s = math.cos(a), math.sin(a)
    rot = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    keep = pts[:, :2].norm(dim=1) < view_radius(i)
    p = pts[keep].clone()
    p[:, :3] = p[:, :3] @ rot.T
    x, target, _ = ts.voxelize_scan(p, labels[keep], voxel, device)
    return x.coords, x.feats, target


def view_index(rank, world, step, n_views):
    """The view rank trains on at step (a DistributedSampler's order)."""
    return (rank + world * step) % n_views


def build_model(args, in_ch, device):
    """The same initial parameters on every rank (and in a single-process
    reference): seeded here."""
    torch.manual_seed(args.seed)
    return ts.MiniMinkUNet(in_ch, len(ts.CLASSES), args.widths).to(device)


def step_loss(model, loss_fn, coords, feats, target, device, amp):
    """Forward and loss for one view; a fresh SparseTensor, so the step
    builds its kernel maps."""
    x = voxconv.SparseTensor(feats, coords)
    with ts.autocast(device, amp):
        return loss_fn(model(x).float(), target)


def flat_params(model):
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(args):
    """Process group from torchrun's environment (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR/PORT); a plain `python3 train_ddp.py` runs as
    a world of one. Returns (rank, world, local_rank, device)."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev_type = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    backend = args.backend or ("nccl" if dev_type == "cuda" else "gloo")
    if not dist.is_available():
        raise SystemExit("torch.distributed is not available in this torch build")
    if backend == "nccl":
        if dev_type != "cuda":
            raise SystemExit("--backend nccl needs --device cuda (use gloo on the CPU)")
        if not dist.is_nccl_available():
            raise SystemExit("this torch build has no NCCL; use --backend gloo")
    elif not dist.is_gloo_available():
        raise SystemExit("this torch build has no gloo backend")
    if dev_type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no GPU")
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(f"local rank {local_rank} but only {torch.cuda.device_count()} "
                             f"GPU(s): launch at most that many processes per node")
        if not voxconv.has_cuda():
            raise SystemExit(f"{voxconv.library_path} has no CUDA backend")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(int(os.environ.get("VOXCONV_NUM_THREADS", "1")))
    if args.sync_bn and (dev_type != "cuda" or backend != "nccl"):
        raise SystemExit("--sync-bn needs CUDA and NCCL (torch's SyncBatchNorm has no CPU "
                         "kernels)")
    why = ts.precision_unsupported(device, args.amp)
    if why:
        raise SystemExit(why)
    kw = {}
    if args.timeout_s is not None:
        kw["timeout"] = datetime.timedelta(seconds=args.timeout_s)
    dist.init_process_group(backend, rank=rank, world_size=world, **kw)
    return rank, world, local_rank, device, backend


def log(rank, *msg):
    if rank == 0:
        print(*msg, flush=True)


def main():
    ap, args = (_ap, _args) if _args is not None else parse_args()
    rank, world, local_rank, device, backend = setup(args)
    try:
        ok = train(args, rank, world, local_rank, device, backend)
        # Nothing may still be in flight when the process group goes: a
        # gloo worker thread that drops the last reference to a Python-owned
        # tensor needs the GIL, and the group's destructor joins it. Torn
        # down here, with the DDP reducer already gone (train returned),
        # instead of at interpreter exit, where that join hung with torch
        # 1.13 on Python 3.11.
        dist.barrier(**({"device_ids": [local_rank]} if backend == "nccl" else {}))
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


def train(args, rank, world, local_rank, device, backend):
    """The training run of one rank; True when all ranks end with
    identical parameters."""
    cuda = device.type == "cuda"
    log(rank, f"voxconv {voxconv.library_version()} ({voxconv.library_path}); torch "
              f"{torch.__version__}; {world} rank(s), backend {backend}, device {device.type}; "
              f"tuning cache {ts.tuning_cache_dir()}")
    if args.views < world:
        log(rank, f"note: --views {args.views} < {world} ranks: some ranks share views")

    pts, labels = load_points(args)
    mine = sorted({view_index(rank, world, s, args.views) for s in range(args.steps)})
    views = {i: make_view(pts, labels, i, args.voxel, device) for i in mine}
    in_ch = next(iter(views.values()))[1].shape[1]
    model = build_model(args, in_ch, device)
    loss_fn = nn.CrossEntropyLoss(ignore_index=ts.IGNORE)

    warmup_s = None
    if args.warmup:
        # Tune every layer shape of this rank's views now, before any
        # collective; then put the model back as it was (BN statistics).
        t = time.perf_counter()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        for i in mine:
            step_loss(model, loss_fn, *views[i], device, args.amp).backward()
        model.zero_grad(set_to_none=True)
        model.load_state_dict(state)
        ts.synchronize(device)
        warmup_s = time.perf_counter() - t
        print(f"[rank {rank}] warm-up on {len(mine)} view(s): {warmup_s:.2f} s", flush=True)
    if args.sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)

    # DDP's constructor broadcasts rank 0's parameters: the first collective.
    t = time.perf_counter()
    ddp = DDP(model, device_ids=[local_rank] if cuda else None)
    ts.synchronize(device)
    ddp_init_ms = 1e3 * (time.perf_counter() - t)
    opt = ts.make_optimizer("sgd", ddp.parameters(), args.lr, args.momentum, args.weight_decay)
    scaler = ts.grad_scaler(device, args.amp)

    step_ms, voxels, losses = [], [], []
    for step in range(args.steps):
        coords, feats, target = views[view_index(rank, world, step, args.views)]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = step_loss(ddp, loss_fn, coords, feats, target, device, args.amp)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        # Per-step wall time to completion: under DDP a rank's step ends
        # with the gradient all-reduce, so it includes waiting for the
        # slowest rank.
        ts.synchronize(device)
        step_ms.append(1e3 * (time.perf_counter() - t))
        voxels.append(len(coords))
        losses.append(loss.item())
        if step == 0:
            unused = [n for n, p in model.named_parameters() if p.grad is None]
            if unused:
                raise SystemExit(f"parameters without gradients after the first step: "
                                 f"{unused[:5]}: DDP would need find_unused_parameters=True")
        if step % args.log_every == 0 or step == args.steps - 1:
            log(rank, f"step {step} loss {losses[-1]:.4f} (rank 0, {voxels[-1]} voxels) "
                      f"{step_ms[-1]:.1f} ms")

    # All ranks must now hold the same parameters, bit for bit: rank 0's
    # are broadcast and compared on every rank.
    mine_flat = flat_params(model)
    ref = mine_flat.clone()
    dist.broadcast(ref, 0)
    n_diff = torch.tensor([int((ref != mine_flat).sum())], dtype=torch.int64, device=device)
    dist.all_reduce(n_diff)
    checksum = float(mine_flat.double().sum())
    if args.save_params:
        path = (args.save_params.format(rank=rank) if "{rank}" in args.save_params
                else f"{args.save_params}.rank{rank}")
        torch.save({n: p.detach().cpu() for n, p in model.named_parameters()}, path)

    rec = {"rank": rank, "local_rank": local_rank, "host": socket.gethostname(),
           "device": str(device),
           "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
           "views": mine, "voxels": voxels, "warmup_s": warmup_s, "ddp_init_ms": ddp_init_ms,
           "first_step_ms": step_ms[0],
           "median_step_ms": statistics.median(step_ms[1:]) if len(step_ms) > 1 else None,
           "step_ms": step_ms, "loss": losses, "param_checksum": checksum}
    recs = [None] * world
    dist.all_gather_object(recs, rec)
    ok = int(n_diff.item()) == 0
    if rank == 0:
        print(f"{'rank':>4} {'voxels/step':>15} {'warm-up s':>9} {'DDP init ms':>11} "
              f"{'first step ms':>13} {'median step ms':>14}  device")
        for r in recs:
            med = f"{r['median_step_ms']:.2f}" if r["median_step_ms"] is not None else "-"
            wu = f"{r['warmup_s']:.2f}" if r["warmup_s"] is not None else "-"
            print(f"{r['rank']:>4} {min(r['voxels']):>7}-{max(r['voxels']):<7} {wu:>9} "
                  f"{r['ddp_init_ms']:>11.1f} {r['first_step_ms']:>13.1f} {med:>14}  "
                  f"{r['device_name']}")
        print(f"parameters identical on all {world} ranks: {'yes' if ok else 'NO'} "
              f"({int(n_diff.item())} values differ; checksum {checksum:.9g})", flush=True)
        if args.json:
            import json
            out = {"world_size": world, "backend": backend, "device_type": device.type,
                   "torch": torch.__version__, "voxconv": voxconv.library_version(),
                   "library_path": voxconv.library_path,
                   "tuning_cache_dir": ts.tuning_cache_dir(), "amp": args.amp,
                   "sync_bn": args.sync_bn, "warmup": args.warmup, "steps": args.steps,
                   "voxel_size": args.voxel, "widths": args.widths, "lr": args.lr,
                   "momentum": args.momentum, "n_views": args.views,
                   "data": "synthetic" if args.synthetic else (args.scan or ts.DEFAULT_SCAN),
                   "params_identical": ok, "params_differing": int(n_diff.item()),
                   "ranks": recs}
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    return ok


if __name__ == "__main__":
    sys.exit(main())
