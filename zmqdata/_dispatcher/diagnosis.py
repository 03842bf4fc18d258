"""Where a job's time goes, and what holds it back: the bottleneck verdict (pure).

Three kinds of evidence meet here: the workers' per-op statistics of the
job's tasks (``_dataset/profile.py``: each op's own time, the producer's time
encoding, asking for splits, blocked on a full buffer), how full the tasks'
buffers are, and how much of the last minute each consumer's trainer waited
with nothing to read (``readers.py``). The verdict follows the autoscaler's
thresholds (``autoscale.Policy``), so both tell the same story:

* consumers wait, buffers are not full: **input-bound**, the op with the most
  worker time is named, with how many more workers would meet the demand;
* consumers wait while the buffers stay full (made faster than it arrives):
  **network-bound**;
* consumers (nearly) never wait: **trainer-bound**;
* in between: **balanced**; no consumer report yet: **unknown**.

Workers and consumers whose rate is under ``STRAGGLER`` of their peers' median
are marked as stragglers and named in the line: consumers by the rate they
read, workers by the rate they make elements while not blocked on a full buffer.

>>> task = TaskReport(1, "w1:5000", 40.0, {"elapsed_s": 10.0, "buffer_fill": 0.0,
...     "ops": [{"op": "range", "index": 0, "own_s": 1.0, "elements": 400},
...             {"op": "map(load)", "index": 1, "own_s": 8.0, "elements": 400}],
...     "phases": {"encode": 1.0}})
>>> reads = [ConsumerReport(7, 0, waited=0.5, consumed=400, elements_per_s=40.0)]
>>> verdict = diagnose([task], reads, Policy())["bottleneck"]
>>> verdict["kind"], verdict["op"]
('input-bound', 'map(load)')
>>> verdict["line"]
'input-bound: map(load) uses 80% of worker time; the trainers waited 50% of the last minute; 1 more worker would lift the rate by ~2.0x'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from zmqdata._dispatcher.autoscale import Policy, kind_of

STRAGGLER: Final = 0.7
"""A worker or consumer slower than this fraction of the median is a straggler."""
MIN_JUDGED_S: Final = 1.0
"""A worker's producer must have run this long before it can be called slow."""
MIN_STRAGGLER_RATE: Final = 1.0
"""Rates below this (elements/s) at the median say nothing about stragglers."""


@dataclass(frozen=True, slots=True)
class TaskReport:
    """One task of the job: its worker, served rate and reported stats."""

    worker_id: int
    address: str
    elements_per_s: float
    stats: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ConsumerReport:
    """One consumer of the job, as ``readers.Reads`` saw it."""

    client_id: int
    consumer_index: int | None
    waited: float | None
    consumed: int
    elements_per_s: float


def _number(value: Any) -> float:
    """A finite non-negative number from a report (anything else: 0)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) and value >= 0 else 0.0


def _ops(tasks: Sequence[TaskReport]) -> tuple[list[dict[str, Any]], float]:
    """The job's ops summed over its tasks, source first; and the total time."""
    ops: dict[tuple[int, str], dict[str, Any]] = {}
    total = 0.0
    for task in tasks:
        elapsed = _number(task.stats.get("elapsed_s"))
        total += elapsed
        for op in _reported_ops(task.stats):
            key = _op_key(op)
            entry = ops.setdefault(key, _new_op(key))
            _add_op(entry, op, elapsed)
            total += _number(op.get("thread_s"))  # other threads' time
    for entry in ops.values():
        _finish_op(entry, total)
    return sorted(ops.values(), key=lambda op: op["index"]), total


def _reported_ops(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The well-formed op entries of a task's stats (each names its op)."""
    reported = stats.get("ops")
    if not isinstance(reported, list):
        return []
    return [
        op for op in reported if isinstance(op, dict) and isinstance(op.get("op"), str)
    ]


def _op_key(op: dict[str, Any]) -> tuple[int, str]:
    """Which op of the job an entry counts for: its index (-1: none) and name."""
    index = op.get("index")
    return index if isinstance(index, int) else -1, op["op"][:100]


def _new_op(key: tuple[int, str]) -> dict[str, Any]:
    """An op's entry before any task's figures are added."""
    return {
        "op": key[1],
        "index": key[0],
        "own_s": 0.0,
        "waited_s": 0.0,
        "elements": 0,
        "elements_per_s": 0.0,
        "bytes": 0,
        "threads": None,
        "busy": None,
        "_busy_s": 0.0,
        "_capacity_s": 0.0,
    }


def _add_op(entry: dict[str, Any], op: dict[str, Any], elapsed: float) -> None:
    """Adds one task's figures for an op (the task ran ``elapsed`` seconds)."""
    entry["own_s"] += _number(op.get("own_s"))
    entry["waited_s"] += _number(op.get("waited_s"))
    entry["elements"] += int(_number(op.get("elements")))
    entry["bytes"] += int(_number(op.get("bytes")))
    if elapsed > 0:
        entry["elements_per_s"] += _number(op.get("elements")) / elapsed
    threads = op.get("threads")
    if isinstance(threads, int) and threads > 0 and elapsed > 0:
        entry["threads"] = threads
        entry["_busy_s"] += _number(op.get("busy")) * threads * elapsed
        entry["_capacity_s"] += threads * elapsed


def _finish_op(entry: dict[str, Any], total: float) -> None:
    """An op's sums as shown: busy and share as fractions, figures rounded."""
    busy, capacity = entry.pop("_busy_s"), entry.pop("_capacity_s")
    if capacity:
        entry["busy"] = round(busy / capacity, 3)
    entry["share"] = round(entry["own_s"] / total, 3) if total else None
    entry["own_s"] = round(entry["own_s"], 3)
    entry["waited_s"] = round(entry["waited_s"], 3)
    entry["elements_per_s"] = round(entry["elements_per_s"], 2)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _phases(
    tasks: Sequence[TaskReport], ops: list[dict[str, Any]], total: float
) -> dict[str, float]:
    """Shares of the job's worker time: in ops, encoding, splits, blocked, other."""
    seconds: dict[str, float] = {}
    for task in tasks:
        for name, value in _dict(task.stats.get("phases")).items():
            if isinstance(name, str) and len(seconds) < 16:
                seconds[name[:32]] = seconds.get(name[:32], 0.0) + _number(value)
    in_ops = sum(op["own_s"] + op["waited_s"] for op in ops)
    if not total:
        return {}
    return {
        "ops": round(in_ops / total, 3),
        **{name: round(s / total, 3) for name, s in sorted(seconds.items())},
    }


def _stragglers(rates: list[float]) -> list[bool]:
    """Which rates are under ``STRAGGLER`` of the median (two or more only)."""
    if len(rates) < 2:
        return [False] * len(rates)
    median = statistics.median(rates)
    if median < MIN_STRAGGLER_RATE:
        return [False] * len(rates)
    return [rate < STRAGGLER * median for rate in rates]


def _making_rate(task: TaskReport) -> float | None:
    """Elements per second the task makes while not blocked on a full buffer.

    What a worker can do, whatever its consumers take; None until its
    producer has run ``MIN_JUDGED_S`` (a task that just started is not slow).
    """
    stats = task.stats
    ops = stats.get("ops")
    last = ops[-1] if isinstance(ops, list) and ops else None
    blocked = _number(_dict(stats.get("phases")).get("blocked"))
    working = _number(stats.get("elapsed_s")) - blocked
    if not isinstance(last, dict) or working < MIN_JUDGED_S:
        return None
    return _number(last.get("elements")) / working


def _workers(tasks: Sequence[TaskReport]) -> list[dict[str, Any]]:
    """Each worker's served rate; stragglers by the rate they make elements at."""
    served: dict[int, tuple[str, float]] = {}
    making: dict[int, float | None] = {}
    for task in tasks:
        address, rate = served.get(task.worker_id, (task.address, 0.0))
        served[task.worker_id] = (address, rate + task.elements_per_s)
        made = _making_rate(task)
        known = making.get(task.worker_id, 0.0)
        making[task.worker_id] = None if made is None or known is None else known + made
    judged = [w for w, rate in making.items() if rate is not None]
    slow = dict(
        zip(judged, _stragglers([making[w] or 0.0 for w in judged]), strict=True)
    )
    return [
        {
            "worker_id": worker_id,
            "address": address,
            "elements_per_s": round(rate, 2),
            "straggler": slow.get(worker_id, False),
        }
        for worker_id, (address, rate) in served.items()
    ]


def _consumers(reads: Sequence[ConsumerReport]) -> list[dict[str, Any]]:
    ahead = max((r.consumed for r in reads), default=0)
    marks = _stragglers([r.elements_per_s for r in reads])
    return [
        {
            "client_id": r.client_id,
            "consumer_index": r.consumer_index,
            "waited": r.waited,
            "elements": r.consumed,
            "elements_per_s": r.elements_per_s,
            "lag": ahead - r.consumed,
            "straggler": straggler,
        }
        for r, straggler in zip(reads, marks, strict=True)
    ]


def _fill(tasks: Sequence[TaskReport]) -> float | None:
    fills = [
        _number(t.stats.get("buffer_fill"))
        for t in tasks
        if not t.stats.get("finished") and "buffer_fill" in t.stats
    ]
    return min(1.0, sum(fills) / len(fills)) if fills else None


def _more_workers(workers: int, waited: float) -> str:
    """How many more workers would meet the demand that made trainers wait.

    A trainer that waited a fraction ``w`` of the time would read ``1/(1-w)``
    times as fast if it never waited; workers with cores of their own add
    their rate each.
    """
    workers = max(1, workers)
    demand = 1 / max(0.05, 1 - waited)
    more = max(1, math.ceil(workers * demand - 1e-9) - workers)
    lift = min(demand, (workers + more) / workers)
    return f"{more} more worker{'s' * (more > 1)} would lift the rate by ~{lift:.1f}x"


def _verdict(
    ops: list[dict[str, Any]],
    phases: dict[str, float],
    workers: list[dict[str, Any]],
    consumers: list[dict[str, Any]],
    fill: float | None,
    policy: Policy,
) -> dict[str, Any]:
    """The bottleneck: its kind and line, the op named, stragglers, evidence."""
    waits = [c["waited"] for c in consumers if c["waited"] is not None]
    waited = sum(waits) / len(waits) if waits else None
    top = max(ops, key=lambda op: op["own_s"], default=None)
    blocked = phases.get("blocked", 0.0)
    evidence = {"waited": waited, "buffer_fill": fill, "blocked": blocked}
    if top is not None and top["share"] is not None:
        evidence["op_share"] = top["share"]
    kind = kind_of(waited, fill, policy, blocked)
    line = _line(kind, waited, fill, blocked, _where(top), len(workers))
    slow = _slow(workers, consumers)
    if slow:
        line += f"; straggler{'s' * (len(slow) > 1)}: {', '.join(slow)}"
    return {
        "kind": kind,
        "line": line,
        "op": None if top is None or not top["own_s"] else top["op"],
        "stragglers": slow,
        "evidence": evidence,
    }


def _where(top: dict[str, Any] | None) -> str:
    """Which op takes most of the workers' time, and how busy its threads are."""
    if top is None or not top["share"]:
        return ""
    threads = (
        f" ({top['threads']} threads, {top['busy']:.0%} busy)"
        if top["threads"] and top["busy"] is not None
        else ""
    )
    return f"{top['op']} uses {top['share']:.0%} of worker time{threads}"


def _line(
    kind: str,
    waited: float | None,
    fill: float | None,
    blocked: float,
    where: str,
    workers: int,
) -> str:
    """The verdict in words (``where``: the busiest op, see ``_where``)."""
    if waited is None:
        return "unknown: no consumer has reported its waits yet"
    if kind == "network-bound":
        return (
            f"network-bound: the trainers waited {waited:.0%} of the last minute "
            f"while the workers' buffers stayed {fill or 0:.0%} full and their "
            f"producers were blocked {blocked:.0%} of the time: elements are made "
            "faster than they arrive"
        )
    if kind == "input-bound":
        return "; ".join(
            (
                f"input-bound: {where}" if where else "input-bound",
                f"the trainers waited {waited:.0%} of the last minute",
                _more_workers(workers, waited),
            )
        )
    if kind == "trainer-bound":
        return f"trainer-bound: consumers waited {waited:.0%} of the last minute" + (
            "" if fill is None else f"; the workers' buffers are {fill:.0%} full"
        )
    return f"balanced: the trainers waited {waited:.0%} of the last minute" + (
        f"; {where}" if where else ""
    )


def _slow(workers: list[dict[str, Any]], consumers: list[dict[str, Any]]) -> list[str]:
    """The stragglers by name: workers by address, consumers by rank or client."""
    slow = [f"worker {w['address']}" for w in workers if w["straggler"]]
    return slow + [
        f"rank {c['consumer_index']}"
        if c["consumer_index"] is not None
        else f"client {c['client_id']}"
        for c in consumers
        if c["straggler"]
    ]


def diagnose(
    tasks: Sequence[TaskReport], reads: Sequence[ConsumerReport], policy: Policy
) -> dict[str, Any]:
    """A job's ops, phases, workers, consumers and bottleneck (``get_status``)."""
    ops, total = _ops(tasks)
    phases = _phases(tasks, ops, total)
    workers = _workers(tasks)
    consumers = _consumers(reads)
    fill = _fill(tasks)
    return {
        "ops": ops,
        "phases": phases,
        "workers": workers,
        "consumers": consumers,
        "bottleneck": _verdict(ops, phases, workers, consumers, fill, policy),
    }
