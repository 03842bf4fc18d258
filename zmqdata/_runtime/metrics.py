"""Serving counters and the optional Prometheus endpoint of a server.

Servers count with plain ints (one add per batch on the thread that serves it)
and never touch ``prometheus_client`` on a hot path: a ``MetricsServer`` holds a
registry of its own with one collector, which reads those ints when Prometheus
scrapes. Each server has its own registry and HTTP server, so several servers in
one process never clash; ``stop()`` shuts the HTTP server and its thread down
and frees the port. Every endpoint also serves the process's ``process_*``
metrics (CPU seconds, resident memory, open fds, start time; Linux) and
``zmqdata_build_info``.

>>> stats = ServeStats()
>>> stats.served(3, 120); stats.failed(); stats.as_dict()
{'elements': 3, 'bytes': 120, 'requests': 2, 'errors': 1}
"""

from __future__ import annotations

import itertools
import logging
import platform
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

from zmqdata._version import PROTOCOL_VERSION, __version__
from zmqdata.errors import UnavailableError

_ids = itertools.count()
JOIN_TIMEOUT_S = 10.0


class ServeStats:
    """Monotonic serving counters, written by one thread and read by any.

    Python int reads and writes are atomic under the GIL, so readers (the
    heartbeat, a scrape) take no lock; each field is exact on its own.
    """

    __slots__ = ("bytes", "elements", "errors", "requests")

    def __init__(self) -> None:
        self.elements = 0
        self.bytes = 0
        self.requests = 0
        self.errors = 0

    def served(self, elements: int, nbytes: int) -> None:
        """Counts one reply carrying ``elements`` (``nbytes`` of payload)."""
        self.requests += 1
        self.elements += elements
        self.bytes += nbytes

    def failed(self) -> None:
        """Counts one error reply."""
        self.requests += 1
        self.errors += 1

    def missed(self) -> None:
        """Counts a request for a task this worker has not started or has deleted.

        The reader asks again or moves on: not an error.
        """
        self.requests += 1

    def as_dict(self) -> dict[str, int]:
        """The counters by name (what heartbeats carry)."""
        return {
            "elements": self.elements,
            "bytes": self.bytes,
            "requests": self.requests,
            "errors": self.errors,
        }


def counter(name: str, documentation: str, value: float) -> Metric:
    """A counter family (``name`` without ``_total``) with one unlabelled sample."""
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(name, documentation, value=value)


def gauge(name: str, documentation: str, value: float) -> Metric:
    """A gauge family with one unlabelled sample."""
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, documentation, value=value)


def build_info() -> Metric:
    """``zmqdata_build_info{version, protocol, python} 1``: what this process runs.

    >>> [sample] = build_info().samples
    >>> sorted(sample.labels), sample.value
    (['protocol', 'python', 'version'], 1)
    """
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(
        "zmqdata_build_info",
        "zmqdata version, wire protocol version and Python version (always 1).",
        labels=("version", "protocol", "python"),
    )
    family.add_metric(
        (__version__, str(PROTOCOL_VERSION), platform.python_version()), 1
    )
    return family


class _Collector:
    """Adapts a callable to ``prometheus_client``'s collector protocol."""

    def __init__(
        self, collect: Callable[[], Iterable[Metric]], log: logging.Logger
    ) -> None:
        self._collect = collect
        self._log = log

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self._collect())
        except Exception:  # a scrape must never take the server down
            self._log.exception("collecting metrics failed")
            return []


class MetricsServer:
    """An HTTP ``/metrics`` endpoint over a private registry.

    Args:
        name: Names the serving thread (``zmqdata-metrics-<name>-<n>``).
        host: Interface to bind.
        port: Port to bind; 0 picks a free one (see ``port``).
        collect: Returns the metric families at each scrape.
    """

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        collect: Callable[[], Iterable[Metric]],
    ) -> None:
        try:
            from prometheus_client import (
                CollectorRegistry,
                ProcessCollector,
                start_http_server,
            )
        except ImportError:  # pragma: no cover - prometheus_client is a dependency
            raise ImportError(
                "metrics_port needs the prometheus_client package: "
                "pip install prometheus_client"
            ) from None
        self._registry = CollectorRegistry(auto_describe=False)
        self._log = logging.getLogger(f"zmqdata.{name}")  # a role: dispatcher, worker
        self._registry.register(
            _Collector(lambda: [*collect(), build_info()], self._log)
        )
        ProcessCollector(registry=self._registry)  # process_*: nothing off Linux
        self._server: WSGIServer | None
        try:
            self._server, self._thread = start_http_server(
                port, addr=host, registry=self._registry
            )
        except OSError as error:
            raise UnavailableError(
                f"cannot serve metrics on {host}:{port}: {error}"
            ) from None
        self._thread.name = f"zmqdata-metrics-{name}-{next(_ids)}"
        self._lock = threading.Lock()
        self.host = host
        self.port: int = self._server.server_address[1]

    @property
    def address(self) -> str:
        """``host:port`` of the endpoint (the real port, also for port 0)."""
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        """Stops serving, closes the socket and joins the thread; idempotent."""
        with self._lock:
            server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            self._log.warning(
                "%s did not stop in %.0f s", self._thread.name, JOIN_TIMEOUT_S
            )
