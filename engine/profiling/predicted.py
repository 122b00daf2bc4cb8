"""Predicted profiling: per-op latency on every compute unit of a target, from its cost model.

Nothing here is measured: every number is labelled with the cost model that produced it
(:data:`engine.targets.costmodel.MODEL_NAME`). Unsupported ops and ops whose numbers are
unknown are marked per unit, never dropped; nodes with only constant inputs are marked
``constant`` (0 per inference: runtimes fold them at load time). A unit's whole-model
latency is the sum over the ops it can run, and ``complete`` says whether that is all.

Each op's energy on each unit is its predicted latency times the unit's power above idle,
``T x (P_active - P_idle)`` (DNNTune's energy analyzer, thesis 3.4.1, L526 and L786-788),
from the target's ``power`` section; a unit without both figures gives ``None``, never 0,
and the notes name it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.errors import ProgressFn
from engine.graph.costs import cost_node
from engine.graph.ir import PROGRESS_EVERY, Graph
from engine.targets.costmodel import CostModel, OpEstimate, op_dtype, op_variant
from engine.targets.schema import TargetProfile

_CONSTANT = OpEstimate(0.0, "constant", reason="computed once at load time (constant inputs)")
_NONDETERMINISTIC = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)


@dataclass
class PredictedOp:
    """One node: its work and, per unit, the estimate (``latency_us`` None unless ok)."""

    name: str
    op_type: str
    variant: str | None
    dtype: str
    flops: int | None
    bytes: int | None
    intensity: float | None
    latency_us: dict[str, float | None]
    status: dict[str, str]
    bound: dict[str, str | None]
    energy_uj: dict[str, float | None]


ENERGY_MODEL = "predicted: latency x (active_w - idle_w) of the unit, from the target's power"


@dataclass
class UnitPrediction:
    """The whole model on one unit, running every op it can."""

    name: str
    kind: str
    latency_ms: float | None
    complete: bool
    ops_ok: int
    unsupported: list[str]
    unknown: list[str]
    not_costed: list[str]
    energy_j: float | None
    calibrated: bool
    peak_gflops: float | None
    mem_bw_gbps: float | None


@dataclass
class PredictedProfile:
    """Result of :func:`predict_profile`; ``measured`` is always False."""

    target: str
    target_version: int
    model: str
    dtype: str
    units: list[UnitPrediction]
    best_unit: str | None
    ops: list[PredictedOp]
    notes: list[str]
    measured: bool = False
    energy_model: str = ENERGY_MODEL
    energy_unknown_units: list[str] | None = None

    def unit(self, name: str) -> UnitPrediction:
        return next(u for u in self.units if u.name == name)

    def to_dict(self) -> dict:
        return asdict(self)


def predict_profile(
    graph: Graph, profile: TargetProfile, progress: ProgressFn | None = None
) -> PredictedProfile:
    """Predict every node's latency on every unit of ``profile`` with its cost model."""
    model = CostModel(profile)
    constant = constant_nodes(graph)
    ops: list[PredictedOp] = []
    for i, node in enumerate(graph.nodes):
        if progress is not None and i % PROGRESS_EVERY == 0:
            progress(i / max(len(graph.nodes), 1), f"predicting: {i}/{len(graph.nodes)} nodes")
        cost = cost_node(node, graph)
        dtype = op_dtype(node, graph)
        variant = op_variant(node, graph)
        if node.name in constant:
            estimates = {u.name: _CONSTANT for u in profile.units}
        else:
            estimates = {
                u.name: model.estimate(cost, node.op_type, u.name, dtype, variant)
                for u in profile.units
            }
        ops.append(
            PredictedOp(
                name=node.name,
                op_type=node.op_type,
                variant=variant,
                dtype=dtype,
                flops=cost.flops if cost else None,
                bytes=cost.bytes_read + cost.bytes_written if cost else None,
                intensity=cost.intensity if cost else None,
                latency_us={u: e.latency_us for u, e in estimates.items()},
                status={u: e.status for u, e in estimates.items()},
                bound={u: e.bound for u, e in estimates.items()},
                energy_uj={u: _energy_uj(model, u, e) for u, e in estimates.items()},
            )
        )
    units = [_unit_total(model, u.name, ops) for u in profile.units]
    complete = [u for u in units if u.complete and u.latency_ms is not None]
    best = min(complete, key=lambda u: u.latency_ms).name if complete else None
    # The label of the model's dtype: the one with the most known work (an op whose work is
    # unknown does not vote; no latency or size is derived from this).
    main_dtype = (
        max(
            {op.dtype for op in ops},
            key=lambda d: sum(op.flops or 0 for op in ops if op.dtype == d),
        )
        if ops
        else "fp32"
    )
    return PredictedProfile(
        target=profile.name,
        target_version=profile.version,
        model=model.name,
        dtype=main_dtype,
        units=units,
        best_unit=best,
        ops=ops,
        notes=_notes(profile, units),
        energy_unknown_units=_no_power(profile),
    )


def _energy_uj(model: CostModel, unit: str, estimate: OpEstimate) -> float | None:
    """An op's energy above idle on ``unit`` in microjoules; ``None`` when its latency or
    the unit's power is unknown."""
    joules = model.energy_j(estimate.latency_us, unit)
    return None if joules is None else joules * 1e6


def _no_power(profile: TargetProfile) -> list[str]:
    """Units without both power figures: their energy is unknown."""
    missing = []
    for u in profile.units:
        power = profile.power.get(u.name)
        if power is None or power.active_w is None or power.idle_w is None:
            missing.append(u.name)
    return missing


def constant_nodes(graph: Graph) -> set[str]:
    """Nodes whose inputs are all constant: a runtime computes them once, at load time
    (the bundled light models build their weights with ConstantOfShape)."""
    constant = {
        t.name for t in graph.tensors.values() if t.producer is None and t.name not in graph.inputs
    }
    nodes = set()
    for node in graph.nodes:
        if node.subgraph_nodes or node.op_type in _NONDETERMINISTIC:
            continue
        if all(not name or name in constant for name in (*node.inputs, *node.implicit_inputs)):
            nodes.add(node.name)
            constant.update(o for o in node.outputs if o)
    return nodes


def _unit_total(model: CostModel, unit: str, ops: list[PredictedOp]) -> UnitPrediction:
    u = model.unit(unit)
    by_status: dict[str, list[str]] = {"unsupported": [], "unknown": [], "not_costed": []}
    total = 0.0
    ok = 0
    constant = 0
    for op in ops:
        status = op.status[unit]
        if status == "ok":
            total += op.latency_us[unit]  # an ok estimate always has a latency
            ok += 1
        elif status == "constant":
            constant += 1
        else:
            by_status[status].append(op.name)
    latency_ms = total / 1e3 if ok else None
    return UnitPrediction(
        name=unit,
        kind=u.kind,
        latency_ms=latency_ms,
        complete=ok + constant == len(ops),
        ops_ok=ok,
        unsupported=by_status["unsupported"],
        unknown=by_status["unknown"],
        not_costed=by_status["not_costed"],
        energy_j=model.energy_j(total if ok else None, unit),
        calibrated=bool(u.efficiency),
        peak_gflops=u.peak_gflops.get("fp32"),
        mem_bw_gbps=u.mem_bw_gbps,
    )


def _notes(profile: TargetProfile, units: list[UnitPrediction]) -> list[str]:
    notes = []
    for u in profile.units:
        missing = []
        if u.launch_us is None:
            missing.append("launch overhead unknown (counted as 0)")
        if not u.efficiency:
            missing.append("not calibrated (ops run on the roofline)")
        if missing:
            notes.append(f"{u.name}: {'; '.join(missing)}: latencies are lower bounds")
    for unit in units:
        if unit.latency_ms is None:
            notes.append(f"{unit.name}: no prediction (numbers unknown or no op supported)")
    missing = _no_power(profile)
    if missing:
        notes.append(
            f"energy unknown on {', '.join(missing)}: the target gives no active and idle "
            "power for them"
        )
    return notes
