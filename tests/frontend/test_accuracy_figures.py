"""Accuracy figures from report dicts written inline (the shape of AccuracyReport.to_dict())."""

from __future__ import annotations

import json

import pytest

from frontend.figures.accuracy import (
    EXACT_FLOOR,
    FAIL_COLOR,
    PASS_COLOR,
    error_by_layer,
    error_histogram,
    layer_errors_by_node,
    metric_table,
    verdict_card,
)


def layer(node, max_abs, snr_db, passed=True, op_type="Conv", tensor=None):
    return {
        "node": node,
        "op_type": op_type,
        "tensor": tensor or f"{node}_out",
        "max_abs": max_abs,
        "mean_rel": 0.0,
        "snr_db": snr_db,
        "cosine": 1.0,
        "passed": passed,
    }


@pytest.fixture
def report():
    return {
        "verdict": "fail",
        "reason": "output 'prob': snr_db 6.02 < 30; first divergent layer: 'conv2' (Conv, ...)",
        "outputs": [
            {
                "name": "prob",
                "max_abs": 0.5,
                "mean_abs": 0.1,
                "mean_rel": 0.25,
                "max_rel": 0.5,
                "cosine": 0.9993,
                "snr_db": 6.02,
                "top1": 1.0,
                "top5": 0.8,
                "passed": False,
                "reasons": ["snr_db 6.02 < 30"],
            }
        ],
        "first_divergent_node": "conv2",
        "first_divergent": {"node": "conv2", "op_type": "Conv", "reasons": ["snr_db 6 < 30"]},
        "layers": [
            layer("conv1", 0.0, 300.0),
            layer("relu1", 1e-7, 130.0, op_type="Relu"),
            layer("conv2", 0.5, 6.0, passed=False),
            layer("conv2", 0.25, 9.0, passed=False, tensor="conv2_aux"),
        ],
        "histograms": [
            {"output": "prob", "edges": [1e-4, 1e-3, 1e-2], "counts": [3, 7], "zeros": 2}
        ],
        "thresholds": {"max_abs": None, "mean_rel": 0.05, "snr_db": 30.0, "rel_floor": 0.001},
        "candidate": {"name": "fp16", "kind": "fp16", "kept_fp32": [{"op_type": "Softmax"}]},
        "warnings": [],
    }


def test_verdict_card(report):
    card = verdict_card(report)
    assert card["verdict"] == "fail" and card["color"] == FAIL_COLOR
    assert (card["first_divergent_node"], card["first_divergent_op"]) == ("conv2", "Conv")
    assert card["kept_fp32"] == 1 and card["candidate"] == "fp16"
    assert verdict_card({"verdict": "pass", "candidate": {"name": "ort"}})["kept_fp32"] is None


def test_metric_table_formats_each_metric(report):
    table = metric_table(report)
    assert table["columns"][0] == "output" and "SNR (dB)" in table["columns"]
    (row,) = table["rows"]
    assert row["cells"] == ["prob", "0.5", "0.25", "0.5", "0.999300", "6.0", "100%", "80%"]
    assert row["passed"] is False and row["reasons"] == ["snr_db 6.02 < 30"]
    assert table["thresholds"] == ["mean_rel ≤ 0.05", "snr_db ≥ 30"]


def test_error_by_layer_is_log_scaled_and_marks_the_first_divergent(report):
    figure = error_by_layer(report)
    json.dumps(figure)
    (trace,) = figure["data"]
    assert figure["layout"]["yaxis"]["type"] == "log"
    assert trace["y"] == [EXACT_FLOOR, 1e-7, 0.5, 0.25]  # an exact layer sits at the floor
    assert trace["marker"]["color"] == [PASS_COLOR, PASS_COLOR, FAIL_COLOR, FAIL_COLOR]
    assert trace["customdata"][2][:3] == ["conv2", "Conv", "conv2_out"]
    assert figure["layout"]["shapes"][0]["x0"] == 2
    assert figure["layout"]["annotations"][0]["text"] == "first divergent: conv2"


def test_error_by_layer_without_layers_is_empty():
    figure = error_by_layer({"layers": [], "first_divergent_node": None})
    assert figure["data"][0]["x"] == [] and figure["layout"]["shapes"] == []


def test_error_histogram_uses_geometric_bin_centres(report):
    figure = error_histogram(report)
    (trace,) = figure["data"]
    assert trace["x"] == pytest.approx([10**-3.5, 10**-2.5])
    assert trace["y"] == [3, 7]
    assert figure["layout"]["xaxis"]["type"] == "log"
    assert "2 elements exact" in figure["layout"]["title"]["text"]
    missing = error_histogram(report, output="missing")
    assert missing["data"] == [] and missing["empty"].startswith("No error histogram")


def test_an_empty_histogram_says_why_instead_of_drawing_an_empty_frame():
    nan_only = {"histograms": [{"output": "y", "edges": [], "counts": [], "zeros": 0}]}
    assert "no element of 'y' has a finite error" in error_histogram(nan_only)["empty"]
    exact = {"histograms": [{"output": "y", "edges": [1e-9, 1e-8], "counts": [0], "zeros": 9}]}
    assert "every element of 'y' matches exactly (9)" in error_histogram(exact)["empty"]


def test_layer_errors_by_node_keeps_the_worst_tensor(report):
    by_node = layer_errors_by_node(report)
    assert by_node["conv2"] == {"max_abs": 0.5, "snr_db": 6.0, "passed": False}
    assert by_node["conv1"]["passed"] is True
