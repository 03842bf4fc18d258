"""The tier's own machinery: stale namespaces, and a skip that cannot go unseen."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.cli.procs import run
from tests.hosts import netns
from tests.hosts.deploy import ROOT

BANNER = "MULTI-HOST TESTS (tests/hosts) SKIPPED: ZMQDATA_NO_NETNS=1 is set"


def run_tier(**env: str) -> subprocess.CompletedProcess[str]:
    """Runs one tier test in a child pytest with ``env`` (namespaces disabled)."""
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/hosts/test_multi_host.py::test_the_documented_flags_serve_without_keys",
        ],
        cwd=ROOT,
        env={**environ, "ZMQDATA_NO_NETNS": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_skipped_tier_says_so_loudly():
    done = run_tier()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert BANNER in done.stdout
    assert "multi-host tier: ZMQDATA_NO_NETNS=1 is set" in done.stdout  # -ra reason


def test_on_ci_a_tier_that_cannot_run_fails():
    done = run_tier(CI="true")
    assert done.returncode != 0
    assert "CI=true but the multi-host tier cannot run" in done.stdout


def test_stale_namespaces_of_dead_runs_are_removed(namespaces):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = f"{netns.PREFIX}{int(dead.stdout)}-0"
    netns.ip("netns", "add", stale)
    network = netns.Network()
    try:
        mine = netns.ip("netns", "list")
        removed = netns.remove_stale()
        after = netns.ip("netns", "list")
    finally:
        network.close()
    assert stale in mine
    assert stale in removed
    assert stale not in after
    assert f"{netns.PREFIX}{os.getpid()}-" in after  # a live run's are kept


def test_a_worker_with_no_route_to_its_dispatcher_fails_naming_it(deployment):
    lone = deployment(secure=False).dispatcher_host  # its only route: its /24
    done = run(
        "worker",
        "--dispatcher",
        "10.99.0.1:5050",
        "--host",
        "0.0.0.0",
        "--insecure",
        prefix=lone.prefix(),
    )
    assert done.returncode == 1, done.stderr
    assert "route to the dispatcher host '10.99.0.1'" in done.stderr
    assert "--worker-address" in done.stderr
    assert "Traceback" not in done.stderr
