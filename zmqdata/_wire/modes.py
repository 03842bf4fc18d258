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
