"""One slow worker process among two: the verdict names it; the CLI shows why."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

import zmqdata as zd
from tests.cli.procs import run, zmqdata
from tests.helpers import poll_for
from tests.service.cluster import free_port
from zmqdata import service

pytestmark = [pytest.mark.timeout(90), pytest.mark.exclusive]  # verdicts from rates

SLOW_VAR = "ZMQDATA_TEST_SLOW_WORKER"


def work(x: Any) -> Any:
    """1 ms per element, 20 ms on a worker started with ``SLOW_VAR`` set."""
    import os
    import threading

    threading.Event().wait(0.02 if os.environ.get(SLOW_VAR) else 0.001)
    return x


def job(target: str) -> dict[str, Any]:
    jobs = service.get_status(target)["jobs"]
    return jobs[0] if jobs else {}


def test_one_slow_worker_is_named_a_straggler():
    port = free_port()
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = dispatcher.wait_for_line(r"dispatcher ready: (\S+)").group(1)
        with (
            zmqdata("worker", "--dispatcher", target) as fast,
            zmqdata(
                "worker",
                "--dispatcher",
                target,
                "--port",
                str(port),
                prefix=("env", f"{SLOW_VAR}=1"),
            ) as slow,
        ):
            fast.wait_for_line("worker ready")
            slow.wait_for_line("worker ready")
            slow_address = f"127.0.0.1:{port}"
            poll_for(lambda: len(service.get_status(target)["workers"]) == 2, 20)
            ds = zd.Dataset.range(10**6).map(lambda x: work(x))
            read = ds.apply(service.distribute("distributed_epoch", target, "mixed"))
            stop = threading.Event()

            def trainer() -> None:
                with iter(read) as iterator:
                    for _ in iterator:
                        if stop.is_set():
                            return

            reader = threading.Thread(target=trainer)
            reader.start()
            try:

                def named() -> dict[str, Any] | None:
                    verdict = job(target).get("bottleneck", {})
                    return verdict if verdict.get("stragglers") else None

                verdict = poll_for(named, 30, 0.1)
                assert verdict["kind"] == "input-bound"
                assert verdict["stragglers"] == [f"worker {slow_address}"]
                assert f"straggler: worker {slow_address}" in verdict["line"]
                workers = {w["address"]: w for w in job(target)["workers"]}
                assert workers[slow_address]["straggler"]
                assert sum(w["straggler"] for w in workers.values()) == 1
                shown = run("status", "--dispatcher", target, "--job", "mixed")
                assert shown.returncode == 0, shown.stderr
                assert shown.stdout.startswith("input-bound: map(<lambda>) uses")
                assert "straggler" in shown.stdout
                as_json = run(
                    "status", "--dispatcher", target, "--job", "mixed", "--json"
                )
                assert json.loads(as_json.stdout)["job_name"] == "mixed"
                missing = run("status", "--dispatcher", target, "--job", "nope")
                assert missing.returncode != 0
                assert "nope" in missing.stderr
            finally:
                stop.set()
                reader.join(20)
