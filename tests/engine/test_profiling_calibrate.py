"""Calibration recovers known efficiency factors and launch overhead from profiles."""

from __future__ import annotations

import pytest

from engine.profiling.calibrate import calibrate, cross_validate, evaluate, modeled_copy
from engine.targets import get_target

PEAK, BANDWIDTH = 100.0, 10.0  # GFLOPS, GB/s
TRUE_EFFICIENCY = {"Conv/dense": 0.5, "Conv/depthwise": 0.05, "Relu": 0.25}
TRUE_LAUNCH_US = 2.0


def op(name, op_type, flops, nbytes, status="measured", variant=None):
    variant = variant or ("Conv/dense" if op_type == "Conv" else None)
    roof = max(flops / (PEAK * 1e3), nbytes / (BANDWIDTH * 1e3))
    latency = 0.0 if status == "folded" else roof / TRUE_EFFICIENCY[variant or op_type]
    return {"name": name, "op_type": op_type, "variant": variant, "status": status,
            "latency_us": latency, "flops": flops, "bytes": nbytes, "dtype": "float32"}  # fmt: skip


def profile(ops):
    """A NodeProfile.to_dict() as a machine running the true model would measure it."""
    timed = [o for o in ops if o["status"] != "folded"]
    whole_us = sum(o["latency_us"] for o in timed) + TRUE_LAUNCH_US * len(timed)
    return {"measured": True, "ops": ops, "latency_ms": {"median": whole_us / 1e3},
            "reference": None}  # fmt: skip


@pytest.fixture
def measured():
    return {
        "a": profile(
            [
                op("w", "Conv", 0, 4000, status="folded"),
                op("c1", "Conv", 4_000_000, 100_000),
                op("r1", "Relu", 25_000, 200_000),
                op("c2", "Conv", 1_000_000, 400_000),
                op("dw", "Conv", 100_000, 20_000, variant="Conv/depthwise"),
            ]
        ),
        "b": profile(
            [op("c1", "Conv", 9_000_000, 50_000), op("r1", "Relu", 1_000, 8_000)]
            + [op(f"r{i}", "Relu", 100, 800, status="fused") for i in range(2, 5)]
        ),
    }


@pytest.fixture
def copy():
    return modeled_copy(get_target("host"), PEAK, BANDWIDTH)


def test_modeled_copy_takes_the_measured_roofs(copy):
    (cpu,) = copy.units
    assert copy.kind == "modeled" and copy.name == "host-model"
    assert cpu.peak_gflops["fp32"] == PEAK and cpu.mem_bw_gbps == BANDWIDTH
    assert "measured" in cpu.source["mem_bw_gbps"]


def test_calibration_recovers_the_factors_and_the_launch(copy, measured):
    result = calibrate(copy, measured)
    assert result.efficiency["Conv/dense"] == pytest.approx(0.5)
    assert result.efficiency["Conv/depthwise"] == pytest.approx(0.05)
    assert result.efficiency["Relu"] == pytest.approx(0.25)
    assert result.launch_us == pytest.approx(TRUE_LAUNCH_US)
    assert result.profile.unit("cpu").efficiency["Conv/depthwise"] == pytest.approx(0.05)
    # the op-type factor pools every Conv: it serves variants never seen
    assert result.efficiency["Conv"] < 0.5
    for fit in result.fits:
        assert fit.ratio == pytest.approx(1.0)
        assert fit.op_geomean_error_pct == pytest.approx(0.0, abs=1e-6)
    assert result.op_types["Conv/dense"]["ops"] == 3
    assert result.op_types["Conv/depthwise"]["ops"] == 1
    assert result.to_dict()["profile"]["units"][0]["launch_us"] == pytest.approx(2.0)


def test_an_uncalibrated_copy_underpredicts(copy, measured):
    fits = evaluate(copy, measured)
    assert all(fit.ratio < 0.6 for fit in fits)  # roofline without efficiency: a lower bound


def test_leave_one_model_out(copy, measured):
    fits = {f.model: f for f in cross_validate(copy, measured)}
    assert set(fits) == {"a", "b"}
    assert fits["b"].ratio == pytest.approx(1.0)  # every op kind of b was seen in a
    # b has no depthwise conv: a's runs at the pooled Conv factor, optimistic
    assert fits["a"].ratio < 0.99


def test_the_plain_timing_is_what_gets_predicted(copy, measured):
    measured["a"]["reference"] = {
        "latency_ms": {"median": 2 * measured["a"]["latency_ms"]["median"]}
    }
    result = calibrate(copy, {"a": measured["a"]})
    assert result.fits[0].measured_ms == measured["a"]["reference"]["latency_ms"]["median"]
    assert result.fits[0].ratio == pytest.approx(1.0)  # the extra time goes to launch


def test_time_lost_in_proportion_to_kernel_time_is_a_stall_factor(copy, measured):
    """On a shared machine the gap grows with the run: 30% of kernel time, no per-op cost."""
    for result in measured.values():
        timed = [o for o in result["ops"] if o["status"] != "folded"]
        kernel_us = sum(o["latency_us"] for o in timed)
        result["latency_ms"]["median"] = 1.3 * kernel_us / 1e3
    result = calibrate(copy, measured)
    assert result.launch_us == pytest.approx(0.0, abs=1e-9)
    assert result.stall_factor == pytest.approx(0.3)
    assert result.efficiency["Relu"] == pytest.approx(0.25 / 1.3)
    assert all(fit.ratio == pytest.approx(1.0) for fit in result.fits)
    # single ops are compared with their kernel time: the stall share shows as 30% error
    assert all(fit.op_geomean_error_pct == pytest.approx(30.0) for fit in result.fits)
