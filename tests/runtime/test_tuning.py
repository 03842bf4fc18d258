"""A fleet's dispatcher collects garbage itself: young cycles at once, frozen
survivors never scanned, cycles among them at the hourly full collection."""

from __future__ import annotations

import gc
import weakref

import pytest

from tests.helpers import poll_for
from zmqdata import service
from zmqdata._runtime import tuning


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def a_cycle() -> weakref.ref[Cycle]:
    """A cycle dropped at once; the reference says whether it was freed."""
    return weakref.ref(Cycle())


def test_young_cycles_go_at_the_next_tick_frozen_ones_at_the_full_collection():
    collector = tuning.YoungCollector(now=0.0)
    try:
        young = a_cycle()
        assert collector.tick(0.05) is None  # not due
        assert collector.tick(0.1) == 0
        assert young() is None
        kept = Cycle()
        assert collector.tick(0.2) == 0  # alive: frozen
        assert gc.get_freeze_count() > 0
        frozen = weakref.ref(kept)
        del kept
        assert collector.tick(0.35) == 0
        assert frozen() is not None  # frozen: not scanned again
        assert collector.tick(tuning.FULL_EVERY_S) == 2
        assert frozen() is None
    finally:
        collector.close()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_fleets_dispatcher_runs_the_collector_and_gives_it_back(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(tuning, "_fleet", True)  # as serve_a_fleet leaves it
    gc.disable()
    server = service.DispatchServer(service.DispatcherConfig())
    try:
        poll_for(lambda: gc.get_freeze_count() > 0, timeout=5.0)  # its ticks
    finally:
        server.stop()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
