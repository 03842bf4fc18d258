"""Mixtures: ``sample_from_datasets`` and ``choose_from_datasets`` (tf.data's).

A mixture reads several inputs and returns, each time, the next element of
the input it picks: at random by weight (``sample_from_datasets``) or the
one a choice dataset names (``choose_from_datasets``). An input that ends
either ends the mixture (``stop_on_empty_dataset=True``) or leaves it: the
others go on, sampled with their weights renormalized.

Each input keeps its order, and an element stands for what it stood for in
its input (``DatasetIterator.lineage``; a choice's lineage too), so exactly
once holds through a mixture. A mixture has several inputs, so it is not
splittable (``find_split_source``): mix ``distribute``d reads in the trainer,
or mix on the workers under ``parallel_epochs`` or static sharding
(docs/modes.md, Mixtures). The state holds each input's position (None once
it ended) and the random generator's, so a restored mixture makes the same
choices; restored with other weights (or another choice dataset), each input
goes on where it stood and the new ones apply (re-weighting on resume).

>>> import zmqdata as zd
>>> ds = zd.Dataset.sample_from_datasets(
...     [zd.Dataset.range(3), zd.Dataset.range(100, 103)], seed=7)
>>> sorted(int(x) for x in ds), list(ds) == list(ds)
([0, 1, 2, 100, 101, 102], True)
"""

from __future__ import annotations

import bisect
import functools
import math
import numbers
import operator
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from zmqdata._dataset import fold, graph, structure
from zmqdata._dataset.constants import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._dataset.validate import check_optional_int
from zmqdata._wire.lineage import EMPTY, join
from zmqdata.errors import InvalidArgumentError

SAMPLE: Final = "sample_from_datasets"
CHOOSE: Final = "choose_from_datasets"
_DRAWS: Final = 256
"""Uniform numbers drawn at once (one numpy call per this many choices)."""
_ENDED: Final = object()
"""What ``_MixIterator._read`` returns for an input that has no element left."""


# ---------------------------------------------------------------- building


def sample(
    inputs: Sequence[Node], weights: Any, seed: Any, stop_on_empty_dataset: Any
) -> Node:
    """The node of ``sample_from_datasets``; raises naming a bad argument.

    Inputs of weight 0 are left out (they are never picked), as tf.data
    does; a mixture of one input is that input.
    """
    probabilities = check_weights(weights, len(inputs))
    seed = check_optional_int(f"{SAMPLE} seed", seed, minimum=0)
    stop = _check_flag(f"{SAMPLE} stop_on_empty_dataset", stop_on_empty_dataset)
    check_structures(SAMPLE, inputs)
    kept = [(node, p) for node, p in zip(inputs, probabilities, strict=True) if p > 0]
    if len(kept) == 1:
        return kept[0][0]
    args = {
        "weights": [p for _, p in kept],
        "seed": seed,
        "stop_on_empty_dataset": stop,
    }
    return Node(SAMPLE, args, tuple(node for node, _ in kept))


def choose(inputs: Sequence[Node], choice: Node, stop_on_empty_dataset: Any) -> Node:
    """The node of ``choose_from_datasets`` (the choice dataset is its last input)."""
    stop = _check_flag(f"{CHOOSE} stop_on_empty_dataset", stop_on_empty_dataset)
    check_structures(CHOOSE, inputs)
    spec = _spec(choice)
    if spec is not None and not _is_index_spec(spec):
        raise TypeError(
            f"{CHOOSE} choice_dataset must yield int64 scalars, got elements {spec}"
        )
    return Node(CHOOSE, {"stop_on_empty_dataset": stop}, (*inputs, choice))


def check_weights(weights: Any, count: int) -> list[float]:
    """``weights`` scaled to sum to 1 (None: uniform); raises naming a bad one.

    >>> check_weights([1, 3], 2), check_weights(None, 4)
    ([0.25, 0.75], [0.25, 0.25, 0.25, 0.25])
    >>> check_weights([0.5, float("nan")], 2)
    Traceback (most recent call last):
      ...
    ValueError: sample_from_datasets weights[1] must be finite and >= 0, got nan
    """
    if weights is None:
        return [1.0 / count] * count
    weights = _weight_list(weights, count)
    for index, weight in enumerate(weights):
        _check_weight(index, weight)
    largest = max(float(w) for w in weights)  # scaled first: a sum never overflows
    if largest == 0:
        raise ValueError(f"{SAMPLE} weights must not all be 0, got {weights!r:.80}")
    scaled = [float(w) / largest for w in weights]
    total = math.fsum(scaled)
    return [w / total for w in scaled]


def _weight_list(weights: Any, count: int) -> list[Any] | tuple[Any, ...]:
    """``weights`` as a list or tuple of ``count``; raises if it is not one."""
    if isinstance(weights, np.ndarray):
        weights = weights.tolist()
    if not isinstance(weights, list | tuple):
        raise TypeError(
            f"{SAMPLE} weights must be a list of floats, got {weights!r:.80}"
        )
    if len(weights) != count:
        raise ValueError(
            f"{SAMPLE} takes one weight per dataset: {count} datasets, "
            f"{len(weights)} weights {weights!r:.80}"
        )
    return weights


def _check_weight(index: int, weight: Any) -> None:
    """Raises unless ``weight`` (``weights[index]``) is a finite real >= 0."""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise TypeError(
            f"{SAMPLE} weights[{index}] must be a float, got {weight!r:.80}"
        )
    if not math.isfinite(weight) or weight < 0:
        raise ValueError(
            f"{SAMPLE} weights[{index}] must be finite and >= 0, got {weight!r}"
        )


def check_structures(what: str, inputs: Sequence[Node]) -> None:
    """Raises ``TypeError`` naming the first input whose elements fit no common spec.

    Inputs whose spec is unknown (user code decides it) are not checked.
    """
    known = [(i, spec) for i, spec in enumerate(map(_spec, inputs)) if spec is not None]
    for index, spec in known[1:]:
        if structure.common_spec(known[0][1], spec) is None:
            raise TypeError(
                f"{what}: datasets[{index}] has elements {spec}, incompatible with "
                f"datasets[{known[0][0]}]'s {known[0][1]}"
            )


def _spec(node: Node) -> Any:
    return fold.fold(node, lambda n, specs: n.definition.element_spec(n, specs))


def _is_index_spec(spec: Any) -> bool:
    if not isinstance(spec, structure.TensorSpec) or spec.shape != ():
        return False
    dtype = spec.dtype
    return dtype is int or (isinstance(dtype, np.dtype) and dtype.kind in "iu")


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r:.80}")
    return value


def _common_spec(specs: Sequence[Any]) -> Any:
    common = specs[0]
    for spec in specs[1:]:
        common = structure.common_spec(common, spec)
    return common


# ---------------------------------------------------------------- ops


class SampleFromDatasets(Op):
    name = SAMPLE

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        if node.args["stop_on_empty_dataset"]:  # ends with the first input picked empty
            if all(n == INFINITE_CARDINALITY for n in inputs):
                return INFINITE_CARDINALITY
            return UNKNOWN_CARDINALITY
        if INFINITE_CARDINALITY in inputs:
            return INFINITE_CARDINALITY
        return UNKNOWN_CARDINALITY if UNKNOWN_CARDINALITY in inputs else sum(inputs)

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return _common_spec(inputs)

    def identity(self, node: Node, inputs: list[Node]) -> Node:
        """Its inputs, seed and end rule: a restore may change the weights."""
        args = {k: v for k, v in node.args.items() if k != "weights"}
        return Node(node.op, args, tuple(inputs))

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _SampleIterator(node, ctx)


class ChooseFromDatasets(Op):
    name = CHOOSE

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        *data, choices = inputs
        if choices == 0 or all(n == INFINITE_CARDINALITY for n in data):
            return choices  # every choice makes an element
        return UNKNOWN_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return _common_spec(inputs[:-1])

    def identity(self, node: Node, inputs: list[Node]) -> Node:
        """Its inputs and end rule: a restore may change the choice dataset."""
        return Node(node.op, node.args, tuple(inputs[:-1]))

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        return _ChooseIterator(node, ctx)


# ---------------------------------------------------------------- iterators


class _MixIterator(DatasetIterator):
    """Reads the input a subclass picks; an input that ends leaves or ends the mix.

    Its state holds each input's position (None once it ended) and what a
    restore must find as it was (``_fixed``: the kind of mixture, its end
    rule, each input's ``data_fingerprint``). The weights or the choice
    dataset may differ: each input goes on where it stood.
    """

    kind: str

    def __init__(self, node: Node, ctx: IterContext, inputs: Sequence[Node]) -> None:
        self._ctx, self._nodes = ctx, inputs
        self._stop_on_empty: bool = node.args["stop_on_empty_dataset"]
        self._inputs: list[DatasetIterator | None] = [
            make_iterator(n, ctx) for n in inputs
        ]
        self._done = False

    def _read(self, index: int) -> Any:
        """The next element of input ``index`` (its lineage taken), or ``_ENDED``."""
        source = self._inputs[index]
        if source is None:
            return _ENDED
        try:
            element = next(source)
        except StopIteration:
            source.close()
            self._inputs[index] = None
            self._done = self._ended()
            self._inputs_changed()
            return _ENDED
        self.lineage = source.lineage
        return element

    def _ended(self) -> bool:
        """Whether the inputs that ended end the mixture."""
        ended = [source is None for source in self._inputs]
        return all(ended) or (self._stop_on_empty and any(ended))

    def _inputs_changed(self) -> None:
        """An input ended, or a state was restored."""

    @functools.cached_property
    def _sources(self) -> list[str | None]:
        return [graph.data_fingerprint(node) for node in self._nodes]

    def _fixed(self) -> dict[str, Any]:
        """What a restored state must hold as this mixture does (its state holds it)."""
        return {
            "mixture": self.kind,
            "stop_on_empty_dataset": self._stop_on_empty,
            "sources": self._sources,
        }

    def get_state(self) -> dict[str, Any]:
        inputs = [None if s is None else s.get_state() for s in self._inputs]
        return {**self._fixed(), "inputs": inputs}

    def set_state(self, state: dict[str, Any]) -> None:
        self._check(state)
        for index, position in enumerate(state["inputs"]):
            source = self._inputs[index]
            if position is None:
                if source is not None:
                    source.close()
                self._inputs[index] = None
                continue
            if source is None:  # ended here, not at the save
                source = self._inputs[index] = make_iterator(
                    self._nodes[index], self._ctx
                )
            source.set_state(position)
        self._done = self._ended()
        self._inputs_changed()

    def _check(self, state: Any) -> None:
        """Raises ``InvalidArgumentError`` naming what differs from the saved mixture."""
        saved = state if isinstance(state, dict) else {}
        for name, mine in self._fixed().items():
            if saved.get(name) != mine:
                raise InvalidArgumentError(
                    f"{self.kind}: {self._difference(name, saved.get(name), mine)}"
                )

    def _difference(self, name: str, saved: Any, mine: Any) -> str:
        """What differs in ``name`` between the saved mixture and this one."""
        if name == "mixture":
            return f"the state is not one of a {mine} but of {saved or 'another op'}"
        if name != "sources":
            return f"the saved mixture has {name}={saved!r}, this one {name}={mine!r}"
        saved = saved if isinstance(saved, list) else []
        if len(saved) != len(mine):
            left_out = (
                " (inputs of weight 0 are left out)" if self.kind == SAMPLE else ""
            )
            return (
                f"the saved mixture has {len(saved)} datasets, this one "
                f"{len(mine)}{left_out}"
            )
        index = next(
            i for i, (a, b) in enumerate(zip(saved, mine, strict=True)) if a != b
        )
        return (
            f"datasets[{index}] is not the saved mixture's: its pipeline differs "
            "(ops, arguments, functions or the service dataset it reads)"
        )

    def close(self) -> None:
        for source in self._inputs:
            if source is not None:
                source.close()


class _SampleIterator(_MixIterator):
    """Picks input ``i`` with probability ``weights[i]`` among those not ended.

    Choices come from uniform numbers drawn ``_DRAWS`` at a time; the state
    is the generator's state before the current draw and how many were used.
    """

    kind = SAMPLE

    def __init__(self, node: Node, ctx: IterContext) -> None:
        super().__init__(node, ctx, node.inputs)
        self._weights: list[float] = node.args["weights"]
        self._seed: int | None = node.args["seed"]
        self._rng = np.random.default_rng(self._seed)  # None: a fresh one
        self._draw()
        self._inputs_changed()

    def _draw(self) -> None:
        self._drawn_from = self._rng.bit_generator.state
        self._uniforms: list[float] = self._rng.random(_DRAWS).tolist()
        self._used = 0

    def _inputs_changed(self) -> None:
        live = [i for i, source in enumerate(self._inputs) if source is not None]
        total = math.fsum(self._weights[i] for i in live)
        bounds, running = [], 0.0
        for i in live:
            running += self._weights[i]
            bounds.append(running / total)
        if bounds:
            bounds[-1] = 1.0  # a uniform number, < 1, always picks one
        self._live, self._bounds = live, bounds

    def __next__(self) -> Any:
        while not self._done:
            if self._used == _DRAWS:
                self._draw()
            uniform = self._uniforms[self._used]
            self._used += 1
            element = self._read(self._live[bisect.bisect_right(self._bounds, uniform)])
            if element is not _ENDED:
                return element
        raise StopIteration

    def _fixed(self) -> dict[str, Any]:
        return {**super()._fixed(), "seed": self._seed}

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "rng": self._drawn_from, "used": self._used}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores each input and the generator; this mixture's weights apply."""
        super().set_state(state)
        self._rng.bit_generator.state = state["rng"]
        self._draw()
        self._used = int(state["used"])


class _ChooseIterator(_MixIterator):
    """Reads the input each element of the choice dataset names."""

    kind = CHOOSE

    def __init__(self, node: Node, ctx: IterContext) -> None:
        super().__init__(node, ctx, node.inputs[:-1])
        self._choice_node = node.inputs[-1]
        self._choice = make_iterator(self._choice_node, ctx)

    def __next__(self) -> Any:
        claimed = EMPTY  # the choices of inputs that had ended
        while not self._done:
            try:
                value = next(self._choice)
            except StopIteration:
                self._done = True
                break
            claimed = join(claimed, self._choice.lineage)
            element = self._read(self._index(value))
            if element is not _ENDED:
                self.lineage = join(claimed, self.lineage)
                return element
        raise StopIteration

    def _index(self, value: Any) -> int:
        count = len(self._inputs)
        if not isinstance(value, bool | np.bool_):
            try:
                index = operator.index(value)
            except TypeError:
                pass
            else:
                if 0 <= index < count:
                    return index
        raise InvalidArgumentError(
            f"{CHOOSE}: choice_dataset gave {value!r:.80}, which is not an index "
            f"of the {count} datasets (an int from 0 to {count - 1})"
        )

    @functools.cached_property
    def _choice_source(self) -> str | None:
        return graph.data_fingerprint(self._choice_node)

    def get_state(self) -> dict[str, Any]:
        choice = {
            "choice": self._choice.get_state(),
            "choice_source": self._choice_source,
        }
        return {**super().get_state(), **choice}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores each input; the saved choice dataset's position, or another's start."""
        super().set_state(state)
        if state.get("choice_source") == self._choice_source:
            self._choice.set_state(state["choice"])
        else:  # another choice dataset: its choices apply from its first
            self._choice.close()
            self._choice = make_iterator(self._choice_node, self._ctx)

    def close(self) -> None:
        super().close()
        self._choice.close()
