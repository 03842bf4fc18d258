"""Background threads for ops that run ahead of their consumer."""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Any

from zmqdata._dataset.constants import AUTOTUNE
from zmqdata._dataset.iterator import DatasetIterator, UnaryIterator

logger = logging.getLogger("zmqdata.worker")

_POLL_S = 0.05
_JOIN_TIMEOUT_S = 30.0
_END = object()
PENDING = object()
"""``BackgroundIterator.next_nowait``: no element ready yet."""


def resolve_parallelism(value: int) -> int:
    """``AUTOTUNE`` becomes the CPU count; other values pass through."""
    return (os.cpu_count() or 1) if value == AUTOTUNE else value


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _produce(
    source: DatasetIterator,
    buffer: queue.Queue[Any],
    stop: threading.Event,
    ready: threading.Event | None,
) -> None:
    """Runs on the producer thread: moves items from ``source`` into ``buffer``."""

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            if ready is not None:
                ready.set()
            return True
        return False

    try:
        for item in source:
            if not put(item):
                return
        put(_END)
    except BaseException as error:  # re-raised in the consumer
        put(_Failure(error))


class _WithLineage(UnaryIterator):
    """Yields ``(element, lineage)`` pairs of its input (for a producer thread)."""

    def __next__(self) -> Any:
        element = next(self._input)
        return element, self._input.lineage


class BackgroundIterator(DatasetIterator):
    """Reads ``source`` on its own thread, up to ``buffer_size`` items ahead.

    Errors raised by ``source`` are re-raised by ``__next__`` in order. A
    consumer reading several of them sets one ``ready`` event on all: it is set
    whenever an item (element, end or error) is added, for ``next_nowait``.
    With ``lineage``, the producer reads each element's lineage right after it
    and queues it with the element.
    """

    def __init__(
        self,
        source: DatasetIterator,
        buffer_size: int,
        name: str,
        ready: threading.Event | None = None,
        lineage: bool = False,
    ) -> None:
        self._lineage = lineage
        if lineage:
            source = _WithLineage(source)
        self._source = source
        self._buffer: queue.Queue[Any] = queue.Queue(maxsize=buffer_size)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=_produce,
            args=(source, self._buffer, self._stop, ready),
            name=f"zmqdata-{name}",
            daemon=True,
        )
        self._thread.start()

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        return self._unwrap(self._buffer.get())

    def next_nowait(self) -> Any:
        """The next element if one is ready, else ``PENDING`` (ends like ``next``)."""
        if self._done:
            raise StopIteration
        try:
            item = self._buffer.get_nowait()
        except queue.Empty:
            return PENDING
        return self._unwrap(item)

    def _unwrap(self, item: Any) -> Any:
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            raise item.error
        if self._lineage:
            item, self.lineage = item
        return item

    def close(self) -> None:
        """Stops the producer and closes the source.

        A producer blocked in its source's ``next`` (a service reader waiting
        for an element) is woken by closing the source under it.
        """
        self._done = True
        self._stop.set()
        self._thread.join(2 * _POLL_S)
        self._source.close()
        self._thread.join(_JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            logger.warning(
                "%s did not stop in %s s", self._thread.name, _JOIN_TIMEOUT_S
            )

    def __del__(self) -> None:
        self._stop.set()
