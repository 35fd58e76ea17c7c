"""Where the caller's thread spends workload A's forward from PyTorch
(no_grad, fresh SparseTensor per call, map stream on), without cProfile's
per-function overhead: wall time per leaf module type (forward hooks),
per library function called through a handle (Handle.call wrapped: its
time is the library's host time, launches and host waits; calls from
another thread are listed apart), and per Python function named with
--functions (module.attr, wrapped the same way). Measured --rounds times,
each with its host probe (torch_bench.host_probe_us), so that the host's
state can be read beside it. A diagnostic.

    python3 bench/debug/a_host_split.py [--data-dir D] [--runs 20] [--rounds 2]
        [--functions voxconv.kmap.CoordinateManager._adopt,...]
"""
import argparse, collections, importlib, os, sys, threading, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402
from voxconv import _runtime  # noqa: E402

ACC = collections.defaultdict(float)
CNT = collections.defaultdict(int)


def timed(name_of, fn):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            key = name_of(a)
            if threading.current_thread() is not threading.main_thread():
                key = "(other thread) " + key
            ACC[key] += time.perf_counter() - t
            CNT[key] += 1
    return wrapper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--functions", default="")
    args = ap.parse_args()
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"],
                                           torch.device("cuda"))
    _runtime.Handle.call = timed(lambda a: "lib " + a[1], _runtime.Handle.call)
    for name in filter(None, args.functions.split(",")):
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
            try:
                owner = importlib.import_module(".".join(parts[:i]))
                break
            except ImportError:
                continue
        for attr in parts[i:-1]:
            owner = getattr(owner, attr)
        fn = timed(lambda a, n=name: "fn " + n, getattr(owner, parts[-1]))
        if isinstance(vars(owner).get(parts[-1]), staticmethod):
            fn = staticmethod(fn)
        setattr(owner, parts[-1], fn)
    starts = {}
    for m in net.modules():
        if not list(m.children()):
            m.register_forward_pre_hook(lambda mod, _: starts.__setitem__(mod, time.perf_counter()))

            def post(mod, _i, _o):
                key = "module " + type(mod).__name__
                ACC[key] += time.perf_counter() - starts[mod]
                CNT[key] += 1
            m.register_forward_hook(post)

    def forward():
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            y = net(voxconv.SparseTensor(feats, coords))
        ACC["forward (to return)"] += time.perf_counter() - t
        CNT["forward (to return)"] += 1
        torch.cuda.synchronize()
        return y

    for _ in range(5):
        forward()
    for r in range(args.rounds):
        ACC.clear()
        CNT.clear()
        probe = tb.host_probe_us()
        for _ in range(args.runs):
            forward()
        print(f"\n== round {r + 1}, host probe {probe:.0f} us; per forward "
              f"(caller's thread; a module's time includes the library calls it makes):")
        for key in sorted(ACC, key=lambda k: -ACC[k]):
            print(f"  {key:44s} {1e6 * ACC[key] / args.runs:9.1f} us  "
                  f"{CNT[key] / args.runs:6.1f} calls")


if __name__ == "__main__":
    main()
