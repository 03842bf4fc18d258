"""``zmqdata keygen DIR [--name NAME] [--authorize DIR]``: a CurveZMQ key pair.

Writes ``DIR/NAME.key`` (the public key: copy it to the servers' authorized
directories, or to the clients for the server key) and ``DIR/NAME.key_secret``
(the key pair: readable by its owner only, mode 0600 from the start). With
``--authorize``, also copies the public key into each given directory (a
dispatcher's ``curve_worker_keys_dir`` for a worker key, the
``curve_authorized_keys_dir`` of the dispatcher and workers for a client key;
see docs/security.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import click
import zmq.auth
from zmqdata_cli.logs import verbose_option


def _create(path: Path, name: str) -> tuple[Path, Path]:
    """Writes the pair via a private (0700) directory, so no one else ever sees it.

    pyzmq writes the secret file with the process's umask (often 0644); it is
    made 0600 while only its owner can reach it, then moved into ``path``.
    """
    private = Path(tempfile.mkdtemp(dir=path, prefix=f".{name}-"))
    try:
        public, secret = (Path(p) for p in zmq.auth.create_certificates(private, name))
        os.chmod(secret, 0o600)
        os.chmod(public, 0o644)
        moved = path / public.name, path / secret.name
        os.replace(secret, moved[1])
        os.replace(public, moved[0])
        return moved
    finally:
        shutil.rmtree(private, ignore_errors=True)


@click.command()
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--name", default="zmqdata", show_default=True, help="Key file name.")
@click.option("--force", is_flag=True, help="Overwrite an existing key pair.")
@click.option(
    "--authorize",
    "authorize",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also copy the public key into this authorized-keys directory "
    "(repeatable; made if missing).",
)
@verbose_option  # type: ignore[untyped-decorator]
def keygen(directory: str, name: str, force: bool, authorize: tuple[str, ...]) -> None:
    """Write a CURVE key pair: DIR/NAME.key (public) and DIR/NAME.key_secret."""
    if not name or "/" in name or os.sep in name:
        raise click.ClickException(f"bad key name {name!r}")
    path = Path(directory)
    public, secret = path / f"{name}.key", path / f"{name}.key_secret"
    if not force and (public.exists() or secret.exists()):
        raise click.ClickException(
            f"{secret} or {public} already exists (pass --force to overwrite)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
        public_file, secret_file = _create(path, name)
        for where in authorize:
            Path(where).mkdir(parents=True, exist_ok=True)
            click.echo(f"authorized: {shutil.copy(public_file, where)}")
    except OSError as error:
        raise click.ClickException(f"cannot write keys to {path}: {error}") from None
    click.echo(f"public key: {public_file}")
    click.echo(f"secret key: {secret_file}")
