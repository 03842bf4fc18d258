"""Generated pipelines read through faults give the local run's values exactly once.

Hypothesis draws a pipeline from the op grammar (``tests/service/grammar.py``)
and a fault schedule: at drawn element indices of the read, a worker is killed
(a new one takes its place), the fault-tolerant dispatcher restarts from its
journal, the read is saved and restored in a new iterator (after reading a few
elements more, which come again), or a second consumer joins the job by its
name. The leaves the service delivers (all consumers, the read up to each save
and the resumed one) must be the multiset of the local run's leaves. Every
trial runs; the test then fails listing each wrong one: its pipeline, its
schedule, and the values lost and duplicated (or the error the read raised).

``make test`` runs a bounded budget (``ZMQDATA_GENERATED_EXAMPLES``, default
20, a fixed derandomized draw); ``make soak`` a long one with a random draw
(``ZMQDATA_SOAK_EXAMPLES``, default 200). No shrinking: a fault's timing
differs from run to run, so a smaller case may not fail again; the listing is
the reproduction.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from tests.helpers import poll_for
from tests.service import grammar
from tests.service.cluster import Cluster
from tests.service.test_fault_tolerance import restart_dispatcher
from zmqdata import service

SOAK = os.environ.get("ZMQDATA_SOAK_EXAMPLES")
EXAMPLES = int(SOAK or os.environ.get("ZMQDATA_GENERATED_EXAMPLES", "20"))
WORKERS = 2
READ_DEADLINE_S = 30.0
MIN_LENGTH, MAX_LENGTH = 10, 2_000
"""Elements a drawn read has: enough for its faults, few enough to read in a second."""
FAULTS = ("kill_worker", "restart_dispatcher", "save_restore", "second_consumer")


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str
    at: int  # consumer 0's element index
    extra: int = 0  # save_restore: elements read after the save (they come again)

    def __repr__(self) -> str:
        more = f" (+{self.extra} read after)" if self.kind == "save_restore" else ""
        return f"{self.kind}@{self.at}{more}"


@dataclasses.dataclass
class Outcome:
    """What a read delivered, and which faults it reached."""

    got: Counter[int] = dataclasses.field(default_factory=Counter)
    done: list[Fault] = dataclasses.field(default_factory=list)


class FaultyCluster:
    """An in-process fault-tolerant dispatcher and ``WORKERS`` workers, faulted."""

    def __init__(self, work_dir: str) -> None:
        self.cluster = Cluster(
            WORKERS,
            dispatcher_options={"work_dir": work_dir, "fault_tolerant_mode": True},
        )
        self.live = list(self.cluster.workers)
        self.jobs = 0

    @property
    def target(self) -> str:
        return self.cluster.target

    def kill_worker(self, index: int) -> None:
        """Stops a live worker at once (its buffers lost) and adds another."""
        self.live.pop(index % len(self.live)).stop()
        self.live.append(self.cluster.add_worker(wait=False))

    def settled(self) -> None:
        poll_for(lambda: self.cluster.num_registered_workers() == WORKERS, timeout=10)

    def stop(self) -> None:
        self.cluster.stop()


def read(
    cluster: FaultyCluster,
    pipeline: grammar.Pipeline,
    faults: list[Fault],
    credit: int,
) -> Outcome:
    """Reads ``pipeline`` through the service, applying ``faults`` in order."""
    cluster.jobs += 1
    shared = any(f.kind == "second_consumer" for f in faults)
    job_name = f"generated-{cluster.jobs}" if shared else None

    def distributed() -> Any:
        return pipeline.build().apply(
            service.distribute(
                "distributed_epoch",
                cluster.target,
                job_name=job_name,
                max_outstanding_requests=credit,
            )
        )

    outcome = Outcome()
    second: list[Counter[int] | BaseException] = []
    threads: list[threading.Thread] = []

    def consume() -> None:
        try:
            with iter(distributed()) as other:
                second.append(grammar.leaf_counts(other))
        except BaseException as error:  # raised again by the test's thread
            second.append(error)

    ds = distributed()
    pending = sorted(faults, key=lambda f: f.at)
    iterator = iter(ds)
    started = time.monotonic()
    try:
        index = 0
        while True:
            while pending and pending[0].at <= index:
                fault = pending.pop(0)
                outcome.done.append(fault)
                if fault.kind == "kill_worker":
                    cluster.kill_worker(fault.at)
                elif fault.kind == "restart_dispatcher":
                    restart_dispatcher(cluster.cluster)
                elif fault.kind == "second_consumer":
                    threads.append(threading.Thread(target=consume, name="test-2nd"))
                    threads[-1].start()
                else:
                    iterator = _save_and_restore(ds, iterator, fault.extra)
            try:
                element = next(iterator)
            except StopIteration:
                break
            outcome.got.update(grammar.leaves(element))
            index += 1
            assert time.monotonic() - started < READ_DEADLINE_S, "read too slow"
    finally:
        iterator.close()
        for thread in threads:
            thread.join(READ_DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "the second consumer never ended"
    for counts in second:
        if isinstance(counts, BaseException):
            raise counts
        outcome.got.update(counts)
    return outcome


def _save_and_restore(ds: Any, iterator: Any, extra: int) -> Any:
    """Saves, reads ``extra`` elements more (lost with it), resumes in a new iterator."""
    state = iterator.save()
    for _ in range(extra):
        if next(iterator, None) is None:
            break
    iterator.close()
    resumed = iter(ds)
    resumed.restore(state)
    return resumed


def mismatch(want: Counter[int], got: Counter[int]) -> str:
    """``""`` when equal; else how many values were lost and duplicated, a few named."""
    lost, extra = want - got, got - want
    if not lost and not extra:
        return ""
    return (
        f"{sum(lost.values())} lost (e.g. {sorted(lost)[:8]}), "
        f"{sum(extra.values())} duplicated or foreign (e.g. {sorted(extra)[:8]})"
    )


@st.composite
def schedules(draw: st.DrawFn, length: int) -> tuple[list[Fault], int]:
    """One to three faults at indices below ``length``, and the read's credit."""
    faults: list[Fault] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(FAULTS))
        at = draw(st.integers(0, max(0, length - 1)))
        faults.append(Fault(kind, at, draw(st.integers(0, 5))))
    kinds = {f.kind for f in faults}
    if "second_consumer" in kinds and "save_restore" in kinds:  # a shared job
        faults = [f for f in faults if f.kind != "save_restore"]  # cannot save
    return faults, draw(st.integers(1, 8))


SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=SOAK is None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def trial(cluster: FaultyCluster, pipeline: grammar.Pipeline, data: Any) -> str:
    """One drawn read: ``""`` if exact, else the pipeline, schedule and mismatch."""
    want = grammar.leaf_counts(pipeline.build())
    length = sum(1 for _ in pipeline.build())
    assume(MIN_LENGTH <= length <= MAX_LENGTH)
    faults, credit = data.draw(schedules(length), label="faults, credit")
    case = f"{pipeline!r}\n  faults {faults}, credit {credit}, {length} elements"
    print(f"trial: {case}")  # the last one printed is the culprit if a read hangs
    try:
        outcome = read(cluster, pipeline, faults, credit)
        wrong = mismatch(want, outcome.got)
        cluster.settled()
    except Exception as error:
        return f"{case}: raised {type(error).__name__}: {error}"
    return wrong and f"{case} (reached: {outcome.done}): {wrong}"


@pytest.mark.timeout(60 + 10 * EXAMPLES)
def test_generated_pipelines_read_through_faults_give_the_local_values_once(tmp_path):
    cluster = FaultyCluster(str(tmp_path / "journal"))
    failures: list[str] = []
    trials = 0

    @SETTINGS
    @given(pipeline=grammar.pipelines(), data=st.data())
    def each(pipeline: grammar.Pipeline, data: Any) -> None:
        nonlocal trials
        wrong = trial(cluster, pipeline, data)
        trials += 1
        if wrong:
            failures.append(wrong)

    try:
        each()
    finally:
        cluster.stop()
    assert not failures, f"{len(failures)} of {trials} trials wrong:\n" + "\n".join(
        failures
    )
