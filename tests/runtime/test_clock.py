"""The retry vocabulary: ``Backoff``, ``retry`` and ``attempts``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from zmqdata._runtime.clock import Backoff, Deadline, attempts, retry


def test_jitter_draws_a_share_of_the_cap() -> None:
    low = Backoff(1.0, 8.0, rng=lambda: 0.0, jitter=0.5)
    assert [low.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    full = Backoff(1.0, 8.0, rng=lambda: 0.25)
    assert [full.next_delay() for _ in range(2)] == [0.25, 0.5]


def test_a_floor_and_a_reset() -> None:
    backoff = Backoff(0.1, 2.0, rng=lambda: 0.0, minimum_s=0.5)
    assert backoff.next_delay() == 0.5
    steady = Backoff(0.1, 2.0, jitter=0.0)
    steady.next_delay()
    steady.reset()
    assert steady.next_delay() == 0.1


@pytest.mark.parametrize("initial_s", [0.004, 0.0])
def test_ten_thousand_attempts_wait_the_maximum_without_overflowing(
    initial_s: float,
) -> None:
    backoff = Backoff(initial_s, 0.1, jitter=0.0)
    delays = [backoff.next_delay() for _ in range(10_000)]
    assert delays[-1] == (0.1 if initial_s else 0.0)


def test_retry_waits_between_retryable_errors_only() -> None:
    waits: list[float] = []
    errors = [BlockingIOError("busy"), BlockingIOError("busy")]

    def attempt() -> str:
        if errors:
            raise errors.pop()
        return "bound"

    busy = Backoff(0.02, 0.02, jitter=0.0)
    assert (
        retry(
            attempt, lambda e: isinstance(e, BlockingIOError), 5.0, busy, waits.append
        )
        == "bound"
    )
    assert waits == [0.02, 0.02]
    with pytest.raises(ValueError, match="bad"):
        retry(
            _raise(ValueError("bad")),
            lambda e: isinstance(e, OSError),
            5.0,
            busy,
            waits.append,
        )
    assert len(waits) == 2


def test_retry_gives_up_at_its_deadline() -> None:
    waits: list[float] = []
    with pytest.raises(OSError, match="busy"):
        retry(_raise(OSError("busy")), lambda e: True, 0.0, Backoff(), waits.append)
    assert waits == []


def test_attempts_wait_the_backoff_delays_within_the_deadline() -> None:
    deadline = Deadline(1.5)
    waits = attempts(deadline, Backoff(0.5, 5.0, jitter=0.0))
    first, second = next(waits), next(waits)
    assert first.at is not None
    assert second.at is not None
    assert deadline.at is not None
    assert second.at - first.at == pytest.approx(0.5, abs=0.05)
    assert next(waits).at == pytest.approx(deadline.at, abs=0.05)  # 2 s capped
    assert list(attempts(Deadline(0.0), Backoff())) == []


def _raise(error: Exception) -> Callable[[], None]:
    def attempt() -> None:
        raise error

    return attempt
