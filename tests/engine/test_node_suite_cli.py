"""``workbench accuracy --node-suite``: the node test cases from the command line."""

from __future__ import annotations

import json

from cli.main import main


def test_cli_runs_chosen_cases_in_a_worker_and_writes_the_table(tmp_path, capsys):
    table = tmp_path / "coverage.md"
    code = main(
        [
            "accuracy",
            "--node-suite",
            "--candidate",
            "ort",
            "--cases",
            "^test_(abs|add|bernoulli)$",
            "--json",
            "--markdown",
            str(table),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    assert report["counts"] == {
        "cases": 3,
        "imported": 2,
        "compiled": 2,
        "ran": 2,
        "passed": 2,
        "failed": 0,
        "skipped": 1,
    }
    assert report["skip_reasons"] == {"random outputs (Bernoulli)": 1}
    assert "| Bernoulli | 1 | 0 | 0 | 1 | skip: random outputs (Bernoulli) |" in table.read_text()


def test_cli_refuses_a_model_with_the_node_suite_and_an_unknown_case(capsys):
    code = main(["accuracy", "model.onnx", "--node-suite", "--candidate", "ort"])
    assert code == 2
    assert "--node-suite takes a candidate name and no model" in capsys.readouterr().err
    code = main(["accuracy", "--node-suite", "--candidate", "ort", "--cases", "^no_such_case$"])
    assert code == 2
    assert "no node test case matches '^no_such_case$'" in capsys.readouterr().err
