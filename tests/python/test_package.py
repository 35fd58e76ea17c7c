"""The binding itself: library lookup, status -> exception mapping, graceful
degradation for missing symbols, the GIL released during calls, and a
compiler-free pip install (wheel is pure Python; a bundled library is found
next to the package)."""

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import torch

import voxconv
from voxconv import _lib, errors

from conftest import REPO
import ref


def test_library_loaded_and_versions_agree():
    assert os.path.basename(voxconv.library_path).startswith("libvoxconv")
    assert voxconv.library_version() == "%d.%d.%d" % (
        _lib.lib.voxconv_version_number() // 10000,
        _lib.lib.voxconv_version_number() // 100 % 100,
        _lib.lib.voxconv_version_number() % 100)
    assert isinstance(voxconv.has_cuda(), bool)


def test_every_status_maps_to_its_exception():
    for code, cls in errors.STATUS_CLASSES.items():
        name = _lib.status_name(code)
        assert name == cls.status_name, (code, name)
        e = errors.error_for_status(code, name, "context here")
        assert isinstance(e, cls) and isinstance(e, voxconv.VoxconvError)
        assert e.status == code and "context here" in str(e) and name in str(e)
    assert issubclass(voxconv.InvalidArgumentError, ValueError)
    assert issubclass(voxconv.DtypeMismatchError, TypeError)
    assert issubclass(voxconv.AllocFailedError, MemoryError)
    assert issubclass(voxconv.UnsupportedError, NotImplementedError)


def test_library_errors_carry_the_library_message():
    desc = _lib.HandleDesc()
    desc.backend = 7
    ptr = _lib.ctypes.c_void_p()
    with pytest.raises(voxconv.InvalidArgumentError, match=r"backend 7"):
        _lib.call("voxconv_create", _lib.ctypes.byref(ptr), _lib.ctypes.byref(desc))
    coords = torch.tensor([[0, 140000, 0, 0]], dtype=torch.int32)
    with pytest.raises(voxconv.OutOfRangeError, match="140000"):
        voxconv.spatially_sparse_conv(voxconv.SparseTensor(torch.zeros(1, 1), coords),
                                      torch.zeros(27, 1, 1))


def test_missing_symbol_degrades_with_a_clear_message():
    fn = _lib._missing_function("voxconv_future_thing", "/some/libvoxconv.so")
    with pytest.raises(voxconv.MissingSymbolError, match="voxconv_future_thing.*/some/"):
        fn(1, 2)
    assert isinstance(voxconv.missing_features(), list)


def test_lookup_order(monkeypatch):
    monkeypatch.setenv("VOXCONV_LIBRARY", "/x/libvoxconv.so")
    assert _lib.candidate_paths() == ["/x/libvoxconv.so"]
    monkeypatch.delenv("VOXCONV_LIBRARY")
    paths = _lib.candidate_paths()
    pkg = os.path.dirname(os.path.abspath(voxconv.__file__))
    assert paths[0] == os.path.join(pkg, "lib", "libvoxconv.so")
    built = [p for p in paths if os.sep + "build" in p]
    assert all(os.path.isfile(p) for p in built)
    assert paths[-2:] == ["libvoxconv.so", "libvoxconv.so.0"]


def _env(**extra):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def test_caller_thread_backward_switches_torch_and_restores(monkeypatch):
    """caller_thread_backward is torch's set_multithreading_enabled(False)
    where torch has it (a stand-in here records the calls, so the test runs
    with any torch), and a no-op context without it or when disabled."""
    calls = []

    class Switch:
        def __init__(self, mode):
            calls.append(("set", mode))

        def __enter__(self):
            calls.append("enter")

        def __exit__(self, *exc):
            calls.append("exit")

    monkeypatch.setattr(torch.autograd, "set_multithreading_enabled", Switch, raising=False)
    with voxconv.caller_thread_backward():
        assert calls == [("set", False), "enter"]
    assert calls[-1] == "exit"
    calls.clear()
    with voxconv.caller_thread_backward(enabled=False):
        pass
    assert calls == []
    monkeypatch.delattr(torch.autograd, "set_multithreading_enabled")
    with voxconv.caller_thread_backward():  # an old torch: nothing to switch
        pass
    assert calls == []


def test_library_not_found_is_an_import_error():
    p = subprocess.run([sys.executable, "-c", "import voxconv"], capture_output=True, text=True,
                       env=_env(VOXCONV_LIBRARY="/nonexistent/libvoxconv.so",
                                PYTHONPATH=os.path.join(REPO, "python")), timeout=120)
    assert p.returncode != 0
    assert "LibraryNotFoundError" in p.stderr and "/nonexistent/libvoxconv.so" in p.stderr
    assert "VOXCONV_LIBRARY" in p.stderr


def test_gil_is_released_during_library_calls():
    """While one long convolution runs in a worker thread, the main thread
    keeps running Python: the longest pause it sees is far shorter than the
    call (with the GIL held through the call it would be the whole call)."""
    coords = ref.rand_coords(30000, 40)
    for c in (128, 256, 512):  # big enough to take >= 0.1 s on this machine
        inp = voxconv.SparseTensor(torch.randn(len(coords), c), coords)
        w = torch.randn(27, c, c)
        voxconv.spatially_sparse_conv(inp, w)  # map built and cached beforehand
        t = time.perf_counter()
        voxconv.spatially_sparse_conv(inp, w)
        if time.perf_counter() - t >= 0.1:
            break
    started, done = threading.Event(), threading.Event()
    call_s = []

    def work():
        started.set()
        t = time.perf_counter()
        voxconv.spatially_sparse_conv(inp, w)
        call_s.append(time.perf_counter() - t)
        done.set()

    th = threading.Thread(target=work)
    th.start()
    started.wait()
    last, max_gap = time.perf_counter(), 0.0
    while not done.is_set():
        now = time.perf_counter()
        max_gap = max(max_gap, now - last)
        last = now
    th.join()
    assert call_s[0] > 0.05, f"call too short ({call_s[0]:.3f} s) to tell"
    assert max_gap < call_s[0] / 2, (max_gap, call_s[0])


def test_pip_install_without_compiler_and_bundled_library(tmp_path):
    """pip builds a pure-Python wheel (no compiler involved); a library
    placed in voxconv/lib/ ships inside it and is found first."""
    pytest.importorskip("pip")
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "lib"))
    (src / "voxconv" / "lib").mkdir()
    shutil.copy(voxconv.library_path, src / "voxconv" / "lib" / "libvoxconv.so")
    target = tmp_path / "site"
    env = _env(CC="/nonexistent-compiler", CXX="/nonexistent-compiler",
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("VOXCONV_LIBRARY", None)
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                        "--no-build-isolation", "--target", str(target), str(src)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    installed = target / "voxconv"
    assert (installed / "lib" / "libvoxconv.so").is_file()
    assert not list(target.rglob("*.c")) and not list(installed.glob("*.so"))
    env["PYTHONPATH"] = str(target)
    code = ("import voxconv, torch; print(voxconv.library_path); "
            "c = torch.tensor([[0, 0, 0, 0]], dtype=torch.int32); "
            "y = voxconv.spatially_sparse_conv(voxconv.SparseTensor(torch.ones(1, 1), c), "
            "torch.full((27, 1, 1), 2.0)); print(y.feats.item())")
    p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True,
                       text=True, env=env,
                       cwd=str(tmp_path), timeout=120)
    if p.returncode != 0:
        pytest.fail(f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}", False)
    lib_path, value = p.stdout.split()[-2:]
    assert lib_path == str(installed / "lib" / "libvoxconv.so")
    assert float(value) == 2.0
