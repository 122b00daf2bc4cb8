"""Our fusion rules by name, in the order the planner tries them."""

from __future__ import annotations

from engine.fusion.rules.graph_edits import RuleFn
from engine.fusion.rules.horizontal_merge import horizontal
from engine.fusion.rules.layer_norms import layer_norm
from engine.fusion.rules.reshape_sinking import sink_reshape
from engine.fusion.rules.sum_chains import sum_to_add

RULES: dict[str, RuleFn] = {
    "horizontal": horizontal,
    "sink-reshape": sink_reshape,
    "sum-to-add": sum_to_add,
    "layer-norm": layer_norm,
}
"""Our rules in the order the planner tries them."""
