"""Which protocol version to speak to each peer (pure: no sockets, no clock).

A server answers every request at the version it came in (``Spoken``
remembers each peer's, for what the server sends it unasked). A requester
speaks ``PROTOCOL_VERSION`` to a server until the server refuses it: a server
one release older answers with an ``Error`` encoded at its own version whose
text is ``messages.refusal``. ``PeerVersion`` then speaks that version to it,
hands back what it sent since the server last confirmed a version, to send
once more, and tries its own version again every ``PROBE_AGAIN_S`` (the
server may have been upgraded meanwhile).

>>> old, new = OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION
>>> peer = PeerVersion()
>>> m.decode_versioned(peer.encode(m.GetStatus(request_id=1), now=0.0))[1] == new
True
>>> refused = m.Error(code="FAILED_PRECONDITION", message=m.refusal(new, own=old))
>>> peer.received(refused, old, now=0.1)
[GetStatus(request_id=1)]
>>> m.decode_versioned(peer.encode(m.GetStatus(request_id=1), now=0.1))[1] == old
True
>>> peer.received(m.GetStatusReply(request_id=1, status={}), old, now=0.2) is None
True
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from zmqdata._version import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION
from zmqdata._wire import messages as m


def _probe_again_s() -> float:
    """``ZMQDATA_PROTOCOL_PROBE_S`` (seconds, default 10), checked."""
    text = os.environ.get("ZMQDATA_PROTOCOL_PROBE_S", "10")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(
            f"ZMQDATA_PROTOCOL_PROBE_S must be a positive number of seconds, got {text!r}"
        )
    return value


PROBE_AGAIN_S = _probe_again_s()
"""How long a requester speaks a server's older version before trying its own
(one message refused and sent again per peer that often, while it is older);
``ZMQDATA_PROTOCOL_PROBE_S`` sets it (default 10 s)."""
UNCONFIRMED_MAX = 256
"""The most messages kept to send again, per peer (the newest)."""
PEERS_MAX = 65_536
"""The most peers ``Spoken`` remembers (the most recently heard)."""

K = TypeVar("K", bound=Hashable)


def refused_by(reply: m.Message, version: int) -> int | None:
    """The version of an older peer that refused this process's, else None.

    ``reply`` arrived encoded at ``version``.

    >>> text = m.refusal(PROTOCOL_VERSION, own=OLDEST_PROTOCOL_VERSION)
    >>> error = m.Error(code="FAILED_PRECONDITION", message=text)
    >>> refused_by(error, OLDEST_PROTOCOL_VERSION) == OLDEST_PROTOCOL_VERSION
    True
    >>> refused_by(m.Error(code="NOT_FOUND", message="no job 3"), 5) is None
    True
    """
    if (
        isinstance(reply, m.Error)
        and reply.code == "FAILED_PRECONDITION"
        and OLDEST_PROTOCOL_VERSION <= version < PROTOCOL_VERSION
        and reply.message == m.refusal(PROTOCOL_VERSION, own=version)
    ):
        return version
    return None


class PeerVersion:
    """The version a requester speaks to one server: its own until refused.

    ``encode`` encodes each message at the version to speak and keeps it
    until the server answers a message of that version; ``received`` takes
    each reply and says whether it was a refusal, and what to send again.
    """

    def __init__(self) -> None:
        self.version = PROTOCOL_VERSION
        self._confirmed = False
        self._unconfirmed: deque[m.Message] = deque(maxlen=UNCONFIRMED_MAX)
        self._probe_at = float("inf")

    def encode(self, message: m.Message, now: float) -> bytes:
        """``message`` at the version to speak now (it is sent at ``now``)."""
        if now >= self._probe_at:
            self.version, self._confirmed = PROTOCOL_VERSION, False
            self._probe_at = float("inf")
        if not self._confirmed:
            self._unconfirmed.append(message)
        return m.encode(message, self.version)

    def received(
        self, reply: m.Message, version: int, now: float
    ) -> list[m.Message] | None:
        """None: ``reply`` (encoded at ``version``) is for the caller.

        Else it was the server refusing this process's version: the messages
        to send again, at ``self.version`` now (none if already sent again).
        """
        older = refused_by(reply, version)
        if older is None:
            if version == self.version:
                self._confirmed = True
                self._unconfirmed.clear()
            return None
        if older == self.version:  # another message refused before: sent again
            return []
        self.version, self._confirmed = older, False
        self._probe_at = now + PROBE_AGAIN_S
        again = list(self._unconfirmed)
        self._unconfirmed.clear()
        return again


class Spoken(Generic[K]):
    """The protocol version each peer spoke last (the ``PEERS_MAX`` latest heard).

    >>> spoken: Spoken[bytes] = Spoken()
    >>> spoken.heard(b"w-1", OLDEST_PROTOCOL_VERSION)
    >>> spoken.of(b"w-1") == OLDEST_PROTOCOL_VERSION, spoken.known(b"new")
    (True, None)
    >>> spoken.of(b"new") == PROTOCOL_VERSION
    True
    """

    def __init__(self, limit: int = PEERS_MAX) -> None:
        self._versions: OrderedDict[K, int] = OrderedDict()
        self._limit = limit

    def heard(self, peer: K, version: int) -> None:
        """``peer`` sent a message of ``version``.

        Under half the limit, a version heard again changes nothing (the
        order matters only for what goes past the limit): the common case
        costs a lookup.
        """
        versions = self._versions
        if len(versions) < self._limit // 2 and versions.get(peer) == version:
            return
        versions[peer] = version
        versions.move_to_end(peer)
        if len(versions) > self._limit:
            versions.popitem(last=False)

    def known(self, peer: K) -> int | None:
        """The version ``peer`` spoke last, None if not heard (lately)."""
        return self._versions.get(peer)

    def of(self, peer: K) -> int:
        """The version to speak to ``peer``: its last, else this process's."""
        return self._versions.get(peer, PROTOCOL_VERSION)

    def forget(self, peer: K) -> None:
        """``peer`` left."""
        self._versions.pop(peer, None)

    def keep_only(self, peers: set[K]) -> None:
        """Forgets every peer not in ``peers``."""
        for peer in [p for p in self._versions if p not in peers]:
            del self._versions[peer]

    def counts(self, peers: list[K]) -> dict[str, int]:
        """How many of ``peers`` spoke each version (``"v5"``: 3), known ones only."""
        counts: dict[str, int] = {}
        for peer in peers:
            version = self._versions.get(peer)
            if version is not None:
                counts[f"v{version}"] = counts.get(f"v{version}", 0) + 1
        return dict(sorted(counts.items()))
