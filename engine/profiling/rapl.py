"""Measured package energy from the RAPL counters of x86 CPUs (Linux powercap).

Intel's and AMD's (Zen, Linux 5.8+) running-average-power-limit counters appear under
``/sys/class/powercap/intel-rapl:<package>/energy_uj`` (AMD's through the same driver);
each counts the microjoules its package drew, wrapping at ``max_energy_range_uj``. The
profile stage reads them before and after timing the whole model: the difference over the
runs is the package energy per inference, measured. It counts the whole package, so other
processes running meanwhile are in it too, and it has no idle baseline (the thesis's
``P_active - P_idle``): the result says both.

Since Linux 5.10 (CVE-2020-8694, the Platypus attack) ``energy_uj`` is readable by root
only; in a container the directory is often absent. Either way the energy is not 0 but
unavailable, and the result says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
METHOD = "RAPL package energy counters (Linux powercap energy_uj), read around the runs"


@dataclass(frozen=True)
class Zone:
    """One package's counter: its powercap directory and where it wraps."""

    name: str
    path: Path
    max_uj: int | None


@dataclass(frozen=True)
class Counters:
    """The readable package counters of this machine."""

    zones: tuple[Zone, ...]

    def read(self) -> tuple[tuple[int, ...], float]:
        """Every package's counter in microjoules, and the clock (s) it was read at."""
        return tuple(_read_int(z.path / "energy_uj") for z in self.zones), time.perf_counter()

    def joules(self, before: tuple[int, ...], after: tuple[int, ...]) -> float:
        """Energy drawn between two readings, one counter wrap per package allowed for."""
        total = 0
        for zone, a, b in zip(self.zones, before, after, strict=True):
            delta = b - a
            if delta < 0:
                if zone.max_uj is None:
                    raise OSError(f"{zone.name}: the counter wrapped and its range is unknown")
                delta += zone.max_uj
            total += delta
        return total / 1e6


def open_counters(root: Path = POWERCAP) -> Counters | str:
    """The package counters under ``root``, or the reason they cannot be read."""
    if not root.is_dir():
        return f"no powercap interface ({root} does not exist: not Linux, or not exposed here)"
    packages = sorted(
        p
        for p in root.iterdir()
        if p.name.split(":")[0] in ("intel-rapl", "amd-rapl") and p.name.count(":") == 1
    )
    if not packages:
        return f"no RAPL package zone under {root} (not an x86 CPU, or the driver is not loaded)"
    zones = []
    for path in packages:
        try:
            _read_int(path / "energy_uj")
        except PermissionError:
            return (
                f"{path / 'energy_uj'} is not readable by this user (root only since Linux "
                "5.10, CVE-2020-8694)"
            )
        except (OSError, ValueError) as e:
            return f"{path / 'energy_uj'} cannot be read: {e}"
        try:
            limit: int | None = _read_int(path / "max_energy_range_uj")
        except (OSError, ValueError):
            limit = None
        name = _read_text(path / "name") or path.name
        zones.append(Zone(name, path, limit))
    return Counters(tuple(zones))


def measured_energy(
    counters: Counters | str,
    before: tuple[tuple[int, ...], float] | None,
    after: tuple[tuple[int, ...], float] | None,
    runs: int,
) -> dict:
    """The result entry: package energy per run, measured, or why it is unavailable."""
    if isinstance(counters, str):
        return {"measured": False, "energy_mj_per_run": None, "reason": f"unavailable: {counters}"}
    if before is None or after is None or runs <= 0:
        return {"measured": False, "energy_mj_per_run": None, "reason": "unavailable: no runs"}
    try:
        joules = counters.joules(before[0], after[0])
    except OSError as e:
        return {"measured": False, "energy_mj_per_run": None, "reason": f"unavailable: {e}"}
    seconds = after[1] - before[1]
    return {
        "measured": True,
        "method": METHOD,
        "zones": [z.name for z in counters.zones],
        "runs": runs,
        "seconds": round(seconds, 6),
        "package_j": round(joules, 6),
        "energy_mj_per_run": round(joules * 1e3 / runs, 6),
        "mean_power_w": round(joules / seconds, 3) if seconds > 0 else None,
        "reason": None,
        "note": "the whole package, other processes included; no idle baseline subtracted",
    }


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
