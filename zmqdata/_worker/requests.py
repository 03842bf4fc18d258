"""``DispatcherRequests``: requests a worker thread sends the dispatcher on its own socket.

A task's producer thread asks for splits (``splits.RemoteSplitProvider``), a
save's thread for the splits it writes (``saver.SaveSplits``); each owns a
DEALER socket to the dispatcher (CurveZMQ when keys are set), speaks the
dispatcher's protocol version (an older one if it says so), and sends a request
again, with the same ``request_id``, until it is answered: the dispatcher
answers a request it saw already as it did the first time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import zmq

from zmqdata._runtime import auth
from zmqdata._runtime.clock import Backoff, Deadline, attempts
from zmqdata._runtime.loop import context
from zmqdata._wire import messages as m
from zmqdata._wire.versions import PeerVersion
from zmqdata._worker.buffer import Cancelled
from zmqdata.errors import UnavailableError

POLL_MS = 100
"""How often a thread waiting for an answer checks its stop event."""


class DispatcherRequests:
    """One thread's requests to the dispatcher, each retried until answered."""

    asked_for = "answer"
    """What the requests ask for, as the error of one unanswered in time says."""

    def __init__(
        self,
        dispatcher: str,
        stop: threading.Event,
        timeout_s: float,
        keys: auth.ClientKeys | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._stop, self._timeout_s = stop, timeout_s
        self._keys = keys
        self._sock: zmq.Socket[Any] | None = None
        self._version = PeerVersion()
        """The protocol version the dispatcher speaks (an older one if it says so)."""

    def _socket(self) -> zmq.Socket[Any]:
        if self._sock is None:
            self._sock = context().socket(zmq.DEALER)
            self._sock.setsockopt(zmq.LINGER, 0)
            auth.secure_client(self._sock, self._keys)
            self._sock.connect(self._dispatcher)
        return self._sock

    def _answer(self, request: m.Message, data: bytes) -> m.Message | None:
        """The answer to ``request`` in ``data``.

        None for a stale answer, or a refusal (``request`` is then sent again
        at the dispatcher's version).
        """
        reply, version = m.decode_versioned(data)
        again = self._version.received(reply, version, time.monotonic())
        if again:
            self._send(request)
        elif again is None and reply.request_id == request.request_id:
            return reply
        return None

    def _call(self, request: m.Message, sent: bool = False) -> m.Message:
        """The answer to ``request`` (``sent``: it went out already, ahead).

        Raises:
            Cancelled: The stop event was set while waiting.
            UnavailableError: No answer within the timeout.
        """
        # Every worker asks again after a dispatcher restart: jittered delays.
        backoff = Backoff(0.1, 2.0, minimum_s=0.5)
        for wait in attempts(Deadline(self._timeout_s), backoff):
            sock = self._socket()
            if not sent:
                self._send(request)
            sent = False
            while not wait.expired():
                if self._stop.is_set():
                    raise Cancelled
                if sock.poll(POLL_MS):
                    reply = self._answer(request, sock.recv())
                    if reply is not None:
                        return reply
            self._drop_socket()  # drop a request the dispatcher may never answer
        raise UnavailableError(
            f"no {self.asked_for} from dispatcher {self._dispatcher} in time"
        )

    def _send(self, request: m.Message) -> None:
        self._socket().send(self._version.encode(request, time.monotonic()))

    def _drop_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
