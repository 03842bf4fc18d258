"""Dispatcher, workers and trainers on separate hosts, run as docs/deployment.md says.

Each host is a network namespace with one address on a private bridge. The
daemons run the documented commands verbatim (configs/multi-host.yaml with
only the user's edits, CurveZMQ keys from ``zmqdata keygen``); workers bind
``0.0.0.0`` and must advertise the address trainers on other hosts can dial.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.hosts.deploy import (
    CONFIG_PATH,
    Deployment,
    container_commands,
    docs_commands,
)

N = 2000
SECURE = [(role, argv) for role, argv in docs_commands() if "--config" in argv]
FLAGS = [(role, argv) for role, argv in docs_commands() if "--insecure" in argv]


@pytest.fixture(scope="module")
def cluster(module_deployment) -> Deployment:
    """configs/multi-host.yaml as shipped: a dispatcher and two workers."""
    d = module_deployment()
    d.write_config()
    d.start_cluster(SECURE, workers=2)
    return d


def read(d: Deployment, **spec) -> dict:
    return d.result(d.trainer(d.network.add_host(), n=N, **spec))


def test_distributed_epoch_across_hosts_reads_each_element_once(cluster):
    result = read(cluster, mode="distributed_epoch")
    assert sorted(result["elements"]) == list(range(N))
    assert sorted(result["workers"]) == cluster.advertised()
    for k, host in enumerate(cluster.worker_hosts):
        logged = rf"worker bound tcp://0\.0\.0\.0:5051, advertised as tcp://{host.address}:5051"
        assert cluster.procs[f"worker-{k}"].count(logged) == 1


def test_parallel_epochs_across_hosts_reads_a_copy_per_worker(cluster):
    result = read(cluster, mode="parallel_epochs")
    assert Counter(result["elements"]) == {i: 2 for i in range(N)}


def test_a_shared_job_splits_one_epoch_between_trainers_on_two_hosts(cluster):
    spec = {"n": N, "mode": "distributed_epoch", "job_name": "shared"}
    trainers = [cluster.trainer(cluster.network.add_host(), **spec) for _ in range(2)]
    results = [cluster.result(trainer) for trainer in trainers]
    got = [e for result in results for e in result["elements"]]
    assert sorted(got) == list(range(N))


def test_the_documented_flags_serve_without_keys(deployment):
    d = deployment(secure=False)
    d.start_cluster(FLAGS, workers=2)
    result = read(d, mode="distributed_epoch")
    assert sorted(result["elements"]) == list(range(N))
    assert sorted(result["workers"]) == d.advertised()


@pytest.mark.parametrize("kind", ["compose", "k8s"])
def test_the_container_configs_serve_across_hosts(deployment, kind):
    d = deployment(secure=False)
    commands, config_map = container_commands(kind)
    if config_map is not None:
        (d.directory / "zmqdata.yaml").write_text(config_map)
        d.swap[CONFIG_PATH] = str(d.directory / "zmqdata.yaml")
    d.start_cluster(commands, workers=2)
    result = read(d, mode="distributed_epoch")
    assert sorted(result["elements"]) == list(range(N))
    assert sorted(result["workers"]) == d.advertised()


def test_a_worker_killed_mid_read_dynamic_read_ends_exactly_once(deployment):
    d = deployment()
    d.write_config(
        {
            "worker_timeout_ms: 10000": "worker_timeout_ms: 2000",
            "heartbeat_interval_ms: 1000": "heartbeat_interval_ms: 250",
        }
    )
    d.start_cluster(SECURE, workers=2)
    resume = d.directory / "resume"
    trainer = d.trainer(
        d.network.add_host(),
        n=N,
        mode="distributed_epoch",
        pause_after=10,
        resume_file=str(resume),
        workers_left=1,  # the read may end before the dead worker times out
    )
    trainer.wait_for_line("^paused$")
    d.procs["worker-1"].popen.kill()
    resume.touch()
    result = d.result(trainer)
    assert sorted(result["elements"]) == list(range(N))  # the survivor made the rest
    survivor = d.worker_hosts[0].address
    assert result["workers"] == [[f"{survivor}:5051", f"tcp://{survivor}:5051"]]
