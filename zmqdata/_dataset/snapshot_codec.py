"""How a save's chunks encode elements: msgpack natives, arrays and tuples tagged.

A numpy array or scalar becomes ``{"__ndarray__": [dtype.str, shape, bytes]}``
(``shape`` ``None`` for a numpy scalar), a tuple ``{"__tuple__": […]}``; other
values are msgpack's own (docs/formats.md). Pure: no files.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

from zmqdata.errors import InvalidArgumentError

ARRAY = "__ndarray__"
TUPLE = "__tuple__"
_INT_RANGE = (-(2**63), 2**64)


class Refused(Exception):
    """A value that cannot be saved; ``where`` gathers its place on the way up."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.where: collections.deque[str] = collections.deque()


def tagged(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with msgpack/JSON-native containers: tuples tagged, leaves by ``leaf``."""
    if isinstance(value, tuple):
        return {TUPLE: _items(value, leaf)}
    if isinstance(value, list):
        return _items(value, leaf)
    if isinstance(value, dict):
        plain = {}
        for key, child in value.items():
            if type(key) is not str or key in (ARRAY, TUPLE):
                raise Refused(
                    f"dict key {key!r}: keys must be str other than {ARRAY!r} and "
                    f"{TUPLE!r}"
                )
            try:
                plain[key] = tagged(child, leaf)
            except Refused as refused:
                refused.where.appendleft(f"[{key!r}]")
                raise
        return plain
    return leaf(value)


def _items(values: tuple[Any, ...] | list[Any], leaf: Callable[[Any], Any]) -> Any:
    plain = []
    for index, child in enumerate(values):
        try:
            plain.append(tagged(child, leaf))
        except Refused as refused:
            refused.where.appendleft(f"[{index}]")
            raise
    return plain


_NATIVE = frozenset((bool, float, str, bytes, type(None)))


def _leaf(value: Any) -> Any:
    kind = type(value)
    if kind in _NATIVE:
        return value
    if kind is int:
        if not _INT_RANGE[0] <= value < _INT_RANGE[1]:
            raise Refused(f"int {value} is outside 64 bits (use a numpy array)")
        return value
    if isinstance(value, np.ndarray | np.generic):
        return {ARRAY: _array(value)}
    raise Refused(
        f"a {kind.__name__} cannot be saved (numpy arrays and scalars, None, bool, "
        "int, float, str, bytes, and tuples, lists and dicts of them can)"
    )


def _array(value: np.ndarray | np.generic) -> list[Any]:
    dtype = value.dtype
    if dtype.hasobject:
        raise Refused(
            f"an array of dtype {dtype} holds Python objects, which are not saved "
            "(use fixed-width str/bytes arrays, or a list)"
        )
    if dtype.names is not None or dtype.subdtype is not None:
        raise Refused(f"structured dtype {dtype} is not saved (save its fields)")
    if dtype.itemsize == 0:
        raise Refused(f"dtype {dtype} has no bytes per item")
    shape = None if isinstance(value, np.generic) else list(value.shape)
    flat = np.ascontiguousarray(value).reshape(-1)
    return [dtype.str, shape, flat.view(np.uint8).data]


def encode(element: Any) -> Any:
    """``element`` as msgpack natives (the chunk encoding); refused values named.

    >>> encode((1, [b"x"], {"s": "t"}))
    {'__tuple__': [1, [b'x'], {'s': 't'}]}
    >>> encode(np.float16(1))["__ndarray__"][:2], encode(np.zeros((2, 0)))[ARRAY][:2]
    (['<f2', None], ['<f8', [2, 0]])
    """
    try:
        return tagged(element, _leaf)
    except Refused as refused:
        where = "".join(refused.where)
        raise InvalidArgumentError(f"element{where}: {refused}") from None


def decode_map(value: dict[str, Any]) -> Any:
    """The value a chunk's msgpack map stands for (``msgpack``'s ``object_hook``)."""
    if ARRAY in value:
        dtype, shape, data = value[ARRAY]
        array = np.frombuffer(data, dtype)
        return array[0] if shape is None else array.reshape(shape)
    if TUPLE in value:
        return tuple(value[TUPLE])
    return value
