"""Snapshots of the dispatcher's records, so the journal can be compacted.

``dump`` writes every table of ``ClusterRecords`` as one msgpack map; ``load``
rebuilds the tables from it. A state loaded from a snapshot equals the state it
was taken from (only what each dataset's pipeline says, its split source and
cardinality, is derived again, as ``apply`` does). The journal (``journal.py``) stores a snapshot and
the events that followed it.

>>> from zmqdata._dispatcher import events as ev
>>> records = ClusterRecords()
>>> records.apply(ev.WorkerRegistered(3, b"p", "h:1", "tcp://h:1", (), "", "", 0.0, None))
>>> copy = ClusterRecords()
>>> load(copy, dump(records))
>>> copy.workers == records.workers, copy.next_id
(True, 4)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack

from zmqdata._dispatcher import model
from zmqdata._dispatcher.records import ClusterRecords, derived
from zmqdata._wire.lineage import Ranges

FORMAT = 1


def _row(record: Any, *skip: str) -> dict[str, Any]:
    """A record's fields (sets as sorted lists), without ``skip``."""
    row = {}
    for field in dataclasses.fields(record):
        if field.name not in skip:
            value = getattr(record, field.name)
            row[field.name] = sorted(value) if isinstance(value, set) else value
    return row


def dump(records: ClusterRecords) -> bytes:
    """Every table of ``records``, as bytes for :func:`load`."""
    body = {
        "format": FORMAT,
        "workers": [_row(w) for w in records.workers.values()],
        "datasets": [
            _row(
                d,
                "split_source",
                "cardinality",
                "whole_batch",
                "snapshot",
                "epoch_elements",
            )
            for d in records.datasets.values()
        ],
        "jobs": [_row(j) for j in records.jobs.values()],
        "iterations": [_row(i, "tasks") for i in records.iterations.values()],
        "tasks": [_row(t) for t in records.tasks.values()],
        "clients": [_row(c) for c in records.clients.values()],
        "by_fingerprint": records.datasets_by_fingerprint,
        "named_jobs": [[*key, job_id] for key, job_id in records.named_jobs.items()],
        "collected_clients": records.collected_clients,
        "created_by": list(records.created_by.items()),
        "saves": [
            {**_row(s, "chunks"), "chunks": [[o, *c] for o, c in s.chunks.items()]}
            for s in records.saves.values()
        ],
        "next_id": records.next_id,
    }
    data: bytes = msgpack.packb(body)
    return data


def load(records: ClusterRecords, data: bytes) -> None:
    """Fills the (empty) ``records`` with the tables :func:`dump` wrote."""
    body = msgpack.unpackb(data, strict_map_key=False)
    if body.get("format") != FORMAT:
        raise ValueError(f"unknown snapshot format {body.get('format')!r}")
    _load_tables(records, body)
    records.datasets_by_fingerprint = dict(body["by_fingerprint"])
    records.named_jobs = {(d, n): job_id for d, n, job_id in body["named_jobs"]}
    records.collected_clients = dict(body["collected_clients"])
    records.created_by = dict(body.get("created_by", []))
    for row in body.get("saves", []):
        chunks = {chunk[0]: list(chunk[1:]) for chunk in row.pop("chunks")}
        records.saves[row["save_id"]] = model.Save(**row, chunks=chunks)
    records.next_id = body["next_id"]


def _load_tables(records: ClusterRecords, body: dict[str, Any]) -> None:
    """The record tables, in an order that links each to those before it."""
    for worker in map(_worker, body["workers"]):
        records.add_worker(worker)
    for dataset in map(_dataset, body["datasets"]):
        records.datasets[dataset.dataset_id] = dataset
    for job in map(_job, body["jobs"]):
        records.jobs[job.job_id] = job
    for iteration in map(_iteration, body["iterations"]):
        records.iterations[iteration.iteration_id] = iteration
    for task in map(_task, body["tasks"]):
        records.add_task(task)
    for client in map(_client, body["clients"]):
        records.clients[client.client_id] = client


DROPPED = {
    "Worker": ("last_seen",),
    "Client": ("last_seen",),
    "Iteration": ("last_client_released",),
}
"""Fields of older snapshots' records these records no longer have, dropped on
loading: 0.1 kept when each peer was last heard from and each iteration last
left by a consumer (both now ``liveness.py``)."""


def _kept(row: dict[str, Any], record: str) -> dict[str, Any]:
    """``row`` without the fields ``DROPPED`` names for ``record``."""
    for name in DROPPED.get(record, ()):
        row.pop(name, None)
    return row


def _worker(row: dict[str, Any]) -> model.Worker:
    return model.Worker(**_kept(row, "Worker"))


def _dataset(row: dict[str, Any]) -> model.Dataset:
    """A dataset, with what its pipeline says derived again."""
    return model.Dataset(**row, **derived(row["pipeline"]))


def _job(row: dict[str, Any]) -> model.Job:
    return model.Job(**row)


def _iteration(row: dict[str, Any]) -> model.Iteration:
    """An iteration without its tasks (``load`` links them); its types back."""
    iteration = model.Iteration(**_kept(row, "Iteration"))
    iteration.clients = set(iteration.clients)
    iteration.former_clients = set(iteration.former_clients)
    iteration.schedule = [(start, ids) for start, ids in iteration.schedule]
    iteration.pending = Ranges(iteration.pending)
    iteration.done = Ranges(iteration.done)
    for orphan in iteration.orphans.values():
        orphan["keys"] = Ranges(orphan["keys"])
    return iteration


def _task(row: dict[str, Any]) -> model.Task:
    task = model.Task(**row)
    task.unacked = Ranges(task.unacked)
    if task.last_split is not None:
        task.last_split = model.LastSplit(*task.last_split)
    return task


def _client(row: dict[str, Any]) -> model.Client:
    return model.Client(**_kept(row, "Client"))
