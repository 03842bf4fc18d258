"""The tables ``zmqdata status`` prints: a status dict in human units (pure).

>>> print(human_bytes(7.5 * 2**20), human_count(12_345), human_duration(192))
7.5 MiB 12.3k 3m12s
"""

from __future__ import annotations

from typing import Any

from zmqdata._runtime.text import table

LATE_INTERVALS = 2.0
"""A worker is ``LATE`` once its heartbeat is older than this many intervals."""

DEFAULT_HEARTBEAT_S = 1.0
"""The interval assumed before two heartbeats measured it (the workers' default)."""


def human_bytes(n: float) -> str:
    """``n`` bytes in B, KiB, MiB, GiB or TiB.

    >>> human_bytes(512), human_bytes(1536), human_bytes(300 * 2**20)
    ('512 B', '1.5 KiB', '300 MiB')
    """
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.0f} {unit}" if n >= 100 else f"{n:.1f} {unit}"


def human_count(n: float) -> str:
    """A count or a rate with k / M / G for thousands, millions, billions.

    >>> human_count(7), human_count(2.54), human_count(950.4), human_count(1.5e6)
    ('7', '2.5', '950', '1.5M')
    """
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            scaled = n / size
            return f"{scaled:.0f}{unit}" if scaled >= 100 else f"{scaled:.1f}{unit}"
    if n == int(n) or n >= 10:
        return f"{n:.0f}"
    return f"{n:.1f}"


def human_duration(seconds: float) -> str:
    """A duration in s, m, h or d, two units at most.

    >>> human_duration(0.42), human_duration(65), human_duration(7500)
    ('0.4s', '1m05s', '2h05m')
    """
    if seconds < 9.95:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole // 60 % 60:02d}m"
    return f"{whole // 86400}d{whole // 3600 % 24:02d}h"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def heartbeat(worker: dict[str, Any]) -> str:
    """The worker's heartbeat age, ``LATE`` once over ``LATE_INTERVALS`` intervals."""
    age = worker.get("heartbeat_age_s")
    if age is None:
        return "-"
    interval = worker.get("heartbeat_interval_s") or DEFAULT_HEARTBEAT_S
    late = age > LATE_INTERVALS * interval
    return f"{human_duration(age)}{' LATE' if late else ''}"


def buffer_fill(buffer: dict[str, int] | None) -> str:
    """``12% (120/1024 el, 7.5 MiB)``: the fuller of elements and bytes.

    Without a capacity (no task, or an older worker): ``120 el, 7.5 MiB``.
    """
    if not buffer:
        return "-"
    held = f"{buffer['elements']} el, {human_bytes(buffer['bytes'])}"
    if not buffer.get("capacity_elements"):
        return held if buffer["elements"] else "-"
    fill = max(
        buffer["elements"] / buffer["capacity_elements"],
        buffer["bytes"] / max(1, buffer["capacity_bytes"]),
    )
    return (
        f"{fill:.0%} ({buffer['elements']}/{buffer['capacity_elements']} el, "
        f"{human_bytes(buffer['bytes'])})"
    )


def _workers(workers: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(w.get("worker_id", "?")),
            str(w.get("address", "?")),
            ",".join(w.get("tags") or []) or "-",
            str(w.get("num_tasks", 0)),
            human_count(w.get("elements_per_s", 0.0)),
            f"{human_bytes(w.get('bytes_per_s', 0.0))}/s",
            buffer_fill(w.get("buffer")),
            heartbeat(w),
        ]
        for w in workers
    ]
    header = ["ID", "ADDRESS", "TAGS", ">TASKS", ">ELEM/S", ">DATA/S", "BUFFER"]
    return table("WORKERS", [*header, "HEARTBEAT"], rows)


def progress(job: dict[str, Any]) -> tuple[str, str]:
    """``(progress, ETA)`` of a job: DYNAMIC jobs from their split progress."""
    if job.get("finished"):
        return "done", "-"
    splits = job.get("splits")
    if not splits or not splits.get("total"):
        return "-", "-"
    done, total = splits["handed_out"], splits["total"]
    eta = job.get("eta_s")
    shown = f"{done / total:.0%} ({done}/{total} splits)"
    return shown, "-" if eta is None else human_duration(eta)


def _jobs(jobs: list[dict[str, Any]]) -> str:
    """The jobs; a SNAPSHOT column where one reads a pipeline with a snapshot."""
    snapshots = any(isinstance(j.get("snapshot"), dict) for j in jobs)
    rows = []
    for j in jobs:
        consumers = j.get("num_consumers")
        shown, eta = progress(j)
        rows.append(
            [
                j.get("job_name") or f"#{j.get('job_id')}",
                str(j.get("processing_mode", "?")),
                "-" if consumers is None else str(consumers),
                str(j.get("num_clients", 0)),
                shown,
                eta,
                human_count(j.get("elements_per_s", 0.0)),
                str(j.get("errors_ignored") or "-"),
                *([snapshot(j)] if snapshots else []),
                bottleneck(j),
            ]
        )
    header = ["NAME", "MODE", ">CONSUMERS", ">READERS", "PROGRESS", ">ETA"]
    header += [">ELEM/S", ">SKIPPED", *(["SNAPSHOT"] if snapshots else []), "BOUND"]
    return table("JOBS", header, rows)


def snapshot(job: dict[str, Any]) -> str:
    """Whether the job writes or reads its pipeline's snapshot, and how far it is written.

    >>> snapshot({"snapshot": {"state": "writing", "written": 3, "total": 75}})
    'writing 3/75'
    >>> snapshot({"snapshot": {"state": "reading", "written": 75, "total": 75}})
    'reading'
    >>> snapshot({"snapshot": None})
    '-'
    """
    said = job.get("snapshot")
    if not isinstance(said, dict):
        return "-"
    state = str(said.get("state"))
    if state != "writing":
        return state
    return f"writing {said.get('written')}/{said.get('total')}"


def bottleneck(job: dict[str, Any]) -> str:
    """The verdict's kind and the op it names (``zmqdata status --job`` says why).

    >>> bottleneck({"bottleneck": {"kind": "input-bound", "op": "map(load)"}})
    'input-bound: map(load)'
    >>> bottleneck({"bottleneck": {"kind": "trainer-bound", "op": "map(load)"}})
    'trainer-bound'
    >>> bottleneck({})
    '-'
    """
    verdict = job.get("bottleneck")
    if not isinstance(verdict, dict) or not isinstance(verdict.get("kind"), str):
        return "-"
    kind, op = verdict["kind"], verdict.get("op")
    return f"{kind}: {op}" if kind == "input-bound" and isinstance(op, str) else kind


def _datasets(datasets: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(d.get("dataset_id")),
            str(d.get("fingerprint"))[:12],
            str(d.get("compression") or "-"),
            human_bytes(d.get("pipeline_bytes") or 0),
        ]
        for d in datasets
    ]
    return table("DATASETS", ["ID", "FINGERPRINT", "COMPRESSION", ">PIPELINE"], rows)


def _saves(saves: list[dict[str, Any]]) -> str:
    """The saves (``distributed_save``): progress, ETA, or why one failed.

    >>> print(_saves([{"save_id": "ab", "path": "/s", "dataset_id": "1",
    ...     "state": "running", "chunks": 3, "splits": 4, "elements": 30,
    ...     "bytes": 2048, "eta_s": 5.0, "error": ""}]))
    SAVES
    ID  PATH  DATASET  STATE    CHUNKS  ELEMENTS  BYTES    ETA
    ab  /s    1        running  3/4           30  2.0 KiB  5.0s
    """
    rows = [
        [
            str(s.get("save_id")),
            str(s.get("path")),
            str(s.get("dataset_id")),
            str(s.get("state")) + (f": {s['error']}" if s.get("error") else ""),
            f"{s.get('chunks')}/{s.get('splits')}",
            f"{s.get('elements', 0):,}",
            human_bytes(s.get("bytes") or 0),
            "-" if s.get("eta_s") is None else human_duration(s["eta_s"]),
        ]
        for s in saves
    ]
    header = ["ID", "PATH", "DATASET", "STATE", "CHUNKS", ">ELEMENTS", "BYTES", "ETA"]
    return table("SAVES", header, rows)


def summary(status: dict[str, Any], address: str) -> str:
    """The header line: where, which version, since when, how many of each."""
    workers, jobs = status.get("workers", []), status.get("jobs", [])
    parts = [f"dispatcher {address}", f"zmqdata {status.get('version', '?')}"]
    if status.get("uptime_s") is not None:
        parts.append(f"up {human_duration(status['uptime_s'])}")
    late = sum(heartbeat(w).endswith("LATE") for w in workers)
    parts.append(_plural(len(workers), "worker") + (f" ({late} late)" if late else ""))
    parts.append(_plural(len(status.get("datasets", [])), "dataset"))
    reading = sum(1 for j in jobs if j.get("num_clients"))
    parts.append(f"{_plural(len(jobs), 'job')} ({reading} reading)")
    return ", ".join(parts)


def protocols(protocol: dict[str, Any], workers: list[dict[str, Any]]) -> str:
    """The dispatcher's protocol version, those it accepts, and its peers'.

    Workers on an older version than the dispatcher's are named (by id).

    >>> print(protocols({"version": 6, "accepts": [5, 6], "workers": {"v5": 1,
    ...     "v6": 1}, "clients": {"v6": 1}}, [{"worker_id": 3, "protocol": 5}]))
    protocol v6 (accepts v5 to v6); workers: v5 1, v6 1; consumers: v6 1
    workers on an older protocol: 3
    """
    version = protocol.get("version")
    oldest, newest = protocol.get("accepts") or ["?", "?"]
    line = f"protocol v{version} (accepts v{oldest} to v{newest})"
    for key, name in (("workers", "workers"), ("clients", "consumers")):
        counts = protocol.get(key) or {}
        shown = ", ".join(f"{v} {n}" for v, n in counts.items())
        line += f"; {name}: {shown or 'none'}"
    older = [
        str(w.get("worker_id"))
        for w in workers
        if isinstance(w.get("protocol"), int) and w["protocol"] != version
    ]
    if older:
        line += f"\nworkers on an older protocol: {', '.join(older)}"
    return line


def render(status: dict[str, Any], address: str) -> str:
    """The human view of ``status`` (``service.get_status``): header and tables."""
    sections = [summary(status, address)]
    if status.get("worker_timeout_s"):
        sections[0] += (
            f"\nworkers are dropped after "
            f"{human_duration(status['worker_timeout_s'])} without a heartbeat"
        )
    autoscale = status.get("autoscale")
    if isinstance(autoscale, dict) and "recommended_workers" in autoscale:
        sections[0] += (
            f"\nrecommended workers: {autoscale['recommended_workers']}"
            f" ({autoscale.get('reason', '')})"
        )
    if isinstance(status.get("protocol"), dict):
        sections[0] += "\n" + protocols(status["protocol"], status.get("workers", []))
    sections.append(_workers(status.get("workers", [])))
    sections.append(_jobs(status.get("jobs", [])))
    sections.append(_datasets(status.get("datasets", [])))
    if status.get("saves"):
        sections.append(_saves(status["saves"]))
    return "\n\n".join(sections)
