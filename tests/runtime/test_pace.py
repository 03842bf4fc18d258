"""``HeartbeatPace``: a peer's heartbeat interval, longer while nothing changes."""

from __future__ import annotations

from zmqdata._runtime.pace import HeartbeatPace


def test_quiet_heartbeats_double_the_interval_up_to_the_ceiling() -> None:
    pace = HeartbeatPace(1.0, quiet_max_s=2.5)
    assert [pace.after(changed=False) for _ in range(3)] == [2.0, 2.5, 2.5]
    assert pace.after(changed=True) == 1.0


def test_without_a_ceiling_the_base_is_kept() -> None:
    pace = HeartbeatPace(1.0)
    assert pace.after(changed=False) == 1.0
    pace.set_ceiling(0.0)  # a dispatcher that names none
    assert pace.after(changed=False) == 1.0


def test_a_lower_ceiling_cuts_the_interval_now() -> None:
    pace = HeartbeatPace(0.1, quiet_max_s=2.0)
    for _ in range(6):
        pace.after(changed=False)
    assert pace.interval == 2.0
    pace.set_ceiling(0.8)
    assert pace.interval == 0.8
    pace.set_ceiling(0.05)  # under the base: the base
    assert (pace.max_s, pace.interval) == (0.1, 0.1)


def test_reset_returns_to_the_base() -> None:
    pace = HeartbeatPace(0.1, quiet_max_s=0.8)
    pace.after(changed=False)
    pace.reset()
    assert pace.interval == 0.1
