"""``TaskRunner``: runs one task's pipeline on a producer thread into its output.

The output is the one of the task's read mode (``outputs.py``).

Under DYNAMIC sharding the pipeline's source reads the splits that a
``RemoteSplitProvider`` fetches from the dispatcher, over a DEALER socket the
producer thread owns. Exactly-once tasks run each split alone and key its
outputs (``_wire/outputs.py``); they note what they were handed and what each
element stands for (``handed.py``). A task of an older dispatcher's job keys
source elements and tracks them through the ops (``_wire/lineage.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from zmqdata._dataset import profile as profiling
from zmqdata._dataset.block import Block
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IgnoredErrors,
    IterContext,
    expands_below,
)
from zmqdata._dataset.marks import Marks
from zmqdata._dataset.node import Node, make_iterator
from zmqdata._dataset.ops import split_runs
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dataset.ops.split_runs import run_split
from zmqdata._runtime import auth, shm, threads
from zmqdata._runtime.metrics import ServeStats
from zmqdata._runtime.spans import IDLE, Tracer
from zmqdata._wire.lineage import EMPTY, Lineage
from zmqdata._wire.modes import STATIC, ReadMode, ShardingPolicy
from zmqdata._wire.progress import Mark
from zmqdata._wire.tasks import TaskDef
from zmqdata._worker import retained, sharding
from zmqdata._worker.buffer import Cancelled, Encoded, Raw
from zmqdata._worker.compression import TaskCompression
from zmqdata._worker.dealt import DealtBuffer
from zmqdata._worker.gather import BLOCK_ELEMENTS, Gather, Ready
from zmqdata._worker.outputs import DealtOutput, output_for
from zmqdata._worker.pipelines import Pipeline
from zmqdata._worker.shared import TaskShare
from zmqdata._worker.splits import RemoteSplitProvider
from zmqdata.errors import ZmqDataError, to_code

logger = logging.getLogger("zmqdata.worker")

INLINE_BYTES = 64 * 1024
BUFFER_ITEMS = 8192
"""The most elements a task buffers (a block counts its elements; bytes bound it too)."""
BUFFER_BYTES = 64 * 2**20
_NEVER = threading.Event()
"""Never set: what a task that drains at its splits' ends checks per element."""


class TaskRunner:
    """One task: its pipeline, its producer thread and its output."""

    thread_limit: threads.Setting = "none"
    """Its native thread pools' limit (``WorkerConfig.threads``), set before start."""
    tracer: Tracer = IDLE
    """The worker's tracer: per-op spans while a trace window is open."""
    profile: profiling.Profile | None = None
    """Its pipeline's per-op statistics (``_dataset/profile.py``), once it runs."""
    splits: RemoteSplitProvider | None = None
    """DYNAMIC: where its splits come from, once it runs."""

    def __init__(
        self,
        task: TaskDef,
        pipeline: Pipeline,
        dispatcher: str,
        compression_level: int | None,
        dispatcher_timeout_s: float,
        wake: Callable[[int], None],
        cache_bytes: int = 0,
        keys: auth.ClientKeys | None = None,
        same_host: bool = False,
    ) -> None:
        self.task_id = task.task_id
        self.output = output_for(task, BUFFER_ITEMS, BUFFER_BYTES, cache_bytes)
        """What the producer puts into and the data loop answers from."""
        self.split_outputs = self.output.tracked and task.split_outputs
        """Exactly once by outputs: each split run alone, its outputs keyed."""
        self.stats = ServeStats()
        """What the data loop served of this task (written on the data loop only)."""
        self.ignored = IgnoredErrors()
        """What the pipeline's ``ignore_errors`` skipped (its producer counts)."""
        self.share = TaskShare(self.output.shares and shm.enabled(), same_host)
        """Whether large elements go to shared memory (``same_host``: at first)."""
        self._task = task
        self._pipeline = pipeline
        self._dispatcher = dispatcher
        self._keys = keys
        self.compression = TaskCompression(compression_level)
        """Whether large elements are compressed (AUTO: decided as rates move)."""
        self._timeout_s = dispatcher_timeout_s
        self._wake = wake
        self._stop = threading.Event()
        self._draining = threading.Event()
        self.left = False
        """Drained (``drain``): the producer stopped without an end of sequence."""
        self._thread = threading.Thread(
            target=self._produce, name=f"zmqdata-task-{self.task_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                logger.warning(
                    "task %d: pipeline did not stop in %.0f s", self.task_id, timeout_s
                )
        self.output.clear()

    def drain(self) -> None:
        """Stops producing without ending the task (its worker is leaving).

        A DYNAMIC task asks for no more splits and finishes those it holds;
        others stop after the element in progress. Consumers still read what
        is buffered; no end of sequence is told, so the task is not finished:
        the dispatcher hands its unacknowledged keys out again once the
        worker leaves (exactly once).
        """
        self._draining.set()

    @property
    def settled(self) -> bool:
        """Whether a leaving worker can go without losing what this task holds.

        Only an at-most-once DYNAMIC task loses elements that no one else
        makes: it waits until its producer stopped and its buffer was read.
        An exactly-once task's undelivered keys go to other workers, and in
        the other modes each worker makes its own copy or shard anyway.
        """
        return self.output.settled(self.left or self.ended)

    @property
    def drained(self) -> bool:
        """Whether everything the task will ever produce has been taken."""
        return self.output.drained

    @property
    def ended(self) -> bool:
        """Whether the producer is done (its output may still be buffered)."""
        return self.output.ended

    def buffered(self) -> tuple[int, int]:
        """``(items, bytes)`` the task holds for its consumers."""
        return self.output.buffered()

    def stats_dict(self) -> dict[str, Any]:
        """The task's counters and buffer fill, as heartbeats carry them."""
        items, nbytes = self.buffered()
        capacity = self.output.capacity_bytes
        return {
            "task_id": self.task_id,
            "iteration_id": self._task.iteration_id,
            **self.stats.as_dict(),
            "buffered_elements": items,
            "buffered_bytes": nbytes,
            "buffer_capacity_elements": BUFFER_ITEMS,  # the fill `zmqdata status` shows
            "buffer_capacity_bytes": capacity,  # a paced buffer's limit now
            "buffer_fill": min(1.0, max(items / BUFFER_ITEMS, nbytes / capacity)),
            "finished": self.ended,
            "errors_ignored": self.ignored.count,
            "last_error_ignored": self.ignored.last,
            **self.compression.stats(),
            **(
                {}
                if self.profile is None
                else self.profile.as_dict(self.stats.elements, self.stats.bytes)
            ),
        }

    def _produce(self) -> None:
        provider: RemoteSplitProvider | None = None
        error: tuple[str, str] | None = None
        left = False
        try:
            root = self._pipeline.root()
            threads.limit_producer(self.thread_limit)
            by_source = self.output.tracked and not self.split_outputs
            marks = Marks() if by_source and expands_below(root) else None
            if self._task.processing_mode == ShardingPolicy.DYNAMIC:
                self.splits = provider = self._split_provider(marks)
            self._run(root, provider, marks)
        except Cancelled:
            left = not self._stop.is_set()  # drained: no end, nothing dropped
        except ZmqDataError as failure:
            error = to_code(failure)
        except Exception as failure:  # user code: the consumer gets type and message
            logger.info("task %d: pipeline raised %r", self.task_id, failure)
            error = to_code(failure)
        finally:
            if provider is not None:
                provider.close()
            if left:
                self.left = True
            else:
                self.output.finish(error)
            self._wake(self.task_id)

    def _split_provider(self, marks: Marks | None) -> RemoteSplitProvider:
        """DYNAMIC: the task's splits, fetched from the dispatcher."""
        provider = RemoteSplitProvider(
            self._dispatcher,
            self._task.iteration_id,
            self.task_id,
            self._stop,
            self._timeout_s,
            self._keys,
            self.output.handed,
            self._draining,
            dealt=self.output.mode is ReadMode.DEALT,
            marks=marks,
            outputs=self.split_outputs,
        )
        provider.tracer = self.tracer
        return provider

    def _run(
        self, root: Node, provider: RemoteSplitProvider | None, marks: Marks | None
    ) -> None:
        """Runs the pipeline, sharded as the task says, into the task's output."""
        if provider is not None and isinstance(self.output, DealtOutput):
            with self._profiling(root, provider) as profiled:
                self._produce_dealt(root, provider, self.output.buffer, profiled)
            return
        root, ctx = self._sharded(root, provider, marks)
        ctx.ignored = self.ignored
        # Drained, a DYNAMIC task finishes the splits it holds (it asks for no
        # more); others have none to finish and stop at the element in progress.
        draining = self._draining if provider is None else _NEVER
        with self._profiling(root, provider) as ctx.profile:
            self._produce_all(root, ctx, marks, draining)

    def _sharded(
        self, root: Node, provider: RemoteSplitProvider | None, marks: Marks | None
    ) -> tuple[Node, IterContext]:
        """The pipeline and its context: reading ``provider``'s splits, or a static shard."""
        task = self._task
        if provider is not None and self.split_outputs:
            root, runs = split_runs.by_split(root)
            return root, IterContext(
                split_source=runs, split_provider=provider, lineage=True
            )
        if provider is not None:
            return root, IterContext(
                split_source=find_split_source(root),
                split_provider=provider,
                lineage=self.output.tracked,
                marks=marks,
            )
        if task.processing_mode in STATIC:
            return sharding.static_shard(
                root, task.processing_mode, task.num_workers, task.worker_index
            )
        return root, IterContext()

    @contextmanager
    def _profiling(
        self, root: Node, provider: RemoteSplitProvider | None
    ) -> Iterator[profiling.Profile | None]:
        """The pass's per-op statistics while it runs (None: profiling off)."""
        every = profiling.every()
        if not every:
            yield None
            return
        self.profile = profiling.Profile(root, every)
        self.profile.tracer = self.tracer
        if provider is not None:
            provider.profile = self.profile
        try:
            yield self.profile
        finally:
            self.profile.finish()

    def _produce_all(
        self,
        root: Node,
        ctx: IterContext,
        marks: Marks | None,
        draining: threading.Event,
    ) -> None:
        """Runs the pipeline into the buffer until it ends or the task stops.

        It stops (``Cancelled``) at the element in progress once ``draining``
        is set. With a profile, the elements it picks are timed
        (``profile.timed``).
        """
        iterator = make_iterator(root, ctx)
        profile = ctx.profile
        timed: profiling.Profile | None = None  # the element asked for is timed
        # Counted here rather than by ``profile.timed()``: no call per element
        # on the hot path (W1's scalars).
        countdown = 0 if profile is None else 1  # elements to the next timed one
        # Blocks: from the pipeline where it reads in bulk, else gathered here.
        tracked = self.output.tracked
        takes_blocks = self.output.takes_blocks and marks is None
        gather = Gather(tracked) if takes_blocks else None
        try:
            if gather is not None:
                block = iterator.next_block(BLOCK_ELEMENTS)
                if block is not None:
                    self._produce_blocks(iterator, block, profile, draining)
                    return
            for element in iterator:
                if timed is not None:
                    timed.end()
                if self._stop.is_set():
                    return
                if draining.is_set():
                    raise Cancelled
                if gather is not None:
                    lineage = iterator.lineage if tracked else EMPTY
                    ready = gather.add(element, lineage)
                    if ready:
                        self._put_ready(ready)
                        gather.resumed()
                elif not tracked:
                    self._put(element, timed)
                elif marks is None:
                    self._put(element, timed, iterator.lineage)
                else:
                    self._put(element, timed, *marks.split(iterator.lineage))
                timed = None
                if countdown:
                    countdown -= 1
                    if not countdown:
                        countdown = profile.begin()  # type: ignore[union-attr]
                        timed = profile
        finally:
            try:
                if gather is not None and not self._stop.is_set():
                    self._put_ready(gather.flush())  # made before an end or error
            finally:
                iterator.close()

    def _put_ready(self, ready: list[Ready]) -> None:
        """Puts what ``Gather`` has ready: blocks, and elements that go alone."""
        for entry in ready:
            if entry.alone:
                self._put(entry.item, None, entry.lineage)
            elif self.output.put(entry.item, entry.nbytes, self._stop, entry.lineage):
                self._wake(self.task_id)

    def _produce_blocks(
        self,
        iterator: DatasetIterator,
        block: Block,
        profile: profiling.Profile | None,
        draining: threading.Event,
    ) -> None:
        """Puts ``block`` and the next ones, each as one item, until the end.

        Timed as elements are (a block stands for an element), stopped as
        they are.
        """
        countdown = 0 if profile is None else 1  # blocks to the next timed one
        while block.n:
            if self._stop.is_set():
                return
            if draining.is_set():
                raise Cancelled
            self._put_block(block, iterator.lineage)
            if countdown:
                countdown -= 1
            if profile is not None and not countdown:
                countdown = profile.begin()
                block = _next_block(iterator)
                profile.end()
            else:
                block = _next_block(iterator)

    def _put_block(
        self, block: Block, lineage: Lineage, at: tuple[int, int] = (-1, -1)
    ) -> None:
        """One item for ``block``'s elements, standing for ``lineage`` (EMPTY untracked).

        Elements too large to travel columnar go one by one, each standing
        for its own keys (``Block.lineages``). ``at``: a dealt block's
        ``(ordinal, first index)``.
        """
        columns, size = retained.compact_columns(block.columns)
        if size > block.n * INLINE_BYTES:
            ordinal, first = at
            rows = zip(block.rows(), block.lineages(lineage), strict=True)
            for index, (element, keys) in enumerate(rows):
                self._put(element, None, keys, at=(ordinal, first + index))
            return
        item = dataclasses.replace(block, columns=columns)
        if self.output.put(item, size, self._stop, lineage, at=at):
            self._wake(self.task_id)

    def _produce_dealt(
        self,
        root: Node,
        provider: RemoteSplitProvider,
        dealt: DealtBuffer,
        profiled: profiling.Profile | None = None,
    ) -> None:
        """Runs the pipeline on each split alone: its elements go under their index."""
        source = find_split_source(root)
        while (split := provider.next_dealt()) is not None:
            dealt.release(provider.released)
            _, lo, hi, ordinal, skip, *chunk = cast(list[Any], split)
            if dealt.open(ordinal, skip):
                self._wake(self.task_id)
            ctx = IterContext(ignored=self.ignored, profile=profiled)
            count = self._deal(
                run_split(root, source, [lo, hi], ctx, *chunk), ordinal, skip, profiled
            )
            dealt.end(ordinal, count)
            provider.counted(ordinal, count)
            self._wake(self.task_id)
        dealt.release(provider.released)

    def _deal(
        self,
        iterator: DatasetIterator,
        ordinal: int,
        skip: int,
        profiled: profiling.Profile | None,
    ) -> int:
        """Puts split ``ordinal``'s elements past the first ``skip``; returns its count.

        A source that reads in bulk gives them a block at a time, put whole
        (``_deal_blocks``).
        """
        count = 0
        timed = False
        try:
            block = iterator.next_block(BLOCK_ELEMENTS)
            if block is not None:
                return self._deal_blocks(iterator, block, ordinal, skip, profiled)
            for element in iterator:
                if timed:
                    profiled.end()  # type: ignore[union-attr]
                if self._stop.is_set():
                    raise Cancelled
                if count >= skip:
                    self._put(element, profiled if timed else None, at=(ordinal, count))
                count += 1
                timed = profiled is not None and profiled.timed()
        finally:
            if timed:  # the split ended while an element was asked for
                profiled.end()  # type: ignore[union-attr]
            iterator.close()
        return count

    def _deal_blocks(
        self,
        iterator: DatasetIterator,
        block: Block,
        ordinal: int,
        skip: int,
        profiled: profiling.Profile | None,
    ) -> int:
        """``_deal`` of ``block`` and the next ones: each kept whole at its first index.

        The first ``skip`` elements are not put. A timed block stands for an
        element.
        """
        count = 0
        while block.n:
            if self._stop.is_set():
                raise Cancelled
            if count >= skip:
                self._put_block(block, EMPTY, at=(ordinal, count))
            elif count + block.n > skip:
                rest = block.part(skip - count, block.n)
                self._put_block(rest, EMPTY, at=(ordinal, skip))
            count += block.n
            if profiled is not None and profiled.timed():
                block = _next_block(iterator)
                profiled.end()
            else:
                block = _next_block(iterator)
        return count

    def _encoded(self, element: Any, size: int) -> Raw | Encoded:
        """A large element's item: in shared memory, else encoded (maybe compressed)."""
        # shared memory is never compressed
        return self.share.encode(element) or Encoded(
            self.compression.encode(element, size)
        )

    def _put(
        self,
        element: Any,
        profile: profiling.Profile | None = None,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
        at: tuple[int, int] = (-1, -1),
    ) -> None:
        """Encodes ``element`` (a large one here) and puts it into the task's output.

        It waits while the output is full. A dealt output keeps it ``at``
        ``(ordinal, index)``; a tracked one with its ``lineage`` and
        ``marks``. With ``profile`` (a timed element), encoding and waiting
        go to its ``encode`` and ``blocked`` phases.
        """
        start = time.perf_counter_ns() if profile is not None else 0
        element, size = retained.compact(element)
        item = Raw(element) if size <= INLINE_BYTES else self._encoded(element, size)
        if profile is not None:
            encoded = time.perf_counter_ns()
            profile.phase("encode", encoded - start)
        if self.output.put(item, size, self._stop, lineage, marks, at):
            self._wake(self.task_id)
        if profile is not None:
            profile.phase("blocked", time.perf_counter_ns() - encoded)
        if size > INLINE_BYTES:
            self.compression.resume()


def _next_block(iterator: DatasetIterator) -> Block:
    """The iterator's next block (it made one already, so it makes them all)."""
    block = iterator.next_block(BLOCK_ELEMENTS)
    assert block is not None
    return block
