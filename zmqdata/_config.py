"""Server configurations: frozen dataclasses validated when built.

Field names are the YAML keys of ``zmqdata up`` files. A bad value, including
one of the wrong type, raises ``ValueError`` naming the field and the value.

>>> DispatcherConfig(port=5050).port
5050
>>> DispatcherConfig(port=70000)
Traceback (most recent call last):
...
ValueError: DispatcherConfig.port: expected a port in 0-65535, got 70000
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from zmqdata._wire.address import PROTOCOLS, parse_target
from zmqdata.errors import InvalidArgumentError

DATA_PROTOCOLS = ("tcp", "ipc", "inproc")
WELL_KNOWN_PORT = 5050
"""The dispatcher's well-known port: ``zmqdata dispatcher`` listens there
unless told otherwise (``DispatcherConfig.port`` itself defaults to 0)."""
LOCAL_DISPATCHER = f"127.0.0.1:{WELL_KNOWN_PORT}"
"""Where ``zmqdata status``, ``trace`` and ``worker`` look for a dispatcher
when given no address: the local one on the well-known port."""
REQUEST_OVERHEAD_BYTES = 1 << 20
"""What a dispatcher request may hold besides a registration's pipeline and
element spec (``DispatcherConfig.max_request_bytes``)."""
MIN_FENCE_TIMEOUT_MS = 2_000
"""The shortest ``DispatcherConfig.fence_timeout_ms``: twice the silence after
which a consumer holds what it receives until the dispatcher answers it
(``_client/core.py``), so a consumer always notices it may have been fenced out."""


def check_pipeline_size(
    pipeline_bytes: int, spec_bytes: int, cap: int, *, serialized: bool = True
) -> None:
    """Refuses a registration over a dispatcher's ``max_pipeline_bytes`` (``cap``).

    ``serialized=False``: ``pipeline_bytes`` is the least the pipeline will
    serialize to (its data), checked before serializing it.

    >>> check_pipeline_size(10, 2, cap=11)
    Traceback (most recent call last):
    ...
    zmqdata.errors.InvalidArgumentError: the pipeline is 10 bytes (with its element spec 12), over the dispatcher's cap of 11 (DispatcherConfig.max_pipeline_bytes, YAML dispatcher.max_pipeline_bytes): read large data from files (e.g. list_files + map) instead of embedding it with from_tensor_slices / from_tensors, or raise the cap
    """
    if pipeline_bytes + spec_bytes > cap:
        size = (
            f"{pipeline_bytes} bytes (with its element spec {pipeline_bytes + spec_bytes})"
            if serialized
            else f"at least {pipeline_bytes} bytes (the data it embeds)"
        )
        raise InvalidArgumentError(
            f"the pipeline is {size}, over the dispatcher's cap of {cap} "
            "(DispatcherConfig.max_pipeline_bytes, YAML dispatcher.max_pipeline_bytes)"
            ": read large data from files (e.g. list_files + map) instead of "
            "embedding it with from_tensor_slices / from_tensors, or raise the cap"
        )


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected int, got {value!r}")
    return value


def _port(value: Any) -> int:
    if not 0 <= _int(value) <= 65535:
        raise ValueError(f"expected a port in 0-65535, got {value!r}")
    return int(value)


def _positive(value: Any) -> int:
    if _int(value) <= 0:
        raise ValueError(f"expected a positive int, got {value!r}")
    return int(value)


def _at_least(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if _int(value) < minimum:
            raise ValueError(f"expected an int >= {minimum}, got {value!r}")
        return int(value)

    return check


_non_negative = _at_least(0)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected bool, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty str, got {value!r}")
    return value


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return str(value)

    return check


def _texts(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValueError(f"expected a list of str, got {value!r}")
    if not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"expected a list of non-empty str, got {value!r}")
    return tuple(value)


def _threads(value: Any) -> int | str:
    if value in ("auto", "none"):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"expected 'auto', 'none' or an int >= 1, got {value!r}")


def _target(value: Any) -> str:
    return parse_target(value, what="address")


def _validate(config: Any, checks: dict[str, Callable[[Any], Any]]) -> None:
    for name, check in checks.items():
        try:
            value = check(getattr(config, name))
        except ValueError as error:
            raise ValueError(f"{type(config).__name__}.{name}: {error}") from None
        object.__setattr__(config, name, value)


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    """How a dispatcher listens and when it gives up on peers.

    Attributes:
        port: TCP port to bind; 0 picks a free one (see ``DispatchServer.target``).
        protocol: ``"tcp"`` or ``"ipc"`` (then ``host`` is the socket path).
        host: Interface to bind.
        work_dir: Directory for the journal (``fault_tolerant_mode``).
        fault_tolerant_mode: Journal every state change and replay it on restart.
        worker_addresses: Fixed worker list for static sharding.
        job_gc_check_interval_ms: How often to look for abandoned jobs.
        job_gc_timeout_ms: How long a job may have no consumers before it is dropped.
        worker_timeout_ms: Silence after which a worker counts as gone.
        client_timeout_ms: Silence after which a consumer counts as gone.
        gc_dynamic_sharding_jobs: Also collect DYNAMIC jobs (off: it breaks
            their visitation guarantee). Multi-rank reads are collected anyway.
        max_pipeline_bytes: The largest dataset registration (pipeline and
            element spec bytes) accepted; data embedded in a pipeline beyond
            that should be read from files instead.
        metrics_port: Serve Prometheus metrics over HTTP on this port (on
            ``host`` for tcp, else 127.0.0.1); 0 picks a free one (see
            ``DispatchServer.metrics_address``); ``None`` (default) serves none.
        curve_secret_key_file: The server's CURVE key pair (a ``NAME.key_secret``
            file from ``zmqdata keygen``); with it the dispatcher only talks
            CurveZMQ (see docs/security.md). Requires ``curve_authorized_keys_dir``.
        curve_authorized_keys_dir: Directory of the public ``.key`` files of the
            consumers (clients) allowed to connect; without
            ``curve_worker_keys_dir``, of the workers too.
        curve_worker_keys_dir: Directory of the public ``.key`` files allowed
            to act as workers (register, heartbeat, get splits); with it, only
            these keys may, and they may not make client requests unless
            ``curve_authorized_keys_dir`` holds them too. ``None`` (default,
            the old layout): every authorized key has both roles.
        fence_timeout_ms: Exactly once: a lost worker's unacknowledged keys
            wait for every consumer of its iteration to fence it; a consumer
            silent this long is not waited for (docs/reliability.md, Silent
            consumers). At least ``MIN_FENCE_TIMEOUT_MS``.

    The fields shared/API.md lists come first, in its order (positional calls
    written against it), the others after them; fields added from now on go
    last, after ``_: KW_ONLY`` (keyword-only).
    """

    port: int = 0
    protocol: str = "tcp"
    host: str = "127.0.0.1"
    work_dir: str | None = None
    fault_tolerant_mode: bool = False
    worker_addresses: tuple[str, ...] | None = None
    job_gc_check_interval_ms: int = 60_000
    job_gc_timeout_ms: int = 300_000
    worker_timeout_ms: int = 10_000
    client_timeout_ms: int = 60_000
    gc_dynamic_sharding_jobs: bool = False
    max_pipeline_bytes: int = 64 * 2**20
    metrics_port: int | None = None
    curve_secret_key_file: str | None = None
    curve_authorized_keys_dir: str | None = None
    curve_worker_keys_dir: str | None = None
    _: KW_ONLY
    fence_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        _validate(
            self,
            {
                "port": _port,
                "protocol": _choice(*PROTOCOLS),
                "host": _text,
                "work_dir": _optional(_text),
                "fault_tolerant_mode": _bool,
                "worker_addresses": _optional(_texts),
                "job_gc_check_interval_ms": _positive,
                "job_gc_timeout_ms": _positive,
                "worker_timeout_ms": _positive,
                "client_timeout_ms": _positive,
                "fence_timeout_ms": _at_least(MIN_FENCE_TIMEOUT_MS),
                "gc_dynamic_sharding_jobs": _bool,
                "max_pipeline_bytes": _positive,
                "metrics_port": _optional(_port),
                "curve_secret_key_file": _optional(_text),
                "curve_authorized_keys_dir": _optional(_text),
                "curve_worker_keys_dir": _optional(_text),
            },
        )
        _check_curve(self, "curve_authorized_keys_dir")
        if self.curve_worker_keys_dir is not None and not self.secured:
            raise ValueError(
                "DispatcherConfig: curve_worker_keys_dir also requires "
                "curve_secret_key_file, curve_authorized_keys_dir"
            )
        if self.fault_tolerant_mode and self.work_dir is None:
            raise ValueError(
                "DispatcherConfig: fault_tolerant_mode requires a work_dir"
            )

    @property
    def secured(self) -> bool:
        """Whether CurveZMQ is configured."""
        return self.curve_secret_key_file is not None

    @property
    def max_request_bytes(self) -> int:
        """The largest request accepted: ``zmq.MAXMSGSIZE`` of the dispatcher.

        A registration at ``max_pipeline_bytes`` with room for its other
        fields; a peer sending more is disconnected before it is received.
        """
        return self.max_pipeline_bytes + REQUEST_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a worker finds its dispatcher and serves consumers.

    Attributes:
        dispatcher_address: ``"host:port"`` or a full target of the dispatcher.
        worker_address: ``host:port`` the worker registers as and consumers
            dial (``tcp://`` + it). Default: the bound host and port; for a
            wildcard host (``0.0.0.0``, ``*``) this host's address on
            the route to the dispatcher. Set it behind NAT or port mapping.
        port: Data port to bind; 0 picks a free one.
        protocol: Control protocol, ``"tcp"`` or ``"ipc"``.
        host: Interface the data socket binds.
        heartbeat_interval_ms: How often to report to the dispatcher.
        dispatcher_timeout_ms: How long to keep retrying an unreachable dispatcher.
        data_transfer_protocol: ``None`` (same as ``protocol``), ``"tcp"``,
            ``"ipc"`` or ``"inproc"``.
        worker_tags: Free-form tags reported to the dispatcher.
        cross_trainer_cache_size_bytes: Window of the cross-trainer cache.
        metrics_port: Serve Prometheus metrics over HTTP on this port (on
            ``host`` for tcp, else 127.0.0.1); 0 picks a free one (see
            ``WorkerServer.metrics_address``); ``None`` (default) serves none.
        curve_secret_key_file: The cluster's server CURVE key pair (a
            ``NAME.key_secret`` file); the worker uses it both as the CURVE
            server of its data socket and as its client key towards the
            dispatcher (see docs/security.md). Requires the two fields below.
        curve_authorized_keys_dir: Directory of the public ``.key`` files of the
            consumers allowed to read from this worker.
        dispatcher_public_key_file: The dispatcher's public ``.key`` file.
        threads: Threads each native pool (BLAS, OpenMP, ...) of the worker's
            pipelines may use: ``"auto"`` (default) this host's usable cores
            (affinity, cgroup quota) divided by its live zmqdata workers,
            ``N``, or ``"none"`` to leave the pools alone. A worker inside
            another process limits only OpenMP, per producer thread (see
            docs/deployment.md).
    """

    dispatcher_address: str
    worker_address: str | None = None
    port: int = 0
    protocol: str = "tcp"
    host: str = "127.0.0.1"
    heartbeat_interval_ms: int = 1_000
    dispatcher_timeout_ms: int = 3_600_000
    data_transfer_protocol: str | None = None
    worker_tags: tuple[str, ...] = field(default=())
    cross_trainer_cache_size_bytes: int = 10 * 2**30
    metrics_port: int | None = None
    curve_secret_key_file: str | None = None
    curve_authorized_keys_dir: str | None = None
    dispatcher_public_key_file: str | None = None
    threads: int | str = "auto"

    def __post_init__(self) -> None:
        _validate(
            self,
            {
                "dispatcher_address": _target,
                "worker_address": _optional(_text),
                "port": _port,
                "protocol": _choice(*PROTOCOLS),
                "host": _text,
                "heartbeat_interval_ms": _positive,
                "dispatcher_timeout_ms": _positive,
                "data_transfer_protocol": _optional(_choice(*DATA_PROTOCOLS)),
                "worker_tags": _texts,
                "cross_trainer_cache_size_bytes": _non_negative,
                "metrics_port": _optional(_port),
                "curve_secret_key_file": _optional(_text),
                "curve_authorized_keys_dir": _optional(_text),
                "dispatcher_public_key_file": _optional(_text),
                "threads": _threads,
            },
        )
        _check_curve(self, "curve_authorized_keys_dir", "dispatcher_public_key_file")

    @property
    def secured(self) -> bool:
        """Whether CurveZMQ is configured."""
        return self.curve_secret_key_file is not None


def _check_curve(config: Any, *companions: str) -> None:
    """The CURVE fields come together: all set or none."""
    fields = ("curve_secret_key_file", *companions)
    given = [name for name in fields if getattr(config, name) is not None]
    if given and len(given) != len(fields):
        missing = [name for name in fields if name not in given]
        raise ValueError(
            f"{type(config).__name__}: {', '.join(given)} also requires "
            f"{', '.join(missing)}"
        )
