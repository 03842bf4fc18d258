"""``Acks``: the keys a reader received and the dispatcher has not confirmed (pure).

Exactly once (``_wire/lineage.py``): every data reply says which source keys
its elements stand for. The reader reports them per task in each heartbeat
until the dispatcher answers that heartbeat, so a lost heartbeat (a
dispatcher stalled or restarting) loses no acknowledgement; reporting a key
twice is harmless. A report holds at most ``REPORT_NUMBERS`` numbers (the
dispatcher refuses more); what does not fit goes in the next heartbeats, and
``complete`` says whether everything received was reported. The marks of
1-to-many ops' outputs (``_wire/progress.py``) are reported the same way, the
latest of each root (``progress``).

>>> acks = Acks()
>>> acks.received(7, [0, 4]); acks.received(7, [4, 6])
>>> acks.report(request_id=1)
[[7, 0, 6]]
>>> acks.received(8, [9, 10]); acks.confirmed(1); acks.report(request_id=2)
[[8, 9, 10]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from zmqdata._wire.lineage import Ranges
from zmqdata._wire.progress import REPORT_MARKS, Mark, Path, keep_latest_packed, pack

_T = TypeVar("_T")

REPORT_NUMBERS = 8_192
"""The most task ids and keys one heartbeat reports (the dispatcher's cap is 65,536)."""


class Acks:
    """Per task, the keys received and not confirmed; what each heartbeat carried."""

    def __init__(self) -> None:
        self._open: dict[int, Ranges] = {}
        self._sent: dict[int, list[list[int]]] = {}
        """Heartbeat request id -> the report it carried."""
        self._marks: dict[tuple[int, ...], Path] = {}
        self._marks_sent: dict[int, list[Mark]] = {}
        self.complete = True
        """Whether the last report held every key (and mark) received and not
        confirmed."""

    def received(
        self,
        task_id: int,
        keys: Sequence[int],
        progress: Sequence[Sequence[int]] = (),
    ) -> None:
        """A reply of ``task_id`` covered ``keys`` (flat ranges), with marks ``progress``."""
        if keys:
            self._open.setdefault(task_id, Ranges()).add_all(keys)
        keep_latest_packed(self._marks, progress)

    def progress(self, request_id: int) -> list[list[int]]:
        """The marks to report with heartbeat ``request_id`` (after ``report``)."""
        marks = list(self._marks.items())[:REPORT_MARKS]
        if len(marks) < len(self._marks):
            self.complete = False
        if marks:
            self._marks_sent[request_id] = marks
        return [pack(mark) for mark in marks]

    def report(self, request_id: int) -> list[list[int]]:
        """``[[task_id, lo, hi, ...], ...]`` for the heartbeat ``request_id``."""
        report, room = [], REPORT_NUMBERS
        for task_id, keys in self._open.items():
            part = keys[: max(0, room - 1) // 2 * 2]
            if part:
                report.append([task_id, *part])
                room -= 1 + len(part)
        self.complete = sum(len(keys) for keys in self._open.values()) == sum(
            len(entry) - 1 for entry in report
        )
        if report:
            self._sent[request_id] = report
        return report

    def confirmed(self, request_id: int) -> None:
        """The dispatcher answered heartbeat ``request_id``.

        What it and earlier heartbeats carried is kept there: not reported again.
        """
        for report in _pop_up_to(self._sent, request_id):
            for task_id, *keys in report:
                self._forget_keys(task_id, keys)
        for marks in _pop_up_to(self._marks_sent, request_id):
            for root, path in marks:
                if self._marks.get(root) == path:
                    del self._marks[root]

    def _forget_keys(self, task_id: int, keys: list[int]) -> None:
        """``keys`` (flat ranges) of ``task_id`` are confirmed: no longer open."""
        ranges = self._open.get(task_id)
        if ranges is not None:
            ranges.remove_all(keys)
            if not ranges:
                del self._open[task_id]


def _pop_up_to(sent: dict[int, _T], request_id: int) -> list[_T]:
    """Takes out what heartbeats up to ``request_id`` carried, oldest first.

    >>> sent = {1: "a", 2: "b", 3: "c"}
    >>> _pop_up_to(sent, 2), sent
    (['a', 'b'], {3: 'c'})
    """
    return [sent.pop(i) for i in [i for i in sent if i <= request_id]]
