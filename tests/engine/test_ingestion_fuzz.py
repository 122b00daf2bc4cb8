"""Fuzzing what the web process ingests from strangers: an uploaded ONNX file (the header
check every upload goes through) and an uploaded .npz of inputs. Whatever the bytes, the
check returns or raises the engine's own error (a 4xx with a reason), in bounded time;
never another exception (a 500), never a hang.

Two kinds of input: byte-level mutations of valid files (flips, truncations, splices), and
structure-aware edits of a valid model (huge or negative dims, dangling inputs, unknown
ops and opsets, lying initializers) that get past the protobuf parser to the validators.
Seeded (``derandomize``), so CI runs the same cases each time; ``FUZZ_EXAMPLES`` scales it.
"""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.accuracy.inputs import describe_inputs_npz, load_inputs_npz
from engine.errors import EngineError
from engine.graph import read_header
from engine.graph.tensors import TensorSpec
from tests.conftest import SQUEEZENET

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=5000,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
LIMITS = {"max_bytes": 1 << 24, "max_nodes": 10_000, "max_tensor_elements": 1 << 26}
SEED_MODEL = SQUEEZENET.read_bytes()


def _npz_seed() -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, data_0=np.ones((1, 3, 4, 4), np.float32), ids=np.arange(3))
    return buffer.getvalue()


SEED_NPZ = _npz_seed()
SPECS = [
    TensorSpec("data_0", [1, 3, 4, 4], "float32"),
    TensorSpec("ids", [3], "int64"),
]


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "truncate", "splice", "insert", "zero"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "splice":
            size = draw(st.integers(1, 64))
            data[at : at + size] = draw(st.binary(min_size=size, max_size=size))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=32))
        elif kind == "zero":
            data[at : at + 16] = bytes(min(16, len(data) - at))
    return bytes(data)


HUGE = st.sampled_from([0, -1, -(2**62), 2**31, 2**40, 2**62, 7])


@st.composite
def edited_model(draw) -> bytes:
    """A valid model with a few structural edits the parser accepts and the checks judge."""
    model = onnx.load_from_string(SEED_MODEL)
    graph = model.graph
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(
            st.sampled_from(
                ["dim", "drop_node", "dangle", "op", "opset", "attr", "initializer", "cycle"]
            )
        )
        if edit == "dim":
            value = draw(st.sampled_from(list(graph.input) + list(graph.output)))
            dims = value.type.tensor_type.shape.dim
            if dims:
                dims[draw(st.integers(0, len(dims) - 1))].dim_value = draw(HUGE)
        elif edit == "drop_node" and len(graph.node) > 1:
            del graph.node[draw(st.integers(0, len(graph.node) - 1))]
        elif edit == "dangle" and graph.node:
            node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
            if node.input:
                node.input[0] = draw(st.text(min_size=1, max_size=12))
        elif edit == "op" and graph.node:
            node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
            node.op_type = draw(st.sampled_from(["Teleport", "", "Conv", "Loop", "If"]))
        elif edit == "opset":
            model.opset_import[0].version = draw(st.sampled_from([0, 1, 99, 10**6, -5]))
        elif edit == "attr" and graph.node:
            node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
            for attribute in node.attribute:
                if attribute.ints:
                    attribute.ints[0] = draw(HUGE)
                    break
        elif edit == "initializer" and graph.initializer:
            tensor = graph.initializer[draw(st.integers(0, len(graph.initializer) - 1))]
            if tensor.dims:
                tensor.dims[0] = draw(HUGE)
        elif edit == "cycle" and len(graph.node) > 2:
            first, last = graph.node[0], graph.node[len(graph.node) - 1]
            if first.input and last.output:
                first.input[0] = last.output[0]
    return model.SerializeToString()


def _check_model(tmp_path, data: bytes) -> None:
    path = tmp_path / "fuzz.onnx"
    path.write_bytes(data)
    try:
        read_header(str(path), **LIMITS)
    except EngineError as e:
        assert e.message  # a reason the user can read
    except RecursionError:  # pragma: no cover - reported as the failure it is
        pytest.fail("the header check recursed without bound")


@FUZZ
@given(data=mutated(SEED_MODEL))
def test_mutated_model_bytes_are_accepted_or_refused_with_a_reason(tmp_path, data):
    _check_model(tmp_path, data)


@FUZZ
@given(data=edited_model())
def test_structurally_edited_models_are_accepted_or_refused_with_a_reason(tmp_path, data):
    _check_model(tmp_path, data)


def _model_for_npz():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["data_0"], ["y"]),
            helper.make_node("Shape", ["ids"], ["s"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [1, 3, 4, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [1]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


NPZ_MODEL = _model_for_npz()


@FUZZ
@given(data=mutated(SEED_NPZ))
def test_mutated_npz_archives_are_accepted_or_refused_with_a_reason(tmp_path, data):
    path = tmp_path / "fuzz.npz"
    path.write_bytes(data)
    for check in (
        lambda: describe_inputs_npz(path, SPECS, max_bytes=1 << 20),
        lambda: load_inputs_npz(path, NPZ_MODEL, max_bytes=1 << 20),
    ):
        try:
            check()
        except EngineError as e:
            assert e.message


def test_the_seeds_themselves_are_accepted(tmp_path):
    """The fuzzers start from valid files: they must pass untouched."""
    path = tmp_path / "seed.onnx"
    path.write_bytes(SEED_MODEL)
    assert read_header(str(path), **LIMITS).node_count == 105
    npz = tmp_path / "seed.npz"
    npz.write_bytes(SEED_NPZ)
    assert [t["name"] for t in describe_inputs_npz(npz, SPECS)] == ["data_0", "ids"]
    with zipfile.ZipFile(npz) as archive:
        assert sorted(archive.namelist()) == ["data_0.npy", "ids.npy"]
