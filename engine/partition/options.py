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
)
"""Every registered algorithm (a test checks this against the registry)."""
NETWORKS = ("3g", "4g", "wifi")


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
        "what the mobile-cloud split minimises",
        choices=("latency", "energy"),
        label="Objective",
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

    def check(self) -> None:
        if self.cloud is not None and self.network is None:
            raise self.invalid("network", "a cloud target needs a network (3g, 4g or wifi)")
