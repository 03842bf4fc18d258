"""``EmptyPasses``: an endless repeat of nothing ends once a whole pass said so (pure)."""

from __future__ import annotations

from zmqdata._dispatcher.empty_passes import KEPT, EmptyPasses


def running(*tasks: int):
    return set(tasks).__contains__


def test_the_read_ends_once_every_taker_of_a_pass_found_nothing():
    passes = EmptyPasses()
    passes.took(1, 0, first=True)
    passes.took(2, 0, first=False)
    assert not passes.heard(
        3, 1, empty_pass=True, running=running(1, 2, 3)
    )  # took none
    assert not passes.heard(1, 1, empty_pass=True, running=running(1, 2, 3))
    assert passes.heard(2, 1, empty_pass=True, running=running(1, 2, 3))
    assert passes.heard(3, 7, empty_pass=False, running=running(3))  # over for good


def test_one_taker_that_made_something_keeps_the_read_going():
    passes = EmptyPasses()
    passes.took(1, 0, first=True)
    passes.took(2, 0, first=False)
    assert not passes.heard(1, 1, empty_pass=False, running=running(1, 2))
    assert not passes.heard(2, 1, empty_pass=True, running=running(1, 2))
    assert not passes.exhausted


def test_a_taker_lost_before_it_said_leaves_its_pass_undecided():
    passes = EmptyPasses()
    passes.took(1, 0, first=True)
    passes.took(2, 0, first=False)
    assert not passes.heard(1, 1, empty_pass=True, running=running(1))  # 2 was lost
    # the next pass, taken by the task left, decides
    passes.took(1, 1, first=True)
    assert passes.heard(1, 2, empty_pass=True, running=running(1))


def test_a_pass_seen_from_its_middle_is_never_judged():
    passes = EmptyPasses()  # a restarted dispatcher: repetition 4 began before it
    passes.took(1, 4, first=False)
    assert not passes.heard(1, 5, empty_pass=True, running=running(1))
    assert passes.passes == {}


def test_at_most_kept_passes_are_watched():
    passes = EmptyPasses()
    for repetition in range(KEPT + 3):
        passes.took(1, repetition, first=True)
    assert sorted(passes.passes) == list(range(3, KEPT + 3))
