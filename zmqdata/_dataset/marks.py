"""``Marks``: the progress marks of one pass's elements, carried in their lineages.

An expanding op gives each output a mark (``_wire/progress.py``). Marks ride
in lineages as a pair of equal negative numbers ``(-n - 1, -n - 1)``, ``n``
a number in this table: a range of no keys, which joining, counting and key
sets leave alone, so every op that passes lineages on passes marks on too.
The worker takes them out (``split``) as it buffers an element.

>>> marks = Marks()
>>> first = marks.lineage((4, 5), (0,))
>>> marks.parent(first), marks.parent((4, 5)), marks.parent(())
(((4, 5), (0,)), ((4, 5), ()), None)
>>> last = marks.lineage((4, 5), (1,))
>>> marks.split(first + (4, 5) + last)
((4, 5), [((4, 5), (1,))])
>>> marks.resume[(4, 5)] = (0,)
>>> marks.delivered(((4, 5), (0,))), marks.delivered(((4, 5), (1,)))
(True, False)
"""

from __future__ import annotations

import itertools

from zmqdata._wire.lineage import EMPTY, Lineage, join
from zmqdata._wire.progress import MAX_DEPTH, MAX_ROOT, Mark, Path, covers, latest


class Marks:
    """Marks in flight by number, and the resume points a task was handed.

    The pass's threads share it: each mark is added by one and taken by one
    (single dict operations, atomic under the GIL).
    """

    def __init__(self) -> None:
        self._table: dict[int, Mark] = {}
        self._numbers = itertools.count()
        self.resume: dict[tuple[int, ...], Path] = {}
        """Root -> the latest mark a consumer acknowledged (a lost task's)."""

    def lineage(self, root: tuple[int, ...], path: Path) -> Lineage:
        """The lineage that carries the mark ``(root, path)``."""
        number = next(self._numbers)
        self._table[number] = (root, path)
        return (-number - 1, -number - 1)

    def parent(self, lineage: Lineage) -> Mark | None:
        """The mark an expanding op's input element continues, if it has one.

        An element marked once is that output: its outputs extend the mark.
        An element with keys and no mark is a root. Anything else (outputs
        put together by a ``batch``, a ``filter``'s dropped outputs) is not
        one output: its own outputs are not marked.
        """
        found = [self._table.get(-lineage[i] - 1) for i in _marked(lineage)]
        if len(found) == 1:
            mark = found[0]
            return mark if mark is not None and len(mark[1]) < MAX_DEPTH else None
        if found or not lineage or len(lineage) > MAX_ROOT:
            return None
        return tuple(lineage), ()

    def split(self, lineage: Lineage) -> tuple[Lineage, list[Mark]]:
        """The keys of ``lineage``, and its marks (the latest of each root)."""
        marked = set(_marked(lineage))
        if not marked:
            return lineage, []
        keys: Lineage = EMPTY
        roots: dict[tuple[int, ...], Path] = {}
        for i in range(0, len(lineage), 2):
            if i in marked:
                mark = self._table.pop(-lineage[i] - 1, None)
                if mark is not None:
                    root, path = mark
                    roots[root] = latest(roots[root], path) if root in roots else path
            else:
                keys = join(keys, lineage[i : i + 2])
        return keys, list(roots.items())

    def delivered(self, mark: Mark) -> bool:
        """Whether a consumer acknowledged the output ``mark`` (a lost task's)."""
        root, path = mark
        resume = self.resume.get(root)
        return resume is not None and covers(resume, path)


def _marked(lineage: Lineage) -> list[int]:
    """The positions of the marks in ``lineage``."""
    return [i for i in range(0, len(lineage), 2) if lineage[i] < 0]
