"""Test helpers shared by every test package. The only test module that may sleep."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import Any


def poll_for(
    predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01
) -> Any:
    """Waits until ``predicate()`` is truthy and returns its value.

    Raises ``AssertionError`` naming the predicate if it is still falsy after
    ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            name = getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(
                f"poll_for timed out after {timeout}s: {name} is still {value!r}"
            )
        time.sleep(interval)


def scrape(address: str) -> dict[str, float]:
    """The samples a Prometheus endpoint at ``address`` serves, by name."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
