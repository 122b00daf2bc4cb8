"""Findings in plain words, from stored results."""

from __future__ import annotations

from engine.profiling.findings import find_all, profile_findings, sweep_findings, unit_findings


def measured(latencies: dict[str, tuple[str, float]]) -> dict:
    ops = [{"name": n, "op_type": t, "latency_us": us} for n, (t, us) in latencies.items()]
    return {"measured": True, "ops": ops}


def sweep(kind: str, medians: dict[int, float | None]) -> dict:
    points = []
    for value, median in medians.items():
        if median is None:
            points.append({"value": value, "status": "failed", "latency_ms": None,
                           "throughput_per_s": None, "error": "shape mismatch"})  # fmt: skip
        else:
            points.append({"value": value, "status": "ok", "latency_ms": {"median": median},
                           "throughput_per_s": value / median * 1e3, "error": None})  # fmt: skip
    return {"kind": kind, "points": points}


def unit(name, kind, latency_ms, *, unsupported=(), unknown=(), energy_j=None):
    complete = not unsupported and not unknown and latency_ms is not None
    return {"name": name, "kind": kind, "latency_ms": latency_ms, "complete": complete,
            "unsupported": list(unsupported), "unknown": list(unknown),
            "energy_j": energy_j}  # fmt: skip


def test_top_five_ops_and_their_share():
    latencies = {f"conv{i}": ("Conv", 120.0) for i in range(5)}
    latencies |= {f"relu{i}": ("Relu", 40.0) for i in range(10)}
    top, dominant = profile_findings(measured(latencies))
    assert top.text == (
        "These 5 ops take 60% of the measured time: conv0 (Conv, 12%), conv1 (Conv, 12%), "
        "conv2 (Conv, 12%), conv3 (Conv, 12%), conv4 (Conv, 12%)."
    )
    assert top.basis == "measured" and top.data["share_pct"] == 60.0
    assert dominant.text == "Conv ops (5 of 15) take 60% of the measured time."


def test_more_threads_no_faster():
    (finding,) = sweep_findings(sweep("threads", {1: 20.0, 2: 11.0, 4: 8.0, 8: 8.1}))
    assert finding.text == "8 threads are no faster than 4 (8.10 ms vs 8.00 ms, measured)."
    assert finding.severity == "warning"


def test_batch_gain_and_failed_points():
    failed, gain = sweep_findings(sweep("batch", {1: 10.0, 4: 20.0, 8: None}))
    assert failed.text == "batch = 8 failed: shape mismatch"
    assert (
        gain.text
        == "Batch 4 gives 2.0x the throughput of batch 1 (200.0 vs 100.0 inferences/s, measured)."
    )


def test_gpu_slower_than_cpu_is_predicted():
    predicted = {
        "model": "roofline+efficiency v1",
        "units": [unit("cpu_big", "cpu", 30.0), unit("gpu", "gpu", 42.5)],
        "ops": [],
    }
    (finding,) = unit_findings(predicted)
    assert finding.text == (
        "GPU (gpu) slower than CPU (cpu_big) for this model: 42.50 ms vs 30.00 ms "
        "(predicted by roofline+efficiency v1)."
    )
    assert finding.basis == "predicted"


def test_unsupported_ops_unknown_numbers_energy_and_slow_everywhere():
    predicted = {
        "model": "m",
        "units": [
            unit("cpu", "cpu", 300.0, energy_j=0.5),
            unit("gpu", "gpu", 250.0, energy_j=0.6),
            unit("dsp", "dsp", 0.0, unsupported=["softmax"]),
            unit("npu", "npu", None, unknown=["conv"]),
        ],
        "ops": [{"name": "softmax", "op_type": "Softmax"}],
    }
    texts = [f.text for f in find_all(predicted=predicted)]
    assert "dsp cannot run 1 ops (Softmax); they must run on another unit." in texts
    assert any(t.startswith("npu: no prediction for 1 ops") for t in texts)
    assert (
        "The fastest unit (gpu) is not the most frugal: cpu uses 500.0 mJ per inference "
        "(predicted by m)." in texts
    )
    assert (
        "Over 200 ms on every unit (predicted by m): a candidate for offloading to a server."
        in texts
    )


def test_warnings_come_first():
    findings = find_all(
        profile=measured({"a": ("Conv", 10.0)}),
        sweeps=[sweep("threads", {1: 5.0, 2: 5.0})],
    )
    assert [f.severity for f in findings] == ["warning", "info", "info"]
