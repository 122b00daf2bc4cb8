"""Target profiles (ARCHITECTURE section 6): validating a profile document.

A profile describes the compute units of a target, the links between them, their power
and, for the mobile-cloud split, the networks to a server. :func:`validate_profile` turns a
JSON document into a :class:`TargetProfile` or raises :class:`ProfileError` listing every
problem found as ``(field path, reason)``; it never stops at the first one.

The dataclasses are in ``engine.targets.profile``; they are importable from here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import EngineError
from engine.targets.profile import (
    DEFAULT_EFFICIENCY_KEY,
    SCHEMA_VERSION,
    Link,
    Network,
    Power,
    Remote,
    Source,
    TargetProfile,
    Unit,
)

__all__ = [
    "DEFAULT_EFFICIENCY_KEY",
    "DTYPES",
    "SCHEMA_VERSION",
    "TARGET_KINDS",
    "UNIT_KINDS",
    "Link",
    "Network",
    "Power",
    "ProfileError",
    "Remote",
    "Source",
    "TargetProfile",
    "Unit",
    "validate_profile",
]

TARGET_KINDS = ("measured", "remote", "modeled")
UNIT_KINDS = ("cpu", "gpu", "dsp", "npu", "dsa")
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4")


class ProfileError(EngineError):
    """A target profile that does not validate; ``problems`` lists ``(field, reason)``."""

    code = "invalid_target"

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        shown = "; ".join(f"{path}: {reason}" for path, reason in self.problems[:8])
        more = f" (and {len(self.problems) - 8} more)" if len(self.problems) > 8 else ""
        super().__init__(
            f"invalid target profile, {len(self.problems)} problem(s): {shown}{more}",
            hint="Fix the listed fields; unknown numbers may be left null.",
        )

    def to_dict(self) -> dict:
        result: dict[str, Any] = dict(super().to_dict())
        result["problems"] = [{"field": f, "reason": r} for f, r in self.problems]
        return result


def validate_profile(document: Any) -> TargetProfile:
    """Validate a profile document (parsed JSON/YAML) and return the :class:`TargetProfile`.

    Raises :class:`ProfileError` with every problem as ``(field path, reason)``, e.g.
    ``("units[1].mem_bw_gbps", "must be positive, got -3")``. A single ``network`` mapping
    (as in the architecture's example) is accepted as a network named ``default``.
    """
    check = _Checker()
    if not isinstance(document, Mapping):
        raise ProfileError([("", f"a profile must be a mapping, got {type(document).__name__}")])
    check.keys(document, "", _PROFILE_KEYS, required=("name", "kind", "units"))
    name = check.text(document.get("name"), "name")
    kind = check.choice(document.get("kind"), "kind", TARGET_KINDS)
    version = check.number(document.get("version", 1), "version", integer=True, positive=True)
    if document.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        check.problem("schema_version", f"only version {SCHEMA_VERSION} is known")
    units = _units(check, document.get("units"))
    unit_names = {u.name for u in units}
    links = _links(check, document.get("links", []), unit_names)
    power = _power(check, document.get("power", {}), unit_names)
    networks = _networks(check, document)
    machine = document.get("machine")
    if machine is not None and not isinstance(machine, Mapping):
        check.problem("machine", "must be a mapping")
    queue = document.get("queue")
    if queue is not None and not (isinstance(queue, str) and queue):
        check.problem("queue", "must be a non-empty string or null")
    notes = document.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        check.problem("notes", "must be a list of strings")
        notes = []
    remote = _remote(check, document.get("remote"), kind)
    if check.problems:
        raise ProfileError(check.problems)
    return TargetProfile(
        name=name,
        kind=kind,
        units=tuple(units),
        version=int(version),
        description=str(document.get("description") or ""),
        links=tuple(links),
        power=power,
        networks=tuple(networks),
        machine=dict(machine) if machine else None,
        queue=queue,
        notes=tuple(notes),
        remote=remote,
    )


_PROFILE_KEYS = frozenset(
    {
        "schema_version", "name", "kind", "version", "description", "units", "links",
        "power", "network", "networks", "machine", "queue", "notes",
        "remote",
    }
)  # fmt: skip
_UNIT_KEYS = frozenset(
    {
        "name", "kind", "cores", "clusters", "frequency_ghz", "peak_gflops", "mem_bw_gbps",
        "launch_us", "supports", "local_buffer_bytes", "global_buffer_bytes",
        "global_buffer_bw_gbps", "efficiency", "description", "source",
    }
)  # fmt: skip
_LINK_KEYS = frozenset({"from", "to", "latency_us", "gbps", "zero_copy", "bidirectional", "source"})
_POWER_KEYS = frozenset({"active_w", "idle_w", "source"})
_NETWORK_KEYS = frozenset({"name", "rtt_ms", "up_mbps", "down_mbps", "radio_w", "source"})


_REMOTE_KEYS = frozenset({"tracker", "key", "tvm_target", "cc", "wait_s", "session_timeout_s"})
MAX_WAIT_S = 24 * 3600.0


def _remote(check: _Checker, raw: Any, kind: str) -> Remote | None:
    """The tracker and key of a remote target; required for ``remote``, refused elsewhere."""
    if raw is None:
        if kind == "remote":
            check.problem("remote", "is required for a remote target: {tracker, key}")
        return None
    if kind != "remote":
        check.problem("remote", f"only a remote target names a device, this one is {kind}")
        return None
    if not isinstance(raw, Mapping):
        check.problem("remote", "must be a mapping {tracker: 'host:port', key: '...'}")
        return None
    check.keys(raw, "remote", _REMOTE_KEYS, required=("tracker", "key"))
    host, port = parse_tracker(check, raw.get("tracker"), "remote.tracker")
    key = check.text(raw.get("key"), "remote.key")
    if key and (len(key) > 200 or any(c.isspace() for c in key)):
        check.problem("remote.key", "must be at most 200 characters with no spaces")
    target = raw.get("tvm_target")
    if target is not None and not (
        isinstance(target, Mapping)
        and target.get("kind") == "llvm"
        and all(isinstance(k, str) and isinstance(v, str | int | bool) for k, v in target.items())
    ):
        check.problem(
            "remote.tvm_target",
            "must be an LLVM target mapping, e.g. "
            "{kind: llvm, mtriple: aarch64-linux-gnu, mcpu: cortex-a76}",
        )
        target = None
    cc = raw.get("cc")
    if cc is not None and not (isinstance(cc, str) and cc and len(cc) < 300):
        check.problem("remote.cc", "must be the name or path of a compiler")
        cc = None
    wait = check.number(raw.get("wait_s", 300.0), "remote.wait_s")
    timeout = check.number(
        raw.get("session_timeout_s", 3600.0), "remote.session_timeout_s", positive=True
    )
    for name, value in (("wait_s", wait), ("session_timeout_s", timeout)):
        if value is not None and value > MAX_WAIT_S:
            check.problem(f"remote.{name}", f"must be at most {MAX_WAIT_S:g} s")
    if host is None or not key:
        return None
    return Remote(
        tracker_host=host,
        tracker_port=port,
        key=key,
        tvm_target=dict(target) if target else None,
        cc=cc,
        wait_s=300.0 if wait is None else min(wait, MAX_WAIT_S),
        session_timeout_s=3600.0 if timeout is None else min(timeout, MAX_WAIT_S),
    )


def parse_tracker(check: _Checker, value: Any, path: str) -> tuple[str | None, int]:
    """``host:port`` of a TVM RPC tracker (``[v6addr]:port`` too)."""
    if not isinstance(value, str) or ":" not in value:
        check.problem(path, "must be 'host:port', e.g. 127.0.0.1:9190")
        return None, 0
    host, _, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not host or len(host) > 253 or any(c.isspace() or c in "/@?#" for c in host):
        check.problem(path, f"'{host}' is not a host name or address")
        return None, 0
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        check.problem(path, f"port must be a number from 1 to 65535, got '{port_text}'")
        return None, 0
    return host, int(port_text)


def _units(check: _Checker, raw: Any) -> list[Unit]:
    if not isinstance(raw, list) or not raw:
        check.problem("units", "must be a non-empty list of compute units")
        return []
    units, seen = [], set()
    for i, item in enumerate(raw):
        path = f"units[{i}]"
        if not isinstance(item, Mapping):
            check.problem(path, "must be a mapping")
            continue
        check.keys(item, path, _UNIT_KEYS, required=("name", "kind"))
        name = check.text(item.get("name"), f"{path}.name")
        if name in seen:
            check.problem(f"{path}.name", f"unit '{name}' is defined twice")
        seen.add(name)
        cores = check.number(item.get("cores"), f"{path}.cores", integer=True, positive=True)
        clusters = check.number(
            item.get("clusters"), f"{path}.clusters", integer=True, positive=True
        )
        if cores and clusters and cores % clusters:
            check.problem(f"{path}.cores", f"{cores} cores do not split into {clusters} clusters")
        local = check.number(
            item.get("local_buffer_bytes"), f"{path}.local_buffer_bytes", integer=True
        )
        global_ = check.number(
            item.get("global_buffer_bytes"), f"{path}.global_buffer_bytes", integer=True
        )
        if local is not None and global_ is not None and local > global_:
            check.problem(
                f"{path}.local_buffer_bytes",
                f"local buffer ({local} bytes) is larger than the global buffer ({global_} bytes)",
            )
        units.append(
            Unit(
                name=name,
                kind=check.choice(item.get("kind"), f"{path}.kind", UNIT_KINDS),
                cores=cores,
                clusters=clusters,
                frequency_ghz=check.number(
                    item.get("frequency_ghz"), f"{path}.frequency_ghz", positive=True
                ),
                peak_gflops=_peaks(check, item.get("peak_gflops", {}), f"{path}.peak_gflops"),
                mem_bw_gbps=check.number(
                    item.get("mem_bw_gbps"), f"{path}.mem_bw_gbps", positive=True
                ),
                launch_us=check.number(item.get("launch_us"), f"{path}.launch_us"),
                supports=_supports(check, item.get("supports", "all"), f"{path}.supports"),
                local_buffer_bytes=local,
                global_buffer_bytes=global_,
                global_buffer_bw_gbps=check.number(
                    item.get("global_buffer_bw_gbps"),
                    f"{path}.global_buffer_bw_gbps",
                    positive=True,
                ),
                efficiency=_efficiency(check, item.get("efficiency", {}), f"{path}.efficiency"),
                description=str(item.get("description") or ""),
                source=check.source(item.get("source"), f"{path}.source"),
            )
        )
    return units


def _peaks(check: _Checker, raw: Any, path: str) -> dict[str, float | None]:
    if not isinstance(raw, Mapping):
        check.problem(path, "must map a dtype to GFLOPS")
        return {}
    peaks = {}
    for dtype, value in raw.items():
        if dtype not in DTYPES:
            check.problem(f"{path}.{dtype}", f"unknown dtype; known: {', '.join(DTYPES)}")
            continue
        peaks[dtype] = check.number(value, f"{path}.{dtype}", positive=True)
    return peaks


def _supports(check: _Checker, raw: Any, path: str) -> str | tuple[str, ...]:
    if raw == "all":
        return "all"
    if not isinstance(raw, list) or not all(isinstance(op, str) and op for op in raw):
        check.problem(path, "must be 'all' or a list of op types")
        return "all"
    return tuple(raw)


def _efficiency(check: _Checker, raw: Any, path: str) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        check.problem(path, "must map an op type to a factor")
        return {}
    factors = {}
    for op_type, value in raw.items():
        factor = check.number(value, f"{path}.{op_type}", positive=True)
        if value is None:
            check.problem(f"{path}.{op_type}", "a factor cannot be null; leave the op type out")
        elif factor is not None:
            factors[str(op_type)] = factor
    return factors


def _links(check: _Checker, raw: Any, unit_names: set[str]) -> list[Link]:
    if not isinstance(raw, list):
        check.problem("links", "must be a list")
        return []
    links, pairs = [], set()
    for i, item in enumerate(raw):
        path = f"links[{i}]"
        if not isinstance(item, Mapping):
            check.problem(path, "must be a mapping")
            continue
        check.keys(item, path, _LINK_KEYS, required=("from", "to"))
        src, dst = item.get("from"), item.get("to")
        for end, value in (("from", src), ("to", dst)):
            if value is not None and value not in unit_names:
                check.problem(f"{path}.{end}", f"no unit named '{value}'")
        if src is not None and src == dst:
            check.problem(path, "a link must join two different units")
        if (src, dst) in pairs:
            check.problem(path, f"a second link from '{src}' to '{dst}'")
        pairs.add((src, dst))
        zero_copy = check.flag(item.get("zero_copy", False), f"{path}.zero_copy")
        links.append(
            Link(
                src=str(src),
                dst=str(dst),
                latency_us=check.number(item.get("latency_us"), f"{path}.latency_us"),
                gbps=check.number(item.get("gbps"), f"{path}.gbps", positive=True),
                zero_copy=zero_copy,
                bidirectional=check.flag(item.get("bidirectional", True), f"{path}.bidirectional"),
                source=check.source(item.get("source"), f"{path}.source"),
            )
        )
    return links


def _power(check: _Checker, raw: Any, unit_names: set[str]) -> dict[str, Power]:
    if not isinstance(raw, Mapping):
        check.problem("power", "must map a unit name to its power")
        return {}
    power = {}
    for name, item in raw.items():
        path = f"power.{name}"
        if name not in unit_names:
            check.problem(path, f"no unit named '{name}'")
        if not isinstance(item, Mapping):
            check.problem(path, "must be a mapping")
            continue
        check.keys(item, path, _POWER_KEYS)
        active = check.number(item.get("active_w"), f"{path}.active_w")
        idle = check.number(item.get("idle_w"), f"{path}.idle_w")
        if active is not None and idle is not None and idle > active:
            check.problem(f"{path}.idle_w", f"idle power ({idle} W) exceeds active ({active} W)")
        power[str(name)] = Power(active, idle, check.source(item.get("source"), f"{path}.source"))
    return power


def _networks(check: _Checker, document: Mapping) -> list[Network]:
    raw = document.get("networks", [])
    if "network" in document:
        if "networks" in document:
            check.problem("network", "give either 'network' or 'networks', not both")
        single = document["network"]
        if single and not isinstance(single, Mapping):
            check.problem("network", "must be a mapping")
            return []
        raw = [{"name": "default", **single}] if single else []
    if not isinstance(raw, list):
        check.problem("networks", "must be a list")
        return []
    networks, seen = [], set()
    for i, item in enumerate(raw):
        path = f"networks[{i}]"
        if not isinstance(item, Mapping):
            check.problem(path, "must be a mapping")
            continue
        check.keys(item, path, _NETWORK_KEYS, required=("name",))
        name = check.text(item.get("name"), f"{path}.name")
        if name in seen:
            check.problem(f"{path}.name", f"network '{name}' is defined twice")
        seen.add(name)
        networks.append(
            Network(
                name=name,
                rtt_ms=check.number(item.get("rtt_ms"), f"{path}.rtt_ms"),
                up_mbps=check.number(item.get("up_mbps"), f"{path}.up_mbps", positive=True),
                down_mbps=check.number(item.get("down_mbps"), f"{path}.down_mbps", positive=True),
                radio_w=check.number(item.get("radio_w"), f"{path}.radio_w"),
                source=check.source(item.get("source"), f"{path}.source"),
            )
        )
    return networks


class _Checker:
    """Collects problems; each check returns a usable value (or None) so validation goes on."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def problem(self, path: str, reason: str) -> None:
        self.problems.append((path, reason))

    def keys(
        self, item: Mapping, path: str, allowed: frozenset[str], required: tuple[str, ...] = ()
    ) -> None:
        prefix = f"{path}." if path else ""
        for key in item:
            if key not in allowed:
                self.problem(f"{prefix}{key}", "unknown field")
        for key in required:
            if item.get(key) is None:
                self.problem(f"{prefix}{key}", "is required")

    def text(self, value: Any, path: str) -> str:
        if value is None:
            return ""
        if not isinstance(value, str) or not value.strip():
            self.problem(path, "must be a non-empty string")
            return str(value)
        return value

    def choice(self, value: Any, path: str, allowed: tuple[str, ...]) -> str:
        if value is not None and value not in allowed:
            self.problem(path, f"unknown value '{value}'; expected one of {', '.join(allowed)}")
        return str(value)

    def flag(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            self.problem(path, "must be true or false")
            return False
        return value

    def number(
        self, value: Any, path: str, *, integer: bool = False, positive: bool = False
    ) -> Any:
        """``None`` stays ``None`` (unknown); anything else must be a finite number >= 0."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem(path, f"must be a number or null, got {value!r}")
            return None
        if value != value or value in (float("inf"), float("-inf")):
            self.problem(path, "must be finite")
            return None
        if integer and value != int(value):
            self.problem(path, f"must be a whole number, got {value}")
            return None
        if value < 0 or (positive and value == 0):
            self.problem(path, f"must be {'positive' if positive else 'non-negative'}, got {value}")
            return None
        return int(value) if integer else float(value)

    def source(self, value: Any, path: str) -> Source:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            return dict(value)
        self.problem(path, "must be a citation string or a mapping of field to citation")
        return None
