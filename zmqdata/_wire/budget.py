"""A budget for what unpacking untrusted msgpack may build, spent as it unpacks.

msgpack checks each container's declared length against the bytes left, but an
empty map is 1 byte on the wire and 64 in Python: a message of empty maps
unpacks to about 70 times its size. :class:`UnpackBudget` is msgpack's list and
map hook: it charges every container as msgpack builds it and stops the
unpacking once the budget is spent. Control messages charge values
(``messages.MAX_VALUES``), frames headers bytes (``limits.HEADER_BYTES_PER_BYTE``).

>>> import msgpack
>>> budget = UnpackBudget(10, count_values, "values")
>>> msgpack.unpackb(msgpack.packb([{}] * 20), **budget.hooks())
Traceback (most recent call last):
...
zmqdata._wire.budget.BudgetSpent: unpacks to more than 10 values
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

COUNT_FROM: Final = 1 << 16
"""Smaller inputs are not charged: 70 times their size is harmless."""


class BudgetSpent(ValueError):
    """Unpacking stopped: the input would build more than its budget allows."""


def count_values(container: Any) -> int:
    """A container's charge in values: itself, and each item or entry."""
    return 1 + len(container)


def container_bytes(container: Any) -> int:
    """A container's charge in bytes: what Python holds for it (not its items)."""
    return sys.getsizeof(container)


class UnpackBudget:
    """A list and map hook for msgpack: charges each container, refuses past ``limit``.

    Args:
        limit: The most ``cost`` the containers may add up to.
        cost: A container's charge (:func:`count_values`, :func:`container_bytes`).
        unit: What ``cost`` counts, for the error.
    """

    __slots__ = ("cost", "left", "limit", "unit")

    def __init__(self, limit: int, cost: Callable[[Any], int], unit: str) -> None:
        self.left, self.limit, self.cost, self.unit = limit, limit, cost, unit

    def take(self, container: Any) -> Any:
        self.left -= self.cost(container)
        if self.left < 0:
            raise BudgetSpent(f"unpacks to more than {self.limit} {self.unit}")
        return container

    def hooks(self) -> dict[str, Any]:
        """``msgpack.unpackb`` keyword arguments that spend this budget."""
        return {"list_hook": self.take, "object_hook": self.take}
