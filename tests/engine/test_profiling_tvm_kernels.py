"""Per-kernel latency of the TVM build, timed with the VM's instrument hook."""

from __future__ import annotations

import pytest
from onnx import helper

from engine.profiling.tvm_kernels import KernelTimingConfig, profile_tvm_kernels
from tests.engine.onnx_builders import build, weight


def small_cnn():
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node(
            "MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2], name="pool"
        ),
        helper.make_node("Conv", ["p0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["y"], name="relu1"),
    ]
    weights = [weight("w0", (8, 3, 3, 3)), weight("w1", (8, 8, 3, 3))]
    return build(nodes, [("x", [1, 3, 32, 32])], [("y", [1, 8, 16, 16])], weights)


def test_every_kernel_is_timed_with_the_repetition_rule():
    ops_us = {"conv0": 50.0, "relu0": 5.0, "pool": 10.0}
    config = KernelTimingConfig(threads=1, window_s=0.3, min_runs=10)
    profile = profile_tvm_kernels(small_cnn(), config, ops_us).to_dict()
    kernels = profile["kernels"]
    assert profile["measured"] and profile["runs"] >= 10 and profile["threads"] == 1
    assert {n for k in kernels for n in k["nodes"]} >= {"conv0", "relu0", "conv1", "relu1"}
    for k in kernels:
        assert k["runs"] >= 10 and k["median_us"] > 0 and k["p90_us"] >= k["median_us"]
        assert k["spread_pct"] >= 0
    assert sum(k["share_pct"] for k in kernels) == pytest.approx(100.0)
    first = next(k for k in kernels if "conv0" in k["nodes"])
    assert first["onnxruntime_us"] == pytest.approx(55.0)  # conv0 + relu0, fused here
    assert profile["kernel_sum_ms"] > 0 and profile["onnxruntime_latency_ms"] > 0
