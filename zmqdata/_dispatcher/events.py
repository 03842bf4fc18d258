"""The dispatcher's state changes, as records.

Every change to ``DispatcherState`` is one of these events, built by a request
handler (or by ``tick``) and applied by ``DispatcherState.apply``. Events carry
every id and value they need, so applying the same sequence to a fresh state
rebuilds it: the fault-tolerant journal appends them before applying them and
replays them on restart. Liveness times (``now``) travel in the events that
create records, so a replayed state starts with every peer freshly seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerRegistered:
    worker_id: int
    peer: bytes
    worker_address: str
    data_address: str
    tags: tuple[str, ...]
    local_process: str
    inproc_address: str
    now: float
    index: int | None
    """Position of ``worker_address`` in ``DispatcherConfig.worker_addresses``."""


@dataclass(frozen=True, slots=True)
class WorkerRemoved:
    worker_id: int


@dataclass(frozen=True, slots=True)
class DatasetRegistered:
    dataset_id: str
    pipeline: bytes
    fingerprint: str
    compression: str | None
    element_spec: bytes


@dataclass(frozen=True, slots=True)
class JobCreated:
    job_id: int
    dataset_id: str
    name: str | None
    processing_mode: int
    num_consumers: int | None
    target_workers: str
    cross_trainer_cache: bool = False
    request_key: bytes = b""
    """The creating request's idempotency key (a retry finds this job)."""
    local_process: str = ""
    """The creating consumer's process (``target_workers="LOCAL"`` jobs)."""
    exactly_once: bool = False
    """DYNAMIC jobs: track every element (``model.Job.exactly_once``)."""
    seed: int | None = None
    """DYNAMIC jobs: the split order's seed (``model.Job.seed``)."""
    dealt: bool = False
    """Multi-rank reads (``model.Job.dealt``)."""
    split_outputs: bool = False
    """Exactly once by split outputs (``model.Job.split_outputs``)."""


@dataclass(frozen=True, slots=True)
class ConsumerProcessJoined:
    """A consumer in another process joined a ``target_workers="LOCAL"`` job."""

    job_id: int
    local_process: str


@dataclass(frozen=True, slots=True)
class IterationCreated:
    iteration_id: int
    job_id: int
    repetition: int


@dataclass(frozen=True, slots=True)
class TaskCreated:
    task_id: int
    iteration_id: int
    worker_id: int


@dataclass(frozen=True, slots=True)
class TaskFinished:
    task_id: int


@dataclass(frozen=True, slots=True)
class SplitProduced:
    """``count`` splits of ``repetition``, from ``index`` on, were handed out.

    (DYNAMIC.) They answered request ``request_id`` of task ``task_id``: the same request
    sent again is answered with the same splits. Exactly once: ``keys`` are
    the keys handed (those of a resumed read's ``done`` left out).
    """

    iteration_id: int
    repetition: int
    index: int
    task_id: int = 0
    request_id: int = 0
    count: int = 1
    keys: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RangesHanded:
    """Exactly once: pending ``keys`` (flat ranges) were handed to a task again.

    They answered request ``request_id`` of task ``task_id``, as ``SplitProduced``.
    """

    iteration_id: int
    task_id: int
    request_id: int
    keys: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RangesAcked:
    """Exactly once: a consumer acknowledged ``keys`` of task ``task_id``."""

    iteration_id: int
    task_id: int
    keys: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OutputsAcked:
    """Exactly once: consumers received 1-to-many ops' outputs up to ``marks``.

    Each a packed mark (``_wire/progress.py``) that says more than the one kept
    for its root.
    """

    iteration_id: int
    marks: tuple[Sequence[int], ...]


@dataclass(frozen=True, slots=True)
class ClientFenced:
    """Exactly once: a client reads no task lost up to ``epoch`` any more.

    Its final acknowledgements of them came before (``RangesAcked``).
    """

    iteration_id: int
    client_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class IterationResumed:
    """Exactly once: a resumed read, whose consumer had consumed ``keys`` before."""

    iteration_id: int
    keys: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DealResumed:
    """Multi-rank reads: a restored iteration starts at ``start_ordinal`` of ``epoch``.

    ``stream`` is ``deal.Stream.to_wire()``: the tokens no consumer had consumed.
    """

    iteration_id: int
    epoch: int
    start_ordinal: int
    stream: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SplitHandedAgain:
    """Multi-rank reads: a lost task's split ``ordinal`` went to task ``task_id``.

    Its first ``skip`` elements every consumer had; request ``request_id``.
    """

    iteration_id: int
    task_id: int
    request_id: int
    ordinal: int
    skip: int


@dataclass(frozen=True, slots=True)
class SplitsCounted:
    """Multi-rank reads: splits ended, ``counts`` = ``(ordinal, count, ...)``."""

    iteration_id: int
    counts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SplitsReleased:
    """Multi-rank reads: every consumer is past the splits below ``below``."""

    iteration_id: int
    below: int


@dataclass(frozen=True, slots=True)
class DealConsumerDone:
    """Multi-rank reads: consumer ``consumer_index`` received all its elements."""

    iteration_id: int
    consumer_index: int


@dataclass(frozen=True, slots=True)
class ClientAcquired:
    client_id: int
    iteration_id: int
    now: float
    request_key: bytes = b""
    """The joining request's idempotency key (a retry finds this client)."""
    owner: str = ""
    """CurveZMQ: the public key (Z85) that acquired it, the only one that may
    heartbeat or release it ("": a plain cluster, or a journal older than owners)."""


@dataclass(frozen=True, slots=True)
class ClientReleased:
    client_id: int
    now: float
    """When the client left. Job GC counts from when the dispatcher applying
    it heard of it (``liveness.py``): a replayed time is another process's
    clock. Kept: journals carry it."""


@dataclass(frozen=True, slots=True)
class IterationCollected:
    """Job GC: an unfinished iteration nobody read for ``job_gc_timeout_ms``."""

    iteration_id: int


@dataclass(frozen=True, slots=True)
class ScheduleChanged:
    """Coordinated reads: from ``start_round`` on, these tasks serve the rounds."""

    iteration_id: int
    start_round: int
    task_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HorizonExtended:
    """Coordinated reads: the schedule is promised not to change below ``horizon``."""

    iteration_id: int
    horizon: int


@dataclass(frozen=True, slots=True)
class SaveStarted:
    save_id: str
    path: str
    dataset_id: str
    compression: str | None
    num_splits: int
    started: float
    """Wall-clock time (``time.time()``)."""
    by_jobs: bool = False
    """A ``snapshot``'s save, written by the jobs that read it."""


@dataclass(frozen=True, slots=True)
class ChunkSaved:
    """A worker committed split ``ordinal`` of a save as one chunk."""

    save_id: str
    ordinal: int
    name: str
    elements: int
    nbytes: int
    crc32: int


@dataclass(frozen=True, slots=True)
class SaveEnded:
    """The save is over: finished (its manifest written), or failed (``error``)."""

    save_id: str
    error: str


Event = (
    WorkerRegistered
    | WorkerRemoved
    | DatasetRegistered
    | JobCreated
    | ConsumerProcessJoined
    | IterationCreated
    | TaskCreated
    | TaskFinished
    | SplitProduced
    | RangesHanded
    | RangesAcked
    | OutputsAcked
    | ClientFenced
    | IterationResumed
    | DealResumed
    | SplitHandedAgain
    | SplitsCounted
    | SplitsReleased
    | DealConsumerDone
    | ClientAcquired
    | ClientReleased
    | IterationCollected
    | ScheduleChanged
    | HorizonExtended
    | SaveStarted
    | ChunkSaved
    | SaveEnded
)
