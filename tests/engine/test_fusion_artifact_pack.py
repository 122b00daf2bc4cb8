"""The artifact's tarball: one gzip stream whose chunks are deflated or stored by whether
they compress (trained weights do not: deflating them ran at 17-19 MB/s)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
import zlib

import numpy as np
import pytest

from engine.fusion.artifact import GzipChunks, pack


def _gzip(data: bytes, chunk: int) -> tuple[bytes, GzipChunks]:
    raw = io.BytesIO()
    gz = GzipChunks(raw, chunk=chunk)
    for start in range(0, len(data), 1000):  # in writes that straddle the chunks
        gz.write(data[start : start + 1000])
    gz.close()
    return raw.getvalue(), gz


@pytest.mark.parametrize("size", [0, 1, 65536, 300_001])
def test_chunks_join_into_one_gzip_stream(size):
    rng = np.random.default_rng(size)
    noise = rng.standard_normal(size // 8 + 1).astype("float32").tobytes()
    data = (noise + bytes(size))[:size]  # random, then zeros: both kinds of chunk
    packed, gz = _gzip(data, chunk=32768)
    assert gzip.decompress(packed) == data
    # one member: a raw inflate of the body ends exactly at the trailer
    inflate = zlib.decompressobj(-zlib.MAX_WBITS)
    assert inflate.decompress(packed[10:]) == data and inflate.eof
    assert inflate.unused_data == packed[-8:]
    assert gz.stored + gz.deflated == size
    if size > 100_000:
        assert gz.stored and gz.deflated


def test_random_floats_are_stored_and_constants_deflated():
    floats = np.random.default_rng(0).standard_normal(1 << 20).astype("float32").tobytes()
    packed, gz = _gzip(floats, chunk=1 << 20)
    assert gz.stored == len(floats) and gz.deflated == 0
    assert len(packed) < len(floats) + 1024  # stored blocks: 5 bytes per 64 KB
    constant = np.full(1 << 20, 0.01, dtype="float32").tobytes()
    packed, gz = _gzip(constant, chunk=1 << 20)
    assert gz.deflated == len(constant) and len(packed) < len(constant) // 100


def test_pack_reads_back_with_tar_gzip_and_python_streaming(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    files = {
        "manifest.json": json.dumps(
            {
                "segments": [
                    {
                        "library": "segment0.so",
                        "params": "segment0.params.npz",
                        "kernels": "segment0.kernels.so",
                        "kernel_arguments": "segment0.kernels.json",
                    }
                ]
            }
        ).encode(),
        "run.py": b"print('run')\n" * 500,
        "segment0.so": b"\x7fELF",
        # its kernels alone and their arguments, for timing each kernel on a device
        "segment0.kernels.so": b"\x7fELF",
        "segment0.kernels.json": b"{}",
        "segment0.params.npz": np.random.default_rng(1).standard_normal(1 << 21).tobytes(),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    # an earlier build's segment, whose nodes moved to onnxruntime since: not shipped
    (directory / "segment3.so").write_bytes(b"\x7fELF")
    (directory / "segment3.params.npz").write_bytes(b"")
    (directory / "segment3.kernels.so").write_bytes(b"\x7fELF")
    tarball, digests = pack(directory, tmp_path / "model.tar.gz")
    assert set(digests) == set(files) - {"manifest.json"} | {"model.tar.gz"}
    assert not any(directory.glob("segment3*"))
    for mode in ("r:gz", "r|gz"):  # random access and streaming (``curl ... | tar``)
        with tarfile.open(tarball, mode) as tar:
            got = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        assert {k.removeprefix("model/") for k in got} == set(files)
        assert got["model/run.py"] == files["run.py"]
        assert got["model/segment0.params.npz"] == files["segment0.params.npz"]
    subprocess.run(["gzip", "-t", str(tarball)], check=True)
    listing = subprocess.run(
        ["tar", "tzf", str(tarball)], check=True, capture_output=True, text=True
    ).stdout.split()
    assert "model/segment0.params.npz" in listing
