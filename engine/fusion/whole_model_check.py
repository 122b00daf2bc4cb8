"""The whole-model check of a tuned build: the model timed with its tuned kernels and
with every kernel on its default schedule, the faster build kept, and the outcome
stored so that the next compile of the same model with the same tuned kernels reuses it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from engine.errors import Cancelled, EngineError
from engine.fusion import delegate
from engine.fusion.segment_builds import build_all, failure_reason
from engine.fusion.standalone import CompiledModel, example_inputs
from engine.fusion.timing import TimingConfig, time_calls


def apply_stored_check(tuning: dict, tuned, store, key: str | None):
    """The tuned kernels to build, after the whole-model check a compile of the same model
    with the same tuned kernels stored (see :func:`keep_faster`): none if it kept the
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


def keep_faster(fused, spec, out: Path, built, tuned, key, tuning, store, config, manifest, report):
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
        built_default = build_all(
            fused, spec, other, None, config.build_timeout_s, report, config.build_cache
        )
        manifest(staging, built)
        manifest(other, built_default)
        tuned_ms, default_ms, runs = time_alternating(staging, other, spec, config, report)
    except Exception as e:
        shutil.rmtree(other, ignore_errors=True)
        if isinstance(e, EngineError | Cancelled):
            raise
        # SegmentFailed, TVM's or the runtime's errors: the tuned build stays, unchecked.
        tuning["end_to_end"] = {"kept": "tuned", "checked": False, "error": failure_reason(e)}
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
        tuning["end_to_end"]["store_error"] = failure_reason(e)
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


CHECK_ROUNDS = 3


def time_alternating(
    first: Path,
    second: Path,
    spec,
    config,
    report,
    message: str = "timing the whole model, tuned and with default schedules",
    models: list[CompiledModel] | None = None,
) -> tuple[float, float, int]:
    """Median latency (ms) of two builds of one model, timed in alternating rounds so a
    change in the machine's speed falls on both; and how many runs each got. ``models``:
    the two builds already loaded (else loaded from ``first`` and ``second``)."""
    models = models or load_pair(first, second, spec)
    feeds = example_inputs(models[0].input_specs, config.seed)
    timing = TimingConfig(window_s=config.timing_window_s / CHECK_ROUNDS, min_runs=3)
    medians: list[list[float]] = [[], []]
    runs = [0, 0]
    for r in range(CHECK_ROUNDS):
        report(0.8, f"{message} ({r + 1}/{CHECK_ROUNDS})")
        for k, compiled in enumerate(models):
            result = time_calls(lambda c=compiled: c.run(feeds), timing)
            medians[k].append(result["median"])
            runs[k] += result["runs"]
        if decided(medians[0], medians[1]):
            break  # no later round could turn it (VGG-19: 213 against 317 ms, 10 s saved)
    return float(np.median(medians[0])), float(np.median(medians[1])), min(runs)


DECISIVE = 1.25
"""Two timings are decided when every round of one is this much slower than every round
of the other: the noise of this kind of machine moves a round by 10-20%, not 25%."""


def decided(first: list[float], second: list[float]) -> bool:
    """Every round of one side at least :data:`DECISIVE` times every round of the other."""
    if not first or not second:
        return False
    return min(first) > DECISIVE * max(second) or min(second) > DECISIVE * max(first)


BLOCKED_DIR = "artifact-blocked"
"""Where, beside the compile's ``artifact``, the blocked conv layout is built."""

# The blocked layout replaces NCHW only when the whole model runs this much faster in it.
_BLOCKED_GAIN = 0.97


class BlockedBuild:
    """The model fused with its convs in channel blocks, and that build running in a
    forked child (see :func:`start_blocked_build`)."""

    def __init__(self, fused, pending):
        self.fused, self._pending = fused, pending

    def result(self, config, report) -> dict:
        """The build's segments, once it is done (raises as ``forked.call_forked``)."""
        return self._pending.result(
            timeout_s=config.build_timeout_s * (len(self.fused) + 1),
            poll=lambda s: report(0.8, f"building the convs in blocks ({s:.0f} s)"),
        )

    def cancel(self) -> None:
        self._pending.cancel()


def start_blocked_build(segments, spec, node_order, out: Path, config, stored=None):
    """Start the blocked layout's build on another core, to run while this process builds
    the NCHW one: a :class:`BlockedBuild`, or None when :func:`choose_conv_layout` will not
    want it (no blockable conv, not timed, a stored choice of NCHW) or cannot run it beside
    (one core, no fork). A blocked fusion that fails starts nothing: the layout choice
    then meets the same failure and says why."""
    from engine.fusion import forked
    from engine.fusion.conv_layout import BLOCKED, NCHW
    from engine.fusion.segment_builds import fuse_all, start_build_all

    if not (config.conv_layout == "auto" and config.measure and spec.kind == "llvm"):
        return None
    if not forked.fork_available() or len(os.sched_getaffinity(0)) < 2:
        return None
    if not blockable_in(segments, spec)[0]:
        return None
    earlier = stored.get() if stored else None
    if earlier is not None and earlier["chosen"] == NCHW:
        return None
    try:
        fused_blocked = fuse_all(segments, spec, node_order, BLOCKED)
    except Exception:  # noqa: BLE001 - LayoutUnsupported, SegmentFailed: see above
        return None
    pending = start_build_all(
        fused_blocked, spec, out / BLOCKED_DIR, config.build_timeout_s, config.build_cache
    )
    return BlockedBuild(fused_blocked, pending)


def choose_conv_layout(
    segments,
    fused,
    built,
    spec,
    node_order,
    out: Path,
    config,
    manifest,
    report,
    stored=None,
    started: BlockedBuild | None = None,
):
    """Build the model's convs in channel blocks too, time both builds in alternating
    rounds, check they agree, and keep the faster (see ``engine.fusion.conv_layout``).
    Returns ``(fused, built, choice)``; ``choice`` says which layout ships and why.

    ``stored``: a :class:`StoredLayout`. The choice a compile of the same model on the same
    target stored is taken without building or timing the other layout (a second compile
    of a tuned model); a choice made here is stored. ``started``: the blocked build,
    already under way (:func:`start_blocked_build`); the caller ends it if it is not used."""
    from engine.fusion.conv_layout import BLOCKED, NCHW, LayoutUnsupported
    from engine.fusion.segment_builds import fuse_all

    def blocked_build():
        if started is not None:
            return started.fused, started.result(config, report)
        fused_blocked = fuse_all(segments, spec, node_order, BLOCKED)
        return fused_blocked, build_all(
            fused_blocked, spec, other, None, config.build_timeout_s, report, config.build_cache
        )

    convs, lanes = blockable_in(segments, spec)
    choice = {"chosen": NCHW, "blockable_convs": convs, "block": 2 * lanes, "checked": False}
    if not convs:
        return fused, built, {**choice, "reason": "no dense conv whose channels make blocks"}
    staging, other = out / "artifact", out / BLOCKED_DIR
    earlier = stored.get() if stored else None
    if earlier is not None:
        if earlier["chosen"] == NCHW:
            return fused, built, earlier
        fused_blocked, built_blocked = blocked_build()
        shutil.rmtree(staging)
        other.rename(staging)
        return fused_blocked, built_blocked, earlier
    report(0.8, f"building the {convs} convs in blocks of up to {2 * lanes} channels, to compare")
    try:
        fused_blocked, built_blocked = blocked_build()
        manifest(staging, built)
        manifest(other, built_blocked)
        models = load_pair(staging, other, spec)  # once, for the check and the timing
        agree, worst = outputs_agree(models, config)
        if not agree:
            shutil.rmtree(other, ignore_errors=True)
            reason = f"the blocked build's outputs differ from the NCHW build's by {worst:.3g}"
            return fused, built, {**choice, "reason": reason}
        nchw_ms, blocked_ms, runs = time_alternating(
            staging,
            other,
            spec,
            config,
            report,
            "timing the whole model, NCHW and blocked",
            models,
        )
    except LayoutUnsupported as e:
        shutil.rmtree(other, ignore_errors=True)
        return fused, built, {**choice, "reason": f"an operator cannot take channel blocks: {e}"}
    except Exception as e:
        shutil.rmtree(other, ignore_errors=True)
        if isinstance(e, EngineError | Cancelled):
            raise
        return fused, built, {**choice, "reason": f"the blocked build failed: {failure_reason(e)}"}
    kept = BLOCKED if blocked_ms < _BLOCKED_GAIN * nchw_ms else NCHW
    choice = {
        **choice,
        "chosen": kept,
        "checked": True,
        "nchw_ms": round(nchw_ms, 4),
        "blocked_ms": round(blocked_ms, 4),
        "runs": runs,
        "threads": spec.threads,
        "measured": (
            f"median of {CHECK_ROUNDS} alternating rounds, at least {runs} runs each, "
            f"{spec.threads or 'all'} thread(s), random inputs"
        ),
        "reason": (
            f"blocked {blocked_ms:.3f} ms against NCHW {nchw_ms:.3f} ms"
            + ("" if kept == BLOCKED else f" (blocked ships when {1 - _BLOCKED_GAIN:.0%} faster)")
        ),
    }
    if stored:
        stored.put(choice)
    if kept == NCHW:
        shutil.rmtree(other)
        return fused, built, choice
    shutil.rmtree(staging)
    other.rename(staging)
    return fused_blocked, built_blocked, choice


class StoredLayout:
    """The conv layout a compile chose by measurement, in the tuning store under the model
    and how it was compiled (``key``) on one target: a second compile takes it instead of
    building and timing both layouts again (ResNet-50: 6 s of a compile)."""

    KIND = "conv-layout"

    def __init__(self, store, target_key: str, key: str, spec):
        self.store, self.target_key, self.key, self.spec = store, target_key, key, spec

    def get(self) -> dict | None:
        """The stored choice, marked as such; None if there is none or it is damaged."""
        from engine.fusion.conv_layout import BLOCKED, NCHW

        try:
            entry = self.store.get(self.target_key, self.key)
            if not entry or entry.get("kind") != self.KIND:
                return None
            choice = dict(entry["choice"])
            if choice.get("chosen") not in (NCHW, BLOCKED):
                return None
        except Exception:  # noqa: BLE001 - a damaged or foreign entry: choose again
            return None
        return {**choice, "stored": True}

    def put(self, choice: dict) -> None:
        """Store a choice made by measurement. A store that fails leaves the compile as is
        (the next compile measures again) and ``choice`` says why."""
        kernel = f"whole model: conv layout ({choice['chosen']})"
        error = put_whole_model_entry(self, self.KIND, kernel, {"choice": choice})
        if error:  # the choice stands; the next compile measures
            choice["store_error"] = error


def put_whole_model_entry(stored, kind: str, kernel: str, payload: dict) -> str | None:
    """Store a whole-model decision (``stored``: its store, target key, key and spec) in
    the shape of the store's kernel entries; the reason it failed, or None."""
    import tvm

    entry = {
        "kind": kind,
        "kernel": kernel,
        **payload,
        "records": [],
        "default_us": None,
        "tuned_us": None,
        "budget_trials": 0,
        "target": dict(stored.spec.target),
        "tvm": tvm.__version__,
    }
    try:
        stored.store.put(stored.target_key, stored.key, entry)
    except Exception as e:  # noqa: BLE001 - the caller's decision stands without it
        return failure_reason(e)
    return None


def blockable_in(segments, spec) -> tuple[int, int]:
    """How many convs of the model's TVM segments the blocked layout would block, and
    the target's vector lanes."""
    from engine.fusion.conv_layout import blockable_convs
    from engine.fusion.importer import import_onnx
    from engine.fusion.preparation import dtypes
    from engine.fusion.schedules import vector_lanes
    from engine.graph.shapes import without_heavy_weights

    lanes = vector_lanes(spec.tvm_target())
    convs = 0
    for segment in segments:
        if segment.backend == delegate.TVM:
            # a conv blocks by its shapes: the weights' values stay out of the import
            light = without_heavy_weights(segment.model)
            convs += blockable_convs(import_onnx(light, {}, dtypes(light)).mod, lanes)
    return convs, lanes


def load_pair(first: Path, second: Path, spec) -> list[CompiledModel]:
    return [CompiledModel(d, threads=spec.threads) for d in (first, second)]


def outputs_agree(models: list[CompiledModel], config) -> tuple[bool, float]:
    """Whether two builds of one model give the same outputs on random inputs, within
    the compile check's tolerances; and the largest difference."""
    feeds = example_inputs(models[0].input_specs, config.seed)
    results = [m.run(feeds) for m in models]
    worst = 0.0
    for name, value in results[0].items():
        a, b = np.asarray(value), np.asarray(results[1][name])
        if a.shape != b.shape:
            return False, float("inf")
        if a.size and np.issubdtype(a.dtype, np.floating):
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
        if not np.allclose(a, b, rtol=config.rtol, atol=config.atol, equal_nan=True):
            return False, worst
    return True, worst
