"""What the worker's own machine is: recorded with every measurement and used to build the
`host` target preset (a measured target)."""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path

import psutil

# ISA features that matter to kernel selection; the rest of /proc/cpuinfo's flags is noise.
_INTERESTING_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "avx_vnni",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "i8mm",
    "bf16",
)


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return info
    for line in path.read_text(errors="replace").splitlines():
        if ":" not in line:
            if info:
                break  # the first processor block is enough
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


@lru_cache(maxsize=1)
def describe_host() -> dict:
    """CPU model, core counts, ISA features and memory of this machine, as plain JSON."""
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    model = info.get("model name") or info.get("Processor") or platform.processor() or "unknown"
    return {
        "hostname": platform.node(),
        "cpu_model": model,
        "arch": platform.machine(),
        "logical_cores": os.cpu_count() or 1,
        "physical_cores": psutil.cpu_count(logical=False) or os.cpu_count() or 1,
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "isa_features": sorted(f for f in _INTERESTING_FLAGS if f in flags),
        "memory_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def host_target_profile() -> dict:
    """The `host` preset: one CPU unit, described by what can be read off this machine.
    Throughput and bandwidth are unknown until measured, so they stay null."""
    host = describe_host()
    return {
        "name": "host",
        "kind": "measured",
        "description": f"The worker's own CPU: {host['cpu_model']}",
        "machine": host,
        "units": [
            {
                "name": "cpu",
                "kind": "cpu",
                "cores": host["usable_cores"] or host["logical_cores"],
                "peak_gflops": {"fp32": None},
                "mem_bw_gbps": None,
                "launch_us": None,
                "supports": "all",
                "source": {
                    "cores": "measured: usable cores of this process (os.sched_getaffinity)",
                    "peak_gflops.fp32": "unknown until measured (engine.profiling.roofs)",
                    "mem_bw_gbps": "unknown until measured (engine.profiling.roofs)",
                },
            }
        ],
        "links": [],
    }
