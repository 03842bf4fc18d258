"""Output keys: exactly once through 1-to-many ops, by split and output index (pure).

An exactly-once ``distributed_epoch`` job whose pipeline has a 1-to-many op
(``unbatch``, ``flat_map``, ``interleave``; not a multi-rank job, which
``deal.py`` numbers) runs the pipeline up to its last such op on each split
alone, from scratch (``_dataset/ops/split_runs.py``), so output ``i`` of split
``q`` is the same element every time the split is made. Its **output key** is

    ``OUTPUT_KEYS + (repetition * splits + q) * PER_SPLIT + i``

(``splits`` per repetition of the source). The dispatcher hands a split out as
the range of its keys not delivered yet (all ``PER_SPLIT`` of them for a
fresh split); the worker sends output ``i`` claiming its key (the ops above
claim them as they use them), and the first output after a split ends also
claims the keys past that split's last output (none was made). Consumers
acknowledge keys, positions are the keys consumed, and a lost worker's or a
resumed read's keys go out again as parts of splits: the worker makes the
split again and sends only the outputs whose keys were handed. Keys of
source elements (``lineage.key``: the other exactly-once jobs) are below
``OUTPUT_KEYS``, so a position tells which it holds.

>>> key = base(repetition=1, split=2, splits=5) + 3
>>> locate(key, splits=5), split_base(key) == base(1, 2, 5)
((1, 2, 3), True)
>>> count_splits([base(0, 0, 5), base(0, 0, 5) + 9, base(0, 3, 5), base(0, 5, 5)])
3
"""

from __future__ import annotations

from collections.abc import Sequence

from zmqdata.errors import FailedPreconditionError

OUTPUT_BITS = 32
PER_SPLIT = 1 << OUTPUT_BITS
"""Keys per split: the most outputs one split may make."""
OUTPUT_KEYS = 1 << 62
"""The first output key: source elements' keys are below it."""
MAX_SPLIT_RUNS = 1 << 30
"""Splits of all repetitions one job may run (``repetition * splits + split``)."""


def base(repetition: int, split: int, splits: int) -> int:
    """The key of output 0 of ``split`` handed out in ``repetition``."""
    run = repetition * splits + split
    if run >= MAX_SPLIT_RUNS:
        raise FailedPreconditionError(
            f"an exactly-once read with a 1-to-many op runs at most {MAX_SPLIT_RUNS} "
            f"splits in all; repetition {repetition} of {splits} splits is past it "
            "(read it with exactly_once=False)"
        )
    return OUTPUT_KEYS + (run << OUTPUT_BITS)


def split_base(key: int) -> int:
    """The key of output 0 of the split ``key`` belongs to."""
    return key >> OUTPUT_BITS << OUTPUT_BITS


def locate(key: int, splits: int) -> tuple[int, int, int]:
    """``(repetition, split, index)`` of an output key."""
    whole, index = divmod(key - OUTPUT_KEYS, PER_SPLIT)
    repetition, split = divmod(whole, splits)
    return repetition, split, index


def are_output_keys(keys: Sequence[int]) -> bool:
    """Whether the flat key ranges ``keys`` are output keys (none: True).

    >>> are_output_keys([0, 10]), are_output_keys([OUTPUT_KEYS, OUTPUT_KEYS + 3])
    (False, True)
    """
    return not keys or keys[0] >= OUTPUT_KEYS


def count_splits(ranges: Sequence[int]) -> int:
    """How many splits the flat key ranges ``ranges`` touch (for status lines)."""
    touched = 0
    last = -1
    for i in range(0, len(ranges), 2):
        first = max(ranges[i] >> OUTPUT_BITS, last + 1)
        end = (ranges[i + 1] - 1) >> OUTPUT_BITS
        if end >= first:
            touched += end - first + 1
            last = end
    return touched
