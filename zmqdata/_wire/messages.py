"""Control messages: typed dataclasses, one explicit table, msgpack on the wire.

Every message travels as a msgpack map ``{"v": version, "t": TYPE,
**fields}``. Names follow tf.data service's RPCs as request/reply pairs. Decoding
checks the version, the type and each field's runtime type, and raises
``InvalidArgumentError`` (or ``FailedPreconditionError`` for a version it does
not accept) instead of letting bad input reach a handler.

The messages are defined by role (``messages_base``: the base and generic
replies; ``messages_workers``, ``messages_clients``, ``messages_data``,
``messages_saves_traces``); this module is the one namespace to import them
from, with the table and the encoding.

Versions ``OLDEST_PROTOCOL_VERSION`` to ``PROTOCOL_VERSION`` are accepted
(``accepts``); a message encoded for an older peer leaves out what ``ADDED_IN``
says came later (``versions.py`` picks the version to speak to each peer).

>>> message = GetSplit(request_id=7, iteration_id=3, repetition=0, max_splits=4)
>>> decode(encode(message)) == message, decode(encode(message)).max_splits
(True, 4)
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import MISSING, fields, replace
from typing import Any

import msgpack

from zmqdata._version import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION
from zmqdata._wire.budget import COUNT_FROM, UnpackBudget, count_values
from zmqdata._wire.messages_base import ABSENT, Error, Message, Ok
from zmqdata._wire.messages_clients import (
    ClientHeartbeat,
    GetDatasetInfo,
    GetDatasetInfoReply,
    GetOrCreateIteration,
    GetOrCreateJob,
    GetOrCreateJobReply,
    GetOrRegisterDataset,
    GetOrRegisterDatasetReply,
    GetStatus,
    GetStatusReply,
    IterationState,
    ReleaseIterationClient,
    request_key,
)
from zmqdata._wire.messages_data import Elements, GetElements
from zmqdata._wire.messages_saves_traces import (
    GetSaveSplit,
    GetSaveSplitReply,
    GetTrace,
    GetTraceReply,
    StartSave,
    StartSaveReply,
    StartTrace,
    StartTraceReply,
    TraceSpans,
)
from zmqdata._wire.messages_workers import (
    MAX_FINGERPRINT_CHARS,
    MAX_PIPELINES_HELD,
    GetSplit,
    GetSplitReply,
    ProcessTask,
    RegisterWorker,
    RegisterWorkerReply,
    WorkerHeartbeat,
    WorkerHeartbeatReply,
)
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

__all__ = [
    "ABSENT",
    "ADDED_IN",
    "MAX_FINGERPRINT_CHARS",
    "MAX_PIPELINES_HELD",
    "MAX_VALUES",
    "MESSAGES",
    "PROTOCOL_VERSION",
    "ClientHeartbeat",
    "Elements",
    "Error",
    "GetDatasetInfo",
    "GetDatasetInfoReply",
    "GetElements",
    "GetOrCreateIteration",
    "GetOrCreateJob",
    "GetOrCreateJobReply",
    "GetOrRegisterDataset",
    "GetOrRegisterDatasetReply",
    "GetSaveSplit",
    "GetSaveSplitReply",
    "GetSplit",
    "GetSplitReply",
    "GetStatus",
    "GetStatusReply",
    "GetTrace",
    "GetTraceReply",
    "IterationState",
    "Message",
    "Ok",
    "ProcessTask",
    "RegisterWorker",
    "RegisterWorkerReply",
    "ReleaseIterationClient",
    "StartSave",
    "StartSaveReply",
    "StartTrace",
    "StartTraceReply",
    "TraceSpans",
    "WorkerHeartbeat",
    "WorkerHeartbeatReply",
    "accepts",
    "decode",
    "decode_versioned",
    "encode",
    "refusal",
    "request_key",
]

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
    "get_split.empty_pass": 6,
    "get_split_reply.exhausted": 6,
    "get_split.chunks": 6,
    "get_split.chunk_failed": 6,
    "get_split_reply.chunks": 6,
    "get_dataset_info.pipeline": 6,
    "get_dataset_info_reply.pipeline": 6,
}
"""What a protocol version after ``OLDEST_PROTOCOL_VERSION`` added, with that
version: ``"type"`` for a whole message, ``"type.field"`` for a field (with a
default). A message encoded for an older peer leaves the fields out."""

ABSENT_SINCE = 6
"""The version that says ``ABSENT``; older peers said ``NOT_FOUND``, with these texts:"""
_ABSENT_BEFORE = re.compile(
    r"task \d+ is not on this worker|task \d+ was deleted"
    r"|split \d+ is not held by task \d+"
)


def _absent_for_older(message: Message, version: int) -> Message:
    """``message`` for a peer of ``version``: ``ABSENT`` is ``NOT_FOUND`` before v6.

    >>> _absent_for_older(Error(code=ABSENT, message="task 3 was deleted"), 5).code
    'NOT_FOUND'
    """
    if version < ABSENT_SINCE and isinstance(message, Error) and message.code == ABSENT:
        return replace(message, code="NOT_FOUND")
    return message


def _absent_from_older(message: Message, version: int) -> Message:
    """``message`` of a peer of ``version``: ``NOT_FOUND`` of a task not held is ``ABSENT``.

    Any other ``NOT_FOUND`` (a file gone) stays an error.

    >>> _absent_from_older(Error(code="NOT_FOUND", message="task 3 was deleted"), 5)
    Error(request_id=0, code='ABSENT', message='task 3 was deleted')
    >>> _absent_from_older(Error(code="NOT_FOUND", message="a.tar: no such file"), 5)
    Error(request_id=0, code='NOT_FOUND', message='a.tar: no such file')
    """
    if (
        version < ABSENT_SINCE
        and isinstance(message, Error)
        and message.code == "NOT_FOUND"
        and _ABSENT_BEFORE.fullmatch(message.message)
    ):
        return replace(message, code=ABSENT)
    return message


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
    names = _NAMES[cls]
    if version != PROTOCOL_VERSION:
        names = _fields_at(cls, version)
        message = _absent_for_older(message, version)
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
        message = cls(**body)
    except TypeError as error:
        raise InvalidArgumentError(f"malformed {cls.TYPE}: {error}") from None
    if version != PROTOCOL_VERSION:
        message = _absent_from_older(message, version)
    return message, version


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
