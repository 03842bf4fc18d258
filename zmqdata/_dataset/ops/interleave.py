"""``interleave`` and ``flat_map``: cycle over datasets made from input elements.

The visiting order is tf.data's: ``block_length`` elements from each of
``cycle_length`` open datasets in turn; an exhausted slot is refilled from the
next input element when the cycle comes back to it. With ``num_parallel_calls``
and ``deterministic=False`` the cycle skips a slot that has no element ready
(as tf.data's sloppy interleave), so a slow dataset does not hold up the others.

Lineage: the datasets the function makes never read the split source; an input
element stands for everything its dataset yielded, so its lineage goes with the
first element returned after its dataset (and those of the input elements read
before it: ``Reorder``) are exhausted. Each element also carries its mark
(``_dataset/marks.py``): its dataset's outputs a consumer acknowledged before
are skipped when a lost task's input element is read again.
"""

from __future__ import annotations

import threading
from typing import Any

from zmqdata._dataset.constants import UNKNOWN_CARDINALITY
from zmqdata._dataset.iterator import DatasetIterator, IterContext, Reorder
from zmqdata._dataset.marks import Marks, Parent
from zmqdata._dataset.node import Node, Op, call_unpacked, make_iterator
from zmqdata._dataset.ops._threads import (
    PENDING,
    BackgroundIterator,
    resolve_parallelism,
)
from zmqdata._dataset.profile import label
from zmqdata._wire.lineage import EMPTY, Lineage, join

_SLOT_BUFFER = 8
_WAIT_S = 0.05
"""Longest wait for a slot's element before looking at every slot again."""
_CHANGED = object()


class Interleave(Op):
    name = "interleave"
    expands = True

    def cardinality(self, node: Node, inputs: list[int]) -> int:
        return 0 if inputs[0] == 0 else UNKNOWN_CARDINALITY

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return None

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        parallel = node.args["num_parallel_calls"] is not None
        sloppy = parallel and node.args["deterministic"] is False
        kind = _FirstReadyInterleaveIterator if sloppy else _InterleaveIterator
        return kind(
            make_iterator(node.inputs[0], ctx),
            node.args["fn"],
            label(node),
            resolve_parallelism(node.args["cycle_length"]),
            node.args["block_length"],
            parallel,
            ctx.lineage,
            ctx.marks,
        )


class _Slot:
    def __init__(
        self,
        argument: Any,
        iterator: DatasetIterator,
        number: int | None,
        parent: Parent | None = None,
    ) -> None:
        self.argument, self.iterator = argument, iterator
        self.number = number  # in ``_InterleaveIterator._order`` (with lineage)
        self.parent = parent  # the input's mark, which outputs extend (with marks)
        self.outputs = 0


class _InterleaveIterator(DatasetIterator):
    def __init__(
        self,
        source: DatasetIterator,
        fn: Any,
        op: str,
        cycle_length: int,
        block_length: int,
        parallel: bool,
        lineage: bool,
        marks: Marks | None = None,
    ) -> None:
        self._input, self._fn, self._op = source, fn, op
        self._order = Reorder() if lineage else None
        self._marks = marks
        self._released: Lineage = EMPTY  # of input elements whose dataset ended
        self._mark: Lineage = EMPTY  # of the element about to be returned
        self._block_length, self._parallel = block_length, parallel
        self._slots: list[_Slot | None] = [None] * cycle_length
        self._cycle_index = self._block_index = 0
        self._end_of_input = False
        self._ready: threading.Event | None = None

    def _open(self, argument: Any) -> DatasetIterator:
        from zmqdata._dataset.dataset import Dataset

        dataset = call_unpacked(self._fn, argument, self._op)
        if not isinstance(dataset, Dataset):
            raise TypeError(
                f"interleave/flat_map function must return a Dataset, got "
                f"{type(dataset).__name__}"
            )
        iterator = make_iterator(dataset._node, IterContext())
        if self._parallel:
            return BackgroundIterator(iterator, _SLOT_BUFFER, "interleave", self._ready)
        return iterator

    def _fill_slot(self, argument: Any) -> _Slot:
        """Opens the dataset of ``argument`` (just read) in the current slot."""
        lineage = self._input.lineage
        number = None if self._order is None else self._order.enter(lineage)
        parent = None if self._marks is None else self._marks.parent(lineage)
        slot = _Slot(argument, self._open(argument), number, parent)
        self._slots[self._cycle_index] = slot
        return slot

    def _end_slot(self, slot: _Slot) -> None:
        """Closes the current slot, whose dataset is exhausted."""
        slot.iterator.close()
        self._slots[self._cycle_index] = None
        if self._order is not None and slot.number is not None:
            self._released = join(self._released, self._order.leave(slot.number))
        self._advance()

    def _counted(self, slot: _Slot) -> bool:
        """Counts an output of ``slot``: False if a consumer had it (a lost task's)."""
        slot.outputs += 1
        if slot.parent is None:
            return True
        assert self._marks is not None
        if self._marks.delivered(slot.parent, slot.outputs - 1):
            return False
        self._mark = self._marks.output(slot.parent, slot.outputs - 1)
        return True

    def _returned(self) -> None:
        """Gives the element about to be returned the lineage released so far."""
        if self._order is not None:
            self.lineage = join(self._released, self._mark)
            self._released = self._mark = EMPTY

    def _advance(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % len(self._slots)

    def __next__(self) -> Any:
        while not self._end_of_input or any(self._slots):
            slot = self._slots[self._cycle_index]
            if slot is not None:
                try:
                    element = next(slot.iterator)
                except StopIteration:
                    self._end_slot(slot)
                    continue
                if not self._counted(slot):
                    continue
                self._block_index += 1
                if self._block_index == self._block_length:
                    self._advance()
                self._returned()
                return element
            if self._end_of_input:
                self._advance()
                continue
            try:
                argument = next(self._input)
            except StopIteration:
                self._end_of_input = True
                continue
            self._fill_slot(argument)
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return {
            "input": self._input.get_state(),
            "cycle_index": self._cycle_index,
            "block_index": self._block_index,
            "end_of_input": self._end_of_input,
            "slots": [
                None
                if s is None
                else {"argument": s.argument, "state": s.iterator.get_state()}
                for s in self._slots
            ],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state["input"])
        self._cycle_index = state["cycle_index"]
        self._block_index = state["block_index"]
        self._end_of_input = state["end_of_input"]
        self._released = EMPTY
        self._close_slots()
        if self._order is not None:
            self._order = Reorder()
        for index, saved in enumerate(state["slots"]):
            if saved is not None:
                number = None if self._order is None else self._order.enter(EMPTY)
                slot = _Slot(saved["argument"], self._open(saved["argument"]), number)
                slot.iterator.set_state(saved["state"])
                self._slots[index] = slot

    def _close_slots(self) -> None:
        for index, slot in enumerate(self._slots):
            if slot is not None:
                slot.iterator.close()
                self._slots[index] = None

    def close(self) -> None:
        self._close_slots()
        self._input.close()


class _FirstReadyInterleaveIterator(_InterleaveIterator):
    """Parallel and not deterministic: a slot with nothing ready yields its turn."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._ready = threading.Event()  # set by every slot's producer

    def __next__(self) -> Any:
        assert self._ready is not None
        while not self._end_of_input or any(self._slots):
            self._ready.clear()
            changed = False  # a slot opened or closed: look again before waiting
            for _ in range(len(self._slots)):
                element = self._try_slot()
                if element is _CHANGED:
                    changed = True
                elif element is not PENDING:
                    self._returned()
                    return element
            if not changed:
                self._ready.wait(_WAIT_S)
        raise StopIteration

    def _try_slot(self) -> Any:
        """The current slot's ready element, else ``PENDING`` or ``_CHANGED``.

        Moves to the next slot unless it returns an element of an unfinished block.
        """
        slot = self._slots[self._cycle_index]
        if slot is None and not self._end_of_input:
            try:
                argument = next(self._input)
            except StopIteration:
                self._end_of_input = True
                return _CHANGED
            slot = self._fill_slot(argument)
        if slot is None:
            self._advance()
            return PENDING
        assert isinstance(slot.iterator, BackgroundIterator)
        try:
            element = slot.iterator.next_nowait()
        except StopIteration:
            self._end_slot(slot)
            return _CHANGED
        if element is PENDING:
            self._advance()
            return PENDING
        if not self._counted(slot):
            return _CHANGED
        self._block_index += 1
        if self._block_index == self._block_length:
            self._advance()
        return element
