"""Time: deadlines, exponential backoff and retries. The one place that sleeps.

Every retry in the library is one of two shapes: ``retry`` calls a function
until it stops raising a retryable error (binding an address a just-stopped
server still holds); ``attempts`` paces a request re-sent until answered (an
RPC, a split request), yielding how long to wait for each attempt's answer.
Both take a ``Backoff``; delays are jittered where many peers retry at once.

>>> d = Deadline(10.0, now=100.0)
>>> d.remaining(now=104.0), d.expired(now=111.0)
(6.0, True)
>>> b = Backoff(initial_s=0.01, maximum_s=1.0, jitter=0.0)
>>> [b.next_delay() for _ in range(4)]
[0.01, 0.02, 0.04, 0.08]
>>> calls = []
>>> def flaky() -> int:
...     calls.append(1)
...     if len(calls) < 3:
...         raise OSError("busy")
...     return len(calls)
>>> retry(flaky, lambda e: isinstance(e, OSError), 1.0, Backoff(0.0), wait=calls.append)
3
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

now = time.monotonic

MAX_DOUBLINGS = 1000
"""The most doublings a ``Backoff`` counts: ``2.0 ** 1000`` is a finite float,
so no delay overflows however long a retry goes on."""


class Deadline:
    """A point in time ``timeout_s`` after ``now`` (``None``: never)."""

    def __init__(self, timeout_s: float | None, now: float | None = None) -> None:
        start = time.monotonic() if now is None else now
        self.at = None if timeout_s is None else start + timeout_s

    def remaining(self, now: float | None = None) -> float | None:
        """Seconds left (never below 0), or None for no deadline."""
        if self.at is None:
            return None
        return max(0.0, self.at - (time.monotonic() if now is None else now))

    def expired(self, now: float | None = None) -> bool:
        """Whether the deadline has passed."""
        remaining = self.remaining(now)
        return remaining is not None and remaining <= 0.0


class Backoff:
    """Exponential backoff: delay k is ``cap = min(maximum, initial * 2**k)``, jittered.

    ``k`` stops at ``MAX_DOUBLINGS``: a retry may go on for ever, never overflowing.

    ``jitter`` is the share of the cap drawn at random: 1 (the default, full
    jitter) gives a delay uniform in ``[0, cap]``, 0.5 one in ``[cap / 2, cap]``,
    0 the cap itself. ``rng`` returns a float in [0, 1); ``minimum_s`` is a floor.
    """

    def __init__(
        self,
        initial_s: float = 0.01,
        maximum_s: float = 1.0,
        rng: Callable[[], float] = random.random,
        jitter: float = 1.0,
        minimum_s: float = 0.0,
    ) -> None:
        self._initial, self._maximum, self._rng = initial_s, maximum_s, rng
        self._jitter, self._minimum = jitter, minimum_s
        self._attempt = 0

    def next_delay(self) -> float:
        """The delay before the next attempt."""
        cap = min(self._maximum, self._initial * 2.0**self._attempt)
        self._attempt = min(self._attempt + 1, MAX_DOUBLINGS)
        share = 1.0 - self._jitter + self._jitter * self._rng()
        return max(self._minimum, float(cap * share))

    def reset(self) -> None:
        """Starts again from the smallest delay (after a success)."""
        self._attempt = 0


def retry(
    attempt: Callable[[], T],
    retryable: Callable[[Exception], bool],
    timeout_s: float,
    backoff: Backoff,
    wait: Callable[[float], Any] | None = None,
) -> T:
    """Calls ``attempt`` until it returns, waiting ``backoff`` after a retryable error.

    Raises:
        Exception: What ``attempt`` raised, when it is not ``retryable`` or
            ``timeout_s`` has passed.
    """
    deadline = Deadline(timeout_s)
    while True:
        try:
            return attempt()
        except Exception as error:
            if not retryable(error) or deadline.expired():
                raise
        (wait or sleep)(backoff.next_delay())


def attempts(deadline: Deadline, backoff: Backoff) -> Iterator[Deadline]:
    """Paces a request re-sent until answered: one wait per attempt, till ``deadline``.

    Each item is how long to wait for that attempt's answer (the next backoff
    delay, never past ``deadline``); the caller sends, waits, and on no answer
    goes on to the next item. None is left once ``deadline`` has passed.
    """
    while not deadline.expired():
        remaining = deadline.remaining()
        delay = backoff.next_delay()
        yield Deadline(delay if remaining is None else min(delay, remaining))


def sleep(seconds: float) -> None:
    """Sleeps; library code waits on sockets or events, this is for backoff only."""
    time.sleep(seconds)
