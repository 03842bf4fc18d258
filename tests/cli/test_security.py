"""``zmqdata keygen`` and the daemons' refusal to serve a network without keys."""

import os
import signal
import stat
import subprocess
import sys

import pytest
import zmq.auth
from click.testing import CliRunner
from zmqdata_cli._common import check_exposure, is_loopback
from zmqdata_cli.main import main

from tests.cli.procs import run, zmqdata

READY = r"dispatcher ready: tcp://0\.0\.0\.0:(\d+)"


def test_keygen_writes_a_key_pair(tmp_path):
    result = CliRunner().invoke(main, ["keygen", str(tmp_path / "k"), "--name", "a"])
    assert result.exit_code == 0, result.output
    public, secret = tmp_path / "k" / "a.key", tmp_path / "k" / "a.key_secret"
    assert zmq.auth.load_certificate(public)[1] is None
    pair = zmq.auth.load_certificate(secret)
    assert pair[0] == zmq.auth.load_certificate(public)[0]
    assert pair[1] is not None
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600


def test_keygen_does_not_overwrite_without_force(tmp_path):
    runner = CliRunner()
    assert runner.invoke(main, ["keygen", str(tmp_path)]).exit_code == 0
    before = (tmp_path / "zmqdata.key").read_bytes()
    again = runner.invoke(main, ["keygen", str(tmp_path)])
    assert again.exit_code != 0
    assert "already exists" in again.output
    assert (tmp_path / "zmqdata.key").read_bytes() == before
    assert runner.invoke(main, ["keygen", str(tmp_path), "--force"]).exit_code == 0
    assert (tmp_path / "zmqdata.key").read_bytes() != before


def test_keygen_never_makes_the_secret_key_readable_by_others(tmp_path, monkeypatch):
    """Under umask 0 too: the secret is 0600, or unreachable (in a 0700 directory)."""
    seen = []
    create = zmq.auth.create_certificates

    def watched(directory, name):
        public, secret = create(directory, name)
        mode = stat.S_IMODE(os.stat(secret).st_mode)
        seen.append((mode, stat.S_IMODE(os.stat(directory).st_mode)))
        return public, secret

    monkeypatch.setattr(zmq.auth, "create_certificates", watched)
    keys = tmp_path / "keys"  # made by keygen, under umask 0: world-writable
    old = os.umask(0)
    try:
        for args in ([], ["--force"]):
            result = CliRunner().invoke(main, ["keygen", str(keys), *args])
            assert result.exit_code == 0, result.output
            mode = stat.S_IMODE(os.stat(keys / "zmqdata.key_secret").st_mode)
            assert mode == 0o600
    finally:
        os.umask(old)
    assert len(seen) == 2
    assert all(not file & 0o077 or folder == 0o700 for file, folder in seen), seen
    assert stat.S_IMODE(os.stat(keys / "zmqdata.key").st_mode) == 0o644
    assert sorted(p.name for p in keys.iterdir()) == [
        "zmqdata.key",
        "zmqdata.key_secret",
    ]


def test_keygen_authorize_copies_the_public_key(tmp_path):
    args = ["keygen", str(tmp_path / "k"), "--name", "w"]
    targets = [tmp_path / "workers", tmp_path / "more" / "workers"]
    for target in targets:
        args += ["--authorize", str(target)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    public = (tmp_path / "k" / "w.key").read_bytes()
    for target in targets:
        assert (target / "w.key").read_bytes() == public
        assert not (target / "w.key_secret").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["dispatcher", "--host", "0.0.0.0"],
        ["worker", "--dispatcher", "127.0.0.1:1", "--host", "0.0.0.0"],
    ],
)
def test_daemons_refuse_a_network_host_without_keys(args):
    completed = run(*args)
    assert completed.returncode != 0
    assert "refusing to bind" in completed.stderr
    assert "--insecure" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_up_refuses_a_network_host_without_keys(tmp_path):
    config = tmp_path / "up.yaml"
    config.write_text("dispatcher: {host: 0.0.0.0}\nworkers: 0\n")
    completed = run("up", str(config))
    assert completed.returncode != 0
    assert "refusing to bind" in completed.stderr


@pytest.mark.parametrize("host", ["127.0.0.2", "localhost", "::1"])
def test_loopback_hosts_need_no_keys(host):
    assert is_loopback(host)
    check_exposure("dispatcher", "tcp", host, secured=False, insecure=False)


def test_insecure_allows_a_network_host():
    with zmqdata(
        "dispatcher", "--host", "0.0.0.0", "--port", "0", "--insecure"
    ) as proc:
        proc.wait_for_line(READY)
        assert proc.stop(signal.SIGTERM) == 0


def test_a_keyed_dispatcher_binds_a_network_host_and_serves_keyed_status(tmp_path):
    runner = CliRunner()
    for name in ("server", "admin"):
        assert (
            runner.invoke(main, ["keygen", str(tmp_path), "--name", name]).exit_code
            == 0
        )
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    (authorized / "admin.key").write_bytes((tmp_path / "admin.key").read_bytes())
    config = tmp_path / "d.yaml"
    config.write_text(
        "dispatcher:\n"
        "  host: 0.0.0.0\n"
        "  port: 0\n"
        f"  curve_secret_key_file: {tmp_path / 'server.key_secret'}\n"
        f"  curve_authorized_keys_dir: {authorized}\n"
    )
    with zmqdata("dispatcher", "--config", str(config)) as proc:
        port = proc.wait_for_line(READY).group(1)
        address = f"127.0.0.1:{port}"  # only loopback traffic
        denied = run("status", "--dispatcher", address, "--timeout", "5")
        assert denied.returncode != 0
        assert "authentication" in denied.stderr
        env = {
            **os.environ,
            "ZMQDATA_CURVE_SECRET_KEY_FILE": str(tmp_path / "admin.key_secret"),
            "ZMQDATA_CURVE_SERVER_KEY_FILE": str(tmp_path / "server.key"),
        }
        allowed = subprocess.run(
            [
                sys.executable,
                "-m",
                "zmqdata",
                "status",
                "--dispatcher",
                address,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env=env,
        )
        assert allowed.returncode == 0, allowed.stderr
        assert '"workers"' in allowed.stdout
        assert proc.stop(signal.SIGTERM) == 0


@pytest.mark.parametrize("roles", [False, True], ids=["one-dir", "worker-keys-dir"])
def test_up_with_keys_registers_its_workers(tmp_path, roles):
    """Both layouts: the server key authorized, or in curve_worker_keys_dir."""
    authorized, workers = tmp_path / "authorized", tmp_path / "workers"
    authorized.mkdir()
    args = ["keygen", str(tmp_path), "--name", "server", "--authorize"]
    args.append(str(workers if roles else authorized))
    assert CliRunner().invoke(main, args).exit_code == 0
    keys = (
        f"  curve_secret_key_file: {tmp_path / 'server.key_secret'}\n"
        f"  curve_authorized_keys_dir: {authorized}\n"
    )
    config = tmp_path / "up.yaml"
    config.write_text(
        "dispatcher:\n"
        + keys
        + (f"  curve_worker_keys_dir: {workers}\n" if roles else "")
        + "worker:\n"
        + keys
        + f"  dispatcher_public_key_file: {tmp_path / 'server.key'}\n"
        + "  heartbeat_interval_ms: 100\n"
        + "workers: 2\n"
    )
    with zmqdata("up", str(config)) as proc:
        proc.wait_for_line(r"deployment ready: .* 2 workers registered", timeout=30)
        assert proc.stop(signal.SIGINT) == 0
