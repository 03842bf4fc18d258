"""An iterator's position as bytes: what ``DatasetIterator.save`` returns.

A position (``get_state``) is plain values and numpy arrays; it travels as
the frames codec's frames (arrays as raw bytes, no pickle) in one msgpack
list behind a format tag, so ``restore`` can tell bytes that are not a saved
position from one that is.

>>> import numpy as np
>>> decode(encode({"index": 3, "buffer": np.arange(2)}))
{'index': 3, 'buffer': array([0, 1])}
"""

from __future__ import annotations

from typing import Any

import msgpack

from zmqdata._wire import frames
from zmqdata.errors import InvalidArgumentError

FORMAT = "zmqdata.iterator_state/1"


def encode(state: Any) -> bytes:
    """``state`` (a ``get_state`` result) as bytes."""
    parts = [bytes(part) for part in frames.encode([state])]
    data: bytes = msgpack.packb([FORMAT, parts])
    return data


def decode(data: bytes) -> Any:
    """The state ``encode`` made; ``InvalidArgumentError`` for anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"a saved iterator state is bytes, got {type(data).__name__}")
    try:
        tag, parts = msgpack.unpackb(data)
        if tag != FORMAT:
            raise ValueError(f"format {tag!r}")
        [state], _ = frames.decode(parts)
    except Exception as error:
        raise InvalidArgumentError(
            f"not a saved iterator state ({FORMAT}): {error}"
        ) from None
    return state
