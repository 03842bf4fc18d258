"""``TaskRunner``: runs one task's pipeline on a producer thread into a ``TaskBuffer``.

Under DYNAMIC sharding the pipeline's source reads the splits that a
``RemoteSplitProvider`` fetches from the dispatcher, over a DEALER socket the
producer thread owns. Exactly-once tasks also note what they were handed and
what each element stands for (``handed.py``, ``_wire/lineage.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from zmqdata._dataset import profile as profiling
from zmqdata._dataset.iterator import (
    IgnoredErrors,
    IterContext,
    ListSplitProvider,
    Split,
    SplitProvider,
    expands_below,
)
from zmqdata._dataset.marks import Marks
from zmqdata._dataset.node import Node, make_iterator
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._runtime import auth, shm, threads
from zmqdata._runtime.clock import Backoff
from zmqdata._runtime.metrics import ServeStats
from zmqdata._runtime.spans import IDLE, Tracer
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import EMPTY, Lineage, key
from zmqdata._wire.modes import STATIC, ShardingPolicy
from zmqdata._wire.progress import Mark, keep_latest_packed
from zmqdata._wire.tasks import TaskDef
from zmqdata._worker import retained, sharding
from zmqdata._worker.buffer import Cancelled, Encoded, Raw, TaskBuffer
from zmqdata._worker.cache import SlidingWindowCache
from zmqdata._worker.compression import TaskCompression
from zmqdata._worker.dealt import DealtBuffer
from zmqdata._worker.pipelines import Pipeline
from zmqdata._worker.requests import DispatcherRequests
from zmqdata._worker.shared import TaskShare
from zmqdata._worker.splitbatch import SplitBatch
from zmqdata.errors import UnavailableError, ZmqDataError, from_code, to_code

logger = logging.getLogger("zmqdata.worker")

INLINE_BYTES = 64 * 1024
BUFFER_ITEMS = 1024
BUFFER_BYTES = 64 * 2**20
EMPTY_BACKOFF_MAX_S = 0.5
ASK_AGAIN_MAX_S = 0.05
"""A split reply with nothing and no end (keys of a lost task wait for their
fence; a resumed read's splits already done were passed over) is asked again
after at most this long."""


class RemoteSplitProvider(DispatcherRequests, SplitProvider):
    """Asks the dispatcher for the splits of one iteration, one repetition at a time.

    Cheap splits are asked for several at a time (``SplitBatch`` sizes the
    requests from their round trip and how fast the splits are used up), and
    the next ones are asked for when half of a batch is left (``_prefetch``):
    the answer comes in while the producer works through the other half, so
    the round trip does not stall it.
    Requests are numbered; one that gets no answer in time is sent again with
    the same number, and the dispatcher answers it with the splits it handed
    out the first time (so a stalled or restarted dispatcher loses none).

    Under an endless ``repeat`` a worker whose repetitions come up empty because
    other workers took their few splits catches up at once; one that is at the
    dispatcher's current repetition and still finds nothing (the data is empty)
    waits with backoff before asking again, up to ``EMPTY_BACKOFF_MAX_S``.

    A split ``[repetition, lo, hi]`` reaches the source as ``[lo, hi, base]``,
    its elements' keys ``base + index`` (``_wire/lineage.py``); an exactly-once
    task's buffer notes them (``handed``). A reply with no split and no end (keys of a
    lost worker are about to be handed out again) is asked again with backoff.

    A dealt task (``dealt``: multi-rank reads) takes its splits whole, as the
    dispatcher sends them (``[repetition, lo, hi, ordinal, skip]``, through
    ``next_dealt``), reports each split's count with its next request
    (``counted``) and follows the dispatcher's ``released`` ordinal.
    """

    shared = True
    asked_for = "split"
    profile: profiling.Profile | None = None
    """Its task's per-op statistics (set by the task)."""
    tracer: Tracer = IDLE
    """The worker's tracer (its task sets it): each split request is a span."""

    def __init__(
        self,
        dispatcher: str,
        iteration_id: int,
        task_id: int,
        stop: threading.Event,
        timeout_s: float,
        keys: auth.ClientKeys | None = None,
        handed: Callable[[int, int], None] | None = None,
        draining: threading.Event | None = None,
        dealt: bool = False,
        marks: Marks | None = None,
    ) -> None:
        super().__init__(dispatcher, stop, timeout_s, keys)
        self._iteration_id = iteration_id
        self._marks = marks
        self._dealt = dealt
        self._counts: list[int] = []
        self.released = 0
        """Dealt: every consumer is past the splits below this ordinal."""
        self._draining = threading.Event() if draining is None else draining
        self._handed = handed
        self._task_id = task_id
        self._repetition = 0
        self._request_id = 0
        self._splits: deque[Split] = deque()
        self._batch = SplitBatch()
        self._fetched = 0
        """Splits the last answer brought (a prefetch goes out at half of them)."""
        self._pending: m.GetSplit | None = None
        """A request sent ahead (``_prefetch``) whose answer is not taken yet."""
        self._ended: bool | None = None
        """A request sent ahead was answered with the end: whether the
        dispatcher is at a later repetition (told once the splits run out)."""
        self._got_split = False  # in the current repetition
        self._behind = False  # the dispatcher is at a later repetition
        self._empty = Backoff(0.001, EMPTY_BACKOFF_MAX_S, jitter=0.0)
        self.asked_at = float("-inf")
        """When the last split request went out (monotonic): the dispatcher
        counts it as the worker's sign of life."""

    def next_split(self) -> Split | None:
        """The next split; a draining worker asks for none (``Cancelled``).

        Asked while its task's profile times an element, the round trip is
        the ``splits`` phase, not the source op's time.
        """
        if self._splits:
            self._prefetch()
            return self._splits.popleft()
        if self._draining.is_set() and self._pending is None:
            raise Cancelled  # (splits asked for ahead are made first)
        if self._ended is not None:
            self._behind, self._ended = self._ended, None
            return None
        profile = self.profile
        if profile is None or not profile.timing:
            self._fetch()
        else:
            start = time.perf_counter_ns()
            self._fetch()
            took = time.perf_counter_ns() - start
            profile.phase("splits", took)
            profile.inner(took)
        if not self._splits:
            return None
        return self._splits.popleft()

    def next_dealt(self) -> list[int] | None:
        """Dealt: the next split ``[repetition, lo, hi, ordinal, skip]`` (None: no more)."""
        split = self.next_split()
        return None if split is None else list(split)

    def counted(self, ordinal: int, count: int) -> None:
        """Dealt: split ``ordinal`` made ``count`` elements (told with the next request)."""
        self._counts += [ordinal, count]

    def _fetch(self) -> None:
        """Asks for the next splits (or waits for those asked for ahead)."""
        wait = Backoff(0.001, ASK_AGAIN_MAX_S, jitter=0.0)
        while True:
            reply = self._ask()
            if reply.end_of_splits:
                self._behind = reply.repetition > self._repetition
                return
            if reply.splits:
                self._take(reply)
                return
            if self._stop.wait(wait.next_delay()) or self._draining.is_set():
                raise Cancelled  # (else nothing now: ask again)

    def _prefetch(self) -> None:
        """Asks for the next splits ahead; takes their answer once it is in.

        Asks with half of the last answer's splits left, and never waits for
        the answer here. Not for dealt tasks (their requests report what the
        splits before made), nor for at-most-once ones (``handed`` None):
        splits held ahead are lost with their worker, and such a read loses
        at most one split beyond the one in progress (docs/modes.md).
        """
        if self._pending is None:
            if (
                self._dealt
                or self._handed is None
                or self._ended is not None
                or self._draining.is_set()
                or len(self._splits) > self._fetched // 2
            ):
                return
            self._pending = self._request(left=len(self._splits))
            self._send(self._pending)
            return
        sock = self._socket()
        if not sock.poll(0):
            return
        reply = self._answer(self._pending, sock.recv())
        if reply is None:
            return
        self._pending = None
        reply = self._checked(reply)
        if reply.end_of_splits:
            self._ended = reply.repetition > self._repetition
        elif reply.splits:
            self._take(reply)
        # (else nothing now: asked again, waiting, once these run out)

    def _take(self, reply: m.GetSplitReply) -> None:
        """Queues the splits of ``reply`` (their keys noted as handed)."""
        self._got_split = True
        self._fetched = len(reply.splits)
        self._batch.fetched(len(reply.splits), time.monotonic(), reply.period_ms / 1000)
        if self._dealt:
            self._splits.extend(reply.splits)
            return
        if self._marks is not None:  # a lost task's outputs not to make again
            keep_latest_packed(self._marks.resume, reply.progress)
        for repetition, lo, hi in reply.splits:
            base = key(repetition, 0)
            if self._handed is not None:
                self._handed(base + lo, base + hi)
            self._splits.append([lo, hi, base])

    def _request(self, left: int = 0) -> m.GetSplit:
        """The next split request (``left``: splits still queued as it is sent)."""
        self._request_id += 1
        self.asked_at = time.monotonic()
        return m.GetSplit(
            request_id=self._request_id,
            iteration_id=self._iteration_id,
            repetition=self._repetition,
            task_id=self._task_id,
            max_splits=self._batch.size(time.monotonic(), left),
            counts=self._counts,
        )

    def _ask(self) -> m.GetSplitReply:
        """The answer to one split request, the one sent ahead if any.

        Retried as the same request until answered.
        """
        request, sent = self._pending, self._pending is not None
        self._pending = None
        if request is None:
            request = self._request()
        log = self.tracer.log
        start = time.perf_counter_ns()
        reply = self._call(request, sent)
        if log is not None:
            asked = {"task_id": self._task_id, "max_splits": request.max_splits}
            log.add("split request", "worker", start, time.perf_counter_ns(), asked)
        return self._checked(reply)

    def _checked(self, reply: m.Message) -> m.GetSplitReply:
        """``reply`` if it is a well-formed answer (errors raised as sent)."""
        if isinstance(reply, m.Error):
            raise from_code(reply.code, reply.message)
        width = 5 if self._dealt else 3
        if not isinstance(reply, m.GetSplitReply) or any(
            len(split) != width for split in reply.splits
        ):
            raise UnavailableError(f"malformed split reply from {self._dispatcher}")
        self._counts = []
        self.released = max(self.released, reply.released)
        return reply

    def reset(self) -> None:
        if self._draining.is_set():
            raise Cancelled
        if self._got_split or self._behind:
            self._empty.reset()
        elif self._stop.wait(self._empty.next_delay()):
            raise Cancelled
        self._got_split = self._behind = False
        self._repetition += 1

    def close(self) -> None:
        """Closes the socket, once the answer to a request sent ahead is in.

        A task that ends with one out (a ``take`` below it, an error) notes
        its splits as handed: its end tells them dropped, as the unread ones
        before them.
        """
        request, self._pending = self._pending, None
        if request is not None and not (self._stop.is_set() or self._draining.is_set()):
            with contextlib.suppress(ZmqDataError, Cancelled):
                reply = self._checked(self._call(request, sent=True))
                if reply.splits:
                    self._take(reply)
        self._drop_socket()


class TaskRunner:
    """One task: its pipeline, its producer thread and its output buffer."""

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
        dynamic = task.processing_mode == ShardingPolicy.DYNAMIC
        cached = task.cross_trainer_cache  # every trainer reads it: never tracked
        tracked = task.exactly_once and dynamic and not task.dealt and not cached
        # Coordinated rounds take one element per consumer at once: not paced.
        paced = task.num_consumers is None
        self.buffer = TaskBuffer(BUFFER_ITEMS, BUFFER_BYTES, tracked, paced=paced)
        self.dealt = DealtBuffer(BUFFER_ITEMS, BUFFER_BYTES) if task.dealt else None
        """Multi-rank reads: the output by split and index (``dealt.py``)."""
        self.tracked = tracked
        """Whether replies say what their elements stand for (exactly once)."""
        self.cache: SlidingWindowCache[Raw | Encoded] | None = (
            SlidingWindowCache(cache_bytes) if task.cross_trainer_cache else None
        )
        self.stats = ServeStats()
        """What the data loop served of this task (written on the data loop only)."""
        self.ignored = IgnoredErrors()
        """What the pipeline's ``ignore_errors`` skipped (its producer counts)."""
        shares = not task.cross_trainer_cache and shm.enabled()
        self.share = TaskShare(shares, same_host)
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
        self.share.discard(self.buffer)
        if self.dealt is not None:
            self.dealt.clear()

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
        dynamic = self._task.processing_mode == ShardingPolicy.DYNAMIC
        if self.tracked or self.dealt is not None or not dynamic:
            return True
        if not (self.left or self.ended):
            return False
        return self.buffer.buffered()[0] == 0

    @property
    def num_consumers(self) -> int | None:
        """Coordinated reads: how many consumers share each round (else None)."""
        return self._task.num_consumers

    @property
    def drained(self) -> bool:
        """Whether everything the task will ever produce has been taken."""
        if self.dealt is not None:
            return self.dealt.finished
        return self.cache is None and self.buffer.finished

    @property
    def ended(self) -> bool:
        """Whether the producer is done (its output may still be buffered)."""
        return self._sink.ended

    def buffered(self) -> tuple[int, int]:
        """``(items, bytes)`` the task holds for its consumers."""
        return self._sink.buffered()

    def stats_dict(self) -> dict[str, Any]:
        """The task's counters and buffer fill, as heartbeats carry them."""
        items, nbytes = self.buffered()
        in_buffer = self._sink is self.buffer
        capacity = self.buffer.limit_bytes if in_buffer else BUFFER_BYTES
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

    @property
    def _sink(self) -> TaskBuffer | DealtBuffer | SlidingWindowCache[Raw | Encoded]:
        if self.dealt is not None:
            return self.dealt
        return self.buffer if self.cache is None else self.cache

    def _produce(self) -> None:
        provider: RemoteSplitProvider | None = None
        error: tuple[str, str] | None = None
        left = False
        try:
            task = self._task
            root = self._pipeline.root()
            threads.limit_producer(self.thread_limit)
            ctx = IterContext()
            marks = Marks() if self.tracked and expands_below(root) else None
            if task.processing_mode == ShardingPolicy.DYNAMIC:
                self.splits = provider = RemoteSplitProvider(
                    self._dispatcher,
                    task.iteration_id,
                    self.task_id,
                    self._stop,
                    self._timeout_s,
                    self._keys,
                    self.buffer.handed if self.tracked else None,
                    self._draining,
                    dealt=self.dealt is not None,
                    marks=marks,
                )
                provider.tracer = self.tracer
                if self.dealt is not None:
                    with self._profiling(root, provider) as profiled:
                        self._produce_dealt(root, provider, profiled)
                    return
                ctx = IterContext(
                    split_source=find_split_source(root),
                    split_provider=provider,
                    lineage=self.tracked,
                    marks=marks,
                )
            elif task.processing_mode in STATIC:
                root, ctx = sharding.static_shard(
                    root, task.processing_mode, task.num_workers, task.worker_index
                )
            ctx.ignored = self.ignored
            with self._profiling(root, provider) as ctx.profile:
                self._produce_all(root, ctx, provider, marks)
        except Cancelled:
            left = not self._stop.is_set()  # drained: no end, nothing dropped
            return
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
                self._sink.finish(error)
            self._wake(self.task_id)

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
        provider: RemoteSplitProvider | None,
        marks: Marks | None,
    ) -> None:
        """Runs the pipeline into the buffer until it ends or the task stops.

        With a profile, the elements it picks are timed (``profile.timed``).
        """
        iterator = make_iterator(root, ctx)
        profile = ctx.profile
        timed: profiling.Profile | None = None  # the element asked for is timed
        # Counted here rather than by ``profile.timed()``: no call per element
        # on the hot path (W1's scalars).
        countdown = 0 if profile is None else 1  # elements to the next timed one
        try:
            tracked = self.tracked
            for element in iterator:
                if timed is not None:
                    timed.end()
                if self._stop.is_set():
                    return
                if self._draining.is_set() and provider is None:
                    raise Cancelled  # no splits to finish: stop here
                if not tracked:
                    self._put(element, EMPTY, None, timed)
                elif marks is None:
                    self._put(element, iterator.lineage, None, timed)
                else:
                    self._put(element, *marks.split(iterator.lineage), timed)
                timed = None
                if countdown:
                    countdown -= 1
                    if not countdown:
                        countdown = profile.begin()  # type: ignore[union-attr]
                        timed = profile
        finally:
            iterator.close()

    def _produce_dealt(
        self,
        root: Node,
        provider: RemoteSplitProvider,
        profiled: profiling.Profile | None = None,
    ) -> None:
        """Runs the pipeline on each split alone: its elements go under their index."""
        assert self.dealt is not None
        source = find_split_source(root)
        while (split := provider.next_dealt()) is not None:
            self.dealt.release(provider.released)
            _, lo, hi, ordinal, skip = split
            if self.dealt.open(ordinal, skip):
                self._wake(self.task_id)
            one = ListSplitProvider([[lo, hi]])
            ctx = IterContext(source, one, ignored=self.ignored, profile=profiled)
            iterator = make_iterator(root, ctx)
            count = 0
            timed = False
            try:
                for element in iterator:
                    if timed:
                        profiled.end()  # type: ignore[union-attr]
                    if self._stop.is_set():
                        raise Cancelled
                    if count >= skip:
                        start = time.perf_counter_ns() if timed else 0
                        item, size = self._item(element)
                        encoded = time.perf_counter_ns() if timed else 0
                        if self.dealt.put(ordinal, count, item, size, self._stop):
                            self._wake(self.task_id)
                        if timed:
                            profiled.phase("encode", encoded - start)  # type: ignore[union-attr]
                            profiled.phase("blocked", time.perf_counter_ns() - encoded)  # type: ignore[union-attr]
                        if size > INLINE_BYTES:
                            self.compression.resume()
                    count += 1
                    timed = profiled is not None and profiled.timed()
            finally:
                if timed:  # the split ended while an element was asked for
                    profiled.end()  # type: ignore[union-attr]
                iterator.close()
            self.dealt.end(ordinal, count)
            provider.counted(ordinal, count)
            self._wake(self.task_id)
        self.dealt.release(provider.released)

    def _item(self, element: Any) -> tuple[Raw | Encoded, int]:
        """A buffer item for ``element`` (large ones encoded here), and its size."""
        element, size = retained.compact(element)
        if size <= INLINE_BYTES:
            return Raw(element), size
        # shared memory is never compressed
        item = self.share.encode(element) or Encoded(
            self.compression.encode(element, size)
        )
        return item, size

    def _put(
        self,
        element: Any,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
        profile: profiling.Profile | None = None,
    ) -> None:
        """Encodes ``element`` and hands it to the buffer (waits while it is full).

        With ``profile`` (a timed element), the two go to its ``encode`` and
        ``blocked`` phases.
        """
        if profile is None:
            item, size = self._item(element)
        else:
            start = time.perf_counter_ns()
            item, size = self._item(element)
            encoded = time.perf_counter_ns()
            profile.phase("encode", encoded - start)
        sink = self.buffer if self.cache is None else self.cache
        if (
            self.buffer.put(item, size, self._stop, lineage, marks)
            if self.tracked
            else sink.put(item, size, self._stop)
        ):
            self._wake(self.task_id)
        if profile is not None:
            profile.phase("blocked", time.perf_counter_ns() - encoded)
        if size > INLINE_BYTES:
            self.compression.resume()
