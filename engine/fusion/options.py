"""Options of the compile stage (light: the web form and the API validate with it)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import StageOptions, option

RULES = ("horizontal", "sink-reshape", "sum-to-add", "layer-norm")
"""Our fusion rules, in the order the planner tries them (a test checks the registry)."""
CONV_LAYOUTS = ("auto", "nchw", "blocked")
"""The conv layouts (``engine.fusion.conv_layout``); "auto": both built, the faster kept."""


@dataclass(frozen=True)
class CompileOptions(StageOptions):
    stage = "compile"

    threads: int = option(
        0, "threads of the compiled model and of onnxruntime (0: all cores)", min=0, max=256
    )
    tune_minutes: float = option(
        0.0,
        "MetaSchedule tuning budget in minutes (0: our default schedules only)",
        min=0.0,
        max=240.0,
        label="Tuning minutes",
    )
    choose_backends: bool = option(
        True,
        "time every TVM segment against onnxruntime and run each where it is faster; ship "
        "onnxruntime alone when the mix is not faster (never slower than onnxruntime)",
        label="Backend per segment, by measurement",
    )
    conv_layout: str = option(
        "auto",
        "layout of the convolutions in the TVM build: auto builds NCHW and channel blocks "
        "(NCHW32c on AVX-512; large 3x3 convs by Winograd's F(4x4, 3x3) there) and keeps "
        "the faster, measured on the worker; nchw or blocked build only that one",
        choices=CONV_LAYOUTS,
        label="Conv layout",
    )
    substitute: bool = option(
        False,
        "GDPNPU operator substitution: split long reduces and small-channel depthwise convs "
        "into s parts where a microbenchmark on the target measures them faster (adds "
        "seconds of timing per candidate op)",
        label="Operator substitution, by measurement",
    )
    substitute_unit: str = option(
        "",
        "unit of a modeled target whose cost model prices the substitutions (empty: its "
        "first non-CPU unit with an fp32 peak)",
        public=False,
    )
    tune_trials: int = option(
        0, "MetaSchedule trial budget (0: set by the minutes)", min=0, max=100_000, public=False
    )
    rules: tuple[str, ...] = option(RULES, "our fusion rules to try", choices=RULES, public=False)
