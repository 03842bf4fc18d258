"""One request, one reply, with retries and a deadline (a short-lived DEALER).

A dispatcher that is not up yet is waited for: ZeroMQ queues the request until
the connection exists, and the request is re-sent with backoff in case a
previous dispatcher took it down with it. Running out of time raises
``UnavailableError``, saying why when it can be told (the host does not resolve,
the connection is refused); a warning is logged after ``WARN_AFTER_S`` already.
An address that never answered this process is given up on sooner: when it
still refuses connections (or does not resolve) after the first-contact grace
(``ZMQDATA_DISPATCHER_FIRST_CONTACT_S``), it is taken for a wrong address. One
that answered before is a dispatcher restarting, retried till the deadline.
An error reply raises the matching ``zmqdata.errors`` class. A dispatcher of
the previous protocol version refuses this one's: the request is sent again
at its version (``versions.PeerVersion``).
With CURVE keys in the client settings the socket is a CurveZMQ client, and a
failed handshake (a key the server does not accept) raises
``PermissionDeniedError`` at once instead of waiting for the deadline.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from typing import Any, TypeVar

import zmq

from zmqdata._client import settings as client_settings
from zmqdata._runtime import auth, reach
from zmqdata._runtime.clock import Backoff, Deadline, attempts
from zmqdata._runtime.loop import context
from zmqdata._wire import messages as m
from zmqdata._wire.versions import PeerVersion
from zmqdata.errors import UnavailableError, ZmqDataError, from_code

logger = logging.getLogger("zmqdata.client")

R = TypeVar("R", bound=m.Message)
_request_ids = itertools.count(1)
WARN_AFTER_S = 3.0
_answered: set[str] = set()
"""The targets that answered a request of this process."""


def call(target: str, request: m.Message, reply_type: type[R], timeout_s: float) -> R:
    """Sends ``request`` to ``target`` and returns its ``reply_type`` reply."""
    request = dataclasses.replace(request, request_id=next(_request_ids))
    deadline, backoff = Deadline(timeout_s), Backoff(0.5, 5.0, jitter=0.0)
    current = client_settings.current()
    keys = current.keys()
    grace = min(current.first_contact_s, timeout_s)
    first_contact = None if target in _answered else Deadline(grace)
    sock: zmq.Socket[Any] = context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    auth.secure_client(sock, keys)
    # Also without keys: a plain client of a CURVE server fails its handshake.
    monitor = auth.handshake_monitor(sock)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(monitor, zmq.POLLIN)
    started = time.monotonic()
    warned = False
    peer = PeerVersion()
    try:
        sock.connect(target)
        for wait in attempts(deadline, backoff):
            _send(sock, peer.encode(request, time.monotonic()))
            wait = _sooner(wait, first_contact)
            reply = _wait_for_reply(sock, monitor, poller, wait, target, request, peer)
            if reply is not None:
                if not isinstance(reply, reply_type):
                    raise UnavailableError(
                        f"{target} answered {reply.TYPE!r} to {request.TYPE!r}"
                    )
                return reply
            silent_s = time.monotonic() - started
            if first_contact is not None and first_contact.expired():
                first_contact = None
                found = reach.probe(target)
                if found.absent:
                    raise UnavailableError(
                        f"no answer from {target} to {request.TYPE!r} within "
                        f"{silent_s:.1f} s: {found.reason}, and nothing ever "
                        "answered there: is the address right, and its dispatcher "
                        "started? (ZMQDATA_DISPATCHER_FIRST_CONTACT_S="
                        f"{current.first_contact_s:g} s waits for one starting)"
                    )
            if not warned and silent_s >= WARN_AFTER_S:
                warned = True
                logger.warning(
                    "no answer from %s for %.1f s: %s; retrying for up to %g s%s",
                    target,
                    silent_s,
                    reach.diagnose(target),
                    timeout_s,
                    ""
                    if first_contact is None
                    else f" ({grace:g} s if nothing is there: it never answered)",
                )
        raise UnavailableError(
            f"no answer from {target} to {request.TYPE!r} within "
            f"{timeout_s:g} s: {reach.diagnose(target)}{auth.closed_hint(monitor)}"
        )
    finally:
        auth.close_monitor(sock, monitor)
        sock.close(linger=0)


def _send(sock: zmq.Socket[Any], data: bytes) -> None:
    """Queues ``data`` if the socket can take it now; never waits.

    A DEALER with no connection to queue on (its handshake failed and it does
    not reconnect) would block a send for ever: the wait for the reply that
    follows says why instead (the handshake's failure, or the deadline).
    """
    try:
        sock.send(data, zmq.NOBLOCK)
    except zmq.Again:
        logger.debug("nothing to send on yet (no connection)")


def _wait_for_reply(
    sock: zmq.Socket[Any],
    monitor: zmq.Socket[Any],
    poller: zmq.Poller,
    wait: Deadline,
    target: str,
    request: m.Message,
    peer: PeerVersion,
) -> m.Message | None:
    """The answer to ``request`` within ``wait`` (None if none came).

    A refusal of this protocol version sends it again at the server's.

    Raises:
        PermissionDeniedError: The CURVE handshake was refused.
        ZmqDataError: The answer is an error.
    """
    while (remaining := wait.remaining() or 0.0) > 0:
        events = dict(poller.poll(int(remaining * 1000) + 1))
        if monitor in events:
            auth.check_handshake(monitor, target)
        if sock in events:
            reply, version = _decode(sock.recv())
            _answered.add(target)
            again = peer.received(reply, version, time.monotonic())
            if again:
                sock.send(peer.encode(request, time.monotonic()))
            if again is not None or reply.request_id != request.request_id:
                continue  # a late answer to an earlier attempt
            if isinstance(reply, m.Error):
                raise from_code(reply.code, reply.message)
            return reply
    return None


def _sooner(wait: Deadline, other: Deadline | None) -> Deadline:
    """The earlier of ``wait`` and ``other`` (None: ``wait``)."""
    if (
        other is None
        or other.at is None
        or (wait.at is not None and wait.at <= other.at)
    ):
        return wait
    return other


def _decode(payload: bytes) -> tuple[m.Message, int]:
    try:
        return m.decode_versioned(payload)
    except ZmqDataError:
        raise
    except Exception as error:
        raise UnavailableError(f"unreadable reply: {error!r}") from None
