"""Datasets and jobs: ``GetOrRegisterDataset``, ``GetDatasetInfo``, ``GetOrCreateJob``.

A dataset is registered once per pipeline and compression (its fingerprint
finds it again); a job once per request (its idempotency key finds it
again) or per name (a named job's parameters must match). A LOCAL job
(``placement.reads_local_processes``) gets tasks only on the workers of the
processes that read it: each new one joins it. Job GC, which collects
iterations nobody reads, is in ``timeouts.py``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from zmqdata._dataset import graph
from zmqdata._dispatcher import (
    checks,
    dealing,
    model,
    placement,
    snapshot_saves,
    tasking,
)
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire import messages as m
from zmqdata._wire.modes import ShardingPolicy, is_tracked
from zmqdata.errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

logger = logging.getLogger("zmqdata.dispatcher")


def get_or_register_dataset(
    state: DispatcherState, peer: bytes, msg: m.GetOrRegisterDataset, now: float
) -> list[Outgoing]:
    """Registers a pipeline (or finds it, by its id or its fingerprint)."""
    records = state.records
    fingerprint = graph.fingerprint(msg.pipeline)
    key = model.registration_key(fingerprint, msg.compression)
    dataset_id = msg.dataset_id or records.datasets_by_fingerprint.get(key, "")
    existing = records.datasets.get(dataset_id)
    if existing is not None and existing.fingerprint != fingerprint:
        raise InvalidArgumentError(
            f"dataset id {dataset_id!r} is already registered with a different "
            "pipeline; datasets with the same id must be the same pipeline"
        )
    if existing is not None and existing.compression != msg.compression:
        raise InvalidArgumentError(
            f"dataset id {dataset_id!r} is already registered with compression="
            f"{existing.compression!r}, not {msg.compression!r}"
        )
    if existing is None:
        graph.deserialize(msg.pipeline, load_functions=False)  # reject garbage
        dataset_id = dataset_id or _unused_dataset_id(records)
        state.apply(
            ev.DatasetRegistered(
                dataset_id,
                msg.pipeline,
                fingerprint,
                msg.compression,
                msg.element_spec,
            )
        )
        logger.info("dataset %s registered (%d bytes)", dataset_id, len(msg.pipeline))
    reply = m.GetOrRegisterDatasetReply(
        request_id=msg.request_id, dataset_id=dataset_id
    )
    return [Outgoing(peer, reply)]


def _unused_dataset_id(records: ClusterRecords) -> str:
    """A fresh generated id, never one a client requested earlier."""
    candidate = records.next_id
    while str(candidate) in records.datasets:
        candidate += 1
    return str(candidate)


def dataset_of(records: ClusterRecords, dataset_id: str) -> model.Dataset:
    """The registered dataset ``dataset_id`` (``NotFoundError`` if none)."""
    dataset = records.datasets.get(dataset_id)
    if dataset is None:
        raise NotFoundError(f"dataset id {dataset_id!r} is not registered")
    return dataset


def get_dataset_info(
    state: DispatcherState, peer: bytes, msg: m.GetDatasetInfo, now: float
) -> list[Outgoing]:
    """What a registered dataset's elements are, and how many (and its pipeline)."""
    dataset = dataset_of(state.records, msg.dataset_id)
    reply = m.GetDatasetInfoReply(
        request_id=msg.request_id,
        element_spec=dataset.element_spec,
        compression=dataset.compression,
        cardinality=dataset.cardinality,
        pipeline=dataset.pipeline if msg.pipeline else b"",
    )
    return [Outgoing(peer, reply)]


def get_or_create_job(
    state: DispatcherState, peer: bytes, msg: m.GetOrCreateJob, now: float
) -> list[Outgoing]:
    """Creates a job (or finds it: a retry, or a named job) and joins it."""
    records = state.records
    created_before = records.created_by.get(msg.request_key)
    if created_before in records.jobs:  # a retry of a request already done
        reply = m.GetOrCreateJobReply(request_id=msg.request_id, job_id=created_before)
        return [Outgoing(peer, reply)]
    dataset = dataset_of(records, msg.dataset_id)
    checks.check_job(msg, dataset, state.config)
    if msg.processing_mode == ShardingPolicy.DYNAMIC:
        snapshot_saves.open_save(state, dataset)
    job_id = _create_or_find_job(state, msg, dataset)
    reply = m.GetOrCreateJobReply(request_id=msg.request_id, job_id=job_id)
    job = records.jobs[job_id]
    return [Outgoing(peer, reply), *_join(state, job, msg.local_process)]


def _create_or_find_job(
    state: DispatcherState, msg: m.GetOrCreateJob, dataset: model.Dataset
) -> int:
    """The job ``msg`` names (a named job with its parameters), else a new one."""
    records = state.records
    tracked = is_tracked(msg.exactly_once, msg.processing_mode, msg.cross_trainer_cache)
    dealt = dealing.is_dealt(
        msg.processing_mode, msg.num_consumers, dataset.cardinality
    )
    created = ev.JobCreated(
        records.next_id,
        msg.dataset_id,
        msg.job_name,
        msg.processing_mode,
        msg.num_consumers,
        msg.target_workers.upper(),
        msg.cross_trainer_cache,
        msg.request_key,
        msg.local_process,
        exactly_once=tracked,
        seed=msg.seed,
        dealt=dealt,
        split_outputs=tracked and not dealt and _expands(dataset),
    )
    named = (msg.dataset_id, msg.job_name) if msg.job_name else None
    existing_id = None if named is None else records.named_jobs.get(named)
    if existing_id is None:
        state.apply(created)
        return created.job_id
    checks.check_same_job(records.jobs[existing_id], created)
    return existing_id


def _expands(dataset: model.Dataset) -> bool:
    """Whether the pipeline has a 1-to-many op: its workers run splits (``split_runs``).

    Without one, each output claims the keys of the source elements it
    stands for (``_wire/lineage.py``), which a worker loss or a resumed read
    hands out again as they are.
    """
    return checks.expands(dataset)


def _join(state: DispatcherState, job: model.Job, local_process: str) -> list[Outgoing]:
    """A LOCAL job read from one more process: its workers there get tasks."""
    if (
        not placement.reads_local_processes(job)
        or not local_process
        or local_process in job.consumer_processes
    ):
        return []
    state.apply(ev.ConsumerProcessJoined(job.job_id, local_process))
    records = state.records
    return [
        tasking.push(state, tasking.create(state, iteration_id, worker.worker_id))
        for iteration_id in job.iterations.values()
        if tasking.running(records.iterations[iteration_id])
        for worker in tasking.workers_in(records, (local_process,))
    ]
