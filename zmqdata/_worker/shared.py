"""The worker's same-host fast path: which tasks write shared memory, and their segments.

A consumer on this host names its presence file in its requests
(``GetElements.shm_probe``); the data loop checks it once
(``zmqdata._runtime.shm.same_host``) and tells the task (``TaskShare.note``).
While every recent reader of a task is on this host, its producer writes each
large element's buffers to a segment (``TaskShare.encode``: a ``SharedItem``,
never compressed) instead of keeping them as frames; the reply then carries
only the segment's name and offsets. A ``SharedItem`` taken by a reader that is
not on this host after all travels over the socket, read from the segment.

Segments are removed by the worker: once one its reader gave back (it dropped
the arrays; ``GetElements.shm_done``) has not been written again for
``shm.POOL_IDLE_S``, when an item is dropped unsent (task
deleted, worker stopped: a finalizer), when one sent is not given back
``CLAIM_GRACE_S`` later (its reader died, or still holds it), and at
``SharedServing.close``; by a reader that closes; those of dead processes by
``shm.sweep``.

A new task starts sharing if the worker's last reader was on this host (or it
has had none yet): what its producer buffers before the first request arrives
is then in shared memory already.

>>> share = TaskShare(enabled=True, same_host=False)
>>> share.active
False
>>> share.note(same_host=True, now=0.0); share.active
True
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from zmqdata._runtime import clock, shm
from zmqdata._wire import frames
from zmqdata._wire import messages as m
from zmqdata._worker.buffer import Encoded, Raw

HOLD_S: Final = 2.0
"""A reader not on this host keeps its task off shared memory this long."""
CLAIM_GRACE_S: Final = 60.0
"""A segment sent and not claimed this long after is removed (its reader died)."""
MAX_PROBES: Final = 1024
"""Probe verdicts kept (then forgotten, and checked again)."""


class _Segment:
    """A segment this worker wrote: removed when dropped, unless handed off."""

    __slots__ = ("__weakref__", "_finalizer", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._finalizer = weakref.finalize(self, shm.unlink, name)

    def unlink(self) -> None:
        self._finalizer()

    def hand_off(self) -> None:
        """Its reader unlinks it now (or ``SharedServing.expire`` does)."""
        self._finalizer.detach()


@dataclass(frozen=True, slots=True)
class SharedItem(Encoded):
    """A large element in a shared segment; ``frames`` name the segment."""

    shared: frames.SharedFrames
    segment: _Segment


class TaskShare:
    """Whether one task's producer writes shared memory, from its readers.

    Written by the data loop (``note``), read by the producer (``encode``).
    """

    def __init__(self, enabled: bool, same_host: bool) -> None:
        self._enabled = enabled
        self._same_host_seen = same_host
        self._remote_until = 0.0

    def note(self, same_host: bool, now: float) -> None:
        """A reader asked; ``same_host``: it can read this worker's segments."""
        if same_host:
            self._same_host_seen = True
        else:
            self._remote_until = now + HOLD_S

    @property
    def active(self) -> bool:
        """Write shared memory: every recent reader is on this host."""
        return (
            self._enabled and self._same_host_seen and clock.now() >= self._remote_until
        )

    def encode(self, element: Any) -> Encoded | None:
        """``element`` (large) in a segment, or None if the task does not share now."""
        if not self.active:
            return None
        encoded = frames.encode_shared([element], shm.store)
        if isinstance(encoded, frames.SharedFrames):
            return SharedItem(encoded.described, encoded, _Segment(encoded.segment))
        return Encoded(encoded)


class SharedServing:
    """The data loop's side: probe verdicts, and the segments sent but unclaimed."""

    def __init__(self) -> None:
        self._probes: dict[str, bool] = {}
        self._sent: dict[str, tuple[str, int, int]] = {}
        """Segments sent, not given back yet: name -> (reader's probe, size, task)."""
        self._expiry: deque[tuple[float, str]] = deque()
        self.last_same_host = True
        """Whether the last reader was on this host (none yet: assume so)."""

    def same_host(self, request: m.GetElements) -> bool:
        """Whether the reader of ``request`` can read this worker's segments."""
        probe = request.shm_probe
        if not probe:
            return False
        verdict = self._probes.get(probe)
        if verdict is None:
            if len(self._probes) >= MAX_PROBES:
                self._probes.clear()
            verdict = self._probes[probe] = shm.same_host(probe)
        return verdict

    def note(self, share: TaskShare | None, request: m.GetElements) -> None:
        """Tells the task who reads it; unlinks the segments its reader gave back.

        A reader gives back only segments sent to it (same probe).
        """
        now = clock.now()
        for name in request.shm_done:
            sent = self._sent.get(name) if type(name) is str else None
            if sent is not None and sent[0] == request.shm_probe:
                del self._sent[name]
                shm.recycle(name, sent[1], now)
        self.last_same_host = self.same_host(request)
        if share is not None:
            share.note(self.last_same_host, now)

    def frames_for(self, item: Raw | Encoded, request: m.GetElements) -> list[Any]:
        """The frames that send ``item`` (an ``Encoded``) to ``request``'s reader.

        Raises:
            InvalidArgumentError: A segment to send over the socket is gone.
        """
        assert isinstance(item, Encoded)
        if not isinstance(item, SharedItem):
            return item.frames
        if self.same_host(request):
            item.segment.hand_off()
            offset, nbytes = item.shared.spans[-1]
            self._sent[item.segment.name] = (
                request.shm_probe,
                offset + nbytes,
                request.task_id,
            )
            self._expiry.append((clock.now() + CLAIM_GRACE_S, item.segment.name))
            return item.frames
        mapping = memoryview(shm.read_back(item.segment.name))
        item.segment.unlink()
        spans = item.shared.spans
        return [item.shared.inband_header, *(mapping[o : o + n] for o, n in spans)]

    def expire(self, now: float, tasks: set[int] | None = None) -> None:
        """Removes the segments not given back ``CLAIM_GRACE_S`` after they were sent.

        Their reader died, or still maps them (then they are freed when it
        drops them). With ``tasks`` (those still on the worker), also those
        of deleted tasks, whose readers are done. Trims the reuse pool.
        """
        while self._expiry and self._expiry[0][0] <= now:
            name = self._expiry.popleft()[1]
            if self._sent.pop(name, None) is not None:
                shm.unlink(name)
        if tasks is not None:
            for name in [n for n, sent in self._sent.items() if sent[2] not in tasks]:
                del self._sent[name]
                shm.unlink(name)
        shm.trim_pool(now)

    def close(self) -> None:
        """Removes every segment sent and not claimed yet (the worker stops)."""
        self.expire(float("inf"))
