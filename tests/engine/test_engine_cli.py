"""``workbench analyze``: exit codes, stderr lines and the JSON keys of ARCHITECTURE 5b."""

from __future__ import annotations

import json

from onnx import helper
from onnx_builders import LIGHT_DIR, build, weight

from engine.cli import main

SQUEEZENET = str(LIGHT_DIR / "light_squeezenet.onnx")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_documented_keys(capsys):
    code, out, err = run(capsys, "analyze", SQUEEZENET, "--json")
    assert code == 0 and err == ""
    result = json.loads(out)
    assert {"nodes", "params", "macs", "ops", "not_costed", "inputs", "outputs"} <= set(result)
    assert "node_list" not in result
    assert result["inputs"] == [{"name": "data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}]


def test_nodes_flag_adds_the_node_list(capsys):
    code, out, _ = run(capsys, "analyze", SQUEEZENET, "--json", "--nodes")
    assert code == 0
    assert len(json.loads(out)["node_list"]) == 105


def test_shape_override(capsys, save):
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    model = build([node], [("a", ["M", 5])], [("y", ["M", 6])], [weight("b", (5, 6))])
    code, out, _ = run(capsys, "analyze", str(save(model)), "--shape", "a=3x5", "--json")
    assert code == 0 and json.loads(out)["macs"] == 90


def test_human_summary(capsys):
    code, out, _ = run(capsys, "analyze", SQUEEZENET)
    assert code == 0
    assert "params       1.235 M" in out and "MACs" in out


def test_bad_shape_argument_is_a_usage_error(capsys):
    code, out, err = run(capsys, "analyze", SQUEEZENET, "--shape", "data_0=1x3xbig")
    assert code == 2 and out == ""
    assert err.startswith("error: argument --shape: dimensions of 'data_0' must be positive")
    assert len(err.splitlines()) == 1


def test_wrong_rank_is_bad_input_with_hint(capsys):
    code, _, err = run(capsys, "analyze", SQUEEZENET, "--shape", "data_0=1x3x224")
    assert code == 2
    assert err.splitlines() == [
        "error: input 'data_0' has rank 4 (shape 1x3x224x224), but the given shape 1x3x224 "
        "has rank 3",
        "Give 4 dimensions for 'data_0'.",
    ]


def test_invalid_model_and_missing_args(capsys, save):
    code, _, err = run(capsys, "analyze", str(save(b"not a model")))
    assert code == 2 and err.startswith("error: not an ONNX model")
    code, _, err = run(capsys, "analyze")
    assert code == 2 and err.startswith("error: ")


def test_internal_error_exits_1(capsys, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr("engine.cli.analyze_model", boom)
    code, _, err = run(capsys, "analyze", SQUEEZENET)
    assert code == 1 and err == "error: internal error: RuntimeError: bug\n"


def test_json_has_structure_and_no_simplification_unless_asked(capsys):
    code, out, _ = run(capsys, "analyze", str(LIGHT_DIR / "light_bvlc_alexnet.onnx"), "--json")
    assert code == 0
    result = json.loads(out)
    assert result["simplification"] is None
    assert [s["resolution"] for s in result["structure"]["stages"]] == [
        [54, 54], [26, 26], [12, 12], [6, 6]
    ]  # fmt: skip
    assert len(result["structure"]["blocks"]) == 4
    assert all(set(c) == {"index", "anchor", "nodes"} for c in result["structure"]["chains"])


def test_simplify_flag_reports_what_changed(capsys):
    code, out, err = run(capsys, "analyze", SQUEEZENET, "--simplify", "--json")
    assert code == 0 and err == ""
    result = json.loads(out)  # onnxslim printed nothing into the JSON
    simplification = result["simplification"]
    assert simplification["applied"] is True
    assert simplification["nodes_before"] == 105
    assert simplification["nodes_after"] == result["nodes"] < 105
    assert simplification["ops_after"]["Conv"] == simplification["ops_before"]["Conv"] == 26


def test_human_summary_shows_structure_and_simplification(capsys):
    code, out, _ = run(capsys, "analyze", SQUEEZENET, "--simplify")
    assert code == 0
    assert "stages       4  (111x111, 55x55, 27x27, 13x13)" in out
    assert "blocks       12  (cut at MaxPool / Concat)" in out
    assert "simplified   105 -> " in out and "(onnxslim 0.1.98)" in out
