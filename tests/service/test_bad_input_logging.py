"""A flood of bad messages is counted and logged, at most a line per interval."""

from __future__ import annotations

import logging

import zmq

from tests.helpers import poll_for, scrape
from zmqdata import service


def test_a_flood_of_garbage_logs_one_line_and_serving_goes_on(cluster, caplog):
    c = cluster(num_workers=1, dispatcher_options={"metrics_port": 0})
    address = c.dispatcher.metrics_address
    assert address is not None

    def errors_total() -> float:
        return scrape(address)["zmqdata_dispatcher_errors_total"]

    caplog.set_level(logging.WARNING, logger="zmqdata")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(c.target)
        for _ in range(200):
            sock.send(b"\xc1 not msgpack")
        poll_for(lambda: errors_total() >= 200)
    finally:
        sock.close(linger=0)
    lines = [r for r in caplog.records if "bad request" in r.getMessage()]
    assert 1 <= len(lines) <= 2, [r.getMessage() for r in lines]
    assert len(service.get_status(c.target)["workers"]) == 1
