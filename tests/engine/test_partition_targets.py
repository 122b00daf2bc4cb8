"""Partitioning problems priced from the target presets by the cost model."""

from __future__ import annotations

import pytest
from onnx_builders import LIGHT_DIR

from engine.graph import analyze_model
from engine.partition.targets import LinkAssumption, problem_for_target
from engine.targets import get_target

SQUEEZENET = str(LIGHT_DIR / "light_squeezenet.onnx")
PHONE, CLOUD = "phone-snapdragon835", "cloud-xeon-e5-2620v4"


def test_phone_problem_from_the_cost_model():
    graph = analyze_model(SQUEEZENET).graph
    problem = problem_for_target(graph, get_target(PHONE), assume=LinkAssumption(250.0, 10.0))
    assert problem.units == ("cpu_big", "cpu_little", "gpu")  # the int8-only DSP is left out
    assert problem.home_unit == "cpu_big"
    big, little = problem.unit_index["cpu_big"], problem.unit_index["cpu_little"]
    assert problem.link_table[big][little] is None  # zero-copy: shared memory
    gpu = problem.unit_index["gpu"]
    assert problem.transfer_us(10_000, big, gpu) == pytest.approx(250.0 + 1.0)
    assert any("dsp" in n for n in problem.notes)


def test_the_cloud_presets_4g_costs_the_thesis_045_joules():
    graph = analyze_model(SQUEEZENET).graph
    problem = problem_for_target(graph, get_target(PHONE), cloud=get_target(CLOUD), network="4g")
    raw_image = 224 * 224 * 3 * 4  # the float32 input the preset's bandwidth is derived from
    assert problem.network.upload_s(raw_image) == pytest.approx(0.18, rel=1e-3)
    assert problem.network.upload_j(raw_image) == pytest.approx(0.45, rel=1e-3)  # 2.5 W x 0.18 s
