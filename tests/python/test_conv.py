"""Regular and depthwise sparse convolution: forward against a brute-force
fp64 reference (all four map modes), gradcheck in fp64, modules against the
functional API, kernel-map reuse, contiguity, threads, dtypes."""

import gc
import threading

import pytest
import torch
import torch.nn.functional as tF

import voxconv

import ref

MODES = ["submanifold", "strided", "transposed", "generative"]


def _tol(dtype):
    return {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 2e-2,
            torch.bfloat16: 8e-2}[dtype]


def _assert_close(got, want, dtype):
    want = want.to(torch.float64)
    got = got.detach().double().cpu()
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.isfinite(got).all()
    scale = want.abs().max().item() + 1e-12
    err = (got - want).abs().max().item()
    assert err <= _tol(dtype) * scale, f"max abs err {err} vs scale {scale}"


def _setup(mode, device, dtype, cin=3, ks=(3, 3, 3), stride=(2, 2, 2), dil=(1, 1, 1),
           n=60, extent=7, batches=2):
    """An input SparseTensor for `mode` and the reference pairs. For
    'transposed' the input is the strided version of a fine tensor that
    lives in the same coordinate manager (the U-Net situation)."""
    fine = ref.rand_coords(n, extent, batches, lo=-3)
    if mode == "transposed":
        fine_t = voxconv.SparseTensor(torch.zeros(len(fine), 1, dtype=dtype, device=device),
                                      fine.to(device))
        _, coarse = fine_t.manager.kernel_map(  # registers the stride-s coordinates
            fine_t.coordinate_set, voxconv._lib.KMAP_STRIDED, ks, stride, dil)
        coords = coarse.coords.cpu()
        x = torch.randn(len(coords), cin, dtype=dtype, device=device)
        inp = voxconv.SparseTensor(x, None, _coord_set=coarse)
        out_ref, pairs = ref.kernel_pairs("transposed", coords, ks, stride, dil, out_coords=fine)
    else:
        x = torch.randn(len(fine), cin, dtype=dtype, device=device)
        # generative maps upsample: the input must sit at a stride-divisible level
        inp = voxconv.SparseTensor(x, fine.to(device),
                                   stride if mode == "generative" else 1)
        st = (1, 1, 1) if mode == "submanifold" else stride
        out_ref, pairs = ref.kernel_pairs(mode, fine, ks, st, dil)
    return inp, out_ref, pairs


def _conv_args(mode, ks, stride, dil):
    return dict(kernel_size=ks, stride=(1, 1, 1) if mode == "submanifold" else stride,
                dilation=dil, transposed=mode in ("transposed", "generative"),
                generative=mode == "generative")


GEOMS = [((3, 3, 3), (2, 2, 2), (1, 1, 1)), ((2, 2, 2), (2, 2, 2), (1, 1, 1)),
         ((3, 1, 2), (1, 2, 3), (2, 1, 1))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("geom", GEOMS, ids=["k3s2", "k2s2", "mixed"])
def test_conv_forward_matches_reference(device, mode, geom):
    ks, stride, dil = geom
    if mode == "submanifold":
        stride = (1, 1, 1)
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    inp, out_ref, pairs = _setup(mode, device, dtype, ks=ks, stride=stride, dil=dil)
    K = ks[0] * ks[1] * ks[2]
    w = torch.randn(K, 3, 5, dtype=dtype, device=device)
    y = voxconv.spatially_sparse_conv(inp, w, **_conv_args(mode, ks, stride, dil))
    assert torch.equal(y.coords.cpu(), out_ref), "output coordinates differ"
    assert y.manager is inp.manager
    _assert_close(y.feats, ref.conv(inp.feats, w, len(out_ref), pairs), dtype)
    if mode in ("submanifold", "strided"):
        want_ts = tuple(t * s for t, s in zip(inp.tensor_stride, stride))
    else:
        want_ts = tuple(t // s for t, s in zip(inp.tensor_stride, stride))
    assert y.tensor_stride == want_ts


@pytest.mark.parametrize("mode", MODES)
def test_depthwise_forward_matches_reference(device, mode):
    ks, stride, dil = (3, 3, 3), (2, 2, 2), (1, 1, 1)
    if mode == "submanifold":
        stride = (1, 1, 1)
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    inp, out_ref, pairs = _setup(mode, device, dtype, cin=4, ks=ks, stride=stride)
    w = torch.randn(27, 4, dtype=dtype, device=device)
    y = voxconv.spatially_sparse_depthwise_conv(inp, w, **_conv_args(mode, ks, stride, dil))
    assert torch.equal(y.coords.cpu(), out_ref)
    _assert_close(y.feats, ref.depthwise(inp.feats, w, len(out_ref), pairs), dtype)


def test_submanifold_and_strided_match_dense_conv3d():
    """The documented weight layout: a dense Conv3d weight [out, in, kx, ky,
    kz] becomes W.permute(2, 3, 4, 1, 0).reshape(K, in, out), and the sparse
    result equals F.conv3d (padding (k-1)//2 * d, right-padded for even k)
    at the output sites."""
    G = 8
    coords = ref.rand_coords(90, G, 1)
    cin, cout = 2, 3
    x = torch.randn(len(coords), cin, dtype=torch.float64)
    inp = voxconv.SparseTensor(x, coords)
    dense = inp.dense(spatial_shape=G)
    for ks, st, dl in [((3, 3, 3), 1, 1), ((3, 2, 3), 1, (1, 2, 1)), ((2, 2, 2), 2, 1),
                       ((3, 3, 3), 2, 1)]:
        W = torch.randn(cout, cin, *ks, dtype=torch.float64)
        K = ks[0] * ks[1] * ks[2]
        w = W.permute(2, 3, 4, 1, 0).reshape(K, cin, cout)
        dl3 = dl if isinstance(dl, tuple) else (dl,) * 3
        pad = []
        for k, d in reversed(list(zip(ks, dl3))):
            left = (k - 1) // 2 * d
            pad += [left, (k - 1) * d - left]
        yd = tF.conv3d(tF.pad(dense, pad), W, stride=st, dilation=dl3)
        y = voxconv.spatially_sparse_conv(inp, w, ks, st, dl)
        c = y.coords.long()
        want = yd[c[:, 0], :, c[:, 1], c[:, 2], c[:, 3]]
        torch.testing.assert_close(y.feats, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_conv_gradcheck_fp64(mode):
    ks, stride = (3, 3, 3), (2, 2, 2)
    if mode == "submanifold":
        stride = (1, 1, 1)
    inp, _, _ = _setup(mode, torch.device("cpu"), torch.float64, cin=2, n=25, extent=5,
                       batches=1)
    x = inp.feats.clone().requires_grad_()
    w = torch.randn(27, 2, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    args = _conv_args(mode, ks, stride, (1, 1, 1))

    def f(x, w, b):
        return voxconv.spatially_sparse_conv(inp.replace_feature(x), w, bias=b, **args).feats

    assert torch.autograd.gradcheck(f, (x, w, b), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_depthwise_gradcheck_fp64(mode):
    ks, stride = (3, 3, 3), (2, 2, 2)
    if mode == "submanifold":
        stride = (1, 1, 1)
    inp, _, _ = _setup(mode, torch.device("cpu"), torch.float64, cin=3, n=25, extent=5,
                       batches=1)
    x = inp.feats.clone().requires_grad_()
    w = torch.randn(27, 3, dtype=torch.float64, requires_grad=True)
    args = _conv_args(mode, ks, stride, (1, 1, 1))

    def f(x, w):
        return voxconv.spatially_sparse_depthwise_conv(inp.replace_feature(x), w, **args).feats

    assert torch.autograd.gradcheck(f, (x, w), eps=1e-6, atol=1e-7)


def test_grad_only_for_what_requires_it():
    coords = ref.rand_coords(40, 5)
    x = torch.randn(len(coords), 2, dtype=torch.float64)
    w = torch.randn(27, 2, 2, dtype=torch.float64, requires_grad=True)
    y = voxconv.spatially_sparse_conv(voxconv.SparseTensor(x, coords), w)
    y.feats.sum().backward()
    assert w.grad is not None and x.grad is None


@pytest.mark.parametrize("kind", ["conv", "transpose", "depthwise"])
def test_modules_match_functional(device, kind):
    dtype = torch.float32
    coords = ref.rand_coords(80, 8, 2)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 4, device=device), coords.to(device))
    if kind == "conv":
        m = voxconv.nn.SparseConv3d(4, 6, kernel_size=3, stride=2, dilation=1,
                                    device=device, dtype=dtype)
        assert m.weight.shape == (27, 4, 6) and m.bias.shape == (6,)
        y = m(inp)
        y2 = voxconv.spatially_sparse_conv(inp, m.weight, 3, 2, bias=m.bias)
    elif kind == "transpose":
        down = voxconv.nn.SparseConv3d(4, 6, kernel_size=2, stride=2, bias=False,
                                       device=device)
        coarse = down(inp)
        m = voxconv.nn.SparseConvTranspose3d(6, 5, kernel_size=2, stride=2, device=device)
        y = m(coarse)
        y2 = voxconv.spatially_sparse_conv(coarse, m.weight, 2, 2, transposed=True,
                                           bias=m.bias)
        assert y.coordinate_set is inp.coordinate_set, "upsampling lands on the encoder's coords"
    else:
        m = voxconv.nn.SparseDepthwiseConv3d(4, kernel_size=3, device=device)
        assert m.weight.shape == (27, 4)
        y = m(inp)
        y2 = voxconv.spatially_sparse_depthwise_conv(inp, m.weight, 3, bias=m.bias)
    assert torch.equal(y.coords, y2.coords)
    # bitwise on the CPU; on the GPU the tuner may pick another algorithm
    # (or summation order) for the second call
    tol = 0 if device.type == "cpu" else 1e-5
    torch.testing.assert_close(y.feats, y2.feats, rtol=tol, atol=tol)
    # parameters get gradients through the module
    y.feats.square().sum().backward()
    assert m.weight.grad is not None and torch.isfinite(m.weight.grad).all()


@pytest.mark.parametrize("depthwise", [False, True])
def test_module_attributes_set_after_construction_take_effect(depthwise):
    """The modules remember their call configuration and map key with the
    attribute values they came from (nn._call_plan): a changed stride,
    dilation, algorithm or fp16 setting must be seen by the next call,
    exactly as a fresh module with those values would run it."""
    coords = ref.rand_coords(120, 9, 2)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 4, dtype=torch.float64), coords)
    if depthwise:
        m = voxconv.nn.SparseDepthwiseConv3d(4, 3, bias=False, dtype=torch.float64)
        fn = voxconv.spatially_sparse_depthwise_conv
    else:
        m = voxconv.nn.SparseConv3d(4, 5, 3, bias=False, dtype=torch.float64)
        fn = voxconv.spatially_sparse_conv
    y1 = m(inp)
    assert torch.equal(y1.coords, inp.coords)  # submanifold
    for attr, value, kwargs in (("stride", (2, 2, 2), {"stride": 2}),
                                ("dilation", (2, 1, 1), {"stride": 2, "dilation": (2, 1, 1)})):
        setattr(m, attr, value)
        y = m(inp)
        want = fn(inp, m.weight, 3, **kwargs)
        assert len(y.coords) < len(inp.coords)  # the strided map, not the cached one
        assert torch.equal(y.coords, want.coords)
        assert torch.equal(y.feats, want.feats)
    m.stride, m.dilation = (1, 1, 1), (1, 1, 1)
    assert torch.equal(m(inp).feats, y1.feats)  # back on the first map
    m.use_fp16_accum = "yes"
    with pytest.raises(voxconv.InvalidArgumentError, match="use_fp16_accum"):
        m(inp)
    m.use_fp16_accum = None
    m.fwd_algo = "no such algorithm"
    with pytest.raises(voxconv.VoxconvError):
        m(inp)


def test_weight_init_bounds():
    m = voxconv.nn.SparseConv3d(16, 8, kernel_size=3)
    bound = 1 / (16 * 27) ** 0.5
    assert m.weight.abs().max() <= bound and m.weight.abs().max() > bound / 2
    assert m.bias.abs().max() <= bound
    assert "kernel_size=(3, 3, 3)" in repr(m)
    assert voxconv.nn.SparseConv3d(2, 2, bias=False).bias is None


def test_kernel_maps_are_cached_and_shared():
    coords = ref.rand_coords(100, 8)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 2), coords)
    mgr = inp.manager
    a = voxconv.nn.SparseConv3d(2, 2, 3)
    b = voxconv.nn.SparseConv3d(2, 2, 3)
    y = b(a(inp))
    maps = inp.coordinate_set.kmaps
    assert len(maps) == 1, "two submanifold layers share one map"
    km = next(iter(maps.values()))[0]
    assert km.n_in == km.n_out == len(coords) and km.kernel_volume == 27
    # same map object after backward and another forward
    y.feats.sum().backward()
    b(a(inp))
    assert next(iter(maps.values()))[0] is km
    # strided conv and pooling with the same stride share the output coordinates
    d1 = voxconv.nn.SparseConv3d(2, 2, kernel_size=2, stride=2)(inp)
    d2 = voxconv.sparse_max_pool(inp, 2, 2)
    d3 = voxconv.nn.SparseConv3d(2, 2, kernel_size=3, stride=2)(inp)
    assert d1.coordinate_set is d2.coordinate_set is d3.coordinate_set
    assert mgr.at_stride((2, 2, 2)) is d1.coordinate_set
    # pairs are reported in the documented order
    offsets, in_rows, out_rows = km.pairs()
    assert offsets[0] == 0 and offsets[-1] == km.n_pairs
    _, pairs = ref.kernel_pairs("submanifold", coords, (3, 3, 3), (1, 1, 1), (1, 1, 1))
    assert km.n_pairs == len(pairs)
    got = {(int(i), int(o), k) for k in range(27)
           for i, o in zip(in_rows[offsets[k]:offsets[k + 1]], out_rows[offsets[k]:offsets[k + 1]])}
    assert got == set(pairs)
    km.verify(coords)
    with pytest.raises(voxconv.KmapMismatchError):
        km.verify(ref.rand_coords(10, 3))


def test_kernel_map_outlives_dropped_tensors_until_backward():
    coords = ref.rand_coords(60, 6)
    w = torch.randn(27, 2, 3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(len(coords), 2, dtype=torch.float64, requires_grad=True)
    feats = voxconv.spatially_sparse_conv(voxconv.SparseTensor(x, coords), w, 3, 2).feats
    gc.collect()  # the SparseTensors and their manager are gone; the map is not
    feats.sum().backward()
    assert x.grad is not None and w.grad is not None and torch.isfinite(x.grad).all()


def test_noncontiguous_inputs_are_made_contiguous(device):
    coords = ref.rand_coords(70, 6).to(device)
    xt = torch.randn(3, len(coords), device=device)
    x = xt.t()  # non-contiguous view
    assert not x.is_contiguous()
    wt = torch.randn(27, 4, 3, device=device)
    w = wt.transpose(1, 2)  # [27, 3, 4], non-contiguous
    ct = torch.stack([coords, coords], 2)[:, :, 0]  # non-contiguous coords (same values)
    assert not ct.is_contiguous() and torch.equal(ct, coords)
    y1 = voxconv.spatially_sparse_conv(voxconv.SparseTensor(x, ct), w)
    y2 = voxconv.spatially_sparse_conv(voxconv.SparseTensor(x.contiguous(), coords),
                                       w.contiguous())
    torch.testing.assert_close(y1.feats, y2.feats, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_forward_and_backward(device, dtype):
    coords = ref.rand_coords(80, 7)
    x = torch.randn(len(coords), 8).to(device=device, dtype=dtype)
    w = (torch.randn(27, 8, 8) * 0.2).to(device=device, dtype=dtype).requires_grad_()
    inp = voxconv.SparseTensor(x, coords.to(device))
    y = voxconv.spatially_sparse_conv(inp, w)
    assert y.dtype == dtype
    _, pairs = ref.kernel_pairs("submanifold", coords, (3, 3, 3), (1, 1, 1), (1, 1, 1))
    _assert_close(y.feats, ref.conv(x, w.detach(), len(coords), pairs), dtype)
    y.feats.float().sum().backward()
    assert w.grad.dtype == dtype and torch.isfinite(w.grad.float()).all()


def test_threads_share_the_library_safely():
    """ctypes releases the GIL during calls; per-handle locks keep the
    shared CPU handle correct under concurrent use."""
    coords = ref.rand_coords(400, 12)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 16, dtype=torch.float64), coords)
    w = torch.randn(27, 16, 16, dtype=torch.float64)
    want = voxconv.spatially_sparse_conv(inp, w).feats
    results, errs = [], []

    def work():
        try:
            for _ in range(5):
                x2 = voxconv.SparseTensor(inp.feats, coords.clone())  # own map each time
                results.append(voxconv.spatially_sparse_conv(x2, w).feats)
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=work) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs
    assert len(results) == 15
    for r in results:
        assert torch.equal(r, want)


def test_empty_tensor():
    coords = torch.zeros((0, 4), dtype=torch.int32)
    inp = voxconv.SparseTensor(torch.zeros(0, 3), coords)
    w = torch.randn(27, 3, 4)
    y = voxconv.spatially_sparse_conv(inp, w)
    assert y.feats.shape == (0, 4)
    y2 = voxconv.spatially_sparse_conv(inp, torch.randn(8, 3, 4), 2, 2)
    assert y2.feats.shape == (0, 4) and y2.coords.shape == (0, 4)


def test_inference_and_no_grad_run():
    coords = ref.rand_coords(50, 6)
    m = voxconv.nn.SparseConv3d(3, 3).eval()
    inp = voxconv.SparseTensor(torch.randn(len(coords), 3), coords)
    with torch.no_grad():
        a = m(inp).feats
    with torch.inference_mode():
        b = m(inp).feats
    assert not a.requires_grad and not b.requires_grad
    torch.testing.assert_close(a, b.clone())


def test_nan_propagates_without_crash():
    coords = ref.rand_coords(30, 4)
    x = torch.randn(len(coords), 2)
    x[0, 0] = float("nan")
    y = voxconv.spatially_sparse_conv(voxconv.SparseTensor(x, coords), torch.randn(27, 2, 2))
    assert torch.isnan(y.feats).any()


# ---- the modules' cached-map path (functional.conv_cached) ---------------------
# A conv module whose map is in its input's cache skips conv_geometry's
# general path (host time per call, issue 20). These tests pin what it must
# keep: the same results and gradients, the same errors, and that it is
# taken at all (a change that silently sends every call back through
# conv_geometry would lose the gain without failing anything else).

def _module(depthwise, stride, bias, dtype, device):
    if depthwise:
        return voxconv.nn.SparseDepthwiseConv3d(4, 3, stride=stride, bias=bias, dtype=dtype,
                                                device=device)
    return voxconv.nn.SparseConv3d(4, 5, 3, stride=stride, bias=bias, dtype=dtype,
                                   device=device)


def _functional(depthwise, inp, m, stride):
    fn = voxconv.spatially_sparse_depthwise_conv if depthwise else voxconv.spatially_sparse_conv
    return fn(inp, m.weight, 3, stride, bias=m.bias)


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("bias", [False, True])
def test_cached_map_path_taken_and_exact(device, depthwise, stride, bias, monkeypatch):
    """Second call of a module on the same coordinates: conv_cached runs
    (conv_geometry is not called), the output is the brute-force fp64
    reference's and the functional API's, on the same output coordinates,
    and so are the input, weight and bias gradients: bit for bit on the
    CPU (fp64, one algorithm), within fp32's bound on CUDA (the tuner may
    run another algorithm for the second call)."""
    def same(a, b):
        if device.type == "cpu":
            assert torch.equal(a, b)
        else:
            _assert_close(a, b.double().cpu(), dtype)
    from voxconv import functional as F
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    coords = ref.rand_coords(150, 8, 2)
    feats = torch.randn(len(coords), 4, dtype=dtype, device=device, requires_grad=True)
    inp = voxconv.SparseTensor(feats, coords.to(device))
    m = _module(depthwise, stride, bias, dtype, device)
    # builds the map through conv_geometry; the cache keeps a strided map
    # while its output coordinates live (kmap._live), so they are kept
    first = m(inp)  # noqa: F841
    general = F.conv_geometry
    seen = []
    monkeypatch.setattr(F, "conv_geometry", lambda *a, **k: seen.append(1) or general(*a, **k))
    y = m(inp)
    assert seen == [], "the cached map's call went through conv_geometry"
    monkeypatch.setattr(F, "conv_geometry", general)
    want = _functional(depthwise, inp, m, stride)
    assert y.coordinate_set is want.coordinate_set
    same(y.feats, want.feats)
    out_ref, pairs = ref.kernel_pairs("submanifold" if stride == 1 else "strided", coords,
                                      (3, 3, 3), (stride,) * 3, (1, 1, 1))
    expect = (ref.depthwise if depthwise else ref.conv)(feats.detach(), m.weight.detach(),
                                                          len(out_ref), pairs)
    if bias:
        expect = expect + m.bias.detach().double().cpu()
    assert torch.equal(y.coords.cpu(), out_ref)
    _assert_close(y.feats, expect, dtype)
    g = torch.randn_like(y.feats)
    params = [feats, m.weight] + ([m.bias] if bias else [])
    got = torch.autograd.grad(y.feats, params, g)
    exp = torch.autograd.grad(want.feats, params, g)
    for a, b in zip(got, exp):
        same(a, b)


def test_cached_map_path_keeps_the_errors():
    """With the map cached, what conv_geometry rejects is still rejected
    with its error: a weight of another dtype, features with other
    channels or rows, coordinates written in place."""
    coords = ref.rand_coords(100, 7, 2)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 4, dtype=torch.float64), coords)
    m = voxconv.nn.SparseConv3d(4, 5, 3, bias=False, dtype=torch.float64)
    m(inp)
    with pytest.raises(voxconv.errors.DtypeMismatchError):
        m.float()(inp)
    m.double()
    with pytest.raises(voxconv.errors.ShapeMismatchError):
        m(inp.replace_feature(torch.randn(len(coords), 6, dtype=torch.float64)))
    bad_rows = inp.replace_feature(inp.feats)
    bad_rows.feats = torch.randn(len(coords) + 1, 4, dtype=torch.float64)
    with pytest.raises(voxconv.errors.VoxconvError):
        m(bad_rows)
    m.bias = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))  # wrong length
    with pytest.raises(voxconv.errors.ShapeMismatchError):
        m(inp)
    m.bias = None
    assert m(inp).feats.shape == (len(coords), 5)
    inp.coordinate_set.coords.add_(0)  # an in-place write: the maps are stale
    with pytest.raises(voxconv.errors.KmapMismatchError):
        m(inp)


def test_cached_map_path_sees_a_bias_buffer():
    """A bias registered as a buffer (not a parameter) after construction
    is added on the cached-map path too: the module's attribute decides."""
    coords = ref.rand_coords(80, 6, 1)
    inp = voxconv.SparseTensor(torch.randn(len(coords), 4, dtype=torch.float64), coords)
    m = voxconv.nn.SparseConv3d(4, 5, 3, bias=False, dtype=torch.float64)
    plain = m(inp).feats
    del m.bias
    m.register_buffer("bias", torch.randn(5, dtype=torch.float64))
    assert torch.equal(m(inp).feats, plain + m.bias)
