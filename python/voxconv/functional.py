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

Padding, expanding maps, output bounds, inverse maps (keyword-only; the
defaults keep everything above unchanged):

* ``padding=p`` (int or 3 ints, 0 .. d*(k-1)): offsets ``j*d - p`` as in
  ``torch.nn.functional.conv3d`` / ``conv_transpose3d`` and spconv (desc
  ``padded = 1``) instead of the centred ``(j - (k-1)//2) * d``.
* ``expand=True`` (not transposed): the **expanding** map (spconv's
  ``SparseConv3d``, a dense conv3d's non-zero outputs): outputs are every
  ``o`` with ``s*o + offset`` an input, for any stride including 1, at
  tensor stride ``ts * s``. ``padding`` usually goes with it.
* ``out_shape=(X, Y, Z)`` (expanding and generative maps only; 0 on an axis
  = unbounded): outputs are kept only in ``[0, out_shape)``, as spconv's
  ``spatial_shape`` bounds them (for a conv,
  ``floor((in + 2p - d(k-1) - 1) / s) + 1``).
* ``inverse=True`` with ``out_coords`` = the SparseTensor that was the input
  of a strided or expanding convolution with this same geometry
  (kernel_size, stride, dilation, padding, expand, out_shape): the
  output lands exactly on ``out_coords``'s coordinates through the inverse
  of that convolution's map (``voxconv_kmap_inverse``: the same pairs
  reversed, same weight index per offset; spconv's
  ``SparseInverseConv3d``). ``input`` must be that convolution's output
  set. The weight is ``[K, C_in, C_out]`` of this layer.

See :func:`voxconv.kmap.CoordinateManager.kernel_map` for the caching.
"""

import warnings

import torch

from . import _lib
from . import _ops
from . import _validate
from . import errors
from .algo import (SPARSE_CONV_BWD_ALGO_MODE, SPARSE_CONV_FWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, algo_string)
from .kmap import KMAP_EXPANDING, cached_plain_map
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


def _geometry(input, ks, st, dl, transposed, generative, out_coords, _map=True):
    """Resolves the kernel map mode and fetches (or builds) the map for
    normalised geometry (3-tuples). Returns (kmap, out_set) (with _map
    False, for a transposed map: (None, out_set), the map not built)."""
    mgr, in_set = input.manager, input.coordinate_set
    if not (transposed or generative):
        if out_coords is not None:
            raise errors.InvalidArgumentError(
                "out_coords is only for transposed convolutions")
        mode = _lib.KMAP_SUBMANIFOLD if st == (1, 1, 1) else _lib.KMAP_STRIDED
        return mgr.kernel_map(in_set, mode, ks, st, dl, None)
    ts = input.tensor_stride
    if generative:
        if out_coords is not None:
            raise errors.InvalidArgumentError("generative: out_coords must not be given")
        return mgr.kernel_map(in_set, _lib.KMAP_GENERATIVE, ks, st, dl, None)
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
        out_set = mgr.add(_check_coords(out_coords, input.device, "spatially_sparse_conv",
                                        "out_coords"), fine_ts, register=False)
    if not _map:
        return None, out_set
    return mgr.kernel_map(in_set, _lib.KMAP_TRANSPOSED, ks, st, dl, out_set)


def _norm_geo(padding, out_shape, expand, inverse, ks, dl):
    """Validates the keyword geometry: None when all are defaults (the old
    path), else (padding 3-tuple | None, out_shape 3-tuple | None,
    expand, inverse)."""
    if padding is None and out_shape is None and not expand and not inverse:
        return None
    if padding is not None:
        padding = triple(padding, "padding", 0, _lib.KERNEL_SIZE_MAX * _lib.DILATION_MAX)
        for a in range(3):
            if padding[a] > dl[a] * (ks[a] - 1):
                raise errors.InvalidArgumentError(
                    f"padding: {padding[a]} on axis {a} is over dilation*(kernel_size-1) = "
                    f"{dl[a] * (ks[a] - 1)}")
    if out_shape is not None:
        out_shape = triple(out_shape, "out_shape", 0, _lib.COORD_MAX + 1)
    return (padding, out_shape, bool(expand), bool(inverse))


def _geometry_ext(input, ks, st, dl, transposed, generative, out_coords, geo):
    """_geometry with padding / out_shape / expand / inverse (see the
    module doc)."""
    padding, out_shape, expand, inverse = geo
    mgr, in_set = input.manager, input.coordinate_set
    if inverse:
        if expand is False and st == (1, 1, 1):
            raise errors.InvalidArgumentError(
                "inverse: the forward convolution must be strided (stride > 1) or "
                "expanding (expand=True); a submanifold map has no inverse map")
        if generative:
            raise errors.InvalidArgumentError("inverse: generative must be False")
        if not isinstance(out_coords, SparseTensor) or out_coords.manager is not mgr:
            raise errors.InvalidArgumentError(
                "inverse: out_coords must be the SparseTensor that was the forward "
                "convolution's input (same coordinate manager)")
        fwd_in = out_coords.coordinate_set
        mode = KMAP_EXPANDING if expand else _lib.KMAP_STRIDED
        km, fwd_out = mgr.kernel_map(fwd_in, mode, ks, st, dl, None, padding, out_shape)
        if fwd_out is not in_set and not (
                len(fwd_out) == len(in_set) and torch.equal(fwd_out.coords, in_set.coords)):
            raise errors.KmapMismatchError(
                f"inverse: input ({len(in_set)} voxels) is not the output of the forward "
                f"convolution of out_coords with this geometry ({len(fwd_out)} voxels)")
        return mgr.inverse_kernel_map(fwd_in, mode, ks, st, dl, padding, out_shape)
    if expand:
        if transposed or generative:
            raise errors.InvalidArgumentError(
                "expand=True is for (non-transposed) convolutions; use generative=True "
                "for the transposed counterpart")
        if out_coords is not None:
            raise errors.InvalidArgumentError("expand: out_coords must not be given")
        return mgr.kernel_map(in_set, KMAP_EXPANDING, ks, st, dl, None, padding, out_shape)
    if out_shape is not None and not generative:
        raise errors.InvalidArgumentError(
            "out_shape is only for expanding (expand=True) and generative maps")
    if not (transposed or generative):
        if out_coords is not None:
            raise errors.InvalidArgumentError(
                "out_coords is only for transposed convolutions")
        mode = _lib.KMAP_SUBMANIFOLD if st == (1, 1, 1) else _lib.KMAP_STRIDED
        return mgr.kernel_map(in_set, mode, ks, st, dl, None, padding, None)
    if generative:
        if out_coords is not None:
            raise errors.InvalidArgumentError("generative: out_coords must not be given")
        return mgr.kernel_map(in_set, _lib.KMAP_GENERATIVE, ks, st, dl, None, padding,
                              out_shape)
    # transposed onto known coordinates, with padding
    km_plain, out_set = _geometry(input, ks, st, dl, True, False, out_coords,
                                  _map=False)
    return mgr.kernel_map(in_set, _lib.KMAP_TRANSPOSED, ks, st, dl, out_set, padding, None)


def _output(input, feats, out_set):
    return SparseTensor._wrap(feats, out_set)


def _check_feature_tensor(t, feats, name):
    """t (weight, bias) on the features' device with their dtype."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != feats.dtype:
        raise errors.DtypeMismatchError(
            f"{name} has dtype {t.dtype} but the input features have {feats.dtype}")
    # get_device(): -1 on the CPU, the index on CUDA (no torch.device made)
    if t.get_device() != feats.get_device() or t.is_cuda != feats.is_cuda:
        raise errors.InvalidArgumentError(
            f"{name} is on {t.device} but the input features are on {feats.device}")


# ---- automatic mixed precision -------------------------------------------------
# Under torch.autocast the convolutions run in the autocast dtype, as
# torch's own conv does: floating features, weight and bias that are not
# float64 are cast (the casts are autograd ops, so gradients reach the
# float32 parameters); outside autocast nothing is cast. Pooling keeps its
# input's dtype (torch's pooling is not in autocast's lists either).

def _autocast_state_new(device_type):
    if torch.is_autocast_enabled(device_type):
        return True, torch.get_autocast_dtype(device_type)
    return False, None


def _autocast_state_old(device_type):  # torch < 2.4: no device argument
    if device_type == "cuda":
        if torch.is_autocast_enabled():
            return True, torch.get_autocast_gpu_dtype()
    elif torch.is_autocast_cpu_enabled():
        return True, torch.get_autocast_cpu_dtype()
    return False, None


def _has_device_autocast_api():
    try:
        torch.is_autocast_enabled("cpu")
        return hasattr(torch, "get_autocast_dtype")
    except TypeError:
        return False


_autocast_state = (_autocast_state_new if _has_device_autocast_api()
                   else _autocast_state_old)
"""(enabled, dtype) of torch.autocast for "cuda" or "cpu"."""

_CASTABLE = (torch.float32, torch.float16, torch.bfloat16)


# torch >= 2: one C call that is False unless autocast is on for some
# device, the common case, checked before the per-device state (a Python
# call and a C call; this runs on every convolution)
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)


def _autocast_on_old():  # torch < 2: no single call for every device
    return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


# whether autocast is on for any device (_autocast, conv_cached)
_autocast_on = _any_autocast if _any_autocast is not None else _autocast_on_old


def _autocast(feats, weight, bias):
    if not _autocast_on():
        return feats, weight, bias
    on, dt = _autocast_state("cuda" if feats.is_cuda else "cpu")
    if not on:
        return feats, weight, bias

    def cast(t):
        return t.to(dt) if t is not None and t.dtype in _CASTABLE and t.dtype != dt else t
    return cast(feats), cast(weight), cast(bias)


@_ops.outside_compile
def spatially_sparse_conv(input, weight, kernel_size=3, stride=1, dilation=1,
                          transposed=False, generative=False, fwd_algo=None,
                          bwd_algo=None, use_fp16_accum=None, deterministic=None, *,
                          bias=None, out_coords=None, dgrad_algo=None, wgrad_algo=None,
                          padding=None, expand=False, out_shape=None, inverse=False):
    """Sparse 3-D convolution of ``input`` (a SparseTensor).

    ``weight``: ``[K, C_in, C_out]`` with K = prod(kernel_size) in the
    library's offset order (x slowest). ``bias``: optional ``[C_out]``.
    ``fwd_algo`` / ``bwd_algo`` (and ``dgrad_algo`` / ``wgrad_algo``, which
    override ``bwd_algo`` per backward pass): see :mod:`voxconv.algo`.
    ``use_fp16_accum``: None (global setting / inference rule), True, False.
    ``deterministic``: None (the library's setting), True, False.
    Under ``torch.autocast`` it runs in the autocast dtype (see above).
    ``padding``, ``expand``, ``out_shape``, ``inverse``: see the module doc
    (spconv's regular, transposed and inverse convolutions).
    Returns a SparseTensor sharing the input's coordinate manager.
    """
    _check_input(input)
    ks = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
    st = triple(stride, "stride", 1, _lib.STRIDE_MAX)
    dl = triple(dilation, "dilation", 1, _lib.DILATION_MAX)
    fwd = algo_string(fwd_algo, SPARSE_CONV_FWD_ALGO_MODE, "fwd_algo")
    bwd = algo_string(bwd_algo, SPARSE_CONV_BWD_ALGO_MODE, "bwd_algo")
    dg = algo_string(dgrad_algo, SPARSE_CONV_BWD_ALGO_MODE, "dgrad_algo") or bwd
    wg = algo_string(wgrad_algo, SPARSE_CONV_BWD_ALGO_MODE, "wgrad_algo") or bwd
    cfg = (fwd, dg, wg, tristate(use_fp16_accum, "use_fp16_accum"),
           tristate(deterministic, "deterministic"))
    return conv_geometry(input, weight, bias, ks, st, dl, bool(transposed), bool(generative),
                         out_coords, cfg, False,
                         geo=_norm_geo(padding, out_shape, expand, inverse, ks, dl))


def conv_geometry(input, weight, bias, ks, st, dl, transposed, generative, out_coords, cfg,
                  depthwise, geo=None, mkey=None):
    """The convolution with normalised arguments (3-tuples ks/st/dl, cfg =
    (fwd, dgrad, wgrad, fp16 tristate, det tristate)): the modules call
    this directly, so a layer's forward does no per-call re-validation of
    what its constructor checked. Not under torch.compiler.disable itself:
    its callers are (the module forwards, spatially_sparse_conv), and a
    second disabled layer cost ~3 us per autograd call on torch 2.11.
    ``geo``: None, or what _norm_geo returns for padding / out_shape /
    expand / inverse. ``mkey``: None, or (a module's, computed once)
    kmap.plain_map_key(ks, st, dl) of this geometry, which must then be
    neither transposed nor generative and have geo None: a cached map is
    found with one dictionary read instead of the three calls through
    _geometry (host time per call, docs/perf-notes.md item 83)."""
    if type(input) is not SparseTensor:
        _check_input(input)
    feats, weight, bias = _autocast(input.feats, weight, bias)
    K = ks[0] * ks[1] * ks[2]
    C = feats.shape[1]
    _check_feature_tensor(weight, feats, "weight")
    if depthwise:
        if weight.dim() != 2 or weight.shape[0] != K or weight.shape[1] != C:
            raise errors.ShapeMismatchError(
                f"depthwise weight: expected [{K}, {C}], got {tuple(weight.shape)}")
        cout = C
    else:
        if weight.dim() != 3 or weight.shape[0] != K or weight.shape[1] != C:
            raise errors.ShapeMismatchError(
                f"weight: expected [{K}, {C}, C_out] for kernel_size {ks} and {C} input "
                f"channels, got {tuple(weight.shape)}")
        cout = weight.shape[2]
    if bias is not None:
        _check_feature_tensor(bias, feats, "bias")
        if bias.shape != (cout,):
            raise errors.ShapeMismatchError(
                f"bias: expected shape [{cout}], got {tuple(bias.shape)}")
    hit = None
    if mkey is not None and out_coords is None:
        hit = cached_plain_map(input.coordinate_set, mkey)
    if hit is not None:
        km, out_set = hit
    elif geo is None:
        km, out_set = _geometry(input, ks, st, dl, transposed, generative, out_coords)
    else:
        km, out_set = _geometry_ext(input, ks, st, dl, transposed, generative, out_coords, geo)
    y = _ops.weighted("depthwise" if depthwise else "conv", feats, weight, km, cfg)
    if bias is not None:
        y = y + bias
    return SparseTensor._wrap(y, out_set)


def conv_cached(input, weight, bias, cfg, mkey, kvol, depthwise):
    """conv_geometry's common case in one frame, or None when it is not
    that case: a SparseTensor whose coordinate set has the map ``mkey``
    (kmap.plain_map_key of a centred submanifold or strided geometry) in
    its cache, autocast off, and weight (``[kvol, C, C_out]``; depthwise
    ``[kvol, C]``) and bias a valid pair for the features (dtype, device,
    shape). The module forwards try it first and otherwise call
    conv_geometry, which checks the same things and raises what fails: no
    error is raised here, and every condition is a plain comparison, so
    the call does what conv_geometry would (test_conv's cached-map tests
    run both on the same inputs). Host time per layer call, the issue-20
    target (docs/perf-notes.md item 143): conv_geometry's general
    branches, its helper frames and nn.Module's attribute lookup of the
    parameters cost more than the launch itself."""
    if type(input) is not SparseTensor or _autocast_on():
        return None
    feats = input.feats
    if not isinstance(feats, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return None
    dt = feats.dtype
    dev = feats.get_device()
    cuda = feats.is_cuda
    if weight.dtype is not dt or weight.get_device() != dev or weight.is_cuda is not cuda:
        return None
    ws = weight.shape
    C = feats.shape[1] if feats.dim() == 2 else -1
    if depthwise:
        if len(ws) != 2 or ws[0] != kvol or ws[1] != C:
            return None
        cout = C
    else:
        if len(ws) != 3 or ws[0] != kvol or ws[1] != C:
            return None
        cout = ws[2]
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype is not dt
                             or bias.get_device() != dev or bias.is_cuda is not cuda
                             or bias.shape != (cout,)):
        return None
    cs = input._set
    if cs.version is not None and cs.coords._version != cs.version:
        return None
    entry = cs.kmaps.get(mkey)
    if entry is None:
        return None
    out_set = entry[1]()
    if out_set is None:
        return None
    y = _ops.weighted("depthwise" if depthwise else "conv", feats, weight, entry[0], cfg)
    if bias is not None:
        y = y + bias
    return SparseTensor._wrap(y, out_set)


@_ops.outside_compile
def spatially_sparse_depthwise_conv(input, weight, kernel_size=3, stride=1, dilation=1,
                                    transposed=False, generative=False, fwd_algo=None,
                                    bwd_algo=None, use_fp16_accum=None, deterministic=None,
                                    *, bias=None, out_coords=None, padding=None, expand=False,
                                    out_shape=None, inverse=False):
    """Depthwise sparse convolution: ``y[o][c] = sum x[i][c] * weight[k][c]``.
    ``weight``: ``[K, C]``. Algorithms: SPARSE_DEPTHWISE_CONV_*_ALGO_MODE.
    Other arguments as :func:`spatially_sparse_conv`."""
    _check_input(input)
    ks = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
    st = triple(stride, "stride", 1, _lib.STRIDE_MAX)
    dl = triple(dilation, "dilation", 1, _lib.DILATION_MAX)
    fwd = algo_string(fwd_algo, SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, "fwd_algo")
    bwd = algo_string(bwd_algo, SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE, "bwd_algo")
    cfg = (fwd, bwd, bwd, tristate(use_fp16_accum, "use_fp16_accum"),
           tristate(deterministic, "deterministic"))
    return conv_geometry(input, weight, bias, ks, st, dl, bool(transposed), bool(generative),
                         out_coords, cfg, True,
                         geo=_norm_geo(padding, out_shape, expand, inverse, ks, dl))


@_ops.outside_compile
def _pool(input, kernel_size, stride, dilation, mode, padding=None, expand=False,
          out_shape=None):
    _check_input(input)
    if stride is None:
        stride = kernel_size
    ks = triple(kernel_size, "kernel_size", 1, _lib.KERNEL_SIZE_MAX)
    st = triple(stride, "stride", 1, _lib.STRIDE_MAX)
    dl = triple(dilation, "dilation", 1, _lib.DILATION_MAX)
    geo = _norm_geo(padding, out_shape, expand, False, ks, dl)
    if geo is None:
        km, out_set = _geometry(input, ks, st, dl, False, False, None)
    else:
        km, out_set = _geometry_ext(input, ks, st, dl, False, False, None, geo)
    return _output(input, _ops.pool(input.feats, km, mode), out_set)


def sparse_max_pool(input, kernel_size=2, stride=None, dilation=1, *, padding=None,
                    expand=False, out_shape=None):
    """Max over each output's neighbourhood (STRIDED map; ``stride``
    defaults to ``kernel_size``; stride 1 pools in place). Outputs with no
    input are 0; the gradient goes to the first maximal input in map order.
    ``padding`` / ``expand`` / ``out_shape``: as for
    :func:`spatially_sparse_conv` (``expand=True``: spconv's
    ``SparseMaxPool3d`` output set)."""
    return _pool(input, kernel_size, stride, dilation, _lib.POOL_MAX, padding, expand,
                 out_shape)


def sparse_avg_pool(input, kernel_size=2, stride=None, dilation=1, *, padding=None,
                    expand=False, out_shape=None):
    """Mean over the inputs present in each output's neighbourhood."""
    return _pool(input, kernel_size, stride, dilation, _lib.POOL_AVG, padding, expand,
                 out_shape)


def sparse_sum_pool(input, kernel_size=2, stride=None, dilation=1, *, padding=None,
                    expand=False, out_shape=None):
    return _pool(input, kernel_size, stride, dilation, _lib.POOL_SUM, padding, expand,
                 out_shape)


@_ops.outside_compile
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
    # The batch column is read on the host here anyway (it sizes the
    # output), so its range is checked in the same read: a CUDA tensor's
    # int32 coordinates were not checked when it was made (see _validate),
    # and a negative index would be a device-side assert in index_add.
    b = _validate.check_batch_column(
        input.coords[:, 0], "global_avg_pool" if reduce == "mean" else f"global_{reduce}_pool")
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


@_ops.outside_compile
def global_avg_pool(input):
    """Dense ``[B, C]``: mean of each batch item's features."""
    return _global(input, "mean")


@_ops.outside_compile
def global_max_pool(input):
    """Dense ``[B, C]``: max of each batch item's features (0 if empty)."""
    return _global(input, "max")


@_ops.outside_compile
def global_sum_pool(input):
    return _global(input, "sum")
