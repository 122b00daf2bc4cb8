"""Uploaded .npz inputs (validated, never unpickled) and generated inputs (seeded)."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_builders import build, value, weight

from engine.accuracy.errors import InputDataError
from engine.accuracy.inputs import generate_inputs, load_inputs_npz


@pytest.fixture
def two_input_model():
    """x[N,3] float32 and ids[N] int64 indexing a 50-row embedding."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["e", "m"], ["y"]),
    ]
    return build(
        nodes,
        [("x", ["N", 3]), value("ids", ["N"], TensorProto.INT64)],
        [("y", ["N", 4])],
        [weight("table", (50, 4)), weight("w", (3, 4))],
    )


def write_npz(tmp_path, **arrays):
    path = tmp_path / "inputs.npz"
    np.savez(path, **arrays)
    return path


def test_a_matching_archive_loads(tmp_path, two_input_model):
    x, ids = np.ones((2, 3), np.float32), np.array([1, 7])
    inputs = load_inputs_npz(write_npz(tmp_path, x=x, ids=ids), two_input_model)
    assert inputs.source == "npz:inputs.npz" and inputs.seed is None
    np.testing.assert_array_equal(inputs.feeds["ids"], ids)


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x": np.ones((2, 3), np.float32)}, "no array for input 'ids'"),
        (
            {"x": np.ones((2, 3), np.float32), "ids": np.zeros(2, np.int64), "z": np.ones(1)},
            "array 'z' is not a model input",
        ),
        (
            {"x": np.ones((2, 4), np.float32), "ids": np.zeros(2, np.int64)},
            "input 'x' has shape 2x4, expected Nx3",
        ),
        (
            {"x": np.ones((2, 3), np.float64), "ids": np.zeros(2, np.int64)},
            "input 'x' has dtype float64, expected float32",
        ),
        (
            {"x": np.ones((2, 3), np.float32), "ids": np.zeros(5, np.int64)},
            "dimension 'N' is 2 in 'x' but 5 in 'ids'",
        ),
    ],
)
def test_mismatches_name_the_input_and_the_expectation(tmp_path, two_input_model, arrays, message):
    with pytest.raises(InputDataError) as raised:
        load_inputs_npz(write_npz(tmp_path, **arrays), two_input_model)
    assert message in raised.value.message
    assert raised.value.code == "bad_inputs"
    assert raised.value.hint == "The model's inputs are x: Nx3 float32, ids: N int64."


def test_a_corrupted_archive_is_a_clear_error(tmp_path, two_input_model):
    path = write_npz(tmp_path, x=np.ones((2, 3), np.float32), ids=np.zeros(2, np.int64))
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(InputDataError, match="inputs.npz is not a readable .npz archive"):
        load_inputs_npz(path, two_input_model)
    path.write_bytes(b"not a zip at all")
    with pytest.raises(InputDataError, match="not a readable .npz archive"):
        load_inputs_npz(path, two_input_model)


class _Trap:
    """Unpickling it would create a file: the test checks that never happens."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_inside_the_archive_is_never_loaded(tmp_path, two_input_model):
    marker = tmp_path / "unpickled"
    trap = np.empty(1, dtype=object)
    trap[0] = _Trap(marker)
    path = tmp_path / "inputs.npz"
    np.savez(path, x=trap, ids=np.zeros(2, np.int64))  # numpy pickles object arrays
    with pytest.raises(InputDataError) as raised:
        load_inputs_npz(path, two_input_model)
    assert "holds a pickled Python object; pickles are never loaded" in raised.value.message
    assert not marker.exists()


def test_a_bare_pickle_or_npy_file_is_refused(tmp_path, two_input_model):
    marker = tmp_path / "unpickled"
    path = tmp_path / "inputs.npz"
    path.write_bytes(pickle.dumps(_Trap(marker)))
    with pytest.raises(InputDataError, match="is a Python pickle; pickles are never loaded"):
        load_inputs_npz(path, two_input_model)
    assert not marker.exists()
    np.save(tmp_path / "x.npy", np.ones(3))
    with pytest.raises(InputDataError, match="single .npy array, not an .npz archive"):
        load_inputs_npz(tmp_path / "x.npy", two_input_model)


def test_an_archive_that_unpacks_too_large_is_refused(tmp_path, two_input_model):
    path = tmp_path / "big.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", b"\0" * 10_000)
    with pytest.raises(InputDataError, match="unpacks to more than"):
        load_inputs_npz(path, two_input_model, max_bytes=1000)


def test_generated_inputs_are_seeded_and_ids_stay_in_the_table(two_input_model):
    a = generate_inputs(two_input_model, seed=3, distribution="uniform", shapes={"x": (4, 3)})
    b = generate_inputs(two_input_model, seed=3, distribution="uniform", shapes={"x": (4, 3)})
    np.testing.assert_array_equal(a.feeds["x"], b.feeds["x"])
    assert a.feeds["x"].shape == (4, 3) and a.feeds["x"].dtype == np.float32
    assert a.feeds["x"].min() >= -1.0 and a.feeds["x"].max() < 1.0
    assert a.feeds["ids"].shape == (1,)  # symbolic N defaults to 1
    many = generate_inputs(two_input_model, seed=0, shapes={"ids": (10_000,)})
    assert many.feeds["ids"].min() >= 0 and many.feeds["ids"].max() == 49
    assert many.to_dict() == {
        "source": "generated",
        "seed": 0,
        "distribution": "normal",
        "tensors": [
            {"name": "x", "shape": [1, 3], "dtype": "float32"},
            {"name": "ids", "shape": [10000], "dtype": "int64", "range": [0, 50]},
        ],
    }
    other = generate_inputs(two_input_model, seed=4)
    assert not np.array_equal(other.feeds["x"], many.feeds["x"])


def test_unknown_distribution_is_bad_input(two_input_model):
    with pytest.raises(InputDataError, match="unknown distribution 'cauchy'"):
        generate_inputs(two_input_model, distribution="cauchy")


def _bomb(path, shape, *, body_bytes=None):
    """An archive whose member declares ``shape`` float32 in its header: zeros, deflated
    (a 60 MB array packs into about 60 KB); ``body_bytes`` writes that many instead."""
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    size = int(np.prod(shape)) * 4 if body_bytes is None else body_bytes
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, header)
            chunk = b"\0" * (1 << 20)
            for start in range(0, size, len(chunk)):
                f.write(chunk[: size - start])
        with archive.open("ids.npy", "w") as f:
            np.lib.format.write_array(f, np.zeros(2, np.int64))
    return path


def test_a_decompression_bomb_is_refused_from_its_headers_before_inflating(
    tmp_path, two_input_model
):
    import tracemalloc

    path = _bomb(tmp_path / "bomb.npz", (5_000_000, 3))  # 60 MB of zeros in ~60 KB
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(InputDataError) as raised:
            load_inputs_npz(path, two_input_model)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "dimension 'N' is 5000000 in 'x' but 2 in 'ids'" in raised.value.message
    assert peak < 5_000_000, f"{peak:,} bytes allocated: the array was inflated"


def test_a_header_that_disagrees_with_the_archive_is_refused(tmp_path, two_input_model):
    # declares 4e14 bytes (numpy would try to allocate them) but holds 16
    path = _bomb(tmp_path / "liar.npz", (100_000_000_000_000, 1), body_bytes=16)
    with pytest.raises(InputDataError) as raised:
        load_inputs_npz(path, two_input_model)
    assert "array 'x' declares shape 100000000000000x1 float32" in raised.value.message
    assert "the archive holds 16 bytes for it" in raised.value.message


def test_a_member_that_is_not_an_array_is_refused(tmp_path, two_input_model):
    path = tmp_path / "extra.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("../../etc/cron.d/x", b"* * * * * root true")
    with pytest.raises(InputDataError, match="holds '../../etc/cron.d/x', which is not an .npy"):
        load_inputs_npz(path, two_input_model)
