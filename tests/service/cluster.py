"""``Cluster``: a dispatcher and N workers in this process, like TF's TestCluster."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from tests.helpers import poll_for
from zmqdata import service

STOP_DEADLINE_S = 15.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Only for a port needed before its server exists (an address nothing
    listens on, a static worker list, a process restarted on its port):
    otherwise bind port 0 and read the bound port (``port_of``).
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def held_ports(count: int) -> Iterator[list[int]]:
    """``count`` free ports, kept bound until the block ends.

    For servers listed by port before they start (static worker lists): what
    binds port 0 meanwhile (the dispatcher) cannot be given one of them.
    """
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        yield [sock.getsockname()[1] for sock in socks]


def port_of(address: str) -> int:
    """The port of ``tcp://host:port`` or ``host:port``: what port 0 bound."""
    return int(address.rsplit(":", 1)[1])


class Cluster:
    """A dispatcher on ``127.0.0.1`` (port 0) and ``num_workers`` fast-beating workers."""

    def __init__(
        self,
        num_workers: int = 1,
        *,
        worker_timeout_ms: int = 500,
        client_timeout_ms: int = 2_000,
        heartbeat_interval_ms: int = 50,
        port: int = 0,
        dispatcher_options: dict[str, Any] | None = None,
        **worker_options: Any,
    ) -> None:
        """``dispatcher_options``: more ``DispatcherConfig`` fields (e.g. job GC)."""
        self.dispatcher = service.DispatchServer(
            service.DispatcherConfig(
                port=port,
                worker_timeout_ms=worker_timeout_ms,
                client_timeout_ms=client_timeout_ms,
                **(dispatcher_options or {}),
            )
        )
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.worker_options = worker_options
        self.workers: list[service.WorkerServer] = []
        try:
            for _ in range(num_workers):
                self.add_worker(wait=False)
            poll_for(lambda: self.num_registered_workers() == num_workers)
        except BaseException:
            self.stop()
            raise

    @property
    def target(self) -> str:
        return self.dispatcher.target

    def add_worker(self, wait: bool = True, **options: Any) -> service.WorkerServer:
        """Starts one more worker; by default waits until the dispatcher knows it."""
        config = service.WorkerConfig(
            self.target,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            **{**self.worker_options, **options},
        )
        worker = service.WorkerServer(config)
        self.workers.append(worker)
        if wait:
            address = worker.address.split("://", 1)[1]
            poll_for(lambda: address in self.registered_addresses())
        return worker

    def stop_worker(self, index: int) -> None:
        self.workers[index].stop()

    def num_registered_workers(self) -> int:
        return len(service.get_status(self.target)["workers"])

    def registered_addresses(self) -> list[str]:
        return [w["address"] for w in service.get_status(self.target)["workers"]]

    def status(self) -> dict[str, Any]:
        return service.get_status(self.target)

    def stop(self) -> None:
        """Stops every server, failing if that takes longer than the deadline."""
        errors: list[BaseException] = []

        def stop_all() -> None:
            for server in [*self.workers, self.dispatcher]:
                try:
                    server.stop()
                except BaseException as error:  # report all, stop the rest anyway
                    errors.append(error)

        stopper = threading.Thread(target=stop_all, name="test-cluster-stop")
        stopper.start()
        stopper.join(STOP_DEADLINE_S)
        assert not stopper.is_alive(), f"cluster did not stop in {STOP_DEADLINE_S} s"
        if errors:
            raise errors[0]
