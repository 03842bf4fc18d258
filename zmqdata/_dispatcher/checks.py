"""What a request must hold before the dispatcher acts on it.

``messages.decode`` checks each field's runtime type; these check the rest:
a request's own shape against this dispatcher's config (``check_request``,
run before its handler: a worker's endpoints, a heartbeat's task list, a
pipeline's size, a consumer's acknowledged keys), what a job asks of its
dataset (``check_job``) and whether a read may resume (``check_resume``). Each
raises ``InvalidArgumentError`` naming what is wrong; none reads or changes
the records.

>>> from zmqdata._config import DispatcherConfig
>>> from zmqdata._wire import messages as m
>>> heartbeat = m.WorkerHeartbeat(worker_id=1, tasks=[[7, "yes"]])
>>> check_request(heartbeat, DispatcherConfig())
Traceback (most recent call last):
  ...
zmqdata.errors.InvalidArgumentError: worker_heartbeat.tasks: expected [[task_id, finished], ...], got [[7, 'yes']]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zmqdata._config import DispatcherConfig, check_pipeline_size
from zmqdata._dataset import graph, snapshot
from zmqdata._dataset.ops import split_runs
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dispatcher import dealing, model, snapshot_saves
from zmqdata._dispatcher import events as ev
from zmqdata._wire import deal, outputs
from zmqdata._wire import messages as m
from zmqdata._wire.modes import STATIC, ShardingPolicy, is_tracked
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

EXACTLY_ONCE_READ = (
    "an exactly-once read (distributed_epoch with exactly_once=True, the default; "
    "exactly_once=False reads it at most once)"
)
MAX_PATH_CHARS = 4096
"""The longest save path a request may name."""
MAX_CHUNKS_REPORTED = 64
"""The most chunks one ``GetSaveSplit`` may report."""
MAX_ERROR_CHARS = 4096
"""The longest error a worker may report."""


def _check_endpoint(name: str, endpoint: str) -> None:
    protocol, sep, address = endpoint.partition("://")
    port = address.rpartition(":")[2]
    if (
        not sep
        or protocol not in ("tcp", "ipc", "inproc")
        or not address
        or (protocol == "tcp" and not (port.isdigit() and 0 < int(port) < 65536))
    ):
        raise InvalidArgumentError(
            f"register_worker.{name}: expected tcp://host:port, ipc://path or "
            f"inproc://name, got {endpoint!r:.200}"
        )


def _register_worker(msg: m.RegisterWorker, config: DispatcherConfig) -> None:
    """Consumers connect to a worker's endpoints: a bad one must not reach them."""
    _check_endpoint("data_address", msg.data_address)
    if msg.inproc_address:
        _check_endpoint("inproc_address", msg.inproc_address)


def _is_task_state(entry: Any) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], int)
        and isinstance(entry[1], bool)
    )


def _worker_heartbeat(msg: m.WorkerHeartbeat, config: DispatcherConfig) -> None:
    if not all(_is_task_state(entry) for entry in msg.tasks):
        raise InvalidArgumentError(
            "worker_heartbeat.tasks: expected [[task_id, finished], ...], "
            f"got {msg.tasks!r:.200}"
        )
    if len(msg.pipelines) > m.MAX_PIPELINES_HELD or not all(
        isinstance(f, str) and len(f) <= m.MAX_FINGERPRINT_CHARS for f in msg.pipelines
    ):
        raise InvalidArgumentError(
            f"worker_heartbeat.pipelines: expected at most {m.MAX_PIPELINES_HELD} "
            f"fingerprints, got {msg.pipelines!r:.200}"
        )


def _start_save(msg: m.StartSave, config: DispatcherConfig) -> None:
    if not msg.path or len(msg.path) > MAX_PATH_CHARS:
        raise InvalidArgumentError(
            f"start_save.path: expected 1 to {MAX_PATH_CHARS} characters, "
            f"got {msg.path!r:.200}"
        )
    if msg.compression not in (None, "zstd"):
        raise InvalidArgumentError(
            f"start_save.compression: expected None or 'zstd', got {msg.compression!r:.50}"
        )


def _is_chunk(entry: Any) -> bool:
    """``[ordinal, name, elements, bytes, crc32]``, a name without a folder."""
    return (
        isinstance(entry, list)
        and len(entry) == 5
        and all(type(v) is int and v >= 0 for v in (entry[0], *entry[2:]))
        and entry[4] < 2**32
        and snapshot.is_chunk_name(entry[1])
    )


def _check_chunks(what: str, chunks: list[Any]) -> None:
    """Chunks a worker reports: at most ``MAX_CHUNKS_REPORTED``, each ``_is_chunk``."""
    if len(chunks) > MAX_CHUNKS_REPORTED or not all(map(_is_chunk, chunks)):
        raise InvalidArgumentError(
            f"{what}.chunks: expected at most {MAX_CHUNKS_REPORTED} "
            f"[ordinal, name, elements, bytes, crc32], got {chunks!r:.200}"
        )


def _get_save_split(msg: m.GetSaveSplit, config: DispatcherConfig) -> None:
    _check_chunks(msg.TYPE, msg.chunks)
    if len(msg.failed) > MAX_ERROR_CHARS:
        raise InvalidArgumentError(
            f"get_save_split.failed: at most {MAX_ERROR_CHARS} characters, "
            f"got {len(msg.failed)}"
        )


def _get_or_register_dataset(
    msg: m.GetOrRegisterDataset, config: DispatcherConfig
) -> None:
    check_pipeline_size(
        len(msg.pipeline), len(msg.element_spec), config.max_pipeline_bytes
    )


MAX_ACKED_NUMBERS = 2**16
"""Exactly once: the most numbers a request's ``acked`` may hold."""
MAX_RESUME_NUMBERS = 2**20
"""Exactly once: the most numbers a ``resume`` may hold (a read's consumed keys)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _are_ranges(flat: list[Any]) -> bool:
    """Whether ``flat`` is ``[lo, hi, ...]``, ints with ``0 <= lo < hi``."""
    return (
        len(flat) % 2 == 0
        and all(_is_int(value) for value in flat)
        and all(0 <= flat[i] < flat[i + 1] for i in range(0, len(flat), 2))
    )


def _check_acked(request: str, acked: list[Any]) -> None:
    """``[[task_id, lo, hi, ...], ...]``, at most ``MAX_ACKED_NUMBERS`` numbers."""
    numbers = sum(len(entry) if isinstance(entry, list) else 1 for entry in acked)
    if numbers > MAX_ACKED_NUMBERS:
        raise InvalidArgumentError(
            f"{request}.acked: {numbers} numbers, over the limit of {MAX_ACKED_NUMBERS}"
        )
    for entry in acked:
        if not (
            isinstance(entry, list)
            and entry
            and _is_int(entry[0])
            and _are_ranges(entry[1:])
        ):
            raise InvalidArgumentError(
                f"{request}.acked: expected [[task_id, lo, hi, ...], ...] with "
                f"0 <= lo < hi, got {entry!r:.200}"
            )


def _check_deal_position(request: str, position: list[Any]) -> None:
    """A multi-rank position: empty, or ``[consumer_index, ordinal, index]``."""
    if position and (
        len(position) != 3 or not all(_is_int(v) and v >= 0 for v in position)
    ):
        raise InvalidArgumentError(
            f"{request}.deal: expected [consumer_index, ordinal, index], got "
            f"{position!r:.100}"
        )


def _get_split(msg: m.GetSplit, config: DispatcherConfig) -> None:
    """Split counts: ``[ordinal, count, ...]``, non-negative ints."""
    counts = msg.counts
    if len(counts) % 2 or not all(_is_int(v) and v >= 0 for v in counts):
        raise InvalidArgumentError(
            f"get_split.counts: expected [ordinal, count, ...], got {counts!r:.100}"
        )
    _check_chunks(msg.TYPE, msg.chunks)
    if len(msg.chunk_failed) > MAX_ERROR_CHARS:
        raise InvalidArgumentError(
            f"get_split.chunk_failed: at most {MAX_ERROR_CHARS} characters, "
            f"got {len(msg.chunk_failed)}"
        )


def _client_heartbeat(msg: m.ClientHeartbeat, config: DispatcherConfig) -> None:
    _check_deal_position(msg.TYPE, msg.deal)
    _check_acked(msg.TYPE, msg.acked)
    if not (_is_int(msg.consumed) and msg.consumed >= 0):
        raise InvalidArgumentError(
            f"client_heartbeat.consumed: expected a count, got {msg.consumed!r:.100}"
        )
    index = msg.consumer_index
    if index is not None and not (_is_int(index) and 0 <= index < 2**31):
        raise InvalidArgumentError(
            f"client_heartbeat.consumer_index: expected a rank, got {index!r:.100}"
        )


def _release_iteration_client(
    msg: m.ReleaseIterationClient, config: DispatcherConfig
) -> None:
    _check_acked(msg.TYPE, msg.acked)
    _check_deal_position(msg.TYPE, msg.deal)


def _get_or_create_iteration(
    msg: m.GetOrCreateIteration, config: DispatcherConfig
) -> None:
    """A resumed read's consumed keys: sorted, disjoint ``[lo, hi, ...]``."""
    keys = msg.resume
    if keys is None:
        return
    if len(keys) > MAX_RESUME_NUMBERS:
        raise InvalidArgumentError(
            f"get_or_create_iteration.resume: {len(keys)} numbers, over the limit "
            f"of {MAX_RESUME_NUMBERS}"
        )
    if not _are_ranges(keys) or any(
        keys[i] > keys[i + 1] for i in range(1, len(keys) - 1, 2)
    ):
        raise InvalidArgumentError(
            "get_or_create_iteration.resume: expected sorted, disjoint key ranges "
            f"[lo, hi, ...] with 0 <= lo < hi, got {keys!r:.200}"
        )


REQUEST_CHECKS: dict[type[m.Message], Callable[[Any, DispatcherConfig], None]] = {
    m.RegisterWorker: _register_worker,
    m.WorkerHeartbeat: _worker_heartbeat,
    m.StartSave: _start_save,
    m.GetSaveSplit: _get_save_split,
    m.GetOrRegisterDataset: _get_or_register_dataset,
    m.ClientHeartbeat: _client_heartbeat,
    m.ReleaseIterationClient: _release_iteration_client,
    m.GetOrCreateIteration: _get_or_create_iteration,
    m.GetSplit: _get_split,
}
"""The requests whose shape is checked beyond their field types, and how."""


def check_request(message: m.Message, config: DispatcherConfig) -> None:
    """Raises ``InvalidArgumentError`` if ``message`` is malformed for ``config``."""
    check = REQUEST_CHECKS.get(type(message))
    if check is not None:
        check(message, config)


# ------------------------------------------------------------------ jobs


def check_job(
    msg: m.GetOrCreateJob, dataset: model.Dataset, config: DispatcherConfig
) -> None:
    """Whether ``dataset`` and this dispatcher can run the job ``msg`` asks for."""
    _check_mode(msg, dataset, config)
    dynamic = msg.processing_mode == ShardingPolicy.DYNAMIC
    if msg.seed is not None and (not dynamic or msg.seed < 0):
        raise InvalidArgumentError(
            f"seed={msg.seed!r} orders a distributed_epoch read's splits: it needs "
            "processing_mode distributed_epoch and an int >= 0"
        )
    dealt = dealing.is_dealt(
        msg.processing_mode, msg.num_consumers, dataset.cardinality
    )
    tracked = is_tracked(msg.exactly_once, msg.processing_mode, msg.cross_trainer_cache)
    snapshot_saves.check_job(msg, dataset, whole=dealt or tracked)
    if dealt:
        if msg.target_workers.upper() == "LOCAL":
            raise InvalidArgumentError(
                "a multi-rank read (num_consumers with distributed_epoch) deals "
                "every worker's elements to every consumer: it cannot read with "
                "target_workers='LOCAL'"
            )
        root = graph.deserialize(dataset.pipeline, load_functions=False)
        split_runs.check_dealt(root)
    else:
        if msg.num_consumers is not None:
            _check_infinite(dataset, "coordinated reads (consumer_index/num_consumers)")
        if tracked:
            _check_split_runs(dataset)
    if msg.cross_trainer_cache:
        _check_cross_trainer_cache(msg, dataset)


def expands(dataset: model.Dataset) -> bool:
    """Whether ``dataset``'s pipeline has a 1-to-many op on its main chain."""
    root = graph.deserialize(dataset.pipeline, load_functions=False)
    return len(split_runs.run_alone(root)) > 1


def _check_split_runs(dataset: model.Dataset) -> None:
    """Refuses, below a pipeline's last 1-to-many op, what is not a function of the split.

    An exactly-once read runs that part of the pipeline on each split alone
    (``_dataset/ops/split_runs.py``); the ops above it are tracked as they
    run, whatever they are.
    """
    root = graph.deserialize(dataset.pipeline, load_functions=False)
    alone = split_runs.run_alone(root)
    if len(alone) > 1:
        split_runs.check_pipeline(alone, EXACTLY_ONCE_READ, repeats=True)
        split_runs.check_remainders(root, alone, EXACTLY_ONCE_READ)


def _check_mode(
    msg: m.GetOrCreateJob, dataset: model.Dataset, config: DispatcherConfig
) -> None:
    if msg.processing_mode in STATIC:
        _check_static(msg, config)
    elif msg.processing_mode not in (ShardingPolicy.OFF, ShardingPolicy.DYNAMIC):
        raise InvalidArgumentError(
            f"processing mode {msg.processing_mode!r} is not a ShardingPolicy"
        )
    if msg.processing_mode == ShardingPolicy.DYNAMIC and dataset.split_source is None:
        # Raises, naming the op that prevents splitting.
        find_split_source(graph.deserialize(dataset.pipeline, load_functions=False))


def _check_static(msg: m.GetOrCreateJob, config: DispatcherConfig) -> None:
    """Static sharding needs the fixed worker list and local reads."""
    mode = model.mode_name(msg.processing_mode)
    if not config.worker_addresses:
        raise InvalidArgumentError(
            f"static sharding (processing_mode={mode}) needs "
            "DispatcherConfig.worker_addresses, the fixed list of workers to "
            "shard over; this dispatcher has none"
        )
    if msg.target_workers.upper() != "LOCAL":
        raise InvalidArgumentError(
            f"Static sharding requires reading from local workers: "
            f"processing_mode={mode} needs target_workers='LOCAL', got "
            f"{msg.target_workers!r}"
        )


def _check_cross_trainer_cache(msg: m.GetOrCreateJob, dataset: model.Dataset) -> None:
    if msg.job_name is None:
        raise InvalidArgumentError("cross-trainer caching requires a job_name")
    if msg.num_consumers is not None:
        raise InvalidArgumentError(
            "cross-trainer caching cannot be combined with coordinated reads "
            f"(num_consumers={msg.num_consumers})"
        )
    _check_infinite(dataset, "cross-trainer caching")


def _check_infinite(dataset: model.Dataset, feature: str) -> None:
    """Coordinated reads and the cross-trainer cache need an endless dataset."""
    cardinality = dataset.cardinality
    if cardinality >= 0:
        raise InvalidArgumentError(
            f"{feature} requires a dataset with infinite cardinality, got one with "
            f"{cardinality} elements: add .repeat()"
        )


def check_resume(job: model.Job, created: bool, keys: Sequence[int] = ()) -> None:
    """A read resumes into a new iteration of its own exactly-once job.

    Its ``keys`` number what the job's do: split outputs (a pipeline with a
    1-to-many op, this release) or source elements.
    """
    if job.name is not None:
        raise InvalidArgumentError(
            f"a read resumes into a job of its own: job {job.name!r} is named "
            "(shared), so it cannot take get_or_create_iteration.resume"
        )
    if not job.exactly_once:
        raise InvalidArgumentError(
            f"job {job.job_id} ({model.mode_name(job.processing_mode)}) does not "
            "track its elements: only distributed_epoch reads with exactly_once "
            "can resume"
        )
    if not created:
        raise FailedPreconditionError(
            f"job {job.job_id} is already being read: a read resumes into a new "
            "iteration"
        )
    if outputs.are_output_keys(keys) != job.split_outputs and keys:
        saved = "split outputs" if outputs.are_output_keys(keys) else "source elements"
        raise InvalidArgumentError(
            f"the saved position counts {saved}, but job {job.job_id} counts "
            f"{'split outputs' if job.split_outputs else 'source elements'}: it was "
            "saved from another pipeline (with or without a 1-to-many op), or by "
            "zmqdata 0.1 from a pipeline with one, which this release runs split "
            "by split; resume it with the release and pipeline that saved it, or "
            "start the epoch again"
        )


def check_joinable(job: model.Job, iteration: model.Iteration | None) -> None:
    """A multi-rank read joins no iteration that every rank has read to its end.

    Such a consumer would get nothing (each rank's elements went to the rank
    that read the iteration before): a training run started again under the
    job name of a finished one. First-come reads keep the k-th iteration
    rule, where a late consumer gets nothing of an iteration already drained
    (docs/modes.md).
    """
    if job.num_consumers is None or iteration is None or not iteration.finished:
        return
    raise FailedPreconditionError(
        f"iteration {iteration.repetition} of job {job.name!r} has already "
        f"finished: all its {job.num_consumers} consumers read it to the end, "
        "so this consumer would get no elements. To read again, use a fresh "
        "job_name (to continue a saved run: restore its merged position under "
        "a fresh job_name)"
    )


def deal_resume(
    job: model.Job, msg: m.GetOrCreateIteration, iteration: model.Iteration | None
) -> deal.Resume | None:
    """A restored multi-rank read's start, checked against the job and iteration.

    Every consumer of the new job restores the same merged position; one that
    finds the iteration started from another position (or none) is refused.
    """
    if msg.resume_deal is None:
        return None
    if not job.dealt:
        raise InvalidArgumentError(
            f"job {job.job_id} is not a multi-rank read (distributed_epoch with "
            "num_consumers over a finite dataset): it cannot restore a merged position"
        )
    resume = deal.Resume.from_wire(msg.resume_deal)
    if iteration is not None and (
        iteration.deal_stream != resume.stream.to_wire()
        or iteration.deal_start != resume.start_ordinal
        or iteration.deal_epoch != resume.epoch
    ):
        raise FailedPreconditionError(
            f"iteration {iteration.iteration_id} of job {job.name!r} already started "
            "from another position: every consumer must restore the same "
            "merged position into a fresh job_name"
        )
    return resume


def check_same_job(existing: model.Job, wanted: ev.JobCreated) -> None:
    """Every consumer of a named job must ask for the same ``JOB_PARAMETERS``."""
    have, want = model.job_parameters(existing), model.job_parameters(wanted)
    if have != want:
        raise InvalidArgumentError(
            f"found an existing job named {wanted.name!r} with different "
            f"parameters: {_describe(have)} vs {_describe(want)}"
        )


def _describe(parameters: dict[str, Any]) -> str:
    shown = {
        **parameters,
        "processing_mode": model.mode_name(parameters["processing_mode"]),
    }
    return "(" + ", ".join(f"{name}={value}" for name, value in shown.items()) + ")"
