"""``SplitBatch``: how many splits a DYNAMIC task asks the dispatcher for at once.

A split may be cheap (one small file) or expensive (256 elements of a heavy
map). Asking for one at a time costs a dispatcher round trip per split, which
for cheap splits is as long as the work itself; asking for many at a time
leaves other workers idle at the end of an epoch. So the batch is sized from
what is measured: enough splits that a round trip costs at most
``1 / ROUND_TRIPS_PER_BATCH`` of the time they take to process, growing at most
twofold per request, never above ``MAX_BATCH``. A busy dispatcher also names
a period (``GetSplitReply.period_ms``: a large fleet asks less often): enough
splits to last it. Pure logic (times are given).

>>> batch = SplitBatch()
>>> batch.size(now=0.0)          # nothing measured yet: one split
1
>>> batch.fetched(1, now=0.001)  # a 1 ms round trip
>>> batch.size(now=0.0015)       # that split took 0.5 ms: ask for more
2
"""

from __future__ import annotations

import math

ROUND_TRIPS_PER_BATCH = 20
MAX_BATCH = 64


def splits_lasting(seconds: float, per_split_s: float) -> int:
    """How many splits of ``per_split_s`` each last ``seconds``.

    At least 1, at most ``MAX_BATCH``; a hair less, so that float noise on an
    exact ratio does not round up.

    >>> splits_lasting(2.5, 1.0), splits_lasting(3.0, 1.0), splits_lasting(0.0, 1.0)
    (3, 3, 1)
    """
    return max(1, min(MAX_BATCH, math.ceil(seconds / per_split_s - 1e-6)))


class SplitBatch:
    """Sizes a task's split requests from their round trip and processing times."""

    def __init__(self) -> None:
        self._size = 1
        self._asked_at: float | None = None
        self._fetched_at: float | None = None
        self._count = 0
        self._rtt_s = 0.0
        self._period_s = 0.0

    def size(self, now: float, left: int = 0) -> int:
        """How many splits to ask for now.

        All but ``left`` of the previous ones are taken (``left`` > 0: a
        request sent ahead, before they run out).

        >>> batch = SplitBatch()
        >>> batch.size(now=0.0), batch.fetched(4, now=0.001)
        (1, None)
        >>> batch.size(now=0.002, left=2)  # 2 taken in 1 ms: 0.5 ms each
        2
        """
        if self._fetched_at is not None and self._count > left:
            taken = self._count - left
            per_split = max(now - self._fetched_at, 1e-6) / taken
            lasting = max(ROUND_TRIPS_PER_BATCH * self._rtt_s, self._period_s)
            self._size = min(splits_lasting(lasting, per_split), 2 * self._size)
        self._asked_at = now
        return self._size

    def fetched(self, count: int, now: float, period_s: float = 0.0) -> None:
        """``count`` splits arrived at ``now`` for the last request.

        Its answer named the dispatcher's ``period_s`` (0: none).

        >>> batch = SplitBatch()
        >>> batch.size(now=0.0), batch.fetched(1, now=0.001, period_s=2.5)
        (1, None)
        >>> batch.size(now=1.0), batch.fetched(2, now=1.001, period_s=2.5)
        (2, None)
        >>> batch.size(now=3.0)  # 1 s a split: enough for 2.5 s (doubling at most)
        3
        """
        if self._asked_at is not None:
            self._rtt_s = now - self._asked_at
        self._fetched_at, self._count = now, count
        self._period_s = period_s
