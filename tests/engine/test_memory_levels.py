"""GraphTurbo's local-buffer fit: what stays on-core, what spills where, bytes off-core."""

from __future__ import annotations

import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.errors import EngineError
from engine.graph import analyze_model
from engine.memory import LevelConfig, MemoryConfig, build_lifetimes, fit_levels, plan_memory
from engine.memory.levels import straight_chains

KB = 1024  # a float32 [1, 4, 8, 8] tensor


def graph_of(nodes, inputs, outputs, weights):
    return analyze_model(build(nodes, inputs, outputs, weights)).graph


@pytest.fixture
def chain():
    """x -> conv -> relu -> conv -> relu -> y, every tensor 1 KiB."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1"),
        helper.make_node("Relu", ["c"], ["r"], name="relu1"),
        helper.make_node("Conv", ["r", "w2"], ["d"], name="conv2"),
        helper.make_node("Relu", ["d"], ["y"], name="relu2"),
    ]
    w = [weight("w1", (4, 4, 1, 1)), weight("w2", (4, 4, 1, 1))]
    return graph_of(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], w)


@pytest.fixture
def long_lived():
    """c (1 KiB) is read again by the concat; r and s are 2 KiB, a 3 KiB."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1"),
        helper.make_node("Conv", ["c", "w2"], ["r"], name="conv2"),
        helper.make_node("Relu", ["r"], ["s"], name="relu"),
        helper.make_node("Concat", ["s", "c"], ["a"], name="concat", axis=1),
        helper.make_node("Relu", ["a"], ["y"], name="out"),
    ]
    w = [weight("w1", (4, 4, 1, 1)), weight("w2", (8, 4, 1, 1))]
    return graph_of(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 12, 8, 8])], w)


def test_a_chain_that_fits_sends_only_its_input_and_output_off_core(chain):
    assert straight_chains(chain, range(4)) == [["conv1", "relu1", "conv2", "relu2"]]
    fit = fit_levels(chain, build_lifetimes(chain), LevelConfig(local_buffer_bytes=4 * KB))
    # Per layer: x read; c, r, d each written and read back; y written.
    assert fit.offcore_bytes_before == KB + 3 * 2 * KB + KB
    assert fit.offcore_bytes_after == KB + KB
    assert fit.placement == {"x": "dram", "c": "local", "r": "local", "d": "local", "y": "global"}
    (group,) = fit.groups
    assert group.fits and group.peak_bytes == KB and group.spilled == ()


def test_spill_policy_longest_lifetime_versus_largest(long_lived):
    everything = (("conv1", "conv2", "relu", "concat", "out"),)
    lifetimes = build_lifetimes(long_lived)
    longest = fit_levels(long_lived, lifetimes, LevelConfig(2560, groups=everything))
    largest = fit_levels(
        long_lived, lifetimes, LevelConfig(2560, groups=everything, spill="largest")
    )
    # At conv2, c (1 KiB, alive until the concat) and r (2 KiB) overflow 2.5 KiB.
    assert longest.groups[0].spilled[0] == "c"  # GraphTurbo: the longest lifetime goes
    assert largest.groups[0].spilled[0] == "r"  # the prior work: the largest goes
    assert not longest.groups[0].fits
    assert longest.placement["a"] == "global"  # 3 KiB never fits a 2.5 KiB buffer
    # x read; c out and back; a (too big) out and back; y out: 1 + 2 + 6 + 3 KiB.
    assert longest.offcore_bytes_after == 12 * KB
    # x; r and then s, out and back (2 x 4 KiB); a out and back; y out.
    assert largest.offcore_bytes_after == 18 * KB
    assert largest.offcore_bytes_before == 21 * KB


def test_a_full_global_buffer_spills_to_dram(long_lived):
    everything = (("conv1", "conv2", "relu", "concat", "out"),)
    config = LevelConfig(2560, global_buffer_bytes=512, groups=everything)
    fit = fit_levels(long_lived, build_lifetimes(long_lived), config)
    assert fit.placement["c"] == "dram" and fit.placement["a"] == "dram"


def test_plan_memory_reports_the_fit(chain):
    report = plan_memory(chain, MemoryConfig(levels=LevelConfig(4 * KB))).to_dict()
    assert report["levels"]["offcore_bytes_after"] == 2 * KB
    assert report["levels"]["tensors_by_level"] == {"local": 3, "global": 1, "dram": 1}


def test_bad_level_configs_are_typed_errors(chain):
    with pytest.raises(EngineError, match="spill policy"):
        LevelConfig(KB, spill="random")
    with pytest.raises(EngineError, match="unknown node 'nope'"):
        fit_levels(chain, build_lifetimes(chain), LevelConfig(KB, groups=(("nope",),)))
