"""Figures of the compile stage: pure functions from the compile result's JSON."""

from __future__ import annotations

from frontend.figures.kernels import fusion_stages, kernel_table, kernel_times


def _kernel(i, time_us, intensity="compute", share=None):
    return {
        "id": f"s0k{i}",
        "func": f"fused_{i}",
        "nodes": [f"n{i}", f"m{i}"],
        "op_types": ["Conv", "Relu"],
        "souffle_class": "one-relies-on-many",
        "intensity": intensity,
        "time_us": time_us,
        "share": share,
        "global_bytes": 2_000_000,
        "schedule": "tiled",
    }


RESULT = {
    "kernels": [
        _kernel(0, 500.0, share=0.5),
        _kernel(1, 1500.0, "memory", share=0.4),
        _kernel(2, None),
        _kernel(3, 100.0, share=0.1),
    ],
    "fusion": {
        "stages": [
            {"name": "unfused", "kernels": 193, "traffic_bytes": 530_000_000, "accepted": True},
            {"name": "fuseops", "kernels": 90, "traffic_bytes": 320_000_000, "accepted": True},
            {"name": "horizontal", "kernels": 90, "traffic_bytes": 320_000_000, "accepted": False},
            {"name": "sum-to-add", "kernels": 58, "traffic_bytes": 232_000_000, "accepted": True},
        ]
    },
}


def test_kernel_times_sorts_slowest_first_and_splits_by_intensity():
    figure = kernel_times(RESULT)
    compute, memory = figure["data"]
    assert compute["name"] == "compute-intensive" and memory["name"] == "memory-intensive"
    assert compute["x"] == ["s0k0", "s0k3"] and compute["y"] == [0.5, 0.1]
    assert memory["x"] == ["s0k1"] and memory["y"] == [1.5]
    assert figure["layout"]["xaxis"]["categoryarray"] == ["s0k1", "s0k0", "s0k3"]
    assert "measured" in figure["layout"]["title"]["text"]


def test_kernel_times_says_how_many_kernels_it_leaves_out():
    figure = kernel_times(RESULT, top=2)
    assert figure["layout"]["xaxis"]["categoryarray"] == ["s0k1", "s0k0"]
    assert "1 more not shown" in figure["layout"]["title"]["text"]


def test_fusion_stages_shows_counts_traffic_and_rejected_rules():
    bars, line = fusion_stages(RESULT)["data"]
    assert bars["x"] == ["unfused", "fuseops", "horizontal (rejected)", "sum-to-add"]
    assert bars["y"] == [193, 90, 90, 58]
    assert line["y"] == [530.0, 320.0, 320.0, 232.0] and line["yaxis"] == "y2"


def test_kernel_table_rows():
    rows = kernel_table(RESULT)
    assert rows[1] == {
        "kernel": "s0k1",
        "function": "fused_1",
        "nodes": "n1, m1",
        "ops": "Conv, Relu",
        "class": "one-relies-on-many",
        "intensity": "memory",
        "time_ms": 1.5,
        "share_pct": 40.0,
        "global_mb": 2.0,
        "schedule": "tiled",
    }
    assert rows[2]["time_ms"] is None and rows[2]["share_pct"] is None


def test_empty_result_gives_empty_figures():
    nothing = kernel_times({"backend": "onnxruntime", "kernels": []})
    assert nothing["data"] == [] and "runs on onnxruntime alone" in nothing["empty"]
    untimed = kernel_times({"backend": "tvm", "kernels": [{"id": "k0", "time_us": None}]})
    assert "not timed" in untimed["empty"]
    assert fusion_stages({})["data"][0]["x"] == []
    assert kernel_table({}) == []


def test_kernels_vs_onnxruntime_groups_both_measurements():
    from frontend.figures.kernels import kernels_vs_onnxruntime

    profile = {
        "kernels": [
            {"id": "s0k0", "func": "f0", "nodes": ["a", "b"], "median_us": 500.0,
             "onnxruntime_us": 700.0, "spread_pct": 3.0},
            {"id": "s0k1", "func": "f1", "nodes": ["c"], "median_us": 900.0,
             "onnxruntime_us": None, "spread_pct": 1.0},
            {"id": "s0k2", "func": "f2", "nodes": ["d"], "median_us": None},
        ]
    }  # fmt: skip
    figure = kernels_vs_onnxruntime(profile)
    tvm, ort = figure["data"]
    assert tvm["x"] == ["s0k1", "s0k0"] and tvm["y"] == [0.9, 0.5]
    assert ort["y"] == [0.0, 0.7]
    assert "measured" in figure["layout"]["title"]["text"]
