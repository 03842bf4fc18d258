"""``Handoff``: a value one thread asks for and a loop thread makes, on request.

A loop owns its state; another thread (a metrics scrape) must not read it while
the loop changes it. The other thread calls ``get``, which waits until the
loop's next ``serve`` has made a fresh value (made after the request); ``serve``
is a cheap int compare when nobody asked. A ``make`` that raises is logged and
hands over None: the loop goes on.

>>> handoff = Handoff[int](logging.getLogger("zmqdata.test"))
>>> handoff.serve(lambda: 1)  # nobody asked: nothing made
>>> handoff.get(timeout_s=0.0) is None
True
>>> handoff.serve(lambda: 2)  # an earlier request (timed out) is served
>>> handoff.latest
2
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    """Values made by the thread that calls ``serve`` for those that call ``get``."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._cond = threading.Condition()
        self._asked = 0
        self._made = 0
        self.latest: T | None = None
        """The last value made (None before the first)."""

    def get(self, timeout_s: float) -> T | None:
        """A value made after this call, or None if none came in ``timeout_s``."""
        with self._cond:
            self._asked += 1
            asked = self._asked
            if not self._cond.wait_for(lambda: self._made >= asked, timeout_s):
                return None
            return self.latest

    def serve(self, make: Callable[[], T]) -> None:
        """Makes a value with ``make`` if one was asked for since the last one."""
        if self._asked == self._made:  # int reads: atomic under the GIL
            return
        with self._cond:
            asked = self._asked
        value: T | None = None
        try:
            value = make()  # unlocked: the askers wait, they do not block the loop
        except Exception:
            self._log.exception("making a value for another thread failed")
        with self._cond:
            self.latest = value
            self._made = asked
            self._cond.notify_all()
