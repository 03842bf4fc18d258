"""A worker's share of the cores: pure computation, cgroup files, the registry."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import threadpoolctl

from zmqdata import service
from zmqdata._runtime import threads

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("setting", "cores", "workers", "expected"),
    [
        ("auto", 8, 2, 4),
        ("auto", 8, 3, 2),
        ("auto", 2, 3, 1),
        ("auto", 4, 0, 4),
        (3, 8, 2, 3),
        ("none", 8, 2, None),
    ],
)
def test_share(setting, cores, workers, expected):
    assert threads.share(setting, cores, workers) == expected


@pytest.mark.parametrize("bad", [0, -1, "4", "all", None, True, 1.5])
def test_worker_config_rejects_a_bad_threads_value_naming_it(bad):
    with pytest.raises(ValueError, match=rf"^WorkerConfig\.threads: .*got {bad!r}$"):
        service.WorkerConfig("127.0.0.1:1", threads=bad)


def test_worker_config_threads_default_auto():
    assert service.WorkerConfig("127.0.0.1:1").threads == "auto"
    assert service.WorkerConfig("127.0.0.1:1", threads=2).threads == 2


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("max 100000", None), ("200000 100000", 2.0), ("50000 100000\n", 0.5)],
)
def test_parse_cpu_max(text, cpus):
    assert threads.parse_cpu_max(text) == cpus


def test_parse_cfs():
    assert threads.parse_cfs("-1", "100000") is None
    assert threads.parse_cfs("300000\n", "100000\n") == 3.0


def _write(path: Path, text: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, content in (line.split("=") for line in text.split(";")):
        (path / name).write_text(content + "\n")


def test_cgroup_v2_quota_in_a_namespace_root(tmp_path):
    _write(tmp_path, "cpu.max=150000 100000")
    assert threads.cgroup_cpu_limit("0::/\n", tmp_path) == 1.5
    assert threads.usable_cores({0, 1, 2, 3}, "0::/\n", tmp_path) == 2


def test_cgroup_v2_takes_the_tightest_ancestor(tmp_path):
    _write(tmp_path / "kubepods", "cpu.max=100000 100000")
    _write(tmp_path / "kubepods" / "pod1", "cpu.max=max 100000")
    text = "0::/kubepods/pod1\n"
    assert threads.cgroup_cpu_limit(text, tmp_path) == 1.0
    assert threads.usable_cores({0, 1, 2, 3}, text, tmp_path) == 1


def test_cgroup_v1_cfs_quota(tmp_path):
    _write(
        tmp_path / "cpu,cpuacct" / "docker" / "abc",
        "cpu.cfs_quota_us=300000;cpu.cfs_period_us=100000",
    )
    text = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/docker/abc\n"
    assert threads.cgroup_cpu_limit(text, tmp_path) == 3.0
    assert threads.usable_cores(set(range(8)), text, tmp_path) == 3
    assert threads.usable_cores({0, 1}, text, tmp_path) == 2  # affinity is tighter


def test_no_or_malformed_cgroup_files_mean_no_limit(tmp_path):
    _write(tmp_path, "cpu.max=garbage here")
    assert threads.cgroup_cpu_limit("0::/\nnonsense\n", tmp_path) is None
    assert threads.cgroup_cpu_limit("", tmp_path) is None
    assert threads.usable_cores({5}, "", tmp_path) == 1


def test_usable_cores_of_this_process_is_within_its_affinity():
    assert 1 <= threads.usable_cores() <= len(os.sched_getaffinity(0))


def test_start_time_tells_live_from_dead_processes():
    assert threads.start_time(os.getpid()) is not None
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert threads.start_time(child.pid) is None


def test_registry_counts_live_seats_and_removes_those_of_dead_processes(tmp_path):
    seats = [threads.Seat(tmp_path), threads.Seat(tmp_path)]
    me = os.getpid()
    mine = threads.start_time(me)
    dead = tmp_path / "worker-999999999-5-abc"
    reused = tmp_path / f"worker-{me}-{mine + 1}-def"  # same pid, other process
    for path in (dead, reused, tmp_path / "unrelated-file"):
        path.touch()
    assert threads.live_workers(tmp_path) == 2
    assert not dead.exists()
    assert not reused.exists()
    assert (tmp_path / "unrelated-file").exists()
    for seat in seats:
        seat.release()
        seat.release()  # idempotent
    assert threads.live_workers(tmp_path) == 0


def test_registry_with_injected_liveness(tmp_path):
    for name in ("worker-10-100-a", "worker-11-200-b", "worker-12-0-c"):
        (tmp_path / name).touch()
    alive = {10: 100, 11: 201, 12: 7}.get  # 11 was reused; 12 has no start time
    assert threads.live_workers(tmp_path, alive) == 2
    assert sorted(os.listdir(tmp_path)) == ["worker-10-100-a", "worker-12-0-c"]


def test_a_missing_registry_counts_none(tmp_path):
    assert threads.live_workers(tmp_path / "absent") == 0


def test_auto_divides_the_cores_among_the_live_workers(tmp_path, monkeypatch):
    monkeypatch.setenv(threads.RUNTIME_DIR_VAR, str(tmp_path))
    cores = threads.usable_cores()
    assert threads.resolve("auto") == cores
    assert threads.resolve("auto", extra_workers=1) == cores
    seats = [threads.Seat() for _ in range(3)]
    assert threads.resolve("auto") == max(1, cores // 3)
    assert threads.resolve("auto", extra_workers=1) == max(1, cores // 4)
    assert threads.resolve(5) == 5
    assert threads.resolve("none") is None
    for seat in seats:
        seat.release()


def test_in_process_workers_take_seats_while_they_run(tmp_path, monkeypatch):
    monkeypatch.setenv(threads.RUNTIME_DIR_VAR, str(tmp_path))
    with service.DispatchServer() as dispatcher:
        config = service.WorkerConfig(dispatcher.target)
        with service.WorkerServer(config), service.WorkerServer(config):
            assert threads.live_workers() == 2
    assert threads.live_workers() == 0


def _pools() -> dict[str, int]:
    return {i["user_api"]: i["num_threads"] for i in threadpoolctl.threadpool_info()}


def test_a_producer_thread_of_another_process_limits_only_its_openmp():
    pytest.importorskip("torch")  # loads an OpenMP runtime (libgomp)
    before = _pools()
    if before.get("openmp", 1) < 2 or before.get("blas", 1) < 2:
        pytest.skip("one core: nothing to limit")
    seen: list[dict[str, int]] = []

    def producer() -> None:
        threads.limit_producer(1)
        seen.append(_pools())

    thread = threading.Thread(target=producer)
    thread.start()
    thread.join()
    assert seen[0]["openmp"] == 1  # OpenMP's limit is per thread
    assert seen[0]["blas"] == before["blas"]  # BLAS is process-wide: untouched
    assert _pools() == before  # the trainer's own pools as they were


def _blas_of_the_worker(_: object) -> int:
    return int(_pools().get("blas", 0))


def test_an_in_process_worker_leaves_the_trainers_blas_pool_alone():
    import zmqdata as zd

    before = _pools()
    with service.DispatchServer() as dispatcher:
        config = service.WorkerConfig(dispatcher.target, threads=1)
        with service.WorkerServer(config):
            ds = zd.Dataset.range(2).map(_blas_of_the_worker)
            seen = list(
                ds.apply(service.distribute("distributed_epoch", dispatcher.target))
            )
    assert seen == [before.get("blas", 0)] * 2
    assert _pools() == before
