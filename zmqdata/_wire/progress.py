"""Progress marks: how far the outputs of one input element were delivered.

An op that makes several elements of one input element (``unbatch``,
``flat_map``, ``interleave``) claims the input's keys only with its last
output (``_wire/lineage.py``). So that a lost worker's successor does not make
the outputs delivered before again, every output also carries a **mark**
``(root, path)``: ``root`` is the input element's keys (flat ranges), ``path``
the output's position in it, ``(i,)``; an expanding op below another extends
its input's path, ``(i, j)``. Consumers acknowledge the marks of what they
received, as they do keys; the dispatcher keeps the latest mark of each root
whose keys are still owed and hands it out with them; a worker that reads
that root again skips the outputs the mark ``covers``.

A mark says its output and every output before it were delivered: in
``covers``' order, a path covers the paths before it and those inside it
(``(3,)`` is output 3 whole, with all an op below made of it).

>>> covers((3,), (2, 9)), covers((3,), (3, 9)), covers((3, 1), (3,)), covers((3, 1), (3, 1))
(True, True, False, True)
>>> latest((3, 1), (3,)), latest((2,), (1, 5))
((3,), (2,))
>>> unpack(pack(((10, 11), (4, 2))))
((10, 11), (4, 2))
"""

from __future__ import annotations

from collections.abc import Sequence

Path = tuple[int, ...]
Mark = tuple[tuple[int, ...], Path]
"""``(root, path)``: the root's keys as flat ranges, the output's position."""

MAX_ROOT = 64
"""The most numbers a mark's root holds (a longer root is not marked)."""
MAX_DEPTH = 8
"""The most expanding ops one above another that marks follow."""
REPORT_MARKS = 256
"""The most marks one heartbeat reports (and the dispatcher reads)."""


def covers(resume: Sequence[int], path: Sequence[int]) -> bool:
    """Whether the output at ``path`` was delivered if the one at ``resume`` was."""
    for done, at in zip(resume, path, strict=False):
        if done != at:
            return at < done
    return len(resume) <= len(path)


def latest(first: Path, second: Path) -> Path:
    """The mark of the two that says more was delivered."""
    return first if covers(first, second) else second


def keep_latest(
    progress: dict[tuple[int, ...], Path], root: tuple[int, ...], path: Path
) -> None:
    """Notes ``path`` as ``root``'s mark in ``progress`` unless a later one is there.

    >>> progress = {}; keep_latest(progress, (4, 5), (2,)); keep_latest(progress, (4, 5), (1, 7))
    >>> progress
    {(4, 5): (2,)}
    """
    known = progress.get(root)
    progress[root] = path if known is None else latest(known, path)


def keep_latest_packed(
    progress: dict[tuple[int, ...], Path], packed: Sequence[Sequence[int]]
) -> None:
    """``keep_latest`` for each mark of ``packed`` (``pack``'s); others are skipped."""
    for numbers in packed:
        mark = unpack(numbers)
        if mark is not None:
            keep_latest(progress, *mark)


def pack(mark: Mark) -> list[int]:
    """A mark as one list of numbers: ``[len(root), *root, *path]``."""
    root, path = mark
    return [len(root), *root, *path]


def unpack(numbers: Sequence[int]) -> Mark | None:
    """The mark of ``pack``'s numbers; None for numbers that are not one."""
    if not numbers or any(not isinstance(n, int) or n < 0 for n in numbers):
        return None
    length = numbers[0]
    root, path = tuple(numbers[1 : 1 + length]), tuple(numbers[1 + length :])
    if (
        not 2 <= length <= MAX_ROOT
        or length % 2
        or not 1 <= len(path) <= MAX_DEPTH
        or any(root[i] >= root[i + 1] for i in range(0, length, 2))
    ):
        return None
    return root, path
