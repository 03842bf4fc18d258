"""Upgrade tests: the previous release, built once per session (and cached)."""

from __future__ import annotations

import pytest

from tests.upgrade.previous import previous_release
from tests.venvs import Venv


@pytest.fixture(scope="session")
def previous() -> Venv:
    """The previous release's venv (``previous.py``); skips in a shallow clone."""
    return previous_release()
