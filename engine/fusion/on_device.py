"""Compile for a remote device and measure the build there (a ``remote`` target).

The device is asked twice through its tracker: first briefly, for what it reports about
itself (its CPU and triple name the LLVM target, unless the target profile names one),
then, once the build is done here, to run and time it. It is not held while this worker
compiles, so other users of the device are not kept waiting by our compiler.

onnxruntime does not run on the device, so the build's outputs are checked against
onnxruntime run here on the same inputs, and there is no onnxruntime latency to compare
with (``onnxruntime_latency_ms`` is None and says why).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from engine.errors import ProgressFn
from engine.fusion.compile import CompileConfig, compile_model
from engine.fusion.device_measure import measure_artifact
from engine.fusion.fair_timing import ROUNDS_LEAST
from engine.fusion.measurement import against_reference
from engine.fusion.standalone import example_inputs
from engine.fusion.target import TargetSpec
from engine.graph.prepared import PreparedModel
from engine.remote.device import DeviceSession, open_device
from engine.targets.profile import Remote


def device_target(opened: DeviceSession, threads: int) -> TargetSpec:
    """The TVM target of the device, with its kernels exported for per-kernel timing."""
    target = opened.tvm_target(threads)
    named = "the target profile's tvm_target" if opened.remote.tvm_target else "the device"
    return TargetSpec(
        name=f"remote:{opened.remote.key}",
        kind="llvm",
        target=target,
        threads=int(target.get("num-cores") or threads or 1),
        detected_from=f"reported by {named}",
        cc=opened.remote.cc,
        remote=opened.remote,
        kernels_library=True,
    )


def compile_on_device(model, remote: Remote, config: CompileConfig, progress: ProgressFn) -> dict:
    """Build ``model`` (the prepared model, or a model as ``compile_model`` takes it) for
    the device behind ``remote`` and measure it there; returns the compile result's dict
    with the device's figures (``measured_on`` names the device)."""
    with open_device(remote, _span(progress, 0.0, 0.05)) as opened:
        spec = device_target(opened, config.threads)
        progress(0.05, f"building for {opened.label()}: {spec.target}")
    built = compile_model(
        model,
        dataclasses.replace(config, target_spec=spec, measure=False, choose_backends=False),
        progress=_span(progress, 0.05, 0.7),
    )
    result = built.to_dict()
    staging = Path(config.out_dir) / "artifact"
    feeds = example_inputs(_manifest_inputs(staging), config.seed)
    with open_device(remote, _span(progress, 0.7, 0.72)) as opened:
        measured = measure_artifact(
            opened,
            staging,
            feeds,
            repeats=3 * (config.timing_rounds or ROUNDS_LEAST),
            min_repeat_ms=max(1, int(config.timing_window_s * 1e3 / 10)),
            kernel_repeats=max(3, config.kernel_timing_runs),
            progress=_span(progress, 0.72, 0.97),
        )
        device = opened.describe()
    errors, match = _compare(model, feeds, measured["outputs"], config)
    total = sum(t for t in measured["kernels"].values() if t)
    for kernel in result["kernels"]:
        us = measured["kernels"].get((kernel["segment"], kernel["func"]))
        kernel["time_us"] = us
        kernel["share"] = us / total if us and total else None
    latency = measured["latency"]
    result.update(
        latency_ms=latency["median"],
        onnxruntime_latency_ms=None,
        speed_vs_onnxruntime=None,
        outputs_match=match,
        max_abs_error=errors,
        measured_on=device,
        timing={
            "method": measured["method"],
            "measured_on": device,
            "latency_ms": latency["median"],
            "p90_ms": latency["p90"],
            "min_ms": latency["min"],
            "runs": latency["runs"],
            "onnxruntime": "not run: onnxruntime does not run on a device reached over TVM "
            "RPC; the outputs were checked against onnxruntime on this worker",
        },
    )
    progress(1.0, f"measured on {device['key']}: {latency['median']:.3f} ms")
    return result


def _compare(model, feeds, outputs, config: CompileConfig) -> tuple[dict, bool]:
    """Max abs error per output against onnxruntime on this worker, and the verdict."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if isinstance(model, PreparedModel):
        model = model.model
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    reference = dict(
        zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True)
    )
    return against_reference(reference, outputs, config, mismatch=None)


def _manifest_inputs(staging: Path) -> list[dict]:
    import json

    return json.loads((staging / "manifest.json").read_text())["inputs"]


def _span(progress: ProgressFn, start: float, end: float) -> ProgressFn:
    return lambda fraction, message: progress(start + (end - start) * fraction, message)
