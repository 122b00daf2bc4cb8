"""The compare page's and the history's figures, as Plotly dicts."""

from __future__ import annotations

from engine.report.compare import RunReports, compare_runs
from frontend.figures.compare import history_lines, memory_overlay, ops_bars, schedule_bars


def comparison():
    def reports(conv_us, busy, live):
        return {
            "profile": {
                "measured": True,
                "unit": "cpu",
                "latency_ms": 1.0,
                "ops": [{"name": "conv", "op_type": "Conv", "latency_us": conv_us}],
            },
            "partition": {
                "best": "heft",
                "results": {"heft": {"makespan_ms": 1.5, "unit_busy_us": busy, "placement": {}}},
            },
            "memory": {"best": "g", "planners": {"g": max(live)}, "live_bytes": live},
        }

    return compare_runs(
        [
            RunReports(1, "a", reports(100.0, {"cpu": 1000.0, "gpu": 500.0}, [1, 4, 2])),
            RunReports(2, "b", reports(50.0, {"cpu": 2000.0}, [1, 3, 2])),
        ]
    )


def test_compare_figures_draw_one_trace_per_run():
    got = comparison()
    ops = ops_bars(got)
    assert [t["y"] for t in ops["data"]] == [[100.0], [50.0]]
    schedules = schedule_bars(got)
    assert schedules["data"][0]["x"] == ["cpu", "gpu"]
    assert schedules["data"][1]["y"] == [2.0, 0.0]
    assert "makespan 1.500 ms" in schedules["data"][0]["name"]
    memory = memory_overlay(got)
    assert [t["name"] for t in memory["data"]] == [
        "a: live bytes",
        "a: arena",
        "b: live bytes",
        "b: arena",
    ]


def test_history_plots_known_values_and_marks_the_baseline():
    history = {
        "baseline": 2,
        "runs": [
            {"run": 1, "created_at": "2026-01-01T00:00:00", "target": "host", "figures": {}},
            {
                "run": 2,
                "created_at": "2026-01-02T00:00:00",
                "target": "host",
                "figures": {"profile.latency_ms": {"value": 5.0}},
            },
            {
                "run": 3,
                "created_at": "2026-01-03T00:00:00",
                "target": "host",
                "figures": {"profile.latency_ms": {"value": None}},  # unknown: not a point
            },
        ],
    }
    figure = history_lines(history)
    (trace,) = figure["data"]
    assert trace["y"] == [5.0] and trace["marker"]["symbol"] == ["star"]
    assert figure["layout"]["shapes"][0]["y0"] == 5.0
    assert history_lines({"baseline": None, "runs": []}) is None


def test_history_draws_one_line_per_target_and_kind():
    def entry(run, target, value, measured):
        figure = {"profile.latency_ms": {"value": value, "measured": measured}}
        return {"run": run, "created_at": f"2026-01-0{run}", "target": target, "figures": figure}

    history = {
        "baseline": None,
        "runs": [
            entry(1, "host", 5.0, True),
            entry(2, "phone", 40.0, False),
            entry(3, "host", 5.5, True),
        ],
    }
    names = {t["name"]: t["y"] for t in history_lines(history)["data"]}
    assert names == {"host, measured": [5.0, 5.5], "phone, predicted": [40.0]}
