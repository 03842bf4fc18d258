"""``DealPlan``: multi-rank reads on a fake clock, against simulated workers.

The central property: what each rank receives is a function of the epoch's
split outputs (in ordinal order) and R alone. ``Sim`` drives R ``ReadCore`` +
``DealPlan`` readers against workers that keep their output in a real
``DealtBuffer`` and answer with the real ``dealt.answer``, and a dispatcher
that hands splits out, follows heartbeats, releases splits and re-hands a lost
worker's splits, all in an order drawn at random; the streams must equal the
reference computed directly. Workers put their elements one by one or in
blocks (as a source that reads in bulk does), which replies cut to each
consumer's rows.
"""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.client.fakes import Driven, Recorder, driven, options
from zmqdata._client.core import END, Failure
from zmqdata._client.dealing import DealPlan
from zmqdata._dataset.block import Block
from zmqdata._dispatcher.dealing import skip_for
from zmqdata._wire import deal, frames
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import TaskInfo
from zmqdata._worker.buffer import Cancelled, Item, Raw, count
from zmqdata._worker.dealt import DealtBuffer, DealtSend, answer
from zmqdata._worker.serving import Refuse

pytestmark = pytest.mark.timeout(60)

DYNAMIC = 1
WOULD_WAIT = threading.Event()
WOULD_WAIT.set()


# ------------------------------------------------------------------ the reference


def outputs(counts: list[int]) -> list[list[str]]:
    """Split ``q``'s elements: ``"q.i"``."""
    return [[f"{q}.{i}" for i in range(n)] for q, n in enumerate(counts)]


def reference(counts: list[int], R: int, stream: deal.Stream) -> list[list[str]]:
    """Each rank's stream: the tokens ``stream`` deals, in turn, whole rounds only."""
    tokens = [e for split in outputs(counts) for e in split]
    dealt = [
        tokens[t] for t in range(stream.start, len(tokens)) if t not in stream.skip
    ]
    rounds = len(dealt) // R
    return [[dealt[r + k * R] for k in range(rounds)] for r in range(R)]


# ------------------------------------------------------------------ the simulation


def frame_groups(items: list[Item]) -> list[list[Any]]:
    """A reply's frames-codec messages, as the data loop makes them: runs of
    small elements in one, each block in its own, columnar."""
    groups, raw = [], []
    for item in items:
        if isinstance(item, Block):
            if raw:
                groups.append(frames.encode(raw))
                raw = []
            group = frames.encode_block(item.first, item.columns, item.n)
            assert group is not None
            groups.append(group)
        else:
            assert isinstance(item, Raw)
            raw.append(item.element)
    if raw:
        groups.append(frames.encode(raw))
    return groups


@dataclass
class Worker:
    task_id: int
    buffer: DealtBuffer
    """Its output; ``max_items``: what it holds before a put would wait."""
    queue: list[tuple[int, int]] = field(default_factory=list)
    """Splits handed and not started: ``(ordinal, skip)``, in the order handed."""
    current: list[int] | None = None
    """``[ordinal, next index, skip]`` of the split being made."""
    parked: list[tuple[int, m.GetElements]] = field(default_factory=list)
    alive: bool = True

    @property
    def endpoint(self) -> str:
        return f"tcp://w:{self.task_id}"


@dataclass
class Rank:
    core: Driven
    sent: Recorder
    inbox: dict[int, list[tuple[m.Message, list[Any]]]] = field(default_factory=dict)
    """Replies on their way, by task: each worker's in the order it sent them."""

    def stream(self) -> list[Any]:
        return [
            e for item in self.sent.trainer if isinstance(item, tuple) for e in item[0]
        ]

    def ended(self) -> bool:
        return bool(self.sent.trainer) and self.sent.trainer[-1] is END

    def failure(self) -> BaseException | None:
        failed = [i for i in self.sent.trainer if isinstance(i, Failure)]
        return failed[0].error if failed else None


class Sim:
    """R readers, ``workers`` workers and a dispatcher, stepped in a random order."""

    def __init__(
        self,
        counts: list[int],
        R: int,
        assign: list[int],
        rng: random.Random,
        stream: deal.Stream | None = None,
        start: int = 0,
        capacity: int = 1_000,
        window: int | None = None,
        block: int = 1,
    ) -> None:
        self.counts, self.R, self.rng = counts, R, rng
        self.block = block
        """The most elements a worker puts at once (1: one by one, unblocked)."""
        self.outputs = outputs(counts)
        self.stream = stream or deal.Stream()
        self.start = start
        self.assign = assign
        self.now = 0.0
        self.workers = [
            Worker(i + 1, DealtBuffer(max_items=capacity, max_bytes=1 << 30))
            for i in range(max(assign) + 1)
        ]
        self.next_ordinal = start
        self.owners: dict[int, int] = {}
        self.released = start
        self.positions: dict[int, list[int]] = {}
        self.ranks = []
        for r in range(R):
            read = options(
                processing_mode=DYNAMIC,
                job_name="j",
                consumer_index=r,
                num_consumers=R,
                max_outstanding_requests=window,
            )
            core = driven(read, DealPlan(read))
            self.ranks.append(Rank(core, core.sent))
        for rank in self.ranks:
            rank.core.on_dispatcher(self.state(), self.now)
            rank.core.request_more(self.now)
            self._collect(rank)

    # ------------------------------------------------------------ the dispatcher

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.alive]

    def state(self) -> m.IterationState:
        tasks = [
            TaskInfo(
                task_id=w.task_id,
                worker_id=w.task_id,
                worker_address=f"w:{w.task_id}",
                data_address=w.endpoint,
            ).to_wire()
            for w in self.live()
        ]
        owners = [v for q in sorted(self.owners) for v in (q, self.owners[q])]
        info = {
            "epoch": 0,
            "splits": len(self.counts),
            "start": self.start,
            "stream": self.stream.to_wire(),
            "owners": owners,
        }
        return m.IterationState(
            client_id=7, iteration_id=1, tasks=tasks, finished=False, deal=info
        )

    def hand(self) -> bool:
        """The next fresh ordinal goes to its worker (or a live one)."""
        q = self.next_ordinal
        if q >= len(self.counts):
            return False
        worker = self.workers[self.assign[q]]
        if not worker.alive:
            worker = self.rng.choice(self.live())
        skip = deal.first_skip(self.stream, self.stream.start) if q == self.start else 0
        worker.queue.append((q, skip))
        self.owners[q] = worker.task_id
        self.next_ordinal += 1
        return True

    def lose(self) -> bool:
        """A random worker dies (if another is left)."""
        live = self.live()
        return len(live) >= 2 and self.lose_worker(self.rng.choice(live))

    def lose_worker(self, dead: Worker) -> bool:
        """``dead`` dies; its unreleased splits go again to the others, whole.

        A survivor takes them before its fresh splits, after the one it is
        making (as the dispatcher hands lost splits first at its next request).
        """
        dead.alive = False
        dead.buffer.clear()
        dead.parked.clear()
        lost = sorted(q for q, t in self.owners.items() if t == dead.task_id)
        for q in lost:
            heir = self.rng.choice(self.live())
            skip = skip_for(self.positions, self.R, q)
            at = 0
            while at < len(heir.queue) and heir.queue[at][0] < q:
                at += 1
            heir.queue.insert(at, (q, skip))
            self.owners[q] = heir.task_id
        return True

    def heartbeats(self, r: int) -> None:
        """Takes rank ``r``'s heartbeats: positions, releases."""
        rank = self.ranks[r]
        for heartbeat in rank.sent.heartbeats:
            if heartbeat.deal:
                consumer, ordinal, index = heartbeat.deal
                assert consumer == r
                self.positions[r] = [ordinal, index]
        rank.sent.heartbeats.clear()
        if rank.ended():  # its release carries where it ended
            self.positions[r] = rank.core.plan.deal_position()[1:]
        if len(self.positions) == self.R:
            below = min(at[0] for at in self.positions.values())
            if below > self.released:
                self.released = below
                for worker in self.live():
                    worker.buffer.release(below)
                for q in [q for q in self.owners if q < below]:
                    del self.owners[q]

    # ------------------------------------------------------------ workers

    def produce(self, worker: Worker) -> bool:
        """One step of ``worker``'s producer: open, one element, or the end."""
        buffer = worker.buffer
        if worker.current is None:
            if not worker.queue:
                return False
            q, skip = worker.queue.pop(0)
            buffer.open(q, skip)
            worker.current = [q, 0, skip]
            self.serve_parked(worker)
            return True
        q, i, skip = worker.current
        if i == self.counts[q]:
            buffer.end(q, i)
            worker.current = None
        else:
            n = min(self.rng.randint(1, self.block), self.counts[q] - i)
            lo = max(i, skip)  # the producer cuts a block at the skip
            if lo < i + n:
                try:  # with stop set, a put that would wait raises instead
                    buffer.put(
                        q, lo, self.item(q, lo, i + n), 8 * (i + n - lo), WOULD_WAIT
                    )
                except Cancelled:
                    return False
            worker.current[1] += n
        self.serve_parked(worker)
        return True

    def item(self, q: int, lo: int, hi: int) -> Item:
        """Split ``q``'s elements ``lo`` to ``hi``: one, or a block (unless blocks are off)."""
        if self.block == 1:
            return Raw(self.outputs[q][lo])
        return Block.of("", [self.outputs[q][lo:hi]])

    def serve(self, worker: Worker, r: int, request: m.GetElements) -> bool:
        decision = answer(request, worker.buffer)
        if decision is None:
            return False
        if isinstance(decision, Refuse):
            reply = m.Error(
                request_id=request.request_id, code=decision.code, message=decision.text
            )
            self.ranks[r].inbox.setdefault(worker.task_id, []).append((reply, [b""]))
            return True
        assert isinstance(decision, DealtSend)
        groups = frame_groups(decision.items)
        header = m.Elements(
            request_id=request.request_id,
            task_id=request.task_id,
            count=count(decision.items),
            parts=[len(group) for group in groups],
            split=decision.split,
            indices=decision.indices,
            produced=decision.produced,
            ended=decision.ended,
            counts=decision.counts,
        )
        parts = [b"", *(frame for group in groups for frame in group)]
        self.ranks[r].inbox.setdefault(worker.task_id, []).append((header, parts))
        return True

    def serve_parked(self, worker: Worker) -> None:
        worker.parked = [
            (r, request)
            for r, request in worker.parked
            if not self.serve(worker, r, request)
        ]

    def _collect(self, rank: Rank) -> None:
        """Routes rank's requests to their workers (a dead one's are lost)."""
        r = self.ranks.index(rank)
        for endpoint, request in rank.sent.to_workers:
            worker = self.workers[int(endpoint.rsplit(":", 1)[1]) - 1]
            if worker.alive and not self.serve(worker, r, request):
                worker.parked.append((r, request))
        rank.sent.to_workers.clear()

    # ------------------------------------------------------------ readers

    def deliver(self, r: int) -> bool:
        rank = self.ranks[r]
        queues = [queue for _, queue in sorted(rank.inbox.items()) if queue]
        if not queues:
            return False
        header, parts = self.rng.choice(queues).pop(0)
        rank.core.on_worker(header, parts, self.now)
        rank.core.request_more(self.now)
        self._collect(rank)
        return True

    def inform(self, r: int) -> None:
        rank = self.ranks[r]
        rank.core.on_dispatcher(self.state(), self.now)
        rank.core.request_more(self.now)
        self._collect(rank)

    def consume(self, r: int) -> None:
        """Rank ``r``'s trainer takes some of what it was handed."""
        counters = self.ranks[r].core.counters
        counters.taken += self.rng.randint(0, counters.received - counters.consumed)
        self.ranks[r].core.request_more(self.now)
        self._collect(self.ranks[r])

    def tick(self, r: int) -> None:
        rank = self.ranks[r]
        rank.core.tick(self.now)
        self._collect(rank)
        self.heartbeats(r)

    # ------------------------------------------------------------ running

    def done(self) -> bool:
        return all(rank.ended() or rank.failure() for rank in self.ranks)

    def step(self, lose_at: int | None, steps: int) -> None:
        rng = self.rng
        action = rng.random()
        r = rng.randrange(self.R)
        if steps == lose_at:
            self.lose()
        elif action < 0.1:
            self.hand()
        elif action < 0.45:
            self.produce(rng.choice(self.live()))
        elif action < 0.75:
            self.deliver(r)
        elif action < 0.8:
            self.inform(r)
        elif action < 0.9:
            self.consume(r)
        else:
            self.now += 0.05
            self.tick(r)

    def run(self, lose_at: int | None = None, max_steps: int | None = None) -> None:
        """Steps until every rank ended; fails naming where each is if none can."""
        if max_steps is None:  # ample: a run that ends takes far fewer
            max_steps = 300 * (sum(self.counts) + len(self.counts) + 4) * self.R
        for steps in range(max_steps):
            if self.done():
                return
            self.step(lose_at, steps)
        stuck = [
            (r, len(rank.stream()), rank.core.plan.deal_position())
            for r, rank in enumerate(self.ranks)
        ]
        raise AssertionError(f"no end after {max_steps} steps: {stuck}")

    def streams(self) -> list[list[Any]]:
        for r, rank in enumerate(self.ranks):
            assert rank.failure() is None, (r, rank.failure())
        return [rank.stream() for rank in self.ranks]


# ------------------------------------------------------------------ the property


@st.composite
def epochs(draw: Any) -> dict[str, Any]:
    """Split counts (0: a split a filter emptied), R, which worker makes which
    split, each worker's buffer (in elements), the readers' window and the
    most elements a worker puts at once (1: one by one; more: in blocks)."""
    counts = draw(st.lists(st.integers(0, 7), min_size=1, max_size=14))
    workers = draw(st.integers(1, 4))
    assign = [draw(st.integers(0, workers - 1)) for _ in counts]
    return {
        "counts": counts,
        "R": draw(st.integers(1, 5)),
        "assign": assign,
        "capacity": draw(st.sampled_from([1_000, 1, 2, 5])),
        "window": draw(st.sampled_from([None, 1, 2, 3, 8])),
        "block": draw(st.sampled_from([1, 3, 8])),
    }


def simulate(case: dict[str, Any], seed: int, **overrides: Any) -> Sim:
    """A ``Sim`` of ``case`` (an ``epochs()`` draw), its order drawn from ``seed``."""
    args = {
        k: case[k] for k in ("counts", "R", "assign", "capacity", "window", "block")
    }
    return Sim(rng=random.Random(seed), **(args | overrides))


SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(epochs(), st.integers(0, 2**32))
def test_rank_streams_are_a_function_of_the_outputs_and_R(case, seed):
    sim = simulate(case, seed)
    sim.run()
    assert sim.streams() == reference(case["counts"], case["R"], deal.Stream())


@SETTINGS
@given(epochs(), st.integers(0, 2**32), st.integers(0, 400))
def test_a_lost_worker_changes_nothing(case, seed, lose_at):
    assign = [q % 2 for q in range(len(case["counts"]))]  # two workers at least
    sim = simulate(case, seed, assign=assign)
    sim.run(lose_at=lose_at)
    assert sim.streams() == reference(case["counts"], case["R"], deal.Stream())


@st.composite
def restored(draw: Any) -> dict[str, Any]:
    """An epoch and where a restored read of it starts: ``merge`` of R0 saves."""
    case = draw(epochs())
    counts = case["counts"]
    offsets = [0, *itertools.accumulate(counts)]
    R0 = draw(st.integers(1, 4))
    rounds = offsets[-1] // R0
    base = draw(st.integers(0, rounds))
    states = []
    for r in range(R0):
        consumed = max(0, min(rounds, base + draw(st.integers(-1, 1))))
        anchor = (0, 0)
        if consumed:  # the split of the last element it took
            last = r + (consumed - 1) * R0
            anchor = max(
                (q, offsets[q])
                for q in range(len(counts))
                if offsets[q] <= last and counts[q]
            )
        position = deal.DealtPosition("d", 0, 1, R0, r, deal.Stream(), consumed, anchor)
        states.append(position.to_state())
    merged = deal.DealtPosition.from_state(deal.merge(states))
    return case | {"start": merged.anchor[0], "stream": merged.stream}


@SETTINGS
@given(restored(), st.integers(0, 2**32))
def test_a_restored_read_deals_what_the_merged_position_left(case, seed):
    sim = simulate(case, seed, stream=case["stream"], start=case["start"])
    sim.run()
    assert sim.streams() == reference(case["counts"], case["R"], case["stream"])


@SETTINGS
@given(restored(), st.integers(0, 2**32), st.integers(0, 300))
def test_a_restored_read_survives_a_lost_worker(case, seed, lose_at):
    assign = [q % 2 for q in range(len(case["counts"]))]
    sim = simulate(
        case, seed, assign=assign, stream=case["stream"], start=case["start"]
    )
    sim.run(lose_at=lose_at)
    assert sim.streams() == reference(case["counts"], case["R"], case["stream"])


@pytest.mark.parametrize("capacity", [1, 2, 5])
@pytest.mark.parametrize("window", [2, 3])
@pytest.mark.parametrize("block", [1, 4])
def test_small_buffers_and_windows_still_finish(capacity, window, block):
    counts = [5, 0, 3, 7, 1, 4, 6, 2]
    for seed in range(5):
        rng = random.Random(seed)
        assign = [q % 2 for q in range(8)]
        sim = Sim(counts, 3, assign, rng, capacity=capacity, window=window, block=block)
        sim.run()
        assert sim.streams() == reference(counts, 3, deal.Stream())


# ------------------------------------------------------------------ liveness
#
# Reads that once hung. A worker's buffer holds 64 MiB: a handful of large
# elements (a batch of images made before distribute); ``capacity`` models
# that, in elements.


def test_the_element_needed_first_is_asked_although_later_ones_hold_the_slots():
    """The reader's requests for later elements of a split (asked one by one as
    the window grew) held every slot to its task while the element it needed
    first waited, in a full buffer."""
    sim = Sim([4, 3, 0, 0], 1, [0, 1, 1, 1], random.Random(552), capacity=2, window=8)
    sim.run()
    assert sim.streams() == [
        [f"{q}.{i}" for q, n in enumerate([4, 3]) for i in range(n)]
    ]


def test_a_window_of_one_learns_that_its_round_is_complete():
    """With a window of 1, an element that arrived before its round was known
    complete left nothing to ask, so nothing more was learnt."""
    sim = Sim([1, 1], 2, [0, 0], random.Random(0), window=1)
    worker = sim.workers[0]
    sim.hand()
    sim.hand()
    sim.inform(0)
    sim.produce(worker)  # open split 0
    sim.produce(worker)  # 0.0: rank 0's request answered, "1 made, not ended"
    assert sim.deliver(0)
    sim.run(max_steps=5_000)
    assert sim.streams() == [["0.0"], ["1.0"]]


def test_a_lost_split_is_made_although_the_heirs_buffer_is_full():
    """A lost split queued behind a later split whose elements, which no reader
    can locate before the lost split is counted, fill the heir's buffer."""
    sim = Sim([2, 2], 1, [0, 1], random.Random(0), capacity=1)
    lost, heir = sim.workers
    sim.hand()  # split 0 -> worker 1
    sim.hand()  # split 1 -> worker 2
    sim.inform(0)  # the reader asks split 0 only: split 1's offset is unknown
    for _ in range(3):  # worker 2: open split 1, 1.0, then 1.1 waits for room
        sim.produce(heir)
    assert heir.current == [1, 1, 0]
    assert sim.lose_worker(lost)  # split 0 goes to worker 2, after split 1
    sim.run(max_steps=5_000)
    assert sim.streams() == [["0.0", "0.1", "1.0", "1.1"]]


def test_a_re_made_split_does_not_fill_the_buffer_with_what_was_delivered():
    """A split made again skips what every reader has; what only the faster
    ones have must not fill the buffer before what the slow one is owed."""
    sim = Sim([8], 2, [0, 1], random.Random(0))
    lost, heir = sim.workers
    heir.buffer = DealtBuffer(max_items=2, max_bytes=1 << 30)
    sim.hand()
    sim.inform(0)  # rank 0 reads; rank 1 lags (its state comes later)
    while sim.produce(lost):
        pass
    for _ in range(20):
        sim.now += 0.05
        sim.inform(0)
        sim.tick(0)
        while sim.deliver(0):
            pass
    assert sim.ranks[0].stream() == ["0.0", "0.2", "0.4", "0.6"]
    sim.now += 1.0
    sim.tick(0)  # rank 0 ended: its release is in
    sim.tick(1)  # both positions are in: rank 0 past split 0, rank 1 at 0.1
    assert sim.positions == {0: [1, 0], 1: [0, 1]}
    assert sim.lose_worker(lost)  # split 0 again, skip 1: 0.2 and 0.4 are kept
    sim.run(max_steps=5_000)
    assert sim.streams() == [["0.0", "0.2", "0.4", "0.6"], ["0.1", "0.3", "0.5", "0.7"]]


def test_the_element_needed_first_gets_a_request_when_later_ones_hold_every_slot():
    """Four requests parked on split 6's later elements held every slot to the
    task, while the element needed first (5.0) held its full buffer."""
    sim = Sim(
        [0, 0, 0, 2, 4, 1, 1], 1, [0, 0, 0, 0, 1, 0, 0], random.Random(1), capacity=1
    )
    sim.run(max_steps=5_000)
    assert sim.streams() == [["3.0", "3.1", "4.0", "4.1", "4.2", "4.3", "5.0", "6.0"]]


def test_a_lost_split_handed_after_the_one_being_made_is_made_although_the_buffer_is_full():
    """The heir held 5.0 (no reader can locate it before split 0 is counted)
    and waited for room to put 7.0, before it would open the lost split 0."""
    sim = Sim(
        [0, 0, 0, 0, 0, 1, 0, 1],
        3,
        [q % 2 for q in range(8)],
        random.Random(1),
        capacity=1,
    )
    sim.run(lose_at=137, max_steps=5_000)
    assert sim.streams() == [[], [], []]


# ------------------------------------------------------------------ the plan's steps


def one_rank(counts: list[int], R: int = 2, r: int = 0) -> Sim:
    """A sim whose rank ``r`` is stepped by hand (the others never read)."""
    return Sim(counts, R, [0] * len(counts), random.Random(0))


def test_the_first_position_is_the_start_and_the_last_is_past_every_split():
    sim = one_rank([2, 2])
    # The first element not received: split 0, at most index r (a lower bound).
    position = sim.ranks[1].core.plan.deal_position()
    assert position[:2] == [1, 0]
    assert position[2] in (0, 1)
    sim.run()
    assert sim.streams() == [["0.0", "1.0"], ["0.1", "1.1"]]
    assert sim.ranks[0].core.plan.deal_position() == [0, 2, 0]
    assert sim.ranks[1].core.plan.deal_position() == [1, 2, 0]


def test_nothing_is_asked_before_a_split_has_an_owner():
    sim = one_rank([3])
    assert all(rank.sent.to_workers == [] for rank in sim.ranks)
    assert not any(w.parked for w in sim.workers)
    sim.hand()
    sim.inform(0)
    [(r, request)] = sim.workers[0].parked
    assert (r, request.split, request.indices[:2]) == (0, 0, [0, 2])


def test_an_element_waits_until_its_round_is_known_to_be_complete():
    sim = one_rank([3, 1])  # tokens 0.0 0.1 0.2 | 1.0 -> rank 0: 0.0, 0.2
    worker = sim.workers[0]
    sim.hand()
    sim.inform(0)
    sim.produce(worker)  # open split 0
    sim.produce(worker)  # 0.0: the parked request is answered, "1 made"
    sim.produce(worker)  # 0.1: nobody asked rank 0's reader about it
    while sim.deliver(0):
        pass
    assert sim.ranks[0].stream() == []  # is there a token 1? not known yet
    sim.produce(worker)  # 0.2: answered, "3 made"
    while sim.deliver(0):
        pass
    assert sim.ranks[0].stream() == ["0.0"]
    sim.produce(worker)  # end of split 0: 3 elements
    while sim.deliver(0):
        pass
    assert sim.ranks[0].stream() == ["0.0"]  # round 1 needs token 3: not known yet
    sim.hand()
    sim.inform(0)
    sim.produce(worker)
    sim.produce(worker)  # 1.0
    sim.produce(worker)  # end of split 1: rank 0's request for its index 1 answers
    for _ in range(20):
        sim.now += 0.05
        sim.tick(0)
        while sim.deliver(0):
            pass
    assert sim.ranks[0].stream() == ["0.0", "0.2"]


def test_the_last_incomplete_round_goes_to_nobody():
    counts = [3, 2]  # 5 elements, R=2: 0.0 0.2 | 0.1 1.0 ; 1.1 dropped
    sim = Sim(counts, 2, [0, 0], random.Random(1))
    sim.run()
    assert sim.streams() == [["0.0", "0.2"], ["0.1", "1.0"]]


def test_an_empty_epoch_ends_every_rank_with_nothing():
    sim = Sim([0, 0, 0], 3, [0, 1, 0], random.Random(2))
    sim.run()
    assert sim.streams() == [[], [], []]


def _plan_with_request() -> tuple[Sim, m.GetElements]:
    sim = one_rank([4])
    sim.hand()
    sim.inform(0)
    [(_, request)] = sim.workers[0].parked
    sim.workers[0].parked.clear()
    return sim, request


def test_absent_is_asked_again_after_a_backoff():
    sim, request = _plan_with_request()
    core = sim.ranks[0].core
    core.on_worker(
        m.Error(request_id=request.request_id, code=m.ABSENT, message="not yet"),
        [b""],
        sim.now,
    )
    core.request_more(sim.now)
    assert sim.ranks[0].sent.to_workers == []
    sim.now += 0.2
    core.request_more(sim.now)
    [(_, again)] = sim.ranks[0].sent.to_workers
    assert (again.split, again.indices) == (request.split, request.indices)


def test_any_other_worker_error_fails_the_read():
    sim, request = _plan_with_request()
    core = sim.ranks[0].core
    reply = m.Error(
        request_id=request.request_id, code="FAILED_PRECONDITION", message="sent"
    )
    core.on_worker(reply, [b""], sim.now)
    assert "sent" in str(sim.ranks[0].failure())


def test_a_malformed_deal_state_fails_the_read():
    sim = one_rank([1])
    read = options(
        processing_mode=DYNAMIC, job_name="j", consumer_index=0, num_consumers=2
    )
    core = driven(read, DealPlan(read))
    sent = core.sent
    bad = m.IterationState(
        client_id=7, iteration_id=1, tasks=[], finished=False, deal={"splits": 1}
    )
    core.on_dispatcher(bad, 0.0)
    assert isinstance(sent.trainer[-1], Failure)
    assert "malformed deal state" in str(sent.trainer[-1].error)
    del sim


def test_requests_to_a_task_gone_are_asked_of_the_new_owner():
    sim = Sim([4, 4], 1, [0, 1], random.Random(3))
    sim.hand()
    sim.inform(0)
    assert [req.task_id for _, req in sim.workers[0].parked] == [1]
    dead, heir = sim.workers
    dead.alive = False  # lost: its split goes to the other worker, whole
    dead.parked.clear()
    heir.queue.append((0, 0))
    sim.owners[0] = heir.task_id
    sim.inform(0)
    assert [(req.task_id, req.split) for _, req in heir.parked] == [(2, 0)]
    sim.run()
    assert sim.streams() == [[f"{q}.{i}" for q in range(2) for i in range(4)]]
