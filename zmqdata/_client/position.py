"""``Position``: what a distributed read has consumed, to save it and resume (pure).

A ``distributed_epoch`` read with exactly-once tracking knows which source
keys each batch it received stands for (``_wire/lineage.py``). The trainer's
position is every key of the batches it took, less the keys of the elements
of the current batch it has not handed out yet; batches still queued or in
flight are not counted. A saved position is small: key ranges, no element.
Resuming asks the dispatcher for a new iteration that hands out only the
other keys, so the elements buffered or in flight at save time come again,
and none that was consumed does.

A read's progress is one of two objects with one interface (``Progress``),
picked once for the read (``progress_for``): ``Position`` (keys) or, for a
multi-rank read, ``DealtProgress`` (this consumer's share of the dealt job).

>>> from zmqdata._client.instructions import Batch
>>> position = Position()
>>> position.took(Batch([10, 11, 12, 13], 0, [0, 4], [4, 1], []))  # keys 0..3
>>> position.consumed(unconsumed=1)  # one of them not handed out yet
[0, 3]
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from zmqdata._client.instructions import Batch
from zmqdata._client.options import ReadOptions
from zmqdata._dataset import saved
from zmqdata._dataset.constants import INFINITE_CARDINALITY
from zmqdata._wire import deal
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import Coverage, Ranges
from zmqdata._wire.modes import ShardingPolicy
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

FORMAT = "zmqdata.distributed_read/1"
"""Names what a saved position holds (a later layout gets another name). Its
keys number source elements or, for a pipeline with a 1-to-many op, split
outputs (``_wire/outputs.py``): the dispatcher refuses the other kind."""


class Progress(Protocol):
    """What a read consumed, to save it and resume: told by the trainer thread."""

    lazy: bool
    """Whether the read joins its iteration at its first element (or save),
    not when it is opened: a restore before then starts the iteration there."""

    def iteration(
        self, job_id: int, repetition: int, resume: list[int] | None
    ) -> m.GetOrCreateIteration:
        """The request joining an iteration, resuming at ``resume`` (``resume_from``)."""

    def started(self, state: m.IterationState, resume: list[int] | None) -> None:
        """The iteration joined (resuming at ``resume``): counts from there."""

    def took(self, batch: Batch) -> None:
        """A batch was taken from the queue; its elements are handed out next."""

    def consumed_one(self) -> None:
        """An element was handed out."""

    def state(self, options: ReadOptions, unconsumed: int) -> dict[str, Any]:
        """The saved position (``get_state``); ``unconsumed``: the batch's rest."""

    def resume_from(self, options: ReadOptions, state: Any) -> list[int]:
        """Where a saved ``state`` resumes, checked against this read (``set_state``)."""


def progress_for(options: ReadOptions, cardinality: int) -> Progress:
    """A read's progress: dealt for a multi-rank read, else by keys.

    A multi-rank read is a finite ``distributed_epoch`` read with ``num_consumers``.
    """
    dealt = (
        options.processing_mode == ShardingPolicy.DYNAMIC
        and options.num_consumers is not None
        and cardinality != INFINITE_CARDINALITY
    )
    return DealtProgress() if dealt else Position()


class Position:
    """The keys a trainer consumed (trainer thread only)."""

    lazy = False

    def __init__(self) -> None:
        self._from(())

    def _from(self, consumed: Sequence[int]) -> None:
        """Counts from the keys ``consumed`` (flat ranges), no batch taken."""
        self._taken = Ranges()
        self._taken.add_all(consumed)
        self._keys: Sequence[int] = []
        self._widths: Sequence[int] = []

    def iteration(
        self, job_id: int, repetition: int, resume: list[int] | None
    ) -> m.GetOrCreateIteration:
        return m.GetOrCreateIteration(
            job_id=job_id, repetition=repetition, resume=resume
        )

    def started(self, state: m.IterationState, resume: list[int] | None) -> None:
        self._from(resume or ())

    def took(self, batch: Batch) -> None:
        if batch.keys:
            self._taken.add_all(batch.keys)
            self._keys, self._widths = batch.keys, batch.widths

    def consumed_one(self) -> None:
        """Nothing to count: the batch's rest is known when the state is saved."""

    def consumed(self, unconsumed: int) -> list[int]:
        """The keys consumed (flat ranges).

        ``unconsumed``: elements of the current batch not handed out yet.
        """
        consumed = Ranges(self._taken)
        if unconsumed:
            consumed.remove_all(Coverage.tail(self._keys, self._widths, unconsumed))
        return list(consumed)

    def state(self, options: ReadOptions, unconsumed: int) -> dict[str, Any]:
        return state_of(options, self.consumed(unconsumed))

    def resume_from(self, options: ReadOptions, state: Any) -> list[int]:
        return consumed_in(options, state)


def check_resumable(options: ReadOptions) -> None:
    """Raises ``FailedPreconditionError`` unless the read's position can be saved.

    Only one consumer's ``distributed_epoch`` read, tracked exactly once, has
    a position of its own: a ``parallel_epochs`` read has none (each worker
    makes the whole dataset), a shared job's elements also go to the other
    consumers, and coordinated reads are rounds of a shared job.
    """
    if options.processing_mode != ShardingPolicy.DYNAMIC:
        raise FailedPreconditionError(
            "only a distributed_epoch read can save its position: in "
            f"{ShardingPolicy(options.processing_mode).display_name} every worker "
            "produces the whole dataset, so there is no position to resume from"
        )
    if options.job_name is not None:
        raise FailedPreconditionError(
            f"cannot save a read of the shared job {options.job_name!r}: other "
            "consumers take its elements too; save and resume a read without job_name"
        )
    if not options.exactly_once:
        raise FailedPreconditionError(
            "saving a read's position needs exactly_once=True (the default)"
        )


def state_of(options: ReadOptions, consumed: list[int]) -> dict[str, Any]:
    """The saved state of a read that consumed ``consumed`` (``get_state``)."""
    check_resumable(options)
    return {"format": FORMAT, "dataset_id": options.dataset_id, "consumed": consumed}


def consumed_in(options: ReadOptions, state: Any) -> list[int]:
    """The consumed keys of a saved ``state``, checked against this read."""
    check_resumable(options)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise InvalidArgumentError(
            f"not a saved distributed read: expected format {FORMAT!r}, got "
            f"{state.get('format') if isinstance(state, dict) else type(state).__name__!r}"
        )
    if state.get("dataset_id") != options.dataset_id:
        raise InvalidArgumentError(
            f"the saved read is of dataset {state.get('dataset_id')!r}, "
            f"this one reads {options.dataset_id!r}"
        )
    consumed = [int(k) for k in state.get("consumed", ())]
    if len(consumed) % 2 or any(a >= b for a, b in itertools.pairwise(consumed)):
        raise InvalidArgumentError(
            "the saved read's consumed keys are not sorted ranges"
        )
    return consumed


class DealtProgress:
    """A multi-rank read's consumer: what it consumed, as a ``deal.DealtPosition``.

    The trainer thread counts the elements it handed out and keeps the split
    (``[ordinal, offset]``) of the last one: the anchor a merged position
    resumes from (``deal.merge``). It joins its iteration lazily: every rank
    restores the merged position before its first element.
    """

    lazy = True

    def __init__(self) -> None:
        self._from({})

    def _from(self, info: dict[str, Any]) -> None:
        """Counts from the start of the iteration ``info`` (``IterationState.deal``)."""
        self._info = info
        # The batches taken and not yet consumed: (their first element's
        # number, their anchors flat), read only by ``state``.
        self._batches: deque[tuple[int, list[int]]] = deque()
        self._taken = 0
        self._anchor = (int(info.get("start", 0)), int(info.get("stream", [0])[0]))
        self._consumed = 0
        self._fixed: tuple[ReadOptions, dict[str, Any]] | None = None
        """The read's options, and what every state of this iteration says alike."""

    def iteration(
        self, job_id: int, repetition: int, resume: list[int] | None
    ) -> m.GetOrCreateIteration:
        return m.GetOrCreateIteration(
            job_id=job_id, repetition=repetition, resume_deal=resume
        )

    def started(self, state: m.IterationState, resume: list[int] | None) -> None:
        """The iteration's ``deal`` (its epoch and stream) holds where it resumed."""
        self._from(state.deal)

    def took(self, batch: Batch) -> None:
        self._last_anchor()  # forget the batches consumed
        if batch.anchors:
            self._batches.append((self._taken, batch.anchors))
            self._taken += len(batch.anchors) // 2

    def consumed_one(self) -> None:
        self._consumed += 1

    def _last_anchor(self) -> tuple[int, int]:
        """The anchor of the last element consumed (counted, not kept per element)."""
        batches, consumed = self._batches, self._consumed
        while batches:
            first, anchors = batches[0]
            last = consumed - first - 1  # its index in this batch
            if last < 0:
                break
            if 2 * last + 2 < len(anchors):
                self._anchor = (anchors[2 * last], anchors[2 * last + 1])
                break
            self._anchor = (anchors[-2], anchors[-1])
            batches.popleft()
        return self._anchor

    def state(self, options: ReadOptions, unconsumed: int) -> dict[str, Any]:
        """This consumer's position (``get_state``): what it handed out.

        What the iteration's states say alike is made once (a per-step
        ``get_state``, as ``LineageLog`` takes, costs a dict copy).
        """
        if self._fixed is None or self._fixed[0] is not options:
            self._fixed = (options, self._position(options))
        fixed = self._fixed[1]
        return {
            **fixed,
            "stream": list(fixed["stream"]),
            "consumed": self._consumed,
            "anchor": list(self._last_anchor()),
        }

    def _position(self, options: ReadOptions) -> dict[str, Any]:
        """This iteration's position as a state, before any element."""
        assert options.num_consumers is not None
        assert options.consumer_index is not None
        stream = [int(v) for v in self._info.get("stream", [0])]
        return deal.DealtPosition(
            dataset_id=options.dataset_id,
            epoch=int(self._info.get("epoch", 0)),
            seed=options.seed,
            num_consumers=options.num_consumers,
            consumer_index=options.consumer_index,
            stream=deal.Stream(stream[0], Ranges(stream[1:])),
            consumed=0,
            anchor=(0, 0),
            job=options.job_name or "",
            elements=int(self._info.get("elements", -1)),
        ).to_state()

    def resume_from(self, options: ReadOptions, state: Any) -> list[int]:
        return resume_of(options, state).to_wire()


def resume_of(options: ReadOptions, state: Any) -> deal.Resume:
    """Where a multi-rank read restores a merged position, checked against this read."""
    if not deal.is_position(state):
        raise InvalidArgumentError(
            "a multi-rank read restores service.merge_positions() of its "
            f"consumers' saves; got {type(state).__name__}"
        )
    position = deal.DealtPosition.from_state(state)
    if position.dataset_id != options.dataset_id:
        raise InvalidArgumentError(
            f"the saved read is of dataset {position.dataset_id!r}, "
            f"this one reads {options.dataset_id!r}"
        )
    if position.seed != options.seed:
        raise InvalidArgumentError(
            f"the saved read had seed={position.seed!r}, this one has "
            f"seed={options.seed!r}: the order would not continue"
        )
    return deal.resume_of(state)


Path = tuple[Any, ...]
"""Where a value sits in a state: the keys and indices down to it."""


def merge_positions(states: Sequence[Any]) -> bytes:
    """The job's position from every consumer's ``save()`` of a multi-rank read.

    Each state is an iterator's position holding the consumer's share of one
    or more multi-rank reads (``deal.DealtPosition``; several in a mixture of
    reads) wherever they sit in it. Each read's shares are merged, the
    states' paths to them must be the same, and the rest (ops after
    ``distribute``, a mixture's generator) equal, as they are when every
    consumer runs the same pipeline (a mixture with the same seed) and saved
    at the same step.
    """
    if isinstance(states, bytes | str) or not isinstance(states, Sequence):
        raise TypeError(
            f"merge_positions takes a list of save() results, got {type(states).__name__}"
        )
    if not states:
        raise InvalidArgumentError("merge_positions needs the states of every consumer")
    decoded = [saved.decode(state) for state in states]
    found = [positions_in(state) for state in decoded]
    paths = [path for path, _ in found[0]]
    if not paths:
        raise InvalidArgumentError(
            "not the save() of a multi-rank read (distributed_epoch with num_consumers)"
        )
    for index, each in enumerate(found):
        if [path for path, _ in each] != paths:
            raise InvalidArgumentError(
                f"states[{index}] holds multi-rank reads at {_shown(each)}, "
                f"states[0] at {_shown(found[0])}: save every consumer of the "
                "same pipeline at the same step"
            )
    outsides = [_without_positions(state, paths) for state in decoded]
    differs = [i for i, outside in enumerate(outsides) if outside != outsides[0]]
    if differs:
        raise InvalidArgumentError(
            f"states[0] and states[{differs[0]}] differ outside the service reads "
            "(ops after distribute hold different positions): save every consumer "
            "at the same step, with the same pipeline (a sample_from_datasets "
            "needs the same seed on every consumer)"
        )
    merged = decoded[0]
    for number, path in enumerate(paths):
        shares = [each[number][1] for each in found]
        merged = replaced(merged, path, _merged(shares, path, len(paths)))
    return saved.encode(merged)


def _merged(shares: list[Any], path: Path, reads: int) -> dict[str, Any]:
    """``deal.merge`` of one read's shares; with several reads, errors name it."""
    try:
        return deal.merge(shares)
    except InvalidArgumentError as error:
        if reads == 1:
            raise
        raise InvalidArgumentError(f"the read at {list(path)}: {error}") from None


def _shown(found: list[tuple[Path, Any]]) -> str:
    return str([list(path) for path, _ in found])[:300]


def _without_positions(state: Any, paths: list[Path]) -> bytes:
    """``state`` with the multi-rank positions at ``paths`` left out, as bytes."""
    for path in paths:
        state = replaced(state, path, None)
    return saved.encode(state)


def positions_in(state: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """Every multi-rank position in ``state`` (a ``get_state`` result), with its path.

    In the order a walk of the state meets them: a mixture of reads holds
    one per read.

    >>> share = deal.DealtPosition("7", 0, 3, 2, 0, deal.Stream(), 2, (0, 0))
    >>> state = {"inputs": [share.to_state(), None], "used": 4}
    >>> [path for path, _ in positions_in(state)]
    [('inputs', 0)]
    """
    if deal.is_position(state):
        return [(path, state)]
    children: Any = ()
    if isinstance(state, dict):
        children = state.items()
    elif isinstance(state, list | tuple):
        children = enumerate(state)
    return [
        found for key, child in children for found in positions_in(child, (*path, key))
    ]


def replaced(state: Any, path: Path, value: Any) -> Any:
    """``state`` with the value at ``path`` replaced (copies along the path only).

    >>> replaced({"inputs": [1, 2], "used": 4}, ("inputs", 1), 9)
    {'inputs': [1, 9], 'used': 4}
    """
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(state, dict):
        return {**state, key: replaced(state[key], rest, value)}
    copy = list(state)
    copy[key] = replaced(state[key], rest, value)
    return type(state)(copy) if isinstance(state, tuple) else copy
