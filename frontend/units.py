"""How quantities read everywhere in the workbench: one formatter per kind of number."""

from __future__ import annotations


def format_bytes(n: float | None) -> str:
    """``1536000`` -> ``"1.54 MB"``: decimal units, in tables and figures alike."""
    if n is None:
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def format_si(n: float | None) -> str:
    """``4_100_000_000`` -> ``"4.10 G"``: MACs, FLOPs and parameter counts."""
    if n is None:
        return "—"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {prefix}"
    return f"{n:.0f} "


def format_figure(value, unit: str) -> str:
    """A headline figure for reading, in its unit; unknown says so."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if unit == "bytes":
        return format_bytes(value)
    if unit == "x":
        return f"{value:.3f}x"
    if unit in ("ms", "dB"):
        return f"{value:.3f} {unit}"
    if unit == "" and float(value).is_integer() and abs(value) >= 1000:
        return format_si(value).strip()
    return f"{value:.6g}"


def format_delta(delta: dict) -> str:
    """``{"direction": "worse", "pct": 12.3}`` -> ``"+12.3% worse"``."""
    pct = delta.get("pct")
    direction = delta.get("direction", "")
    if pct is None:
        return direction
    return f"{pct:+.1f}% {direction}" if direction not in ("same",) else "same"
