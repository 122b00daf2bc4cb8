"""Stage metadata shared by the web and the workers. The code that runs each stage is in
jobs/runners/ and is imported only by the worker (it pulls in the heavy engine)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageInfo:
    name: str
    label: str
    description: str
    time_limit_s: int


STAGES: dict[str, StageInfo] = {
    info.name: info
    for info in (
        StageInfo(
            "analyze",
            "Analyze",
            "Validate the model, infer shapes, count operators, parameters and FLOPs/MACs.",
            time_limit_s=15 * 60,
        ),
        StageInfo(
            "profile",
            "Profile",
            "Measure whole-model latency with onnxruntime on the worker's CPU "
            "(warm-up, then repeated until the time window is filled).",
            time_limit_s=30 * 60,
        ),
        StageInfo(
            "partition",
            "Partition",
            "Place ops on the target's compute units and order them: HOPE exact and "
            "heuristic, HEFT, chain DP, key-op blocks (and the mobile-cloud split), judged by "
            "one simulator; the best plan's sub-models are run against the whole model.",
            time_limit_s=30 * 60,
        ),
        StageInfo(
            "memory",
            "Memory plan",
            "Plan the intermediate tensors' memory: lifetimes, six planners against the lower "
            "bound (peak live bytes), every plan validated, a memory-aware execution order.",
            time_limit_s=15 * 60,
        ),
        StageInfo(
            "compile",
            "Fuse + compile",
            "Simplify, import into Apache TVM (unsupported nodes fall back to onnxruntime), "
            "plan fusion with every cut explained, build for the worker's CPU, time each "
            "kernel, optionally tune with MetaSchedule; the artifact is downloadable.",
            time_limit_s=90 * 60,
        ),
        StageInfo(
            "accuracy",
            "Accuracy",
            "Run a candidate (fp16 conversion, simplified model, partitioned execution, or "
            "another ONNX file) and onnxruntime fp32 on the same inputs; metrics per output, "
            "the first layer whose error crosses the thresholds, pass or fail.",
            time_limit_s=30 * 60,
        ),
    )
}
STAGE_ORDER: list[str] = list(STAGES)
