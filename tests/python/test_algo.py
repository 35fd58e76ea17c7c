"""Algorithm arguments: every accepted form (None, enum members, strings in
any case, the "[a, b]" string form, lists/tuples mixing members and
strings) for every pass, the environment default behind None, and the
errors for malformed ones."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import voxconv
from voxconv import (SPARSE_CONV_BWD_ALGO_MODE as BWD, SPARSE_CONV_FWD_ALGO_MODE as FWD,
                     SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE as DBWD,
                     SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE as DFWD)
from voxconv.algo import algo_string

from conftest import REPO, requires_call_info
import ref


def _cpu_algo(pass_name):
    """A registered algorithm that runs `pass_name` on the CPU."""
    for a in voxconv.registered_algorithms():
        if a["backend"] == "cpu" and pass_name in a["passes"]:
            return a["name"]
    pytest.skip(f"no CPU algorithm registered for {pass_name}")


def test_enums_have_auto_all_and_every_registered_name():
    for e in (FWD, BWD, DFWD, DBWD):
        assert e.AUTO == "auto" and e.ALL == "all" and str(e.AUTO) == "auto"
    # documented names exist whatever the build
    assert FWD.IMPLICIT_GEMM.value == "implicit_gemm" and BWD.MASK_GEMM == "mask_gemm"
    assert DFWD.EXPLICIT == "explicit" and DBWD.IMPLICIT == "implicit"
    for a in voxconv.registered_algorithms():
        member = a["name"].upper()
        for e, passes in ((FWD, {"conv_fwd"}), (BWD, {"conv_dgrad", "conv_wgrad"}),
                          (DFWD, {"depthwise_fwd"}),
                          (DBWD, {"depthwise_dgrad", "depthwise_wgrad"})):
            if passes & set(a["passes"]):
                assert e[member].value == a["name"].lower()


def test_algo_string_normalisation():
    cpu = _cpu_algo("conv_fwd")
    up = cpu.upper()
    assert algo_string(None, FWD) is None
    assert algo_string(FWD.AUTO, FWD) == "auto"
    assert algo_string(" ALL ", FWD) == "all"
    assert algo_string(FWD[up], FWD) == cpu
    assert algo_string(up, FWD) == cpu
    assert algo_string(f"[ {up} ]", FWD) == cpu
    assert algo_string([FWD[up]], FWD) == cpu
    mixed = [FWD.IMPLICIT_GEMM, "Mask_Gemm", BWD.EXPLICIT_GEMM]  # members of a sibling enum too
    assert algo_string(mixed, FWD) == "[implicit_gemm,mask_gemm,explicit_gemm]"
    assert algo_string(tuple(mixed), FWD) == "[implicit_gemm,mask_gemm,explicit_gemm]"
    assert algo_string("[implicit_gemm, MASK_GEMM]", FWD) == "[implicit_gemm,mask_gemm]"
    assert algo_string(["auto"], FWD) == "auto"
    assert algo_string([DFWD.IMPLICIT], DBWD) == "implicit"


@pytest.mark.parametrize("value, exc, match", [
    ("winograd", voxconv.InvalidArgumentError, "valid: auto, all"),
    (["implicit_gemm", "nope"], voxconv.InvalidArgumentError, "nope"),
    ([], voxconv.InvalidArgumentError, "empty"),
    ("[]", voxconv.InvalidArgumentError, "empty"),
    (["auto", "implicit_gemm"], voxconv.InvalidArgumentError, "cannot be combined"),
    ("[implicit_gemm, mask_gemm", voxconv.InvalidArgumentError, "malformed"),
    ("implicit_gemm, mask_gemm", voxconv.InvalidArgumentError, "malformed"),
    ("[implicit_gemm,,mask_gemm]", voxconv.InvalidArgumentError, "empty name"),
    (DFWD.EXPLICIT, voxconv.InvalidArgumentError, "unknown algorithm"),  # depthwise name
    (3, TypeError, "expected None"),
    ([FWD.AUTO, 7], TypeError, "expected None"),
])
def test_bad_algo_arguments(value, exc, match):
    with pytest.raises(exc, match=match):
        algo_string(value, FWD, "fwd_algo")


def test_bad_algo_arguments_fail_at_module_construction():
    with pytest.raises(voxconv.InvalidArgumentError, match="bwd_algo"):
        voxconv.nn.SparseConv3d(2, 2, bwd_algo="nope")
    with pytest.raises(voxconv.InvalidArgumentError, match="fwd_algo"):
        voxconv.nn.SparseDepthwiseConv3d(2, fwd_algo="implicit_gemm")


def _problem(c=4):
    coords = ref.rand_coords(60, 6)
    x = torch.randn(len(coords), c, dtype=torch.float64, requires_grad=True)
    return voxconv.SparseTensor(x, coords), x


def _forms(pass_name, enum_cls):
    cpu = _cpu_algo(pass_name)
    up = cpu.upper()
    return [None, enum_cls.AUTO, "auto", " Auto ", enum_cls.ALL, "ALL", enum_cls[up], cpu, up,
            f"[{cpu}]", f"[ {up} ]", [enum_cls[up]], [cpu], (up,), [enum_cls.AUTO]]


def test_every_conv_algorithm_form_runs_and_agrees():
    inp, x = _problem()
    w = torch.randn(27, 4, 3, dtype=torch.float64, requires_grad=True)
    base = voxconv.spatially_sparse_conv(inp, w)
    gx, gw = torch.autograd.grad(base.feats.sum(), (x, w))
    for f in _forms("conv_fwd", FWD):
        y = voxconv.spatially_sparse_conv(inp, w, fwd_algo=f)
        torch.testing.assert_close(y.feats, base.feats, rtol=1e-12, atol=1e-12)
    for f in _forms("conv_dgrad", BWD):
        for kw in ({"bwd_algo": f}, {"dgrad_algo": f, "wgrad_algo": f},
                   {"bwd_algo": "auto", "wgrad_algo": f}):
            y = voxconv.spatially_sparse_conv(inp, w, **kw)
            gx2, gw2 = torch.autograd.grad(y.feats.sum(), (x, w))
            torch.testing.assert_close(gx2, gx, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(gw2, gw, rtol=1e-12, atol=1e-12)


def test_every_depthwise_algorithm_form_runs_and_agrees():
    inp, x = _problem()
    w = torch.randn(27, 4, dtype=torch.float64, requires_grad=True)
    base = voxconv.spatially_sparse_depthwise_conv(inp, w)
    gx, gw = torch.autograd.grad(base.feats.sum(), (x, w))
    for f in _forms("depthwise_fwd", DFWD):
        m = voxconv.nn.SparseDepthwiseConv3d(4, fwd_algo=f, bwd_algo=f, bias=False,
                                             dtype=torch.float64)
        with torch.no_grad():
            m.weight.copy_(w)
        y = m(inp)
        torch.testing.assert_close(y.feats, base.feats, rtol=1e-12, atol=1e-12)
        gx2, gw2 = torch.autograd.grad(y.feats.sum(), (x, m.weight))
        torch.testing.assert_close(gx2, gx, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gw2, gw, rtol=1e-12, atol=1e-12)


@requires_call_info
def test_named_algorithm_is_the_one_that_ran():
    inp, _ = _problem()
    cpu = _cpu_algo("conv_fwd")
    for f in (FWD[cpu.upper()], cpu.upper(), [cpu], f"[{cpu}]"):
        voxconv.spatially_sparse_conv(inp.detach(), torch.randn(27, 4, 3, dtype=torch.float64),
                                      fwd_algo=f)
        info = voxconv.get_last_call_info()
        assert info.pass_ == "conv_fwd" and info.algo == cpu


def test_algorithm_the_library_does_not_know_is_its_error():
    """A documented name that this build did not register (e.g. a GPU
    algorithm in a CPU-only build) is rejected by the library, whose message
    lists the valid names; a registered one this device cannot run falls
    back (with a warning) to what can."""
    inp, _ = _problem()
    w = torch.randn(27, 4, 3, dtype=torch.float64)
    registered = {a["name"] for a in voxconv.registered_algorithms()}
    if "implicit_gemm" in registered:
        y = voxconv.spatially_sparse_conv(inp, w, fwd_algo=FWD.IMPLICIT_GEMM)
        assert y.feats.shape == (len(inp), 3)
    else:
        with pytest.raises(voxconv.InvalidArgumentError, match="implicit_gemm"):
            voxconv.spatially_sparse_conv(inp, w, fwd_algo=FWD.IMPLICIT_GEMM)


_ENV_SCRIPT = textwrap.dedent("""
    import sys, torch, voxconv
    c = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1]], dtype=torch.int32)
    x = voxconv.SparseTensor(torch.ones(2, 2), c)
    def run(**kw):
        try:
            if kw.pop("dw", False):
                voxconv.spatially_sparse_depthwise_conv(x, torch.ones(27, 2), **kw)
            else:
                voxconv.spatially_sparse_conv(x, torch.ones(27, 2, 2), **kw)
            return "ok"
        except voxconv.InvalidArgumentError as e:
            return "invalid:" + ("bogus_algo" in str(e)).__str__()
    print(run(), run(fwd_algo="auto"), run(dw=True), run(dw=True, fwd_algo="auto"))
""")


@pytest.mark.parametrize("var, expect", [
    ("VOXCONV_FWD_ALGO_MODE", "invalid:True ok ok ok"),
    ("VOXCONV_DEPTHWISE_CONV_FWD_ALGO_MODE", "ok ok invalid:True ok"),
])
def test_none_means_the_environment_default(var, expect):
    env = dict(os.environ)
    env[var] = "bogus_algo"
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["VOXCONV_LIBRARY"] = voxconv.library_path
    out = subprocess.run([sys.executable, "-c", _ENV_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expect


@requires_call_info
def test_deterministic_argument_reaches_the_library():
    inp, _ = _problem()
    w = torch.randn(27, 4, 3, dtype=torch.float64)
    for flag in (True, False):
        voxconv.spatially_sparse_conv(inp.detach(), w, deterministic=flag)
        assert voxconv.get_last_call_info().deterministic is flag
        m = voxconv.nn.SparseDepthwiseConv3d(4, deterministic=flag, dtype=torch.float64)
        m(inp.detach())
        info = voxconv.get_last_call_info()
        assert info.pass_ == "depthwise_fwd" and info.deterministic is flag
