"""The cost model on hand-computed ops, transfers and energy."""

from __future__ import annotations

import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.errors import EngineError
from engine.graph import analyze_model
from engine.graph.costs import OpCost
from engine.targets import CostModel, validate_profile
from engine.targets.costmodel import op_variant


@pytest.fixture
def model() -> CostModel:
    return CostModel(
        validate_profile(
            {
                "name": "toy",
                "kind": "modeled",
                "units": [
                    {
                        "name": "cpu",
                        "kind": "cpu",
                        "peak_gflops": {"fp32": 100, "fp16": None},
                        "mem_bw_gbps": 10,
                        "launch_us": 5,
                        "efficiency": {"Conv": 0.5},
                    },
                    {"name": "gpu", "kind": "gpu", "peak_gflops": {"fp32": 400},
                     "mem_bw_gbps": None, "supports": ["Conv"]},
                    {"name": "dsp", "kind": "dsp", "peak_gflops": {"int8": 50},
                     "mem_bw_gbps": 10},
                    {"name": "cpu2", "kind": "cpu", "peak_gflops": {"fp32": 100},
                     "mem_bw_gbps": 10},
                ],
                "links": [
                    {"from": "cpu", "to": "gpu", "latency_us": 500, "gbps": 8},
                    {"from": "cpu", "to": "cpu2", "latency_us": 0, "zero_copy": True},
                    {"from": "cpu", "to": "dsp", "latency_us": 100, "gbps": 4,
                     "bidirectional": False},
                ],
                "power": {"cpu": {"active_w": 2.0, "idle_w": 0.5}, "gpu": {"active_w": 3.0}},
            }
        )
    )  # fmt: skip


CONV = OpCost(macs=10**6, flops=2 * 10**6, params=0, bytes_read=30_000, bytes_written=10_000)
RELU = OpCost(macs=0, flops=1_000, params=0, bytes_read=40_000, bytes_written=40_000)


def test_compute_bound_op_by_hand(model):
    # compute 2e6 / 100 GFLOPS = 20 us, memory 40 kB / 10 GB/s = 4 us; 5 + 20 / 0.5 = 45 us
    estimate = model.estimate(CONV, "Conv", "cpu")
    assert estimate.latency_us == pytest.approx(45.0)
    assert (estimate.status, estimate.bound, estimate.calibrated) == ("ok", "compute", True)


def test_memory_bound_op_without_a_factor_runs_on_the_roof(model):
    # memory 80 kB / 10 GB/s = 8 us beats compute 0.01 us; no Relu factor: efficiency 1
    estimate = model.estimate(RELU, "Relu", "cpu")
    assert estimate.latency_us == pytest.approx(13.0)
    assert (estimate.bound, estimate.calibrated) == ("memory", False)


def test_a_default_factor_applies_to_unlisted_op_types(model):
    unit = model.profile.unit("cpu")
    unit.efficiency["*"] = 0.25
    assert model.op_latency_us(RELU, "Relu", "cpu") == pytest.approx(5 + 8 / 0.25)


def test_no_estimate_without_support_or_numbers(model):
    assert model.estimate(RELU, "Relu", "gpu").status == "unsupported"
    unknown = model.estimate(CONV, "Conv", "gpu")  # bandwidth unknown
    assert (unknown.latency_us, unknown.status) == (None, "unknown")
    assert "bandwidth" in unknown.reason
    assert model.estimate(CONV, "Conv", "cpu", dtype="fp16").status == "unknown"
    assert model.estimate(CONV, "Conv", "dsp").status == "unsupported"  # no fp32 at all
    assert model.estimate(None, "Conv", "cpu").status == "not_costed"
    assert model.op_latency_us(CONV, "Conv", "dsp", dtype="int8") == pytest.approx(40.0)


def test_an_op_without_work_costs_the_launch(model):
    empty = OpCost(0, 0, 0, 0, 0)
    assert model.op_latency_us(empty, "Shape", "cpu") == 5.0
    assert model.estimate(empty, "Shape", "cpu").bound == "launch"


def test_transfers(model):
    # 500 us + 8 MB / 8 GB/s
    assert model.transfer_us(8_000_000, "cpu", "gpu") == pytest.approx(1500.0)
    assert model.transfer_us(8_000_000, "gpu", "cpu") == pytest.approx(1500.0)  # bidirectional
    assert model.transfer_us(4_000, "cpu", "dsp") == pytest.approx(101.0)
    assert model.transfer_us(4_000, "dsp", "cpu") is None  # one-way link
    assert model.transfer_us(10**9, "cpu", "cpu2") == 0.0  # shared memory
    assert model.transfer_us(10**9, "gpu", "gpu") == 0.0
    assert model.transfer_us(1, "gpu", "dsp") is None  # no link: unknown
    with pytest.raises(EngineError):
        model.transfer_us(1, "cpu", "tpu")


def test_energy_is_time_times_active_minus_idle_power(model):
    assert model.energy_j(1000.0, "cpu") == pytest.approx(1e-3 * 1.5)
    assert model.energy_j(1000.0, "gpu") is None  # idle power unknown
    assert model.energy_j(1000.0, "dsp") is None  # no power entry


def test_a_variant_factor_takes_precedence(model):
    model.profile.unit("cpu").efficiency["Conv/depthwise"] = 0.1
    assert model.op_latency_us(CONV, "Conv", "cpu", variant="Conv/depthwise") == pytest.approx(
        5 + 20 / 0.1
    )
    assert model.op_latency_us(CONV, "Conv", "cpu", variant="Conv/1x1") == pytest.approx(45.0)


@pytest.mark.parametrize(
    ("weight_shape", "attrs", "variant"),
    [
        ((8, 1, 3, 3), {"group": 8}, "Conv/depthwise"),
        ((8, 2, 3, 3), {"group": 4}, "Conv/grouped"),
        ((8, 8, 1, 1), {}, "Conv/1x1"),
        ((8, 8, 3, 3), {}, "Conv/dense"),
    ],
)
def test_conv_variants(weight_shape, attrs, variant):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1], **attrs)
    if weight_shape[2] == 1:
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    model = build([node], [("x", [1, 8, 8, 8])], [("y", [1, 8, 8, 8])], [weight("w", weight_shape)])
    graph = analyze_model(model).graph
    assert op_variant(graph.nodes[0], graph) == variant


def test_one_row_gemm_is_a_gemv():
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")
    model = build([node], [("x", [1, 64])], [("y", [1, 32])], [weight("w", (64, 32))])
    graph = analyze_model(model).graph
    assert op_variant(graph.nodes[0], graph) == "Gemm/gemv"


def test_a_reshape_is_a_view_and_costs_the_launch(model):
    moved = OpCost(0, 0, 0, bytes_read=10**6, bytes_written=10**6)
    assert model.op_latency_us(moved, "Reshape", "cpu") == 5.0
    assert model.op_latency_us(moved, "Transpose", "cpu") == pytest.approx(5 + 200.0)


def test_masks_and_index_math_run_on_general_units_at_memory_speed():
    from engine.graph.costs import OpCost
    from engine.targets import CostModel, get_target

    model = CostModel(get_target("phone-snapdragon835"))
    cost = OpCost(macs=0, flops=1024, params=0, bytes_read=2048, bytes_written=1024)
    cpu = model.estimate(cost, "And", "cpu_big", "bool")
    assert cpu.status == "ok" and cpu.bound == "memory"
    assert model.estimate(cost, "And", "cpu_little", "bool").status == "ok"
    dsp = model.estimate(cost, "Mul", "dsp", "bool")  # a unit that runs Mul, in int8 only
    assert dsp.status == "unsupported" and "does not compute in bool" in dsp.reason
