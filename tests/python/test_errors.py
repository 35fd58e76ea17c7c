"""Bad inputs get a specific exception with a message naming the problem,
never a crash and never silently wrong output."""

import pytest
import torch

import voxconv

import ref


@pytest.fixture
def inp():
    coords = ref.rand_coords(40, 5)
    return voxconv.SparseTensor(torch.randn(len(coords), 3), coords)


def test_weight_shape_mismatch(inp):
    with pytest.raises(voxconv.ShapeMismatchError, match=r"expected \[27, 3, C_out\]"):
        voxconv.spatially_sparse_conv(inp, torch.randn(27, 4, 2))
    with pytest.raises(voxconv.ShapeMismatchError, match=r"\[8, 3, C_out\]"):
        voxconv.spatially_sparse_conv(inp, torch.randn(27, 3, 2), kernel_size=2)
    with pytest.raises(voxconv.ShapeMismatchError, match="depthwise weight"):
        voxconv.spatially_sparse_depthwise_conv(inp, torch.randn(27, 4))
    with pytest.raises(voxconv.ShapeMismatchError, match="bias"):
        voxconv.spatially_sparse_conv(inp, torch.randn(27, 3, 2), bias=torch.zeros(3))


def test_dtype_and_device_mismatch(inp):
    with pytest.raises(voxconv.DtypeMismatchError, match="float64"):
        voxconv.spatially_sparse_conv(inp, torch.randn(27, 3, 2, dtype=torch.float64))
    with pytest.raises(TypeError):  # DtypeMismatchError is a TypeError too
        voxconv.spatially_sparse_conv(inp, torch.randn(27, 3, 2, dtype=torch.float16))
    with pytest.raises(TypeError, match="SparseTensor"):
        voxconv.spatially_sparse_conv(inp.feats, torch.randn(27, 3, 2))
    with pytest.raises(TypeError, match="torch.Tensor"):
        voxconv.spatially_sparse_conv(inp, [[0.0]])


def test_cuda_weight_with_cpu_features(inp, cuda):
    with pytest.raises(voxconv.InvalidArgumentError, match="cuda"):
        voxconv.spatially_sparse_conv(inp, torch.randn(27, 3, 2, device=cuda))


def test_cuda_float64_is_unsupported(cuda):
    coords = ref.rand_coords(20, 4).to(cuda)
    x = voxconv.SparseTensor(torch.randn(len(coords), 2, dtype=torch.float64, device=cuda),
                             coords)
    with pytest.raises(voxconv.VoxconvError, match="(?i)f64|float64|double"):
        voxconv.spatially_sparse_conv(x, torch.randn(27, 2, 2, dtype=torch.float64,
                                                     device=cuda))


@pytest.mark.parametrize("kw, match", [
    ({"kernel_size": 0}, "kernel_size"),
    ({"kernel_size": 8}, "kernel_size"),
    ({"kernel_size": (3, 3)}, "kernel_size"),
    ({"stride": 0}, "stride"),
    ({"stride": 65}, "stride"),
    ({"dilation": -1}, "dilation"),
    ({"use_fp16_accum": "yes"}, "use_fp16_accum"),
    ({"deterministic": 2}, "deterministic"),
])
def test_bad_geometry_and_options(inp, kw, match):
    ks = kw.get("kernel_size", 3)
    K = 27 if not isinstance(ks, int) or not 1 <= ks <= 7 else ks ** 3
    with pytest.raises(voxconv.InvalidArgumentError, match=match):
        voxconv.spatially_sparse_conv(inp, torch.randn(K, 3, 2), **kw)


def test_bad_module_arguments():
    with pytest.raises(voxconv.InvalidArgumentError, match="kernel_size"):
        voxconv.nn.SparseConv3d(2, 2, kernel_size=9)
    with pytest.raises(voxconv.InvalidArgumentError, match="use_fp16_accum"):
        voxconv.nn.SparseConv3d(2, 2, use_fp16_accum="on")


def test_transposed_without_finer_coordinates(inp):
    coarse = voxconv.SparseTensor(inp.feats, inp.coords, 4)
    with pytest.raises(voxconv.InvalidArgumentError, match="no coordinates at tensor stride"):
        voxconv.spatially_sparse_conv(coarse, torch.randn(8, 3, 2), 2, 2, transposed=True)
    with pytest.raises(voxconv.InvalidArgumentError, match="not divisible"):
        voxconv.spatially_sparse_conv(inp, torch.randn(8, 3, 2), 2, 2, transposed=True)
    with pytest.raises(voxconv.InvalidArgumentError, match="not divisible"):
        voxconv.spatially_sparse_conv(coarse, torch.randn(8, 3, 2), 2, 3, transposed=True)
    with pytest.raises(voxconv.InvalidArgumentError, match="only for transposed"):
        voxconv.spatially_sparse_conv(inp, torch.randn(27, 3, 2), out_coords=inp)


def test_transposed_onto_explicit_coordinates():
    fine = ref.rand_coords(50, 6)
    coarse_t = voxconv.SparseTensor(torch.randn(len(fine), 2, dtype=torch.float64), fine)
    down = voxconv.spatially_sparse_conv(coarse_t, torch.randn(8, 2, 2, dtype=torch.float64),
                                         2, 2)
    # a fresh tensor at stride 2 (own manager): give the output coordinates
    lone = voxconv.SparseTensor(down.feats.detach(), down.coords.clone(), 2)
    w = torch.randn(8, 2, 3, dtype=torch.float64)
    up1 = voxconv.spatially_sparse_conv(lone, w, 2, 2, transposed=True, out_coords=fine)
    up2 = voxconv.spatially_sparse_conv(down.detach(), w, 2, 2, transposed=True)
    assert torch.equal(up1.coords, fine)
    torch.testing.assert_close(up1.feats, up2.feats, rtol=0, atol=0)


def test_coordinate_errors_from_the_library():
    dup = torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 2, 3]], dtype=torch.int32)
    with pytest.raises(voxconv.DuplicateCoordsError, match="(?i)duplicate"):
        voxconv.spatially_sparse_conv(voxconv.SparseTensor(torch.zeros(3, 1), dup),
                                      torch.zeros(27, 1, 1))
    far = torch.tensor([[0, 0, 0, 0], [0, 0, -131072, 5]], dtype=torch.int32)
    with pytest.raises(voxconv.OutOfRangeError, match="131072"):
        voxconv.spatially_sparse_conv(voxconv.SparseTensor(torch.zeros(2, 1), far),
                                      torch.zeros(27, 1, 1))
    batch = torch.tensor([[1024, 0, 0, 0]], dtype=torch.int32)
    with pytest.raises(voxconv.OutOfRangeError, match="1024"):
        voxconv.sparse_max_pool(voxconv.SparseTensor(torch.zeros(1, 1), batch))


def test_unsupported_feature_dtype():
    c = torch.zeros(1, 4, dtype=torch.int32)
    with pytest.raises(voxconv.DtypeMismatchError, match="not supported"):
        voxconv.SparseTensor(torch.zeros(1, 1, dtype=torch.int64), c)


def test_library_status_errors_keep_working_afterwards(inp):
    """An error leaves the handle usable and a later success clean."""
    dup = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]], dtype=torch.int32)
    with pytest.raises(voxconv.DuplicateCoordsError):
        voxconv.spatially_sparse_conv(voxconv.SparseTensor(torch.zeros(2, 1), dup),
                                      torch.zeros(27, 1, 1))
    y = voxconv.spatially_sparse_conv(inp, torch.randn(27, 3, 2))
    assert y.feats.shape == (len(inp), 2)
