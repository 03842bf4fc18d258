"""The bottleneck verdict on real hosts: a slow link reads as network-bound.

A dispatcher, one worker and a trainer, each on a host of its own
(configs/multi-host.yaml with CurveZMQ keys, shared memory off); ``tc``
limits what the worker host sends to 100 Mbit/s. The worker makes 256 KiB of
random bytes per element far faster than the link carries them: the link
runs full (the task's ``link_bytes_per_s``), the trainer waits while the
worker's buffer stays full, and the job's ``bottleneck`` says
"network-bound". The control on the same hosts: a map
that sleeps 50 ms per element is slower than the link, so the buffer stays
empty and the verdict is "input-bound", naming that map.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.hosts import veth
from tests.hosts.deploy import Deployment, docs_commands

SECURE = [(role, argv) for role, argv in docs_commands() if "--config" in argv]
READ_S = 2.0  # about 20 consumer heartbeats (every 0.1 s) after the first element

pytestmark = pytest.mark.exclusive  # verdicts from measured rates and waits


@pytest.fixture(scope="module")
def cluster(shaping: None, module_deployment) -> Deployment:
    """A dispatcher and a worker whose host sends at 100 Mbit/s."""
    d = module_deployment()
    d.env["ZMQDATA_SHARED_MEMORY"] = "0"
    d.env["ZMQDATA_PROFILE_EVERY"] = "1"  # 20 elements a second: time each one
    d.write_config({"heartbeat_interval_ms: 1000": "heartbeat_interval_ms: 100"})
    d.start_cluster(SECURE, workers=1)
    veth.shape(d.worker_hosts[0], "100mbit")
    return d


def read(d: Deployment, job_name: str, slow: bool) -> dict[str, Any]:
    trainer = d.trainer(
        d.network.add_host(),
        module="tests.hosts.bottleneck_trainer",
        job_name=job_name,
        slow=slow,
        read_s=READ_S,
    )
    return d.result(trainer)


def numbers(result: dict[str, Any]) -> str:
    """What a failed verdict is judged by: the job's evidence, the task stats."""
    keys = ("task_id", "buffer_fill", "buffered_bytes", "phases", "link_bytes_per_s")
    tasks = [{k: task.get(k) for k in keys} for task in result["tasks"]]
    job = {k: result["job"].get(k) for k in ("bottleneck", "phases", "consumers")}
    read = {k: result[k] for k in ("elements", "read_s", "bytes_per_s")}
    return json.dumps({**job, "tasks": tasks, **read})


@pytest.mark.timeout(60)
def test_a_slow_link_reads_as_network_bound(cluster):
    result = read(cluster, "over-the-link", slow=False)
    verdict = result["job"]["bottleneck"]
    link = max(task["link_bytes_per_s"] or 0 for task in result["tasks"])
    assert 8e6 < link < 14e6, numbers(result)  # 100 Mbit/s, full: 12.5 MB/s
    assert verdict["kind"] == "network-bound", numbers(result)
    assert verdict["line"].startswith("network-bound: "), verdict["line"]
    assert "faster than they arrive" in verdict["line"]


@pytest.mark.timeout(60)
def test_a_slow_map_reads_as_input_bound_naming_it(cluster):
    result = read(cluster, "slow-map", slow=True)
    verdict = result["job"]["bottleneck"]
    assert verdict["kind"] == "input-bound", numbers(result)
    assert verdict["op"] == "map(slow_random_bytes)", numbers(result)
    assert verdict["line"].startswith("input-bound: map(slow_random_bytes) uses")
