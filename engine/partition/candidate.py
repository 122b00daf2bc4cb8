"""The partitioned execution as an accuracy candidate: the per-unit sub-models chained in
plan order with onnxruntime. Boundary tensors are exposed, so the accuracy check can tell
which cut (if any) went wrong."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import onnx

from engine.partition.execute import run_submodels
from engine.partition.export import SubModelSet, split_model


class PartitionedCandidate:
    def __init__(self, subs: SubModelSet, name: str = "partitioned") -> None:
        self.name = name
        self.subs = subs
        self._boundaries = [
            t for sub in subs.submodels for t in sub.outputs if t not in subs.outputs
        ]

    def tensor_names(self) -> Collection[str]:
        return list(self._boundaries)

    def run(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str] = ()) -> dict:
        values = run_submodels(self.subs, dict(feeds))
        wanted = list(self.subs.outputs) + [t for t in tensors if t in values]
        return {name: values[name] for name in wanted}

    def describe(self) -> dict:
        return {
            "name": self.name,
            "kind": "partitioned",
            "submodels": [
                {"unit": s.unit, "nodes": len(s.model.graph.node)} for s in self.subs.submodels
            ],
            "boundary_tensors": len(self._boundaries),
        }


def partitioned_candidate(
    model: onnx.ModelProto, *, placement: Mapping[str, str], **_options
) -> PartitionedCandidate:
    """``placement`` maps node names to units, e.g. the best plan of a partition result."""
    return PartitionedCandidate(split_model(model, placement))
