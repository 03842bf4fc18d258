"""Shared-memory segments: large element buffers handed over through ``/dev/shm``.

A process that uses shared memory holds a *presence* file,
``/dev/shm/zmqdata-<pid>-<token>``, locked (``flock``) for as long as it lives;
its segments are ``zmqdata-<pid>-<token>-<n>``. The lock, not the pid, tells
the living from the dead (pids are reused and differ across pid namespaces; a
lock on a file of a shared ``/dev/shm`` does not), so :func:`sweep` removes
exactly the files of processes that died, whoever they were.

A worker writes a segment with :func:`store` (no mapping of its own: a
``pwrite``, so a full ``/dev/shm`` is an error it falls back from, never a
``SIGBUS``). A consumer claims it with :func:`claim`: the name must match
``SEGMENT_NAME``, the file must be a regular file of this user under
``/dev/shm`` as large as the header claims; it is mapped shared. A reader
gives a dropped segment back; the writer keeps it for reuse (``recycle``),
written again in place, and unlinks it when idle (``trim_pool``); the kernel
frees it once it is unlinked and unmapped.

A consumer shows a worker that they share ``/dev/shm`` (same host, as far as
memory goes; also in containers) by naming its presence file in its requests:
the worker may answer with segments only if :func:`same_host` can open it.

``ZMQDATA_SHARED_MEMORY=0`` turns the whole path off (see :func:`enabled`).

>>> enabled() in (True, False)
True
>>> name = store(3, [(0, memoryview(b"abc"))])
>>> name is None or bytes(claim(name, 3)) == b"abc"
True
>>> if name: unlink(name)
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import itertools
import mmap
import os
import re
import stat
import sys
import threading
import uuid
from collections import deque
from collections.abc import Sequence
from typing import Final

from zmqdata._wire.schema import SEGMENT_NAME
from zmqdata.errors import InvalidArgumentError

DIRECTORY: Final = "/dev/shm"
ENV: Final = "ZMQDATA_SHARED_MEMORY"
PRESENCE_NAME: Final = re.compile(r"zmqdata-[0-9]{1,10}-[0-9a-f]{32}")
"""A process's presence file (``SEGMENT_NAME`` less the ``-<n>`` tail)."""
_OWNED: Final = re.compile(r"(zmqdata-[0-9]{1,10}-[0-9a-f]{32})(-[0-9]{1,20})?")
_ON: Final = ("1", "true", "yes", "on")
_OFF: Final = ("0", "false", "no", "off")
_MAX_WRITE: Final = 1 << 30


def enabled() -> bool:
    """Whether this process may use shared memory: Linux, ``/dev/shm``, not turned off.

    Raises:
        ValueError: ``ZMQDATA_SHARED_MEMORY`` is set to something other than
            ``0``/``1`` (or ``false``/``true``, ``no``/``yes``, ``off``/``on``).
    """
    text = os.environ.get(ENV, "1").strip().lower()
    if text not in _ON + _OFF:
        raise ValueError(f"{ENV} must be 0 or 1, got {os.environ[ENV]!r}")
    return text in _ON and sys.platform == "linux" and os.path.isdir(DIRECTORY)


def _path(name: str) -> str:
    return os.path.join(DIRECTORY, name)


class _Presence:
    """This process's locked presence file, made on first use (again after a fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid, self._fd, self.name = 0, -1, ""
        self._count = itertools.count()

    def get(self) -> str:
        """The presence file's name, creating (and locking) it if needed."""
        with self._lock:
            if self._pid != os.getpid():
                self._create()
            return self.name

    def segment_name(self) -> str:
        """A new segment name of this process."""
        return f"{self.get()}-{next(self._count)}"

    def _create(self) -> None:
        while True:
            name = f"zmqdata-{os.getpid()}-{uuid.uuid4().hex}"
            flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(_path(name), flags, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A sweep may have taken it for a dead process's between open and
            # lock: keep it only if it is still the file under that name.
            with contextlib.suppress(FileNotFoundError):
                if os.stat(_path(name)).st_ino == os.fstat(fd).st_ino:
                    break
            os.close(fd)
        self._pid, self._fd, self.name = os.getpid(), fd, name

    def after_fork(self) -> None:
        """In a forked child: drop the parent's file (its lock stays the parent's)."""
        if self._fd >= 0:
            os.close(self._fd)
        self._lock = threading.Lock()
        self._reset()

    def remove(self) -> None:
        """At exit: removes the presence file (the lock goes with the process)."""
        if self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(_path(self.name))


_PRESENCE = _Presence()
os.register_at_fork(after_in_child=_PRESENCE.after_fork)
atexit.register(_PRESENCE.remove)


def presence() -> str:
    """This process's presence file name (what a consumer names in its requests)."""
    return _PRESENCE.get()


class _Pool:
    """Segments readers gave back, by size, for ``store`` to write again.

    A reader keeps its mapping of a segment it gave back, so one written again
    costs neither side any page allocation, mapping or fault: only the copy.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_size: dict[int, deque[tuple[float, str]]] = {}
        self._bytes = 0

    def take(self, size: int) -> str | None:
        with self._lock:
            free = self._by_size.get(size)
            if not free:
                return None
            self._bytes -= size
            return free.popleft()[1]

    def put(self, name: str, size: int, now: float) -> None:
        with self._lock:
            if self._bytes + size <= POOL_BYTES:
                self._by_size.setdefault(size, deque()).append((now, name))
                self._bytes += size
                return
        unlink(name)

    def trim(self, before: float) -> None:
        """Unlinks the segments given back before ``before``."""
        stale: list[str] = []
        with self._lock:
            for size, free in self._by_size.items():
                while free and free[0][0] < before:
                    stale.append(free.popleft()[1])
                    self._bytes -= size
        for name in stale:
            unlink(name)


POOL_BYTES: Final = 256 << 20
"""The most bytes of given-back segments kept for reuse, ..."""
POOL_IDLE_S: Final = 5.0
"""... each for this long (see ``trim_pool``)."""
_POOL = _Pool()
atexit.register(_POOL.trim, float("inf"))


def recycle(name: str, size: int, now: float) -> None:
    """Keeps this process's segment ``name`` of ``size`` bytes for reuse by ``store``."""
    _POOL.put(name, size, now)


def trim_pool(now: float) -> None:
    """Unlinks the segments kept longer than ``POOL_IDLE_S`` (all with ``inf``)."""
    _POOL.trim(now - POOL_IDLE_S)


def store(size: int, parts: Sequence[tuple[int, memoryview]]) -> str | None:
    """Writes ``parts`` (``(offset, bytes)``) into a segment of ``size`` bytes.

    One given back of that size is written again; else a new one is made.

    Returns:
        The segment's name, or None when ``/dev/shm`` has no room for it (or
        cannot be written): the caller sends the bytes over the socket.
    """
    name = _POOL.take(size)
    if name is not None:
        flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    else:
        name = _PRESENCE.segment_name()
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(_path(name), flags, 0o600)
    except OSError:
        return None
    try:
        for offset, data in parts:
            done = 0
            while done < data.nbytes:
                chunk = data[done : done + _MAX_WRITE]
                done += os.pwrite(fd, chunk, offset + done)
        os.ftruncate(fd, size)
    except OSError:
        unlink(name)
        return None
    finally:
        os.close(fd)
    return name


def unlink(name: str) -> None:
    """Removes a segment of this process if it is still there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_path(name))


def read_back(name: str) -> mmap.mmap:
    """A read-only mapping of this process's own segment ``name``.

    For a segment that must travel over the socket after all.

    Raises:
        InvalidArgumentError: The segment is gone.
    """
    try:
        fd = os.open(_path(name), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as error:
        raise InvalidArgumentError(
            f"shared-memory segment {name} is gone: {error.strerror}"
        ) from None
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def claim(name: str, extent: int) -> mmap.mmap:
    """Maps another process's segment (shared, writable).

    The file stays: its writer reuses or unlinks it once the reader gives it
    back (freeing its pages is then the writer's work), or :func:`unlink` does.

    Checks, before mapping anything, that ``name`` is a segment name, that it
    is a regular file of this user directly under ``/dev/shm`` (no link
    followed) and that it holds at least ``extent`` bytes.

    Raises:
        InvalidArgumentError: Any check fails, or the segment is gone.
    """
    if type(name) is not str or not SEGMENT_NAME.fullmatch(name):
        raise InvalidArgumentError(f"bad shared-memory segment name {name!r:.80}")
    if type(extent) is not int or extent <= 0:
        raise InvalidArgumentError(f"bad shared-memory extent {extent!r}")
    fd = _open_claimed(name)
    try:
        _check_claimed(name, os.fstat(fd), extent)
        # Shared: a reused segment's new content shows through the same pages.
        # Writable, as arrays read from a socket are (the writer rewrites every
        # byte it sends). Not MAP_POPULATE: a trainer may not touch it all.
        return mmap.mmap(fd, extent)
    finally:
        os.close(fd)


def _open_claimed(name: str) -> int:
    """A read-write descriptor of another process's segment ``name`` (no link)."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        return os.open(_path(name), flags)
    except OSError as error:
        reason = "gone (its worker died?)" if error.errno == errno.ENOENT else ""
        raise InvalidArgumentError(
            f"cannot open shared-memory segment {name}: {reason or error.strerror}"
        ) from None


def _check_claimed(name: str, info: os.stat_result, extent: int) -> None:
    """Raises unless ``info`` is a regular file of this user of ``extent``+ bytes."""
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        raise InvalidArgumentError(
            f"shared-memory segment {name} is not a regular file of this user"
        )
    if info.st_size < extent:
        raise InvalidArgumentError(
            f"shared-memory segment {name} holds {info.st_size} bytes, "
            f"the header claims {extent}"
        )


def same_host(probe: str) -> bool:
    """Whether ``probe`` names a live presence file of this user in our ``/dev/shm``.

    A consumer that names one this process can open shares its ``/dev/shm``,
    and can read the segments this process writes (same user).
    """
    if not PRESENCE_NAME.fullmatch(probe):
        return False
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(_path(probe), flags)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    finally:
        os.close(fd)


def sweep() -> int:
    """Removes the segments and presence files of processes that died.

    A process is dead when its presence file is gone or can be locked; files
    of other users are left alone. Returns how many files were removed.
    """
    if not os.path.isdir(DIRECTORY):
        return 0
    owners: dict[str, list[str]] = {}
    for entry in os.listdir(DIRECTORY):
        match = _OWNED.fullmatch(entry)
        if match is not None:
            owners.setdefault(match.group(1), []).append(entry)
    removed = 0
    for owner, names in owners.items():
        if owner == _PRESENCE.name or not _dead(owner):
            continue
        for name in sorted(names, key=len, reverse=True):  # segments, then presence
            with contextlib.suppress(FileNotFoundError, PermissionError):
                os.unlink(_path(name))
                removed += 1
    return removed


def _dead(owner: str) -> bool:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(_path(owner), flags)
    except FileNotFoundError:
        return True  # made before any segment, removed at exit: its owner is gone
    except OSError:
        return False  # another user's, or not a file we understand
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False  # locked: its owner lives
    finally:
        os.close(fd)
    return True
