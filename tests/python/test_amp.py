"""Automatic mixed precision: under torch.autocast the sparse convolutions
(modules and functional, regular and depthwise) run in the autocast dtype
like torch's conv -- the same bits as casting features, weight and bias
by hand -- gradients reach the float32 parameters in float32, pooling keeps
its input's dtype, and outside autocast nothing changes. On CUDA, a
float16 training step with torch.amp.GradScaler."""

import pytest
import torch

import voxconv
from voxconv import nn as vnn

import ref


def _autocast_dtypes(device):
    return [torch.bfloat16] if device.type == "cpu" else [torch.float16, torch.bfloat16]


def _input(device, c=8, n=400, extent=10):
    coords = ref.rand_coords(n, extent).to(device)
    return voxconv.SparseTensor(torch.randn(len(coords), c, device=device), coords)


@pytest.mark.parametrize("depthwise", [False, True])
def test_autocast_runs_in_autocast_dtype_as_a_manual_cast(device, depthwise):
    for dt in _autocast_dtypes(device):
        x = _input(device)
        layer = (vnn.SparseDepthwiseConv3d(8, 3) if depthwise
                 else vnn.SparseConv3d(8, 6, 3)).to(device)
        feats = x.feats.clone().requires_grad_()
        with torch.autocast(device.type, dtype=dt):
            y = layer(x.replace_feature(feats))
        assert y.feats.dtype == dt
        g = torch.randn_like(y.feats)
        y.feats.backward(g)
        assert layer.weight.grad.dtype == torch.float32
        assert feats.grad.dtype == torch.float32
        got_w, got_b, got_x = layer.weight.grad.clone(), layer.bias.grad.clone(), feats.grad
        # by hand: the same casts, outside autocast
        layer.zero_grad()
        feats2 = x.feats.clone().requires_grad_()
        w, b = layer.weight.to(dt), layer.bias.to(dt)
        fn = (voxconv.spatially_sparse_depthwise_conv if depthwise
              else voxconv.spatially_sparse_conv)
        y2 = fn(x.replace_feature(feats2.to(dt)), w, 3, bias=b)
        y2.feats.backward(g)
        assert torch.equal(y.feats, y2.feats)
        assert torch.equal(got_w, layer.weight.grad)
        assert torch.equal(got_b, layer.bias.grad)
        assert torch.equal(got_x, feats2.grad)


def test_outside_autocast_nothing_is_cast(device):
    x = _input(device)
    layer = vnn.SparseConv3d(8, 6, 3).to(device)
    assert layer(x).feats.dtype == torch.float32
    with torch.autocast(device.type, enabled=False):
        assert layer(x).feats.dtype == torch.float32


def test_pooling_keeps_its_dtype_under_autocast(device):
    x = _input(device)
    dt = _autocast_dtypes(device)[0]
    with torch.autocast(device.type, dtype=dt):
        p = voxconv.sparse_max_pool(x, 2)
        y = vnn.SparseConv3d(8, 6, 3).to(device)(p)
        q = vnn.SparseAvgPool3d(2)(y)
    assert p.feats.dtype == torch.float32
    assert y.feats.dtype == dt
    assert q.feats.dtype == dt


def test_float64_is_not_cast():
    x = _input(torch.device("cpu"))
    x = x.replace_feature(x.feats.double())
    layer = vnn.SparseConv3d(8, 6, 3).double()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).feats.dtype == torch.float64


def test_fp16_training_step_with_grad_scaler(cuda):
    """Three steps of a small net under autocast fp16 with GradScaler: the
    loss is finite and decreases like the float32 run's, and the
    parameters stay float32."""
    torch.manual_seed(0)
    x = _input(cuda, c=4, n=3000, extent=24)
    labels = torch.randint(0, 3, (len(x),), device=cuda)

    def make():
        torch.manual_seed(1)
        return torch.nn.Sequential(vnn.SparseConv3d(4, 16, 3), vnn.SparseReLU(),
                                   vnn.SparseConv3d(16, 3, 3)).to(cuda)

    losses = {}
    for amp in (False, True):
        net = make()
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler("cuda", enabled=amp)
        curve = []
        for _ in range(5):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                out = net(x).feats
                loss = torch.nn.functional.cross_entropy(out.float(), labels)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            curve.append(loss.item())
        assert all(p.dtype == torch.float32 for p in net.parameters())
        losses[amp] = curve
    assert all(torch.isfinite(torch.tensor(losses[True])))
    assert losses[True][-1] < losses[True][0]
    # fp16 rounding only: the curves agree to a few 1e-3
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]),
                               rtol=2e-2, atol=2e-2)
