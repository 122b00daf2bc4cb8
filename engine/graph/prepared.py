"""The prepared model's types: the model every stage reads and the report of how it was
made (built by :mod:`engine.graph.prepare`, cached by :mod:`engine.graph.prepared_cache`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from engine.graph.ir import Graph
from engine.graph.loader import ModelHeader
from engine.graph.options import DEFAULT_BATCH, DEFAULT_DIM

PREPARE_VERSION = 3
"""Part of the cache key: bump it when preparation changes what it produces (3: nodes
keep the exporter's module scopes for the graph view)."""


@dataclass(frozen=True)
class InputBinding:
    """One input's bound shape, and per dimension where its size came from: ``declared``
    (the model's own number), ``user`` (the input shapes given), or ``default`` (a symbolic
    dimension bound to a documented default; ``symbol`` is its name, if it had one)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    sources: tuple[str, ...]
    symbols: tuple[str | None, ...]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "sources": list(self.sources),
            "symbols": list(self.symbols),
        }


@dataclass(frozen=True)
class PreparationReport:
    """What preparation did, for the page and the CLI."""

    tool: str
    folded: bool
    nodes_before: int
    nodes_after: int
    seconds: float
    inputs: tuple[InputBinding, ...]
    defaults_used: bool
    unknown_shapes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "tool": self.tool,
            "folded": self.folded,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "seconds": self.seconds,
            "inputs": [b.to_dict() for b in self.inputs],
            "defaults_used": self.defaults_used,
            "default_rule": (
                f"symbolic dimensions not given: {DEFAULT_BATCH} on the first axis, "
                f"{DEFAULT_DIM} elsewhere"
            ),
            "unknown_shapes": list(self.unknown_shapes),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> PreparationReport:
        return cls(
            tool=data["tool"],
            folded=data["folded"],
            nodes_before=data["nodes_before"],
            nodes_after=data["nodes_after"],
            seconds=data["seconds"],
            inputs=tuple(
                InputBinding(
                    b["name"],
                    tuple(b["shape"]),
                    b["dtype"],
                    tuple(b["sources"]),
                    tuple(b["symbols"]),
                )
                for b in data["inputs"]
            ),
            defaults_used=data["defaults_used"],
            unknown_shapes=tuple(data["unknown_shapes"]),
            warnings=tuple(data["warnings"]),
        )


@dataclass
class PreparedModel:
    """The model every stage reads. ``model`` is folded, its inputs bound and its shapes
    inferred; ``graph`` is its IR. ``user_nodes`` maps each prepared node to the user's
    node(s) it stands for (by name, the same name unless preparation merged nodes);
    ``folded_nodes`` are the user's nodes folded into constants. ``header`` describes the
    user's model as uploaded; ``key`` identifies this preparation (cache key)."""

    model: onnx.ModelProto
    graph: Graph
    header: ModelHeader
    key: str
    source_sha256: str
    report: PreparationReport
    user_nodes: dict[str, tuple[str, ...]]
    folded_nodes: tuple[str, ...]
    path: Path | None = field(default=None, compare=False)

    @property
    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """The bound shape of every input the caller feeds."""
        return {b.name: b.shape for b in self.report.inputs}

    def user_name(self, node: str) -> str:
        """The user's name for a prepared node (its own when preparation kept it)."""
        names = self.user_nodes.get(node)
        return names[0] if names else node

    def to_dict(self) -> dict:
        """What the analysis stores about the preparation."""
        return {
            "key": self.key,
            "source_sha256": self.source_sha256,
            **self.report.to_dict(),
            "folded_nodes": len(self.folded_nodes),
            "folded_examples": list(self.folded_nodes[:20]),
            "renamed": {k: list(v) for k, v in self.user_nodes.items() if v != (k,)},
        }
