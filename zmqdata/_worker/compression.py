"""Compression AUTO: zstd only where it makes a task's elements arrive faster.

Per task, a ``CompressionPolicy`` (pure logic, fed numbers) holds three
measured rates, in raw bytes per second unless said otherwise:

* ``P``, how fast the pipeline makes bytes (producer time only, not the time
  it waits for buffer room nor compression time);
* ``C`` and ``r``, what zstd sustains on this task's data and the ratio it
  reaches (compressed / raw size), from the elements it compressed;
* ``L``, the link rate of the slowest connection reading the task, in bytes
  on the wire per second, measured by the kernel (``linkrate.py``).

Without compression elements flow at about ``min(P, L)``; with it at about
``min(1 / (1/P + 1/C), L / r)`` (the producer thread compresses). The policy
compresses when that is ``ON_GAIN`` times higher, and stops when the gain falls
under ``OFF_GAIN`` (hysteresis: no flapping). A link rate not known (not
measured yet, not TCP, not Linux) means not compressing, which is never slower
than ``compression=None``. While it does not compress and the link is slower
than the producer, it compresses one element now and then (a probe, at most
``PROBE_SHARE`` of the producer's time) to keep ``C`` and ``r`` current.
Estimates are EWMAs over windows, so the decision follows rates that move.

>>> policy = CompressionPolicy()
>>> policy.produced(100_000_000, 1.0)              # P = 100 MB/s
>>> policy.link("conn", 20_000_000, now=0.0)       # L = 20 MB/s on the wire
>>> policy.should_compress(now=0.0)                # a probe: C, r unknown
True
>>> policy.compressed(10_000_000, 4_000_000, 0.02, now=0.0)  # C = 500 MB/s, r = 0.4
>>> policy.should_compress(now=0.1), policy.compressing
(True, True)
>>> policy.link("conn", 1e10, now=0.2)             # the link got fast
>>> policy.should_compress(now=0.2)
False
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Final

from zmqdata._wire import frames

ON_GAIN: Final = 1.2
"""Compress when that promises this many times the throughput of not doing it."""
OFF_GAIN: Final = 1.05
"""Stop compressing when the promised gain falls under this."""
LINK_TTL_S: Final = 5.0
"""A connection's link rate counts this long after it was last measured."""
PROBE_EVERY_S: Final = 1.0
PROBE_SHARE: Final = 0.02
"""Probes take at most this share of the producer's time."""
SMOOTHING: Final = 0.3
"""Weight of a new window in the EWMAs."""
PRODUCE_WINDOW_S: Final = 0.05
ZSTD_WINDOW_S: Final = 0.01


class Rate:
    """An EWMA of ``amount / seconds``, over windows of at least ``window_s``.

    >>> rate = Rate(window_s=1.0)
    >>> rate.add(50, 0.5); rate.value is None
    True
    >>> rate.add(150, 0.5); rate.value
    200.0
    """

    __slots__ = ("_amount", "_seconds", "_window_s", "value")

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._amount = 0.0
        self._seconds = 0.0
        self.value: float | None = None

    def add(self, amount: float, seconds: float) -> None:
        self._amount += amount
        self._seconds += max(seconds, 0.0)
        if self._seconds < self._window_s:
            return
        window = self._amount / self._seconds
        self._amount = self._seconds = 0.0
        old = self.value
        self.value = window if old is None else old + SMOOTHING * (window - old)


class CompressionPolicy:
    """Decides, per large element, whether a task compresses (thread-safe).

    The producer thread calls ``produced``, ``compressed`` and
    ``should_compress``; the data loop calls ``link``; anyone ``stats``.
    """

    def __init__(self, enabled: bool = True) -> None:
        self._lock = threading.Lock()
        self._enabled = enabled
        self.compressing = False
        """The current decision (probes aside)."""
        self._produce = Rate(PRODUCE_WINDOW_S)
        self._zstd = Rate(ZSTD_WINDOW_S)
        self._ratio: float | None = None
        self._links: dict[Hashable, tuple[float, float]] = {}
        self._next_probe = float("-inf")
        self.compressed_elements = 0

    def produced(self, nbytes: int, seconds: float) -> None:
        """The pipeline made ``nbytes`` raw bytes in ``seconds`` of its own time."""
        with self._lock:
            self._produce.add(nbytes, seconds)

    def compressed(self, raw: int, packed: int, seconds: float, now: float) -> None:
        """The codec turned ``raw`` bytes into ``packed`` in ``seconds`` (at ``now``)."""
        if raw <= 0:
            return
        with self._lock:
            self.compressed_elements += 1
            self._zstd.add(raw, seconds)
            if self._zstd.value is None:  # a first, short sample beats none
                self._zstd.value = raw / max(seconds, 1e-9)
            ratio = packed / raw
            old = self._ratio
            self._ratio = ratio if old is None else old + SMOOTHING * (ratio - old)
            wait = max(PROBE_EVERY_S, seconds / PROBE_SHARE)
            self._next_probe = max(self._next_probe, now + wait)

    def link(self, key: Hashable, rate: float | None, now: float) -> None:
        """Connection ``key`` reads this task at ``rate`` wire bytes/s (None: unknown)."""
        with self._lock:
            if rate is None:
                self._links.pop(key, None)
            else:
                self._links[key] = (rate, now)

    def should_compress(self, now: float) -> bool:
        """Whether to compress the next large element (the decision, or a probe)."""
        with self._lock:
            if not self._enabled:
                return False
            link = self._link(now)
            if link is None:
                self.compressing = False
                return False
            produce = self._produce.value or float("inf")
            if self._ratio is None or self._zstd.value is None:
                return self._probe(now, link, produce)
            without = min(produce, link)
            with_zstd = min(
                1.0 / (1.0 / produce + 1.0 / self._zstd.value),
                link / max(self._ratio, 1e-6),
            )
            gain = with_zstd / without
            self.compressing = gain >= (OFF_GAIN if self.compressing else ON_GAIN)
            return self.compressing or self._probe(now, link, produce)

    def _probe(self, now: float, link: float, produce: float) -> bool:
        """A probe is due, and could pay: the link is slower than the producer."""
        if link >= produce or now < self._next_probe:
            return False
        self._next_probe = now + PROBE_EVERY_S  # until ``compressed`` says more
        return True

    def _link(self, now: float) -> float | None:
        """The slowest fresh link rate among the task's readers (None: none known)."""
        stale = [k for k, (_, at) in self._links.items() if now - at > LINK_TTL_S]
        for key in stale:
            del self._links[key]
        return min((rate for rate, _ in self._links.values()), default=None)

    def stats(self, now: float) -> dict[str, Any]:
        """The decision and the rates behind it (for the task's stats)."""
        with self._lock:
            return {
                "compressing": self.compressing,
                "compressed_elements": self.compressed_elements,
                "link_bytes_per_s": self._link(now),
                "produce_bytes_per_s": self._produce.value,
                "zstd_bytes_per_s": self._zstd.value,
                "compression_ratio": self._ratio,
            }


class TaskCompression:
    """The producer thread's side: times the pipeline and encodes large elements.

    Only large elements are timed (small ones stay off this path, which must
    cost them nothing): the pipeline's time for one is the time from the end of
    the previous one's ``resume`` to its ``encode`` (the first one's, which
    includes the pipeline's start, is not counted). ``level`` None
    (compression off, or no TCP link) never compresses nor measures.
    """

    def __init__(
        self,
        level: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = CompressionPolicy(enabled=level is not None)
        self._level = level
        self._clock = clock
        self._since: float | None = None

    def encode(self, element: Any, nbytes: int) -> list[Any]:
        """The frames of the large ``element`` (``nbytes`` of data), zstd if it pays."""
        if self._level is None:
            return frames.encode([element])
        start = self._clock()
        if self._since is not None:
            self.policy.produced(nbytes, start - self._since)
        if not self.policy.should_compress(start):
            return frames.encode([element])
        encoded = frames.encode([element], compression_level=self._level)
        packed = sum(memoryview(part).nbytes for part in encoded)
        self.policy.compressed(nbytes, packed, self._clock() - start, start)
        return encoded

    def resume(self) -> None:
        """The producer goes back to its pipeline (the element is queued)."""
        self._since = self._clock()

    def link(self, key: Hashable, rate: float | None) -> None:
        """A reader's link rate (see ``CompressionPolicy.link``); any thread."""
        self.policy.link(key, rate, self._clock())

    def stats(self) -> dict[str, Any]:
        return self.policy.stats(self._clock())
