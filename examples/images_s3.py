"""JPEGs in WebDataset tar shards in an S3-compatible store, decoded on workers.

An S3-compatible server (moto, on loopback) stands in for your bucket; with a
real one, drop ``local_s3()`` and set the usual ``AWS_*`` variables (and
``AWS_ENDPOINT_URL`` for MinIO or Ceph) where the workers run. The shards are
read per sample: a worker lost mid-shard repeats no image.

    python examples/images_s3.py
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import tarfile
from collections.abc import Iterator

import fsspec
import numpy as np
from PIL import Image

import zmqdata as zd
from zmqdata import service

SHARDS, PER_SHARD, SIZE = 4, 48, 64


@contextlib.contextmanager
def local_s3() -> Iterator[None]:
    """An S3-compatible server on 127.0.0.1, and fsspec's ``s3`` pointed at it."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    fsspec.config.conf["s3"] = {
        "key": "testing",
        "secret": "testing",
        "endpoint_url": f"http://{host}:{port}",
    }
    try:
        yield
    finally:
        fsspec.config.conf.pop("s3", None)
        server.stop()


def jpeg(label: int) -> bytes:
    """A small JPEG whose colour says its label."""
    rng = np.random.default_rng(label)
    pixels = rng.integers(0, 32, (SIZE, SIZE, 3), dtype=np.uint8) + np.uint8(
        label % 200
    )
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def write_shards(prefix: str) -> None:
    """``SHARDS`` tar shards of ``PER_SHARD`` samples: ``key.jpg`` and ``key.cls``."""
    fs = fsspec.filesystem("s3")
    for shard in range(SHARDS):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for i in range(PER_SHARD):
                label = shard * PER_SHARD + i
                for ext, data in (("jpg", jpeg(label)), ("cls", str(label).encode())):
                    member = tarfile.TarInfo(f"{label:06d}.{ext}")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
        with fs.open(f"{prefix}/shard-{shard:03d}.tar", "wb") as out:
            out.write(buffer.getvalue())


def augment(sample: dict) -> tuple[np.ndarray, np.int64]:
    """Decoded on the workers: a flip and a scale to [0, 1]."""
    image = sample["jpg"][:, ::-1].astype(np.float32) / 255.0
    return image, sample["cls"]


def main() -> int:
    with local_s3():
        fsspec.filesystem("s3").mkdir("train")
        write_shards("s3://train/shards")
        with service.DispatchServer() as dispatcher:
            workers = [
                service.WorkerServer(service.WorkerConfig(dispatcher.target))
                for _ in range(2)
            ]
            try:
                ds = (
                    zd.Dataset.from_webdataset("s3://train/shards/*.tar", decode=True)
                    .map(augment)
                    .apply(service.distribute("distributed_epoch", dispatcher.target))
                    .batch(32)
                )
                labels = []
                for images, batch_labels in ds:
                    assert images.shape[1:] == (SIZE, SIZE, 3)
                    labels += [int(label) for label in batch_labels]
            finally:
                for worker in workers:
                    worker.stop()
    total = SHARDS * PER_SHARD
    if sorted(labels) != list(range(total)):
        print(f"FAILED: {len(labels)} images, {len(set(labels))} distinct of {total}")
        return 1
    print(f"OK: {total} JPEGs from {SHARDS} shards in S3, each exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
