"""Where the host time of workload A's (or B's) forward from PyTorch goes (issue 20):
time inside each C entry point (every ``voxconv_*`` function wrapped with a
clock: the ctypes conversion and the C call, GPU waits included) against the
Python around it, then cProfile's top functions. A diagnostic next to
bench/debug/a_profile.py (which gives the GPU side); no numbers to quote.

    python3 bench/debug/a_host_profile.py [--data-dir D] [--repeat N] [--workload B]

--workload B: the same network on spconv-basic's voxels (torch_bench's
B), with the host and GPU time of each module first (a_profile's
host_timeline / gpu_alone): B is short, and its gap to the tool is host.
"""
import argparse, cProfile, collections, os, pstats, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import torch_bench as tb  # noqa: E402
from a_profile import gpu_alone, host_timeline, load_a_network, names  # noqa: E402
import voxconv  # noqa: E402
from voxconv import _lib  # noqa: E402

stats = collections.defaultdict(lambda: [0, 0.0])


def wrap_c_functions():
    lib = _lib.lib
    for name, fn in list(vars(lib).items()):
        if not name.startswith("voxconv_") or not callable(fn):
            continue

        def timed(*a, _fn=fn, _s=stats[name]):
            t = time.perf_counter()
            r = _fn(*a)
            _s[0] += 1
            _s[1] += time.perf_counter() - t
            return r
        setattr(lib, name, timed)


def forward(net, feats, coords):
    with torch.no_grad():
        return net(voxconv.SparseTensor(feats, coords))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--workload", choices=("A", "B"), default="A")
    args = ap.parse_args()
    dev = torch.device("cuda")
    if args.workload == "A":
        net, coords, feats, _ = load_a_network(args.data_dir, torch.float16, dev)
    else:
        bxyz, bfeat = tb.workload_b_voxels(args.data_dir)
        coords = torch.from_numpy(bxyz).to(dev)
        feats = torch.from_numpy(bfeat).to(dev, torch.float16)
        net = tb.workload_a_net(dev, torch.float16)
        tb.scale_and_count(net, coords, feats)
        labels = names(net)
        host_timeline(net, labels, feats, coords, 3)  # warm
        med, issue, wall = host_timeline(net, labels, feats, coords, args.repeat)
        gpu = gpu_alone(net, labels, feats, coords, 5)
        print(f"B: {len(coords)} voxels; host issue {issue:.3f} ms, wall {wall:.3f} ms "
              f"(host probe {tb.host_probe_us():.0f} us)")
        print("  module     host ms  GPU-alone ms")
        for n in labels:
            print(f"  {n:9s} {med[n]:8.3f} {gpu[n]:12.3f}")
    for _ in range(5):
        forward(net, feats, coords)
    torch.cuda.synchronize()
    # plain host issue time first (no wrappers)
    issue = []
    for _ in range(args.repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        forward(net, feats, coords)
        issue.append(time.perf_counter() - t)
    issue.sort()
    print(f"host issue per forward, unwrapped: median {1e3 * issue[len(issue) // 2]:.3f} ms")
    wrap_c_functions()
    total = 0.0
    for _ in range(args.repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        forward(net, feats, coords)
        total += time.perf_counter() - t
    n = args.repeat
    c_total = sum(v[1] for v in stats.values())
    print(f"wrapped: host issue per forward {1e3 * total / n:.3f} ms, in C calls "
          f"{1e3 * c_total / n:.3f} ms, Python {1e3 * (total - c_total) / n:.3f} ms")
    for name, (calls, sec) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
        if calls:
            print(f"  {name:36s} {calls / n:6.1f} calls  {1e6 * sec / n:8.1f} us/forward  "
                  f"{1e6 * sec / calls:7.1f} us/call")
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        forward(net, feats, coords)
        torch.cuda.synchronize()
    pr.disable()
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(35)
    st.sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
