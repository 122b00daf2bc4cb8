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
