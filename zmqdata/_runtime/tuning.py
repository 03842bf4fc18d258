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
* Python's cyclic garbage collector runs its youngest generation every
  ``GC_YOUNG`` allocations instead of 700: the objects of a request die young
  (reference counts free them), while the tables of 10,000 peers made each
  collection long; 4-8% of the dispatcher's time went to it at 10,000 peers,
  under 1.5% so.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import zmq

from zmqdata._runtime.loop import context

GC_YOUNG = 50_000
"""Allocations (less deallocations) between two collections of the youngest
generation (Python's default: 700); the older generations keep their ratios."""


def serve_a_fleet() -> None:
    """Tunes this process for a dispatcher serving many peers (see the module)."""
    batch_io_threads()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, older, oldest)


def batch_io_threads(ctx: zmq.Context[Any] | None = None) -> None:
    """Runs ZeroMQ's I/O threads of ``ctx`` (default: the process's) SCHED_BATCH.

    Threads started from now on; no effect on those already running, nor off
    Linux.
    """
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is not None and sys.platform.startswith("linux"):
        (ctx or context()).set(zmq.THREAD_SCHED_POLICY, policy)
