"""Input validation of the Python layer, in one place.

Everything that enters the library as an integer goes through here: batch
indices, coordinates, and the small integer triples (tensor stride, grid
size). The rules:

* **Ranges are checked before any cast.** ctypes and ``Tensor.to(int32)``
  wrap silently (``2**32 + 1`` becomes 1), so a value is compared with the
  library's limits (``_lib.BATCH_MAX``, ``_lib.COORD_MIN/MAX``, int32) while
  it is still the caller's value.
* **Integers only.** A float tensor (or a Python float) where an integer is
  required is refused with DtypeMismatchError rather than truncated (0.7
  would become 0); so are bool (``True`` is not batch 1 by intent) and
  complex.
* **Messages read like the C library's**, with the Python function in front
  of them: ``"SparseTensor: coords row 17: x=140000 outside ±131071"``,
  ``"voxelize: point 3: batch=-1 outside 0..1023"`` (src/coords/kmap_cpu.c,
  src/coords/voxelize.c, src/cuda/cuda_kmap.cu word them the same way), so
  one search finds either.

What is checked on the host, and what is left to the library. Reading the
minimum and maximum of a CUDA tensor makes the host wait for the GPU, and a
SparseTensor is made for every batch of a training loop; so:

* int32 coordinates on a CUDA device are passed through unchecked: the
  library checks every row on the device when it builds a kernel map and
  reports the same message then (for asynchronous builds, at the first op
  that uses the map). The two consumers that do not build a map, global
  pooling and ``dense()``, already read the batch column on the host to
  size their output, and check its range in the same read.
* Values a cast to int32 could change are checked on the host first:
  Python ints and int64 tensors on any device. For an int64 CUDA tensor
  that is one wait for the GPU; pass int32 coordinates to avoid it.
* CPU tensors are always checked: it is one pass over memory the library
  is about to read anyway (about 1 ms per million rows on two cores,
  10 us for a thousand), and it turns a bad batch into an error at
  construction rather than an IndexError in global pooling.
* Narrower integer dtypes (int8, int16, uint8) cast to int32 exactly, so on
  CUDA they are cast and left to the device check like int32.
"""

import operator

import torch

from . import _lib
from . import errors

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1

# Tensors whose values int32 holds exactly (no host check needed on CUDA).
_NARROW_INTS = (torch.int8, torch.int16, torch.uint8, torch.int32)
_FIELDS = ("batch", "x", "y", "z")


def _is_integer_dtype(dtype):
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _dtype_error(where, got):
    return errors.DtypeMismatchError(f"{where}: expected an integer tensor (int32), got {got}")


def int_value(value, where, lo=INT32_MIN, hi=INT32_MAX, range_text=None):
    """A Python int from an int, a numpy integer or a 0-d integer tensor,
    within [lo, hi]. bool, float and str are refused (DtypeMismatchError),
    an out-of-range value is OutOfRangeError naming it."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise errors.ShapeMismatchError(
                f"{where}: expected a single integer, got a tensor of shape "
                f"{tuple(value.shape)}")
        if not _is_integer_dtype(value.dtype):
            raise _dtype_error(where, value.dtype)
        value = value.item()
    if isinstance(value, bool):
        raise errors.DtypeMismatchError(f"{where}: expected an int, got bool {value!r}")
    try:
        v = operator.index(value)  # ints and numpy integers; not floats
    except TypeError:
        raise errors.DtypeMismatchError(
            f"{where}: expected an int, got {type(value).__name__} {value!r}") from None
    if v < lo or v > hi:
        raise errors.OutOfRangeError(
            f"{where}={v} outside {range_text or f'{lo}..{hi}'}")
    return v


def int_triple(value, name, lo=1, hi=INT32_MAX):
    """An int or 3 ints -> a tuple of 3 Python ints in [lo, hi]
    (InvalidArgumentError otherwise). ``hi`` defaults to int32: every
    triple goes to the library as int32[3]."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, int) and not isinstance(value, bool):
        t = (value, value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 3 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        t = tuple(value)
    else:
        raise errors.InvalidArgumentError(
            f"{name}: expected an int or 3 ints, got {value!r}")
    for v in t:
        if v < lo or (hi is not None and v > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise errors.InvalidArgumentError(f"{name}={value!r}: each value must be {rng}")
    return t


def _needs_host_check(t):
    return t.device.type == "cpu" or t.dtype not in _NARROW_INTS


def _first_bad_row(bad_rows):
    return int(bad_rows.nonzero()[0, 0])


def coords(c, where, name="coords", device=None):
    """Checks an int [N, 4] (batch, x, y, z) tensor and returns it as a
    contiguous int32 tensor. ``where`` names the caller in messages,
    ``device`` (optional) is where the features live."""
    if not isinstance(c, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(c).__name__}")
    if c.dim() != 2 or c.shape[1] != 4:
        raise errors.ShapeMismatchError(
            f"{name}: expected shape [N, 4] (batch, x, y, z), got {tuple(c.shape)}")
    if not _is_integer_dtype(c.dtype):
        raise _dtype_error(name, c.dtype)
    if device is not None and c.device != torch.device(device):
        raise errors.InvalidArgumentError(
            f"{name} are on {c.device} but features on {device}")
    if c.numel() and _needs_host_check(c):
        check_coord_rows(c, where, name)
    if c.dtype != torch.int32:
        c = c.to(torch.int32)
    return c.contiguous()


def check_coord_rows(c, where, name="coords"):
    """OutOfRangeError for the first row of an integer [N, 4] tensor with a
    batch outside 0..BATCH_MAX or a coordinate outside ±COORD_MAX (the
    library's wording). When all is well: the extremes of the whole
    tensor and of the batch column (a valid batch lies within the
    coordinate range, so together they bound every column; on the CPU
    about 4x quicker than per-column extremes), read in one copy, so a
    CUDA tensor waits once for the GPU."""
    g_lo, g_hi = torch.aminmax(c)
    b_lo, b_hi = torch.aminmax(c[:, 0])
    g_lo, g_hi, b_lo, b_hi = torch.stack([g_lo, g_hi, b_lo, b_hi]).tolist()
    if (_lib.COORD_MIN <= g_lo and g_hi <= _lib.COORD_MAX and 0 <= b_lo
            and b_hi <= _lib.BATCH_MAX):
        return
    lo = [0, _lib.COORD_MIN, _lib.COORD_MIN, _lib.COORD_MIN]
    hi = [_lib.BATCH_MAX, _lib.COORD_MAX, _lib.COORD_MAX, _lib.COORD_MAX]
    lo_t = torch.tensor(lo, dtype=torch.int64, device=c.device)
    hi_t = torch.tensor(hi, dtype=torch.int64, device=c.device)
    wide = c.long()
    row = _first_bad_row(((wide < lo_t) | (wide > hi_t)).any(1))
    values = wide[row].tolist()
    f = next(f for f in range(4) if not lo[f] <= values[f] <= hi[f])
    raise errors.OutOfRangeError(f"{where}: {name} row {row}: " + _field_text(f, values[f]))


def _field_text(f, v):
    if f == 0:
        return f"batch={v} outside 0..{_lib.BATCH_MAX}"
    return f"{_FIELDS[f]}={v} outside ±{_lib.COORD_MAX}"


def check_batch_column(batch_col, where):
    """Range check of a batch column the caller reads on the host anyway
    (global pooling, dense): returns 1 + its maximum (0 if empty)."""
    if batch_col.numel() == 0:
        return 0
    lo, hi = torch.stack(list(torch.aminmax(batch_col))).tolist()
    if lo < 0 or hi > _lib.BATCH_MAX:
        row, v = _first_bad_batch(batch_col)
        raise errors.OutOfRangeError(f"{where}: coords row {row}: " + _field_text(0, v))
    return hi + 1


def _first_bad_batch(b):
    """(index, value) of the first entry outside 0..BATCH_MAX, as the
    library reports the first bad row."""
    i = _first_bad_row((b < 0) | (b > _lib.BATCH_MAX))
    return i, int(b[i])


def batch(value, n, device, where):
    """The ``batch`` argument of voxelize: None or an int (one batch for
    every point) -> (int, None); an integer tensor [n] -> (0, int32 tensor
    on ``device``). A 0-d tensor counts as an int."""
    if value is None:
        return 0, None
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        if not _is_integer_dtype(value.dtype):
            raise errors.DtypeMismatchError(
                f"{where}: batch: expected an integer tensor (int32), got {value.dtype}")
        if value.shape != (n,):
            raise errors.ShapeMismatchError(
                f"{where}: batch: expected shape [{n}], got {tuple(value.shape)}")
        if n and _needs_host_check(value):
            lo, hi = torch.stack(list(torch.aminmax(value))).tolist()
            if lo < 0 or hi > _lib.BATCH_MAX:
                point, v = _first_bad_batch(value)
                raise errors.OutOfRangeError(
                    f"{where}: point {point}: " + _field_text(0, v))
        return 0, value.to(device=device, dtype=torch.int32).contiguous()
    if isinstance(value, torch.Tensor) and not _is_integer_dtype(value.dtype):
        raise errors.DtypeMismatchError(
            f"{where}: batch: expected an int or an integer tensor, got {value.dtype}")
    v = int_value(value, f"{where}: batch", 0, _lib.BATCH_MAX)
    return v, None
