"""A trainer process reading record files through the service (tests/service/test_chaos_formats.py).

``python -m tests.service.formats_trainer SPEC`` reads ``source(format,
files)`` through ``service.distribute("distributed_epoch", target)`` and
logs, for the test to check after a ``kill -9``:

* ``out``: the id of each record consumed, one per line, written and flushed
  before anything else happens at that step;
* ``states``: after every ``save_every``-th record, ``it.save()`` in
  ``<states>/<step>.bin`` (written to a temporary file, then renamed: a file
  there is always a whole state, and its step's ids are all in ``out``).

SPEC is a JSON object: ``format``, ``files``, ``target``, ``out``, ``states``,
``save_every``; optional ``restore`` (a state's path, restored before the first
record) and ``stop_at`` (after that record, say ``stopped at STEP`` and wait to
be killed, at most 120 s). On stderr: ``done STEPS`` when the read ends.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import zmqdata as zd
from zmqdata import service

FORMATS = ("tfrecord", "parquet", "webdataset")
STOPPED_WAIT_S = 120.0


def source(fmt: str, files: Sequence[str]) -> zd.Dataset:
    """The records of ``files`` in format ``fmt``: what the workers read."""
    if fmt == "tfrecord":
        return zd.Dataset.from_tfrecord(list(files))
    if fmt == "parquet":
        return zd.Dataset.from_parquet(list(files))
    if fmt == "webdataset":
        return zd.Dataset.from_webdataset(list(files))
    raise ValueError(f"no format {fmt!r}")


def record_id(fmt: str, element: Any) -> int:
    """The id a record carries (the test's writers put it there)."""
    if fmt == "tfrecord":  # b"<id>:<payload>"
        return int(bytes(element).split(b":", 1)[0])
    if fmt == "parquet":  # {"id": int64, "payload": str}
        return int(element["id"])
    if fmt == "webdataset":  # {"__key__": "r<id>", "cls": b"<id>", "txt": …}
        key, value = element["__key__"], int(bytes(element["cls"]))
        if key != f"r{value}":
            raise AssertionError(f"sample {key!r} holds cls {value}")
        return value
    raise ValueError(f"no format {fmt!r}")


def _save(path: Path, state: bytes) -> None:
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as file:
        file.write(state)
    os.replace(temporary, path)


def _say(line: str) -> None:
    os.write(sys.stderr.fileno(), f"{line}\n".encode())


def run(spec: dict[str, Any]) -> int:
    """Reads as ``spec`` says; returns the number of records read."""
    fmt, every = spec["format"], int(spec["save_every"])
    states = Path(spec["states"])
    states.mkdir(parents=True, exist_ok=True)
    stop_at = spec.get("stop_at")
    ds = source(fmt, spec["files"]).apply(
        service.distribute("distributed_epoch", spec["target"])
    )
    steps = 0
    with open(spec["out"], "w") as out, iter(ds) as iterator:
        if spec.get("restore"):
            iterator.restore(Path(spec["restore"]).read_bytes())
        _say("reading")
        for element in iterator:
            steps += 1
            out.write(f"{record_id(fmt, element)}\n")
            out.flush()
            if steps % every == 0:
                _save(states / f"{steps}.bin", iterator.save())
            if steps == stop_at:
                _say(f"stopped at {steps}")
                threading.Event().wait(STOPPED_WAIT_S)
                raise SystemExit(3)  # nobody killed it: the test failed
    return steps


if __name__ == "__main__":
    _say(f"done {run(json.loads(sys.argv[1]))}")
