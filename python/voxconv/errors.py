"""Exceptions raised by voxconv.

Every non-zero ``voxconv_status_t`` becomes an instance of the subclass of
:class:`VoxconvError` for that status, carrying the library's message
(``voxconv_get_last_error``). Subclasses also derive from the closest builtin
exception so that ``except ValueError`` / ``except TypeError`` /
``except MemoryError`` work as Python users expect. Checks that the Python
layer does itself (before calling the library) raise the same classes.
"""


class VoxconvError(RuntimeError):
    """Base class: a voxconv call failed.

    Attributes: ``status`` (int code), ``status_name``
    (e.g. ``"VOXCONV_STATUS_OUT_OF_RANGE"``) and ``message`` (the library's
    context message, or the Python layer's).
    """

    status = -1
    status_name = "VOXCONV_STATUS_UNKNOWN"

    def __init__(self, message, status=None, status_name=None):
        if status is not None:
            self.status = status
        if status_name is not None:
            self.status_name = status_name
        self.message = message
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


class NullPointerError(VoxconvError, ValueError):
    status, status_name = 1, "VOXCONV_STATUS_NULL_POINTER"


class InvalidArgumentError(VoxconvError, ValueError):
    status, status_name = 2, "VOXCONV_STATUS_INVALID_ARGUMENT"


class OutOfRangeError(VoxconvError, ValueError):
    status, status_name = 3, "VOXCONV_STATUS_OUT_OF_RANGE"


class DuplicateCoordsError(VoxconvError, ValueError):
    status, status_name = 4, "VOXCONV_STATUS_DUPLICATE_COORDS"


class ShapeMismatchError(VoxconvError, ValueError):
    status, status_name = 5, "VOXCONV_STATUS_SHAPE_MISMATCH"


class DtypeMismatchError(VoxconvError, TypeError):
    status, status_name = 6, "VOXCONV_STATUS_DTYPE_MISMATCH"


class KmapMismatchError(VoxconvError, ValueError):
    status, status_name = 7, "VOXCONV_STATUS_KMAP_MISMATCH"


class UnsupportedError(VoxconvError, NotImplementedError):
    status, status_name = 8, "VOXCONV_STATUS_UNSUPPORTED"


class AllocFailedError(VoxconvError, MemoryError):
    status, status_name = 9, "VOXCONV_STATUS_ALLOC_FAILED"


class BackendUnavailableError(VoxconvError):
    status, status_name = 10, "VOXCONV_STATUS_BACKEND_UNAVAILABLE"


class CudaError(VoxconvError):
    status, status_name = 11, "VOXCONV_STATUS_CUDA_ERROR"


class IOError(VoxconvError):  # noqa: A001 - mirrors VOXCONV_STATUS_IO_ERROR
    status, status_name = 12, "VOXCONV_STATUS_IO_ERROR"


class InternalError(VoxconvError):
    status, status_name = 13, "VOXCONV_STATUS_INTERNAL"


class LibraryNotFoundError(VoxconvError, ImportError):
    """libvoxconv could not be located or loaded."""

    status_name = "VOXCONV_LIBRARY_NOT_FOUND"


class MissingSymbolError(VoxconvError, NotImplementedError):
    """The loaded libvoxconv lacks a function this package needs (too old)."""

    status_name = "VOXCONV_MISSING_SYMBOL"


STATUS_CLASSES = {
    cls.status: cls
    for cls in (
        NullPointerError, InvalidArgumentError, OutOfRangeError,
        DuplicateCoordsError, ShapeMismatchError, DtypeMismatchError,
        KmapMismatchError, UnsupportedError, AllocFailedError,
        BackendUnavailableError, CudaError, IOError, InternalError,
    )
}


def error_for_status(status, status_name, message):
    """The exception instance for a non-zero status code."""
    cls = STATUS_CLASSES.get(status, VoxconvError)
    return cls(message, status=status, status_name=status_name)
