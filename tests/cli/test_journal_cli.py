"""The dispatcher daemon and its journal: damage refuses to start, repair, crashes exit."""

from __future__ import annotations

import click
import pytest
from zmqdata_cli._common import serve

from tests.cli.procs import run
from tests.dispatcher.test_journal_damage import damage, write_events
from zmqdata import service


def test_a_damaged_journal_refuses_to_start_until_repaired(tmp_path):
    offsets = write_events(tmp_path)
    damage(tmp_path / "journal-0.log", offsets[3] + 14, b"\xff")
    args = ("dispatcher", "--port", "0", "--fault-tolerant", "--work-dir")
    refused = run(*args, str(tmp_path), timeout=30)
    assert refused.returncode != 0
    assert f"journal-0.log is corrupt at byte {offsets[3]}" in refused.stderr
    assert "--repair-journal" in refused.stderr
    repaired = run(*args, str(tmp_path), "--repair-journal", timeout=30)
    assert repaired.returncode == 0, repaired.stderr
    assert "backed up in journal-0.log.bak-" in repaired.stderr
    assert len(list(tmp_path.glob("journal-0.log.bak-*"))) == 1


def test_a_daemon_whose_loop_dies_exits_with_an_error():
    """A server loop that dies must end the daemon, not leave a zombie."""
    servers: list[service.DispatchServer] = []

    def build() -> service.DispatchServer:
        server = service.DispatchServer()
        # Fault injection: no public way makes the loop's tick raise, so this
        # test swaps the tick method (one attribute store) of the running loop.
        state = server._loop.state

        def broken_tick(now: float) -> list[object]:
            raise RuntimeError("an unexpected bug")

        state.tick = broken_tick  # type: ignore[method-assign]
        servers.append(server)
        return server

    with pytest.raises(click.ClickException, match="an unexpected bug"):
        serve("dispatcher", build, lambda server: server.target)
    assert not servers[0]._loop.running
