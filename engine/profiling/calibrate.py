"""Calibration: fit a modeled copy of a measured target to what was measured on it.

The copy takes the measured roofs (:mod:`engine.profiling.roofs`) as its peak and bandwidth;
calibration then fits, from per-node profiles (:mod:`engine.profiling.nodes`; each op's
``typical_us``, which, unlike medians, add up to a typical run):

- the time between kernels (whole-model minus the sum of kernel times), split by
  non-negative least squares over the models into ``launch_us`` per op (the runtime's own
  work) and a ``stall_factor`` in proportion to kernel time (time lost to other processes
  on a shared machine), which is folded into the efficiencies;
- per-op-type ``efficiency``: the fraction of the roofline each op type reaches, the
  time-weighted ``sum(roofline) / sum(measured)`` over that type's ops (each model's times
  divided by its total, so that a large model does not decide alone); the same per op
  variant (``Conv/depthwise``, see :func:`engine.targets.costmodel.op_variant`), which takes
  precedence; and a default (key ``*``) from all ops together for op types never seen.

The fit is time-weighted so that whole-model sums come out right; the per-op geometric-mean
error (an op's predicted time net of launch against its measured kernel time; the stall
share folded into the efficiencies stays in) shows how far single ops scatter. Since
an in-sample fit is flattering, :func:`cross_validate` also predicts each model from a fit on
the others (leave one model out).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from engine.graph.costs import OpCost
from engine.targets.costmodel import MODEL_NAME, CostModel, unit_dtype
from engine.targets.schema import DEFAULT_EFFICIENCY_KEY, TargetProfile

METHOD = (
    "time-weighted per-op-type efficiency (sum roofline / sum measured), launch overhead and "
    "stall factor by non-negative least squares, fitted to onnxruntime per-node profiles"
)
_TIMED = ("measured", "fused")


@dataclass
class ModelFit:
    """Predicted against measured whole-model latency of one model (ms); ``ratio`` is
    predicted / measured, where measured is the plain-session timing when the profile has
    one, else the profiler's own whole-model median."""

    model: str
    measured_ms: float
    predicted_ms: float
    ratio: float
    op_geomean_error_pct: float | None
    ops_compared: int
    not_costed: int


@dataclass
class Calibration:
    """Result of :func:`calibrate`: the fitted modeled copy and its in-sample fit."""

    target: str
    unit: str
    model: str
    method: str
    launch_us: float
    stall_factor: float
    efficiency: dict[str, float]
    fits: list[ModelFit]
    op_types: dict[str, dict]
    profile: TargetProfile

    def to_dict(self) -> dict:
        result = asdict(self)
        result["profile"] = self.profile.to_dict()
        return result


def modeled_copy(
    measured: TargetProfile, peak_gflops_fp32: float, mem_bw_gbps: float, unit: str | None = None
) -> TargetProfile:
    """A ``modeled`` copy of a measured target whose unit has the measured roofs."""
    base = measured.unit(unit or measured.units[0].name)
    roofs_source = "measured on this machine with onnxruntime (engine.profiling.roofs)"
    copy = replace(
        base,
        peak_gflops={**base.peak_gflops, "fp32": round(peak_gflops_fp32, 3)},
        mem_bw_gbps=round(mem_bw_gbps, 3),
        efficiency={},
        launch_us=None,
        source={"peak_gflops.fp32": roofs_source, "mem_bw_gbps": roofs_source},
    )
    return replace(
        measured,
        name=f"{measured.name}-model",
        kind="modeled",
        units=tuple(copy if u.name == base.name else u for u in measured.units),
        notes=(*measured.notes, f"Modeled copy of the measured target '{measured.name}'."),
    )


def calibrate(
    profile: TargetProfile, measured: Mapping[str, Mapping], unit: str | None = None
) -> Calibration:
    """Fit ``profile``'s unit to per-node profiles (``{model name: NodeProfile.to_dict()}``)."""
    unit = unit or profile.units[0].name
    base = _uncalibrated(profile, unit)
    model = CostModel(base)
    roof_by_type: dict[str, float] = defaultdict(float)
    time_by_type: dict[str, float] = defaultdict(float)
    gaps = []
    for result in measured.values():
        kernel_us = _kernel_us(result)
        gaps.append((_whole_ms(result) * 1e3 - kernel_us, len(_predicted_ops(result)), kernel_us))
        weight = 1.0 / kernel_us if kernel_us > 0 else 0.0  # every model counts the same
        for op in _timed_ops(result):
            roof = _roof_us(model, op, unit)
            if roof is not None:
                for key in filter(None, (op["op_type"], op.get("variant"))):
                    roof_by_type[key] += weight * roof
                    time_by_type[key] += weight * _op_us(op)
    launch_us, stall = _fit_gaps(gaps)
    # Time lost between kernels in proportion to their time counts against the kernels.
    efficiency = {
        t: roof_by_type[t] / (time_by_type[t] * (1 + stall))
        for t in sorted(time_by_type)
        if roof_by_type[t] > 0
    }
    plain = [t for t in time_by_type if "/" not in t]  # op types, each op counted once
    if plain:
        efficiency[DEFAULT_EFFICIENCY_KEY] = sum(roof_by_type[t] for t in plain) / (
            sum(time_by_type[t] for t in plain) * (1 + stall)
        )
    fitted_unit = replace(
        base.unit(unit),
        launch_us=launch_us,
        efficiency=dict(efficiency),
    )
    calibrated = replace(
        base,
        units=tuple(fitted_unit if u.name == unit else u for u in base.units),
        notes=(*base.notes, f"Calibrated: {METHOD}; models: {', '.join(measured)}."),
    )
    fits = evaluate(calibrated, measured, unit)
    return Calibration(
        target=calibrated.name,
        unit=unit,
        model=MODEL_NAME,
        method=METHOD,
        launch_us=launch_us,
        stall_factor=stall,
        efficiency=efficiency,
        fits=fits,
        op_types=_op_type_errors(calibrated, measured, unit),
        profile=calibrated,
    )


def evaluate(
    profile: TargetProfile, measured: Mapping[str, Mapping], unit: str | None = None
) -> list[ModelFit]:
    """Predicted against measured whole-model latency for each profiled model."""
    unit = unit or profile.units[0].name
    model = CostModel(profile)
    launch = profile.unit(unit).launch_us or 0.0
    fits = []
    for name, result in measured.items():
        predicted_us = 0.0
        not_costed = 0
        errors = []
        for op in _predicted_ops(result, with_uncosted=True):
            latency = _latency_us(model, op, unit)
            if latency is None:
                not_costed += 1
                continue
            predicted_us += latency
            if op["status"] == "measured" and _op_us(op) and latency - launch > 0:
                errors.append(abs(math.log((latency - launch) / _op_us(op))))
        measured_ms = _whole_ms(result)
        fits.append(
            ModelFit(
                model=name,
                measured_ms=measured_ms,
                predicted_ms=predicted_us / 1e3,
                ratio=predicted_us / 1e3 / measured_ms,
                op_geomean_error_pct=_geomean_pct(errors),
                ops_compared=len(errors),
                not_costed=not_costed,
            )
        )
    return fits


def cross_validate(
    profile: TargetProfile, measured: Mapping[str, Mapping], unit: str | None = None
) -> list[ModelFit]:
    """Leave one model out: predict each model from a calibration on all the others."""
    fits = []
    for name in measured:
        others = {k: v for k, v in measured.items() if k != name}
        if not others:
            continue
        fitted = calibrate(profile, others, unit).profile
        fits += evaluate(fitted, {name: measured[name]}, unit)
    return fits


def _fit_gaps(gaps: list[tuple[float, int, float]]) -> tuple[float, float]:
    """Split the time between kernels, ``gap = launch x ops + stall x kernel time``, by
    non-negative least squares over the models ``(gap_us, ops, kernel_us)``: a fixed cost
    per op (the runtime's own work) and a share of the kernel time (time lost to other
    processes on a shared machine). When the models cannot tell the two apart (one model),
    the per-op launch takes it all."""
    sum_nn = sum(n * n for _, n, _ in gaps)
    sum_kk = sum(k * k for _, _, k in gaps)
    sum_nk = sum(n * k for _, n, k in gaps)
    sum_gn = sum(g * n for g, n, _ in gaps)
    sum_gk = sum(g * k for g, _, k in gaps)
    det = sum_nn * sum_kk - sum_nk**2
    if det > 1e-9 * sum_nn * sum_kk:
        launch = (sum_gn * sum_kk - sum_gk * sum_nk) / det
        stall = (sum_gk * sum_nn - sum_gn * sum_nk) / det
        if launch >= 0 and stall >= 0:
            return launch, stall
    candidates = []  # one parameter at zero, the other fitted alone
    if sum_nn:
        candidates.append((max(sum_gn / sum_nn, 0.0), 0.0))
    if sum_kk:
        candidates.append((0.0, max(sum_gk / sum_kk, 0.0)))

    def residual(fit: tuple[float, float]) -> float:
        return sum((g - fit[0] * n - fit[1] * k) ** 2 for g, n, k in gaps)

    return min(candidates, key=residual) if candidates else (0.0, 0.0)


def _kernel_us(result: Mapping) -> float:
    return sum(_op_us(op) for op in result["ops"] if op["latency_us"])


def _op_us(op: Mapping) -> float:
    """An op's time in a typical run (``typical_us``; older profiles: the median)."""
    typical = op.get("typical_us")
    return typical if typical is not None else op["latency_us"]


def _uncalibrated(profile: TargetProfile, unit: str) -> TargetProfile:
    bare = replace(profile.unit(unit), efficiency={}, launch_us=None)
    return replace(profile, units=tuple(bare if u.name == unit else u for u in profile.units))


def _op_type_errors(profile: TargetProfile, measured: Mapping[str, Mapping], unit: str) -> dict:
    model = CostModel(profile)
    launch = profile.unit(unit).launch_us or 0.0
    errors: dict[str, list[float]] = defaultdict(list)
    time_us: dict[str, float] = defaultdict(float)
    for result in measured.values():
        for op in _timed_ops(result):
            key = op.get("variant") or op["op_type"]
            time_us[key] += _op_us(op)
            latency = _latency_us(model, op, unit)
            if op["status"] == "measured" and latency is not None and latency - launch > 0:
                errors[key].append(abs(math.log((latency - launch) / _op_us(op))))
    unit_efficiency = profile.unit(unit).efficiency
    return {
        t: {
            "ops": len(errors[t]),
            "measured_us": time_us[t],
            "efficiency": unit_efficiency.get(t),
            "geomean_error_pct": _geomean_pct(errors[t]),
        }
        for t in sorted(time_us, key=lambda t: -time_us[t])
    }


def _roof_us(model: CostModel, op: Mapping, unit: str) -> float | None:
    """The bare roofline time (``model`` has no launch overhead and no factors)."""
    return _latency_us(model, op, unit)


def _latency_us(model: CostModel, op: Mapping, unit: str) -> float | None:
    return model.op_latency_us(_cost(op), op["op_type"], unit, _dtype(op), op.get("variant"))


def _timed_ops(result: Mapping) -> list[Mapping]:
    return [
        op
        for op in result["ops"]
        if op["status"] in _TIMED and op["latency_us"] and _op_us(op) and op["flops"] is not None
    ]


def _predicted_ops(result: Mapping, *, with_uncosted: bool = False) -> list[Mapping]:
    """The ops a prediction sums: every op but the constants folded at load time."""
    return [
        op
        for op in result["ops"]
        if op["status"] != "folded" and (with_uncosted or op["flops"] is not None)
    ]


def _whole_ms(result: Mapping) -> float:
    reference = result.get("reference")
    return (reference or result)["latency_ms"]["median"]


def _cost(op: Mapping) -> OpCost | None:
    if op["flops"] is None or op["bytes"] is None:
        return None
    return OpCost(0, op["flops"], 0, op["bytes"], 0)


def _dtype(op: Mapping) -> str:
    return unit_dtype(op["dtype"])


def _geomean_pct(log_errors: list[float]) -> float | None:
    if not log_errors:
        return None
    return 100.0 * (math.exp(sum(log_errors) / len(log_errors)) - 1.0)
