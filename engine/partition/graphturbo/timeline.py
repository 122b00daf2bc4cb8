"""The instance graph and a timeline of the chosen instance order, for GraphTurbo's views:
the instance graph coloured by subgraph, per-core / per-cluster / DMA Gantt and the local
buffer's occupancy over time.

The timeline list-schedules the chosen order on the clusters with the replay's per-instance
times (:func:`engine.partition.graphturbo.schedule.replay`'s trace): each instance, in
order, goes to the cluster that frees first once the instances it reads from are done,
and runs on the cores it is bound to there. An instance first launches, then its DMA moves
what is not in the local buffer (inputs, spills, the weights prefetch did not hide), then
it computes; with cross-layer prefetch, the hidden part of its weight load runs on the DMA
lane during the previous instance's compute. The occupancy is the replay's local-buffer
use at each instance's start (every core's buffer pooled). The timeline's end differs from
the replay's predicted latency, which spreads each subgraph's time evenly over the
clusters; both are predicted by the same model.
"""

from __future__ import annotations

from engine.partition.graphturbo.instances import InstanceGraph
from engine.partition.graphturbo.schedule import Chip


def instance_graph(graph: InstanceGraph) -> dict:
    """Instances (subgraph, index within it) and the edges kept between them."""
    return {
        "group": [inst.group for inst in graph.instances],
        "index": [inst.index for inst in graph.instances],
        "edges": [[p, q] for q, inst in enumerate(graph.instances) for p in sorted(inst.inputs)],
    }


def timeline(graph: InstanceGraph, trace: list[dict], chip: Chip, replay_us: float) -> dict:
    """Start, parts and cluster of every instance in the trace's order (module docstring)."""
    per_cluster = chip.cores // chip.clusters
    free = [0.0] * chip.clusters
    finish: dict[int, float] = {}
    rows = []
    for step in trace:
        x = step["instance"]
        inst = graph.instances[x]
        ready = max((finish[p] for p in inst.inputs if p in finish), default=0.0)
        cluster = min(range(chip.clusters), key=lambda c: (max(free[c], ready), c))
        start = max(free[cluster], ready)
        dma_us = step["moved_us"] + step["exposed_weight_us"]
        hidden = step["weight_us"] - step["exposed_weight_us"]
        compute_start = start + step["launch_us"] + dma_us
        end = compute_start + step["compute_us"]
        cores = min(step["cores"], per_cluster)
        rows.append(
            {
                "instance": x,
                "group": inst.group,
                "index": inst.index,
                "cluster": cluster,
                "cores": [cluster * per_cluster, cluster * per_cluster + cores],
                "start_us": round(start, 4),
                "launch_us": round(step["launch_us"], 4),
                "dma_us": round(dma_us, 4),
                "prefetch_us": round(hidden, 4),
                "prefetch_start_us": round(max(0.0, start - hidden), 4),
                "compute_start_us": round(compute_start, 4),
                "end_us": round(end, 4),
                "local_global_bytes": step["local_global_bytes"],
                "global_dram_bytes": step["global_dram_bytes"],
                "occupancy_bytes": step["occupancy_bytes"],
            }
        )
        free[cluster] = end
        finish[x] = end
    return {
        "instances": rows,
        "makespan_us": round(max((r["end_us"] for r in rows), default=0.0), 4),
        "replay_latency_us": round(replay_us, 4),
        "clusters": chip.clusters,
        "cores": chip.cores,
        "cores_per_cluster": per_cluster,
        "local_total_bytes": chip.local_total,
        "how": "the chosen order list-scheduled on the clusters with the replay's per-instance "
        "times (predicted); the replay's latency spreads each subgraph over the clusters",
    }
