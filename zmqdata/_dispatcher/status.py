"""What ``service.get_status`` and ``zmqdata status`` show: the records, rendered.

Read-only: rendering never changes the records, and an odd record (a split
source whose splits cannot be counted) leaves a field out rather than fail.

>>> from zmqdata._dispatcher.records import ClusterRecords
>>> shown = render(ClusterRecords(), {})
>>> sorted(shown), shown["workers"]
(['datasets', 'jobs', 'records', 'version', 'workers'], [])
>>> shown["records"]["clients"]
0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zmqdata._dataset.node import Node
from zmqdata._dispatcher import model
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.samples import WorkerSample
from zmqdata._dispatcher.splits import Splits
from zmqdata._version import __version__
from zmqdata._wire.modes import ShardingPolicy


def render(
    records: ClusterRecords, samples: Mapping[int, WorkerSample]
) -> dict[str, Any]:
    """The status of every worker, dataset and job; ``samples``: workers' stats."""
    task_counts: dict[int, int] = {}
    for task in records.tasks.values():
        if not task.finished:
            task_counts[task.worker_id] = task_counts.get(task.worker_id, 0) + 1
    return {
        "version": __version__,
        "workers": [
            _worker(w, task_counts.get(w.worker_id, 0), samples.get(w.worker_id))
            for w in records.workers.values()
        ],
        "datasets": [
            {
                "dataset_id": d.dataset_id,
                "fingerprint": d.fingerprint,
                "compression": d.compression,
                "pipeline_bytes": len(d.pipeline),
            }
            for d in records.datasets.values()
        ],
        "jobs": [_job(records, job) for job in records.jobs.values()],
        "records": _table_sizes(records),
    }


def _table_sizes(records: ClusterRecords) -> dict[str, int]:
    """How many records each table holds: what a leak check compares."""
    return {
        "workers": len(records.workers),
        "datasets": len(records.datasets),
        "jobs": len(records.jobs),
        "iterations": len(records.iterations),
        "tasks": len(records.tasks),
        "clients": len(records.clients),
    }


def _worker(
    worker: model.Worker, num_tasks: int, sample: WorkerSample | None
) -> dict[str, Any]:
    return {
        "worker_id": worker.worker_id,
        "address": worker.worker_address,
        "data_address": worker.data_address,
        "index": worker.index,
        "tags": list(worker.tags),
        "num_tasks": num_tasks,
        "stats": {} if sample is None else sample.stats,
        "elements_per_s": 0.0 if sample is None else sample.elements_per_s,
    }


def _split_progress(
    source: Node | None, job: model.Job, iterations: list[model.Iteration]
) -> dict[str, int] | None:
    """DYNAMIC jobs: splits handed out of the current pass, over all iterations."""
    if job.processing_mode != ShardingPolicy.DYNAMIC or source is None:
        return None
    try:
        total = Splits.of(source).count()
    except Exception:  # status must not fail on an odd source
        return None
    return {
        "handed_out": sum(min(i.next_split, total) for i in iterations),
        "total": total * len(iterations),
    }


def _lost_keys(iterations: list[model.Iteration]) -> dict[str, int]:
    """Exactly once: lost tasks' keys to hand out again, and still fenced."""
    return {
        "pending": sum(i.pending.count_keys() for i in iterations),
        "orphaned": sum(
            o["keys"].count_keys() for i in iterations for o in i.orphans.values()
        ),
    }


def _job(records: ClusterRecords, job: model.Job) -> dict[str, Any]:
    iterations = [records.iterations[i] for i in job.iterations.values()]
    source = records.datasets[job.dataset_id].split_source
    splits = _split_progress(source, job, iterations)
    return {
        **({} if splits is None else {"splits": splits}),
        **({"lost_keys": _lost_keys(iterations)} if job.exactly_once else {}),
        "job_id": job.job_id,
        "job_name": job.name,
        "dataset_id": job.dataset_id,
        "processing_mode": model.mode_name(job.processing_mode),
        "num_consumers": job.num_consumers,
        "cross_trainer_cache": job.cross_trainer_cache,
        "exactly_once": job.exactly_once,
        "target_workers": job.target_workers,
        "num_iterations": len(iterations),
        "num_clients": sum(len(i.clients) for i in iterations),
        "finished": bool(iterations) and all(i.finished for i in iterations),
    }
