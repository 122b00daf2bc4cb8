"""Profile figures: pure dict -> figure functions, checked without a browser."""

from __future__ import annotations

import json

import pytest

from frontend.figures.profile import (
    op_latency_bars,
    profile_figures,
    roofline,
    sweep_chart,
    unit_comparison,
)


def measured_profile(n: int = 30) -> dict:
    ops = [
        {"name": f"conv{i}", "op_type": "Conv" if i % 3 else "Relu", "latency_us": 100.0 * (i + 1),
         "flops": 2_000_000 * (i + 1), "bytes": 40_000}
        for i in range(n)
    ]  # fmt: skip
    ops.append({"name": "w", "op_type": "ConstantOfShape", "latency_us": 0.0, "flops": 0,
                "bytes": 400})  # fmt: skip
    return {
        "measured": True,
        "runs": 42,
        "ops": ops,
        "environment": {"machine": {"cpu_model": "AMD EPYC"}},
    }


def predicted_profile() -> dict:
    ops = [
        {"name": "conv", "op_type": "Conv", "flops": 10**8, "bytes": 10**6,
         "latency_us": {"cpu": 1000.0, "gpu": 400.0}},
        {"name": "softmax", "op_type": "Softmax", "flops": 5000, "bytes": 8000,
         "latency_us": {"cpu": 2.0, "gpu": None}},
    ]  # fmt: skip
    units = [
        {"name": "cpu", "kind": "cpu", "latency_ms": 1.002, "complete": True, "unsupported": [],
         "unknown": [], "not_costed": [], "peak_gflops": 150.0, "mem_bw_gbps": 30.0},
        {"name": "gpu", "kind": "gpu", "latency_ms": 0.4, "complete": False,
         "unsupported": ["softmax"], "unknown": [], "not_costed": [], "peak_gflops": 256.0,
         "mem_bw_gbps": 29.9},
        {"name": "dsa", "kind": "dsa", "latency_ms": None, "complete": False, "unsupported": [],
         "unknown": ["conv", "softmax"], "not_costed": [], "peak_gflops": None,
         "mem_bw_gbps": None},
    ]  # fmt: skip
    return {
        "measured": False,
        "target": "phone",
        "model": "roofline+efficiency v1",
        "best_unit": "cpu",
        "units": units,
        "ops": ops,
    }


def test_top_ops_slowest_first_and_labelled_measured():
    figure = op_latency_bars(measured_profile(), top=5)
    title = figure["layout"]["title"]["text"]
    assert title == "Slowest 5 ops (measured on AMD EPYC, median of 42 runs)"
    shown = figure["layout"]["yaxis"]["categoryarray"]
    assert shown == ["conv25", "conv26", "conv27", "conv28", "conv29"]  # bottom to top
    bars = {t["name"]: t for t in figure["data"]}
    assert set(bars) == {"Conv", "Relu"}
    assert bars["Relu"]["y"] == ["conv27"] and bars["Relu"]["x"] == [2.8]  # ms
    json.dumps(figure)  # plain JSON for the page


def test_top_ops_of_a_predicted_profile_name_the_model_and_unit():
    figure = op_latency_bars(predicted_profile(), unit="gpu")
    assert figure["layout"]["title"]["text"] == (
        "Slowest 1 ops (predicted for phone/gpu by roofline+efficiency v1)"
    )


def test_roofline_points_are_intensity_and_achieved_throughput():
    figure = roofline(measured_profile(3), roofs={"peak_gflops": 100.0, "mem_bw_gbps": 10.0})
    conv = next(t for t in figure["data"] if t["name"] == "Conv")
    # conv1: 4 MFLOP over 40 kB = 100 FLOP/B; 4e6 FLOP in 200 us = 20 GFLOPS
    assert conv["x"][0] == pytest.approx(100.0) and conv["y"][0] == pytest.approx(20.0)
    roof = figure["data"][-1]
    assert roof["mode"] == "lines" and roof["x"][1] == pytest.approx(10.0)  # ridge point
    assert roof["y"][1:] == [100.0, 100.0]
    assert "measured" in figure["layout"]["title"]["text"]


def test_roofline_of_a_predicted_profile_uses_the_unit_roofs():
    figure = roofline(predicted_profile())
    assert figure["data"][-1]["name"] == "roof: 150 GFLOPS, 30.0 GB/s"
    assert figure["layout"]["title"]["text"].startswith("Roofline (predicted for phone/cpu")


def test_roofline_without_roofs_says_so():
    figure = roofline(measured_profile(3))
    assert all(t["mode"] == "markers" for t in figure["data"])
    assert figure["layout"]["title"]["text"].endswith(", roofs unknown)")


def test_sweep_chart_batch_with_throughput_and_failed_points():
    sweep = {
        "kind": "batch",
        "environment": {"machine": {"cpu_model": "AMD EPYC"}},
        "points": [
            {"value": 1, "status": "ok", "latency_ms": {"median": 10.0, "p90": 12.0},
             "throughput_per_s": 100.0},
            {"value": 4, "status": "ok", "latency_ms": {"median": 20.0, "p90": 21.0},
             "throughput_per_s": 200.0},
            {"value": 8, "status": "failed", "latency_ms": None, "throughput_per_s": None},
        ],
    }  # fmt: skip
    figure = sweep_chart(sweep)
    latency, throughput = figure["data"]
    assert latency["x"] == [1, 4] and latency["y"] == [10.0, 20.0]
    assert latency["error_y"]["array"] == [2.0, 1.0]
    assert throughput["y"] == [100.0, 200.0] and throughput["yaxis"] == "y2"
    assert figure["layout"]["title"]["text"] == "Latency by batch (measured on AMD EPYC)"
    assert figure["layout"]["annotations"][0]["text"] == "failed: batch 8"


def test_unit_comparison_marks_incomplete_units():
    figure = unit_comparison(predicted_profile())
    (bars,) = figure["data"]
    assert bars["x"] == ["cpu", "gpu"]  # dsa has no prediction
    assert bars["text"] == ["", "1 ops missing"]
    assert bars["marker"]["pattern"]["shape"] == ["", "/"]
    assert "predicted for phone" in figure["layout"]["title"]["text"]


def test_profile_figures_bundle():
    assert set(profile_figures(measured_profile())) == {"top_ops", "roofline"}
    assert set(profile_figures(predicted_profile())) == {"top_ops", "roofline", "units"}


def test_roofline_draws_measured_roofs_as_the_engine_reports_them():
    from frontend.figures.profile import roofline

    profile = {
        "measured": True,
        "environment": {"machine": {"cpu_model": "x"}},
        "runs": 3,
        "ops": [
            {
                "name": "c",
                "op_type": "Conv",
                "status": "measured",
                "latency_us": 10.0,
                "flops": 2e6,
                "bytes": 1e5,
            }
        ],
    }
    figure = roofline(profile, {"peak_gflops_fp32": 190.0, "mem_bw_gbps": 34.0})
    assert "roofs unknown" not in figure["layout"]["title"]["text"]
    assert any(trace["name"].startswith("roof:") for trace in figure["data"])
