"""A dispatcher run with ``ZMQDATA_VALIDATE_STATE=1`` (as the suite runs them all)
notices records that break an invariant and says so."""

from __future__ import annotations

import logging

import pytest

from tests.helpers import poll_for
from tests.service.validated import INVALID


@pytest.mark.breaks_records
def test_a_dispatcher_logs_records_that_break_an_invariant(cluster, caplog):
    c = cluster(num_workers=1)
    records = c.dispatcher._loop.state.records
    [worker] = records.workers.values()
    real = worker.worker_address
    caplog.set_level(logging.WARNING, logger="zmqdata.dispatcher")
    worker.worker_address = "moved:1"  # its index (workers_at) still says `real`
    try:
        poll_for(lambda: any(INVALID in r.getMessage() for r in caplog.records))
    finally:
        worker.worker_address = real
    [line] = {r.getMessage() for r in caplog.records if INVALID in r.getMessage()}
    assert "workers_at" in line
