"""What each consumer reported of its reads over the last minute (liveness data).

Consumers' heartbeats carry the fraction of the time since the last one that
the trainer waited with nothing buffered (``starved``) and how many elements
it has taken (``consumed``). A ``Reads`` keeps them for ``WINDOW_S`` seconds:
the wait fraction over the window, the rate, the rank. Like heartbeat times,
never journaled.

>>> reads = Reads()
>>> reads.observe(0.0, consumed=0, starved=0.0, consumer_index=1)
>>> reads.observe(1.0, consumed=100, starved=0.5, consumer_index=1)
>>> reads.observe(2.0, consumed=300, starved=0.1, consumer_index=1)
>>> reads.waited, reads.elements_per_s, reads.consumed, reads.consumer_index
(0.3, 150.0, 300, 1)
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Final

WINDOW_S: Final = 60.0
MAX_SAMPLES: Final = 600
"""Heartbeats kept per consumer at most (a fast heartbeat still covers seconds)."""


class Reads:
    """One consumer's heartbeats over the last ``WINDOW_S``."""

    __slots__ = ("_samples", "consumer_index")

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int, float]] = deque(maxlen=MAX_SAMPLES)
        self.consumer_index: int | None = None

    def observe(
        self, now: float, consumed: int, starved: float, consumer_index: int | None
    ) -> None:
        """Takes one heartbeat's figures, received at ``now``."""
        samples = self._samples
        if samples and consumed < samples[-1][1]:
            samples.clear()  # a counter that went back: another iterator
        samples.append((now, consumed, starved))
        while samples[0][0] < now - WINDOW_S:
            samples.popleft()
        self.consumer_index = consumer_index

    @property
    def consumed(self) -> int:
        """Elements the trainer has taken, as last reported."""
        return self._samples[-1][1] if self._samples else 0

    @property
    def last_starved(self) -> float:
        """The wait fraction of the last report alone (0 before any)."""
        return self._samples[-1][2] if self._samples else 0.0

    @property
    def waited(self) -> float | None:
        """The fraction of the window the trainer waited (None before two reports).

        Each report's fraction counts for the time since the report before it.
        """
        samples = list(self._samples)
        spans = [(b[0] - a[0], b[2]) for a, b in itertools.pairwise(samples)]
        total = sum(span for span, _ in spans)
        if total <= 0:
            return None
        return round(sum(span * waited for span, waited in spans) / total, 4)

    @property
    def elements_per_s(self) -> float:
        """Elements taken per second over the window (0 before two reports)."""
        if len(self._samples) < 2:
            return 0.0
        (t0, c0, _), (t1, c1, _) = self._samples[0], self._samples[-1]
        return round((c1 - c0) / (t1 - t0), 2) if t1 > t0 else 0.0
