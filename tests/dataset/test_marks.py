"""Marks: a pipeline read again after a loss makes no output delivered before.

Each composition of ops (``test_lineage.pipelines``) is read with marks; a
consumer "receives" a prefix of its elements: the keys they claim and the
latest mark of each root, as the dispatcher keeps them. The rest is read again
from the keys not claimed, with those marks (as a worker that takes over a lost
task does): it must make exactly the elements not received, none twice.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.test_lineage import SETTINGS, pipelines, values
from zmqdata._dataset.iterator import IterContext, ListSplitProvider, Split
from zmqdata._dataset.marks import Marks
from zmqdata._dataset.node import make_iterator
from zmqdata._wire.lineage import Lineage, Ranges
from zmqdata._wire.progress import Path, keep_latest

pytestmark = pytest.mark.timeout(60)

N = 30
LOSSY = {"take", "skip", "shard", "drop"}
"""What they keep depends on what was read before, not on the keys alone."""


def read(
    ds: zd.Dataset, source: zd.Dataset, splits: list[Split], marks: Marks
) -> list[tuple[Any, Lineage, list[tuple[tuple[int, ...], Path]]]]:
    """Every element with its keys and its marks, as a worker buffers them."""
    ctx = IterContext(
        split_source=source._node,
        split_provider=ListSplitProvider(splits),
        lineage=True,
        marks=marks,
    )
    with make_iterator(ds._node, ctx) as it:
        return [(element, *marks.split(it.lineage)) for element in it]


def received(out, count: int) -> tuple[Ranges, dict[tuple[int, ...], Path]]:
    """The keys and the latest marks of the first ``count`` elements."""
    keys, progress = Ranges(), {}
    for _, lineage, marks in out[:count]:
        keys.add_all(lineage)
        for root, path in marks:
            keep_latest(progress, root, path)
    owed = {root: path for root, path in progress.items() if root[0] not in keys}
    return keys, owed


@SETTINGS
@given(
    pipeline=pipelines(),
    cuts=st.lists(st.integers(0, N), min_size=1, max_size=4, unique=True),
    fraction=st.floats(0, 1),
)
def test_a_read_taken_over_makes_each_element_not_received_once(
    pipeline, cuts, fraction
):
    names, build = pipeline
    if LOSSY & set(names):
        return
    bounds = sorted({0, N, *cuts})
    splits = [
        [lo, hi, 1000 * (k + 1)]
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    source = zd.Dataset.range(N)
    out = read(build(source), source, splits, Marks())
    count = int(fraction * len(out))
    keys, owed = received(out, count)
    handed = Ranges()
    for lo, hi, base in splits:
        handed.add(base + lo, base + hi)
    handed.remove_all(keys)
    again_splits = [
        [lo % 1000, hi % 1000 + (hi % 1000 == 0) * 0, lo - lo % 1000]
        for lo, hi in handed.ranges()
    ]
    marks = Marks()
    marks.resume.update(owed)
    again = read(build(source), source, again_splits, marks)
    rest = Counter(v for element, _, _ in out[count:] for v in values(element))
    made = Counter(v for element, _, _ in again for v in values(element))
    assert made == rest, (names, count, made - rest, rest - made)
