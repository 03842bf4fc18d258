"""``distribute``, ``register_dataset``, ``from_dataset_id``, ``get_status``.

Arguments are validated before anything contacts the network, with the
``ValueError`` cases of tf.data's ``data_service_ops.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from zmqdata._client import rpc, settings
from zmqdata._client.options import ReadOptions
from zmqdata._client.position import progress_for
from zmqdata._client.reader import DistributedIterator, open_job
from zmqdata._config import REQUEST_OVERHEAD_BYTES, check_pipeline_size
from zmqdata._dataset import graph
from zmqdata._dataset.constants import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
)
from zmqdata._dataset.dataset import Dataset
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Node, Op
from zmqdata._dataset.specs import decode_spec, encode_spec
from zmqdata._runtime.process import LOCAL_WORKERS
from zmqdata._wire import messages as m
from zmqdata._wire.address import dispatcher_target
from zmqdata._wire.modes import EXACTLY_ONCE, ShardingPolicy
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

_MODES = {
    "parallel_epochs": ShardingPolicy.OFF,
    "distributed_epoch": ShardingPolicy.DYNAMIC,
}
_TARGET_WORKERS = ("AUTO", "ANY", "LOCAL")
_DATA_PROTOCOLS = (None, "tcp", "ipc", "inproc")


@dataclass(frozen=True, slots=True)
class CrossTrainerCache:
    """Lets consumers with different ``trainer_id`` share one job's elements.

    >>> CrossTrainerCache("trainer-1").trainer_id
    'trainer-1'
    """

    trainer_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.trainer_id, str) or not self.trainer_id:
            raise ValueError(
                f"CrossTrainerCache trainer_id must be a non-empty str, got {self.trainer_id!r}"
            )


# ------------------------------------------------------------------ validation


def _processing_mode(value: Any) -> ShardingPolicy:
    if isinstance(value, ShardingPolicy):
        return value
    if isinstance(value, str) and value in _MODES:
        return _MODES[value]
    raise ValueError(
        f"invalid processing_mode {value!r}: expected 'parallel_epochs', "
        "'distributed_epoch' or a service.ShardingPolicy"
    )


def _job_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"job_name must be a string, got {value!r}")
    if not value:
        raise ValueError(f"job_name must not be empty, got {value!r}")
    return value


def _consumers(
    job_name: str | None, consumer_index: Any, num_consumers: Any
) -> tuple[int | None, int | None]:
    if (consumer_index is None) != (num_consumers is None):
        raise ValueError(
            "consumer_index and num_consumers must be given together, got "
            f"consumer_index={consumer_index!r}, num_consumers={num_consumers!r}"
        )
    if num_consumers is None:
        return None, None
    if job_name is None:
        raise ValueError(
            "job_name must be set when consumer_index/num_consumers are used, "
            f"got job_name={job_name!r}"
        )
    for name, value in (
        ("num_consumers", num_consumers),
        ("consumer_index", consumer_index),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if num_consumers < 1:
        raise ValueError(f"num_consumers must be >= 1, got {num_consumers}")
    if not 0 <= consumer_index < num_consumers:
        raise ValueError(
            f"consumer_index must be in [0, {num_consumers}), got {consumer_index}"
        )
    return consumer_index, num_consumers


def _max_outstanding(value: Any) -> int | None:
    if value is None or value == AUTOTUNE:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_outstanding_requests must be an int >= 1, got {value!r}")
    return value


def _data_protocol(value: Any) -> str | None:
    if value not in _DATA_PROTOCOLS:
        raise ValueError(
            f"data_transfer_protocol must be None, 'tcp', 'ipc' or 'inproc', got {value!r}"
        )
    return value  # type: ignore[no-any-return]


def _compression(value: Any) -> str | None:
    if value not in ("AUTO", None):
        raise ValueError(f"compression must be 'AUTO' or None, got {value!r}")
    return value  # type: ignore[no-any-return]


def _target_workers(value: Any, mode: ShardingPolicy) -> str:
    if not isinstance(value, str) or value.upper() not in _TARGET_WORKERS:
        raise ValueError(
            f"target_workers must be 'AUTO', 'ANY' or 'LOCAL', got {value!r}"
        )
    # As in tf.data: AUTO means LOCAL under static sharding (each consumer reads
    # its local worker's shard); an explicit ANY is refused by the dispatcher.
    static = mode not in (ShardingPolicy.OFF, ShardingPolicy.DYNAMIC)
    return "LOCAL" if static and value.upper() == "AUTO" else value.upper()


def _trainer_id(value: Any, job_name: str | None, coordinated: bool) -> str | None:
    """The trainer id of a ``cross_trainer_cache`` argument (which needs a job name)."""
    if value is None:
        return None
    if not isinstance(value, CrossTrainerCache):
        raise ValueError(
            f"cross_trainer_cache must be a CrossTrainerCache, got {value!r}"
        )
    if job_name is None:
        raise InvalidArgumentError(
            f"cross-trainer caching requires a job_name, got {value!r} without one"
        )
    if coordinated:
        raise InvalidArgumentError(
            f"cross_trainer_cache={value!r} cannot be combined with coordinated "
            "reads (consumer_index/num_consumers)"
        )
    return value.trainer_id


def _read_options(
    processing_mode: Any,
    service: Any,
    job_name: Any,
    consumer_index: Any,
    num_consumers: Any,
    max_outstanding_requests: Any,
    data_transfer_protocol: Any,
    cross_trainer_cache: Any,
    target_workers: Any,
    exactly_once: Any,
    seed: Any = None,
) -> ReadOptions:
    """Validates the reading arguments shared by distribute and from_dataset_id.

    The options of a dataset not named yet (``dataset_id`` empty): the caller
    names it (``replace``) once it knows it.
    """
    if not isinstance(exactly_once, bool):
        raise TypeError(f"exactly_once must be a bool, got {exactly_once!r}")
    mode = _processing_mode(processing_mode)
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63
    ):
        raise ValueError(f"seed must be None or an int in [0, 2**63), got {seed!r}")
    if seed is not None and mode != ShardingPolicy.DYNAMIC:
        raise ValueError(
            f"seed={seed!r} orders the splits of a distributed_epoch read; "
            f"processing_mode is {mode.display_name}"
        )
    target = dispatcher_target(service)
    job_name = _job_name(job_name)
    consumer_index, num_consumers = _consumers(job_name, consumer_index, num_consumers)
    return ReadOptions(
        service=target,
        dataset_id="",
        processing_mode=int(mode),
        job_name=job_name,
        max_outstanding_requests=_max_outstanding(max_outstanding_requests),
        data_transfer_protocol=_data_protocol(data_transfer_protocol),
        target_workers=_target_workers(target_workers, mode),
        consumer_index=consumer_index,
        num_consumers=num_consumers,
        trainer_id=_trainer_id(
            cross_trainer_cache, job_name, num_consumers is not None
        ),
        exactly_once=exactly_once,
        seed=seed,
    )


# ------------------------------------------------------------------ public calls


def register_dataset(
    service: Any,
    dataset: Dataset,
    compression: str | None = "AUTO",
    dataset_id: str | None = None,
) -> str:
    """Registers ``dataset`` with the dispatcher and returns its id.

    Registering an equal pipeline again returns the same id; ``dataset_id``
    asks for a specific id. ``service=None``: ``ZMQDATA_DISPATCHER``.
    """
    target = dispatcher_target(service)
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a zmqdata Dataset, got {dataset!r}")
    compression = _compression(compression)
    if dataset_id is not None and (not isinstance(dataset_id, str) or not dataset_id):
        raise ValueError(f"dataset_id must be a non-empty str, got {dataset_id!r}")
    timeout_s = settings.current().dispatcher_timeout_s
    floor = graph.data_bytes(dataset._node)
    cap = _cap(target, floor, timeout_s)
    if cap is not None:  # refused before serializing (seconds for a large one)
        check_pipeline_size(floor, 0, cap, serialized=False)
    request = m.GetOrRegisterDataset(
        pipeline=graph.serialize(dataset._node),
        dataset_id=dataset_id,
        compression=compression,
        element_spec=encode_spec(dataset.element_spec),
    )
    sizes = len(request.pipeline), len(request.element_spec)
    cap = _cap(target, sum(sizes), timeout_s) if cap is None else cap
    if cap is not None:
        check_pipeline_size(*sizes, cap)
    reply = rpc.call(target, request, m.GetOrRegisterDatasetReply, timeout_s)
    return reply.dataset_id


ASK_CAP_FROM = REQUEST_OVERHEAD_BYTES // 2
"""A registration this big asks the dispatcher its cap first; a smaller one is
within any dispatcher's ``max_request_bytes``, so the dispatcher answers it."""


def _cap(target: str, size: int, timeout_s: float) -> int | None:
    """The dispatcher's ``max_pipeline_bytes`` if a registration of ``size`` needs it.

    One over it is refused without being sent: a dispatcher disconnects a
    peer that sends more than it accepts, before receiving it
    (docs/reliability.md, Hostile input). None: small, or not told (a
    dispatcher of protocol v5).
    """
    if size < ASK_CAP_FROM:
        return None
    status = rpc.call(target, m.GetStatus(), m.GetStatusReply, timeout_s).status
    cap = status.get("max_pipeline_bytes")
    return cap if type(cap) is int else None


def from_dataset_id(
    processing_mode: Any,
    service: Any,
    dataset_id: str,
    element_spec: Any = None,
    job_name: str | None = None,
    consumer_index: int | None = None,
    num_consumers: int | None = None,
    max_outstanding_requests: int | None = None,
    data_transfer_protocol: str | None = None,
    cross_trainer_cache: CrossTrainerCache | None = None,
    target_workers: str = "AUTO",
    exactly_once: bool = EXACTLY_ONCE,
    seed: int | None = None,
) -> Dataset:
    """A dataset reading the registered dataset ``dataset_id`` from the service.

    The dispatcher tells the spec (unless ``element_spec`` is given) and
    whether the dataset is infinite; an unknown id raises
    ``zmqdata.errors.NotFoundError``. ``service=None``: ``ZMQDATA_DISPATCHER``.
    """
    read = _read_options(
        processing_mode, service, job_name, consumer_index, num_consumers,
        max_outstanding_requests, data_transfer_protocol, cross_trainer_cache,
        target_workers, exactly_once, seed,
    )  # fmt: skip
    if not isinstance(dataset_id, str) or not dataset_id:
        raise ValueError(f"dataset_id must be a non-empty str, got {dataset_id!r}")
    reply = rpc.call(
        read.service,
        m.GetDatasetInfo(dataset_id=dataset_id),
        m.GetDatasetInfoReply,
        settings.current().dispatcher_timeout_s,
    )
    return _service_dataset(
        replace(read, dataset_id=dataset_id),
        reply.element_spec if element_spec is None else encode_spec(element_spec),
        reply.cardinality == INFINITE_CARDINALITY,
    )


def registered_dataset(service: Any, dataset_id: str, timeout_s: float) -> Dataset:
    """The pipeline registered as ``dataset_id``, rebuilt here, its functions loaded.

    For ``zmqdata lineage``, which runs its splits in this process: loading
    unpickles the user functions (cloudpickle), so ask a dispatcher you
    trust, from a process that can import what they use. An unknown id
    raises ``NotFoundError``; a dispatcher of protocol v5 sends no pipeline
    (``FailedPreconditionError``).
    """
    reply = rpc.call(
        dispatcher_target(service),
        m.GetDatasetInfo(dataset_id=dataset_id, pipeline=True),
        m.GetDatasetInfoReply,
        timeout_s,
    )
    if not reply.pipeline:
        raise FailedPreconditionError(
            f"the dispatcher sent no pipeline for dataset {dataset_id!r}: it "
            "speaks protocol v5, which has none to send; upgrade it"
        )
    return Dataset(graph.deserialize(reply.pipeline))


def distribute(
    processing_mode: Any,
    service: Any = None,
    job_name: str | None = None,
    consumer_index: int | None = None,
    num_consumers: int | None = None,
    max_outstanding_requests: int | None = None,
    data_transfer_protocol: str | None = None,
    compression: str | None = "AUTO",
    cross_trainer_cache: CrossTrainerCache | None = None,
    target_workers: str = "AUTO",
    exactly_once: bool = EXACTLY_ONCE,
    seed: int | None = None,
) -> Callable[[Dataset], Dataset]:
    """A transformation that runs the dataset so far on the service's workers.

    Use with ``Dataset.apply``: ops before it run on workers, ops after it run
    in the consumer. ``exactly_once`` (``distributed_epoch``): every element
    is tracked, so what a lost worker had not delivered is produced again,
    and the read can save and resume its position (docs/modes.md).
    ``service`` (the dispatcher's address) defaults to ``ZMQDATA_DISPATCHER``.

    >>> import zmqdata as zd
    >>> from zmqdata import service
    >>> dispatcher = service.DispatchServer()
    >>> worker = service.WorkerServer(service.WorkerConfig(dispatcher.target))
    >>> ds = zd.Dataset.range(5).map(lambda x: x * 10)
    >>> ds = ds.apply(service.distribute("parallel_epochs", dispatcher.target))
    >>> sorted(int(x) for x in ds.map(lambda x: x + 1))
    [1, 11, 21, 31, 41]
    >>> worker.stop(); dispatcher.stop()
    """
    read = _read_options(
        processing_mode, service, job_name, consumer_index, num_consumers,
        max_outstanding_requests, data_transfer_protocol, cross_trainer_cache,
        target_workers, exactly_once, seed,
    )  # fmt: skip
    compression = _compression(compression)

    def apply(dataset: Dataset) -> Dataset:
        dataset_id = register_dataset(read.service, dataset, compression=compression)
        return _service_dataset(
            replace(read, dataset_id=dataset_id),
            encode_spec(dataset.element_spec),
            dataset.cardinality() == INFINITE_CARDINALITY,
        )

    return apply


def get_status(
    service: Any = None, *, timeout_s: float | None = None
) -> dict[str, Any]:
    """The dispatcher's view: workers, datasets and jobs (``zmqdata status --json``).

    Args:
        service: The dispatcher's address [default: ``ZMQDATA_DISPATCHER``].
        timeout_s: How long to keep retrying an unreachable dispatcher; by
            default ``ZMQDATA_DISPATCHER_TIMEOUT_S``.
    """
    if timeout_s is None:
        timeout_s = settings.current().dispatcher_timeout_s
    reply = rpc.call(
        dispatcher_target(service), m.GetStatus(), m.GetStatusReply, timeout_s
    )
    return reply.status


# ------------------------------------------------------------------ the op


def _service_dataset(
    options: ReadOptions, element_spec: bytes, infinite: bool
) -> Dataset:
    """A dataset reading the service as ``options`` say: one ``data_service`` node.

    Its args: the ``options`` themselves, the encoded ``element_spec`` and the
    ``cardinality`` (infinite, or unknown: the service knows no more).
    """
    cardinality = INFINITE_CARDINALITY if infinite else UNKNOWN_CARDINALITY
    args = {
        "options": options,
        "element_spec": element_spec,
        "cardinality": cardinality,
    }
    return Dataset(Node("data_service", args))


class DataService(Op):
    """Reads a registered dataset from the service (the op ``distribute`` adds)."""

    name = "data_service"

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return int(node.args["cardinality"])

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return decode_spec(node.args["element_spec"])

    def identity(self, node: Node, inputs: list[Node]) -> Node:
        """The dataset it reads: a resumed read has other options (job, ranks)."""
        return Node(node.op, {"dataset_id": node.args["options"].dataset_id})

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        options: ReadOptions = node.args["options"]
        current = settings.current()
        if options.target_workers == "LOCAL" and not LOCAL_WORKERS.count:
            raise FailedPreconditionError(
                "target_workers='LOCAL' reads only from workers in this process, "
                "and none runs here: start a service.WorkerServer in this process "
                "or read with target_workers='AUTO'"
            )
        job_id = open_job(options, current)
        repetition = node.next_pass() if options.job_name is not None else 0
        progress = progress_for(options, node.args["cardinality"])
        return DistributedIterator(options, current, job_id, repetition, progress)
