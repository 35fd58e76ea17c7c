#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_tool_options (fuzz/corpus_tool_options/):
command lines of `voxconv bench`, `tune` and `cache inspect|analyze` as the
target reads them, the first byte choosing the command (0 bench, 1 tune,
2 cache inspect, 3 cache analyze) and the arguments separated by NUL
bytes, and 0x01 N C standing for C repeated 4 N times. Valid lines, and a
few that each rule refuses, so that libFuzzer starts next to every branch.

    python3 fuzz/make_option_seeds.py      # rewrites fuzz/corpus_tool_options/
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

SEEDS = {
    0: [  # bench
        [],
        ["--help"],
        ["--backend", "cpu", "--size", "tiny", "--repeat", "1", "--warmup", "0",
         "--json"],
        ["--backend", "cuda", "--device", "1", "--dtype", "bf16", "--algo",
         "[mask_gemm,implicit_gemm]", "--fp16-accum", "on", "--deterministic"],
        ["--scan", "kitti_000000.bin", "--fields", "4", "--voxel", "0.05",
         "--threads", "8", "--seed", "7", "--quiet"],
        ["--workload", "C", "--channels", "32,64,128,256", "--peak-tflops",
         "771", "--peak-tbps", "4.27"],
        ["--workload", "a", "--maps", "serial", "--settle-ms", "0"],
        ["--maps", "overlap", "--map-priority", "normal", "--algo", "auto"],
        ["--workload", "D", "--maps", "serial"],
        ["--scan", "x.ply", "--workload", "B"],
        ["--voxel", "1e-46"],
        ["--channels", "1,,2,", "--workload", "C"],
        ["--algo", "[auto]"],
        # 0x01 N C: C repeated 4 N times (see fuzz_tool_options.c)
        ["--workload", "C", "--channels", "32,\x01\x04064"],
        ["--algo", "[mask_gemm,\x01\x02 implicit_gemm]"],
        ["--repeat"],
        ["--bogus"],
    ],
    1: [  # tune
        [],
        ["--help"],
        ["--mode", "all", "--workload", "A", "--dtype", "f16"],
        ["--algo", "[explicit_gemm_det,cpu_gather_gemm]", "--backend", "cpu",
         "--size", "tiny"],
        ["--mode", "nosuch"],
        ["--repeat", "3"],
        ["--scan", "bunny.ply", "--voxel", "0.002", "--mode"],
    ],
    2: [  # cache inspect
        [],
        ["--help"],
        ["namespace=conv_fwd", "--best-only", "mask_gemm", "cin=64"],
        ["--namespace", "conv_fwd/mask_gemm", "--top-k", "3", "--file",
         "/tmp/cache.txt", "-x"],
        ["--top-k", "0"],
        ["--file"],
        ["--nosuch"],
    ],
    3: [  # cache analyze
        [],
        ["--help"],
        ["--namespace", "conv_fwd", "--markdown", "--output", "report.md",
         "--file", "/tmp/cache.txt"],
        ["namespace=conv_dgrad"],
        ["--output"],
        ["junk"],
    ],
}


def main():
    folder = os.path.join(HERE, "corpus_tool_options")
    os.makedirs(folder, exist_ok=True)
    names = {0: "bench", 1: "tune", 2: "inspect", 3: "analyze"}
    n = 0
    for cmd, lines in SEEDS.items():
        for i, args in enumerate(lines):
            data = bytes([cmd]) + b"\0".join(a.encode("latin-1") for a in args)
            with open(os.path.join(folder, "%s_%02d" % (names[cmd], i)), "wb") as f:
                f.write(data)
            n += 1
    print("corpus_tool_options: %d seeds" % n)


if __name__ == "__main__":
    main()
