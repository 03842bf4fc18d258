"""Reading the log records a test captured (``caplog``), from any thread."""

from __future__ import annotations

import logging

import pytest


def warnings_from(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    """The messages of the WARNING records ``logger`` emitted so far."""
    return [
        record.getMessage()
        for record in list(caplog.records)
        if record.name == logger and record.levelno == logging.WARNING
    ]
