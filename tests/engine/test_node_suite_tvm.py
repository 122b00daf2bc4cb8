"""The onnx node test cases with the TVM candidate, each case in a worker process.

The full run (all ~1,900 cases) is ``python bench/accuracy_bench.py --node-suite tvm``;
here a few cases that pass, that TVM cannot import, and whose output differs, and
factories that crash or hang a worker.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from engine.accuracy.candidates import make_candidate
from engine.accuracy.errors import CandidateError
from engine.accuracy.node_suite import Isolation, NodeCase, node_cases, run_node_suite

CHOSEN = [
    "test_abs",
    "test_conv_with_strides_padding",
    "test_softmax_axis_0",
    "test_softmax_axis_0_expanded",  # the function body: six nodes, one TVM segment
    "test_shape",  # the VM returns a shape, not a tensor: an int64 vector
    "test_castlike_DOUBLE_to_FLOAT",  # its 'like' input is empty: compiled for that shape
    "test_lstm_defaults",  # TVM's frontend has no LSTM converter: onnxruntime runs it
    "test_top_k",  # the converter refuses a K that is an input
    "test_bernoulli",  # random outputs: skipped before a worker sees it
]


@pytest.fixture(scope="module")
def cases() -> list[NodeCase]:
    chosen = list(node_cases(names=CHOSEN))
    abs_case = next(c for c in chosen if c.name == "test_abs")
    # A build that gives other values than expected: the expectation is off by one.
    off = NodeCase(
        "test_abs_expected_off", abs_case.model, abs_case.inputs, [abs_case.outputs[0] + 1]
    )
    return [*chosen, off]


def test_tvm_suite_counts_each_stage_and_says_why(cases):
    report = run_node_suite("tvm", cases, options={"threads": 1}, isolation=Isolation(60))
    by_name = {r.name: r for r in report.results}
    outcome = {name: (r.status, r.stage) for name, r in by_name.items()}
    assert outcome == {
        "test_abs": ("pass", "compare"),
        "test_abs_expected_off": ("fail", "compare"),
        "test_conv_with_strides_padding": ("pass", "compare"),
        "test_softmax_axis_0": ("pass", "compare"),
        "test_softmax_axis_0_expanded": ("pass", "compare"),
        "test_shape": ("pass", "compare"),
        "test_castlike_DOUBLE_to_FLOAT": ("pass", "compare"),
        "test_lstm_defaults": ("skip", "import"),
        "test_top_k": ("skip", "import"),
        "test_bernoulli": ("skip", ""),
    }, report.table()
    assert report.counts() == {
        "cases": 10,
        "imported": 7,
        "compiled": 7,
        "ran": 7,
        "passed": 6,
        "failed": 1,
        "skipped": 3,
    }
    assert by_name["test_lstm_defaults"].reason == (
        "not compiled, fell back: TVM's ONNX frontend has no converter for LSTM"
    )
    assert "TopK k must be a constant" in by_name["test_top_k"].reason
    assert by_name["test_abs_expected_off"].reason.startswith("'y': max_rel ")
    assert by_name["test_softmax_axis_0_expanded"].op_type == "Softmax (expanded)"
    assert report.reason_counts("skip") == {
        "not compiled, fell back: TVM has no converter for the operator": 1,
        "not compiled, fell back: TVM import failed: ValueError: TopK k must be a constant": 1,
        "random outputs (Bernoulli)": 1,
    }
    assert report.reason_counts("fail") == {"wrong values": 1}
    table = report.markdown()
    assert "| LSTM | 1 | 0 | 0 | 1 | skip: not compiled, fell back: TVM has no converter" in table
    assert "| Abs | 2 | 1 | 1 | 0 | fail: wrong values |" in table
    assert "| test_abs_expected_off | compare | 'y': max_rel" in table


def crashing_ort(model):
    """onnxruntime, except that building a Neg aborts the process and a Sub hangs."""
    op = model.graph.node[0].op_type
    if op == "Neg":
        print("about to abort", file=sys.stderr, flush=True)
        os.abort()
    if op == "Sub":
        time.sleep(600)
    return make_candidate("ort", model)


def test_a_crash_or_a_hang_costs_one_case_and_the_run_goes_on():
    cases = list(node_cases(names=["test_abs", "test_neg", "test_sub", "test_add", "test_exp"]))
    # Two workers: one waits out the hang while the other goes on with the rest.
    report = run_node_suite(crashing_ort, cases, isolation=Isolation(timeout_s=3, workers=2))
    by_name = {r.name: r for r in report.results}
    assert [r.name for r in report.results] == [c.name for c in cases]
    assert {n: r.status for n, r in by_name.items()} == {
        "test_abs": "pass",
        "test_add": "pass",
        "test_exp": "pass",
        "test_neg": "fail",
        "test_sub": "fail",
    }
    assert by_name["test_neg"].reason == (
        "crashed: signal 6 (SIGABRT) during compile (last output: about to abort)"
    )
    # Before ending it, the worker is asked where it is stuck.
    assert by_name["test_sub"].reason.startswith(
        "timed out after 3 s during compile at tests/engine/test_node_suite_tvm.py:"
    )
    assert "crashing_ort, from engine/accuracy/node_suite.py:" in by_name["test_sub"].reason
    assert by_name["test_sub"].seconds >= 3
    assert report.reason_counts("fail") == {
        "crashed: signal 6 (SIGABRT) during compile": 1,
        "timed out after 3 s during compile": 1,
    }
    assert report.counts()["imported"] == 5 and report.counts()["ran"] == 3


def test_a_factory_a_worker_cannot_receive_is_refused_up_front():
    cases = list(node_cases(names=["test_abs"]))
    with pytest.raises(CandidateError, match="cannot be sent to a worker process"):
        run_node_suite(lambda model: make_candidate("ort", model), cases, isolation=Isolation())
