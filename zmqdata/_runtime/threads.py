"""A worker's share of the host's cores, and the native thread pools held to it.

Every process that loads numpy starts a BLAS thread pool (and OpenMP pools for
libraries built with it) as wide as the machine; two worker processes on two
cores then run four busy threads and each gets slower than one alone. A worker
limits the pools its pipeline uses to its share (``WorkerConfig.threads``):

* ``"auto"`` (default): the host's usable cores (CPU affinity and the cgroup CPU
  quota of a container) divided by the live zmqdata workers on this host, which
  each worker announces with one file in a per-user runtime directory
  (``registry_dir()``), re-read when a task starts; at least 1.
* ``N``: N threads. ``"none"``: leave the pools alone.

A dedicated worker process calls ``own_process()``: ``zmqdata worker`` and
``zmqdata up``'s children at start, a script's ``WorkerServer.join()`` on its
main thread. Its tasks limit every pool (BLAS is process-wide) and the usual
environment variables are set for subprocesses and late-loaded libraries.
Workers inside another process (a trainer's in-process workers) limit only the
OpenMP pools of their producer threads (OpenMP's limit is per thread), never
the process-wide BLAS pools the trainer itself uses.

>>> share("auto", cores=8, workers=2), share(3, cores=8, workers=2)
(4, 3)
>>> share("auto", cores=2, workers=3), share("none", cores=8, workers=1) is None
(1, True)
>>> parse_cpu_max("150000 100000"), parse_cpu_max("max 100000")
(1.5, None)
"""

from __future__ import annotations

import logging
import math
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import threadpoolctl  # type: ignore[import-untyped]

logger = logging.getLogger("zmqdata.worker")

Setting = int | str
"""``"auto"``, ``"none"`` or a positive thread count (``WorkerConfig.threads``)."""

ENV_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
"""Read by OpenMP, OpenBLAS, MKL, BLIS, Accelerate and numexpr when they load."""

RUNTIME_DIR_VAR = "ZMQDATA_RUNTIME_DIR"
_SEAT = re.compile(r"^worker-(\d+)-(\d+)-[0-9a-f]+$")
_owned = False


def share(setting: Setting, cores: int, workers: int) -> int | None:
    """Threads per pool for one worker (``None``: do not limit)."""
    if setting == "none":
        return None
    if setting == "auto":
        return max(1, cores // max(1, workers))
    return int(setting)


# ------------------------------------------------------------------ cores


def parse_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` (``"max 100000"``: no limit)."""
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = int(fields[0]), int(fields[1])
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota: str, period: str) -> float | None:
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` (-1: none)."""
    q, p = int(quota), int(period)
    return q / p if q > 0 and p > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _ancestors(root: Path, relative: str) -> Iterable[Path]:
    """``root/relative`` and each parent up to ``root`` (limits nest)."""
    parts = [part for part in relative.split("/") if part]
    for depth in range(len(parts), -1, -1):
        yield root.joinpath(*parts[:depth])


def cgroup_cpu_limit(
    proc_cgroup: str, root: Path = Path("/sys/fs/cgroup")
) -> float | None:
    """The tightest CPU quota over this process's cgroups, in CPUs (None: none).

    ``proc_cgroup`` is the text of ``/proc/self/cgroup``; v2 (``0::/path``)
    reads ``cpu.max``, v1 (``N:cpu,cpuacct:/path``) the CFS quota and period,
    each in the cgroup's directory and its parents under ``root``.
    """
    limits: list[float] = []
    for line in proc_cgroup.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, relative = fields
        limits.extend(_cgroup_limits(root, controllers, relative))
    return min(limits, default=None)


def _cgroup_limits(root: Path, controllers: str, relative: str) -> Iterator[float]:
    """The CPU quotas of one line of ``/proc/self/cgroup`` (v2 or v1 cpu)."""
    try:
        if controllers == "":
            yield from _v2_limits(root, relative)
        elif "cpu" in controllers.split(","):
            yield from _v1_limits(root, controllers, relative)
    except ValueError:  # a malformed file: no limit from it (nor the line's rest)
        return


def _v2_limits(root: Path, relative: str) -> Iterator[float]:
    """The ``cpu.max`` quotas of a v2 cgroup and its parents."""
    for directory in _ancestors(root, relative):
        text = _read(directory / "cpu.max")
        limit = parse_cpu_max(text) if text else None
        if limit:
            yield limit


def _v1_limits(root: Path, controllers: str, relative: str) -> Iterator[float]:
    """The CFS quotas of a v1 cpu cgroup and its parents, in either mount."""
    for mount in {root / controllers, root / "cpu"}:
        for directory in _ancestors(mount, relative):
            quota = _read(directory / "cpu.cfs_quota_us")
            period = _read(directory / "cpu.cfs_period_us")
            limit = parse_cfs(quota, period) if quota and period else None
            if limit:
                yield limit


def usable_cores(
    affinity: set[int] | None = None,
    proc_cgroup: str | None = None,
    root: Path = Path("/sys/fs/cgroup"),
) -> int:
    """The cores this process may use; at least 1.

    Its CPU affinity (default: this process's), capped by the cgroup CPU quota
    rounded up.
    """
    if affinity is None and hasattr(os, "sched_getaffinity"):
        affinity = os.sched_getaffinity(0)
    cores = len(affinity) if affinity else os.cpu_count() or 1
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    limit = cgroup_cpu_limit(proc_cgroup, root)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


# ------------------------------------------------------------------ registry


def registry_dir() -> Path:
    """Where this host's workers announce themselves (per user).

    ``$ZMQDATA_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/zmqdata-workers``, else
    ``/dev/shm/zmqdata-workers-<uid>``, else ``<tmp>/zmqdata-workers-<uid>``.
    """
    if os.environ.get(RUNTIME_DIR_VAR):
        return Path(os.environ[RUNTIME_DIR_VAR])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"], "zmqdata-workers")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return Path(base, f"zmqdata-workers-{os.getuid()}")


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None if it is gone.

    0 where ``/proc`` is missing and the process exists (no reuse check).
    """
    text = _read(Path(f"/proc/{pid}/stat"))
    if text is not None:
        try:  # the command name, in parentheses, may hold spaces
            return int(text.rsplit(")", 1)[1].split()[19])
        except (IndexError, ValueError):
            return None
    if os.path.isdir("/proc"):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return 0


class Seat:
    """One live worker's file in the registry, from creation to ``release()``.

    >>> import tempfile
    >>> directory = Path(tempfile.mkdtemp())
    >>> seats = [Seat(directory), Seat(directory)]
    >>> live_workers(directory)
    2
    >>> seats[0].release(); live_workers(directory)
    1
    >>> seats[1].release(); os.rmdir(directory)
    """

    def __init__(self, directory: Path | None = None) -> None:
        directory = registry_dir() if directory is None else directory
        pid = os.getpid()
        name = f"worker-{pid}-{start_time(pid) or 0}-{uuid.uuid4().hex[:12]}"
        self.path: Path | None = directory / name
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path.touch()
        except OSError as error:
            logger.debug("cannot announce the worker in %s: %s", directory, error)
            self.path = None

    def release(self) -> None:
        """Removes the file; idempotent."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


def live_workers(
    directory: Path | None = None,
    started: Callable[[int], int | None] = start_time,
) -> int:
    """The workers announced in ``directory`` whose process still runs.

    Files of dead processes (or of a reused pid: another start time) are removed.
    """
    directory = registry_dir() if directory is None else directory
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    live = 0
    for name in names:
        match = _SEAT.match(name)
        if match is None:
            continue
        now, then = started(int(match[1])), int(match[2])
        if now is not None and (now == then or 0 in (now, then)):  # 0: unknown
            live += 1
        else:
            (directory / name).unlink(missing_ok=True)
    return live


# ------------------------------------------------------------------ limits


def resolve(setting: Setting, extra_workers: int = 0) -> int | None:
    """``share()`` for this host now (``extra_workers``: not yet announced)."""
    if setting != "auto":
        return share(setting, 1, 1)
    return share(setting, usable_cores(), live_workers() + extra_workers)


def own_process(setting: Setting, extra_workers: int = 1) -> int | None:
    """Declares this process a dedicated worker process; returns its share now.

    Sets the ``ENV_VARS`` (for subprocesses and libraries loaded later); from
    then on each task limits every native pool, BLAS included. Call it once,
    early, on the main thread, which must never limit the pools itself: once
    the main thread has set OpenBLAS's thread count, OpenBLAS ignores the
    counts other threads set (seen with numpy's OpenBLAS 0.3.31).
    """
    global _owned
    if _owned:  # declared already (a worker joined again, or the CLI's)
        return resolve(setting)
    _owned = True
    threads = resolve(setting, extra_workers)
    if threads is not None:
        for name in ENV_VARS:
            os.environ[name] = str(threads)
        logger.info("native thread pools: %d threads each (%s)", threads, setting)
    return threads


def limit_producer(setting: Setting) -> None:
    """At a task's start, on its producer thread: hold its pools to the share.

    Call it once the pipeline is deserialized, so that the libraries it
    imports are loaded and limited too. Only OpenMP in a process that is not a
    dedicated worker process (see the module docstring).
    """
    try:
        threads = resolve(setting)
        if threads is not None:
            user_api = None if _owned else "openmp"
            threadpoolctl.threadpool_limits(limits=threads, user_api=user_api)
    except Exception as error:  # a pool that cannot be limited never fails the task
        logger.warning("cannot limit native thread pools: %r", error)
