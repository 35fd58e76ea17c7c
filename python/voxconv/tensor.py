"""The sparse tensor type, voxelization and conversion to dense."""

import ctypes
import numbers
import operator

import torch

from . import _lib
from . import _ops
from . import _runtime
from . import _validate
from . import errors
from . import kmap as _kmap
from .kmap import CoordinateManager


# The integer checks live in _validate (one place for every input that
# reaches the library as an integer); these names stay for other modules.
triple = _validate.int_triple


def _check_coords(coords, device=None, where="SparseTensor", name="coords"):
    return _validate.coords(coords, where, name, device)


# dense() refuses a grid of more elements than this per batch item (see
# SparseTensor.dense).
DENSE_MAX_ELEMENTS_PER_ITEM = 2**31


class NotATensorError(TypeError, AttributeError):
    """A torch.Tensor attribute was asked of a SparseTensor: a torch module
    or function was given one (torch.nn.BatchNorm1d in a torch.nn.Sequential
    calls ``input.dim()``). A TypeError (the argument has the wrong type)
    and an AttributeError (so ``hasattr`` and ``getattr(x, name, default)``
    still answer False / the default)."""


def _not_a_tensor_message(cls_name, name):
    return (f"'{cls_name}' object has no attribute '{name}': a SparseTensor is not a "
            f"torch.Tensor, and a torch module or function was given one (e.g. "
            f"torch.nn.BatchNorm1d inside a torch.nn.Sequential). Use voxconv.nn.Sequential, "
            f"which passes the features to plain torch modules and keeps the coordinates; "
            f"or wrap the module in voxconv.nn.SparseFeatureOp(module); or apply it "
            f"yourself: x.replace_feature(module(x.feats))")


class _NotATensorAttribute:
    """Stands for a torch.Tensor attribute that SparseTensor lacks: reading
    it from an instance raises NotATensorError. A non-data descriptor on a
    base class rather than ``SparseTensor.__getattr__``: a class with
    ``__getattr__`` loses CPython's attribute fast path (3.11 measured
    +17-30 ns on every ``x.feats`` / ``x.coords``), whereas a descriptor
    is found only for its own name; and an instance attribute of the same
    name still wins over it."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:  # on the class: absent, as before (hasattr(SparseTensor, "dim"))
            raise AttributeError(f"type object '{owner.__name__}' has no attribute "
                                 f"'{self.name}'")
        raise NotATensorError(_not_a_tensor_message(type(obj).__name__, self.name))


class _NotATensor:
    """Base of SparseTensor holding a _NotATensorAttribute for each public
    torch.Tensor attribute SparseTensor does not define (filled in below
    the class)."""

    __slots__ = ()


def _coords_bounds(bounds):
    """SparseTensor's ``bounds`` -> _lib.CoordsBounds, checked: two
    sequences of 4 integers (a float is refused, not truncated), lo <= hi, batch within 0..BATCH_MAX and x, y, z
    within the coordinate limits."""
    def integer(v):  # ints and numpy / 0-d integer tensors; not floats, bools, strings
        if isinstance(v, bool):
            raise TypeError
        return operator.index(v)

    try:
        lo, hi = (tuple(integer(v) for v in side) for side in bounds)
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(
            f"bounds: expected ((b, x, y, z) lowest, (b, x, y, z) highest), got {bounds!r}")
    if len(lo) != 4 or len(hi) != 4:
        raise errors.InvalidArgumentError(
            f"bounds: expected 4 values (b, x, y, z) on each side, got {bounds!r}")
    limits = [(0, _lib.BATCH_MAX)] + [(_lib.COORD_MIN, _lib.COORD_MAX)] * 3
    for f, (a, b, (mn, mx)) in enumerate(zip(lo, hi, limits)):
        if not mn <= a <= b <= mx:
            raise errors.InvalidArgumentError(
                f"bounds: field {'bxyz'[f]}: expected {mn} <= lo <= hi <= {mx}, "
                f"got lo={a}, hi={b}")
    out = _lib.CoordsBounds()
    out.lo[:] = lo
    out.hi[:] = hi
    return out


def _rebuild_sparse_tensor(cls, feats, coords, tensor_stride):
    """Unpickles a SparseTensor (see SparseTensor.__reduce__)."""
    return cls(feats, coords, tensor_stride)


class SparseTensor(_NotATensor):
    """A batch of sparse voxel grids.

    * ``coords``: int32 ``[N, 4]`` rows ``(batch, x, y, z)``, integer voxel
      indices in this tensor's own grid (the library never rescales them by
      the tensor stride).
    * ``feats``: ``[N, C]`` float32/float16/bfloat16 (float64 on the CPU),
      on the same device as ``coords``.
    * ``tensor_stride``: this grid's pitch in units of the finest grid, a
      3-tuple (1 for a network's input, 2 after one stride-2 layer, ...).

    Tensors produced by the layers share a :class:`CoordinateManager` with
    their input, so kernel maps are built once per geometry and reused by
    every layer (and by the backward passes). Coordinates are treated as
    immutable once a tensor is made: do not modify ``coords`` in place.

    Integer coords of another dtype are converted to int32 after a range
    check (batch 0..1023, x, y, z within ±131071: a value int32 cannot
    hold is never wrapped) and non-contiguous inputs are made contiguous;
    float and bool coords are refused. CPU coordinates are range-checked
    here; int32 CUDA coordinates are checked by the library on the device
    when a kernel map is built, so that making a tensor never waits for
    the GPU (see ``voxconv._validate``). Duplicate coordinates are
    rejected by the library when a kernel map is built (see
    :func:`voxconv.merge_duplicates`).

    Pickling (``pickle``, ``copy.deepcopy``, ``torch.save``) keeps the
    features, the coordinates and the tensor stride. The coordinate
    manager and its kernel maps are not pickled (they hold library
    handles): an unpickled tensor starts a new manager holding only its
    own coordinates, and maps are rebuilt on first use. Tensors that were
    pickled together therefore no longer share maps, and a transposed
    convolution that found the encoder's finer coordinates in the manager
    needs them passed as ``out_coords``. ``copy.copy`` keeps the manager.

    Arithmetic on features: ``x + y``, ``x - y`` (``y`` another SparseTensor
    on the same coordinates), ``x + 1.0``, ``x - bias`` (a number or a
    dense tensor that broadcasts against ``feats`` without changing its row
    count), ``-x``, and ``+=`` / ``-=``. "Same coordinates" means the same
    coordinate set (tensors derived from one another by submanifold layers
    and feature-wise ops), or, as in :func:`voxconv.cat`, equal coordinates
    in the same row order at the same tensor stride, verified by comparing
    them (a host wait on CUDA); anything else raises KmapMismatchError. The
    result keeps the left operand's coordinates and manager; autograd flows
    through the features. ``x += y`` updates ``x.feats`` in place when
    autograd does not record the op (grad mode off, or no operand requires
    grad) and the result keeps the features' shape and dtype, and then
    every tensor sharing those features (``detach()``, ``copy.copy``) sees
    the change, as with torch tensors. Otherwise it rebinds ``x.feats`` to
    the out-of-place result, so it never modifies a tensor autograd saved
    for the backward pass (torch's own ``t += u`` would make that backward
    fail).

    ``bounds`` (optional): ``((b_lo, x_lo, y_lo, z_lo), (b_hi, x_hi, y_hi,
    z_hi))``, inclusive, a box every row lies in -- e.g. ``((0, 0, 0, 0),
    (batch_size - 1, gx - 1, gy - 1, gz - 1))`` for :func:`voxelize` with
    ``grid_size=(gx, gy, gz)``. Strided kernel maps built on these
    coordinates (pooling, stride-2 convolutions) then sort compact keys
    (``voxconv_kmap_build_bounded``): the same maps, sooner (workload A's
    first pooling map, docs/perf-notes.md item 123). It is not checked
    here (that would read the coordinates): a row outside it fails the
    first such build with :class:`OutOfRangeError`. Levels made by strided
    maps get their bounds from the map, as without this argument;
    ``VOXCONV_STRIDED_BOUNDS=0`` ignores both.

    A SparseTensor is not a torch.Tensor: asking it for a torch.Tensor
    attribute it lacks (``x.dim()``, ``x.view``...) raises
    :class:`NotATensorError` (a TypeError and an AttributeError) that
    points to :class:`voxconv.nn.Sequential` and ``SparseFeatureOp``.
    """

    def __init__(self, feats, coords, tensor_stride=1, *, manager=None, bounds=None,
                 _coord_set=None):
        if not isinstance(feats, torch.Tensor):
            raise TypeError(f"feats: expected a torch.Tensor, got {type(feats).__name__}")
        if feats.dim() != 2:
            raise errors.ShapeMismatchError(
                f"feats: expected shape [N, C], got {tuple(feats.shape)}")
        _runtime.dtype_code(feats.dtype, "feats")
        if _coord_set is not None:
            self._set = _coord_set
        else:
            coords = _check_coords(coords, feats.device)
            ts = triple(tensor_stride, "tensor_stride")
            if manager is None:
                manager = CoordinateManager(feats.device)
            elif manager.device != feats.device:
                raise errors.InvalidArgumentError(
                    f"manager is for {manager.device} but features are on {feats.device}")
            # checked before the set is registered with the manager
            box = None if bounds is None else _coords_bounds(bounds)
            self._set = manager.add(coords, ts, _checked=True)  # _check_coords did
            if box is not None and _kmap._pass_bounds:  # VOXCONV_STRIDED_BOUNDS=0: without
                self._set.bounds = box
        if feats.shape[0] != self._set.coords.shape[0]:
            raise errors.ShapeMismatchError(
                f"feats has {feats.shape[0]} rows but coords has "
                f"{self._set.coords.shape[0]}")
        self.feats = feats

    def __reduce__(self):
        return (_rebuild_sparse_tensor,
                (type(self), self.feats, self.coords, self.tensor_stride))

    def __copy__(self):
        return type(self)._wrap(self.feats, self._set)

    def __dir__(self):
        # the torch.Tensor names of _NotATensor are not SparseTensor's API
        return [n for n in super().__dir__() if _defined_here(type(self), n, self)]

    @classmethod
    def _wrap(cls, feats, coord_set):
        """A tensor over an existing coordinate set whose features the
        library just made (rows and device known to match): no checks."""
        t = object.__new__(cls)
        t._set = coord_set
        t.feats = feats
        return t

    # -- properties ------------------------------------------------------------
    @property
    def coords(self):
        return self._set.coords

    @property
    def tensor_stride(self):
        return self._set.tensor_stride

    @property
    def manager(self):
        return self._set.manager

    @property
    def coordinate_set(self):
        return self._set

    F = property(lambda self: self.feats, doc="Alias of feats.")
    C = property(lambda self: self.coords, doc="Alias of coords.")

    @property
    def device(self):
        return self.feats.device

    @property
    def dtype(self):
        return self.feats.dtype

    @property
    def shape(self):
        return tuple(self.feats.shape)

    @property
    def num_channels(self):
        return self.feats.shape[1]

    def __len__(self):
        return self.feats.shape[0]

    @property
    def batch_size(self):
        """1 + the largest batch index (0 for an empty tensor)."""
        c = self.coords
        return int(c[:, 0].max()) + 1 if c.shape[0] else 0

    def __repr__(self):
        return (f"SparseTensor(n={len(self)}, channels={self.num_channels}, "
                f"tensor_stride={self.tensor_stride}, dtype={self.dtype}, "
                f"device={self.device})")

    # -- derivation --------------------------------------------------------------
    def replace_feature(self, feats):
        """A tensor with the same coordinates (and manager) and new features
        (e.g. after BatchNorm/ReLU on ``self.feats``)."""
        if feats.dim() != 2 or feats.shape[0] != len(self):
            raise errors.ShapeMismatchError(
                f"replace_feature: expected [{len(self)}, C], got {tuple(feats.shape)}")
        if feats.device != self.device:
            raise errors.InvalidArgumentError(
                f"replace_feature: features on {feats.device}, coordinates on {self.device}")
        return SparseTensor(feats, None, _coord_set=self._set)

    def to(self, *args, **kwargs):
        """Like torch.Tensor.to for the features. Moving to another device
        copies the coordinates and starts a new coordinate manager there
        (kernel maps do not travel); a dtype change keeps the manager."""
        feats = self.feats.to(*args, **kwargs)
        if feats.device == self.device:
            return self.replace_feature(feats) if feats is not self.feats else self
        return SparseTensor(feats, self.coords.to(feats.device), self.tensor_stride)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to(torch.device("cuda", device) if isinstance(device, int)
                       else (device or "cuda"))

    def half(self):
        return self.to(torch.float16)

    def bfloat16(self):
        return self.to(torch.bfloat16)

    def float(self):
        return self.to(torch.float32)

    def double(self):
        return self.to(torch.float64)

    def detach(self):
        return self.replace_feature(self.feats.detach())

    def requires_grad_(self, flag=True):
        self.feats.requires_grad_(flag)
        return self

    # -- arithmetic on the features (see the class doc) -------------------------
    def _operand(self, other, op):
        """The features-side operand of ``self <op> other``, or
        NotImplemented for a type this does not handle."""
        if isinstance(other, SparseTensor):
            _check_same_coordinates(self, other, f"SparseTensor {op}")
            return other.feats
        if isinstance(other, torch.Tensor):
            shape = _broadcast_shape(self.feats.shape, other.shape, op)
            if len(shape) != 2 or shape[0] != self.feats.shape[0]:
                raise errors.ShapeMismatchError(
                    f"SparseTensor {op}: a dense operand of shape {tuple(other.shape)} "
                    f"broadcasts the features {tuple(self.feats.shape)} to {tuple(shape)}; "
                    f"it must keep [{self.feats.shape[0]}, C] (e.g. a number, a [C] or "
                    f"[1, C] vector, or [N, C])")
            return other
        if isinstance(other, numbers.Real):  # int, float, bool, numpy scalars
            return other
        return NotImplemented

    def _with_feats(self, feats):
        return SparseTensor(feats, None, _coord_set=self._set)

    def __add__(self, other):
        o = self._operand(other, "+")
        return NotImplemented if o is NotImplemented else self._with_feats(self.feats + o)

    def __radd__(self, other):
        o = self._operand(other, "+")
        return NotImplemented if o is NotImplemented else self._with_feats(o + self.feats)

    def __sub__(self, other):
        o = self._operand(other, "-")
        return NotImplemented if o is NotImplemented else self._with_feats(self.feats - o)

    def __rsub__(self, other):
        o = self._operand(other, "-")
        return NotImplemented if o is NotImplemented else self._with_feats(o - self.feats)

    def __neg__(self):
        return self._with_feats(-self.feats)

    def __pos__(self):
        return self

    def __iadd__(self, other):
        return self._update(other, "+=", torch.Tensor.add_, torch.add)

    def __isub__(self, other):
        return self._update(other, "-=", torch.Tensor.sub_, torch.sub)

    def _update(self, other, op, inplace, outofplace):
        o = self._operand(other, op)
        if o is NotImplemented:
            return NotImplemented
        f = self.feats
        if _in_place_ok(f, o):
            try:
                inplace(f, o)
                return self
            except RuntimeError:
                # autograd or memory refused it (an inference tensor outside
                # inference mode, expanded features, ...): rebind instead
                pass
        self.feats = self._with_feats(outofplace(f, o)).feats
        return self

    # -- conversions ---------------------------------------------------------
    def dense(self, spatial_shape=None, min_coordinate=(0, 0, 0), batch_size=None, *,
              max_elements_per_item=DENSE_MAX_ELEMENTS_PER_ITEM):
        """A dense tensor ``[B, C, X, Y, Z]`` (differentiable w.r.t. feats).

        Voxel (b, x, y, z) lands at ``[b, :, x - min_x, y - min_y, z - min_z]``
        (``min_coordinate`` defaults to 0; pass ``self.coords[:, 1:].min(0)``
        for coordinates that go negative). ``spatial_shape`` defaults to
        the smallest that holds every voxel, ``batch_size`` to
        ``self.batch_size``. Voxels outside the box raise OutOfRangeError.

        Size limit: a grid of more than ``max_elements_per_item`` elements
        (X * Y * Z * C) per batch item, by default 2^31 (8 GiB of float32
        per item), raises OutOfRangeError naming the extent, the element
        count and the bytes, before anything is allocated. Coordinates span
        up to 262143 cells per axis, so an unbounded extent (far-apart
        voxels, or a ``min_coordinate`` far from them) can ask for
        petabytes, and torch's allocation error does not say why. 2^31 is
        far above the dense grids networks use (a KITTI BEV head's
        200 x 176 x 5 x 128 is 2^24.4) and below what one GPU holds for
        a batch. Raise the limit for a grid that is meant to be larger.
        ``batch_size`` is at most 1024 (batch indices are 0..1023).
        """
        c = self.coords.long()
        mn = torch.as_tensor(triple(min_coordinate, "min_coordinate", lo=-2**31)
                             if not isinstance(min_coordinate, torch.Tensor)
                             else min_coordinate.tolist(), dtype=torch.long, device=c.device)
        xyz = c[:, 1:] - mn
        if spatial_shape is None:
            spatial_shape = (tuple(int(v) + 1 for v in xyz.max(0).values.tolist())
                             if len(self) else (0, 0, 0))
        spatial_shape = triple(spatial_shape, "spatial_shape", lo=0, hi=None)
        if batch_size is None:
            b = _validate.check_batch_column(self.coords[:, 0], "dense")
        else:
            b = _validate.int_value(batch_size, "dense: batch_size", 0, _lib.BATCH_MAX + 1)
        limit = _validate.int_value(max_elements_per_item, "dense: max_elements_per_item", 0,
                                    2**63 - 1)
        per_item = spatial_shape[0] * spatial_shape[1] * spatial_shape[2] * self.num_channels
        if per_item > limit:
            total = per_item * b
            nbytes = total * self.feats.element_size()
            raise errors.OutOfRangeError(
                f"dense: extent {spatial_shape[0]} x {spatial_shape[1]} x {spatial_shape[2]} "
                f"(batch_size {b}, {self.num_channels} channels) is {total} elements, "
                f"{nbytes} bytes ({_human_bytes(nbytes)}) as {self.dtype}: over the limit of "
                f"{limit} elements per batch item (max_elements_per_item={limit}); pass a "
                f"spatial_shape and min_coordinate that bound the voxels, or a larger "
                f"max_elements_per_item")
        if len(self):
            lim = torch.tensor(spatial_shape, device=c.device)
            bad = (xyz < 0).any(1) | (xyz >= lim).any(1) | (c[:, 0] >= b) | (c[:, 0] < 0)
            if bool(bad.any()):
                row = int(bad.nonzero()[0])
                raise errors.OutOfRangeError(
                    f"dense: voxel row {row} {self.coords[row].tolist()} lies outside "
                    f"batch {b} x shape {spatial_shape} from min_coordinate {mn.tolist()}")
        out = self.feats.new_zeros((b, *spatial_shape, self.num_channels))
        if len(self):
            out = out.index_put((c[:, 0], xyz[:, 0], xyz[:, 1], xyz[:, 2]), self.feats)
        return out.permute(0, 4, 1, 2, 3).contiguous()

    @classmethod
    def from_points(cls, points, voxel_size, *, origin=(0.0, 0.0, 0.0), grid_size=None,
                    n_feat=None, reduce="mean", batch=None, dtype=torch.float32,
                    return_point_map=False):
        """Voxelizes points (see :func:`voxelize`) into a SparseTensor whose
        features are the first ``n_feat`` fields of the points (default: all),
        reduced per voxel. With ``return_point_map=True`` also returns the
        int64 [n] voxel row of each point (-1 if dropped)."""
        coords, feats, point_voxel = voxelize(points, voxel_size, origin=origin,
                                              grid_size=grid_size, n_feat=n_feat,
                                              reduce=reduce, batch=batch)
        st = cls(feats.to(dtype), coords, 1)
        return (st, point_voxel) if return_point_map else st


# torch.Tensor's public attributes that SparseTensor lacks: reading one from
# a SparseTensor raises NotATensorError (see _NotATensorAttribute).
_TENSOR_ONLY_ATTRS = frozenset(
    n for n in dir(torch.Tensor) if not n.startswith("_")) - frozenset(dir(SparseTensor))
for _name in _TENSOR_ONLY_ATTRS:
    setattr(_NotATensor, _name, _NotATensorAttribute(_name))
del _name


def _defined_here(cls, name, obj):
    """False for a name whose only definition is _NotATensor's stand-in."""
    if name not in _TENSOR_ONLY_ATTRS or name in getattr(obj, "__dict__", ()):
        return True
    return any(name in vars(c) for c in cls.__mro__ if c is not _NotATensor)


def _broadcast_shape(a, b, op):
    try:
        return torch.broadcast_shapes(a, b)
    except RuntimeError as e:
        raise errors.ShapeMismatchError(
            f"SparseTensor {op}: a dense operand of shape {tuple(b)} does not broadcast "
            f"against the features {tuple(a)} ({e})") from None


def _check_same_coordinates(a, b, what):
    """KmapMismatchError unless a and b are on one coordinate set or on
    equal coordinates (same rows, same order, same tensor stride)."""
    if a._set is b._set:
        return
    if (a.tensor_stride != b.tensor_stride or len(a) != len(b) or a.device != b.device
            or not torch.equal(a.coords, b.coords)):
        raise errors.KmapMismatchError(
            f"{what}: the tensors are on different coordinates ({len(a)} rows at tensor "
            f"stride {a.tensor_stride} on {a.device} vs {len(b)} rows at tensor stride "
            f"{b.tensor_stride} on {b.device}); features combine row by row, so both "
            f"must be on one coordinate set (e.g. a layer's input and the output of "
            f"submanifold layers on it) or on equal coordinates in the same order")


def _in_place_ok(f, o):
    """Whether ``f <op>= o`` may update the features in place: autograd does
    not record it (so no tensor saved for backward is modified), and the
    result keeps f's shape and dtype."""
    if torch.is_grad_enabled() and (
            f.requires_grad or (isinstance(o, torch.Tensor) and o.requires_grad)):
        return False
    if isinstance(o, torch.Tensor) and torch.broadcast_shapes(f.shape, o.shape) != f.shape:
        return False
    return torch.result_type(f, o) == f.dtype


def _human_bytes(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "bytes" else f"{n} bytes"
        n /= 1024


def _float3(value, name):
    if isinstance(value, (int, float)):
        value = (value,) * 3
    value = tuple(float(v) for v in value)
    if len(value) != 3:
        raise errors.InvalidArgumentError(f"{name}: expected 1 or 3 numbers")
    return value


def voxelize(points, voxel_size, *, origin=(0.0, 0.0, 0.0), grid_size=None,
             n_feat=None, reduce="mean", batch=None):
    """Points -> voxels (``voxconv_voxelize``).

    ``points``: float32 [n, fields] (x, y, z first), CPU or CUDA. A voxel's
    index is ``floor((p - origin) / voxel_size)``. ``grid_size`` (int or 3
    ints): points outside ``[0, grid_size)`` are dropped; None: unbounded.
    ``reduce``: ``"mean"`` or ``"first"`` (features of the first point).
    ``batch``: an int for every point, or an integer tensor [n] per point,
    each in 0..1023 (checked before the cast to int32; float and bool
    tensors are refused).

    Returns ``(coords int32 [V, 4] sorted by (b, x, y, z), feats float32
    [V, n_feat], point_voxel int64 [n])``.
    """
    if not isinstance(points, torch.Tensor):
        raise TypeError("points: expected a torch.Tensor")
    if points.dim() != 2 or points.shape[1] < 3:
        raise errors.ShapeMismatchError(
            f"points: expected [n, fields >= 3], got {tuple(points.shape)}")
    if points.dtype != torch.float32:
        points = points.float()
    points = points.contiguous()
    n, fields = points.shape
    if n_feat is None:
        n_feat = fields
    else:
        n_feat = _validate.int_value(n_feat, "voxelize: n_feat")
        if not 0 <= n_feat <= fields:
            raise errors.InvalidArgumentError(f"n_feat={n_feat} outside 0..{fields}")
    # Checked before anything is cast to int32 (ctypes wraps 2**32 + 1 to 1).
    desc_batch, batch_t = _validate.batch(batch, n, points.device, "voxelize")
    desc = _lib.VoxelizeDesc()
    desc.voxel_size = _lib.c_float_3(*_float3(voxel_size, "voxel_size"))
    desc.origin = _lib.c_float_3(*_float3(origin, "origin"))
    desc.grid_size = _lib.c_int32_3(*(triple(grid_size, "grid_size", 1, _lib.COORD_MAX + 1)
                                      if grid_size is not None else (0, 0, 0)))
    reduces = {"mean": _lib.REDUCE_MEAN, "first": _lib.REDUCE_FIRST}
    if reduce not in reduces:
        raise errors.InvalidArgumentError(f"reduce={reduce!r}: expected 'mean' or 'first'")
    desc.reduce = reduces[reduce]
    pts = _lib.Points(_runtime.ptr(points), n, fields, None)
    if batch_t is not None:
        pts.batch = _runtime.ptr(batch_t)
    else:
        desc.batch = desc_batch
    dev = points.device
    coords = torch.empty((n, 4), dtype=torch.int32, device=dev)
    feats = torch.empty((n, n_feat), dtype=torch.float32, device=dev)
    point_voxel = torch.empty(n, dtype=torch.int64, device=dev)
    n_vox = ctypes.c_int64(0)
    _runtime.handle_for(dev).call(
        "voxconv_voxelize", ctypes.byref(desc), ctypes.byref(pts), n_feat,
        _runtime.ptr(coords), _runtime.ptr(feats) if n_feat else None,
        ctypes.byref(n_vox), _runtime.ptr(point_voxel))
    v = n_vox.value
    return coords[:v].clone(), feats[:v].clone(), point_voxel


def merge_duplicates(coords):
    """(unique int32 [U, 4] sorted by (b, x, y, z), row_map int64 [N]) with
    ``unique[row_map[i]] == coords[i]``: reduce features over duplicates
    with e.g. ``torch.zeros(U, C).index_add_(0, row_map, feats)``."""
    coords = _check_coords(coords, where="merge_duplicates")
    n = coords.shape[0]
    out = torch.empty((n, 4), dtype=torch.int32, device=coords.device)
    row_map = torch.empty(n, dtype=torch.int64, device=coords.device)
    n_unique = ctypes.c_int64(0)
    c = _runtime.coords_struct(coords, (1, 1, 1))
    _runtime.handle_for(coords.device).call(
        "voxconv_merge_duplicates", ctypes.byref(c), _runtime.ptr(out),
        ctypes.byref(n_unique), _runtime.ptr(row_map))
    return out[:n_unique.value].clone(), row_map


@_ops.outside_compile
def cat(tensors):
    """Concatenates the features of sparse tensors with the same coordinates
    (e.g. a U-Net skip connection)."""
    tensors = list(tensors)
    if not tensors:
        raise errors.InvalidArgumentError("cat: no tensors")
    first = tensors[0]
    for t in tensors[1:]:
        if t.coordinate_set is first.coordinate_set:
            continue
        if t.tensor_stride != first.tensor_stride or not torch.equal(t.coords, first.coords):
            raise errors.KmapMismatchError(
                f"cat: tensors have different coordinates ({len(first)} rows at stride "
                f"{first.tensor_stride} vs {len(t)} rows at stride {t.tensor_stride})")
    return first.replace_feature(torch.cat([t.feats for t in tensors], dim=1))
