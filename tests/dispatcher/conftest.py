"""Every dispatcher state a test makes is valid when the test ends
(``ClusterRecords.validate``, as dask validates its scheduler's state)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from zmqdata._dispatcher.state import DispatcherState


@pytest.fixture(autouse=True)
def valid_states(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    made: list[DispatcherState] = []
    init = DispatcherState.__init__

    def noted(self: DispatcherState, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(DispatcherState, "__init__", noted)
    yield
    for state in made:
        state.records.validate()
