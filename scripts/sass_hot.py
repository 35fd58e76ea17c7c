#!/usr/bin/env python3
"""Hot spots of an ncu SASS source page (scripts/ncu_sass.sh's name_sass.csv).

  scripts/sass_hot.py NAME_sass.csv [N] [--range LO:HI ...]

Prints the total stall samples, the ten largest stall reasons, the N
instructions with most samples (with their top three reasons), and, per
--range (hex address suffixes, e.g. d2020:d2a60 for a loop), the samples
inside it, so a warp-specialised kernel's gathering and MMA loops can be
weighed against each other.
"""
import csv
import sys


def main():
    args = sys.argv[1:]
    ranges = []
    while "--range" in args:
        i = args.index("--range")
        lo, hi = args[i + 1].split(":")
        ranges.append((int(lo, 16), int(hi, 16)))
        del args[i:i + 2]
    path = args[0]
    n = int(args[1]) if len(args) > 1 else 30
    rows = list(csv.reader(open(path)))
    hdr, data = rows[1], rows[2:]
    ia = hdr.index("Warp Stall Sampling (All Samples)")
    reasons = [i for i, h in enumerate(hdr)
               if h.startswith("stall_") and "Not Issued" not in h]

    def samples(r):
        return int(r[ia] or 0)

    total = sum(samples(r) for r in data)
    print("total samples", total)
    by_reason = {}
    for r in data:
        for i in reasons:
            by_reason[hdr[i]] = by_reason.get(hdr[i], 0) + int(r[i] or 0)
    top = sorted(by_reason.items(), key=lambda kv: -kv[1])[:10]
    print("  ".join("%s %.1f%%" % (k[6:], 100.0 * v / max(total, 1))
                    for k, v in top))
    for r in sorted(data, key=lambda r: -samples(r))[:n]:
        why = sorted(((int(r[i] or 0), hdr[i][6:]) for i in reasons),
                     reverse=True)[:3]
        print("%8d %5.1f%% %s %-60s %s" % (
            samples(r), 100.0 * samples(r) / max(total, 1), r[0][-5:],
            r[1].strip()[:60], ", ".join("%s %d" % (k, v) for v, k in why)))
    mask = (1 << 20) - 1
    for lo, hi in ranges:
        s = sum(samples(r) for r in data
                if lo <= (int(r[0], 16) & mask) <= hi)
        print("range %05x:%05x %d samples (%.1f%%)" % (
            lo, hi, s, 100.0 * s / max(total, 1)))


if __name__ == "__main__":
    main()
