"""Exactly once: what consumers acknowledge, and the fences of lost tasks.

A consumer's heartbeat (and its release) carries the keys it received since
the last (``ack``: ``RangesAcked``) and, for 1-to-many ops, how far into each
root's outputs it got (``outputs_acked``: ``OutputsAcked``). A lost task's
keys wait, an orphan of its iteration, until every reader fences it: echoes
a task epoch at least the orphan's (``fences``), leaves, or stays silent
past ``fence_timeout_ms`` (``timeouts.py``). Only what changes the records is
an event; keys of an unknown task, or of an iteration that does not track
them, are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import model
from zmqdata._wire.lineage import Ranges
from zmqdata._wire.progress import REPORT_MARKS, covers, pack, unpack

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

MAX_MARKS = 65_536
"""The most roots an iteration keeps marks of (``model.Iteration.progress``)."""


def ack(
    state: DispatcherState, iteration: model.Iteration, acked: list[list[int]]
) -> None:
    """Applies a consumer's acknowledgements (``[task_id, lo, hi, ...]``).

    Only those that change something are events: keys of an unknown task,
    or of an iteration that does not track them, are ignored.
    """
    if not acked or not state.records.tracked(iteration):
        return
    for task_id, *keys in acked:
        held = iteration.unacked(task_id)
        if held is not None and _overlaps(held, keys):
            state.apply(ev.RangesAcked(iteration.iteration_id, task_id, tuple(keys)))


def outputs_acked(
    state: DispatcherState, iteration: model.Iteration, progress: list[list[int]]
) -> None:
    """Keeps the marks of a consumer's heartbeat that say more than those kept.

    Only for roots whose keys are still owed (after the keys it acknowledged
    with them), up to ``MAX_MARKS`` roots per iteration.
    """
    if not progress or not state.records.tracked(iteration):
        return
    news = [
        mark
        for numbers in progress[:REPORT_MARKS]
        if (mark := _news(iteration, numbers)) is not None
    ]
    if news:
        state.apply(ev.OutputsAcked(iteration.iteration_id, tuple(news)))


def _news(iteration: model.Iteration, numbers: list[int]) -> tuple[int, ...] | None:
    """A reported mark, packed, if it says more than the one kept for its root.

    A root without one gets one while its keys are owed and the iteration
    keeps fewer than ``MAX_MARKS``. None for a malformed mark.
    """
    mark = unpack(numbers)
    if mark is None:
        return None
    root, path = mark
    kept = iteration.progress
    known = unpack(kept.get(root[0], ()))
    if known is None:
        news = len(kept) < MAX_MARKS and iteration.owes(root[0])
    else:
        news = known[0] != root or not covers(known[1], path)
    return tuple(pack(mark)) if news else None


def fences(iteration: model.Iteration, client_id: int, epoch: int) -> bool:
    """Whether a client echoing ``epoch`` lets go of a lost task it held back."""
    return any(
        client_id in orphan["waiting"] and orphan["epoch"] <= epoch
        for orphan in iteration.orphans.values()
    )


def _overlaps(held: Ranges, keys: Sequence[int]) -> bool:
    """Whether any of ``keys`` (flat ranges) is in ``held``."""
    return any(
        held.missing(keys[i], keys[i + 1]) != [keys[i], keys[i + 1]]
        for i in range(0, len(keys), 2)
    )
