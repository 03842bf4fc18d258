"""The ``zmqdata status`` tables from a fixed status dict (no daemons)."""

import re

import pytest
from zmqdata_cli.status_view import (
    buffer_fill,
    human_bytes,
    human_count,
    human_duration,
    render,
)

MiB = 2**20

STATUS = {
    "version": "9.9.9",
    "uptime_s": 3723.0,
    "worker_timeout_s": 10.0,
    "workers": [
        {
            "worker_id": 1,
            "address": "10.0.0.11:5051",
            "tags": ["gpu", "fast"],
            "num_tasks": 2,
            "elements_per_s": 12_345.0,
            "bytes_per_s": 45.5 * MiB,
            "buffer": {
                "elements": 120,
                "bytes": int(7.5 * MiB),
                "capacity_elements": 1024,
                "capacity_bytes": 64 * MiB,
            },
            "heartbeat_age_s": 0.42,
            "heartbeat_interval_s": 1.0,
            "stats": {"elements": 1, "tasks": []},
        },
        {
            "worker_id": 2,
            "address": "10.0.0.12:5051",
            "tags": [],
            "num_tasks": 0,
            "elements_per_s": 0.0,
            "bytes_per_s": 0.0,
            "buffer": {
                "elements": 0,
                "bytes": 0,
                "capacity_elements": 0,
                "capacity_bytes": 0,
            },
            "heartbeat_age_s": 6.3,
            "heartbeat_interval_s": 1.0,
            "stats": {},
        },
    ],
    "datasets": [
        {
            "dataset_id": "3",
            "fingerprint": "c010ea3eb393ffff",
            "compression": "AUTO",
            "pipeline_bytes": 719,
        }
    ],
    "jobs": [
        {
            "job_id": 4,
            "job_name": "train",
            "dataset_id": "3",
            "processing_mode": "distributed_epoch",
            "num_consumers": None,
            "num_clients": 2,
            "finished": False,
            "splits": {"handed_out": 25, "total": 100},
            "elements_per_s": 1_500_000.0,
            "eta_s": 95.0,
            "errors_ignored": 3,
        },
        {
            "job_id": 5,
            "job_name": None,
            "dataset_id": "3",
            "processing_mode": "parallel_epochs",
            "num_consumers": 2,
            "num_clients": 0,
            "finished": True,
            "elements_per_s": 0.0,
            "eta_s": None,
        },
    ],
    "records": {},
}


def rows(text: str, title: str) -> list[list[str]]:
    """The cells (split on 2+ spaces) of the table under ``title``."""
    block = text.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0]
    return [re.split(r" {2,}", line.strip()) for line in block.splitlines()]


def test_header_line_says_where_which_version_since_when_and_how_many():
    first = render(STATUS, "tcp://d:5050").splitlines()[0]
    assert first == (
        "dispatcher tcp://d:5050, zmqdata 9.9.9, up 1h02m, 2 workers (1 late), "
        "1 dataset, 2 jobs (1 reading)"
    )


def test_workers_table_has_units_buffer_fill_and_a_late_mark():
    text = render(STATUS, "d:5050")
    header, fast, late = rows(text, "WORKERS")
    assert header == [
        "ID", "ADDRESS", "TAGS", "TASKS", "ELEM/S", "DATA/S", "BUFFER", "HEARTBEAT"
    ]  # fmt: skip
    assert fast == [
        "1", "10.0.0.11:5051", "gpu,fast", "2", "12.3k", "45.5 MiB/s",
        "12% (120/1024 el, 7.5 MiB)", "0.4s",
    ]  # fmt: skip
    assert late[2:] == ["-", "0", "0", "0 B/s", "-", "6.3s LATE"]


def test_jobs_table_has_progress_eta_rate_and_errors_skipped():
    header, train, done = rows(render(STATUS, "d:5050"), "JOBS")
    assert header == [
        "NAME", "MODE", "CONSUMERS", "READERS", "PROGRESS", "ETA", "ELEM/S", "SKIPPED",
        "BOUND",
    ]  # fmt: skip
    assert train == [
        "train", "distributed_epoch", "-", "2", "25% (25/100 splits)", "1m35s", "1.5M",
        "3", "-",
    ]  # fmt: skip
    assert done == ["#5", "parallel_epochs", "2", "0", "done", "-", "0", "-", "-"]


def test_lines_are_no_longer_than_their_content_and_hold_no_raw_dicts():
    text = render(STATUS, "d:5050")
    assert all(line == line.rstrip() for line in text.splitlines())
    assert max(len(line) for line in text.splitlines()) < 100
    assert "{" not in text
    assert "=" not in text
    assert rows(text, "DATASETS")[1] == ["3", "c010ea3eb393", "AUTO", "719 B"]


def test_an_empty_or_old_status_renders():
    text = render({"version": "0.1.0"}, "d:5050")  # no ages, no rates, no tables
    assert "0 workers, 0 datasets, 0 jobs (0 reading)" in text
    assert text.endswith("WORKERS: none\n\nJOBS: none\n\nDATASETS: none")
    old_worker = {"worker_id": 1, "address": "a:1", "stats": {}}
    assert rows(render({"workers": [old_worker]}, "d"), "WORKERS")[1][-2:] == [
        "-",
        "-",
    ]


def test_autoscale_recommendation_is_shown_when_present():
    status = {**STATUS, "autoscale": {"recommended_workers": 3, "reason": "starved"}}
    assert "recommended workers: 3 (starved)" in render(status, "d")


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (5 * 2**30, "5.0 GiB")],
)
def test_human_bytes(value, shown):
    assert human_bytes(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.0, "0"), (999, "999"), (1000, "1.0k"), (250_000, "250k"), (2.5e9, "2.5G")],
)
def test_human_count(value, shown):
    assert human_count(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.04, "0.0s"), (9.96, "10s"), (59, "59s"), (3600, "1h00m"), (90000, "1d01h")],
)
def test_human_duration(value, shown):
    assert human_duration(value) == shown


def test_buffer_fill_is_the_fuller_of_elements_and_bytes():
    buffer = {
        "elements": 10,
        "bytes": 48 * MiB,
        "capacity_elements": 1024,
        "capacity_bytes": 64 * MiB,
    }
    assert buffer_fill(buffer) == "75% (10/1024 el, 48.0 MiB)"
    old_worker = {**buffer, "capacity_elements": 0, "capacity_bytes": 0}
    assert buffer_fill(old_worker) == "10 el, 48.0 MiB"
