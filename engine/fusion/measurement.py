"""Measuring a build: its outputs and whole-model latency against onnxruntime on the
same inputs with the same threads, and the time of every kernel."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from engine.fusion.backend_choice import timing_wins
from engine.fusion.fair_timing import rounds_for, time_fairly
from engine.fusion.standalone import CompiledModel, example_inputs
from engine.fusion.timing import kernel_times_us

# A model whose artifact takes at least this long a run on all cores is not timed on one
# thread, on either side: in the compile benchmark's full runs on an Intel Xeon and an AMD
# EPYC (bench/results/compile_bench_untuned_2threads_xeon_winograd.json and
# ..._epyc_zen3_avx2.json), each of the 19 models that took onnxruntime 10 ms or more on 2
# threads ran 1.49-2.08x slower on 1, while loading the one-thread processes and timing
# their round cost VGG-19 about 8 s of its compile.
ONE_THREAD_UNTIMED_MS = 30.0


def measure(original, staging, spec, config, fused, built, kernels, inputs, report=None) -> dict:
    """Run the build and onnxruntime on the same example inputs: outputs compared, both
    timed fairly (:mod:`engine.fusion.fair_timing`: fresh processes, onnxruntime at its
    best thread setting, rounds alternating), peak memory of each, and each of ``kernels``
    given its time and share (in place). ``original``: onnxruntime's baseline (the model
    as uploaded, or the prepared model), a ModelProto, or (the ModelProto, the path of a
    file holding it or None)."""
    feeds = example_inputs(inputs, config.seed)
    with tempfile.TemporaryDirectory(prefix="workbench-measure-") as tmp:
        model_path = Path(tmp) / "model.onnx"
        _model_file(original, model_path)
        compiled = CompiledModel(staging, threads=spec.threads)
        outputs = compiled.run(feeds)
        started = time.perf_counter()
        compiled.run(feeds)  # warm: how long a run is decides the thread settings timed
        run_ms = (time.perf_counter() - started) * 1e3
        errors, match = compare_outputs(model_path, outputs, feeds, spec.threads, config)
        _attach_kernel_times(compiled, fused, built, kernels, feeds, config.kernel_timing_runs)
        del compiled  # its thread pools would share the cores with the timed processes
        settings, not_timed = None, None
        if spec.threads > 1 and run_ms >= ONE_THREAD_UNTIMED_MS:
            settings = (spec.threads,)
            not_timed = (
                f"not timed: the artifact took {run_ms:.0f} ms a run on {spec.threads} "
                f"threads in the compile (at least {ONE_THREAD_UNTIMED_MS:.0f} ms: each of 19 "
                "models of 10 ms or more timed on both ran 1.5-2.1x slower on one thread)"
            )

        rounds = config.timing_rounds or rounds_for(run_ms, config.timing_window_s)

        def timing(share: float, offset: float, settings=settings):
            return time_fairly(
                staging,
                model_path,
                feeds,
                spec.threads,
                # the artifact ships on its own fastest setting, as onnxruntime is timed at
                # its best
                compiled_settings=config.choose_backends,
                rounds=rounds,
                window_s=config.timing_window_s / rounds,
                progress=report and (lambda f, m: report(offset + share * f, m)),
                settings=settings,
                not_timed=not_timed,
            )

        fair = timing(1.0 if not config.choose_backends else 0.5, 0.0)
        # A first timing that lost on either figure is not timed again: a win ships only
        # when every timing of it wins on both (``mix_wins``), so no second timing could
        # turn it.
        if config.choose_backends and timing_wins(fair.timings()[0]) and not fair.decisive():
            # The rounds that chose are not the figure to ship on: noise that favoured the
            # artifact in them would ship it and show as a win (LSTM's mix: 1.27x in the
            # compile, 0.85x timed again after it). A close win is timed again, in
            # processes of its own, and ships only if it wins there too; only each side's
            # fastest thread setting is timed again (VGG-19: 46 s for the second timing
            # in full).
            if report:
                report(0.5, "timing again: the artifact won, not by enough to be sure")
            fastest = {fair.compiled_threads or spec.threads, fair.onnxruntime_threads}
            fair = fair.combined(timing(0.5, 0.5, tuple(fastest)))
    return {
        "latency_ms": fair.latency_ms,
        "onnxruntime_latency_ms": fair.onnxruntime_latency_ms,
        "outputs_match": match,
        "max_abs_error": errors,
        "timing": fair.to_dict(),
    }


def _model_file(original, path: Path) -> None:
    """``original`` at ``path``, for every onnxruntime session of a measurement: a file
    holding it is linked there, or copied from another file system (kept whole if its
    cache evicts it meanwhile; a copy of VGG-19 takes a fraction of the 2.3 s its
    serialization takes); with none, or gone since, the ModelProto is saved."""
    proto, file = original if isinstance(original, tuple) else (original, None)
    if file is not None:
        try:
            os.link(file, path)
            return
        except FileNotFoundError:  # evicted from its cache since the compile began
            pass
        except OSError:  # another file system
            try:
                shutil.copyfile(file, path)
                return
            except FileNotFoundError:
                pass
    onnx.save(proto, str(path))


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


def compare_outputs(original, outputs: dict, feeds: dict, threads: int, config):
    """Each output against onnxruntime's on the model as uploaded (a ModelProto, or the
    path it was saved to): ({name: max abs error}, whether all are within ``config.atol +
    config.rtol * max |reference|``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    source = original.SerializeToString() if hasattr(original, "graph") else str(original)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    reference = dict(zip(names, session.run(names, feeds), strict=True))
    return against_reference(reference, outputs, config, mismatch=float("inf"))


def against_reference(reference: dict, outputs: dict, config, mismatch):
    """({name: max abs error}, all within ``config.atol + config.rtol * max |reference|``)
    for every reference output; an output missing or of another shape gets ``mismatch``
    and fails."""
    errors, match = {}, True
    for name, ref in reference.items():
        got = outputs.get(name)
        if got is None or got.shape != ref.shape:
            errors[name], match = mismatch, False
            continue
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        errors[name] = float(diff.max()) if diff.size else 0.0
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        match &= bool(errors[name] <= config.atol + config.rtol * scale)
    return errors, match


def onnxruntime_alone(original, staging, config, inputs, timed: dict, what: str) -> dict:
    """The result of an artifact that is onnxruntime alone on ``original`` (``what`` it is:
    the baseline ``timed`` was timed against), at the
    thread setting onnxruntime was fastest on in ``timed`` (a whole-model timing that just
    ran): that timing's onnxruntime figure is the artifact's, from the same processes and
    rounds, so it is not timed again (VGG-16: 24 s of a compile). The artifact is run
    once through its own runner and its outputs compared."""
    threads = timed["onnxruntime_threads"]
    feeds = example_inputs(inputs, config.seed)
    outputs = CompiledModel(staging, threads=threads).run(feeds)
    errors, match = compare_outputs(original, outputs, feeds, threads, config)
    side = f"onnxruntime_{threads}"
    timing = {
        **timed,
        "method": (
            f"the artifact is onnxruntime on {what} at its best thread setting: its "
            "figures are onnxruntime's from the timing above (" + timed["method"] + ")"
        ),
        "latency_ms": timed["onnxruntime_latency_ms"],
        "compiled_threads": threads,
        "compiled_ms_by_threads": {str(threads): timed["onnxruntime_latency_ms"]},
        "peak_memory": {**timed["peak_memory"], "compiled": dict(timed["peak_memory"][side])},
        "runs_per_round": {**timed["runs_per_round"], "compiled": timed["runs_per_round"][side]},
    }
    return {
        "latency_ms": timing["latency_ms"],
        "onnxruntime_latency_ms": timed["onnxruntime_latency_ms"],
        "outputs_match": match,
        "max_abs_error": errors,
        "timing": timing,
    }
