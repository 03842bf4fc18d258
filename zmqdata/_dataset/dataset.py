"""``Dataset``: an immutable, lazily evaluated pipeline definition.

Building a dataset runs nothing; ``iter()`` runs one fresh pass, locally or,
after ``service.distribute``, on service workers.

>>> import zmqdata as zd
>>> ds = zd.Dataset.range(10).map(lambda x: x * 2).filter(lambda x: x % 3 == 0)
>>> [x.tolist() for x in ds.batch(2)]
[[0, 6], [12, 18]]
>>> ds.cardinality() == zd.UNKNOWN_CARDINALITY
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from zmqdata._dataset import builders, structure
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Constant, Node, make_iterator
from zmqdata._dataset.ops import mix
from zmqdata._dataset.validate import check_callable, check_int


class Dataset:
    """A pipeline of sources and transformations over nested numpy elements.

    Use the static source methods to make one and the transformation methods
    to derive new ones; each returns a new ``Dataset`` and leaves ``self`` as is.
    """

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    def _then(self, op: str, **args: Any) -> Dataset:
        return Dataset(Node(op, args, (self._node,)))

    # ------------------------------------------------------------ sources

    @staticmethod
    def range(*args: int, step: int | None = None) -> Dataset:
        """``range(stop)`` or ``range(start, stop, step=1)`` of ``np.int64`` scalars.

        >>> [int(x) for x in Dataset.range(2, 10, 3)]
        [2, 5, 8]
        """
        return Dataset(builders.range_node(args, step))

    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """Slices of ``tensors`` along axis 0 (an array, list, or tuple/dict of them).

        >>> [(int(a), b.tolist()) for a, b in Dataset.from_tensor_slices(([1, 2], [[3], [4]]))]
        [(1, [3]), (2, [4])]
        """
        return Dataset(builders.tensor_slices_node(tensors))

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """A dataset of exactly one element, ``tensors``.

        >>> list(Dataset.from_tensors({"x": 1}))
        [{'x': 1}]
        """
        copy = structure.map_leaves(
            lambda leaf: leaf.copy() if isinstance(leaf, np.ndarray) else leaf, tensors
        )
        return Dataset(Node("from_tensors", {"tensors": Constant(copy)}))

    @staticmethod
    def from_generator(fn: Callable[..., Any], args: Sequence[Any] = ()) -> Dataset:
        """Whatever ``fn(*args)`` yields; ``fn`` is called anew for each pass.

        >>> list(Dataset.from_generator(lambda n: iter("ab" * n), args=(2,)))
        ['a', 'b', 'a', 'b']
        """
        return Dataset(builders.generator_node(fn, args))

    @staticmethod
    def from_source(source: Any) -> Dataset:
        """``source[i]`` for ``i`` in ``range(len(source))``: any random-access object.

        An HF ``datasets.Dataset``, a list, a memory-mapped array reader…
        Splittable by index ranges, so ``distributed_epoch`` reads it
        exactly once and saves its position per element. The object travels
        to workers by cloudpickle.

        >>> [int(x) for x in Dataset.from_source([3, 1, 2])]
        [3, 1, 2]
        """
        return Dataset(builders.source_node(source))

    @staticmethod
    def from_tfrecord(
        paths: str | Sequence[str], compression_type: str | None = None
    ) -> Dataset:
        """The records (``bytes``) of TFRecord files: paths, globs or URLs.

        Checksums are checked; ``compression_type="GZIP"`` reads gzipped
        files. Records are counted when the dataset is built, so it is
        splittable per record. ``zd.io.parse_example`` decodes
        ``tf.train.Example`` records.
        """
        from zmqdata._dataset.ops import tfrecord

        return Dataset(tfrecord.build(paths, compression_type))

    @staticmethod
    def from_parquet(
        paths: str | Sequence[str],
        columns: Sequence[str] | None = None,
        batch_rows: int | None = None,
    ) -> Dataset:
        """Rows (``dict`` of numpy values) of Parquet files, or ``batch_rows`` at once.

        Paths, globs or URLs; splittable per element (row counts come from
        the files' footers when the dataset is built). Needs ``zmqdata[parquet]``.
        """
        from zmqdata._dataset.ops import parquet

        return Dataset(parquet.build(paths, columns, batch_rows))

    @staticmethod
    def from_webdataset(urls: str | Sequence[str], decode: bool = False) -> Dataset:
        """Samples of WebDataset tar shards: ``{"__key__": key, ext: value, …}``.

        Values are ``bytes``, or decoded by extension with ``decode=True``.
        Splittable per sample (samples are counted when the dataset is built).
        """
        from zmqdata._dataset.ops import webdataset

        return Dataset(webdataset.build(urls, decode))

    @staticmethod
    def load(path: str) -> Dataset:
        """The elements of a finished ``service.distributed_save`` at ``path``.

        A local directory or an fsspec URL. Element spec and cardinality come
        from the save's manifest (no data is read); splittable per element;
        every chunk's checksum is checked as it is read (docs/formats.md). A
        save not finished, or none, is refused naming the path:

        >>> import tempfile
        >>> Dataset.load(tempfile.mkdtemp())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        zmqdata.errors.NotFoundError: no finished save at ...
        """
        from zmqdata._dataset.ops import load

        return Dataset(load.build(path))

    @staticmethod
    def list_files(
        pattern: str | Sequence[str], shuffle: bool = True, seed: int | None = None
    ) -> Dataset:
        """Paths (``str``) of the files matching a glob ``pattern`` (or a list of them).

        Local paths, globs and fsspec URLs (``s3://…/*.tar``, ``http(s)://``,
        ``memory://``). The pattern is matched once, when the dataset is built;
        the file list travels with the pipeline.
        """
        return Dataset(builders.list_files_node(pattern, shuffle, seed))

    @staticmethod
    def zip(datasets: Sequence[Dataset] | Mapping[str, Dataset]) -> Dataset:
        """Tuples (or dicts) of the elements of ``datasets``; ends with the shortest.

        >>> [(int(a), int(b)) for a, b in Dataset.zip((Dataset.range(3), Dataset.range(5, 7)))]
        [(0, 5), (1, 6)]
        """
        keys, members = builders.zip_members(datasets)
        if not members or not all(isinstance(d, Dataset) for d in members):
            raise TypeError(
                f"zip takes a non-empty tuple or dict of datasets, got {datasets!r}"
            )
        return Dataset(Node("zip", {"keys": keys}, tuple(d._node for d in members)))

    @staticmethod
    def sample_from_datasets(
        datasets: Sequence[Dataset],
        weights: Sequence[float] | None = None,
        seed: int | None = None,
        stop_on_empty_dataset: bool = False,
    ) -> Dataset:
        """Elements drawn at random from ``datasets``, ``datasets[i]`` by ``weights[i]``.

        ``weights`` (finite, >= 0, not all 0; None: uniform) are scaled to sum
        to 1. A ``seed`` makes every pass draw the same choices; None draws
        new ones each pass. Each dataset keeps its order. When one ends, the
        mixture ends (``stop_on_empty_dataset=True``) or samples the others
        with their weights renormalized, to the end of the last. Not
        splittable: docs/modes.md, Mixtures.

        >>> ds = Dataset.sample_from_datasets(
        ...     [Dataset.range(3), Dataset.range(100, 103)], weights=[0.5, 0.5], seed=137)
        >>> [int(x) for x in ds]
        [100, 0, 1, 101, 2, 102]
        """
        nodes = _nodes_of(mix.SAMPLE, datasets)
        return Dataset(mix.sample(nodes, weights, seed, stop_on_empty_dataset))

    @staticmethod
    def choose_from_datasets(
        datasets: Sequence[Dataset],
        choice_dataset: Dataset,
        stop_on_empty_dataset: bool = True,
    ) -> Dataset:
        """For each index ``i`` ``choice_dataset`` yields, the next of ``datasets[i]``.

        An index out of range raises ``InvalidArgumentError`` naming it. When
        a chosen dataset has ended, the mixture ends
        (``stop_on_empty_dataset=True``) or skips that choice.

        >>> datasets = [Dataset.from_tensors(w).repeat() for w in ("foo", "bar", "baz")]
        >>> list(Dataset.choose_from_datasets(datasets, Dataset.range(3).repeat(3)))
        ['foo', 'bar', 'baz', 'foo', 'bar', 'baz', 'foo', 'bar', 'baz']
        """
        nodes = _nodes_of(mix.CHOOSE, datasets)
        if not isinstance(choice_dataset, Dataset):
            raise TypeError(
                f"{mix.CHOOSE} choice_dataset must be a Dataset, "
                f"got {builders.short(choice_dataset)}"
            )
        return Dataset(mix.choose(nodes, choice_dataset._node, stop_on_empty_dataset))

    # ------------------------------------------------------------ transformations

    def map(
        self,
        fn: Callable[..., Any],
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        vectorized: bool = False,
    ) -> Dataset:
        """Applies ``fn`` to each element (tuples are unpacked into arguments).

        With ``num_parallel_calls`` (or ``AUTOTUNE``) calls run on a thread pool;
        output order is kept unless ``deterministic=False``.

        ``vectorized=True`` promises that ``fn`` works element-wise on
        columns: given the structure of an element with each leaf an array
        whose first axis is the element (``x[i]`` is element ``i``'s), it
        returns a structure whose leaves have as many rows, row ``i`` made
        of element ``i`` alone. Over sources that read in bulk (``range``,
        ``from_tensor_slices``, Parquet rows) ``fn`` then runs once per block
        of elements, not per element (docs/ops.md, "Blocks"); elsewhere on
        one element as a block of one (``leaf[None]``). Either way the
        elements are those ``fn`` makes of each element alone.

        >>> [int(x) for x in Dataset.range(3).map(lambda x: x + 10, num_parallel_calls=2)]
        [10, 11, 12]
        >>> rows = Dataset.from_tensor_slices({"a": [1, 2, 3], "b": [10, 20, 30]})
        >>> [int(x) for x in rows.map(lambda r: r["a"] * r["b"], vectorized=True)]
        [10, 40, 90]
        """
        return Dataset(
            builders.map_node(
                self._node, fn, num_parallel_calls, deterministic, vectorized
            )
        )

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """Keeps the elements for which ``predicate`` returns True.

        >>> [int(x) for x in Dataset.range(6).filter(lambda x: x % 2 == 1)]
        [1, 3, 5]
        """
        return self._then(
            "filter", predicate=check_callable("filter predicate", predicate)
        )

    def ignore_errors(self, log_warning: bool = False) -> Dataset:
        """Drops the elements whose making raised an error, and goes on.

        A bad record of a file reader (a checksum that does not match, a
        corrupt member or row group) is skipped alone; a file that cannot be
        read at all loses the rest of its split. A service job counts what
        was skipped in its status (``errors_ignored``); ``log_warning`` also
        logs each one.

        >>> ds = Dataset.range(5).map(lambda x: 12 // int(x)).ignore_errors()
        >>> [int(x) for x in ds]  # 12 // 0 raised
        [12, 6, 4, 3]
        """
        return Dataset(builders.ignore_errors_node(self._node, log_warning))

    def batch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        """Stacks ``batch_size`` consecutive elements leaf-wise with ``np.stack``.

        >>> [b.tolist() for b in Dataset.range(5).batch(2)]
        [[0, 1], [2, 3], [4]]
        """
        return Dataset(builders.batch_node(self._node, batch_size, drop_remainder))

    def unbatch(self) -> Dataset:
        """Splits each element along axis 0 into separate elements.

        >>> [int(x) for x in Dataset.range(5).batch(2).unbatch()]
        [0, 1, 2, 3, 4]
        """
        return self._then("unbatch")

    def padded_batch(
        self,
        batch_size: int,
        padded_shapes: Any = None,
        padding_values: Any = None,
        drop_remainder: bool = False,
    ) -> Dataset:
        """Like ``batch``, but pads each component to one shape first (tf.data's).

        ``padded_shapes`` nests like the elements; each component's shape is
        an int ``n`` (``[n]``) or a list of sizes. A size of ``None`` or -1
        pads to the batch's largest, a fixed size to exactly that (an element
        larger raises ``InvalidArgumentError`` naming its size); no shape
        (``None``) pads every dimension to the batch's largest.
        ``padding_values`` is one scalar for every component or a structure
        of them; the default is 0, ``""`` or ``b""``.

        >>> ds = Dataset.range(1, 4).map(lambda x: np.full(x, x, np.int32))
        >>> [b.tolist() for b in ds.padded_batch(2)]
        [[[1, 0], [2, 2]], [[3, 3, 3]]]
        >>> [b.tolist() for b in ds.padded_batch(2, padded_shapes=4, padding_values=-1)]
        [[[1, -1, -1, -1], [2, 2, -1, -1]], [[3, 3, 3, -1]]]
        """
        from zmqdata._dataset.ops import padding

        return Dataset(
            padding.build(
                self._node,
                self.element_spec,
                batch_size,
                padded_shapes,
                padding_values,
                drop_remainder,
            )
        )

    def bucket_by_sequence_length(
        self,
        element_length_func: Callable[..., Any],
        bucket_boundaries: Sequence[int],
        bucket_batch_sizes: Sequence[int],
        padded_shapes: Any = None,
        padding_values: Any = None,
        pad_to_bucket_boundary: bool = False,
        no_padding: bool = False,
        drop_remainder: bool = False,
    ) -> Dataset:
        """Padded batches of elements of similar length (tf.data's).

        ``element_length_func(element)`` (an int) puts an element in bucket
        ``i``, the number of ``bucket_boundaries`` (strictly increasing) at
        or below its length; a bucket goes out as a ``padded_batch`` once it
        holds ``bucket_batch_sizes[i]`` elements (one size per bucket:
        ``len(bucket_boundaries) + 1``), and at the end of the input the
        partial buckets go out in bucket order (none with ``drop_remainder``).
        ``pad_to_bucket_boundary`` pads the unknown sizes to the bucket's
        boundary - 1 (an element of length >= the last boundary raises); where
        the element spec is unknown (after a ``map``) that is axis 0 of each
        component. ``no_padding`` batches with ``batch``. Resumes with its
        partial buckets (``get_state``); docs/ops.md.

        >>> ds = Dataset.from_generator(lambda: (np.arange(1, n + 1) for n in [1, 4, 3, 5]))
        >>> ds = ds.bucket_by_sequence_length(len, [3], [2, 2])
        >>> [b.tolist() for b in ds]
        [[[1, 2, 3, 4], [1, 2, 3, 0]], [[1]], [[1, 2, 3, 4, 5]]]
        """
        from zmqdata._dataset.ops import bucket

        return Dataset(
            bucket.build(
                self._node,
                self.element_spec,
                element_length_func,
                bucket_boundaries,
                bucket_batch_sizes,
                padded_shapes,
                padding_values,
                pad_to_bucket_boundary,
                no_padding,
                drop_remainder,
            )
        )

    def pack(
        self, length: int, num_open_rows: int = 8, padding_values: Any = None
    ) -> Dataset:
        """Packs sequences into rows of ``length`` slots, first fit.

        Elements are 1-D arrays (tokens) or dicts of equal-length 1-D arrays
        (tokens and a loss mask…). Each goes into the first of at most
        ``num_open_rows`` open rows with room for it (the fullest row goes out
        to make room for a new one); a row goes out when full, the rest at the
        end. A row is a dict of ``[length]`` arrays: the element's (a plain
        array's under ``"tokens"``), padded with ``padding_values`` (a scalar,
        or one per key; default 0), plus ``"segment_ids"`` (1, 2, … per
        sequence, 0 for padding) and ``"positions"`` (from 0 in each
        sequence). An element longer than ``length`` raises
        ``InvalidArgumentError`` naming its length. ``.batch(b,
        drop_remainder=True)`` makes ``[b, length]`` batches;
        ``zd.packing_efficiency`` measures them. Resumes with its open rows
        (``get_state``); docs/ops.md.

        >>> ds = Dataset.from_generator(lambda: (np.arange(1, n + 1) for n in [3, 2, 4, 2]))
        >>> rows = list(ds.pack(5))
        >>> [row["tokens"].tolist() for row in rows]
        [[1, 2, 3, 1, 2], [1, 2, 3, 4, 0], [1, 2, 0, 0, 0]]
        >>> [row["segment_ids"].tolist() for row in rows]
        [[1, 1, 1, 2, 2], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]
        >>> rows[0]["positions"].tolist()
        [0, 1, 2, 0, 1]
        """
        from zmqdata._dataset.ops import pack

        return Dataset(
            pack.build(
                self._node, self.element_spec, length, num_open_rows, padding_values
            )
        )

    def shuffle(
        self,
        buffer_size: int,
        seed: int | None = None,
        reshuffle_each_iteration: bool = True,
    ) -> Dataset:
        """Samples uniformly from a buffer of ``buffer_size`` elements.

        A ``seed`` makes the order reproducible; each pass still differs unless
        ``reshuffle_each_iteration=False``.

        >>> ds = Dataset.range(6).shuffle(6, seed=1, reshuffle_each_iteration=False)
        >>> sorted(int(x) for x in ds), list(ds) == list(ds)
        ([0, 1, 2, 3, 4, 5], True)
        """
        return Dataset(
            builders.shuffle_node(
                self._node, buffer_size, seed, reshuffle_each_iteration
            )
        )

    def repeat(self, count: int | None = None) -> Dataset:
        """Repeats the dataset ``count`` times (forever when None or -1).

        >>> [int(x) for x in Dataset.range(2).repeat(2)]
        [0, 1, 0, 1]
        """
        count = -1 if count is None else check_int("repeat count", count, minimum=-1)
        return self._then("repeat", count=count)

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all of them for -1).

        >>> [int(x) for x in Dataset.range(10).take(3)]
        [0, 1, 2]
        """
        return self._then("take", count=check_int("take count", count, minimum=-1))

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (none for -1).

        >>> [int(x) for x in Dataset.range(5).skip(3)]
        [3, 4]
        """
        return self._then("skip", count=check_int("skip count", count, minimum=-1))

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Every ``num_shards``-th element starting at ``index``.

        Under ``ShardingPolicy.HINT`` both may be ``service.SHARD_HINT``.

        >>> [int(x) for x in Dataset.range(10).shard(3, 1)]
        [1, 4, 7]
        """
        return Dataset(builders.shard_node(self._node, num_shards, index))

    def interleave(
        self,
        fn: Callable[..., Dataset],
        cycle_length: int | None = None,
        block_length: int = 1,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
    ) -> Dataset:
        """Cycles over datasets ``fn(element)``, ``block_length`` elements at a time.

        With ``num_parallel_calls``, each open dataset runs ahead on a thread;
        with ``deterministic=False`` too, the cycle skips a dataset that has no
        element ready, so a slow one does not hold up the others.

        >>> ds = Dataset.range(1, 3).interleave(
        ...     lambda x: Dataset.from_tensors(x).repeat(2), cycle_length=2)
        >>> [int(x) for x in ds]
        [1, 2, 1, 2]
        """
        return Dataset(
            builders.interleave_node(
                self._node,
                fn,
                cycle_length,
                block_length,
                num_parallel_calls,
                deterministic,
            )
        )

    def flat_map(self, fn: Callable[..., Dataset]) -> Dataset:
        """Concatenates the datasets ``fn(element)`` in order.

        >>> [int(x) for x in Dataset.range(3).flat_map(lambda x: Dataset.range(x))]
        [0, 0, 1]
        """
        return self.interleave(check_callable("flat_map fn", fn), cycle_length=1)

    def enumerate(self, start: int = 0) -> Dataset:
        """Pairs each element with its ``np.int64`` index.

        >>> [(int(i), int(x)) for i, x in Dataset.range(5, 7).enumerate(start=1)]
        [(1, 5), (2, 6)]
        """
        return self._then("enumerate", start=check_int("enumerate start", start))

    def concatenate(self, other: Dataset) -> Dataset:
        """The elements of ``self`` followed by those of ``other``.

        >>> [int(x) for x in Dataset.range(2).concatenate(Dataset.range(5, 6))]
        [0, 1, 5]
        """
        if not isinstance(other, Dataset):
            raise TypeError(f"concatenate takes a Dataset, got {other!r}")
        return Dataset(builders.concatenate_node(self._node, other._node))

    def cache(self, filename: str = "") -> Dataset:
        """The elements of the first complete pass, kept for the later ones (tf.data's).

        ``""`` keeps them in memory; a file name (or an fsspec URL) keeps them
        there, in the save format (docs/snapshots.md), for later runs too. A
        pass cut short keeps nothing. Under ``distributed_epoch`` a file cache
        is a ``snapshot`` written at ``filename``, and one in memory is refused.

        >>> ds = Dataset.range(3).map(lambda x: x * 2).cache()
        >>> [int(x) for x in ds], [int(x) for x in ds]
        ([0, 2, 4], [0, 2, 4])
        """
        from zmqdata._dataset.ops import cache

        return Dataset(cache.build("cache", self._node, filename))

    def snapshot(self, path: str, compression: str | None = "AUTO") -> Dataset:
        """Its elements written once under ``path``, read back by later runs (tf.data's).

        Keyed by the fingerprint of the ops before it (their arguments and
        functions' code): a run whose pipeline has a finished snapshot there
        reads it instead of running them; a changed pipeline writes its own.
        On the service, the first ``distributed_epoch`` job streams while its
        workers write (docs/snapshots.md). ``compression``: ``"AUTO"`` (zstd on
        object stores), ``"zstd"`` or None.

        >>> import tempfile
        >>> ds = Dataset.range(3).map(lambda x: x + 1).snapshot(tempfile.mkdtemp())
        >>> [int(x) for x in ds], [int(x) for x in ds]  # written, then read
        ([1, 2, 3], [1, 2, 3])
        """
        from zmqdata._dataset.ops import cache

        return Dataset(cache.build("snapshot", self._node, path, compression))

    def prefetch(self, buffer_size: int) -> Dataset:
        """Runs ahead of the consumer by up to ``buffer_size`` elements on a thread.

        >>> [int(x) for x in Dataset.range(3).prefetch(2)]
        [0, 1, 2]
        """
        return Dataset(builders.prefetch_node(self._node, buffer_size))

    def apply(self, transformation: Callable[[Dataset], Dataset]) -> Dataset:
        """Returns ``transformation(self)``, which must be a ``Dataset``.

        >>> [int(x) for x in Dataset.range(4).apply(lambda ds: ds.skip(2))]
        [2, 3]
        """
        result = check_callable("apply transformation", transformation)(self)
        if not isinstance(result, Dataset):
            raise TypeError(
                f"apply transformation must return a Dataset, got {type(result).__name__}"
            )
        return result

    # ------------------------------------------------------------ inspection

    @property
    def element_spec(self) -> Any:
        """Nested ``TensorSpec`` of the elements, or None if user code decides it.

        >>> Dataset.range(3).batch(2, drop_remainder=True).element_spec
        TensorSpec(shape=(2,), dtype=int64)
        """
        return builders.element_spec(self._node)

    def cardinality(self) -> int:
        """Number of elements, or ``INFINITE_CARDINALITY`` / ``UNKNOWN_CARDINALITY``.

        >>> Dataset.range(10).batch(3).cardinality(), Dataset.range(2).repeat().cardinality()
        (4, -1)
        """
        return builders.cardinality(self._node)

    def __iter__(self) -> DatasetIterator:
        """A fresh pass over the dataset."""
        return make_iterator(self._node, IterContext())

    def as_numpy_iterator(self) -> Iterator[Any]:
        """The same elements as ``iter(self)`` (kept for tf.data source compatibility)."""
        return iter(self)

    def __repr__(self) -> str:
        return f"<Dataset {self._node.op} element_spec={self.element_spec}>"


def _nodes_of(what: str, datasets: Any) -> list[Node]:
    """The nodes of a non-empty list of datasets; raises naming a bad one."""
    if not isinstance(datasets, tuple | list):
        raise TypeError(
            f"{what} takes a list of datasets, got {builders.short(datasets)}"
        )
    if not datasets:
        raise ValueError(f"{what} needs at least one dataset, got {datasets!r}")
    for index, dataset in enumerate(datasets):
        if not isinstance(dataset, Dataset):
            raise TypeError(
                f"{what} datasets[{index}] must be a Dataset, got {builders.short(dataset)}"
            )
    return [dataset._node for dataset in datasets]
