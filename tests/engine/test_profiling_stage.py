"""The profile stage on a measured target: it times the model as uploaded (what the user runs
in onnxruntime), inputs fed at the prepared model's bound shapes, and takes the work of
each node from the prepared model, which folded the shape arithmetic the upload keeps."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import build, value

from engine.contract import StageInputs
from engine.graph.prepare import prepare_model
from engine.profiling.options import ProfileOptions
from engine.profiling.stage import run
from engine.targets.catalog import get_target

QUICK = ProfileOptions.from_dict({"window_s": 0.2, "threads": 1, "tvm_kernels": False})


def exported_like():
    """x [batch, 64] -> Reshape to [batch, 8, 8] by Shape -> Gather -> Concat (as torch
    exports it) -> MatMul by an 8x16 weight: the MatMul's shape is known only once the
    shape arithmetic is folded with a bound batch."""
    const = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([8, 8], np.int64), "tail"),
        numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 16), np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "tail"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="matmul"),
    ]
    const.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    return build(
        nodes,
        [value("x", ["batch", 64], TensorProto.FLOAT)],
        [value("y", ["batch", 8, 16], TensorProto.FLOAT)],
        const,
    )


def test_the_upload_is_timed_and_its_nodes_costed_by_the_prepared_model(save):
    path = save(exported_like())
    prepared = prepare_model(path)
    assert prepared.input_shapes == {"x": (1, 64)}
    result = run(
        prepared, get_target("host"), QUICK, lambda f, m: None, StageInputs(files={"source": path})
    ).to_dict()
    assert result["profiled_model"].startswith("the model as uploaded")
    ops = {op["name"]: op for op in result["ops"]}
    assert set(ops) == {"shape", "batch", "unsqueeze", "concat", "reshape", "matmul"}
    # 1 x 8 x 8 @ 8 x 16: 1024 MACs, from the prepared graph (the upload's own analysis
    # cannot know the Reshape's output)
    assert ops["matmul"]["flops"] == 2 * 8 * 8 * 16
    assert ops["matmul"]["status"] == "measured" and ops["matmul"]["latency_us"] > 0
    assert not [w for w in result["warnings"] if "not costed" in w or "unknown" in w]
    assert result["latency_ms"] > 0 and result["inputs"][0]["shape"] == [1, 64]


def test_without_the_upload_the_prepared_model_is_timed(save):
    prepared = prepare_model(save(exported_like()))
    result = run(prepared, get_target("host"), QUICK, lambda f, m: None).to_dict()
    assert result["profiled_model"].startswith("the prepared model")
    assert {op["name"] for op in result["ops"]} == {"reshape", "matmul"}  # the rest folded
