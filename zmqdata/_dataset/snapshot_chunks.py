"""A save's chunks: their names, writing one whole, reading one back checked.

A chunk is a stream of msgpack objects (``snapshot_codec``), one per
element, zstd-compressed as a whole or raw, committed whole (a temporary name
then a rename; an object store: one put). Its manifest entry holds its
element count, size and CRC-32, which reads check (docs/formats.md).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import uuid
import zlib
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import IO, Any, Self, cast

import msgpack
import zstandard

from zmqdata._dataset import fs
from zmqdata._dataset.snapshot_codec import decode_map, encode
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    ZmqDataError,
)

COMPRESSIONS = (None, "zstd")
CHUNKS = "chunks"
ZSTD_LEVEL = 3
MAX_ELEMENT_BYTES = 2**32 - 1
"""The largest element (encoded): what a reader's msgpack buffer holds."""
_READ_SIZE = 16 << 20
"""What a zstd chunk's reader decompresses at a time."""
_WHOLE_READ_MAX = 256 << 20
"""A chunk up to this size is read in one piece (one copy), checked, then decoded."""


def check_compression(compression: Any) -> str | None:
    """``compression`` (None or ``"zstd"``), checked."""
    if compression not in COMPRESSIONS:
        raise InvalidArgumentError(
            f"snapshot compression must be None or 'zstd', got {compression!r}"
        )
    return None if compression is None else "zstd"


def check_path(path: Any) -> str:
    """A save's ``path``, checked to be a non-empty str."""
    if not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"a save path must be a non-empty str, got {path!r}")
    return path


_WRITER = f"{os.getpid()}-{uuid.uuid4().hex[:16]}"
"""This process, in the names of the chunks it writes."""
_ATTEMPTS = itertools.count()
"""Numbers the chunks this process writes: each attempt has a name of its own."""


def chunk_name(ordinal: int) -> str:
    """A name for a new chunk of split ``ordinal``, unique to this attempt.

    >>> a, b = chunk_name(3), chunk_name(3)
    >>> a.startswith("00000003-") and a.endswith(".chunk") and a != b
    True
    >>> is_chunk_name(a)
    True
    """
    return f"{ordinal:08d}-{_WRITER}-{next(_ATTEMPTS)}.chunk"


MAX_NAME = 256
"""The longest chunk name."""


def is_chunk_name(name: Any) -> bool:
    """Whether ``name`` may name a chunk (workers' reports, manifests, writers).

    ASCII letters, digits, ``.``, ``-`` and ``_``, not starting with ``.``
    (temporaries do), at most ``MAX_NAME`` long: never a path.

    >>> is_chunk_name("00000003-ab12-0.chunk"), is_chunk_name("../x"), is_chunk_name(".t")
    (True, False, False)
    """
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME
        and not name.startswith(".")
        and name.replace(".", "").replace("-", "").replace("_", "").isalnum()
        and name.isascii()
    )


def _check_name(name: Any) -> str:
    if not is_chunk_name(name):
        raise InvalidArgumentError(
            f"a chunk name must be 1 to {MAX_NAME} ASCII letters, digits, '.', '-' "
            f"or '_', not starting with '.', got {name!r}"
        )
    return str(name)


def chunk_path(path: str, name: str) -> str:
    """Where chunk ``name`` of the save at ``path`` lies.

    >>> chunk_path("memory://save", "c0")
    'memory://save/chunks/c0'
    """
    return fs.join(path, CHUNKS, name)


def io_error(what: str, error: Exception, denied: bool = False) -> ZmqDataError:
    """``error`` (from writing ``what``) as a zmqdata error naming it.

    ``PermissionDeniedError`` where access is denied (or ``denied``),
    ``FailedPreconditionError`` otherwise (a full disk).
    """
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    denied = (
        denied
        or isinstance(error, PermissionError)
        or getattr(error, "errno", None) in (errno.EACCES, errno.EPERM, errno.EROFS)
    )
    kind = PermissionDeniedError if denied else FailedPreconditionError
    return kind(f"cannot write {what}: {reason}")


class _Checksummed:
    """A writable stream counting and checksumming the bytes it passes on."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.size = 0
        self.crc32 = 0

    def write(self, data: Any) -> int:
        self.crc32 = zlib.crc32(data, self.crc32)
        self.size += len(data)
        return self._out.write(data)

    def flush(self) -> None:
        self._out.flush()


class ChunkWriter:
    """Writes one chunk of the save at ``path``; committed whole on a clean exit.

    ``compression``: ``None`` (raw) or ``"zstd"``. An error in the block (or
    while committing) leaves nothing: the temporary file is removed and the
    error propagates; errors writing the file (a full disk, no permission) are
    raised as ``FailedPreconditionError`` / ``PermissionDeniedError`` naming
    the chunk and the path, a value that cannot be saved as
    ``InvalidArgumentError`` naming the element. ``info`` (once committed):
    ``{"name", "elements", "bytes", "crc32"}`` for the manifest.
    """

    def __init__(self, path: str, name: str, compression: str | None) -> None:
        self._path = check_path(path)
        self._name = _check_name(name)
        self._compression = check_compression(compression)
        self._where = f"chunk {name!r} of the save at {path}"
        self._stack = contextlib.ExitStack()
        self._sink: _Checksummed | None = None
        self._out: Any = None
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=True)
        self._elements = 0
        self._encoded = 0
        self._info: dict[str, Any] | None = None

    def __enter__(self) -> Self:
        try:
            file = self._stack.enter_context(
                fs.writing(chunk_path(self._path, self._name))
            )
        except Exception as error:
            raise io_error(self._where, error) from error
        self._sink = _Checksummed(file)
        self._out = self._sink
        if self._compression == "zstd":
            compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
            sink = cast(IO[bytes], self._sink)
            self._out = compressor.stream_writer(sink, closefd=False)
        return self

    def write(self, element: Any) -> None:
        """Appends ``element``."""
        if self._out is None:
            raise FailedPreconditionError(f"{self._where} is not open for writing")
        try:
            packed = self._packer.pack(encode(element))
        except InvalidArgumentError as error:
            raise InvalidArgumentError(
                f"{self._where}: element {self._elements}: {error}"
            ) from None
        except (ValueError, TypeError) as error:  # a str msgpack cannot encode
            raise InvalidArgumentError(
                f"{self._where}: element {self._elements}: {error}"
            ) from error
        if len(packed) > MAX_ELEMENT_BYTES:
            raise InvalidArgumentError(
                f"{self._where}: element {self._elements} is {len(packed)} bytes "
                f"encoded, more than the {MAX_ELEMENT_BYTES} a chunk holds"
            )
        try:
            self._out.write(packed)
        except OSError as error:
            raise io_error(self._where, error) from error
        self._elements += 1
        self._encoded += len(packed)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        out, self._out = self._out, None
        if kind is not None:
            self._stack.__exit__(kind, error, trace)  # removes the temporary file
            return
        assert self._sink is not None
        try:
            if out is not self._sink:
                out.close()  # the end of the zstd frame (closefd=False)
            self._stack.close()  # commits
        except ZmqDataError:
            raise
        except Exception as failure:
            self._stack.__exit__(type(failure), failure, failure.__traceback__)
            raise io_error(self._where, failure) from failure
        self._info = {
            "name": self._name,
            "elements": self._elements,
            "bytes": self._sink.size,
            "crc32": self._sink.crc32,
        }

    @property
    def encoded(self) -> int:
        """The bytes of the elements written so far, encoded (before compression)."""
        return self._encoded

    @property
    def info(self) -> dict[str, Any]:
        """The committed chunk: ``{"name", "elements", "bytes", "crc32"}``."""
        if self._info is None:
            raise FailedPreconditionError(f"{self._where} is not committed")
        return dict(self._info)


class CorruptChunkError(InvalidArgumentError):
    """A chunk that fails its checks (size, CRC-32, decoding): all of it is lost."""


def check_chunk(chunk: Any, where: str) -> dict[str, Any]:
    """A manifest's chunk entry, checked; ``InvalidArgumentError`` naming it."""
    keys = ("name", "elements", "bytes", "crc32")
    if not isinstance(chunk, Mapping) or not all(k in chunk for k in keys):
        raise InvalidArgumentError(
            f"{where}: a chunk must be a dict with keys {keys}, got {chunk!r:.200}"
        )
    _check_name(chunk["name"])
    for key, top in (("elements", None), ("bytes", None), ("crc32", 2**32)):
        value = chunk[key]
        if type(value) is not int or value < 0 or (top is not None and value >= top):
            raise InvalidArgumentError(
                f"{where}: chunk {chunk['name']!r}: bad {key} {value!r}"
            )
    return {k: chunk[k] for k in keys}


def read_chunk(
    path: str, info: Mapping[str, Any], first: int = 0, *, compression: str | None
) -> Iterator[Any]:
    """The elements of chunk ``info`` of the save at ``path``, from ``first`` on.

    The chunk is mapped (a local file) or read whole (an object), and its
    size and CRC-32 checked at every read, before any element comes out: a
    truncated, corrupt or changed chunk raises ``CorruptChunkError`` (an
    ``InvalidArgumentError``) naming it, a missing one ``NotFoundError``.
    """
    info = check_chunk(info, path)
    name = info["name"]
    where = f"chunk {name!r} of the save at {path}"
    with fs.mapped(chunk_path(path, name)) as data:
        yield from _elements(data, info, where, first, compression)


def _elements(
    data: Any, info: dict[str, Any], where: str, first: int, compression: str | None
) -> Iterator[Any]:
    """``read_chunk``'s elements from the chunk's bytes ``data``, checked first."""
    if len(data) != info["bytes"]:
        raise CorruptChunkError(
            f"{where} is {len(data)} bytes, not the {info['bytes']} its manifest "
            "lists (truncated or changed)"
        )
    if len(data) > _WHOLE_READ_MAX:  # read in pieces: checked whole first as well
        _check_crc(zlib.crc32(data), info, where)
    unpacker = _unpacker(_CheckedReader(data, info, where), len(data), compression)
    number = 0
    try:
        while number < first:
            unpacker.skip()
            number += 1
        for element in unpacker:
            yield element
            number += 1
    except msgpack.OutOfData:  # skipped past the end: counted below
        pass
    except CorruptChunkError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, zstandard.ZstdError) as e:
        raise CorruptChunkError(f"{where}: element {number}: {e}") from e
    if number != info["elements"]:
        raise CorruptChunkError(
            f"{where} holds {number} elements, not the {info['elements']} its "
            "manifest lists"
        )


def _check_crc(crc32: int, info: dict[str, Any], where: str) -> None:
    if crc32 != info["crc32"]:
        raise CorruptChunkError(
            f"{where} is corrupt or changed: its CRC-32 does not match its manifest's"
        )


class _CheckedReader:
    """The chunk's bytes ``data`` as a stream, checksumming what it hands out.

    The CRC-32 is of the very bytes the decoder gets (so a chunk changed while
    mapped cannot slip past it), checked when the last byte is read: the first
    read of a chunk up to ``_WHOLE_READ_MAX`` takes all of it (``_unpacker``).
    """

    def __init__(self, data: Any, info: dict[str, Any], where: str) -> None:
        self._data = data
        self._info = info
        self._where = where
        self._at = 0
        self._crc32 = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else min(self._at + size, len(self._data))
        if self._at >= end:
            return b""
        piece = bytes(self._data[self._at : end])  # the whole of a bytes: no copy
        self._crc32 = zlib.crc32(piece, self._crc32)
        self._at = end
        if end == len(self._data):
            _check_crc(self._crc32, self._info, self._where)
        return piece


def _unpacker(
    stream: _CheckedReader, size: int, compression: str | None
) -> msgpack.Unpacker:
    """A msgpack reader of the chunk's ``stream`` (``size`` bytes), decompressed if zstd."""
    whole = min(max(size, 1), _WHOLE_READ_MAX)
    source: Any = stream
    read_size = whole
    if check_compression(compression) == "zstd":
        source = zstandard.ZstdDecompressor().stream_reader(
            cast(IO[bytes], stream), read_size=whole, read_across_frames=True
        )
        read_size = _READ_SIZE
    return msgpack.Unpacker(
        source,
        read_size=read_size,
        object_hook=decode_map,
        max_buffer_size=0,  # 4 GiB: MAX_ELEMENT_BYTES
    )
