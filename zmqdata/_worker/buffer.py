"""``TaskBuffer``: the bounded hand-off from a task's producer to the data loop.

Items are either raw small elements (coalesced into one message when sent) or
elements already encoded to frames by the producer (large arrays, compressed
there so compression never runs on the serving thread). Under exactly-once
reads (``tracked``) the buffer also keeps what its items stand for and the
keys the task was handed (``handed.HandedKeys``): ``take_covered`` says what
the items taken cover, and the end carries the keys the task dropped.

A ``paced`` buffer holds at most ``AHEAD_S`` of what is taken from it (the
rate its consumers' links carry), within ``[MIN_AHEAD_BYTES, max_bytes]``,
starting at the minimum; a reply takes at most half of it. What a worker's
producer has made and its link not yet sent is work no other worker can take
over: on a slow link a full ``max_bytes`` is seconds of it, and at the end of
an epoch the other workers would sit idle while it drains (a 63 MB pass read
from two 200 Mbit/s hosts took 1.6x as long as it needed: one host had made
79% of it; docs/performance.md, "Many hosts"). On a fast link the rate soon
allows all of ``max_bytes``.

>>> now = [0.0]
>>> paced = TaskBuffer(1024, 64 << 20, paced=True, clock=lambda: now[0])
>>> paced.limit_bytes == MIN_AHEAD_BYTES
True
>>> for _ in range(4):
...     _ = paced.put(Raw(0), 1 << 19)  # 2 MiB in all: full
>>> now[0] = 0.1
>>> len(paced.take_covered(4, None))  # a reply: half the limit, 1 MiB
2
>>> paced.limit_bytes == MIN_AHEAD_BYTES  # 10 MB/s: 1 MB ahead, under the floor
True

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
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zmqdata._dataset.block import Block
from zmqdata._wire.lineage import EMPTY, Coverage, Lineage, cut
from zmqdata._wire.progress import Mark
from zmqdata._worker.handed import HandedKeys

_WAIT_S = 0.05
AHEAD_S = 0.1
"""A paced buffer holds at most this many seconds of what is taken from it, ..."""
MIN_AHEAD_BYTES = 2 * 2**20
"""... and never less than this (nor more than its ``max_bytes``)."""
RATE_WINDOW_S = 0.05
"""The take rate is measured over windows at least this long, ..."""
RATE_SMOOTHING = 0.5
"""... each weighing this much against the windows before (EWMA)."""


class Cancelled(Exception):
    """The producer was stopped while it waited."""


def wait_for_room(cond: threading.Condition, stop: threading.Event | None) -> None:
    """A full buffer's producer waits a moment (holding ``cond``); ``Cancelled`` on stop."""
    if stop is not None and stop.is_set():
        raise Cancelled
    cond.wait(_WAIT_S)


@dataclass(frozen=True, slots=True)
class Raw:
    """A small element, encoded when sent (with its neighbours)."""

    element: Any


@dataclass(frozen=True, slots=True)
class Encoded:
    """A large element already encoded to frames."""

    frames: list[Any]


Item = Raw | Encoded | Block
"""What a buffer holds: a small element, a large one encoded, or a block of elements."""


class TaskBuffer:
    """A thread-safe queue bounded by elements (a block holds several) and bytes.

    It has an end state (``finish``).
    """

    def __init__(
        self,
        max_items: int,
        max_bytes: int,
        tracked: bool = False,
        paced: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._items: deque[tuple[Item, int, Lineage, list[Mark] | None]] = deque()
        self._elements = 0
        """The elements the items hold (a block holds several)."""
        self._keys = HandedKeys() if tracked else None
        self._bytes = 0
        self._max_items, self._max_bytes = max_items, max_bytes
        self._paced = paced
        self._floor = min(MIN_AHEAD_BYTES, max_bytes)
        self._limit = self._floor if paced else max_bytes
        self._clock = clock
        self._window_start, self._window_bytes = clock(), 0
        self._take_rate: float | None = None
        self._cond = threading.Condition()
        self._done = False
        self.error: tuple[str, str] | None = None
        self.dropped: Lineage = EMPTY
        """Exactly once: the keys the task dropped, told with its end."""

    def put(
        self,
        item: Item,
        nbytes: int,
        stop: threading.Event | None = None,
        lineage: Lineage = EMPTY,
        marks: list[Mark] | None = None,
    ) -> bool:
        """Adds an item, waiting for room; returns whether the buffer was empty.

        Raises ``Cancelled`` if ``stop`` is set while it waits.
        """
        count = elements_in(item)
        with self._cond:
            while self._items and (
                self._elements + count > self._max_items
                or self._bytes + nbytes > self._limit
            ):
                wait_for_room(self._cond, stop)
            was_empty = not self._items
            self._items.append((item, nbytes, lineage, marks))
            self._elements += count
            self._bytes += nbytes
            return was_empty

    def take(self, max_items: int) -> list[Item]:
        """Removes and returns up to ``max_items`` items without waiting."""
        return self._take(max_items, None, self._max_bytes)

    def take_covered(self, max_items: int, coverage: Coverage | None) -> list[Item]:
        """A reply's items: ``take``, adding what they stand for to ``coverage`` (if tracked).

        From a paced buffer, at most half its limit in bytes (one item at
        least), so two replies in flight hold no more than it does.
        """
        reply_bytes = self._limit // 2 if self._paced else self._max_bytes
        return self._take(max_items, coverage, reply_bytes)

    def _take(
        self, max_items: int, coverage: Coverage | None, max_bytes: int
    ) -> list[Item]:
        keys = self._keys if coverage is not None else None
        covered = coverage if keys is not None else None  # tracked replies only
        with self._cond:
            taken, lineages, taken_bytes = self._pop(max_items, max_bytes, covered)
            if taken:
                if keys is not None and covered is not None:
                    keys.cover(lineages, covered, _runs(taken))
                if self._paced:
                    self._pace(taken_bytes, self._clock())
                self._cond.notify_all()
            return taken

    def _pop(
        self, max_items: int, max_bytes: int, coverage: Coverage | None
    ) -> tuple[list[Item], list[Lineage], int]:
        """Removes one take's items (under the lock): them, their lineages, their bytes.

        With ``coverage`` (a tracked reply), it keeps their lineages and marks.
        """
        items = self._items
        taken: list[Item] = []
        lineages: list[Lineage] = []  # only what a tracked reply covers
        taken_bytes = count = 0
        while (
            items
            and count < max_items
            and (not taken or taken_bytes + items[0][1] <= max_bytes)
        ):
            item, nbytes, lineage, marks = items.popleft()
            n = elements_in(item)
            if count + n > max_items:  # a block, cut at the count asked for
                assert isinstance(item, Block)
                item, nbytes, lineage = self._cut_front(
                    item, nbytes, lineage, max_items - count
                )
                n = item.n
            count += n
            self._elements -= n
            self._bytes -= nbytes
            taken_bytes += nbytes
            taken.append(item)
            if coverage is not None:
                lineages.append(lineage)
                if marks:
                    coverage.mark(marks)
        return taken, lineages, taken_bytes

    def _cut_front(
        self, block: Block, nbytes: int, lineage: Lineage, k: int
    ) -> tuple[Block, int, Lineage]:
        """Puts back all but the first ``k`` elements of ``block``; returns those ``k``.

        Its elements stand for its keys in order (``Block.widths``).
        """
        head, rest = block.cut(k)
        share = nbytes * k // block.n
        head_keys, rest_keys = cut(lineage, block.keys(k))
        self._items.appendleft((rest, nbytes - share, rest_keys, None))
        return head, share, head_keys

    def _pace(self, taken_bytes: int, now: float) -> None:
        """Counts bytes taken; at the end of a window, sets the limit from the rate."""
        self._window_bytes += taken_bytes
        elapsed = now - self._window_start
        if elapsed < RATE_WINDOW_S:
            return
        rate = self._window_bytes / elapsed
        old = self._take_rate
        self._take_rate = rate if old is None else old + RATE_SMOOTHING * (rate - old)
        self._window_start, self._window_bytes = now, 0
        ahead = int(self._take_rate * AHEAD_S)
        self._limit = max(self._floor, min(ahead, self._max_bytes))

    @property
    def limit_bytes(self) -> int:
        """The bytes the buffer holds at most now (``max_bytes`` unless paced)."""
        return self._limit

    @property
    def tracked(self) -> bool:
        """Whether the buffer keeps what its items stand for (exactly once)."""
        return self._keys is not None

    def handed(self, lo: int, hi: int) -> None:
        """Exactly once: the task was handed the keys ``[lo, hi)``."""
        assert self._keys is not None
        with self._cond:
            self._keys.handed(lo, hi)

    def take_exactly(self, count: int) -> list[Item]:
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
            return self._elements, self._bytes

    def __len__(self) -> int:
        return len(self._items)


def elements_in(item: Item) -> int:
    """How many elements ``item`` holds (a block several, others one)."""
    return item.n if type(item) is Block else 1


def _runs(items: list[Item]) -> list[list[int] | None] | None:
    """The keys each item's elements stand for (``Block.runs``); None without blocks."""
    if not any(type(item) is Block for item in items):
        return None
    return [item.runs() if type(item) is Block else None for item in items]


def count(items: Sequence[Item]) -> int:
    """How many elements ``items`` hold."""
    return sum(map(elements_in, items))
