"""voxconv.compat.minkowski: MinkowskiEngine 0.5 semantics.

The network (in tests/python/ports_minkowski.py) re-creates
MinkowskiEngine's examples/minkunet.py (with modules/resnet_block.py's
BasicBlock and examples/resnet.py's ResNetBase) written against the compat
API exactly as upstream, only the import changed. Rules are checked
independently: per-level voxel counts with numpy (ME: unique(floor(c /
(ts*s)) * ts*s)), the whole network against a dense conv3d /
conv_transpose3d evaluation in float64, and ME's kernel order on
hand-computed cases.
"""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import voxconv.compat.minkowski as ME
from voxconv import _lib as vc_lib
from voxconv import errors as vc_errors

from conftest import DEVICES
# The re-created upstream MinkUNet and the scan loader, shared with
# bench/compat_bench.py.
from ports_minkowski import MinkUNet14, MinkUNet14A, load_scan

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.environ.get("VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
SCANNET = os.path.join(DATA, "scans", "scannet_scene0000_00.bin")
KITTI = os.path.join(DATA, "scans", "semantickitti_00_000000.bin")
needs_scans = pytest.mark.skipif(not (os.path.exists(SCANNET) and os.path.exists(KITTI)),
                                 reason=f"real scans not found under {DATA}")


# ---- helpers ---------------------------------------------------------------------

def me_level_counts(coords, levels=5):
    """ME's rule, independently: unique(floor(c / ts) * ts) per level, on
    (batch, x, y, z) rows."""
    out = []
    for lv in range(levels):
        ts = 2 ** lv
        c = coords.copy()
        c[:, 1:] = np.floor_divide(c[:, 1:], ts) * ts
        out.append(len(np.unique(c, axis=0)))
    return out


def level_hooks(net):
    counts = {}
    names = ["conv0p1s1", "conv1p1s2", "conv2p2s2", "conv3p4s2", "conv4p8s2",
             "convtr4p16s2", "convtr5p8s2", "convtr6p4s2", "convtr7p2s2", "final"]
    for n in names:
        getattr(net, n).register_forward_hook(
            lambda m, i, o, n=n: counts.__setitem__(n, (len(o), o.tensor_stride[0],
                                                        o.C.clone())))
    return counts


# ---- kernel order and anchoring (hand-computed) ------------------------------------

def test_kernel_order_odd_pinned():
    """One input voxel, k = 3, kernel[m] = m, expand_coordinates: the output
    at c - off(m) holds m, with ME's offsets off(m) = (jx-1, jy-1, jz-1),
    m = jx + 3*jy + 9*jz (first axis fastest)."""
    c = torch.tensor([[0, 5, 7, 9]], dtype=torch.int32)
    x = ME.SparseTensor(torch.ones(1, 1, dtype=torch.float64), c)
    conv = ME.MinkowskiConvolution(1, 1, kernel_size=3, expand_coordinates=True,
                                   dimension=3).double()
    with torch.no_grad():
        conv.kernel.copy_(torch.arange(27.).reshape(27, 1, 1))
    y = conv(x)
    assert len(y) == 27 and y.tensor_stride == [1, 1, 1]
    got = {tuple(r[1:].tolist()): float(v) for r, v in zip(y.C, y.F[:, 0])}
    for m in range(27):
        jx, jy, jz = m % 3, (m // 3) % 3, m // 9
        assert got[(5 - (jx - 1), 7 - (jy - 1), 9 - (jz - 1))] == m


def test_kernel_order_submanifold_pinned():
    """A full 3x3x3 block with a one-hot input at the neighbour c + off:
    the centre output picks kernel[m] with m = jx + 3*jy + 9*jz."""
    g = torch.stack(torch.meshgrid(*[torch.arange(3)] * 3, indexing="ij"), -1).reshape(-1, 3)
    coords = torch.cat([torch.zeros(27, 1, dtype=torch.long), g + 10], 1)
    conv = ME.MinkowskiConvolution(1, 1, kernel_size=3, dimension=3).double()
    with torch.no_grad():
        conv.kernel.copy_(torch.arange(27.).reshape(27, 1, 1))
    for jx, jy, jz in [(0, 0, 0), (2, 0, 0), (0, 2, 0), (0, 0, 2), (2, 1, 0), (0, 1, 2)]:
        f = torch.zeros(27, 1, dtype=torch.float64)
        hot = (coords[:, 1:] == torch.tensor([10 + jx, 10 + jy, 10 + jz])).all(1)
        f[hot] = 1
        y = conv(ME.SparseTensor(f, coords))
        centre = (y.C[:, 1:] == 11).all(1)
        assert float(y.F[centre, 0]) == jx + 3 * jy + 9 * jz


@pytest.mark.parametrize("k", [2, 4])
def test_even_kernel_anchor_and_order(k):
    """Even kernels start at offset 0 (ME), stride 2: output o (level) reads
    input 2*o + j; kernel index jx + k*jy + k*k*jz."""
    conv = ME.MinkowskiConvolution(1, 1, kernel_size=k, stride=2, dimension=3).double()
    K = k ** 3
    with torch.no_grad():
        conv.kernel.copy_(torch.arange(float(K)).reshape(K, 1, 1))
    for j in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (k - 1, 1, k - 1)]:
        # a second voxel at the output's own cell keeps the output set {o}
        pos = [8 + j[0], 4 + j[1], 6 + j[2]]
        coords = torch.tensor([[0] + pos, [0, 8, 4, 6]])
        f = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
        if j == (0, 0, 0):
            coords, f = coords[:1], f[:1]
        y = conv(ME.SparseTensor(f, coords))
        o = (y.C[:, 1:] == torch.tensor([8, 4, 6])).all(1)
        assert o.sum() == 1 and y.tensor_stride == [2, 2, 2]
        assert float(y.F[o, 0]) == j[0] + k * j[1] + k * k * j[2]


def test_transposed_even_kernel_order():
    """ConvolutionTranspose k = s = 2 onto the encoder's set: fine voxel
    2*c + j gets kernel[jx + 2*jy + 4*jz] times the coarse feature."""
    g = torch.stack(torch.meshgrid(*[torch.arange(2)] * 3, indexing="ij"), -1).reshape(-1, 3)
    coords = torch.cat([torch.zeros(8, 1, dtype=torch.long), g + 6], 1)
    x = ME.SparseTensor(torch.ones(8, 1, dtype=torch.float64), coords)
    down = ME.MinkowskiConvolution(1, 1, kernel_size=2, stride=2, dimension=3).double()
    up = ME.MinkowskiConvolutionTranspose(1, 1, kernel_size=2, stride=2, dimension=3).double()
    with torch.no_grad():
        down.kernel.fill_(1.0)
        up.kernel.copy_(torch.arange(8.).reshape(8, 1, 1))
    y = up(down(x))
    assert y.coordinate_map_key == x.coordinate_map_key
    for r, v in zip(y.C, y.F[:, 0]):
        j = (r[1:] - 6).tolist()
        assert float(v) == 8 * (j[0] + 2 * j[1] + 4 * j[2])


# ---- dense references --------------------------------------------------------------

def dense_kernel(kernel, ks):
    """ME kernel [K, Cin, Cout] -> torch conv3d weight [Cout, Cin, kx, ky, kz]."""
    kx, ky, kz = ks
    return kernel.reshape(kz, ky, kx, kernel.shape[1], kernel.shape[2]).permute(4, 3, 2, 1, 0)


def to_dense(st, G, lvl):
    g = torch.zeros(1, st.F.shape[1], G >> lvl, G >> lvl, G >> lvl, dtype=st.F.dtype)
    c = (st.C[:, 1:].long() >> lvl)
    g[0, :, c[:, 0], c[:, 1], c[:, 2]] = st.F.t()
    return g


@pytest.mark.parametrize("k,s,d", [(3, 1, 1), (3, 2, 1), (2, 2, 1), (4, 2, 1), (5, 1, 1),
                                   (3, 1, 2), (4, 1, 1)])
def test_conv_matches_dense(k, s, d):
    torch.manual_seed(0)
    G = 16
    c = torch.unique(torch.randint(0, G, (150, 3)), dim=0)
    coords = torch.cat([torch.zeros(len(c), 1, dtype=torch.long), c], 1)
    x = ME.SparseTensor(torch.randn(len(c), 3, dtype=torch.float64), coords)
    conv = ME.MinkowskiConvolution(3, 5, kernel_size=k, stride=s, dilation=d,
                                   dimension=3).double()
    y = conv(x)
    # ME's output set: unique(floor(c / s))
    exp = np.unique(np.floor_divide(c.numpy(), s), axis=0)
    assert len(y) == len(exp)
    # ME's offsets: odd centred, even from 0 -> dense left padding
    P = (k // 2) * d if k % 2 else 0
    xd = TF.pad(to_dense(x, G, 0), (P, d * (k - 1) - P) * 3)
    yd = TF.conv3d(xd, dense_kernel(conv.kernel, (k,) * 3), stride=s, dilation=d)
    lc = y.C[:, 1:].long() // s
    ref = yd[0, :, lc[:, 0], lc[:, 1], lc[:, 2]].t()
    assert torch.allclose(y.F, ref, atol=1e-12)


def test_hand_built_checkpoint():
    """A dense torch Conv3d weight, permuted by hand into ME's offset order
    ([K, Cin, Cout], x fastest) and loaded as an ME state_dict, computes
    the dense conv at the voxels; the same weight in voxconv's (x-slowest)
    order does not (for a non-symmetric kernel)."""
    torch.manual_seed(1)
    G = 12
    c = torch.unique(torch.randint(0, G, (300, 3)), dim=0)
    coords = torch.cat([torch.zeros(len(c), 1, dtype=torch.long), c], 1)
    x = ME.SparseTensor(torch.randn(len(c), 2, dtype=torch.float64), coords)
    W = torch.randn(4, 2, 3, 3, 3, dtype=torch.float64)      # [Cout, Cin, kx, ky, kz]
    me_kernel = W.permute(4, 3, 2, 1, 0).reshape(27, 2, 4)   # m = jx + 3 jy + 9 jz
    conv = ME.MinkowskiConvolution(2, 4, kernel_size=3, dimension=3).double()
    conv.load_state_dict(ME.convert_checkpoint({"state_dict": {"module.kernel": me_kernel}}))
    ref = TF.conv3d(to_dense(x, G, 0), W, padding=1)[0][:, c[:, 0], c[:, 1], c[:, 2]].t()
    assert torch.allclose(conv(x).F, ref, atol=1e-12)
    vox_order = W.permute(2, 3, 4, 1, 0).reshape(27, 2, 4)   # voxconv's order
    with torch.no_grad():
        conv.kernel.copy_(vox_order)
    assert not torch.allclose(conv(x).F, ref, atol=1e-6)
    assert torch.equal(ME.from_voxconv_kernel(ME.to_voxconv_kernel(me_kernel, 3), 3), me_kernel)
    assert torch.equal(ME.to_voxconv_kernel(me_kernel, 3), vox_order)


def dense_minkunet(net, x, G):
    """MinkUNet in dense float64: conv3d / conv_transpose3d with the net's
    weights, outputs masked to ME's sets (max_pool3d of the input mask for
    each level). BN in eval mode."""
    mask0 = to_dense(ME.SparseTensor(torch.ones(len(x), 1, dtype=torch.float64), x.C), G, 0)
    masks = [mask0]
    for _ in range(4):
        masks.append(TF.max_pool3d(masks[-1], 2))

    def conv(m, t, lvl):
        ks = m.kernel_generator.kernel_size
        s = m.kernel_generator.kernel_stride[0]
        if m.use_mm:
            y = torch.einsum("bixyz,io->boxyz", t, m.kernel)
            out_lvl = lvl
        elif m.is_transpose:
            y = TF.conv_transpose3d(t, dense_kernel(m.kernel, ks).transpose(0, 1), stride=s)
            out_lvl = lvl - 1
        else:
            k = ks[0]
            P = k // 2 if k % 2 else 0
            y = TF.conv3d(TF.pad(t, (P, k - 1 - P) * 3), dense_kernel(m.kernel, ks), stride=s)
            out_lvl = lvl + (1 if s == 2 else 0)
        if m.bias is not None:
            y = y + m.bias.reshape(1, -1, 1, 1, 1)
        return y * masks[out_lvl], out_lvl

    def bn(m, t, lvl):
        b = m.bn
        y = (t - b.running_mean.reshape(1, -1, 1, 1, 1)) / torch.sqrt(
            b.running_var.reshape(1, -1, 1, 1, 1) + b.eps)
        y = y * b.weight.reshape(1, -1, 1, 1, 1) + b.bias.reshape(1, -1, 1, 1, 1)
        return y * masks[lvl]

    def block(blk, t, lvl):
        out, lv = conv(blk.conv1, t, lvl)
        out = torch.relu(bn(blk.norm1, out, lv))
        out, lv = conv(blk.conv2, out, lv)
        out = bn(blk.norm2, out, lv)
        res = t
        if blk.downsample is not None:
            res, _ = conv(blk.downsample[0], t, lvl)
            res = bn(blk.downsample[1], res, lvl)
        return torch.relu(out + res)

    def seq(layers, t, lvl):
        for blk in layers:
            t = block(blk, t, lvl)
        return t

    def cbr(cm, bm, t, lvl):
        t, lv = conv(cm, t, lvl)
        return torch.relu(bn(bm, t, lv)), lv

    t = to_dense(x, G, 0)
    p1, _ = cbr(net.conv0p1s1, net.bn0, t, 0)
    t, _ = cbr(net.conv1p1s2, net.bn1, p1, 0)
    b1 = seq(net.block1, t, 1)
    t, _ = cbr(net.conv2p2s2, net.bn2, b1, 1)
    b2 = seq(net.block2, t, 2)
    t, _ = cbr(net.conv3p4s2, net.bn3, b2, 2)
    b3 = seq(net.block3, t, 3)
    t, _ = cbr(net.conv4p8s2, net.bn4, b3, 3)
    t = seq(net.block4, t, 4)
    t, _ = cbr(net.convtr4p16s2, net.bntr4, t, 4)
    t = seq(net.block5, torch.cat([t, b3], 1), 3)
    t, _ = cbr(net.convtr5p8s2, net.bntr5, t, 3)
    t = seq(net.block6, torch.cat([t, b2], 1), 2)
    t, _ = cbr(net.convtr6p4s2, net.bntr6, t, 2)
    t = seq(net.block7, torch.cat([t, b1], 1), 1)
    t, _ = cbr(net.convtr7p2s2, net.bntr7, t, 1)
    t = seq(net.block8, torch.cat([t, p1], 1), 0)
    t, _ = conv(net.final, t, 0)
    return t


def randomize_bn(net):
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, ME.MinkowskiBatchNorm):
                m.bn.running_mean.uniform_(-0.2, 0.2)
                m.bn.running_var.uniform_(0.5, 1.5)
                m.bn.weight.uniform_(0.5, 1.5)
                m.bn.bias.uniform_(-0.2, 0.2)


@needs_scans
def test_minkunet_matches_dense_on_crop():
    coords, feats = load_scan(SCANNET, 6, 0.05)
    coords = coords - (np.median(coords, 0).astype(np.int32) // 16 * 16 - 16)
    keep = ((coords >= 0) & (coords < 32)).all(1)
    coords, feats = coords[keep], feats[keep] / 255.0
    uc, idx = np.unique(coords, axis=0, return_index=True)
    c = torch.from_numpy(np.concatenate([np.zeros((len(uc), 1), np.int32), uc], 1))
    f = torch.from_numpy(feats[idx]).double()
    assert len(c) > 500
    torch.manual_seed(2)
    net = MinkUNet14A(3, 7, D=3).double()
    randomize_bn(net)
    net.eval()
    x = ME.SparseTensor(f, c)
    with torch.no_grad():
        y = net(x)
        ref = dense_minkunet(net, x, 32)
    yc = y.C[:, 1:].long()
    r = ref[0][:, yc[:, 0], yc[:, 1], yc[:, 2]].t()
    err = (y.F - r).abs().max().item()
    print(f"MinkUNet14A on a {len(c)}-voxel ScanNet crop: max |sparse - dense| = {err:.3g} "
          f"(max |ref| {r.abs().max().item():.3g})")
    assert torch.equal(y.C, x.C)
    assert err < 1e-9


# ---- real scans --------------------------------------------------------------------

@needs_scans
@pytest.mark.parametrize("device", DEVICES)
def test_minkunet_scan_forward_backward(device):
    coords, feats = load_scan(SCANNET, 6, 0.05)
    q, f, inv = ME.utils.sparse_quantize(coords, feats / 255.0, return_inverse=True)
    c = ME.utils.batched_coordinates([q])
    x = ME.SparseTensor(torch.as_tensor(f), c, device=device)
    net = MinkUNet14(3, 20, D=3).to(device)
    counts = level_hooks(net)
    y = net(x)
    expect = me_level_counts(c.numpy())
    got = [counts[n][0] for n in ["conv0p1s1", "conv1p1s2", "conv2p2s2", "conv3p4s2",
                                  "conv4p8s2"]]
    print("MinkUNet14 ScanNet 5 cm per-level voxels", got, "numpy", expect)
    assert got == expect
    assert [counts[n][0] for n in ["convtr4p16s2", "convtr5p8s2", "convtr6p4s2",
                                   "convtr7p2s2"]] == expect[3::-1]
    # scaled coordinates and strides at each level, as ME reports them
    for n, lv in [("conv1p1s2", 1), ("conv4p8s2", 4), ("convtr6p4s2", 1)]:
        _, ts, C = counts[n]
        assert ts == 2 ** lv and bool((C[:, 1:] % ts == 0).all())
    assert y.F.shape == (len(c), 20) and torch.equal(y.C.cpu(), c)
    loss = torch.nn.functional.cross_entropy(y.F, torch.randint(0, 20, (len(c),),
                                                                device=device))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    # labels per point via the inverse map
    assert y.F[torch.as_tensor(inv, device=device)].shape[0] == len(coords)


@needs_scans
def test_minkunet_batch_of_two():
    a, fa = load_scan(SCANNET, 6, 0.05)
    b, fb = load_scan(KITTI, 4, 0.2)
    qa, fa = ME.utils.sparse_quantize(a, fa[:, :1] / 255.0)
    qb, fb = ME.utils.sparse_quantize(b, fb)
    c, f = ME.utils.sparse_collate([qa, qb], [torch.as_tensor(fa), torch.as_tensor(fb)])
    x = ME.SparseTensor(f.float(), c)
    net = MinkUNet14A(1, 5, D=3)
    counts = level_hooks(net)
    y = net(x)
    expect = me_level_counts(c.numpy())
    got = [counts[n][0] for n in ["conv0p1s1", "conv1p1s2", "conv2p2s2", "conv3p4s2",
                                  "conv4p8s2"]]
    print("MinkUNet14A batch (ScanNet 5 cm + SemanticKITTI 20 cm) per-level voxels", got)
    assert got == expect
    y.F.sum().backward()
    # each item alone gives the same output rows (BN in eval: no batch statistics)
    net.eval()
    with torch.no_grad():
        yb = net(ME.SparseTensor(f.float(), c)).F
        ya = net(ME.SparseTensor(torch.as_tensor(fa).float(),
                                 ME.utils.batched_coordinates([qa]))).F
    assert torch.allclose(yb[:len(qa)], ya, atol=1e-4, rtol=1e-4)


def test_state_dict_round_trip():
    torch.manual_seed(3)
    net = MinkUNet14A(3, 4, D=3)
    sd = net.state_dict()
    assert sd["conv0p1s1.kernel"].shape == (125, 3, 32)
    assert sd["conv1p1s2.kernel"].shape == (8, 32, 32)
    assert sd["final.kernel"].shape == (96, 4)          # ME's use_mm layout
    assert sd["final.bias"].shape == (1, 4)
    assert sd["block5.0.downsample.0.kernel"].shape == (256, 128)
    assert "bn0.bn.running_mean" in sd
    net2 = MinkUNet14A(3, 4, D=3)
    net2.load_state_dict(ME.convert_checkpoint({"state_dict": {"module." + k: v
                                                               for k, v in sd.items()}}))
    net.eval()
    net2.eval()
    c = torch.unique(torch.randint(0, 24, (400, 3)), dim=0)
    c = torch.cat([torch.zeros(len(c), 1, dtype=torch.long), c], 1)
    f = torch.randn(len(c), 3)
    with torch.no_grad():
        assert torch.equal(net(ME.SparseTensor(f, c)).F, net2(ME.SparseTensor(f, c)).F)


# ---- other layers and tensors ------------------------------------------------------

def test_sparse_tensor_scaled_coordinates_and_manager():
    c = torch.tensor([[0, 0, 0, 0], [0, 2, 4, 6], [1, 4, 4, 4]])
    x = ME.SparseTensor(torch.randn(3, 2), c, tensor_stride=2)
    assert x.tensor_stride == [2, 2, 2] and torch.equal(x.C, c.int())
    assert torch.equal(x.native.coords[:, 1:], (c[:, 1:] // 2).int())
    with pytest.raises(Exception):
        ME.SparseTensor(torch.randn(1, 2), torch.tensor([[0, 1, 0, 0]]), tensor_stride=2)
    y = ME.MinkowskiConvolution(2, 3, kernel_size=3, stride=2, dimension=3)(x)
    assert y.coordinate_manager is x.coordinate_manager and y.tensor_stride == [4, 4, 4]
    assert sorted(map(tuple, y.C.tolist())) == [(0, 0, 0, 0), (0, 0, 4, 4), (1, 4, 4, 4)]
    z = ME.SparseTensor(torch.ones(3, 2), coordinate_map_key=x.coordinate_map_key,
                        coordinate_manager=x.coordinate_manager)
    assert z.coordinate_map_key == x.coordinate_map_key
    w = x + z
    w += z
    assert torch.allclose(w.F, x.F + 2)
    assert ME.cat(x, z).F.shape == (3, 4)
    d, mn, ts = x.dense()
    assert d.shape[:2] == (2, 2) and ts == [2, 2, 2]


def test_quantization_modes_and_slice():
    pts = torch.tensor([[0, 0.2, 0.1, 0.3], [0, 0.7, 0.9, 0.2], [0, 1.5, 0.0, 0.0],
                        [1, 0.1, 0.1, 0.1]])
    f = torch.tensor([[1.0], [3.0], [5.0], [7.0]])
    tf = ME.TensorField(f, pts)
    s = tf.sparse()
    assert len(s) == 3 and s.F[:, 0].tolist() == [2.0, 5.0, 7.0]
    s2 = tf.sparse(quantization_mode=ME.SparseTensorQuantizationMode.RANDOM_SUBSAMPLE)
    assert s2.F[:, 0].tolist() == [1.0, 5.0, 7.0]
    back = s.slice(tf)
    assert back.F[:, 0].tolist() == [2.0, 2.0, 5.0, 7.0]
    s4 = tf.sparse(tensor_stride=2)
    assert s4.tensor_stride == [2, 2, 2] and len(s4) == 2
    # SparseTensor quantizes duplicates too
    st = ME.SparseTensor(f, pts.floor().int(),
                         quantization_mode=ME.SparseTensorQuantizationMode.UNWEIGHTED_AVERAGE)
    assert st.F[:, 0].tolist() == [2.0, 5.0, 7.0]
    q, idx, inv = ME.utils.sparse_quantize(pts[:, 1:].numpy(), return_index=True,
                                           return_inverse=True)
    assert len(q) == 2 and (q[inv] == np.floor(pts[:, 1:].numpy())).all()


def test_pooling_generative_pruning_global():
    torch.manual_seed(4)
    c = torch.unique(torch.randint(0, 12, (200, 3)), dim=0)
    c = torch.cat([torch.zeros(len(c), 1, dtype=torch.long), c], 1)
    x = ME.SparseTensor(torch.randn(len(c), 2, dtype=torch.float64), c)
    xd = to_dense(x, 12, 0)
    mask = to_dense(ME.SparseTensor(torch.ones(len(c), 1, dtype=torch.float64), c), 12, 0)
    # kernel == stride == 3 (odd): ME's stride map, each input in floor(c / 3)
    y = ME.MinkowskiSumPooling(kernel_size=3, stride=3, dimension=3)(x)
    lc = y.C[:, 1:].long() // 3
    ref = TF.avg_pool3d(xd, 3, divisor_override=1)[0][:, lc[:, 0], lc[:, 1], lc[:, 2]].t()
    assert torch.allclose(y.F, ref)
    ya = ME.MinkowskiAvgPooling(kernel_size=2, stride=2, dimension=3)(x)
    lc = ya.C[:, 1:].long() // 2
    n = TF.avg_pool3d(mask, 2, divisor_override=1)[0, 0][lc[:, 0], lc[:, 1], lc[:, 2]]
    s = TF.avg_pool3d(xd, 2, divisor_override=1)[0][:, lc[:, 0], lc[:, 1], lc[:, 2]].t()
    assert torch.allclose(ya.F, s / n[:, None])
    ym = ME.MinkowskiMaxPooling(kernel_size=2, stride=2, dimension=3)(x)
    assert len(ym) == len(ya)
    # generative transpose: every 2*c + j
    g = ME.MinkowskiGenerativeConvolutionTranspose(2, 3, kernel_size=2, stride=2,
                                                   dimension=3).double()
    yg = g(ym)
    assert len(yg) == 8 * len(ym) and yg.tensor_stride == [1, 1, 1]
    # pruning and global pooling
    keep = x.F[:, 0] > 0
    p = ME.MinkowskiPruning()(x, keep)
    assert len(p) == int(keep.sum()) and torch.equal(p.C, x.C[keep])
    gp = ME.MinkowskiGlobalPooling()(x)
    assert torch.allclose(gp.F, x.F.mean(0, keepdim=True))
    assert torch.allclose(ME.MinkowskiGlobalMaxPooling()(x).F, x.F.max(0, keepdim=True).values)
    # feature-wise wrappers
    for m in [ME.MinkowskiReLU(), ME.MinkowskiLeakyReLU(0.1), ME.MinkowskiELU(),
              ME.MinkowskiGELU(), ME.MinkowskiSigmoid(), ME.MinkowskiTanh(),
              ME.MinkowskiDropout(0.0), ME.MinkowskiLinear(2, 4).double(),
              ME.MinkowskiInstanceNorm(2).double()]:
        out = m(x)
        assert out.coordinate_map_key == x.coordinate_map_key and len(out) == len(x)
    inorm = ME.MinkowskiInstanceNorm(2).double()(x).F
    assert torch.allclose(inorm.mean(0), torch.zeros(2, dtype=torch.float64), atol=1e-9)


def test_conv_reads_the_kernel_as_stored():
    """A convolution's map numbers its offsets as ME does (kmap desc
    offset_order = X_FASTEST), so the library reads ``kernel`` as stored:
    no reordered copy exists to go stale, in-place updates, a replaced
    kernel and a dtype change take effect at once, and every output equals
    the default-order map's with the kernel reordered (to_voxconv_kernel)
    within the bound of two summation orders. Kernels whose two orders
    coincide (two axes of size 1) keep the default order, shared with
    native layers (issue 21: compat per-call overhead)."""
    from voxconv import _ops
    from voxconv.compat import minkowski as mink
    import ref
    torch.manual_seed(5)
    c = torch.unique(torch.randint(0, 6, (60, 3)), dim=0)
    c = torch.cat([torch.zeros(len(c), 1, dtype=torch.long), c], 1)
    f = torch.randn(len(c), 2, dtype=torch.float64)
    x = ME.SparseTensor(f, c)
    conv = ME.MinkowskiConvolution(2, 3, kernel_size=3, dimension=3).double()
    km, _ = mink._conv_map(x, conv.kernel_generator, False, False, False, None,
                           order=mink._offset_order((3, 3, 3)))
    assert km.offset_order == 1
    native = x.native
    km0, _ = native.manager.kernel_map(native.coordinate_set, vc_lib.KMAP_SUBMANIFOLD,
                                       (3, 3, 3), (1, 1, 1), (1, 1, 1))
    assert km0.offset_order == 0 and km0 is not km
    cfg = (None, None, None, 0, 0)

    def check(y, feats):
        w = ME.to_voxconv_kernel(conv.kernel.detach(), 3)
        want = _ops.conv(feats, w, km0, *cfg)
        s = _ops.conv(feats.abs(), w.abs(), km0, *cfg)
        ref.assert_same_sums(y, want, s, 27 * 2, dtype=feats.dtype)

    with torch.no_grad():
        check(conv(x).F, f)
        conv.kernel.mul_(2)
        check(conv(x).F, f)
        conv.kernel.data = conv.kernel.data * 0.5
        check(conv(x).F, f)
    conv.float()
    xf = ME.SparseTensor(f.float(), c)
    with torch.inference_mode():
        check(conv(xf).F, f.float())
    conv.kernel.requires_grad_(False)
    ff = f.float().requires_grad_(True)
    conv(ME.SparseTensor(ff, c)).F.sum().backward()
    assert ff.grad is not None and ff.grad.shape == ff.shape
    assert mink._offset_order((3, 1, 1)) == 0 and mink._offset_order((1, 1, 1)) == 0
    assert mink._offset_order((2, 2, 2)) == 1


def test_sparse_tensor_checks_coordinates_once():
    """ME.SparseTensor range-checks its coordinates once (in the duplicate
    search) and words a failure as before; duplicates are still merged."""
    with pytest.raises(vc_errors.OutOfRangeError,
                       match=r"SparseTensor: coords row 1: x=200000 outside"):
        ME.SparseTensor(torch.ones(2, 1), torch.tensor([[0, 1, 0, 0], [0, 200000, 0, 0]]))
    with pytest.raises(vc_errors.OutOfRangeError, match=r"merge_duplicates: coords row 0: batch"):
        ME.SparseTensor(torch.ones(1, 1), torch.tensor([[-1, 1, 0, 0]], dtype=torch.int32))
    # int64 values int32 cannot hold are refused, not wrapped (2**32 + 5 -> 5);
    # at a tensor stride the message names the level coordinate (-2**32 / 2)
    with pytest.raises(vc_errors.OutOfRangeError, match=r"row 1: x=4294967301 outside"):
        ME.SparseTensor(torch.ones(2, 1), torch.tensor([[0, 1, 0, 0], [0, 2**32 + 5, 0, 0]]))
    with pytest.raises(vc_errors.OutOfRangeError, match=r"row 0: y=-2147483648 outside"):
        ME.SparseTensor(torch.ones(1, 1), torch.tensor([[0, 2, -2**32, 0]]),
                        tensor_stride=2)
    with pytest.raises(vc_errors.InvalidArgumentError, match="manager is for meta"):
        ME.SparseTensor(torch.ones(1, 1), torch.tensor([[0, 1, 0, 0]]),
                        coordinate_manager=ME.CoordinateManager(device="meta"))
    c = torch.tensor([[0, 1, 0, 0], [0, 2, 0, 0], [0, 1, 0, 0]], dtype=torch.int32)
    x = ME.SparseTensor(torch.arange(3.).reshape(3, 1), c)
    assert x.C.tolist() == [[0, 1, 0, 0], [0, 2, 0, 0]] and x.F[:, 0].tolist() == [0.0, 1.0]
    assert x.unique_index.tolist() == [0, 1] and x.inverse_mapping.tolist() == [0, 1, 0]
    y = ME.SparseTensor(torch.ones(2, 1), c[:2])
    assert torch.equal(y.native.coords, c[:2])
    assert y.unique_index is None and y.inverse_mapping is None


def test_expand_coordinates_odd():
    c = torch.tensor([[0, 4, 4, 4], [0, 9, 4, 4]])
    x = ME.SparseTensor(torch.ones(2, 1), c)
    y = ME.MinkowskiConvolution(1, 1, kernel_size=3, expand_coordinates=True, dimension=3)(x)
    assert len(y) == 54
    y2 = ME.MinkowskiConvolution(1, 1, kernel_size=3, stride=2, expand_coordinates=True,
                                 dimension=3)(x)
    exp = set()
    for r in c.tolist():
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                for dz in (-1, 0, 1):
                    p = (r[1] + dx, r[2] + dy, r[3] + dz)
                    if all(v % 2 == 0 for v in p):
                        exp.add((0,) + p)
    assert set(map(tuple, y2.C.tolist())) == exp
    with pytest.raises(NotImplementedError):
        ME.MinkowskiConvolution(1, 1, kernel_size=2, expand_coordinates=True, dimension=3)(x)


def test_training_through_the_me_order_map_matches_explicit_reorder(device):
    """In training the layer reads its kernel in ME's offset order through
    an x-fastest map (no reorder inside or outside autograd). Outputs,
    first and second derivatives (input and kernel) equal those of the
    default-order map with the kernel reordered by an explicit index_select
    autograd op, within the bound of two summation orders (the same
    products; the library sums them per offset index, and the indices
    differ)."""
    from voxconv import _ops
    from voxconv.compat import minkowski as mink
    import ref
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    conv = ME.MinkowskiConvolution(4, 6, kernel_size=3, dimension=3).to(device, dtype)
    c = torch.unique(torch.cat([torch.randint(0, 2, (300, 1)),
                                torch.randint(0, 10, (300, 3))], 1), dim=0).int()
    x = ME.SparseTensor(torch.randn(len(c), 4, dtype=dtype), c, device=str(device))
    kg = conv.kernel_generator
    km, _ = mink._conv_map(x, kg, False, False, False, None, order=1)
    km0, _ = mink._conv_map(x, kg, False, False, False, None)
    perm = mink._perm_on((3, 3, 3), conv.kernel.device)
    cfg = (None, None, None, 0, 1)
    g = torch.randn(km.n_out, 6, dtype=dtype, device=device)

    def grads(kmap, w_of):
        f = x.F.detach().clone().requires_grad_()
        y = _ops.conv(f, w_of(), kmap, *cfg)
        (gx,) = torch.autograd.grad(y, f, g, create_graph=True)
        gw1 = torch.autograd.grad(y, conv.kernel, g, retain_graph=True)[0]
        gw2 = torch.autograd.grad(gx.square().sum(), conv.kernel)[0]
        return y.detach(), gx.detach(), gw1, gw2

    km.wait()
    km0.wait()
    for _ in range(2):  # every pass tuned first (see the spconv twin of this test)
        grads(km, lambda: conv.kernel)
        grads(km0, lambda: conv.kernel.index_select(0, perm))
    got = grads(km, lambda: conv.kernel)
    want = grads(km0, lambda: conv.kernel.index_select(0, perm))
    w = conv.kernel.detach().index_select(0, perm).abs()
    fa, ga = x.F.detach().abs(), g.abs()
    ref.assert_same_sums(got[0], want[0], _ops._conv_fwd(fa, w, km0, cfg, False), 27 * 4,
                         dtype=dtype)
    ref.assert_same_sums(got[1], want[1], _ops._conv_dgrad(ga, w, km0, cfg), 27 * 6,
                         dtype=dtype)
    for gw, gx in ((2, None), (3, got[1])):
        s = _ops._conv_wgrad(fa if gx is None else (2 * gx).abs(), ga, km0, cfg)
        ref.assert_same_sums(got[gw].index_select(0, perm), want[gw].index_select(0, perm),
                             s, km.n_out, dtype=dtype)
    assert got[3].abs().sum() > 0
    y = conv(ME.SparseTensor(x.F.detach().clone().requires_grad_(), c,
                             device=str(device))).F
    torch.testing.assert_close(y.detach(), got[0])
