"""``Claims``: the shared-memory segments a reader mapped, given back once dropped.

A reader maps each segment a reply names (``shm.claim``) and leaves the file
in place; when the last array of a segment drops, its name goes back to the
worker that wrote it in the reader's next request to it
(``GetElements.shm_done``), and the worker unlinks it: freeing a segment's
pages is then the worker's work, not the trainer's. Names not given back when
the reader closes, or dropped after it closed, are unlinked by the reader.

>>> claims = Claims()
>>> claims.take("tcp://w:1")
[]
>>> claims.close()
"""

from __future__ import annotations

import mmap
import threading
import weakref

from zmqdata._runtime import shm


class Claims:
    """One reader's segments: claimed on its fetcher thread, dropped on any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dropped: dict[str, list[str]] = {}
        self._closed = False
        self.endpoint = ""
        """The worker whose replies are being decoded (set by the fetcher)."""

    def claim(self, name: str, extent: int) -> mmap.mmap:
        """Maps segment ``name`` of the current ``endpoint`` (see ``shm.claim``)."""
        mapping = shm.claim(name, extent)
        weakref.finalize(mapping, self._drop, self.endpoint, name)
        return mapping

    def _drop(self, endpoint: str, name: str) -> None:
        with self._lock:
            if not self._closed:
                self._dropped.setdefault(endpoint, []).append(name)
                return
        shm.unlink(name)

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
        for name in names:
            shm.unlink(name)
