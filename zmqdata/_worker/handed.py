"""``HandedKeys``: the keys a task was handed, less what its replies covered.

Exactly once (``_wire/lineage.py``): a task notes the keys of the splits it
is handed; each reply says what its elements stand for (``cover``: a
``Coverage`` built from the taken elements' lineages, which leave the open
set); at the end, the open keys no buffered element stands for were dropped
(filtered, cut by ``take``, never read) and go with the end of sequence.
Elements mostly stand for the next key each, so ``cover`` checks that case for
a whole reply at once. Not thread-safe: ``TaskBuffer`` calls it under its lock.

>>> keys = HandedKeys()
>>> keys.handed(0, 10)
>>> reply = Coverage(); keys.cover([(0, 1), (1, 2), (2, 3), (5, 6)], reply)
>>> reply.keys, reply.widths
([0, 3, 5, 6], [4, 1])
>>> keys.dropped(buffered=[(6, 7)])
(3, 5, 7, 10)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from zmqdata._wire.lineage import Coverage, Lineage, Ranges


class HandedKeys:
    """Keys handed to one task and not covered by a reply yet."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open = Ranges()

    def handed(self, lo: int, hi: int) -> None:
        """The task was handed the keys ``[lo, hi)``."""
        self._open.add(lo, hi)

    def cover(
        self,
        lineages: Sequence[Lineage],
        coverage: Coverage,
        runs: Sequence[Sequence[int] | None] | None = None,
    ) -> None:
        """Adds the elements of ``lineages`` (taken, in order) to ``coverage``.

        ``runs``: per lineage, how many keys its elements stand for,
        ``[count, width, ...]`` (a block's: ``Block.runs``); None for one
        element standing for it all (each lineage, without ``runs``).
        """
        flat = list(itertools.chain.from_iterable(lineages))
        count = _one_key_each(lineages, runs)
        # The usual reply: one next key per element, as a range source makes.
        if (
            count
            and len(flat) == 2 * len(lineages)
            and flat[-1] - flat[0] == count
            and flat[2::2] == flat[1:-1:2]
        ):
            coverage.add_run(count, flat[0], flat[-1], 1)
            self._open.discard(flat[0], flat[-1])
            return
        for index, lineage in enumerate(lineages):
            widths = None if runs is None else runs[index]
            if widths is None:
                coverage.add(lineage)
            else:
                coverage.add_runs(lineage, widths)
            self._open.remove_all(lineage)

    def dropped(self, buffered: Iterable[Lineage]) -> Lineage:
        """The keys handed that no reply covered and no ``buffered`` element stands for."""
        rest = Ranges(self._open)
        for lineage in buffered:
            rest.remove_all(lineage)
        return tuple(rest)


def _one_key_each(
    lineages: Sequence[Lineage], runs: Sequence[Sequence[int] | None] | None
) -> int:
    """How many elements ``lineages`` stand for, if each may stand for one key; else 0."""
    if runs is None:
        return len(lineages)
    count = 0
    for widths in runs:
        if widths is None:
            count += 1
        elif len(widths) == 2 and widths[1] == 1:
            count += widths[0]
        else:
            return 0
    return count
