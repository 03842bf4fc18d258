"""A service job's split under a ``snapshot``: its chunk read, or made and written.

A ``distributed_epoch`` job over a pipeline with a ``snapshot`` (or a file
``cache``) runs each split alone (``split_runs``, or a multi-rank read's
splits), and the dispatcher says with each split whether the snapshot holds
its chunk (``IterContext.chunk``):

* it does: the chunk's elements are the split's, and none of the ops before
  the snapshot run;
* it does not: the ops run, and their outputs go on while they are written
  to a chunk of their own, committed (and reported with the task's next
  split request) once the run has made the whole split. A run cut short
  (the rest of its split was delivered before) commits nothing.

A chunk that cannot be read (removed, damaged) is made again instead, and a
chunk that cannot be written (a full disk) is given up, its reason reported
(the job's save fails with it; the next job writes the snapshot again): the
read goes on either way.

>>> import tempfile, numpy as np, zmqdata as zd
>>> from zmqdata._dataset.iterator import IterContext, ListSplitProvider, SplitChunk
>>> from zmqdata._dataset.node import make_iterator
>>> from zmqdata._dataset.ops.source import find_split_source
>>> root = zd.Dataset.range(10).map(lambda x: x * 2).snapshot(tempfile.mkdtemp())._node
>>> def run(chunk):
...     ctx = IterContext(find_split_source(root), ListSplitProvider([[4, 7]]), chunk=chunk)
...     return [int(x) for x in make_iterator(root, ctx)]
>>> reports = []
>>> run(SplitChunk(1, None, reports.append, print)), reports[0][0], reports[0][2]
([8, 10, 12], 1, 3)
>>> run(SplitChunk(1, reports[0][1:], reports.append, print))  # read back
[8, 10, 12]
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator
from typing import Any

from zmqdata._dataset import snapshot
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Node, make_iterator
from zmqdata._dataset.ops import cache
from zmqdata._dataset.snapshot_chunks import chunk_name
from zmqdata.errors import NotFoundError, ZmqDataError

logger = logging.getLogger("zmqdata.worker")


class SplitChunkIterator(DatasetIterator):
    """One split's elements under a snapshot: from its chunk, or made and written."""

    def __init__(self, node: Node, ctx: IterContext) -> None:
        assert ctx.chunk is not None
        self._node, self._ctx, self._split = node, ctx, ctx.chunk
        self._directory = cache.directory(node)
        self._compression = cache.compression(node)
        self._input: DatasetIterator | None = None
        self._writer: snapshot.ChunkWriter | None = None
        self._reader: Any = None
        """The chunk's elements (a generator: closed with the iterator)."""
        self._elements = self._read() if self._split.chunk is not None else None
        if self._elements is None:
            self._make()

    def _read(self) -> Iterator[Any] | None:
        """The chunk's elements, checked; None if it cannot be read (made again)."""
        name, elements, nbytes, crc32 = self._split.chunk  # type: ignore[misc]
        info = {"name": name, "elements": elements, "bytes": nbytes, "crc32": crc32}
        self._reader = snapshot.read_chunk(
            self._directory, info, compression=self._compression
        )
        try:  # the chunk is read and checked before its first element comes
            first = list(itertools.islice(self._reader, 1))
        except (NotFoundError, snapshot.CorruptChunkError) as error:
            logger.warning(
                "snapshot %s: %s; making the split again", self._directory, error
            )
            return None
        return itertools.chain(first, self._reader)

    def _make(self) -> None:
        """Runs the ops before the snapshot, writing what they make."""
        self._input = make_iterator(self._node.inputs[0], self._ctx)
        name = chunk_name(self._split.ordinal)
        writer = snapshot.ChunkWriter(self._directory, name, self._compression)
        try:
            self._writer = writer.__enter__()
        except ZmqDataError as error:
            self._give_up(error)

    def __next__(self) -> Any:
        if self._elements is not None:
            return next(self._elements)
        assert self._input is not None
        try:
            element = next(self._input)
        except StopIteration:
            self._commit()
            raise
        if self._writer is not None:
            try:
                self._writer.write(element)
            except ZmqDataError as error:
                self._give_up(error)
        return element

    def _commit(self) -> None:
        """The split was made whole: its chunk is committed and reported."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.__exit__(None, None, None)
        except ZmqDataError as error:
            self._give_up(error)
            return
        info = writer.info
        self._split.written(
            [
                self._split.ordinal,
                info["name"],
                info["elements"],
                info["bytes"],
                info["crc32"],
            ]
        )

    def _give_up(self, error: ZmqDataError) -> None:
        """The chunk cannot be written: the split streams on, unwritten.

        The job's save fails with the reason (``SplitChunk.failed``): the job
        reads on without writing, and the next job tries again.
        """
        logger.warning(
            "snapshot %s: %s; the split is not written", self._directory, error
        )
        self._split.failed(error.message)
        self._drop()

    def _drop(self) -> None:
        """The chunk being written is not committed: its temporary file goes."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(OSError, ZmqDataError):  # (a full disk, again)
                writer.__exit__(GeneratorExit, GeneratorExit(), None)

    def close(self) -> None:
        self._drop()
        if self._reader is not None:
            self._reader.close()
        if self._input is not None:
            self._input.close()
