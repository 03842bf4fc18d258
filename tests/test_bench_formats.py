"""bench/formats.py: tiny data, every local reader against zmqdata's, one
pass through a cluster with its dispatcher apart, the interleaving, and the
tables from made-up results.

No Ray here (the bench section measures).
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import replace

import numpy as np
import pytest

from bench import formats
from bench.common import Stat, cluster
from zmqdata import service

pytestmark = pytest.mark.timeout(60)

TINY = replace(
    formats.QUICK,
    parquet_files=2,
    parquet_rows=4096,
    row_group=2048,
    token_rows=3000,
    shards=2,
    samples=5,
    image_side=32,
    distinct_images=3,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, formats.Workload]:
    pytest.importorskip("pyarrow")
    pytest.importorskip("PIL")
    folder = tmp_path_factory.mktemp("formats")
    return formats.workloads(folder, TINY, formats.WORKLOADS)


def _drain(workload: formats.Workload, read) -> dict[str, float]:
    return formats.timed(workload, read)()


def test_parquet_readers_agree_with_zmqdata(tiny):
    batches, rows = tiny["parquet_batches"], tiny["parquet_rows"]
    assert (batches.elements, batches.rows) == (8, 8192)
    assert (rows.elements, rows.rows) == (4096, 4096)
    for workload in (batches, rows):
        for read in (workload.local, lambda w=workload: w.dataset):
            figures = _drain(workload, read)
            assert figures["rate"] > 0
    ours = next(iter(batches.dataset))
    theirs = next(iter(batches.local()))
    assert sorted(ours) == sorted(theirs) == ["id", "label", "text", "x", "y"]
    for name in ("id", "x", "y", "label"):
        np.testing.assert_array_equal(ours[name], theirs[name])
    assert ours["text"].tolist() == theirs["text"].tolist()
    assert ours["text"][0].split("-")[0] in formats.WORDS
    row, local_row = next(iter(rows.dataset)), next(iter(rows.local()))
    assert row == local_row
    assert isinstance(row["text"], str)


def test_token_rows_agree_with_zmqdata_and_cost_cpu(tiny):
    workload = tiny["token_rows"]
    assert (workload.elements, workload.rows) == (3000, 3000)
    for read in (workload.local, lambda: workload.dataset):
        figures = _drain(workload, read)
        assert figures["rate"] > 0
        assert figures["cpu_us"] > 0
    ours, theirs = list(workload.dataset), list(workload.local())
    assert [row["id"] for row in ours] == list(range(3000))
    for a, b in zip(ours, theirs, strict=True):
        assert sorted(a) == sorted(b) == ["id", "score", "source", "tokens"]
        assert (a["id"], a["score"], a["source"]) == (b["id"], b["score"], b["source"])
        assert (a["score"].dtype, a["source"].dtype) == (np.float32, np.int16)
        assert a["tokens"].dtype == b["tokens"].dtype == np.int32
        np.testing.assert_array_equal(a["tokens"], b["tokens"])
    lengths = {len(row["tokens"]) for row in theirs}
    assert formats.TOKENS[0] == min(lengths) < max(lengths) == formats.TOKENS[1]


def test_a_pass_through_workers_costs_this_process_no_dispatcher_cpu(tiny):
    workload = tiny["token_rows"]
    with cluster(1, apart=True) as target:
        names = {thread.name for thread in threading.enumerate()}
        assert not any("dispatcher" in name for name in names)
        remote = workload.dataset.apply(service.distribute("distributed_epoch", target))
        figures = _drain(workload, lambda: remote)
    assert figures["rate"] > 0
    assert figures["cpu_us"] > 0


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the webdataset package
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_webdataset_readers_agree_with_zmqdata(tiny):
    workload = tiny["webdataset"]
    assert workload.elements == 10
    _drain(workload, workload.local)
    _drain(workload, lambda: workload.dataset)
    fallbacks = list(formats.tar_samples(workload.files))
    package = importlib.util.find_spec("webdataset") is not None
    assert workload.local_label.startswith("webdataset package") == package
    for theirs in (list(workload.local()), fallbacks):
        ours = list(workload.dataset)
        assert [s["__key__"] for s in ours] == [s["__key__"] for s in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert a["jpg"].shape == b["jpg"].shape == (32, 32, 3)
            assert a["jpg"].dtype == b["jpg"].dtype == np.uint8
            np.testing.assert_array_equal(a["jpg"], b["jpg"])
            assert int(a["cls"]) == int(b["cls"])


def test_a_pass_checks_its_counts(tiny):
    workload = tiny["parquet_batches"]
    short = formats.timed(workload, lambda: list(workload.local())[:-1])
    with pytest.raises(RuntimeError, match=r"read 7 batches \(7,168 rows\)"):
        short()


def test_interleaved_rounds_reverse_and_an_optional_system_is_skipped():
    order: list[str] = []

    def system(name: str, rate: float):
        def once() -> dict[str, float]:
            order.append(name)
            if name == "ray":
                raise OSError("no ray here")
            return {"rate": rate + len(order), "rows_s": rate}

        return once

    passes = {name: system(name, 100.0) for name in ("local", "zmqdata_1", "ray")}
    stats, skipped = formats.interleave(passes, 3)
    warmup, rounds = order[:3], order[3:]
    assert warmup == ["local", "zmqdata_1", "ray"]
    assert rounds == ["local", "zmqdata_1", "zmqdata_1", "local", "local", "zmqdata_1"]
    assert sorted(stats) == ["local", "zmqdata_1"]
    assert "no ray here" in skipped["ray"]
    assert stats["local"]["rate"].samples == (104.0, 107.0, 108.0)
    with pytest.raises(OSError, match="boom"):
        formats.interleave({"local": lambda: (_ for _ in ()).throw(OSError("boom"))}, 1)


def _figures(*rates: float) -> dict[str, Stat]:
    return {
        "rate": Stat(rates),
        "rows_s": Stat(r * 1024 for r in rates),
        "cpu_us": Stat(1e6 / r for r in rates),
    }


def test_the_tables_give_targets_against_local_and_the_best_peer():
    systems = {
        "local": _figures(1000, 1100),
        "zmqdata_local": _figures(900, 950),
        "zmqdata_1": _figures(1200, 1000),
        "zmqdata_2": _figures(1500, 1400),
        "ray": _figures(1600, 1600),
    }
    workload = formats.Workload(
        name="parquet_batches",
        about="made up",
        unit="batches",
        elements=1,
        rows=1024,
        files=(),
        local_label="pyarrow, one process",
        local=list,
        dataset=None,  # type: ignore[arg-type]
        ray=lambda data: list,
        batched=True,
    )
    made_up = {
        "about": "made up",
        "unit": "batches",
        "batched": True,
        "labels": formats.labels(workload),
        "systems": systems,
        "skipped_systems": {},
        **formats.compared(systems),
    }
    assert made_up["best_peer"] == "ray"
    assert made_up["one_vs_local"] == pytest.approx(1100 / 1050)
    assert made_up["two_vs_peer_rounds"].samples == pytest.approx((1500 / 1600, 0.875))
    webdataset = {
        **made_up,
        "unit": "samples",
        "batched": False,
        "systems": {k: v for k, v in systems.items() if k != "ray"},
        "skipped_systems": {"ray": "`import ray` fails"},
    }
    webdataset.update(formats.compared(webdataset["systems"]))
    tokens = {**made_up, "about": "made-up tokens", "unit": "rows", "batched": False}
    result = {
        "repeats": 2,
        "parquet_batches": made_up,
        "parquet_rows": {"skipped": "no pyarrow"},
        "token_rows": tokens,
        "webdataset": webdataset,
    }
    text = formats.details(result)
    assert "| parquet_batches | pyarrow, one process | 1,050 batches/s" in text
    assert "(1,000-1,100); 1,075,200 rows/s | 1.00x |" in text
    assert "| 1.05x (0.91x-1.20x) | 917 µs (833-1,000) | 0.97x (0.83x-1.10x) |" in text
    assert "| parquet_rows | skipped: no pyarrow |" in text
    assert (
        "| webdataset | Ray Data, ray.init(num_cpus=2) | skipped: `import ray`" in text
    )
    assert "| parquet_batches: made up | 1.05x (0.91x-1.20x) ✔ | — | Ray Data" in text
    assert "| token_rows: made-up tokens | 1.05x (0.91x-1.20x) ✔ | 0.96x" in text
    assert "| 0.96x (0.83x-1.10x) ✔ | Ray Data" in text
    assert "| 0.91x (0.88x-0.94x) ✘ |" in text
    table = formats.rows(result)
    assert [row[3] for row in table] == [
        *("1.05x", "0.91x"),
        *("1.05x", "0.96x", "0.91x"),
        *("1.05x", "1.38x"),
    ]
    assert [row[-1][-1] for row in table] == [*"✔✘", *"✔✔✘", *"✔✔"]
    assert table[3][:3] == (
        "token_rows: trainer CPU per row, zmqdata 1 worker vs local",
        "917 µs",
        "955 µs",
    )
    assert "best peer, pyarrow, one process" in table[6][0]
