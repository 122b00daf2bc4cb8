"""``workbench partition``: the ARCHITECTURE 5b keys, exit codes, and the target profiles
priced by the cost model."""

from __future__ import annotations

import argparse
import json

import pytest
from onnx_builders import LIGHT_DIR

from engine.graph import analyze_model
from engine.partition.cli import add_commands
from engine.partition.targets import LinkAssumption, problem_for_target
from engine.targets import get_target

SQUEEZENET = str(LIGHT_DIR / "light_squeezenet.onnx")
PHONE, CLOUD = "phone-snapdragon835", "cloud-xeon-e5-2620v4"


def run(capsys, *argv):
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("algorithm", ["hope-ilp", "hope-heuristic", "heft", "chain-dp", "blocks"])
def test_json_has_the_documented_keys(capsys, algorithm):
    code, out, err = run(
        capsys, "partition", SQUEEZENET, "--target", PHONE, "--algorithm", algorithm,
        "--time-limit", "5", "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert {
        "algorithm",
        "makespan_ms",
        "best_single_unit_ms",
        "solve_s",
        "valid",
        "placement",
    } <= set(result)
    assert result["valid"] and result["algorithm"] == algorithm
    assert len(result["placement"]) == 66 and "timeline" not in result
    assert any("link cost unknown" in n for n in result["notes"])  # the assumption is shown


def test_mobile_cloud_uses_the_cloud_preset_and_a_network(capsys):
    code, out, err = run(
        capsys, "partition", SQUEEZENET, "--target", PHONE, "--algorithm", "mobile-cloud",
        "--network", "wifi", "--json", "--schedule",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert "cloud" in result["units"] and result["details"]["network"] == "wifi"
    assert len(result["details"]["curve"]) == 67  # every cut, from input to output


def test_export_and_execution_check(capsys, tmp_path):
    code, out, err = run(
        capsys, "partition", SQUEEZENET, "--target", PHONE, "--algorithm", "heft",
        "--link-latency-us", "30", "--out", str(tmp_path), "--check", "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["execution"]["outputs_match"]
    assert (tmp_path / "manifest.json").exists()


def test_bad_input_exits_2(capsys):
    code, _, err = run(capsys, "partition", SQUEEZENET, "--target", PHONE, "--algorithm", "nope")
    assert code == 2 and err.startswith("error: unknown partitioning algorithm")
    code, _, err = run(
        capsys, "partition", SQUEEZENET, "--target", "nowhere", "--algorithm", "heft"
    )
    assert code == 2 and "unknown target" in err


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
