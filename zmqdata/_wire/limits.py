"""What a decoded frames message may cost, checked before anything is allocated.

Decoding reads untrusted input: the header's claims (buffer sizes, element
count, SPEC nodes) are checked here against what was received and against
:class:`Limits`, so neither a zstd bomb nor a forged count can turn a small
message into a large allocation.

>>> check_objects(10, 10, received=1)
>>> count_nodes(["T", [["v", "int", [1]], ["v", "str", ["a"]]]], 0)
3
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from zmqdata._wire.budget import COUNT_FROM, UnpackBudget, container_bytes
from zmqdata._wire.schema import CONTAINERS, MAX_DEPTH, SHARED
from zmqdata.errors import InvalidArgumentError

OBJECTS_PER_BYTE: Final = 4
"""Decoding makes at most this many Python objects (elements, containers and
leaf values) per byte received, ..."""
OBJECTS_FLOOR: Final = 1 << 16
"""... plus this many, whatever the size of the message."""
HEADER_BYTES_PER_BYTE: Final = 24
"""A header's lists and maps may hold at most this many bytes of Python memory
per byte of it (an encoder's header holds at most 18; one of empty maps, 72),
..."""
HEADER_BYTES_FLOOR: Final = 16 << 20
"""... plus this many, whatever its size."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one decoded message may hold, checked before anything is allocated.

    Attributes:
        max_bytes: The most bytes the header and the buffers may hold once
            decompressed.
        max_decompressed: The most bytes the compressed buffers of the message
            may decompress to, in all.
    """

    max_bytes: int = 1 << 30
    max_decompressed: int = 256 << 20

    def spend(self, held: int, expanded: int) -> Limits:
        """What is left for further messages once one held ``held`` bytes.

        Args:
            held: The bytes the decoded message holds.
            expanded: The bytes its buffers grew by when decompressed.
        """
        return Limits(
            max_bytes=max(0, self.max_bytes - held),
            max_decompressed=max(0, self.max_decompressed - max(0, expanded)),
        )


DEFAULT_LIMITS: Final = Limits()


def header_budget(size: int) -> dict[str, Any]:
    """``msgpack.unpackb`` hooks bounding what a header of ``size`` bytes builds."""
    if size < COUNT_FROM:
        return {}
    limit = HEADER_BYTES_PER_BYTE * size + HEADER_BYTES_FLOOR
    return UnpackBudget(limit, container_bytes, "bytes of lists and maps").hooks()


def check_buffer_table(table: list[Any], frames: int, room: int, limits: Limits) -> int:
    """Checks the buffer table's entries, and their sizes against ``limits``.

    Nothing is allocated: the sizes are the header's claims (checked against
    the frames when they are decoded).

    Args:
        table: The header's ``[[codec, nbytes], ...]``.
        frames: The count of buffer frames received.
        room: The bytes ``limits.max_bytes`` leaves for the buffers.
        limits: The caps.

    Returns:
        The bytes the buffers will hold once decompressed (shared-memory
        buffers included: the reader holds them too, though none are
        decompressed).
    """
    if len(table) != frames:
        raise InvalidArgumentError(
            f"header lists {len(table)} buffers but {frames} frames follow it"
        )
    total = expanded = 0
    for index, entry in enumerate(table):
        codec, nbytes = _table_entry(index, entry)
        total += nbytes
        if codec is not None and codec != SHARED:
            expanded += nbytes
    if expanded > limits.max_decompressed:
        raise InvalidArgumentError(
            f"compressed buffers declare {expanded} bytes once decompressed,"
            f" over the cap of {limits.max_decompressed}"
        )
    if total > room:
        raise InvalidArgumentError(
            f"buffers declare {total} bytes, over the cap of {limits.max_bytes}"
            " with the header"
        )
    return total


def _table_entry(index: int, entry: object) -> tuple[str | None, int]:
    """One ``[codec, nbytes]`` entry of the buffer table, type-checked."""
    if type(entry) is not list or len(entry) != 2:
        raise InvalidArgumentError(f"buffer table entry {index} is malformed")
    codec, nbytes = entry
    if type(nbytes) is not int or nbytes < 0:
        raise InvalidArgumentError(f"buffer {index} has a bad size {nbytes!r}")
    if codec is not None and type(codec) is not str:
        raise InvalidArgumentError(f"buffer {index} has a bad codec {codec!r}")
    return codec, nbytes


def count_nodes(spec: Any, depth: int) -> int:
    """The SPEC's node count: the objects one element of it costs.

    Malformed nodes count as leaves, for the decoder to reject.
    """
    if type(spec) is not list or len(spec) < 2 or spec[0] not in CONTAINERS:
        return 1
    if depth >= MAX_DEPTH:
        raise InvalidArgumentError(f"SPEC nested deeper than {MAX_DEPTH} levels")
    children = spec[-1]
    if type(children) is not list:
        return 1
    return 1 + sum(count_nodes(child, depth + 1) for child in children)


def check_objects(n: int, objects: int, received: int) -> None:
    """Refuses a message that would build more objects than its bytes allow."""
    allowed = OBJECTS_PER_BYTE * received + OBJECTS_FLOOR
    if objects > allowed:
        raise InvalidArgumentError(
            f"{n} elements of {objects} objects in all from {received} bytes"
            f" received: over the limit of {allowed} (a forged element count?)"
        )
