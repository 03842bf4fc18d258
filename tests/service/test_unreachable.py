"""A dispatcher that cannot be reached is reported early, saying why."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import poll_for
from tests.service.cluster import free_port
from tests.service.logs import warnings_from
from zmqdata import errors, service
from zmqdata._client import rpc
from zmqdata._worker import control as worker_control


def test_a_refused_address_is_warned_about_and_named_in_the_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(rpc, "WARN_AFTER_S", 0.2)
    monkeypatch.setenv("ZMQDATA_DISPATCHER_TIMEOUT_S", "1")
    target = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(errors.UnavailableError) as caught:
        service.get_status(target)
    assert f"no answer from {target}" in str(caught.value)
    assert "connection refused" in str(caught.value)
    (warning,) = warnings_from(caplog, "zmqdata.client")
    assert f"no answer from {target} for " in warning
    assert "connection refused" in warning


UNRESOLVABLE = """
import sys
from zmqdata import errors, service
try:
    service.get_status("tcp://no-such-host.invalid:5050")
except errors.UnavailableError as error:
    sys.exit(str(error))
"""


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare")
def test_a_host_that_does_not_resolve_is_named_in_the_error() -> None:
    # In a fresh network namespace: the name lookup cannot leave the machine.
    if subprocess.run(["unshare", "-rn", "true"], check=False).returncode != 0:
        pytest.skip("unprivileged network namespaces are not available")
    command = ["unshare", "-rn", sys.executable, "-c", UNRESOLVABLE]
    env = {"ZMQDATA_DISPATCHER_TIMEOUT_S": "0.5", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=30, env=env, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "host 'no-such-host.invalid' does not resolve" in done.stderr


def test_a_worker_warns_early_and_periodically_when_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(worker_control, "WARN_AFTER_S", 0.2)
    monkeypatch.setattr(worker_control, "WARN_EVERY_S", 0.3)
    address = f"tcp://127.0.0.1:{free_port()}"
    config = service.WorkerConfig(address, heartbeat_interval_ms=50)
    with service.WorkerServer(config):
        found = poll_for(lambda: len(warnings_from(caplog, "zmqdata.worker")) >= 2, 5.0)
    assert found
    first = warnings_from(caplog, "zmqdata.worker")[0]
    assert f"no answer from the dispatcher at {address}" in first
    assert "connection refused" in first


def test_a_worker_that_reaches_its_dispatcher_does_not_warn(
    cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(worker_control, "WARN_AFTER_S", 0.05)
    c = cluster(num_workers=1, heartbeat_interval_ms=20)
    started = time.monotonic()
    control = c.workers[0]._control
    poll_for(lambda: control._last_reply - started > 0.5)  # 8 warning periods
    assert c.num_registered_workers() == 1
    assert warnings_from(caplog, "zmqdata.worker") == []
