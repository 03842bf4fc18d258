"""Marks: a pipeline read again after a loss makes no output delivered before.

Marks serve the exactly-once jobs of an older dispatcher's journal (keys of
source elements); this release's jobs key split outputs (``test_split_runs.py``).

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
EXPANDING = {"interleave", "uinterleave", "unbatch"}
INTERLEAVES = {"interleave", "uinterleave"}
REORDERING = {"shuffle", "umap", "uinterleave"}


def guarantee(names: list[str]) -> str:
    """What a read taken over promises: ``"exact"``, ``"no loss"``, or ``""``.

    * No loss (maybe made twice): with an op that reorders (``REORDERING``)
      and an expanding op, marks (how far each input's outputs were
      delivered) wait for the outputs read before theirs, or name inputs
      grouped otherwise on the re-read; what a consumer received and no mark
      covers is made again.
    * Nothing to compare: a re-read skips the outputs delivered, so a
      ``batch`` above an expanding op groups what is left otherwise, and a
      ``filter`` of those batches keeps others; an interleave above another
      expanding op may deliver one input's outputs out of the order marks
      assume. Marks serve only jobs of an older dispatcher's journal; this
      release's exactly-once jobs run splits (``test_split_runs.py``, where
      that case is exact).
    """
    expanding = [i for i, name in enumerate(names) if name in EXPANDING]
    if LOSSY & set(names):
        return ""
    if not expanding:
        return "exact"
    above = names[expanding[0] :]
    if "batch" in above and "filter" in above[above.index("batch") :]:
        return ""
    if any(names[i] in INTERLEAVES for i in expanding[1:]):
        return ""
    return "no loss" if REORDERING & set(names) else "exact"


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


def take_over(
    build: Any, cuts: list[int], fraction: float
) -> tuple[Counter[int], Counter[int], Counter[int]]:
    """Reads ``build(range(N))``, a consumer receiving ``fraction`` of it, then
    reads again what it did not claim, with its marks: the values received,
    those not received, and those the second read made."""
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
        [lo % 1000, hi % 1000, lo - lo % 1000] for lo, hi in handed.ranges()
    ]
    marks = Marks()
    marks.resume.update(owed)
    again = read(build(source), source, again_splits, marks)

    def counted(elements: list[Any]) -> Counter[int]:
        return Counter(v for element, _, _ in elements for v in values(element))

    return counted(out[:count]), counted(out[count:]), counted(again)


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
    promised = guarantee(names)
    if not promised:
        return
    got, rest, made = take_over(build, cuts, fraction)
    if promised == "exact":
        assert made == rest, (names, made - rest, rest - made)
    else:  # whatever is made twice was received
        assert not rest - made, (names, rest - made)
        assert not (made - rest) - got, (names, made - rest)


def test_batches_of_expanded_outputs_unbatched_are_acknowledged_one_by_one():
    def build(ds: zd.Dataset) -> zd.Dataset:
        expanded = ds.interleave(lambda x: zd.Dataset.from_tensors(x), cycle_length=1)
        return expanded.batch(2).unbatch()

    _, rest, made = take_over(build, [0], 0.5)
    assert made == rest  # element 14 (row 0 of [14, 15]) is not made again
