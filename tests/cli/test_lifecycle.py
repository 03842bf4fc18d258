"""``zmqdata up --daemon`` then ``zmqdata stop`` / ``down``: pid file, log file,
every process gone; stale pid files reported and removed."""

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from tests.cli.procs import run
from tests.helpers import poll_for
from zmqdata import service

pytestmark = pytest.mark.timeout(90)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with suppress(OSError):
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    return True


def _killed_at_end(path: Path) -> Iterator[Path]:
    """``path``, a pid file; whatever it names at the end is killed with its group."""
    yield path
    with suppress(OSError, ValueError):
        os.killpg(int(path.read_text()), signal.SIGKILL)


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    """A pid file path, passed as ``--pid-file``."""
    yield from _killed_at_end(tmp_path / "run" / "zd.pid")


@pytest.fixture
def default_pid_file(tmp_path: Path) -> Iterator[Path]:
    """The default pid file of ``zmqdata up --daemon`` run in ``tmp_path``."""
    yield from _killed_at_end(tmp_path / ".zmqdata" / "zmqdata.pid")


def _config(tmp_path: Path, workers: int = 2) -> str:
    config = tmp_path / "up.yaml"
    config.write_text(
        "dispatcher: {port: 0}\n"
        "worker: {heartbeat_interval_ms: 100}\n"
        f"workers: {workers}\n"
    )
    return str(config)


def test_up_daemon_then_stop_leaves_nothing_running(tmp_path, default_pid_file):
    """With the default pid file: in .zmqdata/, which git ignores, with the log."""
    pid_file = default_pid_file
    here = ["env", "-C", str(tmp_path)]
    started = run("up", _config(tmp_path), "--daemon", timeout=60, prefix=here)
    assert started.returncode == 0, started.stderr
    assert "running in the background" in started.stderr
    assert sorted(os.listdir(tmp_path)) == [".zmqdata", "up.yaml"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    untracked = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert untracked.stdout.splitlines() == ["?? up.yaml"]
    pid = int(pid_file.read_text())
    log = pid_file.with_suffix(".log").read_text()
    target = re.search(r"deployment ready: dispatcher (\S+),", log).group(1)
    workers = [int(p) for p in re.findall(r"worker \d started \(pid (\d+)\)", log)]
    assert len(workers) == 2
    assert len(service.get_status(target)["workers"]) == 2
    assert all(map(_alive, [pid, *workers]))

    again = run("up", _config(tmp_path), "--daemon", prefix=here)
    assert again.returncode == 1
    assert f"already running (pid {pid}" in again.stderr

    stopped = run("stop", prefix=here)
    assert stopped.returncode == 0, stopped.stderr
    assert f"deployment stopped (pid {pid})" in stopped.stderr
    assert not pid_file.exists()
    assert not any(map(_alive, [pid, *workers]))
    assert "deployment stopped" in pid_file.with_suffix(".log").read_text()


def test_a_daemon_that_fails_to_start_reports_it(tmp_path, pid_file):
    config = tmp_path / "bad.yaml"
    config.write_text("dispatcher: {host: 0.0.0.0}\nworkers: 0\n")  # no keys
    log = tmp_path / "bad.log"
    started = run(
        "up", str(config), "--daemon", "--pid-file", str(pid_file),
        "--log-file", str(log),
    )  # fmt: skip
    assert started.returncode == 1
    assert "exited with code 1 before it was ready" in started.stderr
    assert "refusing to bind" in started.stderr  # the log's tail
    assert "refusing to bind" in log.read_text()
    assert not pid_file.exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("command", ["stop", "down"])
def test_a_stale_pid_file_is_reported_and_removed(pid_file, command):
    pid_file.parent.mkdir()
    pid = _dead_pid()
    pid_file.write_text(f"{pid}\n")
    completed = run(command, "--pid-file", str(pid_file))
    assert completed.returncode == 0, completed.stderr
    assert f"stale pid file {pid_file}: process {pid} is gone" in completed.stderr
    assert not pid_file.exists()


def test_stop_finds_the_pid_file_of_0_1_in_the_working_directory(tmp_path):
    old = tmp_path / "zmqdata.pid"  # 0.1's default; --daemon now uses .zmqdata/
    pid = _dead_pid()
    old.write_text(f"{pid}\n")
    completed = run("stop", prefix=["env", "-C", str(tmp_path)])
    assert completed.returncode == 0, completed.stderr
    assert f"stale pid file zmqdata.pid: process {pid} is gone" in completed.stderr
    assert not old.exists()


def test_stop_without_a_pid_file_fails_with_one_line(tmp_path):
    completed = run("stop", "--pid-file", str(tmp_path / "none.pid"))
    assert completed.returncode == 1
    (line,) = completed.stderr.splitlines()
    assert "no pid file" in line
    assert " ERROR zmqdata.cli: " in line


def test_stop_gives_up_after_its_timeout(pid_file):
    pid_file.parent.mkdir()
    # A "zmqdata" process that ignores SIGTERM (its name passes the pid check).
    code = "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code += "print('zmqdata', flush=True); sys.stdin.read()"
    stubborn = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert stubborn.stdout.readline() == b"zmqdata\n"
        pid_file.write_text(str(stubborn.pid))
        completed = run("stop", "--pid-file", str(pid_file), "--timeout", "0.5")
        assert completed.returncode == 1
        assert "did not stop within 0.5 s" in completed.stderr
        assert pid_file.exists()
    finally:
        stubborn.kill()
        stubborn.wait()
        stubborn.stdin.close()
        stubborn.stdout.close()
    poll_for(lambda: not _alive(stubborn.pid), 5)
