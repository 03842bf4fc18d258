"""Log lines of the ``zmqdata`` commands: a timestamp, a level, a logger, a tag.

Every line a daemon prints goes through ``logging`` (the "ready" line and the
one-line errors too), as text::

    2026-11-23 00:52:01,204 INFO zmqdata.dispatcher [dispatcher]: dispatcher ready: ...

or with ``--log-format json`` one JSON object per line (``time``, ``level``,
``logger``, ``message`` and ``tag`` when set). ``ZMQDATA_LOG_TAG`` tags every
line of the process.

>>> import json
>>> record = logging.LogRecord("zmqdata.cli", logging.INFO, "", 0, "hi", None, None)
>>> json.loads(JsonFormatter("worker-0").format(record))["tag"]
'worker-0'
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
TAG_ENV = "ZMQDATA_LOG_TAG"
LEVEL_ENV = "ZMQDATA_LOG_LEVEL"
FORMAT_ENV = "ZMQDATA_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s{tag}: %(message)s"

logger = logging.getLogger("zmqdata.cli")
F = TypeVar("F", bound=Callable[..., Any])


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, tag."""

    def __init__(self, tag: str | None) -> None:
        super().__init__()
        self.tag = tag

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.tag:
            line["tag"] = self.tag
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at each line (test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(
    level: str = "INFO", fmt: str = "text", tag: str | None = None
) -> None:
    """Sends every log line of the process to stderr, formatted.

    Replaces the handler of an earlier call (the group's, then the
    command's); ``tag`` defaults to ``ZMQDATA_LOG_TAG``.
    """
    tag = os.environ.get(TAG_ENV) or tag
    handler = _Stderr()
    if fmt == "json":
        handler.setFormatter(JsonFormatter(tag))
    else:
        handler.setFormatter(
            logging.Formatter(TEXT_FORMAT.format(tag=f" [{tag}]" if tag else ""))
        )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def daemon_logging(tag: str | None = None, propagate: bool = False) -> Callable[[F], F]:
    """Adds ``-v``, ``--log-level`` and ``--log-format`` to a daemon command.

    The command's logging is set up before it runs, and its one-line errors
    (``click.ClickException``) are logged at ERROR (exit 1) instead of
    printed bare. ``propagate`` passes the level and format to child
    processes (``zmqdata up``'s workers) through ``ZMQDATA_LOG_LEVEL`` and
    ``ZMQDATA_LOG_FORMAT``; ``tag`` is the process's tag without
    ``ZMQDATA_LOG_TAG``.
    """

    def decorate(command: F) -> F:
        @click.option(
            "-v",
            "--verbose",
            is_flag=True,
            help="Log at DEBUG level (= --log-level DEBUG).",
        )
        @click.option(
            "--log-level",
            type=click.Choice(LEVELS, case_sensitive=False),
            envvar=LEVEL_ENV,
            default=None,
            help=f"Lowest level logged [env {LEVEL_ENV}; default: INFO].",
        )
        @click.option(
            "--log-format",
            type=click.Choice(FORMATS),
            envvar=FORMAT_ENV,
            default=None,
            help="text: one line per event; json: one JSON object per line "
            f"(time, level, logger, message, tag) [env {FORMAT_ENV}; default: text].",
        )
        @functools.wraps(command)
        def run(
            *args: Any,
            verbose: bool,
            log_level: str | None,
            log_format: str | None,
            **kwargs: Any,
        ) -> Any:
            verbose = verbose or bool(
                click.get_current_context().find_root().params.get("verbose")
            )
            level = "DEBUG" if verbose else (log_level or "INFO").upper()
            fmt = log_format or "text"
            configure_logging(level, fmt, tag)
            logger.debug("logging at %s, format %s", level, fmt)
            if propagate:
                os.environ[LEVEL_ENV], os.environ[FORMAT_ENV] = level, fmt
            try:
                return command(*args, **kwargs)
            except click.UsageError:
                raise
            except click.ClickException as error:
                logger.error("%s", error.format_message())
                raise click.exceptions.Exit(error.exit_code) from None

        return run  # type: ignore[return-value]

    return decorate


def verbose_option(command: F) -> F:
    """Adds ``-v`` (DEBUG logs) after a non-daemon command, as before it."""

    def on_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if value:
            configure_logging("DEBUG")

    option = click.option(
        "-v",
        "--verbose",
        is_flag=True,
        expose_value=False,
        callback=on_verbose,
        help="Log at DEBUG level.",
    )
    return option(command)
