"""What a reader's core is told (events) and what it answers (instructions).

The read core (``core.ReadCore``) has the dispatcher's shape
(``_dispatcher/state.py``): ``handle(event, now)`` and ``tick(now)`` return
instructions, and the fetcher thread (``reader.Fetcher``), which owns the
sockets, the queue and the clock, carries them out. A send the shell could not
queue comes back as an ``Unsent`` event. Everything here is plain data.

>>> FromWorker(m.Error(request_id=3, code="NOT_FOUND", message=""), [b""]).segments
>>> Fail(ValueError("x")) == Fail(ValueError("x"))  # errors compare by identity
False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from zmqdata._wire import frames
from zmqdata._wire import messages as m


class Batch(NamedTuple):
    """What goes to the trainer per reply."""

    elements: list[Any]
    nbytes: int
    """Their decoded bytes."""
    keys: list[int]
    """Exactly once: the keys they cover (``lineage.Coverage``)."""
    widths: list[int]
    """Exactly once: how many keys each covers."""
    anchors: list[int]
    """Multi-rank reads: ``[ordinal, offset]`` of each element's split."""


# ------------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class Started:
    """The iteration joined: its first ``IterationState``."""

    state: m.IterationState


@dataclass(frozen=True, slots=True)
class FromDispatcher:
    """A dispatcher reply (an ``IterationState`` or an ``Error``)."""

    message: m.Message


@dataclass(frozen=True, slots=True)
class FromWorker:
    """A worker reply: its header, its frames (header first), how to map segments.

    ``segments``: how this reader maps shared memory (None: it asked for none).
    """

    header: m.Message
    parts: list[Any] = field(hash=False)
    segments: frames.Claim | None = None


@dataclass(frozen=True, slots=True)
class LinksLost:
    """These worker connections were lost, with the replies on their way."""

    endpoints: list[str] = field(hash=False)


@dataclass(frozen=True, slots=True)
class Unsent:
    """A ``ToWorker`` the shell could not queue (no way to the worker)."""

    request: m.GetElements


@dataclass(frozen=True, slots=True)
class Broken:
    """The shell cannot go on: a refused handshake, an undecodable message."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Drained:
    """The shell took what was waiting: time to ask for what credit allows."""


@dataclass(frozen=True, slots=True)
class Closing:
    """The read is being closed: release this reader."""


Event = (
    Started
    | FromDispatcher
    | FromWorker
    | LinksLost
    | Unsent
    | Broken
    | Drained
    | Closing
)

# ------------------------------------------------------------------ instructions


@dataclass(frozen=True, slots=True)
class ToWorker:
    """Send ``request`` to the worker at ``endpoint``, without blocking."""

    endpoint: str
    request: m.GetElements


@dataclass(frozen=True, slots=True)
class ToDispatcher:
    """Send ``message`` (a heartbeat, the release) to the dispatcher."""

    message: m.Message


@dataclass(frozen=True, slots=True, eq=False)
class Deliver:
    """Hand ``batch`` to the trainer."""

    batch: Batch


@dataclass(frozen=True, slots=True)
class End:
    """The read is over: tell the trainer."""


@dataclass(frozen=True, slots=True, eq=False)
class Fail:
    """The read failed with ``error``: tell the trainer."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Dropped:
    """``elements`` held after a silence were of lost tasks: dropped (logged)."""

    elements: int


Instruction = ToWorker | ToDispatcher | Deliver | End | Fail | Dropped


def decode_elements(header: m.Elements, reply: FromWorker) -> tuple[list[Any], int]:
    """The elements of a data reply, and the bytes they hold once decoded.

    Checked as ``frames.decode_messages`` does: within the codec's limits, and
    exactly the frames and the ``count`` elements the header lists. Buffers in
    shared memory are accepted only by a reader that asked for them (its
    ``reply.segments``).
    """
    return frames.decode_messages(
        reply.parts[1:], header.parts, header.count, segments=reply.segments
    )
