"""The fuse + compile stage: ``compile_model(source, config, progress) -> CompileResult``.

Steps: fix input shapes, simplify, find the nodes TVM cannot import (they run in
onnxruntime, see ``delegate``), plan the fusion (FuseOps, then our rules, kept only
where they do not add kernels or traffic), optionally tune with MetaSchedule through the
tuning store, build every TVM segment, then run the result against onnxruntime on the
same inputs with the same threads: outputs, whole-model latency and per-kernel times.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from engine.errors import Cancelled, EngineError, ProgressFn, UnsupportedModelError
from engine.fusion import artifact, delegate, forked, plan, rules
from engine.fusion.build import FusedSegment, build_segment, fuse_segment, unfused_calls
from engine.fusion.importer import (
    NodeImportError,
    import_onnx,
    prepare,
    simplify,
    supported_op_types,
)
from engine.fusion.standalone import CompiledModel, example_inputs
from engine.fusion.target import TargetSpec, resolve_target
from engine.fusion.timing import TimingConfig, kernel_times_us, set_threads, time_calls
from engine.fusion.tuning_store import RecordStore, open_store

_MAX_FALLBACK_ROUNDS = 50
_CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


@dataclass(frozen=True)
class CompileConfig:
    """Options of :func:`compile_model`.

    ``out_dir`` receives the artifact (``model.tar.gz``) and its unpacked directory;
    ``rules`` names our fusion rules to try (see ``engine.fusion.rules.RULES``);
    ``tune_trials`` / ``tune_minutes`` set a MetaSchedule budget (0: no tuning);
    ``tuning_store`` holds the tuning records shared between runs: a directory, or any
    object with the ``RecordStore`` methods (see ``engine.fusion.tuning_store``).
    ``measure=False`` builds the artifact and stops: no run against onnxruntime on
    random inputs, no timing (``latency_ms`` and ``outputs_match`` are ``None``). An
    accuracy check wants that: it runs the build on its own inputs, which may be ones
    random values would not be valid for (indices, say). A segment whose build does not
    finish in ``build_timeout_s`` (TVM's compiler can hang) falls back to onnxruntime.
    """

    out_dir: str
    target: str = "host"
    threads: int = 0
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    rules: tuple[str, ...] = tuple(rules.RULES)
    tune_trials: int = 0
    tune_minutes: float = 0.0
    tuning_store: str | os.PathLike | RecordStore | None = None
    measure: bool = True
    build_timeout_s: float = 600.0
    timing_window_s: float = 2.0
    kernel_timing_runs: int = 3
    rtol: float = 1e-3
    atol: float = 1e-4
    seed: int = 0


@dataclass
class CompileResult:
    target: dict
    kernels: list[plan.Kernel]
    fallback_nodes: list[dict]
    tvm_nodes: int
    model_nodes: int
    segments: list[dict]
    fusion: plan.FusionPlan
    latency_ms: float | None
    onnxruntime_latency_ms: float | None
    outputs_match: bool | None
    max_abs_error: dict[str, float]
    artifact: str
    artifact_files: dict[str, str]
    tuning: dict
    simplify: dict
    timings_s: dict[str, float]
    threads: int

    def to_dict(self) -> dict:
        ratio = None
        if self.latency_ms and self.onnxruntime_latency_ms:
            ratio = self.onnxruntime_latency_ms / self.latency_ms
        return {
            "target": self.target,
            "kernels": [k.to_dict() for k in self.kernels],
            "kernel_count": len(self.kernels),
            "tvm_nodes": self.tvm_nodes,
            "model_nodes": self.model_nodes,
            "fallback_nodes": list(self.fallback_nodes),
            "segments": list(self.segments),
            "latency_ms": self.latency_ms,
            "onnxruntime_latency_ms": self.onnxruntime_latency_ms,
            "speed_vs_onnxruntime": ratio,
            "threads": self.threads,
            "outputs_match": self.outputs_match,
            "max_abs_error": dict(self.max_abs_error),
            "artifact": self.artifact,
            "artifact_files": dict(self.artifact_files),
            "fusion": self.fusion.to_dict(),
            "tuning": dict(self.tuning),
            "simplify": dict(self.simplify),
            "timings_s": dict(self.timings_s),
        }


def compile_model(
    source, config: CompileConfig, progress: ProgressFn | None = None
) -> CompileResult:
    """Compile an ONNX model with TVM for ``config.target`` and check it against onnxruntime.

    Raises :class:`engine.errors.EngineError` subclasses for bad models, shapes or
    targets; :class:`engine.errors.Cancelled` propagates from ``progress``.
    """
    from engine.graph.loader import load_model, model_inputs
    from engine.graph.shapes import apply_input_shapes
    from engine.graph.topology import sorted_model, unique_node_names

    report = progress or (lambda fraction, message: None)
    clock = _Clock()
    spec = resolve_target(config.target, config.threads)
    set_threads(spec.threads)
    report(0.0, f"target {spec.target}")
    original = load_model(source)
    model_sha256 = _source_sha256(source, original)
    original, _ = sorted_model(original)
    for node, name in zip(original.graph.node, unique_node_names(original.graph.node), strict=True):
        node.name = name  # the names the analyze stage shows
    shapes = _full_shapes(original, config.input_shapes, model_inputs)
    apply_input_shapes(original, shapes, allow_empty=True)  # empty tensors compile too
    model, simplify_report = simplify(original)
    model = prepare(model, unique_node_names(model.graph.node))
    model = onnx.shape_inference.infer_shapes(model)
    clock.lap("simplify")
    report(0.05, f"simplified: {simplify_report['nodes_before']} -> {len(model.graph.node)} nodes")

    fallback = _find_fallback(model, report)
    clock.lap("import")
    report(0.15, f"{len(fallback)} nodes fall back to onnxruntime")
    model, fusion, origin = _plan_rules(
        model, fallback, spec, config.rules, _simplified_origin(original, model), report
    )
    clock.lap("fusion_plan")

    node_order = [n.name for n in model.graph.node]
    op_types = {n.name: n.op_type for n in original.graph.node}
    op_types.update({n.name: n.op_type for n in model.graph.node})
    out = Path(config.out_dir)
    staging = out / "artifact"
    tuning, tuned, store = None, None, None
    for _ in range(_MAX_FALLBACK_ROUNDS):
        segments = delegate.partition(model, set(fallback))
        try:
            fused = _fuse_all(segments, spec, node_order)
            report(0.3, "fusion planned")
            if tuning is None:
                tuning, tuned, store = _tune(fused, spec, config, report)
                check_key = _check_key(tuned, model_sha256, fallback, config)
                tuned = _apply_stored_check(tuning, tuned, store, check_key)
                clock.lap("tuning")
            built = _build_all(fused, spec, staging, tuned, config.build_timeout_s, report)
            break
        except _SegmentFailed as failed:
            # TVM imported the segment but could not compile it: onnxruntime runs it.
            for name in failed.segment.nodes:
                fallback[name] = f"TVM could not compile its segment: {failed.reason}"
            report(0.3, f"segment {failed.segment.index} falls back to onnxruntime")
    else:
        raise UnsupportedModelError("TVM failed to compile segment after segment")
    clock.lap("build")
    inputs = _input_specs(original, model_inputs)

    def manifest(directory: Path, built_there: dict) -> None:
        artifact.write_manifest(
            directory,
            original,
            model_sha256,
            spec,
            segments,
            built_there,
            inputs,
            fallback,
            origin,
            tuning,
        )

    if tuned and "end_to_end" not in tuning:
        built = _keep_faster(
            fused, spec, out, built, tuned, check_key, tuning, store, config, manifest, report
        )
        clock.lap("end_to_end_check")

    kernels, boundaries = [], []
    for index, seg in fused.items():
        made = plan.make_kernels(seg.calls, index, op_types, origin)
        for kernel in made:
            kernel.schedule = built[index].schedules.get(kernel.func, "default")
        kernels += made
        boundaries += plan.boundaries(seg.calls, index)
    fusion.kernels, fusion.boundaries = kernels, boundaries

    manifest(staging, built)
    onnx.save(model, str(staging / "model.simplified.onnx"))
    if config.measure:
        report(0.85, "running against onnxruntime")
        result = _measure(original, staging, spec, config, fused, built, kernels, inputs)
        clock.lap("measure")
    else:
        result = {k: None for k in ("latency_ms", "onnxruntime_latency_ms", "outputs_match")}
        result["max_abs_error"] = {}
    tarball, files = artifact.pack(staging, out / "model.tar.gz")
    clock.lap("artifact")
    report(1.0, "done")
    return CompileResult(
        target=spec.to_dict(),
        kernels=kernels,
        fallback_nodes=_fallback_list(fallback, model, origin),
        tvm_nodes=sum(len(s.nodes) for s in segments if s.backend == delegate.TVM),
        model_nodes=len(model.graph.node),
        segments=[s.to_dict() for s in segments],
        fusion=fusion,
        latency_ms=result["latency_ms"],
        onnxruntime_latency_ms=result["onnxruntime_latency_ms"],
        outputs_match=result["outputs_match"],
        max_abs_error=result["max_abs_error"],
        artifact=str(tarball),
        artifact_files=files,
        tuning=tuning,
        simplify=simplify_report,
        timings_s=clock.laps,
        threads=spec.threads,
    )


class _SegmentFailed(Exception):
    def __init__(self, segment: delegate.Segment, reason: str):
        super().__init__(reason)
        self.segment, self.reason = segment, reason


def _fuse_all(segments, spec: TargetSpec, node_order) -> dict[int, FusedSegment]:
    fused = {}
    for seg in segments:
        if seg.backend == delegate.TVM:
            imported = import_onnx(seg.model, {}, _dtypes(seg.model))
            try:
                fused[seg.index] = fuse_segment(imported, spec.tvm_target(), node_order)
            except EngineError:
                raise
            except Exception as e:  # noqa: BLE001 - TVM raises its own errors
                raise _SegmentFailed(seg, _reason(e)) from e
            fused[seg.index].segment = seg
    return fused


def _build_all(fused, spec: TargetSpec, staging: Path, tuned, timeout_s: float, report) -> dict:
    """Build every TVM segment, each in a forked child with a time limit (see ``forked``);
    CUDA builds stay in this process (a CUDA context does not survive a fork)."""
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    built = {}
    for k, (index, seg) in enumerate(fused.items()):
        fraction = 0.7 + 0.1 * k / max(len(fused), 1)
        report(fraction, f"building segment {index}")
        args = (seg, spec, staging, f"segment{index}", tuned)
        try:
            if spec.kind == "cuda":
                built[index] = build_segment(*args)
                continue

            def waiting(elapsed_s: float, index=index, fraction=fraction) -> None:
                report(fraction, f"building segment {index} ({elapsed_s:.0f} s)")

            built[index] = forked.call_forked(
                build_segment, args, timeout_s=timeout_s, poll=waiting
            )
        except forked.ChildTimeout as e:
            raise _SegmentFailed(seg.segment, f"TVM's build {e}") from e
        except forked.ChildFailed as e:
            raise _SegmentFailed(seg.segment, f"{e.kind}: {e}"[:300]) from e
        except (EngineError, Cancelled):
            raise
        except Exception as e:  # noqa: BLE001 - TVM raises its own errors
            raise _SegmentFailed(seg.segment, _reason(e)) from e
    return built


def _reason(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]


def _source_sha256(source, model: onnx.ModelProto) -> str:
    """sha256 of the uploaded file's bytes (of the serialized model for a ModelProto)."""
    if isinstance(source, bytes):
        data = source
    elif isinstance(source, onnx.ModelProto):
        data = model.SerializeToString()
    else:
        data = Path(source).read_bytes()
    return hashlib.sha256(data).hexdigest()


def _full_shapes(model, given: dict, model_inputs) -> dict[str, tuple[int, ...]]:
    """Given shapes, and every other input's symbolic dimensions set to 1."""
    from engine.graph.tensors import type_spec

    shapes = {}
    for value in model_inputs(model):
        if value.name in given:
            shapes[value.name] = tuple(given[value.name])
            continue
        dims, _ = type_spec(value.type)
        if dims is not None and not all(isinstance(d, int) and d > 0 for d in dims):
            shapes[value.name] = tuple(d if isinstance(d, int) and d > 0 else 1 for d in dims)
    shapes.update({name: tuple(shape) for name, shape in given.items()})  # unknown: ShapeError
    return shapes


def _find_fallback(model: onnx.ModelProto, report) -> dict[str, str]:
    """Nodes TVM cannot import, with the reason: no converter, or the converter failed."""
    supported = supported_op_types()
    fallback = {}
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            fallback[node.name] = f"operator domain '{node.domain}' is not supported by TVM"
        elif node.op_type not in supported:
            fallback[node.name] = f"TVM's ONNX frontend has no converter for {node.op_type}"
    for _ in range(_MAX_FALLBACK_ROUNDS):
        failed = None
        for seg in delegate.partition(model, set(fallback)):
            if seg.backend != delegate.TVM:
                continue
            try:
                import_onnx(seg.model, {}, _dtypes(seg.model))
            except NodeImportError as e:
                failed = (seg, e)
                break
        if failed is None:
            return fallback
        seg, error = failed
        if error.node in seg.nodes:
            fallback[error.node] = f"TVM import failed: {error.reason}"
        else:  # the whole segment failed without naming a node
            for name in seg.nodes:
                fallback[name] = f"TVM import of its segment failed: {error.reason}"
        report(0.1, f"falling back: {len(fallback)} nodes")
    raise UnsupportedModelError("too many nodes fail to import into TVM one after another")


def _evaluate(model, fallback, spec: TargetSpec) -> tuple[int, int, list]:
    """Kernel count and traffic after FuseOps over the model's TVM segments."""
    node_order = [n.name for n in model.graph.node]
    count = traffic = 0
    fused = []
    for seg in delegate.partition(model, set(fallback)):
        if seg.backend != delegate.TVM:
            continue
        imported = import_onnx(seg.model, {}, _dtypes(seg.model))
        f = fuse_segment(imported, spec.tvm_target(), node_order)
        count += len(f.calls)
        traffic += plan.traffic(f.calls)
        fused.append(f)
    return count, traffic, fused


def _simplified_origin(original, model) -> dict[str, list[str]]:
    """Nodes the simplifier made (e.g. Conv + BatchNormalization -> Conv) -> the model's
    nodes they replace: the producers of the same output tensors, and behind them the
    producers of tensors that no longer exist (fused away)."""
    names = {n.name for n in original.graph.node}
    nodes = {n.name: n for n in original.graph.node}
    producer = {o: n.name for n in original.graph.node for o in n.output if o}
    kept = {t for n in model.graph.node for t in (*n.input, *n.output)}
    origin = {}
    for node in model.graph.node:
        if node.name in names:
            continue
        found = [producer[o] for o in node.output if o in producer]
        # onnxslim names a node it made after the tensor it replaces ("mq_pre_reshape").
        parts = node.name.split("_")
        prefixes = ("_".join(parts[:k]) for k in range(len(parts), 0, -1))
        found = found or [producer[p] for p in prefixes if p in producer][:1]
        todo = list(found)
        while todo:
            for tensor in nodes[todo.pop()].input:
                source = producer.get(tensor)
                if (
                    source is not None
                    and tensor not in kept
                    and source not in found
                    and nodes[source].op_type not in _CONSTANT_OPS
                ):
                    found.append(source)
                    todo.append(source)
        if found:
            origin[node.name] = sorted(found, key=list(nodes).index)
    return origin


def _plan_rules(model, fallback, spec, names, origin, report):
    """Stages: unfused, FuseOps, then each of our rules, kept if it does not make it worse."""
    fusion = plan.FusionPlan()
    count, traffic, fused = _evaluate(model, fallback, spec)
    node_order = [n.name for n in model.graph.node]
    unfused = [c for f in fused for c in unfused_calls(f, node_order)]
    fusion.stages.append(plan.FusionStage("unfused", len(unfused), plan.traffic(unfused)))
    fusion.stages.append(plan.FusionStage("fuseops", count, traffic))
    for name in names:
        rule = rules.RULES.get(name)
        if rule is None:
            raise EngineError(f"unknown fusion rule '{name}'", code="usage")
        report(0.2, f"trying fusion rule {name}")
        try:
            candidate, rewrites = rule(model)
        except rules.RuleNotApplicable as e:
            fusion.stages.append(plan.FusionStage(name, count, traffic, note=f"not applied: {e}"))
            continue
        if not rewrites:
            fusion.stages.append(plan.FusionStage(name, count, traffic, note="nothing to rewrite"))
            continue
        try:
            new_count, new_traffic, _ = _evaluate(candidate, fallback, spec)
        except NodeImportError as e:
            fusion.stages.append(
                plan.FusionStage(name, count, traffic, False, len(rewrites), f"rejected: {e}")
            )
            continue
        if new_count > count or new_traffic > traffic:
            note = f"rejected: {new_count} kernels / {new_traffic} bytes would be worse"
            fusion.stages.append(plan.FusionStage(name, count, traffic, False, len(rewrites), note))
            continue
        model, count, traffic = candidate, new_count, new_traffic
        for rewrite in rewrites:
            for new in rewrite["into"]:
                replaced = rewrite.get("origin", {}).get(new, rewrite["nodes"])
                origin[new] = [n for old in replaced for n in origin.get(old, [old])]
        fusion.rewrites += rewrites
        fusion.stages.append(plan.FusionStage(name, count, traffic, True, len(rewrites)))
    return model, fusion, origin


def _tune(fused, spec, config: CompileConfig, report):
    """MetaSchedule tuning under the budget, through the store; (summary, tuned kernels,
    the store)."""
    if config.tuning_store is None and not (config.tune_trials or config.tune_minutes):
        return {"enabled": False}, None, None
    from engine.fusion.tuning import TuningBudget, tune_segments

    given = config.tuning_store
    store = open_store(given if given is not None else Path(config.out_dir) / "tuning")
    budget = TuningBudget(trials=config.tune_trials, minutes=config.tune_minutes)

    def tuning_progress(fraction: float, message: str) -> None:
        report(0.3 + 0.4 * fraction, message)

    summary, tuned = tune_segments(
        list(fused.values()), spec, store, budget, tuning_progress, config.build_timeout_s
    )
    return summary, tuned, store


def _check_key(tuned, model_sha256: str, fallback: dict, config: CompileConfig) -> str | None:
    """The store key of the whole-model check of this model with these tuned kernels."""
    if not tuned:
        return None
    from engine.fusion.tuning import tuned_set_key

    build = [model_sha256, *sorted(fallback), *config.rules, *map(str, config.input_shapes.items())]
    return tuned_set_key(tuned, "\n".join(build))


def _apply_stored_check(tuning: dict, tuned, store, key: str | None):
    """The tuned kernels to build, after the whole-model check a compile of the same model
    with the same tuned kernels stored (see :func:`_keep_faster`): none if it kept the
    defaults. A damaged entry is ignored: the check runs again."""
    if not tuned:
        return tuned
    entry = store.get(tuning["target_key"], key)
    if not entry:
        return tuned
    try:
        summary = {**_check_summary(entry), "stored": True}
    except Exception:  # noqa: BLE001 - a damaged or foreign entry
        return tuned
    tuning["end_to_end"] = summary
    return tuned if summary["kept"] == "tuned" else None


# The defaults replace tuned kernels only when the whole model runs this much faster with
# them: each tuned kernel measured at least 5% faster alone (``tuning._MIN_GAIN``).
_DEFAULTS_GAIN = 0.98


def _keep_faster(
    fused, spec, out: Path, built, tuned, key, tuning, store, config, manifest, report
):
    """Time the whole model with the tuned kernels and with every kernel on its default
    schedule, in alternating rounds, and keep the faster build; the outcome goes to the
    store under the set of tuned kernels. Kernels that each measured faster in isolation
    can still make the model slower (measured here at 2 threads: ViT-small 10% slower
    tuned than untuned). Returns the kept build; ``tuning["end_to_end"]`` says which.

    Without ``config.measure`` the model may not run on random inputs: unchecked, the
    tuned build stays."""
    import tvm

    staging, other = out / "artifact", out / "artifact-default"
    if not config.measure:
        tuning["end_to_end"] = {"kept": "tuned", "checked": False}
        return built
    report(0.8, "building with default schedules, to compare the whole model")
    try:
        built_default = _build_all(fused, spec, other, None, config.build_timeout_s, report)
        manifest(staging, built)
        manifest(other, built_default)
        tuned_ms, default_ms, runs = _time_alternating(staging, other, spec, config, report)
    except Exception as e:
        shutil.rmtree(other, ignore_errors=True)
        if isinstance(e, EngineError | Cancelled):
            raise
        # _SegmentFailed, TVM's or the runtime's errors: the tuned build stays, unchecked.
        tuning["end_to_end"] = {"kept": "tuned", "checked": False, "error": _reason(e)}
        return built
    kept = "default" if default_ms < _DEFAULTS_GAIN * tuned_ms else "tuned"
    entry = {
        "kind": "end-to-end",
        "kernel": f"whole model, {len(tuned)} tuned kernels",
        "workloads": sorted(tuned),
        "records": [],
        "kept": kept,
        "tuned_us": tuned_ms * 1e3,
        "default_us": default_ms * 1e3,
        "runs": runs,
        "budget_trials": 0,
        "target": dict(spec.target),
        "tvm": tvm.__version__,
    }
    tuning["end_to_end"] = {**_check_summary(entry), "stored": False}
    try:
        store.put(tuning["target_key"], key, entry)
    except Exception as e:  # noqa: BLE001 - the build stands; the next compile checks again
        tuning["end_to_end"]["store_error"] = _reason(e)
    if kept == "tuned":
        shutil.rmtree(other)
        return built
    shutil.rmtree(staging)
    other.rename(staging)
    return built_default


def _check_summary(entry: dict) -> dict:
    if entry["kept"] not in ("tuned", "default"):
        raise ValueError(f"not a whole-model check: {entry['kept']!r}")
    return {
        "kept": entry["kept"],
        "checked": True,
        "tuned_ms": round(entry["tuned_us"] / 1e3, 4),
        "default_ms": round(entry["default_us"] / 1e3, 4),
        "runs": entry.get("runs"),
    }


_CHECK_ROUNDS = 3


def _time_alternating(first: Path, second: Path, spec, config, report) -> tuple[float, float, int]:
    """Median latency (ms) of two builds of one model, timed in alternating rounds so a
    change in the machine's speed falls on both; and how many runs each got."""
    models = [CompiledModel(d, threads=spec.threads) for d in (first, second)]
    feeds = example_inputs(models[0].input_specs, config.seed)
    timing = TimingConfig(window_s=config.timing_window_s / _CHECK_ROUNDS, min_runs=3)
    medians: list[list[float]] = [[], []]
    runs = [0, 0]
    for r in range(_CHECK_ROUNDS):
        message = "timing the whole model, tuned and with default schedules"
        report(0.8, f"{message} ({r + 1}/{_CHECK_ROUNDS})")
        for k, compiled in enumerate(models):
            result = time_calls(lambda c=compiled: c.run(feeds), timing)
            medians[k].append(result["median"])
            runs[k] += result["runs"]
    return float(np.median(medians[0])), float(np.median(medians[1])), min(runs)


def _measure(original, staging, spec, config, fused, built, kernels, inputs) -> dict:
    import onnxruntime as ort

    feeds = example_inputs(inputs, config.seed)
    compiled = CompiledModel(staging, threads=spec.threads)
    outputs = compiled.run(feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = spec.threads
    options.log_severity_level = 3
    session = ort.InferenceSession(
        original.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in original.graph.output]
    reference = dict(zip(names, session.run(names, feeds), strict=True))
    errors, match = {}, True
    for name, ref in reference.items():
        got = outputs[name]
        if got.shape != ref.shape:
            errors[name], match = float("inf"), False
            continue
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        errors[name] = float(diff.max()) if diff.size else 0.0
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        match &= bool(errors[name] <= config.atol + config.rtol * scale)
    timing = TimingConfig(window_s=config.timing_window_s)
    ours = time_calls(lambda: compiled.run(feeds), timing)
    theirs = time_calls(lambda: session.run(names, feeds), timing)
    _attach_kernel_times(compiled, fused, built, kernels, feeds, config.kernel_timing_runs)
    return {
        "latency_ms": ours["median"],
        "onnxruntime_latency_ms": theirs["median"],
        "outputs_match": match,
        "max_abs_error": errors,
    }


def _attach_kernel_times(compiled, fused, built, kernels, feeds, runs: int) -> None:
    by_segment = {k.segment: [] for k in kernels}
    for k in kernels:
        by_segment[k.segment].append(k)
    tvm_segments = [s for s in compiled.segments if hasattr(s, "vm")]
    for segment, index in zip(tvm_segments, fused, strict=True):
        times = kernel_times_us(
            segment.vm, lambda: compiled.run(feeds), built[index].kernel_names, runs
        )
        seen: dict[str, int] = {}
        for kernel in by_segment.get(index, []):
            occurrence = seen.get(kernel.func, 0)
            seen[kernel.func] = occurrence + 1
            kernel.time_us = times.get((kernel.func, occurrence))
    total = sum(k.time_us or 0.0 for k in kernels)
    for k in kernels:
        k.share = (k.time_us / total) if (k.time_us and total) else None


def _fallback_list(fallback: dict, model, origin) -> list[dict]:
    op_types = {n.name: n.op_type for n in model.graph.node}
    return [
        {
            "node": name,
            "op_type": op_types.get(name, "?"),
            "reason": reason,
            "original_nodes": origin.get(name, [name]),
        }
        for name, reason in fallback.items()
    ]


def _input_specs(model, model_inputs) -> list[dict]:
    from engine.graph.tensors import type_spec

    return [
        {"name": v.name, "shape": list(type_spec(v.type)[0] or []), "dtype": _np_dtype(v)}
        for v in model_inputs(model)
    ]


def _dtypes(model: onnx.ModelProto) -> dict[str, str]:
    return {v.name: _np_dtype(v) for v in model.graph.input}


def _np_dtype(value: onnx.ValueInfoProto) -> str:
    elem = value.type.tensor_type.elem_type
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name if elem else "float32"


class _Clock:
    def __init__(self):
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self.last, 3)
        self.laps["total"] = round(now - self.started, 3)
        self.last = now
