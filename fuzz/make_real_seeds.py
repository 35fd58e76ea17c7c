#!/usr/bin/env python3
"""Derives small seed files for the scan-reader fuzzers (fuzz_scan_pcd,
fuzz_scan_ply, fuzz_scan_bin) from the recorded scans in the data folder
(../shared/data/scans): the first points of each scan, in its own format
and layout, and the same points re-encoded in the other layouts its format
has (a binary_compressed PCD also as binary and ascii; an ascii PLY also
as binary little and big endian). Real coordinates, real header fields
(PCL's VIEWPOINT and rgb, the bunny's obj_info lines and range grid), real
NaN patterns: what libFuzzer mutates from is what users' files look like.

The scans are not copied: seeds are written into the build folder (CMake
runs this at build time when the data folder exists; the synthetic seeds
of fuzz/make_scan_seeds.py are used either way). Each seed stays within
--max-bytes (libFuzzer's -max_len: a longer one would be cut, and a cut
binary file is rejected at its first size check, teaching nothing).

    python3 fuzz/make_real_seeds.py --data ../shared/data --out build/fuzz/seeds_real
"""
import argparse
import math
import os
import re
import struct

# "the first few hundred points": at most this many per seed, fewer when
# the byte budget says so.
MAX_POINTS = 300

# Raw float32 scans: (file, floats per point, name byte, fields byte) for
# fuzz_scan_bin, whose first two input bytes pick the file name and the
# --fields value (names[] and fields[] in fuzz/fuzz_scan_bin.c): the name
# byte makes the reader guess the width the way it would for that dataset.
BIN_SCANS = [
    ("kitti_000000.bin", 4, 1, 0),
    ("kitti_000008.bin", 4, 5, 2),
    ("semantickitti_00_000000.bin", 4, 0, 0),
    ("nuscenes_n015-2018-07-24-11-22-45+0800__LIDAR_TOP__1532402927647951.pcd.bin",
     5, 2, 0),
    ("scannet_scene0000_00.bin", 6, 3, 0),
    ("sunrgbd_000017.bin", 6, 6, 4),
    ("pcl_office1.xyzrgb.f32.bin", 4, 0, 2),
    ("stanford_bunny_bun000.xyz.f32.bin", 3, 4, 0),
]


def lzf_decompress(data, out_len):
    out, i = bytearray(), 0
    while i < len(data):
        ctrl = data[i]
        i += 1
        if ctrl < 32:  # literal run of ctrl + 1 bytes
            out += data[i:i + ctrl + 1]
            i += ctrl + 1
            continue
        length = ctrl >> 5
        if length == 7:
            length += data[i]
            i += 1
        ref = len(out) - ((ctrl & 0x1F) << 8) - data[i] - 1
        i += 1
        for _ in range(length + 2):  # may overlap: byte by byte
            out.append(out[ref])
            ref += 1
    if len(out) != out_len:
        raise ValueError("LZF: %d bytes, header says %d" % (len(out), out_len))
    return bytes(out)


def lzf(data):
    """LZF compression as liblzf does it: a hash of the next 3 bytes finds
    the last place they occurred (within 8192 bytes); literal runs of up
    to 32 bytes, back-references of 3..264 bytes. Linear time. Also
    make_scan_seeds.py's compressor."""
    out, lit, last, i, n = bytearray(), bytearray(), {}, 0, len(data)

    def flush():
        while lit:
            run = lit[:32]
            out.append(len(run) - 1)
            out.extend(run)
            del lit[:32]

    while i < n:
        key = data[i:i + 3]
        j = last.get(key, -1) if len(key) == 3 else -1
        if len(key) == 3:
            last[key] = i
        if j >= 0 and i - j <= 8192:
            length = 3
            while length < 264 and i + length < n and data[j + length] == data[i + length]:
                length += 1
            flush()
            off, ln = i - j - 1, length - 2
            if ln < 7:
                out.append((ln << 5) | (off >> 8))
            else:
                out.append((7 << 5) | (off >> 8))
                out.append(ln - 7)
            out.append(off & 0xFF)
            for k in range(i + 1, min(i + length, n - 2)):
                last[data[k:k + 3]] = k
            i += length
        else:
            lit.append(data[i])
            i += 1
    flush()
    return bytes(out)


def fit(n_max, size_of):
    """The largest n in 1..n_max with size_of(n) within the budget (sizes
    grow with n), by bisection."""
    lo, hi = 1, n_max
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size_of(mid) <= BUDGET:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---- raw .bin ----------------------------------------------------------------

def bin_seeds(scans):
    seeds = {}
    for name, width, name_i, fields_i in BIN_SCANS:
        path = os.path.join(scans, name)
        if not os.path.isfile(path):
            continue
        n = fit(MAX_POINTS, lambda k: 2 + 4 * width * k)
        with open(path, "rb") as f:
            body = f.read(4 * width * n)
        stem = re.sub(r"[^A-Za-z0-9]+", "_", name.split(".")[0])[:24].strip("_")
        seeds["real_%s_%dpts.bin" % (stem, n)] = bytes([name_i, fields_i]) + body
    return seeds


# ---- PCD -----------------------------------------------------------------------

def read_pcd(path):
    """(header lines without DATA, fields, sizes, types, counts, points as
    tuples of floats/ints, one value per field element)."""
    with open(path, "rb") as f:
        raw = f.read()
    header, pos = [], 0
    while True:
        end = raw.index(b"\n", pos)
        line = raw[pos:end].decode().strip()
        pos = end + 1
        if line.startswith("DATA"):
            kind = line.split()[1]
            break
        header.append(line)
    kv = {l.split()[0]: l.split()[1:] for l in header if l and not l.startswith("#")}
    fields, sizes, types = kv["FIELDS"], list(map(int, kv["SIZE"])), kv["TYPE"]
    counts = list(map(int, kv.get("COUNT", ["1"] * len(fields))))
    n = int(kv["POINTS"][0])
    codes = [{("F", 4): "f", ("F", 8): "d", ("U", 1): "B", ("U", 2): "H", ("U", 4): "I",
              ("I", 1): "b", ("I", 2): "h", ("I", 4): "i"}[(t, s)]
             for t, s in zip(types, sizes)]
    cols = []  # one list per field element
    if kind == "binary_compressed":
        comp, size = struct.unpack_from("<II", raw, pos)
        data = lzf_decompress(raw[pos + 8:pos + 8 + comp], size)
        off = 0
        for code, s, c in zip(codes, sizes, counts):  # field-major
            vals = struct.unpack_from("<%d%s" % (n * c, code), data, off)
            off += n * c * s
            for e in range(c):
                cols.append(vals[e::c])
        points = list(zip(*cols))
    elif kind == "binary":
        fmt = "<" + "".join(code * c for code, c in zip(codes, counts))
        step = struct.calcsize(fmt)
        points = [struct.unpack_from(fmt, raw, pos + i * step) for i in range(n)]
    else:
        rows = raw[pos:].decode().split("\n")
        points = [tuple(float(v) for v in r.split()) for r in rows[:n]]
    return header, fields, sizes, types, counts, codes, points


def pcd_seeds(scans):
    path = os.path.join(scans, "pcl_office1.pcd")
    if not os.path.isfile(path):
        return {}
    header, fields, sizes, types, counts, codes, points = read_pcd(path)
    # An organised cloud has rows and stretches of NaN (no return): begin
    # a few points before the first stretch that is mostly finite, so the
    # seeds hold both kinds.
    finite = [all(map(math.isfinite, p[:3])) for p in points]
    first = next((i for i in range(len(points)) if sum(finite[i:i + 64]) >= 48), 0)
    points = points[max(0, first - 8):]

    def head(n, kind):
        lines = []
        for l in header:
            key = l.split()[0] if l else ""
            if key in ("WIDTH", "POINTS"):
                l = "%s %d" % (key, n)
            elif key == "HEIGHT":
                l = "HEIGHT 1"
            lines.append(l)
        return ("\n".join(lines) + "\nDATA %s\n" % kind).encode()

    fmt = "<" + "".join(code * c for code, c in zip(codes, counts))
    step = struct.calcsize(fmt)

    def binary(n):
        return head(n, "binary") + b"".join(struct.pack(fmt, *p) for p in points[:n])

    def compressed(n):
        raw = bytearray()
        col = 0
        for code, c in zip(codes, counts):
            for e in range(c):
                raw += struct.pack("<%d%s" % (n, code), *(p[col + e] for p in points[:n]))
            col += c
        comp = lzf(bytes(raw))
        return head(n, "binary_compressed") + struct.pack("<II", len(comp), len(raw)) + comp

    def ascii(n):
        rows = []
        for p in points[:n]:
            vals = []
            for v, t in zip(p, [t for t, c in zip(types, counts) for _ in range(c)]):
                vals.append("%.9g" % v if t == "F" else "%d" % v)
            rows.append(" ".join(vals))
        return head(n, "ascii") + ("\n".join(rows) + "\n").encode()

    seeds = {}
    for kind, make in [("binary_compressed", compressed), ("binary", binary),
                       ("ascii", ascii)]:
        n = fit(min(MAX_POINTS, len(points)), lambda k: len(make(k)))
        seeds["real_pcl_office1_%s_%dpts.pcd" % (kind, n)] = make(n)
    return seeds


# ---- PLY ------------------------------------------------------------------------

def ply_seeds(scans):
    path = os.path.join(scans, "stanford_bunny_bun000.ply")
    if not os.path.isfile(path):
        return {}
    with open(path, "rb") as f:
        raw = f.read()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    header = raw[:end].decode().split("\n")[:-1]
    body = raw[end:].decode(errors="replace").split("\n")
    n_vertex = int(next(l.split()[2] for l in header if l.startswith("element vertex")))
    vertex_lines = body[:n_vertex]
    grid_lines = body[n_vertex:n_vertex + 64] if len(body) > n_vertex else []
    props = []  # vertex properties (type, name)
    in_vertex = False
    for l in header:
        w = l.split()
        if w[:1] == ["element"]:
            in_vertex = w[1] == "vertex"
        elif w[:1] == ["property"] and in_vertex:
            props.append((w[1], w[2]))
    codes = {"float": "f", "float32": "f", "double": "d", "uchar": "B", "int": "i"}

    def head(fmt, n, n_grid):
        out = []
        for l in header:
            w = l.split()
            if w[:1] == ["format"]:
                l = "format %s 1.0" % fmt
            elif w[:2] == ["element", "vertex"]:
                l = "element vertex %d" % n
            elif w[:1] == ["element"]:
                l = "element %s %d" % (w[1], n_grid)
            out.append(l)
        return ("\n".join(out) + "\n").encode()

    def grid_binary(endian):
        b = bytearray()
        for l in grid_lines[:8]:
            w = [int(v) for v in l.split()]
            b += struct.pack(endian + "B%di" % w[0], w[0], *w[1:])
        return bytes(b)

    def ascii(n):
        g = grid_lines[:8]
        return head("ascii", n, len(g)) + ("\n".join(vertex_lines[:n] + g) + "\n").encode()

    def binary(endian, fmt_name):
        def make(n):
            fmt = endian + "".join(codes[t] for t, _ in props)
            rows = b"".join(struct.pack(fmt, *(float(v) for v in l.split()[:len(props)]))
                            for l in vertex_lines[:n])
            return head(fmt_name, n, min(8, len(grid_lines))) + rows + grid_binary(endian)
        return make

    seeds = {}
    for kind, make in [("ascii", ascii),
                       ("binary_le", binary("<", "binary_little_endian")),
                       ("binary_be", binary(">", "binary_big_endian"))]:
        n = fit(min(MAX_POINTS, len(vertex_lines)), lambda k: len(make(k)))
        seeds["real_bunny_%s_%dpts.ply" % (kind, n)] = make(n)
    return seeds


def main():
    global BUDGET
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the data folder (holds scans/)")
    ap.add_argument("--out", required=True, help="where corpus_scan_* folders go")
    ap.add_argument("--max-bytes", type=int, default=4096, help="largest seed (-max_len)")
    args = ap.parse_args()
    BUDGET = args.max_bytes
    scans = os.path.join(args.data, "scans")
    if not os.path.isdir(scans):
        print("make_real_seeds: no %s; the synthetic seeds stand alone" % scans)
        return
    for sub, seeds in [("corpus_scan_pcd", pcd_seeds(scans)),
                       ("corpus_scan_ply", ply_seeds(scans)),
                       ("corpus_scan_bin", bin_seeds(scans))]:
        folder = os.path.join(args.out, sub)
        os.makedirs(folder, exist_ok=True)
        for old in os.listdir(folder):  # seeds of an earlier run
            if old.startswith("real_"):
                os.remove(os.path.join(folder, old))
        for name, data in seeds.items():
            assert len(data) <= BUDGET, (name, len(data))
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        print("%s: %d seeds from %s" % (sub, len(seeds), scans))


BUDGET = 4096

if __name__ == "__main__":
    main()
