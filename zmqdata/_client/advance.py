"""``service.advance_position``: a merged multi-rank position, some elements further on.

The loss-spike recipe (docs/accountable.md): go back to a checkpoint taken
before the spike and skip the elements that made it. A multi-rank job's order
is a function of the dataset, the seed and R alone (``_wire/deal.py``), so
skipping ``k`` elements is arithmetic on the position's tokens
(``deal.advance``), except to find where an epoch ends when the dataset's size
is not known from its cardinality: then the splits of the epoch are counted
here (folded where they can be, else run), as far as the advance reaches
(``dataset``).
"""

from __future__ import annotations

from typing import Any

from zmqdata._client.position import positions_in, replaced
from zmqdata._dataset import saved
from zmqdata._dataset.dataset import Dataset
from zmqdata._dataset.lineage_records import DealtEpoch
from zmqdata._wire import deal
from zmqdata.errors import InvalidArgumentError


def advance_position(
    position: bytes, elements: int, dataset: Dataset | None = None
) -> bytes:
    """``position`` (``merge_positions``' result) with the next ``elements`` skipped.

    Restoring it delivers exactly what the uninterrupted run would have
    delivered after those elements (global order: ``elements`` a multiple of
    R is ``elements // R`` steps of every rank), on any number of consumers.
    Past the epoch's end it moves into the next epoch. Where the dataset's
    size is not known from its cardinality (a ``filter``, a ``pack`` before
    ``distribute``), pass ``dataset``, the pipeline before ``distribute``: the
    splits the advance spans are counted here (folded where the cardinality
    says it, else run).

    Raises ``InvalidArgumentError`` for a position that is not a merged
    multi-rank position, or a bad ``elements``; ``FailedPreconditionError``
    where the epoch's end is needed and unknown (no ``dataset``).
    """
    state, path, found = _read(position, dataset, "advance_position")
    return _advanced(state, path, found, elements, dataset)


def skip_steps(
    position: bytes,
    steps: int,
    elements_per_step: int = 1,
    dataset: Dataset | None = None,
) -> bytes:
    """``advance_position`` by ``steps`` steps of every rank, in a trainer's words.

    A step takes ``elements_per_step`` elements of the service read on each of
    the ranks the position was saved from (1 where batches are made before
    ``distribute``; the batch size where the trainer batches after it).
    """
    for name, value in (("steps", steps), ("elements_per_step", elements_per_step)):
        if type(value) is not int or value < 0:
            raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
    state, path, found = _read(position, dataset, "skip_steps")
    ranks = deal.DealtPosition.from_state(found).ranks or 1
    elements = steps * ranks * elements_per_step
    return _advanced(state, path, found, elements, dataset)


def _read(position: Any, dataset: Any, what: str) -> tuple[Any, tuple[Any, ...], Any]:
    """The state ``position`` holds, its one multi-rank position and where that is."""
    if not isinstance(position, bytes):
        raise TypeError(
            f"{what} takes merge_positions()' bytes, got {type(position).__name__}"
        )
    if dataset is not None and not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a Dataset, got {type(dataset).__name__}")
    state = saved.decode(position)
    path, found = _the_position(state)
    return state, path, found


def _advanced(
    state: Any,
    path: tuple[Any, ...],
    found: Any,
    elements: int,
    dataset: Dataset | None,
) -> bytes:
    """``state`` with its position at ``path`` (``found``) ``elements`` further on."""
    counted = None if dataset is None else _epoch_size(dataset)
    return saved.encode(replaced(state, path, deal.advance(found, elements, counted)))


def _the_position(state: Any) -> tuple[tuple[Any, ...], Any]:
    """The one multi-rank position in ``state``, and where it is.

    A mixture of reads holds one per source, and which of them the next
    steps take is the mixture's draw: skipping steps of a mixture is not
    supported (restore it and read the steps to skip, or skip in each
    source's own job).
    """
    found = positions_in(state)
    if not found:
        raise InvalidArgumentError(
            "not the save() of a multi-rank read (distributed_epoch with num_consumers)"
        )
    if len(found) > 1:
        raise InvalidArgumentError(
            f"advance_position skips elements of one multi-rank read; this position "
            f"holds {len(found)} (a mixture of reads), whose next elements depend on "
            "the mixture's draws: restore it and read the steps to skip instead"
        )
    return found[0]


def _epoch_size(dataset: Dataset) -> deal.EpochSize:
    """Counts an epoch's elements in its order from a position's anchor, as far as needed.

    A split's count folds from the cardinality where it can, else the split
    is run (``lineage_records.DealtEpoch``).
    """

    def size(position: deal.DealtPosition, limit: int) -> int | None:
        epoch = DealtEpoch(dataset._node, position.seed, position.epoch)
        ordinal, offset = position.anchor
        for q in range(ordinal, epoch.splits):
            if offset > limit:
                return None
            offset += epoch.count(q)
        return offset

    return size
