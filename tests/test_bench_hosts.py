"""bench/hosts.py without namespaces: the section says why it skips; its helpers."""

from __future__ import annotations

import pytest

from bench import hosts, report
from bench.common import QUICK, Bench

pytestmark = pytest.mark.timeout(20)


def test_without_namespaces_the_section_is_skipped_with_the_reason(monkeypatch, capsys):
    monkeypatch.setenv("ZMQDATA_NO_NETNS", "1")
    result = hosts.hosts(Bench(QUICK, 1, quick=True))
    assert result == {"skipped": "ZMQDATA_NO_NETNS=1 is set"}
    assert "hosts: SKIPPED, ZMQDATA_NO_NETNS=1 is set" in capsys.readouterr().err
    assert hosts.rows(result) == []
    assert "skipped: ZMQDATA_NO_NETNS=1" in report.details({"hosts": result})


def test_unknown_pipelines_and_rates_are_refused():
    with pytest.raises(ValueError, match=r"unknown pipelines \['disk'\]"):
        hosts.hosts(Bench(QUICK, 1), ["link", "disk"])
    with pytest.raises(ValueError, match="not '200kbit'"):
        hosts.mbit("200kbit")


def test_shares_name_each_host_and_the_tail():
    found = hosts.shares([0.5, 1.0, 1.5, 3.0], [11, 22, 11, 11], seconds=3.25)
    assert found["hosts"] == [[3, 3.0], [1, 1.0]]
    assert found["tail_s"] == 2.25  # only host 11 was sending after 1.0 s
    assert found["end_s"] == 0.25
    assert found["first_s"] == 0.5
