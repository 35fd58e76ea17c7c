"""The expanding / padded / bounded / inverse kernel maps from Python
(voxconv.h "kernel maps": EXPANDING, padded + padding[], out_shape,
voxconv_kmap_inverse), against rules computed here independently (numpy
for output sets, torch's dense conv3d / conv_transpose3d in float64 for
values). Values run in float64 on the CPU and float32 on CUDA (float64 is
the CPU reference path), each held to the bound its format gives
(`ref.assert_at_fp_bound`)."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import voxconv
import voxconv.nn as vnn
from voxconv import errors

import ref


def _grid(n, G, batches, gen=None):
    c = ref.rand_coords(n, G, batches, gen=gen)
    return c


def expanding_set(coords, ks, st, dl, pad, out_shape):
    """numpy: {(b, o) : i = s*o - p + j*d for an input i, j in 0..k-1, per
    axis; 0 <= o < out_shape where out_shape > 0}, sorted (b, x, y, z)."""
    c = np.asarray(coords, dtype=np.int64)
    outs = []
    for j in itertools.product(*[range(k) for k in ks]):
        num = c[:, 1:] + np.asarray(pad) - np.asarray(j) * np.asarray(dl)
        ok = (num % np.asarray(st) == 0).all(1)
        o = num // np.asarray(st)
        if out_shape is not None:
            for a in range(3):
                if out_shape[a] > 0:
                    ok &= (o[:, a] >= 0) & (o[:, a] < out_shape[a])
        outs.append(np.concatenate([c[ok, :1], o[ok]], 1))
    allo = np.concatenate(outs, 0)
    return np.unique(allo, axis=0) if len(allo) else allo.reshape(0, 4)


def generative_set(coords, ks, st, dl, pad, out_shape):
    c = np.asarray(coords, dtype=np.int64)
    outs = []
    for j in itertools.product(*[range(k) for k in ks]):
        o = c[:, 1:] * np.asarray(st) - np.asarray(pad) + np.asarray(j) * np.asarray(dl)
        ok = np.ones(len(c), bool)
        if out_shape is not None:
            for a in range(3):
                if out_shape[a] > 0:
                    ok &= (o[:, a] >= 0) & (o[:, a] < out_shape[a])
        outs.append(np.concatenate([c[ok, :1], o[ok]], 1))
    return np.unique(np.concatenate(outs, 0), axis=0)


def conv_out_shape(G, ks, st, dl, pad):
    return tuple((g + 2 * p - d * (k - 1) - 1) // s + 1
                 for g, k, s, d, p in zip(G, ks, st, dl, pad))


def _dense_w(w, ks):
    """[K, Cin, Cout] (x slowest) -> conv3d weight [Cout, Cin, kx, ky, kz]."""
    K, cin, cout = w.shape
    return w.reshape(*ks, cin, cout).permute(4, 3, 0, 1, 2)


GEOMS = [  # kernel, stride, dilation, padding
    ((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)),
    ((3, 3, 3), (1, 1, 1), (1, 1, 1), (0, 0, 0)),
    ((3, 3, 3), (2, 2, 2), (1, 1, 1), (0, 1, 1)),
    ((3, 1, 1), (2, 1, 1), (1, 1, 1), (0, 0, 0)),   # OpenPCDet conv_out
    ((2, 2, 2), (2, 2, 2), (1, 1, 1), (0, 0, 0)),
    ((3, 2, 3), (1, 2, 2), (2, 1, 1), (2, 0, 1)),
]


@pytest.mark.parametrize("ks,st,dl,pad", GEOMS)
def test_expanding_matches_dense_conv3d(device, ks, st, dl, pad):
    G = (9, 8, 7)
    coords = ref.rand_coords(120, 7, 2)
    coords = coords[(coords[:, 1] < G[0]) & (coords[:, 2] < G[1]) & (coords[:, 3] < G[2])]
    cin, cout = 3, 4
    dt = ref.widest_dtype(device)
    x = ref.exact_randn(len(coords), cin, dtype=dt)
    w = ref.exact_randn(ks[0] * ks[1] * ks[2], cin, cout, dtype=dt)
    b = ref.exact_randn(cout, dtype=dt)
    osh = conv_out_shape(G, ks, st, dl, pad)
    inp = voxconv.SparseTensor(x.to(device, dt), coords.to(device))
    y = voxconv.spatially_sparse_conv(inp, w.to(device, dt), ks, st, dl, bias=b.to(device, dt),
                                      padding=pad, expand=True, out_shape=osh)
    want = expanding_set(coords.numpy(), ks, st, dl, pad, osh)
    assert y.coords.cpu().numpy().tolist() == want.tolist()
    assert y.tensor_stride == st
    dense = voxconv.SparseTensor(x, coords).dense(spatial_shape=G, batch_size=2)
    yd = tF.conv3d(dense, _dense_w(w, ks), b, stride=st, padding=pad, dilation=dl)
    ya = tF.conv3d(dense.abs(), _dense_w(w.abs(), ks), b.abs(), stride=st, padding=pad,
                   dilation=dl)
    assert tuple(yd.shape[2:]) == osh
    c = y.coords.cpu().long()
    sel = (c[:, 0], slice(None), c[:, 1], c[:, 2], c[:, 3])
    ref.assert_at_fp_bound(y.feats, yd[sel], ya[sel], len(w) * cin + 1, dt)
    # every non-zero of the dense result is an output of the sparse one
    occ = tF.conv3d((dense.abs().sum(1, keepdim=True) > 0).double(),
                    torch.ones(1, 1, *ks, dtype=torch.float64), stride=st, padding=pad,
                    dilation=dl)
    assert int((occ > 0).sum()) == len(y)


def test_expanding_unbounded_set(device):
    coords = ref.rand_coords(60, 6, 1)
    for ks, st, dl, pad in GEOMS:
        dt = ref.widest_dtype(device)
        inp = voxconv.SparseTensor(torch.randn(len(coords), 2, dtype=dt).to(device),
                                   coords.to(device))
        y = voxconv.spatially_sparse_conv(
            inp, torch.randn(ks[0] * ks[1] * ks[2], 2, 2, dtype=dt).to(device),
            ks, st, dl, padding=pad, expand=True)
        assert y.coords.cpu().numpy().tolist() == expanding_set(
            coords.numpy(), ks, st, dl, pad, None).tolist()


@pytest.mark.parametrize("ks,st,dl,pad", [((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)),
                                          ((2, 2, 2), (2, 2, 2), (1, 1, 1), (0, 0, 0)),
                                          ((3, 3, 3), (1, 2, 2), (1, 1, 1), (0, 1, 1))])
def test_generative_padding_out_shape_matches_conv_transpose3d(device, ks, st, dl, pad):
    G = (5, 4, 6)
    coords = ref.rand_coords(40, 6, 2)
    coords = coords[(coords[:, 1] < G[0]) & (coords[:, 2] < G[1]) & (coords[:, 3] < G[2])]
    cin, cout = 2, 3
    dt = ref.widest_dtype(device)
    x = ref.exact_randn(len(coords), cin, dtype=dt)
    w = ref.exact_randn(ks[0] * ks[1] * ks[2], cin, cout, dtype=dt)
    osh = tuple((g - 1) * s - 2 * p + d * (k - 1) + 1
                for g, k, s, d, p in zip(G, ks, st, dl, pad))
    inp = voxconv.SparseTensor(x.to(device, dt), coords.to(device), tensor_stride=st)
    y = voxconv.spatially_sparse_conv(inp, w.to(device, dt), ks, st, dl, generative=True,
                                      padding=pad, out_shape=osh)
    assert y.coords.cpu().numpy().tolist() == generative_set(
        coords.numpy(), ks, st, dl, pad, osh).tolist()
    dense = voxconv.SparseTensor(x, coords).dense(spatial_shape=G, batch_size=2)
    W = w.reshape(*ks, cin, cout).permute(3, 4, 0, 1, 2)  # [Cin, Cout, kx, ky, kz]
    yd = tF.conv_transpose3d(dense, W, stride=st, padding=pad, dilation=dl)
    ya = tF.conv_transpose3d(dense.abs(), W.abs(), stride=st, padding=pad, dilation=dl)
    assert tuple(yd.shape[2:]) == osh
    c = y.coords.cpu().long()
    sel = (c[:, 0], slice(None), c[:, 1], c[:, 2], c[:, 3])
    ref.assert_at_fp_bound(y.feats, yd[sel], ya[sel], len(w) * cin, dt)
    assert int((yd.abs().sum(1) > 0).sum()) <= len(y)


@pytest.mark.parametrize("ks,st,pad,expand", [((3, 3, 3), (2, 2, 2), (1, 1, 1), True),
                                              ((3, 1, 1), (2, 1, 1), (0, 0, 0), True),
                                              ((2, 2, 2), (2, 2, 2), None, False),
                                              ((3, 3, 3), (2, 2, 2), None, False)])
def test_inverse_matches_conv_transpose3d_and_transposed(device, ks, st, pad, expand):
    G = (8, 7, 9)
    coords = ref.rand_coords(100, 9, 2)
    coords = coords[(coords[:, 1] < G[0]) & (coords[:, 2] < G[1]) & (coords[:, 3] < G[2])]
    dt = ref.widest_dtype(device)
    x = ref.exact_randn(len(coords), 2, dtype=dt)
    K = ks[0] * ks[1] * ks[2]
    w1 = ref.exact_randn(K, 2, 3, dtype=dt)
    w2 = ref.exact_randn(K, 3, 2, dtype=dt)
    inp = voxconv.SparseTensor(x.to(device, dt), coords.to(device))
    osh = conv_out_shape(G, ks, st, (1, 1, 1), pad) if expand else None
    down = voxconv.spatially_sparse_conv(inp, w1.to(device, dt), ks, st, padding=pad,
                                         expand=expand, out_shape=osh)
    up = voxconv.spatially_sparse_conv(down, w2.to(device, dt), ks, st, padding=pad,
                                       expand=expand, out_shape=osh, inverse=True,
                                       out_coords=inp)
    assert up.coordinate_set is inp.coordinate_set
    # the same as a transposed map onto the forward's input coordinates
    up2 = voxconv.spatially_sparse_conv(down, w2.to(device, dt), ks, st, transposed=True,
                                        padding=pad, out_coords=inp)
    # and conv_transpose3d with the forward's padding at the input sites
    p = pad if pad is not None else tuple((k - 1) // 2 for k in ks)
    # a coarse grid large enough that the transposed output covers G
    dsh = tuple((g + pp) // s + 2 for g, pp, s in zip(G, p, st))
    dd = down.cpu().dense(spatial_shape=dsh, batch_size=2).double()
    W = w2.reshape(*ks, 3, 2).permute(3, 4, 0, 1, 2)
    yd = tF.conv_transpose3d(dd, W, stride=st, padding=p)
    ya = tF.conv_transpose3d(dd.abs(), W.abs(), stride=st, padding=p)
    assert all(yd.shape[a + 2] >= G[a] for a in range(3))
    c = coords.long()
    sel = (c[:, 0], slice(None), c[:, 1], c[:, 2], c[:, 3])
    for got in (up.feats, up2.feats):
        ref.assert_at_fp_bound(got, yd[sel], ya[sel], K * 3, dt)
    # the inverse map is cached beside the forward one
    km, _ = inp.manager.inverse_kernel_map(
        inp.coordinate_set, voxconv.kmap.KMAP_EXPANDING if expand else 1, ks, st, (1, 1, 1),
        pad, osh)
    assert km.inverse and km.n_in == len(down) and km.n_out == len(inp)


def test_gradcheck_expanding_and_inverse():
    coords = ref.rand_coords(20, 4, 1)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 2, dtype=torch.float64), coords)
    x = inp.feats.clone().requires_grad_()
    w = torch.randn(27, 2, 2, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(27, 2, 2, dtype=torch.float64, requires_grad=True)

    def f(x, w, w2):
        d = voxconv.spatially_sparse_conv(inp.replace_feature(x), w, 3, 2, padding=1,
                                          expand=True, out_shape=(2, 2, 2))
        return voxconv.spatially_sparse_conv(d, w2, 3, 2, padding=1, expand=True,
                                             out_shape=(2, 2, 2), inverse=True,
                                             out_coords=inp).feats

    assert torch.autograd.gradcheck(f, (x, w, w2), eps=1e-6, atol=1e-7)


def test_map_cache_keys():
    coords = ref.rand_coords(50, 6, 1)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 2), coords)
    w = torch.randn(27, 2, 2)
    a = voxconv.spatially_sparse_conv(inp, w, 3, 2, padding=1, expand=True)
    b = voxconv.spatially_sparse_conv(inp, w, 3, 2, padding=1, expand=True)
    assert a.coordinate_set is b.coordinate_set
    c = voxconv.spatially_sparse_conv(inp, w, 3, 2, padding=0, expand=True)
    assert c.coordinate_set is not a.coordinate_set
    d = voxconv.spatially_sparse_conv(inp, w, 3, 2, padding=1, expand=True,
                                      out_shape=(3, 3, 3))
    assert d.coordinate_set is not a.coordinate_set
    # the default (strided) map keeps its old key and output set
    s1 = voxconv.spatially_sparse_conv(inp, w, 3, 2)
    keys = inp.coordinate_set.kmaps.keys()
    assert (1, (3, 3, 3), (2, 2, 2), (1, 1, 1), None) in keys
    assert s1.coords.tolist() == torch.unique(
        torch.cat([coords[:, :1], torch.div(coords[:, 1:], 2, rounding_mode="floor")], 1),
        dim=0).tolist()
    # padding equal to the centred one: the same map, element for element
    p1 = voxconv.spatially_sparse_conv(inp, w, 3, 1, padding=1)
    p0 = voxconv.spatially_sparse_conv(inp, w, 3, 1)
    torch.testing.assert_close(p1.feats, p0.feats)


def test_modules_and_pooling(device):
    G = (8, 8, 8)
    coords = ref.rand_coords(80, 8, 1).to(device)
    dt = ref.widest_dtype(device)
    x = torch.randn(len(coords), 4, dtype=dt, device=device)
    inp = voxconv.SparseTensor(x, coords)
    conv = vnn.SparseConv3d(4, 5, 3, 2, padding=1, expand=True, out_shape=(4, 4, 4)).to(dt)
    conv.to(device)
    assert "expand=True" in repr(conv) and "padding=(1, 1, 1)" in repr(conv)
    y = conv(inp)
    want = expanding_set(coords.cpu().numpy(), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1),
                         (4, 4, 4))
    assert y.coords.cpu().numpy().tolist() == want.tolist()
    inv = vnn.SparseConv3d(5, 4, 3, 2, padding=1, expand=True, out_shape=(4, 4, 4),
                           inverse=True).to(device, dt)
    z = inv(y, out_coords=inp)
    assert z.coordinate_set is inp.coordinate_set
    dw = vnn.SparseDepthwiseConv3d(4, 3, 2, padding=1, expand=True, out_shape=4).to(device, dt)
    yd = dw(inp)
    dense = inp.cpu().dense(spatial_shape=G, batch_size=1).double()
    wd = dw.weight.detach().cpu().double().t().reshape(4, 1, 3, 3, 3)
    bd = dw.bias.detach().cpu().double()
    ref_d = tF.conv3d(dense, wd, bd, stride=2, padding=1, groups=4)
    ref_a = tF.conv3d(dense.abs(), wd.abs(), bd.abs(), stride=2, padding=1, groups=4)
    c = yd.coords.cpu().long()
    sel = (c[:, 0], slice(None), c[:, 1], c[:, 2], c[:, 3])
    ref.assert_at_fp_bound(yd.feats, ref_d[sel], ref_a[sel], 27 + 1, dt)
    pool = vnn.SparseMaxPool3d(3, 2, padding=1, expand=True, out_shape=4)
    p = pool(inp)
    assert p.coords.cpu().tolist() == expanding_set(coords.cpu().numpy(), (3, 3, 3), (2, 2, 2),
                                                    (1, 1, 1), (1, 1, 1), (4, 4, 4)).tolist()
    dmax = tF.max_pool3d(torch.where(dense != 0, dense, torch.full_like(dense, -1e300)),
                         3, 2, padding=1)
    c = p.coords.cpu().long()
    # a maximum is one of its inputs: exact in any format
    torch.testing.assert_close(p.feats.cpu().double(), dmax[c[:, 0], :, c[:, 1], c[:, 2], c[:, 3]],
                               rtol=0, atol=0)
    # defaults unchanged
    m = vnn.SparseConv3d(4, 4, 3)
    assert m._geo is None and m.padding is None and not m.expand


def test_errors():
    coords = torch.tensor([[0, 0, 0, 0], [0, 1, 1, 1], [0, 4, 4, 4]], dtype=torch.int32)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 2), coords)
    w = torch.randn(27, 2, 2)
    with pytest.raises(errors.InvalidArgumentError, match="out_shape"):
        voxconv.spatially_sparse_conv(inp, w, 3, 2, out_shape=(4, 4, 4))
    with pytest.raises(errors.InvalidArgumentError, match="padding"):
        voxconv.spatially_sparse_conv(inp, w, 3, 2, padding=3, expand=True)
    with pytest.raises(errors.InvalidArgumentError, match="inverse"):
        voxconv.spatially_sparse_conv(inp, w, 3, 2, inverse=True)
    with pytest.raises(errors.InvalidArgumentError, match="expand"):
        voxconv.spatially_sparse_conv(inp, w, 3, 2, expand=True, transposed=True)
    other = voxconv.spatially_sparse_conv(inp, w, 3, 2)  # strided: 2 voxels
    with pytest.raises(errors.KmapMismatchError):
        voxconv.spatially_sparse_conv(other, w, 3, 2, padding=1, expand=True, inverse=True,
                                      out_coords=inp)
