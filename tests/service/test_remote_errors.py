"""A pipeline that fails on a worker fails the trainer's read at once, saying where.

A file gone since the dataset was built raises ``NotFoundError`` naming it (not
taken for a task not started yet, which the reader would ask for again and
again); a user function's exception names the op, the worker and the remote
traceback.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
from pathlib import Path

import pytest

import zmqdata as zd
from zmqdata import errors, service

pytestmark = pytest.mark.timeout(60)

FAST_S = 10.0
"""A failure reaches the trainer well within this (it waited 110 s before)."""


def shard(path: Path, first: int, count: int) -> str:
    """A WebDataset shard of ``count`` samples ``{"n": b"<i>"}`` from ``first``."""
    with tarfile.open(path, "w") as tar:
        for i in range(first, first + count):
            data = str(i).encode()
            info = tarfile.TarInfo(f"s{i:04d}.n")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.fixture
def one_shard_gone(tmp_path: Path) -> tuple[zd.Dataset, str]:
    """Two shards read as one dataset, the second removed after it was built."""
    paths = [shard(tmp_path / f"{i}.tar", i * 4, 4) for i in range(2)]
    ds = zd.Dataset.from_webdataset(paths)
    os.remove(paths[1])
    return ds, paths[1]


@pytest.mark.parametrize("mode", ["distributed_epoch", "parallel_epochs"])
def test_a_file_removed_after_the_build_is_not_found_in_seconds(
    cluster, one_shard_gone, mode
):
    c = cluster(num_workers=1)
    ds, gone = one_shard_gone
    start = time.monotonic()
    with pytest.raises(errors.NotFoundError, match=re.escape(gone)):
        list(ds.apply(service.distribute(mode, c.target)))
    assert time.monotonic() - start < FAST_S


def test_a_file_removed_is_skipped_under_ignore_errors(cluster, one_shard_gone):
    c = cluster(num_workers=1)
    ds, _ = one_shard_gone
    read = ds.ignore_errors().apply(service.distribute("parallel_epochs", c.target))
    assert sorted(int(sample["n"]) for sample in read) == [0, 1, 2, 3]


def parse(element: dict[str, int]) -> int:
    return element["b"]  # the line the remote traceback points to


@pytest.mark.parametrize("parallel", [None, 2])
def test_a_failing_function_names_op_worker_and_traceback(cluster, parallel):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(4).map(lambda i: {"a": i}).map(parse, parallel)
    start = time.monotonic()
    with pytest.raises(errors.InvalidArgumentError) as raised:
        list(ds.apply(service.distribute("parallel_epochs", c.target)))
    assert time.monotonic() - start < FAST_S
    text = str(raised.value)
    first, *lines = text.splitlines()
    assert first.startswith(f"worker {c.workers[0].address} (task ")
    assert first.endswith("map(parse) raised KeyError: 'b'")
    assert f'File "{__file__}", line ' in text
    assert any(line.endswith(", in parse") for line in lines)
    assert '    return element["b"]  # the line the remote traceback points to' in lines
    assert lines[-2:] == ["KeyError: 'b'", "zmqdata op: map(parse)"]


def huge(element: int) -> None:
    raise ValueError("x" * 1_000_000)


def test_a_huge_message_is_cut(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(2).map(huge)
    with pytest.raises(errors.InvalidArgumentError) as raised:
        list(ds.apply(service.distribute("parallel_epochs", c.target)))
    text = str(raised.value)
    assert len(text) < errors.MAX_MESSAGE_CHARS + errors.MAX_TRACEBACK_CHARS + 500
    assert "map(huge) raised ValueError: xxx" in text
    assert "characters cut]" in text
    assert text.endswith("zmqdata op: map(huge)")
