"""The multi-host tier: hosts are network namespaces (needs root and ``ip``).

Where namespaces cannot be made the tier is skipped with the reason, and the
run ends with a loud line saying so; with ``CI=true`` it fails instead, since
CI runs as root and must run it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.hosts import netns, veth
from tests.hosts.deploy import Deployment, Keys

_skipped: list[str] = []


@pytest.fixture(scope="session")
def namespaces() -> None:
    """Skips (or, on CI, fails) where namespaces cannot be made."""
    reason = netns.unavailable_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the multi-host tier cannot run: {reason}")
        _skipped.append(reason)
        pytest.skip(f"multi-host tier: {reason}")
    netns.remove_stale()


@pytest.fixture(scope="session")
def shaping(namespaces: None) -> None:
    """Skips (or, on CI, fails) where ``tc`` cannot shape a link (``veth.shape``)."""
    reason = veth.tc_missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the slow-link tests cannot run: {reason}")
        pytest.skip(f"SLOW-LINK TEST SKIPPED: {reason}")


@pytest.fixture(scope="session")
def keys(namespaces: None, tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys.make(tmp_path_factory.mktemp("keys"))


DeploymentFactory = Callable[..., Deployment]


def _deployments(
    directory: Callable[[], Path], keys: Keys
) -> Iterator[DeploymentFactory]:
    made: list[tuple[netns.Network, Deployment]] = []

    def make(secure: bool = True) -> Deployment:
        network = netns.Network()
        try:
            deployment = Deployment(network, directory(), keys if secure else None)
        except BaseException:
            network.close()
            raise
        made.append((network, deployment))
        return deployment

    try:
        yield make
    finally:
        for network, deployment in reversed(made):
            try:
                deployment.close()
            finally:
                network.close()


@pytest.fixture
def deployment(
    keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DeploymentFactory]:
    """``deployment(secure=True)`` -> a ``Deployment`` on a new network, torn down after."""
    yield from _deployments(lambda: tmp_path_factory.mktemp("deploy"), keys)


@pytest.fixture(scope="module")
def module_deployment(
    keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DeploymentFactory]:
    """Like ``deployment``, shared by the tests of a module."""
    yield from _deployments(lambda: tmp_path_factory.mktemp("deploy"), keys)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped:
        terminalreporter.write_sep(
            "!",
            f"MULTI-HOST TESTS (tests/hosts) SKIPPED: {_skipped[0]}",
            red=True,
            bold=True,
        )
