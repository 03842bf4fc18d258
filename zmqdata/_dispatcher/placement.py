"""Which workers get a job's tasks: static-sharding slots and LOCAL reads.

A worker's slot in ``DispatcherConfig.worker_addresses`` is found once, when it
registers (``worker_index``), and journaled with it; ``serves`` then says, per
job, whether the worker gets a task.
"""

from __future__ import annotations

from zmqdata._dispatcher import model
from zmqdata._wire.modes import STATIC

PORT_PLACEHOLDER = "%port%"


def _host_port(address: str) -> tuple[str, str | None]:
    """``"host:port"`` -> ``(host, port)``; ``"host"`` -> ``(host, None)``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or "]" in port:  # no port (also a bare [v6] address)
        return address, None
    return host, port


def worker_index(
    address: str, worker_addresses: tuple[str, ...] | None, taken: set[int]
) -> int | None:
    """Where a worker advertising ``address`` sits in ``worker_addresses``.

    An entry equal to ``address`` wins; otherwise the first entry not ``taken``
    by a live worker whose host matches and whose port is ``%port%`` or absent
    (any port). None if no entry fits: the worker gets no static-sharding task.

    >>> worker_index("h:7", ("h:5", "h:%port%", "h"), taken={1})
    2
    >>> worker_index("h:5", ("h:%port%", "h:5"), taken=set())
    1
    >>> worker_index("g:5", ("h:%port%",), taken=set()) is None
    True
    """
    entries = list(enumerate(worker_addresses or ()))
    for index, entry in entries:
        if entry == address and index not in taken:
            return index
    host = _host_port(address)[0]
    for index, entry in entries:
        entry_host, entry_port = _host_port(entry)
        if (
            index not in taken
            and entry_host == host
            and entry_port in (None, PORT_PLACEHOLDER)
        ):
            return index
    return None


def reads_local_processes(job: model.Job) -> bool:
    """Whether a job gives tasks only to its consumers' processes' workers.

    That is an OFF or DYNAMIC job read with ``target_workers="LOCAL"``;
    static sharding reads local workers too, but shards over the fixed list.
    """
    return job.target_workers == "LOCAL" and job.processing_mode not in STATIC


def serves(job: model.Job, worker: model.Worker) -> bool:
    """Whether ``worker`` gets tasks of ``job``.

    Static sharding: only listed workers. ``target_workers="LOCAL"``: only
    workers in a process that reads the job, so no split goes to a worker
    nobody reads.
    """
    if reads_local_processes(job):
        return worker.local_process in job.consumer_processes
    return job.processing_mode not in STATIC or worker.index is not None
