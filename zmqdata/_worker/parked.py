"""``ParkedRequests``: the long-polled ``GetElements`` a worker holds, per task and peer.

A request that finds its task's buffer empty is parked until the producer adds
something. Each peer (a consumer's socket) may park at most ``MAX_PER_PEER``
requests per task, so one peer cannot pile up requests by the thousand; and
parked requests are served round-robin across peers, one request per peer per
turn, so a peer that asks more often does not get more of a task's elements than
the others.

>>> parked = ParkedRequests(max_per_peer=1)
>>> parked.park(7, "a", "a1"), parked.park(7, "a", "a2"), parked.park(7, "b", "b1")
(True, False, True)
>>> served = []
>>> parked.serve(7, lambda request: served.append(request) or True, any_order=False)
>>> served, parked.waiting(7)
(['a1', 'b1'], False)
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

R = TypeVar("R")

MAX_PER_PEER: Final = 8
"""Requests one peer may park per task (a reader keeps two in flight per task)."""


class ParkedRequests(Generic[R]):
    """Parked requests by task, then by peer in round-robin order."""

    def __init__(self, max_per_peer: int = MAX_PER_PEER) -> None:
        self.max_per_peer = max_per_peer
        self._tasks: dict[int, OrderedDict[Hashable, deque[R]]] = {}

    def waiting(self, task_id: int) -> bool:
        """Whether requests for ``task_id`` are parked."""
        return task_id in self._tasks

    def task_ids(self) -> list[int]:
        """The tasks with parked requests."""
        return list(self._tasks)

    def park(self, task_id: int, peer: Hashable, request: R) -> bool:
        """Parks ``request``; False (and nothing parked) if ``peer`` has its fill."""
        peers = self._tasks.setdefault(task_id, OrderedDict())
        queue = peers.setdefault(peer, deque())
        if len(queue) >= self.max_per_peer:
            return False
        queue.append(request)
        return True

    def serve(
        self, task_id: int, serve: Callable[[R], bool], *, any_order: bool
    ) -> None:
        """Offers parked requests to ``serve`` (True: answered, so unparked).

        First come first served (``any_order=False``): peers take turns, one
        request each, until ``serve`` declines one (nothing left to send).
        ``any_order=True`` (readers at their own positions, as the cross-trainer
        cache has them): every peer's requests are offered, in order, until
        ``serve`` declines one of that peer's.
        """
        peers = self._tasks.get(task_id)
        if peers is None:
            return
        if any_order:
            _serve_each(peers, serve)
        else:
            _serve_in_turns(peers, serve)
        if not peers:
            del self._tasks[task_id]


def _serve_each(
    peers: OrderedDict[Hashable, deque[R]], serve: Callable[[R], bool]
) -> None:
    """Offers each peer's requests in order, until ``serve`` declines one of its own."""
    for peer, queue in list(peers.items()):
        while queue and serve(queue[0]):
            queue.popleft()
        if not queue:
            del peers[peer]


def _serve_in_turns(
    peers: OrderedDict[Hashable, deque[R]], serve: Callable[[R], bool]
) -> None:
    """Peers take turns, one request each, until ``serve`` declines one."""
    while peers:
        peer, queue = next(iter(peers.items()))
        if not serve(queue[0]):
            break
        queue.popleft()
        if queue:
            peers.move_to_end(peer)
        else:
            del peers[peer]
