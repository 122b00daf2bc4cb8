"""The onnx package's node test cases as an external test suite for a candidate.

Each case is a one-operator model with inputs and expected outputs written by the ONNX
authors (``onnx/backend/test/data/node/<case>/model.onnx`` and
``test_data_set_0/{input,output}_<j>.pb``). A candidate runs every case and its outputs
are compared with the expected ones using our metrics, so the run checks both the
candidate (operator coverage and correctness) and, with onnxruntime as the candidate,
our comparison itself.

Outcomes: ``pass``; ``fail`` (wrong values or dtype, or a crash while running a model it
loaded); ``skip`` with the reason: the candidate cannot import the model (an operator,
type, opset or IR version it does not support) or says while running that it does not
support the usage, the case has sequence / optional / map values (not compared), its
outputs are random draws, or the case is a known deviation of that candidate from the
spec (``KNOWN_DEVIATIONS``, each with its source). Some onnx wheels leave the data out;
the cases are then generated in memory from the same definitions
(``onnx.backend.test.case.node``, which ``onnx.backend.test.cmd_tools generate-data``
writes to those files).
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from engine.accuracy.candidates import Candidate, make_candidate
from engine.accuracy.errors import CandidateError
from engine.accuracy.metrics import Thresholds, compare_tensors, judge
from engine.errors import ProgressFn

NODE_DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
RANDOM_OPS = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)
UNSUPPORTED_MARKERS = ("NOT_IMPLEMENTED", "not supported", "is not defined for")
"""Words with which a runtime says, while running, that it does not support a usage."""

KNOWN_DEVIATIONS = {
    "ort": {
        "test_maxunpool_export_with_output_shape": "listed in onnxruntime's backend-test "
        "filters (result mismatch)",
        "test_resize_downsample_scales_cubic_align_corners": "listed in onnxruntime's "
        "backend-test filters (results mismatch with onnx tests)",
        "test_resize_downsample_scales_linear_align_corners": "listed in onnxruntime's "
        "backend-test filters (results mismatch with onnx tests)",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal": "masked "
        "scores in qk_matmul_output are float32's lowest value where the spec writes -inf",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal": "masked "
        "scores in qk_matmul_output are float32's lowest value where the spec writes -inf",
        "test_attention_4d_diff_heads_mask4d_padded_kv": "onnxruntime rejects the mask and "
        "past lengths the spec allows (inconsistent total_sequence_length)",
    }
}
"""Cases where a candidate is known to disagree with the ONNX spec: a failure there is a
skip with this reason (the runtime does not support that usage); a pass stays a pass."""


@dataclass(frozen=True)
class NodeCase:
    """One test case: a model, its inputs (by graph input) and the expected outputs."""

    name: str
    model: onnx.ModelProto
    inputs: list
    outputs: list

    @property
    def op_type(self) -> str:
        return self.model.graph.node[0].op_type if self.model.graph.node else ""


@dataclass(frozen=True)
class CaseResult:
    name: str
    op_type: str
    status: str
    stage: str
    reason: str = ""
    snr_db: float | None = None
    max_abs: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class NodeSuiteReport:
    """Per-case outcomes of one candidate, with counts a user can read as a table."""

    candidate: str
    source: str
    thresholds: Thresholds
    results: list[CaseResult] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """``cases``, ``imported`` (the candidate loaded the model), ``ran``, and how many
        ``passed``, ``failed`` and were ``skipped``."""
        by_status = Counter(r.status for r in self.results)
        return {
            "cases": len(self.results),
            "imported": sum(r.stage in ("run", "compare") for r in self.results),
            "ran": sum(r.stage == "compare" for r in self.results),
            "passed": by_status["pass"],
            "failed": by_status["fail"],
            "skipped": by_status["skip"],
        }

    def to_dict(self) -> dict:
        return {
            "candidate": self.candidate,
            "source": self.source,
            "thresholds": self.thresholds.to_dict(),
            "counts": self.counts(),
            "skip_reasons": self.reason_counts("skip"),
            "failures": [r.to_dict() for r in self.results if r.status == "fail"],
            "cases": [r.to_dict() for r in self.results],
        }

    def reason_counts(self, status: str) -> dict[str, int]:
        """How many cases of ``status`` share each reason (the first clause of it)."""
        return dict(
            Counter(
                _reason_kind(r.reason) for r in self.results if r.status == status
            ).most_common()
        )

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


def node_cases(
    root: str | Path | None = None, *, names: Collection[str] | None = None
) -> Iterator[NodeCase]:
    """The node test cases, sorted by name: from ``root`` (default: the installed onnx's
    data directory), or generated from onnx's case definitions when it has no data."""
    root = Path(root) if root is not None else NODE_DATA_DIR
    wanted = set(names) if names is not None else None
    if root.is_dir():
        for case_dir in sorted(p for p in root.iterdir() if (p / "model.onnx").is_file()):
            if wanted is None or case_dir.name in wanted:
                yield _read_case(case_dir)
        return
    for case in _generated_cases():
        if wanted is None or case.name in wanted:
            yield case


def run_node_suite(
    candidate: str | Callable[[onnx.ModelProto], Candidate] = "ort",
    cases: Collection[NodeCase] | None = None,
    *,
    thresholds: Thresholds | None = None,
    progress: ProgressFn | None = None,
) -> NodeSuiteReport:
    """Run ``candidate`` (a name for ``make_candidate`` or a factory) on every case.

    ``thresholds`` default to :meth:`Thresholds.strict` (the node tests' own rtol 1e-3):
    a single operator in fp32 has no reason to be further off.
    """
    factory = candidate if callable(candidate) else (lambda m: make_candidate(candidate, m))
    label = candidate if isinstance(candidate, str) else getattr(candidate, "__name__", "custom")
    known = KNOWN_DEVIATIONS.get(label, {})
    cases = list(cases) if cases is not None else list(node_cases())
    source = str(NODE_DATA_DIR) if NODE_DATA_DIR.is_dir() else "onnx.backend.test.case.node"
    report = NodeSuiteReport(label, source, thresholds or Thresholds.strict())
    for i, case in enumerate(cases):
        if progress and i % 50 == 0:
            progress(i / max(len(cases), 1), f"node case {i + 1}/{len(cases)}: {case.name}")
        result = run_case(factory, case, report.thresholds)
        if result.status == "fail" and case.name in known:
            result = replace(result, status="skip", reason=f"known deviation: {known[case.name]}")
        report.results.append(result)
    return report


def run_case(factory, case: NodeCase, thresholds: Thresholds) -> CaseResult:
    """Import, run and compare one case; each output is judged by ``thresholds`` loosened
    to the precision of its type (:meth:`Thresholds.for_precision`)."""
    result = _precheck(case)
    if result is not None:
        return result
    feeds = dict(zip((v.name for v in case.model.graph.input), case.inputs, strict=False))
    try:
        values = factory(case.model).run(feeds)
    except CandidateError as e:
        if e.stage != "run":
            return _result(case, "skip", "import", f"cannot import: {e.message}")
        if any(marker in e.message for marker in UNSUPPORTED_MARKERS):
            return _result(case, "skip", "run", f"unsupported at run time: {e.message}")
        return _result(case, "fail", "run", e.message)
    reasons, worst_snr, worst_abs = [], None, None
    for value_info, expected in zip(case.model.graph.output, case.outputs, strict=True):
        got = values.get(value_info.name)
        if not isinstance(got, np.ndarray):
            reasons.append(f"'{value_info.name}': no tensor returned")
            continue
        if got.dtype != expected.dtype:
            reasons.append(f"'{value_info.name}': dtype {got.dtype}, expected {expected.dtype}")
        limits = thresholds.for_precision(expected.dtype)
        metrics = compare_tensors(expected, got, rel_floor=limits.rel_floor)
        reasons += [f"'{value_info.name}': {r}" for r in judge(metrics, limits)]
        if metrics.error is None:
            worst_snr = metrics.snr_db if worst_snr is None else min(worst_snr, metrics.snr_db)
            worst_abs = metrics.max_abs if worst_abs is None else max(worst_abs, metrics.max_abs)
    status = "fail" if reasons else "pass"
    return _result(case, status, "compare", "; ".join(reasons), worst_snr, worst_abs)


def _precheck(case: NodeCase) -> CaseResult | None:
    graph = case.model.graph
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            which = value.type.WhichOneof("value")
            if which != "tensor_type":
                what = (which or "untyped").replace("_type", "")
                return _result(case, "skip", "", f"{what} {kind} '{value.name}' is not compared")
    randoms = RANDOM_OPS & {n.op_type for n in graph.node}
    if randoms:
        return _result(case, "skip", "", f"random outputs ({', '.join(sorted(randoms))})")
    if _training_dropout(case):
        return _result(case, "skip", "", "random outputs (Dropout in training mode)")
    if len(case.outputs) != len(graph.output):
        return _result(case, "skip", "", "the case has no expected value for every output")
    return None


def _training_dropout(case: NodeCase) -> bool:
    """A Dropout that draws its mask: training_mode fed as true and a ratio above 0."""
    fed = dict(zip((v.name for v in case.model.graph.input), case.inputs, strict=False))
    for node in case.model.graph.node:
        if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
            continue
        training = fed.get(node.input[2])
        ratio = fed.get(node.input[1]) if node.input[1] else 0.5
        if training is not None and bool(np.asarray(training)) and np.asarray(ratio) != 0:
            return True
    return False


def _result(case, status, stage, reason, snr_db=None, max_abs=None) -> CaseResult:
    return CaseResult(case.name, case.op_type, status, stage, reason, snr_db, max_abs)


_RUNTIME_REASONS = (
    (re.compile(r"IR version: (\d+)"), "IR version {0} is newer than the runtime reads"),
    (re.compile(r"Opset (\d+) is"), "opset {0} is newer than the runtime knows"),
    (re.compile(r"implementation for (\w+)\((\d+)\)"), "no kernel for {0}-{1}"),
    (re.compile(r"([\w.]+:\w+)\(-?\d+\) is not a registered"), "unknown operator {0}"),
)


def _reason_kind(reason: str) -> str:
    """The reason without case-specific detail, to count cases by it."""
    for pattern, label in _RUNTIME_REASONS:
        found = pattern.search(reason)
        if found:
            return label.format(*found.groups())
    head = reason.split(":")[0]
    return head.split("'")[0].strip() or reason


def _read_case(case_dir: Path) -> NodeCase:
    model = onnx.load(case_dir / "model.onnx")
    data = case_dir / "test_data_set_0"
    tensor_types = [v.type.HasField("tensor_type") for v in model.graph.input]
    inputs = [
        _read_tensor(p) if tensor_types[j] else None
        for j, p in enumerate(sorted(data.glob("input_*.pb"), key=_index))
    ]
    out_types = [v.type.HasField("tensor_type") for v in model.graph.output]
    outputs = [
        _read_tensor(p) if j < len(out_types) and out_types[j] else None
        for j, p in enumerate(sorted(data.glob("output_*.pb"), key=_index))
    ]
    return NodeCase(case_dir.name, model, inputs, outputs)


def _index(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def _read_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _generated_cases() -> list[NodeCase]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the definitions overflow casts on purpose
        from onnx.backend.test.case import node

        collected = node.collect_testcases()
    cases = []
    for case in sorted(collected, key=lambda c: c.name):
        if not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        cases.append(NodeCase(case.name, case.model, _arrays(inputs), _arrays(outputs)))
    return cases


def _arrays(values) -> list:
    """As the data files hold them: tensors as arrays (numpy scalars too)."""
    return [
        numpy_helper.to_array(v)
        if isinstance(v, onnx.TensorProto)
        else np.asarray(v)
        if isinstance(v, np.generic | np.ndarray)
        else v
        for v in values
    ]
