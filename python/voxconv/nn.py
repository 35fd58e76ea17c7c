"""torch.nn modules over the functional API.

Weight layout: ``SparseConv3d.weight`` is ``[K, in_channels, out_channels]``
with K = kx*ky*kz and kernel offset index ``(jx*ky + jy)*kz + jz`` (x
slowest), the library's order; ``SparseDepthwiseConv3d.weight`` is
``[K, channels]``. To load a dense ``torch.nn.Conv3d`` weight ``W``
(``[out, in, kx, ky, kz]``) use ``W.permute(2, 3, 4, 1, 0).reshape(K, in, out)``.

Initialisation: as torch's ConvNd, weights and bias uniform in
``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` with ``fan_in = in_channels * K``
(``fan_in = K`` for depthwise), i.e. kaiming-uniform with a = sqrt(5).
"""

import math

import torch
from torch import nn

from . import functional as F
from .algo import (SPARSE_CONV_BWD_ALGO_MODE, SPARSE_CONV_FWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, algo_string)
from .tensor import triple
from . import _lib

__all__ = [
    "SparseConv3d", "SparseConvTranspose3d", "SparseDepthwiseConv3d",
    "SparseMaxPool3d", "SparseAvgPool3d", "SparseSumPool3d", "SparseUnpool3d",
    "SparseGlobalAvgPool", "SparseGlobalMaxPool", "SparseGlobalSumPool",
    "SparseBatchNorm", "SparseReLU", "SparseFeatureOp",
]


def _set_conv_options(module, kernel_size, stride, dilation, transposed, generative,
                      use_fp16_accum, deterministic, fwd_algo, bwd_algo, fwd_mode, bwd_mode):
    """Validates and stores the geometry and per-layer options of a
    convolution module. SparseConv3d and SparseDepthwiseConv3d take the same
    ones, checked in the same order; only the algorithm families (fwd_mode,
    bwd_mode) differ."""
    module.kernel_size = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
    module.stride = triple(stride, "stride", 1, _lib.STRIDE_MAX)
    module.dilation = triple(dilation, "dilation", 1, _lib.DILATION_MAX)
    module.transposed, module.generative = bool(transposed), bool(generative)
    F.tristate(use_fp16_accum, "use_fp16_accum")
    F.tristate(deterministic, "deterministic")
    module.use_fp16_accum, module.deterministic = use_fp16_accum, deterministic
    module.fwd_algo = algo_string(fwd_algo, fwd_mode, "fwd_algo")
    module.bwd_algo = algo_string(bwd_algo, bwd_mode, "bwd_algo")


def _cfg(module):
    """The call configuration (fwd, dgrad, wgrad, fp16, det) of a conv
    module, from its (validated) attributes: cheap, so that setting e.g.
    ``layer.use_fp16_accum`` after construction still takes effect."""
    return (module.fwd_algo, module.bwd_algo, module.bwd_algo,
            F.tristate(module.use_fp16_accum, "use_fp16_accum"),
            F.tristate(module.deterministic, "deterministic"))


class SparseConv3d(nn.Module):
    """Sparse 3-D convolution (see :func:`voxconv.spatially_sparse_conv`).

    stride 1: submanifold; stride > 1: strided downsampling;
    ``transposed=True``: upsampling onto the finer coordinates of the
    coordinate manager; ``generative=True``: onto every reachable cell.
    ``use_fp16_accum``: None (global/inference rule), True or False for
    this layer; ``fwd_algo``/``bwd_algo``: algorithm arguments
    (validated here, at construction).
    """

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, dilation=1,
                 bias=True, transposed=False, generative=False, use_fp16_accum=None,
                 fwd_algo=None, bwd_algo=None, deterministic=None, device=None, dtype=None):
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        _set_conv_options(self, kernel_size, stride, dilation, transposed, generative,
                          use_fp16_accum, deterministic, fwd_algo, bwd_algo,
                          SPARSE_CONV_FWD_ALGO_MODE, SPARSE_CONV_BWD_ALGO_MODE)
        K = F.kernel_volume(self.kernel_size)
        fk = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty((K, self.in_channels, self.out_channels), **fk))
        self.bias = nn.Parameter(torch.empty(self.out_channels, **fk)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(max(1, self.in_channels * self.weight.shape[0]))
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input, out_coords=None):
        # Arguments were validated at construction: the normalised core.
        return F.conv_geometry(input, self.weight, self.bias, self.kernel_size, self.stride,
                               self.dilation, self.transposed, self.generative, out_coords,
                               _cfg(self), False)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.dilation != (1, 1, 1):
            s += f", dilation={self.dilation}"
        if self.transposed:
            s += ", transposed=True"
        if self.generative:
            s += ", generative=True"
        if self.bias is None:
            s += ", bias=False"
        if self.use_fp16_accum is not None:
            s += f", use_fp16_accum={self.use_fp16_accum}"
        if self.fwd_algo or self.bwd_algo:
            s += f", fwd_algo={self.fwd_algo!r}, bwd_algo={self.bwd_algo!r}"
        return s


class SparseConvTranspose3d(SparseConv3d):
    """Transposed (upsampling) sparse convolution: ``SparseConv3d(...,
    transposed=True)``. With ``generative=True`` the outputs are every cell
    the kernel reaches instead of the manager's finer coordinates."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, dilation=1,
                 bias=True, generative=False, **kwargs):
        super().__init__(in_channels, out_channels, kernel_size, stride, dilation, bias,
                         transposed=True, generative=generative, **kwargs)


class SparseDepthwiseConv3d(nn.Module):
    """Depthwise sparse convolution, weight ``[K, channels]``."""

    def __init__(self, channels, kernel_size=3, stride=1, dilation=1, bias=True,
                 transposed=False, generative=False, use_fp16_accum=None, fwd_algo=None,
                 bwd_algo=None, deterministic=None, device=None, dtype=None):
        super().__init__()
        self.channels = int(channels)
        _set_conv_options(self, kernel_size, stride, dilation, transposed, generative,
                          use_fp16_accum, deterministic, fwd_algo, bwd_algo,
                          SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE,
                          SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE)
        K = F.kernel_volume(self.kernel_size)
        fk = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty((K, self.channels), **fk))
        self.bias = nn.Parameter(torch.empty(self.channels, **fk)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.weight.shape[0])
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input, out_coords=None):
        return F.conv_geometry(input, self.weight, self.bias, self.kernel_size, self.stride,
                               self.dilation, self.transposed, self.generative, out_coords,
                               _cfg(self), True)

    def extra_repr(self):
        return (f"{self.channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"dilation={self.dilation}")


class _Pool(nn.Module):
    _fn = None

    def __init__(self, kernel_size=2, stride=None, dilation=1):
        super().__init__()
        self.kernel_size = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
        self.stride = triple(stride if stride is not None else kernel_size, "stride", 1,
                             _lib.STRIDE_MAX)
        self.dilation = triple(dilation, "dilation", 1, _lib.DILATION_MAX)

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.dilation)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, dilation={self.dilation}"


class SparseMaxPool3d(_Pool):
    """Max pooling (default kernel 2, stride = kernel)."""
    _fn = staticmethod(F.sparse_max_pool)


class SparseAvgPool3d(_Pool):
    """Average pooling over the voxels present."""
    _fn = staticmethod(F.sparse_avg_pool)


class SparseSumPool3d(_Pool):
    _fn = staticmethod(F.sparse_sum_pool)


class SparseUnpool3d(_Pool):
    """Unpooling coarse -> fine (see :func:`voxconv.sparse_unpool`)."""

    def forward(self, input, out_coords=None):
        return F.sparse_unpool(input, self.kernel_size, self.stride, self.dilation, out_coords)


class SparseGlobalAvgPool(nn.Module):
    """SparseTensor -> dense ``[B, C]`` mean per batch item."""

    def forward(self, input):
        return F.global_avg_pool(input)


class SparseGlobalMaxPool(nn.Module):
    def forward(self, input):
        return F.global_max_pool(input)


class SparseGlobalSumPool(nn.Module):
    def forward(self, input):
        return F.global_sum_pool(input)


class SparseFeatureOp(nn.Module):
    """Applies a torch module to the features of a SparseTensor (row-wise
    ops: norms, activations, dropout, Linear)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, input):
        return input.replace_feature(self.module(input.feats))


class SparseBatchNorm(SparseFeatureOp):
    """torch.nn.BatchNorm1d over the voxels' features."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, **kwargs):
        super().__init__(nn.BatchNorm1d(num_features, eps, momentum, affine, **kwargs))


class SparseReLU(SparseFeatureOp):
    def __init__(self, inplace=False):
        super().__init__(nn.ReLU(inplace))
