"""voxconv.quantization: int8 post-training quantization (CPU and CUDA).

* the int8 modules against a float64/numpy model of the epilogue documented
  in include/voxconv.h (int64 sums over the map's pairs, then the fp32
  arithmetic restated with an exactly emulated fmaf), bit for bit;
* BatchNorm folding, observers, an all-zero weight channel;
* the example network (examples/train_segmentation.py MiniMinkUNet),
  trained briefly on the SemanticKITTI scan, calibrated on it and evaluated
  on another scan: per-layer SQNR and argmax agreement;
* CUDA: the same quantized model gives the CPU's bits; scales checked
  before the first call on the device.
"""

import copy
import importlib.util
import json
import math
import os

import numpy as np
import pytest
import torch

import voxconv
from voxconv import _lib, nn as vnn
from voxconv import quantization as Q
from voxconv import functional as F

from conftest import REPO, cuda_usable


def _coords(n, extent, seed, batches=1):
    g = torch.Generator().manual_seed(seed)
    c = torch.cat([torch.randint(0, batches, (n, 1), generator=g),
                   torch.randint(0, extent, (n, 3), generator=g)], 1).int()
    return torch.unique(c, dim=0)


def _sparse(n, extent, ch, seed, batches=1, scale=1.0):
    c = _coords(n, extent, seed, batches)
    g = torch.Generator().manual_seed(seed + 1)
    return voxconv.SparseTensor(torch.randn(len(c), ch, generator=g) * scale, c)


# ---- the documented epilogue, restated -------------------------------------------

def _fmaf(a, m, b):
    """fmaf(a, m, b) for float32 arrays, exactly: a*m is exact in float64
    (24 + 24 significant bits); the float64 sum s = RN64(p + b) may round,
    with error e (TwoSum, exact: p + b = s + e). RN32(s) equals RN32(p + b)
    unless s is exactly a float32 rounding midpoint and e != 0 (double
    rounding); then the exact value lies strictly on e's side of the
    midpoint, and stepping s one float64 ulp towards it crosses no other
    float32 boundary. Valid where results are normal float32 or 0
    (asserted)."""
    p = a.astype(np.float64) * m.astype(np.float64)
    b64 = b.astype(np.float64)
    s = p + b64
    bb = s - p
    e = (p - (s - bb)) + (b64 - bb)
    mant, _ex = np.frexp(s)
    is_mid = (np.ldexp(mant, 25) % 1 == 0) & (np.ldexp(mant, 24) % 1 != 0)
    fix = is_mid & (e != 0)
    s2 = s.copy()
    s2[fix] = np.nextafter(s[fix], np.where(e[fix] > 0, np.inf, -np.inf))
    r = s2.astype(np.float32)
    small = (r != 0) & (np.abs(r) < np.float32(2.0 ** -126))
    assert not small.any(), "subnormal result: this emulation covers normal values only"
    return r


def _round_f32_exact(q):
    """Fraction -> nearest float32, ties to even, by comparing neighbours."""
    from fractions import Fraction
    c = np.float32(float(q))
    best = None
    for cand in (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))):
        d = abs(Fraction(float(cand)) - q)
        key = (d, int(np.array(cand, np.float32).view(np.int32)) & 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]


def test_fmaf_emulation_against_exact_rationals():
    """The oracle itself: _fmaf against exact rational arithmetic, on random
    values and on a crafted double-rounding case (the float64 sum lands on
    a float32 midpoint with the exact value just below it)."""
    from fractions import Fraction
    rng = np.random.default_rng(0)
    a = rng.integers(-2 ** 20, 2 ** 20, 4000).astype(np.float32)
    m = (rng.standard_normal(4000) * 1e-4).astype(np.float32)
    b = (rng.standard_normal(4000) * rng.choice([1e-3, 1.0, 1e3], 4000)).astype(np.float32)
    a = np.append(a, np.float32(2.0 ** -16 * (1 + 2.0 ** -23)))
    m = np.append(m, np.float32(1 - 2.0 ** -23))
    b = np.append(b, np.float32(256 + 2.0 ** -15))
    got = _fmaf(a, m, b)
    for i in range(len(a)):
        exact = Fraction(float(a[i])) * Fraction(float(m[i])) + Fraction(float(b[i]))
        assert got[i] == _round_f32_exact(exact), (i, a[i], m[i], b[i])
    # the crafted case: naive float32(float64 sum) would tie to even upwards
    naive = np.float32(np.float64(a[-1]) * np.float64(m[-1]) + np.float64(b[-1]))
    assert got[-1] == np.float32(256 + 2.0 ** -15) and naive != got[-1]


def _epilogue(acc, x_scale, w_scale, bias, relu, y_scale=None):
    a = acc.astype(np.float32)                       # (float)acc, nearest even
    m = np.float32(x_scale) * w_scale.astype(np.float32)   # one fp32 multiply
    b = (bias.astype(np.float32) if bias is not None
         else np.zeros(acc.shape[1], np.float32))
    v = _fmaf(a, np.broadcast_to(m, acc.shape), np.broadcast_to(b, acc.shape))
    if relu:
        v = np.where(v < 0, np.float32(0.0), v).astype(np.float32)
    if y_scale is None:
        return v
    t = (v / np.float32(y_scale)).astype(np.float32)   # correctly rounded fp32 division
    return np.clip(np.rint(t), -127, 127).astype(np.int8)


def _int_sums(km, qx, qw, depthwise):
    offsets, in_rows, out_rows = km.pairs()
    qx = qx.numpy().astype(np.int64)
    qw = qw.numpy().astype(np.int64)
    cout = qw.shape[-1]
    acc = np.zeros((km.n_out, cout), np.int64)
    in_rows, out_rows = in_rows.numpy().astype(np.int64), out_rows.numpy().astype(np.int64)
    for k in range(km.kernel_volume):
        s, e = int(offsets[k]), int(offsets[k + 1])
        if s == e:
            continue
        contrib = qx[in_rows[s:e]] * qw[k] if depthwise else qx[in_rows[s:e]] @ qw[k]
        np.add.at(acc, out_rows[s:e], contrib)
    return acc


def _reference(q, x, out_coords=None):
    """The module's output restated: quantize the input (numpy), int64
    sums over the map the float layer uses, the documented epilogue."""
    if q._geo is None:
        km, _ = F._geometry(x, q.kernel_size, q.stride, q.dilation, q.transposed,
                            q.generative, out_coords)
    else:
        km, _ = F._geometry_ext(x, q.kernel_size, q.stride, q.dilation, q.transposed,
                                q.generative, out_coords, q._geo)
    xs = np.float32(q.x_scale)
    qx = np.clip(np.rint(x.feats.numpy().astype(np.float32) / xs), -127, 127).astype(np.int8)
    acc = _int_sums(km, torch.from_numpy(qx), q.weight, q._depthwise)
    return _epilogue(acc, q.x_scale, q.weight_scale.numpy(),
                     None if q.bias is None else q.bias.numpy(), q.relu, q.y_scale)


def _bits_equal(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    if a.dtype == np.float32:
        return np.array_equal(a.view(np.int32), b.view(np.int32))
    return np.array_equal(a, b)


@pytest.mark.parametrize("geom", [dict(kernel_size=3), dict(kernel_size=2, stride=2),
                                  dict(kernel_size=3, dilation=2),
                                  dict(kernel_size=3, padding=1, expand=True)])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_int8_matches_epilogue_model(geom, relu, bias):
    x = _sparse(600, 10, 7, seed=3, batches=2, scale=1.5)
    conv = vnn.SparseConv3d(7, 13, bias=bias, **geom)
    xs = float(x.feats.abs().max()) / 127
    q = Q.QuantizedSparseConv3d(conv, xs, relu=relu)
    y = q(x)
    ref = _reference(q, x)
    assert y.feats.dtype == torch.float32
    assert _bits_equal(y.feats.numpy(), ref)
    yf = conv(x)
    assert torch.equal(y.coords, yf.coords) and y.tensor_stride == yf.tensor_stride
    if relu:
        assert (y.feats >= 0).all()


@pytest.mark.parametrize("relu", [False, True])
def test_depthwise_int8_matches_epilogue_model(relu):
    x = _sparse(500, 9, 11, seed=5, scale=0.7)
    conv = vnn.SparseDepthwiseConv3d(11, kernel_size=3)
    q = Q.QuantizedSparseDepthwiseConv3d(conv, float(x.feats.abs().max()) / 127, relu=relu)
    assert q.weight.dtype == torch.int8 and q.weight.shape == (27, 11)
    assert _bits_equal(q(x).feats.numpy(), _reference(q, x))


@pytest.mark.parametrize("cin", [32, 13])
def test_koi_weight_layout_gives_the_same_bits(monkeypatch, cin):
    """The layer's weights handed to the op as [K, Cout, Cin] with
    w_layout KOI (what the module does on CUDA) give the KIO bits on the
    CPU too; a layout that is neither is InvalidArgumentError."""
    x = _sparse(600, 10, cin, seed=61)
    q = Q.QuantizedSparseConv3d(vnn.SparseConv3d(cin, 20),
                                float(x.feats.abs().max()) / 127, relu=True)
    ref = q(x).feats
    koi = q.weight.permute(0, 2, 1).contiguous()
    monkeypatch.setattr(q, "_weight_for", lambda qx: (koi, _lib.INT8_WEIGHTS_KOI))
    assert _bits_equal(q(x).feats.numpy(), ref.numpy())
    monkeypatch.setattr(q, "_weight_for", lambda qx: (q.weight, 7))
    with pytest.raises(voxconv.InvalidArgumentError, match="w_layout"):
        q(x)


def test_koi_cache_is_not_saved():
    """The layer's KOI copy of its weights is a cache: pickling and
    deep-copying leave it out (it is rebuilt from ``weight``)."""
    import pickle
    q = Q.QuantizedSparseConv3d(vnn.SparseConv3d(4, 6), 0.1)
    q._koi = ("key", q.weight.permute(0, 2, 1).contiguous())
    for r in (pickle.loads(pickle.dumps(q)), copy.deepcopy(q)):
        assert not hasattr(r, "_koi") and torch.equal(r.weight, q.weight)


def test_int8_output_requantized_matches_model():
    x = _sparse(400, 8, 6, seed=7)
    conv = vnn.SparseConv3d(6, 10)
    q = Q.QuantizedSparseConv3d(conv, float(x.feats.abs().max()) / 127, relu=True,
                                y_scale=0.013)
    qy = _reference(q, x)  # int8
    y = q(x).feats
    assert torch.equal(y, torch.from_numpy(qy).float() * torch.tensor(0.013))
    assert qy.min() >= 0 and qy.max() <= 127


def test_transposed_uses_the_float_layers_map():
    x = _sparse(700, 12, 5, seed=9)
    down = vnn.SparseConv3d(5, 8, kernel_size=2, stride=2)
    up = vnn.SparseConvTranspose3d(8, 4, kernel_size=2, stride=2)
    with torch.no_grad():
        mid = down(x)
    q = Q.QuantizedSparseConv3d(up, float(mid.feats.abs().max()) / 127)
    with torch.no_grad():
        y, yf = q(mid), up(mid)
    assert torch.equal(y.coords, x.coords) and torch.equal(yf.coords, y.coords)
    assert _bits_equal(y.feats.detach().numpy(), _reference(q, mid))
    assert max(_format_bound_ratios([(q, up, None, False)], up, mid)) <= 1


# ---- BN folding ------------------------------------------------------------------

def _randomize_bn(bn, c, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) * 2 + 0.1)
        bn.weight.copy_(torch.randn(c, generator=g))
        bn.bias.copy_(torch.randn(c, generator=g))
    bn.eval()


# ---- what int8 may cost a layer: a bound from the formats -------------------------

_U32 = 2.0 ** -24
# one rounding to a quantization step: half a step, plus float32 slack for
# computing v / scale (|v / scale| <= 127 after calibration: 127 u << 2^-14)
_HALF_STEP = 0.5 + 2.0 ** -14


def _pair_sums(c64, x, weight, feats):
    """The sums over the map's pairs of feats * weight: float64 conv c64
    (a bias-less copy of the layer) with ``weight`` on x's coordinates."""
    c64.weight = torch.nn.Parameter(weight.double(), requires_grad=False)
    return c64(x.replace_feature(feats.double())).feats


def _int8_layer_bound(q, conv, bn, relu, x):
    """(y64, bound) for int8 layer q made from float conv -> bn -> relu, on
    float32 input x: y64 the float64 reference of the unfused layers, and a
    per-element bound on |q(x) - y64| that follows from the formats alone.
    With x^ = x + ex, w^ = w + ew (q's dequantized input and weights),
    x w - x^ w^ = -(ex w^ + x ew) exactly, so per output
      |err| <= sum_pairs (|ex| |w^| + |x| |ew|) + fp32 slack,
    |ex| <= x_scale / 2 (0 where x is 0: it quantizes exactly), |ew| <=
    w_scale_c / 2 (the BN fold's float32 weights round once more, covered
    by _HALF_STEP's slack: 3 u |w| <= 381 u w_scale_c). fp32 slack: the
    epilogue's int64 -> float, scale product and fmaf, and the fused bias's
    rounding, at most 8 u (sum |x^| |w^| + |b|). ReLU is 1-Lipschitz; an
    int8 output adds half a y_scale step. No seed can make a correct layer
    fail it; a fold, ReLU or scale that is wrong moves outputs by far more."""
    with torch.no_grad():
        x64 = x.replace_feature(x.feats.double())
        c64 = copy.deepcopy(conv).double()
        y64 = c64(x64)
        if bn is not None:
            y64 = y64.replace_feature(copy.deepcopy(bn).double()(y64.feats))
        y64 = y64.feats.clamp_min(0) if relu else y64.feats
        sx = q.x_scale
        w_hat = q.weight.double() * q.weight_scale.double()
        ex = torch.where(x.feats == 0, 0.0, sx * _HALF_STEP).double()
        ew = (q.weight_scale.double() * _HALF_STEP).expand_as(w_hat)
        x_hat = Q.quantize_tensor(x.feats, sx).double() * sx
        b = q.bias.double().abs() if q.bias is not None else 0.0
        c64.bias = None  # the same copy sums the error terms
        bound = (_pair_sums(c64, x, w_hat.abs(), ex) + _pair_sums(c64, x, ew, x.feats.abs())
                 + 8 * _U32 * (_pair_sums(c64, x, w_hat.abs(), x_hat.abs()) + b))
        if q.y_scale is not None:
            bound = bound + q.y_scale * _HALF_STEP
    return y64, bound


def _format_bound_ratios(layers, model, x, mutate=None):
    """Per int8 layer of ``layers`` [(q, conv, bn, relu)], on the input its
    float conv gets in ``model(x)`` (the float model's own input: errors do
    not chain): max over elements of |q(x) - y64| / bound, <= 1 for a
    correct layer. ``mutate(copy of q)`` plants a bug first."""
    ins, hooks = {}, []
    for _q, conv, _bn, _r in layers:
        hooks.append(conv.register_forward_pre_hook(
            lambda m, a: ins.__setitem__(id(m), a[0])))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    ratios = []
    for q, conv, bn, relu in layers:
        xin = ins[id(conv)]
        y64, bound = _int8_layer_bound(q, conv, bn, relu, xin)
        if mutate is not None:
            q = copy.deepcopy(q)
            mutate(q)
        with torch.no_grad():
            y = q(xin).feats
        if y.dtype == torch.int8:
            y = Q.dequantize_tensor(y, q.y_scale)
        ratios.append(float(((y.double() - y64).abs() / bound).max()))
    return ratios


@pytest.mark.parametrize("depthwise", [False, True])
def test_bn_fusion_exact_within_fp32(depthwise):
    x = _sparse(500, 9, 6, seed=11)
    conv = vnn.SparseDepthwiseConv3d(6) if depthwise else vnn.SparseConv3d(6, 9)
    c = 6 if depthwise else 9
    bn = vnn.SparseBatchNorm(c)
    _randomize_bn(bn.module, c, 12)
    with torch.no_grad():
        ref = bn(conv(x)).feats
        fused = Q.fuse_conv_bn(conv, bn)(x).feats
        # float64 reference of conv -> BN
        c64, b64 = conv.double(), bn.double()
        x64 = x.replace_feature(x.feats.double())
        exact = b64(c64(x64)).feats
    # each side carries float32 rounding only: bound by a few ulps of the
    # magnitudes involved (sum of |terms| <= K*Cin*max|x||w| ~ |ref| scale)
    tol = 1e-5 * (exact.abs().max() + 1)
    assert (ref.double() - exact).abs().max() <= tol
    assert (fused.double() - exact).abs().max() <= tol


@pytest.mark.parametrize("depthwise", [False, True])
def test_quantize_a_bare_layer(depthwise):
    """quantize(layer) on a conv module itself returns its int8 layer (it
    used to return the float layer unchanged: the plan's root entry was
    'replaced' by setting an attribute named ''), with the same bits as the
    layer quantized inside a Sequential."""
    x = _sparse(500, 9, 8, seed=21)
    conv = vnn.SparseDepthwiseConv3d(8) if depthwise else vnn.SparseConv3d(8, 6)
    conv.eval()
    q = Q.quantize(conv, [x])
    cls = Q.QuantizedSparseDepthwiseConv3d if depthwise else Q.QuantizedSparseConv3d
    assert isinstance(q, cls), type(q).__name__
    assert isinstance(conv, type(conv)) and not isinstance(conv, cls)  # float left alone
    qs = Q.quantize(vnn.Sequential(conv), [x])
    with torch.inference_mode():
        assert torch.equal(q(x).feats, qs(x).feats)


def test_quantize_fuses_bn_and_relu_in_both_sequentials():
    x = _sparse(600, 10, 4, seed=13)
    m = vnn.Sequential(vnn.SparseConv3d(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                       torch.nn.Sequential(vnn.SparseConv3d(8, 8, kernel_size=2, stride=2),
                                           vnn.SparseBatchNorm(8), vnn.SparseReLU(True)),
                       vnn.SparseDepthwiseConv3d(8), vnn.SparseReLU())
    _randomize_bn(m[1], 8, 1)
    _randomize_bn(m[3][1].module, 8, 2)
    m.eval()
    qm = Q.quantize(m, [x])
    assert isinstance(qm[0], Q.QuantizedSparseConv3d) and qm[0].relu
    assert isinstance(qm[1], torch.nn.Identity) and isinstance(qm[2], torch.nn.Identity)
    assert isinstance(qm[3][0], Q.QuantizedSparseConv3d) and qm[3][0].relu
    assert isinstance(qm[3][1], torch.nn.Identity) and isinstance(qm[3][2], torch.nn.Identity)
    assert isinstance(qm[4], Q.QuantizedSparseDepthwiseConv3d) and qm[4].relu
    assert qm[0].fused == "bn+relu" and qm[4].fused == "relu"
    assert isinstance(m[0], vnn.SparseConv3d)  # the float model is unchanged
    rep = Q.sqnr_report(m, qm, x)
    assert len(rep) == 3 and "SQNR" in str(rep)
    assert [r[0] for r in rep] == ["0", "3.0", "4"], str(rep)
    # each int8 layer (BN and ReLU folded) within what int8 may cost it
    # (a threshold like "SQNR > 30 dB" failed a correct depthwise layer on
    # one seed in 20-odd CI runs: 29.45 dB)
    layers = [(qm[0], m[0], m[1], True), (qm[3][0], m[3][0], m[3][1].module, True),
              (qm[4], m[4], None, True)]
    assert max(_format_bound_ratios(layers, m, x)) <= 1
    # planted: the ReLU not applied, the BN's shift (the fused bias) lost
    assert min(_format_bound_ratios(layers, m, x, lambda q: setattr(q, "relu", False))) > 1
    assert min(_format_bound_ratios(layers, m, x, lambda q: setattr(q, "bias", None))) > 1
    # and the model is those layers in sequence (BN / ReLU modules gone)
    with torch.no_grad():
        assert torch.equal(qm(x).feats, qm[4](qm[3][0](qm[0](x))).feats)


def test_sqnr_report_counts_clipped_inputs():
    """sqnr_report's clipped share: 0 on the calibration batch for a
    min/max-calibrated layer (max |x| is exactly 127 steps), and on a batch
    3x as large the share of values beyond 127.5 steps, counted here
    independently in numpy; equalised layers count after the
    equalisation; a chained layer is fed float input by the report and
    counted as the others."""
    x = _sparse(800, 10, 4, seed=61)
    m = vnn.Sequential(vnn.SparseConv3d(4, 6), vnn.SparseReLU(), vnn.SparseConv3d(6, 5)).eval()
    qm = Q.quantize(m, [x])
    rep = Q.sqnr_report(m, qm, x)
    assert rep.clipped["0"] == 0.0 and "clipped" in str(rep)
    big = x.replace_feature(x.feats * 3)
    rep3 = Q.sqnr_report(m, qm, big)
    v = big.feats.double().numpy()
    assert rep3.clipped["0"] == float(np.mean(np.abs(v) > 127.5 * qm[0].x_scale))
    assert 0 < rep3.clipped["0"] < 1
    eq = Q.quantize(m, [x], equalize=["0"])
    d = eq[0].in_scale.double().numpy()
    rep_eq = Q.sqnr_report(m, eq, big)
    assert rep_eq.clipped["0"] == float(np.mean(np.abs(v * d) > 127.5 * eq[0].x_scale))
    ch = Q.quantize(m, [x], chain=True)
    rep_ch = Q.sqnr_report(m, ch, big)
    assert ch[0].int8_out and rep_ch.clipped == rep3.clipped


def test_quantize_keep_float_leaves_named_layers_and_their_bn_relu():
    """keep_float: the named conv stays the float module with its BN and
    ReLU, so the model's first layer computes exactly what the float model
    does; the other layers are quantized as without it; a name that is
    not a conv layer is refused before anything is calibrated."""
    x = _sparse(600, 10, 4, seed=17)
    m = vnn.Sequential(vnn.SparseConv3d(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                       vnn.SparseConv3d(8, 8), vnn.SparseReLU())
    _randomize_bn(m[1], 8, 3)
    m.eval()
    qm = Q.quantize(m, [x], keep_float="0")
    assert type(qm[0]) is vnn.SparseConv3d and qm[0] is not m[0]
    assert isinstance(qm[1], torch.nn.BatchNorm1d) and isinstance(qm[2], torch.nn.ReLU)
    assert isinstance(qm[3], Q.QuantizedSparseConv3d) and qm[3].relu
    full = Q.quantize(m, [x])
    assert qm[3].x_scale == full[3].x_scale  # calibrated on the float model's input as before
    with torch.no_grad():
        assert torch.equal(qm[0:3](x).feats, m[0:3](x).feats)
    assert [r[0] for r in Q.sqnr_report(m, qm, x)] == ["3"]
    for bad in ("1", "nope", ("0", "4")):
        with pytest.raises(voxconv.InvalidArgumentError, match="keep_float"):
            Q.quantize(m, [x], keep_float=bad)


def test_quantize_equalize_balances_a_narrow_input_channel():
    """equalize: input channels of ranges 200x apart (a LiDAR first layer's
    coordinates and intensity). Re-stated independently: d_c = sqrt(max
    |w_c| / max |x_c|), x_scale = max_c(max |x_c| d_c) / 127 (float32), the
    int8 weights those of w_c / d_c. The equalised layer's SQNR must beat
    the plain one's clearly (the narrow channel gets ~0.3 levels plain, and
    its weights, 200x the other's, set the weight scales);
    int8 input, chaining into it and bad names are refused."""
    torch.manual_seed(23)
    x = _sparse(900, 10, 2, seed=29)
    x = x.replace_feature(x.feats * torch.tensor([20.0, 0.1]))
    m = vnn.Sequential(vnn.SparseConv3d(2, 8), vnn.SparseReLU(), vnn.SparseConv3d(8, 8))
    with torch.no_grad():  # as a trained layer would: both channels matter to the output
        m[0].weight[:, 1, :] *= 200.0
    m.eval()
    plain = Q.quantize(m, [x])
    eq = Q.quantize(m, [x], equalize=["0"])
    x_amax = x.feats.abs().double().amax(0).numpy()
    w_amax = m[0].weight.detach().abs().double().amax((0, 2)).numpy()
    d = np.sqrt(w_amax / x_amax).astype(np.float32)
    assert np.array_equal(eq[0].in_scale.numpy(), d)
    want = np.float32(np.max(x_amax * d.astype(np.float64)) / 127)
    assert eq[0].x_scale == pytest.approx(float(want), rel=1e-6)
    w_eq = m[0].weight.detach().double() / torch.from_numpy(d).double()[:, None]
    assert torch.equal(eq[0].weight, Q.quantize_tensor(w_eq.float(), Q.weight_scales(w_eq.float())))
    assert eq[2].in_scale is None and plain[0].in_scale is None
    assert "input equalised" in repr(eq[0])
    db_plain = Q.sqnr_report(m, plain, x).as_dict()["0"]
    db_eq = Q.sqnr_report(m, eq, x).as_dict()["0"]
    assert db_eq >= 30 and db_eq > db_plain + 20, (db_plain, db_eq)
    with pytest.raises(voxconv.InvalidArgumentError, match="equalised"):
        eq[0](x.replace_feature(Q.quantize_tensor(x.feats, eq[0].x_scale)))
    # no fold into a requantising layer (its output scale was calibrated
    # unscaled): the equalised layer keeps its float input, never chained
    chained = Q.quantize(m, [x], equalize=["2"], chain=True, output="int8")
    assert not chained[0].int8_out and chained[2].in_scale is not None
    for kw in ({"equalize": "1"}, {"equalize": "0", "keep_float": "0"}):
        with pytest.raises(voxconv.InvalidArgumentError, match="equalize|keep_float"):
            Q.quantize(m, [x], **kw)


def _blocks_model():
    """Blocks of conv + BN + ReLU as nested Sequentials (the example
    network's layout), max pooling between two, BN weights spread over
    100x so that channel ranges differ."""
    def block(cin, cout, **kw):
        return vnn.Sequential(vnn.SparseConv3d(cin, cout, **kw), torch.nn.BatchNorm1d(cout),
                              torch.nn.ReLU())
    m = vnn.Sequential(block(6, 16), block(16, 12), vnn.SparseMaxPool3d(2), block(12, 10),
                       vnn.SparseConv3d(10, 5))
    for i, idx in enumerate((0, 1, 3)):
        bn = m[idx][1]
        _randomize_bn(bn, bn.num_features, 40 + i)
        with torch.no_grad():
            bn.weight.mul_(torch.logspace(0, 2, bn.num_features))
    return m.eval()


def _warm(m, x):
    """One float forward first, so that every calibration after it runs the
    float convolutions the autotuner settled on (a first call that tunes
    may compute with another algorithm, and the scales of two quantize()
    calls compared bit for bit would then differ by rounding)."""
    with torch.no_grad():
        m(x)


def test_equalisation_folds_into_the_layer_before_and_chains():
    """fold_equalization: an equalised layer fed by a quantized one alone
    (nested Sequentials expanded, past fused BN / ReLU and max pooling)
    has its d moved into that layer's weight scales and bias (float64
    products rounded once, re-stated here) and drops its multiply pass;
    the result is the unfolded model's up to float32 rounding of the
    folded epilogue: on the same input, the next layer's int8 codes agree
    to one level (a value within rounding of a half level may round either
    way; end to end such a flip propagates: seed 894725959 gave 352 of
    1,080 outputs different, 47.9 dB, so the outputs are not compared);
    omitting the bias's factor leaves under 10 dB), sqnr_report undoes the
    factors (per-layer SQNR as unfolded within 0.5 dB), and chain=True then
    hands the equalised layers int8 with the folded model's bits."""
    x = _sparse(2500, 12, 6, seed=71)
    m = _blocks_model()
    _warm(m, x)
    eq = ["1.0", "3.0", "4"]
    qa = Q.quantize(m, [x], equalize=eq, fold_equalization=False)
    qb = Q.quantize(m, [x], equalize=eq)
    for p, e in (("0.0", "1.0"), ("1.0", "3.0"), ("3.0", "4")):
        pa, pb = qa.get_submodule(p), qb.get_submodule(p)
        ea, eb = qa.get_submodule(e), qb.get_submodule(e)
        d = ea.in_scale
        assert eb.in_scale is None and torch.equal(eb.input_factor, d)
        assert torch.equal(pb.output_factor, d)
        assert torch.equal(pb.weight_scale,
                           (pa.weight_scale.double() * d.double()).float())
        assert torch.equal(pb.bias, (pa.bias.double() * d.double()).float())
        assert eb.x_scale == ea.x_scale and torch.equal(eb.weight, ea.weight)
    assert qb.get_submodule("0.0").in_scale is None  # nothing before it to fold into
    pairs = (("0.0", "1.0"), ("1.0", "3.0"), ("3.0", "4"))
    seen, between = {}, {"1.0": qa.get_submodule("2")}  # max pooling
    hooks = [qa.get_submodule(p).register_forward_pre_hook(
        lambda mod, inp, p=p: seen.__setitem__(p, inp[0])) for p, _ in pairs]
    with torch.no_grad():
        ya, yb = qa(x).feats, qb(x).feats
        for h in hooks:
            h.remove()
        for p, e in pairs:  # each folded layer on the unfolded model's input
            pa_in = qa.get_submodule(p).in_scale  # qb's p expects it folded in
            xb = seen[p] if pa_in is None else seen[p].replace_feature(seen[p].feats * pa_in)
            oa, ob = qa.get_submodule(p)(seen[p]), qb.get_submodule(p)(xb)
            if p in between:
                oa, ob = between[p](oa), between[p](ob)
            ea = qa.get_submodule(e)
            ca = Q.quantize_tensor(oa.feats * ea.in_scale, ea.x_scale).int()
            cb = Q.quantize_tensor(ob.feats, ea.x_scale).int()
            assert (ca - cb).abs().max() <= 1, (p, e)
        pb = qb.get_submodule("1.0")
        wrong = copy.deepcopy(qb)
        wrong.get_submodule("1.0").bias = pb.bias / pb.output_factor
        assert Q.sqnr_db(ya, wrong(x).feats) < 40
    ra, rb = Q.sqnr_report(m, qa, x).as_dict(), Q.sqnr_report(m, qb, x).as_dict()
    assert ra.keys() == rb.keys()
    for k in ra:
        assert abs(ra[k] - rb[k]) < 0.5 and rb[k] > 25, (k, ra[k], rb[k])
    qc = Q.quantize(m, [x], equalize=eq, chain=True)
    assert all(qc.get_submodule(p).int8_out for p in ("0.0", "1.0", "3.0"))
    with torch.no_grad():
        assert torch.equal(qc(x).feats.view(torch.int32), yb.view(torch.int32))


def test_chain_expands_nested_sequentials_and_skips_shared_layers():
    """chain=True across blocks (nested Sequentials) as within one, the
    float32 output keeping its bits; a quantized layer instance used twice
    is never paired for chaining or folding (its output may go
    elsewhere)."""
    x = _sparse(2000, 12, 6, seed=73)
    m = _blocks_model()
    _warm(m, x)
    plain = Q.quantize(m, [x])
    chained = Q.quantize(m, [x], chain=True)
    assert [chained.get_submodule(p).int8_out for p in ("0.0", "1.0", "3.0", "4")] == \
        [True, True, True, False]
    with torch.no_grad():
        assert torch.equal(chained(x).feats.view(torch.int32), plain(x).feats.view(torch.int32))
    q = Q.quantize(vnn.Sequential(vnn.SparseConv3d(6, 6), vnn.SparseConv3d(6, 6),
                                  vnn.SparseConv3d(6, 3)).eval(), [x])
    assert [(a is q[0], b is q[1]) for a, b in Q._adjacent_pairs(q)] == \
        [(True, True), (False, False)]
    shared = vnn.Sequential(q[0], torch.nn.Identity(), q[0], q[2])
    assert Q._adjacent_pairs(shared) == []


def _chain_model():
    """Quantized layers in a row (fused BN / ReLU, max pooling between two)
    and one followed by a float module (not chained)."""
    m = vnn.Sequential(vnn.SparseConv3d(5, 24), torch.nn.BatchNorm1d(24), torch.nn.ReLU(),
                       vnn.SparseConv3d(24, 16, 3), vnn.SparseReLU(), vnn.SparseMaxPool3d(2),
                       vnn.SparseDepthwiseConv3d(16), vnn.SparseConv3d(16, 11, 3, 2),
                       torch.nn.Tanh(), vnn.SparseConv3d(11, 7))
    _randomize_bn(m[1], 24, 9)
    return m.eval()


def test_chain_hands_int8_to_the_next_quantized_layer():
    """quantize(chain=True): each layer whose output goes straight (past
    fused modules and max pooling) into a quantized layer requantises at
    that layer's x_scale and hands int8 on; the model's float32 output has
    the same bits as without chaining (the epilogue rounds v / x_scale as
    voxconv_quantize rounds the float32 v, and max commutes with the
    monotone quantisation), and the features between chained layers are
    int8."""
    x = _sparse(2500, 12, 5, seed=41)
    m = _chain_model()
    q0 = Q.quantize(m, [x])
    q1 = Q.quantize(m, [x], chain=True)
    layers = [q1[0], q1[3], q1[6], q1[7], q1[9]]
    assert [l.int8_out for l in layers] == [True, True, True, False, False]
    for a, b in ((q1[0], q1[3]), (q1[3], q1[6]), (q1[6], q1[7])):
        assert a.y_scale == b.x_scale
    assert q1[7].y_scale is None  # a float module (Tanh) reads its output
    seen = []
    hooks = [l.register_forward_hook(lambda mod, a, out: seen.append(out.feats.dtype))
             for l in layers]
    with torch.no_grad():
        y0, y1 = q0(x), q1(x)
    for h in hooks:
        h.remove()
    assert seen == [torch.int8] * 3 + [torch.float32] * 2
    assert y1.feats.dtype == torch.float32
    assert torch.equal(y0.coords, y1.coords)
    assert torch.equal(y0.feats.view(torch.int32), y1.feats.view(torch.int32))
    assert "handed on as int8" in repr(q1[0])
    # each layer's row as unchained: the hand-off's rounding is the next
    # layer's input quantization, counted in that layer's row once
    rep0, rep1 = Q.sqnr_report(m, q0, x), Q.sqnr_report(m, q1, x)
    assert len(rep1) == 5, str(rep1)
    # each chained layer within the format bound (its int8 hand-off's half
    # step included)
    fl = [(m[0], m[1], True), (m[3], None, True), (m[6], None, False), (m[7], None, False),
          (m[9], None, False)]
    assert max(_format_bound_ratios([(q,) + f for q, f in zip(layers, fl)], m, x)) <= 1
    assert rep1.as_dict() == rep0.as_dict(), f"{rep0}\n{rep1}"
    assert all(not l.int8_out or l.y_scale is not None for l in layers)  # restored
    assert [l.int8_out for l in layers] == [True, True, True, False, False]


def test_chain_leaves_a_single_layer_and_int8_output_alone():
    x = _sparse(800, 9, 4, seed=43)
    bare = vnn.SparseConv3d(4, 6).eval()
    q = Q.quantize(bare, [x], chain=True)
    assert not q.int8_out and q.y_scale is None
    m = vnn.Sequential(vnn.SparseConv3d(4, 6), vnn.SparseConv3d(6, 3)).eval()
    q = Q.quantize(m, [x], output="int8", chain=True)
    assert q[0].int8_out and q[0].y_scale == q[1].x_scale
    assert not q[1].int8_out and q[1].y_scale is not None  # calibrated, dequantised
    with torch.no_grad():
        assert q(x).feats.dtype == torch.float32


# ---- observers, scales -----------------------------------------------------------

def test_minmax_and_percentile_observers():
    o = Q.MinMaxObserver()
    o.update(torch.tensor([[1.0, -3.0], [2.0, 0.5]]))
    o.update(torch.tensor([[2.5, -0.25]]))
    assert o.amax == 3.0
    assert o.scale() == float(torch.tensor(3.0) / 127)
    p = Q.PercentileObserver(99.99)
    v = torch.arange(1, 10001, dtype=torch.float32)
    p.update(v[:5000].reshape(-1, 1))
    p.update(-v[5000:].reshape(-1, 2))
    assert p.amax == 9999.0  # ceil(0.9999 * 10000) = 9999th smallest |x|
    assert Q.PercentileObserver(50).__class__ is Q.PercentileObserver
    p50 = Q.PercentileObserver(50)
    p50.update(v.reshape(-1, 1))
    assert p50.amax == 5000.0
    empty = Q.MinMaxObserver()
    assert empty.scale() == 1.0  # never 0: the C API refuses scales <= 0
    with pytest.raises(voxconv.InvalidArgumentError):
        Q.PercentileObserver(0)


def _exact_sse(v, t):
    """The squared error of quantizing v (float64 numpy) at threshold t:
    round half to even of v / (t / 127), clamped to +-127 (numpy, not the
    observer's histogram model)."""
    s = t / 127.0
    q = np.clip(np.rint(v / s), -127, 127) * s
    return float(((q - v) ** 2).sum())


@pytest.mark.parametrize("case", ["outliers", "uniform", "relu"])
def test_mse_observer_finds_the_least_error_threshold(case):
    """The MSE observer's threshold against a brute-force search of the
    exact quantization error over 400 thresholds: within 2% of the best
    (its histogram model averages the rounding error as s^2 / 12 and its
    candidates are 1/256 of max |x| apart, each worth well under 1% here),
    and never worse than min/max's threshold. With a few outliers 40x the
    bulk it clips (T well under the max); on uniform data it hardly
    clips."""
    g = torch.Generator().manual_seed(101)
    if case == "outliers":
        x = torch.randn(100000, generator=g)
        x[:7] *= 40.0
    elif case == "uniform":
        x = torch.rand(100000, generator=g) * 2 - 1
    else:
        x = torch.relu(torch.randn(50000, 4, generator=g))
    o = Q.MSEObserver()
    o.update(x[: len(x) // 2])
    o.update(x[len(x) // 2:])
    v = x.double().numpy().reshape(-1)
    top = float(np.abs(v).max())
    t = o.amax
    grid = min(_exact_sse(v, top * k / 400) for k in range(1, 401))
    assert 0 < t <= top
    assert _exact_sse(v, t) <= 1.02 * grid
    assert _exact_sse(v, t) <= _exact_sse(v, top) * (1 + 1e-12)
    if case == "outliers":
        assert t < 0.9 * top
    if case == "uniform":
        assert t > 0.95 * top
    assert o.scale() == float(torch.tensor(t, dtype=torch.float32) / 127)
    empty, zeros = Q.MSEObserver(), Q.MSEObserver()
    zeros.update(torch.zeros(10, 3))
    assert empty.scale() == zeros.scale() == 1.0
    with pytest.raises(voxconv.InvalidArgumentError):
        Q.MSEObserver(bins=8)


@pytest.mark.parametrize("cls", [Q.PercentileObserver, Q.MSEObserver])
def test_observer_samples_every_batch_alike(cls):
    """Past max_samples the kept values are a sample in which every value
    seen is about equally likely: batches of 2000, 2000 and 4000 values
    from [0, 1), [1, 2), [2, 3) leave shares 1/4, 1/4, 1/2 of a
    2000-value sample (binomial sd <= 1.2 points; 5 sd allowed). A
    uniform pick from the kept sample and the new batch together (the
    old reservoir) gives 1/6, 1/6, 2/3: 7-8 sd off."""
    o = cls(max_samples=2000)
    g = torch.Generator().manual_seed(7)
    for lo, n in ((0, 2000), (1, 2000), (2, 4000)):
        o.update(lo + torch.rand(n, generator=g))
    v = o._all()
    assert len(v) == 2000 and o.count == 3
    shares = [float(((v >= lo) & (v < lo + 1)).double().mean()) for lo in (0, 1, 2)]
    for got, want in zip(shares, (0.25, 0.25, 0.5)):
        assert abs(got - want) < 5 * math.sqrt(want * (1 - want) / 2000), shares


def test_quantize_calibrates_input_scales():
    x1 = _sparse(300, 8, 3, seed=1)
    x2 = _sparse(300, 8, 3, seed=2, scale=3.0)
    m = vnn.Sequential(vnn.SparseConv3d(3, 5))
    qm = Q.quantize(m, [x1, x2])
    amax = max(float(x1.feats.abs().max()), float(x2.feats.abs().max()))
    assert qm[0].x_scale == float(torch.tensor(amax) / 127)
    qp = Q.quantize(m, [x1, x2], observer="percentile", percentile=50.0)
    assert qp[0].x_scale < qm[0].x_scale
    qe = Q.quantize(m, [x1, x2], observer="mse")
    o = Q.MSEObserver()
    o.update(x1.feats)
    o.update(x2.feats)
    assert qe[0].x_scale == o.scale() and qe[0].x_scale <= qm[0].x_scale
    with pytest.raises(voxconv.InvalidArgumentError):
        Q.quantize(m, [x1], observer="histogram")
    with pytest.raises(voxconv.InvalidArgumentError):
        Q.quantize(m, [])


def test_weight_scales_and_zero_channel():
    conv = vnn.SparseConv3d(4, 6)
    with torch.no_grad():
        conv.weight[:, :, 2] = 0
        conv.bias[2] = -0.5
        conv.bias[3] = 0.25
    ws = Q.weight_scales(conv.weight)
    expect = conv.weight.detach().abs().amax(dim=(0, 1)) / 127
    assert ws[2] == 1.0
    assert torch.equal(ws[[0, 1, 3, 4, 5]], expect[[0, 1, 3, 4, 5]])
    dw = torch.randn(27, 5)
    dw[:, 1] = 0
    dws = Q.weight_scales(dw)
    assert dws[1] == 1.0 and torch.equal(dws[0], dw[:, 0].abs().max() / 127)
    x = _sparse(300, 8, 4, seed=4)
    q = Q.QuantizedSparseConv3d(conv, float(x.feats.abs().max()) / 127, relu=True)
    assert (q.weight[:, :, 2] == 0).all()
    y = q(x).feats
    assert (y[:, 2] == 0).all()  # relu(bias -0.5)
    assert _bits_equal(y.numpy(), _reference(q, x))
    q2 = Q.QuantizedSparseConv3d(conv, float(x.feats.abs().max()) / 127, relu=False)
    assert (q2(x).feats[:, 2] == -0.5).all()


def test_quantize_tensor_rounds_half_to_even_and_clamps():
    t = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 200.0, -1000.0])
    assert Q.quantize_tensor(t, 1.0).tolist() == [0, 2, 2, 0, -2, 127, -127]


def _quantize_numpy(x, s):
    """The documented rule restated in numpy: the float32 quotient (float64
    division rounded once to float32: innocuous double rounding, 53 >= 2 *
    24 + 2), ties to even (np.rint), clamp, NaN -> 0."""
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: +-inf
        t = (x.astype(np.float64) / np.float64(np.float32(s))).astype(np.float32)
    r = np.rint(t.astype(np.float64))
    r = np.where(np.isnan(r), 0.0, np.clip(r, -127, 127))
    return r.astype(np.int8)


def _random_features(n, ch, dtype, s, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, ch, generator=g, dtype=torch.float64) * 60 * s
    # ties, exact levels, specials and values beyond the clamp
    k = torch.randint(-130, 131, (n, ch), generator=g).double()
    pick = torch.randint(0, 8, (n, ch), generator=g)
    x = torch.where(pick == 0, (k + 0.5) * s, x)
    x = torch.where(pick == 1, k * s, x)
    sp = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e30, -1e30])
    x = torch.where(pick == 2, sp[torch.randint(0, 7, (n, ch), generator=g)].double(), x)
    return x.to(dtype).to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_quantize_tensor_one_pass_matches_the_rule(dtype):
    """quantize_tensor's library path (voxconv_quantize) against a numpy
    restatement of the rule and against the torch formula (equal where x is
    not NaN), at scales across the float32 range."""
    for i, s in enumerate([1.0, 0.013, 3.7e-6, 2.5e4, 1e-30]):
        x = _random_features(257, 19, dtype, s, seed=40 + i)
        q = Q.quantize_tensor(x, s)
        assert q.dtype == torch.int8 and q.shape == x.shape
        want = _quantize_numpy(x.float().numpy(), s)
        assert np.array_equal(q.numpy(), want), (dtype, s)
        ok = ~torch.isnan(x.float())
        assert torch.equal(q[ok], Q._quantize_tensor_torch(x, s)[ok])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dequantize_tensor_matches_torch(dtype):
    q = torch.arange(-128, 128, dtype=torch.int8).reshape(16, 16)
    for s in [1.0, 0.1, 3e-5, 7.7e3]:
        got = Q.dequantize_tensor(q, s, dtype)
        want = (q.float() * torch.tensor(s, dtype=torch.float32)).to(dtype)
        assert got.dtype == dtype and torch.equal(got, want), (dtype, s)


def test_quantize_tensor_bad_scale_and_dtype():
    x = torch.ones(4, 3)
    for s in [0.0, -1.0, float("nan"), float("inf")]:
        with pytest.raises(voxconv.errors.InvalidArgumentError):
            Q.quantize_tensor(x, s)
        with pytest.raises(voxconv.errors.InvalidArgumentError):
            Q.dequantize_tensor(torch.zeros(4, 3, dtype=torch.int8), s)
    with pytest.raises(voxconv.errors.InvalidArgumentError):
        Q.dequantize_tensor(x, 1.0)


def test_int8_features_are_taken_as_quantized():
    """A quantized layer given int8 features (an int8 pipeline's own
    tensors) skips its quantization: the same output as from the float
    features they quantize."""
    x = _sparse(400, 9, 6, seed=23)
    conv = vnn.SparseConv3d(6, 5)
    q = Q.quantize(conv, [x])
    qx = voxconv.SparseTensor(Q.quantize_tensor(x.feats, q.x_scale), x.coords)
    assert torch.equal(q(qx).feats, q(x).feats)


def test_int8_sparse_tensor_pools_and_float_layers_refuse_it():
    """int8 features in a SparseTensor: max pooling is exact (the float
    pool of the same values, back in int8); a float conv refuses them with
    a dtype error instead of reading the bytes as something else."""
    x = _sparse(500, 10, 7, seed=24)
    q = Q.quantize_tensor(x.feats, float(x.feats.abs().max()) / 127)
    xq = voxconv.SparseTensor(q, x.coords)
    pool = vnn.SparseMaxPool3d(2, 2)
    yq = pool(xq)
    yf = pool(voxconv.SparseTensor(q.float(), x.coords))
    assert yq.feats.dtype == torch.int8
    assert torch.equal(yq.feats, yf.feats.to(torch.int8))
    with pytest.raises(voxconv.errors.DtypeMismatchError):
        vnn.SparseConv3d(7, 4)(xq)


def test_runs_under_inference_mode_and_no_grad():
    x = _sparse(300, 8, 3, seed=21)
    m = vnn.Sequential(vnn.SparseConv3d(3, 4), vnn.SparseBatchNorm(4), vnn.SparseReLU())
    m.eval()
    qm = Q.quantize(m, [x])
    with torch.inference_mode():
        a = qm(x).feats
        qm2 = Q.quantize(m, [x])
        assert torch.equal(qm2(x).feats, a)
    with torch.no_grad():
        b = qm(x).feats
    assert torch.equal(a, b) and not b.requires_grad


# ---- the example network -----------------------------------------------------------

DATA = os.environ.get("VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
SCAN = os.path.join(DATA, "scans", "semantickitti_00_000000.bin")
HELDOUT = os.path.join(DATA, "scans", "kitti_000000.bin")


def _example():
    spec = importlib.util.spec_from_file_location(
        "voxconv_example_train_segmentation",
        os.path.join(REPO, "examples", "train_segmentation.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_network_sqnr_and_agreement():
    """MiniMinkUNet (--small widths 8,16,24,32, 0.4 m voxels), 30 AdamW steps
    on the SemanticKITTI scan (or the example's synthetic scene), calibrated
    (min/max) on that scan, evaluated on another (KITTI object frame 000000;
    synthetic: another seed).

    Measured (CPU, real scans, 30 steps, seeds 0-7): per-layer SQNR on the
    calibration scan >= 32.3 dB for every layer and seed; on the held-out
    scan per-layer minimum 12.6-33.5 dB (deep layers saturate where the new
    scan's activations exceed the calibrated range), median >= 31 dB; argmax
    agreement with the float model 97.5-98.8 % held out, 98.5-99.4 % on the
    calibration scan (a briefly trained net has many near ties). So the
    asserted bounds: every layer >= 30 dB on the calibration scan, median
    >= 28 dB held out, agreement >= 95 % held out (2.5 points under the worst
    seed). The 99 % target of the issue is not reached by this setup."""
    ex = _example()
    torch.manual_seed(0)
    if os.path.exists(SCAN) and os.path.exists(HELDOUT):
        pts, lab = ex.load_scan(SCAN, os.path.splitext(SCAN)[0] + ".label")
        p2 = torch.from_numpy(np.fromfile(HELDOUT, "<f4").reshape(-1, 4).copy())
        source = "real scans"
    else:
        pts, lab = ex.synthetic_scan(40000, seed=0)
        p2, _ = ex.synthetic_scan(40000, seed=1)
        source = "synthetic scenes"
    x, target, _ = ex.voxelize_scan(pts, lab, 0.4, "cpu")
    x2, _, _ = ex.voxelize_scan(p2, torch.full((len(p2),), -1), 0.4, "cpu")
    model = ex.MiniMinkUNet(x.num_channels, len(ex.CLASSES), [8, 16, 24, 32])
    opt = torch.optim.AdamW(model.parameters(), 2e-2)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=ex.IGNORE)
    for _ in range(30):
        model.train()
        opt.zero_grad()
        loss_fn(model(x), target).backward()
        opt.step()
    model.eval()
    qm = Q.quantize(model, [x])
    assert sum(isinstance(m, Q._QuantizedConvBase) for m in qm.modules()) == 14
    rep_cal = Q.sqnr_report(model, qm, x)
    rep_new = Q.sqnr_report(model, qm, x2)
    with torch.inference_mode():
        agree_new = float((model(x2).argmax(1) == qm(x2).argmax(1)).float().mean())
        agree_cal = float((model(x).argmax(1) == qm(x).argmax(1)).float().mean())
    print(f"\n{source}: calibration scan ({len(x)} voxels)\n{rep_cal}\n"
          f"held-out scan ({len(x2)} voxels)\n{rep_new}\n"
          f"argmax agreement: held out {100 * agree_new:.2f} %, calibration scan "
          f"{100 * agree_cal:.2f} %")
    assert rep_cal.min() >= 30, str(rep_cal)
    held = sorted(db for _n, _k, db in rep_new)
    assert held[len(held) // 2] >= 28, str(rep_new)
    assert agree_new >= 0.95 and agree_cal >= 0.97


@pytest.mark.skipif(not (os.path.exists(SCAN) and os.path.exists(HELDOUT)),
                    reason="the recorded scans are not under VOXCONV_DATA_DIR")
def test_quantize_segmentation_example_reports_both_scans(tmp_path):
    """examples/quantize_segmentation.py end to end on the CPU (CI-sized):
    one JSON entry per observer and kept-float set, each with per-layer
    SQNR and argmax agreement on the calibration and the held-out scan.
    The bounds are the example network test's (above): a layer under 30
    dB on the calibration scan, or agreement under 95 % held out, is a
    quantization defect, not training noise; the kept-float run has one
    quantized layer fewer."""
    spec = importlib.util.spec_from_file_location(
        "voxconv_example_quantize_segmentation",
        os.path.join(REPO, "examples", "quantize_segmentation.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "q.json"
    mod.main(["--small", "--steps", "30", "--device", "cpu", "--keep-float", "stem.0.0",
              "--data-dir", os.path.dirname(os.path.dirname(SCAN)), "--json", str(out)])
    res = json.loads(out.read_text())
    runs = res["observers"]
    assert sorted(runs) == ["minmax", "minmax, float: stem.0.0"]
    for tag, run in runs.items():
        cal, held = run["calibration"], run["heldout"]
        n_layers = 14 - (1 if "float" in tag else 0)
        assert len(cal["sqnr_db"]) == n_layers and len(held["sqnr_db"]) == n_layers
        assert ("stem.0.0" in cal["sqnr_db"]) == ("float" not in tag)
        assert cal["sqnr_min_db"] >= 30, tag
        assert 0.95 <= held["agree_int8_fp32"] <= 1.0, tag
        assert held["voxels"] > 0 and cal["voxels"] > 0


def test_quantize_segmentation_example_augment_equalize_all_mse(tmp_path):
    """The example's other options end to end on the CPU: training on
    augmented copies of the scan, a second calibration scan (its voxels
    recorded), the MSE observer, every layer's input equalised (all 14
    layers quantized, each equalised, so the observer does not change
    them), forward timings, and a chained run; the held-out scan refused
    as a calibration scan. Bounds as above."""
    spec = importlib.util.spec_from_file_location(
        "voxconv_example_quantize_segmentation2",
        os.path.join(REPO, "examples", "quantize_segmentation.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = os.path.dirname(os.path.dirname(SCAN))
    out = tmp_path / "q.json"
    mod.main(["--small", "--steps", "30", "--device", "cpu", "--augment", "--observer", "mse",
              "--equalize", "all", "--calibrate-extra", "scans/kitti_000008.bin",
              "--time", "1", "--data-dir", data, "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["augment"] is True and res["chain"] is False
    assert res["forward_ms"]["fp32"] > 0
    assert [os.path.basename(e) for e in res["calibrate_extra"]] == ["kitti_000008.bin"]
    runs = res["observers"]
    assert sorted(runs) == ["mse", "mse, equalised: all"]
    # every layer equalised: the 4 fed by a quantized layer alone fold (stem.1, down.i.1)
    assert runs["mse, equalised: all"]["folded_layers"] == 4 and runs["mse"]["folded_layers"] == 0
    for tag, run in runs.items():
        cal, held = run["calibration"], run["heldout"]
        assert len(cal["sqnr_db"]) == len(held["sqnr_db"]) == 14
        assert cal["sqnr_min_db"] >= 30, tag
        assert 0.95 <= held["agree_int8_fp32"] <= 1.0, tag
        assert run["forward_ms"] > 0
    # chained (a chained layer's reported output includes the next layer's
    # input rounding, so the bounds above do not apply): the layers
    # actually handed int8 on, agreement still reported
    out2 = tmp_path / "q2.json"
    mod.main(["--small", "--steps", "5", "--device", "cpu", "--chain", "--data-dir", data,
              "--json", str(out2)])
    res2 = json.loads(out2.read_text())
    assert res2["chain"] is True
    run2 = res2["observers"]["minmax"]
    assert run2["chained_layers"] == 4  # stem.0 -> stem.1, down.i.0 -> down.i.1
    assert 0 <= run2["heldout"]["agree_int8_fp32"] <= 1
    with pytest.raises(SystemExit):
        mod.main(["--small", "--steps", "1", "--device", "cpu", "--data-dir", data,
                  "--calibrate-extra", "scans/kitti_000000.bin"])


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("depthwise", [False, True])
def test_out_dtype_is_the_float32_output_rounded(out_dtype, depthwise):
    """out_dtype float16 / bfloat16: the library writes v rounded to nearest
    even (voxconv.h step 5), i.e. exactly the float32 output converted
    (torch's conversion rounds to nearest even too): bit for bit, bias and
    ReLU included, and the requantised output's dequantisation likewise."""
    x = _sparse(700, 9, 6, seed=51)
    conv = vnn.SparseDepthwiseConv3d(6) if depthwise else vnn.SparseConv3d(6, 11)
    with torch.no_grad():
        conv.bias = torch.nn.Parameter(torch.randn(6 if depthwise else 11))
    m = vnn.Sequential(conv, vnn.SparseReLU())
    for output in ("float", "int8"):
        q32 = Q.quantize(m, [x], output=output)
        qh = Q.quantize(m, [x], output=output, out_dtype=out_dtype)
        assert qh[0].x_scale == q32[0].x_scale
        with torch.inference_mode():
            y32, yh = q32(x).feats, qh(x).feats
        assert yh.dtype == out_dtype
        assert torch.equal(yh.view(torch.int16), y32.to(out_dtype).view(torch.int16))


def test_out_dtype_refused():
    x = _sparse(100, 6, 3, seed=53)
    with pytest.raises(voxconv.InvalidArgumentError, match="out_dtype"):
        Q.quantize(vnn.Sequential(vnn.SparseConv3d(3, 4)), [x], out_dtype=torch.int32)


# ---- CUDA -------------------------------------------------------------------------

@pytest.mark.skipif(not cuda_usable(), reason="no CUDA")
@pytest.mark.parametrize("output,out_dtype", [("float", torch.float32), ("int8", torch.float32),
                                              ("float", torch.float16)])
def test_cuda_matches_cpu_bitwise(output, out_dtype):
    """The same quantized model on the GPU (tensor-core int8) and the CPU
    gives the same bits: both compute exact int32 sums and the epilogue
    voxconv.h specifies; odd channel counts, BN + ReLU fused, depthwise."""
    x = _sparse(3000, 14, 5, seed=31)
    m = vnn.Sequential(vnn.SparseConv3d(5, 24), vnn.SparseBatchNorm(24), vnn.SparseReLU(),
                       vnn.SparseDepthwiseConv3d(24), vnn.SparseConv3d(24, 40, 3, 2),
                       vnn.SparseConv3d(40, 17, 3))
    _randomize_bn(m[1].module, 24, 5)
    m.eval()
    qm = Q.quantize(m, [x], output=output, out_dtype=out_dtype)
    with torch.inference_mode():
        out_cpu = qm(x)
        qg = copy.deepcopy(qm).cuda()
        out_gpu = qg(x.to("cuda"))
    # the strided layer's output rows come in each backend's own order:
    # compare row by coordinate
    def by_coords(t):
        c = t.coords.cpu().long()
        key = ((c[:, 0] * 4096 + c[:, 1]) * 4096 + c[:, 2]) * 4096 + c[:, 3]
        return t.feats.cpu()[torch.argsort(key)], torch.sort(key).values
    y_cpu, k_cpu = by_coords(out_cpu)
    y_gpu, k_gpu = by_coords(out_gpu)
    assert torch.equal(k_cpu, k_gpu)
    assert y_gpu.dtype == y_cpu.dtype == out_dtype and y_gpu.shape == y_cpu.shape
    bits = torch.int32 if out_dtype == torch.float32 else torch.int16
    assert torch.equal(y_gpu.view(bits), y_cpu.view(bits))


@pytest.mark.skipif(not cuda_usable(), reason="no CUDA")
def test_cuda_koi_weights_follow_in_place_changes():
    """On CUDA the layer hands the op its weights in the KOI layout, made
    once per version of ``weight`` (read in place at cin 32 and 64): the
    CPU's bits, before and after an in-place change of the weights."""
    x = _sparse(3000, 14, 32, seed=71)
    m = vnn.Sequential(vnn.SparseConv3d(32, 64), vnn.SparseConv3d(64, 48))
    qm = Q.quantize(m.eval(), [x])
    qg = copy.deepcopy(qm).cuda()
    xg = x.to("cuda")
    outs = []
    for step in range(2):
        out_cpu, out_gpu = qm(x).feats, qg(xg).feats.cpu()
        assert torch.equal(out_gpu.view(torch.int32), out_cpu.view(torch.int32))
        assert qg[1]._koi[1].shape == (27, 48, 64)
        outs.append(out_cpu)
        with torch.no_grad():  # both copies change alike
            qm[1].weight.neg_()
            qg[1].weight.neg_()
    assert not torch.equal(outs[0], outs[1])  # the change reached the output


@pytest.mark.skipif(not cuda_usable(), reason="no CUDA")
def test_cuda_chain_matches_cpu_bitwise():
    """A chained int8 pipeline (int8 features between layers, int8 max
    pooling) gives the CPU's bits on the GPU."""
    x = _sparse(3000, 14, 5, seed=47)
    qm = Q.quantize(_chain_model(), [x], chain=True)
    with torch.inference_mode():
        out_cpu = qm(x)
        out_gpu = copy.deepcopy(qm).cuda()(x.to("cuda"))

    def by_coords(t):
        c = t.coords.cpu().long()
        key = ((c[:, 0] * 4096 + c[:, 1]) * 4096 + c[:, 2]) * 4096 + c[:, 3]
        return t.feats.cpu()[torch.argsort(key)]
    assert torch.equal(by_coords(out_gpu).view(torch.int32),
                       by_coords(out_cpu).view(torch.int32))


@pytest.mark.skipif(not cuda_usable(), reason="no CUDA")
@pytest.mark.parametrize("observer", ["minmax", "mse"])
def test_cuda_calibration_equalize_matches_cpu(observer):
    """A model on the GPU calibrated on GPU batches (the observers' maxima
    and samples kept on the CPU, the weights on the GPU) quantizes its
    first layer, input equalised, to the CPU calibration's parameters
    bit for bit (its input is the raw batch on both), and that layer then
    gives the CPU's bits."""
    x = _sparse(2000, 12, 3, seed=53)
    x = x.replace_feature(x.feats * torch.tensor([15.0, 15.0, 0.2]))
    m = vnn.Sequential(vnn.SparseConv3d(3, 16), vnn.SparseReLU(), vnn.SparseConv3d(16, 8)).eval()
    qc = Q.quantize(m, [x], observer=observer, equalize=["0"])
    qg = Q.quantize(copy.deepcopy(m).cuda(), [x.to("cuda")], observer=observer,
                    equalize=["0"])
    assert qg[0].in_scale.is_cuda and qg[0].weight.is_cuda
    assert torch.equal(qg[0].in_scale.cpu(), qc[0].in_scale)
    assert qg[0].x_scale == qc[0].x_scale
    assert torch.equal(qg[0].weight.cpu(), qc[0].weight)
    assert torch.equal(qg[0].weight_scale.cpu(), qc[0].weight_scale)
    with torch.inference_mode():
        yc = qc[0](x).feats
        yg = qg[0](x.to("cuda")).feats.cpu()
    assert torch.equal(yg.view(torch.int32), yc.view(torch.int32))
    # weight scales: torch's CUDA division by a scalar (a reciprocal
    # multiply) differed from the CPU's in the last bit on some channels
    w = torch.randn(27, 16, 4096) * torch.rand(4096) * 3
    assert torch.equal(Q.weight_scales(w.cuda()).cpu(), Q.weight_scales(w))


@pytest.mark.skipif(not cuda_usable(), reason="no CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_quantize_tensor_matches_cpu(dtype):
    """voxconv_quantize / voxconv_dequantize on the GPU give the CPU's bits,
    on a tensor whose element count is not a multiple of 8, aligned and
    starting one element into its storage (the kernels' element path)."""
    for i, s in enumerate([0.02, 5.5e-7, 3e3]):
        x = _random_features(4099, 13, dtype, s, seed=60 + i)
        base = torch.empty(x.numel() + 1, dtype=dtype, device="cuda")
        base[1:] = x.reshape(-1).cuda()
        for xg in (x.cuda(), base[1:].view(x.shape)):
            q_cpu, q_gpu = Q.quantize_tensor(x, s), Q.quantize_tensor(xg, s)
            assert torch.equal(q_gpu.cpu(), q_cpu)
            d_cpu = Q.dequantize_tensor(q_cpu, s, dtype)
            d_gpu = Q.dequantize_tensor(q_gpu, s, dtype)
            assert torch.equal(d_gpu.cpu(), d_cpu)


@pytest.mark.skipif(not cuda_usable(), reason="no CUDA")
def test_cuda_checks_scales_once():
    """On CUDA the op cannot read the scales; the layer checks them with
    voxconv_quant_params_check before its first call and after an in-place
    change: a non-positive scale is InvalidArgumentError, not garbage."""
    x = _sparse(300, 8, 3, seed=33).to("cuda")
    qm = Q.quantize(vnn.Sequential(vnn.SparseConv3d(3, 4)), [x.to("cpu")]).cuda()
    qm(x)
    qm[0].weight_scale[2] = -1.0
    with pytest.raises(voxconv.InvalidArgumentError, match="w_scale"):
        qm(x)
    qm[0].weight_scale[2] = float("nan")
    with pytest.raises(voxconv.InvalidArgumentError, match="w_scale"):
        qm(x)


def test_quantize_int8_output_calibrates_output_scales():
    x = _sparse(600, 10, 4, seed=41)
    m = vnn.Sequential(vnn.SparseConv3d(4, 8), vnn.SparseBatchNorm(8), vnn.SparseReLU(),
                       vnn.SparseConv3d(8, 6))
    _randomize_bn(m[1].module, 8, 3)
    m.eval()
    qm = Q.quantize(m, [x], output="int8")
    with torch.no_grad():
        h = m[2](m[1](m[0](x))).feats
    assert qm[0].y_scale == float(torch.tensor(float(h.abs().max())) / 127)
    y = qm(x).feats
    # every output is a multiple of the last layer's y_scale, within +-127
    ys = torch.tensor(qm[3].y_scale)
    k = torch.round(y / ys)
    assert torch.equal(k * ys, y) and k.abs().max() <= 127
    # within the format bound, the int8 outputs' half step included
    layers = [(qm[0], m[0], m[1].module, True), (qm[3], m[3], None, False)]
    assert max(_format_bound_ratios(layers, m, x)) <= 1
    assert [r[0] for r in Q.sqnr_report(m, qm, x)] == ["0", "3"]
    with pytest.raises(voxconv.InvalidArgumentError):
        Q.quantize(m, [x], output="int4")
