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
with a reader that needs no zmqdata. Pure: no sockets. The elements'
encoding is ``snapshot_codec``, the chunks ``snapshot_chunks``; this module
claims a save and writes and reads its manifest.

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

import contextlib
import json
from collections.abc import Collection, Mapping
from typing import Any

from zmqdata._dataset import fs, specs
from zmqdata._dataset.snapshot_chunks import (
    CHUNKS,
    ChunkWriter,
    CorruptChunkError,
    check_chunk,
    check_compression,
    check_path,
    chunk_path,
    io_error,
    is_chunk_name,
    read_chunk,
)
from zmqdata._dataset.snapshot_codec import TUPLE, Refused, tagged
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)

__all__ = [
    "FORMAT",
    "ChunkWriter",
    "CorruptChunkError",
    "begin",
    "chunk_path",
    "is_chunk_name",
    "read_chunk",
    "read_manifest",
    "remove_chunks",
    "resolve_compression",
    "saving_marker",
    "write_manifest",
]

FORMAT = "zmqdata.snapshot/1"
MANIFEST = "manifest.json"
SAVING = "SAVING"


def resolve_compression(compression: str | None, path: str) -> str | None:
    """How chunks are written: ``"AUTO"`` is zstd on object stores only.

    Object stores' reads cost the network; local reads cost the
    decompression (raw chunks load 2.3x faster from a hot page cache,
    docs/performance.md "Preprocess once").

    >>> resolve_compression("AUTO", "s3://b/save"), resolve_compression("AUTO", "/data")
    ('zstd', None)
    >>> resolve_compression("zstd", "/d")
    'zstd'
    """
    if compression == "AUTO":
        return "zstd" if fs.is_url(path) else None
    return compression


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


def saving_marker(path: str) -> dict[str, Any] | None:
    """The ``SAVING`` marker under ``path`` (``save_id``, what ``begin`` added), if any."""
    try:
        marker: dict[str, Any] = _read_json(fs.join(path, SAVING), "save marker")
    except NotFoundError:
        return None
    return marker


def _saving_id(path: str) -> str | None:
    """The id of the save whose ``SAVING`` marker lies under ``path``, if any."""
    marker = saving_marker(path)
    return None if marker is None else str(marker.get("save_id"))


def _finished(path: str) -> bool:
    """Whether ``path`` holds a finished save (its manifest)."""
    try:
        with fs.open_binary(fs.join(path, MANIFEST)):
            return True
    except NotFoundError:
        return False


def begin(
    path: str,
    save_id: str,
    owner: Mapping[str, Any] | None = None,
    take_over: bool = False,
) -> None:
    """Claims ``path`` for save ``save_id``: writes its ``SAVING`` marker.

    ``owner``: more to say in the marker (a local writer's host and process).

    Refused (``FailedPreconditionError`` naming the path, nothing written)
    where ``path`` holds a finished save (``manifest.json``) or, unless
    ``take_over``, another save's marker; the same save again (resuming) is
    fine. A path that cannot be written raises ``PermissionDeniedError``
    naming it.

    >>> import tempfile
    >>> path = tempfile.mkdtemp()
    >>> begin(path, "a"); begin(path, "a")
    >>> begin(path, "b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    zmqdata.errors.FailedPreconditionError: ... is being written by save 'a' ...
    """
    check_path(path)
    if not isinstance(save_id, str) or not save_id:
        raise InvalidArgumentError(
            f"a save id must be a non-empty str, got {save_id!r}"
        )
    if _finished(path):
        raise FailedPreconditionError(
            f"{path} holds a finished save ({MANIFEST}); nothing was overwritten: "
            "save to another path (or remove that save)"
        )
    fields = {**(owner or {}), "format": FORMAT, "save_id": save_id}
    marker = json.dumps(fields).encode()
    where = f"the save at {path}"
    try:
        with fs.writing(fs.join(path, SAVING), exclusive=True) as file:
            file.write(marker)
        return
    except FileExistsError:
        pass
    except Exception as error:
        raise io_error(where, error, denied=True) from error
    other = _saving_id(path)
    if other != save_id and not take_over:
        raise FailedPreconditionError(
            f"{path} is being written by save {other!r} (its {SAVING} marker); "
            "nothing was overwritten: save to another path (or, if that save is "
            "dead, remove the folder)"
        )
    try:  # resuming: still writable?
        with fs.writing(fs.join(path, SAVING)) as file:
            file.write(marker)
    except Exception as error:
        raise io_error(where, error, denied=True) from error


def _spec_json(element_spec: bytes) -> Any:
    """The element spec (``specs.encode_spec`` bytes) as JSON: leaves as text."""
    if not isinstance(element_spec, bytes):
        raise InvalidArgumentError(
            f"element_spec must be the bytes of specs.encode_spec, got {element_spec!r}"
        )
    spec = specs.decode_spec(element_spec)
    try:
        return None if spec is None else tagged(spec, specs.leaf_text)
    except Refused as refused:
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
    check_path(path)
    where = f"the manifest of the save at {path}"
    listed = [check_chunk(chunk, where) for chunk in chunks]
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
        "compression": check_compression(compression),
        "cardinality": cardinality,
        "element_spec": _spec_json(element_spec),
        "chunks": listed,
    }
    data = json.dumps(manifest, indent=1).encode()
    try:
        with fs.writing(fs.join(path, MANIFEST)) as file:
            file.write(data)
    except Exception as error:
        raise io_error(where, error) from error
    with contextlib.suppress(Exception):  # the manifest says it all
        fs.remove(fs.join(path, SAVING))
    with contextlib.suppress(Exception):  # what killed workers left
        fs.remove_temporaries(fs.join(path, CHUNKS))


def remove_chunks(path: str, keep: Collection[str] = ()) -> None:
    """Removes the chunks (and temporary files) under the save at ``path`` but ``keep``.

    >>> import os, tempfile
    >>> path = tempfile.mkdtemp()
    >>> for name in ("c0", "c1"):
    ...     with ChunkWriter(path, name, None) as writer:
    ...         writer.write(1)
    >>> remove_chunks(path, keep={"c1"}); os.listdir(os.path.join(path, CHUNKS))
    ['c1']
    """
    folder = fs.join(path, CHUNKS)
    fs.remove_temporaries(folder)
    try:
        left = fs.expand(fs.join(folder, "*"))
    except NotFoundError:  # none
        return
    for chunk in left:
        if chunk.rsplit("/", 1)[-1] not in keep:
            fs.remove(chunk)


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of the finished save at ``path``, checked.

    As ``write_manifest``'s arguments (``element_spec`` as
    ``specs.encode_spec`` bytes) plus ``format``. Raises
    ``FailedPreconditionError`` for a save not finished (a ``SAVING`` marker,
    no manifest), ``NotFoundError`` where there is no save at all, and
    ``InvalidArgumentError`` for a malformed manifest or another format,
    each naming the path.
    """
    check_path(path)
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
    listed = [check_chunk(chunk, where) for chunk in chunks]
    cardinality = manifest.get("cardinality")
    if cardinality != sum(chunk["elements"] for chunk in listed):
        raise InvalidArgumentError(
            f"{where}: cardinality {cardinality!r} is not its chunks' element count"
        )
    compression = manifest.get("compression")
    try:
        check_compression(compression)
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
