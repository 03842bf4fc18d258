"""``Hold``: exactly once, what a reader receives after a silence waits (pure).

A reader that sent no heartbeat for its silence threshold (``core.SILENCE_S``)
may have been fenced out of a lost task: the replies it receives then wait
until the dispatcher answers the heartbeat sent on waking, whose task list
says which tasks are still read. The core delivers the replies of those and
drops the others' (``ReadCore._release_held``).

>>> hold = Hold[str]()
>>> hold.begin(5); hold.begin(6); hold.keep(1, "reply"); hold.keep(2, "other")
>>> hold.active, hold.holding
(True, True)
>>> hold.release(4), hold.release(5)
(None, [(1, 'reply'), (2, 'other')])
>>> hold.active, hold.holding
(False, False)
"""

from __future__ import annotations

from typing import Generic, TypeVar

_T = TypeVar("_T")


class Hold(Generic[_T]):
    """Replies held, per task, until the answer to one heartbeat."""

    def __init__(self) -> None:
        self.until: int | None = None
        """The heartbeat whose answer ends the hold (None: not holding)."""
        self._held: list[tuple[int, _T]] = []

    @property
    def active(self) -> bool:
        """Whether what arrives now is to be held."""
        return self.until is not None

    @property
    def holding(self) -> bool:
        """Whether some reply is held."""
        return bool(self._held)

    def begin(self, request_id: int) -> None:
        """Holds what arrives until heartbeat ``request_id`` is answered (if not yet)."""
        if self.until is None:
            self.until = request_id

    def keep(self, task_id: int, reply: _T) -> None:
        """Holds ``reply`` of ``task_id``."""
        self._held.append((task_id, reply))

    def release(self, request_id: int) -> list[tuple[int, _T]] | None:
        """The dispatcher answered heartbeat ``request_id``: what was held, if it ends the hold.

        None while the hold goes on (an answer to an earlier heartbeat).
        """
        if self.until is None or request_id < self.until:
            return None
        held, self._held, self.until = self._held, [], None
        return held
