"""Convolutions in channel blocks (NCHW16c on AVX-512), the layout chosen per model by
measurement, and the pool schedule that runs in those blocks: every shape against
onnxruntime's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build

from engine.fusion import CompileConfig, compile_model
from engine.fusion.conv_layout import BLOCKED, NCHW, _conv_layouts, nchw_layouts
from engine.fusion.standalone import CompiledModel


def _model(nodes, input_shape, initializers=()):
    """One float input ``x`` of ``input_shape``, one output ``y``, shapes inferred."""
    model = build(nodes, [("x", input_shape)], [("y", None)], initializers, opset=18)
    return onnx.shape_inference.infer_shapes(model)


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
    return _model(nodes, [1, in_channels, size, size], inits)


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
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [1, 8, 4, 4])
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
        # a window's weights inside the input-channel block: one run per input channel
        ([1, 3, 224, 224], [64, 3, 7, 7], 1, ["NCHW3c", "OI3iHW32o", "NCHW32c"]),  # stem
        ([1, 64, 56, 56], [64, 64, 3, 3], 1, ["NCHW32c", "OI32iHW32o", "NCHW32c"]),
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


@pytest.mark.parametrize(
    ("data", "weight", "groups", "kernel"),
    [
        ([1, 64, 56, 56], [64, 64, 3, 3], 1, "IHWO"),  # dense
        ([1, 96, 27, 27], [256, 48, 5, 5], 2, "IHWO"),  # AlexNet's two-group conv
        ([1, 96, 56, 56], [96, 1, 3, 3], 96, "OIHW"),  # depthwise: read in place
    ],
)
def test_an_nchw_build_stores_dense_and_grouped_conv_weights_ihwo(data, weight, groups, kernel):
    assert nchw_layouts(_Call(data, weight, groups)) == {
        "relax.nn.conv2d": ["NCHW", kernel, "NCHW"]
    }
    assert nchw_layouts(_Call(data, weight, groups, ("NHWC", "OHWI"))) == {}


@pytest.mark.parametrize("layout", [BLOCKED, NCHW])
def test_grouped_and_depthwise_convs_in_one_model_compute_what_onnxruntime_computes(
    layout, tmp_path
):
    """A two-group conv (kept NCHW in both layouts, its weights IHWO) between a depthwise
    conv and a dense one: the mix ConvNeXt and AlexNet have."""
    nodes = [
        helper.make_node("Conv", ["x", "wd"], ["d"], kernel_shape=[3, 3], pads=[1] * 4, group=32),
        helper.make_node(
            "Conv", ["d", "wg", "bg"], ["g"], kernel_shape=[5, 5], pads=[2] * 4, group=2
        ),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Conv", ["r", "w1"], ["y"], kernel_shape=[1, 1]),
    ]
    inits = [
        _weights("wd", [32, 1, 3, 3], 0),
        _weights("wg", [48, 16, 5, 5], 1),
        _weights("bg", [48], 2),
        _weights("w1", [16, 48, 1, 1], 3),
    ]
    model = _model(nodes, [1, 32, 13, 13], inits)
    result = compile_model(
        model,
        CompileConfig(
            out_dir=str(tmp_path), conv_layout=layout, choose_backends=False, measure=False
        ),
    )
    assert result.backend == "tvm"
    _outputs_match_onnxruntime(model, tmp_path)


def _padded_conv(pads, mode="constant", value=None, readers=1):
    """Pad, then a strided depthwise conv (transformers' EfficientNet pads this way)."""
    inputs = ["x", "pads"] + (["value"] if value is not None else [])
    nodes = [helper.make_node("Pad", inputs, ["p"], name="pad", mode=mode)]
    inits = [
        numpy_helper.from_array(np.array(pads, dtype=np.int64), "pads"),
        _weights("wd", [16, 1, 3, 3], 7),
    ]
    if value is not None:
        inits.append(numpy_helper.from_array(np.array(value, dtype=np.float32), "value"))
    outs = []
    for k in range(readers):
        nodes.append(
            helper.make_node(
                "Conv",
                ["p", "wd"],
                [f"y{k}"],
                name=f"dw{k}",
                kernel_shape=[3, 3],
                strides=[2, 2],
                group=16,
                pads=[1, 0, 1, 0],
            )
        )
        outs.append(f"y{k}")
    if readers > 1:
        nodes.append(helper.make_node("Add", outs, ["y"], name="sum"))
    else:
        nodes[-1].output[0] = "y"
    return _model(nodes, [1, 16, 15, 15], inits)


@pytest.mark.parametrize(
    ("pads", "mode", "value", "readers", "folded"),
    [
        ([0, 0, 0, 0, 0, 0, 1, 1], "constant", None, 1, True),  # "same": bottom, right
        ([0, 0, 1, 1, 0, 0, 2, 2], "constant", 0.0, 1, "valid"),  # as transformers exports
        ([0, 0, 1, 2, 0, 0, 1, 0], "constant", 0.0, 2, True),  # read by two convs
        ([0, 0, 1, 1, 0, 0, 1, 1], "constant", 0.5, 1, False),  # not zeros
        ([0, 0, 1, 1, 0, 0, 1, 1], "reflect", None, 1, False),
        ([0, 1, 0, 0, 0, 0, 0, 0], "constant", None, 1, False),  # a channel, not spatial
    ],
)
def test_a_zero_spatial_pad_goes_into_the_convs_it_feeds(
    pads, mode, value, readers, folded, tmp_path
):
    from engine.fusion.importer import prepare

    if pads[1]:  # a padded channel: the depthwise conv would not match; only prepare
        model = _padded_conv(pads, mode, value, readers)
        ops = [n.op_type for n in prepare(model).graph.node]
        assert "Pad" in ops
        return
    model = _padded_conv(pads, mode, value, readers)
    if folded == "valid":  # the conv's own padding given as auto_pad VALID: none
        conv = model.graph.node[1]
        kept = [a for a in conv.attribute if a.name != "pads"]
        del conv.attribute[:]
        conv.attribute.extend([*kept, helper.make_attribute("auto_pad", "VALID")])
        model = onnx.shape_inference.infer_shapes(model)
    prepared = prepare(model)
    assert ("Pad" not in [n.op_type for n in prepared.graph.node]) == bool(folded)
    assert "pads" not in {t.name for t in prepared.graph.initializer} or not folded
    compile_model(
        model,
        CompileConfig(out_dir=str(tmp_path), choose_backends=False, measure=False),
    )
    _outputs_match_onnxruntime(model, tmp_path)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(("size", "stride", "kernel"), [(15, 1, 3), (15, 2, 3), (16, 2, 5)])
def test_same_padding_becomes_the_convs_own_pads(mode, size, stride, kernel, tmp_path):
    from engine.fusion.importer import prepare

    conv = helper.make_node(
        "Conv",
        ["x", "w"],
        ["y"],
        name="conv",
        auto_pad=mode,
        strides=[stride, stride],
        kernel_shape=[kernel, kernel],
        group=16,
    )
    model = _model([conv], [1, 16, size, size], [_weights("w", [16, 1, kernel, kernel], 11)])
    prepared = prepare(model)
    attrs = {a.name for a in prepared.graph.node[0].attribute}
    assert "auto_pad" not in attrs and "pads" in attrs
    for layout in (NCHW, BLOCKED):
        out = tmp_path / layout
        compile_model(
            model,
            CompileConfig(
                out_dir=str(out), choose_backends=False, measure=False, conv_layout=layout
            ),
        )
        _outputs_match_onnxruntime(model, out)


def test_tuning_waits_for_the_layout_and_tunes_the_kernels_that_ship(tmp_path, monkeypatch):
    """With the layout left to measurement, tuning comes after the choice: the kernels it
    tunes are those of the chosen layout (blocked here), and they ship."""
    from engine.fusion import tuning as tuning_module
    from engine.fusion import whole_model_check as check_module

    real_timing = check_module.time_alternating

    def blocked_faster(first, second, spec, config, report, message="", models=None):
        if "blocked" in message:  # the layout check: blocked wins
            real_timing(first, second, spec, config, report, message, models)
            return 2.0, 1.0, 5
        return 1.0, 2.0, 5  # the tuned-vs-default check: tuned wins

    monkeypatch.setattr(check_module, "time_alternating", blocked_faster)
    # every tuned kernel that measured counts as faster than its default schedule
    monkeypatch.setattr(tuning_module, "_beats", lambda tuned_us, default_us: tuned_us is not None)
    model = _convnet()
    result = compile_model(
        model,
        CompileConfig(
            out_dir=str(tmp_path),
            threads=1,
            choose_backends=False,
            timing_window_s=0.1,
            tune_trials=8,
            tuning_store=str(tmp_path / "store"),
        ),
    ).to_dict()
    assert result["conv_layout"]["chosen"] == BLOCKED and result["conv_layout"]["checked"]
    assert result["tuning"]["trials"] > 0 and result["tuning"]["improved"] > 0
    assert result["tuning"]["end_to_end"]["kept"] == "tuned"
    tuned = [k for k in result["kernels"] if k["schedule"] == "tuned"]
    assert tuned, "no kernel of the blocked build carries its tuned schedule"
    assert result["outputs_match"] is True
    _outputs_match_onnxruntime(model, tmp_path)


def test_a_second_compile_takes_the_layout_its_store_holds(tmp_path, monkeypatch):
    """With a tuning store, the layout chosen by measurement is stored under the model: a
    second compile builds that layout alone, timing nothing; a damaged entry is measured
    again."""
    from engine.fusion import whole_model_check as check_module

    timed = []
    real_timing = check_module.time_alternating

    def blocked_faster(*args, **kwargs):
        timed.append(args[-2])
        runs = real_timing(*args, **kwargs)[2]
        return 2.0, 1.0, runs

    monkeypatch.setattr(check_module, "time_alternating", blocked_faster)
    store = tmp_path / "store"

    def compile_into(name: str):
        config = CompileConfig(
            out_dir=str(tmp_path / name),
            threads=1,
            choose_backends=False,
            timing_window_s=0.1,
            tuning_store=str(store),
        )
        return compile_model(model, config)

    model = _convnet()
    first = compile_into("a").conv_layout
    assert first["chosen"] == BLOCKED and first["checked"] and "stored" not in first
    assert len(timed) == 1
    second = compile_into("b")
    assert second.conv_layout == {**first, "stored": True}
    assert len(timed) == 1  # nothing built twice or timed
    assert second.outputs_match and not (tmp_path / "b" / "artifact-blocked").exists()
    _outputs_match_onnxruntime(model, tmp_path / "b")

    (entry,) = store.glob("*/layout-*.json")
    entry.write_text("{damaged")
    third = compile_into("c").conv_layout
    assert third["checked"] and "stored" not in third and len(timed) == 2

    # a choice measured with another version of the compile stage's code is not taken
    from engine.fusion import compile as compile_module

    monkeypatch.setattr(compile_module, "code_version", lambda: "another version")
    fourth = compile_into("d").conv_layout
    assert fourth["checked"] and "stored" not in fourth and len(timed) == 3


def _conv_norm_conv(norm: str, channels=32, size=8):
    """A conv, an operator whose TVM layout rule cannot take channel blocks (a layer norm
    over channels and space; GoogLeNet's concat of a branch in blocks of 32 channels and
    one in blocks of 16), or LRN as GoogLeNet has it, and a conv reading its result. The
    concat's 32 + 40 channels make blocks of different sizes with 8 lanes (16 and 8) and
    with 16 (32 and 8)."""
    if norm == "LRN":
        middle = [helper.make_node("LRN", ["c0"], ["n0"], name="lrn", size=5, alpha=1e-4)]
        extra = []
    elif norm == "Concat":  # 32 + 40 channels: blocks of different sizes
        middle = [
            helper.make_node("Conv", ["x", "wb"], ["cb"], name="branch", kernel_shape=[1, 1]),
            helper.make_node("Concat", ["c0", "cb"], ["n0"], name="concat", axis=1),
        ]
        extra = [_weights("wb", [40, 16, 1, 1], 9)]
    else:
        middle = [
            helper.make_node(
                "LayerNormalization", ["c0", "gamma", "beta"], ["n0"], name="norm", axis=1
            )
        ]
        extra = [
            _weights("gamma", [channels, size, size], 7),
            _weights("beta", [channels, size, size], 8),
        ]
    nodes = [
        helper.make_node(
            "Conv", ["x", "w0"], ["c0"], name="first", kernel_shape=[3, 3], pads=[1] * 4
        ),
        *middle,
        helper.make_node("Conv", ["n0", "w1"], ["y"], name="second", kernel_shape=[1, 1]),
    ]
    joined = channels + 40 if norm == "Concat" else channels
    inits = [_weights("w0", [channels, 16, 3, 3], 0), _weights("w1", [channels, joined, 1, 1], 1)]
    return _model(nodes, [1, 16, size, size], [*inits, *extra])


@pytest.mark.parametrize("norm", ["LRN", "LayerNormalization", "Concat"])
def test_an_operator_that_refuses_blocks_runs_in_nchw_between_blocked_convs(
    norm, tmp_path, monkeypatch
):
    """TVM's layout rules for layer_norm, and for concat of blocks of different sizes,
    fail on channel blocks (the whole model went NCHW: GoogLeNet, ConvNeXt): they now take
    NCHW, with transforms around them, and the convs still run in blocks."""
    model = _conv_norm_conv(norm)
    result = compile_model(
        model,
        CompileConfig(
            out_dir=str(tmp_path), conv_layout=BLOCKED, choose_backends=False, measure=False
        ),
    )
    assert result.conv_layout["chosen"] == BLOCKED, result.conv_layout
    assert [k for k in result.kernels if "layout_transform" in k.func]
    _outputs_match_onnxruntime(model, tmp_path)
    if norm != "LRN":  # LRN takes blocks as it is; the other two are what fences are for
        from engine.fusion import conv_layout

        monkeypatch.setattr(conv_layout, "_FENCED", ())
        config = CompileConfig(
            out_dir=str(tmp_path / "unfenced"),
            conv_layout=BLOCKED,
            choose_backends=False,
            measure=False,
        )
        assert compile_model(model, config).conv_layout["chosen"] == NCHW


def test_the_blocked_build_runs_beside_the_nchw_build_and_is_the_one_compared(
    tmp_path, monkeypatch
):
    """On a machine with two cores the blocked layout is built in a forked child while the
    compile builds NCHW; the layout choice waits for that build instead of building again."""
    import os

    from engine.fusion import segment_builds, whole_model_check

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: the two builds run one after the other")
    started, built_in_process = [], []
    real_start, real_build = segment_builds.start_build_all, whole_model_check.build_all
    monkeypatch.setattr(
        segment_builds,
        "start_build_all",
        lambda *args: started.append(args[2]) or real_start(*args),
    )
    monkeypatch.setattr(
        whole_model_check,
        "build_all",
        lambda *args: built_in_process.append(args[2]) or real_build(*args),
    )
    model = _convnet()
    result = compile_model(
        model,
        CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.2),
    )
    assert started == [tmp_path / "artifact-blocked"] and built_in_process == []
    assert result.conv_layout["checked"] is True and result.outputs_match
    assert not (tmp_path / "artifact-blocked").exists()
    _outputs_match_onnxruntime(model, tmp_path)


def test_a_compile_that_fails_ends_the_blocked_build_beside_it(tmp_path, monkeypatch):
    from engine.fusion import compile as compile_module
    from engine.fusion import whole_model_check

    pendings = []
    real_start = whole_model_check.start_blocked_build

    def start(*args):
        pending = real_start(*args)
        pendings.append(pending)
        return pending

    def fail(*args, **kwargs):
        raise RuntimeError("the NCHW build broke")

    monkeypatch.setattr(compile_module, "start_blocked_build", start)
    monkeypatch.setattr(compile_module, "build_all", fail)
    with pytest.raises(RuntimeError, match="NCHW build broke"):
        compile_model(_convnet(), CompileConfig(out_dir=str(tmp_path), choose_backends=False))
    (pending,) = pendings
    if pending is not None:
        assert pending._pending._pid is None  # ended, not left building
