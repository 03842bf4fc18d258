"""Output keys: exactly once for every pipeline, by split and output index (pure).

An exactly-once ``distributed_epoch`` job (one consumer or several sharing it;
not a multi-rank one, which ``deal.py`` numbers) runs its pipeline on each
split alone, from scratch, as a multi-rank job does, so a split's outputs are
a function of the split: whatever ops run on the workers (filters, batches,
1-to-many ops, nested or not, seeded shuffles), output ``i`` of split ``q`` is
the same element every time the split is made. Its **output key** is

    ``(repetition * splits + q) * PER_SPLIT + i``

(``splits`` per repetition of the source). The dispatcher hands a split out as
the range of its keys not delivered yet (all ``PER_SPLIT`` of them for a
fresh split); the worker runs the split and sends output ``i`` claiming its
key, and the first output it sends after a split ends also claims the keys
past that split's last output (none was made). Consumers acknowledge keys,
positions are the keys consumed, and a lost worker's or a resumed read's
keys go out again as parts of splits: the worker makes the split again and
sends only the outputs whose keys were handed. Nothing is tracked per op.

>>> key = base(repetition=1, split=2, splits=5) + 3
>>> locate(key, splits=5), split_base(key) == base(1, 2, 5)
((1, 2, 3), True)
>>> count_splits([base(0, 0, 5), base(0, 0, 5) + 9, base(0, 3, 5), base(0, 5, 5)])
3
"""

from __future__ import annotations

from collections.abc import Sequence

OUTPUT_BITS = 32
PER_SPLIT = 1 << OUTPUT_BITS
"""Keys per split: the most outputs one split may make."""


def base(repetition: int, split: int, splits: int) -> int:
    """The key of output 0 of ``split`` handed out in ``repetition``."""
    return (repetition * splits + split) << OUTPUT_BITS


def split_base(key: int) -> int:
    """The key of output 0 of the split ``key`` belongs to."""
    return key >> OUTPUT_BITS << OUTPUT_BITS


def locate(key: int, splits: int) -> tuple[int, int, int]:
    """``(repetition, split, index)`` of an output key."""
    whole, index = divmod(key, PER_SPLIT)
    repetition, split = divmod(whole, splits)
    return repetition, split, index


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
