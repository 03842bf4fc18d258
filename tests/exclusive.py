"""Tests that need the machine to themselves, in a suite run by several processes.

``make test`` runs the suite on several pytest-xdist workers at once: most tests
wait on timers, sockets and child processes, not on the CPU. A few measure
time or rates, or load every core themselves; they carry
``@pytest.mark.exclusive``. Each test holds a lock on one file shared by the
run's workers (named by the run's id, ``workerinput["testrunuid"]``) from its
setup to its teardown: an ordinary test a shared lock, an exclusive one the
lock alone. A turnstile in front keeps the exclusive ones from waiting
forever: a worker waiting for the lock alone holds the turnstile, so no new
test starts until the running ones end. Without xdist nothing is locked, nor
in a pytest that a test starts (it is no worker of the run, and its test
waiting behind the turnstile would hold up the test that waits for it).
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def machine(run: str | None, exclusive: bool) -> Iterator[None]:
    """Holds run ``run``'s lock, shared or alone, while the block runs (None: no lock)."""
    if run is None:
        yield
        return
    folder = Path(tempfile.gettempdir())
    turnstile_path = folder / f"zmqdata-tests-{run}.turnstile"
    lock_path = folder / f"zmqdata-tests-{run}.lock"
    with open(turnstile_path, "a") as turnstile, open(lock_path, "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
