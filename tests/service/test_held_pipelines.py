"""A dataset's pipeline reaches a worker once: later tasks run the copy it holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import zmqdata as zd
from tests.service.cluster import Cluster
from zmqdata import service

DECODED: list[None] = []
"""One entry each time a pipeline holding a ``CountsDecodes`` is decoded."""


def _decoded() -> CountsDecodes:
    DECODED.append(None)
    return CountsDecodes()


class CountsDecodes:
    """A map function that counts how often a pipeline holding it is decoded."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _decoded, ()

    def __call__(self, x: Any) -> Any:
        return x


def test_every_pass_after_the_first_runs_the_held_pipeline(
    cluster: Callable[..., Cluster],
) -> None:
    one = cluster(1)
    constant = np.arange(2**18, dtype=np.int64)  # 2 MiB that travel with the pipeline
    ds = zd.Dataset.from_tensors(constant).repeat(3).map(CountsDecodes())
    ds = ds.apply(service.distribute("parallel_epochs", one.target))
    before = len(DECODED)
    passes = [[int(x.sum()) for x in ds] for _ in range(3)]  # a job, a task each
    assert passes == [[int(constant.sum())] * 3] * 3
    assert len(DECODED) - before == 1  # the dispatcher decodes no function
