"""``Ledger``: the keys a DYNAMIC task was handed and has not output yet.

Exactly once (``_wire/lineage.py``): a task's producer notes the keys of the
splits it is handed and the lineage of every element it puts in its buffer;
what is left when the pipeline ends was dropped (filtered, skipped, past a
``take``, never read) and goes with the task's end of sequence, so readers
acknowledge those keys too. Elements mostly cover the next keys in order, so
they extend one run, folded into the set only when the run breaks.

>>> ledger = Ledger()
>>> ledger.handed(0, 10)
>>> for k in (0, 1, 2, 5, 6): ledger.output((k, k + 1))
>>> ledger.dropped()
(3, 5, 7, 10)
"""

from __future__ import annotations

from zmqdata._wire.lineage import Lineage, Ranges


class Ledger:
    """Keys handed to one task minus the keys its elements cover (producer thread)."""

    def __init__(self) -> None:
        self._open = Ranges()
        self._run_lo = self._run_hi = 0
        """Keys output last, in one run not yet taken off ``_open``."""

    def handed(self, lo: int, hi: int) -> None:
        """The task was handed the keys ``[lo, hi)``."""
        self._open.add(lo, hi)

    def output(self, lineage: Lineage) -> None:
        """The task output an element covering ``lineage``."""
        if len(lineage) == 2 and lineage[0] == self._run_hi:
            self._run_hi = lineage[1]
            return
        self._flush()
        if len(lineage) == 2:
            self._run_lo, self._run_hi = lineage
        else:
            self._open.remove_all(lineage)

    def dropped(self) -> Lineage:
        """The keys handed and not output (at the end: what the task dropped)."""
        self._flush()
        return tuple(self._open)

    def _flush(self) -> None:
        self._open.discard(self._run_lo, self._run_hi)
        self._run_lo = self._run_hi
