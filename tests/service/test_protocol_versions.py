"""Servers answer a peer of the older protocol at its version, and say who speaks what.

(Against the previous release's real processes: ``tests/upgrade``.)
"""

from __future__ import annotations

from typing import Any

import msgpack
import zmq

import zmqdata as zd
from tests.helpers import poll_for
from zmqdata import service
from zmqdata._version import OLDEST_PROTOCOL_VERSION as OLD
from zmqdata._version import PROTOCOL_VERSION as NEW
from zmqdata._wire import messages as m

REPLY_TIMEOUT_MS = 5_000


def ask(sock: zmq.Socket[Any], data: bytes) -> tuple[m.Message, int]:
    sock.send(data)
    assert sock.poll(REPLY_TIMEOUT_MS), "no answer"
    return m.decode_versioned(sock.recv_multipart()[0])


def test_the_dispatcher_answers_each_version_at_its_own_and_refuses_older(
    cluster, sockets
):
    c = cluster(num_workers=1)
    sock = sockets(c.target)
    for version in (OLD, NEW):
        reply, spoken = ask(sock, m.encode(m.GetStatus(request_id=7), version))
        assert (type(reply), reply.request_id, spoken) == (m.GetStatusReply, 7, version)
    refused, _ = ask(sock, msgpack.packb({"v": OLD - 1, "t": "get_status"}))
    assert isinstance(refused, m.Error)
    assert (
        refused.message
        == f"peer speaks protocol v{OLD - 1}, this process speaks v{NEW}"
    )


def test_a_worker_answers_a_reader_of_the_older_version_at_its_version(
    cluster, sockets
):
    c = cluster(num_workers=1)
    sock = sockets(c.workers[0].address)
    request = m.GetElements(request_id=3, task_id=999, client_id=1, max_elements=1)
    sock.send(m.encode(request, OLD))
    assert sock.poll(REPLY_TIMEOUT_MS), "no answer"
    body = msgpack.unpackb(sock.recv_multipart()[0])
    # A task not held is ABSENT to this version's readers, NOT_FOUND to the older.
    assert (body["t"], body["code"], body["request_id"], body["v"]) == (
        "error",
        "NOT_FOUND",
        3,
        OLD,
    )


def test_status_says_the_versions_accepted_and_each_peers(cluster, sockets):
    # A long worker timeout: the fake worker below never heartbeats, and a
    # loaded machine may take a while to show the client.
    c = cluster(num_workers=2, worker_timeout_ms=60_000)
    # One more "worker" of the older version registers (it serves nothing).
    old = sockets(c.target)
    register = m.RegisterWorker(
        request_id=1, worker_address="127.0.0.1:1", data_address="tcp://127.0.0.1:1"
    )
    reply, _ = ask(old, m.encode(register, OLD))
    assert isinstance(reply, m.RegisterWorkerReply)
    ds = (
        zd.Dataset.range(10)
        .repeat()
        .apply(service.distribute("parallel_epochs", c.target))
    )
    with iter(ds) as iterator:
        next(iterator)
        status = poll_for(lambda: (s := c.status())["protocol"]["clients"] and s)
    protocol = status["protocol"]
    assert protocol == {
        "version": NEW,
        "accepts": [OLD, NEW],
        "workers": {f"v{OLD}": 1, f"v{NEW}": 2},
        "clients": {f"v{NEW}": 1},
    }
    by_address = {w["address"]: w["protocol"] for w in status["workers"]}
    assert by_address.pop("127.0.0.1:1") == OLD
    assert set(by_address.values()) == {NEW}
