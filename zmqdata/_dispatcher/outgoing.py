"""``Outgoing``: what the dispatcher's state returns: a message for a peer.

Every handler and tick of ``state.DispatcherState`` returns a list of them,
which the server sends in order. A ``(peer, message)`` pair that is an
``Instruction``, as the other roles' cores return.

>>> from zmqdata._wire import messages as m
>>> peer, message = Outgoing(b"w", m.Ok(request_id=1))
>>> peer, Outgoing(b"w", m.Ok(request_id=1)) == (b"w", m.Ok(request_id=1))
(b'w', True)
"""

from __future__ import annotations

from typing import Self

from zmqdata._runtime.instruction import Instruction
from zmqdata._wire import messages as m


class Outgoing(tuple[bytes, m.Message], Instruction):
    """Send ``message`` to ``peer`` (the ROUTER identity of a worker or client)."""

    __slots__ = ()

    def __new__(cls, peer: bytes, message: m.Message) -> Self:
        return super().__new__(cls, (peer, message))
