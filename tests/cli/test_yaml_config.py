from pathlib import Path

import pytest

from zmqdata._config import DispatcherConfig, WorkerConfig
from zmqdata._runtime import yaml_config
from zmqdata._runtime.yaml_config import ConfigError, load

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(text)
    return path


def test_full_file_loads(tmp_path):
    deployment = load(
        write(
            tmp_path,
            "dispatcher: {host: 0.0.0.0, port: 5050, work_dir: /tmp/x,"
            " fault_tolerant_mode: true, worker_addresses: [a:1, b:2]}\n"
            "worker: {dispatcher_address: 'dhost:5050', heartbeat_interval_ms: 250,"
            " worker_tags: [gpu, fast]}\n"
            "workers: 4\n",
        )
    )
    assert deployment.workers == 4
    dispatcher = yaml_config.dispatcher_config(deployment.dispatcher)
    assert dispatcher == DispatcherConfig(
        host="0.0.0.0",
        port=5050,
        work_dir="/tmp/x",
        fault_tolerant_mode=True,
        worker_addresses=("a:1", "b:2"),
    )
    worker = yaml_config.worker_config(deployment.worker)
    assert worker.worker_tags == ("gpu", "fast")
    assert worker.heartbeat_interval_ms == 250


def test_empty_file_is_all_defaults(tmp_path):
    deployment = load(write(tmp_path, ""))
    assert (deployment.dispatcher, deployment.worker, deployment.workers) == ({}, {}, 1)


def test_flags_override_yaml_values(tmp_path):
    deployment = load(write(tmp_path, "dispatcher: {port: 5050, host: 0.0.0.0}\n"))
    config = yaml_config.dispatcher_config(deployment.dispatcher, port=6000, host=None)
    assert (config.port, config.host) == (6000, "0.0.0.0")


def test_worker_needs_a_dispatcher_address():
    with pytest.raises(ConfigError, match="dispatcher address is required"):
        yaml_config.worker_config({})
    config = yaml_config.worker_config({}, dispatcher_address="h:1")
    assert isinstance(config, WorkerConfig)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dispatcher: {port: abc}", "dispatcher.port: expected int, got 'abc'"),
        (
            "worker: {heartbeat_interval_ms: -5}",
            "worker.heartbeat_interval_ms: expected a positive int, got -5",
        ),
        ("dispatcher: {port: 70000}", "dispatcher.port: expected a port in 0-65535"),
        ("dispatcher: {worker_timeout_ms: 0}", "dispatcher.worker_timeout_ms: "),
        ("dispatcher: {prot: 1}", "dispatcher.prot: unknown key (known: port, "),
        ("worker: {hearbeat: 1}", "worker.hearbeat: unknown key (known: "),
        ("dispatchers: {}", "dispatchers: unknown key (known: dispatcher, worker"),
        ("workers: -1", "workers: expected an int >= 0, got -1"),
        ("workers: two", "workers: expected int, got 'two'"),
        ("dispatcher: [1]", "dispatcher: expected a mapping, got list"),
        ("dispatcher: {fault_tolerant_mode: true}", "dispatcher: fault_tolerant_"),
        ("dispatcher: {fault_tolerant_mode: 1}", "dispatcher.fault_tolerant_mode: "),
        ("worker: {worker_tags: gpu}", "worker.worker_tags: expected a list of str"),
        ("worker: {dispatcher_address: 5}", "worker.dispatcher_address: "),
    ],
)
def test_bad_values_name_the_key_path(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text))
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_unparsable_yaml_names_file_and_position(tmp_path):
    path = write(tmp_path, "dispatcher:\n  port: [1, 2\nworker: {}\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3:"), message
    assert "invalid YAML" in message
    assert "\n" not in message


def test_non_mapping_top_level_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match=r"expected a mapping .* got list"):
        load(write(tmp_path, "- dispatcher\n- worker\n"))


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name", ["local.yaml", "multi-host.yaml"])
def test_shipped_configs_load(name):
    deployment = load(ROOT / "configs" / name)
    yaml_config.dispatcher_config(deployment.dispatcher)
    yaml_config.worker_config(deployment.worker, dispatcher_address="h:5050")
    assert deployment.workers >= 1


def test_compose_and_k8s_files_are_valid_yaml():
    import yaml

    for path in [
        ROOT / "configs" / "docker-compose.yaml",
        *sorted((ROOT / "configs" / "k8s").glob("*.yaml")),
    ]:
        assert list(yaml.safe_load_all(path.read_text())), path


def test_env_overrides_go_over_the_file_and_are_read_as_yaml(tmp_path):
    deployment = load(write(tmp_path, "dispatcher: {port: 5050, host: 0.0.0.0}\n"))
    env = {
        "ZMQDATA_DISPATCHER__PORT": "6000",
        "ZMQDATA_DISPATCHER__FAULT_TOLERANT_MODE": "true",
        "ZMQDATA_DISPATCHER__WORK_DIR": "/tmp/zd",
        "ZMQDATA_WORKER__WORKER_TAGS": "[gpu, fast]",
        "ZMQDATA_WORKERS": "4",
        "ZMQDATA_DISPATCHER_TIMEOUT_S": "9",  # not an override: no "__"
        "HOME": "/root",
    }
    merged = yaml_config.with_env(deployment, env)
    config = yaml_config.dispatcher_config(merged.dispatcher)
    assert (config.port, config.host, config.fault_tolerant_mode) == (
        6000,
        "0.0.0.0",
        True,
    )
    worker = yaml_config.worker_config(merged.worker, dispatcher_address="h:1")
    assert worker.worker_tags == ("gpu", "fast")
    assert merged.workers == 4
    assert "ZMQDATA_DISPATCHER_TIMEOUT_S" not in merged.from_env
    assert len(merged.from_env) == 5
    assert yaml_config.with_env(deployment, {}) is deployment


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ZMQDATA_DISPATCHER__PORT": "abc"},
            "dispatcher.port: expected int, got 'abc' (from ZMQDATA_DISPATCHER__PORT)",
        ),
        (
            {"ZMQDATA_DISPATCHER__PORT": "70000"},
            "dispatcher.port: expected a port in 0-65535",
        ),
        ({"ZMQDATA_WORKER__HEARTBEAT": "1"}, "worker.heartbeat: unknown key (known: "),
        ({"ZMQDATA_DISPATCHERS__PORT": "1"}, "dispatchers: unknown section (known: "),
        (
            {"ZMQDATA_WORKERS": "two"},
            "workers: expected int, got 'two' (from ZMQDATA_WORKERS)",
        ),
        ({"ZMQDATA_WORKERS": "-1"}, "workers: expected an int >= 0, got -1"),
        (
            {"ZMQDATA_DISPATCHER__FAULT_TOLERANT_MODE": "true"},
            "dispatcher: fault_tolerant_",
        ),
    ],
)
def test_bad_env_overrides_name_the_key_path_and_the_variable(env, message):
    with pytest.raises(ConfigError) as caught:
        yaml_config.with_env(yaml_config.Deployment(), env)
    text = str(caught.value)
    assert text.startswith(message), text
    assert text.endswith(f"(from {next(iter(env))})"), text
    assert "\n" not in text
