"""Where a kernel's instructions and stall samples go, from an Nsight
Compute SASS source page (docs/perf-notes.md item 116 found the int8
epilogue this way). On the device:

    ncu --kernel-name-base demangled --kernel-name "regex:..." --launch-skip 3 \\
        --launch-count 1 --set full -o /tmp/k -f <program>
    ncu -i /tmp/k.ncu-rep --page source --csv --print-source sass > k.csv

then here:

    python3 bench/debug/ncu_sass_regions.py k.csv [--top 20]

Prints the share of executed instructions and of warp-stall samples
before, inside and after the main loop (the instructions executed at
least half as often as the most executed one, and everything between
them), by opcode, the stall reasons, and the instructions with the most
samples. A diagnostic.
"""
import argparse
import collections
import csv
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    # row 0 names the kernel; row 1 is the header
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    recs = []
    for r in rows[2:]:
        if len(r) < len(hdr):
            continue
        try:
            recs.append({
                "addr": int(r[ix["Address"]], 16),
                "src": r[ix["Source"]].strip(),
                "exec": int(r[ix["Instructions Executed"]]),
                "samples": int(r[ix["Warp Stall Sampling (All Samples)"]]),
                "stalls": {h: int(r[ix[h]]) for h in stalls if r[ix[h]].isdigit()},
            })
        except ValueError:
            continue
    return rows[0][1] if len(rows[0]) > 1 else "?", recs


def opcode(src):
    words = src.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=20, help="instructions listed by samples")
    args = ap.parse_args(argv)
    name, recs = load(args.csv)
    if not recs:
        sys.exit(f"{args.csv}: no SASS rows")
    base = recs[0]["addr"]
    tx = sum(r["exec"] for r in recs) or 1
    ts = sum(r["samples"] for r in recs) or 1
    print(f"{name}\n{len(recs)} instructions, {tx} executed, {ts} stall samples")
    most = max(r["exec"] for r in recs)
    loop = [r["addr"] for r in recs if r["exec"] >= most / 2]
    lo, hi = min(loop), max(loop)
    for label, part in (("before the main loop", [r for r in recs if r["addr"] < lo]),
                        ("main loop", [r for r in recs if lo <= r["addr"] <= hi]),
                        ("after the main loop", [r for r in recs if r["addr"] > hi])):
        print(f"  {label:22s} {len(part):6d} instructions, executed "
              f"{100 * sum(r['exec'] for r in part) / tx:5.1f} %, samples "
              f"{100 * sum(r['samples'] for r in part) / ts:5.1f} %")
    ops_x, ops_s = collections.Counter(), collections.Counter()
    stall = collections.Counter()
    for r in recs:
        ops_x[opcode(r["src"])] += r["exec"]
        ops_s[opcode(r["src"])] += r["samples"]
        stall.update(r["stalls"])
    print("by opcode (executed %, samples %):")
    for op, n in ops_x.most_common(15):
        print(f"  {op:10s} {100 * n / tx:5.1f} {100 * ops_s[op] / ts:5.1f}")
    st = sum(stall.values()) or 1
    print("stall reasons: " + ", ".join(f"{h[6:]} {100 * n / st:.1f} %"
                                        for h, n in stall.most_common(8)))
    print("most sampled instructions (offset, samples, executed, main stall, source):")
    for r in sorted(recs, key=lambda r: -r["samples"])[:args.top]:
        why = max(r["stalls"], key=r["stalls"].get)[6:] if r["stalls"] else "-"
        print(f"  {r['addr'] - base:6x} {r['samples']:6d} {r['exec']:10d} {why:14s} "
              f"{r['src'][:80]}")


if __name__ == "__main__":
    main()
