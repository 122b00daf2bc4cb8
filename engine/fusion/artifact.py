"""The downloadable artifact: libraries, parameters, manifest, runner, simplified ONNX.

``model.tar.gz`` unpacks to a directory that runs with ``python run.py`` and needs only
the packages its manifest names (``requirements``). Every file's sha256 is in the
manifest (except the manifest's own) and in the compile result.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import tarfile
from importlib import metadata
from pathlib import Path

import onnx

from engine.fusion import delegate
from engine.fusion.standalone import MANIFEST

RUNNER = "run.py"
_PACKAGES = ("apache-tvm", "apache-tvm-ffi", "numpy", "ml_dtypes")


def write_manifest(
    directory: Path,
    model: onnx.ModelProto,
    model_sha256: str,
    spec,
    segments,
    built,
    inputs,
    fallback,
    origin,
    tuning,
    threads: int = 0,
) -> dict:
    """Write ``segment*.onnx`` for fallback segments, the runner and ``manifest.json``
    (an earlier manifest's segment files are removed first)."""
    for stale in directory.glob("segment*.onnx"):
        stale.unlink()
    shutil.copyfile(Path(__file__).with_name("standalone.py"), directory / RUNNER)
    entries = []
    for seg in segments:
        if seg.backend == delegate.TVM:
            b = built[seg.index]
            entries.append(
                {
                    "backend": "tvm",
                    "index": seg.index,
                    "device": spec.kind if spec.kind == "cuda" else "cpu",
                    "library": b.library,
                    "params": b.params_file,
                    "param_names": b.param_names,
                    "inputs": seg.inputs,
                    "outputs": seg.outputs,
                    "nodes": len(seg.nodes),
                }
            )
        else:
            name = f"segment{seg.index}.onnx"
            onnx.save(seg.model, str(directory / name))
            entries.append(
                {
                    "backend": "onnxruntime",
                    "index": seg.index,
                    "model": name,
                    "inputs": seg.inputs,
                    "outputs": seg.outputs,
                    "nodes": seg.nodes,
                }
            )
    packages = list(_PACKAGES)
    if any(s.backend == delegate.ORT for s in segments):
        packages.append("onnxruntime")
    manifest = {
        "format": 1,
        "model_sha256": model_sha256,
        "target": spec.to_dict(),
        "threads": threads or spec.threads,
        "inputs": inputs,
        "outputs": [{"name": o.name} for o in model.graph.output],
        "segments": entries,
        "fallback": [
            {"node": n, "reason": r, "original_nodes": origin.get(n, [n])}
            for n, r in fallback.items()
        ],
        "tuning": {k: v for k, v in tuning.items() if k in ("enabled", "records_used", "trials")},
        "requirements": [_pin(p) for p in packages if _version(p)],
        "toolchain": {
            "tvm": _version("apache-tvm"),
            "tvm_ffi": _version("apache-tvm-ffi"),
            "llvm": _llvm_version(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "files": {},
    }
    _write(directory, manifest)
    return manifest


def pack(directory: Path, tarball: Path) -> tuple[Path, dict[str, str]]:
    """Record every file's sha256 in the manifest, then tar and gzip the directory."""
    manifest = json.loads((directory / MANIFEST).read_text())
    files = {
        p.name: sha256_file(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    manifest["files"] = files
    _write(directory, manifest)
    with tarfile.open(tarball, "w:gz", compresslevel=6) as tar:
        tar.add(directory, arcname="model")
    return tarball, {**files, tarball.name: sha256_file(tarball)}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write(directory: Path, manifest: dict) -> None:
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))


def _pin(package: str) -> str:
    return f"{package}=={_version(package)}"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _llvm_version() -> str | None:
    try:
        from tvm.target import codegen

        return str(codegen.llvm_version_major())
    except Exception:  # noqa: BLE001 - a wheel without LLVM
        return None
