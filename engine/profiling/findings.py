"""Automatic findings in plain words, from stored profile results (their ``to_dict()`` form).

The findings a workbench should surface follow the DNNTune thesis (ch.3, section 5 of the
summary): no unit or thread count wins everywhere, low-end GPUs can lose to the CPU, small
models do not scale with threads, a few ops usually dominate. Every finding says whether
it rests on measured or predicted numbers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

TOP_OPS = 5
NO_GAIN = 0.95
"""More threads (or a unit) count as "no faster" unless they cut latency by over 5%."""
DEPLOYABLE_MS = 200.0
"""The thesis's threshold for "OK on device" (L614)."""


@dataclass
class Finding:
    kind: str
    severity: str  # info | warning
    text: str
    basis: str  # measured | predicted
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def profile_findings(
    profile: Mapping, unit: str | None = None, top: int = TOP_OPS
) -> list[Finding]:
    """Where the time goes in one profile (measured, or predicted on ``unit``)."""
    basis, ops = _op_latencies(profile, unit)
    total = sum(latency for _, _, latency in ops)
    if not ops or total <= 0:
        return []
    where = _where(profile, unit)
    slowest = sorted(ops, key=lambda o: -o[2])[:top]
    share = 100.0 * sum(o[2] for o in slowest) / total
    findings = [
        Finding(
            "top_ops",
            "info",
            f"These {len(slowest)} ops take {share:.0f}% of the {basis} time{where}: "
            + ", ".join(
                f"{name} ({op_type}, {100 * t / total:.0f}%)" for name, op_type, t in slowest
            )
            + ".",
            basis,
            {"ops": [name for name, _, _ in slowest], "share_pct": share},
        )
    ]
    by_type: dict[str, float] = defaultdict(float)
    for _, op_type, latency in ops:
        by_type[op_type] += latency
    op_type, time_us = max(by_type.items(), key=lambda kv: kv[1])
    type_share = 100.0 * time_us / total
    if type_share >= 50.0:
        count = sum(1 for _, t, _ in ops if t == op_type)
        findings.append(
            Finding(
                "dominant_op_type",
                "info",
                f"{op_type} ops ({count} of {len(ops)}) take {type_share:.0f}% of the {basis} "
                f"time{where}.",
                basis,
                {"op_type": op_type, "share_pct": type_share},
            )
        )
    return findings


def sweep_findings(sweep: Mapping) -> list[Finding]:
    """Thread counts that do not help, batch sizes that do not raise throughput."""
    points = sorted((p for p in sweep["points"] if p["status"] == "ok"), key=lambda p: p["value"])
    findings = []
    failed = [p for p in sweep["points"] if p["status"] != "ok"]
    for p in failed:
        findings.append(
            Finding(
                f"{sweep['kind']}_failed",
                "warning",
                f"{sweep['kind']} = {p['value']} failed: {p['error']}",
                "measured",
                {"value": p["value"]},
            )
        )
    if sweep["kind"] == "threads":
        for low, high in zip(points, points[1:], strict=False):
            a, b = low["latency_ms"]["median"], high["latency_ms"]["median"]
            if b >= NO_GAIN * a:
                findings.append(
                    Finding(
                        "threads_no_gain",
                        "warning",
                        f"{high['value']} threads are no faster than {low['value']} "
                        f"({b:.2f} ms vs {a:.2f} ms, measured).",
                        "measured",
                        {"threads": high["value"], "than": low["value"], "ms": [b, a]},
                    )
                )
    elif sweep["kind"] == "batch" and len(points) > 1:
        first, best = points[0], max(points, key=lambda p: p["throughput_per_s"])
        gain = best["throughput_per_s"] / first["throughput_per_s"]
        if gain < 1 / NO_GAIN:
            text = (
                f"Batching does not raise throughput: batch {best['value']} gives "
                f"{gain:.2f}x the throughput of batch {first['value']} (measured)."
            )
        else:
            text = (
                f"Batch {best['value']} gives {gain:.1f}x the throughput of batch "
                f"{first['value']} ({best['throughput_per_s']:.1f} vs "
                f"{first['throughput_per_s']:.1f} inferences/s, measured)."
            )
        findings.append(Finding("batch_throughput", "info", text, "measured", {"gain": gain}))
    return findings


def unit_findings(predicted: Mapping) -> list[Finding]:
    """Comparisons between the units of a predicted profile (GPU slower than CPU, ...)."""
    model = predicted.get("model", "the cost model")
    units = predicted["units"]
    findings = []
    complete = [u for u in units if u["complete"] and u["latency_ms"] is not None]
    cpus = [u for u in complete if u["kind"] == "cpu"]
    best_cpu = min(cpus, key=lambda u: u["latency_ms"]) if cpus else None
    for u in complete:
        if best_cpu is None or u["kind"] == "cpu":
            continue
        label = u["kind"].upper()
        slower = u["latency_ms"] > best_cpu["latency_ms"]
        findings.append(
            Finding(
                f"{u['kind']}_vs_cpu",
                "warning" if slower else "info",
                f"{label} ({u['name']}) {'slower' if slower else 'faster'} than CPU "
                f"({best_cpu['name']}) for this model: {u['latency_ms']:.2f} ms vs "
                f"{best_cpu['latency_ms']:.2f} ms (predicted by {model}).",
                "predicted",
                {"unit": u["name"], "cpu": best_cpu["name"]},
            )
        )
    for u in units:
        if u["unsupported"]:
            kinds = _op_types(predicted, u["unsupported"])
            findings.append(
                Finding(
                    "unsupported_ops",
                    "warning",
                    f"{u['name']} cannot run {len(u['unsupported'])} ops "
                    f"({', '.join(kinds[:6])}{', ...' if len(kinds) > 6 else ''}); they must run "
                    "on another unit.",
                    "predicted",
                    {"unit": u["name"], "ops": u["unsupported"]},
                )
            )
        elif u["latency_ms"] is None or u["unknown"]:
            findings.append(
                Finding(
                    "unknown_numbers",
                    "info",
                    f"{u['name']}: no prediction for {len(u['unknown'])} ops, its throughput or "
                    "bandwidth is unknown; fill them in to predict it.",
                    "predicted",
                    {"unit": u["name"]},
                )
            )
    energies = [u for u in complete if u["energy_j"] is not None]
    if len(energies) > 1:
        frugal = min(energies, key=lambda u: u["energy_j"])
        fastest = min(complete, key=lambda u: u["latency_ms"])
        if frugal["name"] != fastest["name"]:
            findings.append(
                Finding(
                    "energy_vs_latency",
                    "info",
                    f"The fastest unit ({fastest['name']}) is not the most frugal: "
                    f"{frugal['name']} uses {frugal['energy_j'] * 1e3:.1f} mJ per inference "
                    f"(predicted by {model}).",
                    "predicted",
                    {"fastest": fastest["name"], "frugal": frugal["name"]},
                )
            )
    if complete and min(u["latency_ms"] for u in complete) > DEPLOYABLE_MS:
        findings.append(
            Finding(
                "slow_everywhere",
                "warning",
                f"Over {DEPLOYABLE_MS:.0f} ms on every unit (predicted by {model}): a candidate "
                "for offloading to a server.",
                "predicted",
                {},
            )
        )
    return findings


def find_all(
    profile: Mapping | None = None,
    sweeps: Iterable[Mapping] = (),
    predicted: Mapping | None = None,
) -> list[Finding]:
    """Every finding for a set of results, warnings first."""
    findings: list[Finding] = []
    if profile is not None:
        findings += profile_findings(profile)
    for sweep in sweeps:
        findings += sweep_findings(sweep)
    if predicted is not None:
        findings += unit_findings(predicted)
        if profile is None:
            findings += profile_findings(predicted)
    return sorted(findings, key=lambda f: f.severity != "warning")


def _op_latencies(profile: Mapping, unit: str | None) -> tuple[str, list[tuple[str, str, float]]]:
    if profile.get("measured"):
        ops = [(o["name"], o["op_type"], o["latency_us"]) for o in profile["ops"]]
        return "measured", [o for o in ops if o[2]]
    unit = unit or profile.get("best_unit")
    if unit is None:
        return "predicted", []
    ops = [(o["name"], o["op_type"], o["latency_us"].get(unit)) for o in profile["ops"]]
    return "predicted", [o for o in ops if o[2]]


def _where(profile: Mapping, unit: str | None) -> str:
    if profile.get("measured"):
        return ""
    return f" on {unit or profile.get('best_unit')} (predicted by {profile.get('model')})"


def _op_types(predicted: Mapping, names: list[str]) -> list[str]:
    wanted = set(names)
    return sorted({o["op_type"] for o in predicted["ops"] if o["name"] in wanted})
