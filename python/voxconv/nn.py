"""torch.nn modules over the functional API.

Weight layout: ``SparseConv3d.weight`` is ``[K, in_channels, out_channels]``
with K = kx*ky*kz and kernel offset index ``(jx*ky + jy)*kz + jz`` (x
slowest), the library's order; ``SparseDepthwiseConv3d.weight`` is
``[K, channels]``. To load a dense ``torch.nn.Conv3d`` weight ``W``
(``[out, in, kx, ky, kz]``) use ``W.permute(2, 3, 4, 1, 0).reshape(K, in, out)``.

Initialisation: as torch's ConvNd, weights and bias uniform in
``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` with ``fan_in = in_channels * K``
(``fan_in = K`` for depthwise), i.e. kaiming-uniform with a = sqrt(5).
``voxconv.nn.init`` (voxconv/init.py) has kaiming_* / xavier_* with these
layouts' fans (torch.nn.init's read ``[out, in, *kernel]``).

``Sequential``: a torch.nn.Sequential that applies plain torch modules to
the features of a SparseTensor (see ``feature_wise``).
"""

import math
import sys

import torch
from torch import nn

from . import functional as F
from . import init  # voxconv.nn.init: layout-aware kaiming_* / xavier_*
from .algo import (SPARSE_CONV_BWD_ALGO_MODE, SPARSE_CONV_FWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, algo_string)
from .tensor import SparseTensor, triple
from . import _lib
from . import _ops
from . import errors
from .kmap import plain_map_key

# ``import voxconv.nn.init`` as well as ``voxconv.nn.init`` / ``from voxconv.nn
# import init`` (voxconv.nn is a module, not a package).
sys.modules.setdefault(__name__ + ".init", init)

__all__ = [
    "SparseConv3d", "SparseConvTranspose3d", "SparseDepthwiseConv3d",
    "SparseMaxPool3d", "SparseAvgPool3d", "SparseSumPool3d", "SparseUnpool3d",
    "SparseGlobalAvgPool", "SparseGlobalMaxPool", "SparseGlobalSumPool",
    "SparseBatchNorm", "SparseReLU", "SparseFeatureOp", "Sequential", "feature_wise", "init",
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


def _set_geo(module, padding, expand, out_shape, inverse):
    """Stores the keyword geometry (padding / expand / out_shape / inverse,
    see voxconv.functional's module doc) validated and normalised:
    ``module._geo`` is None for the defaults (the old call path)."""
    module._geo = F._norm_geo(padding, out_shape, expand, inverse, module.kernel_size,
                              module.dilation)
    if module._geo is None:
        module.padding, module.out_shape, module.expand, module.inverse = (
            None, None, False, False)
    else:
        module.padding, module.out_shape, module.expand, module.inverse = module._geo


def _geo_repr(module):
    s = ""
    if module.padding is not None:
        s += f", padding={module.padding}"
    if module.expand:
        s += ", expand=True"
    if module.out_shape is not None:
        s += f", out_shape={module.out_shape}"
    if module.inverse:
        s += ", inverse=True"
    return s


def _cfg(module):
    """The call configuration (fwd, dgrad, wgrad, fp16, det) of a conv
    module, from its (validated) attributes."""
    return (module.fwd_algo, module.bwd_algo, module.bwd_algo,
            F.tristate(module.use_fp16_accum, "use_fp16_accum"),
            F.tristate(module.deterministic, "deterministic"))


# The attributes a conv module's call plan is made from.
_PLAN_ATTRS = frozenset(("fwd_algo", "bwd_algo", "use_fp16_accum", "deterministic",
                         "kernel_size", "stride", "dilation", "transposed", "generative",
                         "_geo"))


def _call_plan(module):
    """(cfg, mkey, kvol) of a conv module's forward: cfg as _cfg, mkey the
    kmap.plain_map_key of its geometry (None when transposed, generative
    or with keyword geometry), kvol its kernel volume. Made on first use
    and kept until an attribute it is made from is set or deleted
    (_ConvModule), so that setting e.g. ``layer.use_fp16_accum`` or
    ``layer.stride`` after construction still takes effect. Making it on
    every call cost ~1-2 us of host time (perf-notes item 83), comparing
    the attributes with the ones it was made from ~0.5 us (item 143)."""
    plan = module.__dict__.get("_plan")
    if plan is None:
        plain = not (module.transposed or module.generative) and module._geo is None
        ks = module.kernel_size
        plan = (_cfg(module),
                plain_map_key(ks, module.stride, module.dilation) if plain else None,
                ks[0] * ks[1] * ks[2])
        module.__dict__["_plan"] = plan
    return plan


class _ConvModule(nn.Module):
    """Base of the conv modules: drops the call plan (_call_plan) when an
    attribute it is made from is set or deleted."""

    def __setattr__(self, name, value):
        if name in _PLAN_ATTRS:
            self.__dict__.pop("_plan", None)
        super().__setattr__(name, value)

    def __delattr__(self, name):
        if name in _PLAN_ATTRS:
            self.__dict__.pop("_plan", None)
        super().__delattr__(name)


def _conv_forward(module, input, out_coords, depthwise):
    """A conv module's forward: F.conv_cached when its map is cached (the
    parameters read from _parameters: nn.Module.__getattr__ is a Python
    call per read), else F.conv_geometry, which builds the map, handles
    every other case and validates."""
    cfg, mkey, kvol = _call_plan(module)
    if mkey is not None and out_coords is None:
        p = module._parameters
        # bias: a parameter, or None as a plain attribute (bias=False); as
        # anything else (a buffer, a replaced attribute) module.bias decides
        if "bias" in p or module.__dict__.get("bias", 0) is None:
            y = F.conv_cached(input, p.get("weight"), p.get("bias"), cfg, mkey, kvol,
                              depthwise)
            if y is not None:
                return y
    return F.conv_geometry(input, module.weight, module.bias, module.kernel_size, module.stride,
                           module.dilation, module.transposed, module.generative, out_coords,
                           cfg, depthwise, geo=module._geo, mkey=mkey)


class SparseConv3d(_ConvModule):
    """Sparse 3-D convolution (see :func:`voxconv.spatially_sparse_conv`).

    stride 1: submanifold; stride > 1: strided downsampling;
    ``transposed=True``: upsampling onto the finer coordinates of the
    coordinate manager; ``generative=True``: onto every reachable cell.
    ``use_fp16_accum``: None (global/inference rule), True or False for
    this layer; ``fwd_algo``/``bwd_algo``: algorithm arguments
    (validated here, at construction).

    Keyword-only, as in :func:`voxconv.spatially_sparse_conv` (fixed at
    construction): ``padding`` (None: centred offsets; an int or 3 ints:
    torch's / spconv's padding), ``expand=True`` (spconv's regular
    convolution: every reachable output, any stride), ``out_shape``
    (output bounds of expanding and generative maps), ``inverse=True``
    (forward(input, out_coords=<the forward conv's input>): the inverse of
    that strided / expanding convolution's map, spconv's
    SparseInverseConv3d).
    """

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, dilation=1,
                 bias=True, transposed=False, generative=False, use_fp16_accum=None,
                 fwd_algo=None, bwd_algo=None, deterministic=None, device=None, dtype=None,
                 *, padding=None, expand=False, out_shape=None, inverse=False):
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        _set_conv_options(self, kernel_size, stride, dilation, transposed, generative,
                          use_fp16_accum, deterministic, fwd_algo, bwd_algo,
                          SPARSE_CONV_FWD_ALGO_MODE, SPARSE_CONV_BWD_ALGO_MODE)
        _set_geo(self, padding, expand, out_shape, inverse)
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

    @_ops.outside_compile
    def forward(self, input, out_coords=None):
        # Arguments were validated at construction: the normalised core.
        return _conv_forward(self, input, out_coords, False)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.dilation != (1, 1, 1):
            s += f", dilation={self.dilation}"
        if self.transposed:
            s += ", transposed=True"
        if self.generative:
            s += ", generative=True"
        s += _geo_repr(self)
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


class SparseDepthwiseConv3d(_ConvModule):
    """Depthwise sparse convolution, weight ``[K, channels]``."""

    def __init__(self, channels, kernel_size=3, stride=1, dilation=1, bias=True,
                 transposed=False, generative=False, use_fp16_accum=None, fwd_algo=None,
                 bwd_algo=None, deterministic=None, device=None, dtype=None, *,
                 padding=None, expand=False, out_shape=None, inverse=False):
        super().__init__()
        self.channels = int(channels)
        _set_conv_options(self, kernel_size, stride, dilation, transposed, generative,
                          use_fp16_accum, deterministic, fwd_algo, bwd_algo,
                          SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE,
                          SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE)
        _set_geo(self, padding, expand, out_shape, inverse)
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

    @_ops.outside_compile
    def forward(self, input, out_coords=None):
        return _conv_forward(self, input, out_coords, True)

    def extra_repr(self):
        return (f"{self.channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"dilation={self.dilation}" + _geo_repr(self))


class _Pool(nn.Module):
    _fn = None

    def __init__(self, kernel_size=2, stride=None, dilation=1, *, padding=None, expand=False,
                 out_shape=None):
        super().__init__()
        self.kernel_size = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
        self.stride = triple(stride if stride is not None else kernel_size, "stride", 1,
                             _lib.STRIDE_MAX)
        self.dilation = triple(dilation, "dilation", 1, _lib.DILATION_MAX)
        # padding / expand / out_shape: as SparseConv3d's (spconv's pooling
        # output set with expand=True)
        _set_geo(self, padding, expand, out_shape, False)

    @_ops.outside_compile
    def forward(self, input):
        if self._geo is None:
            return type(self)._fn(input, self.kernel_size, self.stride, self.dilation)
        return type(self)._fn(input, self.kernel_size, self.stride, self.dilation,
                              padding=self.padding, expand=self.expand,
                              out_shape=self.out_shape)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"dilation={self.dilation}" + _geo_repr(self))


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

    def __init__(self, kernel_size=2, stride=None, dilation=1):
        super().__init__(kernel_size, stride, dilation)

    @_ops.outside_compile
    def forward(self, input, out_coords=None):
        return F.sparse_unpool(input, self.kernel_size, self.stride, self.dilation, out_coords)


class SparseGlobalAvgPool(nn.Module):
    """SparseTensor -> dense ``[B, C]`` mean per batch item."""

    @_ops.outside_compile
    def forward(self, input):
        return F.global_avg_pool(input)


class SparseGlobalMaxPool(nn.Module):
    @_ops.outside_compile
    def forward(self, input):
        return F.global_max_pool(input)


class SparseGlobalSumPool(nn.Module):
    @_ops.outside_compile
    def forward(self, input):
        return F.global_sum_pool(input)


class SparseFeatureOp(nn.Module):
    """Applies a torch module to the features of a SparseTensor (row-wise
    ops: norms, activations, dropout, Linear)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    @_ops.outside_compile
    def forward(self, input):
        return input.replace_feature(self.module(input.feats))


class SparseBatchNorm(SparseFeatureOp):
    """torch.nn.BatchNorm1d over the voxels' features."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, **kwargs):
        super().__init__(nn.BatchNorm1d(num_features, eps, momentum, affine, **kwargs))


class SparseReLU(SparseFeatureOp):
    def __init__(self, inplace=False):
        super().__init__(nn.ReLU(inplace))


def _is_torch_module(module):
    return type(module).__module__.split(".", 1)[0] == "torch"


def _flag(module):
    # An instance's plain attributes live in its __dict__ (nn.Module's
    # __getattr__, reached by getattr() on a missing name, is slow).
    flag = module.__dict__.get("voxconv_feature_wise")
    return flag if flag is not None else getattr(type(module), "voxconv_feature_wise", None)


def feature_wise(module):
    """Whether :class:`Sequential` applies ``module`` to the features of a
    SparseTensor (True) or hands it the SparseTensor (False):

    * a module's own ``voxconv_feature_wise`` attribute (True / False),
      when set, decides: mark your own feature-wise modules with it;
    * a module defined in torch (``torch.nn.*``: BatchNorm1d, ReLU,
      Dropout, Linear, LayerNorm, SyncBatchNorm, ...) is feature-wise,
      unless it contains a module that is not (a ``torch.nn.Sequential``
      of voxconv layers gets the SparseTensor);
    * any other module (voxconv's layers, your own blocks) gets the
      SparseTensor.
    """
    flag = _flag(module)
    if flag is not None:
        return bool(flag)
    if not _is_torch_module(module):
        return False
    if module._modules:  # a container (or a module with children)
        for m in module.modules():
            if m is not module:
                flag = _flag(m)
                if not flag if flag is not None else not _is_torch_module(m):
                    return False
    return True


class Sequential(nn.Sequential):
    """``torch.nn.Sequential`` for sparse networks: while the running value
    is a SparseTensor, plain torch modules (BatchNorm1d, ReLU, Dropout,
    Linear, LayerNorm, any module that knows nothing of SparseTensor: see
    :func:`feature_wise`) are applied to its features and the result keeps
    the coordinates (``x.replace_feature(module(x.feats))``); voxconv
    modules and other modules get the SparseTensor itself. Once the value
    is no longer a SparseTensor (after ``SparseGlobalAvgPool``, say),
    modules get it as ``torch.nn.Sequential`` would give it.

    It is a ``torch.nn.Sequential`` (a subclass): construction from modules
    or an ``OrderedDict``, indexing, slicing, ``append``, and state_dict
    keys (``"0.weight"``, ``"1.running_mean"``, ...) are torch's, so a
    state_dict moves between the two.

        net = voxconv.nn.Sequential(
            voxconv.nn.SparseConv3d(4, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
            voxconv.nn.SparseConv3d(32, 32))
    """

    @_ops.outside_compile
    def forward(self, input):
        for i, module in enumerate(self):
            if isinstance(input, SparseTensor) and feature_wise(module):
                feats = module(input.feats)
                if (not isinstance(feats, torch.Tensor) or feats.dim() != 2
                        or feats.shape[0] != input.feats.shape[0]):
                    got = (tuple(feats.shape) if isinstance(feats, torch.Tensor)
                           else type(feats).__name__)
                    raise errors.ShapeMismatchError(
                        f"voxconv.nn.Sequential: module {i} ({type(module).__name__}) was "
                        f"applied to the features [{input.feats.shape[0]}, "
                        f"{input.feats.shape[1]}] and returned {got}; a feature-wise "
                        f"module must keep one row per voxel (set "
                        f"module.voxconv_feature_wise = False to hand it the SparseTensor)")
                input = input.replace_feature(feats)
            else:
                input = module(input)
        return input
