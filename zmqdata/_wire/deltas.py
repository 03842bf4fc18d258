"""Worker heartbeats as deltas: what changed since the heartbeat last answered.

A worker's ``stats`` (counters, one map per task, one per op) are mostly the
same from one heartbeat to the next. ``diff(old, new)`` keeps what differs:
the keys of a map whose values changed (maps within maps as deltas of their
own, lists of maps of the same length item by item as ``{"@": [delta, ...]}``),
and the keys removed under ``"~"``. ``merge(old, delta)`` makes ``new`` again.

The worker side (``HeartbeatDelta``) sends a delta against the last heartbeat
the dispatcher answered, naming it (``WorkerHeartbeat.base``); the dispatcher
applies it only to the stats of that very heartbeat and otherwise asks for
everything again (``WorkerHeartbeatReply.resend``), so a lost reply or a
restarted dispatcher costs one full heartbeat, never wrong stats.

>>> old = {"elements": 10, "tasks": [{"task_id": 1, "elements": 10, "ops": []}]}
>>> new = {"elements": 42, "tasks": [{"task_id": 1, "elements": 42, "ops": []}]}
>>> diff(old, new)
{'elements': 42, 'tasks': {'@': [{'elements': 42}]}}
>>> merge(old, diff(old, new))  # new again, and 0 values more
({'elements': 42, 'tasks': [{'task_id': 1, 'elements': 42, 'ops': []}]}, 0)
>>> diff({"a": 1, "b": 2}, {"a": 1})
{'~': ['b']}
"""

from __future__ import annotations

from typing import Any

import msgpack

from zmqdata.errors import InvalidArgumentError

REMOVED = "~"
"""A delta's key listing the keys removed from its map."""
ITEMS = "@"
"""A delta's key holding a list's item deltas (a list of maps, same length)."""
MAX_DEPTH = 8
"""How deep a delta may nest (stats nest 5 deep: tasks, a task, ops, an op)."""
MAX_VALUES = 1 << 16
"""The most values (map entries and list items, at every depth) a worker's
merged stats may hold: a delta adding more is refused."""


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What ``merge(old, ·)`` needs to make ``new``."""
    delta: dict[str, Any] = {}
    for key, value in new.items():
        if key not in old:
            delta[key] = value
        elif old[key] != value:
            delta[key] = _diff_value(old[key], value)
    removed = [key for key in old if key not in new]
    if removed:
        delta[REMOVED] = removed
    return delta


def _diff_value(before: Any, value: Any) -> Any:
    """What a delta holds for a value changed from ``before`` to ``value``."""
    if isinstance(before, dict) and isinstance(value, dict):
        return diff(before, value)
    if _same_shape(before, value):
        return {ITEMS: [diff(a, b) for a, b in zip(before, value, strict=True)]}
    return value


def _same_shape(before: Any, value: Any) -> bool:
    """Two lists of maps of the same length (diffed item by item)."""
    return (
        isinstance(before, list)
        and isinstance(value, list)
        and len(before) == len(value)
        and all(isinstance(item, dict) for item in before)
        and all(isinstance(item, dict) for item in value)
    )


def merge(old: dict[str, Any], delta: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``old`` with ``delta`` applied (``old`` unchanged), and how much it grew.

    Growth is in values (``count``); negative if it shrank.

    Raises:
        InvalidArgumentError: ``delta`` is malformed or nests too deep.
    """
    return _merge(old, delta, 0)


def _merge(old: dict[str, Any], delta: Any, depth: int) -> tuple[dict[str, Any], int]:
    if not isinstance(delta, dict) or depth > MAX_DEPTH:
        raise InvalidArgumentError(
            f"worker_heartbeat.stats: a malformed delta at depth {depth}"
        )
    out = dict(old)
    grown = _remove(out, delta.get(REMOVED, []))
    for key, value in delta.items():
        if key != REMOVED:
            grown += _merge_key(out, key, value, depth)
    return out, grown


def _remove(out: dict[str, Any], removed: Any) -> int:
    """Drops the ``removed`` keys (a delta's ``~``) from ``out``; how much it grew."""
    if not isinstance(removed, list):
        raise InvalidArgumentError("worker_heartbeat.stats: '~' must list keys")
    grown = 0
    for key in removed:
        if isinstance(key, str) and key in out:
            grown -= 1 + _size(out.pop(key))
    return grown


def _merge_key(out: dict[str, Any], key: str, value: Any, depth: int) -> int:
    """Applies a delta's ``value`` for ``key`` to ``out``; how much it grew."""
    before = out.get(key)
    if isinstance(before, dict) and isinstance(value, dict):
        out[key], more = _merge(before, value, depth + 1)
    elif isinstance(before, list) and _is_items(value, len(before)):
        out[key], more = _merge_items(before, value[ITEMS], depth + 1)
    else:
        more = _size(value) - (_size(before) if key in out else -1)
        out[key] = value
    return more


def _is_items(value: Any, length: int) -> bool:
    return (
        isinstance(value, dict)
        and len(value) == 1
        and isinstance(value.get(ITEMS), list)
        and len(value[ITEMS]) == length
    )


def _merge_items(
    before: list[Any], deltas: list[Any], depth: int
) -> tuple[list[Any], int]:
    items, grown = [], 0
    for item, delta in zip(before, deltas, strict=True):
        if not isinstance(item, dict):
            raise InvalidArgumentError(
                "worker_heartbeat.stats: an item delta of a value that is no map"
            )
        merged, more = _merge(item, delta, depth)
        items.append(merged)
        grown += more
    return items, grown


def _size(value: Any) -> int:
    return count(value) if isinstance(value, dict | list) else 0


def count(value: Any) -> int:
    """The map entries and list items in ``value``, at every depth.

    >>> count({"a": [1, 2], "b": {"c": 3}})
    5
    """
    total, stack = 0, [value]
    while stack:  # no recursion: a value may nest as deep as msgpack allows
        item = stack.pop()
        if isinstance(item, dict):
            total += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            total += len(item)
            stack.extend(item)
    return total


class HeartbeatDelta:
    """A worker's side: each heartbeat's stats and pipelines as a delta.

    ``outgoing(stats, pipelines)`` returns ``(base, stats, pipelines)`` to
    send: ``base`` 0 with everything, or the request id of the heartbeat the
    dispatcher last answered with a delta against it (``pipelines`` empty
    when unchanged; a change to none sends everything). A delta over half the
    stats' size goes as everything: the dispatcher takes a whole map faster
    than it merges most of one. ``sent(request_id)`` then
    ``answered(request_id, resend)`` follow the replies.

    >>> beats = HeartbeatDelta()
    >>> stats = {"elements": 1, "tasks": [{"task_id": 4, "bytes": 8}]}
    >>> beats.outgoing(stats, ["f"])
    (0, {'elements': 1, 'tasks': [{'task_id': 4, 'bytes': 8}]}, ['f'])
    >>> beats.sent(7); beats.answered(7, resend=False)
    >>> beats.outgoing({**stats, "elements": 2}, ["f"])
    (7, {'elements': 2}, [])
    >>> beats.answered(9, resend=True)  # the dispatcher lost the base: all again
    >>> beats.outgoing(stats, ["f"])[0]
    0
    """

    __slots__ = ("_answered", "_next", "_pending")

    def __init__(self) -> None:
        self._answered: tuple[int, dict[str, Any], list[str]] | None = None
        """The last heartbeat answered: (request id, its stats, its pipelines)."""
        self._pending: dict[int, tuple[dict[str, Any], list[str]]] = {}
        self._next: tuple[dict[str, Any], list[str]] | None = None

    def outgoing(
        self, stats: dict[str, Any], pipelines: list[str]
    ) -> tuple[int, dict[str, Any], list[str]]:
        """What the next heartbeat carries; ``sent`` must follow with its id."""
        self._next = (stats, pipelines)
        base = self._answered
        if base is None or (not pipelines and base[2]):
            return 0, stats, pipelines
        request_id, old_stats, old_pipelines = base
        delta = diff(old_stats, stats)
        if 2 * len(msgpack.packb(delta)) > len(msgpack.packb(stats)):
            return 0, stats, pipelines  # merging it costs more than taking all
        return request_id, delta, [] if pipelines == old_pipelines else pipelines

    def sent(self, request_id: int) -> None:
        """The heartbeat made by the last ``outgoing`` left as ``request_id``."""
        if self._next is not None:
            if len(self._pending) >= 8:  # replies lost: forget the oldest
                del self._pending[next(iter(self._pending))]
            self._pending[request_id] = self._next
            self._next = None

    def answered(self, request_id: int, resend: bool) -> None:
        """The dispatcher answered heartbeat ``request_id``.

        ``resend``: it holds no base for deltas: everything goes next.
        """
        sent = self._pending.pop(request_id, None)
        if resend:
            self._answered = None
        elif sent is not None:
            self._answered = (request_id, *sent)
        for older in [rid for rid in self._pending if rid < request_id]:
            del self._pending[older]

    def reset(self) -> None:
        """A new registration: the next heartbeat carries everything."""
        self._answered = None
        self._pending.clear()
