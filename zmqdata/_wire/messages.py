"""Control messages: typed dataclasses, one explicit table, msgpack on the wire.

Every message travels as a msgpack map ``{"v": version, "t": TYPE,
**fields}``. Names follow tf.data service's RPCs as request/reply pairs. Decoding
checks the version, the type and each field's runtime type, and raises
``InvalidArgumentError`` (or ``FailedPreconditionError`` for a version it does
not accept) instead of letting bad input reach a handler.

Messages are not frozen dataclasses: they are built twice per request on the
dispatcher's hot path, and a frozen one's ``__init__`` (``object.__setattr__``
per field) costs 3.4x a plain one's. Treat them as values all the same:
``dataclasses.replace`` to change one.

Versions ``OLDEST_PROTOCOL_VERSION`` to ``PROTOCOL_VERSION`` are accepted
(``accepts``); a message encoded for an older peer leaves out what ``ADDED_IN``
says came later (``versions.py`` picks the version to speak to each peer).

>>> message = GetSplit(request_id=7, iteration_id=3, repetition=0, max_splits=4)
>>> decode(encode(message))
GetSplit(request_id=7, iteration_id=3, repetition=0, task_id=0, max_splits=4, counts=[])
"""

from __future__ import annotations

import os
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

import msgpack

from zmqdata._version import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION
from zmqdata._wire.budget import COUNT_FROM, UnpackBudget, count_values
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

_MAX_MESSAGE_BYTES = 1 << 30
MAX_VALUES = 1 << 18
"""The most lists, maps, list items and map entries a control message of
``COUNT_FROM`` bytes or more may hold, in all: a message of empty maps or short
strings would otherwise unpack to about 70 times its size in Python objects."""
ADDED_IN: dict[str, int] = {
    "elements.progress": 6,
    "client_heartbeat.progress": 6,
    "get_split_reply.progress": 6,
    "worker_heartbeat_reply.trace": 6,
    "iteration_state.trace": 6,
    "client_heartbeat.share_traces": 6,
    "start_trace": 6,
    "start_trace_reply": 6,
    "get_trace": 6,
    "get_trace_reply": 6,
    "trace_spans": 6,
    "client_heartbeat.consumed": 6,
    "client_heartbeat.consumer_index": 6,
    "worker_heartbeat.pipelines": 6,
    "worker_heartbeat_reply.saves": 6,
    "start_save": 6,
    "start_save_reply": 6,
    "get_save_split": 6,
    "get_save_split_reply": 6,
    "worker_heartbeat.base": 6,
    "register_worker_reply.heartbeat_max_ms": 6,
    "worker_heartbeat_reply.resend": 6,
    "iteration_state.revision": 6,
    "iteration_state.unchanged": 6,
    "client_heartbeat.known": 6,
    "iteration_state.fence_timeout_ms": 6,
    "get_split_reply.period_ms": 6,
}
"""What a protocol version after ``OLDEST_PROTOCOL_VERSION`` added, with that
version: ``"type"`` for a whole message, ``"type.field"`` for a field (with a
default). A message encoded for an older peer leaves the fields out."""


@dataclass(slots=True, kw_only=True)
class Message:
    """Base of every control message; ``request_id`` pairs a reply with its request."""

    TYPE: ClassVar[str] = ""
    request_id: int = 0


# ------------------------------------------------------------------ generic replies


@dataclass(slots=True, kw_only=True)
class Error(Message):
    """A failed request: ``code`` is a ``zmqdata.errors`` code."""

    TYPE: ClassVar[str] = "error"
    code: str
    message: str


@dataclass(slots=True, kw_only=True)
class Ok(Message):
    """A request done, nothing to return."""

    TYPE: ClassVar[str] = "ok"


# ------------------------------------------------------------------ workers


@dataclass(slots=True, kw_only=True)
class RegisterWorker(Message):
    """A worker announces itself and the data endpoint it serves."""

    TYPE: ClassVar[str] = "register_worker"
    worker_address: str
    data_address: str
    tags: list[str] = field(default_factory=list)
    version: str = ""
    local_process: str = ""
    inproc_address: str = ""


@dataclass(slots=True, kw_only=True)
class RegisterWorkerReply(Message):
    TYPE: ClassVar[str] = "register_worker_reply"
    worker_id: int
    worker_index: int | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    heartbeat_max_ms: int = 0
    """The longest interval a quiet worker may leave between heartbeats (a
    quarter of ``worker_timeout_ms``; 0: its own interval, always)."""


@dataclass(slots=True, kw_only=True)
class WorkerHeartbeat(Message):
    """A worker's liveness and its tasks' states ``[[task_id, finished], ...]``.

    ``stats``: the worker's serving counters and buffer fill (see
    ``zmqdata/_worker/stats.py: worker_stats``); liveness data, not state.
    """

    TYPE: ClassVar[str] = "worker_heartbeat"
    worker_id: int
    tasks: list[list[Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    draining: bool = False
    """The worker is leaving: it takes no new task (autoscaling, SIGTERM)."""
    leaving: bool = False
    """The worker has drained and stops now: its tasks are lost at once."""
    pipelines: list[str] = field(default_factory=list)
    """Fingerprints of the pipelines the worker holds: task definitions of
    their datasets come without them (``_worker/pipelines.py``). With a
    ``base``, empty means the same as that heartbeat's."""
    base: int = 0
    """0: ``stats`` and ``pipelines`` are complete. Else the request id of the
    heartbeat they are a delta against, the last one answered
    (``_wire/deltas.py``)."""


MAX_PIPELINES_HELD = 64
"""The most pipelines a worker's heartbeat may say it holds."""
MAX_FINGERPRINT_CHARS = 64
"""The longest pipeline fingerprint a heartbeat may name (``graph.fingerprint``: 32)."""


@dataclass(slots=True, kw_only=True)
class WorkerHeartbeatReply(Message):
    TYPE: ClassVar[str] = "worker_heartbeat_reply"
    new_tasks: list[dict[str, Any]] = field(default_factory=list)
    tasks_to_delete: list[int] = field(default_factory=list)
    trace: list[int] = field(default_factory=list)
    """A trace window is open: ``[trace_id, until_ns, now_ns]``, the
    dispatcher's clock (``_runtime/spans.py``); empty otherwise."""
    saves: list[dict[str, Any]] = field(default_factory=list)
    """The saves running (``tasks.SaveDef`` maps): the worker writes chunks
    of each (``_worker/saver.py``) until one is no longer listed."""
    resend: bool = False
    """The heartbeat's ``base`` is not the one the dispatcher holds: the next
    heartbeat carries everything."""


@dataclass(slots=True, kw_only=True)
class ProcessTask(Message):
    """Pushed by the dispatcher: start these tasks now (heartbeats are the fallback)."""

    TYPE: ClassVar[str] = "process_task"
    tasks: list[dict[str, Any]]


@dataclass(slots=True, kw_only=True)
class GetSplit(Message):
    """A DYNAMIC task asks for its next splits of ``repetition``.

    Idempotent: ``request_id`` counts the task's split requests, and a request
    sent again (a retry after a stall or a dispatcher restart) gets the splits
    it was given the first time.
    """

    TYPE: ClassVar[str] = "get_split"
    iteration_id: int
    repetition: int
    task_id: int = 0
    max_splits: int = 1
    """At most this many consecutive splits (cheap splits, such as one file
    each, are asked for several at a time: one round trip, not one each)."""
    counts: list[int] = field(default_factory=list)
    """Multi-rank reads: ``[ordinal, count, ...]`` of splits this task finished."""


@dataclass(slots=True, kw_only=True)
class GetSplitReply(Message):
    TYPE: ClassVar[str] = "get_split_reply"
    splits: list[list[int]] = field(default_factory=list)
    """One or more splits ``[repetition, lo, hi]``: source elements ``lo`` to
    ``hi`` (excluded; files by position) of that repetition. Consecutive new
    splits, or parts of splits handed out again (a lost worker's); none with
    ``end_of_splits``, none without it: nothing to hand out now, ask again."""
    end_of_splits: bool = False
    repetition: int = 0
    """The repetition the dispatcher is handing out splits of now."""
    progress: list[list[int]] = field(default_factory=list)
    """Exactly once: with a lost task's keys, the latest marks acknowledged of
    the roots among them (``_wire/progress.py``): outputs not to make again."""
    released: int = 0
    """Multi-rank reads: every consumer is past the splits below this ordinal
    (a worker drops what it still holds of them). Splits are then
    ``[repetition, lo, hi, ordinal, skip]``: the first ``skip`` elements the
    split makes are not kept (every consumer has them)."""
    period_ms: int = 0
    """Ask no more often than this: take enough splits to last it (a large
    fleet's workers ask less often, each for more; ``_dispatcher/splits.py``
    ``split_period_ms``). 0: as often as the round trip makes worthwhile."""


# ------------------------------------------------------------------ clients


@dataclass(slots=True, kw_only=True)
class GetOrRegisterDataset(Message):
    TYPE: ClassVar[str] = "get_or_register_dataset"
    pipeline: bytes
    dataset_id: str | None = None
    compression: str | None = None
    element_spec: bytes = b""


@dataclass(slots=True, kw_only=True)
class GetOrRegisterDatasetReply(Message):
    TYPE: ClassVar[str] = "get_or_register_dataset_reply"
    dataset_id: str


@dataclass(slots=True, kw_only=True)
class GetDatasetInfo(Message):
    TYPE: ClassVar[str] = "get_dataset_info"
    dataset_id: str


@dataclass(slots=True, kw_only=True)
class GetDatasetInfoReply(Message):
    TYPE: ClassVar[str] = "get_dataset_info_reply"
    element_spec: bytes
    compression: str | None
    cardinality: int = -2
    """The dataset's cardinality (-1 infinite, -2 unknown)."""


def request_key() -> bytes:
    """A fresh idempotency key: a retried request carries the same one."""
    return os.urandom(16)


@dataclass(slots=True, kw_only=True)
class GetOrCreateJob(Message):
    """Finds or creates a job; ``request_key`` makes a retry find the job it made.

    ``local_process``: the consumer's process (``target_workers="LOCAL"`` jobs
    give tasks only to workers in their consumers' processes).
    """

    TYPE: ClassVar[str] = "get_or_create_job"
    request_key: bytes = field(default_factory=request_key)
    local_process: str = ""
    dataset_id: str
    processing_mode: int
    job_name: str | None = None
    num_consumers: int | None = None
    target_workers: str = "AUTO"
    cross_trainer_cache: bool = False
    exactly_once: bool = True
    """DYNAMIC: track every element, so a lost worker's undelivered elements
    are handed out again (docs/reliability.md)."""
    seed: int | None = None
    """DYNAMIC: hand each epoch's splits out in an order drawn from (seed, epoch)."""


@dataclass(slots=True, kw_only=True)
class GetOrCreateJobReply(Message):
    TYPE: ClassVar[str] = "get_or_create_job_reply"
    job_id: int


@dataclass(slots=True, kw_only=True)
class GetOrCreateIteration(Message):
    """Joins iteration ``repetition`` of a job; the reply names this consumer.

    A retry (same ``request_key``) is answered as the consumer it created.
    """

    TYPE: ClassVar[str] = "get_or_create_iteration"
    job_id: int
    repetition: int
    request_key: bytes = field(default_factory=request_key)
    resume: list[int] | None = None
    """Resuming a saved read: the keys (``lineage``, flat ranges) its consumer
    had consumed; a new iteration hands out only the others."""
    resume_deal: list[int] | None = None
    """Resuming a multi-rank read: ``deal.Resume.to_wire()`` of the merged position."""


@dataclass(slots=True, kw_only=True)
class IterationState(Message):
    """The tasks a consumer should read and whether the iteration is over."""

    TYPE: ClassVar[str] = "iteration_state"
    client_id: int
    iteration_id: int
    tasks: list[dict[str, Any]]
    finished: bool
    rounds: list[list[Any]] = field(default_factory=list)
    """Coordinated reads: ``[[start_round, [task_id, ...]], ...]``, the task set
    that serves rounds from ``start_round`` on (round r: task ``(r - start) % n``)."""
    horizon: int = 0
    """Coordinated reads: no round at or past this will ever change schedule."""
    incarnation: str = ""
    """Names the dispatcher's state; a change means it restarted and forgot it."""
    task_epoch: int = 0
    """Exactly once: counts the tasks the iteration lost; a consumer echoes the
    last it applied, which tells the dispatcher it reads none of them any more."""
    deal: dict[str, Any] = field(default_factory=dict)
    """Multi-rank reads: ``epoch``, ``splits`` (how many this epoch has),
    ``stream`` (``deal.Stream.to_wire``), ``start`` (first ordinal), ``owners``
    (``[ordinal, task_id, ...]`` of the splits handed out and not released)."""
    trace: list[int] = field(default_factory=list)
    """As ``WorkerHeartbeatReply.trace``, to consumers that share traces."""
    revision: int = 0
    """Names what this state tells (tasks, end, schedule, epoch): a consumer
    echoes it (``ClientHeartbeat.known``) and is answered ``unchanged`` while
    it holds."""
    unchanged: bool = False
    """The consumer's ``known`` revision is current: ``tasks``, ``rounds`` and
    ``deal`` are left empty; the rest is as in a full state."""
    fence_timeout_ms: int = 0
    """The dispatcher's ``fence_timeout_ms`` (0: not said): a reader silent
    for half of it may have been fenced, and a quiet one heartbeats sooner."""


@dataclass(slots=True, kw_only=True)
class ClientHeartbeat(Message):
    """A consumer's liveness, with the tasks it has read to the end."""

    TYPE: ClassVar[str] = "client_heartbeat"
    client_id: int
    finished_tasks: list[int] = field(default_factory=list)
    current_round: int | None = None
    """Coordinated reads: the highest round this consumer has asked for."""
    acked: list[list[int]] = field(default_factory=list)
    """Exactly once: ``[task_id, lo, hi, ...]``, the keys of elements received."""
    progress: list[list[int]] = field(default_factory=list)
    """Exactly once: the marks of elements received (``Elements.progress``)."""
    task_epoch: int = 0
    """Exactly once: the ``IterationState.task_epoch`` this consumer applied."""
    starved: float = 0.0
    """Autoscaling: the fraction of the time since the last heartbeat that the
    trainer waited with nothing buffered (demand the workers did not meet)."""
    deal: list[int] = field(default_factory=list)
    """Multi-rank reads: ``[consumer_index, ordinal, index]``, the first element
    this consumer has not received (``ordinal`` = the epoch's splits: all)."""
    consumed: int = 0
    """Observability: the elements the trainer has taken (its rate and lag)."""
    consumer_index: int | None = None
    """Observability: the consumer's rank in its job, if it has one."""
    share_traces: bool = False
    """The trainer opted in to traces (``service.share_traces``): tell it of windows."""
    known: int = 0
    """The ``IterationState.revision`` this consumer holds (0: none)."""


@dataclass(slots=True, kw_only=True)
class ReleaseIterationClient(Message):
    TYPE: ClassVar[str] = "release_iteration_client"
    client_id: int
    acked: list[list[int]] = field(default_factory=list)
    """As ``ClientHeartbeat.acked``: what was received since the last heartbeat."""
    deal: list[int] = field(default_factory=list)
    """As ``ClientHeartbeat.deal``."""


@dataclass(slots=True, kw_only=True)
class GetStatus(Message):
    TYPE: ClassVar[str] = "get_status"


@dataclass(slots=True, kw_only=True)
class GetStatusReply(Message):
    TYPE: ClassVar[str] = "get_status_reply"
    status: dict[str, Any]


# ------------------------------------------------------------------ traces


@dataclass(slots=True, kw_only=True)
class StartTrace(Message):
    """Opens a trace window of ``seconds`` (``zmqdata trace``; docs/tracing.md)."""

    TYPE: ClassVar[str] = "start_trace"
    seconds: float


@dataclass(slots=True, kw_only=True)
class StartTraceReply(Message):
    TYPE: ClassVar[str] = "start_trace_reply"
    trace_id: int
    start_ns: int
    until_ns: int
    """The window, in the dispatcher's clock."""


@dataclass(slots=True, kw_only=True)
class GetTrace(Message):
    """What window ``trace_id`` holds, its spans from ``offset`` on."""

    TYPE: ClassVar[str] = "get_trace"
    trace_id: int
    offset: int = 0


@dataclass(slots=True, kw_only=True)
class GetTraceReply(Message):
    TYPE: ClassVar[str] = "get_trace_reply"
    trace_id: int
    start_ns: int
    until_ns: int
    done: bool
    """The window is over and every peer asked has reported (or is gone)."""
    peers: list[dict[str, Any]]
    """A span's peer is its index here (``_dispatcher/traces.py: Peer.as_dict``)."""
    offset: int
    spans: list[list[Any]]
    """``[peer, name, cat, tid, start_ns, end_ns(, args)]`` from ``offset`` on."""
    total: int
    """How many spans the window holds now."""
    dropped: int = 0
    """Spans the dispatcher did not keep (over its bound for a window)."""


@dataclass(slots=True, kw_only=True)
class TraceSpans(Message):
    """A peer's spans of window ``trace_id``, in the dispatcher's clock, chunked.

    From a worker (``worker_id``) or a consumer (``client_id``); ``offset``
    numbers the chunk's first span among the peer's; ``last`` ends its report.
    """

    TYPE: ClassVar[str] = "trace_spans"
    trace_id: int
    worker_id: int = 0
    client_id: int = 0
    offset: int = 0
    spans: list[list[Any]] = field(default_factory=list)
    """``[name, cat, tid, start_ns, end_ns(, args)]``."""
    last: bool = False
    threads: list[list[Any]] = field(default_factory=list)
    """With ``last``: ``[tid, name]`` of the threads the spans name."""
    dropped: int = 0
    """With ``last``: spans the peer did not keep (over its bound)."""
    clock: list[int] = field(default_factory=list)
    """``[offset_ns, rtt_ns]``: the peer's clock estimate (dispatcher minus peer)."""


# ------------------------------------------------------------------ data plane


@dataclass(slots=True, kw_only=True)
class GetElements(Message):
    """A consumer asks a worker for up to ``max_elements`` of one task."""

    TYPE: ClassVar[str] = "get_elements"
    task_id: int
    client_id: int
    max_elements: int
    rounds: list[int] = field(default_factory=list)
    """Coordinated reads: the rounds asked for, answered together in this order."""
    consumer_index: int | None = None
    trainer_id: str | None = None
    """Cross-trainer cache: whose read position to serve from."""
    ticket: bytes = b""
    """CurveZMQ: the task's read ticket from ``IterationState`` (see auth.read_ticket)."""
    shm_probe: str = ""
    """Same-host reads: the consumer's presence file in /dev/shm; a worker that
    can open it may answer with shared-memory segments (``_runtime/shm.py``)."""
    shm_done: list[str] = field(default_factory=list)
    """Segments this worker sent that the consumer has dropped: unlink them."""
    split: int = -1
    """Multi-rank reads: the split ordinal asked for (``indices`` in it)."""
    indices: list[int] = field(default_factory=list)
    """Multi-rank reads: the split's elements wanted, ascending."""
    have: list[int] = field(default_factory=list)
    """Multi-rank reads: elements of the split this consumer has already (a
    split made again after a worker was lost): the worker need not keep them."""


@dataclass(slots=True, kw_only=True)
class Elements(Message):
    """Header of a data reply; the frames codec's frames follow it.

    ``count`` elements follow (possibly 0 with ``end_of_sequence``).
    """

    TYPE: ClassVar[str] = "elements"
    task_id: int
    count: int
    end_of_sequence: bool = False
    rounds: list[int] = field(default_factory=list)
    """Coordinated reads: the rounds of the elements, in order."""
    parts: list[int] = field(default_factory=list)
    """Frame count of each frames-codec message that follows, in order."""
    lineage: list[int] = field(default_factory=list)
    """Exactly once: the keys the elements cover, flat ranges in element order
    (``lineage.Coverage``), then, with ``end_of_sequence``, the keys the task
    dropped (filtered out, or never read)."""
    widths: list[int] = field(default_factory=list)
    """Exactly once: how many keys each element covers, ``[count, width, ...]``."""
    progress: list[list[int]] = field(default_factory=list)
    """Exactly once: the latest mark of each root the elements carry, packed
    (``_wire/progress.py``): outputs of 1-to-many ops delivered so far."""
    split: int = -1
    """Multi-rank reads: the split the elements are of (``indices``: which)."""
    indices: list[int] = field(default_factory=list)
    produced: int = 0
    """Multi-rank reads: how many elements the split has made so far."""
    ended: bool = False
    """Multi-rank reads: the split is over (``produced`` is its count)."""
    counts: list[int] = field(default_factory=list)
    """Multi-rank reads: ``[ordinal, count, ...]`` of other splits the task ended."""


# ------------------------------------------------------------------ saves


@dataclass(slots=True, kw_only=True)
class StartSave(Message):
    """``distributed_save``: write dataset ``dataset_id``'s elements under ``path``.

    Idempotent: asking again for the same dataset and path finds the save.
    """

    TYPE: ClassVar[str] = "start_save"
    dataset_id: str
    path: str
    compression: str | None = None
    """``"zstd"`` or None: how chunks are written."""


@dataclass(slots=True, kw_only=True)
class StartSaveReply(Message):
    TYPE: ClassVar[str] = "start_save_reply"
    save_id: str


@dataclass(slots=True, kw_only=True)
class GetSaveSplit(Message):
    """A worker asks for the next split of a save, with the chunks it wrote.

    ``chunks``: ``[ordinal, name, elements, bytes, crc32]`` of each chunk
    written since its last request (committed on disk); ``failed``: why the
    worker could not write one (the save fails with it).
    """

    TYPE: ClassVar[str] = "get_save_split"
    worker_id: int
    save_id: str
    chunks: list[list[Any]] = field(default_factory=list)
    failed: str = ""


@dataclass(slots=True, kw_only=True)
class GetSaveSplitReply(Message):
    """The next split of a save to write, if any.

    ``split``: ``[ordinal, lo, hi]``, to write as one chunk; empty: none now
    (ask again), or none ever again with ``done`` (the save ended).
    """

    TYPE: ClassVar[str] = "get_save_split_reply"
    split: list[int] = field(default_factory=list)
    done: bool = False


MESSAGES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Error,
        Ok,
        RegisterWorker,
        RegisterWorkerReply,
        WorkerHeartbeat,
        WorkerHeartbeatReply,
        ProcessTask,
        GetSplit,
        GetSplitReply,
        GetOrRegisterDataset,
        GetOrRegisterDatasetReply,
        GetDatasetInfo,
        GetDatasetInfoReply,
        GetOrCreateJob,
        GetOrCreateJobReply,
        GetOrCreateIteration,
        IterationState,
        ClientHeartbeat,
        ReleaseIterationClient,
        GetStatus,
        GetStatusReply,
        StartTrace,
        StartTraceReply,
        GetTrace,
        GetTraceReply,
        TraceSpans,
        GetElements,
        Elements,
        StartSave,
        StartSaveReply,
        GetSaveSplit,
        GetSaveSplitReply,
    )
}


def _runtime_types(annotation: Any) -> tuple[type, ...]:
    """The isinstance() check for a field annotation (containers by origin only)."""
    if annotation is Any:
        return (object,)
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        return tuple(
            t for arg in typing.get_args(annotation) for t in _runtime_types(arg)
        )
    if annotation is None or annotation is type(None):
        return (type(None),)
    return (origin or annotation,)


_SCHEMAS: dict[type[Message], tuple[tuple[str, tuple[type, ...]], ...]] = {
    cls: tuple(
        (f.name, _runtime_types(typing.get_type_hints(cls)[f.name]))
        for f in fields(cls)
    )
    for cls in MESSAGES.values()
}


_TYPES: dict[type[Message], dict[str, tuple[type, ...]]] = {
    cls: dict(schema) for cls, schema in _SCHEMAS.items()
}
_NAMES: dict[type[Message], tuple[str, ...]] = {
    cls: tuple(name for name, _ in schema) for cls, schema in _SCHEMAS.items()
}
_REQUIRED = object()


def _default(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return _REQUIRED


_DEFAULTS: dict[type[Message], dict[str, Any]] = {
    cls: {f.name: _default(f) for f in fields(cls)} for cls in MESSAGES.values()
}
"""Each field's default (``_REQUIRED``: none): ``encode`` leaves such values out."""
_ADDED_IN_KEYS: dict[type[Message], tuple[tuple[str, str], ...]] = {
    cls: tuple((name, f"{cls.TYPE}.{name}") for name in names)
    for cls, names in _NAMES.items()
}
"""Each field's name and its key in ``ADDED_IN``."""


def _limits(size: int) -> dict[str, Any]:
    """The limits to unpack a message of ``size`` bytes with (see ``MAX_VALUES``)."""
    if size < COUNT_FROM:
        return {}
    budget = UnpackBudget(MAX_VALUES, count_values, "values")
    return {"max_array_len": MAX_VALUES, "max_map_len": MAX_VALUES, **budget.hooks()}


def accepts(version: object) -> bool:
    """Whether this process reads messages of protocol ``version``.

    >>> [accepts(v) for v in (OLDEST_PROTOCOL_VERSION - 1, PROTOCOL_VERSION, 5.0)]
    [False, True, False]
    """
    return type(version) is int and (
        OLDEST_PROTOCOL_VERSION <= version <= PROTOCOL_VERSION
    )


def refusal(peer: object, own: int = PROTOCOL_VERSION) -> str:
    """The text of the error refusing a peer of protocol ``peer``.

    Every release says it the same way: an older peer's refusal of this
    version is recognised by it (``versions.refused_by``).
    """
    return f"peer speaks protocol v{peer}, this process speaks v{own}"


def _fields_at(cls: type[Message], version: int) -> tuple[str, ...]:
    """The fields of ``cls`` that protocol ``version`` has (``ADDED_IN``)."""
    if not accepts(version):
        raise ValueError(f"cannot encode for protocol v{version}: {refusal(version)}")
    if ADDED_IN.get(cls.TYPE, OLDEST_PROTOCOL_VERSION) > version:
        raise FailedPreconditionError(
            f"{cls.TYPE!r} was added in protocol v{ADDED_IN[cls.TYPE]}: a peer of "
            f"v{version} does not know it"
        )
    return tuple(
        name
        for name, key in _ADDED_IN_KEYS[cls]
        if ADDED_IN.get(key, OLDEST_PROTOCOL_VERSION) <= version
    )


def encode(message: Message, version: int = PROTOCOL_VERSION) -> bytes:
    """The wire bytes of ``message`` for a peer of protocol ``version``.

    For an older peer, fields (and types) added after its version are left out
    (``ADDED_IN``): it reads them as their defaults. So are the fields whose
    value is their default, for every peer: a quiet heartbeat is a few bytes.
    """
    cls = type(message)
    names = _NAMES[cls] if version == PROTOCOL_VERSION else _fields_at(cls, version)
    defaults = _DEFAULTS[cls]
    body = {
        name: value
        for name in names
        if (value := getattr(message, name)) != defaults[name]
    }
    data: bytes = msgpack.packb({"v": version, "t": message.TYPE, **body})
    return data


def decode(data: bytes | memoryview) -> Message:
    """Parses wire bytes; raises ``InvalidArgumentError`` for anything malformed."""
    return decode_versioned(data)[0]


def decode_versioned(data: bytes | memoryview) -> tuple[Message, int]:
    """The message of wire bytes and the protocol version it was encoded at.

    Raises:
        FailedPreconditionError: A version this process does not accept.
        InvalidArgumentError: Anything malformed.
    """
    body = _unpack(data)
    version = body.pop("v", None)
    if not accepts(version):
        raise FailedPreconditionError(refusal(version))
    type_name = body.pop("t", None)
    cls = MESSAGES.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise InvalidArgumentError("unknown control message type")
    if ADDED_IN.get(cls.TYPE, OLDEST_PROTOCOL_VERSION) > version:
        raise InvalidArgumentError(f"{cls.TYPE!r} is not in protocol v{version}")
    types = _TYPES[cls]
    for name, value in body.items():  # few: fields at their defaults are not sent
        allowed = types.get(name)
        if allowed is not None:  # an unknown name: refused by the constructor
            _check_field(cls, name, value, allowed)
    try:
        return cls(**body), version
    except TypeError as error:
        raise InvalidArgumentError(f"malformed {cls.TYPE}: {error}") from None


def _unpack(data: bytes | memoryview) -> dict[Any, Any]:
    """The msgpack map of a message, within the size and value limits."""
    if len(data) > _MAX_MESSAGE_BYTES:
        raise InvalidArgumentError(f"control message of {len(data)} bytes is too large")
    try:
        body = msgpack.unpackb(data, strict_map_key=True, **_limits(len(data)))
    except Exception as error:
        raise InvalidArgumentError(f"malformed control message: {error!r}") from None
    if not isinstance(body, dict):
        raise InvalidArgumentError("malformed control message: not a map")
    return body


def _check_field(
    cls: type[Message], name: str, value: Any, allowed: tuple[type, ...]
) -> None:
    """Raises unless ``value`` has one of the ``allowed`` types (a bool is no int)."""
    is_bool_for_int = isinstance(value, bool) and bool not in allowed and int in allowed
    if not isinstance(value, allowed) or is_bool_for_int:
        raise InvalidArgumentError(
            f"{cls.TYPE}.{name}: expected {' | '.join(t.__name__ for t in allowed)}, "
            f"got {type(value).__name__}"
        )
