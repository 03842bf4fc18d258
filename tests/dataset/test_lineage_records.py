"""``service.lineage`` without a cluster: the records of a multi-rank read's positions.

The reference is the dealt order computed as the dispatcher and workers make
it (``tests/service/test_multirank.py``'s ``reference``: each split run alone,
splits in the seeded order), whose elements' values say which records made
them. What a real read delivers is compared in
``tests/service/test_lineage_service.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.service.test_multirank import dealt, reference
from tests.test_readme import ROOT, run_snippet, snippets
from zmqdata import service
from zmqdata._dataset import plans
from zmqdata._dataset.lineage_records import DealtEpoch
from zmqdata._dataset.ops import tfrecord
from zmqdata.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(60)


def value(key: tuple[Any, ...]) -> np.ndarray:
    """An element of ``reference`` (dtype, shape, bytes) as its array."""
    dtype, shape, data = key
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def indices(row: dict[str, Any]) -> list[int]:
    return [record["index"] for record in row["sources"]]


def test_a_step_of_ten_million_elements_runs_one_split_and_no_other():
    calls = [0]

    def times_three(x: Any) -> Any:
        calls[0] += 1
        return x * 3

    ds = zd.Dataset.range(10_000_000).map(times_three)
    R, step = 8, 41_230
    began = time.perf_counter()
    rows = service.lineage(ds, 1234, R, step * R, (step + 1) * R)
    took = time.perf_counter() - began
    assert [row["step"] for row in rows] == [step] * R
    assert [row["consumer_index"] for row in rows] == list(range(R))
    assert 0 < calls[0] <= plans.DEALT_SPLIT_SIZE[1]  # one split's, at most
    assert took < 2.0  # about 3 ms here: the counts before it fold
    tokens = [index for row in rows for index in indices(row)]
    assert tokens == list(range(tokens[0], tokens[0] + R))  # one split, in order


@pytest.mark.parametrize(
    ("ds", "scale"),
    [
        (zd.Dataset.range(1_000).map(lambda x: x * 2).batch(4), 2),
        (
            zd.Dataset.range(700).flat_map(
                lambda x: zd.Dataset.from_tensor_slices(np.stack([x, x]))
            ),
            1,
        ),
    ],
    ids=["map-batch", "flat_map"],
)
def test_each_position_names_the_records_its_element_holds(ds, scale):
    """An element's values are its records' indices (times ``scale``)."""
    R, seed = 3, 9
    streams = dealt(reference(ds, seed), R)
    rows = service.lineage(ds, seed, R, 0, R * len(streams[0]))
    assert len(rows) == R * len(streams[0]) > 0
    for row in rows:
        element = value(streams[row["consumer_index"]][row["step"]])
        assert indices(row) == list(dict.fromkeys(element.ravel() // scale)), row


def test_a_filter_names_its_element_and_the_records_it_dropped_before_it():
    ds = zd.Dataset.range(1_000).filter(lambda x: x % 3 == 0)
    rows = service.lineage(ds, None, 1, 0, 4)
    assert [indices(row) for row in rows] == [[0], [1, 2, 3], [4, 5, 6], [7, 8, 9]]
    epoch = DealtEpoch(ds._node, None, 0)
    assert epoch.locate(4) == (0, 4)
    assert epoch.runs == 1  # its count does not fold: counted by running it


def test_an_unbatched_element_names_the_batch_it_came_from():
    ds = zd.Dataset.range(40).batch(4).unbatch()
    rows = service.lineage(ds, None, 1, 4, 6)
    assert [indices(row) for row in rows] == [[4, 5, 6, 7], [4, 5, 6, 7]]


def test_a_packed_row_names_every_sequence_in_it():
    ds = zd.Dataset.range(300).map(lambda i: np.full(i % 5 + 1, i)).pack(8, 3)
    R, seed = 2, 3
    streams = dealt(reference(ds, seed), R)
    rows = service.lineage(ds, seed, R, 0, 40)
    for row in rows:
        packed = streams[row["consumer_index"]][row["step"]]
        tokens, segments = (value(dict(packed)[k]) for k in ("tokens", "segment_ids"))
        assert indices(row) == sorted(set(tokens[segments > 0].tolist()))


def test_tfrecord_records_name_their_file_and_record(tmp_path: Path):
    paths = []
    for number, count in enumerate([40, 25, 61]):
        paths.append(str(tmp_path / f"{number}.tfrecord"))
        tfrecord.write(paths[-1], (f"{number}:{i}".encode() for i in range(count)))
    ds = zd.Dataset.from_tfrecord(paths)
    R, seed = 2, 5
    streams = dealt(reference(ds, seed), R)
    rows = service.lineage(ds, seed, R, 0, R * len(streams[0]))
    for row in rows:
        record = value(streams[row["consumer_index"]][row["step"]]).item()
        [source] = row["sources"]
        assert f"{paths.index(source['path'])}:{source['record']}".encode() == record


def test_list_files_names_the_path(tmp_path: Path):
    for name in "abcd":
        (tmp_path / name).write_text(name)
    ds = zd.Dataset.list_files(str(tmp_path / "*"), shuffle=False)
    rows = service.lineage(ds, 2, 2, 0, 4)
    paths = [row["sources"][0]["path"] for row in rows]
    expected = [value(k).item() for k in reference(ds, 2)]
    assert paths == expected


def test_a_mixture_replays_every_ranks_draws_also_once_an_input_runs_out():
    """Each input read by its own multi-rank job, mixed in each rank's trainer."""
    a, b = zd.Dataset.range(30), zd.Dataset.range(1_000, 1_200)
    R, seed = 2, 6
    mixture = zd.Dataset.sample_from_datasets([a, b], [0.6, 0.4], seed=11)
    ranks = []
    for r in range(R):
        inputs = [
            zd.Dataset.from_tensor_slices(
                np.array([value(k) for k in dealt(reference(ds, seed), R)[r]])
            )
            for ds in (a, b)
        ]
        mixed = zd.Dataset.sample_from_datasets(inputs, [0.6, 0.4], seed=11)
        ranks.append([int(x) for x in mixed])
    assert len(ranks[0]) == 15 + 100  # a ran out long before b
    rows = service.lineage(mixture, seed, R, 0, R * len(ranks[0]))
    for row in rows:
        [record] = row["sources"]
        got = ranks[row["consumer_index"]][row["step"]]
        assert (record["source"], record["index"]) == (int(got >= 1_000), got % 1_000)


def test_choose_from_datasets_names_the_source_chosen():
    a, b = zd.Dataset.range(8), zd.Dataset.range(100, 108)
    choice = zd.Dataset.from_tensor_slices(np.array([1, 1, 0, 1, 0, 0, 1, 0]))
    rows = service.lineage(zd.Dataset.choose_from_datasets([a, b], choice), 0, 2, 0, 6)
    assert [row["sources"][0]["source"] for row in rows] == [1, 1, 1, 1, 0, 0]


def test_what_no_multi_rank_read_can_be_is_refused():
    with pytest.raises(InvalidArgumentError, match="needs a seed"):
        service.lineage(
            zd.Dataset.sample_from_datasets([zd.Dataset.range(3)] * 2), 0, 1, 0, 1
        )
    with pytest.raises(InvalidArgumentError, match="shuffle"):
        service.lineage(zd.Dataset.range(9).shuffle(4), 0, 1, 0, 1)
    with pytest.raises(InvalidArgumentError, match="repeat"):
        service.lineage(zd.Dataset.range(9).repeat(2), 0, 1, 0, 1)
    with pytest.raises(ValueError, match="num_consumers"):
        service.lineage(zd.Dataset.range(9), 0, 0, 0, 1)
    mixture = zd.Dataset.sample_from_datasets([zd.Dataset.range(3)] * 2, seed=1)
    with pytest.raises(ValueError, match="past the mixture's end"):
        service.lineage(mixture, 0, 1, 0, 7)


def lineage_examples() -> list[str]:
    """The python blocks of docs/accountable.md's lineage section."""
    text = (ROOT / "docs" / "accountable.md").read_text()
    section = text[text.index("## Lineage: which records made a step") :]
    return snippets(section.split("\n## ")[0])


@pytest.mark.parametrize("index", range(len(lineage_examples())))
def test_the_docs_examples_run(index: int, tmp_path: Path) -> None:
    done = run_snippet(lineage_examples()[index], tmp_path)
    assert done.returncode == 0, done.stderr
