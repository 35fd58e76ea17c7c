"""Algorithm selection arguments.

Four enums name the algorithms a call may use, one per kind of pass:

* ``SPARSE_CONV_FWD_ALGO_MODE``           regular conv forward
* ``SPARSE_CONV_BWD_ALGO_MODE``           regular conv dgrad and wgrad
* ``SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE`` depthwise forward
* ``SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE`` depthwise dgrad and wgrad

Each has ``AUTO`` (the tuner picks from a reduced candidate set), ``ALL``
(the tuner benchmarks everything) and one member per algorithm name: the
names the loaded library registers for that kind of pass (``voxconv_algo_count``
/ ``voxconv_algo_get_info``) plus the documented GPU names, so code written
for a GPU build still imports on a CPU-only build (running such an
algorithm there fails with the library's message). Members are ``str``
subclasses whose value is the library's (lower-case) name.

Every algorithm argument accepts ``None`` (the environment default, e.g.
``VOXCONV_FWD_ALGO_MODE``, else ``auto``), an enum member, a string
(case-insensitive, ``"auto"``, ``"all"``, a name, or the list form
``"[a, b]"``), or a list/tuple mixing members and strings (a search space
of several algorithms). An unknown name raises InvalidArgumentError listing
the valid ones.
"""

import enum

from . import _lib
from ._lib import lib
from . import errors

# Algorithm names documented by the GPU issues; kept so enum members exist
# whatever backend the loaded library was built with.
_KNOWN_CONV = ("explicit_gemm", "implicit_gemm", "mask_gemm", "mask_gemm_wgmma",
               "mask_gemm_im2col")
_KNOWN_DEPTHWISE = ("explicit", "implicit", "depthwise_explicit", "depthwise_implicit")

_CONV_PASSES = {"fwd": (_lib.PASS_CONV_FWD,),
                "bwd": (_lib.PASS_CONV_DGRAD, _lib.PASS_CONV_WGRAD)}
_DW_PASSES = {"fwd": (_lib.PASS_DEPTHWISE_FWD,),
              "bwd": (_lib.PASS_DEPTHWISE_DGRAD, _lib.PASS_DEPTHWISE_WGRAD)}


def registered_algorithms():
    """The library's algorithm registry as a list of dicts (name, backend,
    passes, deterministic, description)."""
    out = []
    if not lib.has("voxconv_algo_count"):
        return out
    for i in range(lib.voxconv_algo_count()):
        info = _lib.AlgoInfo()
        _lib.call("voxconv_algo_get_info", i, info)
        out.append({
            "name": info.name.decode(),
            "backend": {1: "cpu", 2: "cuda"}.get(info.backend, str(info.backend)),
            "passes": [n for p, n in enumerate(_lib.PASS_NAMES) if info.passes & (1 << p)],
            "deterministic": bool(info.deterministic),
            "description": (info.description or b"").decode(),
        })
    return out


def _names_for(passes, known):
    names = list(known)
    for a in registered_algorithms():
        bits = {_lib.PASS_NAMES.index(p) for p in a["passes"]}
        if bits & set(passes) and a["name"].lower() not in names:
            names.append(a["name"].lower())
    return names


def _make_enum(cls_name, names, doc):
    members = [("AUTO", "auto"), ("ALL", "all")]
    members += [(n.upper(), n) for n in names]
    e = enum.Enum(cls_name, members, type=str, module=__name__)
    e.__doc__ = doc
    e.__str__ = lambda self: self.value
    return e


SPARSE_CONV_FWD_ALGO_MODE = _make_enum(
    "SPARSE_CONV_FWD_ALGO_MODE", _names_for(_CONV_PASSES["fwd"], _KNOWN_CONV),
    "Algorithms for the forward pass of a regular sparse convolution.")
SPARSE_CONV_BWD_ALGO_MODE = _make_enum(
    "SPARSE_CONV_BWD_ALGO_MODE", _names_for(_CONV_PASSES["bwd"], _KNOWN_CONV),
    "Algorithms for the backward passes (dgrad, wgrad) of a regular sparse convolution.")
SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE = _make_enum(
    "SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE", _names_for(_DW_PASSES["fwd"], _KNOWN_DEPTHWISE),
    "Algorithms for the forward pass of a depthwise sparse convolution.")
SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE = _make_enum(
    "SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE", _names_for(_DW_PASSES["bwd"], _KNOWN_DEPTHWISE),
    "Algorithms for the backward passes of a depthwise sparse convolution.")

_ALL_ENUMS = (SPARSE_CONV_FWD_ALGO_MODE, SPARSE_CONV_BWD_ALGO_MODE,
              SPARSE_DEPTHWISE_CONV_FWD_ALGO_MODE, SPARSE_DEPTHWISE_CONV_BWD_ALGO_MODE)


def _one_name(item, enum_cls, argname):
    if isinstance(item, enum.Enum):
        if not isinstance(item, _ALL_ENUMS):
            raise TypeError(f"{argname}: {item!r} is not a voxconv algorithm enum member")
        name = item.value
    elif isinstance(item, str):
        name = item.strip().lower()
    else:
        raise TypeError(
            f"{argname}: expected None, a {enum_cls.__name__} member, a string or "
            f"a list of those, got {type(item).__name__}")
    valid = [m.value for m in enum_cls]
    if name not in valid:
        raise errors.InvalidArgumentError(
            f"{argname}: unknown algorithm {item!r} for {enum_cls.__name__}; "
            f"valid: {', '.join(valid)}")
    return name


def algo_string(value, enum_cls, argname="algo"):
    """Normalises an algorithm argument to the C option string (or None)."""
    if value is None:
        return None
    if isinstance(value, str) and not isinstance(value, enum.Enum):
        s = value.strip()
        if s.startswith("[") or s.endswith("]") or "," in s:
            # the C/environment form: brackets required, as VOXCONV_*_ALGO_MODE
            if not (s.startswith("[") and s.endswith("]")):
                raise errors.InvalidArgumentError(
                    f"{argname}: malformed list {value!r} (expected \"[a, b]\" or a "
                    f"Python list)")
            value = [p for p in s[1:-1].split(",")]
            if any(not p.strip() for p in value):
                raise errors.InvalidArgumentError(
                    f"{argname}: empty name in list {s!r}")
        else:
            return _one_name(s, enum_cls, argname)
    if isinstance(value, (list, tuple)):
        if not value:
            raise errors.InvalidArgumentError(f"{argname}: empty algorithm list")
        names = [_one_name(v, enum_cls, argname) for v in value]
        if len(names) > 1 and ({"auto", "all"} & set(names)):
            raise errors.InvalidArgumentError(
                f"{argname}: 'auto'/'all' cannot be combined with other names in "
                f"{value!r}")
        if len(names) == 1:
            return names[0]
        return "[" + ",".join(names) + "]"
    return _one_name(value, enum_cls, argname)
