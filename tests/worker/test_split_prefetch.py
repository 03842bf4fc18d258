"""RemoteSplitProvider asks for the next splits before a batch runs out.

A fake dispatcher (a ROUTER socket in the test) answers the worker's split
requests with one-element splits; it notes, as each request comes in, how many
splits it had handed out and how many the producer had taken.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import zmq

from zmqdata._wire import messages as m
from zmqdata._worker.splits import AT_MOST_ONCE_BATCH, RemoteSplitProvider


class FakeDispatcher:
    """Answers ``GetSplit`` with at most ``batch`` splits, ``total`` in all, then the end."""

    def __init__(self, total: int, batch: int) -> None:
        self._sock = zmq.Context.instance().socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self.target = f"tcp://127.0.0.1:{port}"
        self._total, self._batch = total, batch
        self.handed = 0
        self.requests: list[int] = []
        """Per request: the splits handed in answer."""

    def answer(self) -> bool:
        """Answers the next request (it must come within 5 s); whether it was the end."""
        assert self._sock.poll(5000), "no split request"
        peer, data = self._sock.recv_multipart()
        request = m.decode(data)
        assert isinstance(request, m.GetSplit)
        count = min(self._batch, request.max_splits, self._total - self.handed)
        self.requests.append(count)
        splits = [[0, lo, lo + 1] for lo in range(self.handed, self.handed + count)]
        self.handed += count
        reply = m.GetSplitReply(
            request_id=request.request_id, splits=splits, end_of_splits=not splits
        )
        self._sock.send_multipart([peer, m.encode(reply)])
        return not splits

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def dispatcher() -> Iterator[FakeDispatcher]:
    fake = FakeDispatcher(total=40, batch=8)
    yield fake
    fake.close()


def test_the_next_splits_are_asked_for_before_the_last_ones_run_out(dispatcher):
    stop = threading.Event()
    provider = RemoteSplitProvider(
        dispatcher.target, 1, 1, stop, 10.0, handed=lambda lo, hi: None
    )
    queued_at_send: list[int] = []
    send = provider._send

    def noting_send(request: m.GetSplit) -> None:
        queued_at_send.append(len(provider._splits))
        send(request)

    provider._send = noting_send  # type: ignore[method-assign]
    splits: list[list[int]] = []

    def produce() -> None:
        while (split := provider.next_split()) is not None:
            splits.append(split)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        while not dispatcher.answer():
            pass
        producer.join(5)  # it ends once the end's answer is in
    finally:
        stop.set()
        producer.join(5)
        provider.close()
    assert [split[0] for split in splits] == list(range(40))  # each once, in order
    # Each request after the first went out with half of the last answer's
    # splits still queued (none after an answer of one).
    assert len(queued_at_send) == len(dispatcher.requests)
    assert queued_at_send[0] == 0
    for answered, queued in zip(
        dispatcher.requests[:-1], queued_at_send[1:], strict=True
    ):
        assert queued == answered // 2, (dispatcher.requests, queued_at_send)
    assert max(queued_at_send) >= 2


def test_a_task_ending_with_a_request_out_notes_its_splits_as_handed(dispatcher):
    handed: list[tuple[int, int]] = []
    provider = RemoteSplitProvider(
        dispatcher.target,
        1,
        1,
        threading.Event(),
        10.0,
        handed=lambda lo, hi: handed.append((lo, hi)),
    )
    answering = threading.Thread(target=lambda: [dispatcher.answer() for _ in range(3)])
    answering.start()
    # 1 split (a first request asks for one), then 2: the last asked for ahead
    taken = [provider.next_split() for _ in range(3)]
    provider.close()  # the task ends (a `take` below the source): answer taken
    answering.join(5)
    assert not answering.is_alive()
    assert [split[0] for split in taken] == [0, 1, 2]
    assert len(dispatcher.requests) == 3
    assert dispatcher.handed > 3  # the request sent ahead was answered ...
    assert handed == [(lo, lo + 1) for lo in range(dispatcher.handed)]  # ... noted


def test_an_at_most_once_task_holds_few_splits():
    """Its splits are lost with its worker: it asks for a few at a time."""
    dispatcher = FakeDispatcher(total=40, batch=32)
    provider = RemoteSplitProvider(dispatcher.target, 1, 1, threading.Event(), 10.0)
    answering = threading.Thread(
        target=lambda: [None for _ in iter(dispatcher.answer, True)]
    )
    answering.start()
    taken = []
    while (split := provider.next_split()) is not None:
        taken.append(split)
    answering.join(10)
    provider.close()
    dispatcher.close()
    assert len(taken) == 40
    assert max(dispatcher.requests) == AT_MOST_ONCE_BATCH < 32  # what it may give
