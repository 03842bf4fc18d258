"""The import contract: packages form layers, and the dispatcher state needs no zmq.

A module may import its own unit and the units of lower layers, never those of
its own layer or above (docs/architecture.md, "Layout"). Every import counts,
the ones inside functions and under ``TYPE_CHECKING`` included.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS: list[set[str]] = [
    {"zmqdata.errors", "zmqdata._version"},
    {"zmqdata._wire"},
    {"zmqdata._dataset"},
    {"zmqdata._config"},
    {"zmqdata._runtime"},
    {"zmqdata._dispatcher", "zmqdata._worker", "zmqdata._client", "zmqdata._adapters"},
    {"zmqdata.service", "zmqdata.torch", "zmqdata.jax"},
    {"zmqdata"},
    {"zmqdata_cli"},
]
"""Lowest first. ``zmqdata`` is the package's own ``__init__``; ``zmqdata_cli``
(the ``cli/`` directory) also holds ``python -m zmqdata`` (``__main__``)."""
RANK = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}


def unit_of(module: str) -> str:
    """The layer unit a dotted module name belongs to."""
    if module == "zmqdata.__main__" or module.startswith("zmqdata_cli"):
        return "zmqdata_cli"
    parts = module.split(".")
    return ".".join(parts[:2]) if ".".join(parts[:2]) in RANK else parts[0]


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the package and of the command line, by dotted name."""
    for directory, package in (
        (ROOT / "zmqdata", "zmqdata"),
        (ROOT / "cli", "zmqdata_cli"),
    ):
        for path in sorted(directory.rglob("*.py")):
            parts = path.relative_to(directory).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((package, *parts)), path


def imported_units(path: Path) -> Iterator[tuple[str, int]]:
    """The units of this project that ``path`` imports, with their line."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: a relative import"
            base = node.module or ""
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in ("zmqdata", "zmqdata_cli"):
                yield unit_of(name), node.lineno


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(name) for name, _ in modules()}
    assert units == set(RANK), sorted(units ^ set(RANK))


def test_lower_layers_never_import_higher_ones() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {unit_of(name)} imports {unit}"
        for name, path in modules()
        for unit, line in imported_units(path)
        if unit != unit_of(name) and RANK[unit] >= RANK[unit_of(name)]
    ]
    assert not wrong, "\n".join(wrong)


BLOCK_ZMQ = """
import importlib, importlib.abc, sys

class RefuseZmq(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "zmq" or name.startswith("zmq."):
            raise ImportError("zmq is blocked")
        return None

sys.meta_path.insert(0, RefuseZmq())
importlib.import_module(sys.argv[1])
"""


@pytest.mark.parametrize(
    "module", ["zmqdata._dispatcher.state", "zmqdata._worker.control_core", "zmqdata"]
)
def test_imports_without_zmq(module: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", BLOCK_ZMQ, module],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 0, run.stderr
