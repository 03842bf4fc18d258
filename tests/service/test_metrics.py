"""Worker stats in get_status and the optional Prometheus endpoints."""

from __future__ import annotations

import os
import platform
import socket
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import zmqdata as zd
from tests.helpers import poll_for, scrape
from zmqdata import errors, service
from zmqdata._dispatcher import job_view
from zmqdata._version import PROTOCOL_VERSION


def worker_entry(c: Any) -> dict[str, Any]:
    [worker] = c.status()["workers"]
    return worker


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def metrics_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if "zmqdata-metrics" in t.name]


def test_worker_stats_in_status_grow_when_data_flows(cluster):
    c = cluster(num_workers=1)
    before = poll_for(lambda: worker_entry(c)["stats"])
    assert before["elements"] == 0
    assert before["bytes"] == 0
    ds = zd.Dataset.range(50).apply(service.distribute("parallel_epochs", c.target))
    assert len(list(ds)) == 50

    def grown() -> dict[str, Any] | None:
        stats: dict[str, Any] = worker_entry(c)["stats"]
        return stats if stats["elements"] >= 50 else None

    stats = poll_for(grown)
    assert stats["bytes"] > 0
    assert stats["requests"] >= 1
    assert stats["errors"] == 0
    assert {"buffered_elements", "buffered_bytes", "tasks_running"} <= stats.keys()
    poll_for(lambda: worker_entry(c)["stats"]["tasks_finished"] >= 1)
    assert c.workers[0].stats()["elements"] >= 50


def test_per_task_stats_and_buffer_fill_while_a_stream_runs(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(10).repeat().map(lambda x: x * 2)
    ds = ds.apply(service.distribute("parallel_epochs", c.target))
    iterator = iter(ds)
    next(iterator)

    def one_task() -> dict[str, Any] | None:
        tasks = worker_entry(c)["stats"].get("tasks", [])
        return tasks[0] if len(tasks) == 1 and tasks[0]["elements"] > 0 else None

    task = poll_for(one_task)
    assert task["finished"] is False
    # An endless producer fills its buffer while the consumer is idle.
    poll_for(lambda: worker_entry(c)["stats"]["buffered_elements"] > 0)
    assert worker_entry(c)["stats"]["tasks_running"] == 1
    iterator.close()


def test_elements_per_s_is_positive_while_a_stream_runs(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(100).repeat()
    iterator = iter(ds.apply(service.distribute("parallel_epochs", c.target)))

    def flowing() -> bool:
        for _ in range(200):
            next(iterator)
        return worker_entry(c)["elements_per_s"] > 0

    try:
        poll_for(flowing, timeout=20.0)
    finally:
        iterator.close()


def test_metrics_endpoints_serve_counters_that_move(cluster):
    c = cluster(num_workers=1, metrics_port=0, dispatcher_options={"metrics_port": 0})
    worker_address = c.workers[0].metrics_address
    dispatcher_address = c.dispatcher.metrics_address
    assert worker_address is not None
    assert worker_address.startswith("127.0.0.1:")
    assert dispatcher_address is not None
    first = scrape(worker_address)
    assert first["zmqdata_worker_elements_total"] == 0
    assert first["zmqdata_worker_tasks"] == 0
    dispatcher = scrape(dispatcher_address)
    assert dispatcher["zmqdata_dispatcher_workers"] == 1
    assert dispatcher["zmqdata_dispatcher_requests_total"] > 0
    assert dispatcher["zmqdata_dispatcher_splits_total"] == 0

    ds = zd.Dataset.range(100).apply(  # named: the job outlives the read
        service.distribute("distributed_epoch", c.target, job_name="m")
    )
    assert sorted(int(x) for x in ds) == list(range(100))
    after = scrape(worker_address)
    assert after["zmqdata_worker_elements_total"] == 100
    assert after["zmqdata_worker_bytes_total"] > 0
    assert after["zmqdata_worker_requests_total"] >= 1
    assert after["zmqdata_worker_errors_total"] == 0
    assert {"zmqdata_worker_buffered_elements", "zmqdata_worker_tasks"} <= after.keys()
    dispatcher = scrape(dispatcher_address)
    assert dispatcher["zmqdata_dispatcher_datasets"] == 1
    assert dispatcher["zmqdata_dispatcher_jobs"] == 1
    assert dispatcher["zmqdata_dispatcher_splits_total"] > 0
    assert "zmqdata_dispatcher_consumers" in dispatcher
    assert "zmqdata_dispatcher_errors_total" in dispatcher


def test_stop_frees_the_metrics_ports_and_threads():
    dispatcher = service.DispatchServer(service.DispatcherConfig(metrics_port=0))
    worker = service.WorkerServer(
        service.WorkerConfig(dispatcher.target, metrics_port=0)
    )
    ports = [
        int(str(server.metrics_address).rpartition(":")[2])
        for server in (dispatcher, worker)
    ]
    assert len(metrics_threads()) >= 2
    worker.stop()
    dispatcher.stop()
    dispatcher.stop()  # idempotent
    assert all(port_is_free(port) for port in ports)
    assert metrics_threads() == []


def test_servers_in_one_process_have_their_own_registries():
    with (
        service.DispatchServer(service.DispatcherConfig(metrics_port=0)) as first,
        service.DispatchServer(service.DispatcherConfig(metrics_port=0)) as second,
    ):
        assert first.metrics_address != second.metrics_address
        assert scrape(str(first.metrics_address))["zmqdata_dispatcher_workers"] == 0
        assert scrape(str(second.metrics_address))["zmqdata_dispatcher_workers"] == 0


def test_no_metrics_endpoint_by_default(cluster):
    c = cluster(num_workers=1)
    assert c.dispatcher.metrics_address is None
    assert c.workers[0].metrics_address is None
    assert metrics_threads() == []


def test_a_taken_metrics_port_is_unavailable_and_leaks_nothing():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(errors.UnavailableError, match="metrics"):
            service.DispatchServer(service.DispatcherConfig(metrics_port=port))
        with (
            service.DispatchServer() as dispatcher,
            pytest.raises(errors.UnavailableError, match="metrics"),
        ):
            service.WorkerServer(
                service.WorkerConfig(dispatcher.target, metrics_port=port)
            )
    assert metrics_threads() == []


@pytest.mark.parametrize("value", [70_000, -1, True])
def test_metrics_port_is_validated(value):
    with pytest.raises(ValueError, match=r"DispatcherConfig\.metrics_port"):
        service.DispatcherConfig(metrics_port=value)
    with pytest.raises(ValueError, match=r"WorkerConfig\.metrics_port"):
        service.WorkerConfig("tcp://127.0.0.1:1", metrics_port=value)


def samples(address: str, name: str) -> list[Any]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


@pytest.mark.timeout(30)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process_* is Linux")
def test_both_endpoints_serve_process_metrics_and_build_info(cluster):
    c = cluster(num_workers=1, metrics_port=0, dispatcher_options={"metrics_port": 0})
    for address in (c.dispatcher.metrics_address, c.workers[0].metrics_address):
        got = scrape(str(address))
        assert got["process_cpu_seconds_total"] > 0
        assert got["process_resident_memory_bytes"] > 10 * 2**20
        assert 3 <= got["process_open_fds"] <= got["process_max_fds"]
        assert got["process_start_time_seconds"] == pytest.approx(
            proc_start_time(), abs=2.0
        )
        [info] = samples(str(address), "zmqdata_build_info")
        assert info.value == 1
        assert info.labels == {
            "version": zd.__version__,
            "protocol": str(PROTOCOL_VERSION),
            "python": platform.python_version(),
        }


def proc_start_time() -> float:
    """This process's start time (s since the epoch), from /proc as ps computes it."""
    ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    raise AssertionError("no btime in /proc/stat")


def scraped_labels(address: str, name: str, label: str) -> set[str]:
    """The values of ``label`` in the samples of series ``name``."""
    return {sample.labels[label] for sample in samples(address, name)}


@pytest.mark.timeout(30)
def test_job_series_appear_once_a_job_runs(cluster):
    """Op, consumer and bottleneck series follow the status keys that exist.

    ``zmqdata_job_elements_total`` always; the others for the status keys
    (``ops``, ``consumers``, ``bottleneck``) the dispatcher reports.
    """
    c = cluster(num_workers=1, dispatcher_options={"metrics_port": 0})
    address = str(c.dispatcher.metrics_address)
    ds = zd.Dataset.range(10).repeat().map(lambda x: x * 2, num_parallel_calls=2)
    ds = ds.apply(service.distribute("parallel_epochs", c.target, job_name="seen"))
    iterator = iter(ds)
    try:
        next(iterator)
        [sample] = poll_for(
            lambda: [
                s for s in samples(address, "zmqdata_job_elements_total") if s.value > 0
            ]
        )
        [job] = c.status()["jobs"]
        assert sample.labels == {"job_id": str(job["job_id"]), "job_name": "seen"}

        def seen_in_both(key: str, series: str, label: str) -> set[str]:
            [job] = c.status()["jobs"]
            views = getattr(job_view, key)(job)
            expected = {view.label for view in views}
            return (
                expected
                if expected == scraped_labels(address, series, label)
                else set()
            )

        if "ops" in c.status()["jobs"][0]:
            ops = poll_for(
                lambda: seen_in_both("ops", "zmqdata_job_op_seconds_total", "op")
            )
            assert {"range", "map(<lambda>)"} <= ops
            assert scraped_labels(address, "zmqdata_job_op_elements_total", "op") <= ops
            poll_for(  # busy is known once the map's threads have worked
                lambda: (
                    scraped_labels(address, "zmqdata_job_op_busy_ratio", "op")
                    == {"map(<lambda>)"}
                )
            )
        if "consumers" in c.status()["jobs"][0]:
            poll_for(
                lambda: seen_in_both(
                    "consumers", "zmqdata_job_consumer_elements_per_second", "consumer"
                )
            )
        if "bottleneck" in c.status()["jobs"][0]:
            kinds = samples(address, "zmqdata_job_bottleneck")
            assert sorted(s.labels["kind"] for s in kinds) == sorted(job_view.KINDS)
            assert sum(s.value for s in kinds) == 1
    finally:
        iterator.close()
