"""Which autograd nodes make the compat ports' training step slower than
the native one on the host (issue 21; bench/debug/compat_profile.py found
the difference in the autograd engine's own time, not in Python): one
forward + backward of a port under torch.profiler (CPU activity, all
threads), compat and native, the ops ranked by self CPU time, and the ops
whose totals differ most between the two. A diagnostic.

    python3 bench/debug/compat_bwd_profile.py --ports VoxelResBackBone8x [--calls 5]
"""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import compat_bench as cb  # noqa: E402
import compat_profile  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def main():
    args, calls = compat_profile.parse(sys.argv[1:])
    for name in args.ports:
        port = cb.make_port(name, args)
        feats = port.info["feats"]
        totals = {}
        for v in ("compat", "native"):
            m = cb.model_of(port, v)
            m.train(True)
            for _ in range(3):  # warm: tuning, maps, plans
                m.zero_grad(set_to_none=True)
                y = cb.run(port, v, feats)
                gout = torch.randn_like(port.outputs(v, y)[0][1])
                port.outputs(v, y)[0][1].backward(gout)
            torch.cuda.synchronize()
            # CUDA activity too: the runtime calls (a cudaStreamSynchronize or
            # a device-to-host copy in one variant's step is a host wait)
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                             if torch.cuda.is_available() else [])
            with profile(activities=acts) as prof:
                for _ in range(calls):
                    m.zero_grad(set_to_none=True)
                    y = cb.run(port, v, feats)
                    port.outputs(v, y)[0][1].backward(gout)
                    del y
                torch.cuda.synchronize()
            ka = prof.key_averages()
            totals[v] = {e.key: (e.count / calls, e.self_cpu_time_total / calls) for e in ka}
            print(f"\n== {name} {v}: top self CPU time per step (us)")
            for key, (n, us) in sorted(totals[v].items(), key=lambda kv: -kv[1][1])[:18]:
                print(f"    {us:9.1f}  x{n:6.1f}  {key}")
        print(f"\n== {name}: largest differences, compat - native (self us per step, calls)")
        keys = set(totals["compat"]) | set(totals["native"])
        diff = sorted(((totals["compat"].get(k, (0, 0))[1] - totals["native"].get(k, (0, 0))[1],
                        totals["compat"].get(k, (0, 0))[0], totals["native"].get(k, (0, 0))[0], k)
                       for k in keys), key=lambda t: -abs(t[0]))[:20]
        for d, nc, nn_, k in diff:
            print(f"    {d:+9.1f}  calls {nc:6.1f} / {nn_:6.1f}  {k}")


if __name__ == "__main__":
    main()
