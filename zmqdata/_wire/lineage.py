"""Lineage: which source elements an element of a DYNAMIC read stands for.

Exactly-once reads under worker loss (docs/reliability.md) track every element
of a splittable source by a **key**, ``repetition * STRIDE + index``: the
repetition of the split provider it was handed out in, and its index in the
source (a ``range`` / ``from_tensor_slices`` position, a ``list_files`` file).

* A **lineage** is what one output element covers: a flat tuple of half-open
  key ranges ``(lo0, hi0, lo1, hi1, ...)``, in the order the source read them.
  A batch covers its elements' keys; an element a ``filter`` let through also
  covers the keys it dropped before it; most elements cover one key.
* ``Ranges`` is a set of keys (sorted, disjoint ranges): what the dispatcher
  handed a task and has not seen acknowledged, what a reader consumed.
* ``Coverage`` is the lineage of a data reply: its elements' lineages joined,
  with how many keys each element covers (``widths``, run-length encoded), so
  a reader can tell which keys the elements it has not consumed yet cover.

>>> batch = join(join((4, 5), (5, 6)), (9, 10))
>>> batch
(4, 6, 9, 10)
>>> ranges = Ranges(); ranges.add_all((0, 100)); ranges.remove_all(batch); ranges
[0, 4, 6, 9, 10, 100]
>>> key(2, 7) == 2 * STRIDE + 7, split_key(key(2, 7))
(True, (2, 7))
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from zmqdata._wire.progress import Mark, Path, keep_latest, pack

STRIDE = 2**40
"""Keys per repetition: sources hold fewer elements than this."""

Lineage = tuple[int, ...]
EMPTY: Lineage = ()


def key(repetition: int, index: int) -> int:
    """The key of element ``index`` of the source, handed out in ``repetition``."""
    return repetition * STRIDE + index


def split_key(value: int) -> tuple[int, int]:
    """``(repetition, index)`` of a key."""
    return divmod(value, STRIDE)


def join(first: Lineage, second: Lineage) -> Lineage:
    """``first`` then ``second``; a range ending where the next starts is merged.

    >>> join((0, 2), (2, 3)), join((0, 2), (5, 6)), join(EMPTY, (1, 2))
    ((0, 3), (0, 2, 5, 6), (1, 2))
    """
    if not first:
        return second
    if not second:
        return first
    if first[-1] == second[0]:
        return (*first[:-1], *second[1:])
    return first + second


def cut(lineage: Lineage, keys: int) -> tuple[Lineage, Lineage]:
    """The first ``keys`` keys of ``lineage`` (in its order), and the rest.

    >>> cut((0, 3, 10, 12), 4), cut((0, 3, 10, 12), 3), cut(EMPTY, 0)
    (((0, 3, 10, 11), (11, 12)), ((0, 3), (10, 12)), ((), ()))
    """
    for i in range(0, len(lineage), 2):
        lo, hi = lineage[i], lineage[i + 1]
        if keys < hi - lo:
            if not keys:
                return lineage[:i], lineage[i:]
            return (*lineage[:i], lo, lo + keys), (lo + keys, *lineage[i + 1 :])
        keys -= hi - lo
    return lineage, EMPTY


def keys_only(lineage: Lineage) -> Lineage:
    """``lineage`` without its marks (``_dataset/marks.py``: negative pairs).

    >>> keys_only((0, 2, -4, -4, 5, 6))
    (0, 2, 5, 6)
    """
    found: Lineage = EMPTY
    for i in range(0, len(lineage), 2):
        if lineage[i] >= 0:
            found = join(found, lineage[i : i + 2])
    return found


def size(lineage: Sequence[int]) -> int:
    """How many keys a lineage (or ``Ranges``) covers.

    >>> size((0, 3, 10, 12))
    5
    """
    return sum(lineage[i + 1] - lineage[i] for i in range(0, len(lineage), 2))


class Ranges(list[int]):
    """A set of keys as sorted, disjoint, non-adjacent ranges, flat: ``[lo, hi, ...]``.

    A list, so it packs with msgpack as one (journal, snapshots, messages).

    >>> r = Ranges([0, 10]); r.discard(3, 5); r
    [0, 3, 5, 10]
    >>> r.add(3, 5); r, 4 in r, r.count_keys()
    ([0, 10], True, 10)
    >>> r.take(4), r
    ([0, 4], [4, 10])
    >>> r.missing(0, 12)
    [0, 4, 10, 12]
    """

    def add(self, lo: int, hi: int) -> None:
        """Adds the keys ``[lo, hi)``, merging the ranges it overlaps or touches."""
        if lo >= hi:
            return
        first = (
            bisect.bisect_left(self, lo) // 2
        )  # the first range ending at lo or later
        last = (
            bisect.bisect_right(self, hi) - 1
        ) // 2  # the last starting at hi or before
        if first > last:
            self[2 * first : 2 * first] = [lo, hi]
        else:
            merged = [min(lo, self[2 * first]), max(hi, self[2 * last + 1])]
            self[2 * first : 2 * last + 2] = merged

    def discard(self, lo: int, hi: int) -> None:
        """Removes the keys ``[lo, hi)`` (those not in the set are ignored)."""
        if lo >= hi:
            return
        first = bisect.bisect_right(self, lo) // 2  # the first range ending after lo
        last = (bisect.bisect_left(self, hi) - 1) // 2  # the last starting before hi
        if first > last:
            return
        kept = []
        if self[2 * first] < lo:
            kept += [self[2 * first], lo]
        if self[2 * last + 1] > hi:
            kept += [hi, self[2 * last + 1]]
        self[2 * first : 2 * last + 2] = kept

    def add_all(self, flat: Sequence[int]) -> None:
        """Adds every range of a flat ``(lo, hi, ...)`` sequence."""
        for i in range(0, len(flat), 2):
            self.add(flat[i], flat[i + 1])

    def remove_all(self, flat: Sequence[int]) -> None:
        """Removes every range of a flat ``(lo, hi, ...)`` sequence."""
        for i in range(0, len(flat), 2):
            self.discard(flat[i], flat[i + 1])

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        return bisect.bisect_right(self, value) % 2 == 1

    def count_keys(self) -> int:
        """How many keys the set holds."""
        return size(self)

    def take(self, most: int) -> list[int]:
        """Removes and returns (flat) up to ``most`` of the lowest keys."""
        taken: list[int] = []
        while self and most > 0:
            lo, hi = self[0], self[1]
            hi = min(hi, lo + most)
            taken.extend((lo, hi))
            most -= hi - lo
            self.discard(lo, hi)
        return taken

    def missing(self, lo: int, hi: int) -> list[int]:
        """The ranges of ``[lo, hi)`` that are not in the set, flat."""
        out: list[int] = []
        position = lo
        i = 2 * (bisect.bisect_right(self, lo) // 2)
        while i < len(self) and self[i] < hi:
            if self[i] > position:
                out.extend((position, self[i]))
            position = max(position, self[i + 1])
            i += 2
        if position < hi:
            out.extend((position, hi))
        return out

    def ranges(self) -> Iterable[tuple[int, int]]:
        """The ranges, as ``(lo, hi)`` pairs."""
        return zip(self[::2], self[1::2], strict=True)


class Coverage:
    """The lineage of a data reply, element by element, built as elements are added.

    ``keys`` holds the elements' lineages joined (then, at the end of a task,
    the keys it dropped: ``extend``); ``widths`` says how many keys each
    element covers, run-length encoded ``[count, width, ...]``.

    >>> reply = Coverage(); reply.add((0, 1)); reply.add((1, 2)); reply.add((2, 5))
    >>> reply.keys, reply.widths
    ([0, 5], [2, 1, 1, 3])
    >>> Coverage.tail(reply.keys, reply.widths, 1), Coverage.tail(reply.keys, reply.widths, 2)
    ([2, 5], [1, 5])

    ``progress`` holds the latest mark of each root its elements carry
    (``_wire/progress.py``).
    """

    __slots__ = ("keys", "progress", "widths")

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.widths: list[int] = []
        self.progress: dict[tuple[int, ...], Path] = {}

    def mark(self, marks: Iterable[Mark]) -> None:
        """Notes the marks of an element added."""
        for root, path in marks:
            keep_latest(self.progress, root, path)

    def packed_progress(self) -> list[list[int]]:
        """``progress`` packed (``progress.pack``), less the roots the reply's keys end."""
        if not self.progress:
            return []
        covered = Ranges()
        covered.add_all(self.keys)
        return [
            pack(mark) for mark in self.progress.items() if mark[0][0] not in covered
        ]

    def add(self, lineage: Lineage) -> None:
        """Appends one element covering ``lineage``."""
        self.extend(lineage)
        self._count(1, size(lineage))

    def add_run(self, count: int, lo: int, hi: int, width: int) -> None:
        """Appends ``count`` elements of ``width`` keys each, covering ``[lo, hi)``."""
        self.extend((lo, hi))
        self._count(count, width)

    def add_runs(self, lineage: Lineage, runs: Sequence[int]) -> None:
        """Appends elements covering ``lineage`` in order, ``runs`` ``[count, width, ...]``."""
        self.extend(lineage)
        for i in range(0, len(runs), 2):
            self._count(runs[i], runs[i + 1])

    def extend(self, lineage: Sequence[int]) -> None:
        """Appends keys no element covers (what a finished task dropped)."""
        keys = self.keys
        for i in range(0, len(lineage), 2):
            lo, hi = lineage[i], lineage[i + 1]
            if lo >= hi:
                continue
            if keys and keys[-1] == lo:
                keys[-1] = hi
            else:
                keys.extend((lo, hi))

    def _count(self, count: int, width: int) -> None:
        """``count`` more elements of ``width`` keys each, in ``widths``."""
        widths = self.widths
        if widths and widths[-1] == width:
            widths[-2] += count
        else:
            widths += (count, width)

    @staticmethod
    def tail(keys: Sequence[int], widths: Sequence[int], elements: int) -> list[int]:
        """The keys (flat ranges) the last ``elements`` elements of a reply cover."""
        covered = 0
        for i in range(0, len(widths), 2):
            covered += widths[i] * widths[i + 1]
        remaining = 0
        left = elements
        for i in range(len(widths) - 2, -1, -2):
            n = min(left, widths[i])
            remaining += n * widths[i + 1]
            left -= n
            if not left:
                break
        skip = covered - remaining  # keys covered by the elements before the tail
        out: list[int] = []
        for i in range(0, len(keys), 2):
            lo, hi = keys[i], keys[i + 1]
            if skip >= hi - lo:
                skip -= hi - lo
                continue
            lo += skip
            skip = 0
            take = min(hi - lo, remaining)
            if take > 0:
                out.extend((lo, lo + take))
                remaining -= take
            if not remaining:
                break
        return out
