#!/usr/bin/env python3
"""torch.compile (default mode: inductor) against eager over a model with
voxconv layers (issue 20: "keeps working and is not slower than eager").

The model is examples/train_segmentation.py's MiniMinkUNet (sparse convs,
batch norm, ReLU, concatenations, a linear head) on the SemanticKITTI scan
at 5 cm. Both variants share the weights. Per variant: the first call
(compilation and tuning), then the median of --repeat calls of
  forward     under no_grad, a fresh SparseTensor per call;
  train step  forward + cross-entropy + backward (no optimizer step, so
              every call sees the same weights).
Outputs and weight gradients of the two are compared (float32; inductor
may reorder the dense ops' arithmetic, so the bound is float32's: rtol and
atol 1e-4 on O(1) values through ~20 layers).

    python3 bench/compile_bench.py [--json out.json] [--repeat 20]
"""
import argparse, datetime, json, os, platform, statistics, sys, time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
from bench_common import commit_id  # noqa: E402
import train_segmentation as ts  # noqa: E402

voxconv = ts.voxconv


def timed(fn, repeat, device):
    torch.cuda.synchronize(device)
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize(device)
    first = 1e3 * (time.perf_counter() - t)
    for _ in range(3):
        fn()
    runs = []
    for _ in range(repeat):
        torch.cuda.synchronize(device)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        runs.append(s.elapsed_time(e))
    return {"first_call_ms": first, "ms": statistics.median(runs), "ms_min": min(runs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", ts.DATA))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--disable-modules", action="store_true",
                    help="experiment: every voxconv.nn module's forward under "
                         "torch.compiler.disable (dynamo never traces into them)")
    args = ap.parse_args()
    if args.disable_modules:
        import inspect
        for name, cls in inspect.getmembers(voxconv.nn, inspect.isclass):
            if issubclass(cls, torch.nn.Module) and cls.__module__ == voxconv.nn.__name__ \
                    and "forward" in cls.__dict__:
                cls.forward = torch.compiler.disable(cls.__dict__["forward"])
    if not torch.cuda.is_available():
        raise SystemExit("compile_bench: needs a GPU")
    dev = torch.device("cuda")
    scan = os.path.join(args.data_dir, ts.DEFAULT_SCAN)
    pts, labels = ts.load_scan(scan, os.path.splitext(scan)[0] + ".label")
    x, target, _ = ts.voxelize_scan(pts, labels, 0.05, dev)
    feats, coords = x.feats, x.coords
    torch.manual_seed(0)
    model = ts.MiniMinkUNet(x.num_channels, len(ts.CLASSES), [32, 64, 128, 256, 256]).to(dev)
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=ts.IGNORE)
    compiled = torch.compile(model)  # default mode

    def forward(m):
        def f():
            with torch.no_grad():
                return m(voxconv.SparseTensor(feats, coords))
        return f

    def step(m):
        def f():
            for p in model.parameters():
                p.grad = None
            loss = loss_fn(m(voxconv.SparseTensor(feats, coords)), target)
            loss.backward()
            return loss
        return f

    rec = {"script": "bench/compile_bench.py", "commit": commit_id(REPO),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "device_name": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "python": platform.python_version(), "voxels": len(x), "repeat": args.repeat,
           "custom_ops": voxconv.custom_ops_enabled(),
           "disable_modules": args.disable_modules}
    # correctness first (one call each, same weights, batch-norm statistics
    # restored in between so both see the same running state)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    loss_e = step(model)()
    grads_e = [p.grad.clone() for p in model.parameters()]
    model.load_state_dict(state)
    loss_c = step(compiled)()
    grads_c = [p.grad.clone() for p in model.parameters()]
    model.load_state_dict(state)
    worst = max(float(((a - b).abs() / (b.abs() + 1e-4)).max()) for a, b in zip(grads_c, grads_e))
    rec["check"] = {"loss_eager": float(loss_e), "loss_compiled": float(loss_c),
                    "grad_max_rel": worst}
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-4, atol=1e-4)
    for a, b in zip(grads_c, grads_e):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    for name, m in (("eager", model), ("compiled", compiled)):
        rec[name] = {"forward": timed(forward(m), args.repeat, dev),
                     "train_step": timed(step(m), args.repeat, dev)}
    try:
        ex = torch._dynamo.explain(model)(voxconv.SparseTensor(feats, coords))
        rec["graph_breaks"] = ex.graph_break_count
        rec["graphs"] = ex.graph_count
    except Exception as e:  # noqa: BLE001 - diagnostic only
        rec["graph_breaks"] = f"explain failed: {type(e).__name__}: {e}"
    for what in ("forward", "train_step"):
        e, c = rec["eager"][what]["ms"], rec["compiled"][what]["ms"]
        print(f"{what:10s} eager {e:8.3f} ms  compiled {c:8.3f} ms  compiled/eager {c / e:.3f}  "
              f"(first call eager {rec['eager'][what]['first_call_ms']:.0f} ms, compiled "
              f"{rec['compiled'][what]['first_call_ms']:.0f} ms)")
    print(f"check: {rec['check']}; graph breaks {rec.get('graph_breaks')}, "
          f"graphs {rec.get('graphs')}; {rec['device_name']}, torch {torch.__version__}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
