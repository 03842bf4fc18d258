"""``from_webdataset``: the samples of WebDataset tar shards, splittable per sample.

A shard is a tar file whose consecutive members sharing a key make one
sample: ``000.jpg``, ``000.cls``, ``001.jpg``, ``001.cls`` are two samples,
``{"__key__": "000", "jpg": b"...", "cls": b"3"}`` and the next. The key is a
member's name up to the first ``.`` of its base name (its directory kept), the
extension the rest (``"seg.png"``), as the ``webdataset`` package groups them.
Directories and links are passed over, and so are ``__name__`` metadata
members, as ``webdataset`` does. With ``decode=True`` values are decoded by
their last extension (see ``decode_value``); others stay ``bytes``.

Each shard's samples are counted once, when the dataset is built, by reading
the members' headers (no data is decoded), so a shard reads as a
``RecordSource``: a split is a range of samples, a read resumes mid-shard and
a seeded order mixes samples of every shard.

Why the standard library's ``tarfile`` rather than the ``webdataset``
package: ``webdataset`` reads a shard from its start to its end, with no way
to start at a given sample, and brings its own pipeline machinery (shard
lists, shuffling, decoders, workers) that this pipeline already has.
``tarfile`` in streaming mode (``"r|*"``, compression detected) reads any
file object front to back, so a shard at a URL is streamed, and a read
starting at sample ``k`` goes over the headers before it without keeping or
decoding their data. A local file is opened in its random-access mode
(``"r:*"``) instead, so that the data of members passed over is skipped by
seeking, not read.

Errors: a shard that is missing raises ``NotFoundError``; one that is not a
tar, is truncated (the end-of-archive block included: ``tarfile`` alone would
take a truncated shard for a shorter one) or has a damaged header, a member
named without ``KEY.EXT``, a sample with the same extension twice or a value
that does not decode raise ``InvalidArgumentError`` naming the URL, the
sample and the byte offset of the member. A local compressed shard's CRC is
checked when it is counted; ``tarfile``'s stream reader checks none.

>>> import io, tarfile, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "shard-0.tar"
>>> with tarfile.open(path, "w") as tar:
...     for name, data in [("a.txt", b"hi"), ("a.cls", b"1"), ("b.txt", b"yo")]:
...         info = tarfile.TarInfo(name)
...         info.size = len(data)
...         tar.addfile(info, io.BytesIO(data))
>>> op = WebDataset()
>>> op.count(str(path), {})
2
>>> node = build(str(path), decode=True)
>>> node.args["counts"]
[2]
>>> list(op.records(node, str(path), 0))
[{'__key__': 'a', 'txt': 'hi', 'cls': np.int64(1)}, {'__key__': 'b', 'txt': 'yo'}]
>>> list(op.records(build(str(path)), str(path), 1))
[{'__key__': 'b', 'txt': b'yo'}]
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import lzma
import re
import tarfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, NamedTuple, Self

import numpy as np

from zmqdata._dataset import fs
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops.records import RecordSource
from zmqdata.errors import InvalidArgumentError

_NAME = re.compile(r"^((?:.*/)?[^./][^./]*)\.([^/]+)$")
"""``dir/key.ext``: the key has no dot and does not start with one (``webdataset``'s
``base_plus_ext``, with a non-empty extension)."""
_META = re.compile(r"__[^/]*__($|/)")
"""Metadata members (``__info__``), passed over as ``webdataset`` does."""
_CORRUPT = (
    tarfile.TarError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    gzip.BadGzipFile,
)
"""What a damaged shard raises while it is read (compressed or not)."""
_END_BLOCK: type[Exception] = tarfile.EOFHeaderError  # type: ignore[attr-defined]
"""The zero block that ends an archive, where a header would be."""
_NO_HEADER: type[Exception] = tarfile.EmptyHeaderError  # type: ignore[attr-defined]
"""The end of the file, where a header would be."""
_COUNT_THREADS = 16
"""Shards counted at once when a dataset is built (they may be remote)."""

IMAGES = frozenset({"jpg", "jpeg", "png", "ppm", "bmp", "webp"})
INTEGERS = frozenset({"cls", "index", "id"})
TEXTS = frozenset({"txt", "text"})


class WebDataset(RecordSource):
    """Samples of tar shards: node args ``files``, ``counts`` (samples each), ``decode``."""

    name = "webdataset"

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        return None  # the extensions of a shard are only known once read

    def count(self, path: str, args: dict[str, Any]) -> int:
        """The samples in the shard at ``path``, from its members' headers."""
        return sum(1 for _ in _samples(path, 0, None))

    def records(self, node: Node, path: str, first: int) -> Iterator[Any]:
        """The samples of ``path`` from sample ``first`` on; closing it closes the file."""
        decode = decode_value if node.args["decode"] else _raw
        return _samples(path, first, decode)


def build(urls: str | Sequence[str], decode: bool = False) -> Node:
    """The ``webdataset`` node reading the shards ``urls`` name (globs, URLs).

    Raises ``TypeError`` for a bad argument, ``InvalidArgumentError`` when no
    shard matches or one is not a readable tar file (naming it).
    """
    if not isinstance(decode, bool):
        raise TypeError(f"from_webdataset decode must be a bool, got {decode!r}")
    files = fs.expand(urls, "from_webdataset urls")
    op = WebDataset()
    args: dict[str, Any] = {"files": files, "decode": decode}
    if len(files) == 1:
        counts = [op.count(files[0], args)]
    else:
        threads = min(_COUNT_THREADS, len(files))
        with ThreadPoolExecutor(threads, "zmqdata-webdataset-count") as pool:
            counts = list(pool.map(lambda path: op.count(path, args), files))
    return Node("webdataset", {"files": files, "counts": counts, "decode": decode})


# ------------------------------------------------------------------ reading


class _BadHeader(Exception):
    """A damaged or missing header past a shard's first (``tarfile`` would stop there)."""


class _Header(tarfile.TarInfo):
    """A ``TarInfo`` whose reading fails loudly where ``tarfile`` ends quietly.

    ``tarfile`` takes a bad checksum, a truncated header or the end of the
    file where a header should be for the end of the archive once past its
    first member: a damaged or truncated shard would then just look shorter.
    Only the end-of-archive zero block ends a shard here.
    """

    @classmethod
    def fromtarfile(cls, tarfile_: tarfile.TarFile) -> Self:
        offset = tarfile_.offset
        try:
            return super().fromtarfile(tarfile_)
        except _END_BLOCK:
            raise  # the zero block that ends an archive
        except _NO_HEADER as error:
            if offset == 0:
                raise  # an empty file: tarfile.open says so, or tries a compression
            raise _BadHeader(
                "the data ends without the tar's end-of-archive blocks"
            ) from error
        except tarfile.HeaderError as error:
            if offset == 0:
                raise
            raise _BadHeader(f"bad member header ({error})") from error


Decoder = Callable[[str, str, bytes], Any]
"""``(url, extension, data) -> value``; raises ``ValueError`` for bad data."""


def _raw(url: str, extension: str, data: bytes) -> Any:
    return data


def _open(url: str, skimming: bool) -> tuple[IO[bytes], tarfile.TarFile]:
    """The shard's file (``NotFoundError`` if absent) and a tar reader over it.

    A file that can seek is read so (data skipped by seeking), remote ones in
    small ranges when ``skimming`` (headers only: counting).
    """
    handle = fs.open_binary(url, skimming)
    try:
        if handle.seekable():
            tar = tarfile.open(fileobj=handle, mode="r:*", tarinfo=_Header)  # noqa: SIM115
        else:
            tar = tarfile.open(fileobj=handle, mode="r|*", tarinfo=_Header)  # noqa: SIM115
    except (*_CORRUPT, _BadHeader) as error:
        handle.close()
        raise InvalidArgumentError(
            f"{url}: not a readable tar shard (sample 0, byte 0): {error}"
        ) from error
    except BaseException:
        handle.close()
        raise
    return handle, tar


def _samples(url: str, first: int, decode: Decoder | None) -> Iterator[dict[str, Any]]:
    """The samples of the shard from sample ``first`` on.

    With ``decode`` None the samples hold only their key (counting): no
    member's data is read. The file is opened on the first ``next`` and
    closed when the generator ends or is closed.
    """
    handle, tar = _open(url, skimming=decode is None)
    try:
        grouped = itertools.groupby(_keyed(url, tar), _KeyedMember.sample)
        for (index, key), members in grouped:
            if index >= first:
                yield _sample(url, tar, index, key, members, decode)
    finally:
        tar.close()
        handle.close()


class _KeyedMember(NamedTuple):
    """A file member of a shard, with its sample's index and key, and its extension."""

    number: int
    key: str
    extension: str
    info: tarfile.TarInfo

    def sample(self) -> tuple[int, str]:
        """The sample it belongs to: its number (index in the shard) and key."""
        return self.number, self.key


def _keyed(url: str, tar: tarfile.TarFile) -> Iterator[_KeyedMember]:
    """The shard's file members, each with its sample; errors name where they are."""
    index = -1
    """The sample the member read last belongs to."""
    key: str | None = None
    try:
        for member in _members(tar):
            found = _NAME.match(member.name)
            if found is None:
                raise InvalidArgumentError(
                    f"{url}: member {member.name!r} at byte {member.offset} "
                    f"({_past(index)}) has no key: WebDataset members are named "
                    "KEY.EXT, a key without dots and an extension"
                )
            if found.group(1) != key:
                index += 1
            key = found.group(1)
            yield _KeyedMember(index, key, found.group(2), member)
    except _Damaged as damaged:
        raise InvalidArgumentError(
            f"{url}: corrupt or truncated tar at byte {damaged.offset} "
            f"({_past(index)}): {damaged.__cause__}"
        ) from damaged.__cause__


def _sample(
    url: str,
    tar: tarfile.TarFile,
    index: int,
    key: str,
    members: Iterator[_KeyedMember],
    decode: Decoder | None,
) -> dict[str, Any]:
    """Sample ``index`` of its ``members``' values (only its key if no ``decode``)."""
    sample: dict[str, Any] = {"__key__": key}
    if decode is None:
        return sample
    for member in members:
        if member.extension in sample:
            raise InvalidArgumentError(
                f"{url}: sample {index} (key {key!r}) has two members "
                f"{member.info.name!r}: the second at byte {member.info.offset}"
            )
        sample[member.extension] = _value(
            url, tar, member.info, index, member.extension, decode
        )
    return sample


def _past(index: int) -> str:
    return f"past sample {index}" if index >= 0 else "before sample 0"


class _Damaged(Exception):
    """Reading the header at ``offset`` failed (the cause says why)."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The tar's file members in order, their data not read."""
    while True:
        try:
            member = tar.next()
            if member is None:  # past the end-of-archive block: the padding
                fileobj: Any = tar.fileobj
                while fileobj.read(1 << 16):  # a compressed file checks its CRC
                    pass
        except (*_CORRUPT, _BadHeader) as error:
            raise _Damaged(tar.offset) from error
        tar.members = []  # type: ignore[attr-defined]  # tarfile keeps every header
        if member is None:
            return
        if member.isreg() and not _META.match(member.name):
            yield member


def _value(
    url: str,
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    index: int,
    extension: str,
    decode: Decoder,
) -> Any:
    """The member's data, decoded; errors name the shard, sample and member."""
    where = f"{url}: sample {index}, member {member.name!r} at byte {member.offset}"
    try:
        reader = tar.extractfile(member)
        assert reader is not None  # a regular file
        with reader:
            data = reader.read()
    except (*_CORRUPT, _BadHeader) as error:
        raise InvalidArgumentError(
            f"{where}: corrupt or truncated tar: {error}"
        ) from error
    try:
        return decode(url, extension, data)
    except (ValueError, OSError) as error:  # PIL.UnidentifiedImageError is an OSError
        raise InvalidArgumentError(f"{where}: cannot decode it: {error}") from error


# ------------------------------------------------------------------ decoding


def decode_value(url: str, extension: str, data: bytes) -> Any:
    r"""A member's data decoded by its last extension, lowercased.

    Images (``jpg jpeg png ppm bmp webp``, with Pillow) become ``uint8``
    arrays ``(H, W, C)``: ``C`` is 1 (gray), 2 (gray and alpha), 3 (RGB) or 4
    (RGBA) as stored; other modes are converted (palettes and CMYK to RGB, or
    RGBA with transparency; 1-bit and 16-bit to gray). ``cls index id``
    become ``np.int64``, ``txt text`` ``str``, ``json`` its value, ``npy``
    its array; anything else stays ``bytes``.

    >>> decode_value("u", "seg.cls", b" 7\n"), decode_value("u", "TXT", b"caf\xc3\xa9")
    (np.int64(7), 'café')
    >>> decode_value("u", "json", b'{"a": [1, 2]}'), decode_value("u", "bin", b"\x00")
    ({'a': [1, 2]}, b'\x00')
    """
    kind = extension.rsplit(".", 1)[-1].lower()
    if kind in IMAGES:
        return _image(data)
    if kind in INTEGERS:
        return np.int64(int(data.decode("utf-8").strip()))
    if kind in TEXTS:
        return data.decode("utf-8")
    if kind == "json":
        return json.loads(data)
    if kind == "npy":
        return np.load(io.BytesIO(data), allow_pickle=False)
    return data


_CHANNELS = frozenset({"L", "LA", "RGB", "RGBA"})
_GRAY = frozenset({"1", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


def _image(data: bytes) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError as error:  # pragma: no cover - an optional dependency
        raise InvalidArgumentError(
            "from_webdataset(decode=True) decodes images with Pillow: pip install pillow"
        ) from error
    with Image.open(io.BytesIO(data)) as image:
        if image.mode not in _CHANNELS:
            if image.mode in _GRAY:
                target = "L"
            elif "transparency" in image.info or image.mode in ("PA", "RGBa", "La"):
                target = "RGBA"
            else:
                target = "RGB"
            converted = image.convert(target)
        else:
            converted = image
        array = np.asarray(converted, dtype=np.uint8)
    return array[:, :, np.newaxis] if array.ndim == 2 else array
