"""What a worker answers to a first-come ``GetElements``, given the task's buffer.

``from_buffer`` decides from the request and the task's ``TaskBuffer``,
``from_cache`` from its cross-trainer ``SlidingWindowCache`` (the outputs of
``outputs.py`` call them): ``Send`` items (possibly none, at the end of the
sequence), ``Refuse`` with an error, or None to park the request until the
producer adds something. They hold no socket; taking the items out is their
one effect.

>>> from zmqdata._wire import messages as m
>>> from zmqdata._worker.buffer import Raw, TaskBuffer
>>> buffer = TaskBuffer(max_items=8, max_bytes=1024)
>>> request = m.GetElements(task_id=1, client_id=1, max_elements=2)
>>> from_buffer(request, buffer) is None  # nothing yet: park it
True
>>> _ = buffer.put(Raw(7), 8)
>>> from_buffer(request, buffer)
Send(items=[Raw(element=7)], end_of_sequence=False, coverage=None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zmqdata._wire import messages as m
from zmqdata._wire.lineage import Coverage
from zmqdata._worker.buffer import Item, TaskBuffer
from zmqdata._worker.cache import SlidingWindowCache


@dataclass(frozen=True, slots=True)
class Send:
    """Send these items (none: only the end of the sequence)."""

    items: Sequence[Item]
    end_of_sequence: bool
    coverage: Coverage | None = None
    """Exactly once: what the items stand for (and, at the end, what was dropped)."""

    def told(self) -> dict[str, Any]:
        """What the reply's header says besides its items and end (``Elements``)."""
        coverage = self.coverage
        if coverage is None:
            return {}
        return {
            "lineage": coverage.keys,
            "widths": coverage.widths,
            "progress": coverage.packed_progress(),
        }


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer with this error."""

    code: str
    text: str


def from_buffer(
    request: m.GetElements, buffer: TaskBuffer, tracked: bool = False
) -> Send | Refuse | None:
    """First come, first served: the items the buffer holds, then its end.

    ``tracked``: exactly once, the reply says what its elements stand for.
    """
    coverage = Coverage() if tracked else None
    items = buffer.take_covered(request.max_elements, coverage)
    if not buffer.finished:
        return Send(items, False, coverage) if items else None
    if buffer.error is not None:  # what was made goes first, then the error
        return Send(items, False, coverage) if items else Refuse(*buffer.error)
    if coverage is not None:
        coverage.extend(buffer.dropped)
    return Send(items, True, coverage)


def from_cache(
    request: m.GetElements, cache: SlidingWindowCache[Item]
) -> Send | Refuse | None:
    """Cross-trainer cache: serves from the trainer's own position."""
    if request.trainer_id is None:
        text = f"task {request.task_id} reads through the cross-trainer cache: "
        return Refuse("INVALID_ARGUMENT", text + "name a trainer_id")
    items = cache.take(request.trainer_id, request.max_elements)
    if items:
        return Send(items, end_of_sequence=False)
    if cache.finished_for(request.trainer_id) and cache.error is not None:
        return Refuse(*cache.error)
    return None
