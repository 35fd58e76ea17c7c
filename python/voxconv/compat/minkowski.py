"""MinkowskiEngine 0.5's Python API (the subset MinkUNet-style models use)
over voxconv: ``import voxconv.compat.minkowski as ME``.

Written from MinkowskiEngine's documented and implemented semantics
(NVIDIA/MinkowskiEngine 0.5: MinkowskiConvolution.py, kernel_region.hpp,
coordinate_map_cpu.hpp, coordinate_map_manager.cpp); no code is copied.

Conventions, mapped at the boundary (docs/porting.md, "From
MinkowskiEngine", has the table):

* Coordinates. ME's ``SparseTensor.C`` are ``(batch, x, y, z)`` scaled by
  the tensor stride (a stride-4 tensor's coordinates are multiples of 4).
  voxconv keeps level indices (``c / tensor_stride``): coordinates are
  divided on the way in and multiplied in ``.C``.
* Kernel offsets (region_type HYPER_CUBE). Per axis, odd k: ``(j - k//2)*d``
  (centred, as voxconv); even k: ``j*d`` for j = 0..k-1 (ME anchors even
  kernels at 0; voxconv centres k >= 4, so those run with the kmap desc's
  explicit padding P = 0). Flat index: the FIRST axis varies fastest
  (``jx + kx*(jy + ky*jz)``), the reverse of voxconv's default (x
  slowest). The ``kernel`` parameter is stored in ME's order, ``[K, Cin,
  Cout]``, so ME state_dicts load unchanged, and the library reads it as
  stored: a convolution's map is built with the kmap desc's offset_order
  = X_FASTEST (the same pairs, numbered as ME numbers them), so no
  reordered copy of the kernel or of its gradient is ever made.
  1x1 convolutions with stride 1 store ``[Cin, Cout]`` (ME's ``use_mm``)
  and bias is ``[1, Cout]``, default off.
* Output sets. stride s > 1: ``unique(floor(c / s))`` (voxconv STRIDED),
  whatever the kernel. Pooling with kernel == stride groups each input
  into its ``floor(c / s)`` cell (ME's stride map: offsets 0..k-1 also for
  odd k). ``expand_coordinates=True``: every ``c + offset`` aligned to the
  output stride (voxconv EXPANDING; odd kernels, see below). Transposed:
  the coordinates already at the finer stride (the encoder's) when the
  manager has them, else generated (ME makes them with stride_region);
  ``MinkowskiGenerativeConvolutionTranspose``: every ``s*c + offset``
  (voxconv GENERATIVE).
* ``expand_coordinates=True`` with an even kernel is refused: ME's set
  there is ``{c + j}`` while the pairs it then builds are ``c = o + j``,
  so outputs exist that no input reaches, and no voxconv mode pairs a
  caller-given output set in the downsampling direction.

Maps. Every map comes from the input's voxconv coordinate manager
(``CoordinateManager.kernel_map``), so compat layers on one input share
maps (and share them with native layers where the offset orders
coincide: pooling, and kernels with two axes of size 1). Where ME's
offsets differ from voxconv's default (even k >= 4, pooling with odd
kernel == stride) the map is asked for with ``padding=`` (the kmap desc's
padded = 1 and P per axis).
"""

import ctypes
import enum
import math
import warnings

import numpy as np
import torch
from torch import nn

from .. import _lib
from .. import _ops
from .. import _runtime
from .. import _validate
from .. import errors
from .. import functional as _F
from ..tensor import SparseTensor as _NativeSparseTensor

__all__ = [
    "SparseTensor", "TensorField", "CoordinateManager", "CoordinateMapKey",
    "SparseTensorQuantizationMode", "SparseTensorOperationMode", "RegionType",
    "KernelGenerator", "MinkowskiNetwork", "MinkowskiModuleBase",
    "MinkowskiConvolution", "MinkowskiConvolutionTranspose",
    "MinkowskiGenerativeConvolutionTranspose",
    "MinkowskiMaxPooling", "MinkowskiAvgPooling", "MinkowskiSumPooling",
    "MinkowskiGlobalPooling", "MinkowskiGlobalMaxPooling", "MinkowskiGlobalAvgPooling",
    "MinkowskiGlobalSumPooling", "MinkowskiBatchNorm", "MinkowskiSyncBatchNorm",
    "MinkowskiInstanceNorm", "MinkowskiLinear", "MinkowskiPruning", "cat", "utils",
    "convert_checkpoint", "to_voxconv_kernel", "from_voxconv_kernel",
]

_KMAP_EXPANDING = getattr(_lib, "KMAP_EXPANDING", 4)  # VOXCONV_KMAP_EXPANDING


class SparseTensorQuantizationMode(enum.Enum):
    RANDOM_SUBSAMPLE = 0
    UNWEIGHTED_AVERAGE = 1
    UNWEIGHTED_SUM = 2
    NO_QUANTIZATION = 3
    MAX_POOL = 4


class SparseTensorOperationMode(enum.Enum):
    SEPARATE_COORDINATE_MANAGER = 0
    SHARE_COORDINATE_MANAGER = 1


class RegionType(enum.Enum):
    HYPER_CUBE = 0
    HYPER_CROSS = 1
    CUSTOM = 2


def _triple(v, name, lo=1):
    if isinstance(v, torch.Tensor):
        v = v.tolist()
    if isinstance(v, (int, np.integer)):
        v = (int(v),) * 3
    v = tuple(int(a) for a in v)
    if len(v) != 3 or any(a < lo for a in v):
        raise errors.InvalidArgumentError(
            f"{name}: expected one or 3 integers >= {lo} (dimension=3), got {v}")
    return v


# ---- kernel order and weight conversion ----------------------------------------

_perm_cache = {}
_perm_on_device = {}  # (kernel_size, device) -> perm there, None for the identity


def _me_to_voxconv_perm(ks):
    """perm[v] = ME kernel index of voxconv kernel index v (voxconv: x
    slowest; ME: x fastest)."""
    p = _perm_cache.get(ks)
    if p is None:
        kx, ky, kz = ks
        me = torch.arange(kx * ky * kz).reshape(kz, ky, kx)  # me[jz, jy, jx]
        p = me.permute(2, 1, 0).reshape(-1).contiguous()    # voxconv (jx, jy, jz) order
        identity = bool(torch.equal(p, torch.arange(p.numel())))
        p = _perm_cache[ks] = (p, identity)
    return p


def _perm_on(ks, device):
    """The permutation of kernel size ``ks`` (a validated 3-tuple) on
    ``device``, None when it is the identity. Copied there once: a copy
    per call was a pageable host-to-device copy per convolution, which
    waits for the GPU's queue."""
    key = (ks, device)
    try:
        return _perm_on_device[key]
    except KeyError:
        perm, identity = _me_to_voxconv_perm(ks)
        p = _perm_on_device[key] = None if identity else perm.to(device)
        return p


def to_voxconv_kernel(kernel, kernel_size):
    """An ME kernel ``[K, Cin, Cout]`` (ME offset order) as voxconv's weight
    (same shape, voxconv's order; see the module doc)."""
    perm = _perm_on(_triple(kernel_size, "kernel_size"), kernel.device)
    return kernel if perm is None else kernel.index_select(0, perm)


def from_voxconv_kernel(weight, kernel_size):
    """The inverse of :func:`to_voxconv_kernel`."""
    perm = _perm_on(_triple(kernel_size, "kernel_size"), weight.device)
    return weight if perm is None else weight.index_select(0, torch.argsort(perm))


def _offset_order(ks):
    """The kmap desc offset_order whose numbering is ME's for kernel size
    ``ks``: x fastest, or the default when the two orders coincide (two
    axes of size 1), so that such maps stay shared with native layers."""
    return _lib.OFFSET_ORDER_X_SLOWEST if _me_to_voxconv_perm(ks)[1] \
        else _lib.OFFSET_ORDER_X_FASTEST


def _me_padding(ks, dl, group):
    """Per-axis padding P (voxconv's off(j) = j*d - P) giving ME's offsets:
    odd k centred, even k from 0; ``group`` (pooling, kernel == stride):
    0 (ME's stride map puts each input in its floor(c/s) cell)."""
    return tuple(0 if (group or k % 2 == 0) else (k // 2) * d for k, d in zip(ks, dl))


def _native_padding(ks, dl):
    return tuple(((k - 1) // 2) * d for k, d in zip(ks, dl))


_padding_cache = {}


def _layer_padding(ks, dl, group):
    """(P, default): ME's per-axis padding (``_me_padding``) and whether it
    is voxconv's default (then the map is asked for without ``padding=``,
    so its cache key is the native layers'). Computed once per geometry."""
    key = (ks, dl, group)
    try:
        return _padding_cache[key]
    except (KeyError, TypeError):  # TypeError: lists in a hand-edited KernelGenerator
        P = _me_padding(ks, dl, group)
        r = (P, P == _native_padding(ks, dl))
        if type(ks) is tuple and type(dl) is tuple:
            _padding_cache[key] = r
        return r


# ---- coordinate manager and keys -------------------------------------------------

class CoordinateMapKey:
    """Names one coordinate set of a manager: ``get_tensor_stride()``,
    ``get_key()`` ((tensor_stride, string id)). Equal keys are the same set."""

    __slots__ = ("_set", "_id", "_scaled", "__weakref__")

    def __init__(self, coord_set, ident):
        self._set = coord_set
        self._id = ident
        self._scaled = None

    def get_tensor_stride(self):
        return list(self._set.tensor_stride)

    def get_coordinate_size(self):
        return 4

    def get_key(self):
        return (self.get_tensor_stride(), self._id)

    def is_key_set(self):
        return True

    def __eq__(self, other):
        return isinstance(other, CoordinateMapKey) and other._set is self._set

    def __hash__(self):
        return id(self._set)

    def __repr__(self):
        return f"coordinate map key:[{self.get_tensor_stride()}, {self._id!r}]"


class CoordinateManager:
    """ME's coordinate manager: one per input (and the tensors derived from
    it). Wraps voxconv's :class:`voxconv.kmap.CoordinateManager`
    (``.native``), which caches the kernel maps."""

    def __init__(self, D=3, device="cpu", coordinate_map_type=None, allocator_type=None,
                 minkowski_algorithm=None, *, native=None):
        if D != 3:
            raise errors.InvalidArgumentError(f"voxconv is 3-D only (D={D})")
        from ..kmap import CoordinateManager as _Native
        self.D = 3
        self.native = native if native is not None else _Native(device)
        self._keys = {}

    @property
    def device(self):
        return self.native.device

    def _key(self, coord_set):
        k = self._keys.get(id(coord_set))
        if k is None or k._set is not coord_set:
            k = self._keys[id(coord_set)] = CoordinateMapKey(coord_set, str(len(self._keys)))
        return k

    def get_coordinates(self, key):
        return _scaled_coords(key)

    def size(self, key):
        return len(key._set)

    def stride(self, key, stride):
        raise NotImplementedError("CoordinateManager.stride: use a strided layer")

    def number_of_unique_batch_indices(self):
        s = self.native.sets[0].coords if self.native.sets else None
        return 0 if s is None or not len(s) else int(torch.unique(s[:, 0]).numel())

    def __repr__(self):
        return f"CoordinateManager(voxconv, {len(self.native.sets)} sets, {self.device})"


def _scaled_coords(key):
    c = key._scaled
    if c is None:
        s = key._set
        c = s.coords.clone()
        ts = s.tensor_stride
        # multiplied by Python ints: a stride tensor made on the device per
        # key was a host-to-device copy (a wait for the GPU's queue)
        if ts[0] == ts[1] == ts[2]:
            if ts[0] != 1:
                c[:, 1:] *= ts[0]
        else:
            for a in range(3):
                if ts[a] != 1:
                    c[:, 1 + a] *= ts[a]
        key._scaled = c
    return c


# ---- quantization helpers --------------------------------------------------------

def _scatter_reduce(dst, index, src, reduce, include_self):
    with warnings.catch_warnings():  # torch 1.13 calls scatter_reduce "beta"
        warnings.filterwarnings("ignore", message=".*scatter_reduce.*")
        return dst.scatter_reduce(0, index, src, reduce=reduce, include_self=include_self)


def _merge_level(level):
    """voxconv_merge_duplicates of int32 [N, 4] contiguous coordinates:
    (a [N, 4] buffer whose first n_unique rows are the unique rows sorted
    by (b, x, y, z), n_unique, row_map int64 [N]). voxconv.merge_duplicates
    without its copy of the unique rows (unused when there are no
    duplicates) and its range check in Python before the call (the library
    checks the same ranges): that check runs only when the library refuses
    the coordinates, so that the error reads as merge_duplicates's does."""
    n = level.shape[0]
    dev = level.device
    out = torch.empty((n, 4), dtype=torch.int32, device=dev)
    row_map = torch.empty(n, dtype=torch.int64, device=dev)
    if n == 0:
        return out, 0, row_map
    n_unique = ctypes.c_int64(0)
    c = _runtime.coords_struct(level, (1, 1, 1))
    try:
        _runtime.handle_for(dev).call(
            "voxconv_merge_duplicates", ctypes.byref(c), _runtime.ptr(out),
            ctypes.byref(n_unique), _runtime.ptr(row_map))
    except errors.OutOfRangeError:
        _validate.coords(level, "merge_duplicates")  # raises where it checks on the host
        raise
    return out, n_unique.value, row_map


def _first_occurrence_unique(level_coords):
    """(unique int32 [U, 4] in order of first occurrence, unique_index int64
    [U] (the first row of each), inverse_mapping int64 [N]); None for the
    last two when the rows are already unique (input order kept).
    ``level_coords``: int32 [N, 4], contiguous."""
    out, u, row_map = _merge_level(level_coords)
    n = level_coords.shape[0]
    if u == n:
        return level_coords, None, None
    uniq = out[:u]
    rows = torch.arange(n, device=row_map.device)
    first = torch.full((u,), n, dtype=torch.long, device=row_map.device)
    first = _scatter_reduce(first, row_map, rows, "amin", True)
    order = torch.argsort(first)  # ME inserts rows in input order
    rank = torch.empty_like(order)
    rank[order] = torch.arange(u, device=order.device)
    return uniq[order].contiguous(), first[order], rank[row_map]


def _reduce_features(features, unique_index, inverse, u, mode):
    if mode in (SparseTensorQuantizationMode.RANDOM_SUBSAMPLE,
                SparseTensorQuantizationMode.NO_QUANTIZATION):
        return features[unique_index]
    if mode == SparseTensorQuantizationMode.MAX_POOL:
        idx = inverse[:, None].expand(-1, features.shape[1])
        return _scatter_reduce(features.new_zeros((u, features.shape[1])), idx, features,
                               "amax", False)
    s = features.new_zeros((u, features.shape[1])).index_add(0, inverse, features)
    if mode == SparseTensorQuantizationMode.UNWEIGHTED_SUM:
        return s
    cnt = torch.bincount(inverse, minlength=u).to(features.dtype)
    return s / cnt[:, None]


def _to_level(coords, ts, where):
    """Scaled ME coordinates -> int32 level indices (exact multiples of ts
    required, as ME's coordinates at tensor stride ts are)."""
    if not isinstance(coords, torch.Tensor):
        coords = torch.as_tensor(np.asarray(coords))
    if coords.dim() != 2 or coords.shape[1] != 4:
        raise errors.ShapeMismatchError(
            f"{where}: coordinates must be [N, 4] (batch, x, y, z), got {tuple(coords.shape)}")
    if ts == (1, 1, 1) and not coords.is_floating_point():
        # integers at stride 1 need only the int32 conversion (the same
        # values as through int64; no copy when they are int32 already)
        return _narrow(coords, where)
    if coords.is_floating_point():
        coords = torch.floor(coords)
    coords = coords.long()
    if ts != (1, 1, 1):
        t = torch.tensor(ts, dtype=torch.long, device=coords.device)
        if bool((coords[:, 1:] % t != 0).any()):
            raise errors.InvalidArgumentError(
                f"{where}: coordinates at tensor_stride {list(ts)} must be multiples of it")
        coords = torch.cat([coords[:, :1], torch.div(coords[:, 1:], t, rounding_mode="floor")],
                           1)
    return _narrow(coords, where)


def _narrow(coords, where):
    """int32 contiguous level coordinates. Wider integers are range-checked
    first, as voxconv.SparseTensor does: a value int32 cannot hold (2**32 +
    5) would otherwise wrap into a valid one (5) silently. int32 rows are
    checked by the library (merge_duplicates, map builds)."""
    if coords.dtype not in (torch.int32, torch.int16, torch.int8, torch.uint8) \
            and coords.numel():
        _validate.check_coord_rows(coords, where)
    return coords.to(torch.int32).contiguous()


# ---- SparseTensor ----------------------------------------------------------------

def _feats_of(x):
    return x.F if isinstance(x, (SparseTensor, TensorField)) else x


class SparseTensor:
    """ME's SparseTensor over a :class:`voxconv.SparseTensor` (``.native``).

    ``SparseTensor(features, coordinates, tensor_stride=1)`` with coordinates
    ``(batch, x, y, z)`` scaled by the tensor stride, or
    ``SparseTensor(features, coordinate_map_key=k, coordinate_manager=m)``
    on an existing set. Duplicate coordinates are quantized with
    ``quantization_mode`` (RANDOM_SUBSAMPLE keeps the first point of each
    voxel; UNWEIGHTED_AVERAGE / UNWEIGHTED_SUM / MAX_POOL reduce); rows stay
    in input order (first occurrence), as ME's hash insertion leaves them.
    """

    def __init__(self, features, coordinates=None, tensor_stride=1, coordinate_map_key=None,
                 coordinate_manager=None,
                 quantization_mode=SparseTensorQuantizationMode.RANDOM_SUBSAMPLE,
                 allocator_type=None, minkowski_algorithm=None, requires_grad=None,
                 device=None):
        if not isinstance(features, torch.Tensor) or features.dim() != 2:
            raise errors.ShapeMismatchError("features must be a [N, C] torch.Tensor")
        if device is not None:
            features = features.to(device)
            if coordinates is not None:
                coordinates = coordinates.to(device)
        self.quantization_mode = quantization_mode
        self.unique_index = self.inverse_mapping = None
        if coordinate_map_key is not None:
            if coordinates is not None:
                raise errors.InvalidArgumentError(
                    "give coordinates or coordinate_map_key, not both")
            if coordinate_manager is None:
                raise errors.InvalidArgumentError(
                    "coordinate_map_key needs its coordinate_manager")
            self._manager = coordinate_manager
            native = _NativeSparseTensor(features, None, _coord_set=coordinate_map_key._set)
        else:
            if coordinates is None:
                raise errors.InvalidArgumentError("coordinates or coordinate_map_key required")
            ts = _triple(tensor_stride, "tensor_stride")
            level = _to_level(coordinates.to(features.device), ts, "SparseTensor")
            if features.shape[0] != level.shape[0]:
                raise errors.ShapeMismatchError(
                    f"features has {features.shape[0]} rows, coordinates {level.shape[0]}")
            level, uidx, inv = _first_occurrence_unique(level)
            if uidx is not None:
                features = _reduce_features(features, uidx, inv, level.shape[0],
                                            quantization_mode)
                self.unique_index, self.inverse_mapping = uidx, inv
            if coordinate_manager is None:
                coordinate_manager = CoordinateManager(device=features.device)
            self._manager = coordinate_manager
            native = _native_on_checked(features, level, ts, coordinate_manager.native)
        if requires_grad is not None:
            native.feats.requires_grad_(requires_grad)
        self.native = native

    @classmethod
    def _wrap(cls, native, manager):
        t = object.__new__(cls)
        t.native = native
        t._manager = manager
        t.quantization_mode = SparseTensorQuantizationMode.RANDOM_SUBSAMPLE
        t.unique_index = t.inverse_mapping = None
        return t

    def _like(self, feats):
        return SparseTensor._wrap(_NativeSparseTensor._wrap(feats, self.native._set),
                                  self._manager)

    # -- ME's attributes ---------------------------------------------------------
    @property
    def F(self):
        return self.native.feats

    @F.setter
    def F(self, value):
        self.native.feats = value

    features = F

    @property
    def C(self):
        return _scaled_coords(self.coordinate_map_key)

    coordinates = C

    @property
    def tensor_stride(self):
        return list(self.native.tensor_stride)

    @property
    def coordinate_map_key(self):
        return self._manager._key(self.native._set)

    @property
    def coordinate_manager(self):
        return self._manager

    @property
    def D(self):
        return 3

    @property
    def dimension(self):
        return 3

    @property
    def device(self):
        return self.native.feats.device

    @property
    def dtype(self):
        return self.native.feats.dtype

    @property
    def shape(self):
        return self.native.feats.shape

    @property
    def requires_grad(self):
        return self.native.feats.requires_grad

    def size(self, *args):
        return self.native.feats.size(*args)

    def __len__(self):
        return self.native.feats.shape[0]

    def __repr__(self):
        return (f"SparseTensor(voxconv; n={len(self)}, channels={self.F.shape[1]}, "
                f"tensor_stride={self.tensor_stride}, dtype={self.dtype}, device={self.device})")

    @property
    def decomposition_permutations(self):
        b = self.native.coords[:, 0]
        return [torch.nonzero(b == i).squeeze(1) for i in torch.unique(b).tolist()]

    @property
    def decomposed_coordinates(self):
        c = self.C
        return [c[p, 1:] for p in self.decomposition_permutations]

    @property
    def decomposed_features(self):
        return [self.F[p] for p in self.decomposition_permutations]

    def decomposed_coordinates_and_features(self):
        ps = self.decomposition_permutations
        return [self.C[p, 1:] for p in ps], [self.F[p] for p in ps]

    def detach(self):
        return self._like(self.F.detach())

    def requires_grad_(self, flag=True):
        self.F.requires_grad_(flag)
        return self

    def to(self, *args, **kwargs):
        f = self.F.to(*args, **kwargs)
        if f.device == self.device:
            return self._like(f)
        return SparseTensor(f, self.C.to(f.device), self.tensor_stride)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to(device if device is not None else "cuda")

    def double(self):
        return self.to(torch.float64)

    def float(self):
        return self.to(torch.float32)

    def half(self):
        return self.to(torch.float16)

    def dense(self, shape=None, min_coordinate=None, contract_stride=True):
        """(dense ``[B, C, X, Y, Z]``, min_coordinate (scaled, int [3]),
        tensor_stride) as ME's ``dense``: with ``contract_stride`` (default)
        one cell per voxel of this stride. ``shape``: ME's full
        ``torch.Size([B, C, X, Y, Z])``."""
        if not contract_stride:
            raise NotImplementedError("dense(contract_stride=False)")
        ts = torch.tensor(self.tensor_stride, dtype=torch.int32)
        if min_coordinate is None:
            lvl_min = (self.native.coords[:, 1:].min(0).values.cpu() if len(self)
                       else torch.zeros(3, dtype=torch.int32))
        else:
            mc = torch.as_tensor(min_coordinate).to(torch.int32).cpu()
            if bool((mc % ts != 0).any()):
                raise errors.InvalidArgumentError("min_coordinate must be a multiple of "
                                                  "the tensor stride")
            lvl_min = mc // ts
        kw = {}
        if shape is not None:
            kw = {"batch_size": int(shape[0]), "spatial_shape": tuple(int(v) for v in shape[2:])}
        d = self.native.dense(min_coordinate=tuple(lvl_min.tolist()), **kw)
        return d, lvl_min * ts, self.tensor_stride

    def features_at_coordinates(self, query_coordinates):
        """Features at (scaled, possibly float) query coordinates; zero rows
        where no voxel is there."""
        idx = _lookup(self, query_coordinates)
        out = self.F.new_zeros((idx.shape[0], self.F.shape[1]))
        ok = idx >= 0
        out[ok] = self.F[idx[ok]]
        return out

    def slice(self, X):
        """ME's ``Y.slice(X)``: a TensorField on X's points whose features are
        this tensor's at the voxel holding each point (at this tensor's
        stride; zeros where none)."""
        if not isinstance(X, TensorField):
            raise TypeError("slice: expected a TensorField")
        idx = X._inverse_mapping.get(self.coordinate_map_key)
        if idx is None:
            idx = _lookup(self, X.C)
        f = self.F[idx.clamp(min=0)]
        if bool((idx < 0).any()):
            f = f * (idx >= 0)[:, None].to(f.dtype)
        return TensorField(f, coordinate_field_map_key=X.coordinate_field_map_key,
                           coordinate_manager=X.coordinate_manager,
                           quantization_mode=X.quantization_mode)

    def sparse(self):
        return self

    # -- arithmetic (same coordinates; see voxconv.SparseTensor) -----------------
    def _other(self, other):
        return other.native if isinstance(other, SparseTensor) else other

    def __add__(self, other):
        return SparseTensor._wrap(self.native + self._other(other), self._manager)

    __radd__ = __add__

    def __sub__(self, other):
        return SparseTensor._wrap(self.native - self._other(other), self._manager)

    def __rsub__(self, other):
        return SparseTensor._wrap(self._other(other) - self.native, self._manager)

    def __neg__(self):
        return self._like(-self.F)

    def __mul__(self, other):
        if isinstance(other, SparseTensor):
            _check_same(self, other, "SparseTensor *")
            return self._like(self.F * other.F)
        return self._like(self.F * other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, SparseTensor):
            _check_same(self, other, "SparseTensor /")
            return self._like(self.F / other.F)
        return self._like(self.F / other)

    def __iadd__(self, other):
        self.native += self._other(other)
        return self

    def __isub__(self, other):
        self.native -= self._other(other)
        return self


def _native_on_checked(features, level, ts, mgr):
    """``voxconv.SparseTensor(features, level, ts, manager=mgr)`` for
    coordinates that _merge_level has range-checked: the constructor's
    checks, in its order and with its messages, less its second pass over
    the coordinates (on the CPU two reductions and a host read)."""
    _runtime.dtype_code(features.dtype, "feats")
    ts = _validate.int_triple(ts, "tensor_stride")
    if mgr.device != features.device:
        raise errors.InvalidArgumentError(
            f"manager is for {mgr.device} but features are on {features.device}")
    return _NativeSparseTensor(features, None, _coord_set=mgr.add(level, ts, _checked=True))


def _check_same(a, b, what):
    from ..tensor import _check_same_coordinates
    _check_same_coordinates(a.native, b.native, what)


def _lookup(st, query):
    """Row of `st` holding each query point (scaled coordinates, floored to
    st's stride), -1 where none. Sorted keys + searchsorted."""
    q = query
    if q.is_floating_point():
        q = torch.floor(q)
    q = q.long().to(st.device)
    ts = torch.tensor(st.tensor_stride, dtype=torch.long, device=q.device)
    ql = torch.cat([q[:, :1], torch.div(q[:, 1:], ts, rounding_mode="floor")], 1)
    c = st.native.coords.long()
    if not len(c) or not len(ql):
        return torch.full((ql.shape[0],), -1, dtype=torch.long, device=q.device)
    both = torch.cat([c, ql], 0)
    lo = both.min(0).values
    span = both.max(0).values - lo + 1

    def lin(x):
        x = x - lo
        return ((x[:, 0] * span[1] + x[:, 1]) * span[2] + x[:, 2]) * span[3] + x[:, 3]
    kc, kq = lin(c), lin(ql)
    order = torch.argsort(kc)
    ks = kc[order]
    pos = torch.searchsorted(ks, kq).clamp(max=len(ks) - 1)
    found = ks[pos] == kq
    return torch.where(found, order[pos], torch.full_like(pos, -1))


def cat(*sparse_tensors):
    """ME.cat: features concatenated; all on the same coordinates."""
    if len(sparse_tensors) == 1 and isinstance(sparse_tensors[0], (list, tuple)):
        sparse_tensors = tuple(sparse_tensors[0])
    from ..tensor import cat as _native_cat
    first = sparse_tensors[0]
    return SparseTensor._wrap(_native_cat([t.native for t in sparse_tensors]), first._manager)


# ---- TensorField -----------------------------------------------------------------

class TensorField:
    """ME's TensorField: per-point features at continuous coordinates
    ``(batch, x, y, z)`` (in voxel units). ``.sparse(tensor_stride=1)``
    quantizes (``floor(c / ts)``) with ``quantization_mode`` (default
    UNWEIGHTED_AVERAGE; RANDOM_SUBSAMPLE keeps the first point of each
    voxel, UNWEIGHTED_SUM, MAX_POOL); ``sparse_tensor.slice(field)`` maps
    voxel features back to the points."""

    def __init__(self, features, coordinates=None, tensor_stride=1,
                 coordinate_field_map_key=None, coordinate_manager=None,
                 quantization_mode=SparseTensorQuantizationMode.UNWEIGHTED_AVERAGE,
                 allocator_type=None, minkowski_algorithm=None, requires_grad=None,
                 device=None):
        if device is not None:
            features = features.to(device)
            if coordinates is not None:
                coordinates = coordinates.to(device)
        if coordinates is None:
            if coordinate_field_map_key is None:
                raise errors.InvalidArgumentError(
                    "coordinates or (coordinate_field_map_key, coordinate_manager) required")
            coordinates = coordinate_field_map_key._coords
        else:
            if coordinates.dim() != 2 or coordinates.shape[1] != 4:
                raise errors.ShapeMismatchError("coordinates must be [N, 4]")
            if coordinates.shape[0] != features.shape[0]:
                raise errors.ShapeMismatchError("features and coordinates differ in rows")
            coordinate_field_map_key = _FieldKey(coordinates.to(features.device),
                                                 _triple(tensor_stride, "tensor_stride"))
        if coordinate_manager is None:
            coordinate_manager = CoordinateManager(device=features.device)
        if requires_grad is not None:
            features.requires_grad_(requires_grad)
        self._F = features
        self.coordinate_field_map_key = coordinate_field_map_key
        self._manager = coordinate_manager
        self.quantization_mode = quantization_mode
        self._inverse_mapping = {}

    @property
    def F(self):
        return self._F

    features = F

    @property
    def C(self):
        return self.coordinate_field_map_key._coords

    coordinates = C

    @property
    def coordinate_manager(self):
        return self._manager

    @property
    def tensor_stride(self):
        return list(self.coordinate_field_map_key._ts)

    @property
    def device(self):
        return self._F.device

    @property
    def D(self):
        return 3

    def __len__(self):
        return self._F.shape[0]

    def sparse(self, tensor_stride=1, coordinate_map_key=None, quantization_mode=None):
        mode = quantization_mode or self.quantization_mode
        if coordinate_map_key is not None:
            st = SparseTensor._wrap(
                _NativeSparseTensor._wrap(self._F.new_zeros((0, 0)), coordinate_map_key._set),
                self._manager)
            inv = _lookup(st, self.C)
            if bool((inv < 0).any()):
                raise errors.InvalidArgumentError(
                    "sparse(coordinate_map_key=...): some points lie outside that set")
            u = len(coordinate_map_key._set)
            feats = _reduce_features(self._F, None, inv, u, mode) if mode not in (
                SparseTensorQuantizationMode.RANDOM_SUBSAMPLE,
                SparseTensorQuantizationMode.NO_QUANTIZATION) else None
            if feats is None:
                rows = torch.arange(len(inv), device=inv.device)
                first = torch.full((u,), len(inv), dtype=torch.long, device=inv.device)
                first = _scatter_reduce(first, inv, rows, "amin", True)
                feats = self._F[first.clamp(max=max(len(inv) - 1, 0))]
            out = SparseTensor(feats, coordinate_map_key=coordinate_map_key,
                               coordinate_manager=self._manager)
            self._inverse_mapping[coordinate_map_key] = inv
            return out
        ts = _triple(tensor_stride, "tensor_stride")
        c = torch.floor(self.C.double()) if self.C.is_floating_point() else self.C.long()
        c = c.long()
        t = torch.tensor(ts, dtype=torch.long, device=c.device)
        level = torch.cat([c[:, :1], torch.div(c[:, 1:], t, rounding_mode="floor")], 1)
        level = _validate.coords(level, "TensorField.sparse", device=self._F.device)
        level, uidx, inv = _first_occurrence_unique(level)
        feats = self._F
        if uidx is not None:
            feats = _reduce_features(feats, uidx, inv, level.shape[0], mode)
        else:
            inv = torch.arange(level.shape[0], device=level.device)
        native = _NativeSparseTensor(feats, level, ts, manager=self._manager.native)
        out = SparseTensor._wrap(native, self._manager)
        self._inverse_mapping[out.coordinate_map_key] = inv
        return out

    def inverse_mapping(self, sparse_tensor_map_key):
        return self._inverse_mapping[sparse_tensor_map_key]

    def __repr__(self):
        return f"TensorField(voxconv; n={len(self)}, channels={self._F.shape[1]})"


class _FieldKey:
    __slots__ = ("_coords", "_ts")

    def __init__(self, coords, ts):
        self._coords, self._ts = coords, ts

    def get_tensor_stride(self):
        return list(self._ts)


# ---- modules -----------------------------------------------------------------------

class MinkowskiModuleBase(nn.Module):
    pass


class MinkowskiNetwork(nn.Module):
    """ME's abstract network base (``self.D``)."""

    def __init__(self, D):
        super().__init__()
        self.D = D

    def forward(self, x):
        raise NotImplementedError


class KernelGenerator:
    """The geometry of a convolution or pooling layer (HYPER_CUBE only)."""

    def __init__(self, kernel_size=-1, stride=1, dilation=1, is_transpose=False,
                 region_type=RegionType.HYPER_CUBE, region_offsets=None,
                 expand_coordinates=False, axis_types=None, dimension=-1):
        if dimension not in (3, -1, None):
            raise errors.InvalidArgumentError(f"voxconv is 3-D only (dimension={dimension})")
        if region_type != RegionType.HYPER_CUBE or region_offsets is not None:
            raise NotImplementedError("only region_type HYPER_CUBE is supported")
        self.kernel_size = _triple(kernel_size, "kernel_size")
        self.kernel_stride = _triple(stride, "stride")
        self.kernel_dilation = _triple(dilation, "dilation")
        self.region_type = region_type
        self.expand_coordinates = bool(expand_coordinates)
        self.dimension = 3
        k = self.kernel_size
        self.kernel_volume = k[0] * k[1] * k[2]
        self.requires_strided_coordinates = self.kernel_stride == (1, 1, 1)

    def __repr__(self):
        return (f"KernelGenerator(kernel_size={list(self.kernel_size)}, "
                f"stride={list(self.kernel_stride)}, dilation={list(self.kernel_dilation)})")


_CFG = (None, None, None, _lib.UNSET, _lib.UNSET)


def _check_dimension(dimension):
    if dimension is not None and dimension != 3:
        raise errors.InvalidArgumentError(
            f"voxconv is 3-D only: dimension={dimension} (ME's D argument must be 3)")


def _conv_map(x, kg, transposed, generative, expand, out_target, group=False, order=0):
    """(kmap, out coordinate set) of an ME layer on x (compat SparseTensor).
    ``order``: the map's offset_order (convolutions ask for ME's, see
    _offset_order; pooling has no weights and keeps the default)."""
    native = x.native
    in_set = native._set
    mgr = in_set.manager
    ks, st, dl = kg.kernel_size, kg.kernel_stride, kg.kernel_dilation
    P, default = _layer_padding(ks, dl, group)
    if transposed:
        if generative or expand:
            mode, out_set = _lib.KMAP_GENERATIVE, None
        else:
            ts = native.tensor_stride
            if any(t % s for t, s in zip(ts, st)):
                raise errors.InvalidArgumentError(
                    f"transposed: tensor_stride {list(ts)} is not divisible by the stride "
                    f"{list(st)}")
            fine = tuple(t // s for t, s in zip(ts, st))
            if out_target is not None:
                out_set = out_target
            else:
                out_set = mgr.at_stride(fine)
            mode = _lib.KMAP_TRANSPOSED if out_set is not None else _lib.KMAP_GENERATIVE
    else:
        if out_target is not None:
            if st == (1, 1, 1) and not expand and out_target is in_set:
                out_target = None
            else:
                raise NotImplementedError(
                    "MinkowskiConvolution onto given coordinates (other than the input's, "
                    "stride 1) has no voxconv mode")
        out_set = None
        if expand:
            if any(k % 2 == 0 for k in ks):
                raise NotImplementedError(
                    "expand_coordinates=True with an even kernel: ME's output set {c + j} "
                    "is not the set its pairs reach (see voxconv.compat.minkowski's doc)")
            mode = _KMAP_EXPANDING
        else:
            mode = _lib.KMAP_SUBMANIFOLD if st == (1, 1, 1) else _lib.KMAP_STRIDED
    if default:
        return mgr.kernel_map(in_set, mode, ks, st, dl, out_set, order=order)
    return mgr.kernel_map(in_set, mode, ks, st, dl, out_set, padding=P, order=order)


def _target_set(x, coordinates):
    """ME's ``coordinates=`` argument of a layer as a voxconv coordinate set."""
    if coordinates is None:
        return None
    if isinstance(coordinates, SparseTensor):
        return coordinates.native.coordinate_set
    if isinstance(coordinates, CoordinateMapKey):
        return coordinates._set
    raise NotImplementedError("coordinates= as a tensor: pass a SparseTensor or its "
                              "coordinate_map_key")


class MinkowskiConvolutionBase(MinkowskiModuleBase):
    def __init__(self, in_channels, out_channels, kernel_size=-1, stride=1, dilation=1,
                 bias=False, kernel_generator=None, is_transpose=False,
                 expand_coordinates=False, convolution_mode=None, dimension=None,
                 generative=False):
        super().__init__()
        _check_dimension(dimension)
        if kernel_generator is None:
            kernel_generator = KernelGenerator(kernel_size, stride, dilation,
                                               expand_coordinates=expand_coordinates,
                                               dimension=3)
        else:
            kernel_generator.expand_coordinates = bool(expand_coordinates)
        self.kernel_generator = kernel_generator
        self.is_transpose = bool(is_transpose)
        self.generative = bool(generative)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.dimension = 3
        self.use_mm = (kernel_generator.kernel_volume == 1
                       and kernel_generator.requires_strided_coordinates)
        shape = ((self.in_channels, self.out_channels) if self.use_mm else
                 (kernel_generator.kernel_volume, self.in_channels, self.out_channels))
        self.kernel = nn.Parameter(torch.empty(shape))
        self.bias = nn.Parameter(torch.empty(1, self.out_channels)) if bias else None
        self.reset_parameters(self.is_transpose)

    def reset_parameters(self, is_transpose=False):
        n = ((self.out_channels if is_transpose else self.in_channels)
             * self.kernel_generator.kernel_volume)
        stdv = 1.0 / math.sqrt(n)
        with torch.no_grad():
            self.kernel.uniform_(-stdv, stdv)
            if self.bias is not None:
                self.bias.uniform_(-stdv, stdv)

    @_ops.outside_compile
    def forward(self, input, coordinates=None):
        if not isinstance(input, SparseTensor):
            raise TypeError(f"{type(self).__name__}: expected a "
                            f"voxconv.compat.minkowski.SparseTensor, got {type(input).__name__}")
        kg = self.kernel_generator
        x = input.native
        if self.use_mm and coordinates is None and not self.generative:
            feats, w, _ = _F._autocast(x.feats, self.kernel, None)
            out = _NativeSparseTensor._wrap(feats.mm(w), x._set)
        else:
            ks = kg.kernel_size
            if type(ks) is not tuple:  # a KernelGenerator changed by hand
                ks = _triple(ks, "kernel_size")
            # The map numbers its offsets as ME does: the kernel is read as
            # stored, no reordered copy (and no gradient reorder) ever.
            km, out_set = _conv_map(input, kg, self.is_transpose, self.generative,
                                    kg.expand_coordinates, _target_set(input, coordinates),
                                    order=_offset_order(ks))
            w = self.kernel.unsqueeze(0) if self.use_mm else self.kernel
            feats, w, _ = _F._autocast(x.feats, w, None)
            if w.dtype != feats.dtype:
                raise errors.DtypeMismatchError(
                    f"kernel has dtype {w.dtype} but the features have {feats.dtype}")
            out = _NativeSparseTensor._wrap(_ops.conv(feats, w, km, *_CFG), out_set)
        if self.bias is not None:
            out.feats = out.feats + self.bias
        return SparseTensor._wrap(out, input._manager)

    def extra_repr(self):
        kg = self.kernel_generator
        return (f"in={self.in_channels}, out={self.out_channels}, "
                f"kernel_size={list(kg.kernel_size)}, stride={list(kg.kernel_stride)}, "
                f"dilation={list(kg.kernel_dilation)}")


class MinkowskiConvolution(MinkowskiConvolutionBase):
    """ME's convolution: stride 1 keeps the input's coordinates; stride s
    > 1 gives ``unique(floor(c / s))``; ``expand_coordinates=True`` every
    cell the kernel reaches (odd kernels). Bias off by default."""

    def __init__(self, in_channels, out_channels, kernel_size=-1, stride=1, dilation=1,
                 bias=False, kernel_generator=None, expand_coordinates=False,
                 convolution_mode=None, dimension=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, dilation, bias,
                         kernel_generator, False, expand_coordinates, convolution_mode,
                         dimension)


class MinkowskiConvolutionTranspose(MinkowskiConvolutionBase):
    """Upsampling onto the coordinates the manager already has at the finer
    stride (the encoder's), or ``coordinates=`` (a SparseTensor or key);
    generated as ME does (every ``s*c + offset``) when there are none."""

    def __init__(self, in_channels, out_channels, kernel_size=-1, stride=1, dilation=1,
                 bias=False, kernel_generator=None, expand_coordinates=False,
                 convolution_mode=None, dimension=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, dilation, bias,
                         kernel_generator, True, expand_coordinates, convolution_mode,
                         dimension)


class MinkowskiGenerativeConvolutionTranspose(MinkowskiConvolutionBase):
    """Upsampling onto every cell ``s*c + offset`` (voxconv GENERATIVE)."""

    def __init__(self, in_channels, out_channels, kernel_size=-1, stride=1, dilation=1,
                 bias=False, kernel_generator=None, convolution_mode=None, dimension=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, dilation, bias,
                         kernel_generator, True, True, convolution_mode, dimension,
                         generative=True)


class _MinkowskiPooling(MinkowskiModuleBase):
    _mode = None

    def __init__(self, kernel_size=-1, stride=1, dilation=1, kernel_generator=None,
                 dimension=None):
        super().__init__()
        _check_dimension(dimension)
        if kernel_generator is None:
            kernel_generator = KernelGenerator(kernel_size, stride, dilation, dimension=3)
        self.kernel_generator = kernel_generator
        self.dimension = 3

    @_ops.outside_compile
    def forward(self, input, coordinates=None):
        if coordinates is not None:
            raise NotImplementedError("pooling onto given coordinates")
        kg = self.kernel_generator
        group = kg.kernel_size == kg.kernel_stride and kg.kernel_stride != (1, 1, 1)
        km, out_set = _conv_map(input, kg, False, False, False, None, group=group)
        y = _ops.pool(input.F, km, self._mode)
        return SparseTensor._wrap(_NativeSparseTensor._wrap(y, out_set), input._manager)

    def extra_repr(self):
        kg = self.kernel_generator
        return (f"kernel_size={list(kg.kernel_size)}, stride={list(kg.kernel_stride)}, "
                f"dilation={list(kg.kernel_dilation)}")


class MinkowskiMaxPooling(_MinkowskiPooling):
    _mode = _lib.POOL_MAX


class MinkowskiAvgPooling(_MinkowskiPooling):
    """Mean over the inputs present in each output's neighbourhood."""
    _mode = _lib.POOL_AVG


class MinkowskiSumPooling(_MinkowskiPooling):
    _mode = _lib.POOL_SUM


class GlobalPoolingMode(enum.Enum):
    AUTO = 0
    INDEX_SELECT = 1
    SPARSE = 2


class MinkowskiGlobalPooling(MinkowskiModuleBase):
    """Per batch item reduction: a SparseTensor with one row per batch
    index (coordinates ``(b, 0, 0, 0)``). ME's MinkowskiGlobalPooling
    averages."""
    _reduce = "mean"

    def __init__(self, mode=GlobalPoolingMode.AUTO):
        super().__init__()
        self.pooling_mode = mode

    @_ops.outside_compile
    def forward(self, input, coordinates=None):
        x = input.native
        fn = {"mean": _F.global_avg_pool, "max": _F.global_max_pool,
              "sum": _F.global_sum_pool}[self._reduce]
        y = fn(x)
        b = torch.unique(x.coords[:, 0].long()) if len(x) else x.coords.new_zeros(0).long()
        y = y[b]
        coords = torch.zeros((len(b), 4), dtype=torch.int32, device=y.device)
        coords[:, 0] = b.to(torch.int32)
        mgr = x.manager
        s = mgr.add(coords, x.tensor_stride, register=False)
        return SparseTensor._wrap(_NativeSparseTensor._wrap(y, s), input._manager)


class MinkowskiGlobalAvgPooling(MinkowskiGlobalPooling):
    _reduce = "mean"


class MinkowskiGlobalSumPooling(MinkowskiGlobalPooling):
    _reduce = "sum"


class MinkowskiGlobalMaxPooling(MinkowskiGlobalPooling):
    _reduce = "max"


class MinkowskiBatchNorm(MinkowskiModuleBase):
    """``self.bn`` = torch.nn.BatchNorm1d over the features (ME's keys)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__()
        self.bn = nn.BatchNorm1d(num_features, eps=eps, momentum=momentum, affine=affine,
                                 track_running_stats=track_running_stats)

    def forward(self, input):
        return input._like(self.bn(input.F))


class MinkowskiSyncBatchNorm(MinkowskiBatchNorm):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None):
        MinkowskiModuleBase.__init__(self)
        self.bn = nn.SyncBatchNorm(num_features, eps=eps, momentum=momentum, affine=affine,
                                   track_running_stats=track_running_stats,
                                   process_group=process_group)


class MinkowskiInstanceNorm(MinkowskiModuleBase):
    """Per batch item: (x - mean) / sqrt(var + eps) over its voxels, then
    ``* weight + bias`` (``[1, C]`` each, ME's names)."""

    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(1, num_features))
        self.bias = nn.Parameter(torch.zeros(1, num_features))

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.fill_(1)
            self.bias.zero_()

    def forward(self, input):
        f = input.F
        b = input.native.coords[:, 0].long()
        nb = int(b.max()) + 1 if len(b) else 0
        cnt = torch.bincount(b, minlength=nb).to(f.dtype).clamp(min=1)[:, None]
        mean = f.new_zeros((nb, f.shape[1])).index_add(0, b, f) / cnt
        d = f - mean[b]
        var = f.new_zeros((nb, f.shape[1])).index_add(0, b, d * d) / cnt
        y = d / torch.sqrt(var[b] + self.eps)
        return input._like(y * self.weight + self.bias)


class MinkowskiNonlinearityBase(MinkowskiModuleBase):
    MODULE = None

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.module = self.MODULE(*args, **kwargs)

    def forward(self, input):
        if type(input) is SparseTensor:  # the common case first
            return input._like(self.module(input.native.feats))
        out = self.module(_feats_of(input))
        if isinstance(input, TensorField):
            return TensorField(out, coordinate_field_map_key=input.coordinate_field_map_key,
                               coordinate_manager=input.coordinate_manager,
                               quantization_mode=input.quantization_mode)
        return input._like(out)


def _nonlinearity(name, module):
    cls = type(name, (MinkowskiNonlinearityBase,), {"MODULE": module, "__module__": __name__})
    globals()[name] = cls
    __all__.append(name)
    return cls


for _n, _m in [("MinkowskiReLU", nn.ReLU), ("MinkowskiLeakyReLU", nn.LeakyReLU),
               ("MinkowskiELU", nn.ELU), ("MinkowskiGELU", nn.GELU),
               ("MinkowskiSELU", nn.SELU), ("MinkowskiCELU", nn.CELU),
               ("MinkowskiPReLU", nn.PReLU), ("MinkowskiReLU6", nn.ReLU6),
               ("MinkowskiSiLU", nn.SiLU), ("MinkowskiSigmoid", nn.Sigmoid),
               ("MinkowskiTanh", nn.Tanh), ("MinkowskiSoftplus", nn.Softplus),
               ("MinkowskiSoftmax", nn.Softmax), ("MinkowskiLogSoftmax", nn.LogSoftmax),
               ("MinkowskiHardtanh", nn.Hardtanh), ("MinkowskiHardswish", nn.Hardswish),
               ("MinkowskiDropout", nn.Dropout), ("MinkowskiAlphaDropout", nn.AlphaDropout)]:
    _nonlinearity(_n, _m)
del _n, _m


class MinkowskiLinear(MinkowskiModuleBase):
    """``self.linear`` = torch.nn.Linear on the features (ME's keys)."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, input):
        out = self.linear(_feats_of(input))
        if isinstance(input, TensorField):
            return TensorField(out, coordinate_field_map_key=input.coordinate_field_map_key,
                               coordinate_manager=input.coordinate_manager,
                               quantization_mode=input.quantization_mode)
        return input._like(out)


class MinkowskiPruning(MinkowskiModuleBase):
    """``prune(x, keep)``: the rows where the bool mask ``keep`` is True, on
    a new coordinate set of the same manager and tensor stride."""

    @_ops.outside_compile
    def forward(self, input, mask):
        if mask.dtype != torch.bool or mask.shape != (len(input),):
            raise errors.ShapeMismatchError(f"keep mask: expected bool [{len(input)}]")
        x = input.native
        s = x.manager.add(x.coords[mask].contiguous(), x.tensor_stride, register=False)
        return SparseTensor._wrap(_NativeSparseTensor._wrap(x.feats[mask], s), input._manager)


# ---- utils -------------------------------------------------------------------------

class _Utils:
    """ME.utils: sparse_quantize, batched_coordinates, sparse_collate,
    kaiming_normal_."""

    @staticmethod
    def batched_coordinates(coords, dtype=torch.int32, device=None):
        rows = []
        for b, c in enumerate(coords):
            c = torch.as_tensor(np.asarray(c) if not isinstance(c, torch.Tensor) else c)
            if dtype in (torch.int32, torch.int64) and c.is_floating_point():
                c = torch.floor(c)
            col = torch.full((c.shape[0], 1), b, dtype=c.dtype, device=c.device)
            rows.append(torch.cat([col, c], 1))
        out = torch.cat(rows, 0).to(dtype)
        return out.to(device) if device is not None else out

    @staticmethod
    def sparse_collate(coords, feats, labels=None, dtype=torch.int32, device=None):
        c = _Utils.batched_coordinates(coords, dtype=dtype, device=device)
        f = torch.cat([torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor)
                       else x for x in feats], 0)
        if labels is None:
            return c, f
        lab = torch.cat([torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor)
                         else x for x in labels], 0)
        return c, f, lab

    @staticmethod
    def sparse_quantize(coordinates, features=None, labels=None, ignore_label=-100,
                        return_index=False, return_inverse=False, return_maps_only=False,
                        quantization_size=None, device="cpu"):
        """ME.utils.sparse_quantize: floor(coordinates / quantization_size),
        unique rows (first occurrence order); features and labels of the first
        point of each voxel (labels: ``ignore_label`` where a voxel's points
        disagree)."""
        is_np = isinstance(coordinates, np.ndarray)
        c = torch.as_tensor(coordinates)
        if quantization_size is not None:
            q = torch.as_tensor(quantization_size, dtype=torch.float64)
            c = torch.floor(c.double() / q)
        elif c.is_floating_point():
            c = torch.floor(c)
        c = c.long()
        d = c.shape[1]
        if d != 3:
            raise errors.InvalidArgumentError("sparse_quantize: 3-D coordinates expected")
        uniq, inv = torch.unique(c, dim=0, return_inverse=True)
        n, u = c.shape[0], uniq.shape[0]
        rows = torch.arange(n)
        first = _scatter_reduce(torch.full((u,), n, dtype=torch.long), inv, rows, "amin", True)
        order = torch.argsort(first)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(u)
        index, inverse = first[order], rank[inv]
        if return_maps_only:
            return (index, inverse) if return_inverse else index
        qc = c[index].to(torch.int32)
        out = [qc.numpy() if is_np else qc]
        if features is not None:
            out.append(features[index.numpy()] if is_np else features[index])
        if labels is not None:
            lab = torch.as_tensor(labels).long()
            lo = _scatter_reduce(torch.full((u,), torch.iinfo(torch.long).max), inverse, lab,
                                 "amin", True)
            hi = _scatter_reduce(torch.full((u,), torch.iinfo(torch.long).min), inverse, lab,
                                 "amax", True)
            ql = torch.where(lo == hi, lo, torch.full_like(lo, ignore_label))
            out.append(ql.numpy() if is_np else ql)
        if return_index:
            out.append(index.numpy() if is_np else index)
        if return_inverse:
            out.append(inverse.numpy() if is_np else inverse)
        return out[0] if len(out) == 1 else tuple(out)

    @staticmethod
    def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
        """ME's fans: [K, Cin, Cout] -> fan_in = Cin*K, fan_out = Cout*K;
        [Cin, Cout] (1x1) -> fan_in = Cout, fan_out = Cin, as ME computes
        them for a 2-D tensor."""
        if tensor.dim() == 2:
            fan_in, fan_out = tensor.size(1), tensor.size(0)
        else:
            fan_in, fan_out = tensor.size(1) * tensor.size(0), tensor.size(2) * tensor.size(0)
        fan = fan_in if mode == "fan_in" else fan_out
        std = nn.init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
        with torch.no_grad():
            return tensor.normal_(0, std)


utils = _Utils()


# ---- checkpoints -------------------------------------------------------------------

def convert_checkpoint(state_dict):
    """An ME state_dict for the modules of this package. ME's keys and
    layouts are kept (``kernel`` [K, Cin, Cout] in ME's order, ``[Cin,
    Cout]`` for 1x1 stride-1 convolutions, ``bias`` [1, Cout], ``bn.*``,
    ``linear.*``), so this only unwraps a ``{"state_dict": ...}`` /
    ``{"model": ...}`` container and strips DataParallel's ``module.``
    prefix; tensors are returned as they are."""
    sd = state_dict
    for k in ("state_dict", "model", "model_state_dict"):
        if isinstance(sd, dict) and k in sd and isinstance(sd[k], dict):
            sd = sd[k]
    out = type(sd)() if isinstance(sd, dict) else {}
    for k, v in sd.items():
        out[k[len("module."):] if k.startswith("module.") else k] = v
    return out
