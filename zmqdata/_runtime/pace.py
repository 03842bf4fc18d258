"""How often a peer heartbeats: often while anything changes, rarely while not.

Readers and workers heartbeat at their base interval while their heartbeats
carry news or their answers do. After each *quiet* heartbeat (nothing new
either way) the interval doubles, up to a ceiling; anything else brings it
back to the base. So a dispatcher's load grows with what changes, not with
how many peers sit idle (docs/performance.md, The control plane at scale).

* A reader's heartbeat is quiet when it reported no acknowledgements, marks,
  finished tasks, round or multi-rank position and its trainer did not wait,
  and the dispatcher answered ``IterationState.unchanged`` (a trainer that
  shares traces is never quiet: it hears of windows). Its ceiling is
  80% of the dispatcher's ``fence_timeout_ms`` (4 s by default), so the
  dispatcher never stops waiting for its fence; past half of it, it holds
  what arrives for one round trip (docs/reliability.md, Silent consumers;
  ``_client/core.py`` ``quiet_ceiling_s``); elements received bring the next
  heartbeat back to one base interval after the last, so acknowledgements
  wait no longer than before.
* A worker's heartbeat is quiet when its tasks, pipelines and draining were
  as in the last one and the answer brought nothing to do. Its ceiling is the
  dispatcher's (``RegisterWorkerReply.heartbeat_max_ms``, a quarter of
  ``worker_timeout_ms``): a quiet worker still heartbeats four times per
  timeout, or asks for splits as often (a split request shows it alive: its
  heartbeat then waits, ``_worker/control_core.py`` ``STRETCH``). A dispatcher
  that names none keeps the worker at its base. A trace window wakes every
  worker (a heartbeat reply that answers no request): it heartbeats at once
  and hears of the window with its clock.

>>> pace = HeartbeatPace(0.1, quiet_max_s=0.8)
>>> [pace.after(changed=False) for _ in range(5)]
[0.2, 0.4, 0.8, 0.8, 0.8]
>>> pace.after(changed=True)
0.1
"""

from __future__ import annotations


class HeartbeatPace:
    """A peer's interval between heartbeats: ``base_s``, or longer while quiet."""

    __slots__ = ("base_s", "interval", "max_s")

    def __init__(self, base_s: float, quiet_max_s: float | None = None) -> None:
        self.base_s = base_s
        self.max_s = base_s
        self.interval = base_s
        self.set_ceiling(quiet_max_s)

    def set_ceiling(self, quiet_max_s: float | None) -> None:
        """The longest quiet interval (None: never longer than the base)."""
        self.max_s = max(self.base_s, quiet_max_s or 0.0)
        self.interval = min(self.interval, self.max_s)

    def after(self, changed: bool) -> float:
        """The interval after a heartbeat that ``changed`` something (or not)."""
        self.interval = self.base_s if changed else min(self.max_s, 2 * self.interval)
        return self.interval

    def reset(self) -> None:
        """Something to report: back to the base interval."""
        self.interval = self.base_s
