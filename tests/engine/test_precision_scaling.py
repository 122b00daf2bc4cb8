"""GDPNPU power-of-two precision scaling: the thesis's numbers and an overflowing model."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx_builders import LIGHT_DIR, build, overflow_model

from engine.accuracy.check import AccuracyConfig, check_accuracy
from engine.accuracy.fp16 import FP16_MAX
from engine.accuracy.fp16_variants import (
    calibration_values,
    compare_fp16_variants,
    fp16_scaled_candidate,
    plain_fp16_candidate,
    stored_values,
)
from engine.accuracy.inputs import generate_inputs
from engine.accuracy.precision_scaling import (
    LINEAR,
    MEMORY,
    NONLINEAR,
    SELECTION,
    plan_scaling,
    rupw2,
    scale_add,
    scale_conv,
    scale_matmul,
    scale_mul,
    scale_reduce,
    sensitivity,
)


def test_rupw2_matches_the_thesis():
    assert rupw2(3) == 4 and rupw2(11) == 16
    assert rupw2(4) == 4 and rupw2(0.3) == 0.5 and rupw2(1) == 1
    with pytest.raises(ValueError):
        rupw2(0)


def test_formulas_5_1_to_5_6():
    assert scale_add(3) == 1 / 8  # 1/(2 rupw2(3))
    assert scale_reduce(11, 100) == 1 / (100 * 16)  # 1/(K rupw2(m))
    assert scale_mul(3) == 1 / 16  # rupw2(9) = 16
    assert scale_conv(3, 9) == scale_matmul(3, 9) == 1 / (9 * 16)


def test_sensitivity_classes_of_table_5_2():
    assert sensitivity("Transpose") == MEMORY and sensitivity("MaxPool") == SELECTION
    assert sensitivity("MatMul") == LINEAR and sensitivity("ReduceSum") == LINEAR
    assert sensitivity("Sqrt") == NONLINEAR and sensitivity("Softmax") == NONLINEAR
    assert sensitivity("SomeCustomOp") == NONLINEAR  # unknown: restored before it


def _reduce_model(k=4096):
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0)]
    return build(nodes, [("x", [1, k])], [("s", [1])], opset=11)


def test_reduce_sum_over_k_elements_uses_formula_5_3():
    model = _reduce_model()
    feeds = {"x": np.full((1, 4096), 20.0, np.float32)}  # sum 81920 > 65504
    plan = plan_scaling(model, calibration_values(model, feeds))
    (scaled,) = [f for f in plan.factors if f.kind == "scale"]
    assert scaled.node == "sum" and scaled.formula.startswith("5-3")
    assert scaled.factor == 1 / (4096 * rupw2(20))  # m = 20
    restore = [f for f in plan.factors if f.kind == "restore"]
    assert len(restore) == 1 and restore[0].factor == 4096 * 32  # one multiply


def test_scaling_brings_reduce_sum_back_in_range():
    model = _reduce_model()
    feeds = {"x": np.full((1, 4096), 20.0, np.float32)}
    plain = plain_fp16_candidate(model)
    assert np.isinf(stored_values(plain, feeds, ["s"])["s"]).all()
    got = fp16_scaled_candidate(model, calibration=feeds).run(feeds)["s"]
    np.testing.assert_allclose(got, [81920.0], rtol=1e-3)


def test_no_scaling_before_a_non_linear_op_but_before_sqrt():
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Exp", ["s"], ["e"], name="exp"),
        helper.make_node("ReduceSum", ["x"], ["t"], name="sum2", keepdims=0),
        helper.make_node("Sqrt", ["t"], ["r"], name="sqrt"),
    ]
    model = build(nodes, [("x", [1, 4096])], [("e", [1]), ("r", [1])], opset=11)
    feeds = {"x": np.full((1, 4096), 20.0, np.float32)}
    plan = plan_scaling(model, calibration_values(model, feeds))
    kinds = {f.node: f.kind for f in plan.factors if f.node in ("sum", "sum2")}
    assert kinds == {"sum": "skipped", "sum2": "scale"}
    # sqrt(S t) = sqrt(S) sqrt(t): the output carries sqrt of an even power of two
    candidate = fp16_scaled_candidate(model, calibration=feeds)
    np.testing.assert_allclose(candidate.run(feeds)["r"], [np.sqrt(81920.0)], rtol=1e-3)


def test_overflowing_model_fails_plain_and_passes_scaled():
    model = overflow_model()
    inputs = generate_inputs(model, seed=0)
    config = AccuracyConfig(layers=True, second_opinion="never")
    plain = check_accuracy(model, plain_fp16_candidate(model), config)
    assert plain.verdict == "fail"
    # onnxruntime's CPU runs the fp16 MatMul chain in fp32 (see fp16_variants), so the
    # inf shows in the stored intermediate the layer check exposes
    assert plain.first_divergent.metrics.nonfinite_mismatch > 0
    scaled = fp16_scaled_candidate(model, calibration=inputs.feeds)
    report = check_accuracy(model, scaled, config)
    assert report.verdict == "pass", report.reason
    factors = report.candidate["scaling"]["factors"]
    assert any(f["kind"] == "scale" and f["formula"].startswith("5-6") for f in factors)
    assert sum(f["kind"] == "restore" for f in factors) == 1  # one restore multiply


def test_no_stored_intermediate_above_fp16_max_on_worst_case_inputs():
    model = overflow_model()
    worst = np.sign(generate_inputs(model, seed=1).feeds["x"]) * 4.0  # 4 sigma everywhere
    feeds = {"x": worst.astype(np.float32)}
    names = [o for n in model.graph.node for o in n.output]
    plain = stored_values(plain_fp16_candidate(model), feeds, names)
    assert any(not np.isfinite(plain[t]).all() for t in names)
    scaled = fp16_scaled_candidate(model, calibration=feeds)
    stored = stored_values(scaled, feeds, names)
    assert set(stored) == set(names)
    for value in stored.values():
        assert value.dtype == np.float16
        wide = value.astype(np.float32)
        assert np.isfinite(wide).all() and np.abs(wide).max() < FP16_MAX


def test_variants_report_overflows_avoided():
    model = overflow_model()
    inputs = generate_inputs(model, seed=0)
    result = compare_fp16_variants(model, inputs.feeds, AccuracyConfig(), source="generated")
    rows = result["variants"]
    assert rows["fp16-plain"]["verdict"] == "fail" and rows["fp16-scaled"]["verdict"] == "pass"
    assert rows["fp16-plain"]["overflowed_tensors"] >= 2
    assert rows["fp16-scaled"]["overflowed_tensors"] == 0
    assert result["overflows_avoided"] == rows["fp16-plain"]["overflowed_tensors"]


def test_bundled_squeezenet_overflows_plain_fp16_and_scaling_recovers_it():
    """A real export: random-weight SqueezeNet reaches 5e5 inside, beyond fp16."""
    from engine.graph.loader import load_model

    model = load_model(LIGHT_DIR / "light_squeezenet.onnx")
    inputs = generate_inputs(model, seed=0)
    config = AccuracyConfig(second_opinion="never")
    assert check_accuracy(model, plain_fp16_candidate(model), config).verdict == "fail"
    candidate = fp16_scaled_candidate(model, calibration=inputs.feeds)
    report = check_accuracy(model, candidate, config)
    assert report.verdict == "pass", report.reason
    assert candidate.plan.to_dict()["scaled_nodes"] >= 1


def test_conv_bias_follows_the_scale():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 200, (4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 50, (4,)).astype(np.float32), "b")
    w2 = numpy_helper.from_array(rng.normal(0, 200, (2, 4, 3, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["y"], name="conv2"),
    ]
    model = build(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 2, 2, 2])], [w, b, w2])
    inputs = generate_inputs(model, seed=0)
    candidate = fp16_scaled_candidate(model, calibration=inputs.feeds)
    report = check_accuracy(model, candidate, AccuracyConfig(second_opinion="never"))
    assert report.verdict == "pass", report.reason
    assert any(f.formula.startswith("5-5") for f in candidate.plan.factors)


def test_batch_norm_carries_the_scale_of_the_conv_before_it():
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.normal(0, 300, (4, 3, 3, 3)),
        "gamma": rng.uniform(0.5, 2, 4),
        "beta": rng.normal(0, 5, 4),
        "mean": rng.normal(0, 100, 4),
        "var": rng.uniform(1e3, 4e4, 4),  # fp16 holds the variances
    }
    weights = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in tensors.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn"
        ),  # fmt: skip
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    model = build(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 4, 8, 8])], weights)
    feeds = {"x": (np.abs(generate_inputs(model, seed=0).feeds["x"]) * 20).astype(np.float32)}
    candidate = fp16_scaled_candidate(model, calibration=feeds)
    assert [f.kind for f in candidate.plan.factors if f.node == "conv"] == ["scale"]
    expected = calibration_values(model, feeds)["y"]
    snr_db = 10 * np.log10(
        np.sum(expected**2) / np.sum((candidate.run(feeds)["y"] - expected) ** 2)
    )
    assert snr_db > 30  # the accuracy stage's default limit


def test_variadic_sum_is_a_reduce_sum_over_its_inputs():
    nodes = [helper.make_node("Sum", ["a", "b", "c"], ["y"], name="sum")]
    model = build(nodes, [("a", [2]), ("b", [2]), ("c", [2])], [("y", [2])])
    feeds = {k: np.full(2, 30000.0, np.float32) for k in "abc"}
    candidate = fp16_scaled_candidate(model, calibration=feeds)
    (scaled,) = [f for f in candidate.plan.factors if f.kind == "scale"]
    assert scaled.formula == "5-3: 1/(K rupw2(m)), K=3" and scaled.factor == 1 / (3 * 32768)
    np.testing.assert_allclose(candidate.run(feeds)["y"], [90000.0] * 2, rtol=1e-3)


def test_shape_arithmetic_next_to_a_scaled_tensor_is_left_alone():
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=1),
        helper.make_node("Shape", ["s"], ["shape"], name="shape"),
        helper.make_node("Add", ["shape", "one"], ["shape1"], name="add_int"),
        helper.make_node("Reshape", ["s", "shape"], ["y"], name="reshape"),
    ]
    one = numpy_helper.from_array(np.ones(2, np.int64), "one")
    model = build(nodes, [("x", [1, 4096])], [("y", [1, 1])], [one], opset=11)
    feeds = {"x": np.full((1, 4096), 20.0, np.float32)}
    candidate = fp16_scaled_candidate(model, calibration=feeds)
    assert [f.kind for f in candidate.plan.factors] == ["scale", "restore"]
    np.testing.assert_allclose(candidate.run(feeds)["y"], [[81920.0]], rtol=1e-3)


def test_the_stage_calibrates_on_the_uploaded_inputs(tmp_path):
    from engine.accuracy.options import AccuracyOptions
    from engine.accuracy.stage import run
    from engine.contract import StageInputs
    from engine.graph.prepare import prepare_model

    model = overflow_model()
    x = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=x)
    files = {"inputs": str(tmp_path / "calib.npz")}
    report = run(
        prepare_model(model),
        None,
        AccuracyOptions(candidate="fp16-scaled"),
        lambda f, m: None,
        StageInputs(files=files),
    ).to_dict()
    assert report["verdict"] == "pass"
    assert report["candidate"]["scaling"]["calibration"] == "inputs from npz:calib.npz"
    assert report["fp16_variants"]["measured"].endswith("inputs from npz:calib.npz")
