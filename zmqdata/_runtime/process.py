"""This process's identity and its running workers.

Consumers tell in-process workers apart by the token, and a
``target_workers="LOCAL"`` read checks that a worker runs here at all.

>>> PROCESS_TOKEN.startswith(f"{os.getpid()}-")
True
>>> before = LOCAL_WORKERS.count
>>> LOCAL_WORKERS.started(); LOCAL_WORKERS.count - before
1
>>> LOCAL_WORKERS.stopped(); LOCAL_WORKERS.count - before
0
"""

from __future__ import annotations

import os
import threading
import uuid

PROCESS_TOKEN = f"{os.getpid()}-{uuid.uuid4().hex}"
"""Sent by workers when they register and by consumers when they read."""


class _WorkerCount:
    """How many ``WorkerServer``s run in this process (started, not stopped)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def started(self) -> None:
        with self._lock:
            self.count += 1

    def stopped(self) -> None:
        with self._lock:
            self.count -= 1


LOCAL_WORKERS = _WorkerCount()
