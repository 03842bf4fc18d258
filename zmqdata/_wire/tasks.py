"""Task definitions (dispatcher to worker) and task infos (dispatcher to consumer).

Both travel as msgpack maps inside control messages (``RegisterWorkerReply``,
``WorkerHeartbeatReply``, ``ProcessTask``; ``IterationState``), one key per
field. ``from_wire`` checks each known key's type and raises
``InvalidArgumentError`` naming the field; keys it does not know are ignored,
so a newer peer may add some.

>>> info = TaskInfo(task_id=3, worker_id=1, worker_address="w:1",
...                 data_address="tcp://w:2")
>>> TaskInfo.from_wire(info.to_wire() | {"added_later": 1}) == info
True
>>> TaskInfo.from_wire({"task_id": "3"})
Traceback (most recent call last):
...
zmqdata.errors.InvalidArgumentError: task info task_id: expected int, got str
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any, Self, TypeVar

from zmqdata._wire.modes import ReadMode, read_mode
from zmqdata.errors import InvalidArgumentError

_Record = TypeVar("_Record")
_MODES = frozenset(mode.value for mode in ReadMode)
_Schema = tuple[tuple[str, tuple[type, ...], bool], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDef:
    """What a worker runs: the task's pipeline and how to shard it.

    >>> task = TaskDef(task_id=5, iteration_id=2, dataset_id="d", pipeline=b"p",
    ...                processing_mode=0)
    >>> TaskDef.from_wire(task.to_wire()) == task
    True
    >>> TaskDef.from_wire(task.to_wire() | {"cross_trainer_cache": 1})
    Traceback (most recent call last):
    ...
    zmqdata.errors.InvalidArgumentError: task definition cross_trainer_cache: \
expected bool, got int
    """

    num_workers: int | None = None
    """Static sharding: how many workers share the data (else None)."""
    worker_index: int | None = None
    """Static sharding: this worker's shard (else None)."""
    task_id: int
    iteration_id: int
    dataset_id: str
    pipeline: bytes
    """The serialized pipeline (``graph.serialize``); empty where the worker
    said it holds the pipeline of ``fingerprint`` (``_worker/pipelines.py``)."""
    processing_mode: int
    """A ``ShardingPolicy``."""
    compression: str | None = None
    num_consumers: int | None = None
    """Coordinated reads: how many consumers share each round (else None)."""
    cross_trainer_cache: bool = False
    exactly_once: bool = False
    """DYNAMIC: tell readers what each element covers (``_wire/lineage.py``)."""
    dealt: bool = False
    """Multi-rank reads: run the pipeline split by split, serve by index (``deal.py``)."""
    split_outputs: bool = False
    """Exactly once: run the pipeline split by split, keys number outputs (``outputs.py``)."""
    fingerprint: str = ""
    """The pipeline's ``graph.fingerprint`` (a dispatcher of protocol 5 sends none)."""
    mode: str = ""
    """Its ``ReadMode``, which the dispatcher decides (a dispatcher of protocol 5
    sends none: ``read_mode`` derives it from the fields above)."""

    def __post_init__(self) -> None:
        if self.mode and self.mode not in _MODES:
            raise InvalidArgumentError(f"task definition mode: unknown {self.mode!r}")
        if self.read_mode is ReadMode.ROUNDS and self.num_consumers is None:
            raise InvalidArgumentError(
                "task definition mode: rounds without num_consumers"
            )

    @property
    def read_mode(self) -> ReadMode:
        """How the task's output is read: ``mode``, else what the old fields say."""
        if self.mode:
            return ReadMode(self.mode)
        return read_mode(self.dealt, self.cross_trainer_cache, self.num_consumers)

    def to_wire(self) -> dict[str, Any]:
        """The map a control message carries (without ``fingerprint``, ``mode`` when empty)."""
        wire = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("fingerprint", "mode"):
            if not wire[name]:
                del wire[name]
        return wire

    @classmethod
    def from_wire(cls, data: object) -> Self:
        """Parses a peer's map; raises ``InvalidArgumentError`` if malformed."""
        return _parse(cls, "task definition", data)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveDef:
    """A save a worker writes chunks of (``distributed_save``).

    >>> save = SaveDef(save_id="s", dataset_id="d", pipeline=b"p", path="/x")
    >>> SaveDef.from_wire(save.to_wire()) == save
    True
    """

    save_id: str
    dataset_id: str
    pipeline: bytes
    """As ``TaskDef.pipeline``: empty where the worker holds ``fingerprint``."""
    path: str
    """Where chunks go: ``path/chunks/`` (``_dataset/snapshot.py``)."""
    compression: str | None = None
    fingerprint: str = ""

    def to_wire(self) -> dict[str, Any]:
        """The map a heartbeat reply carries."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_wire(cls, data: object) -> Self:
        """Parses a peer's map; raises ``InvalidArgumentError`` if malformed."""
        return _parse(cls, "save definition", data)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskInfo:
    """Where a consumer reads a task: its worker's endpoints.

    >>> info = TaskInfo(task_id=1, worker_id=2, worker_address="w:1",
    ...                 data_address="tcp://w:2")
    >>> "ticket" in info.to_wire()
    False
    >>> TaskInfo.from_wire(info.to_wire() | {"ticket": b"t"}).ticket
    b't'
    """

    task_id: int
    worker_id: int
    worker_address: str
    data_address: str
    local_process: str = ""
    """The worker's process token (``PROCESS_TOKEN``)."""
    inproc_address: str = ""
    """The worker's ``inproc://`` endpoint, for consumers in its process."""
    ticket: bytes = b""
    """CurveZMQ: the consumer's read ticket (``auth.read_ticket``); not sent
    when empty."""

    def to_wire(self) -> dict[str, Any]:
        """The map a control message carries (without ``ticket`` when empty)."""
        wire = {f.name: getattr(self, f.name) for f in fields(self)}
        if not self.ticket:
            del wire["ticket"]
        return wire

    @classmethod
    def from_wire(cls, data: object) -> Self:
        """Parses a peer's map; raises ``InvalidArgumentError`` if malformed."""
        return _parse(cls, "task info", data)


def _parse(cls: type[_Record], what: str, data: object) -> _Record:
    """``cls`` from the map ``data``, each known key's type checked."""
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{what}: expected a map, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for name, allowed, required in _SCHEMAS[cls]:
        if name not in data:
            if required:
                raise InvalidArgumentError(f"{what} {name}: missing")
            continue
        value = data[name]
        if not isinstance(value, allowed) or (
            isinstance(value, bool) and bool not in allowed
        ):
            names = " | ".join(t.__name__ for t in allowed)
            raise InvalidArgumentError(
                f"{what} {name}: expected {names}, got {type(value).__name__}"
            )
        values[name] = value
    return cls(**values)


def _schema(cls: type[Any]) -> _Schema:
    """``(name, types, required)`` of each field of ``cls``.

    A field annotated ``X | None`` takes ``X`` or ``None``; a field without a
    default is required.
    """
    hints = typing.get_type_hints(cls)
    return tuple(
        (
            f.name,
            typing.get_args(hints[f.name]) or (hints[f.name],),
            f.default is MISSING,
        )
        for f in fields(cls)
    )


_SCHEMAS: dict[type[Any], _Schema] = {
    cls: _schema(cls) for cls in (TaskDef, SaveDef, TaskInfo)
}
