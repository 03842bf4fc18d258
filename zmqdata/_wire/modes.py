"""Processing modes: one ``ShardingPolicy`` for clients, dispatcher and workers.

>>> ShardingPolicy.DYNAMIC.is_static, ShardingPolicy.FILE.is_static
(False, True)
>>> ShardingPolicy.DYNAMIC.display_name, ShardingPolicy.HINT.display_name
('distributed_epoch', 'HINT')
"""

from __future__ import annotations

import enum

EXACTLY_ONCE = True
"""Whether a ``distributed_epoch`` read is exactly once unless told otherwise:
the one default of ``distribute(exactly_once=...)``, of the read's options and
of the job request. (Records and task maps without the field are older than
exactly-once reads and mean False.)"""


class ShardingPolicy(enum.IntEnum):
    """How a job's data is split between workers (tf.data's ``ShardingPolicy``).

    ``OFF``: every worker produces the whole dataset. ``DYNAMIC``: the
    dispatcher hands out splits of the source, each to one worker. ``FILE``,
    ``DATA``, ``FILE_OR_DATA``, ``HINT``: static sharding over
    ``DispatcherConfig.worker_addresses``.
    """

    OFF = 0
    DYNAMIC = 1
    FILE = 2
    DATA = 3
    FILE_OR_DATA = 4
    HINT = 5

    @property
    def is_static(self) -> bool:
        """Whether it shards over the fixed ``worker_addresses`` list."""
        return self not in (ShardingPolicy.OFF, ShardingPolicy.DYNAMIC)

    @property
    def display_name(self) -> str:
        """``parallel_epochs`` / ``distributed_epoch``, else the policy's name."""
        return _DISPLAY.get(self, self.name)


_DISPLAY = {
    ShardingPolicy.OFF: "parallel_epochs",
    ShardingPolicy.DYNAMIC: "distributed_epoch",
}

STATIC = frozenset(policy for policy in ShardingPolicy if policy.is_static)
"""FILE, DATA, FILE_OR_DATA, HINT (as ints they compare equal to the wire values)."""


class ReadMode(enum.StrEnum):
    """How a task's output is read: one worker output (``_worker/outputs.py``) each.

    ``FIRST_COME``: each element goes to the first request. ``ROUNDS``:
    coordinated reads, one element per consumer and round. ``DEALT``:
    multi-rank reads, by split and index (``deal.py``). ``CACHE``: the
    cross-trainer cache, each trainer at its own position.
    """

    FIRST_COME = "first_come"
    ROUNDS = "rounds"
    DEALT = "dealt"
    CACHE = "cache"


def read_mode(
    dealt: bool, cross_trainer_cache: bool, num_consumers: int | None
) -> ReadMode:
    """A job's read mode, from its options (the dispatcher decides it once).

    >>> read_mode(False, False, 2), read_mode(True, False, 2)
    (<ReadMode.ROUNDS: 'rounds'>, <ReadMode.DEALT: 'dealt'>)
    """
    if dealt:
        return ReadMode.DEALT
    if cross_trainer_cache:
        return ReadMode.CACHE
    return ReadMode.FIRST_COME if num_consumers is None else ReadMode.ROUNDS


def is_tracked(
    exactly_once: bool, processing_mode: int, cross_trainer_cache: bool
) -> bool:
    """Whether a read is exactly once: asked for, DYNAMIC, and not cached.

    A cross-trainer cache serves each element to every trainer and drops it
    when its window slides: there is no "once" to track (tf.data's).
    """
    dynamic = processing_mode == ShardingPolicy.DYNAMIC
    return exactly_once and dynamic and not cross_trainer_cache
