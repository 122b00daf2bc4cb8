"""The accuracy page's fp16 table, from a real ``fp16-scaled`` report of an overflowing MLP."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine"))

from django.template.loader import render_to_string  # noqa: E402
from onnx_builders import overflow_model  # noqa: E402

from engine.accuracy.options import AccuracyOptions  # noqa: E402
from engine.accuracy.stage import run  # noqa: E402
from engine.graph.prepare import prepare_model  # noqa: E402
from frontend.figures.accuracy import fp16_variant_table  # noqa: E402
from frontend.presenters import present  # noqa: E402


def test_table_lists_the_three_variants_and_the_factors():
    prepared = prepare_model(overflow_model())
    options = AccuracyOptions(candidate="fp16-scaled")
    report = run(prepared, None, options, lambda f, m: None).to_dict()
    table = fp16_variant_table(report)
    assert [r["variant"] for r in table["rows"]] == ["fp16-plain", "fp16-keep-fp32", "fp16-scaled"]
    verdicts = {r["variant"]: r["verdict"] for r in table["rows"]}
    assert verdicts["fp16-plain"] == "fail" and verdicts["fp16-scaled"] == "pass"
    assert table["overflows_avoided"] >= 2
    scaled = [f for f in table["factors"] if f["kind"] == "scale"]
    assert scaled and all(f["factor"].startswith("2^-") for f in scaled)
    context = present("accuracy", report)
    html = " ".join(render_to_string(context["template"], context).split())
    assert 'id="accuracy-fp16-variants"' in html and 'id="accuracy-scale-factors"' in html
    assert "<td>fp16-plain</td><td>fail</td>" in html
    assert "5-6: 1/(K rupw2(m^2)), K=64" in html


def test_no_table_for_other_candidates():
    assert fp16_variant_table({"verdict": "pass", "outputs": []}) is None
