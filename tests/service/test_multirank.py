"""Multi-rank reads through an in-process service: ranks on threads, on loopback.

A finite ``distributed_epoch`` read with ``num_consumers=R`` deals the epoch's
elements in turn: rank ``r`` gets the elements numbered ``r, r+R, ...`` in the
order "splits in ``split_order(seed, epoch)``, each split's pipeline output in
order". ``reference`` computes that order here, without the service, as the
workers do (the pipeline run on each split alone), so every stream can be
checked exactly: per rank, across worker counts, worker loss and restores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata._dataset import graph
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dispatcher import dealing
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire import deal
from zmqdata.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(60)

JOIN_TIMEOUT_S = 30

FILTERED = zd.Dataset.range(700).filter(lambda x: x % 7 != 3).batch(3)
"""Filtered, then batched within each split: batches of 1 to 3."""
BATCHED = zd.Dataset.range(500).map(lambda x: x * 2).batch(4)
"""Splits cut to whole batches of 4 (``split_runs.whole_batch``)."""
PLAIN = zd.Dataset.range(400)
RANGE = zd.Dataset.range(3_001)
"""Read in blocks: splits of 46 elements."""
ROWS = zd.Dataset.from_tensor_slices(
    {"x": np.arange(2_003), "y": np.arange(2_003, dtype=np.float32) / 3}
)
"""Dict rows read in blocks: splits of 31 elements."""
SMALL_BLOCK = 20
"""Elements per block in the tests of blocks: they do not divide the splits."""


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process workers' sources read ``SMALL_BLOCK`` elements a block."""
    monkeypatch.setattr("zmqdata._worker.task.BLOCK_ELEMENTS", SMALL_BLOCK)


@pytest.fixture(scope="module")
def shared() -> Iterator[Cluster]:
    """A dispatcher and two workers for the tests that need nothing special."""
    running = Cluster(num_workers=2)
    try:
        yield running
    finally:
        running.stop()


_names = iter(range(1_000_000))


def fresh(prefix: str = "mr") -> str:
    """A job name no test used before."""
    return f"{prefix}-{next(_names)}"


# ------------------------------------------------------------------ the reference


def key(element: Any) -> tuple[Any, ...]:
    """A hashable, exact form of an element (dtype, shape and bytes; a dict's by key)."""
    if isinstance(element, dict):
        return tuple((name, key(value)) for name, value in element.items())
    array = np.asarray(element)
    return (array.dtype.str, array.shape, array.tobytes())


def reference(ds: zd.Dataset, seed: int | None, epoch: int = 0) -> list[Any]:
    """The epoch's elements in dealing order: each split alone, splits seeded."""
    records = ClusterRecords()
    records.apply(ev.DatasetRegistered("x", graph.serialize(ds._node), "f", None, b""))
    splits = dealing.splits_of(records.datasets["x"])
    order = deal.split_order(seed, epoch, splits.count())
    root = ds._node
    source = find_split_source(root)
    out = []
    for q in range(splits.count()):
        lo, hi = splits.at(int(order[q]))[:2]
        iterator = make_iterator(
            root, IterContext(source, ListSplitProvider([[lo, hi]]))
        )
        try:
            out += [key(element) for element in iterator]
        finally:
            iterator.close()
    return out


def dealt(tokens: list[Any], R: int) -> list[list[Any]]:
    """Rank ``r``'s stream: tokens ``r, r+R, ...``, whole rounds only."""
    rounds = len(tokens) // R
    return [[tokens[r + k * R] for k in range(rounds)] for r in range(R)]


def interleaved(streams: list[list[Any]]) -> list[Any]:
    """The global order: round by round, rank by rank."""
    return [e for row in zip(*streams, strict=True) for e in row]


# ------------------------------------------------------------------ reading


def rank_dataset(
    target: str, ds: zd.Dataset, R: int, r: int, name: str, seed: int | None, **kw: Any
) -> zd.Dataset:
    return ds.apply(
        service.distribute(
            "distributed_epoch",
            target,
            job_name=name,
            num_consumers=R,
            consumer_index=r,
            seed=seed,
            **kw,
        )
    )


class Opened:
    """The iterators the ranks opened, so that a read that hangs can be closed."""

    def __init__(self) -> None:
        self.iterators: list[Any] = []

    def __call__(self, dataset: zd.Dataset) -> Any:
        iterator = iter(dataset)
        self.iterators.append(iterator)
        return iterator

    def close(self) -> None:
        for iterator in self.iterators:
            iterator.close()  # any thread: a __next__ waiting there ends


def on_ranks(
    R: int, body: Callable[[int, Opened], Any], deadline_s: float = JOIN_TIMEOUT_S
) -> list[Any]:
    """``body(r, opened)`` for every rank on its own thread; the results.

    Raises the first error; fails if the ranks are not done in ``deadline_s``
    (their iterators are closed first, so no thread outlives the test).
    """
    results: list[Any] = [None] * R
    errors: list[BaseException] = []
    opened = Opened()

    def run(r: int) -> None:
        try:
            results[r] = body(r, opened)
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(r,), name=f"rank-{r}") for r in range(R)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + deadline_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        opened.close()
        for thread in threads:
            thread.join(JOIN_TIMEOUT_S)
    assert not hung, f"{hung} did not end in {deadline_s} s"
    if errors:
        raise errors[0]
    return results


def on_ranks_paused(
    R: int,
    body: Callable[[int, Opened, Callable[[], None]], Any],
    meanwhile: Callable[[], None],
) -> list[Any]:
    """``on_ranks``, running ``meanwhile()`` here once every rank is paused.

    Each rank's ``body(r, opened, pause)`` calls ``pause()`` once; it returns
    after ``meanwhile`` (a worker stopped while every rank is mid-read).
    """
    reached = threading.Barrier(R + 1, timeout=JOIN_TIMEOUT_S)
    go_on = threading.Event()

    def pause() -> None:
        reached.wait()
        assert go_on.wait(JOIN_TIMEOUT_S)

    outcome: list[Any] = []

    def read_all() -> None:
        try:
            outcome.append(on_ranks(R, lambda r, opened: body(r, opened, pause)))
        except BaseException as error:
            outcome.append(error)

    readers = threading.Thread(target=read_all)
    readers.start()
    try:
        reached.wait()
        meanwhile()
    finally:
        go_on.set()
    readers.join(JOIN_TIMEOUT_S + 5)
    assert not readers.is_alive()
    [results] = outcome
    if isinstance(results, BaseException):
        raise results
    return results


def read(
    target: str,
    ds: zd.Dataset,
    R: int,
    seed: int | None = 7,
    name: str | None = None,
    deadline_s: float = JOIN_TIMEOUT_S,
    **kw: Any,
) -> list[list[Any]]:
    """Every rank's whole stream (as ``key``s)."""
    name = name or fresh()

    def body(r: int, opened: Opened) -> list[Any]:
        dataset = rank_dataset(target, ds, R, r, name, seed, **kw)
        return [key(x) for x in opened(dataset)]

    return on_ranks(R, body, deadline_s)


# ------------------------------------------------------------------ streams


@pytest.mark.parametrize("R", [1, 2, 3, 5])
@pytest.mark.parametrize("ds", [FILTERED, BATCHED], ids=["filtered", "batched"])
def test_every_rank_gets_its_turns_of_the_reference_order(shared, ds, R):
    streams = read(shared.target, ds, R)
    tokens = reference(ds, 7)
    assert len({len(s) for s in streams}) == 1
    assert len(streams[0]) == len(tokens) // R
    assert streams == dealt(tokens, R)


@pytest.mark.parametrize("R", [2, 3])
@pytest.mark.parametrize("ds", [RANGE, ROWS], ids=["range", "rows"])
def test_blocks_deal_the_reference_order(shared, small_blocks, ds, R):
    """Sources read in bulk put blocks, each reply takes a rank's rows of them."""
    assert read(shared.target, ds, R) == dealt(reference(ds, 7), R)


def test_streams_are_byte_identical_with_one_or_three_workers(cluster):
    one, three = cluster(num_workers=1), cluster(num_workers=3)
    got_one = read(one.target, FILTERED, 3, seed=11)
    got_three = read(three.target, FILTERED, 3, seed=11)
    assert got_one == got_three == dealt(reference(FILTERED, 11), 3)
    busy = [w["num_tasks"] for w in three.status()["workers"]]
    assert len(busy) == 3


def test_different_seeds_deal_different_orders(shared):
    a = read(shared.target, PLAIN, 2, seed=1)
    b = read(shared.target, PLAIN, 2, seed=2)
    assert a != b
    assert sorted(a[0] + a[1]) == sorted(b[0] + b[1])  # the same elements
    assert a == dealt(reference(PLAIN, 1), 2)


def test_without_a_seed_splits_come_in_source_order(shared):
    streams = read(shared.target, PLAIN, 2, seed=None)
    values = [int(np.frombuffer(k[2], dtype=np.int64)[0]) for k in interleaved(streams)]
    assert values == list(range(400))


def test_the_same_seed_deals_the_same_streams_again(shared):
    first = read(shared.target, FILTERED, 2, seed=3)
    assert read(shared.target, FILTERED, 2, seed=3) == first


def test_a_small_window_reads_the_same_streams(shared):
    streams = read(shared.target, BATCHED, 3, max_outstanding_requests=2)
    assert streams == dealt(reference(BATCHED, 7), 3)


def test_each_pass_is_the_next_epoch_in_a_new_order(shared):
    name = fresh("epochs")

    def body(r: int, opened: Opened) -> list[list[Any]]:
        dataset = rank_dataset(shared.target, BATCHED, 2, r, name, 21)
        return [[key(x) for x in opened(dataset)] for _ in range(2)]

    passes = on_ranks(2, body)
    first, second = ([p[k] for p in passes] for k in range(2))
    assert first == dealt(reference(BATCHED, 21, epoch=0), 2)
    assert second == dealt(reference(BATCHED, 21, epoch=1), 2)
    assert first != second


def test_the_status_shows_the_job_and_what_it_did_not_deliver(shared):
    name = fresh("status")
    streams = read(shared.target, FILTERED, 4, name=name)
    total = len(reference(FILTERED, 7))
    assert total % 4  # some elements of a last round are left out

    def job() -> dict[str, Any] | None:
        jobs = [j for j in shared.status()["jobs"] if j["job_name"] == name]
        return jobs[0] if jobs and jobs[0]["finished"] else None

    shown = poll_for(job)
    assert (shown["processing_mode"], shown["num_consumers"]) == (
        "distributed_epoch",
        4,
    )
    assert shown["dataset_id"]
    assert shown["dealt"]["undelivered"] == total % 4
    assert shown["dealt"]["elements"] == total
    assert sum(len(s) for s in streams) == total - total % 4


# ------------------------------------------------------------------ save and restore


def save_at(
    target: str, ds: zd.Dataset, R: int, step: int, seed: int | None, name: str
) -> tuple[list[list[Any]], list[bytes]]:
    """Every rank reads ``step`` elements and saves; what each took, and the states."""

    def body(r: int, opened: Opened) -> tuple[list[Any], bytes]:
        with opened(rank_dataset(target, ds, R, r, name, seed)) as iterator:
            took = [key(next(iterator)) for _ in range(step)]
            state = iterator.save()
            next(iterator, None)  # consumed after the save: not in the position
            return took, state

    results = on_ranks(R, body)
    return [took for took, _ in results], [state for _, state in results]


def restore(
    target: str, ds: zd.Dataset, R: int, merged: bytes, seed: int | None, name: str
) -> list[list[Any]]:
    def body(r: int, opened: Opened) -> list[Any]:
        with opened(rank_dataset(target, ds, R, r, name, seed)) as iterator:
            iterator.restore(merged)
            return [key(x) for x in iterator]

    return on_ranks(R, body)


@pytest.mark.parametrize("R2", [2, 3, 5])
def test_a_merged_save_resumes_on_another_number_of_ranks(shared, R2):
    ds, R, step = FILTERED, 3, 17
    took, states = save_at(shared.target, ds, R, step, 5, fresh("save"))
    merged = service.merge_positions(list(reversed(states)))  # any order
    assert isinstance(merged, bytes)
    assert len(merged) < 2_000
    resumed = restore(shared.target, ds, R2, merged, 5, fresh("restore"))
    tokens = reference(ds, 5)
    assert took == [s[:step] for s in dealt(tokens, R)]
    assert len({len(s) for s in resumed}) == 1  # equal steps
    # Exactly once: the prefix and the resumed run, and nothing else, once each.
    everything = [e for s in took + resumed for e in s]
    assert len(everything) == len(set(everything))
    left = tokens[R * step :]
    assert len(left) - sum(len(s) for s in resumed) < R2
    # The global order continues the uninterrupted read's.
    assert interleaved(resumed) == left[: R2 * len(resumed[0])]


@pytest.mark.parametrize("ds", [RANGE, ROWS], ids=["range", "rows"])
def test_a_save_mid_block_resumes_on_another_number_of_ranks(shared, small_blocks, ds):
    R, step = 2, 333  # 666 elements: into split 14 of range's, its second block
    took, states = save_at(shared.target, ds, R, step, 5, fresh("block-save"))
    merged = service.merge_positions(states)
    resumed = restore(shared.target, ds, 3, merged, 5, fresh("block-restore"))
    tokens = reference(ds, 5)
    assert took == [s[:step] for s in dealt(tokens, R)]
    left = tokens[R * step :]
    assert interleaved(resumed) == left[: 3 * len(resumed[0])]
    assert len(left) - 3 * len(resumed[0]) < 3


def test_a_restored_epoch_is_followed_by_the_next_epoch_in_full(shared):
    ds = PLAIN
    _, states = save_at(shared.target, ds, 2, 150, 8, fresh("next"))
    merged = service.merge_positions(states)
    name = fresh("next-restore")

    def body(r: int, opened: Opened) -> list[list[Any]]:
        dataset = rank_dataset(shared.target, ds, 3, r, name, 8)
        with opened(dataset) as iterator:
            iterator.restore(merged)
            rest = [key(x) for x in iterator]
        return [rest, [key(x) for x in opened(dataset)]]

    passes = on_ranks(3, body)
    rest, after = ([p[k] for p in passes] for k in range(2))
    tokens = reference(ds, 8)
    assert interleaved(rest) == tokens[300:399]
    assert after == dealt(reference(ds, 8, epoch=1), 3)


def test_a_save_after_the_last_round_restores_only_the_tail(shared):
    tokens = reference(FILTERED, 6)
    steps = len(tokens) // 4
    _, states = save_at(shared.target, FILTERED, 4, steps, 6, fresh("tail"))
    left = tokens[4 * steps :]
    assert 0 < len(left) < 4
    resumed = restore(
        shared.target,
        FILTERED,
        2,
        service.merge_positions(states),
        6,
        fresh("tail-restore"),
    )
    assert interleaved(resumed) == left[: 2 * (len(left) // 2)]


def test_a_restore_from_a_save_before_any_element_reads_everything(shared):
    took, states = save_at(shared.target, PLAIN, 2, 0, 9, fresh("zero"))
    resumed = restore(
        shared.target,
        PLAIN,
        3,
        service.merge_positions(states),
        9,
        fresh("zero-restore"),
    )
    assert took == [[], []]
    assert resumed == dealt(reference(PLAIN, 9), 3)


def test_saves_after_a_restore_merge_again(shared):
    ds = BATCHED
    _, states = save_at(shared.target, ds, 2, 5, 4, fresh("twice"))
    merged = service.merge_positions(states)
    name = fresh("twice-1")

    def body(r: int, opened: Opened) -> tuple[list[Any], bytes]:
        with opened(rank_dataset(shared.target, ds, 3, r, name, 4)) as iterator:
            iterator.restore(merged)
            took = [key(next(iterator)) for _ in range(4)]
            return took, iterator.save()

    results = on_ranks(3, body)
    again = service.merge_positions([state for _, state in results])
    last = restore(shared.target, ds, 2, again, 4, fresh("twice-2"))
    tokens = reference(ds, 4)
    middle = interleaved([took for took, _ in results])
    assert middle == tokens[10:22]
    assert interleaved(last) == tokens[22 : 22 + 2 * len(last[0])]


def test_merge_positions_needs_every_rank(shared):
    _, states = save_at(shared.target, PLAIN, 3, 4, 1, fresh("missing"))
    with pytest.raises(InvalidArgumentError, match="missing"):
        service.merge_positions(states[:2])
    with pytest.raises(InvalidArgumentError):
        service.merge_positions([states[0], states[1], states[1]])
    with pytest.raises(InvalidArgumentError):
        service.merge_positions([states[0], states[1], b"not a state"])
    with pytest.raises(TypeError):
        service.merge_positions(states[0])


def test_merge_positions_refuses_states_of_another_read(shared):
    _, one = save_at(shared.target, PLAIN, 2, 3, 1, fresh("a"))
    _, seed2 = save_at(shared.target, PLAIN, 2, 3, 2, fresh("b"))
    _, other = save_at(shared.target, BATCHED, 2, 3, 1, fresh("c"))
    for foreign in (seed2, other):
        with pytest.raises(InvalidArgumentError):
            service.merge_positions([one[0], foreign[1]])


def test_merge_positions_refuses_states_of_two_jobs_alike(shared):
    _, first = save_at(shared.target, PLAIN, 2, 3, 1, fresh("twin"))
    _, second = save_at(shared.target, PLAIN, 2, 5, 1, fresh("twin"))
    with pytest.raises(InvalidArgumentError):
        service.merge_positions([first[0], second[1]])


def test_a_single_ranks_save_or_another_seed_cannot_be_restored(shared):
    _, states = save_at(shared.target, PLAIN, 2, 3, 1, fresh("single"))
    merged = service.merge_positions(states)
    ds = rank_dataset(shared.target, PLAIN, 2, 0, fresh("single-r"), 1)
    with iter(ds) as iterator, pytest.raises(InvalidArgumentError, match="merge"):
        iterator.restore(states[0])
    ds = rank_dataset(shared.target, PLAIN, 2, 0, fresh("single-s"), 2)
    with iter(ds) as iterator, pytest.raises(InvalidArgumentError, match="seed"):
        iterator.restore(merged)


# ------------------------------------------------------------------ worker loss


@pytest.mark.parametrize(
    "ds",
    [zd.Dataset.range(3_000).map(lambda x: x * 3).batch(2), zd.Dataset.range(6_000)],
    ids=["batched", "blocks"],
)
def test_a_worker_stopped_mid_read_changes_no_stream(cluster, small_blocks, ds):
    c = cluster(num_workers=2, worker_timeout_ms=300)  # the dispatcher's
    R = 2
    name = fresh("loss")

    def body(r: int, opened: Opened, pause: Callable[[], None]) -> list[Any]:
        with opened(rank_dataset(c.target, ds, R, r, name, 13)) as iterator:
            got = [key(next(iterator)) for _ in range(100)]
            pause()  # both ranks mid-read: the workers hold what they made
            return got + [key(x) for x in iterator]

    # The stopped worker's elements are lost: its splits must be made again.
    results = on_ranks_paused(R, body, lambda: c.stop_worker(1))
    assert results == dealt(reference(ds, 13), R)
    poll_for(lambda: len(c.status()["workers"]) == 1)  # the loss was noticed


# ------------------------------------------------------------------ liveness


def test_a_window_of_one_reads_to_the_end(cluster):
    """A rank whose element came before its round was known complete once
    asked nothing more (most seeds hung)."""
    c = cluster(num_workers=2)
    sparse = zd.Dataset.range(512).filter(lambda x: (x // 8) % 4 == 0 and x % 8 == 0)
    for seed in range(3):  # most of these seeds once hung
        streams = read(
            c.target, sparse, 4, seed=seed, deadline_s=10.0, max_outstanding_requests=1
        )
        assert streams == dealt(reference(sparse, seed), 4)


def test_large_elements_read_to_the_end(cluster, monkeypatch):
    """Ranks' requests for later elements once held every slot to a task while
    the element needed first sat in a full buffer (this hung every time)."""
    # A 64 MiB buffer holds two 30 MB batches: the same, without the memory.
    monkeypatch.setattr("zmqdata._worker.task.BUFFER_ITEMS", 2)
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(2_000).filter(lambda x: x % 3 != 0).batch(2)
    streams = read(c.target, ds, 3, seed=1, deadline_s=10.0)
    assert streams == dealt(reference(ds, 1), 3)
