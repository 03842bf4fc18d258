"""Chaos: ``distributed_save`` goes on through kill -9 of workers and the dispatcher.

Every process is real (``test_chaos_formats.Cluster``: a fault-tolerant
``zmqdata dispatcher`` with a journal, worker timeout 0.5 s, and three
``zmqdata worker`` daemons). Each trial saves ``TOTAL`` elements, each an
array of its own size whose every value is the element's id, split by the
dispatcher into about 65 splits (about 20 per worker), to a folder of its
own, without waiting. While the save runs a random worker is killed -9 (a new
one starts); in odd trials the dispatcher is killed -9 too, later, and
restarted on its port and journal: the same save goes on. The save must end
``finished`` within ``SAVE_DEADLINE_S``; its manifest lists one chunk per
split, each on disk, no temporary file is left; ``Dataset.load`` yields every
id exactly once, read here and read through ``distributed_epoch``.

``ZMQDATA_CHAOS_TRIALS`` sets the number of trials (default 2: one of each);
``ZMQDATA_CHAOS_SEED`` the faults drawn. A dispatcher killed after the last
chunk is in but before the manifest is written is not timed here.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.test_chaos_formats import TOTAL, Cluster, exactly_once, within
from tests.service.test_distributed_save import save_at
from zmqdata import service

pytestmark = pytest.mark.slow
TRIALS = int(os.environ.get("ZMQDATA_CHAOS_TRIALS", "2"))
SEED = os.environ.get("ZMQDATA_CHAOS_SEED", "27")
PACE_S = 0.004
"""Each element's work on a worker: the save lasts a few seconds."""
SAVE_DEADLINE_S = 60.0
READ_DEADLINE_S = 30.0


def dataset() -> zd.Dataset:
    """Element ``i``: ``1 + i % 37`` values, each ``i`` (built slowly)."""
    pace = PACE_S

    def make(i: Any) -> np.ndarray:
        threading.Event().wait(pace)  # the pipeline's own work
        return np.full(1 + int(i) % 37, i, np.int64)

    return zd.Dataset.range(TOTAL).map(make)


def id_of(element: np.ndarray) -> int:
    """The element's id, once its size and values are checked to be its own."""
    i = int(element[0])
    assert element.shape == (1 + i % 37,), element
    assert (element == i).all(), element
    return i


def status_of(cluster: Cluster, path: Path) -> dict[str, Any]:
    """The dispatcher's status of the save to ``path``."""
    return save_at(cluster.target, str(path))


def wait_for(cluster: Cluster, what: str, predicate: Any, timeout: float) -> None:
    """``poll_for(predicate)``, failing with the dispatcher's status."""
    try:
        poll_for(predicate, timeout=timeout, interval=0.02)
    except AssertionError as error:
        raise AssertionError(f"{what}: {error}\nstatus: {cluster.describe()}") from None


def running_at(cluster: Cluster, path: Path, chunks: int) -> dict[str, Any]:
    """The status of the save to ``path`` once ``chunks`` are in, still running."""
    wait_for(
        cluster,
        f"{chunks} chunks in",
        lambda: status_of(cluster, path)["chunks"] >= chunks,
        SAVE_DEADLINE_S,
    )
    save = status_of(cluster, path)
    assert save["state"] == "running", f"ended before a kill at {chunks}: {save}"
    return save


def save_while_processes_die(
    cluster: Cluster, path: Path, rng: random.Random, kill_dispatcher: bool
) -> str:
    """Saves ``dataset()`` to ``path`` while a worker (and the dispatcher) die."""
    service.distributed_save(dataset(), str(path), cluster.target)
    started = status_of(cluster, path)
    splits = started["splits"]
    assert splits >= 6 * len(cluster.workers), started
    save = running_at(cluster, path, rng.randrange(splits // 8, splits // 3))
    cluster.kill_worker(rng)
    done = [f"worker killed at {save['chunks']}/{splits}"]
    if kill_dispatcher:
        at = rng.randrange(save["chunks"] + 2, 2 * splits // 3)
        save = running_at(cluster, path, at)
        cluster.restart_dispatcher()
        done.append(f"dispatcher killed at {save['chunks']}/{splits}")
    wait_for(
        cluster,
        f"the save to {path} ({', '.join(done)})",
        lambda: status_of(cluster, path)["state"] != "running",
        SAVE_DEADLINE_S,
    )
    save = status_of(cluster, path)
    assert save["state"] == "finished", save
    assert save["save_id"] == started["save_id"], (started, save)
    assert (save["chunks"], save["elements"]) == (splits, TOTAL), save
    return ", ".join(done)


def check_files(path: Path, splits: int) -> None:
    """One chunk per split in the manifest, each on disk; no marker, no temporary.

    Chunks not listed (a killed worker's, or a second writer's of a split handed
    out again after the dispatcher's restart) may lie there. A second writer
    still at work when the save finished drops its temporary file once its
    heartbeat tells it the save ended: a temporary may stay that long.
    """
    manifest = json.loads((path / "manifest.json").read_text())
    names = [chunk["name"] for chunk in manifest["chunks"]]
    assert [int(name.split("-", 1)[0]) for name in names] == list(range(splits))
    on_disk = {p.name for p in (path / "chunks").iterdir()}
    assert set(names) <= on_disk, set(names) - on_disk
    assert sorted(p.name for p in path.iterdir()) == ["chunks", "manifest.json"]

    def temporaries() -> list[str]:
        return sorted(str(p.relative_to(path)) for p in path.rglob("*.tmp"))

    try:
        poll_for(lambda: not temporaries(), timeout=5)
    except AssertionError:
        raise AssertionError(f"temporary files left: {temporaries()}") from None


def check_load(cluster: Cluster, path: Path) -> None:
    """``Dataset.load`` yields every id once, here and through the workers."""
    loaded = zd.Dataset.load(str(path))
    assert loaded.cardinality() == TOTAL
    wrong = exactly_once([id_of(e) for e in loaded])
    assert not wrong, f"loaded locally: {wrong}"
    read = loaded.apply(service.distribute("distributed_epoch", cluster.target))
    got = within(
        READ_DEADLINE_S, lambda: [id_of(e) for e in read], f"load of {path} read"
    )
    wrong = exactly_once(got)
    assert not wrong, f"loaded through distributed_epoch: {wrong}"


@pytest.mark.timeout(60 + 90 * TRIALS)
def test_a_save_finishes_exactly_once_when_workers_and_the_dispatcher_die(
    tmp_path: Path,
) -> None:
    rng = random.Random(f"{SEED}:saves")
    done = []
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        for trial in range(TRIALS):
            path = tmp_path / f"save-{trial}"
            started = time.monotonic()
            what = save_while_processes_die(cluster, path, rng, trial % 2 == 1)
            took = time.monotonic() - started
            check_files(path, status_of(cluster, path)["splits"])
            check_load(cluster, path)
            done.append(f"{what}: saved in {took:.2f} s")
            cluster.settled()
    print("saves: " + "; ".join(done))
    assert len(done) == TRIALS
