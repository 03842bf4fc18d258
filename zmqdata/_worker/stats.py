"""A worker's serving counters and per-task stats: its heartbeats' and its metrics'."""

from __future__ import annotations

from typing import Any

from zmqdata._runtime import metrics
from zmqdata._worker.data import DataLoop, Runners
from zmqdata._worker.task import TaskRunner


def worker_stats(
    data: DataLoop, runners: Runners, snapshot: list[TaskRunner] | None = None
) -> dict[str, Any]:
    """The worker's serving counters, buffer fill and per-task stats (heartbeats)."""
    if snapshot is None:
        snapshot = runners.snapshot()
    tasks = [runner.stats_dict() for runner in snapshot]
    running = sum(not task["finished"] for task in tasks)
    fills = [task["buffer_fill"] for task in tasks if not task["finished"]]
    return {
        **({"buffer_fill": sum(fills) / len(fills)} if fills else {}),
        **data.stats.as_dict(),
        "buffered_elements": sum(task["buffered_elements"] for task in tasks),
        "buffered_bytes": sum(task["buffered_bytes"] for task in tasks),
        "tasks_running": running,
        "tasks_finished": runners.removed_finished + len(tasks) - running,
        "tasks": tasks,
    }


def collect_metrics(data: DataLoop, runners: Runners) -> list[Any]:
    """The worker's Prometheus metrics, read from its counters at scrape time."""
    stats = worker_stats(data, runners)
    return [
        metrics.counter(
            "zmqdata_worker_elements", "Elements sent to consumers.", stats["elements"]
        ),
        metrics.counter(
            "zmqdata_worker_bytes",
            "Payload bytes of the elements sent (after compression).",
            stats["bytes"],
        ),
        metrics.counter(
            "zmqdata_worker_requests",
            "get_elements replies sent (elements, end of sequence or error).",
            stats["requests"],
        ),
        metrics.counter(
            "zmqdata_worker_errors", "Error replies sent to consumers.", stats["errors"]
        ),
        metrics.gauge(
            "zmqdata_worker_buffered_elements",
            "Elements produced and waiting to be sent.",
            stats["buffered_elements"],
        ),
        metrics.gauge(
            "zmqdata_worker_buffered_bytes",
            "Bytes of the elements waiting to be sent.",
            stats["buffered_bytes"],
        ),
        metrics.gauge(
            "zmqdata_worker_tasks", "Tasks on this worker.", len(stats["tasks"])
        ),
        metrics.gauge(
            "zmqdata_worker_tasks_running",
            "Tasks whose pipeline is still producing.",
            stats["tasks_running"],
        ),
        metrics.counter(
            "zmqdata_worker_tasks_finished",
            "Tasks whose pipeline reached its end (or failed).",
            stats["tasks_finished"],
        ),
    ]
