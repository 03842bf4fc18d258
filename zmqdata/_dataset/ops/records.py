"""Record files as sources, splittable per record: the base of the file readers.

A ``RecordSource`` node holds its files (local paths or fsspec URLs) and how
many records each has, counted once when the dataset is built (Parquet from
its footer; TFRecord and tar shards by reading their framing). Its elements
are numbered across the files, so a split is a range of records: under
``distributed_epoch`` a lost worker repeats nothing, a saved read resumes
mid-file, and a seeded order mixes records of every file. The first-come
splits stay within one file; a reader streams a file from the split's first
record on and keeps its place while the next split follows on.

A format implements ``count`` (records in one file) and ``records`` (the
records of one file from a given one on, streamed).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from zmqdata._dataset.block import END, Block
from zmqdata._dataset.iterator import DatasetIterator, IterContext, Split, SplitProvider
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops.source import (
    SplitIterator,
    SplittableSource,
    WholeSource,
    base_of,
)
from zmqdata._wire.lineage import EMPTY
from zmqdata.errors import InvalidArgumentError


class UnreadableFileError(InvalidArgumentError):
    """A file that fails as a whole (e.g. its checksum), not one record.

    The rest of its split is lost with it (``ignore_errors`` skips it all).
    """


class RecordSource(SplittableSource):
    """A source of records stored in files, numbered across the files."""

    def count(self, path: str, args: dict[str, Any]) -> int:
        """How many records the file at ``path`` holds (when the dataset is built)."""
        raise NotImplementedError

    def records(self, node: Node, path: str, first: int) -> Iterator[Any]:
        """The records of ``path`` from record ``first`` on, as elements."""
        raise NotImplementedError

    def record_blocks(
        self, node: Node, path: str, first: int
    ) -> Iterator[Block] | None:
        """The records of ``path`` from ``first`` on, as blocks; None: one at a time only."""
        return None

    @staticmethod
    def bounds(node: Node) -> list[int]:
        """The index of each file's first record, then the total."""
        return [0, *itertools.accumulate(node.args["counts"])]

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return int(sum(node.args["counts"]))

    def num_splits(self, node: Node, max_split_size: int) -> int:
        return sum(-(-c // max_split_size) for c in node.args["counts"])

    def split_at(self, node: Node, max_split_size: int, index: int) -> Split:
        """Split ``index``: a range of records of one file (files never share one)."""
        first, left = 0, index
        for count in node.args["counts"]:
            splits = -(-count // max_split_size)
            if left < splits:
                lo = first + left * max_split_size
                return [lo, min(lo + max_split_size, first + count)]
            left -= splits
            first += count
        raise IndexError(f"split {index} past the last")

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        provider = ctx.provider_for(node) or WholeSource(self.cardinality(node, []))
        return RecordIterator(self, node, provider, ctx.lineage)


SKIP_AHEAD = 4_096
"""The most records an open reader reads past to reach a record (else it opens anew)."""


@dataclass(frozen=True, slots=True)
class _Chunk:
    """A block a format read: records ``at`` to ``end`` of ``file`` (numbered across files)."""

    file: int
    at: int
    block: Block

    @property
    def end(self) -> int:
        return self.at + self.block.n


class RecordIterator(SplitIterator):
    """Reads record splits ``[lo, hi]`` (or ``[lo, hi, base]``), streaming each file.

    A ``SplitIterator`` whose elements come from the open file, not from
    ``read``: one file is open at a time, and a split that starts where the
    last one ended goes on reading it. With ``lineage`` each record stands for
    its key.
    """

    def __init__(
        self,
        op: RecordSource,
        node: Node,
        provider: SplitProvider,
        lineage: bool = False,
    ) -> None:
        super().__init__(op, node, provider)
        self._records = op
        self._lineage = lineage
        self._bounds = op.bounds(node)
        self._files: list[str] = node.args["files"]
        self._reader: Iterator[Any] | None = None
        self._reader_at = (-1, -1)
        """(file, index of the record the open reader yields next)."""
        self._blocks: Iterator[Block] | None = None
        self._blocks_at = (-1, -1)
        """(file, index of the record the open block reader yields next)."""
        self._chunk: _Chunk | None = None
        """The block read last."""

    def __next__(self) -> Any:
        if not self._advance():
            raise StopIteration
        assert self._split is not None
        index = self._next_index
        file = bisect.bisect_right(self._bounds, index) - 1
        end = min(self._split[1], self._bounds[file + 1])  # of the split, in the file
        try:
            element = self._read(file, index)
        except StopIteration:
            self._step_past(index, end)
            raise self._missing(file, index, end) from None
        except Exception as error:
            self._step_past(index, _failed_up_to(error, index, end))
            raise
        self._next_index = index + 1
        self._reader_at = (file, index + 1)
        if self._lineage:
            key = base_of(self._split) + index
            self.lineage = (key, key + 1)
        return element

    def next_block(self, limit: int) -> Block | None:
        """Up to ``limit`` records of one file and split, cut from the blocks the format reads.

        The block read last is kept: splits of it taken one after another
        (another worker took the splits between) read the file once.
        """
        if not self._advance():
            return END if self._blocks is not None else None
        assert self._split is not None
        index = self._next_index
        file = bisect.bisect_right(self._bounds, index) - 1
        last = min(self._split[1], self._bounds[file + 1])  # of the split, in the file
        end = min(last, index + limit)
        chunk = self._chunk
        if chunk is None or chunk.file != file or not chunk.at <= index < chunk.end:
            try:  # a failed read goes on past what failed, as ``next`` does
                chunk = self._chunk = self._read_chunk(file, index)
            except StopIteration:
                self._step_past(index, last)
                raise self._missing(file, index, last) from None
            except Exception as error:
                self._step_past(index, _failed_up_to(error, index, last))
                raise
            if chunk is None:
                return None
        block = chunk.block.part(index - chunk.at, min(end, chunk.end) - chunk.at)
        self._next_index = index + block.n
        if self._lineage:
            key = base_of(self._split) + index
            self.lineage = (key, key + block.n)
        return block

    def _read_chunk(self, file: int, index: int) -> _Chunk | None:
        """The block of ``file`` holding record ``index`` (None: the format reads none).

        Read on from the open block reader if it is not past ``index``;
        ``StopIteration`` if the file has no record ``index``.
        """
        at_file, at = self._blocks_at
        if self._blocks is None or at_file != file or at > index:
            self.close()
            self._blocks = self._records.record_blocks(
                self._node, self._files[file], index - self._bounds[file]
            )
            if self._blocks is None:
                return None
            self._blocks_at = (file, index)
        while True:
            block = next(self._blocks)
            at = self._blocks_at[1]
            self._blocks_at = (file, at + block.n)
            if index < at + block.n:
                return _Chunk(file, at, block)

    def _read(self, file: int, index: int) -> Any:
        """Record ``index`` (of ``file``), from the open reader or a new one there.

        A reader a little behind ``index`` (other workers took the splits
        between) reads on to it: opening anew decodes from the row group's start.
        """
        at_file, at = self._reader_at
        if at_file != file or not at <= index <= at + SKIP_AHEAD:
            self._open(file, index)
        assert self._reader is not None
        try:
            for _ in range(index - self._reader_at[1]):
                next(self._reader)
        except Exception:  # a record read past failed: not this read's to report
            self._open(file, index)
        return next(self._reader)

    def _missing(self, file: int, index: int, end: int) -> InvalidArgumentError:
        """The error for records ``index`` to ``end`` that ``file`` lacks."""
        first = self._bounds[file]
        counted = self._bounds[file + 1] - first
        missing = (
            f"record {index - first} is"
            if end == index + 1
            else f"records {index - first} to {end - first - 1} are"
        )
        return InvalidArgumentError(
            f"{self._files[file]}: {missing} missing: the file has fewer records "
            f"than the {counted} counted when the dataset was built (was it "
            "changed?)"
        )

    def _step_past(self, index: int, end: int) -> None:
        """Records ``index`` to ``end`` failed: the read goes on after them.

        They stand for their keys (``ignore_errors`` claims them); the reader
        is closed, and opened again at ``end`` if the split goes on.
        """
        self.close()
        self._next_index = end
        if self._lineage:
            assert self._split is not None
            base = base_of(self._split)
            self.lineage = (base + index, base + end)

    def _open(self, file: int, index: int) -> None:
        self.close()
        first = index - self._bounds[file]
        self._reader = iter(self._records.records(self._node, self._files[file], first))
        self._reader_at = (file, index)

    def set_state(self, state: dict[str, Any]) -> None:
        self.close()
        super().set_state(state)
        self.lineage = EMPTY

    def close(self) -> None:
        reader, self._reader = self._reader, None
        blocks, self._blocks = self._blocks, None
        self._reader_at = self._blocks_at = (-1, -1)
        self._chunk = None
        for each in (reader, blocks):
            close = getattr(each, "close", None)
            if close is not None:
                close()


def _failed_up_to(error: Exception, index: int, end: int) -> int:
    """Where a read that failed at record ``index`` goes on (``end``: the split's).

    A bad record (``InvalidArgumentError``) fails alone: the next one may be
    fine. A file that can't be read (``UnreadableFileError``, any other
    error) fails with the rest of the split.
    """
    bad_record = isinstance(error, InvalidArgumentError) and not isinstance(
        error, UnreadableFileError
    )
    return index + 1 if bad_record else end
