"""``workbench partition MODEL --target phone-snapdragon835 --algorithm nn-stretch --out DIR
--json``: the branched ONNX is written into DIR, the JSON has ``valid``, ``candidates``,
``speedup`` and the design at the top level."""

from __future__ import annotations

import json

import onnx
from onnx_builders import LIGHT_DIR

from cli.main import main
from engine.partition.nnstretch.export import node_annotations
from engine.zoo import build


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_nnstretch_writes_the_branched_onnx_and_prints_the_design(capsys, save, tmp_path):
    model = save(build("mobilenet_v2"), "mobilenet_v2.onnx")
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "partition", model, "--target", "phone-snapdragon835",
                         "--algorithm", "nn-stretch", "--out", str(out_dir), "--json")  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)
    assert plan["valid"] is True and plan["algorithm"] == "nn-stretch"
    assert 0 < plan["candidates"] <= 20 and plan["speedup"] > 1
    assert {"design", "candidate_counts", "schedule", "branched_model", "measured"} <= set(plan)
    assert plan["design"]["units"] and plan["design"]["segments"]
    written = out_dir / plan["branched_model"]["file"]
    branched = onnx.load(written)
    onnx.checker.check_model(branched, full_check=True)
    notes = node_annotations(branched)
    assert all("nnstretch.recommended_processor" in n for n in notes.values())
    assert {p.key: p.value for p in branched.metadata_props}["nnstretch.needs_retraining"] == "true"


def test_nnstretch_options_are_flags_and_the_summary_lists_the_counts(capsys, save):
    model = save(build("mobilenet_v2"), "mobilenet_v2.onnx")
    code, out, err = run(capsys, "partition", model, "--target", "phone-snapdragon835",
                         "--algorithm", "nn-stretch", "--stretch-alpha", "1",
                         "--stretch-min-meet", "1")  # fmt: skip
    assert code == 0, err
    assert "NN-Stretch:" in out and "candidates   Eq. 4: communication amortised" in out
    assert "gpu" in out  # one meeting point amortises the GPU's transfers at alpha 1


def test_nnstretch_on_a_model_without_stages_says_why(capsys):
    code, out, err = run(capsys, "partition", str(LIGHT_DIR / "light_bvlc_alexnet.onnx"),
                         "--target", "phone-snapdragon835", "--algorithm", "nn-stretch")  # fmt: skip
    assert code != 0
    assert "nn-stretch" in err
