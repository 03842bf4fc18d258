"""Nested element structures: flatten, rebuild, spec, batch and slice leaf-wise.

An element is a leaf (numpy array, numpy scalar, Python scalar) or a tuple, list
or dict (``str`` keys, insertion order kept) nesting of leaves.

>>> import numpy as np
>>> flatten({"a": (1, 2), "b": np.int64(3)})
[1, 2, np.int64(3)]
>>> pack_as({"a": (0, 0), "b": 0}, [7, 8, 9])
{'a': (7, 8), 'b': 9}
>>> stack([(np.int64(1), "x"), (np.int64(2), "y")])
(array([1, 2]), array(['x', 'y'], dtype='<U1'))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zmqdata.errors import InvalidArgumentError

PYTHON_SCALARS = (bool, int, float, complex, str, bytes)


def is_container(value: Any) -> bool:
    """Whether ``value`` nests other values (tuple, list or dict)."""
    return isinstance(value, tuple | list | dict)


def _children(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else list(value)


def flatten(structure: Any) -> list[Any]:
    """The leaves of ``structure``, depth first, dicts in insertion order."""
    if not is_container(structure):
        return [structure]
    leaves: list[Any] = []
    for child in _children(structure):
        leaves.extend(flatten(child))
    return leaves


def _rebuild(template: Any, children: list[Any]) -> Any:
    if isinstance(template, dict):
        return dict(zip(template.keys(), children, strict=True))
    if isinstance(template, tuple) and hasattr(template, "_fields"):
        return type(template)(*children)  # namedtuple
    return type(template)(children)


def pack_as(template: Any, leaves: Sequence[Any]) -> Any:
    """Rebuilds ``template``'s nesting with ``leaves`` in ``flatten`` order."""
    it = iter(leaves)

    def build(node: Any) -> Any:
        if not is_container(node):
            return next(it)
        return _rebuild(node, [build(child) for child in _children(node)])

    result = build(template)
    if next(it, None) is not None:
        raise InvalidArgumentError("more leaves than the structure has places for")
    return result


def _shape_key(value: Any) -> Any:
    if isinstance(value, dict):
        return ("dict", tuple((k, _shape_key(v)) for k, v in value.items()))
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_shape_key(v) for v in value))
    return "leaf"


def assert_same_structure(a: Any, b: Any) -> None:
    """Raises ``InvalidArgumentError`` unless ``a`` and ``b`` nest alike."""
    if _shape_key(a) != _shape_key(b):
        raise InvalidArgumentError(
            f"elements have different structures: {_describe(a)} vs {_describe(b)}"
        )


def _describe(value: Any) -> str:
    return repr(map_leaves(lambda _: "·", value))


def map_leaves(fn: Callable[[Any], Any], structure: Any) -> Any:
    """Applies ``fn`` to every leaf of one structure."""
    return pack_as(structure, [fn(leaf) for leaf in flatten(structure)])


# ---------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape and dtype of one leaf of a dataset's elements.

    ``shape`` is a tuple whose entries may be ``None`` (unknown size); ``dtype``
    is a ``numpy.dtype``, or the Python type (``str``, ``int``…) for leaves that
    are plain Python scalars.

    >>> import numpy as np
    >>> TensorSpec((None, 3), np.dtype("float32"))
    TensorSpec(shape=(None, 3), dtype=float32)
    """

    shape: tuple[int | None, ...]
    dtype: Any

    def __repr__(self) -> str:
        name = self.dtype.__name__ if isinstance(self.dtype, type) else self.dtype
        return f"TensorSpec(shape={self.shape}, dtype={name})"

    def most_specific_common(self, other: TensorSpec) -> TensorSpec | None:
        """The spec both satisfy, or None when dtypes or ranks differ."""
        if self.dtype != other.dtype or len(self.shape) != len(other.shape):
            return None
        dims = tuple(
            a if a == b else None for a, b in zip(self.shape, other.shape, strict=True)
        )
        return TensorSpec(dims, self.dtype)


def spec_of_leaf(value: Any) -> TensorSpec:
    """The spec of one leaf value."""
    if isinstance(value, np.ndarray | np.generic):
        return TensorSpec(tuple(value.shape), value.dtype)
    return TensorSpec((), type(value))


def spec_of(element: Any) -> Any:
    """The nested spec of an element."""
    return map_leaves(spec_of_leaf, element)


def common_spec(a: Any, b: Any) -> Any:
    """The most specific spec compatible with both nested specs, or None."""
    if a is None or b is None or _shape_key(a) != _shape_key(b):
        return None
    pairs = [
        x.most_specific_common(y) for x, y in zip(flatten(a), flatten(b), strict=True)
    ]
    return None if any(p is None for p in pairs) else pack_as(a, pairs)


# ---------------------------------------------------------------- batching


def _as_array(leaf: Any) -> np.ndarray:
    if isinstance(leaf, np.ndarray):
        return leaf
    return np.asarray(leaf)


def stack(elements: Sequence[Any]) -> Any:
    """Stacks equal-structure elements leaf-wise into arrays with a new axis 0.

    >>> stack([np.int64(1), np.int64(2)])
    array([1, 2])
    >>> stack([(1, np.zeros(2)), (2, np.ones(2))])
    (array([1, 2]), array([[0., 0.],
           [1., 1.]]))
    """
    template = elements[0]
    if _same_numeric_scalars(elements):
        # Numeric scalars of one type (a batch of `range`): one conversion.
        return np.array(elements, dtype=template.dtype)
    for other in elements[1:]:
        assert_same_structure(template, other)
    columns = zip(*(flatten(e) for e in elements), strict=True)
    leaves = [_stack_column(index, column) for index, column in enumerate(columns)]
    return pack_as(template, leaves)


def _same_numeric_scalars(elements: Sequence[Any]) -> bool:
    """Whether ``elements`` are numpy numeric scalars all of one type."""
    template = elements[0]
    kind = type(template)
    return (
        isinstance(template, np.generic)
        and template.dtype.kind in "biufc"
        and all(type(e) is kind for e in elements)
    )


def _stack_column(index: int, column: Sequence[Any]) -> np.ndarray:
    """Component ``index`` of a batch: its leaves stacked (one shape, or raises)."""
    arrays = [_as_array(leaf) for leaf in column]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise InvalidArgumentError(
            f"cannot batch component {index}: elements have different shapes "
            f"{sorted(shapes)}"
        )
    return _stack_contiguous(arrays)


def _stack_contiguous(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.stack(arrays)``, C-contiguous even where the arrays are not.

    numpy lays the stack out as its inputs are (a transposed view's order), and
    a batch that is not C-contiguous is copied once more to be sent (or put in
    shared memory); written in C order, the same single copy serves both.

    >>> hwc = np.arange(12.0).reshape(2, 3, 2)
    >>> batch = _stack_contiguous([hwc.transpose(2, 0, 1)] * 2)
    >>> batch.flags.c_contiguous, batch.shape
    (True, (2, 2, 2, 3))
    """
    if all(array.flags.c_contiguous for array in arrays):
        return np.stack(arrays)
    dtype = np.result_type(*{array.dtype for array in arrays})
    out = np.empty((len(arrays), *arrays[0].shape), dtype=dtype)
    return np.stack(arrays, out=out)


def first_dim(structure: Any) -> int:
    """The common size of axis 0 of every leaf (raises if they differ)."""
    sizes = []
    for leaf in flatten(structure):
        array = _as_array(leaf)
        if array.ndim == 0:
            raise InvalidArgumentError(
                f"cannot slice a rank-0 value {leaf!r}: it has no first dimension"
            )
        sizes.append(array.shape[0])
    if len(set(sizes)) > 1:
        raise InvalidArgumentError(
            f"components have different first dimensions: {sizes}"
        )
    return sizes[0] if sizes else 0


def slice_at(structure: Any, index: int) -> Any:
    """Element ``index`` along axis 0 of every leaf.

    >>> slice_at({"a": np.arange(3), "b": np.arange(3) * 2}, 1)
    {'a': np.int64(1), 'b': np.int64(2)}
    >>> slice_at(np.arange(6).reshape(3, 2), 2)
    array([4, 5])
    """
    if type(structure) is np.ndarray:  # the usual batch: one array, no walk
        return structure[index]
    return map_leaves(lambda leaf: _as_array(leaf)[index], structure)
