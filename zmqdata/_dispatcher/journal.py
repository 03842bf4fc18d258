"""The fault-tolerant dispatcher's write-ahead journal of state events.

Events are written in groups (group commit): the dispatcher ``add``s the
events of every request waiting, then ``commit`` writes them with one write
and one fsync before any reply that depends on them leaves the dispatcher; a
restarted dispatcher loads the latest snapshot and replays the events logged
after it.

A journal file starts with ``MAGIC``; each record is a 12-byte header (payload
length, CRC-32 of the length bytes, CRC-32 of the payload; big-endian) and a
msgpack payload ``{"t": event type, **fields}``. On open, only an *incomplete
last record* (a crash mid-write: a short header, a payload past the end of the
file, or zeros to the end that the file system never filled) is a torn tail:
it was never acknowledged, so it is cut off (its bytes are kept in a
``.torn`` file beside the journal). Anything else that fails its checksum or
does not decode refuses to start with ``JournalCorruptError``, naming the file
and the offset; ``repair`` (``zmqdata dispatcher --repair-journal``) keeps the
records before the damage and a backup of the whole file. A failed append
(a full disk) is rolled back to the last whole record and raised as
``UnavailableError``: none of the group's events was kept, and the journal
stays readable.

Compaction keeps replay short: generation ``g`` is ``snapshot-g.msgpack`` (the
state when it began; none for generation 0) plus ``journal-g.log``. ``compact``
writes ``snapshot-(g+1)`` atomically (temporary file, fsync, rename, fsync of
the directory), then starts ``journal-(g+1).log`` and deletes generation ``g``.
A crash at any point leaves either the old generation or the new one whole,
and opening picks the newest snapshot, so no event is applied twice. A journal
without ``MAGIC`` (one from before zmqdata 0.1, whose records had no
checksums) is refused: zmqdata 0.1's dispatcher rewrites it when it starts.

``JournalSink`` puts a ``Journal`` behind ``DispatcherState``: it restores the
records at start (and after a failed commit), collects each event, commits
the group once it is applied, and compacts when ``Journal.wants_compaction``
(the policy) says so.

>>> import tempfile
>>> from zmqdata._dispatcher import events as ev
>>> with tempfile.TemporaryDirectory() as work_dir:
...     with Journal(work_dir) as journal:
...         journal.append(ev.TaskFinished(task_id=7))
...     with Journal(work_dir) as journal:
...         journal.snapshot(), list(journal.replay())
(None, [TaskFinished(task_id=7)])
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import struct
import time
import typing
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import msgpack

from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import snapshot
from zmqdata._dispatcher.records import ClusterRecords
from zmqdata.errors import FailedPreconditionError, UnavailableError

logger = logging.getLogger("zmqdata.dispatcher")

COMPACT_MIN_EVENTS = 10_000
"""Compact once the journal has this many events and more bytes than the
snapshot it follows (so snapshot writes cost at most as much as the appends)."""
MAGIC = b"zmqdata journal 2\n"
_HEADER = struct.Struct(">III")
_EVENTS: dict[str, type[Any]] = {cls.__name__: cls for cls in typing.get_args(ev.Event)}
_FIELDS: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(field.name for field in dataclasses.fields(cls))
    for cls in _EVENTS.values()
}


class JournalCorruptError(FailedPreconditionError):
    """The journal is damaged before its end; the dispatcher refuses to start."""

    def __init__(self, path: Path, offset: int, why: str) -> None:
        super().__init__(
            f"journal {path} is corrupt at byte {offset} ({why}); refusing to start "
            "from a wrong state. `zmqdata dispatcher --repair-journal` keeps the "
            "records before it (and a backup of the file)"
        )
        self.path, self.offset = path, offset


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def encode_event(event: ev.Event) -> bytes:
    """One journal record (header included)."""
    cls = type(event)
    body = {"t": cls.__name__, **{name: getattr(event, name) for name in _FIELDS[cls]}}
    payload: bytes = msgpack.packb(body)
    length = struct.pack(">I", len(payload))
    return _HEADER.pack(len(payload), _crc(length), _crc(payload)) + payload


def decode_event(payload: bytes) -> ev.Event:
    """The event of one record's payload."""
    body = msgpack.unpackb(payload)
    cls = _EVENTS[body.pop("t")]
    for field in dataclasses.fields(cls):
        if isinstance(body.get(field.name), list):  # msgpack has no tuples
            body[field.name] = tuple(body[field.name])
    event: ev.Event = cls(**body)
    return event


@dataclass
class _Scan:
    """What a journal file holds: whole records, then maybe a torn tail."""

    records: list[tuple[int, bytes]]
    """(offset, payload) of each whole record."""
    valid_bytes: int
    """Where the whole records end (a torn tail starts here)."""


def _scan(path: Path) -> _Scan:
    """Reads every record; raises ``JournalCorruptError`` on damage before the end."""
    data = path.read_bytes() if path.exists() else b""
    if not data.startswith(MAGIC):
        if MAGIC.startswith(data):  # empty, or a crash while the magic was written
            return _Scan([], 0)
        raise JournalCorruptError(
            path,
            0,
            "no journal header: not a journal, or one from before zmqdata 0.1, "
            "which a 0.1 dispatcher rewrites when it starts",
        )
    records: list[tuple[int, bytes]] = []
    offset = len(MAGIC)
    while (payload := _record_at(path, data, offset)) is not None:
        records.append((offset, payload))
        offset += _HEADER.size + len(payload)
    return _Scan(records, offset)


def _record_at(path: Path, data: bytes, offset: int) -> bytes | None:
    """The payload of the record at ``offset``; None at the end or a torn tail."""
    if offset + _HEADER.size > len(data):
        return None  # the end, or torn: a short header
    length, length_crc, payload_crc = _HEADER.unpack_from(data, offset)
    if _crc(data[offset : offset + 4]) != length_crc:
        if not data[offset:].strip(b"\0"):
            return None  # torn: zeros to the end, never filled by the file system
        raise JournalCorruptError(path, offset, "bad record header")
    start = offset + _HEADER.size
    if start + length > len(data):
        return None  # torn: the last record was not written whole
    payload = data[start : start + length]
    if _crc(payload) != payload_crc:
        raise JournalCorruptError(path, offset, "record checksum mismatch")
    return payload


def _generation(path: Path) -> int:
    """The generation in a ``journal-G.log`` / ``snapshot-G.msgpack`` name."""
    return int(path.name.split(".")[0].split("-")[1])


class Journal:
    """The latest snapshot and the events after it, in ``work_dir``.

    Raises ``JournalCorruptError`` when the journal is damaged before its end.
    """

    def __init__(self, work_dir: str) -> None:
        self.directory = Path(work_dir)
        self.directory.mkdir(parents=True, exist_ok=True)
        snapshots = self.directory.glob("snapshot-*.msgpack")
        self.generation = max((_generation(p) for p in snapshots), default=0)
        self._remove_other_generations()
        self.path = self._journal_path(self.generation)
        scan = _scan(self.path)
        self._records: list[tuple[int, bytes]] | None = scan.records
        self.events = len(scan.records)
        self._pending: list[bytes] = []
        """Records added since the last commit (written by ``commit``)."""
        self.commits = 0
        """Commits that wrote something (one write and one fsync each)."""
        self._valid_bytes = scan.valid_bytes
        self._cut_torn_tail()
        self._fd = self._open_for_append(self.path)
        snapshot = self._snapshot_path(self.generation)
        self._snapshot_bytes = snapshot.stat().st_size if snapshot.exists() else 0

    def _journal_path(self, generation: int) -> Path:
        return self.directory / f"journal-{generation}.log"

    def _snapshot_path(self, generation: int) -> Path:
        return self.directory / f"snapshot-{generation}.msgpack"

    def _remove_other_generations(self) -> None:
        for pattern in ("journal-*.log", "snapshot-*.msgpack", "*.tmp"):
            for path in self.directory.glob(pattern):
                if path.suffix == ".tmp" or _generation(path) != self.generation:
                    path.unlink()

    def _cut_torn_tail(self) -> None:
        """Cuts an incomplete last record off, keeping its bytes beside the file."""
        if not self.path.exists() or self.path.stat().st_size <= self._valid_bytes:
            return
        with open(self.path, "r+b") as file:
            file.seek(self._valid_bytes)
            torn = file.read()
            kept = self.path.with_name(f"{self.path.name}.torn-{self._valid_bytes}")
            kept.write_bytes(torn)
            file.truncate(self._valid_bytes)
            os.fsync(file.fileno())
        logger.warning(
            "journal %s: cut an incomplete last record of %d bytes at byte %d "
            "(a crash mid-write; kept in %s)",
            self.path,
            len(torn),
            self._valid_bytes,
            kept.name,
        )

    def _open_for_append(self, path: Path) -> int:
        """An append descriptor (unbuffered, so a failed write leaves nothing queued)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if self._valid_bytes == 0:
            self._write(fd, MAGIC)
            self._valid_bytes = len(MAGIC)
        return fd

    def snapshot(self) -> bytes | None:
        """The snapshot the current journal follows (None in generation 0)."""
        path = self._snapshot_path(self.generation)
        return path.read_bytes() if path.exists() else None

    def replay(self) -> Iterator[ev.Event]:
        """Every committed event, oldest first.

        The first call yields the records read at open; a later one (after a
        failed commit) reads the file again.
        """
        records = self._records
        if records is None:
            records = _scan(self.path).records
        self._records = None
        for offset, payload in records:
            try:
                yield decode_event(payload)
            except Exception as error:
                raise JournalCorruptError(
                    self.path, offset, f"undecodable event: {error!r}"
                ) from None

    def _write(self, fd: int, data: bytes) -> None:
        """Writes ``data`` durably, or rolls the file back and raises ``UnavailableError``."""
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as error:
            try:
                os.ftruncate(fd, self._valid_bytes)
            except OSError:
                logger.exception("journal %s: rolling back a failed write", self.path)
            raise UnavailableError(
                f"the dispatcher's journal {self.path} cannot be written "
                f"({error.strerror or error}); the request was not applied"
            ) from None

    def add(self, event: ev.Event) -> None:
        """Queues one event for the next ``commit`` (nothing is written yet)."""
        self._pending.append(encode_event(event))

    def commit(self) -> None:
        """Writes every queued event durably: one write, one fsync.

        A failed write (e.g. a full disk) is rolled back to the last commit
        and raises ``UnavailableError``: none of the queued events is kept.
        """
        if not self._pending:
            return
        data = b"".join(self._pending)
        count = len(self._pending)
        self._pending.clear()
        self._write(self._fd, data)
        self.commits += 1
        self.events += count
        self._valid_bytes += len(data)

    def append(self, event: ev.Event) -> None:
        """Writes one event (and any queued before it) durably."""
        self.add(event)
        self.commit()

    @property
    def wants_compaction(self) -> bool:
        """Whether replaying the journal now costs more than writing a snapshot."""
        return (
            self.events >= COMPACT_MIN_EVENTS
            and self._valid_bytes >= self._snapshot_bytes
        )

    def compact(self, snapshot: bytes) -> None:
        """Starts the next generation from ``snapshot``.

        ``snapshot`` is the state after every event committed so far (call
        it with nothing queued: queued events would follow their own
        snapshot). A failure
        (a full disk) leaves the current generation in place and raises
        ``UnavailableError``.
        """
        generation = self.generation + 1
        target = self._snapshot_path(generation)
        temporary = target.with_suffix(".tmp")
        try:
            with open(temporary, "wb") as file:
                file.write(snapshot)
                file.flush()
                os.fsync(file.fileno())
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise UnavailableError(
                f"cannot write the journal snapshot {temporary} "
                f"({error.strerror or error})"
            ) from None
        temporary.rename(target)
        self._sync_directory()
        os.close(self._fd)
        self.generation = generation
        self._remove_other_generations()
        self.path = self._journal_path(generation)
        self.events = self._valid_bytes = 0
        self._fd = self._open_for_append(self.path)
        self._sync_directory()
        self._snapshot_bytes = len(snapshot)

    def _sync_directory(self) -> None:
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def close(self) -> None:
        """Closes the file; appending afterwards is an error."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JournalSink:
    """``DispatcherState``'s event sink in fault-tolerant mode, and its policy.

    Restores the records from ``journal``, queues each event, commits a
    group (one fsync) once it is applied and before any reply leaves, and
    compacts the journal into a snapshot of the records when
    ``Journal.wants_compaction`` says replaying it costs more. The caller
    closes ``journal``.
    """

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def restore(self, now: float) -> ClusterRecords:
        """The latest snapshot plus the events committed after it.

        Every peer counts as seen at ``now``. Also what a failed commit rolls
        back to. A journal due for compaction at once (one without checksums)
        is compacted.
        """
        records = ClusterRecords()
        data = self.journal.snapshot()
        if data is not None:
            snapshot.load(records, data)
        for event in self.journal.replay():
            records.apply(event)
        self.applied(records)
        return records

    def append(self, event: ev.Event) -> None:
        """Queues ``event`` for the group's commit."""
        self.journal.add(event)

    def applied(self, records: ClusterRecords) -> None:
        """Commits the group's events (one fsync), then compacts when due.

        Raises ``UnavailableError`` if the events cannot be written: none of
        them is kept, and the caller rolls ``records`` back (``restore``). A
        failed compaction is retried at the next group.
        """
        self.journal.commit()
        if not self.journal.wants_compaction:
            return
        try:
            self.journal.compact(snapshot.dump(records))
        except UnavailableError as error:  # the old generation stays whole
            logger.error("journal compaction failed, retried later: %s", error)


def repair(work_dir: str) -> str:
    """Keeps the whole records before the first damaged one; returns what it did.

    The damaged journal is first copied to ``journal-G.log.bak-<time>`` in
    ``work_dir``; nothing else is deleted. Events after the damage are lost:
    the restarted dispatcher resumes from the state before them.
    """
    directory = Path(work_dir)
    snapshots = directory.glob("snapshot-*.msgpack")
    generation = max((_generation(p) for p in snapshots), default=0)
    path = directory / f"journal-{generation}.log"
    damage = _first_damage(path)
    if damage is None:
        return f"{path}: no damage found; nothing changed"
    backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%dT%H%M%S')}")
    shutil.copy2(path, backup)
    with open(path, "r+b") as file:
        file.truncate(damage)
        os.fsync(file.fileno())
    return (
        f"{path}: kept the {damage} bytes of whole records before the damage, cut "
        f"{backup.stat().st_size - damage} bytes (the whole file is backed up in "
        f"{backup.name})"
    )


def _first_damage(path: Path) -> int | None:
    """The offset of the first damaged record (bad checksum or event), if any."""
    try:
        scan = _scan(path)
    except JournalCorruptError as error:
        return error.offset
    for offset, payload in scan.records:
        try:
            decode_event(payload)
        except Exception:
            return offset
    return None
