"""Convolutions in channel blocks (NCHW16c on AVX-512), the layout chosen per model by
measurement, and the pool schedule that runs in those blocks: every shape against
onnxruntime's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.fusion import CompileConfig, compile_model
from engine.fusion.conv_layout import BLOCKED, NCHW, _conv_layouts
from engine.fusion.standalone import CompiledModel


def _weights(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype("float32"), name)


def _convnet(in_channels=3, mid=32, out=24, size=20):
    """A stem conv from an image's 3 channels, a max pool, a padded, dilated, strided
    conv, a residual add, a depthwise conv and a clip (ReLU6's shape), an average pool and
    a 1x1 conv to channels 16 does not divide: the shapes a real CNN has."""
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w0", "b0"],
            ["c0"],
            name="stem",
            kernel_shape=[7, 7],
            strides=[2, 2],
            pads=[3, 3, 3, 3],
        ),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node(
            "MaxPool",
            ["r0"],
            ["p0"],
            name="pool0",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "Conv",
            ["p0", "w1"],
            ["c1"],
            name="dilated",
            kernel_shape=[3, 3],
            pads=[2, 1, 2, 1],
            dilations=[2, 1],
        ),
        helper.make_node("Add", ["c1", "p0"], ["a1"], name="residual"),
        helper.make_node(
            "Conv",
            ["a1", "wd"],
            ["d1"],
            name="depthwise",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            group=mid,
        ),
        helper.make_node("Clip", ["d1", "low", "high"], ["r1"], name="relu6"),
        helper.make_node(
            "AveragePool",
            ["r1"],
            ["p1"],
            name="pool1",
            kernel_shape=[2, 2],
            strides=[1, 1],
            pads=[0, 0, 1, 1],
        ),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["y"], name="project", kernel_shape=[1, 1]),
    ]
    inits = [
        _weights("w0", [mid, in_channels, 7, 7], 0),
        _weights("b0", [mid], 1),
        _weights("w1", [mid, mid, 3, 3], 2),
        _weights("w2", [out, mid, 1, 1], 3),
        _weights("wd", [mid, 1, 3, 3], 5),
        numpy_helper.from_array(np.array(0.0, dtype="float32"), "low"),
        numpy_helper.from_array(np.array(0.5, dtype="float32"), "high"),
        _weights("b2", [out], 4),
    ]
    graph = helper.make_graph(
        nodes,
        "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    return onnx.shape_inference.infer_shapes(model)


def _outputs_match_onnxruntime(model, directory):
    compiled = CompiledModel(directory / "artifact", threads=1)
    feeds = compiled.example_inputs(3)
    ours = compiled.run(feeds)["y"]
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", [BLOCKED, NCHW])
def test_each_layout_computes_what_onnxruntime_computes(layout, tmp_path):
    model = _convnet()
    result = compile_model(
        model,
        CompileConfig(
            out_dir=str(tmp_path), conv_layout=layout, choose_backends=False, measure=False
        ),
    )
    assert result.backend == "tvm"
    assert result.conv_layout["chosen"] == layout
    _outputs_match_onnxruntime(model, tmp_path)
    windows = {k.schedule for k in result.kernels if "pool" in k.func or "depthwise" in k.func}
    if layout == BLOCKED:  # pools and the depthwise conv run in blocks, channels in lanes
        assert windows == {"window"}
        # blocks from the stem's output to the last conv: no round trip to NCHW between
        # (the clip included), only the image into blocks and the output out of them
        transforms = [k for k in result.kernels if "layout_transform" in k.func]
        assert len(transforms) == 2


def test_the_compile_stage_times_both_layouts_and_says_which_ships(tmp_path):
    model = _convnet()
    result = compile_model(
        model,
        CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.3),
    )
    choice = result.conv_layout
    assert choice["checked"] is True
    assert choice["blockable_convs"] == 4
    assert choice["chosen"] in (NCHW, BLOCKED)
    assert choice["nchw_ms"] > 0 and choice["blocked_ms"] > 0
    faster = BLOCKED if choice["blocked_ms"] < 0.97 * choice["nchw_ms"] else NCHW
    assert choice["chosen"] == faster
    assert "thread" in choice["measured"] and str(choice["runs"]) in choice["measured"]
    assert result.outputs_match
    assert result.to_dict()["conv_layout"] == choice
    _outputs_match_onnxruntime(model, tmp_path)


def test_a_model_without_convs_is_not_built_twice(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    result = compile_model(
        model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.2)
    )
    assert result.conv_layout["chosen"] == NCHW
    assert result.conv_layout["checked"] is False
    assert "no dense conv" in result.conv_layout["reason"]
    assert "nchw_ms" not in result.conv_layout  # nothing was built or timed twice


class _Call:
    """What ConvertLayout hands the layout callback: an operator, its arguments' shapes
    and its attributes."""

    class _Op:
        name = "relax.nn.conv2d"

    class _Arg:
        def __init__(self, shape):
            self.ty = type("T", (), {"shape": shape})()

    def __init__(self, data, weight, groups=1, layouts=("NCHW", "OIHW")):
        self.op = self._Op()
        self.args = [self._Arg(data), self._Arg(weight)]
        self.attrs = type(
            "A", (), {"groups": groups, "data_layout": layouts[0], "kernel_layout": layouts[1]}
        )()


@pytest.mark.parametrize(
    ("data", "weight", "groups", "expected"),
    [
        ([1, 3, 224, 224], [64, 3, 7, 7], 1, ["NCHW3c", "OIHW3i32o", "NCHW32c"]),  # stem
        ([1, 64, 56, 56], [64, 64, 3, 3], 1, ["NCHW32c", "OIHW32i32o", "NCHW32c"]),
        ([1, 48, 56, 56], [80, 48, 1, 1], 1, ["NCHW16c", "OIHW16i16o", "NCHW16c"]),
        ([1, 24, 56, 56], [40, 24, 1, 1], 1, ["NCHW8c", "OIHW8i8o", "NCHW8c"]),
        ([1, 32, 56, 56], [8, 32, 1, 1], 1, ["NCHW32c", "OIHW32i8o", "NCHW8c"]),
        ([1, 96, 56, 56], [96, 1, 3, 3], 96, ["NCHW32c", "OIHW1i32o", "NCHW32c"]),  # depthwise
        ([1, 32, 56, 56], [64, 2, 3, 3], 16, None),  # grouped, not depthwise: stays NCHW
        ([1, 30, 56, 56], [64, 30, 3, 3], 1, None),  # 30 channels make no block
        ([1, 64, 56, 56], [1000, 64, 1, 1], 1, ["NCHW32c", "OIHW32i8o", "NCHW8c"]),
        ([1, 64, 56, 56], [1001, 64, 1, 1], 1, None),
    ],
)
def test_which_convs_take_blocks(data, weight, groups, expected):
    assert _conv_layouts(_Call(data, weight, groups), lanes=16) == expected
