"""``cache`` and ``snapshot`` in a local pass (``ops/cache_local.py``): tf.data's semantics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, assert_state_roundtrip, ints
from tests.helpers import poll_for
from zmqdata._dataset import snapshot
from zmqdata._dataset.ops import cache, cache_local
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

pytestmark = pytest.mark.timeout(60)

N = 12
KINDS = ["memory", "file", "snapshot", "snapshot-zstd"]


def element(x: Any) -> Any:
    """A structure of every kind of leaf the save codec keeps."""
    i = int(x)
    return {
        "x": np.full((2, i % 3), i, np.float32),
        "id": (np.int64(i), f"e{i}", bytes([i])),
        "flag": np.bool_(i % 2),
    }


class Counted:
    """A map function that counts its calls (runs of the ops before ``cache``)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: Any) -> Any:
        self.calls += 1
        return element(x)


def kept(ds: zd.Dataset, kind: str, place: str) -> zd.Dataset:
    if kind == "memory":
        return ds.cache()
    if kind == "file":
        return ds.cache(os.path.join(place, "train"))
    return ds.snapshot(place, compression="zstd" if kind.endswith("zstd") else None)


def directory(ds: zd.Dataset) -> str:
    return cache.directory(ds._node)


def listing(ds: zd.Dataset) -> list[str]:
    """What the save of ``ds`` holds: its files, and its chunks' ([] in memory)."""
    root = Path(directory(ds))
    if cache.in_memory(ds._node) or not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def finished_listing(ds: zd.Dataset) -> list[str]:
    """What a finished save holds: its manifest's chunks, nothing else."""
    names = [c["name"] for c in snapshot.read_manifest(directory(ds))["chunks"]]
    return sorted(["chunks", "manifest.json", *(f"chunks/{n}" for n in names)])


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk per element or two: writes of several chunks."""
    monkeypatch.setattr(cache_local, "CHUNK_BYTES", 40)


@pytest.mark.parametrize("kind", KINDS)
def test_passes_equal_the_uncached_pipeline_and_later_ones_run_nothing(
    kind: str, tmp_path: Path, small_chunks: None
) -> None:
    fn = Counted()
    ds = kept(zd.Dataset.range(N).map(fn), kind, str(tmp_path))
    expected = list(zd.Dataset.range(N).map(element))
    first = list(ds)
    assert fn.calls == N
    second, third = list(ds), list(ds.repeat(2))
    assert fn.calls == N  # read back: the map ran in the first pass only
    for got in (first, second, third[:N], third[N:]):
        assert_bit_equal(got, expected)
    if kind != "memory":
        assert listing(ds) == finished_listing(ds)
        assert len(snapshot.read_manifest(directory(ds))["chunks"]) > 2
        assert_bit_equal(list(zd.Dataset.load(directory(ds))), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_repeat_after_cache_reads_the_later_epochs(kind: str, tmp_path: Path) -> None:
    fn = Counted()
    ds = kept(zd.Dataset.range(N).map(fn), kind, str(tmp_path)).repeat(3)
    assert [e["id"][0] for e in ds] == list(range(N)) * 3
    assert fn.calls == N


def cut_short_by_close(ds: zd.Dataset) -> None:
    it = iter(ds)
    next(it)
    it.close()


def cut_short_by_drop(ds: zd.Dataset) -> None:
    for _ in ds:
        break


def cut_short_by_take(ds: zd.Dataset) -> None:
    assert len(list(ds.take(N - 1))) == N - 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "cut", [cut_short_by_close, cut_short_by_drop, cut_short_by_take]
)
def test_a_pass_cut_short_keeps_nothing(
    kind: str, cut: Callable[[zd.Dataset], None], tmp_path: Path, small_chunks: None
) -> None:
    fn = Counted()
    ds = kept(zd.Dataset.range(N).map(fn), kind, str(tmp_path))
    cut(ds)
    assert listing(ds) in ([], ["chunks"])  # no chunk, no marker, no manifest
    calls = fn.calls
    assert len(list(ds)) == N
    assert fn.calls == calls + N  # the next pass runs the map, and keeps it all
    assert len(list(ds)) == N
    assert fn.calls == calls + N


@pytest.mark.parametrize("kind", KINDS)
def test_a_pass_whose_input_raises_keeps_nothing(kind: str, tmp_path: Path) -> None:
    fail = [True]

    def fragile(x: Any) -> Any:
        if int(x) == 5 and fail[0]:
            raise ValueError("flaky")
        return x

    ds = kept(zd.Dataset.range(N).map(fragile), kind, str(tmp_path))
    with pytest.raises(ValueError, match="flaky"):
        list(ds)
    assert listing(ds) in ([], ["chunks"])
    fail[0] = False
    assert ints(ds) == list(range(N))
    fail[0] = True
    assert ints(ds) == list(range(N))  # kept: the map does not run


def tripled(path: Path) -> zd.Dataset:
    return zd.Dataset.range(N).map(lambda x: x * 3).snapshot(str(path))


def test_two_concurrent_writers_leave_one_finished_snapshot(
    tmp_path: Path, small_chunks: None
) -> None:
    """Two passes at once: one writes, the other passes its input through."""
    barrier = threading.Barrier(2, timeout=10)
    got: list[list[int]] = []

    def run() -> None:  # each its own Dataset: equal pipelines, one fingerprint
        with iter(tripled(tmp_path)) as it:
            barrier.wait()
            got.append(ints(it))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert got == [[x * 3 for x in range(N)]] * 2
    ds = tripled(tmp_path)
    assert listing(ds) == finished_listing(ds)
    assert ints(zd.Dataset.load(directory(ds))) == [x * 3 for x in range(N)]


def test_two_passes_at_once_over_a_memory_cache_the_first_to_end_fills_it() -> None:
    fn = Counted()
    ds = zd.Dataset.range(N).map(fn).cache()
    first, second = iter(ds), iter(ds)
    next(first)
    assert len(list(second)) == N  # ends first: fills the cache
    assert len(list(first)) == N - 1
    assert fn.calls == 2 * N
    assert len(list(ds)) == N
    assert fn.calls == 2 * N


SCRIPT = """
import json, os, sys, threading
import zmqdata as zd
from zmqdata._dataset.ops import cache, cache_local

cache_local.CHUNK_BYTES = 1  # a chunk per element
offset = 3


def scaled(n):
    def fn(x):
        if int(x) == int(os.environ.get("BLOCK_AT", "-1")):
            threading.Event().wait()  # until killed
        return x * n + offset
    return fn


ds = zd.Dataset.range(20).map(scaled(7)).map(lambda x: x - 1).snapshot(sys.argv[1])
print(json.dumps(ds._node.args["fingerprint"]), flush=True)
got = [int(x) for x in ds]
print(json.dumps([got, os.path.exists(os.path.join(cache.directory(ds._node),
                  "manifest.json"))]), flush=True)
"""
EXPECTED = [x * 7 + 3 - 1 for x in range(20)]


def run_script(script: Path, path: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def finish(process: subprocess.Popen[str]) -> list[Any]:
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    return [json.loads(line) for line in out.splitlines()]


def test_an_interrupted_write_is_taken_over_by_a_later_run(tmp_path: Path) -> None:
    """A writer killed mid-write: a run while it lives passes through, one after takes over.

    The fingerprint is the same in every process running the script (a
    lambda, a closure over a number).
    """
    script = tmp_path / "pipeline.py"
    script.write_text(textwrap.dedent(SCRIPT))
    saves = tmp_path / "saves"
    writer = run_script(script, saves, BLOCK_AT="5")
    try:
        assert writer.stdout is not None
        fingerprint = json.loads(writer.stdout.readline())
        chunks = saves / fingerprint / "chunks"
        poll_for(lambda: chunks.exists() and len(os.listdir(chunks)) >= 5, timeout=20)
        [seen, (got, finished)] = finish(run_script(script, saves))
        assert (seen, got, finished) == (fingerprint, EXPECTED, False)  # passed through
        marker = snapshot.saving_marker(str(saves / fingerprint))
        assert marker is not None
        assert marker["pid"] == writer.pid
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=10)
    [seen, (got, finished)] = finish(run_script(script, saves))
    assert (seen, got, finished) == (fingerprint, EXPECTED, True)
    folder = str(saves / fingerprint)
    listed = {c["name"] for c in snapshot.read_manifest(folder)["chunks"]}
    assert set(os.listdir(chunks)) == listed  # the killed writer's chunks: removed
    assert ints(zd.Dataset.load(folder)) == EXPECTED


def test_a_marker_of_unknown_liveness_is_left_alone(tmp_path: Path) -> None:
    """A ``distributed_save``'s marker (no host): the pass writes nothing."""
    ds = zd.Dataset.range(N).snapshot(str(tmp_path))
    snapshot.begin(directory(ds), "service-save")
    assert ints(ds) == list(range(N))
    assert listing(ds) == ["SAVING"]
    marker = snapshot.saving_marker(directory(ds))
    assert marker is not None
    assert marker["save_id"] == "service-save"


def build(offset: int, size: int = 5, op: str = "+") -> zd.Dataset:
    if op == "+":
        return zd.Dataset.range(size).map(lambda x: x + offset)
    return zd.Dataset.range(size).map(lambda x: x - offset)


def fingerprint(ds: zd.Dataset) -> str:
    return str(ds.snapshot("/s")._node.args["fingerprint"])


def test_the_fingerprint_is_of_the_functions_closures_and_arguments(
    tmp_path: Path,
) -> None:
    same = fingerprint(build(1))
    assert fingerprint(build(1)) == same
    assert fingerprint(build(2)) != same  # a closure's value
    assert fingerprint(build(1, size=6)) != same  # an argument
    assert fingerprint(build(1, op="-")) != same  # a function's code
    first = build(1).snapshot(str(tmp_path))
    second = build(2).snapshot(str(tmp_path))
    assert (ints(first), ints(second)) == ([1, 2, 3, 4, 5], [2, 3, 4, 5, 6])
    assert (ints(first), ints(second)) == ([1, 2, 3, 4, 5], [2, 3, 4, 5, 6])
    assert sorted(os.listdir(tmp_path)) == sorted(
        [first._node.args["fingerprint"], second._node.args["fingerprint"]]
    )


def test_a_file_cache_of_another_pipeline_is_refused(tmp_path: Path) -> None:
    filename = str(tmp_path / "train")
    assert ints(zd.Dataset.range(3).cache(filename)) == [0, 1, 2]
    with pytest.raises(FailedPreconditionError, match="remove it") as raised:
        iter(zd.Dataset.range(4).cache(filename))
    assert filename in str(raised.value)


def test_load_reads_a_finished_snapshot_with_its_spec(tmp_path: Path) -> None:
    ds = zd.Dataset.range(N).batch(5).snapshot(str(tmp_path))
    expected = [b.tolist() for b in ds]
    loaded = zd.Dataset.load(directory(ds))
    assert loaded.element_spec == zd.Dataset.range(N).batch(5).element_spec
    assert [b.tolist() for b in loaded] == expected
    manifest = snapshot.read_manifest(directory(ds))
    assert manifest["dataset_id"] == ds._node.args["fingerprint"]
    assert manifest["compression"] is None  # AUTO: raw on a local path


@pytest.fixture
def memory_root() -> Iterator[str]:
    root = f"memory://zmqdata-cache-{uuid.uuid4().hex}"
    yield root
    memory = fsspec.filesystem("memory")
    if memory.exists(root):
        memory.rm(root, recursive=True)


def test_fsspec_urls_hold_snapshots_and_file_caches(
    memory_root: str, small_chunks: None
) -> None:
    fn = Counted()
    ds = zd.Dataset.range(N).map(fn)
    persisted = [ds.snapshot(memory_root), ds.cache(f"{memory_root}/cache")]
    expected = list(zd.Dataset.range(N).map(element))
    for each in persisted:
        assert_bit_equal(list(each), expected)
        calls = fn.calls
        assert_bit_equal(list(each), expected)
        assert fn.calls == calls
        assert_bit_equal(list(zd.Dataset.load(directory(each))), expected)
    manifest = snapshot.read_manifest(directory(persisted[0]))
    assert manifest["compression"] == "zstd"  # AUTO: zstd on an object store


def test_a_cut_short_pass_on_an_fsspec_url_keeps_nothing(
    memory_root: str, small_chunks: None
) -> None:
    ds = zd.Dataset.range(N).snapshot(memory_root)
    cut_short_by_close(ds)
    memory = fsspec.filesystem("memory")
    assert memory.find(directory(ds)) == []
    assert ints(ds) == list(range(N))
    assert snapshot.read_manifest(directory(ds))["cardinality"] == N


@pytest.mark.parametrize("kind", KINDS)
def test_positions_restore_while_writing_and_while_reading(
    kind: str, tmp_path: Path, small_chunks: None
) -> None:
    ds = kept(zd.Dataset.range(N).map(element), kind, str(tmp_path))
    writing = assert_state_roundtrip(ds)  # the first pass writes: states of the map
    assert_bit_equal(assert_state_roundtrip(ds), writing)  # then reads: positions


@pytest.mark.parametrize("kind", KINDS)
def test_a_restored_writing_pass_passes_its_input_through_keeping_nothing(
    kind: str, tmp_path: Path
) -> None:
    fn = Counted()
    ds = kept(zd.Dataset.range(N).map(fn), kind, str(tmp_path))
    with iter(ds) as it:
        for _ in range(4):
            next(it)
        state = it.save()
    with iter(ds) as restored:
        restored.restore(state)
        assert [int(e["id"][0]) for e in restored] == list(range(4, N))
    assert listing(ds) in ([], ["chunks"])
    assert len(list(ds)) == len(list(ds)) == N  # written, then read
    assert fn.calls == 4 + (N - 4) + N


def test_a_read_position_restores_where_the_cache_is_not_filled() -> None:
    """A cache in memory, restored in a new process: made again, then skipped to."""
    ds = zd.Dataset.range(N).cache()
    list(ds)
    with iter(ds) as it:
        next(it), next(it)
        state = it.save()
    with iter(zd.Dataset.range(N).cache()) as elsewhere:
        elsewhere.restore(state)
        assert ints(elsewhere) == list(range(2, N))


@pytest.mark.parametrize(
    ("make", "error", "named"),
    [
        (lambda ds: ds.cache(123), TypeError, "123"),
        (lambda ds: ds.snapshot(""), InvalidArgumentError, "''"),
        (lambda ds: ds.snapshot(None), InvalidArgumentError, "None"),
        (lambda ds: ds.snapshot("/s", compression="gzip"), ValueError, "'gzip'"),
    ],
)
def test_bad_arguments_raise_naming_the_value(
    make: Callable[[zd.Dataset], Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        make(zd.Dataset.range(3))


def test_an_element_the_save_cannot_keep_raises_naming_it_and_keeps_nothing(
    tmp_path: Path,
) -> None:
    ds = zd.Dataset.range(3).map(lambda x: {int(x): x}).snapshot(str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="element 0"):
        list(ds)
    assert listing(ds) in ([], ["chunks"])
    assert len(list(zd.Dataset.range(3).map(lambda x: {int(x): x}).cache())) == 3


def test_a_cache_in_memory_takes_functions_that_cannot_be_pickled():
    import threading

    lock = threading.Lock()  # cloudpickle cannot pickle a lock: no fingerprint
    ds = zd.Dataset.range(3).map(lambda x: (lock, x)[1]).cache()
    assert [int(x) for x in ds] == [0, 1, 2]
