"""Stages (NN-Stretch), key-op blocks (hsa_cnn_partition) and chains (GraphTurbo)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx_builders import LIGHT_DIR, LIGHT_MODELS, analysis_of, build, weight

from engine.graph import analyze_model
from engine.zoo import ZOO


def structure(model):
    return analyze_model(model).structure


def zoo_structure(name):
    return analysis_of(name).structure


def conv(name, x, y, cin, cout, stride=1):
    return helper.make_node(
        "Conv", [x, f"{name}_w"], [y], name=name, pads=[1] * 4, strides=[stride] * 2
    ), weight(f"{name}_w", (cout, cin, 3, 3))


def test_stages_follow_resolution_and_the_head_joins_the_last():
    (c1, w1), (c2, w2), (c3, w3) = (
        conv("c1", "x", "a", 3, 8),
        conv("c2", "r1", "b", 8, 8, stride=2),
        conv("c3", "r2", "c", 8, 8),
    )
    nodes = [
        c1,
        helper.make_node("Relu", ["a"], ["r1"], name="relu1"),
        c2,
        helper.make_node("Relu", ["b"], ["r2"], name="relu2"),
        c3,
        helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w"], ["y"], name="fc", transB=1),
    ]
    model = build(
        nodes, [("x", [1, 3, 16, 16])], [("y", [1, 4])], [w1, w2, w3, weight("fc_w", (4, 512))]
    )
    stages = structure(model).stages
    assert [(s.resolution, s.nodes) for s in stages] == [
        ((16, 16), ["c1", "relu1"]),
        ((8, 8), ["c2", "relu2", "c3", "flatten", "fc"]),
    ]


def test_se_block_global_pool_does_not_start_a_stage():
    # The squeeze-excitation path (GlobalAveragePool -> 1x1 convs on 1x1) is not spatial.
    stages = zoo_structure("efficientnet_b0").stages
    assert [s.resolution for s in stages] == [(112, 112), (56, 56), (28, 28), (14, 14), (7, 7)]
    assert "s1b0_se_pool" in stages[0].nodes and "s1b0_se_scale" in stages[0].nodes


def test_parallel_stride_2_branches_share_one_stage():
    stages = zoo_structure("resnext_blocks").stages
    assert [s.resolution for s in stages] == [(112, 112), (56, 56), (28, 28)]
    assert {"conv3_0_grouped", "conv3_0_shortcut", "conv3_0_add"} <= set(stages[2].nodes)
    assert "conv3_0_reduce" in stages[1].nodes  # the 1x1 before the strided conv


def test_a_resolution_seen_twice_joins_the_first_later_stage_at_it():
    # 16 -> 8 -> 16 (upsampled) -> 8: two stages at 8x8. The skip branch leaving the
    # first stage joins the first later 8x8 stage, the closing Add the last one.
    (c1, w1), (d1, w2), (d2, w3), (skip, w4) = (
        conv("c1", "x", "a", 1, 4),
        conv("d1", "a", "b", 4, 4, stride=2),
        conv("d2", "u", "c", 4, 4, stride=2),
        conv("skip", "a", "s", 4, 4, stride=2),
    )
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    up = helper.make_node("Resize", ["b", "", "scales"], ["u"], name="up")
    add = helper.make_node("Add", ["c", "s"], ["y"], name="add")
    model = build(
        [c1, d1, up, d2, skip, add],
        [("x", [1, 1, 16, 16])],
        [("y", [1, 4, 8, 8])],
        [w1, w2, w3, w4, scales],
    )
    stages = structure(model).stages
    assert [(s.resolution, s.nodes) for s in stages] == [
        ((16, 16), ["c1"]),
        ((8, 8), ["d1", "skip"]),
        ((16, 16), ["up"]),
        ((8, 8), ["d2", "add"]),
    ]


def test_transformers_have_one_stage():
    assert [s.resolution for s in zoo_structure("bert_small").stages] == [None]
    vit = zoo_structure("vit_small").stages
    assert [s.resolution for s in vit] == [(8, 8)]  # patch grid; tokens are not spatial


def test_vgg16_splits_into_five_conv_blocks_and_the_fc_block():
    """hsa_cnn_partition L44: VGG16 gives C1..C5 and one FC block."""
    found = zoo_structure("vgg16")
    assert [b.end for b in found.blocks] == ["pool1", "pool2", "pool3", "pool4", "pool5", None]
    fc_block = found.blocks[-1]
    assert [n for n in fc_block.nodes if not n.endswith("_fill")] == [
        "flatten", "fc6", "relu6", "fc7", "relu7", "fc8"
    ]  # fmt: skip
    assert [s.resolution[0] for s in found.stages] == [224, 112, 56, 28, 14, 7]


def test_alexnet_blocks_end_right_after_each_max_pool():
    """hsa_cnn_partition L73: AlexNet gives 4 sub-models cut at its 3 max pools."""
    analysis = analysis_of(LIGHT_DIR / "light_bvlc_alexnet.onnx")
    blocks = analysis.structure.blocks
    ops = {n.name: n.op_type for n in analysis.graph.nodes}
    assert len(blocks) == 4
    assert [ops[b.end] for b in blocks[:3]] == ["MaxPool"] * 3
    assert blocks[-1].end is None and "Gemm" in {ops[n] for n in blocks[-1].nodes}


def test_inception_modules_are_blocks_with_four_branches():
    blocks = zoo_structure("inception").blocks
    ends = [b.end for b in blocks]
    assert ends == [
        "stem_pool1", "stem_pool2", "mixed0a_concat", "mixed0b_concat", "pool1",
        "mixed1a_concat", None,
    ]  # fmt: skip
    module = blocks[2]
    assert len(module.branches) == 4
    # the max pool inside the pool branch does not cut the module
    assert [
        "mixed0a_pool",
        "mixed0a_pool_proj",
        "mixed0a_pool_proj_bn",
        "mixed0a_pool_proj_act",
    ] in [
        [n for n in branch if not n.endswith(("_w", "_scale", "_bias", "_mean", "_var"))]
        for branch in module.branches
    ]
    assert all(not b.branches for b in blocks if b.end and "pool" in b.end)


def test_max_pool_on_a_side_branch_is_not_a_cut():
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], name="side_pool", kernel_shape=[1, 1]),
        helper.make_node("Relu", ["x"], ["r"], name="main"),
        helper.make_node("Add", ["p", "r"], ["y"], name="join"),
    ]
    found = structure(build(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 2, 4, 4])]))
    assert [(b.end, b.nodes) for b in found.blocks] == [(None, ["side_pool", "main", "join"])]


def test_conv_bn_relu_is_one_chain_in_resnet50():
    """GraphTurbo: Conv + BN + ReLU collapses into one layer."""
    analysis = analysis_of(LIGHT_DIR / "light_resnet50.onnx")
    ops = {n.name: n.op_type for n in analysis.graph.nodes}
    layers = [
        [ops[n] for n in c.nodes if ops[n] != "ConstantOfShape"] for c in analysis.structure.chains
    ]
    assert layers[1] == ["Conv", "BatchNormalization", "Relu"]
    assert layers.count(["Conv", "BatchNormalization", "Relu"]) == 32
    # every chain holds one Conv/Gemm, except the residual joins (Sum + Relu); the last
    # join runs straight into the classifier
    assert sum(1 for layer in layers if layer == ["Sum", "Relu"]) == 15
    assert layers[-1] == ["Sum", "Relu", "AveragePool", "Reshape", "Gemm", "Softmax"]
    convs = sum(layer.count("Conv") + layer.count("Gemm") for layer in layers)
    assert convs == 54 and all(layer.count("Conv") + layer.count("Gemm") <= 1 for layer in layers)


def test_chains_break_at_fan_out_fan_in_and_a_second_weighted_op():
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("MatMul", ["b", "w2"], ["c"], name="mm2"),  # second weight: new chain
        helper.make_node("Neg", ["c"], ["d"], name="neg"),
        helper.make_node("Abs", ["c"], ["e"], name="abs"),  # fan-out of c
        helper.make_node("Add", ["d", "e"], ["f"], name="add"),  # fan-in
        helper.make_node("MatMul", ["f", "f"], ["y"], name="self_mm"),  # no weight
    ]
    model = build(
        nodes, [("x", [2, 2])], [("y", [2, 2])], [weight("w1", (2, 2)), weight("w2", (2, 2))]
    )
    chains = structure(model).chains
    assert [(c.anchor, c.nodes) for c in chains] == [
        ("mm1", ["mm1", "relu"]),
        ("mm2", ["mm2"]),
        ("neg", ["neg"]),
        ("abs", ["abs"]),
        ("self_mm", ["add", "self_mm"]),
    ]


def _check_partition(analysis):
    names = [n.name for n in analysis.graph.nodes]
    order = {n: i for i, n in enumerate(names)}
    fills = {n.name for n in analysis.graph.nodes if n.op_type == "ConstantOfShape"}
    found = analysis.structure
    for groups in (found.stages, found.blocks, found.chains):
        members = [n for g in groups for n in g.nodes]
        assert sorted(members) == sorted(names)  # each node exactly once
    stage_of = {n: s.index for s in found.stages for n in s.nodes}
    block_of = {n: b.index for b in found.blocks for n in b.nodes}
    for node in analysis.graph.nodes:
        for name in node.inputs:
            producer = analysis.graph.tensors[name].producer if name else None
            if producer is not None and producer not in fills:
                assert stage_of[producer] <= stage_of[node.name]
                assert block_of[producer] <= block_of[node.name]
    for block in found.blocks:
        positions = [order[n] for n in block.nodes if n not in fills]
        assert positions == sorted(positions)


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: p.stem)
def test_light_models_partition_cleanly(path):
    _check_partition(analysis_of(path))


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_models_partition_cleanly(name):
    _check_partition(analysis_of(name))


def test_structure_in_to_dict(conv_model):
    result = analyze_model(conv_model).to_dict(nodes=False)
    assert result["structure"] == {
        "stages": [{"index": 0, "resolution": [32, 32], "nodes": ["conv", "relu"]}],
        "blocks": [{"index": 0, "end": None, "nodes": ["conv", "relu"], "branches": []}],
        "chains": [{"index": 0, "anchor": "conv", "nodes": ["conv", "relu"]}],
    }
    assert json.loads(json.dumps(result)) == result
