"""The zoo: every model builds, passes the checker, runs in onnxruntime and is fully costed;
MobileNetV2, EfficientNet-B0 and VGG-16 match their published figures."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx_builders import analysis_of, zoo_model

from engine.zoo import ZOO, build


class _Analyses:
    def __getitem__(self, name):
        return analysis_of(name)


@pytest.fixture
def zoo_analyses():
    return _Analyses()


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    # Loading is what is checked; folding VGG-16's 553 MB of filled weights is not.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _feeds(session: ort.InferenceSession) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in session.get_inputs():
        if value.type == "tensor(int64)":
            feeds[value.name] = rng.integers(0, 100, value.shape, dtype=np.int64)
        else:
            feeds[value.name] = rng.standard_normal(value.shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_is_valid_onnx_that_onnxruntime_loads(name):
    model = zoo_model(name)
    assert model.ir_version <= 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    onnx.checker.check_model(model, full_check=True)
    session = _session(model)
    if name == "vgg16":
        return  # running it would materialise 553 MB of weights
    outputs = session.run(None, _feeds(session))
    declared = [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output]
    assert [list(o.shape) for o in outputs] == declared
    assert all(np.isfinite(o).all() for o in outputs)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_is_fully_costed(zoo_analyses, name):
    analysis = zoo_analyses[name]
    assert analysis.not_costed == []
    assert analysis.macs > 0 and analysis.params > 0
    assert all(n.cost is not None for n in analysis.node_list)


def test_weights_are_seeded():
    assert build("lstm").SerializeToString() == build("lstm").SerializeToString()
    assert build("lstm", seed=1).SerializeToString() != build("lstm").SerializeToString()


def test_unknown_name_lists_the_zoo():
    with pytest.raises(KeyError, match="no zoo model 'resnet9000' \\(known: bert_small, lstm"):
        build("resnet9000")


def test_mobilenet_v2_is_300_m_macs_and_3_5_m_params(zoo_analyses):
    analysis = zoo_analyses["mobilenet_v2"]
    assert analysis.macs == 300_774_272
    assert analysis.macs == pytest.approx(300e6, rel=0.01)
    # torchvision's 3,504,872 + 34,112 BatchNormalization running statistics + ReLU6's two
    # Clip bounds, which are float initializers too
    assert analysis.params == 3_504_872 + 34_112 + 2
    assert analysis.ops["Conv"] == 52


def test_efficientnet_b0_is_0_39_g_macs_and_5_3_m_params(zoo_analyses):
    analysis = zoo_analyses["efficientnet_b0"]
    assert analysis.macs == pytest.approx(0.39e9, rel=0.02)
    # torchvision's 5,288,548 + 42,016 BatchNormalization running statistics
    assert analysis.params == 5_288_548 + 42_016
    assert analysis.ops["GlobalAveragePool"] == 17  # one per SE block, one in the head


def test_vgg16_fc_layers_hold_89_4_percent_of_params_and_under_1_percent_of_macs(zoo_analyses):
    analysis = zoo_analyses["vgg16"]
    assert analysis.params == 138_357_544  # torchvision's VGG-16
    assert analysis.macs == pytest.approx(15.47e9, rel=0.005)
    fc = [n for n in analysis.node_list if n.op_type == "Gemm"]
    assert [n.name for n in fc] == ["fc6", "fc7", "fc8"]
    fc_params = sum(n.cost.params for n in fc)
    assert fc_params == 123_642_856
    assert fc_params / analysis.params == pytest.approx(0.894, abs=0.001)
    assert sum(n.cost.macs for n in fc) / analysis.macs < 0.01


def test_lstm_macs_cover_every_step_and_direction(zoo_analyses):
    analysis = zoo_analyses["lstm"]
    lstm1, lstm2 = (n for n in analysis.node_list if n.op_type == "LSTM")
    assert lstm1.cost.macs == 32 * 2 * 4 * 128 * (64 + 128)  # steps*dirs*4H*(input+H)
    assert lstm2.cost.macs == 32 * 1 * 4 * 128 * (256 + 128)


def test_bert_attention_uses_separate_qkv_matmuls_on_one_input(zoo_analyses):
    graph = zoo_analyses["bert_small"].graph
    readers = graph.tensors["embed_ln"].consumers
    assert sorted(readers)[:3] == [
        "layer0_attn_k_matmul",
        "layer0_attn_q_matmul",
        "layer0_attn_v_matmul",
    ]
    ops = zoo_analyses["bert_small"].ops
    assert ops["Softmax"] == 4 and ops["LayerNormalization"] == 9 and ops["Erf"] == 4
