"""Control messages: every type round-trips; malformed input raises only our errors."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zmqdata._version import PROTOCOL_VERSION
from zmqdata._wire import messages as m
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

FAST = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
DECODE_ERRORS = (InvalidArgumentError, FailedPreconditionError)

# msgpack natives that come back equal (no NaN, no tuples: those become lists).
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
_ANY = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def strategy(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of a message field's annotation that msgpack round-trips exactly."""
    if annotation is Any:
        return _ANY
    if annotation is type(None):
        return st.none()
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return st.one_of(*(strategy(arg) for arg in args))
    if origin is list:
        return st.lists(strategy(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(strategy(args[0]), strategy(args[1]), max_size=3)
    scalar: dict[Any, st.SearchStrategy[Any]] = {
        int: st.integers(-(2**63), 2**63 - 1),
        str: st.text(max_size=12),
        bytes: st.binary(max_size=32),
        bool: st.booleans(),
        float: st.floats(allow_nan=False),
    }
    return scalar[annotation]


def instances(cls: type[m.Message]) -> st.SearchStrategy[m.Message]:
    hints = typing.get_type_hints(cls)
    return st.builds(
        cls,
        **{f.name: strategy(hints[f.name]) for f in dataclasses.fields(cls)},
    )


ALL_MESSAGES = st.sampled_from(sorted(m.MESSAGES.values(), key=lambda c: c.TYPE))


def all_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *all_subclasses(sub)}
    return found


def body(message: m.Message) -> dict[str, Any]:
    decoded: dict[str, Any] = msgpack.unpackb(m.encode(message))
    return decoded


def packed(data: dict[Any, Any]) -> bytes:
    return msgpack.packb(data)  # type: ignore[no-any-return]


# ------------------------------------------------------------------ round trips


def test_every_message_class_is_registered_under_its_own_type():
    registered = set(m.MESSAGES.values())
    # dataclass(slots=True) leaves the pre-slots class behind as a subclass too,
    # so subclasses are compared by name.
    assert {sub.__qualname__ for sub in all_subclasses(m.Message)} == {
        cls.__qualname__ for cls in registered
    }
    module_classes = {
        value
        for value in vars(m).values()
        if isinstance(value, type) and issubclass(value, m.Message)
    } - {m.Message}
    assert module_classes == registered
    for type_name, cls in m.MESSAGES.items():
        assert type_name == cls.TYPE != ""


@FAST
@given(data=st.data(), cls=ALL_MESSAGES)
def test_every_message_round_trips(data, cls):
    message = data.draw(instances(cls))
    decoded = m.decode(m.encode(message))
    assert type(decoded) is cls
    assert decoded == message


def test_explicit_messages_round_trip():
    messages = [
        m.Error(
            request_id=3, code="NOT_FOUND", message="dataset 'x' is not registered"
        ),
        m.RegisterWorker(
            request_id=1,
            worker_address="h:1",
            data_address="tcp://h:1",
            tags=["gpu"],
            version="0.1.0",
        ),
        m.WorkerHeartbeat(request_id=2, worker_id=4, tasks=[[7, False], [8, True]]),
        m.GetSplitReply(request_id=5, splits=[[0, 64], [64, 128]]),
        m.GetSplitReply(request_id=6, splits=["/data/file-1.txt"]),
        m.GetSplitReply(request_id=7, end_of_splits=True),
        m.GetOrRegisterDataset(pipeline=b"\x00\xff" * 1000, dataset_id=None),
        m.GetOrCreateJob(dataset_id="1", processing_mode=1, job_name="train"),
        m.IterationState(
            client_id=1,
            iteration_id=2,
            tasks=[{"task_id": 3, "data_address": "tcp://h:1"}],
            finished=False,
        ),
        m.GetStatusReply(status={"workers": [], "jobs": [{"finished": True}]}),
        m.Elements(task_id=3, count=2, end_of_sequence=True, parts=[1, 3]),
    ]
    for message in messages:
        assert m.decode(m.encode(message)) == message


def test_wire_format_is_a_versioned_map_without_default_values():
    data = body(m.GetSplit(request_id=7, iteration_id=3, repetition=0, max_splits=4))
    assert data == {
        "v": PROTOCOL_VERSION,
        "t": "get_split",
        "request_id": 7,
        "iteration_id": 3,
        "repetition": 0,  # a required field: sent whatever its value
        "max_splits": 4,
    }


def test_a_quiet_heartbeat_is_a_few_bytes():
    assert len(m.encode(m.ClientHeartbeat(request_id=9, client_id=3, known=-5))) < 60


def test_omitted_fields_with_defaults_get_their_defaults():
    decoded = m.decode(packed({"v": PROTOCOL_VERSION, "t": "ok"}))
    assert decoded == m.Ok(request_id=0)


# ------------------------------------------------------------------ malformed input


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # never-used msgpack byte
        b"\x92\x01",  # truncated array
        packed([1, 2, 3]),  # not a map
        packed("get_split"),
        msgpack.packb({1: 2}, strict_types=False),  # non-str key
    ],
    ids=["empty", "reserved", "truncated", "list", "str", "int-key"],
)
def test_malformed_bytes_are_invalid_argument(data):
    with pytest.raises(DECODE_ERRORS):
        m.decode(data)


@pytest.mark.parametrize("version", [None, 0, PROTOCOL_VERSION + 1, "1", [1]])
def test_wrong_protocol_version_is_failed_precondition(version):
    data = body(m.Ok(request_id=1))
    if version is None:
        del data["v"]
    else:
        data["v"] = version
    with pytest.raises(FailedPreconditionError, match="protocol"):
        m.decode(packed(data))


@pytest.mark.parametrize("type_name", [None, "nope", "", 5, [1], {"a": 1}, b"ok"])
def test_unknown_or_unhashable_type_is_invalid_argument(type_name):
    data = {"v": PROTOCOL_VERSION, "request_id": 1}
    if type_name is not None:
        data["t"] = type_name
    with pytest.raises(InvalidArgumentError, match="unknown"):
        m.decode(packed(data))


@pytest.mark.parametrize(
    ("message", "field", "value"),
    [
        (m.GetSplit(iteration_id=1, repetition=0), "iteration_id", "1"),
        (m.GetSplit(iteration_id=1, repetition=0), "repetition", 1.5),
        (m.GetSplit(iteration_id=1, repetition=0), "request_id", None),
        (m.GetElements(task_id=1, client_id=1, max_elements=1), "max_elements", True),
        (m.Error(code="X", message="y"), "message", b"bytes"),
        (m.GetOrRegisterDataset(pipeline=b"p"), "pipeline", "text"),
        (m.GetOrCreateJob(dataset_id="1", processing_mode=0), "job_name", 5),
        (
            m.IterationState(client_id=1, iteration_id=1, tasks=[], finished=False),
            "tasks",
            {"a": 1},
        ),
        (
            m.IterationState(client_id=1, iteration_id=1, tasks=[], finished=False),
            "finished",
            1,
        ),
        (m.GetStatusReply(status={}), "status", []),
        (m.ProcessTask(tasks=[]), "tasks", None),
    ],
)
def test_wrong_field_types_are_invalid_argument(message, field, value):
    data = body(message)
    data[field] = value
    with pytest.raises(InvalidArgumentError, match=f"{message.TYPE}.{field}"):
        m.decode(packed(data))


def test_missing_and_unknown_fields_are_invalid_argument():
    data = body(m.GetSplit(iteration_id=1, repetition=0))
    del data["iteration_id"]
    with pytest.raises(InvalidArgumentError, match="get_split"):
        m.decode(packed(data))
    for extra in ("surprise", "TYPE"):
        data = body(m.Ok())
        data[extra] = 1
        with pytest.raises(InvalidArgumentError, match="ok"):
            m.decode(packed(data))


def test_oversized_message_is_refused_before_parsing(monkeypatch):
    monkeypatch.setattr(m, "_MAX_MESSAGE_BYTES", 64)
    big = m.encode(m.GetOrRegisterDataset(pipeline=b"x" * 100))
    with pytest.raises(InvalidArgumentError, match="too large"):
        m.decode(big)


@FAST
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_our_errors(data):
    try:
        message = m.decode(data)
    except DECODE_ERRORS:
        return
    assert isinstance(message, m.Message)


@FAST
@given(
    data=st.data(),
    cls=ALL_MESSAGES,
    replacement=_ANY,
)
def test_any_field_value_decodes_or_raises_our_errors(data, cls, replacement):
    message = data.draw(instances(cls))
    encoded = body(message)
    field = data.draw(st.sampled_from(sorted(encoded)))
    encoded[field] = replacement
    try:
        decoded = m.decode(packed(encoded))
    except DECODE_ERRORS:
        return
    assert type(decoded) is cls


@FAST
@given(data=st.data(), cls=ALL_MESSAGES)
def test_truncated_messages_raise_our_errors(data, cls):
    encoded = m.encode(data.draw(instances(cls)))
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(DECODE_ERRORS):
        m.decode(encoded[:cut])
