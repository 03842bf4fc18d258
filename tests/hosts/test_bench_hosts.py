"""bench/hosts.py at a tiny size: K = 1 and 2 worker hosts, its tables and plot.

The figures of so short a run are not compared (the bench section measures);
this checks that every pass reads its whole epoch from at most K hosts and
that the section's tables and plot come out of what it returns.
"""

from __future__ import annotations

import pytest

from bench import hosts, plots

pytestmark = pytest.mark.timeout(90)

TINY = hosts.Plan(hosts=(1, 2), long=12, short=4, cpu_elements=8, cpu_ms=1.0, warmup=2)


def test_a_tiny_run_reads_each_pass_from_at_most_k_hosts(shaping, tmp_path):
    result = hosts.measure(TINY, hosts.PIPELINES, repeats=1)
    cases = result["cases"]
    assert sorted(cases) == sorted(
        f"{p}/{length}/{c}"
        for p, length in (("link", "long"), ("link", "short"), ("cpu", "pass"))
        for c in ("None", "AUTO")
    )
    for case in cases.values():
        assert sorted(case["k"]) == ["1", "2"]
        assert case["k"]["1"]["vs_one"] == 1.0
        for k, r in case["k"].items():
            [one_pass] = r["passes"]
            assert 1 <= len(one_pass["hosts"]) <= int(k)
            assert sum(count for count, _ in one_pass["hosts"]) == case["elements"]
            assert float(r["rate"]) > 0
            if case["pipeline"] == "link":
                assert one_pass["bytes"] == case["elements"] * hosts.SIZE
    table = hosts.details(result)
    assert table.count("\n| link-bound, long (3 MB) |") == 4
    assert [row[0] for row in hosts.rows(result)] == [
        "many hosts, link-bound 3 MB pass: 2 worker hosts vs 1 (tc, shared cores)",
        "many hosts, link-bound 1 MB pass: 2 worker hosts vs 1 (tc, shared cores)",
        "many hosts, CPU-bound pass: 2 worker hosts vs 1 (tc, shared cores)",
    ]
    pytest.importorskip("matplotlib")
    [png] = plots.write({"hosts": result}, tmp_path, "tiny")
    assert png.name == plots.HOSTS_PNG
    assert png.stat().st_size > 10_000
