"""The wheel ships every package: pyproject lists each one (it must, to rename cli/).

``python -m build`` makes a wheel and an sdist that each install into a venv
of their own, where ``zmqdata --version`` and a read work.
"""

from __future__ import annotations

import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from zmqdata_cli.main import main

from tests.venvs import Venv, check
from zmqdata._version import __version__

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_directory_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "zmqdata").rglob("__init__.py")
    }
    assert on_disk <= listed, sorted(on_disk - listed)
    assert "zmqdata_cli" in listed
    assert config["tool"]["setuptools"]["package-dir"] == {"zmqdata_cli": "cli"}


READ = """
import zmqdata as zd
from zmqdata import service

print(zd.__file__)
with service.DispatchServer() as dispatcher:
    with service.WorkerServer(service.WorkerConfig(dispatcher.target)):
        ds = zd.Dataset.range(10).apply(
            service.distribute("distributed_epoch", dispatcher.target)
        )
        print(sorted(int(x) for x in ds))
"""
"""A tiny read through an in-process dispatcher and worker."""


@pytest.mark.slow
def test_python_m_build_makes_a_wheel_and_an_sdist_that_install_and_read(tmp_path):
    dist = tmp_path / "dist"
    check(sys.executable, "-m", "build", "--no-isolation", "-o", str(dist), str(ROOT))
    wheel = dist / f"zmqdata-{__version__}-py3-none-any.whl"
    assert sorted(dist.iterdir()) == [wheel, dist / f"zmqdata-{__version__}.tar.gz"]
    # Installed with --no-deps below (offline): the wheel names its dependencies.
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"zmqdata-{__version__}.dist-info/METADATA").decode()
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dependency in required["dependencies"]:
        assert f"Requires-Dist: {dependency}\n" in metadata, dependency
    expected_version = CliRunner().invoke(main, ["--version"]).output
    assert __version__ in expected_version
    for artifact in dist.iterdir():
        venv = Venv.create(tmp_path / artifact.name.replace(".", "-"))
        venv.install(artifact)
        assert venv.run("-m", "zmqdata", "--version") == expected_version
        where, elements = venv.run("-c", READ).splitlines()
        assert where.startswith(str(venv.path)), where
        assert elements == str(list(range(10)))
