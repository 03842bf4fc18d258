"""A journal the previous release wrote, events and snapshot, is replayed by this one."""

from __future__ import annotations

import shutil
import signal
from contextlib import ExitStack
from pathlib import Path

from tests.service.cluster import free_port
from tests.upgrade.processes import (
    CURRENT,
    Trainer,
    start_dispatcher,
    start_worker,
    wait_for_workers,
)
from tests.venvs import Venv
from zmqdata._dispatcher import snapshot
from zmqdata._dispatcher.journal import Journal, JournalSink
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata._wire.modes import ShardingPolicy

COMPACT = """
import sys
from zmqdata._dispatcher import snapshot
from zmqdata._dispatcher.journal import Journal, JournalSink

journal = Journal(sys.argv[1])
journal.compact(snapshot.dump(JournalSink(journal).restore(0.0)))
journal.close()
"""
"""The previous release turns a journal's events into its snapshot."""


def replayed(work_dir: Path) -> ClusterRecords:
    with Journal(str(work_dir)) as journal:
        return JournalSink(journal).restore(0.0)


def test_events_and_a_snapshot_of_the_previous_release_replay(previous: Venv, tmp_path):
    port, journal = free_port(), tmp_path / "journal"
    target = f"tcp://127.0.0.1:{port}"
    with ExitStack() as stack:
        dispatcher = start_dispatcher(stack, previous.python, port, journal)
        start_worker(stack, previous.python, target)
        wait_for_workers(target, 1)
        with Trainer(CURRENT, target, 5_000) as trainer:
            trainer.read(2_000)
            dispatcher.stop(signal.SIGKILL)  # mid-read: open tasks, unacked keys
    compacted = tmp_path / "compacted"
    shutil.copytree(journal, compacted)
    previous.run("-c", COMPACT, str(compacted))
    assert [p.name for p in compacted.glob("snapshot-*")] == ["snapshot-1.msgpack"]

    records = replayed(journal)
    [job] = records.jobs.values()
    assert job.processing_mode == ShardingPolicy.DYNAMIC
    assert job.exactly_once
    assert len(records.workers) == len(records.datasets) == len(records.clients) == 1
    [iteration] = records.iterations.values()
    assert iteration.tasks
    assert iteration.next_split > 0
    assert snapshot.dump(replayed(compacted)) == snapshot.dump(records)
