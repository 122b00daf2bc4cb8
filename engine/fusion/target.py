"""Which TVM target to compile for, read off the machine the worker runs on.

``mcpu=native`` silently falls back to a generic x86-64 CPU with this TVM wheel (no AVX2,
no AVX-512), so the CPU is named explicitly: LLVM's own host detection first, then a
table from /proc/cpuinfo flags. A CUDA target is chosen only when asked for and a GPU is
present, so the same code path serves a GPU worker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError
from engine.targets.host import describe_host
from engine.targets.profile import Remote

# Newest first: the first CPU whose required flags are all present wins.
_X86_BY_FLAGS = (
    ("sapphirerapids", {"amx_tile", "avx512_bf16", "avx512_vnni"}),
    ("znver4", {"avx512f", "avx512_bf16", "avx512_vnni", "avx2"}),
    ("cascadelake", {"avx512f", "avx512_vnni"}),
    ("skylake-avx512", {"avx512f", "avx512bw", "avx512vl"}),
    ("haswell", {"avx2", "fma"}),
    ("sandybridge", {"avx"}),
)

_KNOWN_KINDS = ("host", "llvm", "cpu", "cuda")


@dataclass(frozen=True)
class TargetSpec:
    """A compilation target: the TVM target dict, its device, and how it was chosen."""

    name: str
    kind: str  # "llvm" or "cuda"
    target: dict[str, Any]
    threads: int
    detected_from: str
    host: dict[str, Any] = field(default_factory=dict)
    cc: str | None = None
    """The compiler that links libraries for the target (a cross compiler for a remote
    device of another architecture); None: this machine's."""
    remote: Remote | None = None
    """The device this target's code runs on, reached over TVM RPC (None: this machine)."""
    kernels_library: bool = False
    """Also export each segment's kernels as a plain library with their argument shapes,
    so each can be timed on its own where the VM's instrument hook cannot reach (a
    device over RPC)."""

    def tvm_target(self):
        """The ``tvm.target.Target`` (imports tvm)."""
        import tvm

        if self.kind == "cuda":
            return tvm.target.Target(self.target, host=self.host or None)
        return tvm.target.Target(self.target)

    def device(self):
        """The TVM device that runs this target's code."""
        import tvm

        return tvm.cuda(0) if self.kind == "cuda" else tvm.cpu(0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "target": dict(self.target),
            "host": dict(self.host),
            "threads": self.threads,
            "detected_from": self.detected_from,
            "cc": self.cc,
        }

    def export_options(self) -> dict[str, Any]:
        """Keyword arguments of ``export_library`` for this target."""
        if not self.cc:
            return {}
        from tvm.contrib import cc

        return {"fcompile": cc.cross_compiler(self.cc)}


def usable_cores() -> int:
    """Cores this process may run on (affinity mask), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def resolve_target(name: str = "host", threads: int = 0) -> TargetSpec:
    """Build the target for ``name``: ``host``/``llvm``/``cpu`` (this CPU) or ``cuda``.

    ``threads`` 0 means every usable core. Raises :class:`EngineError` (code
    ``bad_target``) for an unknown name or a CUDA target without a GPU.
    """
    threads = threads or usable_cores()
    if name in ("host", "llvm", "cpu"):
        mcpu, source = detect_mcpu()
        llvm = {"kind": "llvm", "mcpu": mcpu, "num-cores": threads}
        return TargetSpec(name, "llvm", llvm, threads, source)
    if name == "cuda":
        if not cuda_available():
            raise EngineError(
                "target 'cuda' asked for, but this worker has no CUDA device",
                code="bad_target",
                hint="Compile for 'host', or run the job on a worker with a GPU.",
            )
        mcpu, _ = detect_mcpu()
        cuda = {"kind": "cuda", "arch": _cuda_arch()}
        host = {"kind": "llvm", "mcpu": mcpu, "num-cores": threads}
        return TargetSpec(name, "cuda", cuda, threads, "tvm.cuda(0)", host)
    raise EngineError(
        f"unknown compile target '{name}'",
        code="bad_target",
        hint=f"Use one of: {', '.join(_KNOWN_KINDS)}.",
    )


def detect_mcpu() -> tuple[str, str]:
    """Name this machine's CPU for LLVM and say how it was found."""
    from tvm.target import codegen

    try:
        cpu = codegen.llvm_get_system_cpu()
        triple = codegen.llvm_get_system_triple()
        if cpu and cpu != "generic" and codegen.llvm_is_valid_cpu(cpu, triple):
            return cpu, "llvm host cpu"
    except Exception:  # noqa: BLE001 - older/other wheels lack these; fall back to flags
        pass
    flags = set(describe_host()["isa_features"])
    for cpu, needed in _X86_BY_FLAGS:
        if needed <= flags:
            return cpu, "cpuinfo flags"
    return "generic", "no known features"


def cuda_available() -> bool:
    import tvm

    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001 - a wheel built without CUDA raises here
        return False


def _cuda_arch() -> str:
    import tvm

    major, minor = tvm.cuda(0).compute_version.split(".")
    return f"sm_{major}{minor}"
