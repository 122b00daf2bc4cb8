"""check_accuracy end to end: verdicts, layer-wise localisation, candidates and the CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import LIGHT_DIR, build, value

from cli.main import main
from engine.accuracy import (
    AccuracyConfig,
    Candidate,
    CandidateError,
    OrtCandidate,
    check_accuracy,
    make_candidate,
    register_candidate,
)
from engine.accuracy import candidates as candidates_module
from engine.accuracy.metrics import compare_tensors
from engine.accuracy.weights import perturb_weight, randomize_fills, weight_fills

SQUEEZENET = LIGHT_DIR / "light_squeezenet.onnx"


def random_weight(name, shape, seed):
    values = np.random.default_rng(seed).normal(0, 0.3, shape).astype(np.float32)
    return numpy_helper.from_array(values, name)


@pytest.fixture
def cnn():
    """conv1 -> relu1 -> conv2 -> relu2 -> pool -> flatten -> fc -> softmax, random weights."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax"),
    ]
    weights = [
        random_weight("w1", (8, 3, 3, 3), 1),
        random_weight("w2", (8, 8, 3, 3), 2),
        random_weight("fc", (10, 8), 3),
    ]
    return build(nodes, [("x", [1, 3, 16, 16])], [("y", [1, 10])], weights)


def test_onnxruntime_candidate_passes_with_the_documented_keys(cnn):
    report = check_accuracy(cnn, "ort")
    result = json.loads(json.dumps(report.to_dict()))  # plain JSON, no NaN or inf
    assert result["verdict"] == "pass" and result["first_divergent_node"] is None
    assert result["reason"].startswith("all 1 outputs within the thresholds")
    assert {"verdict", "reason", "outputs", "first_divergent_node", "layers", "inputs"} <= set(
        result
    )
    assert set(result["outputs"][0]) >= {
        "name", "max_abs", "mean_rel", "max_rel", "cosine", "snr_db", "top1", "top5",
    }  # fmt: skip
    assert result["outputs"][0]["top1"] == 1.0  # (1, 10): classifier-like
    assert [layer["node"] for layer in result["layers"]] == [
        "conv1", "relu1", "conv2", "relu2", "pool", "flatten", "fc", "softmax",
    ]  # fmt: skip
    assert set(result["layers"][0]) >= {"node", "tensor", "max_abs", "snr_db", "cosine"}
    assert result["inputs"]["source"] == "generated" and result["inputs"]["seed"] == 0
    assert result["thresholds"]["snr_db"] == 30.0
    assert result["second_opinion"]["agrees"] is True  # onnx.reference on a small model


def test_fp16_candidate_reports_a_real_but_small_error(cnn):
    report = check_accuracy(cnn, "fp16")
    assert report.verdict == "pass"
    output = report.outputs[0].metrics
    assert 0 < output.max_abs < 1e-2 and 40 < output.snr_db < 120
    assert [k["op_type"] for k in report.candidate["kept_fp32"]] == ["Softmax"]
    assert all(layer.metrics.snr_db < 120 for layer in report.layers)  # every layer in fp16


def test_broken_weight_fails_at_the_layer_that_reads_it(cnn):
    broken = OrtCandidate(perturb_weight(cnn, "w2", factor=1.5), name="broken")
    report = check_accuracy(cnn, broken)
    assert report.verdict == "fail"
    assert report.first_divergent_node == "conv2"
    assert "first divergent layer: 'conv2' (Conv, tensor 'c2'" in report.reason
    passed = {c.layer.node: c.passed for c in report.layers}
    assert passed["conv1"] and passed["relu1"] and not passed["conv2"]


def test_one_perturbed_element_is_located_too(cnn):
    broken = OrtCandidate(perturb_weight(cnn, "w1", factor=-4.0, element=5), name="broken")
    report = check_accuracy(cnn, broken)
    assert report.verdict == "fail" and report.first_divergent_node == "conv1"


def test_broken_light_model_fails_although_its_softmax_hides_it():
    model = onnx.load(SQUEEZENET)
    fills = weight_fills(model)  # its weights are ConstantOfShape fills: scale one fill
    # the weight (input 1, not the bias) of a Conv in the middle of the network
    convs = [n.input[1] for n in model.graph.node if n.op_type == "Conv" and n.input[1] in fills]
    target = convs[len(convs) // 2]
    broken = OrtCandidate(perturb_weight(model, target, factor=1.5), name="broken")
    report = check_accuracy(model, broken)
    reader = next(n for n in model.graph.node if target in n.input)
    assert report.verdict == "fail"
    assert report.reason.startswith("the outputs agree but a layer diverges")
    assert report.outputs[0].passed  # every class ties at 1/1000 either way
    assert (report.first_divergent_node, report.first_divergent.layer.op_type) == (
        reader.name,
        "Conv",
    )
    assert report.first_divergent.layer.tensor == reader.output[0]


def test_fp16_of_the_shipped_light_model_overflows_and_says_where():
    report = check_accuracy(SQUEEZENET, "fp16")
    assert report.verdict == "fail"
    first = report.first_divergent
    assert first.layer.op_type == "Conv"
    assert first.metrics.nonfinite_mismatch > 0 and first.metrics.ref_max_abs > 65504
    assert "NaN/inf values do not match the reference" in report.reason


def test_fp16_of_the_light_model_with_random_weights_passes():
    report = check_accuracy(randomize_fills(onnx.load(SQUEEZENET)), "fp16")
    assert report.verdict == "pass"
    assert 40 < report.outputs[0].metrics.snr_db < 80


def test_other_onnx_file_is_compared_node_by_node(cnn, save):
    path = save(perturb_weight(cnn, "fc", factor=0.5), "optimized.onnx")
    candidate = make_candidate(str(path), cnn)
    assert candidate.describe()["kind"] == "onnx-file"
    report = check_accuracy(cnn, candidate)
    assert report.first_divergent_node == "fc" and report.verdict == "fail"


class OutputsOnly:
    """A compiled build that exposes no intermediate tensor."""

    name = "outputs-only"

    def __init__(self, model):
        self.inner = OrtCandidate(model)

    def tensor_names(self):
        return []

    def run(self, feeds, tensors=()):
        return self.inner.run(feeds)

    def describe(self):
        return {"name": self.name, "kind": "test"}


def test_a_candidate_without_intermediates_gets_a_verdict_and_a_warning(cnn):
    candidate = OutputsOnly(cnn)
    assert isinstance(candidate, Candidate)
    report = check_accuracy(cnn, candidate)
    assert report.verdict == "pass"
    assert [c.layer.node for c in report.layers] == ["softmax"]  # the graph output only
    assert report.warnings == [
        "the candidate 'outputs-only' exposes no intermediate tensor of the model; "
        "no layer-wise localisation"
    ]


def test_registered_and_plugin_candidates(cnn, monkeypatch):
    register_candidate("outputs-only", lambda model, **options: OutputsOnly(model))
    assert check_accuracy(cnn, "outputs-only").candidate["kind"] == "test"
    monkeypatch.setitem(candidates_module.PLUGINS, "npu", "engine.nowhere.candidate:make")
    with pytest.raises(CandidateError, match="candidate 'npu' is not available"):
        make_candidate("npu", cnn)
    with pytest.raises(CandidateError, match="unknown candidate 'int3'") as raised:
        make_candidate("int3", cnn)
    assert "fp16" in raised.value.hint


def test_uploaded_inputs_are_used(cnn, tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, x=np.ones((1, 3, 16, 16), np.float32))
    report = check_accuracy(cnn, "ort", AccuracyConfig(inputs=path))
    assert report.to_dict()["inputs"]["source"] == "npz:x.npz"


def test_progress_goes_forward(cnn):
    seen = []
    check_accuracy(cnn, "ort", progress=lambda fraction, message: seen.append(fraction))
    assert seen == sorted(seen) and seen[0] == 0.0 and seen[-1] == 1.0


def cli(capsys, *argv):
    code = main([*argv, "--cache-dir", "none"])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prints_the_report_as_json(cnn, save, capsys):
    model = str(save(cnn))
    code, out, err = cli(capsys, "accuracy", model, "--candidate", "fp16", "--json")
    assert code == 0 and err == ""
    result = json.loads(out)
    assert result["verdict"] == "pass" and result["candidate"]["kind"] == "fp16"
    assert {"name", "max_abs", "max_rel", "cosine", "snr_db"} <= set(result["outputs"][0])
    code, out, _ = cli(capsys, "accuracy", model, "--candidate", "ort", "--thresholds", "top1=none")
    assert code == 0 and out.startswith("verdict      PASS")


def test_cli_bad_input_exits_2_with_one_line(cnn, save, tmp_path, capsys):
    model = str(save(cnn))
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.ones((1, 3, 8, 8), np.float32))
    code, out, err = cli(capsys, "accuracy", model, "--candidate", "ort", "--inputs", str(bad))
    assert code == 2 and out == ""
    assert err.splitlines()[0] == (
        "error: bad.npz does not fit the model: input 'x' has shape 1x3x8x8, expected 1x3x16x16"
    )
    code, _, err = cli(capsys, "accuracy", model, "--candidate", "tvm-int3")
    assert code == 2
    assert err.startswith("error: invalid options: accuracy.candidate: 'tvm-int3' is not one of")


def test_an_attention_mask_of_float32s_lowest_saturates_in_fp16_and_is_no_divergence(save):
    # what exporters write for "minus infinity": Where(mask, scores, -3.4e38) -> Softmax
    lowest = np.array(np.finfo(np.float32).min, np.float32)
    nodes = [
        helper.make_node("Where", ["mask", "x", "lowest"], ["masked"], name="where"),
        helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1),
    ]
    model = build(
        nodes,
        [("x", [2, 8]), value("mask", [2, 8], TensorProto.BOOL)],
        [("y", [2, 8])],
        [numpy_helper.from_array(lowest, "lowest")],
    )
    report = check_accuracy(model, "fp16")
    assert report.verdict == "pass", report.reason
    (where,) = [c for c in report.layers if c.layer.node == "where"]
    assert where.metrics.saturated > 0 and where.passed
    # an overflow that arithmetic produces is no stand-in for infinity: it stays an error
    metrics = compare_tensors(np.array([1e5, 1.0]), np.array([np.inf, 1.0]), saturation=65504.0)
    assert metrics.saturated == 0 and metrics.nonfinite_mismatch == 1
