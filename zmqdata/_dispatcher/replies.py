"""What the dispatcher tells peers about tasks, read off the records.

Workers get task definitions (what to run: the pipeline, the mode, a static
shard); consumers get task infos (where to read: the worker's endpoints) in an
``IterationState``. Read-only: nothing here changes the records.
"""

from __future__ import annotations

from collections.abc import Collection

from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher import model
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire import messages as m
from zmqdata._wire.modes import STATIC, read_mode
from zmqdata._wire.tasks import SaveDef, TaskDef, TaskInfo


def task_def(
    records: ClusterRecords,
    config: DispatcherConfig,
    task: model.Task,
    held: Collection[str] = (),
) -> TaskDef:
    """What a worker needs to run ``task`` (``ProcessTask`` and heartbeat replies).

    Without the pipeline if its fingerprint is among those the worker ``held``.
    """
    iteration = records.iterations[task.iteration_id]
    job = records.jobs[iteration.job_id]
    dataset = records.datasets[job.dataset_id]
    static = job.processing_mode in STATIC
    worker = records.workers.get(task.worker_id)
    return TaskDef(
        num_workers=len(config.worker_addresses or ()) if static else None,
        worker_index=worker.index if static and worker else None,
        task_id=task.task_id,
        iteration_id=iteration.iteration_id,
        dataset_id=dataset.dataset_id,
        pipeline=b"" if dataset.fingerprint in held else dataset.pipeline,
        fingerprint=dataset.fingerprint,
        processing_mode=job.processing_mode,
        compression=dataset.compression,
        num_consumers=job.num_consumers,
        cross_trainer_cache=job.cross_trainer_cache,
        exactly_once=job.exactly_once,
        dealt=job.dealt,
        split_outputs=job.split_outputs,
        mode=read_mode(job.dealt, job.cross_trainer_cache, job.num_consumers),
    )


def registered(
    records: ClusterRecords,
    config: DispatcherConfig,
    request_id: int,
    worker: model.Worker,
) -> m.RegisterWorkerReply:
    """The reply to a registration: the worker's id and its running tasks."""
    mine = records.worker_tasks.get(worker.worker_id, {})
    tasks = [task for task in mine.values() if not task.finished]
    return m.RegisterWorkerReply(
        request_id=request_id,
        worker_id=worker.worker_id,
        worker_index=worker.index,
        tasks=[task_def(records, config, t).to_wire() for t in tasks],
        heartbeat_max_ms=worker_heartbeat_max_ms(config),
    )


def worker_heartbeat_max_ms(config: DispatcherConfig) -> int:
    """A quiet worker's longest heartbeat interval: four per ``worker_timeout_ms``."""
    return config.worker_timeout_ms // 4


def task_changes(
    records: ClusterRecords,
    config: DispatcherConfig,
    worker: model.Worker,
    heartbeat: m.WorkerHeartbeat,
    held: Collection[str] = (),
) -> m.WorkerHeartbeatReply:
    """The tasks a worker lacks (to start) and those it has but lost (to delete).

    ``held``: the fingerprints of the pipelines the worker holds.
    """
    reported = {task_id for task_id, _ in heartbeat.tasks}
    assigned = records.worker_tasks.get(worker.worker_id, {})
    return m.WorkerHeartbeatReply(
        request_id=heartbeat.request_id,
        new_tasks=[
            task_def(records, config, task, held).to_wire()
            for task_id, task in assigned.items()
            if task_id not in reported and not task.finished
        ],
        tasks_to_delete=sorted(reported - assigned.keys()),
        saves=[
            save_def(records, save, held).to_wire()
            for save in records.saves.values()
            if not save.ended and not save.by_jobs
        ],
    )


def save_def(
    records: ClusterRecords, save: model.Save, held: Collection[str] = ()
) -> SaveDef:
    """What a worker needs to write chunks of ``save`` (heartbeat replies)."""
    dataset = records.datasets[save.dataset_id]
    return SaveDef(
        save_id=save.save_id,
        dataset_id=dataset.dataset_id,
        pipeline=b"" if dataset.fingerprint in held else dataset.pipeline,
        fingerprint=dataset.fingerprint,
        path=save.path,
        compression=save.compression,
    )


def task_info(records: ClusterRecords, task: model.Task) -> TaskInfo:
    """Where a consumer reads ``task``."""
    worker = records.workers[task.worker_id]
    return TaskInfo(
        task_id=task.task_id,
        worker_id=worker.worker_id,
        worker_address=worker.worker_address,
        data_address=worker.data_address,
        local_process=worker.local_process,
        inproc_address=worker.inproc_address,
    )


def iteration_state(
    records: ClusterRecords,
    config: DispatcherConfig,
    client: model.Client,
    request_id: int,
    incarnation: str,
    known: int = 0,
) -> m.IterationState:
    """A consumer's view of its iteration: tasks, end, coordinated schedule.

    ``unchanged`` (no tasks, no rounds) if the consumer ``known`` it already.
    """
    iteration = records.iterations[client.iteration_id]
    current = revision(iteration)
    unchanged = known == current
    return m.IterationState(
        request_id=request_id,
        client_id=client.client_id,
        iteration_id=iteration.iteration_id,
        tasks=[]
        if unchanged
        else [task_info(records, task).to_wire() for task in iteration.tasks.values()],
        finished=iteration.finished,
        rounds=[]
        if unchanged
        else [[start, list(task_ids)] for start, task_ids in iteration.schedule],
        horizon=iteration.horizon,
        incarnation=incarnation,
        task_epoch=iteration.task_epoch,
        revision=current,
        unchanged=unchanged,
        fence_timeout_ms=config.fence_timeout_ms,
    )


def revision(iteration: model.Iteration) -> int:
    """A digest of what ``iteration_state`` tells of ``iteration`` (never 0).

    Task infos are fixed per task (a task's worker never changes), so the task
    ids stand for them; the schedule only grows or replaces its last entry.
    Python hashes ints and tuples of them the same in every process, so a
    restarted fault-tolerant dispatcher with the same state gives the same
    digest.

    >>> a = model.Iteration(1, 1, 0)
    >>> revision(a) == revision(model.Iteration(2, 1, 0)), revision(a) != 0
    (True, True)
    """
    schedule = iteration.schedule
    last = (schedule[-1][0], tuple(schedule[-1][1])) if schedule else ()
    key = (
        tuple(iteration.tasks),
        iteration.finished,
        len(schedule),
        last,
        iteration.horizon,
        iteration.task_epoch,
    )
    return hash(key) or 1
