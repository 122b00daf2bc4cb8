"""How each stage's result appears on a run page: a template and its figures.

A new stage registers a Presenter here; the run page needs no change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from frontend.figures.analysis import analysis_figures


@dataclass(frozen=True)
class Presenter:
    template: str
    figures: Callable[[dict], dict[str, dict]] = field(default=lambda result: {})
    context: Callable[[dict], dict] = field(default=lambda result: {})


def _top_nodes(analysis: dict, n: int = 15) -> dict:
    nodes = [node for node in analysis.get("node_list", []) if node.get("flops")]
    return {"top_nodes": sorted(nodes, key=lambda node: -node["flops"])[:n]}


PRESENTERS: dict[str, Presenter] = {
    "analyze": Presenter("workbench/stages/analyze.html", analysis_figures, _top_nodes),
    "profile": Presenter("workbench/stages/profile.html"),
}


def present(stage: str, result: dict | None) -> dict | None:
    """Template, figures and extra context for one stage result (None if nothing to show)."""
    presenter = PRESENTERS.get(stage)
    if presenter is None or not result:
        return None
    return {
        "stage": stage,
        "template": presenter.template,
        "result": result,
        "figures": presenter.figures(result),
        **presenter.context(result),
    }
