"""``lineage``: which source records made each element of a multi-rank read (local).

A multi-rank (dealt) job's order is a function of the pipeline, the seed and
``R`` alone (``_wire/deal.py``): token ``p`` of epoch ``e`` is element ``i``
of split ordinal ``q`` (source split ``split_order(seed, e, count)[q]``), ``i``
counted from the sum of the counts of the splits before it, and it goes to
consumer ``p % R`` at step ``p // R``. So any position's records are found
here, with no cluster, by running the split that holds it with lineage
(``split_runs.run_split``: each element says which source elements it stands
for), as a worker runs it. The counts of the splits before it come from the
pipeline's cardinality where it folds (``map``, ``batch``, a seeded
``shuffle``: no split is run), else from running those splits to count.

A source element's key is its index in the source (``_wire/lineage.py``): a
``range`` or ``from_tensor_slices`` index, a ``list_files`` file, a record
of a file reader (numbered across its files: ``path``, and ``record``, its
number in that file).

A mixture of multi-rank reads (each input read by its own job with the same
seed and ``R``, mixed in every rank's trainer: docs/modes.md, Mixtures) is
replayed: every rank's mixture draws the same choices, so its step ``s``
draws the ``d``-th element of input ``j`` on every rank, which is that
input's position ``d * R + r`` on rank ``r``.

>>> import zmqdata as zd
>>> ds = zd.Dataset.range(10).map(lambda x: x * 2).batch(2)
>>> [row["sources"] for row in lineage(ds, None, 2, 3, 4)]
[[{'source': 0, 'index': 6}, {'source': 0, 'index': 7}]]
>>> [(row["consumer_index"], row["step"]) for row in lineage(ds, 5, 2, 0, 4)]
[(0, 0), (1, 0), (0, 1), (1, 1)]
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from zmqdata._dataset import fold, plans
from zmqdata._dataset.dataset import Dataset
from zmqdata._dataset.iterator import IterContext
from zmqdata._dataset.marks import Marks
from zmqdata._dataset.node import Node, make_iterator
from zmqdata._dataset.ops import mix, split_runs
from zmqdata._dataset.ops.cache import PERSISTED
from zmqdata._dataset.ops.records import RecordSource
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dataset.validate import check_int, check_optional_int
from zmqdata._wire import deal
from zmqdata._wire.lineage import STRIDE
from zmqdata.errors import InvalidArgumentError

Record = dict[str, Any]
"""One source record: ``{"source", "index"}``, plus ``"path"`` (and ``"record"``)."""


def lineage(
    dataset: Dataset,
    seed: int | None,
    num_consumers: int,
    start: int,
    stop: int,
    epoch: int = 0,
) -> list[dict[str, Any]]:
    """The source records of global positions ``start..stop-1`` of a multi-rank read.

    ``dataset``: the pipeline before ``distribute`` (or a mixture of such
    pipelines, each read as its own multi-rank job); ``seed`` and
    ``num_consumers`` (R): the job's. One dict per position ``p``:
    ``{"position": p, "consumer_index": p % R, "step": p // R, "sources":
    [record, ...]}``. Runs only the splits that hold those positions (and,
    where the pipeline's cardinality does not fold, those before them to
    count their elements).
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a zmqdata Dataset, got {dataset!r:.80}")
    seed = check_optional_int("seed", seed, minimum=0)
    R = check_int("num_consumers", num_consumers, minimum=1)
    start = check_int("start", start, minimum=0)
    stop = check_int("stop", stop, minimum=start)
    epoch = check_int("epoch", epoch, minimum=0)
    positions = range(start, stop)
    root = dataset._node
    if root.op in (mix.SAMPLE, mix.CHOOSE):
        sources = _mixture(root, seed, R, epoch, positions)
    else:
        sources = _single(traced(root, seed, epoch), R, positions)
    return [
        {"position": p, "consumer_index": p % R, "step": p // R, "sources": found}
        for p, found in zip(positions, sources, strict=True)
    ]


def traced(root: Node, seed: int | None, epoch: int) -> DealtEpoch:
    """The ``DealtEpoch`` lineage traces; a pipeline with a snapshot is refused."""
    persisted = [n.op for n in split_runs.main_chain(root) if n.op in PERSISTED]
    if persisted:
        raise InvalidArgumentError(
            f"lineage does not read a pipeline with {persisted[0]}() before "
            "distribute: its splits are the snapshot's chunks"
        )
    return DealtEpoch(root, seed, epoch)


def _single(epoch: DealtEpoch, R: int, positions: range) -> list[list[Record]]:
    """The records of ``positions`` of one multi-rank read (tokens, not restored)."""
    if positions:
        _check_dealt(epoch, positions[-1], R)
    return records_at(epoch, positions)


def _check_dealt(epoch: DealtEpoch, position: int, R: int) -> None:
    """Raises ``ValueError`` unless position ``position``'s round is dealt (is whole)."""
    last = (position // R + 1) * R - 1
    if epoch.locate(last) is None:
        total = epoch.total()
        raise ValueError(
            f"position {position} is past the epoch's end: it deals "
            f"{total // R * R} of its {total} elements to {R} consumers"
        )


class DealtEpoch:
    """One epoch of a pipeline's dealt order: splits counted as far as asked.

    ``runs`` counts the splits run (to count their elements or to trace them):
    here every split of 4 source elements is run to count its 2 odd ones.

    >>> import zmqdata as zd
    >>> epoch = DealtEpoch(zd.Dataset.range(300).filter(lambda x: x % 2 == 1)._node, 3, 0)
    >>> epoch.locate(149)[1], epoch.locate(150), epoch.runs
    (1, None, 75)
    """

    def __init__(self, root: Node, seed: int | None, epoch: int) -> None:
        split_runs.check_dealt(root)
        self._root = root.fresh()
        source = self._source = find_split_source(self._root)
        self._length = int(source.definition.cardinality(source, []))
        self._size = plans.dealt_split_size(root)
        self._order = deal.split_order(seed, epoch, -(-self._length // self._size))
        self._files = (
            RecordSource.bounds(source)
            if isinstance(source.definition, RecordSource)
            else None
        )
        self._ends: list[int] = []
        """The token past each ordinal counted so far."""
        self._folded: dict[int, int] = {}
        """The count of a split of ``n`` source elements, by ``n`` (-2: unknown)."""
        self.runs = 0

    def bounds(self, ordinal: int) -> list[int]:
        """``[lo, hi]``: the source elements of split ``ordinal``."""
        lo = int(self._order[ordinal]) * self._size
        return [lo, min(lo + self._size, self._length)]

    def locate(self, token: int) -> tuple[int, int] | None:
        """``(ordinal, index)`` of ``token``; None past the epoch's last element."""
        ends = self._ends
        while (not ends or ends[-1] <= token) and self._count_next():
            pass
        ordinal = bisect.bisect_right(ends, token)
        if ordinal == len(ends):
            return None
        return ordinal, token - (ends[ordinal - 1] if ordinal else 0)

    def total(self) -> int:
        """How many elements the epoch has (every split counted)."""
        while self._count_next():
            pass
        return self._ends[-1] if self._ends else 0

    @property
    def splits(self) -> int:
        """How many splits the epoch has."""
        return len(self._order)

    def _count_next(self) -> bool:
        """Counts the first ordinal not counted yet; False if every one is."""
        ends = self._ends
        if len(ends) == len(self._order):
            return False
        ends.append((ends[-1] if ends else 0) + self.count(len(ends)))
        return True

    def keys(self, ordinal: int, indices: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """The source keys each element ``indices`` of split ``ordinal`` stands for."""
        wanted = set(indices)
        marks = Marks()
        run = self._run(ordinal, marks)
        found: dict[int, tuple[int, ...]] = {}
        try:
            for index in range(max(wanted) + 1):
                next(run)
                if index in wanted:
                    found[index] = _each_once(marks.sources(run.lineage))
        finally:
            run.close()
        return found

    def record(self, key: int) -> Record:
        """Source element ``key``: its index, and a file's path and record number."""
        source = self._source
        if self._files is not None:
            file = bisect.bisect_right(self._files, key) - 1
            path = source.args["files"][file]
            return {"index": key, "path": path, "record": key - self._files[file]}
        if source.op == "list_files":
            return {"index": key, "path": source.args["files"][key]}
        return {"index": key}

    def count(self, ordinal: int) -> int:
        """The elements split ``ordinal`` makes: folded, else run and counted."""
        lo, hi = self.bounds(ordinal)
        n = hi - lo
        if n not in self._folded:
            source = self._source
            self._folded[n] = fold.fold(
                self._root,
                lambda node, inputs: (
                    n if node is source else node.definition.cardinality(node, inputs)
                ),
            )
        if self._folded[n] >= 0:
            return self._folded[n]
        run = self._run(ordinal, None)
        try:
            return sum(1 for _ in run)
        finally:
            run.close()

    def _run(self, ordinal: int, marks: Marks | None) -> Any:
        """A fresh run of split ``ordinal``, as a worker makes it (tracked with ``marks``)."""
        self.runs += 1
        bounds = self.bounds(ordinal)
        return split_runs.run_split(
            self._root, self._source, bounds, IterContext(), tracked=marks
        )


def _each_once(keys: Sequence[int]) -> tuple[int, ...]:
    """Each key of the flat ranges ``keys`` once, in order.

    >>> _each_once((4, 6, 2, 3, 4, 5))
    (4, 5, 2)
    """
    ranges = (range(keys[i], keys[i + 1]) for i in range(0, len(keys), 2))
    return tuple(dict.fromkeys(itertools.chain.from_iterable(ranges)))


def records_at(
    epoch: DealtEpoch, tokens: Sequence[int], source: int = 0
) -> list[list[Record]]:
    """The records of each of ``tokens`` (each split run once), ``source`` naming them."""
    located = []
    for token in tokens:
        at = epoch.locate(token)
        if at is None:
            raise ValueError(f"element {token} is past the epoch's end")
        located.append(at)
    by_split: dict[int, list[int]] = {}
    for ordinal, index in located:
        by_split.setdefault(ordinal, []).append(index)
    keys = {
        (ordinal, index): found
        for ordinal, indices in by_split.items()
        for index, found in epoch.keys(ordinal, indices).items()
    }
    out = []
    for token, at in zip(tokens, located, strict=True):
        if not keys[at]:
            raise InvalidArgumentError(
                f"lineage cannot tell which records made element {token}: an op "
                "of the pipeline does not say what its outputs stand for"
            )
        out.append([{"source": source, **epoch.record(key)} for key in keys[at]])
    return out


# ------------------------------------------------------------------ mixtures


def _mixture(
    node: Node, seed: int | None, R: int, epoch: int, positions: range
) -> list[list[Record]]:
    """The records of ``positions`` of a mixture of multi-rank reads (module doc)."""
    inputs = node.inputs if node.op == mix.SAMPLE else node.inputs[:-1]
    if node.op == mix.SAMPLE and node.args["seed"] is None:
        raise InvalidArgumentError(
            "lineage replays a mixture's choices: sample_from_datasets needs a "
            "seed (without one, every rank and every run draws its own)"
        )
    epochs = [traced(each, seed, epoch) for each in inputs]
    steps = positions[-1] // R + 1 if positions else 0
    draws = _draws(node, epochs, R, steps)
    if len(draws) < steps:
        raise ValueError(
            f"position {positions[-1]} is past the mixture's end: each rank's "
            f"mixture makes {len(draws)} elements"
        )
    wanted: dict[int, list[int]] = {}
    for p in positions:
        j, d = draws[p // R]
        wanted.setdefault(j, []).append(d * R + p % R)
    found = {
        (j, token): records
        for j, tokens in wanted.items()
        for token, records in zip(tokens, records_at(epochs[j], tokens, j), strict=True)
    }
    out = []
    for p in positions:
        j, d = draws[p // R]
        out.append(found[j, d * R + p % R])
    return out


def _draws(
    node: Node, epochs: list[DealtEpoch], R: int, steps: int
) -> list[tuple[int, int]]:
    """``(input, its element number)`` of each of the first ``steps`` draws of a rank.

    The mixture is run on stand-ins of its inputs that yield their own
    numbers: endless where it does not matter how many elements an input
    has on a rank, ``total // R`` where it does (an input ran out).
    """
    lengths: list[int | None] = [None] * len(epochs)
    while True:
        draws = _replay(node, lengths, steps)
        short = [
            j
            for j, drawn in enumerate(_most_drawn(draws, len(epochs)))
            if lengths[j] is None and drawn and epochs[j].locate(drawn * R - 1) is None
        ]
        if not short:
            return draws
        for j in short:
            lengths[j] = epochs[j].total() // R


def _most_drawn(draws: list[tuple[int, int]], count: int) -> list[int]:
    """How many elements of each input ``draws`` take."""
    most = [0] * count
    for j, d in draws:
        most[j] = max(most[j], d + 1)
    return most


def _replay(node: Node, lengths: list[int | None], steps: int) -> list[tuple[int, int]]:
    """The mixture's first ``steps`` draws over inputs of ``lengths`` (None: endless)."""
    stand_ins = tuple(
        Dataset.range(j * STRIDE, j * STRIDE + (STRIDE - 1 if n is None else n))._node
        for j, n in enumerate(lengths)
    )
    rest = node.inputs[len(lengths) :]  # the choice dataset
    replay = Node(node.op, node.args, (*stand_ins, *rest)).fresh()
    run = make_iterator(replay, IterContext())
    try:
        drawn = [divmod(int(x), STRIDE) for x in itertools.islice(run, steps)]
    finally:
        run.close()
    return drawn
