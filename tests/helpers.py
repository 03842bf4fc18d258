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


def run_tiny_bench(module: str, folder: str, timeout: float = 110.0) -> Any:
    """``tests.<module>.run_tiny(folder, out)`` in a fresh Python; what it wrote to ``out``.

    Bench smoke tests run their section in a subprocess (its workers, its
    imports) and read the result back as JSON.
    """
    import json
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from bench.common import ROOT, subprocess_env

    out = Path(folder) / "result.json"
    code = f"from tests import {module} as t; t.run_tiny({folder!r}, {str(out)!r})"
    # Its own process group: a run cut short takes the deployments it started
    # (``zmqdata up`` and their workers) with it.
    with subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as child:
        try:
            _, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            _, stderr = child.communicate()
            raise AssertionError(
                f"tests.{module}.run_tiny ran past {timeout} s: {stderr[-3000:]}"
            ) from None
    assert child.returncode == 0, stderr[-3000:]
    return json.loads(out.read_text())


def run_python(code: str, timeout: float = 60.0) -> Any:
    """``code`` (dedented) run by a fresh Python; its ``CompletedProcess``."""
    import subprocess
    import sys
    import textwrap

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_example(script: str, *args: str, timeout: float = 60.0) -> str:
    """``examples/<script>`` with ``args`` run by a fresh Python from the
    repository's root; its stdout, once it exited 0."""
    import subprocess
    import sys

    from bench.common import ROOT

    done = subprocess.run(
        [sys.executable, f"examples/{script}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
