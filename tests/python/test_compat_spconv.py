"""voxconv.compat.spconv: spconv 2.x's API. Re-creations of OpenPCDet's
VoxelBackBone8x, VoxelResBackBone8x and UNetV2 and Pointcept's SpUNet-v1m1,
written as the upstream files are (only the imports changed), run on the real
scans of ../shared/data: per-level voxel counts against the rule computed
here in numpy, the whole network against a dense float64 evaluation with
torch's conv3d / conv_transpose3d (same weights, masked to the sparse output
set after each layer, BatchNorm in eval mode), forward + backward on batches
of scans, and state_dicts in spconv's layout."""

import os
import types

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as tF

import voxconv.compat.spconv as compat_spconv
from voxconv import _ops as voxconv_ops

import ref

# The re-created upstream models (written against `import spconv.pytorch as spconv`,
# i.e. voxconv.compat.spconv) and their data pipelines, shared with
# bench/compat_bench.py.
from ports_spconv import (GRID_SIZE, VOXEL_SIZE, SpUNetBase, UNetV2, VoxelBackBone8x,
                          VoxelResBackBone8x, batch_of, load_scan, voxelize_pcdet)
from ports_spconv import pcdet_input as _pcdet_input
from ports_spconv import pointcept_voxelize as _pointcept_voxelize
from ports_spconv import spunet_input as _spunet_input

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.environ.get("VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
SCANS = os.path.join(DATA, "scans")
SEMKITTI = os.path.join(SCANS, "semantickitti_00_000000.bin")
KITTI0 = os.path.join(SCANS, "kitti_000000.bin")
KITTI8 = os.path.join(SCANS, "kitti_000008.bin")
needs_scans = pytest.mark.skipif(
    not all(os.path.exists(p) for p in (SEMKITTI, KITTI0, KITTI8)),
    reason=f"real scans (semantickitti_00_000000.bin, kitti_000000.bin, kitti_000008.bin) "
           f"not found under {SCANS}: set VOXCONV_DATA_DIR")


# ---- the rule, in numpy -------------------------------------------------------------

def expanding_rule(idx, shape, k, s, p, d=(1, 1, 1)):
    """spconv's regular-conv output set: every o with s*o - p + j*d an input
    (per axis, same batch), 0 <= o < (in + 2p - d(k-1) - 1)//s + 1. Returns
    (sorted unique [M, 4] int64, out_shape)."""
    c = np.asarray(idx, dtype=np.int64)
    out_shape = [(shape[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(3)]
    outs = []
    for j0 in range(k[0]):
        for j1 in range(k[1]):
            for j2 in range(k[2]):
                j = np.array([j0, j1, j2])
                num = c[:, 1:] + np.asarray(p) - j * np.asarray(d)
                ok = (num % np.asarray(s) == 0).all(1)
                o = num // np.asarray(s)
                ok &= ((o >= 0) & (o < np.asarray(out_shape))).all(1)
                outs.append(np.concatenate([c[ok, :1], o[ok]], 1))
    return np.unique(np.concatenate(outs), axis=0), out_shape


def pcdet_levels(idx, sparse_shape, last_pad=0):
    """Per-level voxel sets of VoxelBackBone8x (x_conv1..x_conv4, out)."""
    levels = [np.unique(np.asarray(idx, dtype=np.int64), axis=0)]
    shape = list(sparse_shape)
    for k, s, p in [((3, 3, 3), (2, 2, 2), (1, 1, 1)), ((3, 3, 3), (2, 2, 2), (1, 1, 1)),
                    ((3, 3, 3), (2, 2, 2), (0, 1, 1)),
                    ((3, 1, 1), (2, 1, 1), (last_pad,) * 3)]:
        nxt, shape = expanding_rule(levels[-1], shape, k, s, p)
        levels.append(nxt)
    return levels, shape


def rows(t):
    return np.asarray(t.indices.cpu(), dtype=np.int64)


def sorted_rows(t):
    r = rows(t)
    return r[np.lexsort(r.T[::-1])]


# ---- dense float64 reference ---------------------------------------------------------
# The same model objects run with a dense stand-in for SparseConvTensor (a grid and a
# mask): every compat convolution is replaced by torch's conv3d / conv_transpose3d on
# the grid with the layer's own weight, the output masked to the output set that a
# dense evaluation defines (SubM: the input set; conv: cells the kernel reaches from
# the input mask; inverse: the registered layer's input mask). Feature-wise modules
# see the masked cells in (b, i0, i1, i2) order. No voxconv code is involved.

_SparseConvTensor = compat_spconv.SparseConvTensor
_conv_forward = compat_spconv.SparseConvolution.forward


class DenseT(_SparseConvTensor):
    box = None  # grid extent cap per axis (cells beyond it are never reached)

    def __init__(self, features, indices, spatial_shape, batch_size, **kwargs):
        ss = [int(v) for v in spatial_shape]
        g = ss if DenseT.box is None else [min(a, b) for a, b in zip(ss, DenseT.box)]
        idx = indices.long()
        grid = features.new_zeros(batch_size, *g, features.shape[1])
        grid[idx[:, 0], idx[:, 1], idx[:, 2], idx[:, 3]] = features
        mask = torch.zeros(batch_size, *g, dtype=torch.bool, device=features.device)
        mask[idx[:, 0], idx[:, 1], idx[:, 2], idx[:, 3]] = True
        self._init(grid, mask, ss, batch_size, {})

    def _init(self, grid_cl, mask, ss, bs, d):
        self.grid_cl, self.mask = grid_cl, mask
        self.spatial_shape, self.batch_size, self.indice_dict = ss, bs, d
        self.grid = self.voxel_num = None

    @classmethod
    def _new(cls, grid_cl, mask, ss, bs, d):
        t = object.__new__(cls)
        t._init(grid_cl, mask, ss, bs, d)
        return t

    @property
    def features(self):
        return self.grid_cl[self.mask]

    @property
    def indices(self):
        return self.mask.nonzero().int()

    def replace_feature(self, f):
        g = f.new_zeros(*self.mask.shape, f.shape[1])
        g = g.index_put(tuple(self.mask.nonzero().t()), f)
        return DenseT._new(g, self.mask, self.spatial_shape, self.batch_size,
                           self.indice_dict)

    def dense(self, channels_first=True):
        return self.grid_cl.permute(0, 4, 1, 2, 3) if channels_first else self.grid_cl


def _dense_conv_forward(self, input, add_input=None):
    if not isinstance(input, DenseT):
        return _conv_forward(self, input, add_input)
    ks, st, pd, dl = self.kernel_size, self.stride, self.padding, self.dilation
    if self.conv1x1:  # spconv: features @ weight.view(in, out)
        f = input.features @ self.weight.view(self.in_channels, self.out_channels)
        if self.bias is not None:
            f = f + self.bias
        return input.replace_feature(f)
    x = input.grid_cl.permute(0, 4, 1, 2, 3)
    W = self.weight
    d = input.indice_dict
    m_in = input.mask[:, None].to(x.dtype)
    if self.inverse:
        datas = d[self.indice_key]
        # output_padding restores the cells torch's symmetric crop drops
        # (spconv's inverse reaches all of the forward's input grid)
        tgt = datas.in_mask.shape[1:]
        op = [t - ((o - 1) * s - 2 * p + di * (k - 1) + 1) for t, o, s, p, di, k in
              zip(tgt, x.shape[2:], datas.stride, datas.padding, datas.dilation, ks)]
        y = tF.conv_transpose3d(x, W.permute(4, 0, 1, 2, 3), stride=datas.stride,
                                padding=datas.padding, dilation=datas.dilation,
                                output_padding=op)
        m, ss = datas.in_mask, datas.spatial_shape
    elif self.subm:
        y = tF.conv3d(x, W.permute(0, 4, 1, 2, 3), padding=[(k - 1) // 2 * di for k, di in
                                                           zip(ks, dl)], dilation=dl)
        m, ss = input.mask, input.spatial_shape
    elif self.transposed:
        Wt = W.permute(4, 0, 1, 2, 3)
        y = tF.conv_transpose3d(x, Wt, stride=st, padding=pd, dilation=dl,
                                output_padding=self.output_padding)
        m = tF.conv_transpose3d(m_in, torch.ones(1, 1, *ks, dtype=x.dtype), stride=st,
                                padding=pd, dilation=dl,
                                output_padding=self.output_padding)[:, 0] > 0
        ss = [(a - 1) * s - 2 * p + k + o for a, s, p, k, o in
              zip(input.spatial_shape, st, pd, ks, self.output_padding)]
    else:
        y = tF.conv3d(x, W.permute(0, 4, 1, 2, 3), stride=st, padding=pd, dilation=dl)
        m = tF.conv3d(m_in, torch.ones(1, 1, *ks, dtype=x.dtype), stride=st, padding=pd,
                      dilation=dl)[:, 0] > 0
        ss = [(a + 2 * p - di * (k - 1) - 1) // s + 1 for a, p, di, k, s in
              zip(input.spatial_shape, pd, dl, ks, st)]
    y = y.permute(0, 2, 3, 4, 1) * m[..., None]
    if self.bias is not None:
        y = y + self.bias * m[..., None]
    if self.indice_key is not None and self.indice_key not in d and not self.inverse:
        d = dict(d)
        d[self.indice_key] = types.SimpleNamespace(
            in_mask=input.mask, spatial_shape=input.spatial_shape, stride=st, padding=pd,
            dilation=dl)
    return DenseT._new(y, m, ss, input.batch_size, d)


@pytest.fixture
def dense_reference(monkeypatch):
    """Within the test, models run on DenseT inputs densely (see above)."""
    monkeypatch.setattr(compat_spconv, "SparseConvTensor", DenseT)
    monkeypatch.setattr(compat_spconv.SparseConvolution, "forward", _dense_conv_forward)
    yield DenseT
    DenseT.box = None


def at(dense_t, sparse_t):
    """The dense tensor's features at the sparse tensor's rows."""
    i = sparse_t.indices.long().cpu()
    return dense_t.grid_cl[i[:, 0], i[:, 1], i[:, 2], i[:, 3]]


def randomize_bn(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=gen) * 0.1)


def max_rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# ---- tests ---------------------------------------------------------------------------

RESULTS = {}  # model -> notes, printed by test_zz_report (pytest -s shows them)


@needs_scans
@pytest.mark.parametrize("model_cls", [VoxelBackBone8x, VoxelResBackBone8x])
def test_pcdet_backbone_levels_full_scan(device, model_cls):
    """The whole SemanticKITTI scan, OpenPCDet's KITTI grid: per-level voxel
    sets equal the numpy rule; conv_out has spconv's 2 z planes and dense()
    is [B, 128, 2, 200, 176]; backward reaches every weight."""
    cloud = voxelize_pcdet(load_scan(SEMKITTI))
    model = model_cls({}, 4, GRID_SIZE).to(device)
    assert list(model.sparse_shape) == [41, 1600, 1408]
    bd = model(_pcdet_input([cloud], device))
    feats = bd["multi_scale_3d_features"]
    got = [feats[k] for k in ("x_conv1", "x_conv2", "x_conv3", "x_conv4")]
    got.append(bd["encoded_spconv_tensor"])
    want, shape = pcdet_levels(batch_of([cloud])[0].numpy(), model.sparse_shape)
    for t, w in zip(got, want):
        assert np.array_equal(sorted_rows(t), w)
    out = bd["encoded_spconv_tensor"]
    assert out.spatial_shape == [2, 200, 176] == shape
    assert tuple(out.dense().shape) == (1, 128, 2, 200, 176)
    out.features.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    RESULTS[f"{model_cls.__name__} levels ({device})"] = " / ".join(
        f"{len(t.indices):,}" for t in got)


@needs_scans
def test_pcdet_batch_of_scans(device):
    """Three scans in one batch, forward and backward; each level's set per
    batch item is the rule's."""
    clouds = [voxelize_pcdet(load_scan(p)) for p in (SEMKITTI, KITTI0, KITTI8)]
    model = VoxelBackBone8x({}, 4, GRID_SIZE).to(device)
    bd = model(_pcdet_input(clouds, device))
    out = bd["encoded_spconv_tensor"]
    want, _ = pcdet_levels(batch_of(clouds)[0].numpy(), model.sparse_shape)
    assert np.array_equal(sorted_rows(out), want[-1])
    assert np.array_equal(sorted_rows(bd["multi_scale_3d_features"]["x_conv3"]), want[2])
    assert tuple(out.dense().shape) == (3, 128, 2, 200, 176)
    (out.features ** 2).mean().backward()
    assert model.conv_input[0].weight.grad.abs().sum() > 0
    RESULTS[f"VoxelBackBone8x batch of 3 ({device})"] = " / ".join(
        f"{len(w):,}" for w in want) + " (per item: " + "; ".join(
        " / ".join(str(int((w[:, 0] == b).sum())) for w in want) for b in range(3)) + ")"


def _crop(points, x0, y0, size=2.4):
    rng = [x0, y0, -3.0, x0 + size, y0 + size, 1.0]
    g = np.array([round(size / 0.05), round(size / 0.05), 40])
    return voxelize_pcdet(points, rng, VOXEL_SIZE, g), rng, g


@needs_scans
@pytest.mark.parametrize("model_cls", [VoxelBackBone8x, VoxelResBackBone8x, UNetV2])
def test_pcdet_models_match_dense_reference(model_cls, dense_reference):
    """A 2.4 m x 2.4 m crop (48 x 48 x 41 cells, two scans in a batch): the
    whole network in float64, eval-mode BN with random statistics, against
    the dense evaluation (conv3d / conv_transpose3d, masked per layer).
    CPU only: float64 is the CPU reference path; what this checks (voxel
    sets, conventions, weight layouts) does not depend on the backend, and
    the CUDA arithmetic of these layers is checked layer by layer against
    float64 (test_expanding.py, test_backend_ops)."""
    device = "cpu"
    gen = torch.Generator().manual_seed(0)
    (c1, rng, g) = _crop(load_scan(SEMKITTI), 6.0, -1.2)
    (c2, _, _) = _crop(load_scan(KITTI0), 6.0, -1.2)
    assert len(c1[0]) > 500 and len(c2[0]) > 200
    kw = {"voxel_size": VOXEL_SIZE, "point_cloud_range": rng} if model_cls is UNetV2 else {}
    torch.manual_seed(0)
    model = model_cls({}, 4, g, **kw).double()
    randomize_bn(model, gen)
    model.eval()
    sparse_in = _pcdet_input([c1, c2], "cpu", torch.float64)
    dense_in = dict(sparse_in)
    model_dev = model.to(device)
    sp = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in sparse_in.items()}
    # sparse run (the real compat layer): done before the fixture's patch applies?
    # No: the fixture patched SparseConvTensor, so build the sparse tensors by hand
    # through the original class.
    orig_cls = _SparseConvTensor
    compat_spconv.SparseConvTensor = orig_cls
    compat_spconv.SparseConvolution.forward = _conv_forward
    with torch.no_grad():
        bd = model_dev(sp)
    compat_spconv.SparseConvTensor = DenseT
    compat_spconv.SparseConvolution.forward = _dense_conv_forward
    model_cpu = model_dev.cpu()
    with torch.no_grad():
        bdd = model_cpu(dense_in)
    worst = 0.0
    pairs = [(bd["encoded_spconv_tensor"], bdd["encoded_spconv_tensor"])]
    for k in ("x_conv1", "x_conv2", "x_conv3", "x_conv4"):
        if "multi_scale_3d_features" in bd:
            pairs.append((bd["multi_scale_3d_features"][k], bdd["multi_scale_3d_features"][k]))
    for s, d in pairs:
        assert np.array_equal(sorted_rows(s), rows(d)), "voxel sets differ"
        err = max_rel(s.features.cpu(), at(d, s))
        worst = max(worst, err)
    if model_cls is UNetV2:
        # point_features: rows of x_up1 (the input set, input order)
        want = bdd["point_features"]
        assert want.shape == bd["point_features"].shape
        i = sp["voxel_coords"].long().cpu()
        order = np.lexsort(i.numpy().T[::-1])
        got = bd["point_features"].cpu()[torch.from_numpy(order)]
        worst = max(worst, max_rel(got, want))
    assert worst < 1e-9, worst
    RESULTS[f"{model_cls.__name__} vs dense fp64 ({device})"] = (
        f"crop {len(c1[0])}+{len(c2[0])} voxels, max rel diff {worst:.2e}")


@needs_scans
def test_spunet_full_scans_forward_backward(device):
    """SpUNet-v1m1 (Pointcept's default channels and layers) on two real scans
    at 0.1 m: each stride-2 level (k = s = 2) is unique(floor(c / 2)) per
    batch item, the output has one row per input voxel, gradients flow."""
    clouds = [_pointcept_voxelize(load_scan(p), 0.1) for p in (KITTI8, SEMKITTI)]
    model = SpUNetBase(4, 19).to(device)
    levels = []
    hooks = [m.register_forward_hook(lambda m, i, o: levels.append(o)) for m in model.down]
    out = model(_spunet_input(clouds, device))
    for h in hooks:
        h.remove()
    n = sum(len(c) for c, _ in clouds)
    assert tuple(out.shape) == (n, 19)
    idx = np.concatenate([np.concatenate([np.full((len(c), 1), b), c], 1)
                          for b, (c, _) in enumerate(clouds)])
    counts = []
    for t in levels:
        idx = np.unique(np.concatenate([idx[:, :1], idx[:, 1:] // 2], 1), axis=0)
        assert np.array_equal(sorted_rows(t), idx)
        counts.append(len(idx))
    out.square().mean().backward()
    assert model.conv_input[0].weight.grad is not None
    assert model.final.weight.grad is not None
    RESULTS[f"SpUNet-v1m1 levels ({device})"] = f"{n:,} / " + " / ".join(
        f"{c:,}" for c in counts)


@needs_scans
def test_spunet_matches_dense_reference(dense_reference):
    """SpUNet-v1m1 (smaller channels so the dense reference stays small;
    same code paths: k=5 stem, 1x1 projections, k=s=2 down, inverse up) on
    a crop of two scans, float64, eval-mode BN with random statistics.
    CPU only, as test_pcdet_models_match_dense_reference."""
    device = "cpu"
    gen = torch.Generator().manual_seed(1)
    clouds = []
    for p in (SEMKITTI, KITTI0):
        pts = load_scan(p)
        m = (pts[:, 0] > 6) & (pts[:, 0] < 8.4) & (np.abs(pts[:, 1]) < 1.2)
        clouds.append(_pointcept_voxelize(pts[m], 0.1))
    torch.manual_seed(1)
    model = SpUNetBase(4, 5, base_channels=8, channels=(8, 16, 16, 16, 16, 16, 8, 8),
                       layers=(1, 2, 1, 1, 1, 1, 2, 1)).double()
    randomize_bn(model, gen)
    model.eval()
    inp = _spunet_input(clouds, "cpu", torch.float64)
    compat_spconv.SparseConvTensor = _SparseConvTensor
    compat_spconv.SparseConvolution.forward = _conv_forward
    with torch.no_grad():
        got = model.to(device)({k: v.to(device) for k, v in inp.items()}).cpu()
    compat_spconv.SparseConvTensor = DenseT
    compat_spconv.SparseConvolution.forward = _dense_conv_forward
    # cells beyond max + 8 are never reached (k <= 5): cap the dense grid there
    # (rounded up to a multiple of 16 = 2^4 levels, at least 32)
    DenseT.box = [max(32, (int(v) + 8 + 15) // 16 * 16) for v in inp["grid_coord"].max(0).values]
    with torch.no_grad():
        want = model.cpu()(inp)
    # the sparse rows follow the input order; the dense ones (b, x, y, z) order
    b = torch.repeat_interleave(torch.arange(2), torch.tensor([len(c) for c, _ in clouds]))
    key = torch.cat([b[:, None], inp["grid_coord"]], 1).numpy()
    order = torch.from_numpy(np.lexsort(key.T[::-1]))
    err = max_rel(got[order], want)
    assert err < 1e-9, err
    RESULTS[f"SpUNet-v1m1 vs dense fp64 ({device})"] = (
        f"crop {len(clouds[0][0])}+{len(clouds[1][0])} voxels, max rel diff {err:.2e}")


# ---- state dicts, API semantics ----------------------------------------------------

def _small_net():
    spconv = compat_spconv
    return spconv.SparseSequential(
        spconv.SubMConv3d(4, 8, 3, bias=False, indice_key="a"),
        nn.BatchNorm1d(8),
        nn.ReLU(),
        spconv.SparseConv3d(8, 6, 3, stride=2, padding=1, indice_key="down"),
        spconv.SubMConv3d(6, 5, 1),
        spconv.SparseInverseConv3d(5, 3, 3, indice_key="down"))


def _rand_input(n=300, shape=(12, 10, 14), batches=2, dtype=torch.float64, device="cpu"):
    b = torch.randint(0, batches, (n, 1))
    c = torch.cat([b] + [torch.randint(0, s, (n, 1)) for s in shape], 1)
    c = torch.unique(c, dim=0).int()
    return compat_spconv.SparseConvTensor(torch.randn(len(c), 4, dtype=dtype).to(device),
                                          c.to(device), list(shape), batches)


def test_state_dict_round_trip_on_the_device(device):
    """A state_dict saved on the device loads into a fresh network (CPU or
    another device) value for value, and the loaded network runs there.
    The arithmetic of the layers on CUDA is checked against float64 dense
    references layer by layer (test_transposed_matches_conv_transpose3d,
    test_expanding.py, test_backend_ops)."""
    dt = ref.widest_dtype(device)
    net = _small_net().to(device, dt).eval()
    sd = net.state_dict()
    assert tuple(sd["0.weight"].shape) == (8, 3, 3, 3, 4)
    net2 = _small_net().to(dt)
    net2.load_state_dict({k: v.cpu() for k, v in sd.items()})
    for k, v in net2.state_dict().items():
        assert torch.equal(v, sd[k].cpu()), k
    net2.to(device).eval()
    x = _rand_input(dtype=dt, device=device)
    with torch.no_grad():
        a, b = net(x), net2(x)
    assert torch.equal(a.indices.cpu(), b.indices.cpu())
    assert torch.isfinite(b.features).all()


def test_state_dict_round_trip_and_spconv_layout():
    """CPU, float64 (the reference path): spconv's layout by hand against
    dense torch ops, layer by layer."""
    device = "cpu"
    net = _small_net().double()
    sd = net.state_dict()
    assert tuple(sd["0.weight"].shape) == (8, 3, 3, 3, 4)  # spconv's [out, k0, k1, k2, in]
    assert tuple(sd["4.weight"].shape) == (5, 1, 1, 1, 6)
    assert tuple(sd["5.weight"].shape) == (3, 3, 3, 3, 5)
    net2 = _small_net().double()
    net2.load_state_dict(sd)
    net.eval(), net2.eval()
    x = _rand_input(device=device)
    net.to(device), net2.to(device)
    torch.testing.assert_close(net(x).features, net2(x).features, rtol=0, atol=0)
    # a state_dict in spconv's layout, built by hand
    g = torch.Generator().manual_seed(3)
    hand = {"0.weight": torch.randn(8, 3, 3, 3, 4, generator=g, dtype=torch.float64),
            "1.weight": torch.rand(8, generator=g, dtype=torch.float64) + 0.5,
            "1.bias": torch.randn(8, generator=g, dtype=torch.float64),
            "1.running_mean": torch.randn(8, generator=g, dtype=torch.float64),
            "1.running_var": torch.rand(8, generator=g, dtype=torch.float64) + 0.5,
            "1.num_batches_tracked": torch.tensor(7),
            "3.weight": torch.randn(6, 3, 3, 3, 8, generator=g, dtype=torch.float64),
            "3.bias": torch.randn(6, generator=g, dtype=torch.float64),
            "4.weight": torch.randn(5, 1, 1, 1, 6, generator=g, dtype=torch.float64),
            "4.bias": torch.randn(5, generator=g, dtype=torch.float64),
            "5.weight": torch.randn(3, 3, 3, 3, 5, generator=g, dtype=torch.float64),
            "5.bias": torch.randn(3, generator=g, dtype=torch.float64)}
    net3 = _small_net().double()
    net3.load_state_dict(hand)
    net3.eval().to(device)
    # by hand, layer by layer, with dense torch ops (x: input grid)
    dx = x.dense().cpu()
    m0 = (dx.abs().sum(1) > 0)
    y = tF.conv3d(dx, hand["0.weight"].permute(0, 4, 1, 2, 3), padding=1) * m0[:, None]
    y = ((y - hand["1.running_mean"][:, None, None, None])
         / torch.sqrt(hand["1.running_var"][:, None, None, None] + 1e-5)
         * hand["1.weight"][:, None, None, None] + hand["1.bias"][:, None, None, None])
    y = torch.relu(y) * m0[:, None]
    m1 = tF.conv3d(m0[:, None].double(), torch.ones(1, 1, 3, 3, 3, dtype=torch.float64),
                   stride=2, padding=1)[:, 0] > 0
    y = (tF.conv3d(y, hand["3.weight"].permute(0, 4, 1, 2, 3), hand["3.bias"], stride=2,
                   padding=1)) * m1[:, None]
    # spconv's 1x1: features @ weight.view(in, out) (the storage read as [in, out])
    y = (torch.einsum("bcxyz,cd->bdxyz", y, hand["4.weight"].view(6, 5))
         + hand["4.bias"][:, None, None, None]) * m1[:, None]
    op = [t - ((o - 1) * 2 - 2 + 2 + 1) for t, o in zip(dx.shape[2:], y.shape[2:])]
    y = tF.conv_transpose3d(y, hand["5.weight"].permute(4, 0, 1, 2, 3), stride=2, padding=1,
                            output_padding=op)
    y = (y + hand["5.bias"][:, None, None, None]) * m0[:, None]
    out = net3(x)
    assert out.spatial_shape == x.spatial_shape
    assert torch.equal(out.indices.cpu(), x.indices.cpu())
    i = out.indices.long().cpu()
    torch.testing.assert_close(out.features.cpu(), y[i[:, 0], :, i[:, 1], i[:, 2], i[:, 3]],
                               rtol=1e-10, atol=1e-10)


def test_api_semantics():
    spconv = compat_spconv
    import voxconv.compat.spconv.pytorch as sp2
    from voxconv.compat.spconv import pytorch as sp3
    assert sp2 is spconv and sp3 is spconv
    x = _rand_input(dtype=torch.float32)
    with pytest.raises(ValueError, match="replace_feature"):
        x.features = x.features * 2
    y = x.replace_feature(x.features * 2)
    assert y.indices is x.indices and y.spatial_shape == x.spatial_shape
    d = x.dense()
    assert tuple(d.shape) == (2, 4, 12, 10, 14)
    assert tuple(x.dense(channels_first=False).shape) == (2, 12, 10, 14, 4)
    i = x.indices.long()
    torch.testing.assert_close(d[i[:, 0], :, i[:, 1], i[:, 2], i[:, 3]], x.features)
    conv = spconv.SubMConv3d(4, 4, 3, indice_key="k")
    assert isinstance(conv, spconv.SparseConvolution) and isinstance(conv, spconv.SparseModule)
    assert spconv.is_spconv_module(conv) and spconv.is_sparse_conv(conv)
    a = conv(x)
    assert "k" in a.indice_dict and "k" not in x.indice_dict
    # SubM reuse by key: same map; a different kernel size under the key fails
    b = spconv.SubMConv3d(4, 4, 3, indice_key="k")(a)
    assert b.indice_dict["k"] is a.indice_dict["k"]
    with pytest.raises(ValueError, match="kernel"):
        spconv.SubMConv3d(4, 4, 5, indice_key="k")(a)
    # a regular conv cannot reuse a key
    with pytest.raises(AssertionError):
        spconv.SparseConv3d(4, 4, 3, 2, indice_key="k")(a)
    with pytest.raises(AssertionError):
        spconv.SparseInverseConv3d(4, 4, 3, indice_key="nope")(a)
    down = spconv.SparseConv3d(4, 8, 3, 2, padding=1, indice_key="d")(a)
    assert down.spatial_shape == [6, 5, 7]
    with pytest.raises(ValueError, match="kernel"):
        spconv.SparseInverseConv3d(8, 4, 2, indice_key="d")(down)
    up = spconv.SparseInverseConv3d(8, 4, 3, indice_key="d")(down)
    assert up.spatial_shape == x.spatial_shape and torch.equal(up.indices, x.indices)
    # max pooling: spconv's output set and the max over each window
    p = spconv.SparseMaxPool3d(3, 2, padding=1)(x)
    want, shape = expanding_rule(rows(x), x.spatial_shape, (3, 3, 3), (2, 2, 2), (1, 1, 1))
    assert np.array_equal(sorted_rows(p), want) and p.spatial_shape == shape
    dm = tF.max_pool3d(torch.where(d != 0, d, torch.full_like(d, -1e30)), 3, 2, padding=1)
    j = p.indices.long()
    torch.testing.assert_close(p.features, dm[j[:, 0], :, j[:, 1], j[:, 2], j[:, 3]])
    # transposed: every s*i - p + j*d inside spconv's output shape
    t = spconv.SparseConvTranspose3d(4, 3, 3, 2, padding=1)(x)
    assert t.spatial_shape == [23, 19, 27]
    # SparseSequential applies torch modules to features; spconv.Identity passes through
    seq = spconv.SparseSequential(nn.ReLU(), spconv.Identity(), spconv.ToDense())
    torch.testing.assert_close(seq(x), torch.relu(d))
    # global pooling and AddTable / JoinTable
    g = spconv.SparseGlobalMaxPool()(x)
    assert tuple(g.shape) == (2, 4)
    s = spconv.AddTable()([x, y])
    torch.testing.assert_close(s.features, x.features * 3)
    assert spconv.JoinTable()([x, y]).features.shape[1] == 8


def test_weight_layout_is_a_view_of_the_library_layout():
    """The parameter has spconv's shape over voxconv's [K, in, out] memory, so
    the library reads it without a copy; a contiguous replacement still works
    (converted per call) and gives the same result."""
    spconv = compat_spconv
    m = spconv.SparseConv3d(4, 6, 3, 2, padding=1).double()
    assert tuple(m.weight.shape) == (6, 3, 3, 3, 4)
    with torch.no_grad():
        lw = m._layout().to_lib(m.weight)
    assert lw.is_contiguous() and lw.data_ptr() == m.weight.data_ptr()
    x = _rand_input()
    y1 = m(x).features
    m.weight.data = m.weight.data.contiguous()
    assert not m._layout().to_lib(m.weight).is_contiguous()  # converted from now on
    torch.testing.assert_close(m(x).features, y1, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(m(x).features, y1, rtol=0, atol=0)
    # gradients reach the parameter in its own shape
    m2 = spconv.SparseConv3d(4, 6, 3, 2, padding=1).double()
    m2(x).features.sum().backward()
    assert m2.weight.grad.shape == m2.weight.shape


def test_library_weight_cache_follows_the_weight():
    """Without autograd the layer hands the library a kept [K, in, out]
    view (no view ops per call; _ops.PermutedLayout); in-place updates, a
    replaced weight and a dtype change are seen, a recording call leaves
    nothing stale behind, and a weight kept under inference_mode is not the
    one a frozen layer saves for backward (issue 21: compat per-call
    overhead)."""
    spconv = compat_spconv
    torch.manual_seed(3)
    m = spconv.SubMConv3d(4, 5, 3, bias=False, indice_key="k").double()
    x = _rand_input()
    y_rec = m(x).features.detach()
    with torch.no_grad():
        y0 = m(x).features
        lw = m._layout().to_lib(m.weight)
        assert m._layout().to_lib(m.weight) is lw and lw.data_ptr() == m.weight.data_ptr()
        torch.testing.assert_close(y0, y_rec, rtol=0, atol=0)
        m.weight.mul_(2)  # in place: the cached view sees it
        torch.testing.assert_close(m(x).features, 2 * y0, rtol=0, atol=0)
        m.weight.data = m.weight.data.contiguous() * 0.5  # new storage, spconv's layout
        assert m._layout().to_lib(m.weight) is not lw
        torch.testing.assert_close(m(x).features, y0, rtol=0, atol=0)
        m.weight.mul_(4)  # in place on the converted weight: converted again
        torch.testing.assert_close(m(x).features, 4 * y0, rtol=0, atol=0)
    m(x)
    with torch.no_grad():  # nothing stale after the recording call
        torch.testing.assert_close(m(x).features, 4 * y0, rtol=0, atol=0)
    m.float()  # (the converted layout: a copy, made first under inference_mode)
    xf = spconv.SparseConvTensor(x.features.float(), x.indices, x.spatial_shape, x.batch_size)
    with torch.inference_mode():
        m(xf)
    with torch.no_grad():
        torch.testing.assert_close(m(xf).features, 4 * y0.float(), rtol=1e-5, atol=1e-5)
    m.weight.requires_grad_(False)
    f = xf.features.clone().requires_grad_(True)
    m(xf.replace_feature(f)).features.sum().backward()
    assert f.grad is not None and f.grad.shape == f.shape


def test_transposed_matches_conv_transpose3d(device):
    spconv = compat_spconv
    dt = ref.widest_dtype(device)  # float64 is the CPU reference path
    x = _rand_input(n=120, shape=(6, 5, 7), dtype=dt, device=device)
    layer = spconv.SparseConvTranspose3d(4, 3, 3, 2, padding=1, output_padding=1).to(dt)
    layer.to(device)
    y = layer(x)
    assert y.spatial_shape == [12, 10, 14]
    d = x.dense().cpu().double()
    w = layer.weight.detach().cpu().double().permute(4, 0, 1, 2, 3)
    b = layer.bias.detach().cpu().double()
    yd = tF.conv_transpose3d(d, w, b, stride=2, padding=1, output_padding=1)
    ya = tF.conv_transpose3d(d.abs(), w.abs(), b.abs(), stride=2, padding=1, output_padding=1)
    m = tF.conv_transpose3d((d.abs().sum(1, keepdim=True) > 0).double(),
                            torch.ones(1, 1, 3, 3, 3, dtype=torch.float64), stride=2,
                            padding=1, output_padding=1)[:, 0] > 0
    assert np.array_equal(sorted_rows(y), m.nonzero().numpy())
    i = y.indices.long().cpu()
    sel = (i[:, 0], slice(None), i[:, 1], i[:, 2], i[:, 3])
    ref.assert_at_fp_bound(y.features, yd[sel], ya[sel], 27 * 4 + 1, dt)


def test_zz_report(capsys):
    with capsys.disabled():
        for k, v in RESULTS.items():
            print(f"\n[compat.spconv] {k}: {v}")


@pytest.mark.parametrize("cls,kw", [(compat_spconv.SubMConv3d, {}),
                                    (compat_spconv.SparseConv3d, {"stride": 2, "padding": 1})])
def test_training_weight_layout_matches_explicit_views(device, cls, kw):
    """In training the layer hands the library its parameter as stored
    (spconv's [out, k0, k1, k2, in]) with the layout, converted inside the
    convolution's autograd node (_ops.PermutedLayout). First and second
    derivatives equal those through explicit permute/reshape autograd ops
    on the same map, bit for bit (the same library calls on the same
    values)."""
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    conv = cls(4, 6, 3, bias=False, **kw).to(device, dtype)
    x = _rand_input(dtype=dtype, device=device)
    km = conv._map(x)[0]
    cfg = (None, None, None, 0, 1)  # deterministic: reductions in a fixed order

    g = torch.randn(km.n_out, 6, dtype=dtype, device=device)

    def grads(y_of):
        f = x.features.detach().clone().requires_grad_()
        y = y_of(f)
        (gx,) = torch.autograd.grad(y, f, g, create_graph=True)
        gw1 = torch.autograd.grad(y, conv.weight, g, retain_graph=True)[0]
        gw2 = torch.autograd.grad(gx.square().sum(), conv.weight)[0]
        return y.detach(), gx.detach(), gw1, gw2

    lay = conv._layout()

    def explicit(f):
        return voxconv_ops.conv(f, conv.weight.permute(1, 2, 3, 4, 0).reshape(27, 4, 6), km,
                                *cfg)
    # The map complete and every pass run twice first: on CUDA the
    # comparison failed after other tests with one warm-up only (the first
    # calls of a shape are the autotuner's, and their result may come from
    # another candidate), so both runs below find everything decided.
    km.wait()
    grads(explicit)
    grads(explicit)
    got = grads(lambda f: voxconv_ops.conv(f, conv.weight, km, *cfg, layout=lay))
    want = grads(explicit)
    if device.type == "cpu":
        for a, b in zip(got, want):
            assert a.shape == b.shape and torch.equal(a, b)
    else:  # the same sums; the autotuner may order them differently per call
        _same_sums_on_cuda(got, want, lay.to_lib, x.features, g, conv.weight, lay, km, cfg)
    assert got[3].abs().sum() > 0  # the second derivative reached the parameter
    # and the module's training forward takes that path
    f = x.features.detach().clone().requires_grad_()
    y = conv(x.replace_feature(f)).features
    torch.testing.assert_close(y.detach(), got[0])


def test_training_weight_view_follows_the_parameter():
    """PermutedLayout keeps the library view of a layer's weight between
    training steps (docs/perf-notes.md item 72): it must follow in-place
    updates of the parameter (it aliases it) and be remade when the
    parameter's storage is replaced (``weight.data = t`` with a contiguous
    spconv-shaped tensor: a permuted copy then). Each training forward is
    compared bit for bit with the library call on an explicitly converted
    weight (float64, CPU: the same library call on the same values), and
    each weight gradient with the explicit conversion's; the gradient of a
    weight stored over the library's layout keeps the parameter's strides
    (AccumulateGrad keeps the layer's tensor instead of copying it). An
    in-place update between a forward and its backward still raises."""
    torch.manual_seed(0)
    conv = compat_spconv.SubMConv3d(4, 6, 3, bias=False).double()
    x = _rand_input()
    km = conv._map(x)[0]
    g = torch.randn(km.n_out, 6, dtype=torch.float64)

    def step():
        conv.weight.grad = None
        y = conv(x.replace_feature(x.features.detach().clone())).features
        y.backward(g)
        return y.detach(), conv.weight.grad

    def explicit():
        w = conv.weight.detach().clone().requires_grad_()
        y = voxconv_ops.conv(x.features, w.permute(1, 2, 3, 4, 0).reshape(27, 4, 6), km,
                             *compat_spconv._CFG)
        y.backward(g)
        return y.detach(), w.grad

    stored_over_lib = conv.weight.stride()
    for change in ("none", "in place", "replaced", "in place again"):
        with torch.no_grad():
            if change.startswith("in place"):
                conv.weight.mul_(-2.0)
            elif change == "replaced":
                conv.weight.data = conv.weight.detach().contiguous() * 0.5
        y, gw = step()
        y_want, gw_want = explicit()
        assert torch.equal(y, y_want), change
        assert torch.equal(gw, gw_want), change
        assert gw.stride() == conv.weight.stride(), change
        if change == "none":
            assert gw.stride() == stored_over_lib
    # an update between a forward and its backward is still caught
    y = conv(x.replace_feature(x.features.detach().clone())).features
    with torch.no_grad():
        conv.weight.add_(1.0)
    with pytest.raises(RuntimeError, match="inplace"):
        y.backward(g)


def _same_sums_on_cuda(got, want, to_lib, f, g, w_stored, lay, km, cfg):
    """got / want = (y, dx, dW, d/dW |dx|^2) of two runs: each within the
    float32 bound of the other, S from the same passes on absolute values
    (dW's in the library's layout)."""
    w = lay.to_lib(w_stored.detach()).contiguous().abs()
    fa, ga = f.detach().abs(), g.abs()
    n_w = w.shape[0] * max(w.shape[1], w.shape[2])
    ref.assert_same_sums(got[0], want[0], voxconv_ops._conv_fwd(fa, w, km, cfg, False), n_w)
    ref.assert_same_sums(got[1], want[1], voxconv_ops._conv_dgrad(ga, w, km, cfg), n_w)
    s1 = voxconv_ops._conv_wgrad(fa, ga, km, cfg)
    ref.assert_same_sums(to_lib(got[2]), to_lib(want[2]), s1, km.n_out)
    s2 = voxconv_ops._conv_wgrad((2 * got[1]).abs(), ga, km, cfg)
    ref.assert_same_sums(to_lib(got[3]), to_lib(want[3]), s2, km.n_out)



@pytest.mark.parametrize("ks", [2, (3, 2, 3), (4, 4, 4)])
def test_even_submanifold_kernel_is_refused_as_spconv_does(ks):
    """spconv 2.x's submanifold index generation accepts odd kernels only
    ("subm only support odd ksize"); the compat layer refuses the same
    kernels at construction, naming the kernel and what to use instead."""
    with pytest.raises(NotImplementedError, match=r"odd submanifold kernels only"):
        compat_spconv.SubMConv3d(4, 4, ks)
    compat_spconv.SubMConv3d(4, 4, (3, 1, 5))  # odd on every axis: fine
