"""One output per read mode: what a task's producer puts into and its data loop reads.

The dispatcher decides a task's ``ReadMode`` (``TaskDef.mode``) and
``output_for`` builds its output once. The producer ``put``s items and
``finish``es; the data loop asks ``answer`` what to send a request (pure: taking
the items out is its one effect, no socket). Each output mirrors a client plan
(``_client/``):

============  ===============  ==========================================  ===========
mode          output           holds                                       client plan
============  ===============  ==========================================  ===========
FIRST_COME    FirstComeOutput  a ``TaskBuffer`` (tracked or not; blocks)   CreditPlan
ROUNDS        RoundsOutput     a ``TaskBuffer``, one item per consumer     RoundPlan
DEALT         DealtOutput      a ``DealtBuffer`` by split, index; blocks   DealPlan
CACHE         CacheOutput      a ``SlidingWindowCache``, per trainer       CreditPlan
============  ===============  ==========================================  ===========

>>> from zmqdata._wire import messages as m
>>> from zmqdata._wire.tasks import TaskDef
>>> from zmqdata._worker.buffer import Raw
>>> task = TaskDef(task_id=1, iteration_id=1, dataset_id="d", pipeline=b"",
...                processing_mode=0)
>>> output = output_for(task, max_items=8, max_bytes=1024, cache_bytes=0)
>>> output.mode, output.put(Raw(7), 8, None)  # True: it was empty
(<ReadMode.FIRST_COME: 'first_come'>, True)
>>> output.answer(m.GetElements(task_id=1, client_id=1, max_elements=2))
Send(items=[Raw(element=7)], end_of_sequence=False, coverage=None)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from zmqdata._wire import messages as m
from zmqdata._wire.lineage import EMPTY, Lineage
from zmqdata._wire.modes import ReadMode, ShardingPolicy, is_tracked
from zmqdata._wire.progress import Mark
from zmqdata._wire.tasks import TaskDef
from zmqdata._worker import dealt, serving
from zmqdata._worker.buffer import Item, TaskBuffer
from zmqdata._worker.cache import SlidingWindowCache
from zmqdata._worker.dealt import DealtBuffer, DealtSend
from zmqdata._worker.serving import Refuse, Send

Answer = Send | DealtSend | Refuse | None
"""Send items (with what the header tells), refuse, or None: park the request."""
ROUND_END = (
    "encountered end of sequence on a coordinated read: coordinated reads need a "
    "dataset with infinite cardinality (add .repeat())"
)


class TaskOutput(Protocol):
    """What a task's producer puts into and its data loop answers from."""

    mode: ReadMode
    tracked: bool
    """Whether replies say what their elements stand for (exactly once by keys)."""
    takes_blocks: bool
    """Whether the producer puts what a source reads in bulk as blocks."""
    shares: bool
    """Whether large elements may go through shared memory."""
    any_order: bool
    """Whether readers read at their own positions: any parked request may be served."""

    def put(
        self,
        item: Item,
        nbytes: int,
        stop: threading.Event | None,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
        at: tuple[int, int] = (-1, -1),
    ) -> bool:
        """Adds an item, waiting for room; returns whether to wake the data loop.

        ``lineage`` and ``marks``: what it stands for (tracked); ``at``: its
        ``(ordinal, index)`` (dealt). ``Cancelled`` if ``stop`` is set while it waits.
        """

    def answer(self, request: m.GetElements) -> Answer:
        """What to answer ``request`` now; None to park it until there is news."""

    def finish(self, error: tuple[str, str] | None) -> None:
        """The producer is done (``error``: ``(code, message)``)."""

    def clear(self) -> None:
        """Drops what it holds, shared memory segments with it (the task stopped)."""

    def buffered(self) -> tuple[int, int]:
        """``(elements, bytes)`` held for the readers (for stats)."""

    @property
    def handed(self) -> Callable[[int, int], None] | None:
        """Exactly once: notes the keys ``[lo, hi)`` handed to the task."""

    @property
    def capacity_bytes(self) -> int:
        """The bytes it holds at most now (for stats)."""

    @property
    def ended(self) -> bool:
        """Whether the producer is done (its output may still be held)."""

    @property
    def drained(self) -> bool:
        """Whether everything the task will ever produce has been taken."""

    def settled(self, stopped: bool) -> bool:
        """Whether a leaving worker loses nothing of it (``stopped``: its producer is)."""


class _Store(Protocol):
    """A buffer an output holds: ``TaskBuffer``, ``DealtBuffer`` or the cache."""

    def finish(self, error: tuple[str, str] | None) -> None: ...

    def buffered(self) -> tuple[int, int]: ...

    @property
    def ended(self) -> bool: ...


S = TypeVar("S", bound=_Store)


class _Held(Generic[S]):
    """What an output's buffer answers alone: its end, what it holds."""

    def __init__(self, buffer: S) -> None:
        self.buffer = buffer

    def finish(self, error: tuple[str, str] | None) -> None:
        self.buffer.finish(error)

    def buffered(self) -> tuple[int, int]:
        return self.buffer.buffered()

    @property
    def ended(self) -> bool:
        return self.buffer.ended


class FirstComeOutput(_Held[TaskBuffer]):
    """First come, first served from a ``TaskBuffer``; its producer puts blocks.

    ``alone``: an at-most-once DYNAMIC task, whose elements no other worker
    makes: a leaving worker waits until they are read.
    """

    mode = ReadMode.FIRST_COME
    takes_blocks = True
    shares = True
    any_order = False

    def __init__(
        self,
        max_items: int,
        max_bytes: int,
        tracked: bool,
        alone: bool,
        paced: bool = True,
    ) -> None:
        super().__init__(TaskBuffer(max_items, max_bytes, tracked, paced=paced))
        self.tracked = tracked
        self.handed: Callable[[int, int], None] | None = (
            self.buffer.handed if tracked else None
        )
        self._alone = alone

    def put(
        self,
        item: Item,
        nbytes: int,
        stop: threading.Event | None,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
        at: tuple[int, int] = (-1, -1),
    ) -> bool:
        return self.buffer.put(item, nbytes, stop, lineage, marks)

    def answer(self, request: m.GetElements) -> Answer:
        if request.split >= 0:
            return _not_dealt(request)
        return serving.from_buffer(request, self.buffer, self.tracked)

    def clear(self) -> None:
        self.buffer.take(len(self.buffer))

    @property
    def capacity_bytes(self) -> int:
        return self.buffer.limit_bytes

    @property
    def drained(self) -> bool:
        return self.buffer.finished

    def settled(self, stopped: bool) -> bool:
        return not self._alone or (stopped and self.buffer.buffered()[0] == 0)


class RoundsOutput(FirstComeOutput):
    """Coordinated reads: each round takes one element per consumer (not paced).

    The rounds asked for are the data loop's (``rounds.RoundRobin``: they
    hold its requests); a request without rounds is served first come.
    """

    mode = ReadMode.ROUNDS
    takes_blocks = False

    def __init__(
        self,
        max_items: int,
        max_bytes: int,
        tracked: bool,
        alone: bool,
        num_consumers: int,
    ) -> None:
        super().__init__(max_items, max_bytes, tracked, alone, paced=False)
        self.num_consumers = num_consumers

    def take_round(self) -> list[Item] | Refuse | None:
        """One round's items, if buffered; ``Refuse`` once it can never fill up."""
        items = self.buffer.take_exactly(self.num_consumers)
        if items:
            return items
        if self.buffer.ended:
            return Refuse(*(self.buffer.error or ("FAILED_PRECONDITION", ROUND_END)))
        return None


class DealtOutput(_Held[DealtBuffer]):
    """Multi-rank reads: a ``DealtBuffer``, served by split and index.

    Exactly once by position, not by keys: never ``tracked``; a leaving
    worker's splits are made again elsewhere. Its producer puts blocks, each
    at its first index (``TaskRunner._deal``); a reply takes a consumer's
    rows of them as blocks.
    """

    mode = ReadMode.DEALT
    tracked = False
    takes_blocks = True
    shares = True
    any_order = True
    handed = None

    def __init__(self, max_items: int, max_bytes: int) -> None:
        super().__init__(DealtBuffer(max_items, max_bytes))
        self.capacity_bytes = max_bytes

    def put(
        self,
        item: Item,
        nbytes: int,
        stop: threading.Event | None,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
        at: tuple[int, int] = (-1, -1),
    ) -> bool:
        return self.buffer.put(at[0], at[1], item, nbytes, stop)

    def answer(self, request: m.GetElements) -> Answer:
        return dealt.answer(request, self.buffer)

    def clear(self) -> None:
        self.buffer.clear()

    @property
    def drained(self) -> bool:
        return self.buffer.finished

    def settled(self, stopped: bool) -> bool:
        return True


class CacheOutput(_Held[SlidingWindowCache[Item]]):
    """The cross-trainer cache: each trainer reads the stream at its own position.

    Never tracked (``is_tracked``), never drained (every trainer reads it
    all), never shared (one segment is read once).
    """

    mode = ReadMode.CACHE
    tracked = False
    takes_blocks = False
    shares = False
    any_order = True
    handed = None
    drained = False

    def __init__(self, cache_bytes: int, capacity_bytes: int, alone: bool) -> None:
        super().__init__(SlidingWindowCache[Item](cache_bytes))
        self.capacity_bytes = capacity_bytes
        self._alone = alone

    def put(
        self,
        item: Item,
        nbytes: int,
        stop: threading.Event | None,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
        at: tuple[int, int] = (-1, -1),
    ) -> bool:
        return self.buffer.put(item, nbytes, stop)

    def answer(self, request: m.GetElements) -> Answer:
        if request.split >= 0:
            return _not_dealt(request)
        return serving.from_cache(request, self.buffer)

    def clear(self) -> None:
        """Nothing to drop: no element of the cache is in shared memory."""

    def settled(self, stopped: bool) -> bool:
        return not self._alone or stopped


def output_for(
    task: TaskDef, max_items: int, max_bytes: int, cache_bytes: int
) -> TaskOutput:
    """The output of ``task``'s read mode, bounded by ``max_items`` and ``max_bytes``.

    ``cache_bytes``: the cross-trainer cache's window.
    """
    mode = task.read_mode
    tracked = is_tracked(
        task.exactly_once, task.processing_mode, mode is ReadMode.CACHE
    )
    alone = task.processing_mode == ShardingPolicy.DYNAMIC and not tracked
    if mode is ReadMode.DEALT:
        return DealtOutput(max_items, max_bytes)
    if mode is ReadMode.CACHE:
        return CacheOutput(cache_bytes, max_bytes, alone)
    if mode is ReadMode.ROUNDS:
        assert task.num_consumers is not None  # TaskDef checks it
        return RoundsOutput(max_items, max_bytes, tracked, alone, task.num_consumers)
    return FirstComeOutput(max_items, max_bytes, tracked, alone)


def _not_dealt(request: m.GetElements) -> Refuse:
    """A request for a split of a task that is not dealt."""
    text = f"task {request.task_id} is not a multi-rank task: ask without a split"
    return Refuse("INVALID_ARGUMENT", text)
