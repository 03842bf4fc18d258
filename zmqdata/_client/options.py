"""What a read was asked for (``ReadOptions``) and its timings (``Timeouts``)."""

from __future__ import annotations

from dataclasses import dataclass

from zmqdata._wire.modes import EXACTLY_ONCE


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a consumer asked for in ``distribute`` / ``from_dataset_id``.

    Validated once (``api._read_options``) and kept as it is in the read's
    ``data_service`` node (its ``options`` arg), which the op's iterator, the
    framework adapters (``_adapters.py``) and the pipeline's bytes carry.
    Frozen: a changed read is a ``dataclasses.replace`` copy.

    >>> import dataclasses
    >>> read = ReadOptions("tcp://d:5000", "7", 1, "run", None, None, "AUTO")
    >>> dataclasses.replace(read, num_consumers=2, consumer_index=0).num_consumers
    2
    """

    service: str
    dataset_id: str
    processing_mode: int
    job_name: str | None
    max_outstanding_requests: int | None
    data_transfer_protocol: str | None
    target_workers: str
    consumer_index: int | None = None
    num_consumers: int | None = None
    trainer_id: str | None = None
    exactly_once: bool = EXACTLY_ONCE
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The reader's timings (from ``ClientSettings``)."""

    heartbeat_s: float
    dispatcher_timeout_s: float
    worker_timeout_s: float
