"""Mobile-GPU delegate analysis: the TFLite GPU paper's own numbers (Fig. 2, Fig. 3, the
channel cost rule), the delegate partition and its boundaries, findings that name their
node, unknown shapes kept unknown, and a full analysis of bundled light models."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx_builders import LIGHT_DIR, build, value, weight

from engine.graph import analyze_model
from engine.graph.ir import build_graph
from engine.graph.prepare import prepare_model
from engine.options import OptionsError
from engine.profiling.gpu_support import APIS, support_table
from engine.profiling.mobile_gpu import BASIS, analyze_mobile_gpu
from engine.profiling.options import ProfileOptions
from engine.profiling.phwc4 import Bhwc, compute_grid, phwc4_layout, to_bhwc
from engine.profiling.stage import run
from engine.targets.catalog import get_target
from engine.targets.profile import Unit

PHONE = get_target("phone-snapdragon835")
GPU = PHONE.unit("gpu")


def analysis(model, unit: Unit = GPU, api: str = "opengl-es-3.1", opset=None):
    return analyze_mobile_gpu(analyze_model(model).graph, unit, api, opset)


def conv(name: str, x: str, y: str, w: str, **attrs):
    return helper.make_node("Conv", [x, w], [y], name=name, pads=[1, 1, 1, 1], **attrs)


# --- the paper's numbers ---------------------------------------------------------------


def test_fig2_phwc4_of_8x6x12_is_a_24x24_array():
    layout = phwc4_layout(to_bhwc((1, 12, 8, 6)), 4)  # ONNX NCHW of (H8, W6, C12)
    assert layout.bhwc == Bhwc(1, 8, 6, 12)
    assert layout.array_shape == (24, 24) and layout.slices == 3
    assert layout.padded_bytes == layout.bytes == 8 * 6 * 12 * 4 and layout.waste_bytes == 0


def test_fig3_grid_of_10x10x6_with_work_group_4x4x4_is_12x12x8():
    grid = compute_grid(Bhwc(1, 10, 10, 6), (4, 4, 4))
    assert grid.grid == (12, 12, 8) and grid.groups == (3, 3, 2)
    assert grid.threads == 1152
    assert grid.padding_threads == 10 * 10 * 2  # channels 6 and 7 of the second slice
    assert grid.stub_threads == 1152 - 10 * 10 * 8
    assert grid.stub_fraction == pytest.approx(352 / 1152)


def test_c5_costs_twice_c4_and_as_much_as_c8():  # L459
    size = {c: phwc4_layout(Bhwc(1, 7, 7, c), 4).padded_bytes for c in (4, 5, 8)}
    assert size[5] == 2 * size[4] == size[8]


def test_c6_wastes_25_percent_of_the_buffer_and_the_finding_names_the_tensor():
    assert phwc4_layout(Bhwc(1, 10, 10, 6), 4).waste_fraction == 0.25
    model = build(
        [conv("c1", "x", "h", "w1"), conv("c2", "h", "y", "w2")],
        [("x", [1, 4, 10, 10])],
        [("y", [1, 4, 10, 10])],
        [weight("w1", (6, 4, 3, 3)), weight("w2", (4, 6, 3, 3))],
    )
    result = analysis(model)
    (h,) = [t for t in result.tensors if t["name"] == "h"]
    assert h["layout"]["waste_bytes"] == 10 * 10 * 2 * 4 and h["layout"]["waste_fraction"] == 0.25
    (finding,) = [f for f in result.findings if f["kind"] == "gpu_channels"]
    assert finding["text"].startswith("C=6 wastes 25% of the buffer")
    assert "'h'" in finding["text"] and finding["data"]["tensors"] == ["h"]
    assert finding["basis"] == "predicted"


# --- the delegate partition ------------------------------------------------------------


def mid_chain_model():
    """conv -> LRN (no GPU kernel) -> conv."""
    return build(
        [
            conv("c1", "x", "a", "w1"),
            helper.make_node("LRN", ["a"], ["b"], name="lrn", size=3),
            conv("c2", "b", "y", "w2"),
        ],
        [("x", [1, 4, 8, 8])],
        [("y", [1, 4, 8, 8])],
        [weight("w1", (8, 4, 3, 3)), weight("w2", (4, 8, 3, 3))],
    )


def test_one_unsupported_op_mid_chain_gives_two_partitions_and_two_boundaries():
    result = analysis(mid_chain_model())
    assert [p["nodes"] for p in result.partitions] == [["c1"], ["c2"]]
    assert [(b.tensor, b.direction, b.partition) for b in result.boundaries] == [
        ("a", "gpu->cpu", 1),
        ("b", "cpu->gpu", 2),
    ]
    assert [b.bytes for b in result.boundaries] == [8 * 8 * 8 * 4] * 2
    assert [(t.tensor, t.direction) for t in result.io] == [("x", "input"), ("y", "output")]
    summary = result.summary()
    assert summary["gpu_partitions"] == 2 and summary["boundaries"] == 2
    assert summary["nodes"] == {"gpu": 2, "cpu": 1} and not summary["fully_delegated"]
    (split,) = [f for f in result.findings if f["kind"] == "gpu_split"]
    assert split["data"]["nodes"] == ["lrn"]
    assert "'lrn' (LRN) runs on the CPU" in split["text"] and "#1 to partition #2" in split["text"]


def test_a_reshape_the_unit_cannot_run_forces_a_cpu_round_trip():
    unit = Unit("gpu", "gpu", supports=("Conv", "Relu"))
    shape = numpy_helper.from_array(np.array([1, 8, 4, 4], np.int64), "shape")
    model = build(
        [
            conv("c1", "x", "a", "w1"),
            helper.make_node("Reshape", ["a", "shape"], ["b"], name="reshape"),
            conv("c2", "b", "y", "w2"),
        ],
        [("x", [1, 8, 4, 4])],
        [("y", [1, 8, 4, 4])],
        [weight("w1", (8, 8, 3, 3)), weight("w2", (8, 8, 3, 3)), shape],
    )
    result = analysis(model, unit)
    assert result.summary()["gpu_partitions"] == 2
    (split,) = [f for f in result.findings if f["kind"] == "gpu_split"]
    assert split["text"].startswith("This Reshape 'reshape' forces a CPU round-trip")


def test_a_delegated_reshape_that_moves_channels_is_flagged_and_a_flatten_of_1x1_is_not():
    shape = numpy_helper.from_array(np.array([1, 32, 2, 2], np.int64), "shape")
    model = build(
        [
            conv("c1", "x", "a", "w1"),
            helper.make_node("Reshape", ["a", "shape"], ["b"], name="reshape"),
            helper.make_node("GlobalAveragePool", ["b"], ["p"], name="pool"),
            helper.make_node("Flatten", ["p"], ["y"], name="flatten"),
        ],
        [("x", [1, 8, 4, 4])],
        [("y", [1, 32])],
        [weight("w1", (8, 8, 3, 3)), shape],
    )
    result = analysis(model)
    assert result.summary()["gpu_partitions"] == 1 and not result.boundaries
    flagged = [f["data"]["nodes"] for f in result.findings if f["kind"] == "gpu_reshape"]
    assert flagged == [["reshape"]]


def test_an_activation_fuses_into_the_convolution_before_it():  # L186
    model = build(
        [
            conv("c1", "x", "a", "w1"),
            helper.make_node("Relu", ["a"], ["b"], name="relu"),
            conv("c2", "b", "c", "w2"),
            helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid"),
        ],
        [("x", [1, 4, 8, 8])],
        [("y", [1, 4, 8, 8])],
        [weight("w1", (4, 4, 3, 3)), weight("w2", (4, 4, 3, 3))],
    )
    result = analysis(model)
    assert [(k["node"], k["fused"]) for k in result.kernels] == [
        ("c1", ["relu"]),
        ("c2", ["sigmoid"]),
    ]
    one = [f for f in result.findings if f["kind"] == "gpu_one_delegate"]
    assert one and one[0]["severity"] == "info"


def test_the_api_decides_which_ops_have_a_kernel():
    model = build(
        [
            conv("c1", "x", "a", "w1"),
            helper.make_node("Transpose", ["a"], ["b"], name="t", perm=[0, 1, 3, 2]),
            conv("c2", "b", "y", "w2"),
        ],
        [("x", [1, 4, 8, 8])],
        [("y", [1, 4, 8, 8])],
        [weight("w1", (4, 4, 3, 3)), weight("w2", (4, 4, 3, 3))],
    )
    partitions = {api: analysis(model, api=api).summary()["gpu_partitions"] for api in APIS}
    assert partitions == {"opengl-es-3.1": 2, "opencl": 1, "metal": 2}
    gl = {n.name: n for n in analysis(model).nodes}
    assert gl["t"].reason == "the opengl-es-3.1 backend has no TRANSPOSE kernel"
    rows = {r["op_type"]: r for r in support_table()}
    assert rows["Transpose"]["opencl"] and not rows["Transpose"]["metal"]
    assert all(r["source"] for r in rows.values())


def test_grouped_and_depthwise_convolutions():
    model = build(
        [
            conv("dw", "x", "a", "wd", group=8),
            conv("grouped", "a", "y", "wg", group=2),
        ],
        [("x", [1, 8, 8, 8])],
        [("y", [1, 8, 8, 8])],
        [weight("wd", (8, 1, 3, 3)), weight("wg", (8, 4, 3, 3))],
    )
    nodes = {n.name: n for n in analysis(model).nodes}
    assert nodes["dw"].status == "gpu" and nodes["dw"].gpu_op == "DEPTHWISE_CONVOLUTION"
    assert nodes["grouped"].status == "cpu" and "group=2" in nodes["grouped"].reason


def test_softmax_over_channels_only_with_the_opsets_default_axis():
    model = build(
        [helper.make_node("Softmax", ["x"], ["y"], name="softmax")],
        [("x", [1, 10])],
        [("y", [1, 10])],
        opset=11,
    )
    assert analysis(model, opset=11).nodes[0].status == "gpu"  # axis 1 = C
    wide = build(
        [helper.make_node("Softmax", ["x"], ["y"], name="softmax")],
        [("x", [1, 4, 10])],
        [("y", [1, 4, 10])],
    )
    assert analysis(wide, opset=17).nodes[0].status == "cpu"  # axis -1 is W, not C


# --- unknowns --------------------------------------------------------------------------


def test_unknown_shapes_stay_unknown_never_zero():
    """Without shape inference 'b' has no shape: the nodes touching it cannot be placed;
    they are listed as unknown (counted on the CPU), never given a size of 0."""
    model = build(
        [
            conv("c1", "x", "a", "w1"),
            helper.make_node("Relu", ["a"], ["b"], name="relu"),
            conv("c2", "b", "y", "w2"),
        ],
        [("x", [1, 4, 8, 8])],
        [("y", None)],
        [weight("w1", (4, 4, 3, 3)), weight("w2", (4, 4, 3, 3))],
    )
    model.graph.value_info.append(value("a", [1, 4, 8, 8]))
    result = analyze_mobile_gpu(build_graph(model), GPU)
    nodes = {n.name: n for n in result.nodes}
    assert nodes["c1"].status == "gpu"
    assert (
        nodes["relu"].status == "unknown" and nodes["relu"].reason == "the shape of 'b' is unknown"
    )
    assert nodes["c2"].status == "unknown" and nodes["c2"].partition is None
    summary = result.summary()
    assert summary["nodes"] == {"gpu": 1, "unknown": 2} and summary["gpu_partitions"] == 1
    assert summary["boundary_bytes"] == 8 * 8 * 4 * 4  # a, downloaded for the relu
    assert {t["name"] for t in result.tensors} == {"x", "a"}  # nothing sized from 'b'
    (unknown,) = [f for f in result.findings if f["kind"] == "gpu_unknown"]
    assert unknown["data"]["nodes"] == ["relu", "c2"]


# --- real models -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "partitions", "boundaries"),
    [("squeezenet", 1, 0), ("inception_v1", 3, 4), ("resnet50", 1, 0)],
)
def test_a_bundled_light_model_gets_a_full_analysis(name, partitions, boundaries):
    graph = analyze_model(LIGHT_DIR / f"light_{name}.onnx").graph
    result = analyze_mobile_gpu(graph, GPU, "opengl-es-3.1", opset=9)
    summary = result.summary()
    assert (summary["gpu_partitions"], summary["boundaries"]) == (partitions, boundaries)
    assert len(result.nodes) == len(graph.nodes)
    assert all(n.reason for n in result.nodes if n.status in ("cpu", "unknown"))
    assert summary["kernels"] > 0 and all(k["grid"] for k in result.kernels)
    assert all(t["layout"] for t in result.tensors) and summary["tensors_unknown"] == 0
    assert summary["padded_bytes"] > summary["tensor_bytes"] > 0  # the RGB input pads
    assert any(f["kind"] == "gpu_rgb_input" for f in result.findings)
    assert result.to_dict()["basis"] == BASIS


def test_partitions_of_a_split_model_form_no_cycle():
    """No path leaves a GPU partition and comes back into it: each is one delegate node."""
    graph = analyze_model(LIGHT_DIR / "light_shufflenet.onnx").graph
    result = analyze_mobile_gpu(graph, GPU, "opengl-es-3.1", opset=9)
    assert result.summary()["gpu_partitions"] > 10
    part = {n.name: n.partition for n in result.nodes}
    successors = {
        n.name: {c for o in n.outputs if o for c in graph.tensors[o].consumers} for n in graph.nodes
    }
    for partition in result.partitions:
        inside = set(partition["nodes"])
        frontier = {s for n in inside for s in successors[n]} - inside
        seen = set()
        while frontier:
            node = frontier.pop()
            assert part[node] != partition["index"], f"{node} re-enters #{partition['index']}"
            seen.add(node)
            frontier |= successors[node] - seen


# --- the profile stage -----------------------------------------------------------------


def test_the_predicted_profile_of_a_gpu_unit_has_the_analysis(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(mid_chain_model().SerializeToString())
    prepared = prepare_model(path)
    options = ProfileOptions.from_dict({"unit": "gpu", "gpu_api": "metal"})
    result = run(prepared, PHONE, options, lambda f, m: None).to_dict()
    section = result["mobile_gpu"]
    assert section["available"] and section["unit"] == "gpu" and section["api"] == "metal"
    assert section["summary"]["gpu_partitions"] == 2 and section["basis"] == BASIS
    cpu = ProfileOptions.from_dict({"unit": "cpu_big"})
    result = run(prepared, PHONE, cpu, lambda f, m: None).to_dict()
    assert result["mobile_gpu"] == {
        "available": False,
        "reason": "unit 'cpu_big' is a cpu, not a GPU",
    }
    dsa = run(prepared, get_target("cloud-xeon-e5-2620v4"), ProfileOptions(), lambda f, m: None)
    assert dsa.to_dict()["mobile_gpu"]["available"] is False


def test_artifact_ops_are_named_and_an_identity_does_not_split_the_delegate():
    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    model = build(
        [
            helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
            helper.make_node("Conv", ["p", "w1"], ["a"], name="c1"),
            helper.make_node("Identity", ["a"], ["b"], name="identity"),
            helper.make_node("Concat", ["b"], ["y"], name="concat", axis=1),
        ],
        [("x", [1, 4, 8, 8])],
        [("y", [1, 4, 8, 8])],
        [weight("w1", (4, 4, 3, 3)), pads],
    )
    result = analysis(model)
    assert result.summary()["gpu_partitions"] == 1 and not result.boundaries
    named = {
        f["data"]["nodes"][0]: f["text"] for f in result.findings if f["kind"] == "gpu_artifact"
    }
    assert set(named) == {"pad", "identity", "concat"}
    assert "separate Pad before a convolution" in named["pad"]
    assert "has a single input" in named["concat"]


def test_an_unknown_api_is_refused_with_a_typed_error():
    with pytest.raises(OptionsError, match="gpu_api: 'vulkan' is not one of"):
        analysis(mid_chain_model(), api="vulkan")
