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

Map stream. On CUDA, maps are built on a second, high-priority stream of
the device (one per device, shared by all managers), as ``voxconv bench
--maps overlap`` does: a strided, transposed or generative build waits once
on the host for its own stream (the output count sizes the next tensor),
and on the map stream that wait does not drain the queue of convolutions
already issued, so the next level's maps are built while this level's
convolutions run. Submanifold builds never wait at all. Ordering:

* the map stream waits for the stream the input coordinates were made on
  (an event recorded there at the set's first build);
* an op waits for the map's ``ready`` event the first time it uses the
  map on a stream (``KernelMap.use_on``);
* coordinates made on the map stream are marked as used by the consumer
  stream (``record_stream``), coordinates the map stream reads as used by
  the map stream, and a map is destroyed only after the map
  stream has waited for every stream that used it, so the caching
  allocator never hands their memory out early.

Freeing. Dropped CUDA maps are freed in batches (flush_dropped): when a
set without a parent goes (the input set goes last of its family, so a
dropped forward's maps go together), at the next input set or map build
otherwise, and in voxconv.empty_cache(). One event per using stream for
the batch instead of one per map; a batch whose using stream is being
captured into a CUDA graph waits for a later flush.

``VOXCONV_MAP_STREAM=0`` builds maps on the current stream instead, and so
does a build while the current stream is being captured into a CUDA graph
(capture follows the capturing stream).

Prefetch (map stream only; ``VOXCONV_MAP_PREFETCH=0`` turns it off): a new
set's maps are queued as soon as the set exists, from what sets made the
same way were asked for before (:class:`_MapPlan`); strided maps deferred
(``voxconv_kmap_build_async``), so the pooling layer that asks for one
finds its output count already on the host as a rule.

Build worker (map stream only; ``VOXCONV_MAP_WORKER=0`` turns it off): the
map stream's handle issues its submanifold and deferred strided builds on a
library thread (voxconv_handle_set_build_worker), so the build call
returns after its argument checks and the caller's thread goes on issuing
convolutions (docs/perf-notes.md item 98). Such a map has no ``ready``
event: its first use on another stream orders that stream through the
library (voxconv_kmap_order, which waits on the host only until the
worker has issued the build), and the map keeps its input coordinates
alive until its first use (the worker reads them when it issues the
build, which may be after the set that held them is gone; a use returns
only once the build is issued).

Derived rows. A set a strided (expanding, generative) map made on the map
stream gets a copy of the map's output rows as its coordinates; with
``VOXCONV_DERIVED_ROWS=view`` it takes the map's own rows instead, without
the copy (``_MapRows``: the tensor keeps the whole map alive, ~50x the
rows' size, as long as anyone holds the coordinates; docs/perf-notes.md
items 104 and 107).
"""

import atexit
import ctypes
import itertools
import os
import struct
import threading
import weakref

import torch

from . import _lib
from ._lib import lib
from . import _runtime
from . import _validate
from . import errors

# voxconv_kmap_mode_t VOXCONV_KMAP_EXPANDING (spconv's regular conv output set).
KMAP_EXPANDING = getattr(_lib, "KMAP_EXPANDING", 4)

MODE_NAMES = {_lib.KMAP_SUBMANIFOLD: "submanifold", _lib.KMAP_STRIDED: "strided",
              _lib.KMAP_TRANSPOSED: "transposed", _lib.KMAP_GENERATIVE: "generative",
              KMAP_EXPANDING: "expanding"}

# Modes whose output coordinates the map derives (built under the map
# stream, see _build_on_map_stream).
_DERIVING_MODES = (_lib.KMAP_STRIDED, _lib.KMAP_GENERATIVE, KMAP_EXPANDING)

_registry = weakref.WeakValueDictionary()  # id -> KernelMap (for torch custom ops)
_ids = itertools.count(1)


def _torch_stream(raw, device):
    """A torch Stream object for a raw cudaStream_t of `device`. The legacy
    default stream (0) is torch's default stream: an ExternalStream made
    from 0 does not order work with it (seen on torch 2.11: its waits had
    no effect)."""
    cur = torch.cuda.current_stream(device)
    if cur.cuda_stream == raw:
        return cur
    if raw == 0:
        return torch.cuda.default_stream(device)
    return torch.cuda.ExternalStream(raw, device=device)


def _handle_stream(handle):
    """The torch Stream object of a CUDA handle's stream, made once per
    handle (handles are per raw stream, so it never changes)."""
    st = handle.torch_stream
    if st is None:
        st = handle.torch_stream = _torch_stream(handle.stream, handle.device)
    return st


# CUDA maps dropped and not yet freed: [(handle, map pointer, users, the
# input coordinates a build worker may still read, or None)], freed
# in batches by flush_dropped. The finalizer appends and a flush swaps the
# list out, both under a re-entrant lock: a finalizer can run inside any
# allocation, the swap's own included (it then appends to the old list,
# which the flush holds, or to the new one), and another thread's
# finalizer must not append to a list the flush has already read.
_dropped = []
_dropped_lock = threading.RLock()
_DROPPED_MAX = 32  # a forward drops ~a dozen maps; more are flushed at once


def _destroy_kmap(handle, kmap_ptr, users, keep=None):
    """A KernelMap's finalizer. A CUDA map joins the batch flush_dropped
    frees (see the module doc, Freeing): one event per using stream
    for the batch instead of one per map (a forward drops a dozen at once:
    464 against 866 us for workload A's 13, docs/perf-notes.md item 96)."""
    if handle.device.type != "cuda":
        with handle.lock:
            lib.voxconv_kmap_destroy(handle.ptr, kmap_ptr)
        return
    with _dropped_lock:
        _dropped.append((handle, kmap_ptr, users, keep))
    if len(_dropped) >= _DROPPED_MAX:
        flush_dropped()


def flush_dropped():
    """Frees the dropped CUDA maps (see _destroy_kmap); a batch whose using
    stream is being captured into a CUDA graph waits for a later flush.
    Not on a thread Python did not start: a finalizer can run there inside
    the build worker's allocation callback, and freeing waits for that
    worker (the next flush on a Python thread frees the batch)."""
    global _dropped
    if isinstance(threading.current_thread(), threading._DummyThread):
        return
    with _dropped_lock:
        items, _dropped = _dropped, []
    if not items:
        return
    by_handle = {}
    for handle, kmap_ptr, users, keep in items:
        by_handle.setdefault(handle, []).append((kmap_ptr, users, keep))
    for handle, batch in by_handle.items():
        if not _destroy_batch(handle, batch):
            with _dropped_lock:
                _dropped.extend((handle,) + b for b in batch)


def _destroy_batch(handle, batch):
    """Frees [(map pointer, users, keep)] built on `handle` once that stream has
    waited for every other stream that used them (their queued work may
    still read the maps' buffers, which return to the building stream's
    pool). Returns False, freeing nothing, while one of those streams is
    being captured (an event recorded there would join the building stream
    to the capture)."""
    others = {u for _, users, _ in batch for u in users if u != handle.stream}
    if others:
        try:
            own = _handle_stream(handle)
            streams = [_handle_stream(_runtime.handle_for_stream(handle.device, u))
                       for u in others]
            for st in streams:
                with torch.cuda.stream(st):
                    if torch.cuda.is_current_stream_capturing():
                        return False
            for st in streams:
                ev = torch.cuda.Event()
                ev.record(st)
                own.wait_event(ev)
        except Exception:  # noqa: BLE001 - at shutdown: free anyway
            torch.cuda.synchronize(handle.device)
    with handle.lock:
        for kmap_ptr, _, _ in batch:
            lib.voxconv_kmap_destroy(handle.ptr, kmap_ptr)
    return True


def _struct_of(ctype, base=0):
    """(struct format items [(offset, code)], field paths) of a ctypes
    Structure of int32 / int64 scalars and int32 arrays, flattened."""
    items, names = [], []
    for name, t in ctype._fields_:
        off = base + getattr(ctype, name).offset
        if isinstance(t, type) and issubclass(t, ctypes.Structure):
            sub_items, sub_names = _struct_of(t, off)
            items += sub_items
            names += [f"{name}.{n}" for n in sub_names]
        elif isinstance(t, type) and issubclass(t, ctypes.Array):
            size = ctypes.sizeof(t._type_)
            items += [(off + i * size, "q" if size == 8 else "i") for i in range(t._length_)]
            names += [f"{name}[{i}]" for i in range(t._length_)]
        else:
            items.append((off, "q" if ctypes.sizeof(t) == 8 else "i"))
            names.append(name)
    return items, names


def _info_reader():
    """A struct.Struct that unpacks a voxconv_kmap_info_t's bytes into a
    flat tuple, and the index of each field path in it: KernelMap reads a
    map's info with one unpack instead of seven tuple() conversions of
    ctypes arrays and a dozen attribute reads (docs/perf-notes.md item 97)."""
    items, names = _struct_of(_lib.KmapInfo)
    fmt, pos = "=", 0
    for off, code in items:
        fmt += "x" * (off - pos) + code
        pos = off + (8 if code == "q" else 4)
    return struct.Struct(fmt), {n: i for i, n in enumerate(names)}


_INFO, _INFO_AT = _info_reader()


def _info_values(ptr):
    """voxconv_kmap_get_info as the flat tuple _INFO unpacks (index a field
    with _INFO_AT, or the _I_* constants below)."""
    info = _lib.KmapInfo()
    _lib.call("voxconv_kmap_get_info", ptr, ctypes.byref(info))
    return _INFO.unpack_from(info)


(_I_MODE, _I_KS, _I_STRIDE, _I_DIL, _I_PADDED, _I_PAD, _I_OUT_SHAPE, _I_ORDER, _I_KVOL,
 _I_N_IN, _I_N_OUT, _I_N_PAIRS, _I_IN_TS, _I_OUT_TS) = (
    _INFO_AT[n] for n in ("desc.mode", "desc.kernel_size[0]", "desc.stride[0]",
                          "desc.dilation[0]", "desc.padded", "desc.padding[0]",
                          "desc.out_shape[0]", "desc.offset_order", "kernel_volume", "n_in",
                          "n_out", "n_pairs", "in_tensor_stride[0]", "out_tensor_stride[0]"))


class KernelMap:
    """A built kernel map. Attributes: ``mode`` (int), ``kernel_size``,
    ``stride``, ``dilation`` (3-tuples), ``kernel_volume``, ``n_in``,
    ``n_out``, ``n_pairs``, ``in_tensor_stride``, ``out_tensor_stride``,
    ``device``, and ``id`` (a process-unique integer).

    A CUDA submanifold map is built without waiting for the GPU:
    ``n_pairs`` then waits for the build the first time it is read (see
    ``voxconv_kmap_wait`` in voxconv.h), and bad coordinates are reported
    by the first op on the map after the GPU has checked them."""

    def __init__(self, handle, mode, kernel_size, stride, dilation,
                 in_coords, in_tensor_stride, out_coords=None, out_tensor_stride=None,
                 padding=None, out_shape=None, inverse_of=None, defer=False, order=0,
                 in_bounds=None):
        ptr = ctypes.c_void_p()
        if inverse_of is not None:
            # voxconv_kmap_inverse: built from the forward map's tables
            # (mode TRANSPOSED, outputs = the forward's inputs).
            inverse_of.use_on(handle)
            handle.call("voxconv_kmap_inverse", ctypes.c_void_p(inverse_of.ptr),
                        ctypes.byref(ptr))
        else:
            desc = _desc_ref(mode, kernel_size, stride, dilation, padding, out_shape, order)
            cin = _runtime.coords_struct(in_coords, in_tensor_stride)
            cout = (_runtime.coords_struct(out_coords, out_tensor_stride)
                    if out_coords is not None else None)
            # defer: voxconv_kmap_build_async (a CUDA STRIDED build does
            # not wait for its output count; n_out waits when first read)
            if in_bounds is not None:
                # a strided build told its rows' bounds sorts compact keys
                # (voxconv_kmap_build_bounded; perf-notes item 109)
                handle.call("voxconv_kmap_build_bounded", desc, ctypes.byref(cin),
                            ctypes.byref(in_bounds), 1 if defer else 0, ctypes.byref(ptr))
            else:
                handle.call("voxconv_kmap_build_async" if defer else "voxconv_kmap_build",
                            desc, ctypes.byref(cin),
                            ctypes.byref(cout) if cout is not None else None,
                            ctypes.byref(ptr))
        self.ptr = ptr.value
        self.handle = handle
        self.device = handle.device
        # Streams whose ops used the map (see _destroy_kmap); the building
        # stream is ordered with itself.
        self._users = [handle.stream]
        self._last_user = handle.stream
        self.ready = None  # event on the map stream after the build
        # A build the handle's build worker took: ordered through the
        # library, and its input coordinates kept until the map goes (see
        # the module doc, Build worker).
        self._lib_order = (handle.worker and inverse_of is None
                           and (mode == _lib.KMAP_SUBMANIFOLD
                                or (defer and mode == _lib.KMAP_STRIDED)))
        # Held in a list the map empties once the worker has issued the
        # build (_issued): a later call returns only after that, and then
        # the coordinates may go. Kept to the map's end they chained a
        # pooled level's rows to the map that made them, level after level.
        self._keep = [in_coords] if self._lib_order else None
        self._finalizer = weakref.finalize(self, _destroy_kmap, handle, self.ptr, self._users,
                                           self._keep)
        self._finalizer.atexit = False
        v = _info_values(self.ptr)
        self.mode = v[_I_MODE] if inverse_of is not None else mode
        self.kernel_size = v[_I_KS:_I_KS + 3]
        self.stride = v[_I_STRIDE:_I_STRIDE + 3]
        self.dilation = v[_I_DIL:_I_DIL + 3]
        # None: centred offsets (padded = 0); out_shape None: unbounded
        self.padding = v[_I_PAD:_I_PAD + 3] if v[_I_PADDED] else None
        out_shape = v[_I_OUT_SHAPE:_I_OUT_SHAPE + 3]
        self.out_shape = out_shape if any(out_shape) else None
        self.offset_order = v[_I_ORDER]
        self.inverse = inverse_of is not None
        self.kernel_volume = v[_I_KVOL]
        self.n_in, self._n_out, self._n_pairs = v[_I_N_IN], v[_I_N_OUT], v[_I_N_PAIRS]
        self.in_tensor_stride = v[_I_IN_TS:_I_IN_TS + 3]
        self.out_tensor_stride = v[_I_OUT_TS:_I_OUT_TS + 3]
        self.id = next(_ids)
        _registry[self.id] = self

    def out_bounds(self):
        """A strided map's output bounds (voxconv_kmap_out_bounds, a
        ``_lib.CoordsBounds``), read after its count (which waits for a
        deferred build, as ``n_out`` does); None for other modes."""
        if self.mode != _lib.KMAP_STRIDED:
            return None
        self.n_out  # noqa: B018 -- the count first (the bounds come with it)
        b = _lib.CoordsBounds()
        _lib.call("voxconv_kmap_out_bounds", self.ptr, ctypes.byref(b))
        return b

    @property
    def n_pairs(self):
        """The number of (input, output, offset) pairs. For a map still
        being built on the GPU this waits for the build (and raises its
        error if the coordinates were bad)."""
        if self._n_pairs < 0:
            self.wait()
        return self._n_pairs

    @property
    def n_out(self):
        """The number of output rows. A deferred strided map (built with
        ``defer=True``, voxconv_kmap_build_async) learns it from the GPU:
        the first read waits for the build, if the GPU has not finished it."""
        if self._n_out < 0:
            self.wait()
        return self._n_out

    def wait(self):
        """Waits for the map's build on the GPU (not for later work) and
        completes it: n_out and n_pairs are known afterwards. Raises the
        build's error if its coordinates were bad."""
        self.handle.call("voxconv_kmap_wait", ctypes.c_void_p(self.ptr))
        self._issued()
        v = _info_values(self.ptr)
        self._n_out, self._n_pairs = v[_I_N_OUT], v[_I_N_PAIRS]

    def use_on(self, handle):
        """Orders `handle`'s stream after the map's build (once per stream);
        every op calls it before using the map."""
        if handle.stream != self._last_user:
            self._first_use(handle)

    def _first_use(self, handle):
        self._last_user = handle.stream
        if handle.stream in self._users:
            return
        self._users.append(handle.stream)
        if self.ready is not None:
            _handle_stream(handle).wait_event(self.ready)
        elif self._lib_order:
            handle.call("voxconv_kmap_order", ctypes.c_void_p(self.ptr))
            self._issued()

    def _issued(self):
        """The worker has issued the build (a use of the map returned):
        its input coordinates need not stay (voxconv_handle_set_build_worker)."""
        if self._keep:
            self._keep.clear()

    def prepare(self, handle, what):
        """voxconv_kmap_prepare on `handle` (the building stream's): the
        tables ops would make on first use (_lib.PREPARE_*), queued now."""
        handle.call("voxconv_kmap_prepare", ctypes.c_void_p(self.ptr), what)

    def mark_ready(self, stream):
        """Records ``ready`` on the building stream `stream` after the build
        (nothing for a build worker's map, which the library orders)."""
        if not self._lib_order:
            self.ready = torch.cuda.Event()
            self.ready.record(stream)

    def out_coords(self):
        """A new int32 [n_out, 4] tensor (on the map's device) with the
        output coordinates, copied out of the map on the current stream."""
        src = ctypes.c_void_p()
        _lib.call("voxconv_kmap_out_coords", self.ptr, ctypes.byref(src))
        out = torch.empty((self.n_out, 4), dtype=torch.int32, device=self.device)
        if self.n_out:  # on the current stream, where `out` was allocated
            h = _runtime.handle_for(self.device)
            self.use_on(h)
            h.call("voxconv_memcpy", _runtime.ptr(out), src, self.n_out * 16,
                   _lib.MEMCPY_BACKEND_TO_BACKEND)
        return out

    def pairs(self):
        """(offsets int64 [K+1] on the CPU, in_rows int32 [P], out_rows int32
        [P] on the map's device): pairs of offset k are in_rows/out_rows
        [offsets[k]:offsets[k+1]], sorted by output row."""
        n = self.n_pairs
        offsets = torch.empty(self.kernel_volume + 1, dtype=torch.int64)
        in_rows = torch.empty(n, dtype=torch.int32, device=self.device)
        out_rows = torch.empty(n, dtype=torch.int32, device=self.device)
        h = _runtime.handle_for(self.device)
        self.use_on(h)
        h.call("voxconv_kmap_get_pairs", ctypes.c_void_p(self.ptr), _runtime.ptr(offsets),
               _runtime.ptr(in_rows), _runtime.ptr(out_rows))
        return offsets, in_rows, out_rows

    def verify(self, coords, tensor_stride=(1, 1, 1)):
        """Raises KmapMismatchError unless `coords` are the map's input."""
        coords = _validate.coords(coords, "KernelMap.verify", device=self.device)
        c = _runtime.coords_struct(coords, _validate.int_triple(tensor_stride,
                                                                "tensor_stride"))
        h = _runtime.handle_for(self.device)
        self.use_on(h)
        h.call("voxconv_kmap_verify", ctypes.c_void_p(self.ptr), ctypes.byref(c))

    def __repr__(self):
        pairs = self._n_pairs if self._n_pairs >= 0 else "pending"
        n_out = self._n_out if self._n_out >= 0 else "pending"
        extra = "".join((f", padding={self.padding}" if self.padding is not None else "",
                         f", out_shape={self.out_shape}" if self.out_shape is not None else "",
                         ", inverse" if self.inverse else ""))
        return (f"KernelMap({MODE_NAMES.get(self.mode, self.mode)}, kernel={self.kernel_size}, "
                f"stride={self.stride}, dilation={self.dilation}{extra}, n_in={self.n_in}, "
                f"n_out={n_out}, pairs={pairs}, device={self.device})")


_descs = {}  # geometry -> byref(voxconv_kmap_desc_t), see _desc_ref
_DESCS_MAX = 256


def _desc_ref(mode, kernel_size, stride, dilation, padding, out_shape, order):
    """byref(voxconv_kmap_desc_t) of a geometry, made once per distinct one:
    the library copies the desc at the build call (the build worker reads
    the map's copy), so one struct serves every build of that geometry
    instead of ~4 us of ctypes construction per map (CPU-measured)."""
    key = (mode, tuple(kernel_size), tuple(stride), tuple(dilation),
           None if padding is None else tuple(padding),
           None if out_shape is None else tuple(out_shape), order)
    ref = _descs.get(key)
    if ref is None:
        desc = _lib.KmapDesc(mode, _lib.c_int32_3(*kernel_size),
                             _lib.c_int32_3(*stride), _lib.c_int32_3(*dilation))
        if padding is not None:  # None: centred offsets (padded = 0)
            desc.padded = 1
            desc.padding = _lib.c_int32_3(*padding)
        if out_shape is not None:
            desc.out_shape = _lib.c_int32_3(*out_shape)
        desc.offset_order = order  # 0 x slowest, 1 x fastest (ME)
        if len(_descs) >= _DESCS_MAX:
            _descs.clear()
        ref = _descs[key] = ctypes.byref(desc)  # the byref keeps desc alive
    return ref


def kmap_by_id(kmap_id):
    k = _registry.get(kmap_id)
    if k is None:
        raise errors.InvalidArgumentError(f"kernel map #{kmap_id} no longer exists")
    return k


class CoordinateSet:
    """One set of coordinates (int32 [N, 4], contiguous, on one device) at
    one tensor stride, with its cached kernel maps and derived sets.
    ``stream``: the raw CUDA stream the coordinates were made on, when it
    is the map stream (None: the caller's; see the module doc)."""

    def __init__(self, manager, coords, tensor_stride, stream=None, parent=None,
                 path=None):
        self.manager = manager
        self.coords = coords
        # torch's in-place counter of the rows when the set was made: a
        # later in-place write (coords[:, 1] += 1, a reused buffer's copy_)
        # would leave every cached and prefetched map describing the old
        # rows, so a lookup checks it (_check_rows). Inference tensors keep
        # no counter (None: not checked; torch refuses their in-place
        # writes outside inference mode).
        self.version = None if coords.is_inference() else coords._version
        self.tensor_stride = tuple(tensor_stride)
        # References run one way only, so that a forward's sets and maps go
        # (with their GPU memory) when its last tensor does, not at the
        # next garbage collection: a set holds its manager and the set it
        # was derived from (`parent`: a coarse tensor keeps the finer levels
        # that transposed convolutions find by stride); the manager and a
        # parent hold their sets weakly (CoordinateManager.sets, children,
        # and the output set of each cached map in `kmaps`).
        self.parent = parent
        self.kmaps = {}  # key -> (KernelMap, weakref to the output set)
        self.children = weakref.WeakValueDictionary()
        self.stream = stream
        self.ready = None  # event after which the coordinates are valid
        # How the set was made (its map-plan key, see _MapPlan), and the
        # maps built for it ahead of their first request (key -> (KernelMap,
        # the plan entry's stamp then))
        self.path = path
        self.prefetched = {}
        # Its rows' bounds (_lib.CoordsBounds) when the set is a strided
        # map's outputs, which that map's build computed: the set's own
        # strided builds then sort compact keys (item 109). None otherwise.
        self.bounds = None

    def __len__(self):
        return self.coords.shape[0]

    def __del__(self):
        # Maps prefetched for this set and never asked for: drop them from
        # the plan, so that later sets made the same way do not build them.
        if getattr(self, "prefetched", None):
            try:
                _plan.forget(self.path, [(k, v[1]) for k, v in self.prefetched.items()])
            except Exception:  # noqa: BLE001 - at interpreter shutdown
                pass
        # Every set's maps go now, before its attributes do: the parent
        # reference is released with them, and a parent that goes then
        # must find its children's maps already dropped. (Left to the
        # attributes' release, a derived set's maps went after its
        # parent's, so a dropped forward's deeper levels waited in
        # _dropped for the next flush, inside the next forward: 11 of
        # workload A's 13 maps, 90-140 us of its host time, and more once
        # maps keep one another alive; docs/perf-notes.md item 105.)
        try:
            self.kmaps.clear()
            self.prefetched.clear()
        except Exception:  # noqa: BLE001 - at interpreter shutdown
            pass
        # A set without a parent goes last of its family (every derived set
        # holds its parent): the end of a dropped forward. The family's
        # batch is freed here, when the caller drops its output, not at the
        # start of its next forward (where the host time would delay that
        # forward's first launch).
        if getattr(self, "parent", 1) is None and _dropped:
            try:
                flush_dropped()
            except Exception:  # noqa: BLE001 - at interpreter shutdown
                pass


class _MapPlan:
    """Which kernel maps the sets made a given way were asked for, so that
    the next such set gets them built before they are asked for (map
    prefetch; CUDA with the map stream only).

    A set's path says how it was made: a registered input set by its
    tensor stride, a derived set by its parent's path plus the map key
    that made it. A network asks the same questions every forward (level
    0's submanifold map, its pooling map, level 1's ...), so when a new
    forward's set with a known path appears, the maps asked of the last
    such set are queued on the map stream at once -- submanifold maps as
    usual, strided ones deferred (voxconv_kmap_build_async: no host wait).
    The strided map's output count then reaches the host while the host
    issues that level's convolutions, and the pooling layer finds the map
    built: the host never waits for the chain of map builds, which is what
    bounded a PyTorch forward (docs/perf-notes.md item 67). A map
    prefetched and never asked for is forgotten when its set goes, unless a
    set made the same way asked for it since (entries carry a stamp of
    their last use: two networks fed alike do not erase each other's), so a
    plan follows the networks. VOXCONV_MAP_PREFETCH=0 turns it off."""

    PATHS_MAX = 512   # distinct set paths remembered (then it starts over)
    KEYS_MAX = 16     # maps remembered per path

    def __init__(self):
        self.lock = threading.Lock()
        # path -> {key: [kernel_map arguments, stamp of the last use]}, in
        # first-request order
        self.plans = {}
        self._clock = itertools.count(1)

    def learn(self, path, key, args):
        """A set made by `path` asked for `key` (built now or prefetched)."""
        plan = self.plans.get(path)
        entry = plan.get(key) if plan is not None else None
        if entry is not None:
            entry[1] = next(self._clock)
            return
        with self.lock:
            if len(self.plans) >= self.PATHS_MAX:
                self.plans.clear()
            plan = self.plans.setdefault(path, {})
            if len(plan) < self.KEYS_MAX:
                plan[key] = [args, next(self._clock)]

    def forget(self, path, items):
        """(key, stamp when prefetched) pairs a set never asked for: dropped
        unless used since."""
        with self.lock:
            plan = self.plans.get(path)
            if plan is not None:
                for k, stamp in items:
                    entry = plan.get(k)
                    if entry is not None and entry[1] <= stamp:
                        del plan[k]

    def get(self, path):
        """[(key, arguments, stamp)] of a path, in first-request order."""
        plan = self.plans.get(path)
        return [(k, e[0], e[1]) for k, e in list(plan.items())] if plan else ()


_plan = _MapPlan()

# The map modes a plan prefetches: those whose build needs no host wait
# (SUBMANIFOLD) or can leave its count on the GPU (STRIDED, deferred).
_PREFETCH_MODES = (_lib.KMAP_SUBMANIFOLD, _lib.KMAP_STRIDED)


def _prefetch_rank(mode, worker):
    """The sort key of a plan's maps in CoordinateManager._prefetch (the
    lower first), as measured on workload A (docs/perf-notes.md item 108):

    * with the build worker, strided maps first. The pooling layer at the
      level's end waits for the strided map's count, and while the host
      waits there the GPU runs out of work; queued behind the submanifold
      map, the strided build's issue (~250-450 us on the worker) overlapped
      the level's convolutions instead of preceding them, and the count
      came late: level 0's pooling layer waited 570-715 us and the forward
      took ~0.6 ms longer (s30 call 4); submanifold first on pooled levels
      only still made level 1's pooling layer wait ~240 us and forward +
      backward no faster (call 5). The price: each level's first
      convolution waits ~80-250 us for the worker to issue its
      submanifold map behind the strided one.
    * without the worker, submanifold maps first (the order since the map
      plan came; not measured against the other)."""
    strided = mode == _lib.KMAP_STRIDED
    return not strided if worker else strided


def _env_on(name):
    """An on-by-default switch: off when the variable reads 0, false, off
    or no (any case)."""
    return os.environ.get(name, "1").lower() not in ("0", "false", "off", "no")


def _prefetch_enabled():
    return _env_on("VOXCONV_MAP_PREFETCH")


def _prepare(ms, km, mode):
    """After a SUBMANIFOLD map's build (and its ready mark) on the map
    stream: its row orders -- and under autograd dgrad's and the pair
    lists -- made there too, beside the convolutions, rather than by the
    first convolution that needs them, in front of it (docs/perf-notes.md
    item 130). VOXCONV_MAP_PREPARE=0 leaves them to the convolutions."""
    if mode != _lib.KMAP_SUBMANIFOLD or not _env_on("VOXCONV_MAP_PREPARE"):
        return
    what = _lib.PREPARE_FORWARD
    if torch.is_grad_enabled():
        what |= _lib.PREPARE_DGRAD | _lib.PREPARE_PAIRS
    try:
        km.prepare(ms.handle, what)
    except errors.VoxconvError:
        pass  # only a head start: the op that needs a table makes it


class _MapStream:
    """The map stream of one CUDA device and its handle."""

    def __init__(self, device):
        lo, hi = torch.cuda.Stream.priority_range()
        # torch numbers priorities downwards: the smaller, the higher
        self.stream = torch.cuda.Stream(device=device, priority=min(lo, hi))
        self.handle = _runtime.handle_for_stream(device, self.stream.cuda_stream)
        if _map_worker_enabled():
            self.handle.call("voxconv_handle_set_build_worker", 1)
            self.handle.worker = True
            atexit.register(_stop_worker, self.handle)


def _map_worker_enabled():
    """VOXCONV_MAP_WORKER (default on; docs/perf-notes.md item 98)."""
    return _env_on("VOXCONV_MAP_WORKER")


def _set_map_worker(device, on):
    """Turns the map stream's build worker of `device` on or off (tests and
    A/B benchmarks; VOXCONV_MAP_WORKER sets it when the stream is made).
    Maps built before keep their ordering."""
    ms = map_stream(torch.device(device))
    if ms is not None:
        ms.handle.call("voxconv_handle_set_build_worker", 1 if on else 0)
        ms.handle.worker = bool(on)


def _stop_worker(handle):
    """At exit: the worker issues what it holds and stops before the
    interpreter (whose allocator callbacks it may call) goes."""
    try:
        handle.call("voxconv_handle_set_build_worker", 0)
        handle.worker = False
    except Exception:  # noqa: BLE001 - at shutdown
        pass


_map_streams = {}
_map_streams_lock = threading.Lock()


def _map_stream_enabled():
    return _env_on("VOXCONV_MAP_STREAM")


def map_stream(device):
    """The map stream of a CUDA device (None on the CPU, when disabled, or
    while the current stream is being captured)."""
    if device.type != "cuda" or not _map_stream_enabled():
        return None
    if torch.cuda.is_current_stream_capturing():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    ms = _map_streams.get(index)
    if ms is None:
        with _map_streams_lock:
            ms = _map_streams.get(index)
            if ms is None:
                ms = _map_streams[index] = _MapStream(torch.device("cuda", index))
    return ms


def _live(entry):
    """A kmaps cache entry (map, weak output set) as (map, output set), or
    None when there is none or its output set is gone (then the map is
    built again, with a new output set)."""
    if entry is None:
        return None
    out = entry[1]()
    return None if out is None else (entry[0], out)


def _map_key(mode, kernel_size, stride, dilation, out_id, padding, out_shape, order):
    """A coordinate set's cache key of the map with this geometry. Padding,
    out_shape and a non-default offset order extend the key only when
    given, so the keys of maps without them stay what they were (the map
    plan learns keys)."""
    key = (mode, tuple(kernel_size), tuple(stride), tuple(dilation), out_id)
    if padding is not None or out_shape is not None:
        key += (None if padding is None else tuple(padding),
                None if out_shape is None else tuple(out_shape))
    if order:
        key += (("order", order),)
    return key


def _check_rows(in_set):
    """Raises KmapMismatchError when in_set's rows were written in place
    after the set was made (torch's version counter moved): its maps
    describe the old rows."""
    if in_set.version is not None and in_set.coords._version != in_set.version:
        raise errors.KmapMismatchError(
            f"voxconv: the coordinates of this sparse tensor ({len(in_set)} rows) were "
            "modified in place after it was made (torch's version counter "
            f"{in_set.version} -> {in_set.coords._version}); its kernel maps describe the "
            "old rows. Make a new SparseTensor from the new coordinates instead.")


def cached_plain_map(in_set, key):
    """(kmap, output set) of in_set's cached map under ``key`` (what
    :func:`plain_map_key` gives), or None: the hit path of
    CoordinateManager.kernel_map without its key building, for callers
    that computed the key once (the conv modules). Raises
    KmapMismatchError when the set's rows were modified in place."""
    _check_rows(in_set)
    return _live(in_set.kmaps.get(key))


def plain_map_key(kernel_size, stride, dilation):
    """The kmaps key kernel_map uses for a centred submanifold (stride 1)
    or strided map: no output set, padding, out_shape or offset order.
    Normalised 3-tuples."""
    mode = _lib.KMAP_SUBMANIFOLD if tuple(stride) == (1, 1, 1) else _lib.KMAP_STRIDED
    return _map_key(mode, kernel_size, stride, dilation, None, None, None, 0)


def _bounds_enabled():
    """VOXCONV_STRIDED_BOUNDS: "1" (default) gives a strided map's output
    bounds to the strided builds on its outputs; "0" does not (the A/B of
    docs/perf-notes.md item 109: the maps are the same either way)."""
    return _env_on("VOXCONV_STRIDED_BOUNDS")


_pass_bounds = _bounds_enabled()


def _rows_view_enabled():
    """VOXCONV_DERIVED_ROWS: "copy" (default) or "view" (see the module doc)."""
    return os.environ.get("VOXCONV_DERIVED_ROWS", "copy").lower() == "view"


_rows_view = _rows_view_enabled()


class _MapRows:
    """A map's output rows as a tensor without a copy: torch.as_tensor over
    this object's __cuda_array_interface__ (no stream: torch neither waits
    nor synchronises; the caller orders the readers) keeps the object, and
    with it the map that owns the rows, alive as long as the tensor (and
    its views) live. Saves the copy a pooling layer makes of every new
    level (an allocation and a memcpy call, 25-30 us of host time on the
    lent host), but a caller who keeps a pooled level's coordinates keeps
    its whole map (~90 MB for workload A's level 1 against 2 MB of rows),
    so it is opt-in (docs/perf-notes.md item 107)."""

    __slots__ = ("km", "__cuda_array_interface__")

    def __init__(self, km, ptr, n):
        self.km = km
        self.__cuda_array_interface__ = {"shape": (n, 4), "typestr": "<i4",
                                         "data": (ptr, False), "version": 2}

    @classmethod
    def tensor(cls, km, consumer):
        """km's n_out output rows (int32 [n_out, 4], km's device), read on
        `consumer` too: the map is freed only after that stream's work
        queued until then (see _destroy_batch)."""
        n = km.n_out
        if not n:
            return torch.empty((0, 4), dtype=torch.int32, device=km.device)
        src = ctypes.c_void_p()
        _lib.call("voxconv_kmap_out_coords", km.ptr, ctypes.byref(src))
        raw = consumer.cuda_stream
        if raw not in km._users:
            km._users.append(raw)
        return torch.as_tensor(cls(km, src.value, n), device=km.device)


class CoordinateManager:
    """Shared by all sparse tensors derived from one input (see module doc)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self._sets = []  # weak references, in the order the sets were added
        self.by_stride = weakref.WeakValueDictionary()
        self.lock = threading.RLock()

    @property
    def sets(self):
        """The manager's coordinate sets still in use, oldest first (a set
        lives while a tensor on it, or a set derived from it, does)."""
        with self.lock:
            live = [s for s in (r() for r in self._sets) if s is not None]
            if len(live) < len(self._sets):
                self._sets = [weakref.ref(x) for x in live]
            return live

    def add(self, coords, tensor_stride, register=True, stream=None, *, _checked=False,
            _parent=None, _path=None):
        """Registers a coordinate set and returns it. ``coords``: an integer
        [N, 4] tensor on this manager's device. The library reads packed
        rows of 4 int32, so anything else (a column slice such as
        ``points[:, :4]``, a transposed view, int64) goes through
        ``_validate.coords`` first: range-checked, converted and copied to a
        contiguous int32 tensor (a view was misread as other rows before).
        A packed int32 tensor on the device is taken as is, as the
        internal callers pass it (six attribute reads, ~0.4 us; SparseTensor,
        which has just validated its coordinates, skips them with
        ``_checked=True``): the library range-checks it when it builds a
        map."""
        if not _checked and not (type(coords) is torch.Tensor and coords.dtype == torch.int32
                and coords.dim() == 2 and coords.shape[1] == 4
                and coords.is_contiguous() and coords.device == self.device):
            coords = _validate.coords(coords, "CoordinateManager.add", device=self.device)
        # An input set's plan path (_MapPlan); a derived set's comes from
        # the map that made it (_derive), which also prefetches for it.
        path = ("input", tuple(tensor_stride), bool(register)) if _parent is None else _path
        s = CoordinateSet(self, coords, tensor_stride, stream, _parent, path)
        with self.lock:
            if len(self._sets) > 64:
                self._sets = [r for r in self._sets if r() is not None]
            self._sets.append(weakref.ref(s))
            if register and self.by_stride.get(s.tensor_stride) is None:
                self.by_stride[s.tensor_stride] = s
        if _parent is None:
            if _dropped:  # the last forward's maps, before this one allocates
                flush_dropped()
            self._prefetch(s)
        return s

    def at_stride(self, tensor_stride):
        return self.by_stride.get(tuple(tensor_stride))

    def kernel_map(self, in_set, mode, kernel_size, stride, dilation, out_set=None,
                   padding=None, out_shape=None, order=0):
        """The cached (or newly built) map from in_set with this geometry.
        Returns (kmap, out_set); for strided, expanding and generative maps
        the output set is derived (and cached) from the map's output
        coordinates. ``padding``: None (centred offsets, the desc's padded =
        0) or a 3-tuple (padded = 1); ``out_shape``: None (unbounded) or a
        3-tuple (0 = unbounded axis), EXPANDING and GENERATIVE only. Both
        are part of the cache key (only when given, so the keys of maps
        without them are unchanged). ``order``: the desc's offset_order (0
        voxconv's, 1 MinkowskiEngine's x-fastest numbering of the same
        pairs), in the key when not 0."""
        _check_rows(in_set)
        key = _map_key(mode, kernel_size, stride, dilation,
                       id(out_set) if out_set is not None else None, padding, out_shape, order)
        hit = _live(in_set.kmaps.get(key))  # dict reads are atomic: no lock on a hit
        if hit is not None:
            return hit
        if _dropped:
            flush_dropped()
        with self.lock:
            hit = _live(in_set.kmaps.get(key))
            if hit is not None:
                return hit
            ms = map_stream(self.device)
            pre = in_set.prefetched.pop(key, None)
            if ms is None:
                hit = self._build(_runtime.handle_for(self.device), None, in_set, mode,
                                  kernel_size, stride, dilation, out_set, padding, out_shape,
                                  key=key, order=order)
            elif pre is not None:
                hit = self._adopt(ms, pre[0], in_set, mode, stride, key)
            else:
                hit = self._build_on_map_stream(ms, in_set, mode, kernel_size, stride,
                                                dilation, out_set, padding, out_shape,
                                                key=key, order=order)
            in_set.kmaps[key] = (hit[0], weakref.ref(hit[1]))
            if ms is not None and mode in _PREFETCH_MODES and out_set is None:
                # (a prefetched map's entry is stamped as used again)
                _plan.learn(in_set.path, key, (mode, tuple(kernel_size), tuple(stride),
                                               tuple(dilation), padding, out_shape, order))
        if hit[1] is not in_set and hit[1].path is not None and hit[1].path[-1] is key:
            self._prefetch(hit[1])  # a set this call made: its maps, early
        return hit

    def inverse_kernel_map(self, in_set, mode, kernel_size, stride, dilation,
                           padding=None, out_shape=None, order=0):
        """The inverse (voxconv_kmap_inverse) of the STRIDED or EXPANDING map
        that ``kernel_map(in_set, mode, ...)`` returns: its inputs are that
        map's outputs and its outputs are ``in_set`` itself (spconv's
        SparseInverseConv3d). Returns (inverse kmap, in_set); cached in
        in_set next to the forward map. The forward map is the cached one
        (built now if the forward convolution has not run)."""
        _check_rows(in_set)
        fkey = _map_key(mode, kernel_size, stride, dilation, None, padding, out_shape, order)
        key = ("inverse",) + fkey
        hit = _live(in_set.kmaps.get(key))
        if hit is not None:
            return hit
        fwd, _ = self.kernel_map(in_set, mode, kernel_size, stride, dilation, None,
                                 padding, out_shape, order)
        with self.lock:
            hit = _live(in_set.kmaps.get(key))
            if hit is not None:
                return hit
            ms = map_stream(self.device)
            # No tensor is allocated (the outputs are in_set): no stream
            # switch; on the map stream it follows the forward's build.
            handle = ms.handle if ms is not None else _runtime.handle_for(self.device)
            km = KernelMap(handle, _lib.KMAP_TRANSPOSED, kernel_size, stride, dilation,
                           None, None, inverse_of=fwd)
            if ms is not None:
                km.ready = torch.cuda.Event()
                km.ready.record(ms.stream)
            in_set.kmaps[key] = (km, weakref.ref(in_set))
            return km, in_set

    def _map_stream_waits(self, ms, in_set, out_set=None):
        """Orders the map stream after the making of the sets a build reads;
        returns the caller's (consumer) stream."""
        consumer = _handle_stream(_runtime.handle_for(self.device))
        for s in (in_set, out_set):
            if s is not None and s.stream != ms.handle.stream:
                if s.ready is None:  # made on the caller's stream, before now
                    s.ready = torch.cuda.Event()
                    s.ready.record(consumer)
                    # The map stream reads these coordinates: their block
                    # must not return to the caller's stream's pool before
                    # the map stream's queued builds have read them (a set
                    # can go while its maps are still queued there, e.g. a
                    # prefetched map nobody asks for). Once per set: the
                    # allocator orders the free after everything the map
                    # stream queued until then.
                    s.coords.record_stream(ms.stream)
                ms.stream.wait_event(s.ready)
        return consumer

    def _build_on_map_stream(self, ms, in_set, mode, kernel_size, stride, dilation,
                             out_set, padding=None, out_shape=None, key=None, order=0):
        consumer = self._map_stream_waits(ms, in_set, out_set)
        if mode in _DERIVING_MODES:
            # Under the map stream: derived coordinates are allocated there,
            # so the map stream may write them at once (torch hands a block
            # to the stream it was allocated on, ordered after that stream's
            # last use). Other modes allocate no tensor: no stream switch.
            with torch.cuda.stream(ms.stream):
                km, made = self._build(ms.handle, consumer, in_set, mode, kernel_size,
                                       stride, dilation, out_set, padding, out_shape, key,
                                       order)
        else:
            km, made = self._build(ms.handle, consumer, in_set, mode, kernel_size, stride,
                                   dilation, out_set, padding, out_shape, key, order)
        km.mark_ready(ms.stream)
        _prepare(ms, km, mode)
        return km, made

    def _prefetch(self, s):
        """Queues on the map stream the maps the plan says a set made like
        `s` will be asked for (see _MapPlan); no host wait."""
        plan = _plan.get(s.path) if s.path is not None else ()
        if not plan or not _prefetch_enabled():
            return
        ms = map_stream(self.device)
        if ms is None:
            return
        worker = ms.handle.worker
        plan = sorted(plan, key=lambda kv: _prefetch_rank(kv[1][0], worker))
        with self.lock:
            ordered = False
            for key, (mode, kernel_size, stride, dilation, padding, out_shape, order), stamp \
                    in plan:
                if key in s.prefetched or _live(s.kmaps.get(key)) is not None:
                    continue
                if not ordered:
                    self._map_stream_waits(ms, s)
                    ordered = True
                try:
                    km = KernelMap(ms.handle, mode, kernel_size, stride, dilation, s.coords,
                                   s.tensor_stride, padding=padding, out_shape=out_shape,
                                   defer=mode == _lib.KMAP_STRIDED, order=order,
                                   in_bounds=s.bounds if mode == _lib.KMAP_STRIDED else None)
                except errors.VoxconvError:
                    # Only an optimisation: the request builds the map
                    # again and raises there, where the caller expects it.
                    return
                km.mark_ready(ms.stream)
                _prepare(ms, km, mode)
                s.prefetched[key] = (km, stamp)

    def _adopt(self, ms, km, in_set, mode, stride, key):
        """A prefetched map at its first request: (km, output set). A strided
        map's output set is made now (its count, read here, has usually
        arrived while the host issued this level's work), on the map
        stream, and km.ready moves after it (no op has used km yet)."""
        if mode == _lib.KMAP_SUBMANIFOLD:
            return km, in_set
        consumer = _handle_stream(_runtime.handle_for(self.device))
        with torch.cuda.stream(ms.stream):
            out_set = self._derive(km, consumer, in_set, mode, stride, ms.handle.stream, key)
        # (a build worker's map too: reading its count drained the worker,
        # so the build precedes this event on the map stream)
        km.ready = torch.cuda.Event()
        km.ready.record(ms.stream)
        return km, out_set

    def _build(self, handle, consumer, in_set, mode, kernel_size, stride, dilation,
               out_set, padding=None, out_shape=None, key=None, order=0):
        """Builds on `handle` (the map stream's when `consumer`, the stream
        the caller runs its ops on, is given)."""
        if mode == _lib.KMAP_TRANSPOSED:
            km = KernelMap(handle, mode, kernel_size, stride, dilation,
                           in_set.coords, in_set.tensor_stride,
                           out_set.coords, out_set.tensor_stride, padding=padding,
                           order=order)
            return km, out_set
        km = KernelMap(handle, mode, kernel_size, stride, dilation,
                       in_set.coords, in_set.tensor_stride, padding=padding,
                       out_shape=out_shape, order=order,
                       in_bounds=in_set.bounds if mode == _lib.KMAP_STRIDED else None)
        made_on = handle.stream if consumer is not None else None
        return km, self._derive(km, consumer, in_set, mode, stride, made_on, key)

    def _derive(self, km, consumer, in_set, mode, stride, made_on, key):
        """The output set of a new map (made from its output coordinates);
        its path extends in_set's by the map's key."""
        if mode == _lib.KMAP_SUBMANIFOLD:
            return in_set
        path = None if in_set.path is None or key is None else in_set.path + (key,)
        if mode == _lib.KMAP_STRIDED:
            # Outputs are unique floor(c / s): they depend on the stride
            # only, so every strided map of a set shares one output set.
            ckey = ("strided", tuple(stride))
            out_set = in_set.children.get(ckey)
            if out_set is None:
                out_set = self.add(self._derived_coords(km, consumer),
                                   km.out_tensor_stride, stream=made_on, _parent=in_set,
                                   _path=path)
                if _pass_bounds:
                    out_set.bounds = km.out_bounds()
                in_set.children[ckey] = out_set
            return out_set
        if mode == _lib.KMAP_GENERATIVE:
            return self.add(self._derived_coords(km, consumer), km.out_tensor_stride,
                            register=False, stream=made_on, _parent=in_set, _path=path)
        # EXPANDING: outputs depend on kernel, padding and out_shape too: one
        # set per map (the map cache key). Registered at its stride when it
        # is the first there, as the encoder level a transposed convolution
        # finds (a strided level is registered the same way).
        return self.add(self._derived_coords(km, consumer), km.out_tensor_stride,
                        stream=made_on, _parent=in_set, _path=path)

    @staticmethod
    def _derived_coords(km, consumer):
        if consumer is not None and _rows_view:
            c = _MapRows.tensor(km, consumer)
        else:
            c = km.out_coords()
            if consumer is not None:
                c.record_stream(consumer)  # read there: not reused before it is done
        if consumer is not None:
            # ...and valid there: SparseTensor.coords hands this tensor to
            # the caller's code (.cpu(), printing, indexing) on the consumer
            # stream, which nothing else ordered after the copy just queued
            # on the map stream (ops wait for km.ready, user code did not:
            # a pooled tensor's coordinates could be read before they were
            # written). The op that asked for the map waits at this point
            # anyway, so no overlap is lost.
            written = torch.cuda.Event()
            written.record()  # the current stream: the map stream here
            consumer.wait_event(written)
        return c
