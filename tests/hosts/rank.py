"""A rank of a multi-rank read for the multi-host tests, run in its own namespace.

``python -m tests.hosts.rank SPEC`` reads ``pipeline(n)`` from the service
as rank ``consumer_index`` of ``num_consumers`` (``distributed_epoch`` with a
``seed``, job ``job_name``) and writes ``result: {...}`` on stderr: the
elements it read, in order, and with ``save_after`` the base64 of
``it.save()`` taken after that many (at least 1) elements (the rank then stops reading).
``restore`` (base64 of a merged position) is restored before the first
element. The result also lists the workers the dispatcher knows
(``[address, data_address]``). SPEC (JSON) keys: ``dispatcher`` (host:port), ``job_name``,
``num_consumers``, ``consumer_index``, ``seed``, ``n``; optional
``save_after``, ``restore``. CURVE keys come from the ``ZMQDATA_CURVE_*``
variables, as for any trainer.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import zmqdata as zd
from zmqdata import service


def pipeline(n: int) -> zd.Dataset:
    """What the workers run."""
    return zd.Dataset.range(n).filter(lambda x: x % 3 != 1).map(lambda x: x * 2)


def dataset(spec: dict[str, Any], dispatcher: str) -> zd.Dataset:
    """Rank ``consumer_index``'s read of ``pipeline(n)`` from ``dispatcher``."""
    return pipeline(spec["n"]).apply(
        service.distribute(
            "distributed_epoch",
            dispatcher,
            job_name=spec["job_name"],
            num_consumers=spec["num_consumers"],
            consumer_index=spec["consumer_index"],
            seed=spec["seed"],
        )
    )


def read(spec: dict[str, Any]) -> dict[str, Any]:
    """Reads as ``spec`` says; returns the elements (the saved state), the workers."""
    got: list[int] = []
    result: dict[str, Any] = {"elements": got}
    save_after = spec.get("save_after")
    with iter(dataset(spec, spec["dispatcher"])) as elements:
        if spec.get("restore"):
            elements.restore(base64.b64decode(spec["restore"]))
        for element in elements:
            got.append(int(element))
            if len(got) == save_after:
                result["state"] = base64.b64encode(elements.save()).decode()
                break
    workers = service.get_status(spec["dispatcher"])["workers"]
    result["workers"] = sorted([w["address"], w["data_address"]] for w in workers)
    return result


if __name__ == "__main__":
    print(f"result: {json.dumps(read(json.loads(sys.argv[1])))}", file=sys.stderr)
