"""examples/train_segmentation.py trains: a few CPU steps on the real
SemanticKITTI scan, the loss falls and per-class IoU is printed."""

import json
import math
import os
import re
import subprocess
import sys
import time

import pytest

import voxconv

from conftest import REPO

SCRIPT = os.path.join(REPO, "examples", "train_segmentation.py")
DATA = os.environ.get("VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
SCAN = os.path.join(DATA, "scans", "semantickitti_00_000000.bin")


@pytest.mark.skipif(not os.path.exists(SCAN), reason=f"{SCAN} not found (shared data)")
def test_example_trains_and_reports_iou(tmp_path):
    out_json = tmp_path / "run.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["VOXCONV_LIBRARY"] = voxconv.library_path
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, SCRIPT, "--small", "--steps", "12", "--device", "cpu",
                        "--json", str(out_json)],
                       env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - t0
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    losses = [float(m) for m in re.findall(r"^step \d+ loss ([0-9.eE+-]+)$", p.stdout, re.M)]
    assert len(losses) == 12
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.8 * losses[0], losses
    assert re.search(r"^road\s+\d+\.\d$", p.stdout, re.M), p.stdout
    assert re.search(r"^mIoU \d+\.\d over \d+ classes", p.stdout, re.M)
    rec = json.loads(out_json.read_text())
    assert rec["loss"] == pytest.approx(losses, rel=1e-3) and "road" in rec["iou"]
    assert rec["voxels"] > 10000
    assert elapsed < 60, f"--small took {elapsed:.1f} s on the CPU"
