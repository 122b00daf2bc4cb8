"""The per-node figures the graph view colours by, and their values per group."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    """A per-node figure the view can colour by.

    ``values`` is aligned with the node list or keyed by node name (missing: unknown);
    ``aggregate`` gives a group's value: "sum", "mode", "min", "max" or a function of
    member indices.
    """

    label: str
    kind: str = "continuous"  # or "categorical"
    values: Sequence[Any] | Mapping[str, Any] = ()
    unit: str = ""
    scale: str = "log"  # continuous colour scale: "log" or "linear"
    aggregate: str | Callable[[list[int]], Any] = "sum"


def builtin_metrics(nodes: Sequence[dict]) -> dict[str, Metric]:
    flops = [node.get("flops") for node in nodes]
    moved = [
        None
        if node.get("bytes_read") is None and node.get("bytes_written") is None
        else (node.get("bytes_read") or 0) + (node.get("bytes_written") or 0)
        for node in nodes
    ]

    def intensity(members: list[int]) -> float | None:
        work = sum(flops[v] or 0 for v in members)
        traffic = sum(moved[v] or 0 for v in members)
        return round(work / traffic, 3) if traffic else None

    def heaviest_op(members: list[int]) -> str:
        return nodes[max(members, key=lambda v: (flops[v] or 0, -v))]["op_type"]

    return {
        "op_type": Metric(
            "op type", "categorical", [node["op_type"] for node in nodes], aggregate=heaviest_op
        ),
        "flops": Metric("FLOPs", values=flops),
        "bytes": Metric("bytes moved", values=moved, unit="B"),
        "params": Metric("parameters", values=[node.get("params") for node in nodes]),
        "intensity": Metric(
            "FLOPs per byte",
            values=[node.get("intensity") for node in nodes],
            aggregate=intensity,
        ),
    }


def metric_payload(
    key: str, metric: Metric, names: list[str], members_of: list[list[int]] | None
) -> dict:
    """A metric as the view reads it: values per node and per group (``members_of``; with
    None the browser aggregates them, by ``aggregate``), categories as codes."""
    if isinstance(metric.values, Mapping):
        values = [metric.values.get(name) for name in names]
    else:
        values = list(metric.values)
        if len(values) != len(names):
            raise ValueError(f"metric {key!r} has {len(values)} values for {len(names)} nodes")
    aggregate = metric.aggregate
    if members_of is None:
        if callable(aggregate):
            raise ValueError(f"metric {key!r}: the browser cannot aggregate by a function")
        group_values = None
    elif aggregate == "sum":
        group_values = [_sum([values[v] for v in members]) for members in members_of]
    elif aggregate == "mode":
        group_values = [_mode([values[v] for v in members]) for members in members_of]
    elif aggregate in ("min", "max"):  # e.g. a group's worst layer by SNR
        pick = min if aggregate == "min" else max
        group_values = [
            pick((values[v] for v in members if values[v] is not None), default=None)
            for members in members_of
        ]
    elif callable(aggregate):
        group_values = [aggregate(members) for members in members_of]
    else:
        raise ValueError(f"metric {key!r}: unknown aggregate {aggregate!r}")
    payload = {
        "key": key,
        "label": metric.label,
        "kind": metric.kind,
        "unit": metric.unit,
        "scale": metric.scale,
        "aggregate": aggregate if isinstance(aggregate, str) else "custom",
    }
    if metric.kind == "categorical":
        counts = Counter(value for value in values if value is not None)
        categories = [value for value, _count in counts.most_common()]
        code = {value: index for index, value in enumerate(categories)}
        payload["categories"] = categories
        payload["values"] = [code.get(value) for value in values]
        if group_values is not None:
            payload["group_values"] = [code.get(value) for value in group_values]
    else:
        payload["values"] = values
        if group_values is not None:
            payload["group_values"] = group_values
    return payload


def _sum(values: list) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _mode(values: list) -> Any:
    counts = Counter(value for value in values if value is not None)
    return counts.most_common(1)[0][0] if counts else None
