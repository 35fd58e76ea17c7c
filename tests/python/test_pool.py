"""Pooling, unpooling and global pooling: forward against the brute-force
reference, gradcheck in fp64, modules against the functional API."""

import pytest
import torch

import voxconv

import ref

POOLS = {"max": voxconv.sparse_max_pool, "avg": voxconv.sparse_avg_pool,
         "sum": voxconv.sparse_sum_pool}
MODULES = {"max": voxconv.nn.SparseMaxPool3d, "avg": voxconv.nn.SparseAvgPool3d,
           "sum": voxconv.nn.SparseSumPool3d}
GEOMS = [((2, 2, 2), (2, 2, 2)), ((3, 3, 3), (2, 2, 2)), ((3, 3, 3), (1, 1, 1))]


def _inp(device, dtype, n=80, extent=7, c=3, batches=2):
    coords = ref.rand_coords(n, extent, batches, lo=-2)
    x = torch.randn(len(coords), c, dtype=dtype, device=device)
    return voxconv.SparseTensor(x, coords.to(device)), coords


@pytest.mark.parametrize("mode", list(POOLS))
@pytest.mark.parametrize("geom", GEOMS, ids=["k2s2", "k3s2", "k3s1"])
def test_pool_forward_matches_reference(device, mode, geom):
    ks, st = geom
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    inp, coords = _inp(device, dtype)
    y = POOLS[mode](inp, ks, st)
    kmode = "submanifold" if st == (1, 1, 1) else "strided"
    out, pairs = ref.kernel_pairs(kmode, coords, ks, st, (1, 1, 1))
    assert torch.equal(y.coords.cpu(), out)
    assert y.tensor_stride == st
    torch.testing.assert_close(y.feats.double().cpu(), ref.pool(inp.feats, len(out), pairs, mode),
                               rtol=1e-5, atol=1e-6)
    m = MODULES[mode](ks, st)
    torch.testing.assert_close(m(inp).feats, y.feats, rtol=0, atol=0)


def test_pool_stride_defaults_to_kernel():
    inp, _ = _inp("cpu", torch.float32)
    assert voxconv.sparse_max_pool(inp, 2).tensor_stride == (2, 2, 2)
    assert voxconv.nn.SparseAvgPool3d(3).stride == (3, 3, 3)


@pytest.mark.parametrize("mode", list(POOLS))
@pytest.mark.parametrize("geom", GEOMS[:2], ids=["k2s2", "k3s2"])
def test_pool_gradcheck_fp64(mode, geom):
    ks, st = geom
    inp, _ = _inp("cpu", torch.float64, n=30, extent=5, batches=1)
    # distinct values: max pooling's gradient is then well defined
    x = (torch.randperm(inp.feats.numel(), dtype=torch.float64) / 7).reshape(inp.feats.shape)
    x.requires_grad_()

    def f(x):
        return POOLS[mode](inp.replace_feature(x), ks, st).feats

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-7)


def test_max_pool_gradient_goes_to_first_max_in_map_order():
    coords = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 1, 1]], dtype=torch.int32)
    x = torch.tensor([[1.0], [5.0], [5.0]], requires_grad=True)
    y = voxconv.sparse_max_pool(voxconv.SparseTensor(x, coords), 2, 2)
    assert y.feats.tolist() == [[5.0]]
    y.feats.sum().backward()
    assert x.grad.flatten().tolist() == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("geom", GEOMS[:2], ids=["k2s2", "k3s2"])
def test_unpool_matches_reference_and_gradcheck(device, geom):
    ks, st = geom
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    fine, coords = _inp(device, dtype)
    coarse = voxconv.sparse_avg_pool(fine, ks, st)
    up = voxconv.sparse_unpool(coarse, ks, st)
    assert up.coordinate_set is fine.coordinate_set
    _, pairs = ref.kernel_pairs("strided", coords, ks, st, (1, 1, 1))
    want = ref.unpool(coarse.feats, len(coords), pairs)
    torch.testing.assert_close(up.feats.double().cpu(), want, rtol=1e-5, atol=1e-6)
    m = voxconv.nn.SparseUnpool3d(ks, st)
    torch.testing.assert_close(m(coarse).feats, up.feats, rtol=0, atol=0)
    if device.type == "cpu":
        small, _ = _inp("cpu", torch.float64, n=25, extent=4, batches=1)
        c2 = voxconv.sparse_sum_pool(small, ks, st)
        x = torch.randn_like(c2.feats, requires_grad=True)
        assert torch.autograd.gradcheck(
            lambda x: voxconv.sparse_unpool(c2.replace_feature(x), ks, st).feats, (x,),
            eps=1e-6, atol=1e-7)


def test_unpool_rejects_a_tensor_that_is_not_the_pooled_set():
    fine, _ = _inp("cpu", torch.float64)
    other = voxconv.SparseTensor(torch.randn(3, 3, dtype=torch.float64),
                                 torch.tensor([[0, 0, 0, 0], [0, 1, 0, 0], [0, 9, 9, 9]],
                                              dtype=torch.int32), 2, manager=fine.manager)
    with pytest.raises(voxconv.KmapMismatchError, match="pooled"):
        voxconv.sparse_unpool(other, 2, 2)


@pytest.mark.parametrize("mode", ["avg", "max", "sum"])
def test_global_pool(device, mode):
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    inp, coords = _inp(device, dtype, batches=3)
    fn = {"avg": voxconv.global_avg_pool, "max": voxconv.global_max_pool,
          "sum": voxconv.global_sum_pool}[mode]
    mod = {"avg": voxconv.nn.SparseGlobalAvgPool, "max": voxconv.nn.SparseGlobalMaxPool,
           "sum": voxconv.nn.SparseGlobalSumPool}[mode]()
    y = fn(inp)
    B = int(coords[:, 0].max()) + 1
    assert y.shape == (B, 3)
    for b in range(B):
        rows = inp.feats[(coords[:, 0] == b).to(device)]
        want = {"avg": lambda: rows.mean(0), "max": lambda: rows.max(0).values,
                "sum": lambda: rows.sum(0)}[mode]() if len(rows) else torch.zeros(3)
        torch.testing.assert_close(y[b], want.to(y), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(mod(inp), y)
    if device.type == "cpu":
        x = inp.feats.clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda x: fn(inp.replace_feature(x)), (x,))
