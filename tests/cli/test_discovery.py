"""Discovery: the well-known port 5050 and the attach hint, ``ZMQDATA_DISPATCHER``
for ``status``, ``worker`` and the Python API, config file discovery and
``ZMQDATA_<SECTION>__<FIELD>`` overrides (flags > env > file > defaults)."""

import json
import os
from collections.abc import Iterator
from contextlib import suppress

import pytest
from zmqdata_cli._common import find_config

import zmqdata as zd
from tests.cli.procs import run, zmqdata
from tests.helpers import poll_for
from tests.hosts import netns
from tests.service.cluster import free_port
from zmqdata import service

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def namespace() -> Iterator[list[str]]:
    """A fresh network namespace (its own port 5050) with a route out: the
    ``ip netns exec`` prefix. Skipped, loudly, where none can be made."""
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(f"the port-5050 test needs a network namespace: {reason}")
    name = f"zd-ops-cli-{os.getpid()}"
    with suppress(RuntimeError):
        netns.ip("netns", "delete", name)
    netns.ip("netns", "add", name)
    try:
        inside = ("-n", name)
        netns.ip(*inside, "link", "set", "lo", "up")
        netns.ip(*inside, "link", "add", "zd0", "type", "veth", "peer", "name", "zd1")
        netns.ip(*inside, "addr", "add", "10.253.7.2/24", "dev", "zd0")
        for end in ("zd0", "zd1"):
            netns.ip(*inside, "link", "set", end, "up")
        netns.ip(*inside, "route", "add", "default", "via", "10.253.7.1")
        yield ["ip", "netns", "exec", name]
    finally:
        netns.ip("netns", "delete", name)


def test_dispatcher_listens_on_5050_by_default_where_status_and_worker_look(
    namespace,
):
    inside = [*namespace, "env", "-u", "ZMQDATA_DISPATCHER"]
    with zmqdata("dispatcher", prefix=inside) as proc:
        proc.wait_for_line(r"dispatcher ready: tcp://127\.0\.0\.1:5050$")
        proc.wait_for_line(
            r"attach workers with: zmqdata worker --dispatcher 127\.0\.0\.1:5050 "
            r" \(or ZMQDATA_DISPATCHER=127\.0\.0\.1:5050\)$"
        )
        proc.wait_for_line(
            r'attach trainers with: service\.distribute\(mode, "127\.0\.0\.1:5050"\)'
        )
        with zmqdata("worker", prefix=inside) as worker:  # no address given
            worker.wait_for_line(r"dispatcher at (tcp://)?127\.0\.0\.1:5050$")

            def workers() -> int:
                status = run("status", "--json", prefix=inside)
                assert status.returncode == 0, status.stderr
                return len(json.loads(status.stdout)["workers"])

            poll_for(lambda: workers() == 1, 20)
            assert worker.stop() == 0
        assert proc.stop() == 0


def test_a_wildcard_dispatcher_hints_its_routed_address(namespace):
    with zmqdata(
        "dispatcher", "--host", "0.0.0.0", "--insecure", prefix=namespace
    ) as p:
        p.wait_for_line(r"dispatcher ready: tcp://0\.0\.0\.0:5050$")
        p.wait_for_line(r"zmqdata worker --dispatcher 10\.253\.7\.2:5050 ")
        assert p.stop() == 0


def test_zmqdata_dispatcher_serves_status_worker_and_the_python_api(monkeypatch):
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = dispatcher.wait_for_line(r"dispatcher ready: (\S+)$").group(1)
        env = ["env", f"ZMQDATA_DISPATCHER={target}"]
        with zmqdata("worker", prefix=env) as worker:
            worker.wait_for_line("worker ready: ")
            monkeypatch.setenv("ZMQDATA_DISPATCHER", target)
            poll_for(lambda: len(service.get_status()["workers"]) == 1, 20)

            status = run("status", "--json", prefix=env)
            assert status.returncode == 0, status.stderr
            assert len(json.loads(status.stdout)["workers"]) == 1

            ds = zd.Dataset.range(6)
            read = ds.apply(service.distribute("parallel_epochs"))
            assert sorted(int(x) for x in read) == list(range(6))
            dataset_id = service.register_dataset(None, ds)
            again = service.from_dataset_id("parallel_epochs", None, dataset_id)
            assert sorted(int(x) for x in again) == list(range(6))
            assert worker.stop() == 0
        assert dispatcher.stop() == 0


def test_without_zmqdata_dispatcher_the_api_says_what_to_set(monkeypatch):
    monkeypatch.delenv("ZMQDATA_DISPATCHER", raising=False)
    for call in (
        lambda: service.distribute("parallel_epochs"),
        lambda: service.get_status(),
        lambda: service.register_dataset(None, zd.Dataset.range(1)),
        lambda: service.from_dataset_id("parallel_epochs", None, "d"),
    ):
        with pytest.raises(ValueError, match="set ZMQDATA_DISPATCHER"):
            call()
    monkeypatch.setenv("ZMQDATA_DISPATCHER", "nohost")
    with pytest.raises(ValueError, match="ZMQDATA_DISPATCHER 'nohost': expected host"):
        service.distribute("parallel_epochs")


def test_config_is_the_flag_else_the_variable_else_the_local_file(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZMQDATA_CONFIG", raising=False)
    assert find_config(None) == (None, "no config file")
    (tmp_path / "zmqdata.yaml").write_text("{}")
    assert find_config(None) == ("zmqdata.yaml", "./zmqdata.yaml")
    monkeypatch.setenv("ZMQDATA_CONFIG", "/etc/zd.yaml")
    assert find_config(None) == ("/etc/zd.yaml", "ZMQDATA_CONFIG")
    assert find_config("mine.yaml") == ("mine.yaml", "--config")


def _yaml_port(path, port: int) -> str:
    path.write_text(f"dispatcher: {{port: {port}}}\n")
    return str(path)


def test_dispatcher_finds_its_config_and_logs_which(tmp_path):
    local, from_env = free_port(), free_port()
    _yaml_port(tmp_path / "zmqdata.yaml", local)
    chosen = _yaml_port(tmp_path / "env.yaml", from_env)
    in_dir = ["env", "-u", "ZMQDATA_CONFIG", "-C", str(tmp_path)]
    with zmqdata("dispatcher", prefix=in_dir) as proc:
        proc.wait_for_line(rf"dispatcher ready: tcp://127\.0\.0\.1:{local}$")
        proc.wait_for_line(
            rf"config: {tmp_path}/zmqdata\.yaml \(from \./zmqdata\.yaml\)"
        )
        assert proc.stop() == 0
    with zmqdata("dispatcher", prefix=[*in_dir, f"ZMQDATA_CONFIG={chosen}"]) as proc:
        proc.wait_for_line(rf"dispatcher ready: tcp://127\.0\.0\.1:{from_env}$")
        proc.wait_for_line(r"config: \S+/env\.yaml \(from ZMQDATA_CONFIG\)")
        assert proc.stop() == 0


def test_env_overrides_the_file_and_flags_override_env(tmp_path):
    file_port, env_port, flag_port = free_port(), free_port(), free_port()
    config = _yaml_port(tmp_path / "d.yaml", file_port)
    env = ["env", f"ZMQDATA_DISPATCHER__PORT={env_port}"]
    with zmqdata("dispatcher", "--config", config, prefix=env) as proc:
        proc.wait_for_line(rf"dispatcher ready: tcp://127\.0\.0\.1:{env_port}$")
        proc.wait_for_line(r"config: ZMQDATA_DISPATCHER__PORT set by the environment")
        assert proc.stop() == 0
    args = ("dispatcher", "--config", config, "--port", str(flag_port))
    with zmqdata(*args, prefix=env) as proc:
        proc.wait_for_line(rf"dispatcher ready: tcp://127\.0\.0\.1:{flag_port}$")
        assert proc.stop() == 0


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        (
            "ZMQDATA_DISPATCHER__PORT=abc",
            "dispatcher.port: expected int, got 'abc' (from ZMQDATA_DISPATCHER__PORT)",
        ),
        (
            "ZMQDATA_WORKER__HEARTBEAT_INTERVAL_MS=-5",
            (
                "worker.heartbeat_interval_ms: expected a positive int, got -5 "
                "(from ZMQDATA_WORKER__HEARTBEAT_INTERVAL_MS)"
            ),
        ),
        ("ZMQDATA_DISPATCHER__PROT=1", "dispatcher.prot: unknown key (known: "),
    ],
)
def test_bad_env_overrides_fail_naming_key_and_variable(variable, message):
    completed = run("dispatcher", prefix=["env", variable])
    assert completed.returncode == 1
    (line,) = completed.stderr.splitlines()
    assert message in line
    assert line.endswith(f"(from {variable.partition('=')[0]})")
