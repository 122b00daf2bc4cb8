"""The outcome of a node-suite run: one result per case, the counts, the reasons
grouped by kind, and the report as a plain-text or Markdown table."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field

from engine.accuracy.metrics import Thresholds
from engine.errors import error_line

STAGES = ("import", "compile", "run", "compare")
"""Where a case can stop, in order; ``""`` for a case skipped before the candidate saw it."""


@dataclass(frozen=True)
class CaseResult:
    """One case's outcome: ``status`` pass / fail / skip, the ``stage`` it stopped at, the
    reason, the worst output's SNR and absolute error, and a ``note`` (e.g. nodes the
    candidate delegated while the rest passed)."""

    name: str
    op_type: str
    status: str
    stage: str
    reason: str = ""
    snr_db: float | None = None
    max_abs: float | None = None
    note: str = ""
    seconds: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def case_result(case, status, stage, reason, snr_db=None, max_abs=None, note="") -> CaseResult:
    """``case``'s :class:`CaseResult`."""
    return CaseResult(case.name, case.op_type, status, stage, reason, snr_db, max_abs, note)


def describe_error(error: Exception) -> str:
    """An error as a result's reason: its type and its message's line."""
    return f"{type(error).__name__}: {error_line(error)}"[:400]


@dataclass
class NodeSuiteReport:
    """Per-case outcomes of one candidate, with counts a user can read as a table."""

    candidate: str
    source: str
    thresholds: Thresholds
    results: list[CaseResult] = field(default_factory=list)
    seconds: float | None = None

    def counts(self) -> dict[str, int]:
        """``cases``; ``imported`` (the candidate accepted the model), ``compiled`` (it
        built it), ``ran`` (it ran to the comparison); and how many ``passed``, ``failed``
        and were ``skipped``."""
        by_status = Counter(r.status for r in self.results)
        reached = Counter(r.stage for r in self.results)
        return {
            "cases": len(self.results),
            "imported": sum(reached[s] for s in STAGES[1:]),
            "compiled": sum(reached[s] for s in STAGES[2:]),
            "ran": reached["compare"],
            "passed": by_status["pass"],
            "failed": by_status["fail"],
            "skipped": by_status["skip"],
        }

    def to_dict(self) -> dict:
        return {
            "candidate": self.candidate,
            "source": self.source,
            "seconds": self.seconds,
            "thresholds": self.thresholds.to_dict(),
            "counts": self.counts(),
            "skip_reasons": self.reason_counts("skip"),
            "fail_reasons": self.reason_counts("fail"),
            "failures": [r.to_dict() for r in self.results if r.status == "fail"],
            "cases": [r.to_dict() for r in self.results],
        }

    def reason_counts(self, status: str) -> dict[str, int]:
        """How many cases of ``status`` share each reason (without case-specific detail)."""
        kinds = (_reason_kind(r.reason, self.candidate) for r in self.results if r.status == status)
        return dict(Counter(kinds).most_common())

    def table(self, *, status: Collection[str] = ("fail", "skip")) -> str:
        """Plain-text table: the counts, then one line per case of the given statuses."""
        counts = self.counts()
        lines = [
            f"candidate {self.candidate} on {counts['cases']} onnx node cases ({self.source})",
            "  ".join(f"{k} {v}" for k, v in counts.items()),
            "",
            f"{'case':<48} {'op':<22} {'status':<6} {'stage':<8} reason",
        ]
        lines += [
            f"{r.name:<48} {r.op_type:<22} {r.status:<6} {r.stage:<8} {r.reason}"
            for r in self.results
            if r.status in status
        ]
        return "\n".join(lines)

    def markdown(self) -> str:
        """Operator coverage as Markdown: the counts, the reasons grouped, one row per
        operator (cases, pass, fail, skip and why), then every failing case."""
        counts = self.counts()
        lines = [
            f"# onnx node tests with candidate `{self.candidate}`",
            "",
            f"{counts['cases']} cases from `{self.source}`"
            + (f", {self.seconds:.0f} s" if self.seconds is not None else "")
            + ". A case stops at the first stage it does not get through: import (the "
            "candidate accepts the model), compile, run, compare (with the expected outputs, "
            f"max_rel {self.thresholds.max_rel}, SNR {self.thresholds.snr_db} dB).",
            "",
            "| " + " | ".join(counts) + " |",
            "|" + "---:|" * len(counts),
            "| " + " | ".join(str(v) for v in counts.values()) + " |",
        ]
        for status, title in (("fail", "Failures"), ("skip", "Skips")):
            reasons = self.reason_counts(status)
            if reasons:
                lines += ["", f"## {title} by reason", "", "| cases | reason |", "|---:|---|"]
                lines += [f"| {n} | {_cell(reason)} |" for reason, n in reasons.items()]
        lines += [
            "",
            "## Operators",
            "",
            "`(expanded)`: the operator's function body, as separate nodes.",
            "",
            "| operator | cases | pass | fail | skip | why not passed |",
            "|---|---:|---:|---:|---:|---|",
        ]
        by_op: dict[str, list[CaseResult]] = {}
        for r in self.results:
            by_op.setdefault(r.op_type, []).append(r)
        for op, results in sorted(by_op.items(), key=lambda item: item[0].lower()):
            statuses = Counter(r.status for r in results)
            why = Counter(
                f"{r.status}: {_reason_kind(r.reason, self.candidate)}"
                for r in results
                if r.status != "pass"
            )
            text = "; ".join(f"{k} ({n})" if n > 1 else k for k, n in why.most_common())
            lines.append(
                f"| {op} | {len(results)} | {statuses['pass']} | {statuses['fail']} | "
                f"{statuses['skip']} | {_cell(text)} |"
            )
        failed = [r for r in self.results if r.status == "fail"]
        if failed:
            lines += [
                "",
                "## Failing cases",
                "",
                "Reasons cut at 240 characters; the JSON report has them whole.",
                "",
                "| case | stage | reason |",
                "|---|---|---|",
            ]
            lines += [f"| {r.name} | {r.stage} | {_cell(r.reason[:240])} |" for r in failed]
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """``text`` fit for a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


_REASON_HEADS = (
    "cannot import: the nodes that fall back to onnxruntime do not load there",
    "cannot import",
    "unsupported at run time",
    "not compiled, fell back",
    "compile failed",
    "cannot load the build",
    "failed to run",
    "known deviation",
)


_REASON_DETAILS = tuple(
    (re.compile(pattern), label)
    for pattern, label in (
        (r"^((?:crashed: .+?|timed out after \S+ s) during \w+)", "{0}"),
        (r"IR version: (\d+)", "IR version {0} is newer than the runtime reads"),
        (r"Opset (\d+) is", "opset {0} is newer than the runtime knows"),
        (r"ValidateOpsetForDomain", "opset newer than the runtime knows"),
        (r"implementation for (\w+)\((\d+)\)", "no kernel for {0}-{1}"),
        (r"([\w.]+:\w+)\(-?\d+\) is not a registered", "unknown operator {0}"),
        (r"while running (\w+) node", "error while running {0}"),
        (r"Numpy_type \d+ can't be converted", "onnxruntime's Python binding takes no such dtype"),
        (r"has no converter for \w+", "TVM has no converter for the operator"),
        (r"dtype \S+, expected", "wrong dtype"),
        (r"shape \S+ instead of", "wrong shape"),
        (r"NaN/inf values do not match", "NaN/inf values differ"),
        (r"(?:max_abs|mean_rel|max_rel|cosine|snr_db|top1|top5) \S+ [<>]", "wrong values"),
    )
)


def _reason_kind(reason: str, candidate: str = "") -> str:
    """The reason without case-specific detail, to count cases by it: its head (where it
    failed) and the kind of error, else the start of the message."""
    text = re.sub(f"(^|: ){re.escape(candidate)}: ", r"\1", reason) if candidate else reason
    head = next((h for h in _REASON_HEADS if text.startswith(h)), "")
    for pattern, label in _REASON_DETAILS:
        found = pattern.search(text)
        if found:
            detail = label.format(*found.groups())
            return f"{head}: {detail}" if head else detail
    if not head:
        return text.split(":")[0].split("'")[0].strip() or text
    # Error messages go on with paths, names, sizes and TVM's error context: keep the gist.
    gist = _NOISE.sub("", text[len(head) :]).lstrip(": ")
    gist = re.split(r"\[|\{|ErrorContext", gist)[0]
    return f"{head}: {gist[:100].rstrip(' :,')}"


_NOISE = re.compile(
    r"\[ONNXRuntimeError\] : \d+ : \w+ : |Load model from \S+ failed:| \(\d+ vs\. \d+\)"
    r"|\(\d+ nodes\): "
)
