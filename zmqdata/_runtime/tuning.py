"""A daemon's process tuned to serve thousands of peers from one core.

``serve_a_fleet()`` is called by ``zmqdata dispatcher`` and ``zmqdata up``
before their dispatcher starts (the process is theirs; a dispatcher started
from a script or a test leaves its process as it is). Measured with
``bench/control.py`` (docs/performance.md, The control plane at scale):

* ZeroMQ's I/O threads run SCHED_BATCH (``batch_io_threads``). Each reply
  wakes the I/O thread that writes it; a normal thread preempts the loop at
  every reply (10,000 context switches a second at 8,000 requests a second:
  a quarter of the CPU); a batch thread runs when the loop waits and writes
  a wake-up's replies together.
* Python's cyclic garbage collector is run by the dispatcher's loop, small
  and often (``YoungCollector``), not by allocation counts: at 10,000 peers
  each heartbeat replaces objects that live until the next one (a worker's
  stats and rates), and Python counts allocations less deallocations, so that
  churn let the youngest generation grow to every peer's objects before it
  was collected: 130,000 objects, a 100 ms pause every 4 s, the whole p99.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import zmq

from zmqdata._runtime.loop import context

YOUNG_EVERY_S = 0.1
"""How often ``YoungCollector`` collects the youngest generation."""
FULL_EVERY_S = 3600.0
"""How often it collects everything, frozen objects included."""

_fleet = False
"""Whether this process serves a fleet (``serve_a_fleet`` was called)."""


def serve_a_fleet() -> None:
    """Tunes this process for a dispatcher serving many peers (see the module).

    Its dispatcher's loop then collects garbage itself (``collector``).
    """
    global _fleet
    batch_io_threads()
    gc.disable()
    _fleet = True


class YoungCollector:
    """Python's cyclic collector run at a loop's ticks: often, small, bounded.

    Every ``YOUNG_EVERY_S`` the youngest generation is collected (what a
    tenth of a second made: about 3,000 objects, 3 ms, at 10,000 peers) and
    what survives is frozen (``gc.freeze``): never scanned again nor promoted
    to an older generation, still freed by its reference count. Every
    ``FULL_EVERY_S`` everything is unfrozen and collected once, for cycles
    among frozen objects (a dispatcher's steady state makes none). ``close``
    gives the process its automatic collector back.

    >>> collector = YoungCollector(now=0.0)
    >>> collector.tick(0.05), collector.tick(0.1), collector.tick(3600.0)
    (None, 0, 2)
    >>> collector.close()
    """

    def __init__(self, now: float) -> None:
        self._young_due = now + YOUNG_EVERY_S
        self._full_due = now + FULL_EVERY_S

    def tick(self, now: float) -> int | None:
        """Collects if due: the generation collected (None: none was due)."""
        if now >= self._full_due:
            self._full_due = now + FULL_EVERY_S
            gc.unfreeze()
            generation = 2
        elif now >= self._young_due:
            generation = 0
        else:
            return None
        gc.collect(generation)
        gc.freeze()
        self._young_due = now + YOUNG_EVERY_S
        return generation

    def close(self) -> None:
        gc.unfreeze()
        gc.enable()


def collector(now: float) -> YoungCollector | None:
    """A ``YoungCollector`` for a fleet's dispatcher loop; None elsewhere."""
    return YoungCollector(now) if _fleet else None


def batch_io_threads(ctx: zmq.Context[Any] | None = None) -> None:
    """Runs ZeroMQ's I/O threads of ``ctx`` (default: the process's) SCHED_BATCH.

    Threads started from now on; no effect on those already running, nor off
    Linux.
    """
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is not None and sys.platform.startswith("linux"):
        (ctx or context()).set(zmq.THREAD_SCHED_POLICY, policy)
