"""The dispatcher's records: workers, datasets, jobs, iterations, tasks, clients."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

from zmqdata._dataset.node import Node
from zmqdata._wire.lineage import Ranges
from zmqdata._wire.modes import ShardingPolicy


def registration_key(fingerprint: str, compression: str | None) -> str:
    """What makes two registrations the same dataset: pipeline and compression.

    >>> registration_key("ab12", "AUTO") == registration_key("ab12", None)
    False
    """
    return f"{fingerprint}/{compression}"


@dataclass
class Worker:
    worker_id: int
    peer: bytes
    worker_address: str
    data_address: str
    tags: list[str]
    local_process: str
    inproc_address: str
    index: int | None = None
    """Position of ``worker_address`` in ``DispatcherConfig.worker_addresses``."""


@dataclass
class Dataset:
    dataset_id: str
    pipeline: bytes
    fingerprint: str
    compression: str | None
    element_spec: bytes
    split_source: Node | None
    """The splittable source (functions not loaded), or None if unsplittable."""
    cardinality: int
    """The pipeline's cardinality (``-1`` infinite, ``-2`` unknown)."""
    whole_batch: int | None = None
    """Multi-rank reads: splits are cut to a multiple of this (whole batches)."""
    snapshot: SnapshotTarget | None = None
    """Its ``snapshot`` (or ``cache``) before ``distribute``, if any."""
    epoch_elements: int = -1
    """Elements of a multi-rank epoch, where its cardinality says (``dealing.epoch_elements``)."""


@dataclass(frozen=True, slots=True)
class SnapshotTarget:
    """Where a pipeline's ``snapshot`` (or ``cache``) lies (``snapshot_saves.py``)."""

    op: str
    """``"snapshot"`` or ``"cache"``."""
    directory: str
    """Its folder (``""``: a ``cache()`` in memory)."""
    compression: str | None
    fingerprint: str
    """Of the ops before it: the manifest's ``dataset_id``."""
    split_size: int
    """Source elements per split, so per chunk (0: not splittable)."""
    element_spec: bytes
    """Of the ops before it (``specs.encode_spec``), for the manifest."""
    refused: str = ""
    """Why a ``distributed_epoch`` job over it is refused ("" if it is not)."""


@dataclass
class Job:
    job_id: int
    dataset_id: str
    name: str | None
    processing_mode: int
    num_consumers: int | None
    target_workers: str
    cross_trainer_cache: bool = False
    iterations: dict[int, int] = field(default_factory=dict)
    """repetition -> iteration id."""
    consumer_processes: list[str] = field(default_factory=list)
    """``target_workers="LOCAL"``: the processes its consumers read from."""
    exactly_once: bool = False
    """DYNAMIC: every source element is tracked until a consumer acknowledges it."""
    seed: int | None = None
    """DYNAMIC: each epoch's splits go out in an order drawn from (seed, epoch)."""
    dealt: bool = False
    """Multi-rank reads: consumers are dealt the elements in turn (``dealing.py``)."""
    epoch_base: int = 0
    """Multi-rank reads: iteration ``k`` is epoch ``epoch_base + k`` (a restored
    read continues the saved epoch)."""
    split_outputs: bool = False
    """Exactly once, a pipeline with a 1-to-many op: workers run each split
    alone up to it and keys number the outputs (``_wire/outputs.py``).
    Otherwise keys number source elements, tracked through the ops
    (``_wire/lineage.py``; so are all exactly-once jobs of a 0.1 journal)."""


JOB_PARAMETERS = (
    "processing_mode",
    "num_consumers",
    "target_workers",
    "cross_trainer_cache",
    "exactly_once",
    "seed",
)
"""What every consumer of a named job must agree on."""


def job_parameters(job: Any) -> dict[str, Any]:
    """The ``JOB_PARAMETERS`` of a ``Job`` (or of a ``JobCreated`` event)."""
    return {name: getattr(job, name) for name in JOB_PARAMETERS}


def mode_name(mode: int) -> str:
    """``parallel_epochs`` / ``distributed_epoch`` or the ShardingPolicy name.

    >>> mode_name(1), mode_name(3), mode_name(9)
    ('distributed_epoch', 'DATA', '9')
    """
    try:
        return ShardingPolicy(mode).display_name
    except ValueError:
        return str(mode)


class LastSplit(NamedTuple):
    """DYNAMIC: a task's last split request answered, so a retry gets the same.

    ``length`` fresh splits of ``repetition`` from ``start`` on; ``length`` 0:
    the keys ``Task.last_keys`` handed out again; ``skip`` (multi-rank reads):
    a lost ordinal handed again, of which every consumer has the first
    ``skip`` elements. A list in 0.1's snapshots, read back as this.
    """

    request_id: int
    repetition: int
    start: int
    length: int
    skip: int | None = None


@dataclass
class Task:
    task_id: int
    iteration_id: int
    worker_id: int
    finished: bool = False
    last_split: LastSplit | None = None
    last_keys: list[int] = field(default_factory=list)
    """Exactly once: the keys handed out again to the last request, if any."""
    unacked: Ranges = field(default_factory=Ranges)
    """Exactly once: the keys handed to this task that no consumer acknowledged."""


class Orphan(TypedDict):
    """Exactly once: a lost task's keys nobody acknowledged, fenced by its readers.

    Its ``keys`` are handed out again once every client in ``waiting`` has
    stopped reading the task: it echoed a ``task_epoch`` of at least ``epoch``
    (the iteration's after the loss), or left.
    """

    keys: Ranges
    waiting: list[int]
    """Client ids, sorted."""
    epoch: int


@dataclass
class Iteration:
    iteration_id: int
    job_id: int
    repetition: int
    tasks: dict[int, Task] = field(default_factory=dict)
    clients: set[int] = field(default_factory=set)
    finished: bool = False
    split_repetition: int = 0
    next_split: int = 0
    schedule: list[tuple[int, list[int]]] = field(default_factory=list)
    """Coordinated reads: ``(start_round, task ids)`` epochs, in order."""
    horizon: int = 0
    """Coordinated reads: the schedule never changes below this round."""
    former_clients: set[int] = field(default_factory=set)
    """Clients that left while unfinished (told apart if the iteration is collected)."""
    collected: bool = False
    """Job GC dropped it: no tasks, and the job's next iteration starts afresh."""
    pending: Ranges = field(default_factory=Ranges)
    """Exactly once: keys to hand out again (lost tasks', fenced)."""
    orphans: dict[int, Orphan] = field(default_factory=dict)
    """Exactly once: lost task id -> its unacknowledged keys, until fenced."""
    task_epoch: int = 0
    """Exactly once: how many tasks with unacknowledged keys it lost."""
    done: Ranges = field(default_factory=Ranges)
    """Exactly once, resumed reads: keys consumed before; never handed out."""
    progress: dict[int, list[int]] = field(default_factory=dict)
    """Exactly once: the first key of a root -> the latest mark acknowledged of
    the outputs a 1-to-many op made of it, packed (``_wire/progress.py``),
    while its keys are owed."""
    deal_epoch: int = 0
    """Multi-rank reads: the epoch whose split order this iteration follows."""
    deal_start: int = 0
    """Multi-rank reads: the first split ordinal (a restored read's anchor)."""
    deal_stream: list[int] = field(default_factory=lambda: [0])
    """Multi-rank reads: the tokens dealt (``deal.Stream.to_wire``)."""
    owners: dict[int, int] = field(default_factory=dict)
    """Multi-rank reads: split ordinal -> the task holding it (unreleased ones)."""
    lost_splits: list[int] = field(default_factory=list)
    """Multi-rank reads: ordinals of lost tasks, to hand out again (sorted)."""
    released: int = 0
    """Multi-rank reads: every consumer is past the splits below this ordinal."""
    split_counts: dict[int, int] = field(default_factory=dict)
    """Multi-rank reads: split ordinal -> how many elements it makes."""
    done_consumers: list[int] = field(default_factory=list)
    """Multi-rank reads: consumer indices that received all their elements."""

    def owes(self, key: int) -> bool:
        """Whether ``key`` is handed to a task or waits to be, unacknowledged."""
        return (
            key in self.pending
            or any(key in task.unacked for task in self.tasks.values())
            or any(key in orphan["keys"] for orphan in self.orphans.values())
        )

    def marks_in(self, keys: Sequence[int]) -> list[list[int]]:
        """The marks of ``progress`` whose root starts among ``keys`` (flat ranges)."""
        handed = Ranges()
        handed.add_all(keys)
        return [mark for first, mark in self.progress.items() if first in handed]

    def unacked(self, task_id: int) -> Ranges | None:
        """The unacknowledged keys of task ``task_id``, live or lost (None: neither)."""
        task = self.tasks.get(task_id)
        if task is not None:
            return task.unacked
        orphan = self.orphans.get(task_id)
        return None if orphan is None else orphan["keys"]


@dataclass
class Client:
    client_id: int
    iteration_id: int
    owner: str = ""
    """CurveZMQ: the public key that acquired it (``ClientAcquired.owner``)."""


@dataclass
class Save:
    """A ``distributed_save``: its dataset's splits written as chunks under ``path``."""

    save_id: str
    path: str
    dataset_id: str
    compression: str | None
    num_splits: int
    started: float
    """Wall-clock time it started (``time.time()``: its ETA in the status)."""
    chunks: dict[int, list[Any]] = field(default_factory=dict)
    """Split ordinal -> ``[name, elements, bytes, crc32]`` of its chunk, committed."""
    ended: bool = False
    error: str = ""
    """Why it failed ("" while running, and once finished)."""
    by_jobs: bool = False
    """A ``snapshot``'s: the jobs that read its pipeline write it as they
    run (``snapshot_saves.py``), not save runners."""
