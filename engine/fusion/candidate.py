"""The TVM build as an accuracy candidate (engine.accuracy's plug-in `tvm`)."""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

from engine.accuracy.errors import CandidateError
from engine.errors import error_line
from engine.fusion.compile import CompileConfig, compile_model
from engine.fusion.standalone import CompiledModel

FALLBACK_REFUSED = "the nodes that fall back to onnxruntime do not load there"


class TvmCandidate:
    """Compiles the model with TVM (fallback nodes on onnxruntime) and runs the artifact.

    A TVM build is specialized to its input shapes: the model is compiled for the shapes
    of the feeds it is given (``prepare``, or the first ``run``), again for other shapes.
    ``describe()`` says how much of the model TVM compiled: ``compiled_nodes`` and the
    ``fallback`` nodes (with the reason) that onnxruntime runs instead.
    """

    def __init__(
        self, model: onnx.ModelProto, *, threads: int = 0, build_timeout_s: float | None = None
    ) -> None:
        self.name = "tvm"
        self._model = model
        self._threads = threads
        self._build_timeout_s = build_timeout_s
        self._dir = tempfile.TemporaryDirectory()
        self._builds: dict[tuple, tuple[object, CompiledModel]] = {}
        self._last: tuple | None = None

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Compile for the shapes of ``feeds`` (declared shapes for inputs not given).

        Raises :class:`CandidateError` (stage ``compile``) when TVM cannot build it.
        """
        inputs = {v.name for v in self._model.graph.input}
        shapes = {n: tuple(np.shape(v)) for n, v in feeds.items() if n in inputs}
        key = tuple(sorted(shapes.items()))
        if key not in self._builds:
            out = Path(self._dir.name) / f"build{len(self._builds)}"
            # An accuracy check needs the build, not its latency, nor a run on random inputs.
            config = CompileConfig(
                out_dir=str(out), threads=self._threads, input_shapes=shapes, measure=False
            )
            if self._build_timeout_s is not None:
                config = replace(config, build_timeout_s=self._build_timeout_s)
            try:
                result = compile_model(self._model, config)
            except Exception as e:  # noqa: BLE001 - TVM and onnxruntime raise their own errors
                raise CandidateError(f"tvm: {_compile_failure(e)}", stage="compile") from e
            # compile_model leaves the unpacked artifact beside the tarball: run what ships.
            try:
                compiled = CompiledModel(out / "artifact", self._threads)
            except Exception as e:  # noqa: BLE001 - a segment's runtime refuses to load it
                if type(e).__module__.startswith("onnxruntime"):
                    # Not a broken build: this pipeline cannot take the model.
                    message = (
                        f"tvm: {FALLBACK_REFUSED} ({len(result.fallback_nodes)} nodes): "
                        f"{error_line(e)}"
                    )
                    raise CandidateError(message, stage="import") from e
                message = f"tvm: cannot load the build: {error_line(e)}"
                raise CandidateError(message, stage="compile") from e
            self._builds[key] = (result, compiled)
        self._last = key

    def tensor_names(self) -> Collection[str]:
        return ()

    def run(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str] = ()) -> dict:
        self.prepare(feeds)
        _, compiled = self._builds[self._last]
        try:
            return compiled.run(dict(feeds))
        except Exception as e:  # noqa: BLE001 - the TVM runtime raises its own errors
            raise CandidateError(f"tvm: failed to run: {error_line(e)}", stage="run") from e

    def describe(self) -> dict:
        if self._last is None:
            self.prepare({})
        result, _ = self._builds[self._last]
        return {
            "name": self.name,
            "kind": "tvm",
            "kernels": len(result.kernels),
            "compiled_nodes": result.tvm_nodes,
            "fallback_nodes": len(result.fallback_nodes),
            "fallback": [
                {k: f[k] for k in ("node", "op_type", "reason")} for f in result.fallback_nodes
            ],
            "input_shapes": {name: list(shape) for name, shape in self._last},
        }


def tvm_candidate(model: onnx.ModelProto, **options) -> TvmCandidate:
    timeout = options.get("build_timeout_s")
    return TvmCandidate(
        model,
        threads=int(options.get("threads", 0)),
        build_timeout_s=float(timeout) if timeout is not None else None,
    )


def _compile_failure(error: Exception) -> str:
    return f"compile failed: {type(error).__name__}: {error_line(error)}"
