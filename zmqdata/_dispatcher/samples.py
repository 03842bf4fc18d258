"""Workers' reported stats and served-elements rates: metrics, never events.

Like heartbeat times, samples are not journaled: a restarted dispatcher starts
without them and fills them in at the next heartbeats.

>>> first = sample(None, {"elements": 100}, now=1.0)
>>> sample(first, {"elements": 300}, now=1.5).elements_per_s
400.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class WorkerSample:
    """A worker's last reported stats (liveness data, never an event).

    ``elements_per_s`` is the served-elements rate between its last two reports.
    """

    stats: dict[str, Any]
    time: float
    elements: int | None
    elements_per_s: float = 0.0


def _count(stats: dict[str, Any], name: str) -> int | None:
    value = stats.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sample(
    previous: WorkerSample | None, stats: dict[str, Any], now: float
) -> WorkerSample:
    """The sample of a heartbeat's ``stats``, its rate measured from ``previous``.

    A report without an element count keeps the previous rate.
    """
    elements = _count(stats, "elements")
    new = WorkerSample(stats, now, elements)
    if previous is None:
        return new
    new.elements_per_s = previous.elements_per_s
    if elements is not None and previous.elements is not None and now > previous.time:
        gained = max(0, elements - previous.elements)
        new.elements_per_s = gained / (now - previous.time)
    return new
