"""Simplification before analysis: constant folding and shape-op elimination.

Uses onnxslim (pinned 0.1.98). Of the three candidates it is the one that fits here:

- it is pure Python on top of the installed onnx and onnxruntime (which evaluates the
  folded subgraphs), so no second compiled copy of onnx and protobuf comes along, as it
  does with onnxsim's C++ extension;
- ``size_threshold`` keeps large constants computed rather than stored: a model whose
  weights are ``ConstantOfShape`` fills (onnx's light models, the zoo's VGG-16) stays a
  few kB instead of growing by hundreds of MB, which onnxruntime's offline optimizer
  (``optimized_model_filepath``) cannot avoid, as it folds every constant;
- it works on the ``ModelProto`` in memory and keeps standard ONNX ops, where the
  onnxruntime optimizer writes a file tied to its own kernels and, above the basic
  level, to com.microsoft fused ops the later stages (TVM's importer) do not read.

Only folding and elimination run (constant folding, dead-node and common-subexpression
elimination, tying identical weights): onnxslim's graph fusions (Conv+BatchNormalization,
MatMul+Add to Gemm with Reshapes around it) are left out, since the analysis should show
the model's own ops and kernels are the fuse stage's decision. onnxslim keeps its switches in class
attributes, so two simplifications must not run at once in one process (the workers run
one job per process).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import onnx

DEFAULT_MAX_FOLDED_BYTES = 1 << 20
"""Constants larger than this (after folding) stay computed, as in the input."""


@dataclass(frozen=True)
class SimplificationReport:
    """What simplification changed; ``warning`` says why the original was kept."""

    tool: str
    applied: bool
    nodes_before: int
    nodes_after: int
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    warning: str | None = None

    def to_dict(self) -> dict:
        return {
            "tool": self.tool,
            "applied": self.applied,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "ops_before": dict(self.ops_before),
            "ops_after": dict(self.ops_after),
            "seconds": self.seconds,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class SimplifiedModel:
    """The simplified model (the original when simplification failed) and the report."""

    model: onnx.ModelProto
    report: SimplificationReport


def simplify_model(
    model: onnx.ModelProto, *, max_folded_bytes: int = DEFAULT_MAX_FOLDED_BYTES
) -> SimplifiedModel:
    """Fold constants and eliminate shape arithmetic; never modifies ``model``.

    Any failure of the simplifier, or a result the ONNX checker rejects, becomes
    ``report.warning`` and the original model is returned unchanged.
    """
    started = time.perf_counter()
    ops_before = _op_counts(model)
    nodes_before = len(model.graph.node)
    tool = "onnxslim"
    try:
        import onnxslim

        tool = f"onnxslim {onnxslim.__version__}"
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # onnxslim edits its input (it drops initializers from inputs)
        simplified = onnxslim.slim(
            copy, size_threshold=max_folded_bytes, skip_optimizations=["graph_fusion"]
        )
        if simplified is None:
            raise RuntimeError("onnxslim returned no model")
        # IR 3 demands every initializer be a graph input, which onnxslim undoes; IR 4 is
        # the same format without that rule.
        simplified.ir_version = max(simplified.ir_version, 4)
        onnx.checker.check_model(simplified)
    except Exception as e:  # noqa: BLE001 - a third-party optimizer may fail in any way
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        return SimplifiedModel(
            model,
            SimplificationReport(
                tool=tool,
                applied=False,
                nodes_before=nodes_before,
                nodes_after=nodes_before,
                ops_before=ops_before,
                ops_after=ops_before,
                seconds=_since(started),
                warning=f"simplification failed, the original model is analyzed: {reason}",
            ),
        )
    return SimplifiedModel(
        simplified,
        SimplificationReport(
            tool=tool,
            applied=True,
            nodes_before=nodes_before,
            nodes_after=len(simplified.graph.node),
            ops_before=ops_before,
            ops_after=_op_counts(simplified),
            seconds=_since(started),
        ),
    )


def _op_counts(model: onnx.ModelProto) -> dict[str, int]:
    return dict(Counter(n.op_type for n in model.graph.node).most_common())


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 4)
