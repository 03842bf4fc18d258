"""``static_shard``: the pipeline rewrite of FILE, DATA, FILE_OR_DATA and HINT."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import zmqdata as zd
from zmqdata._dataset import graph
from zmqdata._dataset.constants import SHARD_HINT
from zmqdata._dataset.node import make_iterator
from zmqdata._wire.modes import STATIC
from zmqdata._worker.sharding import (
    DATA,
    FILE,
    FILE_OR_DATA,
    HINT,
    static_shard,
)
from zmqdata.errors import InvalidArgumentError

WORKERS = 3


def run(ds: zd.Dataset, mode: int, index: int, workers: int = WORKERS) -> list[Any]:
    """What worker ``index`` produces, from the pipeline as it travels (bytes)."""
    root = graph.deserialize(graph.serialize(ds._node))
    root, ctx = static_shard(root, mode, workers, index)
    return [_plain(x) for x in make_iterator(root, ctx)]


def _plain(x: Any) -> Any:
    return x if isinstance(x, str) else int(x)


def every_worker(ds: zd.Dataset, mode: int, workers: int = WORKERS) -> list[list[Any]]:
    return [run(ds, mode, index, workers) for index in range(workers)]


@pytest.fixture
def files(tmp_path) -> list[str]:
    paths = []
    for k in range(7):
        path = tmp_path / f"part-{k}.txt"
        path.write_text(f"{k * 10}\n{k * 10 + 1}\n")
        paths.append(str(path))
    return paths


def read_lines(path: Any) -> zd.Dataset:
    with open(str(path)) as f:
        values = [int(line) for line in f]
    return zd.Dataset.from_tensor_slices(values)


def test_static_policies():
    assert [mode in STATIC for mode in range(6)] == [False, False] + [True] * 4


def test_data_shards_the_output_round_robin():
    ds = zd.Dataset.range(10).map(lambda x: x * 2)
    outputs = every_worker(ds, DATA)
    assert outputs == [[0, 6, 12, 18], [2, 8, 14], [4, 10, 16]]


def test_data_covers_a_seeded_shuffle_exactly_once():
    ds = zd.Dataset.range(50).shuffle(50, seed=7).batch(4)
    outputs = [run(ds.unbatch(), DATA, index) for index in range(WORKERS)]
    assert Counter(x for out in outputs for x in out) == Counter(range(50))


def test_hint_fills_in_every_shard_hint():
    ds = zd.Dataset.range(12).shard(SHARD_HINT, SHARD_HINT).map(lambda x: x + 100)
    assert every_worker(ds, HINT) == [[100, 103, 106, 109], [101, 104, 107, 110],
                                      [102, 105, 108, 111]]  # fmt: skip


def test_hint_without_a_hint_runs_the_whole_pipeline():
    assert run(zd.Dataset.range(4), HINT, 1) == [0, 1, 2, 3]


def test_file_reads_every_num_workers_th_file(files):
    ds = zd.Dataset.list_files(files, shuffle=False)
    assert every_worker(ds, FILE) == [files[0::3], files[1::3], files[2::3]]


def test_file_through_interleave_covers_every_element_once(files):
    ds = zd.Dataset.list_files(files, shuffle=False).interleave(
        read_lines, cycle_length=2
    )
    outputs = every_worker(ds, FILE)
    assert sorted(x for out in outputs for x in out) == sorted(
        v for k in range(7) for v in (k * 10, k * 10 + 1)
    )
    assert sorted(outputs[1]) == [10, 11, 40, 41]


def test_file_repeats_the_workers_files_and_reshuffles_them(files):
    ds = zd.Dataset.list_files(files, shuffle=True, seed=3).repeat(4)
    mine = run(ds, FILE, 0)
    epochs = [mine[k : k + 3] for k in range(0, 12, 3)]
    assert all(sorted(epoch) == files[0::3] for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1  # reshuffled per repetition
    assert run(ds, FILE, 0) == mine  # seeded: the same on every run


def test_file_position_can_be_saved_and_restored(files):
    ds = zd.Dataset.list_files(files, shuffle=True, seed=1).repeat(2)
    root, ctx = static_shard(ds._node, FILE, WORKERS, 1)
    it = make_iterator(root, ctx)
    head = [next(it) for _ in range(3)]
    state = it.get_state()
    rest = list(it)
    it.set_state(state)
    assert list(it) == rest
    assert sorted(head[:2]) == files[1::3]
    assert len(rest) == 1


def test_file_with_fewer_files_than_workers_is_an_error(files):
    ds = zd.Dataset.list_files(files[:2], shuffle=False)
    with pytest.raises(InvalidArgumentError) as info:
        static_shard(ds._node, FILE, WORKERS, 0)
    assert "2 file(s), not enough for the required 3 shards/workers" in str(info.value)


@pytest.mark.parametrize(
    "ds",
    [
        zd.Dataset.range(10),
        zd.Dataset.zip((zd.Dataset.range(3), zd.Dataset.range(3))),
        zd.Dataset.from_tensors(1),
    ],
)
def test_file_needs_a_list_files_source(ds):
    with pytest.raises(InvalidArgumentError, match="FILE sharding needs a list_files"):
        static_shard(ds._node, FILE, WORKERS, 0)


def test_file_or_data_shards_files_when_it_can(files):
    ds = zd.Dataset.list_files(files, shuffle=False)
    root, ctx = static_shard(ds._node, FILE_OR_DATA, WORKERS, 2)
    assert root is ds._node
    assert ctx.split_source is ds._node
    assert every_worker(ds, FILE_OR_DATA) == every_worker(ds, FILE)


def test_file_or_data_shards_elements_otherwise(files):
    few = zd.Dataset.list_files(files[:2], shuffle=False)
    assert every_worker(few, FILE_OR_DATA) == [[files[0]], [files[1]], []]
    numbers = zd.Dataset.range(7)
    assert every_worker(numbers, FILE_OR_DATA) == every_worker(numbers, DATA)


@pytest.mark.parametrize(
    ("mode", "workers", "index"),
    [(DATA, 3, 3), (DATA, 0, 0), (HINT, 2, -1), (FILE, None, 0), (1, 2, 0)],
)
def test_bad_task_parameters_are_errors(mode, workers, index):
    with pytest.raises(InvalidArgumentError):
        static_shard(zd.Dataset.range(3)._node, mode, workers, index)
