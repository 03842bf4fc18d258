"""``PollLoop``: a loop that crashes says so to whoever waits on it."""

from __future__ import annotations

import pytest

from zmqdata._runtime.loop import PollLoop
from zmqdata.errors import UnavailableError


class _Crashing(PollLoop):
    tick_s = 0.01

    def on_tick(self, now: float) -> None:
        raise RuntimeError("disk on fire")


def test_join_raises_when_the_loop_crashed():
    loop = _Crashing("crashing")
    loop.start()
    with pytest.raises(UnavailableError, match="disk on fire"):
        loop.join(timeout=5)
    assert not loop.running
    loop.stop()  # idempotent after a crash


def test_join_returns_after_a_clean_stop():
    loop = PollLoop("clean")
    loop.start()
    loop.stop()
    loop.join(timeout=5)
    assert loop.failure is None
