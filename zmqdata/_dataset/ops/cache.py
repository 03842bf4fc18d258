"""``cache`` and ``snapshot``: a pipeline's output made once, read by later passes.

Both keep the output of the ops before them in the save format
(``_dataset/snapshot.py``, docs/formats.md) and differ in where:

* ``cache()`` keeps it in memory, filled by the first complete pass;
* ``cache(filename)`` writes it under ``filename``;
* ``snapshot(path)`` writes it under ``path/<fingerprint>``, the fingerprint
  of the ops before it (their arguments and functions' code, by value), so
  a changed pipeline gets its own.

A local pass (``cache_local``) reads a finished one, or else writes it while
it streams: it is finished when a pass ends, and a pass cut short leaves
nothing that reads as finished. On a service worker the job says, split by
split, whether to read the split's chunk or to make and write it
(``IterContext.chunk``, ``cache_chunks``); a pass that reads only part of its
source otherwise passes its input through.

>>> import tempfile, zmqdata as zd
>>> path = tempfile.mkdtemp()
>>> ds = zd.Dataset.range(3).map(lambda x: x * 10).snapshot(path)
>>> [int(x) for x in ds], [int(x) for x in ds]  # written, then read
([0, 10, 20], [0, 10, 20])
"""

from __future__ import annotations

from typing import Any

from zmqdata._dataset import fs, graph, snapshot
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._dataset.ops import split_runs
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dataset.snapshot_chunks import check_path
from zmqdata.errors import InvalidArgumentError

PERSISTED = ("cache", "snapshot")
"""The ops that keep their input's output: ``cache``, ``snapshot``."""
CHUNK_SPLIT_SIZE = (1, 256)
"""Source elements per chunk of a snapshot written split by split: about
``SPLITS_PER_PASS`` chunks, of at most 256 source elements."""


class _Persisted(Op):
    """Passes its input's elements on, kept for later passes."""

    splits_alone = True

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        if ctx.chunk is not None:
            from zmqdata._dataset.ops import cache_chunks

            return cache_chunks.SplitChunkIterator(node, ctx)
        if ctx.split_provider is not None:  # a part of the data: never whole
            return make_iterator(node.inputs[0], ctx)
        from zmqdata._dataset.ops import cache_local

        if in_memory(node):
            return cache_local.memory_iterator(node, ctx)
        return cache_local.file_iterator(node, ctx, directory(node))


class Cache(_Persisted):
    name = "cache"


class Snapshot(_Persisted):
    name = "snapshot"


def in_memory(node: Node) -> bool:
    """Whether ``node`` is a ``cache()`` in memory (no file name)."""
    return node.op == "cache" and not node.args["filename"]


def directory(node: Node) -> str:
    """Where a ``snapshot`` or a file ``cache`` keeps its elements.

    >>> import zmqdata as zd
    >>> node = zd.Dataset.range(3).snapshot("/snaps")._node
    >>> directory(node) == "/snaps/" + node.args["fingerprint"]
    True
    >>> directory(zd.Dataset.range(3).cache("/c/train")._node)
    '/c/train'
    """
    if node.op == "cache":
        return str(node.args["filename"])
    return fs.join(node.args["path"], node.args["fingerprint"])


def chunk_size(input_node: Node) -> int:
    """Source elements per chunk where ``input_node`` is written split by split.

    The same for every job over the same ops (whatever follows them): a
    multiple of their first ``batch``. Raises ``InvalidArgumentError`` naming
    why the ops cannot run split by split (no splittable source, an op that
    counts over the whole dataset, no end).

    >>> import zmqdata as zd
    >>> chunk_size(zd.Dataset.range(10_000).map(abs).batch(10)._node)
    160
    >>> chunk_size(zd.Dataset.range(10).take(5)._node)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    zmqdata.errors.InvalidArgumentError: take before a snapshot counts ...
    """
    for node in split_runs.main_chain(input_node):
        if node.op in split_runs.WHOLE_DATASET_OPS:
            raise InvalidArgumentError(
                f"{node.op} before a snapshot counts elements over the whole "
                "dataset, but a snapshot is written split by split: put it after "
                "the snapshot"
            )
    source = find_split_source(input_node)
    length = source.definition.cardinality(source, [])
    if length < 0:
        raise InvalidArgumentError(f"{source.op} before a snapshot has no end")
    batch = split_runs.whole_batch(input_node)
    return split_runs.split_size(length, CHUNK_SPLIT_SIZE, batch)


def compression(node: Node) -> str | None:
    """How ``node`` compresses its chunks (a file ``cache``: raw)."""
    return node.args.get("compression")


def build(op: str, input_node: Node, place: Any, compression: Any = None) -> Node:
    """The ``cache`` (``place``: a file name, or "" for memory) or ``snapshot`` node.

    Raises ``InvalidArgumentError`` naming a bad path or compression.
    """
    if op == "cache":
        if not isinstance(place, str):
            raise TypeError(f"cache filename must be a str, got {place!r}")
        fingerprint = _fingerprint(input_node) if place else ""  # memory: none
        return Node(
            "cache", {"filename": place, "fingerprint": fingerprint}, (input_node,)
        )
    path = check_path(place)
    if compression not in ("AUTO", "zstd", None):
        raise ValueError(
            f"snapshot compression must be 'AUTO', 'zstd' or None, got {compression!r}"
        )
    args = {
        "path": path,
        "compression": snapshot.resolve_compression(compression, path),
        "fingerprint": _fingerprint(input_node),
    }
    return Node("snapshot", args, (input_node,))


def _fingerprint(node: Node) -> str:
    """The fingerprint of the pipeline ``node``: its ops, arguments and functions."""
    return graph.fingerprint(graph.serialize(node))
