"""Placement and scheduling of a model's ops across a target's compute units.

Every algorithm (registered by name in :mod:`engine.partition.registry`) returns a plan, a
unit per op and an order, and one simulator (:mod:`engine.partition.simulator`) turns every
plan into a schedule, so that the algorithms compare fairly.
"""

from engine.partition import (  # noqa: F401 - importing registers the algorithms
    baselines,
    blocks,
    chain_dp,
    graphturbo,
    heft,
    hope_heuristic,
    hope_ilp,
    mobile_cloud,
    nnstretch,
)
from engine.partition.api import PartitionResult, compare_algorithms, partition_model
from engine.partition.problem import (
    Link,
    Network,
    Op,
    PartitionError,
    PartitionProblem,
    Tensor,
    UnitPower,
    problem_from_graph,
)
from engine.partition.registry import PartitionOptions, Plan, algorithm_names
from engine.partition.simulator import Schedule, simulate, validate
from engine.partition.synthetic import random_dag

__all__ = [
    "Link",
    "Network",
    "Op",
    "PartitionError",
    "PartitionOptions",
    "PartitionProblem",
    "PartitionResult",
    "Plan",
    "Schedule",
    "Tensor",
    "UnitPower",
    "algorithm_names",
    "compare_algorithms",
    "partition_model",
    "problem_from_graph",
    "random_dag",
    "simulate",
    "validate",
]
