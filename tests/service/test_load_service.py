"""``Dataset.load`` under the service: ``distributed_epoch`` reads every element once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import zmqdata as zd
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata._dataset import snapshot, specs, structure

pytestmark = pytest.mark.timeout(60)


def make_save(path: str, chunks: int, per_chunk: int) -> set[int]:
    """A save of ``(np.int64(i), f"e{i}")`` elements written by hand; their ``i``s."""
    snapshot.begin(path, "s1")
    infos = []
    for c in range(chunks):
        with snapshot.ChunkWriter(path, f"c{c}", "zstd") as writer:
            for i in range(c * per_chunk, (c + 1) * per_chunk):
                writer.write((np.int64(i), f"e{i}"))
        infos.append(writer.info)
    snapshot.write_manifest(
        path,
        element_spec=specs.encode_spec(structure.spec_of((np.int64(0), "e"))),
        chunks=infos,
        compression="zstd",
        cardinality=chunks * per_chunk,
        dataset_id="d",
    )
    return set(range(chunks * per_chunk))


def keys(elements: list[tuple[np.int64, str]]) -> list[int]:
    for i, text in elements:
        assert text == f"e{i}"
    return [int(i) for i, _ in elements]


def test_distributed_epoch_reads_every_element_once(
    tmp_path: Path, cluster: Callable[..., Cluster]
):
    expected = make_save(str(tmp_path), chunks=3, per_chunk=700)
    target = cluster(num_workers=2).target
    ds = zd.Dataset.load(str(tmp_path)).apply(
        service.distribute("distributed_epoch", target)
    )
    got = keys(list(ds))
    assert sorted(got) == sorted(expected)


def test_a_worker_lost_mid_chunk_repeats_nothing_and_a_save_resumes_mid_chunk(
    tmp_path: Path, cluster: Callable[..., Cluster]
):
    expected = make_save(str(tmp_path), chunks=2, per_chunk=1500)
    running = cluster(num_workers=2)
    ds = zd.Dataset.load(str(tmp_path)).apply(
        service.distribute(
            "distributed_epoch", running.target, max_outstanding_requests=8
        )
    )
    iterator = iter(ds)
    got = keys([next(iterator) for _ in range(300)])
    running.stop_worker(0)  # mid-chunk: its elements in flight are made again
    got += keys(list(iterator))
    assert sorted(got) == sorted(expected)  # every element, none twice

    iterator = iter(ds)
    first = keys([next(iterator) for _ in range(700)])
    state = iterator.save()
    iterator.close()
    resumed = iter(ds)
    resumed.restore(state)
    assert sorted(first + keys(list(resumed))) == sorted(expected)
