"""``workbench partition MODEL --target dsa-graphturbo --algorithm graphturbo --json``: the
plan's figures at the top level, and a DSA target plans with GraphTurbo by default."""

from __future__ import annotations

import json

from onnx_builders import LIGHT_DIR

from cli.main import main

RESNET50 = str(LIGHT_DIR / "light_resnet50.onnx")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_graphturbo_json_has_the_figures(capsys):
    code, out, err = run(capsys, "partition", RESNET50, "--target", "dsa-graphturbo",
                         "--algorithm", "graphturbo", "--json")  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)
    assert plan["valid"] is True
    assert {"kernels", "baseline_kernels", "offcore_bytes", "baseline_offcore_bytes",
            "latency_ms", "ablation", "instance_order", "decisions"} <= set(plan)  # fmt: skip
    assert plan["kernels"] < plan["baseline_kernels"]
    assert set(plan["offcore_bytes"]) == {"local_global", "global_dram", "total"}
    assert "predicted" in plan["verdict"]


def test_graphturbo_cannot_be_compared_with_placement_algorithms(capsys):
    code, out, err = run(capsys, "partition", RESNET50, "--target", "dsa-graphturbo",
                         "--algorithms", "graphturbo,heft", "--json")  # fmt: skip
    assert code != 0
    assert "cannot be compared" in err + out
