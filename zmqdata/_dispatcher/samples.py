"""Workers' reported stats and served rates: metrics, never events.

Like heartbeat times, samples are not journaled: a restarted dispatcher starts
without them and fills them in at the next heartbeats.

>>> first = sample(None, {"elements": 100, "bytes": 10}, now=1.0)
>>> second = sample(first, {"elements": 300, "bytes": 50}, now=1.5)
>>> second.elements_per_s, second.bytes_per_s, second.interval_s
(400.0, 80.0, 0.5)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zmqdata._wire import deltas
from zmqdata._wire import messages as m
from zmqdata.errors import InvalidArgumentError


@dataclass
class Rate:
    """A counter's last value and its rate between the last two reports."""

    count: int | None = None
    per_s: float = 0.0

    def next(self, count: int | None, elapsed: float) -> Rate:
        """This rate after a report of ``count`` ``elapsed`` seconds later.

        A report without the counter keeps the rate; a counter that went back
        (a restarted worker) counts as no progress.
        """
        if count is None:
            return Rate(self.count, self.per_s)
        if self.count is None or elapsed <= 0:
            return Rate(count, self.per_s)
        return Rate(count, max(0, count - self.count) / elapsed)


@dataclass
class WorkerSample:
    """A worker's last reported stats (liveness data, never an event).

    The rates are measured between its last two reports; ``interval_s`` is the
    time between them (``None`` after one report).
    """

    stats: dict[str, Any]
    time: float
    elements: Rate = field(default_factory=Rate)
    bytes: Rate = field(default_factory=Rate)
    tasks: dict[int, Rate] = field(default_factory=dict)
    """Elements served per task id, from ``stats["tasks"]``."""
    interval_s: float | None = None
    request_id: int = 0
    """The heartbeat the stats came with: the next may be a delta against it."""
    values: int | None = None
    """``deltas.count(stats)`` once a delta needed it."""

    @property
    def elements_per_s(self) -> float:
        return self.elements.per_s

    @property
    def bytes_per_s(self) -> float:
        return self.bytes.per_s


def buffer_fill(stats: dict[str, Any]) -> float | None:
    """The worker's mean task buffer fill, if its stats say one (supply).

    >>> buffer_fill({"buffer_fill": 0.25}), buffer_fill({}), buffer_fill({"buffer_fill": True})
    (0.25, None, None)
    """
    value = stats.get("buffer_fill")
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return value if ok else None


def _count(stats: dict[str, Any], name: str) -> int | None:
    value = stats.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _task_counts(stats: dict[str, Any]) -> dict[int, int]:
    """Elements served per task id; odd entries are left out."""
    tasks = stats.get("tasks")
    if not isinstance(tasks, list):
        return {}
    counts: dict[int, int] = {}
    for task in tasks:
        if isinstance(task, dict):
            task_id, elements = _count(task, "task_id"), _count(task, "elements")
            if task_id is not None and elements is not None:
                counts[task_id] = elements
    return counts


LAST_ERROR_CHARS = 500
"""How much of a task's last ignored error the dispatcher keeps."""


def ignored_errors(stats: dict[str, Any]) -> dict[int, tuple[int, int, str]]:
    """``(iteration id, count, last message)`` of the errors each task skipped.

    What each task's ``ignore_errors`` let pass; tasks that skipped none, and
    odd entries, are left out.

    >>> ignored_errors({"tasks": [{"task_id": 3, "iteration_id": 1,
    ...     "errors_ignored": 2, "last_error_ignored": "bad"},
    ...     {"task_id": 4, "iteration_id": 1, "errors_ignored": 0}, 7]})
    {3: (1, 2, 'bad')}
    """
    tasks = stats.get("tasks")
    ignored: dict[int, tuple[int, int, str]] = {}
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        task_id, count = _count(task, "task_id"), _count(task, "errors_ignored")
        iteration_id, last = (
            _count(task, "iteration_id"),
            task.get("last_error_ignored"),
        )
        if task_id is not None and iteration_id is not None and count:
            text = last[:LAST_ERROR_CHARS] if isinstance(last, str) else ""
            ignored[task_id] = (iteration_id, count, text)
    return ignored


def stats_of(
    previous: WorkerSample | None, heartbeat: m.WorkerHeartbeat
) -> tuple[dict[str, Any], int | None] | None:
    """A heartbeat's complete stats (and their size, if known).

    As sent, or its delta applied to the stats of the heartbeat it names;
    None if that is not the heartbeat kept: everything must come again.

    Raises:
        InvalidArgumentError: A malformed delta, or stats grown past
            ``deltas.MAX_VALUES`` values.
    """
    if heartbeat.base == 0:
        return heartbeat.stats, None
    if previous is None or previous.request_id != heartbeat.base:
        return None
    stats, grown = deltas.merge(previous.stats, heartbeat.stats)
    values = grown + (
        deltas.count(previous.stats) if previous.values is None else previous.values
    )
    if values > deltas.MAX_VALUES:
        raise InvalidArgumentError(
            f"worker_heartbeat.stats: {values} values after the delta, over "
            f"{deltas.MAX_VALUES}"
        )
    return stats, values


def sample(
    previous: WorkerSample | None,
    stats: dict[str, Any],
    now: float,
    request_id: int = 0,
    values: int | None = None,
) -> WorkerSample:
    """The sample of a heartbeat's ``stats``, its rates measured from ``previous``."""
    if previous is None:
        previous = WorkerSample({}, now)
        elapsed = 0.0
        interval = None
    else:
        elapsed = now - previous.time
        interval = elapsed if elapsed > 0 else previous.interval_s
    return WorkerSample(
        stats,
        now,
        previous.elements.next(_count(stats, "elements"), elapsed),
        previous.bytes.next(_count(stats, "bytes"), elapsed),
        {
            task_id: previous.tasks.get(task_id, Rate()).next(count, elapsed)
            for task_id, count in _task_counts(stats).items()
        },
        interval,
        request_id,
        values,
    )
