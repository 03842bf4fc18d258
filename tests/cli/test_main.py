import subprocess
import sys

import pytest
from click.testing import CliRunner
from zmqdata_cli.main import main

import zmqdata
from zmqdata._version import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION


def test_version_flag_prints_package_and_protocol_versions():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    protocol = f"v{OLDEST_PROTOCOL_VERSION} to v{PROTOCOL_VERSION}"
    assert result.output.splitlines() == [
        f"zmqdata, version {zmqdata.__version__}",
        f"protocol v{PROTOCOL_VERSION} (accepts peers of {protocol})",
    ]


def test_console_script_is_installed():
    completed = subprocess.run(
        [sys.executable, "-m", "zmqdata", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert zmqdata.__version__ in completed.stdout


def _help(command: str) -> str:
    """``zmqdata COMMAND --help``, its lines joined (click wraps them)."""
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize("command", ["status", "worker", "trace"])
def test_help_names_the_local_dispatcher_as_the_default(command):
    shown = _help(command)
    assert "$ZMQDATA_DISPATCHER" in shown
    assert "else 127.0.0.1:5050" in shown


def test_down_says_it_is_an_alias_of_stop():
    assert "Alias of `zmqdata stop`" in _help("down")
    assert "(alias: `zmqdata down`)" in _help("stop")


def test_up_help_says_what_file_holds():
    shown = _help("up")
    assert "FILE is a YAML deployment file" in shown
    assert "docs/deployment.md" in shown
    assert "configs/local.yaml" in shown
