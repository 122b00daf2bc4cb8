"""The onnx node test cases as an external suite: a sample of about 50 with onnxruntime.

The full run (all ~1,900 cases) is in bench/accuracy_bench.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from engine.accuracy.candidates import OrtCandidate
from engine.accuracy.node_suite import node_cases, run_node_suite

CHOSEN = {
    "test_clip": "pass",  # scalar inputs
    "test_castlike_FLOAT16_to_FLOAT8E4M3FN": "pass",  # float8 out: carried through float32
    "test_castlike_FLOAT16_to_INT4": "pass",
    "test_castlike_BFLOAT16_to_FLOAT": "pass",
    "test_attention_4d_fp16": "pass",  # judged to fp16's precision
    "test_string_split_basic": "pass",
    "test_argmax_default_axis_example": "pass",
    "test_identity_sequence": "skip",
    "test_bernoulli": "skip",
    "test_training_dropout": "skip",
    "test_maxunpool_export_with_output_shape": "skip",  # a known onnxruntime deviation
    "test_reduce_max_empty_set_bool": "skip",  # onnxruntime: not defined for bool
    "test_unique_sorted_without_axis": "skip",  # opset newer than onnxruntime knows
}
SAMPLE_SIZE = 50


@pytest.fixture(scope="module")
def sample():
    cases = list(node_cases())
    assert len(cases) > 1500
    step = len(cases) // (SAMPLE_SIZE - len(CHOSEN))
    spread = {case.name for case in cases[::step]}
    return [case for case in cases if case.name in spread or case.name in CHOSEN]


def test_onnxruntime_passes_every_case_it_supports(sample):
    report = run_node_suite("ort", sample)
    counts = report.counts()
    assert counts["cases"] >= SAMPLE_SIZE - 1
    assert counts["failed"] == 0, report.table(status=("fail",))
    assert counts["passed"] > counts["cases"] // 2
    assert counts["passed"] + counts["skipped"] == counts["cases"]
    by_name = {r.name: r for r in report.results}
    assert {name: by_name[name].status for name in CHOSEN} == CHOSEN
    assert all(r.reason for r in report.results if r.status == "skip")
    assert by_name["test_unique_sorted_without_axis"].reason.startswith("cannot import: ")
    assert report.reason_counts("skip")["random outputs (Bernoulli)"] == 1
    table = report.table()
    assert "test_bernoulli" in table and "random outputs (Bernoulli)" in table
    result = report.to_dict()
    assert result["counts"] == counts and len(result["cases"]) == counts["cases"]


def test_the_comparison_catches_a_candidate_one_percent_off(sample):
    def one_percent_off(model):
        inner = OrtCandidate(model)

        class Off:
            name = "off"

            def tensor_names(self):
                return []

            def run(self, feeds, tensors=()):
                return {
                    k: (v * v.dtype.type(1.01) if v.dtype in (np.float32, np.float64) else v)
                    for k, v in inner.run(feeds).items()
                }

            def describe(self):
                return {"name": "off", "kind": "test"}

        return Off()

    report = run_node_suite(one_percent_off, sample)
    failed = {r.name for r in report.results if r.status == "fail"}
    assert "test_clip" in failed and "test_argmax_default_axis_example" not in failed
    assert report.counts()["failed"] >= 10


def test_cases_are_read_from_the_data_file_layout(tmp_path):
    names = ["test_abs", "test_argmax_default_axis_example", "test_string_split_basic"]
    for case in node_cases(names=names):
        directory = tmp_path / case.name / "test_data_set_0"
        directory.mkdir(parents=True)
        onnx.save(case.model, tmp_path / case.name / "model.onnx")
        for kind, values, infos in (
            ("input", case.inputs, case.model.graph.input),
            ("output", case.outputs, case.model.graph.output),
        ):
            for j, (array, info) in enumerate(zip(values, infos, strict=True)):
                tensor = numpy_helper.from_array(np.asarray(array), info.name)
                (directory / f"{kind}_{j}.pb").write_bytes(tensor.SerializeToString())
    cases = list(node_cases(tmp_path))
    assert [c.name for c in cases] == sorted(names)
    report = run_node_suite("ort", cases)
    assert report.counts()["passed"] == 3
