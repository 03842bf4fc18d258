"""Buffer compression for the element frames: zstd, probed before it is paid for.

:func:`maybe_compress` compresses a buffer only when that pays off: small
buffers are left alone, big ones are first probed by compressing a few evenly
spaced samples (as dask's ``maybe_compress`` does), so incompressible data such
as random floats costs a probe, not a full compression pass.
:func:`decompress` undoes it, capping the output at the size the caller expects.

zstd compressor and decompressor objects are not thread-safe, so each thread
keeps its own (one compressor per level).

>>> codec, packed = maybe_compress(bytes(100_000), level=3)
>>> codec, len(packed) < 1_000
('zstd', True)
>>> bytes(decompress(codec, packed, size=100_000)) == bytes(100_000)
True
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

import numpy as np
import zstandard

from zmqdata.errors import InvalidArgumentError

if TYPE_CHECKING:
    import zmq
    from typing_extensions import Buffer as _BufferProtocol

__all__ = [
    "ZSTD",
    "Buffer",
    "byte_view",
    "decompress",
    "maybe_compress",
    "validate_level",
]

Buffer: TypeAlias = "_BufferProtocol | np.ndarray[Any, Any] | zmq.Frame"
"""Anything with the buffer protocol (bytes, bytearray, memoryview, ndarray), or a
``zmq.Frame`` (its ``.buffer`` is used)."""

_B = TypeVar("_B", bound=Buffer)

ZSTD: Final = "zstd"
"""The codec name :func:`maybe_compress` records and :func:`decompress` accepts."""

MIN_LEVEL: Final = -(1 << 17)
"""zstd's fastest level (``ZSTD_minCLevel``); ``zstandard.MAX_COMPRESSION_LEVEL``
is the slowest."""

_SAMPLE_SIZE: Final = 10_000
_SAMPLES: Final = 5
_PROBE_FROM: Final = 4 * _SAMPLES * _SAMPLE_SIZE


class _Contexts(threading.local):
    """Per-thread zstd objects (they are not thread-safe)."""

    def __init__(self) -> None:
        self.compressors: dict[int, zstandard.ZstdCompressor] = {}
        self.decompressor = zstandard.ZstdDecompressor()

    def compressor(self, level: int) -> zstandard.ZstdCompressor:
        """This thread's compressor for ``level``."""
        found = self.compressors.get(level)
        if found is None:
            found = self.compressors[level] = zstandard.ZstdCompressor(level=level)
        return found


_CONTEXTS = _Contexts()


def validate_level(level: object) -> int:
    """Returns ``level`` if it is a valid zstd level, else raises.

    Raises:
        InvalidArgumentError: ``level`` is not an int in
            ``[MIN_LEVEL, zstandard.MAX_COMPRESSION_LEVEL]``.

    >>> validate_level(3)
    3
    """
    if type(level) is not int or not (
        MIN_LEVEL <= level <= zstandard.MAX_COMPRESSION_LEVEL
    ):
        raise InvalidArgumentError(
            f"zstd compression level must be an int in "
            f"[{MIN_LEVEL}, {zstandard.MAX_COMPRESSION_LEVEL}], got {level!r}"
        )
    return level


def byte_view(buf: Buffer) -> memoryview:
    """A flat, C-contiguous byte (``"B"``) memoryview of ``buf``.

    Copies only when ``buf`` is not C-contiguous. numpy arrays of any dtype are
    accepted (datetime arrays do not export the buffer protocol themselves), and
    a ``zmq.Frame`` is read through its ``.buffer``.

    Raises:
        InvalidArgumentError: ``buf`` does not support the buffer protocol.

    >>> byte_view(np.arange(3, dtype=">i2")).tolist()
    [0, 0, 0, 1, 0, 2]
    """
    inner: Any = getattr(buf, "buffer", buf)
    if isinstance(inner, np.ndarray):
        return np.ascontiguousarray(inner).reshape(-1).view(np.uint8).data
    try:
        view = memoryview(inner)
    except TypeError as error:
        raise InvalidArgumentError(
            f"{type(buf).__name__} does not support the buffer protocol"
        ) from error
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    if view.nbytes == 0:
        return memoryview(b"")
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def maybe_compress(
    buf: _B, *, level: int, min_size: int = 10_000, min_ratio: float = 0.9
) -> tuple[str | None, _B | bytes]:
    """zstd-compresses ``buf`` if it is big enough and compresses well enough.

    Buffers of ``_PROBE_FROM`` (200 kB) and more are probed first: five evenly
    spaced 10 kB samples are compressed, and the whole buffer only when they
    shrink to ``min_ratio`` or better.

    Args:
        buf: The bytes to compress.
        level: zstd level (see :func:`validate_level`).
        min_size: Buffers smaller than this are returned as they are.
        min_ratio: The compressed size must be at most this fraction of the
            original for compression to be kept.

    Returns:
        ``("zstd", compressed_bytes)``, or ``(None, buf)`` (the very object
        given) when compression was not worth it.

    Raises:
        InvalidArgumentError: Bad ``level`` or ``buf`` is not a buffer.

    >>> maybe_compress(b"tiny", level=3)
    (None, b'tiny')
    >>> maybe_compress(b"ab" * 10_000, level=3)[0]
    'zstd'
    """
    compressor = _CONTEXTS.compressor(validate_level(level))
    view = byte_view(buf)
    size = view.nbytes
    if size < min_size:
        return None, buf
    if size >= _PROBE_FROM:
        sample = _sample(view)
        if len(compressor.compress(sample)) > min_ratio * len(sample):
            return None, buf
    packed = compressor.compress(view)
    if len(packed) > min_ratio * size:
        return None, buf
    return ZSTD, packed


def _sample(view: memoryview) -> bytes:
    """``_SAMPLES`` evenly spaced ``_SAMPLE_SIZE``-byte slices of ``view``, joined."""
    step = (view.nbytes - _SAMPLE_SIZE) // (_SAMPLES - 1)
    return b"".join(view[i * step : i * step + _SAMPLE_SIZE] for i in range(_SAMPLES))


def decompress(
    codec: str | None,
    buf: _B,
    *,
    size: int | None = None,
    max_size: int | None = None,
) -> _B | memoryview:
    """Undoes :func:`maybe_compress`.

    The output of a zstd buffer is a fresh, writable byte memoryview. It is
    never larger than ``size`` (or, without ``size``, than the content size the
    zstd frame declares), and that size is checked against ``max_size`` before
    anything is allocated, so a decompression bomb cannot allocate more than the
    caller agreed to.

    Args:
        codec: ``None`` (``buf`` is returned as is) or ``"zstd"``.
        buf: The (compressed) bytes.
        size: The exact decompressed size expected, if known.
        max_size: The most bytes a zstd buffer may decompress to (``None``: no
            cap beyond ``size``).

    Returns:
        The decompressed bytes.

    Raises:
        InvalidArgumentError: Unknown codec, corrupt or truncated data, a
            decompressed size other than ``size``, or one over ``max_size``.

    >>> decompress(None, b"raw")
    b'raw'
    >>> codec, packed = maybe_compress(b"ab" * 10_000, level=3)
    >>> len(decompress(codec, packed, size=20_000))
    20000
    >>> decompress(codec, packed, max_size=1_000)
    Traceback (most recent call last):
    ...
    zmqdata.errors.InvalidArgumentError: zstd data of 20 bytes would decompress to 20000 bytes, over the cap of 1000
    """
    if codec is None:
        if size is not None and byte_view(buf).nbytes != size:
            raise InvalidArgumentError(
                f"buffer holds {byte_view(buf).nbytes} bytes, expected {size}"
            )
        return buf
    if codec != ZSTD:
        raise InvalidArgumentError(f"unknown compression codec {codec!r}")
    view = byte_view(buf)
    target = _target_size(view, size)
    if max_size is not None and target > max_size:
        raise InvalidArgumentError(
            f"zstd data of {view.nbytes} bytes would decompress to {target} bytes,"
            f" over the cap of {max_size}"
        )
    try:
        out = np.empty(target, dtype=np.uint8)
    except (MemoryError, ValueError) as error:
        raise InvalidArgumentError(
            f"cannot allocate {target} bytes to decompress into"
        ) from error
    _decompress_into(view, out.data)
    return out.data


def _target_size(view: memoryview, size: int | None) -> int:
    """The output size: ``size``, checked against the frame's declared size."""
    try:
        declared = zstandard.frame_content_size(view)
    except zstandard.ZstdError as error:
        raise InvalidArgumentError(f"corrupt zstd data: {error}") from error
    if declared < 0 or declared == zstandard.CONTENTSIZE_UNKNOWN:  # -1: unknown
        if size is None:
            raise InvalidArgumentError(
                "zstd frame does not declare its content size; pass size="
            )
        return size
    if size is not None and declared != size:
        raise InvalidArgumentError(
            f"zstd frame declares {declared} bytes, expected {size}"
        )
    return declared


def _decompress_into(view: memoryview, out: memoryview) -> None:
    """Decompresses the zstd frame in ``view`` so that it fills ``out`` exactly."""
    filled = 0
    try:
        reader = _CONTEXTS.decompressor.stream_reader(view)
        while filled < out.nbytes:
            got = reader.readinto(out[filled:])
            if got == 0:
                break
            filled += got
        overflow = bool(reader.read(1))
    except zstandard.ZstdError as error:
        raise InvalidArgumentError(f"corrupt zstd data: {error}") from error
    if filled != out.nbytes or overflow:
        raise InvalidArgumentError(
            f"zstd data decompresses to {'more than ' if overflow else ''}"
            f"{filled} bytes, expected {out.nbytes}"
        )
