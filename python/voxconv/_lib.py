"""ctypes binding of include/voxconv.h: library lookup, structs, and every C
signature, declared once here (``_SIGNATURES``).

Nothing outside this module touches ``ctypes.CDLL`` directly. Calls go
through :func:`call` (functions that take a handle go through
``Handle.call`` in ``_runtime``), which turns a non-zero status into the
matching :class:`voxconv.errors.VoxconvError` subclass carrying the
library's message.

The library is a ``CDLL`` (not ``PyDLL``), so ctypes releases the GIL for
the duration of every foreign call: long convolutions on the CPU or kernel
map builds do not block other Python threads.
"""

import ctypes
import ctypes.util
import glob
import os
import struct
import sys

from . import errors

# ---- enums (values from voxconv.h) ----------------------------------------
BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2
DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_F64 = 0, 1, 2, 3
DTYPE_I8, DTYPE_I32 = 4, 5  # int8 ops only (voxconv_conv_forward_int8, ...)
MEMCPY_HOST_TO_BACKEND, MEMCPY_BACKEND_TO_HOST, MEMCPY_BACKEND_TO_BACKEND = 0, 1, 2
KMAP_SUBMANIFOLD, KMAP_STRIDED, KMAP_TRANSPOSED, KMAP_GENERATIVE = 0, 1, 2, 3
PREPARE_FORWARD, PREPARE_DGRAD, PREPARE_PAIRS = 1, 2, 4  # voxconv_kmap_prepare
OFFSET_ORDER_X_SLOWEST, OFFSET_ORDER_X_FASTEST = 0, 1  # desc offset_order
UNSET, FALSE, TRUE = 0, 1, 2
POOL_MAX, POOL_AVG, POOL_SUM = 0, 1, 2
REDUCE_FIRST, REDUCE_MEAN = 0, 1
PASS_CONV_FWD, PASS_CONV_DGRAD, PASS_CONV_WGRAD = 0, 1, 2
PASS_DEPTHWISE_FWD, PASS_DEPTHWISE_DGRAD, PASS_DEPTHWISE_WGRAD = 3, 4, 5
PASS_COUNT = 6
PASS_NAMES = ("conv_fwd", "conv_dgrad", "conv_wgrad",
              "depthwise_fwd", "depthwise_dgrad", "depthwise_wgrad")

COORD_MIN, COORD_MAX, BATCH_MAX = -131071, 131071, 1023
KERNEL_SIZE_MAX, KERNEL_VOLUME_MAX, STRIDE_MAX, DILATION_MAX = 7, 343, 64, 64

# ---- structs ----------------------------------------------------------------
c_int32_3 = ctypes.c_int32 * 3
c_float_3 = ctypes.c_float * 3

ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_void_p)
FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)


class Allocator(ctypes.Structure):
    _fields_ = [("alloc", ALLOC_FN), ("free", FREE_FN), ("ctx", ctypes.c_void_p)]


class HandleDesc(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("device", ctypes.c_int),
                ("stream", ctypes.c_void_p),
                ("allocator", ctypes.POINTER(Allocator)),
                ("num_threads", ctypes.c_int), ("deterministic", ctypes.c_int)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("cc_major", ctypes.c_int),
                ("cc_minor", ctypes.c_int), ("sm_count", ctypes.c_int),
                ("total_memory", ctypes.c_size_t)]


class Coords(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("n", ctypes.c_int64),
                ("tensor_stride", c_int32_3)]


class CoordsBounds(ctypes.Structure):
    """voxconv_coords_bounds_t: per field (batch, x, y, z) lo <= row <= hi."""
    _fields_ = [("lo", ctypes.c_int32 * 4), ("hi", ctypes.c_int32 * 4)]


class Feats(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("channels", ctypes.c_int64), ("dtype", ctypes.c_int)]


class Weights(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("kvol", ctypes.c_int64),
                ("cin", ctypes.c_int64), ("cout", ctypes.c_int64),
                ("dtype", ctypes.c_int)]


class ArgBlock(ctypes.Structure):
    """A handle's scratch arguments of the fast paths in one buffer
    (voxconv/_ops.py fills the ones a call passes with one
    struct.pack_into instead of a ctypes field assignment per member)."""
    _fields_ = [("fa", Feats), ("fb", Feats), ("fc", Feats), ("wt", Weights)]


class KmapDesc(ctypes.Structure):
    # voxconv_kmap_desc_t; fields after dilation are 0 unless set: padded
    # (0 centred offsets, 1 padding[]), padding, out_shape (EXPANDING and
    # GENERATIVE output bounds, 0 = unbounded), offset_order (0 x slowest,
    # 1 x fastest: MinkowskiEngine's numbering).
    _fields_ = [("mode", ctypes.c_int), ("kernel_size", c_int32_3),
                ("stride", c_int32_3), ("dilation", c_int32_3),
                ("padded", ctypes.c_int32), ("padding", c_int32_3),
                ("out_shape", c_int32_3), ("offset_order", ctypes.c_int32)]


class KmapInfo(ctypes.Structure):
    _fields_ = [("desc", KmapDesc), ("kernel_volume", ctypes.c_int32),
                ("n_in", ctypes.c_int64), ("n_out", ctypes.c_int64),
                ("n_pairs", ctypes.c_int64),
                ("in_tensor_stride", c_int32_3), ("out_tensor_stride", c_int32_3)]


class ConvOptions(ctypes.Structure):
    _fields_ = [("fwd_algo", ctypes.c_char_p), ("bwd_algo", ctypes.c_char_p),
                ("dgrad_algo", ctypes.c_char_p), ("wgrad_algo", ctypes.c_char_p),
                ("fp16_accum", ctypes.c_int), ("deterministic", ctypes.c_int),
                ("inference", ctypes.c_int)]


INT8_WEIGHTS_KIO, INT8_WEIGHTS_KOI = 0, 1  # voxconv_int8_weights_layout_t


class QuantParams(ctypes.Structure):
    # voxconv_quant_params_t (int8 ops): w_scale and bias point to fp32
    # arrays in backend memory; bias NULL = 0; y_scale 0 unless y is I8;
    # w_layout: INT8_WEIGHTS_KIO ([K][cin][cout]) or _KOI ([K][cout][cin]).
    _fields_ = [("x_scale", ctypes.c_float), ("w_scale", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("relu", ctypes.c_int32),
                ("y_scale", ctypes.c_float), ("w_layout", ctypes.c_int32)]


class VoxelizeDesc(ctypes.Structure):
    _fields_ = [("voxel_size", c_float_3), ("origin", c_float_3),
                ("grid_size", c_int32_3), ("reduce", ctypes.c_int),
                ("batch", ctypes.c_int32)]


class Points(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("n", ctypes.c_int64),
                ("fields", ctypes.c_int32), ("batch", ctypes.c_void_p)]


class AlgoInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("backend", ctypes.c_int),
                ("passes", ctypes.c_uint), ("deterministic", ctypes.c_int),
                ("description", ctypes.c_char_p)]


class CallInfo(ctypes.Structure):
    _fields_ = [("pass_", ctypes.c_int), ("algo", ctypes.c_char * 64),
                ("params", ctypes.c_char * 128), ("fp16_accum", ctypes.c_int),
                ("fp16_accum_reason", ctypes.c_char * 128),
                ("deterministic", ctypes.c_int), ("time_ms", ctypes.c_double),
                ("from_cache", ctypes.c_int)]


# ---- signatures (the one place each C function is declared) -----------------
_p = ctypes.c_void_p
_st = ctypes.c_int  # voxconv_status_t
_P = ctypes.POINTER
_SIGNATURES = {
    # version, status, dtypes
    "voxconv_version_number": (ctypes.c_uint, []),
    "voxconv_version_string": (ctypes.c_char_p, []),
    "voxconv_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "voxconv_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "voxconv_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    # handle
    "voxconv_create": (_st, [_P(_p), _P(HandleDesc)]),
    "voxconv_destroy": (_st, [_p]),
    "voxconv_get_backend": (_st, [_p, _P(ctypes.c_int)]),
    "voxconv_set_stream": (_st, [_p, _p]),
    "voxconv_set_deterministic": (_st, [_p, ctypes.c_int]),
    "voxconv_synchronize": (_st, [_p]),
    "voxconv_get_last_error": (ctypes.c_char_p, [_p]),
    # memory, devices
    "voxconv_malloc": (_st, [_p, ctypes.c_size_t, _P(_p)]),
    "voxconv_release_cached_memory": (_st, [_p]),
    "voxconv_free": (_st, [_p, _p]),
    "voxconv_memcpy": (_st, [_p, _p, _p, ctypes.c_size_t, ctypes.c_int]),
    "voxconv_device_count": (_st, [_P(ctypes.c_int)]),
    "voxconv_device_get_info": (_st, [ctypes.c_int, _P(DeviceInfo)]),
    "voxconv_has_cuda": (ctypes.c_int, []),
    "voxconv_cuda_archs": (ctypes.c_char_p, []),
    # kernel maps
    "voxconv_kmap_build": (_st, [_p, _P(KmapDesc), _P(Coords), _P(Coords), _P(_p)]),
    "voxconv_kmap_build_async": (_st, [_p, _P(KmapDesc), _P(Coords), _P(Coords), _P(_p)]),
    "voxconv_kmap_destroy": (_st, [_p, _p]),
    "voxconv_kmap_wait": (_st, [_p, _p]),
    "voxconv_kmap_order": (_st, [_p, _p]),
    "voxconv_handle_set_build_worker": (_st, [_p, ctypes.c_int]),
    "voxconv_kmap_get_info": (_st, [_p, _P(KmapInfo)]),
    "voxconv_kmap_out_coords": (_st, [_p, _P(_p)]),
    "voxconv_kmap_build_bounded": (_st, [_p, _P(KmapDesc), _P(Coords), _P(CoordsBounds),
                                         ctypes.c_int, _P(_p)]),
    "voxconv_kmap_out_bounds": (_st, [_p, _P(CoordsBounds)]),
    "voxconv_kmap_get_pairs": (_st, [_p, _p, _p, _p, _p]),
    "voxconv_kmap_prepare": (_st, [_p, _p, ctypes.c_uint]),
    "voxconv_kmap_verify": (_st, [_p, _p, _P(Coords)]),
    "voxconv_kmap_inverse": (_st, [_p, _p, _P(_p)]),
    "voxconv_merge_duplicates": (_st, [_p, _P(Coords), _p, _P(ctypes.c_int64), _p]),
    # conv
    "voxconv_conv_forward": (_st, [_p, _p, _P(Feats), _P(Weights), _P(Feats), _P(ConvOptions)]),
    "voxconv_conv_dgrad": (_st, [_p, _p, _P(Feats), _P(Weights), _P(Feats), _P(ConvOptions)]),
    "voxconv_conv_wgrad": (_st, [_p, _p, _P(Feats), _P(Feats), _P(Weights), _P(ConvOptions)]),
    "voxconv_depthwise_forward": (_st, [_p, _p, _P(Feats), _P(Feats), _P(Feats), _P(ConvOptions)]),
    "voxconv_depthwise_dgrad": (_st, [_p, _p, _P(Feats), _P(Feats), _P(Feats), _P(ConvOptions)]),
    "voxconv_depthwise_wgrad": (_st, [_p, _p, _P(Feats), _P(Feats), _P(Feats), _P(ConvOptions)]),
    # int8 (quantized) convolution
    "voxconv_quant_params_check": (_st, [_p, _P(QuantParams), ctypes.c_int64, ctypes.c_int]),
    "voxconv_conv_forward_int8": (_st, [_p, _p, _P(Feats), _P(Weights), _P(QuantParams),
                                        _P(Feats), _P(ConvOptions)]),
    "voxconv_depthwise_forward_int8": (_st, [_p, _p, _P(Feats), _P(Feats), _P(QuantParams),
                                             _P(Feats), _P(ConvOptions)]),
    "voxconv_quantize": (_st, [_p, _P(Feats), ctypes.c_float, _P(Feats)]),
    "voxconv_dequantize": (_st, [_p, _P(Feats), ctypes.c_float, _P(Feats)]),
    # pooling, voxelization
    "voxconv_pool_forward": (_st, [_p, _p, ctypes.c_int, _P(Feats), _P(Feats)]),
    "voxconv_pool_backward": (_st, [_p, _p, ctypes.c_int, _P(Feats), _P(Feats), _P(Feats), _P(Feats)]),
    "voxconv_unpool_forward": (_st, [_p, _p, _P(Feats), _P(Feats)]),
    "voxconv_unpool_backward": (_st, [_p, _p, _P(Feats), _P(Feats)]),
    "voxconv_voxelize": (_st, [_p, _P(VoxelizeDesc), _P(Points), ctypes.c_int32,
                               _p, _p, _P(ctypes.c_int64), _p]),
    # algorithms, tuner, fp16 accumulator
    "voxconv_algo_count": (ctypes.c_int, []),
    "voxconv_algo_get_info": (_st, [ctypes.c_int, _P(AlgoInfo)]),
    "voxconv_set_fp16_accum": (_st, [ctypes.c_int]),
    "voxconv_get_fp16_accum": (ctypes.c_int, []),
    "voxconv_get_last_call_info": (_st, [_p, _P(CallInfo)]),
    "voxconv_resolve_fp16_accum": (_st, [ctypes.c_int, ctypes.c_int, _P(ConvOptions),
                                         _P(ctypes.c_int), _P(ctypes.c_char_p)]),
}

# Functions without which nothing works; the rest degrade to a clear
# MissingSymbolError when called (a library older than this package).
_REQUIRED = ("voxconv_version_number", "voxconv_status_string",
             "voxconv_create", "voxconv_destroy", "voxconv_get_last_error")


# ---- lookup -------------------------------------------------------------------
_LIB_NAMES = {"linux": "libvoxconv.so", "darwin": "libvoxconv.dylib",
              "win32": "voxconv.dll"}


def _lib_filename():
    for prefix, name in _LIB_NAMES.items():
        if sys.platform.startswith(prefix):
            return name
    return "libvoxconv.so"


def candidate_paths():
    """Where the library is looked for, in order (see README):

    1. ``$VOXCONV_LIBRARY`` (a file; when set it is the only candidate, so an
       explicit choice is never silently replaced by another build),
    2. next to the package: ``voxconv/lib/libvoxconv.so``,
    3. the source tree this package sits in: ``<repo>/build*/libvoxconv.so``,
       the most recently built first,
    4. the system path (``ctypes.util.find_library``, then the bare soname).

    Candidates 2-4 that are sanitizer builds are skipped by ``_load`` (see
    :func:`sanitizer_runtimes`); ``$VOXCONV_LIBRARY`` may name one.
    """
    env = os.environ.get("VOXCONV_LIBRARY")
    if env:
        return [env]
    name = _lib_filename()
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, "lib", name)]
    repo = os.path.dirname(os.path.dirname(here))
    built = [p for p in glob.glob(os.path.join(repo, "build*", name))
             if os.path.isfile(p)]
    built.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    paths += built
    found = ctypes.util.find_library("voxconv")
    if found:
        paths.append(found)
    paths += [name, name + ".0"]
    return paths


# ---- sanitizer builds ------------------------------------------------------------
# A library built with -fsanitize=... (scripts/test.sh's build-asan/) needs its
# sanitizer's runtime to be the first library of the process: dlopen()ing an
# ASan build into a plain python3 makes the runtime print "ASan runtime does
# not come first in initial library list" and _exit(1) inside ctypes.CDLL,
# with no exception to catch. So a sanitizer build must be recognised
# *before* it is loaded. We read the file's ELF dynamic section: the
# DT_NEEDED sonames (gcc links libasan.so.N, libtsan.so.N, libubsan.so.N) and
# the dynamic string table, which also names every symbol the library
# imports (clang links no runtime into a shared library, but its code still
# calls __asan_init, __asan_report_load4, ...). That is a property of the
# file itself, so it works for any path (an installed library,
# $VOXCONV_LIBRARY, a build folder configured by hand), unlike reading a
# build folder's CMakeCache.txt, and it costs a few small reads at import.
# (name, what it is, a symbol its runtime exports: present in this process
# when the runtime was preloaded or linked into the executable)
_SANITIZERS = (
    ("asan", "AddressSanitizer", "__asan_init"),
    ("hwasan", "HWAddressSanitizer", "__hwasan_init"),
    ("tsan", "ThreadSanitizer", "__tsan_init"),
    ("msan", "MemorySanitizer", "__msan_init"),
    ("lsan", "LeakSanitizer", "__lsan_do_leak_check"),
    ("ubsan", "UndefinedBehaviorSanitizer", None),
)
# Runtimes that abort the process unless they were loaded first (UBSan's
# does not: an UBSan-only build loads, but is still skipped by the search).
_MUST_COME_FIRST = ("asan", "hwasan", "tsan", "msan", "lsan")
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ = 0, 1, 5, 10


def _elf_dynamic(path):
    """(needed sonames, dynamic string table bytes) of an ELF file, read
    without loading it; None when `path` is not a readable ELF file (e.g. a
    Mach-O or PE library: then nothing is known about it)."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
                return None
            end = "<" if ident[5] == 1 else ">"
            wide = ident[4] == 2  # ELFCLASS64
            if wide:
                phoff, = struct.unpack_from(end + "Q", ident, 32)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 54)
                ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
            else:
                phoff, = struct.unpack_from(end + "I", ident, 28)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 42)
                ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
            if phnum == 0 or phnum > 4096 or phentsize < struct.calcsize(ph_fmt):
                return None
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            loads, dynamic = [], None
            for i in range(phnum):
                h = struct.unpack_from(ph_fmt, table, i * phentsize)
                if wide:  # type, flags, offset, vaddr, paddr, filesz, memsz, align
                    p_type, p_offset, p_vaddr, p_filesz = h[0], h[2], h[3], h[5]
                else:     # type, offset, vaddr, paddr, filesz, memsz, flags, align
                    p_type, p_offset, p_vaddr, p_filesz = h[0], h[1], h[2], h[4]
                if p_type == _PT_LOAD:
                    loads.append((p_vaddr, p_offset, p_filesz))
                elif p_type == _PT_DYNAMIC:
                    dynamic = (p_offset, p_filesz)
            if dynamic is None:
                return (), b""
            f.seek(dynamic[0])
            dyn = f.read(min(dynamic[1], 1 << 20))
            step = struct.calcsize(dyn_fmt)
            needed, strtab, strsz = [], None, 0
            for off in range(0, len(dyn) - step + 1, step):
                tag, val = struct.unpack_from(dyn_fmt, dyn, off)
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    needed.append(val)
                elif tag == _DT_STRTAB:
                    strtab = val
                elif tag == _DT_STRSZ:
                    strsz = val
            if strtab is None or not 0 < strsz <= 1 << 26:
                return (), b""
            # DT_STRTAB is an address: find the file offset of its segment.
            for vaddr, offset, filesz in loads:
                if vaddr <= strtab < vaddr + filesz:
                    f.seek(strtab - vaddr + offset)
                    strings = f.read(strsz)
                    break
            else:
                return None
    except (OSError, struct.error):
        return None
    names = tuple(strings[i:strings.find(b"\0", i)].decode(errors="replace")
                  for i in needed if 0 <= i < len(strings))
    return names, strings


def sanitizer_runtimes(path):
    """The sanitizers the library at `path` is instrumented with, as a tuple
    of names ("asan", "ubsan", ...; empty for a clean build or a file this
    reader does not understand), found from its ELF dynamic section without
    loading it (see the comment above _SANITIZERS)."""
    info = _elf_dynamic(path)
    if not info:
        return ()
    needed, strings = info
    found = []
    for name, _what, _symbol in _SANITIZERS:
        by_soname = any(n.startswith((f"lib{name}.", f"libclang_rt.{name}"))
                        for n in needed)
        if by_soname or f"\0__{name}_".encode() in strings:
            found.append(name)
    # ASan's runtime carries LeakSanitizer: an ASan build is not also "lsan".
    if "asan" in found or "hwasan" in found:
        found = [n for n in found if n != "lsan"]
    return tuple(found)


def _sanitizer_text(names):
    what = {n: w for n, w, _s in _SANITIZERS}
    return " + ".join(what[n] for n in names)


def _runtime_missing(path, names):
    """The sanitizers of `names` whose runtime must come first and is not in
    this process (not preloaded, not linked into the executable)."""
    symbols = {n: s for n, _w, s in _SANITIZERS}
    try:
        process = ctypes.CDLL(None)
    except OSError:  # pragma: no cover - no dlopen(NULL) on this platform
        return [n for n in names if n in _MUST_COME_FIRST]
    return [n for n in names if n in _MUST_COME_FIRST and not hasattr(process, symbols[n])]


def _sanitizer_refusal(path, names, missing):
    needed = (_elf_dynamic(path) or ((), b""))[0]
    sonames = [s for s in needed if any(s.startswith((f"lib{n}.", f"libclang_rt.{n}"))
                                        for n in missing)]
    preload = ":".join(sonames) or ("the " + "/".join(f"lib{n}" for n in missing)
                                    + " runtime your compiler uses")
    return errors.LibraryNotFoundError(
        f"VOXCONV_LIBRARY={path} is built with {_sanitizer_text(names)}, whose "
        f"runtime must be loaded before anything else in the process: loading the "
        f"library now would abort Python. Start Python with the runtime "
        f"preloaded, e.g. LD_PRELOAD={preload} ASAN_OPTIONS=detect_leaks=0 python3 "
        f"..., or set VOXCONV_LIBRARY to a build without sanitizers (build/).")


def _load():
    tried = []
    explicit = bool(os.environ.get("VOXCONV_LIBRARY"))
    for path in candidate_paths():
        is_file = os.path.sep in path
        if is_file and not os.path.exists(path):
            tried.append(f"{path}: no such file")
            continue
        sanitizers = sanitizer_runtimes(path) if is_file else ()
        if sanitizers and not explicit:
            tried.append(f"{path}: skipped, built with {_sanitizer_text(sanitizers)} (set "
                         f"VOXCONV_LIBRARY to it, with its runtime preloaded, to use it)")
            continue
        if sanitizers:
            missing = _runtime_missing(path, sanitizers)
            if missing:
                raise _sanitizer_refusal(path, sanitizers, missing)
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:  # e.g. a wrong architecture or a missing dependency
            tried.append(f"{path}: {e}")
            continue
        missing = [s for s in _REQUIRED if not hasattr(lib, s)]
        if missing:
            tried.append(f"{path}: not libvoxconv (lacks {', '.join(missing)})")
            continue
        return lib, path
    raise errors.LibraryNotFoundError(
        "libvoxconv not found. Build it (cmake -S . -B build && cmake --build "
        "build) and either set VOXCONV_LIBRARY=/path/to/libvoxconv.so, copy it "
        "to voxconv/lib/, or install it on the system path. Tried:\n  "
        + "\n  ".join(tried))


class _Lib:
    """The loaded library with every known signature applied. Attributes
    are the C functions; a function the library lacks raises
    MissingSymbolError when called, and ``has(name)`` tells in advance."""

    def __init__(self):
        self.cdll, self.path = _load()
        self._missing = set()
        for name, (restype, argtypes) in _SIGNATURES.items():
            if not hasattr(self.cdll, name):
                self._missing.add(name)
                setattr(self, name, _missing_function(name, self.path))
                continue
            fn = getattr(self.cdll, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def has(self, name):
        return name in _SIGNATURES and name not in self._missing

    @property
    def missing(self):
        return sorted(self._missing)


def _missing_function(name, path):
    def missing(*_args, **_kwargs):
        raise errors.MissingSymbolError(
            f"{name} is not exported by {path}: this libvoxconv predates the "
            f"feature (rebuild the library from the same source tree as this "
            f"package)")
    missing.__name__ = name
    return missing


lib = _Lib()


def status_name(status):
    s = lib.voxconv_status_string(status)
    return s.decode() if s else f"status {status}"


def last_error(handle_ptr=None):
    msg = lib.voxconv_get_last_error(handle_ptr)
    return msg.decode(errors="replace") if msg else ""


def raise_for_status(status, handle_ptr=None, context=None):
    """Raises the VoxconvError subclass for a non-zero status."""
    if status == 0:
        return
    msg = last_error(handle_ptr)
    if context and context not in msg:
        msg = f"{context}: {msg}" if msg else context
    raise errors.error_for_status(status, status_name(status), msg)


def call(name, *args):
    """Calls a handle-less library function (its errors are kept per
    thread); raises on a non-zero status."""
    raise_for_status(getattr(lib, name)(*args), None, name)
