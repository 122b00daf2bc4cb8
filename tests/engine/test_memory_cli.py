"""``workbench memplan`` through a local parser: exit codes and the keys of ARCHITECTURE 5b."""

from __future__ import annotations

import argparse
import json

import pytest
from onnx_builders import LIGHT_DIR
from test_memory_planners import toy_model

from engine.memory import PLANNERS
from engine.memory.cli import add_commands


def run(capsys, *argv):
    parser = argparse.ArgumentParser(prog="workbench")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_documented_keys_and_the_toy_numbers(capsys, save):
    code, out, err = run(capsys, "memplan", str(save(toy_model())), "--json")
    assert code == 0 and err == ""
    result = json.loads(out)
    assert {"lower_bound_bytes", "planners", "best", "valid"} <= set(result)
    assert result["lower_bound_bytes"] == 76 and result["valid"] is True
    assert set(result["planners"]) == set(PLANNERS)
    assert result["planners"]["mincost-flow"] == 84
    assert "plans" not in result and "live_bytes" not in result


@pytest.mark.parametrize("name", list(PLANNERS))
def test_every_planner_runs_alone(capsys, name):
    squeezenet = str(LIGHT_DIR / "light_squeezenet.onnx")
    code, out, _ = run(capsys, "memplan", squeezenet, "--planner", name, "--json")
    result = json.loads(out)
    assert code == 0 and list(result["planners"]) == [name] and result["best"] == name


def test_plans_flag_adds_the_per_tensor_plans(capsys, save):
    path = str(save(toy_model()))
    code, out, _ = run(capsys, "memplan", path, "--planner", "greedy-by-size", "--plans", "--json")
    plan = json.loads(out)["plans"]["greedy-by-size"]
    assert code == 0 and {e["tensor"] for e in plan} == {"t0", "t1", "t2", "t3", "t4"}


def test_text_summary_marks_the_best(capsys, save):
    code, out, _ = run(capsys, "memplan", str(save(toy_model())), "--local-buffer", "64")
    assert code == 0
    assert "lower bound" in out and "greedy-by-size    *" in out and "off-core" in out


def test_unknown_planner_exits_2_with_the_known_names(capsys, save):
    code, out, err = run(capsys, "memplan", str(save(toy_model())), "--planner", "magic")
    assert code == 2 and out == ""
    assert err.splitlines()[0] == "error: unknown memory planner 'magic'"
    assert "greedy-by-size" in err.splitlines()[1]


def test_a_file_that_is_not_onnx_exits_2(capsys, save):
    code, _, err = run(capsys, "memplan", str(save(b"not a model")), "--json")
    assert code == 2 and err.startswith("error: ")


def test_tvm_flag_sets_tvms_static_allocations_next_to_ours(capsys):
    pytest.importorskip("tvm")
    squeezenet = str(LIGHT_DIR / "light_squeezenet.onnx")
    code, out, _ = run(capsys, "memplan", squeezenet, "--tvm", "--json")
    assert code == 0
    tvm = json.loads(out)["tvm"]
    assert tvm["tvm_static_bytes"] > tvm["ours_bytes"] >= tvm["lower_bound_bytes"] > 0
    code, out, _ = run(capsys, "memplan", squeezenet, "--tvm")
    assert code == 0 and "StaticPlanBlockMemory" in out and "on the same tensors" in out
