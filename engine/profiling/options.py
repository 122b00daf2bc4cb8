"""Options of the profile stage (light: the web form and the API validate with it)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import StageOptions, option

GRAPH_OPTIMIZATIONS = ("disabled", "basic", "extended", "all")
"""onnxruntime graph optimization levels, by the names the engine's configs use."""
GPU_APIS = ("opengl-es-3.1", "opencl", "metal")
"""Backends of the mobile-GPU analysis (:mod:`engine.profiling.gpu_support` has their ops)."""
DEFAULT_GPU_API = "opengl-es-3.1"
"""The TFLite GPU paper's Android backend, chosen there for the widest coverage (L418)."""


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
    gpu_api: str = option(
        DEFAULT_GPU_API,
        "graphics API of the mobile-GPU delegate analysis on a modeled target's GPU unit "
        "(the TFLite GPU paper's Android backend is OpenGL ES 3.1; Metal on iOS)",
        choices=GPU_APIS,
        label="Mobile-GPU API",
    )
    graph_optimization: str = option(
        "extended",
        "onnxruntime graph optimization level of the profiled sessions",
        choices=GRAPH_OPTIMIZATIONS,
        public=False,
    )
