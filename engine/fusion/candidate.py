"""The TVM build as an accuracy candidate (engine.accuracy's plug-in `tvm`)."""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import onnx

from engine.fusion.compile import CompileConfig, compile_model
from engine.fusion.standalone import CompiledModel


class TvmCandidate:
    """Compiles the model with TVM (fallback nodes on onnxruntime) and runs the artifact."""

    def __init__(self, model: onnx.ModelProto, *, threads: int = 0) -> None:
        self.name = "tvm"
        self._dir = tempfile.TemporaryDirectory()
        config = CompileConfig(out_dir=self._dir.name, threads=threads)
        self._result = compile_model(model, config)
        # compile_model leaves the unpacked artifact beside the tarball: run what ships.
        self._compiled = CompiledModel(Path(self._dir.name) / "artifact", threads=threads)

    def tensor_names(self) -> Collection[str]:
        return ()

    def run(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str] = ()) -> dict:
        return self._compiled.run(dict(feeds))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "kind": "tvm",
            "kernels": len(self._result.kernels),
            "fallback_nodes": len(self._result.fallback_nodes),
        }


def tvm_candidate(model: onnx.ModelProto, **options) -> TvmCandidate:
    return TvmCandidate(model, threads=int(options.get("threads", 0)))
