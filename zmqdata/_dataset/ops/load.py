"""A finished save (``distributed_save``) as a source: ``Dataset.load``.

Its files are the save's chunks, in the manifest's order, and their element
counts come from the manifest when the dataset is built, as does the element
spec: cardinality and spec are known without reading any data. A
``RecordSource``: splittable per element, so under ``distributed_epoch`` a lost
worker repeats nothing and a saved read resumes mid-chunk. A chunk is read
whole and checked (size, CRC-32) before its first element comes out
(``snapshot.read_chunk``); a split that starts mid-chunk skips to it.

>>> import tempfile, numpy as np
>>> from zmqdata._dataset import snapshot, specs, structure
>>> path = tempfile.mkdtemp()
>>> with snapshot.ChunkWriter(path, "c0", None) as writer:
...     for i in range(3):
...         writer.write(np.int64(i))
>>> spec = specs.encode_spec(structure.TensorSpec((), np.dtype("int64")))
>>> snapshot.write_manifest(path, element_spec=spec, chunks=[writer.info],
...     compression=None, cardinality=3, dataset_id="d")
>>> node = build(path)
>>> node.args["counts"], list(Load().records(node, node.args["files"][0], 1))
([3], [np.int64(1), np.int64(2)])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from zmqdata._dataset import snapshot, specs
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops.records import RecordSource, UnreadableFileError


class Load(RecordSource):
    """The elements of a finished save, chunk after chunk."""

    name = "load"

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return specs.decode_spec(node.args["spec"])

    def count(self, path: str, args: dict[str, Any]) -> int:
        """The manifest's element count of the chunk at ``path``."""
        return int(args["counts"][args["files"].index(path)])

    def records(self, node: Node, path: str, first: int) -> Iterator[Any]:
        """The chunk's elements from ``first`` on, once it is read and checked."""
        args = node.args
        info = args["chunks"][args["files"].index(path)]
        return _checked(
            snapshot.read_chunk(
                args["path"], info, first, compression=args["compression"]
            )
        )


def _checked(elements: Iterator[Any]) -> Iterator[Any]:
    """``elements``, with a chunk that fails its checks unreadable as a whole."""
    try:
        yield from elements
    except snapshot.CorruptChunkError as error:
        raise UnreadableFileError(str(error)) from error


def build(path: Any) -> Node:
    """The ``load`` node of ``Dataset.load``: the manifest read, chunks listed.

    Raises ``TypeError`` for a path that is not a str, and ``snapshot.read_manifest``'s
    errors for a save that is not finished, absent or malformed.
    """
    if not isinstance(path, str) or not path:
        raise TypeError(f"load path must be a non-empty str, got {path!r}")
    manifest = snapshot.read_manifest(path)
    chunks = manifest["chunks"]
    return Node(
        "load",
        {
            "path": path,
            "files": [snapshot.chunk_path(path, c["name"]) for c in chunks],
            "counts": [c["elements"] for c in chunks],
            "chunks": chunks,
            "compression": manifest["compression"],
            "spec": manifest["element_spec"],
        },
    )
