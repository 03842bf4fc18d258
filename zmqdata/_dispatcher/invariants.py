"""The invariants between ``ClusterRecords``' tables and their indexes.

``ClusterRecords.validate`` runs every check here (after every dispatcher
state test: ``tests/dispatcher/conftest.py``); each check yields a
``(table, what is wrong)`` pair for each violation of one family of
invariants, and nothing when they all hold.

>>> from zmqdata._dispatcher.records import ClusterRecords
>>> list(violations(ClusterRecords()))
[]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from zmqdata._dispatcher import model

if TYPE_CHECKING:
    from zmqdata._dispatcher.records import ClusterRecords

Violations = Iterator[tuple[str, str]]


def violations(records: ClusterRecords) -> Violations:
    """Every invariant that does not hold, as ``(table, detail)`` pairs."""
    for check in CHECKS:
        yield from check(records)


def tasks(records: ClusterRecords) -> Violations:
    """Each task is in its iteration; ``worker_tasks`` indexes them by worker."""
    by_worker: dict[int, dict[int, model.Task]] = {}
    for task in records.tasks.values():
        by_worker.setdefault(task.worker_id, {})[task.task_id] = task
        iteration = records.iterations.get(task.iteration_id)
        if iteration is None or iteration.tasks.get(task.task_id) is not task:
            yield "tasks", f"task {task.task_id} not in its iteration"
    if records.worker_tasks != by_worker:
        yield "worker_tasks", "differs from the tasks' workers"


def worker_indexes(records: ClusterRecords) -> Violations:
    """``workers_at`` and ``workers_in`` index the workers by address, process."""
    for index, key in (
        ("workers_at", "worker_address"),
        ("workers_in", "local_process"),
    ):
        expected: dict[str, set[int]] = {}
        for worker in records.workers.values():
            expected.setdefault(getattr(worker, key), set()).add(worker.worker_id)
        if getattr(records, index) != expected:
            yield index, f"differs from the workers' {key}"


def iterations(records: ClusterRecords) -> Violations:
    """Each iteration has its job; its tasks and clients are in their tables."""
    for iteration in records.iterations.values():
        if iteration.job_id not in records.jobs:
            yield "iterations", f"iteration {iteration.iteration_id}: no job"
        for task_id, task in iteration.tasks.items():
            if records.tasks.get(task_id) is not task:
                yield "iterations", f"task {task_id} not in tasks"
        for client_id in iteration.clients - records.clients.keys():
            yield "iterations", f"client {client_id} not in clients"


def clients(records: ClusterRecords) -> Violations:
    """Each client is among its iteration's."""
    for client in records.clients.values():
        iteration = records.iterations.get(client.iteration_id)
        if iteration is None or client.client_id not in iteration.clients:
            yield "clients", f"client {client.client_id} not in its iteration"


def names(records: ClusterRecords) -> Violations:
    """Jobs name registered datasets; the name indexes name what exists."""
    for job in records.jobs.values():
        if job.dataset_id not in records.datasets:
            yield "jobs", f"job {job.job_id}: no dataset {job.dataset_id!r}"
    by_fingerprint = set(records.datasets_by_fingerprint.values())
    for dataset_id in by_fingerprint - records.datasets.keys():
        yield "datasets_by_fingerprint", f"names no dataset {dataset_id!r}"
    for job_id in set(records.named_jobs.values()) - records.jobs.keys():
        yield "named_jobs", f"names no job {job_id}"


def next_id(records: ClusterRecords) -> Violations:
    """``next_id`` is past every id given out."""
    ids = [
        *records.workers,
        *records.jobs,
        *records.iterations,
        *records.tasks,
        *records.clients,
    ]
    if ids and max(ids) >= records.next_id:
        yield "next_id", f"{records.next_id} not past id {max(ids)}"


CHECKS: tuple[Callable[[ClusterRecords], Violations], ...] = (
    tasks,
    worker_indexes,
    iterations,
    clients,
    names,
    next_id,
)
"""Every family of invariants, in the order ``violations`` reports them."""
