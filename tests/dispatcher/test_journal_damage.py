"""A damaged journal: checksums, torn tails, repair, pre-0.1 files, a full disk."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import zmqdata as zd
from tests.dispatcher.test_replay import tables
from zmqdata._config import DispatcherConfig
from zmqdata._dataset import graph
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher.journal import (
    MAGIC,
    Journal,
    JournalCorruptError,
    JournalSink,
    encode_event,
    repair,
)
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._wire import messages as m

EVENTS = [ev.TaskFinished(task_id) for task_id in range(20)]


def write_events(work_dir: Path, events: list[ev.Event] = EVENTS) -> list[int]:
    """Appends ``events``; returns each record's offset in the file."""
    offsets = []
    with Journal(str(work_dir)) as journal:
        for event in events:
            offsets.append(journal._valid_bytes)
            journal.append(event)
    return offsets


def replayed(work_dir: Path) -> list[ev.Event]:
    with Journal(str(work_dir)) as journal:
        return list(journal.replay())


def damage(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def test_a_flipped_byte_in_a_middle_record_refuses_to_start(tmp_path):
    offsets = write_events(tmp_path)
    path = tmp_path / "journal-0.log"
    size = path.stat().st_size
    damage(path, offsets[7] + 14, b"\xff")  # inside record 7's payload
    with pytest.raises(JournalCorruptError, match=f"at byte {offsets[7]}") as caught:
        Journal(str(tmp_path))
    assert str(path) in str(caught.value)
    assert path.stat().st_size == size  # nothing deleted


def test_a_corrupt_length_prefix_is_not_taken_for_a_torn_tail(tmp_path):
    offsets = write_events(tmp_path)
    path = tmp_path / "journal-0.log"
    size = path.stat().st_size
    damage(path, offsets[5], (10**6).to_bytes(4, "big"))  # claims past the end
    with pytest.raises(JournalCorruptError, match="bad record header"):
        Journal(str(tmp_path))
    assert path.stat().st_size == size


@pytest.mark.parametrize(
    "tail",
    [
        encode_event(ev.TaskFinished(99))[:7],  # a short header
        encode_event(ev.TaskFinished(99))[:-2],  # a payload cut short
        b"\0" * 40,  # zeros the file system never filled
    ],
    ids=["short-header", "short-payload", "zeros"],
)
def test_only_an_incomplete_last_record_is_a_torn_tail(tmp_path, tail):
    write_events(tmp_path)
    path = tmp_path / "journal-0.log"
    whole = path.read_bytes()
    path.write_bytes(whole + tail)
    assert replayed(tmp_path) == EVENTS
    assert path.read_bytes() == whole
    [kept] = tmp_path.glob("journal-0.log.torn-*")
    assert kept.read_bytes() == tail


def test_repair_keeps_the_records_before_the_damage_and_a_backup(tmp_path):
    offsets = write_events(tmp_path)
    path = tmp_path / "journal-0.log"
    original = path.read_bytes()
    damage(path, offsets[12] + 13, b"\x00\x01")
    damaged = path.read_bytes()
    report = repair(str(tmp_path))
    assert "kept" in report
    [backup] = tmp_path.glob("journal-0.log.bak-*")
    assert backup.read_bytes() == damaged
    assert path.read_bytes() == original[: offsets[12]]
    assert replayed(tmp_path) == EVENTS[:12]
    assert "no damage" in repair(str(tmp_path))


def test_an_undecodable_record_with_a_good_checksum_is_repaired_too(tmp_path):
    write_events(tmp_path, EVENTS[:3])
    path = tmp_path / "journal-0.log"
    good = path.read_bytes()
    payload = b"\xc1not msgpack"
    crc = __import__("zlib").crc32
    header = (
        len(payload).to_bytes(4, "big")
        + crc(len(payload).to_bytes(4, "big")).to_bytes(4, "big")
        + crc(payload).to_bytes(4, "big")
    )
    path.write_bytes(good + header + payload)
    with pytest.raises(JournalCorruptError, match="undecodable"):
        replayed(tmp_path)
    repair(str(tmp_path))
    assert replayed(tmp_path) == EVENTS[:3]


def test_a_journal_from_before_checksums_is_refused_and_repair_starts_afresh(tmp_path):
    """Length-prefixed msgpack without ``MAGIC`` (before zmqdata 0.1): refused."""
    pipeline = graph.serialize(zd.Dataset.range(10)._node)
    events = [ev.DatasetRegistered(name, pipeline, name, None, b"") for name in "ab"]
    old = b"".join(
        len(payload := encode_event(event)[12:]).to_bytes(4, "big") + payload
        for event in events
    )
    (tmp_path / "journal-0.log").write_bytes(old)
    with pytest.raises(JournalCorruptError, match=r"before zmqdata 0\.1"):
        replayed(tmp_path)
    repair(str(tmp_path))
    assert replayed(tmp_path) == []
    [backup] = tmp_path.glob("journal-0.log.bak-*")
    assert backup.read_bytes() == old


@pytest.fixture
def tiny_disk(tmp_path) -> Iterator[Path]:
    """A 256 KiB tmpfs: the journal fills it quickly."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "zmqdata-test", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"LOUD SKIP: cannot mount a tmpfs (needs root): {done.stderr}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> Path:
    """Fills ``disk`` with one file; returns it (delete it to free the space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space left") as full:
            _write_forever(fd)
        assert full.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def _write_forever(fd: int) -> None:
    while True:
        os.write(fd, b"\0" * 4096)


def end_journal_on_a_page(state: DispatcherState, journal: Journal) -> int:
    """Registers a worker whose record makes the journal end on a 4 KiB page.

    tmpfs allocates whole pages: with none left, any append fails. Returns the
    worker's id.
    """
    for length in range(1, 2 * 4096):
        event = ev.WorkerRegistered(
            state.records.next_id,
            b"p",
            "x" * length,
            "tcp://h:9",
            (),
            "",
            "",
            0.0,
            None,
        )
        if (journal._valid_bytes + len(encode_event(event))) % 4096 == 0:
            register = m.RegisterWorker(
                worker_address="x" * length, data_address="tcp://h:9"
            )
            [(_, reply)] = state.handle(b"p", register, 0.0)
            assert journal._valid_bytes % 4096 == 0
            return int(reply.worker_id)
    raise AssertionError("no address length ends the journal on a page")


def test_a_full_disk_fails_the_request_cleanly_and_loses_nothing(tiny_disk):
    work_dir = tiny_disk / "state"
    config = DispatcherConfig(
        work_dir=str(work_dir), fault_tolerant_mode=True, worker_timeout_ms=1_000
    )
    # Constants of 32 KiB: more than the slack in the journal's last page.
    pipeline = graph.serialize(zd.Dataset.from_tensor_slices(np.zeros(4096))._node)
    with Journal(str(work_dir)) as journal:
        state = DispatcherState(config, JournalSink(journal))
        worker_id = end_journal_on_a_page(state, journal)
        filler = fill(tiny_disk)
        request = m.GetOrRegisterDataset(request_id=3, pipeline=pipeline)
        [(_, failed)] = state.handle(b"c", request, 0.1)
        assert isinstance(failed, m.Error)
        assert failed.code == "UNAVAILABLE"
        assert "cannot be written" in failed.message
        assert state.records.datasets == {}  # not applied
        assert state.tick(5.0) == []  # the worker's removal cannot be journaled...
        assert worker_id in state.records.workers  # ...so it waits, the loop lives
        filler.unlink()
        [(_, registered)] = state.handle(b"c", request, 0.2)
        assert isinstance(registered, m.GetOrRegisterDatasetReply)
        state.tick(5.0)
        assert state.records.workers == {}
        live = tables(state.records)
    with Journal(str(work_dir)) as journal:
        replayed = DispatcherState(config, JournalSink(journal))
        assert tables(replayed.records) == live


def test_the_file_stays_readable_after_a_failed_append(tiny_disk):
    work_dir = tiny_disk / "state"
    with Journal(str(work_dir)) as journal:
        journal.append(ev.TaskFinished(1))
        filler = fill(tiny_disk)
        big = ev.DatasetRegistered("d", os.urandom(64 * 1024), "fp", None, b"")
        with pytest.raises(zd.errors.UnavailableError):
            journal.append(big)
        filler.unlink()
        journal.append(ev.TaskFinished(2))
    assert (work_dir / "journal-0.log").read_bytes().startswith(MAGIC)
    assert replayed(work_dir) == [ev.TaskFinished(1), ev.TaskFinished(2)]
