"""The ``zmqdata`` commands as real processes: serve, report status, stop cleanly."""

import json
import os
import re
import signal
import socket
import urllib.request

import pytest

import zmqdata as zd
from tests.cli.procs import run, zmqdata
from tests.helpers import poll_for
from tests.service.cluster import free_port
from zmqdata import service

READY = r"(dispatcher|worker|deployment) ready: (dispatcher )?(\S+?),?( |$)"


def address_of(proc) -> str:
    return proc.wait_for_line(READY).group(3)


def test_dispatcher_and_worker_serve_a_client_and_exit_0_on_sigterm():
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = address_of(dispatcher)
        with zmqdata("worker", "--dispatcher", target) as worker:
            address_of(worker)
            poll_for(lambda: len(service.get_status(target)["workers"]) == 1, 20)
            ds = zd.Dataset.range(10).apply(  # named: status lists it when over
                service.distribute("distributed_epoch", target, job_name="cli")
            )
            assert sorted(int(x) for x in ds) == list(range(10))

            status = run("status", "--dispatcher", target, "--json")
            assert status.returncode == 0, status.stderr
            parsed = json.loads(status.stdout)
            assert len(parsed["workers"]) == 1
            assert parsed["jobs"][0]["processing_mode"] == "distributed_epoch"

            human = run("status", "--dispatcher", target)
            assert human.returncode == 0, human.stderr
            assert "1 worker, 1 dataset, 1 job" in human.stdout
            assert "distributed_epoch" in human.stdout

            assert worker.stop(signal.SIGTERM) == 0
        assert dispatcher.stop(signal.SIGTERM) == 0
    assert "dispatcher stopped" in dispatcher.stderr
    assert "Traceback" not in dispatcher.stderr + worker.stderr


def test_worker_reads_its_dispatcher_address_from_yaml(tmp_path):
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = address_of(dispatcher)
        config = tmp_path / "w.yaml"
        config.write_text(
            f"worker: {{dispatcher_address: '{target}', heartbeat_interval_ms: 100}}\n"
        )
        with zmqdata("worker", "--config", str(config)) as worker:
            address_of(worker)
            poll_for(lambda: len(service.get_status(target)["workers"]) == 1, 20)
            assert worker.stop(signal.SIGINT) == 0
        assert dispatcher.stop(signal.SIGINT) == 0


def test_dispatcher_flags_override_yaml(tmp_path):
    config = tmp_path / "d.yaml"
    config.write_text("dispatcher: {port: 1, host: 127.0.0.1}\n")
    with zmqdata("dispatcher", "--config", str(config), "--port", "0") as dispatcher:
        assert not address_of(dispatcher).endswith(":1")
        assert dispatcher.stop() == 0


def test_up_registers_workers_restarts_a_crashed_one_and_exits_0_on_sigint(tmp_path):
    config = tmp_path / "up.yaml"
    config.write_text(
        "dispatcher: {port: 0, worker_timeout_ms: 60000}\n"
        "worker: {heartbeat_interval_ms: 100}\n"
        "workers: 3\n"
    )
    with zmqdata("up", str(config)) as up:
        match = up.wait_for_line(r"deployment ready: dispatcher (\S+), (\d+) workers")
        target = match.group(1)
        assert int(match.group(2)) == 3
        assert len(service.get_status(target)["workers"]) == 3

        pid = int(up.wait_for_line(r"worker 0 started \(pid (\d+)\)").group(1))
        os.kill(pid, signal.SIGKILL)
        up.wait_for_line(r"worker 0 exited with code -9; restarting in")
        poll_for(lambda: up.count(r"worker 0 started") == 2, 20)
        poll_for(lambda: up.count(r"registered as 4") >= 1, 20)

        assert up.stop(signal.SIGINT) == 0
    assert "deployment stopped" in up.stderr
    assert "Traceback" not in up.stderr


def test_worker_warns_when_its_dispatcher_refuses_and_is_ready_once_registered():
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    with zmqdata("worker", "--dispatcher", address) as worker:
        line = worker.wait_for_line(r"no answer from the dispatcher", timeout=10)
        assert address in line.string
        assert "connection refused" in line.string
        assert worker.count("worker ready") == 0  # not registered: not ready
        with zmqdata("dispatcher", "--port", str(port)) as dispatcher:
            worker.wait_for_line(r"worker ready: ")
            lines = list(worker.lines)
            registered = next(i for i, x in enumerate(lines) if "registered as" in x)
            assert registered < next(i for i, x in enumerate(lines) if " ready: " in x)
            assert worker.stop() == 0
            assert dispatcher.stop() == 0


def test_status_of_unreachable_dispatcher_fails_quickly():
    completed = run("status", "--dispatcher", "127.0.0.1:1", "--timeout", "0.5")
    assert completed.returncode != 0
    assert "Error:" in completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize(
    ("command", "text", "message"),
    [
        ("dispatcher", "dispatcher: {port: abc}", "dispatcher.port: expected int"),
        ("dispatcher", "dispatcher: {prot: 5050}", "dispatcher.prot: unknown key"),
        (
            "dispatcher",
            "dispatcher: {worker_timeout_ms: -1}",
            "dispatcher.worker_timeout_ms: expected a positive int",
        ),
        ("worker", "worker: {heartbeat_interval_ms: -5}", "worker.heartbeat_inter"),
        ("up", "workers: -2", "workers: expected an int >= 0"),
        ("up", "dispatcher: {port: [1\n", "invalid YAML"),
        ("up", "- 1\n", "expected a mapping"),
    ],
)
def test_bad_yaml_is_rejected_naming_the_key(tmp_path, command, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    args = [str(config)] if command == "up" else ["--config", str(config)]
    extra = ["--dispatcher", "127.0.0.1:1"] if command == "worker" else []
    completed = run(command, *args, *extra)
    assert completed.returncode != 0
    assert message in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _two_free_ports() -> int:
    """A port P such that P and P + 1 are both free on 127.0.0.1 right now."""

    def pair() -> int | None:
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                return None
        return port

    found: int = poll_for(pair, 5)
    return found


def test_up_gives_each_worker_its_own_metrics_port(tmp_path):
    port = _two_free_ports()
    config = tmp_path / "up.yaml"
    config.write_text(
        f"worker: {{heartbeat_interval_ms: 100, metrics_port: {port}}}\nworkers: 2\n"
    )
    with zmqdata("up", str(config)) as up:
        match = up.wait_for_line(r"deployment ready: dispatcher (\S+), (\d+) workers")
        assert int(match.group(2)) == 2
        for each in (port, port + 1):
            with urllib.request.urlopen(f"http://127.0.0.1:{each}/metrics") as page:
                assert b"zmqdata_worker_elements" in page.read()
        assert up.count(r"worker \d exited") == 0
        assert up.stop(signal.SIGINT) == 0
    assert "Traceback" not in up.stderr


def test_up_stops_everything_when_a_worker_keeps_crashing(tmp_path):
    port = _two_free_ports()
    config = tmp_path / "up.yaml"
    config.write_text(
        f"worker: {{heartbeat_interval_ms: 100, metrics_port: {port}}}\nworkers: 2\n"
    )
    with (
        socket.create_server(("127.0.0.1", port + 1)),  # worker 1's metrics port
        zmqdata("up", str(config), "--max-crashes", "2") as up,
    ):
        assert up.popen.wait(60) == 1
        up.stop()  # collects the rest of its stderr
        pids = [int(pid) for pid in re.findall(r"started \(pid (\d+)\)", up.stderr)]
        assert len(pids) == 3  # worker 0 once, worker 1 twice
        poll_for(lambda: not any(_alive(pid) for pid in pids), 10)
    assert up.lines[-1].endswith(
        " ERROR zmqdata.cli [dispatcher]: worker 1 exited 2 times in a row within "
        "120 s (last exit code 1); stopping the deployment"
    ), up.stderr
    assert "deployment ready" not in up.stderr  # worker 1 never was alive and well
    assert "deployment stopped" in up.stderr
    assert "Traceback" not in up.stderr
