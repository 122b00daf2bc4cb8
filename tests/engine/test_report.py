"""Headline figures, gates and run comparisons (engine.report) on stage reports."""

from __future__ import annotations

import pytest

from engine.report.compare import RunReports, compare_runs, delta
from engine.report.gates import GateError, evaluate, parse_gate
from engine.report.headlines import KEYS, headline_figures

ENV = {
    "machine": {"cpu_model": "AMD EPYC", "usable_cores": 2, "physical_cores": 2},
    "intra_op_threads": 0,
}


def profile(ops: list[tuple[str, str, float]], latency_ms=5.0, spread=3.0) -> dict:
    return {
        "measured": True,
        "unit": "cpu",
        "latency_ms": latency_ms,
        "latency_runs": 150,
        "latency": {"p90": latency_ms * 1.1, "spread_pct": spread},
        "environment": ENV,
        "ops": [{"name": n, "op_type": t, "latency_us": us} for n, t, us in ops],
    }


def figures(results: dict) -> dict:
    return {f.key: f.to_dict() for f in headline_figures(results)}


def test_figures_say_what_they_are():
    got = figures(
        {
            "analyze": {"params": 10, "macs": 500, "not_costed": ["n3"]},
            "profile": profile([("a", "Conv", 10.0)]),
            "partition": {
                "best": "heft",
                "target": "phone",
                "best_makespan_ms": 2.0,
                "algorithms": {"heft": {"speedup": 1.5}},
            },
        }
    )
    latency = got["profile.latency_ms"]
    assert latency["measured"] and latency["noise_pct"] == 3.0
    assert latency["basis"] == (
        "measured on AMD EPYC, median of 150 runs, default threads (2, one per physical core)"
    )
    # Ops without a cost formula make the MAC count a lower bound, and it says so.
    assert "1 ops not costed (a lower bound)" in got["analyze.macs"]["basis"]
    assert got["analyze.flops"]["value"] is None  # not in the report: unknown, not 0
    assert not got["partition.speedup"]["measured"]
    assert got["partition.speedup"]["basis"].startswith("predicted for phone")
    assert set(got) <= set(KEYS)
    predicted = figures({"profile": {"measured": False, "model": "roofline v1", "target": "x"}})
    assert predicted["profile.latency_ms"]["basis"] == "predicted by roofline v1 for x"


def test_nan_outputs_make_the_error_metrics_unknown():
    """The metrics cover finite values only: a cosine of 1.0 beside 1000 NaNs is a lie."""
    report = {
        "verdict": "fail",
        "candidate": {"name": "fp16"},
        "outputs": [{"cosine": 1.0, "snr_db": 300.0, "nonfinite_mismatch": 1000}],
    }
    got = figures({"accuracy": report})
    assert got["accuracy.cosine"]["value"] is None
    assert "1000 NaN/inf values differ" in got["accuracy.cosine"]["basis"]
    gate = evaluate(parse_gate("accuracy.cosine>=0.999"), got)
    assert not gate.passed and "unknown" in gate.reason


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("profile.latency<=5", "unknown figure 'profile.latency'"),
        ("latency_ms<=5", "cannot read gate"),
        ("profile.latency_ms=<5", "cannot read gate"),
        ("profile.latency_ms<=fast", "profile.latency_ms is a number"),
        ("profile.latency_ms!=pass", "profile.latency_ms is a number"),
        ("accuracy.verdict==passed", "accuracy.verdict is one of pass, fail"),
        ("accuracy.verdict<=pass", "accuracy.verdict is one of pass, fail"),
        ("accuracy.verdict==baseline", "accuracy.verdict is one of pass, fail"),
        ("compile.outputs_match==yes", "compile.outputs_match is one of true, false"),
        ("profile.latency_ms<=2*baseline*3", "one factor on baseline"),
        ("profile.latency_ms<=1e999", "finite number"),
        ("profile.latency_ms<=5;rm", "is not a number"),
    ],
)
def test_unreadable_gates_say_what_is_wrong(expression, message):
    with pytest.raises(GateError, match=message.replace("*", r"\*").replace("(", r"\(")):
        parse_gate(expression)


def test_unknown_figure_lists_the_stage_figures():
    with pytest.raises(GateError) as e:
        parse_gate("memory.arena<=1")
    assert "memory.arena_bytes" in str(e.value) and "profile." not in str(e.value)


def test_gates_against_values_and_a_baseline():
    run = figures({"profile": profile([], latency_ms=5.2), "accuracy": {"verdict": "pass"}})
    base = figures({"profile": profile([], latency_ms=5.0)})
    assert evaluate(parse_gate("profile.latency_ms<=6"), run).passed
    within = evaluate(parse_gate("profile.latency_ms<=1.05*baseline"), run, base)
    assert within.passed and within.limit == pytest.approx(5.25)
    assert "1.05 x the baseline's 5" in within.reason and "spread 3.0%" in within.reason
    assert not evaluate(parse_gate("profile.latency_ms<=baseline"), run, base).passed
    assert evaluate(parse_gate("accuracy.verdict==PASS"), run).passed
    match = figures({"compile": {"outputs_match": True}})
    assert evaluate(parse_gate("compile.outputs_match==true"), match).passed
    no_base = evaluate(parse_gate("profile.latency_ms<=baseline"), run, None)
    assert not no_base.passed and "--baseline" in no_base.reason
    missing = evaluate(parse_gate("compile.speed_vs_onnxruntime>=1.1"), run)
    assert not missing.passed and "did it run the compile stage?" in missing.reason


def test_compare_by_name_with_deltas_noise_and_unaligned_ops():
    a = RunReports(1, "a", {"profile": profile([("c1", "Conv", 100.0), ("r1", "Relu", 10.0)])})
    b = RunReports(
        2,
        "b",
        {
            "profile": profile(
                [("c1", "Conv", 80.0), ("r1", "Relu", 10.0), ("x", "Add", 5.0)],
                latency_ms=5.1,
            )
        },
    )
    c = RunReports(3, "c", {"profile": profile([("c1", "Conv", 100.0)], latency_ms=4.0)})
    got = compare_runs([a, b, c])
    rows = {r["key"]: r for r in got["figures"]}
    # 2% slower is within the 3% run-to-run spread; 20% faster is better.
    assert [d["direction"] for d in rows["profile.latency_ms"]["deltas"]] == [
        "within noise",
        "better",
    ]
    ops = got["ops"]
    assert ops["method"] == "by name"
    conv = next(r for r in ops["rows"] if r["name"] == "c1")
    assert conv["latency_us"] == [100.0, 80.0, 100.0] and conv["delta_pct"] == [-20.0, 0.0]
    assert {"run": 2, "ops": ["x"]} in ops["unaligned"]
    relu = next(r for r in ops["rows"] if r["name"] == "r1")
    assert relu["latency_us"] == [10.0, 10.0, None]  # not in run 3: None, not 0


def test_compare_different_models_aligns_by_structure_and_lists_the_rest():
    a = RunReports(1, "a", {"profile": profile([("a0", "Conv", 5.0), ("a1", "Relu", 1.0)])})
    b = RunReports(
        2,
        "b",
        {"profile": profile([("b0", "Conv", 4.0), ("b1", "Softmax", 2.0), ("b2", "Relu", 1.0)])},
    )
    got = compare_runs([a, b])
    assert got["ops"]["method"] == "by structure (op types in graph order)"
    names = {r["name"]: r["names"] for r in got["ops"]["rows"]}
    assert names == {"a0": ["a0", "b0"], "a1": ["a1", "b2"]}
    assert got["ops"]["unaligned"] == [{"run": 2, "ops": ["b1"]}]


def test_kernels_align_by_id_and_function_from_compile_else_profile():
    def compile_report(latency_ms, kernels):
        return {
            "latency_ms": latency_ms,
            "onnxruntime_latency_ms": 10.0,
            "speed_vs_onnxruntime": 10.0 / latency_ms,
            "kernels": kernels,
        }

    untuned = RunReports(
        1,
        "untuned",
        {
            "compile": compile_report(12.0, []),  # onnxruntime shipped: no kernels
            "profile": {
                "measured": True,
                "tvm_kernels": {
                    "kernels": [{"id": "s0k0", "func": "fused_conv", "median_us": 900.0}]
                },
            },
        },
    )
    tuned = RunReports(
        2,
        "tuned",
        {
            "compile": compile_report(
                8.0,
                [
                    {"id": "s0k0", "func": "fused_conv", "time_us": 450.0},
                    {"id": "s0k1", "func": "fused_add", "time_us": 20.0},
                ],
            )
        },
    )
    got = compare_runs([untuned, tuned])
    rows = {k["kernel"]: k for k in got["kernels"]["rows"]}
    assert rows["s0k0 fused_conv"]["us_per_call"] == [900.0, 450.0]
    assert rows["s0k0 fused_conv"]["delta_pct"] == [-50.0]
    assert got["kernels"]["unaligned"] == [{"run": 1, "kernels": ["s0k1 fused_add"]}]
    speed = next(r for r in got["figures"] if r["key"] == "compile.speed_vs_onnxruntime")
    assert speed["deltas"][0]["direction"] == "better"
    assert speed["deltas"][0]["ratio"] == pytest.approx(1.5)


def test_delta_of_unknown_and_of_words():
    assert delta({"value": None}, {"value": 3})["direction"] == "unknown"
    assert delta({"value": "pass"}, {"value": "fail"})["direction"] == "changed"
    assert delta(None, {"value": 1})["direction"] == "missing"


def test_partition_plans_side_by_side_with_placement_agreement():
    def partition(placement, busy, makespan):
        return {
            "best": "heft",
            "target": "phone",
            "best_makespan_ms": makespan,
            "algorithms": {"heft": {"speedup": 1.2}},
            "results": {
                "heft": {"makespan_ms": makespan, "unit_busy_us": busy, "placement": placement}
            },
        }

    a = RunReports(1, "a", {"partition": partition({"n0": "cpu", "n1": "gpu"}, {"cpu": 5.0}, 2.0)})
    b = RunReports(2, "b", {"partition": partition({"n0": "cpu", "n1": "cpu"}, {"cpu": 9.0}, 3.0)})
    c = RunReports(3, "c", {})
    got = compare_runs([a, b, c])["schedules"]
    assert got["placement_agreement"] == [{"ops": 2, "same_unit": 1}, None]
    assert got["plans"][1]["unit_busy_us"] == {"cpu": 9.0} and got["plans"][2] is None
    assert "placement" not in got["plans"][0]


def test_an_output_that_could_not_be_compared_makes_the_metrics_unknown():
    """An incomparable pair (its infinite errors stored as null) must not leave the worst of
    the other outputs as the figure: the gate would pass on a broken output."""
    report = {
        "verdict": "fail",
        "outputs": [
            {"name": "logits", "max_abs": None, "cosine": 0.0, "error": "shape 1x10 vs 1x12"},
            {"name": "pooled", "max_abs": 1e-6, "cosine": 1.0},
        ],
    }
    got = figures({"accuracy": report})
    assert got["accuracy.max_abs"]["value"] is None
    assert "could not compare logits" in got["accuracy.max_abs"]["basis"]
    assert not evaluate(parse_gate("accuracy.max_abs<=1e-3"), got).passed
    # Without the error key (older reports) a null metric still makes the figure unknown.
    del report["outputs"][0]["error"]
    assert figures({"accuracy": report})["accuracy.max_abs"]["value"] is None


def test_a_prediction_is_not_compared_with_a_measurement():
    predicted = {"value": 2.0, "measured": False, "better": "lower"}
    measured = {"value": 1.0, "measured": True, "better": "lower"}
    got = delta(predicted, measured)
    assert got["direction"] == "not comparable (measured vs predicted)" and got["pct"] is None


def _onnxruntime_build(latency_ms: float, onnxruntime_ms: float, speed: float, **more) -> dict:
    """A compile result whose artifact is onnxruntime alone."""
    return {
        "backend": "onnxruntime",
        "latency_ms": latency_ms,
        "onnxruntime_latency_ms": onnxruntime_ms,
        "speed_vs_onnxruntime": speed,
        "threads": 2,
        "timing": {"rounds": 3},
        **more,
    }


def test_a_build_that_is_onnxruntime_itself_is_as_fast_by_construction():
    compile_result = _onnxruntime_build(1.05, 1.0, 0.952)
    speed = figures({"compile": compile_result})["compile.speed_vs_onnxruntime"]
    assert speed["value"] == 1.0
    assert "by construction" in speed["basis"] and "measured 0.95x" in speed["basis"]
    gate = parse_gate("compile.speed_vs_onnxruntime>=1.0")
    assert evaluate(gate, figures({"compile": compile_result})).passed
    tvm = {**compile_result, "backend": "tvm"}
    assert figures({"compile": tvm})["compile.speed_vs_onnxruntime"]["value"] == 0.952


def test_onnxruntime_on_the_prepared_model_gives_its_measured_speed():
    """The prepared model (simplified, our rules applied) can run faster in onnxruntime than
    the upload: that artifact is not the baseline, and its measured ratio stands."""
    compile_result = _onnxruntime_build(3.3, 3.9, 1.18, onnxruntime_as_uploaded=False)
    speed = figures({"compile": compile_result})["compile.speed_vs_onnxruntime"]
    assert speed["value"] == 1.18 and "by construction" not in speed["basis"]
    uploaded = {**compile_result, "onnxruntime_as_uploaded": True, "speed_vs_onnxruntime": 0.97}
    assert figures({"compile": uploaded})["compile.speed_vs_onnxruntime"]["value"] == 1.0
