"""Shared fixtures: an in-process service cluster factory, a thread-leak check.

Every dispatcher the suite starts, in this process or as a child process,
checks its records' invariants at each tick (``ZMQDATA_VALIDATE_STATE``); a
test whose in-process dispatcher finds one broken fails
(``records_stay_valid``), and the chaos trials read their dispatcher
processes' logs (``tests/service/validated.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from zmq.utils.garbage import GarbageCollectorThread

from tests import exclusive
from tests.helpers import poll_for
from tests.ranks import Ranks
from tests.service.cluster import Cluster, free_port
from tests.service.validated import INVALID
from zmqdata._dispatcher.server import VALIDATE_ENV

os.environ[VALIDATE_ENV] = "1"  # inherited by the dispatcher processes started

# The suite runs on 4 processes on 2 cores: input generation slowed by the load
# is not a defect of a test (each test's own settings still apply).
settings.register_profile("suite", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture
def cluster() -> Iterator[Callable[..., Cluster]]:
    """``cluster(num_workers=2, worker_timeout_ms=...)`` -> a started ``Cluster``.

    Every cluster made through the factory is stopped at teardown.
    """
    made: list[Cluster] = []

    def make(num_workers: int = 1, **options: Any) -> Cluster:
        made.append(Cluster(num_workers, **options))
        return made[-1]

    yield make
    for each in reversed(made):
        each.stop()


@pytest.fixture
def ddp_run() -> Iterator[Callable[..., Ranks]]:
    """``run(out, world_size, entry, **config)``: a DDP run's ranks (``tests/ranks.py``).

    Each run gets a free master port on loopback and is waited for (its
    ranks must exit 0); every run still alive after the test is killed.
    """
    started: list[Ranks] = []

    def run(out: Any, world_size: int, entry: str, **config: Any) -> Ranks:
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        ranks = Ranks(out, world_size, entry, env, **config)
        started.append(ranks)
        ranks.wait()
        return ranks

    yield run
    for ranks in started:
        ranks.kill()


@pytest.fixture
def two_workers(cluster: Callable[..., Cluster]) -> str:
    """The address of an in-process dispatcher with two workers."""
    return cluster(num_workers=2).target


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    """Every test ends with the threads it started ended (servers, readers, pools).

    A thread still running 5 s after the test fails it, named. pyzmq's
    zero-copy garbage collector thread lives as long as the process, by design,
    as does fsspec's event loop thread for async file systems (``fsspecIO``)
    and that loop's default executor (``asyncio_N``: s3fs makes its sessions
    there; zmqdata runs no asyncio loop).
    """
    before = set(threading.enumerate())
    yield

    def leaked() -> list[str]:
        return sorted(
            thread.name
            for thread in threading.enumerate()
            if thread not in before
            and thread.is_alive()
            and not isinstance(thread, GarbageCollectorThread)
            and thread.name != "fsspecIO"
            and not thread.name.startswith("asyncio_")
        )

    try:
        poll_for(lambda: not leaked(), timeout=5.0)
    except AssertionError:
        pytest.fail(f"threads left running: {leaked()}")


class _Invalid(logging.Handler):
    """Keeps the ``records invalid`` lines an in-process dispatcher logs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(INVALID):
            self.lines.append(record.getMessage())


@pytest.fixture(autouse=True)
def records_stay_valid(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test whose in-process dispatcher found its records invalid."""
    handler = _Invalid()
    dispatcher_log = logging.getLogger("zmqdata.dispatcher")
    dispatcher_log.addHandler(handler)
    try:
        yield
    finally:
        dispatcher_log.removeHandler(handler)
    if not request.node.get_closest_marker("breaks_records"):
        assert not handler.lines, handler.lines[:3]


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Runs an ``exclusive`` test alone when the suite runs on several workers."""
    run = getattr(item.config, "workerinput", {}).get("testrunuid")  # xdist's
    with exclusive.machine(run, item.get_closest_marker("exclusive") is not None):
        yield
