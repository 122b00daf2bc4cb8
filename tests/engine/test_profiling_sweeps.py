"""Whole-model latency, its repetition rule, and sweeps over threads and batch size."""

from __future__ import annotations

import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.errors import Cancelled
from engine.profiling.latency import LatencyConfig, measure_latency, window_filled
from engine.profiling.sweeps import sweep_batch, sweep_threads, with_batch

QUICK = LatencyConfig(window_s=0.1, min_runs=3, warmup_runs=1)


def matmul_model(batch="N"):
    return build(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [("x", [batch, 256])],
        [("y", [batch, 256])],
        [weight("w", (256, 256))],
    )


def reshape_model():
    """Reshapes to a fixed [1, 64]: only batch 1 runs."""
    shape = helper.make_tensor("shape", 7, [2], [1, 64])
    return build(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        [("x", [1, 4, 16])],
        [("y", [1, 64])],
        [shape],
    )


def test_dnntune_rule_a_5ms_layer_fills_a_50ms_window_in_10_runs():
    assert not window_filled(runs=9, elapsed_s=9 * 0.005, window_s=0.05, min_runs=1)
    assert window_filled(runs=10, elapsed_s=10 * 0.005, window_s=0.05, min_runs=1)
    assert not window_filled(runs=2, elapsed_s=1.0, window_s=0.05, min_runs=3)  # too few runs


def test_latency_from_a_model_proto_or_bytes():
    for source in (matmul_model(), matmul_model().SerializeToString()):
        result = measure_latency(source, QUICK)
        assert result.measured and result.runs >= 3 and result.latency_ms["median"] > 0
        assert result.environment["graph_optimization"] == "all"
        assert result.inputs == [{"name": "x", "shape": [1, 256], "dtype": "float32"}]


def test_thread_sweep_measures_each_count():
    sweep = sweep_threads(matmul_model(), threads=[1, 2], config=QUICK)
    assert sweep.kind == "threads" and sweep.measured
    assert [(p.value, p.status) for p in sweep.points] == [(1, "ok"), (2, "ok")]
    assert all(p.latency_ms["median"] > 0 and p.runs >= 3 for p in sweep.points)


def test_batch_sweep_reports_throughput():
    sweep = sweep_batch(matmul_model(batch=1), batches=[1, 4], config=QUICK)
    one, four = sweep.points
    assert (one.status, four.status) == ("ok", "ok")
    assert four.throughput_per_s == pytest.approx(4e3 / four.latency_ms["median"])


def test_a_failing_batch_is_recorded_and_the_sweep_goes_on():
    sweep = sweep_batch(reshape_model(), batches=[1, 2, 4], config=QUICK)
    assert [p.status for p in sweep.points] == ["ok", "failed", "failed"]
    assert "onnxruntime" in sweep.points[1].error
    assert sweep.to_dict()["points"][2]["latency_ms"] is None


def test_with_batch_rewrites_inputs_and_outputs_only():
    model = with_batch(matmul_model(batch=1), 8)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 8
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_value == 8
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_value == 256


def test_cancelling_a_sweep_propagates():
    def cancel(fraction, message):
        if "threads = 2" in message:
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        sweep_threads(matmul_model(), threads=[1, 2, 4], config=QUICK, progress=cancel)
