"""A running cluster of the previous release upgraded without stopping its trainer.

The previous release (``previous.py``) runs a fault-tolerant dispatcher and
two workers; a trainer reads a ``distributed_epoch`` job (DYNAMIC, exactly
once). Each worker is replaced by one of this release (a new one first, then
the old one stopped with SIGTERM, as a rolling update does), then the
dispatcher (stopped, and started again by this release on the same journal
and port). The read never fails and gets every element exactly once, with a
trainer of either release; within ``ZMQDATA_PROTOCOL_PROBE_S`` of the dispatcher's
upgrade, every peer of this release speaks this release's protocol again.
"""

from __future__ import annotations

import signal
from collections import Counter
from contextlib import ExitStack

import pytest

from tests.helpers import poll_for
from tests.service.cluster import free_port
from tests.upgrade.previous import PREVIOUS_PROTOCOL
from tests.upgrade.processes import (
    CURRENT,
    WAIT_S,
    Trainer,
    start_dispatcher,
    start_worker,
    wait_for_workers,
)
from tests.venvs import Venv
from zmqdata import service
from zmqdata._version import OLDEST_PROTOCOL_VERSION as OLD
from zmqdata._version import PROTOCOL_VERSION

pytestmark = pytest.mark.slow

N = 20_000
STEP = 2_000
"""Elements read between two upgrade steps."""
PROBE_S = 1.0
"""``ZMQDATA_PROTOCOL_PROBE_S`` of this release's processes (the default 10 s
would only make the test wait)."""


@pytest.mark.parametrize("trainer_release", ["current", "previous"])
def test_workers_then_the_dispatcher_are_upgraded_under_a_reading_trainer(
    previous: Venv, tmp_path, monkeypatch, trainer_release
):
    monkeypatch.setenv("ZMQDATA_PROTOCOL_PROBE_S", str(PROBE_S))  # this release's
    port = free_port()
    target = f"tcp://127.0.0.1:{port}"
    trainer_python = CURRENT if trainer_release == "current" else previous.python
    with ExitStack() as stack:
        dispatcher = start_dispatcher(stack, previous.python, port, tmp_path / "state")
        old_workers = [start_worker(stack, previous.python, target) for _ in range(2)]
        wait_for_workers(target, 2)
        trainer = stack.enter_context(Trainer(trainer_python, target, N))
        trainer.read(STEP)
        for old in old_workers:
            start_worker(stack, CURRENT, target)
            wait_for_workers(target, 3)
            trainer.read(STEP)
            old.popen.send_signal(signal.SIGTERM)  # it drains while the trainer reads
            poll_for(lambda old=old: read_until_exit(trainer, old), timeout=WAIT_S)
            assert old.popen.returncode == 0, old.stderr
            wait_for_workers(target, 2)
            trainer.read(STEP)
        assert dispatcher.stop(signal.SIGTERM) == 0, dispatcher.stderr
        start_dispatcher(stack, CURRENT, port, tmp_path / "state")
        trainer.read(STEP)
        # Peers that fell back to the old dispatcher's version try theirs again.
        trainer_speaks = (
            PROTOCOL_VERSION if trainer_release == "current" else PREVIOUS_PROTOCOL
        )
        expected = {
            "version": PROTOCOL_VERSION,
            "accepts": [OLD, PROTOCOL_VERSION],
            "workers": {f"v{PROTOCOL_VERSION}": 2},
            "clients": {f"v{trainer_speaks}": 1},
        }
        poll_for(
            lambda: service.get_status(target)["protocol"] == expected,
            timeout=PROBE_S + WAIT_S,
        )
        trainer.read(None)
    assert Counter(trainer.elements) == {i: 1 for i in range(N)}


def read_until_exit(trainer: Trainer, proc) -> bool:
    """Reads a little; True once ``proc`` has exited."""
    if proc.popen.poll() is not None:
        return True
    trainer.read(100)
    return False


def test_a_trainer_of_this_release_reads_from_a_cluster_of_the_previous_one(
    previous: Venv, tmp_path
):
    n, port = 10_000, free_port()
    target = f"tcp://127.0.0.1:{port}"
    with ExitStack() as stack:
        start_dispatcher(stack, previous.python, port, tmp_path / "state")
        for _ in range(2):
            start_worker(stack, previous.python, target)
        wait_for_workers(target, 2)
        assert "protocol" not in service.get_status(target)  # the previous release's
        with Trainer(CURRENT, target, n) as trainer:
            trainer.read(n // 2)
            trainer.read(None)
    assert Counter(trainer.elements) == {i: 1 for i in range(n)}
