"""Target profiles (ARCHITECTURE section 6): the dataclasses a validated profile is made of.

A profile describes the compute units of a target, the links between them, their power
and, for the mobile-cloud split, the networks to a server; ``engine.targets.schema``
validates a document into them.

Units of measure (one convention everywhere): ``*_gbps`` fields are gigabytes per second
(memory and link bandwidth), network ``*_mbps`` fields are megabits per second, as networks
are usually quoted. ``peak_gflops`` holds GFLOPS (GOPS for integer types) per dtype: a dtype
that is absent means the unit cannot compute in it, a dtype mapped to ``null`` means it can
but the number is unknown. Unknown numbers stay ``None``: nothing here invents a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import EngineError

SCHEMA_VERSION = 1
DEFAULT_EFFICIENCY_KEY = "*"
"""Key of ``Unit.efficiency`` that applies to op types without a factor of their own."""

Source = str | dict[str, str] | None
"""Where numbers come from: one citation for the entry, or one per field name."""


@dataclass(frozen=True)
class Unit:
    """A compute unit. ``cores`` counts all cores; with ``clusters`` they split evenly.

    ``local_buffer_bytes`` is per core and ``global_buffer_bytes`` per cluster (per unit
    without clusters), as in GraphTurbo's DSA abstraction; ``global_buffer_bw_gbps`` is the
    bandwidth between a cluster's global buffer and its cores' local buffers, and
    ``mem_bw_gbps`` the bandwidth to DRAM. ``efficiency`` holds the fraction
    of the roofline each op type reaches (1.0 = on the roof), fitted by calibration.
    """

    name: str
    kind: str
    cores: int | None = None
    clusters: int | None = None
    frequency_ghz: float | None = None
    peak_gflops: dict[str, float | None] = field(default_factory=dict)
    mem_bw_gbps: float | None = None
    launch_us: float | None = None
    supports: str | tuple[str, ...] = "all"
    local_buffer_bytes: int | None = None
    global_buffer_bytes: int | None = None
    global_buffer_bw_gbps: float | None = None
    efficiency: dict[str, float] = field(default_factory=dict)
    description: str = ""
    source: Source = None

    def supports_op(self, op_type: str) -> bool:
        return self.supports == "all" or op_type in self.supports

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "cores": self.cores,
            "clusters": self.clusters,
            "frequency_ghz": self.frequency_ghz,
            "peak_gflops": dict(self.peak_gflops),
            "mem_bw_gbps": self.mem_bw_gbps,
            "launch_us": self.launch_us,
            "supports": self.supports if self.supports == "all" else list(self.supports),
            "local_buffer_bytes": self.local_buffer_bytes,
            "global_buffer_bytes": self.global_buffer_bytes,
            "global_buffer_bw_gbps": self.global_buffer_bw_gbps,
            "efficiency": dict(self.efficiency),
            "description": self.description,
            "source": _copy_source(self.source),
        }


@dataclass(frozen=True)
class Link:
    """Moving a tensor from ``src`` to ``dst`` costs ``latency_us + bytes / gbps``.

    ``zero_copy`` units share memory and layout (big and LITTLE clusters): moving is free.
    A bidirectional link also prices the reverse direction.
    """

    src: str
    dst: str
    latency_us: float | None = None
    gbps: float | None = None
    zero_copy: bool = False
    bidirectional: bool = True
    source: Source = None

    def to_dict(self) -> dict:
        return {
            "from": self.src,
            "to": self.dst,
            "latency_us": self.latency_us,
            "gbps": self.gbps,
            "zero_copy": self.zero_copy,
            "bidirectional": self.bidirectional,
            "source": _copy_source(self.source),
        }


@dataclass(frozen=True)
class Power:
    """Power of a unit while it computes and while idle; energy uses the difference."""

    active_w: float | None = None
    idle_w: float | None = None
    source: Source = None

    def to_dict(self) -> dict:
        return {
            "active_w": self.active_w,
            "idle_w": self.idle_w,
            "source": _copy_source(self.source),
        }


@dataclass(frozen=True)
class Network:
    """A wireless link to a server (thesis eq. 3-1/3-2: T = RTT + bytes / bandwidth, E = w T)."""

    name: str
    rtt_ms: float | None = None
    up_mbps: float | None = None
    down_mbps: float | None = None
    radio_w: float | None = None
    source: Source = None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "rtt_ms": self.rtt_ms,
            "up_mbps": self.up_mbps,
            "down_mbps": self.down_mbps,
            "radio_w": self.radio_w,
            "source": _copy_source(self.source),
        }


@dataclass(frozen=True)
class Remote:
    """Where a ``remote`` target's device is: a TVM RPC tracker and the key the device
    registered under (``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY``).

    ``tvm_target`` is the LLVM target dict to compile for; ``None`` builds for what the
    device reports about itself (its CPU and triple). ``cc`` is the compiler that links
    libraries for it (a cross compiler such as ``aarch64-linux-gnu-g++``); ``None`` uses
    this machine's. A run waits ``wait_s`` for a busy device before it gives up.
    """

    tracker_host: str
    tracker_port: int
    key: str
    tvm_target: dict | None = None
    cc: str | None = None
    wait_s: float = 300.0
    session_timeout_s: float = 3600.0

    @property
    def tracker(self) -> str:
        return f"{self.tracker_host}:{self.tracker_port}"

    def to_dict(self) -> dict:
        return {
            "tracker": self.tracker,
            "key": self.key,
            "tvm_target": dict(self.tvm_target) if self.tvm_target else None,
            "cc": self.cc,
            "wait_s": self.wait_s,
            "session_timeout_s": self.session_timeout_s,
        }


@dataclass(frozen=True)
class TargetProfile:
    """A validated target profile; :meth:`to_dict` gives back a document that validates."""

    name: str
    kind: str
    units: tuple[Unit, ...]
    version: int = 1
    description: str = ""
    links: tuple[Link, ...] = ()
    power: dict[str, Power] = field(default_factory=dict)
    networks: tuple[Network, ...] = ()
    machine: dict | None = None
    queue: str | None = None
    """The job queue of the worker that measures this target (measured targets)."""
    notes: tuple[str, ...] = ()
    remote: Remote | None = None
    """The device of a ``remote`` target (None for the other kinds)."""

    def unit(self, name: str) -> Unit:
        for unit in self.units:
            if unit.name == name:
                return unit
        raise EngineError(f"target '{self.name}' has no unit '{name}'", code="invalid_target")

    def network(self, name: str) -> Network:
        for network in self.networks:
            if network.name == name:
                return network
        raise EngineError(f"target '{self.name}' has no network '{name}'", code="invalid_target")

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "kind": self.kind,
            "version": self.version,
            "description": self.description,
            "units": [u.to_dict() for u in self.units],
            "links": [link.to_dict() for link in self.links],
            "power": {name: p.to_dict() for name, p in self.power.items()},
            "networks": [n.to_dict() for n in self.networks],
            "machine": self.machine,
            "queue": self.queue,
            "notes": list(self.notes),
            "remote": self.remote.to_dict() if self.remote else None,
        }


def _copy_source(source: Source) -> Source:
    return dict(source) if isinstance(source, dict) else source
