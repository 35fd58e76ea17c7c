"""Functional API on SparseTensors.

Geometry, as in include/voxconv.h: for kernel size k and dilation d along
an axis, the offsets are ``(j - (k-1)//2) * d`` for ``j = 0..k-1`` (centred
for odd k, ``{0, 1}`` for k = 2), flattened x-slowest into K = kx*ky*kz.

* ``stride == 1`` and not transposed/generative: **submanifold** (outputs =
  inputs).
* ``stride > 1``: **strided** downsampling, outputs ``unique(floor(c / s))``
  at tensor stride ``ts * s``.
* ``transposed=True``: upsampling onto the coordinates already known at
  tensor stride ``ts / s`` (the encoder's, found in the coordinate manager)
  or onto ``out_coords`` when given.
* ``generative=True`` (with ``transposed=True``, or alone): outputs are all
  cells ``s*c + offset`` reachable from the inputs, at stride ``ts / s``.
"""

import warnings

import torch

from . import _lib
from . import _ops
from . import errors
from .algo import (SPARSE_CONV_BWD_ALGO_MODE, SPARSE_CONV_FWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, algo_string)
from .tensor import SparseTensor, _check_coords, triple

__all__ = [
    "spatially_sparse_conv", "spatially_sparse_depthwise_conv",
    "sparse_max_pool", "sparse_avg_pool", "sparse_sum_pool", "sparse_unpool",
    "global_avg_pool", "global_max_pool", "global_sum_pool", "kernel_volume",
]


def kernel_volume(kernel_size):
    k = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
    return k[0] * k[1] * k[2]


def tristate(value, name):
    """None/True/False -> VOXCONV_UNSET/TRUE/FALSE."""
    if value is None:
        return _lib.UNSET
    if isinstance(value, bool) or value in (0, 1):
        return _lib.TRUE if value else _lib.FALSE
    raise errors.InvalidArgumentError(f"{name}: expected None, True or False, got {value!r}")


def _check_input(input, name="input"):
    if not isinstance(input, SparseTensor):
        raise TypeError(f"{name}: expected a voxconv.SparseTensor, got {type(input).__name__}")


def _geometry(input, kernel_size, stride, dilation, transposed, generative, out_coords):
    """Resolves the kernel map mode and fetches (or builds) the map.
    Returns (kmap, out_set)."""
    ks = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
    st = triple(stride, "stride", 1, _lib.STRIDE_MAX)
    dl = triple(dilation, "dilation", 1, _lib.DILATION_MAX)
    mgr, in_set = input.manager, input.coordinate_set
    ts = input.tensor_stride
    if generative:
        if out_coords is not None:
            raise errors.InvalidArgumentError("generative: out_coords must not be given")
        mode, out_set = _lib.KMAP_GENERATIVE, None
    elif transposed:
        mode = _lib.KMAP_TRANSPOSED
        if any(t % s for t, s in zip(ts, st)):
            raise errors.InvalidArgumentError(
                f"transposed: tensor_stride {ts} is not divisible by stride {st}")
        fine_ts = tuple(t // s for t, s in zip(ts, st))
        if out_coords is None:
            out_set = mgr.at_stride(fine_ts)
            if out_set is None:
                raise errors.InvalidArgumentError(
                    f"transposed: no coordinates at tensor stride {fine_ts} in this "
                    f"tensor's coordinate manager (pass out_coords, or use generative=True)")
        elif isinstance(out_coords, SparseTensor):
            if out_coords.manager is mgr:
                out_set = out_coords.coordinate_set
            else:
                out_set = mgr.add(out_coords.coords, out_coords.tensor_stride, register=False)
        else:
            out_set = mgr.add(_check_coords(out_coords, input.device), fine_ts, register=False)
    else:
        if out_coords is not None:
            raise errors.InvalidArgumentError(
                "out_coords is only for transposed convolutions")
        mode = _lib.KMAP_SUBMANIFOLD if st == (1, 1, 1) else _lib.KMAP_STRIDED
        out_set = None
    return mgr.kernel_map(in_set, mode, ks, st, dl, out_set)


def _output(input, feats, out_set):
    return SparseTensor(feats, None, _coord_set=out_set)


def _check_feature_tensor(t, input, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device != input.device:
        raise errors.InvalidArgumentError(
            f"{name} is on {t.device} but the input features are on {input.device}")
    if t.dtype != input.dtype:
        raise errors.DtypeMismatchError(
            f"{name} has dtype {t.dtype} but the input features have {input.dtype}")


def _check_bias(bias, input, channels):
    """The optional bias of either convolution: a tensor like the input
    features, of shape [channels] (the output channels)."""
    if bias is not None:
        _check_feature_tensor(bias, input, "bias")
        if bias.shape != (channels,):
            raise errors.ShapeMismatchError(
                f"bias: expected shape [{channels}], got {tuple(bias.shape)}")


def spatially_sparse_conv(input, weight, kernel_size=3, stride=1, dilation=1,
                          transposed=False, generative=False, fwd_algo=None,
                          bwd_algo=None, use_fp16_accum=None, deterministic=None, *,
                          bias=None, out_coords=None, dgrad_algo=None, wgrad_algo=None):
    """Sparse 3-D convolution of ``input`` (a SparseTensor).

    ``weight``: ``[K, C_in, C_out]`` with K = prod(kernel_size) in the
    library's offset order (x slowest). ``bias``: optional ``[C_out]``.
    ``fwd_algo`` / ``bwd_algo`` (and ``dgrad_algo`` / ``wgrad_algo``, which
    override ``bwd_algo`` per backward pass): see :mod:`voxconv.algo`.
    ``use_fp16_accum``: None (global setting / inference rule), True, False.
    ``deterministic``: None (the library's setting), True, False.
    Returns a SparseTensor sharing the input's coordinate manager.
    """
    _check_input(input)
    _check_feature_tensor(weight, input, "weight")
    K = kernel_volume(kernel_size)
    if weight.dim() != 3 or weight.shape[0] != K or weight.shape[1] != input.num_channels:
        raise errors.ShapeMismatchError(
            f"weight: expected [{K}, {input.num_channels}, C_out] for kernel_size "
            f"{kernel_size} and {input.num_channels} input channels, got "
            f"{tuple(weight.shape)}")
    fwd = algo_string(fwd_algo, SPARSE_CONV_FWD_ALGO_MODE, "fwd_algo")
    bwd = algo_string(bwd_algo, SPARSE_CONV_BWD_ALGO_MODE, "bwd_algo")
    dg = algo_string(dgrad_algo, SPARSE_CONV_BWD_ALGO_MODE, "dgrad_algo") or bwd
    wg = algo_string(wgrad_algo, SPARSE_CONV_BWD_ALGO_MODE, "wgrad_algo") or bwd
    fp16 = tristate(use_fp16_accum, "use_fp16_accum")
    det = tristate(deterministic, "deterministic")
    _check_bias(bias, input, weight.shape[2])
    km, out_set = _geometry(input, kernel_size, stride, dilation, transposed, generative,
                            out_coords)
    y = _ops.conv(input.feats, weight, km, fwd, dg, wg, fp16, det)
    if bias is not None:
        y = y + bias
    return _output(input, y, out_set)


def spatially_sparse_depthwise_conv(input, weight, kernel_size=3, stride=1, dilation=1,
                                    transposed=False, generative=False, fwd_algo=None,
                                    bwd_algo=None, use_fp16_accum=None, deterministic=None,
                                    *, bias=None, out_coords=None):
    """Depthwise sparse convolution: ``y[o][c] = sum x[i][c] * weight[k][c]``.
    ``weight``: ``[K, C]``. Algorithms: SPARSE_DEPTHWISE_CONV_*_ALGO_MODE.
    Other arguments as :func:`spatially_sparse_conv`."""
    _check_input(input)
    _check_feature_tensor(weight, input, "weight")
    K = kernel_volume(kernel_size)
    if weight.dim() != 2 or tuple(weight.shape) != (K, input.num_channels):
        raise errors.ShapeMismatchError(
            f"depthwise weight: expected [{K}, {input.num_channels}], got "
            f"{tuple(weight.shape)}")
    fwd = algo_string(fwd_algo, SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, "fwd_algo")
    bwd = algo_string(bwd_algo, SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE, "bwd_algo")
    fp16 = tristate(use_fp16_accum, "use_fp16_accum")
    det = tristate(deterministic, "deterministic")
    _check_bias(bias, input, input.num_channels)
    km, out_set = _geometry(input, kernel_size, stride, dilation, transposed, generative,
                            out_coords)
    y = _ops.depthwise(input.feats, weight, km, fwd, bwd, bwd, fp16, det)
    if bias is not None:
        y = y + bias
    return _output(input, y, out_set)


def _pool(input, kernel_size, stride, dilation, mode):
    _check_input(input)
    if stride is None:
        stride = kernel_size
    km, out_set = _geometry(input, kernel_size, stride, dilation, False, False, None)
    return _output(input, _ops.pool(input.feats, km, mode), out_set)


def sparse_max_pool(input, kernel_size=2, stride=None, dilation=1):
    """Max over each output's neighbourhood (STRIDED map; ``stride``
    defaults to ``kernel_size``; stride 1 pools in place). Outputs with no
    input are 0; the gradient goes to the first maximal input in map order."""
    return _pool(input, kernel_size, stride, dilation, _lib.POOL_MAX)


def sparse_avg_pool(input, kernel_size=2, stride=None, dilation=1):
    """Mean over the inputs present in each output's neighbourhood."""
    return _pool(input, kernel_size, stride, dilation, _lib.POOL_AVG)


def sparse_sum_pool(input, kernel_size=2, stride=None, dilation=1):
    return _pool(input, kernel_size, stride, dilation, _lib.POOL_SUM)


def sparse_unpool(input, kernel_size=2, stride=None, dilation=1, out_coords=None):
    """Unpooling, coarse -> fine, through the pooling map of the finer
    coordinates: ``y_fine[i] = sum over pairs (i, o, k) of x_coarse[o]`` (the
    adjoint of sum pooling; with kernel == stride every fine voxel copies
    its parent). The fine coordinates are those at tensor stride ``ts / s``
    in the coordinate manager, or ``out_coords`` (a SparseTensor of the
    same manager) when given; ``input`` must hold exactly the pooled
    coordinates of that set."""
    _check_input(input)
    if stride is None:
        stride = kernel_size
    ks = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
    st = triple(stride, "stride", 1, _lib.STRIDE_MAX)
    dl = triple(dilation, "dilation", 1, _lib.DILATION_MAX)
    ts = input.tensor_stride
    mgr = input.manager
    if out_coords is not None:
        if not isinstance(out_coords, SparseTensor):
            raise TypeError("sparse_unpool: out_coords must be a SparseTensor")
        fine = out_coords.coordinate_set
        if out_coords.manager is not mgr:
            raise errors.InvalidArgumentError(
                "sparse_unpool: out_coords belongs to another coordinate manager")
    else:
        if any(t % s for t, s in zip(ts, st)):
            raise errors.InvalidArgumentError(
                f"sparse_unpool: tensor_stride {ts} is not divisible by stride {st}")
        fine = mgr.at_stride(tuple(t // s for t, s in zip(ts, st)))
        if fine is None:
            raise errors.InvalidArgumentError(
                f"sparse_unpool: no finer coordinates at tensor stride "
                f"{tuple(t // s for t, s in zip(ts, st))} in the coordinate manager")
    mode = _lib.KMAP_SUBMANIFOLD if st == (1, 1, 1) else _lib.KMAP_STRIDED
    km, pooled = mgr.kernel_map(fine, mode, ks, st, dl)
    if pooled is not input.coordinate_set and not (
            pooled.tensor_stride == input.tensor_stride
            and torch.equal(pooled.coords, input.coords)):
        raise errors.KmapMismatchError(
            f"sparse_unpool: input ({len(input)} voxels at stride {ts}) is not the "
            f"pooled version of the finer coordinates ({len(pooled)} pooled voxels)")
    return _output(input, _ops.unpool(input.feats, km), fine)


def _global(input, reduce):
    _check_input(input)
    b = input.batch_size
    idx = input.coords[:, 0].long()
    C = input.num_channels
    f = input.feats
    if reduce == "sum" or reduce == "mean":
        out = f.new_zeros((b, C)).index_add(0, idx, f)
        if reduce == "mean":
            cnt = torch.bincount(idx, minlength=b).clamp_min(1).to(f.dtype)
            out = out / cnt[:, None]
        return out
    index = idx[:, None].expand(-1, C)
    with warnings.catch_warnings():  # torch 1.13 calls scatter_reduce "beta"
        warnings.filterwarnings("ignore", message=".*scatter_reduce.*")
        return f.new_zeros((b, C)).scatter_reduce(0, index, f, reduce="amax",
                                                  include_self=False)


def global_avg_pool(input):
    """Dense ``[B, C]``: mean of each batch item's features."""
    return _global(input, "mean")


def global_max_pool(input):
    """Dense ``[B, C]``: max of each batch item's features (0 if empty)."""
    return _global(input, "max")


def global_sum_pool(input):
    return _global(input, "sum")
