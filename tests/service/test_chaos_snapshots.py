"""Chaos: a ``snapshot`` written while its first job streams, through kill -9.

Every process is real (``test_chaos_formats.Cluster``: a fault-tolerant
``zmqdata dispatcher`` with a journal and three ``zmqdata worker`` daemons).
Each trial reads ``TOTAL`` elements of ``range(TOTAL).map(make).snapshot(path)``
under ``distributed_epoch`` (exactly once): a random worker is killed -9 at a
random element of the first job's read (a new one starts), and in odd trials
the dispatcher is killed -9 and restarted on its journal later in it. That
read must deliver every id once. A second job then reads every id once and
finishes the snapshot (a chunk a killed worker committed but never reported
is written again), whose manifest lists one chunk per split; a third job
reads every id once *from the snapshot*: ``make`` puts a fresh random nonce in
each element, and the third job's elements are bit for bit those
``Dataset.load`` reads from the folder, so none was made again.

``ZMQDATA_CHAOS_TRIALS`` sets the number of trials (default 2: one of each);
``ZMQDATA_CHAOS_SEED`` the faults drawn.
"""

from __future__ import annotations

import os
import random
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.test_chaos_formats import TOTAL, Cluster, exactly_once, within
from tests.service.test_chaos_saves import check_files
from zmqdata import service

pytestmark = pytest.mark.slow
TRIALS = int(os.environ.get("ZMQDATA_CHAOS_TRIALS", "2"))
SEED = os.environ.get("ZMQDATA_CHAOS_SEED", "40")
PACE_S = 0.003
"""Each element's work on a worker: a first epoch lasts a few seconds."""
READ_DEADLINE_S = 60.0


def dataset(path: Path) -> zd.Dataset:
    """Element ``i``: ``1 + i % 37`` values ``i``, then a nonce drawn as it is made."""
    pace = PACE_S

    def make(i: Any) -> np.ndarray:
        threading.Event().wait(pace)  # the pipeline's own work
        nonce = np.random.default_rng().integers(1 << 62)
        return np.array([i] * (1 + int(i) % 37) + [nonce], np.int64)

    return zd.Dataset.range(TOTAL).map(make).snapshot(str(path))


def id_of(element: np.ndarray) -> int:
    """The element's id, once its size and values are checked to be its own."""
    i = int(element[0])
    assert element.shape == (2 + i % 37,), element
    assert (element[:-1] == i).all(), element
    return i


def save_of(cluster: Cluster, folder: Path) -> dict[str, Any]:
    """The dispatcher's status of the snapshot's save (in ``saves``)."""
    saves = service.get_status(cluster.target, timeout_s=5)["saves"]
    return [save for save in saves if save["path"] == str(folder)][-1]


def first_read(
    cluster: Cluster, path: Path, rng: random.Random, kill_dispatcher: bool
) -> str:
    """Job 1 writes the snapshot while a worker (and the dispatcher) die."""
    at = rng.randrange(TOTAL // 8, TOTAL // 3)
    later = rng.randrange(at + 50, 2 * TOTAL // 3)
    ds = dataset(path).apply(service.distribute("distributed_epoch", cluster.target))
    done = [f"worker killed at {at}"]

    def read() -> list[int]:
        with iter(ds) as iterator:
            got = [id_of(next(iterator)) for _ in range(at)]
            cluster.kill_worker(rng)
            if kill_dispatcher:
                got += [id_of(next(iterator)) for _ in range(later - at)]
                cluster.restart_dispatcher()
                done.append(f"dispatcher killed at {later}")
            return got + [id_of(element) for element in iterator]

    try:
        got = within(READ_DEADLINE_S, read, "the first job")
    except AssertionError as error:
        raise AssertionError(f"{error}\nstatus: {cluster.describe()}") from None
    wrong = exactly_once(got)
    assert not wrong, f"the first job ({', '.join(done)}): {wrong}"
    return ", ".join(done)


def read_all(cluster: Cluster, path: Path, what: str) -> list[np.ndarray]:
    """Every element of a new job's read, checked to be every id once."""
    ds = dataset(path).apply(service.distribute("distributed_epoch", cluster.target))
    got = within(READ_DEADLINE_S, lambda: list(ds), what)
    wrong = exactly_once([id_of(e) for e in got])
    assert not wrong, f"{what}: {wrong}"
    return got


def trial(cluster: Cluster, path: Path, rng: random.Random, kill: bool) -> str:
    """One trial: the first job under faults, a second, the files, a third."""
    what = first_read(cluster, path, rng, kill)
    read_all(cluster, path, "the second job")
    [folder] = list(path.iterdir())
    poll_for(lambda: save_of(cluster, folder)["state"] == "finished", timeout=10)
    check_files(folder, save_of(cluster, folder)["splits"])
    third = read_all(cluster, path, "the third job")
    saved = {id_of(e): e for e in zd.Dataset.load(str(folder))}
    remade = [id_of(e) for e in third if not np.array_equal(e, saved[id_of(e)])]
    assert not remade, f"made again, not read: {remade[:10]}"
    return what


@pytest.mark.timeout(60 + 120 * TRIALS)
def test_a_snapshot_is_written_exactly_once_when_workers_and_the_dispatcher_die(
    tmp_path: Path,
) -> None:
    rng = random.Random(f"{SEED}:snapshots")
    done = []
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        for number in range(TRIALS):
            path = tmp_path / f"snapshot-{number}"
            done.append(trial(cluster, path, rng, kill=number % 2 == 1))
            cluster.settled()
    print("snapshots: " + "; ".join(done))
    assert len(done) == TRIALS
