"""The mobile-cloud split (thesis 3.5): the cost formulas and the choice of cut."""

from __future__ import annotations

import math

import pytest

from engine.partition import (
    Network,
    Op,
    PartitionError,
    PartitionOptions,
    PartitionProblem,
    Tensor,
    UnitPower,
    partition_model,
)
from engine.partition.mobile_cloud import cut_costs

# The cloud preset's 4G: the thesis's raw input (602,112 bytes) takes 0.18 s at 2.5 W.
FOUR_G = Network("4g", rtt_ms=0.0, up_mbps=602_112 * 8 / 0.18 / 1e6, down_mbps=None, radio_w=2.5)


def test_energy_is_time_times_power_on_4g():
    assert math.isclose(FOUR_G.upload_s(602_112), 0.18)
    assert math.isclose(FOUR_G.upload_j(602_112), 0.45)  # thesis L788: 2.5 W x 0.18 s


def _chain(network: Network) -> PartitionProblem:
    """Input 1 MB; three ops shrink it to 10 kB; the cloud is 10x faster."""
    sizes = [1_000_000, 200_000, 10_000, 1_000]
    tensors = [Tensor("x", sizes[0], None, (0,))]
    tensors += [
        Tensor(f"t{i}", sizes[i + 1], i, (i + 1,) if i < 2 else (), i == 2) for i in range(3)
    ]
    return PartitionProblem(
        ops=(Op("conv1", "Conv"), Op("pool", "MaxPool"), Op("fc", "Gemm")),
        units=("mobile", "cloud"),
        latency_us=((20_000.0, 2_000.0), (5_000.0, 500.0), (60_000.0, 6_000.0)),
        tensors=tuple(tensors),
        power={"mobile": UnitPower(active_w=3.0, idle_w=1.0)},
        network=network,
        cloud_unit="cloud",
    )


def test_every_cut_follows_the_thesis_formulas():
    net = Network("test", rtt_ms=50.0, up_mbps=8.0, down_mbps=None, radio_w=1.0)
    curve = cut_costs(_chain(net), mobile=0, cloud=1)
    assert [c["cut"] for c in curve] == ["input", "conv1", "pool", "output"]
    assert [c["bytes"] for c in curve] == [1_000_000, 200_000, 10_000, 0]
    pool = curve[2]  # conv1 and pool on the phone, fc in the cloud
    assert math.isclose(pool["mobile_ms"], 25.0)
    assert math.isclose(pool["transfer_ms"], 50.0 + 10_000 * 8 / 8e6 * 1e3)  # RTT + v/b
    assert math.isclose(pool["cloud_ms"], 6.0)
    assert math.isclose(pool["latency_ms"], 25.0 + 60.0 + 6.0)
    # E = E_m + E_t = T_m (P_active - P_idle) + w T_t
    assert math.isclose(pool["energy_j"], 0.025 * 2.0 + 1.0 * 0.060)
    assert curve[-1]["transfer_ms"] == 0.0 and math.isclose(curve[-1]["energy_j"], 0.085 * 2.0)


def test_latency_first_and_energy_first_pick_their_own_cut():
    net = Network("test", rtt_ms=50.0, up_mbps=8.0, down_mbps=None, radio_w=1.0)
    problem = _chain(net)
    fast = partition_model(problem, "mobile-cloud", PartitionOptions(mobile_unit="mobile"))
    frugal = partition_model(
        problem, "mobile-cloud", PartitionOptions(objective="energy", mobile_unit="mobile")
    )
    curve = fast.plan.details["curve"]
    assert fast.plan.details["best_cut"] == min(curve, key=lambda c: c["latency_ms"])
    assert frugal.plan.details["best_cut"] == min(curve, key=lambda c: c["energy_j"])
    # Staying on the phone is fastest (85 ms against 91 ms), but sending 10 kB after the
    # pool saves energy (0.11 J against 0.17 J): the objective moves the cut.
    assert fast.plan.details["best_cut"]["cut"] == "output"
    assert frugal.plan.details["best_cut"]["cut"] == "pool"
    assert fast.valid and frugal.valid


def test_a_fast_network_sends_everything_a_slow_one_nothing():
    fast = Network("fast", rtt_ms=1.0, up_mbps=10_000.0, down_mbps=None, radio_w=1.0)
    slow = Network("slow", rtt_ms=300.0, up_mbps=1.0, down_mbps=None, radio_w=1.0)
    options = PartitionOptions(mobile_unit="mobile")
    assert (
        partition_model(_chain(fast), "mobile-cloud", options).plan.details["best_cut"]["cut"]
        == "input"
    )
    assert (
        partition_model(_chain(slow), "mobile-cloud", options).plan.details["best_cut"]["cut"]
        == "output"
    )


def test_the_simulated_plan_matches_the_curve_without_overlap():
    net = Network("test", rtt_ms=50.0, up_mbps=8.0, down_mbps=None, radio_w=1.0)
    result = partition_model(_chain(net), "mobile-cloud", PartitionOptions(mobile_unit="mobile"))
    best = result.plan.details["best_cut"]
    assert math.isclose(result.makespan_ms, best["latency_ms"])  # a chain has nothing to overlap


def test_mobile_cloud_needs_a_network():
    problem = _chain(FOUR_G)
    plain = PartitionProblem(problem.ops, problem.units, problem.latency_us, problem.tensors)
    with pytest.raises(PartitionError, match="network"):
        partition_model(plain, "mobile-cloud")
