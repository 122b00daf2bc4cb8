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
