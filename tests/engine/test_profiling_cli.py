"""``workbench profile``: registered on a local parser the way cli/main.py registers it."""

from __future__ import annotations

import argparse
import json

import pytest
from onnx import helper
from onnx_builders import LIGHT_DIR, build, weight

from engine.profiling.cli import add_commands

SQUEEZENET = str(LIGHT_DIR / "light_squeezenet.onnx")
KEYS = {"target", "measured", "latency_ms", "ops"}


def run(capsys, *argv):
    parser = argparse.ArgumentParser(prog="workbench")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny(save):
    model = build(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Relu", ["h"], ["y"], name="relu"),
        ],
        [("x", [1, 64])],
        [("y", [1, 64])],
        [weight("w", (64, 64))],
    )
    return str(save(model))


def test_measured_on_host(capsys, tiny):
    code, out, err = run(capsys, "profile", tiny, "--target", "host", "--threads", "1",
                         "--window", "0.1", "--json")  # fmt: skip
    assert code == 0 and err == ""
    result = json.loads(out)
    assert set(result) >= KEYS and result["measured"] is True and result["target"] == "host"
    assert [o["name"] for o in result["ops"]] == ["mm", "relu"]
    assert {"name", "op_type", "latency_us"} <= set(result["ops"][0])
    assert result["latency_ms"] > 0
    assert result["environment"]["intra_op_threads"] == 1


def test_predicted_for_a_modeled_target(capsys):
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", "phone-snapdragon835", "--json")
    assert code == 0
    result = json.loads(out)
    assert set(result) >= KEYS and result["measured"] is False
    assert result["model"] == "roofline+efficiency v1"
    assert set(result["units"]) == {"cpu_big", "cpu_little", "gpu", "dsp"}
    assert result["latency_ms"] == pytest.approx(result["units"][result["unit"]])
    assert len(result["ops"]) == 105  # every node, constants included (at 0)
    assert any(f.startswith("dsp cannot run") for f in result["findings"])


def test_a_chosen_unit_that_cannot_run_everything_has_no_total(capsys):
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", "phone-snapdragon835",
                       "--unit", "dsp", "--json")  # fmt: skip
    result = json.loads(out)
    assert code == 0 and result["latency_ms"] is None
    assert {o["status"] for o in result["ops"]} >= {"unsupported", "constant"}


def test_unknown_numbers_stay_unknown(capsys):
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", "dsa-graphturbo", "--json")
    assert code == 0 and json.loads(out)["latency_ms"] is None


def test_text_output_says_predicted(capsys):
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", "cloud-xeon-e5-2620v4")
    assert code == 0
    assert out.splitlines()[0].startswith("target       cloud-xeon-e5-2620v4 / cpu (predicted by")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "nowhere"], "error: unknown target 'nowhere'"),
        (["--target", "phone-snapdragon835", "--unit", "npu"],
         "error: target 'phone-snapdragon835' has no unit 'npu'"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, "profile", SQUEEZENET, *argv, "--json")
    assert code == 2 and out == ""
    assert err.splitlines()[0] == message


def test_a_broken_model_exits_2(capsys, save):
    path = str(save(b"not onnx"))
    code, _, err = run(capsys, "profile", path, "--target", "host", "--json")
    assert code == 2 and err.startswith("error: not an ONNX model")
