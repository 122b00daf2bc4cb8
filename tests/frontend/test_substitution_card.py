"""The compile card shows the operator substitutions: where timed, before/after, why."""

from __future__ import annotations

import copy

from test_compile_page import TUNED, page

SUBSTITUTION = {
    "enabled": True,
    "timing": "measured on AMD EPYC, median of 15 runs, 1 thread(s)",
    "rules": ["reduce-split", "depthwise-spatial"],
    "split_factors": [2, 4, 8, 16],
    "margin": 0.05,
    "candidates": [
        {
            "node": "blur",
            "op_type": "Conv",
            "rule": "depthwise-spatial",
            "input_shape": [1, 3, 128, 160],
            "original_ms": 0.9,
            "tried": [
                {"s": 2, "ms": 0.8, "max_abs_error": 0.0, "exact": True},
                {"s": 4, "ms": 0.5, "max_abs_error": 2.9e-6, "exact": True},
            ],
            "chosen_s": 4,
            "decision": "s=4",
            "reason": "faster: 1.80x at s=4",
        },
        {
            "node": "sum",
            "op_type": "ReduceSum",
            "rule": "reduce-split",
            "input_shape": [1, 3, 128, 160],
            "original_ms": None,
            "tried": [{"s": 2, "ms": None, "max_abs_error": 0.0, "exact": True, "why": "?"}],
            "chosen_s": None,
            "decision": "kept original",
            "reason": "the original's time is unknown (ReduceSum: gpu does not run ReduceSum)",
        },
    ],
    "kept": 1,
    "before_ms": 0.9,
    "after_ms": 0.5,
}


def test_the_card_shows_where_each_substitution_was_timed_and_what_was_kept():
    html = page({**copy.deepcopy(TUNED), "substitution": SUBSTITUTION})
    assert "Times measured on AMD EPYC, median of 15 runs, 1 thread(s)" in html
    assert "Kept 1: 0.900 ms before, 0.500 ms after." in html
    assert "faster: 1.80x at s=4" in html
    assert "2: unknown" in html  # an unknown time is never shown as 0
    assert "gpu does not run ReduceSum" in html


def test_the_card_says_nothing_of_substitution_when_it_was_off():
    html = page({**copy.deepcopy(TUNED), "substitution": {"enabled": False}})
    assert "Operator substitution" not in html


def test_the_card_says_why_substitution_did_not_run_for_a_remote_device():
    note = {"enabled": False, "note": "not run: the wrong hardware"}
    html = page({**copy.deepcopy(TUNED), "substitution": note})
    assert "not run: the wrong hardware" in html
