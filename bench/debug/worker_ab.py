"""The map stream's build worker, A/B in one process (issue 20, docs/
perf-notes.md item 98): workload A's network from PyTorch (as torch_bench
makes it), forward (no_grad) and forward + backward, timed with CUDA
events in blocks that alternate the worker off and on --rounds times, each block after its own warm-up, with the host probe
per block (the lent host's speed drifts; alternating blocks puts every mode
in every state). A diagnostic.

    python3 bench/debug/worker_ab.py [--data-dir D] [--rounds 4] [--runs 15]
                                     [--switch worker|rows|spin|order|bounds|caller|
                                               gc|prepare]

--switch rows: the worker stays on; what alternates is how a pooled level's
coordinates are made (kmap._rows_view: the map's own rows, or a copy;
VOXCONV_DERIVED_ROWS, perf-notes item 107). --switch spin: the worker is
restarted with VOXCONV_WORKER_WAIT_SPIN_US / _IDLE_SPIN_US set to
--spin-wait-us / --spin-idle-us ("on") or 0 ("off") (item 108). --switch
order: "on" is kmap._prefetch_rank, "off" the opposite order (item 108).
--switch bounds: "on" gives pooled levels' strided builds their rows'
bounds (kmap._pass_bounds: compact sort keys), "off" does not (item 109).
--switch gc: "on" disables Python's cyclic garbage collector for the
block (gc.disable()), "off" leaves it on; every block also counts the
collections per run by generation (item 113).
--switch prepare: "on" prepares each submanifold map on the map stream
(VOXCONV_MAP_PREPARE, item 130), "off" leaves its tables to the
convolutions.
--switch caller: "on" runs the backward on the calling thread
(torch.autograd.set_multithreading_enabled(False)), "off" on torch's CUDA
device thread, which must first wake up (item 112).
"""
import argparse, gc, os, statistics, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402
from voxconv import kmap  # noqa: E402

MODES = {"off": False, "on": True}
RANK = kmap._prefetch_rank
CALLER = [False]  # --switch caller: the backward on the calling thread


def set_mode(args, dev, on):
    if args.switch == "worker":
        kmap._set_map_worker(dev, on)
    elif args.switch == "order":
        kmap._set_map_worker(dev, True)
        kmap._prefetch_rank = RANK if on else (lambda mode, worker: not RANK(mode, worker))
    elif args.switch == "bounds":
        kmap._pass_bounds = on
    elif args.switch == "caller":
        CALLER[0] = on
    elif args.switch == "prepare":  # read at every map build
        os.environ["VOXCONV_MAP_PREPARE"] = "1" if on else "0"
    elif args.switch == "gc":
        gc.collect()
        if on:
            gc.disable()
        else:
            gc.enable()
    elif args.switch == "rows":
        kmap._set_map_worker(dev, True)
        kmap._rows_view = on
    else:  # the worker reads these when it starts
        os.environ["VOXCONV_WORKER_WAIT_SPIN_US"] = str(args.spin_wait_us if on else 0)
        os.environ["VOXCONV_WORKER_IDLE_SPIN_US"] = str(args.spin_idle_us if on else 0)
        kmap._set_map_worker(dev, False)
        kmap._set_map_worker(dev, True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--switch", choices=("worker", "rows", "spin", "order", "bounds", "caller", "gc",
                                           "prepare"), default="worker")
    ap.add_argument("--spin-wait-us", type=float, default=1000)
    ap.add_argument("--spin-idle-us", type=float, default=2000)
    args = ap.parse_args()
    dev = torch.device("cuda")
    net, coords, feats, counts = load_a_network(args.data_dir, tb.DTYPES["f16"], dev)
    leaf = feats.detach().clone().requires_grad_()
    dy = (torch.rand(counts[-1], tb.LEVEL_CHANNELS[-1], device=dev) * 2 - 1).to(feats.dtype)
    timer = tb.Timer(dev)

    def forward():
        with torch.no_grad():
            # the voxelization grid's box, as torch_bench passes it
            return net(voxconv.SparseTensor(feats, coords, bounds=tb.A_BOUNDS))

    def forward_backward():
        leaf.grad = None
        y = net(voxconv.SparseTensor(leaf, coords, bounds=tb.A_BOUNDS))
        with voxconv.caller_thread_backward(CALLER[0]):
            y.feats.backward(dy)
        return y

    collections_ = [0, 0, 0]

    def count(phase, info):
        if phase == "start":
            collections_[info["generation"]] += 1
    gc.callbacks.append(count)
    results = {m: {"fwd": [], "fb": []} for m in MODES}
    for r in range(args.rounds):
        for name, mode in MODES.items():
            set_mode(args, dev, mode)
            for fn, key in ((forward, "fwd"), (forward_backward, "fb")):
                for _ in range(3):
                    timer.run(fn)
                collections_[:] = [0, 0, 0]
                runs = [timer.run(fn)[0] for _ in range(args.runs)]
                med = statistics.median(runs)
                results[name][key].append(med)
                per = "/".join(f"{c / args.runs:.2f}" for c in collections_)
                print(f"round {r} {args.switch} {name:8s} {key:3s} median {med:.3f} ms "
                      f"(min {min(runs):.3f}, max {max(runs):.3f}) probe "
                      f"{tb.host_probe_us():.0f} us; gc gen0/1/2 per run {per}", flush=True)
    gc.enable()
    print("\nmedian of the blocks' medians (ms):")
    for name in MODES:
        f, b = results[name]["fwd"], results[name]["fb"]
        print(f"  {args.switch} {name:8s} forward {statistics.median(f):.3f} "
              f"[{min(f):.3f}-{max(f):.3f}]  forward+backward {statistics.median(b):.3f} "
              f"[{min(b):.3f}-{max(b):.3f}]")


if __name__ == "__main__":
    main()
