"""Gates: conditions on a run's headline figures that a CI job passes or fails on.

A gate is ``<figure> <op> <limit>``: ``accuracy.cosine>=0.999``,
``memory.arena_bytes<=64e6``, ``profile.latency_ms<=1.05*baseline`` (the same figure of a
baseline run, times a factor), ``accuracy.verdict==pass``. A figure whose value is
unknown fails its gate and says so: unknown is not within a limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from engine.report.headlines import KEYS

_OPS = {
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
_GATE = re.compile(r"^\s*([a-z_]+\.[a-z0-9_]+)\s*(<=|>=|==|!=|<|>)\s*(\S.*?)\s*$")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SCALED = re.compile(rf"^(?:({_NUMBER})\s*\*\s*)?baseline(?:\s*\*\s*({_NUMBER}))?$")


WORDS = {"accuracy.verdict": ("pass", "fail"), "compile.outputs_match": ("true", "false")}
"""Figures that are words, and the words they take; every other figure is a number."""


class GateError(ValueError):
    """A gate expression that cannot be read; the message says what is wrong."""


@dataclass(frozen=True)
class Gate:
    expression: str
    key: str
    op: str
    number: float | None = None
    """An absolute limit, or the factor on the baseline's value when ``baseline``."""
    text: str | None = None
    """A word to compare with (``pass``, ``true``) for figures that are not numbers."""
    baseline: bool = False


@dataclass(frozen=True)
class GateResult:
    expression: str
    key: str
    passed: bool
    value: float | str | bool | None
    limit: float | str | bool | None
    unit: str
    basis: str
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def parse_gate(expression: str) -> Gate:
    """Read one gate; :class:`GateError` names what is wrong and what is allowed."""
    match = _GATE.match(expression)
    if not match:
        raise GateError(
            f"cannot read gate '{expression}': write FIGURE OP LIMIT, e.g. "
            "'accuracy.cosine>=0.999' or 'profile.latency_ms<=1.05*baseline' "
            f"(OP one of {', '.join(_OPS)})"
        )
    key, op, rhs = match.groups()
    if key not in KEYS:
        stage = key.split(".")[0]
        same_stage = [k for k in KEYS if k.startswith(stage + ".")]
        known = same_stage or sorted({k.split(".")[0] for k in KEYS})
        raise GateError(f"unknown figure '{key}' in gate '{expression}'; known: {', '.join(known)}")
    if key in WORDS:
        words = WORDS[key]
        if rhs.lower() not in words or op not in ("==", "!="):
            raise GateError(
                f"gate '{expression}': {key} is one of {', '.join(words)}; write e.g. "
                f"'{key}=={words[0]}'"
            )
        return Gate(expression, key, op, text=rhs.lower())
    scaled = _SCALED.match(rhs)
    if scaled:
        factor = float(scaled.group(1) or scaled.group(2) or 1.0)
        if scaled.group(1) and scaled.group(2):
            raise GateError(f"gate '{expression}': one factor on baseline, not two")
        return Gate(expression, key, op, number=_finite(factor, expression), baseline=True)
    if re.fullmatch(_NUMBER, rhs):
        return Gate(expression, key, op, number=_finite(float(rhs), expression))
    if re.fullmatch(r"[A-Za-z_]+", rhs):
        raise GateError(
            f"gate '{expression}': {key} is a number; compare it with a number, 'baseline' "
            "or 'N*baseline'"
        )
    raise GateError(
        f"gate '{expression}': the limit '{rhs}' is not a number, 'baseline', "
        "'N*baseline' or a word such as 'pass'"
    )


def _finite(value: float, expression: str) -> float:
    if not math.isfinite(value):
        raise GateError(f"gate '{expression}': the limit must be a finite number")
    return value


def evaluate(
    gate: Gate, figures: dict[str, dict], baseline: dict[str, dict] | None = None
) -> GateResult:
    """Check ``gate`` against a run's figures (key -> figure dict, as
    :meth:`Figure.to_dict` gives them) and, for ``baseline`` gates, the baseline run's."""
    figure = figures.get(gate.key)

    def result(passed: bool, value, limit, reason: str) -> GateResult:
        return GateResult(
            gate.expression,
            gate.key,
            passed,
            value,
            limit,
            (figure or {}).get("unit", ""),
            (figure or {}).get("basis", ""),
            reason,
        )

    if figure is None:
        stage = gate.key.split(".")[0]
        return result(
            False, None, None, f"the run has no {gate.key}: did it run the {stage} stage?"
        )
    value = figure.get("value")
    if value is None:
        return result(False, None, None, f"{gate.key} is unknown in this run ({figure['basis']})")
    if gate.text is not None:
        observed = str(value).lower()
        passed = _OPS[gate.op](observed, gate.text)
        return result(passed, value, gate.text, f"{gate.key} is {observed}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return result(False, value, None, f"{gate.key} is '{value}', not a number")
    limit = gate.number
    if gate.baseline:
        base = (baseline or {}).get(gate.key)
        if baseline is None:
            return result(False, value, None, "the gate needs a baseline run (--baseline RUN)")
        if base is None or not isinstance(base.get("value"), (int, float)):
            return result(False, value, None, f"the baseline run's {gate.key} is unknown")
        limit = gate.number * float(base["value"])
    passed = _OPS[gate.op](float(value), limit)
    noise = figure.get("noise_pct")
    reason = f"{gate.key} = {value:.6g}{' ' + figure['unit'] if figure['unit'] else ''}"
    reason += f", limit {gate.op} {limit:.6g}"
    if gate.baseline:
        reason += f" ({gate.number:g} x the baseline's {float(base['value']):.6g})"
    if noise is not None:
        reason += f"; run-to-run spread {noise:.1f}%"
    return result(passed, value, limit, reason)
