"""Deployment files: YAML with ``dispatcher:``, ``worker:`` and ``workers:`` keys.

The fields of ``dispatcher:`` and ``worker:`` are exactly the fields of
``DispatcherConfig`` and ``WorkerConfig``; their values are checked by building
those dataclasses, and any error is reported with its key path::

    dispatcher.port: expected int, got 'abc'

Environment variables ``ZMQDATA_<SECTION>__<FIELD>`` (and ``ZMQDATA_WORKERS``)
override the file (``with_env``); their values are read as YAML scalars and
checked the same way, the error naming the variable.

>>> deployment = parse("{dispatcher: {port: 5050}, workers: 2}")
>>> deployment.workers, dispatcher_config(deployment.dispatcher).port
(2, 5050)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from zmqdata._config import DispatcherConfig, WorkerConfig

SECTIONS = {"dispatcher": DispatcherConfig, "worker": WorkerConfig}
TOP_LEVEL_KEYS = ("dispatcher", "worker", "workers")
ENV_PREFIX = "ZMQDATA_"
WORKERS_ENV = "ZMQDATA_WORKERS"
# Stands in for a missing ``worker.dispatcher_address`` while the rest is checked.
_PLACEHOLDER_ADDRESS = "127.0.0.1:1"


class ConfigError(ValueError):
    """A deployment file (or a flag overriding it) is invalid; the message is one line."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """A loaded deployment file: validated raw sections and the worker count."""

    dispatcher: dict[str, Any] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)
    workers: int = 1
    path: str | None = None
    from_env: tuple[str, ...] = ()
    """The environment variables that overrode the file (``with_env``)."""


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _rewrite(error: Exception, section: str, cls: type) -> ConfigError:
    """``DispatcherConfig.port: ...`` -> ``dispatcher.port: ...``."""
    text = str(error)
    text = re.sub(rf"^{cls.__name__}\.", f"{section}.", text)
    text = re.sub(rf"^{cls.__name__}:", f"{section}:", text)
    return ConfigError(text)


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _section(name: str, raw: Any) -> dict[str, Any]:
    cls = SECTIONS[name]
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: expected a mapping, got {_type_name(raw)}")
    known = _field_names(cls)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{name}.{key}: unknown key (known: {', '.join(known)})")
        values[key] = tuple(value) if isinstance(value, list) else value
    return values


def _build(section: str, cls: type, values: dict[str, Any]) -> Any:
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise _rewrite(error, section, cls) from None


def dispatcher_config(section: dict[str, Any], **overrides: Any) -> DispatcherConfig:
    """A ``DispatcherConfig`` from a ``dispatcher:`` section, flags overriding it.

    ``None`` overrides are ignored (a flag that was not given).
    """
    values = {**section, **{k: v for k, v in overrides.items() if v is not None}}
    config: DispatcherConfig = _build("dispatcher", DispatcherConfig, values)
    return config


def worker_config(section: dict[str, Any], **overrides: Any) -> WorkerConfig:
    """A ``WorkerConfig`` from a ``worker:`` section, flags overriding it.

    Raises ``ConfigError`` if no ``dispatcher_address`` is given either way.
    """
    values = {**section, **{k: v for k, v in overrides.items() if v is not None}}
    if values.get("dispatcher_address") is None:
        raise ConfigError(
            "a dispatcher address is required "
            "(--dispatcher ADDRESS or worker.dispatcher_address)"
        )
    config: WorkerConfig = _build("worker", WorkerConfig, values)
    return config


def parse(text: str, source: str = "<string>") -> Deployment:
    """Parses and validates the text of a deployment file."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(
            f"{source}: expected a mapping with keys {', '.join(TOP_LEVEL_KEYS)} "
            f"at the top level, got {_type_name(document)}"
        )
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(
                f"{key}: unknown key (known: {', '.join(TOP_LEVEL_KEYS)})"
            )
    dispatcher = _section("dispatcher", document.get("dispatcher"))
    worker = _section("worker", document.get("worker"))
    return _checked(dispatcher, worker, document.get("workers", 1), source)


def _checked(
    dispatcher: dict[str, Any],
    worker: dict[str, Any],
    workers: Any,
    source: str | None,
    from_env: tuple[str, ...] = (),
) -> Deployment:
    """The deployment, once every value is checked (so bad ones fail at load time)."""
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise ConfigError(f"workers: expected int, got {workers!r}")
    if workers < 0:
        raise ConfigError(f"workers: expected an int >= 0, got {workers!r}")
    dispatcher_config(dispatcher)
    worker_config({"dispatcher_address": _PLACEHOLDER_ADDRESS, **worker})
    return Deployment(dispatcher, worker, workers, source, from_env)


def _env_value(text: str) -> Any:
    """A variable's value read as YAML (``6000`` an int, ``true`` a bool, ``[a, b]`` a list)."""
    try:
        return yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        return text


def _key_path(name: str) -> str:
    """``ZMQDATA_DISPATCHER__PORT`` -> ``dispatcher.port`` (``ZMQDATA_WORKERS`` -> ``workers``)."""
    if name == WORKERS_ENV:
        return "workers"
    section, _, key = name[len(ENV_PREFIX) :].partition("__")
    return f"{section.lower()}.{key.lower()}"


def with_env(deployment: Deployment, environ: Mapping[str, str]) -> Deployment:
    """``deployment`` with ``ZMQDATA_<SECTION>__<FIELD>`` and ``ZMQDATA_WORKERS`` over it.

    Raises ``ConfigError`` naming the key path and the variable.

    >>> env = {"ZMQDATA_DISPATCHER__PORT": "6000", "ZMQDATA_WORKERS": "3"}
    >>> deployment = with_env(Deployment(), env)
    >>> deployment.dispatcher, deployment.workers, deployment.from_env
    ({'port': 6000}, 3, ('ZMQDATA_DISPATCHER__PORT', 'ZMQDATA_WORKERS'))
    >>> with_env(Deployment(), {"ZMQDATA_DISPATCHER__PORT": "abc"})
    Traceback (most recent call last):
    ...
    zmqdata._runtime.yaml_config.ConfigError: dispatcher.port: expected int, got 'abc' (from ZMQDATA_DISPATCHER__PORT)
    """
    names = sorted(
        name
        for name in environ
        if name == WORKERS_ENV or (name.startswith(ENV_PREFIX) and "__" in name)
    )
    if not names:
        return deployment
    sections = {
        "dispatcher": dict(deployment.dispatcher),
        "worker": dict(deployment.worker),
    }
    workers: Any = deployment.workers
    try:
        for name in names:
            path = _key_path(name)
            value = _env_value(environ[name])
            if path == "workers":
                workers = value
                continue
            section, _, key = path.partition(".")
            if section not in sections:
                raise ConfigError(
                    f"{section}: unknown section (known: {', '.join(SECTIONS)})"
                )
            sections[section].update(_section(section, {key: value}))
        return _checked(
            sections["dispatcher"],
            sections["worker"],
            workers,
            deployment.path,
            (*deployment.from_env, *names),
        )
    except ConfigError as error:
        raise ConfigError(f"{error}{_blame(str(error), names)}") from None


def _blame(message: str, names: list[str]) -> str:
    """`` (from ZMQDATA_X)`` for the variable whose key path starts ``message``."""
    for name in names:
        path = _key_path(name)
        if message.startswith((f"{path}:", f"{path.partition('.')[0]}:")):
            return f" (from {name})"
    return f" (with {', '.join(names)} set)"


def load(path: str | Path) -> Deployment:
    """Reads and validates a deployment file; raises ``ConfigError`` (one line)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    return parse(text, str(path))
