#!/usr/bin/env python3
"""Compares the machine code of every CUDA kernel between two revisions.

Device time is scarce; a refactor of kernel source that should not change
behaviour can be checked here, without a GPU, by compiling the .cu files of
both revisions to cubins for the same target and comparing each kernel's
.text section byte for byte. A kernel whose machine code is identical to
that of a revision tested on the device needs no new device run for
correctness (timing included); any difference is listed and does.

  scripts/cubin_diff.py OLD_REV [--new REV] [--arch 90a] [-j N]
                        [--rename REGEX=REPLACEMENT ...] [FILE.cu ...]

OLD_REV and --new are git revisions (default for --new: the working tree);
files default to every src/cuda/*.cu. The nvcc flags mirror the library's
(CMakeLists.txt) minus -lineinfo, which only adds sections. Exit status 0
when every kernel is identical, 1 when any differs or exists in only one.
--rename rewrites the new revision's kernel names (Python re.sub) before
they are matched, for a change that adds a template argument and so renames
kernels whose code should not change.
Needs nvcc and readelf (binutils); no GPU.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
SECTION = re.compile(
    r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)")
# Kernels in anonymous namespaces carry a hash of the file's path in their
# mangled name; two checkouts differ there and nowhere else.
ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_")


def checkout(rev, tmp):
    """A directory holding rev's tree (None: the working tree)."""
    if rev is None:
        return ROOT
    path = os.path.join(tmp, "rev-" + re.sub(r"[^A-Za-z0-9_.-]", "_", rev))
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach",
                    path, rev], check=True)
    return path


def compile_cubin(tree, rel, arch, out):
    cmd = [NVCC, "-cubin", "-O3", "-DNDEBUG", "-D_GNU_SOURCE",
           "-DVOXCONV_HAVE_CUDA=1", "--expt-relaxed-constexpr",
           "-I" + os.path.join(tree, "include"),
           "-gencode=arch=compute_%s,code=sm_%s" % (arch, arch),
           os.path.join(tree, rel), "-o", out]
    if arch == "90a":
        cmd.insert(1, "-DVC_HAVE_SM90A=1")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("nvcc failed on %s in %s:\n%s" % (rel, tree,
                                                              r.stderr[-2000:]))
    return out


def kernels(cubin):
    """{normalized kernel name: machine code bytes}"""
    table = subprocess.run(["readelf", "-S", "-W", cubin], check=True,
                           capture_output=True, text=True).stdout
    data = open(cubin, "rb").read()
    out = {}
    for line in table.splitlines():
        m = SECTION.match(line)
        if m and m.group(1).startswith(".text."):
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            out[ANON.sub("_GLOBAL__N__*_", m.group(1)[6:])] = data[off:off +
                                                                   size]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("--new", default=None)
    ap.add_argument("--arch", default="90a")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rename", action="append", default=[],
                    metavar="REGEX=REPLACEMENT")
    ap.add_argument("files", nargs="*")
    args = ap.parse_intermixed_args()
    renames = [tuple(r.split("=", 1)) for r in args.rename]
    files = args.files or sorted(
        os.path.join("src/cuda", f)
        for f in os.listdir(os.path.join(ROOT, "src/cuda"))
        if f.endswith(".cu"))
    tmp = tempfile.mkdtemp(prefix="voxconv-cubin-diff-")
    trees = []
    try:
        old_tree = checkout(args.old, tmp)
        trees.append(old_tree)
        new_tree = checkout(args.new, tmp)
        if new_tree != ROOT:
            trees.append(new_tree)
        jobs = {}
        with concurrent.futures.ThreadPoolExecutor(args.j) as ex:
            for rel in files:
                for side, tree in (("old", old_tree), ("new", new_tree)):
                    if not os.path.exists(os.path.join(tree, rel)):
                        continue
                    out = os.path.join(tmp, "%s-%s.cubin" %
                                       (side, rel.replace("/", "_")))
                    print("compiling %s (%s)" % (rel, side), file=sys.stderr)
                    jobs[(rel, side)] = ex.submit(compile_cubin, tree, rel,
                                                  args.arch, out)
            built = {k: f.result() for k, f in jobs.items()}
        bad = 0
        for rel in files:
            a = kernels(built[(rel, "old")]) if (rel, "old") in built else {}
            b = kernels(built[(rel, "new")]) if (rel, "new") in built else {}
            for pat, repl in renames:
                b = {re.sub(pat, repl, k): v for k, v in b.items()}
            same = sum(1 for k in a if k in b and a[k] == b[k])
            differ = sorted(k for k in a if k in b and a[k] != b[k])
            only = sorted(set(a) ^ set(b))
            print("%s: %d kernels, %d identical, %d differ, %d in one "
                  "revision only" % (rel, len(set(a) | set(b)), same,
                                     len(differ), len(only)))
            for k in differ:
                print("  differs: %s (%d -> %d bytes)" % (k, len(a[k]),
                                                          len(b[k])))
            for k in only:
                print("  only in %s: %s" % ("old" if k in a else "new", k))
            bad += len(differ) + len(only)
        return 1 if bad else 0
    finally:
        for t in trees:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force",
                            t], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
