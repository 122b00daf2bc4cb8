"""Options of the memory stage (light: the web form and the API validate with it)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import StageOptions, option

PLANNERS = (
    "naive",
    "greedy-objects",
    "mincost-flow",
    "greedy-by-size",
    "greedy-by-breadth",
    "best-fit-search",
)
"""Every registered planner (a test checks this against the registry)."""


@dataclass(frozen=True)
class MemoryOptions(StageOptions):
    stage = "memory"

    planners: tuple[str, ...] = option(
        (), "planners to run (empty: all)", choices=PLANNERS, public=False
    )
    in_place: bool = option(
        False, "let elementwise ops overwrite a dying input (in-place reuse)", label="In place"
    )
    plan_inputs: bool = option(False, "put graph inputs in the arena too", public=False)
    plan_outputs: bool = option(False, "put graph outputs in the arena too", public=False)
    plan_params: bool = option(False, "put weights in the arena too", public=False)
    order_search: bool = option(
        True, "search for an execution order that lowers the peak", label="Order search"
    )
    time_limit_s: float = option(
        1.0, "time limit of each searching planner", min=0.05, max=120.0, public=False
    )
    local_buffer_bytes: int | None = option(
        None,
        "fit a local buffer of this many bytes (GraphTurbo's levels; default: the target "
        "unit's own, if it has one)",
        public=False,
    )
    global_buffer_bytes: int | None = option(
        None, "the global buffer beside that local buffer", public=False
    )
    compare_tvm: bool = option(
        True,
        "also build with TVM and show its static allocation next to our plan",
        label="Compare with TVM",
    )
