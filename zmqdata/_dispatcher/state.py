"""The dispatcher's state machine: pure, no sockets, no clock of its own.

``handle(peer, message, now)`` applies one request and returns the messages to
send, as ``(peer, message)`` pairs; ``tick(now)`` does the periodic work
(worker and client liveness, job GC). Tests drive it with a fake clock.

>>> from zmqdata._config import DispatcherConfig
>>> from zmqdata._wire import messages as m
>>> state = DispatcherState(DispatcherConfig(worker_timeout_ms=1_000))
>>> [(peer, reply)] = state.handle(
...     b"w", m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1"), now=0.0)
>>> peer, reply.worker_id
(b'w', 1)
>>> state.tick(now=0.5), len(state.workers)
([], 1)
>>> state.tick(now=1.5), len(state.workers)
([], 0)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import model, snapshot
from zmqdata._dispatcher.journal import Journal
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._version import __version__
from zmqdata._wire import messages as m
from zmqdata._wire.modes import STATIC, ShardingPolicy
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    ZmqDataError,
    to_code,
)

logger = logging.getLogger(__name__)

Outgoing = tuple[bytes, m.Message]
Handler = Callable[[bytes, Any, float], list[Outgoing]]

OFF, DYNAMIC = ShardingPolicy.OFF, ShardingPolicy.DYNAMIC
PORT_PLACEHOLDER = "%port%"
ROUND_MARGIN = 1024
"""Coordinated reads: rounds promised ahead of the furthest consumer."""
MAX_SPLIT_SIZE = 256
SPLITS_PER_PASS = 64


def split_size(num_elements: int) -> int:
    """Elements per DYNAMIC split: about ``SPLITS_PER_PASS`` splits, 1..256 each."""
    return max(1, min(MAX_SPLIT_SIZE, num_elements // SPLITS_PER_PASS))


def mode_name(mode: int) -> str:
    """``parallel_epochs`` / ``distributed_epoch`` or the ShardingPolicy name."""
    try:
        return ShardingPolicy(mode).display_name
    except ValueError:
        return str(mode)


def _check_endpoint(name: str, endpoint: str) -> None:
    protocol, sep, address = endpoint.partition("://")
    port = address.rpartition(":")[2]
    if (
        not sep
        or protocol not in ("tcp", "ipc", "inproc")
        or not address
        or (protocol == "tcp" and not (port.isdigit() and 0 < int(port) < 65536))
    ):
        raise InvalidArgumentError(
            f"register_worker.{name}: expected tcp://host:port, ipc://path or "
            f"inproc://name, got {endpoint!r:.200}"
        )


def _check_infinite(dataset: model.Dataset, feature: str) -> None:
    """Coordinated reads and the cross-trainer cache need an endless dataset."""
    cardinality = dataset.cardinality
    if cardinality >= 0:
        raise InvalidArgumentError(
            f"{feature} requires a dataset with infinite cardinality, got one with "
            f"{cardinality} elements: add .repeat()"
        )


def _reads_local_processes(job: model.Job) -> bool:
    """Whether a job gives tasks only to its consumers' processes' workers.

    That is an OFF or DYNAMIC job read with ``target_workers="LOCAL"``;
    static sharding reads local workers too, but shards over the fixed list.
    """
    return job.target_workers == "LOCAL" and job.processing_mode in (OFF, DYNAMIC)


def _host_port(address: str) -> tuple[str, str | None]:
    """``"host:port"`` -> ``(host, port)``; ``"host"`` -> ``(host, None)``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or "]" in port:  # no port (also a bare [v6] address)
        return address, None
    return host, port


def worker_index(
    address: str, worker_addresses: tuple[str, ...] | None, taken: set[int]
) -> int | None:
    """Where a worker advertising ``address`` sits in ``worker_addresses``.

    An entry equal to ``address`` wins; otherwise the first entry not ``taken``
    by a live worker whose host matches and whose port is ``%port%`` or absent
    (any port). None if no entry fits: the worker gets no static-sharding task.

    >>> worker_index("h:7", ("h:5", "h:%port%", "h"), taken={1})
    2
    >>> worker_index("h:5", ("h:%port%", "h:5"), taken=set())
    1
    >>> worker_index("g:5", ("h:%port%",), taken=set()) is None
    True
    """
    entries = list(enumerate(worker_addresses or ()))
    for index, entry in entries:
        if entry == address and index not in taken:
            return index
    host = _host_port(address)[0]
    for index, entry in entries:
        entry_host, entry_port = _host_port(entry)
        if (
            index not in taken
            and entry_host == host
            and entry_port in (None, PORT_PLACEHOLDER)
        ):
            return index
    return None


def _describe(parameters: dict[str, Any]) -> str:
    shown = {**parameters, "processing_mode": mode_name(parameters["processing_mode"])}
    return "(" + ", ".join(f"{name}={value}" for name, value in shown.items()) + ")"


@dataclass
class WorkerSample:
    """A worker's last reported stats (liveness data, never an event).

    ``elements_per_s`` is the served-elements rate between its last two reports.
    """

    stats: dict[str, Any]
    time: float
    elements: int | None
    elements_per_s: float = 0.0


def _count(stats: dict[str, Any], name: str) -> int | None:
    value = stats.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class DispatcherState(ClusterRecords):
    """All cluster state; requests change it only through events (``apply``)."""

    def __init__(
        self,
        config: DispatcherConfig,
        journal: Journal | None = None,
        now: float = 0.0,
        incarnation: str = "",
    ) -> None:
        """Builds the state, replaying ``journal`` first when there is one.

        ``incarnation`` names this dispatcher's state: it changes when a
        dispatcher restarts without a journal, which consumers notice.
        """
        super().__init__()
        self.config = config
        self.incarnation = incarnation
        self._journal: Journal | None = None
        if journal is not None:
            data = journal.snapshot()
            if data is not None:
                snapshot.load(self, data)
            for event in journal.replay():
                ClusterRecords.apply(self, event)
            self._restart_clocks(now)
            self._journal = journal
            if journal.wants_compaction:  # e.g. a journal without checksums
                self._compact()
        self._gc_due: float | None = None  # next job GC check (scheduling, not state)
        # Metrics, not state: like heartbeat times, none of these is an event.
        self.worker_samples: dict[int, WorkerSample] = {}
        self.requests_total = 0
        self.errors_total = 0
        self.splits_total = 0
        self._handlers: dict[type[m.Message], Handler] = {
            m.RegisterWorker: self._register_worker,
            m.WorkerHeartbeat: self._worker_heartbeat,
            m.GetSplit: self._get_split,
            m.GetOrRegisterDataset: self._get_or_register_dataset,
            m.GetDatasetInfo: self._get_dataset_info,
            m.GetOrCreateJob: self._get_or_create_job,
            m.GetOrCreateIteration: self._get_or_create_iteration,
            m.ClientHeartbeat: self._client_heartbeat,
            m.ReleaseIterationClient: self._release_client,
            m.GetStatus: self._get_status,
        }

    def apply(self, event: ev.Event) -> None:
        """Journals the event (fsync) when fault tolerant, then applies it.

        The journal is compacted into a snapshot when that is due.
        """
        if self._journal is not None:
            self._journal.append(event)  # raises UnavailableError if it cannot
        super().apply(event)
        if self._journal is not None and self._journal.wants_compaction:
            self._compact()

    def _compact(self) -> None:
        """Snapshots the state into a new journal generation (retried if it fails)."""
        assert self._journal is not None
        try:
            self._journal.compact(snapshot.dump(self))
        except UnavailableError as error:  # the old generation stays whole
            logger.error("journal compaction failed, retried later: %s", error)

    def _restart_clocks(self, now: float) -> None:
        """After a replay every peer counts as just seen, as in tf.data.

        Times in the journal come from the previous process's clock.
        """
        for worker in self.workers.values():
            worker.last_seen = now
        for client in self.clients.values():
            client.last_seen = now
        for iteration in self.iterations.values():
            if iteration.last_client_released is not None:
                iteration.last_client_released = now

    # ------------------------------------------------------------ entry points

    def handle(self, peer: bytes, message: m.Message, now: float) -> list[Outgoing]:
        """Applies one request from ``peer``; returns what to send to whom."""
        handler = self._handlers.get(type(message))
        self.requests_total += 1
        try:
            if handler is None:
                raise InvalidArgumentError(
                    f"{message.TYPE!r} is not a dispatcher request"
                )
            return handler(peer, message, now)
        except Exception as error:  # a bug or hostile input: answer, never crash
            if not isinstance(error, ZmqDataError):
                logger.exception("dispatcher failed on %s", message.TYPE)
            code, text = to_code(error)
            reply = m.Error(request_id=message.request_id, code=code, message=text)
            self.errors_total += 1
            return [(peer, reply)]

    def tick(self, now: float) -> list[Outgoing]:
        """Periodic work: drops silent workers and clients; job GC.

        A journal that cannot be written (a full disk) leaves the state as it
        was; the same work is tried again at the next tick.
        """
        try:
            return self._tick(now)
        except UnavailableError as error:
            self.errors_total += 1
            logger.error("dispatcher tick postponed: %s", error)
            return []

    def _tick(self, now: float) -> list[Outgoing]:
        worker_timeout = self.config.worker_timeout_ms / 1000
        for worker in list(self.workers.values()):
            if now - worker.last_seen > worker_timeout:
                logger.info("worker %s timed out", worker.worker_address)
                self.apply(ev.WorkerRemoved(worker.worker_id))
        client_timeout = self.config.client_timeout_ms / 1000
        for client in list(self.clients.values()):
            if now - client.last_seen > client_timeout:
                logger.info("client %d timed out", client.client_id)
                self.apply(ev.ClientReleased(client.client_id, now))
        if self._gc_due is None or now >= self._gc_due:
            self._gc_due = now + self.config.job_gc_check_interval_ms / 1000
            self._collect_iterations(now)
        for worker_id in [w for w in self.worker_samples if w not in self.workers]:
            del self.worker_samples[worker_id]
        return []

    def _collect_iterations(self, now: float) -> None:
        """Job GC: drops unfinished iterations nobody read for ``job_gc_timeout_ms``.

        DYNAMIC iterations stay unless ``gc_dynamic_sharding_jobs``: a fresh one
        would hand out the splits again and break exactly-once visitation.
        """
        timeout = self.config.job_gc_timeout_ms / 1000
        for iteration in list(self.iterations.values()):
            released = iteration.last_client_released
            if (
                iteration.finished
                or iteration.collected
                or iteration.clients
                or released is None
                or now - released < timeout
            ):
                continue
            job = self.jobs[iteration.job_id]
            dynamic = job.processing_mode == DYNAMIC
            if dynamic and not self.config.gc_dynamic_sharding_jobs:
                continue
            logger.info(
                "iteration %d of job %s had no consumer for %.1f s: collecting it",
                iteration.iteration_id,
                job.name or job.job_id,
                now - released,
            )
            self.apply(ev.IterationCollected(iteration.iteration_id))

    # ------------------------------------------------------------ workers

    def _register_worker(
        self, peer: bytes, msg: m.RegisterWorker, now: float
    ) -> list[Outgoing]:
        # Consumers connect to these: a bad one must not reach them.
        _check_endpoint("data_address", msg.data_address)
        if msg.inproc_address:
            _check_endpoint("inproc_address", msg.inproc_address)
        for old in list(self.workers.values()):
            if old.worker_address != msg.worker_address:
                continue
            if old.peer == peer and old.data_address == msg.data_address:
                # The same worker again (a retry, or after a fault-tolerant
                # restart): it keeps its id and its tasks, splits included.
                old.last_seen = now
                return [(peer, self._registered(msg.request_id, old))]
            self.apply(ev.WorkerRemoved(old.worker_id))
        worker_id = self.next_id
        taken = {w.index for w in self.workers.values() if w.index is not None}
        index = worker_index(msg.worker_address, self.config.worker_addresses, taken)
        self.apply(
            ev.WorkerRegistered(
                worker_id=worker_id,
                peer=peer,
                worker_address=msg.worker_address,
                data_address=msg.data_address,
                tags=tuple(msg.tags),
                local_process=msg.local_process,
                inproc_address=msg.inproc_address,
                now=now,
                index=index,
            )
        )
        logger.info(
            "worker %s registered (version %s)", msg.worker_address, msg.version
        )
        worker = self.workers[worker_id]
        for iteration in list(self.iterations.values()):
            if (
                not iteration.finished
                and not iteration.collected
                and self._serves(self.jobs[iteration.job_id], worker)
            ):
                self._create_task(iteration.iteration_id, worker_id)
        return [(peer, self._registered(msg.request_id, worker))]

    def _registered(self, request_id: int, worker: model.Worker) -> m.Message:
        """The reply to a registration: the worker's id and its running tasks."""
        tasks = [
            task
            for task in self.tasks.values()
            if task.worker_id == worker.worker_id and not task.finished
        ]
        return m.RegisterWorkerReply(
            request_id=request_id,
            worker_id=worker.worker_id,
            worker_index=worker.index,
            tasks=[self._task_def(t) for t in tasks],
        )

    def _worker_heartbeat(
        self, peer: bytes, msg: m.WorkerHeartbeat, now: float
    ) -> list[Outgoing]:
        if not all(
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], int)
            and isinstance(entry[1], bool)
            for entry in msg.tasks
        ):
            raise InvalidArgumentError(
                "worker_heartbeat.tasks: expected [[task_id, finished], ...], "
                f"got {msg.tasks!r:.200}"
            )
        worker = self.workers.get(msg.worker_id)
        # Ids restart at 1 with a dispatcher that lost its state: a worker whose
        # id now names another worker must register again, not take its place.
        # (Workers keep one routing id for life, so reconnects keep the peer.)
        if worker is None or worker.peer != peer:
            raise NotFoundError(
                f"worker {msg.worker_id} is not registered; register again"
            )
        worker.last_seen = now  # liveness, not state: no event
        self._sample(worker.worker_id, msg.stats, now)  # metrics, not state either
        reported = set()
        for task_id, finished in msg.tasks:
            reported.add(task_id)
            task = self.tasks.get(task_id)
            if (
                task
                and finished
                and not task.finished
                and task.worker_id == worker.worker_id
            ):
                self.apply(ev.TaskFinished(task_id))
        assigned = {
            task.task_id: task
            for task in self.tasks.values()
            if task.worker_id == worker.worker_id
        }
        reply = m.WorkerHeartbeatReply(
            request_id=msg.request_id,
            new_tasks=[
                self._task_def(task)
                for task_id, task in assigned.items()
                if task_id not in reported and not task.finished
            ],
            tasks_to_delete=sorted(reported - assigned.keys()),
        )
        return [(peer, reply)]

    def _sample(self, worker_id: int, stats: dict[str, Any], now: float) -> None:
        """Keeps a worker's latest stats and its served-elements rate."""
        elements = _count(stats, "elements")
        previous = self.worker_samples.get(worker_id)
        sample = WorkerSample(stats, now, elements)
        if previous is not None:
            sample.elements_per_s = previous.elements_per_s
            if (
                elements is not None
                and previous.elements is not None
                and now > previous.time
            ):
                gained = max(0, elements - previous.elements)
                sample.elements_per_s = gained / (now - previous.time)
        self.worker_samples[worker_id] = sample

    def _get_split(self, peer: bytes, msg: m.GetSplit, now: float) -> list[Outgoing]:
        """Hands out the next split; a retried request gets the split it got before.

        Requests of one task are numbered (``request_id``); the task remembers
        the last split it was given (journaled with it), so a request sent
        again after a stall or a dispatcher restart never consumes a second
        split, and no split is handed out without being read.
        """
        iteration = self._iteration(msg.iteration_id)
        source = self.datasets[self.jobs[iteration.job_id].dataset_id].split_source
        if source is None:
            raise InvalidArgumentError(
                f"iteration {msg.iteration_id} has no splittable source"
            )
        task = iteration.tasks.get(msg.task_id)
        if task is None:
            raise NotFoundError(
                f"task {msg.task_id} is not a task of iteration {msg.iteration_id}"
            )
        op = source.definition
        size = split_size(op.cardinality(source, []))
        if task.last_split is not None and msg.request_id <= task.last_split[0]:
            if msg.request_id < task.last_split[0]:
                raise FailedPreconditionError(
                    f"split request {msg.request_id} of task {task.task_id} was "
                    "superseded by a later one"
                )
            split = op.split_at(source, size, task.last_split[2])  # type: ignore[attr-defined]
            return [(peer, m.GetSplitReply(request_id=msg.request_id, split=split))]
        # A later repetition starts its splits from 0; an earlier one is over.
        index = (
            iteration.next_split if msg.repetition == iteration.split_repetition else 0
        )
        if msg.repetition < iteration.split_repetition or index >= op.num_splits(  # type: ignore[attr-defined]
            source, size
        ):
            reply = m.GetSplitReply(
                request_id=msg.request_id,
                end_of_splits=True,
                repetition=iteration.split_repetition,
            )
            return [(peer, reply)]
        self.apply(
            ev.SplitProduced(
                iteration.iteration_id,
                msg.repetition,
                index,
                task.task_id,
                msg.request_id,
            )
        )
        self.splits_total += 1
        split = op.split_at(source, size, index)  # type: ignore[attr-defined]
        return [(peer, m.GetSplitReply(request_id=msg.request_id, split=split))]

    # ------------------------------------------------------------ datasets and jobs

    def _get_or_register_dataset(
        self, peer: bytes, msg: m.GetOrRegisterDataset, now: float
    ) -> list[Outgoing]:
        size, cap = len(msg.pipeline), self.config.max_pipeline_bytes
        if size + len(msg.element_spec) > cap:
            raise InvalidArgumentError(
                f"the pipeline is {size} bytes (with its element spec "
                f"{size + len(msg.element_spec)}), over the dispatcher's cap of "
                f"{cap} (DispatcherConfig.max_pipeline_bytes): read large data "
                "from files (e.g. list_files + map) instead of embedding it with "
                "from_tensor_slices / from_tensors"
            )
        fingerprint = graph.fingerprint(msg.pipeline)
        dataset_id = msg.dataset_id or self.datasets_by_fingerprint.get(fingerprint, "")
        existing = self.datasets.get(dataset_id)
        if existing is not None and existing.fingerprint != fingerprint:
            raise InvalidArgumentError(
                f"dataset id {dataset_id!r} is already registered with a different "
                "pipeline; datasets with the same id must be the same pipeline"
            )
        if existing is None:
            graph.deserialize(msg.pipeline, load_functions=False)  # reject garbage
            dataset_id = dataset_id or self._unused_dataset_id()
            self.apply(
                ev.DatasetRegistered(
                    dataset_id,
                    msg.pipeline,
                    fingerprint,
                    msg.compression,
                    msg.element_spec,
                )
            )
            logger.info(
                "dataset %s registered (%d bytes)", dataset_id, len(msg.pipeline)
            )
        reply = m.GetOrRegisterDatasetReply(
            request_id=msg.request_id, dataset_id=dataset_id
        )
        return [(peer, reply)]

    def _unused_dataset_id(self) -> str:
        """A fresh generated id, never one a client requested earlier."""
        candidate = self.next_id
        while str(candidate) in self.datasets:
            candidate += 1
        return str(candidate)

    def _dataset(self, dataset_id: str) -> model.Dataset:
        dataset = self.datasets.get(dataset_id)
        if dataset is None:
            raise NotFoundError(f"dataset id {dataset_id!r} is not registered")
        return dataset

    def _get_dataset_info(
        self, peer: bytes, msg: m.GetDatasetInfo, now: float
    ) -> list[Outgoing]:
        dataset = self._dataset(msg.dataset_id)
        reply = m.GetDatasetInfoReply(
            request_id=msg.request_id,
            element_spec=dataset.element_spec,
            compression=dataset.compression,
            cardinality=dataset.cardinality,
        )
        return [(peer, reply)]

    def _get_or_create_job(
        self, peer: bytes, msg: m.GetOrCreateJob, now: float
    ) -> list[Outgoing]:
        created_before = self.created_by.get(msg.request_key)
        if created_before in self.jobs:  # a retry of a request already done
            reply = m.GetOrCreateJobReply(
                request_id=msg.request_id, job_id=created_before
            )
            return [(peer, reply)]
        dataset = self._dataset(msg.dataset_id)
        if msg.processing_mode in STATIC:
            self._check_static(msg)
        elif msg.processing_mode not in (OFF, DYNAMIC):
            raise InvalidArgumentError(
                f"processing mode {msg.processing_mode!r} is not a ShardingPolicy"
            )
        if msg.processing_mode == DYNAMIC and dataset.split_source is None:
            find_split_source(graph.deserialize(dataset.pipeline, load_functions=False))
        if msg.num_consumers is not None:
            _check_infinite(dataset, "coordinated reads (consumer_index/num_consumers)")
        if msg.cross_trainer_cache:
            if msg.job_name is None:
                raise InvalidArgumentError("cross-trainer caching requires a job_name")
            if msg.num_consumers is not None:
                raise InvalidArgumentError(
                    "cross-trainer caching cannot be combined with coordinated reads "
                    f"(num_consumers={msg.num_consumers})"
                )
            _check_infinite(dataset, "cross-trainer caching")
        created = ev.JobCreated(
            self.next_id,
            msg.dataset_id,
            msg.job_name,
            msg.processing_mode,
            msg.num_consumers,
            msg.target_workers.upper(),
            msg.cross_trainer_cache,
            msg.request_key,
            msg.local_process,
        )
        existing_id = (
            self.named_jobs.get((msg.dataset_id, msg.job_name))
            if msg.job_name
            else None
        )
        if existing_id is None:
            self.apply(created)
            job_id = created.job_id
        else:
            have = model.job_parameters(self.jobs[existing_id])
            wanted = model.job_parameters(created)
            if have != wanted:
                raise InvalidArgumentError(
                    f"found an existing job named {msg.job_name!r} with different "
                    f"parameters: {_describe(have)} vs {_describe(wanted)}"
                )
            job_id = existing_id
        out: list[Outgoing] = [
            (peer, m.GetOrCreateJobReply(request_id=msg.request_id, job_id=job_id))
        ]
        return out + self._join_consumer_process(self.jobs[job_id], msg.local_process)

    def _join_consumer_process(
        self, job: model.Job, local_process: str
    ) -> list[Outgoing]:
        """A LOCAL job read from one more process: its workers there get tasks."""
        if (
            not _reads_local_processes(job)
            or not local_process
            or local_process in job.consumer_processes
        ):
            return []
        self.apply(ev.ConsumerProcessJoined(job.job_id, local_process))
        pushes: list[Outgoing] = []
        for iteration_id in job.iterations.values():
            iteration = self.iterations[iteration_id]
            if iteration.finished or iteration.collected:
                continue
            for worker in list(self.workers.values()):
                if worker.local_process == local_process:
                    task = self._create_task(iteration_id, worker.worker_id)
                    message = m.ProcessTask(tasks=[self._task_def(task)])
                    pushes.append((worker.peer, message))
        return pushes

    # ------------------------------------------------------------ iterations and clients

    def _get_or_create_iteration(
        self, peer: bytes, msg: m.GetOrCreateIteration, now: float
    ) -> list[Outgoing]:
        client = self.clients.get(self.created_by.get(msg.request_key, 0))
        if client is not None:  # a retry of a request already done
            return [(peer, self._iteration_state(client, msg.request_id))]
        job = self.jobs.get(msg.job_id)
        if job is None:
            raise NotFoundError(f"job {msg.job_id} does not exist")
        out: list[Outgoing] = []
        iteration_id = job.iterations.get(msg.repetition)
        if iteration_id is None:
            iteration_id = self.next_id
            self.apply(ev.IterationCreated(iteration_id, job.job_id, msg.repetition))
            tasks = [
                self._create_task(iteration_id, worker.worker_id)
                for worker in list(self.workers.values())
                if self._serves(job, worker)
            ]
            if job.num_consumers is not None:
                task_ids = tuple(t.task_id for t in tasks)
                self.apply(ev.ScheduleChanged(iteration_id, 0, task_ids))
                self.apply(ev.HorizonExtended(iteration_id, ROUND_MARGIN))
            for task in tasks:
                worker = self.workers[task.worker_id]
                out.append((worker.peer, m.ProcessTask(tasks=[self._task_def(task)])))
        client_id = self.next_id
        self.apply(ev.ClientAcquired(client_id, iteration_id, now, msg.request_key))
        out.insert(
            0, (peer, self._iteration_state(self.clients[client_id], msg.request_id))
        )
        return out

    def _client(self, client_id: int) -> model.Client:
        client = self.clients.get(client_id)
        collected = self.collected_clients.get(client_id)
        if client is None and collected is not None:
            raise FailedPreconditionError(
                f"iteration {collected} of client {client_id} has been garbage "
                "collected due to inactivity (no consumer for "
                f"{self.config.job_gc_timeout_ms} ms). Consider configuring the "
                "dispatcher with a higher job_gc_timeout_ms"
            )
        if client is None:
            raise NotFoundError(
                f"iteration client {client_id} is unknown (released, timed out, or the "
                "dispatcher restarted without fault_tolerant_mode)"
            )
        return client

    def _client_heartbeat(
        self, peer: bytes, msg: m.ClientHeartbeat, now: float
    ) -> list[Outgoing]:
        client = self._client(msg.client_id)
        client.last_seen = now  # liveness, not state: no event
        iteration = self.iterations[client.iteration_id]
        for task_id in msg.finished_tasks:
            task = iteration.tasks.get(task_id)
            if task is not None and not task.finished:
                self.apply(ev.TaskFinished(task_id))
        wanted = (msg.current_round or 0) + ROUND_MARGIN
        if iteration.schedule and wanted > iteration.horizon:
            self.apply(ev.HorizonExtended(iteration.iteration_id, wanted))
        return [(peer, self._iteration_state(client, msg.request_id))]

    def _iteration_state(
        self, client: model.Client, request_id: int
    ) -> m.IterationState:
        iteration = self.iterations[client.iteration_id]
        return m.IterationState(
            request_id=request_id,
            client_id=client.client_id,
            iteration_id=iteration.iteration_id,
            tasks=[self._task_info(task) for task in iteration.tasks.values()],
            finished=iteration.finished,
            rounds=[[start, list(task_ids)] for start, task_ids in iteration.schedule],
            horizon=iteration.horizon,
            incarnation=self.incarnation,
        )

    def _release_client(
        self, peer: bytes, msg: m.ReleaseIterationClient, now: float
    ) -> list[Outgoing]:
        if msg.client_id in self.clients:
            self.apply(ev.ClientReleased(msg.client_id, now))
        return [(peer, m.Ok(request_id=msg.request_id))]

    # ------------------------------------------------------------ tasks

    def _create_task(self, iteration_id: int, worker_id: int) -> model.Task:
        """A task for ``worker_id``.

        In a running coordinated iteration it joins the schedule at the horizon,
        a round no consumer has reached.
        """
        task_id = self.next_id
        self.apply(ev.TaskCreated(task_id, iteration_id, worker_id))
        iteration = self.iterations[iteration_id]
        if iteration.schedule:
            task_ids = (*iteration.schedule[-1][1], task_id)
            self.apply(ev.ScheduleChanged(iteration_id, iteration.horizon, task_ids))
        return self.tasks[task_id]

    def _iteration(self, iteration_id: int) -> model.Iteration:
        iteration = self.iterations.get(iteration_id)
        if iteration is None:
            raise NotFoundError(f"iteration {iteration_id} does not exist")
        return iteration

    def _check_static(self, msg: m.GetOrCreateJob) -> None:
        """Static sharding needs the fixed worker list and local reads."""
        mode = mode_name(msg.processing_mode)
        if not self.config.worker_addresses:
            raise InvalidArgumentError(
                f"static sharding (processing_mode={mode}) needs "
                "DispatcherConfig.worker_addresses, the fixed list of workers to "
                "shard over; this dispatcher has none"
            )
        if msg.target_workers.upper() != "LOCAL":
            raise InvalidArgumentError(
                f"Static sharding requires reading from local workers: "
                f"processing_mode={mode} needs target_workers='LOCAL', got "
                f"{msg.target_workers!r}"
            )

    def _serves(self, job: model.Job, worker: model.Worker) -> bool:
        """Whether ``worker`` gets tasks of ``job``.

        Static sharding: only listed workers. ``target_workers="LOCAL"``: only
        workers in a process that reads the job, so no split goes to a worker
        nobody reads.
        """
        if _reads_local_processes(job):
            return worker.local_process in job.consumer_processes
        return job.processing_mode not in STATIC or worker.index is not None

    def _task_def(self, task: model.Task) -> dict[str, Any]:
        iteration = self.iterations[task.iteration_id]
        job = self.jobs[iteration.job_id]
        dataset = self.datasets[job.dataset_id]
        static = job.processing_mode in STATIC
        worker = self.workers.get(task.worker_id)
        return {
            "num_workers": len(self.config.worker_addresses or ()) if static else None,
            "worker_index": worker.index if static and worker else None,
            "task_id": task.task_id,
            "iteration_id": iteration.iteration_id,
            "dataset_id": dataset.dataset_id,
            "pipeline": dataset.pipeline,
            "processing_mode": job.processing_mode,
            "compression": dataset.compression,
            "num_consumers": job.num_consumers,
            "cross_trainer_cache": job.cross_trainer_cache,
        }

    def _task_info(self, task: model.Task) -> dict[str, Any]:
        worker = self.workers[task.worker_id]
        return {
            "task_id": task.task_id,
            "worker_id": worker.worker_id,
            "worker_address": worker.worker_address,
            "data_address": worker.data_address,
            "local_process": worker.local_process,
            "inproc_address": worker.inproc_address,
        }

    # ------------------------------------------------------------ status

    def _get_status(self, peer: bytes, msg: m.GetStatus, now: float) -> list[Outgoing]:
        return [
            (peer, m.GetStatusReply(request_id=msg.request_id, status=self.status()))
        ]

    def status(self) -> dict[str, Any]:
        """What ``service.get_status`` and ``zmqdata status`` show."""
        task_counts: dict[int, int] = {}
        for task in self.tasks.values():
            if not task.finished:
                task_counts[task.worker_id] = task_counts.get(task.worker_id, 0) + 1
        return {
            "version": __version__,
            "workers": [
                self._worker_status(w, task_counts) for w in self.workers.values()
            ],
            "datasets": [
                {
                    "dataset_id": d.dataset_id,
                    "fingerprint": d.fingerprint,
                    "compression": d.compression,
                    "pipeline_bytes": len(d.pipeline),
                }
                for d in self.datasets.values()
            ],
            "jobs": [self._job_status(job) for job in self.jobs.values()],
        }

    def _worker_status(
        self, worker: model.Worker, task_counts: dict[int, int]
    ) -> dict[str, Any]:
        status = worker.status(task_counts.get(worker.worker_id, 0))
        sample = self.worker_samples.get(worker.worker_id)
        status["stats"] = {} if sample is None else sample.stats
        status["elements_per_s"] = 0.0 if sample is None else sample.elements_per_s
        return status

    def _split_progress(
        self, job: model.Job, iterations: list[model.Iteration]
    ) -> dict[str, int] | None:
        """DYNAMIC jobs: splits handed out of the current pass, over all iterations."""
        source = self.datasets[job.dataset_id].split_source
        if job.processing_mode != DYNAMIC or source is None:
            return None
        op = source.definition
        try:
            size = split_size(op.cardinality(source, []))
            total = int(op.num_splits(source, size))  # type: ignore[attr-defined]
        except Exception:  # status must not fail on an odd source
            return None
        return {
            "handed_out": sum(min(i.next_split, total) for i in iterations),
            "total": total * len(iterations),
        }

    def _job_status(self, job: model.Job) -> dict[str, Any]:
        iterations = [self.iterations[i] for i in job.iterations.values()]
        splits = self._split_progress(job, iterations)
        return {
            **({} if splits is None else {"splits": splits}),
            "job_id": job.job_id,
            "job_name": job.name,
            "dataset_id": job.dataset_id,
            "processing_mode": mode_name(job.processing_mode),
            "num_consumers": job.num_consumers,
            "cross_trainer_cache": job.cross_trainer_cache,
            "target_workers": job.target_workers,
            "num_iterations": len(iterations),
            "num_clients": sum(len(i.clients) for i in iterations),
            "finished": bool(iterations) and all(i.finished for i in iterations),
        }
