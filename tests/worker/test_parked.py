"""``ParkedRequests``: per-peer caps and round-robin service across peers."""

from __future__ import annotations

from zmqdata._worker.parked import ParkedRequests


def test_a_peer_parks_at_most_its_cap_per_task() -> None:
    parked: ParkedRequests[str] = ParkedRequests(max_per_peer=2)
    assert [parked.park(1, "a", f"a{i}") for i in range(4)] == [
        True,
        True,
        False,
        False,
    ]
    assert parked.park(2, "a", "other task")
    assert parked.park(1, "b", "b0")
    assert sorted(parked.task_ids()) == [1, 2]


def test_peers_take_turns_until_nothing_is_left() -> None:
    parked: ParkedRequests[str] = ParkedRequests(max_per_peer=8)
    for i in range(5):
        parked.park(1, "flood", f"f{i}")
    parked.park(1, "reader", "r0")
    parked.park(1, "reader", "r1")
    stock = 3
    served: list[str] = []

    def serve(request: str) -> bool:
        nonlocal stock
        if not stock:
            return False
        stock -= 1
        served.append(request)
        return True

    parked.serve(1, serve, any_order=False)
    assert served == ["f0", "r0", "f1"]
    stock = 10
    parked.serve(1, serve, any_order=False)
    assert served[3:] == ["r1", "f2", "f3", "f4"]
    assert not parked.waiting(1)


def test_any_order_offers_every_peer_its_requests() -> None:
    parked: ParkedRequests[str] = ParkedRequests()
    for peer in "abc":
        parked.park(1, peer, f"{peer}0")
        parked.park(1, peer, f"{peer}1")
    offered: list[str] = []

    def serve(request: str) -> bool:
        offered.append(request)
        return not request.startswith("b")

    parked.serve(1, serve, any_order=True)
    assert offered == ["a0", "a1", "b0", "c0", "c1"]
    assert parked.waiting(1)
    parked.serve(1, lambda request: True, any_order=True)
    assert not parked.waiting(1)
