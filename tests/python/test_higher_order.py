"""Second derivatives (a gradient penalty through a sparse conv): equal to
torch's dense conv3d on the same grid, gradgradcheck in float64, for
regular and depthwise convolutions; pooling refuses a second derivative
with a clear error instead of returning a wrong value (issue 22 item 6)."""

import pytest
import torch
import torch.nn.functional as tF

import voxconv

from conftest import DEVICES
import ref

MODES = ["submanifold", "strided"]


def _dense_conv(dense, W, ks, st):
    pad = []
    for k in reversed(ks):
        left = (k - 1) // 2
        pad += [left, k - 1 - left]
    return tF.conv3d(tF.pad(dense, pad), W, stride=st)


@pytest.mark.parametrize("ks,st", [((3, 3, 3), 1), ((2, 2, 2), 2), ((3, 3, 3), 2)])
def test_gradient_penalty_matches_dense_conv3d(ks, st):
    """L = sum(y * r) + |dL/dx|^2 differentiated w.r.t. x and W: the
    second-order terms go through the backward passes."""
    G, cin, cout = 7, 3, 4
    coords = ref.rand_coords(70, G)
    x0 = torch.randn(len(coords), cin, dtype=torch.float64)
    W = torch.randn(cout, cin, *ks, dtype=torch.float64)
    K = ks[0] * ks[1] * ks[2]

    def sparse_loss(x, w):
        inp = voxconv.SparseTensor(x, coords)
        y = voxconv.spatially_sparse_conv(inp, w, ks, st)
        r = torch.sin(y.coords.double().sum(1, keepdim=True) + torch.arange(cout))
        first = (y.feats * r).sum() + (y.feats ** 2).sum()
        gx, = torch.autograd.grad(first, x, create_graph=True)
        return first + (gx ** 2).sum() * 0.5, y.coords

    x = x0.clone().requires_grad_()
    w = W.permute(2, 3, 4, 1, 0).reshape(K, cin, cout).clone().requires_grad_()
    loss, out_c = sparse_loss(x, w)
    gx_s, gw_s = torch.autograd.grad(loss, (x, w))

    xd = x0.clone().requires_grad_()
    Wd = W.clone().requires_grad_()
    c = coords.long()
    dense = torch.zeros(1, G, G, G, cin, dtype=torch.float64)
    dense = dense.index_put((c[:, 0], c[:, 1], c[:, 2], c[:, 3]), xd).permute(0, 4, 1, 2, 3)
    yd = _dense_conv(dense, Wd, ks, st)
    oc = out_c.long()
    yv = yd[oc[:, 0], :, oc[:, 1], oc[:, 2], oc[:, 3]]
    r = torch.sin(out_c.double().sum(1, keepdim=True) + torch.arange(cout))
    first = (yv * r).sum() + (yv ** 2).sum()
    gx, = torch.autograd.grad(first, xd, create_graph=True)
    loss_d = first + (gx ** 2).sum() * 0.5
    gx_d, gW_d = torch.autograd.grad(loss_d, (xd, Wd))
    torch.testing.assert_close(loss, loss_d, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gx_s, gx_d, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(gw_s, gW_d.permute(2, 3, 4, 1, 0).reshape(K, cin, cout),
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("depthwise", [False, True])
def test_gradgradcheck_fp64(mode, depthwise):
    coords = ref.rand_coords(25, 5)
    st = 1 if mode == "submanifold" else 2
    C = 2
    x = torch.randn(len(coords), C, dtype=torch.float64, requires_grad=True)
    w = torch.randn(*((27, C) if depthwise else (27, C, 3)), dtype=torch.float64,
                    requires_grad=True)
    inp = voxconv.SparseTensor(x.detach(), coords)

    def f(x, w):
        t = inp.replace_feature(x)
        if depthwise:
            return voxconv.spatially_sparse_depthwise_conv(t, w, 3, st).feats
        return voxconv.spatially_sparse_conv(t, w, 3, st).feats

    assert torch.autograd.gradgradcheck(f, (x, w), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pool", [voxconv.sparse_max_pool, voxconv.sparse_avg_pool])
def test_pooling_refuses_second_derivative(device, pool):
    coords = ref.rand_coords(60, 6).to(device)
    x = torch.randn(len(coords), 3, device=device, requires_grad=True)
    y = pool(voxconv.SparseTensor(x, coords), 2)
    with pytest.raises(RuntimeError, match="first derivatives only"):
        torch.autograd.grad((y.feats ** 2).sum(), x, create_graph=True)
    # first derivatives are unaffected
    gx, = torch.autograd.grad((y.feats ** 2).sum(), x)
    assert gx.shape == x.shape and not gx.requires_grad


def _ops_problem(device):
    """Features [N, 3] and a weight [27, 3, 4] (float64 on the CPU, float32
    on CUDA), the submanifold 3^3 and strided 2^3 maps of random
    coordinates, and a deterministic cfg (the same kernels, the same bits,
    on every run)."""
    dtype = torch.float64 if device == "cpu" else torch.float32
    coords = ref.rand_coords(120, 6).to(device)
    x0 = torch.randn(len(coords), 3, dtype=dtype, device=device)
    w0 = torch.randn(27, 3, 4, dtype=dtype, device=device)
    inp = voxconv.SparseTensor(x0, coords)
    km, _ = inp.manager.kernel_map(inp.coordinate_set, voxconv._lib.KMAP_SUBMANIFOLD,
                                   (3, 3, 3), (1, 1, 1), (1, 1, 1))
    pm, _ = inp.manager.kernel_map(inp.coordinate_set, voxconv._lib.KMAP_STRIDED,
                                   (2, 2, 2), (2, 2, 2), (1, 1, 1))
    return x0, w0, km, pm, (None, None, None, 0, voxconv._lib.TRUE)


@pytest.mark.parametrize("device", DEVICES)
def test_fast_apply_equals_function_apply(device):
    """The ops reach their autograd Functions through _ops._fast_apply,
    which skips torch 2.x's Python layer around Function.apply when no
    functorch transform is active. Outputs and first and second
    derivatives must be those of the ordinary apply, bit for bit (the
    same passes run), for convolution, pooling and unpooling."""
    from voxconv import _ops
    if _ops._pass_apply == _ops._PassFn.apply:
        pytest.skip(f"torch {torch.__version__}: Function.apply has no Python layer to skip")
    # deterministic mode and a tuned warm-up round: on CUDA both rounds then
    # run the same kernels, which give the same bits
    x0, w0, km, pm, cfg = _ops_problem(device)
    results = []
    for conv_apply, pool_apply, unpool_apply in (
            (_ops._pass_apply, _ops._pool_apply, _ops._unpool_apply),
            (_ops._pass_apply, _ops._pool_apply, _ops._unpool_apply),
            (_ops._PassFn.apply, _ops._PoolFn.apply, _ops._UnpoolFn.apply)):
        x = x0.clone().requires_grad_()
        w = w0.clone().requires_grad_()
        y = conv_apply(x, w, (km, "conv", cfg, 0, False, None))
        gx, gw = torch.autograd.grad((y ** 2).sum(), (x, w), create_graph=True)
        hx, hw = torch.autograd.grad((gx ** 3).sum() + (gw ** 2).sum(), (x, w),
                                     retain_graph=True)  # y's graph again below
        p = pool_apply(y, pm, voxconv._lib.POOL_MAX)
        u = unpool_apply(p, pm)
        gp = torch.autograd.grad((u * u.detach()).sum(), x)[0]
        results.append([t.detach() for t in (y, gx, gw, hx, hw, p, u, gp)])
    for a, b in zip(*results[1:]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_launch_first_equals_function_apply(device):
    """Under autograd the ops issue their forward pass before the node that
    records it is made (_ops._Launched*: the kernel reaches the GPU before
    torch's Function bookkeeping). The nodes they make must be those
    Functions' (so the early path is the one taken), and outputs, first
    and second derivatives must be the plain Functions' bit for bit, for a
    convolution (weight as the library stores it, and through a
    PermutedLayout as compat.spconv stores it), pooling and unpooling."""
    from voxconv import _ops
    x0, w0, km, pm, cfg = _ops_problem(device)
    # spconv's stored layout [Cout, k0, k1, k2, Cin] of the same weight
    layout = _ops.PermutedLayout((1, 2, 3, 4, 0), (4, 3, 3, 3, 3), (27, 3, 4))
    ws0 = w0.reshape(3, 3, 3, 3, 4).permute(4, 0, 1, 2, 3).contiguous()
    MAX = voxconv._lib.POOL_MAX

    def run(early):
        x = x0.clone().requires_grad_()
        w = w0.clone().requires_grad_()
        ws = ws0.clone().requires_grad_()
        if early:
            y = _ops.conv(x, w, km, *cfg)
            ys = _ops.conv(x, ws, km, *cfg, layout=layout)
            p = _ops.pool(y, pm, MAX)
            u = _ops.unpool(p, pm)
            names = [type(t.grad_fn).__name__ for t in (y, ys, p, u)]
            assert names == ["_LaunchedPassFnBackward"] * 2 + [
                "_LaunchedPoolFnBackward", "_LaunchedUnpoolFnBackward"], names
        else:
            y = _ops._PassFn.apply(x, w, (km, "conv", cfg, 0, False, None))
            ys = _ops._PassFn.apply(x, ws, (km, "conv", cfg, 0, False, layout))
            p = _ops._PoolFn.apply(y, pm, MAX)
            u = _ops._UnpoolFn.apply(p, pm)
        gx, gw, gws = torch.autograd.grad((y ** 2).sum() + (ys ** 3).sum(), (x, w, ws),
                                          create_graph=True)
        hx, hw, hws = torch.autograd.grad((gx ** 3).sum() + (gw ** 2).sum() + (gws ** 2).sum(),
                                          (x, w, ws), retain_graph=True)
        gp = torch.autograd.grad((u * u.detach()).sum(), x)[0]
        return [t.detach() for t in (y, ys, gx, gw, gws, hx, hw, hws, p, u, gp)]

    run(True)  # tuned warm-up: both rounds below then run the same kernels
    for a, b in zip(run(True), run(False)):
        assert torch.equal(a, b)
    # the same function of the weight either way it is stored
    early = run(True)
    assert torch.equal(early[1], early[0])
