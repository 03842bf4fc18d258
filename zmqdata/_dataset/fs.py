"""Paths and URLs: where a pipeline's files live, through fsspec.

Every path argument (``list_files`` patterns, readers' ``paths``) is a local
path, a glob, or an fsspec URL (``s3://``, ``gs://``, ``http(s)://``,
``memory://``, …). Credentials and endpoints come from fsspec's usual
configuration (environment variables such as ``AWS_ACCESS_KEY_ID`` and
``AWS_ENDPOINT_URL``, ``~/.config/fsspec``); nothing here stores them. Local
paths take the plain file system (no fsspec import). Files are opened for
streaming: the first record is read without downloading the whole object.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> for name in ("b.txt", "a.txt"):
...     _ = (folder / name).write_text("x")
>>> [pathlib.Path(p).name for p in expand(str(folder / "*.txt"))]
['a.txt', 'b.txt']
"""

from __future__ import annotations

import contextlib
import errno
import glob
import io
import mmap
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import IO, Any

from zmqdata.errors import InvalidArgumentError, NotFoundError

_GLOB_CHARS = "*?["


class NoFileError(NotFoundError, InvalidArgumentError):
    """No file matches a path or glob, or it cannot be listed (naming it).

    A ``NotFoundError``; an ``InvalidArgumentError`` too, as it was before.
    """


TEMPORARY = ".tmp"
"""How the names of ``writing``'s temporary files end (they start with ".")."""


def is_url(path: str) -> bool:
    """Whether ``path`` names a file system other than the local one."""
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path.removeprefix("file://")


def expand(patterns: str | Sequence[str], what: str = "paths") -> list[str]:
    """The files ``patterns`` name (globs expanded), sorted and unique.

    Raises ``TypeError`` for a bad argument and ``NoFileError`` (a
    ``NotFoundError``) when nothing matches, naming the pattern.
    """
    listed = [patterns] if isinstance(patterns, str) else patterns
    if not isinstance(listed, list | tuple) or not listed:
        raise TypeError(
            f"{what} must be a non-empty str or list of str, got {patterns!r}"
        )
    if not all(isinstance(p, str) and p for p in listed):
        raise TypeError(
            f"{what} must be a non-empty str or list of str, got {patterns!r}"
        )
    files: set[str] = set()
    for pattern in listed:
        found = _glob(pattern)
        if not found:
            raise NoFileError(f"{what}: no file matches {pattern!r}")
        files.update(found)
    return sorted(files)


def _glob(pattern: str) -> list[str]:
    """The files ``pattern`` (a local path or URL, a glob or not) names, unsorted."""
    if not is_url(pattern):
        return _glob_local(_local(pattern))
    fs, protocol = _filesystem(pattern)
    try:
        found = _glob_remote(fs, pattern)
    except FileNotFoundError:
        return []
    except Exception as error:  # a denied credential, an unreachable endpoint
        raise NoFileError(f"cannot list {pattern!r}: {error}") from error
    return [_with_protocol(p, protocol) for p in found]


def _glob_local(path: str) -> list[str]:
    """The local files ``path`` (a glob or not) names."""
    if not any(c in path for c in _GLOB_CHARS):
        return [path] if os.path.isfile(path) else []
    return [p for p in glob.glob(path) if os.path.isfile(p)]


def _glob_remote(fs: Any, url: str) -> list[str]:
    """The objects ``url`` (a glob or not) names on the fsspec file system ``fs``."""
    if any(c in url.split("://", 1)[1] for c in _GLOB_CHARS):
        return list(fs.glob(url))
    # info, not isfile: over http that is a HEAD, not a GET of the object
    return [url] if fs.info(url).get("type") != "directory" else []


def _with_protocol(path: str, protocol: str) -> str:
    return path if "://" in path else f"{protocol}://{path}"


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as error:  # pragma: no cover - fsspec is a dependency
        raise InvalidArgumentError(
            f"reading {url!r} needs fsspec: pip install 'zmqdata[fsspec]'"
        ) from error
    protocol = url.split("://", 1)[0]
    try:
        return fsspec.filesystem(protocol), protocol
    except (ImportError, ValueError) as error:
        raise InvalidArgumentError(
            f"cannot read {url!r}: no file system for {protocol!r} ({error}); "
            "install its fsspec package (s3fs, gcsfs, aiohttp for http)"
        ) from error


SKIMMING_BLOCK = 1 << 16
"""The reads of a remote file opened to skim its headers (counting records):
small, so that seeking over large records does not fetch them."""


def open_binary(path: str, skimming: bool = False) -> IO[bytes]:
    """``path`` opened for reading, streamed; ``NotFoundError`` naming it if absent.

    ``skimming``: a remote file is read in ``SKIMMING_BLOCK`` ranges rather
    than fsspec's default (MiBs), for reads of headers that seek over data.
    """
    try:
        if not is_url(path):
            return open(_local(path), "rb")
        fs, _ = _filesystem(path)
        options = {"block_size": SKIMMING_BLOCK} if skimming else {}
        handle: IO[bytes] = fs.open(path, "rb", **options)
        return handle
    except FileNotFoundError as error:
        raise NotFoundError(f"{path}: no such file or object") from error
    except InvalidArgumentError:
        raise
    except Exception as error:  # a denied credential, an unreachable endpoint
        raise NotFoundError(f"cannot open {path}: {error}") from error


def open_binary_for_writing(path: str) -> IO[bytes]:
    """``path`` opened for writing (a local file or an fsspec URL)."""
    if not is_url(path):
        return open(_local(path), "wb")
    fs, _ = _filesystem(path)
    handle: IO[bytes] = fs.open(path, "wb")
    return handle


def join(path: str, *names: str) -> str:
    """``names`` under ``path``, a local directory or a URL (``file://`` dropped).

    >>> join("s3://bucket/save/", "chunks", "a"), join("file:///tmp/save", "b")
    ('s3://bucket/save/chunks/a', '/tmp/save/b')
    """
    if is_url(path):
        return "/".join([path.rstrip("/"), *names])
    return os.path.join(_local(path), *names)


@contextlib.contextmanager
def writing(path: str, exclusive: bool = False) -> Iterator[IO[bytes]]:
    """A file to write ``path`` through: whole on a clean exit, else nothing.

    A local file is written under a temporary name in its directory (created
    if missing), synced, then renamed to ``path`` (``exclusive``: linked,
    ``FileExistsError`` if ``path`` exists), its directory synced. An object
    (an fsspec URL) is buffered in memory and written by one put, which object
    stores make atomic (``exclusive`` checks first there, not atomically). On
    an error in the block (or while committing) the temporary file is removed
    and the error propagates as it is (``OSError``, fsspec's own).

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "sub" / "a.bin"
    >>> with writing(str(target)) as out:
    ...     _ = out.write(b"data")
    >>> target.read_bytes(), [p.name for p in target.parent.iterdir()]
    (b'data', ['a.bin'])
    """
    if is_url(path):
        fs, _ = _filesystem(path)
        buffer = io.BytesIO()
        yield buffer
        if exclusive and fs.exists(path):
            raise FileExistsError(errno.EEXIST, "exists", path)
        fs.pipe_file(path, buffer.getvalue())
        return
    path = _local(path)
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{name}.{uuid.uuid4().hex}{TEMPORARY}")
    try:
        with open(temporary, "xb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        if exclusive:
            os.link(temporary, path)
        else:
            os.replace(temporary, path)
        _sync_folder(folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)


def _sync_folder(folder: str) -> None:
    """Makes a rename in ``folder`` durable (a no-op where folders cannot sync)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_temporaries(folder: str) -> None:
    """Removes what ``writing`` left in local ``folder`` when its writer died.

    Object stores hold no temporaries (one put per object): nothing to do.
    """
    if is_url(folder):
        return
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(_local(folder)):
            if name.startswith(".") and name.endswith(TEMPORARY):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(_local(folder), name))


def remove(path: str) -> None:
    """Removes the file or object at ``path``; nothing if there is none."""
    if not is_url(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(_local(path))
        return
    fs, _ = _filesystem(path)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)


@contextlib.contextmanager
def mapped(path: str) -> Iterator[Any]:
    """The bytes of the file at ``path``, whole; ``NotFoundError`` if absent.

    A local file is memory-mapped (no copy), an object read. Only for files nobody changes in place while they are mapped (a file
    truncated under a mapping faults the process); a file replaced by a rename
    is safe.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.bin"
    >>> _ = target.write_bytes(b"data")
    >>> with mapped(str(target)) as data:
    ...     bytes(data[1:3]), len(data)
    (b'at', 4)
    """
    if is_url(path):
        with open_binary(path) as remote:
            yield remote.read()
        return
    with open_binary(path) as file:
        size = os.fstat(file.fileno()).st_size
        view = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    try:
        yield view
    finally:
        if isinstance(view, mmap.mmap):
            with contextlib.suppress(BufferError):  # views left: freed with them
                view.close()
