#!/usr/bin/env python3
"""Writes the seed corpora of the point-cloud reader fuzzers (fuzz_scan_*):
small synthetic files, one per layout the readers support, so that
libFuzzer starts from inputs that parse. Not copies of recorded scans.

    python3 fuzz/make_scan_seeds.py      # rewrites fuzz/corpus_scan_*/
"""
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


# LZF as liblzf (and PCL through it) writes it: one compressor for both
# seed scripts, the linear-time one of make_real_seeds.py.
from make_real_seeds import lzf  # noqa: E402  (this folder is the script's)


def points(n, seed=1.0):
    return [(math.sin(seed * i) * 3, math.cos(seed * i) * 2, i * 0.25)
            for i in range(n)]


def rgb_float(r, g, b):
    return struct.unpack("<f", struct.pack("<I", (r << 16) | (g << 8) | b))[0]


def pcd_header(fields, sizes, types, counts, width, height, kind,
               viewpoint=True):
    lines = ["# .PCD v0.7 - Point Cloud Data file format", "VERSION 0.7",
             "FIELDS " + " ".join(fields), "SIZE " + " ".join(map(str, sizes)),
             "TYPE " + " ".join(types)]
    if counts:
        lines.append("COUNT " + " ".join(map(str, counts)))
    lines += ["WIDTH %d" % width, "HEIGHT %d" % height]
    if viewpoint:
        lines.append("VIEWPOINT 0 0 0 1 0 0 0")
    lines += ["POINTS %d" % (width * height), "DATA " + kind]
    return ("\n".join(lines) + "\n").encode()


def pcd_seeds():
    pts = points(6)
    seeds = {}
    body = "".join("%g %g %g\n" % p for p in pts)
    seeds["ascii_xyz.pcd"] = pcd_header(
        "x y z".split(), [4] * 3, "FFF", [1] * 3, 6, 1, "ascii") + body.encode()
    rows = []
    for i, p in enumerate(pts[:4]):
        x = "nan" if i == 2 else "%g" % p[0]
        rows.append("0 0 1 %s %g %g %d %.9g\r\n" % (x, p[1], p[2], i,
                                                     rgb_float(9 * i, 200, 7)))
    seeds["ascii_rgb_count_crlf.pcd"] = pcd_header(
        "normal x y z label rgb".split(), [4, 4, 4, 4, 2, 4], "FFFFUF",
        [3, 1, 1, 1, 1, 1], 2, 2, "ascii").replace(b"\n", b"\r\n") + \
        "".join(rows).encode()
    seeds["ascii_empty.pcd"] = pcd_header("x y z".split(), [4] * 3, "FFF",
                                          None, 0, 1, "ascii", False)
    b = bytearray()
    for i, p in enumerate(pts):
        b += struct.pack("<B d f f H", i, p[2], p[1], p[0], 65535 - i)
    seeds["binary_mixed.pcd"] = pcd_header(
        "intensity z y x ring".split(), [1, 8, 4, 4, 2], "UFFFU", None, 6, 1,
        "binary") + bytes(b)
    b = bytearray()
    for i, p in enumerate(pts[:4]):
        b += struct.pack("<fffI", *p, (i * 40 << 16) | (80 << 8) | 160)
    seeds["binary_rgb_uint.pcd"] = pcd_header(
        "x y z rgba".split(), [4] * 4, "FFFU", [1] * 4, 2, 2, "binary") + \
        bytes(b)
    # binary_compressed: field-major, as PCL writes it
    for name, fields, sizes, types, cols in [
        ("compressed_xyz.pcd", "x y z", [4, 4, 4], "FFF",
         [[p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]]),
        ("compressed_xyz_rgb_repeats.pcd", "x y z rgb", [4, 4, 4, 4], "FFFF",
         [[1.0] * 6, [2.0] * 6, [p[2] for p in pts],
          [rgb_float(255, 0, 0)] * 6]),
        ("compressed_f64_i16.pcd", "t x y z", [2, 8, 8, 8], "IFFF",
         [[-3] * 6, [p[0] for p in pts], [p[1] for p in pts],
          [p[2] for p in pts]]),
    ]:
        raw = bytearray()
        for col, size, t in zip(cols, sizes, types):
            fmt = {("F", 4): "f", ("F", 8): "d", ("I", 2): "h"}[(t, size)]
            raw += struct.pack("<%d%s" % (len(col), fmt), *col)
        comp = lzf(bytes(raw))
        seeds[name] = pcd_header(fields.split(), sizes, types, None, 6, 1,
                                 "binary_compressed") + \
            struct.pack("<II", len(comp), len(raw)) + comp
    return seeds


def ply_header(fmt, elements, extra=""):
    lines = ["ply", "format %s 1.0" % fmt, "comment synthetic seed"] + \
        ([extra] if extra else [])
    for name, count, props in elements:
        lines.append("element %s %d" % (name, count))
        lines += ["property " + p for p in props]
    lines.append("end_header")
    return ("\n".join(lines) + "\n").encode()


def ply_seeds():
    pts = points(5, 0.7)
    seeds = {}
    xyz = ["float x", "float y", "float z"]
    seeds["ascii_face.ply"] = ply_header(
        "ascii", [("vertex", 5, xyz + ["uchar red"]),
                  ("face", 1, ["list uchar int vertex_indices"])]) + \
        ("".join("%g %g %g %d\n" % (*p, i) for i, p in enumerate(pts)) +
         "3 0 1 2\n").encode()
    seeds["ascii_crlf_before.ply"] = ply_header(
        "ascii", [("camera", 1, ["float fov", "list uchar int ids"]),
                  ("vertex", 3, ["double z", "list uchar float w"] +
                   xyz[:2])], "obj_info seed").replace(b"\n", b"\r\n") + \
        b"60 2 5 6\r\n1.5 2 0.1 0.2 10 20\r\n-3 0 11 21\r\ninf 1 9 12 22\r\n"
    b = b"".join(struct.pack("<fff", *p) for p in pts)
    seeds["binary_le.ply"] = ply_header("binary_little_endian",
                                        [("vertex", 5, xyz)]) + b
    b = bytearray(struct.pack(">B3h", 3, 1, 2, 3))
    for p in pts:
        b += struct.pack(">dddB", *p, 7)
    seeds["binary_be_list_before.ply"] = ply_header(
        "binary_big_endian",
        [("meta", 1, ["list uchar short v"]),
         ("vertex", 5, ["double x", "double y", "double z", "uchar q"])]) + \
        bytes(b)
    b = b"".join(struct.pack("<iiiH", i, -i, 2 * i, i) for i in range(4))
    seeds["binary_le_int_noprops.ply"] = ply_header(
        "binary_little_endian",
        [("empty", 3, []),
         ("vertex", 4, ["int32 x", "int32 y", "int32 z", "uint16 c"])]) + b
    return seeds


def bin_seeds():
    """First byte: file-name choice, second: --fields choice (see
    fuzz_scan_bin.c); then float32 rows."""
    seeds = {}
    for name_i, fields_i, width, n in [(0, 0, 3, 7), (1, 0, 4, 4),
                                       (2, 0, 5, 3), (3, 0, 6, 3),
                                       (0, 2, 4, 3), (4, 1, 3, 2)]:
        rows = []
        for i in range(n):
            row = [math.sin(i), math.cos(i), 0.5 * i] + \
                [float(i)] * (width - 3)
            if i == 1:
                row[1] = float("nan")
            rows.append(struct.pack("<%df" % width, *row))
        seeds["bin_n%d_f%d_w%d.bin" % (name_i, fields_i, width)] = \
            bytes([name_i, fields_i]) + b"".join(rows)
    return seeds


def main():
    for sub, seeds in [("corpus_scan_pcd", pcd_seeds()),
                       ("corpus_scan_ply", ply_seeds()),
                       ("corpus_scan_bin", bin_seeds())]:
        folder = os.path.join(HERE, sub)
        os.makedirs(folder, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        print("%s: %d seeds" % (sub, len(seeds)))


if __name__ == "__main__":
    main()
