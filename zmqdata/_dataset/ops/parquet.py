"""Parquet files as a source, splittable per row (or per batch of rows).

An element is one row, a ``dict`` of its columns' values: numpy scalars for
numeric, boolean and temporal columns (``datetime64``, ``timedelta64``; a
time of day is the ``timedelta64`` since midnight), ``str`` and ``bytes`` for
text and binary ones, a 1-D ``np.ndarray`` for a list column, a nested
``dict`` for a struct. With ``batch_rows``, an element is up to that many
consecutive rows of one row group as a ``dict`` of numpy columns (text as
``<U``, binary as ``S`` arrays), what ``batch(batch_rows)`` makes of the rows;
batches never span row groups or files. A list column's batch is a 2-D array
when its lists have equal lengths, else a 1-D object array of the rows' 1-D
arrays (views of one buffer): ``batch[i]`` is row ``i``'s list either way.

Files are counted from their footers when the dataset is built (no data is
read), and read with pyarrow, streamed row group by row group from the one
holding the first element wanted. Nulls read as NaN in float columns and NaT
in temporal ones; anywhere else a null is an error naming its row.

>>> import tempfile, os
>>> import pyarrow as pa, pyarrow.parquet as pq
>>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
>>> pq.write_table(pa.table({"x": [1, 2, 3], "s": ["a", "b", "c"]}), path)
>>> node = build(path)
>>> node.args["counts"]
[3]
>>> list(Parquet().records(node, path, 1))
[{'x': np.int64(2), 's': 'b'}, {'x': np.int64(3), 's': 'c'}]
>>> list(Parquet().records(build(path, ["s"], batch_rows=2), path, 0))
[{'s': array(['a', 'b'], dtype='<U1')}, {'s': array(['c'], dtype='<U1')}]
>>> pq.write_table(pa.table({"l": [[1, 2], [3]]}), path)
>>> next(Parquet().records(build(path, batch_rows=2), path, 0))
{'l': array([array([1, 2]), array([3])], dtype=object)}
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import numpy as np

from zmqdata._dataset import fs, structure
from zmqdata._dataset.block import Block
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops.records import RecordSource
from zmqdata._dataset.validate import check_optional_int
from zmqdata._wire.decoder import object_array
from zmqdata.errors import InvalidArgumentError

READ_BYTES = 4 << 20
"""About how many (uncompressed) bytes one read of rows decodes at a time."""
READ_ROWS = (64, 65_536)
"""The fewest and most rows one read decodes (row elements)."""
_NAT = -(2**63)
"""``NaT`` as the int64 numpy stores."""


def _arrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, or an error saying how to install them."""
    try:
        return (
            importlib.import_module("pyarrow"),
            importlib.import_module("pyarrow.parquet"),
        )
    except ImportError as error:
        raise InvalidArgumentError(
            f"reading Parquet files needs pyarrow: pip install 'zmqdata[parquet]' ({error})"
        ) from error


# ---------------------------------------------------------------- Arrow types


class _Unsupported(Exception):
    """An Arrow type with no numpy form here (the message names it)."""


_LEAF_DTYPES: Final[tuple[tuple[tuple[str, ...], Callable[[Any], Any]], ...]] = (
    (("boolean", "integer", "floating"), lambda t: np.dtype(t.to_pandas_dtype())),
    (("timestamp",), lambda t: np.dtype(f"M8[{t.unit}]")),
    (("duration",), lambda t: np.dtype(f"m8[{t.unit}]")),
    (("date32",), lambda t: np.dtype("M8[D]")),
    (("date64",), lambda t: np.dtype("M8[ms]")),
    (("time",), lambda t: np.dtype(f"m8[{t.unit}]")),
    (("string", "large_string", "string_view"), lambda t: str),
    (("binary", "large_binary", "fixed_size_binary", "binary_view"), lambda t: bytes),
)
"""``pyarrow.types.is_<name>`` checks, each with what a value of such a type reads as."""


def _leaf_dtype(pa: Any, t: Any) -> Any:
    """The numpy dtype (or ``str`` / ``bytes``) a value of Arrow type ``t`` reads as."""
    types = pa.types
    if types.is_dictionary(t):
        return _leaf_dtype(pa, t.value_type)
    for names, dtype in _LEAF_DTYPES:
        if any(_is(types, name, t) for name in names):
            return dtype(t)
    raise _Unsupported(str(t))


def _is(types: Any, name: str, t: Any) -> bool:
    """``pyarrow.types.is_<name>(t)``, False where this pyarrow lacks the type."""
    check = getattr(types, f"is_{name}", None)
    return bool(check(t)) if check is not None else False


def _is_list(pa: Any, t: Any) -> bool:
    types = pa.types
    return bool(
        types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t)
    )


def _spec(pa: Any, t: Any, batched: bool) -> Any:
    """The element spec of a column of Arrow type ``t`` (a row, or a batch of rows)."""
    outer: tuple[int | None, ...] = (None,) if batched else ()
    if pa.types.is_struct(t):
        return {
            t.field(i).name: _spec(pa, t.field(i).type, batched)
            for i in range(t.num_fields)
        }
    if _is_list(pa, t):
        dtype = _array_dtype(_leaf_dtype(pa, t.value_type))
        size = t.list_size if pa.types.is_fixed_size_list(t) else None
        return structure.TensorSpec((*outer, size), dtype)
    dtype = _leaf_dtype(pa, t)
    return structure.TensorSpec(outer, _array_dtype(dtype) if batched else dtype)


def _array_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype of an array of leaves of ``dtype`` (text has no fixed width)."""
    if dtype is str:
        return np.dtype(np.str_)
    if dtype is bytes:
        return np.dtype(np.bytes_)
    result: np.dtype[Any] = np.dtype(dtype)
    return result


def _spec_args(spec: Any) -> Any:
    """A nested spec as msgpack values: a leaf as ``[dtype, [dims]]``."""
    if isinstance(spec, dict):
        return {name: _spec_args(child) for name, child in spec.items()}
    dtype = (
        f"py:{spec.dtype.__name__}" if isinstance(spec.dtype, type) else spec.dtype.str
    )
    return [dtype, list(spec.shape)]


def _spec_from_args(args: Any) -> Any:
    if isinstance(args, dict):
        return {name: _spec_from_args(child) for name, child in args.items()}
    dtype, shape = args
    kind = {"py:str": str, "py:bytes": bytes}.get(dtype) or np.dtype(dtype)
    return structure.TensorSpec(tuple(shape), kind)


# ---------------------------------------------------------------- conversion


class _NullError(Exception):
    """A null where numpy has no value for it, at ``row`` of the batch read."""

    def __init__(self, column: str, row: int) -> None:
        super().__init__(column, row)
        self.column, self.row = column, row


def _first_null(array: Any) -> int:
    return int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])


def _check_nulls(name: str, array: Any) -> None:
    if array.null_count:
        raise _NullError(name, _first_null(array))


def _writable(values: np.ndarray) -> np.ndarray:
    return values if values.flags.writeable else values.copy()


def _leaf_values(pa: Any, name: str, array: Any, batched: bool) -> Any:
    """A column of scalar type: a numpy array, or a list of ``str`` / ``bytes``."""
    types = pa.types
    t = array.type
    if types.is_dictionary(t):
        return _leaf_values(pa, name, array.dictionary_decode(), batched)
    dtype = _leaf_dtype(pa, t)
    if isinstance(dtype, type):  # str or bytes
        _check_nulls(name, array)
        if batched:  # (Arrow's objects cast: a third faster than from a list)
            objects = array.to_numpy(zero_copy_only=False)
            return objects.astype(_array_dtype(dtype))
        return array.to_pylist()
    if types.is_time(t):  # time of day -> timedelta64 since midnight
        ints = array.cast(pa.int32() if t.bit_width == 32 else pa.int64())
        values = ints.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        if array.null_count:
            values[array.is_null().to_numpy(zero_copy_only=False)] = _NAT
        return values.view(dtype)
    if dtype.kind not in "fmM":  # NaN, NaT stand for nulls in the others
        _check_nulls(name, array)
    values = array.to_numpy(zero_copy_only=False)
    return _writable(values) if batched else values


def _list_values(pa: Any, name: str, array: Any, batched: bool) -> Any:
    """A list column: one array per row, or a batch's 2-D array or object array.

    A batch is 2-D when its lists have equal lengths, else a 1-D object array of
    its rows' arrays (views of one buffer).
    """
    _check_nulls(name, array)
    rows = len(array)
    if pa.types.is_fixed_size_list(array.type):
        lengths = np.full(rows, array.type.list_size, dtype=np.int64)
    else:
        lengths = array.value_lengths().to_numpy(zero_copy_only=False)
    ends = np.cumsum(lengths)
    try:
        values = _leaf_values(pa, name, array.flatten(), batched=True)
    except _NullError as null:  # at an item: name its row
        raise _NullError(name, int(np.searchsorted(ends, null.row, "right"))) from None
    if not rows or not (lengths != lengths[0]).any():  # equal: rows of a 2-D view
        table = values.reshape(rows, int(lengths[0]) if rows else 0)
        return table if batched else list(table)
    bounds = ends.tolist()
    pieces = [values[lo:hi] for lo, hi in zip([0, *bounds[:-1]], bounds, strict=True)]
    return object_array(pieces) if batched else pieces


def _column(pa: Any, name: str, array: Any, batched: bool) -> Any:
    """A column of a batch read: per row values (a sequence), or the batch's leaf."""
    t = array.type
    if pa.types.is_struct(t):
        _check_nulls(name, array)
        fields = [t.field(i).name for i in range(t.num_fields)]
        children = [
            _column(pa, f"{name}.{field}", array.field(i), batched)
            for i, field in enumerate(fields)
        ]
        if batched:
            return dict(zip(fields, children, strict=True))
        return [
            dict(zip(fields, row, strict=True)) for row in zip(*children, strict=True)
        ]
    if _is_list(pa, t):
        return _list_values(pa, name, array, batched)
    return _leaf_values(pa, name, array, batched)


# ---------------------------------------------------------------- the op


def _open(pq: Any, handle: Any) -> Any:
    """A ``ParquetFile`` over ``handle`` that checks page checksums where written."""
    return pq.ParquetFile(handle, page_checksum_verification=True)


def _footer(path: str) -> Any:
    """The file's ``ParquetFile.metadata`` (read from its footer alone)."""
    pa, pq = _arrow()
    with fs.open_binary(path) as handle:
        try:
            return _open(pq, handle).metadata
        except (pa.ArrowException, OSError) as error:
            raise InvalidArgumentError(
                f"{path}: not a readable Parquet file: {error}"
            ) from None


def _elements(rows: Sequence[int], batch_rows: int | None) -> list[int]:
    """Elements of each row group: its rows, or its batches of ``batch_rows``."""
    return [-(-n // batch_rows) if batch_rows else n for n in rows]


def _group_rows(metadata: Any) -> list[int]:
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def _names(schema: Any, columns: list[str] | None, where: str) -> list[str]:
    """The columns read (``columns``, else all), each checked to be in ``schema``."""
    present = list(schema.names)
    if columns is None:
        return present
    missing = [c for c in columns if c not in present]
    if missing:
        raise InvalidArgumentError(
            f"{where}: no column {missing[0]!r} in the Parquet file "
            f"(its columns: {present})"
        )
    return list(columns)


class Parquet(RecordSource):
    """Rows (or batches of rows) of Parquet files; see the module docstring."""

    name = "parquet"

    def count(self, path: str, args: dict[str, Any]) -> int:
        return sum(_elements(_group_rows(_footer(path)), args.get("batch_rows")))

    def element_spec(self, node: Node, inputs: list[Any]) -> Any:
        spec = node.args.get("spec")
        return None if spec is None else _spec_from_args(spec)

    def records(self, node: Node, path: str, first: int) -> Iterator[Any]:
        return _read(path, first, node.args["columns"], node.args["batch_rows"])

    def record_blocks(
        self, node: Node, path: str, first: int
    ) -> Iterator[Block] | None:
        """Rows of scalar columns only, as the blocks of rows they are read in."""
        spec = node.args["spec"]
        flat = spec is not None and all(
            isinstance(leaf, list) and len(leaf[1]) <= 1 for leaf in spec.values()
        )
        if node.args["batch_rows"] is not None or not flat:  # no structs, 2-D lists
            return None
        return _read(path, first, node.args["columns"], None, as_blocks=True)


def _read(
    path: str,
    first: int,
    columns: list[str] | None,
    batch_rows: int | None,
    as_blocks: bool = False,
) -> Iterator[Any]:
    """The elements of ``path`` from element ``first`` on; the file is closed at the end.

    ``as_blocks``: rows, as a ``Block`` per batch of them read.
    """
    pa, pq = _arrow()
    handle = fs.open_binary(path)
    try:
        read = _Read(pa, path, first, batch_rows, as_blocks)
        yield from read.elements(*read.open(pq, handle, columns))
    finally:
        handle.close()


class _Read:
    """A read of one file from an element on, which knows where it is (for errors)."""

    def __init__(
        self,
        pa: Any,
        path: str,
        first: int,
        batch_rows: int | None,
        as_blocks: bool = False,
    ) -> None:
        self.pa, self.path, self.batch_rows = pa, path, batch_rows
        self.as_blocks = as_blocks
        self.batched = batch_rows is not None
        self.element = first
        """The element read next."""
        self.row = 0
        """The row of the file read next."""
        self.skip = 0
        """Rows still to pass over before ``element``."""
        self.names: list[str] = []
        """The columns read."""

    def failure(self, what: str) -> InvalidArgumentError:
        """An error saying ``what`` went wrong, naming the element and row."""
        return InvalidArgumentError(
            f"{self.path}: element {self.element} (row {self.row}): {what}"
        )

    def open(
        self, pq: Any, handle: Any, columns: list[str] | None
    ) -> tuple[Any, list[int]]:
        """The ``ParquetFile`` over ``handle`` and its row groups' rows; keeps ``columns``."""
        try:
            parquet = _open(pq, handle)
            where = f"{self.path}: element {self.element}"
            self.names = _names(parquet.schema_arrow, columns, where)
            rows = _group_rows(parquet.metadata)
        except (self.pa.ArrowException, OSError) as error:
            raise self.failure(f"not a readable Parquet file: {error}") from None
        return parquet, rows

    def elements(self, parquet: Any, rows: list[int]) -> Iterator[Any]:
        """The elements from ``element`` on, row group by row group."""
        for group in range(self._seek(rows), len(rows)):
            yield from self._group(parquet, group)

    def _seek(self, rows: list[int]) -> int:
        """The row group holding ``element``; ``row`` and ``skip`` set to get there."""
        counts = _elements(rows, self.batch_rows)
        begin, start = 0, 0  # the group holding `element`, and its first element
        while begin < len(rows) and start + counts[begin] <= self.element:
            start, self.row = start + counts[begin], self.row + rows[begin]
            begin += 1
        self.skip = (self.element - start) * (self.batch_rows or 1)
        return begin

    def _group(self, parquet: Any, group: int) -> Iterator[Any]:
        """The elements of row group ``group``, less the rows to skip."""
        size = _read_rows(parquet.metadata.row_group(group))
        if self.batch_rows:  # read many batches at once: a third less decoding
            size = self.batch_rows * max(1, size // self.batch_rows)
        batches = parquet.iter_batches(
            batch_size=size, row_groups=[group], columns=self.names
        )
        try:
            pieces = _exact(self.pa, batches, size) if self.batch_rows else batches
            while (batch := self._next_batch(pieces)) is not None:
                batch = self._skipped(batch)
                if batch is None:
                    continue
                if not self.batch_rows:
                    yield from self._batch_elements(batch)
                    continue
                for lo in range(0, batch.num_rows, self.batch_rows):
                    yield from self._batch_elements(batch.slice(lo, self.batch_rows))
        finally:
            batches.close()

    def _next_batch(self, pieces: Iterator[Any]) -> Any:
        """The next batch of ``pieces`` (None past the last); raises for bad data."""
        try:
            return next(pieces, None)
        except (self.pa.ArrowException, OSError) as error:
            raise self.failure(f"corrupt Parquet data: {error}") from None

    def _skipped(self, batch: Any) -> Any:
        """``batch`` less the rows still to skip (None if none are left)."""
        if self.skip >= batch.num_rows:
            self.skip -= batch.num_rows
            self.row += batch.num_rows
            return None
        if self.skip:
            batch, self.row, self.skip = batch.slice(self.skip), self.row + self.skip, 0
        return batch

    def _batch_elements(self, batch: Any) -> Iterator[Any]:
        """The elements of ``batch``: itself (``batch_rows``), or one per row."""
        names = self.names
        converted = self._convert(batch)
        if self.as_blocks:
            if batch.num_rows:
                yield Block.of(dict.fromkeys(names), converted)
            self.element += batch.num_rows
            self.row += batch.num_rows
            return
        if self.batched:
            yield dict(zip(names, converted, strict=True))
            self.element += 1
            self.row += batch.num_rows
            return
        for values in zip(*converted, strict=False):  # hot: equal lengths
            yield dict(zip(names, values, strict=False))
            self.element += 1
            self.row += 1

    def _convert(self, batch: Any) -> list[Any]:
        """The columns of ``batch`` as numpy values; errors name the element and row.

        As blocks, a list column is read as a batch's (a 2-D or object array).
        """
        pa = self.pa
        try:
            return [
                _column(pa, name, column, self.batched)
                if not (self.as_blocks and _is_list(pa, column.type))
                else _list_values(pa, name, column, batched=True)
                for name, column in zip(self.names, batch.columns, strict=True)
            ]
        except _NullError as null:
            self.row += null.row
            self.element += null.row if not self.batched else 0
            raise self.failure(
                f"column {null.column!r} is null, which has no numpy value "
                "here (only float and temporal columns read nulls, as NaN "
                "and NaT): fill it or leave the column out"
            ) from None
        except _Unsupported as kind:
            raise self.failure(
                f"a column has Arrow type {kind}, which has no numpy form "
                "here: leave it out with columns=[...]"
            ) from None
        except InvalidArgumentError as error:
            raise self.failure(str(error)) from None


def _read_rows(group: Any) -> int:
    """How many rows to decode at a time in ``group``: about ``READ_BYTES``."""
    per_row = max(1, int(group.total_byte_size) // max(1, int(group.num_rows)))
    return max(READ_ROWS[0], min(READ_ROWS[1], READ_BYTES // per_row))


def _exact(pa: Any, batches: Iterator[Any], size: int) -> Iterator[Any]:
    """``batches`` (of one row group) recut into batches of ``size`` rows, the last fewer."""
    pending: list[Any] = []
    have = 0
    for batch in batches:
        if not pending and batch.num_rows == size:
            yield batch
            continue
        while batch.num_rows:
            take = min(size - have, batch.num_rows)
            pending.append(batch.slice(0, take))
            have += take
            batch = batch.slice(take)
            if have == size:
                yield _concat(pa, pending)
                pending, have = [], 0
    if pending:
        yield _concat(pa, pending)


def _concat(pa: Any, pieces: list[Any]) -> Any:
    if len(pieces) == 1:
        return pieces[0]
    return pa.Table.from_batches(pieces).combine_chunks().to_batches()[0]


# ---------------------------------------------------------------- building


def build(
    paths: str | Sequence[str],
    columns: Sequence[str] | None = None,
    batch_rows: int | None = None,
) -> Node:
    """The ``parquet`` node of ``Dataset.from_parquet``: files listed and counted.

    Raises ``TypeError`` / ``ValueError`` for a bad argument,
    ``InvalidArgumentError`` for a file that is not Parquet or lacks a column,
    ``NotFoundError`` for a missing one.
    """
    columns = _check_columns(columns)
    batch_rows = check_optional_int("from_parquet batch_rows", batch_rows, minimum=1)
    pa, _ = _arrow()
    files = fs.expand(paths, "from_parquet paths")
    counts: list[int] = []
    specs: list[Any] = []
    for path in files:
        count, file_spec = _file_elements(pa, path, columns, batch_rows)
        counts.append(count)
        if count:  # an empty file's types do not matter (nor are they known)
            specs.append(file_spec)
    spec = specs[0] if specs else None
    for other in specs[1:]:
        spec = structure.common_spec(spec, other)
    return Node(
        "parquet",
        {
            "files": files,
            "counts": counts,
            "columns": columns,
            "batch_rows": batch_rows,
            "spec": None if spec is None else _spec_args(spec),
        },
    )


def _check_columns(columns: Any) -> list[str] | None:
    """``from_parquet``'s ``columns`` as a list (or None); raises if it is not one."""
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, list | tuple):
        raise TypeError(
            f"from_parquet columns must be a list of str or None, got {columns!r}"
        )
    if not columns or not all(isinstance(c, str) and c for c in columns):
        raise ValueError(
            "from_parquet columns must be a non-empty list of non-empty str, "
            f"got {columns!r}"
        )
    if len(set(columns)) != len(columns):
        raise ValueError(f"from_parquet columns has duplicates: {columns!r}")
    return list(columns)


def _file_elements(
    pa: Any, path: str, columns: list[str] | None, batch_rows: int | None
) -> tuple[int, Any]:
    """How many elements the file at ``path`` holds, and their spec (from its footer)."""
    metadata = _footer(path)
    try:
        schema = metadata.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as error:
        raise InvalidArgumentError(
            f"{path}: not a readable Parquet file: {error}"
        ) from None
    names = _names(schema, columns, path)
    count = sum(_elements(_group_rows(metadata), batch_rows))
    if not count:
        return count, None
    return count, _file_spec(pa, schema, names, batch_rows is not None, path)


def _file_spec(pa: Any, schema: Any, names: list[str], batched: bool, path: str) -> Any:
    """The element spec one file's schema gives; refuses a column it cannot read."""
    spec = {}
    for name in names:
        t = schema.field(name).type
        try:
            spec[name] = _spec(pa, t, batched)
        except _Unsupported as kind:
            raise InvalidArgumentError(
                f"{path}: column {name!r} has Arrow type {t}, whose {kind} values have "
                "no numpy form here: leave it out with columns=[...]"
            ) from None
    return spec
