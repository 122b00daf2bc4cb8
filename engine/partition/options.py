"""Options of the partition stage (light: the web form and the API validate with it)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import StageOptions, option

ALGORITHMS = (
    "hope-ilp",
    "hope-heuristic",
    "heft",
    "chain-dp",
    "blocks",
    "single-unit",
    "mobile-cloud",
    "graphturbo",
    "nn-stretch",
)
"""Every registered algorithm (a test checks this against the registry)."""
NETWORKS = ("3g", "4g", "wifi")
OBJECTIVES = ("latency", "energy", "weighted")
"""The objectives of :mod:`engine.partition.objective` (a test checks they agree)."""


@dataclass(frozen=True)
class PartitionStageOptions(StageOptions):
    stage = "partition"

    algorithms: tuple[str, ...] = option(
        (),
        "algorithms to compare (empty: all that apply to the target)",
        choices=ALGORITHMS,
        label="Algorithms",
    )
    time_limit_s: float = option(
        20.0, "time limit of each algorithm's search", min=0.1, max=600.0, label="Time limit (s)"
    )
    objective: str = option(
        "latency",
        "what every algorithm minimises: the makespan, the predicted energy, or "
        "alpha x latency + (1 - alpha) x energy (each normalised by a lower bound)",
        choices=OBJECTIVES,
        label="Objective",
    )
    alpha: float = option(
        0.5,
        "weight of latency in the weighted objective (1: latency only, 0: energy only)",
        min=0.0,
        max=1.0,
        label="Latency weight (weighted)",
    )
    latency_cap_ms: float | None = option(
        None,
        "latency cap: plans must finish within it (with the energy objective: the least "
        "energy within the cap); empty: no cap",
        min=1e-6,
        max=1e9,
        label="Latency cap (ms)",
    )
    trade_off: bool = option(
        True,
        "sweep the objective's weights to draw the energy-vs-latency trade-off (Pareto front)",
        label="Energy-latency trade-off",
    )
    cloud: str | None = option(
        None, "cloud target for the mobile-cloud split (a target name)", public=False
    )
    network: str | None = option(
        None,
        "also consider offloading to the cloud over this network",
        choices=NETWORKS,
        label="Offload over",
    )
    check_execution: bool = option(
        True,
        "run the best plan's sub-models in onnxruntime against the whole model",
        label="Execution check",
    )

    stretch_alpha: float = option(
        0.1,
        "NN-Stretch Eq. 4: a segment's communication at most alpha x its latency",
        min=1e-3,
        max=10.0,
        label="NN-Stretch alpha (communication)",
    )
    stretch_beta: float = option(
        1.1,
        "NN-Stretch Eq. 5: a branch at most beta x the original segment's latency",
        min=0.1,
        max=10.0,
        label="NN-Stretch beta (straggler)",
    )
    stretch_ratio_floor: float = option(
        0.5,
        "NN-Stretch: the least depth and width ratio of a branch",
        min=0.125,
        max=1.0,
        label="NN-Stretch ratio floor",
    )
    stretch_min_meet: int = option(
        2,
        "NN-Stretch: the least number of meeting points",
        min=1,
        max=64,
        label="NN-Stretch meeting points at least",
    )
    stretch_measure: bool = option(
        True,
        "NN-Stretch on a measured target: time the branches in onnxruntime",
        label="NN-Stretch: measure",
        public=False,
    )

    def check(self) -> None:
        if self.cloud is not None and self.network is None:
            raise self.invalid("network", "a cloud target needs a network (3g, 4g or wifi)")
