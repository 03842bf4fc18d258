"""A job's "where the time goes" status, read tolerantly (for metrics and plots).

A job entry of ``get_status`` may carry ``ops`` (its pipeline ops, summed over
its workers), ``phases``, ``bottleneck``, ``consumers`` and ``workers``. Older
workers leave some out, so each reader here skips what is absent or malformed
(a value of the wrong type, a negative or non-finite number) instead of failing:
an entry without its name is dropped, a bad value reads as ``None``.

>>> job = {"ops": [{"op": "map(load)", "index": 1, "own_s": 2.5, "busy": "x"},
...                {"index": 2}],
...        "consumers": [{"client_id": 7, "consumer_index": 0, "waited": 0.4}]}
>>> [(op.label, op.own_s, op.busy) for op in ops(job)]
[('map(load)', 2.5, None)]
>>> [(c.label, c.waited, c.straggler) for c in consumers(job)]
[('0', 0.4, False)]
>>> bottleneck({}) is None, phases({"phases": {"ops": 0.9, "encode": -1}})
(True, {'ops': 0.9})
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_LABEL_CHARS = 64
"""Op labels (user function names) are cut to this many characters."""
KINDS = ("input-bound", "network-bound", "trainer-bound", "balanced", "unknown")
"""The bottleneck verdicts; any other kind reads as ``"unknown"``."""


@dataclass(frozen=True)
class OpView:
    """One op of a job's pipeline; ``label`` is unique within the job."""

    label: str
    index: int | None
    own_s: float | None
    share: float | None
    waited_s: float | None
    elements: float | None
    elements_per_s: float | None
    bytes: float | None
    threads: float | None
    busy: float | None


@dataclass(frozen=True)
class ConsumerView:
    """One consumer (rank) of a job; ``label``: its rank, else ``client-<id>``."""

    label: str
    client_id: int | None
    consumer_index: int | None
    waited: float | None
    elements: float | None
    elements_per_s: float | None
    lag: float | None
    straggler: bool


@dataclass(frozen=True)
class WorkerView:
    """One worker of a job."""

    worker_id: int | None
    address: str
    elements_per_s: float | None
    straggler: bool


@dataclass(frozen=True)
class Verdict:
    """A job's bottleneck: ``kind`` (one of ``KINDS``), its ``line`` and ``op``."""

    kind: str
    line: str
    op: str | None


def number(value: Any) -> float | None:
    """``value`` if it is a finite, non-negative int or float (not a bool), else None.

    >>> number(3), number(-1), number(True), number(float("nan")), number("2")
    (3, None, None, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and number(value) is not None else None


def _entries(job: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    found = job.get(key)
    if not isinstance(found, list):
        return []
    return [entry for entry in found if isinstance(entry, Mapping)]


def job_name(job: Mapping[str, Any]) -> str:
    """The job's name, or ``#<job_id>`` for an unnamed job.

    >>> job_name({"job_name": "train", "job_id": 3}), job_name({"job_id": 4})
    ('train', '#4')
    """
    name = job.get("job_name")
    return name if isinstance(name, str) else f"#{job.get('job_id', '?')}"


def ops(job: Mapping[str, Any]) -> list[OpView]:
    """The job's ops, in pipeline order; an op name used twice gets ``#<index>``."""
    named = [
        (entry, entry["op"][:MAX_LABEL_CHARS])
        for entry in _entries(job, "ops")
        if isinstance(entry.get("op"), str) and entry["op"]
    ]
    named.sort(key=lambda pair: _whole(pair[0].get("index")) or 0)
    uses = Counter(name for _, name in named)
    views = []
    for position, (entry, name) in enumerate(named):
        index = _whole(entry.get("index"))
        if uses[name] > 1:
            name = f"{name}#{position if index is None else index}"
        views.append(
            OpView(
                label=name,
                index=index,
                own_s=number(entry.get("own_s")),
                share=number(entry.get("share")),
                waited_s=number(entry.get("waited_s")),
                elements=number(entry.get("elements")),
                elements_per_s=number(entry.get("elements_per_s")),
                bytes=number(entry.get("bytes")),
                threads=number(entry.get("threads")),
                busy=number(entry.get("busy")),
            )
        )
    return views


def consumers(job: Mapping[str, Any]) -> list[ConsumerView]:
    """The job's consumers, ranks first (in rank order), then by client id."""
    views = []
    for entry in _entries(job, "consumers"):
        client_id = _whole(entry.get("client_id"))
        rank = _whole(entry.get("consumer_index"))
        if client_id is None and rank is None:
            continue
        views.append(
            ConsumerView(
                label=str(rank) if rank is not None else f"client-{client_id}",
                client_id=client_id,
                consumer_index=rank,
                waited=number(entry.get("waited")),
                elements=number(entry.get("elements")),
                elements_per_s=number(entry.get("elements_per_s")),
                lag=number(entry.get("lag")),
                straggler=entry.get("straggler") is True,
            )
        )
    views.sort(
        key=lambda c: (
            c.consumer_index is None,
            -1 if c.consumer_index is None else c.consumer_index,
            -1 if c.client_id is None else c.client_id,
        )
    )
    return views


def workers(job: Mapping[str, Any]) -> list[WorkerView]:
    """The job's workers, as listed."""
    return [
        WorkerView(
            worker_id=_whole(entry.get("worker_id")),
            address=str(entry.get("address", "?")),
            elements_per_s=number(entry.get("elements_per_s")),
            straggler=entry.get("straggler") is True,
        )
        for entry in _entries(job, "workers")
    ]


def phases(job: Mapping[str, Any]) -> dict[str, float]:
    """The producer threads' phases (``ops``, ``encode``, ...) and their shares."""
    found = job.get("phases")
    if not isinstance(found, Mapping):
        return {}
    shares = {key: number(value) for key, value in found.items()}
    return {
        str(key)[:MAX_LABEL_CHARS]: share
        for key, share in shares.items()
        if share is not None
    }


def bottleneck(job: Mapping[str, Any]) -> Verdict | None:
    """The job's verdict (None without one); an unknown kind reads ``"unknown"``."""
    found = job.get("bottleneck")
    if not isinstance(found, Mapping):
        return None
    kind = found.get("kind")
    line = found.get("line")
    op = found.get("op")
    return Verdict(
        kind=kind if kind in KINDS else "unknown",
        line=line if isinstance(line, str) else "",
        op=op if isinstance(op, str) else None,
    )
