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
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from engine.errors import EngineError, ProgressFn, UnsupportedModelError
from engine.fusion import artifact, delegate, plan, rules
from engine.fusion.backend_choice import (
    MARGIN,
    beats,
    each_timing,
    mix_wins,
    moved_to_onnxruntime,
    repartition,
    time_segments,
)
from engine.fusion.build_cache import BuildCache
from engine.fusion.conv_layout import BLOCKED, NCHW, LayoutUnsupported
from engine.fusion.importer import prepare, simplify
from engine.fusion.kernel_split import Build, StoredSplit, split_kernels
from engine.fusion.measurement import measure, onnxruntime_alone
from engine.fusion.preparation import (
    MAX_FALLBACK_ROUNDS,
    find_fallback,
    full_shapes,
    input_specs,
    simplified_origin,
)
from engine.fusion.rule_trials import plan_rules
from engine.fusion.segment_builds import SegmentFailed, build_all, fuse_all
from engine.fusion.standalone import example_inputs
from engine.fusion.substitution import MeasuredBench, substitute
from engine.fusion.target import TargetSpec, resolve_target
from engine.fusion.timing import set_threads
from engine.fusion.tuning import TuningBudget, tune_segments
from engine.fusion.tuning_store import RecordStore, open_store, target_key
from engine.fusion.whole_model_check import (
    BLOCKED_DIR,
    StoredLayout,
    apply_stored_check,
    blockable_in,
    choose_conv_layout,
    keep_faster,
    start_blocked_build,
)
from engine.fusion.workloads import code_version, tuned_set_key
from engine.graph.prepared import PreparedModel
from engine.graph.shapes import with_inferred_shapes


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
    ``substitute`` applies the GDPNPU operator substitutions that measured faster on
    ``substitution_bench`` (a ``MeasuredBench`` or ``PredictedBench``; None: onnxruntime on
    this CPU with ``threads``), see ``engine.fusion.substitution``.
    ``choose_backends`` (with ``measure``) moves every TVM segment onnxruntime runs faster
    to onnxruntime and ships onnxruntime alone when the mix is not faster (see
    ``backend_choice``); without it, every segment TVM builds stays on TVM. With it,
    ``split_kernels`` first moves single kernels onnxruntime runs faster, where that pays
    for the boundaries (see ``kernel_split``).
    ``conv_layout`` ("auto", with ``measure`` and no tuned kernels) builds the convs in
    NCHW and in channel blocks and keeps the faster (see ``conv_layout``).
    ``build_cache``: a directory (or a :class:`BuildCache`) where built segments are kept
    by what they were built from, so a later compile of the same segments copies them
    (see ``build_cache``); None: every segment is built.
    """

    out_dir: str
    target: str = "host"
    target_spec: TargetSpec | None = None  # overrides ``target`` (a remote device's)
    threads: int = 0
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    rules: tuple[str, ...] = tuple(rules.RULES)
    tune_trials: int = 0
    tune_minutes: float = 0.0
    tuning_store: str | os.PathLike | RecordStore | None = None
    tuning_builder: object = None  # a MetaSchedule Builder; None: a LocalBuilder here
    measure: bool = True
    build_timeout_s: float = 600.0
    timing_window_s: float = 2.0
    timing_rounds: int = 0  # 0: by the model's run time (fair_timing.rounds_for)
    choose_backends: bool = True
    split_kernels: bool = True
    conv_layout: str = "auto"  # "auto": measured; "nchw" or "blocked" (conv_layout.LAYOUTS)
    substitute: bool = False
    substitution_bench: object = None
    kernel_timing_runs: int = 3
    rtol: float = 1e-3
    atol: float = 1e-4
    seed: int = 0
    build_cache: str | os.PathLike | BuildCache | None = None


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
    timing: dict | None
    backend: str
    backend_choice: list[dict]
    artifact: str
    artifact_files: dict[str, str]
    tuning: dict
    simplify: dict
    timings_s: dict[str, float]
    threads: int
    substitution: dict = field(default_factory=lambda: {"enabled": False})
    conv_layout: dict = field(default_factory=lambda: {"chosen": NCHW, "checked": False})
    kernel_split: dict = field(default_factory=lambda: {"tried": False})
    builds: dict = field(default_factory=dict)
    """Segment builds this compile made and copied from the build cache."""
    as_uploaded: bool = False
    """The artifact is onnxruntime alone on the baseline (``baseline_model``, at
    onnxruntime's best thread setting): the baseline itself, its speed 1 by construction.
    Not so when onnxruntime runs the simplified model, which measured faster."""
    baseline_model: str | None = None
    """What onnxruntime ran as the baseline: the model as uploaded (the user's file), or
    the prepared model where the compile was not given the upload (None: nothing timed)."""
    artifact_reason: str | None = None
    """Why the artifact is what it is, with the whole-model times that decided (None when
    nothing was timed)."""

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
            "timing": self.timing,
            "backend": self.backend,
            "onnxruntime_as_uploaded": self.as_uploaded,
            "baseline_model": self.baseline_model,
            "artifact_reason": self.artifact_reason,
            "backend_choice": list(self.backend_choice),
            "peak_memory": (self.timing or {}).get("peak_memory"),
            "artifact": self.artifact,
            "artifact_files": dict(self.artifact_files),
            "fusion": self.fusion.to_dict(),
            "tuning": dict(self.tuning),
            "simplify": dict(self.simplify),
            "timings_s": dict(self.timings_s),
            "substitution": dict(self.substitution),
            "conv_layout": dict(self.conv_layout),
            "kernel_split": dict(self.kernel_split),
            "builds": dict(self.builds),
        }


def compile_model(
    source, config: CompileConfig, progress: ProgressFn | None = None, upload=None
) -> CompileResult:
    """Compile an ONNX model with TVM for ``config.target`` and check it against onnxruntime.

    ``source``: the prepared model (the stage's input: its upload's digest goes in the
    manifest, its key in the tuning store's entries), or a model (a path, bytes or a
    ``ModelProto``, identified by the sha256 of its bytes). ``upload``: the path of the
    user's file the prepared model was made from. onnxruntime on it is the baseline (what
    the user runs today) and ships when onnxruntime alone wins. Without it, the baseline
    is onnxruntime on the prepared model.

    Raises :class:`engine.errors.EngineError` subclasses for bad models, shapes or
    targets; :class:`engine.errors.Cancelled` propagates from ``progress``.
    """
    from engine.graph.loader import load_model, model_inputs
    from engine.graph.shapes import apply_input_shapes
    from engine.graph.topology import name_uniquely, sorted_model

    report = progress or (lambda fraction, message: None)
    if config.build_cache is not None and not isinstance(config.build_cache, BuildCache):
        config = replace(config, build_cache=BuildCache(config.build_cache))
    clock = _Clock()
    spec = config.target_spec or resolve_target(config.target, config.threads)
    set_threads(spec.threads)
    report(0.0, f"target {spec.target}")
    if isinstance(source, PreparedModel):
        # The upload's digest and the preparation's key, as the prepare step found them: a
        # ModelProto is serialized to be hashed (VGG-19: 2.9 s).
        original, model_sha256, model_key = source.model, source.source_sha256, source.key
    else:
        original = load_model(source)
        model_sha256 = model_key = _source_sha256(source, original)
    original, reordered = sorted_model(original)
    name_uniquely(original.graph.node)
    shapes = full_shapes(original, config.input_shapes, model_inputs)
    apply_input_shapes(original, shapes, allow_empty=True)  # empty tensors compile too
    # onnxruntime's sessions read the model from a file: the prepared model's own when this
    # is the model it holds (the same nodes in the same order, the same shapes; names aside)
    # rather than a copy written (VGG-19: 3.1 s)
    original_file = None
    if isinstance(source, PreparedModel) and source.path is not None and not reordered:
        bound = {
            v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            for v in model_inputs(original)
        }
        if bound == {n: tuple(s) for n, s in source.input_shapes.items()}:
            original_file = Path(source.path)
    # onnxruntime's side of every comparison, and what ships when onnxruntime alone wins
    baseline, baseline_is = (original, original_file), AS_UPLOADED
    if isinstance(source, PreparedModel):
        baseline_is = PREPARED
        if upload is not None:
            found, why = _upload_baseline(upload, original)
            if found is not None:
                baseline, baseline_is = found, AS_UPLOADED
            else:
                baseline_is = f"{PREPARED}; not the upload: {why}"
    model, simplify_report = simplify(original)
    model = prepare(model)
    model = with_inferred_shapes(model)
    clock.lap("simplify")
    report(0.05, f"simplified: {simplify_report['nodes_before']} -> {len(model.graph.node)} nodes")
    origin = simplified_origin(original, model)
    substitution = {"enabled": False}
    if config.substitute:
        bench = config.substitution_bench or MeasuredBench(spec.threads)
        model, found = substitute(model, bench, config.seed, lambda f, m: report(0.05, m))
        substitution = found.to_dict()
        origin.update({new: origin.get(old, [old]) for new, old in found.origin.items()})
        clock.lap("substitution")
    # The store's entries name the graph compiled too, not only the upload: another
    # onnxslim, another preparation or other substitutions make another graph.
    model_key = f"{model_key}\ngraph {_graph_digest(model)}"

    fallback = find_fallback(model, report)
    clock.lap("import")
    report(0.15, f"{len(fallback)} nodes fall back to onnxruntime")
    for _ in range(MAX_FALLBACK_ROUNDS):
        try:
            model, fusion, origin = plan_rules(model, fallback, spec, config.rules, origin, report)
            break
        except SegmentFailed as failed:  # TVM imported it but cannot fuse it: onnxruntime
            _fall_back(fallback, failed)
            report(0.15, f"a segment of {len(failed.segment.nodes)} nodes falls back")
    else:
        raise UnsupportedModelError("TVM failed to compile segment after segment")
    clock.lap("fusion_plan")

    node_order = [n.name for n in model.graph.node]
    op_types = {n.name: n.op_type for n in original.graph.node}
    op_types.update({n.name: n.op_type for n in model.graph.node})
    out = Path(config.out_dir)
    staging = out / "artifact"
    tuning, tuned, check_key = None, None, None
    # the tuning store (records, whole-model checks, layout choices) when tuning is asked
    store = open_store(_store_location(config)) if _tuning_asked(config) else None
    # Asked to choose the conv layout, tuning waits for the choice: it tunes the kernels
    # that ship (the blocked ones ResNet-50 runs, not NCHW kernels the layout check drops).
    tune_after_layout = config.conv_layout == "auto" and store is not None
    layout = BLOCKED if config.conv_layout == BLOCKED else NCHW
    layout_choice = {"chosen": layout, "checked": False, "reason": f"asked for {layout}"}
    blocked = None  # the blocked layout's build, on another core beside the NCHW one
    for _ in range(MAX_FALLBACK_ROUNDS):
        segments = delegate.partition(model, set(fallback))
        stored_layout = _stored_layout(store, spec, config, model_key, fallback)
        try:
            try:
                fused = fuse_all(segments, spec, node_order, layout)
                if layout == BLOCKED and not blockable_in(segments, spec)[0]:
                    layout_choice = {"chosen": NCHW, "checked": False, "reason": "no conv"}
            except LayoutUnsupported as e:
                layout = NCHW
                layout_choice = {"chosen": NCHW, "checked": False, "reason": f"blocked: {e}"}
                fused = fuse_all(segments, spec, node_order, layout)
            if blocked is not None:
                blocked.cancel()  # an earlier round's, of other segments
            if layout == NCHW:
                blocked = start_blocked_build(
                    segments, spec, node_order, out, config, stored_layout
                )
            clock.lap("fuse")
            report(0.3, "fusion planned")
            if tuning is None and not tune_after_layout:
                tuning, tuned, check_key = _tune(
                    fused, spec, config, store, report, model_key, fallback
                )
                clock.lap("tuning")
            built = build_all(
                fused, spec, staging, tuned, config.build_timeout_s, report, config.build_cache
            )
            clock.lap("build")
            break
        except SegmentFailed as failed:
            clock.lap("build")
            _fall_back(fallback, failed)  # TVM imported it but could not compile it
            report(0.3, f"segment {failed.segment.index} falls back to onnxruntime")
        except BaseException:
            if blocked is not None:
                blocked.cancel()  # cancelled, or an error: nobody will wait for it
            raise
    else:
        if blocked is not None:
            blocked.cancel()
        raise UnsupportedModelError("TVM failed to compile segment after segment")
    inputs = input_specs(original, model_inputs)

    artifact_threads = 0  # the target's; onnxruntime alone gets its best setting
    as_uploaded, artifact_reason = False, None

    def manifest(directory: Path, built_there: dict, segs=None, falling=None) -> None:
        """Write the manifest of a build: this compile's segments and fallback, or those
        given (a candidate build's)."""
        artifact.write_manifest(
            directory,
            original,
            model_sha256,
            spec,
            segments if segs is None else segs,
            built_there,
            inputs,
            fallback if falling is None else falling,
            origin,
            tuning or {"enabled": False},  # the layout check's builds come before tuning
            threads=artifact_threads,
        )

    try:
        if config.conv_layout == "auto":
            if not (config.measure and spec.kind == "llvm" and fused):
                layout_choice["reason"] = "not measured (no timing, or not a CPU build)"
            else:
                fused, built, layout_choice = choose_conv_layout(
                    segments,
                    fused,
                    built,
                    spec,
                    node_order,
                    out,
                    config,
                    manifest,
                    report,
                    stored=stored_layout,
                    started=blocked,
                )
                clock.lap("conv_layout")
    finally:
        if blocked is not None:
            blocked.cancel()  # if the choice did not wait for it
            shutil.rmtree(out / BLOCKED_DIR, ignore_errors=True)
    if tuning is None:  # after the layout choice: the chosen layout's kernels
        tuning, tuned, check_key = _tune(fused, spec, config, store, report, model_key, fallback)
        clock.lap("tuning")
        if tuned:
            built = _build_tuned(fused, spec, staging, tuned, tuning, config, report)
            clock.lap("tuned_build")
    if tuned and "end_to_end" not in tuning:
        built = keep_faster(
            fused, spec, out, built, tuned, check_key, tuning, store, config, manifest, report
        )
        clock.lap("end_to_end_check")
        if tuning["end_to_end"].get("kept") == "default":
            # The defaults ship: the split's and the repartition's builds are of them too,
            # and the split's verdict is stored under them, as a compile that takes this
            # check from the store finds it (under the tuned set, it was priced again).
            tuned = None

    split = {"tried": False}
    if (
        config.measure
        and config.choose_backends
        and config.split_kernels
        and fused
        and spec.kind == "llvm"
    ):
        manifest(staging, built)
        current = Build(
            segments,
            fused,
            built,
            staging,
            spec,
            layout_choice["chosen"],
            tuned,
            config,
        )
        current, fallback, split = split_kernels(
            current,
            model,
            fallback,
            example_inputs(inputs, config.seed),
            lambda directory, new, new_built, moved: manifest(directory, new_built, new, moved),
            report,
            _stored_split(store, spec, config, model_key, fallback, layout_choice, tuned),
        )
        segments, fused, built = current.segments, current.fused, current.built
        clock.lap("kernel_split")

    choices = []
    # A model TVM runs whole is one segment: timing it against onnxruntime here would only
    # repeat the whole-model check below (VGG-16: 13 s of a compile).
    whole = len(segments) == 1 and segments[0].backend == delegate.TVM
    if config.measure and config.choose_backends and fused and not whole:
        report(0.8, "timing each TVM segment against onnxruntime")
        manifest(staging, built)
        feeds = example_inputs(inputs, config.seed)
        choices = time_segments(staging, segments, spec.threads, feeds)
        moved = moved_to_onnxruntime(choices)
        if moved:
            fallback.update(moved)
            segments, fused, built = repartition(
                model,
                fallback,
                segments,
                fused,
                built,
                spec,
                staging,
                tuned,
                config,
                report,
                layout_choice["chosen"],
            )
        clock.lap("backend_choice")

    kernels, boundaries = [], []
    for index, seg in fused.items():
        made = plan.make_kernels(seg.calls, index, op_types, origin)
        for kernel in made:
            kernel.schedule = built[index].schedules.get(kernel.func, "default")
        kernels += made
        boundaries += plan.boundaries(seg.calls, index)
    fusion.kernels, fusion.boundaries = kernels, boundaries

    # The artifact holds what its runner reads: not the prepared model (VGG-19: 575 MB of
    # weights beside the TVM parameters' own, 2.6 s to write and as long again to pack).
    manifest(staging, built)
    if config.measure:
        report(0.85, "running against onnxruntime")
        result = measure(
            baseline,
            staging,
            spec,
            config,
            fused,
            built,
            kernels,
            inputs,
            report=lambda f, m: report(0.85 + 0.1 * f, m),
        )
        clock.lap("measure")
        # Anything but the upload itself in onnxruntime on its best setting can be slower.
        # With no TVM kernel left, the build is onnxruntime on the prepared model. It ships
        # on the evidence a mix needs: faster than the upload by the margin in every timing
        # (a close win timed again in fresh processes). Preparing can do work onnxruntime
        # does not (ShuffleNet, an Intel Xeon: 2.418 against 2.767 ms, then 2.426 against
        # 2.796, 12.6% in two fair timings), and a gap of noise does not pass twice (LSTM:
        # 1.155x in one run, 1.00x in the next).
        if config.choose_backends and not mix_wins(result):
            # onnxruntime alone was as fast: ship it, on its best thread setting.
            mix = result["timing"]
            # what was timed against the upload: TVM's kernels with onnxruntime's, or (none
            # left) onnxruntime alone on the prepared model
            prepared_only = not fused
            artifact_threads = mix["onnxruntime_threads"]
            if fused and len(mix.get("timings") or ()) > 1:
                first, again = mix["timings"][0], mix["timings"][-1]
                reason = (
                    f"the mix of TVM and onnxruntime won the first timing ("
                    f"{_timed(first, baseline_is)}) but not when timed again in fresh "
                    f"processes ({_timed(again)}): too close to ship on"
                )
            elif fused and beats(mix["latency_ms"], mix["onnxruntime_latency_ms"]):
                reason = (
                    f"the mix of TVM and onnxruntime was faster than onnxruntime alone on "
                    f"{baseline_is} on each side's fastest round, but not by {MARGIN:.0%} "
                    f"round by round ({_timed(mix['timings'][0])}): too close to ship on"
                )
            elif fused:
                reason = (
                    f"the mix of TVM and onnxruntime ({mix['latency_ms']:.3f} ms) was not "
                    f"faster than onnxruntime alone on {baseline_is} "
                    f"({mix['onnxruntime_latency_ms']:.3f} ms, {artifact_threads} thread(s)) "
                    f"by {MARGIN:.0%}, the margin a mix must win by"
                )
            else:
                timed = " and ".join(_timed(t) for t in each_timing(mix))
                reason = (
                    f"no TVM kernel is left, and onnxruntime on {SIMPLIFIED} was not faster "
                    f"than on {baseline_is} by {MARGIN:.0%} in every timing ({timed}; "
                    f"{artifact_threads} thread(s)), so onnxruntime alone runs {baseline_is}"
                )
            artifact_reason = reason
            for node in model.graph.node:
                fallback.setdefault(node.name, reason)
            # It ships the model onnxruntime was timed on: the user's own file where the
            # stage has it (the prepared one can run slower in onnxruntime: GPT-2's dynamo
            # export 2.5x)
            everything = {n.name for n in baseline[0].graph.node}
            segments, fused, built = delegate.partition(baseline[0], everything), {}, {}
            # the TVM kernels did not ship: the mix's time above says what they gave
            kernels, fusion.boundaries = [], []
            fusion.kernels = kernels
            shutil.rmtree(staging)
            staging.mkdir(parents=True)
            manifest(staging, built)
            result = onnxruntime_alone(baseline[0], staging, config, inputs, mix, baseline_is)
            as_uploaded = True
            result["timing"]["mix"] = {**mix, "prepared_only": prepared_only}
            clock.lap("onnxruntime_only")
        elif config.choose_backends and result["timing"]:
            won = " and ".join(_timed(t) for t in each_timing(result["timing"]))
            artifact_reason = (
                f"{'onnxruntime on ' + SIMPLIFIED if not fused else 'the build'} beat "
                f"onnxruntime alone on {baseline_is} by at least {MARGIN:.0%} in "
                f"every timing ({won})"
            )
        fastest = (result["timing"] or {}).get("compiled_threads")
        if fastest is not None and fastest != (artifact_threads or spec.threads):
            # it ran fastest on another thread setting (a small model on one): ships so
            artifact_threads = fastest
            manifest(staging, built)
    else:
        result = {k: None for k in ("latency_ms", "onnxruntime_latency_ms", "outputs_match")}
        result.update(max_abs_error={}, timing=None)
    backend = (
        "onnxruntime"
        if not fused
        else "tvm"
        if all(seg.backend == delegate.TVM for seg in segments)
        else "mixed"
    )
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
        timing=result["timing"],
        backend=backend,
        backend_choice=[c.to_dict() for c in choices],
        artifact=str(tarball),
        artifact_files=files,
        tuning=tuning,
        simplify=simplify_report,
        timings_s=clock.laps,
        threads=spec.threads,
        substitution=substitution,
        conv_layout=layout_choice,
        kernel_split=split,
        builds=_builds(config.build_cache),
        as_uploaded=as_uploaded,
        baseline_model=baseline_is if config.measure else None,
        artifact_reason=artifact_reason,
    )


def _builds(cache: BuildCache | None) -> dict:
    """How many segment builds this compile copied from ``cache`` and how many it did not
    find there (built, or tried: a build that fails falls back), its own and its
    candidates' but the blocked layout's (built beside it in a process of its own)."""
    if cache is None:
        return {"cache": None, "note": "no build cache: every segment was built"}
    return {"cache": str(cache.directory), "from_cache": cache.hits, "not_in_cache": cache.misses}


def _graph_digest(model: onnx.ModelProto) -> str:
    """sha256 of a model's graph without its weights' values: its nodes, inputs, outputs,
    value types and the weights' names, types and shapes (VGG-19: milliseconds)."""
    digest = hashlib.sha256()
    graph = model.graph
    for part in (graph.node, graph.input, graph.output, graph.value_info):
        for item in part:
            digest.update(item.SerializeToString(deterministic=True))
    for init in graph.initializer:
        digest.update(f"{init.name}:{init.data_type}:{list(init.dims)}".encode())
    return digest.hexdigest()


AS_UPLOADED = "the model as uploaded"
PREPARED = "the prepared model (the stage's input: shape arithmetic folded, inputs bound)"
SIMPLIFIED = "the model as this compile simplified it"


def _upload_baseline(upload, prepared: onnx.ModelProto):
    """The user's file at ``upload`` as onnxruntime's baseline: ((its ModelProto, node
    names made unique for partitioning, and the file, which onnxruntime's sessions read as
    it is), None), or (None, why not) when it cannot be read or does not take the prepared
    model's inputs and give its outputs."""
    from engine.graph.loader import load_model, model_inputs
    from engine.graph.topology import name_uniquely, sorted_model

    try:
        model = load_model(upload)
    except (EngineError, OSError) as e:
        return None, f"the upload could not be read again: {e}"

    def signature(m):
        fed = {v.name: v.type.tensor_type.elem_type for v in model_inputs(m)}
        return fed, [o.name for o in m.graph.output]

    if signature(model) != signature(prepared):
        return None, "the upload takes or gives other tensors than the prepared model"
    model, _ = sorted_model(model)
    name_uniquely(model.graph.node)
    return (model, Path(upload)), None


def _timed(timing: dict, onnxruntime_on: str | None = None) -> str:
    """One timing's figures, as a reason gives them: each side's fastest round (and what
    onnxruntime ran, ``onnxruntime_on``), and the median of the rounds' own speeds where it
    has them."""
    text = f"{timing['latency_ms']:.3f} against {timing['onnxruntime_latency_ms']:.3f} ms"
    if onnxruntime_on:
        text += f" for onnxruntime alone on {onnxruntime_on}"
    speed = timing.get("round_speed")
    if speed is None:
        return text
    return f"{text}; round by round {speed:.3f}x onnxruntime's speed (the rounds' median)"


def _source_sha256(source, model: onnx.ModelProto) -> str:
    """sha256 of the uploaded file's bytes (of the serialized model for a ModelProto)."""
    if isinstance(source, bytes):
        data = source
    elif isinstance(source, onnx.ModelProto):
        data = model.SerializeToString()
    else:
        data = Path(source).read_bytes()
    return hashlib.sha256(data).hexdigest()


def _fall_back(fallback: dict, failed: SegmentFailed) -> None:
    """The nodes of a segment TVM could not fuse or build go to onnxruntime, with why."""
    for name in failed.segment.nodes:
        fallback[name] = f"TVM could not compile its segment: {failed.reason}"


def _tuning_asked(config: CompileConfig) -> bool:
    """A tuning budget, or a store whose records to reuse."""
    return config.tuning_store is not None or bool(config.tune_trials or config.tune_minutes)


def _tune(fused, spec, config: CompileConfig, store, report, model_key: str, fallback: dict):
    """MetaSchedule tuning under the budget, through ``store`` (None: tuning not asked);
    (summary, tuned kernels, the key of their whole-model check). The tuned kernels are
    none when a compile of the same model with the same tuned kernels found the defaults
    faster."""
    if store is None:
        return {"enabled": False}, None, None
    budget = TuningBudget(trials=config.tune_trials, minutes=config.tune_minutes)

    def tuning_progress(fraction: float, message: str) -> None:
        report(0.3 + 0.4 * fraction, message)

    summary, tuned = tune_segments(
        list(fused.values()),
        spec,
        store,
        budget,
        tuning_progress,
        config.build_timeout_s,
        builder=config.tuning_builder,
    )
    check_key = _check_key(tuned, model_key, fallback, config)
    return summary, apply_stored_check(summary, tuned, store, check_key), check_key


def _build_tuned(fused, spec, staging: Path, tuned: dict, tuning: dict, config, report):
    """The build with the tuned kernels, in place of the default one in ``staging``; the
    default build stays when TVM cannot build a tuned kernel (said in ``tuning``)."""
    try:
        return build_all(
            fused, spec, staging, tuned, config.build_timeout_s, report, config.build_cache
        )
    except SegmentFailed as failed:
        tuning["build_error"] = (
            f"segment {failed.segment.index} did not build with its tuned kernels "
            f"({failed.reason}): its default schedules ship"
        )
        tuned.clear()
        return build_all(
            fused, spec, staging, None, config.build_timeout_s, report, config.build_cache
        )


def _check_key(tuned, model_key: str, fallback: dict, config: CompileConfig) -> str | None:
    """The store key of the whole-model check of this model with these tuned kernels."""
    if not tuned:
        return None
    return tuned_set_key(tuned, _build_text(model_key, fallback, config))


def _build_text(model_key: str, fallback: dict, config: CompileConfig) -> str:
    """The model and how it was compiled, for the store's whole-model entries (the layout
    choice, the tuned-against-default check): with the code that builds it, so a choice
    measured on another version of our lowering and schedules is measured again."""
    build = [
        model_key,
        *sorted(fallback),
        *config.rules,
        *map(str, config.input_shapes.items()),
        f"code {code_version()}",
    ]
    return "\n".join(build)


def _stored_layout(store, spec, config: CompileConfig, model_key: str, fallback: dict):
    """Where the layout choice of this model goes in ``store`` (None when the compile has
    no store: tuning not asked)."""
    if store is None:
        return None
    import tvm

    text = "conv-layout\n" + _build_text(model_key, fallback, config)
    key = "layout-" + hashlib.sha256(text.encode()).hexdigest()[:32]
    return StoredLayout(store, target_key(spec.target, tvm.__version__), key, spec)


def _stored_split(store, spec, config, model_key: str, fallback: dict, layout: dict, tuned):
    """Where the kernel split's verdict on this build goes in ``store`` (None when the
    compile has no store: tuning not asked)."""
    if store is None:
        return None
    import tvm

    text = "\n".join(
        ["kernel-split", _build_text(model_key, fallback, config), f"layout {layout['chosen']}"]
    )
    key = "split-" + tuned_set_key(tuned or {}, text).removeprefix("model-")
    return StoredSplit(store, target_key(spec.target, tvm.__version__), key, spec)


def _store_location(config: CompileConfig):
    given = config.tuning_store
    return given if given is not None else Path(config.out_dir) / "tuning"


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


class _Clock:
    def __init__(self):
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        """Seconds since the last lap, added to ``name``'s (a step done again adds up)."""
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.last, 3)
        self.laps["total"] = round(now - self.started, 3)
        self.last = now
