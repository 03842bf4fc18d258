"""Hand-made ``get_status`` dicts with the "where the time goes" keys of a job."""

from __future__ import annotations

from typing import Any


def op(name: str, index: int, own_s: float, **more: Any) -> dict[str, Any]:
    """One ``jobs[].ops`` entry (no threads unless ``threads``/``busy`` given)."""
    return {
        "op": name,
        "index": index,
        "own_s": own_s,
        "share": own_s / 20.0,
        "waited_s": 0.0,
        "elements": 1000 + index,
        "elements_per_s": 100.0,
        "bytes": 4096,
        "threads": None,
        "busy": None,
        **more,
    }


def consumer(
    client_id: int, rank: int | None, waited: float, **more: Any
) -> dict[str, Any]:
    """One ``jobs[].consumers`` entry."""
    return {
        "client_id": client_id,
        "consumer_index": rank,
        "waited": waited,
        "elements": 5000,
        "elements_per_s": 120.0,
        "lag": 3,
        "straggler": False,
        **more,
    }


def job(name: str | None = "train", job_id: int = 3, **more: Any) -> dict[str, Any]:
    """A job entry: three ops (one threaded), two ranks (rank 1 a straggler)."""
    return {
        "job_id": job_id,
        "job_name": name,
        "elements": 2000,
        "elements_per_s": 250.0,
        "ops": [
            op("range", 0, 0.5),
            op("map(load)", 1, 15.6, threads=4, busy=0.96, waited_s=1.5),
            op("batch", 2, 2.0),
        ],
        "phases": {"ops": 0.9, "encode": 0.05, "splits": 0.01, "blocked": 0.04},
        "bottleneck": {
            "kind": "input-bound",
            "line": "input-bound: map(load) uses 78% of worker time",
            "op": "map(load)",
            "evidence": {},
        },
        "consumers": [
            consumer(7, 0, 0.41),
            consumer(8, 1, 0.05, straggler=True, lag=40, elements_per_s=60.0),
        ],
        "workers": [
            {
                "worker_id": 1,
                "address": "127.0.0.1:4000",
                "elements_per_s": 250.0,
                "straggler": False,
            }
        ],
        **more,
    }


def status(*jobs: dict[str, Any]) -> dict[str, Any]:
    """A status with these jobs (and nothing else a reader here needs)."""
    return {"version": "0", "workers": [], "datasets": [], "jobs": list(jobs)}
