#!/usr/bin/env python3
"""Regenerates the tile table of docs/tiles.md from ptxas's report.

usage: scripts/tiles_table.py PTXAS_LOG > table.md
  PTXAS_LOG: the output of compiling src/cuda/cuda_mask_gemm.cu with
  `-Xptxas -v` (registers, static shared memory, spills per kernel).

Registers and static shared memory are ptxas's; dynamic shared memory is
computed from the tile shape as the launch code does (fwd_smem_bytes /
wgrad_smem_bytes); blocks/SM and occupancy are computed for an sm_90 SM
(65,536 registers allocated per warp in units of 256, 2,048 threads, 32
blocks, 228 KB shared memory with 1 KB reserved per block)."""
import os
import re
import sys

SM_REGS, SM_THREADS, SM_BLOCKS, SM_SMEM, BLOCK_RESERVED = 65536, 2048, 32, 233472, 1024

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src",
                   "cuda", "cuda_mask_gemm.cu")


def tile_ids():
    """Tile IDs by shape, read from the tile table of cuda_mask_gemm.cu
    (`typedef Tile<BM, BN, BK, WM, WN, STAGES> F<id>;`, G<id> for wgrad)."""
    fwd, wgrad = {}, {}
    pat = re.compile(r"typedef Tile<\s*([\d,\s]+)>\s*([FG])(\d+)\s*;")
    for m in pat.finditer(open(SRC).read()):
        shape = tuple(int(x) for x in m.group(1).split(","))
        (fwd if m.group(2) == "F" else wgrad)[shape] = int(m.group(3))
    return fwd, wgrad


def source():
    """cuda_mask_gemm.cu with its numeric #define knobs (e.g. VC_WS_STAGES)
    substituted, so typedefs written with them parse as numbers."""
    text = open(SRC).read()
    for name, value in re.findall(r"#define\s+(VC_\w+)\s+(\d+)\s*$", text,
                                  re.M):
        text = re.sub(r"(?<!#define )\b%s\b" % name, value, text)
    return text


def wg_tile_ids():
    """mask_gemm_wgmma tile IDs by (warp-specialised, shape): `typedef
    WgTile<BN, STAGES[, BK, SMEM_TOTAL, MIN_BLOCKS]> H<id>[f|h];` or
    `typedef WgWsTile<BN, STAGES[, HALF_SKIP[, HALF_SUMS[, A_STAGES]]]>
    H<id>;` (defaults as in the header)."""
    ids = {}
    pat = re.compile(r"typedef Wg(Ws)?Tile<\s*([\w,\s]+)>\s*H(\d+)[fh]?\s*;")
    for m in pat.finditer(source()):
        a = [x.strip() for x in m.group(2).split(",")]
        if m.group(1):  # WgWsTile<BN, STAGES[, HALF_SKIP[, HALF_SUMS[, A]]]>
            skip = len(a) > 2 and a[2] == "true"
            halves = len(a) > 3 and a[3] == "true"
            a_st = int(a[4]) if len(a) > 4 else int(a[1])
            shape = (int(a[0]), int(a[1]), 64, halves, 1, a_st)
        else:
            skip = False
            a += ["64", "false", "1"][len(a) - 2:]
            shape = (int(a[0]), int(a[1]), int(a[2]), a[3] == "true",
                     int(a[4]), int(a[1]))
        ids[(bool(m.group(1)), skip) + shape] = int(m.group(3))
    return ids


def wg_wgrad_tile_ids():
    """mask_gemm_wgmma wgrad tile IDs by (warp-specialised, shape):
    `typedef WgGradTile<BN, STAGES[, MIN_BLOCKS]> W<id>;` or
    `typedef WgGradWsTile<BN, STAGES[, HALF_SUMS]> W<id>;` (MIN_BLOCKS 1;
    the key's third number is HALF_SUMS for those)."""
    ids = {}
    pat = re.compile(r"typedef WgGrad(Ws)?Tile<\s*([\w,\s]+)>\s*W(\d+)\s*;")
    for m in pat.finditer(source()):
        a = [x.strip() for x in m.group(2).split(",")]
        if m.group(1):
            a = [int(a[0]), int(a[1]), int(len(a) > 2 and a[2] == "true")]
        else:
            a = [int(x) for x in a] + [1][len(a) - 2:]
        ids[(bool(m.group(1)),) + tuple(a)] = int(m.group(3))
    return ids


WS_THREADS = "384: 1 gathering + 2 MMA warpgroups"


def setmaxnreg(struct="WgWsTile"):
    """GATHER_REGS / MMA_REGS of a HALF_SUMS WgWsTile or WgGradWsTile
    (the header's `HALF_SUMS ? n : 0` in that struct)."""
    hdr = open(os.path.join(os.path.dirname(SRC),
                            "cuda_mask_gemm_sm90.cuh")).read()
    hdr = hdr[hdr.index("struct %s :" % struct):]
    return tuple(int(re.search(r"%s = HALF_SUMS \? (\d+)" % n, hdr).group(1))
                 for n in ("GATHER_REGS", "MMA_REGS"))


def occupancy(regs, threads, smem):
    warps = threads // 32
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = (SM_REGS // per_warp) // warps if per_warp else SM_BLOCKS
    by_smem = SM_SMEM // (smem + BLOCK_RESERVED)
    blocks = min(by_regs, by_smem, SM_THREADS // threads, SM_BLOCKS)
    return blocks, blocks * threads / SM_THREADS


def main(path):
    fwd_ids, wgrad_ids = tile_ids()
    wg_ids = wg_tile_ids()
    wgw_ids = wg_wgrad_tile_ids()
    wgw_re = re.compile(r"WgGradTileILi(\d+)ELi(\d+)ELi(\d+)EE")
    wgws_re = re.compile(r"WgGradWsTileILi(\d+)ELi(\d+)ELb(\d)EE")
    wgw_rows = []
    wg_re = re.compile(r"WgTileILi(\d+)ELi(\d+)ELi(\d+)ELb(\d)ELi(\d+)EEELb(\d)E")
    wgs_re = re.compile(
        r"WgWsTileILi(\d+)ELi(\d+)ELb(\d)ELb(\d)ELi(\d+)EEELb(\d)E")
    rows, wg_rows, ic_rows, fn = [], [], [], None
    tile_re = re.compile(r"TileILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)EEE")
    for line in open(path):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            fn, info = m.group(1), {}
            continue
        if fn is None:
            continue
        m = re.search(r"Used (\d+) registers", line)
        if not m:
            continue
        regs = int(m.group(1))
        sm = re.search(r"(\d+) bytes smem", line)
        static_smem = int(sm.group(1)) if sm else 0
        if "im2col_fwd_kernel" in fn:
            # Im2colTile (cuda_mask_gemm.cuh): A 128 x 232 halves, B 224 x 72
            smem = static_smem + (128 * 232 + 224 * 72) * 2
            blocks, occ = occupancy(regs, 256, smem)
            ic_rows.append(("f16" if "6__half" in fn else "bf16", regs, smem,
                            blocks, f"{occ:.0%}"))
            fn = None
            continue
        w = wgw_re.search(fn) if "wg_wgrad_kernel" in fn else None
        ws = wgws_re.search(fn) if "wg_wgrad_kernel" in fn else None
        if w or ws:
            # WgGradTile (cuda_mask_gemm_sm90.cuh): BM = 128, BK = 64 pairs;
            # WgGradWsTile: the same with a third, gathering warpgroup
            halves = 0
            if ws:
                (bn, st, halves), threads = map(int, ws.groups()), 384
                minb = halves  # the id key's third number (see above)
            else:
                (bn, st, minb), threads = map(int, w.groups()), 256
            # HALF_SUMS: half the fp32 sums in shared memory (WgAccSplit)
            smem = static_smem + st * (128 + bn) * 64 * 2 + \
                (128 * bn * 2 if halves else 0) + 1024
            blocks, occ = occupancy(regs, threads, smem)
            wgw_rows.append((wgw_ids.get((bool(ws), bn, st, minb)),
                             "f16" if "6__half" in fn else "bf16",
                             f"128x{bn}x64", f"64x{bn}",
                             (WS_THREADS + (
                                 "; setmaxnreg: gatherers %d, MMA %d "
                                 "registers; half the sums in smem" %
                                 setmaxnreg("WgGradWsTile") if halves else ""))
                             if ws else "256", st, bn // 2, regs,
                             smem, blocks, f"{occ:.0%}"))
            fn = None
            continue
        fwd = "wg_fwd_kernel" in fn or "wg_fwd_ws_kernel" in fn
        w = wg_re.search(fn) if fwd else None
        ws = wgs_re.search(fn) if fwd else None
        if w or ws:
            skip = 0
            halves = 0
            if ws:  # WgWsTile: WgTile<BN, STAGES> plus a gathering warpgroup
                (bn, st, skip, halves, a_st, acc16), bk, stot, minb = \
                    map(int, ws.groups()), 64, 0, 1
            else:
                bn, st, bk, stot, minb, acc16 = map(int, w.groups())
                a_st = st
            threads = 384 if ws else 256
            # HALF_SUMS: half the fp32 sums in shared memory (WgAccSplit)
            smem = static_smem + a_st * 128 * bk * 2 + st * bn * bk * 2 + \
                (128 * bn * 4 if stot else 0) + \
                (128 * bn * 2 if halves else 0) + 1024
            blocks, occ = occupancy(regs, threads, smem)
            wg_rows.append((wg_ids.get((bool(ws), bool(skip), bn, st, bk,
                                        bool(stot) or bool(halves), minb,
                                        a_st)),
                            "f16" if "6__half" in fn else "bf16",
                            "f16" if acc16 else "f32", f"128x{bn}x{bk}",
                            f"64x{bn}",
                            (WS_THREADS + (", per-half offset skip"
                                           if skip else "") +
                             ("; setmaxnreg: gatherers %d, MMA %d registers"
                              % setmaxnreg() if halves else ""))
                            if ws else "256",
                            st if a_st == st else f"{a_st} A + {st} B",
                            "smem" if stot else ("-" if acc16 else (
                                "half registers, half smem" if halves
                                else "registers")),
                            bn // 4 if acc16 else bn // 2, regs, smem, blocks,
                            f"{occ:.0%}"))
            fn = None
            continue
        t = tile_re.search(fn)
        if not t or ("fwd_kernel" not in fn and "wgrad_kernel" not in fn):
            fn = None
            continue
        bm, bn, bk, wm, wn, st = map(int, t.groups())
        dtype = "f16" if "6__half" in fn else "bf16"
        threads = (bm // wm) * (bn // wn) * 32
        acc_per_thread = (wm // 16) * (wn // 8) * 4
        if "fwd_kernel" in fn:
            flags = re.search(r"EEELb(\d)ELb(\d)E", fn)
            trans, acc16 = flags.group(1) == "1", flags.group(2) == "1"
            pas = "dgrad" if trans else "fwd"
            tid = fwd_ids.get((bm, bn, bk, wm, wn, st))
            dyn = st * 2 * (bm * (bk + 8) + (bn * (bk + 8) if trans else bk * (bn + 8)))
            acc_regs = acc_per_thread // 2 if acc16 else acc_per_thread
        else:
            pas, acc16 = "wgrad", False
            tid = wgrad_ids.get((bm, bn, bk, wm, wn, st))
            dyn = st * 2 * (bk * (bm + 8) + bk * (bn + 8))
            acc_regs = acc_per_thread
        smem = static_smem + dyn
        blocks, occ = occupancy(regs, threads, smem)
        rows.append((pas, tid, dtype, "f16" if acc16 else "f32", f"{bm}x{bn}x{bk}",
                     f"{wm}x{wn}", st, threads, acc_regs, regs, smem, blocks,
                     f"{occ:.0%}"))
        fn = None
    order = {"fwd": 0, "dgrad": 1, "wgrad": 2}
    rows.sort(key=lambda r: (order[r[0]], r[1], r[2], r[3]))
    print_table(None, ["pass", "tile ID", "dtype", "acc", "block M×N×K",
                       "warp tile", "stages", "threads", "acc regs/thread",
                       "registers", "smem (B)", "blocks/SM", "occupancy"], rows)
    wg_rows.sort(key=lambda r: (r[0], r[1], r[2]))
    print_table("mask_gemm_wgmma (forward and dgrad share each kernel; two "
                "MMA warpgroups of 64 rows):",
                ["tile ID", "dtype", "acc", "block M×N×K", "warpgroup tile",
                 "threads", "stages", "fp32 sums", "acc regs/thread", "registers",
                 "smem (B)", "blocks/SM", "occupancy"], wg_rows)
    wgw_rows.sort(key=lambda r: (r[0], r[1]))
    print_table("mask_gemm_wgmma wgrad (M = cin, N = cout, K = 64 pairs per "
                "stage; both operands MN-major; fp32 accumulators promoted into "
                "fp32 sums in registers every 256 pairs):",
                ["tile ID", "dtype", "block M×N×K", "warpgroup tile",
                 "threads", "stages", "acc regs/thread", "registers",
                 "smem (B)", "blocks/SM", "occupancy"], wgw_rows)
    print_table("mask_gemm_im2col (forward, cin <= 8):",
                ["tile", "dtype", "acc", "block M×N×K", "warp tile", "stages",
                 "registers", "smem (B)", "blocks/SM", "occupancy"],
                [("im2col", dt, "f32", "128x64x224", "16x64",
                  "1 (gather, then MMA)", regs, smem, blocks, occ)
                 for dt, regs, smem, blocks, occ in sorted(ic_rows)])


def print_table(title, header, rows):
    """A markdown table (after a title paragraph, if any); nothing without
    rows unless it is the untitled main table."""
    if title is not None:
        if not rows:
            return
        print("\n" + title + "\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
