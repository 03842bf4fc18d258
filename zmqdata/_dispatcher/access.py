"""Who may ask the dispatcher what, under CurveZMQ (docs/security.md).

A CURVE peer is known by its public key (Z85, the User-Id the ZAP handler
sets). Worker requests need a worker key (``curve_worker_keys_dir``), the
others a client key (``curve_authorized_keys_dir``); ``get_status`` either.
Without ``curve_worker_keys_dir`` every authorized key has both roles, as
before roles existed. An iteration client belongs to the key that acquired it:
only that key may heartbeat or release it, and the ``IterationState`` replies
to it carry a read ticket per task (``auth.read_ticket``) for that key only,
which the tasks' workers check on every read.

The owner is journaled with the client (``ClientAcquired.owner``): after a
fault-tolerant restart ``restore`` gives every client its owner back. Only a
client replayed from a journal written before owners were has none: the first
key to heartbeat it owns it, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable

from zmqdata._dispatcher.model import Client
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._runtime import auth
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import TaskInfo
from zmqdata.errors import PermissionDeniedError

WORKER_REQUESTS = (m.RegisterWorker, m.WorkerHeartbeat, m.GetSplit, m.GetSaveSplit)
CLIENT_OWNED = (m.ClientHeartbeat, m.ReleaseIterationClient, m.TraceSpans)
"""A worker's ``TraceSpans`` (``worker_id`` set) needs a worker key instead."""


def _check_owner(user: str, client_id: int, owner: str) -> None:
    if owner != user:
        raise PermissionDeniedError(
            f"iteration client {client_id} belongs to another key than {user}"
        )


class Access:
    """The dispatcher's key roles, client owners and read tickets."""

    def __init__(self, keys: auth.ServerKeys) -> None:
        self._secret = keys.secret
        self._clients = auth.public_keys(keys.authorized_dir)
        self._workers = (
            self._clients
            if keys.worker_dir is None
            else auth.public_keys(keys.worker_dir)
        )
        self._owners: dict[int, str] = {}

    def check(self, user: str | None, message: m.Message) -> None:
        """Raises ``PermissionDeniedError`` unless ``user`` may send ``message``.

        ``user`` None (an in-process ``inproc://`` peer) may send anything.
        """
        if user is None:
            return
        from_worker = isinstance(message, m.TraceSpans) and message.worker_id
        if isinstance(message, WORKER_REQUESTS) or from_worker:
            if user not in self._workers:
                raise PermissionDeniedError(
                    f"{message.TYPE} needs a worker key (one in the dispatcher's "
                    f"curve_worker_keys_dir); public key {user} is not one"
                )
        elif not isinstance(message, m.GetStatus) and user not in self._clients:
            raise PermissionDeniedError(
                f"{message.TYPE} needs a client key (one in the dispatcher's "
                f"curve_authorized_keys_dir); public key {user} is not one"
            )
        if isinstance(message, CLIENT_OWNED) and not from_worker:
            owner = self._owners.get(message.client_id, user)  # none yet: no check
            _check_owner(user, message.client_id, owner)

    def sign(
        self, user: str | None, peer: bytes, outgoing: list[Outgoing]
    ) -> list[Outgoing]:
        """``outgoing`` with read tickets for ``user`` in its replies to ``peer``.

        An ``IterationState`` for a client another key owns (a retried
        ``get_or_create_iteration`` from a different key) becomes an error.
        """
        if user is None:
            return outgoing
        signed = []
        for to, message in outgoing:
            if to == peer and isinstance(message, m.IterationState):
                message = self._signed(user, message)
            signed.append(Outgoing(to, message))
        return signed

    def _signed(self, user: str, state: m.IterationState) -> m.Message:
        try:  # the first IterationState of a client makes its key the owner
            owner = self._owners.setdefault(state.client_id, user)
            _check_owner(user, state.client_id, owner)
        except PermissionDeniedError as error:
            return m.Error(
                request_id=state.request_id, code=error.code, message=error.message
            )
        tasks = [
            dataclasses.replace(
                info, ticket=auth.read_ticket(self._secret, info.task_id, user)
            ).to_wire()
            for info in map(TaskInfo.from_wire, state.tasks)
        ]
        return dataclasses.replace(state, tasks=tasks)

    def restore(self, clients: Iterable[Client]) -> None:
        """The owners of ``clients`` (replayed from the journal) that have one."""
        for client in clients:
            if client.owner:
                self._owners[client.client_id] = client.owner

    def forget(self, clients: Container[int]) -> None:
        """Drops the owners of the clients not in ``clients`` (released, timed out)."""
        for client_id in [c for c in self._owners if c not in clients]:
            del self._owners[client_id]
