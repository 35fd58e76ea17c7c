"""Where the compat layers' extra host time goes in training (issue 21:
compat <= 1.05 x native): cProfile of forward + backward of one port of
bench/compat_bench.py, compat and native, the Python functions ranked by
their own time, and the functions only one variant calls. A diagnostic
(the C calls are the same on both sides); runs on the CPU with a crop.

    python3 bench/debug/compat_profile.py --ports UNetV2 [--crop 12] [--calls 5]
"""
import cProfile, os, pstats, sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compat_bench as cb  # noqa: E402
import torch  # noqa: E402


def parse(argv):
    """compat_bench's arguments plus --calls N (profiled steps, default 5)."""
    argv = list(argv)
    calls = 5
    if "--calls" in argv:
        i = argv.index("--calls")
        calls = int(argv[i + 1])
        del argv[i:i + 2]
    return cb.parse_args(argv), calls


def main():
    args, calls = parse(sys.argv[1:])
    for name in args.ports:
        port = cb.make_port(name, args)
        feats = port.info["feats"]
        stats = {}
        for v in ("compat", "native"):
            m = cb.model_of(port, v)
            m.train(True)
            y = cb.run(port, v, feats)
            gout = torch.randn_like(port.outputs(v, y)[0][1])
            pr = cProfile.Profile()
            for _ in range(calls):
                m.zero_grad(set_to_none=True)
                pr.enable()
                y = cb.run(port, v, feats)
                port.outputs(v, y)[0][1].backward(gout)
                pr.disable()
                del y
            st = pstats.Stats(pr)
            stats[v] = st
            print(f"\n== {name} {v}: {st.total_tt / calls * 1e3:.2f} ms per step "
                  f"(profiled), top own time:")
            st.sort_stats("tottime").print_stats(14)
            if v == "compat":
                st.print_callers("reshape|permute|raw_alloc|index_select")
        only = {}
        for v, o in (("compat", "native"), ("native", "compat")):
            a, b = stats[v].stats, stats[o].stats
            only[v] = sorted(((tt, f) for f, (_, _, tt, _, _) in a.items() if f not in b),
                             reverse=True)[:15]
            print(f"\n== {name}: functions only {v} calls, own ms per step:")
            for tt, f in only[v]:
                print(f"    {tt / calls * 1e3:7.3f}  {f[0].split('/')[-1]}:{f[1]} {f[2]}")


if __name__ == "__main__":
    main()
