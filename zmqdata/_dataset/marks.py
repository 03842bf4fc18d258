"""``Marks``: the progress marks of one pass's elements, carried in their lineages.

An expanding op gives each output a mark (``_wire/progress.py``): its input
element's ``Parent`` (the root and the path to that element) and its index
among the element's outputs. Marks ride in lineages as a pair of equal
negative numbers ``(-n - 1, -n - 1)``, ``n`` a number in this table: a range of
no keys, which joining, counting and key sets leave alone, so every op that
passes lineages on passes marks on too. The worker takes them out (``split``)
as it buffers an element. Per output this costs one table entry, no tuple.

>>> marks = Marks()
>>> parent = marks.parent((4, 5))
>>> first, last = marks.output(parent, 0), marks.output(parent, 1)
>>> marks.split(first), marks.split(last + (4, 5))  # then the root is done
(((), [((4, 5), (0,))]), ((4, 5), []))
>>> marks.parent(marks.output(parent, 0)).path, marks.parent(first + last)
((0,), None)
>>> marks.resume[(4, 5)] = (0,)
>>> marks.delivered(parent, 0), marks.delivered(parent, 1)
(True, False)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from zmqdata._wire.lineage import EMPTY, Lineage, join, keys_only
from zmqdata._wire.progress import MAX_DEPTH, MAX_ROOT, Mark, Path, covers, keep_latest


class Parent:
    """An input element of an expanding op: its root and its path from there."""

    __slots__ = ("path", "root")

    def __init__(self, root: tuple[int, ...], path: Path) -> None:
        self.root, self.path = root, path


class Marks:
    """Marks in flight by number, and the resume points a task was handed.

    The pass's threads share it: each mark is added by one and taken by one
    (single dict operations, atomic under the GIL).
    """

    def __init__(self) -> None:
        self._table: dict[int, tuple[Parent, int]] = {}
        self._numbers = itertools.count()
        self.resume: dict[tuple[int, ...], Path] = {}
        """Root -> the latest mark a consumer acknowledged (a lost task's)."""

    def output(self, parent: Parent, index: int) -> Lineage:
        """The lineage that carries the mark of output ``index`` of ``parent``."""
        number = next(self._numbers)
        self._table[number] = (parent, index)
        return (-number - 1, -number - 1)

    def parent(self, lineage: Lineage) -> Parent | None:
        """The ``Parent`` an expanding op's input element of ``lineage`` is.

        An element marked once is that output: its outputs extend the mark.
        An element with keys and no mark is a root. Anything else (outputs
        put together by a ``batch``, a ``filter``'s dropped outputs) is not
        one output: its own outputs are not marked.
        """
        found = [self._table.get(-n - 1) for n in lineage[::2] if n < 0]
        if len(found) == 1:
            entry = found[0]
            if entry is None or len(entry[0].path) >= MAX_DEPTH:
                return None
            parent, index = entry
            return Parent(parent.root, (*parent.path, index))
        if found or not lineage or len(lineage) > MAX_ROOT:
            return None
        return Parent(tuple(lineage), ())

    def rows(self, lineage: Lineage, size: int) -> list[Lineage] | None:
        """The marks of a batch's ``size`` rows, if ``lineage`` holds one per row.

        A batch joins its rows' lineages in row order: when each row was one
        marked output (not a root), its ``unbatch`` gives each element its
        own row's mark back, so a consumer acknowledges each one.
        """
        marks = [
            lineage[i : i + 2] for i in range(0, len(lineage), 2) if lineage[i] < 0
        ]
        if len(marks) != size or any(-m[0] - 1 not in self._table for m in marks):
            return None
        return marks

    def sources(self, lineage: Lineage) -> Lineage:
        """The keys of the source elements ``lineage``'s element was made of.

        Its marks' roots where it carries marks (an expanding op's output, or
        a batch of them: the keys it claims are those of inputs finished
        before it), else its keys. A root may come more than once.
        ``lineage_records.py``: which records made an element.

        >>> marks = Marks()
        >>> marks.sources(marks.output(marks.parent((4, 6)), 0) + (2, 3)), marks.sources((2, 3))
        ((4, 6), (2, 3))
        """
        roots = EMPTY
        for lo in lineage[::2]:
            entry = self._table.get(-lo - 1) if lo < 0 else None
            if entry is not None:
                roots = join(roots, entry[0].root)
        return roots or keys_only(lineage)

    def delivered(self, parent: Parent, index: int) -> bool:
        """Whether a consumer acknowledged output ``index`` of ``parent`` (a lost task's)."""
        if not self.resume:
            return False
        resume = self.resume.get(parent.root)
        return resume is not None and covers(resume, (*parent.path, index))

    def split(self, lineage: Lineage) -> tuple[Lineage, list[Mark]]:
        """The keys of ``lineage``, and its marks (the latest of each root)."""
        if not lineage or min(lineage) >= 0:
            return lineage, []
        keys: list[int] = []
        last: dict[Parent, int] = {}
        table = self._table
        for i in range(0, len(lineage), 2):
            lo = lineage[i]
            if lo < 0:
                _note_latest(last, table.pop(-lo - 1, None))
            elif keys and keys[-1] == lo:
                keys[-1] = lineage[i + 1]
            else:
                keys += (lo, lineage[i + 1])
        return tuple(keys), _open_marks(keys, last)


def _note_latest(last: dict[Parent, int], entry: tuple[Parent, int] | None) -> None:
    """Keeps in ``last`` the latest output index of ``entry``'s parent."""
    if entry is not None and last.get(entry[0], -1) < entry[1]:
        last[entry[0]] = entry[1]


def _open_marks(keys: Sequence[int], last: dict[Parent, int]) -> list[Mark]:
    """The latest mark of each root in ``last`` that ``keys`` do not finish."""
    roots: dict[tuple[int, ...], Path] = {}
    for parent, index in last.items():
        if claims(keys, parent.root[0]):
            continue  # the root is done: its keys need no mark
        keep_latest(roots, parent.root, (*parent.path, index))
    return list(roots.items())


def claims(keys: Sequence[int], key: int) -> bool:
    """Whether the flat ranges ``keys`` hold ``key``."""
    return any(keys[i] <= key < keys[i + 1] for i in range(0, len(keys), 2))
