#!/usr/bin/env python3
"""Checks a voxconv wheel: platform tag (not py3-none-any), Root-Is-Purelib
false, voxconv/lib/libvoxconv.so inside, and the CUDA targets its device code
really holds (read from the library's .nv_fatbin section, not from what the
build claims) against --expect (space-separated nvcc names, "" = CPU-only).

  .ci/check_wheel.py dist/voxconv-*.whl --expect "sm_90a"
  .ci/check_wheel.py LIBRARY.so          (prints a library's targets)
"""

import argparse
import io
import re
import struct
import sys
import zipfile

LIB = "voxconv/lib/libvoxconv.so"
FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
ARCH_SPECIFIC = 0x100000  # entry flag of an sm_NNa / compute_NNa image


def elf_section(data, name):
    """The bytes of section `name` of a little-endian ELF64 file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i):  # name, type, flags, addr, offset, size
        return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)

    strtab = header(shstrndx)
    names = data[strtab[4]:strtab[4] + strtab[5]]
    for i in range(shnum):
        h = header(i)
        if names[h[0]:names.index(b"\0", h[0])].decode() == name:
            return data[h[4]:h[4] + h[5]]
    return None


def fatbin_targets(lib_bytes):
    """Sorted nvcc names ("sm_80", "compute_89", ...) of the device images in
    the library's fat binaries; [] for a library without device code. Every
    fat binary (one per .cu file) must hold the same targets."""
    sec = elf_section(lib_bytes, ".nv_fatbin")
    per_file = []
    off = 0
    while sec is not None and off + 16 <= len(sec):
        magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", sec, off)
        if magic != FATBIN_MAGIC:  # fat binaries are 8-byte aligned
            off += 8
            continue
        entry, end = off + hsize, off + hsize + fsize
        found = set()
        per_file.append(found)
        while entry < end:
            kind, _v, ehsize, size = struct.unpack_from("<HHIQ", sec, entry)
            arch, = struct.unpack_from("<I", sec, entry + 28)
            flags, = struct.unpack_from("<Q", sec, entry + 40)
            if kind in (KIND_PTX, KIND_ELF):
                found.add(("sm_" if kind == KIND_ELF else "compute_") + str(arch)
                          + ("a" if flags & ARCH_SPECIFIC else ""))
            entry += ehsize + size
        off = end
    if any(f != per_file[0] for f in per_file):
        raise AssertionError("the .cu files' fat binaries hold different targets: "
                             + "; ".join(" ".join(sorted(f)) for f in per_file))
    return sorted(per_file[0] if per_file else (),
                  key=lambda t: (t.startswith("compute"), t))


def check_wheel(path, expect):
    name = path.rsplit("/", 1)[-1]
    m = re.fullmatch(r"voxconv-[^-]+-(\w+)-(\w+)-(\w+)\.whl", name)
    assert m, f"{name}: not a voxconv wheel name"
    py, abi, plat = m.groups()
    assert plat != "any", f"{name}: tagged for any platform, but it holds a library"
    with zipfile.ZipFile(path) as z:
        wheel_meta = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        meta = z.read(wheel_meta).decode()
        assert "Root-Is-Purelib: false" in meta, meta
        assert f"Tag: {py}-{abi}-{plat}" in meta, meta
        assert LIB in z.namelist(), f"{name}: no {LIB} inside"
        lib = z.read(LIB)
    targets = fatbin_targets(lib)
    print(f"{name}: tag {py}-{abi}-{plat}, {LIB} {len(lib) / 1e6:.1f} MB, "
          f"CUDA targets: {' '.join(targets) or 'none (CPU-only)'}")
    if expect is not None:
        want = sorted(expect.split(), key=lambda t: (t.startswith("compute"), t))
        assert targets == want, f"device code for {targets}, expected {want}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="a wheel, or a libvoxconv.so")
    ap.add_argument("--expect", help='CUDA targets the library must hold, e.g. "sm_90a"')
    a = ap.parse_args()
    if a.path.endswith(".whl"):
        check_wheel(a.path, a.expect)
    else:
        with open(a.path, "rb") as f:
            print(" ".join(fatbin_targets(f.read())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
