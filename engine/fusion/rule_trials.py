"""Choosing the fusion: the unfused kernels, TVM's FuseOps, then each of our rules
(``engine.fusion.rules``), kept only where it adds no kernels and no traffic."""

from __future__ import annotations

from engine.errors import EngineError
from engine.fusion import delegate, plan, rules
from engine.fusion.build import unfused_calls
from engine.fusion.importer import NodeImportError
from engine.fusion.segment_builds import SegmentFailed, fuse_all
from engine.fusion.target import TargetSpec


def plan_rules(model, fallback, spec, names, origin, report):
    """Stages: unfused, FuseOps, then each of our rules, kept if it does not make it worse.
    A segment TVM cannot fuse as it is raises :class:`SegmentFailed` (the compile hands it
    to onnxruntime); a rule whose result TVM cannot fuse is rejected."""
    fusion = plan.FusionPlan()
    count, traffic, fused = _evaluate(model, fallback, spec)
    node_order = [n.name for n in model.graph.node]
    unfused = [c for f in fused for c in unfused_calls(f, node_order)]
    fusion.stages.append(plan.FusionStage("unfused", len(unfused), plan.traffic(unfused)))
    fusion.stages.append(plan.FusionStage("fuseops", count, traffic))
    for name in names:
        rule = rules.RULES.get(name)
        if rule is None:
            raise EngineError(f"unknown fusion rule '{name}'", code="usage")
        report(0.2, f"trying fusion rule {name}")
        try:
            candidate, rewrites = rule(model)
        except rules.RuleNotApplicable as e:
            fusion.stages.append(plan.FusionStage(name, count, traffic, note=f"not applied: {e}"))
            continue
        if not rewrites:
            fusion.stages.append(plan.FusionStage(name, count, traffic, note="nothing to rewrite"))
            continue
        try:
            new_count, new_traffic, _ = _evaluate(candidate, fallback, spec)
        except (NodeImportError, SegmentFailed) as e:
            fusion.stages.append(
                plan.FusionStage(name, count, traffic, False, len(rewrites), f"rejected: {e}")
            )
            continue
        if new_count > count or new_traffic > traffic:
            note = f"rejected: {new_count} kernels / {new_traffic} bytes would be worse"
            fusion.stages.append(plan.FusionStage(name, count, traffic, False, len(rewrites), note))
            continue
        model, count, traffic = candidate, new_count, new_traffic
        for rewrite in rewrites:
            for new in rewrite["into"]:
                replaced = rewrite.get("origin", {}).get(new, rewrite["nodes"])
                origin[new] = [n for old in replaced for n in origin.get(old, [old])]
        fusion.rewrites += rewrites
        fusion.stages.append(plan.FusionStage(name, count, traffic, True, len(rewrites)))
    return model, fusion, origin


def _evaluate(model, fallback, spec: TargetSpec) -> tuple[int, int, list]:
    """Kernel count and traffic after FuseOps over the model's TVM segments."""
    node_order = [n.name for n in model.graph.node]
    segments = delegate.partition(model, set(fallback))
    fused = list(fuse_all(segments, spec, node_order, weights=False).values())
    count = sum(len(f.calls) for f in fused)
    traffic = sum(plan.traffic(f.calls) for f in fused)
    return count, traffic, fused
