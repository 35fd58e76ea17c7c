"""Handles and the bridge between torch tensors and the C structs.

One voxconv handle per (device type, device index, stream) is created on
first use and cached. CPU tensors use the CPU handle. CUDA tensors use the
handle of their device and of its current stream (the stream is fixed when
the handle is made, so no call re-binds it), and its allocator routes every
temporary buffer of the library through PyTorch's caching allocator
(``torch.cuda.caching_allocator_alloc`` / ``..._delete``), so the library's
scratch memory is pooled and stream-ordered with the rest of the model.

A voxconv handle may be used by one thread at a time, and ctypes releases
the GIL during calls, so each handle carries a lock held for the duration
of a call and the read of its error message.

The per-call path is kept short (issue: a conv call from Python must cost
about as much host time as the C call): the current stream comes from
``torch._C._cuda_getCurrentRawStream`` when torch has it (the raw handle
inductor uses; ``torch.cuda.current_stream`` builds a Stream object), and
each handle owns scratch ``voxconv_feats_t`` / ``voxconv_weights_t``
structs that the ops fill in place under the handle's lock instead of
allocating new ctypes objects per call.
"""

import ctypes
import threading
import weakref

import torch

from . import _lib
from ._lib import lib
from . import errors

_DTYPES = {
    torch.float32: _lib.DTYPE_F32,
    torch.float16: _lib.DTYPE_F16,
    torch.bfloat16: _lib.DTYPE_BF16,
    torch.float64: _lib.DTYPE_F64,
    # int8 features: the quantized layers (voxconv.quantization) and max
    # pooling take them; the float ops refuse them by name (library status)
    torch.int8: _lib.DTYPE_I8,
}


def dtype_code(dtype, what="features"):
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise errors.DtypeMismatchError(
            f"{what}: dtype {dtype} is not supported (float32, float16, "
            f"bfloat16, float64 on the CPU, or int8 for the quantized layers "
            f"and max pooling)") from None


def _destroy_handle(ptr, keepalive):
    del keepalive  # the allocator callbacks must outlive the handle
    lib.voxconv_destroy(ptr)


class Handle:
    """A voxconv_handle_t for one (device, stream)."""

    def __init__(self, device, stream=0):
        self.device = device
        self.stream = stream
        self.torch_stream = None  # kmap._handle_stream: made on first use
        self.worker = False  # a build worker issues its builds (kmap._MapStream)
        self.lock = threading.RLock()
        desc = _lib.HandleDesc()
        keepalive = None
        if device.type == "cuda":
            desc.backend = _lib.BACKEND_CUDA
            desc.device = device.index
            desc.stream = stream or None
            keepalive = _torch_cuda_allocator(device.index)
            desc.allocator = ctypes.pointer(keepalive)
        elif device.type == "cpu":
            desc.backend = _lib.BACKEND_CPU
        else:
            raise errors.BackendUnavailableError(
                f"tensors on {device} are not supported (cpu or cuda)")
        ptr = ctypes.c_void_p()
        _lib.raise_for_status(lib.voxconv_create(ctypes.byref(ptr), ctypes.byref(desc)),
                              None, f"voxconv_create({device})")
        self.ptr = ptr.value
        self._finalizer = weakref.finalize(self, _destroy_handle, self.ptr, keepalive)
        # Leave handles alone at interpreter exit: torch's CUDA state may be
        # gone by then and the process is ending anyway.
        self._finalizer.atexit = False
        # Scratch argument structs of the fast paths (_ops), filled under
        # self.lock; the byref objects are made once. fa, fb, fc and wt are
        # views of one block, which _ops fills with one struct.pack_into.
        self.args = _lib.ArgBlock()
        self.fa, self.fb, self.fc = self.args.fa, self.args.fb, self.args.fc
        self.wt = self.args.wt
        self.ra, self.rb, self.rc = (ctypes.byref(self.fa), ctypes.byref(self.fb),
                                     ctypes.byref(self.fc))
        # pooling and unpooling: up to four feature arrays in a row, filled
        # with one struct.pack_into too (_ops._launch_feats)
        self.pool_args = (_lib.Feats * 4)()
        self.pool_refs = tuple(ctypes.byref(self.pool_args[i]) for i in range(4))
        self.rw = ctypes.byref(self.wt)

    def call(self, name, *args):
        """Calls lib.<name>(handle, *args); raises on a non-zero status."""
        global _last_handle
        fn = getattr(lib, name)
        with self.lock:
            status = fn(self.ptr, *args)
            _last_handle = self
            if status != 0:
                _lib.raise_for_status(status, self.ptr, name)

    def __repr__(self):
        return f"<voxconv handle {self.device} stream={self.stream:#x}>"


_allocators = {}  # device index -> its voxconv_allocator_t (never freed)
_allocators_lock = threading.Lock()


def _torch_cuda_allocator(device_index):
    """The voxconv_allocator_t of a device, whose callbacks use torch's
    caching allocator: one per device, shared by all its handles (the
    library requires handles that share kernel maps to have the same
    alloc, free and ctx). Exceptions never cross into C: a failure returns
    NULL and the library reports VOXCONV_STATUS_ALLOC_FAILED with its own
    context."""
    with _allocators_lock:
        a = _allocators.get(device_index)
        if a is None:
            a = _allocators[device_index] = _make_torch_cuda_allocator(device_index)
        return a


def _make_torch_cuda_allocator(device_index):
    # The library calls these with its handle's device current (it sets it
    # around every call), so torch's raw entry points, which allocate on the
    # current device, are used directly: the public wrappers add a device
    # guard and argument checks that cost more than the allocation. The
    # library also keeps freed blocks for reuse (voxconv_allocator_t), so
    # these run mostly while a workload warms up. The entry points are
    # looked up at each call (the allocator lives as long as the process,
    # and tests count the calls by replacing them).
    C = torch._C
    fast = all(hasattr(C, n) for n in ("_cuda_cudaCachingAllocator_raw_alloc",
                                       "_cuda_cudaCachingAllocator_raw_delete",
                                       "_cuda_getDevice"))

    def alloc(_ctx, nbytes, stream):
        try:
            if fast and C._cuda_getDevice() == device_index:
                return C._cuda_cudaCachingAllocator_raw_alloc(max(int(nbytes), 1), stream or 0)
            return torch.cuda.caching_allocator_alloc(
                max(int(nbytes), 1), device=device_index, stream=stream or 0)
        except Exception:  # noqa: BLE001 - OOM and friends become NULL
            return None

    def free(_ctx, ptr, _stream):
        try:
            if ptr:
                if fast:
                    C._cuda_cudaCachingAllocator_raw_delete(ptr)
                else:
                    torch.cuda.caching_allocator_delete(ptr)
        except Exception:  # noqa: BLE001 - nothing sensible to do in a free
            pass

    a = _lib.Allocator()
    a.alloc = _lib.ALLOC_FN(alloc)
    a.free = _lib.FREE_FN(free)
    a.ctx = None
    return a


_handles = {}
_handles_lock = threading.Lock()
_last_handle = None


try:  # the raw cudaStream_t of the current stream, without a Stream object
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

_cuda_devices = {}


def _cuda_handle(index, stream):
    h = _handles.get(("cuda", index, stream))
    if h is None:
        with _handles_lock:
            h = _handles.get(("cuda", index, stream))
            if h is None:
                dev = _cuda_devices.get(index)
                if dev is None:
                    dev = _cuda_devices[index] = torch.device("cuda", index)
                h = Handle(dev, stream)
                _handles[("cuda", index, stream)] = h
    return h


def empty_cache():
    """Gives the blocks every handle keeps for reuse back to torch's caching
    allocator (see voxconv.empty_cache)."""
    with _handles_lock:
        hs = list(_handles.values())
    for h in hs:
        if h.device.type == "cuda":
            h.call("voxconv_release_cached_memory")


def handle_for(device):
    """The cached handle for a torch device (and, on CUDA, the current
    stream of that device)."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _cuda_handle(index, _raw_stream(index))
    return handle_for_cpu() if device.type == "cpu" else Handle(device)


def handle_for_cpu():
    h = _handles.get(("cpu", -1, 0))
    if h is None:
        with _handles_lock:
            h = _handles.get(("cpu", -1, 0))
            if h is None:
                h = _handles[("cpu", -1, 0)] = Handle(torch.device("cpu"), 0)
    return h


def handle_for_tensor(t):
    """handle_for(t.device), on the fast path of every op."""
    index = t.get_device()
    if index < 0:
        return handle_for_cpu() if t.device.type == "cpu" else handle_for(t.device)
    return _cuda_handle(index, _raw_stream(index))


def handle_for_stream(device, stream):
    """The handle of an explicit CUDA stream (raw cudaStream_t) of `device`."""
    return _cuda_handle(torch.device(device).index, stream)


def last_handle():
    """The handle used by the most recent library call (any thread)."""
    return _last_handle


# ---- tensors -> C structs ------------------------------------------------------
def ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t.numel() else None


def set_feats(f, t):
    """Fills a scratch voxconv_feats_t from a contiguous 2-D tensor."""
    f.data = t.data_ptr() or None
    f.rows, f.channels = t.shape
    f.dtype = _DTYPES[t.dtype]


def set_weights(wt, t):
    wt.data = t.data_ptr() or None
    wt.kvol, wt.cin, wt.cout = t.shape
    wt.dtype = _DTYPES[t.dtype]


def feats_struct(t, what="features"):
    """A voxconv_feats_t over a contiguous 2-D tensor."""
    if t.dim() != 2:
        raise errors.ShapeMismatchError(
            f"{what}: expected a 2-D [rows, channels] tensor, got shape {tuple(t.shape)}")
    if not t.is_contiguous():  # callers make tensors contiguous; a bug otherwise
        raise errors.InvalidArgumentError(f"{what}: tensor is not contiguous")
    return _lib.Feats(ptr(t), t.shape[0], t.shape[1], dtype_code(t.dtype, what))


def weights_struct(t, what="weight"):
    if t.dim() != 3:
        raise errors.ShapeMismatchError(
            f"{what}: expected [kernel_volume, in_channels, out_channels], got "
            f"shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise errors.InvalidArgumentError(f"{what}: tensor is not contiguous")
    return _lib.Weights(ptr(t), t.shape[0], t.shape[1], t.shape[2],
                        dtype_code(t.dtype, what))


def coords_struct(coords, tensor_stride):
    """A voxconv_coords_t over a contiguous int32 [N, 4] tensor. Refuses
    anything else rather than copying: the struct keeps a raw pointer, and
    a copy made here would be freed while the library still reads it
    (callers validate with _validate.coords, which makes the copy)."""
    if coords.dtype != torch.int32 or not coords.is_contiguous():
        raise errors.InvalidArgumentError(
            f"coords: expected a contiguous int32 tensor, got {coords.dtype} with strides "
            f"{coords.stride()} (pass it through voxconv._validate.coords)")
    c = _lib.Coords()
    c.data = ptr(coords)
    c.n = coords.shape[0]
    c.tensor_stride = _lib.c_int32_3(*tensor_stride)
    return c
