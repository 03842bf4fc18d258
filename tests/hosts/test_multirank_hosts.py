"""Multi-rank reads across hosts: ranks on two hosts, workers on two others.

The dispatcher (fault tolerant, CurveZMQ keys: configs/multi-host.yaml as
shipped, with the user's edits) runs on a host of its own, each worker on
its own host, and two rank hosts run two ranks each (``R = 4``,
``tests/hosts/rank.py``), all reading over the bridge's addresses. With a
seed, which elements each rank gets, and in which order, depends only on the
dataset, the seed and ``R``: every rank's stream must equal the one an
in-process cluster deals to the same rank.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.cli.procs import Proc, zmqdata
from tests.hosts.deploy import Deployment, docs_commands
from tests.hosts.netns import Host
from tests.hosts.rank import dataset, pipeline
from tests.service.cluster import Cluster
from zmqdata import service

ROOT = Path(__file__).resolve().parents[2]
N = 4_000  # 2,667 elements pass the filter: 666 per rank, 3 left out
RANKS = 4
SEED = 11
SECURE = [(role, argv) for role, argv in docs_commands() if "--config" in argv]
RESULT_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(module_deployment) -> Deployment:
    """configs/multi-host.yaml as shipped: a dispatcher and two workers."""
    d = module_deployment()
    d.write_config()
    d.start_cluster(SECURE, workers=2)
    return d


@pytest.fixture(scope="module")
def rank_hosts(cluster: Deployment) -> list[Host]:
    return [cluster.network.add_host() for _ in range(2)]


@pytest.fixture(scope="module")
def reference() -> tuple[list[list[int]], list[int]]:
    """From an in-process cluster (loopback, two workers): each of ``RANKS``
    ranks' stream, and the whole global order (one consumer: none left out)."""
    local = Cluster(num_workers=2)
    try:
        streams = read_in_process(local.target, "reference", RANKS)
        [order] = read_in_process(local.target, "reference-1", 1)
    finally:
        local.stop()
    assert interleave(streams) == order[: RANKS * len(streams[0])]
    return streams, order


def read_in_process(target: str, job_name: str, ranks: int) -> list[list[int]]:
    got: list[list[int]] = [[] for _ in range(ranks)]
    errors: list[BaseException] = []

    def rank(index: int) -> None:
        spec = {
            "n": N,
            "job_name": job_name,
            "num_consumers": ranks,
            "consumer_index": index,
            "seed": SEED,
        }
        try:
            with iter(dataset(spec, target)) as elements:
                got[index] = [int(e) for e in elements]
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RESULT_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "the in-process read did not end"
    if errors:
        raise errors[0]
    return got


def interleave(streams: list[list[int]]) -> list[int]:
    """The global order: element ``i`` of rank ``r`` is global element ``i*R + r``."""
    assert len({len(s) for s in streams}) == 1, [len(s) for s in streams]
    return [value for round_ in zip(*streams, strict=True) for value in round_]


@pytest.fixture
def ranks(cluster: Deployment) -> Iterator[Any]:
    """``ranks(hosts, **spec)`` -> each rank's result; every rank process is
    stopped at teardown, before the deployment."""
    with ExitStack() as stack:

        def run(hosts: list[Host], **spec: Any) -> list[dict[str, Any]]:
            assert cluster.keys is not None
            env = {"PYTHONPATH": str(ROOT), **cluster.keys.trainer_env()}
            procs: list[Proc] = [
                stack.enter_context(
                    zmqdata(
                        json.dumps(
                            {
                                "dispatcher": f"{cluster.dispatcher_host.address}:5050",
                                "n": N,
                                "seed": SEED,
                                **spec,
                                "num_consumers": len(hosts),
                                "consumer_index": r,
                            }
                        ),
                        prefix=host.prefix(**env),
                        module="tests.hosts.rank",
                    )
                )
                for r, host in enumerate(hosts)
            ]
            return [Deployment.result(p, timeout=RESULT_TIMEOUT_S) for p in procs]

        yield run


def test_ranks_on_two_hosts_get_equal_shares_each_the_in_process_stream(
    cluster, ranks, rank_hosts, reference
):
    whole = Counter(int(e) for e in pipeline(N))
    hosts = [rank_hosts[r // 2] for r in range(RANKS)]  # two ranks per host
    results = ranks(hosts, job_name="ranks")
    for result in results:  # read over the bridge, from the advertised addresses
        assert result["workers"] == cluster.advertised()
    streams = [result["elements"] for result in results]
    assert [len(s) for s in streams] == [sum(whole.values()) // RANKS] * RANKS
    got = Counter(e for s in streams for e in s)
    assert max(got.values()) == 1  # exactly once
    assert not got - whole
    assert sum((whole - got).values()) < RANKS  # the last incomplete round
    assert streams == reference[0]  # per rank, element by element


def test_positions_saved_on_two_hosts_merge_and_resume_on_three_ranks(
    ranks, rank_hosts, reference
):
    """Four ranks save at one step and stop; three ranks on the same two hosts
    (two and one) resume the merged position with a fresh job: together the
    order goes on as the uninterrupted read's would."""
    order = reference[1]
    steps = 100
    hosts = [rank_hosts[r // 2] for r in range(RANKS)]
    first = ranks(hosts, job_name="saved", save_after=steps)
    assert [len(r["elements"]) for r in first] == [steps] * RANKS
    prefix = interleave([r["elements"] for r in first])
    assert prefix == order[: len(prefix)]
    merged = service.merge_positions([base64.b64decode(r["state"]) for r in first])
    restore = base64.b64encode(merged).decode()
    second = ranks(
        [rank_hosts[0], rank_hosts[0], rank_hosts[1]],
        job_name="resumed",
        restore=restore,
    )
    rest = interleave([r["elements"] for r in second])  # equal counts
    got = prefix + rest
    assert got == order[: len(got)]  # exactly once, in order
    assert len(order) - len(got) < 3  # R' - 1 at most left out
