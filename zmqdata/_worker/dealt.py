"""Multi-rank reads on a worker: a task's output by split and index.

A dealt task (``_wire/deal.py``) runs its pipeline on one split at a time;
element ``i`` of split ``ordinal`` is kept under ``(ordinal, i)`` until a
consumer asks for exactly it (``GetElements.split`` and ``indices``): the
consumer knows which tokens are its own, the worker only what it made.
``answer`` decides a request from the buffer alone (pure, like
``serving.from_buffer``); a request for elements not made yet is parked. Splits
the dispatcher released (every consumer is past them) are dropped.

>>> from zmqdata._worker.buffer import Raw
>>> buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
>>> buffer.open(3, skip=0)  # True would mean: a parked request waits for it
False
>>> request = m.GetElements(task_id=1, client_id=1, max_elements=2, split=3, indices=[1])
>>> answer(request, buffer) is None  # element 1 is not made yet: park
True
>>> buffer.put(3, 0, Raw("a"), 8), buffer.put(3, 1, Raw("b"), 8)  # 1 is awaited
(False, True)
>>> buffer.end(3, 2)
>>> reply = answer(request, buffer)
>>> [item.element for item in reply.items], reply.indices, reply.produced, reply.ended
(['b'], [1], 2, True)
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zmqdata._wire import messages as m
from zmqdata._worker.buffer import Item, wait_for_room
from zmqdata._worker.serving import Refuse

COUNTS_TOLD = 64
"""How many of the task's latest split counts every reply carries."""


@dataclass
class _Split:
    skip: int
    items: dict[int, tuple[Item, int]] = field(default_factory=dict)
    produced: int = 0
    ended: bool = False
    had: set[int] = field(default_factory=set)
    """Indices consumers said they have (a split made again): not kept."""
    nbytes: int = 0
    """What ``items`` hold."""

    def pop(self, index: int) -> tuple[Item, int] | None:
        """Removes element ``index`` if kept: ``(item, nbytes)``."""
        entry = self.items.pop(index, None)
        if entry is not None:
            self.nbytes -= entry[1]
        return entry


@dataclass(frozen=True, slots=True)
class DealtSend:
    """Send these items of ``split`` (possibly none, to tell its count)."""

    items: list[Item]
    split: int
    indices: list[int]
    produced: int
    ended: bool
    counts: list[int]
    end_of_sequence: ClassVar[bool] = False
    """A dealt task's readers end by counts, never by an end of sequence."""

    def told(self) -> dict[str, Any]:
        """What the reply's header says besides its items (``Elements``)."""
        return {
            "split": self.split,
            "indices": self.indices,
            "produced": self.produced,
            "ended": self.ended,
            "counts": self.counts,
        }


class DealtBuffer:
    """Thread-safe: the producer puts, the data loop takes; bounded like TaskBuffer."""

    def __init__(self, max_items: int, max_bytes: int) -> None:
        self._splits: dict[int, _Split] = {}
        self._counts: deque[tuple[int, int]] = deque(maxlen=COUNTS_TOLD)
        self._items = self._bytes = 0
        self._max_items, self._max_bytes = max_items, max_bytes
        self._released = 0
        self._had_early: dict[int, set[int]] = {}
        """``discard`` of a split not opened yet (kept until it is)."""
        self._awaited: set[tuple[int, int]] = set()
        """``(ordinal, index)`` a parked request waits for: its arrival wakes the loop."""
        self._cond = threading.Condition()
        self._done = False
        self.error: tuple[str, str] | None = None

    # ------------------------------------------------------------ producer

    def open(self, ordinal: int, skip: int) -> bool:
        """Split ``ordinal`` is this task's; its first ``skip`` elements are not kept.

        Returns whether a parked request waits for it (wake the data loop).
        """
        with self._cond:
            had = self._had_early.pop(ordinal, set())
            if ordinal >= self._released:
                self._splits[ordinal] = _Split(skip, had=had)
            if (ordinal, -1) in self._awaited:
                self._awaited.discard((ordinal, -1))
                return True
            return False

    def put(
        self,
        ordinal: int,
        index: int,
        item: Item,
        nbytes: int,
        stop: threading.Event | None = None,
    ) -> bool:
        """Keeps element ``index`` of a split, waiting for room (``Cancelled`` on stop).

        It goes past the bound by one split at most (``_may_exceed``), and
        by the splits of a lost worker made again here, so the bound holds
        for every job, one whose ranks never come too: what the other splits
        hold then is the slower ranks' share, and the readers ahead wait for
        them. Returns whether a parked request waits for this element (wake
        the data loop).
        """
        with self._cond:
            while (
                self._items
                and (
                    self._items >= self._max_items
                    or self._bytes + nbytes > self._max_bytes
                )
                and not self._may_exceed(ordinal)
            ):
                wait_for_room(self._cond, stop)
            split = self._splits.get(ordinal)
            if split is None:  # released meanwhile
                return False
            split.produced = index + 1
            if index >= split.skip and index not in split.had:
                split.items[index] = (item, nbytes)
                split.nbytes += nbytes
                self._items += 1
                self._bytes += nbytes
            if (ordinal, index) in self._awaited:
                self._awaited.discard((ordinal, index))
                return True
            return False

    def _may_exceed(self, ordinal: int) -> bool:
        """Whether a put of split ``ordinal`` may go past the bound (under the lock).

        No deadlock: the producer waits only while what the buffer holds
        can leave without it. Every reader has a request out for the
        earliest element it lacks (``DealPlan._ask``), so the other splits
        drain while their ranks read, and it goes on while a parked request
        waits on it and: a split below ``ordinal`` is awaited (a lost
        worker's, handed here, opened after this one); or the other splits
        hold less than the bound (this split's elements wanted by nobody,
        such as tokens a restored read skips, or those ranks had of a split
        made again, hold it full: one split more, so a rank that never comes
        holds no more); or a later split holds elements (this one is made
        again: nobody locates those before its count).
        """
        if ordinal not in self._splits:  # released meanwhile: nothing is kept
            return True
        if not self._awaited:
            return False
        if any(q < ordinal for q, _ in self._awaited):
            return True
        making = self._splits[ordinal]
        others = self._items - len(making.items), self._bytes - making.nbytes
        if others[0] < self._max_items and others[1] <= self._max_bytes:
            return True
        return any(q > ordinal and split.items for q, split in self._splits.items())

    def discard(self, ordinal: int, indices: list[int]) -> None:
        """Consumers have these elements of a split made again: drop them."""
        with self._cond:
            split = self._splits.get(ordinal)
            if split is None:  # not opened yet (a hostile peer fills no memory)
                if ordinal >= self._released and len(self._had_early) < 64:
                    early = self._had_early.setdefault(ordinal, set())
                    early.update(indices[: max(0, self._max_items * 4 - len(early))])
                return
            for index in indices[: max(0, self._max_items * 4 - len(split.had))]:
                entry = split.pop(index)
                if entry is not None:
                    self._items -= 1
                    self._bytes -= entry[1]
                elif index >= split.produced:
                    split.had.add(index)
            self._cond.notify_all()

    def awaits(self, ordinal: int, index: int) -> bool:
        """A request is parked until element ``index`` of split ``ordinal`` exists.

        ``index`` -1: until the split is opened. Returns False, or True if it
        arrived meanwhile (ask again: nothing will wake the request).
        """
        with self._cond:
            split = self._splits.get(ordinal)
            if split is not None and (index == -1 or index < split.produced):
                return True
            self._awaited.add((ordinal, index))
            self._cond.notify_all()  # a producer waiting for room may go on
            return False

    def end(self, ordinal: int, count: int) -> None:
        """Split ``ordinal`` made ``count`` elements."""
        with self._cond:
            split = self._splits.get(ordinal)
            if split is not None:
                split.produced, split.ended = count, True
            self._counts.append((ordinal, count))
            # Requests parked past the end are answered with the count now.
            self._awaited = {
                (q, i) for q, i in self._awaited if q != ordinal or 0 <= i < count
            }

    def release(self, below: int) -> None:
        """Drops the splits below ``below``: every consumer is past them."""
        with self._cond:
            self._released = max(self._released, below)
            for ordinal in [q for q in self._splits if q < below]:
                self._drop(self._splits.pop(ordinal))
            self._awaited = {a for a in self._awaited if a[0] >= below}
            for ordinal in [q for q in self._had_early if q < below]:
                del self._had_early[ordinal]
            self._cond.notify_all()

    def finish(self, error: tuple[str, str] | None) -> None:
        """The producer is done (``error``: ``(code, message)``)."""
        with self._cond:
            self._done, self.error = True, error

    # ------------------------------------------------------------ data loop

    def take(
        self, ordinal: int, indices: list[int]
    ) -> tuple[list[Item], list[int], _Split | None]:
        """The longest run of ``indices`` made and kept, removed from the buffer."""
        with self._cond:
            split = self._splits.get(ordinal)
            if split is None:
                return [], [], None
            items, taken = [], []
            for index in indices:
                entry = split.pop(index)
                if entry is None:
                    break
                items.append(entry[0])
                taken.append(index)
                self._items -= 1
                self._bytes -= entry[1]
            if items:
                self._cond.notify_all()
            return items, taken, split

    def counts(self) -> list[int]:
        """``[ordinal, count, ...]`` of the splits ended lately."""
        with self._cond:
            return [v for pair in self._counts for v in pair]

    @property
    def released(self) -> int:
        return self._released

    def clear(self) -> list[Item]:
        """Drops everything (the task stopped); returns the items dropped."""
        with self._cond:
            dropped = [
                item for s in self._splits.values() for item, _ in s.items.values()
            ]
            for split in self._splits.values():
                self._drop(split)
            self._splits.clear()
            self._awaited.clear()
            self._had_early.clear()
            return dropped

    def _drop(self, split: _Split) -> None:
        self._items -= len(split.items)
        self._bytes -= split.nbytes
        split.items.clear()
        split.nbytes = 0

    @property
    def ended(self) -> bool:
        """True once the producer is done (elements may remain)."""
        with self._cond:
            return self._done

    finished = ended
    """A dealt task is finished for the dispatcher once its producer is: what
    it holds is served until its iteration ends."""

    def buffered(self) -> tuple[int, int]:
        """``(items, bytes)`` held (for stats)."""
        with self._cond:
            return self._items, self._bytes


def answer(request: m.GetElements, buffer: DealtBuffer) -> DealtSend | Refuse | None:
    """What to answer a dealt ``request`` now; None to park it until there is news.

    Items come as the longest run of the indices asked for that is made. A
    request past a split's end is answered with no item and the count; one
    for a split released (or never this task's, once the producer is done)
    is refused.
    """
    invalid = _invalid(request)
    if invalid is not None:
        return invalid
    if request.have:
        buffer.discard(request.split, request.have)
    if not request.indices:
        return DealtSend([], request.split, [], 0, False, buffer.counts())
    items, taken, split = buffer.take(request.split, request.indices)
    if split is None:
        return _not_open(request, buffer)
    if items:
        return DealtSend(
            items, request.split, taken, split.produced, split.ended, buffer.counts()
        )
    return _none_taken(request, buffer, split)


def _invalid(request: m.GetElements) -> Refuse | None:
    """A refusal if ``request`` names no split, or neither indices nor what it has."""
    indices = request.indices
    wanted = bool(indices) and sorted(set(indices)) == indices
    if request.split >= 0 and (wanted or (request.have and not indices)):
        return None
    return Refuse(
        "INVALID_ARGUMENT",
        "a dealt read asks for a split (>= 0) and ascending distinct indices, "
        "or says what it has of one",
    )


def _not_open(request: m.GetElements, buffer: DealtBuffer) -> DealtSend | Refuse | None:
    """A request for a split the buffer does not hold: refused, or parked until opened."""
    if request.split < buffer.released or buffer.ended:
        if buffer.error is not None:
            return Refuse(*buffer.error)
        return Refuse(
            m.ABSENT, f"split {request.split} is not held by task {request.task_id}"
        )
    if buffer.awaits(request.split, -1):
        return answer(request, buffer)  # opened meanwhile
    return None  # handed to this task, not opened by its producer yet


def _none_taken(
    request: m.GetElements, buffer: DealtBuffer, split: _Split
) -> DealtSend | Refuse | None:
    """A request whose first index is not held: sent already, past the end, or to come."""
    first = request.indices[0]
    if first < split.produced:
        return Refuse(
            "FAILED_PRECONDITION",
            f"element {first} of split {request.split} was sent already (or "
            "skipped): was a consumer restarted under the same job name?",
        )
    if split.ended:
        return DealtSend([], request.split, [], split.produced, True, buffer.counts())
    if buffer.ended and buffer.error is not None:
        return Refuse(*buffer.error)
    if buffer.awaits(request.split, first):  # made meanwhile
        return answer(request, buffer)
    return None
