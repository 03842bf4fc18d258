"""``Claims``: the shared-memory segments a reader mapped, given back once dropped.

A reader maps each segment a reply names (``shm.claim``) and leaves the file
in place; when the last array of a segment drops, its name goes back to the
worker that wrote it in the reader's next request to it
(``GetElements.shm_done``). The worker writes it again for a later element
(or unlinks it), and the reader keeps its mapping for a while (``IDLE_S``,
``IDLE_BYTES``): a segment that comes back costs neither side a page
allocation, a mapping or a page fault. Names not given back when the reader
closes, or dropped after it closed, are unlinked by the reader.

>>> claims = Claims()
>>> claims.take("tcp://w:1")
[]
>>> claims.close()
"""

from __future__ import annotations

import mmap
import threading
import weakref
from collections import OrderedDict
from typing import Any, Final

import numpy as np

from zmqdata._runtime import clock, shm

IDLE_S: Final = 5.0
"""A dropped segment's mapping is kept this long for its reuse, ..."""
IDLE_BYTES: Final = 512 << 20
"""... within this many bytes of such mappings."""


class Claims:
    """One reader's segments: claimed on its fetcher thread, dropped on any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dropped: dict[str, list[str]] = {}
        self._idle: OrderedDict[str, tuple[float, mmap.mmap]] = OrderedDict()
        self._idle_bytes = 0
        self._closed = False
        self.endpoint = ""
        """The worker whose replies are being decoded (set by the fetcher)."""

    def claim(self, name: str, extent: int) -> np.ndarray[Any, Any]:
        """Segment ``name`` of the current ``endpoint`` (see ``shm.claim``).

        Returns a byte array over its mapping: when it (and every array made
        from it) drops, the segment is given back.
        """
        with self._lock:
            _, mapping = self._idle.pop(name, (0.0, None))
            if mapping is not None:
                self._idle_bytes -= len(mapping)
        if mapping is None or len(mapping) < extent:
            mapping = shm.claim(name, extent)
        use = np.frombuffer(mapping, np.uint8, count=extent)
        weakref.finalize(use, self._drop, self.endpoint, name, mapping)
        return use

    def _drop(self, endpoint: str, name: str, mapping: mmap.mmap) -> None:
        with self._lock:
            if not self._closed:
                self._dropped.setdefault(endpoint, []).append(name)
                self._keep(name, mapping)
                return
        shm.unlink(name)

    def _keep(self, name: str, mapping: mmap.mmap) -> None:
        """Keeps a dropped mapping, forgetting the oldest over the limits."""
        now = clock.now()
        self._idle[name] = (now, mapping)
        self._idle_bytes += len(mapping)
        self._forget(now)

    def trim(self, now: float) -> None:
        """Forgets the mappings kept longer than ``IDLE_S`` (the fetcher's tick)."""
        with self._lock:
            self._forget(now)

    def _forget(self, now: float) -> None:
        while self._idle and (
            self._idle_bytes > IDLE_BYTES
            or next(iter(self._idle.values()))[0] < now - IDLE_S
        ):
            _, (_, old) = self._idle.popitem(last=False)
            self._idle_bytes -= len(old)

    def take(self, endpoint: str) -> list[str]:
        """The dropped segments of ``endpoint``'s worker, to give back now."""
        with self._lock:
            return self._dropped.pop(endpoint, [])

    def close(self) -> None:
        """Unlinks what was not given back; later drops are unlinked at once."""
        with self._lock:
            self._closed = True
            names = [name for names in self._dropped.values() for name in names]
            self._dropped.clear()
            self._idle.clear()
            self._idle_bytes = 0
        for name in names:
            shm.unlink(name)
