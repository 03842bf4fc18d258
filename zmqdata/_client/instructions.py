"""What a reader's core is told (events) and what it answers (instructions).

The read core (``core.ReadCore``) has the dispatcher's shape
(``_dispatcher/state.py``): ``handle(event, now)`` and ``tick(now)`` return
instructions (each an ``Instruction``, the base the three roles' cores
share), and the fetcher thread (``reader.Fetcher``), which owns the
sockets, the queue and the clock, carries them out. A send the shell could not
queue comes back as an ``Unsent`` event. Everything here is plain data.

>>> FromWorker(m.Error(request_id=3, code="NOT_FOUND", message="")).decoded()
([], 0)
>>> Fail(ValueError("x")) == Fail(ValueError("x"))  # errors compare by identity
False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from zmqdata._runtime.instruction import Instruction
from zmqdata._wire import frames
from zmqdata._wire import messages as m
from zmqdata.errors import ZmqDataError

__all__ = [
    "Batch",
    "Broken",
    "Closing",
    "Deliver",
    "Drained",
    "Dropped",
    "End",
    "Event",
    "Fail",
    "FromDispatcher",
    "FromWorker",
    "Instruction",
    "LinksLost",
    "Started",
    "ToDispatcher",
    "ToWorker",
    "Unsent",
    "received",
]


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
    """A worker reply: its header and, for elements, what its frames decoded to.

    The fetcher decodes them (``received``), so the plans take elements, not
    frames, and map no shared memory.
    """

    header: m.Message
    elements: list[Any] = field(default_factory=list, hash=False)
    nbytes: int = 0
    """The bytes the elements hold decoded."""
    failure: ZmqDataError | None = None
    """Why the frames did not decode (the read fails if the reply is awaited)."""

    def decoded(self) -> tuple[list[Any], int]:
        """The elements and their bytes; raises what decoding them raised."""
        if self.failure is not None:
            raise self.failure
        return self.elements, self.nbytes


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
class ToWorker(Instruction):
    """Send ``request`` to the worker at ``endpoint``, without blocking."""

    endpoint: str
    request: m.GetElements


@dataclass(frozen=True, slots=True)
class ToDispatcher(Instruction):
    """Send ``message`` (a heartbeat, the release) to the dispatcher."""

    message: m.Message


@dataclass(frozen=True, slots=True, eq=False)
class Deliver(Instruction):
    """Hand ``batch`` to the trainer."""

    batch: Batch


@dataclass(frozen=True, slots=True)
class End(Instruction):
    """The read is over: tell the trainer."""


@dataclass(frozen=True, slots=True, eq=False)
class Fail(Instruction):
    """The read failed with ``error``: tell the trainer."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Dropped(Instruction):
    """``elements`` held after a silence were of lost tasks: dropped (logged)."""

    elements: int


def received(
    header: m.Message, parts: list[Any], segments: frames.Claim | None = None
) -> FromWorker:
    """A worker reply, its elements decoded (on the fetcher's thread).

    Checked as ``frames.decode_messages`` does: within the codec's limits, and
    exactly the frames (``parts``, the header's first) and the ``count``
    elements the header lists. Buffers in shared memory are accepted only by
    a reader that asked for them (``segments``: how it maps them).

    >>> reply = received(m.Elements(request_id=1, task_id=2, count=2, parts=[1]),
    ...                  [b"", *frames.encode([1, 2])])
    >>> reply.decoded()[0]
    [1, 2]
    """
    if not isinstance(header, m.Elements):
        return FromWorker(header)
    try:
        elements, nbytes = frames.decode_messages(
            parts[1:], header.parts, header.count, segments=segments
        )
    except ZmqDataError as error:
        return FromWorker(header, failure=error)
    return FromWorker(header, elements, nbytes)
