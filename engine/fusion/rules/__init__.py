"""Our fusion rules on top of TVM's FuseOps, as graph rewrites on the ONNX model.

Each rule is a function ``model -> (model, rewrites)`` registered by name in ``RULES``;
the planner applies them one at a time and keeps a rule only when the kernel count and
the estimated traffic after FuseOps do not grow (so the plan is never worse than
FuseOps alone).

One module per rule (the paper each comes from in its docstring): ``horizontal_merge``
(``horizontal``), ``reshape_sinking`` (``sink-reshape``), ``sum_chains`` (``sum-to-add``),
``layer_norms`` (``layer-norm``); ``registry`` names them, ``graph_edits`` holds what
they share.
"""

from engine.fusion.rules.graph_edits import Rewrite, RuleFn, RuleNotApplicable
from engine.fusion.rules.horizontal_merge import horizontal
from engine.fusion.rules.layer_norms import LAYER_NORM_OPSET, layer_norm
from engine.fusion.rules.registry import RULES
from engine.fusion.rules.reshape_sinking import sink_reshape
from engine.fusion.rules.sum_chains import sum_to_add

__all__ = [
    "LAYER_NORM_OPSET",
    "RULES",
    "Rewrite",
    "RuleFn",
    "RuleNotApplicable",
    "horizontal",
    "layer_norm",
    "sink_reshape",
    "sum_to_add",
]
