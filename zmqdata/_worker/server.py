"""``WorkerServer``: registers with the dispatcher, runs tasks, serves their data.

Three kinds of threads, each owning its sockets: the control loop (a DEALER to
the dispatcher: registration, heartbeats, pushed tasks), the data loop (ROUTER
data sockets) and one producer thread per task.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, Self

from zmqdata._config import WorkerConfig
from zmqdata._runtime import auth, hostaddr, ipc, metrics, shm, threads
from zmqdata._runtime.process import LOCAL_WORKERS
from zmqdata._runtime.waker import Waker
from zmqdata._worker.control import ControlLoop
from zmqdata._worker.data import DataLoop, Runners
from zmqdata._worker.stats import collect_metrics, worker_stats
from zmqdata.errors import (
    FailedPreconditionError,
)

logger = logging.getLogger("zmqdata.worker")

DRAIN_TIMEOUT_S = 8.0
"""How long ``WorkerServer.drain`` waits for consumers to read the buffers."""
LEAVE_TIMEOUT_S = 1.0
"""How long a drained worker waits for the dispatcher to take its leave."""


class WorkerServer:
    """A worker: runs pipelines for the dispatcher's tasks and streams their elements.

    >>> from zmqdata import service
    >>> with service.DispatchServer() as dispatcher:
    ...     with service.WorkerServer(service.WorkerConfig(dispatcher.target)) as worker:
    ...         worker.address.startswith("tcp://127.0.0.1:")
    True
    """

    def __init__(self, config: WorkerConfig, start: bool = True) -> None:
        if not isinstance(config, WorkerConfig):
            raise TypeError(f"config must be a WorkerConfig, got {config!r}")
        if shm.enabled():  # also checks ZMQDATA_SHARED_MEMORY
            shm.sweep()  # segments of dead processes
        protocol = config.data_transfer_protocol or config.protocol
        host = (
            ipc.bind_host(protocol, config.host)  # ipc: one socket file per worker
            if protocol != "inproc"
            else f"zmqdata-worker-{uuid.uuid4().hex}"
        )
        server_keys = auth.server_keys(
            config.curve_secret_key_file, config.curve_authorized_keys_dir
        )
        client_keys = auth.client_keys(
            config.curve_secret_key_file, config.dispatcher_public_key_file
        )
        self._waker = Waker()
        self._runners = Runners()
        self._data = DataLoop(
            protocol, host, config.port, self._runners, self._waker, server_keys
        )
        self._control = ControlLoop(config, self._data, self._runners, client_keys)
        self._metrics: metrics.MetricsServer | None = None
        self._stopped = False
        self._counted = False
        if start:
            self.start()

    @property
    def config(self) -> WorkerConfig:
        """The configuration the server was built with."""
        return self._control.config

    @property
    def address(self) -> str:
        """The endpoint consumers read from, as registered with the dispatcher.

        Not the bound one when that is a wildcard: a worker bound to
        ``0.0.0.0:5051`` is read at ``tcp://<worker_address>`` or, by default,
        at ``tcp://<this host's address towards the dispatcher>:5051``.
        """
        if not self._control.data_address:
            raise FailedPreconditionError("the worker has no address until start()")
        return self._control.data_address

    def start(self) -> None:
        """Binds the data socket (and metrics), then registers with the dispatcher."""
        if self._stopped:
            raise FailedPreconditionError("a stopped WorkerServer cannot start again")
        self._data.start()
        try:
            self._advertise()
        except BaseException:
            self.stop()
            raise
        port = self.config.metrics_port
        if port is not None and self._metrics is None:
            protocol = self.config.data_transfer_protocol or self.config.protocol
            host = self.config.host if protocol == "tcp" else "127.0.0.1"
            data, runners = self._data, self._runners
            try:
                self._metrics = metrics.MetricsServer(
                    "worker", host, port, lambda: collect_metrics(data, runners)
                )
            except BaseException:
                self.stop()
                raise
        # Last: a worker that fails to start never registers (no phantom worker).
        self._control.start()
        if not self._counted:  # target_workers="LOCAL" reads check for one
            self._counted = True
            LOCAL_WORKERS.started()
            self._seat = threads.Seat()  # counted by "auto" thread shares

    def _advertise(self) -> None:
        control = self._control
        control.worker_address, control.data_address = hostaddr.advertise(
            self._data.endpoint,
            self.config.dispatcher_address,
            self.config.worker_address,
        )
        self._data.address = control.data_address
        logger.info(
            "worker bound %s, advertised as %s",
            self._data.endpoint,
            control.data_address,
        )

    def registered(self, timeout_s: float = 0.0) -> bool:
        """Whether the dispatcher has registered this worker, waiting up to ``timeout_s``."""
        return self._control.registered.wait(timeout_s)

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the Prometheus endpoint (None without ``metrics_port``)."""
        return None if self._metrics is None else self._metrics.address

    def stats(self) -> dict[str, Any]:
        """The counters and buffer fill this worker reports in its heartbeats."""
        return worker_stats(self._data, self._runners)

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
        """Leaves the dispatcher without losing data; then ``stop()`` the worker.

        The worker takes no new task, its tasks stop asking for splits and
        finish those they hold, consumers read what is buffered, then it tells
        the dispatcher it leaves, which hands the keys its tasks still held
        (exactly once) to other workers at once instead of after
        ``worker_timeout_ms``. Returns False if the buffers were not read
        within ``timeout_s``: the worker then leaves with what it holds
        (exactly-once reads get those keys from other workers; at-most-once
        reads lose them). See docs/deployment.md, Autoscaling.

        >>> from zmqdata import service
        >>> with service.DispatchServer() as dispatcher:
        ...     with service.WorkerServer(service.WorkerConfig(dispatcher.target)) as w:
        ...         w.drain(timeout_s=5)
        True
        """
        if self._stopped:
            return True
        self._control.drain_requested.set()
        if self._control.left.wait(timeout_s):
            return True
        logger.warning("worker buffers not read in %.0f s: leaving anyway", timeout_s)
        self._control.leave_now.set()
        self._control.left.wait(LEAVE_TIMEOUT_S)
        return False

    def stop(self) -> None:
        """Stops tasks and loops and frees the port; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._counted:
            LOCAL_WORKERS.stopped()
            self._seat.release()
        if self._metrics is not None:
            self._metrics.stop()
        self._control.stop()
        self._data.stop()
        self._waker.close()

    def join(self, timeout: float | None = None) -> None:
        """Blocks until ``stop()`` (or ``timeout``); raises if a server loop crashed.

        Joined on the main thread, the worker owns its process (tf.data's
        pattern: ``WorkerServer(config).join()`` as a script's last line): from
        then on its tasks hold every native thread pool, BLAS included, to
        its share of the host's cores (``WorkerConfig.threads``), as a
        ``zmqdata worker`` does. A worker in a process whose main thread does
        something else (a trainer's) leaves that process's BLAS pools alone.
        """
        if threading.current_thread() is threading.main_thread():
            threads.own_process(self.config.threads, extra_workers=0)
        self._data.join(0)
        self._control.join(timeout)
        self._data.join(0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<WorkerServer {self._data.endpoint or 'not started'}>"
