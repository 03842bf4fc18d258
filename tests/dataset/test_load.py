"""``Dataset.load``: a finished save as a source, splittable per element."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip
from tests.servers import s3_server
from zmqdata._dataset import snapshot, specs, structure
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError

pytestmark = pytest.mark.timeout(60)


def element(i: int) -> Any:
    return {"x": np.full((2,), i, np.int32), "label": (f"e{i}", np.int64(i))}


def make_save(
    path: str, sizes: tuple[int, ...] = (4, 0, 5), compression: str | None = "zstd"
) -> list[Any]:
    """A save of ``sum(sizes)`` elements in chunks of ``sizes``, written by hand."""
    snapshot.begin(path, "s1")
    elements = [element(i) for i in range(sum(sizes))]
    infos, first = [], 0
    for c, size in enumerate(sizes):
        with snapshot.ChunkWriter(path, f"chunk-{c}", compression) as writer:
            for e in elements[first : first + size]:
                writer.write(e)
        infos.append(writer.info)
        first += size
    snapshot.write_manifest(
        path,
        element_spec=specs.encode_spec(structure.spec_of(elements[0])),
        chunks=infos,
        compression=compression,
        cardinality=len(elements),
        dataset_id="d",
    )
    return elements


def read_splits(ds: zd.Dataset, splits: list[list[int]]) -> list[Any]:
    ctx = IterContext(split_source=ds._node, split_provider=ListSplitProvider(splits))
    with make_iterator(ds._node, ctx) as iterator:
        return list(iterator)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_load_reads_every_element_in_order_with_spec_and_cardinality(
    tmp_path: Path, compression
):
    elements = make_save(str(tmp_path), compression=compression)
    ds = zd.Dataset.load(str(tmp_path))
    for chunk in (tmp_path / "chunks").iterdir():  # spec and count need no data
        chunk.rename(tmp_path / chunk.name)
    assert ds.cardinality() == 9
    assert ds.element_spec == {
        "x": zd.TensorSpec((2,), np.dtype(np.int32)),
        "label": (zd.TensorSpec((), str), zd.TensorSpec((), np.dtype(np.int64))),
    }
    for chunk in tmp_path.glob("chunk-*"):
        chunk.rename(tmp_path / "chunks" / chunk.name)
    assert_bit_equal(list(ds), elements)


def test_splits_are_ranges_of_elements_within_a_chunk(tmp_path: Path):
    elements = make_save(str(tmp_path))
    ds = zd.Dataset.load(str(tmp_path))
    node = ds._node
    op = node.definition
    assert [op.split_at(node, 3, k) for k in range(op.num_splits(node, 3))] == [
        [0, 3],
        [3, 4],
        [4, 7],
        [7, 9],
    ]
    got = read_splits(ds, [[2, 6], [0, 1], [8, 9], [6, 8]])
    assert_bit_equal(got, [elements[i] for i in (2, 3, 4, 5, 0, 8, 6, 7)])


def test_a_read_saved_mid_chunk_restores_exactly(tmp_path: Path):
    elements = make_save(str(tmp_path))
    got = assert_state_roundtrip(zd.Dataset.load(str(tmp_path)))
    assert_bit_equal(got, elements)
    ds = zd.Dataset.load(str(tmp_path))
    ctx = IterContext(split_source=ds._node, split_provider=ListSplitProvider([[1, 8]]))
    with make_iterator(ds._node, ctx) as iterator:
        first = [next(iterator) for _ in range(4)]
        state = iterator.get_state()
    ctx = IterContext(split_source=ds._node, split_provider=ListSplitProvider([]))
    with make_iterator(ds._node, ctx) as resumed:
        resumed.set_state(state)
        rest = list(resumed)
    assert_bit_equal(first + rest, elements[1:8])


def test_an_unfinished_save_and_no_save_are_refused_naming_the_path(tmp_path: Path):
    path = str(tmp_path / "save")
    with pytest.raises(NotFoundError, match=f"no finished save at {path}"):
        zd.Dataset.load(path)
    snapshot.begin(path, "s1")
    with pytest.raises(
        FailedPreconditionError, match=f"the save at {path} is not finished"
    ):
        zd.Dataset.load(path)
    with pytest.raises(TypeError, match="load path must be a non-empty str"):
        zd.Dataset.load(Path(path))  # type: ignore[arg-type]


def test_a_corrupt_chunk_fails_naming_it_and_ignore_errors_skips_it_whole(
    tmp_path: Path,
):
    elements = make_save(str(tmp_path), sizes=(3, 300, 2))
    file = tmp_path / "chunks" / "chunk-1"
    data = bytearray(file.read_bytes())
    data[-3] ^= 0xFF
    file.write_bytes(bytes(data))
    ds = zd.Dataset.load(str(tmp_path))
    with pytest.raises(InvalidArgumentError, match=r"chunk 'chunk-1' of the save at"):
        list(ds)
    reads = []
    real = snapshot.read_chunk

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[1]["name"])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(snapshot, "read_chunk", counted)
        got = list(zd.Dataset.load(str(tmp_path)).ignore_errors())
    assert_bit_equal(got, elements[:3] + elements[303:])
    assert reads.count("chunk-1") == 1  # not once per element


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_chunk_changed_between_two_epochs_is_refused_naming_it(
    tmp_path: Path, compression: str | None
):
    elements = make_save(str(tmp_path), sizes=(3, 4), compression=compression)
    ds = zd.Dataset.load(str(tmp_path))
    assert_bit_equal(list(ds), elements)
    with (tmp_path / "chunks" / "chunk-1").open("r+b") as file:  # in place: mapped
        file.seek(file.seek(0, 2) // 2)
        byte = file.read(1)[0]
        file.seek(-1, 1)
        file.write(bytes([byte ^ 0x01]))
    with pytest.raises(  # UnreadableFileError: ignore_errors skips the chunk
        InvalidArgumentError, match=r"chunk 'chunk-1' of the save at .* corrupt"
    ):
        list(ds)


def test_memory_urls_hold_a_save_that_loads():
    root = f"memory://zmqdata-load-{uuid.uuid4().hex}"
    try:
        elements = make_save(root, sizes=(2, 3))
        ds = zd.Dataset.load(root)
        assert ds.cardinality() == 5
        assert_bit_equal(list(ds), elements)
        assert_bit_equal(read_splits(ds, [[3, 5]]), elements[3:])
    finally:
        fsspec.filesystem("memory").rm(root, recursive=True)


@pytest.fixture(scope="module")
def bucket() -> Iterator[str]:
    """A bucket of an S3-compatible server on loopback (as test_object_store's)."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    with s3_server():
        name = f"zmqdata-{uuid.uuid4().hex[:8]}"
        fsspec.filesystem("s3").mkdir(name)
        yield f"s3://{name}"


def test_a_save_in_an_s3_bucket_loads_and_is_not_overwritten(bucket: str):
    root = f"{bucket}/save"
    elements = make_save(root, sizes=(2, 3))
    s3 = fsspec.filesystem("s3")
    assert sorted(p.split("/save/", 1)[1] for p in s3.find(root)) == [
        "chunks/chunk-0",
        "chunks/chunk-1",
        "manifest.json",
    ]
    ds = zd.Dataset.load(root)
    assert ds.cardinality() == 5
    assert_bit_equal(list(ds), elements)
    with pytest.raises(FailedPreconditionError, match="holds a finished save"):
        snapshot.begin(root, "s2")
