"""The save format (``_dataset/snapshot.py``, docs/formats.md): chunks, manifest, claims."""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.dataset.checks import assert_bit_equal
from tests.wire.test_frames import ARRAY_DTYPES  # the wire codec's dtypes
from zmqdata._dataset import snapshot, snapshot_chunks, specs, structure
from zmqdata._dataset.snapshot import ChunkWriter, read_chunk
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)

pytestmark = pytest.mark.timeout(60)

DOCS = Path(__file__).parent.parent.parent / "docs" / "formats.md"
COMPRESSIONS = [None, "zstd"]


def write_chunk(
    path: str, elements: list[Any], compression: str | None, name: str = "c0"
) -> dict[str, Any]:
    with ChunkWriter(path, name, compression) as writer:
        for element in elements:
            writer.write(element)
    return writer.info


def round_trip(
    path: str, elements: list[Any], compression: str | None, first: int = 0
) -> list[Any]:
    info = write_chunk(path, elements, compression)
    return list(read_chunk(path, info, first, compression=compression))


def leftovers(path: str) -> list[str]:
    return sorted(os.listdir(Path(path) / "chunks"))


# ------------------------------------------------------------------ round trips

SCALAR_DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(),
    hnp.floating_dtypes(sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(),
    hnp.datetime64_dtypes(),
)
ARRAYS = ARRAY_DTYPES.flatmap(
    lambda dtype: hnp.arrays(
        dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
    )
)
LEAVES = st.one_of(
    ARRAYS,
    ARRAYS.map(lambda a: a.T),  # not C-contiguous
    SCALAR_DTYPES.flatmap(lambda d: hnp.arrays(d, ())).map(lambda a: a[()]),
    st.sampled_from([np.str_("é"), np.bytes_(b"\x00b")]),
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=6),
)
ELEMENTS = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.tuples(children, children),
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    elements=st.lists(ELEMENTS, max_size=4), compression=st.sampled_from(COMPRESSIONS)
)
def test_elements_come_back_bit_exact(elements: list[Any], compression: str | None):
    with tempfile.TemporaryDirectory() as path:
        got = round_trip(path, elements, compression)
    expected = [
        structure.map_leaves(
            lambda v: v.copy(order="C") if isinstance(v, np.ndarray) else v, e
        )
        for e in elements
    ]
    assert_bit_equal(got, expected)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_dtypes_shapes_and_nesting_that_matter_most(tmp_path: Path, compression):
    nan_bits = struct.pack("<Q", 0x7FF0000000000123)  # a NaN with a payload
    (nan,) = struct.unpack("<d", nan_bits)
    element = {
        "zero_d": np.array(7, dtype=">i4"),
        "scalar": np.float16(1.5),
        "empty": np.zeros((0, 3), np.float32),
        "bools": np.array([True, False]),
        "complex": np.array([1 + 2j], np.complex64),
        "text": np.array(["ab", "c"]),
        "raw": np.array([b"\x00\xff"]),
        "when": np.array(["2024-01-01"], "datetime64[ns]"),
        "fortran": np.asfortranarray(np.arange(6).reshape(2, 3)),
        "python": (None, True, -(2**63), 2**64 - 1, nan, "é", b"\x00"),
        "nested": [{"b": 1, "a": (np.int8(-1),)}],
    }
    (got,) = round_trip(str(tmp_path), [element], compression)
    assert_bit_equal(got, element)
    assert type(got["scalar"]) is np.float16
    assert type(got["zero_d"]) is np.ndarray
    assert got["fortran"].flags.c_contiguous
    assert struct.pack("<d", got["python"][4]) == nan_bits
    assert list(got["nested"][0]) == ["b", "a"]


def test_first_skips_elements_and_many_chunks_read_apart(tmp_path: Path):
    path = str(tmp_path)
    info = write_chunk(path, [np.arange(i) for i in range(10)], "zstd")
    assert info["elements"] == 10
    assert info["name"] == "c0"
    data = (tmp_path / "chunks" / "c0").read_bytes()
    assert info["bytes"] == len(data)
    got = list(read_chunk(path, info, 7, compression="zstd"))
    assert [a.tolist() for a in got] == [list(range(i)) for i in (7, 8, 9)]
    assert list(read_chunk(path, info, 10, compression="zstd")) == []
    other = write_chunk(path, ["x"], None, name="c1")
    assert list(read_chunk(path, other, compression=None)) == ["x"]
    assert leftovers(path) == ["c0", "c1"]


def test_zstd_compresses_and_raw_is_plain_msgpack(tmp_path: Path):
    zeros = [np.zeros(10_000, np.int64)]
    raw = write_chunk(str(tmp_path), zeros, None, name="raw")
    packed = write_chunk(str(tmp_path), zeros, "zstd", name="packed")
    assert raw["bytes"] > 80_000
    assert packed["bytes"] < 1_000


# ------------------------------------------------------------------ what cannot be saved


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ((1, np.array([object()])), r"element\[1\]: an array of dtype object"),
        (np.zeros(2, [("a", "i4")]), "structured dtype"),
        ({"k": [2**64]}, r"element\['k'\]\[0\]: int 18446744073709551616"),
        (1j, "a complex cannot be saved"),
        ({1: 2}, "dict key 1"),
        ({"__tuple__": 1}, "dict key '__tuple__'"),
        ({"a": {1, 2}}, r"element\['a'\]: a set cannot be saved"),
        ("\ud800", "element 0"),
    ],
)
def test_values_that_cannot_be_saved_are_refused_and_nothing_is_committed(
    tmp_path: Path, element: Any, message: str
):
    path = str(tmp_path)
    with pytest.raises(InvalidArgumentError, match=message) as raised:
        write_chunk(path, [element], "zstd", name="bad")
    assert "chunk 'bad' of the save at" in str(raised.value)
    assert leftovers(path) == []


def fail_inside(writer: ChunkWriter) -> None:
    """Writes an element, then raises inside the writer's block (a pipeline error)."""
    with writer:
        writer.write(1)
        raise KeyError("pipeline")


def test_an_error_in_the_block_leaves_nothing_and_propagates(tmp_path: Path):
    path = str(tmp_path)
    writer = ChunkWriter(path, "c0", None)
    with pytest.raises(KeyError, match="pipeline"):
        fail_inside(writer)
    assert leftovers(path) == []
    with pytest.raises(FailedPreconditionError, match="not committed"):
        _ = writer.info


@pytest.mark.parametrize(
    ("name", "compression", "message"),
    [
        ("a/b", None, "chunk name"),
        (".hidden", None, "chunk name"),
        ("", None, "chunk name"),
        ("c", "gzip", "compression must be None or 'zstd', got 'gzip'"),
    ],
)
def test_bad_writer_arguments_are_named(tmp_path: Path, name, compression, message):
    with pytest.raises(InvalidArgumentError, match=message):
        ChunkWriter(str(tmp_path), name, compression)


# ------------------------------------------------------------------ bad chunks


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_corrupt_or_truncated_chunk_is_named_before_any_element(
    tmp_path: Path, compression
):
    path = str(tmp_path)
    info = write_chunk(path, [np.arange(100)] * 3, compression, name="c7")
    file = tmp_path / "chunks" / "c7"
    good = file.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01
    file.write_bytes(bytes(flipped))
    with pytest.raises(
        snapshot.CorruptChunkError, match=r"chunk 'c7' of the save at .* is corrupt"
    ):
        next(read_chunk(path, info, compression=compression))
    file.write_bytes(good[:-5])
    with pytest.raises(
        InvalidArgumentError,
        match=r"chunk 'c7' .* is \d+ bytes, not the \d+ .*truncated",
    ):
        next(read_chunk(path, info, compression=compression))
    file.unlink()
    with pytest.raises(NotFoundError, match="c7"):
        next(read_chunk(path, info, compression=compression))


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("whole_read_max", [256 << 20, 64])  # 64: read in pieces
def test_a_chunk_changed_after_a_good_read_is_refused_at_the_next(
    tmp_path: Path, compression, whole_read_max: int, monkeypatch
):
    monkeypatch.setattr(snapshot_chunks, "_WHOLE_READ_MAX", whole_read_max)
    path = str(tmp_path)
    elements = [np.arange(100)] * 3
    info = write_chunk(path, elements, compression, name="c7")
    assert_bit_equal(list(read_chunk(path, info, compression=compression)), elements)
    with (tmp_path / "chunks" / "c7").open("r+b") as file:  # in place, same size
        file.seek(info["bytes"] - 4)
        byte = file.read(1)[0]
        file.seek(-1, 1)
        file.write(bytes([byte ^ 0x01]))
    with pytest.raises(
        snapshot.CorruptChunkError, match=r"chunk 'c7' of the save at .* is corrupt"
    ):
        next(read_chunk(path, info, compression=compression))  # before any element


def test_a_chunk_holding_other_than_its_count_is_named(tmp_path: Path):
    path = str(tmp_path)
    info = write_chunk(path, [1, 2], None)
    with pytest.raises(InvalidArgumentError, match="holds 2 elements, not the 3"):
        list(read_chunk(path, {**info, "elements": 3}, compression=None))


# ------------------------------------------------------------------ manifest


def spec_of(element: Any) -> bytes:
    return specs.encode_spec(structure.spec_of(element))


def finish(path: str, infos: list[dict[str, Any]], compression, element) -> None:
    snapshot.write_manifest(
        path,
        element_spec=spec_of(element),
        chunks=infos,
        compression=compression,
        cardinality=sum(i["elements"] for i in infos),
        dataset_id="7",
    )


def test_the_manifest_round_trips_and_ends_the_claim(tmp_path: Path):
    path = str(tmp_path)
    snapshot.begin(path, "s1")
    element = (np.zeros((2, 3), ">f4"), {"s": "x", "n": None, "i": 1})
    info = write_chunk(path, [element], "zstd")
    finish(path, [info], "zstd", element)
    assert not (tmp_path / "SAVING").exists()
    manifest = snapshot.read_manifest(path)
    assert specs.decode_spec(manifest["element_spec"]) == structure.spec_of(element)
    assert manifest["chunks"] == [info]
    assert (manifest["cardinality"], manifest["compression"]) == (1, "zstd")
    assert (manifest["format"], manifest["dataset_id"]) == (snapshot.FORMAT, "7")
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk["element_spec"] == {
        "__tuple__": [">f4|2,3", {"s": "py:str|", "n": "py:NoneType|", "i": "py:int|"}]
    }
    assert sorted(os.listdir(tmp_path)) == ["chunks", "manifest.json"]


def test_bad_manifest_arguments_are_named(tmp_path: Path):
    path = str(tmp_path)
    info = write_chunk(path, [1, 2], None)
    good = {
        "element_spec": spec_of(1),
        "chunks": [info],
        "compression": None,
        "cardinality": 2,
        "dataset_id": "d",
    }
    for change, message in (
        ({"cardinality": 3}, "cardinality 3 is not the chunks' 2"),
        ({"chunks": [info, info], "cardinality": 4}, "chunk names repeat"),
        ({"chunks": [{"name": "x"}]}, "a chunk must be a dict"),
        ({"chunks": [{**info, "crc32": -1}]}, "bad crc32 -1"),
        ({"compression": "AUTO"}, "'AUTO'"),
        ({"element_spec": "x"}, "element_spec must be the bytes"),
        ({"dataset_id": 3}, "dataset_id must be a str"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            snapshot.write_manifest(path, **(good | change))
    assert not (tmp_path / "manifest.json").exists()


def test_reading_a_manifest_refuses_unfinished_foreign_and_malformed(tmp_path: Path):
    path = str(tmp_path)
    with pytest.raises(NotFoundError, match=f"no finished save at {re.escape(path)}"):
        snapshot.read_manifest(path)
    snapshot.begin(path, "s9")
    with pytest.raises(FailedPreconditionError, match="is not finished: save 's9'"):
        snapshot.read_manifest(path)
    (tmp_path / "manifest.json").write_text('{"format": "zmqdata.snapshot/2"}')
    with pytest.raises(
        InvalidArgumentError, match=r"'zmqdata\.snapshot/2'; this zmqdata"
    ):
        snapshot.read_manifest(path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(InvalidArgumentError, match="not a zmqdata save manifest"):
        snapshot.read_manifest(path)


# ------------------------------------------------------------------ the documented reader


def documented_reader() -> dict[str, Any]:
    """Runs the docs' "Reading a save without zmqdata" lines, as written there."""
    text = DOCS.read_text()
    section = text.split("## Reading a save without zmqdata", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "zmqdata" not in code
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOCS), "exec"), namespace)  # noqa: S102 - the docs' code
    return namespace


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_the_documented_few_lines_read_a_save_without_zmqdata(
    tmp_path: Path, compression
):
    path = str(tmp_path)
    elements = [
        (np.arange(i, dtype="<u2").reshape(1, i), {"s": f"s{i}", "f": np.float32(i)})
        for i in range(5)
    ]
    infos = [
        write_chunk(path, elements[:3], compression, "a"),
        write_chunk(path, elements[3:], compression, "b"),
    ]
    finish(path, infos, compression, elements[0])
    read_save = documented_reader()["read_save"]
    assert_bit_equal(list(read_save(path)), elements)


# ------------------------------------------------------------------ claiming a path


def test_begin_refuses_a_finished_save_and_another_save(tmp_path: Path):
    path = str(tmp_path / "save")
    snapshot.begin(path, "s1")
    snapshot.begin(path, "s1")  # the same save, resuming
    marker = (tmp_path / "save" / "SAVING").read_bytes()
    with pytest.raises(
        FailedPreconditionError,
        match=f"{re.escape(path)} is being written by save 's1'.*nothing was overwritten",
    ):
        snapshot.begin(path, "s2")
    assert (tmp_path / "save" / "SAVING").read_bytes() == marker
    finish(path, [write_chunk(path, [1], None)], None, 1)
    manifest = (tmp_path / "save" / "manifest.json").read_bytes()
    for save_id in ("s1", "s3"):
        with pytest.raises(
            FailedPreconditionError, match=f"{re.escape(path)} holds a finished save"
        ):
            snapshot.begin(path, save_id)
    assert (tmp_path / "save" / "manifest.json").read_bytes() == manifest
    assert not (tmp_path / "save" / "SAVING").exists()
    with pytest.raises(InvalidArgumentError, match="save id"):
        snapshot.begin(path, "")


def test_begin_refuses_a_path_under_a_regular_file(tmp_path: Path):
    # Root writes anywhere chmod allows; a path whose parent is a file stops it too.
    (tmp_path / "file").write_text("x")
    path = str(tmp_path / "file" / "save")
    with pytest.raises(
        PermissionDeniedError,
        match=f"cannot write the save at {re.escape(path)}: Not a directory",
    ):
        snapshot.begin(path, "s1")


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, options: str) -> Iterator[None]:
    """A tmpfs mounted at ``folder`` (root only); skips the test, saying why, if not."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: mounting a tmpfs needs root")
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
        check=False,
        capture_output=True,
        text=True,
        timeout=10,
    )
    if mount.returncode != 0:
        pytest.skip(
            f"SKIPPED LOUDLY: cannot mount a tmpfs here: {mount.stderr.strip()}"
        )
    try:
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True, timeout=10)


def test_begin_refuses_a_read_only_path(tmp_path: Path):
    folder = tmp_path / "ro"
    if os.geteuid() != 0:  # chmod stops anyone but root
        folder.mkdir(mode=0o555)
        context: Any = contextlib.nullcontext()
    else:  # root: a read-only tmpfs
        context = mounted_tmpfs(folder, "ro,size=64k")
    with context:
        path = str(folder / "save")
        with pytest.raises(
            PermissionDeniedError,
            match=f"cannot write the save at {re.escape(path)}: Read-only file system"
            if os.geteuid() == 0
            else "Permission denied",
        ):
            snapshot.begin(path, "s1")


def test_a_full_disk_fails_the_chunk_naming_it_and_leaves_nothing(tmp_path: Path):
    folder = tmp_path / "small"
    with mounted_tmpfs(folder, "size=1m"):
        path = str(folder / "save")
        snapshot.begin(path, "s1")
        noise = np.random.default_rng(0).integers(0, 256, 1 << 19, np.uint8)
        with pytest.raises(
            FailedPreconditionError,
            match=(
                f"cannot write chunk 'big' of the save at {re.escape(path)}: "
                "No space left on device"
            ),
        ):
            write_chunk(path, [noise] * 4, None, name="big")
        assert leftovers(path) == []  # no chunk, no temporary file
        assert write_chunk(path, [1], "zstd", name="small")["elements"] == 1


# ------------------------------------------------------------------ object stores


def test_memory_urls_hold_a_save():
    root = f"memory://zmqdata-save-{uuid.uuid4().hex}"
    try:
        snapshot.begin(root, "s1")
        with pytest.raises(FailedPreconditionError, match="being written by save"):
            snapshot.begin(root, "s2")
        info = write_chunk(root, [np.arange(3), "x"], "zstd")
        with pytest.raises(KeyError):
            fail_inside(ChunkWriter(root, "lost", None))
        finish(root, [info], "zstd", "x")
        memory = fsspec.filesystem("memory")
        assert sorted(p.rsplit("/", 1)[1] for p in memory.find(root)) == [
            "c0",
            "manifest.json",
        ]
        got = list(read_chunk(root, info, compression="zstd"))
        assert got[0].tolist() == [0, 1, 2]
        assert got[1] == "x"
        assert snapshot.read_manifest(root)["chunks"] == [info]
    finally:
        fsspec.filesystem("memory").rm(root, recursive=True)
