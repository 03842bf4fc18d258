"""Data-plane headers between consumers and workers.

A request for elements, and the header of the reply (the frames codec's
frames follow it).

Imported through ``zmqdata._wire.messages``, which encodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from zmqdata._wire.messages_base import Message


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
