"""``padded_batch``: batches of elements padded leaf-wise to one shape (tf.data's).

Padded shapes and padding values are structures like the elements' (checked
against each batch's first element, or against the element spec at build):

* a padded shape is an int ``n`` (``[n]``) or a list or tuple of sizes, where
  ``None`` or ``-1`` stands for the batch's largest size in that dimension; a
  ``None`` shape pads every dimension to the batch's largest;
* a padding value is a scalar, ``None`` for the default (``0``, ``""``,
  ``b""``); one scalar given for a structure pads every component.

>>> import numpy as np
>>> pad_batch([np.array([1]), np.array([2, 3])], None, None)
array([[1, 0],
       [2, 3]])
>>> pad_batch([(np.array([1]), "a"), (np.array([2, 3]), "bc")], ([4], None), (-1, None))
(array([[ 1, -1, -1, -1],
       [ 2,  3, -1, -1]]), array(['a', 'bc'], dtype='<U2'))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.iterator import (
    DatasetIterator,
    IterContext,
    consuming,
)
from zmqdata._dataset.node import Constant, Node, make_iterator
from zmqdata._dataset.ops.batch import Batch, _array_dtype, _BatchIterator
from zmqdata._dataset.structure import TensorSpec
from zmqdata._dataset.validate import check_int
from zmqdata.errors import InvalidArgumentError

Shape = tuple[int | None, ...] | None
"""One component's padded shape: sizes, ``None`` for the batch's largest; or
``None`` for the batch's largest in every dimension."""


class PaddedBatch(Batch):
    name = "padded_batch"

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        outer = node.args["batch_size"] if node.args["drop_remainder"] else None
        return padded_spec(
            inputs[0],
            constant(node.args["padded_shapes"]),
            constant(node.args["padding_values"]),
            outer,
        )

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        args = node.args
        return consuming(
            ctx,
            make_iterator(node.inputs[0], ctx),
            lambda source: _PaddedBatchIterator(
                source,
                args["batch_size"],
                args["drop_remainder"],
                constant(args["padded_shapes"]),
                constant(args["padding_values"]),
            ),
        )


class _PaddedBatchIterator(_BatchIterator):
    """``batch`` one element at a time (no columns: each is padded), padded."""

    def __init__(
        self,
        source: DatasetIterator,
        size: int,
        drop_remainder: bool,
        shapes: Any,
        values: Any,
    ) -> None:
        super().__init__(source, size, drop_remainder)
        self._shapes, self._values = shapes, values

    def __next__(self) -> Any:
        elements = self._gather()
        if not elements or (self._drop_remainder and len(elements) < self._size):
            raise StopIteration
        return pad_batch(elements, self._shapes, self._values)


def build(
    parent: Node,
    spec: Any,
    batch_size: Any,
    padded_shapes: Any,
    padding_values: Any,
    drop_remainder: Any,
) -> Node:
    """A ``padded_batch`` node, its arguments checked (against ``spec`` if known)."""
    if not isinstance(drop_remainder, bool):
        raise TypeError(
            f"padded_batch drop_remainder must be a bool, got {drop_remainder!r}"
        )
    size = check_int("padded_batch batch_size", batch_size, minimum=1)
    shapes, values = shapes_arg(padded_shapes), values_arg(padding_values)
    check_spec("padded_batch", spec, shapes, values)
    args = {
        "batch_size": size,
        "padded_shapes": shapes,
        "padding_values": values,
        "drop_remainder": drop_remainder,
    }
    return Node("padded_batch", args, (parent,))


def check_spec(
    what: str,
    spec: Any,
    shapes: Constant | None,
    values: Constant | None,
    filled: bool = False,
) -> None:
    """Raises ``ValueError`` if ``shapes`` or ``values`` do not fit ``spec``."""
    try:
        padded_spec(spec, constant(shapes), constant(values), None, filled)
    except InvalidArgumentError as error:
        raise ValueError(f"{what}: {error}") from None


def constant(arg: Constant | None) -> Any:
    """The value of an optional ``Constant`` argument."""
    return None if arg is None else arg.value


# ---------------------------------------------------------------- arguments


def shapes_arg(padded_shapes: Any) -> Constant | None:
    """``padded_shapes`` checked (sizes are ints >= -1 or None) and made plain.

    >>> shapes_arg(([np.int64(4)], {"x": -1})).value
    ([4], {'x': -1})
    """
    if padded_shapes is None:
        return None

    def plain(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, dict):
            return {_key(key, padded_shapes): plain(v) for key, v in value.items()}
        if isinstance(value, tuple | list):
            return type(value)(plain(v) for v in value)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(
                f"padded_shapes sizes must be ints or None, got {value!r} "
                f"in {padded_shapes!r}"
            )
        if value < -1:
            raise ValueError(
                f"padded_shapes sizes must be >= 0 (or -1 or None for the largest), "
                f"got {value} in {padded_shapes!r}"
            )
        return int(value)

    return Constant(plain(padded_shapes))


def values_arg(padding_values: Any) -> Constant | None:
    """``padding_values`` checked (scalars, ``None`` or structures of them).

    >>> values_arg({"x": np.array(-1), "s": "?"}).value
    {'x': np.int64(-1), 's': '?'}
    """
    if padding_values is None:
        return None

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {_key(key, padding_values): plain(v) for key, v in value.items()}
        if isinstance(value, tuple | list):
            return type(value)(plain(v) for v in value)
        if value is None or isinstance(value, structure.PYTHON_SCALARS):
            return value
        if isinstance(value, np.ndarray | np.generic) and value.ndim == 0:
            if value.dtype.kind not in "biufcUS":
                raise TypeError(
                    f"padding_values must be numbers or strings, got {value!r}"
                )
            return np.asarray(value)[()]
        raise TypeError(f"padding_values must be scalars, got {value!r}")

    return Constant(plain(padding_values))


def _key(key: Any, whole: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"dict keys must be str, got {key!r} in {whole!r}")
    return key


# ---------------------------------------------------------------- structures


def leaf_shapes(shapes: Any, template: Any) -> list[Shape]:
    """The padded shape of each leaf of ``template`` (an element or a spec).

    >>> leaf_shapes(({"a": 3}, [None, -1]), ({"a": 0}, 0))
    [(3,), (None, None)]
    """
    if shapes is None:
        return [None] * len(structure.flatten(template))
    return _match(shapes, template, _shape_of, "padded_shapes", shapes)


def leaf_values(values: Any, template: Any) -> list[Any]:
    """The padding value of each leaf of ``template``; one scalar pads them all.

    >>> leaf_values(-1, (0, {"a": 0})), leaf_values((None, {"a": 5}), (0, {"a": 0}))
    ([-1, -1], [None, 5])
    """
    if not structure.is_container(values):
        return [values] * len(structure.flatten(template))
    return _match(values, template, lambda value: value, "padding_values", values)


def _match(given: Any, template: Any, leaf: Any, name: str, whole: Any) -> list[Any]:
    """``leaf(part)`` for the part of ``given`` at each leaf of ``template``."""
    if not structure.is_container(template):
        return [leaf(given)]
    mismatch = InvalidArgumentError(
        f"{name} {whole!r} does not match the elements' structure "
        f"{structure.map_leaves(lambda _: '·', template)!r}"
    )
    if isinstance(template, dict):
        if not isinstance(given, dict) or set(given) != set(template):
            raise mismatch
        parts = [(given[key], child) for key, child in template.items()]
    else:
        if not isinstance(given, tuple | list) or len(given) != len(template):
            raise mismatch
        parts = list(zip(given, template, strict=True))
    return [
        item for part, child in parts for item in _match(part, child, leaf, name, whole)
    ]


def _shape_of(value: Any) -> Shape:
    """A padded shape as sizes (``None`` for the largest)."""
    if value is None:
        return None
    if isinstance(value, int):
        return (_size_of(value),)
    if isinstance(value, tuple | list) and all(
        v is None or isinstance(v, int) for v in value
    ):
        return tuple(_size_of(v) for v in value)
    raise InvalidArgumentError(
        f"padded shape {value!r} is not an int or a list of sizes"
    )


def _size_of(value: int | None) -> int | None:
    """A padded size (``None`` for the largest, which ``-1`` stands for too)."""
    return None if value is None or value == -1 else value


# ---------------------------------------------------------------- padding


def pad_batch(
    elements: Sequence[Any], shapes: Any, values: Any, fill: int | None = None
) -> Any:
    """Stacks ``elements`` leaf-wise, padding each leaf to its padded shape.

    ``fill`` (``bucket_by_sequence_length``'s boundary - 1) replaces the
    sizes a shape leaves to the batch's largest; a ``None`` shape then pads
    axis 0 to ``fill`` and the other axes to the largest.
    """
    template = elements[0]
    for other in elements[1:]:
        structure.assert_same_structure(template, other)
    columns = zip(*(structure.flatten(e) for e in elements), strict=True)
    leaves = [
        _pad_column(index, [np.asarray(leaf) for leaf in column], shape, value, fill)
        for index, (column, shape, value) in enumerate(
            zip(
                columns,
                leaf_shapes(shapes, template),
                leaf_values(values, template),
                strict=True,
            )
        )
    ]
    return structure.pack_as(template, leaves)


def _pad_column(
    index: int, arrays: list[np.ndarray], shape: Shape, value: Any, fill: int | None
) -> np.ndarray:
    """Component ``index`` of a batch: its ``arrays`` stacked, padded to ``shape``."""
    ranks = sorted({array.ndim for array in arrays})
    if len(ranks) > 1:
        raise InvalidArgumentError(
            f"cannot pad component {index}: its elements have different ranks {ranks}"
        )
    sizes = _filled_shape(shape, ranks[0], fill)
    if len(sizes) != ranks[0]:
        raise InvalidArgumentError(
            f"padded shape {list(sizes)} of component {index} has rank {len(sizes)}, "
            f"but its elements have rank {ranks[0]}"
        )
    dims = [_padded_size(index, arrays, axis, sizes) for axis in range(len(sizes))]
    fill_value, dtype = padding_for(
        value, np.result_type(*{array.dtype for array in arrays}), index
    )
    out = np.full((len(arrays), *dims), fill_value, dtype)
    for row, array in enumerate(arrays):
        where: tuple[Any, ...] = (row, *(slice(0, n) for n in array.shape))
        out[where] = array
    return out


def _filled_shape(shape: Shape, rank: int, fill: int | None) -> tuple[int | None, ...]:
    """``shape`` as sizes for elements of ``rank``, ``fill`` put in (see ``pad_batch``)."""
    if shape is None:
        if fill is not None and rank:
            return (fill, *(None,) * (rank - 1))
        return (None,) * rank
    if fill is not None:
        return tuple(fill if size is None else size for size in shape)
    return shape


def _padded_size(
    index: int, arrays: list[np.ndarray], axis: int, sizes: tuple[int | None, ...]
) -> int:
    """The size component ``index`` pads ``axis`` to; raises if an array is larger."""
    largest: int = max(array.shape[axis] for array in arrays)
    size = sizes[axis]
    if size is None:
        return largest
    if largest > size:
        raise InvalidArgumentError(
            f"component {index} has an element of size {largest} in dimension "
            f"{axis}, larger than its padded shape {list(sizes)}"
        )
    return size


def padding_for(value: Any, dtype: np.dtype[Any], index: Any) -> tuple[Any, Any]:
    """The padding value for a component of ``dtype``, and the padded dtype.

    The default is 0 (``False``) for numbers, ``""`` / ``b""`` for strings; a
    string longer than the component's width widens it. A value the dtype
    cannot hold exactly raises ``InvalidArgumentError`` naming it.

    >>> padding_for(None, np.dtype("<U2"), 0), padding_for("pad", np.dtype("<U2"), 0)
    ((np.str_(''), dtype('<U2')), (np.str_('pad'), dtype('<U3')))
    >>> padding_for(0.5, np.dtype("int32"), "x")
    Traceback (most recent call last):
    ...
    zmqdata.errors.InvalidArgumentError: padding value 0.5 does not fit component x of dtype int32
    """
    strings = dtype.kind in "US"
    if value is None:
        if strings or dtype.kind in "biufc":
            return dtype.type(), dtype
        raise InvalidArgumentError(
            f"component {index} of dtype {dtype} has no default padding value"
        )
    given = np.asarray(value)
    misfit = InvalidArgumentError(
        f"padding value {value!r} does not fit component {index} of dtype {dtype}"
    )
    if strings or given.dtype.kind in "US":
        if given.dtype.kind != dtype.kind:
            raise misfit
        return given[()], np.result_type(dtype, given.dtype)
    return _cast_exactly(given, dtype, misfit), dtype


def _cast_exactly(given: np.ndarray, dtype: np.dtype[Any], misfit: Exception) -> Any:
    """The number ``given`` as a ``dtype`` scalar; raises ``misfit`` if it changes.

    NaN casts to a NaN of any float or complex dtype.
    """
    try:
        with np.errstate(all="ignore"):
            cast = given.astype(dtype)
            same = bool(cast.astype(given.dtype) == given)
    except (TypeError, ValueError, OverflowError):
        raise misfit from None
    if not same and not (
        dtype.kind in "fc" and given.dtype.kind in "fc" and np.isnan(given)
    ):
        raise misfit
    return cast[()]


# ---------------------------------------------------------------- specs


def padded_spec(
    spec: Any, shapes: Any, values: Any, outer: int | None, filled: bool = False
) -> Any:
    """The spec of padded batches of elements of ``spec`` (None if unknown).

    Checks ``shapes`` and ``values`` against it: a padded size smaller than
    a known size, a rank or a dtype that does not match, raise. ``filled``:
    the sizes ``shapes`` leaves to the largest vary (``pad_batch``'s ``fill``).

    >>> padded_spec(TensorSpec((None,), np.dtype("int32")), [5], None, 2)
    TensorSpec(shape=(2, 5), dtype=int32)
    """
    if spec is None:
        return None
    leaves = []
    for index, (leaf, shape, value) in enumerate(
        zip(
            structure.flatten(spec),
            leaf_shapes(shapes, spec),
            leaf_values(values, spec),
            strict=True,
        )
    ):
        dims = _padded_dims(index, leaf.shape, shape, filled)
        _, dtype = padding_for(value, _array_dtype(leaf.dtype), index)
        leaves.append(TensorSpec((outer, *dims), dtype))
    return structure.pack_as(spec, leaves)


def _padded_dims(
    index: int, dims: tuple[int | None, ...], shape: Shape, filled: bool
) -> tuple[int | None, ...]:
    """The padded shape of component ``index``, its elements of shape ``dims``.

    Raises if ``shape`` does not fit ``dims``; ``filled`` as in ``padded_spec``.
    """
    if shape is None:
        return (None, *dims[1:]) if filled and dims else dims
    _check_fits(index, dims, shape)
    return tuple(
        (None if filled else known) if size is None else size
        for size, known in zip(shape, dims, strict=True)
    )


def _check_fits(
    index: int, dims: tuple[int | None, ...], shape: tuple[int | None, ...]
) -> None:
    """Raises unless elements of shape ``dims`` (component ``index``) fit ``shape``."""
    if len(shape) != len(dims):
        raise InvalidArgumentError(
            f"padded shape {list(shape)} of component {index} has rank "
            f"{len(shape)}, but its elements have shape {dims}"
        )
    for size, known in zip(shape, dims, strict=True):
        if size is not None and known is not None and known > size:
            raise InvalidArgumentError(
                f"padded shape {list(shape)} of component {index} is smaller "
                f"than its elements' shape {dims}"
            )
