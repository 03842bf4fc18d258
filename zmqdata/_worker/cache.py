"""``SlidingWindowCache``: one task's cross-trainer cache (TF ``cross_trainer_cache.h``).

Trainers (consumers with different ``trainer_id``) each read the task's whole
infinite stream, sharing one window of its most recent elements instead of
splitting them. Consumers with the *same* id share one position, so they split.

Pacing, as in TF (a cache extended on demand from a small FCFS prefetch):

* the producer puts into a bounded *prefetch* queue outside the window,
  waiting (like ``TaskBuffer.put``) while it is full;
* an element enters the window only when the fastest trainer first reads it
  (a cache *miss*), evicting from the front until the window's bytes fit
  ``max_bytes``; later readers of it are *hits*.

So production stays at most one prefetch queue ahead of the fastest trainer,
and the window holds the last ``max_bytes`` of elements already read: a
trainer slightly behind the fastest never skips data, while one that fell out
of the window jumps to its start.

>>> cache = SlidingWindowCache[int](max_bytes=16)
>>> cache.put(0, 8), cache.put(1, 8)  # True: the prefetch queue was empty
(True, False)
>>> cache.take("a", 5), cache.take("b", 1)  # "a" pulls both into the window
([0, 1], [0])
>>> cache.put(2, 8); cache.take("a", 5)  # 2 enters the window, 0 leaves it
True
[2]
>>> cache.take("b", 5), cache.take("c", 5)  # "c" starts at the window start
([1, 2], [1, 2])
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from zmqdata._worker.buffer import wait_for_room
from zmqdata.errors import InvalidArgumentError

T = TypeVar("T")

PREFETCH_ITEMS = 16
PREFETCH_BYTES = 64 * 2**20
NOT_INFINITE = (
    "Cross-trainer caching requires the input dataset to be infinite. "
    "However, it reached the end of sequence."
)


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A snapshot of a cache's metrics (for ``get_status``)."""

    hits: int
    misses: int
    cached_bytes: int
    cached_elements: int
    num_trainers: int
    window_start: int
    prefetched: int


class SlidingWindowCache(Generic[T]):
    """A thread-safe sliding window over an infinite stream, read per trainer id.

    Args:
        max_bytes: The window's size; an element larger than it is refused.
        prefetch_items: How many elements the producer may put ahead of the
            fastest trainer.
        prefetch_bytes: The same bound in bytes (default: the smaller of
            ``max_bytes`` and 64 MiB); one element always fits.
    """

    def __init__(
        self,
        max_bytes: int,
        prefetch_items: int = PREFETCH_ITEMS,
        prefetch_bytes: int | None = None,
    ) -> None:
        if max_bytes < 1 or prefetch_items < 1:
            raise InvalidArgumentError(
                f"the cross-trainer cache needs max_bytes >= 1 and prefetch_items"
                f" >= 1, got {max_bytes} and {prefetch_items}"
            )
        self.max_bytes = max_bytes
        self._prefetch_items = prefetch_items
        self._prefetch_bytes = prefetch_bytes or min(max_bytes, PREFETCH_BYTES)
        self._cond = threading.Condition()
        self._pending: deque[tuple[T, int]] = deque()
        self._pending_bytes = 0
        self._window: dict[int, tuple[T, int]] = {}  # absolute index -> item
        self._start = 0  # absolute index of the window's first element
        self._bytes = 0
        self._positions: dict[str, int] = {}  # trainer id -> next absolute index
        self._hits = self._misses = 0
        self._done = False
        self.error: tuple[str, str] | None = None
        self.produced = 0

    def put(self, item: T, nbytes: int, stop: threading.Event | None = None) -> bool:
        """Queues the producer's next element; returns whether the queue was empty.

        True means a trainer at the head may be waiting for it (wake the data
        loop). Waits while the prefetch queue is full.

        Raises:
            InvalidArgumentError: ``nbytes`` exceeds the window.
            Cancelled: ``stop`` was set while it waited.
        """
        if nbytes > self.max_bytes:
            raise InvalidArgumentError(
                f"element size {nbytes} bytes is larger than the cross-trainer "
                f"cache size {self.max_bytes} bytes"
            )
        with self._cond:
            while self._pending and (
                len(self._pending) >= self._prefetch_items
                or self._pending_bytes + nbytes > self._prefetch_bytes
            ):
                wait_for_room(self._cond, stop)
            was_empty = not self._pending
            self._pending.append((item, nbytes))
            self._pending_bytes += nbytes
            self.produced += 1
            return was_empty

    def take(self, trainer_id: str, max_items: int) -> list[T]:
        """Returns up to ``max_items`` next elements for ``trainer_id``, never waiting.

        A new trainer, or one behind the window, starts at the window start.
        ``[]`` means the trainer is at the head: park the request (or, once
        :meth:`finished_for` is true, answer with :attr:`error`).

        Raises:
            InvalidArgumentError: ``trainer_id`` is empty.
        """
        if not trainer_id:
            raise InvalidArgumentError(
                "the cross-trainer cache requires a non-empty trainer id"
            )
        with self._cond:
            position = max(self._positions.get(trainer_id, 0), self._start)
            end = self._start + len(self._window)
            taken = [
                self._window[index][0]
                for index in range(position, min(end, position + max_items))
            ]
            self._hits += len(taken)
            position += len(taken)
            pulled = False
            while len(taken) < max_items and self._pending:
                # Only the fastest trainer gets here: position == head.
                item, nbytes = self._pending.popleft()
                self._pending_bytes -= nbytes
                while self._window and self._bytes + nbytes > self.max_bytes:
                    self._bytes -= self._window.pop(self._start)[1]
                    self._start += 1
                self._window[position] = (item, nbytes)
                self._bytes += nbytes
                self._misses += 1
                taken.append(item)
                position += 1
                pulled = True
            self._positions[trainer_id] = position
            if pulled:
                self._cond.notify_all()
            return taken

    def finish(self, error: tuple[str, str] | None) -> None:
        """Marks the end of the stream; a plain end is an error for this cache."""
        with self._cond:
            self._done = True
            self.error = error or (InvalidArgumentError.code, NOT_INFINITE)
            self._cond.notify_all()

    def finished_for(self, trainer_id: str) -> bool:
        """True once the stream has ended and ``trainer_id`` has read all that is left."""
        with self._cond:
            position = max(self._positions.get(trainer_id, 0), self._start)
            head = self._start + len(self._window)
            return self._done and not self._pending and position >= head

    def buffered(self) -> tuple[int, int]:
        """``(items, bytes)`` held: the window plus what is prefetched (for stats)."""
        with self._cond:
            items = len(self._window) + len(self._pending)
            return items, self._bytes + self._pending_bytes

    @property
    def ended(self) -> bool:
        """True once the producer is done."""
        with self._cond:
            return self._done

    def stats(self) -> CacheStats:
        """Returns the hit/miss counters, the window's size and the trainer count."""
        with self._cond:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                cached_bytes=self._bytes,
                cached_elements=len(self._window),
                num_trainers=len(self._positions),
                window_start=self._start,
                prefetched=len(self._pending),
            )
