"""The fault-tolerant dispatcher's write-ahead journal of state events.

Each event is appended, flushed and fsync'ed *before* it is applied (and so
before any reply that depends on it leaves the dispatcher); a restarted
dispatcher loads the latest snapshot and replays the events logged after it.
A record is a 4-byte big-endian length and a msgpack map ``{"t": event type,
**fields}``. A torn record at the end (a crash mid-write) is cut off on open;
corruption anywhere else raises ``FailedPreconditionError`` rather than
replaying a wrong state.

Compaction keeps replay short: generation ``g`` is ``snapshot-g.msgpack`` (the
state when it began; none for generation 0) plus ``journal-g.log``. ``compact``
writes ``snapshot-(g+1)`` atomically (temporary file, fsync, rename, fsync of
the directory), then starts ``journal-(g+1).log`` and deletes generation ``g``.
A crash at any point leaves either the old generation or the new one whole,
and opening picks the newest snapshot, so no event is applied twice.

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
import os
import struct
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Self

import msgpack

from zmqdata._dispatcher import events as ev
from zmqdata.errors import FailedPreconditionError

COMPACT_MIN_EVENTS = 10_000
"""Compact once the journal has this many events and more bytes than the
snapshot it follows (so snapshot writes cost at most as much as the appends)."""
_LENGTH = struct.Struct(">I")
_EVENTS: dict[str, type[Any]] = {cls.__name__: cls for cls in typing.get_args(ev.Event)}


def encode_event(event: ev.Event) -> bytes:
    """One journal record (length prefix included)."""
    body = {"t": type(event).__name__, **dataclasses.asdict(event)}
    payload: bytes = msgpack.packb(body)
    return _LENGTH.pack(len(payload)) + payload


def decode_event(payload: bytes) -> ev.Event:
    """The event of one record's payload."""
    body = msgpack.unpackb(payload)
    cls = _EVENTS[body.pop("t")]
    for field in dataclasses.fields(cls):
        if isinstance(body.get(field.name), list):  # msgpack has no tuples
            body[field.name] = tuple(body[field.name])
    event: ev.Event = cls(**body)
    return event


def _generation(path: Path) -> int:
    """The generation in a ``journal-G.log`` / ``snapshot-G.msgpack`` name."""
    return int(path.name.split(".")[0].split("-")[1])


class Journal:
    """The latest snapshot and the events after it, in ``work_dir``."""

    def __init__(self, work_dir: str) -> None:
        self.directory = Path(work_dir)
        self.directory.mkdir(parents=True, exist_ok=True)
        snapshots = self.directory.glob("snapshot-*.msgpack")
        self.generation = max((_generation(p) for p in snapshots), default=0)
        self._remove_other_generations()
        self.path = self._journal_path(self.generation)
        self._valid_bytes, self.events = self._scan()
        self._file: BinaryIO = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        self._file.truncate(self._valid_bytes)
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

    def snapshot(self) -> bytes | None:
        """The snapshot the current journal follows (None in generation 0)."""
        path = self._snapshot_path(self.generation)
        return path.read_bytes() if path.exists() else None

    def _records(self) -> Iterator[tuple[int, bytes]]:
        """(end offset, payload) of each complete record."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        offset = 0
        while offset + _LENGTH.size <= len(data):
            (length,) = _LENGTH.unpack_from(data, offset)
            end = offset + _LENGTH.size + length
            if end > len(data):
                return  # a torn last record
            yield end, data[offset + _LENGTH.size : end]
            offset = end

    def _scan(self) -> tuple[int, int]:
        """(bytes, count) of the complete records."""
        valid = count = 0
        for end, _ in self._records():
            valid, count = end, count + 1
        return valid, count

    def replay(self) -> Iterator[ev.Event]:
        """Every complete event, oldest first."""
        for end, payload in self._records():
            if end > self._valid_bytes:
                return
            try:
                yield decode_event(payload)
            except Exception as error:
                raise FailedPreconditionError(
                    f"journal {self.path} is corrupt at byte {end - len(payload)}: "
                    f"{error!r}; refusing to start from a wrong state"
                ) from None

    def append(self, event: ev.Event) -> None:
        """Writes one event durably (fsync) before the caller applies it."""
        record = encode_event(event)
        self._file.write(record)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.events += 1
        self._valid_bytes += len(record)

    @property
    def wants_compaction(self) -> bool:
        """Whether replaying the journal now costs more than writing a snapshot."""
        return (
            self.events >= COMPACT_MIN_EVENTS
            and self._valid_bytes >= self._snapshot_bytes
        )

    def compact(self, snapshot: bytes) -> None:
        """Starts the next generation from ``snapshot``.

        ``snapshot`` is the state after every event appended so far.
        """
        generation = self.generation + 1
        target = self._snapshot_path(generation)
        temporary = target.with_suffix(".tmp")
        with open(temporary, "wb") as file:
            file.write(snapshot)
            file.flush()
            os.fsync(file.fileno())
        temporary.rename(target)
        self._sync_directory()
        self._file.close()
        self.generation = generation
        self._remove_other_generations()
        self.path = self._journal_path(generation)
        self._file = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        self._sync_directory()
        self.events = self._valid_bytes = 0
        self._snapshot_bytes = len(snapshot)

    def _sync_directory(self) -> None:
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def close(self) -> None:
        """Closes the file; appending afterwards is an error."""
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
