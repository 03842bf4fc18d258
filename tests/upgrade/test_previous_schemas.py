"""What the previous release sends and journals, this one still reads.

Its messages, events and snapshot records are listed by its own interpreter
and compared with this release's: every field it lacks has a default (and a
message field an ``ADDED_IN`` entry, so that it is left out for it), and no
field it has is gone, but those a snapshot's reader drops (``snapshot.DROPPED``).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

import pytest

from tests.upgrade.previous import PREVIOUS_PROTOCOL
from tests.venvs import Venv
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import model, snapshot
from zmqdata._version import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION
from zmqdata._wire import messages as m

RECORDS = (
    model.Worker,
    model.Dataset,
    model.Job,
    model.Iteration,
    model.Task,
    model.Client,
)
"""What a snapshot holds (``snapshot.py``)."""
LIST = f"""
import dataclasses, json, typing
from zmqdata._wire import messages as m
from zmqdata._dispatcher import events as ev, model

def names(cls):
    return [f.name for f in dataclasses.fields(cls)]

print(json.dumps({{
    "messages": {{t: names(c) for t, c in m.MESSAGES.items()}},
    "events": {{c.__name__: names(c) for c in typing.get_args(ev.Event)}},
    "records": {{n: names(getattr(model, n)) for n in {[c.__name__ for c in RECORDS]}}},
}}))
"""


@pytest.fixture(scope="module")
def before(previous: Venv) -> dict[str, dict[str, list[str]]]:
    listed: dict[str, dict[str, list[str]]] = json.loads(previous.run("-c", LIST))
    return listed


def has_default(field: dataclasses.Field[Any]) -> bool:
    return (
        field.default is not dataclasses.MISSING
        or field.default_factory is not dataclasses.MISSING
    )


def added(
    before: list[str], cls: type[Any], dropped: tuple[str, ...] = ()
) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` that the previous release's ``before`` lacks.

    ``dropped``: fields of ``before`` that this release drops when it reads them.
    """
    fields = dataclasses.fields(cls)
    missing = set(before) - {f.name for f in fields} - set(dropped)
    assert not missing, f"{cls.__name__} lost {sorted(missing)}: older peers send them"
    return [f for f in fields if f.name not in before]


def test_the_previous_release_is_accepted():
    assert OLDEST_PROTOCOL_VERSION <= PREVIOUS_PROTOCOL < PROTOCOL_VERSION


def test_every_message_field_added_since_is_in_added_in_with_a_default(before):
    for type_name, cls in m.MESSAGES.items():
        if type_name not in before["messages"]:
            assert m.ADDED_IN.get(type_name, 0) > PREVIOUS_PROTOCOL, type_name
            continue
        for field in added(before["messages"][type_name], cls):
            name = f"{type_name}.{field.name}"
            assert m.ADDED_IN.get(name, 0) > PREVIOUS_PROTOCOL, f"{name}: no ADDED_IN"
            assert has_default(field), f"{name} has no default"


def test_added_in_names_real_messages_and_fields_of_accepted_versions():
    for name, version in m.ADDED_IN.items():
        assert OLDEST_PROTOCOL_VERSION < version <= PROTOCOL_VERSION, name
        type_name, _, field = name.partition(".")
        assert type_name in m.MESSAGES, name
        fields = {f.name: f for f in dataclasses.fields(m.MESSAGES[type_name])}
        assert not field or has_default(fields[field]), name


def test_events_and_records_of_an_older_journal_get_defaults(before):
    events = {cls.__name__: cls for cls in typing.get_args(ev.Event)}
    assert set(before["events"]) <= set(events), "an event older journals hold is gone"
    for name, fields in before["events"].items():
        for field in added(fields, events[name]):
            assert has_default(field), f"event {name}.{field.name} has no default"
    for cls in RECORDS:
        dropped = snapshot.DROPPED.get(cls.__name__, ())
        for field in added(before["records"][cls.__name__], cls, dropped):
            assert has_default(field), f"{cls.__name__}.{field.name} has no default"
