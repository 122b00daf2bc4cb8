"""Run a compiled artifact on a remote device: its outputs, the whole model's time and
each kernel's, all measured there.

The whole model is timed by TVM's ``time_evaluator`` on the device (the clock is the
device's, the RPC round trip is not in it): repeats of at least ``min_repeat_ms`` each,
median and p90 over the repeats. A kernel is timed on its own from the kernels' library
(``<segment>.kernels.so``, see ``engine.fusion.build.export_kernels``) on random
arguments of its shapes: the VM's instrument hook, which times kernels inside a run on
this machine, does not cross an RPC link.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from engine.errors import EngineError, ProgressFn
from engine.fusion.artifact import sha256_file
from engine.fusion.build import kernel_arguments_file
from engine.fusion.standalone import to_numpy
from engine.remote.device import DeviceSession, device_errors

MAX_KERNEL_ARG_BYTES = 256 << 20  # a kernel whose arguments are larger is not timed alone


def measure_artifact(
    opened: DeviceSession,
    staging: Path,
    feeds: dict[str, np.ndarray],
    *,
    repeats: int = 10,
    min_repeat_ms: int = 100,
    kernel_repeats: int = 5,
    progress: ProgressFn | None = None,
) -> dict:
    """Outputs, whole-model time and per-kernel times of the artifact in ``staging`` on
    ``opened``'s device: ``{"outputs", "latency", "kernels": {(segment, func): us},
    "method"}``. Raises :class:`EngineError` (``unsupported_on_device``) when a segment
    needs onnxruntime, which a device's TVM runtime does not have."""
    report = progress or (lambda fraction, message: None)
    manifest = json.loads((staging / "manifest.json").read_text())
    others = [s for s in manifest["segments"] if s["backend"] != "tvm"]
    if others:
        nodes = sum(len(s.get("nodes") or []) for s in others)
        raise EngineError(
            f"{nodes or 'some'} node(s) of this model need onnxruntime (TVM could not "
            "import or compile them), and a device reached over TVM RPC runs TVM code only",
            code="unsupported_on_device",
            hint="See the compile stage's fallback list on a measured target; profile this "
            "model on a measured or modeled target instead.",
        )
    with device_errors(opened):
        segments = [_RemoteSegment(opened, staging, s) for s in manifest["segments"]]
        report(0.1, f"running on {opened.label()}")
        values = dict(feeds)
        for segment in segments:
            values.update(segment.run(values))
        outputs = {o["name"]: values[o["name"]] for o in manifest["outputs"]}
        report(0.3, "timing the whole model on the device")
        runs: list[float] = []
        for segment in segments:  # one segment unless TVM split the model
            times = segment.time(values, repeats, min_repeat_ms)
            runs = times if not runs else [a + b for a, b in zip(runs, times, strict=True)]
        kernels: dict[tuple[int, str], float | None] = {}
        for k, segment in enumerate(segments):
            report(0.6 + 0.4 * k / len(segments), "timing each kernel on the device")
            kernels.update(segment.time_kernels(kernel_repeats))
    ordered = sorted(runs)
    latency = {
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "min": ordered[0],
        "runs": len(ordered),
    }
    return {
        "outputs": outputs,
        "latency": latency,
        "kernels": kernels,
        "method": (
            f"TVM time_evaluator on the device: {repeats} repeats of at least "
            f"{min_repeat_ms} ms each (median and p90 over repeats); each kernel alone, "
            f"{kernel_repeats} repeats on random inputs of its shapes"
        ),
    }


class _RemoteSegment:
    """One TVM segment loaded on the device: its VM, weights and kernels' library."""

    def __init__(self, opened: DeviceSession, staging: Path, spec: dict):
        import tvm
        from tvm import relax

        self.spec, self.dev, self.tvm = spec, opened.device, tvm
        session = opened.session
        library = staging / spec["library"]
        # a name of its own per build: the device's loader caches libraries by path
        stem = f"wb-{sha256_file(library)[:16]}"
        session.upload(str(library), f"{stem}.so")
        self.vm = relax.VirtualMachine(session.load_module(f"{stem}.so"), self.dev)
        with np.load(staging / spec["params"]) as params:
            self.params = [tvm.runtime.tensor(params[n], self.dev) for n in spec["param_names"]]
        self.kernels = None
        if spec.get("kernels"):
            session.upload(str(staging / spec["kernels"]), f"{stem}.kernels.so")
            self.kernels = session.load_module(f"{stem}.kernels.so")
            self.kernel_args = json.loads((staging / spec["kernel_arguments"]).read_text())

    def arguments(self, values: dict) -> list:
        tensor = self.tvm.runtime.tensor
        inputs = [tensor(np.asarray(values[n], order="C"), self.dev) for n in self.spec["inputs"]]
        return inputs + self.params

    def run(self, values: dict) -> dict:
        result = self.vm["main"](*self.arguments(values))
        names = self.spec["outputs"]
        outputs = [result] if len(names) == 1 else list(result)
        return {n: to_numpy(o) for n, o in zip(names, outputs, strict=True)}

    def time(self, values: dict, repeats: int, min_repeat_ms: int) -> list[float]:
        """Milliseconds per run, one figure per repeat."""
        evaluator = self.vm.time_evaluator(
            "main", self.dev, number=1, repeat=repeats, min_repeat_ms=min_repeat_ms
        )
        return [r * 1e3 for r in evaluator(*self.arguments(values)).results]

    def time_kernels(self, repeats: int) -> dict[tuple[int, str], float | None]:
        """Median microseconds of each kernel alone (None: not timeable alone)."""
        if self.kernels is None:
            return {}
        index = int(self.spec["index"])
        times = time_each(self.kernels, self.dev, self.kernel_args, repeats)
        return {(index, func): us for func, us in times.items()}


def time_kernel_library(opened: DeviceSession, library: Path, repeats: int = 5) -> dict:
    """Upload a kernels' library (and its ``.json`` of arguments) and time each kernel
    alone on the device: ``{func: median us or None}``."""
    name = f"wb-{sha256_file(library)[:16]}.kernels.so"
    with device_errors(opened):
        opened.session.upload(str(library), name)
        module = opened.session.load_module(name)
        arguments = json.loads((library.parent / kernel_arguments_file(library.name)).read_text())
        return time_each(module, opened.device, arguments, repeats)


def time_each(module, dev, arguments: dict, repeats: int) -> dict[str, float | None]:
    """Each function of ``module`` timed on random arguments of the shapes given."""
    import tvm

    found: dict[str, float | None] = {}
    rng = np.random.default_rng(0)
    for func, specs in arguments.items():
        size = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in specs or [])
        if specs is None or size > MAX_KERNEL_ARG_BYTES:
            found[func] = None
            continue
        args = [tvm.runtime.tensor(_random(s, d, rng), dev) for s, d in specs]
        evaluator = module.time_evaluator(func, dev, number=1, repeat=repeats, min_repeat_ms=5)
        found[func] = statistics.median(evaluator(*args).results) * 1e6
    return found


def _random(shape: list[int], dtype: str, rng) -> np.ndarray:
    if dtype.startswith(("float", "bfloat")):
        return rng.standard_normal(shape).astype("float32").astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 2, shape).astype(dtype)  # indices stay in range
