"""A wrong dispatcher address fails fast; a dispatcher starting or restarting is waited for.

An address that never answered this process and refuses connections past the
first-contact grace (``ZMQDATA_DISPATCHER_FIRST_CONTACT_S``) is a wrong one;
an address that answered before keeps the long retry of
``ZMQDATA_DISPATCHER_TIMEOUT_S`` (``_client/rpc.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.cluster import Cluster, free_port, port_of
from tests.service.logs import warnings_from
from zmqdata import errors, service
from zmqdata._client import rpc

GRACE_S = 0.5


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A short grace, a long timeout: the test tells them apart."""
    monkeypatch.setenv("ZMQDATA_DISPATCHER_FIRST_CONTACT_S", str(GRACE_S))
    monkeypatch.setenv("ZMQDATA_DISPATCHER_TIMEOUT_S", "20")


def _read(target: str) -> Any:
    return list(
        zd.Dataset.range(3).apply(service.distribute("parallel_epochs", target))
    )


CALLS: dict[str, Callable[[str], Any]] = {
    "distribute": _read,
    "register_dataset": lambda t: service.register_dataset(t, zd.Dataset.range(3)),
    "from_dataset_id": lambda t: service.from_dataset_id("parallel_epochs", t, "d"),
    "get_status": service.get_status,
}


@pytest.mark.parametrize("call", CALLS)
def test_a_refused_address_fails_after_the_grace_naming_it(call: str) -> None:
    target = f"tcp://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(errors.UnavailableError) as caught:
        CALLS[call](target)
    took = time.monotonic() - started
    assert GRACE_S <= took < GRACE_S + 2, took
    message = str(caught.value)
    assert f"no answer from {target}" in message
    assert "connection refused (nothing listens there)" in message
    assert "nothing ever answered there" in message
    assert "ZMQDATA_DISPATCHER_FIRST_CONTACT_S=0.5 s" in message


def test_a_missing_ipc_socket_file_fails_after_the_grace(tmp_path) -> None:
    target = f"ipc://{tmp_path}/dispatcher.sock"
    started = time.monotonic()
    with pytest.raises(errors.UnavailableError, match="does not exist"):
        service.get_status(target, timeout_s=20)
    assert time.monotonic() - started < GRACE_S + 2


def _call_in_thread(target: str) -> tuple[threading.Thread, list[Any]]:
    """``get_status(target)`` on a thread; its status or error lands in the list."""
    result: list[Any] = []

    def call() -> None:
        try:
            result.append(service.get_status(target))
        except errors.ZmqDataError as error:
            result.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    return thread, result


def _wait_past_the_grace(caplog: pytest.LogCaptureFixture, result: list[Any]) -> None:
    """Until the call warned (it warns after its grace) or ended."""
    poll_for(lambda: result or warnings_from(caplog, "zmqdata.client"), timeout=10)


def test_a_dispatcher_starting_within_the_grace_is_waited_for(
    cluster: Callable[..., Cluster],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("ZMQDATA_DISPATCHER_FIRST_CONTACT_S", "10")
    monkeypatch.setattr(rpc, "WARN_AFTER_S", 0.2)
    port = free_port()
    thread, result = _call_in_thread(f"tcp://127.0.0.1:{port}")
    _wait_past_the_grace(caplog, result)  # refused until now
    cluster(num_workers=0, port=port)
    thread.join(20)
    [status] = result
    assert isinstance(status, dict), status


def test_a_dispatcher_that_answered_before_is_waited_for_across_its_restart(
    cluster: Callable[..., Cluster],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(rpc, "WARN_AFTER_S", 2 * GRACE_S)
    c = cluster(num_workers=0)
    target = c.target
    assert service.get_status(target)["workers"] == []  # it answered once
    c.dispatcher.stop()
    thread, result = _call_in_thread(target)
    _wait_past_the_grace(caplog, result)  # refused for longer than the grace
    c.dispatcher = service.DispatchServer(
        service.DispatcherConfig(port=port_of(target))
    )
    thread.join(20)
    [status] = result
    assert isinstance(status, dict), status
