"""``service.get_status``'s own timeout (what ``zmqdata status --timeout`` uses)."""

from __future__ import annotations

import time

import pytest

from tests.service.cluster import free_port
from zmqdata import errors, service


def test_get_status_gives_up_after_its_timeout_not_the_environment_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZMQDATA_DISPATCHER_TIMEOUT_S", "600")
    target = f"tcp://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(errors.UnavailableError, match="no answer from"):
        service.get_status(target, timeout_s=0.3)
    assert time.monotonic() - start < 10
