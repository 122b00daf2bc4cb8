"""Options of the profile stage (light: the web form and the API validate with it)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import StageOptions, option

GRAPH_OPTIMIZATIONS = ("disabled", "basic", "extended", "all")
"""onnxruntime graph optimization levels, by the names the engine's configs use."""


@dataclass(frozen=True)
class ProfileOptions(StageOptions):
    stage = "profile"

    threads: int = option(
        0,
        "intra-op threads of the measured sessions; 0: onnxruntime's default (one per "
        "physical core)",
        min=0,
        max=256,
        label="Threads (0: all cores)",
    )
    window_s: float = option(
        5.0,
        "seconds of repeated runs per measurement (longer windows repeat better on a "
        "shared machine; 15 s gives per-op figures within 10%)",
        min=0.1,
        max=120.0,
        label="Time window (s)",
    )
    sweeps: bool = option(
        False, "also sweep thread count and batch size (takes longer)", label="Sweeps"
    )
    tvm_kernels: bool = option(
        True,
        "also build the model with TVM and time each of its kernels next to onnxruntime's",
        label="TVM kernels",
    )
    unit: str | None = option(
        None, "unit of a modeled target to report (default: the fastest)", public=False
    )
    graph_optimization: str = option(
        "extended",
        "onnxruntime graph optimization level of the profiled sessions",
        choices=GRAPH_OPTIMIZATIONS,
        public=False,
    )
