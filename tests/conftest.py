"""Shared fixtures: an in-process service cluster factory, a thread-leak check."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from zmq.utils.garbage import GarbageCollectorThread

from tests.helpers import poll_for
from tests.service.cluster import Cluster


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
