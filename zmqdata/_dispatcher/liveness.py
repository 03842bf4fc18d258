"""When each peer was last heard from, and each iteration last left: beside the records.

Not state: never journaled, never in a snapshot, and a rollback of the records
(a failed group commit) leaves it as it is, so nothing needs re-stamping. A
peer the records hold but this table has not heard from since it started (a
restart, a replay) counts as heard then: every peer is just seen after a
restart, as in tf.data. Entries of peers the records no longer hold are dropped
by ``keep_only``, at the liveness scans. Job GC's clock is here too: when
each iteration's last consumer left (``released``), which a replay or a
rollback does not move either.

>>> liveness = Liveness(now=10.0)
>>> liveness.heard_worker(3, now=12.5)
>>> liveness.heard_worker(5, now=12.0)
>>> liveness.worker_seen(3), liveness.worker_seen(4)  # 4: not heard since the start
(12.5, 10.0)
>>> liveness.keep_only(workers={5}, clients=set())
>>> liveness.worker_seen(3)  # gone from the records, gone here
10.0
"""

from __future__ import annotations

from collections.abc import Collection


class Liveness:
    """The time each worker and client was last heard from (a dispatcher's clock)."""

    __slots__ = ("_clients", "_released", "_workers", "since")

    def __init__(self, now: float) -> None:
        self.since = now
        """When this table started: what a peer not heard from since counts as."""
        self._workers: dict[int, float] = {}
        self._clients: dict[int, float] = {}
        self._released: dict[int, float] = {}

    def heard_worker(self, worker_id: int, now: float) -> None:
        self._workers[worker_id] = now

    def heard_client(self, client_id: int, now: float) -> None:
        self._clients[client_id] = now

    def released(self, iteration_id: int, now: float) -> None:
        """A consumer of iteration ``iteration_id`` left at ``now``."""
        self._released[iteration_id] = now

    def released_at(self, iteration_id: int) -> float:
        """When a consumer of ``iteration_id`` last left (job GC counts from it)."""
        return self._released.get(iteration_id, self.since)

    def worker_seen(self, worker_id: int) -> float:
        """When worker ``worker_id`` was last heard from."""
        return self._workers.get(worker_id, self.since)

    def client_seen(self, client_id: int) -> float:
        """When client ``client_id`` was last heard from."""
        return self._clients.get(client_id, self.since)

    def keep_only(
        self,
        workers: Collection[int],
        clients: Collection[int],
        iterations: Collection[int] = (),
    ) -> None:
        """Forgets the peers and iterations the records no longer hold.

        Only when a table holds more than the records: an entry left over
        otherwise names an id never handed out again.
        """
        for table, kept in (
            (self._workers, workers),
            (self._clients, clients),
            (self._released, iterations),
        ):
            if len(table) > len(kept):
                for peer in [p for p in table if p not in kept]:
                    del table[peer]
