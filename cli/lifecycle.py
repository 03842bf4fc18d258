"""``zmqdata up FILE --daemon`` and ``zmqdata stop`` / ``zmqdata down``.

``--daemon`` starts ``zmqdata up`` again as a process of its own session
(no terminal, stdin from /dev/null, stdout and stderr appended to the log
file), writes its pid to the pid file (by default both in ``STATE_DIR``,
which git ignores), and returns once the deployment is
ready (exit 0) or has failed (exit 1, with the log's last lines). The
background ``up`` removes the pid file when it ends. ``zmqdata stop`` sends
it SIGTERM and waits until it is gone (``up`` stops its workers first), or
fails after ``--timeout`` seconds; a pid file whose process is gone (stale)
is reported and removed.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import click
from zmqdata_cli.logs import daemon_logging

from zmqdata._runtime import clock

logger = logging.getLogger("zmqdata.cli")

STATE_DIR = ".zmqdata"
"""Where ``up --daemon`` keeps its pid and log files by default, in the working
directory; it holds a ``.gitignore`` of ``*``, so git ignores it."""
DEFAULT_PID_FILE = f"{STATE_DIR}/zmqdata.pid"
OLD_PID_FILE = "zmqdata.pid"
"""0.1's default pid file: ``zmqdata stop`` still finds a deployment it started."""
READY_TIMEOUT_S = 120.0
READY_LINE = "deployment ready: "
STOP_TIMEOUT_S = 30.0
F = TypeVar("F", bound=Callable[..., Any])


def log_file_for(pid_file: str) -> str:
    """The default log file, next to the pid file.

    >>> log_file_for("/run/zmqdata.pid")
    '/run/zmqdata.log'
    """
    return str(Path(pid_file).with_suffix(".log"))


def read_pid(pid_file: str) -> int | None:
    """The pid in ``pid_file`` (None if missing); a malformed file exits 1."""
    try:
        text = Path(pid_file).read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise click.ClickException(f"cannot read {pid_file}: {error}") from None
    if not text.isdigit() or int(text) <= 0:
        raise click.ClickException(f"{pid_file}: expected a pid, got {text[:40]!r}")
    return int(text)


def is_running(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) ``zmqdata`` process.

    A reused pid (another program now) counts as gone.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        cmdline = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return True  # no /proc: trust kill(0)
    return state != "Z" and b"zmqdata" in cmdline


def _remove(pid_file: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(pid_file)


def _clear_stale(pid_file: str) -> int | None:
    """The pid of a running deployment in ``pid_file``; a stale file is removed."""
    pid = read_pid(pid_file)
    if pid is not None and not is_running(pid):
        logger.warning(
            "stale pid file %s: process %d is gone; removed it", pid_file, pid
        )
        _remove(pid_file)
        return None
    return pid


def own_pid_file(pid_file: str) -> None:
    """Removes ``pid_file`` when this process exits, if it still names it."""
    pid = os.getpid()

    def remove() -> None:
        try:
            if read_pid(pid_file) == pid:
                _remove(pid_file)
        except click.ClickException:
            pass

    atexit.register(remove)


def make_state_dir() -> None:
    """Creates ``STATE_DIR`` with a ``.gitignore`` that keeps it out of git."""
    os.makedirs(STATE_DIR, exist_ok=True)
    ignore = Path(STATE_DIR, ".gitignore")
    if not ignore.exists():
        ignore.write_text("# made by zmqdata up --daemon\n*\n")


def detach(pid_file: str | None, log_file: str | None) -> None:
    """Starts this ``zmqdata up`` command in the background and exits.

    Exits 0 once the background deployment logs that it is ready, 1 if it
    ends first (its log's last lines shown) or is already running.
    ``pid_file`` None: ``DEFAULT_PID_FILE``.
    """
    in_state_dir = pid_file is None
    pid_file = os.path.abspath(pid_file or DEFAULT_PID_FILE)
    log_path = os.path.abspath(log_file or log_file_for(pid_file))
    running = _clear_stale(pid_file)
    if running is not None:
        raise click.ClickException(
            f"a deployment is already running (pid {running}, {pid_file}); "
            "stop it first with: zmqdata stop"
        )
    argv = [*_without_daemon(sys.argv[1:]), "--pid-file", pid_file]
    try:
        if in_state_dir:
            make_state_dir()
        for path in (pid_file, log_path):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(pid_file).touch()
    except OSError as error:
        raise click.ClickException(f"cannot write {error.filename}: {error}") from None
    with open(log_path, "ab") as log:
        start = log.tell()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "zmqdata", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # no terminal: Ctrl-C, hangups don't reach it
                close_fds=True,
            )
        except OSError as error:
            _remove(pid_file)
            raise click.ClickException(
                f"cannot start the deployment: {error}"
            ) from None
    Path(pid_file).write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        text = _read_from(log_path, start)
        if READY_LINE in text:
            click.echo(
                f"zmqdata up: running in the background (pid {proc.pid}); "
                f"logs: {log_path}; stop with: zmqdata stop --pid-file {pid_file}",
                err=True,
            )
            raise click.exceptions.Exit(0)
        if proc.poll() is not None:
            _remove(pid_file)
            tail = "\n".join(text.splitlines()[-10:])
            raise click.ClickException(
                f"the deployment exited with code {proc.returncode} before it "
                f"was ready; the end of {log_path}:\n{tail}"
            )
        clock.sleep(0.1)
    click.echo(
        f"zmqdata up: started in the background (pid {proc.pid}) but not ready "
        f"after {READY_TIMEOUT_S:g} s; see {log_path}",
        err=True,
    )


def _without_daemon(argv: list[str]) -> list[str]:
    """``argv`` less ``--daemon`` and ``--log-file``, for the background ``up``.

    >>> _without_daemon(["up", "f.yaml", "--daemon", "--log-file", "l", "-v"])
    ['up', 'f.yaml', '-v']
    """
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--log-file":
            skip = True
        elif arg != "--daemon" and not arg.startswith("--log-file="):
            kept.append(arg)
    return kept


def _read_from(path: str, offset: int) -> str:
    with open(path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


_pid_file_option = click.option(
    "--pid-file",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"The background deployment's pid file [default: ./{DEFAULT_PID_FILE}].",
)


def daemon_options(command: F) -> F:
    """Adds ``--daemon``, ``--pid-file`` and ``--log-file`` to ``zmqdata up``.

    With ``--daemon``, ``detach`` runs instead of the command; without it, a
    given ``--pid-file`` is removed when the command ends.
    """

    @click.option(
        "--daemon",
        is_flag=True,
        help="Run in the background: write the pid file, log to the log file, "
        "return once ready; stop with zmqdata stop.",
    )
    @_pid_file_option
    @click.option(
        "--log-file",
        type=click.Path(dir_okay=False),
        default=None,
        help="Where --daemon logs (appended) [default: the pid file with .log].",
    )
    @functools.wraps(command)
    def run(
        *args: Any,
        daemon: bool,
        pid_file: str | None,
        log_file: str | None,
        **kwargs: Any,
    ) -> Any:
        if daemon:
            detach(pid_file, log_file)
            return None
        if log_file is not None:
            raise click.UsageError("--log-file needs --daemon")
        if pid_file is not None:
            own_pid_file(pid_file)
        return command(*args, **kwargs)

    return run  # type: ignore[return-value]


@click.command()
@_pid_file_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=STOP_TIMEOUT_S,
    show_default=True,
    help="Fail if the deployment has not stopped after this many seconds.",
)
@daemon_logging()  # type: ignore[untyped-decorator]
def stop(pid_file: str | None, timeout: float) -> None:
    """Stop a deployment started with `zmqdata up --daemon` (alias: `zmqdata down`)."""
    pid_file = pid_file or _default_pid_file()
    if read_pid(pid_file) is None:
        raise click.ClickException(
            f"no pid file {pid_file}: nothing started with zmqdata up --daemon "
            "here (pass --pid-file)"
        )
    pid = _clear_stale(pid_file)
    if pid is None:
        return
    logger.info("stopping the deployment (pid %d)", pid)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_running(pid):
        if time.monotonic() >= deadline:
            raise click.ClickException(
                f"the deployment (pid {pid}) did not stop within {timeout:g} s; "
                f"it is still running (kill -9 {pid} to force)"
            )
        clock.sleep(0.1)
    _remove(pid_file)
    logger.info("deployment stopped (pid %d)", pid)


def _default_pid_file() -> str:
    """``DEFAULT_PID_FILE``, else 0.1's ``OLD_PID_FILE`` if only that one exists."""
    if not os.path.exists(DEFAULT_PID_FILE) and os.path.exists(OLD_PID_FILE):
        return OLD_PID_FILE
    return DEFAULT_PID_FILE


down = click.Command(
    "down",
    callback=stop.callback,
    params=stop.params,
    help="Alias of `zmqdata stop`: stop a deployment started with "
    "`zmqdata up --daemon`.",
)
"""``zmqdata down``: ``zmqdata stop`` under another name, saying so in its help."""
