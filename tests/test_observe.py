"""observe.plot and observe.report from hand-made status dicts (pure, Agg)."""

from __future__ import annotations

import sys

import matplotlib
import pytest

from tests import job_status as js
from zmqdata import observe

matplotlib.use("Agg")


def bar_widths(ax) -> list[float]:
    return [round(patch.get_width(), 3) for patch in ax.patches]


def test_plot_draws_op_shares_busy_and_rank_waits_under_the_verdict():
    figure = observe.plot(js.status(js.job()))
    ops_ax, ranks_ax = figure.axes
    assert [t.get_text() for t in ops_ax.get_yticklabels()] == [
        "range",
        "map(load)",
        "batch",
    ]
    assert bar_widths(ops_ax) == [0.025, 0.78, 0.1]  # own_s / 20 (tests/job_status)
    assert [t.get_text() for t in ops_ax.texts] == ["busy 96%"]  # the threaded op
    assert [t.get_text() for t in ranks_ax.get_xticklabels()] == ["0", "1"]
    assert [round(p.get_height(), 2) for p in ranks_ax.patches] == [0.41, 0.05]
    straggler = ranks_ax.patches[1].get_facecolor()
    assert straggler != ranks_ax.patches[0].get_facecolor()
    assert [t.get_text() for t in ranks_ax.get_legend().get_texts()] == ["straggler"]
    titles = [text.get_text() for text in figure.texts]
    assert titles == ["train: input-bound: map(load) uses 78% of worker time"]
    bottleneck, other = ops_ax.patches[1], ops_ax.patches[0]
    assert bottleneck.get_facecolor() != other.get_facecolor()


def test_plot_saves_a_png(tmp_path):
    path = tmp_path / "train.png"
    observe.plot(js.status(js.job())).savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_draws_on_given_axes_and_shows_what_is_missing():
    from matplotlib.figure import Figure

    given = Figure()
    axes = given.subplots(1, 2)
    old = {"job_id": 5, "job_name": None}  # a job from workers without the keys
    figure = observe.plot(js.status(old), ax=axes)
    assert figure is given
    assert [t.get_text() for ax in axes for t in ax.texts] == [
        "no per-op statistics",
        "no consumers",
    ]
    assert [text.get_text() for text in figure.texts] == ["#5"]
    with pytest.raises(TypeError, match="pair of matplotlib Axes"):
        observe.plot(js.status(old), ax=axes[0])


def test_the_only_job_else_the_busiest_else_the_one_named():
    quiet = js.job("quiet", 1, elements_per_s=1.0)
    busy = js.job("busy", 2, elements_per_s=900.0)
    status = js.status(quiet, busy)
    assert observe.find_job(status)["job_name"] == "busy"
    assert observe.find_job(status, "quiet") is quiet
    assert observe.find_job(js.status(quiet))["job_name"] == "quiet"
    unnamed = js.job(None, 7)
    assert observe.find_job(js.status(busy, unnamed), "#7") is unnamed
    with pytest.raises(ValueError, match=r"no job 'gone' .*'quiet', 'busy'"):
        observe.report(status, "gone")
    with pytest.raises(ValueError, match="no job 'gone'"):
        observe.plot(status, "gone")
    with pytest.raises(ValueError, match="no jobs"):
        observe.report(js.status())
    with pytest.raises(TypeError, match="job_name must be a str"):
        observe.report(status, 2)  # type: ignore[arg-type]


def test_report_lists_every_op_phase_rank_and_worker_and_marks_stragglers():
    text = observe.report(js.status(js.job()))
    lines = text.splitlines()
    for op in ("range", "map(load)", "batch"):
        assert any(line.split()[1:2] == [op] for line in lines), op
    assert "phases: ops 90%, encode 5%, splits 1%, blocked 4%" in lines
    ranks = lines[lines.index("consumers") + 2 :][:2]
    assert ranks[0].split() == ["0", "7", "41%", "120", "3"]
    assert ranks[1].split() == ["1", "8", "5%", "60", "40", "STRAGGLER"]
    assert lines[-1].split() == ["1", "127.0.0.1:4000", "250"]
    assert lines[0] == js.job()["bottleneck"]["line"]
    map_line = next(line for line in lines[1:] if line.split()[1:2] == ["map(load)"])
    expected = "1 map(load) 15.6s 78% 96% 4 1.5s 1001 100"
    assert map_line.split() == expected.split()


def test_report_of_a_job_without_the_keys_says_none():
    text = observe.report(js.status({"job_id": 5, "job_name": "old"}))
    assert text.splitlines() == [
        "ops (own time, summed over the job's workers): none",
        "phases: none",
        "consumers: none",
        "workers: none",
    ]


def test_plot_without_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'zmqdata\[plot\]'"):
        observe.plot(js.status(js.job()))


def test_an_address_is_asked_for_its_status(monkeypatch):
    from zmqdata import service

    asked = []

    def get_status(target):
        asked.append(target)
        return js.status(js.job())

    monkeypatch.setattr(service, "get_status", get_status)
    assert "map(load)" in observe.report("dispatcher:5050")
    assert asked == ["dispatcher:5050"]
