"""Multi-rank reads on a worker: a task's output by split and index.

A dealt task (``_wire/deal.py``) runs its pipeline on one split at a time;
element ``i`` of split ``ordinal`` is kept under ``(ordinal, i)`` until a
consumer asks for exactly it (``GetElements.split`` and ``indices``): the
consumer knows which tokens are its own, the worker only what it made.
``answer`` decides a request from the buffer alone (pure, like
``serving.answer``); a request for elements not made yet is parked. Splits
the dispatcher released (every consumer is past them) are dropped.

>>> buffer = DealtBuffer(max_items=8, max_bytes=1 << 20)
>>> buffer.open(3, skip=0)
>>> request = m.GetElements(task_id=1, client_id=1, max_elements=2, split=3, indices=[1])
>>> answer(request, buffer) is None  # element 1 is not made yet: park
True
>>> buffer.put(3, 0, Raw("a"), 8); buffer.put(3, 1, Raw("b"), 8); buffer.end(3, 2)
>>> reply = answer(request, buffer)
>>> [item.element for item in reply.items], reply.indices, reply.produced, reply.ended
(['b'], [1], 2, True)
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from zmqdata._wire import messages as m
from zmqdata._worker.buffer import Cancelled, Encoded, Raw
from zmqdata._worker.serving import Refuse

_WAIT_S = 0.05
COUNTS_TOLD = 64
"""How many of the task's latest split counts every reply carries."""


@dataclass
class _Split:
    skip: int
    items: dict[int, tuple[Raw | Encoded, int]] = field(default_factory=dict)
    produced: int = 0
    ended: bool = False


@dataclass(frozen=True, slots=True)
class DealtSend:
    """Send these items of ``split`` (possibly none, to tell its count)."""

    items: list[Raw | Encoded]
    split: int
    indices: list[int]
    produced: int
    ended: bool
    counts: list[int]


class DealtBuffer:
    """Thread-safe: the producer puts, the data loop takes; bounded like TaskBuffer."""

    def __init__(self, max_items: int, max_bytes: int) -> None:
        self._splits: dict[int, _Split] = {}
        self._counts: deque[tuple[int, int]] = deque(maxlen=COUNTS_TOLD)
        self._items = self._bytes = 0
        self._max_items, self._max_bytes = max_items, max_bytes
        self._released = 0
        self._cond = threading.Condition()
        self._done = False
        self.error: tuple[str, str] | None = None

    # ------------------------------------------------------------ producer

    def open(self, ordinal: int, skip: int) -> None:
        """Split ``ordinal`` is this task's; its first ``skip`` elements are not kept."""
        with self._cond:
            if ordinal >= self._released:
                self._splits[ordinal] = _Split(skip)

    def put(
        self,
        ordinal: int,
        index: int,
        item: Raw | Encoded,
        nbytes: int,
        stop: threading.Event | None = None,
    ) -> None:
        """Keeps element ``index`` of a split, waiting for room (``Cancelled`` on stop)."""
        with self._cond:
            while self._items and (
                self._items >= self._max_items or self._bytes + nbytes > self._max_bytes
            ):
                if stop is not None and stop.is_set():
                    raise Cancelled
                self._cond.wait(_WAIT_S)
            split = self._splits.get(ordinal)
            if split is None:  # released meanwhile
                return
            split.produced = index + 1
            if index >= split.skip:
                split.items[index] = (item, nbytes)
                self._items += 1
                self._bytes += nbytes

    def end(self, ordinal: int, count: int) -> None:
        """Split ``ordinal`` made ``count`` elements."""
        with self._cond:
            split = self._splits.get(ordinal)
            if split is not None:
                split.produced, split.ended = count, True
            self._counts.append((ordinal, count))

    def release(self, below: int) -> None:
        """Drops the splits below ``below``: every consumer is past them."""
        with self._cond:
            self._released = max(self._released, below)
            for ordinal in [q for q in self._splits if q < below]:
                self._drop(self._splits.pop(ordinal))
            self._cond.notify_all()

    def finish(self, error: tuple[str, str] | None) -> None:
        """The producer is done (``error``: ``(code, message)``)."""
        with self._cond:
            self._done, self.error = True, error

    # ------------------------------------------------------------ data loop

    def take(
        self, ordinal: int, indices: list[int]
    ) -> tuple[list[Raw | Encoded], list[int], _Split | None]:
        """The longest run of ``indices`` made and kept, removed from the buffer."""
        with self._cond:
            split = self._splits.get(ordinal)
            if split is None:
                return [], [], None
            items, taken = [], []
            for index in indices:
                entry = split.items.pop(index, None)
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

    def clear(self) -> list[Raw | Encoded]:
        """Drops everything (the task stopped); returns the items dropped."""
        with self._cond:
            dropped = [
                item for s in self._splits.values() for item, _ in s.items.values()
            ]
            for split in self._splits.values():
                self._drop(split)
            self._splits.clear()
            return dropped

    def _drop(self, split: _Split) -> None:
        self._items -= len(split.items)
        self._bytes -= sum(nbytes for _, nbytes in split.items.values())
        split.items.clear()

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


def answer(
    request: m.GetElements, buffer: DealtBuffer | None
) -> DealtSend | Refuse | None:
    """What to answer a dealt ``request`` now; None to park it until there is news.

    Items come as the longest run of the indices asked for that is made. A
    request past a split's end is answered with no item and the count; one
    for a split released (or never this task's, once the producer is done)
    is refused.
    """
    if buffer is None:
        return Refuse("NOT_FOUND", f"task {request.task_id} is not on this worker")
    indices = request.indices
    if request.split < 0 or not indices or sorted(set(indices)) != indices:
        return Refuse(
            "INVALID_ARGUMENT",
            "a dealt read asks for a split (>= 0) and ascending distinct indices",
        )
    items, taken, split = buffer.take(request.split, indices)
    if split is None:
        if request.split < buffer.released or buffer.ended:
            if buffer.error is not None:
                return Refuse(*buffer.error)
            return Refuse(
                "NOT_FOUND",
                f"split {request.split} is not held by task {request.task_id}",
            )
        return None  # handed to this task, not opened by its producer yet
    if not items and indices[0] < split.produced:
        return Refuse(
            "FAILED_PRECONDITION",
            f"element {indices[0]} of split {request.split} was sent already (or "
            "skipped): was a consumer restarted under the same job name?",
        )
    if items or (split.ended and indices[0] >= split.produced):
        return DealtSend(
            items, request.split, taken, split.produced, split.ended, buffer.counts()
        )
    if buffer.ended and buffer.error is not None:
        return Refuse(*buffer.error)
    return None
