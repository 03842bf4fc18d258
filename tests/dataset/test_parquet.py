"""``from_parquet``: rows and row batches of Parquet files, split, streamed, served."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip
from tests.servers import HttpServer, http_server
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata._dataset import structure
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata._dataset.ops import OPS
from zmqdata._dataset.ops.parquet import Parquet, build
from zmqdata.errors import InvalidArgumentError, NotFoundError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

if "parquet" not in OPS:  # until Dataset.from_parquet registers it
    OPS.register("parquet", Parquet)

GROUP = 4
"""Rows per row group of the files written here."""
SIZES = (10, 0, 7, 5)
"""Rows of the files ``files`` writes, in name order (one empty)."""


def table(first: int, rows: int) -> Any:
    """Rows ``first`` to ``first + rows``: one column of each kind read."""
    ids = list(range(first, first + rows))
    return pa.table(
        {
            "i": pa.array(ids, pa.int64()),
            "f": pa.array([i / 2 for i in ids], pa.float32()),
            "s": pa.array([f"row{i}" for i in ids], pa.string()),
            "b": pa.array([bytes([i % 256]) * (i % 3) for i in ids], pa.binary()),
            "l": pa.array([list(range(i % 4)) for i in ids], pa.list_(pa.int32())),
            "v": pa.array([[i, -i] for i in ids], pa.list_(pa.float64(), 2)),
            "t": pa.array(ids, pa.timestamp("ms")),
            "c": pa.array([f"c{i % 3}" for i in ids], pa.string()).dictionary_encode(),
        }
    )


def row(i: int) -> dict[str, Any]:
    """Row ``i`` as it reads."""
    return {
        "i": np.int64(i),
        "f": np.float32(i / 2),
        "s": f"row{i}",
        "b": bytes([i % 256]) * (i % 3),
        "l": np.arange(i % 4, dtype=np.int32),
        "v": np.array([i, -i], dtype=np.float64),
        "t": np.datetime64(i, "ms"),
        "c": f"c{i % 3}",
    }


def write(path: Any, data: Any, group: int = GROUP, **options: Any) -> None:
    pq.write_table(data, str(path), row_group_size=group, **options)


@pytest.fixture
def files(tmp_path) -> list[str]:
    """Files of ``SIZES`` rows, numbered on across them, in groups of ``GROUP``."""
    paths, first = [], 0
    for k, rows in enumerate(SIZES):
        path = tmp_path / f"part-{k}.parquet"
        write(path, table(first, rows))
        paths.append(str(path))
        first += rows
    return paths


TOTAL = sum(SIZES)


def ids(elements: list[Any]) -> list[int]:
    return [int(e["i"]) for e in elements]


def run_over(ds: zd.Dataset, splits: list[list[int]]) -> list[Any]:
    """The elements of ``ds`` when its source reads only ``splits``."""
    ctx = IterContext(split_source=ds._node, split_provider=ListSplitProvider(splits))
    with make_iterator(ds._node, ctx) as it:
        return list(it)


def fits(spec: Any, element: Any) -> bool:
    """Whether ``element`` has ``spec``: structure, ranks, known sizes, dtype kinds."""
    actual = structure.spec_of(element)
    if structure.flatten(spec) == [] or isinstance(spec, dict) != isinstance(
        actual, dict
    ):
        return False
    if list(spec) != list(actual):
        return False
    for want, got in zip(
        structure.flatten(spec), structure.flatten(actual), strict=True
    ):
        if len(want.shape) != len(got.shape) or any(
            w is not None and w != g for w, g in zip(want.shape, got.shape, strict=True)
        ):
            return False
        if isinstance(want.dtype, type):
            if got.dtype is not want.dtype:
                return False
        elif want.dtype.kind in "US":  # text arrays: any width
            if got.dtype.kind != want.dtype.kind:
                return False
        elif got.dtype != want.dtype:
            return False
    return True


# ---------------------------------------------------------------- rows and batches


def test_rows_across_files_and_row_groups(files):
    ds = zd.Dataset(build(files))
    assert ds._node.args["counts"] == list(SIZES)
    assert ds.cardinality() == TOTAL
    elements = list(ds)
    assert_bit_equal(elements, [row(i) for i in range(TOTAL)])
    spec = ds.element_spec
    assert spec == {
        "i": structure.TensorSpec((), np.dtype(np.int64)),
        "f": structure.TensorSpec((), np.dtype(np.float32)),
        "s": structure.TensorSpec((), str),
        "b": structure.TensorSpec((), bytes),
        "l": structure.TensorSpec((None,), np.dtype(np.int32)),
        "v": structure.TensorSpec((2,), np.dtype(np.float64)),
        "t": structure.TensorSpec((), np.dtype("M8[ms]")),
        "c": structure.TensorSpec((), str),
    }
    assert all(fits(spec, e) for e in elements)


def test_from_parquet_is_this_source(files):
    ds = zd.Dataset.from_parquet(files, columns=["i"], batch_rows=2)
    assert ds._node.op == "parquet"
    assert [b["i"].tolist() for b in ds][:3] == [[0, 1], [2, 3], [4, 5]]


def test_a_glob_and_selected_columns_in_their_order(files, tmp_path):
    ds = zd.Dataset(build(str(tmp_path / "part-*.parquet"), columns=["s", "i"]))
    elements = list(ds)
    assert [list(e) for e in elements[:1]] == [["s", "i"]]
    assert elements == [{"s": f"row{i}", "i": np.int64(i)} for i in range(TOTAL)]
    assert list(ds.element_spec) == ["s", "i"]


def test_batches_of_rows_stay_within_row_groups(files):
    columns = ["i", "f", "s", "b", "v", "t", "c"]
    ds = zd.Dataset(build(files, columns=columns, batch_rows=3))
    # groups of 4 rows (the last of a file fewer): batches of 3 and 1 per group
    assert ds._node.args["counts"] == [5, 0, 3, 3]
    batches = list(ds)
    assert [len(b["i"]) for b in batches] == [3, 1, 3, 1, 2, 3, 1, 3, 3, 1, 1]
    assert [i for b in batches for i in b["i"].tolist()] == list(range(TOTAL))
    start = 0
    for batch in batches:  # what batch() makes of the same rows
        rows = [
            {c: row(i)[c] for c in columns}
            for i in range(start, start + len(batch["i"]))
        ]
        assert_bit_equal(batch, structure.stack(rows))
        assert all(leaf.flags.writeable for leaf in structure.flatten(batch))
        start += len(batch["i"])
    assert all(fits(ds.element_spec, b) for b in batches)
    assert ds.element_spec["v"] == structure.TensorSpec((None, 2), np.dtype(np.float64))
    assert ds.element_spec["s"] == structure.TensorSpec((None,), np.dtype(np.str_))


def test_batch_sizes_follow_the_row_groups(tmp_path):
    path = tmp_path / "a.parquet"
    write(path, table(0, 23), group=10)  # groups of 10, 10, 3
    ds = zd.Dataset(build(str(path), columns=["i"], batch_rows=4))
    assert [len(b["i"]) for b in ds] == [4, 4, 2, 4, 4, 2, 3]
    whole = zd.Dataset(build(str(path), columns=["i"], batch_rows=100))
    assert [len(b["i"]) for b in whole] == [10, 10, 3]


def test_list_columns_batch_when_their_lengths_agree(tmp_path):
    path = tmp_path / "a.parquet"
    data = pa.table({"l": pa.array([[1, 2], [3, 4], [5], [6]], pa.list_(pa.int16()))})
    write(path, data)
    ds = zd.Dataset(build(str(path), batch_rows=2))
    assert ds.element_spec == {
        "l": structure.TensorSpec((None, None), np.dtype(np.int16))
    }
    assert_bit_equal(
        list(ds), [{"l": np.array(r, np.int16)} for r in [[[1, 2], [3, 4]], [[5], [6]]]]
    )


def test_ragged_list_batches_hold_their_rows_arrays(files):
    ds = zd.Dataset(build(files, columns=["i", "l"], batch_rows=3))
    batches = list(ds)
    # lists of i % 4 items; batches of 3 and 1 rows per group of 4
    assert [b["l"].dtype.kind for b in batches][:3] == ["O", "i", "O"]
    assert [len(b["l"]) for b in batches] == [len(b["i"]) for b in batches]
    lists = [b["l"][k] for b in batches for k in range(len(b["l"]))]
    assert_bit_equal(lists, [row(i)["l"] for i in range(TOTAL)])
    assert all(a.flags.writeable for a in lists)
    first = batches[0]["l"]
    assert first[1].base is not None
    assert first[1].base is first[2].base  # views of one buffer
    rows = zd.Dataset(build(files, columns=["i", "l"], batch_rows=3)).unbatch()
    assert_bit_equal(list(rows), list(zd.Dataset(build(files, columns=["i", "l"]))))


@pytest.mark.parametrize("batch_rows", [None, 2])
@pytest.mark.parametrize("lists", [[[1], [2, 3], None], [[1], [2, 3], [4, None]]])
def test_a_null_list_or_item_names_its_row(tmp_path, lists, batch_rows):
    path = tmp_path / "a.parquet"
    write(path, pa.table({"l": pa.array(lists, pa.list_(pa.int32()))}))
    ds = zd.Dataset(build(str(path), batch_rows=batch_rows))
    element = 2 if batch_rows is None else 1
    with pytest.raises(
        InvalidArgumentError,
        match=rf"a\.parquet: element {element} \(row 2\).*'l' is null",
    ):
        list(ds)


def test_nested_structs_and_nulls(tmp_path):
    path = tmp_path / "a.parquet"
    data = pa.table(
        {
            "p": pa.array([{"x": 1, "y": "a"}, {"x": 2, "y": "b"}]),
            "f": pa.array([1.5, None]),
            "d": pa.array([None, 3], pa.timestamp("s")),
        }
    )
    write(path, data)
    ds = zd.Dataset(build(str(path)))
    elements = list(ds)
    assert_bit_equal(
        elements[0],
        {
            "p": {"x": np.int64(1), "y": "a"},
            "f": np.float64(1.5),
            "d": np.datetime64("NaT", "ms"),  # Parquet keeps ms at the least
        },
    )
    assert np.isnan(elements[1]["f"])
    assert elements[1]["d"] == np.datetime64(3000, "ms")
    assert all(fits(ds.element_spec, e) for e in elements)


def test_a_null_int_names_its_row(tmp_path):
    path = tmp_path / "a.parquet"
    write(path, pa.table({"x": pa.array([1, 2, 3, None, 5], pa.int8())}), group=2)
    ds = zd.Dataset(build(str(path)))
    with pytest.raises(
        InvalidArgumentError, match=r"a\.parquet: element 3 \(row 3\).*'x' is null"
    ):
        list(ds)
    with pytest.raises(InvalidArgumentError, match=r"element 1 \(row 3\).*'x' is null"):
        list(zd.Dataset(build(str(path), batch_rows=2)))


def test_unreadable_types_are_refused_unless_left_out(tmp_path):
    import decimal

    path = tmp_path / "a.parquet"
    data = pa.table({"d": pa.array([decimal.Decimal("1.5")]), "x": [1]})
    write(path, data)
    with pytest.raises(InvalidArgumentError, match=r"a\.parquet: column 'd'.*decimal"):
        build(str(path))
    assert list(zd.Dataset(build(str(path), columns=["x"]))) == [{"x": np.int64(1)}]


def test_files_with_other_schemas_have_no_spec(tmp_path):
    write(tmp_path / "a.parquet", pa.table({"x": pa.array([1], pa.int32())}))
    write(tmp_path / "b.parquet", pa.table({"x": pa.array([2], pa.int64())}))
    ds = zd.Dataset(build(str(tmp_path / "*.parquet")))
    assert ds.element_spec is None
    assert list(ds) == [{"x": np.int32(1)}, {"x": np.int64(2)}]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"columns": "i"}, TypeError, "columns must be a list of str or None, got 'i'"),
        ({"columns": [1]}, ValueError, r"columns .*non-empty str, got \[1\]"),
        ({"columns": []}, ValueError, r"got \[\]"),
        ({"columns": ["i", "i"]}, ValueError, "duplicates"),
        ({"batch_rows": 0}, ValueError, "batch_rows must be >= 1, got 0"),
        ({"batch_rows": "2"}, TypeError, "batch_rows must be an int, got '2'"),
        ({"batch_rows": True}, TypeError, "batch_rows must be an int, got True"),
    ],
)
def test_bad_arguments_are_named(files, kwargs, error, match):
    with pytest.raises(error, match=match):
        build(files, **kwargs)


def test_bad_paths_are_named(tmp_path):
    with pytest.raises(TypeError, match="from_parquet paths"):
        build([])
    with pytest.raises(
        InvalidArgumentError, match=r"no file matches .*nothing\.parquet"
    ):
        build(str(tmp_path / "nothing.parquet"))


# ---------------------------------------------------------------- splits and state


def test_splits_tile_the_files(files):
    ds = zd.Dataset(build(files))
    op, node = OPS["parquet"], ds._node
    for size in (1, 3, 4, 100):
        splits = op.splits(node, size)
        assert ids(run_over(ds, splits)) == list(range(TOTAL))
        assert all(hi - lo <= size for lo, hi in splits)


def test_any_ranges_read_exactly_their_rows(files):
    ds = zd.Dataset(build(files))
    rng = np.random.default_rng(5)
    for _ in range(40):
        ranges = []
        for _ in range(int(rng.integers(1, 4))):
            lo = int(rng.integers(0, TOTAL))
            ranges.append([lo, int(rng.integers(lo, TOTAL + 1))])
        expected = [i for lo, hi in ranges for i in range(lo, hi)]
        elements = run_over(ds, ranges)
        assert ids(elements) == expected, ranges
        assert_bit_equal(elements, [row(i) for i in expected])
    # ranges that follow on keep the file open; ranges across files open the next
    assert ids(run_over(ds, [[2, 5], [5, 12], [12, 22], [0, 1]])) == [
        *range(2, 22),
        0,
    ]


def test_ranges_of_batches(files):
    ds = zd.Dataset(build(files, columns=["i"], batch_rows=3))
    # elements: [0-2] [3] [4-6] [7] [8-9] | [10-12] [13] [14-16] | [17-19] [20] [21]
    got = [b["i"].tolist() for b in run_over(ds, [[3, 7], [9, 11]])]
    assert got == [[7], [8, 9], [10, 11, 12], [13], [20], [21]]


def test_state_resumes_mid_file(files):
    ds = zd.Dataset(build(files))
    elements = assert_state_roundtrip(ds)
    assert ids(elements) == list(range(TOTAL))
    splits = [[3, 9], [15, 21], [0, 2]]

    def fresh() -> Any:
        ctx = IterContext(
            split_source=ds._node, split_provider=ListSplitProvider(splits)
        )
        return make_iterator(ds._node, ctx)

    assert ids(assert_state_roundtrip(fresh)) == [*range(3, 9), *range(15, 21), 0, 1]
    batched = zd.Dataset(build(files, columns=["i", "s"], batch_rows=3))
    assert len(assert_state_roundtrip(batched)) == sum(batched._node.args["counts"])


def test_closing_an_iterator_closes_its_file(files, monkeypatch):
    from zmqdata._dataset import fs

    opened: list[Any] = []

    def open_binary(path: str) -> Any:
        opened.append(real(path))
        return opened[-1]

    real = fs.open_binary
    monkeypatch.setattr(fs, "open_binary", open_binary)
    ds = zd.Dataset(build(files))
    assert len(opened) == len(files)  # the footers, closed once read
    assert all(h.closed for h in opened)
    opened.clear()
    it = iter(ds)
    assert int(next(it)["i"]) == 0
    assert [h.closed for h in opened] == [False]
    it.close()
    assert [h.closed for h in opened] == [True]
    assert ids(ds) == list(range(TOTAL))  # one file at a time, each closed at its end
    assert all(h.closed for h in opened)
    assert len(opened) == 1 + len([n for n in SIZES if n])


# ---------------------------------------------------------------- URLs


@pytest.fixture
def memory() -> Iterator[str]:
    """A folder of fsspec's memory file system, removed at the end."""
    fsspec = pytest.importorskip("fsspec")
    folder = f"memory://parquet-{uuid.uuid4().hex}"
    yield folder
    fsspec.filesystem("memory").rm(folder, recursive=True)


def test_memory_urls(memory):
    fsspec = pytest.importorskip("fsspec")
    for k, (first, rows) in enumerate([(0, 6), (6, 5)]):
        with fsspec.open(f"{memory}/{k}.parquet", "wb") as out:
            pq.write_table(table(first, rows), out, row_group_size=GROUP)
    ds = zd.Dataset(build(f"{memory}/*.parquet"))
    files = ds._node.args["files"]
    assert [f.rsplit("/", 1)[1] for f in files] == ["0.parquet", "1.parquet"]
    assert all(f.startswith("memory://") for f in files)
    assert_bit_equal(list(ds), [row(i) for i in range(11)])
    assert ids(run_over(ds, [[4, 8]])) == [4, 5, 6, 7]


@pytest.fixture
def http_folder(tmp_path) -> Iterator[tuple[Any, str, HttpServer]]:
    """``(folder, url of the folder, server)`` served on loopback."""
    pytest.importorskip("aiohttp")
    folder = tmp_path / "served"
    folder.mkdir()
    with http_server(folder) as server:
        yield folder, server.url, server


def test_http_urls_stream(http_folder):
    folder, url, server = http_folder
    write(folder / "small.parquet", table(0, 9))
    ds = zd.Dataset(build(f"{url}/small.parquet"))
    assert_bit_equal(list(ds), [row(i) for i in range(9)])
    assert ids(run_over(ds, [[5, 7]])) == [5, 6]
    # a large file: counting reads its footer, the first row reads its first group
    blob = np.random.default_rng(0).bytes(1 << 20)
    big = pa.table({"i": range(64), "blob": [blob[i:] + blob[:i] for i in range(64)]})
    write(folder / "big.parquet", big, group=2, compression="none")
    size = os.path.getsize(folder / "big.parquet")
    server.sent = 0
    big_ds = zd.Dataset(build(f"{url}/big.parquet"))
    assert server.sent < size / 4, (server.sent, size)
    server.sent = 0
    with iter(big_ds) as it:
        assert int(next(it)["i"]) == 0
        assert server.sent < size / 4, (server.sent, size)
    assert ids(run_over(big_ds, [[60, 62]])) == [60, 61]


def test_http_errors_name_the_url(http_folder):
    folder, url, _ = http_folder
    write(folder / "a.parquet", table(0, 5))
    data = (folder / "a.parquet").read_bytes()
    (folder / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        InvalidArgumentError, match=rf"{url}/cut\.parquet: not a readable"
    ):
        build(f"{url}/cut.parquet")
    ds = zd.Dataset(build(f"{url}/a.parquet"))
    (folder / "a.parquet").unlink()
    with pytest.raises(NotFoundError, match=rf"{url}/a\.parquet"):
        list(ds)


# ---------------------------------------------------------------- errors


def test_a_file_gone_since_the_build(files):
    ds = zd.Dataset(build(files))
    os.remove(files[2])
    with pytest.raises(NotFoundError, match=rf"{files[2]}: no such file"):
        list(ds)


def test_a_truncated_file(files, tmp_path):
    with open(files[0], "rb") as source:
        data = source.read()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[:-20])
    with pytest.raises(
        InvalidArgumentError, match=rf"{cut}: not a readable Parquet file"
    ):
        build(str(cut))
    ds = zd.Dataset(build(files))
    with open(files[2], "r+b") as out:
        out.truncate(os.path.getsize(files[2]) // 2)
    with pytest.raises(
        InvalidArgumentError,
        match=rf"{files[2]}: element 0 \(row 0\): not a readable Parquet file",
    ):
        list(ds)
    assert ids(run_over(ds, [[0, 10]])) == list(range(10))


def corrupt_file(tmp_path):
    """12 rows in row groups of 4 whose third group's first column fails its checksum."""
    path = tmp_path / "a.parquet"
    write(path, table(0, 12), write_page_checksum=True, compression="none")
    column = pq.ParquetFile(str(path)).metadata.row_group(2).column(0)
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + column.total_compressed_size - 3] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def test_a_corrupt_page_names_its_element_and_row(tmp_path):
    path = corrupt_file(tmp_path)
    ds = zd.Dataset(build(str(path)))
    with pytest.raises(
        InvalidArgumentError,
        match=rf"{path}: element 8 \(row 8\): corrupt Parquet data",
    ):
        list(ds)
    assert ids(run_over(ds, [[0, 8]])) == list(range(8))


def test_a_missing_column(files):
    with pytest.raises(
        InvalidArgumentError, match=rf"{files[0]}: no column 'nope' in the Parquet file"
    ):
        build(files, columns=["i", "nope"])
    ds = zd.Dataset(build(files, columns=["s"]))
    write(files[3], pa.table({"i": [1, 2]}))
    with pytest.raises(
        InvalidArgumentError, match=rf"{files[3]}: element 3: no column 's'"
    ):
        run_over(ds, [[TOTAL - 2, TOTAL]])


# ---------------------------------------------------------------- through the service


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[Cluster]:
    running = Cluster(num_workers=2)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def many(tmp_path) -> list[str]:
    """Three files of 50 rows (groups of 8): rows 0 to 149."""
    paths = []
    for k in range(3):
        path = tmp_path / f"m{k}.parquet"
        write(path, table(50 * k, 50), group=8)
        paths.append(str(path))
    return paths


def test_distributed_epoch_reads_every_row_once(shared_cluster, many):
    ds = zd.Dataset(build(many)).apply(
        service.distribute("distributed_epoch", shared_cluster.target)
    )
    elements = sorted(ds, key=lambda e: int(e["i"]))
    assert_bit_equal(elements, [row(i) for i in range(150)])
    batched = zd.Dataset(build(many, columns=["i", "s"], batch_rows=5)).apply(
        service.distribute("distributed_epoch", shared_cluster.target)
    )
    batches = list(batched)
    assert sorted(i for b in batches for i in b["i"].tolist()) == list(range(150))
    assert all(b["s"].dtype.kind == "U" for b in batches)


def test_ragged_list_batches_travel(shared_cluster, many):
    ds = zd.Dataset(build(many, columns=["i", "l"], batch_rows=5))
    served = ds.apply(service.distribute("distributed_epoch", shared_cluster.target))
    batches = sorted(served, key=lambda b: int(b["i"][0]))
    assert_bit_equal(batches, list(ds))
    assert {b["l"].dtype.kind for b in batches} == {"O"}


def test_ranks_get_disjoint_equal_shares(shared_cluster, many):
    name = f"parquet-{uuid.uuid4().hex}"
    got: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            ds = zd.Dataset(build(many, columns=["i"])).apply(
                service.distribute(
                    "distributed_epoch",
                    shared_cluster.target,
                    job_name=name,
                    num_consumers=2,
                    consumer_index=r,
                    seed=11,
                )
            )
            got[r] = ids(list(ds))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads), "ranks did not finish"
    assert not errors, errors
    assert len(got[0]) == len(got[1]) >= 74
    assert not set(got[0]) & set(got[1])
    assert len(set(got[0]) | set(got[1])) >= 149


def opens(monkeypatch: Any, method: str) -> list[int]:
    """The record each later call of ``Parquet.<method>`` opens its file at."""
    opened: list[int] = []
    original = getattr(Parquet, method)

    def counted(self: Any, node: Any, file: str, first: int) -> Any:
        opened.append(first)
        return original(self, node, file, first)

    monkeypatch.setattr(Parquet, method, counted)
    return opened


def one_group(tmp_path: Any) -> str:
    """A file of 30 rows in one row group (one read of a few blocks)."""
    path = tmp_path / "one-group.parquet"
    write(path, table(0, 30), group=30)
    return str(path)


def test_rows_of_splits_taken_apart_read_on_in_the_open_file(tmp_path, monkeypatch):
    opened = opens(monkeypatch, "records")
    ds = zd.Dataset.from_parquet(one_group(tmp_path))
    assert ids(run_over(ds, [[0, 3], [6, 9], [12, 15], [2, 4]])) == [
        0, 1, 2, 6, 7, 8, 12, 13, 14, 2, 3
    ]  # fmt: skip
    assert opened == [0, 2]  # a split behind the reader opens the file anew
