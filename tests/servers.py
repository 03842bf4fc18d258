"""Servers the tests start on loopback: HTTP over a folder, an S3-compatible one."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK = 1 << 16


class _Folder(http.server.SimpleHTTPRequestHandler):
    """Serves a folder with byte ranges, as object stores do (fsspec's http
    reads need them); counts the bytes the client took."""

    server: HttpServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.translate_path(self.path)
        spec = self.headers.get("Range", "")
        if not os.path.isfile(path) or not spec.startswith("bytes="):
            super().do_GET()  # listings (globs), whole files, 404s
            return
        size = os.path.getsize(path)
        first, _, last = spec[len("bytes=") :].partition("-")
        lo, hi = int(first or 0), min(size - 1, int(last) if last else size - 1)
        if lo >= size:
            self.send_error(416)
            return
        with open(path, "rb") as source:
            source.seek(lo)
            data = source.read(hi - lo + 1)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Range", f"bytes {lo}-{hi}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self._send(io.BytesIO(data))

    def copyfile(self, source: Any, outputfile: Any) -> None:
        self._send(source)

    def _send(self, source: Any) -> None:
        """Writes in pieces, each counted once the socket took it (a client may
        hang up after the headers, as fsspec's checks do)."""
        try:
            while piece := source.read(CHUNK):
                self.wfile.write(piece)
                self.server.sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass


class HttpServer(http.server.ThreadingHTTPServer):
    """A folder served on loopback: ``url``, and ``sent``, the bytes sent so far."""

    daemon_threads = True
    sent = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def http_server(root: Path) -> Iterator[HttpServer]:
    """Serves ``root`` on ``127.0.0.1`` (a free port) until the block ends."""
    handler = functools.partial(_Folder, directory=str(root))
    server = HttpServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="test-http", daemon=True
    )
    thread.start()
    try:
        yield server
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
