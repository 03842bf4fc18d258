"""Sources: range, from_tensor_slices, from_tensors, from_generator, list_files."""

from __future__ import annotations

import os

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, ints
from zmqdata.errors import InvalidArgumentError, NotFoundError

INT64 = np.dtype(np.int64)


# ---------------------------------------------------------------- range


@pytest.mark.parametrize(
    "args",
    [(5,), (0,), (-3,), (2, 9), (9, 2), (2, 20, 3), (20, 2, -3), (0, 10, -1), (5, 5)],
)
def test_range_matches_python_range(args):
    ds = zd.Dataset.range(*args)
    assert ints(ds) == list(range(*args))
    assert ds.cardinality() == len(range(*args))


def test_range_yields_int64_scalars():
    elements = list(zd.Dataset.range(3))
    assert all(type(x) is np.int64 for x in elements)
    assert zd.Dataset.range(3).element_spec == zd.TensorSpec((), INT64)


def test_range_accepts_numpy_ints_and_step_keyword():
    assert ints(zd.Dataset.range(np.int32(3))) == [0, 1, 2]
    assert ints(zd.Dataset.range(1, 8, step=3)) == [1, 4, 7]


def test_range_large_values_stay_exact():
    start = 2**40
    assert ints(zd.Dataset.range(start, start + 3)) == [start, start + 1, start + 2]


# ---------------------------------------------------------------- from_tensor_slices


def test_from_tensor_slices_array_keeps_dtype_and_shape():
    data = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    ds = zd.Dataset.from_tensor_slices(data)
    elements = list(ds)
    assert len(elements) == 4
    for i, x in enumerate(elements):
        assert_bit_equal(x, data[i])
    assert ds.element_spec == zd.TensorSpec((2, 3), np.dtype(np.float32))
    assert ds.cardinality() == 4


def test_from_tensor_slices_of_1d_array_gives_numpy_scalars():
    for dtype in (np.uint8, np.int16, np.float16, np.bool_, np.complex64):
        data = np.array([1, 0, 1], dtype=dtype)
        elements = list(zd.Dataset.from_tensor_slices(data))
        assert [type(x) for x in elements] == [dtype] * 3
        assert [x.item() for x in elements] == data.tolist()


def test_from_tensor_slices_list():
    ds = zd.Dataset.from_tensor_slices([[1, 2], [3, 4], [5, 6]])
    assert ints(ds) == [[1, 2], [3, 4], [5, 6]]
    assert ds.element_spec == zd.TensorSpec((2,), INT64)


def test_from_tensor_slices_strings_and_bytes():
    assert [str(x) for x in zd.Dataset.from_tensor_slices(["ab", "c"])] == ["ab", "c"]
    assert [bytes(x) for x in zd.Dataset.from_tensor_slices([b"x", b"yz"])] == [
        b"x",
        b"yz",
    ]


def test_from_tensor_slices_tuple():
    labels = np.array([7, 8, 9], dtype=np.int32)
    features = np.arange(6, dtype=np.float64).reshape(3, 2)
    ds = zd.Dataset.from_tensor_slices((features, labels))
    elements = list(ds)
    assert all(isinstance(e, tuple) and len(e) == 2 for e in elements)
    for i, (f, label) in enumerate(elements):
        assert_bit_equal(f, features[i])
        assert_bit_equal(label, labels[i])
    assert ds.element_spec == (
        zd.TensorSpec((2,), np.dtype(np.float64)),
        zd.TensorSpec((), np.dtype(np.int32)),
    )


def test_from_tensor_slices_dict_keeps_key_order_and_nesting():
    data = {
        "z": np.arange(3, dtype=np.int8),
        "a": (np.ones((3, 2), np.float32), np.array(["p", "q", "r"])),
        "m": {"inner": np.arange(3) * 10},
    }
    ds = zd.Dataset.from_tensor_slices(data)
    elements = list(ds)
    assert [list(e) for e in elements] == [["z", "a", "m"]] * 3
    assert to_plain(elements[2]) == {
        "z": 2,
        "a": ([1.0, 1.0], "r"),
        "m": {"inner": 20},
    }
    spec = ds.element_spec
    assert list(spec) == ["z", "a", "m"]
    assert spec["a"][0] == zd.TensorSpec((2,), np.dtype(np.float32))
    assert spec["m"]["inner"] == zd.TensorSpec((), INT64)


def to_plain(value):
    return ints([value])[0]


def test_from_tensor_slices_empty_first_dim():
    ds = zd.Dataset.from_tensor_slices(np.zeros((0, 3)))
    assert list(ds) == []
    assert ds.cardinality() == 0
    assert ds.element_spec == zd.TensorSpec((3,), np.dtype(np.float64))


def test_from_tensor_slices_copies_its_input():
    data = np.zeros(3)
    ds = zd.Dataset.from_tensor_slices(data)
    data[0] = 5
    assert ints(ds) == [0.0, 0.0, 0.0]


# ---------------------------------------------------------------- from_tensors


def test_from_tensors_one_element_as_is():
    value = (np.ones(3, np.int8), "txt", b"raw", 2.5, {"k": [1, np.float32(2)]})
    ds = zd.Dataset.from_tensors(value)
    elements = list(ds)
    assert len(elements) == 1
    assert_bit_equal(elements[0], value)
    assert ds.cardinality() == 1
    assert ds.element_spec == (
        zd.TensorSpec((3,), np.dtype(np.int8)),
        zd.TensorSpec((), str),
        zd.TensorSpec((), bytes),
        zd.TensorSpec((), float),
        {"k": [zd.TensorSpec((), int), zd.TensorSpec((), np.dtype(np.float32))]},
    )


def test_from_tensors_copies_its_input():
    data = np.zeros(2)
    ds = zd.Dataset.from_tensors({"x": data})
    data[:] = 7
    assert ints(ds) == [{"x": [0.0, 0.0]}]


def test_from_tensors_repeats_the_same_value():
    ds = zd.Dataset.from_tensors(np.arange(2)).repeat(3)
    assert ints(ds) == [[0, 1]] * 3


# ---------------------------------------------------------------- from_generator


def test_from_generator_calls_fn_anew_for_each_pass():
    calls = []

    def gen(n):
        calls.append(n)
        yield from range(n)

    ds = zd.Dataset.from_generator(gen, args=(3,))
    assert calls == []  # building runs nothing
    assert list(ds) == [0, 1, 2]
    assert list(ds) == [0, 1, 2]
    assert calls == [3, 3]
    assert ds.cardinality() == zd.UNKNOWN_CARDINALITY
    assert ds.element_spec is None


def test_from_generator_args_list_and_structures():
    def gen(a, b):
        for i in range(a, b):
            yield {"i": i, "pair": (np.int32(i), str(i))}

    ds = zd.Dataset.from_generator(gen, args=[1, 3])
    assert ints(ds) == [{"i": 1, "pair": (1, "1")}, {"i": 2, "pair": (2, "2")}]


def test_from_generator_accepts_any_iterable_factory():
    assert list(zd.Dataset.from_generator(lambda: [4, 5])) == [4, 5]
    assert list(zd.Dataset.from_generator(lambda: iter(()))) == []


class GeneratorFailure(Exception):
    pass


def test_from_generator_error_keeps_type_and_message():
    def gen():
        yield 1
        raise GeneratorFailure("generator broke at 2")

    it = iter(zd.Dataset.from_generator(gen))
    assert next(it) == 1
    with pytest.raises(GeneratorFailure, match="generator broke at 2"):
        next(it)


# ---------------------------------------------------------------- list_files


@pytest.fixture
def files(tmp_path):
    names = ["b.txt", "a.txt", "c.txt", "d.csv", "e.txt"]
    for name in names:
        (tmp_path / name).write_text(name)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.txt").write_text("f")
    return tmp_path


def test_list_files_unshuffled_is_sorted(files):
    ds = zd.Dataset.list_files(str(files / "*.txt"), shuffle=False)
    expected = [str(files / n) for n in ("a.txt", "b.txt", "c.txt", "e.txt")]
    assert list(ds) == expected
    assert all(type(p) is str for p in ds)
    assert ds.cardinality() == 4
    assert ds.element_spec == zd.TensorSpec((), str)


def test_list_files_list_of_patterns_deduplicates(files):
    patterns = [str(files / "*.csv"), str(files / "a.*"), str(files / "*.csv")]
    ds = zd.Dataset.list_files(patterns, shuffle=False)
    assert list(ds) == [str(files / "a.txt"), str(files / "d.csv")]


def test_list_files_nested_pattern(files):
    ds = zd.Dataset.list_files(os.path.join(str(files), "*", "*.txt"), shuffle=False)
    assert list(ds) == [str(files / "sub" / "f.txt")]


def test_list_files_shuffle_is_a_permutation_and_seed_reproducible(files):
    pattern = str(files / "*")
    every = sorted(zd.Dataset.list_files(pattern, shuffle=False))
    first = list(zd.Dataset.list_files(pattern, seed=11))
    again = list(zd.Dataset.list_files(pattern, seed=11))
    assert sorted(first) == every
    assert first == again
    orders = {tuple(zd.Dataset.list_files(pattern, seed=s)) for s in range(10)}
    assert len(orders) > 1


def test_list_files_reshuffles_each_pass(files):
    ds = zd.Dataset.list_files(str(files / "*"), seed=3)
    passes = [tuple(ds) for _ in range(8)]
    assert len(set(passes)) > 1
    assert all(sorted(p) == sorted(passes[0]) for p in passes)


def test_list_files_no_match_names_the_pattern(tmp_path):
    pattern = str(tmp_path / "nothing-*.bin")
    with pytest.raises(InvalidArgumentError, match="nothing-"):
        zd.Dataset.list_files(pattern)
    with pytest.raises(ValueError, match="nothing-"):
        zd.Dataset.list_files([pattern])


@pytest.mark.parametrize(
    "read",
    [
        zd.Dataset.list_files,
        zd.Dataset.from_tfrecord,
        zd.Dataset.from_webdataset,
        zd.Dataset.from_parquet,
    ],
)
def test_a_missing_path_raises_not_found_naming_it(tmp_path, read):
    """docs/sources.md: a missing file fails with ``NotFoundError`` naming it."""
    missing = str(tmp_path / "absent.bin")
    with pytest.raises(NotFoundError, match=r"absent\.bin") as caught:
        read(missing)
    assert isinstance(caught.value, InvalidArgumentError)  # as before


# ---------------------------------------------------------------- common members


def test_each_iter_is_a_fresh_pass():
    ds = zd.Dataset.range(4)
    first = iter(ds)
    assert int(next(first)) == 0
    second = iter(ds)
    assert ints(second) == [0, 1, 2, 3]
    assert ints(first) == [1, 2, 3]
    assert [ints(ds) for _ in range(3)] == [[0, 1, 2, 3]] * 3


def test_for_loop_and_as_numpy_iterator_agree():
    ds = zd.Dataset.from_tensor_slices({"a": np.arange(3.0), "b": np.arange(3)})
    looped = list(ds)
    numpy_iter = ds.as_numpy_iterator()
    assert iter(numpy_iter) is numpy_iter
    assert_bit_equal(list(numpy_iter), looped)


def test_datasets_are_immutable():
    base = zd.Dataset.range(6)
    derived = [
        base.map(lambda x: x * 10),
        base.filter(lambda x: x > 2),
        base.batch(4),
        base.shuffle(6, seed=1),
        base.repeat(2),
        base.take(1),
        base.skip(5),
        base.shard(2, 1),
        base.enumerate(),
        base.concatenate(base),
        base.prefetch(1),
        base.apply(lambda d: d.take(2)),
    ]
    for ds in derived:
        assert ds is not base
        list(ds)
    assert ints(base) == [0, 1, 2, 3, 4, 5]
    assert base.cardinality() == 6


def test_building_runs_no_user_code():
    def explode(*_):
        raise AssertionError("user code ran while building")

    ds = zd.Dataset.from_generator(explode).map(explode).filter(explode)
    ds = ds.interleave(explode).flat_map(explode).batch(2).shuffle(3).prefetch(2)
    assert ds.cardinality() == zd.UNKNOWN_CARDINALITY
    assert ds.element_spec is None


def test_constants():
    assert zd.AUTOTUNE == -1
    assert zd.INFINITE_CARDINALITY == -1
    assert zd.UNKNOWN_CARDINALITY == -2


def test_repr_names_the_op():
    assert "range" in repr(zd.Dataset.range(3))
