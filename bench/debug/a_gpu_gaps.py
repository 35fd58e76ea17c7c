"""Where the GPU idles in workload A's forward from PyTorch (issue 20: the
slow-host forward still ends ~1 ms after the tool's). Runs the torch_bench
network (no_grad, fresh SparseTensor per call, map stream and build worker
as configured) under torch.profiler for --runs forwards, merges every
kernel and memcpy / memset interval of all streams into one busy timeline
per forward, and prints the idle time, the largest gaps with the GPU work
on each side and the module the host was in when each gap ended (forward
hooks mark the modules as record_function ranges), then the GPU time per
kernel name summed over the forwards (per forward), to set beside the
tool's (nsys on `voxconv bench`). With the host probe. Under the profiler
the build worker's thread is much slower than without it (s28 call 4):
read the worker's gaps with care. A diagnostic.

    python3 bench/debug/a_gpu_gaps.py [--data-dir D] [--runs 5] [--top 12]
                                      [--trace trace.json]
"""
import argparse, os, sys
import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from a_profile import load_a_network, names  # noqa: E402
import torch_bench as tb  # noqa: E402
import voxconv  # noqa: E402


def hook_modules(net, labels):
    """record_function ranges around each leaf module (host side)."""
    ranges = {}

    def pre(mod, _inp):
        r = record_function("mod:" + labels[mod])
        r.__enter__()
        ranges[mod] = r

    def post(mod, _inp, _out):
        ranges.pop(mod).__exit__(None, None, None)

    for m in labels:
        m.register_forward_pre_hook(pre)
        m.register_forward_hook(post)



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--gap-us", type=float, default=15.0)
    ap.add_argument("--trace", help="also write the profile as a Chrome trace "
                    "(kernels with their streams) to this file")
    args = ap.parse_args()
    dev = torch.device("cuda")
    net, coords, feats, _ = load_a_network(args.data_dir, tb.DTYPES["f16"], dev)
    hook_modules(net, dict(zip(net, names(net))))

    def forward():
        with torch.no_grad(), record_function("forward"):
            # the voxelization grid's box, as torch_bench passes it
            y = net(voxconv.SparseTensor(feats, coords, bounds=tb.A_BOUNDS))
        torch.cuda.synchronize()
        return y

    for _ in range(5):
        forward()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.runs):
            forward()
    print(f"host probe {tb.host_probe_us():.0f} us")
    if args.trace:
        prof.export_chrome_trace(args.trace)
    ev = prof.events()
    fwd = sorted((e.time_range.start, e.time_range.end) for e in ev if e.name == "forward"
                 and e.device_type == torch.autograd.DeviceType.CPU)
    mods = sorted((e.time_range.start, e.time_range.end, e.name[4:]) for e in ev
                  if e.name.startswith("mod:"))
    # (the record_function ranges have GPU-side copies too: not work)
    gpu = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev
                 if e.device_type == torch.autograd.DeviceType.CUDA
                 and e.name != "forward" and not e.name.startswith("mod:"))
    sums, n_fwd = {}, 0
    for i, (f0, f1) in enumerate(fwd):
        nxt = fwd[i + 1][0] if i + 1 < len(fwd) else float("inf")
        work = [g for g in gpu if f0 <= g[0] < nxt]
        if not work:
            continue
        n_fwd += 1
        for g in work:
            sums[g[2]] = sums.get(g[2], 0.0) + g[1] - g[0]
        busy_end, busy, gaps = work[0][1], work[0][1] - work[0][0], []
        prev = work[0]
        for g in work[1:]:
            if g[0] > busy_end:
                gap = g[0] - busy_end
                if gap >= args.gap_us:
                    host = [m[2] for m in mods if m[0] <= g[0] <= m[1]]
                    gaps.append((gap, busy_end - f0, prev[2][:48], g[2][:48],
                                 host[-1] if host else "-"))
                busy += g[1] - g[0]
                busy_end, prev = g[1], g
            elif g[1] > busy_end:
                busy += g[1] - busy_end
                busy_end, prev = g[1], g
        span = busy_end - work[0][0]
        idle = span - busy
        print(f"\nforward {i}: host {1e-3 * (f1 - f0):.3f} ms, GPU first-to-last "
              f"{1e-3 * span:.3f} ms, busy {1e-3 * busy:.3f}, idle {1e-3 * idle:.3f} "
              f"({len(gaps)} gaps >= {args.gap_us:.0f} us, "
              f"{1e-3 * sum(g[0] for g in gaps):.3f} ms)")
        for gap, at, before, after, host in sorted(gaps, reverse=True)[:args.top]:
            print(f"  {gap:7.1f} us at {at / 1e3:6.3f} ms  host in {host:14s} "
                  f"after {before} | before {after}")
    if n_fwd:
        total = sum(sums.values()) / n_fwd
        print(f"\nGPU time per forward by name (sum over streams, overlap counted "
              f"twice): {total / 1e3:.3f} ms")
        for name, t in sorted(sums.items(), key=lambda kv: -kv[1])[:25]:
            print(f"  {t / n_fwd:8.1f} us  {name[:90]}")


if __name__ == "__main__":
    main()

