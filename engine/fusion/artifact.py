"""The downloadable artifact: libraries, parameters, manifest, runner, and the ONNX
model of each segment onnxruntime runs (not the prepared model: the runner does not read it).

``model.tar.gz`` unpacks to a directory that runs with ``python run.py`` and needs only
the packages its manifest names (``requirements``). Every file's sha256 is in the
manifest (except the manifest's own) and in the compile result.

The tarball is one gzip member, deflated chunk by chunk (``GzipChunks``): a chunk that
compresses is deflated, one that does not (trained weights: float32 with random low bits
saves 7%) is stored. Deflating such data runs at 17-19 MB/s at any level here (25M
normal floats: level 1 19 MB/s, level 6 17 MB/s, both to 93%), so packing a model of
trained weights with one level throughout took a minute per GB of artifact.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import struct
import tarfile
import zlib
from importlib import metadata
from pathlib import Path

import onnx

from engine.fusion import delegate
from engine.fusion.build import kernel_arguments_file
from engine.fusion.standalone import MANIFEST

RUNNER = "run.py"
_PACKAGES = ("apache-tvm", "apache-tvm-ffi", "numpy", "ml_dtypes")
SEGMENT_FILES = ("library", "params", "model", "kernels", "kernel_arguments")  # a segment's


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
                    # the kernels alone and their arguments, where exported for timing
                    # each kernel on a device
                    "kernels": b.kernels_library,
                    "kernel_arguments": (
                        kernel_arguments_file(b.kernels_library) if b.kernels_library else None
                    ),
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
    """Record every file's sha256 in the manifest, then tar and gzip the directory. Segment
    files no segment of the manifest names (a build whose nodes moved to onnxruntime since)
    are removed first: the artifact holds what its manifest names."""
    manifest = json.loads((directory / MANIFEST).read_text())
    named = {
        entry[k] for entry in manifest.get("segments", ()) for k in SEGMENT_FILES if entry.get(k)
    }
    for path in directory.glob("segment*"):
        if path.is_file() and path.name not in named:
            path.unlink()
    files = {
        p.name: sha256_file(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    manifest["files"] = files
    _write(directory, manifest)
    with open(tarball, "wb") as raw:
        gz = GzipChunks(raw)
        with tarfile.open(fileobj=gz, mode="w|") as tar:
            tar.add(directory, arcname="model")
        gz.close()
    return tarball, {**files, tarball.name: sha256_file(tarball)}


class GzipChunks:
    """A writable file that gzips what is written to it into ``raw`` as one member (RFC
    1952), deflating each ``chunk`` bytes with a compressor of its own, at ``level`` when
    a sample of the chunk compresses to at most ``worth`` of its size and stored (level 0)
    otherwise. Each chunk's deflate blocks end byte-aligned and unfinished (a sync flush),
    so the chunks join into one deflate stream, as pigz joins its blocks: gunzip, tar and
    Python's gzip and tarfile (streaming too) read it as any gzip file."""

    SAMPLES = 4  # slices of the chunk, spread over it, deflated at level 1 to decide
    SAMPLE_BYTES = 16 << 10

    def __init__(self, raw, chunk: int = 4 << 20, level: int = 6, worth: float = 0.9):
        self.raw, self.chunk, self.level, self.worth = raw, chunk, level, worth
        self.pending = bytearray()
        self.crc, self.size = 0, 0
        self.stored = self.deflated = 0  # bytes of input written each way
        # ID1 ID2, deflate, no flags, no mtime (the same files make the same bytes),
        # no extra flags, OS unknown
        raw.write(b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff")

    def write(self, data) -> int:
        self.pending += data
        while len(self.pending) >= self.chunk:
            self._deflate(bytes(self.pending[: self.chunk]))
            del self.pending[: self.chunk]
        return len(data)

    def close(self) -> None:
        if self.pending:
            self._deflate(bytes(self.pending))
            self.pending.clear()
        # the stream's last block: empty, marked final
        self.raw.write(zlib.compressobj(self.level, zlib.DEFLATED, -zlib.MAX_WBITS).flush())
        self.raw.write(struct.pack("<II", self.crc, self.size & 0xFFFFFFFF))

    def _deflate(self, data: bytes) -> None:
        level = self.level if self._compresses(data) else 0
        compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self.raw.write(compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH))
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        if level:
            self.deflated += len(data)
        else:
            self.stored += len(data)

    def _compresses(self, data: bytes) -> bool:
        if len(data) <= self.SAMPLES * self.SAMPLE_BYTES:
            sample = data
        else:
            step = (len(data) - self.SAMPLE_BYTES) // (self.SAMPLES - 1)
            sample = b"".join(
                data[i * step : i * step + self.SAMPLE_BYTES] for i in range(self.SAMPLES)
            )
        return len(zlib.compress(sample, 1)) <= self.worth * len(sample)


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
