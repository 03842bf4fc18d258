"""Worker processes started by the CLI hold numpy's BLAS pool to their share."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import zmqdata as zd
from tests.cli.procs import run, zmqdata
from tests.helpers import poll_for
from zmqdata import service
from zmqdata._runtime import threads, yaml_config

pytestmark = pytest.mark.timeout(90)


def pools(_: object) -> str:
    """What the worker running the pipeline sees: BLAS threads and OMP_NUM_THREADS."""
    import threadpoolctl

    info = threadpoolctl.threadpool_info()
    blas = [i["num_threads"] for i in info if i["user_api"] == "blas"]
    return f"{os.getpid()} {blas} {os.environ.get('OMP_NUM_THREADS')}"


def read(target: str, n: int = 4) -> list[str]:
    ds = zd.Dataset.range(n).map(pools)
    return list(ds.apply(service.distribute("distributed_epoch", target)))


@pytest.fixture
def cores() -> int:
    cores = threads.usable_cores()
    if cores < 2:
        pytest.skip("one usable core: every share is 1 thread, as unlimited")
    return cores


def parse(element: str) -> tuple[int, str, str]:
    pid, blas, omp = re.fullmatch(r"(\d+) (\[.*\]) (\S+)", element).groups()
    return int(pid), blas, omp


@pytest.mark.parametrize("flag", ["1", "none"])
def test_a_cli_worker_limits_numpy_blas_once_a_task_runs(cores, flag):
    unlimited = pools(None).split(" ", 1)[1].rsplit(" ", 1)[0]  # this process's
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = dispatcher.wait_for_line(r"dispatcher ready: (\S+)").group(1)
        with zmqdata("worker", "--dispatcher", target, "--threads", flag) as worker:
            worker.wait_for_line("worker ready")
            poll_for(lambda: service.get_status(target)["workers"], 20)
            seen = {parse(element) for element in read(target)}
            assert worker.stop() == 0
    assert len(seen) == 1
    _, blas, omp = seen.pop()
    if flag == "1":
        assert (blas, omp) == ("[1]", "1")
    else:
        assert (blas, omp) == (unlimited, "None")


def test_a_standalone_worker_counts_the_live_workers_of_its_host(
    cores, tmp_path, monkeypatch
):
    monkeypatch.setenv(threads.RUNTIME_DIR_VAR, str(tmp_path))  # the child's too
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = dispatcher.wait_for_line(r"dispatcher ready: (\S+)").group(1)
        with zmqdata("worker", "--dispatcher", target) as worker:
            worker.wait_for_line(rf"native thread pools: {cores} threads each")
            poll_for(lambda: service.get_status(target)["workers"], 20)
            # More workers start on the host (seats of this process, alive):
            # the share is re-read when the task starts.
            seats = [threads.Seat() for _ in range(cores)]
            ((_, blas, _),) = {parse(element) for element in read(target)}
            assert blas == "[1]"  # cores // (cores + 1) -> at least 1
            for seat in seats:
                seat.release()
            assert worker.stop() == 0
    assert len(os.listdir(tmp_path)) == 0  # the worker took its seat back


API_WORKER = (
    "import sys\n"
    "from zmqdata import service\n"
    "service.WorkerServer(service.WorkerConfig(sys.argv[1])).join()\n"
)


def test_a_worker_script_joined_on_its_main_thread_limits_blas(cores, tmp_path):
    """tf.data's pattern: ``WorkerServer(config).join()``: the worker owns its process."""
    env = {**os.environ, threads.RUNTIME_DIR_VAR: str(tmp_path)}
    for name in threads.ENV_VARS:
        env.pop(name, None)
    with service.DispatchServer() as dispatcher:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", API_WORKER, dispatcher.target], env=env
            )
            for _ in range(2)
        ]
        try:
            poll_for(
                lambda: len(service.get_status(dispatcher.target)["workers"]) == 2, 20
            )
            seen = {parse(element) for element in read(dispatcher.target, 8)}
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(20)
    share = str(max(1, cores // 2))
    assert {pid for pid, _, _ in seen} <= {proc.pid for proc in procs}
    assert {blas for _, blas, _ in seen} == {f"[{share}]"}
    # The environment is set at join(), for subprocesses: from the workers
    # announced then (the other may not have been yet).
    assert all(omp != "None" for _, _, omp in seen)


def test_up_gives_each_of_its_workers_its_share_of_the_cores(cores, tmp_path):
    config = tmp_path / "up.yaml"
    config.write_text("dispatcher: {port: 0}\nworkers: 2\n")
    share = cores // 2
    with zmqdata("up", str(config)) as up:
        target = up.wait_for_line(r"deployment ready: dispatcher (\S+),").group(1)
        pids = [
            int(up.wait_for_line(rf"worker {i} started \(pid (\d+)\)").group(1))
            for i in range(2)
        ]
        for pid in pids:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert argv[argv.index(b"--threads") + 1] == str(share).encode()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"OMP_NUM_THREADS={share}".encode() in environ
        for pid, blas, omp in {parse(element) for element in read(target, 8)}:
            assert pid in pids
            assert (blas, omp) == (f"[{share}]", str(share))
        assert up.stop(signal.SIGINT) == 0


@pytest.mark.parametrize(
    ("flag", "expected"),
    [("0", "got 0"), ("-2", "got '-2'"), ("lots", "got 'lots'")],
)
def test_a_bad_threads_flag_fails_naming_the_value(flag, expected):
    completed = run("worker", "--dispatcher", "127.0.0.1:1", "--threads", flag)
    assert completed.returncode != 0
    assert f"worker.threads: expected 'auto', 'none' or an int >= 1, {expected}" in (
        completed.stderr
    )


def test_a_bad_threads_key_in_yaml_fails_naming_the_value(tmp_path):
    config = tmp_path / "up.yaml"
    config.write_text("worker: {threads: 0.5}\nworkers: 2\n")
    completed = run("up", str(config))
    assert completed.returncode != 0
    assert "worker.threads: expected 'auto', 'none' or an int >= 1, got 0.5" in (
        completed.stderr
    )


@pytest.mark.parametrize(
    ("section", "flag", "env"),
    [
        ("{}", "share", "share"),
        ("{threads: auto}", "share", "share"),
        ("{threads: 3}", None, "3"),
        ("{threads: none}", None, None),
    ],
)
def test_up_passes_its_division_unless_the_file_sets_a_number_or_none(
    section, flag, env
):
    from zmqdata_cli.up import _worker_command, worker_env, worker_threads

    share = str(max(1, threads.usable_cores() // 2))
    flag, env = (share if v == "share" else v for v in (flag, env))
    deployment = yaml_config.parse(f"worker: {section}\nworkers: 2\n")
    command = _worker_command("up.yaml", "tcp://127.0.0.1:1", deployment, 1)
    given = command[command.index("--threads") + 1] if "--threads" in command else None
    assert given == flag
    environ = worker_env(worker_threads(deployment), 1)
    assert environ["ZMQDATA_LOG_TAG"] == "worker-1"
    inherited = {name: os.environ.get(name) for name in threads.ENV_VARS}
    wanted = inherited if env is None else dict.fromkeys(threads.ENV_VARS, env)
    assert {name: environ.get(name) for name in threads.ENV_VARS} == wanted
