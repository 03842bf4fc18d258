"""Pipelines drawn from the grammar of ops users chain, for the generated tier.

A drawn ``Pipeline`` is a source (``range`` or ``from_tensor_slices``) and a
chain of ops: map, filter, flat_map, interleave, ``map`` to rows then
``unbatch``, ``batch(b).unbatch()``, seeded shuffle, ``batch`` (whose batches
later expansions take apart), and optionally a final batch. Every leaf is an int; what a service read delivers is compared with the
local run as a multiset of leaves (``leaves``), since a batch formed on the
workers may group its elements differently after a loss. Its ``repr`` reads
like the code that builds it. The functions are module-level (or partials of
them), so cloudpickle sends them by reference.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
from hypothesis import strategies as st

import zmqdata as zd

MAX_OPS = 5


def leaves(element: Any) -> list[int]:
    """Every int leaf of ``element`` (dicts by key, arrays flattened)."""
    if isinstance(element, dict):
        return [v for key in sorted(element) for v in leaves(element[key])]
    return [int(v) for v in np.ravel(element)]


def leaf_counts(elements: Iterable[Any]) -> Counter[int]:
    return Counter(v for element in elements for v in leaves(element))


def _leafwise(fn: Any, element: Any) -> Any:
    if isinstance(element, dict):
        return {key: _leafwise(fn, value) for key, value in element.items()}
    return fn(np.asarray(element, dtype=np.int64))


def affine(element: Any) -> Any:
    return _leafwise(lambda v: v * 3 + 1, element)


def to_dict(element: Any) -> Any:
    x = np.int64(element)
    return {"a": x, "b": np.array([2 * x, 2 * x + 1], dtype=np.int64)}


def keep(modulus: int, residue: int, element: Any) -> bool:
    return sum(leaves(element)) % modulus != residue


def rows(k: int, element: Any) -> Any:
    """``k`` rows derived from ``element``: leaf ``v`` gives ``v*4 + j``, j < k."""

    def expand(v: np.ndarray) -> np.ndarray:
        offsets = np.arange(k, dtype=np.int64).reshape((k,) + (1,) * v.ndim)
        return v[None] * 4 + offsets

    return _leafwise(expand, element)


def slices(k: int, element: Any) -> zd.Dataset:
    return zd.Dataset.from_tensor_slices(rows(k, element))


@dataclasses.dataclass(frozen=True)
class Op:
    """One op of a pipeline: its code as text and how to apply it."""

    text: str
    name: str
    args: tuple[Any, ...] = ()

    def apply(self, ds: zd.Dataset) -> zd.Dataset:
        return getattr(self, "_" + self.name)(ds, *self.args)

    @staticmethod
    def _affine(ds: zd.Dataset) -> zd.Dataset:
        return ds.map(affine)

    @staticmethod
    def _to_dict(ds: zd.Dataset) -> zd.Dataset:
        return ds.map(to_dict)

    @staticmethod
    def _filter(ds: zd.Dataset, modulus: int, residue: int) -> zd.Dataset:
        return ds.filter(functools.partial(keep, modulus, residue))

    @staticmethod
    def _flat_map(ds: zd.Dataset, k: int) -> zd.Dataset:
        return ds.flat_map(functools.partial(slices, k))

    @staticmethod
    def _interleave(ds: zd.Dataset, k: int, cycle: int, block: int) -> zd.Dataset:
        fn = functools.partial(slices, k)
        return ds.interleave(fn, cycle_length=cycle, block_length=block)

    @staticmethod
    def _unbatch_rows(ds: zd.Dataset, k: int) -> zd.Dataset:
        return ds.map(functools.partial(rows, k)).unbatch()

    @staticmethod
    def _rebatch(ds: zd.Dataset, size: int) -> zd.Dataset:
        return ds.batch(size).unbatch()

    @staticmethod
    def _shuffle(ds: zd.Dataset, buffer: int, seed: int) -> zd.Dataset:
        return ds.shuffle(buffer, seed=seed)

    @staticmethod
    def _batch(ds: zd.Dataset, size: int) -> zd.Dataset:
        return ds.batch(size)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    source: str
    n: int
    ops: tuple[Op, ...]

    def build(self) -> zd.Dataset:
        if self.source == "range":
            ds = zd.Dataset.range(self.n)
        else:
            ds = zd.Dataset.from_tensor_slices(np.arange(self.n, dtype=np.int64) * 5)
        for op in self.ops:
            ds = op.apply(ds)
        return ds

    def __repr__(self) -> str:
        source = (
            f"range({self.n})"
            if self.source == "range"
            else f"from_tensor_slices(arange({self.n}) * 5)"
        )
        return ".".join([source, *(op.text for op in self.ops)])


_K = st.sampled_from((2, 3, 1, 0))
"""Rows per input: mostly some (Hypothesis favours the first), sometimes none."""


def _op(draw: st.DrawFn, is_int: bool, ragged: bool) -> Op:
    """One op that fits the elements so far.

    A dict is made of int elements only. After a ``batch``, elements may differ
    in shape (its remainder) and the workers may group them differently after
    a loss: they are not batched again, nor filtered (a predicate of a batch
    depends on its grouping).
    """
    kinds = ["affine", "flat_map", "interleave", "rows", "shuffle"]
    kinds += [] if ragged else ["filter", "rebatch", "batch"]
    kinds += ["to_dict"] if is_int else []
    kind = draw(st.sampled_from(kinds))
    if kind == "affine":
        return Op("map(3x+1)", "affine")
    if kind == "to_dict":
        return Op("map(x -> {a: x, b: [2x, 2x+1]})", "to_dict")
    if kind == "filter":
        modulus = draw(st.integers(2, 5))
        residue = draw(st.integers(0, modulus - 1))
        return Op(f"filter(sum % {modulus} != {residue})", "filter", (modulus, residue))
    if kind == "shuffle":
        buffer, seed = draw(st.integers(1, 64)), draw(st.integers(0, 2**16))
        return Op(f"shuffle({buffer}, seed={seed})", "shuffle", (buffer, seed))
    if kind == "rebatch":
        size = draw(st.integers(1, 8))
        return Op(f"batch({size}).unbatch()", "rebatch", (size,))
    if kind == "batch":  # the elements an expansion above it takes apart
        size = draw(st.integers(2, 4))
        return Op(f"batch({size})", "batch", (size,))
    k = draw(_K)
    if kind == "flat_map":
        return Op(f"flat_map({k} rows)", "flat_map", (k,))
    if kind == "rows":
        return Op(f"map({k} rows).unbatch()", "unbatch_rows", (k,))
    cycle, block = draw(st.integers(1, 5)), draw(st.integers(1, 2))
    text = f"interleave({k} rows, cycle_length={cycle}, block_length={block})"
    return Op(text, "interleave", (k, cycle, block))


@st.composite
def pipelines(draw: st.DrawFn, max_n: int = 200) -> Pipeline:
    """A source of 20..``max_n`` ints, up to ``MAX_OPS`` ops, maybe a final batch."""
    source = draw(st.sampled_from(["range", "from_tensor_slices"]))
    n = draw(st.integers(20, max_n))
    ops: list[Op] = []
    for _ in range(draw(st.integers(1, MAX_OPS))):
        ragged = any(op.name == "batch" for op in ops)
        is_int = not ragged and all(op.name != "to_dict" for op in ops)
        ops.append(_op(draw, is_int, ragged))
    if not any(op.name == "batch" for op in ops) and draw(st.booleans()):
        size = draw(st.integers(2, 16))
        ops.append(Op(f"batch({size})", "batch", (size,)))
    return Pipeline(source, n, tuple(ops))
