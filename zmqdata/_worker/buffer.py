"""``TaskBuffer``: the bounded hand-off from a task's producer to the data loop.

Items are either raw small elements (coalesced into one message when sent) or
elements already encoded to frames by the producer (large arrays, compressed
there so compression never runs on the serving thread). Under exactly-once
reads (``tracked``) the buffer also keeps what its items stand for and the
keys the task was handed (``handed.HandedKeys``): ``take_covered`` says what
the items taken cover, and the end carries the keys the task dropped.

>>> buffer = TaskBuffer(max_items=2, max_bytes=1 << 20)
>>> buffer.put(Raw(1), 8), buffer.put(Raw(2), 8)  # True: it was empty
(True, False)
>>> [item.element for item in buffer.take(5)], buffer.finished
([1, 2], False)
>>> buffer.finish(None); buffer.take(5), buffer.finished
([], True)
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from zmqdata._wire.lineage import EMPTY, Coverage, Lineage
from zmqdata._wire.progress import Mark
from zmqdata._worker.handed import HandedKeys

_WAIT_S = 0.05


class Cancelled(Exception):
    """The producer was stopped while it waited."""


@dataclass(frozen=True, slots=True)
class Raw:
    """A small element, encoded when sent (with its neighbours)."""

    element: Any


@dataclass(frozen=True, slots=True)
class Encoded:
    """A large element already encoded to frames."""

    frames: list[Any]


class TaskBuffer:
    """A thread-safe queue bounded by item count and bytes, with an end state."""

    def __init__(self, max_items: int, max_bytes: int, tracked: bool = False) -> None:
        self._items: deque[tuple[Raw | Encoded, int, Lineage, list[Mark] | None]] = (
            deque()
        )
        self._keys = HandedKeys() if tracked else None
        self._bytes = 0
        self._max_items, self._max_bytes = max_items, max_bytes
        self._cond = threading.Condition()
        self._done = False
        self.error: tuple[str, str] | None = None
        self.dropped: Lineage = EMPTY
        """Exactly once: the keys the task dropped, told with its end."""

    def put(
        self,
        item: Raw | Encoded,
        nbytes: int,
        stop: threading.Event | None = None,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
    ) -> bool:
        """Adds an item, waiting for room; returns whether the buffer was empty.

        Raises ``Cancelled`` if ``stop`` is set while it waits.
        """
        with self._cond:
            while self._items and (
                len(self._items) >= self._max_items
                or self._bytes + nbytes > self._max_bytes
            ):
                if stop is not None and stop.is_set():
                    raise Cancelled
                self._cond.wait(_WAIT_S)
            was_empty = not self._items
            self._items.append((item, nbytes, lineage, marks))
            self._bytes += nbytes
            return was_empty

    def take(self, max_items: int) -> list[Raw | Encoded]:
        """Removes and returns up to ``max_items`` items without waiting."""
        return self.take_covered(max_items, None)

    def take_covered(
        self, max_items: int, coverage: Coverage | None
    ) -> list[Raw | Encoded]:
        """``take``, adding what the items stand for to ``coverage`` (if tracked)."""
        keys = self._keys if coverage is not None else None
        with self._cond:
            taken: list[Raw | Encoded] = []
            lineages: list[Lineage] = []  # only what a tracked reply covers
            while self._items and len(taken) < max_items:
                item, nbytes, lineage, marks = self._items.popleft()
                self._bytes -= nbytes
                taken.append(item)
                if keys is not None:
                    lineages.append(lineage)
                    if marks and coverage is not None:
                        coverage.mark(marks)
            if taken:
                if keys is not None and coverage is not None:
                    keys.cover(lineages, coverage)
                self._cond.notify_all()
            return taken

    @property
    def tracked(self) -> bool:
        """Whether the buffer keeps what its items stand for (exactly once)."""
        return self._keys is not None

    def handed(self, lo: int, hi: int) -> None:
        """Exactly once: the task was handed the keys ``[lo, hi)``."""
        assert self._keys is not None
        with self._cond:
            self._keys.handed(lo, hi)

    def take_exactly(self, count: int) -> list[Raw | Encoded]:
        """Removes ``count`` items if that many are buffered, else none."""
        with self._cond:
            if len(self._items) < count:
                return []
        return self.take(count)

    def finish(self, error: tuple[str, str] | None) -> None:
        """Marks the end of the task's output (``error``: ``(code, message)``).

        Tracked, it notes the keys the task was handed and did not output
        (filtered, skipped, never read): ``dropped``.
        """
        with self._cond:
            self._done, self.error = True, error
            if self._keys is not None:
                self.dropped = self._keys.dropped(entry[2] for entry in self._items)

    @property
    def ended(self) -> bool:
        """True once the producer is done (items may remain)."""
        with self._cond:
            return self._done

    @property
    def finished(self) -> bool:
        """True once the producer is done and every item has been taken."""
        with self._cond:
            return self._done and not self._items

    def buffered(self) -> tuple[int, int]:
        """``(items, bytes)`` waiting to be taken (for stats)."""
        with self._cond:
            return len(self._items), self._bytes

    def __len__(self) -> int:
        return len(self._items)
