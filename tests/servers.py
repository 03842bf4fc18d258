"""Servers the tests start on loopback: a static HTTP server over a folder."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def http_server(root: Path) -> Iterator[str]:
    """Serves ``root`` at the yielded ``http://127.0.0.1:PORT`` until the block ends."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """An S3-compatible server (moto) on loopback, with fsspec's ``s3`` pointed at it.

    Yields the endpoint URL. The credentials are fake ones moto accepts; reads
    go through s3fs as they would to any S3-compatible store (MinIO, Ceph).
    """
    import logging

    import fsspec
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = {
        "key": "testing",
        "secret": "testing",
        "endpoint_url": endpoint,
        "skip_instance_cache": True,
    }
    try:
        yield endpoint
    finally:
        if saved is None:
            fsspec.config.conf.pop("s3", None)
        else:
            fsspec.config.conf["s3"] = saved
        server.stop()
