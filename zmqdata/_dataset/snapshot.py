"""The on-disk format of a save (``distributed_save``), ``zmqdata.snapshot/1``.

A save under ``path`` (a local directory or an fsspec URL) is::

    path/SAVING          {"format": …, "save_id": …}: a save is writing here
    path/chunks/<name>   elements, one chunk per split written
    path/manifest.json   written last: the save is finished

A chunk is a stream of msgpack objects, one per element, zstd-compressed as a
whole or raw; numpy arrays and scalars are maps ``{"__ndarray__": [dtype.str,
shape, bytes]}`` (``shape`` ``None`` for a numpy scalar), tuples ``{"__tuple__":
[…]}``. Every file is committed whole (a temporary name then a rename; an
object store: one put), and the manifest lists each chunk with its element
count, size and CRC-32, which reads check. docs/formats.md is the reference,
with a reader that needs no zmqdata. Pure: no sockets.

>>> import tempfile, numpy as np
>>> path = tempfile.mkdtemp()
>>> begin(path, "s1")
>>> with ChunkWriter(path, "c0", "zstd") as writer:
...     writer.write((np.arange(3, dtype=np.int16), "a"))
>>> writer.info["elements"], writer.info["name"]
(1, 'c0')
>>> list(read_chunk(path, writer.info, compression="zstd"))
[(array([0, 1, 2], dtype=int16), 'a')]
"""

from __future__ import annotations

import collections
import contextlib
import errno
import io
import json
import mmap
import zlib
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import IO, Any, Self, cast

import msgpack
import numpy as np
import zstandard

from zmqdata._dataset import fs, specs
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ZmqDataError,
)

FORMAT = "zmqdata.snapshot/1"
COMPRESSIONS = (None, "zstd")
CHUNKS = "chunks"
MANIFEST = "manifest.json"
SAVING = "SAVING"
ARRAY = "__ndarray__"
TUPLE = "__tuple__"
ZSTD_LEVEL = 3
MAX_ELEMENT_BYTES = 2**32 - 1
"""The largest element (encoded): what a reader's msgpack buffer holds."""
_READ_SIZE = 16 << 20
"""What a zstd chunk's reader decompresses at a time."""
_RAW_READ_MAX = 256 << 20
"""A raw chunk up to this size is handed to msgpack in one read (one copy)."""
_VERIFIED: dict[tuple[str, int, int], None] = {}
"""Chunks whose CRC-32 this process checked (by name, size and CRC): a chunk
read again (the next epoch) is not checksummed again. Oldest dropped first."""
_VERIFIED_KEPT = 100_000
_INT_RANGE = (-(2**63), 2**64)


# ---------------------------------------------------------------- elements


class _Refused(Exception):
    """A value that cannot be saved; ``where`` gathers its place on the way up."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.where: collections.deque[str] = collections.deque()


def _tagged(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with msgpack/JSON-native containers: tuples tagged, leaves by ``leaf``."""
    if isinstance(value, tuple):
        return {TUPLE: _items(value, leaf)}
    if isinstance(value, list):
        return _items(value, leaf)
    if isinstance(value, dict):
        plain = {}
        for key, child in value.items():
            if type(key) is not str or key in (ARRAY, TUPLE):
                raise _Refused(
                    f"dict key {key!r}: keys must be str other than {ARRAY!r} and "
                    f"{TUPLE!r}"
                )
            try:
                plain[key] = _tagged(child, leaf)
            except _Refused as refused:
                refused.where.appendleft(f"[{key!r}]")
                raise
        return plain
    return leaf(value)


def _items(values: tuple[Any, ...] | list[Any], leaf: Callable[[Any], Any]) -> Any:
    plain = []
    for index, child in enumerate(values):
        try:
            plain.append(_tagged(child, leaf))
        except _Refused as refused:
            refused.where.appendleft(f"[{index}]")
            raise
    return plain


_NATIVE = frozenset((bool, float, str, bytes, type(None)))


def _leaf(value: Any) -> Any:
    kind = type(value)
    if kind in _NATIVE:
        return value
    if kind is int:
        if not _INT_RANGE[0] <= value < _INT_RANGE[1]:
            raise _Refused(f"int {value} is outside 64 bits (use a numpy array)")
        return value
    if isinstance(value, np.ndarray | np.generic):
        return {ARRAY: _array(value)}
    raise _Refused(
        f"a {kind.__name__} cannot be saved (numpy arrays and scalars, None, bool, "
        "int, float, str, bytes, and tuples, lists and dicts of them can)"
    )


def _array(value: np.ndarray | np.generic) -> list[Any]:
    dtype = value.dtype
    if dtype.hasobject:
        raise _Refused(
            f"an array of dtype {dtype} holds Python objects, which are not saved "
            "(use fixed-width str/bytes arrays, or a list)"
        )
    if dtype.names is not None or dtype.subdtype is not None:
        raise _Refused(f"structured dtype {dtype} is not saved (save its fields)")
    if dtype.itemsize == 0:
        raise _Refused(f"dtype {dtype} has no bytes per item")
    shape = None if isinstance(value, np.generic) else list(value.shape)
    flat = np.ascontiguousarray(value).reshape(-1)
    return [dtype.str, shape, flat.view(np.uint8).data]


def encode(element: Any) -> Any:
    """``element`` as msgpack natives (the chunk encoding); refused values named.

    >>> encode((1, [b"x"], {"s": "t"}))
    {'__tuple__': [1, [b'x'], {'s': 't'}]}
    >>> encode(np.float16(1))["__ndarray__"][:2], encode(np.zeros((2, 0)))[ARRAY][:2]
    (['<f2', None], ['<f8', [2, 0]])
    """
    try:
        return _tagged(element, _leaf)
    except _Refused as refused:
        where = "".join(refused.where)
        raise InvalidArgumentError(f"element{where}: {refused}") from None


def decode_map(value: dict[str, Any]) -> Any:
    """The value a chunk's msgpack map stands for (``msgpack``'s ``object_hook``)."""
    if ARRAY in value:
        dtype, shape, data = value[ARRAY]
        array = np.frombuffer(data, dtype)
        return array[0] if shape is None else array.reshape(shape)
    if TUPLE in value:
        return tuple(value[TUPLE])
    return value


# ---------------------------------------------------------------- chunks


def _check_compression(compression: Any) -> str | None:
    if compression not in COMPRESSIONS:
        raise InvalidArgumentError(
            f"snapshot compression must be None or 'zstd', got {compression!r}"
        )
    return None if compression is None else "zstd"


def _check_path(path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"a save path must be a non-empty str, got {path!r}")
    return path


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


def _io_error(what: str, error: Exception, denied: bool = False) -> ZmqDataError:
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
        self._path = _check_path(path)
        self._name = _check_name(name)
        self._compression = _check_compression(compression)
        self._where = f"chunk {name!r} of the save at {path}"
        self._stack = contextlib.ExitStack()
        self._sink: _Checksummed | None = None
        self._out: Any = None
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=True)
        self._elements = 0
        self._info: dict[str, Any] | None = None

    def __enter__(self) -> Self:
        try:
            file = self._stack.enter_context(
                fs.writing(chunk_path(self._path, self._name))
            )
        except Exception as error:
            raise _io_error(self._where, error) from error
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
            raise _io_error(self._where, error) from error
        self._elements += 1

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
            raise _io_error(self._where, failure) from failure
        self._info = {
            "name": self._name,
            "elements": self._elements,
            "bytes": self._sink.size,
            "crc32": self._sink.crc32,
        }

    @property
    def info(self) -> dict[str, Any]:
        """The committed chunk: ``{"name", "elements", "bytes", "crc32"}``."""
        if self._info is None:
            raise FailedPreconditionError(f"{self._where} is not committed")
        return dict(self._info)


class CorruptChunkError(InvalidArgumentError):
    """A chunk that fails its checks (size, CRC-32, decoding): all of it is lost."""


def _check_chunk(chunk: Any, where: str) -> dict[str, Any]:
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
    size and CRC-32 checked before any element comes out (the CRC the first
    time this process reads the chunk): a truncated or corrupt chunk raises
    ``CorruptChunkError`` (an ``InvalidArgumentError``) naming it, a missing
    one ``NotFoundError``.
    """
    info = _check_chunk(info, path)
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
    checked = (where, info["bytes"], info["crc32"])
    if checked not in _VERIFIED:
        if zlib.crc32(data) != info["crc32"]:
            raise CorruptChunkError(
                f"{where} is corrupt: its CRC-32 does not match its manifest's"
            )
        _VERIFIED[checked] = None
        while len(_VERIFIED) > _VERIFIED_KEPT:
            del _VERIFIED[next(iter(_VERIFIED))]
    stream: Any = data if isinstance(data, mmap.mmap) else io.BytesIO(data)
    read_size = min(max(len(data), 1), _RAW_READ_MAX)
    if _check_compression(compression) == "zstd":
        stream = zstandard.ZstdDecompressor().stream_reader(
            stream, read_across_frames=True
        )
        read_size = _READ_SIZE
    unpacker = msgpack.Unpacker(
        stream,
        read_size=read_size,
        object_hook=decode_map,
        max_buffer_size=0,  # 4 GiB: MAX_ELEMENT_BYTES
    )
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
    except (ValueError, TypeError, msgpack.UnpackException, zstandard.ZstdError) as e:
        raise CorruptChunkError(f"{where}: element {number}: {e}") from e
    if number != info["elements"]:
        raise CorruptChunkError(
            f"{where} holds {number} elements, not the {info['elements']} its "
            "manifest lists"
        )


# ---------------------------------------------------------------- the save


def _read_json(path: str, what: str) -> Any:
    """The JSON file at ``path`` (``NotFoundError`` if absent), checked to be a map."""
    with fs.open_binary(path) as file:
        data = file.read()
    try:
        value = json.loads(data)
    except ValueError as error:
        raise InvalidArgumentError(f"{path}: not a {what} ({error})") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{path}: not a {what} (not a JSON object)")
    return value


def _saving_id(path: str) -> str | None:
    """The id of the save whose ``SAVING`` marker lies under ``path``, if any."""
    try:
        marker = _read_json(fs.join(path, SAVING), "save marker")
    except NotFoundError:
        return None
    return str(marker.get("save_id"))


def _finished(path: str) -> bool:
    try:
        with fs.open_binary(fs.join(path, MANIFEST)):
            return True
    except NotFoundError:
        return False


def begin(path: str, save_id: str) -> None:
    """Claims ``path`` for save ``save_id``: writes its ``SAVING`` marker.

    Refused (``FailedPreconditionError`` naming the path, nothing written)
    where ``path`` holds a finished save (``manifest.json``) or another
    save's marker; the same save again (resuming) is fine. A path that cannot
    be written raises ``PermissionDeniedError`` naming it.

    >>> import tempfile
    >>> path = tempfile.mkdtemp()
    >>> begin(path, "a"); begin(path, "a")
    >>> begin(path, "b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    zmqdata.errors.FailedPreconditionError: ... is being written by save 'a' ...
    """
    _check_path(path)
    if not isinstance(save_id, str) or not save_id:
        raise InvalidArgumentError(
            f"a save id must be a non-empty str, got {save_id!r}"
        )
    if _finished(path):
        raise FailedPreconditionError(
            f"{path} holds a finished save ({MANIFEST}); nothing was overwritten: "
            "save to another path (or remove that save)"
        )
    marker = json.dumps({"format": FORMAT, "save_id": save_id}).encode()
    where = f"the save at {path}"
    try:
        with fs.writing(fs.join(path, SAVING), exclusive=True) as file:
            file.write(marker)
        return
    except FileExistsError:
        pass
    except Exception as error:
        raise _io_error(where, error, denied=True) from error
    other = _saving_id(path)
    if other != save_id:
        raise FailedPreconditionError(
            f"{path} is being written by save {other!r} (its {SAVING} marker); "
            "nothing was overwritten: save to another path (or, if that save is "
            "dead, remove the folder)"
        )
    try:  # resuming: still writable?
        with fs.writing(fs.join(path, SAVING)) as file:
            file.write(marker)
    except Exception as error:
        raise _io_error(where, error, denied=True) from error


def _spec_json(element_spec: bytes) -> Any:
    """The element spec (``specs.encode_spec`` bytes) as JSON: leaves as text."""
    if not isinstance(element_spec, bytes):
        raise InvalidArgumentError(
            f"element_spec must be the bytes of specs.encode_spec, got {element_spec!r}"
        )
    spec = specs.decode_spec(element_spec)
    try:
        return None if spec is None else _tagged(spec, specs.leaf_text)
    except _Refused as refused:
        raise InvalidArgumentError(f"element_spec: {refused}") from None


def _spec_bytes(value: Any, where: str) -> bytes:
    """``_spec_json``'s JSON back to ``specs.encode_spec`` bytes."""

    def untag(node: Any) -> Any:
        if isinstance(node, list):
            return [untag(child) for child in node]
        if isinstance(node, dict):
            if TUPLE in node:
                return tuple(untag(child) for child in node[TUPLE])
            return {key: untag(child) for key, child in node.items()}
        return specs.leaf_spec(node)

    if value is None:
        return b""
    try:
        return specs.encode_spec(untag(value))
    except (InvalidArgumentError, TypeError) as error:
        raise InvalidArgumentError(f"{where}: bad element_spec: {error}") from None


def write_manifest(
    path: str,
    *,
    element_spec: bytes,
    chunks: list[dict[str, Any]],
    compression: str | None,
    cardinality: int,
    dataset_id: str,
) -> None:
    """Finishes the save at ``path``: writes ``manifest.json`` (atomically).

    ``chunks`` (``ChunkWriter.info`` dicts) in the order a read goes;
    ``cardinality`` must be their element count. The ``SAVING`` marker is
    removed once the manifest is written.
    """
    _check_path(path)
    where = f"the manifest of the save at {path}"
    listed = [_check_chunk(chunk, where) for chunk in chunks]
    names = [chunk["name"] for chunk in listed]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"{where}: chunk names repeat")
    total = sum(chunk["elements"] for chunk in listed)
    if type(cardinality) is not int or cardinality != total:
        raise InvalidArgumentError(
            f"{where}: cardinality {cardinality!r} is not the chunks' {total} elements"
        )
    if not isinstance(dataset_id, str):
        raise InvalidArgumentError(
            f"{where}: dataset_id must be a str, got {dataset_id!r}"
        )
    manifest = {
        "format": FORMAT,
        "dataset_id": dataset_id,
        "compression": _check_compression(compression),
        "cardinality": cardinality,
        "element_spec": _spec_json(element_spec),
        "chunks": listed,
    }
    data = json.dumps(manifest, indent=1).encode()
    try:
        with fs.writing(fs.join(path, MANIFEST)) as file:
            file.write(data)
    except Exception as error:
        raise _io_error(where, error) from error
    with contextlib.suppress(Exception):  # the manifest says it all
        fs.remove(fs.join(path, SAVING))
    with contextlib.suppress(Exception):  # what killed workers left
        fs.remove_temporaries(fs.join(path, CHUNKS))


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of the finished save at ``path``, checked.

    As ``write_manifest``'s arguments (``element_spec`` as
    ``specs.encode_spec`` bytes) plus ``format``. Raises
    ``FailedPreconditionError`` for a save not finished (a ``SAVING`` marker,
    no manifest), ``NotFoundError`` where there is no save at all, and
    ``InvalidArgumentError`` for a malformed manifest or another format,
    each naming the path.
    """
    _check_path(path)
    where = fs.join(path, MANIFEST)
    try:
        manifest = _read_json(where, "zmqdata save manifest")
    except NotFoundError:
        saving = _saving_id(path)
        if saving is not None:
            raise FailedPreconditionError(
                f"the save at {path} is not finished: save {saving!r} has not "
                f"written its {MANIFEST} (it is still running, or it failed)"
            ) from None
        raise NotFoundError(
            f"no finished save at {path}: no {MANIFEST} (a save not finished, or "
            "not a save)"
        ) from None
    if manifest.get("format") != FORMAT:
        raise InvalidArgumentError(
            f"{where}: format {manifest.get('format')!r}; this zmqdata reads {FORMAT!r}"
        )
    chunks = manifest.get("chunks")
    if not isinstance(chunks, list):
        raise InvalidArgumentError(f"{where}: chunks must be a list")
    listed = [_check_chunk(chunk, where) for chunk in chunks]
    cardinality = manifest.get("cardinality")
    if cardinality != sum(chunk["elements"] for chunk in listed):
        raise InvalidArgumentError(
            f"{where}: cardinality {cardinality!r} is not its chunks' element count"
        )
    compression = manifest.get("compression")
    try:
        _check_compression(compression)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"{where}: {error}") from None
    return {
        "format": FORMAT,
        "dataset_id": manifest.get("dataset_id"),
        "compression": compression,
        "cardinality": cardinality,
        "element_spec": _spec_bytes(manifest.get("element_spec"), where),
        "chunks": listed,
    }
