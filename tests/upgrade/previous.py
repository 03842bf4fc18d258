"""The previous release, built from git into a virtualenv of its own (cached).

``PREVIOUS_RELEASE`` is a commit of main, named here because tags may not
travel with clones. It is built into a wheel (``git worktree`` of the commit,
``pip wheel --no-deps``) and installed into a ``tests.venvs.Venv`` under
``build/previous-<commit>/``: its zmqdata, this checkout's dependencies.
Built once per commit (about 3 s), offline. A clone without the commit (a
shallow one) skips the tests that need it, saying why.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.venvs import Venv, check

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "7ffa3c3d977c7760fa18ef1ed8ffb8104616c61c"
"""main as it was before protocol v6 (tagged v0.1.0)."""
PREVIOUS_VERSION = "0.1.0"
PREVIOUS_PROTOCOL = 5


def previous_release() -> Venv:
    """The previous release, built and installed if not yet (skips without it)."""
    home = ROOT / "build" / f"previous-{PREVIOUS_RELEASE[:12]}"
    home.mkdir(parents=True, exist_ok=True)
    with _locked(home / ".lock"):
        if not (home / "installed").exists():
            _build(home / "venv")
            (home / "installed").write_text(PREVIOUS_RELEASE + "\n")
    return Venv(home / "venv")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder at a time (parallel test runs share the cache)."""
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _build(venv: Path) -> None:
    if _git("cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}").returncode != 0:
        pytest.skip(
            f"SKIPPED LOUDLY: the previous release {PREVIOUS_RELEASE} is not in this "
            "clone (a shallow clone? `git fetch --unshallow`): no upgrade test ran"
        )
    with tempfile.TemporaryDirectory(prefix="zmqdata-previous-") as temporary:
        source, wheels = Path(temporary) / "source", Path(temporary) / "wheels"
        added = _git("worktree", "add", "--detach", str(source), PREVIOUS_RELEASE)
        assert added.returncode == 0, added.stderr
        try:
            check(
                sys.executable, "-m", "pip", "wheel", "--no-deps",
                "--no-build-isolation", "--quiet", "-w", str(wheels), str(source),
            )  # fmt: skip
        finally:
            _git("worktree", "remove", "--force", str(source))
        [wheel] = wheels.glob("zmqdata-*.whl")
        shutil.rmtree(venv, ignore_errors=True)  # a build cut short
        Venv.create(venv).install(wheel)
