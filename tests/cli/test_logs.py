"""Daemon logs: a timestamp and a level on every line, role logger names, levels,
JSON lines, tags, ``-v`` on either side of the command, help on every option."""

import io
import json
import re
import signal

import click
import pytest
from zmqdata_cli.main import main

from tests.cli.procs import run, zmqdata
from tests.helpers import poll_for
from tests.service.cluster import free_port
from zmqdata import service
from zmqdata.errors import UnavailableError

pytestmark = pytest.mark.timeout(60)

ROLES = ("zmqdata.dispatcher", "zmqdata.worker", "zmqdata.client", "zmqdata.cli")
LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(zmqdata\.[a-z]+)( \[[^\]]+\])?: \S"
)


def check_lines(lines: list[str]) -> set[str]:
    """The logger names of ``lines``; fails on a line without timestamp and level."""
    names = set()
    for line in lines:
        match = LINE.match(line)
        assert match, f"not a log line: {line!r}"
        names.add(match.group(2))
    assert names <= set(ROLES), names
    return names


def test_every_line_of_dispatcher_and_worker_has_time_level_and_role():
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = dispatcher.wait_for_line(r"dispatcher ready: (\S+)$").group(1)
        with zmqdata("worker", "--dispatcher", target) as worker:
            worker.wait_for_line(r"worker ready: ")
            assert worker.stop() == 0
        assert dispatcher.stop() == 0
    assert "zmqdata.dispatcher" in check_lines(dispatcher.lines)
    assert "zmqdata.worker" in check_lines(worker.lines)
    assert any("worker bound tcp://" in line for line in worker.lines)
    registering = "worker started, registering with the dispatcher at " + target
    assert any(registering in line for line in worker.lines)


def test_a_configuration_error_is_a_log_line():
    completed = run("dispatcher", "--port", "70000")
    assert completed.returncode == 1
    (line,) = completed.stderr.splitlines()
    assert check_lines([line]) == {"zmqdata.cli"}
    assert " ERROR zmqdata.cli: bad dispatcher configuration: " in line


def test_json_lines_carry_time_level_logger_message_and_tag():
    env = ["env", "ZMQDATA_LOG_TAG=node-7"]
    with zmqdata(
        "dispatcher", "--port", "0", "--log-format", "json", prefix=env
    ) as dispatcher:
        dispatcher.wait_for_line(r'"message": "dispatcher ready: ')
        assert dispatcher.stop() == 0
    records = [json.loads(line) for line in dispatcher.lines]
    for record in records:
        assert set(record) == {"time", "level", "logger", "message", "tag"}, record
        assert record["tag"] == "node-7"
        assert record["logger"] in ROLES
    assert records[-1]["message"] == "dispatcher stopped"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}", records[0]["time"])


def test_text_lines_carry_the_tag():
    env = ["env", "ZMQDATA_LOG_TAG=worker-3"]
    with zmqdata("dispatcher", "--port", "0", prefix=env) as dispatcher:
        dispatcher.wait_for_line("dispatcher ready: ")
        assert dispatcher.stop() == 0
    assert all(" [worker-3]: " in line for line in dispatcher.lines)


def test_log_level_warning_hides_info():
    port = free_port()

    def answers() -> bool:  # a loaded machine may take over 1 s to start it
        try:
            return bool(service.get_status(f"127.0.0.1:{port}", timeout_s=1))
        except UnavailableError:
            return False

    with zmqdata("dispatcher", "--port", str(port), "--log-level", "WARNING") as proc:
        poll_for(answers, 20)
        assert proc.stop() == 0
    assert proc.lines == []


@pytest.mark.parametrize(
    "args",
    [["-v", "dispatcher", "--port", "0"], ["dispatcher", "--port", "0", "-v"]],
    ids=["before", "after"],
)
def test_verbose_before_or_after_the_command(args):
    with zmqdata(*args) as proc:
        proc.wait_for_line(r" DEBUG zmqdata\.cli: logging at DEBUG")
        proc.wait_for_line(r"dispatcher ready: ")  # stops cleanly once serving
        assert proc.stop() == 0


def test_up_tags_its_dispatcher_and_passes_the_format_to_its_workers(tmp_path):
    config = tmp_path / "up.yaml"
    config.write_text("dispatcher: {port: 0}\nworker: {heartbeat_interval_ms: 100}\n")
    with zmqdata("up", str(config), "--log-format", "json") as up:
        up.wait_for_line(r"deployment ready: ")
        assert up.stop(signal.SIGINT) == 0
    records = [json.loads(line) for line in up.lines]
    ours = [r for r in records if r.get("tag") == "dispatcher"]
    assert any(r["message"].startswith("deployment ready: ") for r in ours)
    assert any(r["logger"] == "zmqdata.worker" for r in records)  # a child's


def test_no_progress_carriage_returns_outside_a_terminal(monkeypatch):
    from examples import demo

    stream = io.StringIO()  # not a terminal
    monkeypatch.setattr("sys.stderr", stream)
    demo.progress(5, 10, 0.0, 1)
    assert stream.getvalue() == ""


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = [group]
    for command in group.commands.values():
        if isinstance(command, click.Group):
            found += _commands(command)
        else:
            found.append(command)
    return found


def test_every_option_has_help_text():
    missing = [
        f"{command.name} {'/'.join(param.opts)}"
        for command in _commands(main)
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    assert missing == []
    assert {"stop", "down"} <= set(main.commands)
