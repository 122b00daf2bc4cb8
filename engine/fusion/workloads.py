"""Keys of kernels and of tuned builds in the tuning store: structural hashes of TensorIR,
shared by the build (applying stored schedules) and by tuning (storing them)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


def workload_module(func):
    """The IRModule MetaSchedule tunes for a kernel (and the key's source)."""
    import tvm

    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def workload_key(mod) -> str:
    """The store key of a kernel: its TensorIR's structure."""
    return structural_key(mod)


def structural_key(obj) -> str:
    """A short stable hash of a TVM object's structure."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(obj) & 0xFFFFFFFFFFFFFFFF:016x}"


def tuned_set_key(tuned: dict, build: str) -> str:
    """The store key of the whole-model check of one build (``build`` names the model and
    how it was compiled) with one set of tuned kernels ({workload key: PrimFunc}): a
    different record for any of them is a different set."""
    kernels = ",".join(f"{key}:{structural_key(func)}" for key, func in sorted(tuned.items()))
    text = f"{build}\n{kernels}"
    return "model-" + hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.cache
def code_version() -> str:
    """A digest of the compile stage's source (``engine/fusion``): what shapes a build."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
