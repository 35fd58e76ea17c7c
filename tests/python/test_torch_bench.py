"""Smoke tests of the two PyTorch benchmark drivers on the CPU, with
subsampled inputs and minimal repeat counts: bench/torch_bench.py (workload
F: the PyTorch path next to the `voxconv bench` tool) and
bench/train_step_bench.py (workload G: the training step per precision
mode). They check that the scripts run and write the fields the GPU runs
are read from; the timings themselves mean nothing here."""

import json
import os
import subprocess
import sys

import pytest

import voxconv

from conftest import REPO

DATA = os.environ.get("VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
BENCH_DATA = os.path.join(DATA, "bench", "spconv_benchmark_pc.xyz.f32.bin")
SCAN = os.path.join(DATA, "scans", "semantickitti_00_000000.bin")
TOOL = os.path.join(os.path.dirname(os.path.realpath(voxconv.library_path)), "voxconv")


def run(script, args, timeout=300):
    env = dict(os.environ, VOXCONV_LIBRARY=voxconv.library_path, VOXCONV_DATA_DIR=DATA,
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", script)] + args, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return p


@pytest.mark.skipif(not os.path.exists(BENCH_DATA), reason=f"{BENCH_DATA} not found")
def test_torch_bench_small_cpu(tmp_path):
    have_tool = os.access(TOOL, os.X_OK)
    out = tmp_path / "tb.json"
    args = ["--device", "cpu", "--small", "--repeat", "1", "--warmup", "1", "--host-calls", "5",
            "--int8", "--json", str(out)] + (["--tool", TOOL] if have_tool else ["--no-tool"])
    p = run("torch_bench.py", args)
    rec = json.loads(out.read_text())
    for key in ("date", "commit", "device", "device_name", "torch", "voxconv", "library_path",
                "dtype", "protocol", "workloads", "rows", "host_issue_us"):
        assert key in rec, key
    assert rec["device"] == "cpu" and rec["small"] is True and rec["dtype"] == "f32"
    assert rec["protocol"]["clock"] == "perf_counter" and rec["protocol"]["repeat"] == 1
    names = [r["name"] for r in rec["rows"]]
    assert names == ["A forward", "A forward+backward", "B forward", "B forward+backward",
                     "C=8 forward", "C=8 forward+backward", "C=8 int8 forward",
                     "C=8 int8 fwd, int8 in"]
    c8 = rec["workloads"]["C"]["channels"]["8"]
    assert c8["torch_int8_forward"]["ms"] > 0 and c8["torch_int8_vs_float"] > 0
    assert c8["torch_int8_forward_int8_in"]["ms"] > 0
    assert (c8["c_int8_forward_ms"] is not None) == have_tool
    for r in rec["rows"]:
        assert r["torch_ms"] > 0
        assert (r["c_ms"] is not None and r["c_ms"] > 0 and r["ratio"] > 0) == have_tool
    a, b = rec["workloads"]["A"], rec["workloads"]["B"]
    assert len(a["levels"]) == 7 and a["levels"][0] == a["voxels"] > 1000
    assert len(b["levels"]) == 7 and a["same_input"] and b["same_input"]
    assert rec["workloads"]["C"]["same_input"] is False  # --small: the tool's C is full size
    assert len(a["torch"]["forward"]["runs_ms"]) == 1
    h = rec["host_issue_us"]
    assert h["calls"] == 5 and h["forward_no_grad_us"] > 0 and h["forward_grad_us"] > 0
    if have_tool:
        # the two paths timed the same voxels, level by level
        tj = a["c_path"]["tool_json"]
        assert tj["input"]["voxels"] == a["voxels"]
        # on the CPU the tool times no back-to-back series (nothing runs
        # asynchronously there): the row compares against the two series' sum
        assert "fwd_bwd_ms" not in tj
        assert a["c_path"]["fwd_bwd_ms"] == pytest.approx(tj["forward_ms"] + tj["backward_ms"])
        assert a["c_path"]["fwd_bwd_sum_ms"] == a["c_path"]["fwd_bwd_ms"]
        assert rec["tool"]["version"] == voxconv.library_version()
        # C's forward+backward against the tool's back-to-back series, the
        # sum of its three separate series kept beside it
        ctj = rec["workloads"]["C"]["c_path"]["runs"]["8"]["tool_json"]
        ops = {l["op"]: l["ms"] for l in ctj["layers"] if l["layer"] == "C=8"}
        assert c8["c_fwd_bwd_ms"] == pytest.approx(ops["conv_fwd_bwd"])
        assert c8["c_fwd_bwd_sum_ms"] == pytest.approx(
            ops["conv_fwd"] + ops["conv_dgrad"] + ops["conv_wgrad"])
    assert "PyTorch/C" in p.stdout and "host time per layer forward call" in p.stdout


def test_torch_bench_rejects_bad_arguments():
    env = dict(os.environ, VOXCONV_LIBRARY=voxconv.library_path,
               PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "torch_bench.py"),
                        "--device", "cpu", "--workloads", "A,X"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "--workloads: want a subset of A,B,C" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "torch_bench.py"),
                        "--device", "cpu", "--pass-preheat-ms", "70000"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--pass-preheat-ms: want 0..60000" in p.stderr, p.stderr


def test_torch_bench_preheat_runs_before_the_timed_runs():
    """--pass-preheat-ms: after the warm-ups, the row runs untimed (each
    run prepared by `before`, as a timed run is) until the time has passed,
    then the timed runs follow; none without it."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import time
    import torch_bench as tb

    class FakeCudaTimer:  # what measure needs of tb.Timer, no GPU
        cuda = True

        def sync(self):
            pass

        def run(self, fn):
            return fn(), 0.0

    log = []

    def fn():
        log.append("run")
        time.sleep(0.004)
        return 1.0

    args = tb.parse_args(["--device", "cpu", "--repeat", "4", "--warmup", "2",
                          "--settle-ms", "0"])
    for ms in (0, 40):
        log.clear()
        r = tb.measure(FakeCudaTimer(), fn, args, "fake", before=lambda: log.append("before"),
                       preheat_ms=ms)
        runs = log.count("run")
        # 2 warm-ups, then preheat runs (~ms / 4 ms each), then 4 timed ones
        assert runs == 2 + r["preheat_runs"] + 4, log
        assert log.count("before") == runs, log
        if ms:
            assert 3 <= r["preheat_runs"] <= ms // 4 + 1, r["preheat_runs"]
        else:
            assert r["preheat_runs"] == 0


def test_torch_bench_settles_only_after_tuning(tmp_path):
    """torch_bench settles only when its warm-up tuned, which it tells by
    the tuning cache file's stamp: new results change it, a call answered
    from the cache does not (a fresh cache folder, a convolution tuned over
    every CPU algorithm, then the same call again)."""
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {os.path.join(REPO, 'bench')!r})\n"
        "import torch_bench as tb, voxconv\n"
        "torch.manual_seed(0)\n"
        "c = torch.unique(torch.randint(0, 12, (400, 4), dtype=torch.int32), dim=0)\n"
        "c[:, 0] = 0\n"
        "c = torch.unique(c, dim=0)\n"
        "x = voxconv.SparseTensor(torch.randn(len(c), 8), c)\n"
        "conv = voxconv.nn.SparseConv3d(8, 8, 3, fwd_algo='all')\n"
        "s0 = tb.tuning_cache_stamp()\n"
        "with torch.no_grad():\n"
        "    conv(x)\n"
        "s1 = tb.tuning_cache_stamp()\n"
        "with torch.no_grad():\n"
        "    conv(x)\n"
        "s2 = tb.tuning_cache_stamp()\n"
        "print('STAMPS', s0 is None, s1 is not None and s1 != s0, s2 == s1)\n")
    env = dict(os.environ, VOXCONV_LIBRARY=voxconv.library_path,
               VOXCONV_BENCHMARK_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "STAMPS True True True" in p.stdout, p.stdout + p.stderr[-2000:]


@pytest.mark.skipif(not os.path.exists(SCAN), reason=f"{SCAN} not found")
def test_train_step_bench_small_cpu(tmp_path):
    out = tmp_path / "g.json"
    p = run("train_step_bench.py", ["--device", "cpu", "--small", "--steps", "4", "--last", "2",
                                    "--modes", "fp32,fp32-s1,amp-bf16,half", "--log-every", "2",
                                    "--json", str(out)])
    rec = json.loads(out.read_text())
    assert rec["steps"] == 4 and rec["optimizer"] == "sgd" and rec["cache"] == "cold"
    ran = set(rec["modes"])
    assert {"fp32", "fp32-s1"} <= ran
    # what this torch cannot do on the CPU is skipped with a reason, not failed
    assert ran | set(rec["skipped"]) == {"fp32", "fp32-s1", "amp-bf16", "half"}
    rows = {r["mode"]: r for r in rec["rows"]}
    assert rows["fp32"]["speedup"] == pytest.approx(1.0)
    assert rec["noise"]["fp32_seed_delta"] is not None
    for name, r in rows.items():
        assert r["first_step_ms"] > 0 and r["median_step_ms"] > 0 and r["last_std"] >= 0
        assert len(rec["modes"][name]["record"]["loss"]) == 4
        assert len(rec["modes"][name]["record"]["step_ms"]) == 4
        if name not in ("fp32", "fp32-s1"):
            assert r["within_noise"] in (True, False)
    assert rec["modes"]["fp32-s1"]["record"]["seed"] == 1
    assert "speed-up" in p.stdout and "noise:" in p.stdout
