"""``cache`` and ``snapshot`` in a local pass: read what a complete pass kept, or keep it.

A pass over a ``cache`` or ``snapshot`` node reads its store if a complete
pass filled it, running none of the ops before it. Else it runs its input,
passes each element on and keeps it (a ``_Sink``), and the store is filled
when the input ends; a pass that stops short (closed, dropped, its input
raised) keeps nothing, as in tf.data.

* ``cache()``: in memory, per dataset (``Node``): every later pass over it,
  a ``repeat``'s next epoch too, reads the elements kept. Passes that run at
  once each keep theirs; the first to end fills the cache.
* ``cache(filename)``, ``snapshot(path)``: a save (``snapshot.py``) in
  ``cache.directory``, for later runs too. The writing pass claims the folder
  (``snapshot_claims``): another pass that finds it claimed by a live writer
  passes its input through and writes nothing; one whose writer died is
  taken over. Chunks are committed as they fill (``CHUNK_BYTES``), the
  manifest once the input ends: a save not finished is never read. A save
  of another pipeline there (``dataset_id``: its fingerprint) is refused.

Positions (``get_state``): a pass reading the store saves ``{"read": n}``
(elements read); restored where the store is not filled (a cache in memory,
restored in a new process), it runs its input and skips ``n`` elements. A pass
running its input saves ``{"input": ...}``; restored, it passes its input
through from there and keeps nothing (the elements before are not kept).

>>> import zmqdata as zd
>>> calls = []
>>> ds = zd.Dataset.range(3).map(lambda x: calls.append(x) or x).cache()
>>> [int(x) for x in ds.repeat(2)], len(calls)  # the 2nd epoch: from memory
([0, 1, 2, 0, 1, 2], 3)
"""

from __future__ import annotations

import abc
import collections
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from zmqdata._dataset import builders, fs, snapshot, snapshot_claims, specs
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Node, make_iterator
from zmqdata._dataset.ops import cache
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dataset.ops.split_runs import run_split
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)

CHUNK_BYTES = 64 << 20
"""A chunk being written is committed once its elements are this large (encoded)."""


class _Sink(Protocol):
    """Where a pass keeps its input's elements."""

    def add(self, element: Any) -> None:
        """Keeps ``element``."""

    def finish(self) -> None:
        """The input ended: what was kept fills the store."""

    def abandon(self) -> None:
        """The pass stopped short: nothing is kept."""


class _Store(abc.ABC):
    """What one ``cache``/``snapshot`` node keeps."""

    @abc.abstractmethod
    def elements(self, first: int) -> Iterator[Any] | None:
        """The kept elements from ``first`` on; None while the store is not filled."""

    @abc.abstractmethod
    def sink(self) -> _Sink | None:
        """Where a pass running the input keeps its elements; None: nowhere."""

    def input(
        self, node: Node, ctx: IterContext, sink: _Sink | None
    ) -> DatasetIterator:
        """The pass over the ops before ``node``, keeping into ``sink``."""
        return make_iterator(node.inputs[0], ctx)


_FILLED: weakref.WeakKeyDictionary[Node, list[Any]] = weakref.WeakKeyDictionary()
"""The elements each ``cache()`` node's first complete pass made."""
_FILLING = threading.Lock()


class _Memory(_Store):
    def __init__(self, node: Node) -> None:
        self._node = node

    def elements(self, first: int) -> Iterator[Any] | None:
        kept = _FILLED.get(self._node)
        return None if kept is None else itertools.islice(kept, first, None)

    def sink(self) -> _Sink:
        return _MemorySink(self._node)


class _MemorySink:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._kept: list[Any] = []

    def add(self, element: Any) -> None:
        self._kept.append(element)

    def finish(self) -> None:
        with _FILLING:
            _FILLED.setdefault(self._node, self._kept)

    def abandon(self) -> None:
        self._kept = []


class _Files(_Store):
    def __init__(self, node: Node, directory: str) -> None:
        self._node, self._directory = node, directory

    def elements(self, first: int) -> Iterator[Any] | None:
        try:
            manifest = snapshot.read_manifest(self._directory)
        except (NotFoundError, FailedPreconditionError):  # none, or not finished
            return None
        fingerprint = self._node.args["fingerprint"]
        if manifest["dataset_id"] != fingerprint:
            raise FailedPreconditionError(
                f"{self._directory} holds the {self._node.op} of another pipeline "
                f"(fingerprint {manifest['dataset_id']!r}, this one's "
                f"{fingerprint!r}): nothing was read or overwritten; remove it, or "
                "use another path"
            )
        return _read(self._directory, manifest, first)

    def sink(self) -> _Sink | None:
        sink = _ChunkSink(self._node, self._directory)
        return sink if sink.save_id is not None else None

    def input(
        self, node: Node, ctx: IterContext, sink: _Sink | None
    ) -> DatasetIterator:
        """The ops before ``node`` run split by split, one chunk each, as jobs do.

        So a service job finds the chunks cut as its splits. Ops that cannot
        run so (``cache.chunk_size``) run as one pass, cut every ``CHUNK_BYTES``.
        """
        try:
            size = cache.chunk_size(node.inputs[0])
        except InvalidArgumentError:
            return make_iterator(node.inputs[0], ctx)
        if not isinstance(sink, _ChunkSink):
            return _BySplit(node.inputs[0], ctx, size, _nothing)
        sink.by_split = True
        return _BySplit(node.inputs[0], ctx, size, sink.cut)


def _nothing() -> None:
    """A split ended, with nothing to cut."""


class _BySplit(DatasetIterator):
    """Pipeline ``node`` run on each split of ``size`` alone, in order (``split_runs``).

    ``split_ended`` is called at the end of each split (also one that made nothing).
    """

    def __init__(
        self, node: Node, ctx: IterContext, size: int, split_ended: Callable[[], None]
    ) -> None:
        self._node, self._ctx, self._ended = node, ctx, split_ended
        self._source = find_split_source(node)
        length = self._source.definition.cardinality(self._source, [])
        self._splits = [[lo, min(lo + size, length)] for lo in range(0, length, size)]
        self._index = 0
        self._run: DatasetIterator | None = None

    def __next__(self) -> Any:
        while True:
            if self._run is None:
                if self._index >= len(self._splits):
                    raise StopIteration
                split = self._splits[self._index]
                self._run = run_split(self._node, self._source, split, self._ctx)
            try:
                return next(self._run)
            except StopIteration:
                self._close_run()
                self._index += 1
                self._ended()

    def get_state(self) -> dict[str, Any]:
        run = None if self._run is None else self._run.get_state()
        return {"split": self._index, "run": run}

    def set_state(self, state: dict[str, Any]) -> None:
        self._close_run()
        self._index = int(state["split"])
        if state["run"] is not None:
            split = self._splits[self._index]
            self._run = run_split(self._node, self._source, split, self._ctx)
            self._run.set_state(state["run"])

    def _close_run(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.close()

    def close(self) -> None:
        self._close_run()


def _read(directory: str, manifest: dict[str, Any], first: int) -> Iterator[Any]:
    """The elements of the finished save at ``directory`` from ``first`` on."""
    for info in manifest["chunks"]:
        skip = min(first, info["elements"])
        first -= skip
        if skip < info["elements"]:
            yield from snapshot.read_chunk(
                directory, info, skip, compression=manifest["compression"]
            )


class _Abandoned(Exception):
    """Thrown into an open chunk whose pass stopped short: not committed."""


class _ChunkSink:
    """Writes a pass's elements as the chunks of a save it claims, then its manifest."""

    def __init__(self, node: Node, directory: str) -> None:
        self._node, self._directory = node, directory
        self._chunks: list[dict[str, Any]] = []
        self._open: snapshot.ChunkWriter | None = None
        self.by_split = False
        """Chunks are cut where splits end (``cut``), not by size."""
        self.save_id: str | None = snapshot_claims.claim(directory, self)

    def add(self, element: Any) -> None:
        if self._open is None:
            self._start()
        assert self._open is not None
        self._open.write(element)
        if not self.by_split and self._open.encoded >= CHUNK_BYTES:
            self._commit()

    def cut(self) -> None:
        """A split ended: its chunk is committed (empty if it made nothing)."""
        if self.save_id is None:
            return
        if self._open is None:
            self._start()
        self._commit()

    def _start(self) -> None:
        name = f"{len(self._chunks):08d}-{self.save_id}.chunk"
        writer = snapshot.ChunkWriter(
            self._directory, name, cache.compression(self._node)
        )
        self._open = writer.__enter__()

    def _commit(self) -> None:
        writer, self._open = self._open, None
        if writer is not None:
            writer.__exit__(None, None, None)
            self._chunks.append(writer.info)

    def finish(self) -> None:
        try:
            self._commit()
            snapshot.write_manifest(
                self._directory,
                element_spec=specs.encode_spec(
                    builders.element_spec(self._node.inputs[0])
                ),
                chunks=self._chunks,
                compression=cache.compression(self._node),
                cardinality=sum(info["elements"] for info in self._chunks),
                dataset_id=self._node.args["fingerprint"],
            )
        except BaseException:
            self.abandon()
            raise
        self._release()

    def abandon(self) -> None:
        writer, self._open = self._open, None
        if writer is not None:
            writer.__exit__(_Abandoned, _Abandoned(), None)  # removes its file
        for info in self._chunks:
            fs.remove(snapshot.chunk_path(self._directory, info["name"]))
        self._chunks = []
        self._release()

    def _release(self) -> None:
        save_id, self.save_id = self.save_id, None
        if save_id is not None:
            snapshot_claims.release(self._directory, save_id)


class _KeepingIterator(DatasetIterator):
    """A pass over a ``cache``/``snapshot`` node: the store's elements, or its input's."""

    def __init__(self, node: Node, ctx: IterContext, store: _Store) -> None:
        self._node, self._ctx, self._store = node, ctx, store
        self._input: DatasetIterator | None = None  # running the input
        self._sink: _Sink | None = None
        self._dropped: weakref.finalize[Any, Any] | None = None
        self._kept = store.elements(0)  # reading the store
        self._read = 0
        if self._kept is None:
            self._sink = store.sink()
            if self._sink is not None:  # a pass dropped unfinished keeps nothing
                self._dropped = weakref.finalize(self, self._sink.abandon)
            self._input = store.input(node, ctx, self._sink)

    def __next__(self) -> Any:
        if self._input is None:
            element = next(self._kept or iter(()))
            self._read += 1
            return element
        try:
            element = next(self._input)
            self.lineage = self._input.lineage
            if self._sink is not None:
                self._sink.add(element)
        except StopIteration:
            self._end(finished=True)
            raise
        except BaseException:
            self._end(finished=False)
            raise
        return element

    def _end(self, finished: bool) -> None:
        sink, self._sink = self._sink, None
        if sink is None:
            return
        assert self._dropped is not None
        self._dropped.detach()
        if finished:
            sink.finish()
        else:
            sink.abandon()

    def get_state(self) -> dict[str, Any]:
        if self._input is None:
            return {"read": self._read}
        return {"input": self._input.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._end(finished=False)  # a restored pass keeps nothing
        self._close_kept()
        if "input" in state:
            self._close_input()
            self._input = self._store.input(self._node, self._ctx, None)
            self._input.set_state(state["input"])
            return
        self._close_input()
        self._read = int(state["read"])
        self._kept = self._store.elements(self._read)
        if self._kept is None:  # not kept here: made again
            self._input = self._store.input(self._node, self._ctx, None)
            collections.deque(itertools.islice(self._input, self._read), maxlen=0)

    def _close_kept(self) -> None:
        kept, self._kept = self._kept, None
        close = getattr(kept, "close", None)
        if close is not None:
            close()

    def _close_input(self) -> None:
        source, self._input = self._input, None
        if source is not None:
            source.close()

    def close(self) -> None:
        self._end(finished=False)
        self._close_kept()
        self._close_input()


def memory_iterator(node: Node, ctx: IterContext) -> DatasetIterator:
    """A pass over ``cache()`` node ``node``: kept in memory by the first complete one."""
    return _KeepingIterator(node, ctx, _Memory(node))


def file_iterator(node: Node, ctx: IterContext, directory: str) -> DatasetIterator:
    """A pass over a file ``cache`` or ``snapshot`` node, kept as a save in ``directory``."""
    return _KeepingIterator(node, ctx, _Files(node, directory))
