"""Kernel maps and the coordinate manager that caches them.

A :class:`KernelMap` owns one ``voxconv_kmap_t``. It keeps the handle that
built it alive and destroys the map with that handle when it is collected
(the library frees a map with the handle that created it).

A :class:`CoordinateManager` travels with every sparse tensor derived from
one input (convolutions, pooling, feature-wise ops keep it). It holds the
coordinate sets seen so far (:class:`CoordinateSet`), one per distinct set
of coordinates, and each set caches its kernel maps keyed by
``(mode, kernel_size, stride, dilation[, output set])``: the two
convolutions of a level, the forward and both backward passes, and a
pooling layer with the same geometry all share one map. Transposed
convolutions find their output coordinates here: the first set registered
at the finer tensor stride (usually the encoder's).
"""

import ctypes
import itertools
import threading
import weakref

import torch

from . import _lib
from ._lib import lib
from . import _runtime
from . import errors

MODE_NAMES = {_lib.KMAP_SUBMANIFOLD: "submanifold", _lib.KMAP_STRIDED: "strided",
              _lib.KMAP_TRANSPOSED: "transposed", _lib.KMAP_GENERATIVE: "generative"}

_registry = weakref.WeakValueDictionary()  # id -> KernelMap (for torch custom ops)
_ids = itertools.count(1)


def _destroy_kmap(handle, kmap_ptr):
    with handle.lock:
        lib.voxconv_kmap_destroy(handle.ptr, kmap_ptr)


class KernelMap:
    """A built kernel map. Attributes: ``mode`` (int), ``kernel_size``,
    ``stride``, ``dilation`` (3-tuples), ``kernel_volume``, ``n_in``,
    ``n_out``, ``n_pairs``, ``in_tensor_stride``, ``out_tensor_stride``,
    ``device``, and ``id`` (a process-unique integer)."""

    def __init__(self, handle, mode, kernel_size, stride, dilation,
                 in_coords, in_tensor_stride, out_coords=None, out_tensor_stride=None):
        desc = _lib.KmapDesc(mode, _lib.c_int32_3(*kernel_size),
                             _lib.c_int32_3(*stride), _lib.c_int32_3(*dilation))
        cin = _runtime.coords_struct(in_coords, in_tensor_stride)
        cout = (_runtime.coords_struct(out_coords, out_tensor_stride)
                if out_coords is not None else None)
        ptr = ctypes.c_void_p()
        handle.call("voxconv_kmap_build", ctypes.byref(desc), ctypes.byref(cin),
                    ctypes.byref(cout) if cout is not None else None,
                    ctypes.byref(ptr))
        self.ptr = ptr.value
        self.handle = handle
        self.device = handle.device
        self._finalizer = weakref.finalize(self, _destroy_kmap, handle, self.ptr)
        self._finalizer.atexit = False
        info = _lib.KmapInfo()
        _lib.call("voxconv_kmap_get_info", self.ptr, ctypes.byref(info))
        self.mode = mode
        self.kernel_size = tuple(info.desc.kernel_size)
        self.stride = tuple(info.desc.stride)
        self.dilation = tuple(info.desc.dilation)
        self.kernel_volume = info.kernel_volume
        self.n_in, self.n_out, self.n_pairs = info.n_in, info.n_out, info.n_pairs
        self.in_tensor_stride = tuple(info.in_tensor_stride)
        self.out_tensor_stride = tuple(info.out_tensor_stride)
        self.id = next(_ids)
        _registry[self.id] = self

    def out_coords(self):
        """A new int32 [n_out, 4] tensor (on the map's device) with the
        output coordinates, copied out of the map."""
        src = ctypes.c_void_p()
        _lib.call("voxconv_kmap_out_coords", self.ptr, ctypes.byref(src))
        out = torch.empty((self.n_out, 4), dtype=torch.int32, device=self.device)
        if self.n_out:  # on the current stream, where `out` was allocated
            _runtime.handle_for(self.device).call("voxconv_memcpy", _runtime.ptr(out), src,
                             self.n_out * 16, _lib.MEMCPY_BACKEND_TO_BACKEND)
        return out

    def pairs(self):
        """(offsets int64 [K+1] on the CPU, in_rows int32 [P], out_rows int32
        [P] on the map's device): pairs of offset k are in_rows/out_rows
        [offsets[k]:offsets[k+1]], sorted by output row."""
        offsets = torch.empty(self.kernel_volume + 1, dtype=torch.int64)
        in_rows = torch.empty(self.n_pairs, dtype=torch.int32, device=self.device)
        out_rows = torch.empty(self.n_pairs, dtype=torch.int32, device=self.device)
        _runtime.handle_for(self.device).call("voxconv_kmap_get_pairs", ctypes.c_void_p(self.ptr),
                         _runtime.ptr(offsets), _runtime.ptr(in_rows),
                         _runtime.ptr(out_rows))
        return offsets, in_rows, out_rows

    def verify(self, coords, tensor_stride=(1, 1, 1)):
        """Raises KmapMismatchError unless `coords` are the map's input."""
        c = _runtime.coords_struct(coords, tensor_stride)
        _runtime.handle_for(self.device).call("voxconv_kmap_verify",
                                              ctypes.c_void_p(self.ptr), ctypes.byref(c))

    def __repr__(self):
        return (f"KernelMap({MODE_NAMES.get(self.mode, self.mode)}, kernel={self.kernel_size}, "
                f"stride={self.stride}, dilation={self.dilation}, n_in={self.n_in}, "
                f"n_out={self.n_out}, pairs={self.n_pairs}, device={self.device})")


def kmap_by_id(kmap_id):
    k = _registry.get(kmap_id)
    if k is None:
        raise errors.InvalidArgumentError(f"kernel map #{kmap_id} no longer exists")
    return k


class CoordinateSet:
    """One set of coordinates (int32 [N, 4], contiguous, on one device) at
    one tensor stride, with its cached kernel maps and derived sets."""

    def __init__(self, manager, coords, tensor_stride):
        self.manager = manager
        self.coords = coords
        self.tensor_stride = tuple(tensor_stride)
        self.kmaps = {}
        self.children = {}

    def __len__(self):
        return self.coords.shape[0]


class CoordinateManager:
    """Shared by all sparse tensors derived from one input (see module doc)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.sets = []
        self.by_stride = {}
        self.lock = threading.RLock()

    def add(self, coords, tensor_stride, register=True):
        s = CoordinateSet(self, coords, tensor_stride)
        with self.lock:
            self.sets.append(s)
            if register:
                self.by_stride.setdefault(s.tensor_stride, s)
        return s

    def at_stride(self, tensor_stride):
        return self.by_stride.get(tuple(tensor_stride))

    def kernel_map(self, in_set, mode, kernel_size, stride, dilation, out_set=None):
        """The cached (or newly built) map from in_set with this geometry.
        Returns (kmap, out_set); for strided and generative maps the output
        set is derived (and cached) from the map's output coordinates."""
        key = (mode, tuple(kernel_size), tuple(stride), tuple(dilation),
               id(out_set) if out_set is not None else None)
        with self.lock:
            hit = in_set.kmaps.get(key)
            if hit is not None:
                return hit
            handle = _runtime.handle_for(self.device)
            if mode == _lib.KMAP_TRANSPOSED:
                km = KernelMap(handle, mode, kernel_size, stride, dilation,
                               in_set.coords, in_set.tensor_stride,
                               out_set.coords, out_set.tensor_stride)
            else:
                km = KernelMap(handle, mode, kernel_size, stride, dilation,
                               in_set.coords, in_set.tensor_stride)
            if mode == _lib.KMAP_SUBMANIFOLD:
                out_set = in_set
            elif mode == _lib.KMAP_STRIDED:
                # Outputs are unique floor(c / s): they depend on the stride
                # only, so every strided map of a set shares one output set.
                ckey = ("strided", tuple(stride))
                out_set = in_set.children.get(ckey)
                if out_set is None:
                    out_set = self.add(km.out_coords(), km.out_tensor_stride)
                    in_set.children[ckey] = out_set
            elif mode == _lib.KMAP_GENERATIVE:
                out_set = self.add(km.out_coords(), km.out_tensor_stride, register=False)
            in_set.kmaps[key] = (km, out_set)
            return km, out_set
