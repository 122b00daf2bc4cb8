"""``workbench accuracy MODEL --candidate fp16-scaled --json``: the verdict, the recorded
scale factors and the three fp16 variants with the overflows scaling avoided."""

from __future__ import annotations

import json

from onnx_builders import overflow_model

from cli.main import main


def test_fp16_scaled_passes_where_plain_fp16_overflows(capsys, save):
    code = main(["accuracy", save(overflow_model()), "--candidate", "fp16-scaled", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["verdict"] == "pass"
    factors = result["candidate"]["scaling"]["factors"]
    assert [f["kind"] for f in factors].count("restore") == 1
    assert all(f["factor"] == 2.0 ** f["log2"] for f in factors)  # powers of two
    variants = result["fp16_variants"]["variants"]
    assert variants["fp16-plain"]["verdict"] == "fail"
    assert variants["fp16-scaled"]["overflowed_tensors"] == 0
    assert result["fp16_variants"]["overflows_avoided"] >= 2
    assert result["fp16_variants"]["measured"].startswith("onnxruntime on this CPU")
