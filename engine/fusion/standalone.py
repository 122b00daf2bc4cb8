"""Run a compiled workbench artifact: ``python run.py [--inputs x.npz] [--out y.npz]``.

This file is copied into every artifact as ``run.py`` and must stay standalone: it
imports only the standard library, numpy, TVM's runtime and, when the manifest lists
segments that fell back, onnxruntime. The engine runs compiled models through the same
class, so what is measured is what ships.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

# TVM's thread pool pins the calling thread to one core when it starts. onnxruntime
# sessions created afterwards in the same process (fallback segments, the comparison
# runs, a worker's next profile) inherit that mask and crowd all their threads onto that
# core: Inception v1 with 2 onnxruntime threads took 82 ms instead of 25 ms here. Leave
# thread placement to the OS.
os.environ.setdefault("TVM_BIND_THREADS", "0")
# TVM sizes its pool, once, to half the logical cores on x86 (it assumes hyper-threads),
# and later requests for more threads are capped there: on 2 vCPUs every build ran on
# one thread. Let the pool reach every usable core; ``threads`` then picks the count.
os.environ.setdefault(
    "TVM_NUM_THREADS",
    str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()),
)

MANIFEST = "manifest.json"
SPIN_COUNT = ("TVM_THREAD_POOL_SPIN_COUNT", "3000")
"""How long TVM's pool workers spin after a parallel kernel in a mix (see ``CompiledModel``):
TVM reads it once, when its pool starts its first worker."""
ORT_SPIN_STOP = ("session.force_spinning_stop", "1")
"""The onnxruntime session option that makes its pool threads block when a run returns
instead of spinning on (see ``CompiledModel``)."""


class CompiledModel:
    """The segments of a compiled model, run in order on named tensors."""

    def __init__(self, directory: str | os.PathLike, threads: int = 0):
        self.directory = Path(directory)
        self.manifest = json.loads((self.directory / MANIFEST).read_text())
        self.threads = threads or int(self.manifest.get("threads", 0))
        # Next to TVM segments, onnxruntime's pool threads must not spin on after a run:
        # they would hold the cores TVM's next kernels need (a fallen-back LSTM ran 20x
        # slower, 12 ms instead of 0.6). They block when the run returns, and onnxruntime
        # keeps every thread: on one, AlexNet's convs in a mix took 30 ms instead of 14.
        backends = {s["backend"] for s in self.manifest["segments"]}
        self.has_tvm = "tvm" in backends
        # A TVM pool worker whose kernel ends waits for the next by calling sched_yield in
        # a loop, up to TVM_THREAD_POOL_SPIN_COUNT times: 300000 by default, tens of
        # milliseconds. An onnxruntime segment after a TVM one then runs beside a worker
        # still spinning on a core its threads need: a SqueezeNet split (TVM, then
        # onnxruntime) ran at 7.9 ms instead of 3.3-3.7 in 4 fresh processes of 23; at
        # 3000 (under a millisecond) in none of 23. A model on TVM alone keeps TVM's
        # default: at 3000 its workers sleep between some kernels (VGG-19 4% slower; see
        # bench/results/tvm_spin_count_xeon_model167.json). It takes effect only if no TVM
        # pool has started in this process yet, so before the segments load.
        if self.has_tvm and backends - {"tvm"}:  # a mix: TVM and onnxruntime segments
            os.environ.setdefault(*SPIN_COUNT)
        self.segments = [self._load(s) for s in self.manifest["segments"]]

    @property
    def input_specs(self) -> list[dict]:
        return self.manifest["inputs"]

    @property
    def output_names(self) -> list[str]:
        return [o["name"] for o in self.manifest["outputs"]]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model; returns every output of the model by name."""
        values = dict(feeds)
        for segment in self.segments:
            values.update(segment.run(values))
        return {name: values[name] for name in self.output_names}

    def example_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Inputs drawn from the manifest's specs: normal floats, small integers."""
        return example_inputs(self.input_specs, seed)

    def _load(self, spec: dict):
        if spec["backend"] == "tvm":
            return _TvmSegment(self.directory, spec, self.threads)
        return _OrtSegment(self.directory, spec, self.threads, spin_stop=self.has_tvm)


class _TvmSegment:
    def __init__(self, directory: Path, spec: dict, threads: int):
        import tvm
        from tvm.runtime.vm import VirtualMachine

        if threads > 0:
            config = tvm.get_global_func("runtime.config_threadpool", True)
            if config is not None:
                config(1, threads)
        self.spec = spec
        self.device = tvm.cuda(0) if spec.get("device") == "cuda" else tvm.cpu(0)
        self.lib = tvm.runtime.load_module(_loadable(directory / spec["library"]))
        self.vm = VirtualMachine(self.lib, self.device)
        with np.load(directory / spec["params"]) as params:
            self.params = [
                tvm.runtime.tensor(params[name], self.device) for name in spec["param_names"]
            ]
        self._tvm = tvm
        self._zero_copy = self.device.dlpack_device_type() == _DLPACK_CPU

    def arguments(self, values: dict) -> list:
        return [self._tensor(values[n]) for n in self.spec["inputs"]] + self.params

    def _tensor(self, value) -> object:
        """``value`` as a TVM tensor: on the CPU, the array's own memory when TVM can take
        it (C-contiguous and 64-byte aligned, as TVM's kernels assume), else a copy.
        Copying every input and output cost 25-60 us a call for a 224x224 image here, a
        few percent of a 1 ms model."""
        # asarray, not ascontiguousarray: that one makes a 0-d input 1-d.
        array = np.asarray(value, order="C")
        if self._zero_copy and array.ndim and array.ctypes.data % _ALIGNMENT == 0:
            try:
                return self._tvm.runtime.from_dlpack(array)
            except Exception:  # noqa: BLE001 - a dtype or layout DLPack does not carry
                pass
        return self._tvm.runtime.tensor(array, self.device)

    def run(self, values: dict) -> dict:
        result = self.vm["main"](*self.arguments(values))
        names = self.spec["outputs"]
        outputs = [result] if len(names) == 1 else list(result)
        convert = _cpu_numpy if self._zero_copy else to_numpy
        return {n: convert(o) for n, o in zip(names, outputs, strict=True)}


_LOADED: dict[str, tuple[int, int]] = {}


def _loadable(library: Path) -> str:
    """A path to load ``library`` from. The dynamic loader keeps one library per path for
    the life of the process: a new build written where an older one was loaded from
    would silently run the old code. Such a build is loaded from a copy of its own."""
    import shutil
    import tempfile

    key = str(library.resolve())
    stat = library.stat()
    identity = (stat.st_ino, stat.st_mtime_ns)
    if _LOADED.setdefault(key, identity) == identity:
        return key
    copy = Path(tempfile.mkdtemp(prefix="workbench-lib-")) / library.name
    shutil.copyfile(library, copy)
    return str(copy)


_ALIGNMENT = 64  # bytes: what TVM's CPU kernels assume of every buffer
_DLPACK_CPU = 1


def _cpu_numpy(value) -> np.ndarray:
    """A CPU result as an array over the same memory (it stays alive with the array:
    the VM allocates every call's outputs anew)."""
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (BufferError, TypeError, RuntimeError):
            pass
    return to_numpy(value)


def to_numpy(value) -> np.ndarray:
    """A VM result as an array: a tensor, a shape (the output of an ONNX ``Shape``, an
    int64 vector) or a scalar."""
    if hasattr(value, "numpy"):
        return value.numpy()
    if isinstance(value, bool | int | float):
        return np.asarray(value)
    return np.asarray([int(d) for d in value], dtype=np.int64)


class _OrtSegment:
    def __init__(self, directory: Path, spec: dict, threads: int, spin_stop: bool = False):
        self.spec = spec
        self.session = ort_session(str(directory / spec["model"]), threads, spin_stop)

    def run(self, values: dict) -> dict:
        feeds = {n: values[n] for n in self.spec["inputs"]}
        outputs = self.session.run(self.spec["outputs"], feeds)
        return dict(zip(self.spec["outputs"], outputs, strict=True))


def ort_session(model, threads: int, spin_stop: bool):
    """An onnxruntime CPU session on ``threads`` (0: its default); with ``spin_stop`` its
    pool threads block when a run returns, as they must next to TVM's kernels."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads > 0:
        options.intra_op_num_threads = threads
    if spin_stop:
        options.add_session_config_entry(*ORT_SPIN_STOP)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def example_inputs(specs: list[dict], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for ``specs``, each in 64-byte aligned memory (TVM takes such an
    array as it is; see ``_TvmSegment._tensor``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        dtype = np.dtype(spec["dtype"])
        shape = tuple(spec["shape"])
        if np.issubdtype(dtype, np.floating):
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            value = rng.integers(0, 2, shape).astype(bool)
        else:  # below the table an index input reads (the manifest's "high")
            value = rng.integers(0, spec.get("high", 2), shape).astype(dtype)
        feeds[spec["name"]] = aligned(value)
    return feeds


def aligned(array: np.ndarray) -> np.ndarray:
    """``array`` in C order in 64-byte aligned memory (itself when it already is)."""
    array = np.asarray(array, order="C")
    if array.ctypes.data % _ALIGNMENT == 0:
        return array
    raw = np.empty(array.nbytes + _ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    out = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a compiled model artifact.")
    parser.add_argument("--inputs", help=".npz with one array per model input (default: random)")
    parser.add_argument("--out", help="write the outputs to this .npz")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Running needs TVM's runtime library only, not its compiler (100 MB and a second of
    # start-up less).
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    model = CompiledModel(Path(__file__).resolve().parent, threads=args.threads)
    if args.inputs:
        with np.load(args.inputs) as data:
            feeds = {k: aligned(data[k]) for k in data.files}
    else:
        feeds = model.example_inputs(args.seed)
    outputs = model.run(feeds)
    if args.out:
        np.savez(args.out, **outputs)
    for name, value in outputs.items():
        print(f"{name}: shape {list(value.shape)} {value.dtype} sum {float(value.sum()):.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
