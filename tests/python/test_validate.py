"""Python input validation (issue 22 item 7 and "validation in one place",
python/voxconv/_validate.py): batch indices and coordinates are range-
checked before any cast to int32, float/bool tensors where integers are
required are refused, and the messages read like the C library's
("coords row 17: x=140000 outside ±131071", "batch=-1 outside 0..1023").
Also: pickling a SparseTensor (item 9) and dense() over an extent too
large to allocate."""

import copy
import inspect
import io
import pickle

import pytest
import torch

import voxconv
from voxconv import _lib

import ref

BMAX, CMAX = _lib.BATCH_MAX, _lib.COORD_MAX


# ---- voxelize: the batch index ------------------------------------------------

@pytest.mark.parametrize("batch, exc, match", [
    # a Python int beyond int32 once wrapped to batch 1
    (2**32 + 1, voxconv.OutOfRangeError, r"voxelize: batch=4294967297 outside 0\.\.1023"),
    (-1, voxconv.OutOfRangeError, r"batch=-1 outside 0\.\.1023"),
    (BMAX + 1, voxconv.OutOfRangeError, r"batch=1024 outside 0\.\.1023"),
    # a float once truncated to batch 0
    (0.7, voxconv.DtypeMismatchError, "batch: expected an int"),
    (True, voxconv.DtypeMismatchError, "batch: expected an int"),
    ("1", voxconv.DtypeMismatchError, "batch: expected an int"),
])
def test_voxelize_scalar_batch_checked_before_the_cast(batch, exc, match):
    with pytest.raises(exc, match=match):
        voxconv.voxelize(torch.zeros(3, 3), 1.0, batch=batch)


@pytest.mark.parametrize("make, exc, match", [
    # an int64 tensor holding 2**32 + 3 once wrapped to batch 3
    (lambda n: torch.full((n,), 2**32 + 3, dtype=torch.int64), voxconv.OutOfRangeError,
     r"voxelize: point 0: batch=4294967299 outside 0\.\.1023"),
    (lambda n: torch.tensor([0, 1, -2**40][:n]), voxconv.OutOfRangeError,
     r"point 2: batch=-1099511627776 outside 0\.\.1023"),
    # a float tensor holding 0.7 once became batch 0
    (lambda n: torch.full((n,), 0.7), voxconv.DtypeMismatchError,
     r"batch: expected an integer tensor \(int32\), got torch.float32"),
    (lambda n: torch.zeros(n, dtype=torch.float64), voxconv.DtypeMismatchError, "float64"),
    (lambda n: torch.ones(n, dtype=torch.bool), voxconv.DtypeMismatchError, "bool"),
])
def test_voxelize_batch_tensor_checked_before_the_cast(make, exc, match):
    with pytest.raises(exc, match=match):
        voxconv.voxelize(torch.zeros(3, 3), 1.0, batch=make(3))


def test_voxelize_batch_in_range_still_works():
    p = torch.tensor([[0.5, 0.5, 0.5], [1.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    c, _, _ = voxconv.voxelize(p, 1.0, batch=BMAX)
    assert c[:, 0].tolist() == [BMAX, BMAX]
    c, _, _ = voxconv.voxelize(p, 1.0, batch=torch.tensor([BMAX, 0, 0], dtype=torch.int64))
    assert c.tolist() == [[0, 0, 0, 0], [0, 1, 0, 0], [BMAX, 0, 0, 0]]
    c, _, _ = voxconv.voxelize(p, 1.0, batch=torch.tensor([2, 1, 0], dtype=torch.uint8))
    assert c[:, 0].tolist() == [0, 1, 2]
    c, _, _ = voxconv.voxelize(p, 1.0, batch=torch.tensor(5))  # 0-d: one batch for all
    assert c[:, 0].tolist() == [5, 5]


def test_voxelize_grid_size_and_n_feat_do_not_wrap():
    p = torch.zeros(2, 4)
    with pytest.raises(voxconv.InvalidArgumentError, match="grid_size"):
        voxconv.voxelize(p, 1.0, grid_size=2**32 + 4)  # once wrapped to 4
    with pytest.raises(voxconv.DtypeMismatchError, match="n_feat"):
        voxconv.voxelize(p, 1.0, n_feat=2.5)  # once truncated to 2


# ---- SparseTensor / merge_duplicates / out_coords: coordinates -------------------

def _coords(*rows, dtype=torch.int32):
    return torch.tensor(rows, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_negative_batch_refused_by_sparse_tensor(dtype):
    # once accepted, then an IndexError deep in global pooling
    c = _coords([0, 0, 0, 0], [-1, 1, 2, 3], dtype=dtype)
    with pytest.raises(voxconv.OutOfRangeError,
                       match=r"SparseTensor: coords row 1: batch=-1 outside 0\.\.1023"):
        voxconv.SparseTensor(torch.zeros(2, 1), c)


@pytest.mark.parametrize("row, match", [
    ([0, 140000, 0, 0], r"coords row 1: x=140000 outside ±131071"),
    ([0, 0, -CMAX - 1, 0], r"coords row 1: y=-131072 outside ±131071"),
    ([0, 0, 0, 2**33], r"coords row 1: z=8589934592 outside ±131071"),
    ([BMAX + 1, 0, 0, 0], r"coords row 1: batch=1024 outside 0\.\.1023"),
    ([2**32 + 1, 0, 0, 0], r"coords row 1: batch=4294967297 outside 0\.\.1023"),
])
def test_coordinate_ranges_like_the_library(row, match):
    c = _coords([0, 0, 0, 0], row, dtype=torch.int64)
    with pytest.raises(voxconv.OutOfRangeError, match=match):
        voxconv.SparseTensor(torch.zeros(2, 1), c)
    if max(abs(v) for v in row) < 2**31:  # the library says the same of int32 rows
        c32 = c.int()
        with pytest.raises(voxconv.OutOfRangeError, match=match):
            voxconv.SparseTensor(torch.zeros(2, 1), c32)


def test_library_message_matches():
    """The C library's own message for the same row (kmap build on int32
    coordinates the Python layer would have let through) has the same
    shape: that is the format the Python checks copy."""
    c = _coords([0, 0, 0, 0], [0, 140000, 0, 0])
    t = voxconv.SparseTensor.__new__(voxconv.SparseTensor)
    mgr = voxconv.CoordinateManager("cpu")
    t._set, t.feats = mgr.add(c, (1, 1, 1)), torch.zeros(2, 1)
    with pytest.raises(voxconv.OutOfRangeError,
                       match=r"in coords row 1: x=140000 outside ±131071"):
        voxconv.spatially_sparse_conv(t, torch.zeros(27, 1, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bool,
                                   torch.complex64])
def test_non_integer_coords_refused(dtype):
    c = torch.zeros(2, 4, dtype=dtype)
    with pytest.raises(voxconv.DtypeMismatchError, match=r"coords: expected an integer tensor"):
        voxconv.SparseTensor(torch.zeros(2, 1), c)
    with pytest.raises(voxconv.DtypeMismatchError, match=r"coords: expected an integer tensor"):
        voxconv.merge_duplicates(c)


def test_merge_duplicates_checks_ranges_before_the_cast():
    c = _coords([0, 0, 0, 0], [2**32, 0, 0, 0], dtype=torch.int64)  # once batch 0 again
    with pytest.raises(voxconv.OutOfRangeError,
                       match=r"merge_duplicates: coords row 1: batch=4294967296 outside"):
        voxconv.merge_duplicates(c)


def test_out_coords_checked_before_the_cast():
    fine = _coords([0, 0, 0, 0], [0, 1, 1, 1])
    x = voxconv.SparseTensor(torch.randn(2, 1), fine)
    down = voxconv.spatially_sparse_conv(x, torch.randn(8, 1, 1), kernel_size=2, stride=2)
    bad = _coords([0, 0, 0, 0], [0, 2**32 + 1, 1, 1], dtype=torch.int64)  # once x=1
    with pytest.raises(voxconv.OutOfRangeError, match=r"out_coords row 1: x=4294967297"):
        voxconv.spatially_sparse_conv(down, torch.randn(8, 1, 1), kernel_size=2, stride=2,
                                      transposed=True, out_coords=bad)


def test_kernel_map_verify_refuses_other_dtypes():
    c = _coords([0, 0, 0, 0], [0, 1, 1, 1])
    x = voxconv.SparseTensor(torch.randn(2, 1), c)
    km, _ = x.manager.kernel_map(x.coordinate_set, _lib.KMAP_SUBMANIFOLD, (3, 3, 3),
                                 (1, 1, 1), (1, 1, 1))
    km.verify(c)
    with pytest.raises(voxconv.KmapMismatchError):
        km.verify(c.flip(0).contiguous())
    # int64 rows once went to the library as twice as many int32 values
    km.verify(c.long())
    with pytest.raises(voxconv.DtypeMismatchError):
        km.verify(c.float())


def test_tensor_stride_does_not_wrap():
    c = _coords([0, 0, 0, 0])
    with pytest.raises(voxconv.InvalidArgumentError, match="tensor_stride"):
        voxconv.SparseTensor(torch.zeros(1, 1), c, tensor_stride=2**32 + 2)


def test_global_pool_refuses_bad_batch_it_was_not_shown():
    """A tensor made around the constructor's checks (as a CUDA int32 one
    is, see _validate) still gets a named error, not an IndexError."""
    c = _coords([0, 0, 0, 0], [-1, 1, 2, 3])
    t = voxconv.SparseTensor.__new__(voxconv.SparseTensor)
    t._set = voxconv.CoordinateManager("cpu").add(c, (1, 1, 1))
    t.feats = torch.zeros(2, 3)
    for pool in (voxconv.global_avg_pool, voxconv.global_max_pool, voxconv.global_sum_pool):
        with pytest.raises(voxconv.OutOfRangeError, match=r"batch=-1 outside 0\.\.1023"):
            pool(t)


def test_valid_coords_pass_unchanged(device):
    c = ref.rand_coords(64, 6, 3).to(device)
    for dtype in (torch.int32, torch.int64, torch.int16):
        t = voxconv.SparseTensor(torch.randn(len(c), 2, device=device), c.to(dtype))
        assert t.coords.dtype == torch.int32 and torch.equal(t.coords, c)
    edge = _coords([BMAX, CMAX, -CMAX, 0], [0, 0, 0, 0], dtype=torch.int64).to(device)
    t = voxconv.SparseTensor(torch.zeros(2, 1, device=device), edge)
    assert t.coords.tolist() == edge.tolist()


def test_cuda_int32_coords_are_not_checked_on_the_host(cuda):
    """int32 CUDA coordinates go to the library unchecked (it checks them
    on the device when it builds a map): reading their min/max here would
    make every SparseTensor wait for the GPU."""
    c = ref.rand_coords(32, 4).to(cuda)
    x = torch.zeros(len(c), 1, device=cuda)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host wait raises
    try:
        voxconv.SparseTensor(x, c)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# ---- pickling (item 9) ------------------------------------------------------------

def _roundtrip_checks(t, u):
    assert type(u) is type(t)
    assert torch.equal(u.feats, t.feats) and torch.equal(u.coords, t.coords)
    assert u.tensor_stride == t.tensor_stride and u.device == t.device
    assert u.manager is not t.manager  # rebuilt, not shared
    # the copy is usable: maps are rebuilt on first use
    w = torch.randn(27, t.num_channels, 2, dtype=t.dtype)
    a = voxconv.spatially_sparse_conv(t, w)
    b = voxconv.spatially_sparse_conv(u, w)
    torch.testing.assert_close(a.feats, b.feats, rtol=0, atol=0)


def _tensor():
    coords = ref.rand_coords(40, 5, 2)
    t = voxconv.SparseTensor(torch.randn(len(coords), 3), coords * 2, tensor_stride=(2, 2, 2))
    voxconv.spatially_sparse_conv(t, torch.randn(27, 3, 3))  # a cached map to leave behind
    return t


def test_pickle_round_trip():
    t = _tensor()
    u = pickle.loads(pickle.dumps(t))
    _roundtrip_checks(t, u)
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        assert torch.equal(pickle.loads(pickle.dumps(t, proto)).coords, t.coords)


def test_deepcopy_and_copy():
    t = _tensor()
    u = copy.deepcopy(t)
    _roundtrip_checks(t, u)
    assert u.feats.data_ptr() != t.feats.data_ptr()
    s = copy.copy(t)  # shallow: the same manager and feature tensor
    assert s.manager is t.manager and s.feats is t.feats and s is not t


def test_torch_save_load():
    t = _tensor()
    buf = io.BytesIO()
    torch.save({"x": t, "step": 3}, buf)
    buf.seek(0)
    kw = ({"weights_only": False}
          if "weights_only" in inspect.signature(torch.load).parameters else {})
    got = torch.load(buf, **kw)
    assert got["step"] == 3
    _roundtrip_checks(t, got["x"])


def test_pickle_keeps_requires_grad_of_a_leaf():
    t = _tensor()
    t.feats.requires_grad_(True)
    u = pickle.loads(pickle.dumps(t))
    assert u.feats.requires_grad and u.feats.is_leaf


def test_pickle_cuda(cuda):
    t = _tensor().to(cuda)
    u = pickle.loads(pickle.dumps(t))
    assert u.device == t.device and torch.equal(u.coords, t.coords)


# ---- dense() over a huge extent --------------------------------------------------

def test_dense_refuses_huge_extent_before_allocating():
    c = _coords([0, -CMAX, 0, 0], [1, CMAX, CMAX, CMAX])
    t = voxconv.SparseTensor(torch.zeros(2, 8), c)
    # once torch's "you tried to allocate 36028659580010496 bytes"
    with pytest.raises(voxconv.OutOfRangeError) as e:
        t.dense(min_coordinate=(-CMAX, 0, 0))
    msg = str(e.value)
    assert "262143 x 131072 x 131072" in msg  # the extent
    assert "batch_size 2" in msg and "8 channels" in msg
    elements = 262143 * 131072 * 131072 * 8 * 2
    assert f"{elements} elements, {elements * 4} bytes" in msg  # count and bytes
    assert "2147483648" in msg  # the limit


def test_dense_limit_is_per_batch_item_and_adjustable():
    c = _coords([0, 0, 0, 0])
    t = voxconv.SparseTensor(torch.zeros(1, 2), c)
    # 1024 x 1024 x 1024 x 2 = 2^31 elements per item: at the limit, not
    # allocated here (spatial_shape checked only, then refused by a lower
    # explicit limit)
    with pytest.raises(voxconv.OutOfRangeError, match="limit"):
        t.dense(spatial_shape=(1024, 1024, 1025))
    with pytest.raises(voxconv.OutOfRangeError, match="max_elements_per_item=100"):
        t.dense(spatial_shape=(5, 5, 5), max_elements_per_item=100)
    assert t.dense(spatial_shape=(5, 5, 5), max_elements_per_item=250).shape == (1, 2, 5, 5, 5)
    with pytest.raises(voxconv.OutOfRangeError, match="4398046511104 x 1 x 1"):
        t.dense(spatial_shape=(2**42, 1, 1))
    with pytest.raises(voxconv.InvalidArgumentError, match="spatial_shape"):
        t.dense(spatial_shape=(-1, 1, 1))
