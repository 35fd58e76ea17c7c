"""Where workload A's forward from PyTorch spends its host time, by Python
function (cProfile over --runs forwards, no_grad, fresh SparseTensor per
call, map stream on). A ctypes call's time counts in its Python caller's
own time (cProfile does not see into foreign functions), so a function
whose own time is large and that calls the library is mostly the
library's host time (launches). Host probe printed beside it (see
torch_bench.host_probe_us). A diagnostic.

    python3 bench/debug/a_cprofile.py [--data-dir D] [--runs 20]
"""
import argparse, cProfile, io, os, pstats, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"],
                                           torch.device("cuda"))

    def forward():
        with torch.no_grad():
            y = net(voxconv.SparseTensor(feats, coords))
        torch.cuda.synchronize()
        return y

    for _ in range(5):
        forward()
    t = time.perf_counter()
    for _ in range(args.runs):
        forward()
    plain = 1e3 * (time.perf_counter() - t) / args.runs
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(args.runs):
        forward()
    pr.disable()
    print(f"host probe {tb.host_probe_us():.0f} us; forward + sync {plain:.3f} ms without the "
          f"profiler; per forward below (us = total / {args.runs})")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(30)
        print(f"\n== by {key}\n" + s.getvalue())


if __name__ == "__main__":
    main()
