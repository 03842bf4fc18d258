"""Lineage: which split-source elements each element of a pipeline stands for.

The source is ``range(n)``, so an element's values are the source indices it
holds; a split ``[lo, hi, base]`` gives index ``i`` the key ``base + i``. The
invariant: an element claims a key only once every element the key's source
element went into has been returned (or it was dropped), and no key twice.
"""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.checks import assert_state_roundtrip
from zmqdata._dataset.iterator import IterContext, ListSplitProvider, Split
from zmqdata._dataset.node import make_iterator
from zmqdata._wire.lineage import EMPTY, STRIDE, Lineage

pytestmark = pytest.mark.timeout(60)

SETTINGS = settings(max_examples=150, deadline=None, database=None)
SPLITS = [[0, 4, 100], [4, 9, 200], [9, 12, 300], [12, 20, 400]]
"""``range(20)`` in four splits, keys ``base + index``."""


def context(
    source: zd.Dataset, splits: list[Split], lineage: bool = True
) -> IterContext:
    return IterContext(
        split_source=source._node,
        split_provider=ListSplitProvider(splits),
        lineage=lineage,
    )


def drive(
    ds: zd.Dataset, source: zd.Dataset, splits: list[Split] = SPLITS
) -> list[tuple[Any, Lineage]]:
    """Every element of ``ds`` with the lineage read right after it."""
    with make_iterator(ds._node, context(source, splits)) as it:
        return [(element, it.lineage) for element in it]


def keys(lineage: Lineage) -> list[int]:
    return [k for i in range(0, len(lineage), 2) for k in range(*lineage[i : i + 2])]


def key_of(splits: list[Split]) -> dict[int, int]:
    """Source index -> key."""
    return {
        i: (split[2] if len(split) > 2 else 0) + i
        for split in splits
        for i in range(split[0], split[1])
    }


def values(element: Any) -> list[int]:
    """The source indices an element holds (its leaves, flattened)."""
    if isinstance(element, tuple | list):
        return [v for e in element for v in values(e)]
    return [int(v) for v in np.asarray(element).reshape(-1)]


def claimed(out: list[tuple[Any, Lineage]]) -> list[list[int]]:
    """The source indices each element claims."""
    index = {k: i for i, k in key_of(SPLITS).items()}
    return [sorted(index[k] for k in keys(lineage)) for _, lineage in out]


def check_invariant(out: list[tuple[Any, Lineage]], splits: list[Split]) -> set[int]:
    """Asserts the invariant; returns the keys claimed."""
    handed = key_of(splits)
    index_of = {k: i for i, k in handed.items()}
    last = {}  # source index -> position of the last element holding it
    for position, (element, _) in enumerate(out):
        for i in values(element):
            last[i] = position
    seen: set[int] = set()
    for position, (_, lineage) in enumerate(out):
        assert len(lineage) % 2 == 0
        for k in keys(lineage):
            assert k in index_of, f"element {position} claims {k}, never handed out"
            assert k not in seen, f"key {k} claimed twice"
            seen.add(k)
            assert last.get(index_of[k], -1) <= position, (
                f"element {position} claims index {index_of[k]}, "
                f"which element {last[index_of[k]]} still holds"
            )
    return seen


# ---------------------------------------------------------------- sources


def test_range_elements_stand_for_their_own_keys():
    source = zd.Dataset.range(20)
    out = drive(source, source, [[5, 7, 1000], [0, 2]])
    assert [(int(x), lin) for x, lin in out] == [
        (5, (1005, 1006)),
        (6, (1006, 1007)),
        (0, (0, 1)),  # no base: base 0
        (1, (1, 2)),
    ]


def test_blocks_stand_for_their_keys():
    source = zd.Dataset.range(20)
    with make_iterator(source._node, context(source, [[2, 9, 50], [12, 13, 7]])) as it:
        block = it.next_block(4)
        assert block.columns[0].tolist() == [2, 3, 4, 5]
        assert it.lineage == (52, 56)
        block = it.next_block(4)
        assert block.columns[0].tolist() == [6, 7, 8]
        assert it.lineage == (56, 59)
        block = it.next_block(4)
        assert block.columns[0].tolist() == [12]
        assert it.lineage == (19, 20)
        assert it.next_block(4).n == 0


def test_from_tensor_slices_elements_stand_for_their_keys():
    source = zd.Dataset.from_tensor_slices({"a": np.arange(10) * 2})
    out = drive(source, source, [[3, 5, 10]])
    assert [(int(x["a"]), lin) for x, lin in out] == [(6, (13, 14)), (8, (14, 15))]


def test_list_files_reads_index_splits(tmp_path):
    for name in ("c", "a", "b"):
        (tmp_path / name).write_text(name)
    source = zd.Dataset.list_files(str(tmp_path / "*"), shuffle=False)
    ds = source.map(lambda path: pathlib.Path(path).read_text())
    assert drive(ds, source, [[2, 3, 40], [0, 2, 10]]) == [
        ("c", (42, 43)),
        ("a", (10, 11)),
        ("b", (11, 12)),
    ]


def test_sources_off_the_split_path_claim_nothing():
    source = zd.Dataset.range(5)
    other = zd.Dataset.range(5)
    assert all(lin == EMPTY for _, lin in drive(other, source, [[0, 5, 9]]))
    ds = zd.Dataset.zip((source, other))
    assert [lin for _, lin in drive(ds, source, [[0, 2, 9]])] == [EMPTY, EMPTY]
    for ds in (
        zd.Dataset.from_tensors(1),
        zd.Dataset.from_generator(lambda: iter([1, 2])),
        source.concatenate(other),
    ):
        assert all(lin == EMPTY for _, lin in drive(ds, source, [[0, 2, 9]]))


def test_without_lineage_nothing_is_tracked():
    source = zd.Dataset.range(20)
    ds = source.map(lambda x: x).filter(lambda x: x % 2 == 0).batch(2).prefetch(2)
    with make_iterator(ds._node, context(source, SPLITS, lineage=False)) as it:
        for _ in it:
            assert it.lineage == EMPTY


# ---------------------------------------------------------------- one op at a time


def test_one_to_one_ops_pass_the_lineage_on():
    source = zd.Dataset.range(20)
    expected = [(i, (k, k + 1)) for i, k in key_of(SPLITS).items()]
    for ds in (
        source.map(lambda x: x + 0),
        source.map(lambda x: x, num_parallel_calls=3),
        source.prefetch(3),
        source.take(25),
        source.enumerate().map(lambda i, x: x),
        source.repeat(1),
    ):
        out = drive(ds, source)
        assert [(int(x), lin) for x, lin in out] == expected


def test_take_claims_only_what_it_returned():
    source = zd.Dataset.range(20)
    out = drive(source.take(5), source)
    assert claimed(out) == [[0], [1], [2], [3], [4]]


def test_unordered_parallel_map_keeps_each_lineage_with_its_element():
    source = zd.Dataset.range(20)
    ds = source.map(lambda x: x, num_parallel_calls=4, deterministic=False)
    out = drive(ds, source)
    assert sorted(values(x)[0] for x, _ in out) == list(range(20))
    assert all(claimed([pair]) == [values(pair[0])] for pair in out)


def test_filter_covers_the_elements_it_dropped():
    source = zd.Dataset.range(20)
    out = drive(source.filter(lambda x: x % 5 == 3), source)
    assert [int(x) for x, _ in out] == [3, 8, 13, 18]
    assert claimed(out) == [[0, 1, 2, 3], [4, 5, 6, 7, 8], [9, 10, 11, 12, 13],
                            [14, 15, 16, 17, 18]]  # fmt: skip
    assert out[1][1] == (204, 209)  # ranges across splits stay apart
    assert out[2][1] == (309, 312, 412, 414)


def test_skip_and_shard_cover_what_they_skipped():
    source = zd.Dataset.range(20)
    assert claimed(drive(source.skip(3).take(2), source)) == [[0, 1, 2, 3], [4]]
    out = drive(source.shard(3, 1), source)
    assert [int(x) for x, _ in out] == [1, 4, 7, 10, 13, 16, 19]
    assert claimed(out)[:3] == [[0, 1], [2, 3, 4], [5, 6, 7]]


def test_batch_is_the_union_of_its_elements():
    source = zd.Dataset.range(20)
    for ds in (source.batch(6), source.map(lambda x: x).batch(6)):  # columns, elements
        out = drive(ds, source)
        assert claimed(out) == [values(b) for b, _ in out]
        assert out[0][1] == (100, 104, 204, 206)


def test_a_dropped_remainder_is_claimed_by_nothing():
    source = zd.Dataset.range(20)
    for ds in (source.batch(6, True), source.map(lambda x: x).batch(6, True)):
        out = drive(ds, source)
        assert claimed(out) == [list(range(6)), list(range(6, 12)), list(range(12, 18))]


def test_batch_of_filtered_elements_covers_the_dropped_ones():
    source = zd.Dataset.range(20)
    out = drive(source.filter(lambda x: x % 2 == 1).batch(3), source)
    assert claimed(out) == [list(range(6)), list(range(6, 12)), list(range(12, 18)),
                            [18, 19]]  # fmt: skip


def test_unbatch_gives_the_batch_lineage_to_its_last_element():
    source = zd.Dataset.range(20)
    out = drive(source.batch(3).unbatch(), source, [[0, 5, 100]])
    assert [int(x) for x, _ in out] == [0, 1, 2, 3, 4]
    assert [lin for _, lin in out] == [EMPTY, EMPTY, (100, 103), EMPTY, (103, 105)]


def test_shuffle_claims_each_elements_own_keys_when_it_returns_it():
    source = zd.Dataset.range(20)
    out = drive(source.shuffle(7, seed=3), source)
    assert [int(x) for x, _ in out] != list(range(20))
    assert check_invariant(out, SPLITS) == set(key_of(SPLITS).values())
    for (x, _), indices in zip(out, claimed(out), strict=True):
        assert indices == values(x)  # no lag: a lost worker re-sends nothing it sent


def test_below_an_op_that_expands_shuffle_releases_lineages_in_read_order():
    source = zd.Dataset.range(20)
    out = drive(source.batch(2).unbatch().shuffle(7, seed=3), source)
    assert check_invariant(out, SPLITS) == set(key_of(SPLITS).values())
    returned = set()
    for (x, _), indices in zip(out, claimed(out), strict=True):
        returned.add(values(x)[0])
        low = min(set(range(21)) - returned)  # every element below it was returned
        assert indices == [i for i in indices if i < low]


@pytest.mark.parametrize(
    "reorder",
    [
        lambda ds: ds.shuffle(6, seed=1),
        lambda ds: ds.map(lambda x: x, num_parallel_calls=4, deterministic=False),
        lambda ds: ds.interleave(
            lambda x: zd.Dataset.range(int(x) % 3 + 1).map(lambda _: x), cycle_length=3
        ),
    ],
)
@pytest.mark.parametrize(
    "carry",
    [
        lambda ds: ds.batch(4).unbatch(),
        lambda ds: ds.flat_map(lambda x: zd.Dataset.from_tensors(x).repeat(2)),
    ],
)
def test_an_element_claiming_for_others_is_not_reordered_before_them(carry, reorder):
    """The last element of an unbatched batch claims the batch's keys: a shuffle
    (or any op out of order) must not return it before the batch's others."""
    source = zd.Dataset.range(20)
    for seed in range(5):
        ds = reorder(carry(source.shuffle(20, seed=seed)))
        out = drive(ds, source)
        assert check_invariant(out, SPLITS)


def test_prefetch_of_batches_and_filters():
    source = zd.Dataset.range(20)
    ds = source.filter(lambda x: x % 4 == 0).prefetch(2).batch(2).prefetch(1)
    assert claimed(drive(ds, source)) == [
        list(range(5)),
        list(range(5, 13)),
        list(range(13, 17)),  # 17 to 19, dropped at the end, are not claimed
    ]


@pytest.mark.parametrize(
    "flat",
    [
        lambda ds: ds.flat_map(lambda x: zd.Dataset.from_tensors(x).repeat(2)),
        lambda ds: ds.interleave(
            lambda x: zd.Dataset.from_tensors(x).repeat(2), cycle_length=2
        ),
        lambda ds: ds.interleave(
            lambda x: zd.Dataset.from_tensors(x).repeat(2),
            cycle_length=2,
            num_parallel_calls=2,
        ),
        lambda ds: ds.interleave(
            lambda x: zd.Dataset.from_tensors(x).repeat(2),
            cycle_length=3,
            num_parallel_calls=2,
            deterministic=False,
        ),
    ],
)
def test_interleave_claims_an_input_after_its_dataset_ended(flat):
    source = zd.Dataset.range(20)
    out = drive(flat(source), source)
    assert sorted(v for x, _ in out for v in values(x)) == sorted(list(range(20)) * 2)
    covered = check_invariant(out, SPLITS)
    assert len(covered) >= 18  # the last input(s) end with no element after them


def test_flat_map_claims_exactly_after_the_dataset_ends():
    source = zd.Dataset.range(20)
    ds = source.flat_map(lambda x: zd.Dataset.from_tensors(x).repeat(2))
    out = drive(ds, source, [[0, 3, 100]])
    assert [int(x) for x, _ in out] == [0, 0, 1, 1, 2, 2]
    assert [lin for _, lin in out] == [EMPTY, EMPTY, (100, 101), EMPTY, (101, 102),
                                       EMPTY]  # fmt: skip


def test_empty_datasets_of_interleave_pass_their_lineage_on():
    source = zd.Dataset.range(20)
    ds = source.flat_map(lambda x: zd.Dataset.range(int(x) % 2))  # odd ones yield 0
    out = drive(ds, source, [[0, 5, 100]])
    assert [int(x) for x, _ in out] == [0, 0]
    assert [lin for _, lin in out] == [(100, 101), (101, 103)]


class _Repetitions(ListSplitProvider):
    """The same splits every repetition, keys moved on by ``STRIDE`` each time."""

    def __init__(self, splits: list[Split]) -> None:
        super().__init__(splits)
        self._first, self._repetition = splits, 0

    def reset(self) -> None:
        self._repetition += 1
        self._splits = [
            [lo, hi, base + self._repetition * STRIDE] for lo, hi, base in self._first
        ]
        super().reset()


def test_repeat_claims_each_repetition_s_keys():
    source = zd.Dataset.range(20)
    ds = source.filter(lambda x: x % 2 == 1).repeat(2)
    ctx = IterContext(
        split_source=source._node,
        split_provider=_Repetitions([[0, 4, 100]]),
        lineage=True,
    )
    with make_iterator(ds._node, ctx) as it:
        out = [(int(x), it.lineage) for x in it]
    assert out == [
        (1, (100, 102)),
        (3, (102, 104)),
        (1, (STRIDE + 100, STRIDE + 102)),
        (3, (STRIDE + 102, STRIDE + 104)),
    ]


def test_checkpoints_still_round_trip_with_lineage():
    source = zd.Dataset.range(20)
    ds = source.filter(lambda x: x % 3 > 0).shuffle(4, seed=2).batch(3).unbatch()
    out = assert_state_roundtrip(
        lambda: make_iterator(ds._node, context(source, SPLITS))
    )
    assert sorted(int(x) for x in out) == [i for i in range(20) if i % 3 > 0]


# ---------------------------------------------------------------- any composition

_LOSSY = {"filter", "take", "skip", "shard", "drop", "interleave", "uinterleave"}


def _op(draw: Any, depth: int) -> tuple[str, Any, int]:
    """``(name, function of a dataset, nesting depth after it)``."""
    ops = ["map", "pmap", "umap", "filter", "batch", "drop", "shuffle", "prefetch",
           "take", "skip", "shard", "enumerate", "interleave"]  # fmt: skip
    if depth:  # no batches of batches: the remainders would not stack
        ops = [op for op in ops if op not in ("batch", "drop")] + ["unbatch"]
    name = draw(st.sampled_from(ops))
    n = draw(st.integers(1, 5))
    if name == "map":
        return name, lambda ds: ds.map(lambda x: x), depth
    if name == "pmap":
        return name, lambda ds: ds.map(lambda x: x, num_parallel_calls=n), depth
    if name == "umap":
        return (
            name,
            lambda ds: ds.map(lambda x: x, num_parallel_calls=n, deterministic=False),
            depth,
        )
    if name == "filter":
        return (
            name,
            lambda ds: ds.filter(lambda x: np.asarray(x).sum() % (n + 1) != 0),
            depth,
        )
    if name in ("batch", "drop"):
        return name, lambda ds: ds.batch(n, drop_remainder=name == "drop"), depth + 1
    if name == "unbatch":
        return name, lambda ds: ds.unbatch(), depth - 1
    if name == "shuffle":
        return name, lambda ds: ds.shuffle(n, seed=n), depth
    if name == "prefetch":
        return name, lambda ds: ds.prefetch(n), depth
    if name == "take":
        return name, lambda ds: ds.take(3 * n), depth
    if name == "skip":
        return name, lambda ds: ds.skip(n), depth
    if name == "shard":
        return name, lambda ds: ds.shard(2, n % 2), depth
    if name == "enumerate":
        return name, lambda ds: ds.enumerate().map(lambda i, x: x), depth
    parallel = draw(st.sampled_from([None, 2]))
    deterministic = draw(st.sampled_from([None, False]))
    if parallel and deterministic is False:
        name = "uinterleave"  # its outputs come in any order
    return (
        name,
        lambda ds: ds.interleave(
            lambda x: zd.Dataset.from_tensors(x).repeat(n % 3),
            cycle_length=n,
            num_parallel_calls=parallel,
            deterministic=deterministic,
        ),
        depth,
    )


@st.composite
def pipelines(draw: Any) -> tuple[list[str], Any]:
    depth, names, steps = 0, [], []
    for _ in range(draw(st.integers(1, 5))):
        name, step, depth = _op(draw, depth)
        names.append(name)
        steps.append(step)

    def build(ds: zd.Dataset) -> zd.Dataset:
        for step in steps:
            ds = step(ds)
        return ds

    return names, build


@SETTINGS
@given(
    pipeline=pipelines(),
    cuts=st.lists(st.integers(0, 30), min_size=1, max_size=5, unique=True),
    order=st.randoms(use_true_random=False),
)
def test_no_composition_claims_a_key_early_or_twice(pipeline, cuts, order):
    names, build = pipeline
    bounds = sorted({0, 30, *cuts})
    splits = [
        [lo, hi, 1000 * (k + 1)]
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    order.shuffle(splits)
    source = zd.Dataset.range(30)
    out = drive(build(source), source, splits)
    covered = check_invariant(out, splits)
    if not _LOSSY & set(names):
        assert covered == set(key_of(splits).values()), names
