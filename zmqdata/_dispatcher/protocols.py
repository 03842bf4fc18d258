"""The protocol version each worker and consumer speaks to the dispatcher.

Liveness data, not state (never journaled): a restarted dispatcher knows a
peer's version again from its next message. The dispatcher answers each
request at the request's version and pushes to a worker at the version it
spoke last (``versions.Spoken``); ``status`` shows them, so an operator can
tell when every peer of an older release is gone.

>>> from zmqdata._dispatcher.records import ClusterRecords
>>> protocols = Protocols()
>>> protocols.heard(b"c", m.ClientHeartbeat(client_id=4), OLDEST_PROTOCOL_VERSION)
>>> shown = protocols.status(ClusterRecords())
>>> shown["accepts"] == [OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION], shown["clients"]
(True, {})
"""

from __future__ import annotations

from typing import Any

from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._version import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION
from zmqdata._wire import messages as m
from zmqdata._wire.versions import Spoken


class Protocols:
    """Per peer (routing id) and per consumer, the protocol version last heard."""

    def __init__(self) -> None:
        self.peers: Spoken[bytes] = Spoken()
        self._clients: Spoken[int] = Spoken()

    def heard(self, peer: bytes, message: m.Message, version: int) -> None:
        """``peer`` sent ``message``, encoded at ``version``."""
        self.peers.heard(peer, version)
        if isinstance(message, m.ClientHeartbeat):
            self._clients.heard(message.client_id, version)
        elif isinstance(message, m.ReleaseIterationClient):
            self._clients.forget(message.client_id)

    def of_workers(self, records: ClusterRecords) -> dict[int, int]:
        """Worker id -> the version it speaks (those heard since this start)."""
        known = {
            w.worker_id: self.peers.known(w.peer) for w in records.workers.values()
        }
        return {worker_id: v for worker_id, v in known.items() if v is not None}

    def status(self, records: ClusterRecords) -> dict[str, Any]:
        """This dispatcher's version, those it accepts, and its peers' by version."""
        self._clients.keep_only(set(records.clients))
        return {
            "version": PROTOCOL_VERSION,
            "accepts": [OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION],
            "workers": self.peers.counts([w.peer for w in records.workers.values()]),
            "clients": self._clients.counts(list(records.clients)),
        }
