"""The readers against an S3-compatible server (moto) on loopback, through s3fs."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import zmqdata as zd
from tests.servers import s3_server
from zmqdata import service
from zmqdata._dataset.ops.tfrecord import write
from zmqdata.errors import InvalidArgumentError, NotFoundError

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).parent.parent.parent


@pytest.fixture(scope="module")
def bucket() -> Iterator[str]:
    import fsspec

    with s3_server():
        name = f"zmqdata-{uuid.uuid4().hex[:8]}"
        fsspec.filesystem("s3").mkdir(name)
        yield f"s3://{name}"


def test_tfrecords_in_s3_read_per_record_locally_and_on_workers(bucket: str):
    for f in range(2):
        write(
            f"{bucket}/tf/part-{f}.tfrecord", [f"{f}.{i}".encode() for i in range(50)]
        )
    ds = zd.Dataset.from_tfrecord(f"{bucket}/tf/*.tfrecord")
    assert ds.cardinality() == 100
    assert [bytes(r) for r in ds][:2] == [b"0.0", b"0.1"]
    with service.DispatchServer() as dispatcher:
        worker = service.WorkerServer(service.WorkerConfig(dispatcher.target))
        try:
            read = ds.apply(service.distribute("distributed_epoch", dispatcher.target))
            assert sorted(bytes(r) for r in read) == sorted(bytes(r) for r in ds)
        finally:
            worker.stop()


def test_tar_shards_in_s3_and_list_files_over_a_bucket(bucket: str):
    import fsspec

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for key in ("a", "b"):
            for ext, data in (("txt", key.encode()), ("cls", b"1")):
                member = tarfile.TarInfo(f"{key}.{ext}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    with fsspec.filesystem("s3").open(f"{bucket}/wds/shard-0.tar", "wb") as shard:
        shard.write(out.getvalue())
    samples = list(zd.Dataset.from_webdataset(f"{bucket}/wds/*.tar", decode=True))
    assert [(s["__key__"], s["txt"]) for s in samples] == [("a", "a"), ("b", "b")]
    files = zd.Dataset.list_files(f"{bucket}/wds/*.tar", shuffle=False)
    assert [str(f) for f in files] == [f"{bucket}/wds/shard-0.tar"]


def test_missing_objects_and_buckets_are_named(bucket: str):
    with pytest.raises(InvalidArgumentError, match="no file matches"):
        zd.Dataset.from_tfrecord(f"{bucket}/absent/*.tfrecord")
    write(f"{bucket}/gone.tfrecord", [b"x"])
    ds = zd.Dataset.from_tfrecord(f"{bucket}/gone.tfrecord")
    import fsspec

    fsspec.filesystem("s3").rm(f"{bucket}/gone.tfrecord")
    with pytest.raises(NotFoundError, match=r"gone\.tfrecord"):
        list(ds)


@pytest.mark.slow
def test_the_images_example_reads_its_jpegs_from_tar_shards_in_s3():
    done = subprocess.run(
        [sys.executable, "examples/images_s3.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: 192 JPEGs from 4 shards in S3, each exactly once" in done.stdout
