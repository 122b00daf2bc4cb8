"""GraphTurbo (OSDI '23): subgraph scheduling for a domain-specific accelerator.

:func:`~engine.partition.graphturbo.planner.plan_graphturbo` is the entry point; the
partition stage runs it for the ``graphturbo`` algorithm on a target with a DSA unit.
"""

from engine.partition.graphturbo.planner import plan_graphturbo

__all__ = ["plan_graphturbo"]
