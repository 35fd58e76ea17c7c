"""voxconv: spatially sparse 3-D convolution for PyTorch.

A pure-Python package over the C library ``libvoxconv`` (ctypes). See
python/README.md for installation, where the library is looked for, and a
tour of the API.
"""

import contextlib
import re
from dataclasses import dataclass

# torch first: its CUDA libraries (cuBLAS, cudart) must be the ones loaded
# when libvoxconv's dependencies are resolved. Loading a CUDA build of
# libvoxconv before torch pulls in the system CUDA libraries, and torch's
# import then crashes (seen with torch 2.11 + CUDA 13).
import torch  # noqa: F401

from . import _lib
from ._lib import lib
from . import errors
from .errors import (AllocFailedError, BackendUnavailableError, CudaError,
                     DtypeMismatchError, DuplicateCoordsError, InternalError,
                     InvalidArgumentError, KmapMismatchError, LibraryNotFoundError,
                     MissingSymbolError, NullPointerError, OutOfRangeError,
                     ShapeMismatchError, UnsupportedError, VoxconvError)
from . import _runtime
from .algo import (SPARSE_CONV_BWD_ALGO_MODE, SPARSE_CONV_FWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE,
                   SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, registered_algorithms)
from . import kmap
from .kmap import CoordinateManager, KernelMap
from .tensor import SparseTensor, cat, merge_duplicates, voxelize
from . import _ops
from .functional import (global_avg_pool, global_max_pool, global_sum_pool,
                         sparse_avg_pool, sparse_max_pool, sparse_sum_pool,
                         sparse_unpool, spatially_sparse_conv,
                         spatially_sparse_depthwise_conv)
from . import functional
from . import nn
from . import quantization  # int8 post-training quantization (CPU)

__version__ = "0.1.0"

library_path = lib.path
"""The libvoxconv file that was loaded."""


def library_version():
    """The loaded library's version string, e.g. "0.1.0"."""
    return lib.voxconv_version_string().decode()


def has_cuda():
    """True when the loaded library has the CUDA backend compiled in."""
    return bool(lib.voxconv_has_cuda())


def cuda_archs():
    """The CUDA targets compiled into the loaded library, in nvcc's names:
    ``sm_NN`` machine code, ``compute_NN`` PTX the driver compiles for later
    GPUs (e.g. ``["sm_80", "sm_86", "sm_89", "sm_90a", "compute_89"]``, the
    wheel's default); ``[]`` without CUDA, None for a library that predates
    ``voxconv_cuda_archs``."""
    if not lib.has("voxconv_cuda_archs"):
        return None
    return (lib.voxconv_cuda_archs() or b"").decode().split()


def _archs_run_on(archs, major, minor):
    """True when one of `archs` runs on compute capability major.minor:
    sm_XY on X.Y and later minors of X (sm_XYa on X.Y only), compute_XY PTX
    on any later GPU (as ``voxconv info`` decides)."""
    cc = major * 10 + minor
    for a in archs:
        m = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", a)
        if not m:
            continue
        v = int(m.group(2))
        if m.group(3) == "a":
            ok = v == cc
        elif m.group(1) == "sm":
            ok = v // 10 == major and v <= cc
        else:
            ok = v <= cc
        if ok:
            return True
    return False


def info():
    """What this installation is, as a dict: package and library versions,
    the library file, whether CUDA is compiled in and for which targets
    (``cuda_archs``), and the CUDA devices the library sees, each with
    ``code_for_it`` (the build holds machine code or PTX that runs on it).
    ``python3 -m voxconv`` prints it."""
    archs = cuda_archs()
    out = {"version": __version__, "library_version": library_version(),
           "library_path": library_path, "cuda": has_cuda(), "cuda_archs": archs,
           "torch": torch.__version__, "torch_cuda": torch.version.cuda, "devices": []}
    count = _lib.ctypes.c_int(0)
    st = lib.voxconv_device_count(_lib.ctypes.byref(count))
    if st != 0:
        out["devices_error"] = f"{_lib.status_name(st)}: {_lib.last_error()}"
    for d in range(count.value):
        di = _lib.DeviceInfo()
        if lib.voxconv_device_get_info(d, _lib.ctypes.byref(di)) != 0:
            continue
        out["devices"].append({
            "index": d, "name": di.name.decode(errors="replace"),
            "cc": f"{di.cc_major}.{di.cc_minor}", "sms": di.sm_count,
            "memory_bytes": di.total_memory,
            "code_for_it": archs is None or _archs_run_on(archs, di.cc_major, di.cc_minor)})
    return out


def empty_cache():
    """Returns the GPU memory voxconv keeps for reuse to torch's caching
    allocator. Each CUDA handle keeps the temporary and kernel-map blocks
    it frees (up to VOXCONV_ALLOC_CACHE_MB, by default 1/16 of the device memory per handle)
    so that later calls need no allocation; torch counts them as
    allocated. Call this before torch.cuda.empty_cache() to give that
    memory back to the driver as well. Kernel maps dropped and not yet
    freed are freed first (voxconv.kmap.flush_dropped)."""
    kmap.flush_dropped()
    _runtime.empty_cache()


def caller_thread_backward(enabled=True):
    """A context manager that runs a backward on the thread that calls it:
    ``with voxconv.caller_thread_backward(): loss.backward()``.

    PyTorch runs the backward of CUDA tensors on a device thread of its
    own, which sits idle through the forward: on the lent H200's host a
    one-node backward started 203 us after backward() once that thread had
    idled 5 ms (44 us back to back), against 134 / 27 us on the calling
    thread, and every node ran slower there. Workload A's forward +
    backward from voxconv.nn measured 12.60 ms with this against 13.12 ms
    without (5 rounds alternated in one process; again 12.61 against
    13.04 in a later call; docs/perf-notes.md item 112). Made of
    ``torch.autograd.set_multithreading_enabled(False)``, so it is
    thread-local and is undone on exit. Use it where one
    process drives one GPU (a single-GPU loop, DDP's one process per GPU):
    the backwards of several devices in one process would run one after
    the other instead of in parallel. A no-op where torch lacks the switch
    (before 2.0) or ``enabled`` is False."""
    switch = getattr(torch.autograd, "set_multithreading_enabled", None)
    if switch is None or not enabled:
        return contextlib.nullcontext()
    return switch(False)


def custom_ops_enabled():
    """True when the ops are registered as torch.ops.voxconv.* (torch >= 2.4)."""
    return _ops.custom_ops_enabled()


# ---- fp16 accumulator ------------------------------------------------------------

_FP16_HINT = ("this libvoxconv has no fp16-accumulator control (it predates the "
              "autotuner); rebuild the library")


def set_fp16_accum(enabled):
    """Sets the process-wide fp16-accumulator default (initially from
    ``VOXCONV_USE_FP16_ACCUM``). Resolution per call: a per-call/per-module
    ``use_fp16_accum=True/False`` wins; else this global value if True;
    else, inside ``torch.inference_mode()`` with float16/bfloat16 features,
    the fp16 accumulator turns on automatically (``torch.no_grad()`` and
    ``model.eval()`` do not); else fp32 accumulation. Weight gradients
    always accumulate in fp32."""
    if not lib.has("voxconv_set_fp16_accum"):
        raise MissingSymbolError(_FP16_HINT)
    _lib.call("voxconv_set_fp16_accum", 1 if enabled else 0)


def get_fp16_accum():
    """The process-wide fp16-accumulator default (bool)."""
    if not lib.has("voxconv_get_fp16_accum"):
        raise MissingSymbolError(_FP16_HINT)
    return bool(lib.voxconv_get_fp16_accum())


PASSES = _lib.PASS_NAMES


def _pass_code(pass_):
    if isinstance(pass_, int) and 0 <= pass_ < _lib.PASS_COUNT:
        return pass_
    try:
        return _lib.PASS_NAMES.index(str(pass_))
    except ValueError:
        raise InvalidArgumentError(
            f"pass {pass_!r}: expected one of {', '.join(_lib.PASS_NAMES)}") from None


def resolve_fp16_accum(dtype, pass_="conv_fwd", use_fp16_accum=None, inference=None):
    """What the library would resolve the fp16 accumulator to for a call:
    ``(enabled: bool, reason: str)``. ``inference`` defaults to whether
    ``torch.inference_mode()`` is active now."""
    import torch
    if not lib.has("voxconv_resolve_fp16_accum"):
        raise MissingSymbolError(_FP16_HINT)
    if inference is None:
        inference = _ops._inference()
    opt = _ops._options(None, None, None, functional.tristate(use_fp16_accum, "use_fp16_accum"),
                        0, inference)
    enabled = _lib.ctypes.c_int(0)
    reason = _lib.ctypes.c_char_p()
    dtype = dtype if not isinstance(dtype, torch.dtype) else _runtime.dtype_code(dtype)
    _lib.call("voxconv_resolve_fp16_accum", int(dtype), _pass_code(pass_),
              _lib.ctypes.byref(opt), _lib.ctypes.byref(enabled), _lib.ctypes.byref(reason))
    return bool(enabled.value), (reason.value or b"").decode()


@dataclass
class CallInfo:
    """What the library resolved for a call (``voxconv_get_last_call_info``)."""
    pass_: str
    algo: str
    params: str
    fp16_accum: bool
    fp16_accum_reason: str
    deterministic: bool
    time_ms: float
    from_cache: bool


def get_last_call_info(device=None):
    """The resolution of the most recent convolution pass: on the handle of
    ``device`` (and current stream) when given, else on the handle used
    last. Raises VoxconvError when there was none."""
    if not lib.has("voxconv_get_last_call_info"):
        raise MissingSymbolError(
            "this libvoxconv has no voxconv_get_last_call_info; rebuild the library")
    h = _runtime.handle_for(device) if device is not None else _runtime.last_handle()
    if h is None:
        raise InvalidArgumentError("get_last_call_info: no voxconv call has run yet")
    info = _lib.CallInfo()
    with h.lock:
        _lib.raise_for_status(lib.voxconv_get_last_call_info(h.ptr, _lib.ctypes.byref(info)),
                              h.ptr, "voxconv_get_last_call_info")
    return CallInfo(
        pass_=_lib.PASS_NAMES[info.pass_] if 0 <= info.pass_ < _lib.PASS_COUNT else str(info.pass_),
        algo=info.algo.decode(errors="replace"), params=info.params.decode(errors="replace"),
        fp16_accum=bool(info.fp16_accum),
        fp16_accum_reason=info.fp16_accum_reason.decode(errors="replace"),
        deterministic=bool(info.deterministic), time_ms=float(info.time_ms),
        from_cache=bool(info.from_cache))


def missing_features():
    """Names of C functions this package knows that the loaded library lacks."""
    return lib.missing


__all__ = [
    "empty_cache", "caller_thread_backward",
    "SparseTensor", "CoordinateManager", "KernelMap", "voxelize", "merge_duplicates", "cat",
    "spatially_sparse_conv", "spatially_sparse_depthwise_conv", "sparse_max_pool",
    "sparse_avg_pool", "sparse_sum_pool", "sparse_unpool", "global_avg_pool",
    "global_max_pool", "global_sum_pool", "functional", "nn",
    "SPARSE_CONV_FWD_ALGO_MODE", "SPARSE_CONV_BWD_ALGO_MODE",
    "SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE", "SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE",
    "registered_algorithms", "set_fp16_accum", "get_fp16_accum", "resolve_fp16_accum",
    "get_last_call_info", "CallInfo", "library_path", "library_version", "has_cuda",
    "cuda_archs", "info",
    "custom_ops_enabled", "missing_features", "errors", "VoxconvError",
    "NullPointerError", "InvalidArgumentError", "OutOfRangeError", "DuplicateCoordsError",
    "ShapeMismatchError", "DtypeMismatchError", "KmapMismatchError", "UnsupportedError",
    "AllocFailedError", "BackendUnavailableError", "CudaError", "InternalError",
    "LibraryNotFoundError", "MissingSymbolError",
]
