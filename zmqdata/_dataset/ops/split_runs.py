"""``split_runs``: a worker's pipeline below its last 1-to-many op, run one split at a time.

Exactly-once reads key outputs, not source elements (``_wire/outputs.py``).
A worker runs the part of the pipeline from the source up to its last
expanding op (``unbatch``, ``flat_map``, ``interleave``; the source alone if
there is none) on each split alone, from scratch (``run_split``), so output
``i`` of a split is the same element every time the split is made: its key
says which. The ops above run as one pass over those outputs, tracking
lineage (``iterator.py``): a batch claims the keys of its elements, a filter
the keys it dropped, a shuffled element its own. No op needs to know the
split, and no output of a 1-to-many op is delivered twice or lost when a
split is made again.

The provider's splits are ``[repetition, lo, hi, first, end]``: run the
source on ``[lo, hi)`` and return the outputs keyed ``first`` to ``end``.
The keys from a split's last output to ``end`` (none was made) are claimed
by the next element returned. ``repeat`` ops below the cut are made by
asking for the next repetition's splits (``without_repeats``).

>>> import zmqdata as zd
>>> from zmqdata._dataset.iterator import ListSplitProvider
>>> from zmqdata._dataset.node import make_iterator
>>> from zmqdata._wire.outputs import base
>>> pipeline = zd.Dataset.range(10).flat_map(
...     lambda x: zd.Dataset.from_tensor_slices([x, x])).batch(3)._node
>>> root, source = by_split(pipeline)
>>> [n.op for n in root.walk()][:3]
['batch', 'split_runs', 'interleave']
>>> first, second = base(0, 0, 2), base(0, 1, 2)
>>> splits = ListSplitProvider([[0, 0, 2, first, second], [0, 2, 4, second + 1, second + 9]])
>>> it = make_iterator(root, IterContext(source, splits, lineage=True))
>>> [(b.tolist(), it.lineage == (first, first + 3)) for b in [next(it)]]
[([0, 0, 1], True)]
>>> [b.tolist() for b in it]  # split 2's first output was delivered before
[[1, 2, 3], [3]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zmqdata._dataset.block import END, Block
from zmqdata._dataset.constants import UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IterContext,
    ListSplitProvider,
    Split,
    SplitChunk,
)
from zmqdata._dataset.marks import Marks
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._wire.lineage import EMPTY, Lineage, join, size
from zmqdata._wire.outputs import split_base
from zmqdata.errors import InvalidArgumentError

ENDLESS = -1
SPLITS_PER_PASS = 64
"""About how many splits a pass of a source is cut into."""
WHOLE_DATASET_OPS = ("repeat", "take", "skip", "shard", "enumerate")
"""Ops that count elements across the whole dataset: run per split, they
would act on each split instead."""
DEALT_READ = "a multi-rank read (num_consumers with distributed_epoch)"


class SplitRuns(Op):
    """Runs its input on each split alone; each output's lineage is its output key."""

    name = "split_runs"
    runs_splits = True

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return UNKNOWN_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return inputs[0]

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _SplitRunsIterator(node, ctx)


def by_split(root: Node) -> tuple[Node, Node]:
    """``root`` with a ``split_runs`` op above its last expanding op (or its source).

    Returns the new root and the ``split_runs`` node (the pass's split source).
    """
    chain = main_chain(root)
    cut = len(chain) - len(run_alone(root))
    rebuilt = Node(SplitRuns.name, {}, (chain[cut],))
    runs = rebuilt
    for above in reversed(chain[:cut]):
        rebuilt = Node(above.op, above.args, (rebuilt, *above.inputs[1:]))
    return rebuilt, runs


def run_alone(root: Node) -> list[Node]:
    """The ops ``by_split`` runs on each split alone: from the last expanding op down.

    >>> import zmqdata as zd
    >>> ds = zd.Dataset.range(8).batch(2).unbatch().map(lambda x: x).batch(3)
    >>> [node.op for node in run_alone(ds._node)]
    ['unbatch', 'batch', 'range']
    """
    chain = main_chain(root)
    cut = next(
        (i for i, node in enumerate(chain) if _alone(node.definition)), len(chain) - 1
    )
    return chain[cut:]


def whole_batch(root: Node) -> int | None:
    """The batch size splits should be a multiple of, so batches fill up.

    The first ``batch`` above the source, when every op between makes one
    element per element (``map``, ``prefetch``): a split of
    ``k * batch_size`` elements then yields ``k`` whole batches.

    >>> import zmqdata as zd
    >>> whole_batch(zd.Dataset.range(1000).map(lambda x: x).batch(32)._node)
    32
    """
    node = whole_batch_node(root)
    return None if node is None else int(node.args["batch_size"])


def whole_batch_node(root: Node) -> Node | None:
    """The ``batch`` ``whole_batch`` sizes splits for, if any."""
    path = []
    node = root
    while node.inputs:
        path.append(node)
        node = node.inputs[0]
    for node in reversed(path):
        if node.op == "batch":
            return node
        if node.op not in ("map", "prefetch"):
            break
    return None


def split_size(length: int, bounds: tuple[int, int], batch: int | None) -> int:
    """Source elements per split of a source of ``length``, within ``bounds``.

    About ``SPLITS_PER_PASS`` splits, a multiple of ``batch`` (whole batches).

    >>> split_size(10_000, (1, 256), None), split_size(10_000, (1, 256), 64)
    (156, 192)
    """
    size = max(bounds[0], min(bounds[1], length // SPLITS_PER_PASS))
    whole = batch or 1
    return max(1, -(-size // whole)) * whole


def check_dealt(root: Node) -> None:
    """Refuses a pipeline a multi-rank read cannot run split by split (names the op)."""
    check_pipeline(main_chain(root))
    check_remainders(root, list(root.walk()))


def check_pipeline(
    nodes: Sequence[Node], what: str = DEALT_READ, repeats: bool = False
) -> None:
    """Raises ``InvalidArgumentError`` naming an op of ``nodes`` that runs per split.

    ``nodes``: what a worker runs on each split alone (a dealt job: its
    ``main_chain``). ``what`` names the read in the message; ``repeats``: a
    ``repeat`` is run by handing the splits out again (split runs).

    >>> import zmqdata as zd
    >>> check_pipeline(main_chain(zd.Dataset.range(9).shuffle(4)._node))
    Traceback (most recent call last):
    ...
    zmqdata.errors.InvalidArgumentError: a multi-rank read (num_consumers with distributed_epoch) must be deterministic: shuffle(seed=None) before distribute draws a new order in every run; give it a seed
    """
    for node in nodes:
        why = None if repeats and node.op == "repeat" else _refusal(node)
        if why is not None:
            raise InvalidArgumentError(f"{what} must be deterministic: {why}")


def _refusal(node: Node) -> str | None:
    args = node.args
    if node.op in WHOLE_DATASET_OPS:
        return (
            f"{node.op} before distribute counts elements over the whole dataset, "
            "but workers run the pipeline one split at a time: put it after "
            "distribute"
        )
    if node.op == "shuffle" and args.get("seed") is None:
        return (
            "shuffle(seed=None) before distribute draws a new order in every run; "
            "give it a seed"
        )
    parallel = args.get("num_parallel_calls") not in (None, 1)
    if (
        node.op in ("map", "interleave")
        and parallel
        and args.get("deterministic") is False
    ):
        return (
            f"{node.op}(deterministic=False) before distribute yields elements in "
            "the order they finish; drop deterministic=False"
        )
    return None


def check_remainders(root: Node, alone: list[Node], what: str = DEALT_READ) -> None:
    """Refuses a ``batch(drop_remainder=True)`` among the ops run on each split ``alone``.

    Run per split, it would drop each split's remainder, not only the last
    one, unless the splits are cut to its multiple (``whole_batch``).
    """
    whole = whole_batch_node(root)
    for node in alone:
        dropping = node.op in ("batch", "padded_batch") and node.args.get(
            "drop_remainder"
        )
        if dropping and node is not whole:
            raise InvalidArgumentError(
                f"{what} cannot run {node.op}(drop_remainder=True) below its last "
                "1-to-many op (or, with no such op, in a multi-rank read after "
                "anything but map): workers run that part one split at a time, "
                "so it would drop every split's remainder; put it after the "
                "1-to-many op or after distribute, or drop_remainder=False"
            )


def _alone(op: Op) -> bool:
    return op.expands or op.splits_alone


def main_chain(root: Node) -> list[Node]:
    """``root`` and its first inputs down to the source."""
    chain = [root]
    while chain[-1].inputs:
        chain.append(chain[-1].inputs[0])
    return chain


def run_split(
    pipeline: Node,
    source: Node | None,
    split: Split,
    ctx: IterContext,
    chunk: SplitChunk | None = None,
    tracked: Marks | None = None,
) -> Any:
    """A fresh iterator of ``pipeline`` over ``split`` alone: the same elements each time.

    Seeded shuffles in it draw as in a first pass, whichever run this is.
    ``chunk``: under a ``snapshot``, the split's chunk to read or to write
    (``cache_chunks``). ``tracked``: each element's ``lineage`` says which
    source elements it stands for, expanding ops' outputs carry their marks
    there (``lineage_records.py``).
    """
    first_pass = {id(node): (0, -1) for node in pipeline.walk()}
    one = IterContext(
        source,
        ListSplitProvider([split]),
        passes=first_pass,
        lineage=tracked is not None,
        ignored=ctx.ignored,
        marks=tracked,
        profile=ctx.profile,
        chunk=chunk,
    )
    return make_iterator(pipeline, one)


def without_repeats(root: Node) -> tuple[Node, int]:
    """``root`` without the ``repeat`` ops on its main chain, and the passes they make.

    ``ENDLESS`` (-1) if one of them repeats forever (and none zero times).

    >>> import zmqdata as zd
    >>> node = zd.Dataset.range(4).repeat(3).map(lambda x: x).repeat(2)._node
    >>> plain, passes = without_repeats(node)
    >>> [n.op for n in plain.walk()], passes
    (['map', 'range'], 6)
    >>> without_repeats(zd.Dataset.range(4).repeat()._node)[1]
    -1
    """
    chain: list[Node] = []
    passes, repeats = 1, 0
    node: Node | None = root
    while node is not None:
        if node.op != "repeat":
            chain.append(node)
        else:
            passes, repeats = _times(passes, int(node.args["count"])), repeats + 1
        node = node.inputs[0] if node.inputs else None
    if not repeats:
        return root, passes
    rebuilt = chain[-1]
    for above in reversed(chain[:-1]):
        rebuilt = Node(above.op, above.args, (rebuilt, *above.inputs[1:]))
    return rebuilt, passes


def _times(passes: int, count: int) -> int:
    if passes == 0 or count == 0:
        return 0
    if passes == ENDLESS or count < 0:
        return ENDLESS
    return passes * count


class _SplitRunsIterator(DatasetIterator):
    def __init__(self, node: Node, ctx: IterContext) -> None:
        self._pipeline, self._passes = without_repeats(node.inputs[0])
        self._source = find_split_source(self._pipeline)
        self._ctx = ctx
        self._run: Any = None
        self._key = self._first = self._end = 0
        self._owed: Lineage = EMPTY
        """Keys past the last output of a split: the next element claims them."""
        self._passes_done = 0
        self._made = False
        """The pass made an output (an endless repeat of nothing ends)."""
        self._failure: Exception | None = None
        """Raised by the next ``next_many`` (outputs went before it)."""

    def __next__(self) -> Any:
        while True:
            run = self._run
            if run is None:
                run = self._start_run()
            key = self._key
            try:
                element = next(run)
            except StopIteration:
                self._end_run(key)
                continue
            self._key = after = key + 1
            if key < self._first:
                continue
            if self._owed:
                self.lineage = join(self._owed, (key, after))
                self._owed = EMPTY
            else:
                self.lineage = (key, after)
            if after >= self._end:
                self._end_run(after)
            return element

    def next_many(self, limit: int) -> list[Any]:
        """Up to ``limit`` next outputs, of one split's run at most ([] at the end).

        They stand for consecutive keys (``lineage``, with the keys owed
        before the first). An error after the first is raised by the next call.
        """
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        try:
            out = [next(self)]
        except StopIteration:
            return []
        lineage, run, key = self.lineage, self._run, self._key
        start = key  # past the first output's key (the owed keys may lie anywhere)
        while run is not None and len(out) < limit:
            try:
                element = next(run)
            except StopIteration:
                self._end_run(key)
                break
            except Exception as error:  # the outputs before it go first
                self._failure = error
                break
            key += 1
            if key > self._first:
                out.append(element)
            if key >= self._end:
                self._end_run(key)
                break
        self._key = key
        if key > start:
            self.lineage = join(lineage, (start, key))
        return out

    def next_block(self, limit: int) -> Block | None:
        """Up to ``limit`` next outputs of one split's run as a block, where the run gives blocks.

        Its elements stand for consecutive keys, the first also for the keys
        owed before it (``Block.widths``); None where the run gives none.
        """
        while True:
            try:
                run = self._run if self._run is not None else self._start_run()
            except StopIteration:
                return END
            key = self._key
            block = run.next_block(min(limit, self._end - key))
            if block is None:
                return None
            if not block.n:
                self._end_run(key)
                continue
            self._key = after = key + block.n
            if after <= self._first:  # delivered before (a split made again)
                continue
            if key < self._first:
                block, key = block.part(self._first - key, block.n), self._first
            if after >= self._end:
                self._end_run(after)
            return self._claiming_owed(block, (key, after))

    def _claiming_owed(self, block: Block, keys: Lineage) -> Block:
        """``block``, its ``lineage`` set: ``keys``, and its first element the keys owed."""
        owed, self._owed = self._owed, EMPTY
        self.lineage = join(owed, keys)
        return block.claiming(size(owed))

    def _start_run(self) -> Any:
        """Starts (and returns) the next split's run; ``StopIteration`` after the last."""
        provider = self._ctx.split_provider
        assert provider is not None
        split = provider.next_split() if self._passes else None
        while split is None:
            self._passes_done += 1
            if self._passes != ENDLESS and self._passes_done >= self._passes:
                raise StopIteration
            made, self._made = self._made, False
            if self._passes == ENDLESS and not made and provider.made_nothing():
                raise StopIteration
            provider.reset()
            split = provider.next_split()
        _, lo, hi, self._first, self._end, *chunk = split
        self._key = split_base(self._first)
        self._run = run_split(self._pipeline, self._source, [lo, hi], self._ctx, *chunk)
        return self._run

    def _end_run(self, key: int) -> None:
        """The split's run is over at output key ``key``: the rest of its keys are owed."""
        self._made |= key > split_base(self._first)
        if key < self._end:
            self._owed = join(self._owed, (max(key, self._first), self._end))
        self._run.close()
        self._run = None

    def close(self) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None
