"""An endless ``repeat`` of data that makes nothing: the read ends, as it does locally.

Locally an endless ``repeat`` ends after a pass that made no element (as in
tf.data). Over DYNAMIC sharding one worker's empty pass says nothing: the
others may have taken that repetition's splits. So a task that starts the
next repetition says whether its last pass made anything (``GetSplit.empty_pass``),
and the dispatcher ends the read (``GetSplitReply.exhausted``) once every task
that took splits of one repetition said it made nothing there. Nobody waits
for that verdict: the next repetition's splits go out meanwhile (they make
nothing either, and their tasks learn the end with their next request).
A taker lost before it said leaves its repetition undecided.

Not state: a dispatcher that restarts forgets who took what, and only
judges the repetitions it saw from their first split, so an empty read ends
a pass or two later.

>>> passes = EmptyPasses()
>>> passes.took(task_id=1, repetition=0, first=True)
>>> passes.took(task_id=2, repetition=0, first=False)
>>> running = {1, 2}.__contains__
>>> passes.heard(task_id=2, repetition=1, empty_pass=True, running=running)
False
>>> passes.heard(task_id=1, repetition=1, empty_pass=True, running=running)
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

KEPT = 4
"""Repetitions watched at once (the older ones stay undecided)."""


@dataclass
class _Pass:
    takers: set[int] = field(default_factory=set)
    """The tasks handed splits of the repetition."""
    empty: set[int] = field(default_factory=set)
    """The takers that said their pass over it made nothing."""
    made: bool = False
    """A task said its pass over it made something."""


@dataclass
class EmptyPasses:
    """One iteration's repetitions seen from their first split: who took, who found nothing."""

    passes: dict[int, _Pass] = field(default_factory=dict)
    exhausted: bool = False
    """A whole repetition made nothing: the read is over."""

    def took(self, task_id: int, repetition: int, first: bool) -> None:
        """``task_id`` was handed splits of ``repetition`` (``first``: its first one)."""
        if first and repetition not in self.passes:
            self.passes[repetition] = _Pass()
            while len(self.passes) > KEPT:
                del self.passes[min(self.passes)]
        watched = self.passes.get(repetition)
        if watched is not None:
            watched.takers.add(task_id)

    def heard(
        self,
        task_id: int,
        repetition: int,
        empty_pass: bool,
        running: Callable[[int], bool],
    ) -> bool:
        """Hears a request for ``repetition``; True once the read is over.

        ``empty_pass``: the task's pass before it made nothing; ``running``:
        whether a task of the iteration still runs.
        """
        before = self.passes.get(repetition - 1)
        if self.exhausted or before is None:
            return self.exhausted
        if not empty_pass:
            before.made = True
        elif task_id in before.takers:
            before.empty.add(task_id)
        self.exhausted = (
            not before.made
            and before.takers <= before.empty
            and all(map(running, before.takers))
        )
        return self.exhausted
