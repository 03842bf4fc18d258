"""The base of every control message, and the generic replies.

Messages are not frozen dataclasses: they are built twice per request on the
dispatcher's hot path, and a frozen one's ``__init__`` (``object.__setattr__``
per field) costs 3.4x a plain one's. Treat them as values all the same:
``dataclasses.replace`` to change one.

How they travel: ``zmqdata._wire.messages``, the namespace to import them from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(slots=True, kw_only=True)
class Message:
    """Base of every control message; ``request_id`` pairs a reply with its request."""

    TYPE: ClassVar[str] = ""
    request_id: int = 0


ABSENT = "ABSENT"
"""The ``Error.code`` of a worker asked for a task or split it does not hold
(not started yet, or moved on): a state, not an error; the reader asks again
later. Never a ``zmqdata.errors`` code, so a task that failed with
``NotFoundError`` is not taken for one not started (peers of protocol 5 said
``NOT_FOUND`` for both: ``messages`` translates)."""


@dataclass(slots=True, kw_only=True)
class Error(Message):
    """A failed request: ``code`` is a ``zmqdata.errors`` code, or ``ABSENT``."""

    TYPE: ClassVar[str] = "error"
    code: str
    message: str


@dataclass(slots=True, kw_only=True)
class Ok(Message):
    """A request done, nothing to return."""

    TYPE: ClassVar[str] = "ok"
