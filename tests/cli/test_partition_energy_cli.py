"""``workbench partition ... --objective latency|energy``: every algorithm's result has
``energy_mj`` next to ``makespan_ms``, and bad objective options exit 2 with the field."""

from __future__ import annotations

import json

import pytest
from onnx_builders import LIGHT_DIR

from cli.main import main

VGG19 = str(LIGHT_DIR / "light_vgg19.onnx")
PHONE = "phone-snapdragon835"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("algorithm", ["hope-ilp", "hope-heuristic", "heft", "chain-dp", "blocks"])
def test_energy_first_gives_energy_next_to_makespan(capsys, algorithm):
    results = {}
    for objective in ("latency", "energy"):
        code, out, err = run(capsys, "partition", VGG19, "--target", PHONE, "--algorithm",
                             algorithm, "--objective", objective, "--no-check-execution",
                             "--no-trade-off", "--json")  # fmt: skip
        assert code == 0, err
        results[objective] = json.loads(out)
        assert {"makespan_ms", "energy_mj"} <= set(results[objective])
        assert results[objective]["objective"] == objective
    assert results["energy"]["energy_mj"] <= results["latency"]["energy_mj"]
    assert results["energy"]["energy"]["model"].startswith("predicted")


def test_the_summary_has_an_energy_column_and_the_front(capsys):
    code, out, err = run(capsys, "partition", VGG19, "--target", PHONE, "--algorithm", "heft",
                         "--objective", "energy", "--latency-cap-ms", "200",
                         "--no-check-execution")  # fmt: skip
    assert code == 0, err
    assert "energy mJ" in out.splitlines()[0]
    assert "objective    energy-first within 200 ms; energy predicted" in out
    assert "trade-off    Pareto front (predicted): " in out


def test_a_bad_objective_is_a_usage_error_naming_the_field(capsys):
    code, out, err = run(capsys, "partition", VGG19, "--target", PHONE, "--objective", "cheap")
    assert code == 2 and out == ""
    assert "partition.objective" in err.splitlines()[0]
