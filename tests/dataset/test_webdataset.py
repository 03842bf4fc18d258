"""``from_webdataset``: tar shards read as samples, split by sample, over URLs and the service."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip
from tests.servers import HttpServer, http_server
from zmqdata import service
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import make_iterator
from zmqdata._dataset.ops import OPS
from zmqdata._dataset.ops.webdataset import WebDataset, build
from zmqdata.errors import InvalidArgumentError, NotFoundError

pytestmark = pytest.mark.timeout(60)

Sample = tuple[str, dict[str, bytes]]


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    """The op, for pipelines built here (and for the in-process service)."""
    if "webdataset" not in OPS:
        OPS.register("webdataset", WebDataset)


@pytest.fixture(scope="module", autouse=True)
def fsspec_loop() -> None:
    """fsspec's event-loop thread (http) lives as long as the process: start it first."""
    import fsspec.asyn

    fsspec.asyn.get_loop()


def tar_of(members: list[tuple[str, bytes]], extra: Any = ()) -> bytes:
    """A tar holding the ``extra`` ``TarInfo``s, then ``(name, data)`` members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info in extra:
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_bytes(samples: list[Sample], extra: Any = ()) -> bytes:
    """A tar holding ``extra`` members, then each sample's members in order."""
    members = [
        (f"{key}.{ext}", data) for key, part in samples for ext, data in part.items()
    ]
    return tar_of(members, extra)


def write(path: Path, samples: list[Sample]) -> str:
    path.write_bytes(tar_bytes(samples))
    return str(path)


def numbered(lo: int, hi: int, size: int = 10) -> list[Sample]:
    """Samples ``lo`` to ``hi`` (excluded): a class and ``size`` bytes of data each."""
    return [
        (f"s{i:04d}", {"bin": bytes([i % 256]) * size, "cls": str(i).encode()})
        for i in range(lo, hi)
    ]


def expected(samples: list[Sample]) -> list[dict[str, Any]]:
    return [{"__key__": key, **members} for key, members in samples]


def dataset(urls: Any, decode: bool = False) -> zd.Dataset:
    return zd.Dataset(build(urls, decode=decode))


def image_bytes(array: np.ndarray, mode: str, format: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array, mode=mode).save(buffer, format=format)
    return buffer.getvalue()


SIZES = (5, 0, 1, 6)
"""Samples per shard: an empty shard and a one-sample one among them."""


@pytest.fixture
def shards(tmp_path: Path) -> tuple[list[str], list[Sample]]:
    """Four shards of ``SIZES`` samples, numbered across them."""
    paths, samples, first = [], [], 0
    for k, size in enumerate(SIZES):
        part = numbered(first, first + size)
        paths.append(write(tmp_path / f"shard-{k:02d}.tar", part))
        samples += part
        first += size
    return paths, samples


# ------------------------------------------------------------------ samples


def test_members_sharing_a_key_make_one_sample_of_raw_bytes(tmp_path):
    folder = tarfile.TarInfo("images")
    folder.type = tarfile.DIRTYPE
    link = tarfile.TarInfo("images/link.jpg")
    link.type, link.linkname = tarfile.SYMTYPE, "a.jpg"
    meta = tarfile.TarInfo("__info__")
    samples = [
        ("images/a", {"jpg": b"\xff\xd8", "seg.png": b"\x89P", "cls": b"3"}),
        ("images/v1.2/b", {"jpg": b"jj", "json": b"{}"}),
        ("c", {"txt": b"three"}),
        ("images/a", {"txt": b"a again"}),  # not consecutive: a sample of its own
    ]
    path = tmp_path / "one.tar"
    path.write_bytes(tar_bytes(samples, extra=[folder, link, meta]))
    ds = dataset(str(path))
    assert ds._node.args == {"files": [str(path)], "counts": [4], "decode": False}
    assert ds.cardinality() == 4
    assert ds.element_spec is None
    assert_bit_equal(list(ds), expected(samples))


def test_decode_by_extension(tmp_path):
    rgb = np.arange(8 * 6 * 3, dtype=np.uint8).reshape(8, 6, 3)
    rgba = np.arange(4 * 5 * 4, dtype=np.uint8).reshape(4, 5, 4)
    gray = np.arange(3 * 7, dtype=np.uint8).reshape(3, 7)
    smooth = np.full((16, 16, 3), 120, dtype=np.uint8)
    vector = np.linspace(0, 1, 5, dtype=np.float32)
    npy = io.BytesIO()
    np.save(npy, vector)
    members = {
        "jpg": image_bytes(smooth, "RGB", "JPEG"),
        "seg.png": image_bytes(rgba, "RGBA", "PNG"),
        "mask.PNG": image_bytes(gray, "L", "PNG"),
        "ppm": image_bytes(rgb, "RGB", "PPM"),
        "bmp": image_bytes(rgb, "RGB", "BMP"),
        "webp": image_bytes(rgb, "RGB", "WEBP") if _has_webp() else b"",
        "cls": b"7\n",
        "index": b"12",
        "id": b"-3",
        "txt": "café".encode(),
        "text": b"",
        "json": json.dumps({"a": [1, 2.5], "b": None}).encode(),
        "npy": npy.getvalue(),
        "bin": b"\x00\x01",
    }
    if not members["webp"]:
        del members["webp"]
    path = write(tmp_path / "decoded.tar", [("k", members)])
    (sample,) = list(dataset(path, decode=True))
    assert list(sample) == ["__key__", *members]
    assert sample["jpg"].dtype == np.uint8
    assert sample["jpg"].shape == (16, 16, 3)
    assert np.abs(sample["jpg"].astype(int) - 120).max() <= 2  # lossy
    assert_bit_equal(sample["seg.png"], rgba)
    assert_bit_equal(sample["mask.PNG"], gray[:, :, np.newaxis])
    assert_bit_equal(sample["ppm"], rgb)
    assert_bit_equal(sample["bmp"], rgb)
    if "webp" in members:
        assert sample["webp"].shape == (8, 6, 3)
    for extension, value in [("cls", 7), ("index", 12), ("id", -3)]:
        assert_bit_equal(sample[extension], np.int64(value))
    assert sample["txt"] == "café"
    assert sample["text"] == ""
    assert sample["json"] == {"a": [1, 2.5], "b": None}
    assert_bit_equal(sample["npy"], vector)
    assert sample["bin"] == b"\x00\x01"
    # Without decode, the same members are the stored bytes.
    (raw,) = list(dataset(path))
    assert_bit_equal(raw, {"__key__": "k", **members})


def _has_webp() -> bool:
    from PIL import features

    return bool(features.check("webp"))


def test_several_shards_read_in_order_from_a_glob(tmp_path, shards):
    paths, samples = shards
    ds = dataset(str(tmp_path / "shard-*.tar"))
    assert ds._node.args["files"] == paths
    assert ds._node.args["counts"] == list(SIZES)
    assert ds.cardinality() == len(samples) == 12
    assert_bit_equal(list(ds), expected(samples))
    assert_bit_equal(list(dataset(list(reversed(paths)))), expected(samples))


def test_compressed_shards_local_and_streamed(tmp_path):
    import fsspec

    samples = numbered(0, 7, size=3000)
    blob = gzip.compress(tar_bytes(samples))
    (tmp_path / "z.tar.gz").write_bytes(blob)
    fsspec.filesystem("memory").pipe("memory://wds-gz/z.tar.gz", blob)
    try:
        for url in (str(tmp_path / "z.tar.gz"), "memory://wds-gz/z.tar.gz"):
            ds = dataset(url)
            assert ds.cardinality() == 7
            assert_bit_equal(list(ds), expected(samples))
            assert_bit_equal(read_splits(ds, [[4, 6]]), expected(samples[4:6]))
    finally:
        fsspec.filesystem("memory").rm("memory://wds-gz", recursive=True)


# ------------------------------------------------------------------ splits


def context(ds: zd.Dataset, splits: list[list[int]]) -> IterContext:
    return IterContext(split_source=ds._node, split_provider=ListSplitProvider(splits))


def read_splits(ds: zd.Dataset, splits: list[list[int]]) -> list[Any]:
    with make_iterator(ds._node, context(ds, splits)) as iterator:
        return list(iterator)


def test_split_ranges_read_exactly_their_samples(shards):
    paths, samples = shards
    ds = dataset(paths)
    op = OPS["webdataset"]
    assert op.splits(ds._node, 2) == [
        [0, 2],
        [2, 4],
        [4, 5],
        [5, 6],
        [6, 8],
        [8, 10],
        [10, 12],
    ]
    cases = [
        [[0, 12]],
        [[3, 9]],  # across the empty and the one-sample shard
        [[4, 5], [5, 6], [6, 7]],  # shard by shard, each the next
        [[10, 12], [0, 2], [7, 9]],  # backwards: the shard is opened again
        [[2, 3], [2, 3]],
        [[6, 6], [11, 12]],
    ]
    rng = np.random.default_rng(5)
    for _ in range(20):
        lo, hi = sorted(int(x) for x in rng.integers(0, 13, size=2))
        cases.append([[lo, hi]])
    for splits in cases:
        want = [s for lo, hi in splits for s in samples[lo:hi]]
        assert_bit_equal(read_splits(ds, splits), expected(want), f"splits {splits}")


def test_state_resumes_exactly_mid_shard(shards):
    paths, samples = shards
    ds = dataset(paths)
    assert_bit_equal(assert_state_roundtrip(ds), expected(samples))
    splits = [[2, 8], [9, 11], [0, 3]]
    out = assert_state_roundtrip(lambda: make_iterator(ds._node, context(ds, splits)))
    want = samples[2:8] + samples[9:11] + samples[0:3]
    assert_bit_equal(out, expected(want))


def test_a_restored_read_goes_on_mid_shard(shards):
    paths, samples = shards
    ds = dataset(paths).batch(2)
    with iter(ds) as first:
        head = [next(first), next(first)]
        state = first.get_state()
    with iter(ds) as second:
        second.set_state(state)
        tail = list(second)
    keys = [k for batch in [*head, *tail] for k in batch["__key__"]]
    assert keys == [key for key, _ in samples]


def test_samples_skipped_to_reach_a_split_are_not_decoded(tmp_path):
    samples = [("bad", {"png": b"not a png"}), ("good", {"cls": b"1"})]
    path = write(tmp_path / "a.tar", samples)
    ds = dataset(path, decode=True)
    assert read_splits(ds, [[1, 2]]) == [{"__key__": "good", "cls": np.int64(1)}]
    with pytest.raises(
        InvalidArgumentError, match=r"a\.tar: sample 0, member 'bad\.png'"
    ):
        read_splits(ds, [[0, 1]])


# ------------------------------------------------------------------ URLs


def test_memory_urls(tmp_path):
    import fsspec

    memory = fsspec.filesystem("memory")
    parts = [numbered(0, 3), numbered(3, 7)]
    for k, part in enumerate(parts):
        memory.pipe(f"memory://wds/train-{k}.tar", tar_bytes(part))
    try:
        ds = dataset("memory://wds/train-*.tar")
        files = ds._node.args["files"]
        assert [f.split("://")[0] for f in files] == ["memory", "memory"]
        assert [f.rsplit("/", 1)[1] for f in files] == ["train-0.tar", "train-1.tar"]
        assert dataset("memory://wds/train-1.tar").cardinality() == 4
        assert ds.cardinality() == 7
        assert_bit_equal(list(ds), expected(parts[0] + parts[1]))
        assert_bit_equal(read_splits(ds, [[2, 5]]), expected(numbered(2, 5)))
        assert_bit_equal(assert_state_roundtrip(ds), expected(numbered(0, 7)))
    finally:
        memory.rm("memory://wds", recursive=True)


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[str, HttpServer]]:
    """``(base URL, server)`` serving ``tmp_path`` on loopback."""
    with http_server(tmp_path) as server:
        yield server.url, server


def test_http_shards_are_streamed(tmp_path, shards, http_folder):
    base, server = http_folder
    paths, samples = shards
    urls = [f"{base}/{Path(p).name}" for p in paths]
    ds = dataset(urls)
    assert ds._node.args == {"files": urls, "counts": list(SIZES), "decode": False}
    assert_bit_equal(list(ds), expected(samples))
    assert_bit_equal(
        read_splits(ds, [[7, 10], [1, 3]]), expected(samples[7:10] + samples[1:3])
    )
    assert dataset(f"{base}/shard-*.tar")._node.args["files"] == urls  # a listing

    big = numbered(0, 4, size=4 << 20)  # 16 MiB: more than fsspec's 5 MiB blocks
    write(tmp_path / "big.tar", big)
    ds = dataset(f"{base}/big.tar")
    assert ds.cardinality() == 4
    server.sent = 0
    with iter(ds) as iterator:
        first = next(iterator)
    assert first["__key__"] == "s0000"
    assert first["bin"] == big[0][1]["bin"]
    assert server.sent < (8 << 20), "the first sample needs only the start of the shard"


# ------------------------------------------------------------------ errors


def test_bad_arguments():
    with pytest.raises(TypeError, match="decode must be a bool"):
        build("x.tar", decode=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="from_webdataset urls"):
        build([])
    with pytest.raises(
        InvalidArgumentError, match="from_webdataset urls: no file matches"
    ):
        build("/nonexistent/shard-*.tar")


def test_a_shard_gone_since_the_build_is_not_found(tmp_path, shards):
    paths, _ = shards
    ds = dataset(paths)
    os.remove(paths[2])
    with pytest.raises(NotFoundError, match=re.escape(paths[2])):
        read_splits(ds, [[5, 6]])


def test_truncated_shard(tmp_path):
    blob = tar_bytes(numbered(0, 4, size=3000))  # samples of 512 + 3072 + 512 + 512
    path = tmp_path / "cut.tar"
    cases = {
        5000: r"at byte 4608 \(past sample 0\): bad member header \(truncated header\)",
        4608: r"at byte 4608 \(past sample 0\): the data ends without the tar's end-of-arch",
        4200: r"at byte 4608 \(past sample 0\): unexpected end of data",
        100: "not a readable tar shard",
    }
    for size, message in cases.items():
        path.write_bytes(blob[:size])
        with pytest.raises(
            InvalidArgumentError, match=re.escape(str(path)) + ".*" + message
        ):
            build(str(path))
    # Cut after the build: the read names the sample it was reading.
    path.write_bytes(blob)
    ds = dataset(str(path))
    path.write_bytes(blob[:4096])  # sample 0's second member has no data
    pattern = (
        re.escape(str(path)) + r": sample 0, member 's0000.cls' at byte 3584: corrupt"
    )
    with pytest.raises(InvalidArgumentError, match=pattern):
        list(ds)
    # Cut at a member's end, after the build: fewer samples than counted.
    path.write_bytes(blob[: 3 * 4608] + bytes(1024))
    with pytest.raises(InvalidArgumentError, match="record 3 is missing"):
        list(ds)


def test_corrupt_member(tmp_path):
    blob = bytearray(tar_bytes(numbered(0, 4)))
    blob[2 * 1024 + 3 * 1024 + 100] ^= 0xFF  # the header of sample 2's second member
    path = tmp_path / "bad.tar"
    path.write_bytes(bytes(blob))
    message = re.escape(
        f"{path}: corrupt or truncated tar at byte 5120 (past sample 2)"
    )
    with pytest.raises(InvalidArgumentError, match=message + ".*bad checksum"):
        build(str(path))

    samples = [("a", {"cls": b"1"}), ("b", {"cls": b"two"}), ("c", {"jpg": b"junk"})]
    ds = dataset(write(tmp_path / "values.tar", samples), decode=True)
    with pytest.raises(
        InvalidArgumentError, match=r"sample 1, member 'b\.cls' at byte 1024"
    ):
        list(ds)
    with pytest.raises(
        InvalidArgumentError, match=r"sample 2, member 'c\.jpg'.*cannot decode"
    ):
        read_splits(ds, [[2, 3]])


def test_members_without_a_key_or_twice_in_a_sample(tmp_path):
    for name in ("README", "dir/.hidden.txt", "a/b.c/noext", "000."):
        info = tarfile.TarInfo(name)
        path = tmp_path / "nokey.tar"
        path.write_bytes(tar_bytes(numbered(0, 2), extra=[info]))
        with pytest.raises(
            InvalidArgumentError, match=f"member {re.escape(repr(name))}.*no key"
        ):
            build(str(path))
    members = [("a.cls", b"1"), ("b.cls", b"2"), ("b.txt", b"x"), ("b.cls", b"3")]
    path = tmp_path / "twice.tar"
    path.write_bytes(tar_of(members))
    ds = dataset(str(path))  # counting reads no data
    assert ds.cardinality() == 2
    message = r"twice\.tar: sample 1 \(key 'b'\) has two members 'b\.cls': the second at byte 3072"
    with pytest.raises(InvalidArgumentError, match=message):
        list(ds)


# ------------------------------------------------------------------ the service


def test_distributed_epoch_reads_every_sample_once(cluster, shards):
    paths, samples = shards
    c = cluster(num_workers=2)
    ds = dataset(paths, decode=True).apply(
        service.distribute("distributed_epoch", c.target)
    )
    with iter(ds) as iterator:
        got = list(iterator)
    assert sorted(s["__key__"] for s in got) == [key for key, _ in samples]
    by_key = {s["__key__"]: s for s in got}
    for key, members in samples:
        assert by_key[key]["bin"] == members["bin"]
        assert_bit_equal(by_key[key]["cls"], np.int64(int(members["cls"])))


def test_ranks_get_equal_disjoint_shares(cluster, shards):
    paths, samples = shards
    c = cluster(num_workers=2)
    streams: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        read = service.distribute(
            "distributed_epoch",
            c.target,
            job_name="wds-ranks",
            num_consumers=2,
            consumer_index=r,
            seed=3,
        )
        try:
            with iter(dataset(paths).apply(read)) as iterator:
                streams[r] = [s["__key__"] for s in iterator]
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=rank, args=(r,), name=f"rank-{r}") for r in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert len(streams[0]) == len(streams[1]) == len(samples) // 2
    assert not set(streams[0]) & set(streams[1])
    assert sorted(streams[0] + streams[1]) == [key for key, _ in samples]
