"""``ClusterRecords``: the dispatcher's tables and the one function that changes them.

``apply(event)`` is the only way the tables change (liveness times aside,
which are not state); request handlers build events and apply them, and the
journal replays them. Consequences that follow
from an event (an iteration is finished once all its tasks are; a finished
iteration nobody reads gives its tasks back) are computed here, so replay
reaches the same state. Exactly once (DYNAMIC jobs with ``exactly_once``): a
task's keys stay ``unacked`` until a consumer acknowledges them; a lost task's
become an orphan of its iteration, waiting for each of the iteration's clients
to fence it (``ClientFenced``, or leave), then ``pending``, handed out again.

An ``EventSink`` is where ``DispatcherState`` keeps events: ``NoJournal``
without fault tolerance, ``journal.JournalSink`` with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from zmqdata._dataset import fold, graph
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops import split_runs
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dispatcher import dealing, invariants, model, snapshot_saves
from zmqdata._dispatcher import events as ev
from zmqdata._wire.lineage import Ranges
from zmqdata.errors import InvalidArgumentError

logger = logging.getLogger("zmqdata.dispatcher")

COLLECTED_CLIENTS_KEPT = 10_000
"""Clients of collected iterations remembered (oldest forgotten first), so one
that comes back hears why its iteration is gone."""
REQUEST_KEYS_KEPT = 10_000
"""Idempotency keys remembered (oldest forgotten first): a request retried
after a stall or a dispatcher restart finds what its first attempt created."""


def derived(pipeline: bytes) -> dict[str, Any]:
    """What the dispatcher reads off a serialized pipeline, decoded once.

    ``split_source``: its splittable source (or None); ``cardinality``: its
    cardinality; ``whole_batch``: the batch size multi-rank splits are cut to
    (``split_runs.whole_batch``); ``snapshot``: its ``snapshot_saves.target_of``;
    ``epoch_elements``: a multi-rank epoch's size, if known.
    Functions are not loaded. Derived on
    registration and replay, never journaled.
    """
    root = graph.deserialize(pipeline, load_functions=False)
    try:
        source: Node | None = find_split_source(root)
    except InvalidArgumentError:
        source = None
    cardinality = fold.cardinality(root)
    return {
        "split_source": source,
        "cardinality": cardinality,
        "epoch_elements": dealing.epoch_elements(root, cardinality),
        "whole_batch": split_runs.whole_batch(root),
        "snapshot": snapshot_saves.target_of(root),
    }


class ClusterRecords:
    """Workers, datasets, jobs, iterations, tasks and clients, by id."""

    def __init__(self) -> None:
        self.workers: dict[int, model.Worker] = {}
        self.datasets: dict[str, model.Dataset] = {}
        self.jobs: dict[int, model.Job] = {}
        self.iterations: dict[int, model.Iteration] = {}
        self.tasks: dict[int, model.Task] = {}
        self.clients: dict[int, model.Client] = {}
        self.worker_tasks: dict[int, dict[int, model.Task]] = {}
        """Worker id -> its tasks, by id (an index of ``tasks``: a heartbeat
        or a registration reads one worker's tasks without scanning them all)."""
        self.workers_at: dict[str, set[int]] = {}
        """Worker address -> the ids of the workers registered there (an index)."""
        self.workers_in: dict[str, set[int]] = {}
        """Local process -> the ids of the workers in it (an index, for LOCAL reads)."""
        self.datasets_by_fingerprint: dict[str, str] = {}
        """``model.registration_key`` (pipeline and compression) -> dataset id."""
        self.named_jobs: dict[tuple[str, str], int] = {}
        self.collected_clients: dict[int, int] = {}
        """Client id -> the collected iteration it had read (job GC)."""
        self.created_by: dict[bytes, int] = {}
        """Request idempotency key -> the job or client id that request created."""
        self.saves: dict[str, model.Save] = {}
        """Save id -> the save (``distributed_save``)."""
        self.next_id = 1
        self._appliers: dict[type[Any], Callable[[Any], None]] = {
            ev.WorkerRegistered: self._worker_registered,
            ev.WorkerRemoved: self._worker_removed,
            ev.DatasetRegistered: self._dataset_registered,
            ev.JobCreated: self._job_created,
            ev.ConsumerProcessJoined: self._consumer_process_joined,
            ev.IterationCreated: self._iteration_created,
            ev.TaskCreated: self._task_created,
            ev.TaskFinished: self._task_finished,
            ev.SplitProduced: self._split_produced,
            ev.RangesHanded: self._ranges_handed,
            ev.RangesAcked: self._ranges_acked,
            ev.OutputsAcked: self._outputs_acked,
            ev.ClientFenced: self._client_fenced,
            ev.IterationResumed: self._iteration_resumed,
            ev.DealResumed: self._deal_resumed,
            ev.SplitHandedAgain: self._split_handed_again,
            ev.SplitsCounted: self._splits_counted,
            ev.SplitsReleased: self._splits_released,
            ev.DealConsumerDone: self._deal_consumer_done,
            ev.ClientAcquired: self._client_acquired,
            ev.ClientReleased: self._client_released,
            ev.IterationCollected: self._iteration_collected,
            ev.ScheduleChanged: self._schedule_changed,
            ev.HorizonExtended: self._horizon_extended,
            ev.SaveStarted: self._save_started,
            ev.ChunkSaved: self._chunk_saved,
            ev.SaveEnded: self._save_ended,
        }

    def apply(self, event: ev.Event) -> None:
        """Applies one state change (also used to replay a journal)."""
        self._appliers[type(event)](event)
        for name in ("worker_id", "job_id", "iteration_id", "task_id", "client_id"):
            value = getattr(event, name, None)
            if isinstance(value, int) and value >= self.next_id:
                self.next_id = value + 1

    def validate(self) -> None:
        """Checks every invariant between the tables and their indexes.

        One check per family of them (``invariants.py``). Called after every
        dispatcher state test (``tests/dispatcher/conftest.py``).

        Raises:
            AssertionError: Naming each invariant that does not hold.
        """
        broken = [f"{name}: {d}" for name, d in invariants.violations(self)]
        if broken:
            raise AssertionError("records invalid: " + "; ".join(broken))

    def tracked(self, iteration: model.Iteration) -> bool:
        """Whether ``iteration`` tracks its elements (exactly once)."""
        return self.jobs[iteration.job_id].exactly_once

    # ------------------------------------------------------------ appliers

    def add_worker(self, worker: model.Worker) -> None:
        """Adds ``worker`` to the tables and their indexes."""
        self.workers[worker.worker_id] = worker
        self.workers_at.setdefault(worker.worker_address, set()).add(worker.worker_id)
        self.workers_in.setdefault(worker.local_process, set()).add(worker.worker_id)

    def add_task(self, task: model.Task) -> None:
        """Adds ``task`` to the tables (its iteration must exist) and the index."""
        self.tasks[task.task_id] = task
        self.iterations[task.iteration_id].tasks[task.task_id] = task
        self.worker_tasks.setdefault(task.worker_id, {})[task.task_id] = task

    def _drop_task(self, task_id: int) -> None:
        """Removes a task from ``tasks`` and the index (not from its iteration)."""
        task = self.tasks.pop(task_id)
        mine = self.worker_tasks[task.worker_id]
        del mine[task_id]
        if not mine:
            del self.worker_tasks[task.worker_id]

    def _worker_registered(self, e: ev.WorkerRegistered) -> None:
        worker = model.Worker(
            worker_id=e.worker_id,
            peer=e.peer,
            worker_address=e.worker_address,
            data_address=e.data_address,
            tags=list(e.tags),
            local_process=e.local_process,
            inproc_address=e.inproc_address,
            index=e.index,
        )
        self.add_worker(worker)

    def _worker_removed(self, e: ev.WorkerRemoved) -> None:
        worker = self.workers.pop(e.worker_id, None)
        if worker is not None:
            for index, key in (
                (self.workers_at, worker.worker_address),
                (self.workers_in, worker.local_process),
            ):
                index[key].discard(e.worker_id)
                if not index[key]:
                    del index[key]
        lost = list(self.worker_tasks.get(e.worker_id, {}).values())
        for task in lost:
            self._drop_task(task.task_id)
            iteration = self.iterations[task.iteration_id]
            del iteration.tasks[task.task_id]
            self._orphan(iteration, task)
            self._lose_splits(iteration, task.task_id)
            if iteration.schedule:  # coordinated: drop it from the horizon on
                start, task_ids = iteration.schedule[-1]
                remaining = [t for t in task_ids if t != task.task_id]
                self._schedule(iteration, max(start, iteration.horizon), remaining)
            self._check_finished(iteration)

    def _dataset_registered(self, e: ev.DatasetRegistered) -> None:
        self.datasets[e.dataset_id] = model.Dataset(
            e.dataset_id,
            e.pipeline,
            e.fingerprint,
            e.compression,
            e.element_spec,
            **derived(e.pipeline),
        )
        key = model.registration_key(e.fingerprint, e.compression)
        self.datasets_by_fingerprint.setdefault(key, e.dataset_id)
        if e.dataset_id.isdigit():
            self.next_id = max(self.next_id, int(e.dataset_id) + 1)

    def _job_created(self, e: ev.JobCreated) -> None:
        self.jobs[e.job_id] = model.Job(
            e.job_id,
            e.dataset_id,
            e.name,
            e.processing_mode,
            e.num_consumers,
            e.target_workers,
            e.cross_trainer_cache,
            consumer_processes=[e.local_process] if e.local_process else [],
            exactly_once=e.exactly_once,
            seed=e.seed,
            dealt=e.dealt,
            split_outputs=e.split_outputs,
        )
        if e.name is not None:
            self.named_jobs[(e.dataset_id, e.name)] = e.job_id
        self._remember(e.request_key, e.job_id)

    def _consumer_process_joined(self, e: ev.ConsumerProcessJoined) -> None:
        self.jobs[e.job_id].consumer_processes.append(e.local_process)

    def _remember(self, request_key: bytes, created_id: int) -> None:
        if request_key:
            self.created_by[request_key] = created_id
            while len(self.created_by) > REQUEST_KEYS_KEPT:
                del self.created_by[next(iter(self.created_by))]

    def _iteration_created(self, e: ev.IterationCreated) -> None:
        job = self.jobs[e.job_id]
        self.iterations[e.iteration_id] = model.Iteration(
            e.iteration_id, e.job_id, e.repetition
        )
        self.iterations[e.iteration_id].deal_epoch = job.epoch_base + e.repetition
        job.iterations[e.repetition] = e.iteration_id

    def _task_created(self, e: ev.TaskCreated) -> None:
        self.add_task(model.Task(e.task_id, e.iteration_id, e.worker_id))

    def _task_finished(self, e: ev.TaskFinished) -> None:
        task = self.tasks[e.task_id]
        task.finished = True
        self._check_finished(self.iterations[task.iteration_id])

    def _split_produced(self, e: ev.SplitProduced) -> None:
        iteration = self.iterations[e.iteration_id]
        iteration.split_repetition = e.repetition
        iteration.next_split = e.index + e.count
        task = iteration.tasks.get(e.task_id)
        if task is not None:
            task.last_split = model.LastSplit(
                e.request_id, e.repetition, e.index, e.count
            )
            task.last_keys = []
            task.unacked.add_all(e.keys)
        if self.jobs[iteration.job_id].dealt:
            for ordinal in range(e.index, e.index + e.count):
                iteration.owners[ordinal] = e.task_id

    def _ranges_handed(self, e: ev.RangesHanded) -> None:
        iteration = self.iterations[e.iteration_id]
        iteration.pending.remove_all(e.keys)
        task = iteration.tasks[e.task_id]
        task.unacked.add_all(e.keys)
        task.last_split = model.LastSplit(e.request_id, 0, 0, 0)
        task.last_keys = list(e.keys)

    def _ranges_acked(self, e: ev.RangesAcked) -> None:
        """Acknowledged keys are no task's to deliver any more, lost or not."""
        iteration = self.iterations[e.iteration_id]
        held = iteration.unacked(e.task_id)
        if held is None:
            return
        held.remove_all(e.keys)
        if iteration.progress:  # a root all acknowledged needs no mark
            acked = Ranges()
            acked.add_all(e.keys)
            for first in [k for k in iteration.progress if k in acked]:
                del iteration.progress[first]
        if not held and e.task_id in iteration.orphans:  # a lost task's, all delivered
            del iteration.orphans[e.task_id]
            self._check_finished(iteration)

    def _outputs_acked(self, e: ev.OutputsAcked) -> None:
        progress = self.iterations[e.iteration_id].progress
        for mark in e.marks:
            progress[mark[1]] = list(mark)  # keyed by the root's first key

    def _client_fenced(self, e: ev.ClientFenced) -> None:
        self._unwait(self.iterations[e.iteration_id], e.client_id, e.epoch)

    def _iteration_resumed(self, e: ev.IterationResumed) -> None:
        self.iterations[e.iteration_id].done.add_all(e.keys)

    def _deal_resumed(self, e: ev.DealResumed) -> None:
        iteration = self.iterations[e.iteration_id]
        iteration.deal_epoch = e.epoch
        iteration.deal_start = iteration.released = e.start_ordinal
        iteration.deal_stream = list(e.stream)
        self.jobs[iteration.job_id].epoch_base = e.epoch - iteration.repetition

    def _split_handed_again(self, e: ev.SplitHandedAgain) -> None:
        iteration = self.iterations[e.iteration_id]
        if e.ordinal in iteration.lost_splits:
            iteration.lost_splits.remove(e.ordinal)
        iteration.owners[e.ordinal] = e.task_id
        task = iteration.tasks[e.task_id]
        task.last_split = model.LastSplit(e.request_id, 0, e.ordinal, 1, e.skip)

    def _splits_counted(self, e: ev.SplitsCounted) -> None:
        counts = self.iterations[e.iteration_id].split_counts
        for i in range(0, len(e.counts) - 1, 2):
            counts[e.counts[i]] = e.counts[i + 1]

    def _splits_released(self, e: ev.SplitsReleased) -> None:
        iteration = self.iterations[e.iteration_id]
        iteration.released = max(iteration.released, e.below)
        for ordinal in [q for q in iteration.owners if q < iteration.released]:
            del iteration.owners[ordinal]
        iteration.lost_splits = [q for q in iteration.lost_splits if q >= e.below]

    def _deal_consumer_done(self, e: ev.DealConsumerDone) -> None:
        iteration = self.iterations[e.iteration_id]
        if e.consumer_index not in iteration.done_consumers:
            iteration.done_consumers.append(e.consumer_index)
        self._check_finished(iteration)

    def _lose_splits(self, iteration: model.Iteration, task_id: int) -> None:
        """Multi-rank reads: a lost task's unreleased splits are handed out again."""
        lost = [q for q, owner in iteration.owners.items() if owner == task_id]
        for ordinal in lost:
            del iteration.owners[ordinal]
        if not iteration.finished:
            iteration.lost_splits = sorted({*iteration.lost_splits, *lost})

    def _schedule_changed(self, e: ev.ScheduleChanged) -> None:
        self._schedule(self.iterations[e.iteration_id], e.start_round, list(e.task_ids))

    def _horizon_extended(self, e: ev.HorizonExtended) -> None:
        iteration = self.iterations[e.iteration_id]
        iteration.horizon = max(iteration.horizon, e.horizon)

    def _save_started(self, e: ev.SaveStarted) -> None:
        self.saves[e.save_id] = model.Save(
            e.save_id,
            e.path,
            e.dataset_id,
            e.compression,
            e.num_splits,
            e.started,
            by_jobs=e.by_jobs,
        )

    def _chunk_saved(self, e: ev.ChunkSaved) -> None:
        chunk = [e.name, e.elements, e.nbytes, e.crc32]
        self.saves[e.save_id].chunks.setdefault(e.ordinal, chunk)

    def _save_ended(self, e: ev.SaveEnded) -> None:
        save = self.saves[e.save_id]
        save.ended, save.error = True, e.error

    @staticmethod
    def _schedule(iteration: model.Iteration, start: int, task_ids: list[int]) -> None:
        """Adds an epoch; one starting where the last one does replaces it."""
        if iteration.schedule and iteration.schedule[-1][0] == start:
            iteration.schedule.pop()
        iteration.schedule.append((start, sorted(task_ids)))

    def _client_acquired(self, e: ev.ClientAcquired) -> None:
        self.clients[e.client_id] = model.Client(e.client_id, e.iteration_id, e.owner)
        self.iterations[e.iteration_id].clients.add(e.client_id)
        self._remember(e.request_key, e.client_id)

    def _client_released(self, e: ev.ClientReleased) -> None:
        client = self.clients.pop(e.client_id)
        iteration = self.iterations[client.iteration_id]
        iteration.clients.discard(e.client_id)
        self._unwait(iteration, e.client_id, None)
        if not iteration.finished:
            iteration.former_clients.add(e.client_id)
        self._retire_if_done(iteration)

    def _iteration_collected(self, e: ev.IterationCollected) -> None:
        """Job GC: drops an iteration's tasks and unlinks it from its job.

        Workers delete the tasks at their next heartbeat; the job's next
        iteration for that repetition starts afresh.
        """
        iteration = self.iterations[e.iteration_id]
        for task_id in iteration.tasks:
            self._drop_task(task_id)
        iteration.tasks.clear()
        iteration.collected = True
        job = self.jobs[iteration.job_id]
        if job.iterations.get(iteration.repetition) == e.iteration_id:
            del job.iterations[iteration.repetition]
        for client_id in iteration.former_clients:
            self.collected_clients[client_id] = e.iteration_id
        while len(self.collected_clients) > COLLECTED_CLIENTS_KEPT:
            del self.collected_clients[next(iter(self.collected_clients))]
        iteration.former_clients.clear()
        logger.info("iteration %d garbage collected", e.iteration_id)
        self._forget_if_anonymous(iteration)

    # ------------------------------------------------------------ consequences

    @staticmethod
    def _orphan(iteration: model.Iteration, task: model.Task) -> None:
        """A lost task's unacknowledged keys wait for its readers to fence it.

        Only while the iteration runs (a finished one delivered everything);
        with no reader left, they are pending at once.
        """
        if iteration.finished or not task.unacked:
            return
        iteration.task_epoch += 1
        waiting = sorted(iteration.clients)
        if not waiting:
            iteration.pending.add_all(task.unacked)
            return
        iteration.orphans[task.task_id] = model.Orphan(
            keys=Ranges(task.unacked), waiting=waiting, epoch=iteration.task_epoch
        )

    @staticmethod
    def _unwait(iteration: model.Iteration, client_id: int, epoch: int | None) -> None:
        """``client_id`` reads no lost task up to ``epoch`` (None: none at all).

        An orphan nobody waits for any more has its keys handed out again.
        """
        for task_id, orphan in list(iteration.orphans.items()):
            waiting = orphan["waiting"]
            if client_id in waiting and (epoch is None or orphan["epoch"] <= epoch):
                waiting.remove(client_id)
                if not waiting:
                    iteration.pending.add_all(orphan["keys"])
                    del iteration.orphans[task_id]

    def _check_finished(self, iteration: model.Iteration) -> None:
        """Finished: every task is, and no lost task's keys are still owed.

        Multi-rank reads: every consumer received all its elements.
        """
        tasks = iteration.tasks.values()
        owed = iteration.orphans or iteration.pending
        job = self.jobs[iteration.job_id]
        if job.dealt:
            over = len(iteration.done_consumers) >= (job.num_consumers or 1)
        else:
            over = not owed and bool(tasks) and all(t.finished for t in tasks)
        if not iteration.finished and over:
            iteration.finished = True
            logger.info("iteration %d finished", iteration.iteration_id)
            self._retire_if_done(iteration)

    def _retire_if_done(self, iteration: model.Iteration) -> None:
        """A finished iteration nobody reads gives its tasks back to the workers.

        So does an unnamed job's iteration as soon as its one consumer left,
        finished or not: nobody can join it again, so the workers' buffers
        are freed now, not at job GC.
        """
        if iteration.clients:
            return
        if iteration.finished or self.jobs[iteration.job_id].name is None:
            for task_id in iteration.tasks:
                self._drop_task(task_id)
            iteration.tasks.clear()
            self._forget_if_anonymous(iteration)

    def _forget_if_anonymous(self, iteration: model.Iteration) -> None:
        """Drops a retired or collected iteration of an unnamed job, and the job.

        An unnamed job belongs to one iterator and has one iteration: once that
        is over nothing can name it again, so the dispatcher's tables grow with
        the jobs running, not with every job ever run.
        """
        job = self.jobs[iteration.job_id]
        if job.name is None:
            del self.iterations[iteration.iteration_id]
            del self.jobs[job.job_id]


class EventSink(Protocol):
    """Where ``DispatcherState`` keeps events: collected, then kept by group.

    ``append`` is called for each event before it is applied; ``applied``
    once the events of a group (the requests handled together) are, and
    before any reply to them leaves the dispatcher.
    """

    def restore(self, now: float) -> ClusterRecords:
        """The records kept so far, every peer in them seen at ``now``.

        Called at start, and after ``applied`` failed (to roll back).
        """

    def append(self, event: ev.Event) -> None:
        """Collects ``event`` for the group (before it is applied)."""

    def applied(self, records: ClusterRecords) -> None:
        """Keeps the group's events, now applied to ``records`` (e.g. fsync).

        Raises ``UnavailableError`` if it cannot: none of the group's events
        is kept, and the caller rolls back to ``restore``.
        """


class NoJournal:
    """The sink without fault tolerance: a fresh state, events kept nowhere."""

    def restore(self, now: float) -> ClusterRecords:
        """Empty records: the dispatcher starts from nothing."""
        return ClusterRecords()

    def append(self, event: ev.Event) -> None:
        """Keeps nothing."""

    def applied(self, records: ClusterRecords) -> None:
        """Nothing to do."""
