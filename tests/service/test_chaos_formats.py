"""Chaos: record files (TFRecord, Parquet, tar shards) read exactly once per record.

Every process is real: a fault-tolerant ``zmqdata dispatcher`` (worker timeout
0.5 s) and three ``zmqdata worker`` daemons. For each format, three files of
``TOTAL`` records in all, each record carrying a unique id, are read through
``distribute("distributed_epoch", ...)``, whose splits are ranges of records of
one file (about 31 records each here), so the faults land mid-file. Each trial:

1. a consumer reads with ``max_outstanding_requests=2`` and, at a random
   record, a worker is killed -9 (a new one starts): every id must arrive
   exactly once, and the read must end within ``READ_DEADLINE_S``;
2. a trainer process (``tests/service/formats_trainer.py``) reads, saves
   ``it.save()`` every ``save_every`` records (atomically), and is killed -9 at
   a random record after a save; a new process restores the last state and
   reads to the end: the ids consumed up to that save plus the resumed read
   must be every id exactly once.

``ZMQDATA_CHAOS_TRIALS`` sets the number of trials per format (default 1);
``ZMQDATA_CHAOS_SEED`` the files, records and faults drawn.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.cli.procs import Proc, zmqdata
from tests.helpers import poll_for
from tests.service.cluster import free_port
from tests.service.formats_trainer import FORMATS, record_id, source
from tests.service.test_dispatcher_kill import (
    num_workers,
    start_dispatcher,
    start_worker,
)
from tests.service.validated import assert_records_valid
from zmqdata import service
from zmqdata._dataset.ops import tfrecord

pytestmark = pytest.mark.slow
TRIALS = int(os.environ.get("ZMQDATA_CHAOS_TRIALS", "1"))
SEED = os.environ.get("ZMQDATA_CHAOS_SEED", "23")
ROOT = Path(__file__).resolve().parents[2]
TOTAL = 2_000
SIZES = (730, 611, 659)  # records per file
GROUP_ROWS = 97  # Parquet rows per row group: splits start mid-group
WORKERS = 3
READ_DEADLINE_S = 30.0
NEEDS = {"tfrecord": "google_crc32c", "parquet": "pyarrow", "webdataset": "tarfile"}
"""The module each format's reader needs (zmqdata's extras)."""
START_DEADLINE_S = 30.0  # a trainer process: imports, builds, first records


# ------------------------------------------------------------------ files


def write_files(fmt: str, directory: Path, rng: random.Random) -> list[str]:
    """``SIZES`` records in files of format ``fmt``; ids ``0..TOTAL-1``, shuffled."""
    directory.mkdir()
    ids = rng.sample(range(TOTAL), TOTAL)
    files, first = [], 0
    for number, size in enumerate(SIZES):
        chunk, first = ids[first : first + size], first + size
        path = str(directory / f"part-{number}.{fmt}")
        payloads = [f"{i}-".encode() * rng.randrange(0, 40) for i in chunk]
        if fmt == "tfrecord":
            tfrecord.write(
                path, (b"%d:%s" % (i, p) for i, p in zip(chunk, payloads, strict=True))
            )
        elif fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table(
                {
                    "id": pa.array(chunk, pa.int64()),
                    "payload": pa.array([p.decode() for p in payloads], pa.string()),
                }
            )
            pq.write_table(table, path, row_group_size=GROUP_ROWS)
        else:
            with tarfile.open(path, "w") as tar:
                for i, payload in zip(chunk, payloads, strict=True):
                    for name, data in (
                        (f"r{i}.cls", b"%d" % i),
                        (f"r{i}.txt", payload),
                    ):
                        info = tarfile.TarInfo(name)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
        files.append(path)
    return files


def exactly_once(got: list[int]) -> str:
    """'' when ``got`` is every id once; else what is wrong."""
    counts = Counter(got)
    missing = TOTAL - len(set(counts) & set(range(TOTAL)))
    repeated = sum(c - 1 for c in counts.values() if c > 1)
    strange = len(set(counts) - set(range(TOTAL)))
    if missing or repeated or strange:
        return f"{missing} missing, {repeated} repeated, {strange} unknown"
    return ""


# ------------------------------------------------------------------ the cluster


class Cluster:
    """A fault-tolerant dispatcher and ``WORKERS`` workers, all processes."""

    def __init__(self, stack: ExitStack, tmp_path: Path) -> None:
        self.stack, port = stack, free_port()
        self.target = f"tcp://127.0.0.1:{port}"
        config = tmp_path / "dispatcher.yaml"
        # A killed trainer's job is let go soon: its workers stop serving it.
        config.write_text(
            "dispatcher:\n  worker_timeout_ms: 500\n  client_timeout_ms: 5000\n"
        )
        self._dispatcher_args = (
            port,
            str(tmp_path / "journal"),
            "--config",
            str(config),
        )
        self.dispatcher = start_dispatcher(stack, *self._dispatcher_args)
        self.workers = [start_worker(stack, self.target) for _ in range(WORKERS)]
        self.settled()

    def settled(self) -> None:
        """All workers back, and the dispatcher's records valid (every trial's end)."""
        poll_for(lambda: num_workers(self.target) == WORKERS, timeout=20)
        assert_records_valid(self.dispatcher)

    def kill_worker(self, rng: random.Random) -> None:
        """Kills a random worker with SIGKILL; a new one takes its place."""
        victim = self.workers.pop(rng.randrange(len(self.workers)))
        assert victim.stop(signal.SIGKILL) == -signal.SIGKILL
        self.workers.append(start_worker(self.stack, self.target))

    def restart_dispatcher(self) -> None:
        """Kills the dispatcher with SIGKILL; a new one starts on its port and journal."""
        assert_records_valid(self.dispatcher)
        assert self.dispatcher.stop(signal.SIGKILL) == -signal.SIGKILL
        self.dispatcher = start_dispatcher(self.stack, *self._dispatcher_args)

    def trainer(self, spec: dict[str, Any]) -> Proc:
        proc: Proc = self.stack.enter_context(
            zmqdata(
                json.dumps({"target": self.target, **spec}),
                prefix=["env", f"PYTHONPATH={ROOT}"],
                module="tests.service.formats_trainer",
            )
        )
        return proc

    def describe(self) -> str:
        try:
            status = service.get_status(self.target, timeout_s=2)
        except Exception as error:
            return f"(no status: {error!r})"
        return json.dumps(status, default=str)[:4_000]


def within(deadline_s: float, read: Callable[[], list[int]], what: str) -> list[int]:
    """``read()`` in a thread, failing the test if it has not ended in ``deadline_s``."""
    result: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(read())
        except BaseException as error:  # handed to the test thread
            errors.append(error)

    thread = threading.Thread(target=run, name=f"chaos-{what}", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        raise AssertionError(f"{what}: still reading after {deadline_s} s")
    if errors:
        raise errors[0]
    return result[0]


# ------------------------------------------------------------------ the faults


def read_while_a_worker_dies(
    cluster: Cluster, fmt: str, files: list[str], rng: random.Random
) -> tuple[str, float]:
    """Fault 1: kill -9 of a worker at a random record of the consumer's read."""
    at = rng.randrange(1, TOTAL)
    ds = source(fmt, files).apply(
        service.distribute(
            "distributed_epoch", cluster.target, max_outstanding_requests=2
        )
    )

    def read() -> list[int]:
        with iter(ds) as iterator:
            got = [record_id(fmt, next(iterator)) for _ in range(at)]
            cluster.kill_worker(rng)
            return got + [record_id(fmt, element) for element in iterator]

    started = time.monotonic()
    try:
        got = within(READ_DEADLINE_S, read, f"{fmt} read, a worker killed at {at}")
    except AssertionError as error:
        raise AssertionError(f"{error}\nstatus: {cluster.describe()}") from None
    took = time.monotonic() - started
    wrong = exactly_once(got)
    assert not wrong, f"{fmt}, a worker killed at record {at}: {wrong}"
    return f"worker killed at {at}", took


def resume_a_killed_trainer(
    cluster: Cluster, fmt: str, files: list[str], rng: random.Random, run_dir: Path
) -> tuple[str, float]:
    """Fault 2: kill -9 of a trainer process past a save; a new one restores it."""
    save_every = rng.randrange(50, 250)
    stop_at = rng.randrange(save_every, TOTAL)
    first_out, states = run_dir / "first.txt", run_dir / "states"
    started = time.monotonic()
    first = cluster.trainer(
        {
            "format": fmt,
            "files": files,
            "out": str(first_out),
            "states": str(states),
            "save_every": save_every,
            "stop_at": stop_at,
        }
    )
    first.wait_for_line(rf"^stopped at {stop_at}$", timeout=START_DEADLINE_S)
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    consumed = [int(v) for v in first_out.read_text().split()]
    assert len(consumed) == stop_at, (len(consumed), stop_at)
    saved = max(int(path.stem) for path in states.glob("*.bin"))
    assert saved == stop_at - stop_at % save_every, (saved, stop_at, save_every)
    second_out = run_dir / "second.txt"
    second = cluster.trainer(
        {
            "format": fmt,
            "files": files,
            "out": str(second_out),
            "states": str(run_dir / "states-resumed"),
            "save_every": save_every,
            "restore": str(states / f"{saved}.bin"),
        }
    )
    what = f"trainer killed at {stop_at}, resumed from {saved}"
    try:
        second.wait_for_line(r"^done \d+$", timeout=START_DEADLINE_S + READ_DEADLINE_S)
    except AssertionError as error:
        raise AssertionError(
            f"{fmt}, {what}: {error}\nstatus: {cluster.describe()}"
        ) from None
    assert second.popen.wait(10) == 0, second.stderr
    took = time.monotonic() - started
    resumed = [int(v) for v in second_out.read_text().split()]
    wrong = exactly_once(consumed[:saved] + resumed)
    assert not wrong, f"{fmt}, {what}: {wrong}"
    return what, took


@pytest.mark.timeout(60 + 75 * TRIALS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_record_files_are_read_exactly_once_when_a_worker_or_the_trainer_dies(
    fmt: str, tmp_path: Path
) -> None:
    pytest.importorskip(NEEDS[fmt])
    rng = random.Random(f"{SEED}:{fmt}")
    files = write_files(fmt, tmp_path / "data", rng)
    done = []
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        for trial in range(TRIALS):
            what, took = read_while_a_worker_dies(cluster, fmt, files, rng)
            assert took < READ_DEADLINE_S, (trial, what, took)
            done.append(f"{what}: {took:.2f} s")
            cluster.settled()
            run_dir = tmp_path / f"trial-{trial}"
            run_dir.mkdir()
            what, took = resume_a_killed_trainer(cluster, fmt, files, rng, run_dir)
            done.append(f"{what}: {took:.2f} s")
            cluster.settled()
    print(f"{fmt}: " + "; ".join(done))
    assert len(done) == 2 * TRIALS
