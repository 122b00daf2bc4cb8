"""The compile stage's card says what tuning did and which build the whole-model check kept."""

from __future__ import annotations

import copy

from django.template.loader import render_to_string
from test_kernel_figures import RESULT

from frontend.presenters import present

TUNED = {
    **copy.deepcopy(RESULT),
    "latency_ms": 30.4,
    "onnxruntime_latency_ms": 18.0,
    "speed_vs_onnxruntime": 0.59,
    "threads": 2,
    "kernel_count": 4,
    "tvm_nodes": 8,
    "fallback_nodes": [],
    "outputs_match": True,
    "target": {"name": "host"},
    "artifact_files": {},
    "tuning": {
        "enabled": True,
        "trials": 1200,
        "seconds": 536.0,
        "tasks_tuned": 18,
        "records_used": 0,
        "improved": 7,
    },
}


TUNED["fusion"].update(
    kernel_count=4, kernel_count_fuseops=6, traffic_bytes=2e8, traffic_bytes_fuseops=3e8
)


def page(result: dict) -> str:
    context = present("compile", result)
    return render_to_string(context["template"], context)


def test_the_card_names_the_kept_build_and_both_timings():
    result = copy.deepcopy(TUNED)
    result["tuning"]["end_to_end"] = {
        "kept": "default",
        "checked": True,
        "tuned_ms": 33.1,
        "default_ms": 30.2,
        "runs": 40,
        "stored": False,
    }
    html = page(result)
    assert "1200 trials in 536.0 s on 18 kernels, 7 kernels faster than their" in html
    assert "0 tuned kernels applied from stored records" in html
    assert "kept the default schedules: tuned 33.100 ms vs default 30.200 ms" in html
    assert "40 runs each, measured on the worker)" in html

    result["tuning"]["end_to_end"]["stored"] = True
    assert "by an earlier compile of the same tuned kernels" in page(result)


def test_an_unchecked_build_says_so():
    result = copy.deepcopy(TUNED)
    result["tuning"]["end_to_end"] = {"kept": "tuned", "checked": False}
    assert "not run: tuned schedules kept unchecked" in " ".join(page(result).split())
    result["tuning"] = {"enabled": True, "trials": 0, "records_used": 0}  # nothing stored
    assert "Whole-model check" not in page(result) and "MetaSchedule" not in page(result)
    result["tuning"] = {"enabled": True, "trials": 0, "records_used": 3}
    assert "3 tuned kernels applied from stored records" in page(result)


def test_the_card_says_where_the_artifact_runs_how_it_was_timed_and_its_memory():
    result = copy.deepcopy(TUNED)
    result.update(
        backend="onnxruntime",
        backend_choice=[
            {
                "first_node": "conv1",
                "nodes": 12,
                "tvm_ms": 8.2,
                "onnxruntime_ms": 1.1,
                "backend": "onnxruntime",
                "reason": "onnxruntime measured faster on this segment: TVM 8.200 ms, "
                "onnxruntime 1.100 ms (1 thread, as inside a mix), medians on this worker",
            }
        ],
        timing={
            "rounds": 3,
            "runs_per_round": {"compiled": 40},
            "onnxruntime_threads": 1,
            "onnxruntime_ms_by_threads": {"1": 1.08, "2": 1.35},
            "mix": {"latency_ms": 1.5, "onnxruntime_latency_ms": 1.08},
            "peak_memory": {
                "compiled": {"peak_rss_bytes": 300_000_000, "model_bytes": 30_000_000},
                "onnxruntime_1": {"peak_rss_bytes": 200_000_000, "model_bytes": 12_000_000},
            },
        },
    )
    html = " ".join(page(result).split())
    assert "onnxruntime alone" in html
    assert "each in a fresh process, 3 alternating rounds" in html
    assert "best thread setting (1 thread; 1: 1.080 ms, 2: 1.350 ms)" in html
    assert 'TVM and onnxruntime mix</dt><dd id="compile-mix">1.500 ms: not faster' in html
    # with no TVM kernel left, what was timed against the upload is the simplified model
    result["timing"]["mix"]["prepared_only"] = True
    html_prepared = " ".join(page(result).split())
    assert (
        'onnxruntime on the model as this compile simplified it</dt><dd id="compile-mix">'
        "1.500 ms" in html_prepared
    )
    # the baseline says what onnxruntime ran
    result["baseline_model"] = "the model as uploaded"
    html_baseline = " ".join(page(result).split())
    assert 'id="compile-baseline">18.000 ms, on the model as uploaded' in html_baseline
    assert "onnxruntime measured faster on this segment" in html and "<code>conv1</code>" in html
    assert 'id="compile-memory"' in html
    # the artifact is the baseline itself: its speed is 1 by construction, the measured
    # ratio (0.59 here) is two timings of the same thing
    assert "1.00× by construction: the artifact is onnxruntime on the model as uploaded" in html
    assert "differ by machine noise: 0.59×" in html


def test_the_card_says_when_the_prepared_model_ships_and_why():
    result = copy.deepcopy(TUNED)
    why = (
        "onnxruntime on the model as this compile simplified it beat onnxruntime alone on the model as uploaded "
        "by at least 5% in every timing (2.516 against 2.867 ms and 2.398 against 2.833 ms)"
    )
    result.update(
        backend="onnxruntime",
        onnxruntime_as_uploaded=False,
        artifact_reason=why,
        latency_ms=2.398,
        onnxruntime_latency_ms=2.833,
        speed_vs_onnxruntime=2.833 / 2.398,
        timing={
            "rounds": 3,
            "runs_per_round": {"compiled": 40},
            "onnxruntime_threads": 2,
            "onnxruntime_ms_by_threads": {"1": 4.9, "2": 2.833},
            "peak_memory": {},
        },
    )
    html = " ".join(page(result).split())
    assert (
        "onnxruntime alone, on the model as this compile simplified it (measured faster than "
        "the model as uploaded)" in html
    )
    assert f'id="compile-why">{why}' in html
    # its own measured speed, not 1 by construction
    assert "by construction" not in html and "1.18×" in html


def test_the_card_says_which_thread_setting_the_build_ships_with():
    result = copy.deepcopy(TUNED)
    result["timing"] = {
        "rounds": 3,
        "runs_per_round": {"compiled": 40},
        "onnxruntime_threads": 1,
        "onnxruntime_ms_by_threads": {"1": 1.2, "2": 1.4},
        "compiled_threads": 1,
        "compiled_ms_by_threads": {"1": 0.9, "2": 1.1},
        "peak_memory": {},
    }
    html = " ".join(page(result).split())
    assert "the artifact at its best too (1 thread; 1: 0.900 ms, 2: 1.100 ms)" in html


def test_the_card_says_which_conv_layout_ships_and_both_timings():
    result = copy.deepcopy(TUNED)
    result["conv_layout"] = {
        "chosen": "blocked",
        "blockable_convs": 53,
        "block": 32,
        "checked": True,
        "nchw_ms": 684.078,
        "blocked_ms": 311.608,
        "runs": 9,
        "threads": 2,
        "measured": "median of 3 alternating rounds, at least 9 runs each, 2 thread(s)",
        "reason": "blocked 311.608 ms against NCHW 684.078 ms",
    }
    html = " ".join(page(result).split())
    assert "channel blocks of up to 32 (NCHW32c): blocked 311.608 ms vs NCHW 684.078 ms" in html
    assert "at least 9 runs each, 2 thread(s), measured on the worker" in html

    result["conv_layout"] = {
        "chosen": "nchw",
        "blockable_convs": 12,
        "block": 32,
        "checked": False,
        "reason": "an operator cannot take channel blocks: Layouts must have the same size",
    }
    html = " ".join(page(result).split())
    assert "NCHW (an operator cannot take channel blocks: Layouts must have" in html

    result["conv_layout"] = {"chosen": "nchw", "blockable_convs": 0, "checked": False}
    assert "Conv layout" not in page(result)  # no conv to lay out: nothing to say


def test_the_card_gives_the_speed_round_by_round_beside_the_fastest_rounds():
    result = copy.deepcopy(TUNED)
    result.update(backend="tvm", latency_ms=6.58, onnxruntime_latency_ms=6.95)
    result["speed_vs_onnxruntime"] = 6.95 / 6.58
    result["timing"] = {
        "rounds": 6,
        "runs_per_round": {"compiled": 40},
        "onnxruntime_threads": 2,
        "onnxruntime_ms_by_threads": {"2": 6.95},
        "peak_memory": {},
        "timings": [
            {"latency_ms": 6.58, "onnxruntime_latency_ms": 6.95, "round_speed": 1.061},
            {"latency_ms": 9.45, "onnxruntime_latency_ms": 10.95, "round_speed": 1.152},
        ],
    }
    html = " ".join(page(result).split())
    assert (
        "1.06× (each side's fastest round); round by round (the median of the rounds' own "
        "speeds, both sides timed one after the other in each): 1.06×, then 1.15×"
    ) in html


def test_the_card_gives_the_kernel_split_beside_onnxruntime_alone():
    result = copy.deepcopy(TUNED)
    result["kernel_split"] = {
        "tried": True,
        "built": False,
        "kept": False,
        "method": "TVM kernels timed with the VM's instrument",
        "tvm_us": 80348.0,
        "planned_us": 68597.0,
        "onnxruntime_us": 57534.0,
        "moved": [],
        "reason": "the plan (68.597 ms) is no faster than the whole model in onnxruntime "
        "alone (57.534 ms, a plain session at 2 thread(s) on this worker), which ships "
        "before such a mix",
    }
    html = " ".join(page(result).split())
    assert "all on TVM 80348.0 µs of kernels, with the plan 68597.0 µs; the whole model" in html
    assert "in a plain onnxruntime session 57534.0 µs (measured on the worker)." in html
    assert "Not shipped: the plan (68.597 ms) is no faster than the whole model" in html

    del result["kernel_split"]["onnxruntime_us"]  # a compile before it was timed
    assert "plain onnxruntime session" not in page(result)
