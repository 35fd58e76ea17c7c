"""Why a Python call right after a CUDA synchronisation runs several times
slower than the same call in a loop (issue 20: torch_bench's C = 64
forward row is one module call after a sync per run; its host time, ~100
us cold against ~17 us hot on the H200 host, is GPU idle inside the timed
region). Separates the wait from the code: host us (median of --reps) of

  py      a pure-Python function (~200 small calls; no CUDA, no library)
  module  workload C's C = 64 SparseConv3d under no_grad (map cached)

right after each of these waits:
  hot     none (back to back)
  spin    a Python busy loop of --wait-us
  sleep   time.sleep(--wait-us)
  gpu     a GPU sleep kernel of --wait-us, then torch.cuda.synchronize()
  event   the same wait through torch.cuda.Event.synchronize()

with the thread free to move between cores and then pinned to the core it
started on (os.sched_setaffinity). If `gpu` is slow and `spin` is not, the
wait itself costs the next call (a core change, caches); if pinning fixes
it, the thread moved. --stream side runs everything on a non-blocking
torch stream instead of the legacy default stream torch_bench uses, and a
second table gives what torch_bench's row measures there: CUDA-event ms
of one module call after a synchronisation (median of --reps). A
diagnostic.

    python3 bench/debug/cold_host.py [--data-dir D] [--reps 60] [--stream default|side]
"""
import argparse, ctypes, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import torch_bench as tb  # noqa: E402
from call_latency import cold, workload_c_layers  # noqa: E402


_sched_getcpu = ctypes.CDLL(None).sched_getcpu  # glibc; not in Python's os


def pure_python():
    d = {}
    for i in range(200):
        d[i & 15] = _leaf(i, d)
    return d


def _leaf(i, d):
    return d.get(i & 15, 0) + i


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("VOXCONV_DATA_DIR", "../shared/data"))
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--wait-us", type=float, default=500.0)
    ap.add_argument("--stream", choices=("default", "side"), default="default")
    args = ap.parse_args()
    if args.stream == "side":
        torch.cuda.set_stream(torch.cuda.Stream())
    conv, x = workload_c_layers(args.data_dir, [64])[0]

    def module():
        with torch.no_grad():
            return conv(x)

    wait_s = args.wait_us / 1e6
    # torch.cuda._sleep's cycles per us, measured once (tb.gpu_sleep
    # measures on every call, with a synchronisation of its own)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(1_000_000)
    e.record()
    e.synchronize()
    cycles = int(args.wait_us * 1_000_000 / (1e3 * max(s.elapsed_time(e), 1e-3)))

    def spin():
        end = time.perf_counter() + wait_s
        while time.perf_counter() < end:
            pass

    def gpu():
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()

    def event():
        torch.cuda._sleep(cycles)
        e = torch.cuda.Event()
        e.record()
        e.synchronize()

    waits = {"hot": None, "spin": spin, "sleep": lambda: time.sleep(wait_s), "gpu": gpu,
             "event": event}
    fns = {"py": pure_python, "module": module}
    for f in fns.values():
        for _ in range(20):
            f()
    torch.cuda.synchronize()
    rows = []
    for pinned in (False, True):
        if pinned:
            os.sched_setaffinity(0, {_sched_getcpu()})
        for wname, w in waits.items():
            for fname, f in fns.items():
                ts, cpus = [], set()
                for _ in range(args.reps):
                    if w is not None:
                        w()
                    cpus.add(_sched_getcpu())
                    t = time.perf_counter()
                    y = f()
                    ts.append(1e6 * (time.perf_counter() - t))
                    del y
                torch.cuda.synchronize()
                ts.sort()
                rows.append((pinned, wname, fname, ts[len(ts) // 10], statistics.median(ts),
                             ts[(9 * len(ts)) // 10], len(cpus)))
    host_us, gpu_ms = cold(module, args.reps)
    print(f"{args.stream} stream: one module call after a sync, CUDA events: median "
          f"{gpu_ms:.4f} ms (host {host_us:.1f} us)")
    print(f"host probe {tb.host_probe_us():.0f} us; wait {args.wait_us:.0f} us; "
          f"{args.reps} reps; host us p10 / p50 / p90; cores seen")
    for pinned, wname, fname, p10, p50, p90, nc in rows:
        print(f"  {'pinned' if pinned else 'free  '} {wname:6s} {fname:7s} "
              f"{p10:7.1f} {p50:7.1f} {p90:7.1f}  {nc}")


if __name__ == "__main__":
    main()
