"""NN-Stretch's stage detector: the stages of MobileNetV2 and EfficientNet-B0 are their
papers' (depth, width) tables, ResNet-50's its four stages after the stem; meeting-point
candidates are the stage boundaries; head and tail are not branched."""

from __future__ import annotations

import pytest
from nnstretch_cases import prepared, structure
from onnx import helper
from onnx_builders import LIGHT_DIR, build, weight

from engine.graph.ir import build_graph
from engine.graph.prepare import prepare_model
from engine.graph.structure import detect_structure
from engine.partition.nnstretch.structure import NotBranchable, detect_stages
from engine.zoo.efficientnet import MBCONV_STAGES
from engine.zoo.mobilenet import INVERTED_RESIDUALS


def test_mobilenet_v2_stages_are_the_papers_bottleneck_table():
    s = structure("mobilenet_v2")
    # (t, c, n, s) rows of MobileNetV2's Table 2: depth n, width c; the stem joins stage 0.
    assert [(st.depth, st.width) for st in s.stages] == [
        (n, c) for _, c, n, _ in INVERTED_RESIDUALS
    ]
    assert [st.resolution for st in s.stages] == [
        (112, 112), (56, 56), (28, 28), (14, 14), (14, 14), (7, 7), (7, 7)
    ]  # fmt: skip
    # the resolution detector sees 5 stages: NN-Stretch splits 14x14 and 7x7 at the
    # channel transitions (64 -> 96, 160 -> 320)
    assert len(detect_structure(prepared("mobilenet_v2").graph).stages) == 5
    assert s.resolution_stages == 5


def test_efficientnet_b0_has_seven_stages_with_their_depth_and_width():
    s = structure("efficientnet_b0")
    assert [(st.depth, st.width) for st in s.stages] == [(n, c) for *_, c, n in MBCONV_STAGES]


def test_blocks_and_the_blocks_depth_scaling_may_drop():
    s = structure("mobilenet_v2")
    stage = s.stages[3]  # 4 blocks of 64 channels at 14x14, the first one stride 2
    assert [b.nodes[0] for b in stage.blocks] == ["s4b0_expand", "s4b1_expand", "s4b2_expand",
                                                  "s4b3_expand"]  # fmt: skip
    assert stage.removable == (1, 2, 3)
    assert not stage.blocks[0].keeps_shape and all(b.residual for b in stage.blocks[1:])
    # a transition block at one resolution (64 -> 96 channels) starts a stage
    assert s.stages[4].blocks[0].nodes[0] == "s5b0_expand" and s.stages[4].removable == (1, 2)


def test_meeting_point_candidates_are_the_stage_boundaries():
    s = structure("mobilenet_v2")
    assert s.boundaries == [
        "s1b0_project_bn", "s2b1_add", "s3b2_add", "s4b3_add", "s5b2_add", "s6b2_add",
        "s7b0_project_bn",
    ]  # fmt: skip
    assert s.boundaries[:-1] == [st.input for st in s.body]
    assert len(s.cuts) > 3 * len(s.boundaries)  # any layer could be one before the constraint


def test_head_is_the_stem_stage_and_tail_the_classifier():
    s = structure("mobilenet_v2")
    assert s.head.nodes[0] == "stem" and s.head.output == "s1b0_project_bn"
    assert s.tail == ("last", "last_bn", "last_act", "pool", "flatten", "fc")


def test_resnet50_stages_after_the_stem():
    s = detect_stages(prepare_model(str(LIGHT_DIR / "light_resnet50.onnx")).graph)
    assert [(st.depth, st.width) for st in s.body] == [(3, 256), (4, 512), (6, 1024), (3, 2048)]
    assert [len(st.removable) for st in s.body] == [2, 3, 5, 2]


def test_a_model_without_stages_is_not_branchable():
    mlp = build(
        [helper.make_node("Gemm", ["x", "w"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        [("x", [1, 16])], [("y", [1, 8])], [weight("w", (16, 8))],
    )  # fmt: skip
    with pytest.raises(NotBranchable):
        detect_stages(build_graph(mlp))
