"""Element specs (nested ``TensorSpec``) to bytes and back, for the dispatcher.

A spec travels as one frames-codec element whose leaves are text
(``"<f4|?,3"``: dtype, then the shape with ``?`` for unknown dimensions).

>>> import numpy as np
>>> from zmqdata._dataset.structure import TensorSpec
>>> spec = {"x": TensorSpec((None, 3), np.dtype("float32")), "s": TensorSpec((), str)}
>>> decode_spec(encode_spec(spec)) == spec
True
>>> decode_spec(encode_spec(None)) is None
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zmqdata._dataset import structure
from zmqdata._dataset.structure import TensorSpec
from zmqdata._wire import frames
from zmqdata.errors import InvalidArgumentError

_PYTHON_TYPES = {t.__name__: t for t in (*structure.PYTHON_SCALARS, type(None))}


def leaf_text(spec: TensorSpec) -> str:
    """One leaf's text: ``"<f4|?,3"`` (dtype ``|`` shape, ``?`` unknown)."""
    dtype = (
        f"py:{spec.dtype.__name__}" if isinstance(spec.dtype, type) else spec.dtype.str
    )
    shape = ",".join("?" if d is None else str(d) for d in spec.shape)
    return f"{dtype}|{shape}"


def leaf_spec(text: Any) -> TensorSpec:
    """The leaf spec ``leaf_text`` gave ``text`` for; ``InvalidArgumentError`` if bad."""
    if not isinstance(text, str) or "|" not in text:
        raise InvalidArgumentError(f"malformed element spec leaf {text!r}")
    # The last "|": numpy writes "|" as the byte order of e.g. "|b1" and "|u1".
    dtype_text, _, shape_text = text.rpartition("|")
    try:
        if dtype_text.startswith("py:"):
            dtype: Any = _PYTHON_TYPES[dtype_text[3:]]
        else:
            dtype = np.dtype(dtype_text)
        shape = tuple(
            None if d == "?" else int(d) for d in shape_text.split(",") if shape_text
        )
    except Exception:  # np.dtype raises SyntaxError too, e.g. for "i4,("
        raise InvalidArgumentError(f"malformed element spec leaf {text!r}") from None
    return TensorSpec(shape, dtype)


def encode_spec(spec: Any) -> bytes:
    """Bytes for a nested spec; ``b""`` for an unknown (None) spec."""
    if spec is None:
        return b""
    parts = frames.encode([structure.map_leaves(leaf_text, spec)])
    if len(parts) != 1:  # strings travel inline, so only a huge spec gets here
        raise InvalidArgumentError(f"element spec too large to encode: {spec!r:.200}")
    return bytes(memoryview(parts[0]).cast("B"))


def decode_spec(data: bytes) -> Any:
    """The nested spec from ``encode_spec`` bytes (None for ``b""``)."""
    if not data:
        return None
    limits = frames.Limits(max_bytes=len(data), max_decompressed=0)
    elements, _ = frames.decode([data], limits)
    if len(elements) != 1:
        raise InvalidArgumentError(f"element spec holds {len(elements)} values, not 1")
    return structure.map_leaves(leaf_spec, elements[0])
