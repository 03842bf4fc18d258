"""``zmqdata lineage``: a step's records, from the pipeline a dispatcher registered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from zmqdata_cli.main import main

import zmqdata as zd
from tests.cli.procs import run
from zmqdata import service

pytestmark = pytest.mark.timeout(60)

PIPELINE = zd.Dataset.range(1_000).map(lambda x: x * 2).batch(4)


@pytest.fixture(scope="module")
def registered() -> Iterator[tuple[str, str]]:
    """An in-process dispatcher and the id of ``PIPELINE`` registered there."""
    with service.DispatchServer() as dispatcher:
        yield dispatcher.target, service.register_dataset(dispatcher.target, PIPELINE)


def lineage(*args: str) -> Any:
    result = CliRunner().invoke(main, ["lineage", *args])
    return result


def test_json_is_service_lineage_of_every_ranks_element_of_the_step(registered):
    """Run as a command: the pipeline comes from the dispatcher, its split runs here."""
    target, dataset_id = registered
    done = run(
        "lineage", "--dispatcher", target, "--dataset-id", dataset_id,
        "--seed", "3", "--ranks", "2", "--step", "5", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == service.lineage(PIPELINE, 3, 2, 10, 12)


def test_one_rank_is_printed_record_by_record(registered):
    target, dataset_id = registered
    result = lineage(
        "--dispatcher", target, "--dataset-id", dataset_id,
        "--ranks", "3", "--step", "2", "--rank", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [row] = service.lineage(PIPELINE, None, 3, 7, 8)
    lines = result.output.splitlines()
    assert lines[0] == "rank 1, step 2 (position 7): 4 records"
    assert lines[1:] == [f"  source 0  index {s['index']}" for s in row["sources"]]


def test_bad_requests_exit_non_zero_saying_why(registered):
    target, dataset_id = registered
    common = ["--dispatcher", target, "--ranks", "2"]
    unknown = lineage(*common, "--dataset-id", "nope", "--step", "0")
    assert unknown.exit_code == 1
    assert "nope" in unknown.output
    past = lineage(*common, "--dataset-id", dataset_id, "--step", "125")
    assert past.exit_code == 1
    assert "past the epoch's end" in past.output
    rank = lineage(*common, "--dataset-id", dataset_id, "--step", "0", "--rank", "2")
    assert rank.exit_code == 2
    assert "not a rank of 2" in rank.output
