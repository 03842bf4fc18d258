"""Resumable reads: ``it.save()`` in one iterator (or process), ``restore`` in another.

A ``distributed_epoch`` read saves the source keys it consumed (small bytes,
no element); a new iterator restored from them gets exactly the elements not
consumed at save time, those buffered or in flight then included, none twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from zmqdata import service
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

N = 2_000


@pytest.fixture(scope="module")
def cluster():
    running = Cluster(num_workers=2)
    try:
        yield running
    finally:
        running.stop()


def read(cluster: Cluster, dataset: zd.Dataset, **options) -> zd.Dataset:
    return dataset.apply(
        service.distribute("distributed_epoch", cluster.target, **options)
    )


def flat(values) -> list[int]:
    return [int(v) for value in values for v in np.ravel(value)]


def take(iterator, count: int) -> list:
    return [next(iterator) for _ in range(count)]


@pytest.mark.parametrize("at", [0, 1, 37, 1_000, N])
def test_a_restored_read_gets_exactly_what_was_not_consumed_at_save(cluster, at):
    ds = read(cluster, zd.Dataset.range(N))
    with iter(ds) as first:
        before = ints(take(first, at))
        state = first.save()
        ints(take(first, min(100, N - at)))  # consumed after the save: comes again
    assert isinstance(state, bytes)
    assert len(state) < 2_000
    with iter(ds) as second:
        second.restore(state)
        after = ints(second)
    assert Counter(before + after) == {i: 1 for i in range(N)}


def test_saving_does_not_disturb_the_read(cluster):
    ds = read(cluster, zd.Dataset.range(N).batch(7))
    with iter(ds) as iterator:
        got = []
        for step, batch in enumerate(iterator):
            got += flat([batch])
            if step % 50 == 0:
                iterator.save()
    assert Counter(got) == {i: 1 for i in range(N)}


@pytest.mark.parametrize(
    ("local", "same_elements"),
    [
        pytest.param(lambda ds: ds.batch(3), True, id="batch"),
        pytest.param(lambda ds: ds.shuffle(64, seed=5), True, id="shuffle"),
        # Which elements come first depends on the workers: take keeps as many.
        pytest.param(lambda ds: ds.take(N - 100), False, id="take"),
        pytest.param(
            lambda ds: ds.map(lambda x: x * 2).filter(lambda x: x % 3 > 0),
            True,
            id="map_filter",
        ),
    ],
)
def test_local_ops_after_distribute_resume_with_the_service_position(
    cluster, local, same_elements
):
    ds = local(read(cluster, zd.Dataset.range(N)))
    whole = Counter(flat(local(zd.Dataset.range(N))))
    with iter(ds) as first:
        before = flat(take(first, 150))
        state = first.save()
        take(first, 20)
    with iter(ds) as second:
        second.restore(state)
        after = flat(second)
    got = Counter(before + after)
    if same_elements:
        assert got == whole
    else:
        assert sum(got.values()) == sum(whole.values())
        assert max(got.values()) == 1
        assert set(got) <= set(range(N))


def test_a_prefetch_after_distribute_cannot_save_and_says_why(cluster):
    ds = read(cluster, zd.Dataset.range(N)).prefetch(4)
    with iter(ds) as iterator:
        next(iterator)
        with pytest.raises(FailedPreconditionError, match="saving"):
            iterator.save()


@pytest.mark.parametrize(
    ("mode", "options", "why"),
    [
        ("parallel_epochs", {}, "only a distributed_epoch read"),
        ("distributed_epoch", {"job_name": "shared"}, "shared job 'shared'"),
        ("distributed_epoch", {"exactly_once": False}, "exactly_once=True"),
    ],
)
def test_reads_without_a_position_of_their_own_refuse_to_save(
    cluster, mode, options, why
):
    # Few elements: a named job outlives its reader, and its producer ends.
    ds = zd.Dataset.range(10).apply(service.distribute(mode, cluster.target, **options))
    with iter(ds) as iterator:
        next(iterator)
        with pytest.raises(FailedPreconditionError, match=why):
            iterator.save()


def test_a_state_of_another_dataset_is_refused(cluster):
    with iter(read(cluster, zd.Dataset.range(N))) as iterator:
        next(iterator)
        state = iterator.save()
    other = read(cluster, zd.Dataset.range(N + 1))
    with iter(other) as iterator, pytest.raises(InvalidArgumentError, match="dataset"):
        iterator.restore(state)
    with iter(other) as iterator, pytest.raises(InvalidArgumentError, match="state"):
        iterator.restore(b"not a state")


TRAINER = textwrap.dedent(
    """
    import sys, zmqdata as zd
    from zmqdata import service
    target, out, state_path, save_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ds = zd.Dataset.range({n}).apply(service.distribute("distributed_epoch", target))
    with open(out, "w") as log, iter(ds) as iterator:
        for step, value in enumerate(iterator):
            log.write(f"{{int(value)}}\\n")
            log.flush()
            if step + 1 == save_at:
                with open(state_path + ".tmp", "wb") as f:
                    f.write(iterator.save())
                import os
                os.replace(state_path + ".tmp", state_path)
                log.write("saved\\n")
                log.flush()
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_trainer_killed_after_a_save_resumes_every_element_exactly_once(
    cluster, tmp_path, seed
):
    rng = np.random.default_rng(seed)
    n = 20_000
    save_at = int(rng.integers(100, 5_000))
    kill_after = save_at + int(rng.integers(1, 2_000))
    out, state_path = tmp_path / "consumed.txt", tmp_path / "state.bin"
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER.format(n=n))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    trainer = subprocess.Popen(
        [
            sys.executable,
            str(script),
            cluster.target,
            str(out),
            str(state_path),
            str(save_at),
        ],
        env=env,
    )
    try:
        poll_for(
            lambda: _lines(out) >= kill_after + 1 or trainer.poll() is not None,
            timeout=40,
        )
        trainer.send_signal(signal.SIGKILL)
    finally:
        trainer.kill()
        trainer.wait(10)
    lines = out.read_text().splitlines()
    before = [int(v) for v in lines[: lines.index("saved")]]
    assert len(before) == save_at
    ds = zd.Dataset.range(n).apply(
        service.distribute("distributed_epoch", cluster.target)
    )
    with iter(ds) as iterator:
        iterator.restore(state_path.read_bytes())
        after = ints(iterator)
    assert Counter(before + after) == {i: 1 for i in range(n)}


def _lines(path) -> int:
    try:
        return path.read_text().count("\n")
    except FileNotFoundError:
        return 0
