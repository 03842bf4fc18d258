"""What ``service.get_status`` and ``zmqdata status`` show: the records, rendered.

Read-only: rendering never changes the records, and an odd record (a split
source whose splits cannot be counted) leaves a field out rather than fail.

>>> from zmqdata._dispatcher.records import ClusterRecords
>>> shown = render(ClusterRecords(), {}, now=12.5, started=10.0)
>>> sorted(shown)  # doctest: +NORMALIZE_WHITESPACE
['datasets', 'jobs', 'records', 'saves', 'uptime_s', 'version',
 'worker_timeout_s', 'workers']
>>> shown["records"]["clients"], shown["uptime_s"]
(0, 2.5)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from zmqdata._dispatcher import (
    dealing,
    diagnosis,
    model,
    snapshot_saves,
    split_requests,
)
from zmqdata._dispatcher.autoscale import Policy
from zmqdata._dispatcher.readers import Reads
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._dispatcher.samples import Rate, WorkerSample
from zmqdata._version import __version__
from zmqdata._wire import deal, lineage, outputs
from zmqdata._wire.lineage import Ranges
from zmqdata._wire.modes import ShardingPolicy


def render(
    records: ClusterRecords,
    samples: Mapping[int, WorkerSample],
    ignored: Mapping[int, Mapping[int, tuple[int, str]]] | None = None,
    *,
    now: float | None = None,
    started: float | None = None,
    worker_timeout_s: float | None = None,
    protocols: Mapping[int, int] | None = None,
    reads: Mapping[int, Reads] | None = None,
    policy: Policy | None = None,
    seen: Callable[[int], float] | None = None,
) -> dict[str, Any]:
    """The status of every worker, dataset and job; ``samples``: workers' stats.

    ``reads``: by client id, what each consumer reported of its reads; with
    ``policy`` (the autoscaler's), each job says where its time goes
    (``diagnosis.py``).

    ``ignored``: by job, then task, the errors ``ignore_errors`` skipped.
    ``protocols``: by worker id, the protocol version it speaks (if known).

    ``now``: the dispatcher's clock, for heartbeat ages (``seen``: when a
    worker was last heard from) and the uptime since ``started`` (``None``
    without it).
    """
    served = _served_by_job(records, samples)
    diagnosed = _diagnose(records, samples, reads or {}, policy or Policy())
    ignored = ignored or {}
    return {
        "version": __version__,
        "uptime_s": None if now is None or started is None else now - started,
        "worker_timeout_s": worker_timeout_s,
        "workers": _workers(records, samples, protocols or {}, now, seen),
        "saves": [_save(s) for s in records.saves.values()],
        "datasets": [_dataset(d) for d in records.datasets.values()],
        "jobs": [
            _job(
                records,
                job,
                served.get(job.job_id, Rate(0)),
                ignored.get(job.job_id, {}),
            )
            | diagnosed.get(job.job_id, {})
            for job in records.jobs.values()
        ],
        "records": _table_sizes(records),
    }


def _workers(
    records: ClusterRecords,
    samples: Mapping[int, WorkerSample],
    protocols: Mapping[int, int],
    now: float | None,
    seen: Callable[[int], float] | None,
) -> list[dict[str, Any]]:
    """Every worker's status (``render``'s arguments of the same names)."""
    task_counts: dict[int, int] = {}
    for task in records.tasks.values():
        if not task.finished:
            task_counts[task.worker_id] = task_counts.get(task.worker_id, 0) + 1
    return [
        _worker(
            w,
            task_counts.get(w.worker_id, 0),
            samples.get(w.worker_id),
            None if now is None or seen is None else now - seen(w.worker_id),
            protocols.get(w.worker_id),
        )
        for w in records.workers.values()
    ]


def _dataset(dataset: model.Dataset) -> dict[str, Any]:
    """A dataset's ids and the size of its pipeline."""
    return {
        "dataset_id": dataset.dataset_id,
        "fingerprint": dataset.fingerprint,
        "compression": dataset.compression,
        "pipeline_bytes": len(dataset.pipeline),
    }


def _diagnose(
    records: ClusterRecords,
    samples: Mapping[int, WorkerSample],
    reads: Mapping[int, Reads],
    policy: Policy,
) -> dict[int, dict[str, Any]]:
    """By job id: its ops, phases, workers, consumers and bottleneck."""
    tasks = _task_reports(records, samples)
    consumers = _consumer_reports(records, reads)
    return {
        job_id: diagnosis.diagnose(
            tasks.get(job_id, []), consumers.get(job_id, []), policy
        )
        for job_id in records.jobs
    }


def _task_reports(
    records: ClusterRecords, samples: Mapping[int, WorkerSample]
) -> dict[int, list[diagnosis.TaskReport]]:
    """By job id: what the workers reported of its tasks."""
    tasks: dict[int, list[diagnosis.TaskReport]] = {}
    for worker_id, sample in samples.items():
        worker = records.workers.get(worker_id)
        reported = sample.stats.get("tasks")
        for stats in reported if isinstance(reported, list) else []:
            task_id = stats.get("task_id") if isinstance(stats, dict) else None
            job_id = _job_of(records, task_id)
            if job_id is None or worker is None or not isinstance(task_id, int):
                continue
            rate = sample.tasks.get(task_id, Rate(0)).per_s
            tasks.setdefault(job_id, []).append(
                diagnosis.TaskReport(worker_id, worker.worker_address, rate, stats)
            )
    return tasks


def _consumer_reports(
    records: ClusterRecords, reads: Mapping[int, Reads]
) -> dict[int, list[diagnosis.ConsumerReport]]:
    """By job id: what its consumers reported of their reads."""
    consumers: dict[int, list[diagnosis.ConsumerReport]] = {}
    for client_id, read in reads.items():
        job_id = _job_of_client(records, client_id)
        if job_id is not None:
            consumers.setdefault(job_id, []).append(
                diagnosis.ConsumerReport(
                    client_id,
                    read.consumer_index,
                    read.waited,
                    read.consumed,
                    read.elements_per_s,
                )
            )
    return consumers


def _job_of(records: ClusterRecords, task_id: Any) -> int | None:
    task = records.tasks.get(task_id) if isinstance(task_id, int) else None
    iteration = None if task is None else records.iterations.get(task.iteration_id)
    return None if iteration is None else iteration.job_id


def _job_of_client(records: ClusterRecords, client_id: int) -> int | None:
    client = records.clients.get(client_id)
    iteration = None if client is None else records.iterations.get(client.iteration_id)
    return None if iteration is None else iteration.job_id


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


def _served_by_job(
    records: ClusterRecords, samples: Mapping[int, WorkerSample]
) -> dict[int, Rate]:
    """Elements served per job id (count and rate), over its tasks' reports."""
    served: dict[int, Rate] = {}
    for sample in samples.values():
        for task_id, rate in sample.tasks.items():
            task = records.tasks.get(task_id)
            iteration = (
                None if task is None else records.iterations.get(task.iteration_id)
            )
            if iteration is None:
                continue
            total = served.setdefault(iteration.job_id, Rate(0))
            total.count = (total.count or 0) + (rate.count or 0)
            total.per_s += rate.per_s
    return served


def _buffer(stats: dict[str, Any]) -> dict[str, int]:
    """Buffered elements and bytes, and what the worker's task buffers can hold.

    The capacities sum what each task reports (0 from workers that do not).
    """
    tasks = stats.get("tasks")
    tasks = [t for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []
    return {
        "elements": _int(stats.get("buffered_elements")),
        "bytes": _int(stats.get("buffered_bytes")),
        "capacity_elements": sum(
            _int(t.get("buffer_capacity_elements")) for t in tasks
        ),
        "capacity_bytes": sum(_int(t.get("buffer_capacity_bytes")) for t in tasks),
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _worker(
    worker: model.Worker,
    num_tasks: int,
    sample: WorkerSample | None,
    age_s: float | None,
    protocol: int | None,
) -> dict[str, Any]:
    return {
        "worker_id": worker.worker_id,
        "protocol": protocol,
        "address": worker.worker_address,
        "data_address": worker.data_address,
        "index": worker.index,
        "tags": list(worker.tags),
        "num_tasks": num_tasks,
        "stats": {} if sample is None else sample.stats,
        "elements_per_s": 0.0 if sample is None else sample.elements_per_s,
        "bytes_per_s": 0.0 if sample is None else sample.bytes_per_s,
        "buffer": _buffer({} if sample is None else sample.stats),
        "heartbeat_age_s": None if age_s is None else max(0.0, age_s),
        "heartbeat_interval_s": None if sample is None else sample.interval_s,
    }


def _split_progress(
    dataset: model.Dataset, job: model.Job, iterations: list[model.Iteration]
) -> dict[str, int] | None:
    """DYNAMIC jobs: splits handed out of the current pass, over all iterations."""
    source = dataset.split_source
    if job.processing_mode != ShardingPolicy.DYNAMIC or source is None:
        return None
    try:
        if job.dealt:
            splits = dealing.splits_of(dataset)
        else:
            splits = split_requests.plan(dataset, None, 0, job.split_outputs)
        total = splits.count()
    except Exception:  # status must not fail on an odd source
        return None
    return {
        "handed_out": sum(min(i.next_split, total) for i in iterations),
        "total": total * len(iterations),
    }


def _lost_keys(job: model.Job, iterations: list[model.Iteration]) -> dict[str, int]:
    """Exactly once: lost tasks' keys to hand out again, and still fenced.

    Keyed by outputs, the splits they are parts of (a split's keys count
    outputs not made yet).
    """
    count = outputs.count_splits if job.split_outputs else lineage.size
    return {
        "pending": sum(count(i.pending) for i in iterations),
        "orphaned": sum(
            count(o["keys"]) for i in iterations for o in i.orphans.values()
        ),
    }


def _dealt(
    dataset: model.Dataset, job: model.Job, iterations: list[model.Iteration]
) -> dict[str, Any]:
    """Multi-rank reads: the running iteration's epoch, elements and dropped tail.

    ``undelivered``: the elements of the last, incomplete round, which no
    consumer gets (known once every split's count is; else None).
    """
    iteration = max(iterations, key=lambda i: i.repetition, default=None)
    if iteration is None:
        return {"seed": job.seed, "epoch": None}
    total = dealing.splits_of(dataset).count()
    counted = {
        q: c for q, c in iteration.split_counts.items() if q >= iteration.deal_start
    }
    elements = undelivered = None
    if len(counted) >= total - iteration.deal_start:
        end = iteration.deal_stream[0] + sum(counted.values())
        stream = deal.Stream(
            iteration.deal_stream[0], Ranges(iteration.deal_stream[1:])
        )
        elements = stream.index_of(end)
        undelivered = elements % (job.num_consumers or 1)
    return {
        "seed": job.seed,
        "epoch": iteration.deal_epoch,
        "splits_counted": len(counted),
        "splits": total - iteration.deal_start,
        "elements": elements,
        "undelivered": undelivered,
        "consumers_done": len(iteration.done_consumers),
    }


def _eta_s(splits: dict[str, int] | None, served: Rate) -> float | None:
    """Seconds left, if the splits not handed out yet are like those that were.

    ``None`` without split progress, before any element, or at a rate of 0.
    """
    if splits is None or not splits["handed_out"] or not served.count:
        return None
    if served.per_s <= 0:
        return None
    done = splits["handed_out"] / max(1, splits["total"])
    return served.count * (1 - done) / done / served.per_s


def _job(
    records: ClusterRecords,
    job: model.Job,
    served: Rate,
    ignored: Mapping[int, tuple[int, str]],
) -> dict[str, Any]:
    iterations = [records.iterations[i] for i in job.iterations.values()]
    dataset = records.datasets[job.dataset_id]
    splits = _split_progress(dataset, job, iterations)
    finished = bool(iterations) and all(i.finished for i in iterations)
    return {
        **_progress(dataset, job, iterations, splits),
        "seed": job.seed,
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
        "finished": finished,
        "elements": served.count or 0,
        "elements_per_s": served.per_s,
        "eta_s": None if finished else _eta_s(splits, served),
        "errors_ignored": sum(count for count, _ in ignored.values()),
        "last_error_ignored": [*ignored.values()][-1][1] if ignored else None,
        "snapshot": snapshot_saves.status(records, dataset, job),
    }


def _progress(
    dataset: model.Dataset,
    job: model.Job,
    iterations: list[model.Iteration],
    splits: dict[str, int] | None,
) -> dict[str, Any]:
    """What only some jobs show: split progress, lost keys, a dealt read."""
    shown: dict[str, Any] = {}
    if splits is not None:
        shown["splits"] = splits
    if job.exactly_once and not job.dealt:
        shown["lost_keys"] = _lost_keys(job, iterations)
    if job.dealt:
        shown["dealt"] = _dealt(dataset, job, iterations)
    return shown


def _save(save: model.Save) -> dict[str, Any]:
    """A save's progress; a running one's ETA from its rate so far (wall clock)."""
    done = len(save.chunks)
    state = "running" if not save.ended else "failed" if save.error else "finished"
    elapsed = max(0.0, time.time() - save.started)
    eta = None
    if state == "running" and done:
        eta = elapsed / done * (save.num_splits - done)
    return {
        "save_id": save.save_id,
        "path": save.path,
        "dataset_id": save.dataset_id,
        "state": state,
        "chunks": done,
        "splits": save.num_splits,
        "elements": sum(c[1] for c in save.chunks.values()),
        "bytes": sum(c[2] for c in save.chunks.values()),
        "eta_s": eta,
        "error": save.error,
    }
