"""Layer-wise localisation: compare the intermediate tensors both sides expose.

The layers are the reference's nodes that depend on the model's inputs, in execution
order (nodes that only compute weights, like the light models' ConstantOfShape fills,
are parameters, not layers). For each one whose floating output the candidate also
exposes under the same name, the error is measured with the scale-free checks of the
thresholds; the first layer that fails them is where the candidate starts to differ
(OpenVINO's workbench compares an optimized model with its parent per tensor the same
way, by tensor name).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from engine.accuracy.metrics import TensorMetrics, Thresholds, compare_tensors, json_number, judge
from engine.errors import ProgressFn
from engine.graph.loader import model_inputs
from engine.graph.topology import node_dependencies, unique_node_names

PROGRESS_EVERY = 2000


@dataclass(frozen=True)
class Layer:
    """A reference node and the output tensor compared for it."""

    node: str
    op_type: str
    tensor: str


@dataclass(frozen=True)
class LayerComparison:
    layer: Layer
    metrics: TensorMetrics
    reasons: list[str]

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict:
        m = self.metrics
        return {
            "node": self.layer.node,
            "op_type": self.layer.op_type,
            "tensor": self.layer.tensor,
            "max_abs": json_number(m.max_abs),
            "mean_rel": json_number(m.mean_rel),
            "snr_db": json_number(m.snr_db),
            "cosine": json_number(m.cosine),
            "passed": self.passed,
        }


def model_layers(model: onnx.ModelProto) -> list[Layer]:
    """Every (node, output) of the input-dependent nodes of a sorted model, in order."""
    graph = model.graph
    names = unique_node_names(graph.node)
    live = {v.name for v in model_inputs(model)}
    layers = []
    for name, node in zip(names, graph.node, strict=True):
        if not any(d in live for d in node_dependencies(node)):
            continue
        for out in node.output:
            if out:
                live.add(out)
                layers.append(Layer(name, node.op_type, out))
    return layers


def shared_layers(layers: list[Layer], exposable: Collection[str], outputs: Collection[str]):
    """Layers whose tensor the candidate can expose (graph outputs always count)."""
    available = set(exposable) | set(outputs)
    return [layer for layer in layers if layer.tensor in available]


def compare_layers(
    layers: list[Layer],
    reference: Mapping[str, object],
    candidate: Mapping[str, object],
    thresholds: Thresholds,
    progress: ProgressFn | None = None,
    saturation: float | None = None,
) -> list[LayerComparison]:
    """Compare the floating tensors of ``layers`` present on both sides, in order;
    ``saturation`` as in :func:`~engine.accuracy.metrics.compare_tensors` (inside the
    network a value the candidate's format cannot hold is no divergence of its own: the
    outputs show whether it mattered).

    A tensor whose shape differs between the sides is skipped: the candidate computes
    something else under that name (another layout), not a wrong value of the same thing.
    """
    compared = []
    for i, layer in enumerate(layers):
        if progress and i % PROGRESS_EVERY == 0:
            progress(i / max(len(layers), 1), f"comparing layer {i + 1}/{len(layers)}")
        ref, cand = reference.get(layer.tensor), candidate.get(layer.tensor)
        if not (isinstance(ref, np.ndarray) and isinstance(cand, np.ndarray)):
            continue
        if not _floating(ref) or ref.shape != cand.shape:
            continue
        metrics = compare_tensors(ref, cand, rel_floor=thresholds.rel_floor, saturation=saturation)
        compared.append(LayerComparison(layer, metrics, judge(metrics, thresholds, layer=True)))
    return compared


def first_divergent(comparisons: list[LayerComparison]) -> LayerComparison | None:
    return next((c for c in comparisons if not c.passed), None)


def _floating(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype.name.startswith(("bfloat", "float"))
