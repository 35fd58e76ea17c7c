"""fp16-accumulator precedence, checked through the library's own answer
(voxconv_resolve_fp16_accum and voxconv_get_last_call_info), never by
timing:

  1. f32/f64 data, and weight gradients: off, always
  2. per call / per module use_fp16_accum=True/False: that
  3. the global value (VOXCONV_USE_FP16_ACCUM, voxconv.set_fp16_accum) if true: on
  4. inside torch.inference_mode() with f16/bf16 data: on
  5. otherwise off (torch.no_grad() and model.eval() do not count)
"""

import contextlib
import itertools
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import voxconv

from conftest import REPO, requires_call_info, requires_tuner
import ref

pytestmark = requires_tuner

LOW = (torch.float16, torch.bfloat16)


def expected(dtype, pass_, per_call, glob, inference):
    if dtype not in LOW or pass_.endswith("wgrad"):
        return False
    if per_call is not None:
        return per_call
    if glob:
        return True
    return inference


@pytest.fixture
def global_fp16():
    """Restores the global setting after the test."""
    before = voxconv.get_fp16_accum()
    yield
    voxconv.set_fp16_accum(before)


def test_set_get_round_trip(global_fp16):
    voxconv.set_fp16_accum(True)
    assert voxconv.get_fp16_accum() is True
    voxconv.set_fp16_accum(False)
    assert voxconv.get_fp16_accum() is False


def test_resolution_table(global_fp16):
    dtypes = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    for glob in (False, True):
        voxconv.set_fp16_accum(glob)
        for dtype, pass_, per_call, inference in itertools.product(
                dtypes, voxconv.PASSES, (None, True, False), (False, True)):
            on, reason = voxconv.resolve_fp16_accum(dtype, pass_, per_call, inference)
            want = expected(dtype, pass_, per_call, glob, inference)
            assert on == want, (dtype, pass_, per_call, glob, inference, reason)
            assert reason.startswith("on" if on else "off"), reason


def test_resolution_reads_inference_mode_by_default(global_fp16):
    voxconv.set_fp16_accum(False)
    assert voxconv.resolve_fp16_accum(torch.float16)[0] is False
    with torch.no_grad():
        assert voxconv.resolve_fp16_accum(torch.float16)[0] is False
    with torch.inference_mode():
        assert voxconv.resolve_fp16_accum(torch.float16)[0] is True
        assert voxconv.resolve_fp16_accum(torch.float32)[0] is False


def _ctx(name):
    return {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
            "inference": torch.inference_mode}[name]()


@requires_call_info
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("per_call", [None, True, False])
@pytest.mark.parametrize("glob", [False, True])
def test_calls_resolve_as_the_table_says(global_fp16, dtype, per_call, glob):
    """Real forward calls (regular and depthwise, module and functional, in
    train/eval mode) under every autograd context; the library reports what
    each call resolved to."""
    voxconv.set_fp16_accum(glob)
    coords = ref.rand_coords(40, 5)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 8).to(dtype), coords)
    conv = voxconv.nn.SparseConv3d(8, 8, use_fp16_accum=per_call, dtype=dtype)
    dw = voxconv.nn.SparseDepthwiseConv3d(8, use_fp16_accum=per_call, dtype=dtype)
    for ctx_name, train in itertools.product(("grad", "no_grad", "inference"), (True, False)):
        conv.train(train)
        dw.train(train)
        want = expected(dtype, "conv_fwd", per_call, glob, ctx_name == "inference")
        with _ctx(ctx_name):
            conv(inp)
            info = voxconv.get_last_call_info()
            assert (info.pass_, info.fp16_accum) == ("conv_fwd", want), (ctx_name, train, info)
            dw(inp)
            info = voxconv.get_last_call_info()
            assert (info.pass_, info.fp16_accum) == ("depthwise_fwd", want), (ctx_name, info)
            voxconv.spatially_sparse_conv(inp, conv.weight.detach(), use_fp16_accum=per_call)
            assert voxconv.get_last_call_info().fp16_accum == want
        assert info.fp16_accum_reason.startswith("on" if want else "off")


@requires_call_info
def test_backward_passes(global_fp16):
    """Backward never runs in inference mode; a per-call True reaches dgrad,
    weight gradients stay fp32."""
    voxconv.set_fp16_accum(False)
    coords = ref.rand_coords(40, 5)
    x = torch.randn(len(coords), 8, dtype=torch.float16, requires_grad=True)
    inp = voxconv.SparseTensor(x, coords)
    for per_call, dgrad_on in ((True, True), (None, False), (False, False)):
        w = torch.randn(27, 8, 8, dtype=torch.float16)  # no weight grad: dgrad runs last
        y = voxconv.spatially_sparse_conv(inp, w, use_fp16_accum=per_call)
        y.feats.float().sum().backward()
        info = voxconv.get_last_call_info()
        assert (info.pass_, info.fp16_accum) == ("conv_dgrad", dgrad_on), info
        w.requires_grad_()
        y = voxconv.spatially_sparse_conv(inp, w, use_fp16_accum=per_call)
        y.feats.float().sum().backward()
        info = voxconv.get_last_call_info()
        assert (info.pass_, info.fp16_accum) == ("conv_wgrad", False), info


@requires_call_info
def test_get_last_call_info_per_device():
    coords = ref.rand_coords(20, 4)
    voxconv.spatially_sparse_conv(voxconv.SparseTensor(torch.randn(len(coords), 2), coords),
                                  torch.randn(27, 2, 2))
    info = voxconv.get_last_call_info("cpu")
    assert info.pass_ == "conv_fwd" and info.algo and info.deterministic in (True, False)


_ENV_SCRIPT = textwrap.dedent("""
    import torch, voxconv
    c = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1]], dtype=torch.int32)
    x = voxconv.SparseTensor(torch.ones(2, 2, dtype=torch.float16), c)
    g0 = voxconv.get_fp16_accum()
    voxconv.spatially_sparse_conv(x, torch.ones(27, 2, 2, dtype=torch.float16))
    a = voxconv.get_last_call_info().fp16_accum
    voxconv.spatially_sparse_conv(x, torch.ones(27, 2, 2, dtype=torch.float16),
                                  use_fp16_accum=False)
    b = voxconv.get_last_call_info().fp16_accum
    voxconv.set_fp16_accum(False)
    voxconv.spatially_sparse_conv(x, torch.ones(27, 2, 2, dtype=torch.float16))
    print(g0, a, b, voxconv.get_last_call_info().fp16_accum)
""")


@requires_call_info
@pytest.mark.parametrize("value, expect", [("true", "True True False False"),
                                           ("0", "False False False False")])
def test_environment_sets_the_initial_global(value, expect):
    env = dict(os.environ)
    env["VOXCONV_USE_FP16_ACCUM"] = value
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["VOXCONV_LIBRARY"] = voxconv.library_path
    out = subprocess.run([sys.executable, "-c", _ENV_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expect
