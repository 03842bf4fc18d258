"""Handoff: values made on one thread, on request of another."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from zmqdata._runtime.handoff import Handoff


@contextmanager
def serving(handoff: Handoff[int], make: Callable[[], int]) -> Iterator[None]:
    """A thread calling ``handoff.serve(make)`` every millisecond, like a loop's tick."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.001):
            handoff.serve(make)

    thread = threading.Thread(target=tick, name="test-handoff-loop")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_each_get_receives_a_value_made_after_it_asked():
    handoff = Handoff[int](logging.getLogger("test"))
    counter = itertools.count(1)
    with serving(handoff, lambda: next(counter)):
        assert handoff.get(5.0) == 1
        assert handoff.get(5.0) == 2  # made only when asked: nothing in between


def test_concurrent_gets_all_receive_a_value():
    handoff = Handoff[int](logging.getLogger("test"))
    got: list[int | None] = []
    with serving(handoff, lambda: 7):
        askers = [
            threading.Thread(target=lambda: got.append(handoff.get(5.0)))
            for _ in range(8)
        ]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
    assert got == [7] * 8


def test_a_failing_make_is_logged_and_hands_over_none(caplog):
    handoff = Handoff[int](logging.getLogger("test"))

    def broken() -> int:
        raise RuntimeError("no status")

    with serving(handoff, broken), caplog.at_level(logging.ERROR):
        assert handoff.get(5.0) is None
    assert "making a value for another thread failed" in caplog.text


def test_get_times_out_with_none_when_nobody_serves():
    handoff = Handoff[int](logging.getLogger("test"))
    assert handoff.get(0.01) is None
