"""``snapshot`` before ``distribute``: the first job writes it while it streams, later ones read it.

An in-process cluster: epoch 1 delivers what a local run gives and writes the
snapshot; epoch 2, a ``repeat`` after the snapshot and a second job read its
chunks and run none of the ops before it (their calls are counted: workers
run in this process, and a function of an importable module travels by
reference); the finished snapshot is a save ``Dataset.load`` reads; a
changed function writes its own; two jobs at once write one; a multi-rank
read writes and reads it too; a read with ``exactly_once=False``, a static
shard and ``cache()`` in memory are refused naming why; the job's status
shows writing, then reading. Kills of real processes: ``test_chaos_snapshots.py``.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from zmqdata_cli.status_view import render

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal
from tests.dataset.test_load import bucket  # noqa: F401 (an S3 server's bucket)
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(60)

CALLS: Counter[int] = Counter()
"""Source elements the expensive map ran on (in-process workers count here)."""


def expensive(x: Any) -> Any:
    CALLS[int(x)] += 1
    return {"x": np.full(3, x, np.int32), "name": f"e{int(x)}"}


def pipeline(path: Path, n: int = 300) -> zd.Dataset:
    return zd.Dataset.range(n).map(expensive).snapshot(str(path))


def read(ds: zd.Dataset, target: str, **options: Any) -> list[Any]:
    return list(ds.apply(service.distribute("distributed_epoch", target, **options)))


def by_value(elements: list[Any]) -> list[Any]:
    return sorted(elements, key=lambda e: int(e["x"][0]))


def folder(path: Path) -> Path:
    [found] = [p for p in path.iterdir() if p.is_dir()]
    return found


def test_epoch_one_writes_while_streaming_and_epoch_two_reads(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=2).target
    ds = pipeline(tmp_path)
    local = list(zd.Dataset.range(300).map(expensive))
    CALLS.clear()
    first = read(ds, target)
    assert_bit_equal(by_value(first), local)
    assert sum(CALLS.values()) >= 300
    written = folder(tmp_path)
    poll_for(lambda: (written / "manifest.json").exists(), timeout=10)
    assert_bit_equal(list(zd.Dataset.load(str(written))), local)
    CALLS.clear()
    second = read(ds, target)
    assert_bit_equal(by_value(second), local)
    assert not CALLS, "epoch 2 ran the map"


def test_a_repeat_after_the_snapshot_reads_it_in_later_epochs(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=2).target
    CALLS.clear()
    got = read(pipeline(tmp_path, 200).repeat(3), target)
    counts = Counter(int(e["x"][0]) for e in got)
    assert counts == Counter({i: 3 for i in range(200)})
    # Epoch 2 starts while epoch 1's last splits run: those few are made twice.
    assert sum(CALLS.values()) < 2 * 200


def test_a_multirank_read_writes_and_reads_the_snapshot(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=2).target
    ds = pipeline(tmp_path, 120)

    def ranks(job: str) -> list[Any]:
        out: list[list[Any]] = [[], []]

        def rank(r: int) -> None:
            out[r] = read(ds, target, num_consumers=2, consumer_index=r, job_name=job)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        return out[0] + out[1]

    CALLS.clear()
    assert sorted(int(e["x"][0]) for e in ranks("a")) == list(range(120))
    poll_for(lambda: (folder(tmp_path) / "manifest.json").exists(), timeout=10)
    CALLS.clear()
    assert sorted(int(e["x"][0]) for e in ranks("b")) == list(range(120))
    assert not CALLS


def test_a_changed_function_writes_its_own_snapshot(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=1).target
    read(pipeline(tmp_path, 50), target)
    changed = zd.Dataset.range(50).map(lambda x: x + 1).snapshot(str(tmp_path))
    assert sorted(int(x) for x in read(changed, target)) == list(range(1, 51))
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


def test_two_jobs_at_once_write_one_snapshot(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=2).target
    ds = pipeline(tmp_path, 200)
    out: dict[str, list[Any]] = {}

    def job(name: str) -> None:
        out[name] = read(ds, target, job_name=name)

    threads = [threading.Thread(target=job, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for name in ("a", "b"):
        assert sorted(int(e["x"][0]) for e in out[name]) == list(range(200))
    written = folder(tmp_path)
    poll_for(lambda: (written / "manifest.json").exists(), timeout=10)
    loaded = [int(e["x"][0]) for e in zd.Dataset.load(str(written))]
    assert loaded == list(range(200))
    listed = {
        c["name"] for c in json.loads((written / "manifest.json").read_text())["chunks"]
    }

    # A split's second writer may commit after the manifest: its report removes it.
    def on_disk() -> set[str]:
        return {p.name for p in (written / "chunks").iterdir()}

    poll_for(lambda: on_disk() == listed, timeout=10)
    assert on_disk() == listed


def test_the_job_status_shows_writing_then_reading(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=1).target
    ds = pipeline(tmp_path, 100).apply(
        service.distribute("distributed_epoch", target, job_name="j")
    )
    it = iter(ds)
    next(it)
    status = service.get_status(target)
    [job] = status["jobs"]
    assert job["snapshot"]["state"] == "writing"
    assert re.search(r"SNAPSHOT.*\n.*writing \d+/\d+", render(status, target))
    assert job["snapshot"]["path"] == str(folder(tmp_path))
    assert job["snapshot"]["total"] > 1
    list(it)
    poll_for(
        lambda: service.get_status(target)["jobs"][0]["snapshot"]["state"] == "reading",
        timeout=10,
    )
    status = service.get_status(target)["jobs"][0]["snapshot"]
    assert status["written"] == status["total"]


@pytest.mark.parametrize(
    ("ds", "options", "message"),
    [
        (
            lambda p: zd.Dataset.range(9).cache(),
            {},
            "cache() in memory before distribute cannot serve distributed_epoch",
        ),
        (
            lambda p: zd.Dataset.range(9).snapshot(p),
            {"exactly_once": False},
            "needs exactly_once=True",
        ),
        (
            lambda p: zd.Dataset.range(9).snapshot(p).map(abs).snapshot(p),
            {},
            "writes one snapshot",
        ),
    ],
)
def test_reads_that_cannot_write_it_whole_are_refused(
    cluster: Callable[..., Cluster],
    tmp_path: Path,
    ds: Callable[[str], zd.Dataset],
    options: dict[str, Any],
    message: str,
):
    target = cluster(num_workers=1).target
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        read(ds(str(tmp_path)), target, **options)


def test_a_snapshot_in_an_s3_bucket_is_written_then_read(
    cluster: Callable[..., Cluster],
    bucket: str,  # noqa: F811 (the fixture)
):
    import fsspec

    # Each object costs this moto a new s3fs session (~0.2 s): 4 elements
    # make 4 chunks of one; the workers are given time to beat.
    target = cluster(num_workers=2, worker_timeout_ms=10_000).target
    url = f"{bucket}/snaps"
    ds = zd.Dataset.range(4).map(expensive).snapshot(url)
    CALLS.clear()
    assert sorted(int(e["x"][0]) for e in read(ds, target)) == list(range(4))
    [written] = fsspec.filesystem("s3").ls(url)
    poll_for(lambda: fsspec.filesystem("s3").exists(f"{written}/manifest.json"))
    CALLS.clear()
    assert sorted(int(e["x"][0]) for e in read(ds, target)) == list(range(4))
    assert not CALLS
    loaded = zd.Dataset.load(f"s3://{written}")
    assert [int(e["x"][0]) for e in loaded] == list(range(4))


def test_a_snapshot_written_locally_is_read_by_jobs_and_the_other_way(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=2).target
    local_path, service_path = tmp_path / "local", tmp_path / "service"
    expected = list(pipeline(local_path))  # written split by split, as jobs cut it
    CALLS.clear()
    assert_bit_equal(by_value(read(pipeline(local_path), target)), expected)
    assert not CALLS, "the job ran the map over a finished local snapshot"
    read(pipeline(service_path), target)
    poll_for(lambda: (folder(service_path) / "manifest.json").exists(), timeout=10)
    CALLS.clear()
    assert_bit_equal(list(pipeline(service_path)), expected)
    assert not CALLS, "a local pass ran the map over a finished job's snapshot"


def test_a_repeat_below_the_snapshot_is_refused_naming_it(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    ds = zd.Dataset.range(9).repeat(2).map(expensive).snapshot(str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="repeat before a snapshot"):
        read(ds, cluster(num_workers=1).target)


def test_a_file_cache_before_distribute_is_a_snapshot_at_its_filename(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster(num_workers=2).target
    ds = zd.Dataset.range(80).map(expensive).cache(str(tmp_path / "train"))
    CALLS.clear()
    assert sorted(int(e["x"][0]) for e in read(ds, target)) == list(range(80))
    poll_for(lambda: (tmp_path / "train" / "manifest.json").exists(), timeout=10)
    CALLS.clear()
    assert sorted(int(e["x"][0]) for e in read(ds, target)) == list(range(80))
    assert [int(e["x"][0]) for e in ds] == list(range(80))  # locally too
    assert not CALLS


@pytest.mark.parametrize("kind", ["memory", "snapshot"])
def test_under_parallel_epochs_each_worker_keeps_it_as_a_local_pass_does(
    cluster: Callable[..., Cluster], tmp_path: Path, kind: str
):
    target = cluster(num_workers=1).target
    made = zd.Dataset.range(20).map(expensive)
    ds = made.cache() if kind == "memory" else made.snapshot(str(tmp_path))
    CALLS.clear()
    read = ds.repeat(3).apply(service.distribute("parallel_epochs", target))
    with iter(read) as it:
        got = [int(next(it)["x"][0])]
        [job] = service.get_status(target)["jobs"]
        assert job["snapshot"] is None  # no job writes it: the worker's pass does
        got += [int(e["x"][0]) for e in it]
    assert sorted(got) == sorted(list(range(20)) * 3)
    assert sum(CALLS.values()) == 20  # the worker's later epochs read what it kept


def big(x: Any) -> Any:
    return np.full(4_096, x, np.int32)  # 16 KiB


def test_a_full_disk_fails_the_snapshot_and_the_read_goes_on(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    from tests.dataset.test_snapshot import mounted_tmpfs

    target = cluster(num_workers=2).target
    folder = tmp_path / "small"
    with mounted_tmpfs(folder, "size=256k"):  # 300 elements of 16 KiB do not fit
        ds = zd.Dataset.range(300).map(big).snapshot(str(folder))
        assert sorted(int(e[0]) for e in read(ds, target)) == list(range(300))
        [save] = [
            s
            for s in service.get_status(target)["saves"]
            if s["path"].startswith(str(folder))
        ]
        assert save["state"] == "failed"
        assert "could not write a chunk" in save["error"]
        assert "No space left" in save["error"] or "full" in save["error"]
        assert not (Path(save["path"]) / "manifest.json").exists()
