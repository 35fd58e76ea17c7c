"""SparseTensor: construction and its checks, dense(), voxelization
(against a numpy reference), merge_duplicates, cat, dtype/device moves."""

import numpy as np
import pytest
import torch

import voxconv

import ref


def test_construction_and_properties(device):
    coords = ref.rand_coords(50, 6, 2).to(device)
    x = torch.randn(len(coords), 5, device=device)
    t = voxconv.SparseTensor(x, coords, tensor_stride=(2, 2, 4))
    assert t.tensor_stride == (2, 2, 4) and t.F is x and t.C is t.coords
    assert t.shape == (len(coords), 5) and len(t) == len(coords) and t.num_channels == 5
    assert t.device == x.device and t.dtype == torch.float32
    assert t.batch_size == int(coords[:, 0].max()) + 1
    assert "SparseTensor(n=" in repr(t)
    t64 = voxconv.SparseTensor(x, coords.long(), 1)  # other integer dtypes are converted
    assert t64.coords.dtype == torch.int32 and torch.equal(t64.coords, coords)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda c, x: (x, c[:, :3]), voxconv.ShapeMismatchError, r"\[N, 4\]"),
    (lambda c, x: (x, c.float()), voxconv.DtypeMismatchError, "integer"),
    (lambda c, x: (x[:-1], c), voxconv.ShapeMismatchError, "rows"),
    (lambda c, x: (x[:, 0], c), voxconv.ShapeMismatchError, r"\[N, C\]"),
    (lambda c, x: (x.int(), c), voxconv.DtypeMismatchError, "not supported"),
    (lambda c, x: (x, c.long() + 2**40), voxconv.OutOfRangeError, r"row 0: batch=\d+ outside"),
    (lambda c, x: (x, c.tolist()), TypeError, "torch.Tensor"),
])
def test_construction_errors(bad, exc, match):
    coords = ref.rand_coords(20, 5)
    x = torch.randn(len(coords), 2)
    feats, c = bad(coords, x)
    with pytest.raises(exc, match=match):
        voxconv.SparseTensor(feats, c)


def test_tensor_stride_must_be_positive():
    with pytest.raises(voxconv.InvalidArgumentError, match="tensor_stride"):
        voxconv.SparseTensor(torch.zeros(1, 1), torch.zeros(1, 4, dtype=torch.int32), 0)


def test_dense_places_voxels_and_is_differentiable():
    coords = torch.tensor([[0, 1, 2, 3], [1, 0, 0, 0], [1, 4, 1, 2]], dtype=torch.int32)
    x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    t = voxconv.SparseTensor(x, coords)
    d = t.dense()
    assert d.shape == (2, 2, 5, 3, 4)
    assert torch.equal(d[0, :, 1, 2, 3], x[0]) and torch.equal(d[1, :, 4, 1, 2], x[2])
    torch.testing.assert_close(d.abs().sum(), x.abs().sum())  # nothing else written
    d.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    # negative coordinates need a min_coordinate
    neg = voxconv.SparseTensor(x.detach(), coords - torch.tensor([0, 2, 0, 0], dtype=torch.int32))
    with pytest.raises(voxconv.OutOfRangeError, match="outside"):
        neg.dense()
    d2 = neg.dense(min_coordinate=(-2, 0, 0))
    assert torch.equal(d2, d.detach())
    assert neg.dense(spatial_shape=(8, 8, 8), min_coordinate=(-2, 0, 0), batch_size=3).shape == \
        (3, 2, 8, 8, 8)


def _np_voxelize(p, vs, origin):
    """The documented index, floor((p - origin) / voxel_size), in float32
    as the library computes it (float64 would differ at cell borders)."""
    p, vs, origin = (np.asarray(a, dtype=np.float32) for a in (p, vs, origin))
    idx = np.floor((p[:, :3] - origin) / vs).astype(np.int64)
    uniq, inv = np.unique(idx, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return uniq, inv


@pytest.mark.parametrize("reduce", ["mean", "first"])
def test_voxelize_matches_numpy(device, reduce):
    n = 3000
    p = (torch.rand(n, 4) * torch.tensor([8.0, 6.0, 3.0, 1.0]) - torch.tensor([4.0, 1.0, 0.5, 0]))
    vs, origin = (0.5, 0.25, 0.5), (-4.0, -1.0, -0.5)
    coords, feats, pv = voxconv.voxelize(p.to(device), vs, origin=origin, reduce=reduce, batch=3)
    uniq, inv = _np_voxelize(p.numpy(), vs, origin)
    coords, feats, pv = coords.cpu(), feats.cpu(), pv.cpu()
    assert len(coords) == len(uniq)
    assert (coords[:, 0] == 3).all()
    # sorted by (b, x, y, z): the numpy unique order
    assert np.array_equal(coords[:, 1:].numpy(), uniq)
    assert np.array_equal(pv.numpy(), inv)
    for v in [0, len(uniq) // 2, len(uniq) - 1]:
        members = np.nonzero(inv == v)[0]
        want = p[members].mean(0) if reduce == "mean" else p[members[0]]
        torch.testing.assert_close(feats[v], want, rtol=1e-5, atol=1e-5)


def test_voxelize_grid_batch_and_from_points():
    p = torch.tensor([[0.1, 0.1, 0.1, 1.0], [0.2, 0.1, 0.1, 3.0], [5.5, 0.1, 0.1, 7.0],
                      [-0.5, 0.0, 0.0, 9.0]])
    coords, feats, pv = voxconv.voxelize(p, 1.0, grid_size=(4, 4, 4), n_feat=4)
    assert coords.tolist() == [[0, 0, 0, 0]]
    assert pv.tolist() == [0, 0, -1, -1]
    assert feats[0, 3].item() == 2.0
    b = torch.tensor([1, 0, 0, 1])
    c2, f2, pv2 = voxconv.voxelize(p, 1.0, batch=b, n_feat=1)
    assert c2[:, 0].tolist() == [0, 0, 1, 1] and f2.shape == (4, 1)
    st, pmap = voxconv.SparseTensor.from_points(p, 1.0, n_feat=3, dtype=torch.float64,
                                                return_point_map=True)
    assert st.dtype == torch.float64 and st.num_channels == 3 and len(pmap) == 4
    assert torch.equal(st.coords[pmap], voxconv.voxelize(p, 1.0)[0][pmap])


def test_voxelize_errors():
    with pytest.raises(voxconv.ShapeMismatchError):
        voxconv.voxelize(torch.zeros(4, 2), 1.0)
    with pytest.raises(voxconv.InvalidArgumentError, match="reduce"):
        voxconv.voxelize(torch.zeros(4, 3), 1.0, reduce="max")
    bad = torch.zeros(4, 3)
    bad[2, 1] = float("nan")
    with pytest.raises(voxconv.VoxconvError, match="2"):
        voxconv.voxelize(bad, 1.0)
    with pytest.raises(voxconv.VoxconvError):
        voxconv.voxelize(torch.zeros(4, 3), 0.0)


def test_merge_duplicates():
    c = torch.tensor([[0, 1, 1, 1], [0, 0, 0, 0], [0, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.int32)
    u, rm = voxconv.merge_duplicates(c)
    assert u.tolist() == [[0, 0, 0, 0], [0, 1, 1, 1], [1, 0, 0, 0]]
    assert torch.equal(u[rm], c)


def test_replace_feature_cat_and_moves():
    coords = ref.rand_coords(30, 4)
    a = voxconv.SparseTensor(torch.randn(len(coords), 2), coords)
    b = a.replace_feature(torch.randn(len(coords), 3))
    assert b.coordinate_set is a.coordinate_set
    c = voxconv.cat([a, b])
    assert c.num_channels == 5 and c.manager is a.manager
    same = voxconv.SparseTensor(torch.randn(len(coords), 1), coords.clone())
    assert voxconv.cat([a, same]).num_channels == 3  # equal coordinates, other manager
    other = voxconv.SparseTensor(torch.randn(len(coords) - 1, 1), coords[1:])
    with pytest.raises(voxconv.KmapMismatchError):
        voxconv.cat([a, other])
    with pytest.raises(voxconv.ShapeMismatchError):
        a.replace_feature(torch.randn(3, 2))
    d = a.double()
    assert d.dtype == torch.float64 and d.manager is a.manager
    assert a.to(torch.float32) is a
    assert a.half().dtype == torch.float16 and a.bfloat16().dtype == torch.bfloat16
    assert a.detach().feats.requires_grad is False


def test_move_to_cuda_makes_a_new_manager(cuda):
    coords = ref.rand_coords(30, 4)
    a = voxconv.SparseTensor(torch.randn(len(coords), 2), coords)
    g = a.cuda()
    assert g.device.type == "cuda" and g.coords.device.type == "cuda"
    assert g.manager is not a.manager and g.manager.device.type == "cuda"
    assert torch.equal(g.cpu().coords, a.coords)


def test_maps_go_with_the_last_tensor_without_garbage_collection():
    """A forward's coordinate sets and kernel maps (GPU memory on CUDA) are
    freed when its last tensor goes, by reference counting: no reference
    cycle waits for the garbage collector. Finer levels stay while a
    coarser tensor lives (transposed convolutions find them by stride)."""
    import gc
    import weakref
    gc.disable()
    try:
        coords = ref.rand_coords(400, 12)
        x = voxconv.SparseTensor(torch.randn(len(coords), 4), coords)
        conv = voxconv.nn.SparseConv3d(4, 4, 3)
        down = voxconv.nn.SparseConv3d(4, 4, 2, stride=2)
        y = down(conv(x))
        fine = weakref.ref(x.coordinate_set)
        kmap = weakref.ref(next(iter(x.coordinate_set.kmaps.values()))[0])
        mgr = weakref.ref(x.manager)
        del x
        assert fine() is not None and mgr() is not None, "the finer level went early"
        assert y.manager.at_stride((1, 1, 1)) is fine()
        up = voxconv.nn.SparseConvTranspose3d(4, 4, 2, stride=2)(y)
        assert up.coordinate_set is fine()
        del y, up
        assert fine() is None and kmap() is None and mgr() is None, \
            "sets, maps or the manager outlived their tensors"
    finally:
        gc.enable()
