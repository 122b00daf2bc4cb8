"""The profile stage's entry point: measured on a measured target, predicted on a modeled one.

Measured (the worker's own CPU): per-op times from onnxruntime's profiler, the whole model
timed with the profiler off next to a plain session, optionally the TVM build's kernels,
sweeps over threads and batch, the machine's roofs and a calibrated modeled copy of it.
Predicted: per-op latency on every unit of the target from its cost model. Every number
says which it is.
"""

from __future__ import annotations

from engine.contract import NO_INPUTS, StageInputs, StageReport
from engine.errors import Cancelled, EngineError, ProgressFn, error_line
from engine.graph.costs import cost_node
from engine.graph.prepared import PreparedModel
from engine.profiling.calibrate import calibrate, modeled_copy
from engine.profiling.findings import find_all
from engine.profiling.mobile_gpu import analyze_target_gpu
from engine.profiling.nodes import NodeProfileConfig, profile_nodes
from engine.profiling.on_device import profile_on_device
from engine.profiling.options import ProfileOptions
from engine.profiling.predicted import predict_profile
from engine.profiling.roofs import measure_roofs
from engine.profiling.sweeps import sweep_batch, sweep_threads
from engine.targets.schema import TargetProfile


class ProfileReport(StageReport):
    """The profile: ``latency_ms`` is the whole model's median (measured) or the chosen
    unit's sum (predicted), ``None`` when unknown; ``measured`` says which."""

    @classmethod
    def of(cls, target: str, measured: bool, latency_ms, unit, details: dict) -> ProfileReport:
        details.update(target=target, measured=measured, latency_ms=latency_ms, unit=unit)
        return cls(details)

    @property
    def latency_ms(self) -> float | None:
        return self.details["latency_ms"]


def run(
    prepared: PreparedModel,
    target: TargetProfile,
    options: ProfileOptions,
    progress: ProgressFn,
    inputs: StageInputs = NO_INPUTS,
) -> ProfileReport:
    """Profile ``prepared`` on ``target``: measured when ``target`` is this machine's
    (``kind == "measured"``) or a remote device (measured there, over TVM RPC),
    predicted when it is modeled."""
    if target.kind == "modeled":
        return _predicted(prepared, target, options, progress)
    if target.remote is not None:
        result = profile_on_device(prepared, target, options, progress)
        return ProfileReport.of(
            target.name, True, result["latency"]["median"], result["unit"], result
        )
    return _measured(prepared, target, options, progress, inputs)


def _predicted(
    prepared: PreparedModel, target: TargetProfile, options: ProfileOptions, progress
) -> ProfileReport:
    progress(0.3, f"predicting per-op latency on {target.name}'s units")
    predicted = predict_profile(prepared.graph, target).to_dict()
    unit = options.unit or predicted["best_unit"]
    if options.unit is not None:
        target.unit(options.unit)  # raises: no such unit
    chosen = next((u for u in predicted["units"] if u["name"] == unit), None)
    latency = chosen["latency_ms"] if chosen and chosen["complete"] else None
    predicted["findings"] = [f.to_dict() for f in find_all(predicted=predicted)]
    _name_user_nodes(predicted["ops"], prepared)
    progress(0.8, "analyzing the mobile-GPU delegate partition and layouts")
    predicted["mobile_gpu"] = analyze_target_gpu(
        prepared.graph, target, options.unit, options.gpu_api, _opset(prepared)
    )
    return ProfileReport.of(target.name, False, latency, unit, predicted)


def _measured(
    prepared: PreparedModel,
    target: TargetProfile,
    options: ProfileOptions,
    progress: ProgressFn,
    inputs: StageInputs,
) -> ProfileReport:
    config = NodeProfileConfig(
        threads=options.threads,
        window_s=options.window_s,
        input_shapes=prepared.input_shapes,
        graph_optimization=options.graph_optimization,
        reference=True,
    )
    end = 0.4 if options.sweeps else 0.6 if options.tvm_kernels else 0.85
    # What the user runs is measured: the model as uploaded, its inputs fed at the bound
    # shapes. The prepared model can run at another speed (onnxruntime fuses BERT's
    # Add + LayerNormalization into a SkipLayerNormalization only where shapes are static,
    # and that kernel made the prepared BERT 1.3x slower than the upload on one thread);
    # it gives the work of the nodes whose shapes only preparation knows.
    source = inputs.files.get("source")
    if source is not None:
        costs = _user_costs(prepared)
        result = profile_nodes(source, config, _span(progress, 0.0, end), costs).to_dict()
        result["profiled_model"] = "the model as uploaded, inputs at the bound shapes"
    else:
        result = profile_nodes(prepared.model, config, _span(progress, 0.0, end)).to_dict()
        result["profiled_model"] = "the prepared model (shape arithmetic folded)"
        _name_user_nodes(result["ops"], prepared)
    latency_stats = result.pop("latency_ms")
    result["latency"] = latency_stats
    sweeps = []
    if options.sweeps:
        model = source or prepared.model
        sweeps.append(sweep_threads(model, progress=_span(progress, 0.4, 0.5)).to_dict())
        sweeps.append(sweep_batch(model, progress=_span(progress, 0.5, 0.6)).to_dict())
    result["sweeps"] = sweeps
    if options.tvm_kernels:
        result["tvm_kernels"] = _tvm_kernels(prepared, options, result, progress)
    roofs = measure_roofs(
        options.threads, window_s=0.5, progress=_span(progress, 0.85, 0.93)
    ).to_dict()
    result["roofs"] = roofs
    progress(0.95, "calibrating a modeled copy of this machine")
    copy = modeled_copy(target, roofs["peak_gflops_fp32"], roofs["mem_bw_gbps"])
    # calibrate() reads the NodeProfile's own layout, where latency_ms is the statistics.
    as_profiled = {**result, "latency_ms": latency_stats}
    result["calibration"] = calibrate(
        copy, {prepared.header.graph_name or "model": as_profiled}
    ).to_dict()
    result["findings"] = [f.to_dict() for f in find_all(as_profiled, sweeps)]
    return ProfileReport.of(target.name, True, latency_stats["median"], result["unit"], result)


def _tvm_kernels(
    prepared: PreparedModel, options: ProfileOptions, result: dict, progress: ProgressFn
) -> dict:
    """Per-kernel latency of the model's TVM build; a model TVM cannot build is a note
    in the result, the onnxruntime profile stands."""
    from engine.profiling.tvm_kernels import KernelTimingConfig, profile_tvm_kernels

    ops_us = {op["name"]: op["typical_us"] for op in result["ops"] if op["typical_us"] is not None}
    config = KernelTimingConfig(
        threads=options.threads,
        window_s=min(float(result["window_s"]), 3.0),
        input_shapes=prepared.input_shapes,
    )
    try:
        found = profile_tvm_kernels(
            prepared.model, config, ops_us, progress=_span(progress, 0.6, 0.85)
        )
    except Cancelled:
        raise
    except EngineError as e:
        return {"failed": e.message}
    except Exception as e:  # noqa: BLE001 - TVM raises its own errors
        return {"failed": f"{type(e).__name__}: {error_line(e, 300)}"}
    return found.to_dict()


def _user_costs(prepared: PreparedModel) -> dict:
    """The user's node name -> its work, from the prepared graph (a node preparation kept
    under its own name, or one that stands for a single user node)."""
    costs = {}
    for node in prepared.graph.nodes:
        users = prepared.user_nodes.get(node.name, (node.name,))
        cost = cost_node(node, prepared.graph)
        if len(users) == 1 and cost is not None:
            costs[users[0]] = cost
    return costs


def _name_user_nodes(ops: list[dict], prepared: PreparedModel) -> None:
    """Each op row names the user's node(s) it stands for where preparation renamed."""
    for op in ops:
        users = prepared.user_nodes.get(op["name"])
        if users is not None and users != (op["name"],):
            op["user_names"] = list(users)


def _opset(prepared: PreparedModel) -> int | None:
    """The model's default-domain opset (some ops' defaults changed between opsets)."""
    versions = [o.version for o in prepared.model.opset_import if o.domain in ("", "ai.onnx")]
    return versions[0] if versions else None


def _span(progress: ProgressFn, start: float, end: float) -> ProgressFn:
    return lambda fraction, message: progress(start + (end - start) * fraction, message)
