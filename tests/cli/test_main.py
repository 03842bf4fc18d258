import subprocess
import sys

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
