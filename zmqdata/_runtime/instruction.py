"""``Instruction``: what a pure core returns for its shell to carry out.

The dispatcher's ``DispatcherState``, the worker's ``WorkerControl`` and the
client's ``ReadCore`` share one contract (docs/architecture.md, "One
contract, three roles"): ``handle`` an input and ``tick(now)``, each returning
a list of instructions, plain values that the shell (the role's poll loop,
owner of its sockets) carries out in order. Each core's instructions subclass
this marker base: frozen dataclasses (the dispatcher's ``Outgoing`` is a
``(peer, message)`` pair).

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True, slots=True)
... class Beep(Instruction):
...     loud: bool
>>> isinstance(Beep(True), Instruction), Beep(True) == Beep(True)
(True, True)
"""

from __future__ import annotations


class Instruction:
    """The base of every instruction a core returns (no field, no slot of its own)."""

    __slots__ = ()
