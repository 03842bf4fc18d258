"""configs/: Kubernetes and Compose files checked offline against their schemas and our CLI.

Every Kubernetes document is validated strictly (unknown fields fail) against a
pinned Kubernetes version's schemas (``kubernetes-validate``), the compose file
against the vendored Compose Specification schema (tests/schemas/README.md).
Then each container's command is parsed by the real click commands, its
``ZMQDATA_*`` variables and mounted YAML keys are checked against the code, and
its addresses against what the multi-host tier (tests/hosts) proves.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.hosts import deploy
from zmqdata._runtime import yaml_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
K8S_VERSION = "1.30"  # the oldest Kubernetes release the manifests must apply to
COMPOSE_SCHEMA = ROOT / "tests" / "schemas" / "compose-spec.json"
DISPATCHER_PORT = 5050  # what tests/hosts runs: dispatcher-host:5050
WORKER_PORT = 5051  # tests/hosts: "worker ready: tcp://<host address>:5051"
RECOMMENDED = "zmqdata_dispatcher_recommended_workers"  # ops-autoscale's gauge


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in sorted((CONFIGS / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]


DOCUMENTS = k8s_documents()


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (CONFIGS / "docker-compose.yaml").read_text()
    )
    return loaded


@pytest.mark.parametrize(
    "doc", [d for _, d in DOCUMENTS], ids=[i for i, _ in DOCUMENTS]
)
def test_every_kubernetes_document_is_valid_strictly(doc):
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_strict_kubernetes_validation_rejects_an_unknown_field():
    [worker] = [d for _, d in DOCUMENTS if d["kind"] == "Deployment"]
    bad = copy.deepcopy(worker)
    bad["spec"]["template"]["spec"]["containers"][0]["argz"] = ["worker"]
    with pytest.raises(kubernetes_validate.ValidationError, match="argz"):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    assert schema["$schema"].startswith("https://json-schema.org/draft-07/")
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_the_compose_file_follows_the_compose_specification():
    errors = [e.message for e in compose_validator().iter_errors(compose())]
    assert errors == []


def test_compose_validation_rejects_an_unknown_key():
    bad = compose()
    bad["services"]["worker"]["comand"] = ["worker"]
    assert not compose_validator().is_valid(bad)


# --- what each container runs ---------------------------------------------------


def flag(argv: list[str], name: str) -> str | None:
    """The value of ``--name=value`` / ``--name value`` in ``argv``."""
    for k, arg in enumerate(argv):
        if arg == name:
            return argv[k + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return None


@dataclass
class Container:
    """A zmqdata container: its command (after ``zmqdata``) and what it mounts."""

    where: str
    argv: list[str]
    probes: list[list[str]]  # other zmqdata commands it runs (health checks)
    env: dict[str, str]
    mounts: list[str]  # directories or files mounted in the container
    ports: list[int]  # container ports it declares or publishes
    files: dict[str, str] = field(default_factory=dict)  # mount path -> text

    @property
    def role(self) -> str:
        return self.argv[0]

    def flag(self, name: str) -> str | None:
        return flag(self.argv, name)

    def config(self) -> yaml_config.Deployment:
        """The mounted ``--config`` file, validated as ``zmqdata`` would."""
        path = self.flag("--config")
        if path is None:
            return yaml_config.Deployment()
        assert path in self.files, f"{self.where}: --config={path} is not mounted"
        return yaml_config.parse(self.files[path], f"{self.where}:{path}")


def entrypoint() -> list[str]:
    [line] = [
        line
        for line in (CONFIGS / "Dockerfile").read_text().splitlines()
        if line.startswith("ENTRYPOINT")
    ]
    entry: list[str] = json.loads(line.removeprefix("ENTRYPOINT"))
    return entry


def config_maps() -> dict[str, dict[str, str]]:
    return {
        d["metadata"]["name"]: d["data"]
        for _, d in DOCUMENTS
        if d["kind"] == "ConfigMap"
    }


def k8s_containers() -> list[Container]:
    found = []
    for ident, doc in DOCUMENTS:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        claims = [
            c["metadata"]["name"] for c in doc["spec"].get("volumeClaimTemplates", [])
        ]
        for c in pod["containers"]:
            assert c.get("command") is None, f"{ident}: keep the image's ENTRYPOINT"
            files, mounts = {}, []
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            for mount in c.get("volumeMounts", []):
                mounts.append(mount["mountPath"])
                volume = volumes.get(mount["name"])
                if volume is None:
                    assert mount["name"] in claims, (
                        f"{ident}: no volume {mount['name']}"
                    )
                elif "configMap" in volume:
                    data = config_maps()[volume["configMap"]["name"]]
                    for key, text in data.items():
                        files[f"{mount['mountPath']}/{key}"] = text
            probes = [
                p["exec"]["command"]
                for p in (c.get("readinessProbe"), c.get("livenessProbe"))
                if p and "exec" in p
            ]
            found.append(
                Container(
                    f"{ident}/{c['name']}",
                    list(c["args"]),
                    [p[1:] for p in probes if p[0] == "zmqdata"],
                    {e["name"]: e.get("value", "") for e in c.get("env", [])},
                    mounts,
                    [p["containerPort"] for p in c.get("ports", [])],
                    files,
                )
            )
    return found


def compose_containers() -> list[Container]:
    spec = compose()
    found = []
    for name, service in spec["services"].items():
        volumes = [v.split(":") for v in service.get("volumes", [])]
        files = {  # bind-mounted files of configs/ (relative to the compose file)
            target: (CONFIGS / source).read_text()
            for source, target, *_ in volumes
            if source.startswith("./")
        }
        health = service.get("healthcheck", {}).get("test", [])
        probes = [health[2:]] if health[:2] == ["CMD", "zmqdata"] else []
        found.append(
            Container(
                f"docker-compose.yaml:{name}",
                list(service["command"]),
                probes,
                dict(service.get("environment", {})),
                [target for _, target, *_ in volumes],
                [int(p.rsplit(":", 1)[1]) for p in service.get("ports", [])],
                files,
            )
        )
    return found


CONTAINERS = k8s_containers() + compose_containers()
IDS = [c.where for c in CONTAINERS]


def test_every_deployment_runs_both_roles():
    assert entrypoint() == ["zmqdata"]  # so args / command are zmqdata's argv
    roles = sorted(c.role for c in CONTAINERS)
    assert roles == ["dispatcher", "dispatcher", "worker", "worker"]


def parse_command(argv: list[str]) -> click.Context:
    """Parses ``zmqdata ARGV`` with the real commands, without running them."""
    from zmqdata_cli.main import main

    assert argv, "an empty command"
    assert not argv[0].startswith("-"), f"no subcommand first: {argv}"
    command = main.commands.get(argv[0])
    assert command is not None, f"zmqdata has no subcommand {argv[0]!r}"
    parent = click.Context(main, info_name="zmqdata")
    return command.make_context(argv[0], list(argv[1:]), parent=parent)


@pytest.mark.parametrize("container", CONTAINERS, ids=IDS)
def test_every_command_and_flag_exists(container):
    for argv in [container.argv, *container.probes]:
        try:
            parse_command(argv)
        except click.ClickException as error:
            pytest.fail(f"{container.where}: zmqdata {' '.join(argv)}: {error}")


def test_an_unknown_flag_fails_the_check():
    with pytest.raises(click.NoSuchOption, match="--prot"):
        parse_command(["worker", "--prot=5051"])


def env_vars_read_by_the_code() -> set[str]:
    pattern = re.compile(r"\bZMQDATA_[A-Z0-9_]+\b")
    return {
        name
        for package in ("zmqdata", "cli")
        for path in (ROOT / package).rglob("*.py")
        for name in pattern.findall(path.read_text())
    }


@pytest.mark.parametrize("container", CONTAINERS, ids=IDS)
def test_every_zmqdata_variable_is_read_by_the_code(container):
    known = env_vars_read_by_the_code()
    assert "ZMQDATA_SHARED_MEMORY" in known  # the scan finds what the code reads
    for name in container.env:
        if not name.startswith("ZMQDATA_"):
            continue
        section, _, key = name.removeprefix("ZMQDATA_").lower().partition("__")
        if key:  # ZMQDATA_<SECTION>__<FIELD>: an override of a config key
            yaml_config.parse(yaml.safe_dump({section: {key: None}}))
        else:
            assert name in known, f"{container.where}: nothing reads {name}"


@pytest.mark.parametrize("container", CONTAINERS, ids=IDS)
def test_mounted_config_keys_exist_and_paths_are_mounted(container):
    section = getattr(container.config(), container.role)  # validated keys
    paths = [container.flag("--config"), container.flag("--work-dir")]
    paths += [
        value
        for key, value in section.items()
        if key == "work_dir" or key.endswith(("_file", "_dir"))
    ]
    for path in filter(None, paths):
        assert any(
            path == mount or path.startswith(f"{mount}/") for mount in container.mounts
        ), f"{container.where}: {path} is not on a mounted volume"


def test_a_bad_mounted_key_fails_the_check():
    [worker] = [c for c in CONTAINERS if c.role == "worker" and "compose" in c.where]
    path = str(worker.flag("--config"))
    worker.files = {path: "worker: {hearbeat_interval_ms: 5}\n"}
    with pytest.raises(yaml_config.ConfigError, match=r"worker\.hearbeat_interval_ms"):
        worker.config()


def dispatcher_services() -> dict[str, list[str]]:
    """Names trainers and workers reach the dispatcher by, per file."""
    k8s = [
        f"{d['metadata']['name']}:{p['port']}"
        for _, d in DOCUMENTS
        if d["kind"] == "Service" and d["spec"]["selector"].get("role") == "dispatcher"
        for p in d["spec"]["ports"]
        if p["targetPort"] == DISPATCHER_PORT
    ]
    return {"k8s": k8s, "docker-compose.yaml": [f"dispatcher:{DISPATCHER_PORT}"]}


@pytest.mark.parametrize("container", CONTAINERS, ids=IDS)
def test_addresses_are_those_the_multi_host_tier_proves(container):
    params = parse_command(container.argv).params
    kind = "docker-compose.yaml" if "compose" in container.where else "k8s"
    [service] = dispatcher_services()[kind]
    if container.role == "dispatcher":
        assert params["port"] == DISPATCHER_PORT
        assert params["host"] == "0.0.0.0"
        assert DISPATCHER_PORT in container.ports
    else:
        assert params["dispatcher_address"] == service
        # Bound to every interface, no --worker-address: advertises its own
        # address towards the dispatcher, as tests/hosts checks.
        assert (params["host"], params["port"]) == ("0.0.0.0", WORKER_PORT)
        assert params["worker_address"] is None
        if kind == "k8s":
            assert WORKER_PORT in container.ports
    for probe in container.probes:
        parse_command(probe)
        address = flag(probe, "--dispatcher")
        assert address in (service, f"localhost:{DISPATCHER_PORT}")


@pytest.mark.parametrize("kind", ["compose", "k8s"])
def test_the_tier_runs_these_very_commands(kind):
    commands, config = deploy.container_commands(kind)
    argv = dict(commands)
    assert f"--dispatcher=dispatcher-host:{DISPATCHER_PORT}" in argv["worker"]
    assert f"--config={deploy.CONFIG_PATH}" in argv["worker"]
    assert config is not None
    yaml_config.parse(config)


@pytest.mark.parametrize("container", CONTAINERS, ids=IDS)
def test_metrics_ports_are_declared_and_annotated(container):
    params = parse_command(container.argv).params
    if container.role == "worker":
        port = params["metrics_port"]
    else:
        port = container.config().dispatcher.get("metrics_port")
    assert port is not None, f"{container.where}: no Prometheus endpoint"
    if "compose" in container.where:
        return  # scraped inside the compose network
    assert port in container.ports
    [pod] = [
        d["spec"]["template"]["metadata"]
        for i, d in DOCUMENTS
        if container.where.startswith(i)
    ]
    assert pod["annotations"]["prometheus.io/port"] == str(port)
    assert pod["annotations"]["prometheus.io/scrape"] == "true"


# --- the HorizontalPodAutoscaler and its metric ---------------------------------


def test_the_hpa_scales_the_worker_deployment_on_the_recommended_count():
    [hpa] = [d for _, d in DOCUMENTS if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    [workload] = [
        d
        for _, d in DOCUMENTS
        if (d["apiVersion"], d["kind"], d["metadata"]["name"])
        == (target["apiVersion"], target["kind"], target["name"])
    ]
    [container] = workload["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "worker"
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == RECOMMENDED
    # desired replicas = ceil(value / averageValue): the recommendation itself.
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_the_prometheus_adapter_serves_the_hpa_metric():
    values = yaml.safe_load((CONFIGS / "prometheus-adapter.yaml").read_text())
    [rule] = values["rules"]["external"]
    assert re.match(rf"{RECOMMENDED}\b", rule["seriesQuery"])
    assert rule["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
    assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"]
    assert "name" not in rule  # the metric keeps the gauge's name
