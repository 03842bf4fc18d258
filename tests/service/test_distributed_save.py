"""``service.distributed_save`` on an in-process cluster, then ``Dataset.load``.

The elements saved are the local run's (bit-exact, as a multiset: splits are
written in any order); a worker stopped mid-save loses and repeats nothing; a
pipeline that raises, a full disk and a path that cannot be a folder fail
with errors naming why; the saves show in ``get_status`` and ``zmqdata
status``; a save to an S3-compatible server (moto, on loopback) loads, and a
second save there is refused. The chaos test (kill -9 of processes) is
``test_chaos_saves.py``.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.cli.procs import run
from tests.dataset.checks import assert_bit_equal, ints, to_python
from tests.dataset.test_load import bucket  # noqa: F401 (an S3 server's bucket)
from tests.dataset.test_snapshot import mounted_tmpfs
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata.errors import FailedPreconditionError, PermissionDeniedError

pytestmark = pytest.mark.timeout(60)


def save_at(target: str, path: str) -> dict[str, Any]:
    """The dispatcher's status of the save to ``path``."""
    saves = service.get_status(target, timeout_s=5)["saves"]
    [save] = [s for s in saves if s["path"] == path]
    return save


def by_value(elements: list[Any]) -> list[Any]:
    """``elements`` in one order whatever order they came in."""
    return sorted(elements, key=lambda e: repr(to_python(e)))


def saved_and_loaded(target: str, ds: zd.Dataset, path: str, **options: Any) -> Any:
    """What ``Dataset.load`` reads of ``ds`` saved to ``path`` (``wait=True``)."""
    service.distributed_save(ds, path, target, wait=True, **options)
    return list(zd.Dataset.load(path))


@pytest.mark.parametrize("compression", ["AUTO", None])
def test_a_batched_pipeline_saves_what_a_local_run_gives(
    cluster: Callable[..., Cluster], tmp_path: Path, compression: str | None
):
    # 2000 elements: splits of 35 (5 batches), the last one 5 (a partial batch).
    ds = zd.Dataset.range(2_000).map(lambda i: np.full(3, i, np.int32)).batch(7)
    path = str(tmp_path / "save")
    target = cluster(num_workers=2).target
    got = saved_and_loaded(target, ds, path, compression=compression)
    assert_bit_equal(by_value(got), by_value(list(ds)))
    assert zd.Dataset.load(path).cardinality() == 286


def test_structures_and_strings_come_back_bit_exact(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    def structured(i: Any) -> dict[str, Any]:
        return {
            "x": np.arange(int(i) % 5, dtype=np.float32),
            "name": f"e{i}",
            "pair": (np.int64(i), b"raw%d" % i),
            "words": np.array([f"w{i}"] * (int(i) % 3), dtype=str),
        }

    ds = zd.Dataset.range(300).map(structured)
    got = saved_and_loaded(cluster(num_workers=2).target, ds, str(tmp_path / "s"))
    assert_bit_equal(by_value(got), by_value(list(ds)))


def test_a_worker_stopped_mid_save_loses_and_repeats_nothing(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    def slowly(i: Any) -> Any:
        threading.Event().wait(0.001)  # the pipeline's own work
        return i

    two, path = cluster(num_workers=2), str(tmp_path / "save")
    ds = zd.Dataset.range(2_000).map(slowly)
    service.distributed_save(ds, path, two.target)
    poll_for(lambda: save_at(two.target, path)["chunks"] >= 5, timeout=20)
    assert save_at(two.target, path)["state"] == "running"
    two.workers[0].stop()
    poll_for(lambda: save_at(two.target, path)["state"] != "running", timeout=30)
    save = save_at(two.target, path)
    assert (save["state"], save["elements"]) == ("finished", 2_000), save
    assert Counter(ints(zd.Dataset.load(path))) == Counter(range(2_000))


def test_a_pipeline_that_raises_fails_the_save_naming_the_error(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    def bad(i: Any) -> Any:
        if i == 50:
            raise ValueError("element 50 is bad")
        return i

    target, path = cluster().target, str(tmp_path / "save")
    with pytest.raises(
        FailedPreconditionError,
        match=f"the save to {re.escape(repr(path))} failed: .*ValueError: element 50",
    ):
        service.distributed_save(
            zd.Dataset.range(100).map(bad), path, target, wait=True
        )
    save = save_at(target, path)
    assert save["state"] == "failed", save
    assert "ValueError: element 50 is bad" in save["error"], save
    assert not (tmp_path / "save" / "manifest.json").exists()


def test_a_full_disk_fails_the_save_and_leaves_nothing_load_accepts(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target, folder = cluster().target, tmp_path / "small"
    noise = zd.Dataset.range(64).map(  # 64 KiB each, incompressible: 4 MiB
        lambda i: np.random.default_rng(int(i)).integers(0, 256, 1 << 16, np.uint8)
    )
    with mounted_tmpfs(folder, "size=1m"):
        path = str(folder / "save")
        with pytest.raises(FailedPreconditionError, match="No space left on device"):
            service.distributed_save(noise, path, target, compression=None, wait=True)
        assert not (folder / "save" / "manifest.json").exists()
        with pytest.raises(
            FailedPreconditionError, match=f"the save at {re.escape(path)} is not"
        ):
            zd.Dataset.load(path)
    save = save_at(target, path)
    assert save["state"] == "failed", save
    assert "No space left on device" in save["error"], save


def test_a_path_under_a_regular_file_is_refused_at_once(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target = cluster().target
    (tmp_path / "file").write_text("x")
    path = str(tmp_path / "file" / "save")
    with pytest.raises(
        PermissionDeniedError,
        match=f"cannot write the save at {re.escape(path)}: Not a directory",
    ):
        service.distributed_save(zd.Dataset.range(3), path, target)
    assert service.get_status(target)["saves"] == []


def test_zmqdata_status_shows_the_finished_save(
    cluster: Callable[..., Cluster], tmp_path: Path
):
    target, path = cluster().target, str(tmp_path / "save")
    service.distributed_save(zd.Dataset.range(10), path, target, wait=True)
    save = save_at(target, path)
    shown = run("status", "--dispatcher", target)
    assert shown.returncode == 0, shown.stderr
    section = shown.stdout.split("\nSAVES\n", 1)[1]
    row = rf"^{save['save_id']}\s+{re.escape(path)}\s+\S+\s+finished\s+(\d+)/\1\s+10\s"
    assert re.search(row, section, re.MULTILINE), shown.stdout


@pytest.mark.parametrize(
    ("args", "options", "error", "named"),
    [
        ((zd.Dataset.range(3), ""), {}, ValueError, "''"),
        ((zd.Dataset.range(3), "p"), {"compression": "gzip"}, ValueError, "'gzip'"),
        ((zd.Dataset.range(3), "p"), {"wait": 1}, TypeError, "got 1"),
        (([1, 2], "p"), {}, TypeError, r"\[1, 2\]"),
    ],
)
def test_bad_arguments_are_named(
    cluster: Callable[..., Cluster],
    args: tuple[Any, str],
    options: dict[str, Any],
    error: type[Exception],
    named: str,
):
    target = cluster().target
    with pytest.raises(error, match=named):
        service.distributed_save(*args, target, **options)
    assert service.get_status(target)["saves"] == []


def test_a_save_to_s3_loads_and_a_second_save_there_is_refused(
    cluster: Callable[..., Cluster],
    bucket: str,  # noqa: F811 (the fixture)
):
    import fsspec

    # Each object costs this moto a new s3fs session (~0.2 s, GIL held): batches
    # of 50 make 6 chunks, and the workers are given time to beat.
    two = cluster(num_workers=2, worker_timeout_ms=10_000)
    url = f"{bucket}/saves/first"
    ds = zd.Dataset.range(300).map(lambda i: (i, f"e{i}")).batch(50)
    got = saved_and_loaded(two.target, ds, url)
    assert_bit_equal(by_value(got), by_value(list(ds)))
    s3 = fsspec.filesystem("s3")
    files = sorted(s3.find(url))
    assert [f.rsplit("/", 2)[-2] for f in files] == ["chunks"] * 6 + ["first"], files
    manifest = s3.cat(f"{url}/manifest.json")
    with pytest.raises(FailedPreconditionError, match=f"{re.escape(url)}' holds save"):
        service.distributed_save(zd.Dataset.range(5), url, two.target)
    assert (sorted(s3.find(url)), s3.cat(f"{url}/manifest.json")) == (files, manifest)
    save = save_at(two.target, url)
    assert (save["state"], save["chunks"], save["elements"]) == ("finished", 6, 6)
