"""The dashboard's answers per run: the verdicts a hurried engineer looks for (faster than
onnxruntime? does memory sit near its bound? still accurate? does partitioning pay?), each
labelled measured or predicted, and for a failure what to do about it."""

from __future__ import annotations

from frontend.units import format_figure

WHAT_TO_DO = {
    "time_limit": "the stage ran past its time limit: choose lighter options (a shorter "
    "window, fewer tuning trials), or raise WORKBENCH_TIME_LIMIT_<STAGE> for this worker",
    "memory_limit": "the stage outgrew the worker's memory limit: try smaller input shapes, "
    "or raise WORKBENCH_STAGE_MEMORY_BYTES",
    "worker_lost": "the worker stopped while running it (killed or restarted): retry",
    "invalid_model": "the model cannot be read or run as uploaded: check it with onnx.checker "
    "or re-export it",
    "not_applicable": "this stage does not apply to the chosen target: pick another target",
    "cancelled": "retry to run the stages that did not finish",
    "internal_error": "an error on our side: retry, and report it if it happens again",
}
DEFAULT_TO_DO = "see the run page for the stage's message; retry once it is fixed"


def verdicts(figures: dict[str, dict]) -> list[dict]:
    """The run's headline answers, in the order they are asked. ``figures``: key -> figure
    dict (engine.report.headlines). Each answer: its name, text, tone (good/bad/neutral)
    and what it is (measured, predicted, counted)."""
    out = []

    def add(name: str, key: str, text: str, tone: str) -> None:
        figure = figures[key]
        out.append({"name": name, "text": text, "tone": tone, "basis": figure["basis"]})

    def value(key: str):
        return (figures.get(key) or {}).get("value")

    speed = value("compile.speed_vs_onnxruntime")
    if speed is not None:
        add(
            "speed",
            "compile.speed_vs_onnxruntime",
            f"{speed:.2f}x onnxruntime",
            "good" if speed >= 1.0 else "bad",
        )
    latency = value("profile.latency_ms")
    if latency is not None:
        kind = "measured" if figures["profile.latency_ms"]["measured"] else "predicted"
        add("latency", "profile.latency_ms", f"{latency:.3f} ms {kind}", "neutral")
    ratio = value("memory.arena_vs_bound")
    if ratio is not None:
        arena = format_figure(value("memory.arena_bytes"), "bytes")
        add(
            "memory",
            "memory.arena_vs_bound",
            f"{arena}, {ratio:.2f}x the bound",
            "good" if ratio <= 1.05 else "neutral",
        )
    verdict = value("accuracy.verdict")
    if verdict is not None:
        cosine = value("accuracy.cosine")
        detail = f" (cosine {cosine:.6f})" if cosine is not None else ""
        add(
            "accuracy",
            "accuracy.verdict",
            f"{verdict}{detail}",
            "good" if verdict == "pass" else "bad",
        )
    gain = value("partition.speedup")
    if gain is not None:
        add(
            "partition",
            "partition.speedup",
            f"{gain:.2f}x over one unit (predicted)",
            "good" if gain > 1.05 else "neutral",
        )
    macs, params = value("analyze.macs"), value("analyze.params")
    if not out and macs is not None and params is not None:
        add(
            "size",
            "analyze.macs",
            f"{format_figure(macs, '')} MACs, {format_figure(params, '')} parameters",
            "neutral",
        )
    return out


def what_to_do(error_code: str) -> str:
    return WHAT_TO_DO.get(error_code, DEFAULT_TO_DO)
